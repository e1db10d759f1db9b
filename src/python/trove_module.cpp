// trove/_trove: the Python extension behind `import trove` (src/python/trove/__init__.py).
//
// A layer beside the command line: it uses only the public headers in include/trove. The C++
// half opens documents, turns value trees into Python objects, hands out each storage's bytes as a
// uint8 numpy array over a private copy-on-write mapping of the file (zero-copy; writes stay in
// this process), builds documents from Python objects for the writers, and wraps verify, scan,
// convert, diff and stats, and serves .psk.d datasets' batches (PyDataset, for trove.data). The
// Python half (__init__.py, data.py) makes numpy arrays and torch tensors of
// the right dtype, shape and strides over those storages.
//
// Every call into the library runs under trove's SIGBUS guard (RunGuardingTruncation), most with
// the GIL released. Arrays handed to Python are read by numpy and torch outside any trove call, so
// the module also keeps its own signal-safe table of the private mappings it made: a SIGBUS at one
// of them (the file was truncated under it) replaces the rest of that mapping with zero pages,
// marks it changed, and asks the interpreter to raise trove.IoError at its next opportunity
// (PyErr_SetInterruptEx on SIGBUS, whose Python handler __init__.py installs).

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "trove/checks.h"
#include "trove/convert.h"
#include "trove/diff.h"
#include "trove/document.h"
#include "trove/dtype.h"
#include "trove/error.h"
#include "trove/gguf.h"
#include "trove/io_mode.h"
#include "trove/threads.h"
#include "trove/version.h"
#include "trove/open.h"
#include "trove/pipeline.h"
#include "trove/pskd.h"
#include "trove/pskd_dataset.h"
#include "trove/safetensors.h"
#include "trove/shared_bytes.h"
#include "trove/tensor.h"
#include "trove/tensor_copy.h"
#include "trove/tensor_stats.h"
#include "trove/value.h"
#include "trove/zip_reader.h"

namespace py = pybind11;

namespace {

using trove::Document;
using trove::Error;
using trove::ErrorCode;
using trove::TensorView;
using trove::Value;
using trove::ValueKind;

// ---------------------------------------------------------------------------------------------
// Errors: trove::Error becomes the trove.Error subclass registered for its code.

// Text from a file (a pickled str, a class name, a key path, a record's name, an error naming
// them) as a Python str, never failing: UTF-8 decoded as pickle decodes it ("surrogatepass": a
// pickled str may hold lone surrogates), or, when the bytes are not UTF-8 at all (a zip entry's
// name, a path given as bytes), with each stray byte as os.fsdecode gives it ("surrogateescape").
// pybind11's own std::string conversion raises UnicodeDecodeError instead: no text a file
// supplies goes through it.
py::str Text(std::string_view s);

// A str as the bytes a pickle holds for it: UTF-8, a lone surrogate encoded as itself
// ("surrogatepass", as pickle writes it), so that what Text gave back is written back the same.
std::string PickleUtf8(py::handle str) {
  PyObject* bytes = PyUnicode_AsEncodedString(str.ptr(), "utf-8", "surrogatepass");
  if (bytes == nullptr) throw py::error_already_set();
  std::string out(PyBytes_AS_STRING(bytes), static_cast<size_t>(PyBytes_GET_SIZE(bytes)));
  Py_DECREF(bytes);
  return out;
}

py::str Text(std::string_view s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogatepass");
  if (o == nullptr) {
    PyErr_Clear();
    o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape");
  }
  if (o == nullptr) throw py::error_already_set();  // no memory
  return py::reinterpret_steal<py::str>(o);
}

py::list TextList(const std::vector<std::string>& items) {
  py::list out;
  for (const std::string& s : items) out.append(Text(s));
  return out;
}

constexpr int kErrorCodes = 7;
py::object* g_error_classes[kErrorCodes] = {};  // set by _register_errors; never freed (exit order)

// Copies what a trove::Error carries onto the Python exception object. Every field the C++
// error gains (file, entry, offset, spec code) is copied here and nowhere else.
// Unset fields are None (file, entry, refused_global: also when the C++ field is "").
void CopyErrorFields(py::object& exc, const Error& e) {
  auto text_or_none = [](const std::string& s) { return s.empty() ? py::object(py::none()) : py::object(Text(s)); };
  exc.attr("code") = py::str(std::string(trove::ErrorCodeName(e.code())));
  // The text a person sees (a traceback): escaped as the command line's (trove/error.h). The
  // fields below are the file's own text.
  exc.attr("message") = Text(e.DisplayMessage());
  exc.attr("reason") = Text(e.reason());
  exc.attr("file") = text_or_none(e.file());
  exc.attr("entry") = text_or_none(e.entry());
  exc.attr("offset") = e.offset() ? py::object(py::int_(*e.offset())) : py::object(py::none());
  exc.attr("spec_code") = e.spec_code() ? py::object(py::int_(*e.spec_code())) : py::object(py::none());
  exc.attr("refused_global") = text_or_none(e.refused_global());
  exc.attr("contexts") = TextList(e.contexts());
}

void SetPythonError(const Error& e) {
  const int code = static_cast<int>(e.code());
  if (code < 0 || code >= kErrorCodes || g_error_classes[code] == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, e.DisplayMessage().c_str());
    return;
  }
  py::object cls = *g_error_classes[code];
  py::object exc = cls(Text(e.DisplayMessage()));
  CopyErrorFields(exc, e);
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

// Runs body under the truncation guard (the GIL held).
template <class F>
auto Guarded(F&& body) -> decltype(body()) {
  using R = decltype(body());
  if constexpr (std::is_void_v<R>) {
    trove::RunGuardingTruncation([&] { body(); });
  } else {
    std::optional<R> out;
    trove::RunGuardingTruncation([&] { out.emplace(body()); });
    return std::move(*out);
  }
}

// Runs body under the guard with the GIL released (body must not touch Python objects).
template <class F>
auto Released(F&& body) -> decltype(body()) {
  py::gil_scoped_release release;
  return Guarded(std::forward<F>(body));
}

// ---------------------------------------------------------------------------------------------
// Private copy-on-write mappings and their SIGBUS table (touched by the signal handler).

constexpr int kSlots = 4096;
struct Slot {
  std::atomic<uintptr_t> start{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<int> changed{0};
};
Slot g_slots[kSlots];
std::atomic<bool> g_python_handler{false};
std::atomic<int> g_last_changed{-1};
struct sigaction g_previous_action;
uintptr_t g_page = 4096;
std::mutex g_slot_mutex;                    // normal code only: slot allocation and paths
std::string g_slot_paths[kSlots];           // under g_slot_mutex
std::string g_changed_paths_taken;          // last path reported (under g_slot_mutex)

void OnSigbus(int sig, siginfo_t* info, void* context) {
  if (info->si_code == BUS_ADRERR) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
    for (int i = 0; i < kSlots; ++i) {
      const uintptr_t s = g_slots[i].start.load(std::memory_order_acquire);
      if (s == 0 || a < s) continue;
      const uintptr_t e = g_slots[i].end.load(std::memory_order_acquire);
      if (a >= e) continue;
      const uintptr_t page = a / g_page * g_page;
      void* z = ::mmap(reinterpret_cast<void*>(page), e - page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      if (z == MAP_FAILED) break;
      g_slots[i].changed.store(1);
      g_last_changed.store(i);
      if (g_python_handler.load()) PyErr_SetInterruptEx(SIGBUS);
      return;  // the access is retried and reads zeros; Python raises at its next check
    }
  }
  if (g_previous_action.sa_flags & SA_SIGINFO) {
    if (g_previous_action.sa_sigaction != nullptr) return g_previous_action.sa_sigaction(sig, info, context);
  } else if (g_previous_action.sa_handler != SIG_DFL && g_previous_action.sa_handler != SIG_IGN) {
    return g_previous_action.sa_handler(sig);
  }
  ::signal(SIGBUS, SIG_DFL);  // the retried access meets the default action
}

// Installs the handler once. With a Python callable, also registers it as Python's SIGBUS
// handler first (so that PyErr_SetInterruptEx runs it), then puts ours in front at the OS level.
void InstallSigbus(py::object python_handler) {
  static bool installed = false;
  if (installed) return;
  installed = true;
  g_page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  trove::RunGuardingTruncation([] {});  // trove's own handler goes in first, ours chains to it
  struct sigaction before {};
  ::sigaction(SIGBUS, nullptr, &before);
  if (!python_handler.is_none()) {
    py::module_::import("signal").attr("signal")(SIGBUS, python_handler);
    g_python_handler = true;
  }
  struct sigaction action {};
  action.sa_sigaction = OnSigbus;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  g_previous_action = before;
  if (::sigaction(SIGBUS, &action, nullptr) != 0) trove::Fail(ErrorCode::kIo, "installing the SIGBUS handler");
}

// A whole file mapped privately (copy-on-write, readable and writable): what numpy and torch see.
struct PrivateMap {
  uint8_t* base = nullptr;
  uint64_t size = 0;
  int slot = -1;
  std::string path;
  ~PrivateMap() {
    if (slot >= 0) {
      g_slots[slot].start.store(0);
      g_slots[slot].end.store(0);
      g_slots[slot].changed.store(0);
      std::lock_guard<std::mutex> lock(g_slot_mutex);
      g_slot_paths[slot].clear();
    }
    if (base != nullptr) ::munmap(base, size);
  }
  bool changed() const { return slot >= 0 && g_slots[slot].changed.load() != 0; }
};

// Maps `path` privately when it is still the file (device, inode) the library mapped. Null when
// it is not (replaced meanwhile), or cannot be mapped: the caller copies instead.
// Enters a private mapping in the SIGBUS table (a truncation under it then raises trove.IoError).
void RegisterPrivateMap(PrivateMap& map) {
  std::lock_guard<std::mutex> lock(g_slot_mutex);
  for (int i = 0; i < kSlots; ++i) {
    if (g_slots[i].start.load() == 0 && g_slot_paths[i].empty()) {
      g_slot_paths[i] = map.path;
      g_slots[i].changed.store(0);
      g_slots[i].end.store(reinterpret_cast<uintptr_t>(map.base) + map.size);
      g_slots[i].start.store(reinterpret_cast<uintptr_t>(map.base));
      map.slot = i;
      return;
    }
  }
  // without a slot (4096 live mappings) a truncation still ends the process
}

// `length` bytes of the file behind `fd` from `offset` (a multiple of the page size) mapped
// privately and entered in the SIGBUS table; null when they cannot be mapped.
std::shared_ptr<PrivateMap> MapDescriptorPrivately(int fd, uint64_t offset, uint64_t length, const std::string& path) {
  void* m = ::mmap(nullptr, static_cast<size_t>(length), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, static_cast<off_t>(offset));
  if (m == MAP_FAILED) return nullptr;
  auto map = std::make_shared<PrivateMap>();
  map->base = static_cast<uint8_t*>(m);
  map->size = length;
  map->path = path;
  RegisterPrivateMap(*map);
  return map;
}

// Maps `path` privately when it is still the file (device, inode) the library mapped. Null when
// it is not (replaced meanwhile), or cannot be mapped: the caller copies instead.
std::shared_ptr<PrivateMap> MapPrivately(const std::string& path, uint64_t dev_major, uint64_t dev_minor, uint64_t inode) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_ino != inode || major(st.st_dev) != dev_major ||
      minor(st.st_dev) != dev_minor || st.st_size == 0) {
    ::close(fd);
    return nullptr;
  }
  auto map = MapDescriptorPrivately(fd, 0, static_cast<uint64_t>(st.st_size), path);
  ::close(fd);
  return map;
}

