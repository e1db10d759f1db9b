// trove info / cat / verify / scan: the read-only commands scripts rely on.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <limits>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/count_text.h"
#include "cli/escaped_output.h"
#include "cli/json_output.h"
#include "cli/pager.h"
#include "cli/progress.h"
#include "cli/suggest.h"
#include "cli/table.h"
#include "cli/tensor_slice.h"
#include "cli/value_printer.h"
#include "core/display_escape.h"
#include "core/tensor_role.h"
#include "core/ggml_blocks.h"
#include "core/float_text.h"
#include "trove/checks.h"
#include "trove/file_digests.h"
#include "trove/convert.h"
#include "trove/element_codec.h"
#include "trove/error.h"
#include "trove/open.h"
#include "trove/shared_bytes.h"

namespace trove::cli {
namespace {

// `trove cat` without --raw/--json prints at most this many elements: a terminal, not a dump.
constexpr uint64_t kMaxHumanElements = 1000;
// `cat --json` of a value shows it whole up to this many nodes, past which the rest is marked
// {"$elided": true}: shared subtrees (the pickle memo) can make a small file's tree spell out
// exponentially many nodes, and a real config or optimizer state is far smaller.
constexpr size_t kMaxCatJsonNodes = size_t{1} << 22;
// An empty tensor prints as nested empty lists; past this many the shape is a lie, not data.
constexpr uint64_t kMaxEmptyListsPrinted = 1'000'000;

std::string TupleText(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() == 1) s += ",";
  return s + ")";
}

std::string ViewNote(const TensorView& t) {
  std::string note;
  if (!t.has_data) return "no data (meta)";
  if (t.bare_storage) note = "a storage by itself";
  if (!t.is_contiguous()) note = "strides " + TupleText(t.strides);
  if (t.storage_offset) note += (note.empty() ? "" : ", ") + std::string("offset ") + std::to_string(t.storage_offset);
  if (t.byte_order == ByteOrder::kBig && ElementSize(t.dtype) > 1) note += (note.empty() ? "" : ", ") + std::string("big-endian");
  if (!Info(t.dtype).readable) {
    note += (note.empty() ? "" : ", ") + std::string("quantized") + (t.quantizer ? " (" + QuantizerText(*t.quantizer) + ")" : "");
  }
  return note;
}

// A quantizer as --json shows it; the per-channel scales and zero points (data) only when asked.
Json QuantizerJson(const Quantizer& q, bool channels) {
  Json j{{"scheme", QSchemeName(q.scheme)}};
  if (!q.per_channel()) {
    j["scale"] = q.scale;
    j["zero_point"] = q.zero_point;
    return j;
  }
  j["axis"] = q.axis;
  j["channels"] = q.scales->shape[0];
  if (channels) {
    for (const auto& [name, t] : {std::pair{"scales", q.scales}, std::pair{"zero_points", q.zero_points}}) {
      Json a = Json::array();
      for (int64_t i = 0; i < t->numel(); ++i) a.push_back(t->At<double>(i));
      j[name] = std::move(a);
    }
  }
  return j;
}

// Storage index -> how many listed tensors view it.
std::map<int64_t, int> SharingCounts(const Document& doc) {
  std::map<int64_t, int> counts;
  for (const auto& t : doc.tensors)
    if (t.view->storage_index >= 0) counts[t.view->storage_index]++;
  return counts;
}

Json PropertyJson(const PropertyValue& v) {
  switch (v.type) {
    case PropertyValue::Type::kInteger: return v.integer;
    case PropertyValue::Type::kBoolean: return v.boolean;
    case PropertyValue::Type::kText: break;
  }
  return v.text;
}

// The lines of info's values section: an overview, and with --full the whole tree up to a bound
// that keeps a hostile tree's text finite (each line is short: value_printer.h cuts them).
constexpr size_t kOverviewValueLines = 40;
constexpr size_t kFullValueLines = 1'000'000;

struct InfoOptions {
  bool json = false, records = false, tsv = false, full = false;
  std::vector<std::string> keys;  // globs: only matching tensors are listed
  std::string sort;               // "", key, size, dtype
  int depth = 0;                  // > 0: tensors grouped by their first `depth` key components
  int precision = 0;              // significant digits of the float values shown; 0: every digit
};

// The tensors' totals: each stored view counted once (tied weights once), as a parameter, as
// optimizer state or as neither (core/tensor_role.h); bytes once per storage (a storage's bytes
// as stored, whatever views it holds), per dtype by the first view of each.
struct TensorTotals {
  uint64_t tensors = 0, distinct = 0, parameters = 0, bytes = 0;
  uint64_t optimizer_tensors = 0, optimizer_bytes = 0, other_tensors = 0, other_bytes = 0;
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_dtype;  // dtype -> (tensors, bytes)
};

TensorTotals Totals(const std::vector<const NamedTensor*>& tensors) {
  TensorTotals t;
  std::set<std::tuple<int64_t, int64_t, std::vector<int64_t>, std::vector<int64_t>, int>> seen;
  std::set<int64_t> storages;
  for (const NamedTensor* n : tensors) {
    const TensorView& v = *n->view;
    ++t.tensors;
    auto& d = t.by_dtype[std::string(Name(v.dtype))];
    ++d.first;
    const bool new_storage = v.storage_index < 0 || storages.insert(v.storage_index).second;
    const uint64_t stored = v.storage_index < 0 ? v.nbytes() : (new_storage ? v.storage.size() : 0);
    d.second += stored;
    t.bytes += stored;
    const bool first = v.storage_index < 0 ||
                       seen.emplace(v.storage_index, v.storage_offset, v.shape, v.strides, static_cast<int>(v.dtype)).second;
    if (!first) continue;
    ++t.distinct;
    switch (RoleOf(n->key, v)) {
      case TensorRole::kParameter: t.parameters += static_cast<uint64_t>(v.numel()); break;
      case TensorRole::kOptimizerState: ++t.optimizer_tensors, t.optimizer_bytes += v.nbytes(); break;
      case TensorRole::kOther: ++t.other_tensors, t.other_bytes += v.nbytes(); break;
    }
  }
  return t;
}

// The first `depth` components of a key path, splitting at '/' and at '.' (module names).
std::string KeyPrefix(const std::string& key, int depth) {
  size_t at = 0;
  for (int d = 0; d < depth; ++d) {
    const size_t next = key.find_first_of("/.", at);
    if (next == std::string::npos) return key;
    at = next + 1;
  }
  return key.substr(0, at - 1);
}

// A Hugging Face config.json is small; anything larger is not one and is not read.
constexpr uintmax_t kMaxModelConfigBytes = 1 << 20;

// The config.json keys that info shows first, in the order people look for them, with their
// labels for the text output.
constexpr std::pair<const char*, const char*> kModelConfigKeys[] = {
    {"architecture", "architectures"}, {"model type", "model_type"},   {"hidden size", "hidden_size"},
    {"layers", "num_hidden_layers"},   {"heads", "num_attention_heads"}, {"kv heads", "num_key_value_heads"},
    {"vocab", "vocab_size"},           {"dtype", "torch_dtype"}};

// The key facts of the config.json beside a model (in its directory, or the directory the file is
// in), under the file's own key names with the file's values (a multimodal config's text_config
// supplying those it holds alone); null when there is no such file or it is not a JSON object,
// and a fact the file lacks (or gives as null) is left out. info --json's "config".
Json ModelConfigJson(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::is_directory(model_path, ec) ? fs::path(model_path) : fs::path(model_path).parent_path();
  fs::path config = (dir.empty() ? fs::path(".") : dir) / "config.json";
  // A training run's directory keeps the model's config in a folder of its own (verl's
  // huggingface/); read only as a plain folder and file, never through a symbolic link.
  if (!fs::exists(fs::symlink_status(config, ec)) && fs::is_directory(model_path, ec)) {
    const fs::path nested = fs::path(model_path) / "huggingface";
    if (fs::is_directory(fs::symlink_status(nested, ec)) && fs::is_regular_file(fs::symlink_status(nested / "config.json", ec))) {
      config = nested / "config.json";
    }
  }
  if (!fs::is_regular_file(config, ec) || fs::file_size(config, ec) > kMaxModelConfigBytes || ec) return nullptr;
  std::ifstream in(config, std::ios::binary);
  const Json j = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return nullptr;
  // Multimodal configs keep the language model's numbers in text_config.
  const Json* text = j.contains("text_config") && j["text_config"].is_object() ? &j["text_config"] : nullptr;
  Json facts = Json::object();
  for (const auto& [label, key] : kModelConfigKeys) {
    const Json* v = j.contains(key) ? &j[key] : text && text->contains(key) ? &(*text)[key] : nullptr;
    if (v != nullptr && !v->is_null()) facts[key] = *v;
  }
  return facts;
}

// The same facts as label and value for the text output; none without a config.json. Its values
// are the file's text: they are shown escaped.
std::vector<std::pair<std::string, std::string>> ModelConfigFacts(const Json& config) {
  std::vector<std::pair<std::string, std::string>> facts;
  if (!config.is_object()) return facts;
  for (const auto& [label, key] : kModelConfigKeys) {
    if (!config.contains(key)) continue;
    const Json& v = config[key];
    std::string text;
    if (v.is_string()) {
      text = v.get<std::string>();
    } else if (v.is_array()) {
      for (const auto& item : v) text += (text.empty() ? "" : ", ") + (item.is_string() ? item.get<std::string>() : item.dump());
    } else {
      text = v.dump();
    }
    if (!text.empty()) facts.emplace_back(label, std::move(text));
  }
  return facts;
}

// The shard file holding a tensor of a sharded checkpoint: its storage key is the shard's name
// (a .safetensors shard) or the shard's name, ':' and the storage's record (a .bin shard);
// `shards` are the document's records, one per shard.
std::string ShardOf(const std::unordered_set<std::string>& shards, const TensorView& v) {
  if (shards.count(v.storage_key)) return v.storage_key;
  const size_t colon = v.storage_key.rfind(':');
  if (colon != std::string::npos && shards.count(v.storage_key.substr(0, colon))) return v.storage_key.substr(0, colon);
  return v.storage_key;
}

void PrintInfo(const Document& doc, const InfoOptions& o) {
  auto sharing = SharingCounts(doc);
  uint64_t total = 0;
  for (const auto& t : doc.tensors) total += t.view->nbytes();
  std::vector<const NamedTensor*> listed;
  for (const auto& t : doc.tensors) {
    bool keep = o.keys.empty();
    for (const auto& g : o.keys) keep |= KeyMatches(g, t.key);
    if (keep) listed.push_back(&t);
  }
  if (!o.keys.empty() && listed.empty()) {
    Fail(ErrorCode::kUsage, NothingSelectedText(o.keys, {}, doc.tensors.size()));
  }
  const TensorTotals totals = Totals(listed);
  // Each tensor's name as the file spells it ("model/x" for the key path "model%2Fx"): the table's
  // key column and --json's "name" (cat and Document::FindTensor take it back).
  std::unordered_map<const NamedTensor*, std::string> names;
  {
    std::vector<std::string> keys;
    keys.reserve(doc.tensors.size());
    for (const auto& t : doc.tensors) keys.push_back(t.key);
    std::vector<std::string> verbatim = VerbatimNames(keys);
    for (size_t i = 0; i < doc.tensors.size(); ++i) names.emplace(&doc.tensors[i], std::move(verbatim[i]));
  }
  // A sharded checkpoint names each tensor's storage by its shard (formats/safetensors/
  // sharded_reader.h): the table's column and --json's "shard" say so.
  const bool sharded = doc.format.starts_with("sharded ");
  std::unordered_set<std::string> shards;
  if (sharded)
    for (const auto& r : doc.records) shards.insert(r.name);
  if (o.json) {
    // Written as j.dump(2) would write the whole document, but one record and one tensor at a
    // time: the document of a wide tree would take ~6 kB per leaf, several times its index.
    JsonObjectWriter out(ExactStdout());
    const Json envelope = Envelope("info");
    for (const auto& [k, v] : envelope.items()) out.Member(k, v);
    out.Member("format", doc.format);
    out.Member("path", doc.path);
    out.Member("file_size", doc.file_size);
    out.Member("config", ModelConfigJson(doc.path));
    Json props = Json::object();
    for (const auto& [k, v] : doc.properties) props[k] = PropertyJson(v);
    out.Member("properties", props);
    Json by_dtype = Json::object();
    for (const auto& [d, c] : totals.by_dtype) by_dtype[d] = {{"tensors", c.first}, {"bytes", c.second}};
    out.Member("summary", {{"tensors", totals.tensors}, {"distinct_tensors", totals.distinct},
                           {"parameters", totals.parameters}, {"bytes", totals.bytes}, {"by_dtype", by_dtype},
                           {"optimizer_state", {{"tensors", totals.optimizer_tensors}, {"bytes", totals.optimizer_bytes}}},
                           {"other", {{"tensors", totals.other_tensors}, {"bytes", totals.other_bytes}}}});
    out.BeginArray("records");
    for (const auto& r : doc.records) {
      out.Element({{"name", r.name}, {"offset", r.offset}, {"size", r.size}, {"stored_size", r.stored_size},
                   {"method", r.method}, {"crc32", r.crc32}});
    }
    out.EndArray();
    out.BeginArray("tensors");
    for (const NamedTensor* t : listed) {
      const TensorView& v = *t->view;
      Json tensor{{"key", t->key}, {"name", names[t]}, {"dtype", Name(v.dtype)}, {"shape", v.shape}, {"nbytes", v.nbytes()},
                   {"strides", v.strides}, {"storage_offset", v.storage_offset}, {"storage", v.storage_key},
                   {"shared", v.storage_index >= 0 && sharing[v.storage_index] > 1}, {"contiguous", v.is_contiguous()},
                   {"byte_order", v.byte_order == ByteOrder::kBig ? "big" : "little"}, {"requires_grad", v.requires_grad},
                   {"parameter", v.is_parameter}, {"has_data", v.has_data}, {"readable", Info(v.dtype).readable}};
      if (v.quantizer) tensor["quantizer"] = QuantizerJson(*v.quantizer, false);
      if (sharded) tensor["shard"] = ShardOf(shards, v);
      out.Element(tensor);
    }
    out.EndArray();
    out.Member("tensor_bytes", total);
    out.Member("values", ValueJson(doc.root));
    out.Member("warnings", doc.warnings);
    out.End();
    return;
  }
  const bool tty = StdoutIsTerminal();
  const bool aligned = !o.tsv;
  // Sizes for people at a terminal; exact byte counts for whatever reads a pipe.
  auto size = [&](uint64_t n) { return tty ? HumanBytes(n) : std::to_string(n); };
  std::cout << EscapeForDisplay(doc.path) << ": " << EscapeForDisplay(doc.format) << ", " << Thousands(doc.file_size) << " bytes"
            << (tty && doc.file_size >= 1024 ? " (" + HumanBytes(doc.file_size) + ")" : std::string()) << '\n';
  if (const auto facts = ModelConfigFacts(ModelConfigJson(doc.path)); !facts.empty()) {
    std::cout << "config.json\n";
    for (const auto& [label, value] : facts)
      std::cout << "  " << fmt::format("{:<18} ", label) << EscapeForDisplay(value, DisplayEscape::kLine) << '\n';
  }
  {
    std::string dtypes;
    for (const auto& [d, c] : totals.by_dtype) {
      dtypes += (dtypes.empty() ? "" : ", ") + d + " " + Thousands(c.first) + " (" + (tty ? HumanBytes(c.second) : Thousands(c.second) + " bytes") + ")";
    }
    auto line = [](const std::string& label, const std::string& value) {
      std::cout << "  " << fmt::format("{:<18} ", label) << value << '\n';
    };
    line("tensors", Thousands(totals.tensors) + (totals.distinct != totals.tensors ? " (" + Thousands(totals.distinct) + " distinct)" : ""));
    line("parameters", Thousands(totals.parameters));
    auto bytes_text = [&](uint64_t n) { return tty ? HumanBytes(n) : Thousands(n) + " bytes"; };
    if (totals.optimizer_tensors > 0) {
      line("optimizer state", Thousands(totals.optimizer_tensors) + " tensors (" + bytes_text(totals.optimizer_bytes) + ")");
    }
    if (totals.other_tensors > 0 && totals.other_tensors < totals.distinct) {
      line("other tensors", Thousands(totals.other_tensors) + " (" + bytes_text(totals.other_bytes) +
                                "): integers, bools, RNG, running stats");
    }
    line("tensor bytes", Thousands(totals.bytes) + (tty && totals.bytes >= 1024 ? " (" + HumanBytes(totals.bytes) + ")" : std::string()));
    if (!dtypes.empty()) line("by dtype", dtypes);
  }
  for (const auto& [k, v] : doc.properties) {
    // A flag saying another property was assumed is shown on that property's line.
    if (k.ends_with("_assumed") && v.type == PropertyValue::Type::kBoolean) continue;
    // A reader's own tensor count says what the summary's first line says already.
    if (k == "tensors" && v.type == PropertyValue::Type::kInteger && static_cast<uint64_t>(v.integer) == totals.tensors) continue;
    const std::string* assumed = doc.Property(k + "_assumed");
    std::cout << "  " << fmt::format("{:<18} ", EscapeForDisplay(k)) << EscapeForDisplay(v.text)
              << (assumed && *assumed == "true" ? " (assumed: the file does not say)" : "") << '\n';
  }
  // The record table is the container's plumbing: listed when short or asked for.
  constexpr size_t kRecordsShownUnasked = 20;
  if (o.records || doc.records.size() <= kRecordsShownUnasked) {
    std::cout << "records (" << doc.records.size() << ")\n";
    Table records({"name", "size", "method", "offset"});
    for (const auto& r : doc.records) records.Add({r.name, size(r.size), r.method, std::to_string(r.offset)});
    records.Print(std::cout, aligned);
  } else {
    std::cout << "records (" << Thousands(doc.records.size()) << ": trove info --records lists them)\n";
  }
  if (o.sort == "key") {
    std::stable_sort(listed.begin(), listed.end(), [](auto* a, auto* b) { return a->key < b->key; });
  } else if (o.sort == "size") {
    std::stable_sort(listed.begin(), listed.end(), [](auto* a, auto* b) { return a->view->nbytes() > b->view->nbytes(); });
  } else if (o.sort == "dtype") {
    std::stable_sort(listed.begin(), listed.end(), [](auto* a, auto* b) { return Name(a->view->dtype) < Name(b->view->dtype); });
  }
  std::cout << "tensors (" << Thousands(listed.size()) << (listed.size() != doc.tensors.size() ? " of " + Thousands(doc.tensors.size()) : "")
            << ", " << Thousands(totals.bytes) << " bytes)\n";
  if (o.depth > 0) {
    // A tree view: one row per key prefix, in order of first appearance.
    std::vector<std::string> order;
    std::map<std::string, std::vector<const NamedTensor*>> groups;
    for (const NamedTensor* t : listed) {
      auto& g = groups[KeyPrefix(t->key, o.depth)];
      if (g.empty()) order.push_back(KeyPrefix(t->key, o.depth));
      g.push_back(t);
    }
    Table prefixes({"prefix", "tensors", "parameters", "bytes", "dtypes"});
    for (const std::string& p : order) {
      const TensorTotals g = Totals(groups[p]);
      std::string dtypes;
      for (const auto& [d, c] : g.by_dtype) dtypes += (dtypes.empty() ? "" : ", ") + d;
      prefixes.Add({p.empty() ? "\"\"" : p, std::to_string(g.tensors), Thousands(g.parameters), size(g.bytes), dtypes});
    }
    prefixes.Print(std::cout, aligned);
  } else {
    Table tensors({"key", "dtype", "shape", "bytes", sharded ? "shard" : "storage", "shared", "view"});
    for (const NamedTensor* t : listed) {
      const TensorView& v = *t->view;
      int share = v.storage_index >= 0 ? sharing[v.storage_index] : 0;
      tensors.Add({names[t].empty() ? "\"\"" : names[t], std::string(Name(v.dtype)), ShapeString(v.shape), size(v.nbytes()),
                   v.storage_key, share > 1 ? "x" + std::to_string(share) : "", ViewNote(v)});
    }
    tensors.Print(std::cout, aligned);
  }
  // An overview by default (40 lines, long lists and parameter groups on one line each); --full:
  // the whole tree, every item on its line, within the printer's own bounds (value_printer.h).
  std::cout << "values\n";
  for (const auto& line : DescribeValues(doc.root, o.full ? kFullValueLines : kOverviewValueLines, /*summarize_lists=*/!o.full,
                                         o.precision, o.depth)) {
    std::cout << "  " << line << '\n';
  }
  for (const auto& w : doc.warnings) std::cout << "warning: " << EscapeForDisplay(w, DisplayEscape::kLine) << '\n';
}

// A key as cat heads what it prints: escaped (core/display_escape.h), "" for the empty key.
std::string ShownKey(const std::string& key) { return key.empty() ? "\"\"" : EscapeForDisplay(key); }

// Every key path `cat` can reach: the tensors, then the other leaves, in tree order.
std::vector<std::string> KeyPaths(const Document& doc) {
  std::vector<std::string> keys;
  ForEachLeaf(doc.root, [&](const std::string& path, const Value&) { keys.push_back(path); });
  return keys;
}

[[noreturn]] void FailNoKey(const Document& doc, const std::string& key, const char* what) {
  const std::vector<std::string> keys = KeyPaths(doc);
  std::string hint = DidYouMean(Suggest(key, keys));
  if (hint.empty()) {
    std::string known;
    for (size_t i = 0; i < keys.size() && i < 10; ++i) known += (i ? ", " : "") + EscapeForDisplay(keys[i]);
    if (keys.size() > 10) known += ", ... (trove info lists them)";
    hint = known.empty() ? " (the file holds no values)" : " (keys: " + known + ")";
  }
  Fail(ErrorCode::kNotFound, std::string("no ") + what + " '" + EscapeForDisplay(key) + "'" + hint);
}

// One element as text (Python-like) or JSON (docs/json.md). Text is at the dtype's precision
// (core/float_text.h: a float32 element prints as the float32 it is), or to `precision`
// significant digits when asked (cat --precision: for people); JSON at the double's, always.
void AppendNumber(std::string& out, const ElementValue& e, DType dtype, bool json, int precision = 0) {
  const bool wide = dtype == DType::kFloat64 || dtype == DType::kComplex128;
  auto real = [&](double d) {
    if (json) {
      AppendJsonFloat(d, out);
    } else if (precision > 0) {
      out += RoundedFloatText(d, precision);
    } else {
      if (wide) AppendFloatText(d, out);
      else AppendFloatText(static_cast<float>(d), out);
    }
  };
  switch (e.kind) {
    case ElementValue::Kind::kFloat: real(e.re); break;
    case ElementValue::Kind::kInt:
      if (json) AppendJsonInt(e.i, out);
      else out += std::to_string(e.i);
      break;
    case ElementValue::Kind::kUInt:
      if (json) AppendJsonUInt(e.u, out);
      else out += std::to_string(e.u);
      break;
    case ElementValue::Kind::kBool: out += json ? (e.b ? "true" : "false") : (e.b ? "True" : "False"); break;
    case ElementValue::Kind::kComplex:
      if (json) {
        out += R"({"$complex": [)";
        real(e.re);
        out += ", ";
        real(e.im);
        out += "]}";
      } else {
        out += '(';
        real(e.re);
        if (!std::signbit(e.im) || std::isnan(e.im)) out += '+';  // a negative part brings its own '-'
        real(e.im);
        out += "j)";
      }
      break;
    case ElementValue::Kind::kFloatPair:  // two float4 values in one byte: a pair, not a number
      out += '[';
      real(e.re);
      out += ", ";
      real(e.im);
      out += ']';
      break;
  }
}

// Streams the tensor's values as nested lists (JSON or Python-like), at most `limit` elements.
void PrintNested(const TensorView& v, bool json, uint64_t limit, std::FILE* out, int precision = 0) {
  const size_t esize = ElementSize(v.dtype);
  const size_t rank = v.shape.size();
  std::vector<int64_t> index(rank, 0);
  std::string buf;
  uint64_t emitted = 0;
  bool truncated = false;
  if (rank == 0) {
    v.ForEachChunk([&](const uint8_t* p, size_t) { AppendNumber(buf, DecodeElement(v.dtype, p), v.dtype, json, precision); });
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
        AppendNumber(buf, DecodeElement(v.dtype, elem), v.dtype, json, precision);
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

// One numpy-like text of a tensor: rows on their own lines, a row longer than `width` columns
// wrapped as numpy wraps it (continuation lines indented under the row's first element); past
// kMaxHumanElements elements, only the first and last `edge` items of each axis, with "..." between.
class TensorText {
 public:
  TensorText(const TensorView& v, bool summarise, size_t width, int precision)
      : v_(v), index_(v.shape.size(), 0), width_(width), precision_(precision) {
    // Summarised, a tensor prints (2 edge)^rank elements: three per side as numpy does, fewer
    // for tensors of many axes, so that the text stays a screenful whatever the rank.
    edge_ = 3;
    while (summarise && edge_ > 1 && Power(2 * edge_, v.shape.size()) > kMaxSummaryElements) --edge_;
    summarise_ = summarise;
  }
  bool Printable() const { return !summarise_ || Power(2 * edge_, v_.shape.size()) <= kMaxSummaryElements; }
  std::string Text() {
    std::string out;
    Axis(0, out);
    return out;
  }

 private:
  static constexpr uint64_t kMaxSummaryElements = 1 << 14;
  static uint64_t Power(uint64_t b, size_t e) {
    uint64_t r = 1;
    for (size_t i = 0; i < e; ++i)
      if ((r *= b) > kMaxSummaryElements) return kMaxSummaryElements + 1;
    return r;
  }
  // The last axis: its items separated by ", ", a line broken before an item that would pass
  // the width (an item wider than the width stays whole on its own line).
  void Row(std::string& out) {
    const size_t d = v_.shape.size() - 1;
    const int64_t n = v_.shape[d];
    const bool cut = summarise_ && n > 2 * edge_;
    const size_t line_start = out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1;
    out += '[';
    size_t column = DisplayWidth(out.substr(line_start));
    std::string item;
    for (int64_t i = 0; i < n; ++i) {
      item.clear();
      if (cut && i == edge_) {
        item = "...";
        i = n - edge_ - 1;
      } else {
        index_[d] = i;
        AppendNumber(item, v_.Element(index_), v_.dtype, false, precision_);
      }
      if (i + 1 < n) item += ',';
      if (column > d + 1 && column + 1 + item.size() > width_) {
        out += '\n';
        out.append(d + 1, ' ');
        column = d + 1;
      } else if (column > d + 1) {
        out += ' ';
        ++column;
      }
      out += item;
      column += item.size();
    }
    out += ']';
  }
  void Axis(size_t d, std::string& out) {
    if (d == v_.shape.size()) {
      AppendNumber(out, v_.Element(index_), v_.dtype, false, precision_);
      return;
    }
    if (d + 1 == v_.shape.size()) return Row(out);
    const int64_t n = v_.shape[d];
    const bool cut = summarise_ && n > 2 * edge_;
    const std::string gap = "," + std::string(v_.shape.size() - d - 1, '\n') + std::string(d + 1, ' ');
    out += '[';
    for (int64_t i = 0; i < n; ++i) {
      if (cut && i == edge_) {
        out += "..." + gap;
        i = n - edge_;
      }
      index_[d] = i;
      Axis(d + 1, out);
      if (i + 1 < n) out += gap;
    }
    out += ']';
  }
  const TensorView& v_;
  std::vector<int64_t> index_;
  size_t width_;
  int precision_;
  int64_t edge_ = 3;
  bool summarise_ = false;
};

struct CatOptions {
  bool raw = false, json = false, allow_expand = false, full = false, dequantize = false;
  uint64_t head = 0;  // 0: not asked
  int precision = 0;  // significant digits of floats shown to people; 0: every digit of the dtype
  // --raw: told the bytes of each piece written (the progress line of a large file).
  std::function<void(uint64_t bytes)> raw_written;
};

// The width cat wraps a row of a tensor at: the terminal's, else 80 (numpy's 75 plus its margin).
size_t CatWidth() {
  const size_t columns = TerminalColumns();
  return columns > 0 ? columns : 80;
}

void CatTensor(const std::string& key, const TensorView& v, const CatOptions& o,
               const TensorView* quantized = nullptr);

// `shown` (the integers or the dequantized values of `quantized`) printed as `cat` prints any
// tensor, headed by the quantizer.
void CatQuantized(const std::string& key, const TensorView& quantized, const TensorView& shown, const CatOptions& o) {
  CatOptions plain = o;
  plain.dequantize = false;
  CatTensor(key, shown, plain, &quantized);
}

// `quantized`: the quantized tensor `v` shows (its integers or values), for the header.
void CatTensor(const std::string& key, const TensorView& v, const CatOptions& o, const TensorView* quantized) {
  const bool raw = o.raw, json = o.json;
  // Every element is printed: a view far larger than its storage is refused unless allowed (the
  // human form prints kMaxHumanElements at most, so it is always summarised).
  if ((raw || json || o.full) && !o.allow_expand) CheckExpansion({NamedTensor{key, &v}}, false);
  if (!v.has_data) Fail(ErrorCode::kUnsupported, "tensor '" + key + "' has no data (a meta tensor: shape only)");
  if (IsBlockDType(v.dtype)) {
    // ggml's blocks: their values (--raw: the blocks as stored).
    if (!raw) {
      if (!Dequantizable(v)) {
        Fail(ErrorCode::kUnsupported, "tensor '" + key + "' is block-quantized (" + std::string(Name(v.dtype)) +
                                          "): trove dequantizes " + DequantizedBlockTypes() + " (--raw writes its blocks)");
      }
      return CatQuantized(key, v, CastView(v, DType::kFloat32), o);
    }
  } else if (!Info(v.dtype).readable) {
    // A quantized tensor: its stored integers (torch's int_repr()), or with --dequantize its values.
    if (!v.quantizer || !IntReprDType(v.dtype)) {
      Fail(ErrorCode::kUnsupported, "tensor '" + key + "' is quantized (" + std::string(Name(v.dtype)) +
                                        "): trove does not decode " + (v.quantizer ? "packed elements" : "it without its quantizer"));
    }
    if (o.dequantize && !raw) return CatQuantized(key, v, CastView(v, DType::kFloat32), o);
    if (!raw) return CatQuantized(key, v, IntReprView(v), o);
  } else if (o.dequantize) {
    Fail(ErrorCode::kUsage, "tensor '" + key + "' is " + std::string(Name(v.dtype)) + ", not quantized: --dequantize has nothing to do");
  }
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
      if (o.raw_written) o.raw_written(n);
    });
    if (std::fflush(stdout) != 0) Fail(ErrorCode::kIo, "writing to stdout failed");
    return;
  }
  if (json) {
    Json head = Envelope("cat");
    head["key"] = key;
    head["dtype"] = Name(v.dtype);
    head["shape"] = v.shape;
    if (quantized && !quantized->quantizer) {
      head["dequantized_from"] = Name(quantized->dtype);  // ggml's blocks: their values
    } else if (quantized) {
      head["quantizer"] = QuantizerJson(*quantized->quantizer, true);
      // The integers are the tensor's own elements (its dtype); the values are float32.
      if (Info(v.dtype).kind == DTypeKind::kFloat) head["dequantized_from"] = Name(quantized->dtype);
      else head["dtype"] = Name(quantized->dtype);
    }
    std::string h = DumpJson(head, -1);
    h.pop_back();  // reopen the object to stream "data"
    std::fputs(h.c_str(), stdout);
    std::fputs(",\"data\":", stdout);
    PrintNested(v, true, UINT64_MAX, stdout);
    std::fputs("}\n", stdout);
    return;
  }
  if (quantized && !quantized->quantizer) {
    std::printf("%s: %s %s, its values (float32, as ggml dequantizes them)\n", ShownKey(key).c_str(),
                std::string(Name(quantized->dtype)).c_str(), ShapeString(v.shape).c_str());
  } else if (quantized) {
    const bool values = Info(v.dtype).kind == DTypeKind::kFloat;
    std::printf("%s: %s %s, %s: %s\n", ShownKey(key).c_str(), std::string(Name(quantized->dtype)).c_str(),
                ShapeString(v.shape).c_str(), QuantizerText(*quantized->quantizer).c_str(),
                values ? "its values (float32)" : "the stored integers (--dequantize for the values)");
  } else {
    std::printf("%s: %s %s\n", ShownKey(key).c_str(), std::string(Name(v.dtype)).c_str(), ShapeString(v.shape).c_str());
  }
  if (o.head > 0 || v.numel() == 0 || v.shape.empty()) {
    PrintNested(v, false, o.head > 0 ? o.head : kMaxHumanElements, stdout, o.precision);
  } else {
    TensorText text(v, !o.full && static_cast<uint64_t>(v.numel()) > kMaxHumanElements, CatWidth(), o.precision);
    if (!text.Printable()) {
      Fail(ErrorCode::kUsage, "'" + key + "' has " + std::to_string(v.shape.size()) +
                                  " axes, too many to summarise: use --head N, --full or --json");
    }
    std::fputs(text.Text().c_str(), stdout);
  }
  std::fputs("\n", stdout);
}

