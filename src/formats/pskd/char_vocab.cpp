// `chars` and `encode`: character vocabularies over UTF-8 text (characters are code points).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/utf8.h"
#include "formats/bounded_json.h"
#include "formats/pskd/text_output.h"
#include "formats/pskd/pskd_text.h"
#include "formats/pskd/text_input.h"
#include "trove/atomic_file.h"

namespace trove::pskd {
namespace {

constexpr uint32_t kCodePoints = 0x110000;
constexpr uint32_t kNoToken = ~uint32_t{0};
// A vocabulary file is a JSON array of at most one string per code point; its text stays small.
constexpr uint64_t kMaxVocabFileBytes = uint64_t{64} << 20;

// Decodes one UTF-8 character at p (p < end). Returns its length, or 0 when the bytes are not
// UTF-8 (overlong forms, surrogates and values beyond U+10FFFF included).
size_t DecodeUtf8(const uint8_t* p, const uint8_t* end, uint32_t* cp) {
  const uint8_t c = p[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t len;
  uint32_t v, min;
  if ((c & 0xE0) == 0xC0) { len = 2; v = c & 0x1F; min = 0x80; }
  else if ((c & 0xF0) == 0xE0) { len = 3; v = c & 0x0F; min = 0x800; }
  else if ((c & 0xF8) == 0xF0) { len = 4; v = c & 0x07; min = 0x10000; }
  else return 0;
  if (static_cast<size_t>(end - p) < len) return 0;
  for (size_t i = 1; i < len; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (p[i] & 0x3F);
  }
  if (v < min || v >= kCodePoints || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}


std::string CodePointName(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", cp);
  return buf;
}

// How a character is shown in a message: itself, unless it is a control character.
std::string Shown(uint32_t cp) {
  if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) return CodePointName(cp);
  std::string s = "'";
  utf8::Append(s, cp);
  return s + "' (" + CodePointName(cp) + ")";
}

// Line (1-based) of byte `offset_in_chunk` of a chunk, given the lines before the chunk.
uint64_t LineAt(uint64_t lines_before, std::string_view chunk, size_t offset_in_chunk) {
  return lines_before + 1 + static_cast<uint64_t>(std::count(chunk.begin(), chunk.begin() + offset_in_chunk, '\n'));
}

[[noreturn]] void FailNotUtf8(const TextInput& in, uint64_t lines_before, std::string_view chunk, size_t at) {
  FailPskd(PskdCode::kBadValue, in.path() + ": line " + std::to_string(LineAt(lines_before, chunk, at)) +
                                    " (byte offset " + std::to_string(in.chunk_offset() + at) + "): not UTF-8 text");
}

// A character vocabulary file: code point -> token.
struct CharVocabulary {
  std::vector<uint32_t> token_of;  // indexed by code point, up to the largest in the vocabulary
  uint64_t size = 0;
};

CharVocabulary LoadCharVocabulary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) FailPskd(PskdCode::kNotPskd, "cannot read vocabulary " + path);
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(std::max<std::streamoff>(0, in.tellg()));
  if (size > kMaxVocabFileBytes) {
    FailPskd(PskdCode::kBadValue, "vocabulary " + path + " is " + std::to_string(size) + " bytes (the cap is " +
                                      std::to_string(kMaxVocabFileBytes) + ")");
  }
  in.seekg(0);
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  nlohmann::json json;
  try {
    json = ParseBoundedJson(text, 1);  // an array of strings
  } catch (const Error& e) {
    FailPskd(PskdCode::kBadValue, "vocabulary " + path + " is not a JSON array of strings (" + e.what() + ")");
  }
  if (!json.is_array()) {
    FailPskd(PskdCode::kBadValue, "vocabulary " + path + " is not a JSON array of strings");
  }
  CharVocabulary vocab;
  vocab.size = json.size();
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < json.size(); ++i) {
    if (!json[i].is_string()) FailPskd(PskdCode::kBadValue, "vocabulary " + path + ", entry " + std::to_string(i) + ": not a string");
    const std::string& s = json[i].get_ref<const std::string&>();
    const auto* p = reinterpret_cast<const uint8_t*>(s.data());
    uint32_t cp = 0;
    size_t len = s.empty() ? 0 : DecodeUtf8(p, p + s.size(), &cp);
    if (len == 0 || len != s.size()) {
      FailPskd(PskdCode::kBadValue, "vocabulary " + path + ", entry " + std::to_string(i) + " \"" + s +
                                        "\" is not one character: sub-word vocabularies need longest-match "
                                        "encoding, which this version refuses rather than guesses");
    }
    if (cp >= vocab.token_of.size()) vocab.token_of.resize(cp + 1, kNoToken);
    if (vocab.token_of[cp] != kNoToken) {
      FailPskd(PskdCode::kBadValue, "vocabulary " + path + ": character " + Shown(cp) + " appears twice");
    }
    vocab.token_of[cp] = static_cast<uint32_t>(i);
  }
  return vocab;
}

