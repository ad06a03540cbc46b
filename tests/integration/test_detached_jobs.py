"""Detached jobs: `ddplaunch -d` and the subcommands that manage such a job
afterwards: `attach`, `logs`, `stop` and `list`.

`ddplaunch -d ARGS` prints the job id alone on stdout and returns once the job is
registered; the job's agent then runs on in a session of its own, without a
terminal, writing its whole console to LOGDIR/<job id>/console.log. The job
registry is per user, in $XDG_RUNTIME_DIR/ddplaunch/jobs: every ddplaunch these
tests run (launch and subcommands alike) gets a fresh private XDG_RUNTIME_DIR, so a
test only ever sees its own jobs.

A detached agent is not the process a test started, so the harness's process-group
kill does not reach it: each test finds the agent's pid in `ddplaunch list --json`
and the cleanup SIGKILLs every agent still alive (a test that passes has ended all
its jobs itself) before the harness looks for processes carrying the test token.
The workers are driven by files (workers/gate.py), never by fixed sleeps.

DetachedTrainingTest needs DDPTRAIN_BIN (it is skipped without it): CMake runs that
class with the other ddptrain tests, as integration.test_detached_jobs_ddptrain.
"""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

from launcher_harness import (BIN, LauncherTestCase, Result, find_marked, is_alive, kill_marked, read_stat,
                              wait_for_file, wait_until, worker)
from test_ddptrain import DDPTRAIN, RESUMED_RE, TORCH_OK, DdptrainCase, checkpoint_steps, proc_environ

GATE = worker("gate.py")
# The states of a job that has ended (list's "state").
ENDED = {"succeeded", "failed", "stopped", "lost"}
END_LINE = "ddplaunch: job {} ended with exit code {}"
NOBODY = 65534


def tty_nr(pid):
    """The controlling terminal of pid (0: none), field 7 of /proc/PID/stat."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read().decode("ascii", "replace")
    return int(data[data.rindex(")") + 2:].split()[4])


def open_files(pid):
    """What pid's file descriptors point to: {fd: target}."""
    fds = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass
    return fds


def children(pid):
    """Live children of pid."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                state, ppid, _pgrp, _sid = read_stat(int(name))
            except (OSError, ValueError):
                continue
            if ppid == pid and state not in ("Z", "X"):
                found.append(int(name))
    return found


def nonempty_lines(text):
    return [l for l in text.splitlines() if l.strip()]


def worker_lines(text):
    """The lines the test's workers wrote (they all start "rank "), whatever
    headers `logs` puts around a rank's files."""
    return [l for l in text.splitlines() if l.startswith("rank ")]


def as_user_nobody():
    """The command prefix that runs a command as nobody, or None when neither tool exists."""
    if shutil.which("setpriv"):
        return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    if shutil.which("runuser"):
        return ["runuser", "-u", "nobody", "--"]
    return None


