"""A 2-node ddplaunch job whose agents live in two network namespaces joined by a
veth pair (see netns_harness.py): node 1 reaches the coordinator and MASTER_ADDR
only over that link, never over a shared loopback."""

import time
import unittest

from launcher_harness import torch_available, wait_for_file, worker
from multinode_harness import EXIT_NODE_LOST, EXIT_RDZV, PROBE, by_node_rank
from netns_harness import NetnsTestCase, ip

DIE = worker("die_on_rank.sh")
SLEEPER = worker("sleeper.sh")
ALLREDUCE = worker("torch_allreduce.py")

TORCH_OK = torch_available()


class NetnsJobTest(NetnsTestCase):

    def test_two_nodes_form_one_job_over_veth(self):
        nnodes, nproc = 2, 2
        launches = [self.start_node(k, nnodes, nproc, [PROBE, str(self.outdir)])
                    for k in range(nnodes)]
        results = self.finish_all(launches)
        desc = self.describe_all(results)
        for res in results:
            self.assertEqual(res.rc, 0, desc)
        dumps = self.read_probes(nnodes * nproc)
        self.check_layout(dumps, nnodes, nproc, job_id=self.job_id, token=self.job_token)
        self.check_console(results, nproc)
        # MASTER_ADDR must be node 0's address on the link, the only one node 1 can reach
        for rank, d in dumps.items():
            self.assertEqual(d["env"]["MASTER_ADDR"], self.addr[0], f"rank {rank}{desc}")
            self.assertTrue(d["socket"].get("is_socket"), f"rank {rank}: {d['socket']}")
            self.assertEqual(d["socket"].get("mode"), 0o600, f"rank {rank}: {d['socket']}")
        self.assert_no_leftovers()

    def test_failure_in_one_namespace_tears_down_both(self):
        nnodes, nproc, fail_rank, code = 2, 2, 3, 7
        prog = [DIE, f"exit:{code}", str(fail_rank), str(self.outdir), "1.0"]
        launches = [self.start_node(k, nnodes, nproc, prog, extra=["--shutdown-grace=3"])
                    for k in range(nnodes)]
        for r in range(nnodes * nproc):
            if not wait_for_file(self.outdir / f"pid_{r}", 15):
                self.fail(f"pid_{r} did not appear" + self.describe_all(
                    [self.current_output(l) for l in launches]))
        pids = [self.read_int(f"pid_{r}") for r in range(nnodes * nproc)]
        t0 = time.monotonic()
        results = self.finish_all(launches, timeout=20)
        elapsed = time.monotonic() - t0
        desc = self.describe_all(results)
        for res in results:
            self.assertEqual(res.rc, code, desc)
        self.assertLess(elapsed, 1.0 + 4.0, f"agents exited {elapsed:.1f}s after start{desc}")
        self.assert_dead(pids, what="worker")
        self.assert_no_leftovers()

    def test_network_partition_is_detected(self):
        # cut the link: node 0 stops hearing node 1 (silent node -> 123); node 1 loses
        # the coordinator (-> 125); both after about node_timeout, workers gone
        nnodes, nproc = 2, 1
        conf = "node_timeout=2,heartbeat_interval=0.5"
        launches = [self.start_node(k, nnodes, nproc, [SLEEPER, str(self.outdir)], conf=conf,
                                    extra=["--shutdown-grace=2"]) for k in range(nnodes)]
        for r in range(nnodes * nproc):
            if not wait_for_file(self.outdir / f"ready_{r}", 15):
                self.fail(f"ready_{r} did not appear" + self.describe_all(
                    [self.current_output(l) for l in launches]))
        pids = [self.read_int(f"pid_{r}") for r in range(nnodes * nproc)]
        pids += [self.read_int(f"child_{r}") for r in range(nnodes * nproc)]
        r = ip("-n", self.ns[1], "link", "set", self.ifname[1], "down")
        self.assertEqual(r.returncode, 0, r.stderr)
        t0 = time.monotonic()
        results = self.finish_all(launches, timeout=20)
        elapsed = time.monotonic() - t0
        desc = self.describe_all(results)
        self.assertEqual(results[0].rc, EXIT_NODE_LOST, desc)
        self.assertEqual(results[1].rc, EXIT_RDZV, desc)
        self.assertLess(elapsed, 2 + 6, f"partition noticed after {elapsed:.1f}s{desc}")
        self.assert_dead(pids, what="worker")
        self.assert_no_leftovers()

    @unittest.skipUnless(TORCH_OK, "/usr/bin/python3 (PYTHON_EXEC) cannot import torch.distributed")
    def test_gloo_allreduce_over_veth(self):
        nnodes, nproc = 2, 2
        world = nnodes * nproc
        launches = [self.start_node(k, nnodes, nproc, ALLREDUCE,
                                    env_extra={"GLOO_SOCKET_IFNAME": self.ifname[k]})
                    for k in range(nnodes)]
        results = self.finish_all(launches, timeout=45)
        desc = self.describe_all(results)
        expected = world * (world - 1) // 2
        for k, res in enumerate(results):
            self.assertEqual(res.rc, 0, desc)
            lines = by_node_rank(res.out)
            for rank in range(k * nproc, k * nproc + nproc):
                self.assertIn(f"rank {rank} world {world} allreduce sum {expected} OK",
                              lines.get((k, rank), []), desc)
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
