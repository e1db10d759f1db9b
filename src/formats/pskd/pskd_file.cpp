// The container: header encoding/parsing and reading samples through a mapping.
#include <bit>
#include <cstring>

#include "core/byte_reader.h"
#include "trove/pskd.h"

namespace trove::pskd {
namespace {

// ByteReader reports shortness as a plain kCorrupt error; the spec calls it E9003.
template <class F>
auto Truncation(F&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const Error& e) {
    if (PskdCodeOf(e)) throw;
    FailPskd(PskdCode::kTruncated, "header " + e.message());
  }
}

}  // namespace

std::vector<uint8_t> EncodeHeader(const SampleType& type, uint64_t count) {
  const bool v2 = !type.is_params && type.has_narrow_leaf();
  std::vector<uint8_t> out(kMagic.begin(), kMagic.end());
  AppendLe(out, v2 ? 2 : 1, 2);
  AppendLe(out, type.text.size(), 4);
  out.insert(out.end(), type.text.begin(), type.text.end());
  AppendLe(out, count, 8);
  if (v2) {
    AppendLe(out, type.leaves.size(), 4);
    for (const Leaf& leaf : type.leaves) out.push_back(static_cast<uint8_t>(leaf.encoding));
  }
  return out;
}

uint64_t CountFieldOffset(const SampleType& type) { return 4 + 2 + 4 + type.text.size(); }

Header ParseHeader(const uint8_t* data, uint64_t size) {
  ByteReader in(data, size);
  if (size < 4 || std::memcmp(data, kMagic.data(), 4) != 0) FailPskd(PskdCode::kNotPskd, "bad magic (not a .psk.d file)");
  in.Skip(4);
  Header h;
  h.version = Truncation([&] { return in.U16(); });
  if (h.version != 1 && h.version != 2) FailPskd(PskdCode::kNotPskd, "unsupported version " + std::to_string(h.version));
  uint32_t type_len = Truncation([&] { return in.U32(); });
  if (type_len > kMaxTypeTextBytes) {
    FailPskd(PskdCode::kNotClosedType, "type text of " + std::to_string(type_len) + " bytes (the cap is " +
                                           std::to_string(kMaxTypeTextBytes) + ")");
  }
  std::string_view text = Truncation([&] { return in.Bytes(type_len); });
  h.count = Truncation([&] { return in.U64(); });
  h.type = ParseSampleType(text);
  if (h.version == 2) {
    uint32_t leaves = Truncation([&] { return in.U32(); });
    if (!h.type.is_params && leaves != h.type.leaves.size()) {
      FailPskd(PskdCode::kLayout, "the header declares " + std::to_string(leaves) + " leaves, the type " +
                                      h.type.text + " has " + std::to_string(h.type.leaves.size()));
    }
    if (leaves > kMaxLeaves) FailPskd(PskdCode::kLayout, "the header declares " + std::to_string(leaves) + " leaves");
    std::string_view bytes = Truncation([&] { return in.Bytes(leaves); });
    if (!h.type.is_params) {
      std::vector<Encoding> encodings;
      for (size_t i = 0; i < bytes.size(); ++i) {
        uint8_t b = static_cast<uint8_t>(bytes[i]);
        if (b > 2) FailPskd(PskdCode::kNotPskd, "leaf " + std::to_string(i) + ": unknown encoding " + std::to_string(b));
        encodings.push_back(static_cast<Encoding>(b));
      }
      h.type.SetEncodings(encodings);
    }
  }
  h.data_offset = in.position();
  if (h.type.is_params) return h;
  const uint64_t available = in.remaining();
  const uint64_t sample = h.type.sample_bytes;
  if (h.count > available / sample) {
    FailPskd(PskdCode::kTruncated, "truncated: the header claims " + std::to_string(h.count) + " samples of " +
                                       std::to_string(sample) + " bytes, " + std::to_string(available) +
                                       " bytes of data follow offset " + std::to_string(h.data_offset));
  }
  if (h.count * sample != available) {
    FailPskd(PskdCode::kLayout, std::to_string(available - h.count * sample) + " bytes after the last of " +
                                    std::to_string(h.count) + " samples (offset " +
                                    std::to_string(h.data_offset + h.count * sample) + ")");
  }
  return h;
}

uint64_t LoadIndex(const uint8_t* p, uint32_t element_bytes) {
  return LoadLe(p, element_bytes);
}

