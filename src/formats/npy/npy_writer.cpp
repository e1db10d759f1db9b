// Writing .npy files and .npz archives: each array C-ordered and little-endian behind the header
// numpy writes, streamed from its view (a mapped view is copied by the kernel; strided, swapped,
// cast or deflated ones go window by window), into a temporary renamed when whole.
#include <functional>
#include <set>

#include "core/progress.h"
#include "formats/npy/npy_format.h"
#include "formats/npy/npy_header.h"
#include "formats/tensor_only_values.h"
#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/zip_writer.h"

namespace trove {
namespace {

// The header for a tensor, or Error(kUnsupported) naming it.
std::string HeaderFor(const NamedTensor& t) {
  const TensorView& v = *t.view;
  const std::string who = "'" + t.key + "'";
  if (!v.has_data) Fail(ErrorCode::kUnsupported, who + ": a meta tensor (shape only) has no values for numpy");
  const std::optional<std::string> descr = NpyDescrOf(v.dtype);
  if (!descr) {
    Fail(ErrorCode::kUnsupported, who + ": numpy has no dtype for " + std::string(Name(v.dtype)) +
                                      " (convert with --dtype float32, or write safetensors)");
  }
  return FormatNpyHeader(*descr, v.shape);
}

// The C-ordered little-endian values: the stored bytes when the view is them (mapped runs copied
// by the kernel, deferred ones inflated or read piece by piece), else gathered, swapped or cast
// window by window.
void StreamValues(const TensorView& v, const std::function<void(const SharedBytes&)>& stored_bytes,
                  const std::function<void(const uint8_t*, size_t)>& chunk) {
  if (std::optional<SharedBytes> stored = v.StoredBytes()) {
    stored_bytes(*stored);
  } else {
    v.ForEachChunk(chunk);
  }
}

}  // namespace

void WriteNpy(const Document& doc, const std::string& destination, const WriteOptions& options) {
  RefuseOrDropValues(doc, ".npy", options);
  if (doc.tensors.size() != 1) {
    std::vector<std::string> keys;
    for (const NamedTensor& t : doc.tensors) keys.push_back(t.key);
    std::string holds = std::to_string(doc.tensors.size()) + " tensor(s)";
    if (!keys.empty()) holds += " (" + ListedKeys(keys) + ")";
    Fail(ErrorCode::kUnsupported, "an .npy file holds exactly one array; this document holds " + holds +
                                      " (write .npz for several arrays, or select one with --keys)");
  }
  const NamedTensor& t = doc.tensors.front();
  const std::string header = HeaderFor(t);
  WithFile(doc.path, [&] { CheckExpansion(doc.tensors, /*views_kept=*/false); });  // the source's to say
  AtomicFile file(destination, options.durability);
  file.Write(header.data(), header.size());
  ProgressReporter progress(options.progress, t.view->nbytes());
  StreamValues(
      *t.view,
      [&](const SharedBytes& b) {
        b.ForEachRun([&](const uint8_t* data, size_t size) {  // mapped runs: copied by the kernel
          file.Write(data, size);
          progress.Add(size);
        });
      },
      [&](const uint8_t* data, size_t size) {
        file.Write(data, size);
        progress.Add(size);
      });
  progress.Finish();
  file.Commit();
}

void WriteNpz(const Document& doc, const std::string& destination, const WriteOptions& options) {
  RefuseOrDropValues(doc, ".npz", options);
  if (doc.tensors.empty()) Fail(ErrorCode::kUnsupported, "no tensors: an .npz holds at least one array");
  struct Member {
    std::string name;
    std::string header;
    const TensorView* view;
  };
  std::vector<Member> members;
  std::set<std::string> names;
  uint64_t total = 0;
  for (const NamedTensor& t : doc.tensors) {
    std::string name = FlatName(t.key) + ".npy";
    if (!names.insert(name).second) Fail(ErrorCode::kUnsupported, "'" + t.key + "': a second array named '" + name + "'");
    members.push_back({std::move(name), HeaderFor(t), t.view});
    total += t.view->nbytes();
  }
  WithFile(doc.path, [&] { CheckExpansion(doc.tensors, /*views_kept=*/false); });  // the source's to say
  AtomicFile file(destination, options.durability);
  // Python's zipfile layout (numpy.savez writes through it), each member's start aligned to 64 so
  // that the array's data, 64-aligned within the member, is aligned in the file for mapping.
  ZipWriter zip(file, ZipLayout::kTensordict);
  ProgressReporter progress(options.progress, total);
  for (const Member& m : members) {
    zip.BeginEntry(m.name, ZipMethod::kStored, 64, m.header.size() + m.view->nbytes());
    zip.Write(m.header.data(), m.header.size());
    StreamValues(
        *m.view,
        [&](const SharedBytes& b) {
          zip.WriteBytes(b);
          progress.Add(b.size());
        },
        [&](const uint8_t* data, size_t size) {
          zip.Write(data, size);
          progress.Add(size);
        });
    zip.EndEntry();
  }
  zip.Finish();
  progress.Finish();
  file.Commit();
}

}  // namespace trove
