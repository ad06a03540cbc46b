"""Signals sent to ddplaunch: forwarding, exit status, grace escalation, SIGKILL cleanup."""

import os
import signal
import time
import unittest

from launcher_harness import LauncherTestCase, is_alive, worker


class SignalTest(LauncherTestCase):

    def forward_test(self, sig, nproc=2, extra=()):
        launch = self.start([f"--nproc-per-node={nproc}", "--shutdown-grace=3", *extra,
                             worker("trap_signals.py"), self.outdir])
        self.wait_for_files([f"ready_{r}" for r in range(nproc)], timeout=15)
        pids = [self.read_int(f"pid_{r}") for r in range(nproc)]
        t0 = time.monotonic()
        os.kill(launch.pid, sig)
        res = self.finish(launch, timeout=20)
        waited = time.monotonic() - t0
        self.assertEqual(res.rc, 128 + sig, res.describe())
        for r in range(nproc):
            marker = self.outdir / f"signal_{r}"
            self.assertTrue(marker.is_file(), f"rank {r} did not receive a signal{res.describe()}")
            self.assertEqual(marker.read_text(), signal.Signals(sig).name,
                             f"rank {r} got the wrong signal")
        # the workers exit right away from their handlers: no need to wait for the grace
        self.assertLess(waited, 2.5, res.describe())
        self.assert_dead(pids, timeout=1.0, what="worker")
        self.assert_no_leftovers()

    def test_sigterm_forwarded(self):
        self.forward_test(signal.SIGTERM)

    def test_sigint_forwarded(self):
        self.forward_test(signal.SIGINT)

    def test_sighup_forwarded(self):
        self.forward_test(signal.SIGHUP, nproc=3)

    def test_sigquit_forwarded_as_torchrun_does_by_default(self):
        self.forward_test(signal.SIGQUIT)

    def test_signals_to_handle_adds_sigusr1_for_slurm(self):
        # torchrun's --signals-to-handle: Slurm's `--signal=USR1@60` reaches the workers
        self.forward_test(signal.SIGUSR1, extra=["--signals-to-handle=SIGTERM,SIGUSR1"])

    def test_a_signal_left_out_of_signals_to_handle_gets_its_default_action(self):
        # without SIGHUP in the list, SIGHUP ends ddplaunch itself; its sentinel takes the workers along
        launch = self.start(["--nproc-per-node=2", "--signals-to-handle=SIGTERM,SIGINT",
                             worker("trap_signals.py"), self.outdir])
        self.wait_for_files([f"ready_{r}" for r in range(2)], timeout=15)
        pids = [self.read_int(f"pid_{r}") for r in range(2)]
        os.kill(launch.pid, signal.SIGHUP)
        res = self.finish(launch, timeout=20)
        self.assertEqual(res.rc, -signal.SIGHUP, res.describe())
        self.assert_dead(pids, timeout=5.0, what="worker")
        self.assert_no_leftovers()

    def test_sigterm_kills_worker_children(self):
        launch = self.start(["--nproc-per-node=2", worker("sleeper.sh"), self.outdir])
        self.wait_for_files(["ready_0", "ready_1"])
        pids = [self.read_int(f"{k}_{r}") for k in ("pid", "child") for r in range(2)]
        for p in pids:
            self.assertTrue(is_alive(p, self.token), f"pid {p} should be running")
        os.kill(launch.pid, signal.SIGTERM)
        res = self.finish(launch, timeout=20)
        self.assertEqual(res.rc, 128 + signal.SIGTERM, res.describe())
        self.assertLess(res.elapsed, 10.0)
        self.assert_dead(pids, timeout=1.0)
        self.assert_no_leftovers()

    def test_sigkill_to_launcher_leaves_nothing(self):
        launch = self.start(["--nproc-per-node=2", worker("sleeper.sh"), self.outdir])
        self.wait_for_files(["ready_0", "ready_1"])
        pids = [self.read_int(f"{k}_{r}") for k in ("pid", "child") for r in range(2)]
        for p in pids:
            self.assertTrue(is_alive(p, self.token), f"pid {p} should be running")
        os.kill(launch.pid, signal.SIGKILL)
        launch.proc.wait(timeout=5)
        # workers and their children must go away without anybody's help
        self.assert_dead(pids, timeout=8.0, what="worker or worker child")
        self.assert_no_leftovers(timeout=5.0)

    def test_sigkill_to_launcher_with_term_ignoring_workers(self):
        launch = self.start(["--nproc-per-node=2", "--shutdown-grace=1",
                             worker("ignore_term.py"), self.outdir])
        self.wait_for_files(["ready_0", "ready_1"], timeout=15)
        pids = [self.read_int(f"pid_{r}") for r in range(2)]
        os.kill(launch.pid, signal.SIGKILL)
        launch.proc.wait(timeout=5)
        self.assert_dead(pids, timeout=10.0, what="worker")
        self.assert_no_leftovers(timeout=5.0)

    def test_shutdown_grace_escalates_to_sigkill(self):
        launch = self.start(["--nproc-per-node=2", "--shutdown-grace=2",
                             worker("ignore_term.py"), self.outdir])
        self.wait_for_files(["ready_0", "ready_1"], timeout=15)
        pids = [self.read_int(f"pid_{r}") for r in range(2)]
        t0 = time.monotonic()
        os.kill(launch.pid, signal.SIGTERM)
        # still alive during the grace period
        time.sleep(0.8)
        for p in pids:
            self.assertTrue(is_alive(p, self.token), "worker killed before the grace expired")
        res = self.finish(launch, timeout=20)
        waited = time.monotonic() - t0
        self.assertEqual(res.rc, 128 + signal.SIGTERM, res.describe())
        self.assertGreaterEqual(waited, 1.8, res.describe())
        self.assertLess(waited, 6.0, res.describe())
        self.assert_dead(pids, timeout=1.0)
        self.assert_no_leftovers()

    def test_signal_during_restart_budget_stops_everything(self):
        # --max-restarts must not turn a signal to ddplaunch into a restart
        launch = self.start(["--nproc-per-node=2", "--max-restarts=3", "--shutdown-grace=2",
                             worker("trap_signals.py"), self.outdir])
        self.wait_for_files(["ready_0", "ready_1"], timeout=15)
        os.kill(launch.pid, signal.SIGTERM)
        res = self.finish(launch, timeout=20)
        self.assertEqual(res.rc, 128 + signal.SIGTERM, res.describe())
        self.assertFalse(self.attempt_dir(1).exists(), "a signal must not trigger a restart")
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
