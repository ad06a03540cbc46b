"""ddplaunch under a real Slurm cluster (slurm_cluster.py: slurmctld + 2 slurmd, each
in its own network and UTS namespace, munge authentication), driven exactly as users
do: `sbatch deploy/slurm/ddplaunch.sbatch` with only the settings its header names.

  test_1  2-node ddptrain job: loss falls, COMPLETED, 2 nodes / world 4
  test_2  the unmodified PyTorch Gloo example (the sbatch's default program)
  test_3  a rank crashing on the second node: FAILED within seconds, rank named,
          queue empty, no process left on either node
  test_4  scancel of a running job: clean teardown on both nodes (state and exit
          code printed); `ddplaunch status` from the host namespace while it runs
  test_4b scancel --signal=TERM (what --signal=TERM@T, a preemption and a time limit
          send): every rank stops after one step and checkpoints, the batch script
          requeues the job, and the requeued job resumes there and completes
  test_5  measurements (printed, not asserted): sbatch -> first step, against
          ddplaunch started directly in the namespaces and against torchrun's Slurm
          recipe (tests/integration/slurm/torchrun_peer.sbatch), and crash -> job end.
"""

import os
import re
import subprocess
import time
import unittest
from pathlib import Path

from launcher_harness import BIN, PYTHON, REPO, free_port, torch_available, wait_until
from slurm_cluster import SlurmClusterTestCase
from test_ddptrain import checkpoint_steps

HERE = Path(__file__).resolve().parent
DDPTRAIN = Path(os.environ.get("DDPTRAIN_BIN") or (REPO / "build" / "worker" / "ddptrain" / "ddptrain")).absolute()
SBATCH_FILE = REPO / "deploy" / "slurm" / "ddplaunch.sbatch"
PEER_SBATCH = HERE / "slurm" / "torchrun_peer.sbatch"
TORCH_EXAMPLE = REPO / "worker" / "python" / "torch_ddp_mlp.py"
TORCH_OK = torch_available()
TORCHRUN_SHIM = REPO / "tests" / "bench" / "torchrun_shim.py"

# what the sbatch header says users set, for CPU nodes of 2 cores without GPUs
SBATCH_OVERRIDES = ["--gpus-per-node=0", "--cpus-per-task=2", "--time=00:10:00"]
TRAIN_ARGS = ["--steps", "40", "--log-every", "5", "--momentum", "0.9", "--samples", "4096", "--device", "cpu"]
END_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
              "BOOT_FAIL", "DEADLINE")
DDPTRAIN_FIRST_STEP = re.compile(r"step +1/\d+ +loss")
TORCH_FIRST_STEP = re.compile(r"step +1 +loss")

# A Gloo job whose rank 2 (node 1's first worker) crashes at step 20 in every attempt;
# the survivors' next all_reduce then fails. It records the crash's wall-clock time.
CRASH_SCRIPT = r'''
import datetime, os, socket, sys, time
import torch
import torch.distributed as dist
rank = int(os.environ["RANK"])
attempt = os.environ.get("DDPLAUNCH_ATTEMPT") or os.environ.get("TORCHELASTIC_RESTART_COUNT") or "0"
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
t = torch.ones(4)
for step in range(1, 1000000):
    dist.all_reduce(t)
    if step == 1 and rank == 0:
        print("step 1 reached", flush=True)
    if rank == 2 and step == 20:
        with open(os.path.join(sys.argv[1], "crash.%s.%s" % (os.environ["SLURM_JOB_ID"], attempt)), "w") as f:
            f.write(repr(time.time()))
        print("crash-test: rank 2 on %s crashes at step 20 (attempt %s)" % (socket.gethostname(), attempt),
              file=sys.stderr, flush=True)
        os._exit(7)
    time.sleep(0.01)
'''


