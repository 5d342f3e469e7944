#pragma once
// QMP (QEMU Machine Protocol) client: JSON objects, one per line, over a unix socket.
//
// QmpFramer is the bounded, non-blocking parser (fuzzed: tests/fuzz/qmp_framer_fuzz.cc).
// QmpClient runs on one io_context thread (not thread-safe): a reader coroutine dispatches
// replies to waiting Execute() calls by id and keeps recent events for WaitEvent().
#include <boost/asio/awaitable.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <expected>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace deskbox::vmhost {

struct QmpError {
  enum class Code { kIo, kProtocol, kTooLarge, kCommand, kTimeout, kClosed };
  Code code;
  std::string message;  // for kCommand: QMP's class and desc
};

class QmpFramer {
 public:
  static constexpr size_t kMaxLineBytes = 1 << 20;
  // Appends bytes. Returns kTooLarge if a line grows past the limit (the framer is then failed).
  std::expected<void, QmpError> Feed(std::string_view bytes);
  // The next complete JSON object, nullopt if more bytes are needed, or an error for a line that
  // is not a JSON object. Empty lines are skipped.
  std::expected<std::optional<nlohmann::json>, QmpError> Next();

 private:
  std::string buf_;
  size_t scan_from_ = 0;
  bool failed_ = false;
};

class QmpClient {
 public:
  using Socket = boost::asio::local::stream_protocol::socket;
  explicit QmpClient(Socket socket);
  ~QmpClient();
  QmpClient(const QmpClient&) = delete;
  QmpClient& operator=(const QmpClient&) = delete;

  // Reads the greeting, sends qmp_capabilities and starts the reader. Call once.
  boost::asio::awaitable<std::expected<nlohmann::json, QmpError>> Handshake(
      std::chrono::milliseconds timeout);
  // Runs a command and returns its "return" value.
  boost::asio::awaitable<std::expected<nlohmann::json, QmpError>> Execute(
      std::string command, nlohmann::json arguments = nlohmann::json::object(),
      std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // Waits for an event named `name` (optionally whose data matches `predicate`) that arrived
  // after the last call to ClearEvents() or at any time later.
  boost::asio::awaitable<std::expected<nlohmann::json, QmpError>> WaitEvent(
      std::string name, std::chrono::milliseconds timeout,
      std::function<bool(const nlohmann::json&)> predicate = {});
  void ClearEvents() { events_.clear(); }
  bool closed() const { return state_->closed; }
  void Close();

 private:
  struct Pending {
    std::optional<std::expected<nlohmann::json, QmpError>> result;
    boost::asio::steady_timer* timer = nullptr;
  };
  struct State {
    bool closed = false;
  };
  boost::asio::awaitable<void> ReadLoop(std::shared_ptr<State> state);
  boost::asio::awaitable<std::expected<nlohmann::json, QmpError>> ReadOne(
      std::chrono::milliseconds timeout);
  void FailAll(const QmpError& err);

  Socket socket_;
  QmpFramer framer_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Pending*> pending_;
  std::deque<nlohmann::json> events_;
  std::vector<boost::asio::steady_timer*> event_waiters_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace deskbox::vmhost

namespace deskbox::vmhost {
// Arguments shared by snapshot and restore. (Built outside coroutines: g++ 12 miscompiles
// braced initializer lists of string literals inside co_await expressions.)
nlohmann::json IgnoreSharedCapability();
nlohmann::json UriArgument(const std::string& uri);
}  // namespace deskbox::vmhost
