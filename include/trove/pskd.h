// trove/pskd.h: .psk.d sample files — the container, its sample-type language, reading and writing.
//
// A .psk.d file is a header (magic "PSKD", version 1 or 2, the sample type as Presk text, the
// sample count, and in version 2 one encoding byte per leaf) followed by fixed-size samples back to
// back (docs/pskd.md). PskdFile reads one through a mapping: opening parses only the header, and a
// sample is a bounds-checked view of its own bytes, so reading any sample touches only its pages.
// PskdWriter streams samples into an AtomicFile: a failed write leaves no file behind.
//
// Errors are trove::Error carrying the spec's code as its spec_code field (rendered "line 3: E9004:
// 64 is not below 64"); PskdCodeOf reads it. Parsed types, headers and open files are immutable values: a
// PskdFile may be read from many threads; writers and encoders are used from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trove/atomic_file.h"
#include "trove/document.h"
#include "trove/dtype.h"
#include "trove/error.h"
#include "trove/shared_bytes.h"
#include "trove/write_options.h"

namespace trove::pskd {

// The spec's error table.
enum class PskdCode : uint16_t {
  kNotClosedType = 9001,  // symbolic/missing dimension, `...`, idx[0], a named type, params M without its program
  kNotPskd = 9002,        // bad magic, unsupported version, unreadable path
  kTruncated = 9003,      // truncated file, sample index beyond the count, I/O errors
  kBadValue = 9004,       // a value out of its bound, a text value that is not an index or a real, too few/many values
  kLayout = 9005,         // a sample whose structure does not match the layout
};

// Throws trove::Error with `detail` as its reason and the code as its spec_code.
[[noreturn]] void FailPskd(PskdCode code, std::string detail);
// The same, naming the file the error is about (Error::SetFile: outer layers do not repeat it).
[[noreturn]] void FailPskd(PskdCode code, std::string detail, std::string_view file);
// The spec code an error carries (its spec_code field), if any.
std::optional<PskdCode> PskdCodeOf(const Error& error);
// The message rendered without its "E900x: " code (file, entry and contexts are kept).
std::string PskdMessageWithoutCode(const Error& error);

// --- The sample-type language --------------------------------------------------------------

// Caps on what a type text may declare. A sample type is written by hand or by a tool: these sit
// far above any real one, and each bounds the work and memory a hostile header can cause.
inline constexpr uint64_t kMaxTypeTextBytes = uint64_t{1} << 20;  // the longest type text read
inline constexpr uint32_t kMaxLeaves = 1u << 16;                  // leaves in one sample type
inline constexpr uint32_t kMaxTypeDepth = 64;                     // tuple nesting (parser recursion)
inline constexpr uint32_t kMaxLeafRank = 64;                      // dimensions of one leaf (= kMaxTensorRank)
// One sample may be large (a whole checkpoint is one sample) but must stay addressable.
inline constexpr uint64_t kMaxSampleBytes = uint64_t{1} << 48;

enum class LeafKind : uint8_t { kReal, kIndex };
// The on-disk encoding of a leaf (version 2 header byte); every index leaf is kF64 (0).
enum class Encoding : uint8_t { kF64 = 0, kF32 = 1, kBF16 = 2 };
std::string_view EncodingName(Encoding encoding);  // "f64", "f32", "bf16"
std::optional<Encoding> EncodingFromName(std::string_view name);

struct Dim {
  std::string name;  // "" when the dimension has no name; kept for documentation, never checked
  uint64_t size = 0;
};

struct Leaf {
  LeafKind kind = LeafKind::kReal;
  uint64_t bound = 0;          // idx[N]: N (bool: 2); 0 for reals
  bool written_as_bool = false;
  std::vector<Dim> dims;       // empty for a scalar (ℝ[], idx[N][])
  uint64_t elements = 1;       // product of dims
  Encoding encoding = Encoding::kF64;
  uint32_t element_bytes = 8;  // on disk: u8/u16/u32/u64 for indices; 8/4/2 for reals by encoding
  uint64_t offset = 0;         // of the leaf within a sample
  uint64_t bytes = 0;          // elements * element_bytes
  DType dtype() const;         // uint8..uint64, float64, float32, bfloat16
  std::vector<int64_t> shape() const;
  std::string TypeText() const;  // "idx[64][seq: 8]"
};

// The type's tree: a leaf, or a tuple of nodes. Index-based so that copies stay valid.
struct TypeNode {
  bool is_tuple = false;
  uint32_t leaf = 0;                // when !is_tuple: index into SampleType::leaves
  std::vector<uint32_t> children;   // when is_tuple: indices into SampleType::nodes
};

struct SampleType {
  std::string text;                 // as written in the header
  bool is_params = false;           // `params M`: leaf layout needs the program's declarations
  std::string params_name;
  std::vector<TypeNode> nodes;      // nodes[0] is the root (absent for params)
  std::vector<Leaf> leaves;         // in sample order
  uint64_t sample_bytes = 0;

