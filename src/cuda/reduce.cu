/*
 * reduce.cu — ReduceSum, ReduceMean, ReduceMax and ReduceMin, and the forward-only ReduceL1,
 * ReduceL2, ReduceSumSquare, ReduceProd, ReduceLogSum and ReduceLogSumExp (the max taken
 * out first, as on the CPU: a pass for the max, then one for the sum), over any set of axes, for
 * f32, f16 and bf16, accumulating in float (the CPU reference accumulates in double: sums
 * agree to ~1e-6 relative times the square root of the count).
 *
 * Axes as src/ops/reduce_common.c reads them: the `axes` attribute before the opset where
 * they became input 1 (13 for ReduceSum, 18 for the others), the input's host values
 * (c->host_in) from then on, with noop_with_empty_axes. keepdims does not change the
 * layout. Empty axes reduce everything (or copy, with noop_with_empty_axes=1); an empty
 * reduction gives 0 (Sum, L1, L2, SumSquare), NaN (Mean), -inf (Max, LogSum, LogSumExp),
 * +inf (Min), 1 (Prod). NaN propagates through
 * Max and Min.
 *
 * The input is seen, as on the CPU, as kept dims (the output, row-major) and reduced dims,
 * size-1 dims dropped and neighbours of the same kind merged. When the innermost input
 * dim is reduced, one block reduces each output (threads stride over the reduced
 * elements, then a block reduction); otherwise each thread reduces one output, so that a
 * warp's loads fall on neighbouring addresses.
 */
#include "dtype.cuh"
#include "reduce.cuh"

#include <stdio.h>
#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

enum Kind { R_SUM, R_MEAN, R_MAX, R_MIN, R_L1, R_L2, R_SUMSQ, R_PROD, R_LOGSUM, R_LSE };

struct Layout {
    int nk, nr;
    int64_t ksize[KILN_MAX_DIMS], kstride[KILN_MAX_DIMS];
    int64_t rsize[KILN_MAX_DIMS], rstride[KILN_MAX_DIMS];
    int64_t count; /* elements reduced into each output */
};

void make_layout(const kiln_tensor *x, const bool *reduced, Layout *L) {
    int64_t strides[KILN_MAX_DIMS];
    kiln_strides(x->ndim, x->dims, strides);
    memset(L, 0, sizeof *L);
    L->count = 1;
    int last = -1;
    for (int d = 0; d < x->ndim; d++) {
        const int64_t size = x->dims[d];
        if (reduced[d]) L->count *= size;
        if (size == 1) continue;
        const int kind = reduced[d] ? 1 : 0;
        int64_t *sz = kind ? L->rsize : L->ksize;
        int64_t *sd = kind ? L->rstride : L->kstride;
        int *cnt = kind ? &L->nr : &L->nk;
        if (kind == last) {
            sz[*cnt - 1] *= size;
            sd[*cnt - 1] = strides[d];
        } else {
            sz[*cnt] = size;
            sd[*cnt] = strides[d];
            (*cnt)++;
        }
        last = kind;
    }
}

__device__ __forceinline__ int64_t kept_offset(const Layout &L, int64_t o) {
    int64_t off = 0;
    for (int k = L.nk - 1; k >= 0; k--) {
        off += (o % L.ksize[k]) * L.kstride[k];
        o /= L.ksize[k];
    }
    return off;
}

__device__ __forceinline__ int64_t reduced_offset(const Layout &L, int64_t r) {
    int64_t off = 0;
    for (int k = L.nr - 1; k >= 0; k--) {
        off += (r % L.rsize[k]) * L.rstride[k];
        r /= L.rsize[k];
    }
    return off;
}

/* Max and Min reduce as a NaN-propagating max: Min on negated values. */
template <int K> __device__ __forceinline__ float prep(float v) {
    if constexpr (K == R_MIN) return -v;
    else if constexpr (K == R_L1) return fabsf(v);
    else if constexpr (K == R_L2 || K == R_SUMSQ) return v * v;
    else return v;
}
template <int K> __device__ __forceinline__ float identity() {
    return K == R_MAX || K == R_MIN ? -INFINITY : K == R_PROD ? 1.f : 0.f;
}
template <int K> __device__ __forceinline__ float fold(float a, float v) {
    if constexpr (K == R_MAX || K == R_MIN) return nan_max(a, v);
    else if constexpr (K == R_PROD) return a * v;
    else return a + v;
}
template <int K> __device__ __forceinline__ float finish(float a, int64_t count) {
    if constexpr (K == R_MEAN) return a / (float)count;
    else if constexpr (K == R_MIN) return -a;
    else if constexpr (K == R_L2) return sqrtf(a);
    else if constexpr (K == R_LOGSUM) return logf(a);
    else return a;
}

/* The product over the block (reduce.cuh's block_reduce does max and sum), returned to
 * every thread. */
__device__ float block_prod(float v, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v *= __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < nwarps ? scratch[lane] : 1.f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) w *= __shfl_xor_sync(0xffffffffu, w, o);
        if (lane == 0) scratch[0] = w;
    }
    __syncthreads();
    const float r = scratch[0];
    __syncthreads();
    return r;
}

