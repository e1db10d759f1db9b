// formats/pskd/sharded_writer.h: the data writers' output, one .psk.d or shards of about a size.
//
// Without a shard size the samples go to one file (a PskdWriter). With one (--shard-size), OUT.psk.d
// names the dataset: the samples go to OUT-00000.psk.d, OUT-00001.psk.d, ... each holding as many
// whole samples as fit in the size with its header, and a manifest OUT.json lists them
// (docs/pskd.md, "Datasets of many files"). The shards and the manifest are built in a hidden
// folder inside the output's directory (an AtomicDirectory of kFilesInDirectory) and move in
// when all are written, the manifest last: a command that fails or is killed leaves none of its
// files and changes no file there (an earlier dataset of the same name included).
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
  ~ShardedPskdWriter();  // an uncommitted writer leaves nothing
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
  // Where a file of the dataset is built before it moves in: `path`'s name in the staging folder.
  std::string Staged(const std::string& path) const;
  std::string output_;
  SampleType type_;
  Durability durability_;
  uint64_t samples_per_shard_ = 0;  // 0: one file, unbounded
  std::string stem_;
  std::unique_ptr<AtomicDirectory> staging_;  // sharded: the hidden folder the files are built in
  std::unique_ptr<PskdWriter> current_;       // declared after staging_: destroyed before it
  std::vector<std::string> shards_;           // where each shard goes, the one being written last
  uint64_t count_ = 0;
};

}  // namespace trove::pskd
