#include "formats/tensordict/tree_checks.h"

#include <filesystem>

#include "formats/tensordict/level_reader.h"
#include "formats/tensordict/td_names.h"
#include "pickle/pickle_scan.h"
#include "trove/error.h"
#include "trove/unpickler.h"

namespace trove {
namespace {

// Caps (reasons):
// Files and directories one scan walks in a tensordict tree: a tree trove reads holds one file per
// leaf and a directory and a meta.json per level (tensordict::kMaxLeaves + 2 kMaxLevels, ~200k);
// past 2^18 the walk stops with a finding instead of letting a hostile tree make the scan run on.
constexpr uint64_t kMaxScanTreeEntries = uint64_t{1} << 18;
}  // namespace

bool IsPickledSidecar(std::string_view name) {
  size_t slash = name.rfind('/');
  std::string_view base = slash == std::string_view::npos ? name : name.substr(slash + 1);
  return base == tensordict::kOtherPickleSidecar || base == tensordict::kPickleSidecar || base.ends_with(".pkl") || base.ends_with(".pickle");
}

// A pickled sidecar of a tensordict: tensordict runs it through pickle.load when it loads the
// tree, so its presence alone is worth a finding; its globals are listed by the data-only VM.
void ScanSidecar(CheckReport& report, const std::string& entry, const SharedBytes& bytes) {
  report.Add(Severity::kMedium, entry, 0,
                             "pickled sidecar (" + std::to_string(bytes.size()) +
                                 " bytes): tensordict unpickles it on load; trove reads it only as data with allow_pickle");
  DataResolver plain(PicklePolicy::kPermissive);
  ScanPickle(report, entry, bytes.data(), bytes.size(), plain);
}

// A tensordict directory: every file and directory under it, without following symlinks.
void ScanTensordictDir(CheckReport& report, const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
  if (ec) Fail(ErrorCode::kIo, root + ": cannot list: " + ec.message());
  const fs::path base = fs::path(root).lexically_normal();
  uint64_t visited = 0;
  for (; it != end; it.increment(ec)) {
    if (ec) {
      report.Add(Severity::kMedium, "", 0, "walk stopped: " + ec.message());
      break;
    }
    if (++visited > kMaxScanTreeEntries) {
      report.Add(Severity::kMedium, "", 0, "more than kMaxScanTreeEntries (" +
                                                               std::to_string(kMaxScanTreeEntries) +
                                                               ") files: the rest is not scanned");
      break;
    }
    const fs::path& p = it->path();
    const std::string rel = p.lexically_relative(base).generic_string();
    fs::file_status st = it->symlink_status(ec);
    if (ec) {
      report.Add(Severity::kMedium, rel, 0, "cannot stat: " + ec.message());
      ec.clear();
      continue;
    }
    if (fs::is_symlink(st)) {
      fs::path target = fs::read_symlink(p, ec);
      std::string shown = ec ? std::string("?") : target.string();
      fs::path resolved = (p.parent_path() / target).lexically_normal();
      fs::path inside = resolved.lexically_relative(base);
      bool leaves = ec || target.is_absolute() || inside.empty() || *inside.begin() == "..";
      report.Add(leaves ? Severity::kCritical : Severity::kHigh, rel, 0,
                                 "symlink to '" + shown + "'" +
                                     (leaves ? ": it leaves the tree (tensordict would follow it)"
                                             : ": trove refuses symlinks; tensordict would follow it"));
      ec.clear();
      continue;
    }
    if (fs::is_directory(st)) continue;
    if (!fs::is_regular_file(st)) {
      report.Add(Severity::kMedium, rel, 0, "not a regular file (FIFO, socket or device)");
      continue;
    }
    report.entries_checked++;
    if (!IsPickledSidecar(rel)) continue;
    try {
      auto file = MappedFile::Open(p.string());
      if (file->size() > tensordict::kMaxSidecarBytes) {
        report.Add(Severity::kMedium, rel, 0, "pickled sidecar larger than kMaxSidecarBytes: not scanned");
        continue;
      }
      ScanSidecar(report, rel, file->bytes());
    } catch (const Error& e) {
      report.AddError(Severity::kMedium, rel, e);
    }
  }
}

}  // namespace trove
