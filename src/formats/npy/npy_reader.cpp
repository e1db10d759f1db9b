// Reading .npy files and .npz archives: only the header is parsed; the array is a view of the
// mapping (an .npy file, a stored member) or of the member's deferred bytes (a deflated member,
// inflated when its values are read, window by window).
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "core/utf8.h"
#include "formats/npy/npy_format.h"
#include "formats/npy/npy_header.h"
#include "trove/error.h"
#include "trove/unpickler.h"
#include "trove/zip_reader.h"

namespace trove {
namespace {

constexpr std::string_view kNpySuffix = ".npy";


// A string array as numpy gives its items: str ('U', UCS-4) or bytes ('S'), trailing NULs
// stripped; a 0-d array is its one item, others nested lists. Reads (for a deflated member:
// inflates) the data, within kMaxNpyTextBytes and kMaxNpyTextElements.
Value* TextValue(const NpyHeader& h, const SharedBytes& data, ValueArena& arena) {
  uint64_t nodes = 1, level = 1;  // list nodes and items of every level, saturating
  for (int64_t d : h.shape) {
    if (__builtin_mul_overflow(level, static_cast<uint64_t>(d), &level)) level = UINT64_MAX;
    if (__builtin_add_overflow(nodes, level, &nodes)) nodes = UINT64_MAX;
  }
  if (nodes > kMaxNpyTextElements) {
    Fail(ErrorCode::kLimit, "string array " + h.descr + " " + ShapeString(h.shape) + ": more than " +
                                std::to_string(kMaxNpyTextElements) + " values (kMaxNpyTextElements)");
  }
  if (h.data_bytes > kMaxNpyTextBytes) {
    Fail(ErrorCode::kLimit, "string array " + h.descr + " of " + std::to_string(h.data_bytes) + " bytes: more than " +
                                std::to_string(kMaxNpyTextBytes) + " (kMaxNpyTextBytes)");
  }
  const uint8_t* base = data.data();
  const size_t rank = h.shape.size();
  std::vector<uint64_t> file_strides(rank, 1);  // in items, as the file lays them out
  if (h.fortran_order) {
    for (size_t d = 1; d < rank; ++d) file_strides[d] = file_strides[d - 1] * std::max<uint64_t>(h.shape[d - 1], 1);
  } else {
    for (size_t d = rank; d-- > 1;) file_strides[d - 1] = file_strides[d] * std::max<uint64_t>(h.shape[d], 1);
  }
  auto item = [&](uint64_t index) -> Value* {
    const uint8_t* p = base + index * h.item_bytes;
    if (h.kind == NpyKind::kBytes) {
      uint64_t n = h.item_bytes;
      while (n > 0 && p[n - 1] == 0) --n;
      return arena.Bytes(std::string(reinterpret_cast<const char*>(p), n));
    }
    uint64_t n = h.item_bytes / 4;
    auto unit = [&](uint64_t i) {
      const uint8_t* u = p + i * 4;
      return h.byte_order == ByteOrder::kBig ? (uint32_t{u[0]} << 24 | uint32_t{u[1]} << 16 | uint32_t{u[2]} << 8 | u[3])
                                              : (uint32_t{u[3]} << 24 | uint32_t{u[2]} << 16 | uint32_t{u[1]} << 8 | u[0]);
    };
    while (n > 0 && unit(n - 1) == 0) --n;
    std::string text;
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t cp = unit(i);
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        Fail(ErrorCode::kUnsupported, "string array " + h.descr + ": item " + std::to_string(index) + " holds code point " +
                                          std::to_string(cp) + ", not a Unicode scalar value trove's text can hold");
      }
      utf8::Append(text, cp);
    }
    return arena.Str(std::move(text));
  };
  // Depth is the rank (at most kMaxTensorRank); the calls are bounded by `nodes`.
  std::function<Value*(size_t, uint64_t)> build = [&](size_t d, uint64_t index) -> Value* {
    if (d == rank) return item(index);
    Value* list = arena.List();
    for (int64_t i = 0; i < h.shape[d]; ++i) list->items.push_back(build(d + 1, index + static_cast<uint64_t>(i) * file_strides[d]));
    return list;
  };
  return build(0, 0);
}

std::string VersionText(const NpyPreamble& p) { return std::to_string(p.major) + "." + std::to_string(p.minor); }

