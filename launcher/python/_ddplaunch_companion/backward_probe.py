"""Where DDP's backward stops computing and starts waiting for the other
ranks, measured on one step per heartbeat.

On the CPU (Gloo), DDP launches each bucket's all-reduce as its gradients
are ready and waits for them all in a final callback of the autograd
engine, after the last gradient. A rank that waits there for a slower one
would otherwise count that wait as its own backward compute, and a rank slow
in backward compute would look like the others (launcher/src/health/
trouble_warnings.h). A post hook on the root of backward (the first node to
run) queues our own final callback; final callbacks run in the order they
were queued, so ours runs when the compute is done and before DDP's wait.
The backward wrapper's close (progress.leave) counts the rest as a wait.

A hook and a callback cost the step about ten microseconds, so only the steps
the heartbeat thread asks for are measured: after each heartbeat the next
whole step is (every backward in it), and the busy time heartbeats report
is that step's. On a GPU the wait is not on the CPU inside backward (DDP
only orders it on the streams): nothing is measured there."""

import sys

from .progress import STATE, perf


def attach(args, kwargs):
    """The outermost torch.autograd.backward of a measured step opens (the
    wrapper calls this only then, and only after a DDP forward): hooks the
    root of the graph it runs, where that root is on the CPU."""
    root = args[0] if args else kwargs.get("tensors")
    if isinstance(root, (list, tuple)):
        root = root[0] if root else None
    try:
        node = root.grad_fn
        if node is None or root.device.type != "cpu":
            return
        node.register_hook(_root_done)
    except Exception:   # not a tensor, or a torch without these: measure nothing
        return


def _root_done(grad_inputs, grad_outputs):
    """The first node of backward ran: we are inside the engine's graph task,
    where a final callback may be queued. Returns None: gradients unchanged."""
    try:
        sys.modules["torch"].autograd.Variable._execution_engine.queue_callback(_compute_done)
    except Exception:
        pass


def _compute_done():
    S = STATE
    S.compute_done_at = perf()
    S.probing = True
