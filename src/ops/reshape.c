/* reshape.c — Reshape: data with the shape given by the 1-D int64 input `shape`
 * (opsets 11..21). A 0 copies the input's dim at that position (unless allowzero=1,
 * opset 14+, where 0 is a real zero dim and cannot be combined with -1); one -1 is
 * inferred from the element count. Any dtype. The bytes do not change, so the output
 * may share the input's storage. */
#include "../core/optest.h"
#include "movement.h"

#include <inttypes.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    int64_t shape[KILN_MAX_DIMS], dims[KILN_MAX_DIMS];
    int n;
    kiln_status st = kiln_read_ints(c, 1, "shape", shape, KILN_MAX_DIMS, &n);
    if (st != KILN_OK) return st;
    bool allowzero = c->node->opset >= 14 && kiln_attr_int(c->node, "allowzero", 0) != 0;
    int infer_at = -1;
    bool has_zero = false;
    int64_t known = 1;
    for (int d = 0; d < n; d++) {
        dims[d] = shape[d];
        if (shape[d] == -1) {
            KILN_OP_CHECK(c, infer_at < 0, KILN_ERR_SHAPE,
                          "shape has more than one -1 (at %d and %d)", infer_at, d);
            infer_at = d;
            continue;
        }
        KILN_OP_CHECK(c, shape[d] >= 0, KILN_ERR_SHAPE, "shape[%d] = %" PRId64 " is negative",
                      d, shape[d]);
        if (shape[d] == 0) {
            has_zero = true;
            if (!allowzero) {
                KILN_OP_CHECK(c, d < x->ndim, KILN_ERR_SHAPE,
                              "shape[%d] = 0 copies input dim %d, but the input has rank %d",
                              d, d, x->ndim);
                dims[d] = x->dims[d];
            }
        }
        /* saturated rather than overflowing: no tensor has that many elements (a later 0
         * still makes it 0) */
        if (dims[d] != 0 && known > INT64_MAX / dims[d])
            known = INT64_MAX;
        else
            known *= dims[d];
    }
    KILN_OP_CHECK(c, !(allowzero && has_zero && infer_at >= 0), KILN_ERR_SHAPE,
                  "with allowzero=1, shape cannot hold both 0 and -1");
    int64_t numel = kiln_tensor_numel(x);
    char want[160];
    if (infer_at >= 0) {
        KILN_OP_CHECK(c, known != 0 && numel % known == 0, KILN_ERR_SHAPE,
                      "cannot reshape %" PRId64 " elements to %s: the -1 has no integer size",
                      numel, kiln_dims_str(n, shape, want, sizeof want));
        dims[infer_at] = numel / known;
    } else {
        KILN_OP_CHECK(c, known == numel, KILN_ERR_SHAPE,
                      "cannot reshape %" PRId64 " elements to %s (%" PRId64 " elements)", numel,
                      kiln_dims_str(n, shape, want, sizeof want), known);
    }
    kiln_tensor_set_shape(c->out[0], x->dtype, n, dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) { return kiln_copy_input0(c); }

