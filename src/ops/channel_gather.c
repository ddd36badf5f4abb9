/*
 * channel_gather.c — kiln.ChannelGather (internal op, domain "kiln"): outputs whose channels
 * are channels of the inputs, or zeros. Inputs X_0 .. X_{k-1}: 4-D (N, C_i, H, W), one
 * dtype, the same N, H and W. Outputs Y_0 .. Y_{m-1}: (N, sizes[j], H, W). Attributes:
 *
 *     sizes  m ints: the outputs' channel counts
 *     map    sum(sizes) ints, the outputs' channels in order: i * 65536 + c for channel c
 *            (< 65536) of input i, or -1 for a channel of zeros
 *
 * The channel-gather pass (src/passes/channel_gather.c) writes it for a chain of channel
 * moves on device plans: a Concat along the channels, kiln.ChannelShuffle, Slices of
 * channels and the pad-channels pass's zero channels (ShuffleNet's block end and the next
 * block's split: four copies of the feature map, one here). The CUDA kernel reads either
 * layout, every input and output in one. Not differentiable (the pass runs on inference
 * graphs after autograd); not saved to ONNX (no pass output is).
 */
#include "channel_gather.h"
#include "../core/optest.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define CG_SHIFT KILN_CHANNEL_GATHER_SHIFT

