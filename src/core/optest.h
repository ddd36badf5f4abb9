/*
 * optest.h — helpers for the test cases that live in each op file (the `test` member of
 * kiln_op_def). A case builds one node, runs shape inference and the CPU reference, and
 * compares with expected values as |x - ref| <= atol + rtol*|ref| (NaN never passes),
 * printing the share of the error budget used.
 *
 *   static int test(void) {
 *       int fails = 0;
 *       kiln_tensor *x = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(-1, 0, 2, -3));
 *       kiln_tensor *y = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(0, 0, 2, 0));
 *       fails += kiln_optest("Relu", "", 1, &x, 1, &y, 0, 0, "relu basic");
 *       return fails;
 *   }
 *
 * Attribute text: "axis=1;alpha=0.5;mode=reflect;pads=[1,2,1,2];scales=[1.0,2.0]".
 * A value with '.' or 'e' is a float, a bracketed list is INTS or FLOATS, anything not
 * numeric is a string. Getters accept an INT where a FLOAT is asked for.
 * The helpers take ownership of the tensors passed to them.
 */
#ifndef KILN_OPTEST_H
#define KILN_OPTEST_H

#include "internal.h"

#define KT_DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define KT_VALS(...) ((const double[]){__VA_ARGS__})

/* A tensor of dtype with values converted from doubles (vals may be NULL: zeros). */
kiln_tensor *kt_make(kiln_dtype dt, int ndim, const int64_t *dims, const double *vals);
/* A tensor filled with uniform random values in [lo, hi) from a fixed-seed generator. */
kiln_tensor *kt_rand(kiln_dtype dt, int ndim, const int64_t *dims, double lo, double hi,
                     uint64_t seed);
/* t (NULL passes through) with the entries of dim-1 indices from c on set to 0: a channel-padded
 * convolution's weights (the pad-channels pass's used_channels). Returns t. */
kiln_tensor *kt_zero_from(kiln_tensor *t, int64_t c);
/* A scalar (rank 0) tensor. */
kiln_tensor *kt_scalar(kiln_dtype dt, double v);
/* Per channel (dim 1) of x (N, C, ...) the sum and the sum of squares of its values, in
 * double, as (C) tensors of kiln.FusedConv's statistics dtype (f64 for an f32 / f64 x, f32
 * for f16 / bf16); the sum times `scale` (1: the true sums; another value: wrong
 * sums for cases that must fail). */
void kt_channel_sums(const kiln_tensor *x, double scale, kiln_tensor **sum, kiln_tensor **sq);

/* Run op on inputs (NULL entries: missing optional inputs) and compare outputs with
 * expect (NULL entries: not checked). opset 0 means the newest (21). Returns 0 on
 * success, 1 on failure (after printing why). Frees in[] and expect[]. */
int kiln_optest_opset(const char *op, const char *attrs, int opset, int n_in, kiln_tensor **in,
                      int n_out, kiln_tensor **expect, double atol, double rtol,
                      const char *label);
int kiln_optest(const char *op, const char *attrs, int n_in, kiln_tensor **in, int n_out,
                kiln_tensor **expect, double atol, double rtol, const char *label);
/* A case for the backend sweep (tests/gpu/test_backend_ops.c): inputs with no expected
 * values, typically kt_rand tensors of odd sizes and 4-D shapes that the hand-computed
 * cases are too small to reach (vector tails, several thread blocks, NHWC layouts). On
 * the CPU it checks that the reference accepts them; the sweep compares every backend
 * with that reference, allowing at least atol / rtol in f32 (0, 0: the sweep's
 * tolerances; give more where the error grows with a reduction's length). Returns 0 on
 * success, 1 on failure. Frees in[]. */
int kiln_optest_sweep(const char *op, const char *attrs, int opset, int n_in, kiln_tensor **in, int n_out,
                      const char *label);
int kiln_optest_sweep_tol(const char *op, const char *attrs, int opset, int n_in, kiln_tensor **in, int n_out,
                          double atol, double rtol, const char *label);
/* Expect the op to be rejected with status want (checked at infer or forward), and the
 * message to be non-empty. Returns 0 if it was, 1 otherwise. Frees in[]. */
int kiln_optest_fails(const char *op, const char *attrs, int n_in, kiln_tensor **in,
                      int n_out, kiln_status want, const char *label);
/* Compare two tensors (dtype, shape, values); prints a line. 0 if equal within tolerance. */
int kiln_tensor_compare(const kiln_tensor *got, const kiln_tensor *want, double atol,
                        double rtol, const char *label);
/* Finite-difference check of op's gradient rule in float64 on the CPU. The op runs on
 * in[] (f64 tensors; integer inputs such as indices may be any dtype); the loss is
 * sum_k sum(Y_k * R_k) over the op's float outputs with fixed random R_k. For every input
 * with wrt[i] (NULL: every float input not in the op's nondiff_inputs), the gradient built by autograd is compared with
 * central differences (eps 1e-6) as |a - n| <= 1e-6 + 1e-5 |n| on up to 64 elements per
 * input. Prints the share of the error budget used. Returns 0 on success. Frees in[]. */
int kiln_gradcheck(const char *op, const char *attrs, int opset, int n_in, kiln_tensor **in,
                   const bool *wrt, const char *label);
/* Same, with the op's output count given (ops with optional outputs) and a tolerance scale. */
int kiln_gradcheck_ex(const char *op, const char *attrs, int opset, int n_in, kiln_tensor **in,
                      const bool *wrt, int n_out, double tol_scale, const char *label);

/* One node of op in domain ("" for ONNX, "kiln") run on in[] (NULL entries: missing
 * optional inputs; kept) into freshly allocated out[] (the caller frees them). Its outputs
 * are the value indices 17, 18, ..., which ops keyed by their first output (Dropout's mask
 * stream) read: two calls draw the same masks. For tests that compose ops. Returns false
 * on failure, after printing a FAIL line. */
bool kiln_optest_eval(const char *domain, const char *op, const char *attrs, int opset, int n_in, kiln_tensor **in,
                      int n_out, kiln_tensor **out, const char *label);
/* kiln_tensor_compare with no tolerance, then the bytes too (a compare by value passes -0
 * for +0): 0 when got is want bit for bit. */
int kiln_tensor_same_bits(const kiln_tensor *got, const kiln_tensor *want, const char *label);

/* The sweep hook (tests/gpu/test_backend_ops.c, ggml's test-backend-ops): when set, every
 * case of kiln_optest / kiln_optest_opset / kiln_optest_sweep whose CPU reference ran hands
 * its node, inputs and CPU outputs to fn before they are compared and freed, so that the
 * same case runs on the backends under test. The tensors are the helper's (borrowed for the
 * call); atol / rtol are the case's tolerances (the least a backend is allowed in f32;
 * 0: its defaults); label is the case's. NULL (the default) turns it off. Not
 * thread-safe: tests set it once. */
typedef void (*kiln_optest_hook_fn)(const kiln_node *node, int n_in, kiln_tensor *const *in, int n_out,
                                    kiln_tensor *const *out, double atol, double rtol, const char *label);
void kiln_optest_set_hook(kiln_optest_hook_fn fn);

/* (kiln_attrs_parse, the parser of the attribute text, is in internal.h: the library uses it.) */

#endif
