#pragma once
// Answers an HTTP request that a relay took over from deskboxd's HTTP server (a WebSocket
// upgrade for CDP or the live view) but will not serve: the status and deskbox's JSON error body
// ({"error": {"code", "message"}}), then the connection is closed.
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace deskbox {

// The strings are taken by value: the coroutine may outlive the caller's temporaries.
inline boost::asio::awaitable<void> RejectUpgrade(boost::beast::tcp_stream& stream, unsigned http_version,
                                                  unsigned status, std::string code, std::string message,
                                                  std::string request_id) {
  namespace http = boost::beast::http;
  http::response<http::string_body> res{static_cast<http::status>(status), http_version};
  res.set(http::field::content_type, "application/json");
  res.set(http::field::cache_control, "no-store");
  res.set("X-Request-Id", request_id);
  res.keep_alive(false);
  nlohmann::json body = {{"error", {{"code", code}, {"message", message}}}};
  res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  res.prepare_payload();
  boost::system::error_code ec;
  stream.expires_after(std::chrono::seconds(10));
  co_await http::async_write(stream, res, boost::asio::redirect_error(boost::asio::use_awaitable, ec));
  stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
  stream.close();
}

}  // namespace deskbox
