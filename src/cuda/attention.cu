/*
 * attention.cu — kiln.Attention (src/ops/attention.c) on CUDA: for each flat batch index n
 * and each tile of TQ query rows, one block computes
 *
 *     O[n, i, :] = sum_j softmax_j(scale * <Q[n, i, :], K[n, j, :]> + bias0 + bias1) V[n, j, :]
 *
 * with Q, K, V, the biases and O each addressed through the geometry the op resolves for
 * the plan's shapes (kiln_attention_resolve: an offset, the flat batch index's mixed-radix
 * strides, a row and a column stride), so the head split / merge views of the producers
 * are read and written in place. Q, K, V, O: f32, f16 or bf16 (one dtype); biases any
 * float dtype. All arithmetic in f32: the Q tile (scaled) and K / V tiles of KT rows are
 * staged in shared memory as float, the whole score rows (TQ x Lk) stay in shared memory,
 * the softmax is exact (row max, then exp and sum, in two passes), and P V accumulates in
 * registers. CUDA-core FMAs with a 2 x 4 (scores) and 2 x 8 (output) register tile per
 * thread: the attention products of the torchvision transformers are small (ViT-B/16 at
 * batch 64: ~9 GFLOP); what this kernel removes is the memory passes around them.
 *
 * f16 / bf16 with head dims multiples of 16 take the tensor-core form below
 * (attention_wmma_kernel); the CUDA-core kernel serves f32 and the other head dims.
 *
 * With kiln_cuda's flash_attention on (the default), f16 / bf16 nodes that
 * attention_flash.cu takes run there instead (kiln_cuda_k_attention).
 *
 * Limits (kiln_cuda_sup_attention refuses beyond, and the fuse-attention pass then leaves
 * the pattern unfused): head dims D, Dv <= 128, and Lk such that the score rows fit in
 * shared memory (about 1,500 at D = 128).
 */
#include "dtype.cuh"

#include <mma.h>
#include <type_traits>

extern "C" {
#include "../ops/attention.h"
}

#include <stdio.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256; /* 16 x 16 */
constexpr int TQ = 32;       /* query rows per block: 2 per thread row */
constexpr int KT = 64;       /* key / value rows per tile: 4 per thread column */
constexpr int MAXD = 128;    /* head dims: 8 output columns per thread */
constexpr size_t SMEM_MAX = 200 * 1024;

struct Addr {
    int nb;
    long long bdims[KILN_MAX_DIMS], bstr[KILN_MAX_DIMS];
    long long rs, cs, off;
};

struct Args {
    const void *q, *k, *v, *bias[2];
    void *o;
    int bias_dt[2];
    Addr aq, ak, av, ao, ab[2];
    int lq, lk, d, dv;
    float scale;
    int vq, vk, vv; /* the operand's rows are 16-byte aligned runs (cs 1): the wmma form loads 8 halves at once */
    int qn, kn;     /* Q's / K's rows divided by max(L2 norm, eps) */
    float qeps, keps;
    int n_hs; /* a tensor scale: batch n's scores times hs[base_of(ahs, n)] */
    float hs[KILN_ATTN_MAX_HS];
    Addr ahs;
};

/* The scale of batch n's scores (the scalar times the tensor scale's factor). */
__device__ __forceinline__ float batch_scale(const Args &a, long long n);

/* 1 / max(sqrt(ss), eps), ss a warp's sum of squares (lanes' shares reduced here). */
__device__ __forceinline__ float warp_rnorm(float ss, float eps) {
    for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    return 1.f / fmaxf(sqrtf(ss), eps);
}

__device__ __forceinline__ long long base_of(const Addr &a, long long n) {
    long long off = a.off;
    for (int i = a.nb - 1; i >= 0; i--) {
        off += (n % a.bdims[i]) * a.bstr[i];
        n /= a.bdims[i];
    }
    return off;
}

__device__ __forceinline__ float batch_scale(const Args &a, long long n) {
    return a.n_hs > 0 ? a.scale * a.hs[base_of(a.ahs, n)] : a.scale;
}

/* Shared floats: Q tile TQ x (D + 1), K / V tile KT x (max(D, Dv) + 1), scores TQ x (Lk + 1),
 * the rows' 1 / sum. */