static kiln_status grad(kiln_grad_ctx *g) {
    kiln_status st = kiln_grad_refuse(g, 1, "shape");
    if (st != KILN_OK || !g->need[0]) return st;
    g->dx[0] = kiln_grad_reshape_like(g, g->dy[0], KILN_GRAD_IN(g, 0));
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

#ifdef KILN_OPTESTS
static kiln_tensor *shape_of(int n, const double *v) {
    return kt_make(KILN_I64, 1, KT_DIMS(n), v);
}

static int test(void) {
    int fails = 0;
    const double v[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
                        19, 20, 21, 22, 23};
    kiln_tensor *in[2], *y;

    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    in[1] = shape_of(2, KT_VALS(4, 6));
    y = kt_make(KILN_F32, 2, KT_DIMS(4, 6), v);
    fails += kiln_optest("Reshape", "", 2, in, 1, &y, 0, 0, "reshape plain");

    in[0] = kt_make(KILN_I32, 3, KT_DIMS(2, 3, 4), v);
    in[1] = shape_of(3, KT_VALS(0, -1, 2));
    y = kt_make(KILN_I32, 3, KT_DIMS(2, 6, 2), v);
    fails += kiln_optest("Reshape", "", 2, in, 1, &y, 0, 0, "reshape 0 and -1");

    in[0] = kt_make(KILN_BOOL, 3, KT_DIMS(2, 3, 4), v);
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(-1));
    y = kt_make(KILN_BOOL, 1, KT_DIMS(24), v);
    fails += kiln_optest("Reshape", "", 2, in, 1, &y, 0, 0, "reshape -1 bool, int32 shape");

    in[0] = kt_make(KILN_F16, 1, KT_DIMS(1), KT_VALS(2.5));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(0), NULL);
    y = kt_scalar(KILN_F16, 2.5);
    fails += kiln_optest("Reshape", "", 2, in, 1, &y, 0, 0, "reshape to scalar");

    /* allowzero: (0,3,4) -> [3,4,0] keeps the zero dim */
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(0, 3, 4), NULL);
    in[1] = shape_of(3, KT_VALS(3, 4, 0));
    y = kt_make(KILN_F32, 3, KT_DIMS(3, 4, 0), NULL);
    fails += kiln_optest("Reshape", "allowzero=1", 2, in, 1, &y, 0, 0, "reshape allowzero");

    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    in[1] = shape_of(2, KT_VALS(5, 5));
    fails += kiln_optest_fails("Reshape", "", 2, in, 1, KILN_ERR_SHAPE, "reshape 24 to 25");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    in[1] = shape_of(2, KT_VALS(-1, 5));
    fails += kiln_optest_fails("Reshape", "", 2, in, 1, KILN_ERR_SHAPE, "reshape -1 not integer");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    in[1] = shape_of(3, KT_VALS(-1, -1, 2));
    fails += kiln_optest_fails("Reshape", "", 2, in, 1, KILN_ERR_SHAPE, "reshape two -1");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    in[1] = shape_of(2, KT_VALS(0, -1));
    fails += kiln_optest_fails("Reshape", "allowzero=1", 2, in, 1, KILN_ERR_SHAPE,
                               "reshape allowzero with 0 and -1");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    in[1] = shape_of(2, KT_VALS(-2, -12));
    fails += kiln_optest_fails("Reshape", "", 2, in, 1, KILN_ERR_SHAPE, "reshape negative dim");
    /* dims whose product wraps around int64 to 24 (fuzz_run: the product overflowed, and
     * a wrapped one equal to the input's count was accepted) */
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    in[1] = shape_of(5, KT_VALS(24, 4294967297.0, 4294967295.0, 4294967297.0, 4294967295.0));
    fails += kiln_optest_fails("Reshape", "", 2, in, 1, KILN_ERR_SHAPE, "reshape dims overflowing int64");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    in[1] = shape_of(6, KT_VALS(-1, 12, 4294967297.0, 4294967295.0, 4294967297.0, 4294967295.0));
    fails += kiln_optest_fails("Reshape", "", 2, in, 1, KILN_ERR_SHAPE, "reshape -1 with dims overflowing int64");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(4, 6));
    fails += kiln_optest_fails("Reshape", "", 2, in, 1, KILN_ERR_TYPE, "reshape f32 shape");

    in[0] = kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -1, 1, 1);
    in[1] = shape_of(3, KT_VALS(4, 0, -1));
    fails += kiln_gradcheck("Reshape", "", 0, 2, in, NULL, "reshape grad 0 and -1");
    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(1, 6), -1, 1, 2);
    in[1] = shape_of(3, KT_VALS(3, 1, 2));
    fails += kiln_gradcheck("Reshape", "", 13, 2, in, NULL, "reshape grad opset 13");
    /* dL/dX = R reshaped, and a view of dL/dY: no bytes move */
    kiln_tensor *r = kt_rand(KILN_F64, 2, KT_DIMS(4, 6), -1, 1, 3), *want;
    want = kiln_tensor_clone(NULL, r);
    if (want) kiln_tensor_set_shape(want, KILN_F64, 3, KT_DIMS(2, 3, 4));
    in[0] = kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -1, 1, 4);
    in[1] = shape_of(2, KT_VALS(4, 6));
    fails += kiln_grad_route_check("Reshape", "", 0, 2, in, 1, 0, r, want, true,
                                   "reshape grad is a view of dY");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Reshape", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1309),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(6, -1))},
                               1, "reshape to (6,-1) f32");
    fails += kiln_optest_sweep("Reshape", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1310),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(6, -1))},
                               1, "reshape to (6,-1) i64");
    fails += kiln_optest_sweep("Reshape", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1311),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(6, -1))},
                               1, "reshape to (6,-1) u8");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_reshape = {
    .precision = KILN_PREC_FOLLOW,
    .name = "Reshape", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
    .alias_outputs = 1, .grad = grad,
};
