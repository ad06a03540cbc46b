"""The collectives this rank starts, announced to the agent through a small
shared file instead of a message: a store into memory costs the training
thread about a microsecond where a socket send (and the agent's wake-up)
costs tens, and what is written survives the process, so a rank that dies
inside a mismatched collective has still said which one it entered.

The layout (launcher/src/companion/collective_announcements.h) is
  header: b"DDPA", u32 version 3, u64 count of announcements so far
  16 entries of 120 bytes, entry n (1-based) at slot (n - 1) % 16:
    u64 n (its top bit set once the call returned), u64 sequence, i64 bytes,
    u64 CLOCK_MONOTONIC ns, op[24], dtype[16], group[48]
(group: b"" for the default group, else the process group's name, whose own
count the sequence is). Each entry is written before the count that publishes it.
The top bit tells the agent that a collective announced after the last
heartbeat has finished: the rank is not in it any more (it may be reading
its next batch)."""

import itertools
import mmap
import os
import struct

MAGIC = b"DDPA"
VERSION = 3
SLOTS = 16
HEADER = struct.Struct("<4sIQ")
ENTRY = struct.Struct("<QQqQ24s16s48s")
GROUP_BYTES = 48   # longer group names are cut to this, in heartbeats too
SIZE = HEADER.size + SLOTS * ENTRY.size
COUNT = struct.Struct("<Q")
COUNT_OFFSET = 8
RETURNED = 1 << 63


class Announcements(object):
    """The writer. Owns the file's mapping; write() may be called from any
    thread (a single struct store each, under the GIL)."""

    def __init__(self, path):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, SIZE)
            self.map = mmap.mmap(fd, SIZE)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
            raise
        os.close(fd)
        HEADER.pack_into(self.map, 0, MAGIC, VERSION, 0)
        self.path = path
        self.numbers = itertools.count(1)
        self.written = 0          # the count last published
        self._names = {}          # dtype or group name -> its bytes

    def write(self, sequence, op, nbytes, dtype, started, group=""):
        """op: its ASCII name; dtype: its name; started: time.perf_counter()
        (CLOCK_MONOTONIC) when the collective began; group: "" on the default
        group, else the group's name. Returns the announcement's number."""
        n = next(self.numbers)
        names = self._names
        dtype_bytes = names.get(dtype)
        if dtype_bytes is None:
            dtype_bytes = names[dtype] = dtype.encode("ascii", "replace")
        group_bytes = names.get(group)
        if group_bytes is None:
            group_bytes = names[group] = group.encode("ascii", "replace")
        ENTRY.pack_into(self.map, HEADER.size + ((n - 1) % SLOTS) * ENTRY.size, n, sequence, nbytes,
                        int(started * 1e9), op, dtype_bytes, group_bytes)
        COUNT.pack_into(self.map, COUNT_OFFSET, n)
        self.written = n
        return n

    def returned(self, n):
        """Announcement n's call returned (a synchronous one: an asynchronous
        one's Work may still run). Left alone once the ring went past it."""
        if self.written - n < SLOTS:
            COUNT.pack_into(self.map, HEADER.size + ((n - 1) % SLOTS) * ENTRY.size, n | RETURNED)


def create(socket_path, pid):
    """The file next to the agent's socket (in its private folder), or None."""
    base = os.path.basename(socket_path)
    if base.endswith(".sock"):
        base = base[:-len(".sock")]
    try:
        return Announcements(os.path.join(os.path.dirname(socket_path), "%s.%d.ann" % (base, pid)))
    except (OSError, ValueError):
        return None
