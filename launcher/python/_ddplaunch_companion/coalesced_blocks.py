"""Coalesced blocks: `with torch.distributed._coalescing_manager(group, ...)`,
which Megatron's and DeepSpeed's bucketed gradient reductions use, makes one
collective of the calls inside, and torch counts it in its own way: torch
1.13 runs and counts each call as it is made; from 2.1 on, all_reduce,
all_gather_into_tensor and reduce_scatter_tensor inside are only noted, and
one coalesced call, counted once, does them all as the block ends. Recorded
call by call under torch's counter, a block's calls would all get one number
on the newer versions (a false desync wherever their sizes differ), and
numbers apart on the older.

So a block is one collective in the companion's numbers, on every version.
Its one record opens as the block is entered (the COLLECTIVE phase with it:
on the older versions the calls wait as they are made) and closes as the
block ends (where the newer versions wait). The group's count reads as that
record's number throughout, and whatever torch's counter moved in the block
beyond one is taken back as it ends (point_to_point.hold, with one extra).
The record's op and dtype are those of the first call inside, its bytes the
sum of them all. The sum is set as the block ends, before torch issues what
it noted, so no rank shows the agent a partial one; the announcement goes
out then too.

Left alone: a block that batch_isend_irecv opens (point_to_point.py holds
the count there already), and calls inside a block on another group. Another
thread's collectives on the block's group while it is open would be taken
back with it (DDP's bucket all-reduces run on the training thread on the
CPU, but on autograd's threads with CUDA: a block opened inside a backward
hook while DDP runs on the same group is not told apart).

Threads: a block is entered and left on one thread; its Block is found by
that thread's id (collectives.open_blocks), as the wrapped calls inside note
their tensors in it."""

import functools
import threading

from . import collectives, pending_work, point_to_point, subgroups, wrapping
from .progress import STATE, COLLECTIVE, SEQ, OP, BYTES, DTYPE, STATUS, LAST, leave, perf

PLACEHOLDER_OP = "unknown"   # what the record says until the first call inside (the agent compares no "unknown")


class Block(object):
    """One open coalesced block on one thread."""
    __slots__ = ("group", "rec", "sub", "owner", "held", "t0", "nbytes", "tensor", "announced")

    def __init__(self, group, rec, sub, owner, held, t0, tensor):
        self.group = group        # the process group it coalesces on
        self.rec = rec            # its record on the default group (progress.py's layout), or None
        self.sub = sub            # else (Group, record) on another group (subgroups.py)
        self.owner, self.held = owner, held   # the held count, where torch's counter numbers the group
        self.t0 = t0
        self.nbytes = 0
        self.tensor = tensor      # torch.Tensor
        self.announced = 0

    def record(self):
        return self.rec if self.rec is not None else self.sub[1]

    def note(self, op, group, args, kwargs):
        """A wrapped collective `op` called inside the block, on `group`."""
        if (STATE.pg if group is None else group) is not self.group:
            return
        nbytes, dtype = collectives.signature(args, kwargs, self.tensor)
        self.nbytes += nbytes
        r = self.record()
        if r[OP] == PLACEHOLDER_OP:
            r[OP], r[DTYPE] = op, dtype


def _begin(group, tensor):
    """The block is entered: its Block, or None where it is left alone."""
    S = STATE
    W = wrapping
    tid = threading.get_ident()
    pg = S.pg
    if pg is None or tid in collectives.threads_inside or (W.compiling is not None and W.compiling()):
        return None
    owner = point_to_point.counted(group)
    if owner is not None and isinstance(owner.seq_fn, point_to_point.Held):
        return None   # batch_isend_irecv's own block
    t0 = perf()
    rec = sub = None
    if group is None or group is pg:
        group = pg
        rec = collectives.record_call(PLACEHOLDER_OP, (), None, t0, tensor)
    else:
        sub = subgroups.enter(group, PLACEHOLDER_OP, 0, "", t0)
        if sub is None:   # not a member: torch does nothing here
            return None
    # Held after the record is made: the record's number is the counter's next.
    try:
        held = None if owner is None else point_to_point.hold(owner, 1)
    except Exception:   # torch's counter could not be read: the block is then counted as torch counts it
        if rec is not None:
            rec[LAST], rec[STATUS] = rec[SEQ], "completed"
        else:
            subgroups.leave(sub, False, None)
        return None
    collectives.open_collective_phase(rec)
    block = Block(group, rec, sub, owner, held, t0, tensor)
    collectives.threads_inside.add(tid)
    collectives.open_blocks[tid] = block
    return block


def _issuing(block):
    """The block ends: what torch noted is about to be issued."""
    r = block.record()
    r[BYTES] = block.nbytes
    if r[OP] == PLACEHOLDER_OP:
        r[OP] = "coalesced"   # none of the wrapped collectives was called in it
    announce = collectives.announcer
    if STATE.sending and announce is not None:
        group_name = "" if block.rec is not None else block.sub[0].name
        block.announced = announce(r[SEQ], r[OP].encode("ascii"), r[BYTES], r[DTYPE], block.t0, group_name)


def _end(block, failed, work):
    """The block ended (failed: it raised; work: its Work where async)."""
    tid = threading.get_ident()
    collectives.open_blocks.pop(tid, None)
    collectives.threads_inside.discard(tid)
    if block.held is not None:
        try:
            point_to_point.release(block.owner, block.held)
        except Exception:
            pass
    leave(COLLECTIVE)
    STATE.coll_seconds += perf() - block.t0
    rec = block.rec
    if rec is not None:
        rec[LAST] = rec[SEQ]
        if failed:
            rec[STATUS] = "failed"
        elif work is not None:
            pending_work.keep(STATE.pending, rec, work)
        else:
            rec[STATUS] = "completed"
    else:
        subgroups.leave(block.sub, failed, work)
    if block.announced and work is None and not failed and collectives.returned is not None:
        collectives.returned(block.announced)


class _Coalesced(object):
    """What the wrapped _coalescing_manager returns: torch's context manager,
    with the block's record around it."""

    def __init__(self, inner, group, tensor):
        self.inner, self.group, self.tensor = inner, group, tensor
        self.block = self.value = None

    def __enter__(self):
        try:
            self.block = _begin(self.group, self.tensor)
        except Exception:   # never break the user's block: it is then counted as torch counts it
            self.block = None
        try:
            self.value = self.inner.__enter__()
        except BaseException:
            if self.block is not None:
                _end(self.block, True, None)
            raise
        return self.value

    def __exit__(self, exc_type, exc, tb):
        block = self.block
        if block is None:
            return self.inner.__exit__(exc_type, exc, tb)
        try:
            _issuing(block)
        except Exception:
            pass
        try:
            suppressed = self.inner.__exit__(exc_type, exc, tb)
        except BaseException:
            _end(block, True, None)
            raise
        # async_ops=True (torch >= 2.1): the block's Work is the manager's last.
        works = getattr(self.value, "works", None)
        _end(block, exc_type is not None and not suppressed, works[-1] if works else None)
        return suppressed


def patch(c10d, replace_in_both, tensor):
    """Wraps c10d._coalescing_manager (and torch.distributed's, where it
    re-exports it), through collectives.patch's replace_in_both."""
    fn = getattr(c10d, "_coalescing_manager", None)
    if fn is None:
        return
    group_of = point_to_point.group_argument(wrapping.arg_index(fn, "group"))

    def make(original):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            return _Coalesced(original(*args, **kwargs), group_of(args, kwargs), tensor)
        return wrapper
    replace_in_both("_coalescing_manager", make)
