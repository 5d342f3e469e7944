#include "cli/output.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>

namespace deskbox::cli {

namespace {}  // namespace

std::string Printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char ch : text) {
    if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (ch < 0x20 || ch == 0x7f) {
      out += fmt::format("\\x{:02x}", ch);
    } else {
      out.push_back(static_cast<char>(ch));
    }
  }
  return out;
}

const Json& Field(const Json& object, std::string_view name) {
  static const Json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(name);
  return it == object.end() ? kNull : *it;
}

std::string Pretty(const Json& value) {
  return value.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

namespace {

std::string ResolutionText(const Json& r) {
  const Json& w = Field(r, "width");
  const Json& h = Field(r, "height");
  if (!w.is_number() || !h.is_number()) return Scalar(r);
  return fmt::format("{}x{}", w.dump(), h.dump());
}

const Json& Array(const Json& response, std::string_view name) {
  static const Json kEmpty = Json::array();
  const Json& a = Field(response, name);
  return a.is_array() ? a : kEmpty;
}

}  // namespace

std::string Scalar(const Json& value) {
  if (value.is_null()) return "-";
  if (value.is_string()) return Printable(value.get_ref<const std::string&>());
  return Printable(value.dump(-1, ' ', false, Json::error_handler_t::replace));
}

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size());
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
    }
    while (line.ends_with(' ')) line.pop_back();
    out += line;
    out += '\n';
  }
  return out;
}

std::string FormatSandboxList(const Json& response) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "STATE", "TEMPLATE", "RESOLUTION", "EXPIRES", "CREATED"}};
  for (const Json& s : Array(response, "sandboxes")) {
    rows.push_back({Scalar(Field(s, "id")), Scalar(Field(s, "state")), Scalar(Field(s, "template")),
                    ResolutionText(Field(s, "resolution")), Scalar(Field(s, "expires_at")),
                    Scalar(Field(s, "created_at"))});
  }
  return FormatTable(rows);
}

std::string FormatSandbox(const Json& sandbox) {
  static constexpr std::array<std::string_view, 16> kOrder = {
      "id",         "state",      "template",   "resolution", "timeout_s", "on_timeout",
      "expires_at", "created_at", "updated_at", "stopped_at", "failure",   "create_path",
      "create_ms",  "metadata",   "egress",     "events_url"};
  if (!sandbox.is_object()) return Scalar(sandbox) + "\n";
  std::string out;
  auto line = [&](std::string_view key, const Json& value) {
    if (key == "resolution") {
      out += fmt::format("resolution: {}\n", ResolutionText(value));
    } else if (key == "metadata" && value.is_object() && !value.empty()) {
      for (const auto& [k, v] : value.items())
        out += fmt::format("metadata.{}: {}\n", Printable(k), Scalar(v));
    } else {
      out += fmt::format("{}: {}\n", Printable(key), Scalar(value));
    }
  };
  for (auto key : kOrder)
    if (auto it = sandbox.find(key); it != sandbox.end()) line(key, *it);
  for (const auto& [k, v] : sandbox.items())
    if (std::find(kOrder.begin(), kOrder.end(), k) == kOrder.end()) line(k, v);
  return out;
}

std::string FormatTokenList(const Json& response) {
  std::vector<std::vector<std::string>> rows = {{"ID", "SCOPE", "CREATED", "EXPIRES"}};
  for (const Json& t : Array(response, "tokens"))
    rows.push_back({Scalar(Field(t, "id")), Scalar(Field(t, "scope")),
                    Scalar(Field(t, "created_at")), Scalar(Field(t, "expires_at"))});
  return FormatTable(rows);
}

std::string FormatKeyList(const Json& response) {
  std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "CREATED"}};
  for (const Json& k : Array(response, "keys"))
    rows.push_back(
        {Scalar(Field(k, "id")), Scalar(Field(k, "name")), Scalar(Field(k, "created_at"))});
  return FormatTable(rows);
}

std::string FormatTemplateList(const Json& response) {
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "DEFAULT", "SCREEN", "MEMORY_MIB", "VCPUS", "ACCEL"}};
  for (const Json& t : Array(response, "templates")) {
    const Json& is_default = Field(t, "default");
    rows.push_back({Scalar(Field(t, "name")),
                    is_default.is_boolean() && is_default.get<bool>() ? "yes" : "",
                    ResolutionText(Field(t, "screen")), Scalar(Field(t, "memory_mib")),
                    Scalar(Field(t, "vcpus")), Scalar(Field(t, "accelerator"))});
  }
  return FormatTable(rows);
}

std::string FormatEgressPolicy(const Json& policy) {
  std::string out = fmt::format("default {}\n", Scalar(Field(policy, "default")));
  for (std::string_view list : {"allow", "deny"})
    for (const Json& rule : Array(policy, list)) out += fmt::format("{} {}\n", list, Scalar(rule));
  return out;
}

std::string HumanBytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  static constexpr std::array<std::string_view, 6> kUnits = {"KiB", "MiB", "GiB",
                                                             "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  // 1023.95 would print as "1024.0": move up a unit before that.
  while (value >= 1023.95 && unit + 1 < kUnits.size()) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::string HumanDuration(uint64_t ms) {
  uint64_t tenths = ms / 100 + (ms % 100 >= 50);  // rounded, without overflowing
  if (tenths < 600) return fmt::format("{}.{}s", tenths / 10, tenths % 10);
  uint64_t s = ms / 1000 + (ms % 1000 >= 500);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60);
}

