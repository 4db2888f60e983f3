// The batch-norm reduce kernel (BatchNormReduceBackward's per-channel
// sums): BatchNormReduceWorkspaceSize and RunBatchNormReduce (kernels.h).
#include "host/kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "host/dtype.h"
#include "host/half_runs.h"
#include "host/memory.h"
#include "host/parallel.h"
#include "host/simd.h"

// Compiled once per CPU target (CMakeLists.txt), each copy in its own
// namespace; dispatch.cc picks one at run time.
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {
namespace {

// Channel blocks and batch blocks of the batch-norm reduction. They depend
// on the shape only, never on the thread count, so that the partial sums
// and their combine order (and so the result bits) are the same everywhere.
// Batch blocks (at most kBnBatchBlocks) only where there are fewer than
// kBnMinTasks channel blocks: each batch block folds its float accumulators
// into the double partials once per kBnFlushRows rows or fewer, so a block
// of one row (a (16, 4M) input as 16 x 256 blocks) makes several passes per
// element where one block of all 16 rows makes one.
constexpr int64_t kBnBatchBlocks = 16;
constexpr int64_t kBnMinTasks = 64;
// Short rows (inner < kBnRowWidth): a channel block spans about this many
// contiguous elements of one row (64 KiB of float32: each task streams long
// runs of memory), accumulated element-wise in float.
constexpr int64_t kBnRowWidth = 16384;
// Long rows: channels per block.
constexpr int64_t kBnLongRowChannels = 64;
// Rows accumulated in float before they are added into double partials.
constexpr int64_t kBnFlushRows = 64;

struct BnShape {
  int64_t outer, channels, inner;
  int64_t batch_blocks, channel_block, channel_blocks;
};

BnShape BnShapeOf(const View& input) {
  BnShape s;
  s.outer = input.dims[0];
  s.channels = input.dims[1];
  s.inner = 1;
  for (int d = 2; d < input.rank; ++d) s.inner *= input.dims[d];
  s.channel_block =
      s.inner < kBnRowWidth ? kBnRowWidth / std::max<int64_t>(1, s.inner) : kBnLongRowChannels;
  s.channel_block = std::max<int64_t>(1, std::min(s.channel_block, s.channels));
  s.channel_blocks = (s.channels + s.channel_block - 1) / s.channel_block;
  const int64_t channel_blocks = std::max<int64_t>(1, s.channel_blocks);  // C = 0: none
  s.batch_blocks = std::clamp<int64_t>((kBnMinTasks + channel_blocks - 1) / channel_blocks, 1,
                                       std::max<int64_t>(1, std::min(s.outer, kBnBatchBlocks)));
  return s;
}

// Stride between consecutive elements of dims [2, rank) taken as one
// dimension; 1 when there are none.
int64_t InnerStride(const View& v) { return v.rank > 2 ? v.strides[v.rank - 1] : 1; }

// Whether a row's channels and inner elements form one contiguous run.
bool RowsContiguous(const View& v, int64_t inner) {
  return InnerStride(v) == 1 && (v.dims[1] == 1 || v.strides[1] == inner);
}

const char* At(const View& v, int64_t n, int64_t c, int64_t i) {
  return static_cast<const char*>(v.data) +
         (n * v.strides[0] + c * v.strides[1] + i * InnerStride(v)) * ElementSize(v.dtype);
}

// Loads n elements (stride s) as floats: the data itself when it is
// contiguous float32, else a converted copy in buf.
const float* Floats(const View& v, const char* p, int64_t s, int64_t n, float* buf) {
  if (v.dtype == ACL_FLOAT && s == 1) return reinterpret_cast<const float*>(p);
  LoadAsFloat(v.dtype, p, s, n, buf);
  return buf;
}

// Short contiguous rows: the block's channels x inner elements of a row are
// one run of w <= kBnRowWidth; accumulate it element-wise over kBnFlushRows
// rows in float (one pass over memory, in address order, kBnRowGroup rows
// at a time so that the accumulators are loaded and stored once per group),
// then fold each channel's inner elements into the double partials.
constexpr int kBnRowGroup = 4;

// A group's sums at one element (T = float) or one vector (T = Vec) of the
// run: g and x hold the group's rows there, m the channel means.
template <typename T>
inline void AddGroup(const T* g, const T* x, T m, T& dy, T& xmu) {
  dy += (g[0] + g[1]) + (g[2] + g[3]);
  xmu += (g[0] * (x[0] - m) + g[1] * (x[1] - m)) + (g[2] * (x[2] - m) + g[3] * (x[3] - m));
}

// The same from a group of rows of type D a vector at a time (the
// compiler left the float loop that did this scalar: 0.8x XLA's reduction
// at 1M float32 elements). Half-precision rows are prefetched
// kPrefetchBytes ahead (ConvertTogether's pattern, without its float
// copies); float32 rows are not (prefetching them made it slower).
template <aclDataType D>
void AddGroupVectors(const char* const* gsrc, const char* const* xsrc, const float* m, float* dy,
                     float* xmu, int64_t len) {
  constexpr int64_t size = D == ACL_FLOAT ? 4 : 2;
  int64_t j = 0;
  for (; j + kLanes <= len; j += kLanes) {
    if (D != ACL_FLOAT && j % 32 == 0) {  // a new cache line of each row
      for (int r = 0; r < kBnRowGroup; ++r) {
        __builtin_prefetch(gsrc[r] + j * size + kPrefetchBytes);
        __builtin_prefetch(xsrc[r] + j * size + kPrefetchBytes);
      }
    }
    Vec g[kBnRowGroup], x[kBnRowGroup], mv, dv, xv;
    for (int r = 0; r < kBnRowGroup; ++r) {
      g[r] = LoadFloats<D, Vec>(gsrc[r] + j * size);
      x[r] = LoadFloats<D, Vec>(xsrc[r] + j * size);
    }
    std::memcpy(&mv, m + j, sizeof mv);
    std::memcpy(&dv, dy + j, sizeof dv);
    std::memcpy(&xv, xmu + j, sizeof xv);
    AddGroup(g, x, mv, dv, xv);
    std::memcpy(dy + j, &dv, sizeof dv);
    std::memcpy(xmu + j, &xv, sizeof xv);
  }
  for (; j < len; ++j) {
    float g[kBnRowGroup], x[kBnRowGroup];
    for (int r = 0; r < kBnRowGroup; ++r) {
      g[r] = LoadFloats<D, float>(gsrc[r] + j * size);
      x[r] = LoadFloats<D, float>(xsrc[r] + j * size);
    }
    AddGroup(g, x, m[j], dy[j], xmu[j]);
  }
}

// Adds the inner elements of channels [c, c + K) of the float accumulators
// into their double partial sums, each channel's in order from its first
// element (the same bits for any K). A channel's sum is a chain of
// dependent additions: one channel at a time, a task of a (64, 256, 64)
// float32 input spent as long on them as on its rows; K chains at once
// keep the adder busy.
constexpr int kBnFoldChannels = 8;

template <int K>
void FoldChannels(const float* acc_dy, const float* acc_xmu, int64_t inner, int64_t c,
                  double* partial) {
  double dy[K] = {}, xmu[K] = {};
  for (int64_t i = 0; i < inner; ++i) {
    for (int k = 0; k < K; ++k) {
      dy[k] += acc_dy[(c + k) * inner + i];
      xmu[k] += acc_xmu[(c + k) * inner + i];
    }
  }
  for (int k = 0; k < K; ++k) {
    partial[2 * (c + k)] += dy[k];
    partial[2 * (c + k) + 1] += xmu[k];
  }
}

void BnPartialShortRows(const BnShape& s, const View& g, const View& x, const float* mean,
                        int64_t n0, int64_t n1, int64_t c0, int64_t c1, double* partial) {
  // Accumulators of a whole run (192 KiB, too big for a pool thread's
  // stack), allocated once per thread; conversion buffers per chunk.
  thread_local std::unique_ptr<float[]> buffers(new float[3 * kBnRowWidth]);
  float* acc_dy = buffers.get();
  float* acc_xmu = acc_dy + kBnRowWidth;
  float* row_mean = acc_xmu + kBnRowWidth;
  alignas(64) float gbuf[kBnRowGroup][kChunk], xbuf[kBnRowGroup][kChunk];
  const int64_t w = (c1 - c0) * s.inner;
  const int64_t gsize = ElementSize(g.dtype), xsize = ElementSize(x.dtype);
  // Half-precision rows straight into vectors where both inputs have a type
  // that the target converts in registers (float32 rows are read in place).
  const bool vector_halves = g.dtype == x.dtype && InRegisters(g.dtype);
  for (int64_t c = c0; c < c1; ++c)
    std::fill(row_mean + (c - c0) * s.inner, row_mean + (c - c0 + 1) * s.inner, mean[c - c0]);
  for (int64_t r0 = n0; r0 < n1; r0 += kBnFlushRows) {
    const int64_t r1 = std::min(n1, r0 + kBnFlushRows);
    std::fill(acc_dy, acc_dy + w, 0.0f);
    std::fill(acc_xmu, acc_xmu + w, 0.0f);
    for (int64_t n = r0; n < r1; n += kBnRowGroup) {
      const int rows = static_cast<int>(std::min<int64_t>(kBnRowGroup, r1 - n));
      for (int64_t j0 = 0; j0 < w; j0 += kChunk) {
        const int64_t len = std::min(kChunk, w - j0);
        const char* gsrc[kBnRowGroup];
        const char* xsrc[kBnRowGroup];
        for (int r = 0; r < rows; ++r) {
          gsrc[r] = At(g, n + r, c0, 0) + j0 * gsize;
          xsrc[r] = At(x, n + r, c0, 0) + j0 * xsize;
        }
        const float* m = row_mean + j0;
        float* dy = acc_dy + j0;
        float* xmu = acc_xmu + j0;
        if (rows == kBnRowGroup && vector_halves) {
          if (g.dtype == ACL_BF16)
            AddGroupVectors<ACL_BF16>(gsrc, xsrc, m, dy, xmu, len);
          else if constexpr (kVectorFloat16)
            AddGroupVectors<ACL_FLOAT16>(gsrc, xsrc, m, dy, xmu, len);
          continue;
        }
        const float* gp[kBnRowGroup];
        const float* xp[kBnRowGroup];
        HalfRun halves[2 * kBnRowGroup];
        int num_halves = 0;
        for (int r = 0; r < rows; ++r) {
          gp[r] = g.dtype == ACL_FLOAT ? reinterpret_cast<const float*>(gsrc[r]) : gbuf[r];
          xp[r] = x.dtype == ACL_FLOAT ? reinterpret_cast<const float*>(xsrc[r]) : xbuf[r];
          if (g.dtype != ACL_FLOAT) halves[num_halves++] = {g.dtype, gsrc[r], gbuf[r]};
          if (x.dtype != ACL_FLOAT) halves[num_halves++] = {x.dtype, xsrc[r], xbuf[r]};
        }
        ConvertTogether(halves, num_halves, len);
        if (rows == kBnRowGroup) {
          const char* gf[kBnRowGroup];
          const char* xf[kBnRowGroup];
          for (int r = 0; r < kBnRowGroup; ++r) {
            gf[r] = reinterpret_cast<const char*>(gp[r]);
            xf[r] = reinterpret_cast<const char*>(xp[r]);
          }
          AddGroupVectors<ACL_FLOAT>(gf, xf, m, dy, xmu, len);
        } else {
          for (int r = 0; r < rows; ++r) {
            const float* gr = gp[r];
            const float* xr = xp[r];
#pragma omp simd
            for (int64_t j = 0; j < len; ++j) {
              dy[j] += gr[j];
              xmu[j] += gr[j] * (xr[j] - m[j]);
            }
          }
        }
      }
    }
    int64_t c = 0;
    for (; c + kBnFoldChannels <= c1 - c0; c += kBnFoldChannels)
      FoldChannels<kBnFoldChannels>(acc_dy, acc_xmu, s.inner, c, partial);
    for (; c < c1 - c0; ++c) FoldChannels<1>(acc_dy, acc_xmu, s.inner, c, partial);
  }
}

// Long rows (or any strides): a vector reduction over each (row, channel)'s
// inner elements, rows in the outer loop so that memory is read in order.
void BnPartialLongRows(const BnShape& s, const View& g, const View& x, const float* mean,
                       int64_t n0, int64_t n1, int64_t c0, int64_t c1, double* partial) {
  alignas(64) float gbuf[kChunk], xbuf[kChunk];
  const int64_t sg = InnerStride(g), sx = InnerStride(x);
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t c = c0; c < c1; ++c) {
      const float m = mean[c - c0];
      double dy = 0.0, xmu = 0.0;
      for (int64_t i = 0; i < s.inner; i += kChunk) {
        const int64_t len = std::min(kChunk, s.inner - i);
        const float* gp = Floats(g, At(g, n, c, i), sg, len, gbuf);
        const float* xp = Floats(x, At(x, n, c, i), sx, len, xbuf);
        float a = 0.0f, b = 0.0f;
#pragma omp simd reduction(+ : a, b)
        for (int64_t k = 0; k < len; ++k) {
          a += gp[k];
          b += gp[k] * (xp[k] - m);
        }
        dy += a;
        xmu += b;
      }
      partial[2 * (c - c0)] += dy;
      partial[2 * (c - c0) + 1] += xmu;
    }
  }
}

