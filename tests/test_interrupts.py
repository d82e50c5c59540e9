"""kernel_lib.interrupts: SIGTERM stops as Ctrl-C does, and a deferred block is never cut in two
by either (the signal is acted on once it ends, by the handler it would have met)."""

import os
import signal
import threading

import pytest

from kernel_lib.interrupts import deferred, terminate_as_interrupt


def test_sigterm_is_a_keyboard_interrupt_in_the_block_only():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        with terminate_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_in_a_deferred_block_is_acted_on_after_it(signum):
    done = []
    with pytest.raises(KeyboardInterrupt):
        with terminate_as_interrupt(), deferred():
            os.kill(os.getpid(), signum)
            done.append("first")
            done.append("second")  # not cut between the two
    assert done == ["first", "second"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_deferred_block_without_a_signal_changes_nothing():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with deferred():
        pass
    assert {s: signal.getsignal(s) for s in before} == before


def test_outside_the_main_thread_both_are_no_ops():
    seen = []

    def body():
        with terminate_as_interrupt(), deferred():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [signal.getsignal(signal.SIGTERM)]
