"""Shared helpers for the ddplaunch integration tests (Python 3 stdlib only).

Every test gets:
  * a fresh temporary directory (``self.tmp``) with a ``logs`` dir passed as --log-dir,
  * a unique random token (``self.token``) that is placed in the environment of
    ddplaunch (and therefore of every worker and worker child) as DDPT_TOKEN, so
    leftover processes can be found by scanning /proc/*/environ and /proc/*/cmdline,
  * a unique job id (``self.job_id``) passed as --rdzv-id, so log paths are known.

Each ddplaunch is started in a new session; cleanup always SIGKILLs that process
group and every process still carrying the token, and then fails the test if
anything carrying the token had survived after ddplaunch exited.
"""

import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKERS = HERE / "workers"
BIN = Path(os.environ.get("DDPLAUNCH_BIN") or (REPO / "build" / "launcher" / "ddplaunch"))
PYTHON = os.environ.get("PYTHON_EXEC") or "/usr/bin/python3"

PREFIX_RE = re.compile(r"^\[0:(\d+)\] (.*)$")

# Environment variables a launcher sets for its workers; removed from the base
# environment so an outer launcher (or a developer shell) cannot leak into tests.
_SCRUB_EXACT = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "OPENBLAS_CORETYPE",
}
_SCRUB_PREFIXES = ("PET_", "TORCHELASTIC_", "DDPLAUNCH_")


def worker(name):
    """Absolute path (str) of a worker script."""
    return str(WORKERS / name)


