/* tile.c — Tile: repeats the input `repeats[d]` times along each dim d (opsets 11..21);
 * repeats is an int64 1-D input with one non-negative value per input dim. Any dtype. */
#include "../core/optest.h"
#include "movement.h"

#include <inttypes.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    int64_t rep[KILN_MAX_DIMS], dims[KILN_MAX_DIMS];
    int n;
    kiln_status st = kiln_read_ints(c, 1, "repeats", rep, KILN_MAX_DIMS, &n);
    if (st != KILN_OK) return st;
    KILN_OP_CHECK(c, n == x->ndim, KILN_ERR_SHAPE, "repeats has %d values for rank %d", n,
                  x->ndim);
    for (int d = 0; d < n; d++) {
        KILN_OP_CHECK(c, rep[d] >= 0, KILN_ERR_SHAPE, "repeats[%d] = %" PRId64 " is negative",
                      d, rep[d]);
        dims[d] = x->dims[d] * rep[d];
    }
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, dims);
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

static kiln_tensor *ints(int n, const double *v) { return kt_make(KILN_I64, 1, KT_DIMS(n), v); }

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
    return fails;
}

const kiln_op_def kiln_op_tile = {
    .name = "Tile", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward,
    .cpu_workspace = workspace, .test = test,
};
