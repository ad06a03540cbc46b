"""`import ddplaunch; ddplaunch.should_stop()` in a PyTorch script: the step
the launcher's stop request names (DDPLAUNCH_STOP_FILE), counted in
optimizer steps; the module exists only in a rank the companion runs in."""

import json
import unittest

from companion_harness import CompanionTestCase, skip_without_torch


@skip_without_torch
class StopRequestTest(CompanionTestCase):
    def run_with_request(self, request):
        stop_file = self.tmp / "stop_request.json"
        if request is not None:
            stop_file.write_text(json.dumps(request))
        rank = self.start("stop_steps.py", self.tmp / "init",
                          env=self.rank_env(DDPLAUNCH_STOP_FILE=str(stop_file)))
        self.accept_rank(rank)
        line = rank.wait_line(lambda l: l.startswith(("stopped after", "ran all")), 60, "the end")
        self.assertEqual(rank.finish(), 0, rank.stderr_text())
        return line

    def test_stops_after_the_step_the_request_names(self):
        self.assertEqual(self.run_with_request({"stop_at_step": 5, "reason": "SIGTERM"}), "stopped after 5")

    def test_a_request_read_past_its_step_stops_at_once_and_says_it_came_late(self):
        stop_file = self.tmp / "stop_request.json"
        stop_file.write_text(json.dumps({"stop_at_step": 0, "reason": "SIGTERM"}))
        rank = self.start("stop_steps.py", self.tmp / "init",
                          env=self.rank_env(DDPLAUNCH_STOP_FILE=str(stop_file)))
        self.accept_rank(rank)
        rank.wait_line(lambda l: l == "stopped after 1", 60, "the stop")
        self.assertEqual(rank.finish(), 0, rank.stderr_text())
        self.assertIn("ddplaunch companion: rank 0 read the stop request after completing step 1, past step 0 "
                      "it names: it stops now", rank.stderr_text())

    def test_a_request_without_a_step_stops_at_the_next_boundary(self):
        self.assertEqual(self.run_with_request({"stop_at_step": None}), "stopped after 1")

    def test_no_request_no_stop(self):
        self.assertEqual(self.run_with_request(None), "ran all 100")

    def test_the_module_exists_only_where_the_companion_runs(self):
        rank = self.start("stop_steps.py", self.tmp / "init", env=self.rank_env(companion=False))
        self.assertNotEqual(rank.finish(), 0)
        self.assertIn("No module named 'ddplaunch'", rank.stderr_text())


if __name__ == "__main__":
    unittest.main()
