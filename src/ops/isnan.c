/* isnan.c — IsNaN: y = isnan(x) as bool. Float dtypes; opsets 9, 13 and 20. */
#include "../core/optest.h"

#include <math.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE, "input dtype %s is not a float type",
                  kiln_dtype_name(x->dtype));
    kiln_tensor_set_shape(c->out[0], KILN_BOOL, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    uint8_t *y = c->out[0]->data;
    const int64_t n = kiln_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) y[i] = isnan(kiln_get_f64(x, i)) != 0;
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(-1.2, NAN, INFINITY, 2.8, -INFINITY, -NAN));
    kiln_tensor *y = kt_make(KILN_BOOL, 1, KT_DIMS(6), KT_VALS(0, 1, 0, 0, 0, 1));
    fails += kiln_optest("IsNaN", "", 1, &x, 1, &y, 0, 0, "isnan f32");
    x = kt_make(KILN_F16, 2, KT_DIMS(1, 2), KT_VALS(NAN, 65504));
    y = kt_make(KILN_BOOL, 2, KT_DIMS(1, 2), KT_VALS(1, 0));
    fails += kiln_optest("IsNaN", "", 1, &x, 1, &y, 0, 0, "isnan f16");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, 1));
    fails += kiln_optest_fails("IsNaN", "", 1, &x, 1, KILN_ERR_TYPE, "isnan rejects i32");
    fails += kiln_optest_sweep("IsNaN", "", 0, 1,
                               (kiln_tensor *[]){kt_make(KILN_F32, 2, KT_DIMS(3, 3),
                                                         KT_VALS(NAN, 0, 1, -INFINITY, INFINITY, NAN, -0.0, 5, NAN))},
                               1, "isnan specials");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_isnan = {
    .precision = KILN_PREC_ANY, .out_dtype = {KILN_DT_BOOL},
    .name = "IsNaN", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
