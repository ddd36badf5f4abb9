/*
 * dtype.cuh — device-side element types shared by the .cu files: conversion of f32,
 * f16 and bf16 to and from float (round to nearest even, as the CPU reference's
 * kiln_f32_to_f16 / kiln_f32_to_bf16), 16-byte vectors, a grid-stride index, and the
 * dispatch of a templated launch over the float dtypes or over element sizes.
 */
#ifndef KILN_CUDA_DTYPE_CUH
#define KILN_CUDA_DTYPE_CUH

#include "cuda_internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kiln_cu {

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

/* VEC elements of T in one 16-byte access. */
template <typename T> struct VecOf {
    static constexpr int N = 16 / (int)sizeof(T);
    struct alignas(16) type {
        T v[N];
    };
};

__device__ __forceinline__ int64_t thread_index() {
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return (int64_t)gridDim.x * blockDim.x; }

/* True when every pointer is 16-byte aligned (vector paths). */
static inline bool aligned16(const void *a, const void *b = nullptr, const void *c = nullptr) {
    return ((uintptr_t)a % 16 == 0) && ((uintptr_t)b % 16 == 0) && ((uintptr_t)c % 16 == 0);
}

/* A float with its element dtype loaded on the device from a pointer of any float dtype
 * the kernels meet (parameters of BatchNormalization may be f64). */
__device__ __forceinline__ double load_any(const void *p, int dtype, int64_t i) {
    switch (dtype) {
    case KILN_F32: return ((const float *)p)[i];
    case KILN_F64: return ((const double *)p)[i];
    case KILN_F16: return __half2float(((const __half *)p)[i]);
    case KILN_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return 0;
    }
}

} // namespace kiln_cu

/* Call F<T>(args...) with T the C++ type of float dtype dt (f32, f16, bf16), assigning its
 * status to st; other dtypes give KILN_ERR_UNSUPPORTED with a message on ctx. */
#define KILN_CU_FLOAT_DISPATCH(st, ctx, dt, F, ...)                                         \
    do {                                                                                    \
        switch (dt) {                                                                       \
        case KILN_F32: (st) = F<float>(__VA_ARGS__); break;                                 \
        case KILN_F16: (st) = F<__half>(__VA_ARGS__); break;                                \
        case KILN_BF16: (st) = F<__nv_bfloat16>(__VA_ARGS__); break;                        \
        default:                                                                            \
            (st) = kiln_fail((ctx), KILN_ERR_UNSUPPORTED, "dtype %s has no CUDA kernel",    \
                             kiln_dtype_name(dt));                                          \
        }                                                                                   \
    } while (0)

/* Run F<E> with E the unsigned type of element size es. */
#define KILN_CU_SIZE_DISPATCH(st, ctx, es, F, ...)                                          \
    do {                                                                                    \
        switch (es) {                                                                       \
        case 1: (st) = F<uint8_t>(__VA_ARGS__); break;                                      \
        case 2: (st) = F<uint16_t>(__VA_ARGS__); break;                                     \
        case 4: (st) = F<uint32_t>(__VA_ARGS__); break;                                     \
        case 8: (st) = F<uint64_t>(__VA_ARGS__); break;                                     \
        default:                                                                            \
            (st) = kiln_fail((ctx), KILN_ERR_UNSUPPORTED, "elements of %zu bytes", (size_t)(es)); \
        }                                                                                   \
    } while (0)

#endif /* KILN_CUDA_DTYPE_CUH */
