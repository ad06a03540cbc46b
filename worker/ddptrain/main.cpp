// ddptrain: the reference data-parallel trainer. See README.md ("The main
// job") and `ddptrain --help`. Meant to run under ddplaunch; alone it trains
// as a single process.

#include <cstdio>

#include "train_options.h"
#include "trainer.h"

int main(int argc, char** argv) {
  using namespace ddp::train;
  std::optional<TrainOptions> options;
  try {
    options = parse_train_options(argc, argv);
  } catch (const TrainUsageError& e) {
    std::fprintf(stderr, "ddptrain: error: %s\n", e.what());
    return 2;
  }
  if (!options) return 0;
  return run_training(*options);
}
