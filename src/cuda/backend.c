/* backend.c — the CUDA backend behind the backend interface (src/core/backend.h): the
 * instance is a kiln_cuda (context.c), plans are CUDA plans (cuda_plan.c), ops are the
 * kernels of table.c, training is train.c. */
#include "../core/backend.h"
#include "cuda_plan.h"
#include "cuda_internal.h"

#include <cuda_runtime.h>

extern const kiln_backend_train_i kiln_cuda_train_i; /* train.c */

static kiln_status cu_create(kiln_context *ctx, const kiln_backend_options *o, void **out) {
    kiln_cuda_options co = {.allow_tf32 = o->allow_tf32,
                            .no_autotune = o->no_autotune,
                            .deterministic = o->deterministic,
                            .no_conv_gemm = o->no_conv_gemm,
                            .no_conv_direct = o->no_conv_direct,
                            .no_conv_depthwise = o->no_conv_depthwise,
                            .flash_attention = o->no_flash_attention ? -1 : 0,
                            .conv_dw_grad = o->no_conv_dw_grad ? -1 : 0,
                            .no_streams = o->no_streams,
                            .device = o->device_index,
                            .caller_stream = o->stream};
    kiln_cuda *cu = NULL;
    kiln_status st = kiln_cuda_create(ctx, &co, &cu);
    *out = cu;
    return st;
}

static void cu_free(void *be) { kiln_cuda_free(be); }

static bool cu_has_op(int op) { return kiln_cuda_kernel_for(op) != NULL; }

static kiln_status cu_supports(kiln_op_ctx *c) { return kiln_cuda_supports(c); }

static kiln_status cu_workspace_size(void *be, kiln_op_ctx *c, size_t *bytes) {
    return kiln_cuda_workspace_size(be, c, bytes);
}

static kiln_status cu_plan_create(void *be, kiln_model *m, kiln_tensor *const *inputs,
                                  const kiln_backend_plan_options *o, void **out) {
    kiln_cuda_plan *cp = NULL;
    kiln_status st = kiln_cuda_plan_create_bound(be, m, inputs, o->fold, o->bound, o->use_graph, &cp);
    *out = cp;
    return st;
}

static void cu_plan_free(void *plan) { kiln_cuda_plan_free(plan); }

static struct kiln_plan *cu_plan_host(void *plan) { return kiln_cuda_plan_host(plan); }

static void *cu_plan_value(void *plan, int v) { return kiln_cuda_plan_value_ptr(plan, v); }

static void cu_plan_set_hooks(void *plan, kiln_backend_hook prologue, kiln_backend_hook epilogue, void *arg) {
    kiln_cuda_plan_set_prologue(plan, prologue, arg);
    kiln_cuda_plan_set_epilogue(plan, epilogue, arg);
}

/* Random kernels read the run seed from the device (kiln_cuda_rng_*), not `seed`. */
static kiln_status cu_plan_run(void *plan, kiln_tensor *const *inputs, uint64_t seed, int n_outputs,
                               const kiln_tensor **outputs) {
    (void)seed;
    return kiln_cuda_plan_run(plan, inputs, n_outputs, outputs);
}

static kiln_status cu_plan_run_into(void *plan, kiln_tensor *const *inputs, uint64_t seed, int n_outputs,
                                    kiln_tensor *const *outputs) {
    (void)seed;
    return kiln_cuda_plan_run_into(plan, inputs, n_outputs, outputs);
}

static kiln_status cu_plan_enqueue(void *plan, kiln_tensor *const *inputs, uint64_t seed) {
    (void)seed;
    return kiln_cuda_plan_enqueue(plan, inputs, true);
}

static kiln_status cu_plan_time(void *plan, kiln_tensor *const *inputs, int iters, double *compute_ms,
                                double *h2d_ms, double *d2h_ms) {
    return kiln_cuda_plan_time(plan, inputs, iters, compute_ms, h2d_ms, d2h_ms);
}

static kiln_status cu_plan_profile(void *plan, kiln_tensor *const *inputs, uint64_t seed, int iters, double *ms,
                                   double *start_ms, double *pro_ms, double *epi_ms) {
    (void)seed;
    return kiln_cuda_plan_profile(plan, inputs, iters, ms, start_ms, pro_ms, epi_ms);
}

static kiln_status cu_alloc(void *be, size_t bytes, void **out) {
    cudaError_t ce = cudaMalloc(out, bytes ? bytes : 1);
    if (ce == cudaSuccess) return KILN_OK;
    *out = NULL;
    return kiln_fail(kiln_cuda_context(be), ce == cudaErrorMemoryAllocation ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_DEVICE,
                     "cudaMalloc of %zu bytes: %s", bytes, cudaGetErrorString(ce));
}

