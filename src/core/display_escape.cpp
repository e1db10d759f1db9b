#include "core/display_escape.h"

#include "core/utf8.h"

namespace trove {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void AppendHexByte(uint8_t b, std::string& out) {
  out += "\\x";
  out += kHex[b >> 4];
  out += kHex[b & 15];
}

void AppendCodePoint(uint32_t cp, std::string& out) {
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(cp >> shift) & 15];
}

// Whether an ASCII byte is shown as itself.
bool KeptAscii(uint8_t c, DisplayEscape how, char quote) {
  if (c == '\n' || c == '\t') return how == DisplayEscape::kLines;
  if (c < 0x20 || c == 0x7F) return false;
  if (c == '\\') return how == DisplayEscape::kLine || how == DisplayEscape::kLines;
  return quote == 0 || c != static_cast<uint8_t>(quote);
}

void AppendAsciiEscape(uint8_t c, std::string& out) {
  switch (c) {
    case '\n': out += "\\n"; return;
    case '\t': out += "\\t"; return;
    case '\r': out += "\\r"; return;
    case '\\': out += "\\\\"; return;
    default:
      if (c < 0x20 || c == 0x7F) {
        AppendHexByte(c, out);
      } else {  // the caller's quote
        out += '\\';
        out += static_cast<char>(c);
      }
  }
}

}  // namespace

bool EscapedCodePoint(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200E || cp == 0x200F || (cp >= 0x2028 && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069) || (cp >= 0xD800 && cp <= 0xDFFF);
}

void AppendEscapedForDisplay(std::string_view text, std::string& out, DisplayEscape how, char quote) {
  size_t i = 0;
  while (i < text.size()) {
    // The run of bytes kept as they are, appended at once.
    size_t run = i;
    while (run < text.size() && static_cast<uint8_t>(text[run]) < 0x80 &&
           KeptAscii(static_cast<uint8_t>(text[run]), how, quote)) {
      ++run;
    }
    out.append(text.data() + i, run - i);
    i = run;
    if (i == text.size()) break;
    const auto c = static_cast<uint8_t>(text[i]);
    if (c < 0x80) {
      AppendAsciiEscape(c, out);
      ++i;
      continue;
    }
    if (how == DisplayEscape::kBytes) {
      AppendHexByte(c, out);
      ++i;
      continue;
    }
    const size_t start = i;
    uint32_t cp = 0;
    if (!utf8::Next(text, i, cp)) {
      AppendHexByte(c, out);  // not UTF-8: the byte alone, and decoding resumes at the next one
      ++i;
    } else if (EscapedCodePoint(cp)) {
      AppendCodePoint(cp, out);
    } else {
      out.append(text.data() + start, i - start);
    }
  }
}

std::string EscapeForDisplay(std::string_view text, DisplayEscape how, char quote) {
  std::string out;
  out.reserve(text.size());
  AppendEscapedForDisplay(text, out, how, quote);
  return out;
}

size_t IncompleteUtf8Tail(std::string_view text) {
  // The last lead byte among the final three, if the bytes after it are all continuations and
  // fewer than its sequence needs.
  for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const auto c = static_cast<uint8_t>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t needs = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    return needs > back ? back : 0;
  }
  return 0;
}

}  // namespace trove
