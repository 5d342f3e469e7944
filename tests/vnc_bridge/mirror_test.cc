// FrameMirror against a scripted RFB server on loopback: readiness, input bytes, settle
// semantics (quiet period, small damage, no change, timeout), reconnects and hostile servers.
#include "vnc_bridge/mirror.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <optional>

#include "vnc_bridge/input.h"
#include "vnc_bridge/keys.h"

namespace deskbox::vnc_bridge {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace std::chrono_literals;

std::string U16(uint16_t v) {
  return {static_cast<char>(v >> 8), static_cast<char>(v)};
}
std::string U32(uint32_t v) {
  return U16(static_cast<uint16_t>(v >> 16)) + U16(static_cast<uint16_t>(v));
}
std::string RectHeader(uint16_t x, uint16_t y, uint16_t w, uint16_t h) {
  return U16(x) + U16(y) + U16(w) + U16(h) + U32(0);
}
std::string Damage(uint16_t x, uint16_t y, uint16_t w, uint16_t h, char v = 1) {
  return std::string{0, 0} + U16(1) + RectHeader(x, y, w, h) + std::string(size_t{w} * h * 4, v);
}
constexpr uint16_t kW = 320, kH = 200;
std::string Handshake() {
  return std::string("RFB 003.008\n") + std::string{1, 1} + U32(0) + U16(kW) + U16(kH) +
         std::string(16, '\0') + U32(0) + Damage(0, 0, kW, kH, 0);
}

// One scripted server connection at a time; the test pushes bytes and reads what the client sent.
class FakeServer {
 public:
  explicit FakeServer(asio::io_context& io)
      : io_(io), acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {}
  FrameMirror::Connector Connector() {
    return [this]() -> asio::awaitable<std::expected<tcp::socket, Error>> {
      tcp::socket s(io_);
      boost::system::error_code ec;
      co_await s.async_connect(acceptor_.local_endpoint(),
                               asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return std::unexpected(Error{ErrorCode::kIo, ec.message()});
      co_return std::move(s);
    };
  }
  asio::awaitable<void> Accept(std::string greeting) {
    conn_.emplace(co_await acceptor_.async_accept(asio::use_awaitable));
    received_.clear();
    co_await Send(std::move(greeting));
    asio::co_spawn(io_, ReadLoop(&*conn_), asio::detached);
  }
  asio::awaitable<void> Send(std::string bytes) {
    boost::system::error_code ec;
    co_await asio::async_write(*conn_, asio::buffer(bytes),
                               asio::redirect_error(asio::use_awaitable, ec));
  }
  void Close() { conn_.reset(); }
  // Ends the connection with a RST: the client's next read fails rather than ends.
  void Reset() {
    boost::system::error_code ec;
    conn_->set_option(asio::socket_base::linger(true, 0), ec);
    conn_->close(ec);
    conn_.reset();
  }
  const std::string& received() const { return received_; }

 private:
  asio::awaitable<void> ReadLoop(tcp::socket* s) {
    char buf[4096];
    for (;;) {
      boost::system::error_code ec;
      size_t n = co_await s->async_read_some(asio::buffer(buf),
                                             asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      received_.append(buf, n);
    }
  }
  asio::io_context& io_;
  tcp::acceptor acceptor_;
  std::optional<tcp::socket> conn_;
  std::string received_;
};

asio::awaitable<void> Sleep(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  t.expires_after(d);
  co_await t.async_wait(asio::use_awaitable);
}

class MirrorTest : public ::testing::Test {
 protected:
  template <typename F>
  void Run(F body) {
    bool done = false;
    asio::co_spawn(
        io_,
        [&]() -> asio::awaitable<void> {
          co_await body();
          done = true;
        },
        [](std::exception_ptr e) {
          if (e) std::rethrow_exception(e);
        });
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!done && std::chrono::steady_clock::now() < deadline) io_.run_one_for(50ms);
    ASSERT_TRUE(done) << "test coroutine did not finish";
    if (mirror_) mirror_->Stop();
    io_.run_for(50ms);
  }
  asio::awaitable<void> Connect() {
    mirror_ = std::make_shared<FrameMirror>(io_.get_executor(), server_.Connector(), "test");
    mirror_->Start();
    co_await server_.Accept(Handshake());
    auto r = co_await mirror_->WaitReady(5s);
    EXPECT_TRUE(r) << r.error().message;
  }
  asio::io_context io_;
  FakeServer server_{io_};
  std::shared_ptr<FrameMirror> mirror_;
};

TEST_F(MirrorTest, BecomesReadyAndSendsInputInOrder) {
  Run([&]() -> asio::awaitable<void> {
    co_await Connect();
    EXPECT_EQ(mirror_->seq(), 1u);
    EXPECT_EQ(mirror_->pointer().x, kW / 2);  // X starts with the pointer in the middle
    Action click;
    click.type = Action::Type::kClick;
    click.at = Point{10, 20};
    auto r = co_await Perform(*mirror_, click);
    EXPECT_TRUE(r) << r.error().message;
    Action type;
    type.type = Action::Type::kType;
    type.text = U"é🙂";
    r = co_await Perform(*mirror_, type);
    EXPECT_TRUE(r);
    co_await Sleep(100ms);
    std::string pointer = std::string{5, 0} + U16(10) + U16(20) + std::string{5, 1} + U16(10) +
                          U16(20) + std::string{5, 0} + U16(10) + U16(20);
    std::string keys = std::string{4, 1, 0, 0} + U32(0xe9) + std::string{4, 0, 0, 0} + U32(0xe9) +
                       std::string{4, 1, 0, 0} + U32(0x0101f642) + std::string{4, 0, 0, 0} +
                       U32(0x0101f642);
    EXPECT_NE(server_.received().find(pointer + keys), std::string::npos);
    EXPECT_EQ(mirror_->pointer().x, 10u);
  });
}

// Text whose key events are well over the 1 MiB cap on unsent input: typing waits for the
// writer between runs, so it arrives whole (it once failed "the guest's screen stopped reading
// input" with the guest reading everything).
TEST_F(MirrorTest, LongTextArrivesWholeWhileTheServerReads) {
  Run([&]() -> asio::awaitable<void> {
    co_await Connect();
    Action type;
    type.type = Action::Type::kType;
    type.text = std::u32string(100000, U'a');
    type.text[99999] = U'z';
    size_t peak = 0;
    bool typing = true;
    asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
      while (typing) {
        peak = std::max(peak, mirror_->unsent());
        co_await Sleep(1ms);
      }
    }, asio::detached);
    auto r = co_await Perform(*mirror_, type);
    typing = false;
    EXPECT_TRUE(r) << r.error().message;
    for (int i = 0; i < 200 && server_.received().size() < 100000 * 16 + 100; ++i) co_await Sleep(10ms);
    const std::string& got = server_.received();
    // After the client's setup messages: every key, in order.
    auto key = [](char c) { return std::string{4, 1, 0, 0} + U32(c) + std::string{4, 0, 0, 0} + U32(c); };
    size_t first = got.find(key('a'));
    EXPECT_NE(first, std::string::npos);
    if (first != std::string::npos) {
      EXPECT_EQ(got.size() - first, 100000u * 16);
    }
    EXPECT_TRUE(got.ends_with(key('z')));
    EXPECT_LT(peak, size_t{256} * 1024);
  });
}