class SlurmTest(SlurmClusterTestCase):
    figures = {}

    @classmethod
    def setUpClass(cls):
        if not BIN.is_file():
            raise unittest.SkipTest(f"ddplaunch not built at {BIN} (set DDPLAUNCH_BIN)")
        if not DDPTRAIN.is_file():
            raise unittest.SkipTest(f"ddptrain not built at {DDPTRAIN} (set DDPTRAIN_BIN)")
        super().setUpClass()
        c = cls.cluster
        cls.xdg = c.tmp / "xdg"
        cls.xdg.mkdir(mode=0o700)
        cls.crash_dir = c.tmp / "crash"
        cls.crash_dir.mkdir()
        cls.crash_script = c.tmp / "crash_worker.py"
        cls.crash_script.write_text(CRASH_SCRIPT)

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        if cls.figures:
            print("\n=== test_slurm measurements (seconds; 2 nodes x 2 workers, 2-core machine) ===")
            for k in sorted(cls.figures):
                v = cls.figures[k]
                print(f"  {k:<62} {v:.2f}" if isinstance(v, float) else f"  {k:<62} {v}")
        r = subprocess.run(["pgrep", "-af", "slurmd|slurmctld|slurmstepd"], stdout=subprocess.PIPE, text=True)
        mine = [line for line in r.stdout.splitlines() if "ddpslurm" in line]
        if mine:
            raise AssertionError(f"Slurm daemons of this module left running: {mine}")

    # ------------------------------------------------------------------ helpers

    def job_env(self, **extra):
        env = {"DDPLAUNCH": str(BIN), "PYTHON_EXEC": PYTHON, "DDP_NPROC_PER_NODE": "2",
               "DDP_LOG_DIR": str(self.cluster.tmp / "ddplogs"), "XDG_RUNTIME_DIR": str(self.xdg),
               "PYTHONDONTWRITEBYTECODE": "1"}
        env.update(extra)
        return self.cluster.env(env)

    def out_path(self, job_id):
        return self.cluster.tmp / "out" / f"{job_id}.out"

    def output(self, job_id):
        try:
            return self.out_path(job_id).read_text(errors="replace")
        except OSError:
            return ""

    def submit(self, script, args=(), env=None, overrides=SBATCH_OVERRIDES, first_step=None, wait_end=True,
               timeout=120):
        """sbatch; waits for the first step line (if given) and the end (if wait_end).
        Returns (job_id, seconds to first step or None)."""
        c = self.cluster
        t0 = time.monotonic()
        job_id = c.sbatch([*overrides, f"--output={c.tmp / 'out'}/%j.out", str(script), *map(str, args)],
                          env=env or self.job_env(), cwd=str(REPO))
        first = None
        deadline = t0 + timeout
        state = ""
        while time.monotonic() < deadline:
            if first_step is not None and first is None and first_step.search(self.output(job_id)):
                first = time.monotonic() - t0
                if not wait_end:
                    break
            state = c.job_state(job_id)
            if state in END_STATES:
                if first_step is not None and first is None and first_step.search(self.output(job_id)):
                    first = time.monotonic() - t0
                if wait_end or first_step is None or first is None:
                    break
            time.sleep(0.05)
        else:
            c.scancel(job_id)
            self.fail(f"job {job_id} did not {'end' if wait_end else 'reach its first step'} within {timeout}s "
                      f"(state {state}):\n{self.output(job_id)[-4000:]}{c.logs()}")
        if first_step is not None and first is None and not wait_end:
            self.fail(f"job {job_id} ended ({state}) before its first step:\n{self.output(job_id)[-4000:]}")
        return job_id, first

    def assert_state(self, job_id, want):
        job = self.cluster.job(job_id)
        self.assertEqual(job.get("JobState"), want,
                         f"job {job_id}: {job}\n--- output:\n{self.output(job_id)[-5000:]}{self.cluster.logs()}")
        return job

    def assert_nodes_clean(self, job_id, timeout=20):
        """squeue empty and no process in either node's namespace (but its slurmd)."""
        c = self.cluster
        ok = wait_until(lambda: not c.squeue() and not any(c.ns_pids(k) for k in range(c.nnodes)), timeout, 0.1)
        if not ok:
            left = {c.names[k]: c.describe_pids(c.ns_pids(k)) for k in range(c.nnodes)}
            self.fail(f"after job {job_id}: squeue {c.squeue()}, processes left {left}")

    def status(self, job_id, prefix):
        return subprocess.run([*prefix, str(BIN), "status", job_id], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30,
                              env=self.job_env())

    @staticmethod
    def losses(text, pattern):
        return [float(x) for x in re.findall(pattern, text)]

    # ------------------------------------------------------------------ tests

    def test_1_ddptrain_two_nodes(self):
        job_id, first = self.submit(SBATCH_FILE, [DDPTRAIN, *TRAIN_ARGS], first_step=DDPTRAIN_FIRST_STEP)
        out = self.output(job_id)
        job = self.assert_state(job_id, "COMPLETED")
        self.assertEqual(job.get("ExitCode"), "0:0", out)
        self.assertEqual(job.get("NumNodes"), "2", job)
        # one ddplaunch per node, layout from Slurm, coordinator on the nodelist's first host
        self.assertEqual(out.count(f"job {job_id}: 2 node(s) (slurm), 2 worker(s) here"), 2, out)
        self.assertEqual(out.count("-> rendezvous host sn0"), 2, out)
        self.assertIn("node rank 0 from SLURM_NODEID", out)
        self.assertIn("node rank 1 from SLURM_NODEID", out)
        self.assertIn("joined as node 0 of 2: ranks 0..1 of 4", out)
        self.assertIn("joined as node 1 of 2: ranks 2..3 of 4", out)
        self.assertIn("4 rank(s)", out)
        m = re.search(r"loss ([0-9.]+) -> ([0-9.]+)", out)
        self.assertIsNotNone(m, out)
        self.assertLess(float(m.group(2)), float(m.group(1)) - 0.02, f"loss did not fall:\n{out}")
        self.assertEqual(out.count(f"job {job_id}: all worker(s) succeeded"), 2, out)
        self.assert_nodes_clean(job_id)
        self.figures["ddplaunch.sbatch + ddptrain: sbatch -> first step"] = first

    @unittest.skipUnless(TORCH_OK, "/usr/bin/python3 (PYTHON_EXEC) cannot import torch.distributed")
    def test_2_torch_gloo_script(self):
        # no program arguments: the sbatch's default, worker/python/torch_ddp_mlp.py --steps 200
        job_id, first = self.submit(SBATCH_FILE, [], first_step=TORCH_FIRST_STEP)
        out = self.output(job_id)
        self.assert_state(job_id, "COMPLETED")
        self.assertIn(f"starting 2 worker(s): {PYTHON} -u {TORCH_EXAMPLE} --steps 200", out)
        self.assertIn("joined as node 1 of 2: ranks 2..3 of 4", out)
        self.assertIn("done: 200 steps on 4 ranks", out)
        losses = self.losses(out, r"\[0:0\] step +\d+ +loss ([0-9.]+)")
        self.assertGreaterEqual(len(losses), 3, out)
        self.assertLess(losses[-1], losses[0], f"loss did not fall:\n{out}")
        self.assert_nodes_clean(job_id)
        self.figures["ddplaunch.sbatch + torch_ddp_mlp.py: sbatch -> first step"] = first

    @unittest.skipUnless(TORCH_OK, "/usr/bin/python3 (PYTHON_EXEC) cannot import torch.distributed")
    def test_3_crash_on_second_node_fails_the_job(self):
        job_id, _ = self.submit(SBATCH_FILE, [self.crash_script, self.crash_dir], timeout=150)
        end_seen = time.time()
        out = self.output(job_id)
        job = self.assert_state(job_id, "FAILED")
        crashes = sorted(self.crash_dir.glob(f"crash.{job_id}.*"))
        # --max-restarts=3 in the sbatch: attempts 0..3, each losing rank 2 on sn1
        self.assertEqual(len(crashes), 4, f"{crashes}\n{out}")
        self.assertEqual(set(re.findall(r"\[1:2\] crash-test: rank 2 on sn1 crashes at step 20 \(attempt (\d)\)", out)),
                         {"0", "1", "2", "3"}, out)
        self.assertNotEqual(job.get("ExitCode"), "0:0")
        # both agents (one per node) report the failing rank: the job's end, on both nodes
        ends = re.findall(rf"error: job {job_id} failed: rank 2 \(node 1, local rank 0, pid \d+\) failed: exit code 7", out)
        self.assertEqual(len(ends), 2, f"each node's ddplaunch names the failing rank 2:\n{out}")
        self.assertIn("srun: error: sn0: task 0: Exited with exit code 7", out)
        self.assertIn("srun: error: sn1: task 1: Exited with exit code 7", out)
        self.assertEqual(job.get("ExitCode"), "7:0", job)
        self.assert_nodes_clean(job_id)
        last_crash = float(crashes[-1].read_text())
        first_crash = float(crashes[0].read_text())
        self.figures["ddplaunch.sbatch crash: last crash -> job FAILED (<= observed)"] = end_seen - last_crash
        self.figures["ddplaunch.sbatch crash: first crash -> job FAILED (3 restarts)"] = end_seen - first_crash
        self.figures["ddplaunch.sbatch crash: job ExitCode"] = job.get("ExitCode")
        self.assertLess(end_seen - last_crash, 30, f"job ended {end_seen - last_crash:.1f}s after the last crash")

    def test_4_scancel_and_status(self):
        c = self.cluster
        job_id, first = self.submit(SBATCH_FILE, [DDPTRAIN, "--steps", "1000000", "--log-every", "200",
                                                  "--samples", "4096", "--device", "cpu"],
                                    first_step=DDPTRAIN_FIRST_STEP, wait_end=False)
        self.assertEqual(c.job_state(job_id), "RUNNING")
        # ddplaunch status from the host namespace (the login shell), through the registry:
        # first as is (the host cannot resolve the node names), then as a login node that
        # resolves them (the cluster's /etc/hosts bind-mounted for that one command)
        plain = self.status(job_id, [])
        print(f"\n--- ddplaunch status {job_id} from the host namespace, rc {plain.returncode}:\n"
              f"{plain.stdout}{plain.stderr}", flush=True)
        # ranks heartbeat every second: wait until every rank row names its host
        last = [None]

        def shows_ranks():
            last[0] = self.status(job_id, c.login_wrap())
            text = last[0].stdout
            return last[0].returncode == 0 and all(
                re.search(rf"(?m)^\s*{r}\s+sn{r // 2}\s+\d+\s", text) for r in range(4))
        wait_until(shows_ranks, 20, 0.5)
        st = last[0]
        status_text = st.stdout + st.stderr
        print(f"\n--- the same with the nodes' names resolvable, rc {st.returncode}:\n{status_text}", flush=True)
        t0 = time.monotonic()
        r = c.scancel(job_id)
        self.assertEqual(r.returncode, 0, r.stderr)
        state = c.wait_state(job_id, END_STATES, 60)
        cancel_to_end = time.monotonic() - t0
        job = c.job(job_id)
        self.assert_nodes_clean(job_id, timeout=30)
        cancel_to_clean = time.monotonic() - t0
        out = self.output(job_id)
        tail = "\n".join(out.splitlines()[-12:])
        print(f"\n--- scancel {job_id}: JobState={state} ExitCode={job.get('ExitCode')} "
              f"Reason={job.get('Reason')}; {cancel_to_end:.2f}s to the end state, {cancel_to_clean:.2f}s "
              f"to no process on either node; output's last lines:\n{tail}", flush=True)
        self.figures["scancel: JobState / ExitCode"] = f"{state} / {job.get('ExitCode')}"
        self.figures["scancel -> end state"] = cancel_to_end
        self.figures["scancel -> no process on either node"] = cancel_to_clean
        self.assertEqual(state, "CANCELLED", f"{job}\n{out[-3000:]}")
        # --stop-timeout in the sbatch: scancel's SIGTERM, like a preemption's, lets every
        # rank stop after one step (ddptrain saves if asked to) before Slurm's KillWait
        self.assertEqual(len(re.findall(r"asking the ranks to stop once they have completed step \d+", out)), 2, out)
        self.assertNotIn("Killed", out)
        # status: both nodes' ranks 0..3, each on its node
        self.assertEqual(st.returncode, 0, status_text)
        self.assertIn(f"job {job_id}: generation 0 (running)", status_text)
        self.assertIn("4 rank(s) on 2 node(s)", status_text)
        for rank in range(4):
            self.assertRegex(status_text, rf"(?m)^\s*{rank}\s+sn{rank // 2}\s+\d+\s", status_text)

    def test_4b_scancel_signal_term_stops_at_one_step_and_the_requeued_job_resumes(self):
        c = self.cluster
        ck = c.tmp / "preempted-ck"
        program = [DDPTRAIN, "--batch-size", "8", "--samples", "512", "--mlp-sizes", "32,1024,1024,10",
                   "--log-every", "0", "--steps", "1000", "--device", "cpu", "--checkpoint-dir", ck,
                   "--checkpoint-every", "100"]
        job_id, _ = self.submit(SBATCH_FILE, program, first_step=re.compile("joined as node 1 of 2"),
                                wait_end=False)
        if not wait_until(lambda: max(checkpoint_steps(ck), default=0) >= 200, 90, 0.1):
            c.scancel(job_id)
            self.fail(f"no checkpoint of step 200 within 90 s:\n{self.output(job_id)[-4000:]}")
        # Slurm signals every process of the step, the ranks included (proctrack/linuxproc)
        t0 = time.monotonic()
        r = c.scancel(job_id, "--signal=TERM")
        self.assertEqual(r.returncode, 0, r.stderr)
        requeued = wait_until(lambda: c.job(job_id).get("Restarts") == "1"
                              and c.job_state(job_id) == "PENDING", 90, 0.1)
        signal_to_requeue = time.monotonic() - t0
        self.assertTrue(requeued, f"{c.job(job_id)}\n{self.output(job_id)[-5000:]}{c.logs()}")
        # Slurm holds a requeued job for AuthInfo's cred_expire + 1 s (121 s by
        # default, 6 s in this cluster) while the nodes refuse its revoked credential.
        state = c.wait_state(job_id, END_STATES, 120)
        out = self.output(job_id)
        job = c.job(job_id)
        self.assertEqual((state, job.get("Restarts"), job.get("ExitCode")), ("COMPLETED", "1", "0:0"),
                         f"{job}\n{out[-6000:]}{c.logs()}")
        # the first run (kept by the sbatch's --open-mode=append): one step for all, saved
        self.assertEqual(out.count("ignoring a SIGTERM from outside ddplaunch"), 4, out)
        m = re.search(r"ddptrain: stopping after step (\d+) of 1000 as ddplaunch asked \(checkpoint written\)", out)
        self.assertIsNotNone(m, out)
        stopped_at = int(m.group(1))
        self.assertEqual(out.count(f"asking the ranks to stop once they have completed step {stopped_at} and exit"),
                         2, out)
        self.assertNotIn("did not all stop", out)
        self.assertIn(f"ddplaunch: stopped at a step boundary; requeueing job {job_id}", out)
        # the second run: resumed from that step on both nodes, finished
        self.assertIn(f"(step {stopped_at})", out)
        self.assertEqual(out.count(f"job {job_id}: all worker(s) succeeded"), 2, out)
        self.assertEqual(max(checkpoint_steps(ck)), 1000, out)
        self.assert_nodes_clean(job_id)
        self.figures["scancel --signal=TERM -> batch script requeued the job (PENDING, Restarts=1)"] = \
            signal_to_requeue
        self.figures["scancel --signal=TERM: stopped after step / resumed at step"] = f"{stopped_at} / {stopped_at}"

    @unittest.skipUnless(TORCH_OK, "/usr/bin/python3 (PYTHON_EXEC) cannot import torch.distributed")
    def test_5_measurements(self):
        c = self.cluster
        # (a) the ddptrain job of test_1, launched by ddplaunch directly in the namespaces
        port = free_port()
        env = self.job_env(DDPLAUNCH_TOKEN="direct" + c.marker)
        for k in [k for k in env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
            del env[k]
        procs, outs = [], []
        t0 = time.monotonic()
        for k in range(2):
            out = open(c.tmp / "out" / f"direct{k}.out", "w")
            outs.append(c.tmp / "out" / f"direct{k}.out")
            procs.append(subprocess.Popen(
                c.wrap(k) + [str(BIN), "--nnodes=2", f"--node-rank={k}", f"--rdzv-endpoint=sn0:{port}",
                             "--rdzv-id=direct", "--nproc-per-node=2", f"--log-dir={c.tmp / 'ddplogs'}",
                             str(DDPTRAIN), *TRAIN_ARGS],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True))
            out.close()
        try:
            ok = wait_until(lambda: DDPTRAIN_FIRST_STEP.search(outs[0].read_text(errors="replace")), 60, 0.05)
            first_direct = time.monotonic() - t0
            self.assertTrue(ok, outs[0].read_text(errors="replace"))
            for p in procs:
                p.wait(timeout=60)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        self.assertEqual([p.returncode for p in procs], [0, 0], outs[0].read_text() + outs[1].read_text())
        self.figures["ddplaunch direct in the namespaces + ddptrain: start -> first step"] = first_direct

        # (b) torchrun's Slurm recipe: the PyTorch example, then the crash
        # torch 1.13's torchrun dies at start under Python 3.11 (Std.from_str("0") is None);
        # tests/bench/torchrun_shim.py mends exactly that and runs torch.distributed.run.main()
        peer_env = self.job_env(TORCHRUN=f"{PYTHON} {TORCHRUN_SHIM}", TORCHRUN_NPROC_PER_NODE="2")
        job_id, first = self.submit(PEER_SBATCH, [TORCH_EXAMPLE, "--steps", "200"], env=peer_env,
                                    overrides=["--time=00:10:00"], first_step=TORCH_FIRST_STEP)
        out = self.output(job_id)
        self.assert_state(job_id, "COMPLETED")
        self.assertIn("done: 200 steps on 4 ranks", out)
        self.assert_nodes_clean(job_id)
        self.figures["torchrun_peer.sbatch + torch_ddp_mlp.py: sbatch -> first step"] = first

        job_id, _ = self.submit(PEER_SBATCH, [self.crash_script, self.crash_dir], env=peer_env,
                                overrides=["--time=00:10:00"], timeout=150)
        end_seen = time.time()
        out = self.output(job_id)
        job = c.job(job_id)
        crashes = sorted(self.crash_dir.glob(f"crash.{job_id}.*"))
        self.assertTrue(crashes, out)
        self.figures["torchrun_peer.sbatch crash: crash -> job end (<= observed)"] = \
            end_seen - float(crashes[-1].read_text())
        self.figures["torchrun_peer.sbatch crash: JobState / ExitCode"] = \
            f"{job.get('JobState')} / {job.get('ExitCode')}"
        self.assert_nodes_clean(job_id)


if __name__ == "__main__":
    unittest.main()
