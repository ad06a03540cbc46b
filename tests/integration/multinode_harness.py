"""Helpers for multi-node ddplaunch tests: several agents (one ddplaunch per "node")
as separate processes, built on launcher_harness.LauncherTestCase (same token-based
leftover checks and cleanup).

Each test gets a job token (``self.job_token``, passed as --token, distinct from the
harness's process-marking DDPT_TOKEN) and a free port (``self.port``) for the
rendezvous endpoint. Scheduler variables of the outer environment (Slurm, Open MPI,
Kubernetes) are removed so that detection sees only what a test sets.
"""

import json
import os
import re
import secrets
import signal
import subprocess
import time
from pathlib import Path

from launcher_harness import (BIN, LauncherTestCase, free_port, wait_until, worker)

NODE_PREFIX_RE = re.compile(r"^\[(\d+):(\d+)\] (.*)$")
PROBE = worker("node_probe.py")

EXIT_NODE_LOST = 123
EXIT_RDZV = 125

_SCHED_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "JOB_COMPLETION_INDEX", "JOBSET_",
                   "KUBERNETES_", "PET_", "DDPLAUNCH_", "TORCHELASTIC_")


def by_node_rank(text):
    """{(node, rank): [lines]} of '[node:rank] ...' lines."""
    d = {}
    for line in text.splitlines():
        m = NODE_PREFIX_RE.match(line)
        if m:
            d.setdefault((int(m.group(1)), int(m.group(2))), []).append(m.group(3))
    return d


