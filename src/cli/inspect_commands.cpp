// trove info / cat / verify / scan: the read-only commands scripts rely on.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/table.h"
#include "cli/value_printer.h"
#include "trove/checks.h"
#include "trove/element_codec.h"
#include "trove/error.h"
#include "trove/open.h"
#include "trove/shared_bytes.h"

namespace trove::cli {
namespace {

using Json = nlohmann::ordered_json;

// `trove cat` without --raw/--json prints at most this many elements: a terminal, not a dump.
constexpr uint64_t kMaxHumanElements = 1000;
// An empty tensor prints as nested empty lists; past this many the shape is a lie, not data.
constexpr uint64_t kMaxEmptyListsPrinted = 1'000'000;

std::string Thousands(uint64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

std::string TupleText(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() == 1) s += ",";
  return s + ")";
}

std::string ViewNote(const TensorView& t) {
  std::string note;
  if (!t.has_data) return "no data (meta)";
  if (!t.is_contiguous()) note = "strides " + TupleText(t.strides);
  if (t.storage_offset) note += (note.empty() ? "" : ", ") + std::string("offset ") + std::to_string(t.storage_offset);
  if (t.byte_order == ByteOrder::kBig && ElementSize(t.dtype) > 1) note += (note.empty() ? "" : ", ") + std::string("big-endian");
  if (!Info(t.dtype).readable) note += (note.empty() ? "" : ", ") + std::string("quantized");
  return note;
}

// Storage index -> how many listed tensors view it.
std::map<int64_t, int> SharingCounts(const Document& doc) {
  std::map<int64_t, int> counts;
  for (const auto& t : doc.tensors)
    if (t.view->storage_index >= 0) counts[t.view->storage_index]++;
  return counts;
}

// Writes one JSON object member by member exactly as Json::dump(2) writes it whole; an array
// member is written element by element, so that no more than one element is ever held.
class JsonObjectWriter {
 public:
  explicit JsonObjectWriter(std::ostream& out) : out_(out) { out_ << '{'; }
  void Member(const std::string& key, const Json& value) {
    Key(key);
    out_ << Indented(value, 2);
  }
  void BeginArray(const std::string& key) {
    Key(key);
    out_ << '[';
    elements_ = 0;
  }
  void Element(const Json& value) {
    out_ << (elements_++ ? ",\n    " : "\n    ") << Indented(value, 4);
  }
  void EndArray() { out_ << (elements_ ? "\n  ]" : "]"); }
  void End() { out_ << (members_ ? "\n}\n" : "}\n"); }

