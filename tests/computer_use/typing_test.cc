// How text reaches the guest (docs/computer-use.md, "Typing"): printable ASCII, "\n", "\r" and
// "\t" as keysyms, every other character through GTK's Unicode entry or (X terminals) pasted, in
// runs that keep the order; key combos that are one character beyond ASCII typed between the
// pressed ones; UTF-8 for a paste.
#include "computer_use/typing.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"
#include "vnc_bridge/keys.h"

namespace deskbox::computer_use::test {
namespace {

// Runs as "keys[...]", "hex[...]" and "paste[...]", joined by " ".
std::string Runs(std::u32string_view text, TextEntry entry = TextEntry::kPrimaryPaste) {
  std::string out;
  for (const auto& run : SplitForTyping(text, entry)) {
    const char* name = run.route == TypingRun::Route::kKeysyms   ? "keys["
                       : run.route == TypingRun::Route::kHexEntry ? "hex["
                                                                  : "paste[";
    out += (out.empty() ? "" : " ") + std::string(name) + EncodeUtf8(run.text) + "]";
  }
  return out;
}

// Steps as "press[combo combo]" and "type[c]".
std::string Steps(const std::vector<std::vector<uint32_t>>& combos) {
  std::string out;
  for (const auto& step : SplitKeyCombos(combos)) {
    out += out.empty() ? "" : " ";
    if (step.route == KeyStep::Route::kType) {
      out += "type[" + EncodeUtf8(std::u32string(1, step.character)) + "]";
      EXPECT_TRUE(step.combos.empty());
      continue;
    }
    std::string combos_text;
    for (const auto& c : step.combos) combos_text += (combos_text.empty() ? "" : " ") + Combo(c);
    out += "press[" + combos_text + "]";
  }
  return out;
}

std::vector<std::vector<uint32_t>> Keys(std::string_view sequence) {
  auto seq = vnc_bridge::ParseKeySequence(sequence);
  EXPECT_TRUE(seq) << seq.error().message;
  return seq ? *seq : std::vector<std::vector<uint32_t>>{};
}

TEST(TypedAsKeysym, AsciiAndWhitespaceControls) {
  EXPECT_TRUE(TypedAsKeysym(U' '));
  EXPECT_TRUE(TypedAsKeysym(U'~'));
  EXPECT_TRUE(TypedAsKeysym(U'a'));
  EXPECT_TRUE(TypedAsKeysym(U'\n'));
  EXPECT_TRUE(TypedAsKeysym(U'\r'));
  EXPECT_TRUE(TypedAsKeysym(U'\t'));
  EXPECT_FALSE(TypedAsKeysym(0x7f));
  EXPECT_FALSE(TypedAsKeysym(0x1b));
  EXPECT_FALSE(TypedAsKeysym(0));
  EXPECT_FALSE(TypedAsKeysym(U'é'));
  EXPECT_FALSE(TypedAsKeysym(0xa0));
  EXPECT_FALSE(TypedAsKeysym(U'世'));
}

TEST(SplitForTyping, Empty) {
  EXPECT_TRUE(SplitForTyping(U"", TextEntry::kPrimaryPaste).empty());
  EXPECT_TRUE(SplitForTyping(U"", TextEntry::kHexEntry).empty());
}

// Hex entry: every character beyond ASCII is entered on its own; the ASCII between goes as keys.
TEST(SplitForTyping, HexEntryRuns) {
  EXPECT_EQ(Runs(U"x é y 世界\n🙂", TextEntry::kHexEntry), "keys[x ] hex[é] keys[ y ] hex[世界] keys[\n] hex[🙂]");
  EXPECT_EQ(Runs(U"abc", TextEntry::kHexEntry), "keys[abc]");
  EXPECT_EQ(Runs(U"é", TextEntry::kHexEntry), "hex[é]");
}

// ctrl+shift+U (the capital: Shift is held), the hex digits in lower case without leading zeros, space.
TEST(HexEntryCombos, KeysOfACodePoint) {
  auto combo_text = [](char32_t c) {
    std::string out;
    for (const auto& combo : HexEntryCombos(c)) out += (out.empty() ? "" : " ") + Combo(combo);
    return out;
  };
  EXPECT_EQ(combo_text(U'é'), combo_text(0xe9));
  auto combos = HexEntryCombos(0x1F1FA);
  ASSERT_EQ(combos.size(), 7u);
  EXPECT_EQ(combos[0], (std::vector<uint32_t>{vnc_bridge::kKeysymControlL, vnc_bridge::kKeysymShiftL, 'U'}));
  EXPECT_EQ(combos[1], (std::vector<uint32_t>{'1'}));
  EXPECT_EQ(combos[2], (std::vector<uint32_t>{'f'}));
  EXPECT_EQ(combos[5], (std::vector<uint32_t>{'a'}));
  EXPECT_EQ(combos[6], (std::vector<uint32_t>{' '}));
  EXPECT_EQ(HexEntryCombos(0xa0).size(), 4u);    // ctrl+shift+U, a, 0, space
  EXPECT_EQ(HexEntryCombos(0x10FFFF).size(), 8u);  // six digits
}

TEST(EntryForWindowClass, TerminalsPasteEverythingElseUsesHexEntry) {
  EXPECT_EQ(EntryForWindowClass("XTerm"), TextEntry::kPrimaryPaste);
  EXPECT_EQ(EntryForWindowClass("UXTerm"), TextEntry::kPrimaryPaste);
  EXPECT_EQ(EntryForWindowClass("Chromium"), TextEntry::kHexEntry);
  EXPECT_EQ(EntryForWindowClass("chromium"), TextEntry::kHexEntry);
  EXPECT_EQ(EntryForWindowClass(""), TextEntry::kHexEntry);
  EXPECT_EQ(EntryForWindowClass("xterm"), TextEntry::kHexEntry);  // the instance name, not a class
}

TEST(NeedsTextEntry, OnlyCharactersBeyondKeysyms) {
  EXPECT_FALSE(NeedsTextEntry(U"plain ASCII\n\t"));
  EXPECT_TRUE(NeedsTextEntry(U"café"));
  EXPECT_FALSE(NeedsTextEntry(U""));
}

TEST(SplitForTyping, AsciiOnlyIsOneKeysymRun) {
  EXPECT_EQ(Runs(U"Hello, world!\n\tok\r"), "keys[Hello, world!\n\tok\r]");
  auto runs = SplitForTyping(U"abc");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0], (TypingRun{TypingRun::Route::kKeysyms, U"abc"}));
}

