/*
 * elementwise.cu — elementwise CUDA kernels for f32, f16 and bf16.
 *
 *   Unary family (one templated kernel, op chosen at compile time): Relu LeakyRelu
 *   Sigmoid Tanh Elu Selu Celu Gelu HardSigmoid HardSwish Softplus Softsign Clip Erf Exp
 *   Log Sqrt Reciprocal Abs Neg Floor Ceil, and the forward-only Sin Cos Tan Asin Acos
 *   Atan Sinh Cosh Asinh Acosh Atanh Round Sign ThresholdedRelu Shrink (floats only:
 *   integer Sign stays on the CPU). Attributes and their defaults are read exactly as the
 *   CPU op files do; Clip's bounds (opset 11+) are inputs read on the
 *   device, or the min/max attributes before opset 11. Values are computed in float with
 *   the same numerically careful forms as the CPU reference (expm1 for Elu/Selu/Celu,
 *   erfc for Gelu, exp of non-positive arguments only for Sigmoid/Softplus).
 *   16-byte vector loads and stores when the pointers are aligned.
 *
 *   Binary ops with numpy broadcasting: Add Sub Mul Div Pow, and Max Min Sum with 1..N inputs
 *   (folded pairwise into the output, as the CPU reference does). NaN propagates through
 *   Max/Min like numpy's maximum/minimum. The broadcast is planned on the host
 *   (kiln_cuda_bcast_init) and takes one of three kernels: flat (same shape, or one side a
 *   scalar; vectorized when both sides are full and aligned), per-channel (one side
 *   contiguous, the other indexed by (i / inner) % C, e.g. (N,C,H,W) + (C,1,1)), per pixel
 *   and channel (an NHWC (N,C,H,W) times an (N,C,1,1) squeeze-and-excitation gate: the
 *   gate indexed by (n, c), 16-byte vectors of x, gate and y where C allows), or general
 *   (index arithmetic over up to 8 merged dims).
 *
 *   Sum (1..N inputs) is Add folded the same way (rounded after each addition, as the
 *   reference).
 *
 *   NHWC: unary ops are indifferent to layout. A binary op whose output is 4-D NHWC walks
 *   the broadcast over the physical order (N, H, W, C): 4-D NHWC operands as laid out,
 *   the others (whose bytes are the same in both layouts: C == 1 or H*W == 1 once right-
 *   aligned to 4-D, as kiln_cuda_supports checks) with their dims permuted the same way.
 *   A per-channel operand then has stride 1 along the innermost dim, which the
 *   per-channel kernel takes with inner = 1.
 *
 *   kiln.UnaryGrad(dY, X?, Y?) with attribute op naming a unary op above (and that op's
 *   attributes): dX = dY * f'(x, y), computed in float from the forward's X or Y (which
 *   ever the op's derivative reads, as src/ops/<op>.c declares), with dX = 0 wherever
 *   f' is 0 even for an infinite or NaN dY, as the reference (src/ops/unary.c). One
 *   templated kernel, the derivative chosen at compile time.
 *
 *   Helpers for other files: per-channel bias add (Conv), kiln.FusedConv's epilogue
 *   y = act(y + bias + z) (either layout), 2-D broadcast (Gemm's C), and the activation of
 *   a fused op applied in place (kiln.FusedGemm's epilogue when cuBLASLt's own epilogues
 *   do not apply), both through act.cuh's activations as the fused kernels compute them.
 */
#include "act.cuh"
#include "dtype.cuh"

#include <math.h>
#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

/* ------------------------------------------------------------------ unary ops */

#define UNARY_OPS(X)                                                                      \
    X(RELU, "Relu") X(LEAKYRELU, "LeakyRelu") X(SIGMOID, "Sigmoid") X(TANH, "Tanh")       \
    X(ELU, "Elu") X(SELU, "Selu") X(CELU, "Celu") X(GELU, "Gelu")                         \
    X(HARDSIGMOID, "HardSigmoid") X(HARDSWISH, "HardSwish") X(SOFTPLUS, "Softplus")       \
    X(SOFTSIGN, "Softsign") X(CLIP, "Clip") X(ERF, "Erf") X(EXP, "Exp") X(LOG, "Log")     \
    X(SQRT, "Sqrt") X(RECIPROCAL, "Reciprocal") X(ABS, "Abs") X(NEG, "Neg")              \
    X(FLOOR, "Floor") X(CEIL, "Ceil")

/* Forward-only unary ops (no kiln.UnaryGrad kernel: their CPU ops have no gradient). */
#define UNARY_FWD_OPS(X)                                                                  \
    X(SIN, "Sin") X(COS, "Cos") X(TAN, "Tan") X(ASIN, "Asin") X(ACOS, "Acos")             \
    X(ATAN, "Atan") X(SINH, "Sinh") X(COSH, "Cosh") X(ASINH, "Asinh") X(ACOSH, "Acosh")   \
    X(ATANH, "Atanh") X(ROUND, "Round") X(SIGN, "Sign")                                   \
    X(THRESHOLDEDRELU, "ThresholdedRelu") X(SHRINK, "Shrink")

enum UnaryOp {
#define X(sym, name) U_##sym,
    UNARY_OPS(X)
    UNARY_FWD_OPS(X)
#undef X
    U_GELU_TANH, /* Gelu with approximate="tanh" */
    U_COUNT
};

/* Per-call constants: attributes (a, b, g) and Clip's optional device-side bounds. */
struct UnaryParams {
    float a, b, g;
    const void *lo, *hi;
};

constexpr float SQRT1_2 = 0.70710678118654752440f;  /* 1/sqrt(2) */
constexpr float SQRT_2_PI = 0.79788456080286535588f; /* sqrt(2/pi) */