class DetachedJobCase(LauncherTestCase):
    """The harness plus a private job registry and helpers for detached jobs."""

    def setUp(self):
        super().setUp()
        self.runtime_dir = self.tmp / "xdg"
        self.runtime_dir.mkdir(mode=0o700)
        os.chmod(self.runtime_dir, 0o700)
        self._agents = []      # pids of the detached agents this test started
        self._own_dirs = []    # directories outside self.tmp to remove after the agents died
        # Runs before the harness's leftover check (cleanups run last in, first out).
        self.addCleanup(self._kill_agents)

    def env(self, extra=None, drop=()):
        merged = {"XDG_RUNTIME_DIR": str(self.runtime_dir)}
        merged.update(extra or {})
        return super().env(merged, drop)

    def _kill_agents(self):
        alive = [pid for pid in self._agents if is_alive(pid, self.token)]
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if alive:
            kill_marked(self.token)
        for d in self._own_dirs:
            shutil.rmtree(d, ignore_errors=True)
        if alive:
            raise AssertionError(f"detached agent(s) {alive} still running at the end of the test (SIGKILLed)")

    # ---- running ddplaunch

    def ctl(self, *args, timeout=20.0, env=None, prefix=(), cwd=None):
        """`ddplaunch ARGS` (a subcommand) to its end; a Result."""
        cmd = [*prefix, str(BIN), *map(str, args)]
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               env=env or self.env(), cwd=str(cwd or self.tmp), timeout=timeout,
                               start_new_session=True)
        except subprocess.TimeoutExpired as e:
            self.fail(f"{' '.join(cmd)}: still running after {timeout} s; stdout {e.stdout!r} stderr {e.stderr!r}")
        return Result(cmd, p.returncode, p.stdout, p.stderr, time.monotonic() - t0)

    def detach_command(self, args, job_id=None, flag="-d", log_dir=None):
        return [str(BIN), flag, f"--log-dir={log_dir or self.log_dir}", f"--rdzv-id={job_id or self.job_id}",
                *map(str, args)]

    def detach(self, args, job_id=None, flag="-d", env=None, env_extra=None, prefix=(), log_dir=None, cwd=None):
        """`ddplaunch -d ARGS`: checks what it prints and that the job is listed;
        returns the job id. The agent's pid goes to the cleanup's list."""
        cmd = [*prefix, *self.detach_command(args, job_id, flag, log_dir)]
        env = env or self.env(env_extra)
        res = self.run_launcher(None, raw_cmd=cmd, env=env, cwd=cwd, timeout=30)
        self.assertEqual(res.rc, 0, res.describe())
        out = res.out.splitlines()
        self.assertEqual(len(out), 1, "stdout must be the job id alone" + res.describe())
        jid = out[0].strip()
        self.assertRegex(jid, r"^\S+$", res.describe())
        for word in ("attach", "logs", "stop"):
            self.assertIn(word, res.err, f"stderr should say how to {word}" + res.describe())
        entry = self.entry(jid, env=env, prefix=prefix, cwd=cwd)
        self.assertIsInstance(entry.get("pid"), int, entry)
        self._agents.append(entry["pid"])
        return jid

    # ---- the registry

    def jobs(self, env=None, prefix=(), cwd=None):
        res = self.ctl("list", "--json", env=env, prefix=prefix, cwd=cwd)
        self.assertEqual(res.rc, 0, res.describe())
        try:
            rows = json.loads(res.out)
        except ValueError:
            self.fail("list --json did not print JSON" + res.describe())
        self.assertIsInstance(rows, list, res.describe())
        return rows

    def entry(self, jid, **kw):
        rows = [r for r in self.jobs(**kw) if r.get("job_id") == jid]
        self.assertEqual(len(rows), 1, f"job {jid} in list --json: {rows}")
        return rows[0]

    def wait_ended(self, jid, timeout=30.0, **kw):
        """list's entry of the job once its state is an end state."""
        last = {}

        def ended():
            last.update(self.entry(jid, **kw))
            return last.get("state") in ENDED
        if not wait_until(ended, timeout, interval=0.2):
            self.fail(f"job {jid} did not end within {timeout} s: {last}")
        return dict(last)

    # ---- files

    def console(self, jid, log_dir=None):
        return Path(log_dir or self.log_dir) / jid / "console.log"

    def wait_for_text(self, path, text, timeout=15.0):
        """Waits until the file holds text; its content."""
        def has():
            try:
                return text in Path(path).read_text(errors="replace")
            except OSError:
                return False
        if not wait_until(has, timeout):
            content = Path(path).read_text(errors="replace") if Path(path).exists() else "<missing>"
            self.fail(f"{text!r} not in {path} within {timeout} s; it holds:\n{content[-3000:]}")
        return Path(path).read_text(errors="replace")

    def tell(self, name, text="", outdir=None):
        """Creates OUTDIR/name (atomically) for workers/gate.py."""
        d = Path(outdir or self.outdir)
        (d / f".{name}").write_text(text)
        os.rename(d / f".{name}", d / name)

    def worker_pids(self, nproc, outdir=None):
        d = Path(outdir or self.outdir)
        for r in range(nproc):
            self.assertTrue(wait_for_file(d / f"ready_{r}", 15), f"rank {r} not ready within 15 s")
        return [int((d / f"pid_{r}").read_text()) for r in range(nproc)]

    # ---- assertions

    def assert_one_error_line(self, res, rc, *mentions):
        self.assertEqual(res.rc, rc, res.describe())
        lines = nonempty_lines(res.out + res.err)
        self.assertEqual(len(lines), 1, "expected one error line" + res.describe())
        self.assertIn("error", lines[0].lower(), res.describe())
        for m in mentions:
            self.assertIn(m, lines[0], res.describe())

    def assert_end_line(self, res, jid, code):
        """The end line is there once, as the last line of the stream it is on."""
        line = END_LINE.format(jid, code)
        self.assertEqual((res.out + res.err).count(line), 1, f"expected {line!r} once" + res.describe())
        stream = res.out if line in res.out else res.err
        self.assertEqual(nonempty_lines(stream)[-1].strip(), line, "the end line must come last" + res.describe())


