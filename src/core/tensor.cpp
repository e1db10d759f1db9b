#include "trove/tensor.h"
#include "trove/tensor_copy.h"

#include <algorithm>
#include <cmath>
#include <bit>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/cast_pipeline.h"
#include "core/cast_runs.h"
#include "core/ggml_blocks.h"
#include "core/large_buffer.h"
#include "core/worker_pool.h"
#include "trove/element_codec.h"
#include "trove/error.h"
#include "trove/threads.h"

namespace trove {
namespace {

// The error of a size computation that overflows, out of line (cold, never inlined): the checks
// are inlined into loops that need no message code, and where the text's length is a constant
// there, GCC 12 warns of a false overflow (-Warray-bounds) in the inlined std::string copy.
[[noreturn, gnu::cold, gnu::noinline]] void FailOverflow(const char* what) {
  Fail(ErrorCode::kCorrupt, std::string(what) + " overflows 64 bits");
}

int64_t CheckedMul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) FailOverflow(what);
  return r;
}

int64_t CheckedAdd(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) FailOverflow(what);
  return r;
}

size_t SwapUnit(DType dtype) {
  const auto& info = Info(dtype);
  if (info.kind == DTypeKind::kComplex) return info.element_size / 2;
  return info.element_size;
}

void StoreElement(DType dtype, double value, uint8_t* out) {
  switch (dtype) {
    case DType::kFloat32: { float f = static_cast<float>(value); std::memcpy(out, &f, 4); return; }
    case DType::kFloat64: std::memcpy(out, &value, 8); return;
    case DType::kFloat16: { uint16_t h = FloatToHalf(static_cast<float>(value)); std::memcpy(out, &h, 2); return; }
    case DType::kBFloat16: { uint16_t b = FloatToBFloat16(static_cast<float>(value)); std::memcpy(out, &b, 2); return; }
    case DType::kInt64: { int64_t v = static_cast<int64_t>(value); std::memcpy(out, &v, 8); return; }
    case DType::kInt32: { int32_t v = static_cast<int32_t>(value); std::memcpy(out, &v, 4); return; }
    case DType::kInt16: { int16_t v = static_cast<int16_t>(value); std::memcpy(out, &v, 2); return; }
    case DType::kInt8: { int8_t v = static_cast<int8_t>(value); std::memcpy(out, &v, 1); return; }
    case DType::kUInt8: out[0] = static_cast<uint8_t>(value); return;
    case DType::kUInt16: { uint16_t v = static_cast<uint16_t>(value); std::memcpy(out, &v, 2); return; }
    case DType::kUInt32: { uint32_t v = static_cast<uint32_t>(value); std::memcpy(out, &v, 4); return; }
    case DType::kUInt64: { uint64_t v = static_cast<uint64_t>(value); std::memcpy(out, &v, 8); return; }
    default: Fail(ErrorCode::kUnsupported, "cannot convert to " + std::string(Name(dtype)));
  }
}

double NumericValue(const ElementValue& e) {
  switch (e.kind) {
    case ElementValue::Kind::kFloat: return e.re;
    case ElementValue::Kind::kInt: return static_cast<double>(e.i);
    case ElementValue::Kind::kUInt: return static_cast<double>(e.u);
    case ElementValue::Kind::kBool: return e.b ? 1 : 0;
    default: Fail(ErrorCode::kUnsupported, "complex values cannot be converted to a real dtype");
  }
}

}  // namespace

// torch's arithmetic (its CPU kernels): per tensor in float32, the scale rounded to float first;
// per channel in the scales' own dtype (float64 for per_channel_affine, float32 for float qparams).
double Dequantized(double q, double zero_point, double scale, bool in_double) {
  if (in_double) return (q - zero_point) * scale;
  return static_cast<double>((static_cast<float>(q) - static_cast<float>(zero_point)) * static_cast<float>(scale));
}

bool DequantizesInDouble(const Quantizer& q) { return q.per_channel() && q.scales->dtype == DType::kFloat64; }

// The values of a quantized view: (q - zero_point) * scale, a channel's pair for the per-channel
// schemes. The channel of the i-th element in C order is (i / inner) % channels.
class Dequantizer {
 public:
  explicit Dequantizer(const TensorView& q) {
    if (!q.quantizer) Fail(ErrorCode::kUnsupported, "a quantized tensor without its quantizer has no values");
    repr_ = IntReprView(q).dtype;
    const Quantizer& z = *q.quantizer;
    in_double_ = DequantizesInDouble(z);
    if (!z.per_channel()) {
      scales_.values = {z.scale};
      zero_points_.values = {static_cast<double>(z.zero_point)};
      return;
    }
    const size_t axis = static_cast<size_t>(z.axis);
    channels_ = static_cast<uint64_t>(q.shape[axis]);
    for (size_t d = axis + 1; d < q.shape.size(); ++d) inner_ *= static_cast<uint64_t>(std::max<int64_t>(q.shape[d], 1));
    scales_ = ChannelTable(*z.scales);
    zero_points_ = ChannelTable(*z.zero_points);
  }

  double Value(const uint8_t* in, uint64_t flat) const {
    const double v = NumericValue(DecodeElement(repr_, in));
    const uint64_t c = channels_ == 0 ? 0 : (flat / inner_) % channels_;
    return Dequantized(v, zero_points_.At(c), scales_.At(c), in_double_);
  }
  DType repr() const { return repr_; }

 private:
  // A per-channel parameter as doubles, read once per stream: the stored elements the channels'
  // view spans (channel c is element c * stride of the table), so the table is at most the
  // stored scales' own size whatever the channel count: a stride-0 view of one stored scale
  // over 2^27 channels is a table of one.
  struct ChannelTable {
    ChannelTable() = default;
    explicit ChannelTable(const TensorView& t) {
      const int64_t channels = t.shape.empty() ? 1 : t.shape[0];
      stride = t.shape.empty() || channels <= 1 ? 0 : static_cast<uint64_t>(t.strides[0]);
      const uint64_t span = channels == 0 ? 0 : static_cast<uint64_t>(channels - 1) * stride + 1;
      TensorView stored = t;  // the stored elements [offset, offset + span), validated inside the storage
      stored.shape = {static_cast<int64_t>(span)};
      stored.strides = {1};
      values.resize(static_cast<size_t>(span));
      for (uint64_t i = 0; i < span; ++i) {
        const int64_t at = static_cast<int64_t>(i);
        values[static_cast<size_t>(i)] = NumericValue(stored.Element(std::span<const int64_t>(&at, 1)));
      }
    }
    double At(uint64_t channel) const { return values[static_cast<size_t>(channel * stride)]; }
    std::vector<double> values;
    uint64_t stride = 0;
  };
  DType repr_ = DType::kInt8;
  uint64_t inner_ = 1, channels_ = 0;
  bool in_double_ = false;
  ChannelTable scales_, zero_points_;
};

