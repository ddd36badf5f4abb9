/*
 * conv_depthwise.cu — depthwise convolutions (group == C == M: one filter per channel,
 * channel multiplier 1) by kiln's own kernels instead of cuDNN, which runs them far from
 * the memory bound (on an H200, batch 256, f16 NHWC: convnext_tiny's 7x7 depthwise
 * [256,96,56,56] 9.8 ms, 31 GB/s, where the bytes take ~0.07 ms). conv.c dispatches here
 * when kiln_cuda's conv_depthwise is on and kiln_cuda_conv_depthwise_fits takes the shape;
 * the contract is kiln_cuda_dw_geo's (cuda_internal.h).
 *
 *   y = act(conv(x, w) + b + z): X, Y and Z (N, C, H, W) / (N, C, OH, OW) NCHW or NHWC,
 *   W (C, 1, kh, kw) (the same bytes in both layouts), kh, kw <= 9, any strides and
 *   dilations, taps outside X read zero (any pads, asymmetric too, with no padded copy).
 *   b and z may be NULL; act: every activation of kiln.FusedConv (kiln_cuda_act). f32,
 *   f16 and bf16, accumulated in f32 (exact FMA), rounded once to the dtype.
 *
 *   NHWC, C a multiple of 8 and X, Y, Z 16-byte aligned (the fp16 plans' case): a thread
 *   computes 8 consecutive channels (16-byte loads and stores of f16 / bf16, two of f32)
 *   of TW = 4 neighbouring output pixels of one row. A block takes QB <= 16 channel groups
 *   (its grid row) of THREADS / QB pixel tiles at a time, channel groups fastest, so a warp
 *   reads and writes contiguous runs of a pixel's channels; the block's weights sit in
 *   shared memory as f32 [tap][channel] and a row of them is moved to registers per kernel
 *   row. With stride 1 and dilation 1 the TW + kw - 1 input pixels of a kernel row are
 *   each loaded once and given to every output that uses them (a sliding window: 10 loads
 *   for 28 taps of a 7x7); otherwise each tap is loaded (L1 keeps the overlap). The tap
 *   loops are unrolled to KW = 3, 5, 7 or 9 columns, weights past kw being zero.
 *
 *   That per-tile kernel reads every tap through L1/L2 (each input pixel ~17 times for a
 *   7x7) and ran convnext_tiny's f16[256,96,56,56] 7x7 in 1.01 ms on an H100 (~300 GB/s,
 *   ~9x its FMA floor). With strides 1 or 2 and dilation 1 the tiled kernel (dw_nhwc_tiled)
 *   copies each block's input patch into shared memory once and slides along it, 8
 *   outputs x 4 channels a thread, 88 registers and no spill (the per-tile 7x7 spills).
 *   Which one runs is conv.c's choice (dw_faster): with autotune the tiled, the per-tile
 *   and cuDNN's path are each timed once per problem and the fastest kept; without, the
 *   tiled kernel where it takes the problem.
 *
 *   The tiled kernel is compiled for the exact kernel widths 3, 5 and 7 (a kernel row one
 *   branch-free run of vector loads and FMAs; other widths guarded at run time). For those
 *   widths the pipelined kernel (dw_nhwc_pipe) keeps its blocks resident and copies the next
 *   tile's patch with cp.async while computing the current one: faster than the tiled
 *   kernel on some shapes (convnext's 7x7 at 28x28: 0.25 against 0.35 ms), slower on others
 *   (efficientnet's 3x3 144@56: 0.58 against 0.40; an H200, bench/NOTES.md z20b / z20c), so
 *   conv.c times it as one more candidate. Both run the epilogue (residual, activation,
 *   store) behind one dispatch on the activation per thread: a switch per output value cost
 *   a 3x3 more than its FMAs (1.05 -> 0.40 ms when it went).
 *
 *   Otherwise (NCHW, or NHWC with C % 8 != 0 or unaligned buffers): a thread per output
 *   element, neighbouring threads on neighbouring elements of Y's layout (coalesced), the
 *   taps read through L1.
 *
 *   Input gradient (kiln.ConvGradInput): a thread per element of dX gathers the outputs
 *   whose windows touch it (the convolution of dY with the flipped filter, strides and
 *   dilations included), no atomics.
 *
 *   Indices are 32-bit (kiln_cuda_conv_depthwise_fits checks that they fit), offsets of
 *   the vector path 64-bit.
 */
#include "conv_depthwise.cuh"
#include "act.cuh"
#include "cp_async.cuh"

#include <stdio.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;
constexpr int CPT = 8;     /* vector path: channels per thread */
constexpr int TW = 4;      /* vector path: output pixels along W per thread */
constexpr int QB_MAX = 16; /* vector path: channel groups per block */
constexpr int KMAX = 9;    /* the largest kh and kw */
constexpr int64_t LIM = 0x3fffffff; /* 32-bit indices with a factor 2 spare */

using kiln_dw::Geo;
using kiln_dw::geo32;
using kiln_act::Epi;
using kiln_act::act_of;
using kiln_act::act_dispatch;
using kiln_act::act_apply;

/* 8 consecutive elements of T at p (16-byte aligned) as floats, and back. */
template <typename T> __device__ __forceinline__ void load8(const T *__restrict__ p, float (&v)[CPT]) {
    using V = typename VecOf<T>::type;
    constexpr int NV = VecOf<T>::N;
    const V *q = reinterpret_cast<const V *>(p);
#pragma unroll
    for (int c = 0; c < CPT / NV; c++) {
        const V u = q[c];
#pragma unroll
        for (int e = 0; e < NV; e++) v[c * NV + e] = to_f(u.v[e]);
    }
}

template <typename T> __device__ __forceinline__ void store8(T *p, const float (&v)[CPT]) {
    using V = typename VecOf<T>::type;
    constexpr int NV = VecOf<T>::N;
    V *q = reinterpret_cast<V *>(p);
#pragma unroll
    for (int c = 0; c < CPT / NV; c++) {
        V u;
#pragma unroll
        for (int e = 0; e < NV; e++) u.v[e] = from_f<T>(v[c * NV + e]);
        q[c] = u;
    }
}

constexpr int TCH = 4; /* tiled: channels per thread */

