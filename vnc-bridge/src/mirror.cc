#include "vnc_bridge/mirror.h"

#include <fmt/format.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <optional>

#include "common/log.h"

namespace deskbox::vnc_bridge {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {
constexpr const char* kMirrorLog = "vnc-bridge";
constexpr size_t kMaxPendingOutput = 1 << 20;  // input the guest has not read yet
constexpr size_t kHistory = 512;

Error NotReading() {
  return {ErrorCode::kTooLarge, "the guest's screen stopped reading input"};
}
}  // namespace

FrameMirror::FrameMirror(asio::any_io_executor executor, Connector connect, std::string name)
    : executor_(std::move(executor)),
      connect_(std::move(connect)),
      name_(std::move(name)),
      backoff_(executor_) {}

FrameMirror::~FrameMirror() = default;

void FrameMirror::Start() {
  if (started_) return;
  started_ = true;
  asio::co_spawn(
      executor_, [self = shared_from_this()]() -> asio::awaitable<void> { co_await self->Run(); },
      asio::detached);
}

void FrameMirror::Stop() {
  if (stopped_) return;
  stopped_ = true;
  last_error_ = {ErrorCode::kClosed, "the screen mirror was stopped"};
  if (socket_) {
    boost::system::error_code ignored;
    socket_->close(ignored);
  }
  backoff_.cancel();
  Notify();
}

std::optional<FrameMirror::Clock::time_point> FrameMirror::UpdateTime(uint64_t seq) const {
  for (auto it = history_.rbegin(); it != history_.rend(); ++it)
    if (it->seq == seq) return it->time;
  return std::nullopt;
}

void FrameMirror::Notify() {
  for (auto* t : waiters_) t->cancel();
}

asio::awaitable<void> FrameMirror::WaitChange(Clock::time_point until) { co_await WaitOn(waiters_, until); }

asio::awaitable<void> FrameMirror::WaitOn(std::set<asio::steady_timer*>& waiters, Clock::time_point until) {
  asio::steady_timer t(executor_);
  t.expires_at(until);
  waiters.insert(&t);
  boost::system::error_code ec;
  co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  waiters.erase(&t);
}

asio::awaitable<void> FrameMirror::Run() {
  auto self = shared_from_this();
  auto delay = 100ms;
  while (!stopped_) {
    auto sock = co_await connect_();
    if (stopped_) break;
    if (!sock) {
      last_error_ = std::move(sock.error());
    } else {
      ++connects_;
      auto ended = co_await Session(*sock);
      if (!ended) last_error_ = std::move(ended.error());
      if (stopped_) break;
      log::Info(kMirrorLog, "{}: screen connection ended ({}); reconnecting", name_, last_error_.message);
      delay = 100ms;
    }
    Notify();
    backoff_.expires_after(delay);
    boost::system::error_code ec;
    co_await backoff_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    delay = std::min<std::chrono::milliseconds>(delay * 2, 2s);
  }
  Notify();
}

asio::awaitable<std::expected<void, Error>> FrameMirror::Session(asio::ip::tcp::socket& sock_in) {
  socket_ = std::make_shared<asio::ip::tcp::socket>(std::move(sock_in));
  boost::system::error_code ignored;
  socket_->set_option(asio::ip::tcp::no_delay(true), ignored);
  client_ = std::make_unique<RfbClient>();
  pending_.clear();
  std::vector<uint8_t> buf(256 * 1024);
  std::expected<void, Error> result;
  auto sock = socket_;
  for (;;) {
    boost::system::error_code ec;
    size_t n = co_await sock->async_read_some(asio::buffer(buf),
                                              asio::redirect_error(asio::use_awaitable, ec));
    if (n > 0) {
      bool was_ready = client_->ready();
      uint32_t fence_before = client_->fence_answered();
      if (auto r = client_->Feed(std::span<const uint8_t>(buf.data(), n)); !r) {
        result = std::unexpected(
            Error{r.error().code, "the guest's screen broke the protocol: " + r.error().message});
        log::Warn(kMirrorLog, "{}: {}", name_, result.error().message);
        break;
      }
      auto updates = client_->TakeUpdates();
      auto now = Clock::now();
      for (const auto& u : updates) {
        UpdateInfo info{++seq_, now, 0, 0};
        for (const auto& r : u.damage) {
          info.largest_area = std::max(info.largest_area, r.area());
          info.largest_side = std::max({info.largest_side, r.w, r.h});
        }
        if (u.resized) info.largest_area = UINT64_MAX;
        history_.push_back(info);
        if (history_.size() > kHistory) history_.pop_front();
      }
      if (!was_ready && client_->ready() && !pointer_known_) {
        // X starts with the pointer in the middle of the screen.
        pointer_ = {client_->framebuffer().width / 2, client_->framebuffer().height / 2};
      }
      Flush();
      if (!updates.empty() && client_->ready() && on_update_) on_update_();
      if (!updates.empty() || was_ready != client_->ready() ||
          fence_before != client_->fence_answered())
        Notify();
    }
    if (ec) {
      // The guest ending the connection closes the session; any other failure is an I/O error.
      if (stopped_)
        result = std::unexpected(Error{ErrorCode::kClosed, "stopped"});
      else
        result = std::unexpected(Error{ec == asio::error::eof ? ErrorCode::kClosed : ErrorCode::kIo,
                                       "connection: " + ec.message()});
      break;
    }
    if (pending_.size() > kMaxPendingOutput) {
      result = std::unexpected(NotReading());
      break;
    }
  }
  sock->close(ignored);
  socket_.reset();
  client_.reset();
  pending_.clear();
  co_return result;
}

Error FrameMirror::NotReady() const {
  if (last_error_.message.empty()) return {ErrorCode::kClosed, "the screen is not connected"};
  return last_error_;
}

void FrameMirror::Flush() {
  if (!client_) return;
  pending_ += client_->TakeOutput();
  if (writing_ || pending_.empty() || !socket_) return;
  writing_ = true;
  asio::co_spawn(executor_, WriteLoop(socket_), asio::detached);
}

asio::awaitable<void> FrameMirror::WriteLoop(std::shared_ptr<asio::ip::tcp::socket> sock) {
  auto self = shared_from_this();
  while (!pending_.empty() && socket_ == sock) {
    std::string out = std::exchange(pending_, {});
    in_flight_ = out.size();
    boost::system::error_code ec;
    co_await asio::async_write(*sock, asio::buffer(out),
                               asio::redirect_error(asio::use_awaitable, ec));
    in_flight_ = 0;
    for (auto* t : drain_waiters_) t->cancel();
    if (ec) {
      sock->close(ec);
      break;
    }
  }
  writing_ = false;
  // Output queued for a newer connection while this one was writing.
  if (socket_ && socket_ != sock && !pending_.empty()) Flush();
}

std::expected<void, Error> FrameMirror::Pointer(uint8_t buttons, uint32_t x, uint32_t y) {
  if (!ready()) return std::unexpected(NotReady());
  if (pending_.size() > kMaxPendingOutput) return std::unexpected(NotReading());
  const auto& fb = client_->framebuffer();
  x = std::min(x, fb.width - 1);
  y = std::min(y, fb.height - 1);
  client_->PointerEvent(buttons, x, y);
  pointer_ = {x, y};
  pointer_known_ = true;
  buttons_ = buttons;
  Flush();
  return {};
}

std::expected<void, Error> FrameMirror::Key(bool down, uint32_t keysym) {
  if (!ready()) return std::unexpected(NotReady());
  if (pending_.size() > kMaxPendingOutput) return std::unexpected(NotReading());
  client_->KeyEvent(down, keysym);
  Flush();
  return {};
}

asio::awaitable<std::expected<void, Error>> FrameMirror::Drain(size_t at_most, std::chrono::milliseconds timeout) {
  auto self = shared_from_this();
  auto deadline = Clock::now() + timeout;
  Flush();
  while (unsent() > at_most) {
    if (!ready()) co_return std::unexpected(NotReady());
    if (Clock::now() >= deadline) co_return std::unexpected(NotReading());
    co_await WaitOn(drain_waiters_, deadline);  // woken after each write
  }
  co_return std::expected<void, Error>{};
}

asio::awaitable<bool> FrameMirror::Sync(std::chrono::milliseconds timeout) {
  auto self = shared_from_this();
  if (!ready() || !client_->fences()) co_return false;
  uint32_t id = ++fence_id_;
  if (id == 0) id = ++fence_id_;  // 0 means "none answered"
  client_->Fence(id);
  Flush();
  const uint64_t connection = connects_;
  auto deadline = Clock::now() + timeout;
  // Ids wrap; the server answers in order, so "answered" is "not behind id".
  auto answered = [&] { return static_cast<int32_t>(client_->fence_answered() - id) >= 0; };
  while (!stopped_ && client_ && connects_ == connection && !answered()) {
    if (Clock::now() >= deadline) co_return false;
    co_await WaitChange(deadline);
  }
  co_return !stopped_ && client_ && connects_ == connection;
}

asio::awaitable<std::expected<void, Error>> FrameMirror::WaitReady(
    std::chrono::milliseconds timeout) {
  auto self = shared_from_this();
  auto deadline = Clock::now() + timeout;
  while (!ready()) {
    if (stopped_) co_return std::unexpected(last_error_);
    if (Clock::now() >= deadline)
      co_return std::unexpected(
          Error{ErrorCode::kTimeout,
                fmt::format("the screen did not answer within {} ms{}", timeout.count(),
                            last_error_.message.empty() ? "" : " (" + last_error_.message + ")")});
    co_await WaitChange(deadline);
  }
  co_return std::expected<void, Error>{};
}

asio::awaitable<bool> FrameMirror::WaitUpdate(uint64_t after_seq,
                                              std::chrono::milliseconds timeout) {
  auto self = shared_from_this();
  auto deadline = Clock::now() + timeout;
  while (seq_ <= after_seq && !stopped_ && Clock::now() < deadline) co_await WaitChange(deadline);
  co_return seq_ > after_seq;
}

asio::awaitable<SettleResult> FrameMirror::Settle(uint64_t after_seq, Clock::time_point input_time,
                                                  const SettleOptions& o) {
  auto self = shared_from_this();
  auto deadline = input_time + o.timeout;
  auto ms = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d);
  };
  SettleResult r;
  for (;;) {
    auto now = Clock::now();
    std::optional<Clock::time_point> first, last_large;
    for (const auto& u : history_) {
      if (u.seq <= after_seq) continue;
      if (!first) first = u.time;
      if (u.largest_area > o.small_area || u.largest_side > o.small_side) last_large = u.time;
    }
    r.seq = seq_;
    r.waited = ms(now - input_time);
    if (first) {
      r.changed = true;
      r.first_change = ms(*first - input_time);
      auto quiet_from = std::max(*first, last_large.value_or(*first));
      if (now - quiet_from >= o.quiet) {
        r.settled = true;
        co_return r;
      }
      if (now >= deadline || stopped_) co_return r;
      co_await WaitChange(std::min(deadline, quiet_from + o.quiet));
    } else {
      if (now - input_time >= o.no_change) {
        r.settled = true;  // nothing moved on the screen: it is as settled as it gets
        co_return r;
      }
      if (now >= deadline || stopped_) co_return r;
      co_await WaitChange(std::min(deadline, input_time + o.no_change));
    }
  }
}

}  // namespace deskbox::vnc_bridge
