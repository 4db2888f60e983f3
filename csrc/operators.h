// The aclnn operators: the one list. X(Name, name, parameters) stands for the
// aclnn operator aclnn<Name>, the JAX function jax_aclnn.<name> and its
// custom-call target aclnn_<name>; `parameters` is its first phase's
// parameter list as CANN declares it, without the trailing workspaceSize and
// executor (aclnn_abi.h derives both ABI functions from it). The C++ tables
// (OpId, the operator names, the host provider's exports and second phases)
// are derived from it; the Python operators declare the same prototypes
// (_aclnn_ffi.operator_prototypes(), tests/test_build.py).
#ifndef JAX_ACLNN_OPERATOR_LIST_
#define JAX_ACLNN_OPERATOR_LIST_

// JAX_ACLNN_OPERATORS_WITH(X, A) calls X(A, Name, name, parameters) for each
// operator; JAX_ACLNN_OPERATORS(X) calls X(Name, name).
#define JAX_ACLNN_OPERATORS_WITH(X, A)                                                     \
  X(A, SmoothL1LossBackward, smooth_l1_loss_backward,                                     \
    (const aclTensor* gradOut, const aclTensor* self, const aclTensor* target,            \
     int64_t reduction, float beta, aclTensor* gradInput))                                \
  X(A, LogitGrad, logit_grad,                                                             \
    (const aclTensor* x, const aclTensor* dy, double eps, const aclTensor* out))          \
  X(A, HardshrinkBackward, hardshrink_backward,                                           \
    (const aclTensor* gradOutput, const aclTensor* self, const aclScalar* lambd,          \
     aclTensor* gradInput))                                                               \
  X(A, SwishBackward, swish_backward,                                                     \
    (const aclTensor* gradOutput, const aclTensor* self, const aclScalar* betaOptional,   \
     aclTensor* gradInput))                                                               \
  X(A, BatchNormReduceBackward, batch_norm_reduce_backward,                               \
    (const aclTensor* gradOut, const aclTensor* input, const aclTensor* mean,             \
     const aclTensor* invstd, const aclTensor* weight, const bool inputG,                 \
     const bool weightG, const bool biasG, aclTensor* sumDy, aclTensor* sumDyXmu,         \
     aclTensor* gradWeight, aclTensor* gradBias))                                         \
  /* new operators: above this line */

