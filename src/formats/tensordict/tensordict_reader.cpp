#include "formats/tensordict/tensordict_reader.h"

#include <filesystem>

#include "formats/tensordict/level_reader.h"
#include "formats/tensordict/tree_source.h"
#include "trove/error.h"
#include "trove/tensordict.h"
#include "trove/zip_reader.h"

namespace trove {
namespace {

void AddTreeProperties(Document& doc, const tensordict::TreeStats& stats) {
  doc.properties.emplace_back("format_version", PropertyValue::Integer(static_cast<int64_t>(stats.root_format_version)));
  doc.properties.emplace_back("class", stats.root_class);
  doc.properties.emplace_back("leaves", PropertyValue::Integer(static_cast<int64_t>(stats.leaves)));
  doc.properties.emplace_back("levels", PropertyValue::Integer(static_cast<int64_t>(stats.levels)));
}

// fn() with `path` noted as the file of any error it throws, whose text names it already.
template <class F>
auto NotingFile(const std::string& path, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (Error& e) {
    e.NoteFile(path);
    throw;
  }
}

}  // namespace

Document ReadTensordictDir(const std::string& path, const ReadOptions& options) {
  Document doc;
  doc.format = "tensordict";
  doc.path = path;
  auto source = tensordict::MakeDirectorySource(path);
  // The tree reader's messages start with the file they describe (a path under `path`).
  tensordict::TreeStats stats = NotingFile(path, [&] { return tensordict::ReadTree(*source, doc, options); });
  doc.records = std::move(source->records());
  for (const auto& r : doc.records) doc.file_size += r.size;
  doc.tensors = CollectTensors(doc.root);
  AddTreeProperties(doc, stats);
  return doc;
}

namespace {

Document ReadTdzFromZip(std::shared_ptr<const ZipReader> zip, const std::string& name, const ReadOptions& options) {
  Document doc;
  doc.format = "tdz";
  doc.path = name;
  doc.file_size = zip->bytes().size();
  if (zip->Find("meta.json") == nullptr) {
    throw Error(ErrorCode::kCorrupt, "not a tensordict archive (no top-level meta.json entry)").SetFile(name);
  }
  auto source = tensordict::MakeArchiveSource(zip, name);
  // The archive source's messages start with the archive's name ("model.tdz: meta.json: ...").
  tensordict::TreeStats stats = NotingFile(name, [&] { return tensordict::ReadTree(*source, doc, options); });
  doc.records = std::move(source->records());
  doc.tensors = CollectTensors(doc.root);
  AddTreeProperties(doc, stats);
  doc.properties.emplace_back("leaves_in_place", PropertyValue::Integer(static_cast<int64_t>(stats.leaves - stats.copied_leaves)));
  doc.properties.emplace_back("leaves_copied", PropertyValue::Integer(static_cast<int64_t>(stats.copied_leaves)));
  for (const auto& a : zip->anomalies()) doc.warnings.push_back((a.entry.empty() ? "" : a.entry + ": ") + a.message);
  return doc;
}

}  // namespace

Document ReadTdz(std::shared_ptr<MappedFile> file, const ReadOptions& options) {
  const std::string name = file->path();
  auto zip = WithFile(name, [&] { return std::make_shared<const ZipReader>(file); });
  return ReadTdzFromZip(std::move(zip), name, options);
}

Document ReadTdz(std::shared_ptr<const ZipReader> zip, const ReadOptions& options) {
  const std::string name = zip->shared_file() ? zip->shared_file()->path() : std::string("(archive)");
  WithFile(name, [&] { zip->RefuseDisagreements(); });
  return ReadTdzFromZip(std::move(zip), name, options);
}

bool IsTdzArchive(const ZipReader& zip) { return zip.Find("meta.json") != nullptr; }

Document ReadTdzBytes(SharedBytes archive, const std::string& name, const ReadOptions& options) {
  auto zip = WithFile(name, [&] { return std::make_shared<const ZipReader>(std::move(archive)); });
  return ReadTdzFromZip(std::move(zip), name, options);
}

Document ReadTensordict(const std::string& path, const ReadOptions& options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return ReadTensordictDir(path, options);
  return ReadTdz(MappedFile::Open(path), options);  // both name the path in their errors
}

}  // namespace trove
