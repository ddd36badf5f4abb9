/*
 * convert.cu — Cast on the device: Y = X converted to the dtype of attribute `to`, between
 * any two kiln dtypes, with exactly the rules of the CPU reference (src/ops/cast.c):
 *   - float -> narrower float rounds to nearest even once: f64 -> f16 / bf16 goes
 *     through a round-to-odd f32 (truncate toward zero, set the lowest bit when inexact),
 *     which makes the final rounding equal to rounding the double directly;
 *   - float -> integer truncates toward zero and saturates at the target's limits; NaN
 *     gives 0;
 *   - integer -> integer keeps the low bits (two's complement);
 *   - integer -> float is the nearest value (int64 -> f32 in one rounding);
 *   - to bool: nonzero (NaN included) is true; bool reads as 0 or 1.
 * Casts among f32, f16 and bf16 (the ones of mixed-precision plans) take a typed path
 * (one rounding through float, exact for these); every other pair goes element by
 * element through a (float as double | integer bits) scalar, the source dtype switched
 * on at run time (uniform across the grid) and the target a template parameter.
 */
#include "dtype.cuh"

#include <math.h>
#include <type_traits>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

/* A source element: a float (exact in double) or an integer's bits, sign-extended for
 * signed dtypes (cast.c's scalar). */
struct Scalar {
    bool is_float, is_signed;
    double f;
    uint64_t bits;
};

__device__ __forceinline__ Scalar load(const void *p, int dt, int64_t i) {
    Scalar s = {false, false, 0.0, 0};
    switch (dt) {
    case KILN_F32: s.is_float = true; s.f = ((const float *)p)[i]; break;
    case KILN_F64: s.is_float = true; s.f = ((const double *)p)[i]; break;
    case KILN_F16: s.is_float = true; s.f = __half2float(((const __half *)p)[i]); break;
    case KILN_BF16: s.is_float = true; s.f = __bfloat162float(((const __nv_bfloat16 *)p)[i]); break;
    case KILN_BOOL: s.bits = ((const uint8_t *)p)[i] != 0; break;
    case KILN_U8: s.bits = ((const uint8_t *)p)[i]; break;
    case KILN_U16: s.bits = ((const uint16_t *)p)[i]; break;
    case KILN_U32: s.bits = ((const uint32_t *)p)[i]; break;
    case KILN_U64: s.bits = ((const uint64_t *)p)[i]; break;
    case KILN_I8: s.is_signed = true; s.bits = (uint64_t)(int64_t)((const int8_t *)p)[i]; break;
    case KILN_I16: s.is_signed = true; s.bits = (uint64_t)(int64_t)((const int16_t *)p)[i]; break;
    case KILN_I32: s.is_signed = true; s.bits = (uint64_t)(int64_t)((const int32_t *)p)[i]; break;
    case KILN_I64: s.is_signed = true; s.bits = ((const uint64_t *)p)[i]; break;
    default: break; /* supports admits kiln dtypes only */
    }
    return s;
}

__device__ __forceinline__ double as_double(const Scalar &s) {
    if (s.is_float) return s.f;
    return s.is_signed ? (double)(int64_t)s.bits : (double)s.bits;
}

/* double -> float rounded toward zero with the lowest bit set when inexact. */
__device__ __forceinline__ float f32_round_odd(double d) {
    if (d != d || isinf(d)) return (float)d;
    float f = __double2float_rz(d);
    if ((double)f != d) f = __uint_as_float(__float_as_uint(f) | 1u);
    return f;
}

/* Float -> the bits of an integer of `bytes` bytes: truncate, saturate, NaN -> 0. The
 * limits are powers of two, exact in double. */
__device__ __forceinline__ uint64_t float_to_int_bits(double v, int bytes, bool is_signed) {
    const int bits = 8 * bytes;
    if (v != v) return 0;
    v = trunc(v);
    if (is_signed) {
        const double lim = ldexp(1.0, bits - 1);
        const int64_t mx = (int64_t)(~0ull >> (65 - bits));
        if (v >= lim) return (uint64_t)mx;
        if (v < -lim) return (uint64_t)(-mx - 1);
        return (uint64_t)(int64_t)v;
    }
    if (v >= ldexp(1.0, bits)) return ~0ull >> (64 - bits);
    if (v < 0) return 0;
    return (uint64_t)v;
}

template <typename D> struct IntTraits;
template <> struct IntTraits<uint8_t> { static constexpr bool is_signed = false; };
template <> struct IntTraits<uint16_t> { static constexpr bool is_signed = false; };
template <> struct IntTraits<uint32_t> { static constexpr bool is_signed = false; };
template <> struct IntTraits<uint64_t> { static constexpr bool is_signed = false; };
template <> struct IntTraits<int8_t> { static constexpr bool is_signed = true; };
template <> struct IntTraits<int16_t> { static constexpr bool is_signed = true; };
template <> struct IntTraits<int32_t> { static constexpr bool is_signed = true; };
template <> struct IntTraits<int64_t> { static constexpr bool is_signed = true; };

/* Bool is stored as a byte but converts by "nonzero"; a tag type keeps it apart from u8. */
struct BoolTag {};

