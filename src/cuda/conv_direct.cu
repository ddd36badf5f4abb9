/*
 * conv_direct.cu — convolutions with one input channel and one group (C = 1: a network's
 * first layer on grey images, mnist-net's Conv(1->32, 3x3)) and their weight gradients,
 * by direct kernels instead of cuDNN, which runs them badly (on an H200, inside mnist-net's
 * training step: ~21 us forward and ~35 us backward-filter for 0.2 MB in and 5.5 MB out).
 * conv.c dispatches here when kiln_cuda's conv_direct is on and kiln_cuda_conv_direct_fits
 * takes the shape; the contract is kiln_cuda_direct_geo's (cuda_internal.h).
 *
 *   X (N, 1, H, W) and W (M, 1, kh, kw) have the same bytes in NCHW and NHWC; Y and dY
 *   (N, M, OH, OW) are either. Taps outside X read zero (any pads, asymmetric too, with no
 *   padded copy), any strides and dilations, kh*kw <= 49. f32, f16 and bf16, accumulated
 *   in f32 (exact FMA, no TF32), rounded once to the dtype.
 *
 *   Forward, y = act(conv(x, w) + b), act none or Relu: a thread computes CPT = 8 output
 *   channels of one output pixel. Its kh*kw taps of X are loaded into registers once (the
 *   tap loop unrolled to KMAX = 9, 25 or 49, so the loads issue together), the weights
 *   (as [tap][channel], padded to whole groups of 8 channels with zeros) and the bias sit
 *   in shared memory and are read as float4 (NCHW: one address across a warp). Stores are
 *   what bounds it (mnist-net: 5.5 MB written, 0.2 MB read), so they are laid out to be
 *   coalesced: NCHW, neighbouring threads take neighbouring pixels of one channel group
 *   and each of their 8 stores covers one contiguous run of a channel plane; NHWC,
 *   neighbouring threads take neighbouring channel groups of one pixel, then the next
 *   pixel, so a warp writes one contiguous run, in 16-byte vectors when M is a multiple
 *   of 8 and Y is aligned.
 *
 *   Weight gradient, dW[m, 0, r, s] = sum over (n, oh, ow) of dY[n, m, oh, ow] *
 *   X[n, 0, oh*sh + r*dh - pt, ow*sw + s*dw - pl]: a grid of (position chunk, group of MB
 *   channels) blocks. A thread walks its chunk's positions, loads the taps of X once per
 *   position and keeps MB * kh*kw running sums in registers (MB = 8, 2, 1 for up to 9,
 *   25, 49 taps: about 72 accumulators). The block then adds its threads' sums: a warp
 *   halves its values between lane pairs while their count is even (each step moves half
 *   of them, instead of a shuffle tree per value) and ends on plain shuffle trees, the
 *   warps meet in shared memory and are added in warp order. Each chunk writes its f32
 *   partial sums to the workspace; a second kernel adds the chunks, a warp per weight, its
 *   lanes over every 32nd chunk and then a shuffle tree. No atomics anywhere: the same inputs give the same bits on every run,
 *   and the chunking depends on the shape only, not on the device. One chunk writes dW
 *   directly.
 *
 *   Indices are 32-bit (the shape must fit: kiln_cuda_conv_direct_fits), offsets into Y
 *   and dY 64-bit.
 */
#include "dtype.cuh"

#include <stdio.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;
constexpr int MAX_TAPS = 49;
constexpr int CPT = 8;                       /* forward: output channels per thread */
constexpr size_t FWD_SMEM = (size_t)48 << 10; /* weights + bias, without opting in */
constexpr int64_t LIM = 0x3fffffff;          /* 32-bit indices with a factor 2 spare */
/* Weight gradient: a chunk is THREADS * T positions, T >= WG_MIN_T (fewer make the block
 * sum dominate), raised until about WG_TARGET_BLOCKS blocks cover the work (two per SM of
 * an H100 / H200). A shape constant, not the device's SM count: the chunks fix the order
 * of the sums, and so the bits of dW. */
