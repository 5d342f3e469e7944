#include "vmhost/jailer_client.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstring>
#include <fmt/format.h>

#include "common/files.h"
#include "common/log.h"
#include "vmhost/fd_passing.h"

namespace deskbox::vmhost {

namespace asio = boost::asio;

namespace {

std::expected<UniqueFd, std::string> ConnectTo(const std::string& socket_path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof a.sun_path) return std::unexpected("jailer socket path too long");
  std::strncpy(a.sun_path, socket_path.c_str(), sizeof a.sun_path - 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    return std::unexpected(
        fmt::format("connecting to the jailer at {}: {}", socket_path, ErrnoString(errno)));
  return fd;
}

}  // namespace

std::expected<std::unique_ptr<JailerClient>, std::string> JailerClient::Connect(
    asio::any_io_executor executor, const std::string& socket_path) {
  auto fd = ConnectTo(socket_path);
  if (!fd) return std::unexpected(fd.error());
  auto client =
      std::unique_ptr<JailerClient>(new JailerClient(executor, std::move(*fd), socket_path));
  asio::co_spawn(executor, client->ReadLoop(client->alive_), asio::detached);
  return client;
}

JailerClient::JailerClient(asio::any_io_executor executor, UniqueFd fd, std::string socket_path)
    : socket_(executor, fd.release()), socket_path_(std::move(socket_path)) {}

std::expected<void, std::string> JailerClient::Reconnect() {
  auto fd = ConnectTo(socket_path_);
  if (!fd) return std::unexpected(fd.error());
  boost::system::error_code ec;
  socket_.close(ec);
  socket_.assign(fd->release(), ec);
  if (ec) return std::unexpected("jailer connection: " + ec.message());
  broken_ = false;
  asio::co_spawn(socket_.get_executor(), ReadLoop(alive_), asio::detached);
  log::Info("vmhost", "connected again to the jailer at {}", socket_path_);
  return {};
}

JailerClient::~JailerClient() {
  *alive_ = false;
  boost::system::error_code ec;
  socket_.close(ec);
  for (auto& [id, p] : pending_) {
    p->result = std::unexpected(std::string("jailer client closed"));
    p->timer->cancel();
  }
}

asio::awaitable<void> JailerClient::ReadLoop(std::shared_ptr<bool> alive) {
  for (;;) {
    boost::system::error_code ec;
    co_await socket_.async_wait(asio::posix::descriptor_base::wait_read,
                                asio::redirect_error(asio::use_awaitable, ec));
    if (!*alive) co_return;
    std::string error;
    if (ec) error = "jailer connection: " + ec.message();
    while (error.empty()) {
      auto d = RecvDatagram(socket_.native_handle());
      if (!d) {
        if (d.error() == EAGAIN) break;
        error = d.error() == ECONNRESET ? "jailer closed the connection"
                                        : "jailer connection: " + ErrnoString(d.error());
        break;
      }
      JailerResult result;
      if (!result.response.ParseFromString(d->bytes)) {
        error = "malformed response from the jailer";
        break;
      }
      result.fds = std::move(d->fds);
      auto it = pending_.find(result.response.id());
      if (it == pending_.end()) continue;
      it->second->result = std::move(result);
      it->second->timer->cancel();
      pending_.erase(it);
    }
    if (!error.empty()) {
      broken_ = true;
      for (auto& [id, p] : pending_) {
        p->result = std::unexpected(error);
        p->timer->cancel();
      }
      pending_.clear();
      co_return;
    }
  }
}

asio::awaitable<std::expected<JailerResult, std::string>> JailerClient::Call(
    jailer::v1::Request request) {
  // The jailer ended (its QEMUs run on): a jailer started again takes over at the next call.
  if (broken_) {
    if (auto r = Reconnect(); !r)
      co_return std::unexpected(fmt::format("{} (its connection closed; {})", kJailerNotRunning,
                                            r.error()));
  }
  auto alive = alive_;
  request.set_id(next_id_++);
  Pending pending;
  asio::steady_timer timer(socket_.get_executor());
  timer.expires_after(std::chrono::seconds(60));
  pending.timer = &timer;
  pending_[request.id()] = &pending;
  if (auto s = SendDatagram(socket_.native_handle(), request.SerializeAsString(), {}); !s) {
    pending_.erase(request.id());
    co_return std::unexpected("sending to the jailer: " + ErrnoString(s.error()));
  }
  boost::system::error_code ec;
  co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (!pending.result) {
    if (*alive) pending_.erase(request.id());
    co_return std::unexpected(std::string("the jailer did not answer within 60 s"));
  }
  co_return std::move(*pending.result);
}

}  // namespace deskbox::vmhost
