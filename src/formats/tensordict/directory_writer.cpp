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

void WritePlannedFile(const tensordict::PlannedFile& f, const std::string& path) {
  // O_EXCL|O_NOFOLLOW: the temporary tree is ours and empty; anything already there is an error.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) Fail(ErrorCode::kIo, path + ": " + std::strerror(errno));
  try {
    uint64_t written = 0;
    uint64_t writeback_started = 0;
    f.Emit([&](const uint8_t* p, size_t n) { WriteOut(fd, p, n, path, written, writeback_started); });
    WriteBehind(fd, written, writeback_started, /*complete=*/true);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) Fail(ErrorCode::kIo, path + ": " + std::strerror(errno));
}

void WritePlannedDir(const tensordict::PlannedDir& dir, const std::string& path) {
  for (const auto& f : dir.files) {
    WritePlannedFile(f, path + "/" + f.name);
  }
  for (const auto& d : dir.dirs) {
    const std::string sub = path + "/" + d->name;
    if (::mkdir(sub.c_str(), 0755) != 0) Fail(ErrorCode::kIo, sub + ": " + std::strerror(errno));
    WritePlannedDir(*d, sub);
  }
  // meta.json last: even inside the temporary tree a level is complete once it has one.
  WritePlannedFile(dir.meta, path + "/meta.json");
}

}  // namespace

void WriteTensordictDir(const Document& doc, const std::string& dir, const TensordictWriteOptions&) {
  WithContext(dir, [&] {
    auto plan = tensordict::PlanTensordict(doc);  // every refusal happens before anything is created
    AtomicDirectory out(dir);
    WritePlannedDir(*plan, out.path());
    out.Commit();
  });
}

}  // namespace trove
