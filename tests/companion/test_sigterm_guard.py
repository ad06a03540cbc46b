"""What a rank does with a SIGTERM when ddplaunch runs it with --stop-timeout
(sigterm_guard.py): Slurm sends the signal to every process of the step, so a
rank keeps it while ddplaunch says a stop at a step boundary is under way
("stopping" in DDPLAUNCH_SIGNAL_INTENT_FILE), dies of it when ddplaunch itself
is signalling ("terminating"), and dies of it after a moment when ddplaunch
says nothing. Forked children and the script's own handler are left alone."""

import os
import signal
import time
import unittest

from companion_harness import CompanionTestCase


class SigtermGuardTest(CompanionTestCase):
    def start_target(self, *args, intent=None):
        self.intent = self.tmp / "agent.signal_intent"
        if intent is not None:
            self.intent.write_text(intent + "\n")
        rank = self.start("sigterm_target.py", *args,
                          env=self.rank_env(DDPLAUNCH_SIGNAL_INTENT_FILE=str(self.intent)))
        self.accept_rank(rank)
        rank.wait_line(lambda l: l.startswith("ready"), 30, "ready")
        return rank

    def wait_stderr(self, rank, text, timeout=10):
        deadline = time.monotonic() + timeout
        while text not in rank.stderr_text():
            if time.monotonic() > deadline:
                self.fail("the rank never said %r; stderr:\n%s" % (text, rank.stderr_text()))
            time.sleep(0.02)

    def still_alive(self, rank):
        # Counted before asking: the answer may arrive before the next line runs.
        with rank.cond:
            before = sum(1 for l in rank.lines if l == "alive")
        rank.write("are you there?\n")
        rank.wait_line(lambda l: sum(1 for x in rank.lines if x == "alive") > before, 10, "alive")
        self.assertIsNone(rank.proc.poll())

    def test_keeps_a_sigterm_while_a_stop_is_under_way_and_dies_of_one_when_ddplaunch_terminates(self):
        rank = self.start_target(intent="stopping")
        os.kill(rank.proc.pid, signal.SIGTERM)
        self.wait_stderr(rank, "rank 0 ignores a SIGTERM from outside ddplaunch")  # said by the guard's thread
        self.still_alive(rank)
        self.intent.write_text("terminating\n")
        os.kill(rank.proc.pid, signal.SIGTERM)
        self.assertEqual(rank.proc.wait(10), -signal.SIGTERM, rank.stderr_text())

    def test_a_rank_that_exits_at_the_step_boundary_before_the_guard_decided_still_says_it_kept_the_signal(self):
        rank = self.start_target(intent="stopping")
        rank.write("term-and-exit\n")
        self.assertEqual(rank.proc.wait(10), 0, rank.stderr_text())
        self.wait_stderr(rank, "rank 0 ignores a SIGTERM from outside ddplaunch")

    def test_a_sigterm_nobody_announced_kills_after_ddplaunch_had_time_to_say(self):
        rank = self.start_target()
        sent = time.monotonic()
        os.kill(rank.proc.pid, signal.SIGTERM)
        self.assertEqual(rank.proc.wait(20), -signal.SIGTERM, rank.stderr_text())
        self.assertGreaterEqual(time.monotonic() - sent, 2.9)

    def test_a_forked_child_dies_of_sigterm_as_usual(self):
        rank = self.start_target("fork", intent="stopping")
        child = int(rank.wait_line(lambda l: l.startswith("child "), 30, "child").split()[1])
        os.kill(child, signal.SIGTERM)
        rank.write("reap\n")
        self.assertEqual(rank.wait_line(lambda l: l.startswith("child signal"), 10, "child's end"),
                         "child signal %d" % signal.SIGTERM)
        self.still_alive(rank)

    def test_the_scripts_own_handler_wins(self):
        rank = self.start_target("own-handler", intent="terminating")
        os.kill(rank.proc.pid, signal.SIGTERM)
        rank.wait_line(lambda l: l == "own handler", 10, "own handler")
        self.still_alive(rank)


if __name__ == "__main__":
    unittest.main()
