// formats/npy/npy_format.h: numpy's .npy arrays and .npz archives of them (docs/npy.md).
//
// An .npy file is the magic "\x93NUMPY", a version (1.0, 2.0 or 3.0), a little-endian header
// length (2 bytes in 1.0, 4 after), a header that is a Python dict literal
// {'descr': ..., 'fortran_order': ..., 'shape': (...)}, then the array's bytes (or, for an
// object array, a pickle). An .npz file is a zip archive (numpy.savez: stored;
// savez_compressed: deflated) of one `<name>.npy` member per array.
// Readers return Documents whose tensors view the mapping (an .npy file, a stored member) or the
// member's deferred bytes (a deflated member: inflated only when its values are read); only the
// header is ever parsed at open. Object arrays are refused (numpy runs their pickle under
// allow_pickle=True) unless the policy is kPermissive, which reads the pickle inert.
// Functions are thread-safe (no shared state); documents follow trove/document.h.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "trove/document.h"
#include "trove/findings.h"
#include "trove/shared_bytes.h"
#include "trove/write_options.h"

namespace trove {

class ZipReader;

// The key the one array of an .npy file has in its document: a file is not a dict, and trove's
// key paths have no empty key at the top, so the array is `array` (`trove cat x.npy array`).
inline constexpr std::string_view kNpyArrayKey = "array";

// True when `head` starts with the magic and a version trove reads (1.0, 2.0, 3.0).
bool LooksLikeNpy(std::string_view head);

// One array (key kNpyArrayKey). Throws Error(kCorrupt) for a malformed header or a file shorter
// than the array, Error(kUnsupported) for a dtype trove has no type for (structured dtypes name
// their fields), Error(kRefused) for an object array unless options.pickle_policy is kPermissive,
// Error(kLimit) past kMaxNpyHeaderBytes. Errors name the file.
Document ReadNpy(std::shared_ptr<MappedFile> file, const ReadOptions& options);

// numpy.savez's layout: at least one entry, every one named `<name>.npy`.
bool IsNpzArchive(const ZipReader& zip);
// True when some member (read or refused) is named <name>.npy.
bool HoldsNpyMember(const ZipReader& zip);

// One array per member, keyed by the member's name without `.npy`; a name with '/' is a path of
// nested dicts ("a/b.npy" is `a/b`), unless a part is empty or another member's array sits where
// a folder would be: then the name is one key (`a%2Fb`) and the document warns. Where zip readers
// disagree the archive is refused unless kPermissive (then read as Python's zipfile reads it,
// with warnings). Errors name the file and the member.
Document ReadNpz(std::shared_ptr<const ZipReader> zip, const ReadOptions& options);

// Exactly one tensor (and no other value), as a C-order little-endian array numpy.load reads.
// Anything else is Error(kUnsupported) naming what the document holds; so is a dtype numpy has
// no type for (bfloat16, float8, complex32, quantized, meta tensors).
void WriteNpy(const Document& doc, const std::string& destination, const WriteOptions& options = {});

// A stored zip (numpy.savez's layout) with one `<key path>.npy` member per tensor (components
// decoded and joined by '/'). Values other than tensors are Error(kUnsupported) naming them.
void WriteNpz(const Document& doc, const std::string& destination, const WriteOptions& options = {});

// What numpy.load(allow_pickle=True) would run: an object array's pickle, scanned as any pickle
// (every global it names, graded); a plain array adds no finding. A header trove cannot read is a
// finding, not an error.
void ScanNpy(const MappedFile& file, CheckReport& report);
void ScanNpz(const ZipReader& zip, CheckReport& report);

}  // namespace trove
