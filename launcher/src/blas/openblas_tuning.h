#pragma once
// What a node's workers get so that OpenBLAS uses this CPU's vector units
// (see openblas_core.h): OPENBLAS_CORETYPE, decided once per launch.

#include <optional>
#include <string>
#include <vector>

#include "doctor/system_probe.h"

namespace ddp {

struct OpenBlasTuning {
  std::string coretype;  // the value for OPENBLAS_CORETYPE
  std::string reason;    // one line for the log: what OpenBLAS picks, what the CPU offers
};

/// nullopt when `env` ("NAME=value" entries) sets OPENBLAS_CORETYPE already,
/// the CPU offers nothing beyond SSE, libblas.so.3 is not OpenBLAS, or
/// OpenBLAS's own pick uses the CPU's widest extension. The probe's blas()
/// loads OpenBLAS in this process (a few milliseconds); it is only called
/// when the CPU has AVX or wider.
std::optional<OpenBlasTuning> tune_openblas_for_workers(const std::vector<std::string>& env,
                                                        const SystemProbe& probe);

}  // namespace ddp
