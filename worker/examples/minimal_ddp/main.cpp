// The smallest data-parallel LibTorch program on the ddplaunch runtime: join
// the job, wrap the model in DistributedDataParallel, train. Each rank fits
// its own shard of y = 3x - 1; the gradients are averaged over the ranks.
#include <torch/torch.h>

#include <cstdio>

#include "ddp/runtime/distributed_data_parallel.h"
#include "ddp/runtime/init.h"

int main() {
  auto group = ddp::init();  // rank, world and communicator from ddplaunch
  torch::manual_seed(0);     // the same start everywhere (DDP also broadcasts rank 0's)
  torch::nn::Linear model(1, 1);
  ddp::DistributedDataParallel ddp_model(model, group->shared_collective());
  torch::optim::SGD optimizer(model->parameters(), 0.1);

  const auto x = torch::linspace(-1, 1, 64).reshape({64, 1}).chunk(group->world_size)[group->rank];
  const auto y = 3 * x - 1;
  for (int step = 0; step < 200; ++step) {
    optimizer.zero_grad();
    auto loss = torch::mse_loss(ddp_model(x), y);
    loss.backward();  // gradients are averaged across ranks when this returns
    optimizer.step();
  }
  if (group->rank == 0) {
    std::printf("rank 0 of %d: w = %.3f, b = %.3f\n", group->world_size, model->weight.item<float>(),
                model->bias.item<float>());
  }
  return 0;
}
