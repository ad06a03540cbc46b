"""ddplaunch --sync DIR=s3://BUCKET/PREFIX (README: "Checkpoints synced to object
storage") end to end, against a real S3-compatible server on loopback that verifies
SigV4 signatures (s3_server.py; deploy/install-deps.sh installs it):

  * a PyTorch script's torch.save checkpoints (temp name + os.replace) go up once,
    under their final names, byte-equal; temp files never;
  * a file over the 8 MiB part size goes up as a multipart upload;
  * the server stopped mid-run: one warning, the job runs on, everything is sent once
    it is back, and one "uploads work again" line;
  * a wrong secret: exit 0, one warning, the end report names what was not sent, the
    secret nowhere; no credentials at all: one warning, the job runs;
  * a fresh, empty checkpoint folder is filled from the bucket, and ddptrain resumes
    from it bitwise equal to an uninterrupted run;
  * --sync-delete; `ddplaunch list --json` and `status`; `ddplaunch doctor --sync`;
  * bad usage.

Workers run with PYTHON_EXEC (torch 1.13 from /usr/bin/python3) on Gloo over
loopback. Each test has its own key prefix; every wait is for a condition (a file,
a log line, an object), bounded.
"""

import hashlib
import json
import os
import re
import secrets
import subprocess
import time
import unittest
from pathlib import Path

from launcher_harness import (BIN, PYTHON, REPO, LauncherTestCase, Result, kill_marked,
                              torch_available, wait_for_file, wait_until, worker)
from s3_server import S3Server

SCHED_IDLE = getattr(os, "SCHED_IDLE", 5)   # the uploads' thread's policy

DDPTRAIN = Path(os.environ.get("DDPTRAIN_BIN") or (REPO / "build" / "worker" / "ddptrain" / "ddptrain")).absolute()
SAVER = worker("torch_save_checkpoints.py")
TORCH_OK = torch_available()
PART = 8 * 1024 * 1024

# Reads pairs of state_dict files and says whether they are bitwise equal (as test_ddptrain).
_COMPARE = r"""
import json, sys, torch
rows = []
for a, b in json.loads(sys.argv[1]):
    da, db = torch.load(a), torch.load(b)
    differ = [k for k in da if k not in db or da[k].dtype != db[k].dtype or da[k].shape != db[k].shape
              or not torch.equal(da[k], db[k])]
    rows.append({"a": a, "b": b, "names_a": list(da), "names_b": list(db), "differ": differ})
print(json.dumps(rows))
"""

SUMMARY_RE = r"--sync s3://{bucket}/{prefix}/: (\d+) file\(s\) uploaded \(([^)]*)\), (\d+) pending"


