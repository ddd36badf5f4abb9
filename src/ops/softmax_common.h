/*
 * softmax_common.h — shared machinery for Softmax and LogSoftmax.
 *
 * Opset 13+: the op normalizes along the one dim `axis` (default -1).
 * Opsets 11-12 (and older): the input is coerced to 2-D (prod(dims[:axis]),
 * prod(dims[axis:])) with `axis` defaulting to 1, and each row is normalized.
 * Both are the same kernel over (outer, n, inner) with inner = 1 for the old form.
 * Rows are shifted by their max before exp (no overflow), and exp-sums accumulate in
 * double. Floats only.
 *
 * Gradients (internal ops kiln.SoftmaxGrad / kiln.LogSoftmaxGrad, inputs (Y, dY), the
 * forward node's axis and opset): along each normalized row,
 *   Softmax:    dX = Y * (dY - sum(dY * Y))
 *   LogSoftmax: dX = dY - exp(Y) * sum(dY)
 * Both read only the forward output Y, never X.
 */
#ifndef KILN_OPS_SOFTMAX_COMMON_H
#define KILN_OPS_SOFTMAX_COMMON_H

#include "../core/internal.h"

kiln_status kiln_softmax_infer(kiln_op_ctx *c);
/* log_out: write x - max - log(sum exp(x - max)) instead of exp(x - max) / sum. */
kiln_status kiln_softmax_forward(kiln_op_ctx *c, bool log_out);

/* The gradient ops: Y and dY of one float dtype and shape; dX like them. */
kiln_status kiln_softmax_grad_infer(kiln_op_ctx *c);
kiln_status kiln_softmax_grad_forward(kiln_op_ctx *c, bool log_out);
/* The rule of Softmax / LogSoftmax: emits grad_op (Y, dY) -> dX with the node's axis. */
kiln_status kiln_softmax_grad_rule(kiln_grad_ctx *g, const char *grad_op);

#endif