// One line of /proc/self/maps that maps a file.
struct MapsLine {
  uintptr_t start = 0, end = 0;
  uint64_t offset = 0, dev_major = 0, dev_minor = 0, inode = 0;
  std::string path;
};

std::vector<MapsLine> ReadMaps() {
  std::vector<MapsLine> out;
  std::ifstream in("/proc/self/maps");
  std::string line;
  while (std::getline(in, line)) {
    MapsLine m;
    unsigned long long s = 0, e = 0, off = 0, ino = 0;
    unsigned int maj = 0, mnr = 0;
    char perms[8] = {};
    int consumed = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %x:%x %llu %n", &s, &e, perms, &off, &maj, &mnr, &ino, &consumed) < 7) continue;
    if (ino == 0) continue;
    m.start = s;
    m.end = e;
    m.offset = off;
    m.dev_major = maj;
    m.dev_minor = mnr;
    m.inode = ino;
    m.path = line.substr(static_cast<size_t>(consumed));
    if (m.path.empty() || m.path[0] != '/' || m.path.ends_with(" (deleted)")) continue;
    out.push_back(std::move(m));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// An open document as Python holds it.

std::string DTypeText(trove::DType d) { return std::string(trove::Name(d)); }

class PyDocument : public std::enable_shared_from_this<PyDocument> {
 public:
  explicit PyDocument(Document doc) : doc_(std::make_shared<Document>(std::move(doc))) {
    for (const auto& t : doc_->tensors) key_of_.emplace(t.view, t.key);
  }

  const Document& doc() const { return *doc_; }

  void CheckChanged() {
    for (const auto& m : maps_)
      if (m->changed()) trove::FailChangedWhileRead(m->path);
  }

  // The uint8 array over a view's whole storage: zero-copy over a private mapping when the
  // storage lies in a mapped file and is little-endian, else an owned copy (inflated, swapped).
  // Cached per storage, so views sharing a storage share memory. GIL held.
  py::object StorageArray(const TensorView& v) {
    const int64_t id = StorageId(v);
    if (auto it = storages_.find(id); it != storages_.end()) return it->second;
    py::object arr;
    const bool swap = v.byte_order == trove::ByteOrder::kBig && trove::ElementSize(v.dtype) > 1;
    if (!swap && v.storage.mapped() && !v.storage.deferred() && v.storage.size() > 0) {
      arr = ZeroCopy(v.storage);
      if (arr) zero_copy_ids_.insert(id);
    }
    if (!arr) {
      const uint64_t n = v.storage.size();
      py::array_t<uint8_t> out(static_cast<py::ssize_t>(n));
      uint8_t* dst = out.mutable_data();
      Released([&] {
        const uint8_t* src = v.storage.data();
        if (n) std::memcpy(dst, src, n);
        trove::ThrowIfMappedFileChanged();
      });
      if (swap) {
        const uint64_t es = trove::ElementSize(v.dtype);
        trove::ByteSwapElements(dst, n / es, v.dtype);
      }
      arr = std::move(out);
    }
    storages_.emplace(id, arr);
    return arr;
  }

  // (storage array, dtype, torch dtype, shape, strides, offset, requires_grad, is_parameter,
  // storage id, has_data, zero_copy, quantizer, bare_storage, big_endian) for one view; the
  // storage array is little-endian whatever the file's order (big_endian) is. A quantized view gives its integers
  // (dtype int8/uint8/int32) and its quantizer: (scheme, scale, zero_point) or (scheme, scales
  // info, zero points info, axis); None for other views.
  py::tuple TensorInfo(const TensorView& quantized_or_not, bool with_data = true) {
    const TensorView* shown = &quantized_or_not;
    std::optional<TensorView> repr;
    py::object quantizer = py::none();
    // ggml's blocks (trove::IsBlockDType) are given as they are stored, one byte an element.
    if (!trove::Info(shown->dtype).readable && !trove::IsBlockDType(shown->dtype)) {
      if (!shown->quantizer || !trove::IntReprDType(shown->dtype)) {
        trove::Fail(ErrorCode::kUnsupported, "dtype " + DTypeText(shown->dtype) + " is quantized: trove does not read it");
      }
      const trove::Quantizer& q = *shown->quantizer;
      const std::string scheme(trove::QSchemeName(q.scheme));
      quantizer = q.per_channel() ? py::object(py::make_tuple(scheme, TensorInfo(*q.scales, with_data),
                                                             TensorInfo(*q.zero_points, with_data), q.axis))
                                  : py::object(py::make_tuple(scheme, q.scale, q.zero_point));
      repr = trove::IntReprView(*shown);
      shown = &*repr;
    }
    const TensorView& v = *shown;
    if (v.cast_source) trove::Fail(ErrorCode::kUnsupported, "a converting view");
    py::object storage = py::none();
    bool zero_copy = false;
    if (v.has_data && with_data) {
      storage = StorageArray(v);
      zero_copy = zero_copy_ids_.count(StorageId(v)) > 0;
    }
    return py::make_tuple(storage, DTypeText(quantized_or_not.dtype), std::string(trove::Info(v.dtype).torch_name), v.shape,
                          v.strides, v.storage_offset, v.requires_grad, v.is_parameter, StorageId(v), v.has_data, zero_copy,
                          quantizer, v.bare_storage, v.byte_order == trove::ByteOrder::kBig);
  }

  // Rows [start, stop) of a tensor whose bytes are produced when read (assembled from a
  // checkpoint's chunks or ranks), as TensorInfo gives a tensor: its storage array holds only the
  // bytes those rows reach (trove::NarrowedToReach: only the pieces they lie in are read), made
  // for this call and kept by nobody else (storage id -1). None for any other tensor, which
  // TensorInfo gives whole (zero-copy where it can be). `start` <= `stop` lie in dim 0.
  py::object RowsInfo(const TensorView& v, int64_t start, int64_t stop) {
    if (!v.storage.deferred() || v.shape.empty() || v.cast_source || v.quantizer || !v.has_data ||
        !trove::Info(v.dtype).readable || v.byte_order == trove::ByteOrder::kBig || start < 0 || stop < start ||
        stop > v.shape[0]) {
      return py::none();
    }
    TensorView rows = v;
    rows.shape[0] = stop - start;
    if (stop > start) rows.storage_offset += start * rows.strides[0];
    rows = trove::NarrowedToReach(rows);
    const uint64_t n = rows.numel() == 0 ? 0 : rows.storage.size();
    py::array_t<uint8_t> out(static_cast<py::ssize_t>(n));
    uint8_t* dst = out.mutable_data();
    Released([&] {
      if (n) std::memcpy(dst, rows.storage.data(), n);
      trove::ThrowIfMappedFileChanged();
    });
    return py::make_tuple(out, DTypeText(v.dtype), std::string(trove::Info(v.dtype).torch_name), rows.shape,
                          rows.strides, n ? rows.storage_offset : 0, v.requires_grad, v.is_parameter, -1, true, false,
                          py::none(), false, false);
  }

  const TensorView& Find(const std::string& key) const {
    const trove::NamedTensor* t = doc_->FindTensor(key);
    if (t == nullptr) trove::Fail(ErrorCode::kNotFound, "no tensor '" + key + "' in " + doc_->path);
    return *t->view;
  }

  const std::string* KeyOf(const TensorView* v) const {
    auto it = key_of_.find(v);
    return it == key_of_.end() ? nullptr : &it->second;
  }

  // The address range (begin, end) of each private mapping, for tests and diagnostics.
  std::vector<std::pair<uintptr_t, uintptr_t>> Mappings() const {
    std::vector<std::pair<uintptr_t, uintptr_t>> out;
    for (const auto& m : maps_) out.emplace_back(reinterpret_cast<uintptr_t>(m->base), reinterpret_cast<uintptr_t>(m->base) + m->size);
    return out;
  }

 private:
  int64_t StorageId(const TensorView& v) const {
    if (v.storage_index >= 0) return v.storage_index;
    // No index: one storage per distinct byte range.
    return -1 - static_cast<int64_t>(reinterpret_cast<uintptr_t>(v.storage.data()) & 0x3fffffffffffffff);
  }

  py::object ZeroCopy(const trove::SharedBytes& bytes) {
    std::shared_ptr<PrivateMap> map;
    uint64_t file_offset = 0;
    // One private mapping per file (device, inode), made by `make` the first time.
    auto mapping_of = [&](uint64_t device, uint64_t inode, auto&& make) {
      const auto key = std::make_pair(device, inode);
      if (auto it = by_file_.find(key); it != by_file_.end()) return it->second;
      std::shared_ptr<PrivateMap> made = make();
      by_file_.emplace(key, made);
      if (made) maps_.push_back(made);
      return made;
    };
    if (auto file = trove::DuplicateMappedFile(bytes.data())) {
      // The library's own descriptor of the file (a MappedFile): no need to find it by address.
      struct stat st {};
      if (::fstat(file->fd, &st) == 0 && S_ISREG(st.st_mode) && bytes.size() <= file->length) {
        file_offset = file->offset;
        map = mapping_of(static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), [&] {
          return MapDescriptorPrivately(file->fd, 0, static_cast<uint64_t>(st.st_size), file->path);
        });
      }
      ::close(file->fd);
    } else {
      // A mapping made outside MappedFile (a tensordict leaf mapped by its prefix): found by its
      // address in /proc/self/maps, then opened again by path and checked to be the same file.
      const uintptr_t a = reinterpret_cast<uintptr_t>(bytes.data());
      const MapsLine* line = FindLine(a);
      if (line == nullptr || a + bytes.size() > line->end) return py::object();
      file_offset = line->offset + (a - line->start);
      map = mapping_of(static_cast<uint64_t>(makedev(line->dev_major, line->dev_minor)), line->inode,
                       [&] { return MapPrivately(line->path, line->dev_major, line->dev_minor, line->inode); });
    }
    if (!map || file_offset + bytes.size() > map->size) return py::object();
    // The array's base is a capsule owning the mapping (and, through this document, the file).
    auto* holder = new std::shared_ptr<PrivateMap>(map);
    py::capsule base(holder, [](void* p) { delete static_cast<std::shared_ptr<PrivateMap>*>(p); });
    py::array arr(py::dtype::of<uint8_t>(), {static_cast<py::ssize_t>(bytes.size())}, {py::ssize_t{1}},
                  map->base + file_offset, base);
    return arr;
  }

  const MapsLine* FindLine(uintptr_t a) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      auto it = std::upper_bound(maps_lines_.begin(), maps_lines_.end(), a,
                                 [](uintptr_t x, const MapsLine& m) { return x < m.start; });
      if (it != maps_lines_.begin() && a < std::prev(it)->end) return &*std::prev(it);
      if (attempt == 0) {
        maps_lines_ = ReadMaps();
        std::sort(maps_lines_.begin(), maps_lines_.end(), [](const MapsLine& x, const MapsLine& y) { return x.start < y.start; });
      }
    }
    return nullptr;
  }

  std::shared_ptr<Document> doc_;
  std::unordered_map<const TensorView*, std::string> key_of_;
  std::unordered_map<int64_t, py::object> storages_;
  std::unordered_set<int64_t> zero_copy_ids_;
  std::map<std::pair<uint64_t, uint64_t>, std::shared_ptr<PrivateMap>> by_file_;
  std::vector<std::shared_ptr<PrivateMap>> maps_;
  std::vector<MapsLine> maps_lines_;
};

