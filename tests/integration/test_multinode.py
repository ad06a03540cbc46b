"""Multi-node ddplaunch on loopback: several agents (one ddplaunch per node) as
separate processes form one job through the coordinator (hosted by node 0's agent
or by `ddplaunch serve`)."""

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import unittest
from pathlib import Path

from launcher_harness import BIN, is_alive, torch_available, wait_for_file, wait_until, worker
from multinode_harness import (EXIT_NODE_LOST, EXIT_RDZV, PROBE, MultiNodeTestCase,
                               by_node_rank, serve_command)

DIE = worker("die_on_rank.sh")
SLEEPER = worker("sleeper.sh")
RESTART = worker("restart_worker.sh")
ALLREDUCE = worker("torch_allreduce.py")
TORCH_DDP = worker("torch_ddp_fault.py")
HELLO = worker("hello.sh")

TORCH_OK = torch_available()

# silent-node detection, fast enough for tests
FAST_HB = "node_timeout=2,heartbeat_interval=0.5"


class FormJobTest(MultiNodeTestCase):
    """Agents form one job: unique, contiguous ranks and the right env everywhere."""

    def form(self, nnodes, nproc, node_ranks="explicit"):
        launches = self.start_agents(nnodes, nproc, [PROBE, str(self.outdir)],
                                     node_ranks=node_ranks)
        results = self.finish_all(launches)
        for res in results:
            self.assertEqual(res.rc, 0, self.describe_all(results))
        dumps = self.read_probes(nnodes * nproc)
        nodes = self.check_layout(dumps, nnodes, nproc, job_id=self.job_id,
                                  token=self.job_token)
        # which node did each agent become? (its own log line, cross-checked with
        # the console prefixes of its workers)
        node_of = []
        for res in results:
            m = re.search(r"joined as node (\d+) of (\d+)", res.err)
            self.assertIsNotNone(m, f"no 'joined as node K of N' line{res.describe()}")
            self.assertEqual(int(m.group(2)), nnodes, res.describe())
            node_of.append(int(m.group(1)))
        self.assertEqual(sorted(node_of), list(range(nnodes)), self.describe_all(results))
        if node_ranks == "explicit":
            self.assertEqual(node_of, list(range(nnodes)))
        self.check_console(results, nproc, node_of)
        # every worker's agent socket is its own agent's: one per node
        socks = {}
        for rank, d in dumps.items():
            socks.setdefault(int(d["env"]["GROUP_RANK"]), set()).add(
                d["env"]["DDPLAUNCH_AGENT_SOCKET"])
        self.assertTrue(all(len(s) == 1 for s in socks.values()), socks)
        self.assertEqual(len(set().union(*socks.values())), nnodes, socks)
        # the token is never printed in full
        for res in results:
            self.assertNotIn(self.job_token, res.out + res.err, res.describe())
        self.assert_no_leftovers()
        return results, dumps, node_of

    def test_two_agents_explicit_node_ranks(self):
        self.form(2, 2)

    def test_three_agents_explicit_node_ranks(self):
        self.form(3, 2)

    def test_two_agents_one_worker_each(self):
        self.form(2, 1)

    def test_three_agents_auto_assigned_node_ranks(self):
        results, _dumps, node_of = self.form(3, 1, node_ranks="auto")
        # exactly one agent hosts the coordinator (the one that could bind the endpoint)
        hosts = [i for i, r in enumerate(results) if "coordinator listening" in r.err]
        self.assertEqual(len(hosts), 1, self.describe_all(results))

    def test_auto_assigned_node_ranks_follow_arrival_order(self):
        nnodes, nproc = 3, 1
        launches = []
        for _ in range(nnodes):
            launches.append(self.start_agent(nnodes, nproc, [PROBE, str(self.outdir)]))
            self.wait_for_log(launches[-1], "joining job")
            time.sleep(0.3)  # let the join reach the coordinator before the next one
        results = self.finish_all(launches)
        for res in results:
            self.assertEqual(res.rc, 0, self.describe_all(results))
        for i, res in enumerate(results):
            self.assertRegex(res.err, rf"joined as node {i} of {nnodes}",
                             f"agent {i} (arrived {i}th){self.describe_all(results)}")
        self.check_layout(self.read_probes(nnodes * nproc), nnodes, nproc)
        self.check_console(results, nproc)
        self.assertIn("coordinator listening", results[0].err)
        self.assert_no_leftovers()

    def test_mixed_explicit_and_auto_node_ranks(self):
        # node 0 explicit (hosts the coordinator), node 2 explicit, one agent without
        # --node-rank: it must get the remaining rank 1
        nnodes, nproc = 3, 1
        launches = [self.start_agent(nnodes, nproc, [PROBE, str(self.outdir)], node_rank=0),
                    self.start_agent(nnodes, nproc, [PROBE, str(self.outdir)], node_rank=2)]
        self.wait_for_log(launches[1], "joining job")
        time.sleep(0.3)
        launches.append(self.start_agent(nnodes, nproc, [PROBE, str(self.outdir)]))
        results = self.finish_all(launches)
        for res in results:
            self.assertEqual(res.rc, 0, self.describe_all(results))
        self.assertRegex(results[2].err, r"joined as node 1 of 3", self.describe_all(results))
        self.check_layout(self.read_probes(3), nnodes, nproc)
        self.check_console(results, nproc, [0, 2, 1])
        self.assert_no_leftovers()

    def test_agent_socket_exists_with_mode_0600_while_job_runs(self):
        nnodes, nproc = 2, 2
        results = self.finish_all(self.start_agents(nnodes, nproc, [PROBE, str(self.outdir)]))
        for res in results:
            self.assertEqual(res.rc, 0, self.describe_all(results))
        dumps = self.read_probes(nnodes * nproc)
        paths = set()
        for rank, d in dumps.items():
            s = d["socket"]
            self.assertTrue(s.get("path"), f"rank {rank}: DDPLAUNCH_AGENT_SOCKET unset")
            self.assertNotIn("error", s, f"rank {rank}: stat({s['path']}) failed: {s}")
            self.assertTrue(s["is_socket"], f"rank {rank}: {s['path']} is not a socket: {s}")
            self.assertEqual(s["mode"], 0o600,
                             f"rank {rank}: {s['path']} mode {oct(s['mode'])}, want 0o600")
            self.assertEqual(s["uid"], os.getuid(), f"rank {rank}: socket owner {s}")
            paths.add(s["path"])
        self.assertEqual(len(paths), nnodes, f"one agent socket per node: {paths}")
        self.assert_no_leftovers()


