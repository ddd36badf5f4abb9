/*
 * fast_div.cuh — n / d for 0 <= n < 2^31 and 1 <= d < 2^31 by a multiply-high and a shift
 * (Granlund and Montgomery; PyTorch's IntDivider): a runtime 32-bit division is a
 * ~20-instruction sequence, and a gather that decodes several dims per element would do
 * several (MaxPoolGrad's picks in pool.cu, kiln.RowGather in movement.cu).
 */
#ifndef KILN_CUDA_FAST_DIV_CUH
#define KILN_CUDA_FAST_DIV_CUH

#include <stdint.h>

struct FastDiv {
    uint32_t d, m, shift;
};

static inline FastDiv fast_div(uint32_t d) {
    FastDiv f;
    uint32_t s = 0;
    while (s < 32 && (1ull << s) < d) s++;
    f.d = d;
    f.shift = s;
    f.m = (uint32_t)(((1ull << 32) * ((1ull << s) - d)) / d + 1);
    return f;
}

__device__ __forceinline__ uint32_t fdiv(uint32_t n, const FastDiv &f) { return (__umulhi(n, f.m) + n) >> f.shift; }

#endif
