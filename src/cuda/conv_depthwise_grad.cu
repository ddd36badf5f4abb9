/*
 * conv_depthwise_grad.cu — the gradients of depthwise convolutions (group == C == M, one
 * filter per channel) by kiln's own kernels: kiln.ConvGradWeight, and kiln.ConvGradInput
 * in NHWC. cuDNN's depthwise weight gradient runs far from the memory bound (convnext_tiny's
 * 7x7 f16 NHWC [128,96,56,56]: 29.8 ms on an H100, 5 GB/s, where the 154 MB of X and dY take
 * ~0.05 ms), and so did conv_depthwise.cu's input gradient (a thread per dX element, one
 * 2-byte load per tap: 3.96 ms, 58 GB/s, for the same shape).
 *
 * Validated on an H100 (bench/NOTES.md "t7 / z6 results": convnext_tiny's training 2.6x).
 * conv.c dispatches here when kiln_cuda's conv_dw_grad is on: the default; off with
 * kiln_cuda_options.conv_dw_grad < 0, --disable conv-dw-grad or KILN_CUDA_DW_GRAD=0 when the
 * kiln_cuda is created, and then the old paths run (cuDNN's weight gradient,
 * conv_depthwise.cu's input gradient). With autotune, kiln's kernel runs only where conv.c's dw_faster timed it faster
 * than cuDNN. The GPU tests that cover them: test_backend_ops --dw-grad (ctest
 * backend_ops_dw_grad) and test_cuda_ops' depthwise cases; bench: test_cuda_ops --dw-grad-bench.
 *
 * Geometry: kiln_cuda_dw_geo (cuda_internal.h), as the forward's: X (N, C, H, W), dY
 * (N, C, OH, OW), NCHW or NHWC, W and dW (C, 1, kh, kw), kh, kw <= 9, any strides,
 * dilations and (begin) pads; taps outside X read zero. f32 / f16 / bf16 in, f32
 * accumulation, dW / dX rounded once to the dtype.
 *
 * Weight gradient dW[c, i, j] = sum over n, oh, ow of dY[n, oh, ow, c] *
 * X[n, oh*sh + i*dh - pt, ow*sw + j*dw - pl, c].
 *
 *   NHWC, C % 4 == 0, X and dY 16-byte aligned (dwg_nhwc): a block takes a channel chunk
 *   of cb = 4 * QB channels (blockIdx.y) and slabs of R output rows x OWt output columns
 *   of one image, slab blockIdx.x, + gridDim.x, ... For each slab it copies the X patch
 *   under it (((R-1)*sh + (kh-1)*dh + 1) rows x ((OWt-1)*sw + (kw-1)*dw + 1) columns x cb
 *   channels, zeros outside X) and the slab of dY into shared memory, a quad of channels
 *   (8 bytes in f16 / bf16, 16 in f32) per load; every X row is so read from global
 *   memory (R + kh - 1) / R times, not kh times. Thread (q, i, p) (lanes: q fastest, then
 *   i, then p; the patch rows padded so that successive rows' quads fall on different
 *   banks) then owns kernel row i (all kw taps) of channel quad q and a range of L output
 *   columns p: for each slab row and each group of TO = 4 outputs it loads the
 *   TO + kw - 1 X columns once (stride 1, dilation 1: a sliding window; else each tap) and
 *   the TO dY values (the same for every i: broadcast), and adds TO * kw * 4 products into
 *   its kw x 4 f32 sums. At the end the P column ranges' sums are added in
 *   shared memory in a fixed order, and the block writes its partial dW (cb x kh x kw f32)
 *   to workspace row blockIdx.x; a second kernel (dwg_reduce) adds the G rows in order
 *   and rounds to W's dtype. No atomics: the same bits on every run (--deterministic).
 *   G (blocks per channel chunk) depends only on the geometry: at most KILN_DWG_WS_CAP
 *   bytes of partial sums and at most GMAX rows.
 *
 *   Otherwise (NCHW, C % 4 != 0, unaligned, or a patch too large): dwg_generic, a block
 *   per (channel, tap) summing over n, oh, ow (grid-stride), then a fixed tree in shared
 *   memory — slow (every X / dY element read kh * kw times through L2), but any shape.
 *
 * Input gradient dX[n, ih, iw, c] = sum over taps (r, s) of W[c, r, s] * dY[n, oh, ow, c]
 * with oh * sh = ih + pt - r * dh (and the same for ow):
 *
 *   strides 1: the forward depthwise convolution of dY by the flipped filter, pads
 *   (kh - 1) * dh - pt and (kw - 1) * dw - pl: W is flipped into the workspace
 *   (dwgi_flip) and conv_depthwise.cu's forward kernels run it (NHWC C % 8 == 0: the tiled
 *   kernel, a patch in shared memory per block; otherwise its other paths). Pads larger
 *   than the filter's reach (a negative forward pad) take the gather path below.
 *   NHWC, C % 8 == 0, 16-byte aligned, other strides (dwgi_nhwc_vec): a thread per 8
 *   channels of one dX pixel gathers its taps with 16-byte loads of dY, weights from
 *   shared memory as f32 [tap][channel].
 *   Otherwise conv_depthwise.cu's kiln_cuda_conv_depthwise_grad_input (a thread per
 *   element).
 *
 *   Indices: kiln_cuda_conv_depthwise_fits' 32-bit bounds; offsets into X / dY 64-bit.
 */
