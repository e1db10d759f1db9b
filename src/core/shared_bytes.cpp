#include "trove/shared_bytes.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "trove/error.h"

namespace trove {

SharedBytes SharedBytes::FromVector(std::vector<uint8_t> bytes) {
  auto owner = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  const uint8_t* data = owner->data();
  uint64_t size = owner->size();
  return SharedBytes(std::move(owner), data, size);
}

SharedBytes SharedBytes::CopyOf(const void* data, uint64_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  return FromVector(std::vector<uint8_t>(p, p + size));
}

SharedBytes SharedBytes::Slice(uint64_t offset, uint64_t length) const {
  if (offset > size_ || length > size_ - offset) {
    Fail(ErrorCode::kCorrupt, "range [" + std::to_string(offset) + ", +" + std::to_string(length) +
                                  ") is outside " + std::to_string(size_) + " bytes");
  }
  return SharedBytes(owner_, data_ + offset, length);
}

std::shared_ptr<MappedFile> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    Fail(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    Fail(ErrorCode::kIo, path + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    Fail(ErrorCode::kIo, path + ": not a regular file");
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ > 0) {
    void* m = ::mmap(nullptr, file->size_, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      Fail(ErrorCode::kIo, path + ": mmap: " + std::strerror(err));
    }
    file->map_ = m;
    file->map_size_ = file->size_;
    file->data_ = static_cast<const uint8_t*>(m);
  } else {
    static const uint8_t kEmpty[1] = {0};
    file->data_ = kEmpty;
  }
  ::close(fd);
  return file;
}

MappedFile::~MappedFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

SharedBytes MappedFile::bytes() const {
  return SharedBytes(std::shared_ptr<const void>(shared_from_this(), data_), data_, size_);
}

}  // namespace trove