 private:
  void Key(const std::string& key) { out_ << (members_++ ? ",\n  " : "\n  ") << Json(key).dump() << ": "; }
  // value.dump(2) nested `depth` spaces deep (strings never hold a raw newline: dump escapes it).
  static std::string Indented(const Json& value, size_t depth) {
    std::string text = value.dump(2);
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
      out += c;
      if (c == '\n') out.append(depth, ' ');
    }
    return out;
  }
  std::ostream& out_;
  size_t members_ = 0;
  size_t elements_ = 0;
};

void PrintInfo(const Document& doc, bool json) {
  auto sharing = SharingCounts(doc);
  uint64_t total = 0;
  for (const auto& t : doc.tensors) total += t.view->nbytes();
  if (json) {
    // Written as j.dump(2) would write the whole document, but one record and one tensor at a
    // time: the document of a wide tree would take ~6 kB per leaf, several times its index.
    JsonObjectWriter out(std::cout);
    out.Member("format", doc.format);
    out.Member("path", doc.path);
    out.Member("file_size", doc.file_size);
    Json props = Json::object();
    for (const auto& [k, v] : doc.properties) props[k] = v;
    out.Member("properties", props);
    out.BeginArray("records");
    for (const auto& r : doc.records) {
      out.Element({{"name", r.name}, {"offset", r.offset}, {"size", r.size}, {"stored_size", r.stored_size},
                   {"method", r.method}, {"crc32", fmt::format("{:08x}", r.crc32)}});
    }
    out.EndArray();
    out.BeginArray("tensors");
    for (const auto& t : doc.tensors) {
      const TensorView& v = *t.view;
      out.Element({{"key", t.key}, {"dtype", Name(v.dtype)}, {"shape", v.shape}, {"nbytes", v.nbytes()},
                   {"strides", v.strides}, {"storage_offset", v.storage_offset}, {"storage", v.storage_key},
                   {"shared", v.storage_index >= 0 && sharing[v.storage_index] > 1}, {"contiguous", v.is_contiguous()},
                   {"byte_order", v.byte_order == ByteOrder::kBig ? "big" : "little"}, {"requires_grad", v.requires_grad},
                   {"parameter", v.is_parameter}, {"has_data", v.has_data}, {"readable", Info(v.dtype).readable}});
    }
    out.EndArray();
    out.Member("tensor_bytes", total);
    out.Member("values", ValueToJson(doc.root));
    out.Member("warnings", doc.warnings);
    out.End();
    return;
  }
  const bool tty = StdoutIsTerminal();
  std::cout << doc.path << ": " << doc.format << ", " << Thousands(doc.file_size) << " bytes\n";
  for (const auto& [k, v] : doc.properties) std::cout << "  " << fmt::format("{:<18} ", k) << v << '\n';
  std::cout << "records (" << doc.records.size() << ")\n";
  Table records({"name", "size", "method", "offset"});
  for (const auto& r : doc.records) records.Add({r.name, std::to_string(r.size), r.method, std::to_string(r.offset)});
  records.Print(std::cout, tty);
  std::cout << "tensors (" << doc.tensors.size() << ", " << Thousands(total) << " bytes)\n";
  Table tensors({"key", "dtype", "shape", "bytes", "storage", "shared", "view"});
  for (const auto& t : doc.tensors) {
    const TensorView& v = *t.view;
    int share = v.storage_index >= 0 ? sharing[v.storage_index] : 0;
    tensors.Add({t.key.empty() ? "\"\"" : t.key, std::string(Name(v.dtype)), ShapeString(v.shape), std::to_string(v.nbytes()),
                 v.storage_key, share > 1 ? "x" + std::to_string(share) : "", ViewNote(v)});
  }
  tensors.Print(std::cout, tty);
  std::cout << "values\n";
  for (const auto& line : DescribeValues(doc.root, 40)) std::cout << "  " << line << '\n';
  for (const auto& w : doc.warnings) std::cout << "warning: " << w << '\n';
}

const NamedTensor& FindTensorOrFail(const Document& doc, const std::string& key) {
  if (const NamedTensor* t = doc.FindTensor(key)) return *t;
  std::string known;
  for (size_t i = 0; i < doc.tensors.size() && i < 10; ++i) known += (i ? ", " : "") + doc.tensors[i].key;
  if (doc.tensors.size() > 10) known += ", ...";
  Fail(ErrorCode::kNotFound, "no tensor '" + key + "'" + (known.empty() ? " (the file has no tensors)" : " (keys: " + known + ")"));
}

void AppendNumber(std::string& out, const ElementValue& e, DType dtype, bool json) {
  char buf[64];
  auto real = [&](double d) {
    if (std::isnan(d)) { out += json ? "\"NaN\"" : "nan"; return; }
    if (std::isinf(d)) { out += json ? (d > 0 ? "\"Infinity\"" : "\"-Infinity\"") : (d > 0 ? "inf" : "-inf"); return; }
    if (d == 0 && std::signbit(d)) { out += "-0.0"; return; }  // "-0" would read back as the integer 0
    // JSON: the shortest text that reads back to exactly this value as a double. People: the
    // shortest text that reads back to the same element at the dtype's own precision.
    const bool wide = dtype == DType::kFloat64 || dtype == DType::kComplex128;
    auto r = json || wide ? std::to_chars(buf, buf + sizeof buf, d) : std::to_chars(buf, buf + sizeof buf, static_cast<float>(d));
    out.append(buf, r.ptr);
  };
  switch (e.kind) {
    case ElementValue::Kind::kFloat: real(e.re); break;
    case ElementValue::Kind::kInt: out += std::to_string(e.i); break;
    case ElementValue::Kind::kUInt: out += std::to_string(e.u); break;
    case ElementValue::Kind::kBool: out += json ? (e.b ? "true" : "false") : (e.b ? "True" : "False"); break;
    case ElementValue::Kind::kComplex: case ElementValue::Kind::kFloatPair:
      out += '['; real(e.re); out += ", "; real(e.im); out += ']';
      break;
  }
}

// Streams the tensor's values as nested lists (JSON or Python-like), at most `limit` elements.
void PrintNested(const TensorView& v, bool json, uint64_t limit, std::FILE* out) {
  const size_t esize = ElementSize(v.dtype);
  const size_t rank = v.shape.size();
  std::vector<int64_t> index(rank, 0);
  std::string buf;
  uint64_t emitted = 0;
  bool truncated = false;
  if (rank == 0) {
    v.ForEachChunk([&](const uint8_t* p, size_t) { AppendNumber(buf, DecodeElement(v.dtype, p), v.dtype, json); });
    std::fputs(buf.c_str(), out);
    return;
  }
  if (v.numel() == 0) {
    // Lists down to the first zero-length dimension, like torch's tolist(): [0, 5] is [],
    // [3, 0] is [[], [], []]. Bounded: a hostile [2^40, 0] must not print forever.
    uint64_t lists = 1;
    size_t zero_dim = 0;
    while (v.shape[zero_dim] != 0) {
      lists *= static_cast<uint64_t>(v.shape[zero_dim]);
      if (lists > kMaxEmptyListsPrinted) Fail(ErrorCode::kLimit, "an empty tensor of shape " + ShapeString(v.shape) + " has too many empty lists to print");
      ++zero_dim;
    }
    std::string inner = "[]";
    for (size_t d = zero_dim; d-- > 0;) {
      std::string outer = "[";
      for (int64_t i = 0; i < v.shape[d]; ++i) outer += (i ? ", " : "") + inner;
      inner = outer + "]";
    }
    std::fputs(inner.c_str(), out);
    return;
  }
  for (size_t d = 0; d < rank; ++d) buf += '[';
  std::string carry;  // bytes of an element split across chunks
  size_t closed = 0;
  struct Stop {};
  try {
    v.ForEachChunk([&](const uint8_t* p, size_t n) {
      size_t pos = 0;
      while (pos < n) {
        const uint8_t* elem;
        if (!carry.empty() || n - pos < esize) {
          size_t take = std::min(esize - carry.size(), n - pos);
          carry.append(reinterpret_cast<const char*>(p + pos), take);
          pos += take;
          if (carry.size() < esize) return;
          elem = reinterpret_cast<const uint8_t*>(carry.data());
        } else {
          elem = p + pos;
          pos += esize;
        }
        if (emitted == limit) { truncated = true; throw Stop{}; }
        if (emitted > 0) {
          buf.append(closed, ']');
          buf += ", ";
          buf.append(closed, '[');
        }
        AppendNumber(buf, DecodeElement(v.dtype, elem), v.dtype, json);
        carry.clear();
        ++emitted;
        closed = 0;  // dimensions that wrap on the way to the next element
        for (size_t d = rank; d-- > 0;) {
          if (++index[d] < v.shape[d]) break;
          index[d] = 0;
          ++closed;
        }
        if (buf.size() > (1 << 16)) { std::fwrite(buf.data(), 1, buf.size(), out); buf.clear(); }
      }
    });
  } catch (const Stop&) {
  }
  if (truncated) buf += ", ...";
  buf.append(rank, ']');
  std::fwrite(buf.data(), 1, buf.size(), out);
}

void CatTensor(const Document& doc, const std::string& key, bool raw, bool json, bool allow_expand) {
  const NamedTensor& t = FindTensorOrFail(doc, key);
  const TensorView& v = *t.view;
  // Every element is printed: a view far larger than its storage is refused unless allowed (the
  // human form prints kMaxHumanElements at most, so it is always summarised).
  if ((raw || json) && !allow_expand) v.CheckExpansion(key);
  if (!Info(v.dtype).readable) {
    Fail(ErrorCode::kUnsupported, "tensor '" + key + "' is quantized (" + std::string(Name(v.dtype)) +
                                      "): reading quantized tensors is not supported");
  }
  if (!v.has_data) Fail(ErrorCode::kUnsupported, "tensor '" + key + "' has no data (a meta tensor: shape only)");
  if (raw) {
    const bool normalise_bool = v.dtype == DType::kBool;
    std::vector<uint8_t> scratch;
    v.ForEachChunk([&](const uint8_t* p, size_t n) {
      if (normalise_bool) {
        scratch.assign(p, p + n);
        for (auto& b : scratch) b = b != 0;
        p = scratch.data();
      }
      if (std::fwrite(p, 1, n, stdout) != n) {
        // write(2) from a mapping truncated under us fails with EFAULT rather than SIGBUS.
        const std::string truncated = errno == EFAULT ? MappedFileAt(p) : std::string();
        if (!truncated.empty()) FailChangedWhileRead(truncated);
        Fail(ErrorCode::kIo, "writing to stdout failed");
      }
    });
    if (std::fflush(stdout) != 0) Fail(ErrorCode::kIo, "writing to stdout failed");
    return;
  }
  if (json) {
    Json head{{"key", key}, {"dtype", Name(v.dtype)}, {"shape", v.shape}};
    std::string h = head.dump();
    h.pop_back();  // reopen the object to stream "data"
    std::fputs(h.c_str(), stdout);
    std::fputs(",\"data\":", stdout);
    PrintNested(v, true, UINT64_MAX, stdout);
    std::fputs("}\n", stdout);
    return;
  }
  std::printf("%s: %s %s\n", key.empty() ? "\"\"" : key.c_str(), std::string(Name(v.dtype)).c_str(), ShapeString(v.shape).c_str());
  PrintNested(v, false, kMaxHumanElements, stdout);
  std::fputs("\n", stdout);
}

Json FindingJson(const Finding& f) {
  return {{"severity", SeverityName(f.severity)}, {"entry", f.entry}, {"offset", f.offset}, {"message", f.message}};
}

std::string FindingText(const std::string& path, const Finding& f) {
  std::string where = path;
  if (!f.entry.empty()) where += ": " + f.entry;
  if (f.offset) where += " @ " + std::to_string(f.offset);
  return fmt::format("{:<8} {}: {}", SeverityName(f.severity), where, f.message);
}

}  // namespace

