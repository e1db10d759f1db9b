#include "zip/zip_decompress.h"

#define ZLIB_CONST
#include <bzlib.h>
#include <lzma.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "core/byte_reader.h"
#include "trove/error.h"
#include "trove/zip_reader.h"

namespace trove::zip {
namespace {

// One call into a codec sees at most this much input and output, because zlib and libbz2 count
// bytes in 32-bit unsigned ints.
constexpr uint64_t kStepBytes = uint64_t{1} << 30;
// The output buffer starts this small and doubles, so memory follows the bytes produced.
constexpr uint64_t kFirstBufferBytes = uint64_t{1} << 20;
// Streaming decompression hands its output over in windows of this size: resident memory stays
// bounded whatever the entry's size.
constexpr uint64_t kStreamWindowBytes = uint64_t{4} << 20;

[[noreturn]] void Corrupt(std::string_view where, const std::string& what) {
  Fail(ErrorCode::kCorrupt, std::string(where) + ": " + what);
}

enum class Step { kProgress, kEnd };

class Codec {
 public:
  virtual ~Codec() = default;
  // Runs the decoder over in[0, in_len) into out[0, out_len), reporting what it used.
  virtual Step Run(const uint8_t* in, size_t in_len, uint8_t* out, size_t out_len, size_t* consumed,
                   size_t* produced) = 0;
  // True when a stream may end without an end marker once the declared size is reached (LZMA
  // in zip marks its end only when flag bit 1 is set).
  virtual bool EndMarkerOptional() const { return false; }
};

class InflateCodec final : public Codec {
 public:
  explicit InflateCodec(std::string_view where) : where_(where) {
    if (inflateInit2(&z_, -MAX_WBITS) != Z_OK) Fail(ErrorCode::kLimit, std::string(where) + ": zlib init failed");
  }
  ~InflateCodec() override { inflateEnd(&z_); }
  Step Run(const uint8_t* in, size_t in_len, uint8_t* out, size_t out_len, size_t* consumed,
           size_t* produced) override {
    z_.next_in = in;
    z_.avail_in = static_cast<uInt>(in_len);
    z_.next_out = out;
    z_.avail_out = static_cast<uInt>(out_len);
    int r = inflate(&z_, Z_NO_FLUSH);
    *consumed = in_len - z_.avail_in;
    *produced = out_len - z_.avail_out;
    if (r == Z_STREAM_END) return Step::kEnd;
    if (r == Z_OK || r == Z_BUF_ERROR) return Step::kProgress;
    Corrupt(where_, std::string("invalid deflate data (") + (z_.msg != nullptr ? z_.msg : "zlib error") + ")");
  }

 private:
  z_stream z_{};
  std::string_view where_;
};

class Bzip2Codec final : public Codec {
 public:
  explicit Bzip2Codec(std::string_view where) : where_(where) {
    if (BZ2_bzDecompressInit(&s_, 0, 0) != BZ_OK) Fail(ErrorCode::kLimit, std::string(where) + ": bzip2 init failed");
  }
  ~Bzip2Codec() override { BZ2_bzDecompressEnd(&s_); }
  Step Run(const uint8_t* in, size_t in_len, uint8_t* out, size_t out_len, size_t* consumed,
           size_t* produced) override {
    // libbz2 never writes through next_in; its API just lacks const.
    s_.next_in = const_cast<char*>(reinterpret_cast<const char*>(in));
    s_.avail_in = static_cast<unsigned>(in_len);
    s_.next_out = reinterpret_cast<char*>(out);
    s_.avail_out = static_cast<unsigned>(out_len);
    int r = BZ2_bzDecompress(&s_);
    *consumed = in_len - s_.avail_in;
    *produced = out_len - s_.avail_out;
    if (r == BZ_STREAM_END) return Step::kEnd;
    if (r == BZ_OK) return Step::kProgress;
    if (r == BZ_MEM_ERROR) Fail(ErrorCode::kLimit, std::string(where_) + ": out of memory in bzip2");
    Corrupt(where_, "invalid bzip2 data (code " + std::to_string(r) + ")");
  }

