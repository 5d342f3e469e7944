#include "vmhost/qmp.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "common/log.h"

namespace deskbox::vmhost {

namespace asio = boost::asio;
using nlohmann::json;

std::expected<void, QmpError> QmpFramer::Feed(std::string_view bytes) {
  if (failed_) return std::unexpected(QmpError{QmpError::Code::kProtocol, "framer failed"});
  buf_.append(bytes);
  if (buf_.find('\n', scan_from_) == std::string::npos && buf_.size() > kMaxLineBytes) {
    failed_ = true;
    return std::unexpected(QmpError{QmpError::Code::kTooLarge, "QMP line exceeds 1 MiB"});
  }
  return {};
}

std::expected<std::optional<json>, QmpError> QmpFramer::Next() {
  if (failed_) return std::unexpected(QmpError{QmpError::Code::kProtocol, "framer failed"});
  for (;;) {
    size_t nl = buf_.find('\n', scan_from_);
    if (nl == std::string::npos) {
      scan_from_ = buf_.size();
      return std::optional<json>{};
    }
    std::string line = buf_.substr(0, nl);
    buf_.erase(0, nl + 1);
    scan_from_ = 0;
    if (line.size() > kMaxLineBytes) {
      failed_ = true;
      return std::unexpected(QmpError{QmpError::Code::kTooLarge, "QMP line exceeds 1 MiB"});
    }
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      failed_ = true;
      return std::unexpected(QmpError{QmpError::Code::kProtocol, "QMP line is not a JSON object"});
    }
    return std::optional<json>(std::move(j));
  }
}

QmpClient::QmpClient(Socket socket) : socket_(std::move(socket)) {}

QmpClient::~QmpClient() { Close(); }

void QmpClient::Close() {
  if (state_->closed) return;
  state_->closed = true;
  boost::system::error_code ec;
  socket_.close(ec);
  FailAll(QmpError{QmpError::Code::kClosed, "QMP connection closed"});
}

void QmpClient::FailAll(const QmpError& err) {
  for (auto& [id, p] : pending_) {
    if (!p->result) p->result = std::unexpected(err);
    if (p->timer) p->timer->cancel();
  }
  pending_.clear();
  for (auto* t : event_waiters_) t->cancel();
}

asio::awaitable<std::expected<json, QmpError>> QmpClient::ReadOne(
    std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[8192];
  for (;;) {
    auto next = framer_.Next();
    if (!next) co_return std::unexpected(next.error());
    if (*next) co_return std::move(**next);
    if (std::chrono::steady_clock::now() > deadline)
      co_return std::unexpected(QmpError{QmpError::Code::kTimeout, "QMP greeting timed out"});
    // Bounded wait: a timer closes the wait by cancelling the read.
    asio::steady_timer timer(socket_.get_executor());
    timer.expires_at(deadline);
    timer.async_wait([this](boost::system::error_code ec) {
      if (!ec) {
        boost::system::error_code ignored;
        socket_.cancel(ignored);
      }
    });
    boost::system::error_code ec;
    size_t n = co_await socket_.async_read_some(asio::buffer(buf),
                                                asio::redirect_error(asio::use_awaitable, ec));
    timer.cancel();
    if (ec == asio::error::operation_aborted)
      co_return std::unexpected(QmpError{QmpError::Code::kTimeout, "QMP greeting timed out"});
    if (ec) co_return std::unexpected(QmpError{QmpError::Code::kIo, ec.message()});
    if (auto f = framer_.Feed(std::string_view(buf, n)); !f) co_return std::unexpected(f.error());
  }
}

asio::awaitable<std::expected<json, QmpError>> QmpClient::Handshake(
    std::chrono::milliseconds timeout) {
  auto greeting = co_await ReadOne(timeout);
  if (!greeting) co_return greeting;
  if (!greeting->contains("QMP"))
    co_return std::unexpected(QmpError{QmpError::Code::kProtocol, "no QMP greeting"});
  asio::co_spawn(socket_.get_executor(), ReadLoop(state_), asio::detached);
  auto caps = co_await Execute("qmp_capabilities", json::object(), timeout);
  if (!caps) co_return std::unexpected(caps.error());
  co_return (*greeting)["QMP"];
}

