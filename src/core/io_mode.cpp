#include "trove/io_mode.h"

#include <sys/vfs.h>

#include <atomic>
#include <cstdint>

namespace trove {

namespace {

std::atomic<IoMode> g_io_mode{IoMode::kAuto};

// File systems whose pages come over a network or through a user-space server (statfs's
// f_type, from the kernel's and each file system's own magic numbers): there a page fault per
// few pages of a mapping is a round trip each, and large reads with read-ahead are many times
// faster. Local disks (ext4, xfs, btrfs, tmpfs, overlayfs...) are not listed: their mappings
// fault in at the device's rate.
struct NetworkFileSystem {
  uint32_t magic;
  const char* name;
};
constexpr NetworkFileSystem kNetworkFileSystems[] = {
    {0x6969, "nfs"},           // NFS_SUPER_MAGIC
    {0x517B, "smb"},           // SMB_SUPER_MAGIC (smbfs)
    {0xFF534D42, "cifs"},      // CIFS_SUPER_MAGIC
    {0xFE534D42, "smb2"},      // SMB2_SUPER_MAGIC
    {0x65735546, "fuse"},      // FUSE_SUPER_MAGIC (sshfs, s3fs, gcsfuse, blobfuse, JuiceFS...)
    {0x01021997, "9p"},        // V9FS_MAGIC (virtual machines' and WSL's shared folders)
    {0x00C36400, "ceph"},      // CEPH_SUPER_MAGIC
    {0x0BD00BD0, "lustre"},    // LL_SUPER_MAGIC
    {0x47504653, "gpfs"},      // GPFS_SUPER_MAGIC (IBM Spectrum Scale)
    {0x5346414F, "afs"},       // AFS_FS_MAGIC
    {0x6B414653, "afs"},       // AFS_SUPER_MAGIC (kAFS)
    {0x73757245, "coda"},      // CODA_SUPER_MAGIC
    {0x564C, "ncp"},           // NCP_SUPER_MAGIC
    {0x20030528, "orangefs"},  // ORANGEFS_DEVREQ_MAGIC
    {0x19830326, "beegfs"},    // BeeGFS
    {0x01161970, "gfs2"},      // GFS2_MAGIC (shared-disk cluster file system)
    {0x7461636F, "ocfs2"},     // OCFS2_SUPER_MAGIC
    {0xAAD7AAEA, "panfs"},     // PanFS
    {0x013111A8, "ibrix"},     // IBRIX
};

}  // namespace

void SetIoMode(IoMode mode) { g_io_mode.store(mode); }
IoMode GetIoMode() { return g_io_mode.load(); }

std::string_view IoModeName(IoMode mode) {
  switch (mode) {
    case IoMode::kMmap: return "mmap";
    case IoMode::kPread: return "pread";
    case IoMode::kAuto: break;
  }
  return "auto";
}

std::optional<IoMode> ParseIoMode(std::string_view name) {
  for (IoMode m : {IoMode::kAuto, IoMode::kMmap, IoMode::kPread}) {
    if (IoModeName(m) == name) return m;
  }
  return std::nullopt;
}

std::string NetworkFileSystemOf(int fd) {
  struct statfs fs {};
  if (::fstatfs(fd, &fs) != 0) return {};
  const auto type = static_cast<uint32_t>(fs.f_type);
  for (const NetworkFileSystem& n : kNetworkFileSystems) {
    if (n.magic == type) return n.name;
  }
  return {};
}

}  // namespace trove
