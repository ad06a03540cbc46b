"""TLS between agents and the coordinator: a job whose agents all
present certificates signed by the job's CA runs; an agent without TLS cannot
join a TLS coordinator and ends with the rendezvous exit code."""

import shutil
import subprocess
import unittest

from launcher_harness import LauncherTestCase, free_port

RENDEZVOUS_FAILED = 125


def make_certificates(directory):
    """A throw-away CA and one certificate for localhost/127.0.0.1 signed by it."""
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True, timeout=30,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=ddplaunch-test-ca")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node.key", "-out", "node.csr",
            "-subj", "/CN=localhost")
    (directory / "ext.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "node.pem", "-days", "2", "-extfile", "ext.cnf")


@unittest.skipUnless(shutil.which("openssl"), "openssl is not installed")
class TlsTest(LauncherTestCase):
    def setUp(self):
        super().setUp()
        self.certs = self.tmp / "certs"
        self.certs.mkdir()
        make_certificates(self.certs)
        self.port = free_port()

    def tls_flags(self, certs=None):
        certs = certs or self.certs
        return [f"--tls-cert={certs / 'node.pem'}", f"--tls-key={certs / 'node.key'}",
                f"--tls-ca={certs / 'ca.pem'}"]

    def agent(self, node_rank, tls=True, conf="join_timeout=20", certs=None):
        args = [f"--nnodes=2", f"--node-rank={node_rank}", f"--rdzv-endpoint=localhost:{self.port}",
                "--nproc-per-node=1", f"--rdzv-conf={conf}", "--token=tls-test-token"]
        if tls:
            args += self.tls_flags(certs)
        return self.start(args + ["sh", "-c", "echo hello from $RANK of $WORLD_SIZE"])

    def test_agents_with_certificates_form_the_job(self):
        node0, node1 = self.agent(0), self.agent(1)
        r0, r1 = self.finish(node0), self.finish(node1)
        self.assertEqual(r0.rc, 0, r0.describe())
        self.assertEqual(r1.rc, 0, r1.describe())
        self.assertIn("hello from 0 of 2", r0.out)
        self.assertIn("hello from 1 of 2", r1.out)
        self.assert_no_leftovers()

    def test_agent_without_tls_cannot_join(self):
        node0 = self.agent(0, conf="join_timeout=8")
        plain = self.agent(1, tls=False, conf="join_timeout=3")
        rp, r0 = self.finish(plain, timeout=25), self.finish(node0, timeout=25)
        self.assertEqual(rp.rc, RENDEZVOUS_FAILED, rp.describe())
        self.assertIn(f"rendezvous failed: cannot reach the coordinator at localhost:{self.port}: localhost "
                      f"(127.0.0.1) accepts connections on port {self.port}, but gRPC cannot talk to it", rp.err,
                      rp.describe())
        self.assertIn("does it expect TLS (--tls-*) from this node?", rp.err)
        self.assertEqual(r0.rc, RENDEZVOUS_FAILED, r0.describe())
        self.assertIn("rendezvous timed out", r0.err)
        self.assert_no_leftovers()

    def test_a_certificate_from_another_ca_fails_the_handshake_and_says_so(self):
        other = self.tmp / "other-certs"
        other.mkdir()
        make_certificates(other)
        node0 = self.agent(0, conf="join_timeout=8")
        stranger = self.agent(1, conf="join_timeout=3", certs=other)
        rs, r0 = self.finish(stranger, timeout=25), self.finish(node0, timeout=25)
        self.assertEqual(rs.rc, RENDEZVOUS_FAILED, rs.describe())
        self.assertRegex(rs.err, rf"rendezvous failed: cannot reach the coordinator at localhost:{self.port}: .*"
                                 rf"but the TLS handshake fails \(.*(certificate|handshake).*\): do all nodes use "
                                 rf"matching --tls-cert, --tls-key and --tls-ca\?", rs.describe())
        self.assertEqual(r0.rc, RENDEZVOUS_FAILED, r0.describe())
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
