"""Bad input to every user-facing command, table-driven.

Each row is a malformed command line or environment value for one command
(launch, serve, status, stacks, top, diagnose, doctor, attach, logs, stop, list).
For every row ddplaunch must:
  * exit 2, quickly;
  * print exactly one line on stderr, the command's usage-error prefix
    ('ddplaunch: error: ' for a launch, 'ddplaunch CMD: error: ' for a
    subcommand) followed by a message naming the option or variable at fault;
  * print nothing on stdout;
  * start nothing: the PROGRAM is a script that creates a marker file, and no
    process carrying the test's token outlives ddplaunch;
  * write nothing: each row runs with a fresh, empty HOME, XDG_RUNTIME_DIR
    (where the per-user job registry lives), TMPDIR (the default --log-dir's
    parent) and working folder, which must stay empty, and its --log-dir must
    not come to exist.

Bad command lines of a launch that test_usage.py already covers are not
repeated here. A positive control runs a valid job in the same sandbox, to
show that the marker, the log folder and the registry entry do appear when
something is started.
"""

import os
import socket
import stat
import unittest

from launcher_harness import BIN, LauncherTestCase, find_marked

# The usage-error line of each command.
PREFIX = {
    "launch": "ddplaunch: error: ",
    **{cmd: f"ddplaunch {cmd}: error: "
       for cmd in ("serve", "status", "stacks", "top", "diagnose", "doctor", "attach", "logs", "stop", "list")},
}

# A rejected command line is answered at once: well under this.
QUICK_S = 5.0


class Row:
    """One malformed invocation: args after `ddplaunch` ({prog}, {py}, {row}
    and {logs} are filled in per row), environment overrides (None: unset),
    and the words of which the error line must contain at least one."""

    def __init__(self, args, *mentions, env=None, program=True, log_dir=True):
        self.args, self.mentions, self.env, self.program = list(args), mentions, env or {}, program
        self.log_dir = log_dir  # a launch: pass --log-dir={logs} (False: the row chooses)

    def label(self):
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return (env + " " if env else "") + " ".join(self.args)


def L(*args, env=None, program=True, log_dir=True):
    """A launch row: its options, then (unless program=False) the marker script."""
    mentions = ()
    if args and isinstance(args[-1], tuple):
        args, mentions = args[:-1], args[-1]
    return Row(args, *mentions, env=env, program=program, log_dir=log_dir)


def C(*args, env=None):
    """A subcommand row: the subcommand and its arguments."""
    args, mentions = args[:-1], args[-1]
    return Row(args, *mentions, env=env, program=False)


# ---------------------------------------------------------------- the tables

