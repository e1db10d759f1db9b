// `presk data ...` (and `trove data ...`): the .psk.d commands of the spec, with its messages.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/escaped_output.h"
#include "cli/help_text.h"
#include "cli/json_output.h"
#include "cli/suggest.h"
#include "core/display_escape.h"
#include "core/float_text.h"
#include "formats/pskd/text_output.h"
#include "trove/version.h"
#include "formats/pskd/pskd_text.h"
#include "formats/pskd/token_files.h"
#include "trove/safetensors.h"
#include "trove/error.h"
#include "trove/pipeline.h"
#include "trove/pskd.h"
#include "trove/pskd_dataset.h"
#include "trove/shared_bytes.h"

namespace trove::cli {
namespace {

using namespace trove::pskd;

// One command's synopsis and help (`presk data CMD --help`).
struct CommandHelp {
  std::string_view name;
  std::string_view usage;  // after "presk data "
  std::string_view help;   // what it does, its options
};

constexpr CommandHelp kCommands[] = {
    {"chars", "chars INPUT.txt -o VOCAB.json",
     "Every distinct character of a UTF-8 text, sorted, as a JSON array: token i is its i-th string.\n"
     "  -o, --output VOCAB.json   the vocabulary (- for stdout)\n"},
    {"encode", "encode INPUT.txt --vocab VOCAB.json -o TOKENS.txt",
     "The text as token indices against a character vocabulary, separated by spaces (lines stay lines).\n"
     "  --vocab VOCAB.json        a vocabulary made by chars\n"
     "  -o, --output TOKENS.txt   the tokens (- for stdout)\n"},
    {"pack", "pack --type TYPE INPUT.txt -o OUT.psk.d [--encoding f64|f32|bf16[,...]] [--shard-size SIZE]",
     "One sample per line of text, values in leaf order (indices as integers, reals as decimals); "
     "empty lines and lines starting with -- are skipped.\n"
     "  --type TYPE               a closed data type: (idx[64][seq: 8], R[4]); R or real spells ℝ\n"
     "  --encoding E[,E...]       how real leaves are stored: one for all, or one per real leaf\n"
     "  -o, --output OUT.psk.d    the sample file\n"
     "  --shard-size SIZE         shards OUT-00000.psk.d... of at most SIZE (500MB, 64MiB) and a manifest OUT.json\n"},
    {"lm-windows", "lm-windows [--vocab V] --seq T [--stride S] TOKENS... -o OUT.psk.d [--token-dtype D] [--shard-size SIZE]",
     "Language-modelling windows of a token stream: window k is (tokens[kS .. kS+T], tokens[kS+1 .. kS+T+1]).\n"
     "TOKENS: token ids as a .npy (uint16, uint32, int32, int64, 1-D), a raw .bin (--token-dtype) or text "
     "(whitespace-separated, as encode writes); several files are one stream, in the order given.\n"
     "  --vocab V, --vocab-size V  the vocabulary size: every id is checked below it (default: largest id + 1)\n"
     "  --seq T                   the window length\n"
     "  --stride S                tokens between window starts (default T: no overlap)\n"
     "  --token-dtype uint16|uint32  the ids of a raw .bin file (nanoGPT's train.bin is uint16)\n"
     "  -o, --output OUT.psk.d    the sample file\n"
     "  --shard-size SIZE         shards OUT-00000.psk.d... of at most SIZE (500MB, 64MiB) and a manifest OUT.json\n"},
    {"tokens", "tokens [--vocab V] TOKENS... -o OUT.psk.d [--token-dtype D] [--shard-size SIZE]",
     "The token stream stored once, one idx[V][] sample a token: trove.data reads it as windows "
     "(open(..., windows=T)) without storing inputs and targets twice. TOKENS as for lm-windows.\n"
     "  --vocab V, --vocab-size V  the vocabulary size: every id is checked below it (default: largest id + 1)\n"
     "  --token-dtype uint16|uint32  the ids of a raw .bin file\n"
     "  -o, --output OUT.psk.d    the token file\n"
     "  --shard-size SIZE         shards OUT-00000.psk.d... of at most SIZE and a manifest OUT.json\n"},
    {"info", "info FILE.psk.d [--samples N] [--json]",
     "The header (type, count, version, how each leaf is stored) and the first samples.\n"
     "  --samples N               samples shown (default 3)\n"
     "  --json                    one JSON object for scripts (docs/json.md)\n"},
    {"diff", "diff A.psk.d B.psk.d",
     "Two files of the same type compared value for value: ||a - b||_2 over the real leaves, relative to "
     "||a||_2, and how many indices differ. Exit status 1 when they differ.\n"},
    {"export", "export FILE.psk.d -o OUT.json",
     "Every sample as JSON (tensors as nested lists, tuples as lists), for the PyTorch side.\n"
     "  -o, --output OUT.json     the JSON file (- for stdout)\n"},
    {"batches", "batches DATA... --batch B [--shuffle SEED] [--epoch E] [--take K] [--rank R --world-size W] [--worker K --workers N] [--windows T [--stride S]] [--read]",
     "The sample indices of each batch of an epoch, one batch a line, as training draws them "
     "(an incomplete last batch is dropped). DATA: .psk.d files of one type, shard manifests or "
     "quoted patterns such as 'train-*.psk.d', read as one dataset in the order given.\n"
     "  --batch B                 samples per batch\n"
     "  --shuffle SEED            a permutation redrawn every epoch from SEED and the epoch\n"
     "  --epoch E                 the epoch (default 0)\n"
     "  --take K                  only the first K batches\n"
     "  --rank R --world-size W   one rank's share: batch i of the epoch goes to rank i mod W, and the "
     "epoch's last batches that not every rank would get go to none\n"
     "  --worker K --workers N    a loader worker's share of its rank's batches (its j-th to worker j mod N)\n"
     "  --windows T [--stride S]  DATA is a token stream (presk data tokens): the indices of its windows, as "
     "lm-windows --seq T --stride S would have stored them (trove.data's windows=)\n"
     "  --read                    load every batch through the batch loader and print a summary (with "
     "--windows: each window's tokens read once, as trove.data reads them)\n"},
};

const CommandHelp* FindCommand(std::string_view name) {
  for (const CommandHelp& c : kCommands)
    if (c.name == name) return &c;
  return nullptr;
}

std::string Usage() {
  std::string out = "usage: presk data COMMAND ...\n";
  for (const CommandHelp& c : kCommands) out += "  " + std::string(c.usage) + "\n";
  out += "(presk data COMMAND --help for one command's help)\n";
  return WrapHelpText(out);
}

std::string CommandUsage(const CommandHelp& c) {
  return WrapHelpText("usage: presk data " + std::string(c.usage) + "\n" + std::string(c.help));
}

// Samples `info` prints when --samples is not given.
constexpr uint64_t kDefaultInfoSamples = 3;
// `info` prints a leaf of more elements as "<N elements>": a checkpoint's sample is not a screenful.
constexpr uint64_t kInfoMaxLeafElements = 4096;

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;
  std::set<std::string> flags;
  // The input files (positionals, --vocab): no output of the command may replace one of them.
  std::vector<std::unique_ptr<SourceGuard>> sources;

