// The display rule (core/display_escape.h): every class of character it escapes, the boundaries
// of each class, invalid UTF-8, the four modes, and that what it shows reads back one way.
#include <gtest/gtest.h>

#include <string>

#include "core/display_escape.h"
#include "core/utf8.h"
#include "trove/error.h"

namespace trove {
namespace {

using namespace std::string_literals;

std::string Name(const std::string& s) { return EscapeForDisplay(s); }

// Reads the kName notation back: the inverse a person (or bash's $'...') applies.
std::string ReadBack(const std::string& shown) {
  auto hex = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::string out;
  for (size_t i = 0; i < shown.size(); ++i) {
    if (shown[i] != '\\') {
      out += shown[i];
      continue;
    }
    const char e = shown[++i];
    if (e == 'n') out += '\n';
    else if (e == 't') out += '\t';
    else if (e == 'r') out += '\r';
    else if (e == '\\') out += '\\';
    else if (e == 'x') {
      out += static_cast<char>(hex(shown[i + 1]) * 16 + hex(shown[i + 2]));
      i += 2;
    } else if (e == 'u') {
      uint32_t cp = 0;
      for (int k = 1; k <= 4; ++k) cp = cp * 16 + static_cast<uint32_t>(hex(shown[i + k]));
      i += 4;
      if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
      } else {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      }
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      ADD_FAILURE() << "unknown escape \\" << e << " in " << shown;
    }
  }
  return out;
}

bool AllPlain(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7F) return false;
  return true;
}

TEST(DisplayEscape, PrintableTextIsKept) {
  EXPECT_EQ(Name("model/blocks.0.attn.weight"), "model/blocks.0.attn.weight");
  EXPECT_EQ(Name(" !\"#$%&'()*+,-./09:;<=>?@AZ[]^_`az{|}~"), " !\"#$%&'()*+,-./09:;<=>?@AZ[]^_`az{|}~");
  // Valid UTF-8 past ASCII: accented, CJK, the blocks stats draws with, an emoji (4 bytes).
  EXPECT_EQ(Name("poids_é/重み/▁█/\xF0\x9F\x98\x80"), "poids_é/重み/▁█/\xF0\x9F\x98\x80");
  EXPECT_EQ(Name(""), "");
}

TEST(DisplayEscape, C0ControlsAndDel) {
  EXPECT_EQ(Name("a\nb"), "a\\nb");
  EXPECT_EQ(Name("a\tb"), "a\\tb");
  EXPECT_EQ(Name("a\rb"), "a\\rb");
  EXPECT_EQ(Name("\x07"), "\\x07");
  EXPECT_EQ(Name("x\x1b]0;PWNED\x07\x1b[2J"), "x\\x1b]0;PWNED\\x07\\x1b[2J");
  EXPECT_EQ(Name("\r\x1b[2K"), "\\r\\x1b[2K");
  EXPECT_EQ(Name("a\0b"s), "a\\x00b");
  EXPECT_EQ(Name("\x1f"), "\\x1f");
  EXPECT_EQ(Name("\x7f"), "\\x7f");
  EXPECT_EQ(Name(" ~"), " ~");  // 0x20 and 0x7E, either side of the controls, are kept
  for (int c = 0; c < 0x20; ++c) EXPECT_TRUE(AllPlain(Name(std::string(1, static_cast<char>(c))))) << c;
}

TEST(DisplayEscape, C1Controls) {
  EXPECT_EQ(Name("\xC2\x80"), "\\u0080");
  EXPECT_EQ(Name("a\xC2\x9B" "31mb"), "a\\u009b31mb");  // CSI, which some terminals take alone
  EXPECT_EQ(Name("\xC2\x85"), "\\u0085");               // NEL, a line break
  EXPECT_EQ(Name("\xC2\x9F"), "\\u009f");
  EXPECT_EQ(Name("\xC2\xA0\xC2\xBF"), "\xC2\xA0\xC2\xBF");  // U+00A0 and U+00BF, past C1, are kept
  EXPECT_EQ(Name("\xC2\x7F"), "\\xc2\\x7f");                // not a sequence: both bytes escaped
}

