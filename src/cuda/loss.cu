/*
 * loss.cu — NegativeLogLikelihoodLoss (opsets 12/13) and its gradient
 * kiln.NegativeLogLikelihoodLossGrad, f32 / f16 / bf16 inputs, int32 or int64 targets,
 * an optional weight of any float dtype. Semantics as the CPU reference
 * (src/ops/loss_common.h):
 *
 *   X (N, C, D...) log-probabilities, target (N, D...), weight (C):
 *   loss[n,d] = -weight[t] * X[n,t,d], t = target[n,d]; 0 with weight 0 where t equals
 *   ignore_index (when given). reduction none: loss shaped like target; sum; mean (the
 *   default): the sum over the sum of the weights not ignored (0/0 gives NaN).
 *   Gradient w.r.t. X: dX[n,k,d] = -coef[n,d] at k = t, 0 elsewhere, with coef =
 *   weight[t] * dLoss[n,d] (none), weight[t] * dLoss (sum), weight[t] * dLoss / sum of
 *   weights (mean). X's values are not read.
 *
 *   Values are computed in double and rounded to float, then to the dtype, as the
 *   reference does; sums are one block's tree sum in double. dLoss is read on the device
 *   (a captured graph may be replayed with a new one, e.g. a loss scale).
 *   A target outside [0, C) that is not ignored counts as ignored and raises the device
 *   error flag, which the next kiln_cuda_sync reports (the reference fails).
 *
 *   The reductions use one block (the batch of a loss is small); the gradient of a mean
 *   is one kernel when dX is small (the block finds the weight sum, then writes dX), or
 *   a one-block kernel for the scale (8 bytes of workspace) and an elementwise kernel.
 *
 * kiln.LogSoftmaxNLL(X, target, weight?) -> loss, log_prob? and its gradient
 * kiln.LogSoftmaxNLLGrad(X, target, weight?, dLoss?, dLogProb?) -> dX, dX_f32?, loss?
 * (src/ops/log_softmax_nll.c; made by the fuse-loss pass): X (N, C) in f32, f16 or bf16,
 * read as it is; loss, log_prob, dLoss and dLogProb f32; dX in X's dtype (and, when asked
 * for, the same values in f32 as a second output, rounded once each). One warp per
 * row: the row's max and sum of exponentials in f32 (warp shuffles), log_prob = (x - max)
 * - log(sum), p = exp(x - max) / sum; per-row losses and the weights summed in double as
 * above. dX = coef * (p - [k = t]) + dLogProb - p * sum(dLogProb), coef as for the NLL
 * gradient. The forward is one block (warps stride over the rows); the gradient is one
 * block when dX is small or the reduction is a sum (no weight sum to find first: rows
 * spread over a grid), else the one-block scale kernel above then a grid over the rows.
 * The gradient's loss output (where fuse-loss merged the forward into it, so the step has
 * one dependent kernel fewer) is the forward's bit for bit: the one-block gradient runs
 * with the forward's thread count, and its warps add the same rows' shares (loss_row) in
 * the same order and sum them as the forward does (loss_store); the grid path, and an
 * empty X, launch lsn_forward itself first.
 * A NaN in a row gives that row's max NaN, so its loss and gradient are NaN, as in the
 * reference.
 */
#include "dtype.cuh"

#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;
constexpr int RED_THREADS = 1024;
constexpr int64_t FUSED_MAX = 16384; /* dX elements one block writes itself */

enum { RED_NONE, RED_SUM, RED_MEAN };

struct NllArgs {
    const void *target;
    bool t64;
    const void *weight; /* or NULL */
    int wdt;
    bool has_ii;
    int64_t ii;
    int red;
    int64_t N, C, D;
};

__device__ __forceinline__ int64_t target_at(const NllArgs &a, int64_t i) {
    return a.t64 ? ((const int64_t *)a.target)[i] : (int64_t)((const int32_t *)a.target)[i];
}

/* The weight of element i (n*D + d) and its class, 0 and -1 when ignored or out of range
 * (flagged). */