template <typename D> __device__ __forceinline__ void store(void *p, int64_t i, const Scalar &s) {
    if constexpr (std::is_same<D, double>::value) {
        ((double *)p)[i] = as_double(s);
    } else if constexpr (std::is_same<D, float>::value) {
        float v;
        if (s.is_float) v = (float)s.f;
        else v = s.is_signed ? (float)(int64_t)s.bits : (float)s.bits; /* one rounding */
        ((float *)p)[i] = v;
    } else if constexpr (std::is_same<D, __half>::value) {
        ((__half *)p)[i] = __float2half_rn(f32_round_odd(as_double(s)));
    } else if constexpr (std::is_same<D, __nv_bfloat16>::value) {
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(f32_round_odd(as_double(s)));
    } else if constexpr (std::is_same<D, BoolTag>::value) {
        ((uint8_t *)p)[i] = s.is_float ? s.f != 0 : s.bits != 0; /* NaN != 0 */
    } else {
        const uint64_t b = s.is_float ? float_to_int_bits(s.f, (int)sizeof(D), IntTraits<D>::is_signed) : s.bits;
        ((D *)p)[i] = (D)b; /* the low bits */
    }
}

template <typename D>
__global__ void cast_generic(const void *x, int src_dt, void *y, int64_t n) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) store<D>(y, i, load(x, src_dt, i));
}

/* f32 / f16 / bf16 to one another: through float, exact for the source, one rounding. */
template <typename S, typename D> __global__ void cast_float(const S *x, D *y, int64_t n) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) y[i] = from_f<D>(to_f(x[i]));
}

template <typename S>
kiln_status launch_float_from(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, kiln_dtype to,
                              int64_t n) {
    const unsigned blocks = kiln_cuda_blocks(cu, n, THREADS);
    switch (to) {
    case KILN_F32: cast_float<S, float><<<blocks, THREADS, 0, cu->stream>>>((const S *)x, (float *)y, n); break;
    case KILN_F16: cast_float<S, __half><<<blocks, THREADS, 0, cu->stream>>>((const S *)x, (__half *)y, n); break;
    default:
        cast_float<S, __nv_bfloat16><<<blocks, THREADS, 0, cu->stream>>>((const S *)x, (__nv_bfloat16 *)y, n);
        break;
    }
    KILN_CUDA_LAUNCHED(ctx, "cast_float");
    return KILN_OK;
}

template <typename D>
kiln_status launch_generic(kiln_cuda *cu, kiln_context *ctx, const void *x, kiln_dtype from, void *y,
                           int64_t n) {
    cast_generic<D><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(x, (int)from, y, n);
    KILN_CUDA_LAUNCHED(ctx, "cast_generic");
    return KILN_OK;
}

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" kiln_status kiln_cuda_k_cast(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(x);
    if (n == 0) return KILN_OK;
    const kiln_dtype from = x->dtype, to = y->dtype;
    if (from == to) {
        KILN_CUDA_CHECK(c->kctx, cudaMemcpyAsync(y->data, x->data, kiln_tensor_nbytes(x),
                                                 cudaMemcpyDeviceToDevice, cu->stream));
        return KILN_OK;
    }
    if (kiln_cuda_float_dtype(from) && kiln_cuda_float_dtype(to)) {
        switch (from) {
        case KILN_F32: return launch_float_from<float>(cu, c->kctx, x->data, y->data, to, n);
        case KILN_F16: return launch_float_from<__half>(cu, c->kctx, x->data, y->data, to, n);
        default: return launch_float_from<__nv_bfloat16>(cu, c->kctx, x->data, y->data, to, n);
        }
    }
    kiln_context *ctx = c->kctx;
    switch (to) {
    case KILN_F32: return launch_generic<float>(cu, ctx, x->data, from, y->data, n);
    case KILN_F64: return launch_generic<double>(cu, ctx, x->data, from, y->data, n);
    case KILN_F16: return launch_generic<__half>(cu, ctx, x->data, from, y->data, n);
    case KILN_BF16: return launch_generic<__nv_bfloat16>(cu, ctx, x->data, from, y->data, n);
    case KILN_BOOL: return launch_generic<BoolTag>(cu, ctx, x->data, from, y->data, n);
    case KILN_U8: return launch_generic<uint8_t>(cu, ctx, x->data, from, y->data, n);
    case KILN_U16: return launch_generic<uint16_t>(cu, ctx, x->data, from, y->data, n);
    case KILN_U32: return launch_generic<uint32_t>(cu, ctx, x->data, from, y->data, n);
    case KILN_U64: return launch_generic<uint64_t>(cu, ctx, x->data, from, y->data, n);
    case KILN_I8: return launch_generic<int8_t>(cu, ctx, x->data, from, y->data, n);
    case KILN_I16: return launch_generic<int16_t>(cu, ctx, x->data, from, y->data, n);
    case KILN_I32: return launch_generic<int32_t>(cu, ctx, x->data, from, y->data, n);
    case KILN_I64: return launch_generic<int64_t>(cu, ctx, x->data, from, y->data, n);
    default: break;
    }
    return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "Cast to %s has no CUDA kernel", kiln_dtype_name(to));
}
