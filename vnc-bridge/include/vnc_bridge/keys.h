#pragma once
// X keysyms for what agents send: key names and combos ("ctrl+shift+t", "Return", "F5",
// "KP_0", OpenAI's "CTRL"/"ARROWLEFT"), and Unicode text.
//
// Text goes as keysyms, one per character: Latin-1 characters by their own keysym, every other
// Unicode character as keysym 0x01000000 + code point. The guest's Xvnc (TigerVNC) maps a keysym
// it has no key for onto a spare keycode on the fly, so any character types, 世界 and 🙂
// included, whatever the guest's keyboard layout; "\n" is Return and "\t" is Tab. The API types
// only ASCII this way and pastes the rest (docs/computer-use.md): Chromium loads the keymap Xvnc
// changed only after the key press that changed it, and could drop that character.
//
// Every error here is kBadInput, its message naming the key or the byte.
#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vnc_bridge/error.h"

namespace deskbox::vnc_bridge {

inline constexpr uint32_t kKeysymShiftL = 0xffe1;
inline constexpr uint32_t kKeysymControlL = 0xffe3;
inline constexpr uint32_t kKeysymAltL = 0xffe9;
inline constexpr uint32_t kKeysymSuperL = 0xffeb;
inline constexpr uint32_t kKeysymReturn = 0xff0d;
inline constexpr uint32_t kKeysymTab = 0xff09;

// One key by name, case-insensitive for names ("return", "RETURN", "Enter", "esc", "PageDown",
// "Page_Down", "ArrowLeft", "Left", "KP_0", "F5", "ctrl", "super", "cmd", "space", "minus"), or a
// single character (case kept: "a" and "A" differ).
std::expected<uint32_t, Error> KeysymForName(std::string_view name);

// A combo: names joined by '+' ("ctrl+shift+t", "ctrl++" is ctrl and plus). Pressed in order,
// released in reverse.
std::expected<std::vector<uint32_t>, Error> ParseCombo(std::string_view combo);

// xdotool-style key argument: one or more combos separated by spaces ("ctrl+a Delete").
std::expected<std::vector<std::vector<uint32_t>>, Error> ParseKeySequence(std::string_view keys);

// The keysym that types one Unicode code point.
uint32_t KeysymForCodePoint(char32_t cp);

// The character a keysym types when it is one beyond ASCII (Latin-1 above 0x9f, or 0x01000000 +
// code point), which the guest's keyboard map lacks: the API pastes such a key alone.
std::optional<char32_t> CharacterBeyondAscii(uint32_t keysym);

// UTF-8 text → code points; an error names the byte offset of invalid UTF-8.
std::expected<std::u32string, Error> DecodeUtf8(std::string_view text);

}  // namespace deskbox::vnc_bridge
