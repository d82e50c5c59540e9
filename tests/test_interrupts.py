"""kernel_lib.interrupts: SIGTERM stops as Ctrl-C does, a deferred block is never cut in two by
either (the signal is acted on once it ends, by the handler it would have met), and a held block
notes them, acting on them only within its `raising()`."""

import os
import signal
import threading

import pytest

from kernel_lib.interrupts import deferred, held, terminate_as_interrupt


def test_sigterm_is_a_keyboard_interrupt_in_the_block_only():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        with terminate_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_in_a_deferred_block_is_acted_on_after_it(signum, ctrl_c):
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


@pytest.fixture
def ctrl_c():
    """SIGINT raises KeyboardInterrupt for the test, even where pytest was started with it
    ignored (a shell's `&`)."""
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, handler)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_held_stop_is_noted_not_raised_and_the_handlers_come_back(ctrl_c, signum):
    with terminate_as_interrupt():
        before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        with held() as stops:
            os.kill(os.getpid(), signum)
            done = "the block ran on"
        assert stops.noted == [signum] and done
        assert {s: signal.getsignal(s) for s in before} == before


def test_a_stop_within_raising_is_acted_on_and_one_noted_before_raises_at_once(ctrl_c):
    with held() as stops:
        with pytest.raises(KeyboardInterrupt), stops.raising():
            os.kill(os.getpid(), signal.SIGINT)
            pytest.fail("not acted on")
        assert stops.noted == []  # acted on, not noted
        os.kill(os.getpid(), signal.SIGINT)  # held again once raising() has ended
        with pytest.raises(KeyboardInterrupt), stops.raising():
            pytest.fail("started although a stop was noted")
    assert stops.noted == [signal.SIGINT]


def test_an_ignored_sigint_stays_ignored_in_a_held_block():
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with held() as stops, stops.raising():
            os.kill(os.getpid(), signal.SIGINT)
        assert stops.noted == [] and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, handler)