constexpr int64_t WG_MIN_T = 4;
constexpr int64_t WG_TARGET_BLOCKS = 264;

/* The geometry in 32 bits (kiln_cuda_conv_direct_fits checked that it fits). */
struct Geo {
    int N, H, W, M, OH, OW, kh, kw, sh, sw, dh, dw, pt, pl;
    int kk;  /* kh * kw */
    int S;   /* OH * OW */
    int P;   /* N * OH * OW output positions */
    int HW;  /* H * W */
};

Geo geo32(const kiln_cuda_direct_geo *g) {
    Geo r;
    r.N = (int)g->N;
    r.H = (int)g->H;
    r.W = (int)g->W;
    r.M = (int)g->M;
    r.OH = (int)g->OH;
    r.OW = (int)g->OW;
    r.kh = (int)g->kh;
    r.kw = (int)g->kw;
    r.sh = (int)g->sh;
    r.sw = (int)g->sw;
    r.dh = (int)g->dh;
    r.dw = (int)g->dw;
    r.pt = (int)g->pt;
    r.pl = (int)g->pl;
    r.kk = r.kh * r.kw;
    r.S = r.OH * r.OW;
    r.P = r.N * r.S;
    r.HW = r.H * r.W;
    return r;
}

/* The taps bucket: kernels unroll their tap loops to KMAX. */
int kmax_of(int64_t kk) { return kk <= 9 ? 9 : kk <= 25 ? 25 : 49; }

/* Weight gradient: channels a block takes for KMAX taps (about 72 accumulators). */
__host__ __device__ constexpr int mb_of(int kmax) { return kmax == 9 ? 8 : kmax == 25 ? 2 : 1; }

/* The taps of output pixel (n, oh, ow) in xv[0..KMAX), row-major over (r, s); taps past
 * kk and outside X are 0. */
template <typename T, int KMAX>
__device__ __forceinline__ void load_taps(const T *__restrict__ x, const Geo &g, int n, int oh, int ow,
                                          float (&xv)[KMAX]) {
    const T *xb = x + (size_t)n * g.HW;
    const int ih0 = oh * g.sh - g.pt, iw0 = ow * g.sw - g.pl;
    int ih = ih0, iw = iw0, c = 0;
#pragma unroll
    for (int k = 0; k < KMAX; k++) {
        xv[k] = 0.f;
        if (k < g.kk) {
            if ((unsigned)ih < (unsigned)g.H && (unsigned)iw < (unsigned)g.W) xv[k] = to_f(xb[ih * g.W + iw]);
            iw += g.dw;
            if (++c == g.kw) {
                c = 0;
                iw = iw0;
                ih += g.dh;
            }
        }
    }
}

/* ------------------------------------------------------------------ forward */

/* Shared memory of the forward: weights [kk][Mp] and bias [Mp] as f32, Mp = M rounded up
 * to CPT. */
size_t fwd_smem(int64_t kk, int64_t M) {
    const int64_t Mp = (M + CPT - 1) / CPT * CPT;
    return (size_t)((kk + 1) * Mp) * sizeof(float);
}

/* y = act(conv(x, w) + b), one item = CPT channels (group q of Q) of one output pixel p.
 * NHWC: items (p, q) with q fastest; NCHW: (q, p) with p fastest. vec: NHWC with M a
 * multiple of CPT and y 16-byte aligned (16-byte stores). */
