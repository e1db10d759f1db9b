// libFuzzer target for what shows a value tree: key encoding, `trove info` (text and --json),
// `trove diff` of a file with itself, `trove scan --json`. The input is a pickle, wrapped as the
// data.pkl of a .pt (fuzz/pickle_in_pt.h) and run through the real command line with stdout
// discarded (std::cout into a string, and file descriptor 1, which `cat` writes through stdio,
// onto /dev/null); the same pickle, loaded by the permissive data-only VM without any reader's checks,
// is also described and turned into JSON directly (a library user may print any tree).
// A crash, sanitizer report, leak or hang is a finding; error exits are expected.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/json_output.h"
#include "cli/value_printer.h"
#include "pickle_in_pt.h"
#include "trove/document.h"
#include "trove/error.h"
#include "trove/unpickler.h"
#include "scratch_path.h"

namespace {

void RunTrove(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream sink, errors;
  std::streambuf* out = std::cout.rdbuf(sink.rdbuf());
  std::streambuf* err = std::cerr.rdbuf(errors.rdbuf());
  (void)trove::cli::TroveMain(static_cast<int>(argv.size()), argv.data());
  std::cout.rdbuf(out);
  std::cerr.rdbuf(err);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // libFuzzer reports on stderr; what the commands write to stdout is noise at every run.
  const int null = ::open("/dev/null", O_WRONLY);
  if (null >= 0) {
    ::dup2(null, STDOUT_FILENO);
    ::close(null);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = trove_fuzz::ScratchPath("print-fuzz", ".pt");
  if (trove_fuzz::WritePickleAsPt(path, data, size)) {
    for (const char* permissive : {"", "--permissive"}) {
      std::vector<std::string> info{"trove", "info", path};
      if (*permissive) info.push_back(permissive);
      RunTrove(info);
      info.push_back("--json");
      RunTrove(info);
    }
    RunTrove({"trove", "diff", path, path});
    RunTrove({"trove", "scan", path, "--json"});
    RunTrove({"trove", "scan", path});
    RunTrove({"trove", "cat", path, "**", "--json"});
  }
  trove::ValueArena arena;
  trove::DataResolver resolver(trove::PicklePolicy::kPermissive);
  trove::Unpickler unpickler(data, size, arena, resolver);
  try {
    const trove::Value* root = unpickler.Load();
    (void)trove::cli::DescribeValues(root, 200);
    (void)trove::cli::DescribeValues(root, 200, /*summarize_lists=*/true);
    (void)trove::cli::DumpJson(trove::cli::ValueJson(root));
    (void)trove::cli::DumpJson(trove::cli::ValueJson(root, {SIZE_MAX, SIZE_MAX}), -1);
    trove::ForEachLeaf(root, [](const std::string& key, const trove::Value& leaf) {
      (void)trove::cli::ScalarText(leaf);
      (void)key;
    });
  } catch (const trove::Error&) {
  }
  return 0;
}
