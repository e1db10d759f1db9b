#include "trove/checks.h"

#include <cstring>

#include "formats/pt/pt_reader.h"
#include "formats/pt/torch_resolver.h"
#include "trove/error.h"
#include "trove/open.h"
#include "trove/unpickler.h"
#include "trove/zip_reader.h"

namespace trove {
namespace {

// Modules whose names in a pickle mean an attempt to run code, not a merely unknown class.
constexpr const char* kCodeModules[] = {"os", "posix", "nt", "subprocess", "sys", "builtins", "__builtin__",
                                        "importlib", "marshal", "pickle", "_pickle", "runpy", "socket", "shutil",
                                        "ctypes", "code", "pty", "webbrowser", "commands", "operator", "functools",
                                        "types", "codecs", "pip", "torch.hub", "numpy.testing._private.utils"};

Severity GlobalSeverity(const std::string& dotted) {
  for (const char* m : kCodeModules) {
    size_t n = std::strlen(m);
    if (dotted.compare(0, n, m) == 0 && dotted.size() > n && dotted[n] == '.') return Severity::kCritical;
  }
  return Severity::kHigh;
}

bool IsZipFormat(Format f) { return f == Format::kPt || f == Format::kTdz || f == Format::kTorchScript; }

void ScanPickle(CheckReport& report, const std::string& entry, const uint8_t* data, uint64_t size, uint64_t base,
                uint64_t* consumed = nullptr, bool legacy_ids = false) {
  ValueArena arena;
  TorchResolver resolver(/*permissive=*/true);
  resolver.legacy_persistent_ids = legacy_ids;
  Unpickler u(data, size, arena, resolver, base);
  try {
    u.Load();
  } catch (const Error& e) {
    report.findings.push_back({Severity::kMedium, entry, 0, "pickle not fully readable: " + e.message()});
  }
  if (consumed) *consumed = u.consumed();
  for (const auto& g : u.globals()) {
    std::string dotted = g.module + "." + g.name;
    report.globals.push_back({entry, dotted, g.offset, g.allowed});
    if (!g.allowed) {
      report.findings.push_back({GlobalSeverity(dotted), entry, g.offset, "global '" + dotted + "' is not in the allowlist"});
    }
  }
  report.entries_checked++;
  report.bytes_checked += size;
}

}  // namespace

std::string_view SeverityName(Severity s) {
  switch (s) {
    case Severity::kInfo: return "info";
    case Severity::kMedium: return "medium";
    case Severity::kHigh: return "high";
    case Severity::kCritical: return "critical";
  }
  return "?";
}

CheckReport Verify(const std::string& path) {
  CheckReport report;
  report.path = path;
  Format format = DetectFormat(path);
  report.format = std::string(FormatName(format));
  if (format == Format::kUnknown) Fail(ErrorCode::kUnsupported, path + ": not a format trove reads");
  if (IsZipFormat(format)) {
    ZipReader zip(MappedFile::Open(path));  // an unreadable container throws: exit 2
    for (const auto& e : zip.entries()) {
      report.entries_checked++;
      report.bytes_checked += e.compressed_size;
      try {
        if (!zip.CheckCrc(e)) {
          if (e.crc32 == 0) {
            report.findings.push_back({Severity::kInfo, e.name, e.data_offset, "no CRC-32 recorded (0); bytes unchecked"});
          } else {
            report.findings.push_back({Severity::kMedium, e.name, e.data_offset, "CRC-32 mismatch: the bytes differ from what was written"});
          }
        }
      } catch (const Error& err) {
        report.findings.push_back({Severity::kMedium, e.name, e.data_offset, err.message()});
      }
    }
  }
  try {
    Document doc = Open(path);
    for (const auto& w : doc.warnings) report.findings.push_back({Severity::kInfo, "", 0, w});
    if (!IsZipFormat(format)) {
      report.entries_checked += doc.records.size();
      report.bytes_checked += doc.file_size;
    }
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kIo || e.code() == ErrorCode::kNotFound) throw;
    report.findings.push_back({Severity::kMedium, "", 0, e.message()});
  }
  return report;
}

CheckReport Scan(const std::string& path) {
  CheckReport report;
  report.path = path;
  Format format = DetectFormat(path);
  report.format = std::string(FormatName(format));
  auto file = MappedFile::Open(path);
  if (IsZipFormat(format)) {
    std::unique_ptr<ZipReader> zip;
    try {
      zip = std::make_unique<ZipReader>(file);
    } catch (const Error& e) {
      report.findings.push_back({Severity::kHigh, "", 0, "zip container refused: " + e.message()});
      return report;
    }
    for (const auto& a : zip->anomalies()) report.findings.push_back({Severity::kMedium, a.entry, a.offset, a.message});
    for (const auto& e : zip->entries()) {
      std::string_view n = e.name;
      size_t slash = n.find('/');
      std::string_view rest = slash == std::string_view::npos ? n : n.substr(slash + 1);
      if (rest == "constants.pkl" || rest == "bytecode.pkl" || rest.starts_with("code/") || rest == ".data/version") {
        report.findings.push_back({Severity::kHigh, e.name, e.data_offset, "TorchScript/torch.package record: the archive carries code"});
      }
      if (n.ends_with(".pkl") || n.ends_with(".pickle")) {
        SharedBytes bytes;
        try {
          bytes = zip->Read(e);
        } catch (const Error& err) {
          report.findings.push_back({Severity::kMedium, e.name, e.data_offset, err.message()});
          continue;
        }
        ScanPickle(report, e.name, bytes.data(), bytes.size(), 0);
      }
    }
    return report;
  }
  if (format == Format::kPtLegacy) {
    uint64_t offset = 0;
    for (int i = 0; i < 5 && offset < file->size(); ++i) {
      uint64_t consumed = 0;
      size_t before = report.findings.size();
      ScanPickle(report, "pickle " + std::to_string(i + 1), file->data() + offset, file->size() - offset, offset, &consumed,
                 /*legacy_ids=*/i == 3);
      bool unreadable = report.findings.size() > before && report.findings.back().message.starts_with("pickle not fully");
      if (consumed == 0 || unreadable) break;
      offset += consumed;
    }
    return report;
  }
  if (format == Format::kUnknown) Fail(ErrorCode::kUnsupported, path + ": not a format trove reads");
  // Other formats hold no pickle in their container; reading them checks their structure.
  try {
    Open(path);
  } catch (const Error& e) {
    report.findings.push_back({Severity::kMedium, "", 0, e.message()});
  }
  return report;
}

}  // namespace trove
