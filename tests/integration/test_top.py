"""`ddplaunch top`: a running job's ranks, refreshed in place.

A real 3-rank ddptrain job runs; `ddplaunch top` watches it:
  * piped (stdout not a terminal): `-n 3 --interval 0.2` prints 3 plain-text
    frames separated by a blank line, no escape codes, each with one row per
    rank, and the steps move on; `--once` prints one frame;
  * under a pseudo-terminal: frames are drawn in place (cursor hidden, home,
    lines cleared to their end), cut to the terminal's height with a
    "... N more rank(s)" line, and Ctrl-C (SIGINT) or the key q ends `top`
    with exit 0, the cursor shown again and the terminal's modes restored,
    while the job keeps running;
  * when the job ends, `top` says how on stderr and exits 0.
Without a job, or with an unknown job id, `top` exits 1 with one line.

Every wait polls a condition with a deadline; every process is reaped.
"""

import json
import os
import re
import select
import signal
import struct
import subprocess
import time
import unittest

import fcntl
import termios

from launcher_harness import BIN, DDPTRAIN, DdptrainJobCase, LauncherTestCase, wait_until

NPROC = 3
DEADLINE = 90.0
ROW_RE = re.compile(r"^\s*(\d+)\s+\S+\s+(\d+)\s+(running|in collective|late|silent|exited|no heartbeats)\s+(\d+|-)\s")
ESC = "\x1b"


def rows_of(frame):
    """{rank: step (None for '-')} of a frame's rank rows."""
    rows = {}
    for line in frame.splitlines():
        m = ROW_RE.match(line)
        if m:
            rows[int(m.group(1))] = int(m.group(4)) if m.group(4) != "-" else None
    return rows


