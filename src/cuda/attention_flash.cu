/*
 * attention_flash.cu — kiln.Attention (src/ops/attention.c) on CUDA in the FlashAttention-2
 * form, for f16 / bf16 with head dims D = Dv a multiple of 16 from 32 to 128 (k-steps of 16
 * for Q K^T, pairs of 8-wide n-tiles for P V; ViT-H/14's 80 among them).
 *
 * Validated on an H100 (bench/NOTES.md "t7 / z6 results": vit_b_16 fp16 at batch 256 45.2 ->
 * 31.9 ms). It runs when kiln_cuda's flash_attention is on: the default; off with
 * kiln_cuda_options.flash_attention < 0, --disable flash-attention or KILN_CUDA_FLASH_ATTN=0
 * when the kiln_cuda is created, and then attention.cu's kernels run every Attention node.
 * The GPU tests that check it: ctest backend_ops_flash_attn (the Attention op's sweep cases
 * with it on), cuda_attention_flash (the torchvision exports), and
 * `test_backend_ops --flash-bench` (ViT-B/16, Swin-T and a long sequence, flash against
 * attention.cu's kernel, timed and compared).
 *
 * Work items are (flat batch index n, tile of BM = 64 query rows), row tiles fastest; as
 * many blocks of 4 warps as are resident take them in turn (KILN_CUDA_FLASH_GRID caps the
 * grid for tests), and warp w owns the query rows 16 w .. 16 w + 15 of a tile. K and V go
 * through shared memory in tiles of BN = 64 keys, loaded by cp.async (16 bytes a thread,
 * rows past Lk zero-filled) and interleaved as in FlashAttention-2: V_j loads while
 * S_j = Q K_j^T is computed, K_{j+1} (after an item's last tile, the next item's Q and K_0)
 * while O += P_j V_j is. The products are mma.sync.m16n8k16 (f16 / bf16 in, f32
 * accumulation) with the operands read by ldmatrix (V with .trans); Q's fragments stay in
 * registers for the whole row tile. Softmax is online, in registers, in base 2 (the scale
 * times log2(e) applied to S, the biases times log2(e) added; without biases or norms and
 * with a positive scale, the scale is applied inside the exponential, one FFMA with the
 * max: FOLD): a running max and sum per row, the accumulators rescaled by
 * exp2(m_old - m_new) when the max grows. P is rounded to
 * the I/O type in registers and used directly as the A operand of P V (the C fragment of
 * m16n8k16 is the A fragment's layout). Keys past Lk get -inf (16-key groups wholly past
 * Lk are not multiplied at all), query rows past Lq are not written (a warp whose 16 rows
 * all are only loads tiles); a row whose scores are all -inf (a full mask) gives NaN, as
 * the CPU reference and attention.cu do. O is normalized by the row sum at the end and written through the
 * op's output view (any strides).
 *
 * Cosine attention (L2NORM on Q and / or K: the NORM form): when Q and K_j are in shared
 * memory, two threads a row compute 1 / max(||row||, eps) of the tile's query rows (once)
 * and keys into shared memory, and each score is multiplied by its row's and key's factor
 * before the softmax, so q and k are never normalized in memory. A tensor-valued scale
 * (per head) is one factor per block, taken into scale_log2.
 *
 * dev/flash_attention_sim.py transcribes one warp of it into numpy at the fragment level
 * (ldmatrix and mma as the PTX ISA defines them) and checks the index math against plain
 * attention for D 32 to 128: run it after changing the addressing or the softmax.
 *
 * What it takes (kiln_cuda_flash_attention_ok; otherwise attention.cu's kernels run, and the
 * reason is kept in kiln_cuda_stats.flash_refused): f16 / bf16, D = Dv in 32, 48, ..., 128, Q,
 * K and V rows that are 16-byte aligned runs (column stride 1; row and batch strides,
 * offset and the pointer multiples of 8 elements). The biases: any float dtype, any strides;
 * per key tile all threads stage their sum (times log2 e) into shared memory with
 * coalesced, unconditional loads (stage_bias). Loaded per score element inside the masking
 * branch, as before, the loads went out one L2 round trip at a time: Swin-T's stage-1
 * layer took 0.45 ms at batch 64, 8 TFLOP/s.
 */
#include "cp_async.cuh"
#include "dtype.cuh"
#include "mma.cuh"

extern "C" {
#include "../ops/attention.h"
}

#include <stdio.h>

using namespace kiln_cu;

