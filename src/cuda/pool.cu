/*
 * pool.cu — pooling kernels for f32, f16 and bf16, X (N, C, spatial...) with 1 to 3
 * spatial dims.
 *
 *   MaxPool (Y, or Y and the picks under picks = 1; the Indices output is not supported)
 *   and AveragePool: one thread per
 *   output element, its index math in 32 bits when every index fits (64-bit division is
 *   what bounds these kernels). 2x2 windows of stride 2 with no padding taken (the usual
 *   pooling layer, NCHW): a fixed four-tap kernel, each input row's two taps in one load
 *   when the row length is even and X aligned. Geometry (kernel_shape, strides, dilations, pads, auto_pad, and the
 *   output size infer chose with ceil_mode) comes from kiln_cuda_window_get, the rules of
 *   the CPU reference. Window positions outside the input are skipped; MaxPool lets NaN
 *   through. AveragePool divides by the positions inside the input (count_include_pad=0)
 *   or inside the padded input [-pad_begin, in + pad_end) (count_include_pad=1; positions
 *   a ceil_mode window takes past the end padding do not count, as in ONNX's reference
 *   and PyTorch).
 *
 *   GlobalAveragePool: one block per (n, c) row, a block reduction in float.
 *
 *   NHWC (4-D X): neighbouring threads take neighbouring channels of one output position,
 *   so every tap is a coalesced read. Fast path when C is a multiple of 16 bytes' worth of
 *   elements (8 halves, 4 floats), X and Y are 16-byte aligned and indices fit in 32 bits
 *   (ResNet's stem pool: 64 channels): a thread takes 16 bytes of channels, loads and
 *   stores them as one vector and does its index math in 32 bits. Otherwise (odd channel
 *   counts, offset pointers, huge tensors) one channel per thread with 64-bit indices.
 *   GlobalAveragePool writes Y (N, C, 1, 1), the same bytes in either layout. NHWC with C a
 *   multiple of 16 bytes' worth of elements and X 16-byte aligned (squeeze-excitation's
 *   pools): a block's threads take 16-byte channel groups of one image across a whole row
 *   (up to 256 groups) and split its rows, so a warp reads up to 512 contiguous bytes; where
 *   the images and channel chunks give too few blocks to fill the GPU (8 per SM), the rows
 *   are also split across blocks, each writing its f32 partial sums to the workspace, and a
 *   second kernel adds them in split order (no atomics: the same sums every run).
 *   Otherwise a block sums 32 channels of an image, its rows splitting H*W.
 *
 *   kiln.MaxPoolGrad(dY, X) -> dX: each window's dY goes to the element the forward picks
 *   (the first maximum in row-major tap order, or the first NaN), recomputed from X
 *   exactly as the CPU reference (src/ops/max_pool.c) does. Windows that cannot overlap
 *   (stride >= dilated kernel in every dim, e.g. 2x2 stride 2): one thread per window
 *   writes dY at its pick and 0 at its other taps (dX is zeroed first only when some
 *   input elements lie in no window); 2x2 stride 2 as in the forward, with two-element
 *   loads and stores. Overlapping windows (ResNet's 3x3 stride 2 pad 1): two passes over
 *   a workspace of one byte per window (and channel): pass 1, one thread per window,
 *   stores which tap the forward picks; pass 2, one thread per input element, adds the dY
 *   of each window covering it whose pick it is, windows in ascending order as the
 *   reference adds them: no atomics, the same float sums, X and dY read about once (the
 *   one-pass gather, where each element recomputes the picks of every window covering it,
 *   was ~70x off bandwidth: 20 taps and a dozen 32-bit divisions per element); index
 *   math in 32 bits with multiply-high division. Without the workspace (more than 254
 *   taps per window, indices past 2^30) the one-pass gather remains. NHWC (4-D): the
 *   same ways, one thread per window and channel or per input element, neighbouring
 *   threads on neighbouring channels; 2x2 stride 2 and the two passes with 16 bytes of
 *   channels per thread when C and the pointers allow (pass 1's taps unrolled up to 3x3;
 *   pass 2, where at most two windows cover a pixel along each axis, loads all of them at
 *   once: maxpool_grad_picked_nhwc2).
 *   The forward's picks (MaxPool's picks = 1, src/ops/max_pool.h; the fuse-pool pass in
 *   training graphs): the forward writes pass 1's bytes (NHWC with 16-byte channel groups:
 *   in the same kernel as Y, maxpool_pick_nhwc with Y; else pass 1 after the forward) and
 *   kiln.MaxPoolGrad(dY, X, picks) runs pass 2 alone, whatever the windows: the backward
 *   no longer reads X (ResNet-50's stem pool: 0.33 ms of a 37.6 ms step).
 *
 * Spatial dims are right-aligned into 3 slots; unused leading slots have size 1.
 */
#include "bn_affine.cuh"
#include "dtype.cuh"
#include "fast_div.cuh"
#include "norm_train.h"
#include "reduce.cuh"

#include <string.h>

#include <type_traits>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

/* The geometry in I (int64_t, or int when every index fits: 32-bit division and
 * multiplication are several times cheaper than 64-bit, which these kernels are bound by). */
template <typename I> struct PoolGeoT {
    I in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
};
using PoolGeo = PoolGeoT<int64_t>;
using PoolGeo32 = PoolGeoT<int>;

/* Whether every element index of X (NC planes of in) and Y (total elements), and every
 * window coordinate, fits in an int with a factor 2 spare (window math adds a few such
 * terms); if so, g32 gets the geometry. */
static bool geo_fits32(const PoolGeo &g, int64_t total_in, int64_t total_out, PoolGeo32 *g32) {
    const int64_t lim = 0x3fffffff;
    if (total_in > lim || total_out > lim) return false;
    for (int t = 0; t < 3; t++) {
        const int64_t span = g.out[t] * g.s[t] + g.k[t] * g.d[t] + g.pb[t] + g.pe[t] + g.in[t];
        if (span > lim || g.k[t] > lim || g.s[t] > lim || g.d[t] > lim || g.pb[t] > lim || g.pe[t] > lim)
            return false;
        g32->in[t] = (int)g.in[t];
        g32->out[t] = (int)g.out[t];
        g32->k[t] = (int)g.k[t];
        g32->s[t] = (int)g.s[t];
        g32->d[t] = (int)g.d[t];
        g32->pb[t] = (int)g.pb[t];
        g32->pe[t] = (int)g.pe[t];
    }
    return true;
}

/* A grid-stride loop index in I (I = int: the bound is below 2^30 and the grid stride
 * below 2^31 - 2^30, so i never overflows). */
template <typename I> __device__ __forceinline__ I first_index() {
    return (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x;
}
template <typename I> __device__ __forceinline__ I index_stride() { return (I)gridDim.x * (I)blockDim.x; }

/* The window of output coordinate o along slot t: its first input coordinate, the taps j
 * with 0 <= start + j*d < in as [lo, hi), and how many taps fall inside the padded input
 * [-pad_begin, in + pad_end) (AveragePool's count_include_pad divisor). */
/* Window o's first coordinate along slot t and its taps inside the input, [lo, hi). */
template <typename I>
__device__ __forceinline__ void window_taps(const PoolGeoT<I> &g, int t, I o, I *start, I *lo, I *hi) {
    *start = o * g.s[t] - g.pb[t];
    const I a = *start >= 0 ? 0 : (-*start + g.d[t] - 1) / g.d[t];
    I b = g.in[t] - *start <= 0 ? 0 : (g.in[t] - *start + g.d[t] - 1) / g.d[t];
    if (b > g.k[t]) b = g.k[t];
    *lo = a;
    *hi = b > a ? b : a;
}

/* window_taps, returning how many taps lie inside the padded input (AveragePool's
 * include_pad divisor). */
template <typename I>
__device__ __forceinline__ I window(const PoolGeoT<I> &g, int t, I o, I *start, I *lo, I *hi) {
    window_taps(g, t, o, start, lo, hi);
    I inside_pad = 0;
    for (I j = 0; j < g.k[t]; j++) {
        const I p = *start + j * g.d[t];
        if (p >= -g.pb[t] && p < g.in[t] + g.pe[t]) inside_pad++;
    }
    return inside_pad;
}

template <typename T, bool MAX, typename I>
__global__ void pool_kernel(const T *x, T *y, I total, PoolGeoT<I> g, bool include_pad) {
    const I in_sz = g.in[0] * g.in[1] * g.in[2];
    for (I i = first_index<I>(); i < total; i += index_stride<I>()) {
        I r = i, o[3];
        for (int t = 2; t >= 0; t--) {
            o[t] = r % g.out[t];
            r /= g.out[t];
        }
        const T *xp = x + r * in_sz; /* r is now the (n, c) row */
        I start[3], lo[3], hi[3], padded = 1;
        for (int t = 0; t < 3; t++) padded *= window(g, t, o[t], &start[t], &lo[t], &hi[t]);
        float acc = MAX ? -INFINITY : 0.f;
        I count = 0;
        for (I j0 = lo[0]; j0 < hi[0]; j0++) {
            const I i0 = start[0] + j0 * g.d[0];
            for (I j1 = lo[1]; j1 < hi[1]; j1++) {
                const I i1 = start[1] + j1 * g.d[1];
                const T *row = xp + (i0 * g.in[1] + i1) * g.in[2];
                for (I j2 = lo[2]; j2 < hi[2]; j2++) {
                    const float v = to_f(row[start[2] + j2 * g.d[2]]);
                    if constexpr (MAX) acc = nan_max(acc, v);
                    else acc += v;
                    count++;
                }
            }
        }
        if constexpr (MAX) y[i] = from_f<T>(acc);
        else y[i] = from_f<T>(acc / (float)(include_pad ? padded : count));
    }
}

/* Two neighbouring elements of T in one aligned access (8 bytes of f32, 4 of f16). */
template <typename T> struct alignas(2 * sizeof(T)) Pair {
    T v[2];
};

/* The four taps of the 2x2 window at x[at] (row length W), in row-major tap order. PAIR:
 * each row's two taps in one access (at even, W even, x aligned to a Pair). */
template <typename T, bool PAIR>
__device__ __forceinline__ void load2x2(const T *__restrict__ x, uint32_t at, uint32_t W, float *v) {
    if constexpr (PAIR) {
        const Pair<T> r0 = *reinterpret_cast<const Pair<T> *>(x + at);
        const Pair<T> r1 = *reinterpret_cast<const Pair<T> *>(x + at + W);
        v[0] = to_f(r0.v[0]);
        v[1] = to_f(r0.v[1]);
        v[2] = to_f(r1.v[0]);
        v[3] = to_f(r1.v[1]);
    } else {
        v[0] = to_f(x[at]);
        v[1] = to_f(x[at + 1]);
        v[2] = to_f(x[at + W]);
        v[3] = to_f(x[at + W + 1]);
    }
}

// x: (NC, H, W), y: (NC, OH, OW) with 2*OH <= H and 2*OW <= W: 2x2 windows, stride 2, no
// padding taken, every window inside X (so AveragePool's divisor is 4 either way). The
// fast path of pool_kernel for the usual pooling layer: 32-bit indices, the taps in the
// same order and the same float arithmetic, so the same bits.
template <typename T, bool MAX, bool PAIR>
__global__ void pool2x2_kernel(const T *__restrict__ x, T *__restrict__ y, uint32_t total, uint32_t OH,
                               uint32_t OW, uint32_t H, uint32_t W) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const uint32_t ow = i % OW, r = i / OW, oh = r % OH, nc = r / OH;
        float v[4];
        load2x2<T, PAIR>(x, (nc * H + 2 * oh) * W + 2 * ow, W, v);
        float acc = MAX ? -INFINITY : 0.f;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if constexpr (MAX) acc = nan_max(acc, v[e]);
            else acc += v[e];
        }
        if constexpr (MAX) y[i] = from_f<T>(acc);
        else y[i] = from_f<T>(acc / 4.f);
    }
}

