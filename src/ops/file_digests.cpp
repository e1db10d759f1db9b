#include "trove/file_digests.h"

#include <fcntl.h>
#include <nettle/sha2.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "core/confined_directory.h"
#include "core/progress.h"
#include "core/worker_pool.h"
#include "trove/atomic_file.h"
#include "trove/error.h"

namespace trove {
namespace {

namespace fs = std::filesystem;

// Bytes one read asks for: large enough that the system call cost vanishes against hashing
// (~2 GB/s), small enough to stay in cache.
constexpr size_t kDigestReadBytes = size_t{4} << 20;

std::string Hex(const unsigned char* digest, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < size; ++i) {
    out += kDigits[digest[i] >> 4];
    out += kDigits[digest[i] & 15];
  }
  return out;
}

FileDigest DigestOf(ConfinedFile file, std::string shown, ProgressReporter& progress) {
  sha256_ctx ctx;
  sha256_init(&ctx);
  ::posix_fadvise(file.fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<unsigned char> buffer(kDigestReadBytes);
  uint64_t done = 0;
  while (done < file.size) {
    ThrowIfInterrupted();
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), file.size - done));
    const ssize_t n = ::pread(file.fd.get(), buffer.data(), want, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(ErrorCode::kIo, std::string("read: ") + std::strerror(errno)).SetFile(shown);
    if (n == 0) {
      throw Error(ErrorCode::kIo, "the file shrank while being hashed: " + std::to_string(done) + " of " +
                                      std::to_string(file.size) + " bytes").SetFile(shown);
    }
    sha256_update(&ctx, static_cast<size_t>(n), buffer.data());
    done += static_cast<uint64_t>(n);
    progress.Add(static_cast<uint64_t>(n));
  }
  unsigned char digest[SHA256_DIGEST_SIZE];
  sha256_digest(&ctx, sizeof digest, digest);
  return {std::move(shown), Hex(digest, sizeof digest), file.size, {}};
}

// One file of a directory to hash, found before any is hashed.
struct PendingFile {
  std::shared_ptr<const ConfinedDirectory> dir;
  std::string name, shown;
};

void ListDirectory(const std::string& path, std::vector<PendingFile>& out) {
  auto dir = ConfinedDirectory::Open(path);
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) throw Error(ErrorCode::kIo, ec.message()).SetFile(path);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (out.size() >= kMaxDigestFiles) {
      throw Error(ErrorCode::kLimit, "more than kMaxDigestFiles (" + std::to_string(kMaxDigestFiles) + ") files to hash")
          .SetFile(path);
    }
    const std::string shown = (fs::path(path) / name).string();
    const fs::file_status status = fs::symlink_status(shown, ec);
    if (!ec && status.type() == fs::file_type::directory) {
      ListDirectory(shown, out);
      continue;
    }
    out.push_back({dir, name, shown});
  }
}

// The files of a directory (and its subdirectories) in name order, hashed on the worker threads
// (one file each at a time: a digest is sequential); a file is opened only when hashed, so the
// descriptors in use are one per thread however many files there are.
void DigestDirectory(const std::string& path, std::vector<FileDigest>& out, const ProgressReporter::Callback& callback) {
  std::vector<PendingFile> files;
  ListDirectory(path, files);
  uint64_t total = 0;
  if (callback) {
    std::error_code ec;
    for (const PendingFile& f : files) {
      const uint64_t size = fs::is_regular_file(f.shown, ec) ? fs::file_size(f.shown, ec) : 0;
      total += ec ? 0 : size;
    }
  }
  ProgressReporter progress(callback, total);
  std::vector<std::optional<FileDigest>> digests(files.size());
  RunPieces(files.size(), [&](uint64_t k) {
    const PendingFile& f = files[k];
    try {
      std::optional<ConfinedFile> file = f.dir->OpenFile(f.name);
      if (file) digests[k] = DigestOf(std::move(*file), f.shown, progress);
    } catch (const Error& e) {
      // A link leading out of the directory, a FIFO, a socket: named, not read.
      digests[k] = FileDigest{f.shown, "", 0, e.message()};
    }
  });
  progress.Finish();
  for (auto& d : digests)
    if (d) out.push_back(std::move(*d));
}

}  // namespace

std::vector<FileDigest> Sha256Files(const std::string& path) { return Sha256Files(path, {}); }

std::vector<FileDigest> Sha256Files(const std::string& path, const std::function<void(uint64_t, uint64_t)>& progress) {
  std::vector<FileDigest> out;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    DigestDirectory(path, out, progress);
  } else {
    ConfinedFile file = OpenUserFile(path);
    ProgressReporter reporter(progress, file.size);
    out.push_back(DigestOf(std::move(file), path, reporter));
    reporter.Finish();
  }
  return out;
}

}  // namespace trove
