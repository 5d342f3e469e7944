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

AgentClient::AgentClient(Socket socket)
    : socket_(std::move(socket)), window_timer_(socket_.get_executor()) {}

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
    if (!p->done) p->results.push_back(std::unexpected(e));
    p->done = true;
    if (p->timer) p->timer->cancel();
  }
  pending_.clear();
  window_timer_.cancel();
}

void AgentClient::StartReading() {
  if (started_) return;
  started_ = true;
  asio::co_spawn(socket_.get_executor(), ReadLoop(closed_), asio::detached);
}

void AgentClient::Deliver(uint64_t id, std::expected<agent::v1::Response, AgentError> r) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;  // a call that gave up waiting, or an abandoned stream
  Pending* p = it->second;
  bool last = !r || !p->multi || !r->has_file_chunk() || r->file_chunk().final();
  p->results.push_back(std::move(r));
  if (last) {
    p->done = true;
    pending_.erase(it);
  }
  if (p->timer) p->timer->cancel();
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
      uint64_t id = response->id();
      if (response->has_error()) {
        Deliver(id, std::unexpected(AgentError{AgentError::Code::kGuest,
                                               fmt::format("guest agent: {}", response->error().message()),
                                               static_cast<int>(response->error().code())}));
      } else {
        Deliver(id, std::move(*response));
      }
      // Flow control: a stream with a full window stops the channel until it is read.
      for (;;) {
        auto it = pending_.find(id);
        if (it == pending_.end() || it->second->results.size() < kStreamWindow) break;
        window_timer_.expires_after(std::chrono::seconds(1));
        co_await window_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        if (*closed) co_return;
      }
      if (bytes.empty()) break;
    }
  }
}

asio::awaitable<std::expected<agent::v1::Response, AgentError>> AgentClient::Call(
    agent::v1::Request request, std::chrono::milliseconds timeout) {
  if (*closed_) co_return std::unexpected(AgentError{AgentError::Code::kClosed, "agent channel closed"});
  StartReading();
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
  if (ec && pending.results.empty()) {
    if (!*closed) pending_.erase(id);
    co_return std::unexpected(AgentError{AgentError::Code::kIo, ec.message()});
  }
  if (pending.results.empty()) co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (pending.results.empty()) {
    if (!*closed) pending_.erase(id);
    co_return std::unexpected(AgentError{AgentError::Code::kTimeout,
                                         fmt::format("agent did not answer within {} ms",
                                                     timeout.count())});
  }
  co_return std::move(pending.results.front());
}

std::unique_ptr<AgentClient::Stream> AgentClient::OpenStream() {
  uint64_t id = next_id_++;
  auto p = std::make_unique<Pending>();
  p->multi = true;
  if (*closed_) {
    p->results.push_back(std::unexpected(AgentError{AgentError::Code::kClosed, "agent channel closed"}));
    p->done = true;
  } else {
    pending_[id] = p.get();
  }
  streams_[id] = std::move(p);
  return std::unique_ptr<Stream>(new Stream(*this, id));
}

AgentClient::Stream::Stream(AgentClient& client, uint64_t id)
    : client_(client), id_(id), closed_(client.closed_) {}

AgentClient::Stream::~Stream() {
  client_.pending_.erase(id_);
  client_.streams_.erase(id_);
  client_.window_timer_.cancel();
}

asio::awaitable<std::expected<void, AgentError>> AgentClient::Stream::Send(agent::v1::Request request) {
  if (*closed_) co_return std::unexpected(AgentError{AgentError::Code::kClosed, "agent channel closed"});
  client_.StartReading();
  request.set_id(id_);
  auto frame = desktop_images::EncodeFrame(request);
  if (!frame) co_return std::unexpected(AgentError{AgentError::Code::kProtocol, "request too large"});
  boost::system::error_code ec;
  auto closed = closed_;
  co_await asio::async_write(client_.socket_, asio::buffer(*frame),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (*closed) co_return std::unexpected(AgentError{AgentError::Code::kClosed, "agent channel closed"});
  if (ec) co_return std::unexpected(AgentError{AgentError::Code::kIo, ec.message()});
  co_return std::expected<void, AgentError>{};
}

asio::awaitable<std::optional<std::expected<agent::v1::Response, AgentError>>>
AgentClient::Stream::Next(std::chrono::milliseconds timeout) {
  // The Pending lives in streams_ until this Stream is destroyed, even after the client closed
  // (FailAll leaves the failure in it).
  auto find = [&]() -> Pending* {
    auto it = client_.streams_.find(id_);
    return it == client_.streams_.end() ? nullptr : it->second.get();
  };
  Pending* p = find();
  if (!p) co_return std::unexpected(AgentError{AgentError::Code::kClosed, "agent channel closed"});
  if (p->results.empty() && !p->done) {
    asio::steady_timer timer(client_.socket_.get_executor());
    timer.expires_after(timeout);
    p->timer = &timer;
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    p = find();
    if (!p) co_return std::unexpected(AgentError{AgentError::Code::kClosed, "agent channel closed"});
    p->timer = nullptr;
    if (p->results.empty() && !p->done)
      co_return std::unexpected(AgentError{AgentError::Code::kTimeout,
                                           fmt::format("agent did not answer within {} ms",
                                                       timeout.count())});
  }
  if (p->results.empty()) co_return std::nullopt;
  auto r = std::move(p->results.front());
  p->results.pop_front();
  client_.window_timer_.cancel();
  co_return r;
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
