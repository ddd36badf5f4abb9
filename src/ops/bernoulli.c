/*
 * bernoulli.c — Bernoulli (opset 15+): y_i = 1 with probability p_i (input 0, a float
 * tensor), else 0, in attribute `dtype`'s type (any numeric or bool; default the input's).
 * `seed` (float) selects another stream. Element i is u_i < p_i ? 1 : 0 with u_i the
 * counter-based stream of random.h (run seed, seed attribute, the node's first output):
 * p <= 0 never draws 1, p >= 1 always, NaN never; the CUDA kernel (src/cuda/random.cu)
 * draws the same values for the same run seed.
 *
 * No gradient (not differentiable: nondiff_inputs); `.random`: never constant-folded.
 */
#include "random.h"

#include "../core/optest.h"

#include <math.h>
#include <stdio.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *p = c->in[0];
    KILN_OP_CHECK(c, kiln_random_float_dtype(p->dtype), KILN_ERR_TYPE, "input dtype %s is not a float type",
                  kiln_dtype_name(p->dtype));
    kiln_dtype dt = p->dtype;
    const kiln_attr *a = kiln_node_attr(c->node, "dtype");
    if (a) {
        KILN_OP_CHECK(c, a->type == KILN_ATTR_INT && a->i > 0 && a->i <= 64 && kiln_dtype_valid((kiln_dtype)a->i) &&
                             (kiln_dtype_is_float((kiln_dtype)a->i) || kiln_dtype_is_int((kiln_dtype)a->i) || a->i == KILN_BOOL),
                      KILN_ERR_UNSUPPORTED, "attribute dtype = %lld is not a numeric or bool type",
                      a->type == KILN_ATTR_INT ? (long long)a->i : -1LL);
        dt = (kiln_dtype)a->i;
    }
    kiln_tensor_set_shape(c->out[0], dt, p->ndim, p->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *p = c->in[0];
    kiln_tensor *y = c->out[0];
    const uint64_t key = kiln_random_key(c->seed, kiln_random_parts(c->node));
    const int64_t n = kiln_tensor_numel(y);
    for (int64_t i = 0; i < n; i++) kiln_set_f64(y, i, kiln_random_u(key, (uint64_t)i) < kiln_get_f64(p, i) ? 1.0 : 0.0);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
/* Draws of the documented stream (kiln_optest's node has no output indices; run seed 0). */
static kiln_tensor *expected(kiln_dtype dt, const kiln_tensor *p) {
    kiln_tensor *t = kt_make(dt, p->ndim, p->dims, NULL);
    const uint64_t key = kiln_random_key(0, (kiln_random_keyparts){0, 0, 0, 0});
    for (int64_t i = 0; t && i < kiln_tensor_numel(t); i++)
        kiln_set_f64(t, i, kiln_random_u(key, (uint64_t)i) < kiln_get_f64(p, i) ? 1.0 : 0.0);
    return t;
}

static int test(void) {
    int fails = 0;
    kiln_tensor *p = kt_rand(KILN_F32, 2, KT_DIMS(5, 7), 0, 1, 41);
    fails += kiln_optest("Bernoulli", "", 1, (kiln_tensor *[]){p}, 1, (kiln_tensor *[]){expected(KILN_F32, p)}, 0, 0,
                         "bernoulli f32");
    p = kt_rand(KILN_F64, 1, KT_DIMS(13), 0, 1, 42);
    fails += kiln_optest("Bernoulli", "dtype=9", 1, (kiln_tensor *[]){p}, 1, (kiln_tensor *[]){expected(KILN_BOOL, p)},
                         0, 0, "bernoulli f64 to bool");
    p = kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(0, -1, NAN, 1, 2, 1));
    fails += kiln_optest("Bernoulli", "dtype=7", 1, (kiln_tensor *[]){p}, 1,
                         (kiln_tensor *[]){kt_make(KILN_I64, 1, KT_DIMS(6), KT_VALS(0, 0, 0, 1, 1, 1))}, 0, 0,
                         "bernoulli p = 0, -1, NaN never; 1, 2 always (int64)");

    /* the share of ones over 40000 draws at p = 0.3 */
    kiln_tensor *out = NULL;
    kiln_tensor *pp = kt_make(KILN_F32, 1, KT_DIMS(40000), NULL);
    for (int i = 0; pp && i < 40000; i++) ((float *)pp->data)[i] = 0.3f;
    bool ok = pp && kiln_optest_eval("", "Bernoulli", "", 0, 1, &pp, 1, &out, "bernoulli share");
    double ones = 0;
    for (int64_t i = 0; ok && i < kiln_tensor_numel(out); i++) ones += kiln_get_f64(out, i);
    const double share = ones / 40000, sd = sqrt(0.3 * 0.7 / 40000);
    ok = ok && fabs(share - 0.3f) <= 5 * sd;
    printf("%s bernoulli p = 0.3: share of ones %.4f over 40000 draws (want 0.3 +- %.4f)\n", ok ? "ok  " : "FAIL",
           share, 5 * sd);
    fails += !ok;
    kiln_tensor_free(out);
    kiln_tensor_free(pp);

    fails += kiln_optest_fails("Bernoulli", "", 1, (kiln_tensor *[]){kt_make(KILN_I32, 1, KT_DIMS(3), NULL)}, 1,
                               KILN_ERR_TYPE, "bernoulli rejects an int32 input");
    fails += kiln_optest_fails("Bernoulli", "dtype=8", 1, (kiln_tensor *[]){kt_make(KILN_F32, 1, KT_DIMS(3), NULL)}, 1,
                               KILN_ERR_UNSUPPORTED, "bernoulli rejects dtype string");
    fails += kiln_optest_sweep("Bernoulli", "seed=2.0", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 5, 17, 19), 0, 1, 43)}, 1,
                               "bernoulli 3x5x17x19");
    fails += kiln_optest_sweep("Bernoulli", "dtype=1", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(2, 1), 0, 1, 44)}, 1,
                               "bernoulli stochastic depth's (N, 1)");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_bernoulli = {
    .precision = KILN_PREC_FP32, .random = true,
    .name = "Bernoulli", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .nondiff_inputs = 1u << 0, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