#include "conv_depthwise.cuh"

#include <stdio.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;
constexpr int QD = 4;       /* channels per quad */
constexpr int TO = 4;       /* weight gradient: outputs per step of a thread's column range */
constexpr int GMAX = 1024;  /* weight gradient: most partial-sum rows */
constexpr size_t SMEM = 48 * 1024; /* the default per-block limit: no opt-in */
constexpr size_t WS_CAP = (size_t)8 << 20; /* weight gradient: partial sums, bytes */

using kiln_dw::Geo;
using kiln_dw::geo32;

template <typename T> struct Quad;
template <> struct Quad<float> { using type = float4; };
template <> struct Quad<__half> { using type = uint2; };
template <> struct Quad<__nv_bfloat16> { using type = uint2; };

template <typename T> __device__ __forceinline__ void quad_f(const T *p, float (&v)[QD]) {
    const typename Quad<T>::type q = *reinterpret_cast<const typename Quad<T>::type *>(p);
    const T *e = reinterpret_cast<const T *>(&q);
#pragma unroll
    for (int k = 0; k < QD; k++) v[k] = to_f(e[k]);
}

/* ---------------------------------------------------------------- weight gradient */

/* The NHWC kernel's tiling (wtile_for). */
struct WTile {
    int QB;             /* channel quads per block: cb = 4 * QB channels */
    int R, OWt;         /* a slab: R output rows x OWt output columns of one image */
    int P, L;           /* column ranges per slab row, and their length (a multiple of TO) */
    int xr, xc, rp;     /* the X patch: rows, columns, row pitch (elements) */
    int rows_t, cols_t; /* slabs per image along OH, OW */
    int slabs, chunks, G;
};

size_t wtile_smem(const WTile &t, size_t es, int kh, int kw) {
    const size_t cb = (size_t)t.QB * QD;
    const size_t stage = (size_t)t.xr * t.rp * es + (size_t)t.R * t.OWt * cb * es;
    const size_t red = (size_t)t.P * cb * kh * kw * sizeof(float);
    return stage > red ? stage : red;
}

/* The tiling of g for the NHWC kernel (element size es), or false when it does not take
 * g: NHWC, C % 4 == 0 (alignment: the caller), the staged slab within SMEM. */
