/*
 * context.c — the CUDA device context (kiln_cuda): device selection and properties, the
 * compute stream, lazily created cuDNN / cuBLASLt handles bound to it, the device arena
 * and workspace, pinned staging for host <-> device copies, the device-side error flag,
 * and the conversion of library errors into kiln statuses. Host code only.
 */
#include "cuda_internal.h"
#include "kiln_tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STAGING_DEFAULT ((size_t)8 << 20)
#define ARENA_ALIGN ((size_t)256)

/* ----------------------------------------------------------------- errors */

/* The path from "src/" on: messages stay short whatever the build directory. */
static const char *short_file(const char *file) {
    const char *p = strstr(file, "src/");
    return p ? p : file;
}

kiln_status kiln_cuda_rt_error(kiln_context *ctx, cudaError_t e, const char *call,
                               const char *file, int line) {
    kiln_status st = e == cudaErrorMemoryAllocation ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_DEVICE;
    return kiln_fail(ctx, st, "%s failed: %s (%s) (%s:%d)", call, cudaGetErrorName(e),
                     cudaGetErrorString(e), short_file(file), line);
}

kiln_status kiln_cuda_dnn_error(kiln_context *ctx, cudnnStatus_t e, const char *call,
                                const char *file, int line) {
    kiln_status st = (e == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
                      e == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
                         ? KILN_ERR_OUT_OF_MEMORY
                         : KILN_ERR_DEVICE;
    char detail[512];
    cudnnGetLastErrorString(detail, sizeof detail);
    return kiln_fail(ctx, st, "%s failed: %s%s%s (%s:%d)", call, cudnnGetErrorString(e),
                     detail[0] ? ": " : "", detail, short_file(file), line);
}

kiln_status kiln_cuda_lt_error(kiln_context *ctx, cublasStatus_t e, const char *call,
                               const char *file, int line) {
    kiln_status st = e == CUBLAS_STATUS_ALLOC_FAILED ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_DEVICE;
    return kiln_fail(ctx, st, "%s failed: %s (%s:%d)", call, cublasLtGetStatusString(e),
                     short_file(file), line);
}

kiln_status kiln_cuda_rtc_error(kiln_context *ctx, nvrtcResult e, const char *call,
                                const char *file, int line) {
    kiln_status st = e == NVRTC_ERROR_OUT_OF_MEMORY ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_DEVICE;
    return kiln_fail(ctx, st, "%s failed: %s (%s:%d)", call, nvrtcGetErrorString(e),
                     short_file(file), line);
}

/* ---------------------------------------------------------------- devices */

kiln_status kiln_cuda_device_count(kiln_context *ctx, int *count) {
    if (!count) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "count is NULL");
    *count = 0;
    cudaError_t e = cudaGetDeviceCount(count);
    /* No device and no (or a too old) driver both mean: nothing to run on. */
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        cudaGetLastError(); /* not sticky, but leave nothing behind */
        *count = 0;
        return KILN_OK;
    }
    if (e != cudaSuccess) {
        *count = 0;
        return kiln_cuda_rt_error(ctx, e, "cudaGetDeviceCount(count)", __FILE__, __LINE__);
    }
    return KILN_OK;
}

static kiln_status no_device(kiln_context *ctx, int want) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    cudaGetLastError();
    if (e != cudaSuccess)
        return kiln_fail(ctx, KILN_ERR_DEVICE, "no CUDA device: cudaGetDeviceCount says %s (%s)",
                         cudaGetErrorName(e), cudaGetErrorString(e));
    if (n == 0) return kiln_fail(ctx, KILN_ERR_DEVICE, "no CUDA device: none was found");
    return kiln_fail(ctx, KILN_ERR_DEVICE, "no CUDA device %d: this machine has %d", want, n);
}

