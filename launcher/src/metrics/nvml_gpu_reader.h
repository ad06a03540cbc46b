#pragma once
// The real GpuReader: NVML, loaded with dlopen() at run time. The launcher
// is built and runs without CUDA, so it neither links NVML nor includes its
// header: nvml_gpu_reader.cpp declares the few types and functions it calls.
// A machine without the library (or without a GPU) gets no reader, and so
// no GPU metrics; that is not an error.

#include <memory>
#include <string>

#include "metrics/gpu_reader.h"

namespace ddp {

/// The driver's NVML library, as every NVIDIA driver installs it.
inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

/// Loads `library` and initialises NVML. Null, with `why` saying so in a few
/// words, when the library is missing, NVML fails to start, or it lists no
/// device. The reader shuts NVML down and unloads it when destroyed.
/// Xid errors are counted from the moment the reader exists.
std::unique_ptr<GpuReader> open_nvml(const std::string& library, std::string& why);

}  // namespace ddp
