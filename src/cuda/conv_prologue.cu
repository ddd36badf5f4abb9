/*
 * conv_prologue.cu — the fallback of a convolution's prologue (issue 12; kiln.FusedConv's
 * input 4, kiln.ConvGradWeight's input 3, made by the conv-bn-prologue pass): X' = act(a * X
 * + k) per input channel (P, f32 (2, C): a; k), act Relu (NaN to 0) or the identity, written
 * in X's dtype and layout into the node's workspace, which the convolution then reads
 * instead of X (conv_stats.c). Always correct (cuDNN's zero padding applies to X', as the
 * unfused graph pads the BN's output), no gain: X' is written and read once more. Rounds X'
 * to X's dtype (f16 / bf16) where the CPU reference and cuDNN's virtual prologue do not: the
 * result is then the unfused graph's (BN output rounded), within one rounding of the op's
 * contract. The cuDNN graph (cudnn_graph.c, patterns c and f of bench/cudnn_fusion_probe.c)
 * replaces it where it has an engine; its a and k are X's 16-bit dtype (cuDNN 9 on sm_90
 * has engines for that, none for f32 ones), made from P by prologue_p16 each run.
 */
#include "dtype.cuh"

using namespace kiln_cu;

namespace {

template <typename T, bool RELU, bool NHWC>
__global__ void prologue_apply(const T *x, T *out, const float *p, int64_t n, int64_t C, int64_t S) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        const int64_t c = NHWC ? i % C : (i / S) % C;
        float v = __fmaf_rn(p[c], to_f(x[i]), p[C + c]);
        if (RELU) v = v > 0.f ? v : 0.f;
        out[i] = from_f<T>(v);
    }
}

template <typename T>
kiln_status launch(kiln_cuda *cu, kiln_context *ctx, const void *x, void *out, const float *p, int64_t n, int64_t C,
                   int64_t S, bool relu, bool nhwc) {
    const int threads = 256;
    const int64_t want = (n + threads - 1) / threads;
    const unsigned blocks = (unsigned)(want < 65535 * 8 ? (want > 0 ? want : 1) : 65535 * 8);
    const T *xs = (const T *)x;
    T *o = (T *)out;
    if (relu && nhwc) prologue_apply<T, true, true><<<blocks, threads, 0, cu->stream>>>(xs, o, p, n, C, S);
    else if (relu) prologue_apply<T, true, false><<<blocks, threads, 0, cu->stream>>>(xs, o, p, n, C, S);
    else if (nhwc) prologue_apply<T, false, true><<<blocks, threads, 0, cu->stream>>>(xs, o, p, n, C, S);
    else prologue_apply<T, false, false><<<blocks, threads, 0, cu->stream>>>(xs, o, p, n, C, S);
    KILN_CUDA_LAUNCHED(ctx, "prologue_apply");
    return KILN_OK;
}

template <typename T> __global__ void prologue_p16(const float *p, T *a, T *k, int64_t C) {
    for (int64_t c = thread_index(); c < C; c += grid_stride()) {
        a[c] = from_f<T>(p[c]);
        k[c] = from_f<T>(p[C + c]);
    }
}

template <typename T>
kiln_status launch_p16(kiln_cuda *cu, kiln_context *ctx, const float *p, int64_t C, void *a, void *k) {
    const int threads = 256;
    const unsigned blocks = (unsigned)((C + threads - 1) / threads < 1024 ? (C + threads - 1) / threads : 1024);
    prologue_p16<T><<<blocks > 0 ? blocks : 1, threads, 0, cu->stream>>>(p, (T *)a, (T *)k, C);
    KILN_CUDA_LAUNCHED(ctx, "prologue_p16");
    return KILN_OK;
}

} // namespace

extern "C" kiln_status kiln_cuda_conv_prologue_p16(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, const float *p,
                                                   int64_t C, void *a16, void *k16) {
    if (C <= 0) return KILN_OK;
    if (dt == KILN_F16) return launch_p16<__half>(cu, ctx, p, C, a16, k16);
    if (dt == KILN_BF16) return launch_p16<__nv_bfloat16>(cu, ctx, p, C, a16, k16);
    return kiln_fail(ctx, KILN_ERR_INTERNAL, "prologue scale and bias: %s is not a 16-bit dtype", kiln_dtype_name(dt));
}

extern "C" kiln_status kiln_cuda_conv_prologue_apply(kiln_cuda *cu, kiln_context *ctx, const kiln_tensor *x,
                                                     const float *p, bool relu, void *out) {
    const int64_t n = kiln_tensor_numel(x);
    if (n == 0) return KILN_OK;
    const int64_t N = x->dims[0], C = x->dims[1], S = N * C > 0 ? n / (N * C) : 0;
    const bool nhwc = x->ndim == 4 && x->format == KILN_FORMAT_NHWC;
    kiln_status st = KILN_OK;
    KILN_CU_FLOAT_DISPATCH(st, ctx, x->dtype, launch, cu, ctx, x->data, out, p, n, C, S, relu, nhwc);
    return st;
}