template <typename T> struct Quad;
template <> struct Quad<float> { using type = float4; };
template <> struct Quad<__half> { using type = uint2; };
template <> struct Quad<__nv_bfloat16> { using type = uint2; };

/* The quad at p (8- or 16-byte aligned, shared or global memory) as floats: one vector
 * load, converted in registers (a quad read through a reference to its elements compiled to
 * four 2-byte loads, each waited for before its FMAs: bench/NOTES.md, twentieth session). */
__device__ __forceinline__ void quad_ld(const float *p, float (&v)[TCH]) {
    const float4 q = *reinterpret_cast<const float4 *>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}
__device__ __forceinline__ void quad_ld(const __half *p, float (&v)[TCH]) {
    const uint2 q = *reinterpret_cast<const uint2 *>(p);
    v[0] = __half2float(__ushort_as_half((unsigned short)(q.x & 0xffffu)));
    v[1] = __half2float(__ushort_as_half((unsigned short)(q.x >> 16)));
    v[2] = __half2float(__ushort_as_half((unsigned short)(q.y & 0xffffu)));
    v[3] = __half2float(__ushort_as_half((unsigned short)(q.y >> 16)));
}
__device__ __forceinline__ void quad_ld(const __nv_bfloat16 *p, float (&v)[TCH]) {
    const uint2 q = *reinterpret_cast<const uint2 *>(p);
    v[0] = __uint_as_float(q.x << 16), v[1] = __uint_as_float(q.x & 0xffff0000u);
    v[2] = __uint_as_float(q.y << 16), v[3] = __uint_as_float(q.y & 0xffff0000u);
}

template <typename T> __device__ __forceinline__ typename Quad<T>::type quad_of(const float (&v)[TCH]) {
    typename Quad<T>::type q;
    T *e = reinterpret_cast<T *>(&q);
#pragma unroll
    for (int k = 0; k < TCH; k++) e[k] = from_f<T>(v[k]);
    return q;
}

/* A thread's outputs in vectors of W channels (8: the per-tile kernel, load8 / store8; 4: the
 * tiled ones, quads), one overload each. */
template <typename T> __device__ __forceinline__ void vec_ld(const T *p, float (&v)[CPT]) { load8(p, v); }
template <typename T> __device__ __forceinline__ void vec_st(T *p, const float (&v)[CPT]) { store8(p, v); }
template <typename T> __device__ __forceinline__ void vec_ld(const T *p, float (&v)[TCH]) { quad_ld(p, v); }
template <typename T> __device__ __forceinline__ void vec_st(T *p, const float (&v)[TCH]) {
    *reinterpret_cast<typename Quad<T>::type *>(p) = quad_of<T>(v);
}

/* The epilogue of a thread's R x W outputs (act_dispatch's functor, so the activation is
 * chosen once, not per value): per output pixel j (the first nj of them), + the residual, the
 * activation, the store; pixel j at off0 + j * C. */
template <typename T, int R, int W> struct EpiRows {
    float (&acc)[R][W];
    const Epi &e;
    const T *__restrict__ z;
    T *__restrict__ y;
    size_t off0;
    int C, nj;
    template <int A> __device__ __forceinline__ void operator()() const {
#pragma unroll
        for (int j = 0; j < R; j++) {
            if (j >= nj) break;
            const size_t off = off0 + (size_t)j * C;
            if (z) {
                float v[W];
                vec_ld(z + off, v);
#pragma unroll
                for (int k = 0; k < W; k++) acc[j][k] += v[k];
            }
#pragma unroll
            for (int k = 0; k < W; k++) acc[j][k] = act_of<A, sizeof(T) == 2>(acc[j][k], e);
            vec_st(y + off, acc[j]);
        }
    }
};

/* NHWC, C % 8 == 0, X / Y / Z 16-byte aligned. Grid row blockIdx.y: channels
 * [blockIdx.y * QB * 8, +QB * 8); thread (qq, t0) = (threadIdx.x % QB, threadIdx.x / QB)
 * takes channel group qq of tiles t0, t0 + THREADS / QB, ... of the block's share. A tile
 * is TW output pixels (n, oh, ow0 .. ow0 + TW) of a row, tiles_w of them per row. */
