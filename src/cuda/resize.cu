/*
 * resize.cu — Resize (opsets 11..21) on the device, by the rules of src/ops/resize.c:
 * nearest (any dtype, elements copied), linear and cubic (f32, f16, bf16; sums in double,
 * rounded once through float as the CPU reference stores them) over every axis of a
 * tensor of rank 1..8.
 *
 * The plan (modes, per-axis scale, unrounded output length, roi) is computed on the host
 * from the attributes and the host values of scales / sizes (c->host_in; roi too for
 * tf_crop_and_resize, which must then be a constant) exactly as the CPU plan does, and
 * passed by value. Each thread computes, per axis, the source coordinate of its output
 * position by `coordinate_transformation_mode` and then the nearest index or the taps
 * (2 for linear, 4 for Keys' cubic, edge-clamped or with `exclude_outside` renormalized),
 * in double with every product rounded before it is added (no fused multiply-adds), so
 * the coordinates, indices and weights equal the CPU's bit for bit. Axes on which every
 * source coordinate is a whole number take a single tap, as on the CPU. The taps of all
 * axes but the last are enumerated in the CPU's order, each combination's weight product
 * skipped when 0, and the last axis's taps summed per combination, so the double sums
 * match as well. tf_crop_and_resize positions outside the roi get extrapolation_value.
 *
 * The forward works from tables: one small kernel computes, once per run, each axis's
 * per-output-position taps (input offsets and weights, or the nearest offset, and whether
 * the position is outside the roi) into the workspace, with the functions above; the main
 * kernel then gives each warp an output row (all axes but the last), works out the other
 * axes' tap combinations once for it, and has its lanes sum table entries in the CPU's
 * order, so the output is the same bits as working the coordinates out per element (which
 * ran deeplabv3's final 28 -> 224 bilinear upsample at 47 GB/s on an H100: 11.6 of its
 * 47.6 ms at batch 256). Row indices in 32 bits where the output allows. A last axis
 * shorter than 32 leaves lanes idle. Where no position is outside a roi and the last axis's
 * taps fit in shared memory, resize_interp_fast computes the same sums from there with
 * 32-bit offsets, and where only the last two axes move it finds a row's combinations
 * without the generic loops (that upsample, f16, on an H200: 2.66 -> 1.64 ms).
 */
#include "dtype.cuh"
#include "grad_movegrad.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

enum InterpMode { NEAREST, LINEAR, CUBIC };
enum CoordMode {
    HALF_PIXEL, HALF_PIXEL_SYMMETRIC, PYTORCH_HALF_PIXEL, ALIGN_CORNERS, ASYMMETRIC,
    TF_HALF_PIXEL_FOR_NN, TF_CROP_AND_RESIZE
};
enum NearestMode { ROUND_PREFER_FLOOR, ROUND_PREFER_CEIL, FLOOR_MODE, CEIL_MODE };

struct ResizeArgs {
    int nd, mode, coord, nearest;
    bool exclude_outside;
    double cubic_a, extrapolation;
    uint64_t extrap_bits;        /* nearest: extrapolation_value in the dtype */
    int64_t in[KILN_MAX_DIMS], out[KILN_MAX_DIMS], stride[KILN_MAX_DIMS];
    int k[KILN_MAX_DIMS];        /* taps per axis: 1 (whole coordinates), 2 or 4 */
    double scale[KILN_MAX_DIMS], length[KILN_MAX_DIMS];
    double roi_start[KILN_MAX_DIMS], roi_end[KILN_MAX_DIMS];
    int64_t tab[KILN_MAX_DIMS]; /* the forward's tables: axis d's first entry (sum of out[< d]) */
};

/* The forward's tables (resize_tables), in the workspace: per axis d and output position j,
 * entry e = tab[d] + j: KMAX taps' input offsets and weights (nearest: one offset), and
 * whether the position is outside the roi; tap by tap, so neighbouring positions' entries
 * are neighbouring words. */
constexpr int KMAX = 4;
struct ResizeTables {
    int64_t *off;           /* [KMAX][entries]: tap u of entry e at u * entries + e */
    double *w;              /* [KMAX][entries] */
    unsigned char *outside; /* [entries] */
};
int64_t table_entries(const kiln_tensor *y) {
    int64_t e = 0;
    for (int d = 0; d < y->ndim; d++) e += y->dims[d];
    return e;
}
size_t table_bytes(int64_t entries) {
    return (size_t)entries * KMAX * (sizeof(int64_t) + sizeof(double)) + (size_t)entries + 256;
}
ResizeTables table_layout(void *ws, int64_t entries) {
    ResizeTables t;
    t.off = (int64_t *)ws;
    t.w = (double *)(t.off + entries * KMAX);
    t.outside = (unsigned char *)(t.w + entries * KMAX);
    return t;
}

