// formats/pskd/pskd_checks.h: trove verify of a .psk.d, as presk data checks it.
//
// The same checks presk data makes (pskd::PskdFile: the header, sizes and count, then every
// index below its bound), so that verify and presk give one verdict on every file. Thread-safe.
#pragma once

#include <memory>

#include "trove/shared_bytes.h"

#include "trove/findings.h"

namespace trove {

// Adds a finding for what presk data refuses.
void VerifyPskdFile(CheckReport& report, const std::shared_ptr<MappedFile>& file);

}  // namespace trove
