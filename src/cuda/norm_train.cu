/*
 * norm_train.cu — BatchNormalization in training mode and its gradient kiln.BatchNormGrad,
 * as the CPU reference (src/ops/batch_normalization.c) computes them.
 *
 *   BatchNormalization, training_mode = 1 (opset 14+): X (N, C, D1..Dn), or a 4-D X laid
 *   out NHWC, in f32 / f16 / bf16; scale, B, input_mean, input_var of any float dtype (f64
 *   included); outputs Y in X's dtype and layout, running_mean / running_var (optional) in
 *   input_mean's / input_var's dtype:
 *     mean, var = the batch statistics over every dim but C (population variance),
 *     running_mean = input_mean * momentum + mean * (1 - momentum), likewise running_var,
 *     y = (x - mean) * scale / sqrt(var + epsilon) + B.
 *   kiln.BatchNormGrad(dY, X, scale, B, input_mean, input_var) -> dX, dScale, dB[, dMean,
 *   dVar]: in training mode the statistics are recomputed from X (nothing saved from the
 *   forward), per channel over its M elements, xhat = (x - mean) / sqrt(var + eps):
 *     dB = sum(dY), dScale = sum(dY * xhat),
 *     dX = scale / sqrt(var + eps) * (dY - dB / M - xhat * dScale / M), dMean = dVar = 0;
 *   in inference mode mean and var are the inputs: dX = scale / sqrt(var + eps) * dY,
 *   dMean = -scale / sqrt(var + eps) * dB, dVar = -scale / 2 / (var + eps) * dScale.
 *   The parameter gradients take their parameter's dtype.
 *
 * Under amp the training graph runs both on f16/bf16 X, Y, dY, dX laid out NHWC, with f32
 * scale/B/mean/var, running statistics and dScale/dB (the precision pass: the ops'
 * f32_inputs/f32_outputs; the layout pass: the BN rules).
 *
 * Why our own kernels and not cuDNN's cudnnBatchNormalizationForwardTrainingEx: cuDNN's
 * running variance is the unbiased one (M / (M - 1)) where ONNX and the CPU reference keep
 * the population variance; its backward also needs the forward's saved statistics, which
 * BatchNormGrad does not take. These kernels are at the bandwidth floor:
 * two passes over X for the forward, two over (X, dY) for the gradient.
 *
 * Fused ReLU (attribute relu = 1, made by the fuse-bn pass, src/passes/fuse_bn.c): the
 * forward writes max(y, 0) (NaN to 0, as Relu), or max(y + Z, 0) with input 5, Z (a
 * residual of X's shape, dtype and layout, added in float, rounded once); the gradient
 * takes the ReLU's output Y as input 6 and reads dY masked by Y > 0 (as kiln.UnaryGrad
 * op=Relu) in both passes.
 *
 * The mask from X (kiln.BatchNormGrad relu = 1 with relu_mask_from_x = 1, made by the fuse-bn
 * pass unless KILN_BN_MASK_FROM_X=0 or --disable bn-mask-from-x): no Y. The forward writes S, its batch statistics (mean, var after the clamp; f64
 * (2, C), output 3) from its finalize; the gradient's bn_mask_coef computes from S, with
 * fwd_coef as the forward's finalize does, the forward's float coefficients (a, m, k), and
 * both passes take the mask as pos_from_x: Y > 0 as the forward's apply computes Y
 * (bn_affine: __fmaf_rn(a, __fsub_rn(x, m), k), rounded to T). Contract: bn_affine and
 * fwd_coef are the only places the forward's Y and the mask are computed, so the mask is
 * the forward's Y > 0 bit for bit (Y = T(max(v, 0)) > 0 exactly when T(v) > 0); the
 * explicit intrinsics keep the compiler from contracting the two differently. The gradient
 * then reads X and dY in each pass (and S), not also Y: a third fewer bytes.
 *
 * The residual's gradient (the fuse-bn pass): kiln.BatchNormGrad's input 7, dY2, is added to
 * dY (in float, rounded to the dtype once, as Sum would) before the mask; its output 5 is the
 * gradient it reads (masked under relu = 1). With either, the statistics pass writes that
 * gradient (into output 5, else into dX as scratch) and the apply pass reads it instead of
 * dY (+ dY2) and Y: X, dY, dY2, Y read and the gradient written once, then it and X read
 * and dX written.
 *
 * Each runs three kernels:
 *   1. statistics: per channel, partial sums in double of x and x^2 (and, for the gradient,
 *      dY and dY * x) over P slices of the channel's M elements into workspace (P, C, K).
 *      NCHW: grid (C, P), each block walking whole blocks of one image's S positions of its
 *      channel (one division per block step, none per element). NHWC and X (N, C) (rows of
 *      C channels), the vector path (C a multiple of V = 16 / element size, 16-byte aligned
 *      pointers): each thread owns V neighbouring channels (one 16-byte load per row) and
 *      walks rows 4 at a time, summing in float in registers (at most ~512 rows a thread);
 *      block (BX groups, BY rows), the block's rows summed in double in shared memory;
 *      grid (ceil(C / V / BX), P). Otherwise the scalar rows kernel: grid (ceil(C / 32), P),
 *      32 neighbouring channels per warp, 8 rows at a time, in double.
 *      P depends on the shape and dtype alone (never on pointers or the device), so the
 *      partial-sum layout SyncBatchNorm all-reduces is the same on every rank.
 *   2. finalize: a block per 8 channels, 128 threads down the P partials of each (coalesced
 *      rows of the partials), added in double (then as a tree), computes mean, var (E[x^2] - mean^2 in
 *      double, clamped at 0), the running statistics or the parameter gradients, and four
 *      float coefficients (a, b, m, k) per channel into workspace.
 *   3. apply, elementwise: y = a * (x - m) + k; dX = a * dY + b * (x - m) + k; the vector
 *      path as the statistics' (each thread's coefficients in registers, no index division).
 * Workspace: P * C * K doubles, then 4 * C floats (both 256-byte aligned); the gradient also
 * this rank's partials under SyncBatchNorm, then, with the mask from X, 3 * C floats (a, m, k).
 *
 * Statistics from the convolution (conv-bn-stats, issue 12): a training
 * BatchNormalization with inputs 6, 7 (X's f32 sum and sum of squares per channel) skips
 * kernel 1: the sums become one partial row (P = 1), all-reduced under SyncBatchNorm like
 * the partials, then finalize and apply as above; on one rank with Y written on the vector
 * path, the finalize runs inside the apply instead (bn_apply_vec<FIN>: one kernel for the
 * BN). kiln_cuda_channel_sums: kernel 1 and a reduction of its partials into f32 sums
 * (kiln.FusedConv's statistics outputs, conv_stats.c). With the mask from X on the vector
 * path, the gradient's statistics kernel computes the mask's coefficients from S itself
 * and leaves them for the apply (bn_mask_coef runs only before the scalar kernels).
 */
#include "bn_affine.cuh"
#include "dtype.cuh"
#include "norm_train.h"

#include <stdio.h>
#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;
constexpr int64_t NCHW_ELEMS = 8192; /* elements of one channel per statistics block */
constexpr int64_t NCHW_MAX_P = 256;
constexpr int TX = 32, TY = 8; /* the rows kernel's block: channels x rows */
/* rows, the vector path: statistics blocks in all (~ one wave of 256-thread blocks on a
 * 132-SM GPU), rows per thread summed in float at most, rows per block at least (bounds the
 * partials' traffic against X's) */
constexpr int64_t VEC_TARGET_BLOCKS = 1024;
constexpr int64_t VEC_MAX_THREAD_ROWS = 512;
constexpr int64_t VEC_MIN_BLOCK_ROWS = 256;
constexpr int64_t MAX_GRID_Y = 65535;
constexpr int UNROLL = 4; /* rows in flight per thread */

struct Geo {
    int64_t N, C, S; /* X (N, C, S) */
    bool rows;       /* walked as (N*S, C): NHWC, or S == 1 */
    int64_t M;       /* elements per channel */
    int64_t P;       /* statistics blocks per channel */
    /* rows: the vector path's block (BX channel groups of V, BY rows) and gx blocks across C */
    int V, BX, BY;
    int64_t gx;
};

int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

Geo geo_of(const kiln_tensor *x) {
    Geo g;
    g.N = x->dims[0];
    g.C = x->dims[1];
    g.S = 1;
    for (int d = 2; d < x->ndim; d++) g.S *= x->dims[d];
    g.rows = (x->ndim == 4 && x->format == KILN_FORMAT_NHWC) || g.S == 1;
    g.M = g.N * g.S;
    const size_t es = kiln_dtype_size(x->dtype);
    g.V = es >= 1 && es <= 16 ? (int)(16 / es) : 1; /* (the supports check refuses other dtypes) */
    const int64_t G = div_up(g.C, g.V);
    g.BX = (int)(G < 32 ? G : 32);
    g.BY = THREADS / g.BX;
    g.gx = div_up(G, g.BX);
    if (g.rows) { /* from the shape and dtype alone (SyncBatchNorm: equal on every rank) */
        int64_t p = div_up(VEC_TARGET_BLOCKS, g.gx);
        const int64_t need = div_up(g.M, g.BY * VEC_MAX_THREAD_ROWS), most = div_up(g.M, VEC_MIN_BLOCK_ROWS);
        if (p < need) p = need;
        if (p > most) p = most;
        g.P = p < 1 ? 1 : p > MAX_GRID_Y ? MAX_GRID_Y : p;
    } else {
        const int64_t p = div_up(g.M, NCHW_ELEMS);
        g.P = p < 1 ? 1 : p > NCHW_MAX_P ? NCHW_MAX_P : p;
    }
    return g;
}