int pick(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

/* The plan of resize.c's plan(): false with a reason on anything not computable. */
bool plan(const kiln_op_ctx *c, kiln_tensor *const *hin, ResizeArgs *p, char *why, size_t wn) {
    const kiln_node *node = c->node;
    const kiln_tensor *x = c->in[0];
    const int r = x->ndim;
    memset(p, 0, sizeof *p);
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    static const char *const coords[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                         "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                                         "tf_crop_and_resize"};
    static const char *const nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    p->mode = pick(kiln_attr_string(node, "mode", "nearest"), modes, 3);
    p->coord = pick(kiln_attr_string(node, "coordinate_transformation_mode", "half_pixel"), coords, 7);
    p->nearest = pick(kiln_attr_string(node, "nearest_mode", "round_prefer_floor"), nearests, 4);
    if (p->mode < 0 || p->coord < 0 || p->nearest < 0) {
        snprintf(why, wn, "an unknown mode, coordinate_transformation_mode or nearest_mode");
        return false;
    }
    p->cubic_a = kiln_attr_float(node, "cubic_coeff_a", -0.75f);
    p->exclude_outside = kiln_attr_int(node, "exclude_outside", 0) != 0;
    p->extrapolation = kiln_attr_float(node, "extrapolation_value", 0.0f);
    if (r < 1 || r > KILN_MAX_DIMS) {
        snprintf(why, wn, "rank %d", r);
        return false;
    }
    p->nd = r;

    int64_t axes[KILN_MAX_DIMS];
    int na = r, n_attr = 0;
    const int64_t *axes_attr = node->opset >= 18 ? kiln_attr_ints(node, "axes", &n_attr) : NULL;
    if (axes_attr) {
        na = n_attr;
        for (int i = 0; i < na; i++) {
            axes[i] = axes_attr[i];
            if (!kiln_norm_axis(&axes[i], r)) {
                snprintf(why, wn, "axes[%d] is out of range", i);
                return false;
            }
        }
    } else {
        for (int i = 0; i < r; i++) axes[i] = i;
    }
    for (int d = 0; d < r; d++) {
        p->roi_start[d] = 0;
        p->roi_end[d] = 1;
        p->scale[d] = 1;
        p->length[d] = (double)x->dims[d];
        p->in[d] = x->dims[d];
        p->out[d] = x->dims[d];
    }
    if (p->coord == TF_CROP_AND_RESIZE) {
        const kiln_tensor *roi = c->n_in > 1 ? hin[1] : NULL;
        if (!roi || kiln_tensor_numel(roi) != 2 * (int64_t)na || !roi->data || !kiln_dtype_is_float(roi->dtype)) {
            snprintf(why, wn, "tf_crop_and_resize needs roi values known when the plan is built");
            return false;
        }
        for (int i = 0; i < na; i++) {
            p->roi_start[axes[i]] = kiln_get_f64(roi, i);
            p->roi_end[axes[i]] = kiln_get_f64(roi, na + i);
        }
    }
    const kiln_tensor *scales = c->n_in > 2 ? hin[2] : NULL, *sizes = c->n_in > 3 ? hin[3] : NULL;
    if (scales && kiln_tensor_numel(scales) == 0) scales = NULL;
    if (sizes && kiln_tensor_numel(sizes) == 0) sizes = NULL;
    if ((scales != NULL) == (sizes != NULL)) {
        snprintf(why, wn, "exactly one of scales and sizes must be given");
        return false;
    }
    if (scales) {
        if (!scales->data || !kiln_dtype_is_float(scales->dtype) || kiln_tensor_numel(scales) != na) {
            snprintf(why, wn, "the values of scales are not known when the plan is built");
            return false;
        }
        for (int i = 0; i < na; i++) {
            const int64_t d = axes[i];
            const double s = kiln_get_f64(scales, i);
            p->scale[d] = s;
            p->length[d] = (double)x->dims[d] * s;
            p->out[d] = (int64_t)floor(p->length[d]);
        }
    } else {
        int64_t want[KILN_MAX_DIMS];
        int n;
        if (!kiln_cuda_host_ints(sizes, "sizes", want, KILN_MAX_DIMS, &n, why, wn)) return false;
        if (n != na) {
            snprintf(why, wn, "sizes has %d values for %d axes", n, na);
            return false;
        }
        for (int i = 0; i < na; i++) {
            const int64_t d = axes[i];
            p->scale[d] = (double)want[i] / (double)x->dims[d];
            p->length[d] = (double)want[i];
            p->out[d] = want[i];
        }
        const char *policy = kiln_attr_string(node, "keep_aspect_ratio_policy", "stretch");
        if (node->opset >= 18 && strcmp(policy, "stretch") != 0) {
            const bool larger = strcmp(policy, "not_smaller") == 0;
            double s = p->scale[axes[0]];
            for (int i = 1; i < na; i++) s = larger ? fmax(s, p->scale[axes[i]]) : fmin(s, p->scale[axes[i]]);
            for (int i = 0; i < na; i++) {
                const int64_t d = axes[i];
                p->scale[d] = s;
                p->length[d] = s * (double)x->dims[d];
                p->out[d] = (int64_t)(p->length[d] + 0.5);
            }
        }
    }
    for (int d = 0; d < r; d++)
        if (p->out[d] != c->out[0]->dims[d]) {
            snprintf(why, wn, "the output shape does not follow from scales / sizes");
            return false;
        }
    if (p->mode != NEAREST && !kiln_cuda_float_dtype(x->dtype)) {
        snprintf(why, wn, "%s mode on %s (f32, f16 and bf16 are supported)", modes[p->mode],
                 kiln_dtype_name(x->dtype));
        return false;
    }
    return true;
}

/* ------------------------------------------------- coordinates (host and device) */

/* Rounded double arithmetic that the compiler may not fuse into multiply-adds, so the
 * device computes what the CPU reference computes. */
__host__ __device__ __forceinline__ double mul(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
__host__ __device__ __forceinline__ double add(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}

/* resize.c's source_coord(). */
__host__ __device__ double source_coord(const ResizeArgs &p, int d, int64_t j, bool *outside) {
    const double s = p.scale[d], x = (double)j;
    const int64_t in = p.in[d];
    *outside = false;
    switch (p.coord) {
    case HALF_PIXEL: return (x + 0.5) / s - 0.5;
    case HALF_PIXEL_SYMMETRIC: {
        const double adjustment = (double)p.out[d] / p.length[d], center = (double)in / 2;
        return add(mul(center, 1 - adjustment), (x + 0.5) / s) - 0.5;
    }
    case PYTORCH_HALF_PIXEL: return p.out[d] > 1 ? (x + 0.5) / s - 0.5 : 0;
    case ALIGN_CORNERS: return p.length[d] == 1 ? 0 : mul(x, (double)(in - 1)) / (p.length[d] - 1);
    case ASYMMETRIC: return x / s;
    case TF_HALF_PIXEL_FOR_NN: return (x + 0.5) / s;
    default: { /* TF_CROP_AND_RESIZE */
        const double a = p.roi_start[d], b = p.roi_end[d], span = (double)(in - 1);
        const double xo = p.length[d] == 1 ? mul(mul(0.5, a + b), span)
                                           : add(mul(a, span), mul(mul(x, b - a), span) / (p.length[d] - 1));
        *outside = !(xo >= 0 && xo <= span);
        return xo;
    }
    }
}

__device__ int64_t nearest_index(const ResizeArgs &p, double xo, int64_t in) {
    if (xo < -1) return 0;
    if (xo > (double)in) return in - 1;
    const double fl = floor(xo), ratio = xo - fl;
    double i = fl;
    if (ratio != 0) {
        switch (p.nearest) {
        case ROUND_PREFER_FLOOR: i = ratio <= 0.5 ? fl : fl + 1; break;
        case ROUND_PREFER_CEIL: i = ratio < 0.5 ? fl : fl + 1; break;
        case FLOOR_MODE: i = fl; break;
        default: i = fl + 1; break;
        }
    }
    return i <= 0 ? 0 : i >= (double)(in - 1) ? in - 1 : (int64_t)i;
}

__device__ __forceinline__ double cubic_near(double a, double s) {
    return add(mul(mul(add(mul(a + 2, s), -(a + 3)), s), s), 1);
}
__device__ __forceinline__ double cubic_far(double a, double s) {
    return add(mul(add(mul(add(mul(a, s), -mul(5, a)), s), mul(8, a)), s), -mul(4, a));
}

/* resize.c's axis_taps(): k offsets and weights of source coordinate xo. */
__device__ void axis_taps(const ResizeArgs &p, double xo, int64_t in, int64_t stride, int k, int64_t *off,
                          double *w) {
    xo = xo < -2 ? -2 : xo > (double)(in + 1) ? (double)(in + 1) : xo;
    const double fl = floor(xo), f = xo - fl, a = p.cubic_a;
    const int64_t first = (int64_t)fl - (k == 4 ? 1 : 0);
    if (k == 1) {
        w[0] = 1;
    } else if (k == 2) {
        w[0] = 1 - f;
        w[1] = f;
    } else {
        w[0] = cubic_far(a, f + 1);
        w[1] = cubic_near(a, f);
        w[2] = cubic_near(a, 1 - f);
        w[3] = cubic_far(a, 2 - f);
    }
    double kept = 0;
    for (int t = 0; t < k; t++)
        if (first + t >= 0 && first + t < in) kept += w[t];
    const bool exclude = p.exclude_outside && kept != 0;
    for (int t = 0; t < k; t++) {
        const int64_t i = first + t;
        if (exclude) w[t] = i >= 0 && i < in ? w[t] / kept : 0;
        off[t] = (i < 0 ? 0 : i >= in ? in - 1 : i) * stride;
    }
}

/* Output element i's source: the input offset of its nearest element (false: outside, the
 * extrapolation value's place), or each axis's taps (offsets and weights). */
__device__ bool nearest_source(const ResizeArgs &p, int64_t i, int64_t *off) {
    int64_t r = i;
    bool outside = false;
    *off = 0;
    for (int d = p.nd - 1; d >= 0; d--) {
        const int64_t j = r % p.out[d];
        r /= p.out[d];
        bool o;
        const double xo = source_coord(p, d, j, &o);
        outside |= o;
        if (!o) *off += nearest_index(p, xo, p.in[d]) * p.stride[d];
    }
    return !outside;
}

__device__ bool interp_taps(const ResizeArgs &p, int64_t i, int64_t off[KILN_MAX_DIMS][4], double w[KILN_MAX_DIMS][4]) {
    int64_t r = i;
    bool outside = false;
    for (int d = p.nd - 1; d >= 0; d--) {
        const int64_t j = r % p.out[d];
        r /= p.out[d];
        bool o;
        const double xo = source_coord(p, d, j, &o);
        outside |= o;
        if (!o) axis_taps(p, xo, p.in[d], p.stride[d], p.k[d], off[d], w[d]);
    }
    return !outside;
}

/* ------------------------------------------------------------------- kernels */

/* Every axis's table entries (one thread each): what nearest_source / interp_taps work out
 * for one axis and one output position. */
__global__ void resize_tables(ResizeArgs p, ResizeTables t, int64_t entries) {
    for (int64_t e = thread_index(); e < entries; e += grid_stride()) {
        int d = 0;
        while (d + 1 < p.nd && e >= p.tab[d + 1]) d++;
        const int64_t j = e - p.tab[d];
        bool o;
        const double xo = source_coord(p, d, j, &o);
        int64_t off[KMAX] = {0, 0, 0, 0};
        double w[KMAX] = {0, 0, 0, 0};
        if (!o) {
            if (p.mode == NEAREST) off[0] = nearest_index(p, xo, p.in[d]) * p.stride[d];
            else axis_taps(p, xo, p.in[d], p.stride[d], p.k[d], off, w);
        }
        t.outside[e] = o;
        for (int u = 0; u < KMAX; u++) {
            t.off[u * entries + e] = off[u];
            t.w[u * entries + e] = w[u];
        }
    }
}

/* One warp per output row (every axis but the last), rows of a block's 8 warps then a
 * grid stride; lanes over the row's positions, 32 apart, so a warp's loads of one tap's
 * table entries and its stores are contiguous. The other axes' taps are worked out once
 * per row: their combinations (CPU order, weight products of 0 dropped) go to the warp's
 * shared memory, up to MAXCOMB of them (more: each lane enumerates them itself). */
constexpr int ROW_WARPS = 8, MAXCOMB = 64;

/* Row `row`'s outer axes: the first entry of each (e[d] = tab[d] + index), and whether the
 * row lies outside the roi. */
template <typename I>
__device__ __forceinline__ bool row_entries(const ResizeArgs &p, const ResizeTables &t, I row, int64_t *e) {
    bool outside = false;
    for (int d = p.nd - 2; d >= 0; d--) {
        const I od = (I)p.out[d], j = row % od;
        row /= od;
        e[d] = p.tab[d] + j;
        outside |= t.outside[e[d]] != 0;
    }
    return outside;
}

/* Combination c of the outer axes' taps (the last outer axis fastest, as the CPU counts):
 * its input offset and weight product. */
__device__ __forceinline__ void combination(const ResizeArgs &p, const ResizeTables &t, int64_t entries,
                                            const int64_t *e, int c, int64_t *base, double *wp) {
    int64_t b = 0;
    double w = 1;
    int tt[KILN_MAX_DIMS];
    for (int d = p.nd - 2; d >= 0; d--) {
        tt[d] = c % p.k[d];
        c /= p.k[d];
    }
    for (int d = 0; d < p.nd - 1; d++) { /* the CPU's order of the products */
        b += t.off[tt[d] * entries + e[d]];
        w *= t.w[tt[d] * entries + e[d]];
    }
    *base = b;
    *wp = w;
}

template <typename E, typename I>
__global__ void __launch_bounds__(32 * ROW_WARPS) resize_nearest_rows(const E *__restrict__ x, E *__restrict__ y,
                                                                      I rows, ResizeArgs p, ResizeTables t,
                                                                      int64_t entries) {
    E fill;
    memcpy(&fill, &p.extrap_bits, sizeof fill);
    const int last = p.nd - 1;
    const I ol = (I)p.out[last];
    const int64_t *offl = t.off + p.tab[last];
    const unsigned char *outl = t.outside + p.tab[last];
    for (I row = (I)blockIdx.x * ROW_WARPS + threadIdx.y; row < rows; row += (I)gridDim.x * ROW_WARPS) {
        int64_t e[KILN_MAX_DIMS];
        const bool outside = row_entries<I>(p, t, row, e);
        int64_t base = 0;
        for (int d = 0; d < last; d++) base += t.off[e[d]];
        E *yr = y + (int64_t)row * ol;
        for (I j = threadIdx.x; j < ol; j += 32) yr[j] = outside || outl[j] ? fill : x[base + offl[j]];
    }
}

template <typename T, typename I>
__global__ void __launch_bounds__(32 * ROW_WARPS) resize_interp_rows(const T *__restrict__ x, T *__restrict__ y,
                                                                     I rows, int ncomb, ResizeArgs p, ResizeTables t,
                                                                     int64_t entries) {
    __shared__ int64_t s_base[ROW_WARPS][MAXCOMB];
    __shared__ double s_wp[ROW_WARPS][MAXCOMB];
    const int last = p.nd - 1, kl = p.k[last], lane = threadIdx.x, wy = threadIdx.y;
    const I ol = (I)p.out[last];
    const int64_t el = p.tab[last];
    const bool staged = ncomb <= MAXCOMB;
    for (I row = (I)blockIdx.x * ROW_WARPS + wy; row < rows; row += (I)gridDim.x * ROW_WARPS) {
        int64_t e[KILN_MAX_DIMS];
        const bool outside = row_entries<I>(p, t, row, e);
        T *yr = y + (int64_t)row * ol;
        if (outside) {
            for (I j = lane; j < ol; j += 32) yr[j] = from_f<T>((float)p.extrapolation);
            continue; /* warp-uniform */
        }
        if (staged) {
            __syncwarp();
            for (int c = lane; c < ncomb; c += 32) combination(p, t, entries, e, c, &s_base[wy][c], &s_wp[wy][c]);
            __syncwarp();
        }
        for (I j = lane; j < ol; j += 32) {
            if (t.outside[el + j]) {
                yr[j] = from_f<T>((float)p.extrapolation);
                continue;
            }
            int64_t off[KMAX]; /* in registers: the loops over taps unroll */
            double w[KMAX];
#pragma unroll
            for (int u = 0; u < KMAX; u++) {
                off[u] = u < kl ? t.off[u * entries + el + j] : 0;
                w[u] = u < kl ? t.w[u * entries + el + j] : 0;
            }
            double acc = 0;
            for (int c = 0; c < ncomb; c++) {
                int64_t base;
                double wp;
                if (staged) {
                    base = s_base[wy][c];
                    wp = s_wp[wy][c];
                } else {
                    combination(p, t, entries, e, c, &base, &wp);
                }
                if (wp == 0) continue;
                double s = 0;
#pragma unroll
                for (int u = 0; u < KMAX; u++)
                    if (u < kl) s = add(s, mul(w[u], (double)to_f(x[base + off[u]])));
                acc = add(acc, mul(wp, s));
            }
            yr[j] = from_f<T>((float)acc);
        }
    }
}

/* The same sums as resize_interp_rows, bit for bit, in fewer instructions, where no
 * position lies outside a roi (every mode but tf_crop_and_resize) and the last axis's taps
 * fit in shared memory: the block copies them there once (offsets as 32-bit ints, weights
 * as doubles), each warp's row keeps its outer combinations as pointers into X, and a
 * position's sum is then a shared load per tap, a 32-bit-indexed load of X, and the double
 * arithmetic. PLANES (only the last two axes move): a row's combinations are its
 * second-to-last position's taps, found with one division instead of row_entries' and
 * combination()'s loops over the axes. One warp a row as resize_interp_rows, which was
 * issue-bound (~270 instructions an output, 0.88 issued a scheduler a cycle on an H200,
 * Nsight Compute): deeplabv3's and fcn's final 28 -> 224 bilinear upsample of (256, 21)
 * maps, f16, 2.66 -> 1.64 ms; lraspp_mobilenet_v3_large 8.60 -> 7.31 ms at batch 256
 * (bench/NOTES.md, the thirty-second session). A kernel of 8 positions a thread, each
 * working out its row's combinations itself, was slower (3.3 ms). */
constexpr int FAST_SMEM = 32 * 1024; /* the last axis's table: kl x ol x 12 bytes at most */

template <typename T, typename I, bool PLANES>
__global__ void __launch_bounds__(32 * ROW_WARPS) resize_interp_fast(const T *__restrict__ x, T *__restrict__ y,
                                                                     I rows, int ncomb, ResizeArgs p, ResizeTables t,
                                                                     int64_t entries) {
    extern __shared__ __align__(16) unsigned char fsm[];
    __shared__ const T *s_ptr[ROW_WARPS][MAXCOMB];
    __shared__ double s_wp[ROW_WARPS][MAXCOMB];
    const int last = p.nd - 1, kl = p.k[last], lane = threadIdx.x, wy = threadIdx.y;
    const int ol = (int)p.out[last];
    const int64_t el = p.tab[last];
    double *s_w = (double *)fsm;           /* [kl][ol] */
    int *s_off = (int *)(s_w + kl * ol);    /* [kl][ol] */
    for (int i = wy * 32 + lane; i < kl * ol; i += 32 * ROW_WARPS) {
        const int u = i / ol, j = i - u * ol;
        s_w[i] = t.w[u * entries + el + j];
        s_off[i] = (int)t.off[u * entries + el + j];
    }
    __syncthreads();
    /* PLANES: only the last two axes move (the others one tap of weight 1 at j * stride:
     * launch_interp checks), so a row is (plane, oh) and its combinations are oh's taps */
    const I oh_n = (I)(p.nd >= 2 ? p.out[p.nd - 2] : 1);
    const int64_t eh = p.nd >= 2 ? p.tab[p.nd - 2] : 0, plane = p.nd >= 2 ? p.in[p.nd - 2] * p.in[last] : 0;
    for (I row = (I)blockIdx.x * ROW_WARPS + wy; row < rows; row += (I)gridDim.x * ROW_WARPS) {
        if constexpr (PLANES) {
            __syncwarp();
            if (lane < ncomb) { /* ncomb = k[nd - 2] */
                const I pl = row / oh_n, oh = row - pl * oh_n;
                s_ptr[wy][lane] = x + (int64_t)pl * plane + t.off[lane * entries + eh + oh];
                s_wp[wy][lane] = t.w[lane * entries + eh + oh];
            }
            __syncwarp();
        } else {
            int64_t e[KILN_MAX_DIMS];
            (void)row_entries<I>(p, t, row, e);
            __syncwarp();
            for (int c = lane; c < ncomb; c += 32) {
                int64_t base;
                combination(p, t, entries, e, c, &base, &s_wp[wy][c]);
                s_ptr[wy][c] = x + base;
            }
            __syncwarp();
        }
        T *yr = y + (int64_t)row * ol;
        for (int j = lane; j < ol; j += 32) {
            int off[KMAX];
            double w[KMAX];
#pragma unroll
            for (int u = 0; u < KMAX; u++) {
                off[u] = u < kl ? s_off[u * ol + j] : 0;
                w[u] = u < kl ? s_w[u * ol + j] : 0;
            }
            double acc = 0;
            for (int c = 0; c < ncomb; c++) {
                const double wp = s_wp[wy][c];
                if (wp == 0) continue;
                const T *xb = s_ptr[wy][c];
                double s = 0;
#pragma unroll
                for (int u = 0; u < KMAX; u++)
                    if (u < kl) s = add(s, mul(w[u], (double)to_f(__ldg(xb + off[u]))));
                acc = add(acc, mul(wp, s));
            }
            yr[j] = from_f<T>((float)acc);
        }
    }
}

/* The tables, then the row kernel (32-bit row indices where they fit). */
struct RowGrid {
    int64_t rows;
    unsigned blocks;
    bool small;
};
kiln_status launch_tables(kiln_cuda *cu, kiln_context *ctx, int64_t n, const ResizeArgs &p, const ResizeTables &t,
                          int64_t entries, RowGrid *g) {
    resize_tables<<<kiln_cuda_blocks(cu, entries, THREADS), THREADS, 0, cu->stream>>>(p, t, entries);
    KILN_CUDA_LAUNCHED(ctx, "resize_tables");
    g->rows = n / p.out[p.nd - 1];
    g->blocks = kiln_cuda_blocks(cu, g->rows, ROW_WARPS);
    g->small = n < ((int64_t)1 << 31); /* rows, the last axis and positions in it all fit */
    return KILN_OK;
}

template <typename E>
kiln_status launch_nearest(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t n, const ResizeArgs &p,
                           const ResizeTables &t, int64_t entries) {
    RowGrid g = {}; /* set by launch_tables on success (gcc -O3 could not see it: -Wmaybe-uninitialized) */
    const kiln_status st = launch_tables(cu, ctx, n, p, t, entries, &g);
    if (st) return st;
    const dim3 block(32, ROW_WARPS);
    if (g.small)
        resize_nearest_rows<E, uint32_t><<<g.blocks, block, 0, cu->stream>>>((const E *)x, (E *)y, (uint32_t)g.rows,
                                                                              p, t, entries);
    else
        resize_nearest_rows<E, int64_t><<<g.blocks, block, 0, cu->stream>>>((const E *)x, (E *)y, g.rows, p, t,
                                                                             entries);
    KILN_CUDA_LAUNCHED(ctx, "resize_nearest_rows");
    return KILN_OK;
}

template <typename T>
kiln_status launch_interp(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t n, const ResizeArgs &p,
                          const ResizeTables &t, int64_t entries) {
    RowGrid g = {};
    const kiln_status st = launch_tables(cu, ctx, n, p, t, entries, &g);
    if (st) return st;
    int ncomb = 1;
    for (int d = 0; d < p.nd - 1; d++) ncomb *= p.k[d];
    /* the last axis's taps in shared memory where no position is outside and they fit, with
     * 32-bit offsets into X (KILN_CUDA_RESIZE_FAST=0: resize_interp_rows) */
    const char *ev = getenv("KILN_CUDA_RESIZE_FAST");
    const int64_t ol = p.out[p.nd - 1];
    const size_t fsm = (size_t)p.k[p.nd - 1] * (size_t)ol * (sizeof(double) + sizeof(int));
    if (p.coord != TF_CROP_AND_RESIZE && ncomb <= MAXCOMB && fsm <= (size_t)FAST_SMEM &&
        p.in[p.nd - 1] < ((int64_t)1 << 30) && !(ev && strcmp(ev, "0") == 0)) {
        /* PLANES: every axis before the last two keeps its length at scale 1 with one tap,
         * which every coordinate mode but tf_crop_and_resize (excluded) maps to j itself: a
         * combination's weight product is then the second-to-last axis's weight alone, as
         * combination() computes it (1 * ... * w), and its offset plane + that tap's */
        bool planes = p.nd >= 2 && ncomb == p.k[p.nd - 2];
        for (int d = 0; d + 2 < p.nd && planes; d++) planes = p.k[d] == 1 && p.out[d] == p.in[d] && p.scale[d] == 1.0;
        const dim3 block(32, ROW_WARPS);
#define KILN_RESIZE_FAST(I, PL, ROWS)                                                                            \
    resize_interp_fast<T, I, PL><<<g.blocks, block, fsm, cu->stream>>>((const T *)x, (T *)y, (I)(ROWS), ncomb, p, t, \
                                                                        entries)
        if (g.small && planes) KILN_RESIZE_FAST(uint32_t, true, g.rows);
        else if (g.small) KILN_RESIZE_FAST(uint32_t, false, g.rows);
        else if (planes) KILN_RESIZE_FAST(int64_t, true, g.rows);
        else KILN_RESIZE_FAST(int64_t, false, g.rows);
#undef KILN_RESIZE_FAST
        KILN_CUDA_LAUNCHED(ctx, "resize_interp_fast");
        return KILN_OK;
    }
    const dim3 block(32, ROW_WARPS);
    if (g.small)
        resize_interp_rows<T, uint32_t><<<g.blocks, block, 0, cu->stream>>>((const T *)x, (T *)y, (uint32_t)g.rows,
                                                                             ncomb, p, t, entries);
    else
        resize_interp_rows<T, int64_t><<<g.blocks, block, 0, cu->stream>>>((const T *)x, (T *)y, g.rows, ncomb, p, t,
                                                                            entries);
    KILN_CUDA_LAUNCHED(ctx, "resize_interp_rows");
    return KILN_OK;
}

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" bool kiln_cuda_resize_check(const kiln_op_ctx *c, kiln_tensor *const *hin, char *why, size_t wn) {
    ResizeArgs p;
    return plan(c, hin, &p, why, wn);
}

extern "C" kiln_status kiln_cuda_k_resize(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (n == 0) return KILN_OK;
    kiln_status st = kiln_cuda_need_host(c);
    if (st) return st;
    ResizeArgs p;
    char why[160];
    if (!plan(c, c->host_in, &p, why, sizeof why)) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "%s", why);
    kiln_strides(x->ndim, x->dims, p.stride);
    const int64_t entries = table_entries(y);
    if (!c->workspace || c->workspace_size < table_bytes(entries))
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "Resize's tables (workspace) are missing");
    for (int64_t d = 0, e = 0; d < p.nd; e += p.out[d], d++) p.tab[d] = e;
    const ResizeTables t = table_layout(c->workspace, entries);
    if (p.mode == NEAREST) {
        kiln_tensor fill;
        memset(&fill, 0, sizeof fill);
        fill.dtype = x->dtype;
        fill.data = &p.extrap_bits;
        kiln_set_f64(&fill, 0, p.extrapolation);
        KILN_CU_SIZE_DISPATCH(st, c->kctx, kiln_dtype_size(x->dtype), launch_nearest, cu, c->kctx, x->data,
                              y->data, n, p, t, entries);
        return st;
    }
    /* one tap on axes where every source coordinate is whole (or extrapolated) */
    const int kmax = p.mode == CUBIC ? 4 : 2;
    for (int d = 0; d < p.nd; d++) {
        bool whole = true;
        for (int64_t j = 0; j < p.out[d] && whole; j++) {
            bool outside;
            const double xo = source_coord(p, d, j, &outside);
            whole = outside || xo == floor(xo);
        }
        p.k[d] = whole ? 1 : kmax;
    }
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_interp, cu, c->kctx, x->data, y->data, n, p, t, entries);
    return st;
}

