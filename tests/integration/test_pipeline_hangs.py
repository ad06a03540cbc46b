"""Hangs of an unmodified pipeline-parallel PyTorch script (workers/torch_pipeline_trouble.py:
3 stages, Gloo, activations down with send/recv, gradients up with isend/irecv; no
collective after init), diagnosed through the Python companion's report of the sends and
receives each rank has in flight. With no rank in a collective, the verdict follows the
waits: a stage that stops is named by the stages waiting for it, and stages that each
receive from the other first are named together; where the stages receive from any
source, the stage in no send or receive is named. A forward-only pipeline (inference:
no steps, no collectives, its sends and receives are all the companion sees) is called
stuck once its calls stop completing, and not while they complete. Each test checks who is named and how
fast (from the trouble line the rank prints to the report line), the merged stacks, and
that nothing is left running.
"""

import re
import unittest

from launcher_harness import worker
from test_python_companion import DETECT_BOUND, HANG, HANG_EXIT, HB, PythonCompanionTestCase, merged_groups
from test_hangs import Watch

NPROC = 3
SCRIPT = worker("torch_pipeline_trouble.py")
STARTED_RE = re.compile(r"^\[0:0\] torch_pipeline_trouble: \d+ stages started")
TROUBLE_RE = re.compile(r"^\[0:(\d+)\] torch_pipeline_trouble: ([\w-]+) at step (\d+)")
BLOCKED_RE = re.compile(r"error: stuck_collective detected: no progress for [\d.]+ s \(hang timeout [\d.]+ s\): "
                        r"rank (\d+) \(host \S+, pid \d+(?:, step \d+)?, phase (\w+)\) is in no send or receive "
                        r"while ranks? ([\d,]+) waits? for (?:it|them): (.*)")
CYCLE_RE = re.compile(r"error: stuck_collective detected: no progress for [\d.]+ s \(hang timeout [\d.]+ s\): "
                      r"ranks ([\d,]+) wait for one another in sends and receives that never pair up: (.*)")


