"""Makes torch 1.13's coalesced blocks behave as torch 2.1's and later do, for
the Python companion's tests (this machine has torch 1.13 only).

Inside `with torch.distributed._coalescing_manager(group, ...)`, torch from
2.1 on issues no all_reduce as it is called: it notes the tensor and, as the
block ends, all-reduces every noted tensor in one allreduce_coalesced call,
on Gloo and NCCL alike. The group's collective counter (what
ProcessGroup._get_sequence_number_for_group returns) then moves by one for
the whole block, and the waiting happens as the block ends. torch 1.13 runs
and counts each call inside as it is made.

install() wraps the ProcessGroup class's allreduce, _start_coalescing and
_end_coalescing, below torch.distributed's functions and the companion's
wrappers of them, to do the same: allreduce inside a block returns a Work
that is already done and leaves the tensor to the block's end, where one
allreduce_coalesced (one count, as in torch 2.1) reduces them all."""

import torch

_noted = {}   # id(process group) -> tensors its open block all-reduces as it ends


class _Deferred(object):
    """The Work an all_reduce inside a block returns: nothing left to wait for
    (torch 2.1 returns None, or a Work that refuses to be waited on)."""

    def wait(self, *args, **kwargs):
        return True

    def is_completed(self):
        return True


def install():
    cls = torch._C._distributed_c10d.ProcessGroup
    original_allreduce = cls.allreduce
    original_start = cls._start_coalescing
    original_end = cls._end_coalescing

    def allreduce(self, tensors, *args, **kwargs):
        noted = _noted.get(id(self))
        if noted is None:
            return original_allreduce(self, tensors, *args, **kwargs)
        noted.extend(tensors)
        return _Deferred()

    def _start_coalescing(self, *args, **kwargs):
        _noted[id(self)] = []
        return original_start(self, *args, **kwargs)

    def _end_coalescing(self, reqs, *args, **kwargs):
        noted = _noted.pop(id(self), None)
        if noted:
            work = self.allreduce_coalesced(noted, torch._C._distributed_c10d.AllreduceCoalescedOptions())
            reqs.append(work)
            work.wait()
        return original_end(self, reqs, *args, **kwargs)

    cls.allreduce = allreduce
    cls._start_coalescing = _start_coalescing
    cls._end_coalescing = _end_coalescing
