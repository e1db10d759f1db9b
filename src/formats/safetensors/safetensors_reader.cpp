// Reading .safetensors: the header is parsed with a SAX handler (no JSON tree is built, duplicate
// names and unexpected structure are caught as they are met), then the layout is checked whole
// before any view is made.
#include <algorithm>
#include <cstring>
#include <optional>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/count_text.h"
#include "core/little_endian.h"
#include "formats/safetensors/safetensors_dtypes.h"
#include "trove/error.h"
#include "trove/safetensors.h"
#include "formats/safetensors/safetensors_reader.h"

namespace trove {
namespace {

// One tensor as the header declares it, kept compact: a header may name a million of them
// (docs/security.md gives the bytes per tensor).
struct TensorEntry {
  std::string name;
  const SafetensorsDType* dtype = nullptr;  // known once parsed (an unknown name is refused)
  std::vector<uint64_t> shape;
  uint64_t offsets[2] = {0, 0};
  uint8_t offset_count = 0;
  bool has_dtype = false, has_shape = false, has_offsets = false;
};

// Depth 0: the header object; 1: a tensor's object or __metadata__; 2: shape/data_offsets arrays.
class HeaderHandler : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::vector<TensorEntry> tensors;
  std::vector<std::pair<std::string, std::string>> metadata;

