"""--max-restarts: whole-group restarts, TORCHELASTIC_RESTART_COUNT, attempt_<k> dirs."""

import os
import unittest

from launcher_harness import LauncherTestCase, worker

RESTART = worker("restart_worker.sh")


def read_kv(path):
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


class RestartTest(LauncherTestCase):

    def test_succeeds_on_third_attempt(self):
        res = self.run_launcher(["--nproc-per-node=2", "--max-restarts=2",
                                 RESTART, self.outdir, "2", "1", "7"], timeout=30)
        self.assertEqual(res.rc, 0, res.describe())
        for k in range(3):
            for r in range(2):
                rec = self.outdir / f"attempt_{k}_rank_{r}"
                self.assertTrue(rec.is_file(), f"rank {r} did not run in attempt {k}")
                kv = read_kv(rec)
                self.assertEqual(kv["restart_count"], str(k))
                self.assertEqual(kv["attempt"], str(k))
                self.assertEqual(kv["max_restarts"], "2")
                self.assertEqual(kv["job"], self.job_id)
                self.assertEqual(os.path.realpath(kv["rank_log_dir"]),
                                 os.path.realpath(self.rank_dir(r, attempt=k)))
                self.assertTrue(self.rank_dir(r, attempt=k).is_dir())
                self.assertIn(f"rank {r} attempt {k}",
                              (self.rank_dir(r, attempt=k) / "stdout.log").read_text())
            self.assertTrue(self.attempt_dir(k).is_dir(), f"attempt_{k} missing")
        self.assertFalse(self.attempt_dir(3).exists())
        self.assertFalse((self.outdir / "attempt_3_rank_0").exists())
        # the failed attempts have their failure reports
        for k in (0, 1):
            report = self.failure_json(k)
            self.assertEqual(report["attempt"], k)
            self.assertEqual(report["root_cause"]["rank"], 1)
            self.assertEqual(report["root_cause"]["exit_code"], 7)
        self.assertIn("rank 1 failing in attempt 1",
                      (self.rank_dir(1, attempt=1) / "stderr.log").read_text())
        # fresh worker processes each attempt
        pids = {read_kv(self.outdir / f"attempt_{k}_rank_0")["pid"] for k in range(3)}
        self.assertEqual(len(pids), 3)
        self.assert_no_leftovers()

    def test_budget_exhausted_returns_failing_code(self):
        res = self.run_launcher(["--nproc-per-node=2", "--max-restarts=1",
                                 RESTART, self.outdir, "5", "0", "7"], timeout=30)
        self.assertEqual(res.rc, 7, res.describe())
        self.assertTrue((self.outdir / "attempt_0_rank_1").is_file())
        self.assertTrue((self.outdir / "attempt_1_rank_1").is_file())
        self.assertFalse((self.outdir / "attempt_2_rank_0").exists(), "restarted beyond budget")
        self.assertTrue(self.attempt_dir(1).is_dir())
        self.assertFalse(self.attempt_dir(2).exists())
        report = self.failure_json(1)
        self.assertEqual(report["attempt"], 1)
        self.assertEqual(report["root_cause"]["rank"], 0)
        self.assertEqual(report["root_cause"]["exit_code"], 7)
        self.assert_no_leftovers()

    def test_no_restart_by_default(self):
        res = self.run_launcher(["--nproc-per-node=2", RESTART, self.outdir, "1", "1", "6"])
        self.assertEqual(res.rc, 6, res.describe())
        self.assertFalse((self.outdir / "attempt_1_rank_0").exists())
        self.assertFalse(self.attempt_dir(1).exists())

    def test_max_restarts_underscore_spelling(self):
        res = self.run_launcher(["--nproc-per-node=1", "--max_restarts=1",
                                 RESTART, self.outdir, "1", "0", "9"], timeout=30)
        self.assertEqual(res.rc, 0, res.describe())
        self.assertTrue((self.outdir / "attempt_1_rank_0").is_file())

    def test_whole_group_restarts(self):
        # rank 2 fails in attempt 0; every rank (not only the failed one) runs again
        res = self.run_launcher(["--nproc-per-node=3", "--max-restarts=1",
                                 RESTART, self.outdir, "1", "2", "3"], timeout=30)
        self.assertEqual(res.rc, 0, res.describe())
        for r in range(3):
            self.assertTrue((self.outdir / f"attempt_1_rank_{r}").is_file())
            self.assertEqual(read_kv(self.outdir / f"attempt_1_rank_{r}")["restart_count"], "1")


if __name__ == "__main__":
    unittest.main()