static kiln_status read_props(kiln_cuda *cu) {
    struct cudaDeviceProp p;
    KILN_CUDA_CHECK(cu->ctx, cudaGetDeviceProperties(&p, cu->device));
    kiln_cuda_props *q = &cu->props;
    snprintf(q->name, sizeof q->name, "%s", p.name);
    q->sm_count = p.multiProcessorCount;
    q->cc_major = p.major;
    q->cc_minor = p.minor;
    q->total_memory = p.totalGlobalMem;
    q->l2_bytes = p.l2CacheSize;
    q->smem_per_block_optin = p.sharedMemPerBlockOptin;
    return KILN_OK;
}

/* Algorithm choices: the search mode, and the timed choices the disk cache holds for this
 * GPU model and cuDNN version. An unreadable cache is an empty one. */
/* A switch that is on by default: the option's sign (> 0 on, < 0 off), else the environment
 * variable env ("0" off, anything else or unset: on). */
static bool switch_on(int option, const char *env) {
    if (option) return option > 0;
    const char *e = getenv(env);
    return !(e && strcmp(e, "0") == 0);
}

static void load_algos(kiln_cuda *cu, const kiln_cuda_options *o) {
    cu->autotune = !o->no_autotune;
    cu->conv_gemm = !o->no_conv_gemm;
    cu->conv_direct = !o->no_conv_direct;
    cu->conv_depthwise = !o->no_conv_depthwise;
    /* on by default (validated on an H100: bench/NOTES.md "t7 / z6 results"); an option's
     * sign, else the environment variable's 0 or 1, decides */
    cu->conv_dw_grad = switch_on(o->conv_dw_grad, "KILN_CUDA_DW_GRAD");
    cu->flash_attention = switch_on(o->flash_attention, "KILN_CUDA_FLASH_ATTN");
    {
        const char *e = getenv("KILN_CUDA_SDPA");
        cu->sdpa = e && strcmp(e, "0") == 0 ? 0 : e && strcmp(e, "1") == 0 ? 2 : 1;
    }
    cu->perm_tile = switch_on(0, "KILN_CUDA_PERM_TILE");
    cu->perm_tile_vec = switch_on(0, "KILN_CUDA_PERM_TILE_VEC");
    cu->layout_tile = switch_on(0, "KILN_CUDA_LAYOUT_TILE");
    cu->gather_staged = switch_on(0, "KILN_CUDA_GATHER_STAGED");
    cu->dw_exact = switch_on(0, "KILN_CUDA_DW_EXACT");
    cu->gap_vec = switch_on(0, "KILN_CUDA_GAP_VEC");
    {
        const char *e = getenv("KILN_CUDA_DW_PIPE");
        cu->dw_pipe = e && strcmp(e, "0") == 0 ? -1 : e && strcmp(e, "1") == 0 ? 1 : 0;
    }
    {
        /* KILN_CUDA_DW_PIPE_GRID=n: at most n pipelined depthwise blocks per channel chunk, so
         * that a test's small problems give each block several tiles (its double buffer) */
        const char *e = getenv("KILN_CUDA_DW_PIPE_GRID");
        const long n = e ? atol(e) : 0;
        cu->dw_pipe_grid = n > 0 && n < 65536 ? (int)n : 0;
    }
    {
        const char *e = getenv("KILN_CUDA_LN_PIPE");
        cu->ln_pipe = !(e && strcmp(e, "0") == 0); /* on: bench/NOTES.md "z37 results" */
        e = getenv("KILN_CUDA_LN_PIPE_GRID");
        const long n = e ? atol(e) : 0;
        cu->ln_pipe_grid = n > 0 && n < 65536 ? (int)n : 0;
    }
    {
        const char *e = getenv("KILN_CUDA_FLASH_GRID");
        const long n = e ? atol(e) : 0;
        cu->flash_grid = n > 0 && n < 0x7fffffffL ? (int)n : 0;
    }
    {
        const char *e = getenv("KILN_CUDA_FLASH_MT");
        cu->flash_mt = e && (strcmp(e, "1") == 0 || strcmp(e, "2") == 0) ? e[0] - '0' : 0;
    }
    {
        const char *e = getenv("KILN_CUDA_DW_GRAPH");
        cu->dw_graph = e && (e[0] == '0' || e[0] == '1' || e[0] == '2') && !e[1] ? e[0] - '0' : -1;
        e = getenv("KILN_CUDA_CONV_GRAPH");
        cu->conv_graph = e && (e[0] == '0' || e[0] == '1') && !e[1] ? e[0] - '0' : -1;
        e = getenv("KILN_CUDA_GEMM_RES");
        cu->gemm_res = e && strcmp(e, "fused") == 0 ? 1 : e && strcmp(e, "split") == 0 ? 2 : 0;
    }
    /* 1 timed (the default), 2 the graph wherever it has an engine, 3 (or off, by the
     * option's sign or KILN_CUDA_CONV_STATS=0) the convolution + statistics kernel. The
     * default is the kernel under deterministic: cuDNN's GenStats adds its partial sums in
     * no fixed order (two ResNet-50 runs on an H100 ended at losses 6.47 and 5.70) */
    cu->conv_bn_stats = o->conv_bn_stats == 1 || o->conv_bn_stats == 2 ? o->conv_bn_stats
                        : o->conv_bn_stats != 0 || o->deterministic || !switch_on(0, "KILN_CUDA_CONV_STATS") ? 0
                                                                                                             : 1;
    cu->deterministic = o->deterministic != 0;
    cu->algo_path[0] = '\0';
    if (o->algo_cache) {
        if ((size_t)snprintf(cu->algo_path, sizeof cu->algo_path, "%s", o->algo_cache) >= sizeof cu->algo_path)
            cu->algo_path[0] = '\0';
    } else if (!kiln_autotune_cache_path(cu->algo_path, sizeof cu->algo_path)) {
        cu->algo_path[0] = '\0';
    }
    kiln_algo_cache_prefix(cu->algo_prefix, sizeof cu->algo_prefix, cu->props.name, (long)cudnnGetVersion());
    if (!cu->autotune || !cu->algo_path[0]) return;
    int added = kiln_algo_cache_load(cu->algo_path, cu->algo_prefix, &cu->algos, &cu->n_algos, &cu->cap_algos);
    if (added > 0) cu->stats.algos_loaded = added;
}

