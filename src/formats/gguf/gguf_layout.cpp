// The GGUF parser: every primitive goes through one ByteReader (core/byte_reader.h) behind a
// byte-order switch, so nothing here indexes the file's bytes itself.
#include "formats/gguf/gguf_layout.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/byte_reader.h"
#include "trove/error.h"

namespace trove::gguf {
namespace {

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

[[noreturn]] void FailAt(ErrorCode code, uint64_t offset, const std::string& message) {
  Error e(code, message);
  e.SetOffset(offset);
  throw e;
}

// The file's integers in its byte order, through one bounds-checked reader.
class GgufReader {
 public:
  GgufReader(const uint8_t* data, uint64_t size) : r_(data, size) {}
  void set_big_endian(bool big) { big_ = big; }
  void set_version(uint32_t v) { v1_ = v == 1; }

  uint64_t offset() const { return r_.offset(); }
  uint64_t remaining() const { return r_.remaining(); }
  uint8_t U8() { return r_.U8(); }
  uint16_t U16() { const uint16_t v = r_.U16(); return big_ ? __builtin_bswap16(v) : v; }
  uint32_t U32() { const uint32_t v = r_.U32(); return big_ ? __builtin_bswap32(v) : v; }
  uint64_t U64() { const uint64_t v = r_.U64(); return big_ ? __builtin_bswap64(v) : v; }
  // A count or length: u32 in version 1, u64 after.
  uint64_t Count() { return v1_ ? U32() : U64(); }
  uint64_t CountBytes() const { return v1_ ? 4 : 8; }
  std::string_view Bytes(uint64_t n) { return r_.Bytes(n); }
  void Skip(uint64_t n) { r_.Skip(n); }
  // An absolute offset (the reader's base is 0).
  void Seek(uint64_t position) { r_.Seek(position); }

  // A string's length (capped at `cap`, named `what`), then its bytes.
  std::string_view String(std::string_view what, uint64_t cap) {
    const uint64_t at = offset();
    const uint64_t n = Count();
    if (n > cap) {
      FailAt(ErrorCode::kLimit, at, std::string(what) + " length " + Thousands(n) + " exceeds the cap of " + Thousands(cap) + " bytes");
    }
    if (n > remaining()) {
      FailAt(ErrorCode::kCorrupt, at, std::string(what) + " length " + Thousands(n) + " runs past the end of the file (" +
                                          Thousands(remaining()) + " bytes remain)");
    }
    return Bytes(n);
  }

 private:
  ByteReader r_;
  bool big_ = false;
  bool v1_ = false;
};

constexpr uint32_t kDraftStringTag = 8;  // the draft's type tags before keys and names ...
constexpr uint32_t kDraftIntTag = 5;     // ... and before tensor-info integers

uint64_t FixedSize(ValueType t) {
  switch (t) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
    case ValueType::kU16: case ValueType::kI16: return 2;
    case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
    case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: return 8;
    default: return 0;
  }
}

bool KnownType(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::kObject); }
bool IsArrayLike(ValueType t) { return t == ValueType::kArray || t == ValueType::kObject; }

class Parser {
 public:
  Parser(const uint8_t* data, uint64_t size, bool every_item) : in_(data, size), size_(size), every_item_(every_item) {}

  // A field cut short names the field it was reading (the byte reader names the offset).
  GgufLayout Parse() {
    try {
      return ParseFields();
    } catch (Error& e) {
      if (e.code() == ErrorCode::kCorrupt && !e.offset() && field_ != nullptr) {
        std::string where = field_;
        if (!subject_.empty()) where += " of " + std::string(subject_);
        e.AddContext(where);
      }
      throw;
    }
  }

