"""The point-to-point calls a rank has in flight (send, recv, isend, irecv,
batch_isend_irecv), which heartbeats carry as "peer_waits": the peer the
rank waits for. Where no rank waits in a collective, the agent follows
these waits (launcher/src/health/peer_waits.h): a pipeline stage stuck in a
receive names the stage it waits for, and stages that receive from each
other before either sends are named together.

A blocking call is in flight until it returns; an asynchronous one until
its Work completes, polled when a heartbeat is built through a weak
reference (the companion never keeps a Work, or its tensors, alive).

Threads: the calling threads add and remove entries with single dict
operations (atomic under the GIL); the heartbeat thread reads a copy."""

import itertools
import sys
import threading
import time
import weakref

from . import pending_work, wrapping

MAX_REPORTED = 8    # a heartbeat carries the oldest in flight
MAX_KEPT = 256      # asynchronous ones never waited for (nor dropped) stop being followed beyond this
ANY = -1            # the peer of a recv without src

_numbers = itertools.count(1)
in_flight = {}      # number -> (op, peer, bytes, start time, None or a weak reference to its Work)
completed = 0       # calls completed so far, heartbeats' "peer_done": a change is progress (a
                    # script whose ranks only send and receive has no steps or collectives)
_batching = set()   # threads inside batch_isend_irecv: it follows its isend/irecv itself


def _nbytes(tensor):
    try:
        return int(tensor.numel() * tensor.element_size())
    except Exception:
        return 0


def _begin(op, peer, tensor):
    n = next(_numbers)
    in_flight[n] = (op, ANY if peer is None else int(peer), _nbytes(tensor), time.perf_counter(), None)
    if len(in_flight) > MAX_KEPT:
        try:
            del in_flight[min(in_flight)]
        except (KeyError, ValueError):
            pass
    return n


def _completed(n):
    """Call n is done. A count lost to two threads adding at once costs
    nothing: only a change matters."""
    global completed
    if in_flight.pop(n, None) is not None:
        completed += 1


def _runs_on(n, work):
    """Call n returned `work`: in flight until it completes (or goes away)."""
    entry = in_flight.get(n)
    if entry is None:
        return
    try:
        in_flight[n] = entry[:4] + (weakref.ref(work),)
    except TypeError:   # None (started inside a coalesced block) or not weak-referenceable
        in_flight.pop(n, None)


class Call(object):
    """Follows one of send, recv, isend, irecv: where its tensor and peer are
    passed. start() -> a token for returned()/failed(), or None."""

    def __init__(self, name, fn):
        self.op = name
        self.asynchronous = name.startswith("i")
        peer = "src" if name.endswith("recv") else "dst"
        self.peer = peer
        self.peer_at = wrapping.arg_index(fn, peer)
        self.group_peer = "group_" + peer   # torch >= 2.6: the peer's rank in the group instead
        self.group_at = wrapping.arg_index(fn, "group")
        self.tensor_at = wrapping.arg_index(fn, "tensor")

    def start(self, args, kwargs):
        if threading.get_ident() in _batching:
            return None
        tensor = args[self.tensor_at] if len(args) > self.tensor_at else kwargs.get("tensor")
        peer = args[self.peer_at] if len(args) > self.peer_at else kwargs.get(self.peer)
        if peer is None and kwargs.get(self.group_peer) is not None:
            peer = _global_rank(args[self.group_at] if len(args) > self.group_at else kwargs.get("group"),
                                kwargs[self.group_peer])
        return _begin(self.op, peer, tensor)

    def returned(self, n, result):
        if self.asynchronous:
            _runs_on(n, result)
        else:
            _completed(n)

    def failed(self, n):
        in_flight.pop(n, None)


class Batch(object):
    """Follows batch_isend_irecv(p2p_op_list): each operation, until the
    Work it returned for it (or, where torch coalesced them into fewer, the
    last Work) completes."""

    def start(self, args, kwargs):
        ops = args[0] if args else kwargs.get("p2p_op_list")
        numbers = [_begin(getattr(p.op, "__name__", "?"), p.peer, p.tensor) for p in ops]
        _batching.add(threading.get_ident())
        return numbers

    def returned(self, numbers, works):
        _batching.discard(threading.get_ident())
        works = list(works or ())
        if len(works) != len(numbers):   # coalesced: the last one finishes them all
            works = [works[-1]] * len(numbers) if works else [None] * len(numbers)
        for n, work in zip(numbers, works):
            _runs_on(n, work)

    def failed(self, numbers):
        _batching.discard(threading.get_ident())
        for n in numbers:
            in_flight.pop(n, None)


def _global_rank(group, group_rank):
    """A group's rank as a global one (torch >= 2.6's group_src/group_dst)."""
    if group is None:
        return group_rank
    try:
        return sys.modules["torch.distributed"].get_global_rank(group, group_rank)
    except Exception:
        return None


def heartbeat_entries(now):
    """The oldest MAX_REPORTED calls in flight, oldest first, as the
    heartbeat's "peer_waits"; drops the asynchronous ones that completed."""
    waits = []
    for n, (op, peer, nbytes, t0, ref) in list(in_flight.items()):
        if ref is not None:
            work = ref()
            try:
                done = work is None or pending_work.finished(work)
            except Exception:   # a Work that can no longer be asked: count it done
                done = True
            if done:
                _completed(n)
                continue
        waits.append((t0, op, peer, nbytes))
    waits.sort(key=lambda w: w[0])
    return [{"op": op, "peer": peer, "bytes": nbytes, "age_ms": max(0, int((now - t0) * 1000))}
            for t0, op, peer, nbytes in waits[:MAX_REPORTED]]