bool wtile_for(const Geo &g, size_t es, WTile *t) {
    if (g.C % QD != 0) return false;
    t->QB = g.C / QD < 4 ? g.C / QD : 4;
    t->R = g.OH < 8 ? g.OH : 8;
    t->OWt = g.OW < 64 ? g.OW : 64;
    for (;;) {
        t->P = THREADS / (t->QB * g.kh);
        const int steps = (t->OWt + TO - 1) / TO;
        if (t->P > steps) t->P = steps;
        if (t->P < 1) t->P = 1;
        t->L = (steps + t->P - 1) / t->P * TO;
        t->P = (t->OWt + t->L - 1) / t->L;
        t->xr = (t->R - 1) * g.sh + (g.kh - 1) * g.dh + 1;
        t->xc = (t->OWt - 1) * g.sw + (g.kw - 1) * g.dw + 1;
        /* row pitch: the lanes of one shared-memory phase take successive kernel rows i
         * (then column ranges), so successive patch rows start one pixel's bytes apart
         * modulo 128 and their quads fall on different banks */
        const int pix_bytes = t->QB * QD * (int)es, row_bytes = t->xc * pix_bytes;
        const int extra = pix_bytes < 128 ? ((pix_bytes - row_bytes % 128) % 128 + 128) % 128 : 0;
        t->rp = (row_bytes + extra) / (int)es;
        if (wtile_smem(*t, es, g.kh, g.kw) <= SMEM) break;
        if (t->R > 1) t->R--;
        else if (t->OWt > 8) t->OWt /= 2;
        else if (t->QB > 1) t->QB--;
        else return false;
    }
    t->rows_t = (g.OH + t->R - 1) / t->R;
    t->cols_t = (g.OW + t->OWt - 1) / t->OWt;
    const int64_t slabs = (int64_t)g.N * t->rows_t * t->cols_t;
    if (slabs > 0x7fffffff) return false;
    t->slabs = (int)slabs;
    t->chunks = (g.C / QD + t->QB - 1) / t->QB;
    const size_t row = (size_t)g.C * g.kh * g.kw * sizeof(float);
    size_t G = WS_CAP / row;
    if (G < 1) G = 1;
    if (G > (size_t)GMAX) G = GMAX;
    if (G > (size_t)t->slabs) G = (size_t)t->slabs;
    t->G = (int)G;
    return t->chunks <= 65535;
}

