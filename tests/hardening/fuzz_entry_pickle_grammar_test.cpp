// The pickle_grammar_fuzz fuzz target's entry point, compiled under its own name so that the
// regression test (fuzz_regressions_test.cpp) feeds saved inputs to exactly the code the fuzzer
// ran. The structure-aware mutator needs libFuzzer and stays out of this build.
#define LLVMFuzzerTestOneInput TroveFuzzEntry_pickle_grammar_fuzz
#define TROVE_FUZZ_ENTRY_ONLY
#include "../../fuzz/pickle_grammar_fuzz.cpp"
#undef TROVE_FUZZ_ENTRY_ONLY
#undef LLVMFuzzerTestOneInput