std::string FenceMessage(uint32_t flags, const std::string& payload) {
  return std::string{static_cast<char>(248), 0, 0, 0} + U32(flags) +
         static_cast<char>(payload.size()) + payload;
}

TEST_F(MirrorTest, TheClicksOfADoubleClickWaitForTheServerToTakeTheOneBefore) {
  Run([&]() -> asio::awaitable<void> {
    co_await Connect();
    // The server shows that it does fences, as Xvnc does after SetEncodings; the mirror answers.
    co_await server_.Send(FenceMessage(0x80000000u, std::string(1, '\0')));
    co_await Sleep(100ms);
    EXPECT_NE(server_.received().find(FenceMessage(0, std::string(1, '\0'))), std::string::npos);
    Action dbl;
    dbl.type = Action::Type::kClick;
    dbl.at = Point{30, 40};
    dbl.count = 2;
    bool done = false;
    asio::co_spawn(
        io_,
        [&]() -> asio::awaitable<void> {
          auto r = co_await Perform(*mirror_, dbl);
          EXPECT_TRUE(r) << r.error().message;
          done = true;
        },
        asio::detached);
    auto at = U16(30) + U16(40);
    std::string first = std::string{5, 0} + at + std::string{5, 1} + at + std::string{5, 0} + at;
    std::string ours = FenceMessage(0x80000001u, U32(1));  // Request + BlockBefore, id 1
    co_await Sleep(300ms);
    // The first click and the fence went out; the second press waits for the answer.
    auto sent = server_.received();
    auto pos = sent.find(first + ours);
    EXPECT_NE(pos, std::string::npos) << "the first click and a fence";
    if (pos == std::string::npos) co_return;
    EXPECT_EQ(sent.size(), pos + first.size() + ours.size());
    EXPECT_FALSE(done);
    co_await server_.Send(FenceMessage(0x1, U32(1)));
    co_await Sleep(200ms);
    EXPECT_TRUE(done);
    std::string second = std::string{5, 1} + at + std::string{5, 0} + at;
    EXPECT_EQ(server_.received().substr(pos), first + ours + second);
    // Against a server that never answers, the clicks still go, after the longest wait.
    auto t0 = FrameMirror::Clock::now();
    auto r = co_await Perform(*mirror_, dbl);
    EXPECT_TRUE(r) << r.error().message;
    EXPECT_GE(FrameMirror::Clock::now() - t0, 900ms);
  });
}

