/* grid_sample.c — GridSample (opsets 16, 20; PyTorch's grid_sample): X (N, C, D1..Dk)
 * sampled at the points of grid (N, O1..Ok, k), whose last dim holds each point's
 * normalized coordinates in [-1, 1], innermost spatial dim first (x, y[, z]); Y (N, C,
 * O1..Ok). k = 1..3 spatial dims (opset 16: 2, a 4-D X).
 *
 *   mode: "linear" / "bilinear" (opset 16's name), "nearest", "cubic" / "bicubic" (Keys'
 *     cubic convolution, a = -0.75, 4 taps a dim);
 *   padding_mode: "zeros" (taps outside X read 0), "border" (coordinates and taps
 *     clamped), "reflection" (reflected at the borders: [0, D-1] with align_corners,
 *     [-0.5, D-0.5] without);
 *   align_corners: -1 and 1 are the centers of the corner pixels (1) or their outer edges
 *     (0, the default): x = (n + 1) / 2 * (D - 1), or ((n + 1) * D - 1) / 2.
 *
 * The steps, as ONNX's reference (onnx/reference/ops/op_grid_sample.py) and PyTorch's
 * GridSampler.h take them: denormalize; nearest rounds half to even; a coordinate outside
 * the borders is clamped (border) or reflected (reflection); then each tap's index, for
 * linear and cubic, is read through the padding again (zeros: 0 outside). Coordinates are
 * computed in X's float precision (f32 for f32 / f16 / bf16 X, as PyTorch does; f64 for
 * f64), the interpolation in double. Not differentiable in kiln (no gradient rule). */
#include "../core/optest.h"
#include "cubic.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { GS_LINEAR, GS_NEAREST, GS_CUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };

/* mode and padding as numbers, or -1 (an unknown name) */
static int gs_mode(const kiln_node *n) {
    const char *m = kiln_attr_string(n, "mode", n->opset >= 20 ? "linear" : "bilinear");
    if (!strcmp(m, "bilinear") || !strcmp(m, "linear")) return GS_LINEAR;
    if (!strcmp(m, "nearest")) return GS_NEAREST;
    if (!strcmp(m, "bicubic") || !strcmp(m, "cubic")) return GS_CUBIC;
    return -1;
}

static int gs_padding(const kiln_node *n) {
    const char *p = kiln_attr_string(n, "padding_mode", "zeros");
    return !strcmp(p, "zeros") ? GS_ZEROS : !strcmp(p, "border") ? GS_BORDER : !strcmp(p, "reflection") ? GS_REFLECTION : -1;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *g = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE, "X has dtype %s (a float dtype is needed)",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, kiln_dtype_is_float(g->dtype), KILN_ERR_TYPE, "grid has dtype %s (a float dtype is needed)",
                  kiln_dtype_name(g->dtype));
    KILN_OP_CHECK(c, gs_mode(c->node) >= 0, KILN_ERR_INVALID_ARGUMENT,
                  "mode '%s' is not linear (bilinear), nearest or cubic (bicubic)",
                  kiln_attr_string(c->node, "mode", ""));
    KILN_OP_CHECK(c, gs_padding(c->node) >= 0, KILN_ERR_INVALID_ARGUMENT,
                  "padding_mode '%s' is not zeros, border or reflection", kiln_attr_string(c->node, "padding_mode", ""));
    const int k = x->ndim - 2;
    KILN_OP_CHECK(c, k >= 1 && k <= 3, KILN_ERR_SHAPE,
                  "X must be (N, C, D1..Dk) with 1 to 3 spatial dims, got rank %d", x->ndim);
    KILN_OP_CHECK(c, c->node->opset >= 20 || k == 2, KILN_ERR_SHAPE,
                  "opset %d's GridSample takes a 4-D X (N, C, H, W), got rank %d", c->node->opset, x->ndim);
    KILN_OP_CHECK(c, g->ndim == x->ndim && g->dims[0] == x->dims[0] && g->dims[g->ndim - 1] == k, KILN_ERR_SHAPE,
                  "grid must be (N, O1..O%d, %d) with X's N = %lld, got rank %d, N %lld, last dim %lld", k, k,
                  (long long)x->dims[0], g->ndim, (long long)(g->ndim ? g->dims[0] : -1),
                  (long long)(g->ndim ? g->dims[g->ndim - 1] : -1));
    int64_t dims[KILN_MAX_DIMS] = {x->dims[0], x->dims[1]};
    for (int d = 0; d < k; d++) dims[2 + d] = g->dims[1 + d];
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, dims);
    return KILN_OK;
}

