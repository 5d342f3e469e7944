#include "egress/sniff.h"

#include <arpa/inet.h>

#include <algorithm>
#include <bitset>
#include <expected>
#include <vector>

namespace deskbox::egress {
namespace {

constexpr uint8_t kTlsHandshake = 0x16;
constexpr uint8_t kHandshakeClientHello = 1;
constexpr size_t kTlsRecordHeader = 5;
// TLSPlaintext.length may not exceed 2^14; TLSCiphertext allows 2^14 + 256, and some stacks are
// as lax as that, so the larger bound is the one refused.
constexpr size_t kMaxTlsRecordPayload = 16384 + 256;
constexpr uint16_t kExtServerName = 0;
constexpr uint8_t kNameTypeHostName = 0;
constexpr size_t kMaxMethodLength = 20;

SniffResult NeedMore() {
  return {SniffKind::kNeedMore, {}, {}};
}
SniffResult Other() {
  return {SniffKind::kOther, {}, {}};
}
SniffResult Malformed(std::string detail) {
  return {SniffKind::kMalformed, {}, std::move(detail)};
}

// Big-endian cursor over a ClientHello body; every read is checked against what remains.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> data) : data_(data) {}
  size_t remaining() const { return data_.size() - pos_; }
  bool Skip(size_t n) {
    if (n > remaining()) return false;
    pos_ += n;
    return true;
  }
  bool U8(uint8_t& v) {
    if (remaining() < 1) return false;
    v = data_[pos_++];
    return true;
  }
  bool U16(uint16_t& v) {
    if (remaining() < 2) return false;
    v = static_cast<uint16_t>(data_[pos_] << 8 | data_[pos_ + 1]);
    pos_ += 2;
    return true;
  }
  bool Bytes(size_t n, std::span<const uint8_t>& out) {
    if (n > remaining()) return false;
    out = data_.subspan(pos_, n);
    pos_ += n;
    return true;
  }

 private:
  std::span<const uint8_t> data_;
  size_t pos_ = 0;
};

std::string_view AsText(std::span<const uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// The server_name extension (RFC 6066 §3). Returns the normalized host_name or a kMalformed result.
SniffResult ParseServerName(std::span<const uint8_t> ext) {
  Reader r(ext);
  uint16_t list_length;
  if (!r.U16(list_length) || list_length != r.remaining() || list_length == 0)
    return Malformed("TLS server_name list length does not match its extension");
  std::optional<std::string> host;
  while (r.remaining() > 0) {
    uint8_t type;
    uint16_t length;
    std::span<const uint8_t> name;
    if (!r.U8(type) || !r.U16(length) || !r.Bytes(length, name))
      return Malformed("TLS server_name entry overruns its list");
    if (type != kNameTypeHostName) continue;
    // RFC 6066 forbids two names of one type; servers disagree on which one they use, so a
    // second host_name could name another host than the one the policy saw.
    if (host) return Malformed("TLS server_name has two host_name entries");
    if (length == 0) return Malformed("TLS server_name host_name is empty");
    host = NormalizeName(AsText(name));
    if (!host) return Malformed("TLS server_name host_name is not a valid host name");
  }
  return {SniffKind::kTls, host.value_or(""), {}};
}

// A complete ClientHello body (after the 4-byte handshake header).
SniffResult ParseClientHello(std::span<const uint8_t> body) {
  Reader r(body);
  uint8_t length8;
  uint16_t length16;
  if (!r.Skip(2 + 32)) return Malformed("TLS ClientHello shorter than version and random");
  if (!r.U8(length8) || length8 > 32 || !r.Skip(length8))
    return Malformed("TLS ClientHello session_id length invalid");
  if (!r.U16(length16) || length16 < 2 || length16 % 2 != 0 || !r.Skip(length16))
    return Malformed("TLS ClientHello cipher_suites length invalid");
  if (!r.U8(length8) || length8 < 1 || !r.Skip(length8))
    return Malformed("TLS ClientHello compression_methods length invalid");
  if (r.remaining() == 0) return {SniffKind::kTls, {}, {}};  // no extensions at all
  if (!r.U16(length16) || length16 != r.remaining())
    return Malformed("TLS ClientHello extensions length does not match the message");

  std::bitset<65536> seen;
  SniffResult result{SniffKind::kTls, {}, {}};
  while (r.remaining() > 0) {
    uint16_t type, length;
    std::span<const uint8_t> ext;
    if (!r.U16(type) || !r.U16(length) || !r.Bytes(length, ext))
      return Malformed("TLS extension overruns the ClientHello");
    if (seen.test(type))
      return Malformed("TLS ClientHello repeats extension " + std::to_string(type));
    seen.set(type);
    if (type == kExtServerName) {
      result = ParseServerName(ext);
      if (result.kind != SniffKind::kTls) return result;
    }
  }
  return result;
}

// data[0] is 0x16. Gathers handshake bytes across records until the ClientHello is complete.
SniffResult SniffTls(std::span<const uint8_t> data) {
  if (data.size() < 2) return NeedMore();
  if (data[1] != 0x03) return Other();
  std::vector<uint8_t> handshake;
  size_t pos = 0;
  while (pos < data.size()) {
    if (data[pos] != kTlsHandshake)
      return Malformed("TLS record before the end of the ClientHello is not a handshake record");
    if (data.size() - pos < kTlsRecordHeader) return NeedMore();
    if (data[pos + 1] != 0x03) return Malformed("TLS record version is not 3.x");
    size_t length = size_t{data[pos + 3]} << 8 | data[pos + 4];
    if (length == 0) return Malformed("TLS handshake record is empty");
    if (length > kMaxTlsRecordPayload) return Malformed("TLS record longer than 16640 bytes");
    pos += kTlsRecordHeader;
    // A record still arriving contributes what is here: the ClientHello may end inside it.
    size_t available = std::min(length, data.size() - pos);
    handshake.insert(handshake.end(), data.begin() + pos, data.begin() + pos + available);
    pos += available;

    if (handshake.size() < 4) continue;
    if (handshake[0] != kHandshakeClientHello)
      return Malformed("TLS handshake message is not a ClientHello");
    size_t hello_length = size_t{handshake[1]} << 16 | size_t{handshake[2]} << 8 | handshake[3];
    if (hello_length > kMaxSniffBytes)
      return Malformed("TLS ClientHello longer than the sniff limit");
    if (handshake.size() >= 4 + hello_length)
      return ParseClientHello(std::span(handshake).subspan(4, hello_length));
  }
  return NeedMore();
}

bool IsUpper(uint8_t c) {
  return c >= 'A' && c <= 'Z';
}
bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}
bool IsSpaceOrTab(char c) {
  return c == ' ' || c == '\t';
}
char Lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

// RFC 9110 tchar: what a header field name may contain.
bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || IsDigit(c)) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return Lower(x) == Lower(y); });
}

