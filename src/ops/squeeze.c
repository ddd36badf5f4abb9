/* squeeze.c — Squeeze: removes dims of size 1 (opsets 11..21). The axes to remove come
 * from the `axes` attribute before opset 13 and from the optional int64 input 1 from
 * opset 13; negative axes count from the end; without axes every size-1 dim goes.
 * Naming a dim whose size is not 1 is an error. Any dtype; the output may share the
 * input's storage. */
#include "../core/optest.h"
#include "movement.h"

#include <inttypes.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    int64_t axes[KILN_MAX_DIMS];
    int n = 0;
    if (c->node->opset >= 13) {
        if (c->n_in > 1 && c->in[1]) {
            kiln_status st = kiln_read_ints(c, 1, "axes", axes, KILN_MAX_DIMS, &n);
            if (st != KILN_OK) return st;
        }
    } else {
        const int64_t *a = kiln_attr_ints(c->node, "axes", &n);
        KILN_OP_CHECK(c, n <= KILN_MAX_DIMS, KILN_ERR_SHAPE, "%d axes are too many", n);
        for (int k = 0; k < n; k++) axes[k] = a[k];
    }
    bool drop[KILN_MAX_DIMS] = {false};
    for (int k = 0; k < n; k++) {
        int64_t a = axes[k];
        KILN_OP_CHECK(c, kiln_norm_axis(&a, x->ndim), KILN_ERR_SHAPE,
                      "axes[%d] = %" PRId64 " is out of range for rank %d", k, axes[k], x->ndim);
        KILN_OP_CHECK(c, !drop[a], KILN_ERR_SHAPE, "axis %" PRId64 " is given twice", a);
        KILN_OP_CHECK(c, x->dims[a] == 1, KILN_ERR_SHAPE,
                      "cannot squeeze axis %" PRId64 " of size %" PRId64, a, x->dims[a]);
        drop[a] = true;
    }
    int64_t dims[KILN_MAX_DIMS];
    int r = 0;
    for (int d = 0; d < x->ndim; d++)
        if (!(n > 0 ? drop[d] : x->dims[d] == 1)) dims[r++] = x->dims[d];
    kiln_tensor_set_shape(c->out[0], x->dtype, r, dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) { return kiln_copy_input0(c); }

static kiln_status grad(kiln_grad_ctx *g) {
    kiln_status st = kiln_grad_refuse(g, 1, "axes");
    if (st != KILN_OK || !g->need[0]) return st;
    g->dx[0] = kiln_grad_reshape_like(g, g->dy[0], KILN_GRAD_IN(g, 0));
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    const double v[] = {0, 1, 2, 3, 4, 5};
    kiln_tensor *in[2], *y;

    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 1, 3), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0));
    y = kt_make(KILN_F32, 3, KT_DIMS(2, 1, 3), v);
    fails += kiln_optest("Squeeze", "", 2, in, 1, &y, 0, 0, "squeeze axis 0");

    in[0] = kt_make(KILN_U8, 4, KT_DIMS(1, 2, 1, 3), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-2, 0));
    y = kt_make(KILN_U8, 2, KT_DIMS(2, 3), v);
    fails += kiln_optest("Squeeze", "", 2, in, 1, &y, 0, 0, "squeeze negative axes");

    in[0] = kt_make(KILN_F64, 4, KT_DIMS(1, 2, 1, 3), v);
    in[1] = NULL;
    y = kt_make(KILN_F64, 2, KT_DIMS(2, 3), v);
    fails += kiln_optest("Squeeze", "", 2, in, 1, &y, 0, 0, "squeeze all ones");

    in[0] = kt_make(KILN_BOOL, 4, KT_DIMS(1, 2, 1, 3), v);
    y = kt_make(KILN_BOOL, 3, KT_DIMS(1, 2, 3), v);
    fails += kiln_optest_opset("Squeeze", "axes=[2]", 11, 1, in, 1, &y, 0, 0,
                               "squeeze opset 11 attribute");

    in[0] = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 1), KT_VALS(7));
    in[1] = NULL;
    y = kt_scalar(KILN_F32, 7);
    fails += kiln_optest("Squeeze", "", 2, in, 1, &y, 0, 0, "squeeze to scalar");

    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 1, 3), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    fails += kiln_optest_fails("Squeeze", "", 2, in, 1, KILN_ERR_SHAPE, "squeeze size-2 axis");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 1, 3), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(4));
    fails += kiln_optest_fails("Squeeze", "", 2, in, 1, KILN_ERR_SHAPE, "squeeze axis 4");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 1, 3), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, -4));
    fails += kiln_optest_fails("Squeeze", "", 2, in, 1, KILN_ERR_SHAPE, "squeeze repeated axis");

    in[0] = kt_rand(KILN_F64, 4, KT_DIMS(1, 2, 1, 3), -1, 1, 1);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-2));
    fails += kiln_gradcheck("Squeeze", "", 0, 2, in, NULL, "squeeze grad axis -2");
    in[0] = kt_rand(KILN_F64, 4, KT_DIMS(1, 2, 1, 3), -1, 1, 2);
    fails += kiln_gradcheck("Squeeze", "", 11, 1, in, NULL, "squeeze grad all ones, opset 11");
    kiln_tensor *r = kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 3);
    y = kiln_tensor_clone(NULL, r);
    if (y) kiln_tensor_set_shape(y, KILN_F64, 4, KT_DIMS(1, 2, 1, 3));
    in[0] = kt_rand(KILN_F64, 4, KT_DIMS(1, 2, 1, 3), -1, 1, 4);
    in[1] = NULL;
    fails += kiln_grad_route_check("Squeeze", "", 0, 2, in, 1, 0, r, y, true,
                                   "squeeze grad is a view of dY");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Squeeze", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 1, 3, 1), -2, 2, 1444),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "squeeze axes input f32");
    fails += kiln_optest_sweep("Squeeze", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 1, 3, 1), -2, 2, 1445),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "squeeze axes input i64");
    fails += kiln_optest_sweep("Squeeze", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 1, 3, 1), -2, 2, 1446),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "squeeze axes input u8");
    fails += kiln_optest_sweep("Squeeze", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 1, 4), -2, 2, 1447)},
                               1, "squeeze every size-1 dim f32");
    fails += kiln_optest_sweep("Squeeze", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(1, 3, 1, 4), -2, 2, 1448)},
                               1, "squeeze every size-1 dim i64");
    fails += kiln_optest_sweep("Squeeze", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(1, 3, 1, 4), -2, 2, 1449)},
                               1, "squeeze every size-1 dim u8");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_squeeze = {
    .precision = KILN_PREC_FOLLOW,
    .name = "Squeeze", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
    .alias_outputs = 1, .grad = grad,
};