/* Coordinates in X's precision: f32 arithmetic unless X is f64. */
static double rnd(double v, bool f32) { return f32 ? (double)(float)v : v; }

static double denorm(double n, int64_t len, bool ac, bool f32) {
    if (f32) {
        const float nf = (float)n, lf = (float)len;
        return ac ? (double)((nf + 1.0f) / 2.0f * (lf - 1.0f)) : (double)(((nf + 1.0f) * lf - 1.0f) / 2.0f);
    }
    return ac ? (n + 1) / 2 * (double)(len - 1) : ((n + 1) * (double)len - 1) / 2;
}

/* x reflected at lo and hi until inside (ONNX's _gs_reflect) */
static double reflect(double x, double lo, double hi, bool f32) {
    const double range = hi - lo;
    if (range <= 0) return lo;
    if (x < lo) {
        const double dx = lo - x;
        const double n = floor(dx / range), r = rnd(dx - n * range, f32);
        return fmod(n, 2) == 0 ? rnd(lo + r, f32) : rnd(hi - r, f32);
    }
    if (x > hi) {
        const double dx = x - hi;
        const double n = floor(dx / range), r = rnd(dx - n * range, f32);
        return fmod(n, 2) == 0 ? rnd(hi - r, f32) : rnd(lo + r, f32);
    }
    return x;
}

typedef struct {
    const kiln_tensor *x;
    int k, pad;
    bool ac, f32;
    int64_t D[3];       /* X's spatial dims */
    double lo[3], hi[3]; /* the borders */
    int64_t base;       /* X's (n, c) plane */
    int64_t stride[3];
} gs_plane;

