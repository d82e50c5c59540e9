"""The two sides of `ab` as commits and git worktrees of this repository.

A revision is anything `git rev-parse` takes, or WORKTREE: the working tree as it is now (tracked
and untracked files that git does not ignore), written as a commit object that no branch points at,
with a fixed author and date, so the same files give the same commit. Git's objects are all it adds
to the repository: the user's index, branches and files stay as they are.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from kernel_lib.params import ParameterError

WORKTREE = "WORKTREE"
SNAPSHOT_IDENTITY = {
    **{f"GIT_{who}_NAME": "kernel_lib ab" for who in ("AUTHOR", "COMMITTER")},
    **{f"GIT_{who}_EMAIL": "ab@kernel-workbook.invalid" for who in ("AUTHOR", "COMMITTER")},
    **{f"GIT_{who}_DATE": "2000-01-01T00:00:00+0000" for who in ("AUTHOR", "COMMITTER")},
}


def _git(repo: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


def git(repo: Path, *args: str, env: dict | None = None, check: bool = True) -> str:
    """`git -C repo args` and its stdout ('' when it fails and not `check`); OSError with git's
    message when it fails and `check`."""
    proc = _git(repo, *args, env=env)
    if check and proc.returncode != 0:
        message = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        raise OSError(f"git {' '.join(args[:2])}: {message}")
    return proc.stdout.strip() if proc.returncode == 0 else ""


def snapshot(repo: Path) -> str:
    """The working tree as a commit: HEAD when the files are HEAD's, else a snapshot commit on
    top of HEAD. Staged in a copy of the index, so the user's index is untouched."""
    head = git(repo, "rev-parse", "--verify", "HEAD^{commit}")
    with tempfile.TemporaryDirectory(prefix="kernel-workbook-ab-") as tmp:
        index = Path(tmp) / "index"
        real = repo / git(repo, "rev-parse", "--git-path", "index")
        if real.exists():
            shutil.copyfile(real, index)  # its file stamps spare hashing unchanged files
        env = {"GIT_INDEX_FILE": str(index)}
        git(repo, "read-tree", "HEAD", env=env)
        git(repo, "add", "--all", "--", ".", env=env)
        tree = git(repo, "write-tree", env=env)
    if tree == git(repo, "rev-parse", "HEAD^{tree}"):
        return head
    message = "kernel_lib ab: the working tree"
    return git(
        repo,
        "commit-tree",
        "--no-gpg-sign",
        "-p",
        head,
        "-m",
        message,
        tree,
        env=SNAPSHOT_IDENTITY,
    )


def resolve(repo: Path, revision: str, name: str) -> str:
    """The full commit id of `revision` (WORKTREE: snapshot); ParameterError naming `name` (the
    argument) when it is none."""
    if not git(repo, "rev-parse", "--git-dir", check=False):
        raise ParameterError(f"{name} {revision!r}: {repo} is not a git checkout")
    if revision == WORKTREE:
        return snapshot(repo)
    commit = git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}", check=False)
    if not commit or revision.startswith("-"):
        raise ParameterError(
            f"{name} {revision!r}: not a revision of {repo} (a commit, branch or tag; "
            f"{WORKTREE}: the working tree)"
        )
    return commit


def read(repo: Path, commit: str, path: str) -> str | None:
    """The text of `path` at `commit`, None when it has no such file."""
    proc = _git(repo, "cat-file", "-p", f"{commit}:{path}")
    return proc.stdout if proc.returncode == 0 else None


def _worktrees(repo: Path) -> set[Path]:
    listed = git(repo, "worktree", "list", "--porcelain").splitlines()
    return {
        Path(line.split(" ", 1)[1]).resolve() for line in listed if line.startswith("worktree ")
    }


def checked_out(repo: Path, commit: str, path: Path) -> Path:
    """`path` as a clean worktree of `commit`: made when missing, reused when it is one (a run that
    was interrupted); ParameterError when it is something else or has changes, which may be
    someone's work."""
    if path.exists():
        if path.resolve() not in _worktrees(repo) or git(path, "rev-parse", "HEAD") != commit:
            raise ParameterError(f"{path} is not the ab worktree of {commit[:12]}: move it away")
        if git(path, "status", "--porcelain"):
            raise ParameterError(
                f"{path}, the worktree of {commit[:12]}, has changes and must be clean to run: "
                f"take them out (`git -C {path} status`) or remove it (`git worktree remove "
                f"--force {path}`)"
            )
        return path
    git(repo, "worktree", "prune")  # a worktree folder deleted by hand leaves its registration
    path.parent.mkdir(parents=True, exist_ok=True)
    git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
    return path


def remove(repo: Path, path: Path) -> str:
    """Remove the worktree `path` unless it has changes (then it stays): '' or why it stayed."""
    if not path.exists():
        return ""
    proc = _git(repo, "worktree", "remove", str(path))
    return "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["?"])[-1]
