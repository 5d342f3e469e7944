#pragma once
// What the CLI prints: tables and key/value views of API objects, error lines, exit codes.
// Pure functions of the JSON; tolerant of missing or oddly typed fields (a newer daemon may add
// or change fields, and the CLI should still print what it can).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace deskbox::cli {

// Responses keep the daemon's key order, so --json output and events read as sent.
using Json = nlohmann::ordered_json;

// Columns padded to the widest cell, two spaces apart, no trailing spaces; one '\n' per row.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

// `ls`: ID STATE TEMPLATE RESOLUTION EXPIRES CREATED from {"sandboxes":[…]}.
std::string FormatSandboxList(const Json& response);
// `show`: "key: value" lines, known fields first in the contract's order, then the rest.
std::string FormatSandbox(const Json& sandbox);
// `token ls`: ID SCOPE CREATED EXPIRES.
std::string FormatTokenList(const Json& response);
// `keys ls`: ID NAME CREATED.
std::string FormatKeyList(const Json& response);
// `templates`: NAME DEFAULT SCREEN MEMORY VCPUS ACCEL.
std::string FormatTemplateList(const Json& response);
// `egress`: "default ACTION", then one "allow RULE" line per allow rule, then "deny RULE" lines.
std::string FormatEgressPolicy(const Json& policy);

// `recording ls`: one line "status: … enabled: … size: … duration: … dropped_frames: …" (and
// "problem: …" when there is one), then INDEX START END DURATION SIZE SCREEN SHA256 FLAGS with
// the first 16 hex digits of each segment's SHA-256 and flags "truncated", "live".
std::string FormatRecording(const Json& recording);
// `recording verify`: "ok: N events, M segments checked, head HEX" when the response says ok;
// else "not ok: …" and one "KIND  FILE  MESSAGE" line per problem.
std::string FormatVerification(const Json& verification);
// Whether a verification response says ok (anything but "ok": true is not).
bool VerificationOk(const Json& verification);
// 1536 → "1.5 KiB"; under 1 KiB in bytes ("512 B").
std::string HumanBytes(uint64_t bytes);
// Milliseconds as "42.5s", "1m01s", "2h03m04s".
std::string HumanDuration(uint64_t ms);

// Text from the daemon may hold anything another API user wrote (metadata, names): control
// characters are escaped so it cannot rewrite the terminal and one value stays on one line.
std::string Printable(std::string_view text);

// object[name], or null when object is not an object or lacks the field. Never throws.
const Json& Field(const Json& object, std::string_view name);

// Indented JSON plus a newline; invalid UTF-8 is replaced rather than thrown on.
std::string Pretty(const Json& value);

// A JSON value as one line of text: strings unquoted, null as "-", others compact JSON.
std::string Scalar(const Json& value);

// "<code>: <message>" from an API error body; otherwise "HTTP <status> <reason>" followed by
// the start of the body (control characters replaced) when there is one.
std::string FormatApiError(unsigned status, std::string_view reason, std::string_view body);

// Exit status that mirrors the command's: 124 if it timed out, 128+N if killed by signal N,
// else its exit code (clamped to 0..255).
int ExecExitStatus(const Json& response);

// Secrets must be one HTTP header token: visible ASCII, no spaces. Checked before use so a
// stray newline cannot split the header (and so the key never reaches an error message).
bool IsValidCredential(std::string_view secret);

}  // namespace deskbox::cli
