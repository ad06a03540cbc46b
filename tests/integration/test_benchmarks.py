"""The benchmarks under tests/bench, and `ddpbench heartbeats`, still run: each
one once, at its smallest settings, against the real binaries and its real peer
(Debian's torch and torchrun; for heartbeats, the same load without resource
metrics). These check that a benchmark works, completes and reports sane,
self-consistent figures (both sides measured, ratios = peer / ours, targets
judged from those figures, nothing left running), not how fast anything is:
speed targets live in the benchmarks' own output."""

import json
import os
import subprocess
import tempfile
import unittest
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent / "bench"
PYTHON = os.environ.get("PYTHON_EXEC") or "/usr/bin/python3"
DDPTRAIN = os.environ.get("DDPTRAIN_BIN")
DDPBENCH = Path(os.environ.get("DDPBENCH_BIN") or HERE.parent.parent / "build" / "worker" / "ddpbench" / "ddpbench")
DDPLAUNCH = os.environ.get("DDPLAUNCH_BIN")


# Every process a benchmark starts inherits this variable (the launchers pass
# the environment on), so leftovers can be found even while other tests run
# the same programs.
MARK_VAR = "DDP_BENCH_SMOKE_MARK"


def run_marked(cmd, mark, timeout, runtime_dir):
    """Runs a benchmark; the ddplaunch jobs it starts register under
    runtime_dir (their XDG_RUNTIME_DIR), not in the tester's own `ddplaunch list`."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", XDG_RUNTIME_DIR=str(runtime_dir), **{MARK_VAR: mark})
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=env)
    if res.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd[:3]))} exited {res.returncode}\nstdout:\n{res.stdout[-3000:]}\n"
                             f"stderr:\n{res.stderr[-3000:]}")
    return res


def run_bench(script, *args, mark, runtime_dir, timeout=120):
    return run_marked([PYTHON, BENCH / script, *args], mark, timeout, runtime_dir)


def json_document(res):
    """The one JSON line of a --json run."""
    docs = [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    if len(docs) != 1:
        raise AssertionError(f"expected one JSON line, got {len(docs)}:\n{res.stdout[-3000:]}")
    return docs[0]


def processes_marked(mark):
    """Pids whose environment carries this run's mark."""
    needle = f"{MARK_VAR}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


