/*
 * channel_shuffle.c — kiln.ChannelShuffle (internal op, domain "kiln"): ShuffleNet's
 * channel shuffle of a 4-D tensor X (N, C, H, W) -> Y (N, C, H, W), any dtype, attribute
 * `groups` g >= 1 dividing C:
 *
 *     Y = Reshape(Transpose(Reshape(X, (N, g, C/g, H, W)), (0, 2, 1, 3, 4)), (N, C, H, W))
 *
 * i.e. output channel c = a * g + b (a < C/g, b < g) is input channel b * (C/g) + a. The
 * layout pass (src/passes/channel_shuffle.c, run by src/passes/layout.c for device plans)
 * puts it where it finds that Reshape-Transpose-Reshape chain, so that the shuffle runs on
 * NHWC data as one gather (the CUDA kernel reads either layout: a channel permutation
 * within each pixel in NHWC, of whole planes in NCHW) instead of converting to NCHW and
 * back around a 5-D Transpose. Saved to ONNX as Reshape (to (0, g, C/g, -1)) - Transpose
 * (0, 2, 1, 3) - Reshape (to Shape(X)). Not differentiable: the pass runs after autograd
 * (training graphs get it in their forward and, for the backward's own Reshape-Transpose-
 * Reshape, with C/g groups).
 */
#include "../core/optest.h"

#include <inttypes.h>
#include <string.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE, "input dtype %s is not supported",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim == 4, KILN_ERR_SHAPE, "input has rank %d (a 4-D (N, C, H, W) tensor is required)", x->ndim);
    const kiln_attr *g = kiln_node_attr(c->node, "groups");
    KILN_OP_CHECK(c, g && g->type == KILN_ATTR_INT && g->i >= 1, KILN_ERR_INVALID_ARGUMENT,
                  "attribute groups (an integer >= 1) is required");
    KILN_OP_CHECK(c, x->dims[1] % g->i == 0, KILN_ERR_SHAPE, "groups = %" PRId64 " does not divide %" PRId64 " channels",
                  g->i, x->dims[1]);
    kiln_tensor_set_shape(c->out[0], x->dtype, 4, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    const int64_t g = kiln_attr_int(c->node, "groups", 1), C = x->dims[1], k = C / g;
    const int64_t N = x->dims[0], S = x->dims[2] * x->dims[3];
    const size_t es = kiln_dtype_size(x->dtype), plane = (size_t)S * es;
    if (plane == 0) return KILN_OK;
    for (int64_t n = 0; n < N; n++)
        for (int64_t ch = 0; ch < C; ch++) {
            const int64_t src = (ch % g) * k + ch / g;
            memcpy((char *)y->data + (size_t)(n * C + ch) * plane, (const char *)x->data + (size_t)(n * C + src) * plane,
                   plane);
        }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* numpy: x.reshape(1, 2, 3, 1, 1).transpose(0, 2, 1, 3, 4).reshape(1, 6, 1, 1) of
     * channels 0..5 = 0 3 1 4 2 5 */
    kiln_tensor *x = kt_make(KILN_F32, 4, KT_DIMS(1, 6, 1, 2), KT_VALS(0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15));
    kiln_tensor *y = kt_make(KILN_F32, 4, KT_DIMS(1, 6, 1, 2), KT_VALS(0, 10, 3, 13, 1, 11, 4, 14, 2, 12, 5, 15));
    fails += kiln_optest("ChannelShuffle", "groups=2", 1, &x, 1, &y, 0, 0, "channel shuffle of 6 channels, 2 groups");
    x = kt_make(KILN_I64, 4, KT_DIMS(2, 6, 1, 1), KT_VALS(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11));
    y = kt_make(KILN_I64, 4, KT_DIMS(2, 6, 1, 1), KT_VALS(0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11));
    fails += kiln_optest("ChannelShuffle", "groups=3", 1, &x, 1, &y, 0, 0, "channel shuffle, 3 groups, batch 2, i64");
    x = kt_make(KILN_F32, 4, KT_DIMS(1, 6, 2, 2), NULL);
    fails += kiln_optest_fails("ChannelShuffle", "groups=4", 1, &x, 1, KILN_ERR_SHAPE, "groups not dividing C");
    x = kt_make(KILN_F32, 3, KT_DIMS(1, 6, 2), NULL);
    fails += kiln_optest_fails("ChannelShuffle", "groups=2", 1, &x, 1, KILN_ERR_SHAPE, "rank 3");
    x = kt_make(KILN_F32, 4, KT_DIMS(1, 6, 2, 2), NULL);
    fails += kiln_optest_fails("ChannelShuffle", "", 1, &x, 1, KILN_ERR_INVALID_ARGUMENT, "no groups");
    /* for the backend sweep (tests/gpu/test_backend_ops.c: NCHW and NHWC): ShuffleNet's
     * 2 groups at odd sizes, an odd channel count with 3 groups, 1 group (a copy) */
    fails += kiln_optest_sweep("ChannelShuffle", "groups=2", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 116, 7, 5), -2, 2, 7101)}, 1,
                               "channel shuffle 116 channels, 2 groups");
    fails += kiln_optest_sweep("ChannelShuffle", "groups=3", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 15, 3, 3), -2, 2, 7102)}, 1,
                               "channel shuffle 15 channels, 3 groups");
    fails += kiln_optest_sweep("ChannelShuffle", "groups=1", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 8, 3, 3), -2, 2, 7103)}, 1,
                               "channel shuffle, 1 group");
    fails += kiln_optest_sweep("ChannelShuffle", "groups=2", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 24, 5, 3), 0, 200, 7104)}, 1,
                               "channel shuffle u8");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_channel_shuffle = {
    .precision = KILN_PREC_FOLLOW, .layout = KILN_LAYOUT_FOLLOW,
    .name = "ChannelShuffle", .domain = "kiln", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
    .max_outputs = 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
