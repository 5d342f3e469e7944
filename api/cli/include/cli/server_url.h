#pragma once
// Where the daemon is: http://HOST[:PORT][/PREFIX], and the percent-encoding the requests need.
#include <expected>
#include <string>
#include <string_view>

namespace deskbox::cli {

struct ServerUrl {
  std::string host;    // name, IPv4, or IPv6 without brackets
  std::string port;    // decimal, "80" when the URL has none
  std::string prefix;  // "" or "/some/prefix" (no trailing slash); prepended to every route

  // "host:port" as sent in the Host header ("[::1]:8080" for IPv6).
  std::string HostHeader() const;
  // Canonical form for messages: "http://host:port/prefix". Never holds credentials (the
  // parser refuses user info).
  std::string ToString() const;
};

// Accepts "http://host[:port][/prefix]" and, for convenience, "host[:port][/prefix]".
// Refuses https (with a message saying so), user info, queries and fragments.
std::expected<ServerUrl, std::string> ParseServerUrl(std::string_view text);

// Percent-encodes everything except RFC 3986 unreserved characters. For a path segment
// (a sandbox id) pass keep_slash = false; query values keep '/' readable.
std::string PercentEncode(std::string_view text, bool keep_slash = false);

}  // namespace deskbox::cli
