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
 *   - Values on the host: kernels that need such values when they launch (Pad's pads,
 *     Slice's starts / ends / axes / steps, Resize's scales / sizes and a constant roi, the
 *     reductions' axes, Range's start and delta) read them from c->host_in[i], the host
 *     tensor of input i in the host plan, whose data is set for every value known when
 *     the plan is built (constants, folded values, value inputs). The CUDA plan sets
 *     host_in from its host contexts (cuda_plan.c); callers that build contexts by hand
 *     (tests) point it at their host tensors; a kernel that needs it and finds it NULL
 *     fails with KILN_ERR_INTERNAL. The values are read at launch and passed by value,
 *     so a captured CUDA graph replays them. kiln_cuda_supports is called either on the
 *     planner's host context (host_in NULL, in[] the host tensors) or on a device context
 *     with host_in set, and reads values through whichever holds them.
 *   - Work goes on the kiln_cuda's one compute stream. Kernels return without waiting
 *     for the device; results are ready once kiln_cuda_sync (or a later download)
 *     returns. Kernels never allocate device or pinned memory and never synchronize,
 *     with one exception: Conv, kiln.FusedConv, kiln.ConvGradInput and kiln.ConvGradWeight
 *     search for their cuDNN algorithm (cudnnFindConvolution*AlgorithmEx, which times
 *     kernels and waits) the first time they meet a shape; the choice is cached on the
 *     kiln_cuda and on disk (see kiln_cuda_options). Run a plan once before capturing it
 *     into a CUDA graph. Generated kernels (kiln.FusedElementwise) are compiled by NVRTC
 *     and loaded once per pattern in kiln_cuda_prepare (or on their first run when nothing
 *     prepared them), and cached on the kiln_cuda as well.
 *   - Scalars a kernel reads at run time (Dropout's ratio and training_mode, a loss
 *     gradient's dLoss, Clip's bounds) are read on the device, so a captured graph
 *     replays with whatever they hold. Random kernels read the run seed from the
 *     kiln_cuda's device seed (kiln_cuda_rng_*), not c->seed.
 *   - Scratch: kiln_cuda_workspace_size says how many bytes of c->workspace a kernel
 *     needs for the shapes in c (0 for most); the caller provides at least that many,
 *     256-byte aligned, and sets c->workspace_size. Kernels check the size they are given.
 *   - Data buffers must be aligned to their element size; kernels take 16-byte vector
 *     paths only where pointers and counts allow, so any such alignment is correct.
 *   - Outputs of Reshape / Flatten / Identity / Squeeze / Unsqueeze, and of a
 *     kiln.ReduceSumTo that sums nothing, may share input 0's storage (the op's
 *     alias_outputs); the kernel then copies nothing.
 *   - Layouts: dims are always logical NCHW; a 4-D tensor's `format` says whether its
 *     bytes are NCHW or NHWC (set by the layout pass, src/passes/layout.c). Kernels that
 *     honour NHWC read the formats of their inputs and outputs: Conv, kiln.FusedConv,
 *     MaxPool, AveragePool, GlobalAveragePool, BatchNormalization, the unary and binary
 *     elementwise ops, Identity, Dropout (an NHWC X also into an NCHW Y and mask),
 *     kiln.DropoutGrad (an NHWC dX from NCHW dY and mask), the gradients of the NHWC ops
 *     and the conversions kiln.ToNHWC / kiln.ToNCHW. Every other kernel's supports check
 *     rejects a 4-D NHWC tensor.
 *   - Errors come back as statuses with a message on c->kctx (kiln_cuda_run prefixes the
 *     op and node). Every CUDA runtime, cuDNN, cuBLASLt and NVRTC call and every launch
 *     is checked; device allocation failures are KILN_ERR_OUT_OF_MEMORY, other failures
 *     KILN_ERR_DEVICE, naming the call, the library's error string, file and line.
 *     Failures that depend on data and are found on the device (a Gather index or a
 *     loss's class target out of range, a training Dropout ratio outside [0, 1)) are
 *     reported by the next kiln_cuda_sync as KILN_ERR_INVALID_ARGUMENT.
 *   - Precision: f32 is computed in f32 without TF32 (cuBLASLt CUBLAS_COMPUTE_32F,
 *     cuDNN CUDNN_FMA_MATH), so results match the CPU reference to ~1e-5 relative
 *     (reductions over K terms: ~1e-4). f16 and bf16 are read, computed in f32 (matrix
 *     products and convolutions with f32 accumulation) and rounded once to nearest even.
 *   - A kiln_cuda is used by one host thread at a time.
 *
 * Dtypes: the kernels take f32, f16 and bf16 (data movement ops, Cast, comparisons and
 * Where: any dtype). What each op supports beyond that is checked by kiln_cuda_supports,
 * which names what is missing.
 *
 * Ops: the ONNX ops of the table in table.c and kiln's internal gradient ops that a
 * training graph runs (UnaryGrad, DropoutGrad, ConvGradInput / Weight / Bias, MaxPoolGrad,
 * SoftmaxGrad, LogSoftmaxGrad, NegativeLogLikelihoodLossGrad, ReduceSumTo, GemmGradC).
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
    int allow_tf32;         /* 1: f32 convolutions and matrix products may use TF32 tensor
                               cores (PyTorch's default for convolutions); 0: strict f32 */
    /* Convolution algorithms. Zero: cuDNN's algorithms are timed per shape the first
     * time it is met (cudnnFindConvolutionForwardAlgorithmEx), and the choices are kept
     * in memory and on disk. no_autotune: cuDNN's heuristic picks instead
     * (cudnnGetConvolutionForwardAlgorithm_v7): no timing, nothing read or written on
     * disk. deterministic: only algorithms cuDNN reports as deterministic. */
    int no_autotune;
    int deterministic;
    /* no_conv_gemm: 1x1 convolutions always go to cuDNN (else those with stride 1, no
     * padding, one group, in NHWC are cuBLASLt products: conv.c) */
    int no_conv_gemm;
    /* no_conv_direct: convolutions with one input channel and one group (forward, and
     * kiln.ConvGradWeight) always go to cuDNN (else kiln's direct kernels run them:
     * conv_direct.cu) */
    int no_conv_direct;
    /* no_conv_depthwise: depthwise convolutions (group == C == M) always go to cuDNN (else
     * kiln's kernels run their forward and kiln.ConvGradInput: conv_depthwise.cu) */
    int no_conv_depthwise;
    /* conv_dw_grad: depthwise weight gradients (kiln.ConvGradWeight) and NHWC input
     * gradients by conv_depthwise_grad.cu's kernels (with autotune used only where timed
     * faster than cuDNN). 0: the default, on (validated on an H100; convnext_tiny's training
     * step 2.6x faster); > 0 on, < 0 off. At 0 the environment variable KILN_CUDA_DW_GRAD=0
     * turns it off. Needs conv_depthwise (no_conv_depthwise off). */
    int conv_dw_grad;
    /* flash_attention: kiln.Attention in f16 / bf16 with head dims 32, 64 or 128 (equal)
     * and Q / K / V rows of 16-byte aligned runs by attention_flash.cu's FlashAttention-2
     * kernel; other Attention nodes keep attention.cu's kernels (kiln_cuda_stats.flash_refused
     * says why). 0: the default, on; > 0 on, < 0 off; at 0, KILN_CUDA_FLASH_ATTN=0 turns it
     * off. */
    int flash_attention;
    /* conv_bn_stats: kiln.FusedConv's statistics outputs (the conv-bn-stats pass's, issue 12;
     * src/cuda/conv_stats.c) through cuDNN's ConvolutionFwd -> GenStats graph where cuDNN has
     * an engine for it: 1 timed at plan time against the convolution + kiln's statistics
     * kernel (with autotune) and the faster kept, 2 the graph wherever it has one (tests),
     * 3 (or any other value but 0) always the convolution + statistics kernel. 0: the
     * default, 1, unless the environment variable KILN_CUDA_CONV_STATS=0 is set (which also
     * keeps the CUDA trainer from running the pass). */
    int conv_bn_stats;
    /* no_streams: a captured plan runs every node on the one stream (else the nodes off
     * its longest path run on side streams, joined into the captured graph as parallel
     * branches: cuda_plan.c) */
    int no_streams;
    /* The caller's cudaStream_t (NULL: none): kiln_cuda_join_caller orders kiln's stream
     * after it at the start of a run and it after kiln's stream at the end. */
    void *caller_stream;
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
    int conv_gemm_calls;  /* 1x1 convolutions run as cuBLASLt products */
    int conv_direct_calls; /* one-input-channel convolutions and weight gradients run by
                              conv_direct.cu's kernels */
    int conv_depthwise_calls; /* depthwise convolutions and input gradients run by
                                 conv_depthwise.cu's kernels */
    int conv_graph_calls; /* forwards run on cuDNN's graph API's ConvFwd (depthwise, and 1x1
                             ones with an activation cuBLASLt lacks; conv.c) */
    int conv_pointwise_calls; /* forwards of at most 64 values a window (1x1 products of few
                                 channels, RGB stems) run by conv_pointwise.cu */
    int graph_plans_kept; /* cuDNN graph problems whose plan was made alone, the engine an
                             earlier process timed fastest (cudnn_graph.c; the disk cache) */
    int conv_dw_grad_calls; /* depthwise weight and input gradients run by
                               conv_depthwise_grad.cu's kernels (conv_dw_grad) */
    int attention_flash_calls;     /* Attention nodes run by attention_flash.cu (flash_attention) */
    int attention_flash_fallbacks; /* with flash_attention on, nodes it did not take (attention.cu ran) */
    int attention_sdpa_calls;      /* Attention nodes run by cuDNN's fused attention (attention_sdpa.c) */
    int sdpa_kept_kiln;            /* Attention problems whose plan was not made: an earlier
                                      process kept kiln's kernel for them (the cache file) */
    char flash_refused[160];       /* why it last did not take one ("" if never) */
    int gemms_timed;      /* matrix product shapes whose cuBLASLt algorithms were timed */
    int gemm_candidates_skipped; /* cuBLASLt candidates turned down (matmul.c, lt_algo_safe), per call */
    int side_captured;    /* nodes captured on side streams (parallel branches of a graph) */
    char fused_refused[256]; /* why cuDNN last refused a fused call ("" if never) */
    int conv_stats_graph_calls;    /* kiln.FusedConv statistics by cuDNN's GenStats graph (conv_bn_stats) */
    int conv_stats_fallback_calls; /* ... by the convolution + statistics kernel */
    char conv_stats_why[256];      /* why the last fallback ran ("" if none) */
    int conv_prologue_graph_calls;    /* convolution prologues (conv-bn-prologue) by cuDNN's graphs (patterns c, f) */
    int conv_prologue_fallback_calls; /* ... by the fallback kernel (conv_prologue.cu) */
    int dw_timed;         /* depthwise problems whose paths (kiln's kernels, cuDNN, the graph) were timed */
    int dw_kept;          /* depthwise problems whose path an earlier process chose (the disk cache) */
} kiln_cuda_stats;
void kiln_cuda_get_stats(const kiln_cuda *cu, kiln_cuda_stats *out);
kiln_context *kiln_cuda_context(const kiln_cuda *cu);
/* The compute stream, a cudaStream_t. */
void *kiln_cuda_stream(const kiln_cuda *cu);
/* Side streams (kiln_cuda_options.no_streams): how many this context has (at most
 * KILN_CUDA_MAX_SIDE_STREAMS), and which one kernels are enqueued on from now (0: the main
 * one; kiln_cuda_stream returns it; cuDNN's handle follows). */
