"""Hangs and crashes of unmodified PyTorch scripts (Gloo, DDP, torch 1.13), diagnosed
through the Python companion that ddplaunch injects into every Python rank.

Each job runs workers/torch_ddp_trouble.py, a plain DDP script that knows nothing of
ddplaunch, on 3 ranks with --heartbeat-interval 0.5 and a short hang timeout, and
injects one trouble (a rank blocked in data loading, also in a DataLoader worker process,
also with DDP on a subgroup, a
skipped all_reduce, one skipped in a subgroup, a different tensor size, also in a
subgroup, a different dtype in a subgroup that Gloo completes, an exception, a crash in a DataLoader worker,
a skipped all_reduce or send among pipeline-style point-to-point calls, also with torch
2.2's counting of those imitated), or is stopped from outside
with SIGSTOP. The tests check who is named and how fast (from the trouble line the rank
prints to the report line, this process's clock), the merged stacks (ranks grouped by
identical stack, the odd group named), failure.json, the exit code, and that nothing is
left running. Others check `ddplaunch status` and `ddplaunch stacks` on a running job,
that a rank slowed down in its data loading is warned about as a straggler, that
DataLoader workers never report as the rank, that the user's own sitecustomize
still runs, and --no-python-companion.
"""

import json
import os
import re
import signal
import subprocess
import time
import unittest

from launcher_harness import BIN, LauncherTestCase, find_marked, is_alive, torch_available, wait_until, worker
from test_hangs import Watch, proc_env_rank

HB = 0.5
HANG = 3.0
SLACK_S = float(os.environ.get("DDPT_HANG_SLACK", "2.5"))
DETECT_BOUND = HANG + 2 * HB + SLACK_S
HANG_EXIT = 124
NPROC = 3
SCRIPT = worker("torch_ddp_trouble.py")
PHASES = {"data", "forward", "backward", "optimizer", "collective", "checkpoint", "other", "unknown"}

TROUBLE_RE = re.compile(r"^\[0:(\d+)\] torch_ddp_trouble: ([\w-]+) at step (\d+)")
STUCK_RE = re.compile(r"error: stuck_collective detected: rank (\d+) \(host \S+, pid (\d+), step (\d+), "
                      r"phase (\w+)(?:, [^()]*)?\) never entered (\w+) #(\d+) .*that ranks? ([\d,]+) ha(?:s|ve) waited")
SUBGROUP_RE = re.compile(r"error: stuck_collective detected: rank (\d+) \(host \S+, pid (\d+), step \d+, "
                         r"phase \w+(?:, [^()]*)?\) never entered (\w+) #(\d+) .*of group (\S+) \(ranks ([\d,]+)\) "
                         r"that ranks? ([\d,]+) ha(?:s|ve) waited in for [\d.]+ s; meanwhile ranks? ([\d,]+) ")
DESYNC_RE = re.compile(r"error: desync detected: desync at collective #(\d+): (.*)")
STRAGGLER_RE = re.compile(r"warning: straggler: rank (\d+) \(host [^)]*\) is a straggler: busy .* per step, "
                          r".*its heartbeats found it in phase (\w+) ")
SILENT_RE = re.compile(r"error: silent_rank detected: rank (\d+) \(host \S+, pid (\d+)")
GROUP_RE = re.compile(r"^  ranks? ([\d,-]+) \((\d+) of (\d+)\): (.*?)(   <- likely culprit)?$")


def merged_groups(text):
    """{ranks text: (stack display, likely culprit)} of the merged-stacks lines."""
    groups = {}
    for line in text.splitlines():
        m = GROUP_RE.match(line)
        if m:
            groups[m.group(1)] = (m.group(4), bool(m.group(5)))
    return groups