static size_t smem_floats(int64_t d, int64_t dv, int64_t lk) {
    const int64_t dm = d > dv ? d : dv;
    return (size_t)(TQ * (d + 1) + KT * (dm + 1) + TQ * (lk + 1) + TQ);
}

template <typename T> __global__ void __launch_bounds__(THREADS) attention_kernel(Args a) {
    extern __shared__ float sm[];
    const int D = a.d, DV = a.dv, LK = a.lk;
    const int DM = D > DV ? D : DV;
    float *qs = sm;                  // (TQ, D + 1)
    float *kv = qs + TQ * (D + 1);   // (KT, DM + 1)
    float *s = kv + KT * (DM + 1);   // (TQ, LK + 1)
    float *rinv = s + TQ * (LK + 1); // (TQ)
    const int SS = LK + 1, KS = DM + 1, QS = D + 1;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const long long n = blockIdx.x;
    const int i0 = blockIdx.y * TQ;
    const T *Q = (const T *)a.q, *K = (const T *)a.k, *V = (const T *)a.v;
    T *O = (T *)a.o;
    const long long qb = base_of(a.aq, n), kb = base_of(a.ak, n), vb = base_of(a.av, n), ob = base_of(a.ao, n);
    const long long bb0 = a.bias[0] ? base_of(a.ab[0], n) : 0, bb1 = a.bias[1] ? base_of(a.ab[1], n) : 0;
    const int warp = tid / 32, lane = tid % 32;
    const float sc = batch_scale(a, n);

    for (int idx = tid; idx < TQ * D; idx += THREADS) {
        const int i = idx / D, d = idx % D, gi = i0 + i;
        qs[i * QS + d] = gi < a.lq ? to_f<T>(Q[qb + gi * a.aq.rs + d * a.aq.cs]) * (a.qn ? 1.f : sc) : 0.f;
    }
    if (a.qn) { /* each row times scale / max(||row||, eps): a warp per row */
        __syncthreads();
        for (int r = warp; r < TQ; r += THREADS / 32) {
            float ss = 0.f;
            for (int d = lane; d < D; d += 32) ss += qs[r * QS + d] * qs[r * QS + d];
            const float f = sc * warp_rnorm(ss, a.qeps);
            for (int d = lane; d < D; d += 32) qs[r * QS + d] *= f;
        }
    }
    /* scores S = Q K^T (+ biases), tile by tile of K */
    for (int j0 = 0; j0 < LK; j0 += KT) {
        __syncthreads();
        for (int idx = tid; idx < KT * D; idx += THREADS) {
            const int j = idx / D, d = idx % D, gj = j0 + j;
            kv[j * KS + d] = gj < LK ? to_f<T>(K[kb + gj * a.ak.rs + d * a.ak.cs]) : 0.f;
        }
        __syncthreads();
        if (a.kn) { /* K's rows normalized in place */
            for (int r = warp; r < KT; r += THREADS / 32) {
                float ss = 0.f;
                for (int d = lane; d < D; d += 32) ss += kv[r * KS + d] * kv[r * KS + d];
                const float f = warp_rnorm(ss, a.keps);
                for (int d = lane; d < D; d += 32) kv[r * KS + d] *= f;
            }
            __syncthreads();
        }
        float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        for (int d = 0; d < D; d++) {
            const float q0 = qs[ty * QS + d], q1 = qs[(ty + 16) * QS + d];
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const float kk = kv[(tx + 16 * b) * KS + d];
                acc[0][b] += q0 * kk;
                acc[1][b] += q1 * kk;
            }
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int i = ty + 16 * r, gi = i0 + i;
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const int j = j0 + tx + 16 * b;
                if (j >= LK) continue;
                float v = acc[r][b];
                if (gi < a.lq) {
                    if (a.bias[0]) v += (float)load_any(a.bias[0], a.bias_dt[0], bb0 + gi * a.ab[0].rs + j * a.ab[0].cs);
                    if (a.bias[1]) v += (float)load_any(a.bias[1], a.bias_dt[1], bb1 + gi * a.ab[1].rs + j * a.ab[1].cs);
                }
                s[i * SS + j] = v;
            }
        }
    }
    __syncthreads();
    /* exact softmax of each row: a warp per row */
    for (int r = warp; r < TQ; r += THREADS / 32) {
        float mx = -INFINITY;
        for (int j = lane; j < LK; j += 32) mx = fmaxf(mx, s[r * SS + j]);
        for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float sum = 0.f;
        for (int j = lane; j < LK; j += 32) {
            const float e = mx == -INFINITY ? 0.f : expf(s[r * SS + j] - mx);
            s[r * SS + j] = e;
            sum += e;
        }
        for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) rinv[r] = sum > 0.f ? 1.f / sum : __int_as_float(0x7fc00000);
    }
    /* O = P V, tile by tile of V */
    float acc[2][8];
