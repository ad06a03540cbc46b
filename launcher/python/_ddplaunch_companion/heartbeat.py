"""The companion's daemon thread: a heartbeat every interval, and the agent's
requests (stack dumps) answered promptly even while the training threads sit
in C++ with the GIL released."""

import os
import sys
import threading

from . import nccl_flight_recorder, signal_stacks, stacks, waited_child
from .channel import Channel
from .progress import STATE, build_heartbeat, perf


class Agent(object):
    def __init__(self, channel, interval, rank, log_dir, pid):
        self.channel = channel
        self.interval = interval
        self.rank = rank
        self.log_dir = log_dir
        self.pid = pid                   # the claimed rank process
        self.own_threads = set()         # idents left out of stack dumps
        self.recorder_busy = False
        self.announcements = None        # announcements.Announcements, where it could be made
        self.fatal_stack = None          # fatal_stack.FatalStack, where faulthandler is ours

    # -- sending (any thread) ------------------------------------------------
    def send_heartbeat(self, wait, exiting=False, lock_timeout=-1):
        ch = self.channel
        if not ch.lock.acquire(timeout=lock_timeout):
            return False
        try:
            if ch.closed or not STATE.sending or not STATE.group_seen:
                return False
            # Read before the records: an announcement after this count that
            # the heartbeat also holds is told apart by its sequence number.
            announced = self.announcements.written if self.announcements is not None else 0
            msg = build_heartbeat(exiting)
            msg["announced"] = announced
            data = Channel.encode(msg)
            if exiting:
                STATE.sending = False    # the last word: nothing may follow it
            return ch.send_bytes(data, wait)
        finally:
            ch.lock.release()

    def eager(self):
        """A heartbeat now, from any thread: never waits."""
        try:
            self.send_heartbeat(0.0, lock_timeout=0)
        except Exception:
            pass

    def eager_waiting(self):
        """A heartbeat now, from any thread, waiting up to 50 ms for the
        channel: for a heartbeat that must not be missed (the checkpoint
        phase, before torch.save holds the GIL for long)."""
        try:
            self.send_heartbeat(0.05, lock_timeout=0.05)
        except Exception:
            pass

    def send(self, msg, wait=1.0):
        with self.channel.lock:
            if STATE.sending:
                self.channel.send_bytes(Channel.encode(msg), wait)

    # -- the thread --------------------------------------------------------------
    def start(self):
        t = threading.Thread(target=self._run, name="ddplaunch-companion", daemon=True)
        t.start()

    def _run(self):
        self.own_threads.add(threading.get_ident())
        ch = self.channel
        next_beat = perf() + self.interval
        while STATE.sending and not ch.closed:
            try:
                timeout = next_beat - perf()
                if timeout > 0 and ch.wait_readable(timeout):
                    msg = ch.recv()
                    if msg is not None and msg.get("type") == "dump_stacks":
                        self.dump_stacks()
                    continue
                next_beat = max(next_beat + self.interval, perf() + self.interval / 2)
                self.send_heartbeat(1.0)
            except Exception:
                pass   # never disturb the program; the next beat tries again
        if ch.closed and os.getpid() == self.pid:
            STATE.sending = False   # the agent left: stop silently

    def dump_stacks(self):
        threads = stacks.collect(self.own_threads)
        try:   # the forked children's too, and the worker or program the main thread waits for
            main = sys._current_frames().get(threading.main_thread().ident)
            answered = signal_stacks.dump_descendants(os.getpid())
            signal_stacks.attach(threads, answered, signal_stacks.awaited_worker(main))
            waited_child.attach(threads, main, answered)
            main = None
        except Exception:
            pass
        stacks.write_log(self.log_dir, threads, os.getpid())
        with self.channel.lock:
            self.channel.send_bytes(stacks.encode_message(threads), 1.0)
        if os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") and not self.recorder_busy:
            # Waiting for torch's dump takes up to 5 s: not on this thread.
            self.recorder_busy = True
            threading.Thread(target=self._flight_recorder, name="ddplaunch-companion-fr",
                             daemon=True).start()

    def _flight_recorder(self):
        self.own_threads.add(threading.get_ident())
        try:
            got = nccl_flight_recorder.request_and_convert(os.environ, self.rank, self.log_dir)
            if got is not None:
                self.send({"type": "flight_recorder", "path": got[0], "summary": got[1]})
        except Exception:
            pass
        finally:
            self.recorder_busy = False
            self.own_threads.discard(threading.get_ident())

    # -- process events ----------------------------------------------------------
    def at_exit(self):
        if os.getpid() == self.pid:
            if self.fatal_stack is not None:
                self.fatal_stack.remove_if_empty()
            if self.announcements is not None:   # where the agent never mapped it
                try:
                    os.unlink(self.announcements.path)
                except OSError:
                    pass
            try:
                self.send_heartbeat(1.0, exiting=True, lock_timeout=2.0)
            except Exception:
                pass

    def after_fork_child(self):
        # A forked child (e.g. a DataLoader worker) shares our connection: it
        # must stay silent and only drop its copy of the socket.
        STATE.sending = False
        self.channel.close_fd()
        signal_stacks.arm()   # its stacks on the rank's request
