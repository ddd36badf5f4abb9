/* depth_to_space.c — DepthToSpace and SpaceToDepth: moving blocks of channels into
 * blocksize x blocksize spatial blocks of a 4-D NCHW tensor, and back.
 *   DepthToSpace (opsets 1, 11, 13): (N, C, H, W) -> (N, C/b^2, H*b, W*b). mode "DCR"
 *     (the default) takes the channel as (b1, b2, c), "CRD" as (c, b1, b2).
 *   SpaceToDepth (opsets 1, 13): (N, C, H, W) -> (N, C*b^2, H/b, W/b), channel (b1, b2, c).
 * Any dtype; blocksize (required) >= 1 must divide C (b^2) or H and W. */
#include "../core/optest.h"

#include <inttypes.h>
#include <string.h>

static kiln_status check(kiln_op_ctx *c, int64_t *b) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE, "input dtype %s is not supported",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim == 4, KILN_ERR_SHAPE, "input must be 4-D (N, C, H, W), got rank %d", x->ndim);
    KILN_OP_CHECK(c, kiln_node_attr(c->node, "blocksize") != NULL, KILN_ERR_INVALID_ARGUMENT,
                  "attribute 'blocksize' is required");
    *b = kiln_attr_int(c->node, "blocksize", 0);
    KILN_OP_CHECK(c, *b >= 1 && *b <= 65536, KILN_ERR_INVALID_ARGUMENT, "blocksize=%" PRId64 " must be >= 1", *b);
    return KILN_OK;
}

/* DCR: 0, CRD: 1, or -1 for another mode */
static int mode_of(const kiln_node *n) {
    const char *m = kiln_attr_string(n, "mode", "DCR");
    return strcmp(m, "DCR") == 0 ? 0 : strcmp(m, "CRD") == 0 ? 1 : -1;
}

static kiln_status infer_d2s(kiln_op_ctx *c) {
    int64_t b = 1;
    kiln_status st = check(c, &b);
    if (st) return st;
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, mode_of(c->node) >= 0, KILN_ERR_INVALID_ARGUMENT, "mode='%s' must be \"DCR\" or \"CRD\"",
                  kiln_attr_string(c->node, "mode", ""));
    KILN_OP_CHECK(c, x->dims[1] % (b * b) == 0, KILN_ERR_SHAPE,
                  "channels %" PRId64 " are not a multiple of blocksize^2 = %" PRId64, x->dims[1], b * b);
    const int64_t dims[4] = {x->dims[0], x->dims[1] / (b * b), x->dims[2] * b, x->dims[3] * b};
    kiln_tensor_set_shape(c->out[0], x->dtype, 4, dims);
    return KILN_OK;
}

static kiln_status infer_s2d(kiln_op_ctx *c) {
    int64_t b = 1;
    kiln_status st = check(c, &b);
    if (st) return st;
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, x->dims[2] % b == 0 && x->dims[3] % b == 0, KILN_ERR_SHAPE,
                  "H %" PRId64 " and W %" PRId64 " must be multiples of blocksize %" PRId64, x->dims[2], x->dims[3], b);
    const int64_t dims[4] = {x->dims[0], x->dims[1] * b * b, x->dims[2] / b, x->dims[3] / b};
    kiln_tensor_set_shape(c->out[0], x->dtype, 4, dims);
    return KILN_OK;
}

/* For each element of the space side (N, C, H*b, W*b), the depth-side flat index; copies
 * one way or the other. */
static void move(kiln_op_ctx *c, bool to_space, int64_t b, bool crd) {
    const kiln_tensor *sp = to_space ? c->out[0] : c->in[0]; /* (N, C, H*b, W*b) */
    const kiln_tensor *dp = to_space ? c->in[0] : c->out[0]; /* (N, C*b*b, H, W) */
    const int64_t N = sp->dims[0], C = sp->dims[1], HB = sp->dims[2], WB = sp->dims[3];
    const int64_t H = dp->dims[2], W = dp->dims[3];
    const size_t es = kiln_dtype_size(sp->dtype);
    const char *src = c->in[0]->data;
    char *dst = c->out[0]->data;
    int64_t s = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t ch = 0; ch < C; ch++)
            for (int64_t hb = 0; hb < HB; hb++)
                for (int64_t wb = 0; wb < WB; wb++, s++) {
                    const int64_t h = hb / b, b1 = hb % b, w = wb / b, b2 = wb % b;
                    const int64_t dc = crd ? (ch * b + b1) * b + b2 : (b1 * b + b2) * C + ch;
                    const int64_t d = ((n * C * b * b + dc) * H + h) * W + w;
                    if (to_space) memcpy(dst + (size_t)s * es, src + (size_t)d * es, es);
                    else memcpy(dst + (size_t)d * es, src + (size_t)s * es, es);
                }
}

static kiln_status forward_d2s(kiln_op_ctx *c) {
    move(c, true, kiln_attr_int(c->node, "blocksize", 1), mode_of(c->node) == 1);
    return KILN_OK;
}

