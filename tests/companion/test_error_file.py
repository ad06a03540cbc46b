"""The torchelastic error file written for an uncaught exception."""

import json
import time
import unittest

from companion_harness import CompanionTestCase, script


class ErrorFileTest(CompanionTestCase):
    def test_uncaught_exception_writes_error_file(self):
        rank = self.start("raises.py")
        conn, _ = self.accept_rank(rank)
        self.assertEqual(rank.finish(), 1)
        data = json.loads((self.rank_dir / "error.json").read_text())
        self.assertEqual(set(data), {"message"})
        self.assertEqual(set(data["message"]), {"message", "extraInfo"})
        self.assertEqual(data["message"]["message"], "ValueError: bad value 42")
        extra = data["message"]["extraInfo"]
        self.assertEqual(set(extra), {"py_callstack", "timestamp"})
        stack = extra["py_callstack"]
        self.assertTrue(stack.startswith("Traceback (most recent call last):\n"), stack)
        self.assertIn('File "%s", line 5, in fail\n' % script("raises.py"), stack)
        self.assertTrue(stack.endswith("ValueError: bad value 42\n"), stack)
        self.assertRegex(extra["timestamp"], r"^\d+$")
        self.assertLess(abs(int(extra["timestamp"]) - time.time()), 120)
        # The usual traceback still goes to stderr; no clean-exit heartbeat is sent.
        self.assertIn("ValueError: bad value 42", rank.stderr_text())
        self.assertTrue(conn.wait_eof(10))
        self.assertFalse(any(m.get("exiting") for m in conn.messages), conn.messages)

    def test_existing_error_file_left_alone(self):
        path = self.rank_dir / "error.json"
        path.write_text('{"written": "by @record"}')
        rank = self.start("raises.py")
        self.accept_rank(rank)
        self.assertEqual(rank.finish(), 1)
        self.assertEqual(path.read_text(), '{"written": "by @record"}')


if __name__ == "__main__":
    unittest.main()
