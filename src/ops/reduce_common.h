/*
 * reduce_common.h — shared machinery for ReduceSum, ReduceMean, ReduceMax, ReduceMin and
 * ReduceL2, and the forward-only ReduceL1, ReduceSumSquare, ReduceProd, ReduceLogSum and
 * ReduceLogSumExp.
 *
 * Axes come from the `axes` attribute before the opset where ONNX moved them to an
 * optional second input (13 for ReduceSum, 18 for the others); from that opset on the
 * input is read (it is a value input: its data is known when the plan is built) and
 * `noop_with_empty_axes` applies. Empty or absent axes reduce every dim unless
 * noop_with_empty_axes=1, which makes the op an identity. Repeated axes are rejected.
 *
 * Floats accumulate in double and are rounded once to the output dtype; integers
 * accumulate in 64 bits (sums wrap like the output dtype would). A reduction over an
 * empty set gives the identity of the reduction: 0 for Sum, NaN for a float Mean (0/0),
 * -inf / the dtype's minimum for Max, +inf / the dtype's maximum for Min, 1 for Prod, 0
 * for L1, L2 and SumSquare, -inf for LogSum and LogSumExp. Integers: L1, SumSquare and
 * Prod accumulate exactly in 64 bits (wrapping); L2, LogSum and LogSumExp go through
 * double and are truncated toward zero.
 *
 * Gradients: internal ops kiln.Reduce{Sum,Mean,Max,Min,L2}Grad with inputs (X, dY, axes) and,
 * for Max/Min/L2, (X, dY, Y, axes) with the forward output Y; the forward node's attributes and
 * opset travel with them, so the axes are read exactly as the forward read them. dY (the
 * forward output's shape, with or without keepdims) is broadcast back over the reduced
 * dims: Sum copies it, Mean divides by the count reduced, Max/Min give it to the elements
 * equal to the result, split evenly among ties (a subgradient, as torch.amax does), L2 gives
 * dY / Y * X (in double), 0 where Y = 0 (torch.linalg.vector_norm's backward). The
 * Sum/Mean gradients read only X's shape. Floats only.
 */
#ifndef KILN_OPS_REDUCE_COMMON_H
#define KILN_OPS_REDUCE_COMMON_H

#include "../core/internal.h"

typedef enum kiln_reduce_kind {
    KILN_REDUCE_SUM,
    KILN_REDUCE_MEAN,
    KILN_REDUCE_MAX,
    KILN_REDUCE_MIN,
    /* the rest: forward through the shared reduction loop (more_kind); of them only L2 has a
     * gradient (swin_v2's normalized attention) */
    KILN_REDUCE_L1,          /* sum |x| */
    KILN_REDUCE_L2,          /* sqrt(sum x^2) */
    KILN_REDUCE_SUM_SQUARE,  /* sum x^2 */
    KILN_REDUCE_PROD,        /* product */
    KILN_REDUCE_LOG_SUM,     /* log(sum x) */
    KILN_REDUCE_LOG_SUM_EXP  /* log(sum exp x), as m + log(sum exp(x - m)) with m the max */
} kiln_reduce_kind;

/* Output dtype = input dtype; shape from the axes and keepdims. Floats are always
 * accepted, integers when allow_int, bool when allow_bool. axes_input_opset: the first
 * opset in which axes is an input rather than an attribute. */
kiln_status kiln_reduce_infer(kiln_op_ctx *c, int axes_input_opset, bool allow_int,
                              bool allow_bool);
kiln_status kiln_reduce_forward(kiln_op_ctx *c, int axes_input_opset, kiln_reduce_kind kind);

/* The gradient ops (inputs X, dY[, Y for Max/Min], axes?): dX like X. */
kiln_status kiln_reduce_grad_infer(kiln_op_ctx *c, int axes_input_opset, kiln_reduce_kind kind);
kiln_status kiln_reduce_grad_forward(kiln_op_ctx *c, int axes_input_opset, kiln_reduce_kind kind);
/* Max/Min: scratch for the tie counts. */
size_t kiln_reduce_grad_workspace(const kiln_op_ctx *c);
/* Self-test helper: kiln_gradcheck of op on a random f64 (2,3,4) input (values in
 * [-1, 1): no ties for Max/Min) with axes as an input when n_axes >= 0. */
int kiln_reduce_gradcheck(const char *op, const char *attrs, int opset, int n_axes, const int64_t *axes,
                          uint64_t seed, const char *label);
/* The rule of a reduction: emits grad_op (X, dY[, Y], axes?) -> dX. */
kiln_status kiln_reduce_grad_rule(kiln_grad_ctx *g, const char *grad_op, kiln_reduce_kind kind);

#endif
