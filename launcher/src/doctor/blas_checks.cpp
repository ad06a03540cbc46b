// Which BLAS provides libblas.so.3: Debian's LibTorch calls whatever does, and
// the reference BLAS makes it about 16x slower (DESIGN.md, BLAS); OpenBLAS on
// a CPU newer than its table runs generic kernels (blas/openblas_core.h).

#include <fmt/format.h>

#include "blas/openblas_core.h"
#include "doctor/preflight.h"

namespace ddp {

std::vector<CheckResult> blas_checks(const PreflightInputs&, const SystemProbe& p) {
  CheckResult c{"BLAS", CheckLevel::kOk, ""};
  const BlasInfo b = p.blas ? p.blas() : BlasInfo{};
  const std::string where = b.via.empty() ? b.path : fmt::format("{} -> {}", b.via, b.path);
  const bool reference_path = b.path.find("/blas/libblas.so") != std::string::npos ||
                              b.path.find("/blas/libblas.") != std::string::npos;
  if (b.path.empty()) {
    c.reason = fmt::format("no libblas.so.3 on this system ({}): only Debian's LibTorch needs one",
                           b.error.empty() ? "not found" : b.error);
  } else if (b.has_openblas) {
    c.reason = fmt::format("{} ({})", b.config.empty() ? "OpenBLAS" : b.config, where);
    const std::set<std::string> flags = p.cpu_flags ? p.cpu_flags() : std::set<std::string>{};
    const std::string better = better_openblas_core(b.core, flags);
    if (!better.empty()) {
      c.level = CheckLevel::kWarn;
      c.reason += fmt::format(": it picks its {} kernels on a CPU with {}, so matrix products run several times slower; "
                              "ddplaunch gives its workers OPENBLAS_CORETYPE={}, export it for other programs",
                              b.core, vector_extension_name(flags), better);
    }
  } else if (b.has_mkl) {
    c.reason = fmt::format("Intel MKL ({})", where);
  } else if (b.has_blis) {
    c.reason = fmt::format("BLIS ({})", where);
  } else if (reference_path) {
    c.level = CheckLevel::kWarn;
    c.reason = fmt::format("{} is the reference BLAS: LibTorch runs about 16x slower; install libopenblas0-pthread",
                           where);
  } else if (!b.error.empty()) {
    c.level = CheckLevel::kWarn;
    c.reason = fmt::format("{} does not load: {}", where, b.error);
  } else {
    c.reason = fmt::format("{} (not OpenBLAS, MKL or BLIS; not the reference BLAS either)", where);
  }
  return {c};
}

}  // namespace ddp
