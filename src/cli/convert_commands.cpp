// trove convert / diff (issue 5). Registered here so the command table stays in one place.
#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace trove::cli {

void AddConvertCommands(CLI::App&, int*) {}

}  // namespace trove::cli
