// WriteOptions::progress: every writer calls it as tensor bytes stream, at a bounded rate,
// serialized, monotone, ending at the total (the CLI's progress line and the bindings rely on it).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/progress.h"
#include "formats/tensordict/td_fixtures.h"
#include "trove/convert.h"
#include "trove/document.h"
#include "trove/open.h"
#include "trove/safetensors.h"
#include "trove/tensordict.h"

namespace trove {
namespace {

namespace fs = std::filesystem;

struct Call {
  uint64_t done, total;
};

// Records the calls and notices two at once (the directory writer has helper threads).
struct Recorder {
  std::vector<Call> calls;
  std::atomic<int> inside{0};
  bool overlapped = false;
  std::function<void(uint64_t, uint64_t)> Callback() {
    return [this](uint64_t done, uint64_t total) {
      if (inside.fetch_add(1) != 0) overlapped = true;
      calls.push_back({done, total});
      inside.fetch_sub(1);
    };
  }
  // Checks the contract; `extra_finals` allows one more final-of-a-part call per shard.
  void Check(const std::string& what, uint64_t expected_total, uint64_t extra_finals = 0) const {
    SCOPED_TRACE(what);
    EXPECT_FALSE(overlapped);
    ASSERT_GE(calls.size(), 2u);
    const uint64_t total = calls.back().total;
    if (expected_total) {
      EXPECT_EQ(total, expected_total);
    }
    EXPECT_EQ(calls.back().done, total);
    EXPECT_LE(calls.size(), total / kProgressStepBytes + 1 + extra_finals);
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].total, total) << "call " << i;
      EXPECT_LE(calls[i].done, total) << "call " << i;
      if (i) {
        EXPECT_GE(calls[i].done, calls[i - 1].done) << "call " << i;
      }
    }
  }
};

TensorView Floats(std::vector<int64_t> shape, std::vector<int64_t> strides, uint64_t elements, float seed) {
  std::vector<uint8_t> bytes(elements * 4);
  for (uint64_t i = 0; i < elements; ++i) {
    const float f = seed + static_cast<float>(i % 251);
    std::memcpy(bytes.data() + 4 * i, &f, 4);
  }
  TensorView t;
  t.dtype = DType::kFloat32;
  t.shape = std::move(shape);
  t.strides = std::move(strides);
  t.storage = SharedBytes::FromVector(std::move(bytes));
  return t;
}

// 64 samples: three contiguous 8 MiB float32 leaves, a 4 MiB transposed (non-contiguous) one and
// int64 labels: about 28 MiB, written in chunks (in memory) or copied whole (mapped).
Document MakeDoc() {
  Document doc;
  Value* root = doc.arena->Dict("collections.OrderedDict");
  auto put = [&](const std::string& key, const TensorView& t) {
    root->entries.emplace_back(doc.arena->Str(key), doc.arena->Tensor(t));
  };
  for (int i = 0; i < 3; ++i) put("w" + std::to_string(i), Floats({64, 32768}, {32768, 1}, 64 * 32768, float(i)));
  put("transposed", Floats({64, 16384}, {1, 64}, 64 * 16384, 7.0f));
  std::vector<uint8_t> labels(64 * 8);
  for (int i = 0; i < 64; ++i) labels[8 * i] = static_cast<uint8_t>(i);
  TensorView l;
  l.dtype = DType::kInt64;
  l.shape = {64};
  l.strides = {1};
  l.storage = SharedBytes::FromVector(std::move(labels));
  put("labels", l);
  doc.root = root;
  doc.tensors = CollectTensors(root);
  return doc;
}

uint64_t TensorBytesOf(const Document& doc) {
  uint64_t n = 0;
  for (const auto& t : doc.tensors) n += t.view->nbytes();
  return n;
}

// A scratch directory per test (the tensordict tests' fixture).
class ProgressTest : public tdtest::TdTest {
 protected:

