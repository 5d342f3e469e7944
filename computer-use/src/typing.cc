#include "computer_use/typing.h"

#include <utility>

#include "vnc_bridge/keys.h"

namespace deskbox::computer_use {

bool TypedAsKeysym(char32_t c) {
  return (c >= 0x20 && c < 0x7f) || c == U'\n' || c == U'\r' || c == U'\t';
}

TextEntry EntryForWindowClass(std::string_view wm_class) {
  if (wm_class == "XTerm" || wm_class == "UXTerm") return TextEntry::kPrimaryPaste;
  return TextEntry::kHexEntry;
}

bool NeedsTextEntry(std::u32string_view text) {
  for (char32_t c : text)
    if (!TypedAsKeysym(c)) return true;
  return false;
}

std::vector<std::vector<uint32_t>> HexEntryCombos(char32_t c) {
  // With Shift held the letter is its capital, as X delivers it: GTK starts the entry on the
  // keyval U with Control and Shift (gtkimcontextsimple.c); a lower-case u does nothing.
  std::vector<std::vector<uint32_t>> combos{{vnc_bridge::kKeysymControlL, vnc_bridge::kKeysymShiftL, 'U'}};
  char digits[9];
  int n = 0;
  auto v = static_cast<uint32_t>(c);
  do {
    digits[n++] = "0123456789abcdef"[v & 0xf];
    v >>= 4;
  } while (v != 0 && n < 8);
  while (n > 0) combos.push_back({static_cast<uint32_t>(digits[--n])});
  combos.push_back({' '});
  return combos;
}

std::vector<TypingRun> SplitForTyping(std::u32string_view text, TextEntry entry) {
  using Route = TypingRun::Route;
  std::vector<TypingRun> runs;
  if (entry == TextEntry::kHexEntry) {
    for (char32_t ch : text) {
      Route r = TypedAsKeysym(ch) ? Route::kKeysyms : Route::kHexEntry;
      if (runs.empty() || runs.back().route != r) runs.push_back({r, {}});
      runs.back().text.push_back(ch);
    }
    return runs;
  }
  // `keys` waits to be typed; `paste` is the pasted run so far, and `tail` the printable ASCII
  // after its last character beyond ASCII: pasted if another such character follows, else typed.
  std::u32string keys, paste, tail;
  auto end_paste = [&] {
    if (!paste.empty()) runs.push_back({Route::kPaste, std::exchange(paste, {})});
    keys += std::exchange(tail, {});
  };
  for (char32_t ch : text) {
    bool printable_ascii = ch >= 0x20 && ch < 0x7f;
    if (!TypedAsKeysym(ch)) {
      if (paste.empty() && !keys.empty()) runs.push_back({Route::kKeysyms, std::exchange(keys, {})});
      paste += std::exchange(tail, {});
      paste.push_back(ch);
    } else if (printable_ascii && !paste.empty()) {
      tail.push_back(ch);
    } else {
      end_paste();
      keys.push_back(ch);
    }
  }
  end_paste();
  if (!keys.empty()) runs.push_back({Route::kKeysyms, std::move(keys)});
  return runs;
}

std::vector<KeyStep> SplitKeyCombos(const std::vector<std::vector<uint32_t>>& combos) {
  std::vector<KeyStep> steps;
  std::vector<std::vector<uint32_t>> batch;
  auto flush = [&] {
    if (!batch.empty()) steps.push_back({KeyStep::Route::kPress, std::exchange(batch, {}), 0});
  };
  for (const auto& combo : combos) {
    auto ch = combo.size() == 1 ? vnc_bridge::CharacterBeyondAscii(combo[0]) : std::nullopt;
    if (!ch) {
      batch.push_back(combo);
      continue;
    }
    flush();
    steps.push_back({KeyStep::Route::kType, {}, *ch});
  }
  flush();
  return steps;
}

std::string EncodeUtf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xc0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xe0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
    } else {
      out.push_back(static_cast<char>(0xf0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
    }
  }
  return out;
}

}  // namespace deskbox::computer_use
