#include "net/host_name.h"

#include <unistd.h>

namespace ddp {

std::string this_host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace ddp
