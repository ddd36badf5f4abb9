/*
 * layernorm.cu — LayerNormalization (opset 17) for X in f32, f16 and bf16: X seen as rows
 * (prod(dims[:axis]), D = prod(dims[axis:])), each normalized by its own mean and
 * population variance, Y = (X - mean) / sqrt(var + epsilon) * Scale + B, as
 * src/ops/layer_normalization.c computes it but with the statistics in float (two passes
 * over the row: the mean, then the squared deviations from it). One block per row.
 *
 * Scale and the optional B may have any float dtype (f64 included) and must be the same
 * for every row: either D elements (the row's shape, leading 1s allowed) or one element;
 * kiln_cuda_supports rejects parameters that vary across rows. The optional outputs Mean
 * and InvStdDev (shaped dims[:axis] + 1s) are written when present, in f32 (stash_type 1).
 *
 * Short rows (D a multiple of the 16-byte vector's V elements, D / V <= 128, X and Y
 * 16-byte aligned: ConvNeXt's D = 96..768 channels of its channels-last feature maps,
 * transformers' 384..1024) take layernorm_short: a group of LPR lanes of a warp per row
 * (LPR a power of two, 1..32, the smallest with at most 4 vectors a lane), the row held in
 * registers (read once, written once), mean and variance by shuffles within the group,
 * Scale and B converted to float once per block into shared memory. One block row per
 * THREADS / LPR rows: convnext_tiny's [256,56,56,96] f16 is 802,816 rows of 12 vectors,
 * 4 lanes each. Longer or unaligned rows: layernorm_rows, a block per row.
 *
 * Short rows take layernorm_pipe instead (kiln_cuda.ln_pipe; KILN_CUDA_LN_PIPE=0 keeps
 * layernorm_short): resident blocks, the next turn's rows loaded while the current ones are
 * reduced. On an H200 (bench/NOTES.md "z37 results") it took vit_b_16's 25 LayerNorms of
 * 50,432 x 768 f16 from 1.95 to 1.72 ms and swin_v2_s's whole run from 24.31 to 24.14 ms:
 * less than predicted, both kernels are still ~2 TB/s at D 768.
 */
#include "dtype.cuh"
#include "reduce.cuh"

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

struct LnParams {
    const void *scale, *bias;      /* bias NULL: 0 */
    int dt_scale, dt_bias;
    int64_t step_scale, step_bias; /* 1: one value per row element; 0: one value */
    float eps;
    float *mean, *inv_std;         /* (rows) or NULL */
};

// x, y: (rows, D)
template <typename T> __global__ void layernorm_rows(const T *x, T *y, int64_t rows, int64_t D, LnParams p) {
    __shared__ float scratch[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * D;
        T *yr = y + r * D;
        float s = 0.f;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) s += to_f(xr[j]);
        const float mean = block_reduce<false>(s, scratch) / (float)D;
        float q = 0.f;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            const float d = to_f(xr[j]) - mean;
            q += d * d;
        }
        const float var = block_reduce<false>(q, scratch) / (float)D;
        const float inv = 1.f / sqrtf(var + p.eps);
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            const float sc = (float)load_any(p.scale, p.dt_scale, j * p.step_scale);
            const float b = p.bias ? (float)load_any(p.bias, p.dt_bias, j * p.step_bias) : 0.f;
            yr[j] = from_f<T>((to_f(xr[j]) - mean) * inv * sc + b);
        }
        if (threadIdx.x == 0) {
            if (p.mean) p.mean[r] = mean;
            if (p.inv_std) p.inv_std[r] = inv;
        }
    }
}

/* Row r of Y from its lane's vectors (element e of vector k as get(k, e), a float), the row's
 * mean and 1 / std, Scale and B in sp (2, D); and the row's mean and inv_std where asked:
 * what layernorm_short and layernorm_pipe write once a row is reduced. */