namespace {

std::optional<uint64_t> Count(const Json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0)
    return static_cast<uint64_t>(value.get<int64_t>());
  return std::nullopt;
}

// A table cell: "-" rather than nothing, so columns stay readable.
std::string Cell(const Json& value) {
  std::string text = Scalar(value);
  return text.empty() ? "-" : text;
}

std::string BytesCell(const Json& value) {
  auto n = Count(value);
  return n ? HumanBytes(*n) : Cell(value);
}

std::string DurationCell(const Json& value) {
  auto n = Count(value);
  return n ? HumanDuration(*n) : Cell(value);
}

// INDEX START END DURATION SIZE SCREEN SHA256 FLAGS of one segment.
std::vector<std::string> SegmentRow(const Json& segment) {
  auto start = Count(Field(segment, "start_ms"));
  auto end = Count(Field(segment, "end_ms"));
  auto width = Count(Field(segment, "width"));
  auto height = Count(Field(segment, "height"));
  const Json& sha = Field(segment, "sha256");
  std::string flags;
  for (std::string_view flag : {"truncated", "live"}) {
    if (Field(segment, flag) != true) continue;
    if (!flags.empty()) flags += ',';
    flags += flag;
  }
  return {Cell(Field(segment, "index")),
          Cell(Field(segment, "start")),
          Cell(Field(segment, "end")),
          start && end && *end >= *start ? HumanDuration(*end - *start) : "-",
          BytesCell(Field(segment, "bytes")),
          width && height ? fmt::format("{}x{}", *width, *height) : "-",
          sha.is_string() ? Cell(Json(sha.get_ref<const std::string&>().substr(0, 16))) : Cell(sha),
          flags};
}

}  // namespace

std::string FormatRecording(const Json& recording) {
  std::string out = fmt::format(
      "status: {}  enabled: {}  size: {}  duration: {}  dropped_frames: {}",
      Cell(Field(recording, "status")), Cell(Field(recording, "enabled")),
      BytesCell(Field(recording, "bytes")), DurationCell(Field(recording, "duration_ms")),
      Cell(Field(recording, "dropped_frames")));
  const Json& problem = Field(recording, "problem");
  if (!problem.is_null() && problem != "") out += "  problem: " + Scalar(problem);
  out += '\n';
  std::vector<std::vector<std::string>> rows = {
      {"INDEX", "START", "END", "DURATION", "SIZE", "SCREEN", "SHA256", "FLAGS"}};
  for (const Json& segment : Array(recording, "segments")) rows.push_back(SegmentRow(segment));
  return out + FormatTable(rows);
}

bool VerificationOk(const Json& verification) {
  return Field(verification, "ok") == true;
}

std::string FormatVerification(const Json& verification) {
  std::string counts =
      fmt::format("{} events, {} segments checked, head {}", Cell(Field(verification, "events")),
                  Cell(Field(verification, "segments_checked")), Cell(Field(verification, "head")));
  if (VerificationOk(verification)) return fmt::format("ok: {}\n", counts);
  const Json& problems = Array(verification, "problems");
  std::string out = fmt::format("not ok: {} problem{}; {}\n", problems.size(),
                                problems.size() == 1 ? "" : "s", counts);
  std::vector<std::vector<std::string>> rows;
  for (const Json& p : problems)
    rows.push_back({Cell(Field(p, "kind")), Cell(Field(p, "file")), Scalar(Field(p, "message"))});
  return out + FormatTable(rows);
}

std::string FormatApiError(unsigned status, std::string_view reason, std::string_view body) {
  Json parsed = Json::parse(body, nullptr, false);
  const Json& error = Field(parsed, "error");
  const Json& code = Field(error, "code");
  const Json& message = Field(error, "message");
  if (code.is_string() && message.is_string())
    return fmt::format("{}: {}", Printable(code.get_ref<const std::string&>()),
                       Printable(message.get_ref<const std::string&>()));
  std::string out = fmt::format("HTTP {} {}", status, Printable(reason));
  while (!body.empty() && (body.back() == '\n' || body.back() == '\r' || body.back() == ' '))
    body.remove_suffix(1);
  if (!body.empty()) {
    constexpr size_t kShown = 200;
    out += ": " + Printable(body.substr(0, kShown));
    if (body.size() > kShown) out += "…";
  }
  return out;
}

int ExecExitStatus(const Json& response) {
  const Json& timed_out = Field(response, "timed_out");
  if (timed_out.is_boolean() && timed_out.get<bool>()) return 124;
  const Json& signal = Field(response, "signal");
  if (signal.is_number_integer() && signal.get<int64_t>() > 0 && signal.get<int64_t>() < 128)
    return 128 + static_cast<int>(signal.get<int64_t>());
  const Json& code = Field(response, "exit_code");
  if (!code.is_number_integer()) return 1;
  int64_t value = code.get<int64_t>();
  return value >= 0 && value <= 255 ? static_cast<int>(value) : 255;
}

bool IsValidCredential(std::string_view secret) {
  if (secret.empty() || secret.size() > 4096) return false;
  return std::all_of(secret.begin(), secret.end(), [](char ch) { return ch > 0x20 && ch < 0x7f; });
}

}  // namespace deskbox::cli
