/*
 * conv_pointwise.cu — convolutions whose products are short (K = kh * kw * channels read
 * <= 64) on the tensor cores: 1x1 products of few input channels, and few-channel
 * convolutions such as RGB stems as implicit products.
 *   Y (rows, M) = act(P (rows, K) W^T + B + Z), X and Y NHWC (rows = N * OH * OW), W KRSC,
 *   f16 / bf16, M a multiple of 8, Y and Z 16-byte aligned. P's row of an output pixel is its
 *   window: taps (i, j) outer, channels inner: all C of them where whole pixels are copied
 *   (product_kernel), the first u where values are gathered (window_kernel; u < C: the
 *   pad-channels pass's used_channels, whose other channels have zero weights).
 *
 *   1x1 products of 8-64 input channels (MobileNet's, EfficientNet's and MnasNet's
 *   expansions onto six times as many channels over large maps; ResNets' 64-channel
 *   bottleneck ends) are bound by Y's bytes, where cuBLASLt and cuDNN fell far short of the
 *   bandwidth (efficientnet_b4's 24 -> 144 at 112x112 + SiLU: 0.80 ms, 1.35 TB/s on an H200;
 *   bench/NOTES.md "z30") and an activation other than Relu cost a pass of its own. RGB
 *   stems (3 channels, 3x3 stride 2, 4x4 stride 4) ran on cuDNN at a third of their bound
 *   (efficientnet_b4's 3 -> 48: 0.65 ms; squeezenet1_1's 3 -> 64: 0.56 ms, a quarter of the
 *   model; NOTES "z28").
 *
 *   A block of 8 warps computes 128 x 64 tiles of Y: P's 128 rows and W's 64 rows in shared
 *   memory (K zero-padded to a multiple of 16), each warp a 32 x 32 part by mma.sync
 *   m16n8k16 (f32 accumulation) on ldmatrix fragments, the epilogue (bias, residual,
 *   activation: one dispatch per thread, act.cuh) on the accumulators, rounded once, the tile
 *   staged in shared memory and written as 16-byte runs of 128-byte row pieces.
 *   product_kernel: as many blocks as are resident, each taking every gridDim.x-th tile
 *   (channel tile fastest: the blocks sharing P's rows run together), the next tile's P and
 *   W rows copied by cp.async into a second buffer while this one is computed and stored.
 *   P's rows are X's for a 1x1 product (16-byte pieces); for a window over C channels (C a
 *   multiple of 4: the pad-channels pass's 4 for an RGB stem, or of 8) each tap's whole
 *   pixel is a piece of 8 or 16 bytes, K = kh * kw * C (the channels past u have zero
 *   weights: read as cuDNN's padded path reads them). window_kernel takes other windows, one
 *   tile a block, P's values gathered one at a time (a thread per column of P, offsets from
 *   a table made once a block; positions outside X are zeros).
 *
 *   On an H200 (bench/NOTES.md "z32"-"z34"): stems and strided 1x1s run 1.3-2.8x faster
 *   than cuDNN (convnext_tiny's 4x4 stride 4 0.57 -> 0.20 ms, efficientnet_b4's 3x3 + SiLU
 *   0.65 -> 0.28); 1x1 products of up to 64 channels win on mid-sized maps (mobilenet_v2's
 *   24 -> 144 at 56x56: 0.24 -> 0.17) and tie on the largest ones (efficientnet_b4's 24 ->
 *   144 + SiLU over 3.2 M rows: 0.79 ms either way; the kernel bound by latency, ~0.3
 *   instructions issued a scheduler a cycle, and by the SFU's two ops a SiLU value: z35).

 *   conv.c times the kernel against the usual path (cuBLASLt, cuDNN's legacy API or graph,
 *   the narrow copy) the first time a problem is met and keeps the faster (KILN_CUDA_PW=1
 *   always, =0 never).
 */
#include "act.cuh"
#include "cp_async.cuh"
#include "dtype.cuh"
#include "mma.cuh"