size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }
size_t part_bytes(const Geo &g, int K) { return align256((size_t)(g.P * g.C * K) * sizeof(double)); }
size_t ws_bytes(const Geo &g, int K) { return part_bytes(g, K) + align256((size_t)(4 * g.C) * sizeof(float)); }

/* store a double into element i of a float tensor of any float dtype */
__device__ __forceinline__ void store_any(void *p, int dtype, int64_t i, double v) {
    switch (dtype) {
    case KILN_F32: ((float *)p)[i] = (float)v; break;
    case KILN_F64: ((double *)p)[i] = v; break;
    case KILN_F16: ((__half *)p)[i] = __float2half_rn((float)v); break;
    case KILN_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
    default: break;
    }
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* fwd_coef and bn_affine (bn_affine.cuh): the forward's finalize, its apply, the mask from X's
 * bn_mask_coef and kiln.BnReluMaxPool all call these (the contract above). */

/* The mask from X: the forward's Y > 0, that is T(bn_affine) > 0 (T's rounding, as Y is
 * stored; NaN gives false, as Relu's 0) */
template <typename T> __device__ __forceinline__ bool pos_from_x(float x, float a, float m, float k) {
    return to_f(from_f<T>(bn_affine(x, a, m, k))) > 0.f;
}

struct Params {
    const void *p[4]; /* scale, B, input_mean, input_var */
    int dt[4];
    void *o[4];       /* forward: running_mean, running_var; gradient: dScale, dB, dMean, dVar */
    int odt[4];
    double eps, momentum;
    bool train;       /* the gradient: training mode */
    float *pk;        /* the forward: kiln's output 4, P (2, C) f32: a; k = B - mean * a (the
                       * conv-bn-prologue pass's convolution prologue), or null */
};

// The mask from X: the forward's coefficients (a, m, k) from S (mean; var), (2, C) of any float
// dtype, into mc (3, C), as bn_finalize_fwd computes them (fwd_coef). grid ceil(C / 256).
__global__ void bn_mask_coef(const void *S, int sdt, Params p, float *mc, int64_t C) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float a, m, k;
    fwd_coef(load_any(p.p[0], p.dt[0], c), load_any(p.p[1], p.dt[1], c), load_any(S, sdt, c), load_any(S, sdt, C + c),
             p.eps, a, m, k);
    mc[c] = a;
    mc[C + c] = m;
    mc[2 * C + c] = k;
}

/* The mask from X's coefficients for the statistics kernel's vector path (MX), which computes
 * them from S itself (bn_mask_coef's arithmetic) and leaves them in mc for the apply. */
struct MaskIn {
    const void *S;
    int sdt;
    Params p;
    float *mc; /* (3, C) */
};

/* ------------------------------------------------------------------ statistics */

/* dY masked by the ReLU's output Y (kiln.UnaryGrad op=Relu: Y > 0 ? dY : 0) */
template <bool RELU> __device__ __forceinline__ float masked(float g, float y) {
    if constexpr (RELU) return y > 0.f ? g : 0.f;
    else return g;
}

/* dY + dY2 (input 7) rounded to T once, as Sum writes it */
template <typename T> __device__ __forceinline__ float add_round(float g, T g2) { return to_f(from_f<T>(g + to_f(g2))); }

/* K = 2: sums of x, x^2; K = 4: also dy, dy * x (dy (+ dy2 where given) masked by y > 0
 * under RELU, written to gout where given). */
template <typename T, int K, bool RELU, bool MX = false>
__device__ __forceinline__ void accumulate(double (&acc)[K], const T *x, const T *dy, const T *y, const T *dy2,
                                           T *gout, int64_t i, float ma = 0.f, float mm = 0.f, float mk = 0.f) {
    const float xf = to_f(x[i]);
    const double v = xf;
    acc[0] += v;
    acc[1] += v * v;
    if constexpr (K == 4) {
        float gi = to_f(dy[i]);
        if (dy2) gi = add_round(gi, dy2[i]);
        /* MX (RELU): the mask from X with the channel's forward coefficients (ma, mm, mk) */
        const float gm = MX ? (pos_from_x<T>(xf, ma, mm, mk) ? gi : 0.f) : masked<RELU>(gi, RELU ? to_f(y[i]) : 0.f);
        if (gout) gout[i] = from_f<T>(gm);
        const double g = gm;
        acc[2] += g;
        acc[3] += g * v;
    }
}