__device__ __forceinline__ double weight_of(const NllArgs &a, int64_t i, int64_t *cls, kiln_cuda_flag *flag) {
    const int64_t t = target_at(a, i);
    *cls = -1;
    if (a.has_ii && t == a.ii) return 0;
    if (t < 0 || t >= a.C) {
        if (atomicCAS(&flag->code, 0, KILN_CUDA_FLAG_TARGET_RANGE) == 0) flag->value = t;
        return 0;
    }
    *cls = t;
    return a.weight ? load_any(a.weight, a.wdt, t) : 1.0;
}

__device__ double block_sum_d(double v, double *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double w = lane < nwarps ? scratch[lane] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) w += __shfl_xor_sync(0xffffffffu, w, o);
        if (lane == 0) scratch[0] = w;
    }
    __syncthreads();
    const double r = scratch[0];
    __syncthreads();
    return r;
}

template <typename T> __device__ __forceinline__ T from_d(double v) { return from_f<T>((float)v); }

// x: (N, C, D); y: (N, D) for none
template <typename T>
__global__ void nll_none(const T *x, T *y, NllArgs a, kiln_cuda_flag *flag) {
    for (int64_t i = thread_index(); i < a.N * a.D; i += grid_stride()) {
        int64_t t;
        const double w = weight_of(a, i, &t, flag);
        const int64_t n = i / a.D, d = i % a.D;
        y[i] = from_d<T>(t < 0 ? 0.0 : -w * (double)to_f(x[(n * a.C + t) * a.D + d]));
    }
}

// x: (N, C, D); y: scalar. One block.
template <typename T>
__global__ void nll_reduce(const T *x, T *y, NllArgs a, kiln_cuda_flag *flag) {
    __shared__ double scratch[32];
    double ls = 0, ws = 0;
    for (int64_t i = threadIdx.x; i < a.N * a.D; i += blockDim.x) {
        int64_t t;
        const double w = weight_of(a, i, &t, flag);
        if (t < 0) continue;
        const int64_t n = i / a.D, d = i % a.D;
        ls += -w * (double)to_f(x[(n * a.C + t) * a.D + d]);
        ws += w;
    }
    ls = block_sum_d(ls, scratch);
    ws = block_sum_d(ws, scratch);
    if (threadIdx.x == 0) *y = from_d<T>(a.red == RED_SUM ? ls : ls / ws);
}

/* The dLoss factor shared by every element (sum, mean); none: 0 (per element). */
__device__ __forceinline__ double shared_factor(const NllArgs &a, double dl0, double wsum) {
    return a.red == RED_MEAN ? dl0 / wsum : dl0;
}

// dX (N, C, D) elements [begin, end) by `step`, given the shared factor g
template <typename T>
__device__ __forceinline__ void write_dx(T *dx, const T *dl, NllArgs a, double g, int64_t begin, int64_t step,
                                         kiln_cuda_flag *flag) {
    const int64_t total = a.N * a.C * a.D;
    for (int64_t i = begin; i < total; i += step) {
        const int64_t d = i % a.D, k = (i / a.D) % a.C, n = i / (a.C * a.D), nd = n * a.D + d;
        int64_t t;
        const double w = weight_of(a, nd, &t, flag);
        double v = 0;
        if (k == t) v = -(w * (a.red == RED_NONE ? (double)to_f(dl[nd]) : g));
        dx[i] = from_d<T>(v);
    }
}

/* One block: the weight sum (mean only), then every element of dX. */
template <typename T>
__global__ void nll_grad_fused(const T *dl, T *dx, NllArgs a, kiln_cuda_flag *flag) {
    __shared__ double scratch[32];
    double wsum = 1;
    if (a.red == RED_MEAN) {
        double ws = 0;
        for (int64_t i = threadIdx.x; i < a.N * a.D; i += blockDim.x) {
            int64_t t;
            ws += weight_of(a, i, &t, flag);
        }
        wsum = block_sum_d(ws, scratch);
    }
    const double g = a.red == RED_NONE ? 0.0 : shared_factor(a, (double)to_f(dl[0]), wsum);
    write_dx<T>(dx, dl, a, g, threadIdx.x, blockDim.x, flag);
}