#include <stdio.h>

using namespace kiln_cu;
using kiln_act::act_dispatch;
using kiln_act::act_of;
using kiln_act::Epi;

namespace {

constexpr int BM = 128;     /* rows of P and Y a tile */
constexpr int BN = 64;      /* output channels a tile */
constexpr int THREADS = 256; /* 8 warps: 4 along the rows x 2 along the channels */
constexpr int LDO = BN + 8; /* the staged output's row stride (halves): conflict-free stores */
constexpr int KMAX = 64;
constexpr int FAR = -(1 << 28); /* a window row / column offset that puts any tap outside X */

/* The window geometry of a gathered P (all sizes fit int: kiln_cuda_conv_pointwise_fits). */
struct Geo {
    int H, W, C, u;     /* X's dims (NHWC) and the channels read */
    int kh, kw, sh, sw, dh, dw, pt, pl;
    int OH, OW;
    int K;              /* kh * kw * u */
};

/* Bias and residual onto a warp's 32 x 32 accumulators (rows wm.., channels wn.. of the
 * tile at row r0, channel n0), before the activation: b's value (NULL: none) and Z's (NULL:
 * none; its rows below `rows`). Channel groups of 8 past M are dead (M % 8 == 0): skipped. */
template <typename T>
__device__ __forceinline__ void add_bias_z(float (&acc)[2][4][4], const T *__restrict__ b, const T *__restrict__ z,
                                           int64_t r0, int64_t rows, int n0, int M, int wm, int wn, int lane) {
    const int c0 = n0 + wn + 2 * (lane & 3); /* the thread's first channel */
    if (b) {
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
            if (n0 + wn + nt * 8 >= M) continue;
            const float b0 = to_f(b[c0 + nt * 8]), b1 = to_f(b[c0 + nt * 8 + 1]);
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    acc[mt][nt][2 * h] += b0;
                    acc[mt][nt][2 * h + 1] += b1;
                }
        }
    }
    if (z) {
        const int64_t gr0 = r0 + wm + (lane >> 2); /* the thread's first row */
        const T *zr = z + gr0 * M + c0;
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int dr = mt * 16 + h * 8;
                if (gr0 + dr >= rows) continue;
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    if (n0 + wn + nt * 8 >= M) continue;
                    const uint32_t p = *(const uint32_t *)(zr + (int64_t)dr * M + nt * 8);
                    T zz[2];
                    memcpy(zz, &p, sizeof p);
                    acc[mt][nt][2 * h] += to_f(zz[0]);
                    acc[mt][nt][2 * h + 1] += to_f(zz[1]);
                }
            }
    }
}

/* The epilogue of a warp's 32 x 32 accumulators (bias and residual added) into the staged
 * tile sO (row stride LDO): the activation A, rounded to T once, two channels a store. */
template <typename T> struct PwEpi {
    float (&acc)[2][4][4];
    T *sO;
    const Epi &e;
    int n0, M; /* the block's first channel, Y's channels */
    int wm, wn, lane;

    template <int A> __device__ __forceinline__ void operator()() const {
        T *o = sO + (wm + (lane >> 2)) * LDO + wn + 2 * (lane & 3);
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
            if (n0 + wn + nt * 8 >= M) continue; /* past Y's channels: nothing to stage */
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float v0 = act_of<A, true>(acc[mt][nt][2 * h], e);
                    const float v1 = act_of<A, true>(acc[mt][nt][2 * h + 1], e);
                    *(uint32_t *)(o + (mt * 16 + h * 8) * LDO + nt * 8) = pack2<T>(v0, v1);
                }
        }
    }
};

/* P's rows r0 .. r0 + BM - 1 (X's windows) and W's rows n0 .. n0 + BN - 1 into shared memory
 * (row stride LD), columns K .. KP - 1 zeros: a thread per column k (of the first THREADS /
 * KP * KP threads) walking the rows. */