#define KILN_CUDA_MAX_SIDE_STREAMS 4
int kiln_cuda_side_streams(const kiln_cuda *cu);
kiln_status kiln_cuda_use_stream(kiln_cuda *cu, int i);

/* ------------------------------------------------------------------- memory */

/* The arena: kiln_cuda_arena_alloc is a bump allocator over it (256-byte aligned) for
 * tests and simple callers, and kiln_cuda_arena_reset forgets everything it handed out. */
kiln_status kiln_cuda_arena_alloc(kiln_cuda *cu, size_t bytes, void **out);
/* The same, `offset` bytes past a 256-byte boundary (tests of misaligned pointers). Each
 * block is registered as an NVTX memory region of exactly `bytes`, so compute-sanitizer
 * --nvtx=yes reports any access outside the blocks handed out. */
kiln_status kiln_cuda_arena_alloc_at(kiln_cuda *cu, size_t offset, size_t bytes, void **out);
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
/* A device-to-device copy by a kernel on `stream` (iocopy.cu: the device-IO graph's copies,
 * found in the graph by kiln_cuda_io_copy_fn, the kernel's address; its arguments are
 * dst, src, bytes). */
kiln_status kiln_cuda_io_copy(kiln_cuda *cu, void *stream, void *dst, const void *src, size_t bytes);
const void *kiln_cuda_io_copy_fn(void);
/* Device-to-device copy on the stream (in order with the work enqueued): kiln_cuda_io_copy. */
kiln_status kiln_cuda_copy_d2d(kiln_cuda *cu, void *dst, const void *src, size_t bytes);
/* With a caller's stream (kiln_cuda_options.caller_stream): at a run's start kiln's stream
 * waits for the work already on it (end false), at its end the caller's stream waits for
 * kiln's (end true). Nothing without one. */
