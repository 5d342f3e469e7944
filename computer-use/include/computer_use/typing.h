#pragma once
// How text reaches the guest (docs/computer-use.md, "Typing"). Printable ASCII, Return, "\r" and
// Tab are on every keyboard map: they go as keysyms. Any other character goes without changing
// the keyboard map, by one of two entries chosen by the focused window: sent as a keysym, Xvnc
// would bind it to a spare keycode at the key press, and the browser, which loads the changed
// keymap only after that key, dropped it or typed the previous character again; TigerVNC 1.12
// also never frees those keycodes, so they run out for good (docs/typing-research.md).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deskbox::computer_use {

// Printable ASCII, "\n", "\r" or "\t": typed as its keysym.
bool TypedAsKeysym(char32_t c);

// How characters beyond ASCII reach the focused window.
enum class TextEntry {
  // GTK's Unicode entry, which Chromium's text input goes through: ctrl+shift+U, the code
  // point's hex digits, space, for each character. Synchronous inside the application's key
  // handling, so in order with every key around it; no selection is touched.
  kHexEntry,
  // Pasted through the PRIMARY selection with Shift+Insert, for X terminals (xterm has no
  // Unicode entry and ignores ctrl+v): the guest's deskbox-x11 returns once the terminal has
  // read the text, and gives PRIMARY back what it held.
  kPrimaryPaste,
};

// The entry for a focused window whose WM_CLASS class is `wm_class`: X terminals (XTerm,
// UXTerm) paste; every other window (Chromium, GTK applications, no window) uses hex entry.
TextEntry EntryForWindowClass(std::string_view wm_class);

// One run of text, and how it goes.
struct TypingRun {
  enum class Route { kKeysyms, kHexEntry, kPaste };
  Route route;
  std::u32string text;
  bool operator==(const TypingRun&) const = default;
};

// `text` as runs, in order; consecutive runs differ in route.
// kHexEntry: the characters beyond ASCII form kHexEntry runs, everything else kKeysyms runs.
// kPrimaryPaste: a pasted run goes from a character beyond ASCII to the last such character
// before the next "\n", "\r" or "\t" (or the end): the ASCII between them is pasted with it, so
// that fewer pastes are needed; the ASCII after it, and "\n", "\r" and "\t" (which a terminal
// would rewrite or drop in a paste), go as keysyms.
std::vector<TypingRun> SplitForTyping(std::u32string_view text,
                                      TextEntry entry = TextEntry::kHexEntry);

// The key combos that enter `c` through GTK's Unicode entry: {Control_L, Shift_L, U}, one combo
// per lower-case hex digit of the code point, {space}.
std::vector<std::vector<uint32_t>> HexEntryCombos(char32_t c);

// True when any character of `text` is beyond what TypedAsKeysym types.
bool NeedsTextEntry(std::u32string_view text);

// One step of a key action.
struct KeyStep {
  enum class Route { kPress, kType };
  Route route;
  std::vector<std::vector<uint32_t>> combos;  // kPress: combos pressed one after another
  char32_t character = 0;                     // kType: typed alone (by a text entry, see above)
  bool operator==(const KeyStep&) const = default;
};

// A key action's combos in order. A combo that is one character beyond ASCII on its own ("é",
// "U+4E16") is typed instead of pressed (by the focused window's entry), for the reason above;
// the combos between such characters are pressed together in one step. With a modifier
// ("ctrl+é") it is pressed.
std::vector<KeyStep> SplitKeyCombos(const std::vector<std::vector<uint32_t>>& combos);

// Code points → UTF-8 (what a paste is given).
std::string EncodeUtf8(std::u32string_view text);

}  // namespace deskbox::computer_use
