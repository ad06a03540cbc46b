"""Prints which kernels this process's OpenBLAS picked, and OPENBLAS_CORETYPE:
`coretype=<value or -> core=<openblas_get_corename() or ->`."""
import ctypes
import os

try:
    lib = ctypes.CDLL("libopenblas.so.0")
    lib.openblas_get_corename.restype = ctypes.c_char_p
    core = lib.openblas_get_corename().decode()
except (OSError, AttributeError):
    core = "-"
print(f"coretype={os.environ.get('OPENBLAS_CORETYPE', '-')} core={core}", flush=True)
