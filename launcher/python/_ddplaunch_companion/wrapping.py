"""How the companion wraps a torch function: a marked wrapper set in place of
the original (once), and the torch.compile check every wrapper makes first."""

import inspect

MARK = "__ddplaunch_wrapped__"

# torch.compiler.is_compiling (torch._dynamo.is_compiling before 2.3), once
# known. A wrapper that sees it return True calls the original straight away,
# so torch.compile traces what it would have traced without us.
compiling = None


def ours(obj):
    return getattr(obj, MARK, False)


def replace(owner, name, make):
    """Sets owner.name = make(original) unless missing or already ours;
    returns the wrapper (its __wrapped__ is the original) or None."""
    original = getattr(owner, name, None)
    if original is None or ours(original):
        return None
    wrapper = make(original)
    setattr(wrapper, MARK, True)
    setattr(owner, name, wrapper)
    return wrapper


def setup_compiling(modules):
    global compiling
    torch = modules.get("torch")
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if compiling is None and "torch._dynamo" in modules:
        compiling = getattr(modules["torch._dynamo"], "is_compiling", None)


def arg_index(fn, name):
    """The position of fn's parameter `name`, or one no call reaches (where
    fn has none, or no readable signature: then looked up in kwargs only)."""
    try:
        return list(inspect.signature(fn).parameters).index(name)
    except (ValueError, TypeError):
        return 1 << 30