void AddInspectCommands(CLI::App& app, int* exit_code) {
  static std::string path, fail_on = "medium";
  static std::vector<std::string> keys;
  static bool json = false, raw = false, permissive = false, allow_expand = false;
  static std::vector<std::string> paths;

  auto* info = app.add_subcommand("info", "Show a file's format, records, tensors and values (metadata only)");
  info->add_option("path", path, "File or tensordict directory")->required();
  info->add_flag("--json", json, "One JSON object for scripts");
  info->add_flag("--permissive", permissive, "Show unknown pickle globals as inert objects instead of refusing");
  info->footer("Examples:\n  trove info model.pt\n  trove info model.pt --json | jq '.tensors[].key'");
  info->callback([exit_code] {
    ReadOptions opts;
    opts.permissive = permissive;
    PrintInfo(Open(path, opts), json);
    *exit_code = kExitOk;
  });

  auto* cat = app.add_subcommand("cat", "Print tensors' values (several keys: one after another)");
  cat->add_option("path", path, "File or tensordict directory")->required();
  cat->add_option("keys", keys, "Tensor key paths as `trove info` lists them")->required();
  auto* raw_flag = cat->add_flag("--raw", raw, "C-contiguous little-endian bytes to stdout (bool as 0/1 bytes)");
  cat->add_flag("--json", json, "{\"key\", \"dtype\", \"shape\", \"data\"} with nested lists")->excludes(raw_flag);
  cat->add_flag("--permissive", permissive, "Accept unknown pickle globals as inert objects");
  cat->add_flag("--allow-expand", allow_expand, "--raw/--json: print views far larger than their stored bytes (stride 0) whole");
  cat->footer("Examples:\n  trove cat model.pt lin.weight\n  trove cat model.pt lin.weight lin.bias --raw > wb.bin\n"
              "--json with several keys prints one JSON object per line.");
  cat->callback([exit_code] {
    ReadOptions opts;
    opts.permissive = permissive;
    Document doc = Open(path, opts);
    for (const auto& k : keys) FindTensorOrFail(doc, k);  // every key checked before any output
    for (const auto& k : keys) CatTensor(doc, k, raw, json, allow_expand);
    *exit_code = kExitOk;
  });

  auto* verify = app.add_subcommand("verify", "Check every structure and checksum (exit 1 when problems are found)");
  verify->add_option("path", path, "File or tensordict directory")->required();
  verify->add_flag("--json", json, "One JSON object for scripts");
  verify->footer("Exit status: 0 sound, 1 problems found (each listed), 2 could not read.");
  verify->callback([exit_code] {
    CheckReport r = Verify(path);
    size_t problems = 0;
    for (const auto& f : r.findings) problems += f.severity != Severity::kInfo;
    if (json) {
      Json j{{"path", r.path}, {"format", r.format}, {"entries_checked", r.entries_checked},
             {"bytes_checked", r.bytes_checked}, {"ok", problems == 0}, {"findings", Json::array()}};
      for (const auto& f : r.findings) j["findings"].push_back(FindingJson(f));
      std::cout << j.dump(2) << '\n';
    } else {
      for (const auto& f : r.findings) std::cout << FindingText(r.path, f) << '\n';
      std::cout << r.path << ": " << (problems ? std::to_string(problems) + " problem(s)" : std::string("ok")) << " ("
                << r.format << ", " << r.entries_checked << " entries, " << Thousands(r.bytes_checked) << " bytes checked)\n";
    }
    *exit_code = problems ? kExitFindings : kExitOk;
  });

  auto* scan = app.add_subcommand("scan", "Security report: pickle globals, code records, container anomalies");
  scan->add_option("paths", paths, "Files or tensordict directories")->required();
  scan->add_flag("--json", json, "One JSON object per run for scripts");
  scan->add_option("--fail-on", fail_on, "Lowest severity that makes the exit status 1")
      ->check(CLI::IsMember({"info", "medium", "high", "critical"}));
  scan->footer("Nothing in the file is executed. Exit status: 0 clean, 1 findings at or above --fail-on, 2 error.\n"
               "Example:\n  trove scan downloads/*.pt --fail-on high");
  scan->callback([exit_code] {
    Severity threshold = fail_on == "info" ? Severity::kInfo : fail_on == "high" ? Severity::kHigh
                       : fail_on == "critical" ? Severity::kCritical : Severity::kMedium;
    bool failing = false;
    Json all = Json::array();
    for (const auto& p : paths) {
      CheckReport r = Scan(p);
      for (const auto& f : r.findings) failing |= f.severity >= threshold;
      if (json) {
        Json j{{"path", r.path}, {"format", r.format}, {"findings", Json::array()}, {"globals", Json::array()}};
        for (const auto& f : r.findings) j["findings"].push_back(FindingJson(f));
        for (const auto& g : r.globals) {
          j["globals"].push_back({{"entry", g.entry}, {"name", g.name}, {"offset", g.offset}, {"allowed", g.allowed}});
        }
        all.push_back(std::move(j));
      } else {
        for (const auto& f : r.findings) std::cout << FindingText(r.path, f) << '\n';
        size_t allowed = 0;
        for (const auto& g : r.globals) allowed += g.allowed;
        std::cout << r.path << ": " << r.format << ", " << r.findings.size() << " finding(s), " << r.globals.size()
                  << " global reference(s), " << (r.globals.size() - allowed) << " outside the allowlist\n";
      }
    }
    if (json) std::cout << (all.size() == 1 ? all[0] : Json{{"files", all}}).dump(2) << '\n';
    *exit_code = failing ? kExitFindings : kExitOk;
  });
}

}  // namespace trove::cli