/* One block: the shared factor into g. */
template <typename T>
__global__ void nll_grad_factor(const T *dl, double *g, NllArgs a, kiln_cuda_flag *flag) {
    __shared__ double scratch[32];
    double ws = 0;
    for (int64_t i = threadIdx.x; i < a.N * a.D; i += blockDim.x) {
        int64_t t;
        ws += weight_of(a, i, &t, flag);
    }
    ws = block_sum_d(ws, scratch);
    if (threadIdx.x == 0) *g = shared_factor(a, (double)to_f(dl[0]), ws);
}

template <typename T>
__global__ void nll_grad_elems(const T *dl, const double *g, T *dx, NllArgs a, kiln_cuda_flag *flag) {
    const double gv = g ? *g : (a.red == RED_SUM ? (double)to_f(dl[0]) : 0.0);
    write_dx<T>(dx, dl, a, gv, thread_index(), grid_stride(), flag);
}

int reduction_of(const kiln_node *n) {
    const char *r = kiln_attr_string(n, "reduction", "mean");
    return strcmp(r, "none") == 0 ? RED_NONE : strcmp(r, "sum") == 0 ? RED_SUM : RED_MEAN;
}

NllArgs args_of(const kiln_op_ctx *c) {
    NllArgs a;
    memset(&a, 0, sizeof a);
    const kiln_tensor *x = c->in[0], *t = c->in[1];
    a.target = t->data;
    a.t64 = t->dtype == KILN_I64;
    if (c->n_in > 2 && c->in[2]) {
        a.weight = c->in[2]->data;
        a.wdt = c->in[2]->dtype;
    }
    a.has_ii = kiln_node_attr(c->node, "ignore_index") != NULL;
    a.ii = kiln_attr_int(c->node, "ignore_index", 0);
    a.red = reduction_of(c->node);
    a.N = x->dims[0];
    a.C = x->dims[1];
    a.D = 1;
    for (int d = 2; d < x->ndim; d++) a.D *= x->dims[d];
    return a;
}

bool fused_grad(const NllArgs &a) { return a.red != RED_MEAN || a.N * a.C * a.D <= FUSED_MAX; }

template <typename T>
kiln_status launch_nll(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, NllArgs a) {
    if (a.red == RED_NONE) {
        if (a.N * a.D == 0) return KILN_OK;
        nll_none<T><<<kiln_cuda_blocks(cu, a.N * a.D, THREADS), THREADS, 0, cu->stream>>>((const T *)x, (T *)y,
                                                                                         a, cu->flag);
        KILN_CUDA_LAUNCHED(ctx, "nll_none");
        return KILN_OK;
    }
    int threads = 32;
    while (threads < RED_THREADS && threads < a.N * a.D) threads *= 2;
    nll_reduce<T><<<1, threads, 0, cu->stream>>>((const T *)x, (T *)y, a, cu->flag);
    KILN_CUDA_LAUNCHED(ctx, "nll_reduce");
    return KILN_OK;
}

template <typename T>
kiln_status launch_nll_grad(kiln_cuda *cu, kiln_context *ctx, const void *dl, void *dx, NllArgs a, void *ws,
                            size_t ws_bytes) {
    const int64_t total = a.N * a.C * a.D;
    if (total == 0) return KILN_OK;
    if (a.red == RED_MEAN && total <= FUSED_MAX) {
        int threads = 32;
        while (threads < RED_THREADS && threads < total) threads *= 2;
        nll_grad_fused<T><<<1, threads, 0, cu->stream>>>((const T *)dl, (T *)dx, a, cu->flag);
        KILN_CUDA_LAUNCHED(ctx, "nll_grad_fused");
        return KILN_OK;
    }
    double *g = nullptr;
    if (a.red == RED_MEAN) {
        if (!ws || ws_bytes < sizeof(double))
            return kiln_fail(ctx, KILN_ERR_INTERNAL, "the NLL gradient needs %zu bytes of workspace, got %zu",
                             sizeof(double), ws_bytes);
        g = (double *)ws;
        int threads = 32;
        while (threads < RED_THREADS && threads < a.N * a.D) threads *= 2;
        nll_grad_factor<T><<<1, threads, 0, cu->stream>>>((const T *)dl, g, a, cu->flag);
        KILN_CUDA_LAUNCHED(ctx, "nll_grad_factor");
    }
    nll_grad_elems<T><<<kiln_cuda_blocks(cu, total, THREADS), THREADS, 0, cu->stream>>>((const T *)dl, g, (T *)dx,
                                                                                       a, cu->flag);
    KILN_CUDA_LAUNCHED(ctx, "nll_grad_elems");
    return KILN_OK;
}