TEST(DisplayEscape, BidirectionalControlsAndSeparators) {
  EXPECT_EQ(Name("abc\xE2\x80\xAE" "fdp.exe"), "abc\\u202efdp.exe");  // RIGHT-TO-LEFT OVERRIDE
  EXPECT_EQ(Name("\xE2\x80\xAA\xE2\x80\xAB\xE2\x80\xAC\xE2\x80\xAD"), "\\u202a\\u202b\\u202c\\u202d");
  EXPECT_EQ(Name("\xE2\x81\xA6\xE2\x81\xA7\xE2\x81\xA8\xE2\x81\xA9"), "\\u2066\\u2067\\u2068\\u2069");
  EXPECT_EQ(Name("\xE2\x80\x8E\xE2\x80\x8F"), "\\u200e\\u200f");
  EXPECT_EQ(Name("\xD8\x9C"), "\\u061c");
  EXPECT_EQ(Name("\xE2\x80\xA8\xE2\x80\xA9"), "\\u2028\\u2029");
  // Neighbours of each range are ordinary characters.
  EXPECT_EQ(Name("\xE2\x80\xA7\xE2\x80\xAF\xE2\x81\xA5\xE2\x81\xAA\xE2\x80\x8D\xE2\x80\x90\xD8\x9B"),
            "\xE2\x80\xA7\xE2\x80\xAF\xE2\x81\xA5\xE2\x81\xAA\xE2\x80\x8D\xE2\x80\x90\xD8\x9B");
}