// Output through a local buffer: AtomicFile::Write per token would dominate the encode loop.
class BufferedOutput {
 public:
  explicit BufferedOutput(TextOutput& file) : file_(file) { buffer_.reserve(kFlushBytes + 64); }
  void Append(const char* p, size_t n) {
    buffer_.append(p, n);
    if (buffer_.size() >= kFlushBytes) Flush();
  }
  void Flush() {
    file_.Write(buffer_.data(), buffer_.size());
    buffer_.clear();
  }

 private:
  static constexpr size_t kFlushBytes = size_t{1} << 20;
  TextOutput& file_;
  std::string buffer_;
};

}  // namespace

CharsResult WriteCharVocabulary(const std::string& input, const std::string& output) {
  TextInput in(input, TextInput::Cut::kUtf8);
  std::vector<bool> seen(kCodePoints, false);
  bool seen_ascii[128] = {};
  CharsResult result;
  uint64_t lines = 0;
  for (std::string_view chunk = in.Next(); !chunk.empty(); chunk = in.Next()) {
    const auto* begin = reinterpret_cast<const uint8_t*>(chunk.data());
    const uint8_t* end = begin + chunk.size();
    uint64_t chars = 0;
    for (const uint8_t* p = begin; p < end;) {
      if (*p < 0x80) {
        seen_ascii[*p] = true;
        ++p;
        ++chars;
        continue;
      }
      uint32_t cp;
      size_t len = DecodeUtf8(p, end, &cp);
      if (len == 0) FailNotUtf8(in, lines, chunk, static_cast<size_t>(p - begin));
      seen[cp] = true;
      p += len;
      ++chars;
    }
    result.characters += chars;
    lines += static_cast<uint64_t>(std::count(chunk.begin(), chunk.end(), '\n'));
  }
  for (uint32_t c = 0; c < 128; ++c) {
    if (seen_ascii[c]) seen[c] = true;
  }
  nlohmann::json vocab = nlohmann::json::array();
  std::string character;
  for (uint32_t cp = 0; cp < kCodePoints; ++cp) {
    if (!seen[cp]) continue;
    character.clear();
    utf8::Append(character, cp);
    vocab.push_back(character);
  }
  result.vocabulary = vocab.size();
  std::string text = vocab.dump(-1, ' ', false) + "\n";
  TextOutput out(output);
  out.Write(text.data(), text.size());
  out.Commit();
  return result;
}

EncodeResult EncodeText(const std::string& input, const std::string& vocab_path, const std::string& output) {
  CharVocabulary vocab = LoadCharVocabulary(vocab_path);
  // Each token's decimal text, so that the loop copies bytes instead of formatting numbers.
  std::vector<char> digits(vocab.size * 11);
  std::vector<uint8_t> digit_len(vocab.size);
  for (uint64_t t = 0; t < vocab.size; ++t) {
    int n = std::snprintf(digits.data() + t * 11, 11, "%llu", static_cast<unsigned long long>(t));
    digit_len[t] = static_cast<uint8_t>(n);
  }
  uint32_t ascii_token[128];
  for (uint32_t c = 0; c < 128; ++c) ascii_token[c] = c < vocab.token_of.size() ? vocab.token_of[c] : kNoToken;

  TextInput in(input, TextInput::Cut::kUtf8);
  TextOutput file(output);
  BufferedOutput out(file);
  EncodeResult result;
  result.vocabulary = vocab.size;
  uint64_t lines = 0;
  char separator = 0;  // written before the next token
  for (std::string_view chunk = in.Next(); !chunk.empty(); chunk = in.Next()) {
    const auto* begin = reinterpret_cast<const uint8_t*>(chunk.data());
    const uint8_t* end = begin + chunk.size();
    uint64_t tokens = 0;
    for (const uint8_t* p = begin; p < end;) {
      uint32_t cp, token;
      if (*p < 0x80) {
        cp = *p;
        token = ascii_token[cp];
        ++p;
      } else {
        size_t len = DecodeUtf8(p, end, &cp);
        if (len == 0) FailNotUtf8(in, lines, chunk, static_cast<size_t>(p - begin));
        token = cp < vocab.token_of.size() ? vocab.token_of[cp] : kNoToken;
        p += len;
      }
      if (token == kNoToken) {
        size_t at = static_cast<size_t>(p - begin) - 1;
        FailPskd(PskdCode::kBadValue, input + ": line " + std::to_string(LineAt(lines, chunk, at)) + ": character " +
                                          Shown(cp) + " is not in the vocabulary " + vocab_path);
      }
      char item[12];
      size_t n = 0;
      if (separator != 0) item[n++] = separator;
      std::memcpy(item + n, digits.data() + uint64_t{token} * 11, digit_len[token]);
      n += digit_len[token];
      out.Append(item, n);
      separator = cp == '\n' ? '\n' : ' ';
      ++tokens;
    }
    result.tokens += tokens;
    lines += static_cast<uint64_t>(std::count(chunk.begin(), chunk.end(), '\n'));
  }
  if (result.tokens > 0) out.Append("\n", 1);
  out.Flush();
  file.Commit();
  return result;
}

}  // namespace trove::pskd
