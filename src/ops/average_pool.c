/*
 * average_pool.c — AveragePool (opsets 11..21): the mean of X over each window.
 *   X (N, C, D1..Dk), k = 1..3  ->  Y (N, C, O1..Ok).
 *   Attributes: kernel_shape (required), strides, pads, ceil_mode, auto_pad,
 *   count_include_pad, dilations (opset 19; accepted at any opset). Output sizes follow
 *   conv_common.h.
 *   Divisor: the number of input elements in the window, or with count_include_pad = 1 the
 *   number of window taps inside the padded input [-pad_begin, D + pad_end) — taps that
 *   ceil_mode pushes past the end padding are not counted (as onnxruntime does). A window
 *   without any counted element gives NaN (0/0); only dilations can produce one.
 *   Dtypes: f32 and f64; f16 and bf16 through f32 scratch. Sums in double.
 * Parallel over the (n, c) planes with OpenMP.
 * Gradient: kiln.AveragePoolGrad(dY, X) adds dY / divisor to each window's taps inside X
 *   (only X's shape is read).
 */
#include "../core/optest.h"
#include "conv_common.h"

#include <math.h>

/* Taps of dim t's window at grid position g that fall inside [-pb, img + pe). */
static int64_t taps_in_padded(const kiln_window *w, int t, int64_t g) {
    int64_t n = 0;
    for (int64_t j = 0; j < w->k[t]; j++)
        n += g * w->s[t] - w->pb[t] + j * w->d[t] < w->img[t] + w->pe[t];
    return n;
}

/* One template for float and double. */
#define DEFINE_AVGPOOL(NAME, T)                                                              \
    static void NAME(const kiln_window *w, int64_t NC, const T *x, T *y, bool include_pad) { \
        const int64_t I0 = w->img[0], I1 = w->img[1], I2 = w->img[2];                        \
        const int64_t G0 = w->grid[0], G1 = w->grid[1], G2 = w->grid[2];                     \
        const int64_t I = I0 * I1 * I2, G = G0 * G1 * G2;                                    \
        _Pragma("omp parallel for schedule(static) if (NC * G > 4096)")                     \
        for (int64_t nc = 0; nc < NC; nc++) {                                                \
            const T *xp = x + nc * I;                                                        \
            T *yp = y + nc * G;                                                              \
            for (int64_t g0 = 0; g0 < G0; g0++)                                              \
                for (int64_t g1 = 0; g1 < G1; g1++)                                          \
                    for (int64_t g2 = 0; g2 < G2; g2++) {                                    \
                        int64_t lo0, hi0, lo1, hi1, lo2, hi2;                                \
                        kiln_window_taps(w, 0, g0, &lo0, &hi0);                              \
                        kiln_window_taps(w, 1, g1, &lo1, &hi1);                              \
                        kiln_window_taps(w, 2, g2, &lo2, &hi2);                              \
                        const int64_t b0 = g0 * w->s[0] - w->pb[0];                          \
                        const int64_t b1 = g1 * w->s[1] - w->pb[1];                          \
                        const int64_t b2 = g2 * w->s[2] - w->pb[2];                          \
                        double sum = 0;                                                      \
                        for (int64_t j0 = lo0; j0 < hi0; j0++)                               \
                            for (int64_t j1 = lo1; j1 < hi1; j1++) {                         \
                                const int64_t row =                                          \
                                    ((b0 + j0 * w->d[0]) * I1 + b1 + j1 * w->d[1]) * I2 + b2;\
                                for (int64_t j2 = lo2; j2 < hi2; j2++)                       \
                                    sum += xp[row + j2 * w->d[2]];                           \
                            }                                                                \
                        int64_t count = (hi0 - lo0) * (hi1 - lo1) * (hi2 - lo2);             \
                        if (include_pad)                                                     \
                            count = taps_in_padded(w, 0, g0) * taps_in_padded(w, 1, g1) *    \
                                    taps_in_padded(w, 2, g2);                                \
                        *yp++ = (T)(count ? sum / (double)count : NAN);                      \
                    }                                                                        \
        }                                                                                    \
    }