static void cu_dealloc(void *be, void *p) {
    (void)be;
    if (p) cudaFree(p);
}

static kiln_status cu_upload(void *be, void *dst, const void *src, size_t bytes) {
    return kiln_cuda_upload(be, dst, src, bytes);
}

static kiln_status cu_download(void *be, void *dst, const void *src, size_t bytes) {
    return kiln_cuda_download(be, dst, src, bytes);
}

static kiln_status cu_sync(void *be) { return kiln_cuda_sync(be); }

static void *cu_stream(void *be) { return kiln_cuda_caller_stream(be); }

static kiln_status cu_check_device(kiln_context *ctx, int device_index) {
    int n = 0;
    kiln_status st = kiln_cuda_device_count(ctx, &n);
    if (st) return st;
    if (n == 0) return kiln_fail(ctx, KILN_ERR_DEVICE, "no CUDA device %d: none was found", device_index);
    if (device_index < 0 || device_index >= n)
        return kiln_fail(ctx, KILN_ERR_DEVICE, "no CUDA device %d: this machine has %d", device_index, n);
    return KILN_OK;
}

static kiln_status cu_mem_alloc(kiln_context *ctx, int device_index, size_t bytes, void **out) {
    *out = NULL;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(device_index));
    cudaError_t ce = cudaMalloc(out, bytes ? bytes : 1);
    if (ce == cudaSuccess) ce = cudaMemset(*out, 0, bytes);
    if (ce == cudaSuccess) return KILN_OK;
    if (*out) cudaFree(*out);
    *out = NULL;
    cudaGetLastError();
    return kiln_fail(ctx, ce == cudaErrorMemoryAllocation ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_DEVICE,
                     "cudaMalloc of %zu bytes on cuda:%d: %s", bytes, device_index, cudaGetErrorString(ce));
}

/* cudaFree waits for the device: kernels still reading the memory (queued by whoever
 * borrowed it through DLPack) finish first. */
static void cu_mem_free(int device_index, void *p) {
    if (!p) return;
    if (cudaSetDevice(device_index) == cudaSuccess) cudaFree(p);
    cudaGetLastError();
}

static kiln_status cu_mem_copy(kiln_context *ctx, void *dst, int dst_dev, const void *src, int src_dev, size_t bytes) {
    const enum cudaMemcpyKind kind = dst_dev < 0 ? cudaMemcpyDeviceToHost : src_dev < 0 ? cudaMemcpyHostToDevice
                                                                                          : cudaMemcpyDeviceToDevice;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(dst_dev >= 0 ? dst_dev : src_dev));
    /* after all work on the device (any stream, kiln's are non-blocking) */
    KILN_CUDA_CHECK(ctx, cudaDeviceSynchronize());
    if (dst_dev >= 0 && src_dev >= 0 && dst_dev != src_dev)
        KILN_CUDA_CHECK(ctx, cudaMemcpyPeer(dst, dst_dev, src, src_dev, bytes));
    else
        KILN_CUDA_CHECK(ctx, cudaMemcpy(dst, src, bytes, kind));
    return KILN_OK;
}

kiln_status kiln_cuda_mem_info(kiln_context *ctx, int device, size_t *free_bytes, size_t *total_bytes); /* meminfo.c */
static kiln_status cu_host_alloc(kiln_context *ctx, size_t bytes, void **out) {
    *out = NULL;
    cudaError_t e = cudaHostAlloc(out, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        *out = NULL;
        return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of pinned host memory: %s", bytes,
                         cudaGetErrorString(e));
    }
    return KILN_OK;
}

static void cu_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

const kiln_backend_i kiln_cuda_backend_i = {
    .name = "cuda",
    .device = KILN_DEVICE_CUDA,
    .create = cu_create,
    .free = cu_free,
    .has_op = cu_has_op,
    .supports = cu_supports,
    .workspace_size = cu_workspace_size,
    .plan_create = cu_plan_create,
    .plan_free = cu_plan_free,
    .plan_host = cu_plan_host,
    .plan_value = cu_plan_value,
    .plan_set_hooks = cu_plan_set_hooks,
    .plan_run = cu_plan_run,
    .plan_run_into = cu_plan_run_into,
    .plan_enqueue = cu_plan_enqueue,
    .plan_time = cu_plan_time,
    .plan_profile = cu_plan_profile,
    .alloc = cu_alloc,
    .dealloc = cu_dealloc,
    .upload = cu_upload,
    .download = cu_download,
    .sync = cu_sync,
    .stream = cu_stream,
    .mem_alloc = cu_mem_alloc,
    .mem_free = cu_mem_free,
    .mem_copy = cu_mem_copy,
    .check_device = cu_check_device,
    .mem_info = kiln_cuda_mem_info,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .train = &kiln_cuda_train_i,
    .train_session_passes = false,
};
