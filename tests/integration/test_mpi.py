"""ddplaunch under a real Open MPI `mpirun`, across two network namespaces that
stand for two hosts (netns_harness.py: own address, own hostname, own
/etc/hosts). mpirun starts one ddplaunch per "host"; each takes its node rank
and the node count from OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE.

mpirun reaches the second namespace the way it reaches another machine, through
its rsh agent (plm_rsh_agent): here a small script that runs the command in that
namespace instead of over ssh. Everything else is stock Open MPI."""

import os
import re
import shlex
import shutil
import time
import unittest
from pathlib import Path

from launcher_harness import REPO, wait_for_file, worker
from netns_harness import NetnsTestCase

MPIRUN = shutil.which("mpirun") or "/usr/bin/mpirun"
DDPTRAIN = Path(os.environ.get("DDPTRAIN_BIN") or (REPO / "build" / "worker" / "ddptrain" / "ddptrain")).absolute()
DIE = worker("die_on_rank.sh")
LOSS_RE = re.compile(r"ddptrain: done: .* loss ([0-9.]+) -> ([0-9.]+)")


class OpenMpiJobTest(NetnsTestCase):
    NODES = 2

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not os.access(MPIRUN, os.X_OK):
            raise AssertionError(f"{MPIRUN} not found: deploy/install-deps.sh installs openmpi-bin")

    def setUp(self):
        super().setUp()
        self.hostnames = [f"mpinode{k}" for k in range(self.NODES)]
        hosts = "".join(f"{a} {h}\n" for a, h in zip(self.addr, self.hostnames))
        self.system_files = {"hosts": "127.0.0.1 localhost\n" + hosts}
        self.rsh_agent = self.tmp / "netns_rsh.sh"
        self._write_rsh_agent()

    def _write_rsh_agent(self):
        # mpirun calls AGENT HOST COMMAND...; the command (orted and its
        # arguments) is a shell command line, as for ssh.
        cases = "".join(
            f"  {h}) exec {shlex.join(self.wrap(k))} sh -c \"$*\" ;;\n" for k, h in enumerate(self.hostnames))
        self.rsh_agent.write_text(
            "#!/bin/sh\n"
            "host=$1; shift\n"
            "case \"$host\" in\n"
            f"{cases}"
            "  *) echo \"netns_rsh: unknown host $host\" >&2; exit 255 ;;\n"
            "esac\n")
        self.rsh_agent.chmod(0o755)

    def mpirun(self, nproc, program, extra=()):
        """mpirun in node 0's namespace, as the README shows it: one ddplaunch per
        node, the token exported to every node (-x), nothing but the rendezvous
        endpoint and id on ddplaunch's command line (no --nnodes, no --node-rank:
        they come from Open MPI)."""
        ddplaunch = self.command([f"--nproc-per-node={nproc}", f"--rdzv-endpoint={self.hostnames[0]}:{self.port}",
                                  f"--rdzv-id={self.job_id}", *extra, *program], log_dir=True, job_id=False)
        subnet = self.addr[0].rsplit(".", 1)[0] + ".0/24"
        cmd = [MPIRUN, "--allow-run-as-root", "-np", str(self.NODES), "--host", ",".join(self.hostnames),
               "--map-by", "node", "--mca", "plm_rsh_agent", str(self.rsh_agent),
               "-x", "DDPLAUNCH_TOKEN", "--mca", "oob_tcp_if_include", subnet, *ddplaunch]
        return self.start(None, env=self.mn_env({"DDPLAUNCH_TOKEN": self.job_token}), raw_cmd=self.wrap(0) + cmd)

    def test_ddptrain_forms_one_world_of_four_from_open_mpis_ranks(self):
        launch = self.mpirun(2, [DDPTRAIN, "--batch-size", "16", "--steps", "20", "--momentum", "0.9",
                                 "--samples", "256"])
        res = self.finish(launch, timeout=60)
        self.assertEqual(res.rc, 0, res.describe())
        for k in range(self.NODES):
            self.assertIn(f"nnodes 2 from OMPI_COMM_WORLD_SIZE, node rank {k} from OMPI_COMM_WORLD_RANK",
                          res.err, res.describe())
        self.assertIn("joined as node 0 of 2: ranks 0..1 of 4", res.err, res.describe())
        self.assertIn("joined as node 1 of 2: ranks 2..3 of 4", res.err, res.describe())
        m = LOSS_RE.search(res.out)
        self.assertIsNotNone(m, res.describe())
        self.assertLess(float(m.group(2)), float(m.group(1)) - 0.1, "the loss did not fall" + res.describe())
        self.assertIn("on 4 rank(s)", m.group(0))
        self.assert_no_leftovers()

    def test_a_failure_on_one_node_tears_down_both_and_mpirun_fails(self):
        code = 7
        launch = self.mpirun(2, [DIE, f"exit:{code}", "3", str(self.outdir), "1.0"], extra=["--shutdown-grace=3"])
        for r in range(4):
            if not wait_for_file(self.outdir / f"pid_{r}", 30):
                self.fail(f"pid_{r} did not appear" + self.current_output(launch).describe())
        pids = [self.read_int(f"pid_{r}") for r in range(4)]
        t0 = time.monotonic()
        res = self.finish(launch, timeout=30)
        elapsed = time.monotonic() - t0
        # mpirun exits with the first failed process's code: node 1's ddplaunch, which
        # exits with its rank's code (node 0's is stopped by the coordinator).
        self.assertEqual(res.rc, code, res.describe())
        self.assertIn("rank 3 is failing on purpose", res.out + res.err, res.describe())
        self.assertIn("rank 3 (node 1, local rank 1", res.err, res.describe())
        # rank 3 fails 1 s after it started; the rest follows within seconds
        self.assertLess(elapsed, 10.0, f"mpirun ended {elapsed:.1f} s after every rank started" + res.describe())
        self.assert_dead(pids, what="worker")
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
