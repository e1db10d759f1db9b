// cli/help_text.h: --help text that fits an 80-column terminal, for trove (CLI11) and presk data.
//
// Descriptions, footers and usage lines are written as one long line each; they are wrapped here
// at word boundaries, so that no command's help needs hand-placed line breaks and no line is
// wider than kHelpColumns. HelpFormatter is installed on trove's CLI11 app before its commands
// are added (subcommands take their parent's formatter). Pure functions and a stateless
// formatter; thread-safe.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <string>

namespace trove::cli {

// The width every help line fits in: the narrowest terminal people use (and what a pipe gets).
inline constexpr size_t kHelpColumns = 80;
// Where option and command descriptions start: left of it the option's name and its value.
inline constexpr size_t kHelpDescriptionColumn = 26;

// `text` with every line wider than `width` code points broken at spaces. A continued line is
// indented as far as where its first line's text starts after a run of two or more spaces (an
// option list: "  -o, --output F   the file", continued under "the"); else prose continues
// under itself, and a usage line or an indented example four columns in. A word wider than the
// room left stays whole on its own line; a bracketed part ("[--rank R --world-size W]") is one word.
std::string WrapHelpText(const std::string& text, size_t width = kHelpColumns);

// CLI11's formatter with descriptions in a column at kHelpDescriptionColumn, wrapped within
// kHelpColumns, and the command's description and footer wrapped alike.
class HelpFormatter : public CLI::Formatter {
 public:
  HelpFormatter() { column_width(kHelpDescriptionColumn); }
  std::string make_option(const CLI::Option* opt, bool is_positional) const override;
  std::string make_subcommand(const CLI::App* sub) const override;
  std::string make_description(const CLI::App* app) const override;
  std::string make_usage(const CLI::App* app, std::string name) const override;
  std::string make_footer(const CLI::App* app) const override;
};

}  // namespace trove::cli