// ---------------------------------------------------------------------------------------------
// Value tree -> Python objects.

// How deep a value tree may nest when it becomes Python objects. The conversion recurses (two C++
// frames a level), and Python code over the result recurses too (repr, ==, copy.deepcopy: 1000
// frames by default); real checkpoints nest a dozen levels. A deeper tree is Error(kLimit), never
// a RecursionError or a stack overflow.
constexpr int kMaxPythonDepth = 2000;

struct ToPython {
  ToPython(PyDocument& d, bool data, py::object tensor, py::object global, py::object object, py::object dict,
           py::object scalar)
      : doc(d), with_data(data), tensor_fn(std::move(tensor)), global_fn(std::move(global)), object_fn(std::move(object)),
        dict_fn(std::move(dict)), scalar_fn(std::move(scalar)) {}
  PyDocument& doc;
  bool with_data;
  py::object tensor_fn;  // (info tuple, key or None, numpy array?) -> object
  py::object global_fn;  // (dotted name) -> object
  py::object object_fn;  // (type name, args, state, appended items, set entries as (key, value)) -> object
  py::object dict_fn;    // (class name, filled dict, constructor args or None, state or None) -> object, for other dict classes
  py::object scalar_fn;  // (numpy scalar class, its bytes) -> object, for numbers numpy pickled; None: plain numbers
  py::object ordered_dict = py::module_::import("collections").attr("OrderedDict");
  std::unordered_map<const Value*, py::object> memo;
  std::unordered_set<const Value*> in_progress;
  // The dicts, lists, tuples and sets being filled and the position in each (a dict's entry, a
  // sequence's item): an error names the value's key path from them. Objects are looked through.
  std::vector<std::pair<const Value*, size_t>> path;

  py::object Convert(const Value* v, int depth) {
    if (v == nullptr) return py::none();
    if (depth > kMaxPythonDepth) {
      FailHere(ErrorCode::kLimit, "values nested deeper than kMaxPythonDepth (" + std::to_string(kMaxPythonDepth) + ") levels");
    }
    if (auto it = memo.find(v); it != memo.end()) return it->second;
    if (in_progress.count(v)) FailHere(ErrorCode::kUnsupported, "a cycle through an immutable value");
    in_progress.insert(v);
    py::object out = Make(v, depth);
    in_progress.erase(v);
    memo.emplace(v, out);
    return out;
  }

  // Member `position` of `container`, converted.
  py::object Member(const Value* container, size_t position, const Value* member, int depth) {
    path.emplace_back(container, position);
    py::object out = Convert(member, depth + 1);
    path.pop_back();
    return out;
  }

  // How many components of a value's key path an error names: the first and the last half of
  // them, around an ellipsis (a value 2000 levels down is not named by 2000 components).
  static constexpr size_t kWhereParts = 16;

  // The key path of where the conversion is, as trove's key paths spell it.
  std::string Where() const {
    std::vector<std::string> parts;
    for (size_t i = 0; i < path.size(); ++i) {
      if (path.size() > kWhereParts && i == kWhereParts / 2) {
        parts.push_back("...(" + std::to_string(path.size() - kWhereParts) + " more)...");
        i = path.size() - kWhereParts / 2;
      }
      const auto& [node, position] = path[i];
      std::string part = std::to_string(position);
      if (node->kind == ValueKind::kDict) {
        try {
          part = trove::DictKeyComponents(*node).at(position);
        } catch (const Error&) {
          // past the key-text cap: the entry's position says where
        }
      }
      parts.push_back(std::move(part));
    }
    return trove::JoinKeyPath(parts);
  }

  [[noreturn]] void FailHere(ErrorCode code, const std::string& reason) const {
    Error e(code, reason);
    if (!path.empty()) e.SetEntry(Where());
    e.SetFile(doc.doc().path);
    throw e;
  }

  // container[key] = value (a dict, or an object's __dict__), as Python's dict does it; a key of
  // an unhashable type (a list, a dict) cannot be one, in Python nor in torch.load.
  void SetItem(py::handle container, py::handle key, py::handle value) const {
    if (PyObject_SetItem(container.ptr(), key.ptr(), value.ptr()) == 0) return;
    RefuseUnhashable(key, "a dict key");
  }

  void AddItem(py::handle set, py::handle item) const {
    if (PySet_Add(set.ptr(), item.ptr()) == 0) return;
    RefuseUnhashable(item, "a set item");
  }

  // After a failed insertion: a TypeError (unhashable) becomes a trove error, anything else
  // (no memory) is raised as it is.
  [[noreturn]] void RefuseUnhashable(py::handle key, const std::string& what) const {
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw py::error_already_set();
    PyErr_Clear();
    FailHere(ErrorCode::kCorrupt, what + " of unhashable type '" + std::string(Py_TYPE(key.ptr())->tp_name) +
                                      "' (Python cannot build this value, nor can torch.load)");
  }

  // A number numpy pickled comes back as the numpy scalar it was, where the caller asks.
  bool IsNumpyScalar(const Value* v) const { return !v->type_name.empty() && !scalar_fn.is_none(); }
  py::object NumpyScalar(const Value* v) { return scalar_fn(Text(v->type_name), py::bytes(v->text)); }

  py::object Make(const Value* v, int depth) {
    switch (v->kind) {
      case ValueKind::kNone: return py::none();
      case ValueKind::kBool:
        if (IsNumpyScalar(v)) return NumpyScalar(v);
        return py::bool_(v->boolean);
      case ValueKind::kInt:
        if (IsNumpyScalar(v)) return NumpyScalar(v);
        if (v->is_big_int()) {
          py::bytes b(reinterpret_cast<const char*>(v->big_int.data()), v->big_int.size());
          return py::module_::import("builtins").attr("int").attr("from_bytes")(b, "little", py::arg("signed") = true);
        }
        return py::int_(v->integer);
      case ValueKind::kFloat:
        if (IsNumpyScalar(v)) return NumpyScalar(v);
        return py::float_(v->real);
      case ValueKind::kComplex:
        if (IsNumpyScalar(v)) return NumpyScalar(v);
        return py::reinterpret_steal<py::object>(PyComplex_FromDoubles(v->real, v->imag));
      case ValueKind::kStr: return Text(v->text);
      case ValueKind::kBytes:
        if (v->type_name == "bytearray") {
          return py::reinterpret_steal<py::object>(PyByteArray_FromStringAndSize(v->text.data(), static_cast<py::ssize_t>(v->text.size())));
        }
        return py::bytes(v->text);
      case ValueKind::kList: {
        py::list l;
        memo.emplace(v, l);  // before the items: a list may contain itself
        in_progress.erase(v);
        for (size_t i = 0; i < v->items.size(); ++i) l.append(Member(v, i, v->items[i], depth));
        return l;
      }
      case ValueKind::kTuple: {
        py::tuple t(v->items.size());
        for (size_t i = 0; i < v->items.size(); ++i) t[i] = Member(v, i, v->items[i], depth);
        // torch.Size(dims), as the object torch pickles it as.
        if (v->type_name == "torch.Size") return object_fn(Text(v->type_name), py::make_tuple(t), py::none(), py::list(), py::list());
        return t;
      }
      case ValueKind::kSet:
      case ValueKind::kFrozenSet: {
        py::object set = py::reinterpret_steal<py::object>(PySet_New(nullptr));
        if (!set) throw py::error_already_set();
        for (size_t i = 0; i < v->items.size(); ++i) {
          py::object item = Member(v, i, v->items[i], depth);
          path.emplace_back(v, i);
          AddItem(set, item);
          path.pop_back();
        }
        if (v->kind == ValueKind::kSet) return set;
        return py::reinterpret_steal<py::object>(PyFrozenSet_New(set.ptr()));
      }
      case ValueKind::kDict: {
        const bool ordered = v->type_name == "collections.OrderedDict";
        py::object d = ordered ? ordered_dict() : py::object(py::dict());
        memo.emplace(v, d);
        in_progress.erase(v);
        for (size_t i = 0; i < v->entries.size(); ++i) {
          const auto& [k, val] = v->entries[i];
          py::object key = Member(v, i, k, depth);
          py::object value = Member(v, i, val, depth);
          path.emplace_back(v, i);
          SetItem(d, key, value);
          path.pop_back();
        }
        // OrderedDict attributes set by BUILD (a state_dict's _metadata), as pickle sets them:
        // straight into the instance's __dict__ (a key such as '__class__' changes nothing else).
        if (ordered && v->state != nullptr && v->state->kind == ValueKind::kDict) {
          py::object attributes = d.attr("__dict__");
          for (size_t i = 0; i < v->state->entries.size(); ++i) {
            const auto& [k, val] = v->state->entries[i];
            path.emplace_back(v->state, i);
            SetItem(attributes, Convert(k, depth + 1), Convert(val, depth + 1));
            path.pop_back();
          }
        }
        if (!ordered && !v->type_name.empty() && v->type_name != "dict" && !dict_fn.is_none()) {
          // defaultdict, Namespace, a dict subclass: the package decides what stands for it.
          // Its attributes (BUILD state) go along, so that a tensor kept in one is not lost.
          py::object out = dict_fn(Text(v->type_name), d, v->args ? Convert(v->args, depth + 1) : py::none(),
                                   v->state ? Convert(v->state, depth + 1) : py::none());
          memo[v] = out;
          return out;
        }
        return d;
      }
      case ValueKind::kTensor: {
        const std::string* key = doc.KeyOf(v->tensor);
        return tensor_fn(doc.TensorInfo(*v->tensor, with_data), key ? py::object(Text(*key)) : py::object(py::none()),
                         v->type_name == "numpy.ndarray");
      }
      case ValueKind::kGlobal: return global_fn(Text(v->type_name));
      case ValueKind::kObject: {
        if (const Value* inner = trove::StandsFor(*v)) return Convert(inner, depth + 1);
        // What APPEND(S) and SETITEM(S) gave it too (a list or dict subclass's members): nothing
        // the file holds is dropped.
        py::list items, entries;
        for (size_t i = 0; i < v->items.size(); ++i) items.append(Member(v, i, v->items[i], depth));
        for (size_t i = 0; i < v->entries.size(); ++i) {
          py::object key = Member(v, i, v->entries[i].first, depth);
          entries.append(py::make_tuple(key, Member(v, i, v->entries[i].second, depth)));
        }
        return object_fn(Text(v->type_name), Convert(v->args, depth + 1), Convert(v->state, depth + 1), items, entries);
      }
    }
    return py::none();
  }
};

