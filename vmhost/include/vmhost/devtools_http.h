#pragma once
// DevToolsHttp: one request to the DevTools HTTP server of a guest's Chromium (/json/version,
// /json/list, /json/new, ...) over a TCP connection the caller opened into the sandbox's netns,
// and the answer read by Beast's HTTP parser under a header limit, a body limit and one deadline
// for the whole exchange. The answer is guest bytes: it is untrusted, so every size is capped,
// the status line and framing (Content-Length, chunked, or the body running to the connection's
// end) must parse, and nothing in it decides where anything connects: the Host header is the
// fixed guest address (common/slot_network.h).
//
// It is deskbox's only host-side client of that server: vmhost asks it whether the browser is
// up and which pages to reload (SandboxManager), the CDP proxy relays /json answers to clients
// (cdp_proxy::CdpProxy::GuestHttp). It lives in vmhost, as its own library
// (vmhost_devtools_http), because vmhost may not depend on cdp-proxy (docs/design.md: vmhost
// never uses the CDP proxy) while cdp-proxy may use a piece of vmhost; being its own library,
// linking only common and Boost, it brings cdp-proxy nothing else of vmhost and stays out of
// the jailer.
//
// Threads: runs on the executor of the socket it is given; calls share nothing.
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <cstddef>
#include <expected>
#include <string>

namespace deskbox::vmhost {

struct DevToolsHttpLimits {
  size_t header_bytes = 16 * 1024;  // status line and headers
  size_t body_bytes = 1 << 20;      // /json/list of a browser with many tabs stays far below
  std::chrono::milliseconds timeout{15000};  // sending the request and reading the whole answer
};

struct DevToolsAnswer {
  unsigned status = 0;
  std::string body;
};

struct DevToolsHttpError {
  enum class Code {
    kInvalidTarget,   // the target is not an origin-form path of visible ASCII
    kSend,            // the request could not be written
    kReceive,         // the connection failed or ended before the whole answer
    kTimeout,         // no whole answer before the deadline
    kHeaderTooLarge,  // status line and headers over DevToolsHttpLimits::header_bytes
    kBodyTooLarge,    // body over DevToolsHttpLimits::body_bytes
    kMalformed,       // not an HTTP/1.x answer: status line, header or chunk framing
  };
  Code code;
  std::string message;
};

// Sends `method target` with "Connection: close" and reads one answer; any status is an
// answer (the caller decides what a 404 means). The socket is closed afterwards.
boost::asio::awaitable<std::expected<DevToolsAnswer, DevToolsHttpError>> DevToolsHttp(
    boost::asio::ip::tcp::socket socket, boost::beast::http::verb method, std::string target,
    DevToolsHttpLimits limits = {});

}  // namespace deskbox::vmhost
