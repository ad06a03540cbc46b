// The memo of what libblas.so.3 is (blas/blas_probe_memo.h): answered from the
// memo only while the library file and the CPU are the ones probed.

#include "blas/blas_probe_memo.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ddp {
namespace {

namespace fs = std::filesystem;

const char* const kCpuinfo =
    "processor\t: 0\n"
    "vendor_id\t: GenuineIntel\n"
    "cpu family\t: 6\n"
    "model\t\t: 207\n"
    "model name\t: INTEL(R) XEON(R) PLATINUM 8581C CPU @ 2.10GHz\n"
    "cpu MHz\t\t: 2100.000\n"
    "flags\t\t: fpu sse sse2 avx avx2 fma avx512f\n"
    "\n"
    "processor\t: 1\n"
    "vendor_id\t: GenuineIntel\n"
    "cpu MHz\t\t: 2099.000\n";

// A fake /etc with an alternatives link to a fake library, a fake /proc, and a
// probe that counts how often it was asked.
class BlasProbeMemoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("ddp_blas_memo_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "etc/alternatives");
    fs::create_directories(root_ / "proc");
    fs::create_directories(root_ / "lib");
    std::ofstream(library()) << "version 1\n";
    fs::create_symlink(library(), root_ / "etc/alternatives/libblas.so.3-x86_64-linux-gnu");
    std::ofstream(root_ / "proc/cpuinfo") << kCpuinfo;
    answer_.has_openblas = true;
    answer_.core = "Prescott";
    answer_.config = "OpenBLAS 0.3.21 DYNAMIC_ARCH";
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path library() const { return root_ / "lib/libblas.so.3"; }
  fs::path memo() const { return root_ / "memo.json"; }

  SystemProbe probe() {
    SystemProbe p;
    p.blas = [this] {
      ++probes_;
      BlasInfo b = answer_;
      b.path = fs::canonical(library()).string();
      return b;
    };
    return remember_blas_probe(p, memo(), (root_ / "etc").string(), (root_ / "proc").string());
  }

  fs::path root_;
  BlasInfo answer_;
  int probes_ = 0;
};

TEST_F(BlasProbeMemoTest, TheSecondLaunchIsAnsweredFromTheMemo) {
  const BlasInfo first = probe().blas();
  const BlasInfo second = probe().blas();
  EXPECT_EQ(probes_, 1);
  EXPECT_EQ(second.core, "Prescott");
  EXPECT_EQ(second.path, first.path);
  EXPECT_EQ(second.config, first.config);
  EXPECT_TRUE(second.has_openblas);
  EXPECT_FALSE(second.has_mkl);
  EXPECT_TRUE(fs::exists(memo()));
}

TEST_F(BlasProbeMemoTest, AChangedLibraryFileIsProbedAgain) {
  probe().blas();
  std::ofstream(library(), std::ios::trunc) << "version 2, longer\n";  // a package upgrade
  answer_.core = "Haswell";
  EXPECT_EQ(probe().blas().core, "Haswell");
  EXPECT_EQ(probes_, 2);
  EXPECT_EQ(probe().blas().core, "Haswell");
  EXPECT_EQ(probes_, 2);
}

TEST_F(BlasProbeMemoTest, AnotherLibraryChosenByTheAlternativesIsProbedAgain) {
  probe().blas();
  std::ofstream(root_ / "lib/other.so.3") << "version 1\n";  // same size, another file
  fs::remove(root_ / "etc/alternatives/libblas.so.3-x86_64-linux-gnu");
  fs::create_symlink(root_ / "lib/other.so.3", root_ / "etc/alternatives/libblas.so.3-x86_64-linux-gnu");
  probe().blas();
  EXPECT_EQ(probes_, 2);
}

TEST_F(BlasProbeMemoTest, AnotherCpuIsProbedAgain) {
  probe().blas();
  std::string other = kCpuinfo;
  other.replace(other.find("207"), 3, "143");
  std::ofstream(root_ / "proc/cpuinfo", std::ios::trunc) << other;
  probe().blas();
  EXPECT_EQ(probes_, 2);
}

TEST_F(BlasProbeMemoTest, ADamagedMemoIsProbedAgainAndRewritten) {
  probe().blas();
  std::ofstream(memo(), std::ios::trunc) << "{\"key\": {\"library\": ";  // cut short
  EXPECT_EQ(probe().blas().core, "Prescott");
  EXPECT_EQ(probes_, 2);
  probe().blas();
  EXPECT_EQ(probes_, 2);
}

TEST_F(BlasProbeMemoTest, AnErrorIsNotRemembered) {
  answer_.error = "cannot open shared object file";
  probe().blas();
  probe().blas();
  EXPECT_EQ(probes_, 2);
  EXPECT_FALSE(fs::exists(memo()));
}

TEST_F(BlasProbeMemoTest, WithoutAnAlternativesEntryItAlwaysProbes) {
  fs::remove(root_ / "etc/alternatives/libblas.so.3-x86_64-linux-gnu");
  probe().blas();
  probe().blas();
  EXPECT_EQ(probes_, 2);
}

TEST_F(BlasProbeMemoTest, AnUnwritableMemoOnlyMeansProbingEachTime) {
  SystemProbe p;
  p.blas = [this] {
    ++probes_;
    return answer_;
  };
  const SystemProbe remembered = remember_blas_probe(p, root_ / "no/such/dir/memo.json", (root_ / "etc").string(),
                                                     (root_ / "proc").string());
  EXPECT_EQ(remembered.blas().core, "Prescott");
  EXPECT_EQ(remembered.blas().core, "Prescott");
  EXPECT_EQ(probes_, 2);
  EXPECT_FALSE(fs::exists(root_ / "no"));
}

TEST(CpuIdentity, TakesTheFirstProcessorsVendorFamilyModelAndFlags) {
  EXPECT_EQ(cpu_identity_from_cpuinfo(kCpuinfo),
            "vendor_id: GenuineIntel\ncpu family: 6\nmodel: 207\nflags: fpu sse sse2 avx avx2 fma avx512f\n");
  EXPECT_EQ(cpu_identity_from_cpuinfo(""), "");
  EXPECT_EQ(cpu_identity_from_cpuinfo("processor : 0\nBogoMIPS : 50.00\n"), "");  // lists none of them
}

}  // namespace
}  // namespace ddp
