/* tile.c — Tile: repeats the input `repeats[d]` times along each dim d (opsets 11..21);
 * repeats is an int64 1-D input with one non-negative value per input dim. Any dtype.
 *
 * Gradient: kiln.TileGrad(dY, X, repeats) sums dY over the tiles into X's shape (X read
 * shape-only). Float dtypes. */
#include "../core/optest.h"
#include "movement.h"

#include <inttypes.h>

/* The tiled shape of x = c->in[at] by the repeats input that follows it. */
static kiln_status tiled_shape(kiln_op_ctx *c, int at, int64_t *dims) {
    const kiln_tensor *x = c->in[at];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    int64_t rep[KILN_MAX_DIMS];
    int n;
    kiln_status st = kiln_read_ints(c, at + 1, "repeats", rep, KILN_MAX_DIMS, &n);
    if (st != KILN_OK) return st;
    KILN_OP_CHECK(c, n == x->ndim, KILN_ERR_SHAPE, "repeats has %d values for rank %d", n,
                  x->ndim);
    for (int d = 0; d < n; d++) {
        KILN_OP_CHECK(c, rep[d] >= 0, KILN_ERR_SHAPE, "repeats[%d] = %" PRId64 " is negative",
                      d, rep[d]);
        KILN_OP_CHECK(c, rep[d] == 0 || x->dims[d] <= INT64_MAX / rep[d], KILN_ERR_SHAPE,
                      "repeats[%d] = %" PRId64 " times dim %" PRId64 " overflows int64", d, rep[d],
                      x->dims[d]);
        dims[d] = x->dims[d] * rep[d];
    }
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    int64_t dims[KILN_MAX_DIMS];
    kiln_status st = tiled_shape(c, 0, dims);
    if (st != KILN_OK) return st;
    kiln_tensor_set_shape(c->out[0], c->in[0]->dtype, c->in[0]->ndim, dims);
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
    kiln_strides(x->ndim, x->dims, stride);
    kiln_axis_maps_carve(maps, c->workspace, y->ndim, y->dims);
    for (int d = 0; d < y->ndim; d++)
        for (int64_t j = 0; j < y->dims[d]; j++) maps[d][j] = (j % x->dims[d]) * stride[d];
    kiln_gather_axes(y->data, x->data, kiln_dtype_size(x->dtype), y->ndim, y->dims,
                     (const int64_t *const *)maps, NULL);
    return KILN_OK;
}

/* ---------------------------------------------------------------- gradient */