/* ----------------------------------------------- kiln.LogSoftmaxNLL and its gradient */

/* max that keeps a NaN (the reference's max: v > mx || isnan(v)) */
__device__ __forceinline__ float max_nan(float a, float b) { return (b > a || b != b) ? b : a; }

__device__ __forceinline__ float warp_max_nan(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum_f(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The max and the sum of exp(x - max) of row x (C), every lane of the warp taking part. */
template <typename T>
__device__ __forceinline__ void row_stats(const T *x, int64_t C, int lane, float *mx, float *sum) {
    float m = -INFINITY;
    for (int64_t k = lane; k < C; k += 32) m = max_nan(m, to_f(x[k]));
    m = warp_max_nan(m);
    float s = 0;
    for (int64_t k = lane; k < C; k += 32) s += expf(to_f(x[k]) - m);
    *mx = m;
    *sum = warp_sum_f(s);
}

/* Row n's share of the loss, added to lane 0's running sums: the same code in the forward
 * and in the one-block gradient, so their losses agree to the bit (rows go to the same
 * warps in the same order; explicit roundings, nothing for the compiler to contract
 * differently in either kernel). */
__device__ __forceinline__ void loss_row(float xt, float mx, float lse, double w, double *ls, double *ws) {
    *ls = __dadd_rn(*ls, __dmul_rn(-w, (double)__fsub_rn(__fsub_rn(xt, mx), lse)));
    *ws = __dadd_rn(*ws, w);
}

/* The loss of a block's summed row shares. Every thread of the block calls it. */
__device__ __forceinline__ void loss_store(double ls, double ws, float *loss, const NllArgs &a, double *scratch) {
    ls = block_sum_d(ls, scratch);
    ws = block_sum_d(ws, scratch);
    if (threadIdx.x == 0) *loss = (float)(a.red == RED_SUM ? ls : ls / ws);
}

// x: (N, C); loss: scalar; logp: (N, C) or NULL. One block, a warp per row.
template <typename T>
__global__ void lsn_forward(const T *x, float *loss, float *logp, NllArgs a, kiln_cuda_flag *flag) {
    __shared__ double scratch[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    double ls = 0, ws = 0;
    for (int64_t n = warp; n < a.N; n += nwarps) {
        const T *row = x + n * a.C;
        float mx, sum;
        row_stats(row, a.C, lane, &mx, &sum);
        const float lse = logf(sum);
        if (logp)
            for (int64_t k = lane; k < a.C; k += 32) logp[n * a.C + k] = (to_f(row[k]) - mx) - lse;
        if (lane == 0) {
            int64_t t;
            const double w = weight_of(a, n, &t, flag);
            if (t >= 0) loss_row(to_f(row[t]), mx, lse, w, &ls, &ws);
        }
    }
    loss_store(ls, ws, loss, a, scratch);
}

/* dX of rows first, first + step, ... (warp-global indices), given the shared factor g
 * (dLoss for a sum, dLoss over the weight sum for a mean, 0 without dLoss). ls, ws (lane
 * 0's, or NULL): the rows' loss shares added as lsn_forward adds them. */
template <typename T>
__device__ __forceinline__ void lsn_grad_rows(const T *x, T *dx, float *dx32, const float *dlp, NllArgs a, double g,
                                              int64_t first, int64_t step, int lane, double *ls, double *ws,
                                              kiln_cuda_flag *flag) {
    for (int64_t n = first; n < a.N; n += step) {
        const T *row = x + n * a.C;
        float mx, sum;
        row_stats(row, a.C, lane, &mx, &sum);
        const float inv = 1.0f / sum;
        int64_t t;
        const double w = weight_of(a, n, &t, flag);
        if (ls && lane == 0 && t >= 0) loss_row(to_f(row[t]), mx, logf(sum), w, ls, ws);
        const float coef = t >= 0 ? (float)(w * g) : 0.0f;
        float sdlp = 0;
        if (dlp) {
            for (int64_t k = lane; k < a.C; k += 32) sdlp += dlp[n * a.C + k];
            sdlp = warp_sum_f(sdlp);
        }
        for (int64_t k = lane; k < a.C; k += 32) {
            const float p = expf(to_f(row[k]) - mx) * inv;
            float r = coef * (p - (k == t ? 1.0f : 0.0f));
            if (dlp) r += dlp[n * a.C + k] - p * sdlp;
            dx[n * a.C + k] = from_f<T>(r);
            if (dx32) dx32[n * a.C + k] = r;
        }
    }
}

__device__ __forceinline__ double dloss_of(const float *dl) { return dl ? (double)dl[0] : 0.0; }

/* One block: the weight sum (mean), then every row; with loss (not NULL) also the loss,
 * as lsn_forward computes it when launched with as many threads (row_threads). */
template <typename T>
__global__ void lsn_grad_fused(const T *x, const float *dl, const float *dlp, T *dx, float *dx32, float *loss,
                               NllArgs a, kiln_cuda_flag *flag) {
    __shared__ double scratch[32];
    double g = dloss_of(dl);
    if (a.red == RED_MEAN) {
        double ws = 0;
        for (int64_t i = threadIdx.x; i < a.N; i += blockDim.x) {
            int64_t t;
            ws += weight_of(a, i, &t, flag);
        }
        g /= block_sum_d(ws, scratch);
    }
    double ls = 0, ws = 0;
    lsn_grad_rows<T>(x, dx, dx32, dlp, a, g, threadIdx.x >> 5, blockDim.x >> 5, threadIdx.x & 31, loss ? &ls : nullptr,
                     &ws, flag);
    if (loss) loss_store(ls, ws, loss, a, scratch);
}

/* One block: dLoss over the weight sum into *g (a large mean). */
__global__ void lsn_grad_factor(const float *dl, double *g, NllArgs a, kiln_cuda_flag *flag) {
    __shared__ double scratch[32];
    double ws = 0;
    for (int64_t i = threadIdx.x; i < a.N; i += blockDim.x) {
        int64_t t;
        ws += weight_of(a, i, &t, flag);
    }
    ws = block_sum_d(ws, scratch);
    if (threadIdx.x == 0) *g = dloss_of(dl) / ws;
}

/* A grid of warps over the rows; the factor from *g (mean) or dLoss (sum). */
template <typename T>
__global__ void lsn_grad_grid(const T *x, const float *dl, const double *g, const float *dlp, T *dx, float *dx32,
                              NllArgs a, kiln_cuda_flag *flag) {
    const double gv = g ? *g : dloss_of(dl);
    lsn_grad_rows<T>(x, dx, dx32, dlp, a, gv, thread_index() >> 5, grid_stride() >> 5, threadIdx.x & 31, nullptr,
                     nullptr, flag);
}

/* Threads of a one-block kernel with a warp per row: up to RED_THREADS. */
int row_threads(int64_t rows) {
    int threads = 32;
    while (threads < RED_THREADS && threads < rows * 32) threads *= 2;
    return threads;
}

bool lsn_grad_one_block(const NllArgs &a) { return a.N * a.C <= FUSED_MAX; }

template <typename T>
kiln_status launch_lsn(kiln_cuda *cu, kiln_context *ctx, const void *x, float *loss, float *logp, NllArgs a) {
    lsn_forward<T><<<1, row_threads(a.N), 0, cu->stream>>>((const T *)x, loss, logp, a, cu->flag);
    KILN_CUDA_LAUNCHED(ctx, "lsn_forward");
    return KILN_OK;
}

/* loss (or NULL): the forward's loss too, in the one-block kernel, else by lsn_forward
 * first (a large batch, or nothing to differentiate). */
template <typename T>
kiln_status launch_lsn_grad(kiln_cuda *cu, kiln_context *ctx, const void *x, const float *dl, const float *dlp, void *dx,
                            float *dx32, float *loss, NllArgs a, void *ws, size_t ws_bytes) {
    if (loss && (a.N * a.C == 0 || !lsn_grad_one_block(a))) {
        kiln_status st = launch_lsn<T>(cu, ctx, x, loss, nullptr, a);
        if (st) return st;
        loss = nullptr;
    }
    if (a.N * a.C == 0) return KILN_OK;
    if (lsn_grad_one_block(a)) {
        lsn_grad_fused<T><<<1, row_threads(a.N), 0, cu->stream>>>((const T *)x, dl, dlp, (T *)dx, dx32, loss, a,
                                                                  cu->flag);
        KILN_CUDA_LAUNCHED(ctx, "lsn_grad_fused");
        return KILN_OK;
    }
    double *g = nullptr;
    if (a.red == RED_MEAN) {
        if (!ws || ws_bytes < sizeof(double))
            return kiln_fail(ctx, KILN_ERR_INTERNAL, "the fused loss gradient needs %zu bytes of workspace, got %zu",
                             sizeof(double), ws_bytes);
        g = (double *)ws;
        int threads = 32;
        while (threads < RED_THREADS && threads < a.N) threads *= 2;
        lsn_grad_factor<<<1, threads, 0, cu->stream>>>(dl, g, a, cu->flag);
        KILN_CUDA_LAUNCHED(ctx, "lsn_grad_factor");
    }
    lsn_grad_grid<T><<<kiln_cuda_blocks(cu, a.N * 32, THREADS), THREADS, 0, cu->stream>>>((const T *)x, dl, g, dlp,
                                                                                        (T *)dx, dx32, a, cu->flag);
    KILN_CUDA_LAUNCHED(ctx, "lsn_grad_grid");
    return KILN_OK;
}

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" kiln_status kiln_cuda_k_nll(kiln_cuda *cu, kiln_op_ctx *c) {
    const NllArgs a = args_of(c);
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, c->in[0]->dtype, launch_nll, cu, c->kctx, c->in[0]->data,
                           c->out[0]->data, a);
    return st;
}

extern "C" kiln_status kiln_cuda_ws_nll_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    *bytes = fused_grad(args_of(c)) ? 0 : 256;
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_nll_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const NllArgs a = args_of(c);
    if (c->n_in < 4 || !c->in[3])
        return kiln_fail(c->kctx, KILN_ERR_INVALID_ARGUMENT, "input dLoss is required");
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, c->in[0]->dtype, launch_nll_grad, cu, c->kctx, c->in[3]->data,
                           c->out[0]->data, a, c->workspace, c->workspace_size);
    return st;
}

