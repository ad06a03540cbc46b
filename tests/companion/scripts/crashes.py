"""Dereferences NULL in native code (ctypes) from crash_here(): SIGSEGV."""
import ctypes
import sys


def crash_here():
    ctypes.string_at(0)  # the rank crashes here


if sys.argv[1:] == ["crash"]:
    crash_here()
print("done", flush=True)
