/*
 * unary.h — shared machinery for elementwise unary ops (Relu, Sigmoid, Exp, ...).
 * An op file defines its scalar function on double and, optionally, a float fast path,
 * and declares its kiln_op_def with KILN_UNARY_OP. Floats are computed in double and
 * rounded to the output dtype, so f16/bf16 inputs see the same values as the reference.
 */
#ifndef KILN_OPS_UNARY_H
#define KILN_OPS_UNARY_H

#include "../core/internal.h"

typedef double (*kiln_unary_fn)(double x, const kiln_node *n);

/* Output has the input's dtype and shape; only float dtypes are accepted unless
 * allow_int is true. */
kiln_status kiln_unary_infer(kiln_op_ctx *c, bool allow_int);
/* out[i] = fn(in[i]) over every element, in any dtype. */
kiln_status kiln_unary_forward(kiln_op_ctx *c, kiln_unary_fn fn);

#endif
