#pragma once
// FakeRfbServer: a guest's Xvnc for the API's route tests, listening on 127.0.0.1 and served on
// its own thread (FakeSandboxHost::guest_ports maps kGuestRfbPort to port()). It speaks RFB 3.8
// with security "None" over a small solid-colour screen:
//  - a FramebufferUpdateRequest that is not incremental is answered at once with the whole
//    screen in Raw; an incremental one is kept and answered when input arrives, with a 2x2 Raw
//    rectangle (the "caret" a key or a click would redraw), so a client that settles after
//    input sees one small change;
//  - after SetEncodings that include the Fence pseudo-encoding it sends a fence request, as Xvnc
//    does, and it answers every fence request the client sends;
//  - PointerEvent and KeyEvent messages are recorded, in order;
//  - SetPixelFormat, SetEncodings and ClientCutText are read and otherwise ignored (the pixels
//    are always 32-bit B, G, R, X: what deskbox's client asks for).
// A test can make it misbehave: accept connections and never greet (kSilent), close every
// connection at once (kClosing), or change the screen's size on the next input
// (ResizeOnNextInput).
//
// Threads: its own; the controls and records may be used from any thread. The destructor
// closes every connection and joins the thread.
#include "fake_service_util.h"
#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace deskbox::api::testing {

class FakeRfbServer {
 public:
  enum class Behaviour { kNormal, kSilent, kClosing };
  struct Pointer {
    uint8_t buttons;
    uint16_t x, y;
    bool operator==(const Pointer&) const = default;
  };
  struct Key {
    bool down;
    uint32_t keysym;
    bool operator==(const Key&) const = default;
  };