// ---------------------------------------------------------------------------------------------
// Python objects -> a Document (for trove.save).

struct FromPython {
  FromPython(trove::ValueArena& a, py::object spec_type, py::object value_type)
      : arena(a), tensor_spec_type(std::move(spec_type)), value_spec_type(std::move(value_type)) {}
  trove::ValueArena& arena;
  py::object tensor_spec_type;  // trove._TensorSpec
  py::object value_spec_type;   // trove._ValueSpec: a value that is more than its Python builtin type
  py::object ordered_dict = py::module_::import("collections").attr("OrderedDict");
  std::unordered_map<int64_t, trove::SharedBytes> storages;
  std::unordered_map<PyObject*, Value*> memo;  // shared containers stay shared (tied weights' dicts)

  Value* Convert(py::handle o, int depth) {
    if (depth > kMaxPythonDepth) trove::Fail(ErrorCode::kLimit, "objects nested deeper than " + std::to_string(kMaxPythonDepth) + " levels");
    if (o.is_none()) return arena.None();
    if (PyBool_Check(o.ptr())) return arena.Bool(o.ptr() == Py_True);
    if (PyLong_Check(o.ptr())) {
      int overflow = 0;
      const long long x = PyLong_AsLongLongAndOverflow(o.ptr(), &overflow);
      if (!overflow) return arena.Int(x);
      py::object bits = o.attr("bit_length")();
      const size_t n = bits.cast<size_t>() / 8 + 1;
      py::bytes b = o.attr("to_bytes")(n, "little", py::arg("signed") = true);
      std::string s = b;
      return arena.BigInt(std::vector<uint8_t>(s.begin(), s.end()));
    }
    if (PyFloat_Check(o.ptr())) return arena.Float(PyFloat_AsDouble(o.ptr()));
    if (PyComplex_Check(o.ptr())) {
      Value* c = arena.New(ValueKind::kComplex);
      c->real = PyComplex_RealAsDouble(o.ptr());
      c->imag = PyComplex_ImagAsDouble(o.ptr());
      return c;
    }
    if (PyUnicode_Check(o.ptr())) return arena.Str(PickleUtf8(o));
    if (PyBytes_Check(o.ptr())) return arena.Bytes(o.cast<std::string>());
    if (PyByteArray_Check(o.ptr())) {
      Value* b = arena.Bytes(std::string(PyByteArray_AsString(o.ptr()), static_cast<size_t>(PyByteArray_Size(o.ptr()))));
      b->type_name = "bytearray";
      return b;
    }
    if (auto it = memo.find(o.ptr()); it != memo.end()) return it->second;
    if (PyDict_Check(o.ptr())) {
      const bool ordered = py::isinstance(o, ordered_dict);
      Value* d = arena.Dict(ordered ? "collections.OrderedDict" : "dict");
      memo.emplace(o.ptr(), d);
      for (auto [k, val] : py::reinterpret_borrow<py::dict>(o)) d->entries.emplace_back(Convert(k, depth + 1), Convert(val, depth + 1));
      // An OrderedDict's attributes (a state_dict's _metadata) are written as torch.save writes them.
      if (ordered && py::hasattr(o, "__dict__")) {
        py::dict attrs = o.attr("__dict__");
        if (!attrs.empty()) d->state = Convert(attrs, depth + 1);
      }
      return d;
    }
    if (PyList_Check(o.ptr())) {
      Value* l = arena.List();
      memo.emplace(o.ptr(), l);
      for (py::handle item : py::reinterpret_borrow<py::list>(o)) l->items.push_back(Convert(item, depth + 1));
      return l;
    }
    if (PyTuple_Check(o.ptr())) {
      std::vector<Value*> items;
      for (py::handle item : py::reinterpret_borrow<py::tuple>(o)) items.push_back(Convert(item, depth + 1));
      Value* t = arena.Tuple(std::move(items));
      // A torch.Size stays one (the .pt writer pickles it as torch does; other formats refuse it).
      const py::handle type = py::type::of(o);
      if (py::str(type.attr("__module__")).cast<std::string>() == "torch" &&
          py::str(type.attr("__qualname__")).cast<std::string>() == "Size") {
        t->type_name = "torch.Size";
      }
      memo.emplace(o.ptr(), t);
      return t;
    }
    if (py::isinstance(o, tensor_spec_type)) return Tensor(o);
    if (!value_spec_type.is_none() && py::isinstance(o, value_spec_type)) return Typed(o, depth);
    trove::Fail(ErrorCode::kUsage, "trove.save cannot write a " + py::str(py::type::of(o).attr("__qualname__")).cast<std::string>() +
                                       " (only dicts, lists, tuples, tensors, arrays, numbers, str, bytes, None)");
  }

  // A _ValueSpec (trove/__init__.py): what trove.load gives for a class the writers know by name
  // (argparse.Namespace, collections.defaultdict, a set, a torch dtype or device, trove.Global,
  // trove.Dict), as the readers model it: kind "dict" (entries, args, state), "set",
  // "frozenset" (items), "global", "object" (args, state). The writers decide what they can write.
  Value* Typed(py::handle spec, int depth) {
    const std::string kind = spec.attr("kind").cast<std::string>();
    const std::string type_name = spec.attr("type_name").cast<std::string>();
    auto optional = [&](const char* field) -> Value* {
      py::object v = spec.attr(field);
      return v.is_none() ? nullptr : Convert(v, depth + 1);
    };
    Value* out = nullptr;
    if (kind == "dict") {
      out = arena.Dict(type_name);
      memo.emplace(spec.ptr(), out);
      for (py::handle pair : py::reinterpret_borrow<py::list>(spec.attr("items"))) {
        py::tuple kv = py::reinterpret_borrow<py::tuple>(pair);
        out->entries.emplace_back(Convert(kv[0], depth + 1), Convert(kv[1], depth + 1));
      }
      out->args = optional("args");
      out->state = optional("state");
    } else if (kind == "set" || kind == "frozenset") {
      out = arena.New(kind == "set" ? ValueKind::kSet : ValueKind::kFrozenSet);
      memo.emplace(spec.ptr(), out);
      for (py::handle item : py::reinterpret_borrow<py::list>(spec.attr("items"))) out->items.push_back(Convert(item, depth + 1));
    } else if (kind == "global") {
      out = arena.Global(type_name);
    } else if (kind == "object") {
      out = arena.Object(type_name, optional("args"));
      out->state = optional("state");
    } else {
      trove::Fail(ErrorCode::kUsage, "a value spec of kind '" + kind + "'");
    }
    return out;
  }

  // A _TensorSpec: (storage id, uint8 storage array, dtype name, shape, strides, offset,
  // requires_grad, is_parameter). The storage's memory stays owned by Python during the write.
  Value* Tensor(py::handle spec) {
    const int64_t id = spec.attr("storage_id").cast<int64_t>();
    auto it = storages.find(id);
    if (it == storages.end()) {
      py::buffer buf = spec.attr("storage");
      py::buffer_info info = buf.request();
      if (info.ndim != 1 || info.itemsize != 1 || (info.shape[0] > 1 && info.strides[0] != 1)) {
        trove::Fail(ErrorCode::kUsage, "a tensor's storage is not a contiguous byte buffer");
      }
      auto owner = std::make_shared<int>(0);
      it = storages.emplace(id, trove::SharedBytes(owner, static_cast<const uint8_t*>(info.ptr), static_cast<uint64_t>(info.shape[0]))).first;
    }
    TensorView view;
    const std::string dtype = spec.attr("dtype").cast<std::string>();
    auto d = trove::DTypeFromName(dtype);
    if (!d) trove::Fail(ErrorCode::kUnsupported, "dtype '" + dtype + "'");
    view.dtype = *d;
    view.shape = spec.attr("shape").cast<std::vector<int64_t>>();
    view.strides = spec.attr("strides").cast<std::vector<int64_t>>();
    view.storage_offset = spec.attr("offset").cast<int64_t>();
    view.storage = it->second;
    view.storage_index = id;
    view.storage_key = "data/" + std::to_string(id);
    view.requires_grad = spec.attr("requires_grad").cast<bool>();
    view.is_parameter = spec.attr("is_parameter").cast<bool>();
    view.Validate();
    return arena.Tensor(std::move(view));
  }
};