template <typename T, int KP, int LD>
__device__ __forceinline__ void gather(T *sX, T *sW, const T *__restrict__ x, const T *__restrict__ w, int64_t r0,
                                       int64_t rows, int n0, int M, const Geo &g, int tid) {
    __shared__ int sDi[KP], sDj[KP], sOff[KP], sWo[KP];
    __shared__ long long sBase[BM];
    __shared__ int sIh[BM], sIw[BM];
    if (tid < KP) {
        const int k = tid;
        if (k < g.K) {
            const int t = k / g.u, c = k % g.u, i = t / g.kw, j = t % g.kw;
            sDi[k] = i * g.dh;
            sDj[k] = j * g.dw;
            sOff[k] = (i * g.dh * g.W + j * g.dw) * g.C + c;
            sWo[k] = t * g.C + c;
        } else {
            sDi[k] = FAR;
            sDj[k] = 0;
            sOff[k] = 0;
            sWo[k] = -1;
        }
    }
    if (tid < BM) {
        const int64_t gr = r0 + tid;
        if (gr < rows) {
            const int64_t hw = (int64_t)g.OH * g.OW, n = gr / hw;
            const int rem = (int)(gr - n * hw), oh = rem / g.OW, ow = rem - oh * g.OW;
            const int ih0 = oh * g.sh - g.pt, iw0 = ow * g.sw - g.pl;
            sIh[tid] = ih0;
            sIw[tid] = iw0;
            sBase[tid] = (long long)n * g.H * g.W * g.C + ((long long)ih0 * g.W + iw0) * g.C;
        } else {
            sIh[tid] = FAR;
            sIw[tid] = 0;
            sBase[tid] = 0;
        }
    }
    __syncthreads();
    constexpr int RP = THREADS / KP; /* rows a pass */
    const int k = tid % KP, rr = tid / KP;
    if (rr >= RP) return;
    const int di = sDi[k], dj = sDj[k], off = sOff[k], wo = sWo[k];
    const T zero = from_f<T>(0.f);
#pragma unroll 4
    for (int r = rr; r < BM; r += RP) {
        const int ih = sIh[r] + di, iw = sIw[r] + dj;
        sX[r * LD + k] = (unsigned)ih < (unsigned)g.H && (unsigned)iw < (unsigned)g.W ? x[sBase[r] + off] : zero;
    }
    const int64_t wrow = (int64_t)g.kh * g.kw * g.C;
#pragma unroll 4
    for (int m = rr; m < BN; m += RP)
        sW[m * LD + k] = wo >= 0 && n0 + m < M ? w[(n0 + m) * wrow + wo] : zero;
}

/* A warp's 32 x 32 part (rows wm.., channels wn..) of the staged tile's product, from zero:
 * P's rows in sX, W's in sW (row stride LD, KP columns); live0 / live1: whether the warp's
 * two 16-channel halves hold any of Y's channels (a dead half is skipped). */
