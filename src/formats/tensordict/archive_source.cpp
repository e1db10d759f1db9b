// The files of a .tdz archive, looked up by name in the zip's central directory.
#include <set>

#include "formats/tensordict/tree_source.h"
#include "formats/tensordict/level_reader.h"
#include "trove/error.h"

namespace trove::tensordict {
namespace {

class ArchiveSource final : public TreeSource {
 public:
  ArchiveSource(std::shared_ptr<const ZipReader> zip, std::string name) : zip_(std::move(zip)), name_(std::move(name)) {
    for (const auto& e : zip_->entries()) {
      ContainerRecord r;
      r.name = e.name;
      r.offset = e.data_offset;
      r.size = e.uncompressed_size;
      r.stored_size = e.compressed_size;
      r.method = ZipMethodName(e.method);
      r.crc32 = e.crc32;
      records_.push_back(std::move(r));
      // Directories no deeper than the reader ever goes: a name of thousands of components must
      // not make thousands of long prefixes (quadratic memory in the name's length).
      int depth = 0;
      for (size_t slash = e.name.find('/'); slash != std::string::npos && depth <= kMaxLevelDepth;
           slash = e.name.find('/', slash + 1), ++depth)
        dirs_.insert(e.name.substr(0, slash));
    }
  }

  std::optional<SharedBytes> ReadSmallFile(const std::string& dir, const std::string& name,
                                           uint64_t max_bytes) override {
    const ZipEntry* e = zip_->Find(JoinRel(dir, name));
    if (e == nullptr) return std::nullopt;
    if (e->uncompressed_size > max_bytes) {
      Fail(ErrorCode::kLimit, Describe(dir, name) + ": " + std::to_string(e->uncompressed_size) +
                                  " bytes is more than the " + std::to_string(max_bytes) + " allowed for this entry");
    }
    return WithContext(Describe(dir, name), [&] { return zip_->Read(*e); });
  }

  std::optional<LeafBytes> OpenLeaf(const std::string& dir, const std::string& name, uint64_t needed,
                                    uint64_t element_size) override {
    const ZipEntry* e = zip_->Find(JoinRel(dir, name));
    if (e == nullptr) return std::nullopt;
    if (e->uncompressed_size < needed) {
      Fail(ErrorCode::kCorrupt, Describe(dir, name) + ": entry has " + std::to_string(e->uncompressed_size) +
                                    " bytes, the leaf needs " + std::to_string(needed));
    }
    LeafBytes out;
    out.location = e->name;
    const bool stored = e->method == static_cast<uint16_t>(ZipMethod::kStored);
    // A compressed leaf is inflated only when its bytes are asked for (metadata commands never
    // do; streaming ones inflate it window by window).
    SharedBytes payload = WithContext(Describe(dir, name), [&] { return zip_->ReadDeferred(*e); });
    // In place only when every element sits at its natural alignment in the mapping (tensordict's
    // own rule is offset % itemsize); otherwise the prefix is copied into aligned memory.
    if (stored && element_size > 0 && e->data_offset % element_size == 0) {
      out.bytes = payload.Slice(0, needed);
    } else {
      out.bytes = stored ? SharedBytes::CopyOf(payload.data(), needed) : payload.Slice(0, needed);
      out.zero_copy = false;
    }
    return out;
  }

  bool HasFile(const std::string& dir, const std::string& name) override {
    return zip_->Find(JoinRel(dir, name)) != nullptr;
  }

  bool HasDir(const std::string& dir, const std::string& name) override {
    return dirs_.count(JoinRel(dir, name)) > 0;
  }

  std::vector<std::string> ListDirs(const std::string& dir) override {
    std::vector<std::string> out;
    const std::string prefix = dir.empty() ? "" : dir + "/";
    for (auto it = dirs_.lower_bound(prefix); it != dirs_.end() && it->compare(0, prefix.size(), prefix) == 0; ++it) {
      std::string rest = it->substr(prefix.size());
      if (rest.empty() || rest.find('/') != std::string::npos) continue;
      // A level is one directory: its listing is bounded as its keys are (as for a directory).
      if (out.size() == kMaxEntriesPerLevel) {
        Fail(ErrorCode::kLimit, Describe(dir, "") + ": more than kMaxEntriesPerLevel (" +
                                    std::to_string(kMaxEntriesPerLevel) + ") sub-directories in one level");
      }
      out.push_back(std::move(rest));
    }
    return out;
  }

  std::string Describe(const std::string& dir, const std::string& name) const override {
    std::string rel = JoinRel(dir, name);
    return name_ + (rel.empty() ? "" : ": " + rel);
  }

 private:
  std::shared_ptr<const ZipReader> zip_;
  std::string name_;
  std::set<std::string> dirs_;
};

}  // namespace

std::unique_ptr<TreeSource> MakeArchiveSource(std::shared_ptr<const ZipReader> zip, const std::string& name) {
  return std::make_unique<ArchiveSource>(std::move(zip), name);
}

}  // namespace trove::tensordict