 private:
  bz_stream s_{};
  std::string_view where_;
};

// Zip method 14: u8 major, u8 minor (LZMA SDK version), u16 properties size (5), the LZMA1
// properties (lc/lp/pb byte, u32 dictionary size), then raw LZMA1 data.
class LzmaCodec final : public Codec {
 public:
  LzmaCodec(std::string_view where, const uint8_t* props, uint64_t declared_size) : where_(where) {
    lzma_filter filters[2] = {{LZMA_FILTER_LZMA1, nullptr}, {LZMA_VLI_UNKNOWN, nullptr}};
    if (lzma_properties_decode(&filters[0], nullptr, props, 5) != LZMA_OK) Corrupt(where, "invalid LZMA properties");
    auto* options = static_cast<lzma_options_lzma*>(filters[0].options);
    // A decoder never looks back further than what it has produced, so a dictionary larger than
    // the entry is wasted memory; hostile properties may ask for 4 GiB.
    const uint64_t enough = std::max<uint64_t>(declared_size, LZMA_DICT_SIZE_MIN);
    if (options->dict_size > enough) options->dict_size = static_cast<uint32_t>(enough);
    lzma_ret r = lzma_raw_decoder(&s_, filters);
    std::free(options);
    if (r != LZMA_OK) Fail(ErrorCode::kLimit, std::string(where) + ": LZMA decoder init failed (" + std::to_string(r) + ")");
  }
  ~LzmaCodec() override { lzma_end(&s_); }
  Step Run(const uint8_t* in, size_t in_len, uint8_t* out, size_t out_len, size_t* consumed,
           size_t* produced) override {
    s_.next_in = in;
    s_.avail_in = in_len;
    s_.next_out = out;
    s_.avail_out = out_len;
    lzma_ret r = lzma_code(&s_, LZMA_RUN);
    *consumed = in_len - s_.avail_in;
    *produced = out_len - s_.avail_out;
    if (r == LZMA_STREAM_END) return Step::kEnd;
    if (r == LZMA_OK || r == LZMA_BUF_ERROR) return Step::kProgress;
    if (r == LZMA_MEM_ERROR || r == LZMA_MEMLIMIT_ERROR) Fail(ErrorCode::kLimit, std::string(where_) + ": out of memory in LZMA");
    Corrupt(where_, "invalid LZMA data (code " + std::to_string(r) + ")");
  }
  bool EndMarkerOptional() const override { return true; }

 private:
  lzma_stream s_ = LZMA_STREAM_INIT;
  std::string_view where_;
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// The codec for `method` over [src, +csize), and where its raw data starts (LZMA has a header).
std::unique_ptr<Codec> MakeCodec(uint16_t method, const uint8_t*& src, uint64_t& csize, uint64_t usize,
                                 std::string_view where) {
  switch (static_cast<ZipMethod>(method)) {
    case ZipMethod::kDeflate: return std::make_unique<InflateCodec>(where);
    case ZipMethod::kBzip2: return std::make_unique<Bzip2Codec>(where);
    case ZipMethod::kLzma: {
      if (csize < 9) Corrupt(where, "LZMA header needs 9 bytes, entry has " + std::to_string(csize));
      ByteReader r(src, csize);
      r.Skip(2);  // LZMA SDK version: informational
      uint16_t props_size = r.U16();
      if (props_size != 5) Corrupt(where, "LZMA properties size " + std::to_string(props_size) + ", expected 5");
      const uint8_t* props = r.cursor();
      r.Skip(5);
      src = r.cursor();
      csize = r.remaining();
      return std::make_unique<LzmaCodec>(where, props, usize);
    }
    case ZipMethod::kStored:
      break;
  }
  Fail(ErrorCode::kUnsupported, std::string(where) + ": compression method " + std::to_string(method) + " is not supported");
}

void CheckDeclaredSize(uint64_t usize, std::string_view where) {
  if (usize > kMaxInflatedEntryBytes) {
    Fail(ErrorCode::kLimit, std::string(where) + ": declared size " + std::to_string(usize) +
                                " exceeds kMaxInflatedEntryBytes (" + std::to_string(kMaxInflatedEntryBytes) + ")");
  }
}

// Skip() inflates into a scratch buffer of this size: small, since nothing reads it.
constexpr size_t kSkipBytes = size_t{64} << 10;

// A window of a deferred entry: an Inflater skipped to the window's start.
class EntryReader final : public DeferredReader {
 public:
  EntryReader(SharedBytes raw, uint16_t method, uint64_t usize, const std::string& where, uint64_t offset,
              std::string file)
      : raw_(std::move(raw)), inflater_(method, raw_.data(), raw_.size(), usize, where), file_(std::move(file)) {
    WithFile(file_, [&] { inflater_.Skip(offset); });
  }
  void Read(uint8_t* out, size_t n) override {
    WithFile(file_, [&] {
      if (inflater_.Read(out, n) != n) Fail(ErrorCode::kUsage, "read past the end of deferred bytes");
    });
  }
  void Skip(uint64_t n) override {
    WithFile(file_, [&] { inflater_.Skip(n); });
  }

