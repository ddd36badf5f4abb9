/*
 * reduce_sum.cu — sums of a tensor down to a smaller shape, the tail of most gradients:
 *
 *   kiln.ConvGradBias(dY) -> dB (M): dY (N, M, spatial...) summed over all dims but 1
 *     (an NHWC dY: as (N*H*W, M), column sums);
 *   kiln.ReduceSumTo(X, Like) -> X summed over the dims along which Like's shape
 *     (right-aligned, size 1 or missing) was broadcast to X's;
 *   kiln.GemmGradC(dY, C) -> beta * dY (M, N) summed down to C's shape (beta 0: exactly 0,
 *     whatever dY holds, as the reference).
 *
 *   The host merges the input's dims into runs that are all kept or all summed (size-1
 *   dims dropped). The usual patterns are one (A, M, B) view, A and B summed, M kept:
 *     B == 1 (column sums, e.g. a Gemm bias): threads along M read neighbouring
 *       addresses, the rows shared out over the block's other dimension;
 *     B > 1 (channel sums, e.g. a Conv bias): a block per channel walks (a, b) with b
 *       fastest, so each warp reads one contiguous run; 16-byte loads when B is a
 *       multiple of a vector and X aligned, several loads in flight per thread, 32-bit
 *       indices when they fit.
 *   When there are few kept elements the rows are split over P blocks per kept element,
 *   whose partial sums (workspace: P * M floats) a second kernel adds in a fixed order:
 *   the result does not depend on scheduling (no atomics). Other patterns (kept, summed,
 *   kept, ...) take a plain kernel with one thread per output element.
 *   f32, f16 and bf16, summed in float (the reference sums in double or in order; the
 *   error is that of a float tree sum).
 */
#include "dtype.cuh"
#include "reduce.cuh"

#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;
constexpr int MAX_RUNS = KILN_MAX_DIMS;

/* How X reduces to Y. */
struct SumPlan {
    /* the (A, M, B) view, when `amb` */
    bool amb;
    int64_t A, M, B;
    int64_t P; /* blocks per kept element (row chunks); 1: no partial sums */
    /* otherwise: kept and summed runs with X's strides */
    int nk, nr;
    int64_t kdim[MAX_RUNS], kstride[MAX_RUNS];
    int64_t rdim[MAX_RUNS], rstride[MAX_RUNS];
    int64_t nout, nred;
};

