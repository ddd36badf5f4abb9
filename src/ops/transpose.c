/* transpose.c — Transpose: output dim d is input dim perm[d] (opsets 11..21); perm
 * defaults to the reversed axes and must be a permutation of 0..r-1. Any dtype. */
#include "../core/optest.h"
#include "movement.h"

#include <inttypes.h>
#include <stdio.h>

/* perm from the attribute (or reversed), validated. */
static kiln_status get_perm(kiln_op_ctx *c, int64_t *perm) {
    const kiln_tensor *x = c->in[0];
    int n;
    const int64_t *p = kiln_attr_ints(c->node, "perm", &n);
    if (!p) {
        for (int d = 0; d < x->ndim; d++) perm[d] = x->ndim - 1 - d;
        return KILN_OK;
    }
    KILN_OP_CHECK(c, n == x->ndim, KILN_ERR_SHAPE, "perm has %d entries for rank %d", n,
                  x->ndim);
    bool seen[KILN_MAX_DIMS] = {false};
    for (int d = 0; d < n; d++) {
        KILN_OP_CHECK(c, p[d] >= 0 && p[d] < n && !seen[p[d]], KILN_ERR_SHAPE,
                      "perm is not a permutation of 0..%d (perm[%d] = %" PRId64 ")", n - 1, d,
                      p[d]);
        seen[p[d]] = true;
        perm[d] = p[d];
    }
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    int64_t perm[KILN_MAX_DIMS], dims[KILN_MAX_DIMS];
    kiln_status st = get_perm(c, perm);
    if (st != KILN_OK) return st;
    for (int d = 0; d < x->ndim; d++) dims[d] = x->dims[perm[d]];
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, dims);
    return KILN_OK;
}

static size_t workspace(const kiln_op_ctx *c) {
    return kiln_axis_maps_bytes(c->out[0]->ndim, c->out[0]->dims);
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    int64_t perm[KILN_MAX_DIMS], stride[KILN_MAX_DIMS], *maps[KILN_MAX_DIMS];
    kiln_status st = get_perm(c, perm);
    if (st != KILN_OK) return st;
    kiln_strides(x->ndim, x->dims, stride);
    kiln_axis_maps_carve(maps, c->workspace, y->ndim, y->dims);
    for (int d = 0; d < y->ndim; d++)
        for (int64_t j = 0; j < y->dims[d]; j++) maps[d][j] = j * stride[perm[d]];
    kiln_gather_axes(y->data, x->data, kiln_dtype_size(x->dtype), y->ndim, y->dims,
                     (const int64_t *const *)maps, NULL);
    return KILN_OK;
}

/* Whether Transpose node n moves no byte from x to y in their layouts (a 4-D tensor's
 * format): y's elements in its storage order are x's in its own, as for perm (0,2,3,1) of
 * an NHWC x into an NCHW-labelled y (the layout pass makes these around ConvNeXt's
 * LayerNorms). The planner then makes y a view of x. */
static bool moves_no_byte(const kiln_op_ctx *c) {
    const kiln_node *n = c->node;
    const kiln_tensor *x = c->in[0], *y = c->out[0];
    const int r = x->ndim;
    if (r != y->ndim || r > KILN_MAX_DIMS) return false;
    int np = 0;
    const int64_t *p = kiln_attr_ints(n, "perm", &np);
    if (p && np != r) return false;
    int64_t xs[KILN_MAX_DIMS];
    kiln_strides(r, x->dims, xs);
    if (r == 4 && x->format == KILN_FORMAT_NHWC) { /* logical (N, C, H, W) at NHWC strides */
        xs[1] = 1;
        xs[3] = x->dims[1];
        xs[2] = x->dims[3] * x->dims[1];
        xs[0] = x->dims[2] * xs[2];
    }
    static const int nhwc_order[4] = {0, 2, 3, 1};
    const bool y_nhwc = r == 4 && y->format == KILN_FORMAT_NHWC;
    int64_t expect = 1; /* y's dims from its innermost in storage order: x's strides in turn */
    for (int k = r - 1; k >= 0; k--) {
        const int d = y_nhwc ? nhwc_order[k] : k;
        const int64_t pd = p ? p[d] : r - 1 - d;
        if (pd < 0 || pd >= r) return false;
        if (x->dims[pd] == 1) continue;
        if (xs[pd] != expect) return false;
        expect *= x->dims[pd];
    }
    return true;
}