 private:
  GgufLayout ParseFields() {
    GgufLayout g;
    if (size_ < 8) {
      FailAt(ErrorCode::kCorrupt, 0, "a GGUF file of " + std::to_string(size_) + " bytes: the magic and version need 8");
    }
    field_ = "magic";
    g.magic = in_.Bytes(4);
    if (g.magic != "GGUF" && g.magic != "FUGG") {
      if (g.magic == "vers" && in_.Bytes(std::min<uint64_t>(in_.remaining(), 24)).starts_with("ion https://git-lfs")) {
        FailAt(ErrorCode::kCorrupt, 0, "a Git LFS pointer, not the model: its bytes were never fetched (git lfs pull)");
      }
      FailAt(ErrorCode::kCorrupt, 0, "magic is not \"GGUF\"");
    }
    field_ = "version";
    uint32_t version = in_.U32();
    if ((version & 0xFFFF) == 0 && version != 0) {
      g.big_endian = true;
      version = __builtin_bswap32(version);
      in_.set_big_endian(true);
    }
    if (version < 1 || version > 3) {
      FailAt(ErrorCode::kUnsupported, 4, "GGUF version " + std::to_string(version) + " (" + Hex(version) +
                                             "): versions 1 to 3 are known");
    }
    if (g.magic == "FUGG" && version != 1) FailAt(ErrorCode::kCorrupt, 0, "magic \"FUGG\" (only GGUF version 1 wrote it) with version " + std::to_string(version));
    g.version = version;
    in_.set_version(version);
    const uint64_t counts_at = in_.offset();
    field_ = "tensor count";
    const uint64_t n_tensors = in_.Count();
    field_ = "metadata count";
    const uint64_t n_kv = in_.Count();
    g.draft = g.magic == "FUGG" && version == 1 && LooksLikeDraft(n_kv);
    draft_ = g.draft;

    // Counts against the caps and the bytes left, at the smallest size an entry has.
    const uint64_t min_kv = in_.CountBytes() + 1 + 4 + 1;
    const uint64_t min_info = in_.CountBytes() + 1 + 4 + 4 + 8;
    CheckCount("metadata count", counts_at + in_.CountBytes(), n_kv, kMaxMetadataEntries, min_kv);
    CheckCount("tensor count", counts_at, n_tensors, kMaxTensors, min_info);

    // Nothing is reserved from a count: entries take memory only as they are read from the file.
    std::set<std::string_view> keys;
    for (uint64_t k = 0; k < n_kv; ++k) {
      MetadataEntry e;
      e.offset = in_.offset();
      field_ = "key";
      subject_ = {};
      if (draft_) ExpectTag(kDraftStringTag, "key");
      e.key = in_.String("key", kMaxKeyBytes);
      if (e.key.empty()) FailAt(ErrorCode::kCorrupt, e.offset, "metadata entry " + std::to_string(k) + " has an empty key");
      if (!keys.insert(e.key).second) FailAt(ErrorCode::kCorrupt, e.offset, "duplicate key '" + std::string(e.key) + "'");
      const uint64_t type_at = in_.offset();
      subject_ = e.key;
      field_ = "value type";
      const uint32_t type = in_.U32();
      field_ = "value";
      if (!KnownType(type)) {
        FailAt(ErrorCode::kCorrupt, type_at, "key '" + std::string(e.key) + "': value type " + std::to_string(type) + " (known: 0 to 13)");
      }
      e.value = ReadValue(static_cast<ValueType>(type), 0, e.key);
      g.metadata.push_back(std::move(e));
    }

    if (const MetadataEntry* a = g.Find("general.alignment")) {
      if (a->value.type != ValueType::kU32) {
        FailAt(ErrorCode::kCorrupt, a->offset, "general.alignment is a " + std::string(ValueTypeName(a->value.type)) + ", not a u32");
      }
      const uint64_t v = a->value.u;
      if (v == 0 || (v & (v - 1)) != 0 || v > kMaxAlignment) {
        FailAt(ErrorCode::kCorrupt, a->value.offset, "general.alignment " + std::to_string(v) +
                                                         " is not a power of two from 1 to " + Thousands(kMaxAlignment));
      }
      g.alignment = static_cast<uint32_t>(v);
      g.alignment_given = true;
    }

    CheckCount("tensor count", counts_at, n_tensors, kMaxTensors, min_info);  // against what is left now
    std::set<std::string_view> names;
    for (uint64_t t = 0; t < n_tensors; ++t) {
      TensorInfo ti = ReadTensorInfo(t, g.alignment);
      if (!names.insert(ti.name).second) FailAt(ErrorCode::kCorrupt, ti.info_offset, "duplicate tensor name '" + std::string(ti.name) + "'");
      if (draft_) SkipTo(AlignUp(in_.offset(), g.alignment, "tensor info padding"));
      g.tensors.push_back(ti);
    }
    g.infos_end = in_.offset();
    g.data_offset = AlignUp(g.infos_end, g.alignment, "data section start");
    g.data_end = g.data_offset;
    if (g.tensors.empty()) return g;  // a vocabulary-only file may end right after its metadata
    if (g.data_offset > size_) {
      FailAt(ErrorCode::kCorrupt, g.infos_end, "the data section would start at " + std::to_string(g.data_offset) +
                                                   ", past the end of the " + Thousands(size_) + "-byte file");
    }
    const uint64_t data_size = size_ - g.data_offset;
    for (const TensorInfo& ti : g.tensors) {
      uint64_t end = 0;
      if (__builtin_add_overflow(ti.offset, ti.bytes, &end) || end > data_size) {
        FailAt(ErrorCode::kCorrupt, ti.info_offset,
               "tensor '" + std::string(ti.name) + "': its " + Thousands(ti.bytes) + " bytes at data offset " + Thousands(ti.offset) +
                   " lie outside the data section (" + Thousands(data_size) + " bytes, from file offset " + Thousands(g.data_offset) + ")");
      }
      g.data_end = std::max(g.data_end, g.data_offset + end);
    }
    // No two tensors share a byte (zero-size tensors hold none).
    std::vector<const TensorInfo*> by_offset;
    for (const TensorInfo& ti : g.tensors)
      if (ti.bytes > 0) by_offset.push_back(&ti);
    std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const TensorInfo& a = *by_offset[i - 1];
      const TensorInfo& b = *by_offset[i];
      if (a.offset + a.bytes > b.offset) {
        FailAt(ErrorCode::kCorrupt, b.info_offset, "tensor '" + std::string(b.name) + "' (data offset " + Thousands(b.offset) +
                                                       ") overlaps tensor '" + std::string(a.name) + "' (data offset " +
                                                       Thousands(a.offset) + ", " + Thousands(a.bytes) + " bytes)");
      }
    }
    return g;
  }

  // The draft's first key starts with the string tag 8 and then a length (which, unlike eight
  // characters of a key, holds zero bytes).
  bool LooksLikeDraft(uint64_t n_kv) {
    if (n_kv == 0 || in_.remaining() < 8) return false;
    const uint64_t at = in_.offset();
    const uint32_t tag = in_.U32();
    const uint32_t length = in_.U32();
    in_.Seek(at);
    return tag == kDraftStringTag && length < (uint32_t{1} << 24);
  }

  void ExpectTag(uint32_t tag, std::string_view what) {
    const uint64_t at = in_.offset();
    const uint32_t got = in_.U32();
    if (got != tag) {
      FailAt(ErrorCode::kCorrupt, at, "draft GGUF: " + std::string(what) + " has type " + std::to_string(got) + ", " +
                                          std::to_string(tag) + " expected");
    }
  }

  void CheckCount(std::string_view what, uint64_t at, uint64_t n, uint64_t cap, uint64_t min_bytes) {
    if (n > cap) FailAt(ErrorCode::kLimit, at, std::string(what) + " " + Thousands(n) + " exceeds the cap of " + Thousands(cap));
    if (n > in_.remaining() / min_bytes) {
      FailAt(ErrorCode::kCorrupt, at, std::string(what) + " " + Thousands(n) + " cannot fit in the " + Thousands(in_.remaining()) +
                                          " bytes left (each entry takes at least " + std::to_string(min_bytes) + ")");
    }
  }

  uint64_t AlignUp(uint64_t at, uint64_t alignment, std::string_view what) {
    uint64_t up = 0;
    if (__builtin_add_overflow(at, alignment - 1, &up)) FailAt(ErrorCode::kCorrupt, at, std::string(what) + ": padding overflows");
    return up / alignment * alignment;
  }

  void SkipTo(uint64_t position) {
    if (position > size_) FailAt(ErrorCode::kCorrupt, in_.offset(), "padding runs past the end of the file");
    in_.Seek(position);
  }

  MetadataValue ReadValue(ValueType type, uint32_t depth, std::string_view key) {
    MetadataValue v;
    v.type = type;
    v.offset = in_.offset();
    v.key = key;
    switch (type) {
      case ValueType::kU8: v.u = in_.U8(); break;
      case ValueType::kI8: v.i = static_cast<int8_t>(in_.U8()); break;
      case ValueType::kU16: v.u = in_.U16(); break;
      case ValueType::kI16: v.i = static_cast<int16_t>(in_.U16()); break;
      case ValueType::kU32: v.u = in_.U32(); break;
      case ValueType::kI32: v.i = static_cast<int32_t>(in_.U32()); break;
      case ValueType::kU64: v.u = in_.U64(); break;
      case ValueType::kI64: v.i = static_cast<int64_t>(in_.U64()); break;
      case ValueType::kF32: { const uint32_t b = in_.U32(); float f; std::memcpy(&f, &b, 4); v.f = f; break; }
      case ValueType::kF64: { const uint64_t b = in_.U64(); std::memcpy(&v.f, &b, 8); break; }
      case ValueType::kBool:
        v.u = in_.U8();
        if (v.u > 1) FailAt(ErrorCode::kCorrupt, v.offset, "key '" + std::string(key) + "': bool value " + std::to_string(v.u) + " (0 or 1)");
        break;
      case ValueType::kString: v.text = in_.String("key '" + std::string(key) + "': string", kMaxStringBytes); break;
      case ValueType::kArray: ReadArray(v, depth, key); break;
      case ValueType::kObject:
        if (depth > 0) FailAt(ErrorCode::kCorrupt, v.offset, "key '" + std::string(key) + "': an object inside an array, not held by a key");
        ReadArray(v, depth, key);
        break;
    }
    return v;
  }

  void ReadArray(MetadataValue& v, uint32_t depth, std::string_view key) {
    const std::string where = "key '" + std::string(key) + "': array";
    if (depth + 1 > kMaxArrayDepth) {
      FailAt(ErrorCode::kLimit, v.offset, where + " nested deeper than the cap of " + std::to_string(kMaxArrayDepth) + " levels");
    }
    const uint64_t type_at = in_.offset();
    const uint32_t element = in_.U32();
    if (!KnownType(element)) FailAt(ErrorCode::kCorrupt, type_at, where + " of element type " + std::to_string(element) + " (known: 0 to 13)");
    v.element_type = static_cast<ValueType>(element);
    const uint64_t count_at = in_.offset();
    v.count = in_.Count();
    if (v.count > kMaxArrayElements) {
      FailAt(ErrorCode::kLimit, count_at, where + " of " + Thousands(v.count) + " elements exceeds the cap of " + Thousands(kMaxArrayElements));
    }
    const uint64_t fixed = FixedSize(v.element_type);
    // Strings take at least their length field, arrays their type and count.
    const uint64_t min = fixed ? fixed : v.element_type == ValueType::kArray ? 4 + in_.CountBytes() : in_.CountBytes();
    if (v.count > in_.remaining() / min) {
      FailAt(ErrorCode::kCorrupt, count_at, where + " of " + Thousands(v.count) + " " + std::string(ValueTypeName(v.element_type)) +
                                                " elements cannot fit in the " + Thousands(in_.remaining()) + " bytes left");
    }
    // The object experiment kept an array of arrays or objects as keys of their own (".k[0]",
    // ".k[1]", ... after this one): the array holds only its type and count.
    if ((v.element_type == ValueType::kArray || v.element_type == ValueType::kObject) && v.count > 0 &&
        NextKeyIs("." + std::string(key) + "[0]")) {
      v.elements_as_keys = true;
      return;
    }
    const uint64_t kept = every_item_ ? v.count : std::min<uint64_t>(v.count, kKeptArrayItems);
    if (every_item_) {
      whole_items_ += v.count;  // cannot wrap: each count is at most kMaxArrayElements, fitting the file
      if (whole_items_ > kMaxWholeArrayItems) {
        FailAt(ErrorCode::kLimit, count_at, where + ": the metadata's arrays hold more than " + Thousands(kMaxWholeArrayItems) +
                                                " items in all, the cap of a whole read");
      }
    }
    v.items.reserve(kept);
    if (fixed && v.element_type != ValueType::kBool) {
      for (uint64_t i = 0; i < kept; ++i) v.items.push_back(ReadValue(v.element_type, depth + 1, key));
      in_.Skip((v.count - kept) * fixed);  // fits: checked against the bytes left above
      return;
    }
    for (uint64_t i = 0; i < v.count; ++i) {
      MetadataValue item = ReadValue(v.element_type, depth + 1, key);
      if (i < kept) v.items.push_back(std::move(item));
    }
  }

  bool NextKeyIs(const std::string& name) {
    if (in_.remaining() < in_.CountBytes() + name.size()) return false;
    const uint64_t at = in_.offset();
    const uint64_t n = in_.Count();
    const bool same = n == name.size() && in_.Bytes(n) == name;
    in_.Seek(at);
    return same;
  }

  uint64_t TensorInt(bool wide) {
    if (draft_) ExpectTag(kDraftIntTag, "tensor info field");
    return wide ? in_.U64() : in_.U32();
  }

  TensorInfo ReadTensorInfo(uint64_t index, uint32_t alignment) {
    TensorInfo ti;
    ti.info_offset = in_.offset();
    field_ = "tensor name";
    subject_ = {};
    if (draft_) ExpectTag(kDraftStringTag, "tensor name");
    ti.name = in_.String("tensor " + std::to_string(index) + " name", kMaxTensorNameBytes);
    const std::string who = "tensor '" + std::string(ti.name) + "'";
    subject_ = ti.name;
    field_ = "n_dims";
    const uint64_t dims_at = in_.offset();
    ti.n_dims = static_cast<uint32_t>(TensorInt(false));
    if (ti.n_dims > kMaxDims) {
      FailAt(ErrorCode::kCorrupt, dims_at, who + ": n_dims " + std::to_string(ti.n_dims) + " exceeds " + std::to_string(kMaxDims) + " (GGML_MAX_DIMS)");
    }
    const bool wide = version_wide();
    for (uint32_t d = 0; d < ti.n_dims; ++d) {
      field_ = "ne";
      const uint64_t at = in_.offset();
      ti.ne[d] = TensorInt(wide);
      if (ti.ne[d] > static_cast<uint64_t>(INT64_MAX)) {
        FailAt(ErrorCode::kCorrupt, at, who + ": ne[" + std::to_string(d) + "] = " + std::to_string(ti.ne[d]) + " is negative as ggml's int64");
      }
    }
    field_ = "ggml type";
    const uint64_t type_at = in_.offset();
    const uint32_t type = static_cast<uint32_t>(TensorInt(false));
    ti.type = FindGgmlType(type);
    if (ti.type == nullptr) FailAt(ErrorCode::kUnsupported, type_at, who + ": ggml type " + std::to_string(type) + " is not one ggml reads");
    field_ = "data offset";
    const uint64_t offset_at = in_.offset();
    ti.offset = in_.U64();
    // Values and bytes, every product checked against int64 (ggml's sizes); a dimension of 0 is
    // accepted (an empty tensor), as ggml accepts it. The product counts a 0 as 1, as the view's
    // strides do (torch's and numpy's count): [0, 2^40, 2^40, 0] holds no value but has no view.
    uint64_t span = 1;
    bool empty = false;
    for (uint32_t d = 0; d < kMaxDims; ++d) {
      empty = empty || ti.ne[d] == 0;
      if (__builtin_mul_overflow(span, std::max<uint64_t>(ti.ne[d], 1), &span) || span > static_cast<uint64_t>(INT64_MAX)) {
        FailAt(ErrorCode::kCorrupt, dims_at, who + ": the product of its dimensions overflows int64 (a 0 counted as 1)");
      }
    }
    ti.values = empty ? 0 : span;
    if (ti.ne[0] % ti.type->block_values() != 0) {
      FailAt(ErrorCode::kCorrupt, dims_at, who + ": ne[0] = " + std::to_string(ti.ne[0]) + " is not a multiple of " +
                                               std::string(ti.type->name) + "'s block of " + std::to_string(ti.type->block_values()) + " values");
    }
    uint64_t bytes = ti.ne[0] / ti.type->block_values();
    if (__builtin_mul_overflow(bytes, ti.type->block_bytes(), &bytes)) FailAt(ErrorCode::kCorrupt, dims_at, who + ": its byte count overflows");
    for (uint32_t d = 1; d < kMaxDims; ++d) {
      if (__builtin_mul_overflow(bytes, ti.ne[d], &bytes) || bytes > static_cast<uint64_t>(INT64_MAX)) {
        FailAt(ErrorCode::kCorrupt, dims_at, who + ": its byte count overflows int64");
      }
    }
    ti.bytes = bytes;
    if (ti.offset % alignment != 0) {
      FailAt(ErrorCode::kCorrupt, offset_at, who + ": data offset " + Thousands(ti.offset) + " is not a multiple of the alignment " +
                                                 std::to_string(alignment));
    }
    return ti;
  }

  bool version_wide() const { return in_.CountBytes() == 8; }

  GgufReader in_;
  uint64_t size_;
  bool every_item_ = false;
  uint64_t whole_items_ = 0;  // array items kept so far (every_item_)
  bool draft_ = false;
  const char* field_ = nullptr;  // what is being read, for a truncation's error
  std::string_view subject_;     // the key or tensor it belongs to
};