// ---------------------------------------------------------------------------------------------
// trove.data: a .psk.d dataset and its batches as numpy arrays (src/python/trove/data.py).

// numpy's spelling of a leaf's on-disk element type; bfloat16 as its bits (data.py views them).
const char* NumpyDTypeOf(const trove::pskd::Leaf& leaf) {
  switch (leaf.dtype()) {
    case trove::DType::kUInt8: return "u1";
    case trove::DType::kUInt16: return "<u2";
    case trove::DType::kUInt32: return "<u4";
    case trove::DType::kUInt64: return "<u8";
    case trove::DType::kFloat32: return "<f4";
    case trove::DType::kBFloat16: return "<u2";
    default: return "<f8";
  }
}

// An index leaf handed to torch as int64 (torch 1.13 has no uint16/32/64, and embeddings and
// losses take int64); a width-8 leaf already is int64's bits, its values being below a bound <= 2^63.
bool Widened(const trove::pskd::Leaf& leaf, bool widen) { return widen && leaf.kind == trove::pskd::LeafKind::kIndex; }

void RequireInt64Bound(const trove::pskd::Leaf& leaf, size_t k) {
  if (leaf.bound > (uint64_t{1} << 63)) {
    trove::Fail(ErrorCode::kUnsupported, "leaf " + std::to_string(k) + " (" + leaf.TypeText() +
                                             "): its indices do not all fit torch.int64");
  }
}

// Bytes handed to numpy that need no zeroing (every byte is written before they are handed out).
struct HeapBytes {
  std::unique_ptr<uint8_t[]> data;
  explicit HeapBytes(uint64_t size) : data(new uint8_t[size]) {}
};

// n index elements of `width` bytes each to int64.
HeapBytes WidenIndices(const uint8_t* src, uint64_t n, uint32_t width) {
  HeapBytes out(n * 8);
  int64_t* dst = reinterpret_cast<int64_t*>(out.data.get());
  auto convert = [&](auto zero) {
    using T = decltype(zero);
    for (uint64_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, src + i * sizeof(T), sizeof(T));
      dst[i] = static_cast<int64_t>(v);
    }
  };
  switch (width) {
    case 1: convert(uint8_t{}); break;
    case 2: convert(uint16_t{}); break;
    case 4: convert(uint32_t{}); break;
    default: std::memcpy(dst, src, n * 8); break;
  }
  return out;
}

uint8_t* DataOf(std::vector<uint8_t>& v) { return v.data(); }
uint8_t* DataOf(HeapBytes& b) { return b.data.get(); }

std::vector<py::ssize_t> BatchShape(uint64_t n, const trove::pskd::Leaf& leaf) {
  std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(n)};
  for (int64_t d : leaf.shape()) shape.push_back(static_cast<py::ssize_t>(d));
  return shape;
}

// Strides in bytes of a leaf's dims inside one sample (row-major), after the batch axis's.
std::vector<py::ssize_t> BatchStrides(uint64_t batch_stride, const trove::pskd::Leaf& leaf, uint64_t element) {
  const std::vector<int64_t> dims = leaf.shape();
  std::vector<py::ssize_t> strides(dims.size() + 1);
  strides[0] = static_cast<py::ssize_t>(batch_stride);
  py::ssize_t acc = static_cast<py::ssize_t>(element);
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i + 1] = acc;
    acc *= static_cast<py::ssize_t>(dims[i]);
  }
  return strides;
}

// A C-contiguous array owning `bytes` (a std::vector or HeapBytes, moved: no copy).
template <class Bytes>
py::array OwningArray(Bytes&& bytes, const char* dtype, uint64_t n, const trove::pskd::Leaf& leaf) {
  auto* owned = new std::decay_t<Bytes>(std::move(bytes));
  py::capsule base(owned, [](void* p) { delete static_cast<std::decay_t<Bytes>*>(p); });
  py::dtype dt(dtype);
  const uint64_t element = static_cast<uint64_t>(dt.itemsize());
  return py::array(dt, BatchShape(n, leaf), BatchStrides(leaf.elements * element, leaf, element), DataOf(*owned), base);
}

class PyDataset {
 public:
  explicit PyDataset(trove::pskd::Dataset data) : data_(data), loader_(std::move(data)) {}

  const trove::pskd::Dataset& data() const { return data_; }

  // The samples at `indices` stacked, one array per leaf ([n, dims...]). Consecutive samples of one
  // shard are views of a private mapping of just their bytes, made for this batch, where the
  // elements are aligned: no copy (the pages are the page cache's until written), and a write into
  // the batch changes neither the file nor any other batch, as with a copy. Other batches are
  // gathered by the batch loader, prefetching `next`. Index leaves are int64 with `widen`, else
  // their on-disk unsigned type. E9003/E9004 as the loader.
  py::list Batch(const std::vector<uint64_t>& indices, const std::vector<uint64_t>& next, bool widen) {
    const trove::pskd::SampleType& type = data_.type();
    if (widen) {
      for (size_t k = 0; k < type.leaves.size(); ++k) RequireInt64Bound(type.leaves[k], k);
    }
    py::list out;
    if (!indices.empty() && Consecutive(indices)) {
      const auto [shard, local] = data_.Locate(indices.front());
      const auto last = data_.Locate(indices.back());
      if (last.first == shard && ViewableBytes(shard, local, indices.size(), widen) >= kMinViewBytes) {
        const uint8_t* first = nullptr;
        if (std::shared_ptr<PrivateMap> map = MapBatch(shard, local, indices.size(), &first)) {
          return Views(map, first, shard, local, indices, widen);
        }
      }
    }
    // The gather buffers are kept per thread; leaves handed out as they are leave with their buffer.
    thread_local trove::pskd::Batch batch;
    std::vector<std::optional<HeapBytes>> widened(type.leaves.size());
    Released([&] {
      loader_.Load(indices, batch, next);
      for (size_t k = 0; k < type.leaves.size(); ++k) {
        const trove::pskd::Leaf& leaf = type.leaves[k];
        if (Widened(leaf, widen) && leaf.element_bytes != 8) {
          widened[k] = WidenIndices(batch.leaves[k].data(), indices.size() * leaf.elements, leaf.element_bytes);
        }
      }
    });
    for (size_t k = 0; k < type.leaves.size(); ++k) {
      const trove::pskd::Leaf& leaf = type.leaves[k];
      const char* dtype = Widened(leaf, widen) ? "<i8" : NumpyDTypeOf(leaf);
      out.append(widened[k] ? OwningArray(std::move(*widened[k]), dtype, indices.size(), leaf)
                            : OwningArray(std::move(batch.leaves[k]), dtype, indices.size(), leaf));
    }
    return out;
  }

 private:
  // A batch is mapped only when its views would hold this much: below it, mapping it (open, mmap,
  // munmap: some 30 µs on the benchmark machine) costs more than copying it (a 16 KiB batch: twice
  // the time of the gather; a 256 KiB one: a tenth).
  static constexpr uint64_t kMinViewBytes = uint64_t{64} << 10;

  // A leaf of samples starting at `at` (an address, or a file offset: mappings are page-aligned)
  // can be handed out as a strided view: its elements aligned, and in the type handed out.
  bool Viewable(const trove::pskd::Leaf& leaf, uintptr_t at, bool widen) const {
    const uint64_t element = leaf.element_bytes;
    return (!Widened(leaf, widen) || element == 8) && data_.type().sample_bytes % element == 0 &&
           (at + leaf.offset) % element == 0;
  }

  uint64_t ViewableBytes(size_t shard, uint64_t local, uint64_t n, bool widen) {
    const trove::pskd::PskdFile& file = *Released([&] { return &data_.Shard(shard); });
    const uint64_t offset = file.header().data_offset + local * data_.type().sample_bytes;
    uint64_t bytes = 0;
    for (const trove::pskd::Leaf& leaf : data_.type().leaves)
      if (Viewable(leaf, offset, widen)) bytes += n * leaf.bytes;
    return bytes;
  }

  static bool Consecutive(const std::vector<uint64_t>& indices) {
    for (size_t i = 1; i < indices.size(); ++i)
      if (indices[i] != indices[0] + i) return false;
    return true;
  }

  // Samples local .. local + n - 1 of one shard, from their private mapping (`first`: the first one).
  py::list Views(const std::shared_ptr<PrivateMap>& map, const uint8_t* first, size_t shard, uint64_t local,
                 const std::vector<uint64_t>& indices, bool widen) {
    const trove::pskd::SampleType& type = data_.type();
    const uint64_t n = indices.size(), sample = type.sample_bytes;
    auto viewable = [&](const trove::pskd::Leaf& leaf) {
      return Viewable(leaf, reinterpret_cast<uintptr_t>(first), widen);
    };
    std::vector<std::optional<HeapBytes>> copies(type.leaves.size());
    Released([&] {
      for (size_t k = 0; k < type.leaves.size(); ++k) {
        const trove::pskd::Leaf& leaf = type.leaves[k];
        if (leaf.kind == trove::pskd::LeafKind::kIndex) {
          for (uint64_t b = 0; b < n; ++b) {
            // What is checked is what is handed out: the private mapping's bytes.
            if (trove::pskd::MaxIndex(leaf, first + b * sample + leaf.offset, leaf.elements) >= leaf.bound) {
              data_.CheckIndices(indices[b]);  // names the sample, leaf and element
              trove::pskd::FailPskd(trove::pskd::PskdCode::kBadValue,
                                    data_.shards()[shard].path + ": sample " + std::to_string(local + b) +
                                        ", leaf " + std::to_string(k) + ": an index is not below " +
                                        std::to_string(leaf.bound));
            }
          }
        }
        if (viewable(leaf)) continue;
        HeapBytes gathered(n * leaf.bytes);
        for (uint64_t b = 0; b < n; ++b) std::memcpy(gathered.data.get() + b * leaf.bytes, first + b * sample + leaf.offset, leaf.bytes);
        copies[k] = Widened(leaf, widen) && leaf.element_bytes != 8
                        ? WidenIndices(gathered.data.get(), n * leaf.elements, leaf.element_bytes)
                        : std::move(gathered);
      }
    });
    if (map->changed()) trove::FailChangedWhileRead(map->path);
    py::list out;
    for (size_t k = 0; k < type.leaves.size(); ++k) {
      const trove::pskd::Leaf& leaf = type.leaves[k];
      const char* dtype = Widened(leaf, widen) ? "<i8" : NumpyDTypeOf(leaf);
      if (!viewable(leaf)) {
        out.append(OwningArray(std::move(*copies[k]), dtype, n, leaf));
        continue;
      }
      auto* holder = new std::shared_ptr<PrivateMap>(map);
      py::capsule base(holder, [](void* p) { delete static_cast<std::shared_ptr<PrivateMap>*>(p); });
      out.append(py::array(py::dtype(dtype), BatchShape(n, leaf), BatchStrides(sample, leaf, leaf.element_bytes),
                           first + leaf.offset, base));
    }
    return out;
  }