/* Plan the sum of x (rank xr) down to y (rank yr <= xr, right-aligned, dims equal or 1). */
void plan_sum(const kiln_cuda *cu, int xr, const int64_t *xd, int yr, const int64_t *yd, SumPlan *p) {
    memset(p, 0, sizeof *p);
    /* runs over X's dims, outermost first: kind 1 kept, 0 summed */
    int kinds[MAX_RUNS];
    int64_t sizes[MAX_RUNS];
    int n = 0;
    for (int d = 0; d < xr; d++) {
        const int64_t s = xd[d];
        if (s == 1) continue;
        const int yi = d - (xr - yr);
        const int kind = yi >= 0 && yd[yi] == s ? 1 : 0;
        if (n > 0 && kinds[n - 1] == kind) {
            sizes[n - 1] *= s;
        } else {
            kinds[n] = kind;
            sizes[n] = s;
            n++;
        }
    }
    p->nout = 1;
    p->nred = 1;
    for (int i = 0; i < n; i++) (kinds[i] ? p->nout : p->nred) *= sizes[i];
    /* (A, M, B): at most one kept run, with summed runs around it */
    int nk = 0;
    for (int i = 0; i < n; i++) nk += kinds[i];
    if (nk <= 1) {
        p->amb = true;
        p->A = p->M = p->B = 1;
        bool seen_k = false;
        for (int i = 0; i < n; i++) {
            if (kinds[i]) {
                p->M = sizes[i];
                seen_k = true;
            } else if (seen_k) {
                p->B = sizes[i];
            } else {
                p->A = sizes[i];
            }
        }
        /* Split the rows when the kept elements alone give too few blocks: aim at a few
         * blocks per SM, each with at least 4096 elements to sum. */
        const int64_t first = p->B == 1 ? (p->M + 31) / 32 : p->M;
        const int64_t target = 4 * (int64_t)(cu->props.sm_count > 0 ? cu->props.sm_count : 1);
        int64_t P = first >= target ? 1 : (target + first - 1) / first;
        /* a column-sum block (B == 1) takes 32 columns at once */
        const int64_t per_elem = p->A * p->B * (p->B == 1 ? (p->M < 32 ? p->M : 32) : 1);
        const int64_t by_work = per_elem / 4096 > 0 ? per_elem / 4096 : 1;
        if (P > by_work) P = by_work;
        if (P > p->A) P = p->A;
        if (P < 1) P = 1;
        p->P = P;
        return;
    }
    /* general: strides of X over the runs */
    int64_t stride = 1;
    for (int i = n - 1; i >= 0; i--) {
        if (kinds[i]) {
            p->kdim[p->nk] = sizes[i];
            p->kstride[p->nk++] = stride;
        } else {
            p->rdim[p->nr] = sizes[i];
            p->rstride[p->nr++] = stride;
        }
        stride *= sizes[i];
    }
    /* runs were collected innermost first; put them outermost first */
    for (int i = 0; i < p->nk / 2; i++) {
        int64_t t = p->kdim[i];
        p->kdim[i] = p->kdim[p->nk - 1 - i];
        p->kdim[p->nk - 1 - i] = t;
        t = p->kstride[i];
        p->kstride[i] = p->kstride[p->nk - 1 - i];
        p->kstride[p->nk - 1 - i] = t;
    }
    for (int i = 0; i < p->nr / 2; i++) {
        int64_t t = p->rdim[i];
        p->rdim[i] = p->rdim[p->nr - 1 - i];
        p->rdim[p->nr - 1 - i] = t;
        t = p->rstride[i];
        p->rstride[i] = p->rstride[p->nr - 1 - i];
        p->rstride[p->nr - 1 - i] = t;
    }
}

size_t partial_bytes(const SumPlan &p) {
    if (!p.amb || p.P <= 1) return 0;
    return ((size_t)(p.P * p.M) * sizeof(float) + 255) & ~(size_t)255;
}

/* x (A, M) -> out (P, M) partials (or y (M) when P == 1), block (32, 8): threadIdx.x along
 * M, threadIdx.y and blockIdx.y share the rows out. */
template <typename T>
__global__ void column_sum(const T *x, T *y, float *part, int64_t A, int64_t M, int64_t P, float scale) {
    __shared__ float acc[8][33];
    const int64_t m = (int64_t)blockIdx.x * 32 + threadIdx.x;
    const int64_t p = blockIdx.y;
    const int64_t lo = A * p / P, hi = A * (p + 1) / P;
    float s = 0.f;
    if (m < M)
        for (int64_t a = lo + threadIdx.y; a < hi; a += 8) s += to_f(x[a * M + m]);
    acc[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && m < M) {
        float t = 0.f;
#pragma unroll
        for (int k = 0; k < 8; k++) t += acc[k][threadIdx.x];
        if (P == 1) y[m] = from_f<T>(t * scale);
        else part[p * M + m] = t;
    }
}

/* x (A, M, B) -> partials (M, P) (or y (M) when P == 1): block (m, p) sums rows
 * [A*p/P, A*(p+1)/P) of channel m, walked as one run j = (row, b) with b fastest. B and
 * the indices are in units of V (VecOf<T> when every row starts 16-byte aligned, else
 * T); I is int when every index fits. Each thread keeps UNROLL loads in flight into
 * separate accumulators (a serial loop leaves one load in flight and waits out its
 * latency per element), then adds them and the block in a fixed order: deterministic. */
constexpr int UNROLL = 4;

