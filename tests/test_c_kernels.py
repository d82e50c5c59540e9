"""The C kernels' build: once per source, flags, compiler and CPU; Unsupported with the
compiler's own message, or without a compiler."""

import pytest

from kernel_lib import c_kernels
from kernel_lib.checks import Unsupported
from kernel_lib.fp8.quantize_c import SOURCE


def test_built_once_per_cpu_and_compiler(monkeypatch):
    flags = c_kernels.flags()
    key = c_kernels.build_key(SOURCE, "cc", flags)
    assert key == c_kernels.build_key(SOURCE, "cc", flags)
    monkeypatch.setattr(c_kernels, "cpu", lambda: "another CPU amx_bf16")
    assert c_kernels.build_key(SOURCE, "cc", flags) != key
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    if c_kernels.is_x86():
        assert "-march=x86-64-v3" in c_kernels.flags()


def test_no_compiler_is_unsupported(monkeypatch, tmp_path):
    monkeypatch.setenv(c_kernels.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(c_kernels.shutil, "which", lambda name: None)
    with pytest.raises(Unsupported, match="c_quantize: no C compiler"):
        c_kernels.build(SOURCE, "c_quantize")


def test_a_build_error_is_unsupported_with_the_compilers_message(monkeypatch, tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("this is not C\n")
    monkeypatch.setenv(c_kernels.CACHE_ENV, str(tmp_path))
    with pytest.raises(Unsupported, match=r"bad: cc could not build it: \S*bad\.c:1:\d+: error"):
        c_kernels.build(bad, "bad")
    assert not list(tmp_path.glob("*.so"))
