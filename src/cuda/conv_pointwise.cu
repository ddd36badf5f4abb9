/*
 * conv_pointwise.cu — convolutions whose products are short (K = kh * kw * channels read
 * <= 64) on the tensor cores: 1x1 products of few input channels, and few-channel
 * convolutions such as RGB stems as implicit products.
 *   Y (rows, M) = act(P (rows, K) W^T + B + Z), X and Y NHWC (rows = N * OH * OW), W KRSC,
 *   f16 / bf16, M a multiple of 8, Y and Z 16-byte aligned. P's row of an output pixel is its
 *   window: taps (i, j) outer, the first u channels of X inner (u < C: the pad-channels
 *   pass's used_channels, whose other channels have zero weights and are not read).
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
 *   A block of 8 warps computes a 128 x 64 tile of Y. P's 128 rows and W's 64 rows go to
 *   shared memory, K zero-padded to a multiple of 16: for a 1x1 product with K a multiple
 *   of 8 by cp.async, 16 bytes at a time (X's rows are P's); otherwise gathered, a thread per
 *   column k of P (its tap and channel offsets from tables made once a block) walking the
 *   rows, window positions outside X read as zeros. Each warp computes a 32 x 32 part by
 *   mma.sync m16n8k16 (f32 accumulation) on ldmatrix fragments, the epilogue (bias,
 *   residual, activation: one dispatch per thread, act.cuh) is applied to the accumulators
 *   and rounded once, and the tile is staged in shared memory over P's and written as
 *   16-byte runs of whole 128-byte row pieces. Blocks are ordered column tile fastest, so
 *   the blocks sharing P's rows run together (X read from DRAM once, from L2 after).
 *
 *   conv.c times the kernel against the usual path (cuBLASLt, cuDNN's legacy API or graph,
 *   the narrow copy) the first time a problem is met and keeps the faster (KILN_CUDA_PW=1
 *   always, =0 never).
 */
#include "act.cuh"
#include "cp_async.cuh"
#include "dtype.cuh"
#include "mma.cuh"

#include <limits.h>
#include <stdio.h>

using namespace kiln_cu;
using kiln_act::act_dispatch;
using kiln_act::act_of;
using kiln_act::Epi;

