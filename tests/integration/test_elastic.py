"""Elastic membership with real agents and real ddptrain over Gloo:
a job of --nnodes=MIN:MAX shrinks when a node is lost, grows when a node joins,
and leaves out a node whose workers keep failing. The agents are separate
ddplaunch processes on this machine (one per "node"); the final parameters are
compared with an uninterrupted run of the same global batch.
"""

import json
import re
import signal
import unittest

from launcher_harness import PYTHON, free_port, http_get, signal_step, wait_until, worker
from multinode_harness import EXIT_NODE_LOST, EXIT_RDZV, MultiNodeTestCase
from netns_harness import NetnsTestCase, ip
from test_ddptrain import DDPTRAIN, TORCH_OK, DdptrainCase, checkpoint_steps

# Fast failure detection, and a short wait for more nodes once MIN have joined.
CONF = "node_timeout=2,heartbeat_interval=0.5,last_call_timeout=1"
STEPS = 1500
# A global batch that 2 and 3 ranks both divide: the same training on either world
# (a learning rate low enough that the training is not chaotic: 1e-16 stays small).
TRAIN = ("--global-batch-size", 12, "--momentum", 0.9, "--lr", 0.01, "--samples", 384, "--precision", "fp64",
         "--mlp-sizes", "32,512,512,10", "--log-every", 0, "--steps", STEPS)


class TrainingRun:
    """The training every test here runs, its uninterrupted reference, and waiting for
    its checkpoints (a mixin for the multi-node and the namespace cases)."""

    @staticmethod
    def training(ck, final):
        return [DDPTRAIN, *map(str, TRAIN), "--checkpoint-dir", str(ck), "--checkpoint-every", "50",
                "--save-final", str(final)]

    def reference(self):
        ref = self.tmp / "uninterrupted.pt"
        self.train(2, *TRAIN, "--save-final", ref, timeout=120)
        return ref

    def wait_for_checkpoint(self, ck, step, launches):
        if not wait_until(lambda: max(checkpoint_steps(ck), default=0) >= step, 60):
            self.fail(f"no checkpoint of step >= {step} within 60 s"
                      f"{self.describe_all([self.current_output(l) for l in launches])}")


class ElasticCase(TrainingRun, MultiNodeTestCase, DdptrainCase):
    """Elastic ddptrain agents on this machine, and what their job left behind."""

    def elastic_agent(self, nnodes, node_rank, ck, final, extra=(), endpoint=None):
        return self.start_agent(nnodes, 1, self.training(ck, final), node_rank=node_rank, conf=CONF,
                                endpoint=endpoint, env_extra=self.train_env(), extra=["--shutdown-grace=2", *extra])

    def verdicts(self):
        """The coordinator's verdicts recorded in the attempts' failure.json files."""
        found = []
        for path in sorted(self.log_dir.glob("*/attempt_*/failure.json")):
            found.append(json.loads(path.read_text()).get("verdict", {}))
        return found


@unittest.skipUnless(TORCH_OK, "PYTHON_EXEC cannot import torch (needed to compare parameters)")
class ElasticTrainingTest(ElasticCase):

    def test_a_lost_node_shrinks_the_job_which_finishes_with_the_same_parameters(self):
        ref = self.reference()
        ck, final = self.tmp / "ck", self.tmp / "final.pt"
        launches = [self.elastic_agent("2:3", r, ck, final) for r in range(3)]
        self.wait_for_checkpoint(ck, 100, launches)
        self.signal_launch(launches[2], signal.SIGKILL)
        results = self.finish_all(launches, timeout=120)
        desc = self.describe_all(results)
        self.assertEqual([r.rc for r in results], [0, 0, -signal.SIGKILL], desc)
        for r in results[:2]:
            self.assertRegex(r.err, r"node 2 \(\S+\) went silent: no agent heartbeat for", desc)
            self.assertIn("a membership change: the restart budget is untouched", r.err, desc)
        self.assertIn("the checkpoint was written by 3 rank(s); continuing on 2 with the same global batch 12",
                      results[0].out, desc)
        self.assertIn({"membership_change": True}, [{k: v.get(k) for k in ("membership_change",)}
                                                    for v in self.verdicts()], desc)
        (row,) = self.compare((final, ref))
        self.assert_close(row, 1e-10, "3 ranks, one node lost, then 2 ranks vs 2 ranks throughout")
        self.assert_no_leftovers()

    def test_a_fourth_node_that_joins_a_running_job_makes_it_grow(self):
        ref = self.reference()
        ck, final = self.tmp / "ck", self.tmp / "final.pt"
        launches = [self.elastic_agent("2:4", r, ck, final) for r in range(3)]
        self.wait_for_checkpoint(ck, 100, launches)
        launches.append(self.elastic_agent("2:4", None, ck, final))
        results = self.finish_all(launches, timeout=180)
        desc = self.describe_all(results)
        self.assertEqual([r.rc for r in results], [0, 0, 0, 0], desc)
        self.assertIn("ddptrain: mlp, 284682 parameters, 3 rank(s)", results[0].out, desc)
        self.assertRegex(results[0].err, r"1 node\(s\) waiting to join: stopping generation \d+ to re-form with 4 "
                                         r"node\(s\)", desc)
        self.assertRegex(results[3].err, r"joined the running job at generation [1-9]", desc)
        self.assertIn("continuing on 4 with the same global batch 12", results[0].out, desc)
        (row,) = self.compare((final, ref))
        self.assert_close(row, 1e-10, "3 ranks, a fourth node joins, then 4 ranks vs 2 ranks throughout")
        self.assert_no_leftovers()