// A value that is not a tensor: Python-like text (containers as an indented outline) or JSON.
void CatValue(const std::string& key, const Value& v, const CatOptions& o) {
  if (o.raw) Fail(ErrorCode::kUsage, "'" + key + "' is a " + std::string(KindName(v.kind)) + ", not a tensor: --raw writes tensor bytes");
  if (o.json) {
    Json j = Envelope("cat");
    j["key"] = key;
    j["value"] = ValueJson(&v, {kMaxCatJsonNodes, SIZE_MAX});
    ExactStdout() << DumpJson(j, -1) << '\n';
    return;
  }
  const bool container = v.kind == ValueKind::kDict || v.kind == ValueKind::kList || v.kind == ValueKind::kTuple ||
                         v.kind == ValueKind::kObject;
  if (!container) {
    std::cout << ShownKey(key) << " = " << ScalarText(v, 1 << 16, o.precision) << '\n';
    return;
  }
  std::cout << (key.empty() ? "(root)" : EscapeForDisplay(key)) << ":\n";
  for (const auto& line : DescribeValues(&v, 200, false, o.precision)) std::cout << "  " << line << '\n';
}

// What one KEY argument of `cat` names: a tensor (exact key, or KEY[slice]), any other value by
// its key path, or, with * or ?, every leaf whose key path matches.
struct CatItem {
  std::string key;
  std::optional<TensorView> tensor;
  const Value* value = nullptr;
  bool from_glob = false;  // matched by a pattern, not named
};

