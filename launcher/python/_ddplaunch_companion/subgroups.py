"""The collectives a rank calls on process groups other than the default one
(dist.new_group, DeviceMesh dimensions): per group, its members, how many of
its collectives this rank entered and finished, the one it waits in, and
its last few calls there.

Every member calls a group's collectives in the same order (torch requires
it), so a count of the calls on a group numbers them alike on every member:
the agent compares those numbers to name a member that never entered the
collective the others wait in. A group made through new_group is numbered by
torch's own counter of it, read from its creation on, so the collectives
DDP issues in C++ on a group passed as process_group= count too: those are
open while DDP's forward or backward runs (as on the default group). A group
first met in a call is numbered by our count of the calls. The default group
keeps its own record (progress.py); these calls do not change its numbers.

Written by the training threads without locks (single operations under the
GIL), read by the heartbeat builder under the channel lock."""

import collections
import sys

from . import announcements, pending_work, progress

MAX_GROUPS = 16    # the most recently used groups a heartbeat carries
RECENT = 16        # a group's last calls a heartbeat carries: a call whose
                   # signature differs across members may still complete (Gloo
                   # all-reduces 4 bytes of int32 against 4 of float32), and the
                   # agent compares these to name it
# A record: [sequence in its group, op, bytes, dtype, state, t0]
SEQ, OP, BYTES, DTYPE, STATUS, T0 = range(6)


class Group(object):
    __slots__ = ("name", "ranks", "last", "open", "recent", "pending", "failed", "used", "seq_fn", "base",
                 "ddp_since", "ddp_seen")

    def __init__(self, name, ranks):
        self.name = name          # torch's name for it: the same on every member
        self.ranks = ranks        # its members' global ranks, ascending
        self.last = 0             # collectives entered on it
        self.open = []            # records of synchronous calls still inside torch
        self.recent = collections.deque(maxlen=RECENT)   # records of its last calls, oldest first
        self.pending = []         # (record, weakref to its Work) of async calls
        self.failed = None        # the record of the last call, where it raised
        self.used = 0.0           # when a collective last entered it
        self.seq_fn = None        # torch's counter of its collectives, where read from its creation
        self.base = 0             # that counter right after creation
        self.ddp_since = None     # where DDP issues on it: the count when forward/backward began
        self.ddp_seen = None      # (sequence, when a heartbeat first saw DDP's collective open)

    def count(self):
        """Collectives issued on it so far: torch's counter, else our count."""
        fn = self.seq_fn
        if fn is not None:
            try:
                self.last = max(self.last, fn() - self.base)
            except Exception:
                pass
        return self.last


# id(process group) -> (group, the process group): kept while torch keeps the
# group; forgotten with the default group (destroy_process_group).
GROUPS = collections.OrderedDict()
MAX_KNOWN = 256


def forget_all():
    GROUPS.clear()
    del progress.STATE.ddp_groups[:]


