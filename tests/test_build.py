"""The Bazel BUILD file and CMakeLists.txt describe the same targets: the same
sources, and the same compile flags and definitions as CMake's
JAX_ACLNN_NATIVE_ARCH=ON build."""

from __future__ import annotations

import platform
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

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


def bazel_targets() -> dict[str, dict]:
    """BUILD's targets as their attributes, BUILD read as the Python it is
    (its loads replaced by stand-ins)."""
    targets: dict[str, dict] = {}

    def rule(**attrs):
        targets[attrs["name"]] = attrs

    def alias(name, actual):
        targets[name] = targets[actual]

    namespace = {
        "load": lambda *args: None,
        "package": lambda **attrs: None,
        "glob": lambda patterns: sorted(str(p.relative_to(ROOT)) for pattern in patterns
                                        for p in ROOT.glob(pattern)),
        "alias": alias,
    }
    namespace.update(dict.fromkeys(["cc_binary", "cc_library", "nanobind_extension", "py_library"], rule))
    exec(compile((ROOT / "BUILD").read_text(), "BUILD", "exec"), namespace)
    return targets


def cmake_sources(variable: str) -> set[str]:
    """A source list of CMakeLists.txt, its file(GLOB ...) variables expanded."""
    text = (ROOT / "CMakeLists.txt").read_text()
    body = re.search(rf"set\({variable}\s+(.*?)\)", text, re.S).group(1)
    globs = {}  # file(GLOB VAR CONFIGURE_DEPENDS pattern...)
    for name, args in cmake_commands():
        if name == "file" and args[0] == "GLOB":
            patterns = [arg for arg in args[2:] if arg != "CONFIGURE_DEPENDS"]
            globs[f"${{{args[1]}}}"] = {str(p.relative_to(ROOT)) for pattern in patterns for p in ROOT.glob(pattern)}
    return set().union(*(globs.get(word, {word}) for word in body.split()))


def bazel_sources(target: str) -> set[str]:
    return {src for src in bazel_targets()[target]["srcs"] if src.endswith(".cc")}


def test_cmake_asks_for_the_python_that_pyproject_requires():
    """find_package(Python X.Y ...) is pyproject.toml's requires-python floor."""
    required = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    (args,) = [args for name, args in cmake_commands() if name == "find_package" and args[0] == "Python"]
    assert required == f">={args[1]}"


def test_host_provider_sources_agree():
    cmake = cmake_sources("ACLNN_HOST_SOURCES") | cmake_sources("ACLNN_HOST_KERNEL_SOURCES")
    assert bazel_sources("libaclnn_host.so") == cmake


def test_ffi_module_sources_agree():
    assert bazel_sources("_aclnn_ffi") == cmake_sources("ACLNN_FFI_SOURCES")


#: The test-only XLA FFI runtime (CMake option JAX_ACLNN_TESTING; not in BUILD).
TESTING_DIR = ROOT / "csrc" / "testing"
#: The host provider's test hooks, exported only by a JAX_ACLNN_TESTING build.
TESTING_EXPORTS = {"jaxAclnnTestingLastExecute", "jaxAclnnTestingRefuseNextExecute"}


def test_every_header_is_listed_in_bazel():
    listed = {src for target in bazel_targets().values() for src in target.get("srcs", [])}
    for header in (ROOT / "csrc").rglob("*.h"):
        if TESTING_DIR not in header.parents:
            assert str(header.relative_to(ROOT)) in listed, header


def test_every_source_file_is_built():
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.cc")}
    assert on_disk == (cmake_sources("ACLNN_HOST_SOURCES") | cmake_sources("ACLNN_HOST_KERNEL_SOURCES")
                       | cmake_sources("ACLNN_FFI_SOURCES") | cmake_sources("ACLNN_TESTING_SOURCES")
                       | cmake_sources("ACLNN_TEST_PROVIDER_SOURCES")
                       | cmake_sources("ACLNN_TEST_OPERATOR_LIBRARY_SOURCES"))


#: Definitions of CMake options that BUILD leaves off (sanitizers, test hooks),
#: and the package version CMake records in the extension (Bazel's extension
#: records none: its package_version() is None, and import checks only its
#: operator list against the Python's).
CMAKE_ONLY_DEFINES = ("JAX_ACLNN_SANITIZERS", "JAX_ACLNN_TESTING", "JAX_ACLNN_VERSION")


