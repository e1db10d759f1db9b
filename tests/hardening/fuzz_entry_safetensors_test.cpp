// The safetensors_fuzz fuzz target's entry point, compiled under its own name so that the regression test
// (fuzz_regressions_test.cpp) feeds saved inputs to exactly the code the fuzzer ran.
#define LLVMFuzzerTestOneInput TroveFuzzEntry_safetensors_fuzz
#include "../../fuzz/safetensors_fuzz.cpp"
#undef LLVMFuzzerTestOneInput