  bool null() override {
    if (depth_ == 1 && top_key_ == "__metadata__") return true;  // the reference reads null as "none"
    return Unexpected("null");
  }
  bool boolean(bool) override { return Unexpected("a boolean"); }
  bool number_integer(number_integer_t v) override {
    if (v >= 0) return number_unsigned(static_cast<uint64_t>(v));
    return Unexpected("a negative number");
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (depth_ != 3 || in_metadata_) return Unexpected("a number");
    if (field_ == "data_offsets") {
      if (current_.offset_count >= 2) Fail(ErrorCode::kCorrupt, Where() + "data_offsets has more than 2 numbers");
      current_.offsets[current_.offset_count++] = v;
      return true;
    }
    if (current_.shape.size() >= kMaxTensorRank) {
      Fail(ErrorCode::kLimit, Where() + "more than " + std::to_string(kMaxTensorRank) + " dimensions (kMaxTensorRank)");
    }
    current_.shape.push_back(v);
    return true;
  }
  bool number_float(number_float_t, const string_t&) override { return Unexpected("a fractional number"); }
  bool string(string_t& s) override {
    if (depth_ == 2 && in_metadata_) {
      metadata.emplace_back(field_, s);
      return true;
    }
    if (depth_ == 2 && field_ == "dtype") {
      current_.dtype = SafetensorsDTypeByName(s);
      if (current_.dtype == nullptr) Fail(ErrorCode::kCorrupt, Where() + "unknown dtype '" + s + "'");
      current_.has_dtype = true;
      return true;
    }
    return Unexpected("a string");
  }
  bool binary(binary_t&) override { return Unexpected("binary data"); }
  bool start_object(std::size_t) override {
    if (depth_ == 0) {
      ++depth_;
      return true;
    }
    if (depth_ != 1) return Unexpected("an object");
    ++depth_;
    keys_.clear();
    in_metadata_ = top_key_ == "__metadata__";
    if (!in_metadata_) {
      current_ = TensorEntry{};
      current_.name = top_key_;
    }
    return true;
  }
  bool end_object() override {
    --depth_;
    if (depth_ == 1 && !in_metadata_) {
      if (!current_.has_dtype || !current_.has_shape || !current_.has_offsets) {
        Fail(ErrorCode::kCorrupt, Where() + "needs dtype, shape and data_offsets");
      }
      tensors.push_back(std::move(current_));
    }
    in_metadata_ = false;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ != 2 || in_metadata_ || (field_ != "shape" && field_ != "data_offsets")) return Unexpected("an array");
    (field_ == "shape" ? current_.has_shape : current_.has_offsets) = true;
    ++depth_;
    return true;
  }
  bool end_array() override {
    --depth_;
    if (field_ == "data_offsets" && current_.offset_count != 2) {
      Fail(ErrorCode::kCorrupt, Where() + "data_offsets must be two numbers [begin, end]");
    }
    return true;
  }
  bool key(string_t& k) override {
    if (depth_ == 1) {
      // A name given twice is found once the parse is done (ReadSafetensorsParts sorts them):
      // a set of every name here would hold each name once more.
      if (k == "__metadata__" && seen_metadata_) Fail(ErrorCode::kCorrupt, "header: the name '" + k + "' appears twice");
      seen_metadata_ |= k == "__metadata__";
      top_key_ = k;
      return true;
    }
    if (!keys_.insert(k).second) Fail(ErrorCode::kCorrupt, Where() + "the field '" + k + "' appears twice");
    if (!in_metadata_ && k != "dtype" && k != "shape" && k != "data_offsets") {
      Fail(ErrorCode::kCorrupt, Where() + "unknown field '" + k + "'");
    }
    field_ = k;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    std::string what = e.what();
    // nlohmann's messages start with "[json.exception.parse_error.101] parse error at line 1, ...".
    if (size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    Fail(ErrorCode::kCorrupt, "header @ " + std::to_string(8 + (position > 0 ? position - 1 : 0)) + ": not valid JSON: " + what);
  }

 private:
  std::string Where() const {
    if (in_metadata_) return "header: __metadata__: ";
    return "header: tensor '" + (depth_ >= 2 ? current_.name : top_key_) + "': ";
  }
  bool Unexpected(const std::string& what) {
    if (depth_ == 0) Fail(ErrorCode::kCorrupt, "header: not a JSON object (found " + what + ")");
    if (depth_ == 1 && top_key_ == "__metadata__") Fail(ErrorCode::kCorrupt, "header: __metadata__ is " + what + ", not an object of strings");
    if (depth_ == 1) Fail(ErrorCode::kCorrupt, "header: tensor '" + top_key_ + "': " + what + " where its {dtype, shape, data_offsets} object belongs");
    if (in_metadata_) Fail(ErrorCode::kCorrupt, Where() + "the value of '" + field_ + "' is " + what + ", not a string");
    Fail(ErrorCode::kCorrupt, Where() + "'" + field_ + "' holds " + what + " where none belongs");
  }

  int depth_ = 0;
  bool in_metadata_ = false;
  std::string top_key_, field_;
  bool seen_metadata_ = false;
  std::unordered_set<std::string> keys_;  // the fields of one tensor or of __metadata__
  TensorEntry current_;
};

std::string Quote(const std::string& name) { return "tensor '" + name + "'"; }

// What the reference (the safetensors crate, whose header is serde_json's from_str of the
// header bytes) refuses and nlohmann's parser would let through: a NUL byte anywhere (nlohmann
// stops reading at one, so NUL padding, or more JSON after a NUL, was never seen; the reference
// pads with spaces and, as for any JSON, allows only spaces, tabs and line breaks after the
// object), and the integer `-0` (serde_json reads it as the float -0.0, which no shape or
// offset takes; nlohmann as the integer 0). Other negative numbers the parse refuses by name.
void CheckHeaderBytes(const char* header, uint64_t n) {
  bool in_string = false, escaped = false;
  for (uint64_t i = 0; i < n; ++i) {
    const char c = header[i];
    if (c == '\0') {
      Fail(ErrorCode::kCorrupt, "header @ " + std::to_string(8 + i) +
                                    ": a NUL byte (not JSON: padding after the object may only be spaces)");
    }
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '-' && i + 1 < n && header[i + 1] == '0' &&
               (i + 2 == n || (header[i + 2] != '.' && header[i + 2] != 'e' && header[i + 2] != 'E'))) {
      Fail(ErrorCode::kCorrupt, "header @ " + std::to_string(8 + i) +
                                    ": '-0', a negative number (the reference reads it as the float -0.0)");
    }
  }
}

}  // namespace

bool LooksLikeSafetensors(std::string_view head, uint64_t file_size) {
  if (head.size() < 9 || file_size < 10) return false;
  const uint64_t n = LoadLe64(reinterpret_cast<const uint8_t*>(head.data()));
  return n >= 2 && n <= kMaxSafetensorsHeaderBytes && n <= file_size - 8 && head[8] == '{';
}

uint64_t SafetensorsHeaderLength(const uint8_t* first8, uint64_t file_size) {
  if (file_size < 8) Fail(ErrorCode::kCorrupt, "too short for a safetensors header length (" + std::to_string(file_size) + " bytes)");
  const uint64_t n = LoadLe64(first8);
  if (n > kMaxSafetensorsHeaderBytes) {
    Fail(ErrorCode::kLimit, "header length " + std::to_string(n) + " exceeds the " + std::to_string(kMaxSafetensorsHeaderBytes) +
                                "-byte cap (kMaxSafetensorsHeaderBytes)");
  }
  if (n > file_size - 8) {
    Fail(ErrorCode::kCorrupt, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(file_size) + " bytes)");
  }
  return n;
}

