"""A sys.meta_path finder that only watches imports: it lets the other
finders find torch and the modules it is told of, and once one of them has
finished importing runs that module's patch. It never imports anything
itself. Used by the rank (torch_hooks.py) and by its spawn/forkserver
children (descendants.py), each with its own table of patches.

Threading: find_spec runs on whatever thread imports, under the import
lock of that module; the patches run there, once each."""

import sys


class ImportWatcher(object):
    """patches: module name -> patch(module), run once that module and torch
    finished importing (torch's own submodules load while torch does);
    without_torch: names among them patched without waiting for torch;
    on_torch(torch): run once torch finished importing, before the patches."""

    def __init__(self, patches, without_torch=(), on_torch=None):
        self.patches = patches
        self.without_torch = frozenset(without_torch)
        self.on_torch = on_torch
        self.torch_done = False
        self.patched = set()

    def find_spec(self, name, path=None, target=None):
        if name != "torch" and name not in self.patches:
            return None
        spec = None
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        loader = spec.loader if spec is not None else None
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec
        watcher = self

        def exec_then_patch(module):
            try:
                exec_module(module)
            finally:
                try:  # back to the loader's own method
                    del loader.exec_module
                except AttributeError:
                    pass
            watcher.loaded(name)
        try:
            loader.exec_module = exec_then_patch   # this loader instance only
        except (AttributeError, TypeError):
            pass
        return spec

    def loaded(self, name):
        try:
            if name == "torch":
                if self.torch_done:
                    return
                self.torch_done = True
                if self.on_torch is not None:
                    self.on_torch(sys.modules.get("torch"))
                for target in sorted(self.patches):
                    self.patch(target)
            elif self.torch_done or name in self.without_torch:
                self.patch(name)
        except Exception as err:  # never break the user's import
            sys.stderr.write("ddplaunch companion: cannot watch torch (%s: %s)\n"
                             % (type(err).__name__, " ".join(str(err).split())))

    def patch(self, name):
        module = sys.modules.get(name)
        if module is None or name in self.patched:
            return
        self.patched.add(name)
        self.patches[name](module)


def install(patches, without_torch=(), on_torch=None):
    """Puts a watcher first on sys.meta_path and patches what is imported
    already: the modules that need no torch, and everything once torch is
    there (a companion started late)."""
    watcher = ImportWatcher(patches, without_torch, on_torch)
    sys.meta_path.insert(0, watcher)
    for name in sorted(watcher.without_torch & set(patches)):
        watcher.patch(name)
    if "torch" in sys.modules:
        watcher.loaded("torch")
    return watcher