  bool Has(const std::string& name) const { return options.count(name) > 0; }
  const std::string& Get(const std::string& name) const { return options.at(name); }
};

// Parses `words` for one command: options taking a value (both "--x v" and "--x=v"), flags, and
// positionals (exactly `positionals`, or at least that many when more_positionals); `-o` is `--output`.
Args ParseArgs(const std::string& command, const std::vector<std::string>& words, size_t positionals,
               const std::set<std::string>& value_options, const std::set<std::string>& flag_options = {},
               bool more_positionals = false) {
  Args args;
  for (size_t i = 0; i < words.size(); ++i) {
    std::string word = words[i];
    if (word == "-o") word = "--output";
    if (word.size() > 1 && word[0] == '-' && word != "-") {
      std::string name = word, value;
      bool has_value = false;
      if (size_t eq = word.find('='); eq != std::string::npos && word.rfind("--", 0) == 0) {
        name = word.substr(0, eq);
        value = word.substr(eq + 1);
        has_value = true;
      }
      if (flag_options.count(name) && !has_value) {
        args.flags.insert(name);
        continue;
      }
      if (!value_options.count(name)) {
        std::vector<std::string> known(value_options.begin(), value_options.end());
        known.insert(known.end(), flag_options.begin(), flag_options.end());
        Fail(ErrorCode::kUsage, command + ": unknown option " + name + DidYouMean(Suggest(name, known)));
      }
      if (!has_value) {
        if (i + 1 >= words.size()) Fail(ErrorCode::kUsage, command + ": " + name + " needs a value");
        value = words[++i];
      }
      if (args.options.count(name)) Fail(ErrorCode::kUsage, command + ": " + name + " given twice");
      args.options[name] = value;
      continue;
    }
    args.positional.push_back(word);
  }
  for (const std::string& input : args.positional) args.sources.push_back(std::make_unique<SourceGuard>(input));
  if (args.Has("--vocab")) args.sources.push_back(std::make_unique<SourceGuard>(args.Get("--vocab")));
  if (more_positionals ? args.positional.size() < positionals : args.positional.size() != positionals) {
    Fail(ErrorCode::kUsage, command + ": expected " + (more_positionals ? "at least " : "") + std::to_string(positionals) + " file argument" +
                                (positionals == 1 ? "" : "s") + ", got " + std::to_string(args.positional.size()));
  }
  return args;
}

const std::string& Required(const Args& args, const std::string& command, const std::string& name) {
  if (!args.Has(name)) Fail(ErrorCode::kUsage, command + ": missing " + (name == "--output" ? "-o OUTPUT" : name));
  return args.Get(name);
}

uint64_t Number(const std::string& command, const std::string& name, const std::string& text) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    Fail(ErrorCode::kUsage, command + ": " + name + " expects a non-negative integer, got '" + text + "'");
  }
  return v;
}

