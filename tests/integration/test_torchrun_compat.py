"""torchrun command lines, unchanged, under ddplaunch.

Every test names, in its docstring, the torchrun behaviour it checks. Where Debian's
torchrun (torch 1.13, through tests/bench/torchrun_shim.py) supports the case, the
same command also runs under torchrun in the same test, and the two must agree on
the exit code, the number of workers and the torchrun environment each worker saw.
torch 1.13 knows only the underscore spellings, so those tests use them; the dash
spellings, argparse abbreviations and torch 2.x options are checked against
ddplaunch alone.

Known, documented differences (README, "What differs on purpose") are named in
PRESENT_IN_BOTH and RENAMED_IN_TORCH_2 below and nowhere else."""

import json
import os
import re
import signal
import subprocess
import time
import unittest

from launcher_harness import (PYTHON, REPO, WORKERS, LauncherTestCase, free_port, torch_available,
                              wait_for_file, worker)
from multinode_harness import PROBE, MultiNodeTestCase, by_node_rank
from netns_harness import NetnsTestCase

SHIM = REPO / "tests" / "bench" / "torchrun_shim.py"
ENV_PY = worker("env_dump.py")
ENV_SH = worker("env_dump.sh")
LEGACY = worker("legacy_local_rank.py")
INIT_METHODS = worker("torch_init_methods.py")
RECORD_ERROR = worker("record_error.py")
TORCH_OK = torch_available()

# What torchrun sets for every worker, compared value by value.
TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR",
                 "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "OMP_NUM_THREADS")
# Set by both, with values that differ on purpose: a free MASTER_PORT instead of
# 29500, per-launcher log paths, a fresh single-node run id instead of "none", and
# no agent store for workers to join.
PRESENT_IN_BOTH = ("MASTER_PORT", "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_RUN_ID",
                   "TORCHELASTIC_USE_AGENT_STORE")
# torch 1.13's torchrun name -> the torch 2.x name ddplaunch sets.
RENAMED_IN_TORCH_2 = {"NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING"}


def read_json_dumps(outdir):
    """{rank: dump} of rank_<R>.json files (env_dump.py, legacy_local_rank.py)."""
    dumps = {}
    for p in sorted(outdir.glob("rank_*.json")):
        with open(p) as f:
            d = json.load(f)
        dumps[int(d["env"]["RANK"])] = d
    return dumps


def read_shell_dumps(outdir):
    """{rank: {"env": ..., "argv": ...}} of env_dump.sh's env_<R>.txt / args_<R>.txt."""
    dumps = {}
    for p in sorted(outdir.glob("env_*.txt")):
        env = dict(line.split("=", 1) for line in p.read_text().splitlines() if "=" in line)
        args = (outdir / f"args_{env['RANK']}.txt").read_text().splitlines()
        dumps[int(env["RANK"])] = {"env": env, "argv": args}
    return dumps


class TorchrunParityCase(LauncherTestCase):
    """Runs one command line under ddplaunch and under torchrun and compares them."""

    def setUp(self):
        super().setUp()
        self.out_d = self.tmp / "out_ddplaunch"
        self.out_t = self.tmp / "out_torchrun"
        self.out_d.mkdir()
        self.out_t.mkdir()

    def torchrun(self, args, *, env_extra=None, as_launch=False, timeout=60):
        cmd = [PYTHON, str(SHIM)] + (["--as-launch"] if as_launch else []) + [str(a) for a in args]
        t0 = time.monotonic()
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout, env=self.env(env_extra), cwd=str(self.tmp),
                           start_new_session=True)
        return r, time.monotonic() - t0

    def ddplaunch(self, args, *, env_extra=None, timeout=60):
        # job_id=False: the command line is the user's, --rdzv-id included or not
        return self.run_launcher(args, env_extra=env_extra, job_id=False, timeout=timeout)

    def compare(self, d_dumps, t_dumps, nworkers, ignore=()):
        self.assertEqual(sorted(t_dumps), list(range(nworkers)), "torchrun's workers")
        self.assertEqual(sorted(d_dumps), sorted(t_dumps), "the same workers under both launchers")
        outer = set(self.env())
        for rank in t_dumps:
            e_d, e_t = d_dumps[rank]["env"], t_dumps[rank]["env"]
            for name in TORCHRUN_VARS:
                if name not in ignore:
                    self.assertEqual(e_d.get(name), e_t.get(name), f"{name} of rank {rank}")
            for name in PRESENT_IN_BOTH:
                self.assertIn(name, e_d, f"rank {rank}")
                self.assertIn(name, e_t, f"rank {rank}")
            added_by_torchrun = set(e_t) - outer
            missing = {n for n in added_by_torchrun if n not in e_d and RENAMED_IN_TORCH_2.get(n) not in e_d}
            self.assertEqual(missing, set(), f"variables torchrun gave rank {rank} and ddplaunch did not")

    def both_succeed(self, args, program, nworkers, read=read_json_dumps, ignore=(), env_extra=None):
        """args: launcher options common to both; program(outdir) -> PROGRAM ARGS."""
        res = self.ddplaunch(list(args) + program(self.out_d), env_extra=env_extra)
        self.assertEqual(res.rc, 0, res.describe())
        r, _ = self.torchrun(list(args) + program(self.out_t), env_extra=env_extra)
        self.assertEqual(r.returncode, 0, f"torchrun failed:\n{r.stderr[-3000:]}")
        d_dumps, t_dumps = read(self.out_d), read(self.out_t)
        self.compare(d_dumps, t_dumps, nworkers, ignore)
        self.assert_no_leftovers()
        return d_dumps, t_dumps


