#include "zip/zip_compress.h"

#define ZLIB_CONST
#include <bzlib.h>
#include <lzma.h>
#include <zlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "trove/error.h"

namespace trove {
namespace {

// Compressed bytes are handed on in pieces of this size; it bounds the writer's memory.
constexpr size_t kOutBufferBytes = size_t{256} << 10;
// zlib and libbz2 count input in 32-bit unsigned ints.
constexpr uint64_t kStepBytes = uint64_t{1} << 30;

[[noreturn]] void CodecFail(const char* codec, int code) {
  Fail(ErrorCode::kIo, std::string(codec) + " compressor failed (code " + std::to_string(code) + ")");
}

class DeflateCompressor final : public ZipCompressor {
 public:
  DeflateCompressor() : out_(kOutBufferBytes) {
    // Raw deflate (no zlib header), as zip and Python's zlib.compressobj(-1, DEFLATED, -15) use.
    int r = deflateInit2(&z_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    if (r != Z_OK) CodecFail("deflate", r);
  }
  ~DeflateCompressor() override { deflateEnd(&z_); }
  void Push(const uint8_t* data, uint64_t size, const Sink& sink) override {
    while (size > 0) {
      const uint64_t step = std::min(size, kStepBytes);
      z_.next_in = data;
      z_.avail_in = static_cast<uInt>(step);
      while (z_.avail_in > 0) Run(Z_NO_FLUSH, sink);
      data += step;
      size -= step;
    }
  }
  void Finish(const Sink& sink) override {
    z_.next_in = nullptr;
    z_.avail_in = 0;
    while (Run(Z_FINISH, sink) != Z_STREAM_END) {
    }
  }

 private:
  int Run(int flush, const Sink& sink) {
    z_.next_out = out_.data();
    z_.avail_out = static_cast<uInt>(out_.size());
    int r = deflate(&z_, flush);
    if (r != Z_OK && r != Z_STREAM_END && r != Z_BUF_ERROR) CodecFail("deflate", r);
    const size_t produced = out_.size() - z_.avail_out;
    if (produced > 0) sink(out_.data(), produced);
    return r;
  }
  z_stream z_{};
  std::vector<uint8_t> out_;
};

class Bzip2Compressor final : public ZipCompressor {
 public:
  Bzip2Compressor() : out_(kOutBufferBytes) {
    int r = BZ2_bzCompressInit(&s_, 9, 0, 0);  // Python's bz2.BZ2Compressor() default
    if (r != BZ_OK) CodecFail("bzip2", r);
  }
  ~Bzip2Compressor() override { BZ2_bzCompressEnd(&s_); }
  void Push(const uint8_t* data, uint64_t size, const Sink& sink) override {
    while (size > 0) {
      const uint64_t step = std::min(size, kStepBytes);
      // libbz2 never writes through next_in; its API just lacks const.
      s_.next_in = const_cast<char*>(reinterpret_cast<const char*>(data));
      s_.avail_in = static_cast<unsigned>(step);
      while (s_.avail_in > 0) Run(BZ_RUN, sink);
      data += step;
      size -= step;
    }
  }
  void Finish(const Sink& sink) override {
    s_.next_in = nullptr;
    s_.avail_in = 0;
    while (Run(BZ_FINISH, sink) != BZ_STREAM_END) {
    }
  }

 private:
  int Run(int action, const Sink& sink) {
    s_.next_out = reinterpret_cast<char*>(out_.data());
    s_.avail_out = static_cast<unsigned>(out_.size());
    int r = BZ2_bzCompress(&s_, action);
    if (r != BZ_RUN_OK && r != BZ_FINISH_OK && r != BZ_STREAM_END) CodecFail("bzip2", r);
    const size_t produced = out_.size() - s_.avail_out;
    if (produced > 0) sink(out_.data(), produced);
    return r;
  }
  bz_stream s_{};
  std::vector<uint8_t> out_;
};

// Zip method 14 as Python writes it: "\x09\x04" (LZMA SDK 9.4), u16 properties size, the 5
// LZMA1 property bytes of the default preset, then raw LZMA1 ending with an end marker.
class LzmaCompressor final : public ZipCompressor {
 public:
  LzmaCompressor() : out_(kOutBufferBytes) {
    if (lzma_lzma_preset(&options_, LZMA_PRESET_DEFAULT)) CodecFail("lzma", LZMA_OPTIONS_ERROR);
    lzma_filter filters[2] = {{LZMA_FILTER_LZMA1, &options_}, {LZMA_VLI_UNKNOWN, nullptr}};
    uint8_t props[5];
    lzma_ret r = lzma_properties_encode(&filters[0], props);
    if (r != LZMA_OK) CodecFail("lzma", r);
    header_ = {9, 4, 5, 0, props[0], props[1], props[2], props[3], props[4]};
    r = lzma_raw_encoder(&s_, filters);
    if (r != LZMA_OK) CodecFail("lzma", r);
  }
  ~LzmaCompressor() override { lzma_end(&s_); }
  void Push(const uint8_t* data, uint64_t size, const Sink& sink) override {
    EmitHeader(sink);
    s_.next_in = data;
    s_.avail_in = size;
    while (s_.avail_in > 0) Run(LZMA_RUN, sink);
  }
  void Finish(const Sink& sink) override {
    EmitHeader(sink);
    s_.next_in = nullptr;
    s_.avail_in = 0;
    while (Run(LZMA_FINISH, sink) != LZMA_STREAM_END) {
    }
  }

 private:
  void EmitHeader(const Sink& sink) {
    if (header_done_) return;
    header_done_ = true;
    sink(header_.data(), header_.size());
  }
  lzma_ret Run(lzma_action action, const Sink& sink) {
    s_.next_out = out_.data();
    s_.avail_out = out_.size();
    lzma_ret r = lzma_code(&s_, action);
    if (r != LZMA_OK && r != LZMA_STREAM_END) CodecFail("lzma", r);
    const size_t produced = out_.size() - s_.avail_out;
    if (produced > 0) sink(out_.data(), produced);
    return r;
  }
  lzma_options_lzma options_{};
  lzma_stream s_ = LZMA_STREAM_INIT;
  std::vector<uint8_t> header_;
  bool header_done_ = false;
  std::vector<uint8_t> out_;
};

}  // namespace

std::unique_ptr<ZipCompressor> ZipCompressor::Make(ZipMethod method) {
  switch (method) {
    case ZipMethod::kStored: return nullptr;
    case ZipMethod::kDeflate: return std::make_unique<DeflateCompressor>();
    case ZipMethod::kBzip2: return std::make_unique<Bzip2Compressor>();
    case ZipMethod::kLzma: return std::make_unique<LzmaCompressor>();
  }
  Fail(ErrorCode::kUsage, "unknown zip method " + std::to_string(static_cast<int>(method)));
}

}  // namespace trove
