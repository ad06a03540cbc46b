"""Failing workers: exit status, teardown of the others, failure.json and console report."""

import datetime
import unittest

from launcher_harness import LauncherTestCase, torch_available, worker

DIE = worker("die_on_rank.sh")


def parse_iso_utc(s):
    s = s.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    t = datetime.datetime.fromisoformat(s)
    return t


class FailureTest(LauncherTestCase):

    def check_failure_fields(self, f):
        for key in ("rank", "local_rank", "pid", "exit_code", "signal", "signal_name",
                    "likely_oom", "time", "stderr_tail", "error_file", "traceback"):
            self.assertIn(key, f, f"FAILURE lacks {key!r}: {f}")
        self.assertIsInstance(f["likely_oom"], bool)
        self.assertIsInstance(f["stderr_tail"], list)
        t = parse_iso_utc(f["time"])
        if t.tzinfo is not None:
            self.assertEqual(t.utcoffset(), datetime.timedelta(0), f["time"])
            now = datetime.datetime.now(datetime.timezone.utc)
        else:
            now = datetime.datetime.utcnow()
        self.assertLess(abs((now - t).total_seconds()), 300, f"time not ~now (UTC): {f['time']}")

    def test_exit_code_of_failing_rank_and_fast_teardown(self):
        res = self.run_launcher(["--nproc-per-node=3", DIE, "exit:5", "2", self.outdir],
                                timeout=25)
        self.assertEqual(res.rc, 5, res.describe())
        # the failing rank dies at ~0.5 s; the others (sleep 60) must be stopped at once
        self.assertLess(res.elapsed, 4.0, res.describe())
        pids = [self.read_int(f"pid_{r}") for r in range(3)]
        self.assert_dead(pids, timeout=1.0, what="worker")
        self.assert_no_leftovers()

    def test_failure_json_for_exit_code(self):
        res = self.run_launcher(["--nproc-per-node=3", DIE, "exit:5", "1", self.outdir])
        self.assertEqual(res.rc, 5, res.describe())
        pids = {r: self.read_int(f"pid_{r}") for r in range(3)}
        report = self.failure_json(0)
        self.assertEqual(report["job_id"], self.job_id)
        self.assertEqual(report["attempt"], 0)
        rc = report["root_cause"]
        self.check_failure_fields(rc)
        self.assertEqual(rc["rank"], 1)
        self.assertEqual(rc["local_rank"], 1)
        self.assertEqual(rc["pid"], pids[1])
        self.assertEqual(rc["exit_code"], 5)
        self.assertIsNone(rc["signal"])
        self.assertIsNone(rc["signal_name"])
        self.assertIs(rc["likely_oom"], False)
        self.assertIn("rank 1 is failing on purpose (exit:5)", rc["stderr_tail"])
        self.assertEqual(rc["stderr_tail"][-1], "rank 1 is failing on purpose (exit:5)")
        self.assertIsNone(rc["error_file"])
        self.assertIsNone(rc["traceback"])
        self.assertIsInstance(report["failures"], list)
        self.assertIn(rc, report["failures"])
        self.assertEqual(report["failures"][0]["rank"], 1, "root cause must come first")
        workers = {w["rank"]: w for w in report["workers"]}
        self.assertEqual(sorted(workers), [0, 1, 2])
        for r, w in workers.items():
            for key in ("rank", "local_rank", "pid", "state", "exit_code", "signal"):
                self.assertIn(key, w)
            self.assertEqual(w["pid"], pids[r])
            self.assertEqual(w["local_rank"], r)
        self.assertEqual(workers[1]["exit_code"], 5)
        # console report on stderr
        # e.g. "rank 1 (local rank 1, pid 1234) failed: exit code 5" (extra fields allowed)
        self.assertRegex(res.err, rf"rank 1 \((?:[^()]*, )?local rank 1, pid {pids[1]}\) "
                                  rf"failed: exit code 5", res.describe())
        self.assertIn("failure.json", res.err)
        self.assertIn(str(self.attempt_dir(0) / "failure.json"), res.err, res.describe())
        self.assertTrue(any("rank 1 is failing on purpose" in line and not line.startswith("[0:1]")
                            for line in res.err.splitlines()),
                        "report should repeat the last stderr lines" + res.describe())
        # ddplaunch's own messages do not go to stdout
        for line in res.out.splitlines():
            self.assertRegex(line, r"^\[0:\d+\] ", "stdout must carry only worker lines")

    def test_signal_killed_worker(self):
        res = self.run_launcher(["--nproc-per-node=2", DIE, "kill:9", "1", self.outdir])
        self.assertEqual(res.rc, 128 + 9, res.describe())
        pid1 = self.read_int("pid_1")
        report = self.failure_json(0)
        rc = report["root_cause"]
        self.check_failure_fields(rc)
        self.assertEqual(rc["rank"], 1)
        self.assertEqual(rc["pid"], pid1)
        self.assertEqual(rc["signal"], 9)
        self.assertEqual(rc["signal_name"], "SIGKILL")
        self.assertIsNone(rc["exit_code"])
        self.assertIn("rank 1 is failing on purpose (kill:9)", rc["stderr_tail"])
        self.assertRegex(res.err, rf"rank 1 \((?:[^()]*, )?local rank 1, pid {pid1}\) "
                                  rf"failed: killed by SIGKILL", res.describe())
        self.assert_dead([self.read_int("pid_0")], timeout=1.0)

    def test_sigsegv_worker(self):
        res = self.run_launcher(["--nproc-per-node=2", DIE, "kill:SEGV", "0", self.outdir])
        self.assertEqual(res.rc, 128 + 11, res.describe())
        rc = self.failure_json(0)["root_cause"]
        self.assertEqual(rc["rank"], 0)
        self.assertEqual(rc["signal"], 11)
        self.assertEqual(rc["signal_name"], "SIGSEGV")
        self.assertIn("killed by SIGSEGV", res.err)

    def test_torn_down_ranks_are_not_the_root_cause(self):
        # rank 0 exits 3; ranks 1..3 get SIGTERM from the launcher: exit status stays 3
        res = self.run_launcher(["--nproc-per-node=4", DIE, "exit:3", "0", self.outdir])
        self.assertEqual(res.rc, 3, res.describe())
        report = self.failure_json(0)
        self.assertEqual(report["root_cause"]["rank"], 0)
        self.assertEqual(report["root_cause"]["exit_code"], 3)

    def test_teardown_escalates_to_sigkill_for_term_ignoring_rank(self):
        res = self.run_launcher(["--nproc-per-node=2", "--shutdown-grace=1",
                                 worker("ignore_term.py"), self.outdir, "1", "4", "0.8"],
                                timeout=25)
        self.assertEqual(res.rc, 4, res.describe())
        # rank 1 exits at ~0.8 s (+ python start); rank 0 ignores SIGTERM -> SIGKILL after 1 s
        self.assertLess(res.elapsed, 6.0, res.describe())
        self.assertGreater(res.elapsed, 1.5, "grace period was not waited" + res.describe())
        self.assert_dead([self.read_int("pid_0")], timeout=1.0)
        self.assertEqual(self.failure_json(0)["root_cause"]["rank"], 1)

    def test_success_exit_zero_and_no_failure_report(self):
        res = self.run_launcher(["--nproc-per-node=2", worker("hello.sh")])
        self.assertEqual(res.rc, 0, res.describe())
        self.assertFalse((self.attempt_dir(0) / "failure.json").exists())

    @unittest.skipUnless(torch_available(), "/usr/bin/python3 cannot import torch")
    def test_error_file_traceback(self):
        msg = f"boom-{self.token}"
        res = self.run_launcher(["--nproc-per-node=2", worker("record_error.py"), "1", msg],
                                timeout=30)
        self.assertEqual(res.rc, 1, res.describe())
        report = self.failure_json(0)
        rc = report["root_cause"]
        self.check_failure_fields(rc)
        self.assertEqual(rc["rank"], 1)
        self.assertEqual(rc["exit_code"], 1)
        self.assertIsInstance(rc["error_file"], dict, rc)
        self.assertIn(msg, rc["error_file"]["message"]["message"])
        tb = rc["traceback"]
        self.assertIsInstance(tb, str)
        self.assertIn("Traceback (most recent call last)", tb)
        self.assertIn("inner_function_that_raises", tb)
        self.assertIn(f"RuntimeError: {msg}", tb)
        self.assertTrue((self.rank_dir(1) / "error.json").is_file())
        # ddplaunch's own console report (not the prefixed worker lines) carries it too
        own = "\n".join(l for l in res.err.splitlines() if not l.startswith("[0:"))
        self.assertIn("inner_function_that_raises", own, res.describe())
        self.assertIn(msg, own)


if __name__ == "__main__":
    unittest.main()
