"""Turns the companion on in the one process the launcher spawned as a rank:
claims the launcher's variables (so children never see them), connects to
the agent, and installs the heartbeat thread, the torch hooks, the
excepthook and the fork/exit handlers."""

import atexit
import os
import sys

from . import (announcements, collectives, descendants, error_file, fatal_stack, public_api,
               sigterm_guard, signal_stacks, torch_hooks)
from .channel import Channel
from .heartbeat import Agent
from .progress import STATE

PREFIX = "DDPLAUNCH_COMPANION_"
SIGNAL_INTENT = "DDPLAUNCH_SIGNAL_INTENT_FILE"


def _int_env(name, default):
    try:
        return int(os.environ.get(name, ""))
    except ValueError:
        return default


def activate():
    env = os.environ
    socket_path = env.get(PREFIX + "SOCKET")
    if not socket_path:
        return None
    # Claim: subprocesses and spawn/forkserver children must not find these.
    for name in [n for n in env if n.startswith(PREFIX)]:
        env.pop(name, None)
    signal_intent = env.pop(SIGNAL_INTENT, "")
    try:
        channel = Channel(socket_path)
    except OSError as err:
        sys.stderr.write("ddplaunch companion: cannot reach the agent at %s (%s); "
                         "running without progress reports\n"
                         % (socket_path, err.strerror or err))
        return None

    pid = os.getpid()
    rank = _int_env("RANK", -1)
    interval = max(10, _int_env("DDPLAUNCH_HEARTBEAT_INTERVAL_MS", 1000)) / 1000.0
    agent = Agent(channel, interval, rank, env.get("DDPLAUNCH_RANK_LOG_DIR", ""), pid)
    # Made before the hello that names it; the agent removes its name once mapped.
    agent.announcements = announcements.create(socket_path, pid)
    os.register_at_fork(after_in_child=agent.after_fork_child)
    # With --stop-timeout: a SIGTERM meant for ddplaunch (Slurm sends it to
    # every process of the step) must not end the rank before its step boundary.
    if sigterm_guard.install(signal_intent, rank):
        os.register_at_fork(after_in_child=sigterm_guard.after_fork_child)

    torch = sys.modules.get("torch")
    if torch is not None:
        STATE.torch = str(getattr(torch, "__version__", "")) or None
    STATE.sending = True
    hello = {"type": "hello", "version": 1, "job_id": env.get("DDPLAUNCH_JOB_ID", ""),
             "token": env.get("DDPLAUNCH_TOKEN", ""), "rank": rank,
             "local_rank": _int_env("LOCAL_RANK", -1),
             "generation": _int_env("DDPLAUNCH_ATTEMPT", 0), "pid": pid,
             "python": "%d.%d.%d" % sys.version_info[:3], "torch": STATE.torch,
             "announcements": agent.announcements.path if agent.announcements else ""}
    agent.send(hello)
    agent.send_heartbeat(1.0)

    collectives.eager_sender = agent.eager
    collectives.checkpoint_sender = agent.eager_waiting
    if agent.announcements is not None:
        collectives.announcer = agent.announcements.write
        collectives.returned = agent.announcements.returned
    torch_hooks.install()
    # `import ddplaunch` in the script (should_stop()), unless a module of
    # that name is imported already.
    sys.modules.setdefault("ddplaunch", public_api)
    error_file.install(pid)
    agent.fatal_stack = fatal_stack.install(agent.log_dir)
    if agent.fatal_stack is not None:   # spawn/forkserver children append to it
        descendants.set_fatal_path(agent.fatal_stack.path)
    signal_stacks.arm()   # the agent's way to our stacks when we cannot answer
    atexit.register(agent.at_exit)
    agent.start()
    return agent