Document ReadSafetensors(std::shared_ptr<MappedFile> file, const ReadOptions& options) {
  return ReadSafetensorsParts(file->path(), file->size(), file->data(), file->bytes(), options);
}

Document ReadSafetensorsParts(const std::string& path, uint64_t size, const uint8_t* prefix, const SharedBytes& whole,
                              const ReadOptions& /*options*/) {
  const uint64_t n = SafetensorsHeaderLength(prefix, size);
  const char* header = reinterpret_cast<const char*>(prefix + 8);
  if (n == 0 || header[0] != '{') Fail(ErrorCode::kCorrupt, "header @ 8: does not start with '{'");
  CheckHeaderBytes(header, n);
  HeaderHandler handler;
  // Room for as many tensors as the header can hold (the shortest entry, `"a":{"dtype":"U8",
  // "shape":[],"data_offsets":[0,0]}`, is 49 bytes), reserved once: pages never filled are never
  // resident, and the vector is not copied as it grows (which held it twice at the peak).
  handler.tensors.reserve(static_cast<size_t>(n / 49));
  nlohmann::json::sax_parse(header, header + n, &handler, nlohmann::json::input_format_t::json, /*strict=*/true);

  // No name twice (a JSON parser keeps the last one silently: a second tensor of the same name
  // could hide), found in name order.
  std::vector<uint32_t> order(handler.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<uint32_t>(i);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return handler.tensors[a].name < handler.tensors[b].name; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (handler.tensors[order[i]].name == handler.tensors[order[i - 1]].name) {
      Fail(ErrorCode::kCorrupt, "header: the name '" + handler.tensors[order[i]].name + "' appears twice");
    }
  }
  // Layout: sorted by offsets, the tensors must tile the data section exactly.
  const uint64_t data_start = 8 + n, data_size = size - data_start;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const TensorEntry &x = handler.tensors[a], &y = handler.tensors[b];
    return std::pair(x.offsets[0], x.offsets[1]) < std::pair(y.offsets[0], y.offsets[1]);
  });
  // A download cut short: the header describes more data than the file holds. Said in the
  // user's terms (how much of the file is there) before any one tensor's offsets are blamed.
  {
    uint64_t described = 0;
    const TensorEntry* cut = nullptr;
    for (uint32_t i : order) {
      const TensorEntry& t = handler.tensors[i];
      if (t.offsets[1] >= t.offsets[0] && t.offsets[1] > described) described = t.offsets[1];
      if (cut == nullptr && t.offsets[1] > data_size && t.offsets[1] >= t.offsets[0]) cut = &t;
    }
    // Only a plausible file (its tensors tile the described data) is called truncated; other
    // offsets past the end are the header's fault, reported per tensor below.
    if (cut != nullptr && described <= (uint64_t{1} << 56)) {
      uint64_t tiled = 0;
      bool tiles = true;
      for (uint32_t i : order) {
        const TensorEntry& t = handler.tensors[i];
        if (t.offsets[0] != tiled || t.offsets[1] < t.offsets[0]) {
          tiles = false;
          break;
        }
        tiled = t.offsets[1];
      }
      if (tiles) {
        const uint64_t described_end = data_start + described;
        Fail(ErrorCode::kCorrupt, "the file is truncated: " + HumanBytes(size) + " of the " + HumanBytes(described_end) +
                                      " its header describes (" + Thousands(size) + " of " + Thousands(described_end) +
                                      " bytes; " + Quote(cut->name) + " and the tensors after it are cut or missing)");
      }
    }
  }
  uint64_t expected_begin = 0;
  const TensorEntry* previous = nullptr;
  for (uint32_t i : order) {
    TensorEntry& t = handler.tensors[i];
    const uint64_t begin = t.offsets[0], end = t.offsets[1];
    const std::string who = Quote(t.name);
    if (end < begin) Fail(ErrorCode::kCorrupt, who + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] end before they begin");
    if (end > data_size) {
      Fail(ErrorCode::kCorrupt, who + ": data_offsets end at " + std::to_string(end) + ", past the " + std::to_string(data_size) + "-byte data section");
    }
    if (begin > expected_begin) {
      Fail(ErrorCode::kCorrupt, who + ": a hole of " + std::to_string(begin - expected_begin) + " bytes before it (data_offsets begin at " +
                                    std::to_string(begin) + ", the previous tensor ends at " + std::to_string(expected_begin) + ")");
    }
    if (begin < expected_begin) {
      Fail(ErrorCode::kCorrupt, who + ": overlaps " + (previous ? Quote(previous->name) : std::string("another tensor")) +
                                    " (begins at " + std::to_string(begin) + ", before " + std::to_string(expected_begin) + ")");
    }
    const SafetensorsDType* st = t.dtype;
    const std::string dtype_name(st->name);
    uint64_t elements = 1;
    for (uint64_t d : t.shape) {
      if (d > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(elements, d, &elements)) {
        Fail(ErrorCode::kCorrupt, who + ": the shape's element count overflows 64 bits");
      }
    }
    uint64_t bits = 0;
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(st->bits), &bits)) Fail(ErrorCode::kCorrupt, who + ": byte size overflows 64 bits");
    if (bits % 8 != 0) Fail(ErrorCode::kCorrupt, who + ": " + std::to_string(elements) + " " + dtype_name + " elements are not a whole number of bytes");
    if (bits / 8 != end - begin) {
      Fail(ErrorCode::kCorrupt, who + ": " + dtype_name + " " + ShapeString(std::vector<int64_t>(t.shape.begin(), t.shape.end())) + " needs " +
                                    std::to_string(bits / 8) + " bytes, data_offsets give " + std::to_string(end - begin));
    }
    if (!st->dtype) Fail(ErrorCode::kUnsupported, who + ": dtype " + dtype_name + " has no trove type (no 6-bit floats)");
    if (st->bits == 4) {
      // F4 counts 4-bit values; trove (like torch) counts bytes of two: halve the last dimension.
      if (t.shape.empty() || t.shape.back() % 2 != 0) Fail(ErrorCode::kUnsupported, who + ": F4 needs an even last dimension to be read as float4_e2m1fn_x2");
      t.shape.back() /= 2;
    }
    expected_begin = end;
    previous = &t;
  }
  if (expected_begin != data_size) {
    Fail(ErrorCode::kCorrupt, std::to_string(data_size - expected_begin) + " bytes after the last tensor (@ " +
                                  std::to_string(data_start + expected_begin) + ") belong to no tensor");
  }

  Document doc;
  doc.format = "safetensors";
  doc.path = path;
  doc.file_size = size;
  Value* root = doc.arena->Dict("dict");
  const SharedBytes data = whole.Slice(data_start, data_size);
  int64_t index = 0;
  for (uint32_t i : order) {
    TensorEntry& t = handler.tensors[i];
    TensorView view;
    view.dtype = *t.dtype->dtype;  // checked above
    view.shape.assign(t.shape.begin(), t.shape.end());  // each below 2^63, checked above
    std::vector<uint64_t>().swap(t.shape);
    view.storage = data.Slice(t.offsets[0], t.offsets[1] - t.offsets[0]);
    view.storage_index = index++;
    view.storage_key = t.name;
    WithContext(Quote(t.name), [&] {
      view.strides = ContiguousStrides(view.shape);
      view.Validate();
    });
    root->entries.emplace_back(doc.arena->Str(std::move(t.name)), doc.arena->Tensor(std::move(view)));
  }
  doc.root = root;
  doc.tensors = CollectTensors(root);
  doc.properties.emplace_back("tensors", PropertyValue::Integer(static_cast<int64_t>(handler.tensors.size())));
  doc.properties.emplace_back("header bytes", PropertyValue::Integer(static_cast<int64_t>(n)));
  std::sort(handler.metadata.begin(), handler.metadata.end());
  for (auto& [k, v] : handler.metadata) doc.properties.emplace_back("metadata." + k, v);
  ContainerRecord head;
  head.name = "header";
  head.size = head.stored_size = data_start;
  head.method = "stored";
  ContainerRecord body;
  body.name = "data";
  body.offset = data_start;
  body.size = body.stored_size = data_size;
  body.method = "stored";
  doc.records = {head, body};
  return doc;
}

}  // namespace trove