std::vector<CatItem> ResolveCatKey(const Document& doc, const std::string& key) {
  if (const NamedTensor* t = doc.FindTensor(key)) return {{key, *t->view, nullptr}};
  if (const Value* v = doc.FindValue(key)) {
    if (v->kind == ValueKind::kTensor) return {{key, *v->tensor, nullptr}};
    return {{key, std::nullopt, v}};
  }
  if (auto parts = SplitSlice(key)) {
    const NamedTensor* t = doc.FindTensor(parts->first);
    if (t == nullptr) FailNoKey(doc, parts->first, "tensor");
    return {{key, WithContext(key, [&] { return SliceView(*t->view, parts->second); }), nullptr}};
  }
  if (key.find_first_of("*?") != std::string::npos) {
    std::vector<CatItem> items;
    // A pattern without ** matches paths of its own number of components: a subtree at that
    // depth (`cat ck '*'`: the model, the optimizer, a config) is printed as `cat ck KEY` prints
    // it, in its place, rather than skipped because none of its leaves is that shallow.
    const bool any_depth = key.find("**") != std::string::npos;
    const size_t components = static_cast<size_t>(std::count(key.begin(), key.end(), '/')) + 1;
    std::set<std::string> subtrees;
    ForEachLeaf(doc.root, [&](const std::string& path, const Value& leaf) {
      if (!any_depth) {
        size_t end = 0;
        for (size_t c = 0; c < components && end != std::string::npos; ++c) end = path.find('/', end == 0 && c == 0 ? 0 : end + 1);
        if (end != std::string::npos) {
          const std::string prefix = path.substr(0, end);
          if (KeyMatches(key, prefix) && subtrees.insert(prefix).second) {
            if (const Value* v = doc.FindValue(prefix)) items.push_back({prefix, std::nullopt, v, true});
          }
          return;
        }
      }
      if (!KeyMatches(key, path)) return;
      if (leaf.kind == ValueKind::kTensor) items.push_back({path, *leaf.tensor, nullptr, true});
      else items.push_back({path, std::nullopt, &leaf, true});
    });
    if (items.empty()) FailNoKey(doc, key, "key path matching");
    return items;
  }
  FailNoKey(doc, key, "key");
}

