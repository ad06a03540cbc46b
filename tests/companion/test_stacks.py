"""Stack dumps on the agent's request, answered while the main thread sleeps
in C with the GIL released."""

import json
import unittest

from companion_harness import MAX_MESSAGE, CompanionTestCase, script
from _ddplaunch_companion import stacks


def sleep_line():
    with open(script("blocked.py")) as f:
        for number, text in enumerate(f, 1):
            if text.strip().startswith("time.sleep(120)"):
                return number
    raise AssertionError("no sleep line in blocked.py")


class StacksTest(CompanionTestCase):
    interval_ms = 2000    # the answer must not wait for the next heartbeat

    def test_dump_while_main_thread_blocked(self):
        rank = self.start("blocked.py")
        conn, _ = self.accept_rank(rank)
        rank.wait_line(lambda l: l == "ready", 30, "ready")
        line = sleep_line()
        # "ready" is printed a line before the sleep begins.
        msg = conn.stacks_when(lambda main: main["frames"][-1]["line"] == line)
        main = [t for t in msg["threads"] if t["main"]]
        self.assertEqual(len(main), 1, msg)
        main = main[0]
        self.assertEqual(main["name"], "MainThread")
        self.assertEqual(main["frames"][-1], {"function": "waiting_for_data",
                                              "file": script("blocked.py"), "line": line,
                                              "code": "time.sleep(120)  # the main thread waits here"})
        self.assertEqual([f["function"] for f in main["frames"]],
                         ["<module>", "main", "waiting_for_data"])
        names = sorted(t["name"] for t in msg["threads"])
        self.assertEqual(names, ["MainThread", "helper-thread"])
        self.assertEqual(msg["threads"][0]["name"], "MainThread")

        log = (self.rank_dir / "stacks.log").read_text()
        self.assertIn("asked by ddplaunch", log)
        self.assertIn("Thread MainThread", log)
        self.assertIn('  File "%s", line %d, in waiting_for_data\n'
                      '    time.sleep(120)  # the main thread waits here\n'
                      % (script("blocked.py"), line), log)
        self.assertIn("Thread helper-thread (most recent call last):", log)
        self.assertNotIn("ddplaunch-companion", log)


class EncodeTest(unittest.TestCase):
    def test_oversized_dump_cut_to_innermost_frames(self):
        frame = {"function": "f" * 100, "file": "/" + "d" * 300 + ".py", "line": 1, "code": "c" * 240}
        threads = [{"name": "t%d" % i, "main": i == 0,
                    "frames": [dict(frame, line=n) for n in range(1, 65)]} for i in range(32)]
        data = stacks.encode_message(threads)
        self.assertLessEqual(len(data), MAX_MESSAGE)
        msg = json.loads(data.decode("utf-8"))
        self.assertEqual(len(msg["threads"]), 32)
        kept = msg["threads"][0]["frames"]
        self.assertTrue(0 < len(kept) < 64)
        self.assertEqual(kept[-1]["line"], 64)   # the innermost frames are the ones kept


if __name__ == "__main__":
    unittest.main()
