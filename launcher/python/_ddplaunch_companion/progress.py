"""What a heartbeat says: the step counter, the phase stack, the record of
recent torch.distributed collectives on the default group (and, from
subgroups.py, the other groups' counts), and the heartbeat message built
from them. The torch wrappers write this state from the
training threads without locks (single list/deque operations are atomic
under the GIL); the heartbeat builder reads it under the channel lock."""

import collections
import time

from . import peer_waits, pending_work, subgroups

RECENT = 16            # entries a heartbeat carries
perf = time.perf_counter

# A collective record is a small list (its state changes after the call):
SEQ, OP, BYTES, DTYPE, STATUS, T0, LAST = range(7)   # LAST: last sequence it consumed


class Phase(object):
    __slots__ = ("name", "opens", "depth")

    def __init__(self, name, opens):
        self.name = name
        self.opens = opens   # collectives issued inside stay open until it returns
        self.depth = 0


DATA = Phase("data", False)
FORWARD = Phase("forward", True)
BACKWARD = Phase("backward", True)
OPTIMIZER = Phase("optimizer", False)
COLLECTIVE = Phase("collective", True)
CHECKPOINT = Phase("checkpoint", False)


class State(object):
    __slots__ = ("sending", "stack", "open_depth", "open_since", "open_fb", "fb_ranges",
                 "fb_from", "records", "pending", "seen", "pg", "seq_fn", "base", "own_seq", "last_seq",
                 "steps", "opt_id", "fwd_count", "t_step", "step_seconds", "busy_seconds",
                 "coll_seconds", "coll_at_step", "fb_t0", "fb_coll0", "fb_seconds", "fb_at_step",
                 "sync_seconds", "probe_wanted", "probe_step", "probing", "compute_done_at", "torch",
                 "group_seen", "ddp_groups", "activity")

    def __init__(self):
        self.sending = False          # this is the claimed, connected rank process
        # Heartbeats start once the default process group exists: before it
        # (imports, data preparation) the rank takes part in no collective,
        # and `import torch` may hold the GIL for seconds, which would read
        # as a silent rank.
        self.group_seen = False
        self.stack = []               # active phases, innermost last (one per process)
        self.open_depth = 0           # nesting of forward/backward/collective
        self.open_since = 0           # sequence when the outermost of them began
        self.open_fb = False          # ... and that outermost one is forward/backward
        self.fb_ranges = collections.deque(maxlen=RECENT)  # (first, last) seqs issued inside forward/backward
        self.fb_from = 0              # first seq of a range whose end the next counter read closes
        self.records = collections.deque(maxlen=RECENT)    # wrapped calls on the default group
        self.pending = []             # (record, weakref to its Work) of async calls
        self.seen = {}                # sequence -> when a heartbeat first saw an unrecorded one
        self.pg = None                # the default process group, while it exists
        self.seq_fn = None            # its _get_sequence_number_for_group, where it has one
        self.base = 0                 # that number right after init
        self.own_seq = 0              # otherwise: our count of recorded collectives
        self.last_seq = 0
        self.steps = 0
        self.opt_id = None            # id() of the first optimizer that stepped
        self.fwd_count = 0
        self.t_step = None
        self.step_seconds = 0.0
        self.busy_seconds = 0.0
        self.coll_seconds = 0.0       # total time inside wrapped collectives and measured DDP waits
        self.coll_at_step = 0.0
        # DDP's own waits for the other ranks (its bucket all-reduces, in C++)
        # happen inside forward/backward, mixed with their compute: time there
        # (less wrapped collectives in it) is reported apart, as sync_seconds,
        # and the agent's straggler rule takes the least of it across ranks as
        # the compute (launcher/src/health/trouble_warnings.h).
        self.fb_t0 = 0.0              # when the outermost forward/backward began
        self.fb_coll0 = 0.0           # ... and coll_seconds then
        self.fb_seconds = 0.0         # total time inside them, less wrapped collectives
        self.fb_at_step = 0.0
        self.sync_seconds = 0.0       # the last step's share of fb_seconds (with DDP: 0 without)
        # On the CPU, backward_probe.py measures DDP's wait at the end of
        # backward apart, on one whole step per heartbeat: the figures above
        # are then that step's, and its backward is left out of fb_seconds.
        self.probe_wanted = False     # a heartbeat went out: measure the next step
        self.probe_step = False       # this step is measured (from its start)
        self.probing = False          # some backward was measured: report measured steps only
        self.compute_done_at = 0.0    # when the measured backward's compute ended, until it returns
        self.torch = None             # torch.__version__ once torch is imported
        self.ddp_groups = []          # subgroups.Group of each non-default group a DDP module runs on
        # Phases that returned so far (data batches, forwards, backwards, steps,
        # saves, collectives): while it changes the rank works, even in a long
        # evaluation loop with no step and no collective.
        self.activity = 0


