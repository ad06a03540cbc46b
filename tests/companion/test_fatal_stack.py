"""The Python stack at a fatal signal, written by faulthandler to the rank's
fatal_stack.log (the launcher puts it in the failure report)."""

import signal
import unittest

from companion_harness import CompanionTestCase, script, skip_without_torch


class FatalStackTest(CompanionTestCase):
    def test_segfault_writes_the_crashing_stack(self):
        rank = self.start("crashes.py", "crash")
        self.accept_rank(rank)
        self.assertEqual(rank.finish(), -signal.SIGSEGV)   # the signal still ends the rank
        text = (self.rank_dir / "fatal_stack.log").read_text()
        self.assertIn("Fatal Python error: Segmentation fault", text)
        self.assertIn('File "%s", line 7 in crash_here' % script("crashes.py"), text)
        self.assertIn('File "%s", line 11 in <module>' % script("crashes.py"), text)

    def test_normal_exit_leaves_no_file(self):
        rank = self.start("crashes.py")
        self.accept_rank(rank)
        self.assertEqual(rank.finish(), 0, rank.stderr_text())
        self.assertFalse((self.rank_dir / "fatal_stack.log").exists())

    def test_faulthandler_enabled_by_the_user_is_left_alone(self):
        rank = self.start("crashes.py", "crash", env=self.rank_env(PYTHONFAULTHANDLER="1"))
        self.accept_rank(rank)
        self.assertEqual(rank.finish(), -signal.SIGSEGV)
        self.assertFalse((self.rank_dir / "fatal_stack.log").exists())
        self.assertIn("line 7 in crash_here", rank.stderr_text())   # where the user asked for it


class WorkerFatalStackTest(CompanionTestCase):
    """A DataLoader worker's crash: torch's worker handlers (which print
    "Unexpected segmentation fault encountered in worker") still run, after
    faulthandler wrote the worker's stack to the rank's file."""

    def crash_in_worker(self, method):
        rank = self.start("worker_crashes.py", method)
        self.accept_rank(rank)
        got = rank.wait_line(lambda l: l.startswith("rank got: "), 120, "the rank's error")
        self.assertEqual(rank.finish(), 0, rank.stderr_text())
        self.assertIn("DataLoader worker (pid(s) ", got)
        self.assertIn("ERROR: Unexpected segmentation fault encountered in worker.", rank.stderr_text())
        text = (self.rank_dir / "fatal_stack.log").read_text()
        self.assertIn("Fatal Python error: Segmentation fault", text)
        self.assertRegex(text, r'File "%s", line \d+ in __getitem__\n' % script("worker_crashes.py"))
        self.assertRegex(text, r'File "[^"]*/torch/utils/data/_utils/worker\.py", line \d+ in _worker_loop\n')

    @skip_without_torch
    def test_segfault_in_a_forked_worker(self):
        self.crash_in_worker("fork")

    @skip_without_torch
    def test_segfault_in_a_spawned_worker(self):
        self.crash_in_worker("spawn")


if __name__ == "__main__":
    unittest.main()