def cmake_native_flags() -> dict[str, dict[str, set[str]]]:
    """The compile "options" and "definitions" CMakeLists.txt gives the two
    libraries in the build BUILD describes: JAX_ACLNN_NATIVE_ARCH=ON (one
    kernel target, "native"), no sanitizers or test hooks."""
    host = {"options": set(), "definitions": set()}
    ffi = {"options": set(), "definitions": set()}
    substitutions = {"${kernel_target}": "native", "${upper}": "NATIVE"}
    in_host_options = False
    for name, args in cmake_commands():
        args = [a for a in args if a != "PRIVATE"]
        wanted = [a for a in args[1:] if not any(d in a for d in CMAKE_ONLY_DEFINES)]
        if name == "function" and args[0] == "aclnn_host_options":
            in_host_options = True
        elif name == "endfunction":
            in_host_options = False
        elif in_host_options and name == "target_compile_options":
            host["options"] |= set(wanted)
        elif in_host_options and name == "target_compile_definitions":
            host["definitions"] |= set(wanted)
        elif in_host_options and name == "set_target_properties" and "CXX_VISIBILITY_PRESET" in args:
            host["options"].add("-fvisibility=" + args[args.index("CXX_VISIBILITY_PRESET") + 1])
        elif name == "set" and args[0] == "kernel_flags_native":
            host["options"] |= set(args[1:])
        elif name == "target_compile_definitions" and any(k in " ".join(args) for k in substitutions):
            for a in wanted:  # the kernel target's own definitions, for "native"
                for k, v in substitutions.items():
                    a = a.replace(k, v)
                host["definitions"].add(a)
        elif name in ("target_compile_options", "target_compile_definitions") and args[0] == "_aclnn_ffi":
            ffi["options" if name.endswith("options") else "definitions"] |= set(wanted)
    return {"aclnn_host": host, "_aclnn_ffi": ffi}


@pytest.mark.parametrize("cmake_target, bazel_target", [
    ("aclnn_host", "libaclnn_host.so"),
    ("_aclnn_ffi", "_aclnn_ffi"),
])
def test_compile_flags_agree(cmake_target, bazel_target):
    """Optimisation flags (the host provider's -O3, -march=native, ...) and
    definitions (the kernel target) of BUILD and of CMake's
    JAX_ACLNN_NATIVE_ARCH=ON build."""
    cmake = cmake_native_flags()[cmake_target]
    bazel = bazel_targets()[bazel_target]
    advice = f"BUILD's {bazel_target} follows CMakeLists.txt's {cmake_target} (JAX_ACLNN_NATIVE_ARCH=ON)"
    assert set(bazel.get("copts", [])) == cmake["options"], advice
    assert set(bazel.get("local_defines", [])) == cmake["definitions"], advice


def host_catalogue() -> dict[str, str]:
    """{aclnn operator: its first phase's prototype} of the catalogue's
    operators the host provider implements (csrc/operators.h's
    JAX_ACLNN_HOST_CATALOGUE_WITH list)."""
    text = (ROOT / "csrc" / "operators.h").read_text()
    body = re.search(r"#define JAX_ACLNN_HOST_CATALOGUE_WITH\(X, A\)(.*?)\n\n", text, re.S).group(1)
    body = re.sub(r"\\\n", " ", body)
    return {f"aclnn{name}": f"aclnnStatus aclnn{name}GetWorkspaceSize({params}, uint64_t "
            f"*workspaceSize, aclOpExecutor **executor)"
            for name, params in re.findall(r"X\(A,\s*(\w+),\s*\((.*?)\)\)", body, re.S)}


