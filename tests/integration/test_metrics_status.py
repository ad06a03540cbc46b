"""Per-rank resource metrics: each agent samples its ranks' processes
from /proc at the heartbeat interval and the coordinator shows the samples in
`ddplaunch status` (per rank "resources" in --json) and failure.json.

The ranks are plain shell scripts (no runtime, no heartbeats): sampling is by
pid, so they get metrics all the same. Every wait polls with a deadline.
"""

import json
import os
import signal
import stat
import subprocess
import unittest

from launcher_harness import BIN, LauncherTestCase, wait_until

HB = "0.5"  # --heartbeat-interval: samples come at this cadence

# Rank 1 spins on a core, rank 0 sleeps. With "fail", rank 1 instead waits
# for the test's go-ahead and exits 3 (so it has been sampled before it fails).
SCRIPT = r"""#!/bin/sh
out="$1"; mode="$2"
echo $$ > "$out/ready_$RANK"
if [ "$RANK" = 1 ]; then
  if [ "$mode" = fail ]; then
    while [ ! -e "$out/go" ]; do sleep 0.05; done
    exit 3
  fi
  while :; do :; done
fi
exec sleep 600
"""


class MetricsStatusTest(LauncherTestCase):

    def setUp(self):
        super().setUp()
        self.script = self.tmp / "burn.sh"
        self.script.write_text(SCRIPT)
        self.script.chmod(self.script.stat().st_mode | stat.S_IXUSR)

    def status(self, *extra):
        return subprocess.run([str(BIN), "status", "--job", self.job_id, *extra], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, env=self.env(), timeout=15, cwd=str(self.tmp))

    def ranks(self):
        """{rank: per-rank object} of `status --json`, {} while it cannot answer."""
        r = self.status("--json")
        if r.returncode != 0:
            return {}
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            return {}
        return {x["rank"]: x for x in doc.get("ranks", {}).get("ranks", [])}

    def wait_for_resources(self, predicate, timeout=30):
        last = {}

        def ok():
            last.clear()
            last.update(self.ranks())
            return len(last) == 2 and all("resources" in r for r in last.values()) and predicate(last)
        self.assertTrue(wait_until(ok, timeout, interval=0.2),
                        f"status never showed the expected resources: {json.dumps(last, indent=1)}")
        return dict(last)

    def stop(self, launch):
        os.killpg(launch.proc.pid, signal.SIGTERM)
        return self.finish(launch, timeout=30)

    def test_status_shows_cpu_rss_and_threads_per_rank(self):
        launch = self.start(["--nproc-per-node=2", f"--heartbeat-interval={HB}", str(self.script), self.outdir])
        self.wait_for_files(["ready_0", "ready_1"])

        def busy_and_idle(ranks):
            cpu = {k: r["resources"].get("cpu_percent") for k, r in ranks.items()}
            return cpu[1] is not None and cpu[0] is not None and cpu[1] >= 50 and cpu[0] < 10
        ranks = self.wait_for_resources(busy_and_idle)
        for k, r in ranks.items():
            res = r["resources"]
            with self.subTest(rank=k):
                self.assertFalse(r["monitored"], "a shell rank sends no heartbeats")
                self.assertGreater(res["pid"], 0)
                self.assertTrue(os.path.isdir(f"/proc/{res['pid']}"), res)
                with open(f"/proc/{res['pid']}/environ", "rb") as f:
                    self.assertIn(f"RANK={k}".encode(), f.read().split(b"\0"))
                self.assertGreater(res["rss_bytes"], 0)
                self.assertGreaterEqual(res["threads"], 1)
                self.assertGreaterEqual(res["voluntary_ctx_switches"], 0)
                self.assertGreaterEqual(res["nonvoluntary_ctx_switches"], 0)
                self.assertFalse(res["process_gone"])
                self.assertLess(res["age_s"], 10)
                self.assertIn("sampled_at", res)
                self.assertIsInstance(res["gpus"], list)

        # the table has the columns, with the busy rank's CPU
        table = self.status()
        self.assertEqual(table.returncode, 0, table.stderr)
        header = next(l for l in table.stdout.splitlines() if l.lstrip().startswith("rank"))
        self.assertRegex(header, r"\bcpu\b.*\brss\b", table.stdout)
        row1 = next(l for l in table.stdout.splitlines() if l.split() and l.split()[0] == "1")
        self.assertRegex(row1, r"\b\d+%", table.stdout)
        self.assertRegex(row1, r"\d+\.\d (KiB|MiB|GiB)", table.stdout)
        res = self.stop(launch)
        self.assertIsNotNone(res.rc, res.describe())

    def test_failure_json_keeps_the_last_samples(self):
        launch = self.start(["--nproc-per-node=2", f"--heartbeat-interval={HB}", str(self.script), self.outdir,
                             "fail"])
        self.wait_for_files(["ready_0", "ready_1"])
        self.wait_for_resources(lambda ranks: all(r["resources"].get("rss_bytes", 0) > 0 for r in ranks.values()))
        (self.outdir / "go").touch()
        res = self.finish(launch, timeout=30)
        self.assertEqual(res.rc, 3, res.describe())
        report = self.failure_json()
        self.assertEqual(report["root_cause"]["rank"], 1, report)
        self.assertGreater(report["root_cause"]["resources"]["rss_bytes"], 0, report)
        by_rank = {r["rank"]: r for r in report["resources"]}
        self.assertEqual(sorted(by_rank), [0, 1], report)
        for r in by_rank.values():
            self.assertGreater(r["rss_bytes"], 0, r)
            self.assertIn("age_s", r)


if __name__ == "__main__":
    unittest.main()
