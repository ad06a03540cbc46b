"""ddptrain, the reference trainer, under ddplaunch: equal results on 1, 2
and 4 ranks, gradient accumulation, kill-and-resume from checkpoints, damaged
checkpoints, --init/--save-final with Python's torch.save/torch.load, agreement with
PyTorch's own DistributedDataParallel (Gloo), and bad input.

Every rank runs on the CPU with Gloo and OMP_NUM_THREADS=1. Parameter files are read
by a helper run with $PYTHON_EXEC (torch 1.13 from Debian's python3-torch); tests
that need torch are skipped when it cannot be imported.

Tolerances compare per tensor max|a - b| / max|b|: 1e-5 in fp32, 1e-10 in fp64;
resumed runs must be bitwise equal (torch.equal) to uninterrupted ones.
"""

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import unittest
import zlib
from pathlib import Path

from launcher_harness import (PYTHON, REPO, LauncherTestCase, Result, find_marked, kill_marked, signal_step,
                              torch_available, wait_until, worker)

DDPTRAIN = Path(os.environ.get("DDPTRAIN_BIN") or (REPO / "build" / "worker" / "ddptrain" / "ddptrain")).absolute()
REFERENCE = worker("torch_ddp_mlp.py")
TORCH_OK = torch_available()

MLP_NAMES = ["fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
MLP_SHAPES = {"fc0.weight": [64, 32], "fc0.bias": [64], "fc1.weight": [64, 64], "fc1.bias": [64],
              "fc2.weight": [10, 64], "fc2.bias": [10]}  # the default --mlp-sizes 32,64,64,10

RESUMED_RE = re.compile(r"resuming from (\S+) \(step (\d+)\)")
CKPT_RE = re.compile(r"^ckpt_(\d+)\.ddpckpt$")

# Reads pairs of state_dict files and describes how they differ (JSON on stdout).
_COMPARE = r"""
import json, sys, torch
rows = []
for a, b in json.loads(sys.argv[1]):
    da, db = torch.load(a), torch.load(b)
    row = {"a": a, "b": b, "names_a": list(da), "names_b": list(db), "equal": True,
           "max_rel": 0.0, "tensors": {}}
    for k, ta in da.items():
        tb = db.get(k)
        t = {"shape": list(ta.shape), "dtype": str(ta.dtype).replace("torch.", "")}
        if tb is None or ta.shape != tb.shape:
            t.update(equal=False, rel=float("inf"))
        else:
            diff = (ta.double() - tb.double()).abs().max().item() if ta.numel() else 0.0
            scale = tb.double().abs().max().item() if tb.numel() else 0.0
            t.update(equal=bool(torch.equal(ta, tb)) and ta.dtype == tb.dtype,
                     rel=diff / scale if scale > 0 else diff)
        row["tensors"][k] = t
        row["equal"] = row["equal"] and t["equal"]
        row["max_rel"] = max(row["max_rel"], t["rel"])
    row["equal"] = row["equal"] and list(da) == list(db)
    rows.append(row)
print(json.dumps(rows))
"""


def with_metadata(checkpoint, meta):
    """A checkpoint file (runtime/common/src/checkpoint_store.cpp's format) with its
    metadata replaced and its checksums made right again."""
    fields = struct.unpack_from("<IIqQQ", checkpoint, 8)
    meta_len, payload_len = fields[3], fields[4]
    head_len = 8 + struct.calcsize("<IIqQQ")
    payload = checkpoint[head_len + 8 + meta_len:head_len + 8 + meta_len + payload_len]
    header = checkpoint[:8] + struct.pack("<IIqQQ", fields[0], fields[1], fields[2], len(meta), len(payload))
    header += struct.pack("<I", zlib.crc32(meta + payload, zlib.crc32(header)))
    header += struct.pack("<I", zlib.crc32(header))
    return header + meta + payload + checkpoint[-8:]


def checkpoint_steps(directory):
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(int(m.group(1)) for m in map(CKPT_RE.match, names) if m)


def proc_environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


class DdptrainCase(LauncherTestCase):
    """ddplaunch + ddptrain runs with bounded timeouts; everything reaped by the harness."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not DDPTRAIN.is_file() or not os.access(DDPTRAIN, os.X_OK):
            raise unittest.SkipTest(f"ddptrain binary not found at {DDPTRAIN} (set DDPTRAIN_BIN)")

    def train_env(self):
        # Gloo on loopback whatever the host name resolves to; one thread per rank
        # so that 4 ranks on a small machine do not oversubscribe it.
        return {"GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo"),
                "OMP_NUM_THREADS": "1"}

    def launch_args(self, nproc, program, args, restarts=0):
        return [f"--nproc-per-node={nproc}", f"--max-restarts={restarts}", *program, *map(str, args)]

    def train(self, nproc, *args, restarts=0, timeout=60, expect_rc=0):
        """ddplaunch --nproc-per-node nproc ddptrain ARGS; the Result."""
        res = self.run_launcher(self.launch_args(nproc, [DDPTRAIN], args, restarts),
                                env_extra=self.train_env(), timeout=timeout)
        if expect_rc is not None:
            self.assertEqual(res.rc, expect_rc, res.describe())
        return res

    def run_direct(self, program, args, timeout=60):
        """One process without ddplaunch (carries the test token, so cleanup reaps it)."""
        cmd = [*map(str, program), *map(str, args)]
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               env=self.env(self.train_env()), cwd=str(self.tmp), timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_marked(self.token)
            self.fail(f"{' '.join(cmd)}: still running after {timeout} s")
        return Result(cmd, p.returncode, p.stdout, p.stderr, time.monotonic() - t0)

    # ---- parameter files

    def compare(self, *pairs):
        """Rows describing each (a, b) pair of state_dict files (see _COMPARE)."""
        arg = json.dumps([[str(a), str(b)] for a, b in pairs])
        res = self.run_direct([PYTHON, "-c", _COMPARE], [arg], timeout=60)
        self.assertEqual(res.rc, 0, res.describe())
        return json.loads(res.out)

    def assert_close(self, row, rel, what=""):
        self.assertEqual(row["names_a"], row["names_b"], what)
        worst = {k: t["rel"] for k, t in row["tensors"].items() if not t["rel"] <= rel}
        self.assertEqual(worst, {}, f"{what}: {row['a']} vs {row['b']}: relative difference > {rel}")

    def assert_bitwise(self, row, what=""):
        differ = {k: t["rel"] for k, t in row["tensors"].items() if not t["equal"]}
        self.assertEqual(row["names_a"], row["names_b"], what)
        self.assertEqual(differ, {}, f"{what}: {row['a']} vs {row['b']} not bitwise equal")
        self.assertTrue(row["equal"], what)

    def assert_mlp_layout(self, row, dtype="float32"):
        self.assertEqual(row["names_a"], MLP_NAMES)
        self.assertEqual({k: t["shape"] for k, t in row["tensors"].items()}, MLP_SHAPES)
        self.assertEqual({t["dtype"] for t in row["tensors"].values()}, {dtype})


@unittest.skipUnless(TORCH_OK, "PYTHON_EXEC cannot import torch.distributed")
class TrainingTest(DdptrainCase):
    """Numerical equalities (parameters read back with torch.load)."""

    # The kill-and-resume runs: 2 ranks, momentum so optimizer state matters.
    CKPT_ARGS = ("--batch-size", 8, "--momentum", 0.9, "--samples", 512, "--log-every", 0)
    CKPT_STEPS = 30

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.shared = Path(tempfile.mkdtemp(prefix="ddpt-shared-"))
        cls.addClassCleanup(shutil.rmtree, cls.shared, ignore_errors=True)
        cls._uninterrupted = None

    def uninterrupted(self):
        """Final parameters of an uninterrupted CKPT_ARGS run (computed once per class)."""
        cls = type(self)
        if cls._uninterrupted is None:
            path = cls.shared / "uninterrupted.pt"
            self.train(2, *self.CKPT_ARGS, "--steps", self.CKPT_STEPS, "--save-final", path)
            self.assertTrue(path.is_file())
            cls._uninterrupted = path
        return cls._uninterrupted

    def assert_resumed(self, res, min_step):
        m = RESUMED_RE.search(res.out)
        self.assertIsNotNone(m, "no 'resuming from' line" + res.describe())
        self.assertGreaterEqual(int(m.group(2)), min_step, res.describe())
        self.assertIn("restarting the job as attempt 1", res.err, res.describe())
        return int(m.group(2))

    # ---- equal results on 1, 2 and 4 ranks

    def world_sizes(self, precision, rel):
        files = {}
        for world, batch in ((1, 32), (2, 16), (4, 8)):  # global batch 32 each time
            files[world] = self.tmp / f"w{world}.pt"
            res = self.train(world, "--batch-size", batch, "--steps", 10, "--momentum", 0.9,
                             "--samples", 256, "--precision", precision, "--log-every", 0,
                             "--save-final", files[world])
            self.assertIn(f"batch {batch} x {world} = 32", res.out, res.describe())
        rows = self.compare((files[2], files[1]), (files[4], files[1]))
        dtype = "float64" if precision == "fp64" else "float32"
        for row, world in zip(rows, (2, 4)):
            self.assert_mlp_layout(row, dtype)
            self.assert_close(row, rel, f"{precision}: {world} ranks vs 1 rank")

    def test_world_sizes_agree_fp32(self):
        self.world_sizes("fp32", 1e-5)

    def test_world_sizes_agree_fp64(self):
        self.world_sizes("fp64", 1e-10)

    def test_resume_on_another_world_size_with_a_global_batch(self):
        # What an elastic job does after losing or gaining nodes: the checkpoint
        # of a 2-rank run, resumed on 1 rank and on 4, with the same global batch.
        common = ("--global-batch-size", 16, "--momentum", 0.9, "--samples", 256, "--precision", "fp64",
                  "--log-every", 0)
        reference = self.tmp / "uninterrupted.pt"
        self.train(2, *common, "--steps", 20, "--save-final", reference)
        for world in (1, 4):
            ck = self.tmp / f"ck{world}"
            first = self.train(2, *common, "--steps", 10, "--checkpoint-dir", ck)
            self.assertIn("batch 8 x 2 = 16", first.out, first.describe())
            final = self.tmp / f"resumed{world}.pt"
            res = self.train(world, *common, "--steps", 20, "--checkpoint-dir", ck, "--save-final", final)
            self.assertIn(f"batch {16 // world} x {world} = 16", res.out, res.describe())
            self.assertIn(f"the checkpoint was written by 2 rank(s); continuing on {world} with the same global "
                          "batch 16", res.out, res.describe())
            self.assertNotIn("warning", res.out, res.describe())
            (row,) = self.compare((final, reference))
            self.assert_mlp_layout(row, "float64")
            self.assert_close(row, 1e-10, f"10 steps on 2 ranks then 10 on {world} vs 20 on 2")

    def test_a_world_size_that_does_not_divide_the_global_batch_is_refused(self):
        res = self.train(3, "--global-batch-size", 16, "--steps", 2, "--log-every", 0, expect_rc=None)
        self.assertNotEqual(res.rc, 0, res.describe())
        self.assertIn("ddptrain: error: --global-batch-size 16 is not divisible by the 3 ranks of this run", res.err,
                      res.describe())

    def test_bf16_autocast_tracks_fp32(self):
        files, losses = {}, {}
        for precision in ("fp32", "bf16"):
            files[precision] = self.tmp / f"{precision}.pt"
            res = self.train(2, "--batch-size", 16, "--steps", 20, "--momentum", 0.9, "--samples", 256,
                             "--precision", precision, "--log-every", 0, "--save-final", files[precision])
            m = re.search(r"loss ([0-9.]+) -> ([0-9.]+)", res.out)
            self.assertIsNotNone(m, res.describe())
            losses[precision] = (float(m.group(1)), float(m.group(2)))
        (row,) = self.compare((files["bf16"], files["fp32"]))
        self.assert_mlp_layout(row, "float32")  # autocast: parameters and gradients stay float32
        self.assertGreater(row["max_rel"], 0, "bf16 changed nothing: autocast did not run")
        self.assert_close(row, 0.1, "bf16 vs fp32 after 20 steps")
        self.assertLess(losses["bf16"][1], losses["bf16"][0] - 0.2, "bf16 loss did not fall")
        self.assertAlmostEqual(losses["bf16"][1], losses["fp32"][1], delta=0.05)

    def test_grad_accum_equals_one_big_batch(self):
        files = {}
        for k in (1, 4):
            files[k] = self.tmp / f"accum{k}.pt"
            self.train(2, "--batch-size", 16, "--grad-accum", k, "--steps", 10, "--momentum", 0.9,
                       "--samples", 256, "--log-every", 0, "--save-final", files[k])
        (row,) = self.compare((files[4], files[1]))
        self.assert_close(row, 1e-5, "--grad-accum 4 vs 1")

    # ---- kill and resume

    def test_crash_and_resume_is_bitwise_equal(self):
        reference = self.uninterrupted()
        final = self.tmp / "resumed.pt"
        res = self.train(2, *self.CKPT_ARGS, "--steps", self.CKPT_STEPS, "--checkpoint-dir", self.tmp / "ck",
                         "--checkpoint-every", 5, "--inject-fault", "crash@12:1", "--save-final", final,
                         restarts=1)
        self.assertIn("injected fault at step 12", res.err, res.describe())
        self.assertEqual(self.assert_resumed(res, 10), 10)
        (row,) = self.compare((final, reference))
        self.assert_bitwise(row, "crash at step 12, resumed from step 10")

    def test_sigterm_preemption_stops_at_a_step_boundary_and_resumes_bitwise(self):
        # Slurm's --signal, scancel --signal=TERM or a preemption: SIGTERM to every
        # process of the step, the ranks first, with --stop-timeout. The ranks keep it.
        args = ("--batch-size", 8, "--momentum", 0.9, "--samples", 512, "--mlp-sizes", "32,1024,1024,10",
                "--log-every", 0, "--steps", 1500)
        launch_opts = ("--heartbeat-interval=0.2", "--stop-timeout=60")
        reference = self.tmp / "uninterrupted.pt"
        self.train(2, *args, "--save-final", reference, timeout=120)
        ck = self.tmp / "ck"
        launch = self.start([*launch_opts, *self.launch_args(2, [DDPTRAIN], [*args, "--checkpoint-dir", ck,
                                                                            "--checkpoint-every", 100])],
                            env_extra=self.train_env())
        self.assertTrue(wait_until(lambda: any(s >= 200 for s in checkpoint_steps(ck)), 60),
                        "no checkpoint at step 200 within 60 s")
        signal_step([launch.pid], signal.SIGTERM)
        res = self.finish(launch, timeout=90)
        self.assertEqual(res.rc, 75, res.describe())
        self.assertEqual(res.err.count("ignoring a SIGTERM from outside ddplaunch"), 2, res.describe())
        m = re.search(r"ddptrain: stopping after step (\d+) of 1500 as ddplaunch asked \(checkpoint written\)",
                      res.out)
        self.assertIsNotNone(m, res.describe())
        stopped_at = int(m.group(1))
        self.assertGreater(stopped_at, 200, res.describe())
        self.assertLess(stopped_at, 1500, res.describe())
        self.assertEqual(max(checkpoint_steps(ck)), stopped_at)
        [request] = list(self.tmp.glob("logs/*/attempt_0/stop_request.json"))
        self.assertEqual(json.loads(request.read_text())["stop_at_step"], stopped_at)
        self.assertIn("every rank stopped at a step boundary on request; exit code 75", res.err, res.describe())
        self.assertNotIn("did not all stop", res.err, res.describe())

        final = self.tmp / "resumed.pt"
        again = self.train(2, *args, "--checkpoint-dir", ck, "--save-final", final, timeout=120)
        self.assertIn(f"(step {stopped_at})", again.out, again.describe())
        (row,) = self.compare((final, reference))
        self.assert_bitwise(row, f"preempted after step {stopped_at}, started again")
        self.assert_no_leftovers()

    def test_adamw_cosine_crash_and_resume_is_bitwise_equal(self):
        # AdamW's moments and step count and the schedule's position must all be in the checkpoint.
        args = ("--batch-size", 8, "--samples", 512, "--log-every", 0, "--optimizer", "adamw", "--lr", 0.01,
                "--weight-decay", 0.01, "--lr-schedule", "cosine", "--warmup-steps", 5, "--steps", 30)
        reference, final = self.tmp / "adamw.pt", self.tmp / "adamw_resumed.pt"
        self.train(2, *args, "--save-final", reference)
        res = self.train(2, *args, "--checkpoint-dir", self.tmp / "ck", "--checkpoint-every", 5,
                         "--inject-fault", "crash@12:1", "--save-final", final, restarts=1)
        self.assertEqual(self.assert_resumed(res, 10), 10)
        (row,) = self.compare((final, reference))
        self.assert_bitwise(row, "AdamW + cosine: crash at step 12, resumed from step 10")

    def worker_pid(self, rank):
        """pid of this test's ddptrain worker of `rank` in attempt 0."""
        for pid, cmdline in find_marked(self.token):
            if not cmdline.startswith(str(DDPTRAIN)):
                continue
            env = proc_environ(pid)
            if env.get("RANK") == str(rank) and env.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
                return pid
        return None

    def test_sigkill_and_resume_is_bitwise_equal(self):
        reference = self.uninterrupted()
        ck, final = self.tmp / "ck", self.tmp / "resumed.pt"
        # 0.05 s per step in attempt 0 only: about 1.5 s of training to aim at
        launch = self.start(self.launch_args(2, [DDPTRAIN], [
            *self.CKPT_ARGS, "--steps", self.CKPT_STEPS, "--checkpoint-dir", ck, "--checkpoint-every", 5,
            "--inject-fault", "slow=0.05@0:*", "--save-final", final], restarts=1), env_extra=self.train_env())
        reached = wait_until(lambda: max(checkpoint_steps(ck), default=0) >= 10 or launch.proc.poll() is not None,
                             timeout=40, interval=0.01)
        self.assertTrue(reached, "no checkpoint of step >= 10 within 40 s")
        victim = self.worker_pid(1)
        steps_at_kill = checkpoint_steps(ck)
        self.assertIsNone(launch.proc.poll(), "the job ended before a worker could be killed")
        self.assertIsNotNone(victim, "worker of rank 1 not found in /proc")
        self.assertLess(max(steps_at_kill), self.CKPT_STEPS, "the run was over before the kill")
        os.kill(victim, signal.SIGKILL)
        res = self.finish(launch, timeout=60)
        self.assertEqual(res.rc, 0, res.describe())
        self.assertIn("SIGKILL", res.err, res.describe())
        self.assert_resumed(res, 10)
        (row,) = self.compare((final, reference))
        self.assert_bitwise(row, f"rank 1 SIGKILLed with checkpoints {steps_at_kill}, resumed")

    def damaged_newest_checkpoint(self, damage):
        reference = self.uninterrupted()
        ck, final = self.tmp / "ck", self.tmp / "resumed.pt"
        self.train(2, *self.CKPT_ARGS, "--steps", 15, "--checkpoint-dir", ck, "--checkpoint-every", 5)
        self.assertEqual(checkpoint_steps(ck), [5, 10, 15])
        newest = ck / "ckpt_000000000015.ddpckpt"
        damage(newest)
        res = self.train(2, *self.CKPT_ARGS, "--steps", self.CKPT_STEPS, "--checkpoint-dir", ck,
                         "--checkpoint-every", 5, "--save-final", final)
        skipped = [l for l in res.err.splitlines() if "skipping damaged checkpoint" in l]
        self.assertEqual(len(skipped), 1, res.describe())
        self.assertIn(newest.name, skipped[0])
        m = RESUMED_RE.search(res.out)
        self.assertIsNotNone(m, res.describe())
        self.assertEqual((Path(m.group(1)).name, m.group(2)), ("ckpt_000000000010.ddpckpt", "10"))
        (row,) = self.compare((final, reference))
        self.assert_bitwise(row, "resumed from the previous checkpoint")

    def test_truncated_newest_checkpoint_is_skipped(self):
        def truncate(path):
            os.truncate(path, path.stat().st_size // 2)
        self.damaged_newest_checkpoint(truncate)

    def test_flipped_byte_in_newest_checkpoint_is_skipped(self):
        def flip(path):
            data = bytearray(path.read_bytes())
            data[len(data) * 2 // 3] ^= 0x40  # in the payload
            path.write_bytes(bytes(data))
        self.damaged_newest_checkpoint(flip)

    def test_a_whole_checkpoint_whose_metadata_ddptrain_cannot_read_is_refused_in_one_line(self):
        # Checksums right, but not written by ddptrain: metadata a JSON array, or
        # a "model" that is a number. The run must say so, not throw a JSON error.
        ck = self.tmp / "ck"
        self.train(1, *self.CKPT_ARGS, "--steps", 5, "--checkpoint-dir", ck, "--checkpoint-every", 5)
        newest = ck / "ckpt_000000000005.ddpckpt"
        original = newest.read_bytes()
        for meta, said in ((b"[1, 2]", "its metadata is not a JSON object"),
                           (b'{"model": 5}', "has metadata ddptrain cannot read")):
            with self.subTest(meta=meta):
                newest.write_bytes(with_metadata(original, meta))
                res = self.train(1, *self.CKPT_ARGS, "--steps", 10, "--checkpoint-dir", ck, expect_rc=1)
                lines = [l for l in res.err.splitlines() if l.startswith("[0:0] ddptrain: error: checkpoint")]
                self.assertEqual(len(lines), 1, res.describe())   # one line, from the rank
                self.assertIn(newest.name, lines[0])
                self.assertIn(said, lines[0])
                self.assertNotIn("resuming from", res.out, res.describe())

    # ---- --init / --save-final and PyTorch

    def test_init_and_save_final_round_trip(self):
        # Every step sees the same 32 samples and SGD has no state, so 3 steps, saved,
        # then 2 more from --init equal 5 steps in one go only if the file written by
        # --save-final and read by --init carries every bit of every parameter.
        common = ("--samples", 32, "--batch-size", 32, "--log-every", 0)
        a, b, c = (self.tmp / n for n in ("three.pt", "three_plus_two.pt", "five.pt"))
        self.train(1, *common, "--steps", 3, "--save-final", a)
        self.train(1, *common, "--steps", 2, "--init", a, "--save-final", b)
        self.train(1, *common, "--steps", 5, "--save-final", c)
        first, second = self.compare((b, c), (a, c))
        self.assert_mlp_layout(first)
        self.assert_bitwise(first, "3 steps + --init + 2 steps vs 5 steps")
        self.assertFalse(second["equal"], "the extra steps changed nothing")

    def test_matches_pytorch_ddp(self):
        data, init = self.tmp / "data.pt", self.tmp / "init.pt"
        res = self.run_direct([PYTHON, REFERENCE], ["--mlp-sizes", "32,64,64,10", "--samples", 256,
                                                    "--seed", 7, "--write-data", data, "--write-init", init])
        self.assertEqual(res.rc, 0, res.describe())
        ours, theirs = self.tmp / "ddptrain.pt", self.tmp / "torch.pt"
        common = ["--mlp-sizes", "32,64,64,10", "--data-file", data, "--init", init, "--batch-size", 16,
                  "--steps", 20, "--lr", 0.05, "--momentum", 0.9]
        # ddptrain's gradients are bucket views by default; PyTorch's are not.
        plain = self.tmp / "ddptrain_plain.pt"
        self.train(2, *common, "--log-every", 0, "--save-final", ours)
        self.train(2, *common, "--no-grad-as-bucket-view", "--log-every", 0, "--save-final", plain)
        res = self.run_launcher(self.launch_args(2, [PYTHON, REFERENCE], [*common, "--save-final", theirs]),
                                env_extra=self.train_env(), timeout=90)
        self.assertEqual(res.rc, 0, res.describe())
        self.assertIn("torch_ddp_mlp: done: 20 steps on 2 rank(s)", res.out, res.describe())
        agree, moved, layouts = self.compare((ours, theirs), (init, theirs), (plain, ours))
        self.assert_mlp_layout(agree)
        self.assert_close(agree, 1e-5, "ddptrain vs torch DistributedDataParallel")
        self.assertGreater(moved["max_rel"], 1e-3, "training did not move the parameters")
        self.assert_bitwise(layouts, "--no-grad-as-bucket-view vs bucket views")


class ModelsAndTraceTest(DdptrainCase):
    """The other two models train under ddplaunch; --trace shows every phase and bucket."""

    LOSS_RE = re.compile(r"ddptrain: done: .* loss ([0-9.]+) -> ([0-9.]+)")

    def losses(self, res):
        m = self.LOSS_RE.search(res.out)
        self.assertIsNotNone(m, res.describe())
        return float(m.group(1)), float(m.group(2))

    def test_language_model_learns_a_text_file(self):
        words = "the quick brown fox jumps over a lazy dog while every rank keeps in step".split()
        text = self.tmp / "words.txt"
        text.write_text(" ".join(words[(i * 7 + i // 3) % len(words)] for i in range(5000)))
        res = self.train(2, "--model", "lm", "--text", text, "--context", 32, "--batch-size", 8, "--steps", 40,
                         "--optimizer", "adamw", "--lr", 0.003, "--log-every", 0)
        first, last = self.losses(res)
        self.assertAlmostEqual(first, 5.55, delta=0.6, msg="an untrained byte model is near ln 256")
        self.assertLess(last, first - 2.0, res.describe())

    def test_cnn_trains(self):
        first, last = self.losses(self.train(2, "--model", "cnn", "--batch-size", 16, "--steps", 30,
                                             "--log-every", 0))
        self.assertLess(last, first - 0.05)

    def test_trace_shows_every_phase_and_bucket_on_every_rank(self):
        trace = self.tmp / "trace.json"
        steps = 4
        # The default MLP's 6,922 float32 parameters (27.7 KB) in buckets of about
        # 1 KB first, then 5 KB: three all-reduces per step.
        res = self.train(2, "--batch-size", 8, "--steps", steps, "--first-bucket-mb", 0.001,
                         "--bucket-cap-mb", 0.005, "--log-every", 0, "--trace", trace)
        params = int(re.search(r"ddptrain: mlp, (\d+) parameters", res.out).group(1))
        for rank, path in ((0, trace), (1, self.tmp / "trace.rank1.json")):
            with self.subTest(rank=rank):
                events = json.loads(path.read_text())["traceEvents"]
                names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
                self.assertEqual(names, {f"rank {rank}"})
                spans = [e for e in events if e.get("ph") == "X"]
                for s in range(steps):
                    mine = [e for e in spans if e["args"].get("step") == s]
                    phases = {e["name"] for e in mine if e["tid"] == 0}
                    self.assertLessEqual({"forward", "backward", "wait for gradients", "optimizer"}, phases)
                    buckets = [e for e in mine if e["name"].startswith("all_reduce bucket ")]
                    self.assertEqual(len(buckets), 3, f"step {s}")
                    self.assertEqual(sum(e["args"]["bytes"] for e in buckets), params * 4, f"step {s}")
                    self.assertTrue(all(e["tid"] == 1 and e["dur"] >= 0 for e in buckets))
                    forward = next(e for e in mine if e["name"] == "forward")
                    backward = next(e for e in mine if e["name"] == "backward")
                    self.assertLessEqual(forward["ts"] + forward["dur"], backward["ts"] + 1)
                    for e in buckets:  # a bucket is reduced once its gradients exist
                        self.assertGreaterEqual(e["ts"], backward["ts"])


class BadInputTest(DdptrainCase):
    """One line 'ddptrain: error: ...' on stderr; 2 for usage, 1 for runtime errors."""

    CASES = (
        (["--steps", "0"], 2, "--steps"),
        (["--mlp-sizes", "3,x"], 2, "--mlp-sizes"),
        (["--inject-fault", "boom@1:0"], 2, "boom"),
        (["--data-file", "/nonexistent/data.pt"], 1, "/nonexistent/data.pt"),
    )

    def test_alone(self):
        for args, code, mention in self.CASES:
            with self.subTest(args=args):
                res = self.run_direct([DDPTRAIN], args, timeout=30)
                self.assertEqual(res.rc, code, res.describe())
                lines = [l for l in res.err.splitlines() if l.strip()]
                self.assertEqual(len(lines), 1, "expected a one-line error" + res.describe())
                self.assertTrue(lines[0].startswith("ddptrain: error: "), res.describe())
                self.assertIn(mention, lines[0])
                self.assertEqual(res.out, "", res.describe())

    def test_under_ddplaunch(self):
        for k, (args, code, mention) in enumerate(self.CASES):
            with self.subTest(args=args):
                job = f"{self.job_id}-{k}"
                res = self.run_launcher([f"--rdzv-id={job}", "--nproc-per-node=2", DDPTRAIN, *args],
                                        job_id=False, env_extra=self.train_env(), timeout=60)
                self.assertNotEqual(res.rc, 0, res.describe())
                errors = [l for l in res.err.splitlines() if re.match(r"^\[0:[01]\] ddptrain: error: ", l)]
                self.assertGreaterEqual(len(errors), 1, res.describe())
                self.assertTrue(all(mention in l for l in errors), res.describe())
                self.assertEqual(self.failure_json(0, job_id=job)["root_cause"]["exit_code"], code)
                self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
