// Document -> tensordict directory (format version 1), built under AtomicDirectory.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/write_behind.h"
#include "formats/tensordict/write_plan.h"
#include "trove/atomic_file.h"
#include "trove/error.h"
#include "trove/tensordict.h"

namespace trove {
namespace {

void WritePlannedFile(const tensordict::PlannedFile& f, const std::string& path, bool syncs) {
  // O_EXCL|O_NOFOLLOW: the temporary tree is ours and empty; anything already there is an error.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) Fail(ErrorCode::kIo, path + ": " + std::strerror(errno));
  try {
    uint64_t written = 0;
    uint64_t writeback_started = 0;
    uint64_t* writeback = syncs ? &writeback_started : nullptr;
    f.Emit([&](const uint8_t* p, size_t n) { WriteOut(fd, p, n, path, written, writeback); });
    if (syncs) WriteBehind(fd, written, writeback_started, /*complete=*/true);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) Fail(ErrorCode::kIo, path + ": " + std::strerror(errno));
}

// `syncs`: the tree is synced at the end (AtomicDirectory::syncs), so writeback starts early.
void WritePlannedDir(const tensordict::PlannedDir& dir, const std::string& path, bool syncs) {
  for (const auto& f : dir.files) {
    WritePlannedFile(f, path + "/" + f.name, syncs);
  }
  for (const auto& d : dir.dirs) {
    const std::string sub = path + "/" + d->name;
    if (::mkdir(sub.c_str(), 0755) != 0) Fail(ErrorCode::kIo, sub + ": " + std::strerror(errno));
    WritePlannedDir(*d, sub, syncs);
  }
  // meta.json last: even inside the temporary tree a level is complete once it has one.
  WritePlannedFile(dir.meta, path + "/meta.json", syncs);
}

}  // namespace

void WriteTensordictDir(const Document& doc, const std::string& dir, const TensordictWriteOptions& options) {
  WithContext(dir, [&] {
    auto plan = tensordict::PlanTensordict(doc);  // every refusal happens before anything is created
    AtomicDirectory out(dir, options.durability);
    WritePlannedDir(*plan, out.path(), out.syncs());
    out.Commit();
  });
}

}  // namespace trove