// x, dy, y: (N, C, S); part: (P, C, K); mc: the mask from X's coefficients (3, C) under MX.
// grid (C, P); blockDim.x a multiple of 32.
template <typename T, int K, bool RELU, bool MX = false>
__global__ void bn_stats_nchw(const T *x, const T *dy, const T *y, const T *dy2, T *gout, double *part, int64_t N,
                              int64_t C, int64_t S, const float *mc = nullptr) {
    const int64_t c = blockIdx.x, p = blockIdx.y, P = gridDim.y;
    const int64_t cps = (S + blockDim.x - 1) / blockDim.x; /* blocks of positions per image */
    double acc[K];
#pragma unroll
    for (int k = 0; k < K; k++) acc[k] = 0;
    const float ma = MX ? mc[c] : 0.f, mm = MX ? mc[C + c] : 0.f, mk = MX ? mc[2 * C + c] : 0.f;
    for (int64_t q = p; q < N * cps; q += P) {
        const int64_t n = q / cps, s = (q - n * cps) * blockDim.x + threadIdx.x;
        if (s < S) accumulate<T, K, RELU, MX>(acc, x, dy, y, dy2, gout, (n * C + c) * S + s, ma, mm, mk);
    }
    __shared__ double sh[K][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int k = 0; k < K; k++) {
        const double v = warp_sum(acc[k]);
        if (lane == 0) sh[k][warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
#pragma unroll
        for (int k = 0; k < K; k++) {
            const double v = warp_sum(lane < nw ? sh[k][lane] : 0.0);
            if (lane == 0) part[(p * C + c) * K + k] = v;
        }
    }
}

// x, dy, y: (R, C); part: (P, C, K). grid (ceil(C / TX), P), block (TX, TY). Any C, any
// alignment (the vector kernel's fallback).
template <typename T, int K, bool RELU, bool MX = false>
__global__ void bn_stats_rows(const T *x, const T *dy, const T *y, const T *dy2, T *gout, double *part, int64_t R,
                              int64_t C, const float *mc = nullptr) {
    const int64_t c = (int64_t)blockIdx.x * TX + threadIdx.x, p = blockIdx.y, P = gridDim.y;
    double acc[K];
#pragma unroll
    for (int k = 0; k < K; k++) acc[k] = 0;
    if (c < C) {
        const float ma = MX ? mc[c] : 0.f, mm = MX ? mc[C + c] : 0.f, mk = MX ? mc[2 * C + c] : 0.f;
        for (int64_t r = p * TY + threadIdx.y; r < R; r += P * TY)
            accumulate<T, K, RELU, MX>(acc, x, dy, y, dy2, gout, r * C + c, ma, mm, mk);
    }
    __shared__ double sh[K][TY][TX + 1];
#pragma unroll
    for (int k = 0; k < K; k++) sh[k][threadIdx.y][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
#pragma unroll
        for (int k = 0; k < K; k++) {
            double s = 0;
            for (int y = 0; y < TY; y++) s += sh[k][y][threadIdx.x];
            part[(p * C + c) * K + k] = s;
        }
    }
}

// The vector path. x, dy, y: (R, C), C a multiple of V, 16-byte aligned; part: (P, C, K).
// grid (ceil(C / V / BX), P), 1-D blocks of BX * BY threads: thread (tx, ty) owns channel
// group g = blockIdx.x * BX + tx (channels g*V .. g*V+V-1) and rows blockIdx.y * BY + ty +
// j * P * BY, UNROLL of them loaded before any is summed; float sums per thread, the
// block's BY row-sets added in double in shared memory (V <= BY: BX <= 32, BY >= 8).
// ADD: dy2 added to dy; OUT: the gradient summed written to gout (K = 4). MX (K = 4, RELU, not
// ADD): the mask from X, each thread's V channels' coefficients (mc, (3, C)) in registers.
template <typename T, int K, bool RELU, bool ADD, bool OUT, bool MX = false>
__global__ void __launch_bounds__(THREADS) bn_stats_vec(const T *__restrict__ x, const T *__restrict__ dy,
                                                        const T *__restrict__ y, const T *__restrict__ dy2,
                                                        T *__restrict__ gout, double *__restrict__ part, int64_t R,
                                                        int64_t C, int BX, int BY, MaskIn mi = MaskIn{}) {
    using Vec = typename VecOf<T>::type;
    constexpr int V = VecOf<T>::N;
    __shared__ double sh[THREADS * V];
    const int tx = (int)threadIdx.x % BX, ty = (int)threadIdx.x / BX;
    const int64_t G = C / V, grp = (int64_t)blockIdx.x * BX + tx, p = blockIdx.y, step = (int64_t)gridDim.y * BY;
    float acc[K][V];
#pragma unroll
    for (int k = 0; k < K; k++)
#pragma unroll
        for (int j = 0; j < V; j++) acc[k][j] = 0.f;
    constexpr int MV = MX ? V : 1;
    float ma[MV], mm[MV], mk[MV];
    if constexpr (MX) { /* the block's BX * V channels' mask coefficients from S, one thread each */
        __shared__ float smc[3][THREADS];
        const int t = (int)threadIdx.x;
        const int64_t c = (int64_t)blockIdx.x * BX * V + t;
        if (t < BX * V && c < C) {
            float fa, fm, fk;
            fwd_coef(load_any(mi.p.p[0], mi.p.dt[0], c), load_any(mi.p.p[1], mi.p.dt[1], c), load_any(mi.S, mi.sdt, c),
                     load_any(mi.S, mi.sdt, C + c), mi.p.eps, fa, fm, fk);
            smc[0][t] = fa;
            smc[1][t] = fm;
            smc[2][t] = fk;
            if (blockIdx.y == 0) { /* for the apply (one block per channel writes) */
                mi.mc[c] = fa;
                mi.mc[C + c] = fm;
                mi.mc[2 * C + c] = fk;
            }
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < V; j++) {
            ma[j] = smc[0][tx * V + j];
            mm[j] = smc[1][tx * V + j];
            mk[j] = smc[2][tx * V + j];
        }
    }
    if (grp < G) {
        const T *xs = x + grp * V, *ds = K == 4 ? dy + grp * V : nullptr, *ys = RELU && !MX ? y + grp * V : nullptr;
        const T *d2s = ADD ? dy2 + grp * V : nullptr;
        T *gs = OUT ? gout + grp * V : nullptr;
        for (int64_t r0 = p * BY + ty; r0 < R; r0 += UNROLL * step) {
            Vec xv[UNROLL], gv[UNROLL], yv[UNROLL], g2v[UNROLL];
#pragma unroll
            for (int q = 0; q < UNROLL; q++) {
                const int64_t r = r0 + q * step;
                if (r < R) {
                    xv[q] = *(const Vec *)(xs + r * C);
                    if constexpr (K == 4) gv[q] = *(const Vec *)(ds + r * C);
                    if constexpr (K == 4 && RELU && !MX) yv[q] = *(const Vec *)(ys + r * C);
                    if constexpr (K == 4 && ADD) g2v[q] = *(const Vec *)(d2s + r * C);
                }
            }
#pragma unroll
            for (int q = 0; q < UNROLL; q++) {
                if (r0 + q * step < R) {
                    Vec ov;
#pragma unroll
                    for (int j = 0; j < V; j++) {
                        const float v = to_f(xv[q].v[j]);
                        acc[0][j] += v;
                        acc[1][j] = fmaf(v, v, acc[1][j]);
                        if constexpr (K == 4) {
                            float gi = to_f(gv[q].v[j]);
                            if constexpr (ADD) gi = add_round(gi, g2v[q].v[j]);
                            float gj;
                            if constexpr (MX) gj = pos_from_x<T>(v, ma[j], mm[j], mk[j]) ? gi : 0.f;
                            else gj = masked<RELU>(gi, RELU ? to_f(yv[q].v[j]) : 0.f);
                            if constexpr (OUT) ov.v[j] = from_f<T>(gj);
                            acc[2][j] += gj;
                            acc[3][j] = fmaf(gj, v, acc[3][j]);
                        }
                    }
                    if constexpr (OUT) *(Vec *)(gs + (r0 + q * step) * C) = ov;
                }
            }
        }
    }
    const int t = (int)threadIdx.x, gl = t / V, j = t % V; /* the combine: thread t < BX * V sums one channel */
    const int64_t cg = (int64_t)blockIdx.x * BX + gl;
#pragma unroll
    for (int k = 0; k < K; k++) {
#pragma unroll
        for (int jj = 0; jj < V; jj++) sh[t * V + jj] = (double)acc[k][jj];
        __syncthreads();
        if (t < BX * V && cg < G) {
            double s = 0;
            for (int yy = 0; yy < BY; yy++) s += sh[(yy * BX + gl) * V + j];
            part[(p * C + cg * V + j) * K + k] = s;
        }
        __syncthreads();
    }
}

/* The vector path applies: rows layout, C a multiple of V (16 bytes of elements of es
 * bytes), every pointer 16-byte aligned. */
bool vec_ok_es(const Geo &g, size_t es, const void *a, const void *b, const void *c, const void *d = nullptr) {
    return g.rows && es >= 1 && es <= 16 && g.C % (int64_t)(16 / es) == 0 && aligned16(a, b, c) && aligned16(d);
}
template <typename T> bool vec_ok(const Geo &g, const void *a, const void *b, const void *c, const void *d = nullptr) {
    static_assert(VecOf<T>::N * sizeof(T) == 16, "V elements are 16 bytes");
    return vec_ok_es(g, sizeof(T), a, b, c, d);
}

template <typename T, int K, bool RELU, bool ADD, bool OUT, bool MX = false>
void launch_stats_vec(kiln_cuda *cu, const Geo &g, const void *x, const void *dy, const void *y, const void *dy2,
                      void *gout, double *part, const MaskIn &mi = MaskIn{}) {
    const dim3 grid((unsigned)g.gx, (unsigned)g.P);
    bn_stats_vec<T, K, RELU, ADD, OUT, MX><<<grid, g.BX * g.BY, 0, cu->stream>>>(
        (const T *)x, (const T *)dy, (const T *)y, (const T *)dy2, (T *)gout, part, g.M, g.C, g.BX, g.BY, mi);
}

/* dy2 (added to dy) and gout (the gradient written) only with K = 4; gout whenever dy2. MX
 * (K = 4, RELU): the mask from X, no y, dy2 or gout; its coefficients (3, C) into mi.mc,
 * by the vector kernel itself or else by bn_mask_coef first, for this pass and the apply. */
template <typename T, int K, bool RELU, bool MX = false>
kiln_status launch_stats_t(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const void *x, const void *dy, const void *y,
                           const void *dy2, void *gout, double *part, const MaskIn &mi = MaskIn{}) {
    if constexpr (MX) {
        const float *mc = mi.mc;
        if (!vec_ok<T>(g, x, dy, nullptr)) {
            bn_mask_coef<<<(unsigned)div_up(g.C, THREADS), THREADS, 0, cu->stream>>>(mi.S, mi.sdt, mi.p, mi.mc, g.C);
            KILN_CUDA_LAUNCHED(ctx, "bn_mask_coef");
        }
        if (vec_ok<T>(g, x, dy, nullptr))
            launch_stats_vec<T, K, true, false, false, true>(cu, g, x, dy, nullptr, nullptr, nullptr, part, mi);
        else if (g.rows)
            bn_stats_rows<T, K, true, true><<<dim3((unsigned)div_up(g.C, TX), (unsigned)g.P), dim3(TX, TY), 0, cu->stream>>>(
                (const T *)x, (const T *)dy, nullptr, nullptr, nullptr, part, g.M, g.C, mc);
        else {
            int threads = 32;
            while (threads < THREADS && threads < g.S) threads *= 2;
            bn_stats_nchw<T, K, true, true><<<dim3((unsigned)g.C, (unsigned)g.P), threads, 0, cu->stream>>>(
                (const T *)x, (const T *)dy, nullptr, nullptr, nullptr, part, g.N, g.C, g.S, mc);
        }
        KILN_CUDA_LAUNCHED(ctx, "bn_stats (the mask from X)");
        return KILN_OK;
    }
    if (vec_ok<T>(g, x, dy, y) && aligned16(dy2, gout)) {
        if constexpr (K == 4) {
            if (dy2) launch_stats_vec<T, K, RELU, true, true>(cu, g, x, dy, y, dy2, gout, part);
            else if (gout) launch_stats_vec<T, K, RELU, false, true>(cu, g, x, dy, y, dy2, gout, part);
            else launch_stats_vec<T, K, RELU, false, false>(cu, g, x, dy, y, dy2, gout, part);
        } else {
            launch_stats_vec<T, K, RELU, false, false>(cu, g, x, dy, y, nullptr, nullptr, part);
        }
        KILN_CUDA_LAUNCHED(ctx, "bn_stats_vec");
    } else if (g.rows) {
        const dim3 grid((unsigned)div_up(g.C, TX), (unsigned)g.P), block(TX, TY);
        bn_stats_rows<T, K, RELU><<<grid, block, 0, cu->stream>>>((const T *)x, (const T *)dy, (const T *)y,
                                                                  (const T *)dy2, (T *)gout, part, g.M, g.C);
        KILN_CUDA_LAUNCHED(ctx, "bn_stats_rows");
    } else {
        int threads = 32;
        while (threads < THREADS && threads < g.S) threads *= 2;
        const dim3 grid((unsigned)g.C, (unsigned)g.P);
        bn_stats_nchw<T, K, RELU><<<grid, threads, 0, cu->stream>>>((const T *)x, (const T *)dy, (const T *)y,
                                                                    (const T *)dy2, (T *)gout, part, g.N, g.C, g.S);
        KILN_CUDA_LAUNCHED(ctx, "bn_stats_nchw");
    }
    return KILN_OK;
}

template <typename T, int K>
kiln_status launch_stats(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const void *x, const void *dy, const void *y,
                         const void *dy2, void *gout, double *part, const MaskIn &mi = MaskIn{}) {
    if constexpr (K == 4) { /* the forward's statistics never read Y */
        if (mi.mc) return launch_stats_t<T, K, true, true>(cu, ctx, g, x, dy, nullptr, nullptr, nullptr, part, mi);
        if (y) return launch_stats_t<T, K, true>(cu, ctx, g, x, dy, y, dy2, gout, part);
    }
    return launch_stats_t<T, K, false>(cu, ctx, g, x, dy, y, dy2, gout, part);
}

/* -------------------------------------------------------------------- finalize */


/* The finalize block: FIN_C channels x FIN_P partial rows (C / FIN_C blocks). Narrow in
 * channels so that a BN of 64 or 256 channels with ~1,000 partial rows (the statistics
 * kernel's P for large NHWC shapes) still spreads its partials over 8 or 32 SMs: one block
 * of 32 channels read them at ~15 us a BatchNormGrad, longer than the launch. */
constexpr int FIN_C = 8, FIN_P = 128;

/* The K sums of channel c = blockIdx.x * FIN_C + threadIdx.x over its P partials, in the
 * threads of threadIdx.y == 0 (every thread of the block calls; sh: the block's scratch).
 * Threads (x, y) read partial rows y, y + FIN_P, ... (each row's FIN_C channels
 * contiguous), then the FIN_P row sums are added as a tree (a fixed order: deterministic). */
template <int K>
__device__ __forceinline__ void channel_sums(const double *part, int64_t C, int64_t P, double (&s)[K],
                                             double (*sh)[FIN_P][FIN_C]) {
    const int64_t c = (int64_t)blockIdx.x * FIN_C + threadIdx.x;
#pragma unroll
    for (int k = 0; k < K; k++) s[k] = 0;
    if (c < C)
        for (int64_t j = threadIdx.y; j < P; j += FIN_P) {
#pragma unroll
            for (int k = 0; k < K; k++) s[k] += part[(j * C + c) * K + k];
        }
#pragma unroll
    for (int k = 0; k < K; k++) sh[k][threadIdx.y][threadIdx.x] = s[k];
    __syncthreads();
#pragma unroll
    for (int h = FIN_P / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.y < h) {
#pragma unroll
            for (int k = 0; k < K; k++) sh[k][threadIdx.y][threadIdx.x] += sh[k][threadIdx.y + h][threadIdx.x];
        }
        __syncthreads();
    }
#pragma unroll
    for (int k = 0; k < K; k++) s[k] = sh[k][0][threadIdx.x];
    __syncthreads(); /* sh free again for a second call */
}

