"""Heartbeats, hang detection and live status, with ddptrain's injected faults.

Every job runs ddptrain (LibTorch, Gloo on the CPU, OMP_NUM_THREADS=1) on 2-3 ranks under
ddplaunch with --heartbeat-interval 0.5 and a hang timeout of 2 s, so detection is fast.
For each fault kind the tests check who is named (rank, collective, waiting ranks), how
fast ("fault to report": measured with this process's clock from the moment the faulty
rank's "ddptrain: injected fault at step N" line reaches the console, or from our own
SIGSTOP, to the moment ddplaunch's report line does), the exit code, failure.json,
stacks.log and that no process carrying the test token survives (scanned in /proc;
SIGSTOPped workers included).

The detection bound is hang timeout + 2 heartbeat intervals + SLACK_S; SLACK_S (default
2.5 s, env DDPT_HANG_SLACK) absorbs a loaded 2-core machine. A lower bound (hang timeout
minus one interval) catches a detector that fires too early.

`ddplaunch status` tests run only when `ddplaunch status --help` exits 0.
"""

import json
import os
import re
import signal
import subprocess
import time
import unittest

from launcher_harness import (BIN, DDPTRAIN, DdptrainJobCase, find_marked, is_alive, wait_until)


HB = 0.5                       # --heartbeat-interval
HANG = 2.0                     # --hang-timeout
SLACK_S = float(os.environ.get("DDPT_HANG_SLACK", "2.5"))
DETECT_BOUND = HANG + 2 * HB + SLACK_S
CRASH_BOUND = 2.0              # fault line -> failure line for a dead process
HANG_EXIT = 124

FAULT_RE = re.compile(r"^\[0:(\d+)\] ddptrain: injected fault at step (\d+)")
STUCK_RE = re.compile(r"error: stuck_collective detected: rank (\d+) \(host (\S+), pid (\d+), step (\d+), "
                      r"phase (\w+)\) never entered (\w+) #(\d+) .*that ranks? ([\d,]+) ha(?:s|ve) waited")
SILENT_RE = re.compile(r"error: silent_rank detected: rank (\d+) \(host (\S+), pid (\d+)")
FAILED_RE = re.compile(r"error: rank (\d+) \(node \d+, local rank \d+, pid (\d+)\) failed: (.*?) at \d{4}-")
STRAGGLER_RE = re.compile(r"straggler: rank (\d+)\b.*is a straggler")
RESUMED_RE = re.compile(r"ddptrain: resuming from (\S+) \(step (\d+)\)")
PHASES = {"data", "forward", "backward", "optimizer", "checkpoint", "other", "unknown"}