template <int OP> __device__ __forceinline__ float unary_op(float x, float a, float b, float g) {
    if constexpr (OP == U_RELU) return x > 0.f ? x : 0.f;
    else if constexpr (OP == U_LEAKYRELU) return x < 0.f ? a * x : x;
    else if constexpr (OP == U_SIGMOID) {
        if (x >= 0.f) return 1.f / (1.f + expf(-x));
        float e = expf(x);
        return e / (1.f + e);
    } else if constexpr (OP == U_TANH) return tanhf(x);
    else if constexpr (OP == U_ELU) return x < 0.f ? a * expm1f(x) : x;
    else if constexpr (OP == U_SELU) return x > 0.f ? g * x : g * a * expm1f(x);
    else if constexpr (OP == U_CELU) return x > 0.f ? x : a * expm1f(x / a);
    else if constexpr (OP == U_GELU) {
        if (isinf(x)) return x > 0.f ? x : 0.f;
        return 0.5f * x * erfcf(-x * SQRT1_2);
    } else if constexpr (OP == U_GELU_TANH) {
        if (isinf(x)) return x > 0.f ? x : 0.f;
        float u2 = 2.f * SQRT_2_PI * (x + 0.044715f * x * x * x);
        if (u2 >= 0.f) return x / (1.f + expf(-u2));
        float e = expf(u2);
        return x * e / (1.f + e);
    } else if constexpr (OP == U_HARDSIGMOID) {
        float v = a * x + b;
        return v < 0.f ? 0.f : v > 1.f ? 1.f : v; /* NaN stays NaN */
    } else if constexpr (OP == U_HARDSWISH) {
        float v = x / 6.f + 0.5f;
        return x * (v < 0.f ? 0.f : v > 1.f ? 1.f : v);
    } else if constexpr (OP == U_SOFTPLUS) return x > 0.f ? x + log1pf(expf(-x)) : log1pf(expf(x));
    else if constexpr (OP == U_SOFTSIGN) return isinf(x) ? copysignf(1.f, x) : x / (1.f + fabsf(x));
    else if constexpr (OP == U_CLIP) {
        float v = x < a ? a : x; /* in this order, so min > max gives max */
        return v > b ? b : v;
    } else if constexpr (OP == U_ERF) return erff(x);
    else if constexpr (OP == U_EXP) return expf(x);
    else if constexpr (OP == U_LOG) return logf(x);
    else if constexpr (OP == U_SQRT) return sqrtf(x);
    else if constexpr (OP == U_RECIPROCAL) return 1.f / x;
    else if constexpr (OP == U_ABS) return fabsf(x);
    else if constexpr (OP == U_NEG) return -x;
    else if constexpr (OP == U_FLOOR) return floorf(x);
    else if constexpr (OP == U_CEIL) return ceilf(x);
    else if constexpr (OP == U_SIN) return sinf(x);
    else if constexpr (OP == U_COS) return cosf(x);
    else if constexpr (OP == U_TAN) return tanf(x);
    else if constexpr (OP == U_ASIN) return asinf(x);
    else if constexpr (OP == U_ACOS) return acosf(x);
    else if constexpr (OP == U_ATAN) return atanf(x);
    else if constexpr (OP == U_SINH) return sinhf(x);
    else if constexpr (OP == U_COSH) return coshf(x);
    else if constexpr (OP == U_ASINH) return asinhf(x);
    else if constexpr (OP == U_ACOSH) return acoshf(x);
    else if constexpr (OP == U_ATANH) return atanhf(x);
    else if constexpr (OP == U_ROUND) return rintf(x); /* halves to even */
    else if constexpr (OP == U_SIGN) return x > 0.f ? 1.f : x < 0.f ? -1.f : x; /* NaN stays NaN */
    else if constexpr (OP == U_THRESHOLDEDRELU) return x > a ? x : 0.f;
    else if constexpr (OP == U_SHRINK) return x < -a ? x + b : x > a ? x - b : 0.f;
    else return x;
}

// x, y: (n)
template <typename T, int OP>
__global__ void unary_kernel(const T *x, T *y, int64_t n, UnaryParams p, bool vec) {
    float a = p.a, b = p.b, g = p.g;
    if constexpr (OP == U_CLIP) {
        if (p.lo) a = to_f(*(const T *)p.lo);
        if (p.hi) b = to_f(*(const T *)p.hi);
    }
    const int64_t stride = grid_stride();
    int64_t start = thread_index();
    if (vec) {
        using V = typename VecOf<T>::type;
        constexpr int N = VecOf<T>::N;
        const int64_t nv = n / N;
        const V *xv = (const V *)x;
        V *yv = (V *)y;
        for (int64_t i = start; i < nv; i += stride) {
            V u = xv[i];
#pragma unroll
            for (int k = 0; k < N; k++) u.v[k] = from_f<T>(unary_op<OP>(to_f(u.v[k]), a, b, g));
            yv[i] = u;
        }
        start += nv * N;
    }
    for (int64_t i = start; i < n; i += stride) y[i] = from_f<T>(unary_op<OP>(to_f(x[i]), a, b, g));
}

template <typename T>
kiln_status launch_unary(kiln_cuda *cu, kiln_context *ctx, int op, const void *x, void *y,
                         int64_t n, UnaryParams p) {
    if (n == 0) return KILN_OK;
    const bool vec = aligned16(x, y);
    const unsigned blocks = kiln_cuda_blocks(cu, vec ? n / VecOf<T>::N + 1 : n, THREADS);
    const T *xt = (const T *)x;
    T *yt = (T *)y;
    switch (op) {
#define X(sym, name)                                                                      \
    case U_##sym: unary_kernel<T, U_##sym><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, n, p, vec); break;
        UNARY_OPS(X)
        UNARY_FWD_OPS(X)
#undef X
    case U_GELU_TANH:
        unary_kernel<T, U_GELU_TANH><<<blocks, THREADS, 0, cu->stream>>>(xt, yt, n, p, vec);
        break;
    default: return kiln_fail(ctx, KILN_ERR_INTERNAL, "unary op %d has no CUDA kernel", op);
    }
    KILN_CUDA_LAUNCHED(ctx, "unary_kernel");
    return KILN_OK;
}

