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
 *   NHWC (4-D X): pools read one channel per thread at each tap, neighbouring threads
 *   neighbouring channels; GlobalAveragePool sums 32 channels of an image per block, its
 *   rows splitting H*W, and writes Y (N, C, 1, 1), the same bytes in either layout.
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

/* The window of output coordinate o along slot t: its first input coordinate, the taps j
 * with 0 <= start + j*d < in as [lo, hi), and how many taps fall inside the padded input
 * [-pad_begin, in + pad_end) (AveragePool's count_include_pad divisor). */
__device__ __forceinline__ int64_t window(const PoolGeo &g, int t, int64_t o, int64_t *start, int64_t *lo,
                                          int64_t *hi) {
    *start = o * g.s[t] - g.pb[t];
    int64_t inside_pad = 0;
    for (int64_t j = 0; j < g.k[t]; j++) {
        const int64_t p = *start + j * g.d[t];
        if (p >= -g.pb[t] && p < g.in[t] + g.pe[t]) inside_pad++;
    }
    const int64_t a = *start >= 0 ? 0 : (-*start + g.d[t] - 1) / g.d[t];
    int64_t b = g.in[t] - *start <= 0 ? 0 : (g.in[t] - *start + g.d[t] - 1) / g.d[t];
    if (b > g.k[t]) b = g.k[t];
    *lo = a;
    *hi = b > a ? b : a;
    return inside_pad;
}

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
        int64_t start[3], lo[3], hi[3], padded = 1;
        for (int t = 0; t < 3; t++) padded *= window(g, t, o[t], &start[t], &lo[t], &hi[t]);
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

// x: (N, H, W, C), y: (N, OH, OW, C); 2-D windows in slots 1 and 2. Neighbouring threads
// take neighbouring channels of one output position: every tap is a coalesced read.
template <typename T, bool MAX>
__global__ void pool_nhwc_kernel(const T *x, T *y, int64_t total, int64_t C, PoolGeo g, bool include_pad) {
    for (int64_t i = thread_index(); i < total; i += grid_stride()) {
        const int64_t c = i % C;
        int64_t r = i / C;
        const int64_t ow = r % g.out[2];
        r /= g.out[2];
        const int64_t oh = r % g.out[1], n = r / g.out[1];
        int64_t sh, lh, hh, sw, lw, hw;
        const int64_t padded = window(g, 1, oh, &sh, &lh, &hh) * window(g, 2, ow, &sw, &lw, &hw);
        const T *xp = x + n * g.in[1] * g.in[2] * C + c;
        float acc = MAX ? -INFINITY : 0.f;
        for (int64_t j1 = lh; j1 < hh; j1++) {
            const T *row = xp + (sh + j1 * g.d[1]) * g.in[2] * C;
            for (int64_t j2 = lw; j2 < hw; j2++) {
                const float v = to_f(row[(sw + j2 * g.d[2]) * C]);
                if constexpr (MAX) acc = nan_max(acc, v);
                else acc += v;
            }
        }
        if constexpr (MAX) y[i] = from_f<T>(acc);
        else y[i] = from_f<T>(acc / (float)(include_pad ? padded : (hh - lh) * (hw - lw)));
    }
}

template <typename T>
kiln_status launch_pool(kiln_cuda *cu, kiln_context *ctx, bool is_max, const void *x, void *y,
                        int64_t total, PoolGeo g, bool include_pad, int64_t nhwc_c) {
    if (total == 0) return KILN_OK;
    const unsigned blocks = kiln_cuda_blocks(cu, total, THREADS);
    const T *xt = (const T *)x;
    T *yt = (T *)y;
    if (nhwc_c && is_max)
        pool_nhwc_kernel<T, true><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, total, nhwc_c, g, include_pad);
    else if (nhwc_c)
        pool_nhwc_kernel<T, false><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, total, nhwc_c, g, include_pad);
    else if (is_max)
        pool_kernel<T, true><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, total, g, include_pad);
    else
        pool_kernel<T, false><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, total, g, include_pad);
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
    /* an NHWC X is 4-D: its two spatial dims are in slots 1 and 2 */
    const int64_t nhwc_c = x->ndim == 4 && x->format == KILN_FORMAT_NHWC ? x->dims[1] : 0;
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_pool, cu, c->kctx, is_max, x->data,
                           y->data, kiln_tensor_numel(y), g, include_pad, nhwc_c);
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

// x: (N, S, C); y: (N, C). A block sums 32 neighbouring channels of one image: its
// threadIdx.x walks channels (coalesced) and its rows split S, summed in shared memory.
constexpr int GAP_ROWS = 8;

template <typename T> __global__ void gap_nhwc_kernel(const T *x, T *y, int64_t N, int64_t S, int64_t C) {
    __shared__ float part[GAP_ROWS][33];
    const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
        float sum = 0.f;
        if (c < C)
            for (int64_t s = threadIdx.y; s < S; s += GAP_ROWS) sum += to_f(x[(n * S + s) * C + c]);
        part[threadIdx.y][threadIdx.x] = sum;
        __syncthreads();
        if (threadIdx.y == 0 && c < C) {
            float total = 0.f;
#pragma unroll
            for (int r = 0; r < GAP_ROWS; r++) total += part[r][threadIdx.x];
            y[n * C + c] = from_f<T>(total / (float)S);
        }
        __syncthreads();
    }
}

template <typename T>
kiln_status launch_gap_nhwc(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t N, int64_t S,
                            int64_t C) {
    if (N * C == 0) return KILN_OK;
    const int64_t gx = (C + 31) / 32, gy = N < 65535 ? N : 65535;
    if (gx > 0x7fffffff) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%lld channels", (long long)C);
    gap_nhwc_kernel<T><<<dim3((unsigned)gx, (unsigned)gy), dim3(32, GAP_ROWS), 0, cu->stream>>>(
        (const T *)x, (T *)y, N, S, C);
    KILN_CUDA_LAUNCHED(ctx, "gap_nhwc_kernel");
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
    /* Y (N, C, 1, 1) has the same bytes in either layout */
    if (x->ndim == 4 && x->format == KILN_FORMAT_NHWC)
        KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_gap_nhwc, cu, c->kctx, x->data, c->out[0]->data,
                               x->dims[0], S, x->dims[1]);
    else
        KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_gap, cu, c->kctx, x->data, c->out[0]->data,
                               x->dims[0] * x->dims[1], S);
    return st;
}