static const float *f32_in(const kiln_op_ctx *c, int i) {
    return c->n_in > i && c->in[i] ? (const float *)c->in[i]->data : nullptr;
}

extern "C" kiln_status kiln_cuda_k_logsoftmax_nll(kiln_cuda *cu, kiln_op_ctx *c) {
    const NllArgs a = args_of(c);
    float *logp = c->n_out > 1 && c->out[1] ? (float *)c->out[1]->data : nullptr;
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, c->in[0]->dtype, launch_lsn, cu, c->kctx, c->in[0]->data,
                           (float *)c->out[0]->data, logp, a);
    return st;
}

extern "C" kiln_status kiln_cuda_ws_logsoftmax_nll_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    const NllArgs a = args_of(c);
    *bytes = lsn_grad_one_block(a) || a.red != RED_MEAN ? 0 : 256;
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_logsoftmax_nll_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const NllArgs a = args_of(c);
    float *dx32 = c->n_out > 1 && c->out[1] ? (float *)c->out[1]->data : nullptr;
    float *loss = c->n_out > 2 && c->out[2] ? (float *)c->out[2]->data : nullptr;
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, c->in[0]->dtype, launch_lsn_grad, cu, c->kctx, c->in[0]->data, f32_in(c, 3),
                           f32_in(c, 4), c->out[0]->data, dx32, loss, a, c->workspace, c->workspace_size);
    return st;
}
