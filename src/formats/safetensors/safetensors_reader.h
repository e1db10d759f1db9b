// formats/safetensors/safetensors_reader.h: the safetensors reader in parts, for readers that
// do not map a file to read its header (a sharded checkpoint maps each shard only when a tensor's
// bytes are first read). Thread-safe, as trove/safetensors.h.
#pragma once

#include <cstdint>
#include <string>

#include "trove/document.h"
#include "trove/shared_bytes.h"

namespace trove {

// The header length a file's first 8 bytes give, checked against kMaxSafetensorsHeaderBytes and
// the file's size (Error(kLimit/kCorrupt) otherwise). file_size >= 8 unless it fails.
uint64_t SafetensorsHeaderLength(const uint8_t* first8, uint64_t file_size);

// ReadSafetensors from parts: `head` holds the file's first 8 + header-length bytes, `whole` is
// the whole file of `size` bytes (a mapping, or a lazy one: only the views' bytes come from it).
Document ReadSafetensorsParts(const std::string& path, uint64_t size, const uint8_t* head, const SharedBytes& whole,
                              const ReadOptions& options);

}  // namespace trove