/* One channel of the forward's finalize from X's sums over M elements (s0 = sum x, s1 =
 * sum x^2): the running statistics, S and P written when `write`, the apply's coefficients
 * (a, m, k) returned. bn_finalize_fwd and the apply with the finalize inside
 * (bn_apply_vec<FIN>) both call this: one arithmetic, the same floats. */
__device__ __forceinline__ void finalize_fwd_channel(double s0, double s1, const Params &p, int64_t c, int64_t C,
                                                     double M, bool write, float &a, float &m, float &k) {
    const double mean = s0 / M;
    double var = s1 / M - mean * mean;
    if (var < 0) var = 0;
    if (write) {
        if (p.o[0]) store_any(p.o[0], p.odt[0], c, load_any(p.p[2], p.dt[2], c) * p.momentum + mean * (1 - p.momentum));
        if (p.o[1]) store_any(p.o[1], p.odt[1], c, load_any(p.p[3], p.dt[3], c) * p.momentum + var * (1 - p.momentum));
        if (p.o[2]) { /* S (kiln's output 3): the statistics the coefficients below come from */
            store_any(p.o[2], p.odt[2], c, mean);
            store_any(p.o[2], p.odt[2], C + c, var);
        }
        if (p.pk) { /* P: as the CPU reference, in double, each rounded to f32 once */
            const double ad = load_any(p.p[0], p.dt[0], c) / sqrt(var + p.eps);
            p.pk[c] = (float)ad;
            p.pk[C + c] = (float)(load_any(p.p[1], p.dt[1], c) - mean * ad);
        }
    }
    fwd_coef(load_any(p.p[0], p.dt[0], c), load_any(p.p[1], p.dt[1], c), mean, var, p.eps, a, m, k);
}

// part: (P, C, 2); coef: (4, C). grid ceil(C / FIN_C), block (FIN_C, FIN_P).
__global__ void __launch_bounds__(FIN_C * FIN_P) bn_finalize_fwd(const double *part, float *coef, Params p, int64_t C,
                                                                 int64_t P, double M) {
    __shared__ double sh[2][FIN_P][FIN_C];
    const int64_t c = (int64_t)blockIdx.x * FIN_C + threadIdx.x;
    double s[2];
    channel_sums<2>(part, C, P, s, sh);
    if (threadIdx.y != 0 || c >= C) return;
    float a, m, k;
    finalize_fwd_channel(s[0], s[1], p, c, C, M, true, a, m, k);
    coef[c] = a;
    coef[C + c] = 0.f;
    coef[2 * C + c] = m;
    coef[3 * C + c] = k;
}


// part: (P, C, 4); coef: (4, C). grid ceil(C / FIN_C), block (FIN_C, FIN_P). SyncBatchNorm:
// part holds the sums over every rank (M elements per channel in all), local this rank's,
// from which dScale and dB are taken (the gradient all-reduce averages them with the other
// parameters'); else local is part.
__global__ void __launch_bounds__(FIN_C * FIN_P) bn_finalize_grad(const double *part, const double *local, float *coef,
                                                                  Params p, int64_t C, int64_t P, double M) {
    __shared__ double sh[4][FIN_P][FIN_C];
    const int64_t c = (int64_t)blockIdx.x * FIN_C + threadIdx.x;
    double s[4], l[4];
    channel_sums<4>(part, C, P, s, sh);
    if (local != part) channel_sums<4>(local, C, P, l, sh);
    if (threadIdx.y != 0 || c >= C) return;
    if (local == part)
        for (int k = 0; k < 4; k++) l[k] = s[k];
    double mean = load_any(p.p[2], p.dt[2], c), var = load_any(p.p[3], p.dt[3], c);
    if (p.train) {
        mean = M > 0 ? s[0] / M : 0;
        var = M > 0 ? s[1] / M - mean * mean : 0;
        if (var < 0) var = 0;
    }
    const double sum_dy = s[2], sum_dy_xc = s[3] - mean * s[2];
    const double istd = 1.0 / sqrt(var + p.eps), a = load_any(p.p[0], p.dt[0], c) * istd;
    const double sum_dy_xhat = sum_dy_xc * istd;
    double b = 0, k = 0;
    if (p.train && M > 0) {
        b = -a * istd * sum_dy_xhat / M;
        k = -a * sum_dy / M;
    }
    coef[c] = (float)a;
    coef[C + c] = (float)b;
    coef[2 * C + c] = (float)mean;
    coef[3 * C + c] = (float)k;
    if (p.o[0]) store_any(p.o[0], p.odt[0], c, (l[3] - mean * l[2]) * istd);
    if (p.o[1]) store_any(p.o[1], p.odt[1], c, l[2]);
    if (p.o[2]) store_any(p.o[2], p.odt[2], c, p.train ? 0.0 : -a * sum_dy);
    if (p.o[3]) store_any(p.o[3], p.odt[3], c, p.train ? 0.0 : -0.5 * a * istd * sum_dy_xhat);
}

kiln_status launch_finalize_fwd(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const double *part, float *coef,
                                const Params &p, double M) {
    bn_finalize_fwd<<<(unsigned)div_up(g.C, FIN_C), dim3(FIN_C, FIN_P), 0, cu->stream>>>(part, coef, p, g.C, g.P, M);
    KILN_CUDA_LAUNCHED(ctx, "bn_finalize_fwd");
    return KILN_OK;
}

kiln_status launch_finalize_grad(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const double *part, const double *local,
                                 float *coef, const Params &p, double M) {
    bn_finalize_grad<<<(unsigned)div_up(g.C, FIN_C), dim3(FIN_C, FIN_P), 0, cu->stream>>>(part, local, coef, p, g.C,
                                                                                         g.P, M);
    KILN_CUDA_LAUNCHED(ctx, "bn_finalize_grad");
    return KILN_OK;
}

/* ------------------------------------------------------------------------ apply */

/* y = a * (x - m) + k (+ e, the residual Z, under E) (ReLU: NaN and negatives to 0);
 * dX = a * dY' + b * (x - m) + k with dY' = dY masked by the ReLU's output e (GRAD: E ==
 * RELU). */
