"""The collectives a rank calls on process groups other than the default one
(dist.new_group, DeviceMesh dimensions): per group, its members, how many of
its collectives this rank entered and finished, and the one it waits in.

Every member calls a group's collectives in the same order (torch requires
it), so our own count of the calls on a group numbers them alike on every
member: the agent compares those numbers to name a member that never entered
the collective the others wait in. The default group keeps its own record
(progress.py); these calls do not change its sequence numbers.

Written by the training threads without locks (single operations under the
GIL), read by the heartbeat builder under the channel lock."""

import collections

from . import pending_work

MAX_GROUPS = 16    # the most recently used groups a heartbeat carries
# A record: [sequence in its group, op, bytes, dtype, state, t0]
SEQ, OP, BYTES, DTYPE, STATUS, T0 = range(6)


class Group(object):
    __slots__ = ("name", "ranks", "last", "open", "pending", "used")

    def __init__(self, name, ranks):
        self.name = name          # torch's name for it: the same on every member
        self.ranks = ranks        # its members' global ranks, ascending
        self.last = 0             # collectives entered on it
        self.open = []            # records of synchronous calls still inside torch
        self.pending = []         # (record, weakref to its Work) of async calls
        self.used = 0.0           # when a collective last entered it


# id(process group) -> (group, the process group): kept while torch keeps the
# group; forgotten with the default group (destroy_process_group).
GROUPS = collections.OrderedDict()
MAX_KNOWN = 256


def forget_all():
    GROUPS.clear()


def _describe(pg):
    """(name, ranks) of a process group, or None where this rank is no member."""
    import sys
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is None:
        return None
    ranks = sorted(int(r) for r in c10d.get_process_group_ranks(pg))
    if c10d.get_rank() not in ranks:
        return None
    name = None
    try:
        name = pg.group_name      # torch >= 2.1
    except Exception:
        pass
    if not name:
        names = getattr(c10d, "_pg_names", None)   # torch 1.13 to 2.0
        if names is None:
            names = getattr(getattr(c10d, "_world", None), "pg_names", {})
        name = names.get(pg)
    return (str(name) if name else ",".join(str(r) for r in ranks)), ranks


def enter(pg, op, nbytes, dtype, t0):
    """A collective on `pg` begins: its record, or None where it is not a group
    this rank belongs to (torch then returns at once without communicating)."""
    entry = GROUPS.get(id(pg))
    if entry is None or entry[1] is not pg:
        described = _describe(pg)
        if described is None:
            return None
        entry = GROUPS[id(pg)] = (Group(*described), pg)
        if len(GROUPS) > MAX_KNOWN:
            GROUPS.popitem(last=False)
    g = entry[0]
    g.last += 1
    g.used = t0
    rec = [g.last, op, nbytes, dtype, "started", t0]
    g.open.append(rec)
    return g, rec


def leave(entered, failed, work):
    """The call returned (work: its Work where async_op was set), or raised."""
    g, rec = entered
    try:
        g.open.remove(rec)
    except ValueError:
        pass
    if failed:
        rec[STATUS] = "failed"
    elif work is not None:
        pending_work.keep(g.pending, rec, work)
    else:
        rec[STATUS] = "completed"


def _oldest_unfinished(g):
    pending = pending_work.oldest_unfinished(g.pending)
    if not g.open:
        return pending
    return g.open[0] if pending is None or g.open[0][SEQ] < pending[SEQ] else pending


def heartbeat_entries(now):
    """The heartbeat's "groups": the most recently used groups, each with its
    members, what this rank entered and finished, and the collective it has
    open (the oldest), if any."""
    used = sorted((entry[0] for entry in list(GROUPS.values()) if entry[0].last), key=lambda g: g.used)
    out = []
    for g in used[-MAX_GROUPS:]:
        oldest = _oldest_unfinished(g)
        item = {"group": g.name, "ranks": g.ranks, "last_enqueued": g.last,
                "last_completed": g.last if oldest is None else oldest[SEQ] - 1}
        if oldest is not None:
            item["open"] = {"sequence": oldest[SEQ], "op": oldest[OP], "bytes": oldest[BYTES],
                            "dtype": oldest[DTYPE], "state": oldest[STATUS],
                            "age_ms": int((now - oldest[T0]) * 1000)}
        out.append(item)
    return out
