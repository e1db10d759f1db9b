// The `trove` command: one CLI11 app, each area adding its subcommands (cli/commands.h).
#include <CLI/CLI.hpp>
#include <sys/resource.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string_view>

#include "cli/commands.h"
#include "cli/escaped_output.h"
#include "cli/help_text.h"
#include "cli/json_output.h"
#include "cli/pager.h"
#include "cli/suggest.h"
#include "core/display_escape.h"
#include "trove/threads.h"
#include "trove/io_mode.h"
#include "trove/error.h"
#include "trove/open.h"
#include "trove/version.h"
#include "trove/shared_bytes.h"

namespace trove::cli {

bool StdoutIsTerminal() { return ::isatty(StdoutTerminalFd()) == 1; }

// The most malloc arenas the process makes (see SetUpProcess).
constexpr int kMallocArenas = 4;

void SetUpProcess() {
  InstallWriteSignalHandlers();
  // A checkpoint of thousands of shards, or a dataset of thousands of files, must not fail with
  // "Too many open files" under the default soft limit (1,024) when the hard limit allows more:
  // the library keeps descriptors bounded, and this leaves the rest of the budget to it.
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  // glibc gives each thread that allocates at once an arena of its own, up to 8 per CPU, each
  // reserving 64 MiB of address space (128 MiB while it is made): 16 of them on 2 CPUs are a
  // gigabyte, which a run under an address-space limit (ulimit -v, as batch systems and the
  // hostile-input tests set) runs out of with --threads 32. trove's threads allocate a few buffers
  // each, not in loops, so a few shared arenas cost nothing measurable.
  ::mallopt(M_ARENA_MAX, kMallocArenas);
}

void AddNoPagerFlag(CLI::App* command, bool& no_pager) {
  command->add_flag("--no-pager", no_pager,
                    "Print to the terminal directly (output taller than the terminal otherwise goes through "
                    "$TROVE_PAGER, $PAGER or less)");
}

void AddPolicyFlags(CLI::App* command, PolicyFlags& flags) {
  auto* strict = command->add_flag("--strict", flags.strict,
                                   "Refuse every pickle global without a known data meaning (not only the dangerous ones)");
  command->add_flag("--permissive", flags.permissive,
                    "Read even dangerous pickle globals as inert objects (and zip archives readers disagree on), "
                    "never run")
      ->excludes(strict);
}

const CLI::Validator& ThreadCountCheck() {
  // Runs on the word before CLI11 converts it, so that "-1" or "many" get this message rather
  // than the parser's "Could not convert".
  static const CLI::Validator check(
      [](const std::string& word) -> std::string {
        const bool digits = !word.empty() && word.size() <= 9 &&
                            word.find_first_not_of("0123456789") == std::string::npos;
        if (digits) return {};
        return "takes a whole number of threads: 0 (every CPU this process may use) or 1 to " +
               std::to_string(kMaxThreads) + " (more are cut to " + std::to_string(kMaxThreads) + "), not '" +
               EscapeForDisplay(word, DisplayEscape::kLine) + "'";
      },
      "");
  return check;
}

void AddThreadsOption(CLI::App* command) {
  command->add_option_function<uint32_t>("--threads", [](const uint32_t& n) { SetThreadCount(n); },
                                         "Threads to use (default: every CPU this process may use)")
      ->check(ThreadCountCheck());
}

CLI::Validator WholeNumberCheck(uint64_t least, uint64_t most) {
  return CLI::Validator(
      [least, most](const std::string& word) -> std::string {
        uint64_t value = 0;
        const char* end = word.data() + word.size();
        // from_chars takes digits only: no sign, no space; "" and overflow are errors.
        const auto [at, ec] = std::from_chars(word.data(), end, value);
        if (ec == std::errc() && at == end && value >= least && value <= most) return {};
        return "takes a whole number from " + std::to_string(least) + " to " + std::to_string(most) + ", not '" +
               EscapeForDisplay(word, DisplayEscape::kLine) + "'";
      },
      "");
}

const CLI::Validator& ToleranceCheck() {
  static const CLI::Validator check(
      [](const std::string& word) -> std::string {
        double value = 0;
        const char* end = word.data() + word.size();
        const auto [at, ec] = std::from_chars(word.data(), end, value);
        if (!word.empty() && ec == std::errc() && at == end && std::isfinite(value) && value >= 0) return {};
        return "takes a finite number, 0 or more, not '" + EscapeForDisplay(word, DisplayEscape::kLine) + "'";
      },
      "");
  return check;
}

const CLI::Validator& NonEmptyCheck() {
  static const CLI::Validator check(
      [](const std::string& word) -> std::string { return word.empty() ? "takes a value, not ''" : std::string(); }, "");
  return check;
}

void AddIoOption(CLI::App* command) {
  static const CLI::Validator check(
      [](const std::string& word) -> std::string {
        if (ParseIoMode(word)) return {};
        return "takes auto, mmap or pread, not '" + EscapeForDisplay(word, DisplayEscape::kLine) + "'";
      },
      "auto|mmap|pread");
  command
      ->add_option_function<std::string>("--io", [](const std::string& word) { SetIoMode(*ParseIoMode(word)); },
                                         "How file bytes are read: mmap (page faults on a mapping), pread (large "
                                         "reads with read-ahead), auto (default: pread on network and FUSE file "
                                         "systems, mmap elsewhere)")
      ->check(check);
}

Document OpenWarning(const std::string& path, const ReadOptions& options) {
  Document doc = Open(path, options);
  const std::vector<UnknownObject> unknown = FindUnknownObjects(doc);
  if (!unknown.empty()) {
    std::cerr << "trove: warning: " << EscapeForDisplay(path) << ": " << unknown.size()
              << (unknown.size() == 1 ? " object" : " objects") << " of classes trove does not know, read as inert data "
              << "(nothing run): " << UnknownClassesText(unknown) << '\n';
  }
  return doc;
}

namespace {

std::vector<std::string> CommandNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  return names;
}

std::vector<std::string> OptionNames(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* o : command.get_options()) {
    for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
    for (const std::string& n : o->get_snames()) names.push_back("-" + n);
  }
  return names;
}

