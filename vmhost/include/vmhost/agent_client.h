#pragma once
// Host side of the guest agent channel: length-prefixed protobuf frames over the unix socket that
// backs the virtio-serial port. The guest is hostile: frames are bounded by FrameReader, and a
// malformed frame closes the channel. Runs on one io_context thread.
#include <boost/asio/awaitable.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "agent.pb.h"
#include "desktop_images/agent_frame.h"

namespace deskbox::vmhost {

struct AgentError {
  enum class Code { kIo, kProtocol, kTimeout, kClosed, kGuest };
  Code code;
  std::string message;
};

class AgentClient {
 public:
  using Socket = boost::asio::local::stream_protocol::socket;
  explicit AgentClient(Socket socket);
  ~AgentClient();
  AgentClient(const AgentClient&) = delete;
  AgentClient& operator=(const AgentClient&) = delete;

  // Sends a request and returns the first response with its id. A guest Error response becomes
  // AgentError{kGuest}.
  boost::asio::awaitable<std::expected<agent::v1::Response, AgentError>> Call(
      agent::v1::Request request, std::chrono::milliseconds timeout);

  // Convenience steps used after every restore / hand-out.
  boost::asio::awaitable<std::expected<void, AgentError>> SetClockNow(
      std::chrono::milliseconds timeout);
  boost::asio::awaitable<std::expected<void, AgentError>> ReseedFromHost(
      std::chrono::milliseconds timeout);

  bool closed() const { return *closed_; }
  void Close();

 private:
  struct Pending {
    std::optional<std::expected<agent::v1::Response, AgentError>> result;
    boost::asio::steady_timer* timer;
  };
  boost::asio::awaitable<void> ReadLoop(std::shared_ptr<bool> closed);
  void FailAll(const AgentError& e);

  Socket socket_;
  desktop_images::FrameReader reader_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Pending*> pending_;
  std::shared_ptr<bool> closed_ = std::make_shared<bool>(false);
  bool started_ = false;
};

}  // namespace deskbox::vmhost
