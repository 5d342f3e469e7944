#pragma once
// deskboxd's side of the privileged helper: typed calls over the SOCK_SEQPACKET socket,
// answered with a response and the file descriptors it carries. Runs on one io_context thread.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <expected>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "jailer.pb.h"

namespace deskbox::vmhost {

// How a call that never reached a jailer (none is running) begins its error.
inline constexpr char kJailerNotRunning[] = "the jailer is not running";

struct JailerResult {
  jailer::v1::Response response;
  std::vector<UniqueFd> fds;
};

// What vmhost needs from the privileged side; a fake implements it in unit tests.
class Jailer {
 public:
  virtual ~Jailer() = default;
  // Returns the response (ok or not) or a transport error.
  virtual boost::asio::awaitable<std::expected<JailerResult, std::string>> Call(
      jailer::v1::Request request) = 0;
};

class JailerClient final : public Jailer {
 public:
  static std::expected<std::unique_ptr<JailerClient>, std::string> Connect(
      boost::asio::any_io_executor executor, const std::string& socket_path);
  ~JailerClient() override;
  boost::asio::awaitable<std::expected<JailerResult, std::string>> Call(
      jailer::v1::Request request) override;

 private:
  JailerClient(boost::asio::any_io_executor executor, UniqueFd fd, std::string socket_path);
  boost::asio::awaitable<void> ReadLoop(std::shared_ptr<bool> alive);
  // After the connection broke (the jailer ended): connects again, for a jailer started anew.
  std::expected<void, std::string> Reconnect();
  struct Pending {
    std::optional<std::expected<JailerResult, std::string>> result;
    boost::asio::steady_timer* timer;
  };
  boost::asio::posix::stream_descriptor socket_;
  std::string socket_path_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Pending*> pending_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  bool broken_ = false;
};

}  // namespace deskbox::vmhost