@unittest.skipUnless(TORCH_OK, "PYTHON_EXEC cannot import torch (needed to compare parameters)")
class CoordinatorFailoverTest(ElasticCase):
    """--rdzv-endpoint lists two endpoints; the node hosting the first is SIGKILLed."""

    def test_the_coordinators_node_is_lost_and_the_next_endpoint_takes_the_job_over(self):
        ref = self.reference()
        ck, final = self.tmp / "ck", self.tmp / "final.pt"
        second = f"127.0.0.1:{free_port()}"
        endpoints = f"{self.endpoint()},{second}"
        metrics = free_port()
        launches = [self.elastic_agent("2:3", r, ck, final, endpoint=endpoints, extra=[f"--metrics-port={metrics}"])
                    for r in range(3)]
        self.wait_for_checkpoint(ck, 100, launches)
        url = f"http://127.0.0.1:{metrics}/status.json"
        auth = {"Authorization": f"Bearer {self.job_token}"}
        self.assertEqual(json.loads(http_get(url, auth)[1]).get("coordinator_epoch", [0])[0], 0)
        self.signal_launch(launches[0], signal.SIGKILL)
        # --metrics-port follows the coordinator: the agent that took it over serves it.
        taken_over = {}

        def served_by_the_next_endpoint():
            code, body = http_get(url, auth, timeout=2)
            if code == 200 and json.loads(body).get("coordinator_epoch") == [1, 2]:
                taken_over.update(json.loads(body))
            return bool(taken_over)
        served = wait_until(served_by_the_next_endpoint, 60, 0.1)
        results = self.finish_all(launches, timeout=120)
        desc = self.describe_all(results)
        self.assertEqual([r.rc for r in results], [-signal.SIGKILL, 0, 0], desc)
        for r in results[1:]:
            self.assertRegex(r.err, rf"failing over to the next coordinator endpoint {second} \(epoch 1", desc)
            self.assertIn("joined as node", r.err.split("failing over")[-1], desc)
        self.assertEqual(sum("hosted by this agent" in r.err for r in results[1:]), 1, desc)
        self.assertTrue(served, f"{url} did not answer for the coordinator at {second}{desc}")
        self.assertEqual(len(taken_over["ranks"]["ranks"]), taken_over["world_size"], taken_over)
        self.assertEqual(sum(bool(re.search(rf"metrics: http://\S+:{metrics}/metrics", r.err)) for r in results[1:]), 1,
                         desc)
        self.assertIn("continuing on 2 with the same global batch 12", results[1].out + results[2].out, desc)
        (row,) = self.compare((final, ref))
        self.assert_close(row, 1e-10, "3 ranks, the coordinator's node lost, then 2 ranks vs 2 ranks throughout")
        self.assert_no_leftovers()


