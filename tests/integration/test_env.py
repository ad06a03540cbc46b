"""Worker environment, flag spellings, PET_ defaults and how PROGRAM is run."""

import json
import os
import platform
import re
import stat
import subprocess
import unittest
from pathlib import Path

from launcher_harness import (LauncherTestCase, PYTHON, WORKERS, base_env, free_port, read_stat,
                              worker)

ENV_PY = worker("env_dump.py")
ENV_SH = worker("env_dump.sh")
OPENBLAS_PY = worker("openblas_core.py")
OPENBLAS_RE = re.compile(r"^coretype=(\S+) core=(\S+)$")


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def same_file(a, b):
    return os.path.realpath(a) == os.path.realpath(b)


class EnvTest(LauncherTestCase):

    def run_ok(self, args, n=None, **kw):
        res = self.run_launcher(args, **kw)
        self.assertEqual(res.rc, 0, res.describe())
        return res, self.read_env_dumps(n)

    def test_torchrun_env_vars_four_ranks(self):
        res, dumps = self.run_ok(["--nproc-per-node=4", ENV_PY, self.outdir], n=4)
        ports = set()
        for r, d in dumps.items():
            e = d["env"]
            with self.subTest(rank=r):
                self.assertEqual(e["RANK"], str(r))
                self.assertEqual(e["LOCAL_RANK"], str(r))
                self.assertEqual(e["WORLD_SIZE"], "4")
                self.assertEqual(e["LOCAL_WORLD_SIZE"], "4")
                self.assertEqual(e["GROUP_RANK"], "0")
                self.assertEqual(e["GROUP_WORLD_SIZE"], "1")
                self.assertEqual(e["ROLE_RANK"], str(r))
                self.assertEqual(e["ROLE_NAME"], "default")
                self.assertEqual(e["ROLE_WORLD_SIZE"], "4")
                self.assertEqual(e["MASTER_ADDR"], "127.0.0.1")
                port = int(e["MASTER_PORT"])
                self.assertTrue(1 <= port <= 65535, port)
                self.assertNotEqual(port, 0)
                ports.add(port)
                self.assertEqual(e["TORCHELASTIC_RESTART_COUNT"], "0")
                self.assertEqual(e["TORCHELASTIC_MAX_RESTARTS"], "0")
                self.assertEqual(e["TORCHELASTIC_RUN_ID"], self.job_id)
                self.assertEqual(e["TORCHELASTIC_USE_AGENT_STORE"], "False")
                self.assertEqual(e["OMP_NUM_THREADS"], "1")
                self.assertEqual(e["DDPLAUNCH_JOB_ID"], self.job_id)
                self.assertEqual(e["DDPLAUNCH_ATTEMPT"], "0")
                rank_dir = self.rank_dir(r)
                self.assertTrue(same_file(e["DDPLAUNCH_RANK_LOG_DIR"], rank_dir),
                                (e["DDPLAUNCH_RANK_LOG_DIR"], str(rank_dir)))
                self.assertTrue(same_file(e["TORCHELASTIC_ERROR_FILE"], rank_dir / "error.json"),
                                e["TORCHELASTIC_ERROR_FILE"])
                self.assertTrue(os.path.isdir(e["DDPLAUNCH_RANK_LOG_DIR"]))
        self.assertEqual(len(ports), 1, f"all ranks must share MASTER_PORT: {ports}")
        self.assertEqual(len({d["pid"] for d in dumps.values()}), 4)

    def test_worker_is_its_own_process_group_leader(self):
        launch = self.start(["--nproc-per-node=2", worker("sleeper.sh"), self.outdir])
        self.wait_for_files(["ready_0", "ready_1"])
        launcher_pgid = read_stat(launch.pid)[2]
        for r in range(2):
            pid = self.read_int(f"pid_{r}")
            pgid = read_stat(pid)[2]
            self.assertEqual(pgid, pid, f"rank {r}: worker pgid must equal its pid")
            self.assertNotEqual(pgid, launcher_pgid)
            child = self.read_int(f"child_{r}")
            self.assertEqual(read_stat(child)[2], pid, "worker child stays in worker's group")
        os.kill(launch.pid, 15)
        res = self.finish(launch, 15)
        self.assertEqual(res.rc, 128 + 15, res.describe())

    def test_user_env_kept_and_omp_respected(self):
        odd = "va lue=with spaces;and 'quotes' \"dq\" $HOME"
        res, dumps = self.run_ok(["--nproc-per-node=2", ENV_PY, self.outdir], n=2,
                                 env_extra={"DDPT_USER_VAR": odd, "OMP_NUM_THREADS": "7",
                                            "DDPT_EMPTY": ""})
        for d in dumps.values():
            self.assertEqual(d["env"]["DDPT_USER_VAR"], odd)
            self.assertEqual(d["env"]["DDPT_EMPTY"], "")
            self.assertEqual(d["env"]["OMP_NUM_THREADS"], "7")
            self.assertEqual(d["env"]["DDPT_TOKEN"], self.token)
            self.assertEqual(d["env"]["PATH"], os.environ.get("PATH"))

    def test_ddplaunchs_own_grpc_resolver_choice_stays_out_of_workers(self):
        # ddplaunch makes its gRPC resolve names through the system (GRPC_DNS_RESOLVER=native)
        # for itself only; a user's own value reaches the workers unchanged
        _, dumps = self.run_ok(["--nproc-per-node=1", ENV_PY, self.outdir], n=1, env=self.env(drop=["GRPC_DNS_RESOLVER"]))
        self.assertNotIn("GRPC_DNS_RESOLVER", dumps[0]["env"])
        for f in self.outdir.iterdir():
            f.unlink()
        _, dumps = self.run_ok(["--nproc-per-node=1", ENV_PY, self.outdir], n=1,
                               env_extra={"GRPC_DNS_RESOLVER": "ares"})
        self.assertEqual(dumps[0]["env"]["GRPC_DNS_RESOLVER"], "ares")

    def test_default_nproc_is_one(self):
        res, dumps = self.run_ok([ENV_PY, self.outdir], n=1)
        self.assertEqual(dumps[0]["env"]["WORLD_SIZE"], "1")
        self.assertEqual(dumps[0]["env"]["LOCAL_WORLD_SIZE"], "1")

    def test_pet_nproc_per_node_default(self):
        res, dumps = self.run_ok([ENV_PY, self.outdir], n=3,
                                 env_extra={"PET_NPROC_PER_NODE": "3"})
        self.assertEqual(dumps[2]["env"]["WORLD_SIZE"], "3")

    def test_cli_overrides_pet_env(self):
        res, dumps = self.run_ok(["--nproc-per-node=2", ENV_PY, self.outdir], n=2,
                                 env_extra={"PET_NPROC_PER_NODE": "3"})
        self.assertEqual(dumps[1]["env"]["WORLD_SIZE"], "2")

    def test_pet_master_port_and_role(self):
        port = free_port()
        res, dumps = self.run_ok([ENV_PY, self.outdir], n=1,
                                 env_extra={"PET_MASTER_PORT": str(port), "PET_ROLE": "pettrainer"})
        self.assertEqual(dumps[0]["env"]["MASTER_PORT"], str(port))
        self.assertEqual(dumps[0]["env"]["ROLE_NAME"], "pettrainer")

    def test_dash_spellings(self):
        port = free_port()
        res, dumps = self.run_ok(
            ["--nproc-per-node=2", f"--master-port={port}", "--master-addr=localhost",
             "--max-restarts=3", "--role=trainer", "--nnodes=1", "--node-rank=0",
             "--shutdown-grace=2", "--tee=3", "--local-ranks-filter=0,1",
             ENV_PY, self.outdir], n=2)
        for r, d in dumps.items():
            e = d["env"]
            self.assertEqual(e["MASTER_PORT"], str(port))
            self.assertEqual(e["MASTER_ADDR"], "localhost")
            self.assertEqual(e["TORCHELASTIC_MAX_RESTARTS"], "3")
            self.assertEqual(e["ROLE_NAME"], "trainer")
            self.assertEqual(e["ROLE_RANK"], str(r))
            self.assertEqual(e["GROUP_RANK"], "0")

    def test_standalone_accepted(self):
        res, dumps = self.run_ok(["--standalone", "--nproc-per-node=2", ENV_PY, self.outdir], n=2)
        for r, d in dumps.items():
            self.assertEqual(d["env"]["WORLD_SIZE"], "2")
            self.assertEqual(d["env"]["GROUP_RANK"], "0")
            self.assertTrue(d["env"]["MASTER_ADDR"])
            self.assertTrue(1 <= int(d["env"]["MASTER_PORT"]) <= 65535)

    def test_stacked_single_node_endpoint_on_a_free_port(self):
        # torchrun's documented way to keep single-node jobs on one machine apart,
        # with and without --nnodes (scripts in the wild leave it out).
        for cmd in (["--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0", "--nnodes=1", "--nproc-per-node=2"],
                    ["--rdzv_backend", "c10d", "--rdzv_endpoint", "localhost:0", "--nproc_per_node=2"]):
            with self.subTest(cmd=cmd):
                res, dumps = self.run_ok(cmd + [ENV_PY, self.outdir], n=2)
                for d in dumps.values():
                    self.assertEqual(d["env"]["WORLD_SIZE"], "2")
                    self.assertTrue(1 <= int(d["env"]["MASTER_PORT"]) <= 65535)
        res = self.run_launcher(["--nnodes=2", "--node-rank=0", "--rdzv-endpoint=localhost:0", "--nproc-per-node=1",
                                 ENV_PY, self.outdir])
        self.assertEqual(res.rc, 2, res.describe())
        self.assertIn("port 0 (any free port) works only for a single-node job", res.err)

    def test_underscore_spellings(self):
        port = free_port()
        cmd = [f"--log_dir={self.log_dir}", f"--rdzv_id={self.job_id}",
               "--nproc_per_node=2", f"--master_port={port}", "--master_addr=localhost",
               "--max_restarts=2", "--nnodes=1", "--node_rank=0", "--shutdown_grace=2",
               "--local_ranks_filter=1", ENV_PY, self.outdir]
        res = self.run_launcher(cmd, log_dir=False, job_id=False)
        self.assertEqual(res.rc, 0, res.describe())
        dumps = self.read_env_dumps(2)
        for d in dumps.values():
            self.assertEqual(d["env"]["MASTER_PORT"], str(port))
            self.assertEqual(d["env"]["MASTER_ADDR"], "localhost")
            self.assertEqual(d["env"]["TORCHELASTIC_MAX_RESTARTS"], "2")
            self.assertEqual(d["env"]["TORCHELASTIC_RUN_ID"], self.job_id)
        self.assertTrue((self.rank_dir(1) / "stdout.log").is_file())
        # --local_ranks_filter=1 took effect: rank 0's line not on the console
        self.assertNotIn(0, res.out_by_rank(), res.describe())
        self.assertIn(1, res.out_by_rank(), res.describe())

    def test_space_separated_values(self):
        port = free_port()
        res = self.run_launcher(["--log-dir", str(self.log_dir), "--rdzv-id", self.job_id,
                                 "--nproc-per-node", "2", "--master-port", str(port),
                                 ENV_PY, self.outdir], log_dir=False, job_id=False)
        self.assertEqual(res.rc, 0, res.describe())
        dumps = self.read_env_dumps(2)
        self.assertEqual(dumps[0]["env"]["MASTER_PORT"], str(port))
        self.assertTrue((self.rank_dir(0) / "stdout.log").is_file())

    def test_nproc_cpu(self):
        counts = {os.cpu_count(), len(os.sched_getaffinity(0))}
        if max(counts) > 64:
            self.skipTest("too many CPUs for this test")
        res, dumps = self.run_ok(["--nproc-per-node=cpu", ENV_PY, self.outdir])
        self.assertIn(len(dumps), counts, res.describe())
        self.assertEqual(sorted(dumps), list(range(len(dumps))))
        self.assertEqual(dumps[0]["env"]["WORLD_SIZE"], str(len(dumps)))

    def test_nproc_auto_without_gpu(self):
        if os.path.exists("/dev/nvidia0"):
            self.skipTest("GPU present; auto would pick the GPU count")
        counts = {os.cpu_count(), len(os.sched_getaffinity(0))}
        if max(counts) > 64:
            self.skipTest("too many CPUs for this test")
        res, dumps = self.run_ok(["--nproc-per-node=auto", ENV_PY, self.outdir])
        self.assertIn(len(dumps), counts, res.describe())

    def test_generated_job_id_is_unique_and_used(self):
        ids = []
        for _ in range(2):
            for p in self.outdir.iterdir():
                p.unlink()
            res = self.run_launcher([ENV_PY, self.outdir], job_id=False)
            self.assertEqual(res.rc, 0, res.describe())
            e = self.read_env_dumps(1)[0]["env"]
            self.assertTrue(e["TORCHELASTIC_RUN_ID"])
            self.assertEqual(e["DDPLAUNCH_JOB_ID"], e["TORCHELASTIC_RUN_ID"])
            ids.append(e["TORCHELASTIC_RUN_ID"])
            self.assertTrue((self.log_dir / ids[-1] / "attempt_0" / "rank_0" / "stdout.log")
                            .is_file())
        self.assertNotEqual(ids[0], ids[1], "generated job ids must differ between runs")
        self.assertEqual(sorted(os.listdir(self.log_dir)), sorted(ids))

    def test_default_log_dir_under_tmpdir(self):
        res = self.run_launcher([ENV_PY, self.outdir], log_dir=False)
        self.assertEqual(res.rc, 0, res.describe())
        path = self.tmp / "ddplaunch-logs" / self.job_id / "attempt_0" / "rank_0" / "stdout.log"
        self.assertTrue(path.is_file(), f"{path} missing{res.describe()}")
        self.assertIn("env_dump rank 0 ok", path.read_text())

    def test_py_program_runs_under_python_exec_unbuffered(self):
        res, dumps = self.run_ok(["--nproc-per-node=2", ENV_PY, self.outdir, "a b", "--flag"], n=2)
        for d in dumps.values():
            self.assertTrue(same_file(d["executable"], PYTHON), d["executable"])
            self.assertIn("-u", d["orig_argv"], d["orig_argv"])
            self.assertIsNone(d["spec_name"])
            self.assertEqual(d["argv"][1:], [str(self.outdir), "a b", "--flag"])
            self.assertTrue(same_file(d["argv"][0], ENV_PY))

    def test_py_program_uses_python3_from_path_without_python_exec(self):
        bindir = self.tmp / "bin"
        bindir.mkdir()
        wrapper = bindir / "python3"
        wrapper.write_text(f"#!/bin/sh\nDDPT_VIA_PATH_PYTHON=1 exec {PYTHON} \"$@\"\n")
        wrapper.chmod(0o755)
        env = self.env({"PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"},
                       drop=("PYTHON_EXEC",))
        res = self.run_launcher([ENV_PY, self.outdir], env=env)
        self.assertEqual(res.rc, 0, res.describe())
        d = self.read_env_dumps(1)[0]
        self.assertEqual(d["env"].get("DDPT_VIA_PATH_PYTHON"), "1")
        self.assertIn("-u", d["orig_argv"])

    def test_options_after_program_belong_to_program(self):
        res, dumps = self.run_ok([ENV_PY, self.outdir, "--nproc-per-node=3", "-m", "x",
                                  "--no-python"], n=1)
        self.assertEqual(dumps[0]["argv"][1:],
                         [str(self.outdir), "--nproc-per-node=3", "-m", "x", "--no-python"])
        self.assertEqual(dumps[0]["env"]["WORLD_SIZE"], "1")

    def test_module_mode(self):
        res, dumps = self.run_ok(["--nproc-per-node=2", "-m", "env_dump", self.outdir, "x"], n=2,
                                 env_extra={"PYTHONPATH": str(WORKERS)})
        for d in dumps.values():
            self.assertEqual(d["spec_name"], "env_dump")
            oa = d["orig_argv"]
            self.assertTrue(same_file(d["executable"], PYTHON), d["executable"])
            self.assertIn("-u", oa)
            self.assertIn("-m", oa)
            self.assertEqual(oa[oa.index("-m") + 1], "env_dump")
            self.assertEqual(d["argv"][1:], [str(self.outdir), "x"])

    def test_no_python_runs_py_program_directly(self):
        marker_python = self.tmp / "marker_python"
        marker_python.write_text(f"#!/bin/sh\nDDPT_VIA_PYTHON_EXEC=1 exec {PYTHON} \"$@\"\n")
        marker_python.chmod(0o755)
        res = self.run_launcher(["--no-python", ENV_PY, self.outdir],
                                env_extra={"PYTHON_EXEC": str(marker_python)})
        self.assertEqual(res.rc, 0, res.describe())
        d = self.read_env_dumps(1)[0]
        self.assertNotIn("DDPT_VIA_PYTHON_EXEC", d["env"])
        self.assertNotIn("-u", d["orig_argv"])  # executed via its #! line, not `python -u`
        # and the same program without --no-python does go through PYTHON_EXEC
        (self.outdir / "rank_0.json").unlink()
        res = self.run_launcher([ENV_PY, self.outdir],
                                env_extra={"PYTHON_EXEC": str(marker_python)})
        self.assertEqual(res.rc, 0, res.describe())
        self.assertEqual(self.read_env_dumps(1)[0]["env"].get("DDPT_VIA_PYTHON_EXEC"), "1")

    def test_no_python_underscore_and_shell_program(self):
        res = self.run_launcher(["--no_python", "--nproc-per-node=2", ENV_SH, self.outdir,
                                 "arg one", "two"])
        self.assertEqual(res.rc, 0, res.describe())
        for r in range(2):
            env = dict(line.split("=", 1) for line in
                       (self.outdir / f"env_{r}.txt").read_text().splitlines() if "=" in line)
            self.assertEqual(env["RANK"], str(r))
            self.assertEqual(env["WORLD_SIZE"], "2")
            self.assertEqual((self.outdir / f"args_{r}.txt").read_text().splitlines(),
                             ["arg one", "two"])

    def test_shell_program_found_on_path(self):
        bindir = self.tmp / "bin"
        bindir.mkdir()
        prog = bindir / "ddpt-env-dump"
        prog.write_bytes(Path(ENV_SH).read_bytes())
        prog.chmod(prog.stat().st_mode | stat.S_IXUSR)
        env = self.env({"PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"})
        res = self.run_launcher(["ddpt-env-dump", self.outdir], env=env)
        self.assertEqual(res.rc, 0, res.describe())
        self.assertTrue((self.outdir / "env_0.txt").is_file())