template <typename T, int KW, bool UNIT>
__global__ void __launch_bounds__(THREADS, 2)
    dw_nhwc_vec(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b, const T *__restrict__ z,
                T *__restrict__ y, Geo g, int QB, int tiles_w, int tiles, Epi e) {
    extern __shared__ float4 smem4[];
    float *sw = reinterpret_cast<float *>(smem4);
    const int kk = g.kh * g.kw, nc = QB * CPT, cb = blockIdx.y * nc;
    for (int i = threadIdx.x; i < kk * nc; i += blockDim.x) {
        const int k = i / nc, c = cb + (i - k * nc);
        sw[i] = c < g.C ? to_f(w[(size_t)c * kk + k]) : 0.f;
    }
    __syncthreads(); /* the only barrier: threads may leave below */
    const int per_block = THREADS / QB;
    const int qq = threadIdx.x % QB, t0 = threadIdx.x / QB;
    const int c0 = cb + qq * CPT;
    if (t0 >= per_block || c0 >= g.C) return; /* C % 8 == 0: c0 < C has all 8 channels */
    for (int t = blockIdx.x * per_block + t0; t < tiles; t += gridDim.x * per_block) {
        const int owt = t % tiles_w, row = t / tiles_w;
        const int oh = row % g.OH, n = row / g.OH;
        const int ow0 = owt * TW;
        float acc[TW][CPT];
#pragma unroll
        for (int ch = 0; ch < CPT; ch++) {
            const float bc = b ? to_f(b[c0 + ch]) : 0.f; /* re-read per tile: fewer registers */
#pragma unroll
            for (int j = 0; j < TW; j++) acc[j][ch] = bc;
        }
        const int ih0 = oh * g.sh - g.pt, iw0 = ow0 * g.sw - g.pl;
        for (int r = 0; r < g.kh; r++) {
            const int ih = ih0 + r * g.dh;
            if ((unsigned)ih >= (unsigned)g.H) continue;
            float wr[KW][CPT];
#pragma unroll
            for (int s = 0; s < KW; s++) {
                if (s < g.kw) {
                    const float4 *wq = reinterpret_cast<const float4 *>(sw + (r * g.kw + s) * nc + qq * CPT);
                    const float4 w0 = wq[0], w1 = wq[1];
                    wr[s][0] = w0.x, wr[s][1] = w0.y, wr[s][2] = w0.z, wr[s][3] = w0.w;
                    wr[s][4] = w1.x, wr[s][5] = w1.y, wr[s][6] = w1.z, wr[s][7] = w1.w;
                } else {
#pragma unroll
                    for (int ch = 0; ch < CPT; ch++) wr[s][ch] = 0.f;
                }
            }
            const T *xrow = x + (size_t)(n * g.H + ih) * g.W * g.C + c0;
            if (UNIT) {
                /* stride 1, dilation 1: input column iw0 + u feeds output j with tap s = u - j */
                const int span = TW + g.kw - 1;
#pragma unroll
                for (int u = 0; u < TW + KW - 1; u++) {
                    const int iw = iw0 + u;
                    if (u >= span || (unsigned)iw >= (unsigned)g.W) continue;
                    float v[CPT];
                    load8(xrow + (size_t)iw * g.C, v);
#pragma unroll
                    for (int j = 0; j < TW; j++) {
                        const int s = u - j;
                        if (s < 0 || s >= KW) continue; /* compile-time after unrolling */
                        if (s >= g.kw) continue;        /* a zero weight, but 0 * inf is NaN */
#pragma unroll
                        for (int ch = 0; ch < CPT; ch++) acc[j][ch] = fmaf(v[ch], wr[s][ch], acc[j][ch]);
                    }
                }
            } else {
#pragma unroll
                for (int s = 0; s < KW; s++) {
                    if (s >= g.kw) break;
#pragma unroll
                    for (int j = 0; j < TW; j++) {
                        const int iw = iw0 + j * g.sw + s * g.dw;
                        if ((unsigned)iw >= (unsigned)g.W) continue;
                        float v[CPT];
                        load8(xrow + (size_t)iw * g.C, v);
#pragma unroll
                        for (int ch = 0; ch < CPT; ch++) acc[j][ch] = fmaf(v[ch], wr[s][ch], acc[j][ch]);
                    }
                }
            }
        }
        const size_t off0 = ((size_t)(n * g.OH + oh) * g.OW + ow0) * g.C + c0;
        act_dispatch(e.act, EpiRows<T, TW, CPT>{acc, e, z, y, off0, g.C, g.OW - ow0 < TW ? g.OW - ow0 : TW});
    }
}

/* Tiled NHWC (stride S = 1 or 2 both ways, dilation 1, C % 8 == 0, X / Y / Z 16-byte
 * aligned). A block takes an output tile of th rows x nct * TT columns x cb = 4 * qb
 * channels of one image: it first copies the input patch under it, ((th - 1) * S + kh) x
 * ((nct * TT - 1) * S + kw) pixels x cb channels, into shared memory once (zeros outside X:
 * the pads), then each thread computes TT = 8 neighbouring outputs of a row for 4 channels
 * from there, sliding along the row (an input column is read once for the TT outputs that
 * use it), with one kernel row of weights in registers at a time. A warp's lanes take qb channel quads of successive
 * output rows (then the next column tile), and the patch's row pitch is padded so that
 * those rows' quads fall on different banks.
 * Blocks: (N, row tiles, column tiles, channel chunks) flattened into blockIdx.x. */
constexpr int PL = 8;  /* tiled: patch loads in flight per thread */
constexpr int TT = 8;  /* tiled: outputs along W per thread */

struct Tile {
    int stages;                               /* patches in shared memory: 1 tiled, 2 pipelined */
    int th, nct, qb, rows_t, cols_t, chunks; /* rows_t, cols_t, chunks: tiles per image */
    int ph, pw, rp;                           /* patch rows, columns, row pitch (elements) */
};

/* Channels [c_base, c_base + cb) of the weights (C, 1, kk taps) into sw as f32 [tap][channel]
 * (zeros past C), PL loads in flight per thread. */
template <typename T>
__device__ __forceinline__ void load_weights(float *sw, const T *__restrict__ w, int kk, int cb, int c_base, int C) {
    for (int i0 = threadIdx.x; i0 < kk * cb; i0 += PL * blockDim.x) {
        float v[PL];
#pragma unroll
        for (int l = 0; l < PL; l++) {
            const int i = i0 + l * blockDim.x, k = i / cb, c = c_base + (i - k * cb);
            v[l] = i < kk * cb && c < C ? to_f(w[(size_t)c * kk + k]) : 0.f;
        }
#pragma unroll
        for (int l = 0; l < PL; l++)
            if (i0 + l * blockDim.x < kk * cb) sw[i0 + l * blockDim.x] = v[l];
    }
}


/* A thread's walk over a patch's items, item i = (pr * pw + pc) * upp + u (unit u of patch
 * pixel (pr, pc)), from threadIdx.x in steps of blockDim.x: the step's carries instead of two
 * divisions per item. */
struct PatchWalk {
    int u, pr, pc;                /* the current item */
    int upp, pw, du, dpc, dpr;    /* units a pixel, pixels a row; the step */
    __device__ __forceinline__ PatchWalk(int upp_, int pw_) : upp(upp_), pw(pw_) {
        const int bd = blockDim.x, dpix = bd / upp, pix = threadIdx.x / upp;
        du = bd % upp;
        dpr = dpix / pw;
        dpc = dpix - dpr * pw;
        u = threadIdx.x % upp;
        pr = pix / pw;
        pc = pix - pr * pw;
    }
    __device__ __forceinline__ void step() {
        u += du;
        pc += dpc;
        if (u >= upp) u -= upp, pc++;
        pr += dpr;
        if (pc >= pw) pc -= pw, pr++;
    }
};

/* Spatial tile t of a (n, row tile, column tile) order: its image and first output row and column. */
__device__ __forceinline__ void tile_origin(const Tile &tl, int t, int *n, int *oh0, int *ow0) {
    const int ctile = t % tl.cols_t, rest = t / tl.cols_t;
    *n = rest / tl.rows_t;
    *oh0 = (rest - *n * tl.rows_t) * tl.th;
    *ow0 = ctile * tl.nct * TT;
}

/* One output tile of th rows x nct * TT columns x cb channels of image n from its staged
 * patch sp (the weights in sw): what dw_nhwc_tiled and dw_nhwc_pipe share. */