STATE = State()


def current_seq():
    S = STATE
    fn = S.seq_fn
    if fn is not None:
        try:
            S.last_seq = fn() - S.base
        except Exception:
            return S.last_seq
        if S.fb_from:
            close_fb_range(S)
        return S.last_seq
    return S.own_seq


def close_fb_range(S):
    """Forward/backward returned since the counter was last read: what was
    issued from fb_from up to the count just read (S.last_seq) was DDP's."""
    first, S.fb_from = S.fb_from, 0
    if 0 < first <= S.last_seq:
        S.fb_ranges.append((first, S.last_seq))


def set_default_group(pg, reread_base):
    """The default process group changed (init, destroy) or init returned."""
    S = STATE
    if pg is None:
        if S.pg is not None:
            # Keep the numbers where they were; drop our reference so the group can go.
            S.own_seq = current_seq()
            S.pg = S.seq_fn = None
        return
    S.group_seen = True
    if pg is S.pg and not reread_base:
        return
    fn = getattr(pg, "_get_sequence_number_for_group", None)
    base = 0
    if fn is not None:
        try:
            base = int(fn())
        except Exception:
            fn = None
    if pg is not S.pg or base != S.base:
        S.records.clear()
        del S.pending[:]
        S.fb_ranges.clear()
        S.fb_from = 0
        S.seen.clear()
        S.own_seq = S.last_seq = 0
    S.pg, S.seq_fn, S.base = pg, fn, base


def leave(phase):
    """Closes `phase` (opened by the wrapper that inlines the opening)."""
    S = STATE
    stack = S.stack
    if stack and stack[-1] is phase:
        stack.pop()
    else:  # another thread's phase ended out of order: drop our innermost entry
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is phase:
                del stack[i]
                break
    phase.depth -= 1
    S.activity += 1
    if phase.opens:
        if S.open_depth > 1:
            S.open_depth -= 1
            return
        if S.open_fb:
            if S.compute_done_at:
                # A measured backward: what came after its compute was DDP's
                # wait for the other ranks (backward_probe.py).
                S.coll_seconds += perf() - S.compute_done_at
                S.compute_done_at = 0.0
            else:
                S.fb_seconds += perf() - S.fb_t0 - (S.coll_seconds - S.fb_coll0)
            if not S.fb_from:
                # What DDP issued in there ends where the counter is next read
                # (a recorded collective or a heartbeat): no call into torch here.
                S.fb_from = S.open_since + 1
            if S.ddp_groups:
                subgroups.ddp_phase_closed()
        S.open_depth = 0


# Called by the wrappers with the arguments of the call that just returned.

def optimizer_stepped(args):
    """optimizer.step(...) returned: the first optimizer that stepped counts
    the steps (and times them)."""
    S = STATE
    if S.opt_id != id(args[0]):
        if S.opt_id is not None:
            return
        S.opt_id = id(args[0])
        S.t_step = None   # step times count from the optimizer's first step on
    S.steps += 1
    _step_done(S, perf())


def forward_done(args):
    """DDP's forward returned: a step where no optimizer steps."""
    S = STATE
    S.fwd_count += 1
    if S.opt_id is None:
        _step_done(S, perf())


