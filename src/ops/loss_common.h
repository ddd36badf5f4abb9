/*
 * loss_common.h — what NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss share
 * (opsets 12/13).
 *
 * Shapes: input (N,C) or (N,C,d1..dk) of log-probabilities (NLL) or scores (SCE),
 * target (N) or (N,d1..dk) of class indices (any int dtype), optional weight (C).
 * Per element: loss[n,d] = -weight[t] * logp[n,t,d] with t = target[n,d] (weight 1 when
 * absent); elements whose target equals ignore_index (when that attribute is given) get
 * loss 0 and weight 0. Other targets outside [0, C) are an error at run time.
 * reduction: "none" (output shaped like target), "sum", or "mean" (default): the sum
 * divided by the sum of the weights of the elements not ignored (0/0 gives NaN, as the
 * ONNX reference does). Sums are taken in double.
 *
 * Gradients with respect to input 0 only (internal ops kiln.NegativeLogLikelihoodLossGrad
 * and kiln.SoftmaxCrossEntropyLossGrad, inputs (X, target, weight?, dLoss?, dLogProb?),
 * the forward node's attributes). With coef[n,d] = weight[t] * dLoss[n,d] (none),
 * weight[t] * dLoss (sum) or weight[t] * dLoss / sum of weights (mean), 0 where ignored:
 *   NLL: dX[n,k,d] = -coef[n,d] where k = t, else 0 (X's values are not read);
 *   SCE: dX[n,k,d] = coef[n,d] * (p[n,k,d] - [k = t]) + dLogProb - p * sum_k dLogProb,
 * with p = softmax(X) over C recomputed from X. Target and weight get no gradient.
 */
#ifndef KILN_OPS_LOSS_COMMON_H
#define KILN_OPS_LOSS_COMMON_H

#include "../core/internal.h"

/* Checks inputs 0..2 and the attributes; sets out[0]. */
kiln_status kiln_nll_infer(kiln_op_ctx *c);
/* Writes out[0] from logp, shaped like input 0 (any float dtype). */
kiln_status kiln_nll_forward(kiln_op_ctx *c, const kiln_tensor *logp);

/* The gradient ops: dX like X. softmax: the SCE form (reads X), else the NLL form. */
kiln_status kiln_nll_grad_infer(kiln_op_ctx *c, bool softmax);
kiln_status kiln_nll_grad_forward(kiln_op_ctx *c, bool softmax);
/* The rule of either loss: emits grad_op (X, target, weight, dLoss, dLogProb). */
kiln_status kiln_nll_grad_rule(kiln_grad_ctx *g, const char *grad_op);

#endif