// Partial sums of batch block `bb` for channel block `cb`, inside the
// window of channels starting at `w0`: partial[2(c - w0)] and
// partial[2(c - w0) + 1] hold (sum dy, sum dy * (x - mean)) in double;
// mean[c - w0] is channel c's mean. (BnPartialShortRows/LongRows index
// both from their first channel c0.)
void BnPartial(const BnShape& s, const View& g, const View& x, const float* mean, int64_t w0,
               int64_t bb, int64_t cb, double* partial) {
  const int64_t n0 = s.outer * bb / s.batch_blocks, n1 = s.outer * (bb + 1) / s.batch_blocks;
  const int64_t c0 = cb * s.channel_block, c1 = std::min(s.channels, c0 + s.channel_block);
  mean += c0 - w0;
  partial += 2 * (c0 - w0);
  std::fill(partial, partial + 2 * (c1 - c0), 0.0);
  if (s.inner < kBnRowWidth && RowsContiguous(g, s.inner) && RowsContiguous(x, s.inner))
    BnPartialShortRows(s, g, x, mean, n0, n1, c0, c1, partial);
  else
    BnPartialLongRows(s, g, x, mean, n0, n1, c0, c1, partial);
}

// Element c of a (C,) view.
char* Channel(const View& v, int64_t c) {
  return static_cast<char*>(v.data) + c * v.strides[0] * ElementSize(v.dtype);
}