namespace {

// A run is cut into pieces for the worker threads only above this many elements each (a few
// hundred microseconds of work: far above a worker's wake-up).
constexpr uint64_t kMinCastPieceElements = uint64_t{1} << 18;
// Block dequantization produces its values this many bytes at a time (then handed on): enough to
// split among the threads, little enough to stay in the caches' reach and in bounded memory.
constexpr size_t kDequantWindowBytes = size_t{8} << 20;

// Converts n whole elements of `from` at `in` to `to` at `out`; `flat` is the first one's index in
// C order (a per-channel quantizer needs it). Losses are counted into `losses` when `count`.
// Touches nothing shared: the pieces of a run call it on several threads at once.
void ConvertElements(DType from, DType to, const Dequantizer* dequantizer, uint64_t flat, const uint8_t* in,
                     uint8_t* out, size_t n, bool count, LossCounts& losses) {
  if (dequantizer == nullptr && CastRun(from, to, in, out, n, losses)) return;
  const size_t in_size = ElementSize(from), out_size = ElementSize(to);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* e = in + i * in_size;
    uint8_t* o = out + i * out_size;
    const double value = dequantizer ? dequantizer->Value(e, flat + i) : NumericValue(DecodeElement(from, e));
    StoreElement(to, value, o);
    if (!count || std::isnan(value)) continue;
    const double result = NumericValue(DecodeElement(to, o));
    losses.overflowed += std::isfinite(value) && !std::isfinite(result);
    losses.underflowed += value != 0 && result == 0;
    losses.sign_lost += std::signbit(value) && !std::signbit(result);
  }
}

// A block source's values (CastView): its bytes streamed in C order are whole blocks, each
// dequantized to float32 and then rounded to dtype (float32 as it is), at most about chunk_bytes
// of output at a time; or, given `into` (room for all of the values), straight into it: no window
// and no copy of it, fn unused.
void ForEachBlockCastChunk(const TensorView& source, DType dtype, const std::function<void(const uint8_t*, size_t)>& fn,
                           size_t chunk_bytes, CastLosses* losses, uint8_t* into = nullptr) {
  const DTypeInfo& info = Info(source.dtype);
  const size_t block_bytes = info.block_bytes, block_values = info.block_values, out_size = ElementSize(dtype);
  // Output windows of at least kDequantWindowBytes, so that each splits into pieces worth a thread.
  const size_t window = std::max(chunk_bytes, kDequantWindowBytes);
  const size_t per_chunk = std::max<size_t>(1, window / (block_values * out_size));  // blocks
  std::vector<float> values(into != nullptr ? 0 : per_chunk * block_values);
  std::vector<uint8_t> out(dtype == DType::kFloat32 || into != nullptr ? 0 : per_chunk * block_values * out_size);
  uint64_t emitted = 0;  // values, with `into`
  std::vector<uint8_t> partial;  // a block split across the source's chunks
  partial.reserve(block_bytes);
  LossCounts counts;
  auto emit = [&](const uint8_t* blocks, size_t n) {
    const uint64_t pieces = PieceCount(uint64_t{n} * block_values, kMinCastPieceElements);
    std::vector<LossCounts> piece_losses(pieces);
    RunPieces(pieces, [&](uint64_t k) {
      const size_t first = static_cast<size_t>(n * k / pieces), end = static_cast<size_t>(n * (k + 1) / pieces);
      const size_t count = (end - first) * block_values;
      // With `into` and float32 the values are the output; rounded to another dtype they pass
      // through a piece's own buffer.
      std::vector<float> own(into != nullptr && dtype != DType::kFloat32 ? count : 0);
      float* piece_values = into == nullptr ? values.data() + first * block_values
                            : dtype == DType::kFloat32 ? reinterpret_cast<float*>(into + (emitted + first * block_values) * 4)
                                                       : own.data();
      DequantizeBlocks(source.dtype, blocks + first * block_bytes, end - first, piece_values);
      if (dtype == DType::kFloat32) return;
      uint8_t* piece_out = into != nullptr ? into + (emitted + first * block_values) * out_size : out.data() + first * block_values * out_size;
      if (!CastRun(DType::kFloat32, dtype, reinterpret_cast<const uint8_t*>(piece_values), piece_out, count, piece_losses[k])) {
        for (size_t i = 0; i < count; ++i) StoreElement(dtype, piece_values[i], piece_out + i * out_size);  // float64: exact
      }
    });
    for (const LossCounts& l : piece_losses) counts += l;
    const size_t count = n * block_values;
    if (into != nullptr) {
      emitted += count;
      return;
    }
    if (dtype == DType::kFloat32) return fn(reinterpret_cast<const uint8_t*>(values.data()), count * 4);
    fn(out.data(), count * out_size);
  };
  source.ForEachChunk([&](const uint8_t* p, size_t n) {
    while (n > 0) {
      if (!partial.empty()) {
        const size_t take = std::min(n, block_bytes - partial.size());
        partial.insert(partial.end(), p, p + take);
        p += take;
        n -= take;
        if (partial.size() == block_bytes) {
          emit(partial.data(), 1);
          partial.clear();
        }
        continue;
      }
      const size_t whole = std::min(n / block_bytes, per_chunk);
      if (whole == 0) {
        partial.assign(p, p + n);
        break;
      }
      emit(p, whole);
      p += whole * block_bytes;
      n -= whole * block_bytes;
    }
  }, chunk_bytes);
  if (!partial.empty()) Fail(ErrorCode::kCorrupt, "a " + std::string(info.name) + " tensor ends inside a block");
  if (losses != nullptr) {
    losses->overflowed = counts.overflowed;
    losses->underflowed = counts.underflowed;
    losses->sign_lost = 0;
    losses->counted = true;
  }
}