// Text for people goes through std::cout (its escaping: cli/escaped_output.h); JSON does not.
void Print(const std::string& text) { std::cout << text; }
void PrintExact(const std::string& text) { ExactStdout() << text; }

// A path or a type text as a message shows it (core/display_escape.h).
std::string Shown(const std::string& text) { return EscapeForDisplay(text); }

std::string Plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// What a command wrote, said on stdout; on stderr when stdout was the output (`-o -`).
void Wrote(const std::string& out, const std::string& what) {
  if (out == kStdoutPath) {
    std::cout.flush();
    std::cerr << "presk data: wrote stdout (" << what << ")\n";
    return;
  }
  Print("presk data: wrote " + Shown(out) + " (" + what + ")\n");
}

// Binary outputs never go to a terminal or pipe by accident.
void RequireFileOutput(const std::string& command, const std::string& out) {
  if (out == kStdoutPath) Fail(ErrorCode::kUsage, command + ": -o - is for text outputs; a .psk.d is written to a file");
}

// --shard-size SIZE (the units of trove convert --max-shard-size), or 0 for one file.
uint64_t ShardBytes(const Args& args, const std::string& command) {
  if (!args.Has("--shard-size")) return 0;
  try {
    return ParseShardSize(args.Get("--shard-size"));
  } catch (const Error&) {
    Fail(ErrorCode::kUsage, command + ": --shard-size takes a number and a unit (B, KB, MB, GB, KiB, MiB, GiB), not '" +
                                args.Get("--shard-size") + "'");
  }
}

// The files a command wrote, said after its "wrote" line when there are shards.
std::string WrittenFiles(const std::vector<std::string>& files) {
  if (files.size() <= 1) return Shown(files.empty() ? std::string() : files[0]);
  // files: the shards, then the manifest. "a-00000.psk.d", "a-00000.psk.d, a-00001.psk.d",
  // "a-00000.psk.d ... a-00009.psk.d".
  const size_t shards = files.size() - 1;
  const char* between = shards == 2 ? ", " : " ... ";
  return Shown(files.back()) + " and " + Plural(shards, "shard", "shards") + " " + Shown(files.front()) +
         (shards > 1 ? between + Shown(files[shards - 1]) : std::string());
}

// The options lm-windows and tokens share: their inputs, --vocab (or --vocab-size), --token-dtype, -o.
TokenJob TokenJobOf(const Args& args, const std::string& command) {
  TokenJob job;
  job.inputs = args.positional;
  job.output = Required(args, command, "--output");
  RequireFileOutput(command, job.output);
  if (args.Has("--vocab") && args.Has("--vocab-size")) Fail(ErrorCode::kUsage, command + ": --vocab and --vocab-size are one option");
  if (args.Has("--vocab")) job.vocab = Number(command, "--vocab", args.Get("--vocab"));
  if (args.Has("--vocab-size")) job.vocab = Number(command, "--vocab-size", args.Get("--vocab-size"));
  if (args.Has("--token-dtype")) {
    job.bin_dtype = TokenDTypeFromName(args.Get("--token-dtype"));
    if (!job.bin_dtype) Fail(ErrorCode::kUsage, command + ": --token-dtype takes uint16 or uint32, got '" + args.Get("--token-dtype") + "'");
  }
  job.shard_bytes = ShardBytes(args, command);
  return job;
}