#pragma unroll
    for (int c = 0; c < 8; c++) acc[0][c] = acc[1][c] = 0.f;
    for (int j0 = 0; j0 < LK; j0 += KT) {
        __syncthreads();
        for (int idx = tid; idx < KT * DV; idx += THREADS) {
            const int j = idx / DV, d = idx % DV, gj = j0 + j;
            kv[j * KS + d] = gj < LK ? to_f<T>(V[vb + gj * a.av.rs + d * a.av.cs]) : 0.f;
        }
        __syncthreads();
        const int jn = LK - j0 < KT ? LK - j0 : KT;
        for (int j = 0; j < jn; j++) {
            const float p0 = s[ty * SS + j0 + j], p1 = s[(ty + 16) * SS + j0 + j];
#pragma unroll
            for (int c = 0; c < 8; c++) {
                const int d = tx + 16 * c;
                if (d < DV) {
                    const float vv = kv[j * KS + d];
                    acc[0][c] += p0 * vv;
                    acc[1][c] += p1 * vv;
                }
            }
        }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int gi = i0 + ty + 16 * r;
        if (gi >= a.lq) continue;
        const float inv = rinv[ty + 16 * r];
#pragma unroll
        for (int c = 0; c < 8; c++) {
            const int d = tx + 16 * c;
            if (d < DV) O[ob + gi * a.ao.rs + d * a.ao.cs] = from_f<T>(acc[r][c] * inv);
        }
    }
}

/* The tensor-core form for f16 / bf16 with head dims multiples of 16 (nvcuda::wmma 16x16x16
 * fragments, f32 accumulation). S = Q K^T tile by
 * tile of KT keys into shared memory (f32), then scale, biases and the exact softmax of each
 * row in f32, P rounded to the I/O type in shared memory (0 past Lk), then O = P V tile by
 * tile of V with the accumulators in registers, stored through shared memory, scaled by the
 * row's 1 / sum and written through the output view. Rows past Lq and keys past Lk are zeros.
 * 64 query rows and 8 warps per block. */
constexpr int WTHREADS = 256; /* 8 warps */
constexpr int WTQ = 64; /* query rows per block of the wmma form */
constexpr int WPAD = 8; /* halves of padding per shared row (ldm stays a multiple of 8) */

struct WLayout {
    int qld, kld, ss, ps, lkp;
    size_t q, kv, s, p, r, rq, rk, bytes;
};

static size_t up128(size_t x) { return (x + 127) / 128 * 128; }

static WLayout wlayout(int64_t d, int64_t dv, int64_t lk) {
    WLayout w;
    const int dm = (int)(d > dv ? d : dv);
    w.lkp = (int)((lk + 15) / 16 * 16);
    w.qld = (int)d + WPAD;
    w.kld = dm + WPAD;
    w.ss = (w.lkp > dv ? w.lkp : (int)dv) + 4;
    w.ps = w.lkp + WPAD;
    w.q = 0;
    w.kv = up128(w.q + (size_t)WTQ * w.qld * 2);
    w.s = up128(w.kv + (size_t)KT * w.kld * 2);
    w.p = up128(w.s + (size_t)WTQ * w.ss * 4);
    w.r = up128(w.p + (size_t)WTQ * w.ps * 2);
    w.rq = w.r + WTQ * 4; /* L2NORM: Q's rows' and the keys' 1 / max(norm, eps) */
    w.rk = w.rq + WTQ * 4;
    w.bytes = w.rk + (size_t)w.lkp * 4;
    return w;
}

