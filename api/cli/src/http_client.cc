#include "http_client.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstring>

namespace deskbox::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Seconds = std::chrono::seconds;

constexpr Seconds kConnectTimeout{10};
constexpr Seconds kSendTimeout{60};
constexpr uint64_t kMaxJsonBody = 64ull << 20;  // exec output: 2 × 6 MiB, base64
constexpr uint64_t kMaxErrorBody = 1ull << 20;
constexpr size_t kChunk = 64 * 1024;
constexpr std::string_view kUserAgent = "deskbox-cli/0.1";

// One TCP connection driven synchronously: each asynchronous operation is started and the
// io_context run until it completes, so the tcp_stream's timer bounds it. (Blocking Asio
// calls have no timeouts.)
class Connection {
 public:
  explicit Connection(const ServerUrl& url) : url_(url) {}

  std::expected<void, ClientError> Open() {
    tcp::resolver resolver(ioc_);
    beast::error_code ec;
    auto endpoints = resolver.resolve(url_.host, url_.port, ec);
    if (ec)
      return std::unexpected(ClientError{fmt::format("cannot connect to {}: cannot resolve {}: {}",
                                                     url_.ToString(), url_.host, ec.message())});
    ec = Run(kConnectTimeout, [&](auto handler) { stream_.async_connect(endpoints, handler); });
    if (ec)
      return std::unexpected(ClientError{
          fmt::format("cannot connect to {}: {}", url_.ToString(), Describe(ec, kConnectTimeout))});
    return {};
  }

  // Runs the operation `start` begins with a completion handler; returns its error code.
  template <typename Start>
  beast::error_code Run(std::optional<Seconds> timeout, Start&& start) {
    if (timeout)
      stream_.expires_after(*timeout);
    else
      stream_.expires_never();
    std::optional<beast::error_code> result;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    ioc_.restart();
    ioc_.run();
    return result.value_or(asio::error::operation_aborted);
  }

  std::unexpected<ClientError> Fail(std::string_view doing, beast::error_code ec,
                                    std::optional<Seconds> timeout = std::nullopt) const {
    return std::unexpected(
        ClientError{fmt::format("{}: {}: {}", url_.ToString(), doing, Describe(ec, timeout))});
  }

  static std::string Describe(beast::error_code ec, std::optional<Seconds> timeout) {
    if (ec == beast::error::timeout)
      return timeout ? fmt::format("timed out after {} s", timeout->count()) : "timed out";
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == http::error::partial_message)
      return "the daemon closed the connection";
    return ec.message();
  }

  beast::tcp_stream& stream() { return stream_; }
  beast::flat_buffer& buffer() { return buffer_; }

 private:
  const ServerUrl& url_;
  asio::io_context ioc_;
  beast::tcp_stream stream_{ioc_};
  beast::flat_buffer buffer_;
};

template <typename Body>
void SetCommonHeaders(http::request<Body>& req, const ServerUrl& url,
                      const std::optional<std::string>& credential) {
  req.set(http::field::host, url.HostHeader());
  req.set(http::field::user_agent, kUserAgent);
  if (credential) req.set(http::field::authorization, "Bearer " + *credential);
}

template <typename Body>
HttpResponse ToResponse(const http::response<Body>& res) {
  HttpResponse out;
  out.status = res.result_int();
  out.reason = std::string(res.reason());
  out.content_type = std::string(res[http::field::content_type]);
  out.retry_after = std::string(res[http::field::retry_after]);
  return out;
}

// Reads a complete response with a string body of at most `limit` bytes.
std::expected<HttpResponse, ClientError> ReadWhole(Connection& conn, Seconds wait, uint64_t limit) {
  http::response_parser<http::string_body> parser;
  parser.body_limit(limit);
  auto ec = conn.Run(
      wait, [&](auto handler) { http::async_read(conn.stream(), conn.buffer(), parser, handler); });
  if (ec == http::error::body_limit)
    return std::unexpected(ClientError{"the daemon's response is too large"});
  if (ec) return conn.Fail("reading the response", ec, wait);
  HttpResponse out = ToResponse(parser.get());
  out.body = std::move(parser.get().body());
  return out;
}

}  // namespace

ApiClient::ApiClient(ServerUrl url, std::optional<std::string> credential)
    : url_(std::move(url)), credential_(std::move(credential)) {}