template <typename T, int KP, int LD>
__device__ __forceinline__ void tile_mma(float (&acc)[2][4][4], const T *sX, const T *sW, int wm, int wn, int lane,
                                         bool live0, bool live1) {
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[mt][nt][q] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KP / 16; kk++) {
        uint32_t a[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
            ldmatrix_x4(a[mt], smem_u32(sX + (wm + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + kk * 16 +
                                        (lane >> 4) * 8));
#pragma unroll
        for (int np = 0; np < 2; np++) {
            if (!(np == 0 ? live0 : live1)) continue;
            uint32_t bb[4]; /* channels np*16 + (0..7 | 8..15), k kk*16 + (0..7, 8..15) */
            ldmatrix_x4(bb, smem_u32(sW + (wn + np * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kk * 16 +
                                     ((lane >> 3) & 1) * 8));
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                mma16816<T>(acc[mt][2 * np], a[mt], bb[0], bb[1]);
                mma16816<T>(acc[mt][2 * np + 1], a[mt], bb[2], bb[3]);
            }
        }
    }
}

/* Y's staged tile (sO, row stride LDO) to global as 16-byte runs: a thread a 16-byte column
 * piece of every 32nd row; rows past `rows` and channels past M are not written. */
template <typename T>
__device__ __forceinline__ void store_tile(T *__restrict__ y, const T *sO, int64_t r0, int64_t rows, int n0, int M,
                                           int tid) {
    using V = typename VecOf<T>::type;
    constexpr int CPR = BN / 8;         /* 16-byte pieces a row */
    constexpr int RPP = THREADS / CPR;  /* rows a pass */
    const int c = tid % CPR, r = tid / CPR, gc = n0 + c * 8;
    if (gc >= M) return;
    int64_t gr = r0 + r;
    T *p = y + gr * M + gc;
    const int64_t step = (int64_t)RPP * M;
#pragma unroll
    for (int i = 0; i < BM / RPP; i++, gr += RPP, p += step)
        if (gr < rows) *(V *)p = *(const V *)(sO + (r + i * RPP) * LDO + c * 8);
}

/* A chunk of SEGB bytes (16 or 8) from global to shared memory, src_bytes 0 or SEGB. */
template <int SEGB> __device__ __forceinline__ void cp_chunk(uint32_t dst, const void *src, int src_bytes) {
    if constexpr (SEGB == 16) cp_async16(dst, src, src_bytes);
    else cp_async8(dst, src, src_bytes);
}

/* Rows 0 .. NR - 1 of a row-major matrix src (row stride K elements) into shared memory dst
 * (row stride LD), KC chunks of SEGB bytes a row: the first kc chunks of the first nr rows
 * copied, the others zero-filled (cp.async of 0 source bytes; base, a valid address, is read
 * by none). A thread's chunks are tid, + THREADS, ...: a trip count known at compile time. */
template <int SEGB, int NR, int KC, int LD, typename T>
__device__ __forceinline__ void copy_rows(T *dst, const T *base, const T *src, int nr, int K, int kc, int tid) {
    constexpr int CE = SEGB / (int)sizeof(T), N = NR * KC;
#pragma unroll
    for (int j = 0; j < (N + THREADS - 1) / THREADS; j++) {
        const int i = tid + j * THREADS;
        if (N % THREADS != 0 && i >= N) break;
        const int r = i / KC, c = i % KC;
        const bool ok = r < nr && c < kc;
        cp_chunk<SEGB>(smem_u32(dst + r * LD + c * CE), ok ? src + r * K + c * CE : base, ok ? SEGB : 0);
    }
}

/* A window's SEGB-byte chunk j of P's row (WINDOW mode): its tap's offsets and its place in X
 * from the window's first pixel. */
struct Seg {
    int di, dj, xoff;
};
constexpr int SEG_MAX = KMAX / 4;

/* Persistent blocks, each taking the tiles blockIdx.x, + gridDim.x, ... (channel tile
 * fastest), the next tile's P and W rows copied by cp.async in chunks of SEGB bytes into the
 * other of two buffers while this one is computed and stored. !WINDOW: a 1x1 product, P = X
 * (K a multiple of 8, SEGB 16). WINDOW: P's row is the window of all C channels of each tap
 * (C * 2 bytes a multiple of SEGB; X and W SEGB-aligned), chunks from a table (Seg) made once,
 * two threads a row. Columns K .. KP - 1 are zero-filled by the same copies. */
template <typename T, int KP, int SEGB, bool WINDOW>
__global__ void __launch_bounds__(THREADS, 3)
    product_kernel(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b,
                   const T *__restrict__ z, T *__restrict__ y, int64_t rows, int M, int ncol, int nrt, Geo g, Epi e) {
    constexpr int LD = KP + 8;
    constexpr int CE = SEGB / 2;  /* elements a chunk */
    constexpr int KC = KP / CE;   /* chunks of a staged row */
    extern __shared__ __align__(16) unsigned char smem[];
    T *sX = (T *)smem;        /* 2 x BM x LD */
    T *sW = sX + 2 * BM * LD; /* 2 x BN x LD */
    T *sO = sW + 2 * BN * LD; /* BM x LDO */
    __shared__ Seg sSeg[WINDOW ? SEG_MAX : 1];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int K = g.K, kc = K / CE; /* chunks of P's (and W's) real columns */
    if constexpr (WINDOW) {
        const int cpt = g.C / CE; /* chunks a tap */
        if (tid < kc) {
            const int t = tid / cpt, q = tid % cpt, i = t / g.kw, j = t % g.kw;
            sSeg[tid] = {i * g.dh, j * g.dw, (i * g.dh * g.W + j * g.dw) * g.C + q * CE};
        }
        __syncthreads();
    }
    /* tile (row tile rt, channel tile col) = rt * ncol + col; a block's next one is gridDim.x
     * further: stepped without dividing (a 64-bit division is ~100 instructions) */
    const unsigned gq = gridDim.x / (unsigned)ncol, gm = gridDim.x % (unsigned)ncol;
    auto step = [&](unsigned &rt, unsigned &col) {
        col += gm;
        rt += gq;
        if (col >= (unsigned)ncol) {
            col -= ncol;
            rt++;
        }
    };
    auto issue = [&](unsigned rt, unsigned col, int buf) {
        if (rt < (unsigned)nrt) {
            const int64_t r0 = (int64_t)rt * BM;
            const int n0 = (int)col * BN;
            T *dX = sX + buf * BM * LD, *dW = sW + buf * BN * LD;
            if constexpr (WINDOW) {
                const int r = tid >> 1;
                const int64_t gr = r0 + r;
                int ih0 = FAR, iw0 = 0;
                long long base = 0;
                if (gr < rows) {
                    const int64_t hw = (int64_t)g.OH * g.OW, n = gr / hw;
                    const int rem = (int)(gr - n * hw), oh = rem / g.OW, ow = rem - oh * g.OW;
                    ih0 = oh * g.sh - g.pt;
                    iw0 = ow * g.sw - g.pl;
                    base = (long long)n * g.H * g.W * g.C + ((long long)ih0 * g.W + iw0) * g.C;
                }
#pragma unroll 4
                for (int j = tid & 1; j < KC; j += 2) {
                    bool ok = false;
                    long long off = 0;
                    if (j < kc) {
                        const Seg sg = sSeg[j];
                        const int ih = ih0 + sg.di, iw = iw0 + sg.dj;
                        ok = (unsigned)ih < (unsigned)g.H && (unsigned)iw < (unsigned)g.W;
                        off = base + sg.xoff;
                    }
                    cp_chunk<SEGB>(smem_u32(dX + r * LD + j * CE), ok ? x + off : x, ok ? SEGB : 0);
                }
            } else {
                /* rows past X's and columns past K: zeros */
                copy_rows<SEGB, BM, KC, LD>(dX, x, x + r0 * K, rows - r0 < BM ? (int)(rows - r0) : BM, K, kc, tid);
            }
            copy_rows<SEGB, BN, KC, LD>(dW, w, w + (int64_t)n0 * K, M - n0 < BN ? M - n0 : BN, K, kc, tid);
        }
        cp_async_commit(); /* empty past the last tile: the wait below counts groups */
    };
    const int wm = (warp & 3) * 32, wn = (warp >> 2) * 32;
    unsigned rt = blockIdx.x / (unsigned)ncol, col = blockIdx.x % (unsigned)ncol; /* this tile */
    {
        unsigned art = rt, acol = col;
        issue(art, acol, 0);
        step(art, acol);
        issue(art, acol, 1);
    }
    for (int buf = 0; rt < (unsigned)nrt; step(rt, col), buf ^= 1) {
        cp_async_wait<1>(); /* this tile's group (the next one may still be in flight) */
        __syncthreads();    /* ... for every thread's copies; and sO's last stores are read */
        const int64_t r0 = (int64_t)rt * BM;
        const int n0 = (int)col * BN;
        float acc[2][4][4];
        tile_mma<T, KP, LD>(acc, sX + buf * BM * LD, sW + buf * BN * LD, wm, wn, lane, n0 + wn < M,
                            n0 + wn + 16 < M);
        add_bias_z<T>(acc, b, z, r0, rows, n0, M, wm, wn, lane);
        act_dispatch(e.act, PwEpi<T>{acc, sO, e, n0, M, wm, wn, lane});
        __syncthreads(); /* sO complete; every warp is past this buffer's tile */
        {
            unsigned art = rt, acol = col; /* two tiles on: into this tile's buffer */
            step(art, acol);
            step(art, acol);
            issue(art, acol, buf);
        }
        store_tile<T>(y, sO, r0, rows, n0, M, tid);
    }
}

/* Any other window: one tile a block, P's tile gathered (gather). */
template <typename T, int KP>
__global__ void __launch_bounds__(THREADS, 3)
    window_kernel(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b,
                  const T *__restrict__ z, T *__restrict__ y, int64_t rows, int M, int ncol, Geo g, Epi e) {
    constexpr int LD = KP + 8; /* halves; 8 ldmatrix rows hit 8 distinct 16-byte bank groups */
    constexpr int XS = BM * LD > BM * LDO ? BM * LD : BM * LDO;
    __shared__ alignas(16) T sX[XS]; /* P's tile, then Y's */
    __shared__ alignas(16) T sW[BN * LD];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t r0 = (int64_t)(blockIdx.x / (unsigned)ncol) * BM;
    const int n0 = (int)(blockIdx.x % (unsigned)ncol) * BN;
    gather<T, KP, LD>(sX, sW, x, w, r0, rows, n0, M, g, tid);
    __syncthreads();
    const int wm = (warp & 3) * 32, wn = (warp >> 2) * 32;
    float acc[2][4][4];
    tile_mma<T, KP, LD>(acc, sX, sW, wm, wn, lane, n0 + wn < M, n0 + wn + 16 < M);
    __syncthreads(); /* every warp has read P's tile: Y's is staged over it */
    T *sO = sX;
    add_bias_z<T>(acc, b, z, r0, rows, n0, M, wm, wn, lane);
    act_dispatch(e.act, PwEpi<T>{acc, sO, e, n0, M, wm, wn, lane});
    __syncthreads();
    store_tile<T>(y, sO, r0, rows, n0, M, tid);
}

/* Whether P is X itself (a 1x1 product of K = C, a multiple of 8, x and w 16-byte aligned). */
bool plain_product(const kiln_cuda_pw_geo *p, const void *x, const void *w) {
    return p->kh == 1 && p->kw == 1 && p->sh == 1 && p->sw == 1 && p->pt == 0 && p->pl == 0 && p->OH == p->H &&
           p->OW == p->W && p->u == p->C && p->C % 8 == 0 && aligned16(x, w);
}

/* The chunk size (16 or 8 bytes) in which product_kernel copies a window of all C channels of
 * each tap (K = kh * kw * C <= 64; the channels past u have zero weights, as on cuDNN's
 * padded path), or 0 where it cannot (the window kernel gathers the u channels instead). */
int window_chunk(const kiln_cuda_pw_geo *p, const void *x, const void *w) {
    if (p->kh * p->kw * p->C > KMAX) return 0;
    const int seg = p->C % 8 == 0 ? 16 : p->C % 4 == 0 ? 8 : 0;
    return seg && (uintptr_t)x % seg == 0 && (uintptr_t)w % seg == 0 ? seg : 0;
}

/* product_kernel's shared memory: two P and W buffers, Y's staged tile. */
constexpr size_t product_smem(int kp) {
    return (size_t)(2 * BM * (kp + 8) + 2 * BN * (kp + 8) + BM * LDO) * 2;
}

template <typename T, int KP, int SEGB, bool WINDOW>
cudaError_t launch_product(const kiln_cuda *cu, cudaStream_t s, const T *x, const T *w, const T *b, const T *z, T *y,
                           int64_t rows, int M, int ncol, int64_t ntiles, const Geo &g, const Epi &e) {
    constexpr size_t smem = product_smem(KP);
    auto kernel = product_kernel<T, KP, SEGB, WINDOW>;
    /* more than the default 48 KB of dynamic shared memory, and the most shared memory the SM
     * can give (the driver's default carveout may hold fewer blocks); setting them again is
     * harmless. The grid: the blocks that are resident at once, no more (a persistent block
     * not resident would start only when another ends). */
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   (int)cudaSharedmemCarveoutMaxShared);
    int per_sm = 0;
    if (err == cudaSuccess) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, smem);
    if (err != cudaSuccess) return err;
    const int64_t resident = (int64_t)(cu->props.sm_count > 0 ? cu->props.sm_count : 1) * (per_sm > 0 ? per_sm : 1);
    const unsigned blocks = (unsigned)(ntiles < resident ? ntiles : resident);
    product_kernel<T, KP, SEGB, WINDOW><<<blocks, THREADS, smem, s>>>(x, w, b, z, y, rows, M, ncol,
                                                                       (int)(ntiles / ncol), g, e);
    return cudaSuccess;
}

