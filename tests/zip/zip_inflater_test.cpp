// The pull inflater (zip::Inflater) and what streams through it: SharedBytes::Reader over a
// deferred entry, ElementReader over a compressed leaf, side by side.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "expect_error.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/tensor.h"
#include "trove/zip_reader.h"
#include "zip/zip_compress.h"
#include "zip/zip_decompress.h"

namespace trove {
namespace {

constexpr ZipMethod kMethods[] = {ZipMethod::kDeflate, ZipMethod::kBzip2, ZipMethod::kLzma};
const char* const kWhere = "entry 'x.memmap' @ 12";

std::string Compress(ZipMethod method, const std::string& data) {
  std::string out;
  auto c = ZipCompressor::Make(method);
  auto sink = [&](const uint8_t* p, uint64_t n) { out.append(reinterpret_cast<const char*>(p), n); };
  c->Push(reinterpret_cast<const uint8_t*>(data.data()), data.size(), sink);
  c->Finish(sink);
  return out;
}

// Compressible but not trivial: runs of a counter mixed with random bytes, so that a window
// boundary lands inside matches and literals alike.
std::string Sample(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = (i / 1000) % 3 == 0 ? static_cast<char>(rng()) : static_cast<char>(i / 7);
  return s;
}

const uint8_t* U8(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

zip::Inflater Over(ZipMethod method, const std::string& packed, uint64_t usize) {
  return zip::Inflater(static_cast<uint16_t>(method), U8(packed), packed.size(), usize, kWhere);
}

// Reads everything in windows of `window` bytes.
std::string ReadAll(zip::Inflater& in, size_t window) {
  std::string out;
  std::vector<uint8_t> buf(window);
  while (in.remaining() > 0) {
    const uint64_t before = in.remaining();
    const size_t n = in.Read(buf.data(), window);
    EXPECT_EQ(n, std::min<uint64_t>(window, before));
    out.append(reinterpret_cast<const char*>(buf.data()), n);
  }
  return out;
}


TEST(Inflater, EveryMethodAtEveryWindowSize) {
  const std::string data = Sample(3 << 19, 1);
  for (ZipMethod method : kMethods) {
    SCOPED_TRACE(static_cast<int>(method));
    const std::string packed = Compress(method, data);
    ASSERT_LT(packed.size(), data.size());
    for (size_t window : {size_t{1} << 22, size_t{1} << 20, size_t{65536}, size_t{4093}}) {
      SCOPED_TRACE(window);
      zip::Inflater in = Over(method, packed, data.size());
      EXPECT_EQ(in.remaining(), data.size());
      EXPECT_TRUE(ReadAll(in, window) == data);
      EXPECT_EQ(in.produced(), data.size());
      in.Finish();  // done by the last Read already: a second time is nothing
      uint8_t b = 0;
      EXPECT_EQ(in.Read(&b, 1), 0u);  // at the end
    }
    // A byte at a time over a prefix (the whole would take long for nothing more).
    zip::Inflater in = Over(method, packed, data.size());
    for (size_t i = 0; i < 20000; ++i) {
      uint8_t b = 0;
      ASSERT_EQ(in.Read(&b, 1), 1u);
      ASSERT_EQ(static_cast<char>(b), data[i]) << i;
    }
  }
}

TEST(Inflater, SkipThenRead) {
  const std::string data = Sample(1 << 20, 2);
  for (ZipMethod method : kMethods) {
    SCOPED_TRACE(static_cast<int>(method));
    const std::string packed = Compress(method, data);
    zip::Inflater in = Over(method, packed, data.size());
    in.Skip(300001);
    EXPECT_EQ(in.produced(), 300001u);
    std::string part(5000, '\0');
    ASSERT_EQ(in.Read(reinterpret_cast<uint8_t*>(part.data()), part.size()), part.size());
    EXPECT_TRUE(part == data.substr(300001, 5000));
    in.Skip(in.remaining());  // skipping to the end checks the end too
    ExpectError([&] { in.Skip(1); }, ErrorCode::kUsage, "skip past the declared end");
  }
}

TEST(Inflater, TwoSideBySide) {
  // What diff does: two entries inflated in alternation, window by window, each in its own state.
  const std::string a = Sample(5 << 18, 3);
  std::string b = a;
  b[1234567] ^= 1;
  for (ZipMethod method : kMethods) {
    SCOPED_TRACE(static_cast<int>(method));
    const std::string pa = Compress(method, a), pb = Compress(method, b);
    zip::Inflater ia = Over(method, pa, a.size()), ib = Over(method, pb, b.size());
    std::vector<uint8_t> wa(1 << 16), wb(1 << 16);
    uint64_t first_difference = UINT64_MAX;
    while (ia.remaining() > 0) {
      const uint64_t at = ia.produced();
      const size_t n = ia.Read(wa.data(), wa.size());
      ASSERT_EQ(ib.Read(wb.data(), wb.size()), n);
      for (size_t i = 0; i < n && first_difference == UINT64_MAX; ++i)
        if (wa[i] != wb[i]) first_difference = at + i;
    }
    EXPECT_EQ(first_difference, 1234567u);
  }
}

TEST(Inflater, EmptyEntries) {
  // No compressed bytes at all (some writers) and a real empty stream.
  zip::Inflater none(static_cast<uint16_t>(ZipMethod::kDeflate), nullptr, 0, 0, kWhere);
  uint8_t b = 0;
  EXPECT_EQ(none.Read(&b, 1), 0u);
  none.Finish();
  for (ZipMethod method : kMethods) {
    const std::string packed = Compress(method, "");
    zip::Inflater in = Over(method, packed, 0);
    EXPECT_EQ(in.remaining(), 0u);
    in.Finish();
    // The declared empty entry that holds bytes is a bomb.
    const std::string full = Compress(method, "abc");
    zip::Inflater liar = Over(method, full, 0);
    ExpectError([&] { liar.Finish(); }, ErrorCode::kCorrupt, "decompresses to more than the declared 0 bytes");
  }
}

TEST(Inflater, TruncatedStreamsSayWhereAndHowFar) {
  const std::string data = Sample(1 << 20, 4);
  for (ZipMethod method : kMethods) {
    SCOPED_TRACE(static_cast<int>(method));
    const std::string packed = Compress(method, data);
    for (size_t keep : {packed.size() / 2, packed.size() - 1}) {
      SCOPED_TRACE(keep);
      const std::string cut = packed.substr(0, keep);  // kept alive: the inflater reads it
      zip::Inflater in = Over(method, cut, data.size());
      if (method == ZipMethod::kLzma && keep == packed.size() - 1) {
        // Only the end marker is cut: zip's LZMA may end without one once the declared size is
        // reached (flag bit 1 unset), so this reads whole.
        EXPECT_TRUE(ReadAll(in, 1 << 16) == data);
        continue;
      }
      try {
        ReadAll(in, 1 << 16);
        ADD_FAILURE() << "a truncated stream read whole";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kCorrupt) << e.message();
        EXPECT_EQ(e.message().rfind(kWhere, 0), 0u) << e.message();
        EXPECT_TRUE(e.message().find("compressed data ends early") != std::string::npos ||
                    e.message().find("invalid") != std::string::npos)
            << e.message();
      }
    }
    // The tail is read only by whoever reads it: a truncated stream's first window is fine
    // (bzip2 produces nothing before a whole block of 900 kB is in).
    if (method == ZipMethod::kBzip2) continue;
    const std::string half = packed.substr(0, packed.size() / 2);
    zip::Inflater head = Over(method, half, data.size());
    std::vector<uint8_t> buf(4096);
    ASSERT_EQ(head.Read(buf.data(), buf.size()), buf.size());
    EXPECT_EQ(std::memcmp(buf.data(), data.data(), buf.size()), 0);
  }
}

TEST(Inflater, CorruptStreamsAreInvalid) {
  const std::string data = Sample(1 << 20, 5);
  {
    std::string packed = Compress(ZipMethod::kDeflate, data);
    packed[0] = static_cast<char>(0x07);  // final block of type 3: reserved
    zip::Inflater in = Over(ZipMethod::kDeflate, packed, data.size());
    ExpectError([&] { ReadAll(in, 1 << 16); }, ErrorCode::kCorrupt,
                std::string(kWhere) + ": invalid deflate data (invalid block type)");
  }
  {
    std::string packed = Compress(ZipMethod::kBzip2, data);
    for (size_t i = packed.size() / 2; i < packed.size() / 2 + 64; ++i) packed[i] = static_cast<char>(~packed[i]);
    zip::Inflater in = Over(ZipMethod::kBzip2, packed, data.size());
    ExpectError([&] { ReadAll(in, 1 << 16); }, ErrorCode::kCorrupt, std::string(kWhere) + ": invalid bzip2 data");
  }
  {
    std::string packed = Compress(ZipMethod::kLzma, data);
    ASSERT_EQ(packed[2], 5);  // properties size
    std::string bad_props = packed;
    bad_props[4] = static_cast<char>(0xFF);  // lc/lp/pb beyond their range
    ExpectError([&] { Over(ZipMethod::kLzma, bad_props, data.size()); }, ErrorCode::kCorrupt,
                "invalid LZMA properties");
    const std::string short_header = packed.substr(0, 8);
    ExpectError([&] { Over(ZipMethod::kLzma, short_header, data.size()); }, ErrorCode::kCorrupt,
                "LZMA header needs 9 bytes, entry has 8");
    // Garbage where the range coder starts (its first byte must be 0).
    std::string garbage = packed;
    for (size_t i = 9; i < 64; ++i) garbage[i] = static_cast<char>(0xA5);
    zip::Inflater in = Over(ZipMethod::kLzma, garbage, data.size());
    ExpectError([&] { ReadAll(in, 1 << 16); }, ErrorCode::kCorrupt, std::string(kWhere) + ": invalid LZMA data");
  }
}

TEST(Inflater, SizeLiesBombsAndTrailingBytes) {
  const std::string zeros(4 << 20, '\0');
  for (ZipMethod method : kMethods) {
    SCOPED_TRACE(static_cast<int>(method));
    const std::string packed = Compress(method, zeros);
    // Declared smaller: every declared byte reads, the last Read finds more behind it.
    zip::Inflater bomb = Over(method, packed, 1000);
    std::vector<uint8_t> buf(999);
    ASSERT_EQ(bomb.Read(buf.data(), buf.size()), buf.size());
    ExpectError([&] { bomb.Read(buf.data(), 1); }, ErrorCode::kCorrupt, "decompresses to more than the declared 1000 bytes");
    // Declared larger.
    zip::Inflater more = Over(method, packed, zeros.size() + 1);
    ExpectError([&] { ReadAll(more, 1 << 20); }, ErrorCode::kCorrupt,
                "decompresses to " + std::to_string(zeros.size()) + " bytes, declared " + std::to_string(zeros.size() + 1));
    // Bytes after the end of the stream.
    const std::string junk = packed + "junk";
    zip::Inflater trailing = Over(method, junk, zeros.size());
    ExpectError([&] { ReadAll(trailing, 1 << 20); }, ErrorCode::kCorrupt, "4 bytes follow the end of the compressed stream");
    // Finish before the end is a caller's mistake, not the file's.
    zip::Inflater early = Over(method, packed, zeros.size());
    ExpectError([&] { early.Finish(); }, ErrorCode::kUsage, "Finish before every byte was read");
  }
}

TEST(Inflater, RefusedBeforeAnyWork) {
  const std::string packed = Compress(ZipMethod::kDeflate, "x");
  ExpectError([&] { zip::Inflater(99, U8(packed), packed.size(), 1, kWhere); }, ErrorCode::kUnsupported,
              std::string(kWhere) + ": compression method 99 is not supported");
  ExpectError([&] { zip::Inflater(8, U8(packed), packed.size(), kMaxInflatedEntryBytes + 1, kWhere); },
              ErrorCode::kLimit, "kMaxInflatedEntryBytes");
}

// --- through SharedBytes -----------------------------------------------------------------------

SharedBytes DeferredOf(ZipMethod method, const std::string& packed, uint64_t usize) {
  return zip::DeferredDecompress(SharedBytes::CopyOf(packed.data(), packed.size()), static_cast<uint16_t>(method),
                                 usize, kWhere);
}

TEST(DeferredReader, ReadsSlicesWithoutProducingTheWhole) {
  const std::string data = Sample(2 << 20, 6);
  for (ZipMethod method : kMethods) {
    SCOPED_TRACE(static_cast<int>(method));
    const SharedBytes bytes = DeferredOf(method, Compress(method, data), data.size());
    const SharedBytes slice = bytes.Slice(1 << 20, 1 << 20);
    SharedBytes::Reader r(slice);
    std::string got(slice.size(), '\0');
    uint8_t* out = reinterpret_cast<uint8_t*>(got.data());
    r.Read(out, 7);
    r.Skip(100000);
    r.Read(out + 7 + 100000, static_cast<size_t>(r.remaining()));
    EXPECT_EQ(r.remaining(), 0u);
    EXPECT_TRUE(got.substr(0, 7) == data.substr(1 << 20, 7));
    EXPECT_TRUE(got.substr(100007) == data.substr((1 << 20) + 100007, (1 << 20) - 100007));
    ExpectError([&] { r.Read(out, 1); }, ErrorCode::kUsage, "read of 1 bytes");
    std::string streamed;
    slice.Stream([&](const uint8_t* p, size_t n) { streamed.append(reinterpret_cast<const char*>(p), n); });
    EXPECT_TRUE(streamed == data.substr(1 << 20, 1 << 20));
    EXPECT_TRUE(bytes.deferred());  // nothing asked for the whole
  }
}

TEST(DeferredReader, DamageIsReportedByTheReader) {
  const std::string data = Sample(1 << 20, 7);
  const std::string packed = Compress(ZipMethod::kDeflate, data);
  const SharedBytes cut = DeferredOf(ZipMethod::kDeflate, packed.substr(0, packed.size() / 2), data.size());
  SharedBytes::Reader r(cut);
  std::vector<uint8_t> buf(1 << 16);
  ExpectError([&] {
    while (r.remaining() > 0) r.Read(buf.data(), static_cast<size_t>(std::min<uint64_t>(buf.size(), r.remaining())));
  }, ErrorCode::kCorrupt, std::string(kWhere) + ": compressed data ends early");
  ExpectError([&] { cut.Stream([](const uint8_t*, size_t) {}); }, ErrorCode::kCorrupt, "compressed data ends early");
}

TEST(DeferredReader, ElementReaderWalksTwoCompressedLeavesSideBySide) {
  // Two float32 leaves that differ in one element, read as TensorViews over deferred bytes.
  const size_t count = 1 << 18;
  std::vector<float> a(count), b;
  for (size_t i = 0; i < count; ++i) a[i] = static_cast<float>(i % 1000) * 0.5f;
  b = a;
  b[200000] = -1;
  auto view = [&](const std::vector<float>& v, ZipMethod method) {
    const std::string raw(reinterpret_cast<const char*>(v.data()), v.size() * 4);
    TensorView t;
    t.dtype = DType::kFloat32;
    t.shape = {static_cast<int64_t>(count / 512), 512};
    t.strides = {512, 1};
    t.storage = DeferredOf(method, Compress(method, raw), raw.size());
    t.Validate();
    return t;
  };
  for (ZipMethod method : kMethods) {
    SCOPED_TRACE(static_cast<int>(method));
    const TensorView ta = view(a, method), tb = view(b, method);
    ElementReader ra(ta), rb(tb);
    std::vector<float> wa(3000), wb(3000);
    uint64_t at = 0, differing = 0, where = 0;
    while (ra.remaining() > 0) {
      const uint64_t n = std::min<uint64_t>(wa.size(), ra.remaining());
      ra.Read(n, reinterpret_cast<uint8_t*>(wa.data()));
      rb.Read(n, reinterpret_cast<uint8_t*>(wb.data()));
      for (uint64_t i = 0; i < n; ++i) {
        EXPECT_EQ(wa[i], a[at + i]);
        if (wa[i] != wb[i]) ++differing, where = at + i;
      }
      at += n;
    }
    EXPECT_EQ(differing, 1u);
    EXPECT_EQ(where, 200000u);
    EXPECT_TRUE(ta.storage.deferred() && tb.storage.deferred());  // never held whole
    // A converting view reads through its source and converts as ForEachChunk does.
    const TensorView cast = CastView(ta, DType::kFloat64);
    std::vector<double> streamed;
    cast.ForEachChunk([&](const uint8_t* p, size_t n) {
      const size_t k = streamed.size();
      streamed.resize(k + n / 8);
      std::memcpy(streamed.data() + k, p, n);
    });
    std::vector<double> pulled(count);
    ElementReader rc(cast);
    rc.Read(count, reinterpret_cast<uint8_t*>(pulled.data()));
    EXPECT_TRUE(pulled == streamed);
    EXPECT_EQ(pulled[999], 499.5);
  }
}

}  // namespace
}  // namespace trove
