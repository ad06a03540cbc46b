"""The stacks of a rank's forked children (DataLoader workers with fork):
taken with the rank's own on the agent's request, from a child blocked in C,
while a child that exec()ed another program is left alone."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

from companion_harness import CompanionTestCase, script
from _ddplaunch_companion import signal_stacks


def marked_line(name, mark):
    with open(script(name)) as f:
        for number, text in enumerate(f, 1):
            if mark in text:
                return number
    raise AssertionError("no line with %r in %s" % (mark, name))


def process_state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def child_threads(msg, pid):
    return [t for t in msg["threads"] if t["name"].startswith("child pid %d: " % pid)]


def stacks_once_children_wait(conn, pids, line, timeout=30):
    """Asks for stacks until every child in `pids` answers from `line` (they
    may still be on their way there); returns the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        conn.send({"type": "dump_stacks"})
        msg = conn.wait_for(lambda m: m["type"] == "stacks", 5, "stacks")
        innermost = {pid: [t["frames"][-1]["line"] for t in child_threads(msg, pid) if t["frames"]]
                     for pid in pids}
        if all(line in lines for lines in innermost.values()) or time.monotonic() > deadline:
            return msg
        time.sleep(0.05)


class ChildStacksTest(CompanionTestCase):
    interval_ms = 2000

    def test_forked_child_answers_and_an_exec_child_is_left_alone(self):
        rank = self.start("forked_children.py")
        conn, _ = self.accept_rank(rank)
        line = rank.wait_line(lambda l: l.startswith("ready "), 30, "ready")
        stays, execs = (int(p) for p in line.split()[1:])
        wait_line = marked_line("forked_children.py", "# the forked child waits here")

        msg = stacks_once_children_wait(conn, [stays], wait_line)
        innermost = [t["frames"][-1] for t in child_threads(msg, stays) if t["frames"]]
        self.assertIn({"function": "child_waits", "file": script("forked_children.py"), "line": wait_line,
                       "code": "time.sleep(120)  # the forked child waits here"}, innermost, msg)
        self.assertTrue(all(not t["main"] for t in child_threads(msg, stays)))
        self.assertEqual(child_threads(msg, execs), [], msg)
        self.assertNotEqual(process_state(execs), "Z", "the exec()ed child was ended by the stack signal")
        # The rank's own main thread is as it was: it waits for no DataLoader worker.
        main = [t for t in msg["threads"] if t["main"]]
        self.assertEqual([f["function"] for f in main[0]["frames"]], ["<module>", "main"])
        log = (self.rank_dir / "stacks.log").read_text()
        self.assertIn("Thread child pid %d: " % stays, log)
        self.assertIn("    time.sleep(120)  # the forked child waits here\n", log)

    def test_spawn_and_forkserver_children_answer(self):
        rank = self.start("spawned_children.py", "wait")
        conn, _ = self.accept_rank(rank)
        line = rank.wait_line(lambda l: l.startswith("ready "), 60, "ready")
        spawned, forkserved = (int(p) for p in line.split()[1:])
        wait_line = marked_line("spawned_children.py", "# the spawned child waits here")

        msg = stacks_once_children_wait(conn, [spawned, forkserved], wait_line)
        for pid in (spawned, forkserved):
            frames = [t["frames"] for t in child_threads(msg, pid) if t["frames"]]
            self.assertIn({"function": "child_waits", "file": script("spawned_children.py"), "line": wait_line,
                           "code": "time.sleep(120)  # the spawned child waits here"},
                          [f[-1] for f in frames], msg)
        log = (self.rank_dir / "stacks.log").read_text()
        self.assertIn("Thread child pid %d: " % forkserved, log)   # the rank's grandchild

    def test_a_spawned_child_that_crashes_leaves_its_stack(self):
        rank = self.start("spawned_children.py", "crash")
        self.accept_rank(rank)
        rank.wait_line(lambda l: l.startswith("child exit "), 60, "the child's exit")
        self.assertEqual(rank.finish(), 0, rank.stderr_text())
        self.assertIn("child exit %d" % -signal.SIGSEGV, rank.lines)
        text = (self.rank_dir / "fatal_stack.log").read_text()
        self.assertIn("Fatal Python error: Segmentation fault", text)
        crash_line = marked_line("spawned_children.py", "# the spawned child crashes here")
        self.assertIn('File "%s", line %d in child_crashes' % (script("spawned_children.py"), crash_line), text)


class ParseDumpTest(unittest.TestCase):
    def test_faulthandler_text_of_every_thread(self):
        code = textwrap.dedent("""
            import faulthandler, sys, threading
            def waits(event):
                event.wait()
            def dumps():
                faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
            event = threading.Event()
            t = threading.Thread(target=waits, args=(event,))
            t.start()
            dumps()
            event.set()
            t.join()
            """)
        folder = tempfile.mkdtemp(prefix="ddpl-dump-")
        self.addCleanup(shutil.rmtree, folder, True)
        path = os.path.join(folder, "dumps.py")
        with open(path, "w") as f:
            f.write(code)
        out = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=60).stdout
        threads = signal_stacks.parse_dump(out)
        self.assertEqual(len(threads), 2, out)
        current = [t for t in threads if t["main"]]
        self.assertEqual(len(current), 1, out)
        self.assertEqual([f["function"] for f in current[0]["frames"]], ["<module>", "dumps"])
        self.assertEqual(current[0]["frames"][-1]["code"],
                         "faulthandler.dump_traceback(file=sys.stdout, all_threads=True)")
        self.assertEqual(current[0]["frames"][0]["file"], path)
        other = [t for t in threads if not t["main"]][0]
        waits = [f for f in other["frames"] if f["function"] == "waits"]
        self.assertEqual([f["code"] for f in waits], ["event.wait()"], out)
        self.assertEqual(other["frames"][-1]["file"], threading.__file__, out)
        self.assertRegex(other["name"], r"^thread 0x[0-9a-f]+$")

    def test_unknown_lines_and_text_around(self):
        text = ("Thread 0x00007f0000000001 (most recent call first):\n"
                '  File "/nowhere/x.py", line ??? in lost\n'
                '  File "/nowhere/x.py", line 7 in outer\n'
                "\n"
                "Current thread 0x00007f0000000002 (most recent call first):\n"
                "  <no Python frame>\n")
        threads = signal_stacks.parse_dump(text)
        self.assertEqual(threads[0]["frames"], [
            {"function": "outer", "file": "/nowhere/x.py", "line": 7, "code": ""},
            {"function": "lost", "file": "/nowhere/x.py", "line": 0, "code": ""}])
        self.assertEqual(threads[1], {"name": "thread 0x00007f0000000002", "main": True, "frames": []})


if __name__ == "__main__":
    unittest.main()
