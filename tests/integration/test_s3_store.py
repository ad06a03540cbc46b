"""The --sync S3 client (launcher/src/sync/s3_store.h) against a real
S3-compatible server that verifies signatures (s3_server.py), driven through
s3_store_probe: round trips, multipart uploads, awkward keys, listing pages,
deletes, and the messages of a wrong secret and of a server that is down.

Needs S3_STORE_PROBE (set by ctest) or a build in build/, and the server that
deploy/install-deps.sh installs.
"""

import os
import re
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

from s3_server import S3Server

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROBE = os.environ.get("S3_STORE_PROBE") or str(REPO / "build" / "tests" / "integration" / "s3_store_probe")
PART_SIZE = 5 * 1024 * 1024  # the smallest part AWS allows


def client_env(server, **overrides):
    """This process's environment without its own AWS settings, plus the server's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["HOME"] = "/nonexistent"  # no ~/.aws files of the developer
    env.update(server.env())
    env.update(overrides)
    return env


class S3StoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = S3Server(bucket="ddp-sync-test").start()

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="ddp_s3_test_"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.prefix = self._testMethodName + "/"  # each test its own keys

    def probe(self, *args, server=None, ok=True, **env):
        server = server or self.server
        r = subprocess.run([PROBE, "--bucket", server.bucket, *args], env=client_env(server, **env),
                           capture_output=True, text=True, timeout=60)
        if ok:
            self.assertEqual(r.returncode, 0, f"s3_store_probe {' '.join(args)}: {r.stderr}")
        else:
            self.assertNotEqual(r.returncode, 0, f"s3_store_probe {' '.join(args)} succeeded: {r.stdout}")
        return r

    def file(self, name, data):
        path = self.tmp / name
        path.write_bytes(data)
        return str(path)

    def listing(self, prefix, *options):
        out = self.probe(*options, "ls", prefix).stdout
        return [(line.split("\t", 1)[1], int(line.split("\t", 1)[0])) for line in out.splitlines()]

    def test_small_put_and_get_round_trip(self):
        data = os.urandom(1000)
        key = self.prefix + "ckpt/step_10.pt"
        r = self.probe("put", key, self.file("a.pt", data))
        self.assertEqual(r.stdout.strip(), f"put {key} 1000")
        self.assertEqual(self.server.objects(self.prefix), {key: data})
        got = self.tmp / "down" / "deeper" / "a.pt"  # parent folders are made
        r = self.probe("get", key, str(got))
        self.assertEqual(r.stdout.strip(), f"get {key} 1000")
        self.assertEqual(got.read_bytes(), data)
        self.assertEqual(list((self.tmp / "down" / "deeper").iterdir()), [got])  # no temp file left

    def test_empty_file(self):
        key = self.prefix + "empty"
        self.probe("put", key, self.file("empty", b""))
        self.assertEqual(self.server.objects(self.prefix), {key: b""})

    def test_large_file_goes_up_in_parts(self):
        data = os.urandom(PART_SIZE * 7 // 2)  # 3.5 parts: the last one half a part
        key = self.prefix + "big.bin"
        r = self.probe("--part-size", str(PART_SIZE), "put", key, self.file("big.bin", data))
        self.assertEqual(r.stdout.strip(), f"put {key} {len(data)}")
        self.assertEqual(self.server.objects(self.prefix)[key], data)
        self.assertEqual(self.listing(self.prefix), [(key, len(data))])
        # How it went up: one upload started, four parts in order, completed.
        mine = [line for line in self.server.requests() if line.split(" ")[1].startswith(f"/{self.server.bucket}/{key}")]
        parts = [int(m.group(1)) for m in (re.search(r"[?&]partNumber=(\d+)&uploadId=\S+ 200$", line) for line in mine) if m]
        self.assertEqual(parts, [1, 2, 3, 4], "\n".join(mine))
        self.assertTrue(any(re.match(r"POST \S+\?uploads= 200$", line) for line in mine), "\n".join(mine))
        self.assertTrue(any(re.match(r"POST \S+\?uploadId=\S+ 200$", line) for line in mine), "\n".join(mine))
        got = self.tmp / "big.down"
        self.probe("get", key, str(got))
        self.assertEqual(got.read_bytes(), data)

    def test_file_of_one_part_is_a_single_put(self):
        key = self.prefix + "exact"
        self.probe("--part-size", "4096", "put", key, self.file("exact", os.urandom(4096)))
        mine = [line for line in self.server.requests() if f"/{key}" in line]
        self.assertEqual([line.split(" ")[0] for line in mine], ["PUT"], "\n".join(mine))

    def test_keys_with_spaces_and_non_ascii_characters(self):
        # Not & ' < >: s3rver 4.0.4 escapes them twice in its listings
        # (a key "a&b" is listed as "a&amp;b"), which is the server's fault.
        keys = [self.prefix + "run 1/modèle final.pt", self.prefix + "чекпойнт/步骤 #3 (a+b)=c,d;e@f$g!h*i.bin",
                self.prefix + "tilde~colon:brackets[1].pt"]
        for i, key in enumerate(keys):
            self.probe("put", key, self.file(f"k{i}", key.encode() * 3))
        self.assertEqual(self.server.objects(self.prefix), {k: k.encode() * 3 for k in keys})
        self.assertEqual(self.listing(self.prefix), sorted(((k, len(k.encode()) * 3) for k in keys),
                                                           key=lambda kv: kv[0].encode()))
        for i, key in enumerate(keys):
            got = self.tmp / f"got{i}"
            self.probe("get", key, str(got))
            self.assertEqual(got.read_bytes(), key.encode() * 3)

    def test_listing_pages_and_limit(self):
        keys = [f"{self.prefix}dir/{i:02d}" for i in range(5)]
        for key in keys:
            self.server.put_object(key, b"x" * 7)
        self.server.put_object(self.prefix + "elsewhere", b"y")
        # Pages of two keys: three requests, following continuation tokens.
        self.assertEqual(self.listing(self.prefix + "dir/", "--page-size", "2"), [(k, 7) for k in keys])
        self.assertEqual(self.listing(self.prefix + "dir/", "--page-size", "2", "--limit", "3"),
                         [(k, 7) for k in keys[:3]])
        self.assertEqual(self.listing(self.prefix + "dir/", "--limit", "1"), [(keys[0], 7)])
        self.assertEqual(self.listing(self.prefix + "nothing/"), [])
        tokens = [line for line in self.server.requests() if "continuation-token=" in line]
        self.assertTrue(tokens and all(line.endswith(" 200") for line in tokens), tokens)

    def test_rm_deletes_and_missing_objects(self):
        key = self.prefix + "gone.pt"
        self.server.put_object(key, b"data")
        self.server.put_object(self.prefix + "kept.pt", b"data")
        self.assertEqual(self.probe("rm", key).stdout.strip(), f"rm {key}")
        self.assertEqual(set(self.server.objects(self.prefix)), {self.prefix + "kept.pt"})
        self.probe("rm", key)  # already gone: still a success
        r = self.probe("get", key, str(self.tmp / "gone.pt"), ok=False)
        self.assertIn("error 5:", r.stderr)  # kNotFound
        self.assertIn("HTTP 404 NoSuchKey", r.stderr)
        self.assertEqual(list(self.tmp.iterdir()), [])  # no temp file left behind

    def test_missing_local_file(self):
        r = self.probe("put", self.prefix + "x", str(self.tmp / "absent"), ok=False)
        self.assertIn("error 5:", r.stderr)  # kNotFound: nothing to retry
        self.assertEqual(self.server.objects(self.prefix), {})

    def test_wrong_secret_is_refused_and_not_shown(self):
        wrong = "Wr0ngSecret/" + os.urandom(6).hex()
        small, big = self.file("small", b"abc"), self.file("big", os.urandom(PART_SIZE + 1))
        for args in (["put", self.prefix + "a", small],
                     ["--part-size", str(PART_SIZE), "put", self.prefix + "b", big],
                     ["ls", self.prefix], ["get", self.prefix + "a", str(self.tmp / "a")],
                     ["rm", self.prefix + "a"]):
            with self.subTest(args=args[-2:]):
                r = self.probe(*args, ok=False, AWS_SECRET_ACCESS_KEY=wrong)
                self.assertIn("SignatureDoesNotMatch", r.stderr)
                self.assertIn("HTTP 403", r.stderr)
                self.assertIn("error 7:", r.stderr)  # kPermissionDenied
                self.assertNotIn(wrong, r.stderr + r.stdout)
                self.assertNotIn(self.server.secret_key, r.stderr + r.stdout)
        self.assertEqual(self.server.objects(self.prefix), {})

    def test_session_token_is_signed_and_not_shown(self):
        # s3rver ignores the token itself, but checks the signature over the
        # x-amz-security-token header the client adds.
        token = "FwoGZXIvYXdzE" + os.urandom(24).hex()
        key = self.prefix + "t"
        r = self.probe("put", key, self.file("t", b"tok"), AWS_SESSION_TOKEN=token)
        self.assertNotIn(token, r.stdout + r.stderr)
        self.assertEqual(self.server.objects(self.prefix), {key: b"tok"})
        r = self.probe("ls", self.prefix, ok=False, AWS_SESSION_TOKEN=token, AWS_SECRET_ACCESS_KEY="wrong")
        self.assertNotIn(token, r.stdout + r.stderr)

    def test_missing_bucket(self):
        r = self.probe("ls", "", ok=False, server=_OtherBucket(self.server, "no-such-bucket"))
        self.assertIn("NoSuchBucket", r.stderr)


class _OtherBucket:
    """The same server and keys, another bucket name."""

    def __init__(self, server, bucket):
        self.bucket = bucket
        self._server = server

    def env(self):
        return self._server.env()


class S3ServerDownTest(unittest.TestCase):
    def test_stopped_server_then_restarted(self):
        tmp = Path(tempfile.mkdtemp(prefix="ddp_s3_test_"))
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        with S3Server() as server:
            src = tmp / "a"
            src.write_bytes(b"kept across restarts")
            env = client_env(server)
            run = lambda *a: subprocess.run([PROBE, "--bucket", server.bucket, *a], env=env,  # noqa: E731
                                            capture_output=True, text=True, timeout=60)
            self.assertEqual(run("put", "a", str(src)).returncode, 0)
            server.stop()
            r = run("get", "a", str(tmp / "b"))
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("connect", r.stderr)
            self.assertIn(server.endpoint, r.stderr)
            self.assertIn("error 14:", r.stderr)  # kUnavailable: worth retrying
            server.start()  # same port, same data
            self.assertEqual(server.env()["AWS_ENDPOINT_URL"], env["AWS_ENDPOINT_URL"])
            r = run("get", "a", str(tmp / "b"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual((tmp / "b").read_bytes(), b"kept across restarts")


if __name__ == "__main__":
    unittest.main()
