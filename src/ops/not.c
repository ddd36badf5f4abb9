/* not.c — Not: y = !x elementwise on a bool tensor; opset 1. */
#include "../core/optest.h"

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, x->dtype == KILN_BOOL, KILN_ERR_TYPE, "input dtype %s is not bool",
                  kiln_dtype_name(x->dtype));
    kiln_tensor_set_shape(c->out[0], KILN_BOOL, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const uint8_t *x = c->in[0]->data;
    uint8_t *y = c->out[0]->data;
    const int64_t n = kiln_tensor_numel(c->in[0]);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] == 0;
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(1, 0, 0, 1));
    kiln_tensor *y = kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(0, 1, 1, 0));
    fails += kiln_optest("Not", "", 1, &x, 1, &y, 0, 0, "not 2x2");
    x = kt_make(KILN_BOOL, 0, NULL, KT_VALS(0));
    y = kt_make(KILN_BOOL, 0, NULL, KT_VALS(1));
    fails += kiln_optest("Not", "", 1, &x, 1, &y, 0, 0, "not scalar");
    x = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0, 1));
    fails += kiln_optest_fails("Not", "", 1, &x, 1, KILN_ERR_TYPE, "not rejects f32");
    fails += kiln_optest_sweep("Not", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_BOOL, 4, KT_DIMS(2, 3, 17, 19), 0, 2, 5421)},
                               1, "not random 2x3x17x19");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_not = {
    .precision = KILN_PREC_ANY, .out_dtype = {KILN_DT_BOOL},
    .name = "Not", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
