#include "cli/commands.h"

int main(int argc, char** argv) { return trove::cli::PreskMain(argc, argv); }
