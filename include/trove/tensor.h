// trove/tensor.h: TensorView, a typed strided window onto stored bytes.
//
// A TensorView never owns a copy of stored data: `storage` is the whole storage it views (usually
// a slice of a mapped file) and dtype/shape/strides/storage_offset say which elements are the
// tensor, all counted in elements as torch does. Several views may share one storage (tied
// weights, transposes, slices); `storage_index` identifies the storage within its document.
// A contiguous or byte-swapped copy is made only when asked for (Contiguous*, ForEachChunk).
// Views are immutable values; concurrent reads are safe.
#pragma once

#include <complex>
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <type_traits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trove/dtype.h"
#include "trove/element_codec.h"
#include "trove/error.h"
#include "trove/quantizer.h"
#include "trove/shared_bytes.h"

namespace trove {

enum class ByteOrder : uint8_t { kLittle, kBig };

// Caps on what a file may declare for one tensor.
// Far above any real model (torch itself has no limit, numpy caps at 64); a hostile rank only
// costs memory proportional to it.
inline constexpr size_t kMaxTensorRank = 64;

// The expansion rule: how far the bytes a write produces may exceed the stored bytes they come
// from, checked before anything is written (CheckExpansion in trove/document.h; `--allow-expand`
// writes anyway). Each bound below is at least kExpandFreeBytes, so that small files never meet it.
//
// Views written whole (a format without strides or shared storage, `cat` to a pipe): a view's
// logical bytes may be up to kMaxExpandRatio times the bytes its storage holds, and so may all
// the views written together over the storages they view (each storage counted once). A
// stride-0 view (torch's expand) of a few bytes can be terabytes logically, and a storage shared
// by a hundred thousand keys is written a hundred thousand times (tensordict and safetensors
// cannot share). Real views (transposes, slices, a broadcast bias, tied weights) stay far below.
inline constexpr uint64_t kMaxExpandRatio = 16;
inline constexpr uint64_t kExpandFreeBytes = uint64_t{64} << 20;
// Compressed storages (deflated .pt records, compressed .tdz leaves), written in any format: all
// of them together may inflate to at most kMaxInflateRatio times the bytes every storage written
// occupies in the file. A run of one byte value is what reaches deflate's maximum (about
// 1032:1; bzip2 and lzma go further), and it is what a decompression bomb is made of. Data real
// checkpoints hold compresses far less (float weights about 1.1:1, integer ids and masks under
// 10:1), and a file mixing it with constant buffers (optimizer moments at step 0, a
// preallocated replay buffer) stays far below 256:1 taken whole, unless nearly all of it is one
// value. Judged over the whole file (a bomb split into many entries is still a bomb; a zero
// buffer beside real weights is not) and above kExpandFreeBytes, as Apache POI's ZipSecureFile
// judges a ratio only above a size floor.
inline constexpr uint64_t kMaxInflateRatio = 256;
// The rule's inflation test: `inflated` bytes from compressed data whose file holds `occupied`
// bytes of what is written (every bound saturates instead of wrapping).
constexpr bool InflatesBeyondRule(uint64_t inflated, uint64_t occupied) {
  const uint64_t bound = occupied > UINT64_MAX / kMaxInflateRatio ? UINT64_MAX : occupied * kMaxInflateRatio;
  return inflated > (bound > kExpandFreeBytes ? bound : kExpandFreeBytes);
}

// What a cast (CastView) did to the values it converted, counted by every pass that streams all
// of them (the last whole pass is kept, so a writer that streams a tensor twice counts it once).
struct CastLosses {
  std::atomic<uint64_t> overflowed{0};   // finite, became infinite (or NaN where the dtype has no inf)
  std::atomic<uint64_t> underflowed{0};  // nonzero, became zero
  std::atomic<uint64_t> sign_lost{0};    // negative, became positive or unsigned (a zero without sign)
  std::atomic<bool> counted{false};      // a whole pass has run
};

struct TensorView {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;   // in elements
  int64_t storage_offset = 0;     // in elements
  ByteOrder byte_order = ByteOrder::kLittle;
  SharedBytes storage;            // the whole storage; bytes in `byte_order`
  int64_t storage_index = -1;     // which storage of the document (-1: none, e.g. meta tensors)
  std::string storage_key;        // the container's name for the storage ("data/0", "obs.memmap")
  bool requires_grad = false;
  bool is_parameter = false;
  bool has_data = true;           // false for meta tensors (shape only)
  // A torch storage saved by itself (torch.save(t.untyped_storage())): one dimension, all of its
  // elements; .pt writes it back as a storage, the other formats as the 1-D tensor it is.
  bool bare_storage = false;
  // A bare storage of bytes without a dtype (torch.storage.UntypedStorage in its persistent id):
  // read as uint8, written back as an UntypedStorage, which torch.load gives back as such.
  bool untyped_storage = false;
  // A converting view (trove convert --dtype): no storage of its own; its bytes are
  // `cast_source`'s elements converted to `dtype` as they stream (see CastView).
  std::shared_ptr<const TensorView> cast_source;
  std::shared_ptr<CastLosses> cast_losses;  // set by CastView for a floating target
  // A quantized dtype's quantizer (trove/quantizer.h), from the reader; none for other dtypes.
  std::shared_ptr<const Quantizer> quantizer;