def test_the_host_catalogue_has_the_prototypes_jax_aclnn_nn_declares():
    """The host provider implements some of jax_aclnn.nn's declared
    operators (issue 46) with exactly the prototypes they declare."""
    from jax_aclnn import _prototype, nn, optax  # noqa: F401  (declare the catalogue)
    from jax_aclnn._primitive import OPERATORS

    declared = {op.aclnn_name: op.prototype for op in OPERATORS.values()
                if getattr(op, "prototype", None) is not None}
    catalogue = host_catalogue()
    assert set(catalogue) == {"aclnnRmsNorm", "aclnnAddRmsNorm", "aclnnRmsNormGrad",
                              "aclnnSwiGlu", "aclnnSwiGluGrad", "aclnnGroupedMatmulV4",
                              "aclnnRotaryPositionEmbedding",
                              "aclnnRotaryPositionEmbeddingGrad", "aclnnCrossEntropyLoss",
                              "aclnnCrossEntropyLossGrad",
                              "aclnnFlashAttentionScore", "aclnnFlashAttentionScoreGrad",
                              "aclnnApplyAdamW", "aclnnApplyAdamWV2",
                              "aclnnMoeGatingTopKSoftmaxV2", "aclnnMoeTokenPermute",
                              "aclnnMoeTokenPermuteGrad", "aclnnMoeTokenUnpermute",
                              "aclnnMoeTokenUnpermuteGrad"}
    for name, text in catalogue.items():
        ours = [(p.name, p.kind) for p in _prototype.parse(text).parameters]
        assert ours == [(p.name, p.kind) for p in declared[name].parameters], name


def test_host_provider_exports_exactly_the_aclnn_abi():
    from jax_aclnn import _loading, _prototype

    abi = (ROOT / "csrc" / "aclnn_abi.h").read_text()
    declared = set(re.findall(r"X\([^,]+,\s*(acl\w+)\b(?!#)", abi))
    # each operator's two phases, from the operator list's prototypes and
    # the host catalogue's
    for text in [*_loading._aclnn_ffi.operator_prototypes().values(), *host_catalogue().values()]:
        prototype = _prototype.parse(text)
        declared |= {prototype.first_phase, prototype.name}
    out = subprocess.run(["nm", "-D", "--defined-only", str(_loading.HOST_PROVIDER_LIBRARY)],
                         capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if " T " in line}
    assert exported - TESTING_EXPORTS == declared | {"JaxAclnnHostKernelTarget",  # host_stream.h
                                                     "JaxAclnnHostHalfConversions"}


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
def in_namespaces(function, *namespaces):
    """Whether a disassembly header names a function in one of ``namespaces``
    (or in Eigen's copy in each, ``Eigen_<namespace>``: CMakeLists.txt),
    demangled or mangled: binutils' demangler gives up on some templates'
    names, those of generic lambdas among them, and prints them mangled."""
    names = [n for ns in namespaces for n in (ns, f"Eigen_{ns}")]
    return any(re.search(rf"\b{n}::|(?<!\d){len(n)}{n}", function) for n in names)


def disassembly():
    """(function, instruction line) pairs of the installed host provider's
    disassembly, ``function`` being the header line of the function the
    instruction is in; skips a ``JAX_ACLNN_NATIVE_ARCH=ON`` build (one target)."""
    from jax_aclnn import _runtime

    if _runtime.host_kernel_target() == "native":
        pytest.skip("a JAX_ACLNN_NATIVE_ARCH=ON build")
    out = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", str(_runtime.HOST_PROVIDER_LIBRARY)],
                         capture_output=True, text=True, check=True).stdout
    function = ""
    for line in out.splitlines():
        if line.endswith(">:"):
            function = line
        else:
            yield function, line


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 instruction sets")
def test_default_build_runs_on_any_x86_64_cpu_outside_the_dispatched_kernels():
    """The default build targets the x86-64 baseline; code beyond it lives
    only in the kernel copies that dispatch.cc picks when the CPU has it."""
    beyond = {function for function, line in disassembly() if BEYOND_X86_64.search(line)}
    assert any(in_namespaces(f, "x86_64_v3") for f in beyond)  # the dispatched kernels, seen
    assert [f for f in beyond if not in_namespaces(f, "x86_64_v3", "x86_64_v4")] == []


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 instruction sets")
def test_dispatched_kernels_convert_float16_with_the_cpus_instructions():
    """Regression (issue 22): the default build converted float16 with
    portable formulas in every kernel copy unless Highway's headers were
    installed. Now x86-64-v3/v4 use F16C in every build, and say so."""
    from jax_aclnn import _runtime

    found = set()
    for function, line in disassembly():
        copy = next((t for t in ("x86_64_v3", "x86_64_v4", "baseline") if in_namespaces(function, t)), "")
        if copy and (m := re.search(r"\t(vcvtph2ps|vcvtps2ph)\s", line)):
            found.add((copy, m.group(1)))
    target = _runtime.host_kernel_target()
    assert found == {(t, i) for t in ("x86_64_v3", "x86_64_v4") for i in ("vcvtph2ps", "vcvtps2ph")}
    expected = "F16C vcvtph2ps/vcvtps2ph" if target in ("x86-64-v3", "x86-64-v4") else "portable formulas"
    assert _runtime.host_half_conversions() == expected