class DetachedNodesTest(MultiNodeTestCase):
    """`ddplaunch -d` on every node: each command returns at once with the job id,
    the agents form the job in the background and record their ends."""

    def list_jobs(self, env):
        r = subprocess.run([str(BIN), "list", "--json"], env=env, capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_every_node_detached(self):
        xdg = self.tmp / "xdg"
        xdg.mkdir(mode=0o700)
        extra_env = {"XDG_RUNTIME_DIR": str(xdg)}   # this test's own job registry
        launches = [self.start_agent(2, 2, [PROBE, str(self.outdir)], node_rank=n, env_extra=extra_env,
                                     extra=["--detach"]) for n in range(2)]
        results = self.finish_all(launches)
        for res in results:
            self.assertEqual(res.rc, 0, res.describe())
            self.assertEqual(res.out.strip(), self.job_id, res.describe())
        env = self.mn_env(extra_env)
        ended = []

        def both_ended():   # the two agents record their ends a few milliseconds apart
            ended[:] = [j for j in self.list_jobs(env) if j["state"] != "running"]
            return len(ended) == 2
        wait_until(both_ended, 60, 0.2)
        jobs = self.list_jobs(env)
        self.assertEqual(len(jobs), 2, jobs)
        self.assertEqual(len(ended), 2, jobs)
        for j in jobs:
            self.assertEqual((j["job_id"], j["state"], j["exit_code"], j["ranks"], j["detached"]),
                             (self.job_id, "succeeded", 0, 4, True), j)
        self.assertEqual(sorted(j["node_rank"] for j in jobs), [0, 1], "the two rows name their nodes")
        self.check_layout(self.read_probes(4), 2, 2, job_id=self.job_id, token=self.job_token)
        # One console per machine (both agents run on this one); both nodes' ranks are in it.
        console = Path(jobs[0]["console"])
        self.assertRegex(console.name, r"^console\..+\.log$")
        self.assertEqual({(n, r) for (n, r) in by_node_rank(console.read_text())},
                         {(0, 0), (0, 1), (1, 2), (1, 3)}, console.read_text())
        self.assert_no_leftovers()


class TeardownTest(MultiNodeTestCase):
    """A worker failure on any node tears down the workers of every node at once."""

    def teardown_case(self, nnodes, nproc, fail_rank, mode, code):
        delay = 1.0
        launches = self.start_agents(
            nnodes, nproc, [DIE, mode, str(fail_rank), str(self.outdir), str(delay)],
            extra=["--shutdown-grace=3"])
        world = nnodes * nproc
        names = [f"pid_{r}" for r in range(world)]
        for name in names:
            if not wait_for_file(self.outdir / name, 15):
                results = [self.current_output(l) for l in launches]
                self.fail(f"{name} did not appear within 15s{self.describe_all(results)}")
        pids = {r: self.read_int(f"pid_{r}") for r in range(world)}

        # poll: when did the failing worker die, the others die, the agents exit?
        t_dead, t_exit = {}, {}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (len(t_exit) < nnodes or len(t_dead) < world):
            now = time.monotonic()
            for r, pid in pids.items():
                if r not in t_dead and not is_alive(pid, self.token):
                    t_dead[r] = now
            for i, l in enumerate(launches):
                if i not in t_exit and l.proc.poll() is not None:
                    t_exit[i] = now
            time.sleep(0.002)
        results = self.finish_all(launches, timeout=5)
        desc = self.describe_all(results)
        self.assertEqual(len(t_dead), world, f"workers still alive: "
                         f"{sorted(set(pids) - set(t_dead))}{desc}")
        self.assertEqual(len(t_exit), nnodes, desc)
        t_fail = t_dead[fail_rank]
        worker_spread = max(t_dead.values()) - t_fail
        agent_spread = max(t_exit.values()) - t_fail
        timing = (f"last worker died {worker_spread * 1000:.0f} ms and last agent exited "
                  f"{agent_spread * 1000:.0f} ms after rank {fail_rank} failed")
        sys.stderr.write(f"\n  {self.id()}: {timing}\n")
        for i, res in enumerate(results):
            self.assertEqual(res.rc, code, f"agent {i}: {timing}{desc}")
            self.assertRegex(res.err, rf"rank {fail_rank}\b",
                             f"agent {i} does not name the failing rank{desc}")
        self.assertLess(worker_spread, 1.0, timing + desc)
        self.assertLess(agent_spread, 3.0, timing + desc)
        # the failing worker's stderr reached its own node's console with its prefix
        fail_node = fail_rank // nproc
        self.assertIn(f"[{fail_node}:{fail_rank}] rank {fail_rank} is failing on purpose",
                      results[fail_node].err, desc)
        self.assert_no_leftovers()
        return results

    def test_failure_on_middle_node_tears_down_three_nodes(self):
        self.teardown_case(3, 2, fail_rank=3, mode="exit:7", code=7)

    def test_failure_on_coordinator_node_tears_down_all(self):
        self.teardown_case(2, 2, fail_rank=1, mode="exit:9", code=9)

    def test_failure_on_last_node_tears_down_all(self):
        self.teardown_case(2, 2, fail_rank=3, mode="exit:3", code=3)

    def test_signal_death_gives_128_plus_signal_on_every_node(self):
        self.teardown_case(2, 1, fail_rank=1, mode="kill:9", code=128 + 9)


class RestartTest(MultiNodeTestCase):
    """--max-restarts: the whole job restarts as generation 1 on every node."""

    def restart_case(self, nnodes, nproc, fail_rank):
        world = nnodes * nproc
        launches = self.start_agents(nnodes, nproc,
                                     [RESTART, str(self.outdir), "1", str(fail_rank), "4"],
                                     extra=["--max-restarts=1", "--shutdown-grace=3"])
        results = self.finish_all(launches)
        desc = self.describe_all(results)
        for res in results:
            self.assertEqual(res.rc, 0, desc)
        for r in range(world):
            path = self.outdir / f"attempt_1_rank_{r}"
            self.assertTrue(path.is_file(), f"rank {r} did not run in generation 1{desc}")
            facts = dict(l.split("=", 1) for l in path.read_text().splitlines() if "=" in l)
            self.assertEqual(facts["restart_count"], "1", f"rank {r}: {facts}")
            self.assertEqual(facts["attempt"], "1", f"rank {r}: {facts}")
            self.assertEqual(facts["max_restarts"], "1", f"rank {r}: {facts}")
            self.assertEqual(facts["job"], self.job_id, f"rank {r}: {facts}")
            self.assertIn("attempt_1", facts["rank_log_dir"], f"rank {r}: {facts}")
            self.assertTrue(self.rank_dir(r, attempt=1).is_dir(),
                            f"missing {self.rank_dir(r, attempt=1)}")
        self.assertFalse(any(self.outdir.glob("attempt_2_*")), "a third generation ran")
        # every node's console shows both generations of its own ranks
        for k, res in enumerate(results):
            lines = by_node_rank(res.out)
            for r in range(k * nproc, k * nproc + nproc):
                self.assertIn(f"rank {r} attempt 1", lines.get((k, r), []), desc)
        self.assertIn(f"rank {fail_rank} failing in attempt 0", results[fail_rank // nproc].err,
                      desc)
        self.assert_no_leftovers()

    def test_restart_after_failure_on_node_1(self):
        self.restart_case(2, 2, fail_rank=2)

    def test_restart_after_failure_on_node_0_three_nodes(self):
        self.restart_case(3, 1, fail_rank=0)


class RefusalTest(MultiNodeTestCase):
    """Wrong token, mismatched agents and duplicates are refused; the right agents'
    job goes on."""

    def refused_then_job_completes(self, nnodes, intruder_kw, message, extra_right=()):
        nproc = 2
        prog = [PROBE, str(self.outdir)]
        right = [self.start_agent(nnodes, nproc, prog, node_rank=0, extra=extra_right)]
        self.wait_for_log(right[0], "coordinator listening")
        for k in range(1, nnodes - 1):  # all but the last right agent join first
            right.append(self.start_agent(nnodes, nproc, prog, node_rank=k, extra=extra_right))
            self.wait_for_log(right[-1], "joining job")
        time.sleep(0.3)
        kw = dict(nnodes=nnodes, nproc=nproc, node_rank=1)
        kw.update(intruder_kw)
        intruder = self.start_agent(kw.pop("nnodes"), kw.pop("nproc"), prog, **kw)
        bad = self.finish_all([intruder], timeout=10)[0]
        self.assertEqual(bad.rc, EXIT_RDZV, bad.describe())
        self.assertIn(message, bad.err.lower(), bad.describe())
        self.assertNotIn("[", bad.out, f"the refused agent ran workers{bad.describe()}")
        # the right job goes on
        right.append(self.start_agent(nnodes, nproc, prog, node_rank=nnodes - 1,
                                      extra=extra_right))
        results = self.finish_all(right)
        desc = self.describe_all(results) + "\n=== refused agent" + bad.describe()
        for res in results:
            self.assertEqual(res.rc, 0, desc)
        # the coordinator (node 0's agent) logged the refusal
        coord_log = results[0].err.lower()
        self.assertTrue("refused" in coord_log and message in coord_log,
                        f"coordinator did not log the refusal ({message!r}){desc}")
        self.check_layout(self.read_probes(nnodes * nproc), nnodes, nproc,
                          token=self.job_token)
        self.check_console(results, nproc)
        self.assert_no_leftovers()
        return bad, results

    def test_wrong_token_refused(self):
        bad_token = "wrong" + secrets.token_hex(8)
        bad, results = self.refused_then_job_completes(2, {"token": bad_token}, "wrong token")
        for res in results + [bad]:
            self.assertNotIn(self.job_token, res.out + res.err, "job token printed in full")
            self.assertNotIn(bad_token, res.out + res.err, "intruder token printed in full")

    def test_world_size_mismatch_refused(self):
        self.refused_then_job_completes(2, {"nnodes": 3}, "mismatch")

    def test_nproc_mismatch_refused(self):
        self.refused_then_job_completes(2, {"nproc": 3}, "mismatch")

    def test_duplicate_node_rank_refused(self):
        # nodes 0 and 1 have joined a 3-node job; a second --node-rank=1 is refused;
        # node 2 then completes the world
        self.refused_then_job_completes(3, {"node_rank": 1}, "duplicate node rank")

    def test_wrong_token_via_env_refused(self):
        # DDPLAUNCH_TOKEN in the environment instead of --token
        nproc = 1
        prog = [PROBE, str(self.outdir)]
        a0 = self.start_agent(2, nproc, prog, node_rank=0)
        self.wait_for_log(a0, "coordinator listening")
        args = self.agent_args(2, nproc, prog, node_rank=1)
        args = [a for a in args if not a.startswith("--token=")]
        bad = self.finish_all([self.start(args, job_id=False, env=self.mn_env(
            {"DDPLAUNCH_TOKEN": "envwrong" + secrets.token_hex(4)}))], timeout=10)[0]
        self.assertEqual(bad.rc, EXIT_RDZV, bad.describe())
        self.assertIn("wrong token", bad.err.lower(), bad.describe())
        good = self.finish_all([self.start(args, job_id=False, env=self.mn_env(
            {"DDPLAUNCH_TOKEN": self.job_token}))])[0]
        r0 = self.finish_all([a0])[0]
        self.assertEqual((r0.rc, good.rc), (0, 0), r0.describe() + good.describe())
        self.check_layout(self.read_probes(2), 2, nproc, token=self.job_token)
        self.assert_no_leftovers()


class JoinTimeoutTest(MultiNodeTestCase):

    def test_single_agent_of_two_times_out(self):
        t0 = time.monotonic()
        res = self.finish_all([self.start_agent(2, 1, [PROBE, str(self.outdir)], node_rank=0,
                                                conf="join_timeout=2")], timeout=15)[0]
        elapsed = time.monotonic() - t0
        self.assertEqual(res.rc, EXIT_RDZV, res.describe())
        self.assertIn("rendezvous timed out", res.err, res.describe())
        self.assertGreater(elapsed, 1.5, f"gave up before join_timeout{res.describe()}")
        self.assertLess(elapsed, 8.0, res.describe())
        self.assertEqual(list(self.outdir.iterdir()), [], "a worker ran without a world")
        self.assert_no_leftovers()

    def test_a_long_wait_says_the_others_have_not_joined(self):
        # node 0 hosts the coordinator, so it is connected: what is missing is node 1
        res = self.finish_all([self.start_agent(2, 1, [PROBE, str(self.outdir)], node_rank=0,
                                                conf="join_timeout=7")], timeout=20)[0]
        self.assertEqual(res.rc, EXIT_RDZV, res.describe())
        self.assertIn("rendezvous: still waiting after 5 s: connected to the coordinator; waiting for the "
                      "other node(s) to join", res.err, res.describe())
        # and the coordinator (hosted by this agent) says which node is missing
        self.assertRegex(res.err, r"rendezvous of job \S+: 1 of 2 node\(s\) joined generation 0 \(hosts: [^)]+\); "
                                  r"not joined yet: node rank\(s\) 1\n", res.describe())
        self.assert_no_leftovers()

    def test_a_long_wait_says_the_coordinator_does_not_answer(self):
        # node 1 alone: nobody listens at the endpoint
        res = self.finish_all([self.start_agent(2, 1, [PROBE, str(self.outdir)], node_rank=1,
                                                conf="join_timeout=5.5")], timeout=25)[0]
        self.assertEqual(res.rc, EXIT_RDZV, res.describe())
        refused = f"127.0.0.1 refused the connection on port {self.port} (nothing listens there)"
        self.assertIn(f"rendezvous: still waiting after 5 s: cannot reach the coordinator at 127.0.0.1:{self.port}: "
                      + refused, res.err, res.describe())
        self.assertIn(f"rendezvous failed: cannot reach the coordinator at 127.0.0.1:{self.port}: " + refused,
                      res.err, res.describe())
        self.assertEqual(list(self.outdir.iterdir()), [], "a worker ran without a world")
        self.assert_no_leftovers()

    def test_status_while_the_world_forms_says_who_joined_then_shows_the_ranks(self):
        def status(*extra):
            return subprocess.run([str(BIN), "status", "--job", self.job_id, *extra], stdin=subprocess.DEVNULL,
                                  capture_output=True, env=self.mn_env(), text=True, timeout=10)
        first = self.start_agent("2:3", 1, [SLEEPER, str(self.outdir)], node_rank=0,
                                 conf="join_timeout=60,last_call_timeout=1")
        forming = wait_until(lambda: "rendezvous: 1 of 2:3 node(s) joined" in status().stdout, 15, 0.2)
        table = status()
        self.assertTrue(forming, f"{table.stdout}{table.stderr}{self.current_output(first).describe()}")
        self.assertRegex(table.stdout, rf"^job {self.job_id}: generation 0 \(rendezvous\), restarts 0/0, "
                                       r"elapsed [\d.]+ s, 2..3 rank\(s\) on 2..3 node\(s\)\n"
                                       r"rendezvous: 1 of 2:3 node\(s\) joined generation 0 \(hosts: [^)]+\); "
                                       r"no rank runs until the world has formed\n$")
        self.assertEqual(json.loads(status("--json").stdout)["state"], "rendezvous")
        stacks = subprocess.run([str(BIN), "stacks", "--job", self.job_id], stdin=subprocess.DEVNULL,
                                capture_output=True, env=self.mn_env(), text=True, timeout=10)
        self.assertEqual(stacks.returncode, 1, stacks.stdout)
        self.assertIn("generation 0 is still forming (rendezvous): no rank runs yet", stacks.stderr)
        second = self.start_agent("2:3", 1, [SLEEPER, str(self.outdir)], node_rank=1,
                                  conf="join_timeout=60,last_call_timeout=1")
        launches = [first, second]
        for r in range(2):
            if not wait_for_file(self.outdir / f"ready_{r}", 20):
                self.fail(f"ready_{r} did not appear{self.describe_all([self.current_output(l) for l in launches])}")
        doc = json.loads(status("--json").stdout)
        self.assertEqual((doc["state"], doc["world_size"]), ("running", 2), doc)
        self.assertNotIn("rendezvous", doc)
        self.assertRegex(status().stdout, r"(?m)^\s+1\s+.*no heartbeats")   # a row per rank again (shell ranks)
        for launch in launches:
            self.signal_launch(launch, signal.SIGTERM)
        self.finish_all(launches, timeout=20)
        self.assert_no_leftovers()

    def test_two_agents_of_three_time_out(self):
        t0 = time.monotonic()
        launches = self.start_agents(3, 1, [PROBE, str(self.outdir)], node_ranks=[0, 2],
                                     conf="join_timeout=2")
        results = self.finish_all(launches, timeout=15)
        elapsed = time.monotonic() - t0
        desc = self.describe_all(results)
        for res in results:
            self.assertEqual(res.rc, EXIT_RDZV, desc)
            self.assertIn("rendezvous timed out", res.err, desc)
        self.assertLess(elapsed, 8.0, desc)
        self.assertEqual(list(self.outdir.iterdir()), [], "a worker ran without a world")
        self.assert_no_leftovers()


class SilentNodeTest(MultiNodeTestCase):
    """SIGKILLed agents: their node goes silent; the others notice after node_timeout."""

    def start_sleepers(self, nnodes, nproc):
        launches = self.start_agents(nnodes, nproc, [SLEEPER, str(self.outdir)],
                                     conf=FAST_HB, extra=["--shutdown-grace=2"])
        world = nnodes * nproc
        for r in range(world):
            if not wait_for_file(self.outdir / f"ready_{r}", 15):
                results = [self.current_output(l) for l in launches]
                self.fail(f"ready_{r} did not appear{self.describe_all(results)}")
        pids = [self.read_int(f"pid_{r}") for r in range(world)]
        pids += [self.read_int(f"child_{r}") for r in range(world)]
        return launches, pids

    def test_sigkilled_agent_is_detected_as_silent_node(self):
        launches, pids = self.start_sleepers(2, 1)
        t_kill = time.monotonic()
        self.signal_launch(launches[1], signal.SIGKILL)
        results = self.finish_all(launches, timeout=15)
        elapsed = time.monotonic() - t_kill
        desc = self.describe_all(results)
        self.assertEqual(results[1].rc, -signal.SIGKILL, desc)
        self.assertEqual(results[0].rc, EXIT_NODE_LOST, desc)
        self.assertLess(elapsed, 2 + 5, f"node 0 noticed after {elapsed:.1f}s{desc}")
        self.assertRegex(results[0].err.lower(), r"node 1", desc)
        self.assert_dead(pids, what="worker")
        self.assert_no_leftovers()

    def test_sigkilled_agent_of_three_tears_down_the_other_two(self):
        launches, pids = self.start_sleepers(3, 1)
        t_kill = time.monotonic()
        self.signal_launch(launches[2], signal.SIGKILL)
        results = self.finish_all(launches, timeout=15)
        elapsed = time.monotonic() - t_kill
        desc = self.describe_all(results)
        self.assertEqual([r.rc for r in results], [EXIT_NODE_LOST, EXIT_NODE_LOST,
                                                   -signal.SIGKILL], desc)
        self.assertLess(elapsed, 2 + 5, f"noticed after {elapsed:.1f}s{desc}")
        self.assert_dead(pids, what="worker")
        self.assert_no_leftovers()

    def test_sigkilled_coordinator_agent_makes_others_give_up(self):
        launches, pids = self.start_sleepers(2, 1)
        t_kill = time.monotonic()
        self.signal_launch(launches[0], signal.SIGKILL)
        results = self.finish_all(launches, timeout=15)
        elapsed = time.monotonic() - t_kill
        desc = self.describe_all(results)
        self.assertEqual(results[0].rc, -signal.SIGKILL, desc)
        self.assertEqual(results[1].rc, EXIT_RDZV, desc)
        self.assertLess(elapsed, 2 + 5, f"node 1 gave up after {elapsed:.1f}s{desc}")
        self.assert_dead(pids, what="worker")
        self.assert_no_leftovers()


class ServeTest(MultiNodeTestCase):
    """`ddplaunch serve`: a standalone coordinator for many jobs."""

    def start_serve(self, extra=()):
        serve = self.start(None, env=self.mn_env(), raw_cmd=serve_command(0, "127.0.0.1", extra))
        self.wait_for_log(serve, "listening on ", stream="out")
        m = None

        def listening():
            nonlocal m
            m = re.search(r"listening on (\S+):(\d+)", serve.out_path.read_text())
            return m
        wait_until(listening, 5)
        self.assertIsNotNone(m, self.current_output(serve).describe())
        return serve, m.group(1), int(m.group(2))

    def test_serve_hosts_two_jobs_at_once(self):
        serve, host, port = self.start_serve()
        self.assertNotEqual(port, 0)
        marks = self.tmp / "marks"
        marks.mkdir()
        nnodes, nproc = 2, 2
        jobs = {}
        for name in ("a", "b"):
            job_id = f"{self.job_id}-{name}"
            outdir = self.outdir / name
            outdir.mkdir()
            token = f"tok{name}" + secrets.token_hex(6)
            # every worker of both jobs waits until all 8 have started
            prog = [PROBE, str(outdir), str(marks), str(2 * nnodes * nproc), name]
            jobs[name] = (job_id, outdir, token, [
                self.start_agent(nnodes, nproc, prog, node_rank=k, job_id=job_id,
                                 token=token, endpoint=f"{host}:{port}")
                for k in range(nnodes)])
        results = {n: self.finish_all(j[3]) for n, j in jobs.items()}
        self.assertIsNone(serve.proc.poll(), "serve exited while serving"
                          + self.current_output(serve).describe())
        for name, (job_id, outdir, token, _l) in jobs.items():
            desc = self.describe_all(results[name])
            for res in results[name]:
                self.assertEqual(res.rc, 0, desc)
                # the node-0 agent used the coordinator already on the port
                self.assertNotIn("coordinator listening", res.err, desc)
            self.check_layout(self.read_probes(nnodes * nproc, outdir), nnodes, nproc,
                              job_id=job_id, token=token)
            self.check_console(results[name], nproc)
        self.assertEqual(len(list(marks.iterdir())), 2 * nnodes * nproc)
        serve.proc.send_signal(signal.SIGTERM)
        sres = self.finish(serve, timeout=60)
        self.assertEqual(sres.rc, 128 + signal.SIGTERM, sres.describe())
        self.assert_no_leftovers()

    def test_serve_exits_130_on_sigint(self):
        serve, _host, _port = self.start_serve()
        serve.proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        res = self.finish_all([serve], timeout=10)[0]
        self.assertEqual(res.rc, 128 + signal.SIGINT, res.describe())
        self.assertLess(time.monotonic() - t0, 5.0, res.describe())

    def test_serve_with_refused_agent_keeps_serving(self):
        serve, host, port = self.start_serve()
        prog = [PROBE, str(self.outdir)]
        a0 = self.start_agent(2, 1, prog, node_rank=0, endpoint=f"{host}:{port}")
        self.wait_for_log(a0, "joining job")
        bad = self.finish_all([self.start_agent(2, 1, prog, node_rank=1, token="nope" + "x" * 8,
                                                endpoint=f"{host}:{port}")], timeout=10)[0]
        self.assertEqual(bad.rc, EXIT_RDZV, bad.describe())
        self.assertIn("wrong token", bad.err.lower(), bad.describe())
        a1 = self.start_agent(2, 1, prog, node_rank=1, endpoint=f"{host}:{port}")
        results = self.finish_all([a0, a1])
        for res in results:
            self.assertEqual(res.rc, 0, self.describe_all(results))
        self.assertIsNone(serve.proc.poll(), self.current_output(serve).describe())
        serve.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.finish_all([serve], timeout=10)[0].rc, 128 + signal.SIGTERM)


class SlurmDetectionTest(MultiNodeTestCase):
    """Node rank, nnodes and job id from the Slurm environment."""

    def slurm_case(self, use_master_env):
        nnodes, nproc = 2, 2
        slurm_job = str(900000 + secrets.randbelow(99999))
        launches = []
        for k in range(nnodes):
            env = {"SLURM_JOB_ID": slurm_job, "SLURM_STEP_NUM_NODES": str(nnodes),
                   "SLURM_STEP_NODELIST": "localhost,localhost", "SLURM_NODEID": str(k)}
            args = [f"--nproc-per-node={nproc}", f"--token={self.job_token}"]
            if use_master_env:
                env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(self.port)})
            else:
                args.append(f"--rdzv-endpoint={self.endpoint()}")
            args += [PROBE, str(self.outdir)]
            launches.append(self.start(args, job_id=False, env=self.mn_env(env)))
        results = self.finish_all(launches)
        desc = self.describe_all(results)
        for res in results:
            self.assertEqual(res.rc, 0, desc)
            first = res.err.splitlines()[0] if res.err else ""
            self.assertIn("(slurm)", first, f"first log line: {first!r}{desc}")
        dumps = self.read_probes(nnodes * nproc)
        self.check_layout(dumps, nnodes, nproc, job_id=slurm_job, token=self.job_token)
        self.check_console(results, nproc)
        self.assertTrue(self.job_dir(job_id=slurm_job).is_dir(),
                        f"log dir {self.job_dir(job_id=slurm_job)} missing")
        self.assert_no_leftovers()

    def test_slurm_env_with_master_addr_port(self):
        self.slurm_case(use_master_env=True)

    def test_slurm_env_with_rdzv_endpoint(self):
        self.slurm_case(use_master_env=False)


