"""ddplaunch bootstrap: loaded because the launcher puts this folder first on a
rank's PYTHONPATH. Starts the companion, takes this folder back out of
sys.path and PYTHONPATH, then runs the sitecustomize this one shadows."""

import os
import sys


def _ddplaunch_bootstrap():
    here = os.path.dirname(os.path.abspath(__file__))
    ours = {here, os.path.abspath(os.environ.get("DDPLAUNCH_COMPANION_PATH") or here)}
    try:
        import _ddplaunch_companion
        _ddplaunch_companion.activate()
    except Exception as err:  # the user's program must run whatever happens here
        sys.stderr.write("ddplaunch companion: not started (%s: %s)\n"
                         % (type(err).__name__, " ".join(str(err).split())))
    # Leave the program (and its children) the path they would have had without us.
    sys.path[:] = [p for p in sys.path if not p or os.path.abspath(p) not in ours]
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if not p or os.path.abspath(p) not in ours]
    if any(rest):
        os.environ["PYTHONPATH"] = os.pathsep.join(rest)
    else:
        os.environ.pop("PYTHONPATH", None)
    _run_shadowed_sitecustomize()


def _run_shadowed_sitecustomize():
    # site.py imports only the first sitecustomize on sys.path: ours. Run the
    # next one (the user's, or the distribution's) as site.py would have.
    import importlib.machinery
    import importlib.util
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is None or spec.loader is None:
        return
    ours = sys.modules.get("sitecustomize")
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        if ours is not None:
            sys.modules["sitecustomize"] = ours
        if sys.flags.verbose:
            sys.__excepthook__(*sys.exc_info())   # not the companion's: no error file for this
        else:
            sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                             "%s: %s\n" % (err.__class__.__name__, err))


_ddplaunch_bootstrap()
del _ddplaunch_bootstrap, _run_shadowed_sitecustomize
