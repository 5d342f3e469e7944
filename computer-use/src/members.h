#pragma once
// Strict reading of one JSON object's members, for our own bodies: exact types, ranges, and no
// member the schema lacks. The rules and messages are the API's everywhere else (ObjectReader in
// api/json_input.h), so that a client reads the same words for the same mistake on every route.
// Null counts as absent. A member counts as read once asked for, whether present or not.
#include <cstdint>
#include <expected>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "computer_use/error.h"

namespace deskbox::computer_use::internal {

class Members {
 public:
  // `object` must be a JSON object; `path` names it in messages ("actions[2]", "" for a body).
  Members(const nlohmann::json& object, std::string path);

  // "actions[2].x", or "x" for a body.
  std::string Name(std::string_view member) const;
  // Present and not null. Does not count as a read.
  bool Has(const char* name) const;
  // The member, or nullptr when absent or null.
  const nlohmann::json* Any(const char* name);
  // Errors: kWrongType (not an integer), kOutOfRange.
  std::expected<std::optional<int64_t>, Error> Integer(const char* name, int64_t min, int64_t max);
  // Errors: kWrongType (not a string), kOutOfRange (length in bytes).
  std::expected<std::optional<std::string>, Error> String(const char* name, size_t min_bytes,
                                                          size_t max_bytes);
  // A string that is one of `values`. Errors: kWrongType, and `unknown` for any other string.
  std::expected<std::optional<std::string>, Error> Enum(
      const char* name, std::initializer_list<std::string_view> values, ErrorCode unknown);
  // Errors: kWrongType (not a list).
  std::expected<const nlohmann::json*, Error> Array(const char* name);
  // kUnknownField for the first member (in name order) never read.
  std::expected<void, Error> Finish() const;

 private:
  const nlohmann::json* Get(const char* name);

  const nlohmann::json& object_;
  std::string path_;
  std::set<std::string, std::less<>> read_;
};

// `result` with its error, if any, re-classed as `code`: the member's meaning decides the code
// ("actions[0].text must be a string" is bad text), the reader only knows the JSON.
template <class T>
std::expected<T, Error> Classed(ErrorCode code, std::expected<T, Error> result) {
  if (!result) result.error().code = code;
  return result;
}

inline std::unexpected<Error> Fail(ErrorCode code, std::string message) {
  return std::unexpected(Error{code, std::move(message)});
}

}  // namespace deskbox::computer_use::internal
