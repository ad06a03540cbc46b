"""Reads a DataLoader whose worker (started with the method given, fork by
default) dereferences NULL in native code for item 3: SIGSEGV in the worker,
after torch installed its own worker signal handlers. Prints the error the
rank gets and exits 0."""
import ctypes
import sys

from torch.utils.data import DataLoader, Dataset


class Items(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, index):
        if index == 3:
            ctypes.string_at(0)  # the worker crashes here
        return index   # no tensor: nothing shared through file descriptors


def main():
    method = sys.argv[1] if len(sys.argv) > 1 else "fork"
    try:
        for _ in DataLoader(Items(), batch_size=None, num_workers=1, multiprocessing_context=method):
            pass
    except RuntimeError as err:   # "DataLoader worker (pid(s) N) exited unexpectedly"
        print("rank got: %s" % err, flush=True)


if __name__ == "__main__":
    main()
