"""Repository rules: the build inputs that the Python environment provides.

The CMake build asks the Python interpreter for the same things
(CMakeLists.txt): nanobind's directory, jax.ffi.include_dir(), Eigen's
headers (cmeel-eigen's prefix), the Python headers and the extension-module
suffix. The interpreter is
$PYTHON_BIN_PATH, else `python3` on PATH (an active virtual environment's).
"""

_ENVIRON = ["PYTHON_BIN_PATH", "PATH", "VIRTUAL_ENV"]

def _python(rctx):
    path = rctx.os.environ.get("PYTHON_BIN_PATH") or rctx.which("python3")
    if not path:
        fail("No Python interpreter: set PYTHON_BIN_PATH or put python3 on PATH")
    return str(path)

def _ask(rctx, python, code):
    result = rctx.execute([python, "-c", code])
    if result.return_code != 0:
        fail("%s -c %r failed:\n%s" % (python, code, result.stderr))
    return result.stdout.strip()

def _local_python_impl(rctx):
    python = _python(rctx)
    rctx.symlink(_ask(rctx, python, "import sysconfig; print(sysconfig.get_paths()['include'])"), "include")
    suffix = _ask(rctx, python, "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
    rctx.file("BUILD", """\
package(default_visibility = ["//visibility:public"])

# The Python C API headers of {python}.
cc_library(
    name = "headers",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
)
""".format(python = python))
    rctx.file("defs.bzl", """\
\"\"\"Facts about the interpreter {python}.\"\"\"

# The file-name suffix of its extension modules.
EXTENSION_SUFFIX = "{suffix}"
""".format(python = python, suffix = suffix))

local_python = repository_rule(
    implementation = _local_python_impl,
    environ = _ENVIRON,
    local = True,
    doc = "The Python headers and extension suffix of the build's interpreter.",
)

def _nanobind_impl(rctx):
    python = _python(rctx)
    rctx.symlink(_ask(rctx, python, "import nanobind, os; print(os.path.dirname(nanobind.include_dir()))"), "nanobind")
    if not rctx.path("nanobind/ext/robin_map/include/tsl/robin_map.h").exists:
        fail("This nanobind package has no ext/robin_map (pip's nanobind ships it): %s" % rctx.path("nanobind"))
    rctx.symlink(rctx.attr.build_file, "BUILD")

nanobind_from_python = repository_rule(
    implementation = _nanobind_impl,
    attrs = {"build_file": attr.label(allow_single_file = True, mandatory = True)},
    environ = _ENVIRON,
    local = True,
    doc = "nanobind's sources, from the nanobind package the interpreter imports.",
)

def _xla_ffi_headers_impl(rctx):
    python = _python(rctx)
    rctx.symlink(_ask(rctx, python, "import jax; print(jax.ffi.include_dir())"), "include")
    rctx.file("BUILD", """\
package(default_visibility = ["//visibility:public"])

# XLA's FFI API headers, as shipped by jaxlib (jax.ffi.include_dir()).
cc_library(
    name = "ffi",
    hdrs = glob(["include/xla/ffi/api/*.h"]),
    includes = ["include"],
)
""")

xla_ffi_headers_from_jax = repository_rule(
    implementation = _xla_ffi_headers_impl,
    environ = _ENVIRON,
    local = True,
    doc = "XLA's FFI headers, from the jax the interpreter imports.",
)

def _eigen_impl(rctx):
    python = _python(rctx)
    result = rctx.execute([python, "-m", "cmeel", "cmake"])
    if result.return_code != 0:
        fail("%s -m cmeel cmake failed (pip install cmeel-eigen, a build requirement in pyproject.toml):\n%s" % (python, result.stderr))
    rctx.symlink(result.stdout.strip() + "/include/eigen3/Eigen", "Eigen")
    rctx.file("BUILD", """\
package(default_visibility = ["//visibility:public"])

# Eigen's headers (header-only), from the cmeel-eigen package of {python}.
cc_library(
    name = "eigen",
    hdrs = glob(["Eigen/**"]),
    includes = ["."],
)
""".format(python = python))

eigen_from_python = repository_rule(
    implementation = _eigen_impl,
    environ = _ENVIRON,
    local = True,
    doc = "Eigen's headers, from the cmeel-eigen package the interpreter imports.",
)
