#include "cli/server_url.h"

#include <fmt/format.h>

#include <charconv>

namespace deskbox::cli {

std::string ServerUrl::HostHeader() const {
  bool ipv6 = host.find(':') != std::string::npos;
  return ipv6 ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

std::string ServerUrl::ToString() const {
  return "http://" + HostHeader() + prefix;
}

std::expected<ServerUrl, std::string> ParseServerUrl(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return std::unexpected(fmt::format("bad URL \"{}\": {}", text, why));
  };
  std::string_view rest = text;
  if (auto scheme_end = rest.find("://"); scheme_end != std::string_view::npos) {
    std::string scheme(rest.substr(0, scheme_end));
    for (auto& ch : scheme) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (scheme == "https")
      return std::unexpected(fmt::format(
          "https is not supported (\"{}\"): use http:// to a daemon on this host or through "
          "a tunnel or TLS-terminating proxy",
          text));
    if (scheme != "http") return bad("only http:// URLs are supported");
    rest.remove_prefix(scheme_end + 3);
  }
  if (rest.find_first_of("?#") != std::string_view::npos)
    return bad("a query or fragment is not allowed");
  for (unsigned char ch : rest)
    if (ch <= 0x20 || ch >= 0x7f) return bad("spaces and control characters are not allowed");

  size_t path_start = rest.find('/');
  std::string_view authority = rest.substr(0, path_start);
  std::string_view path =
      path_start == std::string_view::npos ? std::string_view() : rest.substr(path_start);
  if (authority.find('@') != std::string_view::npos)
    return bad("user info is not allowed (pass the key with --key or DESKBOX_KEY)");

  ServerUrl url;
  std::string_view port;
  if (authority.starts_with('[')) {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unterminated [IPv6 address]");
    url.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (!after.starts_with(':')) return bad("junk after ]");
      port = after.substr(1);
      if (port.empty()) return bad("empty port");
    }
    if (url.host.empty()) return bad("empty host");
  } else {
    size_t colon = authority.find(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) return bad("empty port");
    }
    if (url.host.empty()) return bad("no host");
  }
  if (!port.empty()) {
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
      return bad("port must be 1..65535");
    url.port = std::to_string(value);
  } else {
    url.port = "80";
  }
  while (path.ends_with('/')) path.remove_suffix(1);
  url.prefix = std::string(path);
  return url;
}

std::string PercentEncode(std::string_view text, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char ch : text) {
    bool unreserved = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' ||
                      ch == '~' || (keep_slash && ch == '/');
    if (unreserved) {
      out.push_back(static_cast<char>(ch));
    } else {
      out.push_back('%');
      out.push_back(kHex[ch >> 4]);
      out.push_back(kHex[ch & 15]);
    }
  }
  return out;
}

}  // namespace deskbox::cli