int Chars(const std::vector<std::string>& words) {
  Args args = ParseArgs("chars", words, 1, {"--output"});
  const std::string& out = Required(args, "chars", "--output");
  CharsResult r = WriteCharVocabulary(args.positional[0], out);
  Wrote(out, std::to_string(r.vocabulary) + " characters over " + std::to_string(r.characters) + " of text");
  return kExitOk;
}

int Encode(const std::vector<std::string>& words) {
  Args args = ParseArgs("encode", words, 1, {"--output", "--vocab"});
  const std::string& out = Required(args, "encode", "--output");
  EncodeResult r = EncodeText(args.positional[0], Required(args, "encode", "--vocab"), out);
  Wrote(out, std::to_string(r.tokens) + " tokens over a vocabulary of " + std::to_string(r.vocabulary));
  return kExitOk;
}

int Pack(const std::vector<std::string>& words) {
  Args args = ParseArgs("pack", words, 1, {"--output", "--type", "--encoding", "--shard-size"});
  const std::string& out = Required(args, "pack", "--output");
  RequireFileOutput("pack", out);
  SampleType type = ParseSampleTypeArgument(Required(args, "pack", "--type"));
  if (type.is_params) {
    FailPskd(PskdCode::kNotClosedType, "params " + type.params_name + ": its leaf layout needs the program");
  }
  if (args.Has("--encoding")) {
    // One encoding for every real leaf, or one per real leaf in order.
    std::vector<Encoding> given;
    const std::string& list = args.Get("--encoding");
    for (size_t start = 0; start <= list.size();) {
      size_t comma = std::min(list.find(',', start), list.size());
      auto e = EncodingFromName(list.substr(start, comma - start));
      if (!e) Fail(ErrorCode::kUsage, "pack: --encoding takes f64, f32 or bf16, got '" + list + "'");
      given.push_back(*e);
      start = comma + 1;
    }
    size_t reals = 0;
    for (const Leaf& leaf : type.leaves) reals += leaf.kind == LeafKind::kReal;
    if (given.size() != 1 && given.size() != reals) {
      Fail(ErrorCode::kUsage, "pack: --encoding lists " + std::to_string(given.size()) + " encodings for " +
                                  std::to_string(reals) + " real leaves");
    }
    std::vector<Encoding> encodings;
    size_t next = 0;
    for (const Leaf& leaf : type.leaves) {
      if (leaf.kind == LeafKind::kIndex) {
        encodings.push_back(Encoding::kF64);
      } else {
        encodings.push_back(given.size() == 1 ? given[0] : given[next++]);
      }
    }
    type.SetEncodings(encodings);
  }
  const std::string type_text = type.text;
  std::vector<std::string> files;
  uint64_t n = PackFile(args.positional[0], type, out, ShardBytes(args, "pack"), &files);
  Print("presk data: wrote " + WrittenFiles(files) + " (" + Plural(n, "sample", "samples") + " of type " + Shown(type_text) + ")\n");
  return kExitOk;
}

int LmWindows(const std::vector<std::string>& words) {
  Args args = ParseArgs("lm-windows", words, 1,
                        {"--output", "--vocab", "--vocab-size", "--seq", "--stride", "--token-dtype", "--shard-size"}, {},
                        /*more_positionals=*/true);
  TokenJob job = TokenJobOf(args, "lm-windows");
  uint64_t seq = Number("lm-windows", "--seq", Required(args, "lm-windows", "--seq"));
  uint64_t stride = args.Has("--stride") ? Number("lm-windows", "--stride", args.Get("--stride")) : seq;
  LmWindowsResult r = WriteLmWindows(job, seq, stride);
  Print("presk data: wrote " + WrittenFiles(r.files) + " (" + std::to_string(r.windows) + " windows of type " + Shown(r.type) +
        " from " + std::to_string(r.tokens) + " tokens)\n");
  return kExitOk;
}

int Tokens(const std::vector<std::string>& words) {
  Args args = ParseArgs("tokens", words, 1, {"--output", "--vocab", "--vocab-size", "--token-dtype", "--shard-size"}, {},
                        /*more_positionals=*/true);
  LmWindowsResult r = WriteTokenStream(TokenJobOf(args, "tokens"));
  Print("presk data: wrote " + WrittenFiles(r.files) + " (" + Plural(r.tokens, "token", "tokens") + " of type " +
        Shown(r.type) + ")\n");
  return kExitOk;
}