DEFINE_AVGPOOL(avgpool_f32, float)
DEFINE_AVGPOOL(avgpool_f64, double)

static kiln_status infer(kiln_op_ctx *c) {
    kiln_window w;
    return kiln_pool_infer(c, false, kiln_attr_int(c->node, "ceil_mode", 0) != 0, &w);
}

static size_t workspace(const kiln_op_ctx *c) {
    return kiln_stage_size(c->in[0]) + kiln_stage_size(c->out[0]);
}

static kiln_status forward(kiln_op_ctx *c) {
    kiln_window w;
    kiln_status st = kiln_pool_infer(c, false, kiln_attr_int(c->node, "ceil_mode", 0) != 0, &w);
    if (st != KILN_OK) return st;
    const kiln_tensor *x = c->in[0];
    char *ws = c->workspace;
    const void *X = kiln_stage_in(x, &ws);      // (N*C, D...)
    void *Y = kiln_stage_out(c->out[0], &ws);   // (N*C, O...)
    const bool include_pad = kiln_attr_int(c->node, "count_include_pad", 0) != 0;
    const int64_t NC = x->dims[0] * x->dims[1];
    if (x->dtype == KILN_F64) avgpool_f64(&w, NC, X, Y, include_pad);
    else avgpool_f32(&w, NC, X, Y, include_pad);
    kiln_stage_finish(c->out[0], Y);
    return KILN_OK;
}

/* ------------------------------------------------------------------ gradient */

/* dL/dX = kiln.AveragePoolGrad(dY, X): each window's dY / divisor is added to the window's
 * elements inside X (the same divisor as the forward pass). Only X's shape is read. */