  bool has_narrow_leaf() const;     // some leaf is not f64: needs version 2
  // Sets each real leaf's encoding and recomputes offsets and sizes. encodings.size() must equal
  // the leaf count (index leaves must be kF64), else E9005.
  void SetEncodings(const std::vector<Encoding>& encodings);
  std::vector<Encoding> encodings() const;
  std::string CanonicalText() const;  // the type re-printed: "(idx[64][seq: 8], idx[64][seq: 8])"
};

// Parses Presk sample-type text. Throws E9001 for what is not a closed data type and for syntax
// errors (naming the byte offset). `params M` parses to is_params with no leaves.
// ℝ may be spelled R or real (ASCII), wherever a type is read.
SampleType ParseSampleType(std::string_view text);
// A type given by a person (presk data pack --type): as ParseSampleType, and one spelled with R
// or real gets the spec's spelling as its text (the header other readers parse says ℝ).
SampleType ParseSampleTypeArgument(std::string_view text);

// How a leaf's elements are stored: its encoding for a real leaf ("f64", "f32", "bf16"), its
// integer width for an index leaf ("u8", "u16", "u32", "u64"), whose header byte says f64.
std::string_view LeafStorageName(const Leaf& leaf);

// Smallest of 1/2/4/8 bytes holding bound - 1.
uint32_t IndexElementBytes(uint64_t bound);

// --- The container -----------------------------------------------------------------------

inline constexpr std::string_view kMagic = "PSKD";

struct Header {
  uint16_t version = 1;
  SampleType type;
  uint64_t count = 0;
  uint64_t data_offset = 0;  // where sample 0 starts
};

// Serialises a header; version 2 exactly when the type has a narrow leaf.
std::vector<uint8_t> EncodeHeader(const SampleType& type, uint64_t count);
// Byte offset of the count field in an encoded header of this type text.
uint64_t CountFieldOffset(const SampleType& type);

// Parses and checks a header against the bytes that follow it: E9002 bad magic/version, E9003
// truncated or too few data bytes for `count` samples, E9001 a type that is not closed, E9005 a
// leaf count/encoding that does not match the type or bytes beyond the last sample. A params type
// is returned without data checks (its layout is unknown).
Header ParseHeader(const uint8_t* data, uint64_t size);

// Reads an element of a leaf, little-endian, from its on-disk bytes.
uint64_t LoadIndex(const uint8_t* p, uint32_t element_bytes);
double LoadReal(const uint8_t* p, Encoding encoding);
// The largest of n consecutive elements of an index leaf (on-disk width), vectorised.
uint64_t MaxIndex(const Leaf& leaf, const uint8_t* p, uint64_t n);

class PskdFile {
 public:
  // Maps the file and parses its header. E9002 when the path is unreadable.
  static PskdFile Open(const std::string& path);
  static PskdFile FromMapped(std::shared_ptr<MappedFile> file);
  // Over bytes already in memory (fuzzing, tests); `name` is used in messages.
  static PskdFile FromBytes(SharedBytes bytes, std::string name);

  const Header& header() const { return header_; }
  const SampleType& type() const { return header_.type; }
  uint64_t count() const { return header_.count; }
  const std::string& name() const { return name_; }
  const SharedBytes& bytes() const { return bytes_; }

