// The table TroveMain builds commands from (AreaOfCommand): every command `trove --help` lists
// is found in its area, and a command line naming a command builds that area alone.
#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "cli/commands.h"

namespace trove::cli {
namespace {

TEST(CommandAreasTest, EveryCommandIsBuiltByItsAreaAlone) {
  int exit_code = kExitOk;
  CLI::App all;
  AddAllCommands(all, &exit_code);
  const auto every = all.get_subcommands([](const CLI::App*) { return true; });
  ASSERT_GE(every.size(), 10u);
  for (const CLI::App* command : every) {
    const std::string name = command->get_name();
    const AddCommandsFunction area = AreaOfCommand(name);
    ASSERT_NE(area, nullptr) << name << " is missing from kCommandAreas (cli/trove_cli.cpp)";
    CLI::App alone;
    area(alone, &exit_code);
    const auto built = alone.get_subcommands([](const CLI::App*) { return true; });
    EXPECT_EQ(std::count_if(built.begin(), built.end(), [&](const CLI::App* c) { return c->get_name() == name; }), 1) << name;
    EXPECT_LT(built.size(), every.size()) << name;
  }
}

TEST(CommandAreasTest, OtherWordsBuildEveryArea) {
  for (const char* word : {"", "help", "data", "--help", "--version", "infos", "set", "del"}) {
    EXPECT_EQ(AreaOfCommand(word), nullptr) << word;
  }
}

}  // namespace
}  // namespace trove::cli