template <typename T, typename I, bool VEC>
__global__ void channel_sum(const T *x, T *y, float *part, I A, I M, I B, I P, float scale) {
    using V = typename VecOf<T>::type;
    constexpr int N = VEC ? VecOf<T>::N : 1;
    __shared__ float scratch[32];
    const I m = blockIdx.x, p = blockIdx.y;
    const I lo = (I)((int64_t)A * p / P), hi = (I)((int64_t)A * (p + 1) / P);
    const I n = (hi - lo) * B, step = blockDim.x;
    float acc[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) acc[u] = 0.f;
    for (I j = threadIdx.x; j < n; j += UNROLL * step) {
        float v[UNROLL][N];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const I k = j + u * step, at = ((lo + k / B) * M + m) * B + k % B;
#pragma unroll
            for (int e = 0; e < N; e++) v[u][e] = 0.f;
            if (k >= n) continue;
            if constexpr (VEC) {
                const V w = reinterpret_cast<const V *>(x)[at];
#pragma unroll
                for (int e = 0; e < N; e++) v[u][e] = to_f(w.v[e]);
            } else {
                v[u][0] = to_f(x[at]);
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
#pragma unroll
            for (int e = 0; e < N; e++) acc[u] += v[u][e];
    }
    float s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    s = block_reduce<false>(s, scratch);
    if (threadIdx.x == 0) {
        if (P == 1) y[m] = from_f<T>(s * scale);
        else part[m * P + p] = s;
    }
}

/* y[m] = scale * sum over p of the partials, in order. col: partials laid out (P, M). */
template <typename T>
__global__ void finish_sum(const float *part, T *y, int64_t M, int64_t P, bool col, float scale) {
    for (int64_t m = thread_index(); m < M; m += grid_stride()) {
        float s = 0.f;
        for (int64_t p = 0; p < P; p++) s += col ? part[p * M + m] : part[m * P + p];
        y[m] = from_f<T>(s * scale);
    }
}

/* finish_sum for many partials (a thread's serial walk over hundreds of them waits out an
 * L2 latency each): a block per output element, its threads taking the partials in a fixed
 * stride and a fixed-order block reduction after: deterministic too. */
constexpr int FINISH_THREADS = 128;

template <typename T>
__global__ void finish_sum_wide(const float *part, T *y, int64_t M, int64_t P, bool col, float scale) {
    __shared__ float scratch[32];
    for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
        float s = 0.f;
        for (int64_t p = threadIdx.x; p < P; p += FINISH_THREADS) s += col ? part[p * M + m] : part[m * P + p];
        s = block_reduce<false>(s, scratch);
        if (threadIdx.x == 0) y[m] = from_f<T>(s * scale);
    }
}

struct Runs {
    int nk, nr;
    int64_t kdim[MAX_RUNS], kstride[MAX_RUNS], rdim[MAX_RUNS], rstride[MAX_RUNS];
};

/* One thread per output element, walking the summed runs. */
template <typename T>
__global__ void general_sum(const T *x, T *y, int64_t nout, int64_t nred, Runs r, float scale) {
    for (int64_t o = thread_index(); o < nout; o += grid_stride()) {
        int64_t rest = o, base = 0;
        for (int d = r.nk - 1; d >= 0; d--) {
            base += (rest % r.kdim[d]) * r.kstride[d];
            rest /= r.kdim[d];
        }
        float s = 0.f;
        for (int64_t j = 0; j < nred; j++) {
            int64_t q = j, off = base;
            for (int d = r.nr - 1; d >= 0; d--) {
                off += (q % r.rdim[d]) * r.rstride[d];
                q /= r.rdim[d];
            }
            s += to_f(x[off]);
        }
        y[o] = from_f<T>(s * scale);
    }
}

// y = scale * x elementwise (nothing is summed)
template <typename T> __global__ void scale_copy(const T *x, T *y, int64_t n, float scale) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) y[i] = from_f<T>(to_f(x[i]) * scale);
}

