// In-place writes into a stored leaf of a .tdz (the spec's mode="r+").
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "formats/tensordict/tensordict_reader.h"
#include "trove/error.h"
#include "trove/tensordict.h"
#include "trove/zip_reader.h"

namespace trove {

void WriteTdzLeafInPlace(const std::string& archive, std::string_view key_path, uint64_t offset, const void* data,
                         uint64_t size) {
  auto file = MappedFile::Open(archive);           // its errors name the path already
  const Document doc = ReadTdz(file, ReadOptions{});  // so do these
  WithFile(archive, [&] {
    uint64_t file_offset = 0;
    {
      const NamedTensor* t = doc.FindTensor(key_path);
      if (t == nullptr) Fail(ErrorCode::kNotFound, "no leaf '" + std::string(key_path) + "'");
      ZipReader zip(file);
      const ZipEntry* e = zip.Find(t->view->storage_key);
      if (e == nullptr) Fail(ErrorCode::kNotFound, "leaf '" + std::string(key_path) + "' has no entry of its own");
      if (e->method != static_cast<uint16_t>(ZipMethod::kStored)) {
        Fail(ErrorCode::kUnsupported, "entry '" + e->name + "' is compressed: only stored leaves can be edited in place");
      }
      const uint64_t leaf_bytes = t->view->nbytes();
      if (offset > leaf_bytes || size > leaf_bytes - offset) {
        Fail(ErrorCode::kUsage, "range [" + std::to_string(offset) + ", +" + std::to_string(size) + ") is outside leaf '" +
                                    std::string(key_path) + "' (" + std::to_string(leaf_bytes) + " bytes)");
      }
      file_offset = e->data_offset + static_cast<uint64_t>(t->view->storage_offset) * ElementSize(t->view->dtype) + offset;
    }
    int fd = ::open(archive.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) Fail(ErrorCode::kIo, std::strerror(errno));
    const auto* p = static_cast<const uint8_t*>(data);
    while (size > 0) {
      ssize_t w = ::pwrite(fd, p, static_cast<size_t>(size), static_cast<off_t>(file_offset));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        int err = errno;
        ::close(fd);
        Fail(ErrorCode::kIo, std::strerror(err));
      }
      p += w;
      size -= static_cast<uint64_t>(w);
      file_offset += static_cast<uint64_t>(w);
    }
    if (::close(fd) != 0) Fail(ErrorCode::kIo, std::strerror(errno));
  });
}

}  // namespace trove