/* Side streams for captured plans: KILN_SIDE_STREAMS (0 to KILN_CUDA_MAX_SIDE_STREAMS)
 * when set, for experiments; else 2. */
static int side_streams_wanted(void) {
    const char *e = getenv("KILN_SIDE_STREAMS");
    if (!e || !*e) return 2;
    char *end = NULL;
    const long n = strtol(e, &end, 10);
    if (*end || n < 0) return 2;
    return n > KILN_CUDA_MAX_SIDE_STREAMS ? KILN_CUDA_MAX_SIDE_STREAMS : (int)n;
}

/* Everything create sets up after the struct exists; kiln_cuda_free undoes any part. */
static kiln_status setup(kiln_cuda *cu, const kiln_cuda_options *o) {
    kiln_context *ctx = cu->ctx;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(cu->device));
    kiln_status st = read_props(cu);
    if (st) return st;
    if (cu->props.cc_major < 8)
        return kiln_fail(ctx, KILN_ERR_DEVICE,
                         "CUDA device %d (%s) has compute capability %d.%d; kiln needs 8.0 or newer",
                         cu->device, cu->props.name, cu->props.cc_major, cu->props.cc_minor);
    KILN_CUDA_CHECK(ctx, cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking));
    cu->main_stream = cu->stream;
    cu->n_side = o->no_streams ? 0 : side_streams_wanted();
    for (int i = 0; i < cu->n_side; i++)
        KILN_CUDA_CHECK(ctx, cudaStreamCreateWithFlags(&cu->side[i], cudaStreamNonBlocking));
    for (int i = 0; i < 2; i++)
        KILN_CUDA_CHECK(ctx, cudaEventCreateWithFlags(&cu->staged[i], cudaEventDisableTiming));
    cu->caller = (cudaStream_t)o->caller_stream;
    for (int i = 0; cu->caller && i < 2; i++)
        KILN_CUDA_CHECK(ctx, cudaEventCreateWithFlags(&cu->join[i], cudaEventDisableTiming));
    KILN_CUDA_CHECK(ctx, cudaMalloc((void **)&cu->flag, sizeof(kiln_cuda_flag)));
    KILN_CUDA_CHECK(ctx, cudaMemsetAsync(cu->flag, 0, sizeof(kiln_cuda_flag), cu->stream));
    KILN_CUDA_CHECK(ctx, cudaMalloc((void **)&cu->rng_seed, sizeof(uint64_t)));
    KILN_CUDA_CHECK(ctx, cudaMemsetAsync(cu->rng_seed, 0, sizeof(uint64_t), cu->stream));
    cu->staging_bytes = o->staging_bytes ? o->staging_bytes : STAGING_DEFAULT;
    if (!o->staging_bytes) {
        /* KILN_CUDA_STAGING_MB (kiln train sets it when streaming data): halves that hold a
         * whole batch, so that its host copy does not wait for the step ahead of it */
        const char *e = getenv("KILN_CUDA_STAGING_MB");
        const long mb = e ? atol(e) : 0;
        if (mb > 0 && mb <= 65536) cu->staging_bytes = (size_t)mb << 20;
    }
    cu->allow_tf32 = o->allow_tf32 != 0;
    const char *lt = getenv("KILN_CUDA_LT_WS");
    cu->lt_ws_mode = lt && strcmp(lt, "shared") == 0 ? KILN_CUDA_LT_WS_SHARED
                     : lt && strcmp(lt, "none") == 0 ? KILN_CUDA_LT_WS_NONE
                                                     : KILN_CUDA_LT_WS_OWN;
    if (cu->staging_bytes < ((size_t)64 << 10)) cu->staging_bytes = (size_t)64 << 10;
    cu->staging_bytes &= ~(size_t)255; /* two equal, aligned halves */
    KILN_CUDA_CHECK(ctx, cudaMallocHost((void **)&cu->staging, cu->staging_bytes));
    if (o->arena_bytes) {
        KILN_CUDA_CHECK(ctx, cudaMalloc(&cu->arena, o->arena_bytes));
        cu->arena_bytes = o->arena_bytes;
        cu->nvtx = nvtxDomainCreateA("kiln");
        nvtxMemVirtualRangeDesc_t range = {.ptr = cu->arena, .size = cu->arena_bytes};
        nvtxMemHeapDesc_t heap = {.extCompatID = NVTX_EXT_COMPATID_MEM,
                                  .structSize = sizeof heap,
                                  .usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR,
                                  .type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS,
                                  .typeSpecificDescSize = sizeof range,
                                  .typeSpecificDesc = &range};
        cu->arena_heap = nvtxMemHeapRegister(cu->nvtx, &heap);
    }
    if (o->workspace_bytes) {
        KILN_CUDA_CHECK(ctx, cudaMalloc(&cu->workspace, o->workspace_bytes));
        cu->workspace_bytes = o->workspace_bytes;
    }
    KILN_CUDA_CHECK(ctx, cudaStreamSynchronize(cu->stream));
    load_algos(cu, o);
    return KILN_OK;
}