extern "C" kiln_status kiln_cuda_ws_resize(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    (void)cu;
    *bytes = table_bytes(table_entries(c->out[0]));
    return KILN_OK;
}

/* ------------------------------------------------------------------ kiln.ResizeGrad */
/*
 * kiln.ResizeGrad(dY, X, roi?, scales?, sizes?) with Resize's attributes: the transpose of
 * the resize (src/ops/resize.c's forward_grad). Resize's plan on (X, roi, scales, sizes)
 * with dY as its output; each dY element recomputes the index (nearest) or the taps
 * (linear, cubic: edge-clamped, exclude_outside renormalized, one tap on whole-coordinate
 * axes) exactly as the forward kernels do, and adds dY times each tap combination's weight
 * product into an f32 accumulator with atomicAdd (dX itself for f32, the workspace for
 * f16 / bf16, then rounded once). Extrapolated positions (tf_crop_and_resize outside the
 * roi) contribute nothing. Float dtypes; the order of the adds is not fixed.
 */

namespace {

/* c's inputs from X on, seen as Resize's, with dY as the output. */
struct GradView {
    kiln_op_ctx c;
    kiln_tensor *out;
};
void grad_view(const kiln_op_ctx *c, GradView *v) {
    v->c = *c;
    v->c.in = c->in + 1;
    v->c.n_in = c->n_in - 1;
    v->out = c->in[0];
    v->c.out = &v->out;
    v->c.n_out = 1;
    v->c.host_in = c->host_in ? c->host_in + 1 : NULL;
}

// dy: (p.out); acc: (p.in) f32
template <typename T> __global__ void resize_nearest_grad(const T *dy, float *acc, int64_t n, ResizeArgs p) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        int64_t off;
        if (nearest_source(p, i, &off)) atomicAdd(&acc[off], to_f(dy[i]));
    }
}

