// Linked into each library of a JAX_ACLNN_MANYLINUX=ON build (CMakeLists.txt,
// .ci/wheels), so that a build on a new glibc runs on glibc 2.17+ (aarch64)
// or 2.2.5+ (x86-64) as far as these symbols go, and the wheel gets an older
// manylinux tag than the build machine's glibc.
//
// A glibc 2.34+ toolchain binds these functions at the versions of their
// move from libdl/libpthread into libc (GLIBC_2.32/2.34), the maths ones at
// their 2.29 versions, and the statically
// linked libstdc++ (-static-libstdc++: its GLIBCXX_3.4.29 is newer than
// old distributions ship) needs fstat64 (2.33) and arc4random (2.36). The
// definitions here, hidden, take every reference in the library (its own
// code's and libstdc++'s) and forward to the symbols' original versions,
// which every later glibc still provides. The prototypes are glibc's, with
// no headers included (they would declare the same names).
#include <cstddef>
#include <cstdint>

#if defined(__x86_64__)
#define JAX_ACLNN_GLIBC_BASE "GLIBC_2.2.5"
#define JAX_ACLNN_STAT_VER 1
#elif defined(__aarch64__)
#define JAX_ACLNN_GLIBC_BASE "GLIBC_2.17"
#define JAX_ACLNN_STAT_VER 0
#else
#error "JAX_ACLNN_MANYLINUX: x86-64 and aarch64 only"
#endif

// Defines `name` (hidden) to call `old_name`, the original-version symbol
// `old_name` of glibc.
#define JAX_ACLNN_FORWARD(ret, name, old_name, params, args)                             \
  extern "C" ret jax_aclnn_old_##name params;                                            \
  __asm__(".symver jax_aclnn_old_" #name "," #old_name "@" JAX_ACLNN_GLIBC_BASE);        \
  extern "C" __attribute__((visibility("hidden"))) ret name params {                     \
    return jax_aclnn_old_##name args;                                                    \
  }

JAX_ACLNN_FORWARD(void*, dlopen, dlopen, (const char* file, int mode), (file, mode))
JAX_ACLNN_FORWARD(void*, dlsym, dlsym, (void* handle, const char* name), (handle, name))
JAX_ACLNN_FORWARD(char*, dlerror, dlerror, (), ())
JAX_ACLNN_FORWARD(int, dlclose, dlclose, (void* handle), (handle))
JAX_ACLNN_FORWARD(int, dladdr, dladdr, (const void* addr, void* info), (addr, info))
// exp, log and pow gained new versions in glibc 2.29 (the test provider's
// double-precision kernels call them).
JAX_ACLNN_FORWARD(double, exp, exp, (double x), (x))
JAX_ACLNN_FORWARD(double, log, log, (double x), (x))
JAX_ACLNN_FORWARD(double, pow, pow, (double x, double y), (x, y))
JAX_ACLNN_FORWARD(int, pthread_getattr_np, pthread_getattr_np, (unsigned long thread, void* attr),
                  (thread, attr))
JAX_ACLNN_FORWARD(int, pthread_attr_getstack, pthread_attr_getstack,
                  (const void* attr, void** addr, size_t* size), (attr, addr, size))
JAX_ACLNN_FORWARD(int, pthread_once, pthread_once, (int* once, void (*init)()), (once, init))
JAX_ACLNN_FORWARD(int, __pthread_key_create, __pthread_key_create,
                  (unsigned* key, void (*destroy)(void*)), (key, destroy))
// fstat64 was an inline call of __fxstat64 before glibc 2.33.
JAX_ACLNN_FORWARD(int, __fxstat64, __fxstat64, (int ver, int fd, void* buf), (ver, fd, buf))
extern "C" __attribute__((visibility("hidden"))) int fstat64(int fd, void* buf) {
  return __fxstat64(JAX_ACLNN_STAT_VER, fd, buf);
}

// arc4random (glibc 2.36; libstdc++'s std::random_device, which jax_aclnn
// does not use) from getrandom (glibc 2.25).
extern "C" long getrandom(void* buf, size_t length, unsigned flags);
extern "C" __attribute__((visibility("hidden"))) uint32_t arc4random() {
  uint32_t value = 0;
  while (getrandom(&value, sizeof value, 0) != static_cast<long>(sizeof value)) {
  }
  return value;
}

// libstdc++'s headers read glibc 2.32's __libc_single_threaded to skip
// atomic reference counts in single-threaded processes; this copy, always 0
// (false), keeps the atomics on: correct everywhere.
extern "C" {
__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;
}