std::string NumberText(double f) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", f);
  return buf;
}

}  // namespace

std::string_view ValueTypeName(ValueType type) {
  static constexpr std::string_view kNames[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64", "object"};
  const auto i = static_cast<uint32_t>(type);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

const MetadataEntry* GgufLayout::Find(std::string_view key) const {
  for (const MetadataEntry& e : metadata)
    if (e.key == key) return &e;
  return nullptr;
}

bool LooksLikeGguf(std::string_view head) {
  if (head.starts_with("GGUF")) return true;
  // GGUF v1's "FUGG" (its magic written as a little-endian integer).
  return head.size() >= 8 && head.starts_with("FUGG") && head.substr(4, 4) == std::string_view("\x01\x00\x00\x00", 4);
}

GgufLayout ParseGguf(const uint8_t* data, uint64_t size, bool every_item) { return Parser(data, size, every_item).Parse(); }

std::string Thousands(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}


std::string ValueText(const MetadataValue& v) {
  switch (v.type) {
    case ValueType::kU8: case ValueType::kU16: case ValueType::kU32: case ValueType::kU64: return std::to_string(v.u);
    case ValueType::kI8: case ValueType::kI16: case ValueType::kI32: case ValueType::kI64: return std::to_string(v.i);
    case ValueType::kF32: case ValueType::kF64: return NumberText(v.f);
    case ValueType::kBool: return v.u ? "true" : "false";
    case ValueType::kString: return std::string(v.text);
    case ValueType::kArray: break;
    case ValueType::kObject: {
      MetadataValue members = v;
      members.type = ValueType::kArray;
      return "object " + ValueText(members);
    }
  }
  if (v.elements_as_keys) {
    return Thousands(v.count) + (v.element_type == ValueType::kObject ? " objects" : " arrays") + " held as keys ." +
           std::string(v.key) + "[i]";
  }
  if (v.count > kShownArrayItems) {
    std::string kind = v.element_type == ValueType::kString ? "strings" : IsArrayLike(v.element_type) ? "arrays" :
                                                                          std::string(ValueTypeName(v.element_type)) + " values";
    return Thousands(v.count) + " " + kind;
  }
  std::string out = "[";
  for (size_t i = 0; i < v.items.size(); ++i) {
    if (i) out += ", ";
    out += v.items[i].type == ValueType::kString ? "\"" + std::string(v.items[i].text) + "\"" : ValueText(v.items[i]);
  }
  return out + "]";
}

}  // namespace trove::gguf
