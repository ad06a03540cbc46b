"""ddplaunch companion: runs inside every Python rank the launcher spawns
(loaded by the bootstrap sitecustomize), reports the rank's progress to the
launcher's local agent and answers its requests for stack dumps. Standard
library only; it never imports torch, it waits for the program to."""


def activate():
    """Starts the companion when this process is a rank the launcher spawned
    (DDPLAUNCH_COMPANION_SOCKET is set); otherwise does nothing."""
    from .activation import activate as _activate
    return _activate()
