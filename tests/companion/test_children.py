"""Only the process the launcher started connects: DataLoader workers
(fork and spawn), subprocesses and forked children stay silent and do not
see the companion's variables."""

import unittest

from companion_harness import BOOTSTRAP, CompanionTestCase, skip_without_torch


@skip_without_torch
class ChildrenTest(CompanionTestCase):
    def test_only_the_rank_connects(self):
        rank = self.start("children.py", BOOTSTRAP)
        conn, hello = self.accept_rank(rank)
        # A child that connected while they ran waits in the listen queue;
        # a late one gets a second more.
        rank.wait_line(lambda l: l == "done", 90, "done")
        self.assertIsNone(self.accept(1.0), "a child connected to the agent")
        result = rank.json_line("result:")
        self.assertEqual(hello["pid"], result["pid"])
        for ctx in ("fork", "spawn"):
            rows = result[ctx]
            self.assertEqual(len(rows), 4, rows)
            self.assertTrue(all(pid != result["pid"] for pid, _ in rows), rows)
            self.assertEqual([flag for _, flag in rows], [0, 0, 0, 0], ctx)
        self.assertEqual(result["subprocess"], {"socket_var": False, "pythonpath": None,
                                                "bootstrap_on_path": False})
        self.assertEqual(result["fork_status"], 256)   # exit code 1, by its exception
        self.assertFalse((self.rank_dir / "error.json").exists(),
                         "a forked child wrote the rank's error file")

        # The rank's own connection is intact and only it spoke on it.
        conn.wait_for(lambda m: m["type"] == "heartbeat", 10, "heartbeat after the children")
        self.assertEqual(rank.finish(), 0, rank.stderr_text())
        conn.wait_eof(20)
        types = [m["type"] for m in conn.messages]
        self.assertEqual(types.count("hello"), 1)
        exiting = [i for i, m in enumerate(conn.messages) if m.get("exiting")]
        self.assertEqual(exiting, [len(conn.messages) - 1])
        self.assertEqual(len(self.connections), 1)


if __name__ == "__main__":
    unittest.main()
