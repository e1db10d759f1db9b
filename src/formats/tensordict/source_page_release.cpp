#include "formats/tensordict/source_page_release.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace trove::tensordict {

SourcePageRelease::SourcePageRelease() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    // "start-end perms offset dev inode path"
    std::istringstream in(line);
    std::string range, perms, offset, dev;
    unsigned long long inode = 0;
    if (!(in >> range >> perms >> offset >> dev >> inode)) continue;
    if (perms.size() < 4 || perms[3] != 's' || inode == 0) continue;  // shared and file-backed only
    size_t dash = range.find('-');
    if (dash == std::string::npos) continue;
    uintptr_t start = std::stoull(range.substr(0, dash), nullptr, 16);
    uintptr_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    shared_file_ranges_.emplace_back(start, end);
  }
  std::sort(shared_file_ranges_.begin(), shared_file_ranges_.end());
}

void SourcePageRelease::AfterStreaming(const TensorView& view) const {
  const TensorView& source = view.cast_source ? *view.cast_source : view;
  if (source.storage.empty()) return;
  Release(source.storage.data(), source.storage.data() + source.storage.size());
}

void SourcePageRelease::Release(const uint8_t* begin, const uint8_t* end) const {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  // Only whole pages inside the range: a partial page may hold another leaf still to come.
  uintptr_t b = (reinterpret_cast<uintptr_t>(begin) + page - 1) & ~(page - 1);
  uintptr_t e = reinterpret_cast<uintptr_t>(end) & ~(page - 1);
  if (b >= e) return;
  auto it = std::upper_bound(shared_file_ranges_.begin(), shared_file_ranges_.end(),
                             std::make_pair(b, ~uintptr_t{0}));
  if (it == shared_file_ranges_.begin()) return;
  --it;
  if (b < it->first || e > it->second) return;  // not wholly inside one shared file mapping
  ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

}  // namespace trove::tensordict
