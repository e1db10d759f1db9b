// `lm-windows` and `tokens`: a token stream cut into (input, target) windows, or stored once, streaming.
#include <algorithm>
#include <cstring>

#include "core/little_endian.h"
#include "formats/pskd/pskd_text.h"
#include "formats/pskd/sharded_writer.h"
#include "formats/pskd/token_files.h"

namespace trove::pskd {
namespace {

// The bound of the ids: --vocab, checked while reading, or the largest id + 1 (one more pass).
uint64_t VocabOf(const TokenJob& job, const TokenFiles& files) {
  if (job.vocab) {
    if (*job.vocab == 0) FailPskd(PskdCode::kNotClosedType, "--vocab 0: idx[0] has no values");
    return *job.vocab;
  }
  const uint64_t max = files.MaxId();
  if (max == ~uint64_t{0}) FailPskd(PskdCode::kBadValue, "an id of 2^64 - 1 leaves no bound idx[2^64]: give --vocab");
  return max + 1;
}

}  // namespace

LmWindowsResult WriteLmWindows(const TokenJob& job, uint64_t seq, uint64_t stride) {
  if (seq == 0) Fail(ErrorCode::kUsage, "--seq must be at least 1");
  if (stride == 0) Fail(ErrorCode::kUsage, "--stride must be at least 1");
  if (seq > kMaxWindowTokens) {
    Fail(ErrorCode::kLimit, "--seq " + std::to_string(seq) + " is above the cap of " + std::to_string(kMaxWindowTokens) +
                                " tokens a window (kMaxWindowTokens)");
  }
  TokenFiles files(job.inputs, job.bin_dtype);
  const uint64_t vocab = VocabOf(job, files);
  LmWindowsResult result;
  const std::string leaf = "idx[" + std::to_string(vocab) + "][seq: " + std::to_string(seq) + "]";
  result.type = "(" + leaf + ", " + leaf + ")";
  SampleType type = ParseSampleType(result.type);
  const uint32_t width = type.leaves[0].element_bytes;
  const uint64_t span = seq + 1;  // tokens one window covers

  ShardedPskdWriter writer(job.output, std::move(type), job.shard_bytes);
  std::vector<uint8_t> sample(writer.type().sample_bytes);
  std::vector<uint64_t> pending;  // tokens from the next window's first on
  pending.reserve(2 * span);
  size_t head = 0;                // pending[head] is the first token of the next window
  uint64_t skip = 0;              // tokens to drop before the next window starts (stride > span)

  auto emit = [&](const uint64_t* w) {
    uint8_t* input_leaf = sample.data();
    uint8_t* target_leaf = sample.data() + seq * width;
    for (uint64_t i = 0; i < seq; ++i) {
      StoreLe(input_leaf + i * width, w[i], width);
      StoreLe(target_leaf + i * width, w[i + 1], width);
    }
    writer.Append(sample);
  };

  files.ForEach(vocab, [&](const uint64_t* ids, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      ++result.tokens;
      if (skip > 0) {
        --skip;
        continue;
      }
      pending.push_back(ids[i]);
      if (pending.size() - head == span) {
        emit(pending.data() + head);
        ++result.windows;
        if (stride <= span) {
          head += stride;
        } else {
          skip = stride - span;
          head = pending.size();
        }
        if (head >= span) {  // compact: keep memory at two windows
          pending.erase(pending.begin(), pending.begin() + static_cast<ptrdiff_t>(head));
          head = 0;
        }
      }
    }
  });
  result.files = writer.Commit();
  return result;
}

LmWindowsResult WriteTokenStream(const TokenJob& job) {
  TokenFiles files(job.inputs, job.bin_dtype);
  const uint64_t vocab = VocabOf(job, files);
  LmWindowsResult result;
  result.type = "idx[" + std::to_string(vocab) + "][]";
  SampleType type = ParseSampleType(result.type);
  const uint32_t width = type.leaves[0].element_bytes;
  ShardedPskdWriter writer(job.output, std::move(type), job.shard_bytes);
  std::vector<uint8_t> bytes;
  files.ForEach(vocab, [&](const uint64_t* ids, size_t n) {
    bytes.resize(n * width);
    for (size_t i = 0; i < n; ++i) StoreLe(bytes.data() + i * width, ids[i], width);
    writer.Append(bytes);
    result.tokens += n;
  });
  result.windows = result.tokens;
  result.files = writer.Commit();
  return result;
}

}  // namespace trove::pskd