template <bool GRAD, bool RELU, bool E>
__device__ __forceinline__ float bn_out(float u, float xv, float ev, float a, float b, float m, float k) {
    if constexpr (GRAD) {
        const float xc = xv - m;
        return fmaf(a, masked<RELU>(u, ev), fmaf(b, xc, k));
    }
    float v = bn_affine(xv, a, m, k); /* the mask from X's contract: Y's only computation */
    if constexpr (E) v += ev;
    if constexpr (RELU) return v > 0.f ? v : 0.f;
    return v;
}

// u (dY for the gradient, else X), x, e (the gradient: the ReLU's output Y; the forward:
// the residual Z; read under E), out: (N, C, S) or rows (S = 1); coef: (4, C). MX (GRAD,
// RELU, not E): the mask from X with mc (3, C) instead of Y.
template <typename T, bool GRAD, bool RELU, bool E, typename I, bool MX = false>
__global__ void bn_apply_train(const T *u, const T *x, const T *e, T *out, const float *coef, I n, I C, I S,
                               const float *mc = nullptr) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        const I c = (i / S) % C;
        const float ev = MX ? (pos_from_x<T>(to_f(x[i]), mc[c], mc[C + c], mc[2 * C + c]) ? 1.f : 0.f)
                         : E ? to_f(e[i])
                             : 0.f;
        out[i] = from_f<T>(bn_out<GRAD, RELU, E>(GRAD ? to_f(u[i]) : 0.f, to_f(x[i]), ev, coef[c], coef[C + c],
                                                 coef[2 * C + c], coef[3 * C + c]));
    }
}

/* The forward's finalize inside its apply (bn_apply_vec<FIN>): X's sums from the
 * convolution (conv-bn-stats, one partial row, no SyncBatchNorm; f64 in f32 training, f32
 * from cuDNN's GenStats), M elements a channel. */
struct FinIn {
    const void *sum, *sq;
    bool f64;
    Params p;
    double M;
};

__device__ __forceinline__ double sum_at(const void *p, bool f64, int64_t c) {
    return f64 ? ((const double *)p)[c] : (double)((const float *)p)[c];
}

// The vector path of the apply: rows (R, C), C a multiple of V, 16-byte aligned; the
// statistics kernel's thread geometry, grid (ceil(C / V / BX), any), each thread's V
// channels' coefficients in registers. FIN (the forward): no finalize kernel before it;
// each block computes its BX * V channels' coefficients from fin's sums into shared memory
// (finalize_fwd_channel, as bn_finalize_fwd: the same floats), and the blocks of row 0
// (blockIdx.y == 0: one per channel) write the running statistics, S and P. That saves two
// launches a BN (the sums' copy and the finalize: ~9 us with their gaps, x53 in ResNet-50).
template <typename T, bool GRAD, bool RELU, bool E, bool MX = false, bool FIN = false>
__global__ void __launch_bounds__(THREADS) bn_apply_vec(const T *__restrict__ u, const T *__restrict__ x,
                                                        const T *__restrict__ e, T *__restrict__ out,
                                                        const float *__restrict__ coef, int64_t R, int64_t C, int BX,
                                                        int BY, const float *__restrict__ mc = nullptr,
                                                        FinIn fin = FinIn{}) {
    using Vec = typename VecOf<T>::type;
    constexpr int V = VecOf<T>::N;
    const int tx = (int)threadIdx.x % BX, ty = (int)threadIdx.x / BX;
    const int64_t G = C / V, grp = (int64_t)blockIdx.x * BX + tx, step = (int64_t)gridDim.y * BY;
    float a[V], b[V], m[V], k[V];
    if constexpr (FIN) {
        __shared__ float sc[3][THREADS]; /* a, m, k of the block's channels (BX * V <= THREADS) */
        const int t = (int)threadIdx.x;
        const int64_t c = (int64_t)blockIdx.x * BX * V + t;
        if (t < BX * V && c < C) {
            float fa, fm, fk;
            finalize_fwd_channel(sum_at(fin.sum, fin.f64, c), sum_at(fin.sq, fin.f64, c), fin.p, c, C, fin.M,
                                 blockIdx.y == 0, fa, fm, fk);
            sc[0][t] = fa;
            sc[1][t] = fm;
            sc[2][t] = fk;
        }
        __syncthreads();
        if (grp >= G) return;
#pragma unroll
        for (int j = 0; j < V; j++) {
            a[j] = sc[0][tx * V + j];
            b[j] = 0.f;
            m[j] = sc[1][tx * V + j];
            k[j] = sc[2][tx * V + j];
        }
    } else {
        if (grp >= G) return;
#pragma unroll
        for (int j = 0; j < V; j++) {
            const int64_t c = grp * V + j;
            a[j] = coef[c];
            b[j] = coef[C + c];
            m[j] = coef[2 * C + c];
            k[j] = coef[3 * C + c];
        }
    }
    constexpr int MV = MX ? V : 1; /* MX: the mask from X's coefficients */
    float ma[MV], mm[MV], mk[MV];
#pragma unroll
    for (int j = 0; j < MV; j++) {
        ma[j] = MX ? mc[grp * V + j] : 0.f;
        mm[j] = MX ? mc[C + grp * V + j] : 0.f;
        mk[j] = MX ? mc[2 * C + grp * V + j] : 0.f;
    }
    const int64_t off = grp * V;
    for (int64_t r0 = (int64_t)blockIdx.y * BY + ty; r0 < R; r0 += UNROLL * step) {
        Vec xv[UNROLL], uv[UNROLL], ev[UNROLL];
#pragma unroll
        for (int q = 0; q < UNROLL; q++) {
            const int64_t r = r0 + q * step;
            if (r < R) {
                xv[q] = *(const Vec *)(x + r * C + off);
                if constexpr (GRAD) uv[q] = *(const Vec *)(u + r * C + off);
                if constexpr (E) ev[q] = *(const Vec *)(e + r * C + off);
            }
        }
#pragma unroll
        for (int q = 0; q < UNROLL; q++) {
            const int64_t r = r0 + q * step;
            if (r < R) {
                Vec o;
#pragma unroll
                for (int j = 0; j < V; j++) {
                    const float uj = GRAD ? to_f(uv[q].v[j]) : 0.f, xj = to_f(xv[q].v[j]);
                    float ej = E ? to_f(ev[q].v[j]) : 0.f;
                    if constexpr (MX) ej = pos_from_x<T>(xj, ma[j], mm[j], mk[j]) ? 1.f : 0.f;
                    o.v[j] = from_f<T>(bn_out<GRAD, RELU, E>(uj, xj, ej, a[j], b[j], m[j], k[j]));
                }
                *(Vec *)(out + r * C + off) = o;
            }
        }
    }
}

/* The apply's grid on the vector path: about 2048 blocks in all, each thread at least
 * UNROLL rows where there are enough. */
dim3 apply_grid(const Geo &g) {
    int64_t py = div_up(2048, g.gx);
    const int64_t most = div_up(g.M, (int64_t)g.BY * UNROLL);
    if (py > most) py = most;
    if (py < 1) py = 1;
    if (py > MAX_GRID_Y) py = MAX_GRID_Y;
    return dim3((unsigned)g.gx, (unsigned)py);
}

template <typename T, bool GRAD, bool RELU, bool E, bool MX = false>
kiln_status launch_apply_t(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const void *u, const void *x, const void *e,
                           void *out, const float *coef, const float *mc = nullptr) {
    if (vec_ok<T>(g, u, x, e, out)) {
        bn_apply_vec<T, GRAD, RELU, E, MX><<<apply_grid(g), g.BX * g.BY, 0, cu->stream>>>(
            (const T *)u, (const T *)x, (const T *)e, (T *)out, coef, g.M, g.C, g.BX, g.BY, mc);
        KILN_CUDA_LAUNCHED(ctx, "bn_apply_vec");
        return KILN_OK;
    }
    const int64_t n = g.M * g.C, S = g.rows ? 1 : g.S;
    const unsigned blocks = kiln_cuda_blocks(cu, n, THREADS);
    if (n <= INT32_MAX) /* 32-bit index math; i + stride stays below 2^32 */
        bn_apply_train<T, GRAD, RELU, E, uint32_t, MX><<<blocks, THREADS, 0, cu->stream>>>(
            (const T *)u, (const T *)x, (const T *)e, (T *)out, coef, (uint32_t)n, (uint32_t)g.C, (uint32_t)S, mc);
    else
        bn_apply_train<T, GRAD, RELU, E, int64_t, MX><<<blocks, THREADS, 0, cu->stream>>>(
            (const T *)u, (const T *)x, (const T *)e, (T *)out, coef, n, g.C, S, mc);
    KILN_CUDA_LAUNCHED(ctx, "bn_apply_train");
    return KILN_OK;
}

/* The forward's apply with its finalize inside (bn_apply_vec<FIN>), on the vector path only
 * (the caller checked fin_vec_ok). */
template <typename T, bool RELU, bool E>
void launch_apply_fin_t(kiln_cuda *cu, const Geo &g, const void *x, const void *e, void *out, const FinIn &fin) {
    bn_apply_vec<T, false, RELU, E, false, true><<<apply_grid(g), g.BX * g.BY, 0, cu->stream>>>(
        (const T *)x, (const T *)x, (const T *)e, (T *)out, nullptr, g.M, g.C, g.BX, g.BY, nullptr, fin);
}