namespace {

constexpr int FWARPS = 4;
constexpr int FTHREADS = 32 * FWARPS;
constexpr int BM = 16 * FWARPS; /* query rows per block */
constexpr int BN = 64;          /* keys per K / V tile */
constexpr int PADH = 8;         /* halves of padding per shared row: ldmatrix's 8 rows hit 8 distinct 16-byte bank groups */
constexpr float LOG2E = 1.4426950408889634f;

struct FArgs {
    const void *q, *k, *v, *bias[2];
    void *o;
    int bias_dt[2];
    kiln_attn_addr aq, ak, av, ao, ab[2];
    int lq, lk;
    float scale_log2; /* scale * log2(e) */
    int o_pairs;      /* O's rows are runs (column stride 1) with every (row, even column) 4-byte aligned */
    int qn, kn;       /* NORM: Q's / K's rows divided by max(L2 norm, eps) (each on its own) */
    float qeps, keps;
    int fold;         /* no biases, no norms, every scale > 0: the scale applied in the exponential */
    int mt;           /* m-tiles a warp: 2 (FOLD, D <= MT2_MAX_D, Lq > BM) or 1 */
    int nrt;          /* row tiles of mt * BM queries per batch index; items n * nrt + tile */
    int nitems;
    int n_hs;         /* a tensor scale: batch n's scores also times hs[fbase(ahs, n)] */
    float hs[KILN_ATTN_MAX_HS];
    kiln_attn_addr ahs;
};

/* Batch n's offset: n's digits in bdims' mixed radix times bstr. 32-bit digits (n and every
 * bdims below 2^31: kiln_cuda_flash_attention_ok): a 64-bit division is a ~70-instruction
 * routine, and the five bases of an item took ~1,600 instructions a thread, a third of a
 * ViT-B/16 item's work. */
__device__ __forceinline__ long long fbase(const kiln_attn_addr &a, unsigned n) {
    long long off = a.off;
    for (int i = a.nb - 1; i >= 0; i--) {
        const unsigned d = (unsigned)a.bdims[i];
        off += (long long)(n % d) * a.bstr[i];
        n /= d;
    }
    return off;
}

/* 2^x, flushing subnormal results to 0 (ex2.approx.ftz: exp2f's subnormal handling is three
 * more instructions per score); ex2(-inf) = 0. */
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Bias elements of any float dtype, in float (attention.cu's load_any). */
__device__ __forceinline__ float bias_f(float v) { return v; }
__device__ __forceinline__ float bias_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float bias_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float bias_f(double v) { return (float)v; }

constexpr int BLD = BN + 8; /* f32 row stride of the staged bias tile: 8 rows x float2 in 2 wavefronts */

/* The bias tile of rows i0 .. i0 + BM - 1 and keys j0 .. j0 + BN - 1, times log2(e), into
 * sB (added to what is there with ADD): all threads, consecutive threads on consecutive keys,
 * every load unconditional (the address clamped into the tensor, the value zeroed past Lq /
 * Lk) so that the loads are issued together instead of one L2 round trip each. A thread
 * keeps one key column for the whole tile (FTHREADS / BN rows a pass) and walks its rows
 * with a pointer: computed per element, the clamped 64-bit addresses took ~30 instructions
 * an element, most of Swin-T's instructions (ncu: ALU the busiest pipe). */
template <bool ADD, typename BT>
__device__ __forceinline__ void stage_bias_t(float *sB, const BT *p, long long b0, long long rs, long long cs, int i0,
                                             int j0, int lq, int lk, int tid) {
    constexpr int RSTEP = FTHREADS / BN;
    static_assert(FTHREADS % BN == 0 && BM % RSTEP == 0, "whole rows a pass");
    const int c = tid % BN, r0 = tid / BN;
    const bool cin = j0 + c < lk;
    const BT *pr = p + b0 + (long long)min(j0 + c, lk - 1) * cs + (long long)min(i0 + r0, lq - 1) * rs;
    const long long step = RSTEP * rs;
    float *d = sB + r0 * BLD + c;
#pragma unroll 8
    for (int it = 0; it < BM / RSTEP; it++) {
        const int r = i0 + r0 + it * RSTEP;
        float v = bias_f(*pr);
        v = cin && r < lq ? v * LOG2E : 0.f;
        if (r + RSTEP < lq) pr += step;
        d[it * RSTEP * BLD] = ADD ? d[it * RSTEP * BLD] + v : v;
    }
}

template <bool ADD>
__device__ __forceinline__ void stage_bias(float *sB, const void *p, int dt, long long b0, const kiln_attn_addr &ad, int i0,
                                           int j0, int lq, int lk, int tid) {
    if (dt == KILN_F16) stage_bias_t<ADD>(sB, (const __half *)p, b0, ad.rs, ad.cs, i0, j0, lq, lk, tid);
    else if (dt == KILN_BF16) stage_bias_t<ADD>(sB, (const __nv_bfloat16 *)p, b0, ad.rs, ad.cs, i0, j0, lq, lk, tid);
    else if (dt == KILN_F32) stage_bias_t<ADD>(sB, (const float *)p, b0, ad.rs, ad.cs, i0, j0, lq, lk, tid);
    else stage_bias_t<ADD>(sB, (const double *)p, b0, ad.rs, ad.cs, i0, j0, lq, lk, tid);
}

/* Rows r0 .. r0 + ROWS - 1 of an operand (row r at base + r * rs, D contiguous elements) into
 * shared memory (row stride D + PADH), 16 bytes per cp.async; rows at or past rmax are
 * zero-filled (src-size 0: nothing is read). */
template <typename T, int D, int ROWS = 64>
__device__ __forceinline__ void load_tile(T *s, const T *g, long long base, long long rs, int r0, int rmax, int tid) {
    constexpr int CH = D / 8, LD = D + PADH;
    static_assert(ROWS * CH % FTHREADS == 0, "whole passes of the block");
#pragma unroll
    for (int it = 0; it < ROWS * CH / FTHREADS; it++) {
        const int idx = tid + it * FTHREADS, r = idx / CH, c = (idx % CH) * 8, gr = r0 + r;
        const bool in = gr < rmax;
        const T *src = g + base + (in ? (long long)gr * rs + c : 0);
        cp_async16(smem_u32(s + r * LD + c), src, in ? 16 : 0);
    }
}

/* 1 / max(||row||, eps) of the 64 rows of a staged tile (row stride D + PADH) into out[64]
 * (1 for every row when !on): two threads a row, each summing half of it. */
template <typename T, int D>
__device__ __forceinline__ void tile_rnorm(float *out, const T *s, bool on, float eps, int tid) {
    constexpr int LD = D + PADH, H2 = D / 2;
    static_assert(FTHREADS == 128, "two threads per row of 64");
    const int r = tid / 2, h = tid % 2;
    float ss = 0.f;
    if (on)
#pragma unroll
        for (int c = 0; c < H2; c++) {
            const float x = to_f<T>(s[r * LD + h * H2 + c]);
            ss += x * x;
        }
    ss += __shfl_xor_sync(0xffffffffu, ss, 1);
    if (h == 0) out[r] = on ? 1.f / fmaxf(sqrtf(ss), eps) : 1.f;
}

/* S's 16 keys np * 16 .. + 15 (two n-tiles of 8), k-step kk, for the first lmt m-tiles: B
 * from K's rows by ldmatrix, once for them all. */
template <typename T, int LD, int MT>
__device__ __forceinline__ void s_step(float (*s)[BN / 8][4], const uint32_t (*qk)[4], const T *sK, int np, int kk,
                                       int lane, int lmt) {
    uint32_t b[4]; /* keys np*16 + (0..7 | 8..15), dims kk*16 + (0..7, 8..15) */
    ldmatrix_x4(b, smem_u32(sK + (np * 16 + (lane % 8) + (lane / 16) * 8) * LD + kk * 16 + ((lane / 8) % 2) * 8));
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        if (mt < lmt) {
            mma16816<T>(s[mt][2 * np], qk[mt], b[0], b[1]);
            mma16816<T>(s[mt][2 * np + 1], qk[mt], b[2], b[3]);
        }
}

/* Q's A fragment of m-tile mt, k-step kk (rows mt * BM + wr .. + 15 of the staged tile). */
template <typename T, int LD>
__device__ __forceinline__ void q_frag(uint32_t q[4], const T *sQ, int mt, int wr, int kk, int lane) {
    ldmatrix_x4(q, smem_u32(sQ + (mt * BM + wr + (lane % 8) + ((lane / 8) % 2) * 8) * LD + kk * 16 + (lane / 16) * 8));
}

/* O += P V over keys kk * 16 .. + 15 for the first lmt m-tiles: P's C fragments rounded to T
 * are the A fragment; each V fragment read once for them all. */
template <typename T, int D, int LD, int MT>
__device__ __forceinline__ void pv_step(float (*o)[D / 8][4], const float (*s)[BN / 8][4], const T *sV, int kk, int lane,
                                        int lmt) {
    uint32_t pa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        pa[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < D / 16; dp++) {
        uint32_t b[4]; /* keys kk*16 + (0..7, 8..15), dims dp*16 + (0..7 | 8..15), transposed */
        ldmatrix_x4_trans(b, smem_u32(sV + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD + dp * 16 + (lane / 16) * 8));
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
            if (mt < lmt) {
                mma16816<T>(o[mt][2 * dp], pa[mt], b[0], b[1]);
                mma16816<T>(o[mt][2 * dp + 1], pa[mt], b[2], b[3]);
            }
    }
}

/* One work item: batch index n, query rows i0 .. i0 + MT * BM - 1, and what follows from them. */
template <int MT> struct Item {
    long long qb, kb, vb, ob, bb[2];
    int i0;
    bool live[MT]; /* this warp's 16 rows of m-tile mt: one below Lq */
    float scale_log2;
};

template <bool BIAS, int MT> __device__ __forceinline__ Item<MT> item_at(const FArgs &a, int item, int wr) {
    Item<MT> it;
    const unsigned n = (unsigned)item / (unsigned)a.nrt;
    it.i0 = (item - (int)n * a.nrt) * (MT * BM);
    it.qb = fbase(a.aq, n);
    it.kb = fbase(a.ak, n);
    it.vb = fbase(a.av, n);
    it.ob = fbase(a.ao, n);
    it.bb[0] = it.bb[1] = 0;
    if (BIAS)
#pragma unroll
        for (int sl = 0; sl < 2; sl++)
            if (a.bias[sl]) it.bb[sl] = fbase(a.ab[sl], n);
    it.scale_log2 = a.n_hs > 0 ? a.scale_log2 * a.hs[fbase(a.ahs, n)] : a.scale_log2;
    /* a warp's m-tile whose 16 rows are all past Lq (the last row tile of L 197: 5 rows,
     * warps 1-3) is not computed: its products and softmax would be thrown away */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) it.live[mt] = it.i0 + mt * BM + wr < a.lq;
    return it;
}

/* Resident blocks, each taking the items blockIdx.x, + gridDim.x, ... in turn (items are
 * row tiles fastest, so the blocks at work at one time share their heads' K and V in L2;
 * with a block per item and the batch index fastest, each head's K and V were read from
 * memory once per row tile). The next item's Q and K_0 are loaded while the current item's
 * last P V is computed, as K_{j+1} is within an item.
 * MT m-tiles a warp (2: the FOLD form only): warp w owns the rows mt * 64 + 16 w .. + 15 of
 * an item of MT * 64 rows, and each K / V fragment read by ldmatrix feeds MT products (as
 * FlashAttention-2's 128-row tiles): half the shared-memory reads per product, and two
 * independent chains of products and softmax per warp. */
template <typename T, int D, bool BIAS, bool NORM, bool FOLD, int MT>
__global__ void __launch_bounds__(FTHREADS, MT == 2 ? 2 : D <= 48 ? 4 : D <= 80 ? 3 : 1) flash_kernel(FArgs a) {
    static_assert(!FOLD || (!BIAS && !NORM), "FOLD: plain scaled scores only");
    static_assert(MT == 1 || (MT == 2 && FOLD), "two m-tiles: the FOLD form only");
    constexpr int LD = D + PADH;
    constexpr int KD = D / 16; /* k-steps of S = Q K^T; also the 16-column pairs of O */
    constexpr int BMT = MT * BM; /* query rows of an item */
    /* one m-tile: Q's fragments stay in registers for the item; two: read again from sQ at
     * each k-step (8 more ldmatrix a key tile against 64 products, and 32 registers fewer) */
    constexpr bool QHOLD = MT == 1;
    extern __shared__ __align__(128) unsigned char fsm[];
    T *sQ = (T *)fsm, *sK = sQ + BMT * LD, *sV = sK + BN * LD;
    float *sB = (float *)(sV + BN * LD); /* BIAS: the tile's summed biases (BM x BLD f32) */
    float *sRQ = sB + (BIAS ? BM * BLD : 0), *sRK = sRQ + BM; /* NORM: rows' and keys' 1 / max(norm, eps) */
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int wr = warp * 16;
    const T *Q = (const T *)a.q, *K = (const T *)a.k, *V = (const T *)a.v;
    T *O = (T *)a.o;
    const int lq = a.lq, lk = a.lk;
    const int ntiles = (lk + BN - 1) / BN;
    int item = blockIdx.x;
    if (item >= a.nitems) return;
    Item<MT> cur = item_at<BIAS, MT>(a, item, wr);

    load_tile<T, D, BMT>(sQ, Q, cur.qb, a.aq.rs, cur.i0, lq, tid);
    load_tile<T, D>(sK, K, cur.kb, a.ak.rs, 0, lk, tid);
    cp_async_commit();

    for (;;) {
        const int next = (long long)item + gridDim.x < a.nitems ? item + (int)gridDim.x : -1;
        uint32_t qf[1][KD][4]; /* QHOLD: Q's A fragments for the whole item */
        float o[MT][D / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < D / 8; j++) o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.f;
        float m[MT][2], l[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            m[mt][0] = m[mt][1] = -INFINITY;
            l[mt][0] = l[mt][1] = 0.f;
        }
        float rq[2] = {1.f, 1.f}; /* NORM: this thread's two rows' 1 / max(norm, eps) */

        for (int jt = 0; jt < ntiles; jt++) {
            const int j0 = jt * BN;
            load_tile<T, D>(sV, V, cur.vb, a.av.rs, j0, lk, tid);
            cp_async_commit();
            if (BIAS) { /* while V_j (and K_j) load; the loop's last barrier freed sB */
                if (a.bias[0])
                    stage_bias<false>(sB, a.bias[0], a.bias_dt[0], cur.bb[0], a.ab[0], cur.i0, j0, lq, lk, tid);
                if (a.bias[1] && a.bias[0])
                    stage_bias<true>(sB, a.bias[1], a.bias_dt[1], cur.bb[1], a.ab[1], cur.i0, j0, lq, lk, tid);
                else if (a.bias[1])
                    stage_bias<false>(sB, a.bias[1], a.bias_dt[1], cur.bb[1], a.ab[1], cur.i0, j0, lq, lk, tid);
            }
            cp_async_wait<1>(); /* Q (first tile) and K_j are in */
            __syncthreads();
            if (NORM) { /* the keys' (and, first, the rows') inverse norms; the last barrier freed sRK */
                if (jt == 0) tile_rnorm<T, D>(sRQ, sQ, a.qn, a.qeps, tid);
                tile_rnorm<T, D>(sRK, sK, a.kn, a.keps, tid);
                __syncthreads();
                if (jt == 0) {
                    rq[0] = sRQ[wr + g];
                    rq[1] = sRQ[wr + g + 8];
                }
            }
            if (QHOLD && jt == 0 && cur.live[0])
#pragma unroll
                for (int kk = 0; kk < KD; kk++) q_frag<T, LD>(qf[0][kk], sQ, 0, wr, kk, lane);
            /* S = Q K_j^T: per m-tile 16 rows x 64 keys, 8 n-tiles of 8 keys; 16-key groups
             * wholly past Lk are skipped (the last tile of L 197 has 5 keys: 1 group of 4),
             * their scores masked to -inf below */
            float s[MT][BN / 8][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int j = 0; j < BN / 8; j++) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;
            const int kvalid = lk - j0; /* keys of this tile (> 0) */
            const bool tail = kvalid < BN; /* keys past Lk to mask: the last tile only */
            /* 16-key groups of this tile with a key below Lk (0: the warp has no live row); a
             * whole tile with every m-tile live takes the loops without per-group branches */
            const int ng = cur.live[0] ? min(BN / 16, (kvalid + 15) / 16) : 0;
            const bool whole = ng == BN / 16 && cur.live[MT - 1];
            const int lmt = MT == 1 || cur.live[MT - 1] ? MT : 1; /* live m-tiles (a prefix) */
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                uint32_t qk[MT][4]; /* Q's A fragments of k-step kk: held (QHOLD) or read again */
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    if (QHOLD) {
#pragma unroll
                        for (int r = 0; r < 4; r++) qk[mt][r] = qf[0][kk][r];
                    } else if (mt < lmt && ng > 0) {
                        q_frag<T, LD>(qk[mt], sQ, mt, wr, kk, lane);
                    }
                }
                if (whole) {
#pragma unroll
                    for (int np = 0; np < BN / 16; np++) s_step<T, LD, MT>(s, qk, sK, np, kk, lane, MT);
                } else {
#pragma unroll
                    for (int np = 0; np < BN / 16; np++)
                        if (np < ng) s_step<T, LD, MT>(s, qk, sK, np, kk, lane, lmt);
                }
            }
            /* base-2 logits: scale (FOLD: inside the exponential below), norms, biases */
            if (!FOLD) {
#pragma unroll
                for (int nt = 0; nt < BN / 8; nt++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int c = nt * 8 + t * 2 + (e & 1);
                        float x = s[0][nt][e] * cur.scale_log2;
                        if (NORM) x *= rq[e / 2] * sRK[c];
                        if (BIAS) x += sB[(wr + g + 8 * (e / 2)) * BLD + c];
                        s[0][nt][e] = x;
                    }
                }
            }
            if (tail) /* keys past Lk */
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            if (nt * 8 + t * 2 + (e & 1) >= kvalid) s[mt][nt][e] = -INFINITY;
            /* online softmax, rows g (h = 0) and g + 8 (h = 1) of each m-tile; a row lives in
             * the 4 threads of a quad. FOLD: s holds raw scores and the scale (> 0: the host
             * checks) is applied in one FFMA with the max, as in FlashAttention-2 */
            const float sc = FOLD ? cur.scale_log2 : 1.f;
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float mx = -INFINITY;
#pragma unroll
                    for (int nt = 0; nt < BN / 8; nt++) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float mnew = fmaxf(m[mt][h], mx * sc);
                    const float mu = mnew == -INFINITY ? 0.f : mnew; /* no (-inf) - (-inf) */
                    const float alpha = ex2(m[mt][h] - mu);
                    float sum = 0.f;
#pragma unroll
                    for (int nt = 0; nt < BN / 8; nt++) {
                        const float p0 = ex2(fmaf(s[mt][nt][2 * h], sc, -mu));
                        const float p1 = ex2(fmaf(s[mt][nt][2 * h + 1], sc, -mu));
                        s[mt][nt][2 * h] = p0;
                        s[mt][nt][2 * h + 1] = p1;
                        sum += p0 + p1;
                    }
                    l[mt][h] = l[mt][h] * alpha + sum; /* this thread's share; the quad's summed at the end */
                    m[mt][h] = mnew;
#pragma unroll
                    for (int j = 0; j < D / 8; j++) {
                        o[mt][j][2 * h] *= alpha;
                        o[mt][j][2 * h + 1] *= alpha;
                    }
                }
            __syncthreads(); /* every warp is done with K_j (and, at jt 0, with Q) */
            if (jt + 1 < ntiles) {
                load_tile<T, D>(sK, K, cur.kb, a.ak.rs, j0 + BN, lk, tid);
                cp_async_commit();
                cp_async_wait<1>(); /* V_j is in */
            } else if (next >= 0) { /* the next item's Q and K_0 while this one finishes */
                const unsigned nn = (unsigned)next / (unsigned)a.nrt;
                load_tile<T, D, BMT>(sQ, Q, fbase(a.aq, nn), a.aq.rs, (next - (int)nn * a.nrt) * BMT, lq, tid);
                load_tile<T, D>(sK, K, fbase(a.ak, nn), a.ak.rs, 0, lk, tid);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
            /* O += P V_j: P's C fragments are the A fragments of 16 keys (groups past Lk: P = 0) */
            if (whole) {
#pragma unroll
                for (int kk = 0; kk < BN / 16; kk++) pv_step<T, D, LD, MT>(o, s, sV, kk, lane, MT);
            } else {
#pragma unroll
                for (int kk = 0; kk < BN / 16; kk++)
                    if (kk < ng) pv_step<T, D, LD, MT>(o, s, sV, kk, lane, lmt);
            }
            __syncthreads(); /* every warp is done with V_j */
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float sum = l[mt][h];
                sum += __shfl_xor_sync(0xffffffffu, sum, 1);
                sum += __shfl_xor_sync(0xffffffffu, sum, 2);
                const float inv = sum > 0.f ? 1.f / sum : __int_as_float(0x7fc00000);
                const int r = cur.i0 + mt * BM + wr + g + 8 * h; /* this thread's query row */
                if (r >= lq) continue;
                const long long rb = cur.ob + (long long)r * a.ao.rs;
                if (a.o_pairs) {
#pragma unroll
                    for (int j = 0; j < D / 8; j++)
                        *(uint32_t *)(O + rb + j * 8 + t * 2) = pack2<T>(o[mt][j][2 * h] * inv, o[mt][j][2 * h + 1] * inv);
                } else {
#pragma unroll
                    for (int j = 0; j < D / 8; j++) {
                        const int col = j * 8 + t * 2;
                        O[rb + (long long)col * a.ao.cs] = from_f<T>(o[mt][j][2 * h] * inv);
                        O[rb + (long long)(col + 1) * a.ao.cs] = from_f<T>(o[mt][j][2 * h + 1] * inv);
                    }
                }
            }
        if (next < 0) break;
        item = next;
        cur = item_at<BIAS, MT>(a, item, wr);
    }
}