template <typename T, int KW, int S, bool EXACT>
__device__ __forceinline__ void tile_compute(const T *sp, const float *sw, const T *__restrict__ b,
                                             const T *__restrict__ z, T *__restrict__ y, const Geo &g,
                                             const Tile &tl, const Epi &e, int n, int oh0, int ow0, int c_base) {
    const int kw = EXACT ? KW : g.kw, cb = tl.qb * TCH, qb = tl.qb;
    const int items = qb * tl.th * tl.nct;
    for (int it = threadIdx.x; it < items; it += blockDim.x) {
        const int qq = it % qb, rest = it / qb;
        const int r0 = rest % tl.th, ct = rest / tl.th;
        const int oh = oh0 + r0, owa = ow0 + ct * TT, c0 = c_base + qq * TCH;
        if (oh >= g.OH || owa >= g.OW || c0 >= g.C) continue;
        float acc[TT][TCH];
#pragma unroll
        for (int k = 0; k < TCH; k++) {
            const float bc = b ? to_f(b[c0 + k]) : 0.f;
#pragma unroll
            for (int j = 0; j < TT; j++) acc[j][k] = bc;
        }
        const int span = (TT - 1) * S + kw;
        for (int r = 0; r < g.kh; r++) {
            float wr[KW][TCH];
#pragma unroll
            for (int s2 = 0; s2 < KW; s2++) {
                if (s2 < kw) {
                    const float4 wq = *reinterpret_cast<const float4 *>(sw + (r * kw + s2) * cb + qq * TCH);
                    wr[s2][0] = wq.x, wr[s2][1] = wq.y, wr[s2][2] = wq.z, wr[s2][3] = wq.w;
                } else {
#pragma unroll
                    for (int k = 0; k < TCH; k++) wr[s2][k] = 0.f;
                }
            }
            const T *prow = sp + (size_t)(r0 * S + r) * tl.rp + (ct * TT * S) * cb + qq * TCH;
#pragma unroll
            for (int u = 0; u < (TT - 1) * S + KW; u++) {
                if (!EXACT && u >= span) continue;
                float v[TCH];
                quad_ld(prow + u * cb, v);
#pragma unroll
                for (int j = 0; j < TT; j++) {
                    const int s2 = u - j * S;
                    if (s2 < 0 || s2 >= KW) continue; /* compile-time after unrolling */
                    if (!EXACT && s2 >= kw) continue; /* a zero weight, but 0 * inf is NaN */
#pragma unroll
                    for (int k = 0; k < TCH; k++) acc[j][k] = fmaf(v[k], wr[s2][k], acc[j][k]);
                }
            }
        }
        /* one dispatch on the activation for all TT x TCH outputs (a switch per value compiled
         * to 128 indirect branches) */
        const size_t off0 = ((size_t)(n * g.OH + oh) * g.OW + owa) * g.C + c0;
        act_dispatch(e.act, EpiRows<T, TT, TCH>{acc, e, z, y, off0, g.C, g.OW - owa < TT ? g.OW - owa : TT});
    }
}

/* EXACT: g.kw == KW, known when compiled: each kernel row is one branch-free run of
 * (TT - 1) * S + KW vector loads and TT * KW * TCH FMAs that the compiler schedules as a
 * whole (KW 3, 5, 7). Otherwise kw <= KW is read at run time and every tap is guarded (the
 * other widths; the loads wait in turn: ~4x slower). */
template <typename T, int KW, int S, bool EXACT>
__global__ void __launch_bounds__(THREADS, 2)
    dw_nhwc_tiled(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b, const T *__restrict__ z,
                  T *__restrict__ y, Geo g, Tile tl, Epi e) {
    using Q = typename Quad<T>::type;
    extern __shared__ float4 smem4[];
    const int kw = EXACT ? KW : g.kw;
    const int cb = tl.qb * TCH, kk = g.kh * kw;
    float *sw = reinterpret_cast<float *>(smem4); /* (kk, cb) */
    T *sp = reinterpret_cast<T *>(sw + kk * cb);  /* (ph, rp >= pw * cb); kk * cb * 4 bytes: 16-byte aligned */
    int bi = blockIdx.x;
    const int chunk = bi % tl.chunks;
    bi /= tl.chunks;
    const int ctile = bi % tl.cols_t;
    bi /= tl.cols_t;
    const int rtile = bi % tl.rows_t;
    const int n = bi / tl.rows_t;
    const int c_base = chunk * cb, oh0 = rtile * tl.th, ow0 = ctile * tl.nct * TT;
    const int ih0 = oh0 * S - g.pt, iw0 = ow0 * S - g.pl;
    load_weights(sw, w, kk, cb, c_base, g.C);
    /* the patch, a quad (4 channels: 8 or 16 bytes) at a time, quads of a pixel together;
     * PL loads in flight per thread before any is stored (one at a time, the ~15 round
     * trips of a 7x7 patch to L2 / DRAM each waited in turn: the block's load phase took
     * longer than its arithmetic). Item i is quad q of patch pixel (pr, pc), i = (pr * pw +
     * pc) * qb + q; a thread's items step by blockDim.x, walked with carries (no division
     * per item). */
    const int qb = tl.qb, nq = tl.ph * tl.pw * qb, bd = blockDim.x;
    PatchWalk walk(qb, tl.pw);
    for (int i0 = threadIdx.x; i0 < nq; i0 += PL * bd) {
        Q v[PL];
        int so[PL]; /* each item's offset in the patch */
#pragma unroll
        for (int l = 0; l < PL; l++) {
            const int i = i0 + l * bd;
            const int ih = ih0 + walk.pr, iw = iw0 + walk.pc, c = c_base + walk.u * TCH;
            /* C % 8 == 0: a quad inside X is inside whole */
            if (i < nq && (unsigned)ih < (unsigned)g.H && (unsigned)iw < (unsigned)g.W && c < g.C)
                v[l] = *reinterpret_cast<const Q *>(x + ((size_t)(n * g.H + ih) * g.W + iw) * g.C + c);
            else {
                const float zero[TCH] = {0.f, 0.f, 0.f, 0.f};
                v[l] = quad_of<T>(zero);
            }
            so[l] = walk.pr * tl.rp + walk.pc * cb + walk.u * TCH;
            walk.step();
        }
#pragma unroll
        for (int l = 0; l < PL; l++)
            if (i0 + l * bd < nq) *reinterpret_cast<Q *>(sp + so[l]) = v[l];
    }
    __syncthreads();
    tile_compute<T, KW, S, EXACT>(sp, sw, b, z, y, g, tl, e, n, oh0, ow0, c_base);
}