class MultiNodeTestCase(LauncherTestCase):

    def setUp(self):
        super().setUp()
        self.job_token = "jt" + secrets.token_hex(12)
        self.port = free_port()
        self.host = "127.0.0.1"

    # ---- environment / agents

    def mn_env(self, extra=None):
        drop = [k for k in os.environ if k.startswith(_SCHED_PREFIXES)]
        return self.env(extra, drop=drop)

    def endpoint(self, host=None, port=None):
        return f"{host or self.host}:{port or self.port}"

    def agent_args(self, nnodes, nproc, program, *, node_rank=None, endpoint=None,
                   token=None, job_id=None, conf=None, extra=()):
        args = [f"--rdzv-id={job_id or self.job_id}", f"--nnodes={nnodes}",
                f"--nproc-per-node={nproc}", f"--rdzv-endpoint={endpoint or self.endpoint()}",
                f"--token={token or self.job_token}"]
        if node_rank is not None:
            args.append(f"--node-rank={node_rank}")
        if conf:
            args.append(f"--rdzv-conf={conf}")
        args += list(extra)
        args += list(program) if isinstance(program, (list, tuple)) else [program]
        return args

    def start_agent(self, nnodes, nproc, program, *, env_extra=None, wrap=(), **kw):
        """Start one agent; `wrap` is a command prefix (e.g. ['ip', 'netns', 'exec', NS])."""
        args = self.agent_args(nnodes, nproc, program, **kw)
        env = self.mn_env(env_extra)
        if wrap:
            cmd = list(wrap) + self.command(args, log_dir=True, job_id=False)
            return self.start(None, env=env, raw_cmd=cmd)
        return self.start(args, env=env, job_id=False)

    def start_agents(self, nnodes, nproc, program, *, node_ranks="explicit", **kw):
        """node_ranks: 'explicit' (0..n-1), 'auto' (none given) or a list."""
        if node_ranks == "explicit":
            ranks = list(range(nnodes))
        elif node_ranks == "auto":
            ranks = [None] * nnodes
        else:
            ranks = list(node_ranks)
        return [self.start_agent(nnodes, nproc, program, node_rank=r, **kw) for r in ranks]

    def finish_all(self, launches, timeout=25.0):
        """Wait (bounded) for every launch; returns results in order. On timeout all
        are killed and the test fails with every agent's output."""
        deadline = time.monotonic() + timeout
        for launch in launches:
            try:
                launch.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
        if any(l.proc.poll() is None for l in launches):
            desc = "".join(self._result(l, l.proc.poll()).describe() for l in launches)
            for l in launches:
                self._kill_launch(l)
            self.fail(f"agents did not all exit within {timeout}s:{desc}")
        return [self._result(l, l.proc.returncode) for l in launches]

    def exit_times(self, launches, timeout=25.0):
        """Poll until every launch exited; {index: monotonic exit time} (bounded)."""
        times = {}
        deadline = time.monotonic() + timeout
        while len(times) < len(launches) and time.monotonic() < deadline:
            for i, l in enumerate(launches):
                if i not in times and l.proc.poll() is not None:
                    times[i] = time.monotonic()
            time.sleep(0.005)
        return times

    @staticmethod
    def describe_all(results):
        return "".join(f"\n=== agent {i}{r.describe()}" for i, r in enumerate(results))

    def current_output(self, launch):
        return self._result(launch, launch.proc.poll())

    def wait_for_log(self, launch, text, timeout=10.0, stream="err"):
        """Bounded wait until `text` appears in a running launch's stderr (or stdout)."""
        path = launch.err_path if stream == "err" else launch.out_path

        def seen():
            try:
                return text in path.read_text(errors="replace")
            except OSError:
                return False
        ok = wait_until(seen, timeout)
        if not ok:
            self.fail(f"{text!r} did not appear within {timeout}s"
                      f"{self.current_output(launch).describe()}")

    # ---- checks

    def read_probes(self, n, outdir=None):
        """{rank: probe dump} written by workers/node_probe.py; asserts ranks 0..n-1."""
        outdir = Path(outdir or self.outdir)
        dumps = {}
        for p in sorted(outdir.glob("rank_*.json")):
            with open(p) as f:
                d = json.load(f)
            dumps[int(d["env"]["RANK"])] = d
        self.assertEqual(sorted(dumps), list(range(n)), f"probe dumps of ranks in {outdir}")
        return dumps

    def check_layout(self, dumps, nnodes, nproc, job_id=None, token=None,
                     node_of_rank=None):
        """Worker env of a whole job: contiguous ranks, node k has k*M..k*M+M-1, one
        MASTER_ADDR/PORT. Returns {node: set(ranks)}."""
        world = nnodes * nproc
        masters = set()
        nodes = {}
        for rank, d in dumps.items():
            e = d["env"]
            ctx = f"rank {rank} env: " + json.dumps(
                {k: v for k, v in e.items() if k in (
                    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                    "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DDPLAUNCH_NODE_RANK",
                    "DDPLAUNCH_NNODES", "ROLE_RANK", "ROLE_WORLD_SIZE")}, sort_keys=True)
            node = int(e["GROUP_RANK"])
            self.assertEqual(int(e["RANK"]), rank, ctx)
            self.assertEqual(e["WORLD_SIZE"], str(world), ctx)
            self.assertEqual(e["GROUP_WORLD_SIZE"], str(nnodes), ctx)
            self.assertEqual(e["LOCAL_WORLD_SIZE"], str(nproc), ctx)
            self.assertEqual(node, rank // nproc, ctx)
            self.assertEqual(int(e["LOCAL_RANK"]), rank % nproc, ctx)
            self.assertEqual(e.get("DDPLAUNCH_NODE_RANK"), str(node), ctx)
            self.assertEqual(e.get("DDPLAUNCH_NNODES"), str(nnodes), ctx)
            if "ROLE_WORLD_SIZE" in e:
                self.assertEqual(e["ROLE_WORLD_SIZE"], str(world), ctx)
            self.assertTrue(e.get("DDPLAUNCH_AGENT_SOCKET"), ctx)
            if token is not None:
                self.assertEqual(e.get("DDPLAUNCH_TOKEN"), token, ctx)
            if job_id is not None:
                self.assertEqual(e.get("TORCHELASTIC_RUN_ID"), job_id, ctx)
            self.assertTrue(e.get("MASTER_ADDR"), ctx)
            self.assertTrue(e.get("MASTER_PORT", "").isdigit(), ctx)
            masters.add((e["MASTER_ADDR"], e["MASTER_PORT"]))
            nodes.setdefault(node, set()).add(rank)
        self.assertEqual(len(masters), 1, f"MASTER_ADDR/PORT differ between workers: {masters}")
        self.assertEqual(sorted(nodes), list(range(nnodes)))
        for k, ranks in nodes.items():
            self.assertEqual(sorted(ranks), list(range(k * nproc, k * nproc + nproc)))
        return nodes

    def check_console(self, results, nproc, node_of_result=None):
        """Agent i's stdout carries exactly its node's '[node:rank] probe ...' lines."""
        for i, res in enumerate(results):
            node = i if node_of_result is None else node_of_result[i]
            lines = by_node_rank(res.out)
            want = {(node, r) for r in range(node * nproc, node * nproc + nproc)}
            self.assertEqual(set(lines), want, f"console prefixes of agent {i}{res.describe()}")
            for (n, r), ls in lines.items():
                self.assertIn(f"probe rank {r} node {n} ok", ls, res.describe())

    def signal_launch(self, launch, sig=signal.SIGKILL):
        os.kill(launch.pid, sig)


def serve_command(port=0, host="127.0.0.1", extra=()):
    cmd = [str(BIN), "serve", "--port", str(port)]
    if host:
        cmd += ["--host", host]
    return cmd + list(extra)