template <int D, bool BIAS, bool NORM, int MT = 1> constexpr size_t flash_smem() {
    return (size_t)(MT * BM + 2 * BN) * (D + PADH) * 2 + (BIAS ? (size_t)BM * BLD * 4 : 0) +
           (NORM ? (size_t)(BM + BN) * 4 : 0);
}

/* Two m-tiles a warp (flash_kernel's MT): the FOLD form, head dims to 64 (registers: o and s
 * twice; 251 at D 64, no spill), more than one tile of queries. By default from MT2_MIN_LQ
 * queries: each K / V fragment then feeds two products, but a block holds 128 query rows
 * and two blocks fit a multiprocessor (three with one m-tile at D 64), and the kernel is
 * latency-bound where sequences are short (H200: Lq 1024, D 64: 0.496 -> 0.436 ms; Lq 197
 * (vit_b_16): 0.315 -> 0.325, a loss). */
constexpr int MT2_MAX_D = 64;
constexpr int64_t MT2_MIN_LQ = 512;

/* Rows of 16-byte aligned runs of 8 elements (2-byte types): column stride 1, row and
 * batch strides, offset, width and the pointer all multiples of 8 elements. */
bool rows16(const kiln_attn_addr &g, const void *p, int64_t cols) {
    bool ok = g.cs == 1 && g.rs % 8 == 0 && g.off % 8 == 0 && cols % 8 == 0 && (uintptr_t)p % 16 == 0;
    for (int i = 0; i < g.nb; i++) ok = ok && (g.bstr[i] % 8 == 0 || g.bdims[i] == 1);
    return ok;
}

