"""--metrics-port scraped by a real Prometheus, and `ddplaunch serve
--metrics-port` over TLS.

A 4-rank ddptrain job (Gloo on the CPU, every step slowed down so it runs long
enough) serves /metrics from its coordinator; Debian's Prometheus
(/usr/bin/prometheus), started here with a generated prometheus.yml that
scrapes 127.0.0.1:PORT every second, then answers PromQL through its HTTP API
(/api/v1/query): ddplaunch_rank_step rises on every rank, and there is exactly
one series per rank for all 4. The job is given --token, so the port needs it:
Prometheus sends it as a Bearer credential, and a request without it gets 401.

ServeMetricsTlsTest: `ddplaunch serve` with TLS files serves the port over
https with the same certificate; two agents of a job given --token join it;
/status.json and /metrics show that job only with its token (401 without), and
plain http gets no answer.

Every wait is on a condition with a deadline; Prometheus, ddplaunch and the
ranks are killed and reaped at the end (the harness finds leftovers by the
test token in their environment).
"""

import json
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import unittest
import urllib.parse
from pathlib import Path

import test_tls
from launcher_harness import BIN, DDPTRAIN, DdptrainJobCase, LauncherTestCase, free_port, http_get, wait_until

PROMETHEUS = Path("/usr/bin/prometheus")
NPROC = 4
SLOW_S = 0.2     # --inject-fault slow: seconds added to every step of every rank
DEADLINE = 90.0  # for each condition (a 2-core machine under load starts 4 LibTorch ranks slowly)


