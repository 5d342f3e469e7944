#pragma once
// HttpServer: the HTTP/1.1 front door on Boost.Beast with C++20 coroutines. One listener, one
// coroutine per connection, one request at a time per connection (keep-alive). The server reads
// only the request head; the handler decides whether and how to read the body (after it has
// authenticated the caller), through Exchange, with a size limit. A body left unread closes the
// connection after the response. Every read and write has a timeout.
//
// Threads: everything runs on the io_context thread that runs the server.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace deskbox::api {

// Writes a chunked response body piece by piece (one write in flight; the caller awaits each).
class ChunkWriter {
 public:
  virtual ~ChunkWriter() = default;
  virtual boost::asio::awaitable<bool> Write(std::string_view data) = 0;  // false: client gone
  // True once the client has closed its side (checked without blocking).
  virtual bool ClientGone() = 0;
  // Ends the response without its last chunk and closes the connection: how a body that fails
  // after the head was sent is reported (the client sees an incomplete chunked body).
  virtual void Abort() = 0;
};

struct HttpResponse {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // When set, the body is produced by this function after the head is sent: chunked, or with
  // this Content-Length when `length` is set (the function then writes exactly that many bytes;
  // fewer, and the connection is closed).
  std::function<boost::asio::awaitable<void>(ChunkWriter&)> stream;
  std::optional<uint64_t> length;
  // When set, the server writes nothing and hands the connection and the request over (a
  // WebSocket upgrade).
  std::function<boost::asio::awaitable<void>(boost::beast::tcp_stream,
                                             boost::beast::http::request<boost::beast::http::buffer_body>)>
      upgrade;
};

struct BodyError {
  enum class Code { kTooLarge, kIo, kTimeout, kMalformed };
  Code code;
  std::string message;
};

// One request as the handler sees it.
class Exchange {
 public:
  using Parser = boost::beast::http::request_parser<boost::beast::http::buffer_body>;
  Exchange(boost::beast::tcp_stream& stream, boost::beast::flat_buffer& buffer, Parser& parser,
           std::string remote);

  boost::beast::http::verb method() const { return parser_.get().method(); }
  std::string_view method_string() const { return parser_.get().method_string(); }
  std::string_view target() const { return parser_.get().target(); }
  std::string_view path() const { return path_; }
  // Decoded query parameters; a name given twice keeps the first (duplicates() lists them).
  const std::map<std::string, std::string>& query() const { return query_; }
  const std::vector<std::string>& duplicates() const { return duplicate_params_; }
  bool query_malformed() const { return query_malformed_; }
  std::string_view header(std::string_view name) const;
  const std::string& remote() const { return remote_; }
  std::optional<uint64_t> content_length() const;

  // Reads the whole body; fails with kTooLarge beyond `limit` bytes (before reading them when a
  // Content-Length says so).
  boost::asio::awaitable<std::expected<std::string, BodyError>> ReadBody(size_t limit);
  // Streams the body: fills `buf` with up to buf.size() bytes; 0 means the body has ended.
  // Fails with kTooLarge once more than `limit` bytes in total arrive.
  boost::asio::awaitable<std::expected<size_t, BodyError>> ReadSome(std::span<char> buf, uint64_t limit);
  bool body_done() const { return parser_.is_done(); }
  bool body_failed() const { return body_error_.has_value(); }

 private:
  boost::asio::awaitable<std::expected<void, BodyError>> MaybeContinue();
  boost::asio::awaitable<std::expected<size_t, BodyError>> ReadSomeOnce(std::span<char> buf, uint64_t limit);
  boost::beast::tcp_stream& stream_;
  boost::beast::flat_buffer& buffer_;
  Parser& parser_;
  std::string remote_;
  std::string path_;
  std::map<std::string, std::string> query_;
  std::vector<std::string> duplicate_params_;
  bool query_malformed_ = false;
  bool continue_sent_ = false;
  uint64_t received_ = 0;
  std::optional<BodyError> body_error_;  // a failed read is final: the parser cannot go on
};

using HttpHandler = std::function<boost::asio::awaitable<HttpResponse>(Exchange&)>;

struct HttpServerOptions {
  std::chrono::seconds header_timeout{30};
  std::chrono::seconds io_timeout{120};  // per read or write of a body
  uint32_t header_limit = 16 * 1024;
  uint32_t max_connections = 1024;
};

class HttpServer {
 public:
  HttpServer(boost::asio::any_io_executor executor, HttpHandler handler, HttpServerOptions options = {});
  // Binds and listens; returns the bound endpoint (port 0 picks one).
  std::expected<boost::asio::ip::tcp::endpoint, std::string> Listen(const std::string& host, uint16_t port);
  void Start();
  void Stop();  // closes the listener; open connections finish their current request
  size_t connections() const { return *connections_; }

 private:
  boost::asio::awaitable<void> AcceptLoop();
  boost::asio::awaitable<void> Session(boost::asio::ip::tcp::socket socket);

  boost::asio::any_io_executor executor_;
  HttpHandler handler_;
  HttpServerOptions options_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::shared_ptr<size_t> connections_ = std::make_shared<size_t>(0);
};

// Percent-decoding for paths and query strings; nullopt on a bad escape or an encoded NUL is
// kept (callers decide). '+' becomes a space only when `plus_is_space`.
std::optional<std::string> PercentDecode(std::string_view s, bool plus_is_space);
std::string StatusText(unsigned status);

}  // namespace deskbox::api
