"""A rank waiting for a program it started (subprocess.run, os.system): its
stacks go on into that program, which runs no companion: its command line and
what the kernel says it does."""

import os
import re
import unittest

from companion_harness import CompanionTestCase, script
from test_signal_stacks import marked_line


def ends_in_child(main):
    """The main thread's stack goes on into the program, asleep in its sleep
    (a program still starting reads as running)."""
    return bool(main["frames"]) and main["frames"][-1]["function"] == "child process" \
        and "sleep 120 (sleeping in " in main["frames"][-1]["code"]


class WaitedChildTest(CompanionTestCase):
    interval_ms = 2000

    def main_thread_waiting(self, how):
        rank = self.start("waits_for_program.py", how)
        conn, _ = self.accept_rank(rank)
        rank.wait_line(lambda l: l == "ready", 30, "ready")
        msg = conn.stacks_when(ends_in_child)
        main = [t for t in msg["threads"] if t["main"]][0]
        self.assertTrue(ends_in_child(main), msg)
        return rank, main["frames"]

    def test_subprocess_run_goes_on_into_the_program(self):
        rank, frames = self.main_thread_waiting("run")
        line = marked_line("waits_for_program.py", "# the rank waits for its program here")
        users = [f for f in frames if f["file"] == script("waits_for_program.py")]
        self.assertEqual((users[-1]["function"], users[-1]["line"]), ("main", line))
        self.assertTrue(frames[-2]["file"].endswith("subprocess.py"), frames)
        child = frames[-1]
        self.assertEqual((child["file"], child["line"]), ("", 0))
        m = re.fullmatch(r"pid (\d+): sleep 120 \(sleeping in (\S+)\)", child["code"])
        self.assertIsNotNone(m, child)
        self.assertIn(int(m.group(1)), children_of(rank.proc.pid))
        log = (self.rank_dir / "stacks.log").read_text()
        self.assertIn("  --- child process (pid %s: sleep 120 (sleeping" % m.group(1), log)

    def test_os_system_goes_on_through_the_shell_into_the_program(self):
        _, frames = self.main_thread_waiting("system")
        self.assertEqual(frames[-2]["code"], 'os.system("sleep 120; true")  # the rank waits for its program here')
        self.assertRegex(frames[-1]["code"],
                         r"^pid \d+: (/bin/)?sh -c sleep 120; true -> pid \d+: sleep 120 \(sleeping")

    def test_a_rank_waiting_for_nothing_has_no_child_frame(self):
        rank = self.start("blocked.py")
        conn, _ = self.accept_rank(rank)
        conn.send({"type": "dump_stacks"})
        msg = conn.wait_for(lambda m: m["type"] == "stacks", 5, "stacks")
        for t in msg["threads"]:
            self.assertNotIn("child process", [f["function"] for f in t["frames"]], msg)


def children_of(pid):
    found = []
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
            found.extend(int(p) for p in f.read().split())
    return found


if __name__ == "__main__":
    unittest.main()