// A pipelined cast's output windows (core/cast_pipeline.h): how many bytes each, how many exist at
// once (the memory the pipeline holds, whatever the tensors' sizes: 8 MiB; with 4 windows of
// 512 KiB two threads still waited on each other, 1.59x one thread's rate, with 8 1.78x), and the
// elements of a piece (a few hundred microseconds of reading and converting: far above a worker's
// wake-up, small enough that a tensor's first window is soon ready to write). Windows of 1 MiB
// made the float16 cast of the 1 GB benchmark file 3% faster than 512 KiB on one thread and on
// two (medians of 10 pairs: 318 and 183 ms against 326 and 190), 128 and 256 KiB slower (fewer
// bytes per write(2) and per pread).
constexpr uint64_t kCastWindowBytes = uint64_t{1024} << 10;
constexpr uint64_t kCastWindowsInFlight = 8;
constexpr uint64_t kPipelinedPieceElements = uint64_t{1} << 18;
// The windows are one buffer (whole huge pages), kept by the calling thread for its next run.
using CastRing = SpareBuffers<kCastWindowBytes * kCastWindowsInFlight, 1>;

// Whether a view's bytes are cast by the pipeline's pieces: a cast of a contiguous stored source
// (each piece reads its own range of it) of real numbers (no block or quantized dtype).
bool PipelinesCast(const TensorView& v) {
  if (!v.cast_source || v.numel() == 0) return false;
  const TensorView& s = *v.cast_source;
  return !IsBlockDType(s.dtype) && !s.quantizer && s.StoredBytes().has_value();
}

// Reads elements [begin, end) of a cast view's stored source and converts them into out.
void CastPiece(const TensorView& view, const SharedBytes& stored, uint64_t begin, uint64_t end, uint8_t* out,
               LossCounts& losses) {
  const TensorView& source = *view.cast_source;
  const uint64_t in_size = ElementSize(source.dtype), out_size = ElementSize(view.dtype);
  const bool count = view.cast_losses != nullptr;
  uint64_t flat = begin;
  uint8_t carry[16];  // an element split between two of Stream's windows (none in practice)
  size_t carried = 0;
  stored.Slice(begin * in_size, (end - begin) * in_size).Stream([&](const uint8_t* p, size_t bytes) {
    if (carried > 0) {
      const size_t take = std::min<size_t>(bytes, in_size - carried);
      std::memcpy(carry + carried, p, take);
      carried += take, p += take, bytes -= take;
      if (carried < in_size) return;
      ConvertElements(source.dtype, view.dtype, nullptr, flat, carry, out, 1, count, losses);
      ++flat, out += out_size, carried = 0;
    }
    const size_t whole = static_cast<size_t>(bytes / in_size);
    ConvertElements(source.dtype, view.dtype, nullptr, flat, p, out, whole, count, losses);
    flat += whole, out += whole * out_size;
    carried = bytes - whole * in_size;
    std::memcpy(carry, p + whole * in_size, carried);
  });
}

}  // namespace

