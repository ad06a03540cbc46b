"""Several "hosts" on one machine for multi-node tests: each node is a network
namespace, and the namespaces are joined by veth pairs to the first one
(10.231.X.1/24 on node 0, 10.231.X.(k+1) on node k; optionally fd31:X::(k+1)/64
as well), so a node reaches another only over the link, never over a shared
loopback.

A test may also give each node its own name and its own name-service files:
set ``system_files`` (e.g. {"hosts": ..., "resolv.conf": ..., "nsswitch.conf":
...}) and ``hostnames`` before the nodes start. Each node then runs in its own
mount and UTS namespace with those files bind-mounted over /etc/<name>, so the
machine's /etc is never changed, and `hostname` says the node's name.

Needs root and permission to create network namespaces; skipped otherwise
(many containers forbid `ip netns add`). Namespaces are named uniquely per test
and deleted in cleanup, after every process of the test has been killed."""

import os
import secrets
import shlex
import shutil
import subprocess
import unittest

from multinode_harness import MultiNodeTestCase

IP = shutil.which("ip") or "/usr/sbin/ip"
UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"


def ip(*args, timeout=10):
    return subprocess.run([IP, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


class NetnsTestCase(MultiNodeTestCase):
    NODES = 2
    IPV6 = False  # also give every node an IPv6 address (fd31:X::k+1/64)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if os.geteuid() != 0:
            raise unittest.SkipTest("network namespaces need root")
        if not os.path.exists(IP):
            raise unittest.SkipTest("iproute2 `ip` not found")

    def setUp(self):
        self.namespaces = []
        # registered before the harness's own cleanups, so it runs after them (LIFO):
        # processes are killed first, then the namespaces go
        self.addCleanup(self._delete_namespaces)
        super().setUp()
        tag = f"{os.getpid() % 100000}{secrets.token_hex(3)}"
        x = secrets.randbelow(256)
        self.ns = [f"ddpt{tag}n{k}" for k in range(self.NODES)]
        self.addr = [f"10.231.{x}.{k + 1}" for k in range(self.NODES)]
        self.addr6 = [f"fd31:{x:x}::{k + 1}" for k in range(self.NODES)]
        # node k > 0 is linked to node 0 by ddpa<k><tag> (in node 0) <-> ddpb<k><tag>
        self.ifname = ["ddpa" + tag[-6:]] + [f"ddpb{k}{tag[-5:]}" for k in range(1, self.NODES)]
        self.system_files = {}
        self.hostnames = []
        for ns in self.ns:
            self._ip_or_skip("netns", "add", ns)
            self.namespaces.append(ns)
        for ns in self.ns:
            self._ip_or_skip("-n", ns, "link", "set", "lo", "up")
        # node 0 bridges its links, so every node shares one subnet
        bridge = "ddpbr" + tag[-6:]
        self._ip_or_skip("-n", self.ns[0], "link", "add", bridge, "type", "bridge")
        self._ip_or_skip("-n", self.ns[0], "addr", "add", f"{self.addr[0]}/24", "dev", bridge)
        if self.IPV6:
            self._ip_or_skip("-n", self.ns[0], "addr", "add", f"{self.addr6[0]}/64", "dev", bridge, "nodad")
        self._ip_or_skip("-n", self.ns[0], "link", "set", bridge, "up")
        for k in range(1, self.NODES):
            near = f"ddpa{k}{tag[-5:]}"
            self._ip_or_skip("-n", self.ns[0], "link", "add", near, "type", "veth",
                             "peer", "name", self.ifname[k], "netns", self.ns[k])
            self._ip_or_skip("-n", self.ns[0], "link", "set", near, "master", bridge)
            self._ip_or_skip("-n", self.ns[0], "link", "set", near, "up")
            self._ip_or_skip("-n", self.ns[k], "addr", "add", f"{self.addr[k]}/24", "dev", self.ifname[k])
            if self.IPV6:
                self._ip_or_skip("-n", self.ns[k], "addr", "add", f"{self.addr6[k]}/64", "dev",
                                 self.ifname[k], "nodad")
            self._ip_or_skip("-n", self.ns[k], "link", "set", self.ifname[k], "up")
        self.ifname[0] = bridge
        # the endpoint lives in node 0's namespace; any port is free there
        self.host = self.addr[0]

    def _ip_or_skip(self, *args):
        r = ip(*args)
        if r.returncode != 0:
            self.skipTest(f"`ip {' '.join(args)}` failed (rc {r.returncode}): {r.stderr.strip()}")

    def _delete_namespaces(self):
        for ns in self.namespaces:
            try:
                ip("netns", "del", ns)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.namespaces = []

    def _node_files_dir(self, k):
        d = self.tmp / f"etc_node{k}"
        d.mkdir(exist_ok=True)
        for name, text in self.system_files.items():
            (d / name).write_text(text)
        return d

    def wrap(self, k):
        """The command prefix that runs a program on node k."""
        prefix = [IP, "netns", "exec", self.ns[k]]
        if not self.system_files and not self.hostnames:
            return prefix
        d = self._node_files_dir(k)
        steps = [f"mount --bind {shlex.quote(str(d / name))} /etc/{name}" for name in self.system_files]
        uts = []
        if self.hostnames:
            uts = ["--uts"]
            steps.append(f"hostname {shlex.quote(self.hostnames[k])}")
        script = " && ".join(steps + ['exec "$@"'])
        return prefix + [UNSHARE, "--mount", "--propagation", "private", *uts, "sh", "-c", script, "sh"]

    def run_on(self, k, argv, timeout=20, env=None):
        """Runs argv on node k to completion (bounded); a CompletedProcess."""
        return subprocess.run(self.wrap(k) + list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout,
                              env=env if env is not None else self.mn_env())

    def start_node(self, k, nnodes, nproc, program, **kw):
        env_extra = dict(kw.pop("env_extra", None) or {})
        kw.setdefault("node_rank", k)
        return self.start_agent(nnodes, nproc, program, wrap=self.wrap(k), env_extra=env_extra, **kw)