class DetachTest(DetachedJobCase):
    """`ddplaunch -d` itself: the job outlives its terminal; bad usage starts nothing."""

    def test_detached_job_survives_the_end_of_its_terminal_session(self):
        # An SSH login: a shell on a pseudo-terminal, session leader of its own
        # session, runs `ddplaunch -d`; then the connection drops (the terminal's
        # owner dies, the shell gets SIGHUP). The job must not notice.
        cmd = shlex.join(self.detach_command(["--nproc-per-node=2", GATE, self.outdir]))
        typescript = self.tmp / "session.out"
        with open(typescript, "wb") as out:
            session = subprocess.Popen(["script", "-qfec", f'{cmd}; echo "ddpt-rc=$?"; exec sleep 300', "/dev/null"],
                                       stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                       env=self.env(), cwd=str(self.tmp), start_new_session=True)
        # stdin stays open, as a terminal's would, until the session is gone.
        self.addCleanup(session.stdin.close)
        self.addCleanup(session.wait, 5)
        self.addCleanup(session.kill)
        text = self.wait_for_text(typescript, "ddpt-rc=", timeout=30)
        self.assertIn("ddpt-rc=0", text)
        [row] = self.jobs()
        jid = row["job_id"]
        self._agents.append(row["pid"])
        self.assertIn(jid, [l.strip() for l in text.splitlines()], "the job id should be a line of its own")
        self.assertEqual(row["state"], "running", row)
        workers = self.worker_pids(2)

        [shell] = children(session.pid)
        agent = row["pid"]
        self.assertNotEqual(read_stat(agent)[3], read_stat(shell)[3], "the agent is in the terminal's session")
        self.assertEqual(tty_nr(agent), 0, "the agent has a controlling terminal")
        fds = open_files(agent)
        self.assertEqual(fds.get(0), "/dev/null", f"the agent's stdin: {fds}")
        self.assertEqual([t for t in fds.values() if t.startswith(("/dev/pts", "/dev/tty", "/dev/ptmx"))], [],
                         f"the agent holds the terminal open: {fds}")

        # The connection drops: the shell's process group gets SIGHUP and the
        # terminal's owner (script, as sshd would be) dies.
        os.killpg(shell, signal.SIGHUP)
        session.kill()
        session.wait(timeout=5)
        self.assert_dead([shell], what="login shell")
        # The agent ignores SIGHUP even when it is sent to it directly: a line
        # written after it still reaches console.log, and the job still succeeds.
        os.kill(agent, signal.SIGHUP)
        self.tell("say_0", "after-hup")
        self.wait_for_text(self.console(jid), "[0:1] rank 1 says after-hup")
        for pid in workers:
            self.assertTrue(is_alive(pid, self.token), "a worker died with the session")

        self.tell("go")
        row = self.wait_ended(jid)
        self.assertEqual((row["state"], row["exit_code"]), ("succeeded", 0), row)
        console = self.console(jid).read_text()
        for line in ("[0:0] rank 0 ready", "[0:1] rank 1 ready", "[0:0] rank 0 done", "[0:1] rank 1 done"):
            self.assertIn(line, console)
        self.assert_dead([agent, *workers], what="agent or worker")
        self.assert_no_leftovers()

    def test_bad_usage_with_detach_starts_nothing(self):
        for flag, args, mention in (("-d", ["--nproc-per-node=2", "--no-such-option", GATE, self.outdir],
                                     "no-such-option"),
                                    ("--detach", ["--nproc-per-node=2"], None)):
            with self.subTest(flag=flag, args=args):
                res = self.run_launcher(None, raw_cmd=self.detach_command(args, flag=flag), timeout=10)
                if mention:
                    self.assert_usage_error(res, mention)
                else:
                    self.assert_usage_error(res)
                self.assertEqual(self.jobs(), [], "a rejected command line left a job in list")


    def test_a_second_job_of_the_same_id_is_refused(self):
        # attach, logs and stop name jobs by id: two single-node jobs of one id
        # here would be ambiguous, and would write into one log folder.
        jid = self.detach(["--nproc-per-node=1", GATE, self.outdir])
        self.worker_pids(1)
        res = self.run_launcher(None, raw_cmd=self.detach_command(["--nproc-per-node=1", GATE, self.outdir]),
                                timeout=10)
        self.assert_one_error_line(res, 2, jid, "already runs")
        self.assertEqual([j["state"] for j in self.jobs()], ["running"])
        self.tell("go")
        self.assertEqual(self.wait_ended(jid)["exit_code"], 0)
        self.assert_no_leftovers()


