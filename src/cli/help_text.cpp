#include "cli/help_text.h"

#include <sstream>
#include <string_view>
#include <vector>

#include "cli/table.h"

namespace trove::cli {
namespace {

// A continued line indented further than this keeps too little room: it gets its first line's
// indentation plus kContinuationIndent instead.
constexpr size_t kMaxHangingIndent = kHelpColumns / 2;
constexpr size_t kContinuationIndent = 4;

// The end of the word at `at`: the next space outside brackets, so that a usage line's optional
// part ("[--rank R --world-size W]") is never split.
size_t WordEnd(std::string_view line, size_t at) {
  int depth = 0;
  for (size_t i = at; i < line.size(); ++i) {
    if (line[i] == '[') ++depth;
    else if (line[i] == ']' && depth > 0) --depth;
    else if (line[i] == ' ' && depth == 0) return i;
  }
  return line.size();
}

size_t LeadingSpaces(std::string_view line) {
  const size_t n = line.find_first_not_of(' ');
  return n == std::string_view::npos ? line.size() : n;
}

// `line` (no newline) broken at spaces so that each piece fits `width` code points, the pieces
// after the first indented by `hang` spaces.
std::string WrapLine(std::string_view line, size_t width, size_t hang) {
  if (DisplayWidth(std::string(line)) <= width) return std::string(line);
  const size_t lead = LeadingSpaces(line);
  std::string out(line.substr(0, lead));
  size_t column = lead;
  bool first_word = true;
  for (size_t at = lead; at < line.size();) {
    const size_t end = WordEnd(line, at);
    // The spaces before this word as written (an aligned column keeps its padding).
    const size_t next = std::min(line.find_first_not_of(' ', end), line.size());
    const std::string word(line.substr(at, end - at));
    const size_t word_width = DisplayWidth(word);
    if (!first_word && column + word_width > width) {
      while (!out.empty() && out.back() == ' ') out.pop_back();
      out += '\n';
      out.append(hang, ' ');
      column = hang;
    }
    out += word;
    column += word_width;
    first_word = false;
    if (next > end && next < line.size()) {
      out.append(next - end, ' ');
      column += next - end;
    }
    at = next;
  }
  return out;
}

// Where a line's continuation goes (WrapHelpText's rule).
size_t HangingIndent(std::string_view line) {
  const size_t lead = LeadingSpaces(line);
  const size_t gap = line.find("  ", lead);
  if (gap != std::string_view::npos) {
    const size_t text = line.find_first_not_of(' ', gap);
    if (text != std::string_view::npos && text <= kMaxHangingIndent) return text;
  }
  // Prose continues under itself; a usage line or an indented example under its arguments.
  const bool usage = line.starts_with("usage:") || line.starts_with("Usage:");
  return lead == 0 && !usage ? 0 : lead + kContinuationIndent;
}

// "  NAME OPTS      description": the description in the column from `column`, wrapped within
// kHelpColumns, on the next line when the name leaves it no room.
std::string ColumnEntry(const std::string& left, const std::string& description, size_t column) {
  std::string out = left;
  const size_t room = kHelpColumns > column ? kHelpColumns - column : 1;
  bool first = true;
  std::string_view rest = description;
  if (description.empty()) return out + "\n";
  if (DisplayWidth(left) + 2 > column) out += "\n" + std::string(column, ' ');  // two spaces at least
  else out.append(column - DisplayWidth(left), ' ');
  while (true) {
    const size_t nl = rest.find('\n');
    const std::string_view piece = rest.substr(0, nl);
    if (!first) out += "\n" + std::string(column, ' ');
    std::string wrapped = WrapLine(piece, room, 0);
    for (size_t at = 0; (at = wrapped.find('\n', at)) != std::string::npos; at += column + 1)
      wrapped.insert(at + 1, column, ' ');
    out += wrapped;
    first = false;
    if (nl == std::string_view::npos) break;
    rest = rest.substr(nl + 1);
  }
  return out + "\n";
}

}  // namespace

std::string WrapHelpText(const std::string& text, size_t width) {
  std::string out;
  std::string_view rest = text;
  while (true) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    out += WrapLine(line, width, HangingIndent(line));
    if (nl == std::string_view::npos) break;
    out += '\n';
    rest = rest.substr(nl + 1);
  }
  return out;
}

std::string HelpFormatter::make_option(const CLI::Option* opt, bool is_positional) const {
  return ColumnEntry("  " + make_option_name(opt, is_positional) + make_option_opts(opt), make_option_desc(opt),
                     get_column_width());
}

std::string HelpFormatter::make_subcommand(const CLI::App* sub) const {
  return ColumnEntry("  " + sub->get_display_name(true), sub->get_description(), get_column_width());
}

std::string HelpFormatter::make_description(const CLI::App* app) const {
  return WrapHelpText(CLI::Formatter::make_description(app));
}

std::string HelpFormatter::make_usage(const CLI::App* app, std::string name) const {
  return WrapHelpText(CLI::Formatter::make_usage(app, std::move(name)));
}

std::string HelpFormatter::make_footer(const CLI::App* app) const {
  return WrapHelpText(CLI::Formatter::make_footer(app));
}

}  // namespace trove::cli
