"""The main thread blocks in waiting_for_data(); a helper thread waits on an event."""
import threading
import time


def helper(event):
    event.wait(120)


def waiting_for_data():
    print("ready", flush=True)
    time.sleep(120)  # the main thread waits here


def main():
    event = threading.Event()
    threading.Thread(target=helper, args=(event,), name="helper-thread", daemon=True).start()
    waiting_for_data()


main()