/* KILN_CU_FLOAT_DISPATCH takes templates of the element type alone */
template <typename T>
kiln_status stats_fwd(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const void *x, double *part) {
    return launch_stats<T, 2>(cu, ctx, g, x, nullptr, nullptr, nullptr, nullptr, part);
}
template <typename T>
kiln_status stats_grad(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const void *x, const void *dy, const void *y,
                       const void *dy2, void *gout, double *part, const MaskIn &mi) {
    return launch_stats<T, 4>(cu, ctx, g, x, dy, y, dy2, gout, part, mi);
}
template <typename T>
kiln_status apply_fwd(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const void *x, const void *z, void *y,
                      const float *coef, bool relu) {
    if (z) return launch_apply_t<T, false, true, true>(cu, ctx, g, x, x, z, y, coef); /* Z only with relu = 1 */
    return relu ? launch_apply_t<T, false, true, false>(cu, ctx, g, x, x, nullptr, y, coef)
                : launch_apply_t<T, false, false, false>(cu, ctx, g, x, x, nullptr, y, coef);
}
template <typename T>
kiln_status apply_fwd_fin(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const void *x, const void *z, void *y,
                          const FinIn &fin, bool relu) {
    if (z) launch_apply_fin_t<T, true, true>(cu, g, x, z, y, fin); /* Z only with relu = 1 */
    else if (relu) launch_apply_fin_t<T, true, false>(cu, g, x, nullptr, y, fin);
    else launch_apply_fin_t<T, false, false>(cu, g, x, nullptr, y, fin);
    KILN_CUDA_LAUNCHED(ctx, "bn_apply_vec (with its finalize)");
    return KILN_OK;
}
template <typename T>
kiln_status apply_grad(kiln_cuda *cu, kiln_context *ctx, const Geo &g, const void *dy, const void *x, const void *y,
                       void *dx, const float *coef, const float *mc) {
    if (mc) return launch_apply_t<T, true, true, false, true>(cu, ctx, g, dy, x, nullptr, dx, coef, mc);
    return y ? launch_apply_t<T, true, true, true>(cu, ctx, g, dy, x, y, dx, coef)
             : launch_apply_t<T, true, false, false>(cu, ctx, g, dy, x, y, dx, coef);
}

/* ------------------------------------------------- sums in and out (conv-bn-stats) */

/* part (1, C, 2) from X's sums (a training BN's inputs 6, 7; f32 or f64): the forward's
 * finalize and SyncBatchNorm's all-reduce then take them as one partial row. */
__global__ void bn_sums_in(const void *sum, const void *sq, bool f64, double *part, int64_t C) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    part[2 * c] = sum_at(sum, f64, c);
    part[2 * c + 1] = sum_at(sq, f64, c);
}

kiln_status launch_sums_in(kiln_cuda *cu, kiln_context *ctx, int64_t C, const void *sum, const void *sq, bool f64,
                           double *part) {
    bn_sums_in<<<(unsigned)div_up(C, THREADS), THREADS, 0, cu->stream>>>(sum, sq, f64, part, C);
    KILN_CUDA_LAUNCHED(ctx, "bn_sums_in");
    return KILN_OK;
}

// part: (P, C, 2) -> sum, sq (C) in S (f64, or f32 rounded once; the partials added in
// double, as the finalize does). grid ceil(C / FIN_C), block (FIN_C, FIN_P).
template <typename S>
__global__ void __launch_bounds__(FIN_C * FIN_P) bn_sums_out(const double *part, S *sum, S *sq, int64_t C, int64_t P) {
    __shared__ double sh[2][FIN_P][FIN_C];
    const int64_t c = (int64_t)blockIdx.x * FIN_C + threadIdx.x;
    double s[2];
    channel_sums<2>(part, C, P, s, sh);
    if (threadIdx.y != 0 || c >= C) return;
    sum[c] = (S)s[0];
    sq[c] = (S)s[1];
}

/* ------------------------------------------------------------------ host side */

bool present(const kiln_op_ctx *c, int i) { return i < c->n_in && c->in[i] != NULL; }
bool has_out(const kiln_op_ctx *c, int i) { return i < c->n_out && c->out[i] != NULL; }
bool is_nhwc(const kiln_tensor *t) { return t && t->ndim == 4 && t->format == KILN_FORMAT_NHWC; }
bool param_dtype(kiln_dtype t) { return kiln_cuda_float_dtype(t) || t == KILN_F64; }

/* X of a float kernel dtype, rank >= 2, not empty, the parameters (inputs first..first+3)
 * float vectors of C values; the per-channel element count within the kernels' ranges. */
bool check_x_params(const kiln_op_ctx *c, const kiln_tensor *x, int first, char *why, size_t n) {
    if (!kiln_cuda_float_dtype(x->dtype)) {
        snprintf(why, n, "X has dtype %s (f32, f16 and bf16 are supported)", kiln_dtype_name(x->dtype));
        return false;
    }
    if (x->ndim < 2 || kiln_tensor_numel(x) == 0) {
        snprintf(why, n, "X of rank %d with %lld elements (rank >= 2, not empty)", x->ndim,
                 (long long)kiln_tensor_numel(x));
        return false;
    }
    if (x->dims[1] > INT32_MAX / 64) {
        snprintf(why, n, "%lld channels", (long long)x->dims[1]);
        return false;
    }
    for (int i = first; i < first + 4; i++)
        if (!present(c, i) || !param_dtype(c->in[i]->dtype) || kiln_tensor_numel(c->in[i]) != x->dims[1]) {
            snprintf(why, n, "input %d must be a float vector of %lld values", i, (long long)x->dims[1]);
            return false;
        }
    return true;
}

kiln_status need_ws(kiln_op_ctx *c, size_t bytes) {
    if (c->workspace && c->workspace_size >= bytes) return KILN_OK;
    return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "%s needs %zu bytes of workspace, got %zu", c->node->op_type, bytes,
                     c->workspace_size);
}

Params params_of(const kiln_op_ctx *c, int first) {
    Params p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < 4; i++) {
        p.p[i] = c->in[first + i]->data;
        p.dt[i] = c->in[first + i]->dtype;
    }
    p.eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
    p.momentum = kiln_attr_float(c->node, "momentum", 0.9f);
    p.train = kiln_cuda_bn_training(c);
    return p;
}

/* SyncBatchNorm: the sums all-reduced over the ranks (the gradient also keeps this rank's) */
bool synced(const kiln_op_ctx *c) { return kiln_attr_int(c->node, "sync_comm", 0) != 0; }

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" bool kiln_cuda_bn_training(const kiln_op_ctx *c) {
    return c->node->opset >= 14 && kiln_attr_int(c->node, "training_mode", 0) != 0;
}

extern "C" bool kiln_cuda_sup_bn_train(const kiln_op_ctx *c, char *why, size_t n) {
    const kiln_tensor *x = c->in[0];
    if (!check_x_params(c, x, 1, why, n)) return false;
    const bool write_y = kiln_attr_int(c->node, "write_y", 1) != 0; /* 0: Y empty, P or S instead */
    if (write_y && is_nhwc(x) != is_nhwc(c->out[0])) {
        snprintf(why, n, "X is %s and Y %s", is_nhwc(x) ? "NHWC" : "NCHW", is_nhwc(c->out[0]) ? "NHWC" : "NCHW");
        return false;
    }
    if (has_out(c, 4) && (c->out[4]->dtype != KILN_F32 || kiln_tensor_numel(c->out[4]) != 2 * x->dims[1] ||
                          !kiln_cuda_bn_training(c) || present(c, 5))) {
        snprintf(why, n, "output 4 (P, the apply's a; k) must be f32 (2, %lld), in training mode, without Z",
                 (long long)x->dims[1]);
        return false;
    }
    if (!write_y && !has_out(c, 4) && !has_out(c, 3)) {
        snprintf(why, n, "write_y = 0 needs output 4 (P) or 3 (S)");
        return false;
    }
    if (c->out[0]->dtype != x->dtype) {
        snprintf(why, n, "Y must have X's dtype");
        return false;
    }
    for (int k = 1; k < 3; k++)
        if (has_out(c, k) && (!param_dtype(c->out[k]->dtype) || kiln_tensor_numel(c->out[k]) != x->dims[1])) {
            snprintf(why, n, "output %d must be a float vector of %lld values", k, (long long)x->dims[1]);
            return false;
        }
    if (has_out(c, 3) && !kiln_cuda_bn_training(c)) {
        snprintf(why, n, "output 3 outside training mode (saved statistics of opsets < 14)");
        return false;
    }
    if (has_out(c, 3) && (!param_dtype(c->out[3]->dtype) || kiln_tensor_numel(c->out[3]) != 2 * x->dims[1])) {
        snprintf(why, n, "output 3 (S, the saved statistics) must be a float tensor of 2 x %lld values", (long long)x->dims[1]);
        return false;
    }
    for (int k = 6; k <= 7; k++) /* X's sums from the convolution (conv-bn-stats): f32 or f64 (C), one dtype */
        if (present(c, k) && ((c->in[k]->dtype != KILN_F32 && c->in[k]->dtype != KILN_F64) ||
                              kiln_tensor_numel(c->in[k]) != x->dims[1] || !present(c, 13 - k) ||
                              c->in[13 - k]->dtype != c->in[k]->dtype)) {
            snprintf(why, n, "inputs 6 and 7 (X's sums) must both be f32 or both f64 vectors of %lld values",
                     (long long)x->dims[1]);
            return false;
        }
    if (present(c, 5)) { /* Z, the fused residual: X's dtype, shape and layout, with relu = 1 */
        const kiln_tensor *z = c->in[5];
        if (kiln_attr_int(c->node, "relu", 0) == 0 || z->dtype != x->dtype || is_nhwc(z) != is_nhwc(x) ||
            z->ndim != x->ndim || kiln_tensor_numel(z) != kiln_tensor_numel(x)) {
            snprintf(why, n, "input 5 (Z) needs relu = 1 and X's dtype, shape and layout");
            return false;
        }
    }
    return true;
}