template <typename T, int KW, bool UNIT>
__global__ void __launch_bounds__(THREADS, 1)
    dwg_nhwc(const T *__restrict__ x, const T *__restrict__ dy, float *__restrict__ part, Geo g, WTile t) {
    extern __shared__ float4 smem4[];
    const int QB = t.QB, cb = QB * QD;
    T *sx = reinterpret_cast<T *>(smem4);                 /* (xr, rp >= xc * cb) */
    T *sd = sx + (size_t)t.xr * t.rp;                     /* (R, OWt, cb): quad-aligned (rp, cb % 4 == 0) */
    const int c_base = blockIdx.y * cb;
    const int tid = threadIdx.x;
    const int q = tid % QB, rest = tid / QB, i = rest % g.kh, p = rest / g.kh; /* p < P: blockDim = QB * kh * P */
    float acc[KW][QD];
#pragma unroll
    for (int j = 0; j < KW; j++)
#pragma unroll
        for (int ch = 0; ch < QD; ch++) acc[j][ch] = 0.f;
    using Q = typename Quad<T>::type;
    Q zq;
    {
        T *e = reinterpret_cast<T *>(&zq);
#pragma unroll
        for (int k = 0; k < QD; k++) e[k] = from_f<T>(0.f);
    }
    const int oa = p * t.L;
    for (int s = blockIdx.x; s < t.slabs; s += gridDim.x) {
        int r_ = s;
        const int ct = r_ % t.cols_t;
        r_ /= t.cols_t;
        const int rt = r_ % t.rows_t;
        const int n = r_ / t.rows_t;
        const int oh0 = rt * t.R, ow0 = ct * t.OWt;
        const int ih0 = oh0 * g.sh - g.pt, iw0 = ow0 * g.sw - g.pl;
        __syncthreads(); /* the last slab's readers are done */
        for (int e = tid; e < t.xr * t.xc * QB; e += blockDim.x) {
            const int qq = e % QB, pix = e / QB;
            const int pr = pix / t.xc, pc = pix - pr * t.xc;
            const int ih = ih0 + pr, iw = iw0 + pc, c = c_base + qq * QD;
            Q v = zq;
            if ((unsigned)ih < (unsigned)g.H && (unsigned)iw < (unsigned)g.W && c < g.C) /* C % 4 == 0: all 4 */
                v = *reinterpret_cast<const Q *>(x + ((size_t)(n * g.H + ih) * g.W + iw) * g.C + c);
            *reinterpret_cast<Q *>(sx + (size_t)pr * t.rp + pc * cb + qq * QD) = v;
        }
        for (int e = tid; e < t.R * t.OWt * QB; e += blockDim.x) {
            const int qq = e % QB, pix = e / QB;
            const int r = pix / t.OWt, oc = pix - r * t.OWt;
            const int oh = oh0 + r, ow = ow0 + oc, c = c_base + qq * QD;
            Q v = zq;
            if (oh < g.OH && ow < g.OW && c < g.C)
                v = *reinterpret_cast<const Q *>(dy + ((size_t)(n * g.OH + oh) * g.OW + ow) * g.C + c);
            *reinterpret_cast<Q *>(sd + (size_t)pix * cb + qq * QD) = v;
        }
        __syncthreads();
        int ob = oa + t.L;
        if (ob > t.OWt) ob = t.OWt;
        if (ob > g.OW - ow0) ob = g.OW - ow0;
        for (int r = 0; r < t.R; r++) {
            if (oh0 + r >= g.OH) break;
            const T *xrow = sx + (size_t)(r * g.sh + i * g.dh) * t.rp + q * QD;
            const T *drow = sd + (size_t)r * t.OWt * cb + q * QD;
            if (UNIT) {
                for (int o = oa; o < ob; o += TO) {
                    const int nv = ob - o; /* outputs of this step that exist (>= 1) */
                    float dv[TO][QD], xv[TO + KW - 1][QD];
#pragma unroll
                    for (int k = 0; k < TO; k++) {
                        if (k < nv) quad_f(drow + (size_t)(o + k) * cb, dv[k]);
                        else {
#pragma unroll
                            for (int ch = 0; ch < QD; ch++) dv[k][ch] = 0.f;
                        }
                    }
#pragma unroll
                    for (int u = 0; u < TO + KW - 1; u++) {
                        /* column o + u of the patch; past what this step uses: not read */
                        if (u < nv + g.kw - 1) quad_f(xrow + (size_t)(o + u) * cb, xv[u]);
                        else {
#pragma unroll
                            for (int ch = 0; ch < QD; ch++) xv[u][ch] = 0.f;
                        }
                    }
#pragma unroll
                    for (int k = 0; k < TO; k++) {
#pragma unroll
                        for (int j = 0; j < KW; j++) {
                            if (k < nv && j < g.kw) { /* no 0 * x: x may be inf */
#pragma unroll
                                for (int ch = 0; ch < QD; ch++)
                                    acc[j][ch] = fmaf(dv[k][ch], xv[k + j][ch], acc[j][ch]);
                            }
                        }
                    }
                }
            } else {
                for (int o = oa; o < ob; o++) {
                    float dv[QD];
                    quad_f(drow + (size_t)o * cb, dv);
#pragma unroll
                    for (int j = 0; j < KW; j++) {
                        if (j >= g.kw) break;
                        float xv[QD];
                        quad_f(xrow + (size_t)(o * g.sw + j * g.dw) * cb, xv);
#pragma unroll
                        for (int ch = 0; ch < QD; ch++) acc[j][ch] = fmaf(dv[ch], xv[ch], acc[j][ch]);
                    }
                }
            }
        }
    }
    /* the P column ranges' sums, added in order p = 0, 1, ... */
    __syncthreads();
    float *red = reinterpret_cast<float *>(smem4); /* (P, cb, kh, kw) */
    const int kk = g.kh * g.kw;
#pragma unroll
    for (int j = 0; j < KW; j++) {
        if (j >= g.kw) break;
#pragma unroll
        for (int ch = 0; ch < QD; ch++) red[((size_t)(p * cb + q * QD + ch) * g.kh + i) * g.kw + j] = acc[j][ch];
    }
    __syncthreads();
    float *out = part + (size_t)blockIdx.x * g.C * kk;
    for (int e = tid; e < cb * kk; e += blockDim.x) {
        const int cl = e / kk, k = e - cl * kk;
        if (c_base + cl >= g.C) continue;
        float sum = 0.f;
        for (int pp = 0; pp < t.P; pp++) sum += red[(size_t)(pp * cb + cl) * kk + k];
        out[(size_t)(c_base + cl) * kk + k] = sum;
    }
}

