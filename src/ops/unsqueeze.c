/* unsqueeze.c — Unsqueeze: inserts dims of size 1 (opsets 11..21). The axes come from
 * the `axes` attribute before opset 13 and from the int64 input 1 from opset 13; they
 * index the OUTPUT (rank r + len(axes)), may be negative and in any order, and must not
 * repeat. Any dtype; the output may share the input's storage. */
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
        KILN_OP_CHECK(c, c->n_in > 1 && c->in[1], KILN_ERR_SHAPE,
                      "input axes is required from opset 13");
        kiln_status st = kiln_read_ints(c, 1, "axes", axes, KILN_MAX_DIMS, &n);
        if (st != KILN_OK) return st;
    } else {
        const int64_t *a = kiln_attr_ints(c->node, "axes", &n);
        KILN_OP_CHECK(c, n <= KILN_MAX_DIMS, KILN_ERR_SHAPE, "%d axes are too many", n);
        for (int k = 0; k < n; k++) axes[k] = a[k];
    }
    int r = x->ndim + n;
    KILN_OP_CHECK(c, r <= KILN_MAX_DIMS, KILN_ERR_UNSUPPORTED,
                  "the output would have rank %d; kiln supports at most %d", r, KILN_MAX_DIMS);
    bool ins[KILN_MAX_DIMS] = {false};
    for (int k = 0; k < n; k++) {
        int64_t a = axes[k];
        KILN_OP_CHECK(c, kiln_norm_axis(&a, r), KILN_ERR_SHAPE,
                      "axes[%d] = %" PRId64 " is out of range for output rank %d", k, axes[k], r);
        KILN_OP_CHECK(c, !ins[a], KILN_ERR_SHAPE, "axis %" PRId64 " is given twice", a);
        ins[a] = true;
    }
    int64_t dims[KILN_MAX_DIMS];
    for (int d = 0, src = 0; d < r; d++) dims[d] = ins[d] ? 1 : x->dims[src++];
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

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0));
    y = kt_make(KILN_F32, 3, KT_DIMS(1, 2, 3), v);
    fails += kiln_optest("Unsqueeze", "", 2, in, 1, &y, 0, 0, "unsqueeze axis 0");

    in[0] = kt_make(KILN_I16, 2, KT_DIMS(2, 3), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-1));
    y = kt_make(KILN_I16, 3, KT_DIMS(2, 3, 1), v);
    fails += kiln_optest("Unsqueeze", "", 2, in, 1, &y, 0, 0, "unsqueeze axis -1");

    /* output rank 5; axes 4, 0, 2 in any order -> (1, 2, 1, 3, 1) */
    in[0] = kt_make(KILN_BOOL, 2, KT_DIMS(2, 3), v);
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(4, 0, -3));
    y = kt_make(KILN_BOOL, 5, KT_DIMS(1, 2, 1, 3, 1), v);
    fails += kiln_optest("Unsqueeze", "", 2, in, 1, &y, 0, 0, "unsqueeze unsorted axes");

    in[0] = kt_scalar(KILN_F64, 4);
    y = kt_make(KILN_F64, 2, KT_DIMS(1, 1), KT_VALS(4));
    fails += kiln_optest_opset("Unsqueeze", "axes=[0,1]", 11, 1, in, 1, &y, 0, 0,
                               "unsqueeze opset 11 attribute, scalar");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(3));
    fails += kiln_optest_fails("Unsqueeze", "", 2, in, 1, KILN_ERR_SHAPE, "unsqueeze axis 3");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, -3));
    fails += kiln_optest_fails("Unsqueeze", "", 2, in, 1, KILN_ERR_SHAPE,
                               "unsqueeze repeated axis");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    in[1] = NULL;
    fails += kiln_optest_fails("Unsqueeze", "", 2, in, 1, KILN_ERR_SHAPE, "unsqueeze no axes");

    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 1);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, -1));
    fails += kiln_gradcheck("Unsqueeze", "", 0, 2, in, NULL, "unsqueeze grad axes 0, -1");
    in[0] = kt_scalar(KILN_F64, 0.75);
    fails += kiln_gradcheck("Unsqueeze", "axes=[0]", 11, 1, in, NULL,
                            "unsqueeze grad scalar, opset 11");
    kiln_tensor *r = kt_rand(KILN_F64, 3, KT_DIMS(2, 1, 3), -1, 1, 3);
    y = kiln_tensor_clone(NULL, r);
    if (y) kiln_tensor_set_shape(y, KILN_F64, 2, KT_DIMS(2, 3));
    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 4);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    fails += kiln_grad_route_check("Unsqueeze", "", 0, 2, in, 1, 0, r, y, true,
                                   "unsqueeze grad is a view of dY");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Unsqueeze", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(2, 3), -2, 2, 1450),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 3))},
                               1, "unsqueeze axes input f32");
    fails += kiln_optest_sweep("Unsqueeze", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(2, 3), -2, 2, 1451),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 3))},
                               1, "unsqueeze axes input i64");
    fails += kiln_optest_sweep("Unsqueeze", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(2, 3), -2, 2, 1452),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 3))},
                               1, "unsqueeze axes input u8");
    fails += kiln_optest_sweep("Unsqueeze", "axes=[-1]", 11, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(2, 3), -2, 2, 1453)},
                               1, "unsqueeze axes attribute f32");
    fails += kiln_optest_sweep("Unsqueeze", "axes=[-1]", 11, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(2, 3), -2, 2, 1454)},
                               1, "unsqueeze axes attribute i64");
    fails += kiln_optest_sweep("Unsqueeze", "axes=[-1]", 11, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(2, 3), -2, 2, 1455)},
                               1, "unsqueeze axes attribute u8");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_unsqueeze = {
    .precision = KILN_PREC_FOLLOW,
    .name = "Unsqueeze", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
    .alias_outputs = 1, .grad = grad,
};