// The subcommand the words named, or nullptr (the command line's own usage error).
const CLI::App* ParsedCommand(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) return sub;
  return nullptr;
}

// A usage error: what is wrong, a suggestion for a misspelt option, and the command's own help.
int UsageError(const CLI::App& app, const CLI::ParseError& e) {
  const CLI::App* command = ParsedCommand(app);
  std::string hint;
  if (command != nullptr) {
    for (const std::string& extra : command->remaining()) {
      if (extra.starts_with("-")) hint += DidYouMean(Suggest(extra.substr(0, extra.find('=')), OptionNames(*command)));
    }
  }
  std::cerr << "trove: error: " << EscapeForDisplay(e.what(), DisplayEscape::kLine) << hint << "\n(run 'trove "
            << (command != nullptr ? command->get_name() + " " : std::string()) << "--help' for usage)\n";
  return kExitError;
}

// Each area's Add function and the commands it adds, in the order `trove --help` lists them. A
// constant table: nothing is built before main.
struct CommandArea {
  AddCommandsFunction add;
  std::array<std::string_view, 4> commands;  // unused places empty
};
constexpr std::array<CommandArea, 6> kCommandAreas{{
    {AddInspectCommands, {"info", "cat", "verify", "scan"}},
    {AddTensordictCommands, {"pack", "unpack", "refresh-checksums"}},
    {AddConvertCommands, {"convert", "diff"}},
    {AddStatsCommands, {"stats"}},
    {AddReportCommands, {"report"}},
    {AddGgufCommands, {"gguf"}},
}};

}  // namespace

