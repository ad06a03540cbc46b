#pragma once
// Remembers what loading libblas.so.3 told the launcher, so that only the first
// launch after a change pays for loading it.
//
// Loading OpenBLAS to ask for its kernels (openblas_get_corename) costs about
// 12 ms of every launch's start on a 2-core machine, however early it starts
// on its own thread: dlopen relocates the library against the launcher's many
// libraries and holds the dynamic loader's lock meanwhile, which the
// launcher's own thread creation waits for. The answer depends only on the
// library file and the CPU, so it is kept in a small JSON file keyed by both:
// the file's path, size, modification time and inode, and the CPU's vendor,
// family, model and flags. A change to either probes again. (Debian's
// libblas.so.3 there is OpenBLAS's shim; the same package ships the
// libopenblas.so.0 it loads, so an upgrade replaces both files.)
//
// The memo lives in the per-user runtime directory (0700), which a reboot
// clears. A missing, unreadable or damaged memo only means probing again;
// writes go to a temporary file renamed into place, so concurrent launches
// never read half a memo.

#include <filesystem>
#include <string>

#include "doctor/system_probe.h"

namespace ddp {

/// What of /proc/cpuinfo's text decides OpenBLAS's pick: the first processor's
/// vendor_id, cpu family, model and flags lines. Empty when none are listed.
std::string cpu_identity_from_cpuinfo(const std::string& cpuinfo);

/// `probe` with blas() answered from `memo_file` when ETC/alternatives names
/// the same libblas.so.3 file, unchanged, and PROC/cpuinfo the same CPU as
/// when it was last probed; otherwise probe.blas() runs and a result without
/// an error is remembered. Without an alternatives entry it always probes.
/// The returned probe's blas() may be called from any one thread at a time.
SystemProbe remember_blas_probe(SystemProbe probe, std::filesystem::path memo_file, std::string etc_root = "/etc",
                                std::string proc_root = "/proc");

}  // namespace ddp