/* rows [r0, r0 + rows) of an operand (row r at base + r * rs, column c at + c * cs) into
 * dst (row stride ld), zeros past rmax; 8 elements at once when vec. */
template <typename T>
__device__ __forceinline__ void load_rows(T *dst, int ld, const T *src, long long base, long long rs, long long cs,
                                          int r0, int rows, int rmax, int cols, bool vec, int tid) {
    if (vec) {
        const int cv = cols / 8;
        for (int idx = tid; idx < rows * cv; idx += WTHREADS) {
            const int r = idx / cv, c = (idx % cv) * 8, gr = r0 + r;
            const uint4 v = gr < rmax ? *(const uint4 *)(src + base + gr * rs + c) : make_uint4(0u, 0u, 0u, 0u);
            *(uint4 *)(dst + r * ld + c) = v;
        }
        return;
    }
    const T zero = from_f<T>(0.f);
    for (int idx = tid; idx < rows * cols; idx += WTHREADS) {
        const int r = idx / cols, c = idx % cols, gr = r0 + r;
        dst[r * ld + c] = gr < rmax ? src[base + gr * rs + c * cs] : zero;
    }
}

template <typename T>
__global__ void __launch_bounds__(WTHREADS) attention_wmma_kernel(Args a, int qld, int kld, int ss, int ps, int lkp,
                                                                  unsigned oq, unsigned okv, unsigned os, unsigned op,
                                                                  unsigned orr, unsigned orq, unsigned ork) {
    using namespace nvcuda;
    extern __shared__ __align__(128) unsigned char wsm[];
    T *qs = (T *)(wsm + oq), *kv = (T *)(wsm + okv), *P = (T *)(wsm + op);
    float *S = (float *)(wsm + os), *rinv = (float *)(wsm + orr), *rq = (float *)(wsm + orq), *rk = (float *)(wsm + ork);
    const int D = a.d, DV = a.dv, LK = a.lk;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const long long n = blockIdx.x;
    const int i0 = blockIdx.y * WTQ;
    const T *Q = (const T *)a.q, *K = (const T *)a.k, *V = (const T *)a.v;
    T *O = (T *)a.o;
    const long long qb = base_of(a.aq, n), kb = base_of(a.ak, n), vb = base_of(a.av, n), ob = base_of(a.ao, n);
    const long long bb0 = a.bias[0] ? base_of(a.ab[0], n) : 0, bb1 = a.bias[1] ? base_of(a.ab[1], n) : 0;
    load_rows<T>(qs, qld, Q, qb, a.aq.rs, a.aq.cs, i0, WTQ, a.lq, D, a.vq, tid);
    if (a.qn) { /* each row's 1 / max(norm, eps), a warp per row; read after the loop's barriers */
        __syncthreads();
        for (int r = warp; r < WTQ; r += WTHREADS / 32) {
            float ss = 0.f;
            for (int d = lane; d < D; d += 32) {
                const float x = to_f<T>(qs[r * qld + d]);
                ss += x * x;
            }
            const float f = warp_rnorm(ss, a.qeps);
            if (lane == 0) rq[r] = f;
        }
    }
    for (int j0 = 0; j0 < lkp; j0 += KT) {
        __syncthreads();
        load_rows<T>(kv, kld, K, kb, a.ak.rs, a.ak.cs, j0, KT, LK, D, a.vk, tid);
        __syncthreads();
        if (a.kn)
            for (int r = warp; r < KT && j0 + r < lkp; r += WTHREADS / 32) {
                float ss = 0.f;
                for (int d = lane; d < D; d += 32) {
                    const float x = to_f<T>(kv[r * kld + d]);
                    ss += x * x;
                }
                const float f = warp_rnorm(ss, a.keps);
                if (lane == 0) rk[j0 + r] = f;
            }
        for (int f = warp; f < 16; f += WTHREADS / 32) { /* 4 x 4 tiles of 16 x 16 */
            const int rt = f / 4, ct = f % 4;
            if (j0 + ct * 16 >= lkp) continue;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.f);
            for (int k = 0; k < D; k += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, qs + rt * 16 * qld + k, qld);
                wmma::load_matrix_sync(fb, kv + ct * 16 * kld + k, kld);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(S + rt * 16 * ss + j0 + ct * 16, acc, ss, wmma::mem_row_major);
        }
    }
    __syncthreads();
    const float sc = batch_scale(a, n);
    for (int r = warp; r < WTQ; r += WTHREADS / 32) {
        const int gi = i0 + r;
        const float rsc = a.qn ? sc * rq[r] : sc;
        float mx = -INFINITY;
        for (int j = lane; j < LK; j += 32) {
            float v = S[r * ss + j] * rsc;
            if (a.kn) v *= rk[j];
            if (gi < a.lq) {
                if (a.bias[0]) v += (float)load_any(a.bias[0], a.bias_dt[0], bb0 + gi * a.ab[0].rs + j * a.ab[0].cs);
                if (a.bias[1]) v += (float)load_any(a.bias[1], a.bias_dt[1], bb1 + gi * a.ab[1].rs + j * a.ab[1].cs);
            }
            S[r * ss + j] = v;
            mx = fmaxf(mx, v);
        }
        for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float sum = 0.f;
        for (int j = lane; j < lkp; j += 32) {
            const float e = j < LK && mx != -INFINITY ? expf(S[r * ss + j] - mx) : 0.f;
            P[r * ps + j] = from_f<T>(e);
            sum += e;
        }
        for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) rinv[r] = sum > 0.f ? 1.f / sum : __int_as_float(0x7fc00000);
    }
    /* warp w: row tiles 2 (w / 4) and 2 (w / 4) + 1, column tiles w % 4 and w % 4 + 4 */
    const int rg = warp / 4, wc = warp % 4;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> oacc[2][2];
    for (int r2 = 0; r2 < 2; r2++)
        for (int c = 0; c < 2; c++) wmma::fill_fragment(oacc[r2][c], 0.f);
    for (int j0 = 0; j0 < lkp; j0 += KT) {
        __syncthreads();
        load_rows<T>(kv, kld, V, vb, a.av.rs, a.av.cs, j0, KT, LK, DV, a.vv, tid);
        __syncthreads();
        for (int kk = 0; kk < KT && j0 + kk < lkp; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[2];
            for (int r2 = 0; r2 < 2; r2++) wmma::load_matrix_sync(fa[r2], P + (2 * rg + r2) * 16 * ps + j0 + kk, ps);
            for (int c = 0; c < 2; c++) {
                const int ct = wc + 4 * c;
                if (ct * 16 >= DV) continue;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
                wmma::load_matrix_sync(fb, kv + kk * kld + ct * 16, kld);
                for (int r2 = 0; r2 < 2; r2++) wmma::mma_sync(oacc[r2][c], fa[r2], fb, oacc[r2][c]);
            }
        }
    }
    __syncthreads();
    for (int c = 0; c < 2; c++) {
        const int ct = wc + 4 * c;
        if (ct * 16 >= DV) continue;
        for (int r2 = 0; r2 < 2; r2++)
            wmma::store_matrix_sync(S + (2 * rg + r2) * 16 * ss + ct * 16, oacc[r2][c], ss, wmma::mem_row_major);
    }
    __syncthreads();
    for (int idx = tid; idx < WTQ * DV; idx += WTHREADS) {
        const int i = idx / DV, d = idx % DV, gi = i0 + i;
        if (gi < a.lq) O[ob + gi * a.ao.rs + d * a.ao.cs] = from_f<T>(S[i * ss + d] * rinv[i]);
    }
}