static kiln_status grad(kiln_grad_ctx *g) {
    kiln_status st = kiln_grad_refuse(g, 1, "repeats");
    if (st != KILN_OK || !g->need[0]) return st;
    int in[3] = {g->dy[0], KILN_GRAD_IN(g, 0), KILN_GRAD_IN(g, 1)};
    g->dx[0] = kiln_grad_emit(g, "kiln", "TileGrad", 3, in, 1, NULL, false, NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

static kiln_status infer_grad(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *x = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "X must be a float tensor, not %s", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, dy->dtype == x->dtype, KILN_ERR_TYPE, "dY has dtype %s, X has %s",
                  kiln_dtype_name(dy->dtype), kiln_dtype_name(x->dtype));
    int64_t dims[KILN_MAX_DIMS];
    kiln_status st = tiled_shape(c, 1, dims);
    if (st != KILN_OK) return st;
    bool same = dy->ndim == x->ndim;
    for (int d = 0; same && d < x->ndim; d++) same = dy->dims[d] == dims[d];
    char want[160];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dY must have the tiled shape %s",
                  kiln_dims_str(x->ndim, dims, want, sizeof want));
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

/* offset tables over dY's axes, then the accumulator */
static size_t workspace_grad(const kiln_op_ctx *c) {
    return kiln_axis_maps_bytes(c->in[0]->ndim, c->in[0]->dims) +
           kiln_scatter_add_bytes(c->out[0]);
}

static kiln_status forward_grad(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0];
    kiln_tensor *dx = c->out[0];
    int64_t stride[KILN_MAX_DIMS], *maps[KILN_MAX_DIMS];
    kiln_strides(dx->ndim, dx->dims, stride);
    kiln_axis_maps_carve(maps, c->workspace, dy->ndim, dy->dims);
    for (int d = 0; d < dy->ndim; d++)
        for (int64_t j = 0; j < dy->dims[d]; j++) maps[d][j] = (j % dx->dims[d]) * stride[d];
    char *acc = (char *)c->workspace + kiln_axis_maps_bytes(dy->ndim, dy->dims);
    kiln_scatter_add_axes(dx, dy, (const int64_t *const *)maps, acc);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static kiln_tensor *ints(int n, const double *v) { return kt_make(KILN_I64, 1, KT_DIMS(n), v); }

static int test_grad(void) {
    int fails = 0;
    fails += kiln_optest_sweep("TileGrad", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 6, 4, 15), -1, 1, 921),
                                                 kt_make(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), NULL),
                                                 kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 2, 1, 3))},
                               1, "tile grad random 4-D");
    kiln_tensor *in[3], *want;
    /* expected values from numpy: dY.reshape(2, 2, 2, 3).sum(axis=(0, 2)) */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(4, 6), NULL);
    for (int i = 0; in[0] && i < 24; i++) kiln_set_f64(in[0], i, i);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[2] = ints(2, KT_VALS(2, 2));
    want = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(30, 34, 38, 54, 58, 62));
    fails += kiln_optest("TileGrad", "", 3, in, 1, &want, 0, 0, "tile grad 2x2");

    in[0] = kt_make(KILN_BF16, 1, KT_DIMS(6), KT_VALS(1, 2, 3, 4, 5, 6));
    in[1] = kt_make(KILN_BF16, 1, KT_DIMS(2), NULL);
    in[2] = ints(1, KT_VALS(3));
    want = kt_make(KILN_BF16, 1, KT_DIMS(2), KT_VALS(9, 12));
    fails += kiln_optest("TileGrad", "", 3, in, 1, &want, 0, 0, "tile grad bf16 1-D");

    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 0), NULL);
    in[1] = kt_make(KILN_F64, 2, KT_DIMS(2, 3), NULL);
    in[2] = ints(2, KT_VALS(1, 0));
    want = kt_make(KILN_F64, 2, KT_DIMS(2, 3), KT_VALS(0, 0, 0, 0, 0, 0));
    fails += kiln_optest("TileGrad", "", 3, in, 1, &want, 0, 0, "tile grad zero repeats");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(4, 3), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[2] = ints(2, KT_VALS(2, 2));
    fails += kiln_optest_fails("TileGrad", "", 3, in, 1, KILN_ERR_SHAPE,
                               "tile grad dY of the wrong shape");
    return fails;
}