class SyncCase(LauncherTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.s3 = S3Server(bucket="ddp-sync-e2e").start()
        cls.addClassCleanup(cls.s3.close)

    def setUp(self):
        super().setUp()
        self.home = self.tmp / "home"          # no ~/.aws of the developer
        self.home.mkdir()
        self.runtime_dir = self.tmp / "xdg"    # a private job registry
        self.runtime_dir.mkdir(mode=0o700)
        self.gate = self.tmp / "gate"
        self.gate.mkdir()
        self.prefix = self._testMethodName

    def env(self, extra=None, drop=(), server=None, credentials=True):
        env = super().env(None, drop)
        for k in [k for k in env if k.startswith("AWS_")]:
            del env[k]
        env.update({"HOME": str(self.home), "XDG_RUNTIME_DIR": str(self.runtime_dir),
                    "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo"),
                    "OMP_NUM_THREADS": "1"})
        if credentials:
            env.update((server or self.s3).env())
        env.update(extra or {})
        return env

    # ---- helpers

    def target(self, server=None, prefix=None):
        return f"s3://{(server or self.s3).bucket}/{prefix or self.prefix}"

    def sync_opt(self, folder="ckpt", server=None, prefix=None):
        return ["--sync", f"{folder}={self.target(server, prefix)}"]

    def keys(self, server=None, prefix=None):
        """{name relative to the prefix: bytes} of what the bucket holds."""
        p = (prefix or self.prefix) + "/"
        return {k[len(p):]: v for k, v in (server or self.s3).objects(p).items()}

    def requests(self, server=None, prefix=None):
        """The server's request lines for this test's prefix, as (method, key-with-query)."""
        server = server or self.s3
        marker = f"/{server.bucket}/{prefix or self.prefix}/"
        out = []
        for line in server.requests():
            parts = line.split()
            if len(parts) >= 2 and parts[1].startswith(marker):
                out.append((parts[0], parts[1][len(marker):]))
        return out

    @staticmethod
    def digests(files):
        """{name: (size, sha256)}: what assertEqual can print when files differ."""
        return {k: (len(v), hashlib.sha256(v).hexdigest()[:16]) for k, v in files.items()}

    def local_files(self, folder):
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}

    def summary(self, res, server=None, prefix=None):
        """(uploaded, pending, the whole line) of the closing --sync report in stderr."""
        rx = re.compile(SUMMARY_RE.format(bucket=re.escape((server or self.s3).bucket),
                                          prefix=re.escape(prefix or self.prefix)))
        lines = [l for l in res.err.splitlines() if rx.search(l)]
        self.assertEqual(len(lines), 1, "one closing --sync report expected" + res.describe())
        m = rx.search(lines[0])
        return int(m.group(1)), int(m.group(3)), lines[0]

    def lines_with(self, text, needle):
        return [l for l in text.splitlines() if needle in l]

    def tell(self, name):
        tmp = self.gate / ("." + name)
        tmp.write_text("1")
        os.replace(tmp, self.gate / name)

    def wait_text(self, path, needle, timeout=20.0):
        ok = wait_until(lambda: needle in Path(path).read_text(errors="replace"), timeout, 0.1)
        self.assertTrue(ok, f"{needle!r} not in {path} within {timeout} s:\n{Path(path).read_text(errors='replace')[-3000:]}")

    def sync_json(self):
        path = self.job_dir() / "sync.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def ctl(self, *args, env=None, timeout=30.0):
        cmd = [str(BIN), *map(str, args)]
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               env=env or self.env(), cwd=str(self.tmp), timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_marked(self.token)
            self.fail(f"{' '.join(cmd)}: still running after {timeout} s")
        return Result(cmd, p.returncode, p.stdout, p.stderr, time.monotonic() - t0)

    def save_job(self, nproc, saver_args, sync=None, extra_opts=(), timeout=60.0, env=None):
        """ddplaunch [--sync ckpt=...] torch_save_checkpoints.py ckpt ARGS to its end (cwd: self.tmp)."""
        args = [f"--nproc-per-node={nproc}", *(self.sync_opt() if sync is None else sync), *extra_opts,
                SAVER, "ckpt", *map(str, saver_args)]
        return self.run_launcher(args, timeout=timeout, env=env or self.env())

    @staticmethod
    def sync_thread_policy(pid):
        """The scheduling policy of ddplaunch's uploads' thread (from /proc)."""
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                if (task / "comm").read_text().strip() != "ddplaunch-sync":
                    continue
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            return int(fields[41 - 3])   # field 41 of proc(5), counted from field 3
        return None

    def assert_ok(self, res):
        self.assertEqual(res.rc, 0, res.describe())

    def assert_secret_nowhere(self, secret, *texts):
        for t in texts:
            self.assertNotIn(secret, t)
        for root, _dirs, files in os.walk(self.log_dir):
            for f in files:
                data = Path(root, f).read_bytes()
                self.assertNotIn(secret.encode(), data, f"the secret is in {Path(root, f)}")


