"""The worker runtime's init and Gloo all-reduce, through `ddpbench allreduce`.

  * under ddplaunch (2 and 3 ranks): init from the agent, correct sums, ranks = N;
  * without ddplaunch, from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT alone
    (rank 0 serves the TCP store);
  * clear errors when the environment is missing or inconsistent;
  * a rank SIGKILLed in the middle of the benchmark: ddplaunch exits 128+9
    promptly and nothing is left running.

ddpbench is found through $DDPBENCH_BIN, else <repo>/build/worker/ddpbench/ddpbench;
the tests skip when it is missing or was built without the runtime.
"""

import json
import os
import signal
import subprocess
import time
import unittest
from pathlib import Path

from launcher_harness import REPO, LauncherTestCase, free_port, is_alive, read_stat, wait_until

DDPBENCH = Path(os.environ.get("DDPBENCH_BIN")
                or (REPO / "build" / "worker" / "ddpbench" / "ddpbench"))

SMALL_RUN = ["allreduce", "--sizes", "4K,1M", "--iters", "2", "--warmup", "1", "--json"]
SMALL_BYTES = [4096, 1 << 20]


def ddpbench_has_allreduce():
    try:
        r = subprocess.run([str(DDPBENCH), "allreduce", "--help"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def json_rows(lines):
    rows = []
    for line in lines:
        line = line.strip()
        if line.startswith("{"):
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("bench") == "allreduce":
                rows.append(row)
    return rows


def environ_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return {}
    env = {}
    for item in data.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


class RuntimeInitTest(LauncherTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not DDPBENCH.is_file() or not os.access(DDPBENCH, os.X_OK):
            raise unittest.SkipTest(f"ddpbench binary not found at {DDPBENCH} (set DDPBENCH_BIN)")
        if not ddpbench_has_allreduce():
            raise unittest.SkipTest(f"{DDPBENCH} has no allreduce command (built without the runtime)")

    # ---- helpers

    def check_rows(self, rows, nranks, res):
        by_bytes = {r["bytes"]: r for r in rows}
        self.assertEqual(sorted(by_bytes), SMALL_BYTES, res.describe())
        for nbytes, row in by_bytes.items():
            self.assertIs(row["correct"], True, f"{row}{res.describe()}")
            self.assertEqual(row["ranks"], nranks, f"{row}{res.describe()}")
            self.assertEqual(row["impl"], "ddplaunch", f"{row}")
            self.assertEqual(row["backend"], "gloo", f"{row}")
            self.assertEqual(row["dtype"], "float32", f"{row}")
            self.assertGreater(row["seconds"], 0, f"{row}")

    def run_direct(self, env_extra, args=SMALL_RUN, timeout=20.0):
        """ddpbench started by the test itself, without ddplaunch (a fresh session;
        the harness kills and checks it like a launcher)."""
        env = self.env(env_extra)
        return self.finish(self.start(None, raw_cmd=[str(DDPBENCH), *args], env=env), timeout)

    def ddpbench_workers(self):
        """{RANK: pid} of live ddpbench processes carrying this test's token."""
        found = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            env = environ_of(pid)
            if env.get("DDPT_TOKEN") != self.token or "RANK" not in env:
                continue
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                continue
            if os.path.basename(exe).startswith("ddpbench") and is_alive(pid, self.token):
                found[int(env["RANK"])] = pid
        return found

    # ---- (a) under ddplaunch

    def under_ddplaunch(self, nranks):
        res = self.run_launcher([f"--nproc-per-node={nranks}", "--log-level", "warn",
                                 str(DDPBENCH), *SMALL_RUN], timeout=90)
        self.assertEqual(res.rc, 0, res.describe())
        by_rank = res.out_by_rank()
        self.assertIn(0, by_rank, res.describe())
        self.check_rows(json_rows(by_rank[0]), nranks, res)
        # only rank 0 reports
        for r in range(1, nranks):
            self.assertEqual(json_rows(by_rank.get(r, [])), [], res.describe())
        self.assert_no_leftovers()

    def test_allreduce_under_ddplaunch_2_ranks(self):
        self.under_ddplaunch(2)

    def test_allreduce_under_ddplaunch_3_ranks(self):
        self.under_ddplaunch(3)

    # ---- (b) without ddplaunch, torchrun-style environment only

    def test_init_from_plain_env_without_ddplaunch(self):
        port = free_port()
        launches = []
        for rank in range(2):
            env = self.env({"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                            "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                            "MASTER_PORT": str(port)})
            launches.append(self.start(None, raw_cmd=[str(DDPBENCH), *SMALL_RUN], env=env))
        results = [self.finish(l, timeout=60) for l in launches]
        for rank, res in enumerate(results):
            self.assertEqual(res.rc, 0, f"rank {rank}{res.describe()}")
        self.check_rows(json_rows(results[0].out.splitlines()), 2, results[0])
        self.assertEqual(json_rows(results[1].out.splitlines()), [], results[1].describe())
        self.assert_no_leftovers()

    # ---- (c), (d) clear errors

    def test_nothing_set_is_a_clear_error(self):
        res = self.run_direct({})
        self.assertEqual(res.rc, 1, res.describe())
        self.assertIn("RANK is not set", res.err, res.describe())

    def test_rank_outside_world_is_a_clear_error(self):
        res = self.run_direct({"RANK": "3", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
        self.assertNotEqual(res.rc, 0, res.describe())
        self.assertIsNotNone(res.rc)
        self.assertIn("RANK", res.err, res.describe())
        self.assertIn("WORLD_SIZE", res.err, res.describe())
        self.assertIn("3", res.err, res.describe())

    # ---- (e) a rank killed mid-benchmark

    def test_rank_sigkilled_mid_benchmark_tears_down_job(self):
        launch = self.start(["--nproc-per-node=2", "--log-level", "warn", "--shutdown-grace=2",
                             str(DDPBENCH), "allreduce", "--sizes", "64M", "--iters", "1000000",
                             "--warmup", "1", "--json"])
        workers = wait_until(lambda: (lambda w: w if len(w) == 2 else None)(self.ddpbench_workers()),
                             30.0)
        if not workers:
            res = self.finish(launch, timeout=1)
            self.fail(f"the two ddpbench workers did not appear within 30 s{res.describe()}")
        # let init finish and the all-reduces get going (each 64 MiB round takes ~0.1 s)
        time.sleep(2.0)
        self.assertIsNone(launch.proc.poll(), "ddplaunch ended before the kill")
        self.assertTrue(is_alive(workers[1], self.token), "rank 1 ended before the kill")
        # still in the benchmark: rank 1 is the worker ddplaunch started (its child)
        self.assertEqual(read_stat(workers[1])[1], launch.pid)
        t_kill = time.monotonic()
        os.kill(workers[1], signal.SIGKILL)
        try:
            launch.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass  # finish() below kills everything and fails the test
        elapsed = time.monotonic() - t_kill
        res = self.finish(launch, timeout=0.1)
        self.assertEqual(res.rc, 128 + signal.SIGKILL, res.describe())
        # rank 0 is blocked in an all-reduce with a dead peer: it must be torn down
        # by ddplaunch (SIGTERM, SIGKILL after the 2 s grace at worst), not wait forever
        self.assertLess(elapsed, 5.0, f"ddplaunch took {elapsed:.2f}s to exit{res.describe()}")
        self.assert_dead(workers.values(), timeout=2.0, what="ddpbench worker")
        self.assert_no_leftovers()
        report = self.failure_json(0)
        self.assertEqual(report["root_cause"]["rank"], 1, report)
        self.assertEqual(report["root_cause"]["signal_name"], "SIGKILL", report)


if __name__ == "__main__":
    unittest.main()
