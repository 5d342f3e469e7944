#pragma once
// Host side of the guest agent channel: length-prefixed protobuf frames over the unix socket that
// backs the virtio-serial port. The guest is hostile: frames are bounded by FrameReader, and a
// malformed frame closes the channel. Runs on one io_context thread.
#include <boost/asio/awaitable.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
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
  int guest_code = 0;  // kGuest: the agent's Error.Code (agent.proto)
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

  // A call answered by several responses (FileRead) or sent as several requests of one id
  // (FileWrite). Next() returns the responses in order; the stream ends after a response that is
  // final (a FileChunk marked final, or anything else) or an error. At most kStreamWindow
  // responses wait unread: beyond that the channel stops reading until Next() is called, so a
  // slow consumer never grows memory. The AgentClient must outlive its streams.
  class Stream {
   public:
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    uint64_t id() const { return id_; }
    // Sends one request of this stream (its id is set here).
    boost::asio::awaitable<std::expected<void, AgentError>> Send(agent::v1::Request request);
    // The next response; std::nullopt once the stream has ended.
    boost::asio::awaitable<std::optional<std::expected<agent::v1::Response, AgentError>>> Next(
        std::chrono::milliseconds timeout);

   private:
    friend class AgentClient;
    Stream(AgentClient& client, uint64_t id);
    AgentClient& client_;
    uint64_t id_;
    std::shared_ptr<bool> closed_;
  };
  static constexpr size_t kStreamWindow = 8;
  std::unique_ptr<Stream> OpenStream();

  bool closed() const { return *closed_; }
  void Close();

 private:
  struct Pending {
    std::deque<std::expected<agent::v1::Response, AgentError>> results;
    bool multi = false;
    bool done = false;  // the last response (or a failure) has arrived
    boost::asio::steady_timer* timer = nullptr;
  };
  void Deliver(uint64_t id, std::expected<agent::v1::Response, AgentError> r);
  void StartReading();
  boost::asio::awaitable<void> ReadLoop(std::shared_ptr<bool> closed);
  void FailAll(const AgentError& e);

  Socket socket_;
  desktop_images::FrameReader reader_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Pending*> pending_;
  std::map<uint64_t, std::unique_ptr<Pending>> streams_;
  boost::asio::steady_timer window_timer_;  // ReadLoop waits on it while a stream is full
  std::shared_ptr<bool> closed_ = std::make_shared<bool>(false);
  bool started_ = false;
};

}  // namespace deskbox::vmhost
