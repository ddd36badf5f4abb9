/*
 * cuda_backend.h — kiln's CUDA backend: the device context (kiln_cuda) and the kernel
 * table the planner looks ops up in. C interface; the kernels behind it are CUDA C in
 * the .cu files of src/cuda/, the host code that needs no CUDA compiler is C (.c files).
 *
 * THE CONTRACT every CUDA kernel follows
 *
 *   - A kernel has type kiln_cuda_fn and takes the same kiln_op_ctx as the op's CPU
 *     reference forward (src/ops/): the same node and attributes, read with the same
 *     kiln_attr_* getters and defaults; the same dtypes and shapes, set by the op's infer.
 *     The difference: every c->in[k]->data, c->out[k]->data and c->workspace is a DEVICE
 *     pointer. Inputs whose values shape the graph (Reshape's shape, ...) are device
 *     pointers too: kernels never read device memory from the host.
 *   - Work goes on the kiln_cuda's one compute stream. Kernels return without waiting
 *     for the device; results are ready once kiln_cuda_sync (or a later download)
 *     returns. Kernels never allocate device or pinned memory and never synchronize,
 *     with one exception: Conv searches for its cuDNN algorithm
 *     (cudnnFindConvolutionForwardAlgorithmEx, which times kernels and waits) the first
 *     time it meets a shape; the choice is cached on the kiln_cuda and on disk (see
 *     kiln_cuda_options). Run a plan once before capturing it into a CUDA graph.
 *   - Scratch: kiln_cuda_workspace_size says how many bytes of c->workspace a kernel
 *     needs for the shapes in c (0 for most); the caller provides at least that many,
 *     256-byte aligned, and sets c->workspace_size. Kernels check the size they are given.
 *   - Data buffers must be aligned to their element size; kernels take 16-byte vector
 *     paths only where pointers and counts allow, so any such alignment is correct.
 *   - Outputs of Reshape / Flatten / Identity may share input 0's storage (the op's
 *     alias_outputs); the kernel then copies nothing.
 *   - Layouts: dims are always logical NCHW; a 4-D tensor's `format` says whether its
 *     bytes are NCHW or NHWC (set by the layout pass, src/passes/layout.c). Kernels that
 *     honour NHWC read the formats of their inputs and outputs: Conv, kiln.FusedConv,
 *     MaxPool, AveragePool, GlobalAveragePool, BatchNormalization, the unary and binary
 *     elementwise ops, Identity, Dropout and the conversions kiln.ToNHWC / kiln.ToNCHW.
 *     Every other kernel's supports check rejects a 4-D NHWC tensor.
 *   - Errors come back as statuses with a message on c->kctx (kiln_cuda_run prefixes the
 *     op and node). Every CUDA runtime, cuDNN, cuBLASLt and NVRTC call and every launch
 *     is checked; device allocation failures are KILN_ERR_OUT_OF_MEMORY, other failures
 *     KILN_ERR_DEVICE, naming the call, the library's error string, file and line.
 *     Failures that depend on data and are found on the device (a Gather index out of
 *     range) are reported by the next kiln_cuda_sync as KILN_ERR_INVALID_ARGUMENT.
 *   - Precision: f32 is computed in f32 without TF32 (cuBLASLt CUBLAS_COMPUTE_32F,
 *     cuDNN CUDNN_FMA_MATH), so results match the CPU reference to ~1e-5 relative
 *     (reductions over K terms: ~1e-4). f16 and bf16 are read, computed in f32 (matrix
 *     products and convolutions with f32 accumulation) and rounded once to nearest even.
 *   - A kiln_cuda is used by one host thread at a time.
 *
 * Dtypes: the kernels take f32, f16 and bf16 (data movement ops: any dtype). What each
 * op supports beyond that is checked by kiln_cuda_supports, which names what is missing.
 */
#ifndef KILN_CUDA_BACKEND_H
#define KILN_CUDA_BACKEND_H

