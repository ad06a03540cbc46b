"""What a PyTorch script run by ddplaunch may import as `ddplaunch` (the
companion registers this module under that name in the rank process only):

    import ddplaunch
    ...
    for step, batch in enumerate(loader):
        train_step(batch)
        if ddplaunch.should_stop():      # a preemption: SIGTERM with --stop-timeout
            save_checkpoint()
            sys.exit(0)                  # ddplaunch then exits 75: requeue the job

Every rank stops after the same step: the one ddplaunch's stop request names
(DDPLAUNCH_STOP_FILE, launcher/src/job/stop_request.h), counted in completed
optimizer steps (or DDP forwards where there is no optimizer), as the
companion counts them. Standard library only."""

import json
import os
import sys

from .progress import steps_done as progress_steps

_NOT_ASKED = object()
_stop_at = _NOT_ASKED   # the request's step count once read; None: at the next step boundary


def stop_requested_at():
    """The step count the stop request names, None for "at the next step
    boundary", or False while there is no request."""
    global _stop_at
    if _stop_at is _NOT_ASKED:
        path = os.environ.get("DDPLAUNCH_STOP_FILE")
        if not path:
            return False
        try:
            with open(path) as f:
                request = json.load(f)
        except (OSError, ValueError):
            return False   # no request yet (the launcher renames it into place whole)
        at = request.get("stop_at_step") if isinstance(request, dict) else None
        _stop_at = at if isinstance(at, int) and not isinstance(at, bool) and at >= 0 else None
    return _stop_at


def should_stop(steps_done=None):
    """True once ddplaunch asked the job to stop and this rank has completed
    the step the request names: save what must survive and exit 0. Pass
    `steps_done` (your own count of completed steps) if you count steps
    differently from the companion. Costs a failed open() per call while no
    request is there."""
    at = stop_requested_at()
    if at is False:
        return False
    if at is None:
        return True
    done = progress_steps() if steps_done is None else steps_done
    if done > at:
        _say_once_the_request_came_late(done, at)
    return done >= at


_said_late = False


def _say_once_the_request_came_late(done, at):
    # The launcher chooses a step the ranks have not reached; one read after
    # it stops here, where others may have stopped at another step: the ones
    # still going then wait in a collective, and this line says why.
    global _said_late
    if _said_late:
        return
    _said_late = True
    sys.stderr.write(f"ddplaunch companion: rank {os.environ.get('RANK', '?')} read the stop request after "
                     f"completing step {done}, past step {at} it names: it stops now, and ranks that stopped "
                     f"after another step leave the others waiting in a collective\n")
    sys.stderr.flush()