// The catalogue's operators that the host provider implements as well
// (jax_aclnn.nn and jax_aclnn.optax declare them, with these prototypes:
// tests/test_build.py checks both): X(A, Name, parameters) as above, but no built-in JAX
// function, and no OpId.
#define JAX_ACLNN_HOST_CATALOGUE_WITH(X, A)                                               \
  X(A, RmsNorm,                                                                           \
    (const aclTensor* x, const aclTensor* gamma, double epsilon, const aclTensor* yOut,   \
     const aclTensor* rstdOut))                                                           \
  X(A, AddRmsNorm,                                                                        \
    (const aclTensor* x1, const aclTensor* x2, const aclTensor* gamma, double epsilon,    \
     aclTensor* yOut, aclTensor* rstdOut, aclTensor* xOut))                               \
  X(A, RmsNormGrad,                                                                       \
    (const aclTensor* dy, const aclTensor* x, const aclTensor* rstd,                      \
     const aclTensor* gamma, const aclTensor* dxOut, const aclTensor* dgammaOut))         \
  X(A, SwiGlu, (const aclTensor* x, int64_t dim, const aclTensor* out))                   \
  X(A, SwiGluGrad,                                                                        \
    (const aclTensor* yGrad, const aclTensor* x, int64_t dim, const aclTensor* out))       \
  X(A, RotaryPositionEmbedding,                                                           \
    (const aclTensor* x, const aclTensor* cos, const aclTensor* sin, int64_t mode,        \
     aclTensor* out))                                                                     \
  X(A, RotaryPositionEmbeddingGrad,                                                       \
    (const aclTensor* dy, const aclTensor* cos, const aclTensor* sin,                     \
     const aclTensor* xOptional, int64_t mode, const aclTensor* dxOut,                    \
     const aclTensor* dcosOut, const aclTensor* dsinOut))                                 \
  X(A, CrossEntropyLoss,                                                                  \
    (const aclTensor* input, const aclTensor* target, const aclTensor* weightOptional,    \
     char* reductionOptional, int64_t ignoreIndex, double labelSmoothing,                 \
     double lseSquareScaleForZloss, bool returnZloss, const aclTensor* lossOut,           \
     const aclTensor* logProbOut, const aclTensor* zlossOut,                              \
     const aclTensor* lseForZlossOut))                                                    \
  X(A, CrossEntropyLossGrad,                                                              \
    (const aclTensor* gradLoss, const aclTensor* logProb, const aclTensor* target,        \
     const aclTensor* weightOptional, const aclTensor* gradZlossOptional,                 \
     const aclTensor* lseForZlossOptional, char* reductionOptional, int64_t ignoreIndex,  \
     double labelSmoothing, double lseSquareScaleForZloss, const aclTensor* out))       \
  X(A, GroupedMatmulV4,                                                                   \
    (const aclTensorList* x, const aclTensorList* weight, const aclTensorList* biasOptional, \
     const aclTensorList* scaleOptional, const aclTensorList* offsetOptional,             \
     const aclTensorList* antiquantScaleOptional,                                         \
     const aclTensorList* antiquantOffsetOptional,                                        \
     const aclTensorList* perTokenScaleOptional, const aclTensor* groupListOptional,      \
     const aclTensorList* activationInputOptional,                                        \
     const aclTensorList* activationQuantScaleOptional,                                   \
     const aclTensorList* activationQuantOffsetOptional, int64_t splitItem,               \
     int64_t groupType, int64_t groupListType, int64_t actType, aclTensorList* out,       \
     aclTensorList* activationFeatureOutOptional, aclTensorList* dynQuantScaleOutOptional)) \
  X(A, FlashAttentionScore,                                                               \
    (const aclTensor* query, const aclTensor* key, const aclTensor* value,               \
     const aclTensor* realShiftOptional, const aclTensor* dropMaskOptional,              \
     const aclTensor* paddingMaskOptional, const aclTensor* attenMaskOptional,           \
     const aclIntArray* prefixOptional, double scaleValue, double keepProb,              \
     int64_t preTokens, int64_t nextTokens, int64_t headNum, char* inputLayout,          \
     int64_t innerPrecise, int64_t sparseMode, const aclTensor* softmaxMaxOut,           \
     const aclTensor* softmaxSumOut, const aclTensor* softmaxOutOut,                     \
     const aclTensor* attentionOutOut))                                                  \
  X(A, FlashAttentionScoreGrad,                                                           \
    (const aclTensor* query, const aclTensor* keyIn, const aclTensor* value,             \
     const aclTensor* dy, const aclTensor* pseShiftOptional,                             \
     const aclTensor* dropMaskOptional, const aclTensor* paddingMaskOptional,            \
     const aclTensor* attenMaskOptional, const aclTensor* softmaxMaxOptional,            \
     const aclTensor* softmaxSumOptional, const aclTensor* softmaxInOptional,            \
     const aclTensor* attentionInOptional, const aclIntArray* prefixOptional,            \
     double scaleValue, double keepProb, int64_t preTokens, int64_t nextTokens,          \
     int64_t headNum, char* inputLayout, int64_t innerPrecise, int64_t sparseMode,       \
     const aclTensor* dqOut, const aclTensor* dkOut, const aclTensor* dvOut,             \
     const aclTensor* dpseOut))                                                          \
  X(A, ApplyAdamW,                                                                        \
    (aclTensor* varRef, aclTensor* mRef, aclTensor* vRef, const aclTensor* beta1Power,    \
     const aclTensor* beta2Power, const aclTensor* lr, const aclTensor* weightDecay,      \
     const aclTensor* beta1, const aclTensor* beta2, const aclTensor* eps,                \
     const aclTensor* grad, const aclTensor* maxGradNormOptional, bool amsgrad,           \
     bool maximize))                                                                      \
  X(A, ApplyAdamWV2,                                                                      \
    (aclTensor* varRef, aclTensor* mRef, aclTensor* vRef, aclTensor* maxGradNormOptionalRef, \
     const aclTensor* grad, const aclTensor* step, float lr, float beta1, float beta2,     \
     float weightDecay, float eps, bool amsgrad, bool maximize))                          \
  X(A, MoeGatingTopKSoftmaxV2,                                                            \
    (const aclTensor* x, const aclTensor* finishedOptional, int64_t k, int64_t renorm,    \
     bool outputSoftmaxResultFlag, const aclTensor* yOut, const aclTensor* expertIdxOut,  \
     const aclTensor* softmaxResultOutOptional))                                          \
  X(A, MoeTokenPermute,                                                                   \
    (const aclTensor* tokens, const aclTensor* indices, int64_t numOutTokens,             \
     bool paddedMode, const aclTensor* permuteTokensOut,                                  \
     const aclTensor* sortedIndicesOut))                                                  \
  X(A, MoeTokenPermuteGrad,                                                               \
    (const aclTensor* permutedOutputGrad, const aclTensor* sortedIndices,                 \
     int64_t numTopk, bool paddedMode, aclTensor* out))                                   \
  X(A, MoeTokenUnpermute,                                                                 \
    (const aclTensor* permutedTokens, const aclTensor* sortedIndices,                     \
     const aclTensor* probsOptional, bool paddedMode,                                     \
     const aclIntArray* restoreShapeOptional, aclTensor* out))                            \
  X(A, MoeTokenUnpermuteGrad,                                                             \
    (const aclTensor* permuteTokens, const aclTensor* unpermutedTokensGrad,               \
     const aclTensor* sortedIndices, const aclTensor* probsOptional, bool paddedMode,     \
     const aclIntArray* restoreShapeOptional, aclTensor* permutedTokensGradOut,           \
     aclTensor* probsGradOut))

