#!/usr/bin/python3
"""Benchmark: from losing a node to training resumed on the survivors, ddplaunch vs
torchrun's elastic c10d rendezvous.

One job of three "nodes" on this machine: three launcher agents, one rank each (node 0
started first, so that it hosts the rendezvous: torchrun cannot survive losing that one),
--nnodes=2:3, running the same unmodified PyTorch DDP script over Gloo
(tests/bench/elastic_steps_worker.py, rank 0 logs every step with its world size).
Once the three-rank world has trained --warm-steps steps, every process of node 2
(its agent and its rank) is SIGKILLed at once: the node is gone. The figure is the
time from the kill to the first step completed by the two survivors' new world, read
from the script's own log (one clock: this machine's).

Both launchers run at their defaults but for the rendezvous' last call, set alike
(--last-call, torchrun's last_call_timeout: how long a world of fewer than MAX nodes
waits for more): ddplaunch then detects the loss through its agents' heartbeats
(node_timeout, sooner while the job stops) and re-forms as soon as the survivors are
back; torchrun restarts its workers when they fail (--monitor_interval 5 s) and its
rendezvous waits the last call for a third node. torchrun is Debian's torch 1.13 one
through tests/bench/torchrun_shim.py, with --max_restarts 3 (a node loss uses a
restart there; it uses none under ddplaunch).

--lose coordinator kills node 0 instead, the node that hosts the rendezvous: ddplaunch
gets two endpoints (--rdzv-endpoint=127.0.0.1:P,127.0.0.1:P2) and fails over to the
second; torchrun's c10d store lives on node 0, so its survivors are given --give-up
seconds and reported as not resumed (nothing to compare: there is no ratio).

Exits 0 when every ddplaunch run resumed and its survivors finished (exit 0, nothing
left running), and every torchrun run did too where it can (not with --lose
coordinator); 1 otherwise. The table comes last.

Usage: /usr/bin/python3 tests/bench/node_loss_bench.py [--repeat 1] [--last-call 5]
         [--warm-steps 30] [--steps 300] [--lose other|coordinator] [--give-up 60]
         [--skip-torch] [--json]
"""
import argparse
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_runs import LAUNCHER_VARS, TOKEN_VAR, free_port, kill_marked, marked_pids  # noqa: E402
REPO = os.path.dirname(os.path.dirname(HERE))
SHIM = os.path.join(HERE, "torchrun_shim.py")
SCRIPT = os.path.join(HERE, "elastic_steps_worker.py")
DDPLAUNCH = os.environ.get("DDPLAUNCH_BIN") or os.path.join(REPO, "build", "launcher", "ddplaunch")
PYTHON = os.environ.get("PYTHON_EXEC") or "/usr/bin/python3"
NODES = 3



def agent_commands(launcher, args, tmp, steps_log):
    port, job = free_port(), f"nodeloss-{secrets.token_hex(4)}"
    program = [PYTHON, SCRIPT, steps_log, str(args.steps)]  # the interpreter that has torch
    endpoint = f"127.0.0.1:{port}"
    if args.lose == "coordinator":
        endpoint += f",127.0.0.1:{free_port()}"  # where the survivors fail over
    cmds = []
    for node in range(NODES):
        if launcher == "ddplaunch":
            cmds.append([DDPLAUNCH, "--nnodes=2:3", "--nproc-per-node=1", f"--node-rank={node}",
                         f"--rdzv-endpoint={endpoint}", f"--rdzv-id={job}", f"--token=t{job}",
                         f"--rdzv-conf=last_call_timeout={args.last_call:g}", f"--log-dir={tmp}/logs{node}",
                         "--no-python", *program])
        else:
            cmds.append([PYTHON, SHIM, "--nnodes=2:3", "--nproc_per_node=1", "--rdzv_backend=c10d",
                         f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id={job}", "--max_restarts=3",
                         f"--rdzv_conf=last_call_timeout={args.last_call:g}", f"--log_dir={tmp}/logs{node}",
                         "--no_python", *program])
    return cmds, port


