"""Shared helpers for the companion tests (Python 3 stdlib only).

Each test plays the launcher's local agent: it listens on a Unix
SOCK_SEQPACKET socket in a fresh temp dir, starts a rank process
(/usr/bin/python3, or $PYTHON_EXEC) with the environment the launcher gives
a rank, and reads the companion's messages with bounded timeouts. Every
process started is killed (its whole process group) and reaped at the end.
"""

import json
import os
import secrets
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path

sys.dont_write_bytecode = True   # no __pycache__ in the source tree

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BOOTSTRAP = REPO / "launcher" / "python"
SCRIPTS = HERE / "scripts"
PYTHON = os.environ.get("PYTHON_EXEC") or "/usr/bin/python3"
MAX_MESSAGE = 200 * 1024

if str(BOOTSTRAP) not in sys.path:   # for tests of the package's pure functions
    sys.path.insert(0, str(BOOTSTRAP))

_SCRUB = ("DDPLAUNCH_", "TORCHELASTIC_", "TORCH_NCCL_", "PET_")
_SCRUB_EXACT = {"PYTHONPATH", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                "MASTER_ADDR", "MASTER_PORT", "PYTHONSTARTUP"}


def script(name):
    return str(SCRIPTS / name)


def torch_available():
    r = subprocess.run([PYTHON, "-c", "import torch.distributed as d; assert d.is_available()"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    return r.returncode == 0


_torch = None


def skip_without_torch(test):
    global _torch
    if _torch is None:
        _torch = torch_available()
    return test if _torch else unittest.skip("torch is not importable by " + PYTHON)(test)


class Connection(object):
    """The agent's end of one companion connection."""

    def __init__(self, sock):
        self.sock = sock
        self.messages = []     # everything received, in order
        self.eof = False

    def recv(self, timeout):
        """The next message (a dict), or None on timeout or when the peer closed."""
        if self.eof:
            return None
        ready = select.select([self.sock], [], [], max(0.0, timeout))[0]
        if not ready:
            return None
        data = self.sock.recv(MAX_MESSAGE + 1)
        if not data:
            self.eof = True
            return None
        assert len(data) <= MAX_MESSAGE, "message over 200 KiB"
        msg = json.loads(data.decode("utf-8"))
        self.messages.append(msg)
        return msg

    def wait_for(self, predicate, timeout, what):
        """Reads until predicate(msg) holds; fails the test after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            msg = self.recv(left) if left > 0 else None
            if msg is not None and predicate(msg):
                return msg
            if msg is None and (self.eof or time.monotonic() >= deadline):
                tail = json.dumps(self.messages[-3:], indent=1)[-3000:]
                raise AssertionError("no %s within %.0fs (eof=%s); last messages:\n%s"
                                     % (what, timeout, self.eof, tail))

    def wait_eof(self, timeout):
        deadline = time.monotonic() + timeout
        while not self.eof and time.monotonic() < deadline:
            self.recv(deadline - time.monotonic())
        return self.eof

    def send(self, obj):
        self.sock.send(json.dumps(obj).encode("utf-8"))

    def stacks_when(self, main_is_there, timeout=30):
        """Asks for every thread's stack until main_is_there(the main thread's
        entry) holds or timeout s passed; returns the last answer. A loaded
        machine may keep the main thread a while from where a test waits for it."""
        deadline = time.monotonic() + timeout
        while True:
            self.send({"type": "dump_stacks"})
            msg = self.wait_for(lambda m: m["type"] == "stacks", 5, "stacks")
            main = [t for t in msg["threads"] if t["main"]]
            if (len(main) == 1 and main_is_there(main[0])) or time.monotonic() > deadline:
                return msg
            time.sleep(0.05)


class Rank(object):
    """A started rank process; its stdout lines are collected by a thread."""

    def __init__(self, proc):
        self.proc = proc
        self.lines = []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)   # EOF
            self.cond.notify_all()

    def wait_line(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in self.lines:
                    if line is not None and predicate(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or None in self.lines:
                    raise AssertionError("rank printed no %s within %.0fs; stdout:\n%s\nstderr:\n%s"
                                         % (what, timeout, "\n".join(l for l in self.lines if l),
                                            self.stderr_text()))
                self.cond.wait(left)

    def json_line(self, prefix, timeout=60):
        return json.loads(self.wait_line(lambda l: l.startswith(prefix), timeout, prefix)[len(prefix):])

    def write(self, text):
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def finish(self, timeout=30):
        """Closes stdin (our scripts exit then) and returns the exit code."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        return self.proc.wait(timeout)

    def stderr_text(self):
        path = getattr(self, "stderr_path", None)
        if path and os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read()
        return ""


class CompanionTestCase(unittest.TestCase):
    interval_ms = 100

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="ddpl-companion-"))
        self.addCleanup(shutil.rmtree, str(self.tmp), True)
        self.token = secrets.token_hex(16)
        self.job_id = "job-" + secrets.token_hex(4)
        self.rank_dir = self.tmp / "logs" / "rank0"
        self.rank_dir.mkdir(parents=True)
        self.socket_path = str(self.tmp / "agent.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(self.socket_path)
        self.listener.listen(16)
        self.addCleanup(self.listener.close)
        self.connections = []
        self.started = 0

    # -- the rank's environment ---------------------------------------------------
    def base_env(self):
        env = {k: v for k, v in os.environ.items()
               if k not in _SCRUB_EXACT and not k.startswith(_SCRUB)}
        env.update(PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        return env

    def rank_env(self, companion=True, user_pythonpath=None, **extra):
        env = self.base_env()
        env["PYTHONPATH"] = str(BOOTSTRAP) + (":" + user_pythonpath if user_pythonpath else "")
        if companion:
            env.update({
                "DDPLAUNCH_COMPANION_PATH": str(BOOTSTRAP),
                "DDPLAUNCH_COMPANION_SOCKET": self.socket_path,
                "DDPLAUNCH_JOB_ID": self.job_id, "DDPLAUNCH_TOKEN": self.token,
                "DDPLAUNCH_ATTEMPT": "3", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                "DDPLAUNCH_HEARTBEAT_INTERVAL_MS": str(self.interval_ms),
                "DDPLAUNCH_RANK_LOG_DIR": str(self.rank_dir),
                "TORCHELASTIC_ERROR_FILE": str(self.rank_dir / "error.json"),
            })
        env.update(extra)
        return env

    def start(self, name, *args, env=None):
        self.started += 1
        stderr_path = str(self.tmp / ("stderr-%d.txt" % self.started))
        with open(stderr_path, "w") as err:
            proc = subprocess.Popen([PYTHON, script(name)] + [str(a) for a in args],
                                    env=env if env is not None else self.rank_env(),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                    text=True, start_new_session=True, cwd=str(self.tmp))
        self.addCleanup(self._reap, proc)
        rank = Rank(proc)
        rank.stderr_path = stderr_path
        return rank

    @staticmethod
    def _reap(proc):
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # the rank and anything it started
        except OSError:
            pass
        proc.wait(30)
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except (OSError, ValueError):
                pass

    # -- the agent's side ------------------------------------------------------------
    def accept(self, timeout=30):
        """The next connection, or None when none came within timeout."""
        if not select.select([self.listener], [], [], timeout)[0]:
            return None
        sock, _ = self.listener.accept()
        self.addCleanup(sock.close)
        conn = Connection(sock)
        self.connections.append(conn)
        return conn

    @staticmethod
    def read_announcements(path):
        """The collectives announced in the file named by a hello, as the
        agent reads them (collective_announcements.h): [(n, sequence, op, bytes, dtype, group,
        whether its call returned)]."""
        with open(path, "rb") as f:
            data = f.read()
        magic, version, count = struct.unpack_from("<4sIQ", data, 0)
        assert (magic, version) == (b"DDPA", 3), (magic, version)
        out = []
        for n in range(max(1, count - 15), count + 1):
            number, seq, nbytes, _, op, dtype, group = struct.unpack_from("<QQqQ24s16s48s", data,
                                                                          16 + ((n - 1) % 16) * 120)
            returned = bool(number >> 63)
            if number & ~(1 << 63) == n:
                out.append((n, seq) + tuple(x.rstrip(b"\0").decode() if isinstance(x, bytes) else x
                                            for x in (op, nbytes, dtype, group)) + (returned,))
        return out

    def accept_rank(self, rank, timeout=60):
        conn = self.accept(timeout)
        self.assertIsNotNone(conn, "the rank never connected; stderr:\n" + rank.stderr_text())
        hello = conn.recv(30)
        self.assertIsNotNone(hello, "no hello")
        self.assertEqual(hello.get("type"), "hello", hello)
        self.assertEqual(hello.get("token"), self.token, "wrong token in hello")
        self.assertEqual(hello.get("job_id"), self.job_id)
        return conn, hello
