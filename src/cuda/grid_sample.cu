/*
 * grid_sample.cu — GridSample and RoiAlign (src/ops/grid_sample.c, roi_align.c have the rules).
 *
 * GridSample: X (N, C, D1..Dk) in f32 /
 * f16 / bf16 laid out NCHW (or NCDHW, NCW), the grid in any float dtype, k = 1..3; linear,
 * nearest and cubic, zeros / border / reflection padding, either align_corners.
 *
 * One thread an output element (n, c, point). The coordinates are the CPU reference's to the
 * bit: f32 arithmetic with the FMA contraction spelled out (__fadd_rn, __fmul_rn), rintf for
 * nearest (half to even), and the reflection in f64 with its two roundings to f32, so that
 * nearest picks the same pixel and the taps sit at the same places; the interpolation is
 * accumulated in f32 (the reference: f64).
 *
 * RoiAlign: one thread an output element (region, c, bin); positions, weights and the sums in
 * f64, the reference's arithmetic (src/ops/roi_align_math.h, the same bits); a batch index outside [0, N) zeroes that region's outputs and raises
 * KILN_CUDA_FLAG_ROI_BATCH (kiln_cuda_sync names it).
 */
#include "../ops/roi_align_math.h"
#include "dtype.cuh"

#include <math.h>
#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;
enum { LINEAR, NEAREST, CUBIC };
enum { ZEROS, BORDER, REFLECTION };

struct GsArgs {
    int k, mode, pad;
    bool ac;
    int64_t N, C, npts;
    int64_t D[3], xs[3]; /* X's spatial dims and their strides */
    int64_t plane;       /* X's elements per (n, c) */
    float lo[3], hi[3];
};

__device__ __forceinline__ float denorm(float n, int64_t len, bool ac) {
    const float lf = (float)len;
    return ac ? __fmul_rn(__fadd_rn(n, 1.0f) / 2.0f, __fsub_rn(lf, 1.0f))
              : __fsub_rn(__fmul_rn(__fadd_rn(n, 1.0f), lf), 1.0f) / 2.0f;
}

/* the reference's reflect (grid_sample.c): in f64, the remainder and the result rounded to f32 */
__device__ __forceinline__ float reflect(float xf, float lof, float hif) {
    const double x = xf, lo = lof, hi = hif, range = hi - lo;
    if (range <= 0) return lof;
    if (x < lo) {
        const double dx = lo - x, n = floor(dx / range);
        const double r = (float)__dsub_rn(dx, __dmul_rn(n, range));
        return fmod(n, 2.0) == 0 ? (float)(lo + r) : (float)(hi - r);
    }
    if (x > hi) {
        const double dx = x - hi, n = floor(dx / range);
        const double r = (float)__dsub_rn(dx, __dmul_rn(n, range));
        return fmod(n, 2.0) == 0 ? (float)(hi - r) : (float)(lo + r);
    }
    return xf;
}