@unittest.skipUnless(TORCH_OK, "/usr/bin/python3 (PYTHON_EXEC) cannot import torch.distributed")
class TorchMultiNodeTest(MultiNodeTestCase):
    """A real 2-node PyTorch Gloo all_reduce through the torchrun env."""

    def gloo_env(self):
        return {"GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo")}

    def test_two_node_gloo_allreduce(self):
        nnodes, nproc = 2, 2
        world = nnodes * nproc
        results = self.finish_all(self.start_agents(nnodes, nproc, ALLREDUCE,
                                                    env_extra=self.gloo_env()), timeout=45)
        desc = self.describe_all(results)
        expected = world * (world - 1) // 2
        for k, res in enumerate(results):
            self.assertEqual(res.rc, 0, desc)
            lines = by_node_rank(res.out)
            for r in range(k * nproc, k * nproc + nproc):
                self.assertIn(f"rank {r} world {world} allreduce sum {expected} OK",
                              lines.get((k, r), []), desc)
        self.assert_no_leftovers()

    def test_rank_failure_on_node_1_unblocks_peers_on_node_0(self):
        # rank 3 raises before the collective; ranks 0..2 block in all_reduce until
        # every agent tears them down
        nnodes, nproc = 2, 2
        results = self.finish_all(self.start_agents(nnodes, nproc, [ALLREDUCE, "3"],
                                                    env_extra=self.gloo_env(),
                                                    extra=["--shutdown-grace=2"]), timeout=45)
        desc = self.describe_all(results)
        for res in results:
            self.assertEqual(res.rc, 1, desc)
        self.assertIn("rank 3 fails before all_reduce", results[1].err, desc)
        self.assert_no_leftovers()

    def test_a_sigkilled_agent_is_the_root_cause_not_the_peer_its_death_broke(self):
        # Node 1's agent dies with its rank while both train: node 0's rank
        # fails in its all-reduce at once (Gloo: connection closed), long
        # before node 1's silence is sure. The job still ends as node lost,
        # naming node 1, and node 0's own failure is reported as what followed.
        launches = self.start_agents(2, 1, [TORCH_DDP, "--torch-timeout", "60"], conf=FAST_HB,
                                     env_extra=self.gloo_env(), extra=["--shutdown-grace=2"])
        self.wait_for_log(launches[0], "torch_ddp_fault: 2 rank(s)", timeout=60, stream="out")
        self.signal_launch(launches[1], signal.SIGKILL)
        results = self.finish_all(launches, timeout=30)
        desc = self.describe_all(results)
        self.assertEqual(results[1].rc, -signal.SIGKILL, desc)
        self.assertEqual(results[0].rc, EXIT_NODE_LOST, desc)
        self.assertRegex(results[0].err, r"node 1 \(\S+\) went silent", desc)
        self.assertIn("Root Cause (the job's first failure, on node 1)", results[0].err, desc)
        report = self.failure_json(0)
        self.assertEqual(report["root_cause"]["node"], 1, report)
        self.assertIn("went silent", report["root_cause"]["description"], report)
        self.assertEqual(report["verdict"]["failed_node"], 1, report)
        if "first_local_failure" in report:   # rank 0 noticed before it was torn down
            self.assertEqual(report["first_local_failure"]["rank"], 0, report)
        self.assert_no_leftovers()