// A leaf's elements [*element, ...) of dims[axis...] as nested JSON arrays.
Json LeafJson(const Leaf& leaf, const uint8_t* base, size_t axis, uint64_t& element) {
  if (axis == leaf.dims.size()) {
    const uint8_t* p = base + element++ * leaf.element_bytes;
    return leaf.kind == LeafKind::kIndex ? Json(LoadIndex(p, leaf.element_bytes)) : Json(LoadReal(p, leaf.encoding));
  }
  Json a = Json::array();
  for (uint64_t i = 0; i < leaf.dims[axis].size; ++i) a.push_back(LeafJson(leaf, base, axis + 1, element));
  return a;
}

// A sample in the value encoding of docs/json.md: a tuple of the type is {"$tuple": [...]}, a
// leaf its nested lists; a leaf of more than kInfoMaxLeafElements elements {"$elided": true}.
Json SampleJson(const SampleType& type, uint32_t node, std::span<const uint8_t> sample) {
  const TypeNode& n = type.nodes[node];
  if (n.is_tuple) {
    Json items = Json::array();
    for (uint32_t child : n.children) items.push_back(SampleJson(type, child, sample));
    return Json{{"$tuple", std::move(items)}};
  }
  const Leaf& leaf = type.leaves[n.leaf];
  if (leaf.elements > kInfoMaxLeafElements) return Json{{"$elided", true}};
  uint64_t element = 0;
  return LeafJson(leaf, sample.data() + leaf.offset, 0, element);
}

int InfoJson(const PskdFile& file, const std::string& path, uint64_t samples) {
  const SampleType& type = file.type();
  Json j = Envelope("data info");
  j["path"] = path;
  j["type"] = type.text;
  j["count"] = file.count();
  j["version"] = file.header().version;
  j["params"] = type.is_params ? Json(type.params_name) : Json(nullptr);
  Json leaves = Json::array();
  for (const Leaf& leaf : type.leaves) {
    leaves.push_back({{"type", leaf.TypeText()}, {"kind", leaf.kind == LeafKind::kReal ? "real" : "index"},
                      {"bound", leaf.kind == LeafKind::kIndex ? Json(leaf.bound) : Json(nullptr)},
                      {"shape", leaf.shape()}, {"storage", LeafStorageName(leaf)}, {"offset", leaf.offset},
                      {"bytes", leaf.bytes}});
  }
  j["sample_bytes"] = type.is_params ? Json(nullptr) : Json(type.sample_bytes);
  j["leaves"] = std::move(leaves);
  Json shown = Json::array();
  for (uint64_t i = 0; !type.is_params && i < std::min(samples, file.count()); ++i) {
    file.CheckIndices(i);
    shown.push_back({{"index", i}, {"value", SampleJson(type, 0, file.Sample(i))}});
  }
  j["samples"] = std::move(shown);
  PrintExact(DumpJson(j, 2) + "\n");
  return kExitOk;
}

int Info(const std::vector<std::string>& words) {
  Args args = ParseArgs("info", words, 1, {"--samples"}, {"--json"});
  uint64_t samples = args.Has("--samples") ? Number("info", "--samples", args.Get("--samples")) : kDefaultInfoSamples;
  PskdFile file = PskdFile::Open(args.positional[0]);
  if (args.flags.count("--json")) return InfoJson(file, args.positional[0], samples);
  const SampleType& type = file.type();
  std::string out;
  out += "type    " + Shown(type.text) + "\n";
  out += "count   " + std::to_string(file.count()) + "\n";
  out += "version " + std::to_string(file.header().version) + "\n";
  if (type.is_params) {
    out += "sample  params " + Shown(type.params_name) + ": its leaf layout needs the program that declares it "
           "(open the file from the program, e.g. presk train)\n";
    Print(out);
    return kExitOk;
  }
  if (file.header().version == 2) {
    out += "encodings ";
    for (size_t k = 0; k < type.leaves.size(); ++k) {
      if (k > 0) out += ", ";
      out += LeafStorageName(type.leaves[k]);
    }
    out += "\n";
  }
  out += "sample  " + std::to_string(type.sample_bytes) + " bytes, " + Plural(type.leaves.size(), "leaf", "leaves") + "\n";
  Print(out);
  for (uint64_t i = 0; i < std::min(samples, file.count()); ++i) {
    file.CheckIndices(i);
    out = "[" + std::to_string(i) + "] ";
    AppendSampleText(type, file.Sample(i), false, kInfoMaxLeafElements, out);
    out += "\n";
    Print(out);
  }
  return kExitOk;
}