class AttachTest(DetachedJobCase):
    """`ddplaunch attach`: replay, follow, detach on a signal, end with the job's code."""

    def attach(self, jid, *opts):
        return self.start(None, raw_cmd=[str(BIN), "attach", jid, *opts])

    def assert_replay(self, launch, tail):
        """The attach's first stdout lines are exactly `tail` (console.log's last lines)."""
        last = tail[-1]
        self.wait_for_text(launch.out_path, last, timeout=10)
        got = launch.out_path.read_text().splitlines()[:len(tail)]
        self.assertEqual(got, tail, "attach should first print the last lines of console.log")

    def test_attach_replays_follows_and_detaches_on_a_signal(self):
        jid = self.detach(["--nproc-per-node=1", GATE, self.outdir, 3, 30])
        console = self.console(jid)
        self.wait_for_text(console, "[0:0] rank 0 stderr ready")
        self.worker_pids(1)
        # Each signal detaches; each attach after the first shows the same job.
        # -n 5, the default 20 and --lines 3 each replay exactly that many lines.
        for k, (sig, opts, n) in enumerate(((signal.SIGINT, ["-n", "5"], 5), (signal.SIGTERM, [], 20),
                                            (signal.SIGHUP, ["--lines", "3"], 3))):
            with self.subTest(signal=sig.name, lines=n):
                lines = console.read_text().splitlines()
                self.assertGreater(len(lines), n)
                att = self.attach(jid, *opts)
                self.assert_replay(att, lines[-n:])
                self.assertNotIn(lines[-n - 1], att.out_path.read_text(), f"more than {n} lines replayed")
                # A line the job writes now reaches the attached terminal.
                self.tell(f"say_{k}", f"hello-{k}")
                self.wait_for_text(att.out_path, f"[0:0] rank 0 says hello-{k}", timeout=10)
                os.kill(att.pid, sig)
                res = self.finish(att, timeout=10)
                self.assertEqual(res.rc, 0, res.describe())
                self.assertIn(f"detached from job {jid}", res.out + res.err, res.describe())
                self.assertEqual(self.entry(jid)["state"], "running", "detaching stopped the job")
                self.assertTrue(is_alive(self._agents[0], self.token), "detaching ended the agent")
        self.tell("go")
        self.assertEqual(self.wait_ended(jid)["exit_code"], 3)
        self.assert_no_leftovers()

    def test_attach_ends_with_the_jobs_exit_code(self):
        jid = self.detach(["--nproc-per-node=2", "--shutdown-grace=2", GATE, self.outdir, 3])
        self.worker_pids(2)
        att = self.attach(jid)
        self.wait_for_text(att.out_path, "[0:1] rank 1 ready")
        self.tell("go")  # every rank exits 3
        res = self.finish(att, timeout=30)
        self.assertEqual(res.rc, 3, res.describe())
        # The first rank to exit (3) printed its last line; the other may be
        # stopped before it prints its own.
        self.assertRegex(res.out, r"\[0:([01])\] rank \1 done", res.describe())
        self.assert_end_line(res, jid, 3)
        # What was left includes the closing failure summary, which console.log has too.
        self.assertIn("Root Cause", self.console(jid).read_text())
        self.assertIn("Root Cause", res.out + res.err, res.describe())
        row = self.wait_ended(jid)
        self.assertEqual((row["state"], row["exit_code"]), ("failed", 3), row)
        self.assert_no_leftovers()

    def test_attach_to_an_ended_job(self):
        jid = self.detach(["--nproc-per-node=1", GATE, self.outdir, 3, 10])
        self.worker_pids(1)
        self.tell("go")
        self.assertEqual(self.wait_ended(jid)["exit_code"], 3)
        lines = self.console(jid).read_text().splitlines()
        # By id, and without one: when no job runs, the most recent one.
        for args in ([jid, "-n", "4"], ["-n", "4"]):
            with self.subTest(args=args):
                res = self.ctl("attach", *args, timeout=10)
                self.assertEqual(res.rc, 3, res.describe())
                self.assertEqual(res.out.splitlines()[:4], lines[-4:], res.describe())
                self.assertNotIn(lines[-5], res.out, res.describe())
                self.assert_end_line(res, jid, 3)


    def test_attach_to_a_stopped_job(self):
        jid = self.detach(["--nproc-per-node=1", GATE, self.outdir])
        self.worker_pids(1)
        self.assertEqual(self.ctl("stop", jid, timeout=30).rc, 143)
        res = self.ctl("attach", jid, "-n", 2, timeout=10)
        self.assertEqual(res.rc, 143, res.describe())
        self.assertEqual(res.out.splitlines()[:2], self.console(jid).read_text().splitlines()[-2:], res.describe())
        self.assert_end_line(res, jid, 143)