std::expected<HttpResponse, ClientError> ApiClient::Call(const ApiRequest& request, Seconds wait) {
  Connection conn(url_);
  if (auto opened = conn.Open(); !opened) return std::unexpected(opened.error());
  http::request<http::string_body> req{request.method, url_.prefix + request.target, 11};
  SetCommonHeaders(req, url_, credential_);
  req.set(http::field::accept, "application/json");
  if (request.body) {
    req.set(http::field::content_type, "application/json");
    // The parser refused non-UTF-8 input; replace rather than throw should any slip through.
    req.body() = request.body->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  req.prepare_payload();
  auto ec =
      conn.Run(kSendTimeout, [&](auto handler) { http::async_write(conn.stream(), req, handler); });
  if (ec) return conn.Fail("sending the request", ec, kSendTimeout);
  return ReadWhole(conn, wait, kMaxJsonBody);
}

std::expected<HttpResponse, ClientError> ApiClient::Download(const ApiRequest& request,
                                                             const BodySink& sink,
                                                             std::optional<Seconds> idle) {
  Connection conn(url_);
  if (auto opened = conn.Open(); !opened) return std::unexpected(opened.error());
  http::request<http::empty_body> req{request.method, url_.prefix + request.target, 11};
  SetCommonHeaders(req, url_, credential_);
  req.prepare_payload();
  auto ec =
      conn.Run(kSendTimeout, [&](auto handler) { http::async_write(conn.stream(), req, handler); });
  if (ec) return conn.Fail("sending the request", ec, kSendTimeout);

  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  ec = conn.Run(idle, [&](auto handler) {
    http::async_read_header(conn.stream(), conn.buffer(), parser, handler);
  });
  if (ec) return conn.Fail("reading the response", ec, idle);
  if (parser.get().result_int() < 200 || parser.get().result_int() >= 300) {
    // The body is an error document: read it whole, as a string.
    http::response_parser<http::string_body> error_parser(std::move(parser));
    error_parser.body_limit(kMaxErrorBody);
    ec = conn.Run(idle.value_or(kSendTimeout), [&](auto handler) {
      http::async_read(conn.stream(), conn.buffer(), error_parser, handler);
    });
    HttpResponse out = ToResponse(error_parser.get());
    if (!ec) out.body = std::move(error_parser.get().body());
    return out;  // a broken error body still leaves the status to report
  }
  HttpResponse out = ToResponse(parser.get());
  std::array<char, kChunk> piece;
  while (!parser.is_done()) {
    parser.get().body().data = piece.data();
    parser.get().body().size = piece.size();
    // read_some returns as soon as some of the body arrived: --follow prints events live.
    ec = conn.Run(idle, [&](auto handler) {
      http::async_read_some(conn.stream(), conn.buffer(), parser, handler);
    });
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return conn.Fail("reading the response body", ec, idle);
    size_t got = piece.size() - parser.get().body().size;
    if (got == 0) continue;
    if (auto failed = sink(std::string_view(piece.data(), got)))
      return std::unexpected(ClientError{std::move(*failed)});
  }
  return out;
}

std::expected<HttpResponse, ClientError> ApiClient::Upload(const ApiRequest& request,
                                                           const UploadSource& source,
                                                           Seconds idle) {
  Connection conn(url_);
  if (auto opened = conn.Open(); !opened) return std::unexpected(opened.error());
  http::request<http::buffer_body> req{request.method, url_.prefix + request.target, 11};
  SetCommonHeaders(req, url_, credential_);
  req.set(http::field::accept, "application/json");
  req.set(http::field::content_type, "application/octet-stream");
  if (source.size)
    req.content_length(*source.size);
  else
    req.chunked(true);
  req.body().data = nullptr;
  req.body().more = true;
  http::request_serializer<http::buffer_body> serializer(req);

  // The daemon may refuse the upload (401, 404, 413) and close before reading it all; its
  // answer is then usually still readable and says more than "connection reset".
  auto early_answer = [&](std::string_view doing,
                          beast::error_code ec) -> std::expected<HttpResponse, ClientError> {
    auto answer = ReadWhole(conn, Seconds(5), kMaxErrorBody);
    if (answer && !answer->ok()) return answer;
    return conn.Fail(doing, ec, idle);
  };

  auto ec = conn.Run(
      idle, [&](auto handler) { http::async_write_header(conn.stream(), serializer, handler); });
  if (ec) return early_answer("sending the request", ec);

  std::array<char, kChunk> piece;
  uint64_t sent = 0;
  for (;;) {
    size_t want = piece.size();
    if (source.size) want = static_cast<size_t>(std::min<uint64_t>(want, *source.size - sent));
    ssize_t got = 0;
    if (want > 0) {
      do {
        got = ::read(source.fd, piece.data(), want);
      } while (got < 0 && errno == EINTR);
    }
    if (got < 0)
      return std::unexpected(
          ClientError{fmt::format("reading {}: {}", source.name, std::strerror(errno))});
    if (got == 0 && source.size && sent < *source.size)
      return std::unexpected(
          ClientError{fmt::format("{} shrank while it was being uploaded ({} of {} bytes sent)",
                                  source.name, sent, *source.size)});
    req.body().data = got > 0 ? piece.data() : nullptr;
    req.body().size = static_cast<size_t>(got);
    req.body().more = got > 0;
    sent += static_cast<uint64_t>(got);
    ec = conn.Run(idle,
                  [&](auto handler) { http::async_write(conn.stream(), serializer, handler); });
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return early_answer("sending the file", ec);
    if (got == 0) break;
  }
  // The daemon may still be writing the last bytes into the guest.
  return ReadWhole(conn, std::max(idle, Seconds(120)), kMaxErrorBody);
}

}  // namespace deskbox::cli
