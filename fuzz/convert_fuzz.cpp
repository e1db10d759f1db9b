// libFuzzer target for the writers: the input is a pickle, wrapped as the data.pkl of a .pt
// (fuzz/pickle_in_pt.h) and read into a Document (strict, default and permissive policies); every writer then
// writes it into a scratch directory — .pt, a tensordict directory, .tdz, .psk.d — and what was
// written is read back and compared with its source. Value trees of any shape (deep, shared,
// cyclic, odd keys) reach every writer's tree walk this way.
// A trove::Error (a clean refusal) is an expected outcome; a crash, sanitizer report, leak or
// hang is a finding.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "pickle_in_pt.h"
#include "trove/convert.h"
#include "trove/diff.h"
#include "trove/error.h"
#include "trove/open.h"
#include "scratch_path.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  static const fs::path dir = fs::path(trove_fuzz::ScratchPath("convert-fuzz"));
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  const std::string source = (dir / "in.pt").string();
  if (!trove_fuzz::WritePickleAsPt(source, data, size)) return 0;
  for (trove::PicklePolicy policy :
       {trove::PicklePolicy::kStrict, trove::PicklePolicy::kDefault, trove::PicklePolicy::kPermissive}) {
    trove::ConvertOptions options;
    options.read.pickle_policy = policy;
    trove::Document doc;
    try {
      doc = trove::Open(source, options.read);
    } catch (const trove::Error&) {
      continue;
    }
    struct Output {
      const char* name;
      trove::Format format;
    };
    for (const Output& out : {Output{"out.pt", trove::Format::kPt}, Output{"out.tdz", trove::Format::kTdz},
                              Output{"out-dir", trove::Format::kTensordictDir}, Output{"out.psk.d", trove::Format::kPskd}}) {
      const std::string destination = (dir / out.name).string();
      try {
        trove::ConvertOptions o = options;
        o.keep_unknown = out.format == trove::Format::kPt;  // objects of unknown classes written back
        trove::ConvertDocument(doc, destination, out.format, o);
        trove::DiffOptions diff;
        diff.read = options.read;
        (void)trove::Diff(doc, trove::Open(destination, options.read), diff);
      } catch (const trove::Error&) {
      }
    }
  }
  fs::remove_all(dir, ec);
  return 0;
}
