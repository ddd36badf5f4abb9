/*
 * unary.h — shared machinery for elementwise unary ops (Relu, Sigmoid, Exp, ...).
 * An op file defines its scalar function on double (and, where double cannot carry its
 * integer semantics, an exact int64 function) and calls one of the forwards below from
 * its cpu_forward. Floats are computed in double and rounded to the output dtype, so
 * f16/bf16 inputs see the same values as the reference.
 *
 * Gradients: every op of the family shares one rule, kiln_unary_grad, which emits
 * kiln.UnaryGrad(dY, X, Y) (defined in unary.c) with attribute op naming the forward op.
 * Its kernel finds that op in the registry and evaluates the derivative the op file hands
 * over in a kiln_unary_grad_def, through the kiln_op_def's `family`:
 *
 *     static double deriv(double x, double y, const kiln_unary_args *a) { return 1 - y * y; }
 *     static const kiln_unary_grad_def grad_def = {deriv, NULL, KILN_UNARY_Y, NULL};
 *     const kiln_op_def kiln_op_tanh = {..., .grad = kiln_unary_grad, .family = &grad_def};
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

/* ---------------------------------------------------------------- gradients */

/* dy/dx at x, where y is the forward's output at x; a as the op's args() gives it. */
typedef double (*kiln_unary_derivfn)(double x, double y, const kiln_unary_args *a);
/* f32 fast path: dx[i] = dy[i] * dy/dx at (x[i], y[i]) for i < n. x or y is NULL when the
 * op's `uses` leaves it out. */
typedef void (*kiln_unary_grad_f32fn)(const float *x, const float *y, const float *dy, float *dx,
                                      int64_t n, const kiln_unary_args *a);

/* Which forward values deriv reads: the rule passes only those to kiln.UnaryGrad, so
 * the others need not be kept alive until the backward pass. */
enum { KILN_UNARY_X = 1, KILN_UNARY_Y = 2 };

typedef struct kiln_unary_grad_def {
    kiln_unary_derivfn deriv;
    /* The attribute constants deriv reads, from the forward node's attributes (which
     * kiln.UnaryGrad carries). NULL: deriv reads none. */
    kiln_unary_args (*args)(const kiln_node *n);
    unsigned uses; /* KILN_UNARY_X | KILN_UNARY_Y */
    kiln_unary_grad_f32fn f32; /* NULL: deriv per element */
} kiln_unary_grad_def;

/* The gradient rule of the family: dX = kiln.UnaryGrad(dY, X, Y) (X, Y as `uses` says),
 * where the derivative is 0 the result is 0 even for an infinite or NaN dY (Relu, Clip,
 * Floor: the gradient does not flow there at all). Inputs other than X (Clip's bounds)
 * get no gradient: asking for one fails with KILN_ERR_UNSUPPORTED. */
kiln_status kiln_unary_grad(kiln_grad_ctx *g);
/* What kiln.UnaryGrad computes: dx = dy * dy/dx at (x, y) elementwise in dy's dtype (0
 * where the derivative is 0, whatever dy), with the derivative gd and its constants args;
 * x or y NULL where gd's `uses` leaves it out. dx may be dy (in place). For fused ops that
 * end in an activation's gradient (src/ops/max_pool_dropout.c). */
void kiln_unary_grad_apply(const kiln_unary_grad_def *gd, const kiln_unary_args *args, const kiln_tensor *dy,
                           const kiln_tensor *x, const kiln_tensor *y, kiln_tensor *dx);
/* For the ops' tests: kiln_gradcheck of op on the f64 vector vals (n elements). */
int kiln_unary_gradcheck(const char *op, const char *attrs, int opset, int n, const double *vals,
                         const char *label);

#endif
