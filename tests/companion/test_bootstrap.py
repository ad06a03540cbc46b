"""The bootstrap: hello and heartbeats, the path it gives back, the user's own
sitecustomize, and a rank that runs on when the companion cannot work."""

import os
import subprocess
import unittest

from companion_harness import BOOTSTRAP, PYTHON, CompanionTestCase

USER_SITE = """import os
with open(os.environ["USER_SITE_MARKER"], "a") as f:
    f.write("ran in %d\\n" % os.getpid())
"""


def distribution_sitecustomize():
    """The sitecustomize this interpreter runs on its own (a distribution's), or None."""
    r = subprocess.run([PYTHON, "-c", "import sys; m = sys.modules.get('sitecustomize'); "
                        "print(getattr(m, '__file__', None))"],
                       stdout=subprocess.PIPE, universal_newlines=True,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    path = r.stdout.strip()
    return None if path == "None" else path


class BootstrapTest(CompanionTestCase):
    def user_site(self, body=USER_SITE):
        d = self.tmp / "usersite"
        d.mkdir()
        (d / "sitecustomize.py").write_text(body)
        return str(d)

    def assert_clean_start(self, info, user_dir):
        self.assertNotIn(str(BOOTSTRAP), info["sys_path"])
        self.assertEqual(info["pythonpath"], user_dir)
        self.assertEqual(info["companion_env"], [])
        self.assertEqual(info["sitecustomize"], os.path.join(user_dir, "sitecustomize.py"))
        marker = (self.tmp / "marker").read_text().splitlines()
        self.assertEqual(marker, ["ran in %d" % info["pid"]])

    def test_hello_and_clean_path_and_no_heartbeat_before_a_process_group(self):
        user_dir = self.user_site()
        env = self.rank_env(user_pythonpath=user_dir, USER_SITE_MARKER=str(self.tmp / "marker"))
        rank = self.start("report_env.py", env=env)
        conn, hello = self.accept_rank(rank)
        self.assertEqual(hello, {
            "type": "hello", "version": 1, "job_id": self.job_id, "token": self.token,
            "rank": 0, "local_rank": 0, "generation": 3, "pid": rank.proc.pid,
            "python": hello["python"], "torch": None,
            "announcements": "%s.%d.ann" % (self.socket_path[:-len(".sock")], rank.proc.pid)})
        self.assertRegex(hello["python"], r"^3\.\d+\.\d+$")
        info = rank.json_line("info:")
        self.assert_clean_start(info, user_dir)
        # Heartbeats start with the default process group (test_torch_progress):
        # a program that never makes one says hello and nothing more.
        self.assertEqual(rank.finish(), 0, rank.stderr_text())
        self.assertTrue(conn.wait_eof(10))
        self.assertEqual([m["type"] for m in conn.messages], ["hello"])
        self.assertEqual(rank.stderr_text(), "")
        self.assertFalse(os.path.exists(hello["announcements"]), "removed at exit when no agent mapped it")

    def test_inactive_without_companion_env(self):
        user_dir = self.user_site()
        env = self.rank_env(companion=False, user_pythonpath=user_dir,
                            USER_SITE_MARKER=str(self.tmp / "marker"))
        rank = self.start("report_env.py", env=env)
        self.assert_clean_start(rank.json_line("info:"), user_dir)
        self.assertEqual(rank.finish(), 0)
        self.assertIsNone(self.accept(0))
        self.assertEqual(rank.stderr_text(), "")

    def test_distribution_sitecustomize_still_runs(self):
        expected = distribution_sitecustomize()
        if expected is None:
            self.skipTest(PYTHON + " has no sitecustomize of its own")
        rank = self.start("report_env.py")
        self.accept_rank(rank)
        info = rank.json_line("info:")
        self.assertEqual(info["sitecustomize"], expected)
        self.assertIsNone(info["pythonpath"])   # nothing of the user's: the variable is gone
        self.assertEqual(rank.finish(), 0)

    def test_failing_user_sitecustomize_reported_like_site(self):
        user_dir = self.user_site("raise RuntimeError('user site broke')\n")
        rank = self.start("report_env.py", env=self.rank_env(user_pythonpath=user_dir))
        self.accept_rank(rank)
        rank.json_line("info:")
        self.assertEqual(rank.finish(), 0)
        self.assertEqual(rank.stderr_text(),
                         "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                         "RuntimeError: user site broke\n")

    def test_unreachable_agent(self):
        env = self.rank_env(DDPLAUNCH_COMPANION_SOCKET=str(self.tmp / "nobody.sock"))
        rank = self.start("report_env.py", env=env)
        info = rank.json_line("info:")
        self.assertEqual(info["companion_env"], [])
        self.assertEqual(rank.finish(), 0)
        lines = rank.stderr_text().splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertTrue(lines[0].startswith("ddplaunch companion:"), lines)

    def test_agent_closing_is_silent(self):
        rank = self.start("report_env.py")
        conn, _ = self.accept_rank(rank)
        conn.sock.close()
        rank.json_line("info:")
        self.assertEqual(rank.finish(), 0)
        self.assertEqual(rank.stderr_text(), "")


if __name__ == "__main__":
    unittest.main()