template <typename T, int KMAX, bool NHWC>
__global__ void __launch_bounds__(THREADS)
    conv_fwd(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b, T *__restrict__ y, Geo g,
             int Q, bool relu, bool vec) {
    extern __shared__ float4 smem4[];
    float *sw = reinterpret_cast<float *>(smem4);
    const int Mp = Q * CPT;
    float *sb = sw + g.kk * Mp;
    for (int i = threadIdx.x; i < g.kk * Mp; i += blockDim.x) {
        const int k = i / Mp, m = i - k * Mp;
        sw[i] = m < g.M ? to_f(w[m * g.kk + k]) : 0.f;
    }
    for (int m = threadIdx.x; m < Mp; m += blockDim.x) sb[m] = b && m < g.M ? to_f(b[m]) : 0.f;
    __syncthreads();
    const int items = g.P * Q;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < items; i += gridDim.x * blockDim.x) {
        int p, q;
        if (NHWC) {
            p = i / Q;
            q = i - p * Q;
        } else {
            q = i / g.P;
            p = i - q * g.P;
        }
        const int n = p / g.S, s = p - n * g.S, oh = s / g.OW, ow = s - oh * g.OW;
        float xv[KMAX];
        load_taps<T, KMAX>(x, g, n, oh, ow, xv);
        float acc[CPT];
        const float4 *bq = reinterpret_cast<const float4 *>(sb + q * CPT);
        const float4 b0 = bq[0], b1 = bq[1];
        acc[0] = b0.x, acc[1] = b0.y, acc[2] = b0.z, acc[3] = b0.w;
        acc[4] = b1.x, acc[5] = b1.y, acc[6] = b1.z, acc[7] = b1.w;
#pragma unroll
        for (int k = 0; k < KMAX; k++) {
            if (k >= g.kk) break;
            const float4 *wq = reinterpret_cast<const float4 *>(sw + k * Mp + q * CPT);
            const float4 w0 = wq[0], w1 = wq[1];
            const float v = xv[k];
            acc[0] = fmaf(v, w0.x, acc[0]);
            acc[1] = fmaf(v, w0.y, acc[1]);
            acc[2] = fmaf(v, w0.z, acc[2]);
            acc[3] = fmaf(v, w0.w, acc[3]);
            acc[4] = fmaf(v, w1.x, acc[4]);
            acc[5] = fmaf(v, w1.y, acc[5]);
            acc[6] = fmaf(v, w1.z, acc[6]);
            acc[7] = fmaf(v, w1.w, acc[7]);
        }
        if (relu) {
#pragma unroll
            for (int j = 0; j < CPT; j++) acc[j] = acc[j] > 0.f ? acc[j] : 0.f; /* as kiln's Relu */
        }
        const int m0 = q * CPT;
        if (NHWC) {
            const size_t base = (size_t)p * g.M + m0;
            if (vec) {
                using V = typename VecOf<T>::type;
                constexpr int NV = VecOf<T>::N;
                V *dst = reinterpret_cast<V *>(y + base);
#pragma unroll
                for (int c = 0; c < CPT / NV; c++) {
                    V o;
#pragma unroll
                    for (int e = 0; e < NV; e++) o.v[e] = from_f<T>(acc[c * NV + e]);
                    dst[c] = o;
                }
            } else {
#pragma unroll
                for (int j = 0; j < CPT; j++)
                    if (m0 + j < g.M) y[base + j] = from_f<T>(acc[j]);
            }
        } else {
            const size_t base = ((size_t)n * g.M + m0) * g.S + s;
#pragma unroll
            for (int j = 0; j < CPT; j++)
                if (m0 + j < g.M) y[base + (size_t)j * g.S] = from_f<T>(acc[j]);
        }
    }
}

template <typename T, int KMAX>
kiln_status launch_fwd(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const void *x, const void *w, const void *b,
                       bool relu, bool nhwc, void *y) {
    const int Q = (g.M + CPT - 1) / CPT;
    const size_t smem = fwd_smem(g.kk, g.M);
    const unsigned blocks = kiln_cuda_blocks(cu, (int64_t)g.P * Q, THREADS);
    const bool vec = g.M % CPT == 0 && aligned16(y);
    if (nhwc)
        conv_fwd<T, KMAX, true><<<blocks, THREADS, smem, cu->stream>>>((const T *)x, (const T *)w, (const T *)b,
                                                                       (T *)y, g, Q, relu, vec);
    else
        conv_fwd<T, KMAX, false><<<blocks, THREADS, smem, cu->stream>>>((const T *)x, (const T *)w, (const T *)b,
                                                                        (T *)y, g, Q, relu, false);
    KILN_CUDA_LAUNCHED(ctx, "conv_fwd (direct)");
    return KILN_OK;
}