/* Pipelined NHWC (kw = KW in 3, 5, 7; stride S = 1 or 2 both ways, dilation 1, C % 8 == 0,
 * X / Y / Z 16-byte aligned). The tiled kernel's tiles and arithmetic (tile_compute), but a
 * block stays resident: grid row blockIdx.y is its channel chunk (its weights loaded once),
 * and it takes the chunk's spatial tiles blockIdx.x, + gridDim.x, ... in turn, copying the
 * next tile's patch into the second of two shared buffers with cp.async (16 bytes a copy,
 * zero-filled outside X: the pads) while it computes the current one, where the tiled
 * kernel copies a patch, waits at a barrier, then computes. Which is faster depends on the
 * shape (bench/NOTES.md z20b / z20c): conv.c times both. */
template <typename T, int KW, int S>
__global__ void __launch_bounds__(THREADS, 2)
    dw_nhwc_pipe(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b, const T *__restrict__ z,
                 T *__restrict__ y, Geo g, Tile tl, Epi e) {
    constexpr int UE = 16 / (int)sizeof(T); /* elements a 16-byte copy moves */
    extern __shared__ float4 smem4[];
    const int cb = tl.qb * TCH, kk = g.kh * KW;
    float *sw = reinterpret_cast<float *>(smem4);                 /* (kk, cb) */
    T *const sp0 = reinterpret_cast<T *>(sw + kk * cb);           /* two patches (ph, rp) */
    T *const sp1 = sp0 + tl.ph * tl.rp;                           /* rp * sizeof(T) % 16 == 0 */
    const int c_base = blockIdx.y * cb, tiles = g.N * tl.rows_t * tl.cols_t;
    load_weights(sw, w, kk, cb, c_base, g.C);
    /* a patch's copies: unit u (UE channels) of each pixel, a thread's items walked from its first */
    const int upp = cb / UE, nu = tl.ph * tl.pw * upp;
    const PatchWalk first(upp, tl.pw);
    auto stage = [&](int t, T *buf) {
        int n, oh0, ow0;
        tile_origin(tl, t, &n, &oh0, &ow0);
        const int ih0 = oh0 * S - g.pt, iw0 = ow0 * S - g.pl;
        PatchWalk walk = first;
        for (int i = threadIdx.x; i < nu; i += blockDim.x) {
            const int ih = ih0 + walk.pr, iw = iw0 + walk.pc, c = c_base + walk.u * UE;
            /* C % 8 == 0 and c % UE == 0: a unit inside X is inside whole */
            const bool in = (unsigned)ih < (unsigned)g.H && (unsigned)iw < (unsigned)g.W && c < g.C;
            const T *src = in ? x + ((size_t)(n * g.H + ih) * g.W + iw) * g.C + c : x;
            cp_async16(smem_u32(buf + walk.pr * tl.rp + walk.pc * cb + walk.u * UE), src, in ? 16 : 0);
            walk.step();
        }
    };
    int t = blockIdx.x;
    if (t < tiles) stage(t, sp0);
    cp_async_commit();
    for (int k = 0; t < tiles; k++, t += gridDim.x) {
        T *cur = (k & 1) ? sp1 : sp0;
        if (t + (int)gridDim.x < tiles) stage(t + gridDim.x, (k & 1) ? sp0 : sp1);
        cp_async_commit(); /* (an empty group on the last tile: the wait below stays one behind) */
        cp_async_wait<1>(); /* this tile's patch is in (for this thread's copies) */
        __syncthreads();    /* ... and every thread's, and the weights */
        int n, oh0, ow0;
        tile_origin(tl, t, &n, &oh0, &ow0);
        tile_compute<T, KW, S, true>(cur, sw, b, z, y, g, tl, e, n, oh0, ow0, c_base);
        __syncthreads(); /* every thread is done with cur before the next tile's copies refill it */
    }
}

/* The largest shared memory a tiled block may use (no opt-in beyond the default 48 KiB). */
constexpr size_t TILE_SMEM = 48 * 1024;

size_t tile_smem(const Geo &g, const Tile &t, size_t es) {
    return (size_t)g.kh * g.kw * t.qb * TCH * sizeof(float) + (size_t)t.stages * t.ph * t.rp * es;
}

/* The tiled kernel's tile for g (element size es; stages patches: 1 tiled, 2 pipelined), or
 * false when it does not take g: NHWC, stride 1 or 2 (the same both ways), dilation 1,
 * C % 8 == 0 (checked by the caller, with alignment), and a tile that fits TILE_SMEM.
 * Columns: column tiles of TT outputs, at most 8 (64 columns) per block, spread evenly;
 * rows: up to 8; channels: as many quads as fill ~THREADS threads, fewer while the patches
 * do not fit. */
bool tile_for(const Geo &g, size_t es, int stages, Tile *t) {
    t->stages = stages;
    const int S = g.sh;
    if ((S != 1 && S != 2) || g.sw != S || g.dh != 1 || g.dw != 1 || g.C % 8 != 0) return false;
    const int need = (g.OW + TT - 1) / TT, parts = (need + 7) / 8;
    t->nct = (need + parts - 1) / parts;
    t->th = g.OH < 8 ? g.OH : 8;
    const int Q4 = g.C / TCH;
    int qb = THREADS / (t->nct * t->th);
    qb = qb < 2 ? 2 : qb & ~1; /* cb a multiple of 8: whole 16-byte vectors per pixel */
    if (qb > Q4) qb = Q4;
    for (;;) {
        t->qb = qb;
        t->ph = (t->th - 1) * S + g.kh;
        t->pw = (t->nct * TT - 1) * S + g.kw;
        /* row pitch: the quads of successive output rows (S patch rows apart) for the lanes
         * of one shared-memory phase (128 bytes) start group_bytes apart, so they tile the
         * banks; the pitch stays a multiple of 8 bytes (16 for f32: group_bytes / S is) */
        const int group_bytes = qb * TCH * (int)es, row_bytes = t->pw * qb * TCH * (int)es, win = 128 / S;
        const int extra = group_bytes < 128 ? ((group_bytes / S - row_bytes % win) % win + win) % win : 0;
        int pitch = row_bytes + extra;
        if (stages > 1) pitch = (pitch + 15) / 16 * 16; /* the second patch 16-byte aligned, for cp.async */
        t->rp = pitch / (int)es;
        if (tile_smem(g, *t, es) <= TILE_SMEM) break;
        if (qb > 2) qb -= 2;
        else if (t->th > 1) t->th--;
        else return false;
    }
    t->rows_t = (g.OH + t->th - 1) / t->th;
    t->cols_t = (g.OW + t->nct * TT - 1) / (t->nct * TT);
    t->chunks = (Q4 + t->qb - 1) / t->qb;
    const int64_t blocks = (int64_t)g.N * t->rows_t * t->cols_t * t->chunks;
    return blocks <= 0x7fffffff;
}