void RunOrderedWrites(const std::vector<OrderedWrite>& items, const std::function<void(const uint8_t*, size_t)>& write,
                      const PieceChecksum* checksum) {
  // The plan, by item: whether its bytes are pipelined, its windows (one for an item written in
  // its turn) and pieces per window, and where its windows and pieces start in the whole run.
  struct Plan {
    bool pipelined = false;
    std::optional<SharedBytes> stored;
    uint64_t window = 0;  // elements
    uint64_t windows = 1, per_window = 1, first_window = 0, first_piece = 0;
  };
  std::vector<Plan> plans(items.size());
  uint64_t windows = 0, pieces = 0;
  bool any_pipelined = false;
  for (size_t i = 0; i < items.size(); ++i) {
    Plan& p = plans[i];
    const TensorView* v = items[i].view;
    if (v != nullptr && PipelinesCast(*v)) {
      p.pipelined = any_pipelined = true;
      p.stored = v->cast_source->StoredBytes();
      p.window = std::max<uint64_t>(1, kCastWindowBytes / ElementSize(v->dtype));
      const uint64_t n = static_cast<uint64_t>(v->numel());
      p.windows = (n + p.window - 1) / p.window;
      p.per_window = std::max<uint64_t>(1, (std::min(p.window, n) + kPipelinedPieceElements - 1) / kPipelinedPieceElements);
    }
    p.first_window = windows;
    p.first_piece = pieces;
    windows += p.windows;
    pieces += p.windows * p.per_window;
  }
  if (!any_pipelined) {  // nothing to overlap: in order on this thread
    for (const OrderedWrite& item : items) {
      if (item.begin) item.begin();
      if (item.view != nullptr) {
        item.view->ForEachChunk(write);
      } else if (item.body) {
        item.body();
      }
      if (item.end) item.end();
    }
    return;
  }
  const auto item_of = [&](uint64_t at, uint64_t Plan::*first) {
    auto it = std::upper_bound(plans.begin(), plans.end(), at, [&](uint64_t x, const Plan& p) { return x < p.*first; });
    return static_cast<size_t>(it - plans.begin()) - 1;
  };
  const auto elements_of = [&](size_t i, uint64_t w) {  // of window w of item i
    return std::min(plans[i].window, static_cast<uint64_t>(items[i].view->numel()) - w * plans[i].window);
  };
  // Piece j of window w of item i: its elements [first, last) counted from the window's start.
  const auto piece_of = [&](size_t i, uint64_t w, uint64_t j) {
    const uint64_t count = elements_of(i, w), per = plans[i].per_window;
    return std::pair<uint64_t, uint64_t>{count * j / per, count * (j + 1) / per};
  };
  const CastRing::Held ring = CastRing::Take();
  const auto window_at = [&](uint64_t g) { return ring.get() + (g % kCastWindowsInFlight) * kCastWindowBytes; };
  const uint64_t slots = kCastWindowsInFlight;
  struct Slot {
    uint64_t window = UINT64_MAX;  // the window it holds now
    uint64_t pieces_left = 0;
    std::vector<uint32_t> checksums;  // of its pieces' output, with a PieceChecksum
  };
  std::vector<Slot> slot(static_cast<size_t>(slots));  // guarded by mutex, as all below
  std::vector<LossCounts> item_losses(items.size());
  std::mutex mutex;
  std::condition_variable changed;
  uint64_t written = 0;  // windows written, in order
  bool writing = false, failed = false;

  // Writes the complete windows that come next while no other thread writes. Holds `lock` on
  // return; the callbacks run without it.
  const auto write_ready = [&](std::unique_lock<std::mutex>& lock) {
    while (!writing && !failed && written < windows) {
      const uint64_t g = written;
      const Slot& s = slot[static_cast<size_t>(g % slots)];
      if (s.window != g || s.pieces_left != 0) return;
      const size_t i = item_of(g, &Plan::first_window);
      const uint64_t w = g - plans[i].first_window;
      const LossCounts losses = item_losses[i];
      writing = true;
      lock.unlock();
      const OrderedWrite& item = items[i];
      if (w == 0 && item.begin) item.begin();
      if (plans[i].pipelined) {
        const size_t esize = ElementSize(item.view->dtype);
        const size_t bytes = static_cast<size_t>(elements_of(i, w) * esize);
        if (checksum != nullptr) {
          uint32_t sum = 0;
          for (uint64_t j = 0; j < plans[i].per_window; ++j) {
            const auto [first, last] = piece_of(i, w, j);
            sum = checksum->combine(sum, s.checksums[static_cast<size_t>(j)], (last - first) * esize);
          }
          checksum->write(window_at(g), bytes, sum);
        } else {
          write(window_at(g), bytes);
        }
      } else if (item.view != nullptr) {
        item.view->ForEachChunk(write);
      } else if (item.body) {
        item.body();
      }
      if (w + 1 == plans[i].windows) {
        if (plans[i].pipelined && item.view->cast_losses) {
          CastLosses& out = *item.view->cast_losses;
          out.overflowed = losses.overflowed;
          out.underflowed = losses.underflowed;
          out.sign_lost = losses.sign_lost;
          out.counted = true;
        }
        if (item.end) item.end();
      }
      lock.lock();
      writing = false;
      ++written;
      changed.notify_all();
    }
  };
  RunPieces(pieces, [&](uint64_t k) {
    const size_t i = item_of(k, &Plan::first_piece);
    const Plan& p = plans[i];
    const uint64_t w = (k - p.first_piece) / p.per_window, j = (k - p.first_piece) % p.per_window;
    const uint64_t g = p.first_window + w;
    try {
      std::unique_lock<std::mutex> lock(mutex);
      for (;;) {  // the window's slot is free once the window `slots` before it is written
        write_ready(lock);
        if (failed) return;  // another piece's error is the run's
        if (g < written + slots) break;
        changed.wait(lock);
      }
      Slot& s = slot[static_cast<size_t>(g % slots)];
      if (s.window != g) {
        s.window = g;
        s.pieces_left = p.per_window;
        if (checksum != nullptr) s.checksums.assign(static_cast<size_t>(p.per_window), 0);
      }
      lock.unlock();
      LossCounts losses;
      uint32_t piece_checksum = 0;
      if (p.pipelined) {
        const auto [first, last] = piece_of(i, w, j);
        const size_t esize = ElementSize(items[i].view->dtype);
        uint8_t* out = window_at(g) + first * esize;
        const uint64_t begin = w * p.window + first, end = w * p.window + last;
        if (end > begin) CastPiece(*items[i].view, *p.stored, begin, end, out, losses);
        if (checksum != nullptr) piece_checksum = checksum->of(out, static_cast<size_t>((last - first) * esize));
      }
      lock.lock();
      item_losses[i] += losses;
      if (checksum != nullptr && p.pipelined) s.checksums[static_cast<size_t>(j)] = piece_checksum;
      --s.pieces_left;
      write_ready(lock);
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        failed = true;
      }
      changed.notify_all();
      throw;
    }
  });
}

namespace {

// Streams source's elements converted to dtype, chunk by chunk (bounded memory), counting into
// `losses` (when given) what the conversion did to the values.
void ForEachCastChunk(const TensorView& source, DType dtype, const std::function<void(const uint8_t*, size_t)>& fn,
                      size_t chunk_bytes, CastLosses* losses) {
  if (IsBlockDType(source.dtype)) return ForEachBlockCastChunk(source, dtype, fn, chunk_bytes, losses);
  const size_t in_size = ElementSize(source.dtype), out_size = ElementSize(dtype);
  // The converted chunk: grown when a chunk needs more, never zero-filled (every byte is written
  // before it is handed on).
  std::unique_ptr<uint8_t[]> out;
  size_t out_capacity = 0, out_used = 0;
  auto reserve = [&](size_t bytes) {
    if (bytes <= out_capacity) return;
    auto grown = std::make_unique_for_overwrite<uint8_t[]>(bytes);
    if (out_used > 0) std::memcpy(grown.get(), out.get(), out_used);
    out = std::move(grown);
    out_capacity = bytes;
  };
  std::string carry;
  LossCounts total;
  std::optional<Dequantizer> dequantizer;
  if (source.quantizer) dequantizer.emplace(source);
  const Dequantizer* dq = dequantizer ? &*dequantizer : nullptr;
  const bool count = losses != nullptr;
  uint64_t flat = 0;  // the next element's index in C order
  source.ForEachChunk([&](const uint8_t* p, size_t n) {
    out_used = 0;
    size_t pos = 0;
    if (!carry.empty()) {  // an element split across chunks
      size_t take = std::min(in_size - carry.size(), n);
      carry.append(reinterpret_cast<const char*>(p), take);
      pos = take;
      if (carry.size() == in_size) {
        reserve(out_size);
        ConvertElements(source.dtype, dtype, dq, flat, reinterpret_cast<const uint8_t*>(carry.data()), out.get(), 1,
                        count, total);
        ++flat;
        out_used = out_size;
        carry.clear();
      }
    }
    const size_t whole = (n - pos) / in_size;
    const size_t base = out_used;
    reserve(base + whole * out_size);
    out_used = base + whole * out_size;
    // Pieces of the run on the worker threads, each counting its own losses, summed in order.
    const uint64_t pieces = PieceCount(whole, kMinCastPieceElements);
    std::vector<LossCounts> piece_losses(pieces);
    uint8_t* const to = out.get() + base;
    const uint8_t* const from = p + pos;
    RunPieces(pieces, [&](uint64_t k) {
      const size_t begin = static_cast<size_t>(whole * k / pieces), end = static_cast<size_t>(whole * (k + 1) / pieces);
      ConvertElements(source.dtype, dtype, dq, flat + begin, from + begin * in_size, to + begin * out_size, end - begin,
                      count, piece_losses[k]);
    });
    for (const LossCounts& l : piece_losses) total += l;
    flat += whole;
    pos += whole * in_size;
    carry.append(reinterpret_cast<const char*>(p + pos), n - pos);
    if (out_used > 0) fn(out.get(), out_used);
  }, chunk_bytes);
  if (losses != nullptr) {
    losses->overflowed = total.overflowed;
    losses->underflowed = total.underflowed;
    losses->sign_lost = total.sign_lost;
    losses->counted = true;
  }
}

}  // namespace

