/* flatten.c — Flatten: x of shape (d0..dr-1) becomes the 2-D (d0*..*d(axis-1),
 * d(axis)*..*d(r-1)); axis in [-r, r], default 1 (opsets 11..21: negative axes from 11).
 * Any dtype. The bytes do not change, so the output may share the input's storage. */
#include "../core/optest.h"
#include "movement.h"

#include <inttypes.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    int64_t axis = kiln_attr_int(c->node, "axis", 1);
    KILN_OP_CHECK(c, axis >= -x->ndim && axis <= x->ndim, KILN_ERR_SHAPE,
                  "axis %" PRId64 " is out of range [-%d, %d]", axis, x->ndim, x->ndim);
    if (axis < 0) axis += x->ndim;
    int64_t dims[2] = {1, 1};
    for (int d = 0; d < x->ndim; d++) dims[d < axis ? 0 : 1] *= x->dims[d];
    kiln_tensor_set_shape(c->out[0], x->dtype, 2, dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) { return kiln_copy_input0(c); }

static kiln_status grad(kiln_grad_ctx *g) {
    g->dx[0] = kiln_grad_reshape_like(g, g->dy[0], KILN_GRAD_IN(g, 0));
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    const double v[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
                        19, 20, 21, 22, 23};
    kiln_tensor *x = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    kiln_tensor *y = kt_make(KILN_F32, 2, KT_DIMS(2, 12), v);
    fails += kiln_optest("Flatten", "", 1, &x, 1, &y, 0, 0, "flatten default axis");
    x = kt_make(KILN_I8, 3, KT_DIMS(2, 3, 4), v);
    y = kt_make(KILN_I8, 2, KT_DIMS(1, 24), v);
    fails += kiln_optest("Flatten", "axis=0", 1, &x, 1, &y, 0, 0, "flatten axis 0");
    x = kt_make(KILN_F64, 3, KT_DIMS(2, 3, 4), v);
    y = kt_make(KILN_F64, 2, KT_DIMS(24, 1), v);
    fails += kiln_optest("Flatten", "axis=3", 1, &x, 1, &y, 0, 0, "flatten axis = rank");
    x = kt_make(KILN_BOOL, 3, KT_DIMS(2, 3, 4), v);
    y = kt_make(KILN_BOOL, 2, KT_DIMS(6, 4), v);
    fails += kiln_optest("Flatten", "axis=-1", 1, &x, 1, &y, 0, 0, "flatten axis -1");
    x = kt_scalar(KILN_F32, 3);
    y = kt_make(KILN_F32, 2, KT_DIMS(1, 1), KT_VALS(3));
    fails += kiln_optest("Flatten", "axis=0", 1, &x, 1, &y, 0, 0, "flatten scalar");
    x = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    fails += kiln_optest_fails("Flatten", "axis=4", 1, &x, 1, KILN_ERR_SHAPE, "flatten axis 4");
    x = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    fails += kiln_optest_fails("Flatten", "axis=-4", 1, &x, 1, KILN_ERR_SHAPE, "flatten axis -4");
    fails += kiln_gradcheck("Flatten", "axis=2", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -1, 1, 1)},
                            NULL, "flatten grad axis 2");
    fails += kiln_gradcheck("Flatten", "axis=0", 11, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 1, 3), -1, 1, 2)},
                            NULL, "flatten grad axis 0, opset 11");
    kiln_tensor *r = kt_rand(KILN_F64, 2, KT_DIMS(6, 4), -1, 1, 3);
    y = kiln_tensor_clone(NULL, r);
    if (y) kiln_tensor_set_shape(y, KILN_F64, 3, KT_DIMS(2, 3, 4));
    x = kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -1, 1, 4);
    fails += kiln_grad_route_check("Flatten", "axis=2", 0, 1, &x, 1, 0, r, y, true,
                                   "flatten grad is a view of dY");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Flatten", "axis=2", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1306)},
                               1, "flatten axis 2 f32");
    fails += kiln_optest_sweep("Flatten", "axis=2", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1307)},
                               1, "flatten axis 2 i64");
    fails += kiln_optest_sweep("Flatten", "axis=2", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1308)},
                               1, "flatten axis 2 u8");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_flatten = {
    .precision = KILN_PREC_FOLLOW,
    .name = "Flatten", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .alias_outputs = 1,
    .grad = grad,
};