#: SVE instructions: any with a scalable vector (z0-z31) or predicate (p0-p15)
#: operand, and those reading or stepping by the vector length.
SVE = re.compile(r"\t((cnt|inc|dec|sqinc|sqdec|uqinc|uqdec)[bhwd]|addvl|addpl|rdvl)\s"
                 r"|\t[a-z0-9.]+\s[^<]*\b([zp]\d+)(\.[bhsdq])?\b")


@pytest.mark.skipif(platform.machine() != "aarch64", reason="aarch64 instruction sets")
def test_default_build_runs_on_any_aarch64_cpu_outside_the_dispatched_kernels():
    """The default aarch64 build targets armv8-a (NEON); SVE code lives only
    in the kernel copy that dispatch.cc picks when the CPU has SVE."""
    sve = {function for function, line in disassembly() if SVE.search(line.split("//")[0])}
    assert any(in_namespaces(f, "armv8_2_a_sve") for f in sve)  # the dispatched kernels, seen
    assert [f for f in sve if not in_namespaces(f, "armv8_2_a_sve")] == []


def test_the_python_operators_are_those_of_the_cpp_operator_list():
    """csrc/operators.h is the one list; every Python operator names its
    function and aclnn operator as that list does, and one handler set
    serves every operator's target on both platforms."""
    import jax_aclnn  # noqa: F401  (defines the operators)
    from jax_aclnn._loading import _aclnn_ffi
    from jax_aclnn._primitive import AclnnPrimitive

    python = {op.name: op.aclnn_name for op in AclnnPrimitive.__subclasses__()
              if op.__module__.startswith("jax_aclnn.ops.")}
    assert python == _aclnn_ffi.operators()
    assert set(_aclnn_ffi.registrations()) == {"cpu", "npu"}


def test_every_prototype_parameter_kind_has_an_argument_kind():
    """Each parameter type a prototype may have (jax_aclnn._prototype.KINDS)
    encodes as an argument kind of the compiled handler
    (csrc/ffi/arguments.h), whose codes are distinct."""
    from jax_aclnn import _arguments, _prototype
    from jax_aclnn._loading import _aclnn_ffi

    codes = [code for code, _, _ in _aclnn_ffi.argument_kinds().values()]
    assert len(set(codes)) == len(codes)
    values = {"scalar": 1.5, "bool": True, "int8": 1, "int32": 2, "int64": 3, "double": 0.5,
              "float": 0.25, "int_array": [1], "bool_array": [True], "float_array": [0.5],
              "string": "s", "tensor_list": 2, "tensor": True, "dtype": "float32"}
    for ctype, kind in _prototype.KINDS.items():
        proto = _prototype.parse(f"aclnnXGetWorkspaceSize(const {ctype} p, uint64_t "
                                 f"*workspaceSize, aclOpExecutor **executor)")
        attrs = _arguments.encode(proto, {"p": values[kind]})
        assert list(attrs["kinds"]) and set(attrs["kinds"]) <= set(codes), ctype


def logit_grad_call(**attrs):
    """The custom call of logit_grad (dy / (x (1 - x))) at x = dy = 0.5."""
    import jax
    import jax.numpy as jnp

    x = jnp.full((4,), 0.5, jnp.float32)
    return jax.ffi.ffi_call("aclnn_logit_grad", jax.ShapeDtypeStruct(x.shape, x.dtype))(x, x, **attrs)


def logit_grad_attributes(eps=0.1):
    import jax_aclnn

    return jax_aclnn.ops.primitive("logit_grad").ffi_attributes(eps=eps)