int unary_op_of(const char *name) {
#define X(sym, nm)                                                                        \
    if (strcmp(name, nm) == 0) return U_##sym;
    UNARY_OPS(X)
    UNARY_FWD_OPS(X)
#undef X
    return -1;
}

/* The attribute constants of unary op `op` (node: the forward node, or kiln.UnaryGrad,
 * which carries the forward's attributes), with the CPU reference's defaults. Gelu's
 * tanh form becomes U_GELU_TANH. */
UnaryParams unary_params(const kiln_node *node, int *op) {
    UnaryParams p = {0.f, 0.f, 0.f, nullptr, nullptr};
    switch (*op) {
    case U_LEAKYRELU: p.a = kiln_attr_float(node, "alpha", 0.01f); break;
    case U_ELU: p.a = kiln_attr_float(node, "alpha", 1.0f); break;
    case U_CELU: p.a = kiln_attr_float(node, "alpha", 1.0f); break;
    case U_SELU:
        p.a = kiln_attr_float(node, "alpha", 1.67326319217681884765625f);
        p.g = kiln_attr_float(node, "gamma", 1.05070102214813232421875f);
        break;
    case U_HARDSIGMOID:
        p.a = kiln_attr_float(node, "alpha", 0.2f);
        p.b = kiln_attr_float(node, "beta", 0.5f);
        break;
    case U_GELU:
        if (strcmp(kiln_attr_string(node, "approximate", "none"), "tanh") == 0) *op = U_GELU_TANH;
        break;
    case U_THRESHOLDEDRELU: p.a = kiln_attr_float(node, "alpha", 1.0f); break;
    case U_SHRINK:
        p.a = kiln_attr_float(node, "lambd", 0.5f);
        p.b = kiln_attr_float(node, "bias", 0.0f);
        break;
    default: break;
    }
    return p;
}

/* ------------------------------------------------------------ unary gradients */

constexpr float TWO_OVER_SQRT_PI = 1.12837916709551257390f;
constexpr float INV_SQRT_2PI = 0.39894228040143267794f;

__device__ __forceinline__ float sigmoid_f(float u) {
    if (u >= 0.f) return 1.f / (1.f + expf(-u));
    const float e = expf(u);
    return e / (1.f + e);
}

/* f'(x) where y = f(x), the formulas of the op files' deriv() */
template <int OP> __device__ __forceinline__ float unary_deriv(float x, float y, float a, float b, float g) {
    if constexpr (OP == U_RELU) return y > 0.f ? 1.f : 0.f;
    else if constexpr (OP == U_LEAKYRELU) return x < 0.f ? a : 1.f;
    else if constexpr (OP == U_SIGMOID) return y * (1.f - y);
    else if constexpr (OP == U_TANH) return 1.f - y * y;
    else if constexpr (OP == U_ELU) return x < 0.f ? a * expf(x) : 1.f;
    else if constexpr (OP == U_SELU) return x > 0.f ? g : g * a * expf(x);
    else if constexpr (OP == U_CELU) return x > 0.f ? 1.f : expf(x / a);
    else if constexpr (OP == U_GELU) {
        if (isinf(x)) return x > 0.f ? 1.f : 0.f;
        return 0.5f * erfcf(-x * SQRT1_2) + x * expf(-0.5f * x * x) * INV_SQRT_2PI;
    } else if constexpr (OP == U_GELU_TANH) {
        if (isinf(x)) return x > 0.f ? 1.f : 0.f;
        const float s = sigmoid_f(2.f * SQRT_2_PI * (x + 0.044715f * x * x * x));
        return s + x * s * (1.f - s) * 2.f * SQRT_2_PI * (1.f + 3.f * 0.044715f * x * x);
    } else if constexpr (OP == U_HARDSIGMOID) {
        const float v = a * x + b;
        return v > 0.f && v < 1.f ? a : 0.f;
    } else if constexpr (OP == U_HARDSWISH) return x <= -3.f ? 0.f : x >= 3.f ? 1.f : x / 3.f + 0.5f;
    else if constexpr (OP == U_SOFTPLUS) return sigmoid_f(x);
    else if constexpr (OP == U_SOFTSIGN) {
        const float d = 1.f + fabsf(x);
        return 1.f / (d * d);
    } else if constexpr (OP == U_CLIP) return (x == y || x != x) ? 1.f : 0.f;
    else if constexpr (OP == U_ERF) return TWO_OVER_SQRT_PI * expf(-x * x);
    else if constexpr (OP == U_EXP) return y;
    else if constexpr (OP == U_LOG) return 1.f / x;
    else if constexpr (OP == U_SQRT) return 0.5f / y;
    else if constexpr (OP == U_RECIPROCAL) return -y * y;
    else if constexpr (OP == U_ABS) return x > 0.f ? 1.f : x < 0.f ? -1.f : 0.f;
    else if constexpr (OP == U_NEG) return -1.f;
    else return 0.f; /* Floor, Ceil */
}

template <typename T, int OP>
__device__ __forceinline__ T unary_grad_one(T dy, T x, T y, float a, float b, float g) {
    const float d = unary_deriv<OP>(to_f(x), to_f(y), a, b, g);
    return from_f<T>(d == 0.f ? 0.f : d * to_f(dy));
}

