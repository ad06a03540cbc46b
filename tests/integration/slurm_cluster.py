"""A real Slurm cluster on one machine, for the test suite (Python 3 stdlib only).

One ``slurmctld`` and N ``slurmd`` nodes (default 2). Every daemon runs in its own
network namespace (own address) and its own UTS namespace (own hostname), with a
per-namespace /etc/hosts bind-mounted in a private mount namespace, so Slurm sees
separate hosts and the machine's /etc is never touched:

    namespace    hostname   address          runs
    <tag>c       sctl<k>    10.232.X.10      slurmctld
    <tag>n0      sn0        10.232.X.1       slurmd -N sn0   (holds the bridge)
    <tag>n1      sn1        10.232.X.2       slurmd -N sn1
    (host)       -          10.232.X.254     sbatch/squeue/scontrol/scancel, `ddplaunch status`

Node 0's namespace holds a bridge; the controller's namespace, the other nodes and
the host (the "login shell") are each linked to it by a veth pair, so everything is
on one /24. The host end gets 10.232.X.254 and is deleted in teardown.

Authentication: a private ``munged`` (its own key made by ``mungekey``, mode 0400,
socket, pid, log and seed files under the cluster's temp dir); slurm.conf points
every daemon and client at its socket with ``AuthInfo=socket=...`` (a Unix socket
path is reachable from every network namespace). The configuration is generated per
cluster: no cgroup plugins, root as SlurmUser/SlurmdUser, no accounting, free ports,
spool/state/log/pid files under the temp dir. Clients get ``SLURM_CONF`` through
``cluster.env()``.

Use it once per test module (``SlurmClusterTestCase`` starts it in setUpClass and
stops it in tearDownClass): teardown kills and reaps every daemon and every process
left in the namespaces or carrying the cluster's marker (the temp dir's name, which
is in SLURM_CONF of every job process), then deletes the namespaces and the veth.
A daemon that does not come up fails with ``SlurmClusterError`` naming the step and
the last lines of its log. Skipped (unittest.SkipTest) only when not root, when the
Slurm/munge binaries are missing, or when network namespaces cannot be created."""

import os
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

from launcher_harness import find_marked, free_port, kill_marked, wait_until
from netns_harness import IP, UNSHARE, ip

SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")
NSENTER = shutil.which("nsenter") or "/usr/bin/nsenter"


def _which(name):
    found = shutil.which(name)
    if found:
        return found
    for d in SBIN:
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    return None


def _tail(path, n=25):
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError as e:
        return f"(cannot read {path}: {e})"
    return "\n".join(lines[-n:]) or "(empty)"


class SlurmClusterError(AssertionError):
    pass