std::string_view TrimSpaceAndTab(std::string_view s) {
  while (!s.empty() && IsSpaceOrTab(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpaceOrTab(s.back())) s.remove_suffix(1);
  return s;
}

// "host", "host:port", "[v6]" or "[v6]:port" (RFC 9110 §7.2 / RFC 3986 authority without
// userinfo) → the normalized host, or nullopt.
std::optional<std::string> HostOfAuthority(std::string_view authority) {
  std::string_view host = authority, port;
  if (authority.starts_with('[')) {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = authority.substr(0, close + 1);
    std::string_view rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port = rest.substr(1);
      if (port.empty()) return std::nullopt;
    }
  } else if (size_t colon = authority.find(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (port.empty()) return std::nullopt;
  }
  // A bare IPv6 literal ("::1") ends up here with a port that is not digits: it needs brackets.
  if (!port.empty()) {
    if (port.size() > 5 || !std::all_of(port.begin(), port.end(), IsDigit)) return std::nullopt;
    unsigned value = 0;
    for (char c : port) value = value * 10 + static_cast<unsigned>(c - '0');
    if (value < 1 || value > 65535) return std::nullopt;
  }
  if (host.empty()) return std::nullopt;
  return NormalizeName(host);
}

// The host of an absolute-form request target ("http://host:port/path"), empty optional for
// origin-form ("/path") and the other forms. A server must prefer this host over Host (RFC 9112
// §3.2.2), so it has to agree with Host for the policy's view to be the server's.
std::expected<std::optional<std::string>, std::string> HostOfTarget(std::string_view target) {
  size_t scheme_end = target.find("://");
  if (scheme_end == std::string_view::npos) return std::nullopt;
  std::string_view scheme = target.substr(0, scheme_end);
  if (!EqualsIgnoreCase(scheme, "http") && !EqualsIgnoreCase(scheme, "https")) return std::nullopt;
  std::string_view authority = target.substr(scheme_end + 3);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  if (authority.find('@') != std::string_view::npos)
    return std::unexpected("HTTP request target carries userinfo");
  auto host = HostOfAuthority(authority);
  if (!host) return std::unexpected("HTTP request target has an invalid host");
  return host;
}

// data starts with an upper-case letter.
SniffResult SniffHttp(std::span<const uint8_t> data) {
  size_t method_length = 0;
  while (method_length < data.size() && method_length <= kMaxMethodLength &&
         IsUpper(data[method_length]))
    ++method_length;
  if (method_length > kMaxMethodLength) return Other();
  if (method_length == data.size()) return NeedMore();
  if (data[method_length] != ' ') return Other();

  std::string_view text = AsText(data);
  size_t end = text.find("\r\n\r\n");
  if (end == std::string_view::npos) return NeedMore();
  std::string_view head = text.substr(0, end + 2);  // every line ends with CRLF
  // Servers differ on a bare CR or LF (some end a line there, some do not): one such byte would
  // let a header the policy never saw reach the server.
  for (size_t i = 0; i < head.size(); ++i) {
    char c = head[i];
    if (c == '\0') return Malformed("HTTP request head contains a NUL byte");
    if (c == '\n' && (i == 0 || head[i - 1] != '\r'))
      return Malformed("HTTP request head contains a bare LF");
    if (c == '\r' && (i + 1 == head.size() || head[i + 1] != '\n'))
      return Malformed("HTTP request head contains a bare CR");
  }

  size_t line_end = head.find("\r\n");
  std::string_view request_line = head.substr(0, line_end);
  head.remove_prefix(line_end + 2);
  constexpr std::string_view kVersionSuffix = " HTTP/1.1";  // as long as " HTTP/1.0"
  if (request_line.size() < method_length + 1 + kVersionSuffix.size() ||
      (!request_line.ends_with(" HTTP/1.1") && !request_line.ends_with(" HTTP/1.0")))
    return Malformed("HTTP request line does not end with HTTP/1.0 or HTTP/1.1");
  std::string_view target = request_line.substr(method_length + 1);
  target.remove_suffix(kVersionSuffix.size());
  if (target.empty() || target.find_first_of(" \t") != std::string_view::npos)
    return Malformed("HTTP request target is empty or contains spaces");
  auto target_host = HostOfTarget(target);
  if (!target_host) return Malformed(target_host.error());

  std::optional<std::string> host;
  while (!head.empty()) {
    line_end = head.find("\r\n");
    std::string_view line = head.substr(0, line_end);
    head.remove_prefix(line_end + 2);
    if (line.empty()) break;  // cannot happen: the head ends at the first empty line
    if (IsSpaceOrTab(line.front())) return Malformed("HTTP header uses obsolete line folding");
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) return Malformed("HTTP header line without a colon");
    std::string_view field = line.substr(0, colon);
    if (field.empty() || !std::all_of(field.begin(), field.end(), IsTokenChar))
      return Malformed("HTTP header name is empty or not a token");
    if (!EqualsIgnoreCase(field, "host")) continue;
    if (host) return Malformed("HTTP request has two Host headers");
    host = HostOfAuthority(TrimSpaceAndTab(line.substr(colon + 1)));
    if (!host) return Malformed("HTTP Host header is not a valid host[:port]");
  }
  if (*target_host) {
    if (host && *host != **target_host)
      return Malformed("HTTP request target names another host than Host");
    host = std::move(*target_host);
  }
  return {SniffKind::kHttp, host.value_or(""), {}};
}

