/* non_zero.c — NonZero(X): the indices of X's nonzero elements as int64 (rank, count), in
 * row-major order (numpy.nonzero stacked); opsets 9 and 13. The output's size depends on
 * X's values, so X is a value input: it must be known when the plan is built (a constant,
 * or a graph input's value); computed at run time it is refused (KILN_ERR_UNSUPPORTED).
 * Any numeric or bool dtype; a scalar gives (0, 1) or (0, 0). */
#include "../core/optest.h"

#include <math.h>

static int64_t count_nonzero(const kiln_tensor *x) {
    int64_t n = kiln_tensor_numel(x), k = 0;
    const bool fl = kiln_dtype_is_float(x->dtype);
    for (int64_t i = 0; i < n; i++) k += fl ? kiln_get_f64(x, i) != 0 : kiln_get_i64(x, i) != 0;
    return k;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype) || kiln_dtype_is_int(x->dtype) || x->dtype == KILN_BOOL,
                  KILN_ERR_TYPE, "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->data != NULL || kiln_tensor_numel(x) == 0, KILN_ERR_UNSUPPORTED,
                  "X must be known when the plan is built (it decides the output's size)");
    const int64_t dims[2] = {x->ndim, x->data ? count_nonzero(x) : 0};
    kiln_tensor_set_shape(c->out[0], KILN_I64, 2, dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    int64_t *y = c->out[0]->data; // (rank, count)
    const int64_t n = kiln_tensor_numel(x), count = c->out[0]->dims[1];
    const bool fl = kiln_dtype_is_float(x->dtype);
    int64_t k = 0;
    for (int64_t i = 0; i < n && k < count; i++) {
        if (fl ? kiln_get_f64(x, i) == 0 : kiln_get_i64(x, i) == 0) continue;
        int64_t rem = i;
        for (int d = x->ndim - 1; d >= 0; d--) {
            y[d * count + k] = rem % x->dims[d];
            rem /= x->dims[d];
        }
        k++;
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(1, 0, 1, 1));
    kiln_tensor *y = kt_make(KILN_I64, 2, KT_DIMS(2, 3), KT_VALS(0, 1, 1, 0, 0, 1));
    fails += kiln_optest("NonZero", "", 1, &x, 1, &y, 0, 0, "non_zero the spec's example");
    x = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(0, -0.0, 2.5, 0, NAN));
    y = kt_make(KILN_I64, 2, KT_DIMS(1, 2), KT_VALS(2, 4));
    fails += kiln_optest("NonZero", "", 1, &x, 1, &y, 0, 0, "non_zero f32, -0 is zero, NaN is not");
    x = kt_make(KILN_I32, 3, KT_DIMS(2, 1, 2), KT_VALS(0, 0, 0, 0));
    y = kt_make(KILN_I64, 2, KT_DIMS(3, 0), NULL);
    fails += kiln_optest("NonZero", "", 1, &x, 1, &y, 0, 0, "non_zero all zero");
    x = kt_scalar(KILN_I64, 7);
    y = kt_make(KILN_I64, 2, KT_DIMS(0, 1), NULL);
    fails += kiln_optest("NonZero", "", 1, &x, 1, &y, 0, 0, "non_zero scalar");
    fails += kiln_optest_sweep("NonZero", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I32, 3, KT_DIMS(3, 7, 5), -1, 2, 6911)}, 1,
                               "non_zero random");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_non_zero = {
    .precision = KILN_PREC_ANY, .out_dtype = {KILN_DT_I64},
    .name = "NonZero", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 0, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