template <typename T> __global__ void resize_interp_grad(const T *dy, float *acc, int64_t n, ResizeArgs p) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        int64_t off[KILN_MAX_DIMS][4];
        double w[KILN_MAX_DIMS][4];
        if (!interp_taps(p, i, off, w)) continue;
        const double g = (double)to_f(dy[i]);
        int t[KILN_MAX_DIMS] = {0};
        for (;;) { /* every combination of the axes' taps */
            int64_t at = 0;
            double wp = g;
            for (int d = 0; d < p.nd; d++) {
                at += off[d][t[d]];
                wp *= w[d][t[d]];
            }
            if (wp != 0) atomicAdd(&acc[at], (float)wp);
            int d = p.nd - 1;
            for (; d >= 0; d--) {
                if (++t[d] < p.k[d]) break;
                t[d] = 0;
            }
            if (d < 0) break;
        }
    }
}

template <typename T> __global__ void resize_round(const float *acc, T *y, int64_t n) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) y[i] = from_f<T>(acc[i]);
}

template <typename T>
kiln_status launch_resize_grad(kiln_cuda *cu, kiln_context *ctx, const void *dy, float *acc, void *dx, int64_t n,
                               int64_t nx, const ResizeArgs &p) {
    KILN_CUDA_CHECK(ctx, cudaMemsetAsync(acc, 0, (size_t)nx * sizeof(float), cu->stream));
    if (n > 0) {
        if (p.mode == NEAREST)
            resize_nearest_grad<T><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((const T *)dy, acc,
                                                                                                  n, p);
        else
            resize_interp_grad<T><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((const T *)dy, acc,
                                                                                                 n, p);
        KILN_CUDA_LAUNCHED(ctx, "resize_grad");
    }
    if ((void *)acc != dx) {
        resize_round<T><<<kiln_cuda_blocks(cu, nx, THREADS), THREADS, 0, cu->stream>>>(acc, (T *)dx, nx);
        KILN_CUDA_LAUNCHED(ctx, "resize_round");
    }
    return KILN_OK;
}

} // namespace