class StopTest(DetachedJobCase):
    """`ddplaunch stop`: what SIGTERM to a foreground ddplaunch does, and nothing for an ended job."""

    @staticmethod
    def signal_lines(text, job_ids):
        """The lines naming SIGTERM, without timestamps, job ids or pids."""
        found = []
        for line in text.splitlines():
            if "SIGTERM" not in line:
                continue
            line = re.sub(r"^\[ddplaunch [0-9:.]+\] ", "", line)
            for j in job_ids:
                line = line.replace(j, "<job>")
            found.append(re.sub(r"pid \d+", "pid N", line))
        return found

    def test_stop_is_sigterm_to_the_agent(self):
        fg_id, bg_id = self.job_id + "-fg", self.job_id + "-bg"
        fg_out, bg_out = self.outdir / "fg", self.outdir / "bg"
        fg_out.mkdir()
        bg_out.mkdir()
        args = ["--nproc-per-node=2", "--shutdown-grace=3", worker("trap_signals.py")]

        # In the foreground: SIGTERM to ddplaunch.
        launch = self.start(None, raw_cmd=self.command([f"--rdzv-id={fg_id}", *args, fg_out], job_id=False))
        fg_workers = self.worker_pids(2, fg_out)
        os.kill(launch.pid, signal.SIGTERM)
        fg = self.finish(launch, timeout=20)
        self.assertEqual(fg.rc, 143, fg.describe())
        fg_report = self.signal_lines(fg.err, [fg_id])
        self.assertNotEqual(fg_report, [], "the foreground report names the signal" + fg.describe())

        # Detached: `ddplaunch stop`.
        jid = self.detach([*args, bg_out], job_id=bg_id)
        bg_workers = self.worker_pids(2, bg_out)
        agent = self._agents[-1]
        res = self.ctl("stop", jid, timeout=30)
        self.assertEqual(res.rc, 143, res.describe())
        self.assertIn("SIGTERM", res.out + res.err, "stop's report should name the signal" + res.describe())
        # The agent and every worker are gone once stop returns.
        self.assert_dead([agent, *bg_workers], timeout=1.0, what="agent or worker")
        self.assert_no_leftovers(timeout=1.0)

        # The workers got what foreground workers get, and the console says what the
        # foreground's stderr said.
        for r in range(2):
            self.assertEqual((bg_out / f"signal_{r}").read_text(), "SIGTERM", f"rank {r} of the detached job")
            self.assertEqual((fg_out / f"signal_{r}").read_text(), "SIGTERM", f"rank {r} of the foreground job")
        bg_report = self.signal_lines(self.console(jid).read_text(), [jid])
        self.assertEqual(bg_report, fg_report, "console.log should report the stop as the foreground stderr does")
        row = self.entry(jid)
        self.assertEqual((row["state"], row["exit_code"]), ("stopped", 143), row)
        self.assert_dead(fg_workers, timeout=1.0, what="foreground worker")
        self.assert_end_line(res, jid, 143)

    def test_stopping_an_ended_job_is_refused(self):
        jid = self.detach(["--nproc-per-node=1", GATE, self.outdir])
        self.worker_pids(1)
        self.tell("go")
        self.assertEqual(self.wait_ended(jid)["state"], "succeeded")
        self.assert_one_error_line(self.ctl("stop", jid), 1)
        self.assertEqual(self.entry(jid)["exit_code"], 0, "a refused stop changed the job's record")