@unittest.skipUnless(PROMETHEUS.is_file(), "no /usr/bin/prometheus (deploy/install-deps.sh installs Debian's)")
class PrometheusScrapeTest(DdptrainJobCase):

    def start_prometheus(self, target_port, secret):
        """Prometheus scraping 127.0.0.1:target_port every second with the job's token."""
        prom_dir = self.tmp / "prometheus"
        (prom_dir / "data").mkdir(parents=True)
        config = prom_dir / "prometheus.yml"
        # JSON is YAML: no quoting rules to get wrong.
        config.write_text(json.dumps({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{
                "job_name": "ddplaunch",
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "authorization": {"type": "Bearer", "credentials": secret},
                "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}],
            }],
        }, indent=2))
        self.prom_port = free_port()
        log = open(prom_dir / "prometheus.log", "wb")
        self.addCleanup(log.close)
        proc = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={prom_dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.prom_port}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env(),
            cwd=str(prom_dir), start_new_session=True)
        self.addCleanup(self.stop_process, proc)
        self.prom_log = prom_dir / "prometheus.log"
        ready = wait_until(lambda: proc.poll() is None
                           and http_get(f"http://127.0.0.1:{self.prom_port}/-/ready")[0] == 200
                           or proc.poll() is not None, DEADLINE, interval=0.2)
        self.assertTrue(ready and proc.poll() is None, "Prometheus did not become ready:\n" + self.prom_log_tail())
        return proc

    def prom_log_tail(self):
        try:
            return "\n".join(self.prom_log.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return "(no log)"

    @staticmethod
    def stop_process(proc):
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except OSError:
                pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def query(self, promql):
        """The result vector of an instant query ([] on any failure)."""
        url = (f"http://127.0.0.1:{self.prom_port}/api/v1/query?"
               + urllib.parse.urlencode({"query": promql}))
        status, body = http_get(url)
        if status != 200:
            return []
        try:
            doc = json.loads(body)
        except ValueError:
            return []
        return doc.get("data", {}).get("result", []) if doc.get("status") == "success" else []

    def test_prometheus_scrapes_every_rank_and_sees_steps_rise(self):
        metrics_port = free_port()
        secret = "metrics-" + secrets.token_hex(8)
        launch = self.start([f"--nproc-per-node={NPROC}", "--heartbeat-interval=0.5", f"--token={secret}",
                             f"--metrics-port={metrics_port}", DDPTRAIN, "--steps", 100000, "--log-every", 0,
                             "--inject-fault", f"slow={SLOW_S}@0:*"])
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"

        # The port answers once the coordinator is up, and needs the job's token.
        wait_until(lambda: http_get(metrics_url)[0] != 0 or launch.proc.poll() is not None, DEADLINE, 0.2)
        if launch.proc.poll() is not None or http_get(metrics_url)[0] == 0:
            self.fail("the metrics port never answered" + self.finish(launch, 1).describe())
        self.assertEqual(http_get(metrics_url)[0], 401, "a request without the token must be refused")
        self.assertEqual(http_get(metrics_url, {"Authorization": "Bearer wrong"})[0], 401)
        status, text = http_get(metrics_url, {"Authorization": f"Bearer {secret}"})
        self.assertEqual(status, 200)
        self.assertIn("# TYPE ddplaunch_job_generation gauge", text)

        self.start_prometheus(metrics_port, secret)
        job = f'job_id="{self.job_id}"'

        # Scraped, with the token: up == 1.
        self.assertTrue(wait_until(lambda: [r for r in self.query('up{job="ddplaunch"}') if r["value"][1] == "1"],
                                   DEADLINE, 0.5),
                        "Prometheus never scraped the port successfully:\n" + self.prom_log_tail())

        # One ddplaunch_rank_step series per rank, for all 4 ranks.
        def per_rank():
            result = self.query(f"count by (rank) (ddplaunch_rank_step{{{job}}})")
            return {r["metric"].get("rank"): r["value"][1] for r in result}
        self.assertTrue(wait_until(lambda: len(per_rank()) == NPROC, DEADLINE, 0.5),
                        f"not every rank has a series: {per_rank()}")
        self.assertEqual(per_rank(), {str(r): "1" for r in range(NPROC)})
        series = self.query(f"ddplaunch_rank_step{{{job}}}")
        self.assertEqual(len(series), NPROC, series)
        for s in series:
            self.assertEqual(set(s["metric"]) - {"__name__", "job", "instance"}, {"job_id", "node", "rank", "host"},
                             s["metric"])

        # The step counters rise on every rank.
        rising = f"count(delta(ddplaunch_rank_step{{{job}}}[10s]) > 0)"
        self.assertTrue(wait_until(lambda: [r for r in self.query(rising) if r["value"][1] == str(NPROC)],
                                   DEADLINE, 0.5),
                        f"ddplaunch_rank_step did not rise on all {NPROC} ranks: "
                        f"{self.query(f'delta(ddplaunch_rank_step{{{job}}}[10s])')}")
        first = {s["metric"]["rank"]: float(s["value"][1]) for s in self.query(f"ddplaunch_rank_step{{{job}}}")}
        self.assertTrue(wait_until(
            lambda: all(float(s["value"][1]) > first[s["metric"]["rank"]]
                        for s in self.query(f"ddplaunch_rank_step{{{job}}}")), DEADLINE, 0.5),
            f"steps did not rise between two queries (first {first})")

        # Job series too, with the phase as a labelled gauge (one phase at 1 per rank).
        self.assertEqual(self.query(f"ddplaunch_job_generation{{{job}}}")[0]["value"][1], "0")
        phase_sum = self.query(f"sum by (rank) (ddplaunch_rank_phase{{{job}}})")
        self.assertEqual({r["value"][1] for r in phase_sum}, {"1"}, phase_sum)

        # End the job; the harness's cleanup then checks nothing it started outlives it.
        os.killpg(launch.proc.pid, signal.SIGTERM)
        res = self.finish(launch, timeout=60)
        self.assertNotIn(secret, res.out + res.err, "the token reached the console")


@unittest.skipUnless(shutil.which("openssl"), "openssl is not installed")
class ServeMetricsTlsTest(LauncherTestCase):

    def test_serve_serves_each_job_over_tls_to_its_token(self):
        certs = self.tmp / "certs"
        certs.mkdir()
        test_tls.make_certificates(certs)
        tls = [f"--tls-cert={certs / 'node.pem'}", f"--tls-key={certs / 'node.key'}"]
        metrics_port = free_port()
        serve = self.start(None, raw_cmd=[str(BIN), "serve", "--port=0", f"--metrics-port={metrics_port}", *tls])
        found = {}

        def listening():
            text = serve.out_path.read_text()
            m = re.search(r"listening on \S+:(\d+)", text)
            u = re.search(r"metrics on (\S+)", text)
            if m and u:
                found.update(port=int(m.group(1)), url=u.group(1))
            return bool(found) or serve.proc.poll() is not None
        wait_until(listening, 20)
        if not found:
            self.fail("serve did not start" + self.finish(serve, 1).describe())
        self.assertEqual(found["url"], f"https://127.0.0.1:{metrics_port}/")

        token = "serve-" + secrets.token_hex(8)
        agents = [self.start(["--nnodes=2", f"--node-rank={k}", f"--rdzv-endpoint=127.0.0.1:{found['port']}",
                              "--nproc-per-node=1", f"--token={token}", *tls, f"--tls-ca={certs / 'ca.pem'}",
                              "sh", "-c", "sleep 120"]) for k in range(2)]
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        status_url = f"https://127.0.0.1:{metrics_port}/status.json"
        bearer = {"Authorization": f"Bearer {token}"}

        def formed():
            status, body = http_get(status_url, bearer, context=context)
            return status == 200 and json.loads(body).get("world_size") == 2
        if not wait_until(lambda: formed() or any(a.proc.poll() is not None for a in agents), 60, 0.3) \
                or not formed():
            self.fail("the job never formed at serve: " + repr(http_get(status_url, bearer, context=context))
                      + "".join(self.finish(a, 1).describe() for a in agents))

        self.assertEqual(http_get(status_url, context=context)[0], 401)
        self.assertEqual(http_get(status_url, {"Authorization": "Bearer wrong"}, context=context)[0], 401)
        status, body = http_get(status_url + "?token=" + token, context=context)
        self.assertEqual(status, 200)
        doc = json.loads(body)
        self.assertEqual(doc["job_id"], self.job_id)
        self.assertEqual(len(doc["ranks"]["ranks"]), 2)
        self.assertTrue(all("state" in r for r in doc["ranks"]["ranks"]), doc)
        status, text = http_get(f"https://127.0.0.1:{metrics_port}/metrics", bearer, context=context)
        self.assertEqual(status, 200)
        self.assertIn(f'ddplaunch_job_world_size{{job_id="{self.job_id}"}} 2', text)
        self.assertEqual(http_get(f"https://127.0.0.1:{metrics_port}/metrics", context=context)[0], 401)
        # The same port without TLS: no HTTP answer.
        self.assertNotEqual(http_get(f"http://127.0.0.1:{metrics_port}/metrics", bearer)[0], 200)

        for a in agents:
            os.killpg(a.proc.pid, signal.SIGTERM)
        for a in agents:
            self.finish(a, timeout=30)
        serve.proc.send_signal(signal.SIGTERM)
        res = self.finish(serve, timeout=30)
        self.assertEqual(res.rc, 128 + signal.SIGTERM, res.describe())
        self.assertNotIn(token, res.out + res.err, "the token reached serve's log")


if __name__ == "__main__":
    unittest.main()