template <typename T, int NV, typename Get>
__device__ __forceinline__ void store_row(T *__restrict__ y, int64_t r, int D, int Q, int lane, int lpr, float mean,
                                          float inv, const float *sp, const LnParams &p, Get get) {
    using V = typename VecOf<T>::type;
    constexpr int VN = VecOf<T>::N;
    V *yr = reinterpret_cast<V *>(y + r * (int64_t)D);
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int q = lane + k * lpr;
        if (q >= Q) continue;
        V u;
#pragma unroll
        for (int e = 0; e < VN; e++) {
            const int j = q * VN + e;
            u.v[e] = from_f<T>((get(k, e) - mean) * inv * sp[j] + sp[D + j]);
        }
        yr[q] = u;
    }
    if (lane == 0) {
        if (p.mean) p.mean[r] = mean;
        if (p.inv_std) p.inv_std[r] = inv;
    }
}

/* Short rows: a group of lpr lanes (a power of two <= 32, groups aligned within a warp)
 * per row; lane l of a group holds vectors l, l + lpr, ... (< Q = D / V, at most NV) of
 * the row. sp: Scale then B as float, D each, in shared memory. Every lane of a block runs
 * the same number of loop turns (row_base is uniform), so the shuffles see whole warps. */
template <typename T, int NV>
__global__ void __launch_bounds__(THREADS)
    layernorm_short(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int D, int lpr, LnParams p) {
    using V = typename VecOf<T>::type;
    constexpr int VN = VecOf<T>::N;
    extern __shared__ float sp[]; /* (2, D) */
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        sp[j] = (float)load_any(p.scale, p.dt_scale, j * p.step_scale);
        sp[D + j] = p.bias ? (float)load_any(p.bias, p.dt_bias, j * p.step_bias) : 0.f;
    }
    __syncthreads();
    const int Q = D / VN, lane = threadIdx.x % lpr, group = threadIdx.x / lpr;
    const int groups = blockDim.x / lpr;
    const float inv_d = 1.f / (float)D;
    for (int64_t base = (int64_t)blockIdx.x * groups; base < rows; base += (int64_t)gridDim.x * groups) {
        const int64_t r = base + group;
        const bool live = r < rows;
        const V *xr = reinterpret_cast<const V *>(x + (live ? r : 0) * (int64_t)D);
        float v[NV][VN];
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int q = lane + k * lpr;
            if (live && q < Q) {
                const V u = xr[q];
#pragma unroll
                for (int e = 0; e < VN; e++) {
                    v[k][e] = to_f(u.v[e]);
                    s += v[k][e];
                }
            } else {
#pragma unroll
                for (int e = 0; e < VN; e++) v[k][e] = 0.f;
            }
        }
        for (int o = lpr / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
        const float mean = s * inv_d;
        float q2 = 0.f;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            if (!(live && lane + k * lpr < Q)) continue;
#pragma unroll
            for (int e = 0; e < VN; e++) {
                const float d = v[k][e] - mean;
                q2 += d * d;
            }
        }
        for (int o = lpr / 2; o > 0; o /= 2) q2 += __shfl_xor_sync(0xffffffffu, q2, o);
        const float inv = 1.f / sqrtf(q2 * inv_d + p.eps);
        if (!live) continue;
        store_row<T, NV>(y, r, D, Q, lane, lpr, mean, inv, sp, p, [&](int k, int e) { return v[k][e]; });
    }
}

/* Row r's vectors for lane `lane` of its group (zeros past Q, and for r >= rows). */
template <typename V, int NV>
__device__ __forceinline__ void load_row(V (&v)[NV], const V *__restrict__ x, int64_t r, int64_t rows, int Q, int lane,
                                         int lpr) {
    const bool live = r < rows;
    const V *xr = x + (live ? r : 0) * (int64_t)Q;
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int q = lane + k * lpr;
        if (live && q < Q) v[k] = xr[q];
        else *reinterpret_cast<uint4 *>(&v[k]) = make_uint4(0u, 0u, 0u, 0u); /* +0 in every float type */
    }
}