extern "C" kiln_status kiln_cuda_ws_bn_train(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    (void)cu;
    *bytes = ws_bytes(geo_of(c->in[0]), 2);
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_bn_train(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0]; // (N, C, D1..Dn) or NHWC
    const Geo g = geo_of(x);
    if (g.M * g.C == 0) return KILN_OK;
    kiln_status st = need_ws(c, ws_bytes(g, 2));
    if (st) return st;
    double *part = (double *)c->workspace;                          // (P, C, 2)
    float *coef = (float *)((char *)c->workspace + part_bytes(g, 2)); // (4, C)
    Params p = params_of(c, 1);
    for (int k = 0; k < 3; k++) /* running_mean, running_var, S (kiln's output 3: mean; var) */
        if (has_out(c, 1 + k)) {
            p.o[k] = c->out[1 + k]->data;
            p.odt[k] = c->out[1 + k]->dtype;
        }
    const bool write_y = kiln_attr_int(c->node, "write_y", 1) != 0, relu = kiln_attr_int(c->node, "relu", 0) != 0;
    const void *z = present(c, 5) ? c->in[5]->data : nullptr; /* the fused residual (relu = 1) */
    /* inputs 6, 7 (conv-bn-stats) on one rank, Y written on the vector path: the finalize
     * runs inside the apply (bn_apply_vec<FIN>), one kernel for the whole BN */
    if (present(c, 6) && present(c, 7) && !synced(c) && write_y &&
        vec_ok_es(g, kiln_dtype_size(x->dtype), x->data, z, c->out[0]->data)) {
        if (has_out(c, 4)) p.pk = (float *)c->out[4]->data;
        const FinIn fin = {c->in[6]->data, c->in[7]->data, c->in[6]->dtype == KILN_F64, p, (double)g.M};
        KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, apply_fwd_fin, cu, c->kctx, g, x->data, z, c->out[0]->data, fin,
                               relu);
        return st;
    }
    /* inputs 6, 7 (conv-bn-stats): X's sums from the convolution as one partial row, no pass over X */
    Geo gs = g;
    if (present(c, 6) && present(c, 7)) {
        gs.P = 1;
        st = launch_sums_in(cu, c->kctx, g.C, c->in[6]->data, c->in[7]->data, c->in[6]->dtype == KILN_F64, part);
    } else {
        KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, stats_fwd, cu, c->kctx, g, x->data, part);
    }
    if (st) return st;
    int world = 1; /* SyncBatchNorm: the partial sums over every rank (equal shapes: equal P) */
    if ((st = kiln_cuda_sync_sums(cu, c, part, part, gs.P * gs.C * 2, &world))) return st;
    if (has_out(c, 4)) p.pk = (float *)c->out[4]->data; /* P for the convolutions' prologue */
    if ((st = launch_finalize_fwd(cu, c->kctx, gs, part, coef, p, (double)g.M * world))) return st;
    if (!write_y) return KILN_OK; /* Y unwritten: its readers read X through P (or S) */
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, apply_fwd, cu, c->kctx, g, x->data, z, c->out[0]->data, coef, relu);
    return st;
}

extern "C" kiln_status kiln_cuda_bn_fwd_coef(kiln_cuda *cu, kiln_context *ctx, const void *scale, int sdt,
                                             const void *bias, int bdt, const void *S, int Sdt, double eps, float *mc,
                                             int64_t C) {
    if (C <= 0) return KILN_OK;
    Params p;
    memset(&p, 0, sizeof p);
    p.p[0] = scale;
    p.dt[0] = sdt;
    p.p[1] = bias;
    p.dt[1] = bdt;
    p.eps = eps;
    bn_mask_coef<<<(unsigned)div_up(C, THREADS), THREADS, 0, cu->stream>>>(S, Sdt, p, mc, C);
    KILN_CUDA_LAUNCHED(ctx, "bn_mask_coef");
    return KILN_OK;
}

/* The mask from X (relu = 1, relu_mask_from_x = 1): input 6 is S, not Y */
static bool mask_from_x(const kiln_op_ctx *c) {
    return kiln_attr_int(c->node, "relu", 0) != 0 && kiln_attr_int(c->node, "relu_mask_from_x", 0) != 0;
}

/* kiln.BatchNormGrad(dY, X, scale, B, input_mean, input_var[, Y[, dY2]]) -> dX, dScale, dB[, dMean, dVar[, G]];
 * with the mask from X, (dY, X, scale, B, input_mean, input_var, S) -> dX, dScale, dB[, dMean, dVar] */
extern "C" bool kiln_cuda_sup_bn_grad(const kiln_op_ctx *c, char *why, size_t n) {
    if (c->n_in < 6) {
        snprintf(why, n, "inputs dY, X, scale, B, input_mean and input_var are required");
        return false;
    }
    if (mask_from_x(c)) { /* S: 2 x C float values; training mode; no dY2, no output 5 */
        const kiln_tensor *s = present(c, 6) ? c->in[6] : NULL;
        if (!s || !param_dtype(s->dtype) || !present(c, 1) || c->in[1]->ndim < 2 ||
            kiln_tensor_numel(s) != 2 * c->in[1]->dims[1]) {
            snprintf(why, n, "relu_mask_from_x = 1 needs input 6 (S, the saved statistics) of 2 x C float values");
            return false;
        }
        if (!kiln_cuda_bn_training(c) || present(c, 7) || has_out(c, 5)) {
            snprintf(why, n, "relu_mask_from_x = 1 needs training mode, no input 7 and no output 5");
            return false;
        }
    } else if (kiln_attr_int(c->node, "relu", 0) != 0) { /* Y: dY's dtype, shape and layout */
        const kiln_tensor *y = present(c, 6) ? c->in[6] : NULL, *d = c->in[0];
        if (!y || y->dtype != d->dtype || is_nhwc(y) != is_nhwc(d) || y->ndim != d->ndim ||
            kiln_tensor_numel(y) != kiln_tensor_numel(d)) {
            snprintf(why, n, "relu = 1 needs input 6 (the ReLU's output Y) of dY's dtype, shape and layout");
            return false;
        }
    }
    const kiln_tensor *dy = c->in[0], *x = c->in[1];
    if (!present(c, 1) || !check_x_params(c, x, 2, why, n)) return false;
    if (dy->dtype != x->dtype || c->out[0]->dtype != x->dtype) {
        snprintf(why, n, "dY, X and dX must have one dtype");
        return false;
    }
    if (is_nhwc(dy) != is_nhwc(x) || is_nhwc(c->out[0]) != is_nhwc(x)) {
        snprintf(why, n, "dY, X and dX in one layout (dY %s, X %s, dX %s)", is_nhwc(dy) ? "NHWC" : "NCHW",
                 is_nhwc(x) ? "NHWC" : "NCHW", is_nhwc(c->out[0]) ? "NHWC" : "NCHW");
        return false;
    }
    for (int k = 1; k < c->n_out && k < 5; k++)
        if (has_out(c, k) && (!param_dtype(c->out[k]->dtype) || kiln_tensor_numel(c->out[k]) != x->dims[1])) {
            snprintf(why, n, "output %d must be a float vector of %lld values", k, (long long)x->dims[1]);
            return false;
        }
    /* input 7 (a second gradient term) and output 5 (the gradient read): dY's dtype, shape, layout */
    const kiln_tensor *like[2] = {present(c, 7) ? c->in[7] : NULL, has_out(c, 5) ? c->out[5] : NULL};
    for (int k = 0; k < 2; k++)
        if (like[k] && (like[k]->dtype != dy->dtype || is_nhwc(like[k]) != is_nhwc(dy) || like[k]->ndim != dy->ndim ||
                        kiln_tensor_numel(like[k]) != kiln_tensor_numel(dy))) {
            snprintf(why, n, "%s must have dY's dtype, shape and layout", k ? "output 5" : "input 7 (dY2)");
            return false;
        }
    return true;
}

/* The fused ReLU's output Y (input 6) of a kiln.BatchNormGrad with relu = 1 (not S) */
static bool relu_y(const kiln_op_ctx *c) {
    return kiln_attr_int(c->node, "relu", 0) != 0 && present(c, 6) && !mask_from_x(c);
}