/* Rows of 16-byte aligned runs of 8 elements (2-byte types): column stride 1, row and
 * batch strides, offset, width and the pointer all multiples of 8 elements. */
int vec_ok(const kiln_attn_addr &g, const void *p, int64_t cols) {
    bool ok = g.cs == 1 && g.rs % 8 == 0 && g.off % 8 == 0 && cols % 8 == 0 && (uintptr_t)p % 16 == 0;
    for (int i = 0; i < g.nb; i++) ok = ok && g.bstr[i] % 8 == 0;
    return ok;
}

void to_addr(const kiln_attn_addr &g, Addr *a) {
    a->nb = g.nb;
    for (int i = 0; i < g.nb; i++) {
        a->bdims[i] = g.bdims[i];
        a->bstr[i] = g.bstr[i];
    }
    a->rs = g.rs;
    a->cs = g.cs;
    a->off = g.off;
}

/* The kernels' shared-memory limit raised to SMEM_MAX, once per device (a plan's prepare
 * does it before any capture of a CUDA graph; the launch checks again). */
kiln_status raise_smem(kiln_context *ctx) {
    static bool raised[64];
    int dev = 0;
    KILN_CUDA_CHECK(ctx, cudaGetDevice(&dev));
    if (dev >= 0 && dev < 64 && raised[dev]) return KILN_OK;
    KILN_CUDA_CHECK(ctx, cudaFuncSetAttribute(attention_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)SMEM_MAX));
    KILN_CUDA_CHECK(ctx, cudaFuncSetAttribute(attention_kernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)SMEM_MAX));
    KILN_CUDA_CHECK(ctx, cudaFuncSetAttribute(attention_kernel<__nv_bfloat16>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_MAX));
    KILN_CUDA_CHECK(ctx, cudaFuncSetAttribute(attention_wmma_kernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)SMEM_MAX));
    KILN_CUDA_CHECK(ctx, cudaFuncSetAttribute(attention_wmma_kernel<__nv_bfloat16>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_MAX));
    if (dev >= 0 && dev < 64) raised[dev] = true;
    return KILN_OK;
}