TEST_F(MirrorTest, WithoutFencesTheClicksOfADoubleClickAreStillPaced) {
  Run([&]() -> asio::awaitable<void> {
    co_await Connect();
    bool synced = co_await mirror_->Sync(1s);
    EXPECT_FALSE(synced);  // this server never said it does fences
    Action triple;
    triple.type = Action::Type::kClick;
    triple.at = Point{3, 4};
    triple.count = 3;
    auto t0 = FrameMirror::Clock::now();
    auto r = co_await Perform(*mirror_, triple);
    EXPECT_TRUE(r) << r.error().message;
    EXPECT_GE(FrameMirror::Clock::now() - t0, 30ms);  // two pauses between three clicks
    co_await Sleep(100ms);
    auto at = U16(3) + U16(4);
    std::string click = std::string{5, 1} + at + std::string{5, 0} + at;
    EXPECT_NE(server_.received().find(std::string{5, 0} + at + click + click + click),
              std::string::npos);
  });
}

TEST_F(MirrorTest, SettlesAfterTheLastLargeChangeAndIgnoresSmallOnes) {
  Run([&]() -> asio::awaitable<void> {
    co_await Connect();
    SettleOptions o;
    o.quiet = 200ms;
    o.timeout = 5s;
    uint64_t before = mirror_->seq();
    auto t0 = FrameMirror::Clock::now();
    // Large changes for 400 ms, then only a blinking caret.
    asio::co_spawn(
        io_,
        [&]() -> asio::awaitable<void> {
          for (int i = 0; i < 4; ++i) {
            co_await Sleep(100ms);
            co_await server_.Send(Damage(0, 0, 200, 100, static_cast<char>(i)));
          }
          for (int i = 0; i < 10; ++i) {
            co_await Sleep(50ms);
            co_await server_.Send(Damage(50, 50, 2, 20));
          }
        },
        asio::detached);
    auto r = co_await mirror_->Settle(before, t0, o);
    EXPECT_TRUE(r.changed);
    EXPECT_TRUE(r.settled);
    EXPECT_GE(r.waited, 600ms);   // 400 ms of changes + the quiet period
    EXPECT_LT(r.waited, 1500ms);  // the caret did not keep it waiting
    EXPECT_GE(r.first_change, 80ms);
    EXPECT_GT(r.seq, before + 3);
  });
}

TEST_F(MirrorTest, NoChangeSettlesAtNoChangeAndEndlessChangeTimesOut) {
  Run([&]() -> asio::awaitable<void> {
    co_await Connect();
    SettleOptions o;
    o.quiet = 100ms;
    o.no_change = 300ms;
    o.timeout = 800ms;
    auto r = co_await mirror_->Settle(mirror_->seq(), FrameMirror::Clock::now(), o);
    EXPECT_FALSE(r.changed);
    EXPECT_TRUE(r.settled);
    EXPECT_GE(r.waited, 300ms);
    EXPECT_LT(r.waited, 700ms);
    bool spin = true;
    asio::co_spawn(
        io_,
        [&]() -> asio::awaitable<void> {
          while (spin) {
            co_await Sleep(40ms);
            co_await server_.Send(Damage(0, 0, 100, 100));
          }
        },
        asio::detached);
    r = co_await mirror_->Settle(mirror_->seq(), FrameMirror::Clock::now(), o);
    spin = false;
    EXPECT_TRUE(r.changed);
    EXPECT_FALSE(r.settled);
    EXPECT_GE(r.waited, 800ms);
    EXPECT_LT(r.waited, 1500ms);
  });
}

