#include "core/confined_directory.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "trove/error.h"

namespace trove {
namespace fs = std::filesystem;

namespace {

// What a non-regular file is, for the message that refuses it.
std::string_view KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

[[noreturn]] void Refuse(std::string_view name, const std::string& why) {
  throw Error(ErrorCode::kRefused, why).AddContext("'" + std::string(name) + "'");
}

// A file of a directory as messages show it: the directory as it was named, then the name in it.
std::string ShownPath(const std::string& dir, std::string_view name) {
  return dir.empty() ? std::string(name) : (fs::path(dir) / std::string(name)).string();
}

// The errors of OpenFile name the file as the directory was named plus the name in it
// ('ckpt/sub/x.safetensors'), so that a message says which checkpoint's file was refused. It is a
// context, not the error's file: the caller's file stays the one the message is about (the index
// or metadata that named this file: "ckpt/model.safetensors.index.json: shard of tensor 'w':
// 'ckpt/sub/x.safetensors': No such file or directory").
[[noreturn]] void FailErrno(std::string_view shown, int err) {
  throw Error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, std::strerror(err))
      .AddContext("'" + std::string(shown) + "'");
}

std::vector<std::string_view> Components(std::string_view name) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    const size_t slash = name.find('/', start);
    out.push_back(name.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
    if (slash == std::string_view::npos) return out;
    start = slash + 1;
  }
}

bool IsPlainComponent(std::string_view c) {
  return !c.empty() && c != "." && c != ".." && c.size() <= NAME_MAX &&
         c.find_first_of(std::string_view("\0\\", 2)) == std::string_view::npos;
}

// The repository folder of a Hugging Face cache (`.../models--org--name`) when `canonical` lies in
// one of its snapshots (`<repo>/snapshots/<revision>[/...]`) and the repository has its blobs
// folder; "" otherwise.
std::string HfRepositoryOf(const std::string& canonical) {
  const fs::path p(canonical);
  fs::path repo;
  std::vector<fs::path> parts(p.begin(), p.end());
  for (size_t i = 1; i + 1 < parts.size(); ++i) {
    if (parts[i] != "snapshots") continue;
    const std::string name = parts[i - 1].string();
    if (!name.starts_with("models--") && !name.starts_with("datasets--") && !name.starts_with("spaces--")) continue;
    fs::path candidate;
    for (size_t j = 0; j < i; ++j) candidate /= parts[j];
    repo = candidate;
  }
  if (repo.empty()) return "";
  struct stat st {};
  if (::lstat((repo / "blobs").c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "";
  return repo.string();
}

// Checks an opened descriptor against what fstatat saw before the open: the same regular file.
uint64_t CheckOpened(int fd, const struct stat& before, const std::string& shown) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) FailErrno(shown, errno);
  if (!S_ISREG(st.st_mode)) Refuse(shown, std::string("is ") + std::string(KindOf(st.st_mode)) + ", not a regular file");
  if (st.st_dev != before.st_dev || st.st_ino != before.st_ino) {
    throw Error(ErrorCode::kIo, "changed while being opened").AddContext("'" + shown + "'");
  }
  return static_cast<uint64_t>(st.st_size);
}

// Opens `leaf` in directory `dfd` by the rule: regular (checked before opening), never followed.
// nullopt when it does not exist; `symlink` is set instead of failing when it is a link.
std::optional<ConfinedFile> OpenRegularAt(int dfd, const std::string& leaf, const std::string& shown, bool* symlink) {
  struct stat st {};
  if (::fstatat(dfd, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return std::nullopt;
    FailErrno(shown, errno);
  }
  if (S_ISLNK(st.st_mode) && symlink != nullptr) {
    *symlink = true;
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    if (S_ISLNK(st.st_mode)) Refuse(shown, "is a symbolic link (refused: a link could lead anywhere)");
    Refuse(shown, std::string("is ") + std::string(KindOf(st.st_mode)) + ", not a regular file (not opened)");
  }
  const int fd = ::openat(dfd, leaf.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) Refuse(shown, "is a symbolic link (refused: a link could lead anywhere)");
    FailErrno(shown, errno);
  }
  ConfinedFile out;
  out.fd = Fd(fd);
  out.size = CheckOpened(fd, st, shown);
  out.identity = {st.st_dev, st.st_ino};
  return out;
}

}  // namespace

void ConfinedDirectory::CheckName(std::string_view name) {
  if (name.empty()) Refuse(name, "an empty file name");
  if (name.size() > kMaxNamedPathBytes) {
    throw Error(ErrorCode::kRefused, "a file name of " + std::to_string(name.size()) + " bytes (the cap is " +
                                         std::to_string(kMaxNamedPathBytes) + ", kMaxNamedPathBytes)");
  }
  if (name.front() == '/') Refuse(name, "an absolute path (a file may name only files inside its own directory)");
  for (std::string_view c : Components(name)) {
    if (!IsPlainComponent(c)) {
      Refuse(name, c == ".." ? "leads out of its directory ('..')"
                             : "is not a plain relative path (empty, '.', '\\' or NUL component, or one over NAME_MAX)");
    }
  }
}

std::shared_ptr<const ConfinedDirectory> ConfinedDirectory::Open(const std::string& path) {
  std::shared_ptr<ConfinedDirectory> dir(new ConfinedDirectory());
  dir->path_ = path;
  const int fd = ::open(path.empty() ? "." : path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOTDIR) throw Error(ErrorCode::kUnsupported, "not a directory").SetFile(path);
    throw Error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, std::strerror(err)).SetFile(path);
  }
  dir->fd_ = Fd(fd);
  // The directory as opened (its descriptor), so that a path swapped meanwhile cannot mislead.
  char self[64];
  std::snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  std::error_code ec;
  const fs::path canonical = fs::read_symlink(self, ec);
  dir->canonical_ = ec ? fs::weakly_canonical(fs::absolute(path.empty() ? "." : path, ec), ec).string() : canonical.string();
  dir->hf_repository_ = HfRepositoryOf(dir->canonical_);
  return dir;
}