// dy, dx: (n); x, y: (n) or NULL when the derivative does not read them
template <typename T, int OP>
__global__ void unary_grad_kernel(const T *dy, const T *x, const T *y, T *dx, int64_t n, UnaryParams p,
                                  bool vec) {
    const float a = p.a, b = p.b, g = p.g;
    const int64_t stride = grid_stride();
    int64_t start = thread_index();
    const T zero = from_f<T>(0.f);
    if (vec) {
        using V = typename VecOf<T>::type;
        constexpr int N = VecOf<T>::N;
        const int64_t nv = n / N;
        for (int64_t i = start; i < nv; i += stride) {
            V u = ((const V *)dy)[i], xv, yv;
            if (x) xv = ((const V *)x)[i];
            if (y) yv = ((const V *)y)[i];
#pragma unroll
            for (int k = 0; k < N; k++)
                u.v[k] = unary_grad_one<T, OP>(u.v[k], x ? xv.v[k] : zero, y ? yv.v[k] : zero, a, b, g);
            ((V *)dx)[i] = u;
        }
        start += nv * N;
    }
    for (int64_t i = start; i < n; i += stride)
        dx[i] = unary_grad_one<T, OP>(dy[i], x ? x[i] : zero, y ? y[i] : zero, a, b, g);
}

template <typename T>
kiln_status launch_unary_grad(kiln_cuda *cu, kiln_context *ctx, int op, const void *dy, const void *x,
                              const void *y, void *dx, int64_t n, UnaryParams p) {
    if (n == 0) return KILN_OK;
    const bool vec = aligned16(dy, dx) && aligned16(x, y);
    const unsigned blocks = kiln_cuda_blocks(cu, vec ? n / VecOf<T>::N + 1 : n, THREADS);
    const T *dyt = (const T *)dy, *xt = (const T *)x, *yt = (const T *)y;
    T *dxt = (T *)dx;
    switch (op) {
#define X(sym, name)                                                                      \
    case U_##sym:                                                                         \
        unary_grad_kernel<T, U_##sym><<<blocks, THREADS, 0, cu->stream>>>(dyt, xt, yt, dxt, n, p, vec); \
        break;
        UNARY_OPS(X)
#undef X
    case U_GELU_TANH:
        unary_grad_kernel<T, U_GELU_TANH><<<blocks, THREADS, 0, cu->stream>>>(dyt, xt, yt, dxt, n, p, vec);
        break;
    default: return kiln_fail(ctx, KILN_ERR_INTERNAL, "unary op %d has no CUDA derivative", op);
    }
    KILN_CUDA_LAUNCHED(ctx, "unary_grad_kernel");
    return KILN_OK;
}

/* ----------------------------------------------------------------- binary ops */

enum BinaryOp { B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MAX, B_MIN, B_MOD, B_MOD_FLOOR };

template <int OP> __device__ __forceinline__ float binary_op(float a, float b) {
    if constexpr (OP == B_ADD) return a + b;
    else if constexpr (OP == B_SUB) return a - b;
    else if constexpr (OP == B_MUL) return a * b;
    else if constexpr (OP == B_DIV) return a / b;
    else if constexpr (OP == B_POW) return powf(a, b);
    else if constexpr (OP == B_MAX) return (a > b || a != a) ? a : b;
    else if constexpr (OP == B_MOD) return fmodf(a, b); /* Mod fmod=1: A's sign */
    else if constexpr (OP == B_MOD_FLOOR) {             /* Mod fmod=0: B's sign (src/ops/mod.c) */
        const float r = fmodf(a, b);
        return r != 0.f && ((r < 0.f) != (b < 0.f)) ? r + b : r;
    } else return (a < b || a != a) ? a : b;
}

/* y[i] = op(a[i*sa], b[i*sb]), sa and sb 0 or 1. y may be a or b (in-place folding of
 * variadic Max/Min), so no __restrict__. */
template <typename T, int OP>
__global__ void binary_flat(const T *a, const T *b, T *y, int64_t n, int sa, int sb, bool vec) {
    const int64_t stride = grid_stride();
    int64_t start = thread_index();
    if (vec) { /* sa == sb == 1, all aligned */
        using V = typename VecOf<T>::type;
        constexpr int N = VecOf<T>::N;
        const int64_t nv = n / N;
        for (int64_t i = start; i < nv; i += stride) {
            V u = ((const V *)a)[i], w = ((const V *)b)[i];
#pragma unroll
            for (int k = 0; k < N; k++) u.v[k] = from_f<T>(binary_op<OP>(to_f(u.v[k]), to_f(w.v[k])));
            ((V *)y)[i] = u;
        }
        start += nv * N;
    }
    for (int64_t i = start; i < n; i += stride)
        y[i] = from_f<T>(binary_op<OP>(to_f(a[i * sa]), to_f(b[i * sb])));
}

/* One side (x) contiguous with the output, the other (v) one value per channel:
 * v[(i / inner) % C]. X_IS_A: x is the left operand. */
template <typename T, int OP, bool X_IS_A>
__global__ void binary_channel(const T *x, const T *v, T *y, int64_t n, int64_t inner, int64_t C) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        float xv = to_f(x[i]), vv = to_f(v[(i / inner) % C]);
        y[i] = from_f<T>(X_IS_A ? binary_op<OP>(xv, vv) : binary_op<OP>(vv, xv));
    }
}

/* x contiguous with the output, viewed as (N, P, C); v one value per (n, c): an NHWC map
 * times a squeeze-and-excitation gate (N, C, 1, 1). VEC: 16-byte accesses of x, v and y
 * (C a multiple of the vector, all aligned). I: the index type. */
