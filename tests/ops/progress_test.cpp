// The progress callbacks of the reading work (Verify's CRC-32s, Sha256Files, Diff, ComputeStats), which the
// command line's progress line shows: as WriteOptions::progress, the first argument never
// decreases nor exceeds the total, intermediate calls come at most once per kProgressStepBytes,
// and the last call is (total, total) with the total the bytes the work streams.
#include <algorithm>
#include <filesystem>
#include <utility>

#include "core/progress.h"
#include "ops_fixtures.h"
#include "trove/checks.h"
#include "trove/diff.h"
#include "trove/file_digests.h"
#include "trove/open.h"
#include "trove/pt_writer.h"
#include "trove/tensor_stats.h"
#include "trove/zip_reader.h"

namespace trove::opstest {
namespace {

using Calls = std::vector<std::pair<uint64_t, uint64_t>>;

// 3 tensors of 4 MiB of float32 each and a small one: several calls, and a last partial step.
std::vector<Leaf> LargeLeaves(double shift = 0) {
  std::vector<Leaf> leaves;
  for (int t = 0; t < 3; ++t) {
    Leaf leaf{"w" + std::to_string(t), DType::kFloat32, {1 << 20}, std::vector<double>(1 << 20)};
    for (size_t i = 0; i < leaf.values.size(); ++i) leaf.values[i] = static_cast<double>(i % 977) + shift;
    leaves.push_back(std::move(leaf));
  }
  leaves.push_back({"small", DType::kFloat32, {3}, {1, 2, 3}});
  return leaves;
}

void ExpectWellFormed(const Calls& calls, uint64_t total) {
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back(), std::make_pair(total, total));
  EXPECT_GE(calls.size(), 2u) << "intermediate calls for " << total << " bytes";
  // A step that was begun opens with (0, total): one call more (core/progress.h).
  const size_t opening = calls.front() == std::make_pair(uint64_t{0}, total) ? 1 : 0;
  EXPECT_LE(calls.size(), total / kProgressStepBytes + 1 + opening);
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].second, total);
    EXPECT_LE(calls[i].first, total);
    if (i > 0) {
      EXPECT_GE(calls[i].first, calls[i - 1].first);
    }
  }
}

class ProgressTest : public OpsTest {};

TEST_F(ProgressTest, VerifyCountsTheZipBytesItChecks) {
  WritePt(MakeDocument(LargeLeaves()), P("large.pt"));
  Calls calls;
  VerifyOptions options;
  options.progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  const CheckReport report = Verify(P("large.pt"), options);
  EXPECT_TRUE(report.findings.empty());
  uint64_t compressed = 0;
  const ZipReader zip(MappedFile::Open(P("large.pt")));
  for (const ZipEntry& e : zip.entries()) compressed += e.compressed_size;
  // Verify's work comes in steps, each its own run of calls from 0 to its total: the CRC-32s of
  // the entries' bytes, and reading the structure (the pickle). The CRC step counts every
  // entry's stored bytes; each step is well formed.
  std::vector<Calls> steps;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i == 0 || calls[i].second != calls[i - 1].second || calls[i].first < calls[i - 1].first) steps.emplace_back();
    steps.back().push_back(calls[i]);
  }
  ASSERT_GE(steps.size(), 1u);
  size_t crc_steps = 0;
  for (const Calls& step : steps) {
    if (step.back().second == compressed) {
      ++crc_steps;
      ExpectWellFormed(step, compressed);
    } else {
      EXPECT_EQ(step.back(), std::make_pair(step.back().second, step.back().second));
      EXPECT_LT(step.back().second, compressed) << "a step other than the CRCs: the structure's bytes";
    }
  }
  EXPECT_EQ(crc_steps, 1u);
  // Without a callback, the same report.
  EXPECT_EQ(Verify(P("large.pt")).bytes_checked, report.bytes_checked);
}

TEST_F(ProgressTest, Sha256CountsTheBytesOfEveryFileItHashes) {
  std::filesystem::create_directories(P("model"));
  WritePt(MakeDocument(LargeLeaves()), P("model/a.pt"));
  WritePt(MakeDocument(LargeLeaves(1)), P("model/b.pt"));
  const uint64_t one = std::filesystem::file_size(P("model/a.pt"));
  const uint64_t both = one + std::filesystem::file_size(P("model/b.pt"));
  Calls calls;
  auto record = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  EXPECT_EQ(Sha256Files(P("model/a.pt"), record)[0].sha256, Sha256Files(P("model/a.pt"))[0].sha256);
  ExpectWellFormed(calls, one);
  calls.clear();
  EXPECT_EQ(Sha256Files(P("model"), record).size(), 2u);
  ExpectWellFormed(calls, both);
}

TEST_F(ProgressTest, DiffCountsTheBytesOfAItCompares) {
  const Document a = MakeDocument(LargeLeaves()), b = MakeDocument(LargeLeaves(0.5));
  Calls calls;
  DiffOptions options;
  options.progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  const DiffReport r = Diff(a, b, options);
  EXPECT_FALSE(r.equal());
  ExpectWellFormed(calls, r.bytes_compared);
  // Identical tensors count too (compared byte for byte).
  calls.clear();
  EXPECT_TRUE(Diff(a, a, options).equal());
  ExpectWellFormed(calls, r.bytes_compared);
}

TEST_F(ProgressTest, StatsCountTheBytesOfEachSweep) {
  const Document doc = MakeDocument(LargeLeaves());
  std::vector<const TensorView*> views;
  uint64_t bytes = 0;
  for (const NamedTensor& t : doc.tensors) {
    views.push_back(t.view);
    bytes += t.view->nbytes();
  }
  for (uint32_t bins : {0u, 8u}) {  // exact histograms: a second sweep
    Calls calls;
    StatsOptions options;
    options.threads = 2;
    options.histogram_bins = bins;
    options.progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
    const std::vector<TensorStats> stats = ComputeStats(std::span<const TensorView* const>(views), options);
    ASSERT_EQ(stats.size(), views.size());
    ExpectWellFormed(calls, bins ? 2 * bytes : bytes);
  }
}

}  // namespace
}  // namespace trove::opstest