__device__ __forceinline__ void cubic_coeffs(float t, float w[4]) {
    const float a = -0.75f, x1 = t + 1, x2 = 1 - t, x3 = 2 - t;
    w[0] = ((a * x1 - 5 * a) * x1 + 8 * a) * x1 - 4 * a;
    w[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
    w[2] = ((a + 2) * x2 - (a + 3)) * x2 * x2 + 1;
    w[3] = ((a * x3 - 5 * a) * x3 + 8 * a) * x3 - 4 * a;
}

template <typename T>
__global__ void __launch_bounds__(THREADS)
    grid_sample_kernel(const T *__restrict__ x, const void *__restrict__ grid, int gdt, T *__restrict__ y,
                       const GsArgs a) {
    const int64_t total = a.N * a.C * a.npts;
    for (int64_t e = thread_index(); e < total; e += grid_stride()) {
        const int64_t q = e % a.npts, nc = e / a.npts, n = nc / a.C;
        const int k = a.k;
        float u[3];
        for (int d = 0; d < k; d++) {
            float v = denorm((float)load_any(grid, gdt, (n * a.npts + q) * k + (k - 1 - d)), a.D[d], a.ac);
            if (a.mode == NEAREST) v = rintf(v);
            if (v < a.lo[d] || v > a.hi[d]) {
                if (a.pad == BORDER) v = fminf(fmaxf(v, 0.0f), (float)(a.D[d] - 1));
                else if (a.pad == REFLECTION) v = reflect(v, a.lo[d], a.hi[d]);
            }
            u[d] = v;
        }
        const int taps = a.mode == NEAREST ? 1 : a.mode == LINEAR ? 2 : 4;
        int64_t i0[3];
        float w[3][4];
        for (int d = 0; d < k; d++) {
            if (a.mode == NEAREST) {
                i0[d] = (int64_t)u[d];
                w[d][0] = 1;
                continue;
            }
            const float f = floorf(u[d]), t = u[d] - f;
            i0[d] = (int64_t)f - (a.mode == CUBIC ? 1 : 0);
            if (a.mode == LINEAR) {
                w[d][0] = 1 - t;
                w[d][1] = t;
            } else {
                cubic_coeffs(t, w[d]);
            }
        }
        int total_taps = 1;
        for (int d = 0; d < k; d++) total_taps *= taps;
        const T *xp = x + nc * a.plane;
        float acc = 0;
        for (int t = 0; t < total_taps; t++) {
            int rest = t;
            float wt = 1;
            int64_t off = 0;
            bool in = true;
            for (int d = k - 1; d >= 0; d--) {
                const int j = rest % taps;
                rest /= taps;
                int64_t v = i0[d] + j;
                wt *= w[d][j];
                if (a.pad == ZEROS) {
                    in = in && v >= 0 && v < a.D[d];
                } else if (a.pad == BORDER) {
                    v = v < 0 ? 0 : v >= a.D[d] ? a.D[d] - 1 : v;
                } else {
                    v = (int64_t)reflect((float)v, a.lo[d], a.hi[d]);
                    v = v < 0 ? 0 : v >= a.D[d] ? a.D[d] - 1 : v;
                }
                off += v * a.xs[d];
            }
            if (in && wt != 0.0f) acc += wt * to_f(xp[off]);
        }
        y[e] = from_f<T>(acc);
    }
}

template <typename T>
kiln_status launch(kiln_cuda *cu, kiln_context *ctx, const void *x, const void *grid, int gdt, void *y, const GsArgs &a) {
    const int64_t total = a.N * a.C * a.npts;
    grid_sample_kernel<T><<<kiln_cuda_blocks(cu, total, THREADS), THREADS, 0, cu->stream>>>(
        (const T *)x, grid, gdt, (T *)y, a);
    KILN_CUDA_LAUNCHED(ctx, "grid_sample_kernel");
    return KILN_OK;
}

struct RoiArgs {
    int64_t R, N, C, H, W, PH, PW, sr;
    double scale;
    bool max, hp, idx64;
};

template <typename T>
__global__ void __launch_bounds__(THREADS)
    roi_align_kernel(const T *__restrict__ x, const void *__restrict__ rois, int rdt, const void *__restrict__ bi,
                     T *__restrict__ y, const RoiArgs a, kiln_cuda_flag *flag) {
    const int64_t total = a.R * a.C * a.PH * a.PW;
    for (int64_t e = thread_index(); e < total; e += grid_stride()) {
        const int64_t pw = e % a.PW, ph = (e / a.PW) % a.PH, ch = (e / (a.PW * a.PH)) % a.C, r = e / (a.PW * a.PH * a.C);
        const int64_t b = a.idx64 ? ((const int64_t *)bi)[r] : ((const int32_t *)bi)[r];
        if (b < 0 || b >= a.N) {
            y[e] = from_f<T>(0.0f);
            if (atomicCAS(&flag->code, 0, KILN_CUDA_FLAG_ROI_BATCH) == 0) flag->value = (long long)b;
            continue;
        }
        const kiln_roi_box box = kiln_roi_box_of(load_any(rois, rdt, r * 4 + 0), load_any(rois, rdt, r * 4 + 1),
                                                 load_any(rois, rdt, r * 4 + 2), load_any(rois, rdt, r * 4 + 3),
                                                 a.scale, a.hp, a.PH, a.PW, a.sr);
        const T *xp = x + (b * a.C + ch) * a.H * a.W;
        double acc = 0;
        for (int64_t iy = 0; iy < box.gh; iy++)
            for (int64_t ix = 0; ix < box.gw; ix++) {
                const kiln_roi_taps t = kiln_roi_taps_at(&box, ph, pw, iy, ix, a.H, a.W);
                double v[4];
                for (int k = 0; k < 4; k++) v[k] = t.in ? (double)to_f(xp[t.off[k]]) : 0.0;
                acc = kiln_roi_fold(acc, kiln_roi_combine(&t, v, a.max), iy == 0 && ix == 0, a.max);
            }
        y[e] = from_f<T>((float)kiln_roi_result(acc, &box, a.max));
    }
}

template <typename T>
kiln_status launch_roi(kiln_cuda *cu, kiln_context *ctx, const void *x, const void *rois, int rdt, const void *bi,
                       void *y, const RoiArgs &a) {
    const int64_t total = a.R * a.C * a.PH * a.PW;
    roi_align_kernel<T><<<kiln_cuda_blocks(cu, total, THREADS), THREADS, 0, cu->stream>>>(
        (const T *)x, rois, rdt, bi, (T *)y, a, cu->flag);
    KILN_CUDA_LAUNCHED(ctx, "roi_align_kernel");
    return KILN_OK;
}

} // namespace