template <typename T> kiln_status launch(kiln_cuda *cu, kiln_context *ctx, const Args &a, long long nbatch, size_t smem) {
    const dim3 grid((unsigned)nbatch, (unsigned)((a.lq + TQ - 1) / TQ));
    if constexpr (!std::is_same<T, float>::value) {
        const WLayout w = wlayout(a.d, a.dv, a.lk);
        if (a.d % 16 == 0 && a.dv % 16 == 0 && a.dv <= MAXD && a.d <= MAXD && w.bytes <= SMEM_MAX) {
            const dim3 wgrid((unsigned)nbatch, (unsigned)((a.lq + WTQ - 1) / WTQ));
            attention_wmma_kernel<T><<<wgrid, WTHREADS, w.bytes, cu->stream>>>(
                a, w.qld, w.kld, w.ss, w.ps, w.lkp, (unsigned)w.q, (unsigned)w.kv, (unsigned)w.s, (unsigned)w.p,
                (unsigned)w.r, (unsigned)w.rq, (unsigned)w.rk);
            KILN_CUDA_LAUNCHED(ctx, "attention_wmma_kernel");
            return KILN_OK;
        }
    }
    attention_kernel<T><<<grid, THREADS, smem, cu->stream>>>(a);
    KILN_CUDA_LAUNCHED(ctx, "attention_kernel");
    return KILN_OK;
}

/* The geometry of c (host shapes and values), quietly: false with a reason in why. */
bool geometry(const kiln_op_ctx *c, kiln_tensor *const *hin, kiln_attn_geom *g, char *why, size_t n) {
    kiln_context quiet = {};
    kiln_op_ctx cc = *c;
    cc.kctx = &quiet;
    if (kiln_attention_resolve(&cc, hin, g) != KILN_OK) {
        snprintf(why, n, "%s", kiln_context_message(&quiet));
        return false;
    }
    return true;
}

} // namespace