class ListAndLogsTest(DetachedJobCase):
    """`ddplaunch list` and `ddplaunch logs`, for running and finished jobs."""

    def test_list_running_then_finished_jobs(self):
        ok_id, bad_id = self.job_id + "-ok", self.job_id + "-bad"
        ok_out, bad_out = self.outdir / "ok", self.outdir / "bad"
        ok_out.mkdir()
        bad_out.mkdir()
        t0 = time.time()
        self.detach(["--nproc-per-node=2", GATE, ok_out], job_id=ok_id)
        self.detach(["--nproc-per-node=1", GATE, bad_out, 3], job_id=bad_id, flag="--detach")
        t1 = time.time()
        self.worker_pids(2, ok_out)
        self.worker_pids(1, bad_out)

        rows = {r["job_id"]: r for r in self.jobs()}
        self.assertEqual(sorted(rows), sorted([ok_id, bad_id]))
        for jid, ranks in ((ok_id, 2), (bad_id, 1)):
            row = rows[jid]
            with self.subTest(job=jid, when="running"):
                for key in ("job_id", "state", "started_unix_s", "ranks", "restarts", "exit_code", "detached",
                            "pid", "log_dir"):
                    self.assertIn(key, row)
                self.assertEqual(row["state"], "running")
                self.assertIsNone(row["exit_code"])
                self.assertEqual((row["ranks"], row["restarts"], row["detached"]), (ranks, 0, True))
                self.assertTrue(t0 - 2 <= row["started_unix_s"] <= t1 + 2, (t0, row["started_unix_s"], t1))
                self.assertTrue(is_alive(row["pid"], self.token), "list's pid is not a live agent")
                # The spec names the key only: the --log-dir given or the job's folder in it.
                self.assertIn(os.path.normpath(row["log_dir"]), (str(self.log_dir), str(self.log_dir / jid)))
        # status and stacks take the id as list and attach do: positional.
        status = self.ctl("status", ok_id)
        self.assertEqual(status.rc, 0, status.describe())
        self.assertIn(f"job {ok_id}:", status.out, status.describe())
        table = self.ctl("list")
        self.assertEqual(table.rc, 0, table.describe())
        for jid in (ok_id, bad_id):
            [line] = [l for l in table.out.splitlines() if jid in l]
            self.assertIn("running", line)

        self.tell("go", outdir=ok_out)
        self.tell("go", outdir=bad_out)
        for jid, state, code in ((ok_id, "succeeded", 0), (bad_id, "failed", 3)):
            with self.subTest(job=jid, when="ended"):
                row = self.wait_ended(jid)
                self.assertEqual((row["state"], row["exit_code"], row["restarts"]), (state, code, 0), row)
        table = self.ctl("list")
        for jid, state in ((ok_id, "succeeded"), (bad_id, "failed")):
            [line] = [l for l in table.out.splitlines() if jid in l]
            self.assertIn(state, line, table.describe())
        self.assert_no_leftovers()

    def test_a_killed_agent_is_listed_as_lost(self):
        jid = self.detach(["--nproc-per-node=1", GATE, self.outdir])
        self.worker_pids(1)
        os.kill(self._agents[0], signal.SIGKILL)
        self.assertEqual(self.wait_ended(jid)["state"], "lost")
        self.assert_no_leftovers(timeout=10)  # the workers follow their agent (its sentinel)

    def test_logs_of_a_rank_and_of_the_console(self):
        jid = self.detach(["--nproc-per-node=2", GATE, self.outdir])
        self.assertEqual(jid, self.job_id, "the job id should be the --rdzv-id, which names the log folder")
        self.worker_pids(2)
        console = self.console(jid)
        self.wait_for_text(console, "[0:1] rank 1 stderr ready")

        # A running job: a rank's stdout.log then its stderr.log, and the console.
        res = self.ctl("logs", jid, "--rank", 1)
        self.assertEqual((res.rc, worker_lines(res.out)), (0, ["rank 1 ready", "rank 1 stderr ready"]),
                         res.describe())
        before = console.read_text()
        res = self.ctl("logs", jid)
        self.assertEqual(res.rc, 0, res.describe())
        # The console may have grown meanwhile: the job is running.
        self.assertTrue(res.out.startswith(before), f"logs without --rank prints console.log\n{res.describe()}")

        # -f follows while the job runs and returns when it ends.
        follow = self.start(None, raw_cmd=[str(BIN), "logs", jid, "-f"])
        self.wait_for_text(follow.out_path, "[0:0] rank 0 stderr ready")
        self.tell("say_0", "more")
        self.wait_for_text(follow.out_path, "[0:1] rank 1 says more")
        self.tell("go")
        res = self.finish(follow, timeout=30)
        self.assertEqual(res.rc, 0, res.describe())
        self.assertIn("[0:1] rank 1 done", res.out, res.describe())
        self.assertEqual(self.wait_ended(jid)["state"], "succeeded")

        # A finished job, named or not (the most recent); --attempt 0 is the only one.
        for args in ([jid, "--rank", 0], ["--rank", 0], [jid, "--rank", 0, "--attempt", 0]):
            with self.subTest(args=args):
                res = self.ctl("logs", *args)
                self.assertEqual(res.rc, 0, res.describe())
                self.assertEqual(worker_lines(res.out), ["rank 0 ready", "rank 0 says more", "rank 0 done",
                                                         "rank 0 stderr ready"], res.describe())
        res = self.ctl("logs", jid, "--follow")
        self.assertEqual((res.rc, res.out), (0, console.read_text()), "logs -f of an ended job" + res.describe())
        self.assert_one_error_line(self.ctl("logs", jid, "--rank", 7), 1)
        self.assert_no_leftovers()

    def test_logs_of_a_rank_default_to_the_newest_attempt(self):
        # restart_worker.sh: rank 1 fails attempt 0 (code 3); attempt 1 succeeds.
        jid = self.detach(["--nproc-per-node=2", "--max-restarts=1", "--shutdown-grace=1",
                           worker("restart_worker.sh"), self.outdir, 1, 1, 3])
        row = self.wait_ended(jid)
        self.assertEqual((row["state"], row["exit_code"], row["restarts"]), ("succeeded", 0, 1), row)
        for args, want in ((["--rank", 0], "rank 0 attempt 1"), (["--rank", 0, "--attempt", 1], "rank 0 attempt 1"),
                           (["--rank", 0, "--attempt", 0], "rank 0 attempt 0")):
            with self.subTest(args=args):
                res = self.ctl("logs", jid, *args)
                self.assertEqual((res.rc, worker_lines(res.out)), (0, [want]), res.describe())


    def test_logs_follow_moves_to_the_next_attempt(self):
        jid = self.detach(["--nproc-per-node=1", "--max-restarts=1", worker("attempts.py"), self.outdir])
        self.assertTrue(wait_for_file(self.outdir / "ready_0_0", 15), "attempt 0 did not start")
        follow = self.start(None, raw_cmd=[str(BIN), "logs", jid, "--rank", "0", "-f"])
        self.wait_for_text(follow.out_path, "rank 0 attempt 0")
        self.tell("go_0")  # attempt 0 fails (3): the job restarts
        self.assertTrue(wait_for_file(self.outdir / "ready_0_1", 15), "attempt 1 did not start")
        self.wait_for_text(follow.out_path, "rank 0 attempt 1")
        self.tell("go_1")
        res = self.finish(follow, timeout=30)
        self.assertEqual(res.rc, 0, res.describe())
        self.assertEqual(worker_lines(res.out), ["rank 0 attempt 0", "rank 0 attempt 0 done", "rank 0 attempt 1",
                                                 "rank 0 attempt 1 done"], res.describe())
        self.assertIn(f"==> {jid}: attempt 1 <==", res.out)
        self.assert_end_line(res, jid, 0)
        self.assert_no_leftovers()


