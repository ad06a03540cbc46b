"""World size 1, Gloo: one all_reduce of 10 float32 when the test sends a line
(with a second argument "save": a torch.save instead, whose first write
waits for another line)."""
import io
import sys

import torch
import torch.distributed as dist


class WaitOnWrite(io.BytesIO):
    def write(self, data):
        if not getattr(self, "waited", False):
            self.waited = True
            print("writing", flush=True)
            sys.stdin.readline()
        return super().write(data)


def main():
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    print("ready", flush=True)
    sys.stdin.readline()
    if sys.argv[2:] == ["save"]:
        torch.save({"weights": torch.ones(10)}, WaitOnWrite())
    else:
        dist.all_reduce(torch.ones(10))
    print("done", flush=True)
    sys.stdin.read()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