// The ASCII after the last character beyond ASCII is typed, not pasted.
TEST(SplitForTyping, OneAccentedLetter) {
  EXPECT_EQ(Runs(U"héllo"), "keys[h] paste[é] keys[llo]");
}

TEST(SplitForTyping, AllBeyondAsciiIsOnePaste) {
  EXPECT_EQ(Runs(U"世界🙂"), "paste[世界🙂]");
}

TEST(SplitForTyping, LeadingBeyondAscii) {
  EXPECT_EQ(Runs(U"éa"), "paste[é] keys[a]");
}

TEST(SplitForTyping, TrailingBeyondAscii) {
  EXPECT_EQ(Runs(U"aé"), "keys[a] paste[é]");
}

// The ASCII between two such characters is pasted with them: one paste instead of two.
TEST(SplitForTyping, AsciiBetweenIsPastedWithThem) {
  EXPECT_EQ(Runs(U"x é y 世 z"), "keys[x ] paste[é y 世] keys[ z]");
}

// Return and Tab end a pasted run and are pressed as keys.
TEST(SplitForTyping, NewlineAndTabEndAPaste) {
  EXPECT_EQ(Runs(U"x é y\n世\tz"), "keys[x ] paste[é] keys[ y\n] paste[世] keys[\tz]");
  EXPECT_EQ(Runs(U"é\rü"), "paste[é] keys[\r] paste[ü]");
  EXPECT_EQ(Runs(U"é\n"), "paste[é] keys[\n]");
}

// Control characters other than "\n", "\r", "\t" are not typed as keysyms (Validate refuses them
// in text before typing is reached).
TEST(SplitForTyping, OtherControlsArePasted) {
  EXPECT_EQ(Runs(U"a\x1b"
                 U"b"),
            "keys[a] paste[\x1b] keys[b]");
}

TEST(SplitForTyping, ConsecutiveRunsAlternate) {
  const std::u32string texts[] = {U"héllo wörld\n日本語\ttext é", U"\n\né\t\tü a", U"ab¡cd\n",
                                  U"🙂 🙂\r\n🙂x"};
  for (const auto& text : texts)
  for (auto entry : {TextEntry::kHexEntry, TextEntry::kPrimaryPaste}) {
    auto runs = SplitForTyping(text, entry);
    std::u32string joined;
    for (size_t i = 0; i < runs.size(); ++i) {
      joined += runs[i].text;
      EXPECT_FALSE(runs[i].text.empty());
      if (i) {
        EXPECT_NE(runs[i].route, runs[i - 1].route) << EncodeUtf8(text) << " run " << i;
      }
    }
    EXPECT_EQ(joined, text);
  }
}