void StoreChannels(const View* out, const float* values, int64_t c0, int64_t channels) {
  if (out == nullptr) return;
  StoreFromFloat(out->dtype, values, channels, Channel(*out, c0), out->strides[0]);
}

// Channels are reduced a window at a time, so that the workspace is
// bounded whatever C is: whole channel blocks whose partial sums and float
// vectors take at most kBnWindowBytes (or one channel block, at most
// 16384 x (16 x 16 + 24) bytes). Windows change neither the partial sums
// nor their combine order: the results are the same bits for any window.
constexpr int64_t kBnWindowBytes = int64_t{4} << 20;

// Bytes per channel of a window: the batch blocks' double partials, then
// the float vectors mean, invstd and the four results.
int64_t BnBytesPerChannel(const BnShape& s) {
  return s.batch_blocks * 2 * static_cast<int64_t>(sizeof(double)) + 6 * sizeof(float);
}

int64_t BnWindowChannels(const BnShape& s) {
  const int64_t blocks =
      std::max<int64_t>(1, kBnWindowBytes / (BnBytesPerChannel(s) * s.channel_block));
  return std::min(s.channels, blocks * s.channel_block);
}

}  // namespace

uint64_t BatchNormReduceWorkspaceSize(const View& input) {
  const BnShape s = BnShapeOf(input);
  return static_cast<uint64_t>(BnWindowChannels(s) * BnBytesPerChannel(s));
}

