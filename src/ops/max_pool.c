/*
 * max_pool.c — MaxPool (opsets 11..21): the maximum of X over each window.
 *   X (N, C, D1..Dk), k = 1..3  ->  Y (N, C, O1..Ok), and optionally Indices (int64, Y's
 *   shape): the flat index of each maximum into X, row-major, or with storage_order = 1
 *   column-major over the spatial dims (1-D and 2-D only; 3-D is KILN_ERR_UNSUPPORTED).
 *   Attributes: kernel_shape (required), strides, pads, dilations, ceil_mode, auto_pad,
 *   storage_order. Output sizes follow conv_common.h (ceil_mode drops a last window that
 *   would start past the input and its left padding).
 *   Dtypes: f32 and f64 directly; f16, bf16, int8 and uint8 through f32 scratch (exact).
 *   Pads are skipped, never read as values. NaN wins (as numpy's max). A window that covers
 *   no input element (possible only with dilations) yields the dtype's lowest value.
 * Parallel over the (n, c) planes with OpenMP.
 * Gradient: kiln.MaxPoolGrad(dY, X) adds each window's dY at the element the forward pass
 *   picks (first maximum, or first NaN), recomputed from X; Indices has no gradient.
 * Picks (kiln's attribute picks = 1, made by the fuse-pool pass in training graphs; issue
 *   12): output 1 is then the uint8 tap each window picks instead of Indices (max_pool.h),
 *   and kiln.MaxPoolGrad(dY, X, picks) routes dY by them without reading X's values: the
 *   CUDA backward's pass over X to find the picks goes (src/cuda/pool.cu). Float X only,
 *   fewer than 255 taps a window.
 */
#include "max_pool.h"

#include "../core/optest.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* One template for float and double. ind (NC, G) receives flat indices when non-NULL. */
#define DEFINE_MAXPOOL(NAME, T)                                                              \
    static void NAME(const kiln_window *w, int64_t NC, const T *x, T *y, int64_t *ind,      \
                     bool colmajor, uint8_t *pk) {                                           \
        const int64_t I0 = w->img[0], I1 = w->img[1], I2 = w->img[2];                        \
        const int64_t G0 = w->grid[0], G1 = w->grid[1], G2 = w->grid[2];                     \
        const int64_t I = I0 * I1 * I2, G = G0 * G1 * G2;                                    \
        _Pragma("omp parallel for schedule(static) if (NC * G > 4096)")                     \
        for (int64_t nc = 0; nc < NC; nc++) {                                                \
            const T *xp = x + nc * I;                                                        \
            T *yp = y + nc * G;                                                              \
            int64_t *ip = ind ? ind + nc * G : NULL;                                         \
            uint8_t *pp = pk ? pk + nc * G : NULL;                                           \
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
                        T best = -INFINITY;                                                  \
                        int64_t at = -1, tap = KILN_MAXPOOL_NO_PICK;                         \
                        bool nan = false;                                                    \
                        for (int64_t j0 = lo0; j0 < hi0; j0++)                               \
                            for (int64_t j1 = lo1; j1 < hi1; j1++) {                         \
                                const int64_t row =                                          \
                                    ((b0 + j0 * w->d[0]) * I1 + b1 + j1 * w->d[1]) * I2 + b2;\
                                if (!ip && !pp) {                                            \
                                    /* values only: branch-free (maxss), NaN flagged */      \
                                    for (int64_t j2 = lo2; j2 < hi2; j2++) {                 \
                                        const T v = xp[row + j2 * w->d[2]];                  \
                                        best = best > v ? best : v;                          \
                                        nan |= v != v;                                       \
                                    }                                                        \
                                    continue;                                                \
                                }                                                            \
                                for (int64_t j2 = lo2; j2 < hi2; j2++) {                     \
                                    const int64_t off = row + j2 * w->d[2];                  \
                                    const T v = xp[off];                                     \
                                    if (at < 0 || v > best || (v != v && best == best)) {    \
                                        best = v;                                            \
                                        at = off;                                            \
                                        tap = (j0 * w->k[1] + j1) * w->k[2] + j2;            \
                                    }                                                        \
                                }                                                            \
                            }                                                                \
                        *yp++ = nan ? (T)NAN : best;                                         \
                        if (pp) *pp++ = (uint8_t)tap;                                        \
                        if (ip) {                                                            \
                            /* column-major: (h, w) -> h + w*H over the last two dims */     \
                            int64_t flat = colmajor ? at / I2 % I1 + at % I2 * I1 : at;      \
                            *ip++ = at < 0 ? -1 : nc * I + flat;                             \
                        }                                                                    \
                    }                                                                        \
        }                                                                                    \
    }

DEFINE_MAXPOOL(maxpool_f32, float)
DEFINE_MAXPOOL(maxpool_f64, double)

static kiln_status shape_get(kiln_op_ctx *c, kiln_window *w) {
    const bool ceil_mode = kiln_attr_int(c->node, "ceil_mode", 0) != 0;
    kiln_status st = kiln_pool_infer(c, true, ceil_mode, w);
    if (st != KILN_OK) return st;
    const int64_t order = kiln_attr_int(c->node, "storage_order", 0);
    KILN_OP_CHECK(c, order == 0 || order == 1, KILN_ERR_SHAPE,
                  "attribute storage_order = %lld must be 0 or 1", (long long)order);
    if (c->n_out > 1 && c->out[1] && kiln_max_pool_picks(c->node)) {
        const int64_t taps = w->k[0] * w->k[1] * w->k[2];
        KILN_OP_CHECK(c, kiln_dtype_is_float(c->in[0]->dtype), KILN_ERR_TYPE,
                      "picks = 1 takes a float X, not %s", kiln_dtype_name(c->in[0]->dtype));
        KILN_OP_CHECK(c, taps < KILN_MAXPOOL_NO_PICK, KILN_ERR_UNSUPPORTED,
                      "picks = 1 numbers a window's taps in a byte: %lld taps are too many", (long long)taps);
        kiln_tensor_set_shape(c->out[1], KILN_U8, c->out[0]->ndim, c->out[0]->dims);
    } else if (c->n_out > 1 && c->out[1]) {
        KILN_OP_CHECK(c, order == 0 || w->nd <= 2, KILN_ERR_UNSUPPORTED,
                      "Indices with storage_order = 1 are supported for 1-D and 2-D pools only");
        kiln_tensor_set_shape(c->out[1], KILN_I64, c->out[0]->ndim, c->out[0]->dims);
    }
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    kiln_window w;
    return shape_get(c, &w);
}