template <typename T, int D, bool BIAS, bool NORM, bool FOLD, int MT = 1> kiln_status set_smem(kiln_context *ctx) {
    KILN_CUDA_CHECK(ctx, cudaFuncSetAttribute(flash_kernel<T, D, BIAS, NORM, FOLD, MT>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)flash_smem<D, BIAS, NORM, MT>()));
    return KILN_OK;
}

template <typename T, int D> kiln_status set_smem_d(kiln_context *ctx) {
    kiln_status st = set_smem<T, D, false, false, false>(ctx);
    if (!st) st = set_smem<T, D, false, false, true>(ctx);
    if (!st) st = set_smem<T, D, true, false, false>(ctx);
    if (!st) st = set_smem<T, D, false, true, false>(ctx);
    if (!st) st = set_smem<T, D, true, true, false>(ctx);
    if constexpr (D <= MT2_MAX_D)
        if (!st) st = set_smem<T, D, false, false, true, 2>(ctx);
    return st;
}

template <typename T> kiln_status set_smem_all(kiln_context *ctx) {
    kiln_status st = set_smem_d<T, 32>(ctx);
    if (!st) st = set_smem_d<T, 48>(ctx);
    if (!st) st = set_smem_d<T, 64>(ctx);
    if (!st) st = set_smem_d<T, 80>(ctx);
    if (!st) st = set_smem_d<T, 96>(ctx);
    if (!st) st = set_smem_d<T, 112>(ctx);
    if (!st) st = set_smem_d<T, 128>(ctx);
    return st;
}

