"""Imbalance warnings of a running job: one rank slowed down is named.

A 4-rank ddptrain job (Gloo on the CPU) runs with --metrics-port; rank 2 sleeps
SLOW_S in every step from step 3 on (--inject-fault slow), in phase "other"
(before its step's data), while the others wait for it in the gradient
all-reduce. The coordinator must warn, once, that rank 2 is a straggler, say
that its heartbeats found it in phase other and what to look at, and show the
warning:
  - on the console (ddplaunch's stderr): "straggler: rank 2 (...) is a straggler: ...";
  - in /status.json (the page's data source): the health view's "warnings"
    list and rank 2's own "warnings";
  - in /metrics: ddplaunch_rank_warning{...,rank="2",kind="straggler"} 1 and
    ddplaunch_job_warnings_total;
  - in `ddplaunch status`, under the table;
  - on the page itself, drawn by headless Chromium (skipped without /usr/bin/chromium).
No other rank is warned about. Every wait is on a condition with a deadline;
the job is stopped with SIGTERM and reaped (the harness then checks nothing
it started survives).
"""

import os
import re
import signal
import subprocess
import unittest

from launcher_harness import BIN, DDPTRAIN, DdptrainJobCase, free_port, http_get, wait_until

import test_web_page  # its chromium(); the module, so that its test case is not run here too
from test_web_page import CHROMIUM, status_doc

NPROC = 4
SLOW_RANK = 2
SLOW_S = 0.6     # long beside a step of the default model, so rank 2's heartbeats find it asleep
DEADLINE = 120.0  # a loaded 2-core machine starts 4 LibTorch ranks slowly
CONSOLE_RE = re.compile(r"straggler: rank (\d+) \(host [^)]*\) is a straggler: .*; look at: (.*)")
WARNING_LI_RE = re.compile(r'<li class="warn" data-rank="(\d+)" data-kind="(\w+)">([^<]*)</li>')


def health_warnings(doc):
    """The health view's warnings of a /status.json document ([] while none)."""
    return ((doc or {}).get("ranks") or {}).get("warnings") or []


class ImbalanceWarningTest(DdptrainJobCase):

    def console_warnings(self, launch):
        return [(int(m.group(1)), m.group(0)) for m in CONSOLE_RE.finditer(
            launch.err_path.read_bytes().decode("utf-8", "replace"))]

    def test_a_slowed_rank_is_named_on_the_console_in_metrics_status_and_the_page(self):
        port = free_port()
        launch = self.start([f"--nproc-per-node={NPROC}", "--heartbeat-interval=0.5", f"--metrics-port={port}",
                             DDPTRAIN, "--steps", 100000, "--log-every", 0,
                             "--inject-fault", f"slow={SLOW_S}@3:{SLOW_RANK}"])

        # The console names rank 2 (and only rank 2).
        found = wait_until(lambda: self.console_warnings(launch) or launch.proc.poll() is not None, DEADLINE, 0.2)
        if not self.console_warnings(launch):
            self.fail(f"no straggler warning on the console (found {found!r})" + self.finish(launch, 1).describe())
        console = self.console_warnings(launch)
        self.assertEqual([rank for rank, _ in console], [SLOW_RANK], console)
        self.assertIn("its heartbeats found it in phase other", console[0][1])
        self.assertIn(f"look at: work only rank {SLOW_RANK} does outside the training step", console[0][1])

        # /status.json: the list the page draws, and the rank's own entry.
        doc = status_doc(port)
        warnings = health_warnings(doc)
        stragglers = [w for w in warnings if w.get("kind") == "straggler"]
        self.assertEqual([w["rank"] for w in stragglers], [SLOW_RANK], warnings)
        w = stragglers[0]
        self.assertRegex(w["summary"], rf"^rank {SLOW_RANK} \(host .*\) is a straggler: busy \d+\.\d+ m?s per step, "
                                       r"the others \d+\.\d+ m?s \(median\)")
        self.assertRegex(w["summary"], r"its heartbeats found it in phase other \d+% of the time, "
                                       r"the others waited in a collective \d+% of theirs")
        self.assertIn(f"work only rank {SLOW_RANK} does", w["look_at"])
        self.assertGreaterEqual(w["age_s"], 0)
        self.assertNotIn("gpu", w, "a straggler is no GPU's warning")
        self.assertGreaterEqual(doc["ranks"]["warnings_total"], 1)
        by_rank = {r["rank"]: r for r in doc["ranks"]["ranks"]}
        self.assertEqual(by_rank[SLOW_RANK].get("warnings"), [{"kind": "straggler"}], by_rank[SLOW_RANK])
        for r in set(range(NPROC)) - {SLOW_RANK}:
            self.assertNotIn("warnings", by_rank[r], by_rank[r])

        # /metrics: one series for the warning, with the rank's labels, and the job's count.
        status, text = http_get(f"http://127.0.0.1:{port}/metrics")
        self.assertEqual(status, 200, text[-2000:])
        series = re.findall(r'^ddplaunch_rank_warning\{([^}]*)\} (\S+)$', text, re.M)
        self.assertEqual(len(series), 1, series)
        labels = dict(re.findall(r'(\w+)="([^"]*)"', series[0][0]))
        self.assertEqual(labels["rank"], str(SLOW_RANK), labels)
        self.assertEqual(labels["kind"], "straggler", labels)
        self.assertEqual(labels["job_id"], self.job_id, labels)
        self.assertEqual(series[0][1], "1")
        total = re.search(rf'^ddplaunch_job_warnings_total\{{job_id="{re.escape(self.job_id)}"\}} (\d+)$', text, re.M)
        self.assertIsNotNone(total, text[-3000:])
        self.assertGreaterEqual(int(total.group(1)), 1)

        # `ddplaunch status` prints it under the table.
        table = subprocess.run([str(BIN), "status", "--job", self.job_id], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, env=self.env(), timeout=15, cwd=str(self.tmp))
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertRegex(table.stdout, r"warnings \(\d+ given in this generation\):\n  straggler: rank 2 \(")

        # The page draws it (its script polls /status.json).
        if CHROMIUM.is_file():
            dom = test_web_page.WebPageTest.chromium(self, f"http://127.0.0.1:{port}/", "--dump-dom")
            items = WARNING_LI_RE.findall(dom)
            self.assertIn((str(SLOW_RANK), "straggler"), [(r, k) for r, k, _ in items], dom[-3000:])
            shown = next(t for r, k, t in items if r == str(SLOW_RANK))
            self.assertIn("is a straggler", shown)
            self.assertIn("look at: work only rank 2 does", shown)

        os.killpg(launch.proc.pid, signal.SIGTERM)
        res = self.finish(launch, timeout=DEADLINE * 3)
        self.assertEqual([rank for rank, _ in self.console_warnings(launch)], [SLOW_RANK],
                         "warned once, about rank 2 only" + res.describe())


if __name__ == "__main__":
    unittest.main()
