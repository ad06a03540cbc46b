#include "blas/openblas_core.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>

namespace ddp {
namespace {

// How wide the kernels of a core (or what a CPU offers) are.
enum class Width { kSse = 0, kAvx = 1, kAvx2 = 2, kAvx512 = 3, kAvx512Bf16 = 4 };

// OpenBLAS's x86-64 core names (openblas_get_corename, lower-cased) by the
// extension their kernels use.
const std::map<std::string, Width>& core_widths() {
  static const std::map<std::string, Width> widths = {
      {"katmai", Width::kSse},          {"coppermine", Width::kSse},  {"northwood", Width::kSse},
      {"prescott", Width::kSse},        {"banias", Width::kSse},      {"atom", Width::kSse},
      {"core2", Width::kSse},           {"penryn", Width::kSse},      {"dunnington", Width::kSse},
      {"nehalem", Width::kSse},         {"opteron", Width::kSse},     {"opteron_sse3", Width::kSse},
      {"barcelona", Width::kSse},       {"bobcat", Width::kSse},      {"nano", Width::kSse},
      {"sandybridge", Width::kAvx},     {"bulldozer", Width::kAvx},   {"piledriver", Width::kAvx},
      {"steamroller", Width::kAvx},     {"haswell", Width::kAvx2},    {"zen", Width::kAvx2},
      {"excavator", Width::kAvx2},      {"skylakex", Width::kAvx512}, {"cooperlake", Width::kAvx512Bf16},
      {"sapphirerapids", Width::kAvx512Bf16},
  };
  return widths;
}

Width cpu_width(const std::set<std::string>& f) {
  auto has = [&](const char* name) { return f.count(name) != 0; };
  // SkylakeX's kernels use the F, CD, BW, DQ and VL subsets.
  const bool avx512 = has("avx512f") && has("avx512cd") && has("avx512bw") && has("avx512dq") && has("avx512vl");
  if (avx512 && has("avx512_bf16")) return Width::kAvx512Bf16;
  if (avx512) return Width::kAvx512;
  if (has("avx2") && has("fma")) return Width::kAvx2;
  if (has("avx")) return Width::kAvx;
  return Width::kSse;
}

}  // namespace

std::set<std::string> cpu_flags_from_cpuinfo(const std::string& cpuinfo) {
  std::istringstream lines(cpuinfo);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream words(line.substr(colon + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

bool offers_more_than_sse(const std::set<std::string>& cpu_flags) { return cpu_width(cpu_flags) > Width::kSse; }

std::string vector_extension_name(const std::set<std::string>& cpu_flags) {
  switch (cpu_width(cpu_flags)) {
    case Width::kAvx512Bf16: return "AVX-512 with BF16";
    case Width::kAvx512: return "AVX-512";
    case Width::kAvx2: return "AVX2";
    case Width::kAvx: return "AVX";
    case Width::kSse: break;
  }
  return "SSE";
}

std::string better_openblas_core(const std::string& chosen, const std::set<std::string>& cpu_flags) {
  std::string key = chosen;
  std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
  const auto known = core_widths().find(key);
  if (known == core_widths().end()) return "";
  const Width cpu = cpu_width(cpu_flags);
  if (known->second >= cpu) return "";
  switch (cpu) {
    case Width::kAvx512Bf16: return "Cooperlake";
    case Width::kAvx512: return "SkylakeX";
    case Width::kAvx2: return "Haswell";
    case Width::kAvx: return "Sandybridge";
    case Width::kSse: break;
  }
  return "";
}

}  // namespace ddp
