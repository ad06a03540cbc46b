"""What the benchmarks share: running one launcher job with a timeout and
leaving nothing behind. Every process a run starts carries a token in its
environment (TOKEN_VAR=<random>), so the run's workers and anything they
started are found through /proc and killed, whatever process group they are in.
"""
import os
import secrets
import signal
import socket
import subprocess
import time

TOKEN_VAR = "DDP_BENCH_TOKEN"
# What a launcher sets for its workers: removed from a benchmark's own
# environment, so that a run inside a launcher does not leak its layout.
LAUNCHER_VARS = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}


def free_port():
    """A TCP port free on the loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BenchError(Exception):
    """A run itself failed (as opposed to a target being missed)."""


def marked_pids(token):
    """Live processes whose environment carries token, found through /proc."""
    tok = f"{TOKEN_VAR}={token}".encode()
    me = os.getpid()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if tok not in f.read():
                    continue
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            pids.append(int(name))
    return pids


def kill_marked(token, rounds=20):
    """SIGKILLs every process carrying token until none is left (bounded)."""
    for _ in range(rounds):
        pids = marked_pids(token)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


class Run:
    """One launcher job in its own session, with a timeout; on exit from the
    `with` block the launcher's group and every process carrying the run's
    token are SIGKILLed and the launcher is reaped."""

    def __init__(self, cmd, env, tmp, name):
        self.cmd = cmd
        self.token = secrets.token_hex(8)
        self.env = dict(env, **{TOKEN_VAR: self.token})
        self.out_path = os.path.join(tmp, f"{name}.stdout")
        self.err_path = os.path.join(tmp, f"{name}.stderr")
        self.proc = None

    def __enter__(self):
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=err, env=self.env, start_new_session=True)
        return self

    def __exit__(self, *exc):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        kill_marked(self.token)

    def wait(self, timeout):
        """Exit code; BenchError when it is still running after timeout s."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{' '.join(self.cmd)}: still running after {timeout} s, killed"
                             + self.tail()) from None

    def stdout(self):
        with open(self.out_path, errors="replace") as f:
            return f.read()

    def tail(self, lines=15):
        parts = []
        for label, path in (("stdout", self.out_path), ("stderr", self.err_path)):
            with open(path, errors="replace") as f:
                t = f.read().splitlines()[-lines:]
            if t:
                parts.append(f"\n  {label} (tail):\n    " + "\n    ".join(t))
        return "".join(parts)
