"""nanobind_extension: a Python extension module built with nanobind.

A small stand-in for @nanobind_bazel's macro of the same name (which needs
the network): a shared library <package_dir>/<name><EXT_SUFFIX> (for example
jax_aclnn/_aclnn_ffi.cpython-311-x86_64-linux-gnu.so), linked with nanobind
statically, with the flags nanobind_add_module() gives it in CMake; `name` is
an alias of it.
"""

load("@local_python//:defs.bzl", "EXTENSION_SUFFIX")

def nanobind_extension(name, package_dir, copts = [], linkopts = [], deps = [], **kwargs):
    library = "%s/%s%s" % (package_dir, name, EXTENSION_SUFFIX)
    native.cc_binary(
        name = library,
        copts = ["-fvisibility=hidden", "-fno-stack-protector"] + select({
            "//bazel:optimized": ["-Os"],
            "//conditions:default": [],
        }) + copts,
        linkopts = select({
            "//bazel:optimized": ["-Wl,-s"],
            "//conditions:default": [],
        }) + linkopts,
        linkshared = True,
        deps = deps + ["@nanobind"],
        **kwargs
    )
    native.alias(name = name, actual = library)