/* Threads of a tiled or pipelined block: one a (channel quad, row, column tile) item, whole
 * warps, at most THREADS. */
int tile_threads(const Tile &t) {
    const int threads = (t.qb * t.th * t.nct + 31) / 32 * 32;
    return threads < THREADS ? threads : THREADS;
}

template <typename T, int KW, int S, bool EXACT>
void launch_tiled(kiln_cuda *cu, const Geo &g, const Tile &t, const void *x, const void *w, const void *b,
                  const void *z, void *y, const Epi &e) {
    const int threads = tile_threads(t);
    const unsigned blocks = (unsigned)((int64_t)g.N * t.rows_t * t.cols_t * t.chunks);
    dw_nhwc_tiled<T, KW, S, EXACT><<<blocks, threads, tile_smem(g, t, sizeof(T)), cu->stream>>>(
        (const T *)x, (const T *)w, (const T *)b, (const T *)z, (T *)y, g, t, e);
}

template <typename T, int KW, bool EXACT>
void launch_tiled_s(kiln_cuda *cu, const Geo &g, const Tile &t, const void *x, const void *w, const void *b,
                    const void *z, void *y, const Epi &e) {
    if (g.sh == 1) launch_tiled<T, KW, 1, EXACT>(cu, g, t, x, w, b, z, y, e);
    else launch_tiled<T, KW, 2, EXACT>(cu, g, t, x, w, b, z, y, e);
}

/* Whether the pipelined kernel takes g (element size es; its tile in *t): kw 3, 5 or 7 (the
 * exact widths, unless KILN_CUDA_DW_EXACT=0), unless KILN_CUDA_DW_PIPE=0, two patches that
 * fit, and a grid it can index. */
bool pipe_takes(const kiln_cuda *cu, const Geo &g, size_t es, Tile *t) {
    return cu->dw_exact && cu->dw_pipe >= 0 && (g.kw == 3 || g.kw == 5 || g.kw == 7) && tile_for(g, es, 2, t) &&
           (int64_t)g.N * t->rows_t * t->cols_t <= 0x7fffffff && t->chunks <= 65535;
}

/* The pipelined kernel on g: each channel chunk's share of as many blocks as are resident at
 * once (the occupancy calculator's count), each taking its chunk's spatial tiles in turn. */
template <typename T, int KW, int S>
void launch_pipe(kiln_cuda *cu, const Geo &g, const Tile &t, const void *x, const void *w, const void *b,
                 const void *z, void *y, const Epi &e) {
    const int threads = tile_threads(t);
    const size_t smem = tile_smem(g, t, sizeof(T));
    /* blocks a multiprocessor holds: asked of the runtime once per (threads, smem) of this
     * kernel, not on every launch; kept packed in one word (threads < 2^9, smem < 2^17, count
     * < 2^6, bit 32: set) so that threads racing on it read a whole entry or none */
    static unsigned long long occ_cache;
    const unsigned long long key = (unsigned long long)threads | (unsigned long long)smem << 9;
    const unsigned long long got = __atomic_load_n(&occ_cache, __ATOMIC_RELAXED);
    int per_sm = (got >> 32) && (got & 0x3ffffff) == key ? (int)((got >> 26) & 0x3f) : 0;
    if (!per_sm) {
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, dw_nhwc_pipe<T, KW, S>, threads, smem) !=
                cudaSuccess ||
            per_sm < 1)
            per_sm = 1;
        if (per_sm > 63) per_sm = 63;
        __atomic_store_n(&occ_cache, key | (unsigned long long)per_sm << 26 | 1ull << 32, __ATOMIC_RELAXED);
    }
    const int64_t tiles = (int64_t)g.N * t.rows_t * t.cols_t;
    int64_t bx = ((int64_t)cu->props.sm_count * per_sm + t.chunks - 1) / t.chunks;
    if (cu->dw_pipe_grid > 0 && bx > cu->dw_pipe_grid) bx = cu->dw_pipe_grid;
    if (bx > tiles) bx = tiles;
    if (bx < 1) bx = 1;
    dw_nhwc_pipe<T, KW, S><<<dim3((unsigned)bx, (unsigned)t.chunks), threads, smem, cu->stream>>>(
        (const T *)x, (const T *)w, (const T *)b, (const T *)z, (T *)y, g, t, e);
}

template <typename T, int KW>
void launch_pipe_s(kiln_cuda *cu, const Geo &g, const Tile &t, const void *x, const void *w, const void *b,
                   const void *z, void *y, const Epi &e) {
    if (g.sh == 1) launch_pipe<T, KW, 1>(cu, g, t, x, w, b, z, y, e);
    else launch_pipe<T, KW, 2>(cu, g, t, x, w, b, z, y, e);
}

/* Any layout and alignment: a thread per output element i of Y's layout (NHWC: (n, oh,
 * ow, c), c fastest; NCHW: (n, c, oh, ow), ow fastest). */