/* Whether pool2x2_kernel (or maxpool_grad_2x2) takes geometry g: 2-D, 2x2 windows of
 * stride 2 and dilation 1 starting at 0, each inside the input, and 32-bit indices. */
static bool is_2x2(const PoolGeo &g, int64_t NC) {
    if (g.in[0] != 1 || g.out[0] != 1) return false;
    for (int t = 1; t < 3; t++)
        if (g.k[t] != 2 || g.s[t] != 2 || g.d[t] != 1 || g.pb[t] != 0 || 2 * g.out[t] > g.in[t]) return false;
    const int64_t lim = 0x3fffffff;
    return NC * g.in[1] * g.in[2] <= lim;
}

/* Whether the 2x2 kernels may read (and write) rows in Pairs. */
template <typename T> static bool pair_ok(const PoolGeo &g, const void *a, const void *b) {
    const uintptr_t al = 2 * sizeof(T);
    return g.in[2] % 2 == 0 && (uintptr_t)a % al == 0 && (uintptr_t)b % al == 0;
}

// x: (N, H, W, C), y: (N, OH, OW, C); 2-D windows in slots 1 and 2. Neighbouring threads
// take neighbouring channels of one output position: every tap is a coalesced read.
template <typename T, bool MAX>
__global__ void pool_nhwc_kernel(const T *x, T *y, int64_t total, int64_t C, PoolGeo g, bool include_pad) {
    for (int64_t i = thread_index(); i < total; i += grid_stride()) {
        const int64_t c = i % C;
        int64_t r = i / C;
        const int64_t ow = r % g.out[2];
        r /= g.out[2];
        const int64_t oh = r % g.out[1], n = r / g.out[1];
        int64_t sh, lh, hh, sw, lw, hw;
        const int64_t padded = window(g, 1, oh, &sh, &lh, &hh) * window(g, 2, ow, &sw, &lw, &hw);
        const T *xp = x + n * g.in[1] * g.in[2] * C + c;
        float acc = MAX ? -INFINITY : 0.f;
        for (int64_t j1 = lh; j1 < hh; j1++) {
            const T *row = xp + (sh + j1 * g.d[1]) * g.in[2] * C;
            for (int64_t j2 = lw; j2 < hw; j2++) {
                const float v = to_f(row[(sw + j2 * g.d[2]) * C]);
                if constexpr (MAX) acc = nan_max(acc, v);
                else acc += v;
            }
        }
        if constexpr (MAX) y[i] = from_f<T>(acc);
        else y[i] = from_f<T>(acc / (float)(include_pad ? padded : (hh - lh) * (hw - lw)));
    }
}

// x: (N, H, W, C), y: (N, OH, OW, C), C a multiple of VEC = 16 / sizeof(T), x and y
// 16-byte aligned, every element index below 2^31. The fast path of pool_nhwc_kernel: a
// thread takes VEC neighbouring channels of one output position (16-byte loads and
// stores; 8 halves or 4 floats) and its index math is 32-bit, the same window rules and
// float accumulation, so the results are the same bits.
template <typename T, bool MAX>
__global__ void pool_nhwc_vec_kernel(const T *__restrict__ x, T *__restrict__ y, uint32_t total, uint32_t CV,
                                     PoolGeo32 g, bool include_pad) {
    using V = typename VecOf<T>::type;
    constexpr int VEC = VecOf<T>::N;
    const V *xv = reinterpret_cast<const V *>(x);
    V *yv = reinterpret_cast<V *>(y);
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const uint32_t cv = i % CV;
        uint32_t r = i / CV;
        const uint32_t ow = r % (uint32_t)g.out[2];
        r /= (uint32_t)g.out[2];
        const uint32_t oh = r % (uint32_t)g.out[1], n = r / (uint32_t)g.out[1];
        int sh, lh, hh, sw, lw, hw, padded = 0;
        if (!MAX && include_pad) { /* the divisor counts taps in the padding: a loop over them */
            padded = window(g, 1, (int)oh, &sh, &lh, &hh) * window(g, 2, (int)ow, &sw, &lw, &hw);
        } else {
            window_taps(g, 1, (int)oh, &sh, &lh, &hh);
            window_taps(g, 2, (int)ow, &sw, &lw, &hw);
        }
        const V *xp = xv + n * (uint32_t)(g.in[1] * g.in[2]) * CV + cv;
        float acc[VEC];
#pragma unroll
        for (int e = 0; e < VEC; e++) acc[e] = MAX ? -INFINITY : 0.f;
        for (int j1 = lh; j1 < hh; j1++) {
            const V *row = xp + (uint32_t)((sh + j1 * g.d[1]) * g.in[2]) * CV;
            for (int j2 = lw; j2 < hw; j2++) {
                const V v = row[(uint32_t)(sw + j2 * g.d[2]) * CV];
#pragma unroll
                for (int e = 0; e < VEC; e++) {
                    const float f = to_f(v.v[e]);
                    if constexpr (MAX) acc[e] = nan_max(acc[e], f);
                    else acc[e] += f;
                }
            }
        }
        const float div = (float)(include_pad ? padded : (hh - lh) * (hw - lw));
        V out;
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            if constexpr (MAX) out.v[e] = from_f<T>(acc[e]);
            else out.v[e] = from_f<T>(acc[e] / div);
        }
        yv[i] = out;
    }
}

/* Whether the NHWC fast path takes these: 2-D windows (slot 0 unused), C a multiple of
 * the vector, aligned pointers, every index within int (geo_fits32). */
template <typename T>
static bool nhwc_vec_ok(const void *x, const void *y, int64_t total, int64_t C, const PoolGeo &g, PoolGeo32 *g32) {
    if (C % VecOf<T>::N != 0 || !aligned16(x, y) || g.in[0] != 1 || g.out[0] != 1) return false;
    const int64_t in_total = total / (g.out[1] * g.out[2] > 0 ? g.out[1] * g.out[2] : 1) * g.in[1] * g.in[2];
    return geo_fits32(g, in_total, total, g32);
}

template <typename T>
kiln_status launch_pool(kiln_cuda *cu, kiln_context *ctx, bool is_max, const void *x, void *y,
                        int64_t total, PoolGeo g, bool include_pad, int64_t nhwc_c) {
    if (total == 0) return KILN_OK;
    const unsigned blocks = kiln_cuda_blocks(cu, total, THREADS);
    const T *xt = (const T *)x;
    T *yt = (T *)y;
    PoolGeo32 g2;
    if (nhwc_c && nhwc_vec_ok<T>(x, y, total, nhwc_c, g, &g2)) {
        const int64_t vec = VecOf<T>::N, tv = total / vec;
        const unsigned vblocks = kiln_cuda_blocks(cu, tv, THREADS);
        if (is_max)
            pool_nhwc_vec_kernel<T, true><<<vblocks, THREADS, 0, cu->stream>>>(xt, yt, (uint32_t)tv,
                                                                               (uint32_t)(nhwc_c / vec), g2, include_pad);
        else
            pool_nhwc_vec_kernel<T, false><<<vblocks, THREADS, 0, cu->stream>>>(xt, yt, (uint32_t)tv,
                                                                                (uint32_t)(nhwc_c / vec), g2, include_pad);
        KILN_CUDA_LAUNCHED(ctx, "pool_nhwc_vec_kernel");
        return KILN_OK;
    }
    if (nhwc_c) {
        if (is_max)
            pool_nhwc_kernel<T, true><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, total, nhwc_c, g, include_pad);
        else
            pool_nhwc_kernel<T, false><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, total, nhwc_c, g, include_pad);
        KILN_CUDA_LAUNCHED(ctx, "pool_nhwc_kernel");
        return KILN_OK;
    }
    const int64_t out_sz = g.out[0] * g.out[1] * g.out[2], NC = total / out_sz;
    if (is_2x2(g, NC)) {
        const uint32_t t32 = (uint32_t)total, OH = (uint32_t)g.out[1], OW = (uint32_t)g.out[2];
        const uint32_t H = (uint32_t)g.in[1], W = (uint32_t)g.in[2];
        const bool pair = pair_ok<T>(g, x, x);
        if (is_max && pair)
            pool2x2_kernel<T, true, true><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, t32, OH, OW, H, W);
        else if (is_max)
            pool2x2_kernel<T, true, false><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, t32, OH, OW, H, W);
        else if (pair)
            pool2x2_kernel<T, false, true><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, t32, OH, OW, H, W);
        else
            pool2x2_kernel<T, false, false><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, t32, OH, OW, H, W);
        KILN_CUDA_LAUNCHED(ctx, "pool2x2_kernel");
        return KILN_OK;
    }
    PoolGeo32 g32;
    if (geo_fits32(g, NC * g.in[0] * g.in[1] * g.in[2], total, &g32)) {
        if (is_max)
            pool_kernel<T, true, int><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, (int)total, g32, include_pad);
        else
            pool_kernel<T, false, int><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, (int)total, g32, include_pad);
    } else if (is_max) {
        pool_kernel<T, true, int64_t><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, total, g, include_pad);
    } else {
        pool_kernel<T, false, int64_t><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, total, g, include_pad);
    }
    KILN_CUDA_LAUNCHED(ctx, "pool_kernel");
    return KILN_OK;
}

kiln_status pool_geo(kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *y, PoolGeo *g);
bool pool_geo_why(kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *y, PoolGeo *g, char *why, size_t n);

kiln_status pool(kiln_cuda *cu, kiln_op_ctx *c, bool is_max) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    PoolGeo g;
    kiln_status gst = pool_geo(c, x, y, &g);
    if (gst) return gst;
    const bool include_pad = !is_max && kiln_attr_int(c->node, "count_include_pad", 0) != 0;
    /* an NHWC X is 4-D: its two spatial dims are in slots 1 and 2 */
    const int64_t nhwc_c = x->ndim == 4 && x->format == KILN_FORMAT_NHWC ? x->dims[1] : 0;
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_pool, cu, c->kctx, is_max, x->data,
                           y->data, kiln_tensor_numel(y), g, include_pad, nhwc_c);
    return st;
}

/* ------------------------------------------------------------------ MaxPoolGrad */

/* The offset in its (n, c) plane of the element window o picks, or -1 for a window with
 * no tap inside the input. */
template <typename T, typename I>
__device__ I window_pick(const T *xp, const PoolGeoT<I> &g, const I *o) {
    I st[3], lo[3], hi[3];
    for (int t = 0; t < 3; t++) {
        window_taps(g, t, o[t], &st[t], &lo[t], &hi[t]);
        if (lo[t] == hi[t]) return -1;
    }
    I at = ((st[0] + lo[0] * g.d[0]) * g.in[1] + st[1] + lo[1] * g.d[1]) * g.in[2] + st[2] + lo[2] * g.d[2];
    float best = to_f(xp[at]);
    bool nan = best != best;
    for (I j0 = lo[0]; j0 < hi[0]; j0++)
        for (I j1 = lo[1]; j1 < hi[1]; j1++) {
            const I row = ((st[0] + j0 * g.d[0]) * g.in[1] + st[1] + j1 * g.d[1]) * g.in[2] + st[2];
            for (I j2 = lo[2]; j2 < hi[2]; j2++) {
                const I off = row + j2 * g.d[2];
                const float v = to_f(xp[off]);
                const bool take = v > best || (v != v && !nan);
                if (take) {
                    best = v;
                    at = off;
                }
                nan |= v != v;
            }
        }
    return at;
}