  // A private mapping of samples local .. local + n - 1 of shard k, for one batch (`first` set to
  // the first one), or null when the shard is not the file the dataset read (the batch is then
  // gathered, and the loader says what changed). The first time, the file's size and header bytes
  // must be the library mapping's; later, it must be that same file (device, inode, size).
  std::shared_ptr<PrivateMap> MapBatch(size_t k, uint64_t local, uint64_t n, const uint8_t** first) {
    const trove::pskd::PskdFile& file = *Released([&] { return &data_.Shard(k); });
    const std::string& path = data_.shards()[k].path;
    // Non-blocking: a pipe put in the shard's place since must not hold the open up (fstat refuses it).
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return nullptr;
    struct stat st {};
    Identity& id = identity_[k];
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && !id.checked) {
      id.checked = true;
      const uint64_t header = file.header().data_offset;
      std::vector<uint8_t> head(header);
      id.ok = static_cast<uint64_t>(st.st_size) == file.bytes().size() &&
              ::pread(fd, head.data(), header, 0) == static_cast<ssize_t>(header) &&
              Guarded([&] { return std::memcmp(head.data(), file.bytes().data(), header) == 0; });
      id.dev = st.st_dev;
      id.ino = st.st_ino;
    }
    if (!id.ok || st.st_dev != id.dev || st.st_ino != id.ino || static_cast<uint64_t>(st.st_size) != file.bytes().size()) {
      ::close(fd);
      return nullptr;
    }
    const uint64_t offset = file.header().data_offset + local * data_.type().sample_bytes;
    const uint64_t start = offset / g_page * g_page, length = offset - start + n * data_.type().sample_bytes;
    auto map = MapDescriptorPrivately(fd, start, length, path);
    ::close(fd);
    if (!map) return nullptr;
    *first = map->base + (offset - start);
    return map;
  }

  struct Identity {
    bool checked = false, ok = false;
    dev_t dev = 0;
    ino_t ino = 0;
  };

  trove::pskd::Dataset data_;
  trove::pskd::BatchLoader loader_;
  std::map<size_t, Identity> identity_;  // by shard, once a batch of it was viewed
};

py::object LeafTree(const trove::pskd::SampleType& type, uint32_t node, int depth) {
  const trove::pskd::TypeNode& n = type.nodes.at(node);
  if (!n.is_tuple) return py::int_(n.leaf);
  if (depth > static_cast<int>(trove::pskd::kMaxTypeDepth)) trove::Fail(ErrorCode::kLimit, "a sample type nested too deep");
  py::list children;
  for (uint32_t c : n.children) children.append(LeafTree(type, c, depth + 1));
  return children;
}

trove::pskd::PipelineSpec SpecOf(uint64_t batch, std::optional<uint64_t> seed, std::optional<uint64_t> take) {
  trove::pskd::PipelineSpec spec;
  spec.batch = batch;
  spec.shuffle_seed = seed;
  spec.take = take;
  return spec;
}

std::vector<uint64_t> IndicesOf(const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& a) {
  if (a.ndim() != 1) trove::Fail(ErrorCode::kUsage, "sample indices must be a 1-D array");
  return std::vector<uint64_t>(a.data(), a.data() + a.size());
}

// ---------------------------------------------------------------------------------------------
// Reports as dicts (__init__.py wraps them in small classes).

py::dict ReportToDict(const trove::CheckReport& r) {
  py::list findings;
  for (const auto& f : r.findings) {
    py::dict d;
    d["severity"] = std::string(trove::SeverityName(f.severity));
    d["entry"] = Text(f.entry);
    d["offset"] = f.offset;
    d["message"] = Text(f.message);
    d["key"] = Text(f.key_path);
    d["call"] = Text(f.call);
    findings.append(d);
  }
  py::list globals;
  for (const auto& g : r.globals) {
    py::dict d;
    d["entry"] = Text(g.entry);
    d["name"] = Text(g.name);
    d["offset"] = g.offset;
    d["allowed"] = g.allowed;
    globals.append(d);
  }
  py::dict out;
  out["path"] = Text(r.path);
  out["format"] = r.format;
  out["entries_checked"] = r.entries_checked;
  out["bytes_checked"] = r.bytes_checked;
  out["bytes_without_checksum"] = r.bytes_without_checksum;
  out["findings"] = findings;
  out["globals"] = globals;
  return out;
}

py::object Optional(const std::optional<double>& d) { return d ? py::object(py::float_(*d)) : py::object(py::none()); }

py::dict StatsToDict(const trove::TensorStats& s) {
  py::dict d;
  d["count"] = s.count;
  d["finite"] = s.finite;
  d["min"] = Optional(s.min);
  d["max"] = Optional(s.max);
  d["mean"] = Optional(s.mean);
  d["std"] = Optional(s.std);
  d["mean_abs"] = Optional(s.mean_abs);
  d["zeros"] = s.zeros;
  d["nan"] = s.nan;
  d["pos_inf"] = s.pos_inf;
  d["neg_inf"] = s.neg_inf;
  d["subnormal"] = s.subnormal ? py::object(py::int_(*s.subnormal)) : py::object(py::none());
  return d;
}

py::dict Metadata(const Document& doc) {
  py::list unknown;
  for (const trove::UnknownObject& o : trove::FindUnknownObjects(doc)) {
    py::dict u;
    u["key"] = Text(o.key);
    u["class"] = Text(o.node->type_name);
    unknown.append(u);
  }
  py::dict props;
  // Typed as `trove info --json` writes them: counts as int, flags as bool, the rest as str.
  for (const auto& [k, v] : doc.properties) {
    switch (v.type) {
      case trove::PropertyValue::Type::kInteger: props[Text(k)] = py::int_(v.integer); break;
      case trove::PropertyValue::Type::kBoolean: props[Text(k)] = py::bool_(v.boolean); break;
      case trove::PropertyValue::Type::kText: props[Text(k)] = Text(v.text); break;
    }
  }
  py::list records;
  for (const auto& r : doc.records) {
    py::dict d;
    d["name"] = Text(r.name);
    d["offset"] = r.offset;
    d["size"] = r.size;
    d["stored_size"] = r.stored_size;
    d["method"] = r.method;
    d["crc32"] = r.crc32;
    records.append(d);
  }
  std::map<int64_t, int> sharing;
  for (const auto& t : doc.tensors)
    if (t.view->storage_index >= 0) sharing[t.view->storage_index]++;
  py::list tensors;
  uint64_t total = 0;
  for (const auto& t : doc.tensors) {
    const TensorView& v = *t.view;
    total += v.nbytes();
    py::dict d;
    d["key"] = Text(t.key);
    d["dtype"] = DTypeText(v.dtype);
    d["shape"] = py::tuple(py::cast(v.shape));
    d["nbytes"] = v.nbytes();
    d["strides"] = py::tuple(py::cast(v.strides));
    d["storage_offset"] = v.storage_offset;
    d["storage"] = Text(v.storage_key);
    d["shared"] = v.storage_index >= 0 && sharing[v.storage_index] > 1;
    d["contiguous"] = v.is_contiguous();
    d["byte_order"] = v.byte_order == trove::ByteOrder::kBig ? "big" : "little";
    d["requires_grad"] = v.requires_grad;
    d["parameter"] = v.is_parameter;
    d["has_data"] = v.has_data;
    d["readable"] = trove::Info(v.dtype).readable;
    tensors.append(d);
  }
  py::dict out;
  out["format"] = doc.format;
  out["path"] = Text(doc.path);
  out["file_size"] = doc.file_size;
  out["properties"] = props;
  out["records"] = records;
  out["tensors"] = tensors;
  out["tensor_bytes"] = total;
  out["warnings"] = TextList(doc.warnings);
  out["unknown_objects"] = unknown;
  return out;
}

// max_shard_size of save and convert: None, a positive number of bytes, or a size such as "5GB"
// (the CLI's --max-shard-size); only the formats with a shard index take it.
std::optional<uint64_t> MaxShardBytes(py::handle max_shard_size, trove::Format target) {
  if (max_shard_size.is_none()) return std::nullopt;
  if (target != trove::Format::kSafetensors && target != trove::Format::kPt && target != trove::Format("gguf")) {
    trove::Fail(ErrorCode::kUsage, "max_shard_size needs the 'safetensors', 'pt' or 'gguf' format");
  }
  if (PyUnicode_Check(max_shard_size.ptr())) return trove::ParseShardSize(max_shard_size.cast<std::string>());
  if (PyLong_Check(max_shard_size.ptr()) && !PyBool_Check(max_shard_size.ptr())) {
    const long long n = max_shard_size.cast<long long>();
    if (n <= 0) trove::Fail(ErrorCode::kUsage, "max_shard_size must be positive");
    return static_cast<uint64_t>(n);
  }
  trove::Fail(ErrorCode::kUsage, "max_shard_size takes a number of bytes or a size such as '5GB'");
}

