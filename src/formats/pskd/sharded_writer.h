// formats/pskd/sharded_writer.h: the data writers' output, one .psk.d or shards of about a size.
//
// Without a shard size the samples go to one file (a PskdWriter). With one (--shard-size), OUT.psk.d
// names the dataset: the samples go to OUT-00000.psk.d, OUT-00001.psk.d, ... each holding as many
// whole samples as fit in the size with its header, and a manifest OUT.json lists them
// (docs/pskd.md, "Datasets of many files"), written last. Every file goes through an AtomicFile;
// a shard is committed when full, and if the command fails before the manifest is written the
// shards this writer committed are removed again, so a failure leaves none of its files.
// Not thread-safe; one object per command.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "trove/atomic_file.h"
#include "trove/pskd.h"

namespace trove::pskd {

class ShardedPskdWriter {
 public:
  // max_shard_bytes 0: one file `output`. Otherwise `output` must end in .psk.d, and a size that
  // holds no sample after the header is a usage error saying the smallest that does.
  ShardedPskdWriter(std::string output, SampleType type, uint64_t max_shard_bytes,
                    Durability durability = Durability::kReplaceSafe);
  ~ShardedPskdWriter();
  ShardedPskdWriter(const ShardedPskdWriter&) = delete;
  ShardedPskdWriter& operator=(const ShardedPskdWriter&) = delete;

  const SampleType& type() const { return type_; }
  // Whole samples, back to back (a multiple of the sample size, else E9005).
  void Append(std::span<const uint8_t> samples);
  uint64_t count() const { return count_; }
  // Commits the last shard and the manifest; returns every file written (the manifest last).
  std::vector<std::string> Commit();

 private:
  void OpenShard();
  std::string output_;
  SampleType type_;
  Durability durability_;
  uint64_t samples_per_shard_ = 0;  // 0: one file, unbounded
  std::string stem_;
  std::unique_ptr<PskdWriter> current_;
  std::vector<std::string> shards_;  // committed, and the one being written last
  size_t finished_ = 0;              // shards_[0, finished_) are committed
  uint64_t count_ = 0;
  bool committed_ = false;
};

}  // namespace trove::pskd
