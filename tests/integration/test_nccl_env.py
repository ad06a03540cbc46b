"""NCCL settings and logs under ddplaunch (the CPU-testable part):
--nccl-debug / NCCL_DEBUG send each rank's NCCL log to its own
rank_<r>/nccl.log; NCCL_* of the launching node reach the workers of every
node (a node's own setting wins) and each node records what its workers got;
a failed attempt's failure.json carries what the ranks' NCCL logs say."""
import json
import os
import shutil
import unittest

from launcher_harness import worker
from multinode_harness import MultiNodeTestCase

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit", "fixtures", "nccl")


def read_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            name, sep, value = line.rstrip("\n").partition("=")
            if sep:
                env[name] = value
    return env


class NcclEnvTest(MultiNodeTestCase):

    def attempt_dir(self, job_id=None):
        return self.log_dir / (job_id or self.job_id) / "attempt_0"

    def test_nccl_debug_flag_sends_each_rank_log_to_its_own_file(self):
        res = self.run_launcher(["--nproc-per-node=2", "--nccl-debug=info", "--nccl-debug-subsys=INIT,NET",
                                 worker("env_dump.sh"), self.outdir],
                                env_extra={"NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "1"})
        self.assertEqual(res.rc, 0, res.describe())
        for rank in (0, 1):
            env = read_env(self.outdir / f"env_{rank}.txt")
            self.assertEqual(env["NCCL_DEBUG"], "INFO")  # the flag wins over the environment
            self.assertEqual(env["NCCL_DEBUG_SUBSYS"], "INIT,NET")
            self.assertEqual(env["NCCL_IB_DISABLE"], "1")
            self.assertEqual(env["NCCL_DEBUG_FILE"], str(self.attempt_dir() / f"rank_{rank}" / "nccl.log"))
        recorded = json.loads((self.attempt_dir() / "nccl_env.node0.json").read_text())
        self.assertEqual(recorded["NCCL_DEBUG"], "INFO")
        self.assertEqual(recorded["NCCL_IB_DISABLE"], "1")

    def test_plain_nccl_debug_is_routed_too_and_an_own_file_is_kept(self):
        res = self.run_launcher(["--nproc-per-node=1", worker("env_dump.sh"), self.outdir],
                                env_extra={"NCCL_DEBUG": "INFO"})
        self.assertEqual(res.rc, 0, res.describe())
        env = read_env(self.outdir / "env_0.txt")
        self.assertEqual(env["NCCL_DEBUG_FILE"], str(self.attempt_dir() / "rank_0" / "nccl.log"))
        mine = str(self.tmp / "my-nccl.%h.%p.log")
        res = self.run_launcher(["--nproc-per-node=1", worker("env_dump.sh"), self.outdir],
                                env_extra={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": mine})
        self.assertEqual(res.rc, 0, res.describe())
        self.assertEqual(read_env(self.outdir / "env_0.txt")["NCCL_DEBUG_FILE"], mine)

    def test_bad_level_is_a_usage_error(self):
        res = self.run_launcher(["--nproc-per-node=1", "--nccl-debug=LOUD", "/bin/true"])
        self.assertEqual(res.rc, 2, res.describe())
        self.assertIn("--nccl-debug 'LOUD'", res.err)
        self.assertEqual(len(res.err.strip().splitlines()), 1, res.err)

    def test_launching_node_nccl_settings_reach_every_node(self):
        program = [worker("env_dump.sh"), str(self.outdir)]
        node0 = self.start_agent(2, 1, program, node_rank=0, conf="is_host=true",
                                 env_extra={"NCCL_SOCKET_IFNAME": "lo", "NCCL_ALGO": "Ring"},
                                 extra=["--nccl-debug=WARN"])
        node1 = self.start_agent(2, 1, program, node_rank=1, env_extra={"NCCL_ALGO": "Tree"})
        results = self.finish_all([node0, node1])
        for r in results:
            self.assertEqual(r.rc, 0, self.describe_all(results))
        rank1 = read_env(self.outdir / "env_1.txt")
        self.assertEqual(rank1["NCCL_SOCKET_IFNAME"], "lo")  # from node 0
        self.assertEqual(rank1["NCCL_DEBUG"], "WARN")        # node 0's --nccl-debug
        self.assertEqual(rank1["NCCL_ALGO"], "Tree")         # node 1's own setting wins
        self.assertEqual(read_env(self.outdir / "env_0.txt")["NCCL_ALGO"], "Ring")
        recorded = json.loads((self.attempt_dir() / "nccl_env.node1.json").read_text())
        self.assertEqual(recorded["NCCL_SOCKET_IFNAME"], "lo")
        self.assertEqual(recorded["NCCL_ALGO"], "Tree")

    def test_failure_report_carries_the_nccl_summary(self):
        # Each rank "writes" its NCCL log (a real one from a hung init) and rank 1 fails.
        script = self.tmp / "nccl_worker.sh"
        script.write_text(
            "#!/bin/sh\n"
            f'cp "{FIXTURES}/job_hang/attempt_0/rank_${{RANK}}/nccl.log" "$NCCL_DEBUG_FILE"\n'
            '[ "$RANK" = 1 ] && exit 3\n'
            "sleep 5\n")
        script.chmod(0o755)
        res = self.run_launcher(["--nproc-per-node=4", "--nccl-debug=INFO", script])
        self.assertEqual(res.rc, 3, res.describe())
        report = json.loads((self.attempt_dir() / "failure.json").read_text())
        self.assertIn("nccl", report)
        comms = report["nccl"]["communicators"]
        self.assertTrue(any(c["ranks_missing"] for c in comms), comms)
        self.assertIn("NCCL logs:", res.err)
        self.assertIn("init not complete on rank(s)", res.err)


if __name__ == "__main__":
    unittest.main()
