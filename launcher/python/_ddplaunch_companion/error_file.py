"""The torchelastic error file for an uncaught exception of the rank process
(a script using torchelastic's @record writes its own first: we leave it)."""

import json
import os
import sys
import time
import traceback


def install(claimed_pid):
    previous = sys.excepthook

    def excepthook(etype, value, tb):
        if os.getpid() == claimed_pid:   # a forked child reports nothing
            try:
                write(os.environ.get("TORCHELASTIC_ERROR_FILE"), etype, value, tb)
            except Exception:
                pass
        previous(etype, value, tb)

    sys.excepthook = excepthook


def write(path, etype, value, tb):
    if not path or os.path.exists(path):
        return False
    data = {"message": {
        "message": "%s: %s" % (etype.__name__, value),
        "extraInfo": {
            "py_callstack": "".join(traceback.format_exception(etype, value, tb)),
            "timestamp": str(int(time.time())),
        },
    }}
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    try:
        with open(path, "x", encoding="utf-8") as f:   # never over a file someone wrote
            json.dump(data, f)
    except FileExistsError:
        return False
    return True
