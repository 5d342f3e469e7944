#pragma once
// Standard base64 (RFC 4648, with padding): exec input and output, screenshots in JSON answers.
#include <optional>
#include <string>
#include <string_view>

namespace deskbox {

std::string Base64Encode(std::string_view bytes);
// nullopt if text is not canonical padded base64 (whitespace is not accepted either).
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace deskbox
