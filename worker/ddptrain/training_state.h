#pragma once
// What a checkpoint holds beyond the file format (checkpoint_store.h): the
// model's parameters and buffers, the optimizer's state (momentum, Adam
// moments and step counts), the default CPU generator, the loss scaler and
// the data position (the next step; the data order is a function of the step
// and the seed, so nothing else is needed), encoded with LibTorch's
// serialize archives into one byte string.

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <string>

namespace ddp::train {

struct TrainingPosition {
  int64_t next_step = 0;    // the first step still to run
  double loss_scale = 1.0;  // fp16 dynamic loss scaling
  int64_t good_steps = 0;   // steps since the scale last changed
};

std::string encode_training_state(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                                  const TrainingPosition& position);

/// Restores model, optimizer and generator in place. Throws std::runtime_error
/// ("the checkpoint does not fit this model and optimizer: ...") when the
/// payload is not a training state, a parameter or buffer is missing or has
/// another shape or dtype (checked before the model changes), or the optimizer
/// differs (found after the model is restored). Damage to the stored tensor
/// data is not detected here: CheckpointStore's checksum guards the bytes.
TrainingPosition decode_training_state(const std::string& payload, torch::nn::Module& model,
                                       torch::optim::Optimizer& optimizer);

}  // namespace ddp::train