std::optional<ConfinedFile> ConfinedDirectory::OpenFile(std::string_view name) const {
  CheckName(name);
  const std::string shown = ShownPath(path_, name);
  std::vector<std::string> parts;
  for (std::string_view c : Components(name)) parts.emplace_back(c);
  // Each round walks `parts` (relative to this directory) component by component, never
  // following a link; a link met on the way is read, its target joined lexically to the real
  // directories walked so far (so ".." in it means what the kernel would make of it), and the
  // walk starts again from the top with what that gives, at most kMaxLinkHops times.
  for (int hops = 0;; ++hops) {
    Fd walked;
    int dfd = fd_.get();
    size_t i = 0;
    std::string link_target;
    for (; i < parts.size(); ++i) {
      const bool last = i + 1 == parts.size();
      struct stat st {};
      if (::fstatat(dfd, parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return std::nullopt;
        FailErrno(shown, errno);
      }
      if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX + 1];
        const ssize_t n = ::readlinkat(dfd, parts[i].c_str(), target, PATH_MAX);
        if (n < 0) FailErrno(shown, errno);
        link_target.assign(target, static_cast<size_t>(n));
        break;
      }
      if (last) {
        bool symlink = false;
        std::optional<ConfinedFile> file = OpenRegularAt(dfd, parts[i], shown, &symlink);
        if (symlink) continue;  // replaced by a link meanwhile: the next round reads it
        if (file) file->path = shown;
        return file;
      }
      if (!S_ISDIR(st.st_mode)) {
        Refuse(shown, "'" + parts[i] + "' is " + std::string(KindOf(st.st_mode)) + ", not a directory");
      }
      const int next = ::openat(dfd, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (next < 0) {
        if (errno == ENOENT) return std::nullopt;
        if (errno == ELOOP || errno == ENOTDIR) continue;  // replaced meanwhile: walk again
        FailErrno(shown, errno);
      }
      walked = Fd(next);
      dfd = next;
    }
    if (hops == kMaxLinkHops) Refuse(shown, "leads through more than " + std::to_string(kMaxLinkHops) + " symbolic links");
    // parts[i] is a link: its target, relative to the directory holding it (parts[0..i)); an
    // absolute target is taken relative to this directory's canonical path when it starts there.
    if (link_target.empty()) Refuse(shown, "is or passes an empty symbolic link");
    fs::path joined;
    if (link_target.front() == '/') {
      const fs::path absolute = fs::path(link_target).lexically_normal();
      joined = absolute.lexically_relative(canonical_);
      if (joined.empty()) Refuse(shown, "leads out of its directory through a symbolic link");
    } else {
      for (size_t j = 0; j < i; ++j) joined /= parts[j];
      joined /= link_target;
    }
    for (size_t j = i + 1; j < parts.size(); ++j) joined /= parts[j];
    joined = joined.lexically_normal();
    std::vector<std::string> next;
    for (const fs::path& c : joined) {
      if (c == ".") continue;
      next.push_back(c.string());
    }
    if (next.empty() || next.front() == ".." || next.back().empty()) {
      // Out of this directory. The Hugging Face cache's snapshot links lead, lexically, to a
      // plain file directly in the same repository's blobs folder: that blob is opened by the rule.
      const fs::path resolved = (fs::path(canonical_) / joined).lexically_normal();
      const fs::path blobs = fs::path(hf_repository_) / "blobs";
      if (hf_repository_.empty() || resolved.parent_path() != blobs || !IsPlainComponent(resolved.filename().string())) {
        Refuse(shown, "leads out of its directory through a symbolic link");
      }
      const int bfd = ::open(blobs.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (bfd < 0) FailErrno(shown, errno);
      const Fd blobs_fd(bfd);
      std::optional<ConfinedFile> file = OpenRegularAt(bfd, resolved.filename().string(), shown, nullptr);
      if (!file) FailErrno(shown, ENOENT);  // a dangling link: its blob is missing
      file->path = shown;
      return file;
    }
    for (const std::string& c : next) {
      if (!IsPlainComponent(c)) Refuse(shown, "leads out of its directory through a symbolic link");
    }
    parts = std::move(next);
  }
}

ConfinedFile ConfinedDirectory::RequireFile(std::string_view name) const {
  std::optional<ConfinedFile> file = OpenFile(name);
  if (!file) FailErrno(ShownPath(path_, name), ENOENT);
  return std::move(*file);
}

ConfinedFile OpenUserFile(const std::string& path) {
  // open("") fails with ENOENT, and the message would name no file: say what was given.
  if (path.empty()) throw Error(ErrorCode::kUsage, "the path is empty (\"\"): name a file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw Error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, std::strerror(err)).SetFile(path);
  }
  ConfinedFile out;
  out.fd = Fd(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(ErrorCode::kIo, std::strerror(errno)).SetFile(path);
  if (!S_ISREG(st.st_mode)) {
    throw Error(ErrorCode::kUnsupported, std::string("is ") + std::string(KindOf(st.st_mode)) + ", not a regular file")
        .SetFile(path);
  }
  out.path = path;
  out.size = static_cast<uint64_t>(st.st_size);
  out.identity = {st.st_dev, st.st_ino};
  return out;
}

}  // namespace trove
