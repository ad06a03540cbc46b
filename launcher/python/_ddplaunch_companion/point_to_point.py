"""Point-to-point calls (send, recv, isend, irecv, batch_isend_irecv) and
monitored_barrier: no collectives, so the companion neither records nor
numbers them. But torch's counter of a group's collectives, which numbers
ours and counts DDP's, counts them on some versions: Gloo from torch 2.2 on
counts every send and receive, and monitored_barrier's own (2 x (world - 1)
on rank 0, 2 on the others); NCCL counted sends and receives before torch
2.4; torch 1.13 counts neither. Ranks make different numbers of them (a
pipeline's first stage only sends, its middle stages send and receive), so
where torch counts them the ranks' numbers would part, and every later
collective would compare as a desync or be waited in under another number.
Each wrapper here takes back what its call moved the counter: a group's
numbers stay those of its collectives on every version. While the call
runs, the group's count reads as it was before it (a heartbeat sent
meanwhile carries no number of it). batch_isend_irecv is wrapped whole as
well as the isend and irecv it makes, so that whatever it starts after they
returned (with NCCL it starts them together as it ends) is taken back too.

Threads: a call on one group from several threads at once shares one hold;
the counter is read and the base moved under a lock (a point-to-point call
is no hot path: it waits for a peer).

The same wrappers tell peer_waits.py which calls are in flight, and for
which peer, for the heartbeats."""

import functools
import threading

from . import peer_waits, progress, subgroups, wrapping

CALLS = ("irecv", "isend", "monitored_barrier", "recv", "send")   # with a group parameter


def _first_op_group(args, kwargs):
    """batch_isend_irecv(p2p_op_list): the group of its operations (torch
    requires one for all)."""
    ops = args[0] if args else kwargs.get("p2p_op_list")
    return ops[0].group


def group_argument(at):
    """(args, kwargs) -> the group passed to a function whose `group`
    parameter is at position `at` (wrapping.arg_index)."""
    def group_of(args, kwargs):
        return args[at] if len(args) > at else kwargs.get("group")
    return group_of


_lock = threading.Lock()


class Held(object):
    """Stands in for a group's counter while point-to-point calls (or a
    coalesced block: coalesced_blocks.py) run on it: reads as the counter did
    before the first of them, plus `extra` (the block's own number: 1)."""
    __slots__ = ("real", "before", "extra", "depth")

    def __init__(self, real, before, extra):
        self.real, self.before, self.extra, self.depth = real, before, extra, 0

    def __call__(self):
        return self.before + self.extra


def counted(group):
    """What numbers `group`'s collectives by torch's counter (the default
    group's state, or our Group of it: both hold seq_fn and base), or None."""
    S = progress.STATE
    if group is None or group is S.pg:
        return S if S.seq_fn is not None else None
    entry = subgroups.GROUPS.get(id(group))
    if entry is None or entry[1] is not group:
        return None
    return entry[0] if entry[0].seq_fn is not None else None


def hold(owner, extra=0):
    """Holds owner's count (a counted() result) until release(); calls made
    meanwhile share the first one's hold. Returns the Held."""
    with _lock:
        held = owner.seq_fn
        if not isinstance(held, Held):
            held = owner.seq_fn = Held(held, held(), extra)
        held.depth += 1
        return held


def release(owner, held):
    with _lock:
        held.depth -= 1
        if held.depth == 0:
            owner.seq_fn = held.real
            # What the calls moved torch's counter beyond `extra` (0 where it
            # counts no point-to-point call) leaves the group's numbers alone.
            owner.base += held.real() - held.before - held.extra


def _wrapper(group_of, follow=None):
    """group_of(args, kwargs): the group a call is on (None: the default one).
    follow(fn): what follows its calls in flight (peer_waits.Call or Batch), or None."""
    W = wrapping

    def make(fn):
        waits = None if follow is None else follow(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if W.compiling is not None and W.compiling():
                return fn(*args, **kwargs)
            try:
                owner = counted(group_of(args, kwargs))
                held = None if owner is None else hold(owner)
            except Exception:   # never break the user's call: it is then counted as torch counts it
                owner = held = None
            token = None
            if waits is not None:
                try:
                    token = waits.start(args, kwargs)
                except Exception:
                    token = None
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                if token is not None:
                    waits.failed(token)
                raise
            finally:
                if held is not None:
                    try:
                        release(owner, held)
                    except Exception:
                        pass
            if token is not None:
                try:
                    waits.returned(token, result)
                except Exception:
                    pass
            return result
        return wrapper
    return make


def patch(c10d, replace_in_both):
    """Wraps the calls of CALLS that torch.distributed has, through
    replace_in_both(name, make) (collectives.patch's)."""
    for name in CALLS:
        fn = getattr(c10d, name, None)
        if fn is not None:
            follow = None if name == "monitored_barrier" else functools.partial(peer_waits.Call, name)
            replace_in_both(name, _wrapper(group_argument(wrapping.arg_index(fn, "group")), follow))
    replace_in_both("batch_isend_irecv", _wrapper(_first_op_group, lambda fn: peer_waits.Batch()))
