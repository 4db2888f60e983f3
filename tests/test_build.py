"""The Bazel BUILD file and CMakeLists.txt describe the same targets."""

from __future__ import annotations

import platform
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cmake_sources(variable: str) -> set[str]:
    text = (ROOT / "CMakeLists.txt").read_text()
    body = re.search(rf"set\({variable}\s+(.*?)\)", text, re.S).group(1)
    return set(body.split())


def bazel_sources(target: str) -> set[str]:
    text = (ROOT / "BUILD").read_text()
    block = re.search(rf'name = "{re.escape(target)}",(.*?)\n\)', text, re.S).group(1)
    return set(re.findall(r'"(csrc/[^"]+\.cc)"', block))


def test_host_provider_sources_agree():
    cmake = cmake_sources("ACLNN_HOST_SOURCES") | cmake_sources("ACLNN_HOST_KERNEL_SOURCES")
    assert bazel_sources("libaclnn_host.so") == cmake


def test_ffi_module_sources_agree():
    assert bazel_sources("_aclnn_ffi") == cmake_sources("ACLNN_FFI_SOURCES")


def test_every_header_is_listed_in_bazel():
    text = (ROOT / "BUILD").read_text()
    for header in (ROOT / "csrc").rglob("*.h"):
        assert f'"{header.relative_to(ROOT)}"' in text, header


def test_every_source_file_is_built():
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.cc")}
    assert on_disk == (cmake_sources("ACLNN_HOST_SOURCES") | cmake_sources("ACLNN_HOST_KERNEL_SOURCES")
                       | cmake_sources("ACLNN_FFI_SOURCES"))


def test_host_provider_exports_exactly_the_aclnn_abi():
    from jax_aclnn import _ffi

    abi = (ROOT / "csrc" / "aclnn_abi.h").read_text()
    declared = set(re.findall(r"X\([^,]+,\s*(acl\w+)", abi))
    out = subprocess.run(["nm", "-D", "--defined-only", str(_ffi.HOST_PROVIDER_LIBRARY)],
                         capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if " T " in line}
    assert exported == declared | {"JaxAclnnHostKernelTarget"}  # host_stream.h


#: Instructions beyond the x86-64 baseline (SSE2): every VEX/EVEX-encoded one
#: (AVX, AVX2, FMA, F16C, AVX-512 all start with "v"), SSE3 to SSE4.2, BMI,
#: POPCNT/LZCNT/MOVBE.
BEYOND_X86_64 = re.compile(
    r"\t(v[a-z0-9]+|pshufb|palignr|pabs[bwd]|phadd[wd]|phsub[wd]|pmaddubsw|pmulhrsw|psign[bwd]"
    r"|blendv?p[sd]|pblendvb|pblendw|dpp[sd]|insertps|extractps|pextr[bdq]|pinsr[bdq]"
    r"|pm(ax|in)(s[bd]|u[wd])|pmov[sz]x[bwd][wdq]|pmuldq|pmulld|ptest|round[ps][sd]|packusdw"
    r"|pcmp[eg][qt]q|pcmp[ei]str[im]|movntdqa|crc32|popcnt|lzcnt|tzcnt|andn|bextr|bls(i|msk|r)"
    r"|bzhi|pdep|pext|rorx|sarx|shlx|shrx|mulx|movbe|lddqu|h(add|sub)p[sd]|mov[sd]dup|movshdup"
    r"|movsldup|addsubp[sd])[ \t]")
DISPATCHED = ("::x86_64_v3::", "::x86_64_v4::")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 instruction sets")
def test_default_build_runs_on_any_x86_64_cpu_outside_the_dispatched_kernels():
    """The default build targets the x86-64 baseline; code beyond it lives
    only in the kernel copies that dispatch.cc picks when the CPU has it."""
    from jax_aclnn import _ffi

    if _ffi.host_kernel_target() == "native":
        pytest.skip("a JAX_ACLNN_NATIVE_ARCH=ON build")
    out = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", str(_ffi.HOST_PROVIDER_LIBRARY)],
                         capture_output=True, text=True, check=True).stdout
    beyond, function = set(), ""
    for line in out.splitlines():
        if line.endswith(">:"):
            function = line
        elif BEYOND_X86_64.search(line):
            beyond.add(function)
    assert any("::x86_64_v3::" in f for f in beyond)  # the dispatched kernels, seen
    assert [f for f in beyond if not any(t in f for t in DISPATCHED)] == []


def test_the_python_operators_are_those_of_the_cpp_operator_list():
    """csrc/operators.h is the one list; every Python operator names its
    function and aclnn operator as that list does."""
    import jax_aclnn  # noqa: F401  (defines the operators)
    from jax_aclnn._ffi import _aclnn_ffi
    from jax_aclnn._primitive import AclnnPrimitive

    python = {op.name: op.aclnn_name for op in AclnnPrimitive.__subclasses__()}
    assert python == _aclnn_ffi.operators()
    assert set(_aclnn_ffi.registrations()) == {f"aclnn_{name}" for name in python}