kiln_status kiln_cuda_create(kiln_context *ctx, const kiln_cuda_options *opts, kiln_cuda **out) {
    if (!out) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    kiln_cuda_options o = {0};
    if (opts) o = *opts;
    int n = 0;
    kiln_status st = kiln_cuda_device_count(ctx, &n);
    if (st) return st;
    if (o.device < 0 || o.device >= n) return no_device(ctx, o.device);
#ifdef KILN_CUDA_CHECK_ONLY
    /* scripts/test.sh's build compiles the CUDA code to check it (NVVM at -O0): its kernels
     * would run, slowly, from unoptimized PTX */
    return kiln_fail(ctx, KILN_ERR_UNSUPPORTED,
                     "this kiln's CUDA code was compiled to check it only (KILN_CUDA_CHECK_ONLY, scripts/test.sh's "
                     "build): build it with scripts/build.sh to run on a GPU");
#endif
    kiln_cuda *cu = kiln_calloc(ctx, 1, sizeof *cu, "a CUDA context");
    if (!cu) return KILN_ERR_OUT_OF_MEMORY;
    cu->ctx = ctx;
    cu->device = o.device;
    st = setup(cu, &o);
    if (st) {
        /* keep the message of the failure, not of what freeing might say */
        kiln_cuda_free(cu);
        return st;
    }
    *out = cu;
    return KILN_OK;
}