template <typename T, bool NHWC>
__global__ void __launch_bounds__(THREADS)
    dw_scalar(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b, const T *__restrict__ z,
              T *__restrict__ y, Geo g, Epi e) {
    const int total = g.N * g.C * g.OH * g.OW, kk = g.kh * g.kw;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int n, c, oh, ow, p;
        if (NHWC) {
            c = i % g.C;
            p = i / g.C;
            ow = p % g.OW;
            p /= g.OW;
            oh = p % g.OH;
            n = p / g.OH;
        } else {
            ow = i % g.OW;
            p = i / g.OW;
            oh = p % g.OH;
            p /= g.OH;
            c = p % g.C;
            n = p / g.C;
        }
        float acc = b ? to_f(b[c]) : 0.f;
        const int ih0 = oh * g.sh - g.pt, iw0 = ow * g.sw - g.pl;
        const T *wc = w + c * kk;
        for (int r = 0; r < g.kh; r++) {
            const int ih = ih0 + r * g.dh;
            if ((unsigned)ih >= (unsigned)g.H) continue;
            for (int s = 0; s < g.kw; s++) {
                const int iw = iw0 + s * g.dw;
                if ((unsigned)iw >= (unsigned)g.W) continue;
                const int xi = NHWC ? ((n * g.H + ih) * g.W + iw) * g.C + c : ((n * g.C + c) * g.H + ih) * g.W + iw;
                acc = fmaf(to_f(x[xi]), to_f(wc[r * g.kw + s]), acc);
            }
        }
        if (z) acc += to_f(z[i]);
        y[i] = from_f<T>(act_apply(acc, e));
    }
}

/* Input gradient: dX[n, c, ih, iw] = the sum over taps (r, s) of W[c, r, s] *
 * dY[n, c, oh, ow] for the outputs whose window put tap (r, s) on (ih, iw): oh * sh - pt +
 * r * dh = ih (and the same for ow). A thread per element of dX's layout, as dw_scalar. */
template <typename T, bool NHWC>
__global__ void __launch_bounds__(THREADS)
    dw_grad_input(const T *__restrict__ dy, const T *__restrict__ w, T *__restrict__ dx, Geo g) {
    const int total = g.N * g.C * g.H * g.W, kk = g.kh * g.kw;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int n, c, ih, iw, p;
        if (NHWC) {
            c = i % g.C;
            p = i / g.C;
            iw = p % g.W;
            p /= g.W;
            ih = p % g.H;
            n = p / g.H;
        } else {
            iw = i % g.W;
            p = i / g.W;
            ih = p % g.H;
            p /= g.H;
            c = p % g.C;
            n = p / g.C;
        }
        float acc = 0.f;
        const T *wc = w + c * kk;
        for (int r = 0; r < g.kh; r++) {
            const int th = ih + g.pt - r * g.dh; /* oh * sh */
            if (th < 0) break;                   /* only falls with r */
            const int oh = th / g.sh;
            if (oh * g.sh != th || oh >= g.OH) continue;
            for (int s = 0; s < g.kw; s++) {
                const int tw = iw + g.pl - s * g.dw;
                if (tw < 0) break;
                const int ow = tw / g.sw;
                if (ow * g.sw != tw || ow >= g.OW) continue;
                const int yi = NHWC ? ((n * g.OH + oh) * g.OW + ow) * g.C + c : ((n * g.C + c) * g.OH + oh) * g.OW + ow;
                acc = fmaf(to_f(dy[yi]), to_f(wc[r * g.kw + s]), acc);
            }
        }
        dx[i] = from_f<T>(acc);
    }
}

template <typename T>
kiln_status grad_input(kiln_cuda *cu, kiln_context *ctx, const Geo &g, bool nhwc, const void *dy, const void *w,
                       void *dx) {
    const unsigned blocks = kiln_cuda_blocks(cu, (int64_t)g.N * g.C * g.H * g.W, THREADS);
    if (nhwc)
        dw_grad_input<T, true><<<blocks, THREADS, 0, cu->stream>>>((const T *)dy, (const T *)w, (T *)dx, g);
    else
        dw_grad_input<T, false><<<blocks, THREADS, 0, cu->stream>>>((const T *)dy, (const T *)w, (T *)dx, g);
    KILN_CUDA_LAUNCHED(ctx, "dw_grad_input (depthwise)");
    return KILN_OK;
}

/* Channel groups per block of the vector path. */
int qb_of(int C) {
    const int Q = C / CPT;
    return Q < QB_MAX ? Q : QB_MAX;
}

size_t vec_smem(int kk, int QB) { return (size_t)kk * QB * CPT * sizeof(float); }

template <typename T, int KW, bool UNIT>
void launch_vec(kiln_cuda *cu, const Geo &g, const void *x, const void *w, const void *b, const void *z, void *y,
                const Epi &e) {
    const int QB = qb_of(g.C), Q = g.C / CPT;
    const int tiles_w = (g.OW + TW - 1) / TW, tiles = g.N * g.OH * tiles_w;
    const int per_block = THREADS / QB;
    const unsigned bx = kiln_cuda_blocks(cu, (int64_t)tiles * THREADS / per_block, THREADS);
    const dim3 grid(bx, (unsigned)((Q + QB - 1) / QB));
    dw_nhwc_vec<T, KW, UNIT><<<grid, THREADS, vec_smem(g.kh * g.kw, QB), cu->stream>>>(
        (const T *)x, (const T *)w, (const T *)b, (const T *)z, (T *)y, g, QB, tiles_w, tiles, e);
}

template <typename T, int KW>
void launch_vec_kw(kiln_cuda *cu, const Geo &g, const void *x, const void *w, const void *b, const void *z, void *y,
                   const Epi &e) {
    if (g.sw == 1 && g.dw == 1) launch_vec<T, KW, true>(cu, g, x, w, b, z, y, e);
    else launch_vec<T, KW, false>(cu, g, x, w, b, z, y, e);
}

