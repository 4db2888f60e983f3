"""Repository rule: Highway's headers from the system, when installed.

Mirrors CMakeLists.txt's find_path(HWY_INCLUDE_DIR hwy/highway.h): looks in
/usr/include and /usr/local/include (Debian/Ubuntu: libhwy-dev), or only in
$HWY_INCLUDE_DIR when that is set (as CMake's -DHWY_INCLUDE_DIR=...; a
directory without Highway turns it off). defs.bzl says whether they were
found; BUILD uses that to pick the same compile definitions as CMake, so
without Highway the host provider falls back to its portable float16
conversions.
"""

def _system_highway_impl(rctx):
    given = rctx.os.environ.get("HWY_INCLUDE_DIR")
    candidates = [given] if given != None else ["/usr/include", "/usr/local/include"]
    found = [d for d in candidates if rctx.path(d + "/hwy/highway.h").exists]
    if found:
        rctx.symlink(found[0] + "/hwy", "include/hwy")
    rctx.file("BUILD", """\
package(default_visibility = ["//visibility:public"])

# Highway's headers ({where}); used header-only with the static target.
cc_library(
    name = "hwy",
    hdrs = {hdrs},
    includes = ["include"],
)
""".format(
        where = found[0] if found else "not found",
        hdrs = 'glob(["include/hwy/**/*.h"])' if found else "[]",
    ))
    rctx.file("defs.bzl", """\
\"\"\"Whether the system has Highway's headers.\"\"\"

HAVE_HIGHWAY = {}
""".format(bool(found)))

system_highway = repository_rule(
    implementation = _system_highway_impl,
    environ = ["HWY_INCLUDE_DIR"],
    local = True,
    doc = "Highway's headers from the system (libhwy-dev), or an empty library.",
)