def listening(port):
    """Whether something accepts connections on port (node 0's store or coordinator)."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def steps_of(path):
    """[(unix time, world, step)] logged so far."""
    try:
        with open(path) as f:
            rows = [line.split() for line in f]
    except OSError:
        return []
    return [(float(t), int(w), int(s)) for t, w, s in (r for r in rows if len(r) == 3)]


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def run_once(launcher, args):
    tmp = tempfile.mkdtemp(prefix="nodeloss-")
    steps_log = os.path.join(tmp, "steps.log")
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith(("SLURM_", "PET_", "OMPI_"))}
    env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    tokens = [secrets.token_hex(8) for _ in range(NODES)]
    procs = []
    result = {"launcher": launcher, "resumed_s": None, "ok": False, "why": ""}
    try:
        cmds, port = agent_commands(launcher, args, tmp, steps_log)
        for node, cmd in enumerate(cmds):
            if node == 1 and not wait_for(lambda: listening(port), 60):
                result["why"] = "node 0 did not listen on the rendezvous port within 60 s"
                return result
            procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=open(f"{tmp}/agent{node}.out", "wb"),
                                          stderr=subprocess.STDOUT, env=dict(env, **{TOKEN_VAR: tokens[node]}),
                                          start_new_session=True))
        warm = lambda: sum(1 for _, w, _ in steps_of(steps_log) if w == NODES) >= args.warm_steps  # noqa: E731
        if not wait_for(warm, 120):
            result["why"] = f"the {NODES}-rank world did not train {args.warm_steps} steps within 120 s"
            return result
        lost = 0 if args.lose == "coordinator" else NODES - 1
        hopeless = launcher == "torchrun" and lost == 0  # its store died with node 0
        t_kill = time.time()
        kill_marked(tokens[lost])  # its agent and its rank, at once
        resumed = lambda: [t for t, w, _ in steps_of(steps_log) if w == NODES - 1 and t > t_kill]  # noqa: E731
        give_up = args.give_up if hopeless else 180
        if not wait_for(resumed, give_up):
            result["why"] = f"the survivors did not resume within {give_up:g} s"
            result["ok"] = hopeless
            return result
        result["resumed_s"] = resumed()[0] - t_kill
        rcs = []
        for p in procs[:lost] + procs[lost + 1:]:
            try:
                rcs.append(p.wait(timeout=120))
            except subprocess.TimeoutExpired:
                rcs.append(None)
        time.sleep(0.3)
        leftovers = [pid for token in tokens for pid in marked_pids(token)]
        result["ok"] = rcs == [0] * (NODES - 1) and not leftovers
        if not result["ok"]:
            result["why"] = f"survivors exited {rcs}, leftovers {leftovers}"
        return result
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
        for token in tokens:
            kill_marked(token)
        if not result["ok"]:
            for node in range(NODES):
                try:
                    with open(f"{tmp}/agent{node}.out", errors="replace") as f:
                        result.setdefault("tails", {})[node] = f.read()[-1500:]
                except OSError:
                    pass
        subprocess.run(["rm", "-rf", tmp], check=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--last-call", type=float, default=5.0)
    ap.add_argument("--warm-steps", type=int, default=30)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lose", choices=("other", "coordinator"), default="other",
                    help="which node is lost: node 2, or node 0 that hosts the rendezvous")
    ap.add_argument("--give-up", type=float, default=60.0,
                    help="--lose coordinator: how long torchrun's survivors get")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    launchers = ["ddplaunch"] + ([] if args.skip_torch else ["torchrun"])
    runs = {name: [] for name in launchers}
    failed = False
    for _ in range(args.repeat):
        for name in launchers:
            r = run_once(name, args)
            runs[name].append(r)
            if not r["ok"] or r["resumed_s"] is None:
                failed = failed or not r["ok"]
                print(f"{name}: {r['why']}", file=sys.stderr)
                for node, tail in r.get("tails", {}).items():
                    print(f"--- {name} agent {node}:\n{tail}", file=sys.stderr)
    medians = {n: statistics.median([r["resumed_s"] for r in rs if r["resumed_s"] is not None] or [float("nan")])
               for n, rs in runs.items()}
    if args.json:
        print(json.dumps({"medians_s": medians, "runs": runs}))
    which = "node 0, the rendezvous host" if args.lose == "coordinator" else "node 2"
    print(f"node loss ({which}) to training resumed on the survivors ({NODES} nodes -> {NODES - 1}, last call "
          f"{args.last_call:g} s, median of {args.repeat}):")
    for name in launchers:
        if medians[name] == medians[name]:
            print(f"  {name:<10} {medians[name]:7.2f} s")
        else:
            print(f"  {name:<10} did not resume ({runs[name][0]['why']})")
    if "torchrun" in medians and medians["torchrun"] == medians["torchrun"]:
        print(f"  ratio ddplaunch/torchrun: {medians['ddplaunch'] / medians['torchrun']:.3f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
