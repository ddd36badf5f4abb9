/* lrn.c — LRN: local response normalization across channels (AlexNet), opsets 1 and 13.
 * For X (N, C, d1, ...): square_sum[c] = sum of x[c']^2 over c' in
 * [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] within [0, C), and
 * y = x / (bias + alpha / size * square_sum)^beta. size (required, >= 1), alpha (1e-4),
 * beta (0.75), bias (1.0). Float dtypes, computed in double. */
#include "../core/optest.h"

#include <inttypes.h>
#include <math.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE, "input dtype %s is not a float type",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 3, KILN_ERR_SHAPE, "input must be (N, C, d1, ...), got rank %d", x->ndim);
    KILN_OP_CHECK(c, kiln_node_attr(c->node, "size") != NULL, KILN_ERR_INVALID_ARGUMENT,
                  "attribute 'size' is required");
    const int64_t size = kiln_attr_int(c->node, "size", 0);
    KILN_OP_CHECK(c, size >= 1, KILN_ERR_INVALID_ARGUMENT, "size=%" PRId64 " must be >= 1", size);
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    const int64_t size = kiln_attr_int(c->node, "size", 1);
    const double alpha = kiln_attr_float(c->node, "alpha", 1e-4f), beta = kiln_attr_float(c->node, "beta", 0.75f),
                 bias = kiln_attr_float(c->node, "bias", 1.0f);
    const int64_t N = x->dims[0], C = x->dims[1], S = kiln_tensor_numel(x) / (N * C > 0 ? N * C : 1);
    const int64_t lo = (size - 1) / 2, hi = size - 1 - lo; /* floor and ceil of (size - 1) / 2 */
    for (int64_t n = 0; n < N; n++)
        for (int64_t ch = 0; ch < C; ch++)
            for (int64_t s = 0; s < S; s++) {
                double sq = 0;
                for (int64_t k = ch - lo; k <= ch + hi; k++) {
                    if (k < 0 || k >= C) continue;
                    const double v = kiln_get_f64(x, (n * C + k) * S + s);
                    sq += v * v;
                }
                const int64_t at = (n * C + ch) * S + s;
                kiln_set_f64(y, at, kiln_get_f64(x, at) / pow(bias + alpha / (double)size * sq, beta));
            }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* (1, 3, 1, 2), size 3 (channels c-1..c+1), alpha 0.3, beta 0.5, bias 2: by hand,
     * y = x / sqrt(2 + 0.1 * square_sum) */
    kiln_tensor *x = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 1, 2), KT_VALS(1, 2, 3, 4, 5, 6));
    kiln_tensor *y = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 1, 2),
                             KT_VALS(1 / sqrt(3.0), 2 / sqrt(4.0), 3 / sqrt(5.5), 4 / sqrt(7.6), 5 / sqrt(5.4),
                                     6 / sqrt(7.2)));
    fails += kiln_optest("LRN", "size=3;alpha=0.3;beta=0.5;bias=2.0", 1, &x, 1, &y, 1e-6, 1e-6, "lrn size 3");
    /* size 2: channels c..c+1 (floor 0 below, ceil 1 above); defaults */
    x = kt_make(KILN_F64, 3, KT_DIMS(1, 2, 1), KT_VALS(10, 20));
    y = kt_make(KILN_F64, 3, KT_DIMS(1, 2, 1),
                KT_VALS(10 / pow(1 + 0.5e-4 * 500, 0.75), 20 / pow(1 + 0.5e-4 * 400, 0.75)));
    fails += kiln_optest("LRN", "size=2", 1, &x, 1, &y, 0, 1e-6, "lrn size 2 defaults f64");
    x = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 1, 2), NULL);
    fails += kiln_optest_fails("LRN", "", 1, &x, 1, KILN_ERR_INVALID_ARGUMENT, "lrn needs size");
    x = kt_make(KILN_F32, 2, KT_DIMS(1, 3), NULL);
    fails += kiln_optest_fails("LRN", "size=3", 1, &x, 1, KILN_ERR_SHAPE, "lrn rank 2");
    fails += kiln_optest_sweep("LRN", "size=5;alpha=0.001;beta=0.75;bias=1.0", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 7, 9, 11), -3, 3, 6601)}, 1,
                               "lrn random size 5");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_lrn = {
    .precision = KILN_PREC_FP32,
    .name = "LRN", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
