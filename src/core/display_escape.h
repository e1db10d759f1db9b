// core/display_escape.h: the one rule for every byte from a file that reaches a terminal or a
// text output (issue #25; docs/security.md, "What trove prints").
//
// Names, keys, values and messages come from files. Shown raw, their control characters would act
// on the terminal (move the cursor, erase the line before, set the window title) and their
// bidirectional controls would reorder what is shown, so a file could rewrite what a person
// reads, down to hiding a scan's critical line. EscapeForDisplay replaces each such character by
// an escape in the notation of Python's string literals, which is also bash's $'...':
//
//   \n \t \r   newline, tab and carriage return
//   \xNN       every other C0 control (U+0000-U+001F) and DEL (U+007F); and a byte >= 0x80 that
//              is not part of valid UTF-8 (overlong forms, code points past U+10FFFF, cut sequences)
//   \uNNNN     a C1 control (U+0080-U+009F), a bidirectional mark, embedding, override or
//              isolate (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069), a line or
//              paragraph separator (U+2028, U+2029), a lone surrogate (U+D800-U+DFFF)
//   \\         a backslash (kName and kBytes)
//
// \xNN below 80 is a control character, \xNN from 80 a byte that is not UTF-8, \uNNNN a code
// point: with backslashes doubled, each escape reads back one way. Everything else (printable
// ASCII, valid UTF-8) is kept. Where the output is for programs (--json, cat --raw) nothing is
// escaped: JSON escapes what it must itself. Stateless functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace trove {

enum class DisplayEscape : uint8_t {
  // Text from a file shown as a whole (a key, an entry name, a path, a string's body): every
  // character above escaped, newline and tab included (a name stays on its line), and a
  // backslash doubled, so that what is shown spells one text only.
  kName,
  // A bytes value's body, as Python shows bytes: kName, and every byte >= 0x80 as \xNN.
  kBytes,
  // One line of trove's own text that holds names (an error message, a finding, a warning): as
  // kName, but a backslash is kept, for a name in it may have been escaped when it was put there.
  kLine,
  // trove's own lines as they are written out (the command line's last step): as kLine, with
  // newline and tab kept.
  kLines,
};

// `text` with every character the rule names escaped. `quote`, when not 0, is the quote a caller
// puts around the text (Python's repr: '\''); it is escaped with a backslash too.
std::string EscapeForDisplay(std::string_view text, DisplayEscape how = DisplayEscape::kName, char quote = 0);
void AppendEscapedForDisplay(std::string_view text, std::string& out, DisplayEscape how = DisplayEscape::kName,
                             char quote = 0);

// The code points past ASCII the rule shows as \uNNNN: C1 controls, the bidirectional controls
// that reorder text (marks, embeddings, overrides, isolates), the line and paragraph separators,
// lone surrogates. JSON output (cli/json_output.h) writes the same ones as JSON escapes.
bool EscapedCodePoint(uint32_t cp);

// How many bytes at the end of `text` (0 to 3) start a UTF-8 sequence that is not complete yet
// but may be completed by what follows: a writer that gets text in pieces holds them back.
size_t IncompleteUtf8Tail(std::string_view text);

}  // namespace trove