TEST(SplitKeyCombos, PressedOnlyIsOneStep) {
  EXPECT_EQ(Steps(Keys("ctrl+a Delete Return")), "press[ffe3+61 ffff ff0d]");
}

// A combo that is one character beyond ASCII alone is typed, in order with the pressed ones.
TEST(SplitKeyCombos, CharacterBeyondAsciiIsTyped) {
  EXPECT_EQ(Steps(Keys("x é y U+4E16")), "press[78] type[é] press[79] type[世]");
}

TEST(SplitKeyCombos, LeadingAndTrailing) {
  EXPECT_EQ(Steps(Keys("é a")), "type[é] press[61]");
  EXPECT_EQ(Steps(Keys("a ü")), "press[61] type[ü]");
  EXPECT_EQ(Steps(Keys("é ü")), "type[é] type[ü]");
}

// With a modifier the character is pressed: the combo has more than one key.
TEST(SplitKeyCombos, WithModifierIsPressed) {
  EXPECT_EQ(Steps(Keys("ctrl+é")), "press[ffe3+e9]");
  EXPECT_EQ(Steps(Keys("shift+é")), "press[ffe1+c9]");
}

// Latin-1 from 0xa0 and Unicode keysyms (0x01000000 + code point) are beyond ASCII; ASCII,
// function keys and XF86 keys are not.
TEST(SplitKeyCombos, WhichKeysymsAreCharacters) {
  EXPECT_EQ(Steps({{0xa0}, {0xff}, {0x0100263a}, {0x0101f642}}),
            "type[\u00a0] type[ÿ] type[☺] type[🙂]");
  EXPECT_EQ(Steps({{0x7e}, {0x9f}, {0xffbe}, {0x1008ff12}, {0x01000041}}),
            "press[7e 9f ffbe 1008ff12 1000041]");
}

TEST(SplitKeyCombos, StepFields) {
  auto steps = SplitKeyCombos({{0xffe3, 0x61}, {0xe9}});
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0], (KeyStep{KeyStep::Route::kPress, {{0xffe3, 0x61}}, 0}));
  EXPECT_EQ(steps[1], (KeyStep{KeyStep::Route::kType, {}, U'é'}));
}

TEST(SplitKeyCombos, Empty) {
  EXPECT_TRUE(SplitKeyCombos({}).empty());
}

TEST(EncodeUtf8, OneToFourBytes) {
  EXPECT_EQ(EncodeUtf8(U"A"), "A");
  EXPECT_EQ(EncodeUtf8(std::u32string(1, 0x7f)), "\x7f");
  EXPECT_EQ(EncodeUtf8(std::u32string(1, 0x80)), "\xc2\x80");
  EXPECT_EQ(EncodeUtf8(U"é"), "\xc3\xa9");
  EXPECT_EQ(EncodeUtf8(std::u32string(1, 0x7ff)), "\xdf\xbf");
  EXPECT_EQ(EncodeUtf8(std::u32string(1, 0x800)), "\xe0\xa0\x80");
  EXPECT_EQ(EncodeUtf8(U"世"), "\xe4\xb8\x96");
  EXPECT_EQ(EncodeUtf8(std::u32string(1, 0xffff)), "\xef\xbf\xbf");
  EXPECT_EQ(EncodeUtf8(std::u32string(1, 0x10000)), "\xf0\x90\x80\x80");
  EXPECT_EQ(EncodeUtf8(U"🙂"), "\xf0\x9f\x99\x82");
  EXPECT_EQ(EncodeUtf8(std::u32string(1, 0x10ffff)), "\xf4\x8f\xbf\xbf");
  EXPECT_EQ(EncodeUtf8(U""), "");
}

// What DecodeUtf8 reads back is what was encoded.
TEST(EncodeUtf8, RoundTripsThroughDecode) {
  std::u32string text = U"a\né世🙂\t";
  text.push_back(0x10ffff);
  auto back = vnc_bridge::DecodeUtf8(EncodeUtf8(text));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, text);
}

}  // namespace
}  // namespace deskbox::computer_use::test