class PipelineHangTests(PythonCompanionTestCase):
    def run_pipeline(self, trouble, *script_args):
        args = [f"--nproc-per-node={NPROC}", f"--heartbeat-interval={HB}", f"--hang-timeout={HANG}",
                SCRIPT, "--trouble", trouble, *script_args]
        launch = self.start(args)
        watch = Watch(launch)
        res, t_exit = self.finish_watched(launch, watch, 90)
        self.assertIsNotNone(t_exit, "ddplaunch did not exit" + res.describe())
        self.assertEqual(res.rc, HANG_EXIT, res.describe())
        return res, watch

    def assert_in_time(self, watch, verdict, res):
        trouble = watch.first(TROUBLE_RE, "err")
        self.assertIsNotNone(trouble, "no trouble line" + res.describe())
        self.assertLess(verdict[0] - trouble[0], DETECT_BOUND, "reported too late" + res.describe())

    def assert_blocked(self, watch, res, expected, waits_in):
        """The verdict naming the stage in no send or receive: (rank, phase, waiting
        ranks) as `expected`, each of `waits_in` among its waits, reported in time.
        Returns the merged stacks by ranks."""
        blocked = watch.first(BLOCKED_RE, "err")
        self.assertIsNotNone(blocked, "no report naming the stage in no send or receive" + res.describe())
        rank, phase, waiting, waits = blocked[1].groups()
        self.assertEqual((rank, phase, waiting), expected, res.describe())
        for wait in waits_in:
            self.assertIn(wait, waits, res.describe())
        self.assert_in_time(watch, blocked, res)
        return merged_groups(res.err)

    def test_a_stage_that_stops_is_named_by_the_stages_waiting_for_it(self):
        # Stage 1 sleeps before step 20: stage 2 waits to receive its activation,
        # stage 0 to receive its gradient of step 19... or sends step 20's
        # activation, which Gloo may hold until stage 1 receives it.
        res, w = self.run_pipeline("stall@20:1")
        blocked = w.first(BLOCKED_RE, "err")
        self.assertIsNotNone(blocked, "no report naming the stage the others wait for" + res.describe())
        rank, phase, waiting, waits = blocked[1].groups()
        self.assertEqual(rank, "1", res.describe())
        self.assertEqual(phase, "other", res.describe())
        self.assertIn("2", waiting.split(","), res.describe())
        self.assertIn("rank 2 in recv (1.0 KiB) from rank 1 for ", waits, res.describe())
        self.assert_in_time(w, blocked, res)
        groups = merged_groups(res.err)
        culprit = [g for ranks, g in groups.items() if ranks == "1"]
        self.assertEqual(len(culprit), 1, res.describe())
        self.assertIn("time.sleep(3600)", culprit[0][0], res.describe())
        self.assertTrue(culprit[0][1], "rank 1's stack is the likely culprit" + res.describe())
        self.assertIn("dist.recv(x, src=rank - 1)", groups["2"][0], res.describe())
        self.assert_no_leftovers(timeout=2.0)

    def test_a_stage_that_stops_is_named_where_the_others_receive_from_any_source(self):
        # Stage 0 sleeps before step 20; stages 1 and 2 wait in recv without src.
        res, w = self.run_pipeline("stall@20:0", "--any-source")
        groups = self.assert_blocked(w, res, ("0", "other", "1,2"),
                                     ["rank 1 in recv (1.0 KiB) from any rank for ",
                                      "rank 2 in recv (1.0 KiB) from any rank for "])
        self.assertIn("time.sleep(3600)", groups["0"][0], res.describe())
        self.assert_no_leftovers(timeout=2.0)

    def test_a_stage_of_an_inference_pipeline_that_stops_is_named(self):
        # Forward only, no optimizer: the script has no steps. It runs for longer
        # than the hang timeout before stage 1 sleeps at step 200: completed sends
        # and receives are progress. Then stage 0 waits to send to it, stage 2 to
        # receive from it.
        res, w = self.run_pipeline("stall@200:1", "--inference")
        started = w.first(STARTED_RE, "out")
        trouble = w.first(TROUBLE_RE, "err")
        self.assertIsNotNone(trouble, "stopped before the trouble" + res.describe())
        self.assertGreater(trouble[0] - started[0], HANG, "ran for less than the hang timeout" + res.describe())
        groups = self.assert_blocked(w, res, ("1", "other", "0,2"),
                                     ["rank 0 in send (1.0 KiB) to rank 1 for ",
                                      "rank 2 in recv (1.0 KiB) from rank 1 for "])
        self.assertIn("time.sleep(3600)", groups["1"][0], res.describe())
        self.assertIn("dist.send(y, dst=rank + 1)", groups["0"][0], res.describe())
        self.assert_no_leftovers(timeout=2.0)

    def test_stages_that_each_receive_from_the_other_first_are_named_together(self):
        # At step 20 stage 1 waits for its gradient before it sends its activation:
        # stage 2 waits to receive that activation; stage 0 waits for its gradient.
        res, w = self.run_pipeline("recv-first@20:1")
        cycle = w.first(CYCLE_RE, "err")
        self.assertIsNotNone(cycle, "no report of the receives waiting on each other" + res.describe())
        ranks, waits = cycle[1].groups()
        self.assertEqual(ranks, "1,2", res.describe())
        self.assertIn("rank 1 in irecv (1.0 KiB) from rank 2 for ", waits, res.describe())
        self.assertIn("rank 2 in recv (1.0 KiB) from rank 1 for ", waits, res.describe())
        self.assert_in_time(w, cycle, res)
        groups = merged_groups(res.err)
        self.assertTrue(groups["1"][1] and groups["2"][1], "both stacks are likely culprits" + res.describe())
        self.assert_no_leftovers(timeout=2.0)


if __name__ == "__main__":
    unittest.main()