def status_available():
    try:
        r = subprocess.run([str(BIN), "status", "--help"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def proc_env_rank(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(b"RANK="):
                    return int(item[5:])
    except (OSError, ValueError):
        pass
    return None


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
        return data[data.rindex(")") + 2:].split()[0]
    except (OSError, ValueError):
        return None


class Watch:
    """Tails a started ddplaunch's stdout/stderr files, stamping every complete line
    with time.monotonic() when it is first seen (polled every 10 ms)."""

    def __init__(self, launch):
        self.launch = launch
        self.files = {"out": [launch.out_path, 0, b""], "err": [launch.err_path, 0, b""]}
        self.lines = []  # (t, stream, line)

    def poll(self):
        now = time.monotonic()
        for stream, st in self.files.items():
            path, off, partial = st
            try:
                with open(path, "rb") as f:
                    f.seek(off)
                    data = f.read()
            except OSError:
                continue
            st[1] = off + len(data)
            data = partial + data
            *complete, st[2] = data.split(b"\n")
            for raw in complete:
                self.lines.append((now, stream, raw.decode("utf-8", "replace")))

    def first(self, regex, stream=None):
        for t, s, line in self.lines:
            if stream in (None, s):
                m = regex.search(line)
                if m:
                    return t, m
        return None

    def wait_for(self, regex, timeout, stream=None):
        """Poll until regex appears (returns (t, match)), the launcher exits, or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            hit = self.first(regex, stream)
            if hit or time.monotonic() >= deadline:
                return hit
            if self.launch.proc.poll() is not None:
                self.poll()
                return self.first(regex, stream)
            time.sleep(0.01)

    def run_to_exit(self, timeout):
        """Poll until the launcher exits (or timeout); returns its exit time or None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            if self.launch.proc.poll() is not None:
                t = time.monotonic()
                self.poll()
                return t
            time.sleep(0.01)
        self.poll()
        return None


class HangTestCase(DdptrainJobCase):
    def start_train(self, nproc, *, fault=None, steps=100000, hang=HANG, launcher_args=(), train_args=()):
        args = [f"--nproc-per-node={nproc}", f"--heartbeat-interval={HB}", f"--hang-timeout={hang}",
                *launcher_args, DDPTRAIN, "--steps", steps, "--log-every", "0", *train_args]
        if fault:
            args += ["--inject-fault", fault]
        launch = self.start(args)
        return launch, Watch(launch)

    def finish_watched(self, launch, watch, timeout):
        t_exit = watch.run_to_exit(timeout)
        res = self.finish(launch, timeout=0.1 if t_exit else 1.0)
        return res, t_exit

    def stacks(self, rank, attempt=0):
        return self.rank_dir(rank, attempt) / "stacks.log"

    def assert_stacks(self, ranks, attempt=0):
        for r in ranks:
            p = self.stacks(r, attempt)
            self.assertTrue(p.is_file() and p.stat().st_size > 0, f"no stack dump in {p}")
            text = p.read_text(errors="replace")
            self.assertRegex(text, r"(?i)thread|stack|#\d", f"{p} does not look like a stack dump")

    def status(self, *extra, timeout=10):
        return subprocess.run([str(BIN), "status", "--job", self.job_id, *extra], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env(),
                              text=True, timeout=timeout, cwd=str(self.tmp))

    def status_json(self):
        r = self.status("--json")
        if r.returncode != 0:
            return None, r
        try:
            return json.loads(r.stdout), r
        except ValueError:
            return None, r

    @staticmethod
    def status_ranks(doc):
        ranks = doc.get("ranks")
        if isinstance(ranks, dict):  # {"ranks": [...], "hang_timeout_s": ..., ...}
            ranks = ranks.get("ranks")
        return {r["rank"]: r for r in (ranks or [])}


# ----------------------------------------------------------------------------- dead ranks

class DeadRankTests(HangTestCase):
    def _dead(self, kind, rank, expect_rc, describe_re):
        launch, w = self.start_train(3, fault=f"{kind}@20:{rank}")
        res, t_exit = self.finish_watched(launch, w, 60)
        self.assertIsNotNone(t_exit, res.describe())
        self.assertEqual(res.rc, expect_rc, res.describe())
        fault = w.first(FAULT_RE)
        self.assertIsNotNone(fault, "no fault line" + res.describe())
        self.assertEqual(int(fault[1].group(1)), rank)
        failed = w.first(FAILED_RE, "err")
        self.assertIsNotNone(failed, "no failure line naming the rank" + res.describe())
        self.assertEqual(int(failed[1].group(1)), rank, res.describe())
        self.assertRegex(failed[1].group(3), describe_re)
        self.assertLess(failed[0] - fault[0], CRASH_BOUND, "fault -> report too slow" + res.describe())
        self.assertLess(t_exit - fault[0], CRASH_BOUND + 3.0, "teardown too slow" + res.describe())
        self.assertNotIn("stuck_collective", res.err)
        self.assertNotIn("silent_rank", res.err)
        report = self.failure_json()
        self.assertEqual(report["root_cause"]["rank"], rank, report)
        self.assertNotIn("hang", report)
        self.assert_no_leftovers(timeout=2.0)
        return report

    def test_crash_names_rank_and_signal(self):
        report = self._dead("crash", 1, 128 + signal.SIGABRT, r"SIGABRT")
        self.assertEqual(report["root_cause"]["signal"], signal.SIGABRT)

    def test_exit_names_rank_and_code(self):
        report = self._dead("exit", 2, 17, r"exit code 17")
        self.assertEqual(report["root_cause"]["exit_code"], 17)


# ----------------------------------------------------------------------------- hangs

class HangTests(HangTestCase):
    def test_hang_names_culprit_collective_and_waiters(self):
        launch, w = self.start_train(3, fault="hang@30:1")
        res, t_exit = self.finish_watched(launch, w, 60)
        self.assertIsNotNone(t_exit, res.describe())
        self.assertEqual(res.rc, HANG_EXIT, res.describe())
        fault = w.first(FAULT_RE)
        stuck = w.first(STUCK_RE, "err")
        self.assertIsNotNone(fault, res.describe())
        self.assertIsNotNone(stuck, "no stuck_collective report" + res.describe())
        m = stuck[1]
        self.assertEqual(int(m.group(1)), 1, res.describe())          # culprit
        self.assertEqual(int(m.group(4)), 30, res.describe())         # its step
        self.assertEqual(m.group(6), "all_reduce")
        seq = int(m.group(7))
        self.assertGreater(seq, 0)
        self.assertEqual(m.group(8), "0,2", res.describe())            # the waiting ranks
        latency = stuck[0] - fault[0]
        self.assertLess(latency, DETECT_BOUND, f"hang reported {latency:.2f}s after the fault" + res.describe())
        self.assertGreater(latency, HANG - HB - 0.3, f"hang reported too early ({latency:.2f}s)" + res.describe())
        # the report comes before anything is killed
        stop = w.first(re.compile(r"error: stopping this node's workers"), "err")
        self.assertIsNotNone(stop, res.describe())
        self.assertLessEqual(stuck[0], stop[0])
        self.assertLess(t_exit - stuck[0], 5.0, "teardown after the report too slow" + res.describe())

        report = self.failure_json()
        hang = report["hang"]
        self.assertEqual(hang["kind"], "stuck_collective")
        self.assertEqual(hang["culprits"], [1])
        self.assertEqual(sorted(hang["waiting"]), [0, 2])
        self.assertEqual(hang["sequence"], seq)
        self.assertEqual(hang["op"], "all_reduce")
        self.assertEqual(hang["hang_timeout_s"], HANG)
        self.assertIn("rank 1", hang["summary"])
        self.assertIn(f"#{seq}", hang["summary"])
        ranks = {r["rank"]: r for r in hang["ranks"]}
        self.assertEqual(sorted(ranks), [0, 1, 2])
        self.assertEqual(ranks[1]["role"], "culprit")
        self.assertEqual(ranks[1]["step"], 30)
        for r in (0, 2):
            self.assertEqual(ranks[r]["role"], "waiting")
            self.assertIn(seq, [c["sequence"] for c in ranks[r]["open_collectives"]])
        for r in ranks.values():
            self.assertGreater(r["pid"], 0)
            self.assertIn("host", r)
        self.assert_stacks([0, 1, 2])
        self.assert_no_leftovers(timeout=2.0)

    def test_silent_rank(self):
        launch, w = self.start_train(2, fault="silent@20:1")
        res, t_exit = self.finish_watched(launch, w, 60)
        self.assertIsNotNone(t_exit, res.describe())
        self.assertEqual(res.rc, HANG_EXIT, res.describe())
        fault = w.first(FAULT_RE)
        silent = w.first(SILENT_RE, "err")
        self.assertIsNotNone(fault, res.describe())
        self.assertIsNotNone(silent, "no silent_rank report" + res.describe())
        self.assertEqual(int(silent[1].group(1)), 1, res.describe())
        latency = silent[0] - fault[0]
        self.assertLess(latency, DETECT_BOUND, f"silent rank reported {latency:.2f}s after the fault" + res.describe())
        self.assertGreater(latency, HANG - HB - 0.3, f"reported too early ({latency:.2f}s)" + res.describe())
        hang = self.failure_json()["hang"]
        self.assertEqual(hang["kind"], "silent_rank")
        self.assertEqual(hang["culprits"], [1])
        self.assertIn("rank 1", hang["summary"])
        self.assert_stacks([0])  # the waiting rank dumps; the silent one may not be able to
        self.assert_no_leftovers(timeout=2.0)

    def test_sigstop_of_a_worker(self):
        launch, w = self.start_train(2)
        self.assertIsNotNone(w.wait_for(re.compile(r"ddptrain: mlp,"), 30, "out"), "ddptrain did not start")
        time.sleep(1.5)  # a few heartbeats in steady state
        victims = [p for p, cmd in find_marked(self.token) if cmd.startswith(str(DDPTRAIN))
                   and proc_env_rank(p) == 1]
        self.assertEqual(len(victims), 1, f"rank 1's worker not found: {find_marked(self.token)}")
        victim = victims[0]
        os.kill(victim, signal.SIGSTOP)
        t_stop = time.monotonic()
        silent = w.wait_for(SILENT_RE, DETECT_BOUND + 5, "err")
        res, t_exit = self.finish_watched(launch, w, 30)  # cleanup SIGKILLs leftovers, stopped or not
        self.assertIsNotNone(silent, "no silent_rank report for the stopped worker" + res.describe())
        self.assertEqual(int(silent[1].group(1)), 1, res.describe())
        self.assertEqual(int(silent[1].group(3)), victim, res.describe())
        latency = silent[0] - t_stop
        self.assertLess(latency, DETECT_BOUND, f"stopped worker reported after {latency:.2f}s" + res.describe())
        self.assertIsNotNone(t_exit, res.describe())
        self.assertEqual(res.rc, HANG_EXIT, res.describe())
        self.assertEqual(self.failure_json()["hang"]["kind"], "silent_rank")
        # torn down, the stopped process too (SIGKILL works on a stopped process)
        self.assertFalse(is_alive(victim, self.token), f"stopped worker {victim} survived")
        self.assert_no_leftovers(timeout=2.0)

    def test_slow_rank_is_a_straggler_not_a_hang(self):
        launch, w = self.start_train(3, fault="slow=0.3@5:1", steps=30)
        res, t_exit = self.finish_watched(launch, w, 90)
        self.assertIsNotNone(t_exit, res.describe())
        self.assertEqual(res.rc, 0, res.describe())
        self.assertNotIn("stuck_collective", res.err)
        self.assertNotIn("silent_rank", res.err)
        self.assertIn("done: 30 steps", res.out, res.describe())
        self.assertFalse((self.attempt_dir() / "failure.json").exists())
        straggler = w.first(STRAGGLER_RE, "err")
        self.assertIsNotNone(straggler, "no straggler warning for rank 1 (sleeps 0.3 s per step)" + res.describe())
        self.assertEqual(int(straggler[1].group(1)), 1, res.describe())


# ----------------------------------------------------------------------------- restart, plain scripts

class RestartAndPlainTests(HangTestCase):
    def test_hang_restarts_from_checkpoint(self):
        ckpt = self.tmp / "ckpt"
        launch, w = self.start_train(2, fault="hang@12:1", steps=30, launcher_args=["--max-restarts=1"],
                                     train_args=["--checkpoint-dir", ckpt, "--checkpoint-every", "5"])
        res, t_exit = self.finish_watched(launch, w, 90)
        self.assertIsNotNone(t_exit, res.describe())
        self.assertEqual(res.rc, 0, res.describe())
        stuck = w.first(STUCK_RE, "err")
        self.assertIsNotNone(stuck, res.describe())
        self.assertEqual(int(stuck[1].group(1)), 1)
        self.assertRegex(res.err, r"restarting the job as attempt 1")
        resumed = RESUMED_RE.search(res.out + res.err)
        self.assertIsNotNone(resumed, "ddptrain did not resume" + res.describe())
        self.assertEqual(int(resumed.group(2)), 10, res.describe())
        self.assertIn("done: 20 steps", res.out, res.describe())
        hang = self.failure_json(0)["hang"]
        self.assertEqual((hang["kind"], hang["culprits"]), ("stuck_collective", [1]))
        self.assertTrue((self.attempt_dir(1) / "rank_0").is_dir())
        self.assertFalse((self.attempt_dir(1) / "failure.json").exists())
        self.assert_no_leftovers(timeout=2.0)

    def test_plain_script_is_not_killed(self):
        # no runtime, no heartbeats: supervised by process state only, whatever the timeout
        args = ["--nproc-per-node=2", f"--heartbeat-interval={HB}", "--hang-timeout=1", "/bin/sh", "-c",
                'sleep 4; echo "plain $RANK finished"']
        res = self.run_launcher(args, timeout=30)
        self.assertEqual(res.rc, 0, res.describe())
        self.assertGreaterEqual(res.elapsed, 3.9)
        self.assertEqual(sorted(res.out_by_rank()), [0, 1], res.describe())
        for lines in res.out_by_rank().values():
            self.assertTrue(any("finished" in l for l in lines), res.describe())
        self.assertNotRegex(res.err, r"silent_rank|stuck_collective|hang")
        self.assertFalse((self.attempt_dir() / "failure.json").exists())


# ----------------------------------------------------------------------------- status

class StatusTests(HangTestCase):
    def setUp(self):
        if not status_available():
            self.skipTest(f"`{BIN} status --help` does not exit 0: ddplaunch status is not available yet")
        super().setUp()

    def _wait_status(self, pred, timeout=20):
        last = [None, None]

        def probe():
            doc, r = self.status_json()
            last[0], last[1] = doc, r
            return doc is not None and pred(doc)
        ok = wait_until(probe, timeout, interval=0.2)
        return ok, last[0], last[1]

    def test_status_of_a_running_job(self):
        launch, w = self.start_train(3, fault="slow=0.2@1:*", steps=40)

        def all_stepping(doc):
            ranks = self.status_ranks(doc)
            return len(ranks) == 3 and all(r.get("monitored") and (r.get("step") or 0) >= 2
                                           for r in ranks.values())
        ok, doc, r = self._wait_status(all_stepping, 30)
        self.assertTrue(ok, f"status never showed 3 stepping ranks: rc={r.returncode if r else None} "
                            f"out={r.stdout if r else ''} err={r.stderr if r else ''}")
        self.assertEqual(doc["job_id"], self.job_id)
        self.assertEqual(doc["generation"], 0)
        self.assertEqual(doc["restarts_used"], 0)
        self.assertEqual(doc["world_size"], 3)
        self.assertEqual(doc["state"], "running")
        self.assertGreater(doc["elapsed_s"], 0)
        live = {p for p, _ in find_marked(self.token)}
        for rank, info in self.status_ranks(doc).items():
            self.assertIn(info["pid"], live, f"rank {rank}: pid not a live worker: {info}")
            self.assertEqual(proc_env_rank(info["pid"]), rank)
            self.assertTrue(info["host"])
            self.assertIn(info["phase"], PHASES)
            self.assertLess(info["heartbeat_age_s"], HANG, info)
            self.assertGreater(info["step_seconds"], 0.15, info)  # each step sleeps 0.2 s
            self.assertIn("open_collectives", info)
        table = self.status()
        self.assertEqual(table.returncode, 0, table.stderr)
        for rank in range(3):
            self.assertRegex(table.stdout, rf"(?m)^\s*{rank}\s+\S+\s+\d+", table.stdout)
        res, t_exit = self.finish_watched(launch, w, 60)
        self.assertEqual(res.rc, 0, res.describe())
        # once the job is gone, status does not report it as running
        after = self.status("--json")
        if after.returncode == 0:
            self.assertNotEqual(json.loads(after.stdout).get("state"), "running", after.stdout)

    def test_status_after_a_restart(self):
        launch, w = self.start_train(2, fault="hang@5:1", launcher_args=["--max-restarts=1"])
        listed_while_forming = []   # ranks shown in state "rendezvous": none runs then

        def generation_1_stepping(d):
            if d.get("state") == "rendezvous" and self.status_ranks(d):
                listed_while_forming.append(d)
            return d.get("generation") == 1 and d.get("state") == "running" and \
                all((x.get("step") or 0) >= 1 for x in self.status_ranks(d).values())
        ok, doc, r = self._wait_status(generation_1_stepping, 40)
        self.assertTrue(ok, f"status never showed generation 1: {doc} {r.stderr if r else ''}"
                        f"\n{w.launch.err_path.read_text(errors='replace')[-3000:]}")
        self.assertEqual(listed_while_forming, [])
        self.assertEqual(doc["restarts_used"], 1)
        self.assertEqual(doc["max_restarts"], 1)
        self.assertEqual(doc["state"], "running")
        self.assertEqual(sorted(self.status_ranks(doc)), [0, 1])
        launch.proc.send_signal(signal.SIGTERM)
        res, t_exit = self.finish_watched(launch, w, 20)
        self.assertEqual(res.rc, 128 + signal.SIGTERM, res.describe())
        self.assert_no_leftovers(timeout=2.0)


if __name__ == "__main__":
    unittest.main()
