#pragma once
// How text reaches the guest (docs/computer-use.md, "Typing"). Printable ASCII, Return, "\r" and
// Tab are on every keyboard map: they go as keysyms. Any other character is pasted (the guest
// agent sets the CLIPBOARD selection, ctrl+v pastes it): sent as a keysym, Xvnc would bind it to
// a spare keycode at the key press, and the browser, which loads the changed keymap only after
// that key, dropped it ("héllo" typed as "hllo"); the spare keycodes also run out for good.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deskbox::computer_use {

// Printable ASCII, "\n", "\r" or "\t": typed as its keysym.
bool TypedAsKeysym(char32_t c);

// One run of text, and how it goes.
struct TypingRun {
  enum class Route { kKeysyms, kPaste };
  Route route;
  std::u32string text;
  bool operator==(const TypingRun&) const = default;
};

// `text` as runs, in order. A pasted run goes from a character beyond ASCII to the last such
// character before the next "\n", "\r" or "\t" (or the end): the ASCII between them is pasted
// with it, so that fewer pastes are needed; the ASCII after it, and control characters, go as
// keysyms. Consecutive runs differ in route.
std::vector<TypingRun> SplitForTyping(std::u32string_view text);

// One step of a key action.
struct KeyStep {
  enum class Route { kPress, kType };
  Route route;
  std::vector<std::vector<uint32_t>> combos;  // kPress: combos pressed one after another
  char32_t character = 0;                     // kType: typed alone (so pasted, see above)
  bool operator==(const KeyStep&) const = default;
};

// A key action's combos in order. A combo that is one character beyond ASCII on its own ("é",
// "U+4E16") is typed instead of pressed, for the reason above; the combos between such
// characters are pressed together in one step. With a modifier ("ctrl+é") it is pressed.
std::vector<KeyStep> SplitKeyCombos(const std::vector<std::vector<uint32_t>>& combos);

// Code points → UTF-8 (what the clipboard is given).
std::string EncodeUtf8(std::u32string_view text);

}  // namespace deskbox::computer_use
