#include "api/json_input.h"

#include <fmt/format.h>

namespace deskbox::api {

using nlohmann::json;

std::expected<json, std::string> ParseJson(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') {
      if (++depth > max_depth)
        return std::unexpected(fmt::format("JSON nests deeper than {} levels (at byte {})", max_depth, i));
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  // nlohmann reports malformed input by exception only; it stays inside this function. Not only
  // parse_error: a number too large for a double ("1e400") is an out_of_range.
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    return std::unexpected("body is not valid JSON: " + what);
  }
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ObjectReader::ObjectReader(const json& value, std::string path) : value_(value), path_(std::move(path)) {
  if (!value_.is_object()) error_ = path_.empty() ? "body must be a JSON object" : path_ + " must be an object";
}

std::string ObjectReader::Name(const char* field) const { return path_.empty() ? field : path_ + "." + field; }

void ObjectReader::Fail(std::string message) {
  if (!error_) error_ = std::move(message);
}

bool ObjectReader::Has(const char* name) const {
  if (!value_.is_object()) return false;
  auto it = value_.find(name);
  return it != value_.end() && !it->is_null();
}

const json* ObjectReader::Get(const char* name) {
  seen_.insert(name);
  if (error_ || !value_.is_object()) return nullptr;
  auto it = value_.find(name);
  if (it == value_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<int64_t> ObjectReader::Integer(const char* name, int64_t min, int64_t max) {
  const json* v = Get(name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) {
    Fail(fmt::format("{} must be an integer", Name(name)));
    return std::nullopt;
  }
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    Fail(fmt::format("{} must be between {} and {}", Name(name), min, max));
    return std::nullopt;
  }
  int64_t n = v->get<int64_t>();
  if (n < min || n > max) {
    Fail(fmt::format("{} must be between {} and {} (got {})", Name(name), min, max, n));
    return std::nullopt;
  }
  return n;
}

std::optional<double> ObjectReader::Number(const char* name, double min, double max) {
  const json* v = Get(name);
  if (!v) return std::nullopt;
  if (!v->is_number()) {
    Fail(fmt::format("{} must be a number", Name(name)));
    return std::nullopt;
  }
  double n = v->get<double>();
  if (!(n >= min && n <= max)) {
    Fail(fmt::format("{} must be between {} and {} (got {})", Name(name), min, max, n));
    return std::nullopt;
  }
  return n;
}

std::optional<std::string> ObjectReader::String(const char* name, size_t min_bytes, size_t max_bytes) {
  const json* v = Get(name);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    Fail(fmt::format("{} must be a string", Name(name)));
    return std::nullopt;
  }
  const auto& s = v->get_ref<const std::string&>();
  if (s.size() < min_bytes || s.size() > max_bytes) {
    Fail(fmt::format("{} must be {} to {} bytes long (got {})", Name(name), min_bytes, max_bytes, s.size()));
    return std::nullopt;
  }
  return s;
}

std::optional<std::string> ObjectReader::Enum(const char* name, std::initializer_list<std::string_view> values) {
  auto s = String(name, 0, 64);
  if (!s) return std::nullopt;
  for (auto v : values)
    if (*s == v) return s;
  std::string list;
  for (auto v : values) list += (list.empty() ? "" : ", ") + std::string(v);
  Fail(fmt::format("{} must be one of {} (got '{}')", Name(name), list, *s));
  return std::nullopt;
}

std::optional<bool> ObjectReader::Bool(const char* name) {
  const json* v = Get(name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) {
    Fail(fmt::format("{} must be true or false", Name(name)));
    return std::nullopt;
  }
  return v->get<bool>();
}

const json* ObjectReader::Object(const char* name) {
  const json* v = Get(name);
  if (v && !v->is_object()) {
    Fail(fmt::format("{} must be an object", Name(name)));
    return nullptr;
  }
  return v;
}

const json* ObjectReader::Array(const char* name) {
  const json* v = Get(name);
  if (v && !v->is_array()) {
    Fail(fmt::format("{} must be an array", Name(name)));
    return nullptr;
  }
  return v;
}

const json* ObjectReader::Any(const char* name) { return Get(name); }

std::optional<std::string> ObjectReader::Finish() {
  if (!error_ && value_.is_object()) {
    for (auto it = value_.begin(); it != value_.end(); ++it) {
      if (!seen_.count(it.key())) {
        error_ = fmt::format("unknown field '{}'", Name(it.key().c_str()));
        break;
      }
    }
  }
  return error_;
}

}  // namespace deskbox::api
