#include "vmhost/devtools_http.h"

#include <fmt/format.h>

#include <boost/asio/error.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "common/slot_network.h"

namespace deskbox::vmhost {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Code = DevToolsHttpError::Code;

namespace {

// What a failed read means. Beast reports the parser's refusals in its http error category;
// the limits and the deadline have their own codes.
DevToolsHttpError ReadError(const boost::system::error_code& ec, const DevToolsHttpLimits& limits) {
  if (ec == http::error::header_limit)
    return {Code::kHeaderTooLarge,
            fmt::format("the answer's head is over {} bytes", limits.header_bytes)};
  if (ec == http::error::body_limit)
    return {Code::kBodyTooLarge,
            fmt::format("the answer's body is over {} bytes", limits.body_bytes)};
  if (ec == beast::error::timeout)
    return {Code::kTimeout, fmt::format("no whole answer in {} ms", limits.timeout.count())};
  if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
      ec == asio::error::eof)
    return {Code::kReceive, "the connection ended before the whole answer"};
  if (ec.category() == http::make_error_code(http::error::bad_version).category())
    return {Code::kMalformed, "not an HTTP answer: " + ec.message()};
  return {Code::kReceive, "reading the answer: " + ec.message()};
}

// The request line is written as given: only an origin-form path of visible ASCII can neither
// break it nor add a header.
bool IsOriginFormTarget(const std::string& target) {
  if (target.empty() || target.front() != '/') return false;
  for (unsigned char c : target)
    if (c <= 0x20 || c >= 0x7f) return false;
  return true;
}

}  // namespace

asio::awaitable<std::expected<DevToolsAnswer, DevToolsHttpError>> DevToolsHttp(
    asio::ip::tcp::socket socket, http::verb method, std::string target,
    DevToolsHttpLimits limits) {
  if (!IsOriginFormTarget(target))
    co_return std::unexpected(
        DevToolsHttpError{Code::kInvalidTarget, "the request target is not a plain path"});
  beast::tcp_stream stream(std::move(socket));
  // One deadline for the whole exchange: every operation below fails with beast::error::timeout
  // once it passes, however slowly the guest trickles bytes.
  stream.expires_after(limits.timeout);
  http::request<http::empty_body> request{method, target, 11};
  request.set(http::field::host, slot_network::GuestCdpHostPort());
  request.set(http::field::connection, "close");
  boost::system::error_code ec;
  co_await http::async_write(stream, request, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    if (ec == beast::error::timeout)
      co_return std::unexpected(DevToolsHttpError{
          Code::kTimeout,
          fmt::format("the request was not sent in {} ms", limits.timeout.count())});
    co_return std::unexpected(
        DevToolsHttpError{Code::kSend, "sending the request: " + ec.message()});
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.header_limit(static_cast<uint32_t>(limits.header_bytes));
  parser.body_limit(limits.body_bytes);
  // Chromium may keep the connection open despite "Connection: close": the parser ends the
  // answer where its Content-Length or last chunk says, or at the connection's end if neither.
  co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
  stream.close();
  if (ec || !parser.is_done()) co_return std::unexpected(ReadError(ec, limits));
  auto& answer = parser.get();
  co_return DevToolsAnswer{answer.result_int(), std::move(answer.body())};
}

}  // namespace deskbox::vmhost
