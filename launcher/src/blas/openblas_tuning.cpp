#include "blas/openblas_tuning.h"

#include <fmt/format.h>

#include <algorithm>

#include "blas/openblas_core.h"

namespace ddp {

std::optional<OpenBlasTuning> tune_openblas_for_workers(const std::vector<std::string>& env,
                                                        const SystemProbe& probe) {
  const bool user_chose = std::any_of(env.begin(), env.end(), [](const std::string& e) {
    return e.rfind("OPENBLAS_CORETYPE=", 0) == 0;
  });
  if (user_chose || !probe.cpu_flags || !probe.blas) return std::nullopt;
  const std::set<std::string> flags = probe.cpu_flags();
  if (!offers_more_than_sse(flags)) return std::nullopt;  // spares loading the library
  const BlasInfo blas = probe.blas();
  if (!blas.has_openblas || blas.core.empty()) return std::nullopt;
  const std::string better = better_openblas_core(blas.core, flags);
  if (better.empty()) return std::nullopt;
  return OpenBlasTuning{better, fmt::format("OpenBLAS ({}) picks its {} kernels on this CPU, which has {}: workers get "
                                            "OPENBLAS_CORETYPE={} (set OPENBLAS_CORETYPE to choose otherwise)",
                                            blas.path, blas.core, vector_extension_name(flags), better)};
}

}  // namespace ddp
