// formats/pskd/pskd_text.h: the text side of `presk data` — vocabularies, token streams, pack,
// and samples printed as text or JSON.
//
// Each operation streams its input through TextInput and writes its output through an AtomicFile,
// so memory stays bounded and a failure leaves no output. Errors carry E900x codes naming the
// line (or byte offset) and the reason. Stateless functions: safe to call from several threads
// on different files.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trove/pskd.h"

namespace trove::pskd {

struct CharsResult {
  uint64_t vocabulary = 0;  // distinct characters
  uint64_t characters = 0;  // characters of text read
};
// `chars`: every distinct code point of a UTF-8 text, sorted, as a JSON array of strings.
CharsResult WriteCharVocabulary(const std::string& input, const std::string& output);

struct EncodeResult {
  uint64_t tokens = 0;
  uint64_t vocabulary = 0;
};
// `encode`: the text as token indices against a character vocabulary, separated by spaces
// (a newline after the token of a newline, so lines stay lines).
EncodeResult EncodeText(const std::string& input, const std::string& vocab_path, const std::string& output);

// Caps a window of lm-windows: its tokens are buffered (twice) while the file streams.
inline constexpr uint64_t kMaxWindowTokens = uint64_t{1} << 24;

// Where the token-id commands read and write (lm-windows, tokens).
struct TokenJob {
  std::vector<std::string> inputs;      // .npy, .bin or text files, one stream in this order
  std::optional<uint64_t> vocab;        // the bound V; unset: the largest id + 1
  std::optional<DType> bin_dtype;       // the ids of a raw .bin (--token-dtype)
  std::string output;
  uint64_t shard_bytes = 0;             // --shard-size; 0: one file (formats/pskd/sharded_writer.h)
};

struct LmWindowsResult {
  uint64_t windows = 0;
  uint64_t tokens = 0;
  std::string type;
  std::vector<std::string> files;  // written, a manifest last
};
// `lm-windows`: window k is (tokens[kS .. kS+T], tokens[kS+1 .. kS+T+1]) of type
// (idx[V][seq: T], idx[V][seq: T]).
LmWindowsResult WriteLmWindows(const TokenJob& job, uint64_t seq, uint64_t stride);
// `tokens`: the stream itself, one sample of type idx[V][] a token, which trove.data reads as
// windows at read time (docs/pskd.md, "Windows of a token stream"): each token stored once.
LmWindowsResult WriteTokenStream(const TokenJob& job);

// `pack`: parses one line into `encoder` (reset first). False for a line that holds no sample
// (empty, or starting with "--"). Errors are E9004/E9005 prefixed "line N: ".
bool PackLine(std::string_view line, uint64_t line_number, SampleEncoder& encoder);
// Packs a whole text file into `output`, or shards of shard_bytes (formats/pskd/sharded_writer.h);
// returns the sample count, and the files written in *files when given.
uint64_t PackFile(const std::string& input, const SampleType& type, const std::string& output, uint64_t shard_bytes = 0,
                  std::vector<std::string>* files = nullptr);

// A sample as text: tuples "(a, b)", tensors nested lists "[1, 2]", scalars bare, reals in
// shortest round-trip form at the leaf's precision ("0.5", "1.0", "nan", "inf";
// core/float_text.h). Json (export's form): tuples become lists too, reals at double precision,
// non-finite ones as Python's json writes them (NaN, Infinity, -Infinity).
// Leaves of more than max_leaf_elements elements print as "<N elements>" (0: no limit).
void AppendSampleText(const SampleType& type, std::span<const uint8_t> sample, bool json, uint64_t max_leaf_elements,
                      std::string& out);
void AppendReal(double value, std::string& out);  // export's JSON form

// `export`: every sample as one JSON array. Returns the sample count.
uint64_t ExportJson(const PskdFile& file, const std::string& output);

struct DiffResult {
  double diff_norm = 0;      // ‖a − b‖₂ over the real leaves
  double a_norm = 0;         // ‖a‖₂
  uint64_t reals = 0;        // real values compared
  uint64_t indices = 0;      // index values compared
  uint64_t index_differences = 0;
};
// `diff`: E9005 when the files differ in type (leaf shapes and kinds) or count.
DiffResult DiffFiles(const PskdFile& a, const PskdFile& b);

}  // namespace trove::pskd