/* As many blocks as are resident at once (the occupancy calculator's count, asked once per
 * kernel: the grid only sets how the items are shared, not what is computed), at most one
 * per item, at most kiln_cuda's flash_grid (KILN_CUDA_FLASH_GRID: tests give each block
 * several items). */
template <typename T, int D, bool BIAS, bool NORM, bool FOLD, int MT = 1> void launch_k(kiln_cuda *cu, const FArgs &a) {
    static int occ; /* blocks a multiprocessor holds; 0: not yet asked */
    int per_sm = __atomic_load_n(&occ, __ATOMIC_RELAXED);
    if (per_sm < 1) {
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, flash_kernel<T, D, BIAS, NORM, FOLD, MT>, FTHREADS,
                                                          flash_smem<D, BIAS, NORM, MT>()) != cudaSuccess ||
            per_sm < 1)
            per_sm = 1;
        __atomic_store_n(&occ, per_sm, __ATOMIC_RELAXED);
    }
    long long grid = (long long)cu->props.sm_count * per_sm;
    if (cu->flash_grid > 0 && grid > cu->flash_grid) grid = cu->flash_grid;
    if (grid > a.nitems) grid = a.nitems;
    flash_kernel<T, D, BIAS, NORM, FOLD, MT><<<(unsigned)grid, FTHREADS, flash_smem<D, BIAS, NORM, MT>(), cu->stream>>>(a);
}