template <typename T, int SEGB, bool WINDOW>
cudaError_t launch_product_kp(int kp, const kiln_cuda *cu, cudaStream_t s, const T *x, const T *w, const T *b,
                              const T *z, T *y, int64_t rows, int M, int ncol, int64_t ntiles, const Geo &g,
                              const Epi &e) {
    switch (kp) {
    case 16: return launch_product<T, 16, SEGB, WINDOW>(cu, s, x, w, b, z, y, rows, M, ncol, ntiles, g, e);
    case 32: return launch_product<T, 32, SEGB, WINDOW>(cu, s, x, w, b, z, y, rows, M, ncol, ntiles, g, e);
    case 48: return launch_product<T, 48, SEGB, WINDOW>(cu, s, x, w, b, z, y, rows, M, ncol, ntiles, g, e);
    default: return launch_product<T, 64, SEGB, WINDOW>(cu, s, x, w, b, z, y, rows, M, ncol, ntiles, g, e);
    }
}

template <typename T>
kiln_status launch(kiln_cuda *cu, kiln_context *ctx, const kiln_cuda_pw_geo *p, const void *x, const void *w,
                   const void *b, const void *z, const Epi &e, void *y) {
    const int64_t rows = p->N * p->OH * p->OW;
    const int ncol = (int)((p->M + BN - 1) / BN);
    const int64_t tiles = (rows + BM - 1) / BM * ncol;
    Geo g = {(int)p->H, (int)p->W, (int)p->C, (int)p->u, (int)p->kh, (int)p->kw, (int)p->sh, (int)p->sw,
             (int)p->dh, (int)p->dw, (int)p->pt, (int)p->pl, (int)p->OH, (int)p->OW, (int)(p->kh * p->kw * p->u)};
    const int M = (int)p->M;
    const T *xt = (const T *)x, *wt = (const T *)w, *bt = (const T *)b, *zt = (const T *)z;
    T *yt = (T *)y;
    cudaStream_t s = cu->stream;
    const bool plain = plain_product(p, x, w);
    const int seg = plain ? 16 : window_chunk(p, x, w);
    if (seg) {
        if (!plain) g.K = g.kh * g.kw * g.C; /* every channel of a tap */
        const int kp = (g.K + 15) / 16 * 16;
        const cudaError_t err =
            plain ? launch_product_kp<T, 16, false>(kp, cu, s, xt, wt, bt, zt, yt, rows, M, ncol, tiles, g, e)
            : seg == 16 ? launch_product_kp<T, 16, true>(kp, cu, s, xt, wt, bt, zt, yt, rows, M, ncol, tiles, g, e)
                        : launch_product_kp<T, 8, true>(kp, cu, s, xt, wt, bt, zt, yt, rows, M, ncol, tiles, g, e);
        if (err != cudaSuccess)
            return kiln_cuda_rt_error(ctx, err, "setting up product_kernel (attributes, occupancy)", __FILE__,
                                      __LINE__);
        KILN_CUDA_LAUNCHED(ctx, "product_kernel");
        return KILN_OK;
    }
    const int kp = (g.K + 15) / 16 * 16;
    const unsigned blocks = (unsigned)tiles;
    switch (kp) {
    case 16: window_kernel<T, 16><<<blocks, THREADS, 0, s>>>(xt, wt, bt, zt, yt, rows, M, ncol, g, e); break;
    case 32: window_kernel<T, 32><<<blocks, THREADS, 0, s>>>(xt, wt, bt, zt, yt, rows, M, ncol, g, e); break;
    case 48: window_kernel<T, 48><<<blocks, THREADS, 0, s>>>(xt, wt, bt, zt, yt, rows, M, ncol, g, e); break;
    default: window_kernel<T, 64><<<blocks, THREADS, 0, s>>>(xt, wt, bt, zt, yt, rows, M, ncol, g, e); break;
    }
    KILN_CUDA_LAUNCHED(ctx, "window_kernel");
    return KILN_OK;
}

} // namespace

