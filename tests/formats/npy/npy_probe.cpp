// npy_probe: what trove's .npy/.npz readers, writers and scan make of a file, as JSON on stdout,
// for tests/python/test_npy.py (numpy is the peer) until the command line reads these formats.
//   npy_probe read FILE [--permissive]   {"format", "tensors": [{key, dtype, shape, strides,
//                                         big_endian, deferred, hex}], "values": [keys of other
//                                         values], "strings": {key: str}, "warnings"}
//   npy_probe write-npy FILE OUT / write-npz FILE OUT   reads FILE, writes OUT
//   npy_probe scan FILE                  {"findings": [{severity, entry, message}], "globals": [...]}
// An error is {"error": {"code", "message"}} with exit status 1. FILE is read as .npy when it
// starts with numpy's magic, else as an .npz archive.
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "formats/npy/npy_format.h"
#include "trove/error.h"
#include "trove/zip_reader.h"

namespace {

using trove::Document;

bool IsNpy(const std::shared_ptr<trove::MappedFile>& file) {
  return trove::LooksLikeNpy(std::string_view(reinterpret_cast<const char*>(file->data()), std::min<uint64_t>(file->size(), 16)));
}

Document Read(const std::string& path, const trove::ReadOptions& options) {
  auto file = trove::MappedFile::Open(path);
  if (IsNpy(file)) return trove::ReadNpy(file, options);
  return trove::ReadNpz(std::make_shared<const trove::ZipReader>(file), options);
}

std::string Hex(const trove::TensorView& v) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(v.nbytes() * 2);
  v.ForEachChunk([&](const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      out += kHex[p[i] >> 4];
      out += kHex[p[i] & 15];
    }
  });
  return out;
}

nlohmann::json Describe(const Document& doc) {
  nlohmann::json j;
  j["format"] = doc.format;
  j["tensors"] = nlohmann::json::array();
  for (const auto& t : doc.tensors) {
    const trove::TensorView& v = *t.view;
    const bool deferred = v.storage.deferred();  // before Hex, which produces deferred bytes
    j["tensors"].push_back({{"key", t.key},
                            {"dtype", std::string(trove::Name(v.dtype))},
                            {"shape", v.shape},
                            {"strides", v.strides},
                            {"big_endian", v.byte_order == trove::ByteOrder::kBig},
                            {"deferred", deferred},
                            {"hex", Hex(v)}});
  }
  j["values"] = nlohmann::json::array();
  j["strings"] = nlohmann::json::object();
  trove::ForEachLeaf(doc.root, [&](const std::string& key, const trove::Value& leaf) {
    if (leaf.kind != trove::ValueKind::kTensor) j["values"].push_back(key);
    if (leaf.kind == trove::ValueKind::kStr) j["strings"][key] = leaf.text;
  });
  j["warnings"] = doc.warnings;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage = "usage: npy_probe read|scan FILE [--permissive] | write-npy|write-npz FILE OUT";
  if (argc < 3) {
    std::cerr << usage << "\n";
    return 2;
  }
  const std::string command = argv[1], path = argv[2];
  try {
    trove::ReadOptions options;
    if (argc > 3 && std::string(argv[3]) == "--permissive") options.pickle_policy = trove::PicklePolicy::kPermissive;
    nlohmann::json out;
    if (command == "read") {
      out = Describe(Read(path, options));
    } else if (command == "write-npy" || command == "write-npz") {
      if (argc < 4) {
        std::cerr << usage << "\n";
        return 2;
      }
      const Document doc = Read(path, {});
      if (command == "write-npy") trove::WriteNpy(doc, argv[3]);
      else trove::WriteNpz(doc, argv[3]);
      out = {{"written", argv[3]}};
    } else if (command == "scan") {
      auto file = trove::MappedFile::Open(path);
      trove::CheckReport report;
      if (IsNpy(file)) trove::ScanNpy(*file, report);
      else trove::ScanNpz(trove::ZipReader(file, trove::ZipDisagreement::kReport), report);
      out["findings"] = nlohmann::json::array();
      for (const auto& f : report.findings) {
        out["findings"].push_back({{"severity", std::string(trove::SeverityName(f.severity))}, {"entry", f.entry}, {"message", f.message}});
      }
      out["globals"] = nlohmann::json::array();
      for (const auto& g : report.globals) out["globals"].push_back({{"name", g.name}, {"class", g.policy_class}});
    } else {
      std::cerr << usage << "\n";
      return 2;
    }
    std::cout << out.dump() << "\n";
    return 0;
  } catch (const trove::Error& e) {
    std::cout << nlohmann::json({{"error", {{"code", std::string(trove::ErrorCodeName(e.code()))}, {"message", e.message()}}}}).dump()
              << "\n";
    return 1;
  }
}