size_t kiln_max_pool_workspace(const kiln_tensor *x, const kiln_tensor *y) {
    return kiln_stage_size(x) + kiln_stage_size(y);
}

void kiln_max_pool_run(const kiln_window *w, const kiln_tensor *x, kiln_tensor *y, int64_t *ind, bool colmajor,
                       uint8_t *picks, char *ws) {
    const void *X = kiln_stage_in(x, &ws);  // (N*C, D...)
    void *Y = kiln_stage_out(y, &ws);       // (N*C, O...)
    const int64_t NC = x->dims[0] * x->dims[1];
    if (x->dtype == KILN_F64) maxpool_f64(w, NC, X, Y, ind, colmajor, picks);
    else maxpool_f32(w, NC, X, Y, ind, colmajor, picks);
    kiln_stage_finish(y, Y);
}

static size_t workspace(const kiln_op_ctx *c) { return kiln_max_pool_workspace(c->in[0], c->out[0]); }

static kiln_status forward(kiln_op_ctx *c) {
    kiln_window w;
    kiln_status st = shape_get(c, &w);
    if (st != KILN_OK) return st;
    const bool second = c->n_out > 1 && c->out[1], picks = second && kiln_max_pool_picks(c->node);
    int64_t *ind = second && !picks ? c->out[1]->data : NULL;
    const bool colmajor = kiln_attr_int(c->node, "storage_order", 0) == 1;
    kiln_max_pool_run(&w, c->in[0], c->out[0], ind, colmajor, picks ? c->out[1]->data : NULL, c->workspace);
    return KILN_OK;
}

/* ------------------------------------------------------------------ gradient */

/* dL/dX = kiln.MaxPoolGrad(dY, X): each window's dY goes to the element the forward pass
 * picked (the first maximum, or the first NaN), recomputed from X; the Indices output, if
 * any, has no gradient. */