class OpenBlasEnvTest(LauncherTestCase):
    """Workers run OpenBLAS's kernels for this CPU's widest vector extension
    (launcher/src/blas/openblas_core.h): where OpenBLAS, left to itself, picks
    narrower ones, ddplaunch sets OPENBLAS_CORETYPE; a user's own value wins."""

    def setUp(self):
        super().setUp()
        if platform.machine() != "x86_64":
            self.skipTest("OpenBLAS core names here are x86-64's")
        direct = subprocess.run([PYTHON, OPENBLAS_PY], env=base_env(), capture_output=True, text=True,
                                timeout=30, check=True).stdout.strip()
        self.direct_core = OPENBLAS_RE.match(direct).group(2)
        if self.direct_core == "-":
            self.skipTest("no libopenblas.so.0 here")

    def worker_cores(self, res, n):
        self.assertEqual(res.rc, 0, res.describe())
        cores = {}
        for rank, lines in res.out_by_rank().items():
            for line in lines:
                m = OPENBLAS_RE.match(line)
                if m:
                    cores[rank] = (m.group(1), m.group(2))
        self.assertEqual(sorted(cores), list(range(n)), res.describe())
        return cores

    def test_workers_get_the_widest_kernels_this_cpu_runs(self):
        res = self.run_launcher(["--nproc-per-node=2", PYTHON, OPENBLAS_PY])
        told = f"picks its {self.direct_core} kernels on this CPU"
        for rank, (coretype, core) in self.worker_cores(res, 2).items():
            with self.subTest(rank=rank):
                if coretype == "-":  # OpenBLAS's own choice was already right
                    self.assertEqual(core, self.direct_core)
                    self.assertNotIn(told, res.err)
                else:
                    self.assertEqual(core, coretype)
                    self.assertNotEqual(core, self.direct_core)
                    self.assertIn(told, res.err, res.describe())
                if {"avx2", "fma"} <= cpu_flags():
                    self.assertNotEqual(core, "Prescott", "generic SSE3 kernels on an AVX2 CPU")

    def test_the_users_own_coretype_wins(self):
        res = self.run_launcher(["--nproc-per-node=2", PYTHON, OPENBLAS_PY],
                                env_extra={"OPENBLAS_CORETYPE": "Prescott"})
        for rank, (coretype, core) in self.worker_cores(res, 2).items():
            self.assertEqual((coretype, core), ("Prescott", "Prescott"), f"rank {rank}")
        self.assertNotIn("picks its", res.err)

    def test_the_answer_is_remembered_for_the_next_launch(self):
        runtime = self.tmp / "xdg"
        runtime.mkdir()
        env = {"XDG_RUNTIME_DIR": str(runtime)}
        first = self.worker_cores(self.run_launcher(["--nproc-per-node=2", PYTHON, OPENBLAS_PY], env_extra=env), 2)
        memo_path = runtime / "ddplaunch" / "libblas-probe.json"
        memo = json.loads(memo_path.read_text())
        self.assertEqual(memo["blas"]["core"], self.direct_core, memo)
        second = self.worker_cores(self.run_launcher(["--nproc-per-node=2", PYTHON, OPENBLAS_PY], env_extra=env), 2)
        self.assertEqual(second, first)
        coretype = first[0][0]
        if coretype == "-":
            return  # nothing to tune here, so nothing the memo could change
        # The memo is what the launch goes by: one saying OpenBLAS already picks
        # the widest kernels makes ddplaunch leave OPENBLAS_CORETYPE unset.
        memo["blas"]["core"] = coretype
        memo_path.write_text(json.dumps(memo))
        third = self.worker_cores(self.run_launcher(["--nproc-per-node=2", PYTHON, OPENBLAS_PY], env_extra=env), 2)
        self.assertEqual(set(third.values()), {("-", self.direct_core)})


if __name__ == "__main__":
    unittest.main()
