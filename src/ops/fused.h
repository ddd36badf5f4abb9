/*
 * fused.h — what kiln.FusedConv and kiln.FusedGemm share (FUSED.md is their contract):
 * the activation attribute and the epilogue that applies bias, residual and activation
 * in one pass over an output the Conv / Gemm machinery has just written.
 *
 * Activations (attribute `activation`): "" (none), "Relu", "LeakyRelu" (alpha, default
 * 0.01), "Clip" (act_min, act_max, default -inf / +inf: ReLU6 is Clip 0..6), "Sigmoid",
 * "HardSwish", "HardSigmoid" (alpha 0.2, beta 0.5), "Tanh"; each with the semantics of the
 * ONNX op of that name (NaN stays NaN through Clip and HardSigmoid, Relu maps it to 0 as
 * kiln's Relu does). And three with no ONNX op of their name: "Silu" (x * Sigmoid(x), what
 * exporters write for SiLU / Swish), "Gelu" (Gelu's erf form: x/2 * (1 + erf(x / sqrt 2)))
 * and "GeluTanh" (Gelu with approximate = "tanh"), computed as kiln's Sigmoid and Gelu do. The attribute names of alpha and beta are the op's choice: FusedConv
 * uses alpha / beta as FUSED.md says, FusedGemm act_alpha / act_beta (Gemm's own alpha and
 * beta scale the product).
 */
#ifndef KILN_OPS_FUSED_H
#define KILN_OPS_FUSED_H

#include "../core/internal.h"

typedef enum kiln_act_kind {
    KILN_ACT_NONE = 0,
    KILN_ACT_RELU,
    KILN_ACT_LEAKY_RELU,
    KILN_ACT_CLIP,
    KILN_ACT_SIGMOID,
    KILN_ACT_HARD_SWISH,
    KILN_ACT_HARD_SIGMOID,
    KILN_ACT_TANH,
    KILN_ACT_SILU,
    KILN_ACT_GELU,
    KILN_ACT_GELU_TANH
} kiln_act_kind;

typedef struct kiln_fused_act {
    kiln_act_kind kind;
    double alpha, beta; /* LeakyRelu: alpha; HardSigmoid: alpha, beta */
    double lo, hi;      /* Clip */
} kiln_fused_act;

/* The kind named by an ONNX op type ("Relu", ...); false when it is not in the list. */
bool kiln_fused_act_kind(const char *name, kiln_act_kind *kind);

/* Read the node's activation and its parameters (alpha / beta under the attribute names
 * given). Fails with KILN_ERR_UNSUPPORTED on an unknown activation. */
kiln_status kiln_fused_act_get(kiln_op_ctx *c, const char *alpha_attr, const char *beta_attr,
                               kiln_fused_act *a);

/* y (outer, channels, inner) = act(y + bias[channel] + z) in one pass. bias (channels) or
 * NULL, z of y's shape or NULL; both of y's dtype. Large outputs are split over threads.
 * f32 and f64 compute in their own precision, f16 / bf16 in double. */
void kiln_fused_epilogue(const kiln_fused_act *a, kiln_tensor *y, int64_t channels, int64_t inner,
                         const kiln_tensor *bias, const kiln_tensor *z);

/* For the self-tests: the output of op (any domain) with attribute text attrs on in[]
 * (NULL entries: missing inputs; the tensors are not freed), computed by kiln_op_eval; NULL
 * (after printing why) when it fails. */
kiln_tensor *kiln_fused_test_eval(const char *op, const char *attrs, int n_in, kiln_tensor **in);

#endif
