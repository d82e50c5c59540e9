"""The environments' locks: `locks/<name>.txt` resolved with hashes by uv from the
requirements files (`make lock`), installed by `make setup`, checked by `make lock-check`, and
named in every run's environment."""

from kernel_lib.locks.files import LOCKS, Lock, LockError, Pin, canonical, digest, read_lock
from kernel_lib.locks.installed import LockState, installed_lock, lock_state

__all__ = [
    # the lock files
    "LOCKS", "Lock", "LockError", "Pin", "canonical", "digest", "read_lock",
    # this environment against its lock
    "LockState", "installed_lock", "lock_state",
]  # fmt: skip
