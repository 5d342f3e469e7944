#include "vmhost/agent_client.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "common/sha256.h"

namespace deskbox::vmhost {

namespace asio = boost::asio;

AgentClient::AgentClient(Socket socket) : socket_(std::move(socket)) {}

AgentClient::~AgentClient() { Close(); }

void AgentClient::Close() {
  if (*closed_) return;
  *closed_ = true;
  boost::system::error_code ec;
  socket_.close(ec);
  FailAll({AgentError::Code::kClosed, "agent channel closed"});
}

void AgentClient::FailAll(const AgentError& e) {
  for (auto& [id, p] : pending_) {
    if (!p->result) p->result = std::unexpected(e);
    p->timer->cancel();
  }
  pending_.clear();
}

asio::awaitable<void> AgentClient::ReadLoop(std::shared_ptr<bool> closed) {
  std::vector<uint8_t> buf(64 * 1024);
  for (;;) {
    boost::system::error_code ec;
    size_t n = co_await socket_.async_read_some(asio::buffer(buf),
                                                asio::redirect_error(asio::use_awaitable, ec));
    if (*closed) co_return;
    if (ec) {
      Close();
      co_return;
    }
    std::span<const uint8_t> bytes(buf.data(), n);
    while (true) {
      bytes = bytes.subspan(reader_.Feed(bytes));
      auto next = reader_.Next();
      if (!next) {
        // A guest that breaks framing loses its channel; the sandbox reports it.
        AgentError err{AgentError::Code::kProtocol,
                       fmt::format("agent sent a bad frame: {}",
                                   desktop_images::FrameErrorName(next.error()))};
        *closed_ = true;
        socket_.close(ec);
        FailAll(err);
        co_return;
      }
      if (!*next) break;
      auto response = desktop_images::ParseResponse(**next);
      if (!response) {
        *closed_ = true;
        socket_.close(ec);
        FailAll({AgentError::Code::kProtocol, "agent sent a response that does not parse"});
        co_return;
      }
      auto it = pending_.find(response->id());
      if (it != pending_.end()) {
        Pending* p = it->second;
        pending_.erase(it);
        if (response->has_error()) {
          p->result = std::unexpected(AgentError{
              AgentError::Code::kGuest,
              fmt::format("guest agent: {}", response->error().message())});
        } else {
          p->result = std::move(*response);
        }
        p->timer->cancel();
      }
      if (bytes.empty()) break;
    }
  }
}

asio::awaitable<std::expected<agent::v1::Response, AgentError>> AgentClient::Call(
    agent::v1::Request request, std::chrono::milliseconds timeout) {
  if (*closed_) co_return std::unexpected(AgentError{AgentError::Code::kClosed, "agent channel closed"});
  if (!started_) {
    started_ = true;
    asio::co_spawn(socket_.get_executor(), ReadLoop(closed_), asio::detached);
  }
  auto closed = closed_;
  request.set_id(next_id_++);
  auto frame = desktop_images::EncodeFrame(request);
  if (!frame)
    co_return std::unexpected(AgentError{AgentError::Code::kProtocol, "request too large"});
  Pending pending;
  asio::steady_timer timer(socket_.get_executor());
  timer.expires_after(timeout);
  pending.timer = &timer;
  uint64_t id = request.id();
  pending_[id] = &pending;
  boost::system::error_code ec;
  co_await asio::async_write(socket_, asio::buffer(*frame),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec && !pending.result) {
    if (!*closed) pending_.erase(id);
    co_return std::unexpected(AgentError{AgentError::Code::kIo, ec.message()});
  }
  if (!pending.result) co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (!pending.result) {
    if (!*closed) pending_.erase(id);
    co_return std::unexpected(AgentError{AgentError::Code::kTimeout,
                                         fmt::format("agent did not answer within {} ms",
                                                     timeout.count())});
  }
  co_return std::move(*pending.result);
}

asio::awaitable<std::expected<void, AgentError>> AgentClient::SetClockNow(
    std::chrono::milliseconds timeout) {
  agent::v1::Request req;
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  req.mutable_set_clock()->set_unix_time_ns(int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec);
  auto r = co_await Call(std::move(req), timeout);
  if (!r) co_return std::unexpected(r.error());
  co_return std::expected<void, AgentError>{};
}

asio::awaitable<std::expected<void, AgentError>> AgentClient::ReseedFromHost(
    std::chrono::milliseconds timeout) {
  agent::v1::Request req;
  uint8_t entropy[64];
  RandomBytes(entropy);
  req.mutable_reseed()->set_entropy(entropy, sizeof entropy);
  auto r = co_await Call(std::move(req), timeout);
  if (!r) co_return std::unexpected(r.error());
  co_return std::expected<void, AgentError>{};
}

}  // namespace deskbox::vmhost
