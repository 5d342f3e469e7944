// Model tool calls and actions bodies come from the network: no input may crash a parser, and
// what a parser accepts must be performable — every action passes vnc_bridge::Validate on the
// screen, every point and zoom region lies on it — while every refusal says why.
//
// Half the inputs are JSON text as given; the other half (first byte odd) are bytes that pick a
// call from the schemas' own names and boundary values, so that mutations reach past the JSON
// parser into the actions.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "computer_use/actions.h"
#include "computer_use/anthropic.h"
#include "computer_use/display.h"
#include "computer_use/openai.h"
#include "computer_use/query.h"
#include "computer_use/typing.h"
#include "vnc_bridge/input.h"
#include "vnc_bridge/rfb_client.h"

namespace {

namespace cu = deskbox::computer_use;
namespace vb = deskbox::vnc_bridge;
using nlohmann::json;

constexpr size_t kMaxInput = 64 * 1024;
constexpr int kMaxDepth = 32;

// A plain screen, a display declared smaller than its screen, and the smallest screen.
const cu::Display kDisplays[] = {{0, 0, 1280, 800}, {1024, 640, 1920, 1200}, {0, 0, 1, 1}};

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void CheckError(const cu::Error& e) {
  Check(!e.message.empty());
  Check(std::string_view(cu::ToString(e.code)) != "?");
}

bool OnScreen(vb::Point p, const cu::Display& d) {
  return p.x < d.screen_w && p.y < d.screen_h;
}

void CheckAction(const vb::Action& a, const cu::Display& d) {
  Check(vb::Validate(a, d.screen_w, d.screen_h).has_value());
  if (a.at) Check(OnScreen(*a.at, d));
  for (const auto& p : a.path) Check(OnScreen(p, d));
  if (a.type == vb::Action::Type::kType) {
    // The runs give back the text, and no two neighbours share a route.
    for (auto entry : {cu::TextEntry::kHexEntry, cu::TextEntry::kPrimaryPaste}) {
      auto runs = cu::SplitForTyping(a.text, entry);
      std::u32string joined;
      for (size_t i = 0; i < runs.size(); ++i) {
        Check(!runs[i].text.empty());
        Check(i == 0 || runs[i].route != runs[i - 1].route);
        joined += runs[i].text;
      }
      Check(joined == a.text);
    }
  }
  if (a.type == vb::Action::Type::kKey) {
    size_t combos = 0;
    for (const auto& step : cu::SplitKeyCombos(a.keys))
      combos += step.route == cu::KeyStep::Route::kType ? 1 : step.combos.size();
    Check(combos == a.keys.size());
  }
}

void CheckSize(const cu::DisplaySize& s) {
  Check(s.width >= 1 && s.width <= vb::kMaxScreenSide);
  Check(s.height >= 1 && s.height <= vb::kMaxScreenSide);
}

void Anthropic(const json& body, const cu::Display& d) {
  auto call = cu::ParseAnthropicCall(body);
  if (!call) return CheckError(call.error());
  Check(call->input.is_object());
  auto step = cu::ParseAnthropic(call->input, d);
  if (!step) return CheckError(step.error());
  Check(step->actions.size() <= 1);
  if (step->cursor_position || step->zoom) Check(step->actions.empty());
  if (step->zoom) {
    const vb::Rect& r = *step->zoom;
    Check(r.w >= 1 && r.h >= 1);
    Check(uint64_t{r.x} + r.w <= d.screen_w && uint64_t{r.y} + r.h <= d.screen_h);
  }
  for (const auto& a : step->actions) CheckAction(a, d);
}

void OpenAi(const json& body, const cu::Display& d) {
  auto call = cu::ParseOpenAiCall(body);
  if (!call) return CheckError(call.error());
  Check(!call->actions.empty() && call->actions.size() <= cu::kMaxActionsPerCall);
  auto step = cu::ParseOpenAiActions(*call, d);
  if (!step) return CheckError(step.error());
  Check(step->actions.size() <= call->actions.size());
  Check(step->params.size() == step->actions.size());
  for (const auto& a : step->actions) CheckAction(a, d);
}

void Actions(const json& body, const cu::Display& d) {
  auto req = cu::ParseActionsRequest(body);
  if (!req) return CheckError(req.error());
  Check(req->actions.is_array() && !req->actions.empty() &&
        req->actions.size() <= cu::kMaxActionsPerCall);
  if (req->display) CheckSize(*req->display);
  if (req->screenshot) Check(req->screenshot->quality >= 1 && req->screenshot->quality <= 100);
  cu::Display over = cu::DisplayOver(req->display, d.screen_w, d.screen_h);
  auto actions = cu::ParseActions(req->actions, over);
  if (!actions) return CheckError(actions.error());
  Check(actions->size() == req->actions.size());
  for (const auto& a : *actions) CheckAction(a, over);
}

void DisplayValue(const json& value) {
  auto size = cu::ParseDisplay(value);
  if (!size) return CheckError(size.error());
  CheckSize(*size);
}

// An object of strings is also a query string.
void Queries(const json& value) {
  if (!value.is_object()) return;
  std::map<std::string, std::string> query;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!it->is_string()) return;
    query.emplace(it.key(), it->get<std::string>());
  }
  if (auto q = cu::ParseAdapterQuery(query); !q) CheckError(q.error());
  if (auto q = cu::ParseScreenshotQuery(query); !q) CheckError(q.error());
  if (auto q = cu::ParseCursorQuery(query); !q) CheckError(q.error());
}