std::string Figure(double v) { return FloatText(v); }

int Diff(const std::vector<std::string>& words) {
  Args args = ParseArgs("diff", words, 2, {});
  PskdFile a = PskdFile::Open(args.positional[0]);
  PskdFile b = PskdFile::Open(args.positional[1]);
  DiffResult r = DiffFiles(a, b);
  double relative = r.a_norm > 0 ? r.diff_norm / r.a_norm : (r.diff_norm > 0 ? INFINITY : 0.0);
  std::string out;
  out += "reals            " + std::to_string(r.reals) + " values compared\n";
  out += "‖a − b‖₂         " + Figure(r.diff_norm) + "\n";
  out += "‖a − b‖₂ / ‖a‖₂  " + Figure(relative) + "\n";
  if (r.indices > 0) {
    out += "indices          " + std::to_string(r.index_differences) + " of " + std::to_string(r.indices) + " differ\n";
  }
  Print(out);
  return r.diff_norm == 0 && r.index_differences == 0 ? kExitOk : kExitFindings;
}

int Export(const std::vector<std::string>& words) {
  Args args = ParseArgs("export", words, 1, {"--output"});
  const std::string& out = Required(args, "export", "--output");
  PskdFile file = PskdFile::Open(args.positional[0]);
  uint64_t n = ExportJson(file, out);
  Wrote(out, Plural(n, "sample", "samples"));
  return kExitOk;
}

// --NAME and --NAMES (--rank and --world-size, --worker and --workers) are given together or not at all.
void Pair(const Args& args, const std::string& one, const std::string& total, uint64_t& index, uint64_t& count) {
  if (args.Has(one) != args.Has(total)) {
    Fail(ErrorCode::kUsage, "batches: " + (args.Has(one) ? one + " needs " + total : total + " needs " + one));
  }
  if (!args.Has(one)) return;
  index = Number("batches", one, args.Get(one));
  count = Number("batches", total, args.Get(total));
}

