"""A run's console shows its progress and results, not the kernel library's noise: the notebook
kernel listens on Unix sockets in a private folder, so ipykernel has no TCP warning to print."""

import os

import pytest

from kernel_lib.run.execute import execute, kernel_config


@pytest.mark.skipif(os.name != "posix", reason="Unix sockets only")
def test_a_run_prints_no_tcp_warning_and_leaves_no_sockets(tmp_path, write_notebook, capfd):
    notebook = write_notebook(tmp_path / "hello.ipynb", "print(n + 1)")
    out = tmp_path / "report"
    out.mkdir()
    result = execute(notebook, out / "hello.ipynb", {"n": 41}, timeout=60, progress=False)
    console = "".join(capfd.readouterr())  # the kernel writes to the file descriptors it inherits
    assert result.status == "ok", result
    assert "without encryption" not in console and "Kernel is running over TCP" not in console
    assert [p.name for p in out.iterdir()] == ["hello.ipynb"]  # no kernel-ipc-* in the report


@pytest.mark.skipif(os.name != "posix", reason="Unix sockets only")
def test_the_kernel_sockets_lie_in_the_folder_given(tmp_path):
    config = kernel_config(tmp_path)
    assert config.KernelManager.transport == "ipc"
    assert config.KernelManager.ip == str(tmp_path / "kernel")