template <typename T, int D> kiln_status launch_d(kiln_cuda *cu, kiln_context *ctx, const FArgs &a, bool bias) {
    const bool norm = a.qn || a.kn;
    if (bias && norm) launch_k<T, D, true, true, false>(cu, a);
    else if (bias) launch_k<T, D, true, false, false>(cu, a);
    else if (norm) launch_k<T, D, false, true, false>(cu, a);
    else if (a.mt == 2) {
        if constexpr (D <= MT2_MAX_D) launch_k<T, D, false, false, true, 2>(cu, a);
    } else if (a.fold) launch_k<T, D, false, false, true>(cu, a);
    else launch_k<T, D, false, false, false>(cu, a);
    KILN_CUDA_LAUNCHED(ctx, "flash_kernel (attention)");
    return KILN_OK;
}

template <typename T> kiln_status launch_t(kiln_cuda *cu, kiln_context *ctx, const FArgs &a, int d, bool bias) {
    switch (d) {
    case 32: return launch_d<T, 32>(cu, ctx, a, bias);
    case 48: return launch_d<T, 48>(cu, ctx, a, bias);
    case 64: return launch_d<T, 64>(cu, ctx, a, bias);
    case 80: return launch_d<T, 80>(cu, ctx, a, bias);
    case 96: return launch_d<T, 96>(cu, ctx, a, bias);
    case 112: return launch_d<T, 112>(cu, ctx, a, bias);
    case 128: return launch_d<T, 128>(cu, ctx, a, bias);
    default: return kiln_fail(ctx, KILN_ERR_INTERNAL, "flash attention: head dim %d", d);
    }
}

} // namespace

