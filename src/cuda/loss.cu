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