def test_the_handlers_decode_the_argument_list():
    np.testing.assert_array_equal(logit_grad_call(**logit_grad_attributes()),
                                  np.full(4, 2.0, np.float32))


@pytest.mark.parametrize("change", [
    {"epsilon": np.float64(0.1)},                     # one more
    {"kinds": None},                                  # one fewer
    {"ints": np.zeros(1, np.float64)},                # another type
])
def test_the_handlers_refuse_attributes_other_than_theirs(change):
    """A custom call whose attributes differ from the handler's in name, type
    or number fails to decode (INVALID_ARGUMENT), never runs."""
    import jax

    attrs = {**logit_grad_attributes(), **change}
    attrs = {k: v for k, v in attrs.items() if v is not None}
    with pytest.raises(Exception, match="INVALID_ARGUMENT.*(decode|Wrong number of attributes)"):
        jax.block_until_ready(logit_grad_call(**attrs))


@pytest.mark.parametrize("change,message", [
    ({"kinds": np.array([0, 0, 8], np.int64), "floats": np.zeros(0)}, "fewer values"),
    ({"kinds": np.array([0, 8, 1], np.int64)}, "buffers are not those its 'kinds' take"),
    ({"kinds": np.array([0, 8, 1, 1], np.int64)}, "fewer results"),
    ({"kinds": np.array([0, 0, 8, 99], np.int64)}, "unknown argument kind 99"),
    ({"operator": "aclnnNoSuchOperator"}, "does not export aclnnNoSuchOperator"),
])
def test_the_handlers_refuse_an_argument_list_that_does_not_fit(change, message):
    """An argument list that takes more values or buffers than the call has,
    or names an operator the provider lacks, is an error, never a call."""
    import jax

    with pytest.raises(Exception, match=message):
        jax.block_until_ready(logit_grad_call(**{**logit_grad_attributes(), **change}))


#: CPUs a native build (JAX_ACLNN_NATIVE_ARCH=ON, -march=native) may target,
#: beyond the dispatched targets: AVX with F16C but no AVX2 (Ivy Bridge,
#: AMD Piledriver), AVX without F16C (Sandy Bridge), SSE4.2 only (Nehalem),
#: AVX-512 with FP16 and BF16 (Sapphire Rapids).
NATIVE_MARCHES = ["x86-64", "nehalem", "sandybridge", "ivybridge", "bdver2", "haswell",
                  "x86-64-v3", "x86-64-v4", "sapphirerapids"]


def eigen_include() -> str:
    """Eigen's headers as the build finds them (CMakeLists.txt): cmeel-eigen's
    (a build and test requirement in pyproject.toml), else the system's."""
    prefix = subprocess.run([sys.executable, "-m", "cmeel", "cmake"], capture_output=True,
                            text=True).stdout.strip()
    candidates = ([Path(prefix) / "include" / "eigen3"] if prefix else []) + [Path("/usr/include/eigen3")]
    found = [p for p in candidates if (p / "Eigen" / "Core").exists()]
    if not found:
        pytest.fail("Eigen's headers not found: pip install cmeel-eigen (the test extra has it)")
    return str(found[0])


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 instruction sets")
@pytest.mark.parametrize("march", NATIVE_MARCHES)
def test_the_kernels_compile_for_every_x86_64_cpu_a_native_build_may_target(march):
    """The kernels' vector code (csrc/host/simd.h) picks its width and its
    float16 conversions by the instruction sets the compiler targets; every
    combination must compile (an AVX-only CPU once got 256-bit intrinsics on
    a 128-bit vector type). Not gemm.cc: Eigen's instruction-set paths are
    Eigen's (its own tests), and compiling them nine times took 35 s."""
    sources = sorted(cmake_sources("ACLNN_HOST_KERNEL_SOURCES") - {"csrc/host/gemm.cc"})
    out = subprocess.run(
        ["c++", "-std=c++17", "-fsyntax-only", "-fopenmp-simd", f"-march={march}",
         "-I", str(ROOT / "csrc"), "-isystem", eigen_include(), "-DJAX_ACLNN_KERNEL_TARGET=native",
         *(str(ROOT / src) for src in sources)],
        capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
