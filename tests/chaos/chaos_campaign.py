#!/usr/bin/python3
"""Fault campaign: randomised faults against real ddplaunch jobs, with invariants
checked after every trial.

    tests/chaos/chaos_campaign.py --trials 40              # a campaign, random seed
    tests/chaos/chaos_campaign.py --seed 1234 --trials 1   # replay one trial
    tests/chaos/chaos_campaign.py --kinds inject-hang,ckpt-corrupt --trials 10
    tests/chaos/chaos_campaign.py --list-kinds

Trial i of a campaign with --seed S has the seed T = S + i; everything about it
(the fault's kind, rank, step, timing and variant) comes from T alone, so
`--seed T --trials 1` (with the same --kinds) replays it. The kind is
KINDS[T mod len(KINDS)] (KINDS restricted by --kinds), so consecutive trials
cycle through the kinds; the rest is drawn from random.Random(T).

Jobs are real: build/launcher/ddplaunch with build/worker/ddptrain/ddptrain
(a tiny MLP on Gloo, 2-3 ranks, 100 steps, a checkpoint every 10, the first
attempt slowed to 20 ms a step so that a fault can land mid-run), and a plain
PyTorch DDP script (chaos_torch_ddp.py) for the Python companion. Faults:

  rank-sigkill, rank-sigstop   SIGKILL / SIGSTOP of a random rank at a random step
  inject-crash|exit|hang|silent|slow
                               ddptrain --inject-fault KIND@STEP:RANK
  ckpt-write-crash             SIGKILL of rank 0 while its checkpoint temp file is
                               being written (inotify sees it created; the rank is
                               stopped, checked to be mid-write, then killed)
  ckpt-corrupt                 the newest checkpoint damaged (a flipped byte in the
                               header, metadata/payload or trailer, truncated, zeroed,
                               or every checkpoint damaged), then a rank SIGKILLed
  ckpt-disk-full               the checkpoint directory on a small tmpfs, full from
                               the start or filled mid-run
  shm-full                     /dev/shm (a private tmpfs, see below) full or nearly,
                               from the start or filled mid-run and a rank killed
  agent-sigkill                2 agents (nodes) on this machine; SIGKILL of node 1's
                               agent; either nothing restarts it (expect 123) or a
                               supervisor (this script) starts it again (expect the
                               job to finish after a restart)
  coordinator-sigkill          SIGKILL of node 0's agent, which hosts the coordinator
                               (expect 125 on node 1)
  netns-partition              2 nodes in 2 network namespaces; node 1's link goes
                               down (expect 123 on node 0, 125 on node 1), or goes
                               down and comes back with node 1's agent restarted
  py-sigkill, py-sigstop, py-raise
                               SIGKILL, SIGSTOP or an exception in a Python rank
  py-companion-stop|wedge|close
                               the companion's heartbeat thread ended, blocked on its
                               lock forever, or its socket to the agent shut down

Invariants checked after every trial (any failure makes the campaign exit 1,
printing the trial's seed, reason and replay command):
  * outcome: the job finishes (exit 0) with final parameters bitwise equal to an
    uninterrupted run (sha256 of ddptrain's --save-final file, or the hash the
    Python script prints; one reference run per configuration per campaign), or it
    fails with the documented exit code (root cause's code, 128+signal, 123 node
    lost, 124 hang, 125 rendezvous/coordinator lost). After a documented failure
    the job is started again without the fault (as an operator would) and must
    resume from the newest valid checkpoint and end bitwise equal;
  * report: the console and failure.json name the faulted rank (or node) and the
    right cause (signal, exit code, silent_rank, stuck_collective, node lost, ...);
  * no process survives: every process of a job carries a unique marker in its
    environment, and /proc is scanned for it after the job ended;
  * nothing is left in /dev/shm or in the runtime directory (XDG_RUNTIME_DIR, a
    private one per campaign: only the job registry's *.json and the BLAS probe
    may stay; no socket file anywhere in it or in the trial's folder);
  * checkpoints: every "resuming from CKPT (step N)" names the newest checkpoint
    that was valid when the attempt started (damaged ones are known to this
    script and must be reported as skipped, never loaded);
  * secrets: jobs run with a fake AWS_SECRET_ACCESS_KEY, HF_TOKEN and job token
    (DDPLAUNCH_TOKEN); none may appear in any console output, log file,
    failure.json or job registry file.
Not invariants but reported as notes: a checkpoint temp file left behind by a
killed writer.

/dev/shm: as root, the campaign mounts one small tmpfs of its own and every job
runs in a private mount namespace (unshare -m) with that tmpfs bind-mounted on
/dev/shm, so leftovers are seen exactly and the shm-full fault can fill it
without touching the machine's /dev/shm. Kinds that need root (shm-full,
ckpt-disk-full, netns-partition) are skipped without it.

Clock jumps are not among the faults: ddplaunch, the runtime and the companion
take every timeout and deadline from monotonic clocks (Clock::now() is
steady_clock; the companion uses time.monotonic/perf_counter); wall time
(system_clock, time.time) only stamps reports and registry entries and feeds
gRPC deadlines that gRPC converts to its monotonic clock when a call starts. A
wall-clock jump would also disturb every other process of a shared machine.

Output: a table of faults tried by kind, passed, outcomes, and the median and
worst time from the fault to the report naming it and from the fault to the
first training step after the restart (this process's monotonic clock stamps
every console line as it arrives; the fault's time is when this script acted,
or when the rank printed its injected-fault line).
"""

import argparse
import ctypes
import hashlib
import json
import os
import random
import re
import secrets
import select
import shutil
import signal
import stat
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.dont_write_bytecode = True   # no __pycache__ beside the shared harness
sys.path.insert(0, str(REPO / "tests" / "integration"))
from launcher_harness import base_env, find_marked, free_port, kill_marked  # noqa: E402
from netns_harness import ip  # noqa: E402

PYTHON = "/usr/bin/python3"
TORCH_SCRIPT = HERE / "chaos_torch_ddp.py"

KINDS = [
    "rank-sigkill", "rank-sigstop", "inject-crash", "inject-exit", "inject-hang", "inject-silent", "inject-slow",
    "ckpt-write-crash", "ckpt-corrupt", "ckpt-disk-full", "shm-full",
    "agent-sigkill", "coordinator-sigkill", "netns-partition",
    "py-sigkill", "py-sigstop", "py-raise", "py-companion-stop", "py-companion-wedge", "py-companion-close",
]
ROOT_KINDS = {"shm-full", "ckpt-disk-full", "netns-partition"}

# ---- documented exit codes (launcher/src/exit_codes.h, README "Exit status")
EXIT_NODE_LOST, EXIT_HANG, EXIT_RDZV = 123, 124, 125

# ---- the jobs
HB, HANG = 0.5, 2.0          # ddptrain jobs: --heartbeat-interval, --hang-timeout
PY_HANG = 3.0                # Python jobs: the first heartbeats come after init_process_group
STEPS, CKPT_EVERY, KEEP = 100, 10, 3
SLOW = 0.02                  # seconds per step in the first attempt (ddptrain's slow fault on every rank)
PY_STEPS, PY_SLEEP = 120, 0.05
MN_CONF = "node_timeout=2,heartbeat_interval=0.5,join_timeout=30"
JOB_TIMEOUT = 120.0
LEFTOVER_GRACE = 5.0
SHM_SIZE = 96 << 20          # the campaign's private /dev/shm

# ---- console lines
STEP_RE = re.compile(r"^\[\d+:0\] step\s+(\d+)/(\d+)")
START_RE = re.compile(r"^\[\d+:0\] ddptrain: mlp, .* steps from step (\d+)")
RESUMED_RE = re.compile(r"ddptrain: resuming from (\S+) \(step (\d+)\)")
SKIPPED_RE = re.compile(r"ddptrain: skipping damaged checkpoint (\S+): (.*)$")
CKPT_LINE_RE = re.compile(r"^\[\d+:0\] ddptrain: checkpoint (\S+)$")
RESTART_RE = re.compile(r"restarting the job as attempt (\d+)")
FAULT_LINE_RE = re.compile(r"^\[\d+:(\d+)\] ddptrain: injected fault at step (\d+)")
FAILED_RE = re.compile(r"error: rank (\d+) \(node (\d+), local rank \d+, pid (\d+)\) failed: (.*?) at \d{4}-")
STUCK_RE = re.compile(r"error: stuck_collective detected: rank (\d+) \(host \S+, pid (\d+)")
SILENT_RE = re.compile(r"error: silent_rank detected: rank (\d+) \(host \S+, pid (\d+)")
NODE_LOST_RE = re.compile(r"node (\d+) \(\S+\) (?:lost|went silent)")
COORD_LOST_RE = re.compile(r"lost the coordinator|cannot reach the coordinator|the coordinator at \S+ has been unreachable")
PY_STEP_RE = re.compile(r"^\[\d+:0\] chaos_torch_ddp: step (\d+)/")
PY_FAULT_RE = re.compile(r"^\[\d+:(\d+)\] chaos_torch_ddp: fault (\S+) at step (\d+)")
PY_RESUMED_RE = re.compile(r"chaos_torch_ddp: rank (\d+) resumed at step (\d+)")
PY_FINAL_RE = re.compile(r"chaos_torch_ddp: final sha256 ([0-9a-f]{64})")
ENOSPC_RE = re.compile(r"^\[\d+:0\] ddptrain: error: cannot save checkpoint .*No space left on device")
CKPT_NAME_RE = re.compile(r"^ckpt_(\d+)\.ddpckpt$")


