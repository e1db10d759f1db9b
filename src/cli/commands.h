// cli/commands.h: the command-line front ends and how command areas plug into them.
//
// TroveMain builds one CLI11 app; each area adds its subcommands with an Add*Commands function
// whose callbacks do the work and store the exit status in *exit_code. A trove::Error escaping a
// callback is printed as "trove: error: <message>" on stderr and the process exits 2.
// Exit status for every command: 0 success, 1 findings (verify, scan, diff, stats --check-finite), 2 any error.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "trove/atomic_file.h"
#include "trove/document.h"

namespace CLI {
class App;
class Validator;
}

namespace trove::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFindings = 1;
inline constexpr int kExitError = 2;

// The commands, callable in-process (the fuzz targets do). What is the process's own to set up,
// the signal handlers that let a killed write clean up and the descriptor limit, is done by
// SetUpProcess, which each executable's main() calls first: a host process (libFuzzer, whose
// per-input timeout is its SIGALRM handler) keeps its own.
void SetUpProcess();
int TroveMain(int argc, char** argv);
int PreskMain(int argc, char** argv);

// Areas. Each adds subcommands to `app`.
void AddInspectCommands(CLI::App& app, int* exit_code);     // info, cat, verify, scan (cli/inspect_commands.cpp)
void AddTensordictCommands(CLI::App& app, int* exit_code);  // pack, unpack, refresh-checksums (cli/tensordict_commands.cpp)
void AddConvertCommands(CLI::App& app, int* exit_code);     // convert, diff (cli/convert_commands.cpp)
void AddStatsCommands(CLI::App& app, int* exit_code);       // stats (cli/stats_commands.cpp)
void AddReportCommands(CLI::App& app, int* exit_code);      // report (cli/report_commands.cpp)
void AddGgufCommands(CLI::App& app, int* exit_code);        // gguf set, gguf del (cli/gguf_commands.cpp)

// Every area's commands, in the order `trove --help` lists them (cli/trove_cli.cpp).
void AddAllCommands(CLI::App& app, int* exit_code);
// The Add function of the area that adds `command` (a top-level command's name), or nullptr for
// any other word. TroveMain builds only that area when the command line names a command: the
// others' options and checks would cost start-up time for nothing.
using AddCommandsFunction = void (*)(CLI::App& app, int* exit_code);
AddCommandsFunction AreaOfCommand(std::string_view command);

// `presk data ...` and `trove data ...`: args are the words after "data". Returns the exit status.
// Errors print "presk data: error[E900x]: ..." on stderr (cli/presk_data.cpp).
int RunPreskData(const std::vector<std::string>& args);

// The writing commands' --sync (Durability::kDurable in trove/atomic_file.h).
inline Durability DurabilityFromSyncFlag(bool sync) { return sync ? Durability::kDurable : Durability::kReplaceSafe; }
inline constexpr const char* kSyncFlagHelp =
    "Make the output durable before it appears (fsync): it then survives a power loss, at the disk's speed. "
    "Without it a new output is written as cp writes it; an existing one is always replaced safely";


// A signal during a write (trove/atomic_file.h) ends the command with 128 + the signal, whatever
// the command then reported.
inline int ExitStatusAfterSignals(int status) {
  const int sig = InterruptSignal();
  return sig != 0 ? 128 + sig : status;
}

// --strict / --permissive: the pickle policy of a command that reads files (PicklePolicy in
// trove/document.h, docs/security.md); neither is the default policy.
struct PolicyFlags {
  bool strict = false;
  bool permissive = false;
  PicklePolicy policy() const {
    return strict ? PicklePolicy::kStrict : permissive ? PicklePolicy::kPermissive : PicklePolicy::kDefault;
  }
};
void AddPolicyFlags(CLI::App* command, PolicyFlags& flags);
// `--threads N`: the process's worker thread count (trove/threads.h), set as the option is parsed.
void AddThreadsOption(CLI::App* command);
// The check of a thread count option's word (AddThreadsOption, stats' own --threads): a whole
// number, or the option's name, the allowed range and the word in the usage error.
const CLI::Validator& ThreadCountCheck();
// The check of a whole-number option's word, before CLI11 converts it (which takes "-1" for an
// unsigned option as 2^64 - 1 and cuts what is too large to the largest): decimal digits only,
// from `least` to `most`.
CLI::Validator WholeNumberCheck(uint64_t least, uint64_t most);
// A tolerance (diff's --rtol, --atol): a finite number, 0 or more.
const CLI::Validator& ToleranceCheck();
// A text option given an empty value (`--dtype ''`) is a usage error, not the option left out.
const CLI::Validator& NonEmptyCheck();
// `--io auto|mmap|pread`: the process's I/O mode for input files (trove/io_mode.h), set as the
// option is parsed. For the commands that stream every tensor's bytes.
void AddIoOption(CLI::App* command);
// trove::Open, then, when the document holds objects of classes trove does not know (read as
// inert data), one line on stderr naming the classes: "trove: warning: PATH: ...".
Document OpenWarning(const std::string& path, const ReadOptions& options);

// `--no-pager`: the command's output is not paged (cli/pager.h) even when taller than the terminal.
void AddNoPagerFlag(CLI::App* command, bool& no_pager);

// True when stdout is a terminal (aligned, coloured-free tables); false for pipes and files.
// While a pager captures stdout (cli/pager.h), true of the terminal it pages to.
bool StdoutIsTerminal();

}  // namespace trove::cli