// The array (or, for an object array under kPermissive, its pickle read inert) of one file or
// member whose bytes are `bytes`; `warnings` gets what numpy would ignore.
Value* ArrayValue(const NpyHeader& h, const SharedBytes& bytes, const std::string& storage_key, int64_t storage_index,
                  ValueArena& arena, const ReadOptions& options, std::vector<std::string>& warnings) {
  const uint64_t data_offset = h.preamble.data_offset();
  const uint64_t available = bytes.size() - data_offset;  // ReadNpyPreamble checked the header fits
  if (h.kind == NpyKind::kObject) {
    if (options.pickle_policy != PicklePolicy::kPermissive) {
      Fail(ErrorCode::kRefused, "an object array ('" + h.descr + "'): its data is a pickle, which numpy.load runs only under "
                                "allow_pickle=True; refused (--permissive reads it as inert data, nothing run)");
    }
    const SharedBytes pickle = bytes.Slice(data_offset, available);
    DataResolver resolver(PicklePolicy::kPermissive);
    Unpickler unpickler(pickle.data(), pickle.size(), arena, resolver, data_offset);
    return unpickler.Load();
  }
  if (h.data_bytes > available) {
    Fail(ErrorCode::kCorrupt, "truncated: " + h.descr + " " + ShapeString(h.shape) + " needs " + std::to_string(h.data_bytes) +
                                  " bytes after the " + std::to_string(data_offset) + "-byte header, " + std::to_string(available) +
                                  " are there (" + std::to_string(data_offset + h.data_bytes) + " expected, " +
                                  std::to_string(bytes.size()) + " actual)");
  }
  if (h.data_bytes < available) {
    warnings.push_back(storage_key + ": " + std::to_string(available - h.data_bytes) +
                       " bytes after the array's data are ignored (as numpy.load ignores them)");
  }
  if (h.kind == NpyKind::kUnicode || h.kind == NpyKind::kBytes) return TextValue(h, bytes.Slice(data_offset, h.data_bytes), arena);
  TensorView view;
  view.dtype = h.dtype;
  view.shape = h.shape;
  view.strides = ContiguousStrides(h.shape, h.fortran_order);
  view.byte_order = h.byte_order;
  view.storage = bytes.Slice(data_offset, h.data_bytes);
  view.storage_index = storage_index;
  view.storage_key = storage_key;
  view.Validate();
  return arena.Tensor(std::move(view));
}

bool IsNpyMemberName(std::string_view name) { return name.size() >= kNpySuffix.size() && name.ends_with(kNpySuffix); }

}  // namespace

bool LooksLikeNpy(std::string_view head) {
  return head.size() >= 8 && head.starts_with(std::string_view("\x93NUMPY", 6)) &&
         (head[6] == 1 || head[6] == 2 || head[6] == 3) && head[7] == 0;
}

Document ReadNpy(std::shared_ptr<MappedFile> file, const ReadOptions& options) {
  return WithFile(file->path(), [&] {
    const SharedBytes bytes = file->bytes();
    const NpyHeader h = ReadNpyHeader(bytes);
    Document doc;
    doc.format = "npy";
    doc.path = file->path();
    doc.file_size = file->size();
    Value* root = doc.arena->Dict("dict");
    Value* array = ArrayValue(h, bytes, std::string(kNpyArrayKey), 0, *doc.arena, options, doc.warnings);
    root->entries.emplace_back(doc.arena->Str(std::string(kNpyArrayKey)), array);
    doc.root = root;
    doc.tensors = CollectTensors(root);
    doc.properties.emplace_back("version", VersionText(h.preamble));
    doc.properties.emplace_back("descr", h.descr);
    doc.properties.emplace_back("fortran_order", PropertyValue::Boolean(h.fortran_order));
    doc.properties.emplace_back("header bytes", PropertyValue::Integer(static_cast<int64_t>(h.preamble.data_offset())));
    ContainerRecord head;
    head.name = "header";
    head.size = head.stored_size = h.preamble.data_offset();
    head.method = "stored";
    ContainerRecord body;
    body.name = h.kind == NpyKind::kObject ? "pickle" : "data";
    body.offset = h.preamble.data_offset();
    body.size = body.stored_size = file->size() - body.offset;
    body.method = "stored";
    doc.records = {head, body};
    return doc;
  });
}

bool IsNpzArchive(const ZipReader& zip) {
  if (zip.entries().empty()) return false;
  for (const ZipEntry& e : zip.entries()) {
    if (!IsNpyMemberName(e.name)) return false;
  }
  for (const ZipProblem& r : zip.refused_entries()) {
    if (!IsNpyMemberName(r.entry)) return false;
  }
  return true;
}