class UploadTest(SyncCase):
    @unittest.skipUnless(TORCH_OK, "PYTHON_EXEC cannot import torch.distributed")
    def test_torch_save_renamed_into_place_goes_up_once_and_temp_files_never(self):
        res = self.save_job(2, ["--steps", 3])
        self.assert_ok(res)
        local = self.local_files(self.tmp / "ckpt")
        self.assertEqual(sorted(local), ["ckpt_1.pt", "ckpt_2.pt", "ckpt_3.pt"], res.describe())
        held = self.keys()
        self.assertEqual(sorted(held), sorted(local), "the bucket should hold exactly the final files")
        self.assertEqual(self.digests(held), self.digests(local), "the bucket's files differ from the local ones")
        self.assertEqual([k for k in held if k.endswith(".tmp")], [])
        puts = [key for method, key in self.requests() if method in ("PUT", "POST")]
        self.assertEqual(sorted(puts), sorted(local), f"one PUT per final file, no temp file: {self.requests()}")
        uploaded, pending, line = self.summary(res)
        self.assertEqual((uploaded, pending), (3, 0), line)

    def test_a_file_over_the_part_size_goes_up_as_multipart(self):
        res = self.save_job(1, ["--plain", "--steps", 0, "--big-mib", 20])
        self.assert_ok(res)
        data = (self.tmp / "ckpt" / "big.bin").read_bytes()
        self.assertEqual(len(data), 20 << 20)
        held = self.keys()
        self.assertEqual(sorted(held), ["big.bin"])
        self.assertTrue(held["big.bin"] == data, "big.bin differs in the bucket")
        reqs = self.requests()
        self.assertIn(("POST", "big.bin?uploads="), reqs, reqs)
        parts = sorted(int(m.group(1)) for _meth, key in reqs
                       for m in [re.search(r"[?&]partNumber=(\d+)", key)] if m)
        self.assertEqual(parts, [1, 2, 3], f"three 8 MiB parts expected (20 MiB): {reqs}")
        self.assertEqual([r for r in reqs if r == ("PUT", "big.bin")], [], "no single PUT of the whole file")
        self.assertTrue(any(m == "POST" and "uploadId=" in k for m, k in reqs), f"no complete request: {reqs}")
        self.assertEqual(self.summary(res)[:2], (1, 0))

    def test_sync_delete_mirrors_deletions_and_without_it_they_stay(self):
        for flag in (True, False):
            with self.subTest(sync_delete=flag):
                prefix = f"{self.prefix}_{int(flag)}"
                folder = f"ckpt{int(flag)}"
                for name in ("go_1", "go_2"):
                    self.tell(name)
                args = [f"--nproc-per-node=1", *self.sync_opt(folder, prefix=prefix),
                        *(["--sync-delete"] if flag else []), f"--rdzv-id={self.job_id}-{int(flag)}",
                        SAVER, folder, "--plain", "--steps", 2, "--gate", self.gate, "--delete-first"]
                launch = self.start(args, job_id=False)
                # both checkpoints in the bucket before the script deletes the first
                ok = wait_until(lambda: sorted(self.keys(prefix=prefix)) == ["ckpt_1.pt", "ckpt_2.pt"]
                                or launch.proc.poll() is not None, 30, 0.2)
                self.assertTrue(ok and launch.proc.poll() is None,
                                f"both files not uploaded within 30 s: {self.keys(prefix=prefix)}")
                self.tell("go_delete")
                res = self.finish(launch, 30)
                self.assert_ok(res)
                self.assertFalse((self.tmp / folder / "ckpt_1.pt").exists())
                held = sorted(self.keys(prefix=prefix))
                deletes = [k for m, k in self.requests(prefix=prefix) if m == "DELETE"]
                if flag:
                    self.assertEqual(held, ["ckpt_2.pt"], res.describe())
                    self.assertEqual(deletes, ["ckpt_1.pt"])
                else:
                    self.assertEqual(held, ["ckpt_1.pt", "ckpt_2.pt"], res.describe())
                    self.assertEqual(deletes, [])
                for name in ("go_1", "go_2", "go_delete"):
                    (self.gate / name).unlink()

    def test_a_failed_job_still_uploads_and_failure_json_has_the_sync_state(self):
        res = self.save_job(1, ["--plain", "--steps", 2, "--exit-code", 3])
        self.assertNotEqual(res.rc, 0, res.describe())
        local = self.local_files(self.tmp / "ckpt")
        self.assertEqual(sorted(local), ["ckpt_1.pt", "ckpt_2.pt"], res.describe())
        self.assertEqual(self.digests(self.keys()), self.digests(local))
        self.assertEqual(self.summary(res)[:2], (2, 0))
        (t,) = self.failure_json()["sync"]["targets"]
        self.assertEqual((t["target"], t["uploaded"], t["pending"], t["failing"]),
                         (self.target() + "/", 2, 0, []), t)

    def test_list_json_shows_the_sync_state(self):
        res = self.save_job(1, ["--plain", "--steps", 2])
        self.assert_ok(res)
        size = sum(len(v) for v in self.local_files(self.tmp / "ckpt").values())
        listed = self.ctl("list", "--json")
        self.assertEqual(listed.rc, 0, listed.describe())
        rows = [r for r in json.loads(listed.out) if r.get("job_id") == self.job_id]
        self.assertEqual(len(rows), 1, listed.out)
        targets = rows[0]["sync"]["targets"]
        self.assertEqual(len(targets), 1, targets)
        t = targets[0]
        self.assertEqual(t["target"], self.target() + "/")
        self.assertEqual((t["uploaded"], t["uploaded_bytes"], t["pending"], t["failing"], t["waiting"]),
                         (2, size, 0, [], []), t)
        self.assertEqual(self.sync_json()["targets"][0]["uploaded"], 2)


