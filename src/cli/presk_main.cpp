#include "cli/commands.h"

int main(int argc, char** argv) {
  trove::cli::SetUpProcess();
  return trove::cli::PreskMain(argc, argv);
}
