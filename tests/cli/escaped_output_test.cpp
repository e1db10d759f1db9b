// The command line's text for people: tables escape their cells (and measure the escaped text),
// and EscapedStandardStreams escapes whatever reaches std::cout and std::cerr while JSON and
// trove's own terminal control pass exactly.
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>
#include <string>

#include "cli/escaped_output.h"
#include "cli/table.h"

namespace trove::cli {
namespace {

TEST(Table, CellsAreEscapedAndMeasuredAsShown) {
  Table t({"key", "dtype"});
  t.Add({"a\tb\nc\x1b[2J", "uint8"});
  t.Add({"r\xE2\x80\xAEx", "float32"});
  std::ostringstream aligned, tsv;
  t.Print(aligned, true);
  t.Print(tsv, false);
  // The escaped key is 14 characters wide: the column after it starts at 14 + 2.
  EXPECT_EQ(aligned.str(),
            "  key             dtype\n"
            "  a\\tb\\nc\\x1b[2J  uint8\n"
            "  r\\u202ex        float32\n");
  EXPECT_EQ(tsv.str(), "key\tdtype\na\\tb\\nc\\x1b[2J\tuint8\nr\\u202ex\tfloat32\n");
}

// Runs `body` with std::cout and std::cerr captured and the escaping installed over them.
template <class F>
std::pair<std::string, std::string> Captured(F body) {
  std::ostringstream out, err;
  std::streambuf* cout_buf = std::cout.rdbuf(out.rdbuf());
  std::streambuf* cerr_buf = std::cerr.rdbuf(err.rdbuf());
  {
    const EscapedStandardStreams escaped;
    body();
  }
  std::cout.rdbuf(cout_buf);
  std::cerr.rdbuf(cerr_buf);
  return {out.str(), err.str()};
}

TEST(EscapedStandardStreams, EscapesWhatReachesCoutAndCerrButLines) {
  const auto [out, err] = Captured([] {
    std::cout << "key\tk\x1b]0;title\x07 \r\x1b[2K\n" << "next \xC2\x9B" << '\n';
    std::cerr << "trove: error: bad \xFF \xE2\x80\xAE\n";
  });
  EXPECT_EQ(out, "key\tk\\x1b]0;title\\x07 \\r\\x1b[2K\nnext \\u009b\n");
  EXPECT_EQ(err, "trove: error: bad \\xff \\u202e\n");
}

TEST(EscapedStandardStreams, ASequenceSplitAcrossWritesIsKeptWhole) {
  const auto [out, err] = Captured([] {
    std::cout << "\xC3";
    std::cout << "\xA9 \xE2\x80";
    std::cout << "\xAE \xE2";
  });
  // é whole, U+202E escaped whole, and a sequence never finished escaped at the end.
  EXPECT_EQ(out, "\xC3\xA9 \\u202e \\xe2");
  EXPECT_EQ(err, "");
}

TEST(EscapedStandardStreams, JsonAndTerminalControlPassExactly) {
  const auto [out, err] = Captured([] {
    std::cout << "a\x7f\n";
    ExactStdout() << "{\"key\": \"a\x7f\xE2\x80\xAE\"}\n";
    ExactStderr() << "\r\033[K";
  });
  EXPECT_EQ(out, "a\\x7f\n{\"key\": \"a\x7f\xE2\x80\xAE\"}\n");
  EXPECT_EQ(err, "\r\033[K");
  // Without the escaping installed, the exact streams are the standard ones.
  EXPECT_EQ(&ExactStdout(), &std::cout);
  EXPECT_EQ(&ExactStderr(), &std::cerr);
}

}  // namespace
}  // namespace trove::cli
