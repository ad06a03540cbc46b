"""Makes torch 1.13's process groups count point-to-point calls as torch 2.2's
Gloo does, for the Python companion's tests (this machine has torch 1.13 only).

From torch 2.2 on, ProcessGroupGloo's counter of a group's collectives (what
ProcessGroup._get_sequence_number_for_group returns) also goes up by one for
every send, recv and recv_anysource, and monitored_barrier makes its own
sends and receives: 2 x (world - 1) on rank 0, 2 on the others. torch 1.13's
counts collectives only. install() wraps those methods of the ProcessGroup
class, below torch.distributed's functions and the companion's wrappers of
them, so that each moves the counter it reads as torch 2.2 would; the
collectives still go through torch's own counter unchanged."""

import torch

_extra = {}   # id(process group) -> point-to-point moves added to its counter


def _bump(pg, n):
    _extra[id(pg)] = _extra.get(id(pg), 0) + n


def install():
    cls = torch._C._distributed_c10d.ProcessGroup
    original_count = cls._get_sequence_number_for_group

    def _get_sequence_number_for_group(self):
        return original_count(self) + _extra.get(id(self), 0)

    def moving(name):
        original = getattr(cls, name)

        def call(self, *args, **kwargs):
            _bump(self, 1)   # torch 2.2 counts it as the call is made, before any wait
            return original(self, *args, **kwargs)
        return call

    original_monitored = cls.monitored_barrier

    def monitored_barrier(self, *args, **kwargs):
        peers = self.size() - 1 if self.rank() == 0 else 1
        _bump(self, peers)            # its receives (rank 0) or its send
        try:
            return original_monitored(self, *args, **kwargs)
        finally:
            _bump(self, peers)        # its sends (rank 0) or its receive

    cls._get_sequence_number_for_group = _get_sequence_number_for_group
    for name in ("send", "recv", "recv_anysource"):
        setattr(cls, name, moving(name))
    cls.monitored_barrier = monitored_barrier
