#include "api/http_server.h"

#include <sys/socket.h>

#include <cerrno>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <fmt/format.h>

#include "common/log.h"

namespace deskbox::api {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
constexpr char kHttpLog[] = "http";

std::optional<std::string> PercentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      int h = hex(s[i + 1]), l = hex(s[i + 2]);
      if (h < 0 || l < 0) return std::nullopt;
      out.push_back(static_cast<char>(h * 16 + l));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string StatusText(unsigned status) {
  return std::string(http::obsolete_reason(static_cast<http::status>(status)));
}

Exchange::Exchange(beast::tcp_stream& stream, beast::flat_buffer& buffer, Parser& parser, std::string remote)
    : stream_(stream), buffer_(buffer), parser_(parser), remote_(std::move(remote)) {
  std::string_view t = parser_.get().target();
  auto q = t.find('?');
  auto p = PercentDecode(t.substr(0, q), false);
  if (p) path_ = *p;
  else {
    path_ = std::string(t.substr(0, q));
    query_malformed_ = true;
  }
  if (q == std::string_view::npos) return;
  std::string_view rest = t.substr(q + 1);
  while (!rest.empty()) {
    auto amp = rest.find('&');
    std::string_view kv = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (kv.empty()) continue;
    auto eq = kv.find('=');
    auto k = PercentDecode(kv.substr(0, eq), true);
    auto v = PercentDecode(eq == std::string_view::npos ? std::string_view() : kv.substr(eq + 1), true);
    if (!k || !v) {
      query_malformed_ = true;
      continue;
    }
    if (query_.count(*k)) duplicate_params_.push_back(*k);
    else query_.emplace(std::move(*k), std::move(*v));
  }
}

std::string_view Exchange::header(std::string_view name) const {
  auto it = parser_.get().find(name);
  if (it == parser_.get().end()) return {};
  return it->value();
}

std::optional<uint64_t> Exchange::content_length() const {
  auto cl = parser_.content_length();
  return cl ? std::optional<uint64_t>(*cl) : std::nullopt;
}

asio::awaitable<std::expected<void, BodyError>> Exchange::MaybeContinue() {
  if (continue_sent_) co_return std::expected<void, BodyError>{};
  continue_sent_ = true;
  std::string_view expect = header("Expect");
  if (!beast::iequals(expect, "100-continue")) co_return std::expected<void, BodyError>{};
  static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  boost::system::error_code ec;
  stream_.expires_after(std::chrono::seconds(30));
  co_await asio::async_write(stream_, asio::buffer(kContinue), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return std::unexpected(BodyError{BodyError::Code::kIo, ec.message()});
  co_return std::expected<void, BodyError>{};
}

asio::awaitable<std::expected<size_t, BodyError>> Exchange::ReadSome(std::span<char> buf, uint64_t limit) {
  if (body_error_) co_return std::unexpected(*body_error_);
  auto result = co_await ReadSomeOnce(buf, limit);
  if (!result) body_error_ = result.error();
  co_return result;
}

asio::awaitable<std::expected<size_t, BodyError>> Exchange::ReadSomeOnce(std::span<char> buf, uint64_t limit) {
  if (parser_.is_done()) co_return 0;
  if (auto cl = parser_.content_length(); cl && *cl > limit)
    co_return std::unexpected(BodyError{BodyError::Code::kTooLarge,
                                        fmt::format("body of {} bytes is over the limit of {} bytes", *cl, limit)});
  if (auto c = co_await MaybeContinue(); !c) co_return std::unexpected(c.error());
  for (;;) {
    auto& body = parser_.get().body();
    body.data = buf.data();
    body.size = buf.size();
    boost::system::error_code ec;
    stream_.expires_after(std::chrono::seconds(120));
    co_await http::async_read(stream_, buffer_, parser_, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    size_t got = buf.size() - body.size;
    if (ec) {
      if (ec == beast::error::timeout)
        co_return std::unexpected(BodyError{BodyError::Code::kTimeout, "the request body stalled"});
      if (ec.category() == make_error_code(http::error::bad_target).category() || ec == http::error::partial_message)
        co_return std::unexpected(BodyError{BodyError::Code::kMalformed, "malformed request body: " + ec.message()});
      co_return std::unexpected(BodyError{BodyError::Code::kIo, ec.message()});
    }
    received_ += got;
    if (received_ > limit)
      co_return std::unexpected(BodyError{BodyError::Code::kTooLarge,
                                          fmt::format("body is over the limit of {} bytes", limit)});
    if (got > 0 || parser_.is_done()) co_return got;
  }
}

asio::awaitable<std::expected<std::string, BodyError>> Exchange::ReadBody(size_t limit) {
  std::string out;
  char buf[16384];
  for (;;) {
    auto n = co_await ReadSome(std::span<char>(buf, sizeof buf), limit);
    if (!n) co_return std::unexpected(n.error());
    if (*n == 0) break;
    out.append(buf, *n);
  }
  co_return out;
}

namespace {

class StreamChunkWriter final : public ChunkWriter {
 public:
  // `length`: a body of this many bytes, written as they come (no chunks); else chunked.
  StreamChunkWriter(beast::tcp_stream& s, std::optional<uint64_t> length) : s_(s), length_(length) {}
  asio::awaitable<bool> Write(std::string_view data) override {
    if (data.empty() || failed_) co_return !failed_;
    boost::system::error_code ec;
    s_.expires_after(std::chrono::seconds(120));
    if (length_) {
      if (data.size() > *length_ - written_) {
        failed_ = true;  // more than the head announced: a bug, never sent
        co_return false;
      }
      co_await asio::async_write(s_, asio::buffer(data.data(), data.size()),
                                 asio::redirect_error(asio::use_awaitable, ec));
      written_ += data.size();
    } else {
      co_await asio::async_write(s_, http::make_chunk(asio::buffer(data.data(), data.size())),
                                 asio::redirect_error(asio::use_awaitable, ec));
    }
    if (ec) failed_ = true;
    co_return !failed_;
  }
  bool ClientGone() override {
    if (failed_) return true;
    char c;
    ssize_t n = ::recv(s_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    // 0: the client sent FIN; an error other than "nothing to read": it reset the connection.
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) failed_ = true;
    return failed_;
  }
  void Abort() override {
    failed_ = true;
    boost::system::error_code ec;
    s_.socket().close(ec);
  }
  asio::awaitable<void> Finish() {
    if (failed_) co_return;
    if (length_) {
      if (written_ != *length_) failed_ = true;  // the client cannot tell: close
      co_return;
    }
    boost::system::error_code ec;
    s_.expires_after(std::chrono::seconds(30));
    co_await asio::async_write(s_, http::make_chunk_last(), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) failed_ = true;
  }
  bool failed() const { return failed_; }

 private:
  beast::tcp_stream& s_;
  std::optional<uint64_t> length_;
  uint64_t written_ = 0;
  bool failed_ = false;
};

}  // namespace

HttpServer::HttpServer(asio::any_io_executor executor, HttpHandler handler, HttpServerOptions options)
    : executor_(executor), handler_(std::move(handler)), options_(options), acceptor_(executor) {}

std::expected<tcp::endpoint, std::string> HttpServer::Listen(const std::string& host, uint16_t port) {
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) return std::unexpected(fmt::format("'{}' is not an IP address", host));
  tcp::endpoint ep(addr, port);
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return std::unexpected(fmt::format("listening on {}:{}: {}", host, port, ec.message()));
  return acceptor_.local_endpoint();
}

void HttpServer::Start() { asio::co_spawn(executor_, AcceptLoop(), asio::detached); }

void HttpServer::Stop() {
  boost::system::error_code ec;
  acceptor_.close(ec);
}

asio::awaitable<void> HttpServer::AcceptLoop() {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket s = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
    if (ec) {
      log::Warn(kHttpLog, "accept: {}", ec.message());
      continue;
    }
    if (*connections_ >= options_.max_connections) {
      s.close(ec);  // over the limit: refuse rather than queue without bound
      continue;
    }
    asio::co_spawn(executor_, Session(std::move(s)), asio::detached);
  }
}

asio::awaitable<void> HttpServer::Session(tcp::socket socket) {
  auto counter = connections_;
  ++*counter;
  struct Decrement {
    std::shared_ptr<size_t> c;
    ~Decrement() { --*c; }
  } decrement{counter};
  boost::system::error_code ec;
  auto peer = socket.remote_endpoint(ec);
  std::string remote = ec ? "" : fmt::format("{}:{}", peer.address().to_string(), peer.port());
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  bool body_left = false;  // the last request's body was not read to its end
  for (;;) {
    Exchange::Parser parser;
    parser.header_limit(options_.header_limit);
    parser.body_limit(boost::none);  // limits are the handler's (per route)
    stream.expires_after(options_.header_timeout);
    co_await http::async_read_header(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::eof ||
          ec == asio::error::connection_reset || ec == asio::error::operation_aborted)
        break;
      // A head that does not parse: say so once, then close.
      http::response<http::string_body> bad{ec == http::error::header_limit ? http::status::request_header_fields_too_large
                                                                             : http::status::bad_request, 11};
      bad.set(http::field::content_type, "application/json");
      bad.set(http::field::connection, "close");
      bad.body() = fmt::format(R"({{"error":{{"code":"{}","message":"malformed HTTP request: {}"}}}})",
                               ec == http::error::header_limit ? "headers_too_large" : "invalid_request",
                               ec.message());
      bad.prepare_payload();
      stream.expires_after(std::chrono::seconds(10));
      co_await http::async_write(stream, bad, asio::redirect_error(asio::use_awaitable, ec));
      break;
    }
    bool keep_alive = parser.get().keep_alive();
    unsigned version = parser.get().version();
    Exchange ex(stream, buffer, parser, remote);
    HttpResponse res = co_await handler_(ex);
    if (res.upgrade) {
      co_await res.upgrade(std::move(stream), parser.release());
      co_return;
    }
    // A body the handler did not read would be taken for the next request: drain a little of
    // it, or close.
    if (!parser.is_done() && !ex.body_failed()) {
      char sink[16384];
      uint64_t drained = 0;
      while (!parser.is_done() && drained < (64u << 10)) {
        auto n = co_await ex.ReadSome(std::span<char>(sink, sizeof sink), UINT64_MAX);
        if (!n || *n == 0) break;
        drained += *n;
      }
    }
    if (!parser.is_done() || ex.body_failed()) keep_alive = false;
    body_left = !parser.is_done();
    if (res.stream) {
      http::response<http::empty_body> head{static_cast<http::status>(res.status), version};
      head.set(http::field::content_type, res.content_type);
      for (auto& [k, v] : res.headers) head.set(k, v);
      if (res.length)
        head.content_length(*res.length);
      else
        head.chunked(true);
      head.keep_alive(keep_alive);
      http::response_serializer<http::empty_body> sr{head};
      stream.expires_after(std::chrono::seconds(30));
      co_await http::async_write_header(stream, sr, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
      StreamChunkWriter writer(stream, res.length);
      co_await res.stream(writer);
      co_await writer.Finish();
      if (writer.failed()) break;
    } else {
      http::response<http::string_body> out{static_cast<http::status>(res.status), version};
      if (res.status != 204 && res.status != 304) out.set(http::field::content_type, res.content_type);
      for (auto& [k, v] : res.headers) out.set(k, v);
      out.body() = std::move(res.body);
      out.keep_alive(keep_alive);
      out.prepare_payload();
      stream.expires_after(options_.io_timeout);
      co_await http::async_write(stream, out, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
    }
    if (!keep_alive) break;
  }
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  // A client still sending a body we answered early (an upload refused or ended by a delete)
  // must get to read the answer: closing with its bytes unread would reset the connection and
  // could discard the answer on its side. So read and drop for a moment (bounded), then close.
  if (!ec && body_left) {
    char sink[16384];
    size_t dropped = 0;
    stream.expires_after(std::chrono::seconds(1));
    while (dropped < (1u << 20)) {
      size_t n = co_await stream.async_read_some(asio::buffer(sink), asio::redirect_error(asio::use_awaitable, ec));
      if (ec || n == 0) break;
      dropped += n;
    }
  }
  stream.close();
}

}  // namespace deskbox::api
