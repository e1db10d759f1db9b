// formats/gguf/gguf_format.h: GGUF files (llama.cpp, ggml, ollama) as trove documents
// (docs/gguf.md).
//
// A GGUF file is a header, typed metadata, tensor infos and the tensors' bytes (the layout is
// written out in gguf_layout.h). The reader parses and checks everything but the tensors' bytes
// and returns a Document whose tensors view the mapping: float and integer types as ordinary
// tensors, ggml's block-quantized types as their raw blocks in a dtype naming the type (one byte
// per element; trove/dtype.h). Shapes are in PyTorch's order (ggml's ne reversed). Metadata
// becomes the document's properties (a summary first, then every key). Functions are
// thread-safe (no shared state); documents follow trove/document.h.
#pragma once

#include <memory>

#include "trove/document.h"
#include "trove/findings.h"
#include "trove/shared_bytes.h"

namespace trove {

// True when `head` starts like a GGUF file.
bool LooksLikeGguf(std::string_view head);

// Throws what gguf::ParseGguf throws (the field, its offset and the limit), named by the file.
Document ReadGguf(std::shared_ptr<MappedFile> file, const ReadOptions& options);

// What reading does not refuse but a careful loader would want to know: bytes after the last
// tensor or between tensors beyond their padding, a missing general.architecture, quantized
// tensors without general.quantization_version, the July 2023 draft layout. A file that does
// not parse is a finding (the error: field, offset, limit).
void VerifyGguf(const MappedFile& file, CheckReport& report);

// Jinja in metadata (tokenizer.chat_template and any string that looks like a template), flagged
// high when its code reaches what chat templates never use: dunder attributes, cycler, joiner,
// lipsum, namespace attributes, import, os, popen, eval and their kin. A file that does not
// parse is a finding.
void ScanGguf(const MappedFile& file, CheckReport& report);

}  // namespace trove