template <typename T>
kiln_status forward(kiln_cuda *cu, kiln_context *ctx, const Geo &g, bool nhwc, const void *x, const void *w,
                    const void *b, const void *z, void *y, Epi e, int variant) {
    const bool vec = nhwc && g.C % CPT == 0 && aligned16(x, y, z);
    Tile t;
    if (vec && variant == KILN_CUDA_DW_PIPE && pipe_takes(cu, g, sizeof(T), &t)) {
        if (g.kw == 3) launch_pipe_s<T, 3>(cu, g, t, x, w, b, z, y, e);
        else if (g.kw == 5) launch_pipe_s<T, 5>(cu, g, t, x, w, b, z, y, e);
        else launch_pipe_s<T, 7>(cu, g, t, x, w, b, z, y, e);
        KILN_CUDA_LAUNCHED(ctx, "dw_nhwc_pipe (depthwise)");
        return KILN_OK;
    }
    if (vec && variant != KILN_CUDA_DW_PER_TILE && tile_for(g, sizeof(T), 1, &t)) {
        /* the widths the zoo has compiled exactly (KILN_CUDA_DW_EXACT=0: the guarded kernel for all) */
        if (g.kw == 3 && cu->dw_exact) launch_tiled_s<T, 3, true>(cu, g, t, x, w, b, z, y, e);
        else if (g.kw == 5 && cu->dw_exact) launch_tiled_s<T, 5, true>(cu, g, t, x, w, b, z, y, e);
        else if (g.kw == 7 && cu->dw_exact) launch_tiled_s<T, 7, true>(cu, g, t, x, w, b, z, y, e);
        else if (g.kw <= 3) launch_tiled_s<T, 3, false>(cu, g, t, x, w, b, z, y, e);
        else if (g.kw <= 5) launch_tiled_s<T, 5, false>(cu, g, t, x, w, b, z, y, e);
        else if (g.kw <= 7) launch_tiled_s<T, 7, false>(cu, g, t, x, w, b, z, y, e);
        else launch_tiled_s<T, 9, false>(cu, g, t, x, w, b, z, y, e);
        KILN_CUDA_LAUNCHED(ctx, "dw_nhwc_tiled (depthwise)");
        return KILN_OK;
    }
    if (vec) {
        if (g.kw <= 3) launch_vec_kw<T, 3>(cu, g, x, w, b, z, y, e);
        else if (g.kw <= 5) launch_vec_kw<T, 5>(cu, g, x, w, b, z, y, e);
        else if (g.kw <= 7) launch_vec_kw<T, 7>(cu, g, x, w, b, z, y, e);
        else launch_vec_kw<T, 9>(cu, g, x, w, b, z, y, e);
        KILN_CUDA_LAUNCHED(ctx, "dw_nhwc_vec (depthwise)");
        return KILN_OK;
    }
    const unsigned blocks = kiln_cuda_blocks(cu, (int64_t)g.N * g.C * g.OH * g.OW, THREADS);
    if (nhwc)
        dw_scalar<T, true><<<blocks, THREADS, 0, cu->stream>>>((const T *)x, (const T *)w, (const T *)b,
                                                               (const T *)z, (T *)y, g, e);
    else
        dw_scalar<T, false><<<blocks, THREADS, 0, cu->stream>>>((const T *)x, (const T *)w, (const T *)b,
                                                                (const T *)z, (T *)y, g, e);
    KILN_CUDA_LAUNCHED(ctx, "dw_scalar (depthwise)");
    return KILN_OK;
}

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" bool kiln_cuda_conv_depthwise_fits(const kiln_cuda_dw_geo *g, char *why, size_t n) {
    if (g->kh < 1 || g->kw < 1 || g->kh > KMAX || g->kw > KMAX) {
        snprintf(why, n, "a %lldx%lld kernel (the depthwise kernels take up to %dx%d)", (long long)g->kh,
                 (long long)g->kw, KMAX, KMAX);
        return false;
    }
    if (g->N < 1 || g->C < 1 || g->H < 1 || g->W < 1 || g->OH < 1 || g->OW < 1) {
        snprintf(why, n, "empty tensors");
        return false;
    }
    if (g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->pt < 0 || g->pl < 0) {
        snprintf(why, n, "strides, dilations or pads out of range");
        return false;
    }
    /* element counts, and every coordinate a window walks (from -pt to past its last tap) */
    const int64_t sizes[] = {g->N * g->C * g->H * g->W, g->N * g->C * g->OH * g->OW,
                             (g->OH - 1) * g->sh + g->kh * g->dh + g->pt + g->H,
                             (g->OW + TW) * g->sw + g->kw * g->dw + g->pl + g->W};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] > LIM) {
            snprintf(why, n, "indices beyond 32 bits");
            return false;
        }
    if (g->C / CPT > 65535) {
        snprintf(why, n, "%lld channels", (long long)g->C);
        return false;
    }
    return true;
}

extern "C" bool kiln_cuda_conv_depthwise_pipe(const kiln_cuda *cu, const kiln_cuda_dw_geo *g, kiln_dtype dt,
                                              const void *y, const void *z) {
    char why[160];
    Tile t;
    return g->nhwc && kiln_cuda_float_dtype(dt) && g->C % CPT == 0 && aligned16(y, z) &&
           kiln_cuda_conv_depthwise_fits(g, why, sizeof why) && pipe_takes(cu, geo32(g), kiln_dtype_size(dt), &t);
}

extern "C" bool kiln_cuda_conv_depthwise_tiled(const kiln_cuda_dw_geo *g, kiln_dtype dt) {
    char why[160];
    Tile t;
    return g->nhwc && kiln_cuda_float_dtype(dt) && kiln_cuda_conv_depthwise_fits(g, why, sizeof why) &&
           tile_for(geo32(g), kiln_dtype_size(dt), 1, &t);
}

extern "C" kiln_status kiln_cuda_conv_depthwise_forward(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt,
                                                        const kiln_cuda_dw_geo *g, const void *x, const void *w,
                                                        const void *b, const void *z, const kiln_cuda_act *act,
                                                        int variant, void *y) {
    char why[160];
    if (!kiln_cuda_conv_depthwise_fits(g, why, sizeof why))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "depthwise convolution: %s", why);
    const Geo g32 = geo32(g);
    const Epi e = {act ? (int)act->kind : (int)KILN_ACT_NONE, act ? act->a : 0.f, act ? act->b : 0.f};
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, ctx, dt, forward, cu, ctx, g32, g->nhwc, x, w, b, z, y, e, variant);
    return st;
}

extern "C" kiln_status kiln_cuda_conv_depthwise_grad_input(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt,
                                                           const kiln_cuda_dw_geo *g, const void *dy, const void *w,
                                                           void *dx) {
    char why[160];
    if (!kiln_cuda_conv_depthwise_fits(g, why, sizeof why))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "depthwise input gradient: %s", why);
    const Geo g32 = geo32(g);
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, ctx, dt, grad_input, cu, ctx, g32, g->nhwc, dy, w, dx);
    return st;
}