/* LogSumExp of one output from its sum of exp(x - m) and max m: m itself where m is not
 * finite (all -inf, an inf, a NaN). */
__device__ __forceinline__ float lse_finish(float m, float sum) { return isfinite(m) ? m + logf(sum) : m; }

// x: the input; y: (outputs)
template <typename T, int K>
__global__ void reduce_block(const T *x, T *y, int64_t outputs, Layout L) {
    __shared__ float scratch[32];
    for (int64_t o = blockIdx.x; o < outputs; o += gridDim.x) {
        const int64_t base = kept_offset(L, o);
        if constexpr (K == R_LSE) {
            float m = -INFINITY, sum = 0.f;
            for (int64_t r = threadIdx.x; r < L.count; r += blockDim.x)
                m = nan_max(m, to_f(x[base + reduced_offset(L, r)]));
            m = block_reduce<true>(m, scratch);
            for (int64_t r = threadIdx.x; r < L.count; r += blockDim.x)
                sum += expf(to_f(x[base + reduced_offset(L, r)]) - m);
            sum = block_reduce<false>(sum, scratch);
            if (threadIdx.x == 0) y[o] = from_f<T>(lse_finish(m, sum));
            continue;
        }
        float a = identity<K>();
        for (int64_t r = threadIdx.x; r < L.count; r += blockDim.x)
            a = fold<K>(a, prep<K>(to_f(x[base + reduced_offset(L, r)])));
        if constexpr (K == R_PROD) a = block_prod(a, scratch);
        else a = block_reduce<(K == R_MAX || K == R_MIN)>(a, scratch);
        if (threadIdx.x == 0) y[o] = from_f<T>(finish<K>(a, L.count));
    }
}

template <typename T, int K>
__global__ void reduce_thread(const T *x, T *y, int64_t outputs, Layout L) {
    for (int64_t o = thread_index(); o < outputs; o += grid_stride()) {
        const int64_t base = kept_offset(L, o);
        if constexpr (K == R_LSE) {
            float m = -INFINITY, sum = 0.f;
            for (int64_t r = 0; r < L.count; r++) m = nan_max(m, to_f(x[base + reduced_offset(L, r)]));
            for (int64_t r = 0; r < L.count; r++) sum += expf(to_f(x[base + reduced_offset(L, r)]) - m);
            y[o] = from_f<T>(lse_finish(m, sum));
            continue;
        }
        float a = identity<K>();
        for (int64_t r = 0; r < L.count; r++) a = fold<K>(a, prep<K>(to_f(x[base + reduced_offset(L, r)])));
        y[o] = from_f<T>(finish<K>(a, L.count));
    }
}

template <typename T> __global__ void fill_value(T *y, float v, int64_t n) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) y[i] = from_f<T>(v);
}

template <typename T, int K>
kiln_status launch_kind(kiln_cuda *cu, kiln_context *ctx, const T *x, T *y, int64_t outputs, const Layout &L) {
    /* innermost input dim reduced: it is the last reduced dim and has stride 1 */
    const bool rows = L.nr > 0 && L.rstride[L.nr - 1] == 1;
    if (rows) {
        int threads = 32;
        while (threads < THREADS && threads < L.count) threads *= 2;
        const unsigned blocks = (unsigned)(outputs < 65535 ? outputs : 65535);
        reduce_block<T, K><<<blocks, threads, 0, cu->stream>>>(x, y, outputs, L);
        KILN_CUDA_LAUNCHED(ctx, "reduce_block");
    } else {
        reduce_thread<T, K><<<kiln_cuda_blocks(cu, outputs, THREADS), THREADS, 0, cu->stream>>>(x, y, outputs, L);
        KILN_CUDA_LAUNCHED(ctx, "reduce_thread");
    }
    return KILN_OK;
}

template <typename T>
kiln_status launch_reduce(kiln_cuda *cu, kiln_context *ctx, int kind, const void *xv, void *yv, int64_t outputs,
                          const Layout &L) {
    const T *x = (const T *)xv;
    T *y = (T *)yv;
    if (L.count == 0) {
        const float v = kind == R_MEAN                                        ? NAN
                        : kind == R_MAX || kind == R_LOGSUM || kind == R_LSE ? -INFINITY
                        : kind == R_MIN                                      ? INFINITY
                        : kind == R_PROD                                     ? 1.f
                                                                             : 0.f;
        fill_value<T><<<kiln_cuda_blocks(cu, outputs, THREADS), THREADS, 0, cu->stream>>>(y, v, outputs);
        KILN_CUDA_LAUNCHED(ctx, "fill_value");
        return KILN_OK;
    }
    switch (kind) {
    case R_SUM: return launch_kind<T, R_SUM>(cu, ctx, x, y, outputs, L);
    case R_MEAN: return launch_kind<T, R_MEAN>(cu, ctx, x, y, outputs, L);
    case R_MAX: return launch_kind<T, R_MAX>(cu, ctx, x, y, outputs, L);
    case R_MIN: return launch_kind<T, R_MIN>(cu, ctx, x, y, outputs, L);
    case R_L1: return launch_kind<T, R_L1>(cu, ctx, x, y, outputs, L);
    case R_L2: return launch_kind<T, R_L2>(cu, ctx, x, y, outputs, L);
    case R_SUMSQ: return launch_kind<T, R_SUMSQ>(cu, ctx, x, y, outputs, L);
    case R_PROD: return launch_kind<T, R_PROD>(cu, ctx, x, y, outputs, L);
    case R_LOGSUM: return launch_kind<T, R_LOGSUM>(cu, ctx, x, y, outputs, L);
    default: return launch_kind<T, R_LSE>(cu, ctx, x, y, outputs, L);
    }
}

