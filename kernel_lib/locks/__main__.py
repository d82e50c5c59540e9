"""`make lock` and `make lock-check` (python -m kernel_lib.locks [--check] [--upgrade] [NAME...]):
the locks resolved again from their inputs, or what is wrong with them and with this venv."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernel_lib import ROOT
from kernel_lib.locks.files import LOCKS, LockError, lock_path, read_lock
from kernel_lib.locks.installed import differences, extras, installed_lock, installed_versions
from kernel_lib.locks.resolve import check_locks, make_locks


def venv_problems(root: Path = ROOT) -> list[str]:
    """This environment against the lock it was installed from and that lock's file today."""
    installed = installed_lock()
    if installed is None:
        return [f"{sys.prefix}: not installed from a lock (make setup)"]
    name = installed.stem
    if name not in LOCKS:
        return [f"{sys.prefix}: installed from {name!r}, which is no lock of {root}/locks"]
    if installed.read_bytes() != lock_path(LOCKS[name], root).read_bytes():
        return [f"{sys.prefix}: installed from an earlier {LOCKS[name].path} (make setup)"]
    lines = differences(read_lock(installed), installed_versions())
    return [f"{sys.prefix} differs from {LOCKS[name].path}: {line}" for line in lines]


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernel_lib.locks", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"locks to resolve: {', '.join(LOCKS)} (all)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on a finding")
    parser.add_argument("--upgrade", action="store_true", help="the newest versions allowed")
    parser.add_argument(
        "--extras", type=Path, metavar="LOCK", help="print what is installed and not in LOCK"
    )
    args = parser.parse_args(argv)
    try:
        if unknown := [n for n in args.names if n not in LOCKS]:
            raise ValueError(f"no lock named {unknown[0]!r}: choose from {', '.join(LOCKS)}")
        if args.extras:
            print("\n".join(extras(read_lock(args.extras), installed_versions())))
            return 0
        if args.check:
            problems = check_locks(root) + venv_problems(root)
        else:
            problems = make_locks(args.names or list(LOCKS), root, upgrade=args.upgrade)
    except (LockError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for line in problems:
        print(line, file=sys.stderr)
    if args.check and not problems:
        print(f"lock-check: {len(LOCKS)} locks up to date and agreeing; {sys.prefix} is locked")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
