"""The rank's patches, run by an import watcher (import_watcher.py) once the
top-level torch module has finished importing (never before, and never
importing torch ourselves): wraps what a heartbeat
reports: the phases (data, forward, backward, optimizer, checkpoint), the
optimizer's steps, and the collectives (collectives.py); and, for the fatal
stacks, torch's DataLoader worker signal handlers (fatal_stack.py). Where
multiprocessing starts spawn/forkserver children is wrapped as soon as it
is imported, torch or not (descendants.py). Every wrapper calls the original
with the same arguments and hands back its result or exception."""

import functools
import inspect
import sys
import types
import weakref

from . import backward_probe, collectives, descendants, fatal_stack, import_watcher, progress, subgroups, wrapping
from .progress import BACKWARD, CHECKPOINT, DATA, FORWARD, OPTIMIZER, STATE, leave


def install():
    """Watches for torch (import_watcher.py) and wraps, once it is there,
    everything a heartbeat reports."""
    return import_watcher.install(PATCHES, WITHOUT_TORCH, _torch_imported)


def _torch_imported(torch):
    STATE.torch = str(getattr(torch, "__version__", "")) or None
    wrapping.setup_compiling(sys.modules)
    _patch_torch(torch)


# ------------------------------------------------------------------ phases

def _phase_wrapper(phase, after=None, nested_passes=False, tell_at_once=False, measure=None):
    """A wrapper that marks `phase` while the original runs, then calls
    after(args) once the outermost call returned (a step was done). With
    measure, the outermost call of a measured step after a DDP forward calls
    measure(args, kwargs) before the original (backward_probe.py). With
    nested_passes, a call inside the phase (a subclass's step calling
    super().step()) runs unmarked. With tell_at_once, the outermost call
    sends a heartbeat as it opens the phase. The opening is inlined: this
    runs several times a step, and every Python call costs the step
    microseconds."""
    S = STATE
    stack = S.stack
    opens = phase.opens
    current_seq = progress.current_seq
    perf = progress.perf
    W = wrapping

    def make(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if (nested_passes and phase.depth) or (W.compiling is not None and W.compiling()):
                return fn(*args, **kwargs)
            if opens:
                if S.open_depth == 0:
                    # Where forward/backward returned since the counter was last
                    # read, read it now (DDP may have issued there); else the
                    # last known count is exact.
                    S.open_since = current_seq() if S.fb_from else S.last_seq
                    S.open_fb = True
                    S.fb_t0 = perf()
                    S.fb_coll0 = S.coll_seconds
                    if S.ddp_groups:   # DDP modules on other groups issue there too
                        subgroups.ddp_phase_opened()
                S.open_depth += 1
            phase.depth += 1
            stack.append(phase)
            if tell_at_once and phase.depth == 1 and collectives.checkpoint_sender is not None:
                collectives.checkpoint_sender()
            if measure is not None and S.probe_step and phase.depth == 1 and S.fwd_count:
                measure(args, kwargs)
            try:
                result = fn(*args, **kwargs)
            finally:
                leave(phase)
            if after is not None and phase.depth == 0:
                after(args)
            return result
        return wrapper
    return make


def _patch_torch(torch):
    # Tensor.backward calls torch.autograd.backward through the module, so
    # wrapping the latter covers both (one wrapper per step, not two).
    wrapping.replace(torch.autograd, "backward", _phase_wrapper(BACKWARD, measure=backward_probe.attach))
    # torch.save writes each tensor with the GIL held: no heartbeat leaves
    # while it writes a big one. The agent must know the rank saves before
    # that (it then counts the process's writes as progress).
    save = wrapping.replace(torch, "save", _phase_wrapper(CHECKPOINT, tell_at_once=True))
    serialization = sys.modules.get("torch.serialization")
    if save is not None and getattr(serialization, "save", None) is save.__wrapped__:
        serialization.save = save


def _patch_dataloader(module):
    owner = getattr(module, "_BaseDataLoaderIter", None)
    wrapping.replace(owner, "__next__", _phase_wrapper(DATA))


def _ddp_init_wrapper(fn):
    @functools.wraps(fn)
    def init(self, *args, **kwargs):
        result = fn(self, *args, **kwargs)
        try:   # a module on another group than the default one: its collectives are counted there
            subgroups.used_by_ddp(getattr(self, "process_group", None))
        except Exception:
            pass
        return result
    return init


def _patch_ddp(module):
    owner = getattr(module, "DistributedDataParallel", None)
    wrapping.replace(owner, "forward", _phase_wrapper(FORWARD, progress.forward_done))
    wrapping.replace(owner, "__init__", _ddp_init_wrapper)


# ---------------------------------------------------------------- optimizer

# A step counts once its outermost call returned, for the optimizer it was called on.
_STEP_WRAPPER = _phase_wrapper(OPTIMIZER, progress.optimizer_stepped, nested_passes=True)


def _init_wrapper(fn):
    seen = weakref.WeakSet()   # optimizer classes whose step we looked at

    @functools.wraps(fn)
    def init(self, *args, **kwargs):
        result = fn(self, *args, **kwargs)
        cls = type(self)
        if cls not in seen:
            seen.add(cls)
            try:
                # Only a plain function: a staticmethod/classmethod would bind differently.
                if isinstance(inspect.getattr_static(cls, "step", None), types.FunctionType):
                    wrapping.replace(cls, "step", _STEP_WRAPPER)
            except Exception:
                pass
        return result
    return init


def _patch_optimizer(module):
    wrapping.replace(getattr(module, "Optimizer", None), "__init__", _init_wrapper)


def _patch_dynamo(dynamo):
    if wrapping.compiling is None:   # before torch 2.3: torch._dynamo.is_compiling
        wrapping.setup_compiling(sys.modules)


# module name -> its patch, run once that module (and torch, unless the
# module is in WITHOUT_TORCH) finished importing; torch itself: _torch_imported
PATCHES = {
    "torch._dynamo": _patch_dynamo,
    "torch.distributed": collectives.patch,
    "torch.nn.parallel.distributed": _patch_ddp,
    "torch.optim.optimizer": _patch_optimizer,
    "torch.utils.data.dataloader": _patch_dataloader,
    fatal_stack.WORKER_SIGNAL_HANDLERS: fatal_stack.chain_after_worker_handlers,
    descendants.MULTIPROCESSING_UTIL: descendants.patch_multiprocessing,
}
WITHOUT_TORCH = {descendants.MULTIPROCESSING_UTIL}   # whatever the children run