@unittest.skipUnless(TORCH_OK, "/usr/bin/python3 (PYTHON_EXEC) cannot import torch")
class TorchrunParityTest(TorchrunParityCase):

    def test_single_node_workers_and_environment(self):
        """`torchrun --nproc_per_node=3 train.py`: three workers with torchrun's environment."""
        self.both_succeed(["--nproc_per_node=3", "--rdzv_id=parity"], lambda o: [ENV_PY, o], 3)

    def test_defaults_start_one_worker_and_leave_openmp_alone(self):
        """`torchrun train.py`: one worker; OMP_NUM_THREADS is set only for several workers."""
        d, t = self.both_succeed([], lambda o: [ENV_PY, o], 1)
        self.assertNotIn("OMP_NUM_THREADS", d[0]["env"])

    def test_role_restarts_monitor_interval_and_start_method(self):
        """--role names ROLE_NAME, --max_restarts reaches TORCHELASTIC_MAX_RESTARTS;
        --monitor_interval and --start_method are accepted."""
        d, _ = self.both_succeed(["--nproc_per_node=2", "--role=trainer", "--max_restarts=2",
                                  "--monitor_interval=1", "--start_method=spawn", "--rdzv_id=r1"],
                                 lambda o: [ENV_PY, o], 2)
        self.assertEqual(d[1]["env"]["ROLE_NAME"], "trainer")
        self.assertEqual(d[1]["env"]["TORCHELASTIC_MAX_RESTARTS"], "2")
        self.assertEqual(d[1]["env"]["TORCHELASTIC_RUN_ID"], "r1")

    def test_nproc_per_node_auto_without_a_gpu_is_one_worker_per_cpu(self):
        """--nproc_per_node=auto: one worker per CPU when no GPU is visible."""
        cpus = len(os.sched_getaffinity(0))
        self.both_succeed(["--nproc_per_node=auto"], lambda o: [ENV_PY, o], cpus,
                          env_extra={"CUDA_VISIBLE_DEVICES": ""})

    def test_module(self):
        """-m: the program is a module, run as `python -u -m MODULE`."""
        d, t = self.both_succeed(["--nproc_per_node=2", "-m"], lambda o: ["env_dump", o], 2,
                                 env_extra={"PYTHONPATH": str(WORKERS)})
        self.assertEqual(d[0]["spec_name"], "env_dump")
        self.assertEqual(t[0]["spec_name"], "env_dump")

    def test_no_python_runs_the_program_as_is(self):
        """--no_python: the program runs directly, with its arguments."""
        d, t = self.both_succeed(["--nproc_per_node=2", "--no_python"], lambda o: [ENV_SH, o, "a b", "c"], 2,
                                 read=read_shell_dumps)
        self.assertEqual(d[1]["argv"], ["a b", "c"])
        self.assertEqual(d[1]["argv"], t[1]["argv"])

    def test_run_path_runs_the_script_with_runpy(self):
        """--run_path: the script runs through runpy.run_path as __main__, argv[0] the script."""
        d, t = self.both_succeed(["--nproc_per_node=2", "--run_path"], lambda o: [ENV_PY, o, "x"], 2)
        for dumps in (d, t):
            self.assertEqual(dumps[0]["argv"], [str(ENV_PY), str(self.out_d if dumps is d else self.out_t), "x"])
            self.assertIsNone(dumps[0]["spec_name"])  # run_path: no module spec, unlike -m

    def test_elastic_node_range_started_on_one_node_runs_there(self):
        """--nnodes=1:2 with the c10d backend: one node waits last_call_timeout for a second,
        then runs alone. (torchrun names node 0 by its host name, ddplaunch by the address the
        coordinator sees it at: MASTER_ADDR is not compared.)"""
        def args():
            return ["--nnodes=1:2", "--rdzv_backend=c10d", f"--rdzv_endpoint=localhost:{free_port()}",
                    "--rdzv_conf=last_call_timeout=1", "--nproc_per_node=2", "--rdzv_id=elastic1"]
        res = self.ddplaunch(args() + [ENV_PY, self.out_d])
        self.assertEqual(res.rc, 0, res.describe())
        r, _ = self.torchrun(args() + [ENV_PY, self.out_t])
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.compare(read_json_dumps(self.out_d), read_json_dumps(self.out_t), 2, ignore=("MASTER_ADDR",))
        self.assertEqual(read_json_dumps(self.out_d)[1]["env"]["GROUP_WORLD_SIZE"], "1")
        self.assert_no_leftovers()

    def test_torch_distributed_launch_scripts_get_local_rank_as_an_argument(self):
        """`python -m torch.distributed.launch --nproc_per_node=2 train.py` passes
        --local_rank=N; ddplaunch does so with --legacy-local-rank-arg."""
        res = self.ddplaunch(["--legacy-local-rank-arg", "--nproc_per_node=2", LEGACY, self.out_d, "extra"])
        self.assertEqual(res.rc, 0, res.describe())
        r, _ = self.torchrun(["--nproc_per_node=2", LEGACY, self.out_t, "extra"], as_launch=True)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        d, t = read_json_dumps(self.out_d), read_json_dumps(self.out_t)
        self.compare(d, t, 2)
        for rank in (0, 1):
            self.assertEqual(d[rank]["local_rank_arg"], rank)
            self.assertEqual(d[rank]["local_rank_arg"], t[rank]["local_rank_arg"])
            self.assertEqual(d[rank]["argv"][1:], [f"--local_rank={rank}", str(self.out_d), "extra"])
            self.assertEqual(t[rank]["argv"][1:], [f"--local_rank={rank}", str(self.out_t), "extra"])
        self.assert_no_leftovers()

    def test_the_same_script_without_the_argument_keeps_its_default(self):
        """Under torchrun (and ddplaunch by default) no --local_rank argument is passed."""
        self.both_succeed(["--nproc_per_node=2"], lambda o: [LEGACY, o], 2)
        self.assertEqual(read_json_dumps(self.out_d)[1]["local_rank_arg"], -1)

    def test_init_process_group_with_env_and_tcp_init_methods(self):
        """init_method="env://" and "tcp://MASTER_ADDR:MASTER_PORT" both rendezvous, and
        torch.distributed.is_torchelastic_launched() is true in the workers."""
        for method in ("env", "tcp"):
            res = self.ddplaunch(["--nproc_per_node=2", f"--master_port={free_port()}", INIT_METHODS, method],
                                 env_extra={"GLOO_SOCKET_IFNAME": "lo"})
            self.assertEqual(res.rc, 0, res.describe())
            r, _ = self.torchrun(["--nproc_per_node=2", f"--master_port={free_port()}", INIT_METHODS, method],
                                 env_extra={"GLOO_SOCKET_IFNAME": "lo"})
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            ours = sorted(line for lines in res.out_by_rank().values() for line in lines)
            # torchrun's workers share one pipe, so their lines may run into each other
            theirs = sorted(re.findall(r"rank \d+ world \d+ init \w+ sum \S+ elastic (?:True|False)", r.stdout))
            self.assertEqual(ours, [f"rank {k} world 2 init {method} sum 1 elastic True" for k in (0, 1)])
            self.assertEqual(ours, theirs)
        self.assert_no_leftovers()

    def test_a_failure_ends_in_torchruns_root_cause_block(self):
        """A failing @record script: torchrun's ChildFailedError block ("Root Cause (first
        observed failure)", time, host, rank, exitcode, error_file, traceback) names the same
        rank; both exit 1 (the rank's own exit code, under ddplaunch)."""
        res = self.ddplaunch(["--nproc_per_node=2", RECORD_ERROR, "1", "disk full at step 7"], timeout=60)
        r, _ = self.torchrun(["--nproc_per_node=2", f"--master_port={free_port()}", RECORD_ERROR, "1",
                              "disk full at step 7"])
        self.assertEqual(res.rc, 1, res.describe())
        self.assertEqual(r.returncode, 1, r.stderr[-3000:])

        def block(text):
            at = text.find("Root Cause (first observed failure):")
            self.assertGreaterEqual(at, 0, text[-3000:])
            fields = dict(re.findall(r"^\s+(time|host|rank|exitcode|error_file|traceback)\s*: (.*)$",
                                     text[at:], re.M))
            return fields, text[at:]
        ours, ours_text = block(res.err)
        theirs, _ = block(r.stderr)
        self.assertIn(f"{RECORD_ERROR} FAILED", res.err)
        self.assertEqual(ours["rank"], "1 (local_rank: 1)")
        self.assertEqual(ours["rank"], theirs["rank"])
        self.assertEqual(ours["exitcode"].split(" ")[0], theirs["exitcode"].split(" ")[0])
        self.assertEqual(set(ours), {"time", "host", "rank", "exitcode", "error_file", "traceback"})
        self.assertEqual(set(ours), set(theirs))
        self.assertTrue(os.path.isfile(ours["error_file"]), ours)
        self.assertIn("RuntimeError: disk full at step 7", ours_text)
        self.assert_no_leftovers()