TEST_F(MirrorTest, ReconnectsAfterTheServerGoesAwayAndKeepsTheSequence) {
  Run([&]() -> asio::awaitable<void> {
    co_await Connect();
    co_await server_.Send(Damage(0, 0, 10, 10));
    bool advanced = co_await mirror_->WaitUpdate(1, 2s);
    EXPECT_TRUE(advanced);
    uint64_t seq = mirror_->seq();
    server_.Close();
    co_await Sleep(50ms);
    EXPECT_FALSE(mirror_->ready());
    Action move;
    move.type = Action::Type::kMove;
    move.at = Point{1, 1};
    auto moved = co_await Perform(*mirror_, move);
    EXPECT_FALSE(moved.has_value());  // not connected: refused, not queued
    co_await server_.Accept(Handshake());
    auto r = co_await mirror_->WaitReady(5s);
    EXPECT_TRUE(r) << r.error().message;
    EXPECT_EQ(mirror_->connects(), 2u);
    EXPECT_GT(mirror_->seq(), seq);
  });
}

TEST_F(MirrorTest, AHostileServerIsDroppedWithTheCause) {
  Run([&]() -> asio::awaitable<void> {
    co_await Connect();
    std::string off_screen = Damage(0, 0, 1, 1).substr(0, 4) + RectHeader(300, 0, 100, 1);
    co_await server_.Send(off_screen);
    co_await Sleep(100ms);
    EXPECT_FALSE(mirror_->ready());
    EXPECT_NE(mirror_->last_error().message.find("outside"), std::string::npos)
        << mirror_->last_error().message;
    EXPECT_EQ(mirror_->last_error().code, ErrorCode::kProtocol);
  });
}

TEST_F(MirrorTest, AConnectionResetIsAnIoError) {
  Run([&]() -> asio::awaitable<void> {
    co_await Connect();
    server_.Reset();
    co_await Sleep(50ms);
    EXPECT_FALSE(mirror_->ready());
    EXPECT_EQ(mirror_->last_error().code, ErrorCode::kIo) << mirror_->last_error().message;
    EXPECT_TRUE(mirror_->last_error().message.starts_with("connection: "))
        << mirror_->last_error().message;
  });
}

TEST_F(MirrorTest, AScreenThatNeverArrivesTimesOut) {
  Run([&]() -> asio::awaitable<void> {
    mirror_ = std::make_shared<FrameMirror>(io_.get_executor(), server_.Connector(), "test");
    mirror_->Start();
    auto r = co_await mirror_->WaitReady(100ms);  // the server never greets
    EXPECT_FALSE(r);
    if (r) co_return;
    EXPECT_EQ(r.error().code, ErrorCode::kTimeout);
    EXPECT_EQ(r.error().message, "the screen did not answer within 100 ms");
  });
}

TEST_F(MirrorTest, AStoppedMirrorIsClosed) {
  Run([&]() -> asio::awaitable<void> {
    co_await Connect();
    mirror_->Stop();
    co_await Sleep(50ms);  // the session sees its socket closed
    auto r = co_await mirror_->WaitReady(1s);
    EXPECT_FALSE(r);
    if (r) co_return;
    EXPECT_EQ(r.error().code, ErrorCode::kClosed);
    EXPECT_EQ(r.error().message, "stopped");
  });
}

TEST(ActionValidateTest, ChecksLimitsPointsAndText) {
  Action a;
  a.type = Action::Type::kType;
  a.text = U"tab\tnewline\nok é 世";
  EXPECT_TRUE(Validate(a, 100, 100));
  a.text = U"bell\a";
  auto r = Validate(a, 100, 100);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("U+0007"), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
  a.text = std::u32string(kMaxTextChars + 1, U'x');
  EXPECT_FALSE(Validate(a, 100, 100));
  Action click;
  click.type = Action::Type::kClick;
  click.at = Point{99, 99};
  EXPECT_TRUE(Validate(click, 100, 100));
  click.at = Point{100, 5};
  EXPECT_FALSE(Validate(click, 100, 100));
  click.at.reset();
  click.count = kMaxClickCount + 1;
  EXPECT_FALSE(Validate(click, 100, 100));
  Action drag;
  drag.type = Action::Type::kDrag;
  drag.path = {Point{1, 1}};
  EXPECT_FALSE(Validate(drag, 100, 100));
  Action hold;
  hold.type = Action::Type::kHoldKey;
  hold.keys = {{0xffe1}};
  hold.duration = kMaxActionDuration + std::chrono::milliseconds(1);
  EXPECT_FALSE(Validate(hold, 100, 100));
}

}  // namespace
}  // namespace deskbox::vnc_bridge
