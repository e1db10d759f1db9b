// Writing .safetensors as the reference implementation does: tensors sorted by its dtype order
// (descending) then by name, header JSON compact with "__metadata__" first and each tensor's
// fields in dtype, shape, data_offsets order, padded with spaces to a multiple of 8 (and, for
// large stored tensors, on to the offset within a page their source has: PageMatchingPadding).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "core/cast_pipeline.h"
#include "core/little_endian.h"
#include "core/progress.h"
#include "formats/safetensors/safetensors_dtypes.h"
#include "formats/tensor_only_values.h"
#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/safetensors.h"

namespace trove {
namespace {

// Names and metadata are UTF-8 in the header JSON; anything else would not parse back.
bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

// A JSON string as serde_json writes it: short escapes for " \ \b \f \n \r \t, \u00xx (lowercase)
// for the other control characters, everything else (DEL, non-ASCII) as is.
void AppendJsonString(std::string& out, std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

struct Planned {
  std::string name;
  const TensorView* view;
  const SafetensorsDType* dtype;
  std::vector<int64_t> shape;  // as the header counts elements (F4: last dimension doubled)
  uint64_t begin = 0, end = 0;
};

// Bytes of stored tensors below which the header keeps the reference's padding (to a multiple of
// 8, so that the file is the reference's byte for byte): the copies are then too short for the
// alignment below to show.
constexpr uint64_t kPageMatchMinBytes = uint64_t{16} << 20;

// Spaces to add to the header (a multiple of 8, less than a page) so that the stored tensors the
// kernel copies from a mapped source (copy_file_range) land at the same offset within a page as
// they have in their file, with `data_start` the data section's offset before them. The kernel
// copies page cache to page cache: a range whose source and destination offsets differ within a
// page has every page assembled from two, some 1.5 times the kernel's time of a copy at equal
// offsets (docs/performance.md). Tensors are contiguous in safetensors, so one shift serves them
// all when their sources are contiguous too; otherwise the shift that serves the most bytes.
uint64_t PageMatchingPadding(const std::vector<Planned>& plan, uint64_t data_start) {
  static const uint64_t page = [] {
    const long size = ::sysconf(_SC_PAGESIZE);
    return size > 0 ? static_cast<uint64_t>(size) : uint64_t{4096};
  }();
  std::map<uint64_t, uint64_t> bytes_at;  // wanted data_start within a page -> stored bytes served
  for (const Planned& p : plan) {
    const std::optional<SharedBytes> stored = p.view->StoredBytes();
    if (!stored || stored->deferred() || !stored->mapped()) continue;
    // A mapping starts at a page boundary of its file: the address's offset within a page is
    // the file offset's.
    const uint64_t in_page = (reinterpret_cast<uintptr_t>(stored->data()) - p.begin) % page;
    if (in_page % 8 == 0) bytes_at[in_page] += stored->size();
  }
  uint64_t best = 0, best_bytes = 0;
  for (const auto& [in_page, bytes] : bytes_at) {
    if (bytes > best_bytes) best = in_page, best_bytes = bytes;
  }
  if (best_bytes < kPageMatchMinBytes) return 0;
  return (best + page - data_start % page) % page;
}

}  // namespace

void WriteSafetensors(const Document& doc, const std::string& path, const SafetensorsWriteOptions& options) {
  auto note = [&](const std::string& text) {
    if (options.note) options.note(text);
  };
  RefuseOrDropValues(doc, "safetensors", options);

  std::vector<Planned> plan;
  std::set<std::string> names;
  std::map<std::pair<const void*, int64_t>, std::vector<std::string>> sharing;
  for (const NamedTensor& t : doc.tensors) {
    const std::string name = FlatName(t.key);
    const TensorView* v = t.view;
    const std::string who = "'" + t.key + "'";
    if (!v->has_data) Fail(ErrorCode::kUnsupported, who + ": a meta tensor (shape only) cannot be written to safetensors");
    const SafetensorsDType* st = SafetensorsDTypeOf(v->dtype);
    if (!st) Fail(ErrorCode::kUnsupported, who + ": safetensors has no dtype for " + std::string(Name(v->dtype)));
    if (!IsValidUtf8(name)) Fail(ErrorCode::kUnsupported, who + ": the name is not UTF-8");
    if (name == "__metadata__") Fail(ErrorCode::kUnsupported, who + ": '__metadata__' is reserved in safetensors headers");
    if (!names.insert(name).second) Fail(ErrorCode::kUnsupported, who + ": a second tensor named '" + name + "'");
    Planned p{name, v, st, v->shape};
    if (st->bits == 4) {
      if (p.shape.empty()) Fail(ErrorCode::kUnsupported, who + ": a 0-d float4_e2m1fn_x2 tensor has no safetensors shape");
      if (__builtin_mul_overflow(p.shape.back(), int64_t{2}, &p.shape.back())) Fail(ErrorCode::kUnsupported, who + ": shape overflows");
    }
    if (v->storage_index >= 0 && !v->cast_source) sharing[{v->storage.owner().get(), v->storage_index}].push_back(name);
    plan.push_back(std::move(p));
  }
  for (const auto& [storage, shared] : sharing) {
    if (shared.size() > 1) {
      note(std::to_string(shared.size()) + " tensors share one storage in the source and are written separately: " + ListedKeys(shared));
    }
  }
  std::sort(plan.begin(), plan.end(), [](const Planned& a, const Planned& b) {
    if (a.dtype->rank != b.dtype->rank) return a.dtype->rank > b.dtype->rank;
    return a.name < b.name;
  });

  std::string header = "{";
  std::vector<std::pair<std::string, std::string>> metadata = options.metadata;
  if (!metadata.empty()) {
    // The reference keeps metadata in a hash map (no order); sorted keys make the output reproducible.
    std::sort(metadata.begin(), metadata.end());
    for (size_t i = 1; i < metadata.size(); ++i)
      if (metadata[i].first == metadata[i - 1].first) Fail(ErrorCode::kUsage, "metadata key '" + metadata[i].first + "' given twice");
    header += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      if (!IsValidUtf8(metadata[i].first) || !IsValidUtf8(metadata[i].second)) Fail(ErrorCode::kUsage, "metadata must be UTF-8");
      if (i) header += ',';
      AppendJsonString(header, metadata[i].first);
      header += ':';
      AppendJsonString(header, metadata[i].second);
    }
    header += '}';
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    Planned& p = plan[i];
    p.begin = offset;
    if (__builtin_add_overflow(offset, p.view->nbytes(), &offset)) Fail(ErrorCode::kLimit, "'" + p.name + "': total size overflows");
    p.end = offset;
    if (i || !metadata.empty()) header += ',';
    AppendJsonString(header, p.name);
    header += ":{\"dtype\":\"";
    header += p.dtype->name;
    header += "\",\"shape\":[";
    for (size_t d = 0; d < p.shape.size(); ++d) header += (d ? "," : "") + std::to_string(p.shape[d]);
    header += "],\"data_offsets\":[" + std::to_string(p.begin) + "," + std::to_string(p.end) + "]}";
    if (header.size() > kMaxSafetensorsHeaderBytes) {
      Fail(ErrorCode::kLimit, "the header would exceed " + std::to_string(kMaxSafetensorsHeaderBytes) + " bytes (kMaxSafetensorsHeaderBytes)");
    }
  }
  header += '}';
  header.resize((header.size() + 7) / 8 * 8, ' ');
  if (const uint64_t padding = PageMatchingPadding(plan, 8 + header.size()); header.size() + padding <= kMaxSafetensorsHeaderBytes) {
    header.resize(header.size() + padding, ' ');
  }
  if (header.size() > kMaxSafetensorsHeaderBytes) {
    Fail(ErrorCode::kLimit, "the header would exceed " + std::to_string(kMaxSafetensorsHeaderBytes) + " bytes (kMaxSafetensorsHeaderBytes)");
  }

  AtomicFile file(path, options.durability);
  uint8_t length[8];
  const uint64_t n = header.size();
  StoreLe(length, n, 8);
  file.Write(length, 8);
  file.Write(header.data(), header.size());
  ProgressReporter progress(options.progress, offset);
  const auto write = [&](const uint8_t* data, size_t size) {
    file.Write(data, size);
    progress.Add(size);
  };
  // In order; casts are converted on every thread while the tensors before them are written
  // (core/cast_pipeline.h).
  std::vector<OrderedWrite> writes(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    if (std::optional<SharedBytes> stored = plan[i].view->StoredBytes()) {
      // Run by run: large mapped ranges (a tensor's, or each of an assembled tensor's pieces) are
      // copied by the kernel; deferred bytes (a compressed .tdz leaf) are inflated window by window.
      writes[i].body = [&write, stored = std::move(*stored)] { stored.ForEachRun(write); };
    } else {  // gathered, swapped or cast window by window
      writes[i].view = plan[i].view;
    }
  }
  RunOrderedWrites(writes, write);
  progress.Finish();
  file.Commit();
}

}  // namespace trove
