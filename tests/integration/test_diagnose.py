"""`ddplaunch diagnose` on the NCCL log fixtures (tests/unit/fixtures/nccl): the text
summary, the --json document, and bad input (one 'ddplaunch diagnose: error:' line, exit 2).
No GPU, no network: it only reads files."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parents[0] / "unit" / "fixtures" / "nccl"
BIN = os.environ.get("DDPLAUNCH_BIN") or shutil.which("ddplaunch") or "ddplaunch"


def diagnose(*args, timeout=30):
    return subprocess.run([BIN, "diagnose", *map(str, args)], capture_output=True, text=True, timeout=timeout)


class DiagnoseTest(unittest.TestCase):

    def assert_input_error(self, res, *mentions):
        self.assertEqual(res.returncode, 2, res.stdout + res.stderr)
        lines = [l for l in res.stderr.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, res.stderr)
        self.assertTrue(lines[0].startswith("ddplaunch diagnose: error:"), lines[0])
        low = lines[0].lower()
        self.assertTrue(any(m.lower() in low for m in mentions), lines[0])
        self.assertEqual(res.stdout, "")

    def test_job_dir_text_names_the_missing_rank(self):
        res = diagnose(FIXTURES / "job_hang")
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertIn("0x9ad9b5e4ab2566da: 4 ranks, 0 complete", res.stdout)
        self.assertIn("likely culprits of a hang at init: ranks 3", res.stdout)
        self.assertIn("NCCL version: 2.24.3", res.stdout)
        self.assertIn("in use: Socket", res.stdout)

    def test_job_dir_json(self):
        res = diagnose(FIXTURES / "job_hang", "--json")
        self.assertEqual(res.returncode, 0, res.stderr)
        doc = json.loads(res.stdout)
        [comm] = doc["communicators"]
        self.assertEqual(comm["comm_id"], "0x9ad9b5e4ab2566da")
        self.assertEqual(comm["nranks"], 4)
        self.assertEqual(comm["ranks_complete"], [])
        self.assertEqual(comm["ranks_missing"], [0, 1, 2, 3])
        self.assertEqual(comm["ranks_not_seen"], [3])
        by_rank = {r["rank"]: r for r in doc["ranks"]}
        self.assertEqual(sorted(by_rank), [0, 1, 2])
        self.assertEqual(by_rank[2]["host"], "gpu-b")
        self.assertEqual(by_rank[2]["pid"], 5201)
        self.assertEqual(by_rank[2]["bus_id"], "18000")
        self.assertEqual(by_rank[2]["cuda_dev"], 0)
        self.assertFalse(by_rank[2]["init_complete"])
        self.assertEqual(doc["transports"], [])
        self.assertEqual(doc["warnings"], [])
        self.assertEqual(doc["network"]["in_use"], ["Socket"])

    def test_complete_job_json_transports_and_timings(self):
        res = diagnose(FIXTURES / "job_ok", "--json")
        self.assertEqual(res.returncode, 0, res.stderr)
        doc = json.loads(res.stdout)
        [comm] = doc["communicators"]
        self.assertEqual(comm["ranks_complete"], [0, 1])
        self.assertEqual(comm["ranks_missing"], [])
        self.assertTrue(all(r["init_complete"] for r in doc["ranks"]))
        self.assertEqual({(t["src_rank"], t["dst_rank"], t["transport"]) for t in doc["transports"]},
                         {(0, 1, "P2P/CUMEM"), (1, 0, "P2P/CUMEM")})
        self.assertAlmostEqual(doc["ranks"][0]["init_seconds"], 0.80)

    def test_log_files_with_warnings_and_hints(self):
        res = diagnose(FIXTURES / "nccl_2.21_ib_completion.log", FIXTURES / "nccl_2.13_conn_closed.log", "--json")
        self.assertEqual(res.returncode, 0, res.stderr)
        doc = json.loads(res.stdout)
        classes = {w["class"]: w for w in doc["warnings"]}
        self.assertIn("NCCL_IB_TIMEOUT", classes["ib_completion_error"]["hint"])
        self.assertEqual(classes["connection_closed_by_peer"]["peer_hosts"], ["hosty"])
        self.assertIn("version_mismatch", classes)
        text = diagnose(FIXTURES / "real_2.28.9")
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("[interface_not_found]", text.stdout)
        self.assertIn("NCCL_SOCKET_IFNAME", text.stdout)

    def test_missing_path(self):
        self.assert_input_error(diagnose("/nonexistent/ddplaunch-diagnose"), "no such file")

    def test_no_nccl_lines(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = Path(tmp) / "attempt_0" / "rank_0"
            p.mkdir(parents=True)
            (p / "stdout.log").write_text("hello\nworld\n")
            self.assert_input_error(diagnose(tmp), "no NCCL lines")
            self.assert_input_error(diagnose(p / "stdout.log"), "no NCCL lines")

    def test_empty_dir(self):
        with tempfile.TemporaryDirectory() as tmp:
            self.assert_input_error(diagnose(tmp), "no log files")

    def test_no_path_and_bad_flag(self):
        self.assert_input_error(diagnose(), "required", "path")
        self.assert_input_error(diagnose(FIXTURES / "job_ok", "--bogus"), "bogus")

    def test_binary_garbage_is_not_fatal(self):
        with tempfile.TemporaryDirectory() as tmp:
            f = Path(tmp) / "nccl.log"
            good = (FIXTURES / "job_ok" / "attempt_0" / "rank_0" / "nccl.log").read_bytes()
            f.write_bytes(os.urandom(4096) + b"\n" + good[: len(good) // 2] + b"\x00\xff\n" + good + os.urandom(100))
            res = diagnose(f, "--json")
            self.assertEqual(res.returncode, 0, res.stderr)
            doc = json.loads(res.stdout)
            self.assertEqual(doc["ranks"][0]["host"], "box")


if __name__ == "__main__":
    unittest.main()
