/* expand.c — Expand: broadcasts input to the int64 1-D `shape` input with numpy's
 * bidirectional rules (opsets 11..21): the output shape is broadcast(input.shape, shape),
 * so a 1 in `shape` keeps the input's dim and the output may have more dims than the
 * shape asks for. Any dtype. */
#include "../core/optest.h"
#include "movement.h"

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    int64_t shape[KILN_MAX_DIMS], dims[KILN_MAX_DIMS];
    int n, r;
    kiln_status st = kiln_read_ints(c, 1, "shape", shape, KILN_MAX_DIMS, &n);
    if (st != KILN_OK) return st;
    char want[160];
    for (int d = 0; d < n; d++)
        KILN_OP_CHECK(c, shape[d] >= 0, KILN_ERR_SHAPE, "shape %s has a negative dim",
                      kiln_dims_str(n, shape, want, sizeof want));
    KILN_OP_CHECK(c, kiln_broadcast_shape(x->ndim, x->dims, n, shape, &r, dims), KILN_ERR_SHAPE,
                  "the input does not broadcast with shape %s",
                  kiln_dims_str(n, shape, want, sizeof want));
    kiln_tensor_set_shape(c->out[0], x->dtype, r, dims);
    return KILN_OK;
}

static size_t workspace(const kiln_op_ctx *c) {
    return kiln_axis_maps_bytes(c->out[0]->ndim, c->out[0]->dims);
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    if (kiln_tensor_numel(y) == 0) return KILN_OK;
    int64_t stride[KILN_MAX_DIMS], *maps[KILN_MAX_DIMS];
    kiln_broadcast_strides(x->ndim, x->dims, y->ndim, y->dims, stride);
    kiln_axis_maps_carve(maps, c->workspace, y->ndim, y->dims);
    for (int d = 0; d < y->ndim; d++)
        for (int64_t j = 0; j < y->dims[d]; j++) maps[d][j] = j * stride[d];
    kiln_gather_axes(y->data, x->data, kiln_dtype_size(x->dtype), y->ndim, y->dims,
                     (const int64_t *const *)maps, NULL);
    return KILN_OK;
}

/* dX: dY summed over the broadcast dims back to X's shape (kiln.ReduceSumTo). */
static kiln_status grad(kiln_grad_ctx *g) {
    kiln_status st = kiln_grad_refuse(g, 1, "shape");
    if (st != KILN_OK || !g->need[0]) return st;
    g->dx[0] = kiln_grad_unbroadcast(g, g->dy[0], KILN_GRAD_IN(g, 0));
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

#ifdef KILN_OPTESTS
static kiln_tensor *ints(int n, const double *v) { return kt_make(KILN_I64, 1, KT_DIMS(n), v); }

static int test(void) {
    int fails = 0;
    kiln_tensor *in[2], *y;
    /* expected values from numpy broadcasting */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 1), KT_VALS(1, 2, 3));
    in[1] = ints(3, KT_VALS(2, 1, 2));
    y = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 2), KT_VALS(1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3));
    fails += kiln_optest("Expand", "", 2, in, 1, &y, 0, 0, "expand dim changed");

    in[0] = kt_make(KILN_I8, 1, KT_DIMS(3), KT_VALS(5, 6, 7));
    in[1] = ints(2, KT_VALS(2, 3));
    y = kt_make(KILN_I8, 2, KT_DIMS(2, 3), KT_VALS(5, 6, 7, 5, 6, 7));
    fails += kiln_optest("Expand", "", 2, in, 1, &y, 0, 0, "expand new leading dim");

    in[0] = kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(1, 0, 0, 1));
    in[1] = ints(1, KT_VALS(1));
    y = kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(1, 0, 0, 1));
    fails += kiln_optest("Expand", "", 2, in, 1, &y, 0, 0, "expand shape smaller than input");

    in[0] = kt_scalar(KILN_F16, 1.5);
    in[1] = ints(2, KT_VALS(2, 0));
    y = kt_make(KILN_F16, 2, KT_DIMS(2, 0), NULL);
    fails += kiln_optest("Expand", "", 2, in, 1, &y, 0, 0, "expand scalar to empty");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), NULL);
    in[1] = ints(2, KT_VALS(2, 3));
    fails += kiln_optest_fails("Expand", "", 2, in, 1, KILN_ERR_SHAPE, "expand 3x4 to 2x3");

    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(3, 1), -1, 1, 1);
    in[1] = ints(3, KT_VALS(2, 1, 4));
    fails += kiln_gradcheck("Expand", "", 0, 2, in, NULL, "expand grad new and widened dims");
    in[0] = kt_rand(KILN_F64, 3, KT_DIMS(2, 1, 3), -1, 1, 2);
    in[1] = ints(2, KT_VALS(4, 1));
    fails += kiln_gradcheck("Expand", "", 0, 2, in, NULL, "expand grad shape shorter than X");
    in[0] = kt_scalar(KILN_F64, 0.5);
    in[1] = ints(2, KT_VALS(2, 3));
    fails += kiln_gradcheck("Expand", "", 0, 2, in, NULL, "expand grad scalar");
    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 3);
    in[1] = ints(1, KT_VALS(1));
    fails += kiln_gradcheck("Expand", "", 0, 2, in, NULL, "expand grad no broadcast");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Expand", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 19), -2, 2, 411),
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(2, 3, 17, 19))},
                               1, "expand random to 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Expand", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 1), -2, 2, 1393),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 3, 4))},
                               1, "expand (3,1) to (2,3,4) f32");
    fails += kiln_optest_sweep("Expand", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(3, 1), -2, 2, 1394),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 3, 4))},
                               1, "expand (3,1) to (2,3,4) i64");
    fails += kiln_optest_sweep("Expand", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(3, 1), -2, 2, 1395),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 3, 4))},
                               1, "expand (3,1) to (2,3,4) u8");
    fails += kiln_optest_sweep("Expand", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(1, 4), -2, 2, 1396),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, 1))},
                               1, "expand (1,4) with shape (3,1) f32");
    fails += kiln_optest_sweep("Expand", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(1, 4), -2, 2, 1397),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, 1))},
                               1, "expand (1,4) with shape (3,1) i64");
    fails += kiln_optest_sweep("Expand", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(1, 4), -2, 2, 1398),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, 1))},
                               1, "expand (1,4) with shape (3,1) u8");
    fails += kiln_optest_sweep("Expand", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 1, 3), -2, 2, 1399),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 5, 3))},
                               1, "expand (2,1,3) to (2,5,3) f32");
    fails += kiln_optest_sweep("Expand", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(2, 1, 3), -2, 2, 1400),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 5, 3))},
                               1, "expand (2,1,3) to (2,5,3) i64");
    fails += kiln_optest_sweep("Expand", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(2, 1, 3), -2, 2, 1401),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 5, 3))},
                               1, "expand (2,1,3) to (2,5,3) u8");
    fails += kiln_optest_sweep("Expand", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 4), -2, 2, 1402),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, 4))},
                               1, "expand same shape f32");
    fails += kiln_optest_sweep("Expand", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(3, 4), -2, 2, 1403),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, 4))},
                               1, "expand same shape i64");
    fails += kiln_optest_sweep("Expand", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(3, 4), -2, 2, 1404),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, 4))},
                               1, "expand same shape u8");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_expand = {
    .precision = KILN_PREC_FOLLOW,
    .name = "Expand", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward,
    .cpu_workspace = workspace, .test = KILN_OP_TESTS(test), .grad = grad,
};