@unittest.skipUnless(TORCH_OK, "PYTHON_EXEC cannot import torch (needed by ddptrain's tests)")
class RestartedCoordinatorNodeTest(ElasticCase):
    """After the job failed over, the first endpoint's node is started again (as a
    supervisor would): it finds the job at the second endpoint and joins it there,
    instead of hosting a second copy at the first."""

    def test_a_restarted_first_node_joins_the_job_where_it_failed_over(self):
        ck = self.tmp / "ck"
        endpoints = f"{self.endpoint()},127.0.0.1:{free_port()}"
        program = [DDPTRAIN, *map(str, TRAIN[:-2]), "--steps", "6000", "--checkpoint-dir", str(ck),
                   "--checkpoint-every", "200"]

        def agent():
            return self.start_agent("2:3", 1, program, conf=CONF, endpoint=endpoints, env_extra=self.train_env(),
                                    extra=["--shutdown-grace=2"])
        launches = [agent() for _ in range(3)]
        self.wait_for_checkpoint(ck, 200, launches)
        hosts = [i for i, l in enumerate(launches) if "coordinator listening on" in self.current_output(l).err]
        self.assertEqual(len(hosts), 1, self.describe_all([self.current_output(l) for l in launches]))
        self.signal_launch(launches[hosts[0]], signal.SIGKILL)
        survivors = [l for i, l in enumerate(launches) if i != hosts[0]]
        if not wait_until(lambda: any("this agent now hosts" in self.current_output(l).err for l in survivors), 60):
            self.fail("no failover within 60 s" + self.describe_all([self.current_output(l) for l in survivors]))
        restarted = agent()
        results = self.finish_all(survivors + [restarted], timeout=120)
        desc = self.describe_all(results)
        self.assertEqual([r.rc for r in results], [0, 0, 0], desc)
        self.assertIn("it failed over while this node was away; joining it there", results[2].err, desc)
        self.assertNotIn("coordinator listening on", results[2].err, desc)
        self.assertRegex(results[2].err, r"joined the running job at generation [2-9]", desc)
        self.assert_no_leftovers()


class NamespaceCase(TrainingRun, NetnsTestCase, DdptrainCase):
    """Elastic ddptrain agents, each in its own network namespace."""

    def namespace_agent(self, k, nnodes, ck, final, **kw):
        return self.start_node(k, nnodes, 1, self.training(ck, final), conf=CONF, extra=["--shutdown-grace=2"],
                               env_extra={"GLOO_SOCKET_IFNAME": self.ifname[k], "OMP_NUM_THREADS": "1"}, **kw)

    def cut_off(self, k):
        r = ip("-n", self.ns[k], "link", "set", self.ifname[k], "down")
        self.assertEqual(r.returncode, 0, r.stderr)


@unittest.skipUnless(TORCH_OK, "PYTHON_EXEC cannot import torch (needed to compare parameters)")
class PartitionedNodeTest(NamespaceCase):
    """Three nodes in three network namespaces; node 2's link goes down mid-run."""

    NODES = 3

    def test_a_partitioned_node_is_lost_and_the_survivors_finish_with_the_same_parameters(self):
        ref = self.reference()
        ck, final = self.tmp / "ck", self.tmp / "final.pt"
        launches = [self.namespace_agent(k, "2:3", ck, final) for k in range(3)]
        self.wait_for_checkpoint(ck, 100, launches)
        self.cut_off(2)
        results = self.finish_all(launches, timeout=120)
        desc = self.describe_all(results)
        # The cut-off node loses the coordinator; the other two re-form without it.
        self.assertEqual([r.rc for r in results], [0, 0, EXIT_RDZV], desc)
        self.assertRegex(results[0].err, r"node 2 \(\S+\) went silent", desc)
        self.assertIn("continuing on 2 with the same global batch 12", results[0].out, desc)
        (row,) = self.compare((final, ref))
        self.assert_close(row, 1e-10, "3 ranks, one node cut off, then 2 ranks vs 2 ranks throughout")
        self.assert_no_leftovers()