template <typename T, int OP, bool X_IS_A, bool VEC, typename I>
__global__ void binary_pixel_channel(const T *x, const T *v, T *y, I n, I C, I per_n) {
    constexpr int N = VEC ? VecOf<T>::N : 1;
    const I nv = n / N;
    for (I j = (I)blockIdx.x * blockDim.x + threadIdx.x; j < nv; j += (I)gridDim.x * blockDim.x) {
        const I i = j * N, c = i % C, b = i / per_n;
        if constexpr (VEC) {
            using V = typename VecOf<T>::type;
            V u = ((const V *)x)[j];
            const V w = *(const V *)(v + (int64_t)b * C + c);
#pragma unroll
            for (int k = 0; k < N; k++) {
                const float xv = to_f(u.v[k]), vv = to_f(w.v[k]);
                u.v[k] = from_f<T>(X_IS_A ? binary_op<OP>(xv, vv) : binary_op<OP>(vv, xv));
            }
            ((V *)y)[j] = u;
        } else {
            const float xv = to_f(x[i]), vv = to_f(v[(int64_t)b * C + c]);
            y[i] = from_f<T>(X_IS_A ? binary_op<OP>(xv, vv) : binary_op<OP>(vv, xv));
        }
    }
}

template <typename T, int OP, bool X_IS_A>
void launch_pixel_channel(kiln_cuda *cu, const T *x, const T *v, T *y, int64_t n, int64_t C, int64_t per_n) {
    const bool vec = C % VecOf<T>::N == 0 && aligned16(x, v, y);
    const unsigned blocks = kiln_cuda_blocks(cu, vec ? n / VecOf<T>::N : n, THREADS);
    if (n < ((int64_t)1 << 31)) {
        if (vec)
            binary_pixel_channel<T, OP, X_IS_A, true, uint32_t><<<blocks, THREADS, 0, cu->stream>>>(
                x, v, y, (uint32_t)n, (uint32_t)C, (uint32_t)per_n);
        else
            binary_pixel_channel<T, OP, X_IS_A, false, uint32_t><<<blocks, THREADS, 0, cu->stream>>>(
                x, v, y, (uint32_t)n, (uint32_t)C, (uint32_t)per_n);
    } else {
        if (vec)
            binary_pixel_channel<T, OP, X_IS_A, true, int64_t><<<blocks, THREADS, 0, cu->stream>>>(x, v, y, n, C, per_n);
        else
            binary_pixel_channel<T, OP, X_IS_A, false, int64_t><<<blocks, THREADS, 0, cu->stream>>>(x, v, y, n, C, per_n);
    }
}

/* Is v (strides vs over the merged dims) one value per (n, c) of an (N, P, C) output? */
bool pixel_channel_pattern(const kiln_cuda_bcast &p, const int64_t *vs) {
    return p.nd == 3 && vs[0] == p.dims[2] && vs[1] == 0 && vs[2] == 1;
}

struct BcastArgs {
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    int64_t sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS];
};

template <typename T, int OP>
__global__ void binary_general(const T *a, const T *b, T *y, int64_t n, BcastArgs g) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        int64_t r = i, oa = 0, ob = 0;
        for (int d = g.nd - 1; d >= 0; d--) {
            const int64_t j = r % g.dims[d];
            r /= g.dims[d];
            oa += j * g.sa[d];
            ob += j * g.sb[d];
        }
        y[i] = from_f<T>(binary_op<OP>(to_f(a[oa]), to_f(b[ob])));
    }
}

/* Both operands contiguous along the output's last merged dim (stride 1 there), whose
 * length the vector divides, their outer strides multiples of it, all aligned: 16-byte
 * accesses, each operand's offset computed once a vector from the outer dims. Swin's
 * window mask f16[256,49,3,64,64] + f16[1,49,1,64,64] ran in binary_general at 485 GB/s
 * (bench/NOTES.md, the fourteenth session); a bias f16[288] over f16[12544,64,288] in
 * binary_channel. I: the index type. */
template <typename T, int OP, typename I>
__global__ void binary_inner(const T *a, const T *b, T *y, I nv, I inner, BcastArgs g) {
    using V = typename VecOf<T>::type;
    constexpr int N = VecOf<T>::N;
    for (I j = (I)blockIdx.x * blockDim.x + threadIdx.x; j < nv; j += (I)gridDim.x * blockDim.x) {
        const I i = j * N;
        I r = i / inner;
        const I col = i - r * inner;
        int64_t oa = col, ob = col;
        for (int d = g.nd - 2; d >= 0; d--) {
            const I k = r % (I)g.dims[d];
            r /= (I)g.dims[d];
            oa += (int64_t)k * g.sa[d];
            ob += (int64_t)k * g.sb[d];
        }
        V u = *(const V *)(a + oa);
        const V w = *(const V *)(b + ob);
#pragma unroll
        for (int k = 0; k < N; k++) u.v[k] = from_f<T>(binary_op<OP>(to_f(u.v[k]), to_f(w.v[k])));
        ((V *)y)[j] = u;
    }
}

/* Whether binary_inner takes p (operands at a, b, output at y). */
bool inner_vectorizable(const kiln_cuda_bcast &p, int N, const void *a, const void *b, const void *y) {
    if (p.nd < 2 || p.dims[p.nd - 1] % N != 0 || p.st[0][p.nd - 1] != 1 || p.st[1][p.nd - 1] != 1 || !aligned16(a, b, y))
        return false;
    for (int d = 0; d < p.nd - 1; d++)
        if (p.st[0][d] % N != 0 || p.st[1][d] % N != 0) return false;
    return true;
}

/* Is v (strides vs over the merged dims of b) one value per channel of a contiguous
 * operand? Sets inner and C. */
bool channel_pattern(const kiln_cuda_bcast &p, const int64_t *vs, int64_t *inner, int64_t *C) {
    if (p.nd == 2 && vs[0] == 1 && vs[1] == 0) {
        *C = p.dims[0];
        *inner = p.dims[1];
        return true;
    }
    if (p.nd == 2 && vs[0] == 0 && vs[1] == 1) {
        *C = p.dims[1];
        *inner = 1;
        return true;
    }
    if (p.nd == 3 && vs[0] == 0 && vs[1] == 1 && vs[2] == 0) {
        *C = p.dims[1];
        *inner = p.dims[2];
        return true;
    }
    return false;
}