AddCommandsFunction AreaOfCommand(std::string_view command) {
  if (command.empty()) return nullptr;
  for (const CommandArea& a : kCommandAreas) {
    if (std::find(a.commands.begin(), a.commands.end(), command) != a.commands.end()) return a.add;
  }
  return nullptr;
}

void AddAllCommands(CLI::App& app, int* exit_code) {
  for (const CommandArea& a : kCommandAreas) a.add(app, exit_code);
}

int TroveMain(int argc, char** argv) {
  const EscapedStandardStreams escaped_output;
  // `trove data ...` is `presk data ...`: hand the words over untouched.
  if (argc >= 2 && std::string(argv[1]) == "data") {
    std::vector<std::string> args(argv + 2, argv + argc);
    return RunPreskData(args);
  }
  CLI::App app{"trove: inspect, read, verify, convert and write ML tensor containers: PyTorch "
               ".pt/.pth/.bin/.ckpt, safetensors (and sharded), GGUF, numpy .npy/.npz, tensordict "
               "directories and .tdz archives, .psk.d files, and training checkpoints read as one "
               "(torch.distributed.checkpoint, DeepSpeed ZeRO, FSDP).\n"
               "Nothing in a file is ever executed."};
  app.name("trove");
  // Before the commands are added: each takes its parent's formatter.
  app.formatter(std::make_shared<HelpFormatter>());
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
  // Building a command's options and checks costs start-up time that `trove info` should not pay
  // for every other command: a command line naming a command builds only its area. Anything else
  // (--help, help, a misspelt command) builds them all, so that the listing and the suggestions
  // see every command.
  if (const AddCommandsFunction area = argc >= 2 ? AreaOfCommand(argv[1]) : nullptr) {
    area(app, &exit_code);
  } else {
    AddAllCommands(app, &exit_code);
  }
  app.add_subcommand("data", "The presk data commands (.psk.d files): trove data --help");
  app.add_subcommand("help", "Show the help of trove or of one command: trove help CMD");
  if (argc >= 2 && argv[1][0] != '-') {
    const std::string word = argv[1];
    const std::vector<std::string> commands = CommandNames(app);
    if (std::find(commands.begin(), commands.end(), word) == commands.end()) {
      std::cerr << "trove: error: unknown command '" << EscapeForDisplay(word) << "'" << DidYouMean(Suggest(word, commands))
                << "\n(run 'trove --help' for the commands)\n";
      return kExitError;
    }
    if (word == "help") {
      if (argc == 2) {
        std::cout << app.help();
        return kExitOk;
      }
      const std::string topic = argv[2];
      if (topic == "data") return RunPreskData({"--help"});
      for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
        if (sub->get_name() == topic && topic != "help") {
          std::cout << sub->help("trove");
          return kExitOk;
        }
      }
      std::cerr << "trove: error: no command '" << EscapeForDisplay(topic) << "'" << DidYouMean(Suggest(topic, commands))
                << "\n(run 'trove --help' for the commands)\n";
      return kExitError;
    }
  }
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
    return UsageError(app, e);
  } catch (const Error& e) {
    if (const CLI::App* command = ParsedCommand(app)) {
      const CLI::Option* json = command->get_option_no_throw("--json");
      if (json != nullptr && json->count() > 0) PrintJson(std::cout, ErrorJson(command->get_name(), e));
    }
    std::cout.flush();
    std::fflush(stdout);
    std::cerr << "trove: error: " << e.DisplayMessage() << '\n';
    return ExitStatusAfterSignals(kExitError);
  } catch (const std::bad_alloc&) {
    std::cerr << "trove: error: out of memory\n";
    return kExitError;
  } catch (const std::exception& e) {
    std::cerr << "trove: error: " << EscapeForDisplay(e.what(), DisplayEscape::kLine) << '\n';
    return ExitStatusAfterSignals(kExitError);
  }
  return ExitStatusAfterSignals(exit_code);
}

}  // namespace trove::cli
