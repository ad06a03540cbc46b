#!/usr/bin/python3
"""torchrun, with one Python 3.11 bug mended, for benchmarking ddplaunch.

Debian's python3-torch 1.13 ships a torchrun that dies at start under Python
3.11: ``Std.from_str("0")`` (the default of --redirects and --tee) returns None,
because since 3.11 iterating an IntFlag skips its zero member (Std.NONE), so the
lookup loop in ``to_std`` never matches 0.  This shim replaces exactly that one
classmethod with an equivalent that builds the member with ``Std(int(v))`` and
then runs the unmodified ``torch.distributed.run.main()``.  Nothing else about
torchrun's behaviour (or speed) changes.

Note: torch 1.13 only knows the underscore spellings (--nproc_per_node,
--no_python, --monitor_interval, ...); the dash forms came with torch 2.x.

Usage: /usr/bin/python3 torchrun_shim.py [torchrun options] PROGRAM [ARGS...]
       /usr/bin/python3 torchrun_shim.py --as-launch [torch.distributed.launch options] PROGRAM [ARGS...]
(the second form runs the older ``python -m torch.distributed.launch`` instead,
which builds on the same torchrun code and needs the same mend).
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api as _mp_api


def _std_from_str(cls, vm):
    """Parse "0".."3" into a Std, or "0:1,1:2" into {local_rank: Std}.

    Same grammar and errors as torch's own from_str (its regexes are reused).
    """

    def to_std(v):
        return cls(int(v))  # 0..3 are all valid Std values, NONE included

    if re.match(_mp_api._VALUE_REGEX, vm):
        return to_std(vm)
    if re.match(_mp_api._MAPPING_REGEX, vm):
        mapping = {}
        for item in vm.split(","):
            rank, value = item.split(":")
            mapping[int(rank)] = to_std(value)
        return mapping
    raise ValueError(
        f"{vm} does not match: <{_mp_api._VALUE_REGEX}> or <{_mp_api._MAPPING_REGEX}>"
    )


# run.py calls Std.from_str on the same class object, so patching the class is enough.
_mp_api.Std.from_str = classmethod(_std_from_str)

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--as-launch":
        del sys.argv[1]
        from torch.distributed.launch import main
    else:
        from torch.distributed.run import main

    sys.argv[0] = "torchrun"
    sys.exit(main())
