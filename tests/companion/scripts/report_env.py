"""Prints what the program sees of its start-up (sys.path, PYTHONPATH, the
companion's variables, which sitecustomize ran), then waits for stdin to close."""
import json
import os
import sys

site = sys.modules.get("sitecustomize")
print("info:" + json.dumps({
    "sys_path": sys.path,
    "pythonpath": os.environ.get("PYTHONPATH"),
    "companion_env": sorted(k for k in os.environ if k.startswith("DDPLAUNCH_COMPANION_")),
    "sitecustomize": getattr(site, "__file__", None),
    "pid": os.getpid(),
}), flush=True)
sys.stdin.read()
print("bye", flush=True)