/* The output is contiguous: operand k is too when its strides are the output's. */
bool contiguous(const kiln_cuda_bcast &p, int k) {
    int64_t s = 1;
    for (int d = p.nd - 1; d >= 0; d--) {
        if (p.st[k][d] != s) return false;
        s *= p.dims[d];
    }
    return true;
}

/* The broadcast kernels' dims and both operands' strides. */
BcastArgs bcast_args(const kiln_cuda_bcast &p) {
    BcastArgs g;
    memset(&g, 0, sizeof g);
    g.nd = p.nd;
    for (int d = 0; d < p.nd; d++) {
        g.dims[d] = p.dims[d];
        g.sa[d] = p.st[0][d];
        g.sb[d] = p.st[1][d];
    }
    return g;
}

template <typename T, int OP>
kiln_status launch_binary_op(kiln_cuda *cu, kiln_context *ctx, const kiln_tensor *a,
                             const kiln_tensor *b, kiln_tensor *y) {
    const kiln_tensor *in[2] = {a, b};
    kiln_cuda_bcast p;
    kiln_cuda_bcast_init(&p, y->ndim, y->dims, 2, in);
    const int64_t n = p.numel;
    if (n == 0) return KILN_OK;
    const T *ap = (const T *)a->data, *bp = (const T *)b->data;
    T *yp = (T *)y->data;
    int64_t inner = 1, C = 1;
    if (p.nd == 1) {
        const int sa = (int)p.st[0][0], sb = (int)p.st[1][0];
        const bool vec = sa == 1 && sb == 1 && aligned16(ap, bp, yp);
        const unsigned blocks = kiln_cuda_blocks(cu, vec ? n / VecOf<T>::N + 1 : n, THREADS);
        binary_flat<T, OP><<<blocks, THREADS, 0, cu->stream>>>(ap, bp, yp, n, sa, sb, vec);
        KILN_CUDA_LAUNCHED(ctx, "binary_flat");
    } else if (contiguous(p, 0) && pixel_channel_pattern(p, p.st[1])) {
        launch_pixel_channel<T, OP, true>(cu, ap, bp, yp, n, p.dims[2], p.dims[1] * p.dims[2]);
        KILN_CUDA_LAUNCHED(ctx, "binary_pixel_channel");
    } else if (contiguous(p, 1) && pixel_channel_pattern(p, p.st[0])) {
        launch_pixel_channel<T, OP, false>(cu, bp, ap, yp, n, p.dims[2], p.dims[1] * p.dims[2]);
        KILN_CUDA_LAUNCHED(ctx, "binary_pixel_channel");
    } else if (inner_vectorizable(p, VecOf<T>::N, ap, bp, yp)) {
        const BcastArgs g = bcast_args(p);
        const int64_t nv = n / VecOf<T>::N, inner_dim = p.dims[p.nd - 1];
        const unsigned blocks = kiln_cuda_blocks(cu, nv, THREADS);
        if (n < ((int64_t)1 << 31))
            binary_inner<T, OP, uint32_t><<<blocks, THREADS, 0, cu->stream>>>(ap, bp, yp, (uint32_t)nv,
                                                                               (uint32_t)inner_dim, g);
        else
            binary_inner<T, OP, int64_t><<<blocks, THREADS, 0, cu->stream>>>(ap, bp, yp, nv, inner_dim, g);
        KILN_CUDA_LAUNCHED(ctx, "binary_inner");
    } else if (contiguous(p, 0) && channel_pattern(p, p.st[1], &inner, &C)) {
        binary_channel<T, OP, true><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(
            ap, bp, yp, n, inner, C);
        KILN_CUDA_LAUNCHED(ctx, "binary_channel");
    } else if (contiguous(p, 1) && channel_pattern(p, p.st[0], &inner, &C)) {
        binary_channel<T, OP, false><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(
            bp, ap, yp, n, inner, C);
        KILN_CUDA_LAUNCHED(ctx, "binary_channel");
    } else {
        const BcastArgs g = bcast_args(p);
        binary_general<T, OP><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(
            ap, bp, yp, n, g);
        KILN_CUDA_LAUNCHED(ctx, "binary_general");
    }
    return KILN_OK;
}

template <typename T>
kiln_status launch_binary(kiln_cuda *cu, kiln_context *ctx, int op, const kiln_tensor *a,
                          const kiln_tensor *b, kiln_tensor *y) {
    switch (op) {
    case B_ADD: return launch_binary_op<T, B_ADD>(cu, ctx, a, b, y);
    case B_SUB: return launch_binary_op<T, B_SUB>(cu, ctx, a, b, y);
    case B_MUL: return launch_binary_op<T, B_MUL>(cu, ctx, a, b, y);
    case B_DIV: return launch_binary_op<T, B_DIV>(cu, ctx, a, b, y);
    case B_POW: return launch_binary_op<T, B_POW>(cu, ctx, a, b, y);
    case B_MAX: return launch_binary_op<T, B_MAX>(cu, ctx, a, b, y);
    case B_MIN: return launch_binary_op<T, B_MIN>(cu, ctx, a, b, y);
    case B_MOD: return launch_binary_op<T, B_MOD>(cu, ctx, a, b, y);
    case B_MOD_FLOOR: return launch_binary_op<T, B_MOD_FLOOR>(cu, ctx, a, b, y);
    }
    return kiln_fail(ctx, KILN_ERR_INTERNAL, "binary op %d has no CUDA kernel", op);
}

