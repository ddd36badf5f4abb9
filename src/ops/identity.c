/* identity.c — Identity: y = x, any tensor dtype (opsets 1..21; sequence and optional
 * inputs of opset 14+/16+ are not tensors and are rejected by the importer). The output
 * may share the input's storage (alias_outputs); otherwise the bytes are copied. */
#include "../core/optest.h"
#include "movement.h"

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) { return kiln_copy_input0(c); }

/* dX = dY itself: no node at all. */
static kiln_status grad(kiln_grad_ctx *g) {
    g->dx[0] = g->dy[0];
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(-1, 0, 2, -3, 4.5, -0.5));
    kiln_tensor *y = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(-1, 0, 2, -3, 4.5, -0.5));
    fails += kiln_optest("Identity", "", 1, &x, 1, &y, 0, 0, "identity f32");
    x = kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(1, 0, 1));
    y = kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(1, 0, 1));
    fails += kiln_optest("Identity", "", 1, &x, 1, &y, 0, 0, "identity bool");
    x = kt_scalar(KILN_I64, -9000000000.0);
    y = kt_scalar(KILN_I64, -9000000000.0);
    fails += kiln_optest("Identity", "", 1, &x, 1, &y, 0, 0, "identity i64 scalar");
    x = kt_make(KILN_F16, 2, KT_DIMS(0, 4), NULL);
    y = kt_make(KILN_F16, 2, KT_DIMS(0, 4), NULL);
    fails += kiln_optest("Identity", "", 1, &x, 1, &y, 0, 0, "identity empty f16");
    fails += kiln_gradcheck("Identity", "", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 1)}, NULL,
                            "identity grad");
    kiln_tensor *r = kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 2);
    x = kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 3);
    fails += kiln_grad_route_check("Identity", "", 0, 1, &x, 1, 0, r, kiln_tensor_clone(NULL, r),
                                   true, "identity grad is dY itself");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Identity", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 7), -2, 2, 1302)},
                               1, "identity f32");
    fails += kiln_optest_sweep("Identity", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(3, 5, 7), -2, 2, 1303)},
                               1, "identity i64");
    fails += kiln_optest_sweep("Identity", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(3, 5, 7), -2, 2, 1304)},
                               1, "identity u8");
    fails += kiln_optest_sweep("Identity", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 5006)},
                               1, "identity (NHWC) ");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_identity = {
    .precision = KILN_PREC_FOLLOW, .layout = KILN_LAYOUT_UNARY,
    .name = "Identity", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .alias_outputs = 1,
    .grad = grad,
};