double LoadReal(const uint8_t* p, Encoding encoding) {
  switch (encoding) {
    case Encoding::kF64: {
      uint64_t bits = LoadIndex(p, 8);
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
    case Encoding::kF32: {
      uint32_t bits = static_cast<uint32_t>(LoadIndex(p, 4));
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case Encoding::kBF16: {
      uint32_t bits = static_cast<uint32_t>(LoadIndex(p, 2)) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
  }
  return 0;
}

PskdFile PskdFile::FromBytes(SharedBytes bytes, std::string name) {
  PskdFile f;
  f.name_ = std::move(name);
  f.bytes_ = std::move(bytes);
  f.header_ = WithFile(f.name_, [&] { return ParseHeader(f.bytes_.data(), f.bytes_.size()); });
  return f;
}

PskdFile PskdFile::FromMapped(std::shared_ptr<MappedFile> file) {
  std::string name = file->path();
  return FromBytes(file->bytes(), std::move(name));
}

PskdFile PskdFile::Open(const std::string& path) {
  std::shared_ptr<MappedFile> file;
  try {
    file = MappedFile::Open(path);
  } catch (const Error& e) {
    FailPskd(PskdCode::kNotPskd, "cannot read " + e.message());
  }
  return FromMapped(std::move(file));
}

void PskdFile::RequireLayout() const {
  if (type().is_params) {
    FailPskd(PskdCode::kNotClosedType,
             "params " + type().params_name + ": the leaf layout needs the program that declares it", name_);
  }
}

std::span<const uint8_t> PskdFile::Sample(uint64_t index) const {
  RequireLayout();
  if (index >= count()) {
    FailPskd(PskdCode::kTruncated, "sample " + std::to_string(index) + " is beyond the count " + std::to_string(count()),
             name_);
  }
  // ParseHeader checked data_offset + count * sample_bytes == size.
  const uint64_t sample = type().sample_bytes;
  return {bytes_.data() + header_.data_offset + index * sample, static_cast<size_t>(sample)};
}

namespace {

// The largest element of n little-endian unsigned integers of type T. Lanes of a fixed count let
// the compiler use vector max instructions at -O2 (the batch loader checks every sample).
template <class T>
uint64_t MaxOf(const uint8_t* p, uint64_t n) {
  constexpr size_t kLanes = 32 / sizeof(T);
  T lanes[kLanes] = {};
  uint64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    T block[kLanes];
    std::memcpy(block, p + i * sizeof(T), sizeof block);
    for (size_t j = 0; j < kLanes; ++j) lanes[j] = block[j] > lanes[j] ? block[j] : lanes[j];
  }
  T max = 0;
  for (size_t j = 0; j < kLanes; ++j) max = lanes[j] > max ? lanes[j] : max;
  for (; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    max = v > max ? v : max;
  }
  return max;
}

}  // namespace

uint64_t MaxIndex(const Leaf& leaf, const uint8_t* p, uint64_t n) {
  static_assert(std::endian::native == std::endian::little, "MaxOf reads little-endian integers natively");
  switch (leaf.element_bytes) {
    case 1: return MaxOf<uint8_t>(p, n);
    case 2: return MaxOf<uint16_t>(p, n);
    case 4: return MaxOf<uint32_t>(p, n);
    default: return MaxOf<uint64_t>(p, n);
  }
}

void PskdFile::CheckIndices(uint64_t index) const {
  std::span<const uint8_t> s = Sample(index);
  for (size_t k = 0; k < type().leaves.size(); ++k) {
    const Leaf& leaf = type().leaves[k];
    if (leaf.kind != LeafKind::kIndex) continue;
    const uint8_t* p = s.data() + leaf.offset;
    // Every value of the width is below the bound: nothing to check.
    if (leaf.element_bytes < 8 && leaf.bound >> (8 * leaf.element_bytes) != 0) continue;
    if (MaxIndex(leaf, p, leaf.elements) < leaf.bound) continue;
    for (uint64_t e = 0; e < leaf.elements; ++e, p += leaf.element_bytes) {
      uint64_t v = LoadIndex(p, leaf.element_bytes);
      if (v >= leaf.bound) {
        FailPskd(PskdCode::kBadValue,
                 "sample " + std::to_string(index) + ", leaf " + std::to_string(k) + ", element " + std::to_string(e) +
                     ": " + std::to_string(v) + " is not below " + std::to_string(leaf.bound),
                 name_);
      }
    }
  }
}

void PskdFile::CheckData() const {
  if (type().is_params) return;
  for (uint64_t i = 0; i < count(); ++i) CheckIndices(i);
}

}  // namespace trove::pskd
