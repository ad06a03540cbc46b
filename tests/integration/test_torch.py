"""Real PyTorch Gloo process groups (env:// rendezvous) under ddplaunch."""

import os
import unittest

from launcher_harness import LauncherTestCase, free_port, torch_available, worker

TORCH_OK = torch_available()
ALLREDUCE = worker("torch_allreduce.py")


@unittest.skipUnless(TORCH_OK, "/usr/bin/python3 (PYTHON_EXEC) cannot import torch.distributed")
class TorchTest(LauncherTestCase):

    def env_for_torch(self):
        # keep gloo on loopback whatever the host's name resolves to
        return {"GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo")}

    def allreduce(self, nproc, extra_args=()):
        res = self.run_launcher([f"--nproc-per-node={nproc}", *extra_args, ALLREDUCE],
                                env_extra=self.env_for_torch(), timeout=60)
        self.assertEqual(res.rc, 0, res.describe())
        expected = nproc * (nproc - 1) // 2
        by_rank = res.out_by_rank()
        self.assertEqual(sorted(by_rank), list(range(nproc)), res.describe())
        for r in range(nproc):
            self.assertIn(f"rank {r} world {nproc} allreduce sum {expected} OK", by_rank[r],
                          res.describe())
        self.assert_no_leftovers()

    def test_allreduce_2_ranks(self):
        self.allreduce(2)

    def test_allreduce_4_ranks(self):
        self.allreduce(4)

    def test_allreduce_explicit_port(self):
        self.allreduce(2, [f"--master-port={free_port()}", "--master-addr=127.0.0.1"])

    def test_rank_failure_tears_down_blocked_peers(self):
        # rank 1 raises before the collective; rank 0 blocks in all_reduce (gloo's default
        # timeout is 30 min) until ddplaunch tears it down
        res = self.run_launcher(["--nproc-per-node=2", "--shutdown-grace=2", ALLREDUCE, "1"],
                                env_extra=self.env_for_torch(), timeout=60)
        self.assertEqual(res.rc, 1, res.describe())
        self.assertIn("rank 1 fails before all_reduce", res.err)
        report = self.failure_json(0)
        self.assertEqual(report["root_cause"]["rank"], 1)
        self.assertEqual(report["root_cause"]["exit_code"], 1)
        self.assertTrue(any("rank 1 fails before all_reduce" in l
                            for l in report["root_cause"]["stderr_tail"]))
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