namespace {

// Why a ggml block view has no values through CastView, or none.
std::optional<std::string> BlockValuesRefusal(const TensorView& v) {
  const DTypeInfo& info = Info(v.dtype);
  if (!CanDequantizeBlocks(v.dtype)) return "dequantizing " + std::string(info.name) + " (trove dequantizes " + DequantizedBlockTypes() + ")";
  if (v.byte_order == ByteOrder::kBig) return std::string("dequantizing a big-endian file's blocks");
  if (v.shape.empty() || v.shape.back() % info.block_bytes != 0 || (v.shape.back() > 1 && v.strides.back() != 1)) {
    return "a " + std::string(info.name) + " view whose last dimension is not whole blocks of " + std::to_string(info.block_bytes) + " bytes";
  }
  return std::nullopt;
}

}  // namespace

bool Dequantizable(const TensorView& v) {
  if (IsBlockDType(v.dtype)) return !BlockValuesRefusal(v);
  return v.quantizer && IntReprDType(v.dtype);
}

TensorView CastView(const TensorView& source, DType dtype) {
  const auto kind = Info(dtype).kind;
  const auto from = Info(source.dtype).kind;
  const bool blocks = IsBlockDType(source.dtype);
  if (blocks) {
    if (auto why = BlockValuesRefusal(source)) Fail(ErrorCode::kUnsupported, *why);
    if (kind != DTypeKind::kFloat) Fail(ErrorCode::kUnsupported, "a block-quantized tensor converts only to a floating dtype (its values)");
  } else if (!Info(source.dtype).readable) {
    if (!source.quantizer || !IntReprDType(source.dtype)) Fail(ErrorCode::kUnsupported, "quantized tensors without their quantizer cannot be converted");
    if (kind != DTypeKind::kFloat) Fail(ErrorCode::kUnsupported, "a quantized tensor converts only to a floating dtype (its values)");
  }
  if (kind != DTypeKind::kFloat && kind != DTypeKind::kInt && kind != DTypeKind::kUInt)
    Fail(ErrorCode::kUnsupported, "cannot convert to " + std::string(Name(dtype)));
  if (from == DTypeKind::kComplex) Fail(ErrorCode::kUnsupported, "cannot convert complex values to " + std::string(Name(dtype)));
  TensorView v;
  v.dtype = dtype;
  v.shape = source.shape;
  if (blocks) v.shape.back() = v.shape.back() / Info(source.dtype).block_bytes * Info(source.dtype).block_values;
  v.strides = ContiguousStrides(v.shape);
  v.has_data = source.has_data;
  v.requires_grad = source.requires_grad;
  v.is_parameter = source.is_parameter;
  v.bare_storage = source.bare_storage;
  v.storage_index = source.storage_index;
  v.storage_key = source.storage_key;
  v.cast_source = std::make_shared<TensorView>(source);
  if (kind == DTypeKind::kFloat) v.cast_losses = std::make_shared<CastLosses>();
  return v;
}

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape, bool fortran_order) {
  const size_t n = shape.size();
  std::vector<int64_t> strides(n, 1);
  int64_t stride = 1;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = fortran_order ? k : n - 1 - k;  // the fastest dimension first
    strides[i] = stride;
    if (k + 1 < n && __builtin_mul_overflow(stride, std::max<int64_t>(shape[i], 1), &stride)) {
      Fail(ErrorCode::kCorrupt, "shape " + ShapeString(shape) + ": its strides do not fit in 64 bits");
    }
  }
  return strides;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

void ByteSwapElements(uint8_t* data, uint64_t count, DType dtype) {
  size_t unit = SwapUnit(dtype);
  if (unit <= 1) return;
  uint64_t units = count * (ElementSize(dtype) / unit);
  for (uint64_t i = 0; i < units; ++i) std::reverse(data + i * unit, data + (i + 1) * unit);
}

// A converting view's element: the source's element stored as the target dtype and read back, so
// that it rounds exactly as the streamed bytes do.
static ElementValue CastElement(const TensorView& view, std::span<const int64_t> index) {
  uint8_t bytes[16];
  const TensorView& source = *view.cast_source;
  if (IsBlockDType(source.dtype)) {
    // The one block holding the element, read in place and dequantized (CastView made sure the
    // last dimension is whole blocks, stride 1).
    if (index.size() != view.shape.size()) {
      Fail(ErrorCode::kUsage, "element index has " + std::to_string(index.size()) + " coordinates; the tensor " +
                                  ShapeString(view.shape) + " has " + std::to_string(view.shape.size()));
    }
    uint64_t at = static_cast<uint64_t>(source.storage_offset);
    for (size_t d = 0; d < index.size(); ++d) {
      if (index[d] < 0 || index[d] >= view.shape[d]) {
        Fail(ErrorCode::kUsage, "element index " + std::to_string(index[d]) + " is out of range for dimension " +
                                    std::to_string(d) + " of size " + std::to_string(view.shape[d]));
      }
      if (d + 1 < index.size()) at += static_cast<uint64_t>(index[d]) * static_cast<uint64_t>(source.strides[d]);
    }
    const DTypeInfo& info = Info(source.dtype);
    const uint64_t column = static_cast<uint64_t>(index.back());
    at += column / info.block_values * info.block_bytes;
    float values[kMaxBlockValues];
    DequantizeBlocks(source.dtype, source.storage.Slice(at, info.block_bytes).data(), 1, values);
    StoreElement(view.dtype, values[column % info.block_values], bytes);
    return DecodeElement(view.dtype, bytes);
  }
  if (source.quantizer) {
    // One element: its channel's scale and zero point read in place, not the whole table.
    const ElementValue q = IntReprView(source).Element(index);
    const Quantizer& z = *source.quantizer;
    double scale = z.scale, zero_point = static_cast<double>(z.zero_point);
    if (z.per_channel()) {
      const int64_t c = index[static_cast<size_t>(z.axis)];
      scale = NumericValue(z.scales->Element(std::span<const int64_t>(&c, 1)));
      zero_point = NumericValue(z.zero_points->Element(std::span<const int64_t>(&c, 1)));
    }
    StoreElement(view.dtype, Dequantized(NumericValue(q), zero_point, scale, DequantizesInDouble(z)), bytes);
    return DecodeElement(view.dtype, bytes);
  }
  StoreElement(view.dtype, NumericValue(source.Element(index)), bytes);
  return DecodeElement(view.dtype, bytes);
}