def base_env():
    env = {k: v for k, v in os.environ.items()
           if k not in _SCRUB_EXACT and not k.startswith(_SCRUB_PREFIXES)}
    env["PYTHON_EXEC"] = PYTHON
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def http_get(url, headers=None, timeout=5.0, context=None):
    """(status, body text); status 0 when nothing answered."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return 0, ""


def free_port():
    """A TCP port free on the loopback now, below the kernel's ephemeral range
    where there is room (as ddplaunch picks MASTER_PORT): no outgoing
    connection of a test running beside this one can take it there before the
    test binds it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            start = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        start = 0
    for _ in range(32 if start > 10032 else 0):
        port = random.randrange(10000, start)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_available():
    try:
        r = subprocess.run([PYTHON, "-c", "import torch.distributed as d; "
                            "from torch.distributed.elastic.multiprocessing.errors import record; "
                            "assert d.is_available()"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# --------------------------------------------------------------------------- /proc

def read_stat(pid):
    """(state, ppid, pgrp, session) of pid from /proc/PID/stat; raises OSError if gone."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read().decode("ascii", "replace")
    rest = data[data.rindex(")") + 2:].split()
    return rest[0], int(rest[1]), int(rest[2]), int(rest[3])


def _read_proc_file(pid, name):
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return b""


def is_alive(pid, token=None):
    """True if pid exists and is not a zombie. With token: the process must also
    carry the token (guards against pid reuse)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        state = read_stat(pid)[0]
    except (OSError, ValueError):
        return False
    if state in ("Z", "X", "x"):
        return False
    if token is not None:
        tok = token.encode()
        if tok not in _read_proc_file(pid, "environ") and tok not in _read_proc_file(pid, "cmdline"):
            return False
    return True


def descendants(pid):
    """Every live descendant of pid, parents before their children."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                children.setdefault(read_stat(int(name))[1], []).append(int(name))
            except (OSError, ValueError):
                pass
    found, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def signal_step(pids, sig):
    """Sends sig to every process of the trees rooted at pids, the workers before
    the launchers: what Slurm's scancel --signal, --signal=SIG@T, a preemption or
    a time limit do to every process of a job step."""
    trees = [(root, descendants(root)) for root in pids]
    for _root, below in trees:
        for p in reversed(below):
            try:
                os.kill(p, sig)
            except OSError:
                pass
    for root, _below in trees:
        os.kill(root, sig)


def find_marked(token):
    """Live (non-zombie) processes whose cmdline or environ contains token:
    list of (pid, cmdline-string)."""
    tok = token.encode()
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me:
            continue
        cmdline = _read_proc_file(pid, "cmdline")
        if tok in cmdline or tok in _read_proc_file(pid, "environ"):
            try:
                state = read_stat(pid)[0]
            except (OSError, ValueError):
                continue
            if state in ("Z", "X", "x"):
                continue
            found.append((pid, cmdline.replace(b"\0", b" ").decode("utf-8", "replace").strip()))
    return found


def kill_marked(token):
    for _ in range(20):
        procs = find_marked(token)
        if not procs:
            return
        for pid, _cmd in procs:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def wait_until(predicate, timeout, interval=0.05):
    """Poll predicate until true or timeout; returns the last predicate value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def wait_for_file(path, timeout=10.0, nonempty=True):
    """Bounded wait for a file to exist (and be non-empty); returns bool."""
    p = Path(path)

    def ok():
        try:
            return p.is_file() and (not nonempty or p.stat().st_size > 0)
        except OSError:
            return False
    return bool(wait_until(ok, timeout))


# --------------------------------------------------------------------------- results

class Result:
    def __init__(self, cmd, rc, out, err, elapsed):
        self.cmd, self.rc, self.out, self.err, self.elapsed = cmd, rc, out, err, elapsed

    def describe(self):
        def tail(s, n=40):
            lines = s.splitlines()
            return "\n".join(lines[-n:])
        return (f"\ncommand: {' '.join(map(str, self.cmd))}\nexit code: {self.rc}  "
                f"elapsed: {self.elapsed:.2f}s\n--- stdout (tail) ---\n{tail(self.out)}\n"
                f"--- stderr (tail) ---\n{tail(self.err)}\n---")

    @staticmethod
    def _by_rank(text):
        d = {}
        for line in text.splitlines():
            m = PREFIX_RE.match(line)
            if m:
                d.setdefault(int(m.group(1)), []).append(m.group(2))
        return d

    def out_by_rank(self):
        """{rank: [lines without prefix]} of prefixed worker lines on stdout."""
        return self._by_rank(self.out)

    def err_by_rank(self):
        return self._by_rank(self.err)


class Launch:
    """A running ddplaunch (started by LauncherTestCase.start)."""

    def __init__(self, cmd, proc, out_path, err_path, t0):
        self.cmd, self.proc, self.out_path, self.err_path, self.t0 = cmd, proc, out_path, err_path, t0

    @property
    def pid(self):
        return self.proc.pid


# --------------------------------------------------------------------------- test case

class LauncherTestCase(unittest.TestCase):
    """Base class: per-test tmp dir, token, job id, bounded runs, leftover checks."""

    # seconds allowed for the sentinel & co to disappear after ddplaunch exited
    LEFTOVER_GRACE = 5.0

    @classmethod
    def setUpClass(cls):
        if not BIN.is_file() or not os.access(BIN, os.X_OK):
            raise unittest.SkipTest(f"ddplaunch binary not found at {BIN} (set DDPLAUNCH_BIN)")

    def setUp(self):
        self.token = "ddpt" + secrets.token_hex(8)
        self.job_id = "job-" + self.token
        self.tmp = Path(tempfile.mkdtemp(prefix="ddpt-"))
        self.log_dir = self.tmp / "logs"
        self.outdir = self.tmp / "out"
        self.outdir.mkdir()
        # The test's own job registry and agent sockets: its jobs stay out
        # of the `ddplaunch list` of the user who runs the tests.
        self.runtime_dir_default = self.tmp / "agent-run"
        self.runtime_dir_default.mkdir(mode=0o700)
        self._launches = []
        # cleanups run LIFO: leftover check/kill first, then rmtree
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.addCleanup(self._reap_everything)

    # ---- environment / command line

    def env(self, extra=None, drop=()):
        env = base_env()
        env["DDPT_TOKEN"] = self.token
        env["TMPDIR"] = str(self.tmp)  # keeps any default-log-dir output inside tmp
        env["XDG_RUNTIME_DIR"] = str(self.runtime_dir_default)
        for k in drop:
            env.pop(k, None)
        if extra:
            env.update(extra)
        return env

    def command(self, args, log_dir=True, job_id=True):
        cmd = [str(BIN)]
        if log_dir:
            cmd.append(f"--log-dir={self.log_dir}")
        if job_id:
            cmd.append(f"--rdzv-id={self.job_id}")
        return cmd + [str(a) for a in args]

    # ---- running

    def start(self, args, *, env=None, env_extra=None, log_dir=True, job_id=True,
              raw_cmd=None, cwd=None):
        cmd = raw_cmd if raw_cmd is not None else self.command(args, log_dir, job_id)
        n = len(self._launches)
        out_path = self.tmp / f"launcher{n}.stdout"
        err_path = self.tmp / f"launcher{n}.stderr"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    env=env if env is not None else self.env(env_extra),
                                    cwd=cwd or str(self.tmp), start_new_session=True)
        launch = Launch(cmd, proc, out_path, err_path, time.monotonic())
        self._launches.append(launch)
        return launch

    def finish(self, launch, timeout=20.0):
        """Wait (bounded) for a started ddplaunch; kill everything on timeout and fail."""
        try:
            rc = launch.proc.wait(timeout=max(0.1, timeout - (time.monotonic() - launch.t0)))
        except subprocess.TimeoutExpired:
            self._kill_launch(launch)
            kill_marked(self.token)
            res = self._result(launch, None)
            self.fail(f"ddplaunch did not exit within {timeout}s{res.describe()}")
        return self._result(launch, rc)

    def run_launcher(self, args, *, timeout=20.0, **kw):
        return self.finish(self.start(args, **kw), timeout)

    def _result(self, launch, rc):
        elapsed = time.monotonic() - launch.t0
        out = launch.out_path.read_bytes().decode("utf-8", "replace")
        err = launch.err_path.read_bytes().decode("utf-8", "replace")
        return Result(launch.cmd, rc, out, err, elapsed)

    @staticmethod
    def _kill_launch(launch):
        try:
            os.killpg(launch.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            launch.proc.kill()
        except OSError:
            pass
        try:
            launch.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def _reap_everything(self):
        still_running = [l for l in self._launches if l.proc.poll() is None]
        for launch in self._launches:
            self._kill_launch(launch)
        leftovers = []
        if self._launches and not still_running:
            if not wait_until(lambda: not find_marked(self.token), self.LEFTOVER_GRACE):
                leftovers = find_marked(self.token)
        kill_marked(self.token)
        if leftovers:
            raise AssertionError(
                "processes carrying the test token survived ddplaunch's exit: "
                + "; ".join(f"pid {p}: {c}" for p, c in leftovers))

    # ---- assertions / paths

    def assert_no_leftovers(self, timeout=None):
        timeout = self.LEFTOVER_GRACE if timeout is None else timeout
        ok = wait_until(lambda: not find_marked(self.token), timeout)
        if not ok:
            procs = find_marked(self.token)
            kill_marked(self.token)
            self.fail("leftover processes: " + "; ".join(f"pid {p}: {c}" for p, c in procs))

    def assert_dead(self, pids, timeout=5.0, what="process"):
        pids = list(pids)
        wait_until(lambda: not any(is_alive(p, self.token) for p in pids), timeout)
        alive = [p for p in pids if is_alive(p, self.token)]
        self.assertEqual(alive, [], f"{what}(es) still alive after {timeout}s: {alive}")

    def assert_usage_error(self, res, *mentions):
        """Exit 2, exactly one stderr line starting 'ddplaunch: error:' that mentions
        (case-insensitively) at least one of `mentions`; nothing spawned."""
        self.assertEqual(res.rc, 2, res.describe())
        lines = [l for l in res.err.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, f"expected a one-line error{res.describe()}")
        self.assertTrue(lines[0].startswith("ddplaunch: error:"), res.describe())
        if mentions:
            low = lines[0].lower()
            self.assertTrue(any(m.lower() in low for m in mentions),
                            f"error line should mention one of {mentions}: {lines[0]!r}")
        self.assertNotIn("[0:", res.out + res.err)
        self.assert_nothing_spawned()

    def assert_nothing_spawned(self):
        self.assertEqual(sorted(os.listdir(self.outdir)), [],
                         "a worker ran although the command line was rejected")
        rank_entries = []
        if self.log_dir.exists():
            for root, dirs, files in os.walk(self.log_dir):
                rank_entries += [os.path.join(root, d) for d in dirs if d.startswith("rank_")]
                rank_entries += [os.path.join(root, f) for f in files]
        self.assertEqual(rank_entries, [], "log files were created for a rejected command line")
        self.assert_no_leftovers(timeout=1.0)

    def job_dir(self, job_id=None, log_dir=None):
        return Path(log_dir or self.log_dir) / (job_id or self.job_id)

    def attempt_dir(self, k=0, **kw):
        return self.job_dir(**kw) / f"attempt_{k}"

    def rank_dir(self, rank, attempt=0, **kw):
        return self.attempt_dir(attempt, **kw) / f"rank_{rank}"

    def failure_json(self, attempt=0, **kw):
        path = self.attempt_dir(attempt, **kw) / "failure.json"
        self.assertTrue(path.is_file(), f"missing {path}")
        with open(path) as f:
            return json.load(f)

    def read_env_dumps(self, n=None):
        """{rank: dump} written by workers/env_dump.py into self.outdir."""
        dumps = {}
        for p in sorted(self.outdir.glob("rank_*.json")):
            with open(p) as f:
                d = json.load(f)
            dumps[int(d["env"]["RANK"])] = d
        if n is not None:
            self.assertEqual(sorted(dumps), list(range(n)), "env dumps of ranks")
        return dumps

    def wait_for_files(self, names, timeout=10.0):
        for name in names:
            path = self.outdir / name
            self.assertTrue(wait_for_file(path, timeout), f"{path} did not appear within {timeout}s")

    def read_int(self, name):
        return int((self.outdir / name).read_text().strip())


DDPTRAIN = Path(os.environ.get("DDPTRAIN_BIN") or (REPO / "build" / "worker" / "ddptrain" / "ddptrain")).absolute()


class DdptrainJobCase(LauncherTestCase):
    """Tests whose jobs run ddptrain: skipped where it was not built (it needs
    LibTorch), and one OpenMP thread per rank, so that several ranks share a
    small machine without oversubscribing it."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not DDPTRAIN.is_file() or not os.access(DDPTRAIN, os.X_OK):
            raise unittest.SkipTest(f"ddptrain not found at {DDPTRAIN} (set DDPTRAIN_BIN; needs LibTorch)")

    def env(self, extra=None, drop=()):
        e = super().env(extra, drop)
        e["OMP_NUM_THREADS"] = "1"
        return e
