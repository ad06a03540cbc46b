// Which OpenBLAS kernels suit a CPU, and what a launch gives its workers.
#include "blas/openblas_core.h"

#include <gtest/gtest.h>

#include "blas/openblas_tuning.h"

namespace ddp {
namespace {

const std::set<std::string> kAvx2{"sse4_2", "avx", "avx2", "fma"};
const std::set<std::string> kAvx512{"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512cd", "avx512bw", "avx512dq",
                                    "avx512vl"};
std::set<std::string> with_bf16(std::set<std::string> flags) {
  flags.insert("avx512_bf16");
  return flags;
}

TEST(OpenBlasCore, ReadsTheFirstProcessorsFlags) {
  const std::string cpuinfo =
      "processor\t: 0\nmodel\t\t: 207\nflags\t\t: fpu sse4_2 avx2 fma\nbugs\t\t: spectre_v1\n\n"
      "processor\t: 1\nflags\t\t: fpu\n";
  EXPECT_EQ(cpu_flags_from_cpuinfo(cpuinfo), (std::set<std::string>{"fpu", "sse4_2", "avx2", "fma"}));
  EXPECT_TRUE(cpu_flags_from_cpuinfo("processor\t: 0\nFeatures\t: fp asimd\n").empty());  // aarch64 lists none
}

TEST(OpenBlasCore, GenericKernelsOnAWiderCpuGetTheWidestCore) {
  EXPECT_EQ(better_openblas_core("Prescott", with_bf16(kAvx512)), "Cooperlake");
  EXPECT_EQ(better_openblas_core("Prescott", kAvx512), "SkylakeX");
  EXPECT_EQ(better_openblas_core("NEHALEM", kAvx2), "Haswell");
  EXPECT_EQ(better_openblas_core("Sandybridge", kAvx2), "Haswell");
  EXPECT_EQ(better_openblas_core("Prescott", {"avx"}), "Sandybridge");
  EXPECT_EQ(vector_extension_name(with_bf16(kAvx512)), "AVX-512 with BF16");
  EXPECT_EQ(vector_extension_name({"sse4_2"}), "SSE");
}

TEST(OpenBlasCore, AGoodOrUnknownChoiceIsLeftAlone) {
  EXPECT_EQ(better_openblas_core("Haswell", kAvx2), "");
  EXPECT_EQ(better_openblas_core("Zen", kAvx2), "");
  EXPECT_EQ(better_openblas_core("SkylakeX", kAvx512), "");
  EXPECT_EQ(better_openblas_core("Cooperlake", with_bf16(kAvx512)), "");
  EXPECT_EQ(better_openblas_core("Prescott", {"sse4_2"}), "");      // the CPU has nothing wider
  EXPECT_EQ(better_openblas_core("FutureLake", with_bf16(kAvx512)), "");  // maybe newer than this table
  EXPECT_EQ(better_openblas_core("", kAvx2), "");
  // AVX-512 F alone is not what SkylakeX's kernels need.
  EXPECT_EQ(better_openblas_core("Prescott", {"avx", "avx2", "fma", "avx512f"}), "Haswell");
}

struct FakeMachine {
  std::set<std::string> flags = with_bf16(kAvx512);
  BlasInfo blas{"/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3", "", true, false, false,
                "OpenBLAS 0.3.21 DYNAMIC_ARCH Prescott", "Prescott", ""};
  int blas_loads = 0;
  SystemProbe probe() {
    SystemProbe p;
    p.cpu_flags = [this] { return flags; };
    p.blas = [this] {
      ++blas_loads;
      return blas;
    };
    return p;
  }
};

TEST(OpenBlasTuning, WorkersGetTheBetterCoreAndTheLogSaysWhy) {
  FakeMachine m;
  const auto t = tune_openblas_for_workers({"HOME=/root"}, m.probe());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->coretype, "Cooperlake");
  EXPECT_NE(t->reason.find("picks its Prescott kernels on this CPU, which has AVX-512 with BF16"), std::string::npos)
      << t->reason;
}

TEST(OpenBlasTuning, TheUsersChoiceAndOtherLibrariesAreLeftAlone) {
  FakeMachine m;
  EXPECT_FALSE(tune_openblas_for_workers({"OPENBLAS_CORETYPE=Haswell"}, m.probe()).has_value());
  m.blas.has_openblas = false;  // MKL, BLIS, the reference BLAS
  EXPECT_FALSE(tune_openblas_for_workers({}, m.probe()).has_value());
  m.blas.has_openblas = true;
  m.blas.core = "Cooperlake";
  EXPECT_FALSE(tune_openblas_for_workers({}, m.probe()).has_value());
}

TEST(OpenBlasTuning, ACpuWithoutAvxDoesNotLoadTheLibrary) {
  FakeMachine m;
  m.flags = {"sse4_2"};
  EXPECT_FALSE(tune_openblas_for_workers({}, m.probe()).has_value());
  EXPECT_EQ(m.blas_loads, 0);
}

}  // namespace
}  // namespace ddp