int Batches(const std::vector<std::string>& words) {
  Args args = ParseArgs("batches", words, 1,
                        {"--batch", "--shuffle", "--epoch", "--take", "--rank", "--world-size", "--worker", "--workers",
                         "--windows", "--stride"},
                        {"--read"}, /*more_positionals=*/true);
  PipelineSpec spec;
  spec.batch = Number("batches", "--batch", Required(args, "batches", "--batch"));
  if (args.Has("--shuffle")) spec.shuffle_seed = Number("batches", "--shuffle", args.Get("--shuffle"));
  if (args.Has("--take")) spec.take = Number("batches", "--take", args.Get("--take"));
  uint64_t epoch = args.Has("--epoch") ? Number("batches", "--epoch", args.Get("--epoch")) : 0;
  Partition part;
  Pair(args, "--rank", "--world-size", part.rank, part.world_size);
  Pair(args, "--worker", "--workers", part.worker, part.workers);
  part.Validate();
  Dataset data = Dataset::Open(args.positional);
  uint64_t samples = data.count();
  if (args.Has("--stride") && !args.Has("--windows")) Fail(ErrorCode::kUsage, "batches: --stride needs --windows");
  uint64_t seq = 0, stride = 0;  // the windows view's T and S; 0: the stored samples
  if (args.Has("--windows")) {
    // The windows view of a token stream (docs/pskd.md, "Windows of a token stream"): window k
    // starts at token kS and needs T + 1 tokens, as lm-windows cuts them.
    seq = Number("batches", "--windows", args.Get("--windows"));
    stride = args.Has("--stride") ? Number("batches", "--stride", args.Get("--stride")) : seq;
    if (seq == 0 || stride == 0) Fail(ErrorCode::kUsage, "batches: --windows and --stride must be at least 1");
    const SampleType& type = data.type();
    if (type.leaves.size() != 1 || type.leaves[0].kind != LeafKind::kIndex || !type.leaves[0].dims.empty()) {
      Fail(ErrorCode::kUsage, "batches: --windows reads a token stream, one idx[V][] sample a token (presk data tokens), "
                              "not samples of " + Shown(type.text));
    }
    if (seq > kMaxWindowTokens) {
      Fail(ErrorCode::kLimit, "batches: --windows " + std::to_string(seq) + " is above the cap of " +
                                  std::to_string(kMaxWindowTokens) + " tokens a window (kMaxWindowTokens)");
    }
    samples = samples <= seq ? 0 : (samples - seq - 1) / stride + 1;
  }
  Pipeline pipeline(samples, spec);
  std::vector<uint64_t> order = pipeline.Order(epoch, part);
  if (pipeline.batches_per_epoch() == 0) {
    const std::string what = args.positional.size() == 1 ? Shown(args.positional[0]) : "the dataset";
    if (spec.take && *spec.take == 0) {
      std::cerr << "presk data: note: no batch: --take 0\n";
    } else {
      std::cerr << "presk data: note: no batch: --batch " << spec.batch << " is more than the " << samples
                << " samples of " << what << " (an incomplete batch is dropped)\n";
    }
  }
  if (const uint64_t dropped = pipeline.batches_per_epoch() % part.world_size; dropped != 0) {
    // Said on stderr, so that stdout stays one line per batch: every rank drops the same batches.
    const std::string note = "presk data: note: " + std::to_string(dropped) + " of the epoch's " +
                             Plural(pipeline.batches_per_epoch(), "batch", "batches") + (dropped == 1 ? " goes" : " go") +
                             " to no rank (every rank takes " +
                             Plural(pipeline.batches_per_rank(part.world_size), "step", "steps") + ")\n";
    std::cerr << note;
  }
  if (args.flags.count("--read")) {
    // Loads every batch through the batch loader (what a training loop does) and prints a summary.
    BatchLoader loader(data);
    Batch batch;
    uint64_t bytes = 0, checksum = 0;
    std::vector<uint64_t> tokens;  // the windows view: the batch's windows' tokens, T + 1 a window
    for (uint64_t start = 0; start < order.size(); start += spec.batch) {
      const std::span<const uint64_t> all(order);
      const uint64_t next = start + spec.batch;
      if (seq == 0) {
        loader.Load(all.subspan(start, spec.batch), batch, next < all.size() ? all.subspan(next, spec.batch) : all.subspan(0, 0));
        for (const auto& leaf : batch.leaves) {
          bytes += leaf.size();
          if (!leaf.empty()) checksum += leaf.front() + leaf.back();
        }
        continue;
      }
      // Each window's T + 1 tokens are read once (as trove.data's windows view reads them); its
      // inputs are the first T, its targets the last T: the summary is the one the file
      // lm-windows would have written gives.
      tokens.clear();
      for (const uint64_t k : all.subspan(start, spec.batch))
        for (uint64_t j = 0; j <= seq; ++j) tokens.push_back(k * stride + j);
      loader.Load(tokens, batch);
      const std::vector<uint8_t>& flat = batch.leaves.at(0);
      const uint64_t item = flat.size() / tokens.size();  // bytes a token
      const uint64_t half = spec.batch * seq * item;      // the inputs' bytes, and the targets'
      bytes += 2 * half;
      const uint64_t last_window = (spec.batch - 1) * (seq + 1) * item;
      checksum += flat.front() + flat[last_window + seq * item - 1];   // inputs: tokens 0 and T - 1
      checksum += flat[item] + flat.back();                           // targets: tokens 1 and T
    }
    Print("read " + Plural(order.size() / spec.batch, "batch", "batches") + " of " +
          Plural(spec.batch, "sample", "samples") + " (" + std::to_string(bytes) + " bytes, checksum " +
          std::to_string(checksum) + ")\n");
    return kExitOk;
  }
  std::string out;
  char buf[24];
  for (uint64_t start = 0; start < order.size(); start += spec.batch) {
    for (uint64_t i = 0; i < spec.batch; ++i) {
      if (i > 0) out += ' ';
      auto r = std::to_chars(buf, buf + sizeof buf, order[start + i]);
      out.append(buf, r.ptr);
    }
    out += '\n';
    if (out.size() >= (size_t{1} << 16)) {
      Print(out);
      out.clear();
    }
  }
  Print(out);
  return kExitOk;
}

