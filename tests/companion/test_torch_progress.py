"""What heartbeats say about a torch program: steps, phases, and the record
of collectives (world size 1, Gloo on CPU)."""

import os
import time
import unittest

from companion_harness import CompanionTestCase, skip_without_torch


def heartbeat(m):
    return m["type"] == "heartbeat"


@skip_without_torch
class TorchProgressTest(CompanionTestCase):
    interval_ms = 50

    def test_ddp_steps_and_collectives(self):
        steps = 3
        rank = self.start("ddp_train.py", self.tmp / "init", steps)
        conn, _ = self.accept_rank(rank)
        seen_steps = []
        for step in range(1, steps + 1):
            rank.wait_line(lambda l: l == "step %d" % step, 60, "step %d" % step)
            # Idle after the step: phase "other". (Until the first optimizer step
            # the step is DDP's forward count, so a heartbeat from step 1's
            # backward also says step 1, with everything issued completed.)
            hb = conn.wait_for(lambda m: heartbeat(m) and m["step"] == step and m["phase"] == "other" and
                               m["last_completed"] == m["last_enqueued"], 30, "idle heartbeat")
            seen_steps.append(hb["step"])
            self.assertEqual(hb["last_started"], hb["last_enqueued"])
            if step == 1:
                # About one heartbeat per interval (50 ms): loose bounds for a busy machine.
                times = []
                for _ in range(6):
                    conn.wait_for(heartbeat, 10, "heartbeat")
                    times.append(time.monotonic())
                mean = (times[-1] - times[0]) / (len(times) - 1)
                self.assertGreater(mean, 0.025)
                self.assertLess(mean, 0.5)
            rank.write("\n")
        self.assertEqual(seen_steps, [1, 2, 3])

        rank.wait_line(lambda l: l == "done", 60, "done")
        hb = conn.wait_for(lambda m: heartbeat(m) and m["last_completed"] == m["last_enqueued"]
                           and any(r["op"] == "barrier" for r in m["recent"]), 30, "final heartbeat")
        self.assertRegex(hb["torch"], r"^\d+\.\d+")
        self.assertEqual(hb["step"], steps)
        self.assertGreater(hb["step_seconds"], 0)
        self.assertLessEqual(hb["busy_seconds"], hb["step_seconds"])
        recent = hb["recent"]
        seqs = [r["sequence"] for r in recent]
        self.assertEqual(seqs, sorted(set(seqs)), recent)
        self.assertEqual(seqs[-1], hb["last_enqueued"])
        self.assertTrue(all(r["state"] == "completed" for r in recent), recent)
        user = [r for r in recent if r["bytes"] == 64]
        self.assertEqual(len(user), steps, recent)
        for r in user:
            self.assertEqual((r["op"], r["dtype"]), ("all_reduce", "float32"))
        # DDP's bucket all-reduce (C++, not wrapped) fills the sequence in between.
        ddp = [r for r in recent if r["bytes"] == 0 and r["op"] == "all_reduce"]
        self.assertGreaterEqual(len(ddp), steps - 1, recent)
        self.assertEqual([(r["op"], r["bytes"], r["dtype"]) for r in recent[-2:]],
                         [("all_reduce", 16, "float64"), ("barrier", 0, "")])

        self.assertEqual(rank.finish(), 0, rank.stderr_text())
        self.assertTrue(conn.wait_for(lambda m: m.get("exiting"), 20, "exiting heartbeat"))

    def test_collective_announced_as_it_starts(self):
        # No regular heartbeat within the test: the main thread announces the
        # all_reduce in the shared file as it starts, before it can hang or die in it.
        self.interval_ms = 600000
        rank = self.start("eager.py", self.tmp / "init")
        conn, hello = self.accept_rank(rank)
        path = hello["announcements"]
        self.assertEqual(os.path.dirname(path), os.path.dirname(self.socket_path))
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        first = conn.wait_for(heartbeat, 10, "first heartbeat")   # sent as the process group appears
        self.assertEqual(first["announced"], 0)
        self.assertEqual(self.read_announcements(path), [])
        rank.wait_line(lambda l: l == "ready", 60, "ready")
        rank.write("\n")
        rank.wait_line(lambda l: l == "done", 60, "done")
        self.assertEqual(self.read_announcements(path),
                         [(1, first["last_enqueued"] + 1, "all_reduce", 40, "float32", "", True)])
        self.assertEqual(rank.finish(), 0, rank.stderr_text())
        hb = conn.wait_for(lambda m: m.get("exiting"), 20, "exiting heartbeat")
        self.assertEqual(hb["announced"], 1)
        self.assertEqual(hb["recent"][-1]["sequence"], first["last_enqueued"] + 1)
        self.assertEqual(hb["recent"][-1]["state"], "completed")
        self.assertFalse(os.path.exists(path), "a rank whose agent never mapped the file removes it")

    def test_a_heartbeat_goes_out_as_torch_save_begins(self):
        # torch.save may then hold the GIL for minutes (a big tensor to slow
        # storage): the agent must know the rank saves before it goes quiet.
        self.interval_ms = 600000
        rank = self.start("eager.py", self.tmp / "init", "save")
        conn, _ = self.accept_rank(rank)
        conn.wait_for(heartbeat, 10, "first heartbeat")   # sent as the process group appears
        rank.wait_line(lambda l: l == "ready", 60, "ready")
        rank.write("\n")
        rank.wait_line(lambda l: l == "writing", 60, "writing")
        hb = conn.wait_for(heartbeat, 10, "a heartbeat as torch.save began")
        self.assertEqual(hb["phase"], "checkpoint", hb)
        rank.write("\n")
        rank.wait_line(lambda l: l == "done", 60, "done")
        self.assertEqual(rank.finish(), 0, rank.stderr_text())

    def test_sends_and_receives_in_flight_name_their_peer(self):
        # Rank 0 waits for rank 1 in a recv, an irecv's Work and a batch's:
        # each is in the heartbeats' peer_waits until rank 1 sends.
        init = self.tmp / "init"
        rank0 = self.start("peer_waits.py", 0, init, env=self.rank_env(GLOO_SOCKET_IFNAME="lo"))
        rank1 = self.start("peer_waits.py", 1, init, env=self.rank_env(companion=False, GLOO_SOCKET_IFNAME="lo"))
        conn, _ = self.accept_rank(rank0)

        def in_flight(m):
            return [(w["op"], w["peer"], w["bytes"]) for w in m.get("peer_waits", ())]

        def waits(stage, wait, alone=True):
            rank0.wait_line(lambda l: l == stage, 60, stage)
            hb = conn.wait_for(lambda m: heartbeat(m) and wait in in_flight(m), 30, "a wait in " + stage)
            self.assertTrue(all(w["age_ms"] >= 0 for w in hb["peer_waits"]), hb)
            if alone:   # what came before has left the list
                self.assertEqual(in_flight(hb), [wait], hb)
            return hb

        # "peer_done" counts the calls completed: a change is progress.
        hb = waits("recv", ("recv", 1, 64))
        self.assertNotIn("peer_done", hb)
        rank1.write("\n")
        hb = waits("irecv", ("irecv", 1, 64))
        self.assertEqual(hb["peer_done"], 1, hb)
        rank1.write("\n")
        # The batch's isend of 16 bytes may complete before rank 1 receives it.
        hb = waits("batch", ("irecv", 1, 32), alone=False)
        self.assertTrue(set(in_flight(hb)) <= {("isend", 1, 16), ("irecv", 1, 32)}, hb)
        self.assertEqual(hb["peer_done"], 2 + (("isend", 1, 16) not in in_flight(hb)), hb)
        rank1.write("\n")
        rank0.wait_line(lambda l: l == "done", 60, "done")
        hb = conn.wait_for(lambda m: heartbeat(m) and not m.get("peer_waits"), 30, "no wait once all returned")
        self.assertEqual(hb["peer_done"], 4, hb)
        self.assertEqual(rank0.finish(), 0, rank0.stderr_text())
        self.assertEqual(rank1.finish(), 0, rank1.stderr_text())

    def test_blocked_in_collective(self):
        # Rank 0 waits in a barrier (in C++, GIL released) until rank 1 joins.
        init = self.tmp / "init"
        rank0 = self.start("stuck_collective.py", 0, init, env=self.rank_env(GLOO_SOCKET_IFNAME="lo"))
        rank1 = self.start("stuck_collective.py", 1, init,
                           env=self.rank_env(companion=False, GLOO_SOCKET_IFNAME="lo"))
        conn, hello = self.accept_rank(rank0)
        rank0.wait_line(lambda l: l == "waiting", 60, "waiting")
        # (heartbeats from the first all_reduce, waiting for rank 1 to start, may come first)
        hb = conn.wait_for(lambda m: heartbeat(m) and m["phase"] == "collective" and
                           m["recent"][-1]["op"] == "barrier", 30, "heartbeat in the barrier")
        last = hb["recent"][-1]
        self.assertEqual(last["state"], "started")
        self.assertEqual(hb["last_completed"], last["sequence"] - 1)
        # Announced, and not marked as returned while the rank waits in it.
        barrier = self.read_announcements(hello["announcements"])[-1]
        self.assertEqual((barrier[1], barrier[2], barrier[-1]), (last["sequence"], "barrier", False))
        # The record is made just before the wrapper calls torch's barrier.
        msg = conn.stacks_when(lambda main: main["frames"][-1]["file"].endswith("distributed_c10d.py"))
        main = [t for t in msg["threads"] if t["main"]][0]
        self.assertIn("barrier", [f["function"] for f in main["frames"]])
        self.assertTrue(main["frames"][-1]["file"].endswith("distributed_c10d.py"), main)
        rank1.write("\n")
        rank0.wait_line(lambda l: l == "done", 60, "done")
        hb = conn.wait_for(lambda m: heartbeat(m) and m["phase"] == "other", 30, "idle heartbeat")
        self.assertEqual(hb["recent"][-1]["state"], "completed")
        self.assertEqual(hb["last_completed"], hb["last_enqueued"], hb)
        self.assertTrue(self.read_announcements(hello["announcements"])[-1][-1], "returned: marked")
        self.assertEqual(rank0.finish(), 0, rank0.stderr_text())
        self.assertEqual(rank1.finish(), 0, rank1.stderr_text())

    def start_pair(self, name):
        """Ranks 0 (with the companion) and 1 (without) of a world of 2 running
        scripts/NAME; rank 0's connection and hello."""
        init = self.tmp / "init"
        rank0 = self.start(name, 0, init, env=self.rank_env(GLOO_SOCKET_IFNAME="lo"))
        rank1 = self.start(name, 1, init, env=self.rank_env(companion=False, GLOO_SOCKET_IFNAME="lo"))
        conn, hello = self.accept_rank(rank0)
        return rank0, rank1, conn, hello

    def ddp_step_figures(self, slow_rank):
        """Rank 0's step and busy time, in a heartbeat after step 5 of a DDP
        run where `slow_rank`'s backward computes 60 ms longer."""
        init = self.tmp / "init"
        env = self.rank_env(GLOO_SOCKET_IFNAME="lo")
        rank0 = self.start("ddp_slow_backward.py", 0, init, slow_rank, 40, env=env)
        rank1 = self.start("ddp_slow_backward.py", 1, init, slow_rank, 40,
                           env=self.rank_env(companion=False, GLOO_SOCKET_IFNAME="lo"))
        conn, _ = self.accept_rank(rank0)
        hb = conn.wait_for(lambda m: heartbeat(m) and m["step"] >= 5 and m["step_seconds"] > 0, 60,
                           "a heartbeat after step 5")
        rank0.wait_line(lambda l: l == "done", 60, "done")
        self.assertEqual(rank0.finish(), 0, rank0.stderr_text())
        self.assertEqual(rank1.finish(), 0, rank1.stderr_text())
        return hb

    def test_ddps_wait_at_the_end_of_backward_is_not_busy_time(self):
        # Rank 0 computes fast, then waits inside backward for rank 1's gradients:
        # a wait, measured apart (backward_probe.py), so not its own work.
        hb = self.ddp_step_figures(slow_rank=1)
        self.assertGreater(hb["step_seconds"], 0.055, hb)
        self.assertLess(hb["busy_seconds"], 0.5 * hb["step_seconds"], hb)
        self.assertLessEqual(hb["sync_seconds"], hb["busy_seconds"], hb)

    def test_a_rank_slow_in_backward_compute_is_busy(self):
        # ... and the slow one's backward is its own work.
        hb = self.ddp_step_figures(slow_rank=0)
        self.assertGreater(hb["busy_seconds"], 0.055, hb)
        self.assertLessEqual(hb["busy_seconds"], hb["step_seconds"], hb)

    def test_subgroup_collectives(self):
        # Calls on other groups are counted per group, apart from the default
        # group's sequence; a group this rank is no member of is not counted.
        rank0, rank1, conn, hello = self.start_pair("subgroup_collective.py")
        rank0.wait_line(lambda l: l == "waiting", 60, "waiting")
        # (not one sent earlier in the call on `solo`, or in the first on `pair`)
        hb = conn.wait_for(lambda m: heartbeat(m) and m["phase"] == "collective" and m.get("groups") and
                           m["groups"][0].get("open", {}).get("sequence") == 2,
                           30, "heartbeat in the subgroup's second all_reduce")
        self.assertEqual(len(hb["groups"]), 1, hb["groups"])
        pair = hb["groups"][0]
        self.assertEqual(pair["ranks"], [0, 1])
        self.assertTrue(pair["group"], pair)
        self.assertEqual((pair["last_enqueued"], pair["last_completed"]), (2, 1))
        self.assertEqual({k: pair["open"][k] for k in ("sequence", "op", "bytes", "dtype", "state")},
                         {"sequence": 2, "op": "all_reduce", "bytes": 12, "dtype": "float32", "state": "started"})
        self.assertGreaterEqual(pair["open"]["age_ms"], 0)
        # Its last calls: the first finished, the second open.
        self.assertEqual([(r["sequence"], r["bytes"], r["dtype"], r["state"]) for r in pair["recent"]],
                         [(1, 32, "float32", "completed"), (2, 12, "float32", "started")], pair)
        # Announced as it started, with its group: the default group's all_reduce, then
        # the pair's two (the call on a group rank 0 is no member of is not announced).
        announced = self.read_announcements(hello["announcements"])
        self.assertEqual([a[1:] for a in announced][-3:],
                         [(hb["last_enqueued"], "all_reduce", 16, "float32", "", True),
                          (1, "all_reduce", 32, "float32", pair["group"], True),
                          (2, "all_reduce", 12, "float32", pair["group"], False)], announced)
        # The default group's record holds only its own calls, all finished.
        self.assertEqual([r["bytes"] for r in hb["recent"] if r["op"] == "all_reduce"], [16], hb["recent"])
        self.assertEqual(hb["last_completed"], hb["last_enqueued"], hb)

        rank1.write("\n")
        rank0.wait_line(lambda l: l == "done", 60, "done")
        hb = conn.wait_for(lambda m: heartbeat(m) and m["phase"] == "other" and
                           m.get("groups", [{}])[0].get("last_enqueued") == 3, 30, "idle heartbeat")
        pair = hb["groups"][0]
        self.assertEqual(pair["last_completed"], 3, pair)
        self.assertNotIn("open", pair)
        self.assertEqual([(r["sequence"], r["bytes"], r["state"]) for r in pair["recent"]],
                         [(1, 32, "completed"), (2, 12, "completed"), (3, 20, "completed")], pair)
        # Marked as returned: the synchronous one once it did, never the asynchronous
        # one (its Work may still run when the call returns; the heartbeat follows it).
        self.assertEqual([(a[1], a[-1]) for a in self.read_announcements(hello["announcements"])][-2:],
                         [(2, True), (3, False)])
        self.assertEqual(rank0.finish(), 0, rank0.stderr_text())
        self.assertEqual(rank1.finish(), 0, rank1.stderr_text())

    def test_a_coalesced_block_is_one_collective(self):
        # torch 1.13 runs and counts a block's calls one by one; torch 2.1 and later
        # (imitated: "deferred") do them in one call counted once as the block ends.
        # Either way the block is one record: its first call's op and dtype, the sum
        # of its calls' bytes, and the numbers after it follow on from it.
        for mode in ((), ("deferred",)):
            with self.subTest(mode=mode):
                self.job_id = "job-%s-%d" % (self.token, len(mode))
                rank = self.start("coalesced_blocks.py", self.tmp / ("init%d" % len(mode)), *mode)
                conn, hello = self.accept_rank(rank)
                rank.wait_line(lambda l: l == "done", 60, "done")
                hb = conn.wait_for(lambda m: heartbeat(m) and m.get("groups") and
                                   m["groups"][0]["last_enqueued"] == 2, 30, "heartbeat after the calls")
                self.assertEqual([(r["sequence"], r["op"], r["bytes"], r["dtype"], r["state"]) for r in hb["recent"]],
                                 [(1, "all_reduce", 32, "float32", "completed"),
                                  (2, "all_reduce", 8, "float32", "completed"),
                                  (3, "all_reduce_coalesced", 20, "float32", "completed")], hb["recent"])
                self.assertEqual((hb["last_enqueued"], hb["last_completed"]), (3, 3), hb)
                group = hb["groups"][0]
                self.assertEqual([(r["sequence"], r["op"], r["bytes"], r["state"]) for r in group["recent"]],
                                 [(1, "all_reduce", 40, "completed"), (2, "all_reduce", 4, "completed")], group)
                self.assertEqual(group["last_completed"], 2, group)
                # Announced once each, with the sum, and marked returned (not the
                # asynchronous all_reduce_coalesced: its Future may still run then).
                self.assertEqual([a[1:] for a in self.read_announcements(hello["announcements"])],
                                 [(1, "all_reduce", 32, "float32", "", True),
                                  (2, "all_reduce", 8, "float32", "", True),
                                  (3, "all_reduce_coalesced", 20, "float32", "", False),
                                  (1, "all_reduce", 40, "float32", group["group"], True),
                                  (2, "all_reduce", 4, "float32", group["group"], True)])
                rank.write("\n")
                self.assertEqual(rank.finish(), 0, rank.stderr_text())

    def test_ddp_on_a_subgroup(self):
        # DDP's collectives on its process_group= are counted by that group's own
        # counter: open while forward or backward waits in them (the second
        # forward broadcasts the rebuilt buckets), finished once it returns.
        rank0, rank1, conn, _ = self.start_pair("ddp_subgroup.py")
        rank0.wait_line(lambda l: l == "stepped", 60, "stepped")
        hb = conn.wait_for(lambda m: heartbeat(m) and m["phase"] in ("forward", "backward") and m.get("groups") and
                           "open" in m["groups"][0], 30, "heartbeat in DDP's all-reduce on the group")
        self.assertEqual(len(hb["groups"]), 1, hb["groups"])
        group = hb["groups"][0]
        self.assertEqual(group["ranks"], [0, 1])
        waiting_in = group["open"]["sequence"]
        # DDP's set-up and step 1's all-reduce came first, on this group only
        self.assertGreaterEqual(waiting_in, 2, group)
        self.assertEqual((group["last_enqueued"], group["last_completed"]), (waiting_in, waiting_in - 1))
        self.assertEqual((group["open"]["op"], group["open"]["state"]), ("all_reduce", "started"))
        self.assertEqual(hb["last_completed"], hb["last_enqueued"], "nothing is open on the default group")

        rank1.write("\n")
        rank0.wait_line(lambda l: l == "done", 60, "done")
        hb = conn.wait_for(lambda m: heartbeat(m) and m["phase"] == "other" and m["step"] == 2, 30,
                           "idle heartbeat")
        group = hb["groups"][0]
        self.assertGreater(group["last_enqueued"], waiting_in, group)   # step 2's all-reduce came after
        self.assertEqual(group["last_completed"], group["last_enqueued"], group)
        self.assertNotIn("open", group)
        self.assertEqual(rank0.finish(), 0, rank0.stderr_text())
        self.assertEqual(rank1.finish(), 0, rank1.stderr_text())

    def test_phases(self):
        rank = self.start("phases.py", self.tmp / "init")
        conn, _ = self.accept_rank(rank)
        activity = []   # the heartbeat's count of phases gone through, in each phase
        for phase in ("data", "forward", "backward", "optimizer", "checkpoint"):
            rank.wait_line(lambda l: l == "at " + phase, 60, "at " + phase)
            hb = conn.wait_for(lambda m: heartbeat(m) and m["phase"] == phase, 30,
                               "heartbeat in phase " + phase)
            if phase in ("forward", "backward"):
                self.assertLessEqual(hb["last_completed"], hb["last_enqueued"])
            if phase == "checkpoint":
                self.assertEqual(hb["step"], 1)   # MySGD.step -> SGD.step counted once
            # Held inside the phase: the count stands still, heartbeat after heartbeat.
            later = conn.wait_for(lambda m: heartbeat(m) and m is not hb, 30, "next heartbeat in " + phase)
            self.assertEqual(later["activity"], hb["activity"], phase)
            activity.append(hb["activity"])
            rank.write("\n")
        rank.wait_line(lambda l: l == "done", 60, "done")
        hb = conn.wait_for(lambda m: heartbeat(m) and m["phase"] == "other", 30, "idle heartbeat")
        self.assertEqual(hb["step"], 1)
        activity.append(hb["activity"])
        # Each phase that returned counted: a loop of batches and forwards with no
        # step and no collective (evaluation) is seen working.
        self.assertEqual(activity, sorted(set(activity)), activity)
        self.assertEqual(rank.finish(), 0, rank.stderr_text())


if __name__ == "__main__":
    unittest.main()