void RunBatchNormReduce(const View& grad_out, const View& input, const View& mean_v,
                        const View& invstd_v, const View* const outputs[4], void* workspace,
                        const JaxAclnnHostStream* stream) {
  const BnShape s = BnShapeOf(input);
  const int64_t C = s.channels;
  if (C == 0) return;
  for (const View* out : {outputs[0], outputs[1], outputs[2], outputs[3]})
    if (out != nullptr && IsNewMemory(out->data, C * ElementSize(out->dtype)))
      AdviseHugePages(out->data, C * ElementSize(out->dtype));
  const int64_t W = BnWindowChannels(s);
  double* partials = static_cast<double*>(workspace);
  float* mean = reinterpret_cast<float*>(partials + s.batch_blocks * W * 2);
  float* invstd = mean + W;
  float* sums[4] = {invstd + W, invstd + 2 * W, invstd + 3 * W, invstd + 4 * W};
  for (int64_t w0 = 0; w0 < C; w0 += W) {  // a whole number of channel blocks each
    const int64_t w = std::min(W, C - w0);
    LoadAsFloat(mean_v.dtype, Channel(mean_v, w0), mean_v.strides[0], w, mean);
    LoadAsFloat(invstd_v.dtype, Channel(invstd_v, w0), invstd_v.strides[0], w, invstd);
    const int64_t first_block = w0 / s.channel_block;
    const int64_t blocks = (w + s.channel_block - 1) / s.channel_block;
    ParallelFor(stream, s.batch_blocks * blocks, [&](int64_t t) {
      const int64_t bb = t / blocks, cb = first_block + t % blocks;
      BnPartial(s, grad_out, input, mean, w0, bb, cb, partials + bb * W * 2);
    });
    // Deterministic combine (batch blocks in order), a channel block per
    // task: with millions of channels, one thread doing it all took a
    // quarter of the time.
    ParallelFor(stream, blocks, [&](int64_t b) {
      const int64_t c0 = b * s.channel_block, c1 = std::min(w, c0 + s.channel_block);
      for (int64_t c = c0; c < c1; ++c) {
        double dy = 0.0, xmu = 0.0;
        for (int64_t bb = 0; bb < s.batch_blocks; ++bb) {
          dy += partials[(bb * W + c) * 2];
          xmu += partials[(bb * W + c) * 2 + 1];
        }
        sums[0][c] = static_cast<float>(dy);
        sums[1][c] = static_cast<float>(xmu);
        sums[2][c] = static_cast<float>(xmu * invstd[c]);
        sums[3][c] = static_cast<float>(dy);
      }
      for (int k = 0; k < 4; ++k) StoreChannels(outputs[k], sums[k] + c0, w0 + c0, c1 - c0);
    });
  }
}

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET

