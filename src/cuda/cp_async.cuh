/*
 * cp_async.cuh — asynchronous global-to-shared copies (sm_80+ cp.async), shared by the
 * kernels that stage tiles while they compute (attention_flash.cu, conv_depthwise.cu).
 */
#ifndef KILN_CUDA_CP_ASYNC_CUH
#define KILN_CUDA_CP_ASYNC_CUH

#include <stdint.h>

namespace kiln_cu {

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16 bytes from src to shared address dst, of which src_bytes (0 or 16) are read and the
 * rest zero-filled: src must be a valid address even when nothing is read. */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
/* The same for 8 bytes (src_bytes 0 or 8), through L1 (.cg takes 16 bytes only). */
__device__ __forceinline__ void cp_async8(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* Waits until at most N of this thread's committed groups are still in flight. */
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

} // namespace kiln_cu

#endif
