// The `trove` command: one CLI11 app, each area adding its subcommands (cli/commands.h).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "trove/error.h"
#include "trove/version.h"
#include "trove/shared_bytes.h"

namespace trove::cli {

bool StdoutIsTerminal() { return ::isatty(STDOUT_FILENO) == 1; }

int TroveMain(int argc, char** argv) {
  InstallWriteSignalHandlers();
  // `trove data ...` is `presk data ...`: hand the words over untouched.
  if (argc >= 2 && std::string(argv[1]) == "data") {
    std::vector<std::string> args(argv + 2, argv + argc);
    return RunPreskData(args);
  }
  CLI::App app{"trove: inspect, read, verify, convert and write ML tensor containers\n"
               "(PyTorch .pt/.pth/.bin/.ckpt, tensordict directories and .tdz archives, .psk.d files).\n"
               "Nothing in a file is ever executed."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("trove ") + kVersion);
  app.footer(
      "Examples:\n"
      "  trove info model.pt                 format, records, tensors, values (metadata only)\n"
      "  trove cat model.pt lin.weight --json\n"
      "  trove verify model.pt               CRCs, bounds, sizes (exit 1 on problems)\n"
      "  trove scan model.pt                 security report (exit 1 on findings)\n"
      "  trove stats model.pt                min, max, mean, std, NaN/Inf per tensor (--check-finite)\n"
      "  trove report model.pt -o r.html     one HTML page: treemap, figures, histograms, values\n"
      "  trove data info tokens.psk.d        the presk data commands\n"
      "Exit status: 0 success, 1 findings (verify, scan, diff, stats --check-finite), 2 error.");
  int exit_code = kExitOk;
  AddInspectCommands(app, &exit_code);
  AddTensordictCommands(app, &exit_code);
  AddConvertCommands(app, &exit_code);
  AddStatsCommands(app, &exit_code);
  AddReportCommands(app, &exit_code);
  app.add_subcommand("data", "The presk data commands (.psk.d files): trove data --help");
  try {
    // Every command reads mapped files: one shrinking under it is an error, not a SIGBUS death.
    RunGuardingTruncation([&] { app.parse(argc, argv); });
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "trove: error: " << e.what() << "\n(run 'trove --help' for usage)\n";
    return kExitError;
  } catch (const Error& e) {
    std::fflush(stdout);
    std::cerr << "trove: error: " << e.message() << '\n';
    return ExitStatusAfterSignals(kExitError);
  } catch (const std::bad_alloc&) {
    std::cerr << "trove: error: out of memory\n";
    return kExitError;
  } catch (const std::exception& e) {
    std::cerr << "trove: error: " << e.what() << '\n';
    return ExitStatusAfterSignals(kExitError);
  }
  return ExitStatusAfterSignals(exit_code);
}

}  // namespace trove::cli