@unittest.skipUnless(torch_available(), "needs python3-torch (PYTHON_EXEC)")
class PythonCompanionTestCase(LauncherTestCase):
    def env(self, extra=None, drop=()):
        e = super().env(extra, drop)
        e["OMP_NUM_THREADS"] = "1"
        return e

    def start_script(self, *script_args, launcher_args=(), hang=HANG, env_extra=None):
        args = [f"--nproc-per-node={NPROC}", f"--heartbeat-interval={HB}", f"--hang-timeout={hang}",
                *launcher_args, SCRIPT, *script_args]
        launch = self.start(args, env_extra=env_extra)
        return launch, Watch(launch)

    def finish_watched(self, launch, watch, timeout):
        t_exit = watch.run_to_exit(timeout)
        return self.finish(launch, timeout=0.1 if t_exit else 1.0), t_exit

    def run_trouble(self, trouble, *script_args, timeout=90):
        launch, w = self.start_script("--trouble", trouble, *script_args)
        res, t_exit = self.finish_watched(launch, w, timeout)
        self.assertIsNotNone(t_exit, "ddplaunch did not exit" + res.describe())
        return res, w

    def assert_detected_in_time(self, watch, verdict, res):
        trouble = watch.first(TROUBLE_RE, "err")
        self.assertIsNotNone(trouble, "no trouble line" + res.describe())
        latency = verdict[0] - trouble[0]
        self.assertLess(latency, DETECT_BOUND, f"reported {latency:.2f} s after the trouble" + res.describe())
        return latency

    def stacks_json(self):
        r = subprocess.run([str(BIN), "stacks", "--job", self.job_id, "--json", "--wait", "10"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, env=self.env(), timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def status_ranks(self):
        r = subprocess.run([str(BIN), "status", "--job", self.job_id, "--json"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, env=self.env(), timeout=10)
        if r.returncode != 0:
            return {}
        return {x["rank"]: x for x in json.loads(r.stdout)["ranks"]["ranks"]}

    def wait_until_all_report(self, min_step=3, timeout=60):
        """Every rank monitored through its companion and past min_step."""
        seen = {}

        def ready():
            seen.clear()
            seen.update(self.status_ranks())
            return len(seen) == NPROC and all(r.get("monitored") and r.get("step", -1) >= min_step
                                              for r in seen.values())
        self.assertTrue(wait_until(ready, timeout, interval=0.2), f"ranks never all reported: {seen}")
        return dict(seen)


class PythonHangTests(PythonCompanionTestCase):
    def test_rank_blocked_in_data_loading(self):
        res, _ = self.assert_rank_2_blocked_in_data_loading()
        self.assertIn("time.sleep(3600)", (self.rank_dir(2) / "stacks.log").read_text())

    def test_rank_blocked_in_a_dataloader_worker(self):
        """With DataLoader workers the line that holds the rank up runs in a worker
        process: the merged stack goes on from the rank's wait into that worker's."""
        self.assert_rank_2_blocked_in_a_worker("--workers", "2")

    def test_rank_blocked_in_a_spawned_dataloader_worker(self):
        """The same with workers started by spawn: fresh interpreters, which inherit
        no companion from the rank."""
        self.assert_rank_2_blocked_in_a_worker("--workers", "2", "--worker-start", "spawn")

    def assert_rank_2_blocked_in_a_worker(self, *script_args):
        res, culprit_stack = self.assert_rank_2_blocked_in_data_loading(*script_args)
        m = re.search(r" -> DataLoader worker \(worker (\d), pid (\d+)\) -> ", culprit_stack)
        self.assertIsNotNone(m, res.describe())
        worker_pid = m.group(2)
        log = (self.rank_dir(2) / "stacks.log").read_text()
        self.assertIn(f"--- DataLoader worker (worker {m.group(1)}, pid {worker_pid}) ---", log)
        # Every worker of rank 2 answered on its own too, the stuck one in __getitem__.
        children = set(re.findall(r"^Thread child pid (\d+): ", log, re.M))
        self.assertEqual(len(children), 2, log)
        self.assertIn(worker_pid, children)
        stuck = [t for t in log.split("\nThread ") if t.startswith(f"child pid {worker_pid}: ")]
        self.assertIn("time.sleep(3600)", "".join(stuck))
        for r in (0, 1):   # the waiting ranks' workers answered, idle
            self.assertEqual(len(set(re.findall(r"^Thread child pid (\d+): ",
                                                (self.rank_dir(r) / "stacks.log").read_text(), re.M))), 2)

    def assert_rank_2_blocked_in_data_loading(self, *script_args):
        """Runs rank 2 into a blocking Dataset.__getitem__ at step 20; checks the
        report, its timing, the merged stacks, failure.json and that nothing is left.
        Returns the result and rank 2's merged stack."""
        res, w = self.run_trouble("data-hang@20:2", *script_args)
        self.assertEqual(res.rc, HANG_EXIT, res.describe())
        stuck = w.first(STUCK_RE, "err")
        self.assertIsNotNone(stuck, "no stuck_collective report" + res.describe())
        m = stuck[1]
        self.assertEqual(int(m.group(1)), 2, res.describe())
        self.assertEqual(m.group(4), "data", res.describe())
        self.assertEqual(m.group(5), "all_reduce", res.describe())
        self.assertEqual(m.group(7), "0,1", res.describe())
        self.assert_detected_in_time(w, stuck, res)

        groups = merged_groups(res.err)
        self.assertIn("2", groups, res.describe())
        culprit_stack, culprit = groups["2"]
        self.assertTrue(culprit, res.describe())
        self.assertRegex(culprit_stack, r"torch_ddp_trouble\.py:\d+ main \(for step, \(x, y\) in itertools\.chain\(\[first\], batches\):\)")
        self.assertRegex(culprit_stack, r"torch_ddp_trouble\.py:\d+ __getitem__ \(time\.sleep\(3600\)\)$")
        waiting_stack, waiting_culprit = groups["0,1"]
        self.assertFalse(waiting_culprit)
        self.assertIn("(loss.backward())", waiting_stack)
        self.assertNotIn("_ddplaunch_companion", res.err.split("grouped by identical stack")[1].split("stopping")[0])

        hang = self.failure_json()["hang"]
        self.assertEqual(hang["kind"], "stuck_collective")
        self.assertEqual(hang["culprits"], [2])
        by_ranks = {tuple(g["ranks"]): g for g in hang["stacks"]["groups"]}
        self.assertEqual(set(by_ranks), {(0, 1), (2,)})
        self.assertTrue(by_ranks[(2,)]["likely_culprit"])
        self.assertEqual(hang["stacks"]["did_not_answer"], [])
        for r in range(NPROC):
            text = (self.rank_dir(r) / "stacks.log").read_text()
            self.assertIn("MainThread", text)
        self.assert_no_leftovers(timeout=2.0)
        return res, culprit_stack

    def assert_slow_work_is_not_a_hang(self, kind, *script_args):
        """Rank 1's trouble `kind` at step 5 is slow work: the run ends with 0, no verdict."""
        launch, w = self.start_script("--trouble", f"{kind}@5:1", *script_args)
        res, t_exit = self.finish_watched(launch, w, 90)
        self.assertIsNotNone(t_exit, "ddplaunch did not exit" + res.describe())
        self.assertEqual(res.rc, 0, res.describe())
        self.assertIn(f"torch_ddp_trouble: {kind} at step 5 (rank 1)", res.err, res.describe())
        self.assertIn("torch_ddp_trouble: done", res.out, res.describe())
        self.assertNotIn("detected", res.err, res.describe())
        self.assert_no_leftovers(timeout=2.0)

    def test_an_evaluation_pass_longer_than_the_hang_timeout_is_not_a_hang(self):
        # Every rank evaluates for 2.5 hang timeouts with no step and no collective,
        # then rank 1 goes on as long again while ranks 0 and 2 wait in the all_reduce
        # of the result: they go through batches and forwards all along.
        self.assert_slow_work_is_not_a_hang("long-eval", "--eval-seconds", str(2.5 * HANG))

    def test_a_checkpoint_written_for_longer_than_the_hang_timeout_is_not_a_hang(self):
        # torch.save writes each tensor with the GIL held, and rank 1's take 2.5 hang
        # timeouts in all while ranks 0 and 2 wait in a barrier: no phase returns
        # meanwhile, and heartbeats may not leave. Its process's writes go on all
        # along (the agent reads them from /proc), so it is saving.
        self.assert_slow_work_is_not_a_hang("slow-save", "--save-seconds", str(2.5 * HANG))

    def test_a_checkpoint_whose_writes_stop_is_a_hang_in_the_checkpoint_phase(self):
        res, w = self.run_trouble("stalled-save@5:1")
        self.assertEqual(res.rc, HANG_EXIT, res.describe())
        silent = w.first(SILENT_RE, "err")
        self.assertIsNotNone(silent, "no silent_rank report" + res.describe())
        self.assertEqual(silent[1].group(1), "1", res.describe())
        self.assertIn("phase checkpoint", silent[1].string, res.describe())
        self.assert_detected_in_time(w, silent, res)
        hang = self.failure_json()["hang"]
        self.assertEqual(hang["kind"], "silent_rank")
        self.assertEqual(hang["culprits"], [1])
        groups = merged_groups(res.err)
        self.assertIn("torch.save(", groups["1"][0], res.describe())
        self.assert_no_leftovers(timeout=2.0)

    def test_rank_that_skips_an_all_reduce(self):
        res, w = self.run_trouble("skip@10:1")
        self.assertEqual(res.rc, HANG_EXIT, res.describe())
        desync = w.first(DESYNC_RE, "err")
        self.assertIsNotNone(desync, "no desync report" + res.describe())
        self.assertRegex(desync[1].group(2), r"^ranks 0,2 all_reduce 4 B float32, rank 1 barrier")
        self.assert_detected_in_time(w, desync, res)
        hang = self.failure_json()["hang"]
        self.assertEqual(hang["kind"], "desync")
        self.assertEqual(hang["culprits"], [1])
        groups = merged_groups(res.err)
        self.assertIn("(dist.barrier())", groups["1"][0], res.describe())
        self.assertTrue(groups["1"][1], res.describe())
        self.assertIn("(dist.all_reduce(metric))", groups["0,2"][0], res.describe())
        self.assert_no_leftovers(timeout=2.0)

    def assert_pair_member_blamed(self, res, w, meanwhile):
        """The report blames rank 1 alone for an all_reduce of the group of ranks 0
        and 1 that rank 0 waits in, `meanwhile` waiting elsewhere, in time; the hang
        of failure.json."""
        self.assertEqual(res.rc, HANG_EXIT, res.describe())
        stuck = w.first(SUBGROUP_RE, "err")
        self.assertIsNotNone(stuck, "no stuck_collective report naming the subgroup" + res.describe())
        culprit, op, group_ranks, waiting, others = stuck[1].group(1, 3, 6, 7, 8)
        self.assertEqual((culprit, op, group_ranks, waiting, others), ("1", "all_reduce", "0,1", "0", meanwhile),
                         res.describe())
        self.assert_detected_in_time(w, stuck, res)
        hang = self.failure_json()["hang"]
        self.assertEqual((hang["kind"], hang["culprits"], hang["waiting"]), ("stuck_collective", [1], [0]))
        self.assertEqual(hang["group_ranks"], [0, 1])
        return hang

    def test_rank_that_skips_a_subgroup_all_reduce(self):
        # Rank 1 skips its all_reduce in the group of ranks 0 and 1 and goes on into
        # the loss all_reduce with rank 2; rank 0 waits in the group's for rank 1.
        res, w = self.run_trouble("subgroup-skip@10:1")
        hang = self.assert_pair_member_blamed(res, w, meanwhile="1,2")
        self.assertEqual(hang["sequence"], 11)   # the group's 11th all_reduce (steps 0-9 made 10)
        by_rank = {r["rank"]: r for r in hang["ranks"]}
        open0 = by_rank[0]["open_collectives"]
        self.assertEqual([(c["op"], c["sequence"], c.get("group")) for c in open0],
                         [("all_reduce", 11, hang["group"])], open0)
        self.assertEqual(by_rank[1]["subgroups"][0]["last_enqueued"], 10)
        groups = merged_groups(res.err)
        self.assertIn("(dist.all_reduce(metric.clone(), group=pair))", groups["0"][0], res.describe())
        self.assertIn("(dist.all_reduce(metric))", groups["1,2"][0], res.describe())
        self.assert_no_leftovers(timeout=2.0)

    def test_rank_blocked_in_data_loading_under_ddp_on_a_subgroup(self):
        # DDP runs on process_group=new_group([0, 1]) (rank 2 on a group of its own). Rank 1
        # blocks in its data loading: rank 0 waits in DDP's gradient all-reduce on the
        # pair's group (issued in C++, counted by torch's counter of that group), rank 2 in
        # the loss all_reduce that ranks 0 and 1 never reach. Only rank 1 is to blame.
        res, w = self.run_trouble("data-hang@10:1", "--ddp-groups")
        hang = self.assert_pair_member_blamed(res, w, meanwhile="2")
        self.assertIn("phase data", hang["summary"], hang)
        by_rank = {r["rank"]: r for r in hang["ranks"]}
        pair0 = [g for g in by_rank[0]["subgroups"] if g["group"] == hang["group"]][0]
        pair1 = [g for g in by_rank[1]["subgroups"] if g["group"] == hang["group"]][0]
        # DDP made steps 0-9's all-reduces on the pair's group (and its set-up ones before)
        self.assertEqual(pair0["last_enqueued"], hang["sequence"], pair0)
        self.assertEqual(pair1["last_enqueued"], hang["sequence"] - 1, pair1)
        self.assertGreaterEqual(hang["sequence"], 11, hang)
        groups = merged_groups(res.err)
        self.assertIn("(loss.backward())", groups["0"][0], res.describe())
        self.assertRegex(groups["1"][0], r"__getitem__ \(time\.sleep\(3600\)\)$", res.describe())
        self.assertTrue(groups["1"][1], res.describe())
        self.assertIn("(dist.all_reduce(metric))", groups["2"][0], res.describe())
        self.assert_no_leftovers(timeout=2.0)

    def test_rank_that_issues_a_different_size(self):
        # Gloo aborts a process on mismatched sizes within milliseconds; the
        # report names the desync either as the verdict or behind the crash.
        res, w = self.run_trouble("size@10:1")
        self.assertNotEqual(res.rc, 0, res.describe())
        self.assertRegex(res.err, r"desync at collective #\d+: ranks 0,2 all_reduce 4 B float32, "
                                  r"rank 1 all_reduce 3\.9 KiB \(4000 B\) float32", res.describe())
        self.assert_no_leftovers(timeout=2.0)

    def test_rank_that_issues_a_different_size_in_a_subgroup(self):
        # Ranks 0 and 1 all-reduce in their own group every step; at step 30 rank 1
        # passes 1000 floats there instead of 1. Gloo aborts a rank within
        # milliseconds; each rank announced that collective, with its group, as it
        # started, so the report still compares them.
        res, w = self.run_trouble("subgroup-size@30:1")
        self.assertNotEqual(res.rc, 0, res.describe())
        self.assertRegex(res.err, r"desync at collective #31 of group \S+ \(ranks 0,1\): rank 0 all_reduce 4 B "
                                  r"float32, rank 1 all_reduce 3\.9 KiB \(4000 B\) float32", res.describe())
        self.assert_no_leftovers(timeout=2.0)

    def test_rank_that_issues_another_dtype_in_a_subgroup(self):
        # As above, but rank 1 passes an int32 tensor of the same 4 bytes. Gloo
        # completes that (with a wrong sum) and the run goes on: no rank waits or
        # fails, and only the members' last calls on the group, which their
        # heartbeats carry, show the mismatch. 0.1 s steps: a heartbeat interval
        # (0.5 s) holds fewer calls than a heartbeat carries of a group (16).
        res, w = self.run_trouble("subgroup-dtype@30:1", "--step-sleep", "0.1")
        self.assertEqual(res.rc, HANG_EXIT, res.describe())
        self.assertRegex(res.err, r"error: desync detected: desync at collective #31 of group \S+ \(ranks 0,1\): "
                                  r"rank 0 all_reduce 4 B float32, rank 1 all_reduce 4 B int32", res.describe())
        verdict = w.first(re.compile(r"error: desync detected"), "err")
        self.assert_detected_in_time(w, verdict, res)
        # Every rank was found in the same place, which names no one.
        groups = merged_groups(res.err)
        self.assertEqual([g[1] for g in groups.values()], [False], res.describe())
        self.assert_no_leftovers(timeout=2.0)

    # Point-to-point calls (--p2p: the loss passed down the ranks as in a pipeline,
    # rank 0 only sending, rank 2 only receiving, and a monitored_barrier every 10
    # steps) are no collectives. torch 1.13 leaves them out of a group's counter;
    # torch 2.2's Gloo counts them, which --p2p-counted makes torch 1.13 do. Under
    # either, the ranks' numbers must stay those of their collectives.

    def desync_number_both_ways(self, trouble, script_arg, later_torch, expected):
        """Runs `trouble` with `script_arg`, as torch 1.13 counts and with the flag
        `later_torch` (torch 1.13 made to count as a later torch does). Each time
        the job stops on a desync whose ranks and calls match `expected(later)`
        (a regex), blaming rank 1. Returns {later: (the desync's number, the result)}."""
        runs = {}
        for later in (False, True):
            self.job_id = "job-%s%s" % (self.token, "-later" if later else "")
            res, w = self.run_trouble(trouble, script_arg, *((later_torch,) if later else ()))
            self.assertEqual(res.rc, HANG_EXIT, res.describe())
            desync = w.first(DESYNC_RE, "err")
            self.assertIsNotNone(desync, f"no desync report (later torch: {later})" + res.describe())
            self.assertRegex(desync[1].group(2), expected(later), res.describe())
            self.assert_detected_in_time(w, desync, res)
            self.assertEqual(self.failure_json()["hang"]["culprits"], [1])
            runs[later] = int(desync[1].group(1)), res
            self.assert_no_leftovers(timeout=2.0)
        return runs

    def test_a_skipped_all_reduce_gets_the_same_number_whether_torch_counts_point_to_point_calls(self):
        runs = self.desync_number_both_ways("skip@30:1", "--p2p", "--p2p-counted",
                                            lambda later: r"^ranks 0,2 all_reduce 4 B float32, rank 1 barrier")
        self.assertEqual(runs[False][0], runs[True][0])

    def test_a_rank_waiting_in_a_receive_is_named_while_torch_counts_it(self):
        # Rank 1 skips its send: rank 2 waits in its recv (which torch 2.2 has
        # counted as it began) while ranks 0 and 1 wait in the loss all_reduce.
        res, w = self.run_trouble("skip-send@30:1", "--p2p", "--p2p-counted")
        self.assertEqual(res.rc, HANG_EXIT, res.describe())
        stuck = w.first(STUCK_RE, "err")
        self.assertIsNotNone(stuck, "no stuck_collective report" + res.describe())
        self.assertEqual(stuck[1].group(1, 5, 7), ("2", "all_reduce", "0,1"), res.describe())
        self.assertIn(", in recv from rank 1) never entered", stuck[1].group(0), "what rank 2 waits in" + res.describe())
        self.assert_detected_in_time(w, stuck, res)
        groups = merged_groups(res.err)
        self.assertIn("(dist.recv(tensor, previous, group=group))", groups["2"][0], res.describe())
        self.assertTrue(groups["2"][1], res.describe())
        self.assert_no_leftovers(timeout=2.0)

    def test_a_rank_waiting_in_a_receive_on_a_group_is_named_while_torch_counts_it(self):
        # As above on a group of all ranks (dist.new_group), numbered by torch's counter
        # of it, where the ranks also all-reduce the loss after the point-to-point calls.
        res, w = self.run_trouble("skip-send@30:1", "--p2p-group", "--p2p-counted")
        self.assertEqual(res.rc, HANG_EXIT, res.describe())
        stuck = w.first(re.compile(r"error: stuck_collective detected: rank (\d+) \(.*\) never entered (\w+) #(\d+) "
                                   r".*of group \S+ \(ranks ([\d,-]+)\) that ranks? ([\d,]+) ha(?:s|ve) waited"), "err")
        self.assertIsNotNone(stuck, "no stuck_collective report naming the group" + res.describe())
        self.assertEqual(stuck[1].group(1, 2, 4, 5), ("2", "all_reduce", "0-2", "0,1"), res.describe())
        self.assertEqual(int(stuck[1].group(3)), 31, res.describe())   # the group's all_reduce of step 30
        self.assert_no_leftovers(timeout=2.0)

    def assert_runs_to_its_end_without_desync(self, *script_args):
        launch, w = self.start_script(*script_args, "--step-sleep", "0.01")
        res, t_exit = self.finish_watched(launch, w, 90)
        self.assertEqual(res.rc, 0, res.describe())
        self.assertIn("torch_ddp_trouble: done", res.out, res.describe())
        self.assertNotIn("desync", res.err, res.describe())
        self.assert_no_leftovers(timeout=2.0)

    def test_a_pipeline_whose_point_to_point_calls_torch_counts_runs_to_its_end(self):
        self.assert_runs_to_its_end_without_desync("--p2p", "--p2p-counted", "--steps", "300")

    # A coalesced block (--coalesced: the loss and a 7-element tensor all-reduced in
    # one `with _coalescing_manager(...)`, as Megatron's bucketed reductions do) is
    # one collective to torch. torch 1.13 runs and counts its calls one by one;
    # torch 2.1 and later defer them into one call, counted once, as the block
    # ends, which --coalesced-deferred makes torch 1.13 do. Under either, the
    # block must be one number, the same on every rank.

    def test_coalesced_blocks_whose_calls_torch_defers_are_no_desync(self):
        self.assert_runs_to_its_end_without_desync("--coalesced", "--coalesced-deferred", "--steps", "200")

    def test_a_skipped_coalesced_block_gets_one_number_whether_torch_defers_its_calls_or_not(self):
        # Deferred, the others wait as the block ends, when the sum of its tensors is
        # known (4 + 28 B); called one by one, in its first call, before it is.
        runs = self.desync_number_both_ways(
            "skip-coalesced@30:1", "--coalesced", "--coalesced-deferred",
            lambda later: r"^ranks 0,2 all_reduce %s float32, rank 1 barrier" % ("32 B" if later else "0 B"))
        self.assertEqual(runs[False][0], runs[True][0])
        for later, inside in ((False, "(dist.all_reduce(metric.clone()))"), (True, "(with c10d._coalescing_manager(")):
            res = runs[later][1]
            groups = merged_groups(res.err)
            self.assertIn("(dist.barrier())", groups["1"][0], res.describe())
            self.assertIn(inside, groups["0,2"][0], res.describe())

    def rank_1_culprit_stack(self, trouble, verdict_re):
        """Runs `trouble` on rank 1; checks the hang exit and that the verdict
        (`verdict_re`, the rank its first group) names rank 1 in time, and that
        rank 1's merged stack is marked the likely culprit. Returns the result
        and that stack."""
        res, w = self.run_trouble(trouble)
        self.assertEqual(res.rc, HANG_EXIT, res.describe())
        verdict = w.first(verdict_re, "err")
        self.assertIsNotNone(verdict, "no verdict" + res.describe())
        self.assertEqual(int(verdict[1].group(1)), 1, res.describe())
        self.assert_detected_in_time(w, verdict, res)
        groups = merged_groups(res.err)
        self.assertIn("1", groups, res.describe())
        stack, culprit = groups["1"]
        self.assertTrue(culprit, res.describe())
        return res, stack

    def test_rank_that_holds_the_gil_in_c(self):
        """Its companion's thread cannot run: the rank is silent, and its stacks come
        from faulthandler, which the agent triggers with a signal."""
        res, stack = self.rank_1_culprit_stack("gil-hang@10:1", SILENT_RE)
        self.assertRegex(stack, r"torch_ddp_trouble\.py:\d+ main \(hold_the_gil\(\)\) -> "
                                r"torch_ddp_trouble\.py:\d+ hold_the_gil \(ctypes\.PyDLL\(None\)\.sleep\(3600\)")
        hang = self.failure_json()["hang"]
        by_ranks = {tuple(g["ranks"]): g for g in hang["stacks"]["groups"]}
        self.assertEqual(set(by_ranks), {(0, 2), (1,)}, res.describe())
        self.assertEqual(hang["stacks"]["did_not_answer"], [])
        self.assert_no_leftovers(timeout=2.0)

    def test_rank_waiting_for_a_program_it_started(self):
        """subprocess.run of a program that never returns (an upload): the merged
        stack goes on from the rank's wait into that program, which runs no companion."""
        _, stack = self.rank_1_culprit_stack("program-hang@10:1", STUCK_RE)
        self.assertRegex(stack, r"torch_ddp_trouble\.py:\d+ main \(subprocess\.run\(\[\"sleep\", \"3600\"\]\)"
                                r".* -> \.\.\. -> child process \(pid \d+: sleep 3600 \(sleeping in \w+\)\)$")
        self.assert_no_leftovers(timeout=2.0)

    def test_sigstop_of_a_rank(self):
        launch, w = self.start_script()
        ranks = self.wait_until_all_report()
        victim = ranks[1]["pid"]
        self.assertEqual(proc_env_rank(victim), 1)
        os.kill(victim, signal.SIGSTOP)
        t_stop = time.monotonic()
        silent = w.wait_for(SILENT_RE, DETECT_BOUND + 5, "err")
        res, t_exit = self.finish_watched(launch, w, 40)
        self.assertIsNotNone(silent, "no silent_rank report" + res.describe())
        self.assertEqual(int(silent[1].group(1)), 1, res.describe())
        self.assertEqual(int(silent[1].group(2)), victim, res.describe())
        self.assertLess(silent[0] - t_stop, DETECT_BOUND, res.describe())
        self.assertEqual(res.rc, HANG_EXIT, res.describe())
        groups = merged_groups(res.err)
        self.assertIn("1", groups, res.describe())
        self.assertIn("stopped by a signal (state T", groups["1"][0])
        self.assertFalse(is_alive(victim, self.token), f"stopped rank {victim} survived")
        self.assert_no_leftovers(timeout=2.0)


class PythonCrashTests(PythonCompanionTestCase):
    def test_exception_without_record_writes_the_error_file(self):
        res, _ = self.run_trouble("raise@5:2")
        self.assertEqual(res.rc, 1, res.describe())
        error = json.loads((self.rank_dir(2) / "error.json").read_text())
        self.assertEqual(error["message"]["message"], "ValueError: bad value at step 5")
        self.assertIn('raise ValueError(f"bad value at step {step}")', error["message"]["extraInfo"]["py_callstack"])
        root = self.failure_json()["root_cause"]
        self.assertEqual(root["rank"], 2)
        self.assertIn("ValueError: bad value at step 5", root["traceback"])
        self.assertRegex(res.err, r"traceback : Traceback \(most recent call last\):")
        self.assert_no_leftovers(timeout=2.0)

    def test_segfault_shows_the_python_stack_at_the_signal(self):
        res, _ = self.run_trouble("segfault@5:1")
        self.assertEqual(res.rc, 128 + signal.SIGSEGV, res.describe())   # as a shell reports it
        self.assertRegex(res.err, r"rank 1 \(node 0, local rank 1, pid \d+\) failed: killed by SIGSEGV")
        self.assertIn("  Python stack at the fatal signal (fatal_stack.log):\n"
                      "    Fatal Python error: Segmentation fault\n", res.err)
        self.assertRegex(res.err, r'\n      File "[^"]*torch_ddp_trouble\.py", line \d+ in decode_natively\n'
                                  r'      File "[^"]*torch_ddp_trouble\.py", line \d+ in main\n')
        self.assertRegex(res.err, r"traceback : Signal 11 \(SIGSEGV\) received by PID \d+\n"
                                  r"  Fatal Python error: Segmentation fault\n")
        root = self.failure_json()["root_cause"]
        self.assertEqual((root["rank"], root["signal_name"]), (1, "SIGSEGV"))
        self.assertIn("in decode_natively", root["traceback"])
        self.assertEqual(root["traceback"], root["fatal_stack"])
        self.assertNotIn("Extension modules", root["fatal_stack"])
        # The ranks the launcher stopped wrote nothing: their empty files are gone.
        for r in (0, 2):
            self.assertFalse((self.rank_dir(r) / "fatal_stack.log").exists())
        self.assert_no_leftovers(timeout=2.0)

    def test_segfault_in_a_dataloader_worker_shows_its_python_stack(self):
        """torch replaces faulthandler's handlers in its workers; the worker's stack
        at the signal is written all the same, and follows the rank's exception."""
        res, _ = self.run_trouble("loader-segfault@5:1")
        self.assertEqual(res.rc, 1, res.describe())
        root = self.failure_json()["root_cause"]
        self.assertEqual(root["rank"], 1, res.describe())
        # torch's SIGCHLD handler or its queue timeout tells the rank, whichever comes first
        self.assertRegex(root["traceback"], r"RuntimeError: DataLoader worker \(pid(\(s\))? \d+\) "
                                            r"(is killed by signal: Segmentation fault|exited unexpectedly)")
        self.assertRegex(root["fatal_stack"], r'File "[^"]*torch_ddp_trouble\.py", line \d+ in decode_natively\n'
                                              r'  File "[^"]*torch_ddp_trouble\.py", line \d+ in __getitem__\n')
        self.assertIn("in _worker_loop", root["fatal_stack"])
        self.assertRegex(res.err, r"  Python stack at a child process's fatal signal \(fatal_stack\.log\):\n"
                                  r"  Fatal Python error: Segmentation fault\n")
        self.assertIn("ERROR: Unexpected segmentation fault encountered in worker.", res.err)   # torch's, as before
        self.assert_no_leftovers(timeout=2.0)

    def test_crash_in_a_dataloader_worker(self):
        res, _ = self.run_trouble("loader-crash@5:1")
        self.assertEqual(res.rc, 1, res.describe())
        root = self.failure_json()["root_cause"]
        self.assertEqual(root["rank"], 1, res.describe())
        self.assertIn("Caught RuntimeError in DataLoader worker process 0", root["traceback"])
        self.assertIn("corrupt sample 5", root["traceback"])
        self.assert_no_leftovers(timeout=2.0)


class PythonLiveViewTests(PythonCompanionTestCase):
    def test_status_and_stacks_of_a_running_job(self):
        launch, w = self.start_script("--step-sleep", "0.05")
        ranks = self.wait_until_all_report(min_step=5)
        for r, info in ranks.items():
            self.assertIn(info["phase"], PHASES)
            self.assertEqual(proc_env_rank(info["pid"]), r)
        merged = self.stacks_json()
        self.assertEqual(merged["asked"], NPROC)
        self.assertEqual(merged["did_not_answer"], [])
        answered = sorted(r for g in merged["groups"] for r in g["ranks"])
        self.assertEqual(answered, list(range(NPROC)))
        for g in merged["groups"]:
            self.assertTrue(any("torch_ddp_trouble.py" in s for s in g["stack"]), g)
        text = subprocess.run([str(BIN), "stacks", "--job", self.job_id], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, env=self.env(), timeout=30)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn(f"stacks of {NPROC} rank(s)", text.stdout)
        # the job goes on
        before = min(r["step"] for r in ranks.values())
        self.assertTrue(wait_until(lambda: min((r.get("step", -1) for r in self.status_ranks().values()),
                                               default=-1) > before + 5, 20, interval=0.2))
        self.assertIsNone(launch.proc.poll())
        table = subprocess.run([str(BIN), "status", "--job", self.job_id], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, env=self.env(), timeout=10)
        self.assertNotIn("no heartbeats", table.stdout)
        os.killpg(launch.proc.pid, signal.SIGTERM)
        res, t_exit = self.finish_watched(launch, w, 30)
        self.assertIsNotNone(t_exit, res.describe())
        self.assert_no_leftovers(timeout=2.0)

    def test_dataloader_workers_stay_silent_and_user_sitecustomize_runs(self):
        site = self.tmp / "usersite"
        site.mkdir()
        (site / "sitecustomize.py").write_text(
            "import os, sys\nprint(f'user sitecustomize ran in {os.getpid()}', file=sys.stderr, flush=True)\n")
        launch, w = self.start_script("--workers", "2", "--steps", "400", "--step-sleep", "0.02",
                                      env_extra={"PYTHONPATH": str(site)})
        ranks = self.wait_until_all_report(min_step=20)
        for r, info in ranks.items():
            # the pid heartbeating as rank r is the rank's own process, not a DataLoader worker
            self.assertEqual(proc_env_rank(info["pid"]), r)
            self.assertIn(info["pid"], [p for p, _ in find_marked(self.token)])
            loader_workers = [p for p, _ in find_marked(self.token) if _ppid(p) == info["pid"]]
            self.assertGreaterEqual(len(loader_workers), 2, "the DataLoader workers are not running")
        res, t_exit = self.finish_watched(launch, w, 90)
        self.assertEqual(res.rc, 0, res.describe())
        for r in range(NPROC):
            self.assertRegex("\n".join(res.err_by_rank().get(r, [])), r"user sitecustomize ran in \d+", res.describe())
        self.assert_no_leftovers(timeout=2.0)

    def test_a_rank_slowed_in_its_data_loading_is_named_a_straggler(self):
        """Rank 2's data loading takes 0.2 s more per batch from step 5 on. The
        others wait for it inside DDP's backward, where the companion cannot tell
        the wait from the compute: every rank's step, and its busy time, look
        alike. Their time inside DDP's forward and backward tells them apart: a
        straggler warning names rank 2 (only), in phase data; nothing is stopped."""
        self.assert_rank_2_is_the_straggler("slow-data", "data", "the DataLoader workers of rank 2")

    def test_a_rank_slowed_in_its_backward_is_named_a_straggler(self):
        """Rank 2's backward computes 0.2 s more from step 5 on, as on a throttled
        device. The others wait for it at the end of DDP's backward, in the same
        phase, and their time inside forward and backward is as long as its own.
        The companion measures DDP's wait apart on one step per heartbeat: a
        straggler warning names rank 2 (only), in phase backward."""
        self.assert_rank_2_is_the_straggler("slow-backward", "backward", "rank 2's device")

    def assert_rank_2_is_the_straggler(self, trouble, phase, look_at):
        launch, w = self.start_script("--trouble", f"{trouble}@5:2", "--step-sleep", "0.01")
        hit = w.wait_for(STRAGGLER_RE, 60, "err")
        if hit is None:
            self.fail("no straggler warning" + self.finish(launch, 1).describe())
        self.assertIsNone(launch.proc.poll(), "a straggler is a warning: the job goes on")
        self.assertEqual(hit[1].group(1, 2), ("2", phase), hit[1].group(0))
        self.assertIn(f"look at: {look_at}", hit[1].string)
        # Five slow steps of about 0.2 s, each reported by a new heartbeat (0.5 s).
        trouble_line = w.first(TROUBLE_RE, "err")
        self.assertIsNotNone(trouble_line)
        self.assertLess(hit[0] - trouble_line[0], 5 * HB + SLACK_S + 2.0, hit[1].group(0))
        os.killpg(launch.proc.pid, signal.SIGTERM)
        res, t_exit = self.finish_watched(launch, w, 30)
        self.assertIsNotNone(t_exit, res.describe())
        named = [m.group(1) for m in STRAGGLER_RE.finditer(res.err)]
        self.assertEqual(named, ["2"], "named once, and no other rank")
        self.assertIsNone(w.first(re.compile(r"error: \w+ detected"), "err"), res.describe())
        self.assert_no_leftovers(timeout=2.0)

    def test_no_python_companion(self):
        probe = ("import os, sys; print('companion', os.environ.get('DDPLAUNCH_COMPANION_SOCKET'), "
                 "'_ddplaunch_companion' in sys.modules, flush=True)")
        script = self.tmp / "probe.py"
        script.write_text(probe + "\n")
        on = self.run_launcher(["--nproc-per-node=1", script], timeout=30)
        off = self.run_launcher(["--nproc-per-node=1", "--no-python-companion", script], timeout=30)
        self.assertEqual((on.rc, off.rc), (0, 0), on.describe() + off.describe())
        # Active: the rank claimed the socket (its children do not see it) and runs the companion.
        self.assertIn("companion None True", on.out)
        self.assertIn("companion None False", off.out)


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
        return int(data[data.rindex(")") + 2:].split()[1])
    except (OSError, ValueError):
        return None



class PythonPreemptionTests(PythonCompanionTestCase):
    def test_sigterm_stops_every_rank_after_the_same_step(self):
        launch = self.start([f"--nproc-per-node={NPROC}", "--heartbeat-interval=0.2", "--stop-timeout=30",
                             worker("torch_ddp_preemptible.py"), self.outdir])
        self.wait_for_files(["ready"], timeout=60)
        os.kill(launch.pid, signal.SIGTERM)
        res = self.finish(launch, timeout=60)
        self.assertEqual(res.rc, 75, res.describe())
        stopped = re.findall(r"torch_ddp_preemptible: rank (\d+) stopped after (\d+)", res.out)
        self.assertEqual(sorted(int(r) for r, _ in stopped), list(range(NPROC)), res.describe())
        steps = {int(n) for _, n in stopped}
        self.assertEqual(len(steps), 1, f"the ranks stopped after different steps: {stopped}")
        checkpoint = subprocess.run(
            [os.environ.get("PYTHON_EXEC", "/usr/bin/python3"), "-c",
             "import sys, torch; print(torch.load(sys.argv[1])['steps'])", str(self.outdir / "checkpoint.pt")],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(checkpoint.stdout.strip(), str(steps.pop()), checkpoint.stderr)
        self.assertNotIn("did not all stop", res.err, res.describe())
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
