#pragma once
// A Store over LibTorch's c10d::TCPStore: how ranks meet when no ddplaunch
// agent is there (started by srun, mpirun or torchrun with only RANK,
// WORLD_SIZE, MASTER_ADDR and MASTER_PORT). Rank 0 serves it on MASTER_PORT,
// exactly as torch.distributed's env:// does.

#include <memory>
#include <string>

#include "ddp/common/store.h"

namespace ddp {

std::shared_ptr<Store> make_tcp_store(const std::string& host, int port, bool is_server, int world_size,
                                      Duration timeout);

}  // namespace ddp