/* dX = Transpose(dY) by the inverse permutation (the default reversal is its own). */
static kiln_status grad(kiln_grad_ctx *g) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    int np;
    const int64_t *p = kiln_attr_ints(n, "perm", &np);
    char attrs[32 + 24 * KILN_MAX_DIMS] = "";
    if (p) {
        int64_t inv[KILN_MAX_DIMS];
        /* inference accepted the node, so perm is a permutation of 0..np-1 */
        if (np > KILN_MAX_DIMS)
            return kiln_fail(g->m->ctx, KILN_ERR_SHAPE, "Transpose node '%s': perm is too long",
                             n->name);
        for (int d = 0; d < np; d++) {
            if (p[d] < 0 || p[d] >= np)
                return kiln_fail(g->m->ctx, KILN_ERR_SHAPE,
                                 "Transpose node '%s': perm is not a permutation", n->name);
            inv[p[d]] = d;
        }
        size_t at = (size_t)snprintf(attrs, sizeof attrs, "perm=[");
        for (int d = 0; d < np; d++)
            at += (size_t)snprintf(attrs + at, sizeof attrs - at, d ? ",%" PRId64 : "%" PRId64,
                                   inv[d]);
        snprintf(attrs + at, sizeof attrs - at, "]");
    }
    int dy = g->dy[0];
    g->dx[0] = kiln_grad_emit(g, NULL, "Transpose", 1, &dy, 1, NULL, false, p ? attrs : NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    const double v[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
                        19, 20, 21, 22, 23};
    kiln_tensor *x, *y;
    /* expected values from numpy: np.arange(24).reshape(2,3,4).transpose(...) */
    x = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    y = kt_make(KILN_F32, 3, KT_DIMS(3, 4, 2),
                KT_VALS(0, 12, 1, 13, 2, 14, 3, 15, 4, 16, 5, 17, 6, 18, 7, 19, 8, 20, 9, 21,
                        10, 22, 11, 23));
    fails += kiln_optest("Transpose", "perm=[1,2,0]", 1, &x, 1, &y, 0, 0, "transpose 1,2,0");
    x = kt_make(KILN_I64, 3, KT_DIMS(2, 3, 4), v);
    y = kt_make(KILN_I64, 3, KT_DIMS(4, 3, 2),
                KT_VALS(0, 12, 4, 16, 8, 20, 1, 13, 5, 17, 9, 21, 2, 14, 6, 18, 10, 22, 3, 15,
                        7, 19, 11, 23));
    fails += kiln_optest("Transpose", "", 1, &x, 1, &y, 0, 0, "transpose default reverse");
    x = kt_make(KILN_F16, 3, KT_DIMS(2, 3, 4), v);
    y = kt_make(KILN_F16, 3, KT_DIMS(2, 4, 3),
                KT_VALS(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, 12, 16, 20, 13, 17, 21, 14, 18,
                        22, 15, 19, 23));
    fails += kiln_optest("Transpose", "perm=[0,2,1]", 1, &x, 1, &y, 0, 0, "transpose f16 0,2,1");
    x = kt_make(KILN_BOOL, 2, KT_DIMS(2, 3), KT_VALS(1, 0, 0, 1, 1, 0));
    y = kt_make(KILN_BOOL, 2, KT_DIMS(3, 2), KT_VALS(1, 1, 0, 1, 0, 0));
    fails += kiln_optest("Transpose", "", 1, &x, 1, &y, 0, 0, "transpose bool");
    x = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    y = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    fails += kiln_optest("Transpose", "perm=[0,1,2]", 1, &x, 1, &y, 0, 0, "transpose identity");
    x = kt_scalar(KILN_F32, 5);
    y = kt_scalar(KILN_F32, 5);
    fails += kiln_optest("Transpose", "", 1, &x, 1, &y, 0, 0, "transpose scalar");

    /* big enough for the threaded path: expected values from a naive loop over y */
    x = kt_rand(KILN_F32, 4, KT_DIMS(6, 50, 7, 40), -1, 1, 7);
    y = kt_make(KILN_F32, 4, KT_DIMS(7, 6, 40, 50), NULL);
    const float *xp = x->data; // (6,50,7,40)
    float *yp = y->data;       // (7,6,40,50)
    for (int a = 0; a < 7; a++)
        for (int b = 0; b < 6; b++)
            for (int cc = 0; cc < 40; cc++)
                for (int d = 0; d < 50; d++)
                    yp[((a * 6 + b) * 40 + cc) * 50 + d] = xp[((b * 50 + d) * 7 + a) * 40 + cc];
    fails += kiln_optest("Transpose", "perm=[2,0,3,1]", 1, &x, 1, &y, 0, 0, "transpose large 4-D");

    x = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    fails += kiln_optest_fails("Transpose", "perm=[0,0,1]", 1, &x, 1, KILN_ERR_SHAPE,
                               "transpose repeated perm");
    x = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    fails += kiln_optest_fails("Transpose", "perm=[1,0]", 1, &x, 1, KILN_ERR_SHAPE,
                               "transpose short perm");

    fails += kiln_gradcheck("Transpose", "perm=[1,2,0]", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -1, 1, 1)},
                            NULL, "transpose grad 1,2,0");
    fails += kiln_gradcheck("Transpose", "perm=[2,0,3,1]", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 4, KT_DIMS(2, 3, 2, 4), -1, 1, 2)},
                            NULL, "transpose grad 2,0,3,1");
    fails += kiln_gradcheck("Transpose", "", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -1, 1, 3)},
                            NULL, "transpose grad default reverse");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Transpose", "perm=[0,2,3,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 311)},
                               1, "transpose random to channels last");
    fails += kiln_optest_sweep("Transpose", "perm=[0,3,1,2]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 17, 19, 3), -2, 2, 313)},
                               1, "transpose random from channels last");
    fails += kiln_optest_sweep("Transpose", "perm=[2,0,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 17, 19), -2, 2, 312)},
                               1, "transpose random 3-D");
    /* CUDA's shared-memory tiles (src/cuda/perm_tile.h: the output's innermost dim is not the
     * input's): maxvit_t's window partition and its reverse (runs over two dims), and 2-D
     * transposes with partial tiles, in 4-, 2-, 8- and 1-byte elements */
    fails += kiln_optest_sweep("Transpose", "perm=[0,2,4,3,5,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 6, KT_DIMS(2, 64, 7, 8, 7, 8), -2, 2, 1350)},
                               1, "transpose tiled, maxvit window partition");
    fails += kiln_optest_sweep("Transpose", "perm=[0,5,1,3,2,4]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F16, 6, KT_DIMS(2, 8, 8, 7, 7, 64), -2, 2, 1351)},
                               1, "transpose tiled, maxvit window reverse f16");
    fails += kiln_optest_sweep("Transpose", "perm=[1,0]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(70, 45), -2, 2, 1352)},
                               1, "transpose tiled 2-D, partial tiles, i64");
    fails += kiln_optest_sweep("Transpose", "perm=[1,0]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(33, 65), -2, 2, 1353)},
                               1, "transpose tiled 2-D, partial tiles, u8");
    /* the vector-read tiles (movement.cu perm_tile_vec_kernel): ViT's patch-embedding
     * transpose ((N, C, 196) -> (N, 196, C): 196 takes 4-element vectors, not 8), a B run
     * narrower than a 256-byte tile row with partial tiles both ways (8-element vectors of
     * f16), and 6 (2-element vectors) */
    fails += kiln_optest_sweep("Transpose", "perm=[0,2,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F16, 3, KT_DIMS(2, 72, 196), -2, 2, 1354)},
                               1, "transpose tiled, vectors of 4, ViT patches f16");
    fails += kiln_optest_sweep("Transpose", "perm=[0,2,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 100, 40), -2, 2, 1355)},
                               1, "transpose tiled, narrow B run, partial tiles");
    fails += kiln_optest_sweep("Transpose", "perm=[0,2,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 70, 6), -2, 2, 1356)},
                               1, "transpose tiled, vectors of 2");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Transpose", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 4), -2, 2, 1336)},
                               1, "transpose reversed f32");
    fails += kiln_optest_sweep("Transpose", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(2, 3, 4), -2, 2, 1337)},
                               1, "transpose reversed i64");
    fails += kiln_optest_sweep("Transpose", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(2, 3, 4), -2, 2, 1338)},
                               1, "transpose reversed u8");
    fails += kiln_optest_sweep("Transpose", "perm=[0,2,3,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1339)},
                               1, "transpose NCHW to NHWC f32");
    fails += kiln_optest_sweep("Transpose", "perm=[0,2,3,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1340)},
                               1, "transpose NCHW to NHWC i64");
    fails += kiln_optest_sweep("Transpose", "perm=[0,2,3,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1341)},
                               1, "transpose NCHW to NHWC u8");
    fails += kiln_optest_sweep("Transpose", "perm=[0,2,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 7, 9), -2, 2, 1342)},
                               1, "transpose inner swap f32");
    /* the last axis kept (a transformer's (L, N, D) -> (N, L, D)): CUDA moves its rows in
     * units of 16 bytes (D 24: 96 bytes in f32, 48 in f16), 8 or 4 (D 6: 24 / 12 bytes) or
     * elements (D 5) */
    fails += kiln_optest_sweep("Transpose", "perm=[1,0,2]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(7, 5, 24), -2, 2, 1345)},
                               1, "transpose rows kept, 16-byte units");
    fails += kiln_optest_sweep("Transpose", "perm=[1,0,2]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(7, 5, 6), -2, 2, 1346)},
                               1, "transpose rows kept, 8- or 4-byte units");
    fails += kiln_optest_sweep("Transpose", "perm=[2,1,0,3]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 4, 5, 5), -2, 2, 1347)},
                               1, "transpose rows kept, odd rows");
    fails += kiln_optest_sweep("Transpose", "perm=[0,2,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(3, 7, 9), -2, 2, 1343)},
                               1, "transpose inner swap i64");
    fails += kiln_optest_sweep("Transpose", "perm=[0,2,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(3, 7, 9), -2, 2, 1344)},
                               1, "transpose inner swap u8");
    fails += kiln_optest_sweep("Transpose", "perm=[0,1,2]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 4, 5), -2, 2, 1345)},
                               1, "transpose identity f32");
    fails += kiln_optest_sweep("Transpose", "perm=[0,1,2]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(3, 4, 5), -2, 2, 1346)},
                               1, "transpose identity i64");
    fails += kiln_optest_sweep("Transpose", "perm=[0,1,2]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(3, 4, 5), -2, 2, 1347)},
                               1, "transpose identity u8");
    fails += kiln_optest_sweep("Transpose", "perm=[2,1,0]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 1, 3), -2, 2, 1348)},
                               1, "transpose with a size-1 dim f32");
    fails += kiln_optest_sweep("Transpose", "perm=[2,1,0]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(2, 1, 3), -2, 2, 1349)},
                               1, "transpose with a size-1 dim i64");
    fails += kiln_optest_sweep("Transpose", "perm=[2,1,0]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(2, 1, 3), -2, 2, 1350)},
                               1, "transpose with a size-1 dim u8");
    fails += kiln_optest_sweep("Transpose", "perm=[3,0,5,1,4,2]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 6, KT_DIMS(2, 3, 2, 4, 1, 3), -2, 2, 1351)},
                               1, "transpose 6-D f32");
    fails += kiln_optest_sweep("Transpose", "perm=[3,0,5,1,4,2]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 6, KT_DIMS(2, 3, 2, 4, 1, 3), -2, 2, 1352)},
                               1, "transpose 6-D i64");
    fails += kiln_optest_sweep("Transpose", "perm=[3,0,5,1,4,2]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 6, KT_DIMS(2, 3, 2, 4, 1, 3), -2, 2, 1353)},
                               1, "transpose 6-D u8");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_transpose = {
    .precision = KILN_PREC_FOLLOW,
    .name = "Transpose", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace, .test = KILN_OP_TESTS(test),
    .grad = grad, .alias_when = moves_no_byte,
};
