"""The catalogue's argument orders against torch_npu's call sites (issues 38
and 39). Each row is transcribed from Ascend/op-plugin (the file named; the
generated ones from op_plugin/config/op_plugin_functions.yaml's ``exec:``
lines): the arguments its EXEC_NPU_CMD passes, in order, with the name
CANN's prototype gives each. The handler passes a declared operator's
arguments in its prototype's order (tests/test_declare*.py record them), so
the prototype we declare must list CANN's names in exactly this order."""

from __future__ import annotations

import pytest

from jax_aclnn import _primitive, nn, optax  # noqa: F401  (declare the catalogue)
from jax_aclnn.nn import _attention, _rope

#: aclnn operator -> (op-plugin source, [(op-plugin's argument, CANN's parameter)])
OP_PLUGIN = {
    "aclnnRmsNorm": ("op_plugin/ops/opapi/RmsNormKernelOpApi.cpp", [
        ("self", "x"), ("gamma", "gamma"), ("epsilon", "epsilon"), ("y", "yOut"),
        ("rstd", "rstdOut")]),
    "aclnnRmsNormGrad": ("op_plugin/ops/opapi/RmsNormBackwardKernelOpApi.cpp", [
        ("dy", "dy"), ("self", "x"), ("rstd", "rstd"), ("gamma", "gamma"), ("dx", "dxOut"),
        ("dgamma", "dgammaOut")]),
    "aclnnAddRmsNorm": ("op_plugin_functions.yaml: npu_add_rms_norm", [
        ("x1", "x1"), ("x2", "x2"), ("gamma", "gamma"), ("epsilon", "epsilon"), ("out0", "yOut"),
        ("out1", "rstdOut"), ("out2", "xOut")]),
    "aclnnSwiGlu": ("op_plugin_functions.yaml: npu_swiglu", [
        ("self", "x"), ("dim", "dim"), ("out", "out")]),
    "aclnnSwiGluGrad": ("op_plugin_functions.yaml: npu_swiglu_backward", [
        ("grad_output", "yGrad"), ("self", "x"), ("dim", "dim"), ("out", "out")]),
    "aclnnRotaryPositionEmbedding": ("op_plugin/ops/opapi/RotaryMulKernelNpuOpApi.cpp", [
        ("self", "x"), ("r1", "cos"), ("r2", "sin"), ("mode", "mode"), ("result", "out")]),
    "aclnnRotaryPositionEmbeddingGrad": (
        "op_plugin/ops/opapi/RotaryMulBackwardKernelNpuOpApi.cpp", [
            ("grad", "dy"), ("r1", "cos"), ("r2", "sin"), ("x", "xOptional"), ("mode", "mode"),
            ("dx", "dxOut"), ("dcos", "dcosOut"), ("dsin", "dsinOut")]),
    "aclnnCrossEntropyLoss": ("op_plugin_functions.yaml: npu_cross_entropy_loss", [
        ("input", "input"), ("target", "target"), ("weight", "weightOptional"),
        ("reduction_char", "reductionOptional"), ("ignore_index", "ignoreIndex"),
        ("label_smoothing", "labelSmoothing"),
        ("lse_square_scale_for_zloss", "lseSquareScaleForZloss"),
        ("return_zloss", "returnZloss"), ("loss", "lossOut"), ("log_prob", "logProbOut"),
        ("zloss", "zlossOut"), ("lse_for_zloss", "lseForZlossOut")]),
    "aclnnCrossEntropyLossGrad": ("op_plugin_functions.yaml: npu_cross_entropy_loss_backward", [
        ("grad_loss", "gradLoss"), ("log_prob", "logProb"), ("target", "target"),
        ("weight", "weightOptional"), ("grad_zloss", "gradZlossOptional"),
        ("lse_for_zloss", "lseForZlossOptional"), ("reduction_char", "reductionOptional"),
        ("ignore_index", "ignoreIndex"), ("label_smoothing", "labelSmoothing"),
        ("lse_square_scale_for_zloss", "lseSquareScaleForZloss"), ("x_grad_out", "out")]),
    "aclnnApplyAdamW": ("op_plugin/ops/opapi/ApplyAdamWKernelNpuOpApi.cpp", [
        ("var", "varRef"), ("m", "mRef"), ("v", "vRef"), ("beta1_power_tensor", "beta1Power"),
        ("beta2_power_tensor", "beta2Power"), ("lr_tensor", "lr"),
        ("weight_decay_tensor", "weightDecay"), ("beta1_tensor", "beta1"),
        ("beta2_tensor", "beta2"), ("epsilon_tensor", "eps"), ("grad", "grad"),
        ("max_grad_norm", "maxGradNormOptional"), ("amsgrad_value", "amsgrad"),
        ("maximize_value", "maximize")]),
    "aclnnApplyAdamWV2": ("op_plugin/ops/opapi/FusedAdamWKernelNpuOpApi.cpp", [
        ("self[i]", "varRef"), ("exp_avgs[i]", "mRef"), ("exp_avg_sqs[i]", "vRef"),
        ("max_exp_avg_sqs[i]", "maxGradNormOptionalRef"), ("grads[i]", "grad"),
        ("step", "step"), ("lr_cast", "lr"), ("beta1_cast", "beta1"), ("beta2_cast", "beta2"),
        ("weight_decay_cast", "weightDecay"), ("eps_cast", "eps"), ("amsgrad", "amsgrad"),
        ("maximize", "maximize")]),
    "aclnnFlashAttentionScore": ("op_plugin/ops/opapi/FlashAttentionKernelNpuOpApi.cpp", [
        ("format_query", "query"), ("format_key", "key"), ("format_value", "value"),
        ("format_pse", "realShiftOptional"), ("format_drop_mask", "dropMaskOptional"),
        ("format_padding_mask", "paddingMaskOptional"), ("format_atten_mask", "attenMaskOptional"),
        ("prefixN", "prefixOptional"), ("scale", "scaleValue"), ("keep_prob", "keepProb"),
        ("pre_tockens", "preTokens"), ("next_tockens", "nextTokens"), ("head_num", "headNum"),
        ("input_layout_char", "inputLayout"), ("inner_precise", "innerPrecise"),
        ("sparse_mode", "sparseMode"), ("softmax_max", "softmaxMaxOut"),
        ("softmax_sum", "softmaxSumOut"), ("softmax_out", "softmaxOutOut"),
        ("attention_score", "attentionOutOut")]),
    "aclnnFlashAttentionScoreGrad": ("op_plugin/ops/opapi/FlashAttentionKernelNpuOpApi.cpp", [
        ("format_query", "query"), ("format_key", "keyIn"), ("format_value", "value"),
        ("format_dy", "dy"), ("format_pse", "pseShiftOptional"),
        ("format_drop_mask", "dropMaskOptional"), ("format_padding_mask", "paddingMaskOptional"),
        ("format_atten_mask", "attenMaskOptional"), ("format_softmax_max", "softmaxMaxOptional"),
        ("format_softmax_sum", "softmaxSumOptional"), ("format_softmax", "softmaxInOptional"),
        ("format_attention", "attentionInOptional"), ("prefixN", "prefixOptional"),
        ("scale_value", "scaleValue"), ("keep_prob", "keepProb"), ("pre_tockens", "preTokens"),
        ("next_tockens", "nextTokens"), ("head_num", "headNum"),
        ("input_layout_char", "inputLayout"), ("inner_precise", "innerPrecise"),
        ("sparse_mode", "sparseMode"), ("dq", "dqOut"), ("dk", "dkOut"), ("dv", "dvOut"),
        ("dpse", "dpseOut")]),
}


def declared(aclnn_name: str):
    # the attention and RoPE pairs are declared per mask/broadcast pattern, when first used
    _attention._operators("p", "m", False)
    _rope._operators((True, False, True))
    return next(op for op in _primitive.OPERATORS.values()
                if op.aclnn_name == aclnn_name and op.name.startswith(("nn_", "optax_")))


@pytest.mark.parametrize("aclnn_name", sorted(OP_PLUGIN))
def test_our_prototype_passes_what_op_plugin_passes_in_its_order(aclnn_name):
    source, arguments = OP_PLUGIN[aclnn_name]
    ours = [p.name for p in declared(aclnn_name).prototype.parameters]
    assert ours == [cann for _, cann in arguments], source