// dy: (NC, out...); x, dx: (NC, in...). One thread per window; windows do not overlap.
template <typename T, typename I>
__global__ void maxpool_grad_windows(const T *dy, const T *x, T *dx, I total, PoolGeoT<I> g) {
    const I in_sz = g.in[0] * g.in[1] * g.in[2];
    for (I i = first_index<I>(); i < total; i += index_stride<I>()) {
        I r = i, o[3];
        for (int t = 2; t >= 0; t--) {
            o[t] = r % g.out[t];
            r /= g.out[t];
        }
        const T *xp = x + r * in_sz;
        T *dxp = dx + r * in_sz;
        const I at = window_pick(xp, g, o);
        if (at < 0) continue;
        const T v = dy[i], zero = from_f<T>(0.f);
        I st[3], lo[3], hi[3];
        for (int t = 0; t < 3; t++) window_taps(g, t, o[t], &st[t], &lo[t], &hi[t]);
        for (I j0 = lo[0]; j0 < hi[0]; j0++)
            for (I j1 = lo[1]; j1 < hi[1]; j1++) {
                const I row = ((st[0] + j0 * g.d[0]) * g.in[1] + st[1] + j1 * g.d[1]) * g.in[2] + st[2];
                for (I j2 = lo[2]; j2 < hi[2]; j2++) {
                    const I off = row + j2 * g.d[2];
                    dxp[off] = off == at ? v : zero;
                }
            }
    }
}

// dy: (NC, out...); x, dx: (NC, in...). One thread per input element.
template <typename T, typename I>
__global__ void maxpool_grad_gather(const T *dy, const T *x, T *dx, I total, PoolGeoT<I> g) {
    const I in_sz = g.in[0] * g.in[1] * g.in[2], out_sz = g.out[0] * g.out[1] * g.out[2];
    for (I e = first_index<I>(); e < total; e += index_stride<I>()) {
        const I nc = e / in_sz, me = e % in_sz;
        const I p[3] = {me / (g.in[1] * g.in[2]), (me / g.in[2]) % g.in[1], me % g.in[2]};
        const T *xp = x + nc * in_sz;
        const T *dyp = dy + nc * out_sz;
        float acc = 0.f;
        /* windows o containing p: o*s - pb + j*d == p; j from the last tap down gives
         * ascending o */
        I o[3];
        for (I j0 = g.k[0] - 1; j0 >= 0; j0--) {
            const I q0 = p[0] + g.pb[0] - j0 * g.d[0];
            if (q0 < 0 || q0 % g.s[0] || (o[0] = q0 / g.s[0]) >= g.out[0]) continue;
            for (I j1 = g.k[1] - 1; j1 >= 0; j1--) {
                const I q1 = p[1] + g.pb[1] - j1 * g.d[1];
                if (q1 < 0 || q1 % g.s[1] || (o[1] = q1 / g.s[1]) >= g.out[1]) continue;
                for (I j2 = g.k[2] - 1; j2 >= 0; j2--) {
                    const I q2 = p[2] + g.pb[2] - j2 * g.d[2];
                    if (q2 < 0 || q2 % g.s[2] || (o[2] = q2 / g.s[2]) >= g.out[2]) continue;
                    if (window_pick(xp, g, o) == me) acc += to_f(dyp[(o[0] * g.out[1] + o[1]) * g.out[2] + o[2]]);
                }
            }
        }
        dx[e] = from_f<T>(acc);
    }
}

/* Store a, b at dx[at], dx[at + 1] (one Pair access when PAIR). */
template <typename T, bool PAIR> __device__ __forceinline__ void store2(T *__restrict__ dx, uint32_t at, T a, T b) {
    if constexpr (PAIR) {
        Pair<T> p;
        p.v[0] = a;
        p.v[1] = b;
        *reinterpret_cast<Pair<T> *>(dx + at) = p;
    } else {
        dx[at] = a;
        dx[at + 1] = b;
    }
}

// dy: (NC, OH, OW); x, dx: (NC, H, W); the geometry of pool2x2_kernel. One thread per
// window: it picks as window_pick does (the first maximum in row-major tap order, or the
// first NaN) and writes all four taps, dY at the pick and 0 elsewhere.
template <typename T, bool PAIR>
__global__ void maxpool_grad_2x2(const T *__restrict__ dy, const T *__restrict__ x, T *__restrict__ dx,
                                 uint32_t total, uint32_t OH, uint32_t OW, uint32_t H, uint32_t W) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const uint32_t ow = i % OW, r = i / OW, oh = r % OH, nc = r / OH;
        const uint32_t at = (nc * H + 2 * oh) * W + 2 * ow;
        float v[4];
        load2x2<T, PAIR>(x, at, W, v);
        int pick = 0;
        float best = v[0];
        bool nan = best != best;
#pragma unroll
        for (int e = 1; e < 4; e++) {
            if (v[e] > best || (v[e] != v[e] && !nan)) {
                best = v[e];
                pick = e;
            }
            nan |= v[e] != v[e];
        }
        const T g = dy[i], zero = from_f<T>(0.f);
        store2<T, PAIR>(dx, at, pick == 0 ? g : zero, pick == 1 ? g : zero);
        store2<T, PAIR>(dx, at + W, pick == 2 ? g : zero, pick == 3 ? g : zero);
    }
}

/* The spatial offset h*W + w of the element window (oh, ow) picks for one channel of an
 * NHWC image (xp: the image's first element of that channel, C apart), by window_pick's
 * rule; -1 for a window with no tap inside the input. 2-D: slots 1 and 2. */
template <typename T>
__device__ int64_t window_pick_nhwc(const T *xp, const PoolGeo &g, int64_t C, int64_t oh, int64_t ow) {
    int64_t sh, lh, hh, sw, lw, hw;
    window_taps(g, 1, oh, &sh, &lh, &hh);
    window_taps(g, 2, ow, &sw, &lw, &hw);
    if (lh == hh || lw == hw) return -1;
    int64_t at = (sh + lh * g.d[1]) * g.in[2] + sw + lw * g.d[2];
    float best = to_f(xp[at * C]);
    bool nan = best != best;
    for (int64_t j1 = lh; j1 < hh; j1++) {
        const int64_t row = (sh + j1 * g.d[1]) * g.in[2] + sw;
        for (int64_t j2 = lw; j2 < hw; j2++) {
            const int64_t off = row + j2 * g.d[2];
            const float v = to_f(xp[off * C]);
            if (v > best || (v != v && !nan)) {
                best = v;
                at = off;
            }
            nan |= v != v;
        }
    }
    return at;
}

// dy: (N, OH, OW, C); x, dx: (N, H, W, C). One thread per window and channel (neighbouring
// threads: neighbouring channels, coalesced); windows do not overlap.
template <typename T>
__global__ void maxpool_grad_nhwc_windows(const T *dy, const T *x, T *dx, int64_t total, int64_t C, PoolGeo g) {
    const int64_t plane = g.in[1] * g.in[2] * C;
    for (int64_t i = thread_index(); i < total; i += grid_stride()) {
        const int64_t c = i % C;
        int64_t r = i / C;
        const int64_t ow = r % g.out[2];
        r /= g.out[2];
        const int64_t oh = r % g.out[1], n = r / g.out[1];
        const T *xp = x + n * plane + c;
        T *dxp = dx + n * plane + c;
        const int64_t at = window_pick_nhwc(xp, g, C, oh, ow);
        if (at < 0) continue;
        const T v = dy[i], zero = from_f<T>(0.f);
        int64_t sh, lh, hh, sw, lw, hw;
        window_taps(g, 1, oh, &sh, &lh, &hh);
        window_taps(g, 2, ow, &sw, &lw, &hw);
        for (int64_t j1 = lh; j1 < hh; j1++) {
            const int64_t row = (sh + j1 * g.d[1]) * g.in[2] + sw;
            for (int64_t j2 = lw; j2 < hw; j2++) {
                const int64_t off = row + j2 * g.d[2];
                dxp[off * C] = off == at ? v : zero;
            }
        }
    }
}

// dy: (N, OH, OW, C); x, dx: (N, H, W, C). One thread per input element: the dY of every
// window that picked it, windows in ascending order (maxpool_grad_gather's sums).
template <typename T>
__global__ void maxpool_grad_nhwc_gather(const T *dy, const T *x, T *dx, int64_t total, int64_t C, PoolGeo g) {
    const int64_t plane = g.in[1] * g.in[2] * C, oplane = g.out[1] * g.out[2] * C;
    for (int64_t e = thread_index(); e < total; e += grid_stride()) {
        const int64_t c = e % C;
        int64_t r = e / C;
        const int64_t w = r % g.in[2];
        r /= g.in[2];
        const int64_t h = r % g.in[1], n = r / g.in[1];
        const T *xp = x + n * plane + c;
        const T *dyp = dy + n * oplane + c;
        const int64_t me = h * g.in[2] + w;
        float acc = 0.f;
        for (int64_t j1 = g.k[1] - 1; j1 >= 0; j1--) {
            const int64_t q1 = h + g.pb[1] - j1 * g.d[1];
            int64_t o1;
            if (q1 < 0 || q1 % g.s[1] || (o1 = q1 / g.s[1]) >= g.out[1]) continue;
            for (int64_t j2 = g.k[2] - 1; j2 >= 0; j2--) {
                const int64_t q2 = w + g.pb[2] - j2 * g.d[2];
                int64_t o2;
                if (q2 < 0 || q2 % g.s[2] || (o2 = q2 / g.s[2]) >= g.out[2]) continue;
                if (window_pick_nhwc(xp, g, C, o1, o2) == me) acc += to_f(dyp[(o1 * g.out[2] + o2) * C]);
            }
        }
        dx[e] = from_f<T>(acc);
    }
}

// dy: (N, OH, OW, C); x, dx: (N, H, W, C); 2x2 windows of stride 2 (is_2x2), C a multiple
// of VEC = 16 / sizeof(T), every pointer 16-byte aligned, indices below 2^31: a thread
// takes VEC channels of one window, with 16-byte loads and stores and 32-bit index math,
// and picks per channel as window_pick does.
template <typename T>
__global__ void maxpool_grad_2x2_nhwc_vec(const T *__restrict__ dy, const T *__restrict__ x, T *__restrict__ dx,
                                          uint32_t total, uint32_t CV, uint32_t OH, uint32_t OW, uint32_t H,
                                          uint32_t W) {
    using V = typename VecOf<T>::type;
    constexpr int VEC = VecOf<T>::N;
    const V *xv = reinterpret_cast<const V *>(x);
    const V *dyv = reinterpret_cast<const V *>(dy);
    V *dxv = reinterpret_cast<V *>(dx);
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const uint32_t cv = i % CV;
        uint32_t r = i / CV;
        const uint32_t ow = r % OW;
        r /= OW;
        const uint32_t oh = r % OH, n = r / OH;
        const uint32_t at[4] = {((n * H + 2 * oh) * W + 2 * ow) * CV + cv, ((n * H + 2 * oh) * W + 2 * ow + 1) * CV + cv,
                                ((n * H + 2 * oh + 1) * W + 2 * ow) * CV + cv,
                                ((n * H + 2 * oh + 1) * W + 2 * ow + 1) * CV + cv};
        V v[4];
#pragma unroll
        for (int t = 0; t < 4; t++) v[t] = xv[at[t]];
        const V g = dyv[i];
        V out[4];
        const T zero = from_f<T>(0.f);
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            int pick = 0;
            float best = to_f(v[0].v[e]);
            bool nan = best != best;
#pragma unroll
            for (int t = 1; t < 4; t++) {
                const float f = to_f(v[t].v[e]);
                if (f > best || (f != f && !nan)) {
                    best = f;
                    pick = t;
                }
                nan |= f != f;
            }
#pragma unroll
            for (int t = 0; t < 4; t++) out[t].v[e] = t == pick ? g.v[e] : zero;
        }
#pragma unroll
        for (int t = 0; t < 4; t++) dxv[at[t]] = out[t];
    }
}

/* ----------------------------------- MaxPoolGrad in two passes (overlapping windows) */