#define JAX_ACLNN_OPERATORS(X) JAX_ACLNN_OPERATORS_WITH(JAX_ACLNN_OPERATOR_NAMES, X)
#define JAX_ACLNN_OPERATOR_NAMES(X, Name, name, parameters) X(Name, name)

#endif  // JAX_ACLNN_OPERATOR_LIST_

// The rest is C++ and brings in the operators' headers: aclnn_abi.h takes
// only the list above (JAX_ACLNN_OPERATOR_LIST_ONLY).
#if defined(__cplusplus) && !defined(JAX_ACLNN_OPERATOR_LIST_ONLY) && \
    !defined(JAX_ACLNN_OPERATORS_H_)
#define JAX_ACLNN_OPERATORS_H_

namespace jax_aclnn {

#define JAX_ACLNN_OP_ID(Name, name) k##Name,
enum OpId { JAX_ACLNN_OPERATORS(JAX_ACLNN_OP_ID) kNumOps };
#undef JAX_ACLNN_OP_ID

// aclnn operator names, indexed by OpId.
#define JAX_ACLNN_OP_NAME(Name, name) "aclnn" #Name,
inline constexpr const char* kAclnnOpNames[kNumOps] = {JAX_ACLNN_OPERATORS(JAX_ACLNN_OP_NAME)};
#undef JAX_ACLNN_OP_NAME

}  // namespace jax_aclnn

// Each operator's host implementation (csrc/ops/): its first phase in the
// host provider (<op>.cc) and, for an element-wise operator, its host kernel
// (<op>_kernel.h: its parameters and functor, host/pointwise_kernel.h). The
// FFI side has nothing per operator: one handler calls any operator from the
// argument list its custom call carries (ffi/handlers.cc).
#include "host/pointwise_kernel.h"
#include "ops/smooth_l1_loss_backward_kernel.h"
#include "ops/logit_grad_kernel.h"
#include "ops/hardshrink_backward_kernel.h"
#include "ops/swish_backward_kernel.h"
// new operators' headers: above this line


#endif  // C++, not JAX_ACLNN_OPERATOR_LIST_ONLY, JAX_ACLNN_OPERATORS_H_