class HarnessError(Exception):
    """The campaign itself could not do what a trial needed (not a finding)."""


# =============================================================================== small helpers

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def wait_until(pred, timeout, interval=0.01):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def proc_environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env


def proc_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
        return data[data.rindex(")") + 2:].split()[0]
    except (OSError, ValueError):
        return None


def rank_pids(marker, program_substr):
    """{(rank, restart_count): pid} of live rank processes carrying marker."""
    found = {}
    for pid, cmd in find_marked(marker):
        if program_substr not in cmd:
            continue
        env = proc_environ(pid)
        if "RANK" not in env or proc_state(pid) in (None, "Z", "X"):
            continue
        try:
            key = (int(env["RANK"]), int(env.get("TORCHELASTIC_RESTART_COUNT", "0")))
        except ValueError:
            continue
        found[key] = pid
    return found


def checkpoint_steps(directory):
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    out = {}
    for n in names:
        m = CKPT_NAME_RE.match(n)
        if m:
            out[int(m.group(1))] = os.path.join(directory, n)
    return out


def temp_files(directory):
    try:
        return sorted(n for n in os.listdir(directory) if n.endswith(".tmp"))
    except OSError:
        return []


def run_quiet(cmd, timeout=20):
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


def mount_tmpfs(path, size):
    Path(path).mkdir(parents=True, exist_ok=True)
    r = run_quiet(["mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "tmpfs", str(path)])
    if r.returncode != 0:
        raise HarnessError(f"mount tmpfs on {path}: {r.stderr.strip()}")


def remount_tmpfs(path, size):
    r = run_quiet(["mount", "-o", f"remount,size={size}", str(path)])
    if r.returncode != 0:
        raise HarnessError(f"remount {path} size={size}: {r.stderr.strip()}")


def umount(path):
    if not os.path.ismount(path):
        return
    r = run_quiet(["umount", str(path)])
    if r.returncode != 0:
        run_quiet(["umount", "-l", str(path)])


def fill_file(path, nbytes=None):
    """Writes zeros to path until nbytes are written or the filesystem is full."""
    written = 0
    block = b"\0" * (1 << 16)
    with open(path, "wb") as f:
        while nbytes is None or written < nbytes:
            n = len(block) if nbytes is None else min(len(block), nbytes - written)
            try:
                f.write(block[:n])
                f.flush()
            except OSError:
                break
            written += n
    return written


class Inotify:
    """IN_CREATE / IN_MOVED_TO events of one directory (ctypes; Linux)."""
    IN_CREATE, IN_MOVED_TO = 0x100, 0x80

    def __init__(self, directory):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise HarnessError(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        wd = self.libc.inotify_add_watch(self.fd, str(directory).encode(), self.IN_CREATE | self.IN_MOVED_TO)
        if wd < 0:
            os.close(self.fd)
            raise HarnessError(f"inotify_add_watch {directory}: {os.strerror(ctypes.get_errno())}")

    def events(self, timeout):
        """[(mask, name)] that arrived within timeout (possibly empty)."""
        if not select.select([self.fd], [], [], timeout)[0]:
            return []
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        out, off = [], 0
        while off + 16 <= len(data):
            _wd, mask, _cookie, length = struct.unpack_from("iIII", data, off)
            name = data[off + 16:off + 16 + length].split(b"\0", 1)[0].decode("utf-8", "replace")
            out.append((mask, name))
            off += 16 + length
        return out

    def close(self):
        os.close(self.fd)


# =============================================================================== consoles

class Console:
    """Every line of every process of a trial, stamped with time.monotonic() as it
    arrives (one reader thread per stream), also written to files."""

    def __init__(self, directory):
        self.dir = Path(directory)
        self.lines = []        # (t, proc name, stream, text)
        self.lock = threading.Lock()
        self.hooks = []        # (regex, fn(t, match, name)), run on the reader thread

    def hook(self, regex, fn):
        with self.lock:
            self.hooks.append((regex, fn))

    def _reader(self, pipe, name, stream):
        path = self.dir / f"{name}.{stream}"
        with open(path, "ab") as out:
            for raw in iter(pipe.readline, b""):
                t = time.monotonic()
                out.write(raw)
                out.flush()
                text = raw.decode("utf-8", "replace").rstrip("\n")
                with self.lock:
                    self.lines.append((t, name, stream, text))
                    hooks = list(self.hooks)
                for regex, fn in hooks:
                    m = regex.search(text)
                    if m:
                        try:
                            fn(t, m, name)
                        except Exception:  # a hook must never kill the reader
                            traceback.print_exc()
        pipe.close()

    def attach(self, proc, name):
        threads = []
        for pipe, stream in ((proc.stdout, "out"), (proc.stderr, "err")):
            th = threading.Thread(target=self._reader, args=(pipe, name, stream), daemon=True)
            th.start()
            threads.append(th)
        return threads

    def snapshot(self):
        with self.lock:
            return list(self.lines)

    def find(self, regex, name=None, stream=None, after=None):
        """[(t, match, name)] of every matching line, in arrival order."""
        out = []
        for t, n, s, text in self.snapshot():
            if (name is None or n == name) and (stream is None or s == stream) and (after is None or t >= after):
                m = regex.search(text)
                if m:
                    out.append((t, m, n))
        return out

    def first(self, regex, **kw):
        hits = self.find(regex, **kw)
        return hits[0] if hits else None

    def text(self, name=None, stream=None):
        return "\n".join(tx for _t, n, s, tx in self.snapshot()
                         if (name is None or n == name) and (stream is None or s == stream))

    def tail(self, n=40):
        lines = [f"{nm}.{s}: {tx}" for _t, nm, s, tx in self.snapshot()]
        return "\n".join(lines[-n:])


class Proc:
    """One ddplaunch (or other) process of a trial, in its own session."""

    def __init__(self, name, cmd, env, console, cwd):
        self.name, self.cmd = name, cmd
        self.t0 = time.monotonic()
        self.popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env=env, cwd=str(cwd), start_new_session=True)
        self.threads = console.attach(self.popen, name)
        self.t_exit = None

    @property
    def pid(self):
        return self.popen.pid

    def poll(self):
        rc = self.popen.poll()
        if rc is not None and self.t_exit is None:
            self.t_exit = time.monotonic()
        return rc

    def wait(self, timeout):
        try:
            rc = self.popen.wait(timeout=max(0.01, timeout))
        except subprocess.TimeoutExpired:
            return None
        self.poll()
        for th in self.threads:
            th.join(timeout=5)
        return rc

    def kill_group(self):
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.popen.kill()
        except OSError:
            pass
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


# =============================================================================== configuration

class TrainCfg:
    """A ddptrain training configuration; the reference run is keyed by it."""

    def __init__(self, nproc, mlp="32,64,64,10"):
        self.nproc, self.mlp = nproc, mlp

    @property
    def key(self):
        return (self.nproc, self.mlp)

    def args(self, seed):
        return ["--mlp-sizes", self.mlp, "--batch-size", "8", "--momentum", "0.9", "--samples", "512",
                "--seed", str(seed), "--steps", str(STEPS), "--checkpoint-every", str(CKPT_EVERY),
                "--keep", str(KEEP), "--log-every", "1"]


class Result:
    def __init__(self, seed, kind):
        self.seed, self.kind = seed, kind
        self.params = {}
        self.problems = []
        self.notes = []
        self.outcome = "?"
        self.fault_to_report = None
        self.fault_to_resume = None
        self.elapsed = 0.0
        self.dir = None

    @property
    def passed(self):
        return not self.problems


# =============================================================================== campaign

class Campaign:
    def __init__(self, opts):
        self.opts = opts
        self.ddplaunch = Path(opts.ddplaunch).absolute()
        self.ddptrain = Path(opts.ddptrain).absolute()
        self.root = os.geteuid() == 0
        self.work = Path(tempfile.mkdtemp(prefix="ddp-chaos-", dir=opts.workdir))
        self.run_dir = self.work / "run"          # XDG_RUNTIME_DIR of every job
        self.run_dir.mkdir(mode=0o700)
        self.shm = self.work / "shm"
        self.shm_private = False
        self.refs = {}                            # key -> sha256 of the final parameters
        self.ckpt_size = {}                       # TrainCfg.key -> bytes of one checkpoint
        self.secrets = {
            "AWS_SECRET_ACCESS_KEY": "chaosAWS" + secrets.token_hex(16),
            "HF_TOKEN": "hf_chaos" + secrets.token_hex(16),
            "DDPLAUNCH_TOKEN": "chaostok" + secrets.token_hex(16),
        }
        self.train_seed = opts.train_seed
        self.binaries_stamp = None

    # ---- set-up and tear-down

    def setup(self):
        if self.root and not self.opts.no_private_shm:
            mount_tmpfs(self.shm, SHM_SIZE)
            self.shm_private = True

    def teardown(self):
        if self.shm_private:
            umount(self.shm)
        if self.opts.keep:
            print(f"chaos: work folder kept: {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)

    # ---- binaries (someone may rebuild them while the campaign runs)

    def stamp(self):
        out = []
        for p in (self.ddplaunch, self.ddptrain):
            try:
                st = p.stat()
                out.append((st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    def wait_for_binaries(self, timeout=300):
        """Both binaries present, executable and unchanged for 3 s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ok = all(p.is_file() and os.access(p, os.X_OK) for p in (self.ddplaunch, self.ddptrain))
            if ok and all(time.time() - p.stat().st_mtime > 3 for p in (self.ddplaunch, self.ddptrain)):
                s = self.stamp()
                if self.binaries_stamp is not None and s != self.binaries_stamp:
                    print("chaos: the binaries changed: recomputing the reference runs", flush=True)
                    self.refs.clear()
                self.binaries_stamp = s
                return
            time.sleep(1)
        raise HarnessError(f"{self.ddplaunch} or {self.ddptrain} missing or not executable")

    # ---- environment and commands

    def env(self, marker, trial_dir, extra=None):
        env = base_env()
        for k in list(env):
            if k.startswith(("SLURM_", "OMPI_", "PMI_", "PMIX_", "JOB_COMPLETION_INDEX", "JOBSET_", "KUBERNETES_",
                             "NCCL_", "GLOO_", "DDP_")):
                env.pop(k)
        env.update({
            "OMP_NUM_THREADS": "1",
            "GLOO_SOCKET_IFNAME": "lo",
            "XDG_RUNTIME_DIR": str(self.run_dir),
            "TMPDIR": str(trial_dir),
            "PYTHON_EXEC": PYTHON,
            "PYTHONDONTWRITEBYTECODE": "1",
            "CHAOS_MARK": marker,
        })
        env.update(self.secrets)
        if extra:
            env.update(extra)
        return env

    def wrap(self, netns=None):
        """Command prefix: a private mount namespace with our tmpfs on /dev/shm
        (inside a network namespace when given)."""
        prefix = ["ip", "netns", "exec", netns] if netns else []
        if self.shm_private:
            prefix += ["unshare", "-m", "--propagation", "private", "sh", "-c",
                       'mount --bind "$0" /dev/shm && exec "$@"', str(self.shm)]
        return prefix

    # ---- reference runs (one per configuration per campaign)

    def reference(self, cfg):
        key = ("ddptrain",) + cfg.key
        if key in self.refs:
            return self.refs[key]
        self.wait_for_binaries()
        d = Path(tempfile.mkdtemp(prefix="ref-", dir=self.work))
        final = d / "final.pt"
        ck = d / "ck"
        marker = "chaosref" + secrets.token_hex(6)
        cmd = self.wrap() + [str(self.ddplaunch), f"--log-dir={d / 'logs'}", f"--rdzv-id=ref-{marker}",
                             f"--nproc-per-node={cfg.nproc}", str(self.ddptrain), *cfg.args(self.train_seed),
                             "--checkpoint-dir", str(ck), "--save-final", str(final)]
        r = self.run_reference(cmd, marker, d)
        if r.returncode != 0 or not final.is_file():
            raise HarnessError(f"reference run failed (rc {r.returncode}): {r.stderr[-2000:]}")
        steps = checkpoint_steps(ck)
        if steps:
            self.ckpt_size[cfg.key] = os.path.getsize(steps[max(steps)])
        self.refs[key] = sha256_file(final)
        if self.opts.verbose:
            print(f"chaos: reference {cfg.key}: {self.refs[key][:16]}", flush=True)
        return self.refs[key]

    def run_reference(self, cmd, marker, d):
        try:
            return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  env=self.env(marker, d), cwd=str(d), timeout=JOB_TIMEOUT, start_new_session=True)
        except subprocess.TimeoutExpired:
            raise HarnessError(f"the reference run did not end within {JOB_TIMEOUT:.0f} s: {' '.join(cmd)}")
        finally:
            kill_marked(marker)

    def py_reference(self):
        key = ("python",)
        if key in self.refs:
            return self.refs[key]
        self.wait_for_binaries()
        d = Path(tempfile.mkdtemp(prefix="ref-py-", dir=self.work))
        (d / "ck").mkdir()
        marker = "chaosref" + secrets.token_hex(6)
        cmd = self.wrap() + [str(self.ddplaunch), f"--log-dir={d / 'logs'}", f"--rdzv-id=ref-{marker}",
                             "--nproc-per-node=2", str(TORCH_SCRIPT), str(d / "ck"), "--steps", str(PY_STEPS)]
        r = self.run_reference(cmd, marker, d)
        m = PY_FINAL_RE.search(r.stdout)
        if r.returncode != 0 or not m:
            raise HarnessError(f"Python reference run failed (rc {r.returncode}): {r.stderr[-2000:]}")
        self.refs[key] = m.group(1)
        return self.refs[key]

    # ---- trials

    def kinds(self):
        if not self.opts.kinds:
            return list(KINDS)
        wanted = [k.strip() for k in self.opts.kinds.split(",") if k.strip()]
        bad = [k for k in wanted if k not in KINDS]
        if bad:
            raise SystemExit(f"chaos: unknown kind(s) {bad}; --list-kinds lists them")
        return [k for k in KINDS if k in wanted]

    def replay_command(self, seed):
        script = os.path.relpath(__file__)
        if script.startswith(".."):
            script = str(Path(__file__).resolve())
        cmd = [script, "--seed", str(seed), "--trials", "1"]
        if self.opts.kinds:
            cmd += ["--kinds", self.opts.kinds]
        if self.opts.ddplaunch != str(default_ddplaunch()):
            cmd += ["--ddplaunch", self.opts.ddplaunch]
        if self.opts.ddptrain != str(default_ddptrain()):
            cmd += ["--ddptrain", self.opts.ddptrain]
        if self.opts.train_seed != 7:
            cmd += ["--train-seed", str(self.opts.train_seed)]
        return " ".join(cmd)

    def run_trial(self, seed, kind):
        for attempt in range(3):
            self.wait_for_binaries()
            before = self.stamp()
            res = Trial(self, seed, kind).run()
            if self.stamp() == before:
                return res
            print(f"chaos: trial {seed}: a binary was rebuilt during the trial; running it again", flush=True)
        res.notes.append("binaries kept changing during the trial")
        return res


# =============================================================================== one trial

class Trial:
    def __init__(self, campaign, seed, kind):
        self.c = campaign
        self.seed, self.kind = seed, kind
        self.rng = random.Random(seed)
        self.res = Result(seed, kind)
        self.marker = f"chaos{seed}x{secrets.token_hex(5)}"
        self.dir = Path(tempfile.mkdtemp(prefix=f"trial-{seed}-{kind}-", dir=campaign.work))
        self.res.dir = self.dir
        self.console = Console(self.dir)
        self.procs = []
        self.mounts = []
        self.namespaces = []
        self.corrupted = set()      # checkpoint paths this trial damaged
        self.corrupted_ino = {}     # their inodes once damaged
        self.t_fault = None
        self.shm_fillers = set()
        self.killed_agents = {}     # pid of an agent this trial SIGKILLed -> when
        self.step_seen = (0, None)  # (highest step rank 0 reported, when)
        self.console.hook(STEP_RE, self._on_step)
        self.console.hook(PY_STEP_RE, self._on_step)
        self.console.hook(CKPT_LINE_RE, self._on_checkpoint)

    def _on_step(self, t, m, _name):
        if int(m.group(1)) > self.step_seen[0]:
            self.step_seen = (int(m.group(1)), t)

    def _on_checkpoint(self, _t, m, _name):
        # a damaged checkpoint written again (renamed over it: a new inode) is whole again
        path = os.path.abspath(m.group(1))
        ino = self.corrupted_ino.get(path)
        try:
            if ino is not None and os.stat(path).st_ino != ino:
                self.corrupted.discard(path)
        except OSError:
            pass

    # ---- bookkeeping

    def problem(self, text):
        self.res.problems.append(text)

    def note(self, text):
        self.res.notes.append(text)

    def param(self, **kw):
        self.res.params.update(kw)

    def start(self, name, cmd, env_extra=None):
        p = Proc(name, cmd, self.c.env(self.marker, self.dir, env_extra), self.console, self.dir)
        self.procs.append(p)
        return p

    def wait_all(self, procs, timeout=JOB_TIMEOUT):
        deadline = time.monotonic() + timeout
        rcs = []
        for p in procs:
            rc = p.wait(deadline - time.monotonic())
            if rc is None:
                self.problem(f"{p.name}: ddplaunch still running after {timeout:.0f} s (killed)")
                for q in procs:
                    q.kill_group()
                kill_marked(self.marker)
                return [q.poll() for q in procs]
            rcs.append(rc)
        return rcs

    def check_no_survivors(self):
        """Invariant: after every ddplaunch of the trial exited, no marked process lives."""
        if not wait_until(lambda: not find_marked(self.marker), LEFTOVER_GRACE, 0.05):
            left = find_marked(self.marker)
            states = ", ".join(f"pid {p} ({proc_state(p)}): {c[:120]}" for p, c in left)
            self.problem(f"processes survived the job by {LEFTOVER_GRACE:.0f} s: {states}")
            kill_marked(self.marker)

    # ---- the trial

    def run(self):
        t0 = time.monotonic()
        self.t_start_wall = time.time()
        runtime_before = self.runtime_entries()
        try:
            getattr(self, "kind_" + self.kind.replace("-", "_"))()
        except HarnessError as e:
            self.problem(f"harness: {e}")
        except Exception as e:  # a bug in this script: report it, keep the campaign going
            self.problem(f"harness exception: {e!r}\n{traceback.format_exc()}")
        finally:
            for p in self.procs:
                if p.poll() is None:
                    self.killed_agents[p.pid] = time.monotonic()
                    p.kill_group()
            kill_marked(self.marker)
            for ns in self.namespaces:
                ip("netns", "del", ns)
            for m in reversed(self.mounts):
                umount(m)
        self.check_leftover_files(runtime_before)
        self.check_secrets()
        self.res.elapsed = time.monotonic() - t0
        self.cleanup_shm()
        return self.res

    # ---- invariants on files

    def runtime_entries(self):
        out = set()
        for root, dirs, files in os.walk(self.c.run_dir):
            for n in dirs + files:
                out.add(os.path.relpath(os.path.join(root, n), self.c.run_dir))
        return out

    def check_leftover_files(self, before):
        allowed = re.compile(r"^ddplaunch(/jobs(/[^/]+\.json)?|/libblas-probe\.json)?$")
        for rel in sorted(self.runtime_entries() - before):
            path = os.path.join(self.c.run_dir, rel)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISSOCK(mode) or not allowed.match(rel):
                kind = "socket" if stat.S_ISSOCK(mode) else "entry"
                owner = re.match(r"^ddplaunch/(\d+)\.", rel)
                killed_at = self.killed_agents.get(int(owner.group(1))) if owner else None
                if killed_at is not None and not any(p.t0 > killed_at for p in self.procs):
                    # a SIGKILLed agent cannot clean up; the next agent that starts does
                    self.note(f"{kind} {rel} of the SIGKILLed agent stays until the next ddplaunch starts")
                    continue
                self.problem(f"left in the runtime dir: {kind} {rel}")
        for root, _dirs, files in os.walk(self.dir):
            for n in files:
                p = os.path.join(root, n)
                try:
                    if stat.S_ISSOCK(os.lstat(p).st_mode):
                        self.problem(f"socket file left: {p}")
                except OSError:
                    pass
        if self.c.shm_private:
            left = sorted(n for n in os.listdir(self.c.shm) if n not in self.shm_fillers)
            if left:
                self.problem(f"left in /dev/shm: {left}")
        else:
            pids = {str(p.pid) for p in self.procs}
            left = [n for n in os.listdir("/dev/shm") if n.startswith("ddp-shm-") and n.split("-")[2] in pids]
            if left:
                self.problem(f"left in /dev/shm: {left}")

    def cleanup_shm(self):
        if self.c.shm_private:
            for n in os.listdir(self.c.shm):
                try:
                    os.unlink(self.c.shm / n)
                except OSError:
                    pass
            if self.shm_resized:
                remount_tmpfs(self.c.shm, SHM_SIZE)

    shm_resized = False

    def check_secrets(self):
        needles = {k: v.encode() for k, v in self.c.secrets.items()}
        paths = []
        for root, _dirs, files in os.walk(self.dir):
            paths += [os.path.join(root, n) for n in files if not n.endswith((".ddpckpt", ".pt", ".tmp"))]
        for p in paths:
            try:
                with open(p, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            for k, v in needles.items():
                if v in data:
                    self.problem(f"the secret of {k} appears in {p}")
        # The job registry (0600, in a 0700 folder) keeps a running job's token so that
        # `ddplaunch status|stop` can reach its coordinator; an ended job's entry must not.
        jobs = self.c.run_dir / "ddplaunch" / "jobs"
        for p in sorted(jobs.glob("*.json")) if jobs.is_dir() else []:
            try:
                if p.stat().st_mtime < self.t_start_wall - 1:
                    continue   # checked by the trial that wrote it
                entry = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            text = json.dumps(entry)
            for k, v in self.c.secrets.items():
                if v not in text:
                    continue
                if k == "DDPLAUNCH_TOKEN" and entry.get("token") == v and entry.get("state") in ("running", "lost"):
                    if entry.get("state") == "lost" or proc_state(entry.get("pid", 0)) is None:
                        self.note(f"the job token stays in {p.name} (state {entry.get('state')}): its agent was "
                                  f"killed before it could end the entry")
                    continue
                self.problem(f"the secret of {k} appears in the job registry entry {p}")

    # ---- ddptrain jobs

    def ddptrain_cmd(self, cfg, name, restarts, ck, final, extra_train=(), launcher_extra=(), netns=None,
                     nnodes=None, node_rank=None, endpoint=None, log_dir=None):
        log_dir = log_dir or self.dir / "logs" / name
        cmd = self.c.wrap(netns) + [str(self.c.ddplaunch), f"--log-dir={log_dir}",
                                    f"--rdzv-id=chaos-{self.seed}-{name}",
                                    f"--nproc-per-node={cfg.nproc if nnodes is None else 1}",
                                    f"--max-restarts={restarts}", f"--heartbeat-interval={HB}",
                                    f"--hang-timeout={HANG}", "--shutdown-grace=2"]
        if nnodes is not None:
            cmd += [f"--nnodes={nnodes}", f"--node-rank={node_rank}", f"--rdzv-endpoint={endpoint}",
                    f"--rdzv-conf={MN_CONF}"]
        cmd += list(launcher_extra)
        cmd += [str(self.c.ddptrain), *cfg.args(self.c.train_seed), "--checkpoint-dir", str(ck),
                "--save-final", str(final), *extra_train]
        return cmd

    def start_ddptrain(self, cfg, name, restarts, ck, final, slow=True, faults=(), **kw):
        extra = []
        if slow:
            extra += ["--inject-fault", f"slow={SLOW}@0:*"]
        for f in faults:
            extra += ["--inject-fault", f]
        return self.start(name, self.ddptrain_cmd(cfg, name, restarts, ck, final, extra, **kw))

    def wait_step(self, step, procs, timeout=60, after=None):
        """Waits until rank 0 reported `step` (returns the time) or the job ended (None)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen, t = self.step_seen
            if seen >= step:
                return t
            if all(p.poll() is not None for p in procs):
                return None
            time.sleep(0.002)
        raise HarnessError(f"rank 0 did not reach step {step} within {timeout} s:\n{self.console.tail()}")

    def find_rank_pid(self, rank, restart=0, program=None, timeout=30):
        program = program or str(self.c.ddptrain)
        pid = wait_until(lambda: rank_pids(self.marker, program).get((rank, restart)), timeout, 0.02)
        if not pid:
            raise HarnessError(f"the process of rank {rank} (restart {restart}) was not found")
        return pid

    def ck_view(self, ck):
        """What an attempt starting now can see: ({step: path}, damaged paths)."""
        return checkpoint_steps(ck), frozenset(self.corrupted)

    def snapshot_on_restart(self, ck):
        """Views of ck taken the moment each 'restarting the job' line arrives (the ranks
        are gone, the next attempt's have not loaded yet): {attempt: view}."""
        snaps = {}

        def on_restart(_t, m, _name):
            snaps[int(m.group(1))] = self.ck_view(ck)
        self.console.hook(RESTART_RE, on_restart)
        return snaps

    def check_resumes(self, snaps, name, view_at_start=None):
        """Invariant: every attempt resumed from the newest valid checkpoint it could see,
        never from a damaged one, and named the damaged ones it skipped."""
        starts = self.console.find(START_RE, name=name)
        skipped = {os.path.abspath(m.group(1)) for _t, m, _n in self.console.find(SKIPPED_RE, name=name)}
        views = ([(0, view_at_start)] if view_at_start is not None else []) + sorted(snaps.items())
        for attempt, (steps, damaged) in views:
            if attempt >= len(starts):
                continue   # never started (e.g. the job ended)
            valid = {s: p for s, p in steps.items() if os.path.abspath(p) not in damaged}
            want = max(valid) if valid else 0
            got = int(starts[attempt][1].group(1))
            if got in steps and os.path.abspath(steps[got]) in damaged:
                self.problem(f"attempt {attempt} loaded the damaged checkpoint {os.path.basename(steps[got])}")
            elif got != want:
                self.problem(f"attempt {attempt} started from step {got}, but the newest valid checkpoint "
                             f"then was step {want} (checkpoints: {sorted(steps)}, damaged: "
                             f"{sorted(os.path.basename(p) for p in damaged)})")
            for s, p in steps.items():
                if os.path.abspath(p) in damaged and s > got and os.path.abspath(p) not in skipped:
                    self.problem(f"attempt {attempt}: the damaged checkpoint {os.path.basename(p)} was not "
                                 f"reported as skipped")

    def check_final(self, cfg, final, name):
        ref = self.c.reference(cfg)
        if not Path(final).is_file():
            self.problem(f"{name}: exit 0 but no --save-final file")
            return False
        got = sha256_file(final)
        if got != ref:
            self.problem(f"{name}: final parameters differ from the uninterrupted run "
                         f"(sha256 {got[:16]} vs {ref[:16]})")
            return False
        return True

    def failure_json(self, name, attempt=0, node_dir=None):
        base = self.dir / "logs" / (node_dir or name) / f"chaos-{self.seed}-{name}" / f"attempt_{attempt}"
        p = base / "failure.json"
        if not p.is_file():
            return None
        try:
            return json.loads(p.read_text())
        except ValueError as e:
            self.problem(f"{p}: not JSON: {e}")
            return None

    def failure_jsons(self, name, node_dir=None):
        base = self.dir / "logs" / (node_dir or name) / f"chaos-{self.seed}-{name}"
        out = {}
        for p in sorted(base.glob("attempt_*/failure.json")):
            try:
                out[int(p.parent.name.split("_")[1])] = json.loads(p.read_text())
            except ValueError:
                self.problem(f"{p}: not JSON")
        return out

    def set_report_time(self, t):
        if self.t_fault is not None and t is not None and self.res.fault_to_report is None:
            self.res.fault_to_report = max(0.0, t - self.t_fault)

    def set_resume_time(self, name, py=False):
        """Fault to the first training step of the next attempt."""
        if self.t_fault is None:
            return
        if py:
            starts = self.console.find(PY_RESUMED_RE, name=name, after=self.t_fault)
            restart = self.console.first(RESTART_RE, name=name, after=self.t_fault)
            after = starts[0][0] if starts else (restart[0] if restart else None)
            step = self.console.first(PY_STEP_RE, name=name, after=after) if after else None
        else:
            starts = self.console.find(START_RE, name=name, after=self.t_fault)
            step = self.console.first(STEP_RE, name=name, after=starts[0][0]) if starts else None
        if step:
            self.res.fault_to_resume = step[0] - self.t_fault

    def recovery(self, cfg, ck, tag="recovery", ck_note=None):
        """After a documented failure: the same job again without the fault; it must
        resume from the newest valid checkpoint and end bitwise equal."""
        view = self.ck_view(ck)
        final = self.dir / f"{tag}.pt"
        p = self.start(tag, self.ddptrain_cmd(cfg, tag, 0, ck, final))
        [rc] = self.wait_all([p])
        self.check_no_survivors()
        if rc != 0:
            self.problem(f"{tag}: the job started again without the fault exited {rc}:\n"
                         + self.console.tail(20))
            return
        self.check_final(cfg, final, tag)
        self.check_resumes({}, tag, view_at_start=view)

    def verdict(self, rc, ok_rcs, what):
        self.res.outcome = f"exit {rc}" if rc != 0 else "finished"
        if rc not in ok_rcs:
            self.problem(f"exit code {rc}; expected {' or '.join(map(str, ok_rcs))} ({what})\n"
                         + self.console.tail(25))
            return False
        return True

    # ---- shared flow of single-node ddptrain faults

    def single_node(self, cfg, restarts, cause, victim, faults=(), external=None, ck=None, expect_fail_rc=None,
                    before_start=None, extra_check=None, persistent=False):
        """cause: ('signal', N) | ('exit', N) | ('stuck',) | ('silent',) | None (no failure expected).
        external(trial, proc) performs the fault and sets self.t_fault."""
        ck = ck or self.dir / "ck"
        Path(ck).mkdir(exist_ok=True)
        final = self.dir / "final.pt"
        self.c.reference(cfg)
        snaps = self.snapshot_on_restart(ck)
        if before_start:
            before_start()
        p = self.start_ddptrain(cfg, "job", restarts, ck, final, faults=faults)
        if external:
            external(p)
        [rc] = self.wait_all([p])
        self.check_no_survivors()
        if self.t_fault is None:
            # the rank's own line: an injected fault, or a full checkpoint disk
            hit = self.console.first(FAULT_LINE_RE) or self.console.first(ENOSPC_RE)
            if hit:
                self.t_fault = hit[0]
        fails = self.failure_jsons("job")
        if cause is None:
            self.verdict(rc, [0], "no failure expected")
            if fails:
                self.problem(f"failure.json written although nothing failed: attempts {sorted(fails)}")
        else:
            self.check_report(cause, victim, fails.get(0), "job")
            if persistent:
                self.verdict(rc, [expect_fail_rc], f"{cause[:2]} of rank {victim} in every attempt")
                if restarts >= 1:
                    self.set_resume_time("job")
            elif restarts >= 1:
                if self.verdict(rc, [0], f"a restart was left after {cause[:2]} of rank {victim}"):
                    self.set_resume_time("job")
            else:
                self.verdict(rc, [expect_fail_rc], f"{cause[:2]} of rank {victim}, no restart left")
        if rc == 0:
            self.check_final(cfg, final, "job")
        self.check_resumes(snaps, "job")
        if extra_check:
            extra_check(rc, fails)
        if rc != 0 and self.res.outcome != "?" and not self.c.opts.no_recovery:
            self.recovery(cfg, ck)

    def check_report(self, cause, victim, fj, name):
        """Invariant: console and failure.json name the faulted rank and the right cause."""
        if cause[0] in ("signal", "exit"):
            hits = self.console.find(FAILED_RE, name=name)
            if not hits:
                self.problem("no 'rank R ... failed' line on the console")
            else:
                t, m, _ = hits[0]
                self.set_report_time(t)
                want = f"killed by {signal.Signals(cause[1]).name}" if cause[0] == "signal" else \
                    f"exit code {cause[1]}"
                if int(m.group(1)) != victim or not m.group(4).startswith(want):
                    self.problem(f"first failure line names rank {m.group(1)} ({m.group(4)}); the fault was "
                                 f"rank {victim} ({want}): {m.group(0)}")
            if fj is None:
                self.problem("no attempt_0/failure.json")
                return
            rc_ = fj.get("root_cause") or {}
            if rc_.get("rank") != victim:
                self.problem(f"failure.json root cause is rank {rc_.get('rank')} "
                             f"({rc_.get('description')}); the fault was rank {victim}")
            elif cause[0] == "signal" and rc_.get("signal") != cause[1]:
                self.problem(f"failure.json root cause signal {rc_.get('signal')}, expected {cause[1]}")
            elif cause[0] == "exit" and rc_.get("exit_code") != cause[1]:
                self.problem(f"failure.json root cause exit code {rc_.get('exit_code')}, expected {cause[1]}")
            if len(cause) > 2 and cause[2] and not any(cause[2] in s for s in rc_.get("stderr_tail") or []) \
                    and cause[2] not in (rc_.get("traceback") or ""):
                self.problem(f"failure.json root cause does not mention {cause[2]!r}: {rc_}")
        else:
            regex = STUCK_RE if cause[0] == "stuck" else SILENT_RE
            kind = "stuck_collective" if cause[0] == "stuck" else "silent_rank"
            hit = self.console.first(regex, name=name)
            if not hit:
                self.problem(f"no '{kind} detected' line on the console")
            else:
                self.set_report_time(hit[0])
                if int(hit[1].group(1)) != victim:
                    self.problem(f"{kind} names rank {hit[1].group(1)}; the fault was rank {victim}")
            hang = (fj or {}).get("hang")
            if not hang:
                self.problem(f"attempt_0/failure.json has no hang report: {fj}")
            elif hang.get("kind") != kind or hang.get("culprits") != [victim]:
                self.problem(f"failure.json hang: kind {hang.get('kind')} culprits {hang.get('culprits')}; "
                             f"expected {kind} [{victim}]")

    def pick_cfg(self, nprocs=(2, 3)):
        cfg = TrainCfg(self.rng.choice(nprocs))
        self.param(nproc=cfg.nproc)
        return cfg

    def pick_restarts(self):
        r = self.rng.choice([0, 1, 1, 2])
        self.param(restarts=r)
        return r

    # =========================================================================== kinds

    def kind_rank_sigkill(self):
        self.external_signal(signal.SIGKILL)

    def kind_rank_sigstop(self):
        self.external_signal(signal.SIGSTOP)

    def external_signal(self, sig):
        cfg, restarts = self.pick_cfg(), self.pick_restarts()
        victim, step = self.rng.randrange(cfg.nproc), self.rng.randint(3, 85)
        self.param(rank=victim, step=step)

        def fault(p):
            pid = self.find_rank_pid(victim)
            if self.wait_step(step, [p]) is None:
                raise HarnessError("the job ended before the fault step")
            os.kill(pid, sig)
            self.t_fault = time.monotonic()
        if sig == signal.SIGKILL:
            self.single_node(cfg, restarts, ("signal", signal.SIGKILL), victim, external=fault,
                             expect_fail_rc=128 + signal.SIGKILL)
        else:
            self.single_node(cfg, restarts, ("silent",), victim, external=fault, expect_fail_rc=EXIT_HANG)

    def injected(self, kind, cause, fail_rc, spec=None, steps=(3, 85)):
        cfg, restarts = self.pick_cfg(), self.pick_restarts()
        victim, step = self.rng.randrange(cfg.nproc), self.rng.randint(*steps)
        self.param(rank=victim, step=step)
        self.single_node(cfg, restarts, cause, victim, faults=[f"{spec or kind}@{step}:{victim}"],
                         expect_fail_rc=fail_rc)

    def kind_inject_crash(self):
        self.injected("crash", ("signal", signal.SIGABRT), 128 + signal.SIGABRT)

    def kind_inject_exit(self):
        self.injected("exit", ("exit", 17), 17)

    def kind_inject_hang(self):
        self.injected("hang", ("stuck",), EXIT_HANG)

    def kind_inject_silent(self):
        self.injected("silent", ("silent",), EXIT_HANG)

    def kind_inject_slow(self):
        seconds = self.rng.choice([0.05, 0.1, 0.2])
        self.param(seconds=seconds)
        self.injected("slow", None, 0, spec=f"slow={seconds}", steps=(70, 92))

    # ---- checkpoints

    def kind_ckpt_write_crash(self):
        cfg = self.pick_cfg()
        restarts = self.rng.choice([0, 1, 1, 1])
        self.param(restarts=restarts)
        target = self.rng.choice([2, 3, 4, 5, 6, 7, 8])  # the n-th checkpoint of the run
        self.param(checkpoint=target)
        ck = self.dir / "ck"
        ck.mkdir()

        def fault(p):
            watch = Inotify(ck)
            try:
                pid = self.find_rank_pid(0)
                seen = 0
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and p.poll() is None:
                    for _mask, name in watch.events(0.05):
                        if not name.endswith(".tmp"):
                            continue
                        seen += 1
                        if seen < target:
                            continue
                        os.kill(pid, signal.SIGSTOP)
                        tmp = ck / name
                        m = re.match(r"^\.(ckpt_\d+\.ddpckpt)\.", name)
                        final_name = m.group(1) if m else "?"
                        if tmp.exists() and not (ck / final_name).exists():
                            size = tmp.stat().st_size
                            os.kill(pid, signal.SIGKILL)
                            self.t_fault = time.monotonic()
                            self.param(killed_during=final_name, temp_bytes=size)
                            return
                        os.kill(pid, signal.SIGCONT)  # too late for this one: the next
                        self.note(f"missed the write window of checkpoint #{seen}")
                        self.param(checkpoint=seen + 1)
                raise HarnessError("no checkpoint write could be interrupted")
            finally:
                watch.close()

        def stale(rc, fails):
            left = temp_files(ck)
            if left:
                self.note(f"checkpoint temp file left behind by the killed writer: {left}")
        self.single_node(cfg, restarts, ("signal", signal.SIGKILL), 0, external=fault, ck=ck,
                         expect_fail_rc=128 + signal.SIGKILL, extra_check=stale)

    def corrupt(self, path, how):
        data = bytearray(Path(path).read_bytes())
        n = len(data)
        if how == "header":
            data[self.rng.randrange(0, 48)] ^= 1 << self.rng.randrange(8)
        elif how == "payload":
            data[self.rng.randrange(48, n - 8)] ^= 1 << self.rng.randrange(8)
        elif how == "trailer":
            data[self.rng.randrange(n - 8, n)] ^= 1 << self.rng.randrange(8)
        elif how == "truncate":
            data = data[:self.rng.randrange(0, n)]
        elif how == "zeros":
            data = bytearray(n)
        Path(path).write_bytes(bytes(data))
        self.corrupted.add(os.path.abspath(path))
        self.corrupted_ino[os.path.abspath(path)] = os.stat(path).st_ino

    def kind_ckpt_corrupt(self):
        cfg = self.pick_cfg()
        restarts = self.rng.choice([0, 1, 1, 1])
        victim, step = self.rng.randrange(cfg.nproc), self.rng.randint(25, 85)
        how = self.rng.choice(["header", "payload", "payload", "trailer", "truncate", "zeros", "all"])
        self.param(restarts=restarts, rank=victim, step=step, damage=how)
        ck = self.dir / "ck"

        def fault(p):
            pids = {r: self.find_rank_pid(r) for r in range(cfg.nproc)}
            if self.wait_step(step, [p]) is None:
                raise HarnessError("the job ended before the fault step")
            for pid in pids.values():          # freeze the job: no checkpoint is written meanwhile
                os.kill(pid, signal.SIGSTOP)
            have = checkpoint_steps(ck)
            if not have:
                raise HarnessError("no checkpoint to damage")
            targets = list(have.values()) if how == "all" else [have[max(have)]]
            for path in targets:
                self.corrupt(path, "payload" if how == "all" else how)
            self.param(damaged=[os.path.basename(t) for t in targets])
            os.kill(pids[victim], signal.SIGKILL)
            self.t_fault = time.monotonic()
            for r, pid in pids.items():
                if r != victim:
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass   # ddplaunch already killed it: a stopped rank gets SIGKILL
        self.single_node(cfg, restarts, ("signal", signal.SIGKILL), victim, external=fault, ck=ck,
                         expect_fail_rc=128 + signal.SIGKILL)

    def kind_ckpt_disk_full(self):
        cfg = self.pick_cfg()
        restarts = self.pick_restarts()
        self.c.reference(cfg)
        size1 = self.c.ckpt_size.get(cfg.key)
        if not size1:
            raise HarnessError("checkpoint size unknown")
        pages = (size1 + 4095) // 4096
        mode = self.rng.choice(["from-start", "from-start", "mid-run"])
        ck = self.dir / "ckfs"
        if mode == "from-start":
            room = self.rng.randint(0, KEEP)  # checkpoints that fit (the next write fails)
            size = max(1, room * pages + self.rng.randint(1, pages - 1)) * 4096
            self.param(mode=mode, fits=room, tmpfs_bytes=size)
        else:
            size = 64 << 20
            step = self.rng.randint(15, 80)
            self.param(mode=mode, step=step)
        mount_tmpfs(ck, size)
        self.mounts.append(ck)

        def fill(p):
            if self.wait_step(step, [p]) is None:
                raise HarnessError("the job ended before the fault step")
            filler = ck / "filler"
            fill_file(filler)
            self.t_fault = time.monotonic()
            # leave some room, less than one checkpoint
            os.truncate(filler, max(0, filler.stat().st_size - self.rng.randint(0, size1 - 1)))

        def after(rc, fails):
            if rc == 0:
                return
            for attempt, fj in sorted(fails.items()):
                root = fj.get("root_cause") or {}
                if root.get("rank") != 0 or root.get("exit_code") != 1 or \
                        not any("No space left on device" in s for s in root.get("stderr_tail") or []):
                    self.problem(f"attempt {attempt}: failure.json root cause is not rank 0's ENOSPC: {root}")
            if len(fails) != restarts + 1:
                self.problem(f"{len(fails)} failed attempt(s) for {restarts} restart(s)")
            left = temp_files(ck)
            if left:
                self.problem(f"a failed checkpoint write left its temp file: {left}")
            remount_tmpfs(ck, 64 << 20)   # the operator makes room; the recovery run follows
            filler = ck / "filler"
            if filler.exists():
                filler.unlink()
        # every attempt fails on its next checkpoint: the documented end is rank 0's exit code 1
        self.single_node(cfg, restarts, ("exit", 1, "No space left on device"), 0,
                         external=fill if mode == "mid-run" else None, ck=ck, expect_fail_rc=1,
                         extra_check=after, persistent=True)

    # ---- /dev/shm

    def kind_shm_full(self):
        if not self.c.shm_private:
            raise HarnessError("needs the private /dev/shm (root)")
        cfg = self.pick_cfg()
        self.c.reference(cfg)   # before /dev/shm is made small
        mode = self.rng.choice(["from-start", "from-start", "mid-run"])
        seg = 2 * (cfg.nproc + 1) * (4 << 20)   # the shared-memory all-reduce's segment, about
        self.param(mode=mode)
        victim, step = self.rng.randrange(cfg.nproc), self.rng.randint(10, 80)
        if mode == "from-start":
            free = self.rng.choice([0, 64 << 10, 1 << 20, seg - (1 << 20), seg + (48 << 10), seg + (1 << 20)])
            crash = self.rng.random() < 0.5
            self.param(free_bytes=free, crash=crash)
            self.c.wait_for_binaries()
            remount_tmpfs(self.c.shm, max(64 << 10, free + (64 << 10)))
            self.shm_resized = True
            filler = self.c.shm / "chaos-filler"
            self.shm_fillers.add(filler.name)
            fill_file(filler, max(64 << 10, free + (64 << 10)) - free)
            if crash:
                self.param(rank=victim, step=step)
                self.t_fault = None
                self.single_node(cfg, 1, ("signal", signal.SIGABRT), victim, faults=[f"crash@{step}:{victim}"])
            else:
                self.single_node(cfg, 0, None, victim)
        else:
            self.param(rank=victim, step=step)

            def refill(_t, _m, _name):
                # the killed attempt's segments were freed: fill again before the next one starts
                filler = self.c.shm / "chaos-filler2"
                self.shm_fillers.add(filler.name)
                fill_file(filler)

            def fault(p):
                pid = self.find_rank_pid(victim)
                if self.wait_step(step, [p]) is None:
                    raise HarnessError("the job ended before the fault step")
                filler = self.c.shm / "chaos-filler"
                self.shm_fillers.add(filler.name)
                fill_file(filler)
                self.console.hook(RESTART_RE, refill)
                os.kill(pid, signal.SIGKILL)
                self.t_fault = time.monotonic()
            self.single_node(cfg, 1, ("signal", signal.SIGKILL), victim, external=fault)

    # ---- several nodes

    def multinode(self, victim_node, supervise, netns=False):
        cfg = TrainCfg(2)   # 2 nodes x 1 rank
        self.c.reference(cfg)
        restarts = 1 if supervise else self.rng.choice([0, 0, 1]) if victim_node == 0 else 0
        step = self.rng.randint(5, 80)
        self.param(nodes=2, victim_node=victim_node, restarts=restarts, step=step, supervisor=supervise)
        ck, final = self.dir / "ck", self.dir / "final.pt"
        ck.mkdir()
        port = free_port()
        host = "127.0.0.1"
        nsnames, ifnames = [None, None], ["lo", "lo"]
        if netns:
            nsnames, ifnames, addrs = self.make_namespaces()
            host = addrs[0]
        endpoint = f"{host}:{port}"
        snaps = self.snapshot_on_restart(ck)

        def agent(k, tag=""):
            cmd = self.ddptrain_cmd(cfg, "job", restarts, ck, final, ["--inject-fault", f"slow={SLOW}@0:*"],
                                    netns=nsnames[k], nnodes=2, node_rank=k, endpoint=endpoint,
                                    log_dir=self.dir / "logs" / f"node{k}")
            return self.start(f"node{k}{tag}", cmd, env_extra={"GLOO_SOCKET_IFNAME": ifnames[k]})
        agents = [agent(0), agent(1)]
        victim = agents[victim_node]
        if self.wait_step(step, agents) is None:
            raise HarnessError("the job ended before the fault step")
        if netns:
            r = ip("-n", nsnames[1], "link", "set", ifnames[1], "down")
            if r.returncode != 0:
                raise HarnessError(f"link down: {r.stderr}")
        else:
            os.kill(victim.pid, signal.SIGKILL)
            self.killed_agents[victim.pid] = time.monotonic()
        self.t_fault = time.monotonic()
        procs = list(agents)
        if supervise:
            # a supervisor (systemd, Slurm, Kubernetes) starts node 1's agent again once it is gone
            if agents[1].wait(60) is None:
                self.problem("node 1's agent did not exit after the fault\n" + self.console.tail(20))
            else:
                if netns:
                    ip("-n", nsnames[1], "link", "set", ifnames[1], "up")
                time.sleep(self.rng.uniform(0.2, 2.0))
                procs.append(agent(1, "b"))
        rcs = self.wait_all(procs)
        self.check_no_survivors()
        names = [p.name for p in procs]
        rc_by = dict(zip(names, rcs))
        self.param(exit_codes=rc_by)
        if supervise:
            self.res.outcome = "finished" if rc_by.get("node0") == 0 and rc_by.get("node1b") == 0 else \
                f"exit {rc_by}"
            if rc_by.get("node0") != 0 or rc_by.get("node1b") != 0:
                self.problem(f"node 1's agent was started again (restarts left: {restarts}); expected every "
                             f"agent to exit 0, got {rc_by}\n" + self.console.tail(30))
            else:
                self.check_final(cfg, final, "job")
                self.set_resume_time("node0")
        survivors = []
        if netns:
            survivors = [("node0", EXIT_NODE_LOST, NODE_LOST_RE, "node 1 lost")]
            if not supervise:
                survivors.append(("node1", EXIT_RDZV, COORD_LOST_RE, "the coordinator lost"))
        elif victim_node == 1:
            survivors = [("node0", EXIT_NODE_LOST, NODE_LOST_RE, "node 1 lost")]
        else:
            survivors = [("node1", EXIT_RDZV, COORD_LOST_RE, "the coordinator lost")]
        for name, code, regex, what in survivors:
            err = self.console.find(regex, name=name, stream="err", after=self.t_fault)
            named = [h for h in err if regex is not NODE_LOST_RE or h[1].group(1) == "1"]
            if not named:
                self.problem(f"{name}: no console line naming {what}")
            else:
                self.set_report_time(named[0][0])
            if not supervise:
                if self.res.outcome == "?":
                    self.res.outcome = f"exit {rc_by.get(name)}"
                if rc_by.get(name) != code:
                    self.problem(f"{name} exited {rc_by.get(name)}; documented: {code} ({what})\n"
                                 + self.console.tail(25))
            # the node's own rank did nothing wrong: it must not be the root cause
            k = int(name[4])
            fj = self.failure_json("job", 0, node_dir=name)
            if fj is not None:
                reason = (fj.get("verdict") or {}).get("reason", "")
                root = fj.get("root_cause") or {}
                if name == "node0" and "node 1" not in reason:
                    self.problem(f"{name}'s failure.json verdict does not name node 1: {reason!r}")
                if root and root.get("rank") == k:
                    self.problem(f"{name}'s failure.json (and FAILED block) names its own healthy rank {k} as the "
                                 f"root cause ({root.get('description')}: "
                                 f"{(root.get('stderr_tail') or [''])[-1][:150]})")
        self.check_resumes(snaps, "node0")
        if not supervise and not self.c.opts.no_recovery:
            if netns:
                ip("-n", nsnames[1], "link", "set", ifnames[1], "up")
            self.recovery(cfg, ck)

    def make_namespaces(self):
        tag = f"{os.getpid() % 10000}{secrets.token_hex(2)}"
        x = secrets.randbelow(200) + 20
        ns = [f"chaos{tag}n{k}" for k in range(2)]
        addrs = [f"10.232.{x}.1", f"10.232.{x}.2"]
        a, b = f"chA{tag}", f"chB{tag}"

        def must(*args):
            r = ip(*args)
            if r.returncode != 0:
                raise HarnessError(f"`ip {' '.join(args)}`: {r.stderr.strip()}")
        for n in ns:
            must("netns", "add", n)
            self.namespaces.append(n)
            must("-n", n, "link", "set", "lo", "up")
        must("-n", ns[0], "link", "add", a, "type", "veth", "peer", "name", b, "netns", ns[1])
        must("-n", ns[0], "addr", "add", f"{addrs[0]}/24", "dev", a)
        must("-n", ns[1], "addr", "add", f"{addrs[1]}/24", "dev", b)
        must("-n", ns[0], "link", "set", a, "up")
        must("-n", ns[1], "link", "set", b, "up")
        return ns, [a, b], addrs

    def kind_agent_sigkill(self):
        self.multinode(1, supervise=self.rng.random() < 0.5)

    def kind_coordinator_sigkill(self):
        self.multinode(0, supervise=False)

    def kind_netns_partition(self):
        if not self.c.root:
            raise HarnessError("network namespaces need root")
        self.multinode(1, supervise=self.rng.random() < 0.5, netns=True)

    # ---- Python ranks and the companion

    def python_job(self, fault_kind, cause, external=None, ok_without_report=False):
        restarts = self.rng.choice([0, 1, 1, 1])
        victim, step = self.rng.randrange(2), self.rng.randint(5, 45)
        self.param(nproc=2, restarts=restarts, rank=victim, step=step)
        ref = self.c.py_reference()
        ck = self.dir / "ck"
        ck.mkdir()
        cmd = self.c.wrap() + [str(self.c.ddplaunch), f"--log-dir={self.dir / 'logs' / 'job'}",
                               f"--rdzv-id=chaos-{self.seed}-job", "--nproc-per-node=2",
                               f"--max-restarts={restarts}", f"--heartbeat-interval={HB}",
                               f"--hang-timeout={PY_HANG}", "--shutdown-grace=2", str(TORCH_SCRIPT), str(ck),
                               "--steps", str(PY_STEPS), "--step-sleep", str(PY_SLEEP)]
        if fault_kind:
            cmd += ["--fault", f"{fault_kind}@{step}:{victim}"]
        had_ckpt = {}   # attempt -> whether ck/ckpt.pt existed when it was started

        def on_restart(t, m, _name):
            had_ckpt[int(m.group(1))] = (t, (ck / "ckpt.pt").exists())
        self.console.hook(RESTART_RE, on_restart)
        p = self.start("job", cmd)
        if external:
            pid = self.find_rank_pid(victim, program=str(TORCH_SCRIPT), timeout=60)
            if self.wait_step(step, [p], timeout=90) is None:
                raise HarnessError("the Python job ended before the fault step")
            os.kill(pid, external)
            self.t_fault = time.monotonic()
        [rc] = self.wait_all([p])
        self.check_no_survivors()
        if self.t_fault is None:
            hit = self.console.first(PY_FAULT_RE)
            if hit:
                self.t_fault = hit[0]
        fails = self.failure_jsons("job")
        reported = bool(fails)
        if ok_without_report and not reported:
            self.verdict(rc, [0], "the companion's fault went unnoticed: the job must simply finish")
        else:
            self.check_report(cause, victim, fails.get(0), "job")
            if restarts >= 1:
                if self.verdict(rc, [0], f"a restart was left after {cause[0]} of rank {victim}"):
                    self.set_resume_time("job", py=True)
            else:
                fail_rc = {"signal": 128 + (cause[1] if len(cause) > 1 else 0), "exit": cause[1] if len(cause) > 1
                           else 1, "silent": EXIT_HANG, "stuck": EXIT_HANG}[cause[0]]
                self.verdict(rc, [fail_rc], f"{cause} of rank {victim}, no restart left")
        if rc == 0:
            m = PY_FINAL_RE.search(self.console.text(name="job", stream="out"))
            if not m:
                self.problem("exit 0 but no final hash line")
            elif m.group(1) != ref:
                self.problem(f"final parameters differ from the uninterrupted run ({m.group(1)[:16]} vs {ref[:16]})")
        if 1 in had_ckpt:
            t_restart, existed = had_ckpt[1]
            resumed = [h for h in self.console.find(PY_RESUMED_RE, name="job", after=t_restart)
                       if h[1].group(1) == "0"]
            if existed and not resumed:
                self.problem("attempt 1 did not resume from the checkpoint that existed")
            elif not existed and resumed:
                self.problem(f"attempt 1 resumed ({resumed[0][1].group(0)}) although no checkpoint existed")
        if rc != 0 and not self.c.opts.no_recovery:
            p2 = self.start("recovery", self.c.wrap() + [
                str(self.c.ddplaunch), f"--log-dir={self.dir / 'logs' / 'recovery'}", f"--rdzv-id=chaos-{self.seed}-rec",
                "--nproc-per-node=2", str(TORCH_SCRIPT), str(ck), "--steps", str(PY_STEPS)])
            [rc2] = self.wait_all([p2])
            self.check_no_survivors()
            m = PY_FINAL_RE.search(self.console.text(name="recovery", stream="out"))
            if rc2 != 0 or not m or m.group(1) != ref:
                self.problem(f"recovery run: exit {rc2}, final {m.group(1)[:16] if m else None} vs {ref[:16]}")
            if (ck / "ckpt.pt").exists() and not self.console.find(PY_RESUMED_RE, name="recovery"):
                self.problem("recovery run did not resume from the checkpoint")

    def kind_py_sigkill(self):
        self.python_job(None, ("signal", signal.SIGKILL), external=signal.SIGKILL)

    def kind_py_sigstop(self):
        self.python_job(None, ("silent",), external=signal.SIGSTOP)

    def kind_py_raise(self):
        self.python_job("raise", ("exit", 1, "chaos: injected exception"))

    def kind_py_companion_stop(self):
        self.python_job("companion-stop", ("silent",), ok_without_report=True)

    def kind_py_companion_wedge(self):
        self.python_job("companion-wedge", ("silent",), ok_without_report=True)

    def kind_py_companion_close(self):
        self.python_job("companion-close", ("silent",), ok_without_report=True)


# =============================================================================== the table

def fmt_s(values):
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} / {max(values):.2f}"


def print_table(results, kinds, elapsed):
    rows = []
    for kind in kinds:
        rs = [r for r in results if r.kind == kind]
        if not rs:
            continue
        finished = sum(1 for r in rs if r.outcome == "finished")
        rows.append((kind, len(rs), sum(r.passed for r in rs), finished, len(rs) - finished,
                     fmt_s([r.fault_to_report for r in rs if r.fault_to_report is not None]),
                     fmt_s([r.fault_to_resume for r in rs if r.fault_to_resume is not None])))
    head = ("kind", "tried", "passed", "finished", "failed*", "fault->report s (median / worst)",
            "fault->resumed s (median / worst)")
    widths = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths))
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(row, widths))))
    print("-" * len(line))
    allr = [r.fault_to_report for r in results if r.fault_to_report is not None]
    alls = [r.fault_to_resume for r in results if r.fault_to_resume is not None]
    print("  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(
        ("all", len(results), sum(r.passed for r in results), sum(r.outcome == "finished" for r in results),
         sum(r.outcome != "finished" for r in results), fmt_s(allr), fmt_s(alls)), widths))))
    print(f"(failed*: the job ended with an exit code other than 0, then was started again without the fault; "
          f"{elapsed:.0f} s in all)")