/* The geometry in int (geo_fits32) with dividers for the output sizes, input sizes and
 * strides. */
struct PickGeo {
    int in[3], out[3], k[3], s[3], d[3], pb[3];
    FastDiv ind[3], outd[3], sd[3];
};

/* The pick of an empty window (none is: a window covering no input element is never read). */
constexpr uint8_t NO_PICK = 255;

/* Whether the two-pass path takes g: a window's taps numbered in a byte, every index in
 * 32 bits; pg gets the geometry. */
static bool pick_geo(const PoolGeo &g, int64_t total_in, int64_t total_out, PickGeo *pg) {
    PoolGeo32 g32;
    if (g.k[0] * g.k[1] * g.k[2] >= NO_PICK || !geo_fits32(g, total_in, total_out, &g32)) return false;
    for (int t = 0; t < 3; t++) {
        pg->in[t] = g32.in[t];
        pg->out[t] = g32.out[t];
        pg->k[t] = g32.k[t];
        pg->s[t] = g32.s[t];
        pg->d[t] = g32.d[t];
        pg->pb[t] = g32.pb[t];
        pg->ind[t] = fast_div((uint32_t)(g32.in[t] > 0 ? g32.in[t] : 1));
        pg->outd[t] = fast_div((uint32_t)(g32.out[t] > 0 ? g32.out[t] : 1));
        pg->sd[t] = fast_div((uint32_t)g32.s[t]);
    }
    return true;
}

/* window_taps for PickGeo: window o's first coordinate along slot t and its taps inside
 * the input [lo, hi), with no division when the dilation is 1. */
__device__ __forceinline__ void pick_taps(const PickGeo &g, int t, int o, int *start, int *lo, int *hi) {
    const int st = o * g.s[t] - g.pb[t], d = g.d[t];
    int a, b;
    if (d == 1) {
        a = st >= 0 ? 0 : -st;
        b = g.in[t] - st;
    } else {
        a = st >= 0 ? 0 : (-st + d - 1) / d;
        b = g.in[t] - st <= 0 ? 0 : (g.in[t] - st + d - 1) / d;
    }
    if (b > g.k[t]) b = g.k[t];
    *start = st;
    *lo = a;
    *hi = b > a ? b : a;
}

/* The windows along slot t whose taps include coordinate p (0 <= p < in): o in [lo, hi]
 * (empty when lo > hi); window o takes p as its tap (p + pb - o*s) / d when d divides it. */
__device__ __forceinline__ void covering(const PickGeo &g, int t, int p, int *lo, int *hi) {
    const int q = p + g.pb[t];
    int h = (int)fdiv((uint32_t)q, g.sd[t]);
    if (h > g.out[t] - 1) h = g.out[t] - 1;
    const int ql = q - (g.k[t] - 1) * g.d[t];
    *lo = ql <= 0 ? 0 : (int)fdiv((uint32_t)(ql + g.s[t] - 1), g.sd[t]);
    *hi = h;
}

/* Window o's tap along slot t holding p, or -1 when its taps step over p (dilations). */
__device__ __forceinline__ int tap_of(const PickGeo &g, int t, int p, int o) {
    const int q = p + g.pb[t] - o * g.s[t];
    if (g.d[t] == 1) return q;
    return q % g.d[t] ? -1 : q / g.d[t];
}

// x: (NC, in...); pick: (NC, out...). Pass 1: one thread per window; pick = the tap
// (j0*k1 + j1)*k2 + j2 the forward takes (window_pick's rule: the first maximum in
// row-major tap order, or the first NaN), NO_PICK for a window with no tap inside X.
template <typename T>
__global__ void maxpool_pick(const T *__restrict__ x, uint8_t *__restrict__ pick, uint32_t total, PickGeo g) {
    const uint32_t in_sz = (uint32_t)(g.in[0] * g.in[1] * g.in[2]);
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        uint32_t r = i;
        int o[3];
        for (int t = 2; t >= 0; t--) {
            const uint32_t q = fdiv(r, g.outd[t]);
            o[t] = (int)(r - q * (uint32_t)g.out[t]);
            r = q;
        }
        const T *xp = x + r * in_sz;
        int st[3], lo[3], hi[3];
        bool empty = false;
        for (int t = 0; t < 3; t++) {
            pick_taps(g, t, o[t], &st[t], &lo[t], &hi[t]);
            empty |= lo[t] == hi[t];
        }
        int at = NO_PICK;
        if (!empty) {
            float best = to_f(xp[((st[0] + lo[0] * g.d[0]) * g.in[1] + st[1] + lo[1] * g.d[1]) * g.in[2] + st[2] +
                                 lo[2] * g.d[2]]);
            bool nan = best != best;
            at = (lo[0] * g.k[1] + lo[1]) * g.k[2] + lo[2];
            for (int j0 = lo[0]; j0 < hi[0]; j0++)
                for (int j1 = lo[1]; j1 < hi[1]; j1++) {
                    const int row = ((st[0] + j0 * g.d[0]) * g.in[1] + st[1] + j1 * g.d[1]) * g.in[2] + st[2];
                    for (int j2 = lo[2]; j2 < hi[2]; j2++) {
                        const float v = to_f(xp[row + j2 * g.d[2]]); /* row + j2*d >= 0: a tap inside X */
                        if (v > best || (v != v && !nan)) {
                            best = v;
                            at = (j0 * g.k[1] + j1) * g.k[2] + j2;
                        }
                        nan |= v != v;
                    }
                }
        }
        pick[i] = (uint8_t)at;
    }
}

// dy, pick: (NC, out...); dx: (NC, in...). Pass 2: one thread per element of dX, the dY of
// every window whose pick it is, windows in ascending order as the reference adds them
// (a float sum from 0, rounded once: the same bits); each dY read once.
template <typename T>
__global__ void maxpool_grad_picked(const T *__restrict__ dy, const uint8_t *__restrict__ pick, T *__restrict__ dx,
                                    uint32_t total, PickGeo g) {
    const uint32_t out_sz = (uint32_t)(g.out[0] * g.out[1] * g.out[2]);
    for (uint32_t e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        uint32_t r = e;
        int p[3], lo[3], hi[3];
        for (int t = 2; t >= 0; t--) {
            const uint32_t q = fdiv(r, g.ind[t]);
            p[t] = (int)(r - q * (uint32_t)g.in[t]);
            r = q;
        }
        for (int t = 0; t < 3; t++) covering(g, t, p[t], &lo[t], &hi[t]);
        const T *dyp = dy + r * out_sz;
        const uint8_t *pp = pick + r * out_sz;
        float acc = 0.f;
        for (int o0 = lo[0]; o0 <= hi[0]; o0++) {
            const int j0 = tap_of(g, 0, p[0], o0);
            if (j0 < 0) continue;
            for (int o1 = lo[1]; o1 <= hi[1]; o1++) {
                const int j1 = tap_of(g, 1, p[1], o1);
                if (j1 < 0) continue;
                const int row = (o0 * g.out[1] + o1) * g.out[2], tap = (j0 * g.k[1] + j1) * g.k[2];
                for (int o2 = lo[2]; o2 <= hi[2]; o2++) {
                    const int j2 = tap_of(g, 2, p[2], o2);
                    if (j2 >= 0 && pp[row + o2] == tap + j2) acc += to_f(dyp[row + o2]);
                }
            }
        }
        dx[e] = from_f<T>(acc);
    }
}

/* VEC neighbouring channels of T, and their picks, in one access each. */
template <typename T, int VEC> struct alignas(sizeof(T) * VEC) Lanes {
    T v[VEC];
};
template <int VEC> struct alignas(VEC) PickLanes {
    uint8_t v[VEC];
};

/* The picks of VEC neighbouring channels of one 2-D window, and in best the values picked (0
 * for a window with no tap inside X) (maxpool_pick's rule per
 * channel: the first maximum in row-major tap order, or the first NaN): xp points at the
 * window's image and channel group (in Lanes), rows in[2] * CV Lanes apart; sh, sw the
 * window's first coordinates, [lh, hh) x [lw, hw) its taps inside X (pick_taps). KT > 0:
 * windows of at most KT x KT taps, unrolled, every tap's load issued before any is
 * compared (the loop form waits for each load in turn); KT = 0: any window. */
template <typename T, int VEC, int KT>
__device__ __forceinline__ PickLanes<VEC> window_pick_lanes(const Lanes<T, VEC> *xp, uint32_t CV, const PickGeo &g,
                                                            int sh, int lh, int hh, int sw, int lw, int hw,
                                                            float (&best)[VEC]) {
    using L = Lanes<T, VEC>;
    PickLanes<VEC> out;
    bool nan[VEC];
#pragma unroll
    for (int e = 0; e < VEC; e++) {
        out.v[e] = NO_PICK;
        best[e] = 0.f;
        nan[e] = false;
    }
    bool have = false; /* the first tap inside X is taken whatever its value */
    auto take = [&](const L &v, int j1, int j2) {
        const uint8_t tap = (uint8_t)(j1 * g.k[2] + j2);
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            const float f = to_f(v.v[e]);
            const bool t = !have || f > best[e] || (f != f && !nan[e]);
            best[e] = t ? f : best[e];
            out.v[e] = t ? tap : out.v[e];
            nan[e] |= f != f;
        }
        have = true;
    };
    if constexpr (KT > 0) {
        L v[KT][KT];
#pragma unroll
        for (int j1 = 0; j1 < KT; j1++)
#pragma unroll
            for (int j2 = 0; j2 < KT; j2++)
                if (j1 >= lh && j1 < hh && j2 >= lw && j2 < hw)
                    v[j1][j2] = xp[(uint32_t)((sh + j1 * g.d[1]) * g.in[2] + sw + j2 * g.d[2]) * CV];
#pragma unroll
        for (int j1 = 0; j1 < KT; j1++)
#pragma unroll
            for (int j2 = 0; j2 < KT; j2++)
                if (j1 >= lh && j1 < hh && j2 >= lw && j2 < hw) take(v[j1][j2], j1, j2);
    } else {
        for (int j1 = lh; j1 < hh; j1++) {
            const int row = (sh + j1 * g.d[1]) * g.in[2] + sw; /* sw may be negative */
            for (int j2 = lw; j2 < hw; j2++) take(xp[(uint32_t)(row + j2 * g.d[2]) * CV], j1, j2);
        }
    }
    return out;
}

/* kiln.BnReluMaxPool's coefficients (a, m, k) of a thread's 8 channels (bn_affine). */
struct BnLanes {
    float a[8], m[8], k[8];
};

/* window_pick_lanes for 8 f16 lanes and windows of at most KT x KT taps (KT > 0), in
 * packed half2 arithmetic: the maximum first (__hmax2_nan: NaN wins), then the taps in
 * reverse order, each lane taking a tap whose value equals its maximum or is NaN, so the
 * first such tap is the last taken: the first maximum (-0 and +0 equal, as `>` sees them),
 * or the first NaN where the maximum is NaN (no lane's value equals a NaN) — window_pick's
 * rule, in about a third of the instructions the per-lane float compares take. m gets
 * the maxima (-inf for a window with no tap inside X). BNP: the taps are first replaced
 * by T(Relu(bn_affine(x))) with bn's coefficients (kiln.BnReluMaxPool). */
