/* trilu.c — Trilu: the upper (upper=1, the default) or lower (upper=0) triangle of each
 * matrix in the last two dims of X, the rest set to 0; opset 14. Optional input k (an
 * int64 scalar, default 0) moves the diagonal: upper keeps elements with col - row >= k,
 * lower those with col - row <= k. Any dtype; X of rank >= 2. */
#include "../core/optest.h"

#include <string.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, x->ndim >= 2, KILN_ERR_SHAPE, "input must have rank >= 2, got %d", x->ndim);
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE, "input dtype %s is not supported",
                  kiln_dtype_name(x->dtype));
    const int64_t upper = kiln_attr_int(c->node, "upper", 1);
    KILN_OP_CHECK(c, upper == 0 || upper == 1, KILN_ERR_INVALID_ARGUMENT, "upper=%lld must be 0 or 1",
                  (long long)upper);
    if (c->n_in > 1 && c->in[1]) {
        const kiln_tensor *k = c->in[1];
        KILN_OP_CHECK(c, k->dtype == KILN_I64 && kiln_tensor_numel(k) == 1, KILN_ERR_TYPE,
                      "input 'k' must be an int64 scalar, got %s with %lld elements", kiln_dtype_name(k->dtype),
                      (long long)kiln_tensor_numel(k));
    }
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    const bool upper = kiln_attr_int(c->node, "upper", 1) != 0;
    const int64_t k = c->n_in > 1 && c->in[1] ? *(const int64_t *)c->in[1]->data : 0;
    const int64_t rows = x->dims[x->ndim - 2], cols = x->dims[x->ndim - 1];
    const int64_t mats = rows > 0 && cols > 0 ? kiln_tensor_numel(x) / (rows * cols) : 0;
    const size_t es = kiln_dtype_size(x->dtype);
    const char *xp = x->data;
    char *yp = y->data; // (mats, rows, cols)
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < rows; i++) {
            const size_t off = (size_t)((m * rows + i) * cols) * es;
            /* kept: cols [lo, hi) of this row */
            int64_t lo = upper ? i + k : 0, hi = upper ? cols : i + k + 1;
            lo = lo < 0 ? 0 : lo > cols ? cols : lo;
            hi = hi < lo ? lo : hi > cols ? cols : hi;
            memset(yp + off, 0, (size_t)lo * es);
            memcpy(yp + off + (size_t)lo * es, xp + off + (size_t)lo * es, (size_t)(hi - lo) * es);
            memset(yp + off + (size_t)hi * es, 0, (size_t)(cols - hi) * es);
        }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* a 3x4 matrix 1..12: which survive is read off by hand */
    static const double m[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    kiln_tensor *in[2];
    kiln_tensor *y;
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), m);
    y = kt_make(KILN_F32, 2, KT_DIMS(3, 4), KT_VALS(1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12));
    fails += kiln_optest("Trilu", "", 1, in, 1, &y, 0, 0, "trilu upper");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), m);
    y = kt_make(KILN_F32, 2, KT_DIMS(3, 4), KT_VALS(1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0));
    fails += kiln_optest("Trilu", "upper=0", 1, in, 1, &y, 0, 0, "trilu lower");
    in[0] = kt_make(KILN_I64, 2, KT_DIMS(3, 4), m);
    in[1] = kt_scalar(KILN_I64, 1);
    y = kt_make(KILN_I64, 2, KT_DIMS(3, 4), KT_VALS(0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12));
    fails += kiln_optest("Trilu", "", 2, in, 1, &y, 0, 0, "trilu upper k=1 i64");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), m);
    in[1] = kt_scalar(KILN_I64, -1);
    y = kt_make(KILN_F32, 2, KT_DIMS(3, 4), KT_VALS(0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0));
    fails += kiln_optest("Trilu", "upper=0", 2, in, 1, &y, 0, 0, "trilu lower k=-1");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), m);
    in[1] = kt_scalar(KILN_I64, 7);
    y = kt_make(KILN_F32, 2, KT_DIMS(3, 4), NULL);
    fails += kiln_optest("Trilu", "", 2, in, 1, &y, 0, 0, "trilu upper k beyond the matrix: zeros");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), m);
    in[1] = kt_scalar(KILN_I64, -7);
    y = kt_make(KILN_F32, 2, KT_DIMS(3, 4), NULL);
    fails += kiln_optest("Trilu", "upper=0", 2, in, 1, &y, 0, 0, "trilu lower k below the matrix: zeros");
    /* batch of two 2x2, bool */
    in[0] = kt_make(KILN_BOOL, 3, KT_DIMS(2, 2, 2), KT_VALS(1, 1, 1, 1, 1, 0, 1, 1));
    y = kt_make(KILN_BOOL, 3, KT_DIMS(2, 2, 2), KT_VALS(1, 0, 1, 1, 1, 0, 1, 1));
    fails += kiln_optest("Trilu", "upper=0", 1, in, 1, &y, 0, 0, "trilu lower batched bool");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("Trilu", "", 1, in, 1, KILN_ERR_SHAPE, "trilu rejects rank 1");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    fails += kiln_optest_fails("Trilu", "upper=2", 1, in, 1, KILN_ERR_INVALID_ARGUMENT, "trilu rejects upper=2");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Trilu", "", 2, in, 1, KILN_ERR_TYPE, "trilu rejects a k of 2 elements");
    fails += kiln_optest_sweep("Trilu", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 5501),
                                                 kt_scalar(KILN_I64, -2)},
                               1, "trilu random 2x3x17x19 k=-2");
    fails += kiln_optest_sweep("Trilu", "upper=0", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 33, 5), -3, 3, 5502)}, 1,
                               "trilu lower random 3x33x5");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_trilu = {
    .precision = KILN_PREC_FOLLOW,
    .name = "Trilu", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