/* layernorm_short's rows, pipelined (KILN_CUDA_LN_PIPE=1; bench/NOTES.md z37). Its rows of
 * D = 384 / 768 ran at 2.3 / 1.5 TB/s: a block of 16 rows loaded and converted Scale and B,
 * waited at the barrier and only then loaded its one turn of rows, two latencies in a row.
 * Here a grid of resident blocks (3-4 a SM, launch_pipe) takes a row a group each turn; the
 * first turn's rows are loaded before Scale and B are staged, and each turn loads the next
 * turn's rows before it reduces the current ones. The rows stay in registers as their own
 * 16-byte vectors (4 NV registers a row, converted at each use). Same arithmetic as
 * layernorm_short: the sum, then the squared deviations from the mean, in float. */
/* Blocks of layernorm_pipe a SM: 4 (64 registers) but for 4 vectors a lane, whose two rows
 * of 16 registers spilled at 64 (dev/sass.sh: 60 bytes for half), 3 there. */
template <int NV> constexpr int pipe_blocks() { return NV == 4 ? 3 : 4; }

template <typename T, int NV>
__global__ void __launch_bounds__(THREADS, pipe_blocks<NV>())
    layernorm_pipe(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int D, int lpr, LnParams p) {
    using V = typename VecOf<T>::type;
    constexpr int VN = VecOf<T>::N;
    extern __shared__ float sp[]; /* (2, D) */
    const int Q = D / VN, lane = threadIdx.x % lpr, group = threadIdx.x / lpr;
    const int groups = blockDim.x / lpr;
    const int64_t step = (int64_t)gridDim.x * groups;
    const V *xv = reinterpret_cast<const V *>(x);
    V cur[NV], nxt[NV];
    load_row<V, NV>(cur, xv, (int64_t)blockIdx.x * groups + group, rows, Q, lane, lpr);
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        sp[j] = (float)load_any(p.scale, p.dt_scale, j * p.step_scale);
        sp[D + j] = p.bias ? (float)load_any(p.bias, p.dt_bias, j * p.step_bias) : 0.f;
    }
    __syncthreads();
    const float inv_d = 1.f / (float)D;
    /* base is the same for every thread of the block: whole warps reach the shuffles */
    for (int64_t base = (int64_t)blockIdx.x * groups; base < rows; base += step) {
        const int64_t r = base + group;
        load_row<V, NV>(nxt, xv, r + step, rows, Q, lane, lpr);
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < NV; k++)
#pragma unroll
            for (int e = 0; e < VN; e++) s += to_f(cur[k].v[e]); /* the zeros add nothing */
        for (int o = lpr / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
        const float mean = s * inv_d;
        float q2 = 0.f;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            if (lane + k * lpr >= Q) continue;
#pragma unroll
            for (int e = 0; e < VN; e++) {
                const float d = to_f(cur[k].v[e]) - mean;
                q2 += d * d;
            }
        }
        for (int o = lpr / 2; o > 0; o /= 2) q2 += __shfl_xor_sync(0xffffffffu, q2, o);
        const float inv = 1.f / sqrtf(q2 * inv_d + p.eps);
        if (r < rows)
            store_row<T, NV>(y, r, D, Q, lane, lpr, mean, inv, sp, p, [&](int k, int e) { return to_f(cur[k].v[e]); });
#pragma unroll
        for (int k = 0; k < NV; k++) cur[k] = nxt[k];
    }
}

template <typename T, int NV>
void launch_pipe(kiln_cuda *cu, const void *x, void *y, int64_t rows, int D, int lpr, const LnParams &p) {
    const int64_t groups = THREADS / lpr;
    int64_t blocks = (rows + groups - 1) / groups;
    const int64_t resident = (int64_t)cu->props.sm_count * pipe_blocks<NV>(); /* its __launch_bounds__ */
    const int64_t cap = cu->ln_pipe_grid > 0 ? cu->ln_pipe_grid : resident > 0 ? resident : 1;
    if (blocks > cap) blocks = cap;
    layernorm_pipe<T, NV><<<(unsigned)blocks, THREADS, 2 * (size_t)D * sizeof(float), cu->stream>>>(
        (const T *)x, (T *)y, rows, D, lpr, p);
}

template <typename T, int NV>
void launch_short(kiln_cuda *cu, const void *x, void *y, int64_t rows, int D, int lpr, const LnParams &p) {
    const unsigned blocks = kiln_cuda_blocks(cu, rows * lpr, THREADS); /* a row per group, capped */
    layernorm_short<T, NV><<<blocks, THREADS, 2 * (size_t)D * sizeof(float), cu->stream>>>(
        (const T *)x, (T *)y, rows, D, lpr, p);
}

