"""The locks: read back, agreeing, stale against an input (uv resolves: needs PyPI, as `make
lock-check` does), and the environment a run names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernel_lib import ROOT
from kernel_lib.locks import LOCKS, Lock, LockError, LockState, Pin, lock_state, read_lock
from kernel_lib.locks import __main__ as cli
from kernel_lib.locks.installed import differences
from kernel_lib.locks.resolve import disagreements, make_locks, stale

HASH = "sha256:" + "0" * 64


@pytest.fixture
def locks(tmp_path):
    """LOCKS holding only `tmp_path`'s two small locks (its `a.in` and `b.in`), for the test."""
    saved = dict(LOCKS)
    LOCKS.clear()
    LOCKS.update(
        a=Lock("a", "a.in", "x86_64-manylinux_2_28"),
        b=Lock("b", "b.in", "x86_64-manylinux_2_28", free=("six",)),
    )
    (tmp_path / "locks").mkdir()
    yield tmp_path
    LOCKS.clear()
    LOCKS.update(saved)


def _write(path: Path, pins: dict[str, str]) -> None:
    path.write_text(
        "".join(f"{n}=={v} \\\n    --hash={HASH}\n    # via x\n" for n, v in pins.items())
    )


def test_a_lock_reads_back_as_pins_with_their_hashes(tmp_path):
    path = tmp_path / "l.txt"
    path.write_text(
        f"# header\nTyping_Extensions==4.15.0 \\\n    --hash={HASH} \\\n    --hash=sha256:1\n"
    )
    assert read_lock(path) == {"typing-extensions": Pin("4.15.0", frozenset({HASH, "sha256:1"}))}
    path.write_text("six>=1\n")
    with pytest.raises(LockError, match=r"l\.txt:1: not a pin"):
        read_lock(path)


def test_every_lock_pins_every_package_with_a_hash_and_they_agree():
    for lock in LOCKS.values():
        pins = read_lock(ROOT / lock.path)
        assert pins and all(pin.hashes for pin in pins.values()), lock.name
    assert disagreements() == []
    cpu, cuda, macos = (read_lock(ROOT / LOCKS[n].path) for n in ("cpu", "cuda", "macos"))
    assert cpu["torch"].version.endswith("+cpu") and cuda["torch"].version == "2.13.0"
    assert not any(n.startswith("nvidia-") for n in cpu) and "nvidia-cublas" in cuda
    assert "triton" not in macos and macos["torch"].version == "2.13.0"


def test_two_locks_pinning_a_shared_package_apart_disagree_unless_one_may(locks):
    _write(locks / "locks/a.txt", {"tabulate": "0.9.0", "six": "1.16.0", "torch": "2.13.0+cpu"})
    _write(locks / "locks/b.txt", {"tabulate": "0.8.10", "six": "1.15.0", "torch": "2.13.0"})
    assert disagreements(locks) == ["tabulate: 0.9.0 in locks/a.txt, 0.8.10 in locks/b.txt"]


def test_a_stale_lock_or_an_input_ahead_of_its_lock_is_named_by_package(locks, capsys):
    (locks / "a.in").write_text("tabulate==0.9.0\n")
    (locks / "b.in").write_text("tabulate\n")
    assert make_locks(["a", "b"], locks) == []
    assert read_lock(locks / "locks/b.txt")["tabulate"].version == "0.9.0"  # kept a's pin
    assert stale(LOCKS["a"], locks) == []
    lock, made = locks / "locks/a.txt", (locks / "locks/a.txt").read_text()
    lock.write_text(made.replace("tabulate==0.9.0", "tabulate==0.8.10"))
    assert any(
        "tabulate: 0.8.10 in the lock, 0.9.0 resolved" in p for p in stale(LOCKS["a"], locks)
    )
    lock.write_text(made)
    (locks / "b.in").write_text("tabulate\nsix\n")
    found = stale(LOCKS["b"], locks)
    assert len(found) == 1 and re.search(
        r"six [\d.]+: in b\.in's closure, not in the lock", found[0]
    )
    assert cli.main(["--check"], root=locks) == 1
    assert "six" in capsys.readouterr().err


def test_the_environment_names_its_lock_and_what_differs():
    assert LockState(None, None).label == "no lock"
    assert LockState("cpu", "1a2b3c4d5e6f").label == "cpu 1a2b3c4d5e6f, locked"
    assert LockState("cpu", "1a2b3c4d5e6f", ("x", "y")).label.endswith(
        "2 packages differ from the lock"
    )
    pins = {"six": Pin("1.16.0", frozenset()), "tabulate": Pin("0.9.0", frozenset())}
    assert differences(pins, {"six": "1.16.0", "pip": "23.2", "extra": "1"}) == [
        "tabulate not installed (lock: 0.9.0)",
        "extra 1 (not in the lock)",
    ]


def test_this_venv_is_the_lock_it_was_installed_from():
    state = lock_state()
    if state.name is None:
        pytest.skip("this Python's environment was not installed by make setup")
    assert state.name in LOCKS and state.differs == (), state.differs
    assert re.fullmatch(r"\w+ [0-9a-f]{12}, locked", state.label)