/* dW[e] = the sum of the G partial rows' element e, in row order; rounded to T. */
template <typename T>
__global__ void __launch_bounds__(THREADS)
    dwg_reduce(const float *__restrict__ part, T *__restrict__ dw, int G, int ck) {
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < ck; e += gridDim.x * blockDim.x) {
        float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
        int r = 0;
        for (; r + 4 <= G; r += 4) {
            s0 += part[(size_t)r * ck + e];
            s1 += part[(size_t)(r + 1) * ck + e];
            s2 += part[(size_t)(r + 2) * ck + e];
            s3 += part[(size_t)(r + 3) * ck + e];
        }
        for (; r < G; r++) s0 += part[(size_t)r * ck + e];
        dw[e] = from_f<T>((s0 + s1) + (s2 + s3));
    }
}

/* Any layout: block (c, tap) sums dY[n, c, oh, ow] * X[n, c, ih, iw] over n, oh, ow
 * (threads strided, ow fastest), then a fixed tree. */
template <typename T, bool NHWC>
__global__ void __launch_bounds__(THREADS)
    dwg_generic(const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ dw, Geo g) {
    __shared__ float red[THREADS];
    const int kk = g.kh * g.kw;
    const int c = blockIdx.x / kk, k = blockIdx.x - c * kk;
    const int ki = k / g.kw, kj = k - ki * g.kw;
    const int total = g.N * g.OH * g.OW;
    float acc = 0.f;
    for (int e = threadIdx.x; e < total; e += blockDim.x) {
        const int ow = e % g.OW, rr = e / g.OW;
        const int oh = rr % g.OH, n = rr / g.OH;
        const int ih = oh * g.sh - g.pt + ki * g.dh, iw = ow * g.sw - g.pl + kj * g.dw;
        if ((unsigned)ih >= (unsigned)g.H || (unsigned)iw >= (unsigned)g.W) continue;
        const size_t yi = NHWC ? ((size_t)(n * g.OH + oh) * g.OW + ow) * g.C + c
                               : ((size_t)(n * g.C + c) * g.OH + oh) * g.OW + ow;
        const size_t xi = NHWC ? ((size_t)(n * g.H + ih) * g.W + iw) * g.C + c
                               : ((size_t)(n * g.C + c) * g.H + ih) * g.W + iw;
        acc = fmaf(to_f(dy[yi]), to_f(x[xi]), acc);
    }
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) red[threadIdx.x] += red[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) dw[blockIdx.x] = from_f<T>(red[0]);
}

bool wvec(const Geo &g, bool nhwc, const void *x, const void *dy, size_t es, WTile *t) {
    return nhwc && aligned16(x, dy) && wtile_for(g, es, t);
}

size_t wgrad_ws(const Geo &g, bool nhwc, size_t es) {
    WTile t;
    if (!nhwc || !wtile_for(g, es, &t)) return 0;
    return (size_t)t.G * g.C * g.kh * g.kw * sizeof(float);
}