int binary_op_of(const char *name) {
    static const char *const names[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod"};
    for (int i = 0; i < 8; i++)
        if (strcmp(name, names[i]) == 0) return i;
    if (strcmp(name, "Sum") == 0) return B_ADD;
    return -1;
}

/* ------------------------------------------------------------------- helpers */

// y: (N, C, S); bias: (C)
template <typename T>
__global__ void channel_bias_kernel(T *y, const T *bias, int64_t n, int64_t S, int64_t C) {
    for (int64_t i = thread_index(); i < n; i += grid_stride())
        y[i] = from_f<T>(to_f(y[i]) + to_f(bias[(i / S) % C]));
}

template <typename T>
kiln_status launch_channel_bias(kiln_cuda *cu, kiln_context *ctx, void *y, const void *bias,
                                int64_t N, int64_t C, int64_t S) {
    const int64_t n = N * C * S;
    if (n == 0) return KILN_OK;
    channel_bias_kernel<T><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(
        (T *)y, (const T *)bias, n, S, C);
    KILN_CUDA_LAUNCHED(ctx, "channel_bias_kernel");
    return KILN_OK;
}

// y, z: (rows, C, S); bias: (C). bias and z may be null. vec: 16-byte accesses, each vector
// within one channel (S a multiple of its length) or, NHWC (S == 1), over consecutive
// channels (C a multiple of it; the bias read a vector at a time). The activation as the
// fused kernels' epilogues compute it (act.cuh: the FAST forms for 16-bit T). NHWC's channel
// is stepped with the grid stride, not divided out of each index.
template <typename T, int ACT>
__global__ void conv_epilogue_kernel(T *y, const T *bias, const T *z, int64_t n, int64_t S, int64_t C, float a,
                                     float b, bool vec) {
    const kiln_act::Epi e = {ACT, a, b};
    constexpr bool FAST = sizeof(T) == 2;
    const int64_t stride = grid_stride();
    int64_t start = thread_index();
    if (vec) {
        using V = typename VecOf<T>::type;
        constexpr int N = VecOf<T>::N;
        const int64_t nv = n / N;
        if (S == 1) {
            /* c: the first channel of vector i; c and step are below C, so one subtraction
             * wraps it (the bias, when there is one, has C % N == 0: whole vectors) */
            const int64_t step = stride * N % C;
            int64_t c = start * N % C;
            for (int64_t i = start; i < nv; i += stride) {
                V u = ((const V *)y)[i], w, bv;
                if (z) w = ((const V *)z)[i];
                if (bias) bv = ((const V *)bias)[c / N];
#pragma unroll
                for (int k = 0; k < N; k++) {
                    float v = to_f(u.v[k]);
                    if (bias) v += to_f(bv.v[k]);
                    if (z) v += to_f(w.v[k]);
                    u.v[k] = from_f<T>(kiln_act::act_of<ACT, FAST>(v, e));
                }
                ((V *)y)[i] = u;
                c += step;
                if (c >= C) c -= C;
            }
        } else {
            for (int64_t i = start; i < nv; i += stride) {
                V u = ((const V *)y)[i], w;
                if (z) w = ((const V *)z)[i];
                const float bc = bias ? to_f(bias[i * N / S % C]) : 0.f;
#pragma unroll
                for (int k = 0; k < N; k++) {
                    float v = to_f(u.v[k]) + bc;
                    if (z) v += to_f(w.v[k]);
                    u.v[k] = from_f<T>(kiln_act::act_of<ACT, FAST>(v, e));
                }
                ((V *)y)[i] = u;
            }
        }
        start += nv * N;
    }
    for (int64_t i = start; i < n; i += stride) {
        float v = to_f(y[i]);
        if (bias) v += to_f(bias[(i / S) % C]);
        if (z) v += to_f(z[i]);
        y[i] = from_f<T>(kiln_act::act_of<ACT, FAST>(v, e));
    }
}

template <typename T>
kiln_status launch_conv_epilogue(kiln_cuda *cu, kiln_context *ctx, void *yv, const void *biasv, const void *zv,
                                 int64_t rows, int64_t C, int64_t S, int act, float a, float b) {
    const int64_t n = rows * C * S;
    if (n == 0) return KILN_OK;
    T *y = (T *)yv;
    const T *bias = (const T *)biasv, *z = (const T *)zv;
    constexpr int N = VecOf<T>::N;
    const bool vec = aligned16(y, z) && (!bias || (S == 1 ? C % N == 0 && aligned16(bias) : S % N == 0));
    const unsigned blocks = kiln_cuda_blocks(cu, vec ? n / N + 1 : n, THREADS);
    switch (act) {
#define EPI(A)                                                                                            \
    case A: conv_epilogue_kernel<T, A><<<blocks, THREADS, 0, cu->stream>>>(y, bias, z, n, S, C, a, b, vec); break;
        EPI(KILN_ACT_NONE)
        EPI(KILN_ACT_RELU)
        EPI(KILN_ACT_LEAKYRELU)
        EPI(KILN_ACT_CLIP)
        EPI(KILN_ACT_SIGMOID)
        EPI(KILN_ACT_HARDSWISH)
        EPI(KILN_ACT_HARDSIGMOID)
        EPI(KILN_ACT_TANH)
        EPI(KILN_ACT_SILU)
        EPI(KILN_ACT_GELU)
        EPI(KILN_ACT_GELU_TANH)
#undef EPI
    default: return kiln_fail(ctx, KILN_ERR_INTERNAL, "epilogue activation %d has no CUDA kernel", act);
    }
    KILN_CUDA_LAUNCHED(ctx, "conv_epilogue_kernel");
    return KILN_OK;
}

/* t as its bytes are walked when the output is 4-D NHWC: (N, H, W, C) dims, t right-
 * aligned to 4-D first (its bytes are the same in both layouts unless it is 4-D NHWC,
 * which it then is as laid out). */
void physical_nhwc(const kiln_tensor *t, kiln_tensor *out) {
    *out = *t;
    int64_t a[4] = {1, 1, 1, 1};
    for (int d = 0; d < t->ndim; d++) a[4 - t->ndim + d] = t->dims[d];
    out->ndim = 4;
    out->dims[0] = a[0];
    out->dims[1] = a[2];
    out->dims[2] = a[3];
    out->dims[3] = a[1];
}

// y: (M, N); c: (cm, cn) with cm in {1, M}, cn in {1, N}
template <typename T>
__global__ void broadcast_2d_kernel(T *y, const T *c, int64_t M, int64_t N, int64_t cm, int64_t cn) {
    for (int64_t i = thread_index(); i < M * N; i += grid_stride()) {
        const int64_t r = cm == 1 ? 0 : i / N, k = cn == 1 ? 0 : i % N;
        y[i] = c[r * cn + k];
    }
}

template <typename T>
kiln_status launch_broadcast_2d(kiln_cuda *cu, kiln_context *ctx, void *y, const void *c,
                                int64_t M, int64_t N, int64_t cm, int64_t cn) {
    if (M * N == 0) return KILN_OK;
    broadcast_2d_kernel<T><<<kiln_cuda_blocks(cu, M * N, THREADS), THREADS, 0, cu->stream>>>(
        (T *)y, (const T *)c, M, N, cm, cn);
    KILN_CUDA_LAUNCHED(ctx, "broadcast_2d_kernel");
    return KILN_OK;
}

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" kiln_status kiln_cuda_k_unary(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_node *node = c->node;
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    int op = unary_op_of(node->op_type);
    if (op < 0) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "op %s is not a unary op", node->op_type);
    UnaryParams p = unary_params(node, &op);
    switch (op) {
    case U_CLIP:
        p.a = -INFINITY;
        p.b = INFINITY;
        if (node->opset < 11) {
            p.a = kiln_attr_float(node, "min", -INFINITY);
            p.b = kiln_attr_float(node, "max", INFINITY);
        }
        if (c->n_in > 1 && c->in[1]) p.lo = c->in[1]->data;
        if (c->n_in > 2 && c->in[2]) p.hi = c->in[2]->data;
        break;
    default: break;
    }
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_unary, cu, c->kctx, op, x->data, y->data,
                           kiln_tensor_numel(x), p);
    return st;
}

