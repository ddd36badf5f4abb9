/*
 * act.cuh — the activations of the fused kernels' epilogues (kiln.FusedConv's in
 * conv_depthwise.cu and conv_pointwise.cu, and elementwise.cu's epilogue pass after cuDNN /
 * cuBLASLt), as elementwise.cu's unary ops of the same names compute them, with one dispatch
 * per thread rather than a switch per value.
 */
#ifndef KILN_CUDA_ACT_CUH
#define KILN_CUDA_ACT_CUH

#include "cuda_internal.h"

#include <math.h>

namespace kiln_act {

/* The activation and its parameters (kiln_cuda_act: LeakyRelu's alpha in a, Clip's bounds
 * in a and b, HardSigmoid's alpha and beta in a and b). */
struct Epi {
    int act;
    float a, b;
};

/* 2^x and 1 / x on the special-function unit, one instruction each: the approximate forms
 * (relative error ~2^-22, subnormals flushed), where the library's __expf and __frcp_rn add a
 * range test, a rescale and a Newton step with a slow path (~17 instructions a SiLU value on
 * sm_90's SASS against 5 here; bench/NOTES.md "z35"). */
__device__ __forceinline__ float ex2_approx(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float rcp_approx(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

/* 1 / (1 + e^-v) on those two: the FAST Sigmoid, and SiLU's v * it. */
__device__ __forceinline__ float sigmoid_approx(float v) {
    return rcp_approx(1.f + ex2_approx(v * -1.4426950408889634f));
}

/* Activation ACT (a KILN_ACT_*) of v, as elementwise.cu's unary_op of the same activation
 * (the epilogue kernel's). FAST (16-bit outputs: a few ulp of f32, far inside the f16 / bf16
 * rounding, with the same infinities and NaNs): Sigmoid and SiLU as 1 / (1 + 2^(-v log2 e))
 * on the approximate unit ops instead of IEEE divisions on a branch, GeluTanh as v times the
 * sigmoid of its 2u; HardSwish's v / 6 as a multiply-add, clamped by the saturating add
 * (NaN -> 0, so v * 0 is NaN as before). */
template <int ACT, bool FAST> __device__ __forceinline__ float act_of(float v, const Epi &e) {
    if constexpr (ACT == KILN_ACT_RELU) return v > 0.f ? v : 0.f;
    else if constexpr (ACT == KILN_ACT_LEAKYRELU) return v < 0.f ? e.a * v : v;
    else if constexpr (ACT == KILN_ACT_CLIP) {
        const float t = v < e.a ? e.a : v; /* in this order, so min > max gives max */
        return t > e.b ? e.b : t;
    } else if constexpr (ACT == KILN_ACT_SIGMOID) {
        if constexpr (FAST) return sigmoid_approx(v);
        if (v >= 0.f) return 1.f / (1.f + expf(-v));
        const float x = expf(v);
        return x / (1.f + x);
    } else if constexpr (ACT == KILN_ACT_HARDSWISH) {
        if constexpr (FAST) return v * __saturatef(fmaf(v, 1.f / 6.f, 0.5f));
        const float t = v / 6.f + 0.5f;
        return v * (t < 0.f ? 0.f : t > 1.f ? 1.f : t);
    } else if constexpr (ACT == KILN_ACT_HARDSIGMOID) {
        const float t = e.a * v + e.b;
        return t < 0.f ? 0.f : t > 1.f ? 1.f : t; /* NaN stays NaN */
    } else if constexpr (ACT == KILN_ACT_TANH) return tanhf(v);
    else if constexpr (ACT == KILN_ACT_SILU) {
        if constexpr (FAST) return v * sigmoid_approx(v);
        else return v >= 0.f ? v / (1.f + expf(-v)) : v * expf(v) / (1.f + expf(v));
    } else if constexpr (ACT == KILN_ACT_GELU)
        return isinf(v) ? (v > 0.f ? v : 0.f) : 0.5f * v * erfcf(-v * 0.70710678118654752440f);
    else if constexpr (ACT == KILN_ACT_GELU_TANH) {
        if (isinf(v)) return v > 0.f ? v : 0.f;
        const float u2 = 2.f * 0.79788456080286535588f * (v + 0.044715f * v * v * v);
        if constexpr (FAST) return v * sigmoid_approx(u2); /* 0.5 (1 + tanh u) = sigmoid(2u) */
        if (u2 >= 0.f) return v / (1.f + expf(-u2));
        const float x = expf(u2);
        return v * x / (1.f + x);
    } else return v;
}

/* f.template operator()<ACT>() for act (f a functor): one dispatch, so that
 * a caller's loop over many values runs one activation's code (a switch per value compiled to
 * an indirect branch per value: 128 of them in the tiled kernel's epilogue). */
template <typename F> __device__ __forceinline__ void act_dispatch(int act, F &&f) {
    switch (act) {
    case KILN_ACT_RELU: f.template operator()<KILN_ACT_RELU>(); break;
    case KILN_ACT_LEAKYRELU: f.template operator()<KILN_ACT_LEAKYRELU>(); break;
    case KILN_ACT_CLIP: f.template operator()<KILN_ACT_CLIP>(); break;
    case KILN_ACT_SIGMOID: f.template operator()<KILN_ACT_SIGMOID>(); break;
    case KILN_ACT_HARDSWISH: f.template operator()<KILN_ACT_HARDSWISH>(); break;
    case KILN_ACT_HARDSIGMOID: f.template operator()<KILN_ACT_HARDSIGMOID>(); break;
    case KILN_ACT_TANH: f.template operator()<KILN_ACT_TANH>(); break;
    case KILN_ACT_SILU: f.template operator()<KILN_ACT_SILU>(); break;
    case KILN_ACT_GELU: f.template operator()<KILN_ACT_GELU>(); break;
    case KILN_ACT_GELU_TANH: f.template operator()<KILN_ACT_GELU_TANH>(); break;
    default: f.template operator()<KILN_ACT_NONE>(); break;
    }
}

/* One value's activation, dispatched at run time (the kernels with one value a thread). */
struct ActOne {
    float &r;
    const Epi &e;
    template <int A> __device__ __forceinline__ void operator()() const { r = act_of<A, false>(r, e); }
};
__device__ __forceinline__ float act_apply(float v, const Epi &e) {
    float r = v;
    act_dispatch(e.act, ActOne{r, e});
    return r;
}

} // namespace kiln_act

#endif