extern "C" kiln_status kiln_cuda_flash_attention_prepare(kiln_context *ctx) {
    static bool raised[64];
    int dev = 0;
    KILN_CUDA_CHECK(ctx, cudaGetDevice(&dev));
    if (dev >= 0 && dev < 64 && raised[dev]) return KILN_OK;
    kiln_status st = set_smem_all<__half>(ctx);
    if (!st) st = set_smem_all<__nv_bfloat16>(ctx);
    if (!st && dev >= 0 && dev < 64) raised[dev] = true;
    return st;
}

extern "C" bool kiln_cuda_flash_attention_ok(const kiln_attn_geom *g, int dtype, const void *q, const void *k,
                                             const void *v, char *why, size_t n) {
    if (dtype != KILN_F16 && dtype != KILN_BF16) {
        snprintf(why, n, "dtype %s (the flash kernel takes f16 and bf16)", kiln_dtype_name((kiln_dtype)dtype));
        return false;
    }
    if (g->d != g->dv || g->d % 16 != 0 || g->d < 32 || g->d > 128) {
        snprintf(why, n, "head dims %lld and %lld (the flash kernel takes equal dims, a multiple of 16 from 32 to 128)",
                 (long long)g->d, (long long)g->dv);
        return false;
    }
    const char *bad = !rows16(g->q, q, g->d) ? "Q" : !rows16(g->k, k, g->d) ? "K" : !rows16(g->v, v, g->dv) ? "V" : NULL;
    if (bad) {
        snprintf(why, n, "%s's rows are not 16-byte aligned runs (column stride 1, strides, offset and address multiples "
                 "of 8 elements)", bad);
        return false;
    }
    if (g->lq < 1 || g->lk < 1 || g->nbatch < 1 || g->nbatch > 0x7fffffffLL || g->lq > 0x7fffffffLL - BM ||
        g->lk > 0x7fffffffLL - BN || g->nbatch * ((g->lq + BM - 1) / BM) > 0x7fffffffLL) {
        snprintf(why, n, "%lld batches of %lld queries and %lld keys (more than 2^31 - 1 tiles of %d queries, the "
                 "flash kernel's items)", (long long)g->nbatch, (long long)g->lq, (long long)g->lk, BM);
        return false;
    }
    /* fbase's digits are 32-bit: the batch dims of every operand's address */
    const kiln_attn_addr *ad[7] = {&g->q, &g->k, &g->v, &g->o, g->has_bias[0] ? &g->bias[0] : NULL,
                                   g->has_bias[1] ? &g->bias[1] : NULL, g->n_hs > 0 ? &g->hsa : NULL};
    for (int i = 0; i < 7; i++)
        for (int j = 0; ad[i] && j < ad[i]->nb; j++)
            if (ad[i]->bdims[j] < 1 || ad[i]->bdims[j] > 0x7fffffffLL) {
                snprintf(why, n, "a batch dim of %lld (the flash kernel's batch digits are 32-bit)",
                         (long long)ad[i]->bdims[j]);
                return false;
            }
    return true;
}

