"""The Bazel BUILD file and CMakeLists.txt describe the same targets: the same
sources, and the same compile flags and definitions under CMake's default
options, with and without Highway."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# CMake conditions that are neither an option() nor a variable set in
# CMakeLists.txt, with their value on the machines BUILD targets (a GCC or
# Clang toolchain). A new condition in CMakeLists.txt goes here.
CMAKE_CONDITIONS = {"JAX_ACLNN_HAS_MARCH_NATIVE": True}


def cmake_commands() -> list[tuple[str, list[str]]]:
    """CMakeLists.txt as (command, arguments), comments dropped, quotes kept."""
    text = re.sub(r"#[^\n]*", "", (ROOT / "CMakeLists.txt").read_text())
    commands = []
    for match in re.finditer(r"(\w+)\s*\(", text):
        if commands and match.start() < commands[-1][2]:
            continue  # inside the previous command's arguments
        depth, end = 1, match.end()
        while depth:
            end = re.search(r'"[^"]*"|[()]', text[end:]).end() + end
            depth += {"(": 1, ")": -1}.get(text[end - 1], 0)
        args = re.findall(r'"[^"]*"|[^\s()"]+', text[match.end():end - 1])
        commands.append((match.group(1).lower(), args, end))
    return [(name, args) for name, args, _ in commands]


def cmake_true(value: str) -> bool:
    """CMake's truth value of a constant or a variable's value."""
    value = value.strip('"').upper()
    return value not in ("", "0", "OFF", "NO", "FALSE", "N", "IGNORE", "NOTFOUND") and not value.endswith("-NOTFOUND")


def cmake_target_flags(highway: bool) -> dict[str, dict[str, set[str]]]:
    """Per target, the compile "options" and "definitions" CMakeLists.txt
    gives it with default options, Highway's headers found or not."""
    values = dict(CMAKE_CONDITIONS)
    flags: dict[str, dict[str, set[str]]] = {}
    branches: list[list[bool]] = []  # per open if(): [taking this branch, taken one]

    def condition(args: list[str]) -> bool:
        negate = args[:1] == ["NOT"]
        if negate:
            args = args[1:]
        assert len(args) == 1, f"tests/test_build.py: teach cmake_target_flags() if({' '.join(args)})"
        return values.get(args[0], False) != negate

    for name, args in cmake_commands():
        if name == "if":
            branches.append([condition(args)] * 2)
        elif name == "elseif":
            branches[-1] = [not branches[-1][1] and condition(args), branches[-1][1] or condition(args)]
        elif name == "else":
            branches[-1] = [not branches[-1][1], True]
        elif name == "endif":
            branches.pop()
        elif not all(taking for taking, _ in branches):
            continue
        elif name == "option":
            values[args[0]] = cmake_true(args[-1])
        elif name == "set":
            values[args[0]] = len(args) > 1 and cmake_true(args[1])
        elif name == "find_path" and args[0] == "HWY_INCLUDE_DIR":
            values[args[0]] = highway
        elif name in ("target_compile_options", "target_compile_definitions"):
            kind = "options" if name.endswith("options") else "definitions"
            flags.setdefault(args[0], {}).setdefault(kind, set()).update(args[2:])
        elif name == "set_target_properties" and "CXX_VISIBILITY_PRESET" in args:
            visibility = args[args.index("CXX_VISIBILITY_PRESET") + 1]
            flags.setdefault(args[0], {}).setdefault("options", set()).add(f"-fvisibility={visibility}")
    return flags


def bazel_targets(highway: bool) -> dict[str, dict]:
    """BUILD's targets as their attributes, BUILD read as the Python it is
    (its loads replaced by stand-ins), Highway's headers found or not."""
    targets: dict[str, dict] = {}

    def rule(**attrs):
        targets[attrs["name"]] = attrs

    def alias(name, actual):
        targets[name] = targets[actual]

    namespace = {
        "load": lambda *args: None,
        "package": lambda **attrs: None,
        "glob": lambda *args, **kwargs: [],
        "alias": alias,
        "HAVE_HIGHWAY": highway,
    }
    namespace.update(dict.fromkeys(["cc_binary", "cc_library", "nanobind_extension", "py_library"], rule))
    exec(compile((ROOT / "BUILD").read_text(), "BUILD", "exec"), namespace)
    return targets


def cmake_sources(variable: str) -> set[str]:
    text = (ROOT / "CMakeLists.txt").read_text()
    body = re.search(rf"set\({variable}\s+(.*?)\)", text, re.S).group(1)
    return set(body.split())


def bazel_sources(target: str) -> set[str]:
    return {src for src in bazel_targets(highway=True)[target]["srcs"] if src.endswith(".cc")}


def test_host_provider_sources_agree():
    assert bazel_sources("libaclnn_host.so") == cmake_sources("ACLNN_HOST_SOURCES")


def test_ffi_module_sources_agree():
    assert bazel_sources("_aclnn_ffi") == cmake_sources("ACLNN_FFI_SOURCES")


#: The test-only XLA FFI runtime (CMake option JAX_ACLNN_TESTING; not in BUILD).
TESTING_DIR = ROOT / "csrc" / "testing"
#: The host provider's test hooks, exported only by a JAX_ACLNN_TESTING build.
TESTING_EXPORTS = {"jaxAclnnTestingLastExecute", "jaxAclnnTestingRefuseNextExecute"}


def test_every_header_is_listed_in_bazel():
    listed = {src for target in bazel_targets(highway=True).values() for src in target.get("srcs", [])}
    for header in (ROOT / "csrc").rglob("*.h"):
        if TESTING_DIR not in header.parents:
            assert str(header.relative_to(ROOT)) in listed, header


def test_every_source_file_is_built():
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.cc")}
    assert on_disk == (cmake_sources("ACLNN_HOST_SOURCES") | cmake_sources("ACLNN_FFI_SOURCES")
                       | cmake_sources("ACLNN_TESTING_SOURCES"))


@pytest.mark.parametrize("highway", [True, False], ids=["highway", "no-highway"])
@pytest.mark.parametrize("cmake_target, bazel_target", [
    ("aclnn_host", "libaclnn_host.so"),
    ("_aclnn_ffi", "_aclnn_ffi"),
])
def test_compile_flags_agree(cmake_target, bazel_target, highway):
    """Optimisation flags (the host provider's -O3, -march=native, ...) and
    definitions (the Highway flags that build_info() reports)."""
    cmake = cmake_target_flags(highway)[cmake_target]
    bazel = bazel_targets(highway)[bazel_target]
    advice = f"BUILD's {bazel_target} follows CMakeLists.txt's {cmake_target} (defaults)"
    assert set(bazel.get("copts", [])) == cmake.get("options", set()), advice
    assert set(bazel.get("local_defines", [])) == cmake.get("definitions", set()), advice


def test_host_provider_exports_exactly_the_aclnn_abi():
    import subprocess

    from jax_aclnn import _ffi

    abi = (ROOT / "csrc" / "aclnn_abi.h").read_text()
    declared = set(re.findall(r"X\([^,]+,\s*(acl\w+)", abi))
    out = subprocess.run(["nm", "-D", "--defined-only", str(_ffi.HOST_PROVIDER_LIBRARY)],
                         capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if " T " in line}
    assert exported - TESTING_EXPORTS == declared