template <typename T>
kiln_status forward(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const void *x, const void *w, const void *b,
                    bool relu, bool nhwc, void *y) {
    switch (kmax_of(g.kk)) {
    case 9: return launch_fwd<T, 9>(cu, ctx, g, x, w, b, relu, nhwc, y);
    case 25: return launch_fwd<T, 25>(cu, ctx, g, x, w, b, relu, nhwc, y);
    default: return launch_fwd<T, 49>(cu, ctx, g, x, w, b, relu, nhwc, y);
    }
}

/* ------------------------------------------------------------ weight gradient */

/* The chunking of the weight gradient: positions per chunk and chunks. */
struct WgradPlan {
    int64_t per_chunk, chunks, groups;
};

WgradPlan wgrad_plan(const kiln_cuda_direct_geo *g) {
    const int mb = mb_of(kmax_of(g->kh * g->kw));
    const int64_t P = g->N * g->OH * g->OW;
    WgradPlan p;
    p.groups = (g->M + mb - 1) / mb;
    int64_t t = (P * p.groups + THREADS * WG_TARGET_BLOCKS - 1) / (THREADS * WG_TARGET_BLOCKS);
    if (t < WG_MIN_T) t = WG_MIN_T;
    p.per_chunk = THREADS * t;
    p.chunks = (P + p.per_chunk - 1) / p.per_chunk;
    return p;
}

/* Sum v[0..L) over the 32 lanes of a warp, O the next lane offset (16 at the start). While
 * L is even, lanes l and l^O each keep one half of the values (the upper lane the upper
 * half) and add the partner's copy of it; once L is odd, plain shuffle trees over the
 * remaining offsets. On return lane l holds, in v[0..R) (R = L after the halvings), the
 * totals of the values first..first+R, the same in every lane that differs from l only in
 * the `plain` offsets. */
template <int L, int O> struct WarpSum {
    static __device__ __forceinline__ void run(float *v, int lane, int &first, int &plain) {
        if constexpr (O > 0) {
            if constexpr (L % 2 == 0) {
                constexpr int H = L / 2;
                const bool up = (lane & O) != 0;
#pragma unroll
                for (int i = 0; i < H; i++) {
                    const float send = up ? v[i] : v[i + H], keep = up ? v[i + H] : v[i];
                    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
                }
                if (up) first += H;
                WarpSum<H, O / 2>::run(v, lane, first, plain);
            } else {
#pragma unroll
                for (int i = 0; i < L; i++) v[i] += __shfl_xor_sync(0xffffffffu, v[i], O);
                plain |= O;
                WarpSum<L, O / 2>::run(v, lane, first, plain);
            }
        }
    }
};

/* The number of values each lane ends with in WarpSum<L, 16>. */
__host__ __device__ constexpr int warp_sum_left(int L, int O) {
    return O == 0 ? L : L % 2 == 0 ? warp_sum_left(L / 2, O / 2) : L;
}

/* Block (chunk c, channel group): the sums over positions [c*per_chunk, ...) of dY * taps
 * for channels [group*MB, +MB), written as partials part[c][m*kk + k], or (one chunk) to
 * dW directly. */
