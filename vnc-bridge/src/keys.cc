#include "vnc_bridge/keys.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <unordered_map>

namespace deskbox::vnc_bridge {

namespace {

std::unexpected<Error> BadInput(std::string message) {
  return std::unexpected(Error{ErrorCode::kBadInput, std::move(message)});
}

std::string Lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// Names in lower case, with '_' and '-' removed ("page_down", "PageDown" and "PAGEDOWN" meet).
const std::unordered_map<std::string, uint32_t>& Names() {
  static const auto* names = new std::unordered_map<std::string, uint32_t>{
      // Modifiers
      {"shift", 0xffe1},
      {"shiftl", 0xffe1},
      {"shiftr", 0xffe2},
      {"lshift", 0xffe1},
      {"rshift", 0xffe2},
      {"ctrl", 0xffe3},
      {"control", 0xffe3},
      {"controll", 0xffe3},
      {"controlr", 0xffe4},
      {"ctrll", 0xffe3},
      {"ctrlr", 0xffe4},
      {"lctrl", 0xffe3},
      {"rctrl", 0xffe4},
      {"alt", 0xffe9},
      {"altl", 0xffe9},
      {"altr", 0xffea},
      {"lalt", 0xffe9},
      {"ralt", 0xffea},
      {"option", 0xffe9},
      {"altgr", 0xfe03},
      {"isolevel3shift", 0xfe03},
      {"super", 0xffeb},
      {"superl", 0xffeb},
      {"superr", 0xffec},
      {"win", 0xffeb},
      {"windows", 0xffeb},
      {"cmd", 0xffeb},
      {"command", 0xffeb},
      {"meta", 0xffeb},
      {"metal", 0xffe7},
      {"metar", 0xffe8},
      {"hyper", 0xffed},
      {"capslock", 0xffe5},
      {"numlock", 0xff7f},
      {"scrolllock", 0xff14},
      // Editing and navigation
      {"return", 0xff0d},
      {"enter", 0xff0d},
      {"tab", 0xff09},
      {"backspace", 0xff08},
      {"delete", 0xffff},
      {"del", 0xffff},
      {"escape", 0xff1b},
      {"esc", 0xff1b},
      {"space", 0x20},
      {"insert", 0xff63},
      {"ins", 0xff63},
      {"home", 0xff50},
      {"end", 0xff57},
      {"pageup", 0xff55},
      {"prior", 0xff55},
      {"pagedown", 0xff56},
      {"next", 0xff56},
      {"pgup", 0xff55},
      {"pgdn", 0xff56},
      {"left", 0xff51},
      {"up", 0xff52},
      {"right", 0xff53},
      {"down", 0xff54},
      {"arrowleft", 0xff51},
      {"arrowup", 0xff52},
      {"arrowright", 0xff53},
      {"arrowdown", 0xff54},
      {"print", 0xff61},
      {"printscreen", 0xff61},
      {"pause", 0xff13},
      {"break", 0xff6b},
      {"menu", 0xff67},
      {"contextmenu", 0xff67},
      {"apps", 0xff67},
      {"sysreq", 0xff15},
      {"clear", 0xff0b},
      {"linefeed", 0xff0a},
      // Punctuation by name (xdotool / X keysym names)
      {"minus", 0x2d},
      {"plus", 0x2b},
      {"equal", 0x3d},
      {"comma", 0x2c},
      {"period", 0x2e},
      {"slash", 0x2f},
      {"backslash", 0x5c},
      {"semicolon", 0x3b},
      {"colon", 0x3a},
      {"apostrophe", 0x27},
      {"quotedbl", 0x22},
      {"grave", 0x60},
      {"asciitilde", 0x7e},
      {"exclam", 0x21},
      {"at", 0x40},
      {"numbersign", 0x23},
      {"dollar", 0x24},
      {"percent", 0x25},
      {"asciicircum", 0x5e},
      {"ampersand", 0x26},
      {"asterisk", 0x2a},
      {"parenleft", 0x28},
      {"parenright", 0x29},
      {"bracketleft", 0x5b},
      {"bracketright", 0x5d},
      {"braceleft", 0x7b},
      {"braceright", 0x7d},
      {"bar", 0x7c},
      {"less", 0x3c},
      {"greater", 0x3e},
      {"question", 0x3f},
      {"underscore", 0x5f},
      // Keypad
      {"kpenter", 0xff8d},
      {"kpadd", 0xffab},
      {"kpsubtract", 0xffad},
      {"kpmultiply", 0xffaa},
      {"kpdivide", 0xffaf},
      {"kpdecimal", 0xffae},
      {"kpequal", 0xffbd},
      {"kpseparator", 0xffac},
      {"kphome", 0xff95},
      {"kpleft", 0xff96},
      {"kpup", 0xff97},
      {"kpright", 0xff98},
      {"kpdown", 0xff99},
      {"kppageup", 0xff9a},
      {"kppagedown", 0xff9b},
      {"kpend", 0xff9c},
      {"kpinsert", 0xff9e},
      {"kpdelete", 0xff9f},
      // Media and browser keys (XF86)
      {"audiomute", 0x1008ff12},
      {"audiolowervolume", 0x1008ff11},
      {"audioraisevolume", 0x1008ff13},
      {"volumemute", 0x1008ff12},
      {"volumedown", 0x1008ff11},
      {"volumeup", 0x1008ff13},
      {"audioplay", 0x1008ff14},
      {"audiostop", 0x1008ff15},
      {"audioprev", 0x1008ff16},
      {"audionext", 0x1008ff17},
      {"back", 0x1008ff26},
      {"browserback", 0x1008ff26},
      {"forward", 0x1008ff27},
      {"browserforward", 0x1008ff27},
      {"refresh", 0x1008ff29},
      {"browserrefresh", 0x1008ff29},
      {"xf86back", 0x1008ff26},
      {"xf86forward", 0x1008ff27},
      {"xf86reload", 0x1008ff73},
  };
  return *names;
}

}  // namespace

uint32_t KeysymForCodePoint(char32_t cp) {
  if (cp == U'\n' || cp == U'\r') return kKeysymReturn;
  if (cp == U'\t') return kKeysymTab;
  if (cp == 0x08) return 0xff08;
  if (cp == 0x1b) return 0xff1b;
  if (cp == 0x7f) return 0xffff;
  if ((cp >= 0x20 && cp <= 0x7e) || (cp >= 0xa0 && cp <= 0xff)) return static_cast<uint32_t>(cp);
  return 0x01000000u + static_cast<uint32_t>(cp);
}

std::optional<char32_t> CharacterBeyondAscii(uint32_t keysym) {
  if (keysym >= 0xa0 && keysym <= 0xff) return static_cast<char32_t>(keysym);
  if (keysym >= 0x010000a0u && keysym <= 0x0110ffffu) {
    auto cp = static_cast<char32_t>(keysym - 0x01000000u);
    if (cp < 0xd800 || cp > 0xdfff) return cp;
  }
  return std::nullopt;
}

std::expected<std::u32string, Error> DecodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    auto b = static_cast<unsigned char>(s[i]);
    size_t len = b < 0x80           ? 1
                 : (b >> 5) == 0x6  ? 2
                 : (b >> 4) == 0xe  ? 3
                 : (b >> 3) == 0x1e ? 4
                                    : 0;
    if (len == 0 || i + len > s.size()) return BadInput(fmt::format("invalid UTF-8 at byte {}", i));
    char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1f) : len == 3 ? (b & 0x0f) : (b & 0x07);
    for (size_t k = 1; k < len; ++k) {
      auto c = static_cast<unsigned char>(s[i + k]);
      if ((c >> 6) != 0x2) return BadInput(fmt::format("invalid UTF-8 at byte {}", i));
      cp = cp << 6 | (c & 0x3f);
    }
    bool overlong =
        (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return BadInput(fmt::format("invalid UTF-8 at byte {}", i));
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::expected<uint32_t, Error> KeysymForName(std::string_view name) {
  if (name.empty()) return BadInput("empty key name");
  auto cps = DecodeUtf8(name);
  if (!cps) return std::unexpected(std::move(cps.error()));
  if (cps->size() == 1) return KeysymForCodePoint((*cps)[0]);
  std::string key = Lower(name);
  std::erase_if(key, [](char c) { return c == '_' || c == '-'; });
  const auto& names = Names();
  if (auto it = names.find(key); it != names.end()) return it->second;
  // F1..F35
  if (key.size() >= 2 && key[0] == 'f' &&
      key.find_first_not_of("0123456789", 1) == std::string::npos && key.size() <= 3) {
    int n = std::stoi(key.substr(1));
    if (n >= 1 && n <= 35) return 0xffbe + static_cast<uint32_t>(n - 1);
  }
  // KP_0..KP_9
  if (key.size() == 3 && key.starts_with("kp") && std::isdigit(static_cast<unsigned char>(key[2])))
    return 0xffb0 + static_cast<uint32_t>(key[2] - '0');
  // A raw keysym: "0xff0d" / "U+00E9"
  if (key.starts_with("0x") && key.size() <= 10 && key.size() > 2 &&
      key.find_first_not_of("0123456789abcdef", 2) == std::string::npos)
    return static_cast<uint32_t>(std::stoul(key.substr(2), nullptr, 16));
  if (key.starts_with("u+") && key.size() >= 3 && key.size() <= 8 &&
      key.find_first_not_of("0123456789abcdef", 2) == std::string::npos) {
    auto cp = static_cast<char32_t>(std::stoul(key.substr(2), nullptr, 16));
    if (cp <= 0x10ffff) return KeysymForCodePoint(cp);
  }
  return BadInput(fmt::format("unknown key '{}'", name.substr(0, 64)));
}

std::expected<std::vector<uint32_t>, Error> ParseCombo(std::string_view combo) {
  std::vector<uint32_t> keys;
  size_t i = 0;
  while (i < combo.size()) {
    size_t plus = combo.find('+', i);
    // A '+' right at the start of a part is the plus key itself ("ctrl++", "+").
    if (plus == i) plus = combo.find('+', i + 1);
    // "U+" with 4 to 6 hex digits is one key, a code point ("ctrl+U+00E9").
    if (plus == i + 1 && (combo[i] == 'u' || combo[i] == 'U')) {
      size_t next = combo.find('+', plus + 1);
      std::string_view digits = combo.substr(plus + 1, next == std::string_view::npos ? std::string_view::npos
                                                                                      : next - plus - 1);
      if (digits.size() >= 4 && digits.size() <= 6 &&
          digits.find_first_not_of("0123456789abcdefABCDEF") == std::string_view::npos)
        plus = next;
    }
    std::string_view part =
        combo.substr(i, plus == std::string_view::npos ? std::string_view::npos : plus - i);
    auto k = KeysymForName(part);
    // A combo of one key is named by the key's own error; a longer one is named first.
    if (!k)
      return BadInput(part.size() == combo.size()
                          ? k.error().message
                          : fmt::format("in '{}': {}", combo.substr(0, 64), k.error().message));
    keys.push_back(*k);
    if (keys.size() > 8)
      return BadInput(fmt::format("'{}' has more than 8 keys", combo.substr(0, 64)));
    if (plus == std::string_view::npos) break;
    i = plus + 1;
    if (i == combo.size()) return BadInput(fmt::format("'{}' ends with '+'", combo.substr(0, 64)));
  }
  if (keys.empty()) return BadInput("empty key combo");
  // The guest's X server produces exactly the keysym it is sent, whatever modifiers are down:
  // with shift in the combo a letter goes as its capital ("shift+x" types X, as in xdotool).
  bool shift = false;
  for (auto& k : keys) {
    if (k == 0xffe1 || k == 0xffe2)
      shift = true;
    else if (shift && k >= 'a' && k <= 'z')
      k = k - 'a' + 'A';
    else if (shift && k >= 0xe0 && k <= 0xfe && k != 0xf7)
      k -= 0x20;
  }
  return keys;
}

std::expected<std::vector<std::vector<uint32_t>>, Error> ParseKeySequence(std::string_view keys) {
  std::vector<std::vector<uint32_t>> seq;
  size_t i = 0;
  while (i < keys.size()) {
    while (i < keys.size() && keys[i] == ' ') ++i;
    if (i == keys.size()) break;
    size_t end = keys.find(' ', i);
    auto c = ParseCombo(
        keys.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i));
    if (!c) return std::unexpected(std::move(c.error()));
    seq.push_back(std::move(*c));
    if (seq.size() > 64) return BadInput("more than 64 key combos in one action");
    if (end == std::string_view::npos) break;
    i = end;
  }
  if (seq.empty()) {
    // A lone space is the space key.
    if (!keys.empty()) return std::vector<std::vector<uint32_t>>{{0x20}};
    return BadInput("no key given");
  }
  return seq;
}

}  // namespace deskbox::vnc_bridge