extern "C" kiln_status kiln_cuda_flash_attention(kiln_cuda *cu, kiln_context *ctx, const kiln_attn_geom *g, int dtype,
                                                 const void *q, const void *k, const void *v, const void *const bias[2],
                                                 const int bias_dt[2], void *o) {
    kiln_status st = kiln_cuda_flash_attention_prepare(ctx);
    if (st) return st;
    FArgs a = {};
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    bool any_bias = false;
    for (int s = 0; s < 2; s++)
        if (g->has_bias[s]) {
            a.bias[s] = bias[s];
            a.bias_dt[s] = bias_dt[s];
            a.ab[s] = g->bias[s];
            any_bias = true;
        }
    a.aq = g->q;
    a.ak = g->k;
    a.av = g->v;
    a.ao = g->o;
    a.lq = (int)g->lq;
    a.lk = (int)g->lk;

    a.scale_log2 = g->scale * LOG2E;
    a.qn = g->q_norm;
    a.kn = g->k_norm;
    a.qeps = g->q_eps;
    a.keps = g->k_eps;
    a.n_hs = g->n_hs;
    bool pos = g->scale > 0.f;
    for (int i = 0; i < g->n_hs; i++) {
        a.hs[i] = g->hs[i];
        pos = pos && g->hs[i] > 0.f;
    }
    a.fold = pos && !any_bias && !a.qn && !a.kn;
    /* two m-tiles from MT2_MIN_LQ queries (or everywhere the form allows with
     * KILN_CUDA_FLASH_MT=2; never with =1) */
    const bool mt2_ok = a.fold && g->d <= MT2_MAX_D && g->lq > BM;
    a.mt = mt2_ok && (cu->flash_mt == 2 || (cu->flash_mt == 0 && g->lq >= MT2_MIN_LQ)) ? 2 : 1;
    a.nrt = (int)((g->lq + a.mt * BM - 1) / (a.mt * BM));
    a.nitems = (int)(g->nbatch * a.nrt);
    if (g->n_hs > 0) a.ahs = g->hsa;
    bool pairs = g->o.cs == 1 && g->o.rs % 2 == 0 && g->o.off % 2 == 0 && (uintptr_t)o % 4 == 0;
    for (int i = 0; i < g->o.nb; i++) pairs = pairs && (g->o.bstr[i] % 2 == 0 || g->o.bdims[i] == 1);
    a.o_pairs = pairs;
    if (dtype == KILN_F16) return launch_t<__half>(cu, ctx, a, (int)g->d, any_bias);
    if (dtype == KILN_BF16) return launch_t<__nv_bfloat16>(cu, ctx, a, (int)g->d, any_bias);
    return kiln_fail(ctx, KILN_ERR_INTERNAL, "flash attention: dtype %d", dtype);
}