# `ddplaunch [options] PROGRAM`: bad options (none of test_usage.py's).
LAUNCH_OPTIONS = [
    # trailing commas: getline used to drop the empty last entry
    L("--nproc-per-node=2", "--local-ranks-filter=0,", ("--local-ranks-filter",)),
    L("--nproc-per-node=2", "--redirects=0:1,", ("--redirects",)),
    L("--nproc-per-node=2", "--tee=0:1,", ("--tee",)),
    L("--nproc-per-node=2", "--local-ranks-filter=0,,1", ("--local-ranks-filter",)),
    L("--nproc-per-node=2", "--local-ranks-filter=2", ("--local-ranks-filter",)),
    L("--nproc-per-node=2", "--redirects=0:1,1", ("--redirects",)),
    L("--tee=4", ("--tee",)),
    L("--tee=1:3", ("--tee",)),
    L("--nproc-per-node=xpu", ("--nproc-per-node",)),
    L("--nproc-per-node=99999999999", ("--nproc-per-node",)),
    L("--nnodes=0", ("--nnodes",)),
    L("--nnodes=3:2", ("--nnodes",)),
    L("--nnodes=a:b", ("--nnodes",)),
    L("--nnodes=1:2:3", ("--nnodes",)),
    L("--node-rank=-1", ("--node-rank",)),
    L("--node-rank=first", ("--node-rank",)),
    L("--nnodes=2", "--node-rank=2", "--rdzv-endpoint=127.0.0.1:29400", ("node rank",)),
    L("--nnodes=2", "--node-rank=0", "--rdzv-endpoint=127.0.0.1:99999", ("--rdzv-endpoint",)),
    L("--nnodes=2", "--node-rank=0", "--rdzv-endpoint=127.0.0.1:http", ("--rdzv-endpoint",)),
    L("--nnodes=1:2", "--rdzv-endpoint=127.0.0.1:29400,", ("--rdzv-endpoint",)),
    L("--nnodes=2", "--rdzv-endpoint=127.0.0.1:29400,127.0.0.2:29400", ("--rdzv-endpoint",)),
    L("--rdzv-backend=etcd-v2", "--nnodes=2", "--rdzv-endpoint=127.0.0.1:2379", ("--rdzv-backend",)),
    L("--rdzv-conf=join_timeout=abc", ("--rdzv-conf", "join_timeout")),
    L("--rdzv-conf=join_timeout", ("--rdzv-conf",)),
    L("--rdzv-conf=bogus_key=1", ("--rdzv-conf",)),
    L("--rdzv-conf=is_host=maybe", ("--rdzv-conf", "is_host")),
    L("--rdzv-conf=node_timeout=inf", ("--rdzv-conf", "node_timeout")),
    L("--rdzv-id=a/b", ("--rdzv-id",)),
    L("--rdzv-id=..", ("--rdzv-id",)),
    L("--rdzv-id=job\n2", ("--rdzv-id",)),
    L("--rdzv-id=" + "x" * 300, ("--rdzv-id",)),
    L("--log-dir={prog}/logs", ("--log-dir",), log_dir=False),
    L("--max-restarts=-1", ("--max-restarts",)),
    L("--max-restarts=1.5", ("--max-restarts",)),
    L("--monitor-interval=-0.5", ("--monitor-interval",)),
    L("--start-method=thread", ("--start-method",)),
    L("--signals-to-handle=SIGFOO", ("--signals-to-handle", "SIGFOO")),
    L("--signals-to-handle=", ("--signals-to-handle",)),
    # "--option=" with nothing after '=': an empty value, never the next argument
    # (CLI11 took PROGRAM as the value, and ran the next argument instead)
    L("--master-port=", ("--master-port",)),
    L("--nproc-per-node=", ("--nproc-per-node",)),
    L("--rdzv-backend=", ("--rdzv-backend",)),
    L("--master-addr=", ("--master-addr",)),
    L("--nproc-per-node=2\nx", ("--nproc-per-node",)),
    L("--shutdown-grace=-1", ("--shutdown-grace",)),
    L("--stop-timeout=-1", ("--stop-timeout",)),
    L("--stop-timeout=1e10", ("--stop-timeout",)),
    L("--max-node-failures=-1", ("--max-node-failures",)),
    L("--grow=later", ("--grow",)),
    L("--heartbeat-interval=0", ("--heartbeat-interval",)),
    L("--heartbeat-interval=1e-12", ("--heartbeat-interval",)),
    L("--hang-timeout=0", ("--hang-timeout",)),
    L("--hang-timeout=nan", ("--hang-timeout",)),
    L("--hang-timeout=1", "--heartbeat-interval=2", ("--hang-timeout",)),
    L("--nccl-debug=LOUD", ("--nccl-debug",)),
    L("--log-level=verbose", ("--log-level",)),
    L("--metrics-port=abc", ("--metrics-port",)),
    L("--metrics-port=70000", ("--metrics-port",)),
    L("--metrics-port=-1", ("--metrics-port",)),
    L("--metrics-port=1.5", ("--metrics-port",)),
    L("--metrics-port=", ("--metrics-port",)),
    L("--metrics-port={busy}", ("--metrics-port",)),
    L("--tls-cert={row}/cert.pem", ("--tls-cert",)),
    L("--sync=checkpoints", ("--sync",)),
    L("--sync={row}/ckpt=http://bucket/prefix", ("--sync",)),
    L("--sync-delete", ("--sync-delete",)),
    L("--sync-wait=-1", ("--sync-wait",)),
    L("--max", ("ambiguous", "--max")),
    L("-m", "--no-python", "json.tool", ("--no-python", "--module"), program=False),
    L("--run-path", "{row}/bin", ("bin",), program=False),
    L("{row}/ckpt/missing.py", ("missing.py",), program=False),
    L("--tee", ("--tee",), program=False),
    L("--", ("program",), program=False),
]