template <int KT, bool BNP = false>
__device__ __forceinline__ PickLanes<8> window_pick_h8(const Lanes<__half, 8> *xp, uint32_t CV, const PickGeo &g,
                                                       int sh, int lh, int hh, int sw, int lw, int hw, __half2 (&m)[4],
                                                       const BnLanes *bn = nullptr) {
    uint4 v[KT][KT];
#pragma unroll
    for (int j1 = 0; j1 < KT; j1++)
#pragma unroll
        for (int j2 = 0; j2 < KT; j2++)
            if (j1 >= lh && j1 < hh && j2 >= lw && j2 < hw)
                v[j1][j2] = *reinterpret_cast<const uint4 *>(
                    xp + (uint32_t)((sh + j1 * g.d[1]) * g.in[2] + sw + j2 * g.d[2]) * CV);
    if constexpr (BNP) { /* kiln.BnReluMaxPool: each tap the BN's Y with relu = 1 (bn_affine.cuh) */
        const __half2 zero = __float2half2_rn(0.f);
#pragma unroll
        for (int j1 = 0; j1 < KT; j1++)
#pragma unroll
            for (int j2 = 0; j2 < KT; j2++)
                if (j1 >= lh && j1 < hh && j2 >= lw && j2 < hw) {
                    __half2 *h = reinterpret_cast<__half2 *>(&v[j1][j2]);
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        const float2 f = __half22float2(h[q]);
                        const int e = 2 * q;
                        /* __hmax2 takes the number over a NaN: Relu's NaN -> 0 */
                        h[q] = __hmax2(__floats2half2_rn(bn_affine(f.x, bn->a[e], bn->m[e], bn->k[e]),
                                                         bn_affine(f.y, bn->a[e + 1], bn->m[e + 1], bn->k[e + 1])),
                                       zero);
                    }
                }
    }
    const __half2 ninf = __halves2half2(__ushort_as_half(0xfc00), __ushort_as_half(0xfc00));
#pragma unroll
    for (int q = 0; q < 4; q++) m[q] = ninf;
#pragma unroll
    for (int j1 = 0; j1 < KT; j1++)
#pragma unroll
        for (int j2 = 0; j2 < KT; j2++)
            if (j1 >= lh && j1 < hh && j2 >= lw && j2 < hw) {
                const __half2 *h = reinterpret_cast<const __half2 *>(&v[j1][j2]);
#pragma unroll
                for (int q = 0; q < 4; q++) m[q] = __hmax2_nan(m[q], h[q]);
            }
    uint32_t p[4]; /* lanes 2q and 2q+1 as 16-bit picks */
#pragma unroll
    for (int q = 0; q < 4; q++) p[q] = NO_PICK | (uint32_t)NO_PICK << 16;
#pragma unroll
    for (int j1 = KT - 1; j1 >= 0; j1--)
#pragma unroll
        for (int j2 = KT - 1; j2 >= 0; j2--)
            if (j1 >= lh && j1 < hh && j2 >= lw && j2 < hw) {
                const uint32_t tap = (uint32_t)(j1 * g.k[2] + j2), tap2 = tap | tap << 16;
                const __half2 *h = reinterpret_cast<const __half2 *>(&v[j1][j2]);
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const uint32_t hit = __heq2_mask(h[q], m[q]) | __hneu2_mask(h[q], h[q]);
                    p[q] = (p[q] & ~hit) | (tap2 & hit);
                }
            }
    PickLanes<8> out;
    uint32_t *w = reinterpret_cast<uint32_t *>(out.v);
    w[0] = __byte_perm(p[0], p[1], 0x6420);
    w[1] = __byte_perm(p[2], p[3], 0x6420);
    return out;
}

// x: (N, H, W, C); pick: (N, OH, OW, C); 2-D windows in slots 1 and 2. Pass 1 in NHWC: a
// thread takes VEC neighbouring channels of one window (CV = C / VEC groups), one load
// per tap for all of them (window_pick_lanes; KT as there).
// With y (N, OH, OW, C; WITH_Y): MaxPool's forward with its picks (picks = 1), each window's
// maximum the value picked (the first NaN where there is one), -inf for a window with no tap
// inside X, as pool_nhwc_vec_kernel writes it.
// BNP (f16, VEC 8, KT > 0): kiln.BnReluMaxPool, the pool over the BN's Y recomputed from x
// with the coefficients mc (3, C): a, m, k (kiln_cuda_bn_fwd_coef).
template <typename T, int VEC, int KT, bool WITH_Y = false, bool BNP = false>
__global__ void maxpool_pick_nhwc(const T *__restrict__ x, uint8_t *__restrict__ pick, uint32_t total, uint32_t CV,
                                  FastDiv cvd, PickGeo g, T *__restrict__ y = nullptr,
                                  const float *__restrict__ mc = nullptr) {
    using L = Lanes<T, VEC>;
    const L *xv = reinterpret_cast<const L *>(x);
    PickLanes<VEC> *pv = reinterpret_cast<PickLanes<VEC> *>(pick);
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        uint32_t r = fdiv(i, cvd);
        const uint32_t cv = i - r * CV;
        uint32_t q = fdiv(r, g.outd[2]);
        const int ow = (int)(r - q * (uint32_t)g.out[2]);
        r = fdiv(q, g.outd[1]);
        const int oh = (int)(q - r * (uint32_t)g.out[1]); /* r: the image */
        int sh, lh, hh, sw, lw, hw;
        pick_taps(g, 1, oh, &sh, &lh, &hh);
        pick_taps(g, 2, ow, &sw, &lw, &hw);
        const L *xw = xv + r * (uint32_t)(g.in[1] * g.in[2]) * CV + cv;
        if constexpr (std::is_same<T, __half>::value && VEC == 8 && KT > 0) {
            __half2 m[4];
            if constexpr (BNP) {
                BnLanes bn;
                const uint32_t C = CV * 8, c0 = cv * 8;
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    bn.a[e] = mc[c0 + e];
                    bn.m[e] = mc[C + c0 + e];
                    bn.k[e] = mc[2 * C + c0 + e];
                }
                pv[i] = window_pick_h8<KT, true>(xw, CV, g, sh, lh, hh, sw, lw, hw, m, &bn);
            } else {
                pv[i] = window_pick_h8<KT>(xw, CV, g, sh, lh, hh, sw, lw, hw, m);
            }
            if constexpr (WITH_Y) {
                uint32_t u[4];
#pragma unroll
                for (int q = 0; q < 4; q++) u[q] = *reinterpret_cast<const uint32_t *>(&m[q]);
                reinterpret_cast<uint4 *>(y)[i] = make_uint4(u[0], u[1], u[2], u[3]);
            }
        } else {
            static_assert(!BNP, "the BN prologue is the f16 kernel's");
            float best[VEC];
            pv[i] = window_pick_lanes<T, VEC, KT>(xw, CV, g, sh, lh, hh, sw, lw, hw, best);
            if constexpr (WITH_Y) {
                const bool empty = lh == hh || lw == hw;
                L out;
#pragma unroll
                for (int e = 0; e < VEC; e++) out.v[e] = from_f<T>(empty ? -INFINITY : best[e]);
                reinterpret_cast<L *>(y)[i] = out;
            }
        }
    }
}

/* Element group i of dX (N, H, W, C) in CV groups of lanes: its group cv, image r, pixel
 * (h, w), and the windows covering it, [lh, hh] x [lw, hw] (covering). */
__device__ __forceinline__ void dx_element(uint32_t i, uint32_t CV, const FastDiv &cvd, const PickGeo &g, uint32_t *cv,
                                           uint32_t *r, int *h, int *w, int *lh, int *hh, int *lw, int *hw) {
    uint32_t n = fdiv(i, cvd);
    *cv = i - n * CV;
    const uint32_t q = fdiv(n, g.ind[2]);
    *w = (int)(n - q * (uint32_t)g.in[2]);
    n = fdiv(q, g.ind[1]);
    *h = (int)(q - n * (uint32_t)g.in[1]);
    *r = n;
    covering(g, 1, *h, lh, hh);
    covering(g, 2, *w, lw, hw);
}

// dy, pick: (N, OH, OW, C); dx: (N, H, W, C). Pass 2 in NHWC: a thread takes VEC channels of
// one element of dX; maxpool_grad_picked's sums per channel.
template <typename T, int VEC>
__global__ void maxpool_grad_picked_nhwc(const T *__restrict__ dy, const uint8_t *__restrict__ pick,
                                         T *__restrict__ dx, uint32_t total, uint32_t CV, FastDiv cvd, PickGeo g) {
    using L = Lanes<T, VEC>;
    const L *dyv = reinterpret_cast<const L *>(dy);
    const PickLanes<VEC> *pv = reinterpret_cast<const PickLanes<VEC> *>(pick);
    L *dxv = reinterpret_cast<L *>(dx);
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        uint32_t cv, r;
        int h, w, lh, hh, lw, hw;
        dx_element(i, CV, cvd, g, &cv, &r, &h, &w, &lh, &hh, &lw, &hw);
        float acc[VEC];
#pragma unroll
        for (int e = 0; e < VEC; e++) acc[e] = 0.f;
        const uint32_t img = r * (uint32_t)(g.out[1] * g.out[2]);
        for (int oh = lh; oh <= hh; oh++) {
            const int j1 = tap_of(g, 1, h, oh);
            if (j1 < 0) continue;
            for (int ow = lw; ow <= hw; ow++) {
                const int j2 = tap_of(g, 2, w, ow);
                if (j2 < 0) continue;
                const uint8_t tap = (uint8_t)(j1 * g.k[2] + j2);
                const uint32_t at = (img + (uint32_t)(oh * g.out[2] + ow)) * CV + cv;
                const PickLanes<VEC> pk = pv[at];
                bool any = false;
#pragma unroll
                for (int e = 0; e < VEC; e++) any |= pk.v[e] == tap;
                if (!any) continue;
                const L d = dyv[at];
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    if (pk.v[e] == tap) acc[e] += to_f(d.v[e]);
            }
        }
        L out;
#pragma unroll
        for (int e = 0; e < VEC; e++) out.v[e] = from_f<T>(acc[e]);
        dxv[i] = out;
    }
}

// Pass 2 in NHWC where at most two windows cover a pixel along each axis (kernel <= 2 x
// stride, dilation 1: ResNet's 3x3 stride 2): the up to four windows' picks and dY loaded
// at once, then added in maxpool_grad_picked_nhwc's order (ascending oh, then ow) with the
// picks compared four lanes at a time; adding 0 for a lane not picked leaves the float sum
// as it was (it starts at +0 and never becomes -0), so the sums are the same bits. The
// loop form made up to eight dependent trips to memory per pixel (0.56 ms on ResNet's stem
// pool, 2.9x its bytes' floor).
template <typename T, int VEC>
__global__ void maxpool_grad_picked_nhwc2(const T *__restrict__ dy, const uint8_t *__restrict__ pick,
                                          T *__restrict__ dx, uint32_t total, uint32_t CV, FastDiv cvd, PickGeo g) {
    using L = Lanes<T, VEC>;
    static_assert(VEC % 4 == 0, "picks compared four lanes at a time");
    const L *dyv = reinterpret_cast<const L *>(dy);
    const PickLanes<VEC> *pv = reinterpret_cast<const PickLanes<VEC> *>(pick);
    L *dxv = reinterpret_cast<L *>(dx);
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        uint32_t cv, r;
        int h, w, lh, hh, lw, hw;
        dx_element(i, CV, cvd, g, &cv, &r, &h, &w, &lh, &hh, &lw, &hw);
        const uint32_t img = r * (uint32_t)(g.out[1] * g.out[2]);
        PickLanes<VEC> pk[2][2];
        L d[2][2];
#pragma unroll
        for (int a = 0; a < 2; a++)
#pragma unroll
            for (int b = 0; b < 2; b++)
                if (lh + a <= hh && lw + b <= hw) {
                    const uint32_t at = (img + (uint32_t)((lh + a) * g.out[2] + lw + b)) * CV + cv;
                    pk[a][b] = pv[at];
                    d[a][b] = dyv[at];
                }
        float acc[VEC];
#pragma unroll
        for (int e = 0; e < VEC; e++) acc[e] = 0.f;
#pragma unroll
        for (int a = 0; a < 2; a++)
#pragma unroll
            for (int b = 0; b < 2; b++)
                if (lh + a <= hh && lw + b <= hw) {
                    const int j1 = h + g.pb[1] - (lh + a) * g.s[1], j2 = w + g.pb[2] - (lw + b) * g.s[2];
                    const uint32_t tap4 = (uint32_t)(j1 * g.k[2] + j2) * 0x01010101u;
                    uint32_t words[VEC / 4];
                    memcpy(words, pk[a][b].v, sizeof words);
#pragma unroll
                    for (int u = 0; u < VEC / 4; u++) {
                        const uint32_t m = __vcmpeq4(words[u], tap4); /* 0xff in each byte that matches */
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            acc[4 * u + e] += (m >> (8 * e)) & 1u ? to_f(d[a][b].v[4 * u + e]) : 0.f;
                    }
                }
        L out;
#pragma unroll
        for (int e = 0; e < VEC; e++) out.v[e] = from_f<T>(acc[e]);
        dxv[i] = out;
    }
}