static kiln_status grad(kiln_grad_ctx *g) {
    if (g->dy[0] < 0)
        return kiln_fail(g->m->ctx, KILN_ERR_UNSUPPORTED,
                         "MaxPool: only Y has a gradient (Indices are integers)");
    g->dx[0] = kiln_grad_emit(g, "kiln", "MaxPoolGrad", 2, (int[]){g->dy[0], KILN_GRAD_IN(g, 0)},
                              1, NULL, true, NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

/* dx (NC, I) = 0, then dy of each window added at its argmax; (n, c) planes in parallel.
 * The tap ranges of the outer dims are found once per row of windows. */
#define DEFINE_MAXPOOL_GRAD(NAME, T)                                                         \
    static void NAME(const kiln_window *w, int64_t NC, const T *x, const T *dy, T *dx,      \
                     const uint8_t *pk) {                                                    \
        const int64_t I1 = w->img[1], I2 = w->img[2];                                        \
        const int64_t G0 = w->grid[0], G1 = w->grid[1], G2 = w->grid[2];                     \
        const int64_t I = w->img[0] * I1 * I2, G = G0 * G1 * G2;                             \
        _Pragma("omp parallel for schedule(static) if (NC * G > 4096)")                     \
        for (int64_t nc = 0; nc < NC; nc++) {                                                \
            const T *xp = x ? x + nc * I : NULL, *dyp = dy + nc * G;                         \
            T *dxp = dx + nc * I;                                                            \
            memset(dxp, 0, (size_t)I * sizeof(T));                                          \
            for (int64_t g0 = 0; g0 < G0; g0++) {                                            \
                int64_t lo0, hi0;                                                            \
                kiln_window_taps(w, 0, g0, &lo0, &hi0);                                      \
                const int64_t b0 = g0 * w->s[0] - w->pb[0];                                  \
                for (int64_t g1 = 0; g1 < G1; g1++) {                                        \
                    int64_t lo1, hi1;                                                        \
                    kiln_window_taps(w, 1, g1, &lo1, &hi1);                                  \
                    const int64_t b1 = g1 * w->s[1] - w->pb[1];                              \
                    for (int64_t g2 = 0; g2 < G2; g2++, dyp++) {                             \
                        int64_t lo2, hi2;                                                    \
                        kiln_window_taps(w, 2, g2, &lo2, &hi2);                              \
                        if (lo0 == hi0 || lo1 == hi1 || lo2 == hi2) continue;                \
                        const int64_t b2 = g2 * w->s[2] - w->pb[2];                          \
                        if (pk) { /* the forward's pick: a tap inside X, else nothing */     \
                            const int64_t p = pk[nc * G + (g0 * G1 + g1) * G2 + g2];         \
                            const int64_t j2 = p % w->k[2], j1 = p / w->k[2] % w->k[1];      \
                            const int64_t j0 = p / w->k[2] / w->k[1];                        \
                            if (j0 >= lo0 && j0 < hi0 && j1 >= lo1 && j1 < hi1 && j2 >= lo2 &&\
                                j2 < hi2)                                                    \
                                dxp[((b0 + j0 * w->d[0]) * I1 + b1 + j1 * w->d[1]) * I2 + b2 + \
                                    j2 * w->d[2]] += *dyp;                                   \
                            continue;                                                        \
                        }                                                                    \
                        /* the first maximum, or the first NaN; selects, not branches */      \
                        int64_t at = ((b0 + lo0 * w->d[0]) * I1 + b1 + lo1 * w->d[1]) * I2 + \
                                     b2 + lo2 * w->d[2];                                     \
                        T best = xp[at];                                                     \
                        bool nan = best != best;                                             \
                        for (int64_t j0 = lo0; j0 < hi0; j0++)                               \
                            for (int64_t j1 = lo1; j1 < hi1; j1++) {                         \
                                const int64_t row =                                          \
                                    ((b0 + j0 * w->d[0]) * I1 + b1 + j1 * w->d[1]) * I2 + b2;\
                                for (int64_t j2 = lo2; j2 < hi2; j2++) {                     \
                                    const int64_t off = row + j2 * w->d[2];                  \
                                    const T v = xp[off];                                     \
                                    const bool take = (v > best) | ((v != v) & !nan);        \
                                    best = take ? v : best;                                  \
                                    at = take ? off : at;                                    \
                                    nan |= v != v;                                           \
                                }                                                            \
                            }                                                                \
                        dxp[at] += *dyp;                                                     \
                    }                                                                        \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }

DEFINE_MAXPOOL_GRAD(maxpool_grad_f32, float)
DEFINE_MAXPOOL_GRAD(maxpool_grad_f64, double)

/* kiln.MaxPoolGrad's input 2, the forward's picks: given, and its data (or NULL) */
static bool has_picks(const kiln_op_ctx *c) { return c->n_in > 2 && c->in[2]; }
static const uint8_t *grad_picks(const kiln_op_ctx *c) { return has_picks(c) ? c->in[2]->data : NULL; }

static kiln_status grad_infer(kiln_op_ctx *c) {
    kiln_window w;
    kiln_status st = kiln_pool_grad_infer(c, kiln_attr_int(c->node, "ceil_mode", 0) != 0, &w);
    if (st || !has_picks(c)) return st;
    const kiln_tensor *pk = c->in[2], *dy = c->in[0];
    KILN_OP_CHECK(c, pk->dtype == KILN_U8, KILN_ERR_TYPE, "the picks (input 2) must be uint8, not %s",
                  kiln_dtype_name(pk->dtype));
    bool same = pk->ndim == dy->ndim;
    for (int i = 0; same && i < dy->ndim; i++) same = pk->dims[i] == dy->dims[i];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "the picks (input 2) must have dY's shape");
    return KILN_OK;
}

size_t kiln_max_pool_grad_workspace(const kiln_tensor *dy, const kiln_tensor *x, const kiln_tensor *dx) {
    return kiln_stage_size(dy) + kiln_stage_size(x) + kiln_stage_size(dx);
}

void kiln_max_pool_grad_run(const kiln_window *w, const kiln_tensor *dy, const kiln_tensor *x, const uint8_t *picks,
                            kiln_tensor *dx, char *ws) {
    const void *dY = kiln_stage_in(dy, &ws);               // (N*C, O...)
    const void *X = picks ? NULL : kiln_stage_in(x, &ws);  // (N*C, D...); not read with the picks
    void *dX = kiln_stage_out(dx, &ws);                    // (N*C, D...)
    const int64_t NC = x->dims[0] * x->dims[1];
    if (x->dtype == KILN_F64) maxpool_grad_f64(w, NC, X, dY, dX, picks);
    else maxpool_grad_f32(w, NC, X, dY, dX, picks);
    kiln_stage_finish(dx, dX);
}

static size_t grad_workspace(const kiln_op_ctx *c) {
    return kiln_max_pool_grad_workspace(c->in[0], has_picks(c) ? NULL : c->in[1], c->out[0]);
}

static kiln_status grad_forward(kiln_op_ctx *c) {
    kiln_window w;
    kiln_status st = kiln_pool_grad_infer(c, kiln_attr_int(c->node, "ceil_mode", 0) != 0, &w);
    if (st != KILN_OK) return st;
    kiln_max_pool_grad_run(&w, c->in[0], c->in[1], grad_picks(c), c->out[0], c->workspace);
    return KILN_OK;
}

/* ------------------------------------------------------------------- tests */

#ifdef KILN_OPTESTS
/* t (f32) rounded down to whole numbers and clamped at 0, as ReLU outputs in f16 are
 * often: many zeros and repeated values, so windows hold ties. */
static kiln_tensor *relu_levels(kiln_tensor *t) {
    float *d = kiln_tensor_data(t);
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++) d[i] = d[i] > 0 ? floorf(d[i]) : 0.f;
    return t;
}

static int test(void) {
    int fails = 0;
    /* Expected values computed once with numpy (max over each window of the input padded
     * with -inf; output sizes worked out by hand from the spec's formulas). */
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 2, 5, 5), KT_VALS(-7, -7, 6, 0, 2, 2, 4, -9, 0, -7,
                -2, 8, 1, -8, 1, -7, 5, 9, 9, 2, 7, -2, -7, 0, -1, 3, 9, -4, 7, -7, -3, 5,
                -5, 3, -1, 0, 8, 6, 6, 1, 9, 9, -7, -6, -4, 1, 6, 0, 9, -3)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(6, 6, 9, 9, 9, 7, 9, 6)),
        };
        fails += kiln_optest("MaxPool", "kernel_shape=[3,3];strides=[2,2];pads=[1,0,0,1]", 1, in,
                             1, want, 0, 0, "maxpool 2-D strides asymmetric pads");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 1, 5, 6), KT_VALS(8, 2, 4, -5, 2, 6, 7, 7, 9, -7, 5,
                -1, 4, -4, -9, -8, 9, 8, -4, -1, -5, -7, 7, 3, -8, -6, 1, 8, 9, -5)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 3), KT_VALS(9, 9, 6, 1, 9, 9)),
        };
        fails += kiln_optest("MaxPool",
                             "kernel_shape=[2,3];strides=[3,2];pads=[0,0,2,0];ceil_mode=1", 1, in,
                             1, want, 0, 0,
                             "maxpool ceil_mode drops a window starting in the end pad");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 1, 5, 4), KT_VALS(2, -9, -6, -6, -1, -3, 4, -1, -3,
                8, 2, 4, 5, -3, 7, -9, -4, -6, -9, 9)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 1, 5, 2), KT_VALS(-1, 4, 8, 4, 5, 7, 8, 9, 5, 7)),
        };
        fails += kiln_optest("MaxPool",
                             "kernel_shape=[2,2];dilations=[2,1];strides=[1,2];auto_pad=SAME_UPPER",
                             1, in, 1, want, 0, 0, "maxpool dilations SAME_UPPER");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 2, 6), KT_VALS(-8, -1, 6, 4, 7, -8, 0, -9, -6, 7,
                -8, 2)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 2, 6), KT_VALS(-8, -1, 6, 6, 7, 7, 0, 0, -6, 7, 7,
                2)),
        };
        fails += kiln_optest("MaxPool", "kernel_shape=[2];auto_pad=SAME_LOWER", 1, in, 1, want, 0,
                             0, "maxpool 1-D SAME_LOWER");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_U8, 4, KT_DIMS(1, 1, 4, 4), KT_VALS(5, 79, 238, 81, 79, 22, 198, 44,
                127, 6, 5, 214, 2, 119, 109, 32)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_U8, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(79, 238, 127, 214)),
        };
        fails += kiln_optest("MaxPool", "kernel_shape=[2,2];strides=[2,2]", 1, in, 1, want, 0, 0,
                             "maxpool uint8");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_I8, 4, KT_DIMS(1, 1, 4, 4), KT_VALS(37, 61, 124, -78, 108, -113, -92,
                25, 94, 101, 61, -122, -22, 78, 7, -80)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_I8, 4, KT_DIMS(1, 1, 4, 4), KT_VALS(108, 124, 124, 124, 108, 124, 124,
                124, 108, 108, 101, 61, 101, 101, 101, 61)),
        };
        fails += kiln_optest("MaxPool", "kernel_shape=[3,3];pads=[1,1,1,1]", 1, in, 1, want, 0, 0,
                             "maxpool int8 pads");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F64, 4, KT_DIMS(1, 1, 3, 4), KT_VALS(-1.628, -1.928, -0.828, 0.908,
                -0.027, 1.412, -1.131, -0.739, -0.967, 1.913, 1.764, -0.637)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F64, 4, KT_DIMS(1, 1, 2, 3), KT_VALS(1.412, 1.412, 0.908, 1.913, 1.913,
                1.764)),
        };
        fails += kiln_optest("MaxPool", "kernel_shape=[2,2]", 1, in, 1, want, 0, 0,
                             "maxpool f64");
    }
    {
        /* picks = 1: each window's picked tap. 2x2 windows at stride 1 over
         * [1 5 2; 4 3 9; 0 8 7]: 5 is tap 1 of (0,0), 9 tap 3 of (0,1) and tap 1 of (1,1),
         * 8 tap 3 of (1,0) */
        kiln_tensor *in[1] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), KT_VALS(1, 5, 2, 4, 3, 9, 0, 8, 7))};
        kiln_tensor *want[2] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(5, 9, 8, 9)),
                                kt_make(KILN_U8, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 3, 3, 1))};
        fails += kiln_optest("MaxPool", "kernel_shape=[2,2];picks=1", 1, in, 2, want, 0, 0, "maxpool picks");
    }
    {
        /* ties go to the first tap inside X (window 0's tap 0 is padding), NaN to the first NaN */
        kiln_tensor *in[1] = {kt_make(KILN_F32, 3, KT_DIMS(1, 2, 5), KT_VALS(0, 0, 0, 0, 0, 1, NAN, 3, NAN, 2))};
        kiln_tensor *want[2] = {NULL, kt_make(KILN_U8, 3, KT_DIMS(1, 2, 3), KT_VALS(1, 0, 0, 2, 0, 0))};
        fails += kiln_optest("MaxPool", "kernel_shape=[3];strides=[2];pads=[1,1];picks=1", 1, in, 2, want, 0, 0,
                             "maxpool picks, ties, padding and NaN");
    }
    {
        /* a window with no tap inside X (dilation 3 steps over a 2-wide input from -1) */
        kiln_tensor *in[1] = {kt_make(KILN_F32, 3, KT_DIMS(1, 1, 2), KT_VALS(4, 6))};
        kiln_tensor *want[2] = {NULL, kt_make(KILN_U8, 3, KT_DIMS(1, 1, 3), KT_VALS(1, 255, 0))};
        fails += kiln_optest("MaxPool", "kernel_shape=[2];dilations=[3];pads=[2,2];picks=1", 1, in, 2, want, 0, 0,
                             "maxpool picks, a window with no tap inside X");
    }
    {
        kiln_tensor *in[1] = {kt_make(KILN_U8, 4, KT_DIMS(1, 1, 4, 4), NULL)};
        fails += kiln_optest_fails("MaxPool", "kernel_shape=[2,2];picks=1", 1, in, 2, KILN_ERR_TYPE,
                                   "maxpool picks of a uint8 X");
        in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 16, 16), NULL);
        fails += kiln_optest_fails("MaxPool", "kernel_shape=[16,16];picks=1", 1, in, 2, KILN_ERR_UNSUPPORTED,
                                   "maxpool picks of 256-tap windows");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F16, 4, KT_DIMS(1, 1, 3, 4), KT_VALS(-1.62792969, -1.927734375,
                -0.828125, 0.908203125, -0.0269927979, 1.412109375, -1.130859375,
                -0.738769531, -0.966796875, 1.9130859375, 1.763671875, -0.637207031)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F16, 4, KT_DIMS(1, 1, 2, 3), KT_VALS(1.412109375, 1.412109375,
                0.908203125, 1.9130859375, 1.9130859375, 1.763671875)),
        };
        fails += kiln_optest("MaxPool", "kernel_shape=[2,2]", 1, in, 1, want, 0, 0,
                             "maxpool f16");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 5, KT_DIMS(1, 1, 3, 4, 3), KT_VALS(8, -1, 5, -4, 9, 5, 7, -9, -7,
                -8, 1, -2, 9, -5, -6, 7, -4, 5, -4, 1, -8, 3, 8, 4, 7, 5, 1, 8, 0, -7, 1, 2,
                -6, -7, 3, -1)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 5, KT_DIMS(1, 1, 2, 4, 2), KT_VALS(9, 5, 9, 5, 9, 5, 8, 4, 7, 1,
                8, 1, 8, -6, 3, -1)),
        };
        fails += kiln_optest("MaxPool", "kernel_shape=[2,2,2];strides=[2,1,2];pads=[0,1,0,1,0,1]",
                             1, in, 1, want, 0, 0, "maxpool 3-D");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(2, 2, 4, 3), KT_VALS(0, 5, 4, 7, -6, 5, 1, -9, -8, -3,
                3, -6, 1, 9, -7, -7, 9, -5, 7, -3, 5, -8, 3, 7, -3, 3, -5, -6, -9, 0, 0, -8,
                -5, 2, -3, -5, -9, -9, 3, -7, 7, 1, -5, 3, -6, -3, 0, 3)),
        };
        kiln_tensor *want[2] = {
            kt_make(KILN_F32, 4, KT_DIMS(2, 2, 2, 2), KT_VALS(5, 5, 7, 5, 9, 9, 9, 9, 3, 3, 0,
                0, -9, 3, 7, 7)),
            kt_make(KILN_I64, 4, KT_DIMS(2, 2, 2, 2), KT_VALS(1, 1, 3, 5, 13, 13, 16, 16, 25,
                25, 30, 29, 36, 38, 40, 40)),
        };
        fails += kiln_optest("MaxPool", "kernel_shape=[2,2];strides=[2,1];pads=[1,0,0,0]", 1, in,
                             2, want, 0, 0, "maxpool Indices row-major");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(2, 2, 4, 3), KT_VALS(0, 5, 4, 7, -6, 5, 1, -9, -8, -3,
                3, -6, 1, 9, -7, -7, 9, -5, 7, -3, 5, -8, 3, 7, -3, 3, -5, -6, -9, 0, 0, -8,
                -5, 2, -3, -5, -9, -9, 3, -7, 7, 1, -5, 3, -6, -3, 0, 3)),
        };
        kiln_tensor *want[2] = {
            kt_make(KILN_F32, 4, KT_DIMS(2, 2, 2, 2), KT_VALS(5, 5, 7, 5, 9, 9, 9, 9, 3, 3, 0,
                0, -9, 3, 7, 7)),
            kt_make(KILN_I64, 4, KT_DIMS(2, 2, 2, 2), KT_VALS(4, 4, 1, 9, 16, 16, 17, 17, 28,
                28, 26, 33, 36, 44, 41, 41)),
        };
        fails += kiln_optest("MaxPool",
                             "kernel_shape=[2,2];strides=[2,1];pads=[1,0,0,0];storage_order=1", 1,
                             in, 2, want, 0, 0, "maxpool Indices column-major");
    }
    {
        /* NaN wins, as in numpy.max (hand-computed). */
        kiln_tensor *in[1] = {kt_make(KILN_F32, 3, KT_DIMS(1, 1, 4), KT_VALS(1, NAN, 3, 2))};
        kiln_tensor *want[1] = {kt_make(KILN_F32, 3, KT_DIMS(1, 1, 3), KT_VALS(NAN, NAN, 3))};
        fails += kiln_optest("MaxPool", "kernel_shape=[2]", 1, in, 1, want, 0, 0,
                             "maxpool NaN propagates");
    }
    {
        /* SAME_UPPER, in 1, kernel 2, dilation 4: pads 2+2, taps at -2 and 2 both miss the
         * input, so the window is empty: the lowest value (hand-computed). */
        kiln_tensor *in[1] = {kt_make(KILN_F32, 3, KT_DIMS(1, 1, 1), KT_VALS(5))};
        kiln_tensor *want[1] = {kt_make(KILN_F32, 3, KT_DIMS(1, 1, 1), KT_VALS(-INFINITY))};
        fails += kiln_optest("MaxPool", "kernel_shape=[2];dilations=[4];auto_pad=SAME_UPPER", 1,
                             in, 1, want, 0, 0, "maxpool empty window f32");
        in[0] = kt_make(KILN_U8, 3, KT_DIMS(1, 1, 1), KT_VALS(5));
        want[0] = kt_make(KILN_U8, 3, KT_DIMS(1, 1, 1), KT_VALS(0));
        fails += kiln_optest("MaxPool", "kernel_shape=[2];dilations=[4];auto_pad=SAME_UPPER", 1,
                             in, 1, want, 0, 0, "maxpool empty window uint8");
    }
    /* Gradient rule against finite differences (random inputs: no ties within a window). */
    static const struct {
        const char *label, *attrs;
        int ndim;
        int64_t dims[5];
    } gc[] = {
        {"maxpool grad 2x2 strides 2 (MNIST)", "kernel_shape=[2,2];strides=[2,2]", 4,
         {2, 2, 4, 6}},
        {"maxpool grad 3x3 strides 2 pads 1 (overlapping windows)",
         "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", 4, {1, 2, 5, 6}},
        {"maxpool grad ceil_mode asymmetric pads",
         "kernel_shape=[2,3];strides=[2,2];pads=[0,1,1,0];ceil_mode=1", 4, {1, 2, 5, 6}},
        {"maxpool grad dilations", "kernel_shape=[2,2];dilations=[2,1];strides=[1,2]", 4,
         {1, 2, 5, 5}},
        {"maxpool grad 1-D SAME_UPPER", "kernel_shape=[3];strides=[2];auto_pad=SAME_UPPER", 3,
         {2, 3, 9}},
        {"maxpool grad 3-D", "kernel_shape=[2,2,2];strides=[1,2,1];pads=[0,1,0,1,0,1]", 5,
         {1, 2, 3, 4, 3}},
    };
    for (size_t i = 0; i < sizeof gc / sizeof gc[0]; i++) {
        kiln_tensor *x = kt_rand(KILN_F64, gc[i].ndim, gc[i].dims, -1, 1, 800 + i);
        fails += kiln_gradcheck("MaxPool", gc[i].attrs, 0, 1, &x, NULL, gc[i].label);
    }
    {
        kiln_tensor *x = kt_rand(KILN_F64, 4, KT_DIMS(1, 2, 4, 5), -1, 1, 810);
        fails += kiln_gradcheck_ex("MaxPool", "kernel_shape=[2,2];strides=[1,2]", 0, 1, &x, NULL,
                                   2, 1.0, "maxpool grad with the Indices output");
    }

    /* errors */
    kiln_tensor *in[1];
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), NULL);
    fails += kiln_optest_fails("MaxPool", "", 1, in, 1, KILN_ERR_SHAPE,
                               "maxpool without kernel_shape");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), NULL);
    fails += kiln_optest_fails("MaxPool", "kernel_shape=[5,5]", 1, in, 1, KILN_ERR_SHAPE,
                               "maxpool kernel larger than input");
    in[0] = kt_make(KILN_I32, 4, KT_DIMS(1, 1, 4, 4), NULL);
    fails += kiln_optest_fails("MaxPool", "kernel_shape=[2,2]", 1, in, 1, KILN_ERR_TYPE,
                               "maxpool int32");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(1, 4), NULL);
    fails += kiln_optest_fails("MaxPool", "kernel_shape=[2]", 1, in, 1, KILN_ERR_SHAPE,
                               "maxpool rank 2");
    in[0] = kt_make(KILN_F32, 5, KT_DIMS(1, 1, 2, 2, 2), NULL);
    fails += kiln_optest_fails("MaxPool", "kernel_shape=[2,2,2];storage_order=1", 1, in, 2,
                               KILN_ERR_UNSUPPORTED, "maxpool 3-D column-major indices");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 241)},
                               1, "maxpool random 3x3 stride 2 pads");
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[2,2];strides=[2,2]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 16, 18), -2, 2, 242)},
                               1, "maxpool random 2x2 tiles");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 11, 10), -2, 2, 1260)},
                               1, "maxpool 3x3 s2 p1");
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[3,3];strides=[2,2];ceil_mode=1", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 10, 10), -2, 2, 1261)},
                               1, "maxpool ceil_mode");
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[2,2];dilations=[2,2]", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 9, 8), -2, 2, 1262)},
                               1, "maxpool dilations");
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[3,3];strides=[2,2];auto_pad=SAME_UPPER", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 10, 9), -2, 2, 1263)},
                               1, "maxpool SAME_UPPER");
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[3];strides=[2]", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 15), -2, 2, 1264)},
                               1, "maxpool 1-D");
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[2,2,2];strides=[2,2,2]", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 5, KT_DIMS(1, 2, 4, 6, 5), -2, 2, 1265)},
                               1, "maxpool 3-D");
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[2,2];strides=[2,2]", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 64, 24, 24), -2, 2, 1271)},
                               1, "maxpool 2x2 s2 mnist pool (batch 2)");
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[2,2];strides=[2,2]", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 9, 7), -2, 2, 1272)},
                               1, "maxpool 2x2 s2 odd sizes");
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[2,2];strides=[2,2];ceil_mode=1", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 9, 7), -2, 2, 1273)},
                               1, "maxpool 2x2 s2 ceil_mode");
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[2,2];strides=[2,2];pads=[1,1,0,0]", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 8, 8), -2, 2, 1274)},
                               1, "maxpool 2x2 s2 padded");
    fails += kiln_optest_sweep("MaxPoolGrad", "kernel_shape=[2,2];strides=[2,2]", 12, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 64, 12, 12), -2, 2, 3098),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 64, 24, 24), -2, 2, 3099)},
                               1, "maxpoolgrad mnist pool (batch 2)");
    fails += kiln_optest_sweep("MaxPoolGrad", "kernel_shape=[2,2];strides=[2,2]", 12, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 4, 3), -2, 2, 3100),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 9, 7), -2, 2, 3101)},
                               1, "maxpoolgrad odd size, uncovered elements");
    fails += kiln_optest_sweep("MaxPoolGrad", "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", 12, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 6, 5), -2, 2, 3102),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 11, 10), -2, 2, 3103)},
                               1, "maxpoolgrad 3x3 s2 p1 overlapping");
    fails += kiln_optest_sweep("MaxPoolGrad", "kernel_shape=[3,3];strides=[2,2];ceil_mode=1", 12, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 5, 5), -2, 2, 3104),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 10, 10), -2, 2, 3105)},
                               1, "maxpoolgrad ceil_mode");
    fails += kiln_optest_sweep("MaxPoolGrad", "kernel_shape=[2,2];dilations=[2,2]", 12, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 7, 6), -2, 2, 3106),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 9, 8), -2, 2, 3107)},
                               1, "maxpoolgrad dilations");
    fails += kiln_optest_sweep("MaxPoolGrad", "kernel_shape=[3,3];strides=[2,2];auto_pad=SAME_UPPER", 12, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 5, 5), -2, 2, 3108),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 10, 9), -2, 2, 3109)},
                               1, "maxpoolgrad SAME_UPPER");
    fails += kiln_optest_sweep("MaxPoolGrad", "kernel_shape=[3];strides=[2]", 12, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 7), -2, 2, 3110),
                                                kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 15), -2, 2, 3111)},
                               1, "maxpoolgrad 1-D");
    fails += kiln_optest_sweep("MaxPoolGrad", "kernel_shape=[2,2,2];strides=[2,2,2]", 12, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 5, KT_DIMS(1, 2, 2, 3, 2), -2, 2, 3112),
                                                kt_rand(KILN_F32, 5, KT_DIMS(1, 2, 4, 6, 5), -2, 2, 3113)},
                               1, "maxpoolgrad 3-D");
    fails += kiln_optest_sweep("MaxPoolGrad", "kernel_shape=[2,2];strides=[2,2]", 12, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 4, 6), -2, 2, 3114),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 8, 12), -2, 2, 3115)},
                               1, "maxpoolgrad 2x2 s2 pairs");
    fails += kiln_optest_sweep("MaxPoolGrad", "kernel_shape=[2,2];strides=[2,2]", 12, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 3, 4), -2, 2, 3116),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 7, 8), -2, 2, 3117)},
                               1, "maxpoolgrad 2x2 s2 even W, uncovered row");
    fails += kiln_optest_sweep("MaxPoolGrad", "kernel_shape=[2,2];strides=[2,2];ceil_mode=1", 12, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 5, 4), -2, 2, 3118),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 9, 7), -2, 2, 3119)},
                               1, "maxpoolgrad 2x2 s2 ceil_mode (general)");
    fails += kiln_optest_sweep("MaxPoolGrad", "kernel_shape=[2,2];strides=[2,2]", 12, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 3, 3), -2, 2, 3120),
                                                kt_make(KILN_F32, 4, KT_DIMS(1, 2, 6, 6), KT_VALS(0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 0, 1, 2,
                                                        0, 1, 0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 0,
                                                        1, 2, 0, 1, 0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 0, 1, 2, 0,
                                                        1, 0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 0, 1))},
                               1, "maxpoolgrad ties, disjoint (the first maximum takes it)");
    fails += kiln_optest_sweep("MaxPoolGrad", "kernel_shape=[2,2]", 12, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 5, 5), -2, 2, 3121),
                                                kt_make(KILN_F32, 4, KT_DIMS(1, 2, 6, 6), KT_VALS(0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 0, 1, 2,
                                                        0, 1, 0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 0,
                                                        1, 2, 0, 1, 0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 0, 1, 2, 0,
                                                        1, 0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 0, 1))},
                               1, "maxpoolgrad ties, overlapping");
    fails += kiln_optest_sweep("MaxPoolGrad", "kernel_shape=[2,2];strides=[2,2]", 12, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 3, 3), -2, 2, 3122),
                                                kt_make(KILN_F32, 4, KT_DIMS(1, 2, 6, 6), KT_VALS(0, NAN, 2, NAN, 1, 0, NAN, 2, 0, 1, NAN, NAN, 2, 0, 1, 0, NAN, NAN,
                                                        0, 1, 0, NAN, 2, 0, NAN, 0, NAN, 2, 0, 1, 0, NAN, 2, 0, 1, 0,
                                                        NAN, 2, NAN, 1, 0, NAN, 2, 0, 1, NAN, NAN, 2, 0, 1, 0, NAN, NAN, 0,
                                                        1, 0, NAN, 2, 0, NAN, 0, NAN, 2, 0, 1, 0, NAN, 2, 0, 1, 0, NAN))},
                               1, "maxpoolgrad NaN, disjoint (the first NaN takes it)");
    fails += kiln_optest_sweep("MaxPoolGrad", "kernel_shape=[2,2]", 12, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 5, 5), -2, 2, 3123),
                                                kt_make(KILN_F32, 4, KT_DIMS(1, 2, 6, 6), KT_VALS(0, NAN, 2, NAN, 1, 0, NAN, 2, 0, 1, NAN, NAN, 2, 0, 1, 0, NAN, NAN,
                                                        0, 1, 0, NAN, 2, 0, NAN, 0, NAN, 2, 0, 1, 0, NAN, 2, 0, 1, 0,
                                                        NAN, 2, NAN, 1, 0, NAN, 2, 0, 1, NAN, NAN, 2, 0, 1, 0, NAN, NAN, 0,
                                                        1, 0, NAN, 2, 0, NAN, 0, NAN, 2, 0, 1, 0, NAN, 2, 0, 1, 0, NAN))},
                               1, "maxpoolgrad NaN, overlapping");
    /* Overlapping windows with ties (ReLU-like inputs: most windows hold several zeros or
     * equal maxima), the CUDA kernels' paths: ResNet's stem pool (3x3 s2 p1) with channel
     * counts that take 16-byte NHWC vectors in f16 (16) or only in f32 (12) or none (3);
     * stride 1; ceil_mode; dilations; 1-D; 3-D. */
    {
        static const struct {
            const char *attrs, *what;
            int nd;
            int64_t dy[5], x[5];
        } tie_cases[] = {
            {"kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", "maxpoolgrad ties 3x3 s2 p1, 16 channels", 4,
             {2, 16, 6, 5}, {2, 16, 11, 10}},
            {"kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", "maxpoolgrad ties 3x3 s2 p1, 12 channels", 4,
             {2, 12, 5, 5}, {2, 12, 9, 9}},
            {"kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", "maxpoolgrad ties 3x3 s2 p1, 3 channels", 4,
             {1, 3, 7, 6}, {1, 3, 14, 12}},
            {"kernel_shape=[3,3];pads=[1,1,1,1]", "maxpoolgrad ties 3x3 s1 p1, 8 channels", 4, {1, 8, 6, 7},
             {1, 8, 6, 7}},
            {"kernel_shape=[3,3];strides=[2,2];ceil_mode=1", "maxpoolgrad ties 3x3 s2 ceil_mode, 8 channels", 4,
             {1, 8, 5, 4}, {1, 8, 10, 8}},
            {"kernel_shape=[3,2];strides=[2,1];dilations=[2,2];pads=[2,1,1,0]",
             "maxpoolgrad ties dilated, asymmetric pads, 8 channels", 4, {1, 8, 3, 6}, {1, 8, 7, 7}},
            {"kernel_shape=[3];strides=[2];pads=[1,1]", "maxpoolgrad ties 1-D k3 s2 p1", 3, {2, 3, 8}, {2, 3, 15}},
            {"kernel_shape=[3,3,3];strides=[2,2,2];pads=[1,1,1,1,1,1]", "maxpoolgrad ties 3-D k3 s2 p1", 5,
             {1, 2, 3, 3, 2}, {1, 2, 5, 6, 4}},
            /* larger than the CUDA tiled pass's 16x16 tile: windows shared across tiles, edge
             * tiles, more channel groups than a block takes (80 channels: 10 f16 groups) */
            {"kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", "maxpoolgrad ties 3x3 s2 p1 across tiles, 80 channels",
             4, {1, 80, 19, 18}, {1, 80, 37, 35}},
            {"kernel_shape=[3,3];pads=[1,1,1,1]", "maxpoolgrad ties 3x3 s1 p1 across tiles, 8 channels", 4,
             {1, 8, 20, 33}, {1, 8, 20, 33}},
            {"kernel_shape=[2,2]", "maxpoolgrad ties 2x2 s1 across tiles, 16 channels", 4, {2, 16, 17, 18},
             {2, 16, 18, 19}},
            {"kernel_shape=[2,2];strides=[2,2]", "maxpoolgrad ties 2x2 s2 disjoint, 16 channels", 4, {2, 16, 5, 6},
             {2, 16, 11, 12}},
        };
        for (size_t i = 0; i < sizeof tie_cases / sizeof tie_cases[0]; i++) {
            const int nd = tie_cases[i].nd;
            fails += kiln_optest_sweep("MaxPoolGrad", tie_cases[i].attrs, 12, 2,
                                       (kiln_tensor *[]){kt_rand(KILN_F32, nd, tie_cases[i].dy, -2, 2, 3130 + (int)i),
                                                        relu_levels(kt_rand(KILN_F32, nd, tie_cases[i].x, -2, 3,
                                                                            3150 + (int)i))},
                                       1, tie_cases[i].what);
            /* the same with the forward's picks (picks = 1): the forward writes them, the
             * gradient routes by them */
            char attrs[160], what[160];
            snprintf(attrs, sizeof attrs, "%s;picks=1", tie_cases[i].attrs);
            snprintf(what, sizeof what, "%s, forward's picks", tie_cases[i].what);
            fails += kiln_optest_sweep(
                "MaxPool", attrs, 12, 1,
                (kiln_tensor *[]){relu_levels(kt_rand(KILN_F32, nd, tie_cases[i].x, -2, 3, 3150 + (int)i))}, 2,
                what);
            kiln_tensor *x = relu_levels(kt_rand(KILN_F32, nd, tie_cases[i].x, -2, 3, 3150 + (int)i));
            kiln_tensor *dy = kt_rand(KILN_F32, nd, tie_cases[i].dy, -2, 2, 3130 + (int)i);
            kiln_tensor *fw[2] = {NULL, NULL}, *plain = NULL;
            if (!kiln_optest_eval("", "MaxPool", attrs, 12, 1, &x, 2, fw, what) ||
                !kiln_optest_eval("kiln", "MaxPoolGrad", tie_cases[i].attrs, 12, 2, (kiln_tensor *[]){dy, x}, 1,
                                  &plain, what)) {
                fails++;
                kiln_tensor_free(fw[1]);
                kiln_tensor_free(dy);
                kiln_tensor_free(x);
            } else { /* the same dX as the gradient that recomputes the picks from X */
                fails += kiln_optest("MaxPoolGrad", tie_cases[i].attrs, 3, (kiln_tensor *[]){dy, x, fw[1]}, 1,
                                     &plain, 0, 0, what);
            }
            kiln_tensor_free(fw[0]);
        }
    }
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 11, 10), -2, 2, 5029)},
                               1, "maxpool (NHWC) 3x3 s2 p1, 16 channels");
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 12, 9, 9), -2, 2, 5030)},
                               1, "maxpool (NHWC) 3x3 s2 p1, 12 channels");
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 64, 28, 28), -2, 2, 5031)},
                               1, "maxpool (NHWC) stem-like, 64 channels");
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[3,3];strides=[2,2];ceil_mode=1", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 10, 10), -2, 2, 5032)},
                               1, "maxpool (NHWC) ceil_mode, 8 channels");
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[2,2];dilations=[2,2]", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 24, 9, 8), -2, 2, 5033)},
                               1, "maxpool (NHWC) dilations, 24 channels");
    fails += kiln_optest_sweep("MaxPool", "kernel_shape=[3,3];strides=[2,2];auto_pad=SAME_UPPER", 12, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 10, 9), -2, 2, 5034)},
                               1, "maxpool (NHWC) SAME_UPPER, 8 channels");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_max_pool = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_POOL, .out_dtype = {KILN_DT_IN0, KILN_DT_I64},
    .name = "MaxPool", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 2,
    .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace, .test = KILN_OP_TESTS(test),
    .grad = grad,
};