// The E9xxx code an error is reported with.
std::optional<PskdCode> ReportedCode(const Error& e) {
  std::optional<PskdCode> code = PskdCodeOf(e);
  if (!code) {
    // Errors from the core carry no E9xxx code: an unreadable input is E9002, an I/O error E9003.
    if (e.code() == ErrorCode::kNotFound) code = PskdCode::kNotPskd;
    if (e.code() == ErrorCode::kIo) code = PskdCode::kTruncated;
  }
  return code;
}

// `command`: the command that ran, whose help a usage error points to. `info --json` also prints
// the error object of docs/json.md on stdout, for the script that reads it.
void PrintError(const Error& e, const std::string& command, const std::vector<std::string>& words) {
  const std::optional<PskdCode> code = ReportedCode(e);
  if (command == "info" && std::find(words.begin(), words.end(), "--json") != words.end()) {
    Json j = ErrorJson("data info", e);
    if (code) j["error"]["spec_code"] = static_cast<int>(*code);
    PrintJson(std::cout, j);
    std::cout.flush();
  }
  const std::string message = e.DisplayMessageWithoutSpecCode();
  if (code) {
    std::cerr << "presk data: error[E" << static_cast<int>(*code) << "]: " << message << '\n';
  } else {
    std::cerr << "presk data: error: " << message << '\n';
    if (e.code() == ErrorCode::kUsage) {
      if (FindCommand(command)) {
        std::cerr << "(run 'presk data " << command << " --help' for its usage)\n";
      } else {
        std::cerr << "(run 'presk data --help' for the commands)\n";
      }
    }
  }
}

}  // namespace

int RunPreskData(const std::vector<std::string>& args) {
  const bool help_word = !args.empty() && args[0] == "help";
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || (help_word && args.size() == 1)) {
    (args.empty() ? std::cerr : std::cout) << Usage();
    return args.empty() ? kExitError : kExitOk;
  }
  // `presk data help CMD` and `presk data CMD --help` (anywhere among its words).
  const std::string& command = help_word ? args[1] : args[0];
  std::vector<std::string> rest(args.begin() + (help_word ? 2 : 1), args.end());
  const CommandHelp* known = FindCommand(command);
  const bool asks_help = help_word || std::any_of(rest.begin(), rest.end(), [](const std::string& w) {
    return w == "--help" || w == "-h";
  });
  if (known == nullptr) {
    std::vector<std::string> names;
    for (const CommandHelp& c : kCommands) names.emplace_back(c.name);
    std::cerr << "presk data: error: unknown command '" << Shown(command) << "'" << DidYouMean(Suggest(command, names))
              << "\n(run 'presk data --help' for the commands)\n";
    return kExitError;
  }
  if (asks_help) {
    std::cout << CommandUsage(*known);
    return kExitOk;
  }
  int status = kExitError;
  try {
    // Every command reads mapped files: one shrinking under it is an error, not a SIGBUS death.
    RunGuardingTruncation([&] {
      if (command == "chars") status = Chars(rest);
      else if (command == "encode") status = Encode(rest);
      else if (command == "pack") status = Pack(rest);
      else if (command == "lm-windows") status = LmWindows(rest);
      else if (command == "tokens") status = Tokens(rest);
      else if (command == "info") status = Info(rest);
      else if (command == "diff") status = Diff(rest);
      else if (command == "export") status = Export(rest);
      else if (command == "batches") status = Batches(rest);
    });
  } catch (const Error& e) {
    std::cout.flush();
    PrintError(e, command, rest);
    return ExitStatusAfterSignals(kExitError);
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "presk data: error: " << EscapeForDisplay(e.what(), DisplayEscape::kLine) << '\n';
    return ExitStatusAfterSignals(kExitError);
  }
  std::cout.flush();
  return ExitStatusAfterSignals(status);
}

int PreskMain(int argc, char** argv) {
  const EscapedStandardStreams escaped_output;
  std::vector<std::string> words(argv + 1, argv + argc);
  if (words.empty() || words[0] == "--help" || words[0] == "-h") {
    (words.empty() ? std::cerr : std::cout) << "usage: presk data COMMAND ... (presk data --help)\n";
    return words.empty() ? kExitError : kExitOk;
  }
  if (words[0] == "--version") {
    std::cout << "presk (trove) " << kVersion << '\n';
    return kExitOk;
  }
  if (words[0] != "data") {
    std::cerr << "presk: error: unknown command '" << Shown(words[0]) << "' (this presk has only `presk data`)\n";
    return kExitError;
  }
  return RunPreskData(std::vector<std::string>(words.begin() + 1, words.end()));
}

}  // namespace trove::cli
