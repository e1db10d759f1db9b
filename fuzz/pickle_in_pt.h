// fuzz/pickle_in_pt.h: wraps a fuzzed pickle as the data.pkl of a torch.save-shaped zip, so that
// the whole .pt reader (TorchResolver, storages, key paths) turns it into a Document. The zip is
// stored (no compression) and holds archive/data.pkl, one 64-byte storage archive/data/0 (what
// the seeds' persistent ids name) and archive/version; Python's zipfile reads it as torch does.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace trove_fuzz {

inline uint32_t Crc32(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : bytes) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

inline void Le(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

// A stored zip of `entries` (name, bytes), as Python's zipfile writes one without zip64.
inline std::string StoredZip(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out, central;
  for (const auto& [name, data] : entries) {
    const uint32_t crc = Crc32(data);
    const uint64_t offset = out.size();
    Le(out, 0x04034b50, 4);
    Le(out, 20, 2);  // version needed
    Le(out, 0, 2);   // flags
    Le(out, 0, 2);   // stored
    Le(out, 0, 4);   // time, date
    Le(out, crc, 4);
    Le(out, data.size(), 4);
    Le(out, data.size(), 4);
    Le(out, name.size(), 2);
    Le(out, 0, 2);
    out += name;
    out += data;
    Le(central, 0x02014b50, 4);
    Le(central, 20, 2);
    Le(central, 20, 2);
    Le(central, 0, 2);
    Le(central, 0, 2);
    Le(central, 0, 4);
    Le(central, crc, 4);
    Le(central, data.size(), 4);
    Le(central, data.size(), 4);
    Le(central, name.size(), 2);
    Le(central, 0, 2);  // extra
    Le(central, 0, 2);  // comment
    Le(central, 0, 2);  // disk
    Le(central, 0, 2);  // internal attributes
    Le(central, 0, 4);  // external attributes
    Le(central, offset, 4);
    central += name;
  }
  const uint64_t central_offset = out.size();
  out += central;
  Le(out, 0x06054b50, 4);
  Le(out, 0, 4);
  Le(out, entries.size(), 2);
  Le(out, entries.size(), 2);
  Le(out, central.size(), 4);
  Le(out, central_offset, 4);
  Le(out, 0, 2);
  return out;
}

// Writes the fuzzed pickle as `path` (a .pt); false when the file cannot be written.
inline bool WritePickleAsPt(const std::string& path, const uint8_t* data, size_t size) {
  const std::string pkl(reinterpret_cast<const char*>(data), size);
  std::string storage(64, '\0');
  for (size_t i = 0; i < storage.size(); ++i) storage[i] = static_cast<char>(i * 7 + 1);
  const std::string zip = StoredZip({{"archive/data.pkl", pkl}, {"archive/data/0", storage}, {"archive/version", "3\n"}});
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(zip.data(), 1, zip.size(), f) == zip.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace trove_fuzz