template <typename T, int KW>
void launch_wg(kiln_cuda *cu, const Geo &g, const WTile &t, const void *x, const void *dy, float *part) {
    const dim3 grid((unsigned)t.G, (unsigned)t.chunks);
    const int threads = t.QB * t.P * g.kh;
    const size_t smem = wtile_smem(t, sizeof(T), g.kh, g.kw);
    if (g.sw == 1 && g.dw == 1)
        dwg_nhwc<T, KW, true><<<grid, threads, smem, cu->stream>>>((const T *)x, (const T *)dy, part, g, t);
    else
        dwg_nhwc<T, KW, false><<<grid, threads, smem, cu->stream>>>((const T *)x, (const T *)dy, part, g, t);
}

template <typename T>
kiln_status wgrad(kiln_cuda *cu, kiln_context *ctx, const Geo &g, bool nhwc, const void *x, const void *dy, void *dw,
                  void *ws, size_t ws_bytes) {
    WTile t;
    if (wvec(g, nhwc, x, dy, sizeof(T), &t) && ws && ((uintptr_t)ws % 16) == 0) {
        const size_t need = (size_t)t.G * g.C * g.kh * g.kw * sizeof(float);
        if (ws_bytes < need)
            return kiln_fail(ctx, KILN_ERR_INTERNAL,
                             "depthwise weight gradient needs %zu bytes of workspace, got %zu", need, ws_bytes);
        float *part = (float *)ws;
        if (g.kw <= 3) launch_wg<T, 3>(cu, g, t, x, dy, part);
        else if (g.kw <= 5) launch_wg<T, 5>(cu, g, t, x, dy, part);
        else if (g.kw <= 7) launch_wg<T, 7>(cu, g, t, x, dy, part);
        else launch_wg<T, 9>(cu, g, t, x, dy, part);
        KILN_CUDA_LAUNCHED(ctx, "dwg_nhwc (depthwise weight gradient)");
        const int ck = g.C * g.kh * g.kw;
        dwg_reduce<T><<<kiln_cuda_blocks(cu, ck, THREADS), THREADS, 0, cu->stream>>>(part, (T *)dw, t.G, ck);
        KILN_CUDA_LAUNCHED(ctx, "dwg_reduce (depthwise weight gradient)");
        return KILN_OK;
    }
    const unsigned blocks = (unsigned)(g.C * g.kh * g.kw);
    if (nhwc)
        dwg_generic<T, true><<<blocks, THREADS, 0, cu->stream>>>((const T *)x, (const T *)dy, (T *)dw, g);
    else
        dwg_generic<T, false><<<blocks, THREADS, 0, cu->stream>>>((const T *)x, (const T *)dy, (T *)dw, g);
    KILN_CUDA_LAUNCHED(ctx, "dwg_generic (depthwise weight gradient)");
    return KILN_OK;
}

/* ----------------------------------------------------------------- input gradient */

constexpr int CPT = 8;     /* gather kernel: channels per thread */
constexpr int QBI = 16;    /* gather kernel: channel groups per block (128 channels) */
constexpr int KMAX = 9;

/* wf[c, kh-1-r, kw-1-s] = w[c, r, s] */
template <typename T>
__global__ void __launch_bounds__(THREADS) dwgi_flip(const T *__restrict__ w, T *__restrict__ wf, int C, int kh, int kw) {
    const int kk = kh * kw;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < C * kk; e += gridDim.x * blockDim.x) {
        const int c = e / kk, k = e - c * kk, r = k / kw, s = k - r * kw;
        wf[(size_t)c * kk + (kh - 1 - r) * kw + (kw - 1 - s)] = w[e];
    }
}

/* NHWC, C % 8 == 0, dY / dX 16-byte aligned. Grid row blockIdx.y: channels
 * [blockIdx.y * QB * 8, +QB * 8), weights in shared memory as f32 [tap][channel]; thread
 * (qq, t0): channel group qq of dX pixels t0, t0 + THREADS / QB, ... */
