/* size.c — Size: the number of elements of the input as an int64 scalar (opsets 1, 13, 19,
 * 21). Any input dtype; its data is not read. */
#include "../core/optest.h"

static kiln_status infer(kiln_op_ctx *c) {
    kiln_tensor_set_shape(c->out[0], KILN_I64, 0, NULL);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    *(int64_t *)c->out[0]->data = kiln_tensor_numel(c->in[0]);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 3, KT_DIMS(3, 4, 5), NULL);
    kiln_tensor *y = kt_scalar(KILN_I64, 60);
    fails += kiln_optest("Size", "", 1, &x, 1, &y, 0, 0, "size f32 3x4x5");
    x = kt_make(KILN_BOOL, 2, KT_DIMS(2, 3), NULL);
    y = kt_scalar(KILN_I64, 6);
    fails += kiln_optest("Size", "", 1, &x, 1, &y, 0, 0, "size bool 2x3");
    x = kt_scalar(KILN_I8, 3);
    y = kt_scalar(KILN_I64, 1);
    fails += kiln_optest("Size", "", 1, &x, 1, &y, 0, 0, "size of a scalar");
    x = kt_make(KILN_F16, 2, KT_DIMS(4, 0), NULL);
    y = kt_scalar(KILN_I64, 0);
    fails += kiln_optest("Size", "", 1, &x, 1, &y, 0, 0, "size of an empty tensor");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_size = {
    .precision = KILN_PREC_ANY, .out_dtype = {KILN_DT_I64},
    .name = "Size", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .shape_only_inputs = 1u << 0, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