bool HoldsNpyMember(const ZipReader& zip) {
  for (const ZipEntry& e : zip.entries()) {
    if (IsNpyMemberName(e.name)) return true;
  }
  for (const ZipProblem& r : zip.refused_entries()) {
    if (IsNpyMemberName(r.entry)) return true;
  }
  return false;
}

Document ReadNpz(std::shared_ptr<const ZipReader> zip, const ReadOptions& options) {
  const MappedFile* file = zip->shared_file().get();
  const std::string path = file ? file->path() : std::string();
  return WithFile(path, [&] {
    // numpy reads members with Python's zipfile: where zip readers disagree, --permissive reads
    // the archive as the central directory says and warns; otherwise it is refused.
    if (options.pickle_policy != PicklePolicy::kPermissive) zip->RefuseDisagreements();
    if (!zip->refused_entries().empty()) Fail(ErrorCode::kRefused, zip->refused_entries().front().message);
    if (zip->entries().empty()) Fail(ErrorCode::kCorrupt, "an empty zip archive (an .npz holds at least one array)");
    Document doc;
    for (const ZipProblem& p : zip->disagreements()) doc.warnings.push_back("zip readers disagree: " + p.message);
    doc.format = "npz";
    doc.path = path;
    doc.file_size = zip->bytes().size();

    // Which members are paths of nested dicts: every part non-empty and no shorter prefix of the
    // name another member's array (which cannot also be a folder).
    std::set<std::string> names;
    for (const ZipEntry& e : zip->entries()) {
      if (!IsNpyMemberName(e.name)) Fail(ErrorCode::kCorrupt, "member '" + e.name + "' is not an .npy array (numpy.savez writes only <name>.npy)");
      names.insert(e.name.substr(0, e.name.size() - kNpySuffix.size()));
    }
    auto nested = [&](const std::string& name) {
      if (name.empty() || name.front() == '/' || name.back() == '/' || name.find("//") != std::string::npos) return false;
      for (size_t p = name.find('/'); p != std::string::npos; p = name.find('/', p + 1)) {
        if (names.count(name.substr(0, p))) return false;
      }
      return true;
    };

    Value* root = doc.arena->Dict("dict");
    std::map<std::string, Value*> folders;  // "a/b" -> its dict
    auto folder_of = [&](const std::string& name) -> Value* {
      Value* at = root;
      for (size_t start = 0, slash; (slash = name.find('/', start)) != std::string::npos; start = slash + 1) {
        const std::string prefix = name.substr(0, slash);
        auto [it, made] = folders.emplace(prefix, nullptr);
        if (made) {
          it->second = doc.arena->Dict("dict");
          at->entries.emplace_back(doc.arena->Str(name.substr(start, slash - start)), it->second);
        }
        at = it->second;
      }
      return at;
    };

    int64_t index = 0;
    for (const ZipEntry& e : zip->entries()) {
      WithEntry(e.name, [&] {
        const std::string name = e.name.substr(0, e.name.size() - kNpySuffix.size());
        // A compressed member is inflated only as far as its header here; its values only when read.
        const SharedBytes bytes = zip->ReadDeferred(e);
        const NpyHeader h = ReadNpyHeader(bytes);
        Value* array = ArrayValue(h, bytes, e.name, index++, *doc.arena, options, doc.warnings);
        if (nested(name)) {
          const size_t slash = name.rfind('/');
          folder_of(name)->entries.emplace_back(doc.arena->Str(slash == std::string::npos ? name : name.substr(slash + 1)), array);
        } else {
          if (name.find('/') != std::string::npos) {
            doc.warnings.push_back("member '" + e.name + "' is one key '" + EncodeKeyComponent(name) +
                                   "', not a path: a part of its name is empty or another member's array");
          }
          root->entries.emplace_back(doc.arena->Str(name), array);
        }
        doc.records.push_back({e.name, e.data_offset, e.uncompressed_size, e.compressed_size,
                               std::string(ZipMethodName(e.method)), e.crc32});
      });
    }
    doc.root = root;
    doc.tensors = CollectTensors(root);
    doc.properties.emplace_back("arrays", PropertyValue::Integer(static_cast<int64_t>(zip->entries().size())));
    return doc;
  });
}

}  // namespace trove