class TopTest(DdptrainJobCase):

    def top(self, *args, env=None, timeout=60):
        return subprocess.run([str(BIN), "top", *map(str, args)], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, env=env or self.env(), timeout=timeout, cwd=str(self.tmp))

    def steps(self):
        """{rank: step} of the monitored ranks past their first step (before it, -1: the
        table's "-"), from `status --json` ({} while it cannot answer)."""
        r = subprocess.run([str(BIN), "status", "--job", self.job_id, "--json"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, env=self.env(), timeout=15, cwd=str(self.tmp))
        try:
            doc = json.loads(r.stdout) if r.returncode == 0 else {}
        except ValueError:
            return {}
        ranks = (doc.get("ranks") or {}).get("ranks") or []
        return {x["rank"]: x["step"] for x in ranks
                if x.get("monitored") and isinstance(x.get("step"), int) and x["step"] >= 0}

    def start_job(self):
        """A 3-rank ddptrain job that runs until stopped, once every rank has reported a step."""
        launch = self.start([f"--nproc-per-node={NPROC}", "--heartbeat-interval=0.1", DDPTRAIN, "--steps", 1000000,
                             "--log-every", 0, "--inject-fault", "slow=0.02@0:*"])
        wait_until(lambda: len(self.steps()) == NPROC or launch.proc.poll() is not None, DEADLINE, 0.2)
        if len(self.steps()) != NPROC:
            self.fail("not every rank reported a step" + self.finish(launch, 1).describe())
        return launch

    def stop_job(self, launch):
        os.killpg(launch.proc.pid, signal.SIGTERM)
        return self.finish(launch, timeout=60)

    def test_piped_frames_have_a_row_per_rank_and_the_steps_move_on(self):
        launch = self.start_job()
        r = self.top("--job", self.job_id, "-n", 3, "--interval", 0.2)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn(ESC, r.stdout, "escape codes on a pipe")
        self.assertEqual(r.stderr, "")
        frames = r.stdout.rstrip("\n").split("\n\n")
        self.assertEqual(len(frames), 3, r.stdout)
        steps = []
        for frame in frames:
            self.assertTrue(frame.startswith(f"job {self.job_id}: generation 0 (running)"), frame)
            self.assertIn(f"{NPROC} rank(s) on 1 node(s), {NPROC} monitored", frame.splitlines()[0])
            rows = rows_of(frame)
            self.assertEqual(sorted(rows), list(range(NPROC)), frame)
            self.assertEqual(len(frame.splitlines()), 2 + NPROC, frame)  # the header, the columns, a row per rank
            steps.append(rows)
        for r_ in range(NPROC):
            seen = [s[r_] for s in steps]
            self.assertNotIn(None, seen, f"rank {r_} has no step in a frame: {steps}\n{r.stdout}")
            self.assertEqual(seen, sorted(seen), f"rank {r_}'s step went back: {steps}")
            self.assertGreater(seen[-1], seen[0], f"rank {r_}'s step did not move in 3 frames: {steps}")

        # JOB as a positional argument, and --once: one frame.
        once = self.top(self.job_id, "--once")
        self.assertEqual(once.returncode, 0, once.stderr)
        self.assertNotIn("\n\n", once.stdout)
        self.assertEqual(sorted(rows_of(once.stdout)), list(range(NPROC)), once.stdout)

        # A reader that goes (`ddplaunch top | head -1`) ends top, at its next frame.
        head = subprocess.Popen([str(BIN), "top", "--job", self.job_id, "--interval", "0.2"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=self.env(), cwd=str(self.tmp), start_new_session=True)
        self.addCleanup(self.reap, head)
        self.assertTrue(head.stdout.readline().startswith(b"job "))
        head.stdout.close()
        self.assertEqual(head.wait(timeout=30), 0)
        self.stop_job(launch)

    def run_on_pty(self, args, rows, columns):
        """Starts `top ARGS` with a pseudo-terminal of rows x columns as its
        stdin, stdout and stderr; returns (process, master fd, the terminal's path)."""
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        try:
            proc = subprocess.Popen([str(BIN), "top", *map(str, args)], stdin=slave, stdout=slave, stderr=slave,
                                    env=self.env(), cwd=str(self.tmp), start_new_session=True)
        finally:
            path = os.ttyname(slave)
            os.close(slave)
        self.addCleanup(os.close, master)
        self.addCleanup(self.reap, proc)
        return proc, master, path

    @staticmethod
    def reap(proc):
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)

    @staticmethod
    def read_until(master, predicate, timeout):
        """What the terminal shows, read until predicate(text) or timeout (or the pty closes)."""
        text = b""
        deadline = time.monotonic() + timeout
        while not predicate(text.decode("utf-8", "replace")) and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not chunk:
                break
            text += chunk
        return text.decode("utf-8", "replace")

    def test_on_a_terminal_it_redraws_in_place_and_ctrl_c_or_q_leave_the_job_running(self):
        launch = self.start_job()

        # A terminal of 5 rows: 4 lines drawn, so 1 rank and "... 2 more rank(s)".
        small, master, _ = self.run_on_pty(["--job", self.job_id, "-n", 1], 5, 200)
        shown = self.read_until(master, lambda t: "\x1b[?25h" in t, 30)
        self.assertEqual(small.wait(timeout=30), 0, shown)
        self.assertTrue(shown.startswith("\x1b[?25l"), f"the cursor is hidden first: {shown!r}")
        self.assertIn("\x1b[H", shown)
        frame = shown[shown.rindex("\x1b[H"):]
        lines = [l for l in frame.split("\r\n") if l.replace("\x1b[J", "").replace("\x1b[?25h", "")]
        self.assertEqual(len(lines), 4, repr(frame))
        self.assertTrue(all(l.endswith("\x1b[K") for l in lines), repr(frame))
        self.assertEqual(len(rows_of(frame.replace("\x1b[K", "").replace("\r", ""))), 1, repr(frame))
        self.assertIn("... 2 more rank(s)", frame)

        # A full-size terminal, until Ctrl-C.
        top, master, _ = self.run_on_pty(["--job", self.job_id, "--interval", 0.2], 24, 200)
        seen = self.read_until(master, lambda t: t.count("\x1b[H") >= 3 and t.rstrip().endswith("\x1b[J"), 30)
        self.assertGreaterEqual(seen.count("\x1b[H"), 3, f"no frames redrawn in place: {seen!r}")
        last = seen[seen.rindex("\x1b[H"):].replace("\x1b[K", "").replace("\r", "")
        self.assertEqual(sorted(rows_of(last)), list(range(NPROC)), repr(last))
        top.send_signal(signal.SIGINT)
        rc = top.wait(timeout=15)
        seen += self.read_until(master, lambda t: "\x1b[?25h" in t, 5)
        self.assertEqual(rc, 0, seen[-2000:])
        self.assertTrue(seen.endswith("\x1b[?25h"), f"the cursor is not shown again at the end: {seen[-200:]!r}")

        # q quits too, not echoed, and the terminal's settings come back as they were.
        top, master, path = self.run_on_pty(["--job", self.job_id, "--interval", 0.2], 24, 200)
        tty = os.open(path, os.O_RDWR | os.O_NOCTTY)
        self.addCleanup(os.close, tty)
        before_top = termios.tcgetattr(tty)
        seen = self.read_until(master, lambda t: t.count("\x1b[H") >= 2, 30)
        self.assertGreaterEqual(seen.count("\x1b[H"), 2, f"no frames: {seen!r}")
        while_drawing = termios.tcgetattr(tty)
        self.assertEqual(while_drawing[3] & (termios.ECHO | termios.ICANON), 0, "keys are read one by one, unechoed")
        os.write(master, b"q")
        rc = top.wait(timeout=15)
        seen += self.read_until(master, lambda t: "\x1b[?25h" in t, 5)
        self.assertEqual(rc, 0, seen[-2000:])
        self.assertTrue(seen.endswith("\x1b[?25h"), f"the cursor is not shown again after q: {seen[-200:]!r}")
        self.assertNotIn("q", seen[seen.rindex("\x1b[J"):], "the key was echoed")
        self.assertEqual(termios.tcgetattr(tty)[3], before_top[3], "the terminal's modes were not restored")

        # The job keeps running: its steps still move on.
        before = self.steps()
        self.assertTrue(wait_until(lambda: all(self.steps().get(r, -1) > before.get(r, 0) for r in range(NPROC)),
                                   DEADLINE, 0.2), f"the job stopped after top's Ctrl-C: {before}")
        self.assertIsNone(launch.proc.poll())
        self.stop_job(launch)

    def test_when_the_job_ends_top_says_so_and_exits_0(self):
        launch = self.start_job()
        out_path = self.tmp / "top.out"
        with open(out_path, "wb") as out:
            top = subprocess.Popen([str(BIN), "top", "--job", self.job_id, "--interval", "0.2"],
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.PIPE, env=self.env(),
                                   cwd=str(self.tmp), start_new_session=True)
        self.addCleanup(self.reap, top)
        self.assertTrue(wait_until(lambda: out_path.read_text().count(f"job {self.job_id}:") >= 2, 30),
                        out_path.read_text())
        res = self.stop_job(launch)
        rc = top.wait(timeout=60)
        err = top.stderr.read().decode()
        top.stderr.close()
        self.assertEqual(rc, 0, err)
        self.assertIn(f"ddplaunch: job {self.job_id} ended with exit code {res.rc}", err)
        self.assertEqual(len(err.splitlines()), 1, err)


class TopWithoutAJobTest(LauncherTestCase):

    def top(self, *args, env=None):
        return subprocess.run([str(BIN), "top", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              env=env or self.env(), timeout=30, cwd=str(self.tmp))

    def assert_one_line(self, r, rc, *words):
        self.assertEqual(r.returncode, rc, r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertTrue(r.stderr.startswith("ddplaunch top: error: "), r.stderr)
        for w in words:
            self.assertIn(w, r.stderr)

    def test_no_running_job_is_one_line_and_exit_1(self):
        run = self.tmp / "run"
        run.mkdir()
        r = self.top(env=self.env({"XDG_RUNTIME_DIR": str(run)}))
        self.assert_one_line(r, 1, "no running ddplaunch job")

    def test_an_unknown_job_is_one_line_and_exit_1(self):
        r = self.top("--job", "no-such-job-" + self.token)
        self.assert_one_line(r, 1, "no-such-job-" + self.token)
        r = self.top("no-such-job-" + self.token, "-n", "1")
        self.assert_one_line(r, 1, "no-such-job-" + self.token)


if __name__ == "__main__":
    unittest.main()