void kiln_cuda_free(kiln_cuda *cu) {
    if (!cu) return;
    /* Errors while tearing down cannot be acted on; the stream is drained first so no
     * kernel still uses what is freed. cudaGetLastError clears what they leave. */
    if (cudaSetDevice(cu->device) == cudaSuccess && cu->stream) cudaStreamSynchronize(cu->stream);
    if (cu->dnn_conv) cudnnDestroyConvolutionDescriptor(cu->dnn_conv);
    if (cu->dnn_act) cudnnDestroyActivationDescriptor(cu->dnn_act);
    if (cu->dnn_b) cudnnDestroyTensorDescriptor(cu->dnn_b);
    if (cu->dnn_w) cudnnDestroyFilterDescriptor(cu->dnn_w);
    if (cu->dnn_x) cudnnDestroyTensorDescriptor(cu->dnn_x);
    if (cu->dnn_y) cudnnDestroyTensorDescriptor(cu->dnn_y);
    if (cu->dnn) cudnnDestroy(cu->dnn);
    if (cu->lt) cublasLtDestroy(cu->lt);
    kiln_cuda_fused_cache_free(cu);
    kiln_cuda_genstats_free(cu);
    if (cu->arena_heap) nvtxMemHeapUnregister(cu->nvtx, cu->arena_heap);
    if (cu->nvtx) nvtxDomainDestroy(cu->nvtx);
    if (cu->arena) cudaFree(cu->arena);
    if (cu->workspace) cudaFree(cu->workspace);
    for (int i = 0; i <= KILN_CUDA_MAX_SIDE_STREAMS; i++)
        if (cu->lt_ws[i]) cudaFree(cu->lt_ws[i]);
    if (cu->flag) cudaFree(cu->flag);
    if (cu->rng_seed) cudaFree(cu->rng_seed);
    if (cu->staging) cudaFreeHost(cu->staging);
    for (int i = 0; i < 2; i++)
        if (cu->staged[i]) cudaEventDestroy(cu->staged[i]);
    for (int i = 0; i < 2; i++)
        if (cu->join[i]) cudaEventDestroy(cu->join[i]);
    for (int i = 0; i < cu->n_side; i++)
        if (cu->side[i]) cudaStreamDestroy(cu->side[i]);
    if (cu->main_stream) cudaStreamDestroy(cu->main_stream);
    cudaGetLastError();
    free(cu->algos);
    free(cu);
}

const kiln_cuda_props *kiln_cuda_get_props(const kiln_cuda *cu) { return &cu->props; }
void kiln_cuda_get_stats(const kiln_cuda *cu, kiln_cuda_stats *out) { *out = cu->stats; }
kiln_context *kiln_cuda_context(const kiln_cuda *cu) { return cu->ctx; }
void *kiln_cuda_stream(const kiln_cuda *cu) { return (void *)cu->stream; }
int kiln_cuda_side_streams(const kiln_cuda *cu) { return cu->n_side; }

kiln_status kiln_cuda_use_stream(kiln_cuda *cu, int i) {
    if (i < 0 || i > cu->n_side)
        return kiln_fail(cu->ctx, KILN_ERR_INTERNAL, "stream %d asked for; this context has %d side streams", i,
                         cu->n_side);
    cudaStream_t s = i ? cu->side[i - 1] : cu->main_stream;
    if (s == cu->stream) return KILN_OK;
    cu->stream = s;
    if (cu->dnn) KILN_CUDNN_CHECK(cu->ctx, cudnnSetStream(cu->dnn, s));
    return KILN_OK;
}

