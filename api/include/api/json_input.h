#pragma once
// Untrusted JSON in, strictly: bounded nesting, exact types, ranges, and no unknown fields. Every
// problem becomes one message naming the field, for a 400 invalid_request.
#include <cstdint>
#include <expected>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace deskbox::api {

inline constexpr int kMaxJsonDepth = 32;

// Parses `text` as one JSON value nested at most `max_depth` deep (checked before parsing, so a
// deep document cannot exhaust the stack). The error says where the document is wrong.
std::expected<nlohmann::json, std::string> ParseJson(std::string_view text, int max_depth = kMaxJsonDepth);

// Serializes for a response; invalid UTF-8 (guest output) becomes U+FFFD instead of failing.
std::string Dump(const nlohmann::json& j);

// Reads the fields of one JSON object. The first problem is kept; later reads return nullopt.
class ObjectReader {
 public:
  ObjectReader(const nlohmann::json& value, std::string path = "");
  std::optional<int64_t> Integer(const char* name, int64_t min, int64_t max);
  std::optional<double> Number(const char* name, double min, double max);  // integer or not
  std::optional<std::string> String(const char* name, size_t min_bytes, size_t max_bytes);
  std::optional<std::string> Enum(const char* name, std::initializer_list<std::string_view> values);
  std::optional<bool> Bool(const char* name);
  const nlohmann::json* Object(const char* name);  // present and an object
  const nlohmann::json* Array(const char* name);   // present and an array
  const nlohmann::json* Any(const char* name);     // present (null counts as absent)
  bool Has(const char* name) const;
  void Fail(std::string message);
  // Adds "unknown field" errors for fields never read. Returns the first error, if any.
  std::optional<std::string> Finish();
  bool ok() const { return !error_; }
  std::string Name(const char* field) const;  // "resolution.width"

 private:
  const nlohmann::json* Get(const char* name);
  const nlohmann::json& value_;
  std::string path_;
  std::set<std::string, std::less<>> seen_;
  std::optional<std::string> error_;
};

}  // namespace deskbox::api
