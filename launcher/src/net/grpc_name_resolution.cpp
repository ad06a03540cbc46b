#include "net/grpc_name_resolution.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

namespace ddp {
namespace {

constexpr const char* kVariable = "GRPC_DNS_RESOLVER";

// Written once in main before any thread exists; read later from any thread.
std::atomic<bool> set_by_us{false};

}  // namespace

void use_system_resolver_for_grpc() {
  if (std::getenv(kVariable) != nullptr) return;  // the user's choice
  setenv(kVariable, "native", /*overwrite=*/0);
  set_by_us = true;
}

std::vector<std::string> without_own_grpc_settings(std::vector<std::string> env) {
  if (!set_by_us) return env;
  const std::string prefix = std::string(kVariable) + "=";
  env.erase(std::remove_if(env.begin(), env.end(), [&](const std::string& e) { return e.rfind(prefix, 0) == 0; }),
            env.end());
  return env;
}

std::optional<std::string> grpc_resolver_chosen_by_user() {
  const char* value = std::getenv(kVariable);
  if (value == nullptr || set_by_us) return std::nullopt;
  return std::string(value);
}

}  // namespace ddp
