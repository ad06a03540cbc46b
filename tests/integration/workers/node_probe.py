#!/usr/bin/python3
"""Multi-node probe worker.

Usage: node_probe.py OUTDIR [MARK_DIR MARK_COUNT [TAG]]

Writes OUTDIR/rank_<RANK>.json with this worker's environment, pid and the result of
stat() on $DDPLAUNCH_AGENT_SOCKET (taken while the job runs). With MARK_DIR it then
creates MARK_DIR/<TAG>_<RANK> (TAG defaults to $TORCHELASTIC_RUN_ID) and waits until
MARK_DIR holds MARK_COUNT marks, so that workers of several jobs provably overlap in
time; it exits 3 if that does not happen within 20 s. Prints one line and exits 0."""
import json
import os
import stat
import sys
import time


def sock_facts(path):
    if not path:
        return {"path": None}
    try:
        st = os.stat(path)
    except OSError as e:
        return {"path": path, "error": str(e)}
    return {"path": path, "is_socket": stat.S_ISSOCK(st.st_mode),
            "mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid}


def write_json(path, obj):
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.rename(tmp, path)


def main():
    outdir = sys.argv[1]
    rank = os.environ.get("RANK", "none")
    info = {"env": dict(os.environ), "pid": os.getpid(),
            "socket": sock_facts(os.environ.get("DDPLAUNCH_AGENT_SOCKET"))}
    write_json(os.path.join(outdir, f"rank_{rank}.json"), info)
    if len(sys.argv) > 3:
        mark_dir, count = sys.argv[2], int(sys.argv[3])
        tag = sys.argv[4] if len(sys.argv) > 4 else os.environ.get("TORCHELASTIC_RUN_ID", "job")
        with open(os.path.join(mark_dir, f"{tag}_{rank}"), "w") as f:
            f.write(str(os.getpid()))
        deadline = time.monotonic() + 20
        while len([n for n in os.listdir(mark_dir) if not n.startswith(".")]) < count:
            if time.monotonic() > deadline:
                print(f"probe rank {rank}: only {os.listdir(mark_dir)} after 20 s", flush=True)
                sys.exit(3)
            time.sleep(0.05)
    print(f"probe rank {rank} node {os.environ.get('GROUP_RANK')} ok", flush=True)


if __name__ == "__main__":
    main()