kiln_status kiln_cuda_join_caller(kiln_cuda *cu, bool end);
bool kiln_cuda_has_caller_stream(const kiln_cuda *cu);
/* The stream a caller orders its work with: its own when given, else kiln's main one. */
void *kiln_cuda_caller_stream(const kiln_cuda *cu);

/* ------------------------------------------------------------------ kernels */

typedef kiln_status (*kiln_cuda_fn)(kiln_cuda *cu, kiln_op_ctx *c);

/* The kernel of op (a registry index), or NULL when the op has none. Internal ops (domain
 * "kiln", e.g. kiln.FusedElementwise) have entries too. The other functions find a node's
 * entry by its op, or by its domain and op_type when node->op is -1 (a kiln op whose CPU
 * reference this build does not register: tests of its kernel). */
kiln_cuda_fn kiln_cuda_kernel_for(int op);
/* KILN_OK when op c->node, with the dtypes, shapes and attributes in c (after infer;
 * data not needed), runs on CUDA; otherwise KILN_ERR_UNSUPPORTED and a message
 * "<op> node '<name>' [...]: not supported on cuda: <what>" on c->kctx. */
kiln_status kiln_cuda_supports(kiln_op_ctx *c);
/* Device workspace bytes the kernel needs for c's shapes. */
kiln_status kiln_cuda_workspace_size(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
/* Work a kernel does once per shape before its first run, such as compiling generated
 * code (kiln.FusedElementwise). Planners call it when a plan is created, so that nothing
 * compiles inside a captured CUDA graph or a timed run; kernels that have such work do it
 * on their first run otherwise. KILN_OK for kernels with nothing to prepare. Needs c's
 * shapes and attributes, not its data. */
kiln_status kiln_cuda_prepare(kiln_cuda *cu, kiln_op_ctx *c);
/* Run c->node's kernel (checks that one exists), prefixing failures with op and node. */
kiln_status kiln_cuda_run(kiln_cuda *cu, kiln_op_ctx *c);

/* The table itself, for tests: entry i's op name, "kiln.<name>" for kiln's internal ops
 * (NULL when out of range). */
int kiln_cuda_kernel_count(void);
const char *kiln_cuda_kernel_name(int i);

/* ---------------------------------------------------------------- training
 *
 * What a training step needs on the device besides the op kernels, so that one captured
 * CUDA graph per step runs forward, backward and the update with no host synchronization:
 * the run seed of Dropout, the optimizer over all parameters in one launch, and fp16
 * loss scaling. Everything here is enqueued on the compute stream and is capturable
 * unless it says otherwise; values that change from step to step (learning rate, step
 * count, loss scale, seed) live in device memory and are read there.
 *
 * Before the first step: kiln_cuda_rng_next(cu, seed_base, counter), the first Dropout seed.
 * A step, as the trainer captures it:
 *     (the forward and backward kernels of the plan)           dLoss input bound to &state->loss_scale
 *     kiln_cuda_grad_check(cu, table, ...)                     fp16 only: inf/NaN -> found_inf
 *     kiln_cuda_optimizer_step(cu, &opts, table, ..., &tail)   skipped when found_inf; its last
 *                                                              block then does the step end, the
 *                                                              next Dropout seed and the batch
 *                                                              position (kiln_cuda_step_tail)
 * The step end, the seed and the position also exist as launches of their own
 * (kiln_cuda_train_step_end, kiln_cuda_rng_next, kiln_cuda_advance), with the same effect.
 */

/* --- the run seed. Random kernels (Dropout in training) read a uint64 seed from device
 * memory on the kiln_cuda rather than c->seed, so a captured graph draws new masks on each
 * replay. For the same seed value they draw exactly the CPU reference's masks (the CPU
 * run's kiln_op_ctx.seed). It starts at 0. */
/* The device address of the seed (8 bytes). */
uint64_t *kiln_cuda_rng_seed(kiln_cuda *cu);
/* seed := value. The value travels as a kernel argument: inside a capture it is frozen
 * into the graph; use kiln_cuda_rng_next there. */
kiln_status kiln_cuda_rng_set(kiln_cuda *cu, uint64_t value);
/* seed := base + *counter, then *counter += 1 (counter: device int64). Capturable: each
 * replay draws the next seed. The CPU trainer's seed of micro-step k is
 * opts.seed * 0x9E3779B97F4A7C15 + k: pass that product as base and a counter holding k. */
kiln_status kiln_cuda_rng_next(kiln_cuda *cu, uint64_t base, int64_t *counter);

/* --- device-side training state: one struct in device memory (8-byte aligned), written
 * only by the kernels below (and kiln_cuda_train_state_init). */
typedef struct kiln_cuda_train_state {
    float lr;            /* learning rate of the next update */
    float loss_scale;    /* the factor on the loss (fp16 loss scaling; 1 otherwise). An f32
                            scalar in device memory: bind &state->loss_scale as the f32 dLoss
                            input of the loss's gradient op and the scaling costs nothing */
    int32_t found_inf;   /* set by kiln_cuda_grad_check, cleared by kiln_cuda_train_step_end */
    int32_t clean_steps; /* steps without inf/NaN since the loss scale last changed */
    int64_t step;        /* updates applied: the optimizer's step count (Adam's bias
                            correction, SGD momentum's first step, the schedule) */
    int64_t skipped;     /* updates skipped for inf/NaN gradients */
    uint32_t arrived;    /* blocks of a kiln_cuda_optimizer_step with a tail that have
                            finished; 0 between launches (its last block resets it) */
    uint32_t reserved;
} kiln_cuda_train_state;

/* Upload the initial state: lr = kiln_lr_schedule(o, 0) (o NULL: 0), the given loss
 * scale (1 without scaling; PyTorch's GradScaler starts at 65536), counters 0. Enqueued
 * through the staging buffer: not for use inside a capture. */
kiln_status kiln_cuda_train_state_init(kiln_cuda *cu, const kiln_train_options *o, float loss_scale,
                                       kiln_cuda_train_state *state);

/* --- the parameter table: one entry per trained tensor, in device memory. The update
 * walks the parameters in chunks of KILN_CUDA_OPTIM_CHUNK elements, one block a chunk. */
#define KILN_CUDA_OPTIM_CHUNK 4096
typedef struct kiln_cuda_optim_entry {
    float *param;   /* (n) f32 (master) weights, updated in place */
    void *grad;     /* (n) gradient, of the dtype given to the step (f32, f16 or bf16) */
    float *state0;  /* (n) SGD: momentum buffer (momentum != 0); Adam/AdamW: exp_avg;
                       Adadelta: square_avg. NULL where the optimizer keeps none */
    float *state1;  /* (n) Adam/AdamW: exp_avg_sq; Adadelta: acc_delta; else NULL */
    void *copy;     /* (n) the updated weights rounded to the step's copy dtype (the f16 /
                       bf16 weights a reduced-precision graph reads), or NULL */
    int64_t n;
    int64_t first_chunk; /* set by kiln_cuda_optim_table_prepare */
    int32_t flags;       /* KILN_CUDA_OPTIM_NO_DECAY: no weight decay (and, LARS / LAMB, no
                            trust ratio) for this tensor (no_decay_bn_bias) */
    int32_t slot;        /* this tensor's index among all of the step's tensors (its norms) */
} kiln_cuda_optim_entry;
#define KILN_CUDA_OPTIM_NO_DECAY 1
/* Bytes of device memory for a table of n entries over `chunks` chunks: the entries, then
 * the scratch where LARS, LAMB and gradient clipping keep their sums of squares (per chunk,
 * then per tensor: no host round trip). Allocate the table with this size, upload the n
 * entries at its start. */
size_t kiln_cuda_optim_table_bytes(int n, int64_t chunks);
/* Fill first_chunk of each of the n entries of a HOST copy of the table; returns the total
 * number of chunks (pass it to the calls below). Then upload the table. */
int64_t kiln_cuda_optim_table_prepare(kiln_cuda_optim_entry *table, int n);

/* One launch over all gradients: any inf or NaN sets state->found_inf. unscale: also
 * multiply every gradient in place by 1 / state->loss_scale (rounded to float, as
 * PyTorch's GradScaler.unscale_; sensible for f32 gradients; for f16 ones leave them
 * scaled and pass unscale to the optimizer instead). table: device memory. */
kiln_status kiln_cuda_grad_check(kiln_cuda *cu, const kiln_cuda_optim_entry *table, int n, int64_t chunks,
                                 kiln_dtype grad_dtype, bool unscale, kiln_cuda_train_state *state);

/* Dynamic loss scaling as PyTorch's GradScaler: defaults 2, 0.5, 2000. */
typedef struct kiln_cuda_scaler {
    float growth_factor;  /* > 1 */
    float backoff_factor; /* in (0, 1) */
    int growth_interval;  /* clean steps between growths, >= 1 */
} kiln_cuda_scaler;

/* The step's one-thread bookkeeping, done at the end of kiln_cuda_optimizer_step by the
 * last of its blocks to finish, in this order:
 *   kiln_cuda_train_step_end(cu, scaler, schedule, state)  always (see below)
 *   kiln_cuda_rng_next(cu, rng_base, rng_counter)          when rng_counter is set
 *   kiln_cuda_advance(cu, pos, pos_by)                     when pos is set
 * with exactly their effects, saving their three launches. The pointers are copied at the
 * call (the structs they point to need not outlive it); counter and pos: device memory. */
typedef struct kiln_cuda_step_tail {
    const kiln_cuda_scaler *scaler;     /* NULL: a fixed loss scale */
    const kiln_train_options *schedule; /* NULL: state->lr left as it is */
    int64_t *rng_counter;               /* NULL: the run seed is left */
    uint64_t rng_base;
    int64_t *pos;                       /* NULL: no batch position */
    int64_t pos_by;
    /* The step's loss (device f32 scalar) copied to loss_ring[*ring_at % ring_size], then
     * *ring_at += 1 (device int64), so the host reads any step's loss later without a copy
     * of its own between steps. loss NULL: none. */
    const float *loss;
    float *loss_ring;
    int64_t *ring_at;
    int64_t ring_size;
} kiln_cuda_step_tail;

/* One launch updating every parameter of the device table (n entries, `chunks` from
 * kiln_cuda_optim_table_prepare) with the optimizer and hyper-parameters of o (optimizer,
 * momentum, nesterov, weight_decay, beta1, beta2, eps, rho, lars_eta, clip_grad_norm; lr
 * and the step come from state), exactly as the frozen reference kiln_optimizer_update
 * (tests/optim_reference.h) and kiln.OptimizerStep's CPU reference. LARS, LAMB and clipping
 * first take sums of squares over the table in launches of their own (one pass over all
 * tensors, then one block per tensor to add up its chunks; LAMB a second pass for its
 * update's norm), kept in the table's scratch (kiln_cuda_optim_table_bytes). Nothing is updated when
 * state->found_inf is set. grad_dtype: the gradients' dtype; unscale: multiply each
 * gradient by 1 / state->loss_scale as it is read; copy_dtype: the dtype of the entries'
 * weight copies (KILN_DTYPE_UNDEFINED when there are none). tail NULL: the step counter is
 * not advanced here (kiln_cuda_train_step_end does it); otherwise the same launch ends the
 * step as described above (state->arrived must be 0, as kiln_cuda_train_state_init leaves
 * it). */
kiln_status kiln_cuda_optimizer_step(kiln_cuda *cu, const kiln_train_options *o,
                                     const kiln_cuda_optim_entry *table, int n, int64_t chunks,
                                     kiln_dtype grad_dtype, kiln_dtype copy_dtype, bool unscale,
                                     kiln_cuda_train_state *state, const kiln_cuda_step_tail *tail);

/* One thread, after the update: found_inf ? skipped++ : step++; with a scaler, the loss
 * scale x backoff on inf/NaN, or x growth once growth_interval clean steps have passed
 * (kept when the result would be infinite); found_inf cleared; with a schedule (the
 * options' lr, schedule, step_size, gamma, total_steps, warmup_steps), state->lr =
 * kiln_lr_schedule(schedule, new step) computed on the device (NULL: lr is left as the
 * host wrote it). */
kiln_status kiln_cuda_train_step_end(kiln_cuda *cu, const kiln_cuda_scaler *scaler,
                                     const kiln_train_options *schedule, kiln_cuda_train_state *state);

/* --- data resident on the device (data.cu): x (batch, sample) f32 and y (batch) i64
 * gathered from images (n, sample) and labels (n) at perm[*pos .. *pos + batch); pos is
 * device memory, advanced by kiln_cuda_advance (or a kiln_cuda_step_tail), so both are
 * capturable. */
kiln_status kiln_cuda_gather_batch(kiln_cuda *cu, const float *images, const int64_t *labels,
                                   const int64_t *perm, const int64_t *pos, int64_t n, int64_t batch,
                                   int64_t sample, float *x, int64_t *y);
kiln_status kiln_cuda_advance(kiln_cuda *cu, int64_t *pos, int64_t by);

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
/* kiln_cuda_module_compile with extra NVRTC options (at most 14), e.g. "--fmad=false". */
kiln_status kiln_cuda_module_compile_opts(kiln_cuda *cu, const char *name, const char *source, int n_opts,
                                          const char *const *opts, kiln_cuda_module **out);
/* NVRTC alone, no device needed: source -> a cubin for compute capability cc (malloc'd,
 * the caller frees it; the compile log is in the message on failure): --dry-run tests
 * check generated code with it. */
kiln_status kiln_cuda_rtc_compile(kiln_context *ctx, const char *name, const char *source, int cc_major,
                                  int cc_minor, int n_opts, const char *const *opts, char **cubin,
                                  size_t *size);

/* ------------------------------------------------------- generated kernels */

/* kiln.FusedElementwise (fused_elementwise.c): the CUDA C source generated for c's program,
 * dtype and broadcast pattern (shapes in c; data not needed), malloc'd (the caller frees
 * it), with the NVRTC options it is compiled with in *opts (static strings, *n_opts of
 * them). For tests and tools: kernels generate, compile and cache it themselves. */
kiln_status kiln_cuda_fused_source(kiln_op_ctx *c, char **source, int *n_opts, const char *const **opts);

#ifdef __cplusplus
}
#endif
#endif /* KILN_CUDA_BACKEND_H */