/* ---------------------------------------------------------------- handles */

kiln_status kiln_cuda_dnn(kiln_cuda *cu, kiln_context *ctx, cudnnHandle_t *out) {
    if (!cu->dnn) {
        cudnnHandle_t h = NULL;
        KILN_CUDNN_CHECK(ctx, cudnnCreate(&h));
        cudnnStatus_t e = cudnnSetStream(h, cu->stream);
        if (e != CUDNN_STATUS_SUCCESS) {
            kiln_status st = kiln_cuda_dnn_error(ctx, e, "cudnnSetStream(h, cu->stream)", __FILE__, __LINE__);
            cudnnDestroy(h);
            return st;
        }
        cu->dnn = h;
        /* descriptors that conv.c sets per call, so that no call allocates */
        KILN_CUDNN_CHECK(ctx, cudnnCreateTensorDescriptor(&cu->dnn_x));
        KILN_CUDNN_CHECK(ctx, cudnnCreateTensorDescriptor(&cu->dnn_y));
        KILN_CUDNN_CHECK(ctx, cudnnCreateTensorDescriptor(&cu->dnn_b));
        KILN_CUDNN_CHECK(ctx, cudnnCreateFilterDescriptor(&cu->dnn_w));
        KILN_CUDNN_CHECK(ctx, cudnnCreateConvolutionDescriptor(&cu->dnn_conv));
        KILN_CUDNN_CHECK(ctx, cudnnCreateActivationDescriptor(&cu->dnn_act));
    }
    if (!cu->dnn_x || !cu->dnn_y || !cu->dnn_b || !cu->dnn_w || !cu->dnn_conv || !cu->dnn_act)
        return kiln_fail(ctx, KILN_ERR_DEVICE, "cuDNN descriptors could not be created earlier");
    *out = cu->dnn;
    return KILN_OK;
}

kiln_status kiln_cuda_lt(kiln_cuda *cu, kiln_context *ctx, cublasLtHandle_t *out) {
    if (!cu->lt) KILN_CUBLASLT_CHECK(ctx, cublasLtCreate(&cu->lt));
    *out = cu->lt;
    return KILN_OK;
}

/* ----------------------------------------------------------------- memory */

kiln_status kiln_cuda_arena_alloc_at(kiln_cuda *cu, size_t offset, size_t bytes, void **out) {
    *out = NULL;
    const size_t span = offset + bytes;
    size_t need = (span + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1);
    if (span < bytes || need < span || need > cu->arena_bytes - cu->arena_used)
        return kiln_fail(cu->ctx, KILN_ERR_OUT_OF_MEMORY,
                         "the CUDA arena of %zu bytes has %zu free, %zu were asked for",
                         cu->arena_bytes, cu->arena_bytes - cu->arena_used, span);
    *out = (char *)cu->arena + cu->arena_used + offset;
    cu->arena_used += need;
    if (bytes) { /* exactly the bytes asked for: the offset before them and the padding after are not theirs */
        nvtxMemVirtualRangeDesc_t range = {.ptr = *out, .size = bytes};
        nvtxMemRegionsRegisterBatch_t batch = {.extCompatID = NVTX_EXT_COMPATID_MEM,
                                               .structSize = sizeof batch,
                                               .regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS,
                                               .heap = cu->arena_heap,
                                               .regionCount = 1,
                                               .regionDescElementSize = sizeof range,
                                               .regionDescElements = &range};
        nvtxMemRegionsRegister(cu->nvtx, &batch);
    }
    return KILN_OK;
}

kiln_status kiln_cuda_arena_alloc(kiln_cuda *cu, size_t bytes, void **out) {
    return kiln_cuda_arena_alloc_at(cu, 0, bytes, out);
}

void kiln_cuda_arena_reset(kiln_cuda *cu) {
    cu->arena_used = 0;
    if (cu->arena_heap) nvtxMemHeapReset(cu->nvtx, cu->arena_heap);
}