#ifdef KILN_OPTESTS
/* MaxPoolGrad, by hand. 3x3 X, 2x2 windows at stride 1: the maxima are 5 at (0,1), 9 at
 * (1,2) (twice: its dY adds up) and 8 at (2,1). Ties go to the first maximum. */
static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[2] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 2, 3, 4)),
                          kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3),
                                  KT_VALS(1, 5, 2, 4, 3, 9, 0, 8, 7))};
    kiln_tensor *want = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3),
                                KT_VALS(0, 1, 0, 0, 0, 6, 0, 3, 0));
    fails += kiln_optest("MaxPoolGrad", "kernel_shape=[2,2]", 2, in, 1, &want, 0, 0,
                         "maxpool dX overlapping windows");
    in[0] = kt_make(KILN_F64, 3, KT_DIMS(1, 2, 2), KT_VALS(1, 2, 3, 4));
    in[1] = kt_make(KILN_F64, 3, KT_DIMS(1, 2, 4), KT_VALS(2, 2, -1, -1, 0, 7, 7, 7));
    want = kt_make(KILN_F64, 3, KT_DIMS(1, 2, 4), KT_VALS(1, 0, 2, 0, 0, 3, 4, 0));
    fails += kiln_optest("MaxPoolGrad", "kernel_shape=[2];strides=[2]", 2, in, 1, &want, 0, 0,
                         "maxpool dX ties go to the first maximum f64");
    /* pads are never picked: the window over (pad, 1, -2) routes to 1 */
    in[0] = kt_make(KILN_F16, 3, KT_DIMS(1, 1, 2), KT_VALS(0.5, 0.25));
    in[1] = kt_make(KILN_F16, 3, KT_DIMS(1, 1, 3), KT_VALS(-3, 1, -2));
    want = kt_make(KILN_F16, 3, KT_DIMS(1, 1, 3), KT_VALS(0, 0.75, 0));
    fails += kiln_optest("MaxPoolGrad", "kernel_shape=[3];strides=[2];pads=[1,1]", 2, in, 1,
                         &want, 0, 0, "maxpool dX pads f16");
    /* all taps equal, 3-wide windows at stride 2 over a padded row: each window's first
     * tap inside X takes its dY (x0, x1, x3), x1 is in two windows but picked by one */
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 3), KT_VALS(1, 2, 4));
    in[1] = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 5), KT_VALS(0, 0, 0, 0, 0));
    want = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 5), KT_VALS(1, 2, 0, 4, 0));
    fails += kiln_optest("MaxPoolGrad", "kernel_shape=[3];strides=[2];pads=[1,1]", 2, in, 1, &want, 0, 0,
                         "maxpool dX ties in overlapping windows go to each window's first tap");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 3), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL);
    fails += kiln_optest_fails("MaxPoolGrad", "kernel_shape=[2,2]", 2, in, 1, KILN_ERR_SHAPE,
                               "maxpool dX with dY of the wrong shape");
    /* with the forward's picks (the first case's, [1, 3, 3, 1]): X's values are not read
     * (zeros here would route every dY to its window's first tap) */
    {
        kiln_tensor *pin[3] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 2, 3, 4)),
                               kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL),
                               kt_make(KILN_U8, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 3, 3, 1))};
        kiln_tensor *pwant = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), KT_VALS(0, 1, 0, 0, 0, 6, 0, 3, 0));
        fails += kiln_optest("MaxPoolGrad", "kernel_shape=[2,2]", 3, pin, 1, &pwant, 0, 0,
                             "maxpool dX by the forward's picks, X unread");
    }
    {
        /* a pick naming a tap in the padding routes its dY nowhere */
        kiln_tensor *pin[3] = {kt_make(KILN_F32, 3, KT_DIMS(1, 1, 3), KT_VALS(1, 2, 4)),
                               kt_make(KILN_F32, 3, KT_DIMS(1, 1, 5), NULL),
                               kt_make(KILN_U8, 3, KT_DIMS(1, 1, 3), KT_VALS(0, 0, 0))};
        kiln_tensor *pwant = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 5), KT_VALS(0, 2, 0, 4, 0));
        fails += kiln_optest("MaxPoolGrad", "kernel_shape=[3];strides=[2];pads=[1,1]", 3, pin, 1, &pwant, 0, 0,
                             "maxpool dX by picks, a pick in the padding");
    }
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL);
    fails += kiln_optest_fails("MaxPoolGrad", "kernel_shape=[2,2]", 3,
                               (kiln_tensor *[]){in[0], in[1], kt_make(KILN_I64, 4, KT_DIMS(1, 1, 2, 2), NULL)}, 1,
                               KILN_ERR_TYPE, "maxpool dX with int64 picks");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL);
    fails += kiln_optest_fails("MaxPoolGrad", "kernel_shape=[2,2]", 3,
                               (kiln_tensor *[]){in[0], in[1], kt_make(KILN_U8, 4, KT_DIMS(1, 1, 2, 3), NULL)}, 1,
                               KILN_ERR_SHAPE, "maxpool dX with picks of the wrong shape");
    in[0] = kt_make(KILN_U8, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[1] = kt_make(KILN_U8, 4, KT_DIMS(1, 1, 3, 3), NULL);
    fails += kiln_optest_fails("MaxPoolGrad", "kernel_shape=[2,2]", 2, in, 1, KILN_ERR_TYPE,
                               "maxpool dX uint8");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_max_pool_grad = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_POOL_GRAD,
    .name = "MaxPoolGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1,
    .max_outputs = 1, .infer = grad_infer, .cpu_forward = grad_forward,
    .cpu_workspace = grad_workspace, .test = KILN_OP_TESTS(test_grad),
};