void ParseAll(const json& j) {
  for (const cu::Display& d : kDisplays) {
    Anthropic(j, d);
    OpenAi(j, d);
    Actions(j, d);
    if (j.is_array()) {
      auto actions = cu::ParseActions(j, d);
      if (!actions)
        CheckError(actions.error());
      else
        for (const auto& a : *actions) CheckAction(a, d);
    }
  }
  DisplayValue(j);
  if (j.is_object() && j.contains("display")) DisplayValue(j["display"]);
  Queries(j);
}

// Nesting depth of JSON text; brackets inside strings do not count.
int Depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// The generator's input: bytes read one at a time, zeros once they run out.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Next() {
    if (!size_) return 0;
    --size_;
    return *data_++;
  }
  template <class T, size_t N>
  const T& Pick(const T (&values)[N]) {
    return values[Next() % N];
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

// One schema's vocabulary: the member naming the action, each action with the members it
// takes, and all its members (for actions that mix them up).
struct Schema {
  const char* discriminator;
  std::vector<std::pair<const char*, std::vector<const char*>>> actions;
  std::vector<const char*> members;
};

const Schema kSchemas[] = {
    {"action",
     {{"key", {"text"}},
      {"hold_key", {"text", "duration"}},
      {"type", {"text"}},
      {"cursor_position", {}},
      {"mouse_move", {"coordinate"}},
      {"left_mouse_down", {"coordinate"}},
      {"left_mouse_up", {"coordinate"}},
      {"left_click", {"coordinate", "text"}},
      {"right_click", {"coordinate", "text"}},
      {"middle_click", {"coordinate"}},
      {"double_click", {"coordinate"}},
      {"triple_click", {"coordinate", "text"}},
      {"left_click_drag", {"start_coordinate", "coordinate"}},
      {"scroll", {"coordinate", "scroll_direction", "scroll_amount", "text"}},
      {"wait", {"duration"}},
      {"screenshot", {}},
      {"zoom", {"region"}},
      {"click", {"x", "y"}}},
     {"coordinate", "start_coordinate", "text", "scroll_direction", "scroll_amount", "duration",
      "region"}},
    {"type",
     {{"click", {"x", "y", "button"}},
      {"double_click", {"x", "y"}},
      {"drag", {"path"}},
      {"keypress", {"keys"}},
      {"move", {"x", "y"}},
      {"screenshot", {}},
      {"scroll", {"x", "y", "scroll_x", "scroll_y"}},
      {"type", {"text"}},
      {"wait", {"duration_ms"}},
      {"left_click", {"coordinate"}}},
     {"x", "y", "button", "path", "keys", "scroll_x", "scroll_y", "text", "duration_ms"}},
    {"type",
     {{"move", {"x", "y"}},
      {"click", {"x", "y", "button", "count", "modifiers"}},
      {"mouse_down", {"x", "y", "button"}},
      {"mouse_up", {"x", "y", "button"}},
      {"drag", {"path", "button", "modifiers"}},
      {"scroll", {"x", "y", "dx", "dy", "modifiers"}},
      {"type", {"text"}},
      {"key", {"keys"}},
      {"hold_key", {"keys", "duration_ms"}},
      {"wait", {"duration_ms"}},
      {"keypress", {"keys"}}},
     {"x", "y", "button", "count", "modifiers", "path", "dx", "dy", "text", "keys", "duration_ms"}},
};

// clang-format off
const char* const kStrings[] = {
    "", " ", "a", "A", "Return", "ctrl+s", "ctrl+shift+t", "alt+Tab", "ctrl+a Delete", "KP_0",
    "F35", "U+4E16", "ctrl+U+00E9", "ctrl++", "+", "ctrl+", "é", "héllo\n世界\t🙂", "\x01",
    "\x7f", "\xff", "\xc3", "CTRL", "ARROWLEFT", "ESC", "left", "right", "middle", "wheel",
    "back", "forward", "up", "down", "sideways", "1024x640", "1x1", "4096x4096", "0x5", "png",
    "jpeg", "0xff0d", "shift", "ctrl+shift", "a b c d e f g h i", "x é y U+4E16"};
const char* const kEnvelope[] = {"display", "settle", "screenshot"};
const char* const kEnvelopeMembers[] = {"width", "height", "format", "quality", "quiet_ms",
                                        "timeout_ms", "no_change_ms"};
// Boundaries of the three test screens and of the limits.
const int64_t kInts[] = {0,     1,     -1,    2,     3,     8,     9,     10,    11,
                         99,    100,   101,   639,   640,   799,   800,   1023,  1024,
                         1199,  1200,  1279,  1280,  1919,  1920,  4096,  4097,  5000,
                         10000, 10049, 10050, 30000, 30001, std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max()};
const double kDoubles[] = {0.0, 0.5, 1.5, 2.0, -0.5, 30.0, 30.001, 1.001, 1e300, -1e-300};
// clang-format on

// Mostly small enough to lie on the test screens; else a boundary, or any 16-bit value.
int64_t Int(Bytes& in) {
  switch (in.Next() % 4) {
    case 0:
      return in.Pick(kInts);
    case 1: {
      int high = in.Next();
      return static_cast<int16_t>(high << 8 | in.Next());
    }
    default:
      return in.Next() * 2;
  }
}

json Point(Bytes& in) {
  if (in.Next() & 1) return {{"x", Int(in)}, {"y", Int(in)}};
  return json::array({Int(in), Int(in)});
}

json Value(Bytes& in, int depth);

json List(Bytes& in, int depth, int most) {
  json list = json::array();
  for (int i = 0, n = in.Next() % (most + 1); i < n; ++i)
    list.push_back(depth < 3 && in.Next() % 4 == 0 ? Value(in, depth + 1) : Point(in));
  return list;
}

// Any JSON value, shallow.
json Value(Bytes& in, int depth) {
  switch (in.Next() % 10) {
    case 0:
      return nullptr;
    case 1:
      return (in.Next() & 1) != 0;
    case 2:
    case 3:
      return Int(in);
    case 4:
      return in.Pick(kDoubles);
    case 5:
      return std::numeric_limits<uint64_t>::max() - in.Next();
    case 6:
    case 7:
      return in.Pick(kStrings);
    case 8:
      return List(in, depth, 4);
    default: {
      json object = json::object();
      for (int i = 0, n = in.Next() % 4; i < n && depth < 3; ++i)
        object[in.Pick(kEnvelopeMembers)] = Value(in, depth + 1);
      return object;
    }
  }
}

// A value of the kind `member` takes, mostly; any value otherwise.
json MemberValue(Bytes& in, std::string_view member) {
  if (in.Next() % 4 == 0) return Value(in, 1);
  if (member == "coordinate" || member == "start_coordinate")
    return json::array({Int(in), Int(in)});
  if (member == "region") {
    if (in.Next() & 1) return json::array({Int(in), Int(in), Int(in), Int(in)});
    int x = in.Next() * 8, y = in.Next() * 4;  // a region that is more often well formed
    return json::array({x, y, x + 1 + in.Next() * 4, y + 1 + in.Next() * 2});
  }
  if (member == "path") return List(in, 1, 5);
  if (member == "keys" && (in.Next() & 1)) {
    json keys = json::array();
    for (int i = 0, n = in.Next() % 4 + 1; i < n; ++i) keys.push_back(in.Pick(kStrings));
    return keys;
  }
  if (member == "duration") return in.Next() & 1 ? json(in.Pick(kDoubles)) : json(Int(in));
  // Click counts, wheel steps: around their small ranges.
  if (member == "count" || member == "scroll_amount" || member == "dx" || member == "dy")
    return static_cast<int>(in.Next() % 24) - 4;
  if (member == "text" || member == "keys" || member == "button" || member == "modifiers" ||
      member == "scroll_direction")
    return in.Pick(kStrings);
  return Int(in);
}

// Mostly an action with (some of) its own members; else with any of the schema's.
json ActionValue(Bytes& in, const Schema& schema) {
  const auto& [name, members] = schema.actions[in.Next() % schema.actions.size()];
  json action = {{schema.discriminator, name}};
  if (in.Next() % 4) {
    for (const char* member : members)
      if (in.Next() % 4) action[member] = MemberValue(in, member);
    return action;
  }
  for (int i = 0, n = in.Next() % 6; i < n; ++i) {
    const char* member = schema.members[in.Next() % schema.members.size()];
    action[member] = MemberValue(in, member);
  }
  return action;
}

// A call as one of the schemas wraps it: Anthropic input or tool_use block, OpenAI action or
// computer_call item, our actions body.
json Call(Bytes& in) {
  const Schema& schema = in.Pick(kSchemas);
  json action = ActionValue(in, schema);
  switch (in.Next() % 6) {
    case 0:
    case 1:
      return action;
    case 2:
      return {{"type", "tool_use"}, {"id", "toolu_01"}, {"input", action}};
    case 3:
      return {{"type", "computer_call"}, {"call_id", "call_1"}, {"action", action}};
    default: {
      json list = json::array({action});
      for (int i = 0, n = in.Next() % 4; i < n; ++i) list.push_back(ActionValue(in, schema));
      if (in.Next() % 4 == 0) return {{"type", "computer_call"}, {"actions", list}};
      json body = {{"actions", list}};
      for (int i = 0, n = in.Next() % 3; i < n; ++i) {
        const char* member = in.Pick(kEnvelope);
        body[member] = in.Next() & 1 ? json(in.Pick(kStrings)) : Value(in, 1);
      }
      return body;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > kMaxInput) return 0;
  if (data[0] & 1) {
    Bytes in(data + 1, size - 1);
    ParseAll(Call(in));
    return 0;
  }
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (Depth(text) > kMaxDepth) return 0;
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return 0;
  ParseAll(j);
  return 0;
}
