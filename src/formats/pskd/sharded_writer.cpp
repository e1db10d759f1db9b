// One .psk.d or shards of about a size and their manifest (formats/pskd/sharded_writer.h).
#include "formats/pskd/sharded_writer.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "trove/atomic_file.h"
#include "trove/error.h"

namespace trove::pskd {
namespace {

constexpr std::string_view kSuffix = ".psk.d";
// Shard numbers are zero-padded to this many digits, so that a pattern's byte order is shard order.
constexpr int kShardDigits = 5;

std::string ShardName(const std::string& stem, size_t k) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "-%0*zu", kShardDigits, k);
  return stem + digits + std::string(kSuffix);
}

}  // namespace

ShardedPskdWriter::ShardedPskdWriter(std::string output, SampleType type, uint64_t max_shard_bytes, Durability durability)
    : output_(std::move(output)), type_(std::move(type)), durability_(durability) {
  if (max_shard_bytes == 0) {
    current_ = std::make_unique<PskdWriter>(output_, type_, durability_);
    return;
  }
  if (output_.size() <= kSuffix.size() || output_.compare(output_.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    Fail(ErrorCode::kUsage, "--shard-size: the output names the dataset as NAME.psk.d (its shards are NAME-00000.psk.d... "
                            "and its manifest NAME.json), got '" + output_ + "'");
  }
  stem_ = output_.substr(0, output_.size() - kSuffix.size());
  const uint64_t header = EncodeHeader(type_, 0).size();
  const uint64_t smallest = header + type_.sample_bytes;
  if (max_shard_bytes < smallest) {
    Fail(ErrorCode::kUsage, "--shard-size " + std::to_string(max_shard_bytes) + " bytes holds no sample of " +
                                type_.text + ": a shard needs at least " + std::to_string(smallest) + " bytes (a " +
                                std::to_string(header) + "-byte header and one " + std::to_string(type_.sample_bytes) +
                                "-byte sample)");
  }
  samples_per_shard_ = (max_shard_bytes - header) / type_.sample_bytes;
  const std::filesystem::path directory = std::filesystem::path(output_).parent_path();
  staging_ = std::make_unique<AtomicDirectory>(directory.empty() ? "." : directory.string(), durability_,
                                               OutputKind::kFilesInDirectory);
}

ShardedPskdWriter::~ShardedPskdWriter() = default;

std::string ShardedPskdWriter::Staged(const std::string& path) const {
  return (std::filesystem::path(staging_->path()) / std::filesystem::path(path).filename()).string();
}

void ShardedPskdWriter::OpenShard() {
  if (current_) current_->Commit();  // into the staging folder
  shards_.push_back(ShardName(stem_, shards_.size()));
  // The staging folder is made durable as a whole (AtomicDirectory::Commit), not file by file.
  current_ = std::make_unique<PskdWriter>(Staged(shards_.back()), type_, Durability::kReplaceSafe);
}

void ShardedPskdWriter::Append(std::span<const uint8_t> samples) {
  const uint64_t size = type_.sample_bytes;
  if (size == 0 || samples.size() % size != 0) {
    FailPskd(PskdCode::kLayout, std::to_string(samples.size()) + " bytes are not whole samples of " + std::to_string(size));
  }
  for (uint64_t at = 0; at < samples.size(); at += size) {
    if (samples_per_shard_ != 0 && (!current_ || current_->count() == samples_per_shard_)) OpenShard();
    current_->Append(samples.subspan(at, size));
    ++count_;
  }
}

std::vector<std::string> ShardedPskdWriter::Commit() {
  if (samples_per_shard_ == 0) {
    current_->Commit();
    return {output_};
  }
  if (!current_) OpenShard();  // no sample: one empty shard, so that the manifest names a dataset
  current_->Commit();
  current_.reset();
  nlohmann::json names = nlohmann::json::array();
  for (const std::string& shard : shards_) names.push_back(std::filesystem::path(shard).filename().string());
  const std::string manifest = stem_ + ".json";
  std::string text;
  try {
    text = nlohmann::json{{"shards", names}}.dump(1) + "\n";
  } catch (const nlohmann::json::exception&) {
    Fail(ErrorCode::kUsage, "a JSON manifest lists its shards in UTF-8: name the output in UTF-8");
  }
  AtomicFile file(Staged(manifest), Durability::kReplaceSafe);
  file.Write(text.data(), text.size());
  file.Commit();
  staging_->MoveLast(std::filesystem::path(manifest).filename().string());
  staging_->Commit();
  std::vector<std::string> out = shards_;
  out.push_back(manifest);
  return out;
}

}  // namespace trove::pskd
