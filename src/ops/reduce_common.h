/*
 * reduce_common.h — shared machinery for ReduceSum, ReduceMean, ReduceMax and ReduceMin.
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
 * -inf / the dtype's minimum for Max, +inf / the dtype's maximum for Min.
 */
#ifndef KILN_OPS_REDUCE_COMMON_H
#define KILN_OPS_REDUCE_COMMON_H

#include "../core/internal.h"

typedef enum kiln_reduce_kind {
    KILN_REDUCE_SUM,
    KILN_REDUCE_MEAN,
    KILN_REDUCE_MAX,
    KILN_REDUCE_MIN
} kiln_reduce_kind;

/* Output dtype = input dtype; shape from the axes and keepdims. Floats are always
 * accepted, integers when allow_int, bool when allow_bool. axes_input_opset: the first
 * opset in which axes is an input rather than an attribute. */
kiln_status kiln_reduce_infer(kiln_op_ctx *c, int axes_input_opset, bool allow_int,
                              bool allow_bool);
kiln_status kiln_reduce_forward(kiln_op_ctx *c, int axes_input_opset, kiln_reduce_kind kind);

#endif
