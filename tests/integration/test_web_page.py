"""The live page of --metrics-port in a real browser.

While a 4-rank ddptrain job runs, headless Chromium (Debian's /usr/bin/chromium)
loads http://127.0.0.1:PORT/ twice, a few steps apart, each time with
--dump-dom after a virtual-time budget (the page's script polls /status.json
and draws the table in that time): every rank has its row in both, the page
updated itself, and the step numbers moved on between the two loads. A
screenshot of the page (1280x800) is kept in the test's output folder:
$DDPT_OUTPUT_DIR/test_web_page/ when set, else
${TMPDIR:-/tmp}/ddplaunch-test-output/test_web_page/ (the per-test temporary
folder is deleted at the end), with the two DOM dumps beside it.
"""

import json
import os
import re
import signal
import subprocess
import tempfile
import unittest
import urllib.error
import urllib.request
from pathlib import Path

from launcher_harness import DDPTRAIN, DdptrainJobCase, free_port, wait_until

CHROMIUM = Path("/usr/bin/chromium")
NPROC = 4
SLOW_S = 0.2
DEADLINE = 90.0
ROW_RE = re.compile(r'<tr\b[^>]*\bdata-rank="(\d+)"(?:[^>]*\bdata-step="(\d+)")?')
UPDATES_RE = re.compile(r'<body\b[^>]*\bdata-updates="(\d+)"')


def output_dir():
    base = os.environ.get("DDPT_OUTPUT_DIR") or os.path.join(tempfile.gettempdir(), "ddplaunch-test-output")
    d = Path(base) / "test_web_page"
    d.mkdir(parents=True, exist_ok=True)
    return d


def status_doc(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status.json", timeout=5) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def steps_of(doc):
    """{rank: step} of the monitored ranks of a /status.json document."""
    if not doc:
        return {}
    ranks = (doc.get("ranks") or {}).get("ranks") or []
    return {r["rank"]: r["step"] for r in ranks if r.get("monitored") and isinstance(r.get("step"), int)}


@unittest.skipUnless(CHROMIUM.is_file(), "no /usr/bin/chromium (deploy/install-deps.sh installs Debian's)")
class WebPageTest(DdptrainJobCase):

    def chromium(self, url, *args):
        """Runs headless Chromium on url (bounded); returns its stdout."""
        profile = self.tmp / "chromium-profile"
        cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
               "--virtual-time-budget=5000", *args, url]
        env = self.env({"HOME": str(self.tmp)})
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                           timeout=120, cwd=str(self.tmp), start_new_session=True)
        self.assertEqual(r.returncode, 0, f"chromium failed:\n{r.stderr[-3000:]}")
        return r.stdout

    def load(self, url, name):
        """The page's DOM after its script ran: {rank: step or None}, and how often it updated."""
        dom = self.chromium(url, "--dump-dom")
        (output_dir() / name).write_text(dom)
        rows = {int(rank): (int(step) if step else None) for rank, step in ROW_RE.findall(dom)}
        m = UPDATES_RE.search(dom)
        return rows, int(m.group(1)) if m else 0, dom

    def test_page_shows_every_rank_and_updates(self):
        port = free_port()
        launch = self.start([f"--nproc-per-node={NPROC}", "--heartbeat-interval=0.5", f"--metrics-port={port}",
                             DDPTRAIN, "--steps", 100000, "--log-every", 0, "--inject-fault", f"slow={SLOW_S}@0:*"])
        url = f"http://127.0.0.1:{port}/"

        # Every rank has sent a heartbeat with a step.
        wait_until(lambda: len(steps_of(status_doc(port))) == NPROC or launch.proc.poll() is not None,
                   DEADLINE, 0.3)
        if len(steps_of(status_doc(port))) != NPROC:
            self.fail(f"not every rank reported a step: {status_doc(port)}" + self.finish(launch, 1).describe())

        rows1, updates1, dom1 = self.load(url, "dom_1.html")
        self.assertEqual(sorted(rows1), list(range(NPROC)), "a rank is missing from the page:\n" + dom1[-3000:])
        self.assertGreater(updates1, 0, "the page's script never drew /status.json")
        self.assertTrue(all(step is not None for step in rows1.values()), rows1)

        # A few steps later (by the job's own count, not a fixed sleep), load again.
        first = steps_of(status_doc(port))
        moved = wait_until(lambda: all(steps_of(status_doc(port)).get(r, -1) >= first[r] + 3 for r in first),
                           DEADLINE, 0.3)
        self.assertTrue(moved, f"the job did not advance: {first} then {steps_of(status_doc(port))}")
        rows2, updates2, dom2 = self.load(url, "dom_2.html")
        self.assertEqual(sorted(rows2), list(range(NPROC)), "a rank is missing from the page:\n" + dom2[-3000:])
        self.assertGreater(updates2, 0)
        for r in range(NPROC):
            self.assertGreater(rows2[r], rows1[r], f"rank {r}'s step did not change between loads: {rows1} {rows2}")

        shot = output_dir() / "page.png"
        if shot.exists():
            shot.unlink()
        self.chromium(url, f"--screenshot={shot}", "--window-size=1280,800")
        self.assertTrue(shot.is_file() and shot.stat().st_size > 1000, f"no screenshot at {shot}")
        print(f"\ntest_web_page: screenshot {shot}")

        os.killpg(launch.proc.pid, signal.SIGTERM)
        self.finish(launch, timeout=60)


if __name__ == "__main__":
    unittest.main()
