/*
 * pool.cu — pooling kernels for f32, f16 and bf16, X (N, C, spatial...) with 1 to 3
 * spatial dims.
 *
 *   MaxPool (Y only; the Indices output is not supported) and AveragePool: one thread per
 *   output element. Geometry (kernel_shape, strides, dilations, pads, auto_pad, and the
 *   output size infer chose with ceil_mode) comes from kiln_cuda_window_get, the rules of
 *   the CPU reference. Window positions outside the input are skipped; MaxPool lets NaN
 *   through. AveragePool divides by the positions inside the input (count_include_pad=0)
 *   or inside the padded input [-pad_begin, in + pad_end) (count_include_pad=1; positions
 *   a ceil_mode window takes past the end padding do not count, as in ONNX's reference
 *   and PyTorch).
 *
 *   GlobalAveragePool: one block per (n, c) row, a block reduction in float.
 *
 * Spatial dims are right-aligned into 3 slots; unused leading slots have size 1.
 */
#include "dtype.cuh"
#include "reduce.cuh"

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

struct PoolGeo {
    int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
};

template <typename T, bool MAX>
__global__ void pool_kernel(const T *x, T *y, int64_t total, PoolGeo g, bool include_pad) {
    const int64_t in_sz = g.in[0] * g.in[1] * g.in[2];
    for (int64_t i = thread_index(); i < total; i += grid_stride()) {
        int64_t r = i, o[3];
        for (int t = 2; t >= 0; t--) {
            o[t] = r % g.out[t];
            r /= g.out[t];
        }
        const T *xp = x + r * in_sz; /* r is now the (n, c) row */
        /* per slot: the window's first coordinate, and the positions inside the input
         * [lo, hi) and inside the padded input (for the divisor) */
        int64_t start[3], lo[3], hi[3], padded = 1;
        for (int t = 0; t < 3; t++) {
            start[t] = o[t] * g.s[t] - g.pb[t];
            lo[t] = 0;
            hi[t] = 0;
            int64_t inside_pad = 0;
            for (int64_t j = 0; j < g.k[t]; j++) {
                const int64_t p = start[t] + j * g.d[t];
                if (p >= -g.pb[t] && p < g.in[t] + g.pe[t]) inside_pad++;
            }
            padded *= inside_pad;
            /* j with 0 <= start + j*d < in */
            int64_t a = start[t] >= 0 ? 0 : (-start[t] + g.d[t] - 1) / g.d[t];
            int64_t b = g.in[t] - start[t] <= 0 ? 0 : (g.in[t] - start[t] + g.d[t] - 1) / g.d[t];
            if (b > g.k[t]) b = g.k[t];
            lo[t] = a;
            hi[t] = b > a ? b : a;
        }
        float acc = MAX ? -INFINITY : 0.f;
        int64_t count = 0;
        for (int64_t j0 = lo[0]; j0 < hi[0]; j0++) {
            const int64_t i0 = start[0] + j0 * g.d[0];
            for (int64_t j1 = lo[1]; j1 < hi[1]; j1++) {
                const int64_t i1 = start[1] + j1 * g.d[1];
                const T *row = xp + (i0 * g.in[1] + i1) * g.in[2];
                for (int64_t j2 = lo[2]; j2 < hi[2]; j2++) {
                    const float v = to_f(row[start[2] + j2 * g.d[2]]);
                    if constexpr (MAX) acc = nan_max(acc, v);
                    else acc += v;
                    count++;
                }
            }
        }
        if constexpr (MAX) y[i] = from_f<T>(acc);
        else y[i] = from_f<T>(acc / (float)(include_pad ? padded : count));
    }
}

template <typename T>
kiln_status launch_pool(kiln_cuda *cu, kiln_context *ctx, bool is_max, const void *x, void *y,
                        int64_t total, PoolGeo g, bool include_pad) {
    if (total == 0) return KILN_OK;
    const unsigned blocks = kiln_cuda_blocks(cu, total, THREADS);
    if (is_max)
        pool_kernel<T, true><<<blocks, THREADS, 0, cu->stream>>>((const T *)x, (T *)y, total, g, include_pad);
    else
        pool_kernel<T, false><<<blocks, THREADS, 0, cu->stream>>>((const T *)x, (T *)y, total, g, include_pad);
    KILN_CUDA_LAUNCHED(ctx, "pool_kernel");
    return KILN_OK;
}

kiln_status pool(kiln_cuda *cu, kiln_op_ctx *c, bool is_max) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    kiln_cuda_window w;
    char why[256];
    if (!kiln_cuda_window_get(c, x, y, NULL, &w, why, sizeof why))
        return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "%s", why);
    PoolGeo g;
    for (int t = 0; t < 3; t++) {
        g.in[t] = g.out[t] = g.k[t] = g.s[t] = g.d[t] = 1;
        g.pb[t] = g.pe[t] = 0;
    }
    for (int i = 0; i < w.nd; i++) {
        const int t = 3 - w.nd + i;
        g.in[t] = w.in[i];
        g.out[t] = w.out[i];
        g.k[t] = w.k[i];
        g.s[t] = w.s[i];
        g.d[t] = w.d[i];
        g.pb[t] = w.pb[i];
        g.pe[t] = w.pe[i];
    }
    const bool include_pad = !is_max && kiln_attr_int(c->node, "count_include_pad", 0) != 0;
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_pool, cu, c->kctx, is_max, x->data,
                           y->data, kiln_tensor_numel(y), g, include_pad);
    return st;
}

// x: (rows, S); y: (rows)
template <typename T> __global__ void gap_kernel(const T *x, T *y, int64_t rows, int64_t S) {
    __shared__ float scratch[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float sum = 0.f;
        for (int64_t j = threadIdx.x; j < S; j += blockDim.x) sum += to_f(x[r * S + j]);
        sum = block_reduce<false>(sum, scratch);
        if (threadIdx.x == 0) y[r] = from_f<T>(sum / (float)S);
    }
}

template <typename T>
kiln_status launch_gap(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t rows,
                       int64_t S) {
    if (rows == 0) return KILN_OK;
    int threads = 32;
    while (threads < THREADS && threads < S) threads *= 2;
    const int64_t blocks = rows < 65535 ? rows : 65535;
    gap_kernel<T><<<(unsigned)blocks, threads, 0, cu->stream>>>((const T *)x, (T *)y, rows, S);
    KILN_CUDA_LAUNCHED(ctx, "gap_kernel");
    return KILN_OK;
}

} // namespace

extern "C" kiln_status kiln_cuda_k_maxpool(kiln_cuda *cu, kiln_op_ctx *c) { return pool(cu, c, true); }

extern "C" kiln_status kiln_cuda_k_avgpool(kiln_cuda *cu, kiln_op_ctx *c) { return pool(cu, c, false); }

extern "C" kiln_status kiln_cuda_k_gap(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0]; // (N, C, spatial...)
    int64_t S = 1;
    for (int d = 2; d < x->ndim; d++) S *= x->dims[d];
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_gap, cu, c->kctx, x->data, c->out[0]->data,
                           x->dims[0] * x->dims[1], S);
    return st;
}