extern "C" bool kiln_cuda_conv_pointwise_fits(kiln_dtype dt, const kiln_cuda_pw_geo *p, const void *z, const void *y,
                                              char *why, size_t wn) {
    const char *no = NULL;
    const int64_t K = p->kh * p->kw * p->u, rows = p->N * p->OH * p->OW;
    const int64_t all[] = {p->N, p->H, p->W, p->C, p->u, p->M, p->OH, p->OW, p->kh, p->kw, p->sh, p->sw, p->dh, p->dw};
    bool pos = p->pt >= 0 && p->pl >= 0 && p->pt < (1 << 20) && p->pl < (1 << 20);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pos = pos && all[i] >= 1 && all[i] < (1 << 30);
    if (dt != KILN_F16 && dt != KILN_BF16) no = "f16 or bf16 only";
    else if (!pos || p->u > p->C) no = "a size out of range";
    else if (K > KMAX) no = "more than 64 values a window (kh * kw * channels read)";
    else if (p->M % 8) no = "output channels not a multiple of 8";
    else if (p->H * p->W * p->C >= ((int64_t)1 << 31) || (p->kh - 1) * p->dh >= (1 << 20) ||
             (p->kw - 1) * p->dw >= (1 << 20) ||
             /* a tap's offset from its window's first pixel (int in the kernels) */
             ((p->kh - 1) * p->dh + 1) * p->W * p->C + ((p->kw - 1) * p->dw + 1) * p->C >= ((int64_t)1 << 31) ||
             (rows + BM - 1) / BM * ((p->M + BN - 1) / BN) >= ((int64_t)1 << 31))
        no = "too large for the kernel's indices";
    else if (!aligned16(y, z))
        no = "Y or Z is not 16-byte aligned";
    if (no && why)
        snprintf(why, wn, "pointwise kernel: %s (N %lld, %lld -> %lld channels, %lldx%lld window, %lld read)", no,
                 (long long)p->N, (long long)p->C, (long long)p->M, (long long)p->kh, (long long)p->kw,
                 (long long)p->u);
    return !no;
}

extern "C" kiln_status kiln_cuda_conv_pointwise(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt,
                                                const kiln_cuda_pw_geo *p, const void *x, const void *w,
                                                const void *b, const void *z, const kiln_cuda_act *act, void *y) {
    char why[200];
    if (!kiln_cuda_conv_pointwise_fits(dt, p, z, y, why, sizeof why)) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s", why);
    const Epi e = {act ? (int)act->kind : (int)KILN_ACT_NONE, act ? act->a : 0.f, act ? act->b : 0.f};
    return dt == KILN_F16 ? launch<__half>(cu, ctx, p, x, w, b, z, e, y)
                          : launch<__nv_bfloat16>(cu, ctx, p, x, w, b, z, e, y);
}
