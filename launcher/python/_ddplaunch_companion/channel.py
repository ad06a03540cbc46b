"""The connection to the launcher's local agent: one JSON object per
SOCK_SEQPACKET message, at most MAX_MESSAGE bytes."""

import json
import select
import socket
import threading

MAX_MESSAGE = 200 * 1024


class Channel(object):
    """Sends never block the caller for long: a training step must not wait on
    an agent that stopped reading. Every send holds `lock`."""

    def __init__(self, path):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(path)
            sock.setblocking(False)
            try:  # room for a full-size message plus some queued heartbeats
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 512 * 1024)
            except OSError:
                pass
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.lock = threading.Lock()
        self.closed = False

    @staticmethod
    def encode(obj):
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def send_bytes(self, data, wait):
        """Sends one encoded message (caller holds `lock`); waits at most `wait`
        seconds for room. Returns False when it was dropped or the agent left."""
        if self.closed or len(data) > MAX_MESSAGE:
            return False
        while True:
            try:
                # MSG_NOSIGNAL: a vanished agent must not kill us with SIGPIPE.
                self.sock.send(data, socket.MSG_NOSIGNAL)
                return True
            except (BlockingIOError, InterruptedError):
                if wait <= 0 or not select.select([], [self.sock], [], wait)[1]:
                    return False
                wait = 0
            except OSError:
                self.closed = True
                return False

    def send(self, obj, wait=1.0):
        with self.lock:
            return self.send_bytes(self.encode(obj), wait)

    def wait_readable(self, timeout):
        try:
            return bool(select.select([self.sock], [], [], max(0.0, timeout))[0])
        except (OSError, ValueError):
            self.closed = True
            return False

    def recv(self):
        """One message from the agent: a dict, None when there was nothing to
        read or it was not understood. Sets `closed` when the agent left."""
        try:
            data = self.sock.recv(MAX_MESSAGE + 1)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            self.closed = True
            return None
        if not data:
            self.closed = True
            return None
        try:
            msg = json.loads(data.decode("utf-8"))
        except ValueError:
            return None
        return msg if isinstance(msg, dict) else None

    def close_fd(self):
        """Drops our copy of the socket without telling the agent anything (a
        forked child shares the parent's connection)."""
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass
