#include "vnc_bridge/keys.h"

#include <gtest/gtest.h>

namespace deskbox::vnc_bridge {
namespace {

TEST(KeysTest, NamesFromXdotoolAndOpenAiMeet) {
  struct Case {
    const char* name;
    uint32_t keysym;
  };
  for (auto [name, keysym] : std::vector<Case>{{"Return", 0xff0d},
                                               {"ENTER", 0xff0d},
                                               {"enter", 0xff0d},
                                               {"Escape", 0xff1b},
                                               {"ESC", 0xff1b},
                                               {"Page_Down", 0xff56},
                                               {"PAGEDOWN", 0xff56},
                                               {"PageUp", 0xff55},
                                               {"Left", 0xff51},
                                               {"ARROWLEFT", 0xff51},
                                               {"ArrowUp", 0xff52},
                                               {"BackSpace", 0xff08},
                                               {"BACKSPACE", 0xff08},
                                               {"Delete", 0xffff},
                                               {"ctrl", 0xffe3},
                                               {"CTRL", 0xffe3},
                                               {"Control_L", 0xffe3},
                                               {"shift", 0xffe1},
                                               {"alt", 0xffe9},
                                               {"super", 0xffeb},
                                               {"CMD", 0xffeb},
                                               {"META", 0xffeb},
                                               {"F1", 0xffbe},
                                               {"F5", 0xffc2},
                                               {"f12", 0xffc9},
                                               {"KP_0", 0xffb0},
                                               {"KP_9", 0xffb9},
                                               {"KP_Enter", 0xff8d},
                                               {"space", 0x20},
                                               {"SPACE", 0x20},
                                               {"Tab", 0xff09},
                                               {"minus", 0x2d},
                                               {"plus", 0x2b},
                                               {"a", 0x61},
                                               {"A", 0x41},
                                               {"1", 0x31},
                                               {"/", 0x2f},
                                               {"é", 0xe9},
                                               {"€", 0x010020ac},
                                               {"0xff0d", 0xff0d},
                                               {"U+1F642", 0x0101f642}}) {
    auto k = KeysymForName(name);
    ASSERT_TRUE(k) << name << ": " << k.error().message;
    EXPECT_EQ(*k, keysym) << name;
  }
  for (const char* bad : {"", "Retrun", "F0", "F99", "ctrlx", "KP_A", "\xff"}) {
    auto k = KeysymForName(bad);
    ASSERT_FALSE(k) << bad;
    EXPECT_EQ(k.error().code, ErrorCode::kBadInput) << bad;
  }
  EXPECT_EQ(KeysymForName("Retrun").error().message, "unknown key 'Retrun'");
}

TEST(KeysTest, CombosAndSequences) {
  auto c = ParseCombo("ctrl+shift+t");
  ASSERT_TRUE(c);
  EXPECT_EQ(*c, (std::vector<uint32_t>{0xffe3, 0xffe1, 0x54}));
  EXPECT_EQ(*ParseCombo("ctrl++"), (std::vector<uint32_t>{0xffe3, 0x2b}));
  // With shift, letters go as capitals (the guest's X server types exactly the keysym sent).
  EXPECT_EQ(*ParseCombo("shift+x"), (std::vector<uint32_t>{0xffe1, 0x58}));
  EXPECT_EQ(*ParseCombo("shift+é"), (std::vector<uint32_t>{0xffe1, 0xc9}));
  EXPECT_EQ(*ParseCombo("x+shift"), (std::vector<uint32_t>{0x78, 0xffe1}));
  EXPECT_EQ(*ParseCombo("+"), (std::vector<uint32_t>{0x2b}));
  EXPECT_FALSE(ParseCombo("ctrl+"));
  auto unknown = ParseCombo("ctrl+nonsense");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kBadInput);
  EXPECT_EQ(unknown.error().message, "in 'ctrl+nonsense': unknown key 'nonsense'");
  EXPECT_FALSE(ParseCombo("a+b+c+d+e+f+g+h+i"));
  auto s = ParseKeySequence("ctrl+a Delete");
  ASSERT_TRUE(s);
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[1], (std::vector<uint32_t>{0xffff}));
  EXPECT_EQ(*ParseKeySequence(" "), (std::vector<std::vector<uint32_t>>{{0x20}}));
  EXPECT_FALSE(ParseKeySequence(""));
}

TEST(KeysTest, TextBecomesOneKeysymPerCharacter) {
  auto cps = DecodeUtf8("héllo wörld — 世界 🙂\n");
  ASSERT_TRUE(cps);
  std::vector<uint32_t> keysyms;
  for (char32_t c : *cps) keysyms.push_back(KeysymForCodePoint(c));
  EXPECT_EQ(keysyms.size(), 19u);
  EXPECT_EQ(keysyms[1], 0xe9u);         // é: Latin-1 keysym
  EXPECT_EQ(keysyms[12], 0x01002014u);  // em dash: Unicode keysym
  EXPECT_EQ(keysyms[14], 0x01004e16u);  // 世
  EXPECT_EQ(keysyms[17], 0x0101f642u);  // 🙂 (outside the BMP)
  EXPECT_EQ(keysyms[18], 0xff0du);      // newline: Return
  // Invalid UTF-8 is refused with its offset: truncated, overlong, surrogate, beyond U+10FFFF.
  for (std::string bad :
       {std::string("ab\xc3"), std::string("\xc0\xaf"), std::string("\xed\xa0\x80"),
        std::string("\xf4\x90\x80\x80"), std::string("x\x80")}) {
    auto r = DecodeUtf8(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("invalid UTF-8 at byte"), std::string::npos);
    EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
  }
}

TEST(KeysTest, CharactersBeyondAsciiAreRecognisedFromTheirKeysyms) {
  EXPECT_EQ(CharacterBeyondAscii(*KeysymForName("é")), U'é');
  EXPECT_EQ(CharacterBeyondAscii(*KeysymForName("世")), U'世');
  EXPECT_EQ(CharacterBeyondAscii(*KeysymForName("U+1F642")), U'\U0001F642');
  EXPECT_EQ(CharacterBeyondAscii(0xa0), U'\u00a0');
  for (const char* name : {"a", "Z", "~", "Return", "Tab", "F5", "ctrl", "KP_0", "0x0000ff9f"})
    EXPECT_FALSE(CharacterBeyondAscii(*KeysymForName(name))) << name;
  EXPECT_FALSE(CharacterBeyondAscii(0x0100d800));  // a surrogate is no character
  EXPECT_FALSE(CharacterBeyondAscii(0x01110000));
  // A code point in a combo or a sequence is one key.
  auto seq = ParseKeySequence("x U+4E16 ctrl+U+00E9 u+a");
  ASSERT_TRUE(seq) << seq.error().message;
  ASSERT_EQ(seq->size(), 4u);
  EXPECT_EQ((*seq)[1], std::vector<uint32_t>{0x01004e16});
  EXPECT_EQ((*seq)[2], (std::vector<uint32_t>{kKeysymControlL, 0xe9}));
  EXPECT_EQ((*seq)[3], (std::vector<uint32_t>{'u', 'a'}));  // too few digits: two keys
}

}  // namespace
}  // namespace deskbox::vnc_bridge
