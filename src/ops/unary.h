/*
 * unary.h — shared machinery for elementwise unary ops (Relu, Sigmoid, Exp, ...).
 * An op file defines its scalar function on double (and, where double cannot carry its
 * integer semantics, an exact int64 function) and calls one of the forwards below from
 * its cpu_forward. Floats are computed in double and rounded to the output dtype, so
 * f16/bf16 inputs see the same values as the reference.
 */
#ifndef KILN_OPS_UNARY_H
#define KILN_OPS_UNARY_H

#include "../core/internal.h"

typedef double (*kiln_unary_fn)(double x, const kiln_node *n);

/* Elementwise loops with fewer elements than this stay on one thread: a thread team
 * costs more than it saves. */
#define KILN_UNARY_PAR_MIN 32768

/* Attribute constants an op reads once per call, so the scalar function does not look
 * attributes up per element. Each op documents which fields it uses. */
typedef struct kiln_unary_args {
    double alpha, beta, gamma;
} kiln_unary_args;

typedef double (*kiln_unary_argfn)(double x, const kiln_unary_args *a);
/* Exact integer form, for ops whose integer results double cannot carry (|x| > 2^53). */
typedef int64_t (*kiln_unary_intfn)(int64_t x);

/* Output has the input's dtype and shape; only float dtypes are accepted unless
 * allow_int is true. */
kiln_status kiln_unary_infer(kiln_op_ctx *c, bool allow_int);
/* out[i] = fn(in[i]) over every element, in any dtype. */
kiln_status kiln_unary_forward(kiln_op_ctx *c, kiln_unary_fn fn);
/* out[i] = fn(in[i], a) for float dtypes; ifn(in[i]) for integer dtypes (ifn NULL:
 * fn through double). Large tensors are split over the CPU threads. a may be NULL. */
kiln_status kiln_unary_forward_args(kiln_op_ctx *c, kiln_unary_argfn fn, kiln_unary_intfn ifn,
                                    const kiln_unary_args *a);

#endif
