"""The flight record of torch.distributed collectives: wrappers that number
each call on the default group, note what it moved and whether it finished,
and follow the default group through init and destroy. Calls on other groups
are counted per group (subgroups.py); point-to-point calls are kept out of
the numbers (point_to_point.py); a coalesced block is one collective
(coalesced_blocks.py)."""

import functools
import sys
import threading

from . import pending_work, point_to_point, progress, subgroups, wrapping
from .progress import STATE, COLLECTIVE, SEQ, BYTES, DTYPE, STATUS, LAST, leave, perf

# torch.distributed name -> op name in the record (the deprecated aliases are
# recorded as what they do, so ranks using either spelling compare equal).
# The *_object variants are left alone: they call these, which record.
COLLECTIVES = {
    "all_reduce": "all_reduce", "broadcast": "broadcast", "reduce": "reduce",
    "all_gather": "all_gather", "all_gather_into_tensor": "all_gather_into_tensor",
    "_all_gather_base": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter_tensor",
    "_reduce_scatter_base": "reduce_scatter_tensor", "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all_single", "gather": "gather", "scatter": "scatter",
    "barrier": "barrier", "all_reduce_coalesced": "all_reduce_coalesced",
    "all_gather_coalesced": "all_gather_coalesced",
}

eager_sender = None   # set by activation: sends a heartbeat from the calling thread
checkpoint_sender = None   # set by activation: the same, waiting a little for the channel
announcer = None      # set by activation: announcements.Announcements.write
returned = None       # set with it: announcements.Announcements.returned
threads_inside = set()   # threads inside a wrapped collective: nested calls count once
open_blocks = {}        # thread id -> its open coalesced block (coalesced_blocks.Block)
_dtype_names = {}


def _dtype_name(dtype):
    """The dtype's name for records, "" where no tensor was passed."""
    name = "" if dtype is None else str(dtype).replace("torch.", "")
    _dtype_names[dtype] = name
    return name


def _collective_wrapper(op, Tensor):
    S = STATE
    W = wrapping
    get_ident = threading.get_ident
    op_bytes = op.encode("ascii")

    def make(fn):
        group_at = wrapping.arg_index(fn, "group")
        async_at = wrapping.arg_index(fn, "async_op")

        # The hot path: kept flat (few calls) since it runs on every collective.
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            tid = get_ident()
            if tid in threads_inside or (W.compiling is not None and W.compiling()):
                if open_blocks:
                    block = open_blocks.get(tid)
                    if block is not None:   # one of a coalesced block's calls: its tensors count there
                        block.note(op, args[group_at] if len(args) > group_at else kwargs.get("group"),
                                   args, kwargs)
                return fn(*args, **kwargs)
            t0 = perf()
            rec = sub = None
            pg = S.pg
            if pg is not None:
                try:
                    group = args[group_at] if len(args) > group_at else kwargs.get("group")
                    if group is None or group is pg:
                        rec = record_call(op, args, kwargs, t0, Tensor)
                    else:
                        sub = subgroups.enter(group, op, *signature(args, kwargs, Tensor), t0=t0)
                except Exception:
                    pass
            threads_inside.add(tid)
            open_collective_phase(rec)
            announced = 0
            if S.sending and announcer is not None:
                # The agent learns what we entered before we may hang or die in
                # it: a rank that aborts inside a mismatched collective is then
                # still compared with the others.
                if rec is not None:
                    announced = announcer(rec[SEQ], op_bytes, rec[BYTES], rec[DTYPE], t0)
                elif sub is not None:
                    g, r = sub
                    announced = announcer(r[subgroups.SEQ], op_bytes, r[subgroups.BYTES], r[subgroups.DTYPE], t0,
                                          g.name)
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                if rec is not None:
                    rec[STATUS] = "failed"
                if sub is not None:
                    subgroups.leave(sub, True, None)
                raise
            finally:
                threads_inside.discard(tid)
                leave(COLLECTIVE)
                S.coll_seconds += perf() - t0
                if rec is not None:
                    rec[LAST] = rec[SEQ]
            if rec is not None or sub is not None:
                # async_op=True: finished when its Work is (polled by the heartbeat)
                is_async = args[async_at] if len(args) > async_at else kwargs.get("async_op")
                work = result if is_async else None
                if announced and work is None:
                    returned(announced)
                if sub is not None:
                    subgroups.leave(sub, False, work)
                elif rec[STATUS] == "started":
                    if work is not None:
                        pending_work.keep(S.pending, rec, work)
                    else:
                        rec[STATUS] = "completed"
            return result
        return wrapper
    return make