class TorchrunCommandLineTest(LauncherTestCase):
    """torch 2.x options and spellings that Debian's torch 1.13 lacks: ddplaunch alone."""

    def test_dash_spellings_and_argparse_abbreviations(self):
        """`--nproc-per-node`, `--redirect=3` (an abbreviation of --redirects) and `-t 3` run
        as under torchrun 2.x."""
        res = self.run_launcher(["--nproc=2", "--redirect=3", "-t", "3", "--max-res", "0", ENV_PY,
                                 self.outdir])
        self.assertEqual(res.rc, 0, res.describe())
        self.assertEqual(sorted(self.read_env_dumps()), [0, 1])
        self.assertNotIn("env_dump rank", res.out)  # redirected: log files only
        self.assertIn("env_dump rank 1 ok", (self.rank_dir(1) / "stdout.log").read_text())

    def test_monitor_interval_and_start_method_say_why_at_debug_level(self):
        """Options with nothing to do under ddplaunch are accepted and explained once."""
        res = self.run_launcher(["--monitor-interval=1", "--start-method=fork", "--log-level=debug", ENV_PY,
                                 self.outdir])
        self.assertEqual(res.rc, 0, res.describe())
        self.assertEqual(res.err.count("--monitor-interval=1 has no effect"), 1, res.describe())
        self.assertEqual(res.err.count("--start-method=fork has no effect"), 1, res.describe())

    def test_log_line_prefix_template(self):
        """TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE replaces the console prefix."""
        res = self.run_launcher(["--nproc-per-node=2", "--role=trainer", "--no-python", "sh", "-c",
                                 "echo hello"],
                                env_extra={"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[${role_name}${local_rank}]:"})
        self.assertEqual(res.rc, 0, res.describe())
        self.assertEqual(sorted(l for l in res.out.splitlines()), ["[trainer0]:hello", "[trainer1]:hello"])

    def test_duplicate_stdout_and_stderr_filters(self):
        """--duplicate-stdout-filters / --duplicate-stderr-filters copy matching lines of every rank
        into attempt_<k>/filtered_stdout.log and filtered_stderr.log."""
        script = "echo loss 1.5; echo acc 0.5; echo 'nccl, warn' >&2; echo other >&2"
        res = self.run_launcher(["--nproc-per-node=2", "--duplicate-stdout-filters=loss",
                                 "--duplicate-stderr-filters=nccl,,", "--no-python", "sh", "-c", script])
        self.assertEqual(res.rc, 0, res.describe())
        out = sorted((self.attempt_dir() / "filtered_stdout.log").read_text().splitlines())
        err = sorted((self.attempt_dir() / "filtered_stderr.log").read_text().splitlines())
        self.assertEqual(out, ["[0:0] loss 1.5", "[0:1] loss 1.5"])
        self.assertEqual(err, ["[0:0] nccl, warn", "[0:1] nccl, warn"])

    def test_virtual_local_rank(self):
        """--virtual-local-rank: LOCAL_RANK=0 and only the rank's own GPU visible."""
        res = self.run_launcher(["--nproc-per-node=2", "--virtual-local-rank", ENV_PY, self.outdir],
                                env_extra={"CUDA_VISIBLE_DEVICES": "6,7"})
        self.assertEqual(res.rc, 0, res.describe())
        dumps = self.read_env_dumps(2)
        for rank, device in ((0, "6"), (1, "7")):
            self.assertEqual(dumps[rank]["env"]["LOCAL_RANK"], "0")
            self.assertEqual(dumps[rank]["env"]["CUDA_VISIBLE_DEVICES"], device)

    def test_shutdown_timeout_is_the_shutdown_grace(self):
        """torch 2.9's --shutdown-timeout sets how long a stopped worker has before SIGKILL."""
        launch = self.start(["--nproc-per-node=1", "--shutdown-timeout=1", worker("ignore_term.py"),
                             self.outdir])
        self.assertTrue(wait_for_file(self.outdir / "ready_0", 15))
        t0 = time.monotonic()
        os.kill(launch.pid, signal.SIGTERM)
        res = self.finish(launch, timeout=15)
        self.assertEqual(res.rc, 128 + signal.SIGTERM, res.describe())
        self.assertLess(time.monotonic() - t0, 4.0, res.describe())
        self.assert_no_leftovers()