class BenchmarkSmokeTest(unittest.TestCase):

    def setUp(self):
        self.mark = uuid.uuid4().hex
        runtime = tempfile.TemporaryDirectory(prefix="bench-runtime-")
        self.addCleanup(runtime.cleanup)
        self.runtime_dir = Path(runtime.name)

    def tearDown(self):
        left = processes_marked(self.mark)
        for pid in left:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        self.assertEqual(left, [], "processes of the benchmark outlived it")

    def bench(self, script, *args, timeout=120):
        return run_bench(script, *args, mark=self.mark, runtime_dir=self.runtime_dir, timeout=timeout)

    def test_allreduce_bench(self):
        res = self.bench("allreduce_bench.py", "--sizes", "64K,1M", "--repeat", 1, "--iters", 2, "--warmup", 1,
                        "--json")
        doc = json_document(res)
        self.assertEqual([r["bytes"] for r in doc["rows"]], [64 << 10, 1 << 20])
        for row in doc["rows"]:
            self.assertGreater(row["ddplaunch_seconds"], 0)
            self.assertGreater(row["torch_seconds"], 0)
            self.assertAlmostEqual(row["ratio"], row["torch_seconds"] / row["ddplaunch_seconds"], places=6)
            self.assertGreater(row["bucket_seconds"], 0)  # the reduction-buffer (DDP bucket) run
        target_row = doc["rows"][1]  # 1 MiB: the target applies from there up
        self.assertEqual(target_row["met"], target_row["ratio"] >= 1.0)
        self.assertIn("busbw", res.stdout)

    @unittest.skipUnless(DDPTRAIN, "needs ddptrain (built with LibTorch)")
    def test_train_bench(self):
        res = self.bench("train_bench.py", "--mlp-sizes", "16,32,4", "--samples", 64, "--batch-size", 4,
                        "--steps", 3, "--warmup", 1, "--repeat", 1, "--bucket-cap-mb", "25,0.001", "--json",
                        timeout=180)
        doc = json_document(res)
        self.assertEqual(doc["parameters"], 16 * 32 + 32 + 32 * 4 + 4)
        configs = doc["configurations"]
        self.assertEqual([c["bucket_cap_mb"] for c in configs], [25, 0.001])
        for c in configs:
            for key in ("ddptrain_step_s", "torch_step_s", "floor_step_s"):
                self.assertGreater(c[key], 0, key)
            self.assertAlmostEqual(c["ratio"], c["ddptrain_step_s"] / c["torch_step_s"], places=6)
            self.assertEqual(c["ratio_met"], c["ratio"] <= doc["target"]["ratio"])
            self.assertGreaterEqual(c["hidden"], 0)
            self.assertLessEqual(c["hidden"], 1)
        self.assertEqual(res.stdout.count("floor (no comm)"), 2)

    @unittest.skipUnless(DDPTRAIN, "needs ddptrain (built with LibTorch)")
    def test_fault_bench(self):
        # The Gloo timeout must outlast ddplaunch's detection (hang timeout + up to 2
        # heartbeat intervals of 1 s, and a busy machine's delays): at 4 s a waiting
        # rank's own timeout sometimes came first and was reported as the failure.
        res = self.bench("fault_bench.py", "--repeat", 1, "--hang-timeout", 2, "--torch-timeout", 10, "--json",
                        timeout=210)
        doc = json_document(res)
        self.assertEqual(doc["failed"], [])
        rows = {(r["launcher"], r["kind"]): r for r in doc["results"]}
        self.assertEqual(set(rows), {(l, k) for l in ("ddplaunch", "torchrun") for k in ("crash", "hang", "p2p-hang")}
                         | {("ddplaunch", "python-hang")})
        for kind in ("crash", "hang", "python-hang", "p2p-hang"):
            self.assertTrue(rows[("ddplaunch", kind)]["names_culprit"], kind)
        for kind in ("python-hang", "p2p-hang"):
            self.assertEqual(rows[("ddplaunch", kind)]["exit_codes"], [124], kind)
        self.assertEqual(rows[("ddplaunch", "hang")]["exit_codes"], [124])  # the documented hang exit code
        # A hang is reported after the hang timeout, not before it.
        self.assertGreaterEqual(rows[("ddplaunch", "hang")]["median_s"], 2.0)
        # Its jobs registered in this test's runtime folder, not in the tester's own.
        self.assertTrue(list((self.runtime_dir / "ddplaunch" / "jobs").glob("faultbench-*.json")))

    def test_node_loss_bench(self):
        res = self.bench("node_loss_bench.py", "--repeat", 1, "--last-call", 2, "--warm-steps", 10, "--steps", 100,
                         "--json", timeout=300)
        doc = json_document(res)
        for side in ("ddplaunch", "torchrun"):
            [run] = doc["runs"][side]
            self.assertTrue(run["ok"], run)
            self.assertGreater(run["resumed_s"], 0, side)
            self.assertEqual(doc["medians_s"][side], run["resumed_s"], side)
        self.assertIn("ratio ddplaunch/torchrun", res.stdout)

    def test_node_loss_bench_losing_the_rendezvous_host(self):
        res = self.bench("node_loss_bench.py", "--lose", "coordinator", "--give-up", 8, "--repeat", 1,
                         "--last-call", 2, "--warm-steps", 10, "--steps", 100, "--json", timeout=300)
        doc = json_document(res)
        [ours] = doc["runs"]["ddplaunch"]
        self.assertTrue(ours["ok"], ours)
        self.assertGreater(ours["resumed_s"], 0)
        [theirs] = doc["runs"]["torchrun"]
        self.assertIsNone(theirs["resumed_s"], "torchrun's store lives on node 0")
        self.assertIn("torchrun   did not resume (the survivors did not resume within 8 s)", res.stdout)

    def test_companion_bench(self):
        res = self.bench("companion_bench.py", "--repeat", 1, "--steps", 200, "--widths", "32",
                         "--heartbeat-interval", "0.1", "--json", timeout=180)
        doc = json_document(res)
        [w] = doc["widths"]
        self.assertEqual(w["width"], 32)
        for key in ("step_ms_with_companion", "step_ms_without", "ab_step_ms_wrapped", "ab_step_ms_unwrapped"):
            self.assertGreater(w[key], 0, key)
        self.assertAlmostEqual(w["ratio"], w["step_ms_with_companion"] / w["step_ms_without"], places=6)
        self.assertAlmostEqual(w["ab_ratio"], w["ab_step_ms_wrapped"] / w["ab_step_ms_unwrapped"], places=6)
        # Ten heartbeats a second: the heartbeat thread's CPU time is measured, not zero.
        self.assertGreater(w["companion_cpu_ms_per_s_per_rank"], 0)
        self.assertGreaterEqual(w["ab_pairs"], 10)   # 200 steps in blocks of 10
        self.assertIn("--no-python-companion", res.stdout)

    def test_sync_bench(self):
        res = self.bench("sync_bench.py", "--quick", "--big-files", 1, "--small-files", 2, "--steps", 40,
                         "--ckpt-every", 10, "--json", timeout=120)
        doc = json_document(res)
        up = doc["upload"]
        self.assertEqual(up["files"], 3)
        self.assertEqual(len(up["runs"]["ddplaunch"]), 1)
        self.assertEqual(len(up["runs"]["aws"]), 1)
        self.assertGreater(up["ddplaunch_mib_s"], 0)
        self.assertGreater(up["aws_mib_s"], 0)
        self.assertAlmostEqual(up["ratio"], up["ddplaunch_mib_s"] / up["aws_mib_s"], places=6)
        steps = doc["steps"]
        self.assertEqual(steps["ckpts_per_run"], 4)  # at steps 10, 20, 30 and 40
        self.assertGreater(steps["step_ms_sync"], 0)
        self.assertGreater(steps["step_ms_no_sync"], 0)
        # One round: its two runs' ratio is the paired figure and the unpaired one alike.
        self.assertEqual(len(steps["round_overheads_percent"]), 1)
        self.assertAlmostEqual(steps["overhead_percent"], steps["round_overheads_percent"][0], places=6)
        self.assertAlmostEqual(steps["unpaired_overhead_percent"],
                               (steps["step_ms_sync"] / steps["step_ms_no_sync"] - 1) * 100, places=6)
        self.assertAlmostEqual(steps["overhead_percent"], steps["unpaired_overhead_percent"], places=6)
        self.assertEqual(steps["met"], steps["overhead_percent"] < doc["target_percent"])
        # CPU read from each launcher's zombie: its own threads and the ranks it reaped.
        self.assertGreater(steps["launcher_cpu_s_sync"], 0)
        self.assertGreater(steps["ranks_cpu_s_sync"], steps["launcher_cpu_s_sync"])
        self.assertGreater(steps["server_cpu_s_sync"], 0)   # it received the checkpoints
        self.assertIn("ratio ddplaunch/aws", res.stdout)

    def test_launch_bench(self):
        res = self.bench("launch_bench.py", "--repeat", 1, "--fast-peer-interval", 0, "--json")
        doc = json_document(res)
        for side in ("ddplaunch", "torchrun"):
            self.assertEqual(doc[side]["leftover_pids"], [], side)
            self.assertGreater(doc[side]["launch_median_s"], 0, side)
            self.assertGreater(doc[side]["teardown_median_s"], 0, side)

    @unittest.skipUnless(DDPBENCH.is_file(), f"needs ddpbench (set DDPBENCH_BIN; not at {DDPBENCH})")
    def test_heartbeat_bench(self):
        """`ddpbench heartbeats` at 64 agents x 8 ranks: both loads measured, every heartbeat
        answered, /metrics holding each rank's series, the ratios and the verdict made from them."""
        ddplaunch = ["--ddplaunch", DDPLAUNCH] if DDPLAUNCH else []
        res = run_marked([DDPBENCH, "heartbeats", "--nodes", 64, "--nproc-per-node", 8, "--rate", 4, "--seconds", 2,
                          "--rounds", 2, "--warmup", 0.5, "--scrapes", 2, *ddplaunch, "--json"], self.mark, 120,
                         self.runtime_dir)
        doc = json_document(res)
        self.assertEqual(doc["world_size"], 512)
        sides = doc["sides"]
        self.assertEqual(set(sides), {"resources", "no_resources"})
        # Series per rank (README): 12 from heartbeats; +6 /proc figures and +8 for the one GPU.
        for name, per_rank in (("resources", 26), ("no_resources", 12)):
            s = sides[name]
            self.assertEqual(s["resources_in_heartbeats"], name == "resources")
            self.assertEqual(s["heartbeats_failed"], 0, name)
            self.assertGreater(s["heartbeats_sent"], 0, name)
            self.assertEqual(s["heartbeats_answered"], s["heartbeats_sent"], name)
            # The windows count the beats due in them (64 agents at 4 Hz over about 2 s, in two windows):
            # each was sent, or skipped while the agent's previous one was unanswered, or never sent.
            self.assertLessEqual(s["heartbeats_sent"] + s["heartbeats_skipped"], s["heartbeats_due"] + 4, name)
            self.assertEqual(s["rate_kept"], s["heartbeats_sent"] >= 0.95 * s["heartbeats_due"], name)
            self.assertAlmostEqual(s["rate_hz_achieved"], s["heartbeats_sent"] / (64 * s["wall_s"]), places=6)
            self.assertGreater(s["wall_s"], 1.5, name)
            self.assertGreaterEqual(s["coordinator_cpu_s"], 0, name)
            self.assertAlmostEqual(s["coordinator_cores"], s["coordinator_cpu_s"] / s["wall_s"], places=6)
            lat = s["latency_ms"]
            self.assertGreater(lat["p50"], 0, name)
            self.assertLessEqual(lat["p50"], lat["p99"], name)
            self.assertLessEqual(lat["p99"], lat["max"], name)
            self.assertEqual(len(s["scrape_s"]), 2, name)
            self.assertGreater(s["scrape_median_s"], 0, name)
            self.assertLessEqual(s["scrape_median_s"], s["scrape_max_s"], name)
            self.assertEqual(s["scrape_rank_series"], 512 * per_rank, name)
            self.assertEqual(s["scrape_series_per_rank"], per_rank, name)
            self.assertGreater(s["scrape_series"], s["scrape_rank_series"], name)  # and the job's own
            self.assertGreater(s["scrape_bytes"], s["scrape_series"], name)
        ours, peer = sides["resources"], sides["no_resources"]
        self.assertAlmostEqual(doc["ratios"]["latency_p99"], ours["latency_ms"]["p99"] / peer["latency_ms"]["p99"],
                               places=6)
        self.assertAlmostEqual(doc["ratios"]["scrape_median"], ours["scrape_median_s"] / peer["scrape_median_s"],
                               places=6)
        if peer["coordinator_cores"] > 0:
            self.assertAlmostEqual(doc["ratios"]["coordinator_cores"],
                                   ours["coordinator_cores"] / peer["coordinator_cores"], places=6)
        else:  # under a clock tick of CPU time: no ratio rather than a made-up one
            self.assertIsNone(doc["ratios"]["coordinator_cores"])
        met = doc["meets_target"]
        self.assertEqual(met["coordinator_cores"], ours["coordinator_cores"] < doc["targets"]["coordinator_cores"])
        self.assertEqual(met["latency_p99"], ours["latency_ms"]["p99"] < doc["targets"]["latency_p99_ms"])
        self.assertEqual(met["all"], met["coordinator_cores"] and met["latency_p99"])

    @unittest.skipUnless(DDPBENCH.is_file(), f"needs ddpbench (set DDPBENCH_BIN; not at {DDPBENCH})")
    def test_heartbeat_bench_summary(self):
        ddplaunch = ["--ddplaunch", DDPLAUNCH] if DDPLAUNCH else []
        res = run_marked([DDPBENCH, "heartbeats", "--nodes", 8, "--nproc-per-node", 2, "--rate", 4, "--seconds", 0.5,
                          "--rounds", 1, "--warmup", 0.25, "--scrapes", 1, *ddplaunch], self.mark, 60,
                         self.runtime_dir)
        self.assertIn("ratio: with resources / without", res.stdout)
        self.assertRegex(res.stdout, r"heartbeat p99\s+[0-9.]+ ms\s+[0-9.]+ ms\s+[0-9.]+")
        self.assertRegex(res.stdout, r"/metrics series\s+[0-9]+ \(26\.0/rank\)\s+[0-9]+ \(12\.0/rank\)")
        self.assertRegex(res.stdout.splitlines()[-1], r"^(PASS|FAIL): coordinator CPU [0-9.]+ core \(target < 0\.5\) "
                                                       r"(met|missed); heartbeat p99 [0-9.]+ ms \(target < 10 ms\)")

    def test_diagnose_bench(self):
        res = self.bench("diagnose_bench.py", "--size", "4M", "--ranks", 8, "--repeat", 1)
        self.assertIn("ranks complete: 8/8", res.stdout)
        self.assertRegex(res.stdout, r"ddplaunch diagnose --json \(1 core\)\s+[0-9.]+ s\s+[0-9]+ MB/s")


if __name__ == "__main__":
    unittest.main()
