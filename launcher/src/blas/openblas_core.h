#pragma once
// Which OpenBLAS kernels suit this CPU.
//
// An OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels when it
// loads, from a table of CPU models. A CPU newer than that table gets the
// generic SSE3 kernels ("Prescott") however wide its vector units are: Debian
// 12's OpenBLAS 0.3.21 on an Intel family 6 model 207 (Emerald Rapids) does,
// and there float32 matrix products ran about 3x slower than with the kernels
// OPENBLAS_CORETYPE=Cooperlake selects. LibTorch and PyTorch call whatever
// provides libblas.so.3, so every worker pays for it. The environment variable
// must be set before the worker starts (OpenBLAS reads it as it loads): this
// is a launcher's job, as OMP_NUM_THREADS is.
//
// Pure functions, no I/O; safe from any thread.

#include <set>
#include <string>

namespace ddp {

/// The flags of the first processor listed in the text of /proc/cpuinfo
/// ("flags : fpu vme ... avx2 ..."); empty when there is none (non-x86).
std::set<std::string> cpu_flags_from_cpuinfo(const std::string& cpuinfo);

/// Whether the CPU offers AVX or wider, i.e. whether some OpenBLAS pick could
/// ever be improved on it.
bool offers_more_than_sse(const std::set<std::string>& cpu_flags);

/// The widest vector extension OpenBLAS has kernels for that the CPU offers,
/// for messages: "AVX-512 with BF16", "AVX-512", "AVX2", "AVX" or "SSE".
std::string vector_extension_name(const std::set<std::string>& cpu_flags);

/// A value for OPENBLAS_CORETYPE whose kernels use more of this CPU than
/// those of `chosen` (what openblas_get_corename() reported, any case).
/// Empty when `chosen` already uses the CPU's widest extension, or is a name
/// this table does not know (perhaps a newer, better core), or the CPU offers
/// nothing beyond SSE.
std::string better_openblas_core(const std::string& chosen, const std::set<std::string>& cpu_flags);

}  // namespace ddp
