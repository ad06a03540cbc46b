"""The installed CMake package: `cmake --install` puts ddplaunch, ddptrain
and ddpbench in PREFIX/bin and the runtime under PREFIX/lib/cmake/ddplaunch;
the minimal example (worker/examples/minimal_ddp) configures with
find_package(ddplaunch), builds, and trains on 2 ranks under the installed
ddplaunch. Needs DDP_BUILD_DIR and DDP_SOURCE_DIR (set by ctest)."""
import os
import shutil
import subprocess
import tempfile
import unittest

BUILD = os.environ.get("DDP_BUILD_DIR", "")
SOURCE = os.environ.get("DDP_SOURCE_DIR", "")


def run(cmd, timeout, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, **kw)


@unittest.skipUnless(BUILD and SOURCE, "DDP_BUILD_DIR and DDP_SOURCE_DIR are set by ctest")
class InstalledPackage(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ddp-package-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def test_install_then_build_and_run_the_minimal_example(self):
        prefix = os.path.join(self.tmp, "prefix")
        r = run(["cmake", "--install", BUILD, "--prefix", prefix], 120)
        self.assertEqual(r.returncode, 0, r.stdout)
        for tool in ("ddplaunch", "ddptrain", "ddpbench"):
            self.assertTrue(os.access(os.path.join(prefix, "bin", tool), os.X_OK), tool)

        example = os.path.join(SOURCE, "worker", "examples", "minimal_ddp")
        build = os.path.join(self.tmp, "example")
        configure = ["cmake", "-S", example, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        if shutil.which("ccache"):
            configure += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        r = run(configure, 120)
        self.assertEqual(r.returncode, 0, r.stdout)
        r = run(["cmake", "--build", build], 600)
        self.assertEqual(r.returncode, 0, r.stdout)

        r = run([os.path.join(prefix, "bin", "ddplaunch"), "--nproc-per-node=2", "--log-level", "warn",
                 f"--log-dir={self.tmp}/logs", os.path.join(build, "minimal_ddp")], 120)
        self.assertEqual(r.returncode, 0, r.stdout)
        # Both ranks' shards together fit y = 3x - 1 exactly.
        self.assertIn("rank 0 of 2: w = 3.000, b = -1.000", r.stdout)


if __name__ == "__main__":
    unittest.main()