extern "C" kiln_status kiln_cuda_k_grid_sample(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *g = c->in[1];
    GsArgs a;
    memset(&a, 0, sizeof a);
    a.k = x->ndim - 2;
    const char *m = kiln_attr_string(c->node, "mode", c->node->opset >= 20 ? "linear" : "bilinear");
    a.mode = !strcmp(m, "nearest") ? NEAREST : (!strcmp(m, "bicubic") || !strcmp(m, "cubic")) ? CUBIC : LINEAR;
    const char *p = kiln_attr_string(c->node, "padding_mode", "zeros");
    a.pad = !strcmp(p, "border") ? BORDER : !strcmp(p, "reflection") ? REFLECTION : ZEROS;
    a.ac = kiln_attr_int(c->node, "align_corners", 0) != 0;
    a.N = x->dims[0];
    a.C = x->dims[1];
    a.npts = 1;
    a.plane = 1;
    for (int d = 0; d < a.k; d++) {
        a.D[d] = x->dims[2 + d];
        a.npts *= g->dims[1 + d];
        a.plane *= a.D[d];
        a.lo[d] = a.ac ? 0.0f : -0.5f;
        a.hi[d] = a.ac ? (float)(a.D[d] - 1) : (float)a.D[d] - 0.5f;
    }
    int64_t stride = 1;
    for (int d = a.k - 1; d >= 0; d--) {
        a.xs[d] = stride;
        stride *= a.D[d];
    }
    if (a.N * a.C * a.npts == 0) return KILN_OK;
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch, cu, c->kctx, x->data, g->data, (int)g->dtype,
                           c->out[0]->data, a);
    return st;
}

extern "C" kiln_status kiln_cuda_k_roi_align(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *rois = c->in[1], *bi = c->in[2], *y = c->out[0];
    RoiArgs a;
    memset(&a, 0, sizeof a);
    a.R = rois->dims[0];
    a.N = x->dims[0];
    a.C = x->dims[1];
    a.H = x->dims[2];
    a.W = x->dims[3];
    a.PH = y->dims[2];
    a.PW = y->dims[3];
    a.sr = kiln_attr_int(c->node, "sampling_ratio", 0);
    a.scale = kiln_attr_float(c->node, "spatial_scale", 1.0f);
    a.max = !strcmp(kiln_attr_string(c->node, "mode", "avg"), "max");
    a.hp = !strcmp(kiln_attr_string(c->node, "coordinate_transformation_mode",
                                    c->node->opset >= 16 ? "half_pixel" : "output_half_pixel"),
                   "half_pixel");
    a.idx64 = bi->dtype == KILN_I64;
    if (a.R * a.C * a.PH * a.PW == 0) return KILN_OK;
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_roi, cu, c->kctx, x->data, rois->data, (int)rois->dtype,
                           bi->data, c->out[0]->data, a);
    return st;
}
