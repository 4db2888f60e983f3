# Cross-compiling for aarch64 Linux on another Linux host with Debian's
# g++-aarch64-linux-gnu (.ci/aarch64, .ci/wheels). The target Python's headers
# and extension suffix come from the caller (scikit-build-core: the cache
# variable Python_INCLUDE_DIR, the environment's SETUPTOOLS_EXT_SUFFIX and
# _PYTHON_HOST_PLATFORM); the XLA FFI and nanobind sources come from the
# host's Python, being the same on every architecture.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