@unittest.skipUnless(TORCH_OK, "PYTHON_EXEC cannot import torch (needed to compare parameters)")
class PartitionedCoordinatorTest(NamespaceCase):
    """Three nodes in namespaces 1-3 (namespace 0 holds the bridge), two coordinator
    endpoints; the link of the node hosting the first goes down mid-run."""

    NODES = 4

    def test_the_cut_off_coordinator_ends_its_side_and_the_next_endpoint_runs_the_job(self):
        ref = self.reference()
        ck, final = self.tmp / "ck", self.tmp / "final.pt"
        endpoints = f"{self.addr[1]}:{self.port},{self.addr[2]}:{self.port}"
        # MIN is 1: only the majority rule keeps the cut-off coordinator from going on alone.
        launches = [self.namespace_agent(k, "1:3", ck, final, node_rank=k - 1, endpoint=endpoints) for k in (1, 2, 3)]
        self.wait_for_checkpoint(ck, 100, launches)
        self.cut_off(1)
        results = self.finish_all(launches, timeout=120)
        desc = self.describe_all(results)
        self.assertEqual([r.rc for r in results], [EXIT_NODE_LOST, 0, 0], desc)
        self.assertIn("only 1 of the generation's 3 node(s) remain here, not a majority", results[0].err, desc)
        self.assertNotIn("joining job", results[0].err.split("not a majority")[-1], desc)
        self.assertIn(f"this agent now hosts the job's coordinator at {self.addr[2]}:{self.port} (epoch 1)",
                      results[1].err, desc)
        self.assertRegex(results[2].err, rf"failing over to the next coordinator endpoint {re.escape(self.addr[2])}",
                         desc)
        self.assertIn("continuing on 2 with the same global batch 12", results[1].out, desc)
        (row,) = self.compare((final, ref))
        self.assert_close(row, 1e-10, "3 ranks, the coordinator's node cut off, then 2 ranks vs 2 ranks throughout")
        self.assert_no_leftovers()


@unittest.skipUnless(TORCH_OK, "PYTHON_EXEC cannot import torch (needed to compare parameters)")
class MultiNodePreemptionTest(TrainingRun, MultiNodeTestCase, DdptrainCase):
    """SIGTERM to one agent of two (Slurm's --signal on one node): every rank of the job
    stops after the same step, the job exits 75 on both nodes and resumes from there."""

    ARGS = ("--batch-size", 8, "--momentum", 0.9, "--samples", 512, "--mlp-sizes", "32,1024,1024,10",
            "--log-every", 0, "--steps", 1500)

    def agents(self, ck, final=None):
        program = [DDPTRAIN, *map(str, self.ARGS), "--checkpoint-dir", str(ck), "--checkpoint-every", "100"]
        if final:
            program += ["--save-final", str(final)]
        return [self.start_agent(2, 1, program, node_rank=r, conf="heartbeat_interval=0.5",
                                 env_extra=self.train_env(), extra=["--heartbeat-interval=0.2", "--stop-timeout=60"])
                for r in range(2)]

    def test_sigterm_to_one_node_stops_every_rank_at_one_step_and_the_job_resumes_there(self):
        ref = self.tmp / "uninterrupted.pt"
        self.train(2, *self.ARGS, "--save-final", ref, timeout=120)
        ck = self.tmp / "ck"
        launches = self.agents(ck)
        self.wait_for_checkpoint(ck, 200, launches)
        self.signal_launch(launches[1], signal.SIGTERM)
        results = self.finish_all(launches, timeout=90)
        desc = self.describe_all(results)
        self.assertEqual([r.rc for r in results], [75, 75], desc)
        m = re.search(r"ddptrain: stopping after step (\d+) of 1500 as ddplaunch asked \(checkpoint written\)",
                      results[0].out)
        self.assertIsNotNone(m, desc)
        stopped_at = int(m.group(1))
        self.assertEqual(max(checkpoint_steps(ck)), stopped_at, desc)
        for r in results:  # both nodes asked their ranks for the step the coordinator chose
            self.assertIn("SIGTERM to ddplaunch on node 1 (", r.err, desc)
            self.assertIn(f"asking the ranks to stop once they have completed step {stopped_at} and exit", r.err,
                          desc)
            self.assertNotIn("did not all stop", r.err, desc)

        final = self.tmp / "resumed.pt"
        again = self.finish_all(self.agents(ck, final), timeout=120)
        desc = self.describe_all(again)
        self.assertEqual([r.rc for r in again], [0, 0], desc)
        self.assertIn(f"(step {stopped_at})", again[0].out, desc)
        (row,) = self.compare((final, ref))
        self.assert_bitwise(row, f"stopped after step {stopped_at} on both nodes, resumed")
        self.assert_no_leftovers()