// The writer settings save and convert share: the callbacks, forwarded to Python callables
// (None: not called) with the GIL taken for each call (the tensordict directory writer may call
// progress from a helper thread); a Python exception a callable raises travels through the writer
// as py::error_already_set, which abandons the write, and is raised again by pybind11. The
// callables are held by the binding's arguments for the whole call, so the std::functions (copied
// with the GIL released) hold plain handles. compression: a .tdz method name; metadata: a dict of
// str, a .safetensors file's "__metadata__".
void SetWriteSettings(trove::ConvertOptions& options, py::handle progress, py::handle note, const std::string& compression,
                      py::handle metadata) {
  if (!progress.is_none()) {
    if (!PyCallable_Check(progress.ptr())) trove::Fail(ErrorCode::kUsage, "progress must be callable (done, total)");
    options.progress = [progress](uint64_t done, uint64_t total) {
      py::gil_scoped_acquire gil;
      progress(done, total);
    };
  }
  if (!note.is_none()) {
    if (!PyCallable_Check(note.ptr())) trove::Fail(ErrorCode::kUsage, "note must be callable (text)");
    options.note = [note](const std::string& text) {
      py::gil_scoped_acquire gil;
      note(Text(text));
    };
  }
  options.compression = trove::ZipMethodFromName(compression);
  if (!metadata.is_none()) {
    if (!PyDict_Check(metadata.ptr())) trove::Fail(ErrorCode::kUsage, "metadata must be a dict of str to str");
    for (auto [k, v] : py::reinterpret_borrow<py::dict>(metadata)) {
      if (!PyUnicode_Check(k.ptr()) || !PyUnicode_Check(v.ptr())) trove::Fail(ErrorCode::kUsage, "metadata must be a dict of str to str");
      options.metadata.emplace_back(k.cast<std::string>(), v.cast<std::string>());
    }
  }
}

trove::ReadOptions ReadOpts(const std::string& policy) {
  trove::ReadOptions r;
  if (policy == "strict") r.pickle_policy = trove::PicklePolicy::kStrict;
  else if (policy == "default") r.pickle_policy = trove::PicklePolicy::kDefault;
  else if (policy == "permissive") r.pickle_policy = trove::PicklePolicy::kPermissive;
  else trove::Fail(ErrorCode::kUsage, "policy must be 'strict', 'default' or 'permissive' (not '" + policy + "')");
  return r;
}