def signature(args, kwargs, Tensor):
    """(bytes, dtype name) of the tensors passed to a collective."""
    nbytes = 0
    dtype = None
    for a in (args + tuple(kwargs.values())) if kwargs else args:
        if isinstance(a, Tensor):
            nbytes += a.numel() * a.element_size()
            if dtype is None:
                dtype = a.dtype
        elif isinstance(a, (list, tuple)):
            for x in a:
                if isinstance(x, Tensor):
                    nbytes += x.numel() * x.element_size()
                    if dtype is None:
                        dtype = x.dtype
    name = _dtype_names.get(dtype)
    return nbytes, _dtype_name(dtype) if name is None else name


def record_call(op, args, kwargs, t0, Tensor):
    """Appends the record of a call on the default group: sequence, op, bytes
    and dtype of the tensors passed, state, start time."""
    S = STATE
    nbytes, dtype = signature(args, kwargs, Tensor)
    fn = S.seq_fn
    if fn is not None:
        try:
            S.last_seq = fn() - S.base
            if S.fb_from:
                progress.close_fb_range(S)
        except Exception:
            pass
        seq = S.last_seq + 1
    else:
        seq = S.own_seq = S.own_seq + 1
    S.last_seq = seq   # what the next forward/backward starts from (the phase wrappers)
    rec = [seq, op, nbytes, dtype, "started", t0, None]
    S.records.append(rec)
    return rec


def open_collective_phase(rec):
    """Enters the COLLECTIVE phase for a call whose record on the default
    group is `rec` (None: the call is on another group)."""
    S = STATE
    if S.open_depth == 0:
        if rec is not None:
            S.open_since = rec[SEQ] - 1
        else:   # not on the default group: where DDP issued since the last read, read it now
            S.open_since = progress.current_seq() if S.fb_from else S.last_seq
        S.open_fb = False
    S.open_depth += 1
    COLLECTIVE.depth += 1
    S.stack.append(COLLECTIVE)


def _adopt_default_group(c10d, reread_base):
    try:
        pg = c10d._get_default_group() if c10d.is_initialized() else None
    except Exception:
        pg = None
    first = not progress.STATE.group_seen
    progress.set_default_group(pg, reread_base)
    if pg is None:
        subgroups.forget_all()   # destroy_process_group ended them all: let them go
    if first and progress.STATE.group_seen and eager_sender is not None:
        eager_sender()   # the rank now takes part: its first heartbeat goes out at once


def _then(after):
    """A wrapper that calls after(result) once the original returned."""
    def make(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            result = fn(*args, **kwargs)
            after(result)
            return result
        return wrapper
    return make


def _group_created(pg):
    try:
        subgroups.created(pg)
    except Exception:   # never break the user's new_group
        pass


def patch(dist):
    """Wraps the collectives of torch.distributed (and distributed_c10d)."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    torch = sys.modules.get("torch")
    if c10d is None or torch is None:
        return
    def replace_in_both(name, make):
        """The same wrapper object in c10d and in torch.distributed, where the
        latter re-exports the function."""
        public = getattr(dist, name, None)
        wrapper = wrapping.replace(c10d, name, make)
        if wrapper is not None and public is wrapper.__wrapped__:
            setattr(dist, name, wrapper)

    for name, op in sorted(COLLECTIVES.items()):
        replace_in_both(name, _collective_wrapper(op, torch.Tensor))
    point_to_point.patch(c10d, replace_in_both)
    from . import coalesced_blocks   # here: it builds on this module
    coalesced_blocks.patch(c10d, replace_in_both, torch.Tensor)
    replace_in_both("init_process_group", _then(lambda _: _adopt_default_group(c10d, True)))
    # Where a group is made: torch >= 2.1 (DeviceMesh too) goes through the second.
    for name in ("new_group", "_new_group_with_tag"):
        replace_in_both(name, _then(_group_created))
    # Every path that sets or clears the default group goes through this one.
    wrapping.replace(c10d, "_update_default_pg", _then(lambda _: _adopt_default_group(c10d, False)))
    _adopt_default_group(c10d, True)
