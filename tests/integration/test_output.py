"""Console prefixes, whole-line output, per-rank log files, --redirects/--tee/--local-ranks-filter."""

import re
import unittest

from launcher_harness import LauncherTestCase, worker

HELLO = worker("hello.sh")
SPAM = worker("spam.py")


class OutputTest(LauncherTestCase):

    def test_prefixes_and_streams(self):
        res = self.run_launcher(["--nproc-per-node=3", HELLO])
        self.assertEqual(res.rc, 0, res.describe())
        out = res.out.splitlines()
        for r in range(3):
            self.assertIn(f"[0:{r}] hello stdout rank {r}", out, res.describe())
            self.assertIn(f"[0:{r}] hello stderr rank {r}", res.err.splitlines(), res.describe())
            self.assertNotIn(f"hello stderr rank {r}", res.out)
            self.assertNotIn(f"hello stdout rank {r}", res.err)
        # stdout carries worker lines only
        self.assertEqual(len(out), 3, res.describe())

    def test_per_rank_log_files_raw(self):
        res = self.run_launcher(["--nproc-per-node=2", HELLO])
        self.assertEqual(res.rc, 0, res.describe())
        for r in range(2):
            d = self.rank_dir(r)
            self.assertEqual((d / "stdout.log").read_text(), f"hello stdout rank {r}\n")
            self.assertEqual((d / "stderr.log").read_text(), f"hello stderr rank {r}\n")

    def test_no_interleaving_many_long_lines(self):
        n, length, nproc = 200, 3000, 4
        res = self.run_launcher([f"--nproc-per-node={nproc}", SPAM, n, length], timeout=30)
        self.assertEqual(res.rc, 0, res.describe())
        for stream, text, tag, ch in (("stdout", res.out, "R", "x"), ("stderr", res.err, "E", "y")):
            line_re = re.compile(r"^\[0:(\d)\] %s(\d):(\d+):%s{%d}$" % (tag, ch, length))
            seen = {r: [] for r in range(nproc)}
            for line in text.splitlines():
                if stream == "stderr" and line.startswith("[ddplaunch"):
                    continue  # ddplaunch's own messages
                if re.match(r"^\[0:(\d)\] tail-no-newline-R\1$", line):
                    continue
                m = line_re.match(line)
                self.assertIsNotNone(m, f"garbled {stream} line (len {len(line)}): {line[:120]!r}...")
                self.assertEqual(m.group(1), m.group(2), f"prefix/rank mismatch: {line[:60]!r}")
                seen[int(m.group(1))].append(int(m.group(3)))
            for r in range(nproc):
                self.assertEqual(seen[r], list(range(n)),
                                 f"{stream} of rank {r}: lines missing or out of order")
        # a final line without newline is not lost
        for r in range(nproc):
            self.assertIn(f"[0:{r}] tail-no-newline-R{r}", res.out.splitlines())
        # log files hold the raw streams
        for r in range(nproc):
            expected_out = "".join(f"R{r}:{i}:{'x' * length}\n" for i in range(n))
            expected_out += f"tail-no-newline-R{r}"
            got = (self.rank_dir(r) / "stdout.log").read_text()
            self.assertEqual(got.rstrip("\n"), expected_out, f"rank {r} stdout.log differs")
            expected_err = "".join(f"E{r}:{i}:{'y' * length}\n" for i in range(n))
            self.assertEqual((self.rank_dir(r) / "stderr.log").read_text(), expected_err)

    def test_redirects_3_files_only(self):
        res = self.run_launcher(["--nproc-per-node=2", "--redirects=3", HELLO])
        self.assertEqual(res.rc, 0, res.describe())
        self.assertNotIn("hello stdout", res.out + res.err, res.describe())
        self.assertNotIn("hello stderr", res.out + res.err, res.describe())
        self.assertEqual(res.out, "", res.describe())
        for r in range(2):
            self.assertIn("hello stdout", (self.rank_dir(r) / "stdout.log").read_text())
            self.assertIn("hello stderr", (self.rank_dir(r) / "stderr.log").read_text())

    def test_redirects_1_stdout_only(self):
        res = self.run_launcher(["--nproc-per-node=2", "--redirects=1", HELLO])
        self.assertEqual(res.rc, 0, res.describe())
        self.assertNotIn("hello stdout", res.out, res.describe())
        for r in range(2):
            self.assertIn(f"[0:{r}] hello stderr rank {r}", res.err.splitlines())
            self.assertIn("hello stdout", (self.rank_dir(r) / "stdout.log").read_text())

    def test_redirects_2_stderr_only(self):
        res = self.run_launcher(["--nproc-per-node=2", "--redirects=2", HELLO])
        self.assertEqual(res.rc, 0, res.describe())
        self.assertNotIn("hello stderr", res.err, res.describe())
        for r in range(2):
            self.assertIn(f"[0:{r}] hello stdout rank {r}", res.out.splitlines())
            self.assertIn("hello stderr", (self.rank_dir(r) / "stderr.log").read_text())

    def test_redirects_per_rank(self):
        res = self.run_launcher(["--nproc-per-node=3", "--redirects=0:1,1:2", HELLO])
        self.assertEqual(res.rc, 0, res.describe())
        out, err = res.out.splitlines(), res.err.splitlines()
        self.assertNotIn("[0:0] hello stdout rank 0", out)
        self.assertIn("[0:0] hello stderr rank 0", err)
        self.assertIn("[0:1] hello stdout rank 1", out)
        self.assertNotIn("[0:1] hello stderr rank 1", err)
        # rank 2 not mentioned: console as usual
        self.assertIn("[0:2] hello stdout rank 2", out)
        self.assertIn("[0:2] hello stderr rank 2", err)
        for r in range(3):
            self.assertEqual((self.rank_dir(r) / "stdout.log").read_text(),
                             f"hello stdout rank {r}\n")
            self.assertEqual((self.rank_dir(r) / "stderr.log").read_text(),
                             f"hello stderr rank {r}\n")

    def test_tee_accepted(self):
        res = self.run_launcher(["--nproc-per-node=2", "--tee=3", HELLO])
        self.assertEqual(res.rc, 0, res.describe())
        for r in range(2):
            self.assertIn(f"[0:{r}] hello stdout rank {r}", res.out.splitlines())
            self.assertIn(f"[0:{r}] hello stderr rank {r}", res.err.splitlines())
            self.assertIn("hello stdout", (self.rank_dir(r) / "stdout.log").read_text())

    def test_local_ranks_filter(self):
        res = self.run_launcher(["--nproc-per-node=3", "--local-ranks-filter=0,2", HELLO])
        self.assertEqual(res.rc, 0, res.describe())
        self.assertEqual(sorted(res.out_by_rank()), [0, 2], res.describe())
        self.assertEqual(sorted(res.err_by_rank()), [0, 2], res.describe())
        self.assertNotIn("hello stdout rank 1", res.out + res.err)
        self.assertNotIn("hello stderr rank 1", res.out + res.err)
        # files get everything
        self.assertEqual((self.rank_dir(1) / "stdout.log").read_text(), "hello stdout rank 1\n")
        self.assertEqual((self.rank_dir(1) / "stderr.log").read_text(), "hello stderr rank 1\n")

    def test_local_ranks_filter_still_reports_filtered_failure(self):
        # output of rank 1 is filtered, but its failure is ddplaunch's business
        res = self.run_launcher(["--nproc-per-node=2", "--local-ranks-filter=0",
                                 worker("die_on_rank.sh"), "exit:4", "1", self.outdir])
        self.assertEqual(res.rc, 4, res.describe())
        self.assertNotIn(1, res.out_by_rank())
        self.assertNotIn(1, res.err_by_rank())
        self.assertRegex(res.err, r"rank 1 \((?:[^()]*, )?local rank 1, pid \d+\) failed: exit code 4",
                         res.describe())
        self.assertIn("rank 1 is failing on purpose",
                      (self.rank_dir(1) / "stderr.log").read_text())


if __name__ == "__main__":
    unittest.main()
