// The legacy_tar_fuzz fuzz target's entry point, compiled under its own name so that the regression test
// (fuzz_regressions_test.cpp) feeds saved inputs to exactly the code the fuzzer ran.
#define LLVMFuzzerTestOneInput TroveFuzzEntry_legacy_tar_fuzz
#include "../../fuzz/legacy_tar_fuzz.cpp"
#undef LLVMFuzzerTestOneInput