  // Converts `doc` to every format and checks each writer's calls.
  void ConvertToEveryFormat(const Document& doc, const std::string& tag) {
    const uint64_t bytes = TensorBytesOf(doc);
    struct Target {
      std::string name;
      Format format;
      ZipMethod compression = ZipMethod::kStored;
      std::optional<uint64_t> shard = std::nullopt;
    };
    const std::vector<Target> targets = {
        {"a.pt", Format::kPt},
        {"a_dir", Format::kTensordictDir},
        {"a.tdz", Format::kTdz},
        {"deflated.tdz", Format::kTdz, ZipMethod::kDeflate},
        {"a.psk.d", Format::kPskd},
        {"a.safetensors", Format::kSafetensors},
        {"st_shards", Format::kSafetensors, ZipMethod::kStored, uint64_t{10} << 20},
        {"pt_shards", Format::kPt, ZipMethod::kStored, uint64_t{10} << 20},
    };
    for (const Target& t : targets) {
      Recorder r;
      ConvertOptions opts;
      opts.compression = t.compression;
      opts.max_shard_bytes = t.shard;
      opts.progress = r.Callback();
      ConvertDocument(doc, P(tag + "_" + t.name), t.format, opts);
      // .psk.d re-encodes (labels become index elements): its total is the samples' bytes.
      r.Check(tag + " -> " + t.name, t.format == Format::kPskd ? 0 : bytes, t.shard ? 4 : 0);
    }
    {
      Recorder r;
      TensordictWriteOptions opts;
      opts.progress = r.Callback();
      PackTdz(P(tag + "_a_dir"), P(tag + "_packed.tdz"), opts);
      r.Check(tag + ": pack", 0);
      EXPECT_GE(r.calls.back().total, bytes);  // every file, meta.json included
      EXPECT_EQ(Open(P(tag + "_packed.tdz")).tensors.size(), doc.tensors.size());
    }
    {
      Recorder r;
      TensordictWriteOptions opts;
      opts.progress = r.Callback();
      UnpackTdz(P(tag + "_a.tdz"), P(tag + "_unpacked"), opts);
      r.Check(tag + ": unpack", 0);
      EXPECT_GE(r.calls.back().total, bytes);
    }
  }
};

TEST_F(ProgressTest, EveryWriterReportsFromADocumentInMemory) { ConvertToEveryFormat(MakeDoc(), "mem"); }

TEST_F(ProgressTest, EveryWriterReportsFromAMappedSource) {
  WriteSafetensors(MakeDoc(), P("source.safetensors"));
  ConvertToEveryFormat(Open(P("source.safetensors")), "mapped");
}

TEST_F(ProgressTest, AnEmptyCallbackIsNeverCalledAndAnEmptyDocumentEndsAtZero) {
  Document doc = MakeDoc();
  ConvertOptions quiet;
  ConvertDocument(doc, P("quiet.pt"), Format::kPt, quiet);  // no callback: nothing to call
  Document empty;
  empty.root = empty.arena->Dict("collections.OrderedDict");
  empty.tensors = CollectTensors(empty.root);
  std::vector<Call> calls;
  ConvertOptions opts;
  opts.progress = [&](uint64_t d, uint64_t t) { calls.push_back({d, t}); };
  ConvertDocument(empty, P("empty.pt"), Format::kPt, opts);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].done, 0u);
  EXPECT_EQ(calls[0].total, 0u);
}

TEST_F(ProgressTest, AnExceptionFromTheCallbackAbandonsTheWrite) {
  ConvertOptions opts;
  opts.progress = [](uint64_t, uint64_t) { throw std::runtime_error("stop"); };
  EXPECT_THROW(ConvertDocument(MakeDoc(), P("stopped.tdz"), Format::kTdz, opts), std::runtime_error);
  EXPECT_FALSE(fs::exists(P("stopped.tdz")));
}

TEST(ProgressReporter, CallsAtMostOncePerStepAndOnceAtTheEnd) {
  std::vector<Call> calls;
  std::function<void(uint64_t, uint64_t)> fn = [&](uint64_t d, uint64_t t) { calls.push_back({d, t}); };
  const uint64_t total = 10 * kProgressStepBytes + 5;
  ProgressReporter p(fn, total);
  for (uint64_t i = 0; i < total / 4096; ++i) p.Add(4096);
  p.Add(total);  // more than announced is clamped
  p.Finish();
  p.Finish();
  ASSERT_EQ(calls.size(), 11u);  // one per step (10), then Finish's (total, total)
  EXPECT_EQ(calls.back().done, total);
  for (size_t i = 1; i + 1 < calls.size(); ++i) EXPECT_EQ(calls[i].done - calls[i - 1].done, kProgressStepBytes);
}

}  // namespace
}  // namespace trove