class FailureTest(SyncCase):
    def test_server_down_mid_run_one_warning_then_everything_is_sent(self):
        with S3Server(bucket="ddp-sync-down") as s3:
            for name in ("go_1",):
                self.tell(name)
            launch = self.start([f"--nproc-per-node=1", *self.sync_opt(server=s3), SAVER, "ckpt", "--plain",
                                 "--steps", 3, "--gate", self.gate], env=self.env(server=s3))
            self.assertTrue(wait_until(lambda: "ckpt_1.pt" in self.keys(server=s3) or launch.proc.poll() is not None,
                                       30, 0.2), "ckpt_1.pt not uploaded within 30 s")
            s3.stop()
            self.tell("go_2")
            self.assertTrue(wait_for_file(self.gate / "saved_2", 30))
            self.wait_text(launch.err_path, "cannot upload ckpt_2.pt")

            # a few retries fail while the server is down: still one warning
            def retried():
                for t in (self.sync_json() or {}).get("targets", []):
                    for f in t.get("failing", []):
                        if f.get("path") == "ckpt_2.pt" and f.get("attempts", 0) >= 3:
                            return True
                return False
            self.assertTrue(wait_until(retried, 30, 0.2), f"no 3 failed attempts in sync.json: {self.sync_json()}")
            status = self.ctl("status", self.job_id, env=self.env(server=s3))
            self.assertEqual(status.rc, 0, status.describe())
            lines = [l.strip() for l in status.out.splitlines() if l.strip().startswith(f"sync {self.target(s3)}/")]
            self.assertEqual(len(lines), 1, status.describe())
            self.assertRegex(lines[0], r"1 uploaded .*1 pending", status.describe())
            self.assertIsNone(launch.proc.poll(), "the job must run on while uploads fail")
            self.assertEqual(self.sync_thread_policy(launch.proc.pid), SCHED_IDLE,
                             "the uploads' thread yields the CPU to the ranks")

            s3.start()
            self.wait_text(launch.err_path, "uploads work again")
            self.tell("go_3")
            res = self.finish(launch, 40)
            self.assert_ok(res)
            local = self.local_files(self.tmp / "ckpt")
            self.assertEqual(sorted(local), ["ckpt_1.pt", "ckpt_2.pt", "ckpt_3.pt"])
            self.assertEqual(self.digests(self.keys(server=s3)), self.digests(local))
            self.assertEqual(len(self.lines_with(res.err, "cannot upload")), 1, res.describe())
            warning = self.lines_with(res.err, "cannot upload")[0]
            self.assertIn(f"--sync {self.target(s3)}/: cannot upload ckpt_2.pt: ", warning)
            self.assertIn("retrying with backoff while the job runs on", warning)
            self.assertEqual(len(self.lines_with(res.err, "uploads work again")), 1, res.describe())
            self.assertEqual(self.summary(res, server=s3)[:2], (3, 0))

    def test_wrong_secret_job_succeeds_one_warning_and_the_report_names_the_files(self):
        secret = "WrongSecret" + secrets.token_hex(12)
        res = self.save_job(1, ["--plain", "--steps", 2], extra_opts=["--sync-wait", 2],
                            env=self.env({"AWS_SECRET_ACCESS_KEY": secret}))
        self.assert_ok(res)
        warnings = self.lines_with(res.err, "cannot upload")
        self.assertEqual(len(warnings), 1, res.describe())
        self.assertIn("SignatureDoesNotMatch", warnings[0])
        self.assertIn("retrying with backoff while the job runs on", warnings[0])
        uploaded, pending, line = self.summary(res)
        self.assertEqual((uploaded, pending), (0, 2), line)
        for name in ("ckpt_1.pt", "ckpt_2.pt"):
            self.assertRegex(line, re.escape(name) + r" (failed \d+ time\(s\)|not sent yet)", line)
        self.assertEqual(self.keys(), {})
        self.assert_secret_nowhere(secret, res.out, res.err)

    def test_no_credentials_one_warning_and_the_job_runs(self):
        res = self.save_job(1, ["--plain", "--steps", 1], env=self.env(credentials=False))
        self.assert_ok(res)
        warnings = self.lines_with(res.err, "nothing is synced; the job runs")
        self.assertEqual(len(warnings), 1, res.describe())
        self.assertIn("--sync", warnings[0])
        self.assertEqual(self.lines_with(res.err, "cannot upload"), [], res.describe())
        self.assertTrue((self.tmp / "ckpt" / "ckpt_1.pt").is_file())
        self.assertEqual(self.keys(), {})