static kiln_status grad(kiln_grad_ctx *g) {
    g->dx[0] = kiln_grad_emit(g, "kiln", "AveragePoolGrad", 2,
                              (int[]){g->dy[0], KILN_GRAD_IN(g, 0)}, 1, NULL, true, NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

/* dx (NC, I) = 0, then each window's share added; (n, c) planes in parallel. */
#define DEFINE_AVGPOOL_GRAD(NAME, T)                                                         \
    static void NAME(const kiln_window *w, int64_t NC, const T *dy, T *dx, bool include_pad) {\
        const int64_t I1 = w->img[1], I2 = w->img[2];                                        \
        const int64_t G0 = w->grid[0], G1 = w->grid[1], G2 = w->grid[2];                     \
        const int64_t I = w->img[0] * I1 * I2, G = G0 * G1 * G2;                             \
        _Pragma("omp parallel for schedule(static) if (NC * G > 4096)")                     \
        for (int64_t nc = 0; nc < NC; nc++) {                                                \
            const T *dyp = dy + nc * G;                                                      \
            T *dxp = dx + nc * I;                                                            \
            for (int64_t i = 0; i < I; i++) dxp[i] = 0;                                      \
            for (int64_t g0 = 0; g0 < G0; g0++)                                              \
                for (int64_t g1 = 0; g1 < G1; g1++)                                          \
                    for (int64_t g2 = 0; g2 < G2; g2++, dyp++) {                             \
                        int64_t lo0, hi0, lo1, hi1, lo2, hi2;                                \
                        kiln_window_taps(w, 0, g0, &lo0, &hi0);                              \
                        kiln_window_taps(w, 1, g1, &lo1, &hi1);                              \
                        kiln_window_taps(w, 2, g2, &lo2, &hi2);                              \
                        int64_t count = (hi0 - lo0) * (hi1 - lo1) * (hi2 - lo2);             \
                        if (include_pad)                                                     \
                            count = taps_in_padded(w, 0, g0) * taps_in_padded(w, 1, g1) *    \
                                    taps_in_padded(w, 2, g2);                                \
                        if (!count) continue;                                                \
                        const T share = (T)(*dyp / (double)count);                           \
                        const int64_t b0 = g0 * w->s[0] - w->pb[0];                          \
                        const int64_t b1 = g1 * w->s[1] - w->pb[1];                          \
                        const int64_t b2 = g2 * w->s[2] - w->pb[2];                          \
                        for (int64_t j0 = lo0; j0 < hi0; j0++)                               \
                            for (int64_t j1 = lo1; j1 < hi1; j1++) {                         \
                                const int64_t row =                                          \
                                    ((b0 + j0 * w->d[0]) * I1 + b1 + j1 * w->d[1]) * I2 + b2;\
                                for (int64_t j2 = lo2; j2 < hi2; j2++)                       \
                                    dxp[row + j2 * w->d[2]] += share;                        \
                            }                                                                \
                    }                                                                        \
        }                                                                                    \
    }

DEFINE_AVGPOOL_GRAD(avgpool_grad_f32, float)
DEFINE_AVGPOOL_GRAD(avgpool_grad_f64, double)

static kiln_status grad_infer(kiln_op_ctx *c) {
    kiln_window w;
    return kiln_pool_grad_infer(c, kiln_attr_int(c->node, "ceil_mode", 0) != 0, &w);
}

static size_t grad_workspace(const kiln_op_ctx *c) {
    return kiln_stage_size(c->in[0]) + kiln_stage_size(c->out[0]);
}

static kiln_status grad_forward(kiln_op_ctx *c) {
    kiln_window w;
    kiln_status st = kiln_pool_grad_infer(c, kiln_attr_int(c->node, "ceil_mode", 0) != 0, &w);
    if (st != KILN_OK) return st;
    const kiln_tensor *x = c->in[1];
    char *ws = c->workspace;
    const void *dY = kiln_stage_in(c->in[0], &ws);  // (N*C, O...)
    void *dX = kiln_stage_out(c->out[0], &ws);      // (N*C, D...)
    const bool include_pad = kiln_attr_int(c->node, "count_include_pad", 0) != 0;
    const int64_t NC = x->dims[0] * x->dims[1];
    if (x->dtype == KILN_F64) avgpool_grad_f64(&w, NC, dY, dX, include_pad);
    else avgpool_grad_f32(&w, NC, dY, dX, include_pad);
    kiln_stage_finish(c->out[0], dX);
    return KILN_OK;
}

/* ------------------------------------------------------------------- tests */

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* Expected values computed once with numpy (sum over the window's taps inside the
     * input, divided per count_include_pad; output sizes worked out by hand). */
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 2, 4, 5), KT_VALS(-7, -3, -8, -7, -5, -4, 8, -2, -7,
                8, 1, -7, -8, -8, 8, 1, 3, 9, -2, 8, -2, 4, 6, -8, 4, 6, 9, 3, 0, -7, 5, -1,
                6, -9, -3, 6, 2, 4, 2, 6)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 2, 5, 3), KT_VALS(-1.5, -6, 1.5, -2, -6.66666667,
                3.66666667, 0.333333333, -3, 8, -0.5, -2.25, 8, 2, 3.5, 8, 4.25, 0.25, -1.5,
                3.5, -0.333333333, -2, 4.5, 1, -1.33333333, 3, 0.75, 1.5, 4, 3, 6)),
        };
        fails += kiln_optest("AveragePool",
                             "kernel_shape=[3,2];strides=[1,2];pads=[1,0,2,1];count_include_pad=0",
                             1, in, 1, want, 1e-6, 1e-6, "averagepool pads count_include_pad=0");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 2, 4, 5), KT_VALS(-7, -3, -8, -7, -5, -4, 8, -2, -7,
                8, 1, -7, -8, -8, 8, 1, 3, 9, -2, 8, -2, 4, 6, -8, 4, 6, 9, 3, 0, -7, 5, -1,
                6, -9, -3, 6, 2, 4, 2, 6)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 2, 5, 3), KT_VALS(-1, -4, 0.5, -2, -6.66666667,
                1.83333333, 0.333333333, -3, 4, -0.333333333, -1.5, 2.66666667, 0.666666667,
                1.16666667, 1.33333333, 2.83333333, 0.166666667, -0.5, 3.5, -0.333333333,
                -1, 4.5, 1, -0.666666667, 2, 0.5, 0.5, 1.33333333, 1, 1)),
        };
        fails += kiln_optest("AveragePool",
                             "kernel_shape=[3,2];strides=[1,2];pads=[1,0,2,1];count_include_pad=1",
                             1, in, 1, want, 1e-6, 1e-6, "averagepool pads count_include_pad=1");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 6), KT_VALS(6, 5, 3, -4, -8, 6)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 3), KT_VALS(4.66666667, -3, -1)),
        };
        fails += kiln_optest("AveragePool",
                             "kernel_shape=[3];strides=[2];ceil_mode=1;count_include_pad=0", 1,
                             in, 1, want, 1e-6, 1e-6,
                             "averagepool 1-D ceil_mode count_include_pad=0");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 6), KT_VALS(6, 5, 3, -4, -8, 6)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 4), KT_VALS(5.5, 1.33333333, -2, 6)),
        };
        fails += kiln_optest("AveragePool",
                             "kernel_shape=[3];strides=[2];pads=[1,1];ceil_mode=1;"
                             "count_include_pad=0",
                             1, in, 1, want, 1e-6, 1e-6,
                             "averagepool 1-D ceil_mode pads count_include_pad=0");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 6), KT_VALS(6, 5, 3, -4, -8, 6)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 3), KT_VALS(4.66666667, -3, -1)),
        };
        fails += kiln_optest("AveragePool",
                             "kernel_shape=[3];strides=[2];ceil_mode=1;count_include_pad=1", 1,
                             in, 1, want, 1e-6, 1e-6,
                             "averagepool 1-D ceil_mode count_include_pad=1");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 6), KT_VALS(6, 5, 3, -4, -8, 6)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 4), KT_VALS(3.66666667, 1.33333333, -2, 3)),
        };
        fails += kiln_optest("AveragePool",
                             "kernel_shape=[3];strides=[2];pads=[1,1];ceil_mode=1;"
                             "count_include_pad=1",
                             1, in, 1, want, 1e-6, 1e-6,
                             "averagepool 1-D ceil_mode pads count_include_pad=1");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 1, 5, 5), KT_VALS(-3, -5, -9, -7, -9, -2, -4, 0, 1,
                -4, 1, 2, 3, 2, -9, -5, 6, 2, -4, -3, 8, 4, -2, -4, -7)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), KT_VALS(-2, -2, -6, -1.25, -0.25, -1.25,
                2.5, 1, -3.75)),
        };
        fails += kiln_optest_opset("AveragePool", "kernel_shape=[2,2];dilations=[2,2]", 19, 1, in,
                                   1, want, 1e-6, 1e-6, "averagepool dilations (opset 19)");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 1, 5, 5), KT_VALS(6, 2, -2, 4, 1, 1, 3, 5, 0, -2,
                -5, -4, 9, -6, -8, 2, -3, -8, 1, 5, -9, 0, -7, 1, 6)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), KT_VALS(3, 2, 0.75, -1, -0.333333333,
                -1.66666667, -2.5, -2.66666667, 3.25)),
        };
        fails += kiln_optest("AveragePool",
                             "kernel_shape=[3,3];strides=[2,2];auto_pad=SAME_UPPER", 1, in, 1,
                             want, 1e-6, 1e-6, "averagepool SAME_UPPER");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 1, 5, 5), KT_VALS(6, 2, -2, 4, 1, 1, 3, 5, 0, -2,
                -5, -4, 9, -6, -8, 2, -3, -8, 1, 5, -9, 0, -7, 1, 6)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 1, 5, 5), KT_VALS(6, 4, 0, 1, 2.5, 3.5, 3, 2, 1.75,
                0.75, -2, -1.25, 3.25, 2, -4, -1.5, -2.5, -1.5, -1, -2, -3.5, -2.5, -4.5,
                -3.25, 3.25)),
        };
        fails += kiln_optest("AveragePool", "kernel_shape=[2,2];auto_pad=SAME_LOWER", 1, in, 1,
                             want, 1e-6, 1e-6, "averagepool SAME_LOWER");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F64, 3, KT_DIMS(2, 1, 4), KT_VALS(1.135, 0.548, 1.607, 1.022, -0.805,
                0.579, -0.64, 0.999)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F64, 3, KT_DIMS(2, 1, 2), KT_VALS(0.8415, 1.3145, -0.113, 0.1795)),
        };
        fails += kiln_optest("AveragePool", "kernel_shape=[2];strides=[2]", 1, in, 1, want, 1e-12,
                             0, "averagepool f64");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F16, 4, KT_DIMS(1, 1, 2, 4), KT_VALS(-6, -2, -6, -7, 4, 7, -7, 4)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F16, 4, KT_DIMS(1, 1, 1, 2), KT_VALS(0.75, -4)),
        };
        fails += kiln_optest("AveragePool", "kernel_shape=[2,2];strides=[2,2]", 1, in, 1, want, 0,
                             0, "averagepool f16");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 5, KT_DIMS(1, 1, 3, 3, 3), KT_VALS(4, 5, 4, 1, -7, 5, -6, -1, 9,
                1, -4, -8, -5, 1, 7, 6, -5, 4, 3, 6, 0, 0, -2, 7, 0, -7, 0)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 5, KT_DIMS(1, 1, 2, 2, 2), KT_VALS(-0.5, 0.375, -2, 1.625, 0,
                0.875, -1.5, 0.625)),
        };
        fails += kiln_optest("AveragePool", "kernel_shape=[2,2,2]", 1, in, 1, want, 1e-6, 1e-6,
                             "averagepool 3-D");
    }
    {
        /* SAME_UPPER, in 1, kernel 2, dilation 4: pads 2+2, taps at -2 and 2 both miss the
         * input: 0/0 without count_include_pad, 0/2 with it (hand-computed). */
        kiln_tensor *in[1] = {kt_make(KILN_F32, 3, KT_DIMS(1, 1, 1), KT_VALS(5))};
        kiln_tensor *want[1] = {kt_make(KILN_F32, 3, KT_DIMS(1, 1, 1), KT_VALS(NAN))};
        fails += kiln_optest("AveragePool", "kernel_shape=[2];dilations=[4];auto_pad=SAME_UPPER",
                             1, in, 1, want, 0, 0, "averagepool empty window");
        in[0] = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 1), KT_VALS(5));
        want[0] = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 1), KT_VALS(0));
        fails += kiln_optest("AveragePool",
                             "kernel_shape=[2];dilations=[4];auto_pad=SAME_UPPER;"
                             "count_include_pad=1",
                             1, in, 1, want, 0, 0, "averagepool empty window count_include_pad");
    }
    /* Gradient rule against finite differences. */
    static const struct {
        const char *label, *attrs;
        int ndim;
        int64_t dims[5];
    } gc[] = {
        {"averagepool grad pads count_include_pad=0",
         "kernel_shape=[3,2];strides=[1,2];pads=[1,0,2,1];count_include_pad=0", 4, {2, 2, 4, 5}},
        {"averagepool grad pads count_include_pad=1",
         "kernel_shape=[3,2];strides=[1,2];pads=[1,0,2,1];count_include_pad=1", 4, {2, 2, 4, 5}},
        {"averagepool grad ceil_mode count_include_pad=1",
         "kernel_shape=[2,3];strides=[2,2];pads=[1,0,0,1];ceil_mode=1;count_include_pad=1", 4,
         {1, 2, 6, 6}},
        {"averagepool grad ceil_mode count_include_pad=0",
         "kernel_shape=[2,3];strides=[2,2];ceil_mode=1", 4, {1, 2, 5, 6}},
        {"averagepool grad 1-D SAME_LOWER", "kernel_shape=[3];strides=[2];auto_pad=SAME_LOWER", 3,
         {2, 2, 8}},
        {"averagepool grad 3-D dilations",
         "kernel_shape=[2,2,2];dilations=[1,2,1];pads=[0,1,1,1,0,0]", 5, {1, 2, 3, 4, 3}},
    };
    for (size_t i = 0; i < sizeof gc / sizeof gc[0]; i++) {
        kiln_tensor *x = kt_rand(KILN_F64, gc[i].ndim, gc[i].dims, -1, 1, 900 + i);
        fails += kiln_gradcheck("AveragePool", gc[i].attrs, 0, 1, &x, NULL, gc[i].label);
    }

    /* errors */
    kiln_tensor *in[1];
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), NULL);
    fails += kiln_optest_fails("AveragePool", "kernel_shape=[2,2];strides=[0,1]", 1, in, 1,
                               KILN_ERR_SHAPE, "averagepool zero stride");
    in[0] = kt_make(KILN_U8, 4, KT_DIMS(1, 1, 4, 4), NULL);
    fails += kiln_optest_fails("AveragePool", "kernel_shape=[2,2]", 1, in, 1, KILN_ERR_TYPE,
                               "averagepool uint8");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), NULL);
    fails += kiln_optest_fails("AveragePool", "kernel_shape=[2,2];auto_pad=SAME", 1, in, 1,
                               KILN_ERR_UNSUPPORTED, "averagepool unknown auto_pad");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), NULL);
    fails += kiln_optest_fails("AveragePool", "kernel_shape=[2,2];pads=[1,1]", 1, in, 1,
                               KILN_ERR_SHAPE, "averagepool pads count");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("AveragePool", "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 251)},
                               1, "avgpool random pads excluded");
    fails += kiln_optest_sweep("AveragePool", "kernel_shape=[3,2];strides=[1,2];pads=[1,0,1,1];count_include_pad=1", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 252)},
                               1, "avgpool random pads included");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("AveragePool", "kernel_shape=[3,3];pads=[1,1,1,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 9, 7), -2, 2, 1266)},
                               1, "averagepool exclude pad");
    fails += kiln_optest_sweep("AveragePool", "kernel_shape=[3,3];pads=[1,1,1,1];count_include_pad=1", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 9, 7), -2, 2, 1267)},
                               1, "averagepool include pad");
    fails += kiln_optest_sweep("AveragePool", "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1];ceil_mode=1;count_include_pad=1", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 10, 10), -2, 2, 1268)},
                               1, "averagepool ceil_mode include pad");
    fails += kiln_optest_sweep("AveragePool", "kernel_shape=[2,3];pads=[0,1,1,0]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 7, 8), -2, 2, 1269)},
                               1, "averagepool asymmetric pads");
    fails += kiln_optest_sweep("AveragePool", "kernel_shape=[2,2];strides=[2,2]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 16, 16), -2, 2, 1270)},
                               1, "averagepool 2x2 s2");
    fails += kiln_optest_sweep("AveragePool", "kernel_shape=[2,2];strides=[2,2];count_include_pad=1", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 7, 9), -2, 2, 1275)},
                               1, "averagepool 2x2 s2 odd sizes include pad");
    fails += kiln_optest_sweep("AveragePool", "kernel_shape=[3,3];pads=[1,1,1,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 8, 9, 7), -2, 2, 5035)},
                               1, "averagepool (NHWC) exclude pad, 8 channels");
    fails += kiln_optest_sweep("AveragePool", "kernel_shape=[3,3];pads=[1,1,1,1];count_include_pad=1", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 9, 7), -2, 2, 5036)},
                               1, "averagepool (NHWC) include pad, 16 channels");
    fails += kiln_optest_sweep("AveragePool", "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1];ceil_mode=1;count_include_pad=1", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 10, 10), -2, 2, 5037)},
                               1, "averagepool (NHWC) ceil_mode include pad, 8 channels");
    fails += kiln_optest_sweep("AveragePool", "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1];ceil_mode=1", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 10, 10), -2, 2, 5038)},
                               1, "averagepool (NHWC) ceil_mode exclude pad, 8 channels");
    fails += kiln_optest_sweep("AveragePool", "kernel_shape=[2,3];pads=[0,1,1,0]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 24, 7, 8), -2, 2, 5039)},
                               1, "averagepool (NHWC) asymmetric pads, 24 channels");
    fails += kiln_optest_sweep("AveragePool", "kernel_shape=[2,2];strides=[2,2]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 32, 8, 6), -2, 2, 5040)},
                               1, "averagepool (NHWC) 2x2 s2, 32 channels");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_average_pool = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_POOL,
    .name = "AveragePool", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
    .max_outputs = 1, .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace,
    .test = KILN_OP_TESTS(test), .grad = grad,
};