kiln_status kiln_cuda_workspace_reserve(kiln_cuda *cu, size_t bytes) {
    if (bytes <= cu->workspace_bytes) return KILN_OK;
    KILN_CUDA_CHECK(cu->ctx, cudaSetDevice(cu->device));
    KILN_CUDA_CHECK(cu->ctx, cudaStreamSynchronize(cu->stream));
    if (cu->workspace) {
        void *old = cu->workspace;
        cu->workspace = NULL;
        cu->workspace_bytes = 0;
        KILN_CUDA_CHECK(cu->ctx, cudaFree(old));
    }
    KILN_CUDA_CHECK(cu->ctx, cudaMalloc(&cu->workspace, bytes));
    cu->workspace_bytes = bytes;
    return KILN_OK;
}

void *kiln_cuda_workspace(const kiln_cuda *cu, size_t *bytes) {
    if (bytes) *bytes = cu->workspace_bytes;
    return cu->workspace;
}

/* ----------------------------------------------------------------- copies */

kiln_status kiln_cuda_upload(kiln_cuda *cu, void *dst, const void *src, size_t bytes) {
    kiln_context *ctx = cu->ctx;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(cu->device));
    const size_t half = cu->staging_bytes / 2;
    size_t done = 0;
    for (int h = 0; done < bytes; h ^= 1) {
        size_t n = bytes - done < half ? bytes - done : half;
        unsigned char *stage = cu->staging + (size_t)h * half;
        /* the previous copy out of this half must have finished before it is refilled */
        if (cu->staged_used[h]) KILN_CUDA_CHECK(ctx, cudaEventSynchronize(cu->staged[h]));
        memcpy(stage, (const char *)src + done, n);
        KILN_CUDA_CHECK(ctx, cudaMemcpyAsync((char *)dst + done, stage, n, cudaMemcpyHostToDevice,
                                             cu->stream));
        KILN_CUDA_CHECK(ctx, cudaEventRecord(cu->staged[h], cu->stream));
        cu->staged_used[h] = true;
        done += n;
    }
    return KILN_OK;
}

/* Device -> staging half h, on the stream. No wait is needed first: earlier copies out of
 * that half are ahead of this one on the same stream, and downloads drain before they
 * return. */
static kiln_status issue_download(kiln_cuda *cu, int h, const void *src, size_t n) {
    unsigned char *stage = cu->staging + (size_t)h * (cu->staging_bytes / 2);
    KILN_CUDA_CHECK(cu->ctx, cudaMemcpyAsync(stage, src, n, cudaMemcpyDeviceToHost, cu->stream));
    KILN_CUDA_CHECK(cu->ctx, cudaEventRecord(cu->staged[h], cu->stream));
    cu->staged_used[h] = true;
    return KILN_OK;
}

kiln_status kiln_cuda_download(kiln_cuda *cu, void *dst, const void *src, size_t bytes) {
    kiln_context *ctx = cu->ctx;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(cu->device));
    if (bytes == 0) return KILN_OK;
    const size_t half = cu->staging_bytes / 2;
    /* Two chunks in flight: chunk i+1 is copied into one half while chunk i is copied
     * out of the other. */
    size_t off[2] = {0, 0}, len[2] = {0, 0}, pos = 0;
    int cur = 0;
    kiln_status st;
    len[cur] = bytes < half ? bytes : half;
    if ((st = issue_download(cu, cur, src, len[cur])) != KILN_OK) return st;
    pos = len[cur];
    while (len[cur]) {
        int nxt = cur ^ 1;
        if (pos < bytes) {
            off[nxt] = pos;
            len[nxt] = bytes - pos < half ? bytes - pos : half;
            if ((st = issue_download(cu, nxt, (const char *)src + pos, len[nxt])) != KILN_OK)
                return st;
            pos += len[nxt];
        }
        KILN_CUDA_CHECK(ctx, cudaEventSynchronize(cu->staged[cur]));
        memcpy((char *)dst + off[cur], cu->staging + (size_t)cur * half, len[cur]);
        len[cur] = 0;
        cur = nxt;
    }
    return KILN_OK;
}