# =============================================================================== main

def default_ddplaunch():
    return Path(os.environ.get("DDPLAUNCH_BIN") or REPO / "build" / "launcher" / "ddplaunch")


def default_ddptrain():
    return Path(os.environ.get("DDPTRAIN_BIN") or REPO / "build" / "worker" / "ddptrain" / "ddptrain")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=None, help="campaign seed (trial i uses seed+i); random by default")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--kinds", default="", help="comma-separated fault kinds to draw from (default: all)")
    ap.add_argument("--list-kinds", action="store_true")
    ap.add_argument("--ddplaunch", default=str(default_ddplaunch()))
    ap.add_argument("--ddptrain", default=str(default_ddptrain()))
    ap.add_argument("--train-seed", type=int, default=7, help="ddptrain --seed of every job (default 7)")
    ap.add_argument("--workdir", default=None, help="where the campaign's temporary folder goes")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (kept anyway when a trial fails)")
    ap.add_argument("--no-recovery", action="store_true",
                    help="do not start a failed job again to check that it resumes")
    ap.add_argument("--no-private-shm", action="store_true", help="do not mount a private /dev/shm")
    ap.add_argument("-v", "--verbose", action="store_true")
    opts = ap.parse_args(argv)
    if opts.list_kinds:
        print("\n".join(KINDS))
        return 0
    if opts.seed is None:
        opts.seed = secrets.randbelow(1 << 30)

    def on_term(signo, _frame):
        raise SystemExit(128 + signo)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    campaign = Campaign(opts)
    kinds = campaign.kinds()
    if not campaign.root or opts.no_private_shm:
        dropped = [k for k in kinds if k in ROOT_KINDS]
        if dropped:
            print(f"chaos: not root (or no private /dev/shm): skipping {', '.join(dropped)}")
            kinds = [k for k in kinds if k not in ROOT_KINDS] if not campaign.root else \
                [k for k in kinds if k != "shm-full"]
    if not kinds:
        print("chaos: no kind left to try")
        return 2
    print(f"chaos: campaign seed {opts.seed}, {opts.trials} trial(s), kinds: {', '.join(kinds)}", flush=True)
    print(f"chaos: ddplaunch {campaign.ddplaunch}, ddptrain {campaign.ddptrain}, work folder {campaign.work}",
          flush=True)
    results = []
    t0 = time.monotonic()
    try:
        campaign.setup()
        for i in range(opts.trials):
            seed = opts.seed + i
            kind = kinds[seed % len(kinds)]
            res = campaign.run_trial(seed, kind)
            results.append(res)
            params = " ".join(f"{k}={v}" for k, v in res.params.items())
            status = "ok  " if res.passed else "FAIL"
            times = ""
            if res.fault_to_report is not None:
                times += f" report {res.fault_to_report:.2f}s"
            if res.fault_to_resume is not None:
                times += f" resumed {res.fault_to_resume:.2f}s"
            print(f"[{i + 1}/{opts.trials}] {status} seed {seed} {kind}: {res.outcome}{times} ({res.elapsed:.1f}s) "
                  f"{params}", flush=True)
            for n in res.notes:
                print(f"    note: {n}", flush=True)
            for p in res.problems:
                print("    " + p.replace("\n", "\n      | "), flush=True)
    except KeyboardInterrupt:
        print("chaos: interrupted", flush=True)
    finally:
        failed = [r for r in results if not r.passed]
        if failed:
            opts.keep = True
        campaign.teardown()
    print()
    print_table(results, kinds, time.monotonic() - t0)
    if failed:
        print(f"\n{len(failed)} trial(s) broke an invariant:")
        for r in failed:
            first = r.problems[0].splitlines()[0]
            print(f"  seed {r.seed} ({r.kind}): {first}")
            print(f"    replay: {campaign.replay_command(r.seed)}")
            print(f"    logs:   {r.dir}")
        return 1
    print(f"\nevery invariant held in {len(results)} trial(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