/* Whether rows of D elements of T take layernorm_short, and its lanes per row and vectors
 * per lane. */
template <typename T> bool short_rows(int64_t D, const void *x, const void *y, int *lpr, int *nv) {
    constexpr int VN = VecOf<T>::N;
    if (D < VN || D % VN != 0 || D / VN > 128 || !aligned16(x, y)) return false;
    const int Q = (int)(D / VN);
    int l = 1;
    while (l < 32 && l * 4 < Q) l *= 2;
    *lpr = l;
    *nv = (Q + l - 1) / l;
    return *nv >= 1 && *nv <= 4;
}

template <typename T>
kiln_status launch_layernorm(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t rows, int64_t D,
                             const LnParams &p) {
    int lpr = 0, nv = 0;
    if (cu->ln_pipe && short_rows<T>(D, x, y, &lpr, &nv)) {
        switch (nv) {
        case 1: launch_pipe<T, 1>(cu, x, y, rows, (int)D, lpr, p); break;
        case 2: launch_pipe<T, 2>(cu, x, y, rows, (int)D, lpr, p); break;
        case 3: launch_pipe<T, 3>(cu, x, y, rows, (int)D, lpr, p); break;
        default: launch_pipe<T, 4>(cu, x, y, rows, (int)D, lpr, p); break;
        }
        KILN_CUDA_LAUNCHED(ctx, "layernorm_pipe");
        return KILN_OK;
    }
    if (short_rows<T>(D, x, y, &lpr, &nv)) {
        switch (nv) {
        case 1: launch_short<T, 1>(cu, x, y, rows, (int)D, lpr, p); break;
        case 2: launch_short<T, 2>(cu, x, y, rows, (int)D, lpr, p); break;
        case 3: launch_short<T, 3>(cu, x, y, rows, (int)D, lpr, p); break;
        default: launch_short<T, 4>(cu, x, y, rows, (int)D, lpr, p); break;
        }
        KILN_CUDA_LAUNCHED(ctx, "layernorm_short");
        return KILN_OK;
    }
    int threads = 32;
    while (threads < THREADS && threads < D) threads *= 2;
    const unsigned blocks = (unsigned)(rows < 65535 ? rows : 65535);
    layernorm_rows<T><<<blocks, threads, 0, cu->stream>>>((const T *)x, (T *)y, rows, D, p);
    KILN_CUDA_LAUNCHED(ctx, "layernorm_rows");
    return KILN_OK;
}

} // namespace

extern "C" kiln_status kiln_cuda_k_layernorm(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    int64_t axis = kiln_attr_int(c->node, "axis", -1);
    if (!kiln_norm_axis(&axis, x->ndim))
        return kiln_fail(c->kctx, KILN_ERR_SHAPE, "axis %lld is out of range", (long long)axis);
    int64_t D = 1;
    for (int d = (int)axis; d < x->ndim; d++) D *= x->dims[d];
    const int64_t rows = D > 0 ? kiln_tensor_numel(x) / D : 0;
    if (rows == 0) return KILN_OK;
    const kiln_tensor *scale = c->in[1], *bias = c->n_in > 2 ? c->in[2] : NULL;
    LnParams p;
    p.scale = scale->data;
    p.dt_scale = scale->dtype;
    p.step_scale = kiln_tensor_numel(scale) == 1 ? 0 : 1;
    p.bias = bias ? bias->data : NULL;
    p.dt_bias = bias ? bias->dtype : KILN_F32;
    p.step_bias = bias && kiln_tensor_numel(bias) == 1 ? 0 : 1;
    p.eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
    p.mean = c->n_out > 1 && c->out[1] ? (float *)c->out[1]->data : NULL;
    p.inv_std = c->n_out > 2 && c->out[2] ? (float *)c->out[2]->data : NULL;
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_layernorm, cu, c->kctx, x->data, c->out[0]->data, rows, D,
                           p);
    return st;
}