@unittest.skipUnless(TORCH_OK, "PYTHON_EXEC cannot import torch")
class MultiNodePythonPreemptionTest(MultiNodeTestCase):
    """The same flow with an unmodified PyTorch DDP script and its one-line check,
    ddplaunch.should_stop() (tests/integration/workers/torch_ddp_preemptible.py), and
    the signal as Slurm sends it: SIGTERM to every process of both nodes, the ranks
    first. The companion keeps it for the step boundary."""

    def agents(self, outdir, steps):
        program = [PYTHON, worker("torch_ddp_preemptible.py"), str(outdir), "--steps", str(steps)]
        return [self.start_agent(2, 2, program, node_rank=r, conf="heartbeat_interval=0.5",
                                 extra=["--heartbeat-interval=0.2", "--stop-timeout=60"])
                for r in range(2)]

    def test_slurms_sigterm_to_every_process_stops_every_rank_of_a_pytorch_script_at_one_step_and_it_resumes(self):
        outdir = self.tmp / "preempted"
        outdir.mkdir()
        launches = self.agents(outdir, 100000)
        if not wait_until(lambda: (outdir / "ready").exists(), 60):
            self.fail("the script did not reach step 5 within 60 s"
                      + self.describe_all([self.current_output(l) for l in launches]))
        signal_step([launch.pid for launch in launches], signal.SIGTERM)
        results = self.finish_all(launches, timeout=90)
        desc = self.describe_all(results)
        self.assertEqual([r.rc for r in results], [75, 75], desc)
        kept = re.findall(r"rank (\d+) ignores a SIGTERM from outside ddplaunch", results[0].err + results[1].err)
        self.assertEqual(sorted(int(r) for r in kept), [0, 1, 2, 3], desc)
        stopped = re.findall(r"torch_ddp_preemptible: rank (\d+) stopped after (\d+)", results[0].out + results[1].out)
        self.assertEqual(sorted(int(r) for r, _ in stopped), [0, 1, 2, 3], desc)
        steps = {int(n) for _, n in stopped}
        self.assertEqual(len(steps), 1, f"the ranks stopped after different steps: {stopped}{desc}")
        stopped_at = steps.pop()
        for r in results:
            self.assertRegex(r.err, r"SIGTERM to ddplaunch on node [01] \(", desc)
            self.assertNotIn("did not all stop", r.err, desc)

        again = self.finish_all(self.agents(outdir, stopped_at + 20), timeout=90)
        desc = self.describe_all(again)
        self.assertEqual([r.rc for r in again], [0, 0], desc)
        resumed = re.findall(r"torch_ddp_preemptible: rank (\d+) resumed at step (\d+)", again[0].out + again[1].out)
        self.assertEqual(sorted(int(r) for r, _ in resumed), [0, 1, 2, 3], desc)
        self.assertEqual({int(n) for _, n in resumed}, {stopped_at}, desc)
        self.assertTrue((outdir / "final.pt").exists(), desc)
        self.assert_no_leftovers()


POISONED = """
import os, sys, time
if os.environ.get("POISONED_NODE"):
    print("this node's worker fails", flush=True)
    sys.exit(3)
time.sleep(0.5)
"""


class PoisonNodeTest(MultiNodeTestCase):

    def test_a_node_whose_workers_keep_failing_is_left_out(self):
        script = self.tmp / "poisoned.py"
        script.write_text(POISONED)
        common = dict(conf=CONF, extra=["--max-restarts=3", "--max-node-failures=2"])
        healthy = self.start_agent("1:2", 1, [PYTHON, str(script)], node_rank=0, **common)
        poisoned = self.start_agent("1:2", 1, [PYTHON, str(script)], node_rank=1,
                                    env_extra={"POISONED_NODE": "1"}, **common)
        results = self.finish_all([healthy, poisoned], timeout=60)
        desc = self.describe_all(results)
        self.assertEqual([r.rc for r in results], [0, 3], desc)
        excluded = r"node 1 \(\S+\) is excluded from the job: its workers failed 2 generation\(s\) in a row"
        self.assertRegex(results[1].err, excluded, desc)
        self.assertRegex(results[0].err, excluded, desc)
        self.assertIn("restart 2 of 3", results[0].err, desc)
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