class TorchrunUsageTest(LauncherTestCase):
    """Bad values of the new options, and every combination torchrun refuses: one
    line, exit 2, nothing spawned."""

    def refused(self, args, *mentions):
        res = self.run_launcher(list(args) + [ENV_PY, self.outdir])
        self.assert_usage_error(res, *mentions)

    def test_no_python_with_module(self):
        self.refused(["--no-python", "-m"], "--no-python")

    def test_elastic_ranges(self):
        self.refused(["--nnodes=3:1"], "--nnodes")
        self.refused(["--nnodes=0:2"], "--nnodes")
        self.refused(["--nnodes=1:x"], "--nnodes")

    def test_start_method_event_handler_backend_and_numa_choices(self):
        self.refused(["--start-method=thread"], "--start-method")
        self.refused(["--event-log-handler=file"], "--event-log-handler")
        self.refused(["--rdzv-backend=zookeeper"], "--rdzv-backend")
        self.refused(["--numa-binding=anywhere"], "--numa-binding")

    def test_what_needs_a_missing_piece_is_refused_by_name(self):
        self.refused(["--rdzv-backend=etcd", "--rdzv-endpoint=etcd:2379", "--nnodes=2"], "etcd")
        self.refused(["--logs-specs=my_plugin"], "--logs-specs")
        res = self.run_launcher(["--numa-binding=node", ENV_PY, self.outdir],
                                env_extra={"CUDA_VISIBLE_DEVICES": ""})
        self.assert_usage_error(res, "--numa-binding")

    def test_bad_numbers_and_lists(self):
        self.refused(["--monitor-interval=0"], "--monitor-interval")
        self.refused(["--monitor-interval=abc"], "--monitor-interval")
        self.refused(["--signals-to-handle=SIGKILL"], "SIGKILL")
        self.refused(["--signals-to-handle=SIGTERM,SIGNOPE"], "SIGNOPE")
        self.refused(["--shutdown-timeout=-1"], "--shutdown")
        self.refused(["--rdzv-conf=last_call_timeout=-1", "--nnodes=1:2", "--rdzv-endpoint=127.0.0.1:1"],
                     "last_call_timeout")

    def test_ambiguous_abbreviation(self):
        self.refused(["--d=x"], "ambiguous", "--duplicate-stdout-filters")

    def test_run_path_of_a_missing_script(self):
        res = self.run_launcher(["--run-path", str(self.tmp / "missing.py")])
        self.assert_usage_error(res, "missing.py")