 private:
  SharedBytes raw_;  // kept alive: the inflater reads it
  Inflater inflater_;
  std::string file_;  // the archive, named by errors
};

// A compressed entry's payload, inflated only when asked for (SharedBytes::Deferred).
class DeferredEntry final : public DeferredSource {
 public:
  DeferredEntry(SharedBytes raw, uint16_t method, uint64_t usize, std::string where, std::string file)
      : raw_(std::move(raw)), method_(method), usize_(usize), where_(std::move(where)), file_(std::move(file)) {}
  SharedBytes Produce() const override {
    return WithFile(file_, [&] { return Decompress(method_, raw_.data(), raw_.size(), usize_, where_); });
  }
  std::unique_ptr<DeferredReader> Open(uint64_t offset) const override {
    return WithFile(file_, [&] { return std::make_unique<EntryReader>(raw_, method_, usize_, where_, offset, file_); });
  }
  std::optional<uint64_t> compressed_size() const override { return raw_.size(); }

 private:
  SharedBytes raw_;
  uint16_t method_;
  uint64_t usize_;
  std::string where_;
  std::string file_;
};

}  // namespace

struct Inflater::State {
  std::string where;  // the codec keeps a view of it
  std::unique_ptr<Codec> codec;
  const uint8_t* src = nullptr;
  uint64_t csize = 0, usize = 0;
  uint64_t in_pos = 0;   // compressed bytes used
  uint64_t out_pos = 0;  // bytes produced
  bool ended = false;    // the codec saw its end marker
  bool finished = false;
};

Inflater::Inflater(uint16_t method, const uint8_t* src, uint64_t csize, uint64_t usize, std::string where)
    : s_(std::make_unique<State>()) {
  s_->where = std::move(where);
  CheckDeclaredSize(usize, s_->where);
  s_->usize = usize;
  // Some writers store an empty file as a method-8 entry with no compressed bytes at all.
  if (csize == 0 && usize == 0) {
    s_->ended = s_->finished = true;
    return;
  }
  s_->codec = MakeCodec(method, src, csize, usize, s_->where);
  s_->src = src;
  s_->csize = csize;
}

Inflater::~Inflater() = default;
Inflater::Inflater(Inflater&&) noexcept = default;
Inflater& Inflater::operator=(Inflater&&) noexcept = default;

uint64_t Inflater::produced() const { return s_->out_pos; }
uint64_t Inflater::remaining() const { return s_->usize - s_->out_pos; }

size_t Inflater::Read(uint8_t* out, size_t n) {
  State& s = *s_;
  n = static_cast<size_t>(std::min<uint64_t>(n, s.usize - s.out_pos));
  size_t done = 0;
  while (done < n) {
    if (s.ended) {
      Corrupt(s.where, "decompresses to " + std::to_string(s.out_pos) + " bytes, declared " + std::to_string(s.usize));
    }
    const uint64_t src_len = std::min(s.csize - s.in_pos, kStepBytes);
    const uint64_t dst_len = std::min<uint64_t>(n - done, kStepBytes);
    size_t consumed = 0;
    size_t produced = 0;
    Step step = s.codec->Run(s.src + s.in_pos, static_cast<size_t>(src_len), out + done, static_cast<size_t>(dst_len),
                             &consumed, &produced);
    s.in_pos += consumed;
    s.out_pos += produced;
    done += produced;
    if (step == Step::kEnd) {
      s.ended = true;
      continue;  // an end before the declared size is reported above
    }
    if (consumed == 0 && produced == 0) {
      if (s.in_pos == s.csize) {
        Corrupt(s.where, "compressed data ends early (" + std::to_string(s.out_pos) + " of " + std::to_string(s.usize) +
                             " bytes decompressed)");
      }
      Corrupt(s.where, "decompressor stalled at compressed byte " + std::to_string(s.in_pos));
    }
  }
  if (s.out_pos == s.usize) Finish();
  return done;
}

void Inflater::Skip(uint64_t n) {
  if (n > remaining()) Fail(ErrorCode::kUsage, s_->where + ": skip past the declared end");
  if (n == 0) return;
  std::unique_ptr<uint8_t[]> scratch(new uint8_t[static_cast<size_t>(std::min<uint64_t>(n, kSkipBytes))]);
  while (n > 0) n -= Read(scratch.get(), static_cast<size_t>(std::min<uint64_t>(n, kSkipBytes)));
}

void Inflater::Finish() {
  State& s = *s_;
  if (s.finished) return;
  if (s.out_pos != s.usize) Fail(ErrorCode::kUsage, s.where + ": Finish before every byte was read");
  // Once the declared size is reached, a one-byte probe tells a finished stream from a bomb.
  while (!s.ended) {
    uint8_t probe = 0;
    size_t consumed = 0;
    size_t produced = 0;
    const uint64_t src_len = std::min(s.csize - s.in_pos, kStepBytes);
    Step step = s.codec->Run(s.src + s.in_pos, static_cast<size_t>(src_len), &probe, 1, &consumed, &produced);
    s.in_pos += consumed;
    if (produced > 0) Corrupt(s.where, "decompresses to more than the declared " + std::to_string(s.usize) + " bytes");
    if (step == Step::kEnd) break;
    if (consumed == 0) {
      if (s.in_pos == s.csize && s.codec->EndMarkerOptional()) break;
      if (s.in_pos == s.csize) {
        Corrupt(s.where, "compressed data ends early (" + std::to_string(s.out_pos) + " of " + std::to_string(s.usize) +
                             " bytes decompressed)");
      }
      Corrupt(s.where, "decompressor stalled at compressed byte " + std::to_string(s.in_pos));
    }
  }
  s.ended = true;
  if (s.in_pos != s.csize) {
    Corrupt(s.where, std::to_string(s.csize - s.in_pos) + " bytes follow the end of the compressed stream");
  }
  s.finished = true;
}

SharedBytes Decompress(uint16_t method, const uint8_t* src, uint64_t csize, uint64_t usize, std::string_view where) {
  Inflater inflater(method, src, csize, usize, std::string(where));
  if (usize == 0) {
    inflater.Finish();
    return SharedBytes::FromVector({});
  }
  // Memory follows the bytes produced, never the declared size.
  std::unique_ptr<uint8_t, FreeDeleter> buf;
  uint64_t capacity = 0;
  while (inflater.remaining() > 0) {
    const uint64_t filled = inflater.produced();
    if (filled == capacity) {
      uint64_t next = std::min(usize, std::max(kFirstBufferBytes, capacity * 2));
      void* grown = std::realloc(buf.get(), static_cast<size_t>(next));
      if (grown == nullptr) {
        Fail(ErrorCode::kLimit, std::string(where) + ": out of memory for " + std::to_string(next) + " bytes");
      }
      (void)buf.release();
      buf.reset(static_cast<uint8_t*>(grown));
      capacity = next;
    }
    inflater.Read(buf.get() + filled, static_cast<size_t>(capacity - filled));
  }
  uint8_t* data = buf.get();
  std::shared_ptr<const void> owner(buf.release(), FreeDeleter());
  return SharedBytes(std::move(owner), data, usize);
}

void DecompressStream(uint16_t method, const uint8_t* src, uint64_t csize, uint64_t usize, std::string_view where,
                      const std::function<void(const uint8_t*, size_t)>& fn) {
  Inflater inflater(method, src, csize, usize, std::string(where));
  if (usize == 0) inflater.Finish();  // otherwise the last Read checks the end
  const uint64_t window = std::min(usize, kStreamWindowBytes);
  std::unique_ptr<uint8_t, FreeDeleter> buf(static_cast<uint8_t*>(std::malloc(std::max<uint64_t>(window, 1))));
  if (buf == nullptr) Fail(ErrorCode::kLimit, std::string(where) + ": out of memory for " + std::to_string(window) + " bytes");
  while (inflater.remaining() > 0) {
    const size_t n = inflater.Read(buf.get(), static_cast<size_t>(window));
    fn(buf.get(), n);
  }
}

SharedBytes DeferredDecompress(SharedBytes compressed, uint16_t method, uint64_t usize, std::string where,
                               std::string file) {
  CheckDeclaredSize(usize, where);
  if (method == static_cast<uint16_t>(ZipMethod::kStored)) return compressed;
  return SharedBytes::Deferred(
      std::make_shared<DeferredEntry>(std::move(compressed), method, usize, std::move(where), std::move(file)), usize);
}

}  // namespace trove::zip
