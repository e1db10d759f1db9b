#include "formats/pskd/text_output.h"

#include <cstdio>

#include "trove/error.h"

namespace trove::pskd {

TextOutput::TextOutput(const std::string& path) {
  if (path != kStdoutPath) file_.emplace(path);
}

void TextOutput::Write(const void* data, uint64_t size) {
  if (file_) {
    file_->Write(data, size);
    return;
  }
  if (size > 0 && std::fwrite(data, 1, size, stdout) != size) Fail(ErrorCode::kIo, "writing to stdout failed");
}

void TextOutput::Commit() {
  if (file_) {
    file_->Commit();
    return;
  }
  if (std::fflush(stdout) != 0) Fail(ErrorCode::kIo, "writing to stdout failed");
}

}  // namespace trove::pskd