  // A `width`×`height` screen of one colour (B, G, R as the client stores it).
  explicit FakeRfbServer(uint16_t width = 64, uint16_t height = 40, uint8_t blue = 0x30,
                         uint8_t green = 0x80, uint8_t red = 0xd0)
      : width_(width), height_(height), pixel_{blue, green, red, 0} {
    namespace asio = boost::asio;
    port_ = ListenOnLoopback(acceptor_);
    asio::co_spawn(io_, Accept(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~FakeRfbServer() {
    boost::asio::post(io_, [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      for (auto& s : sockets_) s->close(ec);
      guard_.reset();
    });
    thread_.join();
  }
  FakeRfbServer(const FakeRfbServer&) = delete;
  FakeRfbServer& operator=(const FakeRfbServer&) = delete;

  uint16_t port() const { return port_; }

  // How connections made from now on are treated.
  void SetBehaviour(Behaviour b) {
    std::lock_guard lock(mutex_);
    behaviour_ = b;
  }
  // The next input message (on any connection) changes the screen to `width`×`height`: a
  // DesktopSize update, then the new screen when the client asks for it.
  void ResizeOnNextInput(uint16_t width, uint16_t height) {
    std::lock_guard lock(mutex_);
    resize_ = {width, height};
  }

  // Back to serving connections made from now on normally, no resize pending.
  void Reset() {
    std::lock_guard lock(mutex_);
    behaviour_ = Behaviour::kNormal;
    resize_.reset();
  }

  // Records.
  std::vector<Pointer> pointer_events() const {
    std::lock_guard lock(mutex_);
    return pointer_;
  }
  std::vector<Key> key_events() const {
    std::lock_guard lock(mutex_);
    return keys_;
  }
  void ClearKeyEvents() {
    std::lock_guard lock(mutex_);
    keys_.clear();
  }
  size_t connections() const {  // accepted so far
    std::lock_guard lock(mutex_);
    return accepted_;
  }
  size_t handshakes() const {  // connections that reached ServerInit
    std::lock_guard lock(mutex_);
    return handshakes_;
  }
  size_t fences_answered() const {  // fence requests of the client answered
    std::lock_guard lock(mutex_);
    return fences_answered_;
  }
  // Polls `done` (against the records above) until it holds or `timeout` passes.
  bool WaitFor(const std::function<bool()>& done,
               std::chrono::milliseconds timeout = std::chrono::seconds(5)) const {
    return PollUntil(done, timeout);
  }

 private:
  using Socket = boost::asio::ip::tcp::socket;
  static constexpr int32_t kEncodingDesktopSize = -223;
  static constexpr int32_t kEncodingFence = -312;
  static constexpr uint32_t kFenceRequest = 1u << 31;
  static constexpr uint32_t kFenceBlockBefore = 1u << 0;

  static void Put16(std::string& s, uint16_t v) {
    s.push_back(static_cast<char>(v >> 8));
    s.push_back(static_cast<char>(v));
  }
  static void Put32(std::string& s, uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>(v >> shift));
  }
  static uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
  static uint32_t U32(const uint8_t* p) {
    return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
  }

  // One connection's screen and what it was asked.
  struct Session {
    uint16_t width, height;
    bool update_wanted = false;  // an incremental request is waiting for a change
  };

  std::string RawRect(uint16_t x, uint16_t y, uint16_t w, uint16_t h) const {
    std::string out;
    Put16(out, x);
    Put16(out, y);
    Put16(out, w);
    Put16(out, h);
    Put32(out, 0);  // Raw
    for (size_t i = 0; i < size_t{w} * h; ++i) out.append(reinterpret_cast<const char*>(pixel_), 4);
    return out;
  }
  static std::string UpdateHeader(uint16_t rects) {
    std::string out{0, 0};  // FramebufferUpdate + padding
    Put16(out, rects);
    return out;
  }
  static std::string Fence(uint32_t flags, const std::string& payload) {
    std::string out{static_cast<char>(248), 0, 0, 0};
    Put32(out, flags);
    out.push_back(static_cast<char>(payload.size()));
    return out + payload;
  }

  boost::asio::awaitable<void> Accept() {
    namespace asio = boost::asio;
    for (;;) {
      boost::system::error_code ec;
      Socket s = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      auto sock = std::make_shared<Socket>(std::move(s));
      sockets_.insert(sock);
      asio::co_spawn(io_, Serve(sock), asio::detached);
    }
  }

  boost::asio::awaitable<void> Serve(std::shared_ptr<Socket> sock) {
    Behaviour behaviour;
    {
      std::lock_guard lock(mutex_);
      ++accepted_;
      behaviour = behaviour_;
    }
    if (behaviour != Behaviour::kClosing) co_await Talk(*sock, behaviour);
    boost::system::error_code ec;
    sock->close(ec);
    sockets_.erase(sock);
  }

  boost::asio::awaitable<void> Talk(Socket& sock, Behaviour behaviour) {
    namespace asio = boost::asio;
    boost::system::error_code ec;
    auto send = [&](const std::string& bytes) -> asio::awaitable<bool> {
      co_await asio::async_write(sock, asio::buffer(bytes),
                                 asio::redirect_error(asio::use_awaitable, ec));
      co_return !ec;
    };
    std::array<uint8_t, 64> buffer{};
    uint8_t* b = buffer.data();
    auto read = [&](size_t n) -> asio::awaitable<bool> {
      co_await asio::async_read(sock, asio::buffer(b, n),
                                asio::redirect_error(asio::use_awaitable, ec));
      co_return !ec;
    };
    if (behaviour == Behaviour::kSilent) {
      // Reads whatever comes until the client gives up.
      while (co_await read(1)) {
      }
      co_return;
    }
    // (Strings made outside co_await expressions: GCC 12 cannot keep an initializer list's
    // array across a suspension.)
    const std::string version = "RFB 003.008\n", security{1, 1}, security_ok(4, '\0');
    if (!co_await send(version) || !co_await read(12)) co_return;
    if (!co_await send(security) || !co_await read(1)) co_return;     // one type: None
    if (!co_await send(security_ok) || !co_await read(1)) co_return;  // then ClientInit
    Session session{width_, height_};
    std::string init;
    Put16(init, session.width);
    Put16(init, session.height);
    init += std::string{32, 24, 0, 1};  // 32 bpp, depth 24, little-endian, true colour
    Put16(init, 255);
    Put16(init, 255);
    Put16(init, 255);
    init += std::string{16, 8, 0, 0, 0, 0};
    const std::string name = "deskbox-test";
    Put32(init, static_cast<uint32_t>(name.size()));
    if (!co_await send(init + name)) co_return;
    {
      std::lock_guard lock(mutex_);
      ++handshakes_;
    }
    for (;;) {
      if (!co_await read(1)) co_return;
      switch (b[0]) {
        case 0:  // SetPixelFormat
          if (!co_await read(19)) co_return;
          break;
        case 2: {  // SetEncodings
          if (!co_await read(3)) co_return;
          uint16_t count = U16(b + 1);
          bool fences = false;
          for (uint16_t i = 0; i < count; ++i) {
            if (!co_await read(4)) co_return;
            fences = fences || static_cast<int32_t>(U32(b)) == kEncodingFence;
          }
          if (fences &&
              !co_await send(Fence(kFenceRequest | kFenceBlockBefore, std::string(1, '\0'))))
            co_return;
          break;
        }
        case 3: {  // FramebufferUpdateRequest
          if (!co_await read(9)) co_return;
          if (b[0]) {
            session.update_wanted = true;
          } else if (!co_await send(UpdateHeader(1) +
                                    RawRect(0, 0, session.width, session.height))) {
            co_return;
          }
          break;
        }
        case 4:  // KeyEvent
          if (!co_await read(7)) co_return;
          {
            std::lock_guard lock(mutex_);
            keys_.push_back({b[0] != 0, U32(b + 3)});
          }
          if (!co_await AfterInput(session, send)) co_return;
          break;
        case 5:  // PointerEvent
          if (!co_await read(5)) co_return;
          {
            std::lock_guard lock(mutex_);
            pointer_.push_back({b[0], U16(b + 1), U16(b + 3)});
          }
          if (!co_await AfterInput(session, send)) co_return;
          break;
        case 6: {  // ClientCutText: skipped
          if (!co_await read(7)) co_return;
          for (uint32_t left = U32(b + 3); left > 0;) {
            size_t n = std::min<uint32_t>(left, static_cast<uint32_t>(buffer.size()));
            if (!co_await read(n)) co_return;
            left -= static_cast<uint32_t>(n);
          }
          break;
        }
        case 248: {  // Fence: a request is answered with its payload; an answer is taken
          if (!co_await read(8)) co_return;
          uint32_t flags = U32(b + 3);
          size_t len = b[7];
          if (len > 64 || (len && !co_await read(len))) co_return;
          std::string payload(reinterpret_cast<const char*>(b), len);
          if (flags & kFenceRequest) {
            if (!co_await send(Fence(flags & ~kFenceRequest, payload))) co_return;
            std::lock_guard lock(mutex_);
            ++fences_answered_;
          }
          break;
        }
        default:
          co_return;  // nothing a client sends
      }
    }
  }

  // Input changes the screen: a caret redrawn, or the whole screen resized when asked for.
  template <typename Send>
  boost::asio::awaitable<bool> AfterInput(Session& session, Send& send) {
    std::optional<std::pair<uint16_t, uint16_t>> resize;
    {
      std::lock_guard lock(mutex_);
      resize = std::exchange(resize_, std::nullopt);
    }
    if (resize) {
      session.width = resize->first;
      session.height = resize->second;
      std::string rect;
      Put16(rect, 0);
      Put16(rect, 0);
      Put16(rect, session.width);
      Put16(rect, session.height);
      Put32(rect, static_cast<uint32_t>(kEncodingDesktopSize));
      session.update_wanted = false;
      co_return co_await send(UpdateHeader(1) + rect);
    }
    if (!session.update_wanted) co_return true;
    session.update_wanted = false;
    co_return co_await send(UpdateHeader(1) + RawRect(0, 0, 2, 2));
  }

  const uint16_t width_, height_;
  const uint8_t pixel_[4];
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_{
      io_.get_executor()};
  boost::asio::ip::tcp::acceptor acceptor_{io_};
  uint16_t port_ = 0;
  std::set<std::shared_ptr<Socket>> sockets_;  // the server thread's
  std::thread thread_;

  mutable std::mutex mutex_;
  Behaviour behaviour_ = Behaviour::kNormal;
  std::optional<std::pair<uint16_t, uint16_t>> resize_;
  std::vector<Pointer> pointer_;
  std::vector<Key> keys_;
  size_t accepted_ = 0, handshakes_ = 0, fences_answered_ = 0;
};

}  // namespace deskbox::api::testing