class JobSelectionTest(DetachedJobCase):
    """Which job a subcommand without JOB means; unknown ids."""

    def test_several_running_jobs_need_an_id(self):
        a, b = self.job_id + "-a", self.job_id + "-b"
        out_a, out_b = self.outdir / "a", self.outdir / "b"
        out_a.mkdir()
        out_b.mkdir()
        self.detach(["--nproc-per-node=1", GATE, out_a], job_id=a)
        self.detach(["--nproc-per-node=1", GATE, out_b], job_id=b)
        self.worker_pids(1, out_a)
        self.worker_pids(1, out_b)
        for cmd in (["attach"], ["logs"], ["logs", "--rank", 0], ["stop"]):
            with self.subTest(cmd=cmd, job="none of two"):
                self.assert_one_error_line(self.ctl(*cmd), 2, a, b)
        for cmd in (["attach", "no-such-job"], ["logs", "no-such-job"], ["stop", "no-such-job"]):
            with self.subTest(cmd=cmd, job="unknown"):
                self.assert_one_error_line(self.ctl(*cmd), 1)
        self.assertEqual([r["state"] for r in self.jobs()], ["running", "running"])

        # With one job left running, stop needs no id.
        res = self.ctl("stop", a, timeout=30)
        self.assertEqual(res.rc, 143, res.describe())
        res = self.ctl("stop", timeout=30)
        self.assertEqual(res.rc, 143, res.describe())
        self.assertEqual({r["job_id"]: r["state"] for r in self.jobs()}, {a: "stopped", b: "stopped"})
        self.assert_no_leftovers()
        self.assert_end_line(res, b, 143)


class OtherUserTest(DetachedJobCase):
    """The registry is per user: root's subcommands do not see nobody's job."""

    def test_another_users_job_is_invisible(self):
        self.assertEqual(os.geteuid(), 0, "this test runs a job as nobody: it must run as root")
        prefix = as_user_nobody()
        self.assertIsNotNone(prefix, "neither setpriv nor runuser is installed: cannot run a job as nobody")
        # nobody's own runtime dir, log dir and worker folder, out of the test's 0700 tmp.
        home = Path(tempfile.mkdtemp(prefix="ddpt-nobody-"))
        self._own_dirs.append(home)
        for d in (home, home / "xdg", home / "logs", home / "out"):
            d.mkdir(exist_ok=True)
            os.chown(d, NOBODY, NOBODY)
            os.chmod(d, 0o700)
        env = self.env({"XDG_RUNTIME_DIR": str(home / "xdg"), "TMPDIR": str(home), "HOME": str(home)})
        as_nobody = dict(env=env, prefix=prefix, cwd=home)
        probe = self.ctl("list", "--json", **as_nobody)
        self.assertEqual(probe.rc, 0, "ddplaunch cannot run as nobody here" + probe.describe())

        jid = self.detach(["--nproc-per-node=1", GATE, home / "out"], log_dir=home / "logs", **as_nobody)
        agent = self._agents[-1]
        self.assertEqual(os.stat(f"/proc/{agent}").st_uid, NOBODY, "the agent does not run as nobody")
        [pid] = self.worker_pids(1, home / "out")

        self.assertEqual(self.jobs(), [], "nobody's job is in root's list")
        for cmd in (["attach", jid], ["stop", jid]):
            with self.subTest(cmd=cmd):
                self.assert_one_error_line(self.ctl(*cmd), 1)
        self.assertEqual(self.entry(jid, **as_nobody)["state"], "running")
        self.assertTrue(is_alive(agent, self.token) and is_alive(pid, self.token), "nobody's job was touched")

        self.tell("go", outdir=home / "out")
        row = self.wait_ended(jid, **as_nobody)
        self.assertEqual((row["state"], row["exit_code"]), ("succeeded", 0), row)
        self.assert_no_leftovers()


