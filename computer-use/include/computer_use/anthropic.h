#pragma once
// Anthropic's computer tool (computer_20250124 and newer), as models emit it: the tool's input
// ({"action": …, "coordinate": [x, y], …}) or the whole tool_use block, and the tool_result that
// goes back. A call the model got wrong is answered as a tool_result with is_error (for the loop
// to hand to the model), not as an error of the HTTP call.
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "computer_use/display.h"
#include "computer_use/error.h"
#include "computer_use/image_request.h"
#include "vnc_bridge/input.h"
#include "vnc_bridge/rfb_client.h"

namespace deskbox::computer_use {

// A request body: the tool's input, and the tool_use block's id when the body was one.
struct AnthropicCall {
  nlohmann::json input;     // an object
  std::string tool_use_id;  // empty: the body was the bare input
};

// The body as it came: a tool_use block ({"type": "tool_use", "id", "input"}) or the input
// itself. Errors here are the caller's (HTTP 400), not the model's.
std::expected<AnthropicCall, Error> ParseAnthropicCall(const nlohmann::json& body);

// What one tool input asks for.
struct AnthropicStep {
  std::vector<vnc_bridge::Action> actions;  // to perform, then answer with the screen
  bool cursor_position = false;             // answer with the pointer as text, not an image
  std::optional<vnc_bridge::Rect> zoom;     // answer with this screen region, full resolution
};

// The tool input, coordinates in `display` pixels. Errors are the model's (is_error results).
// `screenshot` is an empty step: no action, the screen as it is.
std::expected<AnthropicStep, Error> ParseAnthropic(const nlohmann::json& input,
                                                   const Display& display);

// The tool_result: {"type": "tool_result", "content": content, "is_error": …, "tool_use_id"?}
// (tool_use_id only when not empty).
nlohmann::json AnthropicToolResult(nlohmann::json content, bool is_error,
                                   std::string_view tool_use_id);
// A tool_result holding one text block: a model error (is_error) or the cursor position.
nlohmann::json AnthropicTextResult(std::string text, bool is_error, std::string_view tool_use_id);
// The answer to cursor_position: "X=…,Y=…" with the pointer in display pixels.
nlohmann::json AnthropicCursorResult(vnc_bridge::Point display_point,
                                     std::string_view tool_use_id);
// A tool_result holding one base64 image block of the given format.
nlohmann::json AnthropicImageResult(ImageFormat format, std::string base64,
                                    std::string_view tool_use_id);

}  // namespace deskbox::computer_use
