// GPUs against --nproc-per-node, the NVIDIA driver, the CUDA runtime it must
// support, and NCCL.

#include <fmt/format.h>

#include <fstream>
#include <regex>

#include "topology/host_resources.h"
#include "doctor/preflight.h"

namespace ddp {
namespace {

constexpr int kCudaErrorNoDevice = 100;

// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..."
std::string kernel_module_version(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return "";
  static const std::regex version(R"((\d+\.\d+(\.\d+)?))");
  const auto module = line.find("Module");
  const std::string tail = module == std::string::npos ? line : line.substr(module);
  std::smatch m;
  return std::regex_search(tail, m, version) ? m.str(1) : "?";
}

std::string plural(int n, const char* what) { return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s"); }

std::string init_failure(const CudaDriverInfo& d) {
  return fmt::format("cuInit failed: {} ({})", d.init_error.empty() ? "error" : d.init_error, d.init_result);
}

std::string init_hint(int result) {
  switch (result) {
    case 35: return "the kernel module is older than libcuda: the driver install is mixed; reinstall or reboot";
    case 999: return "often libcuda and the kernel module disagree after a driver upgrade (reboot), or /dev/nvidia* is not in the container";
    case 804: return "CUDA forward-compatibility libraries are in use on a GPU that does not support them";
    case 3: return "the driver did not initialize; check dmesg for NVRM errors";
    default: return "check nvidia-smi and dmesg";
  }
}

}  // namespace

bool valid_nproc_spec(const std::string& spec) {
  if (spec == "gpu" || spec == "cpu" || spec == "auto") return true;
  if (spec.empty() || spec.size() > 6) return false;
  for (char c : spec) {
    if (c < '0' || c > '9') return false;
  }
  return std::stoi(spec) > 0;
}

std::string cuda_version_string(int v) {
  if (v <= 0) return "?";
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

std::string nccl_version_string(int code) {
  if (code <= 0) return "?";
  if (code >= 10000) return fmt::format("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100);
  return fmt::format("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100);
}

std::vector<CheckResult> gpu_checks(const PreflightInputs& in, const SystemProbe& p) {
  std::vector<CheckResult> out;
  const std::string nvidia_dir = p.proc_root + "/driver/nvidia";
  const auto cvd = p.getenv ? p.getenv("CUDA_VISIBLE_DEVICES") : std::nullopt;
  const int listed = visible_cuda_devices(std::nullopt, nvidia_dir + "/gpus");
  const int narrowed = visible_cuda_devices(cvd, nvidia_dir + "/gpus");
  const std::string module = kernel_module_version(nvidia_dir + "/version");
  const CudaDriverInfo drv = p.cuda_driver ? p.cuda_driver() : CudaDriverInfo{};
  const bool cuda_counted = drv.found && drv.init_result == 0 && drv.device_count >= 0;
  // CUDA's own count when it initialized; none when cuInit failed; else the
  // driver's list under /proc narrowed by CUDA_VISIBLE_DEVICES.
  const int gpus = cuda_counted ? drv.device_count : (drv.found && drv.init_result > 0) ? 0 : narrowed;
  const bool driver_broken = drv.found && drv.init_result > 0 && drv.init_result != kCudaErrorNoDevice;
  const std::string spec = in.nproc_per_node.empty() ? "auto" : in.nproc_per_node;

  // ------------------------------------------------------------------ GPUs
  CheckResult g{"GPUs", CheckLevel::kOk, ""};
  if (gpus == 0) {
    // Why none: hidden, broken, or simply absent.
    std::string why = "no NVIDIA GPU visible";
    bool hidden = false;
    if (listed > 0 && cvd && narrowed == 0) {
      why = fmt::format("CUDA_VISIBLE_DEVICES='{}' hides the {} the driver lists", *cvd, plural(listed, "GPU"));
      hidden = true;
    } else if (listed > 0 && driver_broken) {
      why = fmt::format("the driver lists {} but {}", plural(listed, "GPU"), init_failure(drv));
      hidden = true;
    } else if (listed > 0 && !drv.found) {
      why = fmt::format("the driver lists {} but libcuda.so.1 is missing", plural(listed, "GPU"));
      hidden = true;
    }
    if (spec == "gpu") {
      g.level = CheckLevel::kFail;
      g.reason = fmt::format("{}, but --nproc-per-node=gpu needs at least one (use cpu or auto to run on CPU with Gloo)", why);
    } else {
      g.level = hidden ? CheckLevel::kWarn : CheckLevel::kOk;
      g.reason = fmt::format("{}: jobs run on CPU with Gloo", why);
    }
  } else {
    const std::string seen = fmt::format("{} visible", plural(gpus, "GPU"));
    if (spec == "gpu" || spec == "auto") {
      g.reason = fmt::format("{}: one rank per GPU with --nproc-per-node={}", seen, spec);
    } else if (spec == "cpu") {
      g.reason = fmt::format("{}, but --nproc-per-node=cpu starts one rank per CPU", seen);
    } else {
      const int n = std::stoi(spec);
      if (n > gpus) {
        g.level = CheckLevel::kWarn;
        g.reason = fmt::format(
            "--nproc-per-node={} but only {}: ranks would share a GPU, which NCCL refuses (\"Duplicate GPU detected\"); "
            "use --nproc-per-node=gpu",
            n, seen);
      } else {
        g.reason = fmt::format("{} for {}", seen, plural(n, "rank"));
        if (n < gpus) g.reason += fmt::format(" ({} idle)", gpus - n);
      }
    }
    if (cuda_counted && listed > 0 && drv.device_count != narrowed) {
      g.reason += fmt::format(" (the driver lists {}; CUDA sees {})", listed, drv.device_count);
    }
  }
  out.push_back(g);

  // --------------------------------------------------------- NVIDIA driver
  CheckResult d{"NVIDIA driver", CheckLevel::kOk, ""};
  const std::string module_text = module.empty() ? "" : fmt::format("kernel module {}, ", module);
  if (drv.found) {
    const std::string api = drv.version > 0 ? fmt::format("supports CUDA up to {}", cuda_version_string(drv.version))
                                            : "cuDriverGetVersion failed";
    if (driver_broken) {
      d.level = CheckLevel::kFail;
      d.reason = fmt::format("{}{} ({}): {}; {}", module_text, api, drv.path, init_failure(drv), init_hint(drv.init_result));
    } else if (drv.init_result == kCudaErrorNoDevice && listed > 0) {
      d.level = CheckLevel::kWarn;
      d.reason = fmt::format("{}{} ({}), but CUDA finds no device", module_text, api, drv.path);
    } else {
      d.reason = fmt::format("{}{} ({})", module_text, api, drv.path);
      if (drv.init_result == kCudaErrorNoDevice) d.reason += ", no device";
    }
  } else if (!module.empty() || listed > 0) {
    d.level = CheckLevel::kFail;
    d.reason = fmt::format(
        "{}but libcuda.so.1 does not load ({}): install the driver's user-space library (or, in a container, "
        "run with the NVIDIA container toolkit)",
        module.empty() ? "GPUs are listed " : fmt::format("kernel module {} is loaded ", module), drv.error);
  } else {
    d.reason = "none installed (no libcuda.so.1, no /proc/driver/nvidia): not a GPU machine";
  }
  out.push_back(d);

  // ---------------------------------------------------------- CUDA runtime
  const LibraryInfo rt = p.cuda_runtime ? p.cuda_runtime() : LibraryInfo{};
  CheckResult r{"CUDA runtime", CheckLevel::kOk, ""};
  if (rt.found && rt.version > 0) {
    const std::string have = fmt::format("CUDA runtime {} ({})", cuda_version_string(rt.version), rt.path);
    if (drv.found && drv.version > 0) {
      const int dmaj = drv.version / 1000;
      const int rmaj = rt.version / 1000;
      if (drv.version >= rt.version) {
        r.reason = fmt::format("{}; the driver supports CUDA {}", have, cuda_version_string(drv.version));
      } else if (dmaj < rmaj) {
        r.level = CheckLevel::kFail;
        r.reason = fmt::format(
            "{} needs a newer driver: this one supports CUDA {} only (cudaErrorInsufficientDriver); update the "
            "driver or use a CUDA {}.x build",
            have, cuda_version_string(drv.version), dmaj);
      } else {
        r.level = CheckLevel::kWarn;
        r.reason = fmt::format(
            "{} is newer than the driver's CUDA {}: it runs under minor version compatibility, but PTX JIT and "
            "newer features need a driver for CUDA {}",
            have, cuda_version_string(drv.version), cuda_version_string(rt.version));
      }
    } else {
      r.reason = fmt::format("{}; no NVIDIA driver to run it, so CPU only", have);
    }
  } else if (rt.found) {
    r.level = CheckLevel::kWarn;
    r.reason = fmt::format("{} loads but reports no version ({})", rt.path, rt.error);
  } else if (gpus > 0) {
    r.level = CheckLevel::kWarn;
    r.reason = "no libcudart found (library path, /usr/local/cuda/lib64): fine for PyTorch wheels, which bring their "
               "own; a C++ build needs one";
  } else {
    r.reason = "no libcudart found (library path, /usr/local/cuda/lib64): CPU only";
  }
  out.push_back(r);

  // ------------------------------------------------------------------ NCCL
  const LibraryInfo nccl = p.nccl ? p.nccl() : LibraryInfo{};
  CheckResult n{"NCCL", CheckLevel::kOk, ""};
  if (nccl.found) {
    n.reason = fmt::format("NCCL {} ({})", nccl_version_string(nccl.version), nccl.path);
    if (nccl.version <= 0) {
      n.level = CheckLevel::kWarn;
      n.reason += fmt::format(": ncclGetVersion failed ({})", nccl.error);
    } else if (gpus == 0) {
      n.reason += "; unused without a GPU (Gloo here)";
    }
  } else {
    n.level = CheckLevel::kWarn;
    n.reason = "libnccl.so.2 not found (library path, /usr/local/cuda/lib64): the NCCL backend is unavailable; Gloo only";
  }
  out.push_back(n);
  return out;
}

}  // namespace ddp