extern "C" kiln_status kiln_cuda_k_unary_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const char *name = kiln_attr_string(c->node, "op", "");
    int op = unary_op_of(name);
    if (op < 0) return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "op=%s has no CUDA derivative", name);
    const UnaryParams p = unary_params(c->node, &op);
    const kiln_tensor *dy = c->in[0];
    const void *x = c->n_in > 1 && c->in[1] ? c->in[1]->data : nullptr;
    const void *y = c->n_in > 2 && c->in[2] ? c->in[2]->data : nullptr;
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, dy->dtype, launch_unary_grad, cu, c->kctx, op, dy->data, x, y,
                           c->out[0]->data, kiln_tensor_numel(dy), p);
    return st;
}

extern "C" kiln_status kiln_cuda_k_binary(kiln_cuda *cu, kiln_op_ctx *c) {
    int op = binary_op_of(c->node->op_type);
    if (op == B_MOD && kiln_attr_int(c->node, "fmod", 0) == 0) op = B_MOD_FLOOR;
    if (op < 0)
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "op %s is not a binary op", c->node->op_type);
    kiln_tensor *y = c->out[0];
    if (c->n_in == 1) { /* Max / Min of one input: a copy */
        KILN_CUDA_CHECK(c->kctx, cudaMemcpyAsync(y->data, c->in[0]->data, kiln_tensor_nbytes(y),
                                                 cudaMemcpyDeviceToDevice, cu->stream));
        return KILN_OK;
    }
    /* NHWC output: every operand seen in the physical order (N, H, W, C) */
    const bool nhwc = y->ndim == 4 && y->format == KILN_FORMAT_NHWC;
    kiln_tensor py;
    const kiln_tensor *in[2];
    kiln_tensor pin[2];
    if (nhwc) physical_nhwc(y, &py);
    kiln_tensor *yy = nhwc ? &py : y;
    kiln_status st = KILN_OK;
    /* Variadic Max / Min: y's shape covers every input's, so later inputs fold into y. */
    for (int i = 1; i < c->n_in && st == KILN_OK; i++) {
        in[0] = i == 1 ? c->in[0] : y;
        in[1] = c->in[i];
        for (int k = 0; nhwc && k < 2; k++) {
            physical_nhwc(in[k], &pin[k]);
            in[k] = &pin[k];
        }
        KILN_CU_FLOAT_DISPATCH(st, c->kctx, y->dtype, launch_binary, cu, c->kctx, op, in[0], in[1], yy);
    }
    return st;
}

extern "C" kiln_status kiln_cuda_add_channel_bias(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt,
                                                  void *y, const void *bias, int64_t N, int64_t C,
                                                  int64_t S) {
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, ctx, dt, launch_channel_bias, cu, ctx, y, bias, N, C, S);
    return st;
}

extern "C" kiln_status kiln_cuda_conv_epilogue(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *y,
                                               const void *bias, const void *z, int64_t rows, int64_t C,
                                               int64_t S, const kiln_cuda_act *act) {
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, ctx, dt, launch_conv_epilogue, cu, ctx, y, bias, z, rows, C, S, (int)act->kind,
                           act->a, act->b);
    return st;
}

extern "C" kiln_status kiln_cuda_act_inplace(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *y,
                                             int64_t n, const kiln_cuda_act *act) {
    if (act->kind == KILN_ACT_NONE) return KILN_OK;
    /* the epilogue pass without bias or residual: one channel of n values, in place (each
     * element read before it is written, by the same thread) */
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, ctx, dt, launch_conv_epilogue, cu, ctx, y, nullptr, nullptr, 1, 1, n,
                           (int)act->kind, act->a, act->b);
    return st;
}

extern "C" kiln_status kiln_cuda_broadcast_2d(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt,
                                              void *y, const void *c, int64_t M, int64_t N,
                                              int64_t cm, int64_t cn) {
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, ctx, dt, launch_broadcast_2d, cu, ctx, y, c, M, N, cm, cn);
    return st;
}