/* X at integer index i (one per spatial dim) through the padding: 0 outside for zeros */
static double pixel(const gs_plane *p, const int64_t *i) {
    int64_t off = p->base;
    for (int d = 0; d < p->k; d++) {
        int64_t v = i[d];
        if (p->pad == GS_ZEROS) {
            if (v < 0 || v >= p->D[d]) return 0;
        } else if (p->pad == GS_BORDER) {
            v = v < 0 ? 0 : v >= p->D[d] ? p->D[d] - 1 : v;
        } else {
            v = (int64_t)reflect((double)v, p->lo[d], p->hi[d], p->f32);
            v = v < 0 ? 0 : v >= p->D[d] ? p->D[d] - 1 : v; /* (reflect keeps it inside; rounding aside) */
        }
        off += v * p->stride[d];
    }
    return kiln_get_f64(p->x, off);
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *g = c->in[1];
    kiln_tensor *y = c->out[0];
    const int mode = gs_mode(c->node), k = x->ndim - 2;
    gs_plane p = {.x = x, .k = k, .pad = gs_padding(c->node), .ac = kiln_attr_int(c->node, "align_corners", 0) != 0,
                  .f32 = x->dtype != KILN_F64};
    int64_t xs[KILN_MAX_DIMS];
    kiln_strides(x->ndim, x->dims, xs);
    for (int d = 0; d < k; d++) {
        p.D[d] = x->dims[2 + d];
        p.stride[d] = xs[2 + d];
        p.lo[d] = p.ac ? 0 : -0.5;
        p.hi[d] = p.ac ? (double)(p.D[d] - 1) : (double)p.D[d] - 0.5;
    }
    const int64_t N = x->dims[0], C = x->dims[1];
    int64_t npts = 1;
    for (int d = 0; d < k; d++) npts *= g->dims[1 + d];
    const int taps = mode == GS_NEAREST ? 1 : mode == GS_LINEAR ? 2 : 4;
    int64_t total = 1;
    for (int d = 0; d < k; d++) total *= taps;
    for (int64_t n = 0; n < N; n++)
        for (int64_t q = 0; q < npts; q++) {
            /* the point's coordinates, dim by dim (the grid's last dim runs innermost first) */
            double u[3];
            for (int d = 0; d < k; d++) {
                double v = denorm(kiln_get_f64(g, (n * npts + q) * k + (k - 1 - d)), p.D[d], p.ac, p.f32);
                if (mode == GS_NEAREST) v = nearbyint(v); /* half to even (the default rounding mode) */
                if (v < p.lo[d] || v > p.hi[d]) {
                    if (p.pad == GS_BORDER) v = v < 0 ? 0 : v > (double)(p.D[d] - 1) ? (double)(p.D[d] - 1) : v;
                    else if (p.pad == GS_REFLECTION) v = reflect(v, p.lo[d], p.hi[d], p.f32);
                }
                u[d] = v;
            }
            int64_t i0[3];
            double w[3][4];
            for (int d = 0; d < k; d++) {
                if (mode == GS_NEAREST) {
                    i0[d] = (int64_t)u[d]; /* a whole number (or reflected to one) */
                    w[d][0] = 1;
                    continue;
                }
                const double f = floor(u[d]), t = rnd(u[d] - f, p.f32);
                i0[d] = (int64_t)f - (mode == GS_CUBIC ? 1 : 0);
                if (mode == GS_LINEAR) {
                    w[d][0] = 1 - t;
                    w[d][1] = t;
                } else {
                    kiln_cubic_weights(-0.75, t, w[d]);
                }
            }
            for (int64_t ch = 0; ch < C; ch++) {
                p.base = n * xs[0] + ch * xs[1];
                double acc = 0;
                for (int64_t t = 0; t < total; t++) {
                    int64_t idx[3], rest = t;
                    double wt = 1;
                    for (int d = k - 1; d >= 0; d--) {
                        const int j = (int)(rest % taps);
                        rest /= taps;
                        idx[d] = i0[d] + j;
                        wt *= w[d][j];
                    }
                    if (wt != 0) acc += wt * pixel(&p, idx);
                }
                kiln_set_f64(y, (n * C + ch) * npts + q, acc);
            }
        }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* X (1, 1, 4, 4) 0..15 sampled at a 6x6 grid from -1.2 to 1.2 (steps of 0.48) on both axes:
     * points inside and outside X. Expected values: onnx.reference's GridSample (opset 20's
     * mode names), printed to 7 digits. */
    double xv[16], gv[72];
    for (int i = 0; i < 16; i++) xv[i] = i;
    for (int h = 0; h < 6; h++)
        for (int w = 0; w < 6; w++) {
            gv[(h * 6 + w) * 2 + 0] = -1.2 + 0.48 * w;
            gv[(h * 6 + w) * 2 + 1] = -1.2 + 0.48 * h;
        }
    static const struct {
        const char *attrs;
        int opset;
        double want[36];
    } cases[] = {
        {"mode=bilinear;padding_mode=zeros;align_corners=0", 16,
         {0, 0.005999988, 0.1019999, 0.1979998, 0.2939997, 0.02999994, 0.02399995, 0.2999997, 1.26, 2.22, 3.18,
          0.3239996, 0.4079996, 4.14, 5.1, 6.06, 7.02, 0.7079993, 0.7919992, 7.98, 8.94, 9.9, 10.86, 1.091999,
          1.175999, 11.82, 12.78, 13.74, 14.7, 1.475999, 0.1199998, 1.205999, 1.301999, 1.397999, 1.493999,
          0.1499997}},
        {"mode=linear;padding_mode=border;align_corners=1", 20,
         {0, 0.42, 1.14, 1.86, 2.58, 3, 1.68, 2.1, 2.82, 3.539999, 4.26, 4.68, 4.56, 4.98, 5.7, 6.42, 7.14, 7.56,
          7.44, 7.86, 8.58, 9.300001, 10.02, 10.44, 10.32, 10.74, 11.46, 12.18, 12.9, 13.32, 12, 12.42, 13.14, 13.86,
          14.58, 15}},
        {"mode=nearest;padding_mode=reflection;align_corners=0", 16,
         {0, 0, 1, 2, 3, 3, 0, 0, 1, 2, 3, 3, 4, 4, 5, 6, 7, 7, 8, 8, 9, 10, 11, 11, 12, 12, 13, 14, 15, 15, 12, 12,
          13, 14, 15, 15}},
        {"mode=bicubic;padding_mode=border;align_corners=0", 16,
         {0, 0.04505408, 1.029406, 1.970593, 2.954945, 3, 0.1802163, 0.2252703, 1.209622, 2.150809, 3.135161,
          3.180216, 4.117623, 4.162677, 5.147027, 6.088213, 7.072567, 7.117621, 7.882371, 7.927423, 8.911772, 9.85296,
          10.83731, 10.88237, 11.81978, 11.86483, 12.84918, 13.79037, 14.77472, 14.81978, 12, 12.04505, 13.0294,
          13.97059, 14.95494, 15}},
        {"mode=cubic;padding_mode=reflection;align_corners=1", 20,
         {0.6074938, 0.7135509, 1.669339, 2.30265, 3.258438, 3.364494, 1.031721, 1.137779, 2.093567, 2.726878,
          3.682667, 3.788723, 4.854874, 4.960932, 5.916721, 6.550032, 7.505821, 7.611879, 7.388118, 7.494177, 8.449965,
          9.083276, 10.03907, 10.14512, 11.21127, 11.31733, 12.27312, 12.90643, 13.86222, 13.96828, 11.6355, 11.74156,
          12.69734, 13.33066, 14.28645, 14.39251}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char label[96];
        snprintf(label, sizeof label, "grid_sample %s", cases[i].attrs);
        fails += kiln_optest_opset("GridSample", cases[i].attrs, cases[i].opset, 2,
                                   (kiln_tensor *[]){kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), xv),
                                                     kt_make(KILN_F32, 4, KT_DIMS(1, 6, 6, 2), gv)},
                                   1, (kiln_tensor *[]){kt_make(KILN_F32, 4, KT_DIMS(1, 1, 6, 6), cases[i].want)},
                                   2e-5, 2e-6, label);
    }
    /* f64 X: the same bilinear values (its coordinates in f64) */
    fails += kiln_optest_opset("GridSample", "align_corners=0", 16, 2,
                               (kiln_tensor *[]){kt_make(KILN_F64, 4, KT_DIMS(1, 1, 4, 4), xv),
                                                 kt_make(KILN_F32, 4, KT_DIMS(1, 6, 6, 2), gv)},
                               1, (kiln_tensor *[]){kt_make(KILN_F64, 4, KT_DIMS(1, 1, 6, 6), cases[0].want)}, 2e-5,
                               2e-6, "grid_sample f64 X, f32 grid");
    /* refusals: X (1, 1, 4, 4) and grid (1, 2, 2, 2) but for what each case changes */
    static const struct {
        const char *attrs, *label;
        kiln_dtype xdt;
        int64_t xn, glast;
        kiln_status want;
    } bad[] = {
        {"mode=area", "grid_sample bad mode", KILN_F32, 1, 2, KILN_ERR_INVALID_ARGUMENT},
        {"padding_mode=wrap", "grid_sample bad padding", KILN_F32, 1, 2, KILN_ERR_INVALID_ARGUMENT},
        {"", "grid_sample N differs", KILN_F32, 2, 2, KILN_ERR_SHAPE},
        {"", "grid_sample grid's last dim", KILN_F32, 1, 3, KILN_ERR_SHAPE},
        {"", "grid_sample integer X", KILN_I64, 1, 2, KILN_ERR_TYPE},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        fails += kiln_optest_fails("GridSample", bad[i].attrs, 2,
                                   (kiln_tensor *[]){kt_make(bad[i].xdt, 4, KT_DIMS(bad[i].xn, 1, 4, 4), NULL),
                                                     kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, bad[i].glast), NULL)},
                                   1, bad[i].want, bad[i].label);
    /* the backend sweep: every mode and padding, both alignments, points inside and out */
    static const char *const modes[3] = {"bilinear", "nearest", "bicubic"};
    static const char *const pads[3] = {"zeros", "border", "reflection"};
    for (int mi = 0; mi < 3; mi++)
        for (int pi = 0; pi < 3; pi++)
            for (int ac = 0; ac < 2; ac++) {
                char attrs[96], label[96];
                snprintf(attrs, sizeof attrs, "mode=%s;padding_mode=%s;align_corners=%d", modes[mi], pads[pi], ac);
                snprintf(label, sizeof label, "grid_sample %s %s ac=%d", modes[mi], pads[pi], ac);
                const uint64_t seed = 7100 + (uint64_t)(mi * 6 + pi * 2 + ac);
                fails += kiln_optest_sweep("GridSample", attrs, 16, 2,
                                           (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 9, 13), -2, 2, seed),
                                                             kt_rand(KILN_F32, 4, KT_DIMS(2, 7, 11, 2), -1.3, 1.3,
                                                                     seed + 50)},
                                           1, label);
            }
    /* opset 20: 3-D and 1-D samples */
    fails += kiln_optest_sweep("GridSample", "mode=linear;padding_mode=border", 20, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 5, KT_DIMS(1, 2, 5, 6, 7), -2, 2, 7201),
                                                 kt_rand(KILN_F32, 5, KT_DIMS(1, 3, 4, 5, 3), -1.2, 1.2, 7202)},
                               1, "grid_sample 3-D linear border");
    fails += kiln_optest_sweep("GridSample", "mode=nearest;padding_mode=zeros;align_corners=1", 20, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 4, 17), -2, 2, 7203),
                                                 kt_rand(KILN_F32, 3, KT_DIMS(2, 9, 1), -1.2, 1.2, 7204)},
                               1, "grid_sample 1-D nearest");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_grid_sample = {
    /* X may run in f16 / bf16; the grid's coordinates stay f32 (a pixel is 2 / D of [-1, 1]) */
    .precision = KILN_PREC_LOW, .f32_inputs = 0x2u,
    .name = "GridSample", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