/* Pass 1 in NHWC, VEC channels per thread: the picks of x into pick; with y, MaxPool's
 * forward too. */
template <typename T, int VEC>
void launch_pick_nhwc(kiln_cuda *cu, const T *x, uint8_t *pick, T *y, int64_t N, int64_t C, const PickGeo &pg) {
    const uint32_t CV = (uint32_t)(C / VEC);
    const FastDiv cvd = fast_div(CV);
    const uint32_t windows = (uint32_t)(N * pg.out[1] * pg.out[2]) * CV;
    const unsigned wb = kiln_cuda_blocks(cu, windows, THREADS);
    const bool unrolled = pg.k[1] <= 3 && pg.k[2] <= 3; /* taps unrolled (ResNet's 3x3) */
    if (y && unrolled)
        maxpool_pick_nhwc<T, VEC, 3, true><<<wb, THREADS, 0, cu->stream>>>(x, pick, windows, CV, cvd, pg, y);
    else if (y)
        maxpool_pick_nhwc<T, VEC, 0, true><<<wb, THREADS, 0, cu->stream>>>(x, pick, windows, CV, cvd, pg, y);
    else if (unrolled)
        maxpool_pick_nhwc<T, VEC, 3><<<wb, THREADS, 0, cu->stream>>>(x, pick, windows, CV, cvd, pg);
    else
        maxpool_pick_nhwc<T, VEC, 0><<<wb, THREADS, 0, cu->stream>>>(x, pick, windows, CV, cvd, pg);
}

/* Pass 1 (unless the picks are the forward's: have) and 2 in NHWC, VEC channels per thread. */
template <typename T, int VEC>
void launch_picked_nhwc(kiln_cuda *cu, const T *dy, const T *x, T *dx, uint8_t *pick, bool have, int64_t N, int64_t C,
                        const PickGeo &pg) {
    const uint32_t CV = (uint32_t)(C / VEC);
    const FastDiv cvd = fast_div(CV);
    const uint32_t elems = (uint32_t)(N * pg.in[1] * pg.in[2]) * CV;
    const unsigned eb = kiln_cuda_blocks(cu, elems, THREADS);
    if (!have) launch_pick_nhwc<T, VEC>(cu, x, pick, nullptr, N, C, pg);
    bool two = VEC % 4 == 0; /* at most two windows cover a pixel along each axis */
    for (int t = 1; t < 3; t++) two &= pg.d[t] == 1 && pg.k[t] <= 2 * pg.s[t];
    if constexpr (VEC % 4 == 0) {
        if (two) {
            maxpool_grad_picked_nhwc2<T, VEC><<<eb, THREADS, 0, cu->stream>>>(dy, pick, dx, elems, CV, cvd, pg);
            return;
        }
    }
    maxpool_grad_picked_nhwc<T, VEC><<<eb, THREADS, 0, cu->stream>>>(dy, pick, dx, elems, CV, cvd, pg);
}

template <typename T>
kiln_status launch_maxpool_grad_nhwc(kiln_cuda *cu, kiln_context *ctx, const void *dy, const void *x, void *dx,
                                     int64_t N, int64_t C, PoolGeo g, bool disjoint, bool covered, uint8_t *pick,
                                     bool have) {
    const int64_t in_n = N * g.in[1] * g.in[2] * C, out_n = N * g.out[1] * g.out[2] * C;
    if (in_n == 0) return KILN_OK;
    if (disjoint) {
        if (!covered) KILN_CUDA_CHECK(ctx, cudaMemsetAsync(dx, 0, (size_t)in_n * sizeof(T), cu->stream));
        if (out_n == 0) return KILN_OK;
        constexpr int64_t VEC = VecOf<T>::N;
        if (is_2x2(g, N * C) && C % VEC == 0 && aligned16(dy, x, dx) && in_n <= 0x3fffffff) {
            const int64_t tv = out_n / VEC;
            maxpool_grad_2x2_nhwc_vec<T><<<kiln_cuda_blocks(cu, tv, THREADS), THREADS, 0, cu->stream>>>(
                (const T *)dy, (const T *)x, (T *)dx, (uint32_t)tv, (uint32_t)(C / VEC), (uint32_t)g.out[1],
                (uint32_t)g.out[2], (uint32_t)g.in[1], (uint32_t)g.in[2]);
            KILN_CUDA_LAUNCHED(ctx, "maxpool_grad_2x2_nhwc_vec");
            return KILN_OK;
        }
        maxpool_grad_nhwc_windows<T><<<kiln_cuda_blocks(cu, out_n, THREADS), THREADS, 0, cu->stream>>>(
            (const T *)dy, (const T *)x, (T *)dx, out_n, C, g);
        KILN_CUDA_LAUNCHED(ctx, "maxpool_grad_nhwc_windows");
    } else if (pick) { /* the workspace holds one pick per window and channel (pick_geo took g) */
        if (out_n == 0) { /* no window: every element of dX is 0 */
            KILN_CUDA_CHECK(ctx, cudaMemsetAsync(dx, 0, (size_t)in_n * sizeof(T), cu->stream));
            return KILN_OK;
        }
        PickGeo pg;
        pick_geo(g, in_n, out_n, &pg);
        constexpr int64_t VEC = VecOf<T>::N;
        if (C % VEC == 0 && aligned16(dy, x, dx) && (uintptr_t)pick % VEC == 0)
            launch_picked_nhwc<T, (int)VEC>(cu, (const T *)dy, (const T *)x, (T *)dx, pick, have, N, C, pg);
        else
            launch_picked_nhwc<T, 1>(cu, (const T *)dy, (const T *)x, (T *)dx, pick, have, N, C, pg);
        KILN_CUDA_LAUNCHED(ctx, "maxpool_grad_picked_nhwc");
    } else {
        maxpool_grad_nhwc_gather<T><<<kiln_cuda_blocks(cu, in_n, THREADS), THREADS, 0, cu->stream>>>(
            (const T *)dy, (const T *)x, (T *)dx, in_n, C, g);
        KILN_CUDA_LAUNCHED(ctx, "maxpool_grad_nhwc_gather");
    }
    return KILN_OK;
}

template <typename T>
kiln_status launch_maxpool_grad(kiln_cuda *cu, kiln_context *ctx, const void *dy, const void *x, void *dx,
                                int64_t NC, PoolGeo g, bool disjoint, bool covered, uint8_t *pick, bool have) {
    const int64_t in_sz = g.in[0] * g.in[1] * g.in[2], out_sz = g.out[0] * g.out[1] * g.out[2];
    if (NC * in_sz == 0) return KILN_OK;
    const T *dyt = (const T *)dy, *xt = (const T *)x;
    T *dxt = (T *)dx;
    PoolGeo32 g32;
    const bool fits = geo_fits32(g, NC * in_sz, NC * out_sz, &g32);
    if (disjoint) {
        if (!covered) KILN_CUDA_CHECK(ctx, cudaMemsetAsync(dx, 0, (size_t)(NC * in_sz) * sizeof(T), cu->stream));
        if (NC * out_sz == 0) return KILN_OK;
        const unsigned blocks = kiln_cuda_blocks(cu, NC * out_sz, THREADS);
        if (is_2x2(g, NC)) {
            const uint32_t t32 = (uint32_t)(NC * out_sz), OH = (uint32_t)g.out[1], OW = (uint32_t)g.out[2];
            const uint32_t H = (uint32_t)g.in[1], W = (uint32_t)g.in[2];
            if (pair_ok<T>(g, x, dx))
                maxpool_grad_2x2<T, true><<<blocks, THREADS, 0, cu->stream>>>(dyt, xt, dxt, t32, OH, OW, H, W);
            else
                maxpool_grad_2x2<T, false><<<blocks, THREADS, 0, cu->stream>>>(dyt, xt, dxt, t32, OH, OW, H, W);
            KILN_CUDA_LAUNCHED(ctx, "maxpool_grad_2x2");
            return KILN_OK;
        }
        if (fits)
            maxpool_grad_windows<T, int><<<blocks, THREADS, 0, cu->stream>>>(dyt, xt, dxt, (int)(NC * out_sz), g32);
        else
            maxpool_grad_windows<T, int64_t><<<blocks, THREADS, 0, cu->stream>>>(dyt, xt, dxt, NC * out_sz, g);
        KILN_CUDA_LAUNCHED(ctx, "maxpool_grad_windows");
    } else if (pick) { /* the workspace holds one pick per window (pick_geo took g) */
        if (out_sz == 0) { /* no window: every element of dX is 0 */
            KILN_CUDA_CHECK(ctx, cudaMemsetAsync(dx, 0, (size_t)(NC * in_sz) * sizeof(T), cu->stream));
            return KILN_OK;
        }
        PickGeo pg;
        pick_geo(g, NC * in_sz, NC * out_sz, &pg);
        const uint32_t windows = (uint32_t)(NC * out_sz), elems = (uint32_t)(NC * in_sz);
        if (!have)
            maxpool_pick<T><<<kiln_cuda_blocks(cu, windows, THREADS), THREADS, 0, cu->stream>>>(xt, pick, windows, pg);
        maxpool_grad_picked<T><<<kiln_cuda_blocks(cu, elems, THREADS), THREADS, 0, cu->stream>>>(dyt, pick, dxt, elems,
                                                                                                  pg);
        KILN_CUDA_LAUNCHED(ctx, "maxpool_grad_picked");
    } else {
        const unsigned blocks = kiln_cuda_blocks(cu, NC * in_sz, THREADS);
        if (fits)
            maxpool_grad_gather<T, int><<<blocks, THREADS, 0, cu->stream>>>(dyt, xt, dxt, (int)(NC * in_sz), g32);
        else
            maxpool_grad_gather<T, int64_t><<<blocks, THREADS, 0, cu->stream>>>(dyt, xt, dxt, NC * in_sz, g);
        KILN_CUDA_LAUNCHED(ctx, "maxpool_grad_gather");
    }
    return KILN_OK;
}

/* The pooling geometry of c (x: the pooled input, y: the pooled output or its gradient)
 * in 3 right-aligned slots; false (why says) where the window rules refuse it. */
bool pool_geo_why(kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *y, PoolGeo *g, char *why, size_t n) {
    kiln_cuda_window w;
    if (!kiln_cuda_window_get(c, x, y, NULL, &w, why, n)) return false;
    for (int t = 0; t < 3; t++) {
        g->in[t] = g->out[t] = g->k[t] = g->s[t] = g->d[t] = 1;
        g->pb[t] = g->pe[t] = 0;
    }
    for (int i = 0; i < w.nd; i++) {
        const int t = 3 - w.nd + i;
        g->in[t] = w.in[i];
        g->out[t] = w.out[i];
        g->k[t] = w.k[i];
        g->s[t] = w.s[i];
        g->d[t] = w.d[i];
        g->pb[t] = w.pb[i];
        g->pe[t] = w.pe[i];
    }
    return true;
}

kiln_status pool_geo(kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *y, PoolGeo *g) {
    char why[256];
    return pool_geo_why(c, x, y, g, why, sizeof why) ? KILN_OK : kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "%s", why);
}