template <typename T>
__global__ void __launch_bounds__(THREADS)
    dwgi_nhwc_vec(const T *__restrict__ dy, const T *__restrict__ w, T *__restrict__ dx, Geo g, int QB) {
    extern __shared__ float4 smem4[];
    float *sw = reinterpret_cast<float *>(smem4);
    const int kk = g.kh * g.kw, nc = QB * CPT, cb = blockIdx.y * nc;
    for (int e = threadIdx.x; e < kk * nc; e += blockDim.x) {
        const int k = e / nc, c = cb + (e - k * nc);
        sw[e] = c < g.C ? to_f(w[(size_t)c * kk + k]) : 0.f;
    }
    __syncthreads(); /* the only barrier */
    const int per_block = THREADS / QB;
    const int qq = threadIdx.x % QB, t0 = threadIdx.x / QB, c0 = cb + qq * CPT;
    if (t0 >= per_block || c0 >= g.C) return;
    using V = typename VecOf<T>::type;
    constexpr int NV = VecOf<T>::N;
    const int pixels = g.N * g.H * g.W;
    for (int pix = blockIdx.x * per_block + t0; pix < pixels; pix += gridDim.x * per_block) {
        const int iw = pix % g.W, rr = pix / g.W;
        const int ih = rr % g.H, n = rr / g.H;
        float acc[CPT];
#pragma unroll
        for (int ch = 0; ch < CPT; ch++) acc[ch] = 0.f;
        for (int r = 0; r < g.kh; r++) {
            const int th = ih + g.pt - r * g.dh; /* oh * sh */
            if (th < 0) break;
            const int oh = th / g.sh;
            if (oh * g.sh != th || oh >= g.OH) continue;
            for (int s = 0; s < g.kw; s++) {
                const int tw = iw + g.pl - s * g.dw;
                if (tw < 0) break;
                const int ow = tw / g.sw;
                if (ow * g.sw != tw || ow >= g.OW) continue;
                const V *q = reinterpret_cast<const V *>(dy + ((size_t)(n * g.OH + oh) * g.OW + ow) * g.C + c0);
                const float *wt = sw + (r * g.kw + s) * nc + qq * CPT;
#pragma unroll
                for (int vv = 0; vv < CPT / NV; vv++) {
                    const V u = q[vv];
#pragma unroll
                    for (int e = 0; e < NV; e++) acc[vv * NV + e] = fmaf(to_f(u.v[e]), wt[vv * NV + e], acc[vv * NV + e]);
                }
            }
        }
        V *o = reinterpret_cast<V *>(dx + (size_t)pix * g.C + c0);
#pragma unroll
        for (int vv = 0; vv < CPT / NV; vv++) {
            V u;
#pragma unroll
            for (int e = 0; e < NV; e++) u.v[e] = from_f<T>(acc[vv * NV + e]);
            o[vv] = u;
        }
    }
}

/* The forward geometry whose output is dX (strides 1), false when a pad exceeds the
 * filter's reach. */
bool flipped_geo(const kiln_cuda_dw_geo *g, kiln_cuda_dw_geo *f) {
    if (g->sh != 1 || g->sw != 1) return false;
    *f = *g;
    f->H = g->OH;
    f->W = g->OW;
    f->OH = g->H;
    f->OW = g->W;
    f->pt = (g->kh - 1) * g->dh - g->pt;
    f->pl = (g->kw - 1) * g->dw - g->pl;
    if (f->pt < 0 || f->pl < 0) return false;
    char why[160];
    return kiln_cuda_conv_depthwise_fits(f, why, sizeof why);
}

