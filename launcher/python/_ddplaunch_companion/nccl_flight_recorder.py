"""torch's NCCL flight recorder (torch >= 2.x): asks torch for a dump through
its debug-info pipe and converts the dump (a pickled dict of builtins) into
nccl_flight_recorder.json in the rank's log folder, with a one-line summary."""

import io
import json
import os
import pickle
import stat
import time

OUT_NAME = "nccl_flight_recorder.json"
FRAMES_KEPT = 8


class _BuiltinsOnly(pickle.Unpickler):
    """The dump holds only dicts, lists, strings and numbers: any global is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError("flight recorder dump refers to %s.%s" % (module, name))


def load(data):
    return _BuiltinsOnly(io.BytesIO(data)).load()


def _plain(value):
    """JSON-safe copy (tuples to lists, bytes to text, odd keys to strings)."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _frame(f):
    if isinstance(f, dict):
        return "%s:%s %s" % (f.get("filename", "?"), f.get("line", "?"), f.get("name", "?"))
    return str(f)


def _entry(e):
    name = str(e.get("profiling_name") or "")
    out = {
        "record_id": e.get("record_id"),
        "collective_seq_id": e.get("collective_seq_id", e.get("seq_id")),
        "pg_id": e.get("pg_id"),
        "op": name[len("nccl:"):] if name.startswith("nccl:") else name,
        "state": e.get("state"),
        "input_sizes": _plain(e.get("input_sizes")),
        "input_dtypes": _plain(e.get("input_dtypes")),
        "output_sizes": _plain(e.get("output_sizes")),
        "output_dtypes": _plain(e.get("output_dtypes")),
        "time_created_ns": e.get("time_created_ns"),
        "frames": [_frame(f) for f in (e.get("frames") or [])[:FRAMES_KEPT]],
    }
    for key in ("duration_ms", "p2p_seq_id", "is_p2p", "timeout_ms"):
        if e.get(key) is not None:
            out[key] = _plain(e[key])
    return out


def summarize(entries):
    """e.g. "last completed all_reduce #41; #42 all_reduce started, not completed"."""
    by_pg = {}
    for e in entries:
        if e.get("is_p2p") or not isinstance(e.get("collective_seq_id"), int):
            continue
        by_pg.setdefault(e.get("pg_id"), []).append(e)
    if not by_pg:
        return "no collectives recorded"
    parts = []
    for pg in sorted(by_pg, key=str):
        es = sorted(by_pg[pg], key=lambda e: e["collective_seq_id"])
        done = [e for e in es if e.get("state") == "completed"]
        text = ("last completed %s #%d" % (done[-1]["op"], done[-1]["collective_seq_id"])
                if done else "none completed")
        after = done[-1]["collective_seq_id"] if done else -1
        open_ = [e for e in es if e.get("state") != "completed" and e["collective_seq_id"] > after]
        if open_:
            text += "; #%d %s %s, not completed" % (
                open_[0]["collective_seq_id"], open_[0]["op"], open_[0].get("state") or "?")
        parts.append(text if len(by_pg) == 1 else "pg %s: %s" % (pg, text))
    return "; ".join(parts)


def convert(dump):
    """torch's dump (a dict) -> our JSON document (a dict). Tolerates missing keys."""
    if not isinstance(dump, dict):
        raise ValueError("flight recorder dump is not a dict")
    entries = [_entry(e) for e in (dump.get("entries") or []) if isinstance(e, dict)]
    doc = {"version": _plain(dump.get("version")), "entries": entries,
           "pg_config": _plain(dump.get("pg_config"))}
    if "pg_status" in dump:
        doc["pg_status"] = _plain(dump["pg_status"])
    doc["summary"] = summarize(entries)
    return doc


def write(doc, log_dir):
    path = os.path.join(log_dir, OUT_NAME)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)
    return path


def _signature(path):
    try:
        st = os.stat(path)
        return (st.st_mtime_ns, st.st_size)
    except OSError:
        return None


def _poke(pipe):
    """One byte into torch's pipe, never blocking; False when nobody listens."""
    try:
        if not stat.S_ISFIFO(os.stat(pipe).st_mode):
            return False
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)   # ENXIO: no reader
    except OSError:
        return False
    try:
        os.write(fd, b"1")
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def request_and_convert(environ, rank, log_dir, timeout=5.0):
    """Asks torch for a dump (when its pipe exists), waits at most `timeout` s
    for it (torch looks at its pipe about once a second, then writes the whole
    trace), converts it; with no pipe, converts a dump torch already wrote
    (e.g. on a timeout). Returns (path, summary) or None."""
    stem = environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    if not stem or not log_dir:
        return None
    dump_path = stem + str(rank)
    before = _signature(dump_path)
    pipe_stem = environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    asked = bool(pipe_stem) and _poke(pipe_stem + str(rank) + ".pipe")
    if not asked and before is None:
        return None
    deadline = time.monotonic() + (timeout if asked else 0)
    while True:
        sig = _signature(dump_path)
        if sig is not None and (sig != before or not asked):
            try:
                with open(dump_path, "rb") as f:
                    doc = convert(load(f.read()))
                os.makedirs(log_dir, exist_ok=True)
                return write(doc, log_dir), doc["summary"]
            except Exception:
                pass   # still being written: look again
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)