// Last label of a name made of digits only, or "0x" + hex digits: URL parsers (WHATWG) read such
// names as IPv4 numbers ("127.1", "0x7f.1"), so they are not host names.
bool EndsInANumber(std::string_view name) {
  size_t dot = name.rfind('.');
  std::string_view last = dot == std::string_view::npos ? name : name.substr(dot + 1);
  if (!last.empty() && std::all_of(last.begin(), last.end(), IsDigit)) return true;
  if (last.starts_with("0x")) {
    return std::all_of(last.begin() + 2, last.end(),
                       [](char c) { return IsDigit(c) || (c >= 'a' && c <= 'f'); });
  }
  return false;
}

}  // namespace

SniffResult Sniff(std::span<const uint8_t> data) {
  if (data.empty()) return NeedMore();
  if (data[0] == kTlsHandshake) return SniffTls(data);
  if (IsUpper(data[0])) return SniffHttp(data);
  return Other();
}

std::optional<std::string> NormalizeName(std::string_view name) {
  // Longest acceptable input: a 253-byte name plus its trailing dot; literals are shorter.
  if (name.empty() || name.size() > 254) return std::nullopt;
  // inet_pton reads a C string: a NUL would hide whatever follows it.
  if (name.find('\0') != std::string_view::npos) return std::nullopt;
  std::string text(name);
  for (char& c : text) c = Lower(c);

  if (text.front() == '[') {
    if (text.back() != ']') return std::nullopt;
    text = text.substr(1, text.size() - 2);
    in6_addr v6;
    if (inet_pton(AF_INET6, text.c_str(), &v6) != 1) return std::nullopt;
    char buffer[INET6_ADDRSTRLEN];
    return inet_ntop(AF_INET6, &v6, buffer, sizeof buffer);
  }
  if (text.back() == '.') text.pop_back();
  if (text.empty()) return std::nullopt;

  in_addr v4;
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return text;  // glibc: dotted quad only
  in6_addr v6;
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    char buffer[INET6_ADDRSTRLEN];
    return inet_ntop(AF_INET6, &v6, buffer, sizeof buffer);
  }

  if (text.size() > 253) return std::nullopt;
  size_t label_length = 0;
  for (char c : text) {
    if (c == '.') {
      if (label_length == 0) return std::nullopt;
      label_length = 0;
      continue;
    }
    bool allowed = (c >= 'a' && c <= 'z') || IsDigit(c) || c == '-' || c == '_';
    if (!allowed || ++label_length > 63) return std::nullopt;
  }
  if (label_length == 0) return std::nullopt;
  if (EndsInANumber(text)) return std::nullopt;
  return text;
}

bool IsAddressLiteral(std::string_view name) {
  if (name.find('\0') != std::string_view::npos) return false;
  std::string text(name);
  in_addr v4;
  in6_addr v6;
  return inet_pton(AF_INET, text.c_str(), &v4) == 1 || inet_pton(AF_INET6, text.c_str(), &v6) == 1;
}

}  // namespace deskbox::egress