asio::awaitable<void> QmpClient::ReadLoop(std::shared_ptr<State> state) {
  char buf[16384];
  for (;;) {
    boost::system::error_code ec;
    size_t n = co_await socket_.async_read_some(asio::buffer(buf),
                                                asio::redirect_error(asio::use_awaitable, ec));
    if (state->closed) co_return;  // `this` may be gone
    QmpError err{QmpError::Code::kIo, ""};
    bool failed = false;
    if (ec) {
      err = {QmpError::Code::kClosed, "QMP connection closed: " + ec.message()};
      failed = true;
    } else if (auto f = framer_.Feed(std::string_view(buf, n)); !f) {
      err = f.error();
      failed = true;
    }
    while (!failed) {
      auto next = framer_.Next();
      if (!next) {
        err = next.error();
        failed = true;
        break;
      }
      if (!*next) break;
      json& msg = **next;
      if (msg.contains("event")) {
        if (events_.size() >= 256) events_.pop_front();
        events_.push_back(std::move(msg));
        for (auto* t : event_waiters_) t->cancel();
        continue;
      }
      if (!msg.contains("id") || !msg["id"].is_number_unsigned()) continue;  // not ours
      auto it = pending_.find(msg["id"].get<uint64_t>());
      if (it == pending_.end()) continue;
      Pending* p = it->second;
      pending_.erase(it);
      if (msg.contains("error")) {
        const json& e = msg["error"];
        p->result = std::unexpected(QmpError{
            QmpError::Code::kCommand,
            e.value("class", std::string("Error")) + ": " + e.value("desc", std::string(""))});
      } else {
        p->result = msg.contains("return") ? msg["return"] : json::object();
      }
      if (p->timer) p->timer->cancel();
    }
    if (failed) {
      state->closed = true;
      boost::system::error_code ignored;
      socket_.close(ignored);
      FailAll(err);
      co_return;
    }
  }
}

asio::awaitable<std::expected<json, QmpError>> QmpClient::Execute(
    std::string command, json arguments, std::chrono::milliseconds timeout) {
  if (state_->closed)
    co_return std::unexpected(QmpError{QmpError::Code::kClosed, "QMP connection closed"});
  auto state = state_;
  uint64_t id = next_id_++;
  json req = {{"execute", command}, {"id", id}};
  if (!arguments.empty()) req["arguments"] = std::move(arguments);
  std::string line = req.dump() + "\n";
  Pending pending;
  asio::steady_timer timer(socket_.get_executor());
  timer.expires_after(timeout);
  pending.timer = &timer;
  pending_[id] = &pending;
  boost::system::error_code ec;
  co_await asio::async_write(socket_, asio::buffer(line),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (state->closed && !pending.result)
    co_return std::unexpected(QmpError{QmpError::Code::kClosed, "QMP connection closed"});
  if (ec) {
    pending_.erase(id);
    co_return std::unexpected(QmpError{QmpError::Code::kIo, ec.message()});
  }
  if (!pending.result) {
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  if (!pending.result) {
    if (!state->closed) pending_.erase(id);
    co_return std::unexpected(
        QmpError{QmpError::Code::kTimeout, "QMP command " + command + " timed out"});
  }
  co_return std::move(*pending.result);
}

asio::awaitable<std::expected<json, QmpError>> QmpClient::WaitEvent(
    std::string name, std::chrono::milliseconds timeout,
    std::function<bool(const json&)> predicate) {
  auto state = state_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    for (auto it = events_.begin(); it != events_.end(); ++it) {
      if ((*it)["event"] == name && (!predicate || predicate((*it).value("data", json::object())))) {
        json e = std::move(*it);
        events_.erase(it);
        co_return e;
      }
    }
    if (state->closed)
      co_return std::unexpected(QmpError{QmpError::Code::kClosed, "QMP connection closed"});
    if (std::chrono::steady_clock::now() >= deadline)
      co_return std::unexpected(QmpError{QmpError::Code::kTimeout, "waiting for " + name});
    asio::steady_timer timer(socket_.get_executor());
    timer.expires_at(deadline);
    event_waiters_.push_back(&timer);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (state->closed)
      co_return std::unexpected(QmpError{QmpError::Code::kClosed, "QMP connection closed"});
    std::erase(event_waiters_, &timer);
  }
}

}  // namespace deskbox::vmhost

namespace deskbox::vmhost {
nlohmann::json IgnoreSharedCapability() {
  // "events": MIGRATION events tell the restore when the device state is in. x-ignore-shared
  // leaves shared RAM blocks (the template's file) out of the stream; private RAM is still sent,
  // which is how the benchmark's full-stream baseline is made from a running sandbox.
  return {{"capabilities", nlohmann::json::array({{{"capability", "events"}, {"state", true}},
                                                  {{"capability", "x-ignore-shared"}, {"state", true}}})}};
}
nlohmann::json UriArgument(const std::string& uri) { return {{"uri", uri}}; }
}  // namespace deskbox::vmhost
