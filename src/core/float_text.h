// core/float_text.h: the one way trove writes a floating-point number as text.
//
// Every command's text and JSON output, key paths, diffs and presk's sample text go through
// these functions, so a number prints the same wherever it appears: the shortest decimal that
// reads back to exactly the same double (std::to_chars). The one other precision is for people
// reading tensor elements narrower than float64 (float32, float16, bfloat16, float8; a .psk.d
// f32 or bf16 leaf) as text: the shortest decimal that reads back to the same float32, which holds
// each of them exactly ("0.1" for the float32 nearest 0.1, as numpy prints it). JSON is read by
// programs as doubles, so it always gets the double's text (data == tensor.tolist()).
// The text always reads as a float, never as an integer: "1.0", "-0.0", "1e+20". Non-finite
// values are "nan", "inf" and "-inf" (Python's and numpy's spelling); JSON output tags them
// instead (cli/json_output.h). Stateless; thread-safe.
#pragma once

#include <string>

namespace trove {

void AppendFloatText(double value, std::string& out);
void AppendFloatText(float value, std::string& out);
std::string FloatText(double value);
std::string FloatText(float value);

// A complex number as Python writes one, with FloatText's parts: "(1.0+2.0j)", "(1.0-0.0j)".
std::string ComplexText(double re, double im);

// `significant` digits (1..17), for tables read by people ("0.1235", "1.235e+05"); non-finite
// values as FloatText. Never for output a program reads back.
std::string RoundedFloatText(double value, int significant);

}  // namespace trove