# Environment values a launch reads: torchrun's PET_* defaults, the plain
# torchrun variables, Slurm, Open MPI, Kubernetes and ddplaunch's own.
E = {"MASTER_ADDR": "127.0.0.1"}
LAUNCH_ENV = [
    L(("PET_NNODES",), env={"PET_NNODES": "0"}),
    L(("PET_NNODES",), env={"PET_NNODES": "two"}),
    L(("PET_NODE_RANK",), env={"PET_NODE_RANK": "-1"}),
    L(("PET_RDZV_ENDPOINT",), env={"PET_RDZV_ENDPOINT": "127.0.0.1:port"}),
    L(("PET_MASTER_PORT",), env={"PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": "0"}),
    L(("PET_MASTER_PORT",), env={"PET_MASTER_PORT": "99999"}),
    L(("PET_MAX_RESTARTS",), env={"PET_MAX_RESTARTS": "abc"}),
    L(("PET_TEE",), env={"PET_TEE": "9"}),
    L(("PET_REDIRECTS",), env={"PET_REDIRECTS": "0:1,"}),
    L(("PET_LOCAL_RANKS_FILTER",), env={"PET_LOCAL_RANKS_FILTER": "0,"}),
    L(("PET_RDZV_CONF",), env={"PET_RDZV_CONF": "timeout=-3"}),
    L(("PET_RDZV_BACKEND",), env={"PET_RDZV_BACKEND": "etcd3"}),
    L(("PET_SHUTDOWN_GRACE",), env={"PET_SHUTDOWN_GRACE": "soon"}),
    L(("PET_HEARTBEAT_INTERVAL",), env={"PET_HEARTBEAT_INTERVAL": "-1"}),
    L(("PET_NCCL_DEBUG",), env={"PET_NCCL_DEBUG": "LOUD"}),
    L(("PET_STANDALONE",), env={"PET_STANDALONE": "maybe"}),
    L(("PET_START_METHOD",), env={"PET_START_METHOD": "thread"}),
    L(("PET_TEE",), env={"PET_TEE": "1\n2"}),
    L(("PET_RDZV_ID",), env={"PET_RDZV_ID": "a/b"}),
    L(("TMPDIR", "default log folder"), env={"TMPDIR": "{prog}"}, log_dir=False),
    L(("MASTER_PORT",), env={**E, "NODE_RANK": "0", "MASTER_PORT": "abc"}),
    L(("MASTER_PORT",), env={**E, "NODE_RANK": "0", "MASTER_PORT": "70000"}),
    L(("NODE_RANK",), env={**E, "NODE_RANK": "x"}),
    L(("GROUP_RANK",), env={**E, "GROUP_RANK": "-1"}),
    L(("GROUP_WORLD_SIZE",), env={**E, "NODE_RANK": "0", "GROUP_WORLD_SIZE": "-2"}),
    L(("SLURM_JOB_NUM_NODES",), env={"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "abc"}),
    L(("SLURM_JOB_NODELIST",), env={"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "node[1-"}),
    L(("SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES"),
      env={"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "3", "SLURM_JOB_NODELIST": "n[1-2]"}),
    L(("SLURM_NODEID",), env={"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "1", "SLURM_NODEID": "x"}),
    L(("SLURM_STEP_NUM_TASKS",), env={"SLURM_JOB_ID": "1", "SLURM_STEP_NUM_NODES": "2",
                                      "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_NODEID": "0",
                                      "SLURM_STEP_NUM_TASKS": "4"}),
    L(("node rank",), env={"SLURM_JOB_ID": "1", "SLURM_NNODES": "2", "SLURM_NODELIST": "n1,n2",
                           "SLURM_NODEID": "5"}),
    L(("OMPI_COMM_WORLD_SIZE",), env={"OMPI_COMM_WORLD_SIZE": "x", "OMPI_COMM_WORLD_RANK": "0"}),
    L(("rendezvous endpoint", "MASTER_ADDR"), env={"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}),
    L(("JOB_COMPLETION_INDEX",), env={"JOB_COMPLETION_INDEX": "abc"}),
    L(("REPLICATED_JOB_NAME",), env={"JOBSET_NAME": "js", "JOB_COMPLETION_INDEX": "0"}),
    L(("DDPLAUNCH_NNODES",), env={"JOB_COMPLETION_INDEX": "0", "DDPLAUNCH_NNODES": "0"}),
    L(("DDPLAUNCH_K8S_PODS_PER_JOB",), env={"JOBSET_NAME": "js", "JOB_COMPLETION_INDEX": "0",
                                            "REPLICATED_JOB_NAME": "w", "JOB_INDEX": "0",
                                            "DDPLAUNCH_K8S_PODS_PER_JOB": "x"}),
    L(("DDPLAUNCH_STOP_TIMEOUT",), env={"DDPLAUNCH_STOP_TIMEOUT": "-5"}),
    L(("DDPLAUNCH_MAX_NODE_FAILURES",), env={"DDPLAUNCH_MAX_NODE_FAILURES": "x"}),
    L(("DDPLAUNCH_GROW",), env={"DDPLAUNCH_GROW": "later"}),
    L(("DDPLAUNCH_METRICS_PORT", "--metrics-port"), env={"DDPLAUNCH_METRICS_PORT": "http"}),
    L(("DDPLAUNCH_NO_PYTHON_COMPANION",), env={"DDPLAUNCH_NO_PYTHON_COMPANION": "maybe"}),
    L("{py}", ("PYTHON_EXEC",), env={"PYTHON_EXEC": "/nonexistent/python3"}, program=False),
]

SERVE = [
    C("serve", "--port=70000", ("--port",)),
    C("serve", "--port=abc", ("--port",)),
    C("serve", "--port", ("--port",)),
    C("serve", "--node-timeout=0", ("--node-timeout",)),
    C("serve", "--tls-cert={row}/cert.pem", ("--tls-cert",)),
    C("serve", "--log-level=loud", ("--log-level",)),
    C("serve", "--bogus", ("--bogus",)),
    C("serve", "extra", ("extra",)),
    C("serve", "--port=0", "--tls-cert={row}/missing-cert.pem", "--tls-key={row}/missing-key.pem",
      ("missing-cert.pem", "missing-key.pem")),
    C("serve", "--node-timeout=-1", ("--node-timeout",)),
    C("serve", "--metrics-port=70000", ("--metrics-port",)),
    C("serve", "--metrics-port=abc", ("--metrics-port",)),
    C("serve", "--port=0", "--metrics-port={busy}", ("--metrics-port",)),
]

STATUS = [
    C("status", "--bogus", ("--bogus",)),
    C("status", "one", "two", ("two",)),
    C("status", "--job", ("--job",)),
    C("status", "--json=maybe", ("--json",)),
]

STACKS = [
    C("stacks", "--wait=0", ("--wait",)),
    C("stacks", "--wait=61", ("--wait",)),
    C("stacks", "--wait=abc", ("--wait",)),
    C("stacks", "--bogus", ("--bogus",)),
]

# A JOB that names no running job is not bad usage: `top`, like `status`,
# exits 1 for it (test_top.py).
TOP = [
    C("top", "--interval=0", ("--interval",)),
    C("top", "--interval=abc", ("--interval",)),
    C("top", "--interval=nan", ("--interval",)),
    C("top", "--interval=0.01", ("--interval",)),
    C("top", "--interval=1e9", ("--interval",)),
    C("top", "-n", "0", ("--iterations", "-n")),
    C("top", "--iterations=-3", ("--iterations",)),
    C("top", "-n", "1.5", ("--iterations",)),
    C("top", "--iterations=many", ("--iterations",)),
    C("top", "--once", "-n", "2", ("--once", "--iterations", "-n")),
    C("top", "--bogus", ("--bogus",)),
    C("top", "one", "two", ("two",)),
    C("top", "--job", ("--job",)),
]

DIAGNOSE = [
    C("diagnose", "{row}", "--max-ranks=-1", ("--max-ranks",)),
    C("diagnose", "{row}", "--max-ranks=abc", ("--max-ranks",)),
    C("diagnose", "{row}/no-such-dir", ("no-such-dir",)),
    C("diagnose", "{prog}", ("no NCCL lines", "prog.sh")),
]

DOCTOR = [
    C("doctor", "--nproc-per-node=0", ("--nproc-per-node",)),
    C("doctor", "--master-port=65536", ("--master-port",)),
    C("doctor", "--rdzv-endpoint=127.0.0.1:99999", ("--rdzv-endpoint",)),
    C("doctor", "--sync=checkpoints", ("--sync",)),
    C("doctor", "--checkpoint-dir", ("--checkpoint-dir",)),
]

ATTACH = [
    C("attach", "-n", "-1", ("--lines", "-n")),
    C("attach", "--lines=abc", ("--lines",)),
    C("attach", "one", "two", ("two",)),
    C("attach", "--bogus", ("--bogus",)),
]

LOGS = [
    C("logs", "--rank=-1", ("--rank",)),
    C("logs", "--rank=abc", ("--rank",)),
    C("logs", "--attempt=-2", ("--attempt",)),
    C("logs", "--follow=maybe", ("--follow",)),
    C("logs", "one", "two", ("two",)),
    C("logs", "--rank=1\n2", ("--rank",)),
]

STOP = [
    C("stop", "--bogus", ("--bogus",)),
    C("stop", "one", "two", ("two",)),
    C("stop", "--job", ("--job",)),
]

LIST = [
    C("list", "--bogus", ("--bogus",)),
    C("list", "extra", ("extra",)),
    C("list", "--json=maybe", ("--json",)),
]


# ---------------------------------------------------------------- the runner

class BadInputTest(LauncherTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # {busy}: a port that something listens on for the whole class.
        cls.busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        cls.busy.bind(("127.0.0.1", 0))
        cls.busy.listen(1)

    @classmethod
    def tearDownClass(cls):
        cls.busy.close()
        super().tearDownClass()

    def sandbox(self, name):
        """A fresh row folder: empty home, run (XDG_RUNTIME_DIR), tmp (TMPDIR),
        cwd and out (the marker's folder), and the marker scripts in bin."""
        root = self.tmp / name
        dirs = {d: root / d for d in ("home", "run", "tmp", "cwd", "out", "bin")}
        for d in dirs.values():
            d.mkdir(parents=True)
        prog = dirs["bin"] / "prog.sh"
        prog.write_text(f"#!/bin/sh\ntouch '{dirs['out']}/ran'\n")
        prog.chmod(prog.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        py = dirs["bin"] / "prog.py"
        py.write_text(f"open({str(dirs['out'] / 'ran_py')!r}, 'w').close()\n")
        return root, dirs

    def run_row(self, command, n, row):
        self.assertTrue(row.mentions, "a row says what its error line must name")
        root, dirs = self.sandbox(f"{command}-{n}")
        logs = root / "logs"
        fill = {"prog": str(dirs["bin"] / "prog.sh"), "py": str(dirs["bin"] / "prog.py"),
                "row": str(root), "logs": str(logs), "busy": str(self.busy.getsockname()[1])}
        args = [a.format(**fill) for a in row.args]
        if command == "launch":
            cmd = ([str(BIN)] + ([f"--log-dir={logs}"] if row.log_dir else []) + args
                   + ([fill["prog"]] if row.program else []))
        else:
            cmd = [str(BIN), *args]
        env = self.env({"HOME": str(dirs["home"]), "XDG_RUNTIME_DIR": str(dirs["run"]),
                        "TMPDIR": str(dirs["tmp"])})
        for k, v in row.env.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v.format(**fill)
        res = self.run_launcher(None, raw_cmd=cmd, env=env, cwd=str(dirs["cwd"]), timeout=10)
        what = res.describe()

        self.assertEqual(res.rc, 2, what)
        self.assertLess(res.elapsed, QUICK_S, what)
        self.assertEqual(res.out, "", "stdout must stay empty" + what)
        self.assertTrue(res.err.endswith("\n") and res.err.count("\n") == 1,
                        "stderr must be exactly one line" + what)
        line = res.err.rstrip("\n")
        self.assertTrue(line.startswith(PREFIX[command]) and line[len(PREFIX[command]):].strip(),
                        f"the line must start with {PREFIX[command]!r} and say something" + what)
        if row.mentions:
            self.assertTrue(any(m.lower() in line.lower() for m in row.mentions),
                            f"the line must name one of {row.mentions}" + what)

        self.assertEqual(find_marked(self.token), [], "a process outlived the rejected command" + what)
        for d in ("home", "run", "tmp", "cwd", "out"):
            self.assertEqual(sorted(os.listdir(dirs[d])), [], f"{d}/ was written to" + what)
        self.assertFalse(logs.exists(), "--log-dir was created" + what)

    def run_table(self, command, rows):
        for n, row in enumerate(rows):
            with self.subTest(command=command, row=row.label()):
                self.run_row(command, n, row)

    def test_launch_options(self):
        self.run_table("launch", LAUNCH_OPTIONS)

    def test_launch_environment(self):
        self.run_table("launch", LAUNCH_ENV)

    def test_serve(self):
        self.run_table("serve", SERVE)

    def test_status_and_stacks(self):
        self.run_table("status", STATUS)
        self.run_table("stacks", STACKS)

    def test_top(self):
        self.run_table("top", TOP)

    def test_diagnose_and_doctor(self):
        self.run_table("diagnose", DIAGNOSE)
        self.run_table("doctor", DOCTOR)

    def test_attach_logs_stop_list(self):
        self.run_table("attach", ATTACH)
        self.run_table("logs", LOGS)
        self.run_table("stop", STOP)
        self.run_table("list", LIST)

    def test_a_valid_launch_in_the_same_sandbox_does_start_and_write(self):
        """The control: what the rows check for does appear when a job runs."""
        root, dirs = self.sandbox("control")
        logs = root / "logs"
        env = self.env({"HOME": str(dirs["home"]), "XDG_RUNTIME_DIR": str(dirs["run"]),
                        "TMPDIR": str(dirs["tmp"])})
        res = self.run_launcher(None, raw_cmd=[str(BIN), f"--log-dir={logs}", "--nproc-per-node=2",
                                               "--local-ranks-filter=0,1", "--redirects=0:1,1:2",
                                               str(dirs["bin"] / "prog.sh")],
                                env=env, cwd=str(dirs["cwd"]), timeout=30)
        self.assertEqual(res.rc, 0, res.describe())
        self.assertEqual(sorted(os.listdir(dirs["out"])), ["ran"])
        self.assertTrue(logs.is_dir())
        jobs = dirs["run"] / "ddplaunch" / "jobs"
        self.assertTrue(jobs.is_dir() and os.listdir(jobs), "the job registry is not under XDG_RUNTIME_DIR")


if __name__ == "__main__":
    unittest.main()