class HandStartedNodesTest(MultiNodeTestCase):
    """Nodes started by hand the torchrun way, with no --rdzv-id: they agree on the job."""

    def by_hand(self, node_rank, nnodes="2", nproc=2, conf=None, extra=()):
        args = [f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", f"--rdzv-endpoint={self.endpoint()}",
                *extra]
        if node_rank is not None:
            args.append(f"--node-rank={node_rank}")
        if conf:
            args.append(f"--rdzv-conf={conf}")
        return self.start(args + [PROBE, str(self.outdir)], env=self.mn_env(), job_id=False)

    def check_one_job(self, launches, nnodes, nproc):
        results = self.finish_all(launches, timeout=30)
        desc = self.describe_all(results)
        for res in results:
            self.assertEqual(res.rc, 0, desc)
        dumps = self.read_probes(nnodes * nproc)
        nodes = self.check_layout(dumps, nnodes, nproc)
        self.assertEqual({d["env"]["TORCHELASTIC_RUN_ID"] for d in dumps.values()}, {"none"})
        # one job, but each node's run has a log folder of its own
        folders = sorted(p.name for p in self.log_dir.iterdir())
        self.assertEqual(len(folders), nnodes, folders)
        self.assertTrue(all(f.startswith("none-") for f in folders), folders)
        self.assert_no_leftovers()
        return nodes, results

    def test_explicit_node_ranks_without_rdzv_id_meet(self):
        """torchrun's docs: `--nnodes=2 --node-rank=R --rdzv-endpoint=HOST:PORT` on each node."""
        _, results = self.check_one_job([self.by_hand(0), self.by_hand(1)], 2, 2)
        self.assertIn("the job is open to anyone who can reach", results[0].err)

    def test_node_ranks_in_arrival_order_without_rdzv_id(self):
        self.check_one_job([self.by_hand(None), self.by_hand(None)], 2, 2)

    def test_two_elastic_agents_without_ranks_form_one_world(self):
        """--nnodes=1:2 on two nodes: the rendezvous closes as soon as both joined."""
        t0 = time.monotonic()
        self.check_one_job([self.by_hand(None, nnodes="1:2"), self.by_hand(None, nnodes="1:2")], 2, 2)
        self.assertLess(time.monotonic() - t0, 20, "waited for the 30 s last call although MAX joined")

    def test_mismatched_node_counts_are_refused(self):
        launches = [self.by_hand(0, nnodes="1:2", conf="join_timeout=5"),
                    self.by_hand(1, nnodes="2", conf="join_timeout=5")]
        results = self.finish_all(launches, timeout=30)
        self.assertIn("this agent expects 2 node(s), the job has 1:2", results[1].err, self.describe_all(results))
        self.assert_no_leftovers()