  // E9001 when the type is params (its layout needs the program).
  void RequireLayout() const;
  // The bytes of sample i (a view into the mapping). E9003 beyond the count.
  std::span<const uint8_t> Sample(uint64_t index) const;
  // Every index of sample i below its bound, else E9004 naming sample, leaf and element.
  void CheckIndices(uint64_t index) const;
  // CheckIndices for every sample: the whole verdict of presk data on the file's data (nothing
  // for a params type, whose layout needs the program). `trove verify` uses it too.
  void CheckData() const;

 private:
  PskdFile() = default;
  std::string name_;
  SharedBytes bytes_;
  Header header_;
};

// An encoder holds one sample in memory; larger samples (a whole checkpoint) are written by
// appending their bytes directly, not value by value from text.
inline constexpr uint64_t kMaxEncodedSampleBytes = uint64_t{1} << 30;

// Builds one sample's bytes value by value in leaf order, checking each against its leaf.
// Error(kLimit) for a type whose sample exceeds kMaxEncodedSampleBytes.
class SampleEncoder {
 public:
  explicit SampleEncoder(const SampleType& type);
  void Reset();
  // E9004 when value >= bound; E9005 when the next element is a real leaf's.
  void PutIndex(uint64_t value);
  // E9004 when the leaf's encoding does not hold the value exactly; E9005 on an index leaf.
  void PutReal(double value);
  // A real already in the leaf's encoding (its little-endian bytes: 8, 4 or 2 by encoding), copied
  // as it is, so that a NaN keeps its bits (through a double, a signaling NaN turns quiet).
  // E9005 on an index leaf.
  void PutStoredReal(const uint8_t* element);
  bool next_is_index() const;
  bool complete() const { return leaf_ == type_->leaves.size(); }
  uint64_t values_written() const { return values_; }
  uint64_t values_per_sample() const { return values_per_sample_; }
  std::span<const uint8_t> bytes() const { return bytes_; }  // complete() must hold

 private:
  void Advance();
  const SampleType* type_;
  std::vector<uint8_t> bytes_;
  size_t leaf_ = 0;
  uint64_t element_ = 0;
  uint64_t values_ = 0;
  uint64_t values_per_sample_ = 0;
};

// Streams samples of one type into an AtomicFile; the count is patched into the header on
// Commit(). Destroying an uncommitted writer leaves no file.
class PskdWriter {
 public:
  PskdWriter(const std::string& path, SampleType type, Durability durability = Durability::kReplaceSafe);
  ~PskdWriter();
  PskdWriter(const PskdWriter&) = delete;
  PskdWriter& operator=(const PskdWriter&) = delete;

  const SampleType& type() const { return type_; }
  // One sample's bytes (sample_bytes of them, else E9005). Not checked against bounds: use
  // SampleEncoder or check before.
  void Append(std::span<const uint8_t> sample);
  uint64_t count() const { return count_; }
  void Commit();

 private:
  SampleType type_;
  std::unique_ptr<AtomicFile> out_;
  uint64_t count_ = 0;
};

}  // namespace trove::pskd

namespace trove {

// --- A Document as a .psk.d file (trove convert) ---------------------------------------------
//
// The document's tensors, all with the same leading dimension (the sample count), become the
// leaves of a tuple type, in the document's key order: reals as ℝ[...] stored f64/f32/bf16 by
// dtype (float64/float32/bfloat16), integers as idx[N][...] with N from the options or max + 1,
// bools as bool[...]. Any other dtype is an error naming the key. The file is written through an
// AtomicFile: a failure leaves nothing. Thread-safe: no shared state. Progress counts the bytes of
// samples written (the file's size less its header).
struct PskdWriteOptions : WriteOptions {
  // The bound N of every integer leaf; unset: each leaf's max + 1.
  std::optional<uint64_t> vocab;
  // Nonzero: shards PATH-00000.psk.d... of at most this many bytes and a manifest PATH.json, as
  // `presk data ... --shard-size` writes them (`trove convert --max-shard-size`); PATH must end in .psk.d.
  uint64_t max_shard_bytes = 0;
};

void WritePskd(const Document& doc, const std::string& path, const PskdWriteOptions& options = {});

}  // namespace trove