ElementValue TensorView::Element(std::span<const int64_t> index) const {
  if (cast_source) return CastElement(*this, index);
  if (!has_data) Fail(ErrorCode::kUnsupported, "tensor has no data (meta tensor)");
  if (index.size() != shape.size()) {
    Fail(ErrorCode::kUsage, "element index has " + std::to_string(index.size()) + " coordinates; the tensor " +
                                ShapeString(shape) + " has " + std::to_string(shape.size()));
  }
  // Validate() bounded every element inside the storage, so the sum below cannot overflow.
  uint64_t element = static_cast<uint64_t>(storage_offset);
  for (size_t d = 0; d < index.size(); ++d) {
    if (index[d] < 0 || index[d] >= shape[d]) {
      Fail(ErrorCode::kUsage, "element index " + std::to_string(index[d]) + " is out of range for dimension " +
                                  std::to_string(d) + " of size " + std::to_string(shape[d]));
    }
    element += static_cast<uint64_t>(index[d]) * static_cast<uint64_t>(strides[d]);
  }
  const uint64_t esize = ElementSize(dtype);
  uint8_t bytes[16];
  SharedBytes one = storage.Slice(element * esize, esize);
  std::copy(one.data(), one.data() + esize, bytes);
  if (byte_order == ByteOrder::kBig && SwapUnit(dtype) > 1) ByteSwapElements(bytes, 1, dtype);
  return DecodeElement(dtype, bytes);
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool TensorView::is_contiguous() const {
  // No element: any layout is contiguous (and the sizes right of a zero need not multiply within
  // 64 bits).
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return true;
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    if (__builtin_mul_overflow(expected, shape[i], &expected)) return false;  // not a view Validate passes
  }
  return true;
}

void TensorView::Validate() const {
  if (shape.size() > kMaxTensorRank) {
    Fail(ErrorCode::kLimit, "tensor rank " + std::to_string(shape.size()) + " exceeds kMaxTensorRank (" +
                                std::to_string(kMaxTensorRank) + ")");
  }
  if (strides.size() != shape.size()) {
    Fail(ErrorCode::kCorrupt, "tensor has " + std::to_string(shape.size()) + " sizes but " +
                                  std::to_string(strides.size()) + " strides");
  }
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) Fail(ErrorCode::kCorrupt, "negative size " + std::to_string(shape[i]) + " in shape");
    if (strides[i] < 0) Fail(ErrorCode::kCorrupt, "negative stride " + std::to_string(strides[i]));
    n = CheckedMul(n, shape[i], "element count");
  }
  if (storage_offset < 0) Fail(ErrorCode::kCorrupt, "negative storage offset " + std::to_string(storage_offset));
  const int64_t esize = static_cast<int64_t>(ElementSize(dtype));
  CheckedMul(n, esize, "tensor byte size");
  // An empty view reaches no element: torch takes any offset for it (even one whose bytes
  // overflow), and so does trove; nothing computes an address from it (StoredBytes,
  // first_element).
  if (n == 0) return;
  CheckedMul(storage_offset, esize, "storage offset in bytes");
  if (!has_data) return;
  int64_t last = storage_offset;  // index of the last element reached
  for (size_t i = 0; i < shape.size(); ++i)
    last = CheckedAdd(last, CheckedMul(shape[i] - 1, strides[i], "view extent"), "view extent");
  int64_t end_bytes = CheckedMul(CheckedAdd(last, 1, "view extent"), esize, "view extent in bytes");
  if (static_cast<uint64_t>(end_bytes) > storage.size()) {
    Fail(ErrorCode::kCorrupt, "view of shape " + ShapeString(shape) + " at offset " + std::to_string(storage_offset) +
                                  " needs " + std::to_string(end_bytes) + " bytes but its storage has " +
                                  std::to_string(storage.size()));
  }
}

std::optional<SharedBytes> TensorView::StoredBytes() const {
  if (cast_source || !has_data || !is_contiguous()) return std::nullopt;
  if (byte_order == ByteOrder::kBig && SwapUnit(dtype) > 1) return std::nullopt;
  if (numel() == 0) return storage.Slice(0, 0);  // its offset may lie anywhere (Validate)
  return storage.Slice(static_cast<uint64_t>(storage_offset) * ElementSize(dtype), nbytes());
}

void CopyTensorBytes(const TensorView& view, uint8_t* out) {
  if (view.cast_source && IsBlockDType(view.cast_source->dtype) && view.nbytes() > 0) {
    ForEachBlockCastChunk(*view.cast_source, view.dtype, {}, size_t{1} << 20, view.cast_losses.get(), out);
    return;
  }
  uint64_t at = 0;
  view.ForEachChunk([&](const uint8_t* p, size_t n) {
    std::memcpy(out + at, p, n);
    at += n;
  });
}