extern "C" bool kiln_cuda_resize_grad_check(const kiln_op_ctx *c, kiln_tensor *const *hin, char *why, size_t wn) {
    if (c->n_in < 2 || !c->in[1]) {
        snprintf(why, wn, "inputs dY and X are required");
        return false;
    }
    GradView v;
    grad_view(c, &v);
    ResizeArgs p;
    return plan(&v.c, hin + 1, &p, why, wn);
}

extern "C" kiln_status kiln_cuda_ws_resize_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    (void)cu;
    *bytes = c->out[0]->dtype == KILN_F32 ? 0 : (size_t)kiln_tensor_numel(c->out[0]) * sizeof(float);
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_resize_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0];
    kiln_tensor *dx = c->out[0];
    const int64_t n = kiln_tensor_numel(dy), nx = kiln_tensor_numel(dx);
    if (nx == 0) return KILN_OK;
    kiln_status st = kiln_cuda_need_host(c);
    if (st) return st;
    GradView v;
    grad_view(c, &v);
    ResizeArgs p;
    char why[160];
    if (!plan(&v.c, c->host_in + 1, &p, why, sizeof why)) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "%s", why);
    kiln_strides(dx->ndim, dx->dims, p.stride);
    if (p.mode != NEAREST) { /* the forward's taps per axis */
        const int kmax = p.mode == CUBIC ? 4 : 2;
        for (int d = 0; d < p.nd; d++) {
            bool whole = true;
            for (int64_t j = 0; j < p.out[d] && whole; j++) {
                bool outside;
                const double xo = source_coord(p, d, j, &outside);
                whole = outside || xo == floor(xo);
            }
            p.k[d] = whole ? 1 : kmax;
        }
    }
    float *acc;
    if (dx->dtype == KILN_F32) acc = (float *)dx->data;
    else if (c->workspace && c->workspace_size >= (size_t)nx * sizeof(float)) acc = (float *)c->workspace;
    else return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "ResizeGrad's f32 accumulator (workspace) is missing");
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, dx->dtype, launch_resize_grad, cu, c->kctx, dy->data, acc, dx->data, n, nx, p);
    return st;
}