@unittest.skipUnless(os.environ.get("DDPTRAIN_BIN"), "DDPTRAIN_BIN is not set (CMake runs this class with the "
                     "other ddptrain tests, as integration.test_detached_jobs_ddptrain)")
@unittest.skipUnless(TORCH_OK, "PYTHON_EXEC cannot import torch.distributed (parameters are compared with torch)")
class DetachedTrainingTest(DetachedJobCase, DdptrainCase):
    """ddptrain under `ddplaunch -d`: restarts and stop requests work as in the foreground."""

    CKPT_ARGS = ("--batch-size", 8, "--momentum", 0.9, "--samples", 512, "--log-every", 0)
    CKPT_STEPS = 30

    def rank_pid(self, rank):
        """pid of this test's ddptrain worker of `rank` in attempt 0 (as test_ddptrain finds it)."""
        for pid, cmdline in find_marked(self.token):
            env = proc_environ(pid)
            if (cmdline.startswith(str(DDPTRAIN)) and env.get("RANK") == str(rank)
                    and env.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"):
                return pid
        return None

    def test_sigkilled_rank_resumes_bitwise_equal(self):
        reference = self.tmp / "uninterrupted.pt"
        self.train(2, *self.CKPT_ARGS, "--steps", self.CKPT_STEPS, "--save-final", reference)
        ck, final = self.tmp / "ck", self.tmp / "resumed.pt"
        # 0.05 s per step in attempt 0 only: about 1.5 s of training to aim at. The
        # foreground reference run above is listed too: the detached job gets an id of its own.
        jid = self.detach(self.launch_args(2, [DDPTRAIN], [
            *self.CKPT_ARGS, "--steps", self.CKPT_STEPS, "--checkpoint-dir", ck, "--checkpoint-every", 5,
            "--inject-fault", "slow=0.05@0:*", "--save-final", final], restarts=1),
            job_id=self.job_id + "-d", env_extra=self.train_env())
        self.assertTrue(wait_until(lambda: max(checkpoint_steps(ck), default=0) >= 10, timeout=40, interval=0.01),
                        "no checkpoint of step >= 10 within 40 s")
        victim = self.rank_pid(1)
        steps_at_kill = checkpoint_steps(ck)
        self.assertIsNotNone(victim, "worker of rank 1 not found in /proc")
        self.assertLess(max(steps_at_kill), self.CKPT_STEPS, "the run was over before the kill")
        os.kill(victim, signal.SIGKILL)

        row = self.wait_ended(jid, timeout=60)
        console = self.console(jid).read_text()
        self.assertEqual((row["state"], row["exit_code"], row["restarts"]), ("succeeded", 0, 1),
                         f"{row}\nconsole.log:\n{console[-3000:]}")
        self.assertIn("SIGKILL", console)
        self.assertIn("restarting the job as attempt 1", console)
        m = RESUMED_RE.search(console)
        self.assertIsNotNone(m, "no 'resuming from' line in console.log")
        self.assertGreaterEqual(int(m.group(2)), 10)
        (cmp_row,) = self.compare((final, reference))
        self.assert_bitwise(cmp_row, f"detached: rank 1 SIGKILLed with checkpoints {steps_at_kill}, resumed")
        self.assert_no_leftovers()

    def test_stop_with_a_stop_timeout_stops_at_a_step_boundary(self):
        # As SIGTERM to a foreground ddplaunch started with --stop-timeout: exit 75.
        ck = self.tmp / "ck"
        jid = self.detach(["--heartbeat-interval=0.2", "--stop-timeout=60", *self.launch_args(2, [DDPTRAIN], [
            *self.CKPT_ARGS, "--steps", 3000, "--checkpoint-dir", ck, "--checkpoint-every", 50,
            "--inject-fault", "slow=0.02@0:*"])], env_extra=self.train_env())
        self.assertTrue(wait_until(lambda: max(checkpoint_steps(ck), default=0) >= 50, timeout=60),
                        "no checkpoint of step >= 50 within 60 s")
        res = self.ctl("stop", jid, timeout=90)
        self.assertEqual(res.rc, 75, res.describe())
        console = self.console(jid).read_text()
        m = re.search(r"ddptrain: stopping after step (\d+) of 3000 as ddplaunch asked \(checkpoint written\)",
                      console)
        self.assertIsNotNone(m, console[-3000:])
        self.assertEqual(max(checkpoint_steps(ck)), int(m.group(1)))
        summary = "every rank stopped at a step boundary on request; exit code 75"
        self.assertIn(summary, console)
        self.assertEqual(self.entry(jid)["exit_code"], 75)
        # stop prints the job's closing summary, as the foreground ddplaunch's stderr ends with it.
        self.assertIn(summary, res.out + res.err, res.describe())
        self.assert_no_leftovers()
        self.assert_end_line(res, jid, 75)


if __name__ == "__main__":
    unittest.main()
