"""Ctrl-C and SIGTERM as exceptions in the main thread, so `finally` blocks clean up.

Python runs a signal's handler at the next bytecode boundary of the main
thread, and that boundary may fall inside a weakref callback or `__del__` (the
import system frees its module locks through one while litellm is imported in
the background). An exception raised there is not propagated: it goes to
`sys.unraisablehook` and the interrupt is lost, leaving the run hanging on its
clone. So the hook sends the same signal again, from another thread a moment
later: by then the main thread has left the callback. (Raising it from inside
the hook would run the handler inside the hook, and lose it again.)

Opening the workspace and cleaning it up run with both signals held (`held`):
an interrupt there would leave a half-made workspace, or an impatient second
Ctrl-C would cut the cleanup short, leaving the workspace or the container
behind. One more interrupt still stops at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

# Long enough for the main thread to leave the callback that swallowed the
# interrupt; short enough to go unnoticed.
REDELIVERY_DELAY_S = 0.02
CLEANUP_NOTICE = "research: cleaning up the workspace; interrupt again to stop at once and leave it behind\n"


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so `finally` blocks clean up."""


def install() -> None:
    """Raise KeyboardInterrupt on SIGINT (Python's default) and Terminated on SIGTERM, never losing either."""
    signal.signal(signal.SIGTERM, _raise_terminated)
    previous_hook = sys.unraisablehook

    def redeliver_interrupts(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _send_again(signal.SIGINT)
        elif isinstance(unraisable.exc_value, Terminated):
            _send_again(signal.SIGTERM)
        else:
            previous_hook(unraisable)

    sys.unraisablehook = redeliver_interrupts


@contextlib.contextmanager
def held(notice: str | None = None):
    """Hold SIGINT and SIGTERM while the block runs; deliver one received meanwhile afterwards.

    The first signal is answered with `notice` on stderr, if any; the second is
    delivered at once. Outside the main thread, where signals cannot be
    handled, this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum, frame) -> None:
        held.append(signum)
        if len(held) > 1:
            _raise_for(signum)
        if notice:
            _notify(notice)

    previous = {signum: signal.signal(signum, hold) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if held:
        _raise_for(held[0])


def ignore() -> None:
    """Ignore SIGINT and SIGTERM from now on: the run is already ending."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)


def _notify(text: str) -> None:
    # Straight to the descriptor: the handler may have interrupted a write to
    # sys.stderr, whose buffer refuses reentrant calls.
    try:
        os.write(2, text.encode())
    except OSError:
        pass


def _raise_for(signum: int) -> None:
    if signum == signal.SIGTERM:
        raise Terminated()
    raise KeyboardInterrupt


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def _send_again(signum: int) -> None:
    def send() -> None:
        time.sleep(REDELIVERY_DELAY_S)
        os.kill(os.getpid(), signum)

    threading.Thread(target=send, name="interrupt-redelivery", daemon=True).start()
