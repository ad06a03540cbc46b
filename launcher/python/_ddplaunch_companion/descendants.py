"""The rank's Python children started by multiprocessing with spawn or
forkserver (DataLoader workers with multiprocessing_context="spawn", and
with forkserver, Python 3.14's default on Linux). Such a child is a fresh
interpreter that inherits none of the companion (the bootstrap leaves
PYTHONPATH as it found it), so its stacks could not be taken on signal, and
a crash in it left no Python stack.

In the rank, multiprocessing.util.spawnv_passfds, where multiprocessing
starts both kinds of children (and the forkserver), is wrapped: the `-c`
program of a spawn or forkserver child first runs start() below, then goes
on as before. Nothing else of the command line changes, and no other program
is touched (the resource tracker, subprocess calls).

start() in the child, silent: the child never connects to the agent.
  - signal_stacks.arm(), again in each of its forked children (the
    forkserver forks the workers), so the rank takes their stacks;
  - where the rank writes its fatal stack (fatal_stack.py), the child appends
    to the same file, also after torch's worker handlers.

Threading: the wrapper runs on the thread that starts a child; start() runs
once, in the child, before its own program."""

import faulthandler
import functools
import os

from . import wrapping

MULTIPROCESSING_UTIL = "multiprocessing.util"   # where its children start, torch or not

# The -c programs of multiprocessing's spawn and forkserver children.
_STARTS = ("from multiprocessing.spawn import spawn_main", "from multiprocessing.forkserver import main")

_fatal_path = None   # the rank's fatal stack file, once the rank writes one


def set_fatal_path(path):
    global _fatal_path
    _fatal_path = path


def patch_multiprocessing(util):
    wrapping.replace(util, "spawnv_passfds", _prefixed)


def _prefixed(spawnv_passfds):
    @functools.wraps(spawnv_passfds)
    def spawn(path, args, passfds):
        return spawnv_passfds(path, with_start(args), passfds)
    return spawn


def with_start(args):
    """args with start() run first by a spawn/forkserver child's -c program;
    any other command line as it was."""
    try:
        at = list(args).index("-c") + 1
        program = args[at]
    except (ValueError, IndexError):
        return args
    if not isinstance(program, str) or not program.startswith(_STARTS):
        return args
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    first = ("try:\n"
             "    import sys\n"
             "    sys.path.insert(0, %r)\n"
             "    try:\n"
             "        import _ddplaunch_companion.descendants\n"
             "    finally:\n"
             "        del sys.path[0]\n"
             "    _ddplaunch_companion.descendants.start(%r)\n"
             "except Exception:\n"
             "    pass\n" % (package_parent, _fatal_path))
    return list(args[:at]) + [first + program] + list(args[at + 1:])


def start(fatal_path):
    """In a spawn/forkserver child, before its program (see the module's text)."""
    # Not the rank's torch hooks: a child needs only these few modules.
    from . import fatal_stack, import_watcher, signal_stacks
    signal_stacks.arm()
    os.register_at_fork(after_in_child=signal_stacks.arm)
    patches = {MULTIPROCESSING_UTIL: patch_multiprocessing}   # its own children
    if fatal_path and not faulthandler.is_enabled() and fatal_stack.enable_into(fatal_path, "a"):
        set_fatal_path(fatal_path)
        patches[fatal_stack.WORKER_SIGNAL_HANDLERS] = fatal_stack.chain_after_worker_handlers
    import_watcher.install(patches, without_torch={MULTIPROCESSING_UTIL})