template <typename T>
kiln_status launch_sum(kiln_cuda *cu, kiln_context *ctx, const SumPlan &p, const void *xv, void *yv,
                       void *ws, size_t ws_bytes, float scale) {
    const T *x = (const T *)xv;
    T *y = (T *)yv;
    if (p.nout == 0) return KILN_OK;
    if (p.nred == 0) { /* an empty sum */
        KILN_CUDA_CHECK(ctx, cudaMemsetAsync(yv, 0, (size_t)p.nout * sizeof(T), cu->stream));
        return KILN_OK;
    }
    if (!p.amb) {
        Runs r;
        memset(&r, 0, sizeof r);
        r.nk = p.nk;
        r.nr = p.nr;
        for (int i = 0; i < p.nk; i++) {
            r.kdim[i] = p.kdim[i];
            r.kstride[i] = p.kstride[i];
        }
        for (int i = 0; i < p.nr; i++) {
            r.rdim[i] = p.rdim[i];
            r.rstride[i] = p.rstride[i];
        }
        general_sum<T><<<kiln_cuda_blocks(cu, p.nout, THREADS), THREADS, 0, cu->stream>>>(x, y, p.nout, p.nred,
                                                                                          r, scale);
        KILN_CUDA_LAUNCHED(ctx, "general_sum");
        return KILN_OK;
    }
    if (p.A == 1 && p.B == 1) { /* nothing summed */
        scale_copy<T><<<kiln_cuda_blocks(cu, p.M, THREADS), THREADS, 0, cu->stream>>>(x, y, p.M, scale);
        KILN_CUDA_LAUNCHED(ctx, "scale_copy");
        return KILN_OK;
    }
    if (partial_bytes(p) > ws_bytes || (partial_bytes(p) && !ws))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "the sum needs %zu bytes of workspace, got %zu",
                         partial_bytes(p), ws_bytes);
    float *part = (float *)ws;
    if (p.P > 65535) return kiln_fail(ctx, KILN_ERR_INTERNAL, "too many row chunks");
    if (p.B == 1) {
        const int64_t gx = (p.M + 31) / 32;
        if (gx > INT32_MAX) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%lld columns", (long long)p.M);
        column_sum<T><<<dim3((unsigned)gx, (unsigned)p.P), dim3(32, 8), 0, cu->stream>>>(x, y, part, p.A, p.M,
                                                                                       p.P, scale);
        KILN_CUDA_LAUNCHED(ctx, "column_sum");
    } else {
        if (p.M > INT32_MAX) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%lld channels", (long long)p.M);
        const int64_t vec = VecOf<T>::N;
        const bool vx = p.B % vec == 0 && aligned16(x);
        const int64_t Bu = vx ? p.B / vec : p.B;
        /* enough threads for one pass over a block's share of the rows, 32 to 256 */
        const int64_t chunk = (p.A + p.P - 1) / p.P * Bu;
        int threads = 32;
        while (threads < THREADS && threads < chunk) threads *= 2;
        const dim3 grid((unsigned)p.M, (unsigned)p.P);
        if (p.A * p.M * Bu <= 0x3fffffff) {
            if (vx)
                channel_sum<T, int, true><<<grid, threads, 0, cu->stream>>>(x, y, part, (int)p.A, (int)p.M, (int)Bu,
                                                                           (int)p.P, scale);
            else
                channel_sum<T, int, false><<<grid, threads, 0, cu->stream>>>(x, y, part, (int)p.A, (int)p.M,
                                                                            (int)Bu, (int)p.P, scale);
        } else if (vx) {
            channel_sum<T, int64_t, true><<<grid, threads, 0, cu->stream>>>(x, y, part, p.A, p.M, Bu, p.P, scale);
        } else {
            channel_sum<T, int64_t, false><<<grid, threads, 0, cu->stream>>>(x, y, part, p.A, p.M, Bu, p.P, scale);
        }
        KILN_CUDA_LAUNCHED(ctx, "channel_sum");
    }
    if (p.P > 32 && p.M <= 65535) {
        finish_sum_wide<T><<<(unsigned)p.M, FINISH_THREADS, 0, cu->stream>>>(part, y, p.M, p.P, p.B == 1, scale);
        KILN_CUDA_LAUNCHED(ctx, "finish_sum_wide");
    } else if (p.P > 1) {
        finish_sum<T><<<kiln_cuda_blocks(cu, p.M, THREADS), THREADS, 0, cu->stream>>>(part, y, p.M, p.P,
                                                                                     p.B == 1, scale);
        KILN_CUDA_LAUNCHED(ctx, "finish_sum");
    }
    return KILN_OK;
}

