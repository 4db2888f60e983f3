"""jax_aclnn.nn: the fused operators of an LLM training step as JAX functions.

Each is a drop-in for the function JAX users already call, differentiable,
and runs CANN's fused aclnn operator in each direction (one call per use on
the NPU, or on the CPU where a provider has it; its pure-JAX reference
elsewhere), declared with :func:`jax_aclnn.declare` from CANN's own
prototypes and with dimension rules (batch and sequence partitioned):

* :func:`rms_norm` (aclnnRmsNorm / aclnnRmsNormGrad)
* :func:`add_rms_norm` (aclnnAddRmsNorm / aclnnRmsNormGrad)
* :func:`swiglu` (aclnnSwiGlu / aclnnSwiGluGrad)
* :func:`rotary_embedding` (aclnnRotaryPositionEmbedding / its Grad)
* :func:`softmax_cross_entropy_with_integer_labels` (aclnnCrossEntropyLoss /
  aclnnCrossEntropyLossGrad)
* :func:`dot_product_attention` (aclnnFlashAttentionScore /
  aclnnFlashAttentionScoreGrad)
* :func:`ragged_dot` (aclnnGroupedMatmulV4)

and a mixture-of-experts layer's: :func:`top_k_routing`
(aclnnMoeGatingTopKSoftmaxV2), :func:`moe_permute` (aclnnMoeTokenPermute /
its Grad), :func:`moe_unpermute` (aclnnMoeTokenUnpermute / its Grad) and
:func:`moe_ffn`, the SwiGLU layer over them and :func:`ragged_dot`, expert
parallel inside ``shard_map``.
"""

from jax_aclnn.nn._attention import dot_product_attention
from jax_aclnn.nn._cross_entropy import softmax_cross_entropy_with_integer_labels
from jax_aclnn.nn._moe import moe_permute, moe_unpermute, top_k_routing
from jax_aclnn.nn._moe_ffn import moe_ffn
from jax_aclnn.nn._norm import add_rms_norm, rms_norm
from jax_aclnn.nn._ragged_dot import ragged_dot
from jax_aclnn.nn._rope import rotary_embedding
from jax_aclnn.nn._swiglu import swiglu

__all__ = ["add_rms_norm", "dot_product_attention", "moe_ffn", "moe_permute", "moe_unpermute",
           "ragged_dot", "rms_norm", "rotary_embedding",
           "softmax_cross_entropy_with_integer_labels", "swiglu", "top_k_routing"]