#ifdef KILN_OPTESTS
/* AveragePoolGrad; expected values from a direct numpy loop over the windows, adding
 * dY / divisor to each tap inside X (divisor: taps inside X, or with count_include_pad taps
 * inside the padded input). */
static int test_grad(void) {
    int fails = 0;
    static const double dy[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    kiln_tensor *in[2] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), dy),
                          kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL)};
    kiln_tensor *want = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3),
                                KT_VALS(0.25, 0.75, 2, 1.25, 3, 6.25, 4.5, 9.75, 17.25));
    fails += kiln_optest("AveragePoolGrad", "kernel_shape=[2,2];pads=[0,0,1,1]", 2, in, 1, &want,
                         1e-6, 1e-6, "averagepool dX end pads count_include_pad=0");
    in[0] = kt_make(KILN_F64, 4, KT_DIMS(1, 1, 3, 3), dy);
    in[1] = kt_make(KILN_F64, 4, KT_DIMS(1, 1, 3, 3), NULL);
    want = kt_make(KILN_F64, 4, KT_DIMS(1, 1, 3, 3),
                   KT_VALS(0.25, 0.75, 1.25, 1.25, 3, 4, 2.75, 6, 7));
    fails += kiln_optest("AveragePoolGrad", "kernel_shape=[2,2];pads=[0,0,1,1];count_include_pad=1",
                         2, in, 1, &want, 1e-12, 0, "averagepool dX end pads count_include_pad=1");
    /* ceil_mode: the last window reaches past the input and its (zero) end pad, so it
     * counts its one tap inside even with count_include_pad */
    in[0] = kt_make(KILN_F16, 3, KT_DIMS(1, 1, 3), KT_VALS(1, 2, 3));
    in[1] = kt_make(KILN_F16, 3, KT_DIMS(1, 1, 5), NULL);
    want = kt_make(KILN_F16, 3, KT_DIMS(1, 1, 5), KT_VALS(0.5, 0.5, 1, 1, 3));
    fails += kiln_optest("AveragePoolGrad",
                         "kernel_shape=[2];strides=[2];ceil_mode=1;count_include_pad=1", 2, in, 1,
                         &want, 0, 0, "averagepool dX ceil_mode f16");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL);
    fails += kiln_optest_fails("AveragePoolGrad", "kernel_shape=[2,2]", 2, in, 1, KILN_ERR_SHAPE,
                               "averagepool dX with dY of the wrong shape");
    /* random cases for the backend sweep (tests/gpu/test_backend_ops.c): overlapping
     * windows with pads, both divisors, ceil_mode, and the 2x2 downsampling of a CNN */
    fails += kiln_optest_sweep("AveragePoolGrad", "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 5), -2, 2, 7101),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 9, 10), -2, 2, 7102)},
                               1, "averagepool dX random 3x3 stride 2 pads");
    fails += kiln_optest_sweep("AveragePoolGrad",
                               "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1];count_include_pad=1;ceil_mode=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 6), -2, 2, 7103),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 9, 10), -2, 2, 7104)},
                               1, "averagepool dX random count_include_pad ceil_mode");
    fails += kiln_optest_sweep("AveragePoolGrad", "kernel_shape=[2,2];strides=[2,2]", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 4, 3), -2, 2, 7105),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 8, 6), -2, 2, 7106)},
                               1, "averagepool dX random 2x2 stride 2");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_average_pool_grad = {
    .precision = KILN_PREC_FP32, .layout = KILN_LAYOUT_POOL_GRAD,
    .name = "AveragePoolGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 2,
    .min_outputs = 1, .max_outputs = 1, .shape_only_inputs = 1u << 1, .infer = grad_infer,
    .cpu_forward = grad_forward, .cpu_workspace = grad_workspace, .test = KILN_OP_TESTS(test_grad),
};