template <typename T, int KMAX, int MB, bool NHWC>
__global__ void __launch_bounds__(THREADS)
    wgrad_partial(const T *__restrict__ x, const T *__restrict__ dy, float *__restrict__ part, T *__restrict__ dw,
                  Geo g, int per_chunk, bool direct) {
    constexpr int V = MB * KMAX;
    constexpr int R = warp_sum_left(V, 16);
    __shared__ float red[THREADS / 32][V];
    const int m0 = blockIdx.y * MB;
    const unsigned lo = (unsigned)blockIdx.x * (unsigned)per_chunk;
    const unsigned hi = min((unsigned)g.P, lo + (unsigned)per_chunk);
    float acc[V];
#pragma unroll
    for (int i = 0; i < V; i++) acc[i] = 0.f;
    for (unsigned p = lo + threadIdx.x; p < hi; p += THREADS) {
        const int n = (int)p / g.S, s = (int)p - n * g.S, oh = s / g.OW, ow = s - oh * g.OW;
        float xv[KMAX];
        load_taps<T, KMAX>(x, g, n, oh, ow, xv);
        float d[MB];
#pragma unroll
        for (int j = 0; j < MB; j++) {
            const int m = m0 + j;
            d[j] = 0.f;
            if (m < g.M) d[j] = to_f(dy[NHWC ? (size_t)p * g.M + m : ((size_t)n * g.M + m) * g.S + s]);
        }
#pragma unroll
        for (int j = 0; j < MB; j++)
#pragma unroll
            for (int k = 0; k < KMAX; k++) acc[j * KMAX + k] = fmaf(d[j], xv[k], acc[j * KMAX + k]);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int first = 0, plain = 0;
    WarpSum<V, 16>::run(acc, lane, first, plain);
    if ((lane & plain) == 0) {
#pragma unroll
        for (int i = 0; i < R; i++) red[warp][first + i] = acc[i];
    }
    __syncthreads();
    const int kk = g.kk, MK = g.M * kk;
    for (int v = threadIdx.x; v < V; v += THREADS) {
        const int j = v / KMAX, k = v - j * KMAX, m = m0 + j;
        if (m >= g.M || k >= kk) continue;
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < THREADS / 32; w++) s += red[w][v];
        if (direct) dw[m * kk + k] = from_f<T>(s);
        else part[(size_t)blockIdx.x * MK + m * kk + k] = s;
    }
}

/* dW[o] = the sum of part[c][o] over chunks c, a warp per weight: lane l adds chunks l,
 * l + 32, ... in order, then a shuffle tree (a fixed order). */
template <typename T>
__global__ void wgrad_finish(const float *__restrict__ part, T *__restrict__ dw, int MK, int chunks) {
    const int lane = threadIdx.x & 31;
    const int warps = (int)(gridDim.x * blockDim.x / 32);
    for (int o = (int)((blockIdx.x * blockDim.x + threadIdx.x) / 32); o < MK; o += warps) {
        float s = 0.f;
        for (int c = lane; c < chunks; c += 32) s += part[(size_t)c * MK + o];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) dw[o] = from_f<T>(s);
    }
}

template <typename T, int KMAX>
kiln_status launch_wgrad(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const WgradPlan &pl, bool nhwc,
                         const void *x, const void *dy, void *dw, float *part) {
    constexpr int MB = mb_of(KMAX);
    const dim3 grid((unsigned)pl.chunks, (unsigned)pl.groups);
    const bool direct = pl.chunks == 1;
    if (nhwc)
        wgrad_partial<T, KMAX, MB, true><<<grid, THREADS, 0, cu->stream>>>(
            (const T *)x, (const T *)dy, part, (T *)dw, g, (int)pl.per_chunk, direct);
    else
        wgrad_partial<T, KMAX, MB, false><<<grid, THREADS, 0, cu->stream>>>(
            (const T *)x, (const T *)dy, part, (T *)dw, g, (int)pl.per_chunk, direct);
    KILN_CUDA_LAUNCHED(ctx, "wgrad_partial (direct)");
    if (direct) return KILN_OK;
    const int MK = g.M * g.kk;
    wgrad_finish<T><<<kiln_cuda_blocks(cu, (int64_t)MK * 32, THREADS), THREADS, 0, cu->stream>>>(part, (T *)dw, MK,
                                                                                               (int)pl.chunks);
    KILN_CUDA_LAUNCHED(ctx, "wgrad_finish (direct)");
    return KILN_OK;
}

