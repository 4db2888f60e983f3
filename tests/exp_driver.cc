// Reads float32 values from stdin and writes the host kernels' exponential
// (argv[1]: ExpF or ExpForHalf, csrc/host/pointwise_kernel.h) of each to
// stdout twice: through the vector type (Vec, kLanes at a time), then one
// float at a time, as the kernels' loops and their tails call it.
// tests/test_exponentials.py compiles it with the kernels' flags.
#include <cstdio>
#include <cstring>
#include <vector>

#include "operators.h"
#include "host/pointwise_kernel.h"

namespace k = jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET;

template <typename T>
T Exp(bool half, T x) {
  return half ? k::ExpForHalf(x) : k::ExpF(x);
}

int main(int argc, char** argv) {
  const bool half = argc == 2 && std::strcmp(argv[1], "ExpForHalf") == 0;
  if (argc != 2 || (!half && std::strcmp(argv[1], "ExpF") != 0)) {
    std::fprintf(stderr, "usage: %s ExpF|ExpForHalf < floats > results\n", argv[0]);
    return 2;
  }
  std::vector<float> x;
  for (float v; std::fread(&v, sizeof v, 1, stdin) == 1;) x.push_back(v);
  const size_t n = x.size();
  x.resize((n + k::kLanes - 1) / k::kLanes * k::kLanes, 0.0f);
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); i += k::kLanes) {
    k::Vec v;
    std::memcpy(&v, &x[i], sizeof v);
    v = Exp(half, v);
    std::memcpy(&y[i], &v, sizeof v);
  }
  for (size_t i = 0; i < n; ++i) y.push_back(Exp(half, x[i]));
  std::fwrite(y.data(), sizeof(float), n, stdout);
  std::fwrite(y.data() + x.size(), sizeof(float), n, stdout);
}
