"""Conversion of torch's NCCL flight recorder dump, and the request for one
through torch's debug-info pipe (torch is played by the test: no GPU needed)."""

import collections
import json
import os
import pickle
import select
import threading
import unittest

from companion_harness import CompanionTestCase
from _ddplaunch_companion import nccl_flight_recorder as fr


def entry(seq, op, state, **extra):
    e = {"record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"),
         "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:" + op,
         "time_created_ns": 1700000000000000000 + seq, "input_sizes": [[1024, 4]],
         "input_dtypes": ["Float"], "output_sizes": [[1024, 4]], "output_dtypes": ["Float"],
         "state": state, "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
         "retired": state == "completed", "timeout_ms": 600000, "is_p2p": False,
         "frames": [{"name": "train_step", "filename": "/job/train.py", "line": 41},
                    {"name": "main", "filename": "/job/train.py", "line": 90}]}
    e.update(extra)
    return e


def fixture():
    """Shaped like torch's pickled dump (dicts, lists, strings, numbers only)."""
    return {
        "version": "2.4",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "pg_status": {"0": {"last_enqueued_collective": 42, "last_started_collective": 42,
                            "last_completed_collective": 41}},
        "entries": [entry(40, "all_reduce", "completed", duration_ms=1.5),
                    entry(41, "all_reduce", "completed", duration_ms=1.25),
                    entry(42, "all_reduce", "started"),
                    entry(43, "broadcast", "scheduled")],
    }


class ConversionTest(unittest.TestCase):
    def test_convert_fixture(self):
        doc = fr.convert(fr.load(pickle.dumps(fixture(), protocol=2)))
        self.assertEqual(doc["version"], "2.4")
        self.assertEqual(doc["pg_config"], fixture()["pg_config"])
        self.assertEqual(doc["summary"],
                         "last completed all_reduce #41; #42 all_reduce started, not completed")
        first = doc["entries"][0]
        self.assertEqual(first["collective_seq_id"], 40)
        self.assertEqual(first["pg_id"], 0)
        self.assertEqual(first["op"], "all_reduce")
        self.assertEqual(first["state"], "completed")
        self.assertEqual(first["input_sizes"], [[1024, 4]])
        self.assertEqual(first["input_dtypes"], ["Float"])
        self.assertEqual(first["output_sizes"], [[1024, 4]])
        self.assertEqual(first["time_created_ns"], 1700000000000000040)
        self.assertEqual(first["duration_ms"], 1.5)
        self.assertEqual(first["frames"], ["/job/train.py:41 train_step", "/job/train.py:90 main"])
        self.assertNotIn("duration_ms", doc["entries"][2])
        json.dumps(doc)   # plain JSON all through

    def test_missing_keys_tolerated(self):
        doc = fr.convert({"entries": [{"profiling_name": "nccl:broadcast"}, {}, "junk"]})
        self.assertEqual([e["op"] for e in doc["entries"]], ["broadcast", ""])
        self.assertIsNone(doc["version"])
        self.assertEqual(doc["summary"], "no collectives recorded")
        self.assertEqual(fr.convert({})["entries"], [])

    def test_all_completed_and_several_groups(self):
        dump = {"entries": [entry(5, "all_reduce", "completed"),
                            entry(2, "all_gather", "scheduled", pg_id=1)]}
        self.assertEqual(fr.summarize(fr.convert(dump)["entries"]),
                         "pg 0: last completed all_reduce #5; "
                         "pg 1: none completed; #2 all_gather scheduled, not completed")

    def test_globals_refused(self):
        with self.assertRaises(pickle.UnpicklingError):
            fr.load(pickle.dumps(collections.OrderedDict(a=1)))


class FakeTorchPipe(object):
    """Plays torch: reads its debug-info pipe and writes the dump when poked."""

    def __init__(self, pipe, dump_path, payload):
        os.mkfifo(pipe)
        # O_RDWR: a reader that never sees EOF, like torch's open pipe.
        self.fd = os.open(pipe, os.O_RDWR | os.O_NONBLOCK)
        self.dump_path, self.payload = dump_path, payload
        self.stop = threading.Event()
        self.poked = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            if select.select([self.fd], [], [], 0.1)[0] and os.read(self.fd, 128):
                self.poked += 1
                tmp = self.dump_path + ".part"
                with open(tmp, "wb") as f:
                    f.write(self.payload)
                os.replace(tmp, self.dump_path)

    def close(self):
        self.stop.set()
        self.thread.join(10)
        os.close(self.fd)


class RequestTest(CompanionTestCase):
    def fake_torch(self):
        env = {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(self.rank_dir / "nccl_trace_rank_"),
               "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(self.rank_dir / "nccl_trace_pipe_rank_"),
               "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
        torch = FakeTorchPipe(env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] + "0.pipe",
                              env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] + "0",
                              pickle.dumps(fixture(), protocol=2))
        self.addCleanup(torch.close)
        return env, torch

    def test_request_through_pipe(self):
        env, torch = self.fake_torch()
        path, summary = fr.request_and_convert(env, 0, str(self.rank_dir))
        self.assertEqual(torch.poked, 1)
        self.assertEqual(path, str(self.rank_dir / "nccl_flight_recorder.json"))
        with open(path) as f:
            self.assertEqual(json.load(f)["summary"], summary)
        self.assertIn("#42 all_reduce started", summary)

    def test_no_pipe_no_dump(self):
        env = {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(self.rank_dir / "none_"),
               "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(self.rank_dir / "none_pipe_")}
        self.assertIsNone(fr.request_and_convert(env, 0, str(self.rank_dir)))

    def test_dump_request_from_agent(self):
        env, torch = self.fake_torch()
        rank = self.start("blocked.py", env=self.rank_env(**env))
        conn, _ = self.accept_rank(rank)
        rank.wait_line(lambda l: l == "ready", 30, "ready")
        conn.send({"type": "dump_stacks"})
        conn.wait_for(lambda m: m["type"] == "stacks", 10, "stacks")
        msg = conn.wait_for(lambda m: m["type"] == "flight_recorder", 10, "flight_recorder")
        self.assertEqual(msg, {"type": "flight_recorder",
                               "path": str(self.rank_dir / "nccl_flight_recorder.json"),
                               "summary": "last completed all_reduce #41; "
                                          "#42 all_reduce started, not completed"})
        doc = json.loads((self.rank_dir / "nccl_flight_recorder.json").read_text())
        self.assertEqual(len(doc["entries"]), 4)


if __name__ == "__main__":
    unittest.main()