static kiln_status infer(kiln_op_ctx *c) {
    int ns = 0, nm = 0;
    const int64_t *sizes = kiln_attr_ints(c->node, "sizes", &ns), *map = kiln_attr_ints(c->node, "map", &nm);
    KILN_OP_CHECK(c, sizes && ns == c->n_out, KILN_ERR_INVALID_ARGUMENT,
                  "attribute sizes needs one channel count per output (%d outputs, %d counts)", c->n_out, ns);
    int64_t total = 0;
    for (int j = 0; j < ns; j++) {
        KILN_OP_CHECK(c, sizes[j] >= 0, KILN_ERR_INVALID_ARGUMENT, "sizes[%d] = %" PRId64 " is negative", j, sizes[j]);
        total += sizes[j];
    }
    KILN_OP_CHECK(c, total <= KILN_CHANNEL_GATHER_MAX_MAP, KILN_ERR_INVALID_ARGUMENT,
                  "the outputs have %" PRId64 " channels; at most %d are taken", total, KILN_CHANNEL_GATHER_MAX_MAP);
    KILN_OP_CHECK(c, map && nm == total, KILN_ERR_INVALID_ARGUMENT,
                  "attribute map has %d entries; the outputs have %" PRId64 " channels", map ? nm : 0, total);
    const kiln_tensor *x0 = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x0->dtype) > 0, KILN_ERR_TYPE, "input dtype %s is not supported",
                  kiln_dtype_name(x0->dtype));
    for (int i = 0; i < c->n_in; i++) {
        const kiln_tensor *x = c->in[i];
        KILN_OP_CHECK(c, x && x->ndim == 4, KILN_ERR_SHAPE, "input %d is not a 4-D (N, C, H, W) tensor", i);
        KILN_OP_CHECK(c, x->dtype == x0->dtype, KILN_ERR_TYPE, "input %d is %s, input 0 %s", i,
                      kiln_dtype_name(x->dtype), kiln_dtype_name(x0->dtype));
        KILN_OP_CHECK(c, x->dims[0] == x0->dims[0] && x->dims[2] == x0->dims[2] && x->dims[3] == x0->dims[3],
                      KILN_ERR_SHAPE, "input %d's N, H, W (%" PRId64 ", %" PRId64 ", %" PRId64 ") are not input 0's", i,
                      x->dims[0], x->dims[2], x->dims[3]);
    }
    for (int e = 0; e < nm; e++) {
        if (map[e] == -1) continue;
        const int64_t i = map[e] / CG_SHIFT, ch = map[e] % CG_SHIFT;
        KILN_OP_CHECK(c, map[e] >= 0 && i < c->n_in && ch < c->in[i]->dims[1], KILN_ERR_INVALID_ARGUMENT,
                      "map[%d] = %" PRId64 " names no channel of the inputs", e, map[e]);
    }
    for (int j = 0; j < c->n_out; j++)
        kiln_tensor_set_shape(c->out[j], x0->dtype, 4, KT_DIMS(x0->dims[0], sizes[j], x0->dims[2], x0->dims[3]));
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    int nm = 0;
    const int64_t *map = kiln_attr_ints(c->node, "map", &nm);
    const kiln_tensor *x0 = c->in[0];
    const int64_t N = x0->dims[0], S = x0->dims[2] * x0->dims[3];
    const size_t es = kiln_dtype_size(x0->dtype), plane = (size_t)S * es;
    int e0 = 0;
    for (int j = 0; j < c->n_out; j++) {
        kiln_tensor *y = c->out[j];
        const int64_t C = y->dims[1];
        for (int64_t n = 0; n < N; n++)
            for (int64_t ch = 0; ch < C; ch++) {
                char *dst = (char *)y->data + (size_t)(n * C + ch) * plane;
                const int64_t e = map[e0 + ch];
                if (e < 0) {
                    memset(dst, 0, plane);
                    continue;
                }
                const kiln_tensor *x = c->in[e / CG_SHIFT];
                memcpy(dst, (const char *)x->data + (size_t)(n * x->dims[1] + e % CG_SHIFT) * plane, plane);
            }
        e0 += (int)C;
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* two inputs of 2 and 1 channels (values 1 2 | 3): Y0 = (x1 c0, zero, x0 c1), Y1 = (x0 c0) */
    kiln_tensor *in[2] = {kt_make(KILN_F32, 4, KT_DIMS(1, 2, 1, 2), KT_VALS(1, 10, 2, 20)),
                          kt_make(KILN_F32, 4, KT_DIMS(1, 1, 1, 2), KT_VALS(3, 30))};
    kiln_tensor *out[2] = {kt_make(KILN_F32, 4, KT_DIMS(1, 3, 1, 2), KT_VALS(3, 30, 0, 0, 2, 20)),
                           kt_make(KILN_F32, 4, KT_DIMS(1, 1, 1, 2), KT_VALS(1, 10))};
    fails += kiln_optest("ChannelGather", "sizes=[3,1];map=[65536,-1,1,0]", 2, in, 2, out, 0, 0,
                         "two inputs, a zero channel, two outputs");
    /* batch 2, i64, one input reversed */
    kiln_tensor *x = kt_make(KILN_I64, 4, KT_DIMS(2, 3, 1, 1), KT_VALS(0, 1, 2, 3, 4, 5));
    kiln_tensor *y = kt_make(KILN_I64, 4, KT_DIMS(2, 3, 1, 1), KT_VALS(2, 1, 0, 5, 4, 3));
    fails += kiln_optest("ChannelGather", "sizes=[3];map=[2,1,0]", 1, &x, 1, &y, 0, 0, "channels reversed, batch 2, i64");
    /* errors */
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 3, 2), NULL);
    fails += kiln_optest_fails("ChannelGather", "sizes=[2];map=[0,65536]", 2, in, 1, KILN_ERR_SHAPE, "H differs");
    x = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), NULL);
    fails += kiln_optest_fails("ChannelGather", "sizes=[2];map=[0,2]", 1, &x, 1, KILN_ERR_INVALID_ARGUMENT,
                               "channel 2 of 2");
    x = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), NULL);
    fails += kiln_optest_fails("ChannelGather", "sizes=[2];map=[0]", 1, &x, 1, KILN_ERR_INVALID_ARGUMENT,
                               "map shorter than the outputs");
    x = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), NULL);
    fails += kiln_optest_fails("ChannelGather", "sizes=[2];map=[0,65536]", 1, &x, 1, KILN_ERR_INVALID_ARGUMENT,
                               "an input that is not there");
    x = kt_make(KILN_F32, 3, KT_DIMS(1, 2, 2), NULL);
    fails += kiln_optest_fails("ChannelGather", "sizes=[1];map=[0]", 1, &x, 1, KILN_ERR_SHAPE, "rank 3");
    /* for the backend sweep (NCHW and NHWC): ShuffleNet's block end at 58 channels (Concat,
     * shuffle, the next block's halves, the second padded to 64), f32 and u8 */
    {
        static int64_t map[58 + 64];
        for (int k = 0; k < 116; k++) map[k] = (k % 2) * CG_SHIFT + k / 2; /* shuffled k: half k % 2, channel k / 2 */
        for (int k = 116; k < 58 + 64; k++) map[k] = -1;
        char attrs[1400];
        int p = snprintf(attrs, sizeof attrs, "sizes=[58,64];map=[");
        for (int k = 0; k < 58 + 64 && p < (int)sizeof attrs; k++)
            p += snprintf(attrs + p, sizeof attrs - (size_t)p, "%s%lld", k ? "," : "", (long long)map[k]);
        if (p < (int)sizeof attrs - 1) snprintf(attrs + p, sizeof attrs - (size_t)p, "]");
        fails += kiln_optest_sweep("ChannelGather", attrs, 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 58, 7, 5), -2, 2, 7201),
                                                     kt_rand(KILN_F32, 4, KT_DIMS(3, 58, 7, 5), -2, 2, 7202)},
                                   2, "ShuffleNet's block end: concat, shuffle, halves, zero pad");
        fails += kiln_optest_sweep("ChannelGather", attrs, 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 58, 3, 3), 0, 200, 7203),
                                                     kt_rand(KILN_U8, 4, KT_DIMS(2, 58, 3, 3), 0, 200, 7204)},
                                   2, "the same, u8");
    }
    fails += kiln_optest_sweep("ChannelGather", "sizes=[5,3];map=[2,131072,-1,0,65536,131073,1,-1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 6), -2, 2, 7205),
                                                 kt_rand(KILN_F32, 4, KT_DIMS(2, 1, 4, 6), -2, 2, 7206),
                                                 kt_rand(KILN_F32, 4, KT_DIMS(2, 2, 4, 6), -2, 2, 7207)},
                               2, "three inputs, zero channels, odd counts");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_channel_gather = {
    .precision = KILN_PREC_FOLLOW,
    .name = "ChannelGather", .domain = "kiln", .min_inputs = 1, .max_inputs = KILN_CHANNEL_GATHER_MAX_IO, .min_outputs = 1,
    .max_outputs = KILN_CHANNEL_GATHER_MAX_IO, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