class DoctorAndUsageTest(SyncCase):
    def doctor_sync_check(self, env):
        res = self.ctl("doctor", "--json", *self.sync_opt(), env=env)
        doc = json.loads(res.out)
        checks = [c for c in doc["checks"] if c["name"] == f"sync {self.target()}/"]
        self.assertEqual(len(checks), 1, res.out)
        return res, checks[0]

    def test_doctor_sync_ok_and_a_wrong_secret_fails(self):
        res, check = self.doctor_sync_check(self.env())
        self.assertEqual(check["level"], "ok", check)
        self.assertIn("can list, write and delete", check["reason"])
        self.assertEqual(res.rc, 0, res.describe())
        self.assertEqual(self.keys(), {}, "the probe object must be deleted")
        secret = "WrongSecret" + secrets.token_hex(12)
        res, check = self.doctor_sync_check(self.env({"AWS_SECRET_ACCESS_KEY": secret}))
        self.assertEqual(res.rc, 1, res.describe())
        self.assertEqual(check["level"], "fail", check)
        self.assertIn("SignatureDoesNotMatch", check["reason"])
        self.assertNotIn(secret, res.out + res.err)

    def test_bad_usage(self):
        res = self.run_launcher(["--nproc-per-node=1", "--sync", "ckpt=gs://x/y", SAVER, "ckpt", "--plain"])
        self.assert_usage_error(res, "--sync")
        res = self.run_launcher(["--nproc-per-node=1", "--sync-delete", SAVER, "ckpt", "--plain"])
        self.assert_usage_error(res, "--sync")
        self.assertFalse((self.tmp / "ckpt").exists())


@unittest.skipUnless(TORCH_OK, "PYTHON_EXEC cannot import torch.distributed")
class ResumeFromBucketTest(SyncCase):
    TRAIN = ("--batch-size", 8, "--momentum", 0.9, "--samples", 512, "--log-every", 0)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not DDPTRAIN.is_file() or not os.access(DDPTRAIN, os.X_OK):
            raise unittest.SkipTest(f"ddptrain binary not found at {DDPTRAIN} (set DDPTRAIN_BIN)")

    def train(self, *args, sync=(), job):
        res = self.run_launcher(["--nproc-per-node=2", f"--rdzv-id={job}", *sync, DDPTRAIN, *self.TRAIN,
                                 *map(str, args)], job_id=False, timeout=90)
        self.assert_ok(res)
        return res

    def test_a_fresh_checkpoint_dir_resumes_from_the_bucket_bitwise(self):
        reference, final = self.tmp / "a.pt", self.tmp / "c.pt"
        self.train("--steps", 20, "--save-final", reference, job=self.job_id + "-a")
        # B: the first 10 steps, checkpoints every 5, synced
        first = self.train("--steps", 10, "--checkpoint-dir", "ck_b", "--checkpoint-every", 5,
                           sync=self.sync_opt("ck_b"), job=self.job_id + "-b")
        local = self.local_files(self.tmp / "ck_b")
        self.assertEqual(sorted(local), ["ckpt_000000000005.ddpckpt", "ckpt_000000000010.ddpckpt"], first.describe())
        self.assertEqual(self.digests(self.keys()), self.digests(local), "the bucket should hold B's checkpoints")
        # C: a new machine: its checkpoint folder does not exist
        res = self.train("--steps", 20, "--checkpoint-dir", "ck_c", "--checkpoint-every", 5, "--save-final", final,
                         sync=self.sync_opt("ck_c"), job=self.job_id + "-c")
        down = self.lines_with(res.err, "was empty: downloaded")
        self.assertEqual(len(down), 1, res.describe())
        self.assertRegex(down[0], rf"--sync {re.escape(self.target())}/: ck_c was empty: downloaded {len(local)} file\(s\)")
        m = re.search(r"resuming from (\S+) \(step (\d+)\)", res.out)
        self.assertIsNotNone(m, "no 'resuming from' line" + res.describe())
        self.assertEqual(int(m.group(2)), 10, res.describe())
        cmp = subprocess.run([PYTHON, "-c", _COMPARE, json.dumps([[str(final), str(reference)]])],
                             capture_output=True, text=True, timeout=60, env=self.env())
        self.assertEqual(cmp.returncode, 0, cmp.stderr)
        (row,) = json.loads(cmp.stdout)
        self.assertEqual(row["names_a"], row["names_b"])
        self.assertEqual(row["differ"], [], "resumed from the bucket: not bitwise equal to the uninterrupted run")


if __name__ == "__main__":
    unittest.main()