// x: (rows, S); y: (rows)
template <typename T> __global__ void gap_kernel(const T *x, T *y, int64_t rows, int64_t S) {
    __shared__ float scratch[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float sum = 0.f;
        for (int64_t j = threadIdx.x; j < S; j += blockDim.x) sum += to_f(x[r * S + j]);
        sum = block_reduce<false>(sum, scratch);
        if (threadIdx.x == 0) y[r] = from_f<T>(sum / (float)S);
    }
}

template <typename T>
kiln_status launch_gap(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t rows,
                       int64_t S) {
    if (rows == 0) return KILN_OK;
    int threads = 32;
    while (threads < THREADS && threads < S) threads *= 2;
    const int64_t blocks = rows < 65535 ? rows : 65535;
    gap_kernel<T><<<(unsigned)blocks, threads, 0, cu->stream>>>((const T *)x, (T *)y, rows, S);
    KILN_CUDA_LAUNCHED(ctx, "gap_kernel");
    return KILN_OK;
}

// x: (N, S, C); y: (N, C). A block sums 32 neighbouring channels of one image: its
// threadIdx.x walks channels (coalesced) and its rows split S, summed in shared memory.
constexpr int GAP_ROWS = 8;

template <typename T> __global__ void gap_nhwc_kernel(const T *x, T *y, int64_t N, int64_t S, int64_t C) {
    __shared__ float part[GAP_ROWS][33];
    const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
        float sum = 0.f;
        if (c < C)
            for (int64_t s = threadIdx.y; s < S; s += GAP_ROWS) sum += to_f(x[(n * S + s) * C + c]);
        part[threadIdx.y][threadIdx.x] = sum;
        __syncthreads();
        if (threadIdx.y == 0 && c < C) {
            float total = 0.f;
#pragma unroll
            for (int r = 0; r < GAP_ROWS; r++) total += part[r][threadIdx.x];
            y[n * C + c] = from_f<T>(total / (float)S);
        }
        __syncthreads();
    }
}

template <typename T>
kiln_status launch_gap_nhwc(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t N, int64_t S,
                            int64_t C) {
    if (N * C == 0) return KILN_OK;
    const int64_t gx = (C + 31) / 32, gy = N < 65535 ? N : 65535;
    if (gx > 0x7fffffff) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%lld channels", (long long)C);
    gap_nhwc_kernel<T><<<dim3((unsigned)gx, (unsigned)gy), dim3(32, GAP_ROWS), 0, cu->stream>>>(
        (const T *)x, (T *)y, N, S, C);
    KILN_CUDA_LAUNCHED(ctx, "gap_nhwc_kernel");
    return KILN_OK;
}

// The vector NHWC pool's launch shape (gap_vec_plan): W 16-byte channel groups by R rows a
// block, gx blocks across the groups, splits blocks along the rows of `rows` rows each.
struct GapVecPlan {
    int W, R, gx, splits, rows;
};

GapVecPlan gap_vec_plan(const kiln_cuda *cu, int64_t N, int64_t S, int64_t CV) {
    GapVecPlan p;
    p.W = (int)(CV < 256 ? CV : 256);
    p.R = 256 / p.W;
    if (p.R > S) p.R = (int)S;
    p.gx = (int)((CV + p.W - 1) / p.W);
    const int64_t blocks = (int64_t)p.gx * (N < 65535 ? N : 65535);
    const int64_t target = (int64_t)(cu->props.sm_count > 0 ? cu->props.sm_count : 1) * 8;
    int64_t splits = 1;
    if (blocks < target) {
        splits = (target + blocks - 1) / blocks;
        int64_t most = S / ((int64_t)p.R * 8); /* at least 8 rows a thread in each split */
        if (most > 64) most = 64;
        if (splits > most) splits = most;
        if (splits < 1) splits = 1;
    }
    p.rows = (int)((S + splits - 1) / splits);
    p.splits = (int)((S + p.rows - 1) / p.rows);
    return p;
}

// x: (N, S, CV groups of V); y: (N, C) or, where part, the f32 sums of the rows of split
// blockIdx.z at part[(z * N + n) * C + c].
template <typename T>
__global__ void __launch_bounds__(256) gap_nhwc_vec_kernel(const T *__restrict__ x, T *__restrict__ y,
                                                           float *__restrict__ part, int64_t N, int64_t S,
                                                           int64_t CV, int rows) {
    constexpr int V = VecOf<T>::N;
    using VT = typename VecOf<T>::type;
    extern __shared__ float red[]; // [R][W * V]
    const int W = (int)blockDim.x, R = (int)blockDim.y;
    const int64_t cv = (int64_t)blockIdx.x * W + threadIdx.x;
    const int64_t C = CV * V;
    const int64_t s0 = (int64_t)blockIdx.z * rows;
    const int64_t s1 = s0 + rows < S ? s0 + rows : S;
    for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
        float acc[V];
#pragma unroll
        for (int v = 0; v < V; v++) acc[v] = 0.f;
        if (cv < CV) {
            const VT *p = reinterpret_cast<const VT *>(x) + n * S * CV + cv;
            int64_t s = s0 + threadIdx.y;
            for (; s + 3 * R < s1; s += 4 * R) { // four loads in flight
                const VT a = p[s * CV], b = p[(s + R) * CV], c = p[(s + 2 * R) * CV], d = p[(s + 3 * R) * CV];
#pragma unroll
                for (int v = 0; v < V; v++) acc[v] += (to_f(a.v[v]) + to_f(b.v[v])) + (to_f(c.v[v]) + to_f(d.v[v]));
            }
            for (; s < s1; s += R) {
                const VT a = p[s * CV];
#pragma unroll
                for (int v = 0; v < V; v++) acc[v] += to_f(a.v[v]);
            }
        }
#pragma unroll
        for (int v = 0; v < V; v++) red[(threadIdx.y * W + threadIdx.x) * V + v] = acc[v];
        __syncthreads();
        for (int j = threadIdx.y * W + threadIdx.x; j < W * V; j += W * R) {
            const int64_t c = (int64_t)blockIdx.x * W * V + j;
            if (c >= C) continue;
            float sum = 0.f;
            for (int r = 0; r < R; r++) sum += red[r * W * V + j];
            if (part) part[((int64_t)blockIdx.z * N + n) * C + c] = sum;
            else y[n * C + c] = from_f<T>(sum / (float)S);
        }
        __syncthreads();
    }
}

// y[i] = (part[0][i] + part[1][i] + ...) / S over the splits, i < N * C.
template <typename T>
__global__ void gap_splits_kernel(const float *__restrict__ part, T *__restrict__ y, int64_t NC, int splits, int64_t S) {
    for (int64_t i = thread_index(); i < NC; i += grid_stride()) {
        float sum = 0.f;
        for (int k = 0; k < splits; k++) sum += part[k * NC + i];
        y[i] = from_f<T>(sum / (float)S);
    }
}

// The vector pool's f32 partial sums: bytes of workspace (0 where the rows are not split or
// the vector kernel does not take X).
size_t gap_vec_ws(const kiln_cuda *cu, const kiln_tensor *x) {
    if (x->ndim != 4 || x->format != KILN_FORMAT_NHWC || !kiln_cuda_float_dtype(x->dtype)) return 0;
    const int64_t V = 16 / (int64_t)kiln_dtype_size(x->dtype), N = x->dims[0], C = x->dims[1];
    const int64_t S = x->dims[2] * x->dims[3];
    if (C % V != 0 || N * C == 0 || S == 0) return 0;
    const GapVecPlan p = gap_vec_plan(cu, N, S, C / V);
    return p.splits > 1 ? (size_t)p.splits * (size_t)(N * C) * sizeof(float) : 0;
}

template <typename T>
kiln_status launch_gap_nhwc_vec(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, void *ws, size_t ws_bytes,
                                int64_t N, int64_t S, int64_t C) {
    constexpr int64_t V = VecOf<T>::N;
    GapVecPlan p = gap_vec_plan(cu, N, S, C / V);
    float *part = nullptr;
    if (p.splits > 1 && ws && ws_bytes >= (size_t)p.splits * (size_t)(N * C) * sizeof(float))
        part = (float *)ws;
    else {
        p.splits = 1;
        p.rows = (int)S;
    }
    const dim3 grid((unsigned)p.gx, (unsigned)(N < 65535 ? N : 65535), (unsigned)p.splits);
    const size_t shared = (size_t)p.W * p.R * V * sizeof(float);
    gap_nhwc_vec_kernel<T><<<grid, dim3((unsigned)p.W, (unsigned)p.R), shared, cu->stream>>>(
        (const T *)x, (T *)y, part, N, S, C / V, p.rows);
    KILN_CUDA_LAUNCHED(ctx, "gap_nhwc_vec_kernel");
    if (!part) return KILN_OK;
    gap_splits_kernel<T><<<kiln_cuda_blocks(cu, N * C, THREADS), THREADS, 0, cu->stream>>>(part, (T *)y, N * C,
                                                                                          p.splits, S);
    KILN_CUDA_LAUNCHED(ctx, "gap_splits_kernel");
    return KILN_OK;
}

} // namespace

/* MaxPool with picks = 1 (output 1: each window's picked tap, src/ops/max_pool.h): NHWC
 * with 16-byte channel groups, one kernel writes Y and the picks (pass 1 of the gradient
 * with Y); otherwise the forward, then pass 1. The pick kernels index in 32 bits: past
 * 2^30 elements the supports check refuses the node (kiln_cuda_picks_fit). */
template <typename T>
kiln_status launch_pool_picks(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, uint8_t *pick, int64_t N,
                              int64_t C, const PoolGeo &g, bool nhwc, int64_t total_in, int64_t total) {
    PickGeo pg;
    if (total == 0) return KILN_OK;
    if (!pick_geo(g, total_in, total, &pg)) /* (the supports check refuses these) */
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "MaxPool's picks: X of %lld elements, past 2^30",
                         (long long)total_in);
    constexpr int64_t VEC = VecOf<T>::N;
    if (nhwc && g.in[0] == 1 && C % VEC == 0 && aligned16(x, y) && (uintptr_t)pick % VEC == 0) {
        launch_pick_nhwc<T, (int)VEC>(cu, (const T *)x, pick, (T *)y, N, C, pg);
        KILN_CUDA_LAUNCHED(ctx, "maxpool_pick_nhwc (with Y)");
        return KILN_OK;
    }
    kiln_status st = launch_pool<T>(cu, ctx, true, x, y, total, g, false, nhwc ? C : 0);
    if (st) return st;
    if (nhwc && g.in[0] == 1)
        launch_pick_nhwc<T, 1>(cu, (const T *)x, pick, nullptr, N, C, pg);
    else
        maxpool_pick<T><<<kiln_cuda_blocks(cu, total, THREADS), THREADS, 0, cu->stream>>>((const T *)x, pick,
                                                                                          (uint32_t)total, pg);
    KILN_CUDA_LAUNCHED(ctx, "maxpool_pick");
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_maxpool(kiln_cuda *cu, kiln_op_ctx *c) {
    if (!(c->n_out > 1 && c->out[1] && kiln_attr_int(c->node, "picks", 0) != 0)) return pool(cu, c, true);
    const kiln_tensor *x = c->in[0];
    PoolGeo g;
    kiln_status st = pool_geo(c, x, c->out[0], &g);
    if (st) return st;
    const bool nhwc = x->ndim == 4 && x->format == KILN_FORMAT_NHWC;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_pool_picks, cu, c->kctx, x->data, c->out[0]->data,
                           (uint8_t *)c->out[1]->data, x->dims[0], x->dims[1], g, nhwc, kiln_tensor_numel(x),
                           kiln_tensor_numel(c->out[0]));
    return st;
}

