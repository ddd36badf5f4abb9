/* grad_accumulate.c — kiln.GradAccumulate: gradient accumulation over K micro-batches, as
 * the trainer does it (the mean of the K micro-batches' gradients, PyTorch's usual loop of
 * loss / K and K backward passes, summed in the order the micro-batches come):
 *
 *   inputs   0           micro   i64 scalar: micro-steps taken so far
 *            1 .. 1+n    this micro-batch's gradients, f32
 *            1+n .. 1+2n the running sums, f32, each its gradient's element count
 *   outputs  0           micro + 1
 *            1           skip    f32 scalar: 0 when this micro-step completes a step
 *                                (micro % K == K - 1; the sums then hold the mean), else 1:
 *                                kiln.OptimizerStep's found_inf input
 *            2 .. 2+n    the sums: micro % K == 0 starts them (sum = g, no zeroing pass),
 *                        later micro-steps add (sum + g); the last divides by K
 *   attributes  n (the gradient count), accumulate (K >= 2)
 *
 * Each sum's element is read before it is written: an output may share its input's
 * storage (an in-place update). Shared with the CUDA kernel: optim_math.h's helper. */
#include "../core/optest.h"
#include "optim_math.h"

#include <stdio.h>
#include <string.h>

static kiln_status read_attrs(kiln_op_ctx *c, int *n, int64_t *K) {
    *n = (int)kiln_attr_int(c->node, "n", 0);
    *K = kiln_attr_int(c->node, "accumulate", 0);
    KILN_OP_CHECK(c, *n >= 1 && *K >= 2, KILN_ERR_INVALID_ARGUMENT, "n=%d gradients, accumulate=%lld (want >= 1, >= 2)",
                  *n, (long long)*K);
    KILN_OP_CHECK(c, c->n_in == 1 + 2 * *n && c->n_out == 2 + *n, KILN_ERR_INVALID_ARGUMENT,
                  "n=%d takes %d inputs and %d outputs, got %d and %d", *n, 1 + 2 * *n, 2 + *n, c->n_in, c->n_out);
    return KILN_OK;
}

int kiln_grad_accumulate_config(struct kiln_op_ctx *c, int *n, int64_t *accumulate) {
    return read_attrs(c, n, accumulate);
}

static kiln_status infer(kiln_op_ctx *c) {
    int n;
    int64_t K;
    kiln_status st = read_attrs(c, &n, &K);
    if (st) return st;
    KILN_OP_CHECK(c, c->in[0] && c->in[0]->dtype == KILN_I64 && kiln_tensor_numel(c->in[0]) == 1, KILN_ERR_TYPE,
                  "micro must be an i64 scalar");
    for (int k = 0; k < n; k++) {
        const kiln_tensor *g = c->in[1 + k], *a = c->in[1 + n + k];
        KILN_OP_CHECK(c, g && a && g->dtype == KILN_F32 && a->dtype == KILN_F32, KILN_ERR_TYPE,
                      "gradient %d and its sum must be f32", k);
        KILN_OP_CHECK(c, kiln_tensor_numel(g) == kiln_tensor_numel(a), KILN_ERR_SHAPE,
                      "gradient %d has %lld elements, its sum %lld", k, (long long)kiln_tensor_numel(g),
                      (long long)kiln_tensor_numel(a));
        kiln_tensor_set_shape(c->out[2 + k], KILN_F32, a->ndim, a->dims);
        c->out[2 + k]->format = a->format;
    }
    kiln_tensor_set_shape(c->out[0], KILN_I64, c->in[0]->ndim, c->in[0]->dims);
    kiln_tensor_set_shape(c->out[1], KILN_F32, 0, NULL);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    int n;
    int64_t K;
    kiln_status st = read_attrs(c, &n, &K);
    if (st) return st;
    const int64_t micro = ((const int64_t *)c->in[0]->data)[0];
    const int64_t m = micro % K;
    const bool last = m == K - 1;
    for (int k = 0; k < n; k++) {
        const float *g = c->in[1 + k]->data, *a = c->in[1 + n + k]->data;
        float *o = c->out[2 + k]->data;
        const int64_t len = kiln_tensor_numel(c->in[1 + k]);
        for (int64_t i = 0; i < len; i++) o[i] = kiln_om_accumulate1(m == 0, last, K, a[i], g[i]);
    }
    ((int64_t *)c->out[0]->data)[0] = micro + 1;
    ((float *)c->out[1]->data)[0] = last ? 0.f : 1.f;
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int one(int64_t micro, int64_t K, double g0, double g1, double a0, double a1, double w0, double w1, double skip,
               const char *label) {
    char attrs[64];
    snprintf(attrs, sizeof attrs, "n=1;accumulate=%lld", (long long)K);
    kiln_tensor *in[3] = {kt_scalar(KILN_I64, (double)micro), kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(g0, g1)),
                          kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(a0, a1))};
    kiln_tensor *want[3] = {kt_scalar(KILN_I64, (double)(micro + 1)), kt_scalar(KILN_F32, skip),
                            kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(w0, w1))};
    return kiln_optest("GradAccumulate", attrs, 3, in, 3, want, 0, 1e-7, label);
}

static int test(void) {
    int fails = 0;
    /* K = 3: micro 3 starts (the old sum is ignored), 4 adds, 5 adds and divides by 3 */
    fails += one(3, 3, 1.5, -2, 99, 99, 1.5, -2, 1, "first micro-batch overwrites");
    fails += one(4, 3, 0.5, 1, 1.5, -2, 2, -1, 1, "second adds");
    fails += one(5, 3, 1, 4, 2, -1, 1, 1, 0, "third adds and takes the mean");
    fails += one(1, 2, 0.25, 0.5, 0.75, -0.5, 0.5, 0, 0, "K = 2, the mean");
    fails += kiln_optest_fails("GradAccumulate", "n=1;accumulate=1",
                               3, (kiln_tensor *[]){kt_scalar(KILN_I64, 0), kt_make(KILN_F32, 1, KT_DIMS(2), NULL),
                                                    kt_make(KILN_F32, 1, KT_DIMS(2), NULL)},
                               3, KILN_ERR_INVALID_ARGUMENT, "accumulate 1");
    fails += kiln_optest_fails("GradAccumulate", "n=1;accumulate=2",
                               3, (kiln_tensor *[]){kt_scalar(KILN_I64, 0), kt_make(KILN_F32, 1, KT_DIMS(2), NULL),
                                                    kt_make(KILN_F32, 1, KT_DIMS(3), NULL)},
                               3, KILN_ERR_SHAPE, "a sum of another size");
    return fails;
}
#endif /* KILN_OPTESTS */

/* micro' over micro, each sum over its input */
static int inplace_input(const kiln_node *nd, int out) {
    const int n = (int)kiln_attr_int(nd, "n", 0);
    if (n < 1 || nd->n_in != 1 + 2 * n) return -1;
    return out == 0 ? 0 : out >= 2 && out < 2 + n ? out - 1 + n : -1;
}

const kiln_op_def kiln_op_grad_accumulate = {
    .precision = KILN_PREC_FP32, /* f32 parameters, states and counters; low-precision gradients are cast up */
    .name = "GradAccumulate", .domain = "kiln", .min_inputs = 1, .max_inputs = -1, .min_outputs = 3,
    .max_outputs = -1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .inplace_input = inplace_input,
};