Json FindingJson(const Finding& f) {
  return {{"severity", SeverityName(f.severity)}, {"entry", f.entry}, {"offset", f.offset}, {"message", f.message},
          {"key_path", f.key_path}, {"call", f.call}};
}

// A finding on its line (and its call's): the path, entry and key path are names, the message
// and the call trove's text holding names (core/display_escape.h), so no finding can hide another.
std::string FindingText(const std::string& path, const Finding& f) {
  std::string where = EscapeForDisplay(path);
  if (!f.entry.empty()) where += ": " + EscapeForDisplay(f.entry);
  if (f.offset) where += " @ " + std::to_string(f.offset);
  if (!f.key_path.empty()) where += " (key " + EscapeForDisplay(f.key_path) + ")";
  std::string text = fmt::format("{:<8} {}: {}", SeverityName(f.severity), where, EscapeForDisplay(f.message, DisplayEscape::kLine));
  if (!f.call.empty()) text += "\n         call: " + EscapeForDisplay(f.call, DisplayEscape::kLine);
  return text;
}

// Problems are findings above "info" (notes such as how torch.save writes every record are listed,
// not counted).
size_t Problems(const CheckReport& r) {
  size_t n = 0;
  for (const auto& f : r.findings) n += f.severity != Severity::kInfo;
  return n;
}

