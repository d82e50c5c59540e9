"""Ctrl-C and SIGTERM, one way to stop: a command treats SIGTERM as Ctrl-C (a KeyboardInterrupt,
so the same clean stop path: one line, exit 130), a few steps cannot be cut in two by either
(`deferred`: the report swap's two renames), and a run holds them (`held`: noted, acted on once
its report is in place, raised only where they stop a notebook's kernel). Signal handlers run in
the main thread only; in another thread all three are no-ops."""

from __future__ import annotations

import contextlib
import signal
import threading

STOPS = (signal.SIGINT, signal.SIGTERM)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _terminated(signum, frame):
    raise KeyboardInterrupt("SIGTERM")


@contextlib.contextmanager
def terminate_as_interrupt():
    """SIGTERM raises KeyboardInterrupt("SIGTERM") during the block, as Ctrl-C raises one."""
    if not _main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _handlers() -> dict:
    """signum -> the handler each stop would meet now (none outside the main thread)."""
    return {s: signal.getsignal(s) for s in STOPS} if _main_thread() else {}


@contextlib.contextmanager
def deferred():
    """The block runs whole: a Ctrl-C or SIGTERM arriving in it is acted on (by the handler it
    would have met) once the block has ended."""
    # A handler, not pthread_sigmask: the mask is per thread, and a signal that another thread
    # takes still runs its Python handler in the main thread, inside the block.
    stops = Stops({s: h for s, h in _handlers().items() if h is not None})  # None: set in C
    stops._install(holding=True)
    try:
        yield
    finally:
        stops._install(holding=False)
        for signum in dict.fromkeys(stops.noted):
            signal.raise_signal(signum)


class Stops:
    """The Ctrl-C and SIGTERM a block holds (`held`, `deferred`): noted in `noted`, not acted on,
    except within `raising()`."""

    def __init__(self, handlers: dict):
        self.noted: list[int] = []
        self._handlers = handlers  # signum -> the handler it would have met

    def _note(self, signum, frame):
        self.noted.append(signum)

    def _install(self, holding: bool) -> None:
        for signum, handler in self._handlers.items():
            signal.signal(signum, self._note if holding else handler)

    @contextlib.contextmanager
    def raising(self):
        """Within the block a stop is acted on by the handler it would have met (a
        KeyboardInterrupt); one noted already raises KeyboardInterrupt at once."""
        self._install(holding=False)
        try:
            if self.noted:
                raise KeyboardInterrupt
            yield
        finally:
            self._install(holding=True)


@contextlib.contextmanager
def held():
    """A Ctrl-C or SIGTERM in the block is noted in the `Stops` it yields, for its owner to act on
    (`Stops.raising()` excepted); a stop whose handler is not Python's (ignored, the default, one
    set in C) is left to it. The handlers come back when the block ends."""
    stops = Stops({s: h for s, h in _handlers().items() if callable(h)})
    stops._install(holding=True)
    try:
        yield stops
    finally:
        stops._install(holding=False)
