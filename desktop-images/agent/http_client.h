// A tiny, bounded HTTP/1.0 GET client for Chromium's DevTools endpoints on loopback.
// Every call has a deadline and a body limit; it never follows redirects.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>

namespace deskbox::agent {

struct HttpResponse {
  int status = 0;
  std::string body;
};

struct HttpGetOptions {
  std::chrono::milliseconds timeout{1000};  // connect + request + whole response
  size_t max_body_bytes = 1u << 20;
  size_t max_header_bytes = 16u << 10;
};

// GET http://<ipv4>:<port><path>. Reads until Content-Length bytes of body (DevTools keeps
// connections open) or EOF. Errors are short human-readable strings.
std::expected<HttpResponse, std::string> HttpGet(std::string_view ipv4, uint16_t port,
                                                 std::string_view path,
                                                 const HttpGetOptions& options = {});

// Parses a complete response head ("HTTP/1.x NNN ...\r\n...\r\n\r\n"); exposed for tests.
struct HttpHead {
  int status = 0;
  std::optional<size_t> content_length;
};
std::expected<HttpHead, std::string> ParseHttpHead(std::string_view head);

}  // namespace deskbox::agent