// A path verify or scan could not read at all: its line on stderr, as the command line prints any
// error, after what stdout holds so far.
void ReportUnreadable(const Error& e) {
  std::cout.flush();
  std::cerr << "trove: error: " << e.DisplayMessage() << '\n';
}

}  // namespace

void AddInspectCommands(CLI::App& app, int* exit_code) {
  static std::string path, fail_on = "medium";
  static std::vector<std::string> keys;
  static bool json = false;
  static PolicyFlags info_policy, cat_policy;
  static std::vector<std::string> paths;
  static bool no_pager = false;

  auto* info = app.add_subcommand("info", "Show a file's format, records, tensors and values (metadata only)");
  info->add_option("path", path, "File or tensordict directory")->required();
  static InfoOptions info_options;
  info->add_flag("--json", info_options.json, "One JSON object for scripts");
  info->add_flag("--records", info_options.records, "List every record of the container (shown unasked up to 20)");
  info->add_option("--keys", info_options.keys, "Only the tensors whose key path matches a glob (* ** ?); repeatable");
  info->add_option("--sort", info_options.sort, "Order the tensors by key, size (largest first) or dtype")
      ->check(CLI::IsMember({"key", "size", "dtype"}));
  info->add_option("--depth", info_options.depth,
                   "One row per key prefix of N components (split at / and .); values shown N levels deep")
      ->check(WholeNumberCheck(1, std::numeric_limits<int>::max()));
  info->add_option("--precision", info_options.precision,
                   "Significant digits of the float values shown (1..17; default: every digit; --json stays exact)")
      ->check(CLI::Range(1, 17));
  info->add_flag("--tsv", info_options.tsv, "Tables as tab-separated lines for scripts (else aligned, terminal or not)");
  info->add_flag("--full", info_options.full, "The whole value tree, every item on its line (else an overview of 40 lines)");
  AddPolicyFlags(info, info_policy);
  AddNoPagerFlag(info, no_pager);
  info->footer("Examples:\n  trove info model.pt\n  trove info model.pt --sort size --keys 'model/**'\n"
               "  trove info model.pt --depth 2\n  trove info model.pt --json | jq '.tensors[].key'");
  info->callback([exit_code] {
    ReadOptions opts;
    opts.pickle_policy = info_policy.policy();
    const Document doc = OpenWarning(path, opts);
    OutputPager pager(!info_options.json && !no_pager);
    PrintInfo(doc, info_options);
    *exit_code = kExitOk;
  });

  static CatOptions cat_options;
  static bool force = false;
  auto* cat = app.add_subcommand("cat", "Print values: tensors, scalars, strings, lists and subtrees, by key path");
  cat->add_option("path", path, "File or tensordict directory")->required();
  cat->add_option("keys", keys, "Key paths as `trove info` lists them; globs (* one component, ** any, ?); KEY[0:4, :] slices a tensor")
      ->required();
  auto* raw_flag = cat->add_flag("--raw", cat_options.raw, "C-contiguous little-endian bytes to stdout (bool as 0/1 bytes)");
  cat->add_flag("--json", cat_options.json, "One JSON object per key: {\"key\", \"dtype\", \"shape\", \"data\"} or {\"key\", \"value\"}")
      ->excludes(raw_flag);
  auto* full_flag = cat->add_flag("--full", cat_options.full, "Every element (a large tensor is otherwise summarised: the edges of each axis)");
  cat->add_option("--head", cat_options.head, "The first N elements, in order")
      ->check(WholeNumberCheck(1, std::numeric_limits<int64_t>::max()))
      ->excludes(full_flag);
  cat->add_option("--precision", cat_options.precision,
                  "Significant digits of the float values shown (1..17; default: every digit of the dtype; --json stays exact)")
      ->check(CLI::Range(1, 17))
      ->excludes(raw_flag);
  cat->add_flag("--dequantize", cat_options.dequantize,
                "Quantized tensors: their values, (q - zero_point) * scale as float32 (else the stored integers)")
      ->excludes(raw_flag);
  cat->add_flag("--force", force, "--raw: write binary bytes to a terminal anyway");
  AddPolicyFlags(cat, cat_policy);
  AddIoOption(cat);
  AddNoPagerFlag(cat, no_pager);
  cat->add_flag("--allow-expand", cat_options.allow_expand,
                "--raw/--json/--full: print views far larger than their stored bytes (stride 0, or a compressed storage inflating like a bomb) whole");
  cat->footer("Examples:\n  trove cat model.pt lin.weight\n  trove cat ck.pt epoch optimizer/param_groups/0/lr config\n"
              "  trove cat model.pt 'blocks.*.attn.bias' 'embed.weight[0:4, :]'\n"
              "  trove cat model.pt lin.weight lin.bias --raw > wb.bin\n"
              "--json with several keys prints one JSON object per line.");
  cat->callback([exit_code] {
    if (cat_options.raw && StdoutIsTerminal() && !force) {
      Fail(ErrorCode::kUsage, "--raw writes binary bytes: redirect stdout to a file or a pipe (or pass --force)");
    }
    ReadOptions opts;
    opts.pickle_policy = cat_policy.policy();
    Document doc = OpenWarning(path, opts);
    std::vector<CatItem> items;
    // Errors of a key (none matching, a tensor that cannot be printed) name the file too.
    WithFile(path, [&] {
      for (const auto& k : keys) {  // every key resolved before any output
        for (CatItem& item : ResolveCatKey(doc, k)) items.push_back(std::move(item));
      }
    });
    OutputPager pager(!cat_options.json && !cat_options.raw && !no_pager);
    // --raw streams whole tensors (to a file or a pipe): their bytes are the progress line's,
    // piece by piece. Text redirected to a file or a pipe (`cat ck.pt '*' --full > all.txt`) is
    // as silent as --raw for the person at the terminal: each tensor's bytes count once printed.
    // Text on the terminal shows itself, and --json stays exactly what it is: no line.
    const bool text_progress = !cat_options.raw && !cat_options.json && !StdoutIsTerminal();
    std::optional<Progress> progress;
    uint64_t raw_total = 0, raw_done = 0;
    std::function<void(uint64_t, uint64_t)> shown;
    if (cat_options.raw || text_progress) {
      for (const CatItem& item : items) raw_total += item.tensor ? item.tensor->nbytes() : 0;
      progress.emplace();
      shown = progress->Callback();
    }
    for (const CatItem& item : items) {
      CatOptions o = cat_options;
      if (shown && cat_options.raw) {
        o.raw_written = [&](uint64_t bytes) {
          raw_done += bytes;
          shown(raw_done, raw_total);
        };
      }
      // --dequantize names what to do with quantized tensors; a glob's other tensors print as they are.
      if (item.from_glob && item.tensor && Info(item.tensor->dtype).readable) o.dequantize = false;
      WithFile(path, [&] {
        if (item.tensor) CatTensor(item.key, *item.tensor, o);
        else CatValue(item.key, *item.value, cat_options);
      });
      if (text_progress && item.tensor) {
        std::fflush(stdout);
        raw_done += item.tensor->nbytes();
        shown(raw_done, raw_total);
      }
    }
    *exit_code = kExitOk;
  });

  auto* verify = app.add_subcommand("verify", "Check every structure and checksum (exit 1 when problems are found)");
  verify->add_option("paths", paths, "Files or tensordict directories")->required();
  verify->add_flag("--json", json, "One JSON object for scripts: {\"files\": [...]} (docs/json.md)");
  static bool sha256 = false;
  verify->add_flag("--sha256", sha256,
                   "Also print each file's SHA-256 (every file of a directory), as sha256sum does: to compare with the "
                   "digests the Hugging Face Hub lists");
  AddThreadsOption(verify);
  AddIoOption(verify);
  verify->footer("Bytes no checksum covers (formats without checksums: tensordict directories, .psk.d, .safetensors, "
                 "legacy .pt) are read and bounds-checked, and counted apart.\n"
                 "Exit status: 0 sound, 1 problems found (each listed), 2 a path could not be read (the others are still "
                 "verified).");
  verify->callback([exit_code] {
    bool any_problem = false;
    bool any_unreadable = false;
    Json files = Json::array();
    for (const auto& p : paths) {
      CheckReport r;
      std::vector<FileDigest> digests;
      try {
        Progress progress(!json);  // erased before the file's lines
        VerifyOptions options;
        options.progress = progress.Callback();
        r = Verify(p, options);
        if (sha256) digests = Sha256Files(p, progress.Callback());
      } catch (const Error& e) {
        // One path that cannot be read (not a checkpoint, missing) is reported, and the
        // others are still verified: `trove verify downloads/*` must not stop at the first.
        any_unreadable = true;
        if (json) files.push_back(Json{{"path", p}, {"ok", false}, {"error", ErrorFieldsJson(e)}});
        else ReportUnreadable(e);
        continue;
      }
      const size_t problems = Problems(r);
      any_problem |= problems > 0;
      if (json) {
        Json j{{"path", r.path}, {"format", r.format}, {"ok", problems == 0}, {"entries_checked", r.entries_checked},
               {"bytes_checked", r.bytes_checked}, {"bytes_without_checksum", r.bytes_without_checksum},
               {"findings", Json::array()}};
        for (const auto& f : r.findings) j["findings"].push_back(FindingJson(f));
        if (sha256) {
          Json list = Json::array();
          for (const FileDigest& d : digests) {
            Json one{{"path", d.path}, {"bytes", d.bytes}};
            if (d.refused.empty()) one["sha256"] = d.sha256;
            else one["refused"] = d.refused;
            list.push_back(std::move(one));
          }
          j["sha256"] = std::move(list);
        }
        files.push_back(std::move(j));
        continue;
      }
      for (const auto& f : r.findings) std::cout << FindingText(r.path, f) << '\n';
      std::string unchecked;
      if (r.bytes_without_checksum == r.bytes_checked && r.bytes_checked > 0) {
        unchecked = "; the format has no checksums";
      } else if (r.bytes_without_checksum > 0) {
        unchecked = "; " + Thousands(r.bytes_without_checksum) + " bytes under no checksum";
      }
      std::cout << EscapeForDisplay(r.path) << ": " << (problems ? std::to_string(problems) + " problem(s)" : std::string("ok")) << " ("
                << EscapeForDisplay(r.format) << ", " << r.entries_checked << " entries, " << Thousands(r.bytes_checked) << " bytes checked"
                << unchecked << ")\n";
      // sha256sum's own lines ("<hex>  <path>"), so that `sha256sum -c` reads them back.
      for (const FileDigest& d : digests) {
        if (d.refused.empty()) std::cout << d.sha256 << "  " << EscapeForDisplay(d.path) << '\n';
        else std::cout << "# not read: " << EscapeForDisplay(d.path) << ": " << EscapeForDisplay(d.refused) << '\n';
      }
    }
    if (json) {
      Json j = Envelope("verify");
      j["ok"] = !any_problem && !any_unreadable;
      j["files"] = std::move(files);
      PrintJson(ExactStdout(), j);
    }
    *exit_code = any_unreadable ? kExitError : any_problem ? kExitFindings : kExitOk;
  });

  auto* scan = app.add_subcommand("scan", "Security report: pickle globals, code records, container anomalies");
  scan->add_option("paths", paths, "Files or tensordict directories")->required();
  scan->add_flag("--json", json, "One JSON object for scripts: {\"files\": [...]} (docs/json.md)");
  scan->add_option("--fail-on", fail_on, "Lowest severity that makes the exit status 1")
      ->check(CLI::IsMember({"info", "medium", "high", "critical"}));
  scan->footer("Nothing in the file is executed. Exit status: 0 clean, 1 findings at or above --fail-on, 2 a path "
               "could not be read (the others are still scanned).\n"
               "Example:\n  trove scan downloads/*.pt --fail-on high");
  scan->callback([exit_code] {
    Severity threshold = fail_on == "info" ? Severity::kInfo : fail_on == "high" ? Severity::kHigh
                       : fail_on == "critical" ? Severity::kCritical : Severity::kMedium;
    bool failing = false;
    bool any_unreadable = false;
    Json files = Json::array();
    for (const auto& p : paths) {
      CheckReport r;
      try {
        r = Scan(p);
      } catch (const Error& e) {  // reported; the other paths are still scanned (as verify does)
        any_unreadable = true;
        if (json) files.push_back(Json{{"path", p}, {"failing", true}, {"error", ErrorFieldsJson(e)}});
        else ReportUnreadable(e);
        continue;
      }
      bool file_failing = false;
      for (const auto& f : r.findings) file_failing |= f.severity >= threshold;
      failing |= file_failing;
      if (json) {
        Json j{{"path", r.path}, {"format", r.format}, {"failing", file_failing}, {"findings", Json::array()},
               {"globals", Json::array()}};
        for (const auto& f : r.findings) j["findings"].push_back(FindingJson(f));
        for (const auto& g : r.globals) {
          j["globals"].push_back({{"entry", g.entry},
                                  {"name", g.name},
                                  {"offset", g.offset},
                                  {"allowed", g.allowed},
                                  {"class", g.policy_class}});
        }
        files.push_back(std::move(j));
      } else {
        for (const auto& f : r.findings) std::cout << FindingText(r.path, f) << '\n';
        size_t allowed = 0;
        std::map<std::string, size_t> classes;  // as the default read policy takes them
        for (const auto& g : r.globals) {
          allowed += g.allowed;
          ++classes[g.policy_class];
        }
        const size_t notes = r.findings.size() - Problems(r);
        std::string by_class;
        for (const char* c : {"data", "name", "unknown", "dangerous"}) {
          if (classes[c]) by_class += (by_class.empty() ? " (" : ", ") + std::to_string(classes[c]) + " " + c;
        }
        if (!by_class.empty()) by_class += ")";
        std::cout << EscapeForDisplay(r.path) << ": " << EscapeForDisplay(r.format) << ", " << (r.findings.size() - notes) << " finding(s)"
                  << (notes ? ", " + std::to_string(notes) + " note(s)" : std::string()) << ", " << r.globals.size()
                  << " global reference(s)" << by_class << ", " << (r.globals.size() - allowed)
                  << " outside the allowlist\n";
      }
    }
    if (json) {
      Json j = Envelope("scan");
      j["fail_on"] = fail_on;
      j["failing"] = failing || any_unreadable;
      j["files"] = std::move(files);
      PrintJson(ExactStdout(), j);
    }
    *exit_code = any_unreadable ? kExitError : failing ? kExitFindings : kExitOk;
  });
}

}  // namespace trove::cli