/* ... then the mask from X's coefficients (3, C) */
static size_t grad_ws_base(const kiln_op_ctx *c, const Geo &g) { return ws_bytes(g, 4) + (synced(c) ? part_bytes(g, 4) : 0); }
static size_t grad_ws_bytes(const kiln_op_ctx *c, const Geo &g) {
    return grad_ws_base(c, g) + (mask_from_x(c) ? align256((size_t)(3 * g.C) * sizeof(float)) : 0);
}

extern "C" kiln_status kiln_cuda_ws_bn_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    (void)cu;
    *bytes = grad_ws_bytes(c, geo_of(c->in[1]));
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_bn_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *x = c->in[1]; // (N, C, D1..Dn) or NHWC, both
    const Geo g = geo_of(x);
    if (g.M * g.C == 0) return KILN_OK;
    kiln_status st = need_ws(c, grad_ws_bytes(c, g));
    if (st) return st;
    double *part = (double *)c->workspace;                          // (P, C, 4)
    float *coef = (float *)((char *)c->workspace + part_bytes(g, 4)); // (4, C)
    double *local = synced(c) ? (double *)((char *)c->workspace + ws_bytes(g, 4)) : part; // (P, C, 4)
    Params p = params_of(c, 2);
    for (int k = 0; k < 4; k++)
        if (has_out(c, 1 + k)) {
            p.o[k] = c->out[1 + k]->data;
            p.odt[k] = c->out[1 + k]->dtype;
        }
    const void *y = relu_y(c) ? c->in[6]->data : nullptr; /* the fused ReLU's output: dY masked by Y > 0 */
    /* the mask from X: the forward's
     * coefficients from S into mc, read by both passes instead of Y */
    float *mc = mask_from_x(c) ? (float *)((char *)c->workspace + grad_ws_base(c, g)) : nullptr; // (3, C)
    MaskIn mi = MaskIn{}; /* written by the statistics pass (its kernel, or bn_mask_coef before it) */
    if (mc) mi = MaskIn{c->in[6]->data, (int)c->in[6]->dtype, p, mc};
    /* input 7 added to dY; the gradient read written by the statistics pass into output 5
     * (else into dX, which the apply pass then overwrites element by element) and read by
     * the apply pass instead of dY, dY2 and Y */
    const void *dy2 = present(c, 7) ? c->in[7]->data : nullptr;
    void *gout = has_out(c, 5) ? c->out[5]->data : dy2 ? c->out[0]->data : nullptr;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, stats_grad, cu, c->kctx, g, x->data, dy->data, y, dy2, gout, local, mi);
    if (st) return st;
    int world = 1; /* SyncBatchNorm: this rank's sums kept in local, every rank's into part */
    if ((st = kiln_cuda_sync_sums(cu, c, local, part, g.P * g.C * 4, &world))) return st;
    if (world == 1) local = part;
    if ((st = launch_finalize_grad(cu, c->kctx, g, part, local, coef, p, (double)g.M * world))) return st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, apply_grad, cu, c->kctx, g, gout ? gout : dy->data, x->data,
                           gout ? nullptr : y, c->out[0]->data, coef, mc);
    return st;
}

/* ------------------------------------------ two sums zeroed by one kernel (conv statistics) */

namespace {
__global__ void zero_pair(float *a, float *b, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < 2 * n; i += (int64_t)gridDim.x * blockDim.x)
        (i < n ? a : b)[i < n ? i : i - n] = 0.0f;
}
} // namespace

extern "C" kiln_status kiln_cuda_zero_pair(kiln_cuda *cu, kiln_context *ctx, float *a, float *b, int64_t n) {
    if (n <= 0) return KILN_OK;
    const char *e = getenv("KILN_CUDA_ZERO_PAIR"); /* "0": two memsets, as before */
    if (e && !strcmp(e, "0")) {
        KILN_CUDA_CHECK(ctx, cudaMemsetAsync(a, 0, (size_t)n * sizeof(float), cu->stream));
        KILN_CUDA_CHECK(ctx, cudaMemsetAsync(b, 0, (size_t)n * sizeof(float), cu->stream));
        return KILN_OK;
    }
    const int64_t blocks = (2 * n + 255) / 256;
    zero_pair<<<(unsigned)(blocks < 1024 ? blocks : 1024), 256, 0, cu->stream>>>(a, b, n);
    KILN_CUDA_LAUNCHED(ctx, "zero_pair");
    return KILN_OK;
}

/* ------------------------------------------ many small copies in one launch (running statistics) */

namespace {
constexpr int COPY_MAX = 64;
struct CopyBatch {
    void *dst[COPY_MAX];
    const void *src[COPY_MAX];
    uint64_t bytes[COPY_MAX];
};
/* block (i, j): item i, the j-th of gridDim.y slices of it; 4-byte words where the item
 * allows (running statistics are f32), bytes otherwise */
__global__ void copy_batch(const CopyBatch b) {
    const int i = blockIdx.x;
    const uint64_t n = b.bytes[i];
    const uintptr_t d = (uintptr_t)b.dst[i], s = (uintptr_t)b.src[i];
    const uint64_t start = (uint64_t)blockIdx.y * blockDim.x + threadIdx.x, step = (uint64_t)gridDim.y * blockDim.x;
    if (((d | s | n) & 3) == 0) {
        uint32_t *o = (uint32_t *)d;
        const uint32_t *x = (const uint32_t *)s;
        for (uint64_t k = start; k < n / 4; k += step) o[k] = x[k];
    } else {
        unsigned char *o = (unsigned char *)d;
        const unsigned char *x = (const unsigned char *)s;
        for (uint64_t k = start; k < n; k += step) o[k] = x[k];
    }
}
} // namespace

extern "C" kiln_status kiln_cuda_copy_batch(kiln_cuda *cu, kiln_context *ctx, const kiln_cuda_copy_item *items, int n) {
    const char *e = getenv("KILN_CUDA_COPY_BATCH"); /* "0": one cudaMemcpyAsync a tensor, as before */
    if (e && !strcmp(e, "0")) {
        for (int i = 0; i < n; i++)
            if (items[i].bytes)
                KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(items[i].dst, items[i].src, items[i].bytes,
                                                     cudaMemcpyDeviceToDevice, cu->stream));
        return KILN_OK;
    }
    for (int at = 0; at < n; at += COPY_MAX) {
        CopyBatch b;
        memset(&b, 0, sizeof b);
        int m = 0;
        uint64_t most = 0;
        for (int i = at; i < n && i < at + COPY_MAX; i++) {
            b.dst[m] = items[i].dst;
            b.src[m] = items[i].src;
            b.bytes[m] = items[i].bytes;
            if (items[i].bytes > most) most = items[i].bytes;
            m++;
        }
        if (most == 0) continue;
        uint64_t slices = (most / 4 + 2047) / 2048; /* ~8 words a thread */
        if (slices > 256) slices = 256;
        copy_batch<<<dim3((unsigned)m, (unsigned)(slices ? slices : 1)), 256, 0, cu->stream>>>(b);
        KILN_CUDA_LAUNCHED(ctx, "copy_batch");
    }
    return KILN_OK;
}

/* ------------------------------------------ per-channel sums of a tensor (conv-bn-stats) */

extern "C" size_t kiln_cuda_channel_sums_ws(const kiln_tensor *y) {
    return kiln_cuda_float_dtype(y->dtype) && y->ndim >= 2 ? part_bytes(geo_of(y), 2) : 0;
}

extern "C" kiln_status kiln_cuda_channel_sums(kiln_cuda *cu, kiln_context *ctx, const kiln_tensor *y, void *sum,
                                              void *sq, bool f64, void *ws, size_t ws_size) {
    const Geo g = geo_of(y);
    if (g.C == 0) return KILN_OK;
    if (!ws || ws_size < part_bytes(g, 2))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "channel sums need %zu bytes of workspace, got %zu", part_bytes(g, 2),
                         ws_size);
    double *part = (double *)ws; // (P, C, 2)
    kiln_status st = KILN_OK;
    if (g.M == 0) { /* no elements: sums of zero */
        const size_t b = (size_t)g.C * (f64 ? sizeof(double) : sizeof(float));
        KILN_CUDA_CHECK(ctx, cudaMemsetAsync(sum, 0, b, cu->stream));
        KILN_CUDA_CHECK(ctx, cudaMemsetAsync(sq, 0, b, cu->stream));
        return KILN_OK;
    }
    KILN_CU_FLOAT_DISPATCH(st, ctx, y->dtype, stats_fwd, cu, ctx, g, y->data, part);
    if (st) return st;
    if (f64)
        bn_sums_out<<<(unsigned)div_up(g.C, FIN_C), dim3(FIN_C, FIN_P), 0, cu->stream>>>(part, (double *)sum,
                                                                                        (double *)sq, g.C, g.P);
    else
        bn_sums_out<<<(unsigned)div_up(g.C, FIN_C), dim3(FIN_C, FIN_P), 0, cu->stream>>>(part, (float *)sum,
                                                                                        (float *)sq, g.C, g.P);
    KILN_CUDA_LAUNCHED(ctx, "bn_sums_out");
    return KILN_OK;
}