// GGUF metadata for File.gguf_metadata(): text decoded as UTF-8, invalid bytes replaced (U+FFFD),
// as JavaScript's and Python's lenient decoders read them.
py::str GgufText(const std::string& text) {
  PyObject* s = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace");
  if (s == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

// A value as Python holds it: numbers, bool, str; an array (element type, [items]), nested alike.
py::object GgufPython(const trove::GgufValue& v) {
  const std::string& t = v.type;
  if (t == "array" || t == "object") {
    py::list items;
    for (const trove::GgufValue& item : v.items) items.append(GgufPython(item));
    return py::make_tuple(v.element_type, items);
  }
  if (t == "string") return GgufText(v.text);
  if (t == "bool") return py::bool_(v.boolean);
  if (t == "f32" || t == "f64") return py::float_(v.real);
  if (t[0] == 'u') return py::int_(v.unsigned_integer);
  return py::int_(v.integer);
}

}  // namespace

PYBIND11_MODULE(_trove, m) {
  m.doc() = "trove's C++ core (use the `trove` package, not this module)";
  m.attr("__version__") = std::string(trove::kVersion);

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      SetPythonError(e);
    }
  });

  m.def("_register_errors", [](py::dict classes) {
    for (int c = 0; c < kErrorCodes; ++c) {
      std::string name(trove::ErrorCodeName(static_cast<ErrorCode>(c)));
      if (classes.contains(name)) g_error_classes[c] = new py::object(classes[py::str(name)]);
    }
  });
  m.def("_error_code_names", [] {
    std::vector<std::string> out;
    for (int c = 0; c < kErrorCodes; ++c) out.emplace_back(trove::ErrorCodeName(static_cast<ErrorCode>(c)));
    return out;
  });
  m.def("_install_sigbus", &InstallSigbus, py::arg("python_handler"));
  m.def("_take_changed_path", []() -> py::object {
    const int i = g_last_changed.exchange(-1);
    if (i < 0 || i >= kSlots) return py::none();
    std::lock_guard<std::mutex> lock(g_slot_mutex);
    return Text(g_slot_paths[i].empty() ? std::string("a mapped file") : g_slot_paths[i]);
  });

  py::class_<PyDocument, std::shared_ptr<PyDocument>>(m, "Document")
      .def_property_readonly("path", [](const PyDocument& d) { return Text(d.doc().path); })
      .def_property_readonly("format", [](const PyDocument& d) { return d.doc().format; })
      .def("keys", [](PyDocument& d) {
        py::list out;
        for (const auto& t : d.doc().tensors) {
          if (!d.doc().IsOptIn(t.key)) out.append(Text(t.key));  // opt-in tensors: by name
        }
        return out;
      })
      .def("contains", [](PyDocument& d, const std::string& key) { return d.doc().FindTensor(key) != nullptr; })
      .def("metadata", [](PyDocument& d) { return Metadata(d.doc()); })
      // What the warning of an open names, without building the whole metadata (trove.load's time).
      .def("unknown_classes", [](PyDocument& d) {
        std::vector<std::string> classes;
        for (const trove::UnknownObject& o : trove::FindUnknownObjects(d.doc())) classes.push_back(o.node->type_name);
        return TextList(classes);
      })
      .def("tensor_info", [](PyDocument& d, const std::string& key) {
        d.CheckChanged();
        py::tuple t = Guarded([&] { return d.TensorInfo(d.Find(key)); });
        d.CheckChanged();
        return t;
      })
      .def("tensor_meta", [](PyDocument& d, const std::string& key) { return d.TensorInfo(d.Find(key), false); })
      .def("tensor_rows_info", [](PyDocument& d, const std::string& key, int64_t start, int64_t stop) {
        d.CheckChanged();
        py::object t = Guarded([&] { return d.RowsInfo(d.Find(key), start, stop); });
        d.CheckChanged();
        return t;
      })
      // A quantized tensor's values (torch's dequantize(); ggml's dequantizers for a block type)
      // as a new array of `dtype` (float32, float16 or float64), shaped as its values
      // (File.dequantize). Holds the whole tensor's values: the caller asked for them.
      // With `out` (numpy's out=): written into that array instead, which must be of `dtype`,
      // shaped as the values, C-contiguous and writeable; it is returned.
      .def("dequantized", [](PyDocument& d, const std::string& key, const std::string& dtype, py::object out_arg) {
        d.CheckChanged();
        py::array out = Guarded([&] {
          const TensorView& v = d.Find(key);
          static const std::map<std::string, std::pair<trove::DType, const char*>> kFloats = {
              {"float32", {trove::DType::kFloat32, "<f4"}}, {"float16", {trove::DType::kFloat16, "<f2"}},
              {"float64", {trove::DType::kFloat64, "<f8"}}};
          const auto to = kFloats.find(dtype);
          if (to == kFloats.end()) trove::Fail(ErrorCode::kUsage, "dtype must be 'float32', 'float16' or 'float64' (not '" + dtype + "')");
          if (!trove::IsBlockDType(v.dtype) && !trove::Dequantizable(v)) {
            trove::Fail(ErrorCode::kUnsupported, "'" + key + "' (" + DTypeText(v.dtype) + ") is not a quantized tensor trove dequantizes");
          }
          if (!v.has_data) trove::Fail(ErrorCode::kUnsupported, "'" + key + "' has no data (a meta tensor)");
          const TensorView values = trove::CastView(v, to->second.first);  // a block type trove cannot dequantize: its reason
          std::vector<py::ssize_t> shape(values.shape.begin(), values.shape.end());
          py::array arr;
          if (out_arg.is_none()) {
            arr = py::array(py::dtype(to->second.second), shape);
          } else {
            if (!py::isinstance<py::array>(out_arg)) trove::Fail(ErrorCode::kUsage, "out must be a numpy array (not " + std::string(py::str(py::type::of(out_arg).attr("__name__"))) + ")");
            arr = py::reinterpret_borrow<py::array>(out_arg);
            const std::string want_shape = std::string(py::str(py::tuple(py::cast(shape))));
            if (!arr.dtype().is(py::dtype(to->second.second)) && !arr.dtype().equal(py::dtype(to->second.second))) {
              trove::Fail(ErrorCode::kUsage, "out has dtype " + std::string(py::str(arr.dtype())) + "; '" + key + "' dequantized is " + dtype);
            }
            if (std::vector<py::ssize_t>(arr.shape(), arr.shape() + arr.ndim()) != shape) {
              trove::Fail(ErrorCode::kUsage, "out has shape " + std::string(py::str(py::tuple(py::cast(std::vector<py::ssize_t>(arr.shape(), arr.shape() + arr.ndim()))))) + "; '" + key + "' has " + want_shape);
            }
            if (!(arr.flags() & py::array::c_style)) trove::Fail(ErrorCode::kUsage, "out must be C-contiguous");
            if (!arr.writeable()) trove::Fail(ErrorCode::kUsage, "out is read-only");
          }
          trove::CopyTensorBytes(values, static_cast<uint8_t*>(arr.mutable_data()));
          return arr;
        });
        d.CheckChanged();
        return out;
      }, py::arg("key"), py::arg("dtype"), py::arg("out") = py::none())
      .def("tree", [](PyDocument& d, py::object tensor_fn, py::object global_fn, py::object object_fn, bool with_data,
                      py::object dict_fn, py::object scalar_fn) {
        d.CheckChanged();
        py::object out = Guarded([&] {
          ToPython conv(d, with_data, tensor_fn, global_fn, object_fn, dict_fn, scalar_fn);
          return conv.Convert(d.doc().root, 0);
        });
        d.CheckChanged();
        return out;
      }, py::arg("tensor_fn"), py::arg("global_fn"), py::arg("object_fn"), py::arg("with_data"),
         py::arg("dict_fn") = py::none(), py::arg("scalar_fn") = py::none())
      .def("check_changed", &PyDocument::CheckChanged)
      .def("_mappings", &PyDocument::Mappings);

  m.def("_open", [](const std::string& path, const std::string& policy) {
    const trove::ReadOptions read = ReadOpts(policy);
    Document doc = Released([&] { return trove::Open(path, read); });
    return std::make_shared<PyDocument>(std::move(doc));
  }, py::arg("path"), py::arg("policy") = "default");

  m.def("_save", [](py::object tree, const std::string& path, const std::string& format, py::object spec_type,
                    py::object progress, py::object note, const std::string& compression, py::object metadata,
                    py::object max_shard_size, py::object value_type, bool allow_expand) {
    trove::ConvertOptions options;
    SetWriteSettings(options, progress, note, compression, metadata);
    options.allow_expand = allow_expand;
    const trove::Format target = trove::TargetFormat(path, format);
    options.max_shard_bytes = MaxShardBytes(max_shard_size, target);
    Document doc;
    doc.format = "python";
    doc.path = "<python objects>";
    FromPython conv(*doc.arena, spec_type, value_type);
    doc.root = conv.Convert(tree, 0);
    doc.tensors = trove::CollectTensors(doc.root);
    Released([&] { trove::ConvertDocument(doc, path, target, options); });
  }, py::arg("obj"), py::arg("path"), py::arg("format"), py::arg("spec_type"),
     py::arg("progress") = py::none(), py::arg("note") = py::none(), py::arg("compression") = "",
     py::arg("metadata") = py::none(), py::arg("max_shard_size") = py::none(), py::arg("value_type") = py::none(),
     py::arg("allow_expand") = false);

  m.def("_gguf_metadata", [](const std::string& path) {
    const std::vector<trove::GgufMetadataEntry> entries = Released([&] { return trove::ReadGgufMetadata(path); });
    py::dict out;
    for (const trove::GgufMetadataEntry& e : entries) {
      out[GgufText(e.key)] = py::make_tuple(e.value.type, GgufPython(e.value));
    }
    return out;
  }, py::arg("path"));

  m.def("_verify", [](const std::string& path) { return ReportToDict(Released([&] { return trove::Verify(path); })); });
  m.def("_scan", [](const std::string& path) { return ReportToDict(Released([&] { return trove::Scan(path); })); });
  m.def("_convert", [](const std::string& src, const std::string& dst, const std::string& to,
                       std::vector<std::string> keys, const std::string& dtype, bool drop_values,
                       py::object progress, py::object note, const std::string& compression, py::object metadata,
                       py::object max_shard_size, const std::string& policy, bool keep_unknown, bool drop_unknown,
                       bool dequantize, std::vector<std::string> exclude,
                       std::vector<std::pair<std::string, std::string>> renames, bool dedupe_tied, bool allow_expand) {
    trove::ConvertOptions options;
    options.allow_expand = allow_expand;
    options.dequantize = dequantize;
    options.exclude = std::move(exclude);
    options.renames = std::move(renames);
    options.dedupe_tied = dedupe_tied;
    SetWriteSettings(options, progress, note, compression, metadata);
    options.read = ReadOpts(policy);
    if (keep_unknown && drop_unknown) trove::Fail(ErrorCode::kUsage, "keep_unknown and drop_unknown exclude each other");
    options.keep_unknown = keep_unknown;
    options.drop_unknown = drop_unknown;
    const trove::Format target = trove::TargetFormat(dst, to);
    options.max_shard_bytes = MaxShardBytes(max_shard_size, target);
    options.drop_values = drop_values;
    options.keys = std::move(keys);
    if (!dtype.empty()) {
      auto d = trove::DTypeFromName(dtype);
      if (!d) trove::Fail(ErrorCode::kUsage, "unknown dtype '" + dtype + "'");
      options.floating_dtype = *d;
    }
    Released([&] { trove::Convert(src, dst, target, options); });
  }, py::arg("src"), py::arg("dst"), py::arg("to"), py::arg("keys"), py::arg("dtype"),
     py::arg("drop_values"), py::arg("progress") = py::none(), py::arg("note") = py::none(),
     py::arg("compression") = "", py::arg("metadata") = py::none(), py::arg("max_shard_size") = py::none(),
     py::arg("policy") = "default", py::arg("keep_unknown") = false, py::arg("drop_unknown") = false,
     py::arg("dequantize") = false, py::arg("exclude") = std::vector<std::string>{},
     py::arg("renames") = std::vector<std::pair<std::string, std::string>>{}, py::arg("dedupe_tied") = false,
     py::arg("allow_expand") = false);
  m.def("_diff", [](const std::string& a, const std::string& b, double rtol, double atol) {
    trove::DiffOptions options;
    options.rtol = rtol;
    options.atol = atol;
    trove::DiffReport r = Released([&] {
      Document da = trove::Open(a), db = trove::Open(b);
      return trove::Diff(da, db, options);
    });
    py::list tensors;
    for (const auto& t : r.tensors) {
      py::dict d;
      d["key"] = Text(t.key);
      d["a_dtype"] = t.a_dtype;
      d["b_dtype"] = t.b_dtype;
      d["a_shape"] = py::tuple(py::cast(t.a_shape));
      d["b_shape"] = py::tuple(py::cast(t.b_shape));
      d["comparable"] = t.comparable;
      d["identical"] = t.identical;
      d["within_tolerance"] = t.within_tolerance;
      d["max_abs"] = t.max_abs;
      d["l2"] = t.l2;
      d["l2_a"] = t.l2_a;
      d["relative_l2"] = t.l2_a > 0 ? py::object(py::float_(t.l2 / t.l2_a)) : py::object(py::none());
      d["elements_differing"] = t.elements_differing;
      tensors.append(d);
    }
    py::list values;
    for (const auto& v : r.values) {
      py::dict d;
      d["key"] = Text(v.key);
      // None for the side where the key is absent (the JSON's "only_in_a"/"only_in_b").
      d["a"] = v.a ? py::object(Text(v.a_text)) : py::object(py::none());
      d["b"] = v.b ? py::object(Text(v.b_text)) : py::object(py::none());
      values.append(d);
    }
    py::dict out;
    out["only_in_a"] = TextList(r.only_in_a);
    out["only_in_b"] = TextList(r.only_in_b);
    out["tensors"] = tensors;
    out["values"] = values;
    out["bytes_compared"] = r.bytes_compared;
    out["equal"] = r.equal();
    return out;
  });
  m.def("_set_threads", [](uint32_t threads) { trove::SetThreadCount(threads); });
  m.def("_get_threads", [] { return trove::ThreadCount(); });
  m.def("_set_io", [](const std::string& mode) {
    const std::optional<trove::IoMode> parsed = trove::ParseIoMode(mode);
    if (!parsed) trove::Fail(trove::ErrorCode::kUsage, "io must be 'auto', 'mmap' or 'pread' (not '" + mode + "')");
    trove::SetIoMode(*parsed);
  });
  m.def("_get_io", [] { return std::string(trove::IoModeName(trove::GetIoMode())); });
  m.def("_stats", [](const std::string& path, std::vector<std::string> keys, uint32_t threads) {
    std::vector<std::string> names;
    std::vector<std::string> skipped;
    std::vector<trove::TensorStats> stats = Released([&] {
      Document doc = trove::Open(path);
      std::vector<const TensorView*> views;
      for (const auto& t : doc.tensors) {
        bool wanted = keys.empty();
        for (const auto& k : keys) wanted = wanted || trove::KeyMatches(k, t.key);
        if (!wanted) continue;
        if (!t.view->has_data || trove::StatsUnsupportedReason(*t.view)) {
          skipped.push_back(t.key);
          continue;
        }
        names.push_back(t.key);
        views.push_back(t.view);
      }
      trove::StatsOptions options;
      options.threads = threads;
      options.guard_truncation = true;
      return trove::ComputeStats(views, options, names);
    });
    py::dict out;
    for (size_t i = 0; i < names.size(); ++i) out[Text(names[i])] = StatsToDict(stats[i]);
    return py::make_tuple(out, TextList(skipped));
  });

  py::class_<PyDataset, std::shared_ptr<PyDataset>>(m, "PskdDataset")
      .def_property_readonly("count", [](const PyDataset& d) { return d.data().count(); })
      .def_property_readonly("type", [](const PyDataset& d) { return Text(d.data().type().text); })
      .def("leaves", [](const PyDataset& d) {
        py::list out;
        for (const trove::pskd::Leaf& leaf : d.data().type().leaves) {
          const bool index = leaf.kind == trove::pskd::LeafKind::kIndex;
          py::dict x;
          x["type"] = Text(leaf.TypeText());
          x["dtype"] = DTypeText(leaf.dtype());
          x["shape"] = py::tuple(py::cast(leaf.shape()));
          x["kind"] = index ? "index" : "real";
          x["bound"] = index ? py::object(py::int_(leaf.bound)) : py::object(py::none());
          x["encoding"] = std::string(trove::pskd::EncodingName(leaf.encoding));
          out.append(x);
        }
        return out;
      })
      .def("tree", [](const PyDataset& d) { return LeafTree(d.data().type(), 0, 0); })
      .def("shards", [](const PyDataset& d) {
        py::list out;
        for (const trove::pskd::ShardInfo& s : d.data().shards()) out.append(py::make_tuple(Text(s.path), s.count, s.first));
        return out;
      })
      .def("batch", [](PyDataset& d, const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& indices,
                       const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& next, bool widen) {
        return d.Batch(IndicesOf(indices), IndicesOf(next), widen);
      }, py::arg("indices"), py::arg("next"), py::arg("widen"))
      // `count`: the pipeline over that many samples instead of the dataset's (the windows of a token
      // stream, trove.data's windows= view).
      .def("order", [](const PyDataset& d, uint64_t batch, std::optional<uint64_t> seed, uint64_t epoch,
                       std::optional<uint64_t> take, uint64_t rank, uint64_t world_size, uint64_t worker, uint64_t workers,
                       std::optional<uint64_t> count) {
        const trove::pskd::Pipeline pipeline(count.value_or(d.data().count()), SpecOf(batch, seed, take));
        const trove::pskd::Partition part{rank, world_size, worker, workers};
        auto* order = new std::vector<uint64_t>(Released([&] { return pipeline.Order(epoch, part); }));
        py::capsule base(order, [](void* p) { delete static_cast<std::vector<uint64_t>*>(p); });
        const py::ssize_t rows = static_cast<py::ssize_t>(order->size() / batch), cols = static_cast<py::ssize_t>(batch);
        return py::array_t<uint64_t>({rows, cols}, {cols * 8, py::ssize_t{8}}, order->data(), base);
      }, py::arg("batch"), py::arg("seed"), py::arg("epoch"), py::arg("take"), py::arg("rank"), py::arg("world_size"),
         py::arg("worker"), py::arg("workers"), py::arg("count") = py::none())
      .def("batches_per_rank", [](const PyDataset& d, uint64_t batch, std::optional<uint64_t> take, uint64_t world_size,
                                  std::optional<uint64_t> count) {
        return trove::pskd::Pipeline(count.value_or(d.data().count()), SpecOf(batch, std::nullopt, take)).batches_per_rank(world_size);
      }, py::arg("batch"), py::arg("take"), py::arg("world_size"), py::arg("count") = py::none());

  m.def("_data_open", [](const std::vector<std::string>& sources) {
    trove::pskd::Dataset data = Released([&] { return trove::pskd::Dataset::Open(sources); });
    return std::make_shared<PyDataset>(std::move(data));
  }, py::arg("sources"));
}