template <typename T>
kiln_status grad_input_vec(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const void *dy, const void *w, void *dx) {
    const int Q = g.C / CPT, QB = Q < QBI ? Q : QBI;
    const int per_block = THREADS / QB;
    const unsigned bx = kiln_cuda_blocks(cu, ((int64_t)g.N * g.H * g.W + per_block - 1) / per_block * THREADS, THREADS);
    const dim3 grid(bx, (unsigned)((Q + QB - 1) / QB));
    const size_t smem = (size_t)g.kh * g.kw * QB * CPT * sizeof(float);
    dwgi_nhwc_vec<T><<<grid, THREADS, smem, cu->stream>>>((const T *)dy, (const T *)w, (T *)dx, g, QB);
    KILN_CUDA_LAUNCHED(ctx, "dwgi_nhwc_vec (depthwise input gradient)");
    return KILN_OK;
}

template <typename T>
kiln_status flip(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const void *w, void *wf) {
    const int n = g.C * g.kh * g.kw;
    dwgi_flip<T><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((const T *)w, (T *)wf, g.C, g.kh, g.kw);
    KILN_CUDA_LAUNCHED(ctx, "dwgi_flip (depthwise input gradient)");
    return KILN_OK;
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" size_t kiln_cuda_conv_depthwise_wgrad_ws(const kiln_cuda_dw_geo *g, kiln_dtype dt) {
    char why[160];
    if (!kiln_cuda_float_dtype(dt) || !kiln_cuda_conv_depthwise_fits(g, why, sizeof why)) return 0;
    return wgrad_ws(geo32(g), g->nhwc, kiln_dtype_size(dt));
}

extern "C" kiln_status kiln_cuda_conv_depthwise_wgrad(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt,
                                                      const kiln_cuda_dw_geo *g, const void *x, const void *dy,
                                                      void *dw, void *ws, size_t ws_bytes) {
    char why[160];
    if (!kiln_cuda_conv_depthwise_fits(g, why, sizeof why))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "depthwise weight gradient: %s", why);
    if ((int64_t)g->C * g->kh * g->kw > 0x7fffffff)
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "depthwise weight gradient: %lld channels", (long long)g->C);
    const Geo g32 = geo32(g);
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, ctx, dt, wgrad, cu, ctx, g32, g->nhwc, x, dy, dw, ws, ws_bytes);
    return st;
}

extern "C" size_t kiln_cuda_conv_depthwise_dgrad_ws(const kiln_cuda_dw_geo *g, kiln_dtype dt) {
    kiln_cuda_dw_geo f;
    if (!kiln_cuda_float_dtype(dt) || !flipped_geo(g, &f)) return 0;
    return align256((size_t)g->C * g->kh * g->kw * kiln_dtype_size(dt));
}

extern "C" kiln_status kiln_cuda_conv_depthwise_dgrad(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt,
                                                      const kiln_cuda_dw_geo *g, const void *dy, const void *w,
                                                      void *dx, void *ws, size_t ws_bytes) {
    char why[160];
    if (!kiln_cuda_conv_depthwise_fits(g, why, sizeof why))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "depthwise input gradient: %s", why);
    const Geo g32 = geo32(g);
    kiln_status st;
    kiln_cuda_dw_geo f;
    const size_t fbytes = (size_t)g->C * g->kh * g->kw * kiln_dtype_size(dt);
    if (flipped_geo(g, &f) && ws && ws_bytes >= fbytes) {
        KILN_CU_FLOAT_DISPATCH(st, ctx, dt, flip, cu, ctx, g32, w, ws);
        if (st) return st;
        return kiln_cuda_conv_depthwise_forward(cu, ctx, dt, &f, dy, ws, NULL, NULL, NULL, KILN_CUDA_DW_TILED, dx);
    }
    if (g->nhwc && g->C % CPT == 0 && aligned16(dy, dx) && g->kh <= KMAX && g->kw <= KMAX) {
        KILN_CU_FLOAT_DISPATCH(st, ctx, dt, grad_input_vec, cu, ctx, g32, dy, w, dx);
        return st;
    }
    return kiln_cuda_conv_depthwise_grad_input(cu, ctx, dt, g, dy, w, dx);
}