void TensorView::ForEachChunk(const std::function<void(const uint8_t*, size_t)>& fn, size_t chunk_bytes) const {
  const uint64_t total = nbytes();
  if (total == 0) return;
  if (cast_source) {
    // A large enough cast of stored bytes goes through the pipeline (core/cast_pipeline.h), on
    // every thread with the writes overlapped; the rest window by window.
    if (ThreadCount() >= 2 && PipelinesCast(*this) && static_cast<uint64_t>(numel()) * ElementSize(dtype) >= 2 * kCastWindowBytes) {
      RunOrderedWrites({OrderedWrite{{}, this, {}, {}}}, fn);
      return;
    }
    ForEachCastChunk(*cast_source, dtype, fn, chunk_bytes, cast_losses.get());
    return;
  }
  if (!has_data) Fail(ErrorCode::kUsage, "tensor has no data (meta tensor)");
  const size_t esize = ElementSize(dtype);
  const bool swap = byte_order == ByteOrder::kBig && SwapUnit(dtype) > 1;
  if (is_contiguous() && !swap) {
    storage.Slice(static_cast<uint64_t>(storage_offset) * esize, total).Stream(fn);  // zero-copy
    return;
  }
  chunk_bytes = std::max(chunk_bytes, esize);
  std::vector<uint8_t> scratch;
  scratch.reserve(std::min<uint64_t>(total, chunk_bytes));
  auto flush = [&] {
    if (scratch.empty()) return;
    if (swap) ByteSwapElements(scratch.data(), scratch.size() / esize, dtype);
    fn(scratch.data(), scratch.size());
    scratch.clear();
    ThrowIfMappedFileChanged();  // no point gathering on through zeros
  };
  if (is_contiguous()) {  // only needs swapping
    const uint8_t* p = first_element();
    for (uint64_t done = 0; done < total;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_bytes - chunk_bytes % esize, total - done));
      scratch.assign(p + done, p + done + n);
      flush();
      done += n;
    }
    return;
  }
  // Gather in row-major order; rows whose last dimension has stride 1 are copied whole.
  const size_t rank = shape.size();
  const int64_t inner = shape[rank - 1];
  const bool inner_dense = strides[rank - 1] == 1;
  std::vector<int64_t> index(rank, 0);
  const uint8_t* base = storage.data();
  for (;;) {
    int64_t off = storage_offset;
    for (size_t d = 0; d + 1 < rank; ++d) off += index[d] * strides[d];
    if (inner_dense) {
      const uint8_t* src = base + static_cast<uint64_t>(off) * esize;
      uint64_t row = static_cast<uint64_t>(inner) * esize;
      for (uint64_t done = 0; done < row;) {
        size_t room = chunk_bytes - scratch.size();
        if (room < esize) { flush(); room = chunk_bytes; }
        size_t n = static_cast<size_t>(std::min<uint64_t>(room - room % esize, row - done));
        scratch.insert(scratch.end(), src + done, src + done + n);
        done += n;
      }
    } else {
      for (int64_t j = 0; j < inner; ++j) {
        if (scratch.size() + esize > chunk_bytes) flush();
        const uint8_t* src = base + static_cast<uint64_t>(off + j * strides[rank - 1]) * esize;
        scratch.insert(scratch.end(), src, src + esize);
      }
    }
    // Advance the outer index (odometer).
    size_t d = rank - 1;
    for (;;) {
      if (d == 0) { flush(); return; }
      --d;
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

void TensorView::CheckSpan(DType wanted, size_t alignment) const {
  auto refuse = [&](const std::string& why) {
    Fail(ErrorCode::kUnsupported, "Span<" + std::string(Name(wanted)) + "> of a " + std::string(Name(dtype)) + " " +
                                      ShapeString(shape) + " tensor: " + why + " (ToVector<T>() reads any tensor)");
  };
  if (dtype != wanted) refuse("its elements are " + std::string(Name(dtype)));
  if (!has_data) refuse("a meta tensor has no data");
  if (cast_source) refuse("a converting view has no stored elements");
  if (!is_contiguous()) refuse("not C-contiguous");
  if (byte_order == ByteOrder::kBig && ElementSize(dtype) > 1) refuse("stored big-endian");
  if (reinterpret_cast<uintptr_t>(first_element()) % alignment != 0) refuse("not aligned in the file");
}

void TensorView::CopyElements(uint64_t first, uint64_t count, uint8_t* out) const {
  if (cast_source) Fail(ErrorCode::kUsage, "CopyElements of a converting view");
  if (!has_data) Fail(ErrorCode::kUsage, "tensor has no data (meta tensor)");
  const uint64_t n = static_cast<uint64_t>(numel());
  if (first > n || count > n - first) Fail(ErrorCode::kUsage, "element range outside the tensor");
  if (count == 0) return;
  const size_t esize = ElementSize(dtype);
  const bool swap = byte_order == ByteOrder::kBig && SwapUnit(dtype) > 1;
  const uint8_t* base = storage.data();
  if (is_contiguous()) {
    std::memcpy(out, base + (static_cast<uint64_t>(storage_offset) + first) * esize, count * esize);
  } else {
    const size_t rank = shape.size();
    std::vector<int64_t> index(rank, 0);
    uint64_t rest = first;
    for (size_t d = rank; d-- > 0;) {
      index[d] = static_cast<int64_t>(rest % static_cast<uint64_t>(shape[d]));
      rest /= static_cast<uint64_t>(shape[d]);
    }
    int64_t off = storage_offset;
    for (size_t d = 0; d < rank; ++d) off += index[d] * strides[d];
    for (uint64_t i = 0; i < count; ++i) {
      std::memcpy(out + i * esize, base + static_cast<uint64_t>(off) * esize, esize);
      for (size_t d = rank; d-- > 0;) {  // odometer, keeping the offset in step
        off += strides[d];
        if (++index[d] < shape[d]) break;
        off -= strides[d] * shape[d];
        index[d] = 0;
      }
    }
  }
  if (swap) ByteSwapElements(out, count, dtype);
  ThrowIfMappedFileChanged();
}

// A converting view's source elements are read this many at a time before conversion.
constexpr uint64_t kCastReadElements = 4096;

ElementReader::ElementReader(const TensorView& view) : view_(view) {
  numel_ = static_cast<uint64_t>(view.numel());
  if (view.cast_source) {
    source_ = std::make_unique<ElementReader>(*view.cast_source);
    if (view.cast_source->quantizer) dequantizer_ = std::make_shared<const Dequantizer>(*view.cast_source);
    return;
  }
  if (!view.has_data) Fail(ErrorCode::kUsage, "tensor has no data (meta tensor)");
  swap_ = view.byte_order == ByteOrder::kBig && SwapUnit(view.dtype) > 1;
  if (numel_ > 0 && view.is_contiguous()) {
    const uint64_t esize = ElementSize(view.dtype);
    bytes_.emplace(view.storage.Slice(static_cast<uint64_t>(view.storage_offset) * esize, numel_ * esize));
  }
}

void ElementReader::Read(uint64_t count, uint8_t* out) {
  if (count > remaining()) Fail(ErrorCode::kUsage, "element range outside the tensor");
  if (count == 0) return;
  if (source_ && IsBlockDType(view_.cast_source->dtype)) {
    // Whole blocks from the source, dequantized kCastReadElements values or so at a time.
    const DType from = view_.cast_source->dtype;
    const DTypeInfo& info = Info(from);
    const size_t out_size = ElementSize(view_.dtype);
    for (uint64_t done = 0; done < count;) {
      if (block_values_next_ == block_values_.size()) {
        const uint64_t blocks = std::min<uint64_t>(std::max<uint64_t>(1, kCastReadElements / info.block_values),
                                                   source_->remaining() / info.block_bytes);
        if (blocks == 0) Fail(ErrorCode::kCorrupt, "a " + std::string(info.name) + " tensor ends inside a block");
        scratch_.resize(static_cast<size_t>(blocks * info.block_bytes));
        source_->Read(blocks * info.block_bytes, scratch_.data());
        block_values_.resize(static_cast<size_t>(blocks * info.block_values));
        DequantizeBlocks(from, scratch_.data(), blocks, block_values_.data());
        block_values_next_ = 0;
      }
      const uint64_t k = std::min<uint64_t>(count - done, block_values_.size() - block_values_next_);
      uint8_t* to = out + done * out_size;
      if (view_.dtype == DType::kFloat32) {
        std::memcpy(to, block_values_.data() + block_values_next_, static_cast<size_t>(k) * 4);
      } else {
        for (uint64_t i = 0; i < k; ++i) StoreElement(view_.dtype, block_values_[block_values_next_ + i], to + i * out_size);
      }
      block_values_next_ += static_cast<size_t>(k);
      done += k;
    }
  } else if (source_) {
    const DType from = view_.cast_source->dtype;
    const size_t in_size = ElementSize(from), out_size = ElementSize(view_.dtype);
    for (uint64_t done = 0; done < count;) {
      const uint64_t k = std::min(kCastReadElements, count - done);
      scratch_.resize(static_cast<size_t>(k * in_size));
      source_->Read(k, scratch_.data());
      for (uint64_t i = 0; i < k; ++i) {
        const uint8_t* in = scratch_.data() + i * in_size;
        StoreElement(view_.dtype,
                     dequantizer_ ? dequantizer_->Value(in, next_ + done + i) : NumericValue(DecodeElement(from, in)),
                     out + (done + i) * out_size);
      }
      done += k;
    }
  } else if (bytes_) {
    bytes_->Read(out, static_cast<size_t>(count * ElementSize(view_.dtype)));
    if (swap_) ByteSwapElements(out, count, view_.dtype);
  } else {
    view_.CopyElements(next_, count, out);
  }
  next_ += count;
}

SharedBytes TensorView::ContiguousLittleEndian() const {
  const bool swap = byte_order == ByteOrder::kBig && SwapUnit(dtype) > 1;
  if (nbytes() == 0) return SharedBytes();
  if (cast_source) {
    std::vector<uint8_t> out;
    out.reserve(nbytes());
    ForEachChunk([&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); });
    return SharedBytes::FromVector(std::move(out));
  }
  if (numel() == 0) return storage.Slice(0, 0);  // its offset may lie anywhere (Validate)
  if (is_contiguous() && !swap) return storage.Slice(static_cast<uint64_t>(storage_offset) * ElementSize(dtype), nbytes());
  std::vector<uint8_t> out;
  out.reserve(nbytes());
  ForEachChunk([&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); });
  return SharedBytes::FromVector(std::move(out));
}