#ifdef __cplusplus
#include <cstdarg>
#include <cstddef>
#include <cstdint>
extern "C" {
#endif

#include "../core/internal.h"

/* ------------------------------------------------------------------ context */

typedef struct kiln_cuda kiln_cuda;

typedef struct kiln_cuda_options {
    int device;             /* device ordinal (0: the first) */
    size_t arena_bytes;     /* the device arena, one cudaMalloc (0: none) */
    size_t workspace_bytes; /* the device workspace to start with (0: none; see reserve) */
    size_t staging_bytes;   /* pinned host staging for copies (0: 8 MiB) */
    /* Convolution algorithms. Zero: cuDNN's algorithms are timed per shape the first
     * time it is met (cudnnFindConvolutionForwardAlgorithmEx), and the choices are kept
     * in memory and on disk. no_autotune: cuDNN's heuristic picks instead
     * (cudnnGetConvolutionForwardAlgorithm_v7): no timing, nothing read or written on
     * disk. deterministic: only algorithms cuDNN reports as deterministic. */
    int no_autotune;
    int deterministic;
    /* The on-disk cache of timed choices: NULL for the default
     * ($KILN_CACHE_DIR/cudnn-algos.txt, else $XDG_CACHE_HOME/kiln/cudnn-algos.txt, else
     * ~/.cache/kiln/cudnn-algos.txt; none when KILN_CACHE_DIR is set empty), "" for none,
     * or a file path. Read when the kiln_cuda is created; rewritten (temporary file and
     * rename) whenever a new choice is timed. Failing to write it is not an error. */
    const char *algo_cache;
} kiln_cuda_options;

typedef struct kiln_cuda_props {
    char name[256];
    int sm_count;
    int cc_major, cc_minor;   /* compute capability */
    size_t total_memory;      /* bytes of device memory */
    int l2_bytes;
    size_t smem_per_block_optin; /* shared memory a block may opt into */
} kiln_cuda_props;

/* Number of CUDA devices (0, with KILN_OK, on a machine without a GPU or driver). */
kiln_status kiln_cuda_device_count(kiln_context *ctx, int *count);

/* Open device opts->device (opts NULL: defaults). On a machine without a CUDA device or
 * driver this returns KILN_ERR_DEVICE with a message saying so, and *out stays NULL.
 * Devices below compute capability 8.0 are rejected (kiln is built for sm_80 and sm_90). */
kiln_status kiln_cuda_create(kiln_context *ctx, const kiln_cuda_options *opts, kiln_cuda **out);
/* Waits for the stream, then releases everything. NULL does nothing. */
void kiln_cuda_free(kiln_cuda *cu);

const kiln_cuda_props *kiln_cuda_get_props(const kiln_cuda *cu);

/* What the convolution kernels did so far (tests, profiles). */
typedef struct kiln_cuda_stats {
    int algos_loaded;     /* choices read from the disk cache at creation */
    int algos_timed;      /* shapes whose algorithms were timed (cudnnFind) */
    int algos_heuristic;  /* shapes whose algorithm cuDNN's heuristic chose */
    int algos_written;    /* timed choices written to the disk cache */
    int fused_calls;      /* kiln.FusedConv run by cudnnConvolutionBiasActivationForward */
    int fused_split;      /* kiln.FusedConv run as a convolution and an epilogue kernel */
    char fused_refused[256]; /* why cuDNN last refused a fused call ("" if never) */
} kiln_cuda_stats;
void kiln_cuda_get_stats(const kiln_cuda *cu, kiln_cuda_stats *out);
kiln_context *kiln_cuda_context(const kiln_cuda *cu);
/* The compute stream, a cudaStream_t. */
void *kiln_cuda_stream(const kiln_cuda *cu);

/* ------------------------------------------------------------------- memory */

/* The arena: base pointer and size. Planners place buffers at offsets into it;
 * kiln_cuda_arena_alloc is a bump allocator over it (256-byte aligned) for tests and
 * simple callers, and kiln_cuda_arena_reset forgets everything it handed out. */
void *kiln_cuda_arena(const kiln_cuda *cu, size_t *bytes);
kiln_status kiln_cuda_arena_alloc(kiln_cuda *cu, size_t bytes, void **out);
void kiln_cuda_arena_reset(kiln_cuda *cu);

/* The workspace: grown (never shrunk) to at least bytes; its contents are lost when it
 * grows. Waits for the stream before freeing the old buffer. */
kiln_status kiln_cuda_workspace_reserve(kiln_cuda *cu, size_t bytes);
void *kiln_cuda_workspace(const kiln_cuda *cu, size_t *bytes);

/* ------------------------------------------------------------------- copies */

/* Host -> device through the pinned staging buffer, on the stream. The host buffer may
 * be reused as soon as this returns. */
kiln_status kiln_cuda_upload(kiln_cuda *cu, void *dst, const void *src, size_t bytes);
/* Device -> host through the pinned staging buffer, after the work already on the
 * stream; waits for the copy. */
kiln_status kiln_cuda_download(kiln_cuda *cu, void *dst, const void *src, size_t bytes);
/* Set bytes of device memory to the byte value, on the stream (0xFF poisons floats with
 * NaN). */
kiln_status kiln_cuda_fill_bytes(kiln_cuda *cu, void *dst, int value, size_t bytes);
/* Wait for the stream; then report errors the kernels found on the device. */
kiln_status kiln_cuda_sync(kiln_cuda *cu);

/* ------------------------------------------------------------------ kernels */

typedef kiln_status (*kiln_cuda_fn)(kiln_cuda *cu, kiln_op_ctx *c);

/* The kernel of op (a registry index), or NULL when the op has none. */
kiln_cuda_fn kiln_cuda_kernel_for(int op);
/* KILN_OK when op c->node, with the dtypes, shapes and attributes in c (after infer;
 * data not needed), runs on CUDA; otherwise KILN_ERR_UNSUPPORTED and a message
 * "<op> node '<name>' [...]: not supported on cuda: <what>" on c->kctx. */
kiln_status kiln_cuda_supports(kiln_op_ctx *c);
/* Device workspace bytes the kernel needs for c's shapes. */
kiln_status kiln_cuda_workspace_size(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
/* Run c->node's kernel (checks that one exists), prefixing failures with op and node. */
kiln_status kiln_cuda_run(kiln_cuda *cu, kiln_op_ctx *c);

/* The table itself, for tests: entry i's ONNX op name (NULL when out of range). */
int kiln_cuda_kernel_count(void);
const char *kiln_cuda_kernel_name(int i);

/* ------------------------------------------------------------------- NVRTC */

/* Runtime-compiled CUDA C: source compiled by NVRTC to a cubin for this device, loaded
 * with cudaLibraryLoadData. The seed of generated fusion kernels. */
typedef struct kiln_cuda_module kiln_cuda_module;

/* Compile source (name is used in messages; the compile log is in the message on
 * failure). Kernels in it should be extern "C" so their names are not mangled. */
kiln_status kiln_cuda_module_compile(kiln_cuda *cu, const char *name, const char *source,
                                     kiln_cuda_module **out);
/* A launchable handle (a cudaKernel_t) for kernel `kernel` of module m. */
kiln_status kiln_cuda_module_kernel(kiln_cuda *cu, kiln_cuda_module *m, const char *kernel,
                                    void **fn);
/* Launch fn on the stream with a 1-D grid; args as for cudaLaunchKernel. */
kiln_status kiln_cuda_module_launch(kiln_cuda *cu, void *fn, unsigned grid, unsigned block,
                                    size_t smem, void **args);
void kiln_cuda_module_free(kiln_cuda_module *m);

#ifdef __cplusplus
}
#endif
#endif /* KILN_CUDA_BACKEND_H */
