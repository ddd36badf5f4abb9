/*
 * rtc.c — runtime compilation: CUDA C source -> NVRTC -> a cubin for the device's own
 * architecture -> cudaLibraryLoadData (the runtime API; no driver API, so nothing links
 * libcuda directly). Kernels are then looked up by name and launched on the kiln_cuda's
 * stream. Generated fusion kernels (fused_elementwise.c) are built on it. Compiling needs
 * no device (kiln_cuda_rtc_compile), so --dry-run tests check
 * generated source on machines without a GPU.
 */
#include "cuda_internal.h"

#include <stdio.h>
#include <stdlib.h>

struct kiln_cuda_module {
    cudaLibrary_t lib;
};

/* The compile log, into the context's message after a failed compile. */
static kiln_status compile_failed(kiln_context *ctx, nvrtcProgram prog, nvrtcResult e,
                                  const char *name) {
    size_t n = 0;
    char *log = NULL;
    if (nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS && n > 0) {
        log = malloc(n);
        if (log && nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = 0;
    }
    kiln_status st = kiln_fail(ctx, KILN_ERR_DEVICE, "NVRTC could not compile '%s': %s\n%s", name,
                               nvrtcGetErrorString(e), log ? log : "(no log)");
    free(log);
    return st;
}

kiln_status kiln_cuda_rtc_compile(kiln_context *ctx, const char *name, const char *source, int cc_major,
                                  int cc_minor, int n_opts, const char *const *opts, char **cubin_out,
                                  size_t *size_out) {
    *cubin_out = NULL;
    *size_out = 0;
    if (n_opts < 0 || n_opts > 14)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "NVRTC: %d extra options (at most 14)", n_opts);
    nvrtcProgram prog = NULL;
    KILN_NVRTC_CHECK(ctx, nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL));
    char arch[64];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", cc_major, cc_minor);
    const char *all[16] = {arch, "--std=c++17"};
    for (int i = 0; i < n_opts; i++) all[2 + i] = opts[i];
    kiln_status st = KILN_OK;
    nvrtcResult e = nvrtcCompileProgram(prog, 2 + n_opts, all);
    if (e != NVRTC_SUCCESS) st = compile_failed(ctx, prog, e, name);
    size_t size = 0;
    char *cubin = NULL;
    KILN_NVRTC_TRY(st, ctx, nvrtcGetCUBINSize(prog, &size));
    if (st == KILN_OK) {
        cubin = malloc(size ? size : 1);
        if (!cubin) st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a %zu-byte cubin", size);
    }
    KILN_NVRTC_TRY(st, ctx, nvrtcGetCUBIN(prog, cubin));
    nvrtcDestroyProgram(&prog); /* only frees; its status cannot change the outcome */
    if (st) {
        free(cubin);
        return st;
    }
    *cubin_out = cubin;
    *size_out = size;
    return KILN_OK;
}

kiln_status kiln_cuda_module_compile_opts(kiln_cuda *cu, const char *name, const char *source, int n_opts,
                                          const char *const *opts, kiln_cuda_module **out) {
    kiln_context *ctx = cu->ctx;
    *out = NULL;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(cu->device));
    char *cubin = NULL;
    size_t size = 0;
    kiln_status st = kiln_cuda_rtc_compile(ctx, name, source, cu->props.cc_major, cu->props.cc_minor, n_opts,
                                           opts, &cubin, &size);
    if (st) return st;
    kiln_cuda_module *m = calloc(1, sizeof *m);
    if (!m) st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a module");
    KILN_CUDA_TRY(st, ctx, cudaLibraryLoadData(&m->lib, cubin, NULL, NULL, 0, NULL, NULL, 0));
    free(cubin);
    if (st) {
        free(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}

kiln_status kiln_cuda_module_compile(kiln_cuda *cu, const char *name, const char *source,
                                     kiln_cuda_module **out) {
    return kiln_cuda_module_compile_opts(cu, name, source, 0, NULL, out);
}

kiln_status kiln_cuda_module_kernel(kiln_cuda *cu, kiln_cuda_module *m, const char *kernel, void **fn) {
    cudaKernel_t k = NULL;
    *fn = NULL;
    KILN_CUDA_CHECK(cu->ctx, cudaLibraryGetKernel(&k, m->lib, kernel));
    *fn = (void *)k;
    return KILN_OK;
}

kiln_status kiln_cuda_module_launch(kiln_cuda *cu, void *fn, unsigned grid, unsigned block,
                                    size_t smem, void **args) {
    dim3 g = {grid, 1, 1}, b = {block, 1, 1};
    /* cudaLaunchKernel takes a cudaKernel_t in place of a function symbol */
    KILN_CUDA_CHECK(cu->ctx, cudaLaunchKernel((const void *)fn, g, b, args, smem, cu->stream));
    return KILN_OK;
}

void kiln_cuda_module_free(kiln_cuda_module *m) {
    if (!m) return;
    cudaLibraryUnload(m->lib);
    cudaGetLastError();
    free(m);
}