def _step_done(S, now):
    if S.t_step is not None and (S.probe_step or not S.probing):
        dt = now - S.t_step
        S.step_seconds = dt
        S.busy_seconds = max(0.0, dt - (S.coll_seconds - S.coll_at_step))
        # Only DDP synchronises in there (forward counts only DDP's: fwd_count).
        S.sync_seconds = min(S.busy_seconds, S.fb_seconds - S.fb_at_step) if S.fwd_count else 0.0
    S.t_step = now
    S.coll_at_step = S.coll_seconds
    S.fb_at_step = S.fb_seconds
    S.probe_step, S.probe_wanted = S.probe_wanted, False


def steps_done():
    """Completed steps: optimizer steps of the first optimizer that stepped,
    else DDP forwards."""
    S = STATE
    return S.steps if S.opt_id is not None else S.fwd_count


def build_heartbeat(exiting=False):
    """The heartbeat message (caller holds the channel lock)."""
    S = STATE
    now = perf()
    S.probe_wanted = True   # the next step's figures are for the next heartbeat (backward_probe.py)
    # Read the group's counter before the records: a wrapped call appends its
    # record before it issues, so every recorded sequence <= cur is in `recs`.
    cur = current_seq()
    recs = list(S.records)
    oldest = pending_work.oldest_unfinished(S.pending)
    oldest_open = None if oldest is None else oldest[SEQ]
    top = cur
    covered = set()
    for r in recs:
        last = r[LAST]
        if last is None:  # a synchronous call in flight owns what was issued since
            last = max(cur, r[SEQ])
        covered.update(range(r[SEQ], last + 1))
        top = max(top, last)
    completed = cur
    if S.open_depth > 0:
        completed = min(completed, S.open_since)
    if oldest_open is not None:
        completed = min(completed, oldest_open - 1)
    completed = max(completed, 0)

    ranges = list(S.fb_ranges)   # a copy: the training thread appends meanwhile
    entries = [(r[SEQ], r[OP], r[BYTES], r[DTYPE], r[STATUS], r[T0]) for r in recs]
    # Sequences nobody recorded: DDP's own bucket all-reduces (C++), or calls we
    # do not wrap. Inside forward/backward they are DDP's all-reduces.
    for k in range(max(1, top - RECENT + 1), cur + 1):
        if k in covered:
            continue
        t0 = S.seen.setdefault(k, now)
        in_fb = (S.open_depth > 0 and S.open_fb and k > S.open_since) or \
            any(a <= k <= b for a, b in ranges)
        entries.append((k, "all_reduce" if in_fb else "unknown", 0, "",
                        "completed" if k <= completed else "started", t0))
    for k in [k for k in S.seen if k <= top - 2 * RECENT]:
        del S.seen[k]
    entries.sort(key=lambda e: e[0])
    recent = [{"sequence": e[0], "op": e[1], "bytes": e[2], "dtype": e[3], "state": e[4],
               "age_ms": int((now - e[5]) * 1000)} for e in entries[-RECENT:]]

    step = steps_done() if (S.opt_id is not None or S.fwd_count) else -1
    try:
        phase = S.stack[-1].name
    except IndexError:
        phase = "other"
    msg = {"type": "heartbeat", "step": step, "phase": phase,
           "step_seconds": S.step_seconds, "busy_seconds": S.busy_seconds, "sync_seconds": S.sync_seconds,
           "last_enqueued": top, "last_started": top, "last_completed": completed,
           "recent": recent, "exiting": bool(exiting), "torch": S.torch, "activity": S.activity}
    try:
        groups = subgroups.heartbeat_entries(now)
    except Exception:   # the groups are extra: never cost the heartbeat itself
        groups = None
    if groups:
        msg["groups"] = groups
    try:
        waits = peer_waits.heartbeat_entries(now)
    except Exception:
        waits = None
    if waits:
        msg["peer_waits"] = waits
    if peer_waits.completed:
        msg["peer_done"] = peer_waits.completed
    return msg