class HandStartedNodesNetnsTest(NetnsTestCase):
    """The same, each node in its own network namespace."""

    def meet(self, explicit_ranks):
        nnodes, nproc = 2, 2
        launches = []
        for k in range(nnodes):
            args = [f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", f"--rdzv-endpoint={self.endpoint()}"]
            args += [f"--node-rank={k}"] if explicit_ranks else []
            args += [PROBE, str(self.outdir)]
            launches.append(self.start(None, env=self.mn_env(),
                                       raw_cmd=self.wrap(k) + self.command(args, job_id=False)))
        results = self.finish_all(launches, timeout=30)
        desc = self.describe_all(results)
        for res in results:
            self.assertEqual(res.rc, 0, desc)
        dumps = self.read_probes(nnodes * nproc)
        nodes = self.check_layout(dumps, nnodes, nproc, job_id="none")
        return nodes, results, dumps

    def test_two_namespaces_with_node_ranks_and_without_rdzv_id_meet(self):
        _, results, _ = self.meet(explicit_ranks=True)
        self.check_console(results, 2)
        self.assert_no_leftovers()

    def test_two_namespaces_without_node_ranks_or_rdzv_id_meet(self):
        # ranks in arrival order: either namespace may be node 0; one job, one MASTER_ADDR
        nodes, _, dumps = self.meet(explicit_ranks=False)
        self.assertEqual(sorted(nodes), [0, 1])
        self.assertIn(dumps[0]["env"]["MASTER_ADDR"], self.addr)
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