static kiln_status forward_s2d(kiln_op_ctx *c) {
    move(c, false, kiln_attr_int(c->node, "blocksize", 1), false);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test_d2s(void) {
    int fails = 0;
    /* (1, 8, 2, 3) 0..47, blocksize 2: the ONNX spec's examples */
    double v[48];
    for (int i = 0; i < 48; i++) v[i] = i;
    kiln_tensor *x = kt_make(KILN_F32, 4, KT_DIMS(1, 8, 2, 3), v);
    kiln_tensor *y = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 4, 6),
                             KT_VALS(0, 12, 1, 13, 2, 14, 24, 36, 25, 37, 26, 38, 3, 15, 4, 16, 5, 17, 27, 39, 28, 40,
                                     29, 41, 6, 18, 7, 19, 8, 20, 30, 42, 31, 43, 32, 44, 9, 21, 10, 22, 11, 23, 33,
                                     45, 34, 46, 35, 47));
    fails += kiln_optest("DepthToSpace", "blocksize=2;mode=DCR", 1, &x, 1, &y, 0, 0, "depth_to_space DCR");
    x = kt_make(KILN_I64, 4, KT_DIMS(1, 8, 2, 3), v);
    y = kt_make(KILN_I64, 4, KT_DIMS(1, 2, 4, 6),
                KT_VALS(0, 6, 1, 7, 2, 8, 12, 18, 13, 19, 14, 20, 3, 9, 4, 10, 5, 11, 15, 21, 16, 22, 17, 23, 24, 30,
                        25, 31, 26, 32, 36, 42, 37, 43, 38, 44, 27, 33, 28, 34, 29, 35, 39, 45, 40, 46, 41, 47));
    fails += kiln_optest("DepthToSpace", "blocksize=2;mode=CRD", 1, &x, 1, &y, 0, 0, "depth_to_space CRD i64");
    x = kt_make(KILN_F32, 4, KT_DIMS(1, 6, 2, 2), NULL);
    fails += kiln_optest_fails("DepthToSpace", "blocksize=2", 1, &x, 1, KILN_ERR_SHAPE, "depth_to_space C % b^2");
    x = kt_make(KILN_F32, 4, KT_DIMS(1, 8, 2, 2), NULL);
    fails += kiln_optest_fails("DepthToSpace", "blocksize=2;mode=XYZ", 1, &x, 1, KILN_ERR_INVALID_ARGUMENT,
                               "depth_to_space bad mode");
    x = kt_make(KILN_F32, 4, KT_DIMS(1, 8, 2, 2), NULL);
    fails += kiln_optest_fails("DepthToSpace", "", 1, &x, 1, KILN_ERR_INVALID_ARGUMENT,
                               "depth_to_space needs blocksize");
    x = kt_make(KILN_F32, 3, KT_DIMS(8, 2, 2), NULL);
    fails += kiln_optest_fails("DepthToSpace", "blocksize=2", 1, &x, 1, KILN_ERR_SHAPE, "depth_to_space rank 3");
    fails += kiln_optest_sweep("DepthToSpace", "blocksize=3;mode=CRD", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 18, 5, 7), -3, 3, 6001)}, 1,
                               "depth_to_space random CRD b3");
    fails += kiln_optest_sweep("DepthToSpace", "blocksize=2", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 12, 17, 19), -3, 3, 6002)}, 1,
                               "depth_to_space random DCR b2");
    return fails;
}

static int test_s2d(void) {
    int fails = 0;
    /* the inverse of DepthToSpace DCR: (1, 2, 4, 6) back to 0..47 in (1, 8, 2, 3) */
    double v[48];
    for (int i = 0; i < 48; i++) v[i] = i;
    kiln_tensor *x = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 4, 6),
                             KT_VALS(0, 12, 1, 13, 2, 14, 24, 36, 25, 37, 26, 38, 3, 15, 4, 16, 5, 17, 27, 39, 28, 40,
                                     29, 41, 6, 18, 7, 19, 8, 20, 30, 42, 31, 43, 32, 44, 9, 21, 10, 22, 11, 23, 33,
                                     45, 34, 46, 35, 47));
    kiln_tensor *y = kt_make(KILN_F32, 4, KT_DIMS(1, 8, 2, 3), v);
    fails += kiln_optest("SpaceToDepth", "blocksize=2", 1, &x, 1, &y, 0, 0, "space_to_depth inverse of DCR");
    /* the ONNX spec's example: (1, 1, 4, 6) 0..23, blocksize 2 */
    x = kt_make(KILN_U8, 4, KT_DIMS(1, 1, 4, 6), v);
    y = kt_make(KILN_U8, 4, KT_DIMS(1, 4, 2, 3),
                KT_VALS(0, 2, 4, 12, 14, 16, 1, 3, 5, 13, 15, 17, 6, 8, 10, 18, 20, 22, 7, 9, 11, 19, 21, 23));
    fails += kiln_optest("SpaceToDepth", "blocksize=2", 1, &x, 1, &y, 0, 0, "space_to_depth u8");
    x = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 5), NULL);
    fails += kiln_optest_fails("SpaceToDepth", "blocksize=2", 1, &x, 1, KILN_ERR_SHAPE, "space_to_depth W % b");
    x = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), NULL);
    fails += kiln_optest_fails("SpaceToDepth", "blocksize=0", 1, &x, 1, KILN_ERR_INVALID_ARGUMENT,
                               "space_to_depth blocksize 0");
    fails += kiln_optest_sweep("SpaceToDepth", "blocksize=2", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 18, 22), -3, 3, 6011)}, 1,
                               "space_to_depth random b2");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_depth_to_space = {
    .precision = KILN_PREC_FOLLOW,
    .name = "DepthToSpace", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer_d2s, .cpu_forward = forward_d2s, .test = KILN_OP_TESTS(test_d2s),
};

const kiln_op_def kiln_op_space_to_depth = {
    .precision = KILN_PREC_FOLLOW,
    .name = "SpaceToDepth", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer_s2d, .cpu_forward = forward_s2d, .test = KILN_OP_TESTS(test_s2d),
};
