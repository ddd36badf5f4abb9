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

template <typename T>
kiln_status launch_layernorm(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t rows, int64_t D,
                             const LnParams &p) {
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