namespace {

constexpr int BM = 128;     /* rows of X and Y per block */
constexpr int BN = 64;      /* output channels per block */
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

/* The epilogue of a warp's 32 x 32 accumulators into the staged tile sO (row stride LDO):
 * + bias (staged in sB, f32), + Z's value (read from global, two channels at a time), the
 * activation A, rounded to T once. */
template <typename T> struct PwEpi {
    float (&acc)[2][4][4];
    const float *sB;
    const T *__restrict__ z;
    T *sO;
    const Epi &e;
    int64_t r0;    /* the block's first row */
    int64_t rows;
    int n0, M;     /* the block's first channel, Y's channels */
    int wm, wn, lane;

    template <int A> __device__ __forceinline__ void operator()() const {
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = wm + mt * 16 + (lane >> 2) + h * 8;
                    const int cl = wn + nt * 8 + 2 * (lane & 3);
                    float v0 = acc[mt][nt][2 * h] + sB[cl], v1 = acc[mt][nt][2 * h + 1] + sB[cl + 1];
                    if (z) {
                        const int64_t gr = r0 + r;
                        const int gc = n0 + cl;
                        if (gr < rows && gc < M) {
                            const uint32_t p = *(const uint32_t *)(z + gr * M + gc);
                            T zz[2];
                            memcpy(zz, &p, sizeof p);
                            v0 += to_f(zz[0]);
                            v1 += to_f(zz[1]);
                        }
                    }
                    v0 = act_of<A, true>(v0, e);
                    v1 = act_of<A, true>(v1, e);
                    *(uint32_t *)(sO + r * LDO + cl) = pack2<T>(v0, v1);
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

template <typename T, int KP, bool GATHER>
__global__ void __launch_bounds__(THREADS, 3)
    pointwise_kernel(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b,
                     const T *__restrict__ z, T *__restrict__ y, int64_t rows, int M, int ncol, Geo g, Epi e) {
    constexpr int LD = KP + 8; /* halves; 8 ldmatrix rows hit 8 distinct 16-byte bank groups */
    constexpr int KC = KP / 8; /* 16-byte chunks of a staged row */
    constexpr int XS = BM * LD > BM * LDO ? BM * LD : BM * LDO;
    __shared__ alignas(16) T sX[XS]; /* X's tile, then Y's */
    __shared__ alignas(16) T sW[BN * LD];
    __shared__ float sB[BN];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t r0 = (int64_t)(blockIdx.x / (unsigned)ncol) * BM;
    const int n0 = (int)(blockIdx.x % (unsigned)ncol) * BN;
    if (tid < BN) sB[tid] = b && n0 + tid < M ? to_f(b[n0 + tid]) : 0.f;
    if constexpr (GATHER) {
        gather<T, KP, LD>(sX, sW, x, w, r0, rows, n0, M, g, tid);
    } else { /* a 1x1 product: P's rows are X's, K a multiple of 8 */
        const int K = g.K, kc = K / 8;
        for (int i = tid; i < BM * KC; i += THREADS) {
            const int r = i / KC, c = i % KC;
            const bool ok = r0 + r < rows && c < kc;
            cp_async16(smem_u32(sX + r * LD + c * 8), ok ? x + (r0 + r) * K + c * 8 : x, ok ? 16 : 0);
        }
        for (int i = tid; i < BN * KC; i += THREADS) {
            const int r = i / KC, c = i % KC;
            const bool ok = n0 + r < M && c < kc;
            cp_async16(smem_u32(sW + r * LD + c * 8), ok ? w + (int64_t)(n0 + r) * K + c * 8 : w, ok ? 16 : 0);
        }
        cp_async_commit();
        cp_async_wait<0>();
    }
    __syncthreads();

    const int wm = (warp & 3) * 32, wn = (warp >> 2) * 32;
    float acc[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[mt][nt][q] = 0.f;
    const bool live0 = n0 + wn < M, live1 = n0 + wn + 16 < M; /* the warp's two 16-channel halves */
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
    __syncthreads(); /* every warp has read X's tile: Y's is staged over it */
    T *sO = sX;
    act_dispatch(e.act, PwEpi<T>{acc, sB, z, sO, e, r0, rows, n0, M, wm, wn, lane});
    __syncthreads();

    using V = typename VecOf<T>::type;
    for (int i = tid; i < BM * (BN / 8); i += THREADS) {
        const int r = i / (BN / 8), c = i % (BN / 8);
        const int64_t gr = r0 + r;
        const int gc = n0 + c * 8;
        if (gr < rows && gc < M) *(V *)(y + gr * M + gc) = *(const V *)(sO + r * LDO + c * 8);
    }
}

template <typename T, bool GATHER>
void launch_kp(int kp, unsigned blocks, cudaStream_t s, const T *x, const T *w, const T *b, const T *z, T *y,
               int64_t rows, int M, int ncol, const Geo &g, const Epi &e) {
    switch (kp) {
    case 16: pointwise_kernel<T, 16, GATHER><<<blocks, THREADS, 0, s>>>(x, w, b, z, y, rows, M, ncol, g, e); break;
    case 32: pointwise_kernel<T, 32, GATHER><<<blocks, THREADS, 0, s>>>(x, w, b, z, y, rows, M, ncol, g, e); break;
    case 48: pointwise_kernel<T, 48, GATHER><<<blocks, THREADS, 0, s>>>(x, w, b, z, y, rows, M, ncol, g, e); break;
    default: pointwise_kernel<T, 64, GATHER><<<blocks, THREADS, 0, s>>>(x, w, b, z, y, rows, M, ncol, g, e); break;
    }
}

/* Whether P is X itself (a 1x1 product of K = C, a multiple of 8, x and w 16-byte aligned). */
bool plain_product(const kiln_cuda_pw_geo *p, const void *x, const void *w) {
    return p->kh == 1 && p->kw == 1 && p->sh == 1 && p->sw == 1 && p->pt == 0 && p->pl == 0 && p->OH == p->H &&
           p->OW == p->W && p->u == p->C && p->C % 8 == 0 && aligned16(x, w);
}

template <typename T>
kiln_status launch(kiln_cuda *cu, kiln_context *ctx, const kiln_cuda_pw_geo *p, const void *x, const void *w,
                   const void *b, const void *z, const Epi &e, void *y) {
    const int64_t rows = p->N * p->OH * p->OW;
    const int ncol = (int)((p->M + BN - 1) / BN);
    const unsigned blocks = (unsigned)((rows + BM - 1) / BM * ncol);
    const Geo g = {(int)p->H, (int)p->W, (int)p->C, (int)p->u, (int)p->kh, (int)p->kw, (int)p->sh, (int)p->sw,
                   (int)p->dh, (int)p->dw, (int)p->pt, (int)p->pl, (int)p->OH, (int)p->OW,
                   (int)(p->kh * p->kw * p->u)};
    const int kp = (g.K + 15) / 16 * 16;
    const T *xt = (const T *)x, *wt = (const T *)w, *bt = (const T *)b, *zt = (const T *)z;
    if (plain_product(p, x, w))
        launch_kp<T, false>(kp, blocks, cu->stream, xt, wt, bt, zt, (T *)y, rows, (int)p->M, ncol, g, e);
    else
        launch_kp<T, true>(kp, blocks, cu->stream, xt, wt, bt, zt, (T *)y, rows, (int)p->M, ncol, g, e);
    KILN_CUDA_LAUNCHED(ctx, "pointwise_kernel");
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
             (p->kw - 1) * p->dw >= (1 << 20) || (rows + BM - 1) / BM * ((p->M + BN - 1) / BN) >= ((int64_t)1 << 31))
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
