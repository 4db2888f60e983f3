"""The Bazel BUILD file and CMakeLists.txt describe the same targets."""

from __future__ import annotations

import re
from pathlib import Path

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
    assert bazel_sources("libaclnn_host.so") == cmake_sources("ACLNN_HOST_SOURCES")


def test_ffi_module_sources_agree():
    assert bazel_sources("_aclnn_ffi") == cmake_sources("ACLNN_FFI_SOURCES")


#: The test-only XLA FFI runtime (CMake option JAX_ACLNN_TESTING; not in BUILD).
TESTING_DIR = ROOT / "csrc" / "testing"
#: The host provider's test hooks, exported only by a JAX_ACLNN_TESTING build.
TESTING_EXPORTS = {"jaxAclnnTestingLastExecute", "jaxAclnnTestingRefuseNextExecute"}


def test_every_header_is_listed_in_bazel():
    text = (ROOT / "BUILD").read_text()
    for header in (ROOT / "csrc").rglob("*.h"):
        if TESTING_DIR not in header.parents:
            assert f'"{header.relative_to(ROOT)}"' in text, header


def test_every_source_file_is_built():
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.cc")}
    assert on_disk == (cmake_sources("ACLNN_HOST_SOURCES") | cmake_sources("ACLNN_FFI_SOURCES")
                       | cmake_sources("ACLNN_TESTING_SOURCES"))


def test_host_provider_exports_exactly_the_aclnn_abi():
    import subprocess

    from jax_aclnn import _ffi

    abi = (ROOT / "csrc" / "aclnn_abi.h").read_text()
    declared = set(re.findall(r"X\([^,]+,\s*(acl\w+)", abi))
    out = subprocess.run(["nm", "-D", "--defined-only", str(_ffi.HOST_PROVIDER_LIBRARY)],
                         capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if " T " in line}
    assert exported - TESTING_EXPORTS == declared