namespace {

// A ViewBytesSource reader's window: it bounds the reader's memory whatever the view's size.
constexpr uint64_t kViewWindowBytes = uint64_t{1} << 20;

// A view's C-contiguous little-endian bytes, produced window by window as they are read.
class ViewBytesSource : public DeferredSource {
 public:
  explicit ViewBytesSource(TensorView view) : view_(std::move(view)) {}

  SharedBytes Produce() const override { return view_.ContiguousLittleEndian(); }

  std::unique_ptr<DeferredReader> Open(uint64_t offset) const override {
    class ViewReader : public DeferredReader {
     public:
      ViewReader(const TensorView& view, uint64_t offset) : elements_(view), esize_(ElementSize(view.dtype)) { Skip(offset); }
      void Read(uint8_t* out, size_t n) override {
        while (n > 0) {
          if (at_ == window_.size()) Fill();
          const size_t take = std::min(n, window_.size() - at_);
          std::memcpy(out, window_.data() + at_, take);
          at_ += take;
          out += take;
          n -= take;
        }
      }
      void Skip(uint64_t n) override {
        while (n > 0) {  // ElementReader has no skip: the elements are read and dropped
          if (at_ == window_.size()) Fill();
          const size_t take = static_cast<size_t>(std::min<uint64_t>(n, window_.size() - at_));
          at_ += take;
          n -= take;
        }
      }

     private:
      void Fill() {
        const uint64_t count = std::min<uint64_t>(std::max<uint64_t>(1, kViewWindowBytes / esize_), elements_.remaining());
        if (count == 0) Fail(ErrorCode::kUsage, "read past the end of a tensor's bytes");
        window_.resize(static_cast<size_t>(count * esize_));
        elements_.Read(count, window_.data());
        at_ = 0;
      }
      ElementReader elements_;
      size_t esize_;
      std::vector<uint8_t> window_;
      size_t at_ = 0;
    };
    return std::make_unique<ViewReader>(view_, offset);
  }

 private:
  TensorView view_;
};

}  // namespace

TensorView NarrowedToReach(const TensorView& view) {
  if (!view.storage.deferred() || view.cast_source || !view.has_data || view.numel() == 0) return view;
  const uint64_t esize = ElementSize(view.dtype);
  int64_t last = view.storage_offset;  // the last element reached (Validate bounds it)
  for (size_t d = 0; d < view.shape.size(); ++d) last += (view.shape[d] - 1) * view.strides[d];
  const uint64_t begin = static_cast<uint64_t>(view.storage_offset) * esize;
  TensorView out = view;
  out.storage = view.storage.OwnSlice(begin, (static_cast<uint64_t>(last) + 1) * esize - begin);
  out.storage_offset = 0;
  out.Validate();
  return out;
}

SharedBytes StreamedBytes(const TensorView& view) {
  if (std::optional<SharedBytes> stored = view.StoredBytes()) return *stored;
  if (view.nbytes() == 0) return SharedBytes();
  return SharedBytes::Deferred(std::make_shared<ViewBytesSource>(view), view.nbytes());
}

}  // namespace trove