kiln_status kiln_cuda_copy_d2d(kiln_cuda *cu, void *dst, const void *src, size_t bytes) {
    KILN_CUDA_CHECK(cu->ctx, cudaSetDevice(cu->device));
    return kiln_cuda_io_copy(cu, cu->stream, dst, src, bytes); /* the device-IO graph's copy, eager */
}

kiln_status kiln_cuda_join_caller(kiln_cuda *cu, bool end) {
    if (!cu->caller) return KILN_OK;
    KILN_CUDA_CHECK(cu->ctx, cudaSetDevice(cu->device));
    cudaStream_t from = end ? cu->main_stream : cu->caller, to = end ? cu->caller : cu->main_stream;
    KILN_CUDA_CHECK(cu->ctx, cudaEventRecord(cu->join[end], from));
    KILN_CUDA_CHECK(cu->ctx, cudaStreamWaitEvent(to, cu->join[end], 0));
    return KILN_OK;
}

bool kiln_cuda_has_caller_stream(const kiln_cuda *cu) { return cu->caller != NULL; }

void *kiln_cuda_caller_stream(const kiln_cuda *cu) { return cu->caller ? (void *)cu->caller : (void *)cu->main_stream; }

kiln_status kiln_cuda_fill_bytes(kiln_cuda *cu, void *dst, int value, size_t bytes) {
    KILN_CUDA_CHECK(cu->ctx, cudaSetDevice(cu->device));
    KILN_CUDA_CHECK(cu->ctx, cudaMemsetAsync(dst, value, bytes, cu->stream));
    return KILN_OK;
}

kiln_status kiln_cuda_sync(kiln_cuda *cu) {
    kiln_context *ctx = cu->ctx;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(cu->device));
    kiln_cuda_flag f;
    /* the flag rides behind the stream's work, so it sees every kernel enqueued so far */
    KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(&f, cu->flag, sizeof f, cudaMemcpyDeviceToHost, cu->stream));
    KILN_CUDA_CHECK(ctx, cudaStreamSynchronize(cu->stream));
    if (f.code == 0) return KILN_OK;
    KILN_CUDA_CHECK(ctx, cudaMemsetAsync(cu->flag, 0, sizeof(kiln_cuda_flag), cu->stream));
    KILN_CUDA_CHECK(ctx, cudaStreamSynchronize(cu->stream));
    if (f.code == KILN_CUDA_FLAG_GATHER_INDEX)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                         "Gather on cuda: index %lld is out of range (found on the device; "
                         "those output elements were set to zero)",
                         f.value);
    if (f.code == KILN_CUDA_FLAG_TARGET_RANGE)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                         "a loss on cuda: class target %lld is outside [0, C) (found on the device; "
                         "it was left out of the loss and its gradient)",
                         f.value);
    if (f.code == KILN_CUDA_FLAG_DROPOUT_RATIO)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                         "Dropout on cuda: ratio %g is outside [0, 1) in training mode (found on the "
                         "device; the output was zeroed)",
                         (double)f.value * 1e-6);
    if (f.code == KILN_CUDA_FLAG_ROI_BATCH)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                         "RoiAlign on cuda: batch index %lld is outside [0, N) of X (found on the device; "
                         "that region's outputs were set to zero)",
                         f.value);
    return kiln_fail(ctx, KILN_ERR_INTERNAL, "a CUDA kernel raised unknown error flag %d", f.code);
}

/* ------------------------------------------------------------------ misc */

unsigned kiln_cuda_blocks(const kiln_cuda *cu, int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    int64_t cap = (int64_t)cu->props.sm_count * 32;
    if (cap < 1) cap = 1;
    if (b > cap) b = cap;
    return b < 1 ? 1u : (unsigned)b;
}

bool kiln_cuda_float_dtype(kiln_dtype t) {
    return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16;
}
