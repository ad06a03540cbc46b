#pragma once
// run_training: ddptrain's whole run on this rank. Joins the job (ddp::init:
// under ddplaunch through the agent, under torchrun-style env, or alone as a
// single process), builds the model, data and optimizer, resumes from the
// newest valid checkpoint, trains with DistributedDataParallel, reports
// progress (rank 0), checkpoints (rank 0 writes), and writes the final
// parameters and the trace.
//
// Sharding makes W ranks train exactly like one process on the global batch:
// step s uses global samples s*G ... s*G+G-1 (G = W x batch, modulo the data
// size, or a per-epoch permutation with --shuffle) and rank r takes the slice
// at s*G + r*batch; gradients are averaged over the ranks.
//
// Returns the process exit code: 0 done, 1 on a runtime failure (the reason
// printed as one line "ddptrain: error: ..." on stderr).

#include "train_options.h"

namespace ddp::train {

int run_training(const TrainOptions& options);

}  // namespace ddp::train
