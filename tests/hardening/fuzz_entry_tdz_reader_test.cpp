// The tdz_reader_fuzz fuzz target's entry point, compiled under its own name so that the regression test
// (fuzz_regressions_test.cpp) feeds saved inputs to exactly the code the fuzzer ran.
#define LLVMFuzzerTestOneInput TroveFuzzEntry_tdz_reader_fuzz
#include "../../fuzz/tdz_reader_fuzz.cpp"
#undef LLVMFuzzerTestOneInput