  int64_t numel() const;
  uint64_t nbytes() const { return static_cast<uint64_t>(numel()) * ElementSize(dtype); }
  bool is_contiguous() const;     // C-contiguous (row-major), any offset

  // Throws Error(kCorrupt) unless rank <= kMaxTensorRank, sizes >= 0, strides >= 0, offset >= 0,
  // every product fits in 63 bits and every element lies inside `storage`. An empty view (a
  // size 0) reaches no element: any offset >= 0 passes, as torch takes it. Readers call this on
  // every view they make; the other members assume it passed.
  void Validate() const;

  // Calls fn with consecutive chunks that together are the tensor's C-contiguous little-endian
  // bytes (bool as 0/1 bytes, as stored). Zero-copy when the view is contiguous and little-endian;
  // otherwise gathers/swaps through a bounded scratch buffer (chunk_bytes).
  void ForEachChunk(const std::function<void(const uint8_t*, size_t)>& fn,
                    size_t chunk_bytes = size_t{1} << 20) const;

  // The C-contiguous little-endian bytes as a zero-copy view of the storage, when the tensor is
  // stored that way (no gather, swap or cast needed); none otherwise. A tensor that is its whole
  // storage keeps the storage's recorded CRC-32.
  std::optional<SharedBytes> StoredBytes() const;

  // The C-contiguous little-endian bytes: a view when possible, else one owned copy.
  SharedBytes ContiguousLittleEndian() const;

  // One element by its index (one coordinate per dimension, each checked against the shape),
  // decoded from whatever the view stores: any dtype trove reads, big-endian, strided, broadcast.
  // Reads the element in place (for a mapped file: the one page it is on). Throws Error(kUsage)
  // for a wrong number of coordinates or one out of range, Error(kUnsupported) for quantized or
  // bit types, and for a meta tensor.
  ElementValue Element(std::span<const int64_t> index) const;

  // The element at (i, j, ...) as T: a floating type, an integer type, bool, or std::complex<>.
  // bfloat16, float16 and the float8/float4 formats convert exactly to float or double; integers
  // convert as static_cast does. A complex element asked for as a real type is Error(kUnsupported).
  //   float w = view.At<float>(3, 7);
  template <class T, class... Index>
  T At(Index... index) const {
    const int64_t coords[] = {static_cast<int64_t>(index)...};
    return As<T>(Element(std::span<const int64_t>(coords, sizeof...(Index))));
  }
  template <class T>
  static T As(const ElementValue& e) {
    using Kind = ElementValue::Kind;
    if constexpr (std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>) {
      using R = typename T::value_type;
      switch (e.kind) {
        case Kind::kComplex: case Kind::kFloatPair: return T(static_cast<R>(e.re), static_cast<R>(e.im));
        default: return T(As<R>(e), R(0));
      }
    } else {
      static_assert(std::is_arithmetic_v<T>, "At<T>: T is an arithmetic type or std::complex");
      switch (e.kind) {
        case Kind::kFloat: return static_cast<T>(e.re);
        case Kind::kInt: return static_cast<T>(e.i);
        case Kind::kUInt: return static_cast<T>(e.u);
        case Kind::kBool: return static_cast<T>(e.b);
        case Kind::kComplex: case Kind::kFloatPair: break;
      }
      Fail(ErrorCode::kUnsupported, "a complex element read as a real number (use At<std::complex<double>>)");
    }
  }

  // Every element in C order as T, converted as At<T> converts (any view: strided, broadcast,
  // big-endian, cast; bfloat16/float16/float8 exactly to float). A copy: numel() Ts in memory.
  //   std::vector<float> w = view.ToVector<float>();
  template <class T>
  std::vector<T> ToVector() const {
    std::vector<T> out;
    out.reserve(static_cast<size_t>(numel()));
    const size_t size = ElementSize(dtype);
    ForEachChunk([&](const uint8_t* p, size_t n) {
      for (size_t i = 0; i + size <= n; i += size) out.push_back(As<T>(DecodeElement(dtype, p + i)));
    });
    return out;
  }
  // The elements in place, zero-copy, as a span of T over the mapped file: only when the view is
  // stored exactly so (its dtype is DTypeOf<T>(), C-contiguous, little-endian, in memory and
  // aligned for T; a compressed .tdz leaf is inflated once and held); otherwise Error(kUnsupported)
  // saying which, so that a caller falls back to
  // ToVector. The span lives as long as the view's storage (the Document that holds it).
  //   std::span<const float> w = view.Span<float>();
  template <class T>
  std::span<const T> Span() const {
    CheckSpan(DTypeOf<T>(), alignof(T));
    return {reinterpret_cast<const T*>(first_element()), static_cast<size_t>(numel())};
  }

