"""Bad command lines: exit 2, a one-line 'ddplaunch: error:' message, nothing spawned."""

import os
import unittest

from launcher_harness import LauncherTestCase, worker

ENV_SH = worker("env_dump.sh")
ENV_PY = worker("env_dump.py")


class UsageTest(LauncherTestCase):

    def bad(self, args, *mentions, **kw):
        res = self.run_launcher(args, timeout=10, **kw)
        self.assert_usage_error(res, *mentions)
        self.assertLess(res.elapsed, 5.0)
        return res

    def test_unknown_flag(self):
        self.bad(["--bogus-flag=1", ENV_SH, self.outdir], "bogus-flag")

    def test_unknown_flag_without_value(self):
        self.bad(["--frobnicate", ENV_SH, self.outdir], "frobnicate")

    def test_nproc_zero(self):
        self.bad(["--nproc-per-node=0", ENV_SH, self.outdir], "nproc")

    def test_nproc_negative(self):
        self.bad(["--nproc-per-node=-1", ENV_SH, self.outdir], "nproc")

    def test_nproc_not_a_number(self):
        self.bad(["--nproc-per-node=abc", ENV_SH, self.outdir], "nproc")

    def test_nproc_trailing_garbage(self):
        self.bad(["--nproc-per-node=2x", ENV_SH, self.outdir], "nproc")

    def test_nproc_bad_pet_env(self):
        self.bad([ENV_SH, self.outdir], "nproc", env_extra={"PET_NPROC_PER_NODE": "zero"})

    def test_nproc_missing_value(self):
        res = self.run_launcher(["--nproc-per-node"], timeout=10)
        self.assert_usage_error(res, "nproc")

    def test_missing_program(self):
        self.bad(["--nproc-per-node=2"], "program", "script", "missing")

    def test_no_arguments_at_all(self):
        res = self.run_launcher([], timeout=10, log_dir=False, job_id=False)
        self.assert_usage_error(res, "program", "script", "missing")

    def test_program_not_found(self):
        missing = self.tmp / "no-such-program"
        self.bad([missing, self.outdir], "no-such-program")

    def test_program_not_found_on_path(self):
        self.bad(["ddpt-no-such-program-on-path", self.outdir], "ddpt-no-such-program-on-path")

    def test_program_not_executable(self):
        prog = self.tmp / "not-executable.sh"
        prog.write_text(f"#!/bin/sh\ntouch {self.outdir}/ran\n")
        prog.chmod(0o644)
        self.bad([prog], "not-executable.sh")

    def test_program_is_directory(self):
        d = self.tmp / "a-directory"
        d.mkdir()
        self.bad([d], "a-directory")

    def test_bad_local_ranks_filter(self):
        self.bad(["--nproc-per-node=2", "--local-ranks-filter=abc", ENV_SH, self.outdir],
                 "local", "filter", "abc")

    def test_bad_local_ranks_filter_negative(self):
        self.bad(["--nproc-per-node=2", "--local-ranks-filter=0,-1", ENV_SH, self.outdir],
                 "local", "filter", "-1")

    def test_port_out_of_range(self):
        self.bad(["--master-port=70000", ENV_SH, self.outdir], "port", "70000")

    def test_port_65536(self):
        self.bad(["--master-port=65536", ENV_SH, self.outdir], "port", "65536")

    def test_port_negative(self):
        self.bad(["--master-port=-1", ENV_SH, self.outdir], "port")

    def test_port_not_a_number(self):
        self.bad(["--master-port=http", ENV_SH, self.outdir], "port")

    def test_bad_redirects(self):
        self.bad(["--redirects=7", ENV_SH, self.outdir], "redirect", "7")

    def test_bad_redirects_per_rank(self):
        self.bad(["--nproc-per-node=2", "--redirects=0:9", ENV_SH, self.outdir], "redirect")

    def test_bad_tee(self):
        self.bad(["--tee=x", ENV_SH, self.outdir], "tee")

    def test_bad_max_restarts(self):
        self.bad(["--max-restarts=abc", ENV_SH, self.outdir], "restart")

    def test_bad_shutdown_grace(self):
        self.bad(["--shutdown-grace=soon", ENV_SH, self.outdir], "grace")

    def test_module_flag_without_module(self):
        res = self.run_launcher(["-m"], timeout=10)
        self.assert_usage_error(res)

    def test_first_error_only_then_nothing_runs_for_py(self):
        # a .py PROGRAM with a bad option: python must not be started either
        self.bad(["--nproc-per-node=0", ENV_PY, self.outdir], "nproc")

    def test_valid_command_line_does_spawn(self):
        # guards the 'nothing spawned' checks above: the same shape with good values runs
        res = self.run_launcher(["--nproc-per-node=2", "--master-port=0",
                                 "--local-ranks-filter=0,1", "--redirects=0:1", ENV_SH, self.outdir])
        self.assertEqual(res.rc, 0, res.describe())
        self.assertEqual(sorted(os.listdir(self.outdir)),
                         ["args_0.txt", "args_1.txt", "env_0.txt", "env_1.txt"])


if __name__ == "__main__":
    unittest.main()
