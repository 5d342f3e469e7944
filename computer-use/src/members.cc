#include "members.h"

#include <fmt/format.h>

#include <cstdint>

namespace deskbox::computer_use::internal {

using nlohmann::json;

Members::Members(const json& object, std::string path)
    : object_(object), path_(std::move(path)) {}

std::string Members::Name(std::string_view member) const {
  return path_.empty() ? std::string(member) : path_ + "." + std::string(member);
}

bool Members::Has(const char* name) const {
  auto it = object_.find(name);
  return it != object_.end() && !it->is_null();
}

const json* Members::Get(const char* name) {
  read_.insert(name);
  auto it = object_.find(name);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

const json* Members::Any(const char* name) { return Get(name); }

std::expected<std::optional<int64_t>, Error> Members::Integer(const char* name, int64_t min,
                                                              int64_t max) {
  const json* v = Get(name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer())
    return Fail(ErrorCode::kWrongType, fmt::format("{} must be an integer", Name(name)));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return Fail(ErrorCode::kOutOfRange,
                fmt::format("{} must be between {} and {}", Name(name), min, max));
  int64_t n = v->get<int64_t>();
  if (n < min || n > max)
    return Fail(ErrorCode::kOutOfRange,
                fmt::format("{} must be between {} and {} (got {})", Name(name), min, max, n));
  return n;
}

std::expected<std::optional<std::string>, Error> Members::String(const char* name,
                                                                 size_t min_bytes,
                                                                 size_t max_bytes) {
  const json* v = Get(name);
  if (!v) return std::nullopt;
  if (!v->is_string())
    return Fail(ErrorCode::kWrongType, fmt::format("{} must be a string", Name(name)));
  const auto& s = v->get_ref<const std::string&>();
  if (s.size() < min_bytes || s.size() > max_bytes)
    return Fail(ErrorCode::kOutOfRange, fmt::format("{} must be {} to {} bytes long (got {})",
                                                    Name(name), min_bytes, max_bytes, s.size()));
  return s;
}

std::expected<std::optional<std::string>, Error> Members::Enum(
    const char* name, std::initializer_list<std::string_view> values, ErrorCode unknown) {
  auto s = String(name, 0, 64);
  if (!s) {
    // A string too long to be any of the values is not one of them.
    if (s.error().code == ErrorCode::kOutOfRange) s.error().code = unknown;
    return s;
  }
  if (!*s) return std::nullopt;
  for (auto v : values)
    if (**s == v) return s;
  std::string list;
  for (auto v : values) list += (list.empty() ? "" : ", ") + std::string(v);
  return Fail(unknown, fmt::format("{} must be one of {} (got '{}')", Name(name), list, **s));
}

std::expected<const json*, Error> Members::Array(const char* name) {
  const json* v = Get(name);
  if (v && !v->is_array())
    return Fail(ErrorCode::kWrongType, fmt::format("{} must be an array", Name(name)));
  return v;
}

std::expected<void, Error> Members::Finish() const {
  for (auto it = object_.begin(); it != object_.end(); ++it)
    if (!read_.count(it.key()))
      return Fail(ErrorCode::kUnknownField, fmt::format("unknown field '{}'", Name(it.key())));
  return {};
}

}  // namespace deskbox::computer_use::internal