  // Copies elements [first, first + count) in row-major order into `out` as C-contiguous
  // little-endian bytes (count * element size): a bounded window of any view, so that two tensors
  // can be walked side by side in bounded memory. Not for converting views (cast_source).
  void CopyElements(uint64_t first, uint64_t count, uint8_t* out) const;

  // Throws unless Span<T> may view this tensor (see there): T's dtype and alignment.
  void CheckSpan(DType wanted, size_t alignment) const;

  // Pointer to the first element (storage + storage_offset * element size); for an empty view,
  // whose offset may lie anywhere, the storage's start.
  const uint8_t* first_element() const {
    if (numel() == 0) return storage.data();
    return storage.data() + static_cast<uint64_t>(storage_offset) * ElementSize(dtype);
  }
};

// Reads a view's elements in row-major order as C-contiguous little-endian bytes, window by
// window into the caller's buffer, so that two tensors can be walked side by side in bounded
// memory (trove diff). A contiguous view reads its storage through SharedBytes::Reader, so a
// compressed .tdz leaf is inflated as it is read, never held; other views gather with
// CopyElements (a strided view of deferred bytes produces them whole first: no reader makes
// one); a converting view reads its source's elements and converts them as ForEachChunk does.
// The view must outlive the reader; one thread at a time.
class Dequantizer;  // core/tensor.cpp: a quantized view's values

class ElementReader {
 public:
  explicit ElementReader(const TensorView& view);
  // The next `count` elements into out (count * element size bytes). Throws Error(kUsage) past
  // the last element, and what reading the storage throws.
  void Read(uint64_t count, uint8_t* out);
  uint64_t remaining() const { return numel_ - next_; }

 private:
  const TensorView& view_;
  uint64_t numel_ = 0;
  uint64_t next_ = 0;                        // elements read so far
  std::optional<SharedBytes::Reader> bytes_;  // contiguous views only
  bool swap_ = false;
  std::unique_ptr<ElementReader> source_;     // a converting view's source
  std::vector<uint8_t> scratch_;              // its elements before conversion
  std::shared_ptr<const Dequantizer> dequantizer_;  // a quantized source's values
  std::vector<float> block_values_;           // a block source's values, dequantized whole blocks at a time
  size_t block_values_next_ = 0;              // the first of them not yet read
};

// A view's C-contiguous little-endian bytes (what ForEachChunk hands out) as SharedBytes, never
// copied whole unless someone asks for them whole (data()): the stored bytes when the view is
// stored so (StoredBytes), else deferred bytes gathered, swapped or cast window by window as they
// are read (ElementReader), in bounded memory. Keeps a copy of the view (and so its storage).
SharedBytes StreamedBytes(const TensorView& view);

// The view with, when its storage is deferred (a tensor assembled from a checkpoint's chunks or
// ranks, a compressed leaf), a storage of its own holding only the bytes its elements reach
// (SharedBytes::OwnSlice): reading it, whole or strided, produces only those, reading only the
// pieces they lie in. Any other view is returned as it is. A slice of rows reads only its rows.
TensorView NarrowedToReach(const TensorView& view);

// A view of `source`'s elements converted to `dtype` on the fly: contiguous, same shape, no copy
// of the data until its bytes are streamed. Floating and integer dtypes convert through double
// (integers exactly up to 2^53); bool and complex only to themselves. A quantized source (with its
// quantizer) converts to a floating dtype as its values, torch's `dequantize()`:
// (q - zero_point) * scale, computed as torch's CPU kernels compute it (per tensor in float32, per
// channel in the scales' dtype). A ggml block view (trove/dtype.h) converts to a floating dtype as
// its values, computed in float32 as ggml's reference dequantizers compute them (core/ggml_blocks.h)
// and then rounded to `dtype`; its last dimension becomes the values its blocks hold
// (bytes / block_bytes * block_values). Little-endian blocks only.
TensorView CastView(const TensorView& source, DType dtype);

// Whether CastView to a floating dtype gives `v`'s values although its elements are no values:
// a torch quantized tensor with its quantizer (qint8, quint8, qint32), or a ggml block type trove
// dequantizes, little-endian, its last dimension whole blocks.
bool Dequantizable(const TensorView& v);

std::string ShapeString(const std::vector<int64_t>& shape);  // "[2, 3]"

// The strides (in elements) of a contiguous tensor of `shape` (sizes >= 0): row-major (C order),
// or column-major (`fortran_order`, numpy's other layout). A dimension of size 0 counts as 1, as
// torch and numpy count it, so a shape holding no elements can still ask for strides beyond 64
// bits: Error(kCorrupt) then, naming the shape, instead of a product that overflows.
std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape, bool fortran_order = false);

// Swaps each element's bytes in place (complex types swap each half).
void ByteSwapElements(uint8_t* data, uint64_t count, DType dtype);

}  // namespace trove