extern "C" bool kiln_cuda_sup_attention(const kiln_op_ctx *c, char *why, size_t n) {
    kiln_tensor *const *hin = kiln_cuda_host_inputs(c);
    for (int i = 0; i < 3; i++)
        if (!c->in[i] || !kiln_cuda_float_dtype(c->in[i]->dtype) || c->in[i]->dtype != c->in[0]->dtype) {
            snprintf(why, n, "Q, K and V must share one of f32, f16, bf16 (input %d)", i);
            return false;
        }
    if (c->out[0]->dtype != c->in[0]->dtype) {
        snprintf(why, n, "the output's dtype differs from Q's");
        return false;
    }
    for (int i = 3; i < 5 && i < c->n_in; i++)
        if (c->in[i] && !kiln_dtype_is_float(c->in[i]->dtype)) {
            snprintf(why, n, "bias input %d is not a float tensor", i);
            return false;
        }
    kiln_attn_geom g;
    if (!geometry(c, hin, &g, why, n)) return false;
    if (g.d < 1 || g.dv < 1 || g.d > MAXD || g.dv > MAXD) {
        snprintf(why, n, "head dims %lld and %lld (1 to %d are supported)", (long long)g.d, (long long)g.dv, MAXD);
        return false;
    }
    if (g.lk < 1 || smem_floats(g.d, g.dv, g.lk) * sizeof(float) > SMEM_MAX) {
        snprintf(why, n, "%lld keys do not fit the kernel's shared memory", (long long)g.lk);
        return false;
    }
    if (g.nbatch > 0x7fffffffLL || (g.lq + TQ - 1) / TQ > 65535) {
        snprintf(why, n, "%lld batches of %lld queries: too many blocks", (long long)g.nbatch, (long long)g.lq);
        return false;
    }
    return true;
}

extern "C" kiln_status kiln_cuda_prep_attention(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_status st = raise_smem(c->kctx);
    if (!st && cu->flash_attention) st = kiln_cuda_flash_attention_prepare(c->kctx);
    return st;
}

extern "C" kiln_status kiln_cuda_k_attention(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_status st = kiln_cuda_need_host(c);
    if (!st) st = raise_smem(c->kctx);
    if (st) return st;
    kiln_attn_geom g;
    char why[512];
    if (!geometry(c, c->host_in, &g, why, sizeof why))
        return kiln_fail(c->kctx, KILN_ERR_SHAPE, "Attention node '%s': %s", c->node->name, why);
    if (g.nbatch == 0 || g.lq == 0) return KILN_OK;
    Args a = {};
    a.q = c->in[0]->data;
    a.k = c->in[1]->data;
    a.v = c->in[2]->data;
    a.o = c->out[0]->data;
    for (int s = 0; s < 2; s++)
        if (g.has_bias[s]) {
            a.bias[s] = c->in[3 + s]->data;
            a.bias_dt[s] = c->in[3 + s]->dtype;
            to_addr(g.bias[s], &a.ab[s]);
        }
    to_addr(g.q, &a.aq);
    to_addr(g.k, &a.ak);
    to_addr(g.v, &a.av);
    to_addr(g.o, &a.ao);
    a.lq = (int)g.lq;
    a.lk = (int)g.lk;
    a.d = (int)g.d;
    a.dv = (int)g.dv;
    a.scale = g.scale;
    a.vq = vec_ok(g.q, a.q, g.d);
    a.vk = vec_ok(g.k, a.k, g.d);
    a.vv = vec_ok(g.v, a.v, g.dv);
    a.qn = g.q_norm;
    a.kn = g.k_norm;
    a.qeps = g.q_eps;
    a.keps = g.k_eps;
    a.n_hs = g.n_hs;
    for (int i = 0; i < g.n_hs; i++) a.hs[i] = g.hs[i];
    if (g.n_hs > 0) to_addr(g.hsa, &a.ahs);
    { /* cuDNN's fused attention where it takes the node and was timed faster (attention_sdpa.c) */
        bool done = false;
        st = kiln_cuda_attention_sdpa(cu, c, &g, &done);
        if (st || done) return st;
    }
    if (cu->flash_attention) { /* attention_flash.cu where it takes the node */
        char fwhy[sizeof cu->stats.flash_refused];
        if (kiln_cuda_flash_attention_ok(&g, c->in[0]->dtype, a.q, a.k, a.v, fwhy, sizeof fwhy)) {
            st = kiln_cuda_flash_attention(cu, c->kctx, &g, c->in[0]->dtype, a.q, a.k, a.v, a.bias, a.bias_dt, a.o);
            if (!st) cu->stats.attention_flash_calls++;
            return st;
        }
        cu->stats.attention_flash_fallbacks++;
        snprintf(cu->stats.flash_refused, sizeof cu->stats.flash_refused, "%s", fwhy);
    }
    const size_t smem = smem_floats(g.d, g.dv, g.lk) * sizeof(float);
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, c->in[0]->dtype, launch, cu, c->kctx, a, (long long)g.nbatch, smem);
    return st;
}
