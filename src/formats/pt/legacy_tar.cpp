#include "formats/pt/legacy_tar.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "trove/error.h"

namespace trove {
namespace {

constexpr uint64_t kBlock = 512;

std::string_view Field(const uint8_t* block, size_t at, size_t len) {
  std::string_view f(reinterpret_cast<const char*>(block) + at, len);
  size_t nul = f.find('\0');
  return nul == std::string_view::npos ? f : f.substr(0, nul);
}

// A numeric field as tarfile reads it: base-256 when the first byte is 0x80 or 0xFF, else octal
// digits up to a NUL, surrounded by blanks. nullopt where tarfile raises (the header is invalid).
std::optional<int64_t> Number(const uint8_t* block, size_t at, size_t len) {
  const uint8_t* p = block + at;
  if (p[0] == 0x80 || p[0] == 0xFF) {
    uint64_t n = 0;
    for (size_t i = 1; i < len; ++i) {
      if (n >> 56) return std::nullopt;  // beyond 64 bits: no real member is that large
      n = n << 8 | p[i];
    }
    if (p[0] == 0xFF) return std::nullopt;  // negative
    return static_cast<int64_t>(n);
  }
  std::string_view s = Field(p, 0, len);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r' || s.front() == '\v' || s.front() == '\f')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r' || s.back() == '\v' || s.back() == '\f')) s.remove_suffix(1);
  uint64_t n = 0;
  for (char c : s) {
    if (c == '_') continue;  // Python's int() accepts digit separators
    if (c < '0' || c > '7' || (n >> 60) != 0) return std::nullopt;
    n = n * 8 + static_cast<uint64_t>(c - '0');
  }
  return static_cast<int64_t>(n);
}

bool AllZero(const uint8_t* block) {
  return std::all_of(block, block + kBlock, [](uint8_t b) { return b == 0; });
}

// tarfile accepts a header whose checksum field equals the sum of its bytes (with the field
// itself counted as blanks), computed over unsigned or over signed bytes.
bool ChecksumMatches(const uint8_t* block) {
  std::optional<int64_t> declared = Number(block, 148, 8);
  if (!declared) return false;
  int64_t unsigned_sum = 256, signed_sum = 256;
  for (size_t i = 0; i < kBlock; ++i) {
    if (i >= 148 && i < 156) continue;
    unsigned_sum += block[i];
    signed_sum += static_cast<int8_t>(block[i]);
  }
  return *declared == unsigned_sum || *declared == signed_sum;
}

uint64_t Blocks(uint64_t size) { return (size + kBlock - 1) / kBlock * kBlock; }

}  // namespace

bool LooksLikeTar(const uint8_t* data, uint64_t size) {
  return size >= kBlock && !AllZero(data) && ChecksumMatches(data);
}

std::vector<TarMember> ListTarMembers(const uint8_t* data, uint64_t size) {
  std::vector<TarMember> members;
  uint64_t at = 0;
  std::optional<std::string> long_name;  // from a GNU 'L' record, for the next header
  std::optional<std::string> pax_path;   // from a pax 'x' record, for the next header
  uint64_t pax_size = 0;
  bool has_pax_size = false;
  while (size - at >= kBlock) {
    const uint8_t* h = data + at;
    if (AllZero(h) || !ChecksumMatches(h)) break;  // end of archive, or where tarfile stops reading
    const std::string where = "tar header @ " + std::to_string(at);
    std::optional<int64_t> declared = Number(h, 124, 12);
    if (!declared) break;
    const char type = static_cast<char>(h[156]);
    uint64_t member_size = static_cast<uint64_t>(*declared);
    if (has_pax_size && type != 'x' && type != 'g' && type != 'L' && type != 'K') member_size = pax_size;
    const uint64_t data_at = at + kBlock;
    if (member_size > size - data_at) {
      Fail(ErrorCode::kCorrupt, where + ": member of " + std::to_string(member_size) + " bytes runs past the end of the file (" +
                                    std::to_string(size) + " bytes)");
    }
    if (type == 'L' || type == 'K' || type == 'x' || type == 'g') {
      std::string_view body(reinterpret_cast<const char*>(data + data_at), member_size);
      if (type == 'L') {
        size_t nul = body.find('\0');
        long_name = std::string(nul == std::string_view::npos ? body : body.substr(0, nul));
      } else if (type == 'x') {
        // Records "<length> <key>=<value>\n"; only the two keys that move or rename a member matter.
        size_t pos = 0;
        while (pos < body.size()) {
          size_t space = body.find(' ', pos);
          if (space == std::string_view::npos) break;
          uint64_t len = 0;
          bool digits = space > pos;
          for (size_t i = pos; i < space && digits; ++i) {
            if (body[i] < '0' || body[i] > '9' || len > body.size()) digits = false;
            else len = len * 10 + static_cast<uint64_t>(body[i] - '0');
          }
          if (!digits || len <= space - pos + 1 || len > body.size() - pos) break;
          std::string_view record = body.substr(space + 1, len - (space - pos) - 1);
          if (!record.empty() && record.back() == '\n') record.remove_suffix(1);
          size_t eq = record.find('=');
          if (eq != std::string_view::npos) {
            std::string_view key = record.substr(0, eq), value = record.substr(eq + 1);
            if (key == "path") pax_path = std::string(value);
            if (key == "size") {
              uint64_t n = 0;
              bool ok = !value.empty();
              for (char c : value) {
                if (c < '0' || c > '9' || n > (UINT64_MAX - 9) / 10) ok = false;
                else n = n * 10 + static_cast<uint64_t>(c - '0');
              }
              if (ok) {
                pax_size = n;
                has_pax_size = true;
              }
            }
          }
          pos += len;
        }
      }
      at = data_at + Blocks(member_size);
      if (at > size) break;
      continue;
    }
    if (members.size() >= kMaxTarMembers) {
      Fail(ErrorCode::kLimit, where + ": more than kMaxTarMembers (" + std::to_string(kMaxTarMembers) + ") members");
    }
    TarMember m;
    m.type = type;
    m.header_offset = at;
    m.data_offset = data_at;
    m.size = member_size;
    std::string name(Field(h, 0, 100));
    // tarfile joins the ustar prefix field whatever the header's magic says.
    std::string prefix(Field(h, 345, 155));
    if (!prefix.empty() && type != 'S') name = prefix + "/" + name;
    if (long_name) name = *long_name;
    if (pax_path) name = *pax_path;
    if (type == '5' || (type == '\0' && name.ends_with("/"))) {
      m.type = '5';
      while (name.size() > 1 && name.back() == '/') name.pop_back();
    }
    m.name = std::move(name);
    long_name.reset();
    pax_path.reset();
    has_pax_size = false;
    // tarfile skips data blocks only for regular files and types it does not know.
    const bool skips_data = m.regular() || std::string_view("123456").find(type) == std::string_view::npos;
    at = data_at + (skips_data ? Blocks(member_size) : 0);
    members.push_back(std::move(m));
    if (at > size) break;
  }
  return members;
}

}  // namespace trove