def _describe(pg):
    """(name, ranks) of a process group, or None where this rank is no member."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is None:
        return None
    try:
        ranks = sorted(int(r) for r in c10d.get_process_group_ranks(pg))
    except Exception:   # GroupMember.NON_GROUP_MEMBER, or a group torch forgot
        return None
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
    # As the collective announcements carry it: cut alike in both.
    return (str(name) if name else ",".join(str(r) for r in ranks))[:announcements.GROUP_BYTES], ranks


def _group(pg):
    """Our Group of `pg`, made on first sight; None where this rank is no member."""
    entry = GROUPS.get(id(pg))
    if entry is None or entry[1] is not pg:
        described = _describe(pg)
        if described is None:
            return None
        entry = GROUPS[id(pg)] = (Group(*described), pg)
        if len(GROUPS) > MAX_KNOWN:
            GROUPS.popitem(last=False)
    return entry[0]


def created(pg):
    """new_group returned `pg`: number its collectives by torch's counter,
    which every member has just set alike (so it agrees across members)."""
    if pg is None or pg is progress.STATE.pg:
        return
    g = _group(pg)
    fn = getattr(pg, "_get_sequence_number_for_group", None)
    if g is None or fn is None or g.seq_fn is not None or g.last:
        return
    try:
        g.base = int(fn())
    except Exception:
        return
    g.seq_fn = fn


def used_by_ddp(pg):
    """A DistributedDataParallel module was made on `pg`: its forward and
    backward issue collectives on it (in C++, unseen by the wrappers)."""
    if pg is None or pg is progress.STATE.pg:
        return
    g = _group(pg)
    if g is not None and g.seq_fn is not None and g not in progress.STATE.ddp_groups:
        progress.STATE.ddp_groups.append(g)


def ddp_phase_opened():
    """The outermost forward/backward began (the phase wrappers call this only
    while some DDP module runs on a group of ours)."""
    now = progress.perf()
    for g in progress.STATE.ddp_groups:
        g.ddp_since = g.count()
        g.used = now


def ddp_phase_closed():
    """... and returned: what DDP issued in there has finished (its backward
    waits for its buckets' all-reduces)."""
    for g in progress.STATE.ddp_groups:
        g.ddp_since = None


def enter(pg, op, nbytes, dtype, t0):
    """A collective on `pg` begins: its record, or None where it is not a group
    this rank belongs to (torch then returns at once without communicating)."""
    g = _group(pg)
    if g is None:
        return None
    g.last = g.count() + 1
    g.used = t0
    g.failed = None
    rec = [g.last, op, nbytes, dtype, "started", t0]
    g.open.append(rec)
    g.recent.append(rec)
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
        g.failed = rec
    elif work is not None:
        pending_work.keep(g.pending, rec, work)
    else:
        rec[STATUS] = "completed"


def _entry(rec, now):
    return {"sequence": rec[SEQ], "op": rec[OP], "bytes": rec[BYTES], "dtype": rec[DTYPE],
            "state": rec[STATUS], "age_ms": int((now - rec[T0]) * 1000)}


def _oldest_unfinished(g):
    pending = pending_work.oldest_unfinished(g.pending)
    if not g.open:
        return pending
    return g.open[0] if pending is None or g.open[0][SEQ] < pending[SEQ] else pending


def _ddp_open(g, count, now):
    """The record of the oldest collective DDP has open on `g`, or None."""
    since = g.ddp_since
    if since is None or count <= since:
        g.ddp_seen = None
        return None
    if g.ddp_seen is None or g.ddp_seen[0] != since + 1:
        g.ddp_seen = (since + 1, now)
    # What DDP issues there is its gradient all-reduces (and, in forward, its
    # buffers' broadcast): named as on the default group.
    return [since + 1, "all_reduce", 0, "", "started", g.ddp_seen[1]]


def heartbeat_entries(now):
    """The heartbeat's "groups": the most recently used groups, each with its
    members, what this rank entered and finished, the collective it has
    open (the oldest), else the last one where it failed, if any, and its
    last calls there (wrapped ones: not DDP's)."""
    used = sorted((entry[0] for entry in list(GROUPS.values()) if entry[0].used), key=lambda g: g.used)
    out = []
    for g in used[-MAX_GROUPS:]:
        count = g.count()
        oldest = _oldest_unfinished(g)
        ddp = _ddp_open(g, count, now)
        if ddp is not None and (oldest is None or ddp[SEQ] < oldest[SEQ]):
            oldest = ddp
        item = {"group": g.name, "ranks": g.ranks, "last_enqueued": count,
                "last_completed": count if oldest is None else oldest[SEQ] - 1}
        if oldest is None:
            # None open: the one that raised, if the last call did (a rank whose
            # collective failed on a mismatch is still compared with the others).
            oldest = g.failed
        if oldest is not None:
            item["open"] = _entry(oldest, now)
        item["recent"] = [_entry(r, now) for r in list(g.recent)]
        out.append(item)
    return out