class SlurmCluster:
    """Start with start(), stop with stop() (idempotent, safe after a failed start)."""

    DAEMONS = ("slurmctld", "slurmd", "slurmstepd", "munged", "mungekey", "sbatch", "squeue",
               "scontrol", "scancel", "srun")

    def __init__(self, nodes=2, cpus=2, gpus=0, keep_tmp=False):
        self.nnodes = nodes
        self.cpus = cpus
        self.gpus = gpus  # GRES gpu:N declared per node (count only, no device files)
        self.keep_tmp = keep_tmp or bool(os.environ.get("DDPT_KEEP_SLURM"))
        self.marker = "ddpslurm" + secrets.token_hex(5)
        self.tmp = Path(tempfile.mkdtemp(prefix=self.marker + "."))
        self.tmp.chmod(0o755)
        tag = f"s{secrets.token_hex(3)}"
        self.tag = tag
        self.x = 16 + secrets.randbelow(224)
        self.net = f"10.232.{self.x}"
        self.ns_ctl = f"ddp{tag}c"
        self.ns = [f"ddp{tag}n{k}" for k in range(nodes)]
        self.names = [f"sn{k}" for k in range(nodes)]
        self.addr = [f"{self.net}.{k + 1}" for k in range(nodes)]
        self.ctl_name = "sctl"
        self.ctl_addr = f"{self.net}.10"
        self.host_addr = f"{self.net}.254"
        self.host_if = f"ddph{tag[1:]}"
        self.cluster_name = "ddp" + tag
        self.partition = "ddp"
        self.ctl_port = free_port()
        self.slurmd_port = free_port()
        self.conf = self.tmp / "etc" / "slurm.conf"
        self.munge_socket = self.tmp / "munge" / "munge.socket"
        self.procs = {}  # name -> Popen
        self.namespaces = []
        self.host_link = False
        self.started = False

    # ------------------------------------------------------------------ helpers

    def env(self, extra=None):
        """Environment for Slurm clients on the host (and, through sbatch, for jobs)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_",
                                                                           "SALLOC_", "SQUEUE_"))}
        env["SLURM_CONF"] = str(self.conf)
        env["DDPT_TOKEN"] = self.marker
        env.update(extra or {})
        return env

    def wrap(self, where):
        """Command prefix running a program in 'ctl' or node k's namespaces."""
        if where == "ctl":
            ns, name, hosts = self.ns_ctl, self.ctl_name, self.tmp / "etc" / "hosts.ctl"
        else:
            ns, name, hosts = self.ns[where], self.names[where], self.tmp / "etc" / f"hosts.{where}"
        script = (f"mount --bind {shlex.quote(str(hosts))} /etc/hosts && "
                  f"hostname {shlex.quote(name)} && exec \"$@\"")
        # nsenter, not `ip netns exec`: the latter remounts /sys, hiding /sys/fs/cgroup,
        # and slurmd 22.05 initialises its cgroup plugin even when no cgroup plugin is used
        return [NSENTER, f"--net=/run/netns/{ns}", UNSHARE, "--mount", "--propagation", "private", "--uts",
                "sh", "-c", script, "sh"]

    def login_wrap(self):
        """Command prefix for the host namespace (the login shell) with the cluster's
        /etc/hosts bind-mounted in a private mount namespace: a login node that
        resolves the compute nodes' names, as real ones do. The machine's /etc is
        untouched."""
        hosts = self.tmp / "etc" / "hosts.ctl"
        return [UNSHARE, "--mount", "--propagation", "private", "sh", "-c",
                f"mount --bind {shlex.quote(str(hosts))} /etc/hosts && exec \"$@\"", "sh"]

    def run(self, argv, timeout=30, env=None, cwd=None, check=False):
        r = subprocess.run(list(map(str, argv)), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=timeout,
                           env=env if env is not None else self.env(), cwd=cwd)
        if check and r.returncode != 0:
            raise SlurmClusterError(f"`{' '.join(map(str, argv))}` exited {r.returncode}: "
                                    f"{r.stdout}{r.stderr}")
        return r

    def _fail(self, step, detail, log=None):
        msg = f"slurm_cluster: step '{step}': {detail}"
        if log is not None:
            msg += f"\n--- last lines of {log}:\n{_tail(log)}"
        raise SlurmClusterError(msg)

    def _ip(self, step, *args):
        r = ip(*args)
        if r.returncode != 0:
            self._fail(step, f"`ip {' '.join(args)}` failed (rc {r.returncode}): {r.stderr.strip()}")

    def _spawn(self, name, argv, log):
        out = open(self.tmp / "log" / f"{name}.stdout", "ab")
        env = self.env()
        p = subprocess.Popen(list(map(str, argv)), stdin=subprocess.DEVNULL, stdout=out,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
        out.close()
        self.procs[name] = p
        return p

    def _wait_daemon(self, step, name, predicate, log, timeout=30):
        p = self.procs[name]

        def ok():
            if p.poll() is not None:
                return "dead"
            return predicate()
        res = wait_until(ok, timeout, 0.1)
        if res == "dead":
            self._fail(step, f"{name} exited with {p.returncode}"
                       f"\n--- its stdout/stderr:\n{_tail(self.tmp / 'log' / (name + '.stdout'))}", log)
        if not res:
            self._fail(step, f"{name} not ready within {timeout}s"
                       f"\n--- its stdout/stderr:\n{_tail(self.tmp / 'log' / (name + '.stdout'))}", log)

    # ------------------------------------------------------------------ start

    @staticmethod
    def check_prerequisites():
        """Raises unittest.SkipTest when the cluster cannot exist on this machine (not
        root, no network namespaces), AssertionError when a program is missing."""
        if os.geteuid() != 0:
            raise unittest.SkipTest("a Slurm cluster in network namespaces needs root")
        missing = [b for b in ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel",
                               "munged", "mungekey") if not _which(b)]
        if missing or not os.path.exists(IP) or not os.path.exists(UNSHARE):
            # the install script brings these: their absence fails, it does not skip
            raise AssertionError(f"missing: {', '.join(missing) or 'ip/unshare'} "
                                 "(deploy/install-deps.sh installs Slurm and munge)")
        probe = f"ddpprobe{secrets.token_hex(3)}"
        r = ip("netns", "add", probe)
        if r.returncode != 0:
            raise unittest.SkipTest(f"cannot create network namespaces: {r.stderr.strip()}")
        ip("netns", "del", probe)

    def start(self):
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.started = True
        return self

    def _start(self):
        for d in ["etc", "munge", "log", "run", "state", "spool", "out"] + [f"spool/{n}" for n in self.names]:
            (self.tmp / d).mkdir(exist_ok=True)
        self._network()
        self._munge()
        self._write_config()
        self._slurmctld()
        for k in range(self.nnodes):
            self._slurmd(k)
        self._wait_nodes_idle()

    def _network(self):
        step = "network namespaces"
        for ns in [self.ns_ctl] + self.ns:
            self._ip(step, "netns", "add", ns)
            self.namespaces.append(ns)
            self._ip(step, "-n", ns, "link", "set", "lo", "up")
        n0 = self.ns[0]
        bridge = f"br{self.tag}"
        self._ip(step, "-n", n0, "link", "add", bridge, "type", "bridge")
        self._ip(step, "-n", n0, "addr", "add", f"{self.addr[0]}/24", "dev", bridge)
        self._ip(step, "-n", n0, "link", "set", bridge, "up")

        def link(peer_ns, near, far, addr):
            # far end in peer_ns (None: the host namespace)
            args = ["-n", n0, "link", "add", near, "type", "veth", "peer", "name", far]
            if peer_ns is not None:
                args += ["netns", peer_ns]
            self._ip(step, *args)
            if peer_ns is None:
                self.host_link = True
                # the host end was created inside n0: move it out to the host namespace
                self._ip(step, "-n", n0, "link", "set", far, "netns", "1")
            self._ip(step, "-n", n0, "link", "set", near, "master", bridge)
            self._ip(step, "-n", n0, "link", "set", near, "up")
            pre = ["-n", peer_ns] if peer_ns else []
            self._ip(step, *pre, "addr", "add", f"{addr}/24", "dev", far)
            self._ip(step, *pre, "link", "set", far, "up")

        link(self.ns_ctl, f"va{self.tag}c", f"vb{self.tag}c", self.ctl_addr)
        for k in range(1, self.nnodes):
            link(self.ns[k], f"va{self.tag}{k}", f"vb{self.tag}{k}", self.addr[k])
        link(None, f"va{self.tag}h", self.host_if, self.host_addr)
        hosts = ["127.0.0.1 localhost", f"{self.ctl_addr} {self.ctl_name}"]
        hosts += [f"{a} {n}" for a, n in zip(self.addr, self.names)]
        hosts += [f"{self.host_addr} login"]
        for k in range(self.nnodes):
            (self.tmp / "etc" / f"hosts.{k}").write_text("\n".join(hosts) + "\n")
        (self.tmp / "etc" / "hosts.ctl").write_text("\n".join(hosts) + "\n")

    def _munge(self):
        step = "start munged"
        key = self.tmp / "munge" / "munge.key"
        r = self.run([_which("mungekey"), "--create", "--keyfile", key], timeout=30)
        if r.returncode != 0:
            self._fail("create the munge key", f"mungekey exited {r.returncode}: {r.stderr.strip()}")
        key.chmod(0o400)
        log = self.tmp / "log" / "munged.log"
        self._spawn("munged", [_which("munged"), "--foreground", "--force",
                               f"--socket={self.munge_socket}", f"--key-file={key}",
                               f"--pid-file={self.tmp / 'run' / 'munged.pid'}", f"--log-file={log}",
                               f"--seed-file={self.tmp / 'munge' / 'munged.seed'}"], log)
        self._wait_daemon(step, "munged", lambda: self.munge_socket.exists(), log, 20)
        # one round trip proves the socket and the key
        munge, unmunge = _which("munge"), _which("unmunge")
        if munge and unmunge:
            cred = self.run([munge, "-S", self.munge_socket, "-n"], timeout=10)
            chk = subprocess.run([unmunge, "-S", str(self.munge_socket)], input=cred.stdout,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=10)
            if cred.returncode != 0 or chk.returncode != 0:
                self._fail(step, f"munge/unmunge round trip failed: {cred.stderr}{chk.stderr}", log)

    def _write_config(self):
        t = self.tmp
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={self.ctl_name}({self.ctl_addr})",
            f"SlurmctldPort={self.ctl_port}",
            f"SlurmdPort={self.slurmd_port}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire (default 120 s) also holds a requeued job back for that
            # long + 1 s, while the nodes refuse its revoked credential; 5 s is
            # Slurm's least, so requeue tests finish in seconds.
            f"AuthInfo=socket={self.munge_socket},cred_expire=5",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={t / 'state'}",
            f"SlurmdSpoolDir={t / 'spool'}/%n",
            f"SlurmctldPidFile={t / 'run'}/slurmctld.pid",
            f"SlurmdPidFile={t / 'run'}/slurmd-%n.pid",
            f"SlurmctldLogFile={t / 'log'}/slurmctld.log",
            f"SlurmdLogFile={t / 'log'}/slurmd-%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            # A scheduling pass every second: a job that becomes eligible (a
            # requeued one after its hold) starts at once, not up to 30 s later.
            "SchedulerParameters=sched_interval=1,bf_interval=1",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            # Slurm's default: after scancel's (or a time limit's) SIGTERM, a job's
            # ranks have this long to stop at a step boundary before SIGKILL.
            "KillWait=30",
            "MinJobAge=600",
            "InactiveLimit=0",
            "MessageTimeout=10",
            "SlurmdTimeout=60",
            f"PlugStackConfig={t / 'etc' / 'plugstack.conf'}",
            f"TmpFS={t / 'spool'}",
        ]
        gres = ""
        if self.gpus:
            lines.append("GresTypes=gpu")
            gres = f" Gres=gpu:{self.gpus}"
            (t / "etc" / "gres.conf").write_text(f"NodeName={','.join(self.names)} Name=gpu Count={self.gpus}\n")
        for name, addr in zip(self.names, self.addr):
            lines.append(f"NodeName={name} NodeAddr={addr} NodeHostname={name} CPUs={self.cpus}"
                         f" Boards=1 SocketsPerBoard=1 CoresPerSocket={self.cpus} ThreadsPerCore=1"
                         f" RealMemory=1000{gres} State=UNKNOWN")
        lines.append(f"PartitionName={self.partition} Nodes={','.join(self.names)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        (t / "etc" / "plugstack.conf").write_text("")
        # read by slurmd even without cgroup plugins; v1 or v2 as the machine has them
        (t / "etc" / "cgroup.conf").write_text("CgroupPlugin=autodetect\nIgnoreSystemd=yes\n")
        self.conf.write_text("\n".join(lines) + "\n")

    def _slurmctld(self):
        step = "start slurmctld"
        log = self.tmp / "log" / "slurmctld.log"
        self._spawn("slurmctld", self.wrap("ctl") + [_which("slurmctld"), "-D", "-i", "-f", self.conf], log)

        def answers():
            r = self.run([_which("scontrol"), "ping"], timeout=15)
            return r.returncode == 0 and "UP" in r.stdout
        self._wait_daemon(step, "slurmctld", answers, log, 40)

    def _slurmd(self, k):
        step = f"start slurmd on node{k}"
        name = self.names[k]
        log = self.tmp / "log" / f"slurmd-{name}.log"
        self._spawn(f"slurmd-{name}", self.wrap(k) + [_which("slurmd"), "-D", "-N", name, "-f", self.conf],
                    log)

        def registered():
            try:
                return "slurmd started" in log.read_text(errors="replace")
            except OSError:
                return False
        self._wait_daemon(step, f"slurmd-{name}", registered, log, 40)

    def node_states(self):
        r = self.run([_which("sinfo"), "-h", "-N", "-o", "%N %t"], timeout=15)
        return dict(line.split() for line in r.stdout.splitlines() if line.strip())

    def _wait_nodes_idle(self):
        states = {}

        def idle():
            nonlocal states
            states = self.node_states()
            return all(states.get(n) == "idle" for n in self.names)
        if not wait_until(idle, 40, 0.2):
            logs = "".join(f"\n--- {n}:\n{_tail(self.tmp / 'log' / f'slurmd-{n}.log', 10)}" for n in self.names)
            self._fail("wait for the nodes to be idle", f"sinfo says {states}{logs}",
                       self.tmp / "log" / "slurmctld.log")

    # ------------------------------------------------------------------ jobs

    def sbatch(self, args, env=None, cwd=None, timeout=30):
        """Submits; returns the job id (str). Fails with sbatch's output."""
        r = self.run([_which("sbatch"), "--parsable", *args], env=env, cwd=cwd, timeout=timeout)
        if r.returncode != 0:
            raise SlurmClusterError(f"sbatch {' '.join(map(str, args))} exited {r.returncode}: "
                                    f"{r.stdout}{r.stderr}")
        return r.stdout.strip().split(";")[0]

    def job(self, job_id):
        """scontrol show job's fields as a dict ({} once the job is forgotten)."""
        r = self.run([_which("scontrol"), "-o", "show", "job", str(job_id)], timeout=15)
        if r.returncode != 0:
            return {}
        fields = {}
        for tok in shlex.split(r.stdout.strip()):
            if "=" in tok:
                k, v = tok.split("=", 1)
                fields[k] = v
        return fields

    def job_state(self, job_id):
        return self.job(job_id).get("JobState", "")

    def wait_state(self, job_id, states, timeout=60):
        """Waits until the job's state is one of states; returns it (or the last seen)."""
        seen = [""]

        def ok():
            seen[0] = self.job_state(job_id)
            return seen[0] in states
        wait_until(ok, timeout, 0.1)
        return seen[0]

    def squeue(self):
        r = self.run([_which("squeue"), "-h", "-o", "%i %T %N"], timeout=15)
        return [line for line in r.stdout.splitlines() if line.strip()]

    def scancel(self, job_id, *args):
        return self.run([_which("scancel"), *args, str(job_id)], timeout=15)

    def ns_pids(self, k):
        """pids in node k's network namespace other than its slurmd."""
        r = ip("netns", "pids", self.ns[k])
        daemon = self.procs.get(f"slurmd-{self.names[k]}")
        pids = [int(p) for p in r.stdout.split() if p.strip().isdigit()]
        def is_slurmd(p):
            try:
                with open(f"/proc/{p}/comm") as f:
                    return f.read().strip() == "slurmd"
            except OSError:
                return False
        return [p for p in pids if not (daemon and p == daemon.pid) and not is_slurmd(p)]

    def describe_pids(self, pids):
        out = []
        for p in pids:
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                out.append(f"{p}: {cmd}")
            except OSError:
                pass
        return out

    def logs(self, n=30):
        names = ["slurmctld"] + [f"slurmd-{n_}" for n_ in self.names]
        return "".join(f"\n--- {x}.log:\n{_tail(self.tmp / 'log' / (x + '.log'), n)}" for x in names)

    # ------------------------------------------------------------------ stop

    def stop(self):
        # daemons: SIGTERM (slurmd/slurmctld save state and exit), then SIGKILL
        for name, p in list(self.procs.items()):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.monotonic() + 10
        for name, p in list(self.procs.items()):
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for name, p in list(self.procs.items()):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        # anything left in the namespaces (slurmstepd, job processes) or marked
        for _ in range(3):
            for ns in self.namespaces:
                r = ip("netns", "pids", ns)
                for pid in r.stdout.split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (OSError, ValueError):
                        pass
            kill_marked(self.marker)
            if not find_marked(self.marker):
                break
            time.sleep(0.1)
        self.procs = {}
        if self.host_link:
            ip("link", "del", self.host_if)
            self.host_link = False
        for ns in self.namespaces:
            ip("netns", "del", ns)
        self.namespaces = []
        self.started = False
        if not self.keep_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def leftovers(self):
        """Processes still carrying the marker (should be [] after stop)."""
        return find_marked(self.marker)


class SlurmClusterTestCase(unittest.TestCase):
    """Starts one cluster for the whole class (cls.cluster) and stops it at the end."""
    NODES = 2
    CPUS = 2
    GPUS = 0
    cluster = None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        SlurmCluster.check_prerequisites()
        cluster = SlurmCluster(nodes=cls.NODES, cpus=cls.CPUS, gpus=cls.GPUS)
        t0 = time.monotonic()
        cluster.start()
        cls.cluster = cluster
        cls.cluster_start_s = time.monotonic() - t0
        print(f"\nslurm_cluster: up in {cls.cluster_start_s:.1f}s (ctl {cluster.ctl_addr}:{cluster.ctl_port}, "
              f"nodes {list(zip(cluster.names, cluster.addr))}, conf {cluster.conf})", flush=True)

    @classmethod
    def tearDownClass(cls):
        if cls.cluster is not None:
            marker = cls.cluster.marker
            cls.cluster.stop()
            left = find_marked(marker)
            cls.cluster = None
            if left:
                raise SlurmClusterError(f"slurm_cluster: processes left after teardown: {left}")
        super().tearDownClass()