static int test(void) {
    int fails = 0;
    kiln_tensor *in[2], *y;
    const double v[] = {0, 1, 2, 3, 4, 5};
    /* expected values from numpy.tile(np.arange(6).reshape(2, 3), (2, 2)) */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    in[1] = ints(2, KT_VALS(2, 2));
    y = kt_make(KILN_F32, 2, KT_DIMS(4, 6),
                KT_VALS(0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5));
    fails += kiln_optest("Tile", "", 2, in, 1, &y, 0, 0, "tile 2x2");

    in[0] = kt_make(KILN_I64, 2, KT_DIMS(2, 3), v);
    in[1] = ints(2, KT_VALS(1, 1));
    y = kt_make(KILN_I64, 2, KT_DIMS(2, 3), v);
    fails += kiln_optest("Tile", "", 2, in, 1, &y, 0, 0, "tile ones");

    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(2), KT_VALS(1, 0));
    in[1] = ints(1, KT_VALS(3));
    y = kt_make(KILN_BOOL, 1, KT_DIMS(6), KT_VALS(1, 0, 1, 0, 1, 0));
    fails += kiln_optest("Tile", "", 2, in, 1, &y, 0, 0, "tile bool 1-D");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    in[1] = ints(2, KT_VALS(1, 0));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 0), NULL);
    fails += kiln_optest("Tile", "", 2, in, 1, &y, 0, 0, "tile zero repeats");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    in[1] = ints(1, KT_VALS(2));
    fails += kiln_optest_fails("Tile", "", 2, in, 1, KILN_ERR_SHAPE, "tile repeats too short");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    in[1] = ints(2, KT_VALS(2, -1));
    fails += kiln_optest_fails("Tile", "", 2, in, 1, KILN_ERR_SHAPE, "tile negative repeat");
    /* fuzz_run: the tiled dim overflowed int64; 4 * (2^62 + 1024) wrapped around to 4096 */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 4), NULL);
    in[1] = ints(2, KT_VALS(1, 4611686018427388928.0));
    fails += kiln_optest_fails("Tile", "", 2, in, 1, KILN_ERR_SHAPE, "tile repeats overflowing int64");

    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 1);
    in[1] = ints(2, KT_VALS(2, 3));
    fails += kiln_gradcheck("Tile", "", 0, 2, in, NULL, "tile grad 2x3");
    in[0] = kt_rand(KILN_F64, 3, KT_DIMS(2, 1, 3), -1, 1, 2);
    in[1] = ints(3, KT_VALS(1, 3, 2));
    fails += kiln_gradcheck("Tile", "", 0, 2, in, NULL, "tile grad 3-D with a size-1 dim");
    in[0] = kt_rand(KILN_F64, 1, KT_DIMS(4), -1, 1, 3);
    in[1] = ints(1, KT_VALS(1));
    fails += kiln_gradcheck("Tile", "", 0, 2, in, NULL, "tile grad one repeat");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Tile", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 421),
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 2, 3, 1))},
                               1, "tile random 1,2,3,1");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Tile", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(2, 3), -2, 2, 1405),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 2))},
                               1, "tile (2,3) by (2,2) f32");
    fails += kiln_optest_sweep("Tile", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(2, 3), -2, 2, 1406),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 2))},
                               1, "tile (2,3) by (2,2) i64");
    fails += kiln_optest_sweep("Tile", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(2, 3), -2, 2, 1407),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 2))},
                               1, "tile (2,3) by (2,2) u8");
    fails += kiln_optest_sweep("Tile", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 1, 3), -2, 2, 1408),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(1, 4, 2))},
                               1, "tile (2,1,3) by (1,4,2) f32");
    fails += kiln_optest_sweep("Tile", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(2, 1, 3), -2, 2, 1409),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(1, 4, 2))},
                               1, "tile (2,1,3) by (1,4,2) i64");
    fails += kiln_optest_sweep("Tile", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(2, 1, 3), -2, 2, 1410),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(1, 4, 2))},
                               1, "tile (2,1,3) by (1,4,2) u8");
    fails += kiln_optest_sweep("Tile", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 4), -2, 2, 1411),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, 1))},
                               1, "tile (3,4) by (3,1) f32");
    fails += kiln_optest_sweep("Tile", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(3, 4), -2, 2, 1412),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, 1))},
                               1, "tile (3,4) by (3,1) i64");
    fails += kiln_optest_sweep("Tile", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(3, 4), -2, 2, 1413),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, 1))},
                               1, "tile (3,4) by (3,1) u8");
    fails += kiln_optest_sweep("Tile", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 4), -2, 2, 1414),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 2))},
                               1, "tile a zero repeat f32");
    fails += kiln_optest_sweep("Tile", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(3, 4), -2, 2, 1415),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 2))},
                               1, "tile a zero repeat i64");
    fails += kiln_optest_sweep("Tile", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(3, 4), -2, 2, 1416),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 2))},
                               1, "tile a zero repeat u8");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_tile = {
    .precision = KILN_PREC_FOLLOW,
    .name = "Tile", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward,
    .cpu_workspace = workspace, .test = KILN_OP_TESTS(test), .grad = grad,
};

const kiln_op_def kiln_op_tile_grad = {
    .precision = KILN_PREC_FP32,
    .name = "TileGrad", .domain = "kiln", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1,
    .max_outputs = 1, .value_inputs = 1u << 2, .shape_only_inputs = 1u << 1,
    .infer = infer_grad, .cpu_forward = forward_grad, .cpu_workspace = workspace_grad,
    .test = KILN_OP_TESTS(test_grad),
};
