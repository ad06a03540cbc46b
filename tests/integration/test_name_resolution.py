"""Host names that only the system's resolver knows.

Each node is a network namespace with its own hostname and a private /etc/hosts
(bind-mounted in its own mount namespace: the machine's /etc is not touched).
No DNS answers: resolv.conf names a server on node 0 that swallows every
query, as a firewalled or dead name server does (gRPC's own c-ares resolver
then never finishes a lookup, even of a name /etc/hosts lists). The nodes'
names resolve through getaddrinfo and nsswitch ("files"), as on clusters that
list their compute nodes in /etc/hosts, NIS or LDAP, and never through DNS.
Agents must meet at such a name, and a rendezvous that cannot proceed must say
why within its first progress line."""

import re
import subprocess
import time

from launcher_harness import PYTHON, base_env
from multinode_harness import EXIT_RDZV, PROBE
from netns_harness import IP, NetnsTestCase

# A name server that receives queries and never answers.
SILENT_DNS = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 53))
print("listening", flush=True)
time.sleep(3600)
"""


class NameResolutionTest(NetnsTestCase):
    NODES = 2
    IPV6 = True

    def setUp(self):
        super().setUp()
        a, a6 = self.addr, self.addr6
        self.hostnames = ["trainer0", "trainer1"]
        self.system_files = {
            "hosts": "\n".join([
                "127.0.0.1 localhost",
                f"{a[0]} trainer0",
                f"{a[1]} trainer1",
                f"{a6[0]} trainer0-v6",
                # two addresses: node 1's own (nothing listens there: refused) before node 0's
                f"{a[1]} trainer0-multi",
                f"{a[0]} trainer0-multi",
            ]) + "\n",
            "resolv.conf": f"nameserver {a[0]}\noptions timeout:1 attempts:1\n",
            "nsswitch.conf": "hosts: files dns\n",
        }
        self.start_silent_dns()

    def start_silent_dns(self):
        # not marked with the test's token: it is no ddplaunch leftover, and is stopped here
        dns = subprocess.Popen([IP, "netns", "exec", self.ns[0], PYTHON, "-c", SILENT_DNS, self.addr[0]],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, env=base_env())
        self.addCleanup(dns.stdout.close)
        self.addCleanup(dns.wait, 10)
        self.addCleanup(dns.kill)
        self.assertEqual(dns.stdout.readline().strip(), "listening", "the silent name server did not start")

    def assert_resolves_on_node_1_only_through_files(self, name, address):
        r = self.run_on(1, ["getent", "hosts", name])
        self.assertEqual(r.returncode, 0, f"getent hosts {name} on node 1: {r.stdout}{r.stderr}")
        self.assertEqual(r.stdout.split()[0], address)
        # the test's premise: no DNS answers, so only /etc/hosts can
        r = self.run_on(1, ["getent", "ahosts", "example.org"])
        self.assertEqual(r.returncode, 2, f"DNS answered on node 1: {r.stdout}")

    def form_job(self, endpoint_host):
        nnodes, nproc = 2, 2
        endpoint = self.endpoint(host=endpoint_host)
        launches = [self.start_node(k, nnodes, nproc, [PROBE, str(self.outdir)], endpoint=endpoint)
                    for k in range(nnodes)]
        results = self.finish_all(launches, timeout=30)
        desc = self.describe_all(results)
        for res in results:
            self.assertEqual(res.rc, 0, desc)
        self.check_layout(self.read_probes(nnodes * nproc), nnodes, nproc, job_id=self.job_id)
        self.check_console(results, nproc)
        self.assert_no_leftovers()
        return results

    # torchrun's --rdzv-endpoint=HOST:PORT with HOST from /etc/hosts
    def test_two_agents_meet_at_a_name_only_the_hosts_file_knows(self):
        self.assert_resolves_on_node_1_only_through_files("trainer0", self.addr[0])
        self.form_job("trainer0")

    def test_a_name_with_two_addresses_falls_through_to_the_one_that_answers(self):
        r = self.run_on(1, ["getent", "ahosts", "trainer0-multi"])
        first = r.stdout.split()[0] if r.stdout else ""
        self.assertEqual(first, self.addr[1], f"the refusing address must come first: {r.stdout}")
        self.form_job("trainer0-multi")

    def test_a_name_with_an_ipv6_address(self):
        self.form_job("trainer0-v6")

    def test_a_bracketed_ipv6_endpoint(self):
        self.form_job(f"[{self.addr6[0]}]")

    def test_a_misspelled_name_says_cannot_resolve_and_exits_125(self):
        t0 = time.monotonic()
        launch = self.start_node(1, 2, 1, [PROBE, str(self.outdir)], endpoint=self.endpoint(host="trainr0"),
                                 conf="join_timeout=6")
        res = self.finish_all([launch], timeout=25)[0]
        elapsed = time.monotonic() - t0
        self.assertEqual(res.rc, EXIT_RDZV, res.describe())
        first = re.search(r"rendezvous: still waiting after 5 s: (.*)", res.err)
        self.assertIsNotNone(first, res.describe())
        self.assertRegex(first.group(1), r"cannot reach the coordinator at trainr0:\d+: cannot resolve trainr0 \(.+\)",
                         res.describe())
        self.assertRegex(res.err, r"rendezvous failed: cannot reach the coordinator at trainr0:\d+: "
                                  r"cannot resolve trainr0 \(", res.describe())
        self.assertLess(elapsed, 6 + 6, res.describe())
        self.assertEqual(list(self.outdir.iterdir()), [], "a worker ran without a world")
        self.assert_no_leftovers()

    def test_a_name_whose_host_refuses_says_so(self):
        launch = self.start_node(1, 2, 1, [PROBE, str(self.outdir)], endpoint=self.endpoint(host="trainer0"),
                                 conf="join_timeout=6")
        res = self.finish_all([launch], timeout=25)[0]
        self.assertEqual(res.rc, EXIT_RDZV, res.describe())
        refused = (rf"trainer0 \({re.escape(self.addr[0])}\) refused the connection on port {self.port}")
        self.assertRegex(res.err, r"still waiting after 5 s: cannot reach the coordinator at trainer0:\d+: " + refused,
                         res.describe())
        self.assertRegex(res.err, r"rendezvous failed: .*" + refused, res.describe())
        self.assert_no_leftovers()

    def test_doctor_says_the_name_resolves_via_the_system_but_not_via_dns(self):
        r = self.run_on(1, [str(self.command([], log_dir=False, job_id=False)[0]), "doctor",
                            f"--rdzv-endpoint=trainer0:{self.port}", "--nproc-per-node=1"])
        self.assertIn(f"rendezvous host: trainer0 resolves via the system but not via DNS", r.stdout,
                      r.stdout + r.stderr)
        self.assertIn(f": {self.addr[0]};", r.stdout, r.stdout)
        self.assertIn(f"rendezvous port: trainer0 answers but nothing listens on port {self.port} yet", r.stdout)
        r = self.run_on(1, [str(self.command([], log_dir=False, job_id=False)[0]), "doctor",
                            f"--rdzv-endpoint=trainr0:{self.port}", "--nproc-per-node=1"])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"fail  rendezvous host: cannot resolve trainr0 through the system \(.+\)",
                         r.stdout)


if __name__ == "__main__":
    import unittest
    unittest.main()