int kind_of(const char *op) {
    if (strcmp(op, "ReduceSum") == 0) return R_SUM;
    if (strcmp(op, "ReduceMean") == 0) return R_MEAN;
    if (strcmp(op, "ReduceMax") == 0) return R_MAX;
    if (strcmp(op, "ReduceMin") == 0) return R_MIN;
    if (strcmp(op, "ReduceL1") == 0) return R_L1;
    if (strcmp(op, "ReduceL2") == 0) return R_L2;
    if (strcmp(op, "ReduceSumSquare") == 0) return R_SUMSQ;
    if (strcmp(op, "ReduceProd") == 0) return R_PROD;
    if (strcmp(op, "ReduceLogSum") == 0) return R_LOGSUM;
    if (strcmp(op, "ReduceLogSumExp") == 0) return R_LSE;
    return -1;
}

} // namespace

/* Which dims c's reduction reduces (noop: an identity), from the attribute or the host
 * values of the axes input (hin[axes_index]: 1 for the Reduce ops, 2 or 3 for their
 * gradients), as src/ops/reduce_common.c's parse_axes. */
extern "C" bool kiln_cuda_reduce_axes(const kiln_op_ctx *c, kiln_tensor *const *hin, int axes_index, bool *reduced,
                                      bool *noop, char *why, size_t wn) {
    const kiln_node *n = c->node;
    const int rank = c->in[0]->ndim;
    const bool sum = strcmp(n->op_type, "ReduceSum") == 0 || strcmp(n->op_type, "ReduceSumGrad") == 0;
    const int axes_input_opset = sum ? 13 : 18;
    int64_t axes[KILN_MAX_DIMS];
    int count = 0;
    *noop = false;
    for (int d = 0; d < KILN_MAX_DIMS; d++) reduced[d] = false;
    if (n->opset >= axes_input_opset) {
        *noop = kiln_attr_int(n, "noop_with_empty_axes", 0) != 0;
        const bool given = c->n_in > axes_index && c->in[axes_index];
        if (given && !hin) {
            snprintf(why, wn, "the axes' values are not known");
            return false;
        }
        const kiln_tensor *t = given ? hin[axes_index] : NULL;
        if (!kiln_cuda_host_ints(t, "axes", axes, KILN_MAX_DIMS, &count, why, wn)) return false;
    } else {
        const int64_t *a = kiln_attr_ints(n, "axes", &count);
        if (count > KILN_MAX_DIMS) {
            snprintf(why, wn, "%d axes", count);
            return false;
        }
        for (int i = 0; i < count; i++) axes[i] = a[i];
    }
    if (count == 0) {
        if (!*noop)
            for (int d = 0; d < rank; d++) reduced[d] = true;
        return true;
    }
    *noop = false;
    for (int i = 0; i < count; i++) {
        int64_t a = axes[i];
        if (!kiln_norm_axis(&a, rank)) {
            snprintf(why, wn, "axes[%d] is out of range", i);
            return false;
        }
        reduced[a] = true;
    }
    return true;
}

extern "C" kiln_status kiln_cuda_k_reduce(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    const int kind = kind_of(c->node->op_type);
    if (kind < 0) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "op %s is not a reduction", c->node->op_type);
    const int64_t outputs = kiln_tensor_numel(y);
    if (outputs == 0) return KILN_OK;
    bool reduced[KILN_MAX_DIMS], noop;
    char why[160];
    /* before the axes input's opset no host values are read */
    kiln_tensor *const *hin = c->host_in;
    const int axes_input_opset = kind == R_SUM ? 13 : 18;
    if (c->node->opset >= axes_input_opset && c->n_in > 1 && c->in[1]) {
        kiln_status st = kiln_cuda_need_host(c);
        if (st) return st;
    }
    if (!kiln_cuda_reduce_axes(c, hin, 1, reduced, &noop, why, sizeof why))
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "%s", why);
    if (noop) {
        KILN_CUDA_CHECK(c->kctx, cudaMemcpyAsync(y->data, x->data, kiln_tensor_nbytes(y), cudaMemcpyDeviceToDevice,
                                                 cu->stream));
        return KILN_OK;
    }
    Layout L;
    make_layout(x, reduced, &L);
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_reduce, cu, c->kctx, kind, x->data, y->data, outputs, L);
    return st;
}