template <typename T>
kiln_status wgrad(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const WgradPlan &pl, bool nhwc, const void *x,
                  const void *dy, void *dw, float *part) {
    switch (kmax_of(g.kk)) {
    case 9: return launch_wgrad<T, 9>(cu, ctx, g, pl, nhwc, x, dy, dw, part);
    case 25: return launch_wgrad<T, 25>(cu, ctx, g, pl, nhwc, x, dy, dw, part);
    default: return launch_wgrad<T, 49>(cu, ctx, g, pl, nhwc, x, dy, dw, part);
    }
}

size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" bool kiln_cuda_conv_direct_fits(const kiln_cuda_direct_geo *g, char *why, size_t n) {
    const int64_t kk = g->kh * g->kw;
    if (g->kh < 1 || g->kw < 1 || kk > MAX_TAPS) {
        snprintf(why, n, "a %lldx%lld kernel (the direct kernels take up to %d taps)", (long long)g->kh,
                 (long long)g->kw, MAX_TAPS);
        return false;
    }
    if (g->N < 1 || g->H < 1 || g->W < 1 || g->M < 1 || g->OH < 1 || g->OW < 1) {
        snprintf(why, n, "empty tensors");
        return false;
    }
    if (fwd_smem(kk, g->M) > FWD_SMEM) {
        snprintf(why, n, "%lld output channels of %lld taps do not fit in shared memory", (long long)g->M,
                 (long long)kk);
        return false;
    }
    if (g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->pt < 0 || g->pl < 0) {
        snprintf(why, n, "strides, dilations or pads out of range");
        return false;
    }
    /* element counts, and every coordinate a window walks (from -pt to past its last tap) */
    const int64_t sizes[] = {g->N * g->H * g->W, g->N * g->OH * g->OW * ((g->M + CPT - 1) / CPT), g->M * kk,
                             (g->OH - 1) * g->sh + g->kh * g->dh + g->pt + g->H,
                             (g->OW - 1) * g->sw + g->kw * g->dw + g->pl + g->W};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] > LIM) {
            snprintf(why, n, "indices beyond 32 bits");
            return false;
        }
    return true;
}

extern "C" kiln_status kiln_cuda_conv_direct_forward(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt,
                                                     const kiln_cuda_direct_geo *g, const void *x, const void *w,
                                                     const void *b, bool relu, void *y) {
    char why[160];
    if (!kiln_cuda_conv_direct_fits(g, why, sizeof why))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "direct convolution: %s", why);
    const Geo g32 = geo32(g);
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, ctx, dt, forward, cu, ctx, g32, x, w, b, relu, g->nhwc, y);
    return st;
}

extern "C" size_t kiln_cuda_conv_direct_wgrad_ws(const kiln_cuda_direct_geo *g) {
    const WgradPlan p = wgrad_plan(g);
    return p.chunks > 1 ? align256((size_t)(p.chunks * g->M * g->kh * g->kw) * sizeof(float)) : 0;
}

extern "C" kiln_status kiln_cuda_conv_direct_wgrad(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt,
                                                   const kiln_cuda_direct_geo *g, const void *x, const void *dy,
                                                   void *dw, void *ws, size_t ws_bytes) {
    char why[160];
    if (!kiln_cuda_conv_direct_fits(g, why, sizeof why))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "direct weight gradient: %s", why);
    const WgradPlan p = wgrad_plan(g);
    const size_t need = kiln_cuda_conv_direct_wgrad_ws(g);
    if (ws_bytes < need || (need && !ws))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "the direct weight gradient needs %zu bytes of workspace, got %zu",
                         need, ws_bytes);
    if (p.groups > 65535 || p.chunks > LIM)
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "direct weight gradient: a grid of %lld x %lld blocks",
                         (long long)p.chunks, (long long)p.groups);
    const Geo g32 = geo32(g);
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, ctx, dt, wgrad, cu, ctx, g32, p, g->nhwc, x, dy, dw, (float *)ws);
    return st;
}