class MultiNodeUsageTest(MultiNodeTestCase):
    """Bad multi-node command lines: exit 2, one line, nothing started."""

    def usage(self, args, *mentions):
        res = self.run_launcher(args + [HELLO], env=self.mn_env(), timeout=10)
        self.assert_usage_error(res, *mentions)

    def test_nnodes_without_endpoint(self):
        self.usage(["--nnodes=2", "--node-rank=0", "--nproc-per-node=1"],
                   "endpoint", "master")

    def test_bad_rdzv_conf_key(self):
        self.usage(["--nnodes=2", "--node-rank=0", f"--rdzv-endpoint={self.endpoint()}",
                    "--rdzv-conf=bogus_key=1"], "bogus_key", "rdzv-conf", "rdzv_conf")

    def test_node_rank_not_below_nnodes(self):
        self.usage(["--nnodes=2", "--node-rank=2", f"--rdzv-endpoint={self.endpoint()}"],
                   "node-rank", "node rank", "node_rank")

    def test_tls_cert_without_key(self):
        cert = self.tmp / "cert.pem"
        cert.write_text("not really a certificate\n")
        self.usage(["--nnodes=2", "--node-rank=0", f"--rdzv-endpoint={self.endpoint()}",
                    f"--tls-cert={cert}"], "tls-key", "tls_key")


if __name__ == "__main__":
    unittest.main()
