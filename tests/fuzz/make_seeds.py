#!/usr/bin/python3
"""Writes the binary seed corpora of tensor_file_fuzz (from files written by
torch.save, and a few made by hand) and checkpoint_store_fuzz. The seeds are
committed; rerun this after changing the input layout described at the top
of either harness:

    /usr/bin/python3 tests/fuzz/make_seeds.py

The torch.save seeds need PyTorch (Debian's python3-torch will do); without
it they are left as they are. (coordinator_rpc_fuzz's seeds are inputs kept
from a campaign: its input is a FuzzedDataProvider stream, not a format.)
"""

import collections
import io
import json
import os
import struct
import sys
import zipfile
import zlib

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


# --- tensor_file_fuzz -------------------------------------------------------


def torch_save_bytes(obj):
    import torch

    out = io.BytesIO()
    torch.save(obj, out)
    return out.getvalue()


def tensor_file_input(saved, byteorder=True):
    """The harness's form: mode, record count, records data/0.., data.pkl."""
    z = zipfile.ZipFile(io.BytesIO(saved))
    records = {}
    pkl = None
    for name in z.namelist():
        rest = name.split("/", 1)[1]
        if rest == "data.pkl":
            pkl = z.read(name)
        elif rest.startswith("data/"):
            records[int(rest[5:])] = z.read(name)
    assert sorted(records) == list(range(len(records))) and len(records) <= 4, sorted(records)
    out = bytes([2 if byteorder else 1, len(records)])
    for i in range(len(records)):
        assert len(records[i]) < 65536
        out += struct.pack("<H", len(records[i])) + records[i]
    return out + pkl


def pickle_unicode(text):
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def pickle_tensor_dict(name, numel, offset, sizes, strides):
    """data.pkl of {name: float tensor} as torch.save writes it, with the
    storage's element count, offset, sizes and strides as given (pickled
    ints: J for 32 bits, LONG1 for 64)."""

    def integer(v):
        return b"J" + struct.pack("<i", v) if -2**31 <= v < 2**31 else b"\x8a\x08" + struct.pack("<q", v)

    tensor = (b"ctorch._utils\n_rebuild_tensor_v2\n((" + pickle_unicode("storage") + b"ctorch\nFloatStorage\n" +
              pickle_unicode("0") + pickle_unicode("cpu") + integer(numel) + b"tQ" + integer(offset) +
              b"(" + b"".join(map(integer, sizes)) + b"t(" + b"".join(map(integer, strides)) + b"t" +
              b"\x89ccollections\nOrderedDict\n)RtR")
    return b"\x80\x02}(" + pickle_unicode(name) + tensor + b"u."


def crafted_tensor_file_seeds():
    """Hand-made programs for the bugs the target found (see README)."""
    t = "tensor_file_fuzz"
    four_floats = struct.pack("<H", 16) + bytes(16)
    # A storage of 2^40 floats in a 16-byte record.
    write(t, "storage_larger_than_record", bytes([2, 1]) + four_floats + pickle_tensor_dict("w", 2**40, 0, [1], [1]))
    # Sizes and strides whose extent overflows 64 bits.
    write(t, "extent_overflows", bytes([2, 1]) + four_floats + pickle_tensor_dict("w", 4, 0, [2**62, 2], [4, 1]))
    # A list appended to itself.
    write(t, "self_reference", bytes([2, 0]) + b"\x80\x02]2a.")


def tensor_file_seeds():
    crafted_tensor_file_seeds()
    try:
        import torch
    except ImportError:
        print("no PyTorch: tensor_file_fuzz seeds left as they are", file=sys.stderr)
        return
    torch.manual_seed(0)
    t = "tensor_file_fuzz"
    linear = torch.nn.Linear(3, 2)
    write(t, "state_dict", tensor_file_input(torch_save_bytes(linear.state_dict())))
    write(t, "classification", tensor_file_input(torch_save_bytes(
        {"x": torch.randn(4, 3), "y": torch.tensor([0, 1, 1, 0])})))
    base = torch.arange(12.0).view(3, 4)
    write(t, "shared_views", tensor_file_input(torch_save_bytes(
        collections.OrderedDict(t=base.t(), rows=base[1:], all=base)), byteorder=False))
    write(t, "dtypes", tensor_file_input(torch_save_bytes({
        "half": torch.tensor([1.5, -2.0]).half(), "flags": torch.tensor([True, False]),
        "empty": torch.empty(0, 5), "scalar": torch.tensor(3.5)})))
    write(t, "parameter", tensor_file_input(torch_save_bytes({"w": torch.nn.Parameter(torch.ones(2))})))
    write(t, "not_a_dict", tensor_file_input(torch_save_bytes([torch.zeros(1), 1, "two", 3.0, None])))
    write(t, "whole_file", b"\x00" + torch_save_bytes({"b": torch.tensor([1, 2], dtype=torch.int32)}))


# --- checkpoint_store_fuzz --------------------------------------------------


def checkpoint_input(meta, payload, flags=0, version=1, cut=0, lengths=None):
    out = bytes([1, flags, version, cut]) + struct.pack("<H", len(meta))
    if lengths is not None:
        out += struct.pack("<QQ", *lengths)
    return out + meta + payload


def checkpoint_file(step, meta, payload):
    header = b"DDPCKPT\0" + struct.pack("<IIqQQ", 1, 0, step, len(meta), len(payload))
    data_crc = zlib.crc32(meta + payload, zlib.crc32(header))
    header += struct.pack("<I", data_crc)
    header += struct.pack("<I", zlib.crc32(header))
    return header + meta + payload + b"DDPCKEND"


def checkpoint_seeds():
    t = "checkpoint_store_fuzz"
    meta = json.dumps({"next_step": 7, "model": "mlp", "mlp_sizes": [8, 4], "seed": 1, "world_size": 2,
                       "batch_size": 16, "optimizer": "adam", "precision": "fp32"},
                      separators=(",", ":"), sort_keys=True).encode()
    payload = bytes(range(64))
    write(t, "canonical", checkpoint_input(meta, payload))
    write(t, "spaced_metadata", checkpoint_input(b'{ "next_step" : 7, "note": "caf\\u00e9" }', b"p"))
    write(t, "empty_payload", checkpoint_input(b"{}", b""))
    write(t, "bad_data_crc", checkpoint_input(meta, payload, flags=0x08))
    write(t, "cut_short", checkpoint_input(meta, payload, flags=0x40, cut=9))
    write(t, "huge_lengths", checkpoint_input(meta, payload, flags=0x04, lengths=(2**64 - 40, 16)))
    write(t, "not_json", checkpoint_input(b"{next_step: 7", payload))
    write(t, "whole_file", b"\x00" + checkpoint_file(7, meta, payload))


if __name__ == "__main__":
    tensor_file_seeds()
    checkpoint_seeds()