/* The output shape each op sums down to. */
void target_shape(const kiln_op_ctx *c, int *yr, const int64_t **yd) {
    *yr = c->out[0]->ndim;
    *yd = c->out[0]->dims;
}

/* ConvGradBias keeps dim 1 of dY: as a target shape (M, 1, ..., 1) right-aligned to dY's
 * rank minus one. */
void bias_shape(const kiln_tensor *dy, int *yr, int64_t *yd) {
    *yr = dy->ndim - 1;
    for (int d = 0; d < *yr; d++) yd[d] = d == 0 ? dy->dims[1] : 1;
}

/* dY of an NHWC ConvGradBias seen as (N*H*W, M): the sum keeps its last dim. */
bool nhwc_bias(const kiln_op_ctx *c, int64_t *xd, int *yr, int64_t *yd) {
    const kiln_tensor *x = c->in[0];
    if (x->ndim != 4 || x->format != KILN_FORMAT_NHWC || strcmp(c->node->op_type, "ConvGradBias") != 0) return false;
    xd[0] = x->dims[0] * x->dims[2] * x->dims[3];
    xd[1] = x->dims[1];
    *yr = 1;
    yd[0] = x->dims[1];
    return true;
}

kiln_status run_sum(kiln_cuda *cu, kiln_op_ctx *c, int yr, const int64_t *yd, float scale) {
    const kiln_tensor *x = c->in[0];
    SumPlan p;
    int64_t xd[2], nyd[1];
    int nyr = 0;
    if (nhwc_bias(c, xd, &nyr, nyd)) plan_sum(cu, 2, xd, nyr, nyd, &p);
    else plan_sum(cu, x->ndim, x->dims, yr, yd, &p);
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_sum, cu, c->kctx, p, x->data, c->out[0]->data,
                           c->workspace, c->workspace_size, scale);
    return st;
}

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" kiln_status kiln_cuda_ws_channel_sum(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    const kiln_tensor *x = c->in[0];
    int yr = 0;
    int64_t yd[KILN_MAX_DIMS];
    const int64_t *ydp = yd;
    if (c->node->op >= 0 && strcmp(c->node->op_type, "ConvGradBias") == 0) bias_shape(x, &yr, yd);
    else target_shape(c, &yr, &ydp);
    SumPlan p;
    int64_t xd[2];
    if (nhwc_bias(c, xd, &yr, yd)) plan_sum(cu, 2, xd, yr, yd, &p);
    else plan_sum(cu, x->ndim, x->dims, yr, ydp, &p);
    *bytes = partial_bytes(p);
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_conv_grad_bias(kiln_cuda *cu, kiln_op_ctx *c) {
    int yr = 0;
    int64_t yd[KILN_MAX_DIMS];
    bias_shape(c->in[0], &yr, yd);
    return run_sum(cu, c, yr, yd, 1.f);
}

extern "C" kiln_status kiln_cuda_k_reduce_sum_to(kiln_cuda *cu, kiln_op_ctx *c) {
    return run_sum(cu, c, c->out[0]->ndim, c->out[0]->dims, 1.f);
}

extern "C" kiln_status kiln_cuda_k_gemm_grad_c(kiln_cuda *cu, kiln_op_ctx *c) {
    const float beta = kiln_attr_float(c->node, "beta", 1.0f);
    if (beta == 0.f) { /* the forward never read C: its gradient is exactly 0 */
        const size_t bytes = kiln_tensor_nbytes(c->out[0]);
        if (bytes) KILN_CUDA_CHECK(c->kctx, cudaMemsetAsync(c->out[0]->data, 0, bytes, cu->stream));
        return KILN_OK;
    }
    return run_sum(cu, c, c->out[0]->ndim, c->out[0]->dims, beta);
}