extern "C" kiln_status kiln_cuda_k_avgpool(kiln_cuda *cu, kiln_op_ctx *c) { return pool(cu, c, false); }

extern "C" kiln_status kiln_cuda_ws_gap(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    *bytes = cu->gap_vec ? gap_vec_ws(cu, c->in[0]) : 0;
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_gap(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0]; // (N, C, spatial...)
    int64_t S = 1;
    for (int d = 2; d < x->ndim; d++) S *= x->dims[d];
    kiln_status st;
    /* Y (N, C, 1, 1) has the same bytes in either layout */
    const bool nhwc = x->ndim == 4 && x->format == KILN_FORMAT_NHWC;
    /* the vector kernel's blocks are sized by the rows and channels: none for an empty map */
    if (nhwc && kiln_cuda_float_dtype(x->dtype) && x->dims[1] % (16 / (int64_t)kiln_dtype_size(x->dtype)) == 0 &&
        aligned16(x->data) && cu->gap_vec && S > 0 && x->dims[0] * x->dims[1] > 0)
        KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_gap_nhwc_vec, cu, c->kctx, x->data, c->out[0]->data,
                               c->workspace, c->workspace_size, x->dims[0], S, x->dims[1]);
    else if (nhwc)
        KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_gap_nhwc, cu, c->kctx, x->data, c->out[0]->data,
                               x->dims[0], S, x->dims[1]);
    else
        KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_gap, cu, c->kctx, x->data, c->out[0]->data,
                               x->dims[0] * x->dims[1], S);
    return st;
}

/* kiln.MaxPoolGrad's way for c: its geometry, whether the windows are disjoint (and
 * cover X), and the workspace bytes of the two-pass path (one pick per window, and per
 * channel in NHWC: dY's element count) when the windows overlap and pick_geo takes them,
 * else 0. */
static kiln_status maxpool_grad_plan(kiln_op_ctx *c, PoolGeo *g, bool *disjoint, bool *covered, size_t *pick_bytes) {
    const kiln_tensor *dy = c->in[0], *x = c->in[1]; // (N, C, out...), (N, C, in...)
    kiln_status st = pool_geo(c, x, dy, g);
    if (st) return st;
    *disjoint = *covered = true;
    for (int t = 0; t < 3; t++) {
        if (g->s[t] < (g->k[t] - 1) * g->d[t] + 1) *disjoint = false;
        int64_t inside = 0;
        for (int64_t o = 0; o < g->out[t] && *disjoint; o++)
            for (int64_t j = 0; j < g->k[t]; j++) {
                const int64_t p = o * g->s[t] - g->pb[t] + j * g->d[t];
                inside += p >= 0 && p < g->in[t];
            }
        if (inside != g->in[t]) *covered = false;
    }
    PickGeo pg;
    *pick_bytes = !*disjoint && pick_geo(*g, kiln_tensor_numel(x), kiln_tensor_numel(dy), &pg)
                      ? (size_t)kiln_tensor_numel(dy)
                      : 0;
    return KILN_OK;
}

/* ---------------------------------------------------------------- kiln.BnReluMaxPool */

namespace {

// z = T(Relu(bn_affine(x))) elementwise (the other paths' pool input): element i's channel is
// i % C in NHWC, (i / S) % C otherwise.
template <typename T>
__global__ void bn_relu_apply(const T *__restrict__ x, T *__restrict__ z, const float *__restrict__ mc, int64_t n,
                              int64_t C, int64_t S, bool nhwc) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        const int64_t c = nhwc ? i % C : i / S % C;
        const float v = to_f(from_f<T>(bn_affine(to_f(x[i]), mc[c], mc[C + c], mc[2 * C + c])));
        z[i] = from_f<T>(v > 0.f ? v : 0.f); /* NaN -> 0 */
    }
}

/* kiln.BnReluMaxPool's geometry and whether one kernel takes it whole: f16 NHWC with 16-byte
 * channel groups, windows of at most 3x3, the pick kernels' indices (and at run time the
 * pointers 16-byte aligned). Else the BN's Y is written to the workspace and pooled. */
struct BnPool {
    PoolGeo g;
    PickGeo pg; /* when picks: the pick kernels take the geometry */
    int64_t N, C, S;
    bool nhwc, picks, fast;
};

kiln_status bn_pool_plan(kiln_op_ctx *c, BnPool *b) {
    const kiln_tensor *x = c->in[0];
    kiln_status st = pool_geo(c, x, c->out[0], &b->g);
    if (st) return st;
    b->N = x->dims[0];
    b->C = x->dims[1];
    b->S = 1;
    for (int d = 2; d < x->ndim; d++) b->S *= x->dims[d];
    b->nhwc = x->ndim == 4 && x->format == KILN_FORMAT_NHWC;
    b->picks = c->n_out > 1 && c->out[1] && pick_geo(b->g, kiln_tensor_numel(x), kiln_tensor_numel(c->out[0]), &b->pg);
    b->fast = x->dtype == KILN_F16 && b->nhwc && b->g.in[0] == 1 && b->C % 8 == 0 && b->g.k[1] <= 3 &&
              b->g.k[2] <= 3 && b->picks;
    return KILN_OK;
}

size_t bn_coef_bytes(int64_t C) { return (size_t)(3 * C * sizeof(float) + 255) & ~(size_t)255; }

template <typename T>
kiln_status launch_bn_pool(kiln_cuda *cu, kiln_op_ctx *c, const BnPool &b, const float *mc, char *zbuf) {
    const kiln_tensor *x = c->in[0];
    T *y = (T *)c->out[0]->data;
    uint8_t *pick = c->n_out > 1 && c->out[1] ? (uint8_t *)c->out[1]->data : nullptr;
    const int64_t total = kiln_tensor_numel(c->out[0]), n = kiln_tensor_numel(x);
    if constexpr (std::is_same<T, __half>::value) {
        if (b.fast && aligned16(x->data, y) && (uintptr_t)pick % 8 == 0) {
            const uint32_t CV = (uint32_t)(b.C / 8), windows = (uint32_t)(b.N * b.pg.out[1] * b.pg.out[2]) * CV;
            maxpool_pick_nhwc<__half, 8, 3, true, true><<<kiln_cuda_blocks(cu, windows, THREADS), THREADS, 0, cu->stream>>>(
                (const __half *)x->data, pick, windows, CV, fast_div(CV), b.pg, y, mc);
            KILN_CUDA_LAUNCHED(c->kctx, "maxpool_pick_nhwc (the BN prologue)");
            return KILN_OK;
        }
    }
    if (!zbuf)
        return kiln_op_fail(c, KILN_ERR_INTERNAL, "the BN's output has no workspace (pointers not 16-byte aligned)");
    bn_relu_apply<T><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((const T *)x->data, (T *)zbuf, mc, n,
                                                                                  b.C, b.S, b.nhwc);
    KILN_CUDA_LAUNCHED(c->kctx, "bn_relu_apply");
    if (!pick) return launch_pool<T>(cu, c->kctx, true, zbuf, y, total, b.g, false, b.nhwc ? b.C : 0);
    return launch_pool_picks<T>(cu, c->kctx, zbuf, y, pick, b.N, b.C, b.g, b.nhwc, n, total);
}

} // namespace

extern "C" kiln_status kiln_cuda_ws_bn_relu_max_pool(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    (void)cu;
    BnPool b;
    kiln_status st = bn_pool_plan(c, &b);
    if (st) return st;
    const kiln_tensor *x = c->in[0];
    *bytes = bn_coef_bytes(b.C) + (b.fast ? 0 : (size_t)kiln_tensor_numel(x) * kiln_dtype_size(x->dtype));
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_bn_relu_max_pool(kiln_cuda *cu, kiln_op_ctx *c) {
    BnPool b;
    kiln_status st = bn_pool_plan(c, &b);
    if (st) return st;
    const kiln_tensor *x = c->in[0];
    const size_t cb = bn_coef_bytes(b.C), zb = (size_t)kiln_tensor_numel(x) * kiln_dtype_size(x->dtype);
    if (!c->workspace || c->workspace_size < cb)
        return kiln_op_fail(c, KILN_ERR_INTERNAL, "workspace of %zu bytes, %zu needed", c->workspace_size, cb);
    if (kiln_tensor_numel(x) == 0 || kiln_tensor_numel(c->out[0]) == 0) return KILN_OK;
    if (c->n_out > 1 && c->out[1] && !b.picks) /* (refused by the supports check) */
        return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "X of %lld elements: past the 2^30 the pick kernels index",
                            (long long)kiln_tensor_numel(x));
    float *mc = (float *)c->workspace; /* the BN's coefficients, as its mask from X takes them */
    st = kiln_cuda_bn_fwd_coef(cu, c->kctx, c->in[1]->data, c->in[1]->dtype, c->in[2]->data, c->in[2]->dtype,
                               c->in[3]->data, c->in[3]->dtype, (double)kiln_attr_float(c->node, "epsilon", 1e-5f), mc,
                               b.C);
    if (st) return st;
    char *zbuf = c->workspace_size >= cb + zb ? (char *)c->workspace + cb : nullptr;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_bn_pool, cu, c, b, mc, zbuf);
    return st;
}

/* Whether kiln.MaxPoolGrad c routes by the forward's picks (input 2; X, then, may be another
 * tensor of its shape: kiln.BnReluMaxPool's gradient reads the BN's input). */
static bool given_picks(const kiln_op_ctx *c) { return c->n_in > 2 && c->in[2]; }

/* Whether the pick kernels index pool c's X and Y (32 bits; the supports checks of the
 * picks' producers and readers ask, so that no plan holds picks they cannot take). */
extern "C" bool kiln_cuda_picks_fit(kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *y) {
    PoolGeo g;
    PickGeo pg;
    char why[256]; /* (a geometry the window rules refuse is the supports check's to say) */
    return pool_geo_why(c, x, y, &g, why, sizeof why) && pick_geo(g, kiln_tensor_numel(x), kiln_tensor_numel(y), &pg);
}

extern "C" kiln_status kiln_cuda_ws_maxpool_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    (void)cu;
    PoolGeo g;
    bool disjoint, covered;
    kiln_status st = maxpool_grad_plan(c, &g, &disjoint, &covered, bytes);
    if (!st && given_picks(c)) *bytes = 0;
    return st;
}

extern "C" kiln_status kiln_cuda_k_maxpool_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *x = c->in[1]; // (N, C, out...), (N, C, in...)
    PoolGeo g;
    bool disjoint, covered;
    size_t pick_bytes;
    kiln_status st = maxpool_grad_plan(c, &g, &disjoint, &covered, &pick_bytes);
    if (st) return st;
    /* overlapping windows: the two passes when the workspace holds the picks, else the
     * one-pass gather (each element recomputes its windows' picks); the forward's picks
     * (input 2): pass 2 alone, whatever the windows */
    uint8_t *pick = pick_bytes && c->workspace && c->workspace_size >= pick_bytes ? (uint8_t *)c->workspace : NULL;
    const bool have = given_picks(c);
    PickGeo pg;
    if (have && !pick_geo(g, kiln_tensor_numel(x), kiln_tensor_numel(dy), &pg)) /* (refused by the supports check) */
        return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "the picks of X of %lld elements, past 2^30",
                            (long long)kiln_tensor_numel(x));
    if (have) {
        pick = (uint8_t *)c->in[2]->data;
        disjoint = false;
    }
    if (x->ndim == 4 && x->format == KILN_FORMAT_NHWC)
        KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_maxpool_grad_nhwc, cu, c->kctx, dy->data, x->data,
                               c->out[0]->data, x->dims[0], x->dims[1], g, disjoint, covered, pick, have);
    else
        KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_maxpool_grad, cu, c->kctx, dy->data, x->data,
                               c->out[0]->data, x->dims[0] * x->dims[1], g, disjoint, covered, pick, have);
    return st;
}