TEST(DisplayEscape, InvalidUtf8ByteByByte) {
  EXPECT_EQ(Name("\xFF"), "\\xff");
  EXPECT_EQ(Name("a\x80" "b"), "a\\x80b");                  // a lone continuation byte
  EXPECT_EQ(Name("\xC3"), "\\xc3");                          // a cut sequence
  EXPECT_EQ(Name("\xE2\x80"), "\\xe2\\x80");
  EXPECT_EQ(Name("\xC0\xAF"), "\\xc0\\xaf");                  // overlong '/'
  EXPECT_EQ(Name("\xE0\x80\xAF"), "\\xe0\\x80\\xaf");          // overlong, three bytes
  EXPECT_EQ(Name("\xF4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(Name("\xF8\x88\x80\x80\x80"), "\\xf8\\x88\\x80\\x80\\x80");
  EXPECT_EQ(Name("\xC3\xA9\xFF\xC3\xA9"), "\xC3\xA9\\xff\xC3\xA9");  // decoding resumes after the bad byte
  EXPECT_EQ(Name("\xF4\x8F\xBF\xBF"), "\xF4\x8F\xBF\xBF");          // U+10FFFF itself is kept
  // A lone surrogate (what pickle's surrogatepass writes) is a code point, shown as Python shows it.
  EXPECT_EQ(Name("\xED\xA0\x80"), "\\ud800");
  EXPECT_EQ(Name("\xED\xBF\xBF"), "\\udfff");
  EXPECT_EQ(Name("\xED\x9F\xBF"), "\xED\x9F\xBF");  // U+D7FF, below them
}

TEST(DisplayEscape, BackslashAndQuote) {
  EXPECT_EQ(Name("a\\b"), "a\\\\b");
  // A name spelling an escape is told apart from the character it spells.
  EXPECT_NE(Name("\\x1b"), Name("\x1b"));
  EXPECT_EQ(Name("\\x1b"), "\\\\x1b");
  EXPECT_EQ(EscapeForDisplay("it's", DisplayEscape::kName, '\''), "it\\'s");
  EXPECT_EQ(EscapeForDisplay("it's", DisplayEscape::kName), "it's");
}

TEST(DisplayEscape, Modes) {
  const std::string text = "a\\b\tc\nd\x1b\xC2\x9B\xFF\xC3\xA9";
  EXPECT_EQ(EscapeForDisplay(text, DisplayEscape::kName), "a\\\\b\\tc\\nd\\x1b\\u009b\\xff\xC3\xA9");
  EXPECT_EQ(EscapeForDisplay(text, DisplayEscape::kBytes), "a\\\\b\\tc\\nd\\x1b\\xc2\\x9b\\xff\\xc3\\xa9");
  EXPECT_EQ(EscapeForDisplay(text, DisplayEscape::kLine), "a\\b\\tc\\nd\\x1b\\u009b\\xff\xC3\xA9");
  EXPECT_EQ(EscapeForDisplay(text, DisplayEscape::kLines), "a\\b\tc\nd\\x1b\\u009b\\xff\xC3\xA9");
  std::string out = "x=";
  AppendEscapedForDisplay("\x07", out);
  EXPECT_EQ(out, "x=\\x07");
}

TEST(DisplayEscape, OutputIsPlainAndReadsBackOneWay) {
  // Every byte value alone and after a lead byte: nothing raw comes out, and the kName text
  // reads back to the input (so two inputs never show alike).
  for (int a = 0; a < 256; ++a) {
    for (const std::string& s : {std::string(1, static_cast<char>(a)), "\xC2"s + static_cast<char>(a),
                                 "\xE2\x80"s + static_cast<char>(a), "x\\"s + static_cast<char>(a)}) {
      const std::string shown = Name(s);
      EXPECT_TRUE(AllPlain(shown)) << a;
      EXPECT_EQ(ReadBack(shown), s) << a;
      const std::string lines = EscapeForDisplay(s, DisplayEscape::kLines);
      for (unsigned char c : lines) EXPECT_TRUE(c >= 0x20 ? c != 0x7F : c == '\n' || c == '\t') << a;
    }
  }
  // Escaping what is shown again only doubles its backslashes: still plain, still one reading.
  const std::string once = Name("k\x1b\xE2\x80\xAE");
  EXPECT_EQ(Name(once), "k\\\\x1b\\\\u202e");
  EXPECT_EQ(ReadBack(Name(once)), once);
}

TEST(DisplayEscape, IncompleteUtf8Tail) {
  EXPECT_EQ(IncompleteUtf8Tail(""), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("abc"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xC3"), 1u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xC3\xA9"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xE2\x80"), 2u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xE2\x80\xAE"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(IncompleteUtf8Tail("\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("a\x80\x80\x80"), 0u);  // continuations without a lead: nothing to wait for
  EXPECT_EQ(IncompleteUtf8Tail("a\xFF"), 0u);
}

TEST(DisplayEscape, CutLengthNeverSplitsACharacter) {
  const std::string s = "ab\xC3\xA9\xE2\x80\xAE\xF0\x9F\x98\x80";  // a b é U+202E 😀
  EXPECT_EQ(utf8::CutLength(s, 2), 2u);
  EXPECT_EQ(utf8::CutLength(s, 3), 2u);   // inside é
  EXPECT_EQ(utf8::CutLength(s, 4), 4u);
  EXPECT_EQ(utf8::CutLength(s, 6), 4u);   // inside U+202E
  EXPECT_EQ(utf8::CutLength(s, 10), 7u);  // inside the emoji, three bytes back
  EXPECT_EQ(utf8::CutLength(s, 11), 11u);
  EXPECT_EQ(utf8::CutLength(s, 99), 11u);
  EXPECT_EQ(utf8::CutLength("\x80\x80\x80\x80\x80", 4), 1u);  // no lead byte: at most three back
}

TEST(DisplayEscape, ErrorDisplayMessage) {
  Error e(ErrorCode::kNotFound, "no key 'k\x1b[2J' (did you mean 'k\\\\x1b'?)");
  e.AddContext("leaf 'a\nb'").SetEntry("dir\\x\r").SetFile("m\xE2\x80\xAE.pt");
  // message() keeps the file's text; DisplayMessage() escapes it: names whole (their backslash
  // doubled), trove's text around names but for its backslashes (a name in it may be escaped).
  EXPECT_EQ(e.message(), "m\xE2\x80\xAE.pt: dir\\x\r: leaf 'a\nb': no key 'k\x1b[2J' (did you mean 'k\\\\x1b'?)");
  EXPECT_EQ(e.DisplayMessage(), "m\\u202e.pt: dir\\\\x\\r: leaf 'a\\nb': no key 'k\\x1b[2J' (did you mean 'k\\\\x1b'?)");
  EXPECT_EQ(e.file(), "m\xE2\x80\xAE.pt");
  Error coded(ErrorCode::kCorrupt, "type '\x07'");
  coded.SetSpecCode(9004);
  EXPECT_EQ(coded.DisplayMessage(), "E9004: type '\\x07'");
  EXPECT_EQ(coded.DisplayMessageWithoutSpecCode(), "type '\\x07'");
}

}  // namespace
}  // namespace trove
