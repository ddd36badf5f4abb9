/*
 * cuda_internal.h — what the files of src/cuda/ share: the kiln_cuda struct, the error
 * checking macros, launch geometry and the entry points of each kernel file. Valid C
 * and C++ (included by .c files compiled by the C compiler and .cu files by nvcc).
 *
 * Error checking. Every library call goes through one of
 *     KILN_CUDA_CHECK(ctx, call)     CUDA runtime (cudaError_t)
 *     KILN_CUDNN_CHECK(ctx, call)    cuDNN (cudnnStatus_t)
 *     KILN_CUBLASLT_CHECK(ctx, call) cuBLASLt (cublasStatus_t)
 *     KILN_NVRTC_CHECK(ctx, call)    NVRTC (nvrtcResult)
 * which, on failure, record "<call> failed: <library error> (<file>:<line>)" on ctx and
 * return the status from the enclosing function (KILN_ERR_OUT_OF_MEMORY for allocation
 * failures, KILN_ERR_DEVICE otherwise). After every <<<...>>> launch comes
 * KILN_CUDA_LAUNCHED(ctx, "kernel name"), which checks cudaGetLastError. The *_TRY
 * forms set a status variable instead of returning, for code that must clean up.
 */
#ifndef KILN_CUDA_INTERNAL_H
#define KILN_CUDA_INTERNAL_H

#include "algo_cache.h"
#include "cuda_backend.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nvrtc.h>
#include <nvtx3/nvToolsExtMem.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What kernels found wrong on the device, read by kiln_cuda_sync. */
typedef struct kiln_cuda_flag {
    int code;          /* 0: nothing; KILN_CUDA_FLAG_* */
    int pad;
    long long value;   /* e.g. the offending index */
} kiln_cuda_flag;

enum {
    KILN_CUDA_FLAG_GATHER_INDEX = 1,  /* value: the index */
    KILN_CUDA_FLAG_TARGET_RANGE = 2,  /* a loss's class target outside [0, C); value: the target */
    KILN_CUDA_FLAG_DROPOUT_RATIO = 3, /* Dropout's ratio outside [0, 1) in training; value: ratio * 1e6 */
    KILN_CUDA_FLAG_ROI_BATCH = 4,     /* RoiAlign's batch index outside [0, N); value: the index */
};

/* A depthwise convolution's geometry (conv_depthwise.cu, below). */
typedef struct kiln_cuda_dw_geo {
    int64_t N, C, H, W, OH, OW;
    int64_t kh, kw, sh, sw, dh, dw, pt, pl;
    bool nhwc; /* X, Y and Z laid out NHWC */
} kiln_cuda_dw_geo;

struct kiln_cuda {
    kiln_context *ctx;
    int device;
    bool allow_tf32;        /* f32 convolutions / products may use TF32 tensor cores */
    kiln_cuda_props props;
    cudaStream_t stream;    /* where kernels go now: main, or a side stream (kiln_cuda_use_stream) */
    cudaStream_t main_stream;
    /* Side streams a captured plan runs its off-critical-path nodes on (cuda_plan.c) */
    cudaStream_t side[KILN_CUDA_MAX_SIDE_STREAMS];
    int n_side;
    cudaStream_t caller;    /* the caller's stream (kiln_cuda_options.caller_stream), or NULL */
    cudaEvent_t join[2];    /* caller -> kiln at a run's start, kiln -> caller at its end */

    /* Created on first use (kiln_cuda_dnn / kiln_cuda_lt): loading the libraries takes
     * time that ops without convolutions or matrix products should not pay. */
    cudnnHandle_t dnn;
    cudnnTensorDescriptor_t dnn_x, dnn_y, dnn_b; /* dnn_b: a fused convolution's bias */
    cudnnFilterDescriptor_t dnn_w;
    cudnnConvolutionDescriptor_t dnn_conv;
    cudnnActivationDescriptor_t dnn_act;
    cublasLtHandle_t lt;
    /* cuBLASLt's workspace (matmul.c, kiln_cuda_lt_workspace): KILN_CUDA_LT_WS_OWN (default)
     * one KILN_CUDA_GEMM_WS buffer per stream (main, then the side streams) that no other
     * kernel touches, made when a plan first asks for a product's workspace; _SHARED the
     * node's workspace (KILN_CUDA_LT_WS=shared, the old way: cuDNN and kiln's kernels write
     * the same bytes between two products); _NONE no workspace (KILN_CUDA_LT_WS=none). */
    int lt_ws_mode;
    void *lt_ws[1 + KILN_CUDA_MAX_SIDE_STREAMS];

    void *arena;
    size_t arena_bytes, arena_used;
    /* The arena as an NVTX memory pool: each kiln_cuda_arena_alloc registers its bytes, so
     * compute-sanitizer's memcheck (--nvtx=yes) flags accesses between or past them, not
     * only past the arena's end. NVTX calls cost a pointer test when no tool is attached. */
    nvtxDomainHandle_t nvtx;
    nvtxMemHeapHandle_t arena_heap;
    void *workspace;
    size_t workspace_bytes;

    unsigned char *staging; /* pinned, two halves used in turn */
    size_t staging_bytes;
    cudaEvent_t staged[2];  /* the last copy out of / into each half */
    bool staged_used[2];

    kiln_cuda_flag *flag;   /* device memory */
    /* The run seed random kernels (Dropout in training) read on the device, so a captured
     * graph draws new masks on every replay once something advances it (dropout.cu). */
    uint64_t *rng_seed;     /* device memory */

    /* Convolution algorithm choices (conv.c): timed (autotune) or cuDNN's heuristic,
     * deterministic ones only when asked; timed choices are also kept in the file
     * algo_path (empty: none) under the line prefix algo_prefix (GPU name, cuDNN version). */
    bool autotune, deterministic;
    bool conv_gemm;         /* 1x1 NHWC convolutions through cuBLASLt (conv.c) */
    bool conv_direct;       /* one-input-channel convolutions by conv_direct.cu */
    bool conv_depthwise;    /* depthwise convolutions by conv_depthwise.cu */
    bool conv_dw_grad;      /* their gradients by conv_depthwise_grad.cu (on unless
                               kiln_cuda_options.conv_dw_grad < 0 or KILN_CUDA_DW_GRAD=0) */
    bool perm_tile;         /* Transpose through shared-memory tiles where it pays (perm_tile.h;
                             * KILN_CUDA_PERM_TILE=0 off: element by element, to measure it) */
    bool gather_staged;     /* kiln.ChannelGather on NHWC by pixel tiles staged in shared memory
                             * (movement.cu channel_gather_nhwc_kernel; KILN_CUDA_GATHER_STAGED=0:
                             * element by element) */
    bool gap_vec;           /* GlobalAveragePool on NHWC by 16-byte channel groups, rows split
                             * across blocks where the images are few (pool.cu;
                             * KILN_CUDA_GAP_VEC=0: 32 channels a block, to measure it) */
    bool dw_exact;          /* the tiled depthwise kernel compiled for the exact kernel width
                             * (3, 5, 7: branch-free rows; conv_depthwise.cu;
                             * KILN_CUDA_DW_EXACT=0: the width-guarded kernel for all) */
    int dw_pipe;            /* those widths by the pipelined kernel (resident blocks, the next
                             * tile's patch copied while the current one is computed): -1
                             * never (KILN_CUDA_DW_PIPE=0), 0 where timed faster (the
                             * default), 1 wherever it takes the problem (=1) */
    int dw_pipe_grid;       /* > 0: at most that many of its blocks per channel chunk
                             * (KILN_CUDA_DW_PIPE_GRID; tests); 0: as many as are resident */
    bool ln_pipe;           /* LayerNormalization's short rows by layernorm_pipe (resident
                             * blocks, the next rows loaded while the current ones are reduced;
                             * layernorm.cu): on; KILN_CUDA_LN_PIPE=0 keeps layernorm_short */
    int ln_pipe_grid;       /* > 0: at most that many of its blocks (KILN_CUDA_LN_PIPE_GRID;
                             * tests: each block then takes several turns); 0: as many as
                             * are resident (3-4 a SM) */
    bool layout_tile;       /* kiln.ToNHWC / ToNCHW of more than 64 bytes a pixel (no dtype
                             * change, no zero channels) by those tiles too (movement.cu;
                             * KILN_CUDA_LAYOUT_TILE=0: tile_transpose_kernel, to measure it) */
    bool perm_tile_vec;     /* those tiles read in 16- to 4-byte vectors where the offsets
                             * allow (movement.cu perm_tile_vec_kernel; KILN_CUDA_PERM_TILE_VEC=0:
                             * single elements) */
    int sdpa;               /* kiln.Attention by cuDNN's fused attention (attention_sdpa.c): 1 (the
                             * default) where cuDNN has a plan and, with autotune, it was timed
                             * faster than kiln's kernel on the node's first run; 2 wherever
                             * cuDNN has a plan (KILN_CUDA_SDPA=1: tests); 0 never
                             * (KILN_CUDA_SDPA=0) */
    bool flash_attention;   /* kiln.Attention by attention_flash.cu where it takes the node
                               (on unless kiln_cuda_options.flash_attention < 0 or
                               KILN_CUDA_FLASH_ATTN=0) */
    int flash_grid;         /* > 0: at most that many flash blocks (KILN_CUDA_FLASH_GRID; tests:
                             * each block then takes several items); 0: as many as are resident */
    int flash_mt;           /* KILN_CUDA_FLASH_MT: 1 one m-tile a warp everywhere, 2 two
                             * wherever the flash kernel's MT2 form takes the node (tests,
                             * comparisons); 0 (default) two from MT2_MIN_LQ queries */
    /* kiln.FusedConv's statistics outputs (conv_stats.c; kiln_cuda_options.conv_bn_stats,
     * KILN_CUDA_CONV_STATS=0 at its default): 0 the convolution, then
     * norm_train.cu's statistics kernel; 1 (auto) cuDNN's ConvolutionFwd -> GenStats graph
     * where it has an engine, timed at plan time against the former (with autotune) and the
     * faster kept; 2 the graph wherever it has an engine (tests) */
    int conv_bn_stats;
    struct kiln_genstats_cache *genstats; /* cudnn_graph.c's plans, or NULL */
    /* With autotune, each depthwise problem met is timed on conv_depthwise.cu's kernel and on
     * the cuDNN path, and the faster kept (conv.c, dw_faster): direction, dtype, geometry. */
    struct kiln_cuda_dw_choice {
        kiln_cuda_dw_geo g;
        int dir, dtype, fused;
        int epi; /* forward: the activation's kind * 4 + 1 with a bias + 2 with a residual */
        bool kiln;
        int variant; /* the kernel's KILN_CUDA_DW_* (forward), when kiln */
        int graph;   /* not kiln: 0 the legacy API, 1 cuDNN's ConvFwd graph + kiln's epilogue,
                        2 the graph with the epilogue inside */
    } dw_choice[128];
    int n_dw_choice;
    /* while one is timed: 1 the tiled kernel (KILN_CUDA_DW_TILED), 2 cuDNN's path, 3 the
     * per-tile kernel, 4 cuDNN's ConvFwd graph then kiln's epilogue, 5 the graph with its
     * epilogue inside, 6 the pipelined kernel (KILN_CUDA_DW_PIPE; 0: the choice) */
    int dw_force;
    /* depthwise forwards on cuDNN's graph API (conv.c, dw_faster): KILN_CUDA_DW_GRAPH=0
     * never, 1 the ConvFwd graph + kiln's epilogue wherever it has a plan, 2 the graph with
     * the epilogue inside where it has one (else as 1); unset (-1): timed with the rest */
    int dw_graph;
    /* 1x1 FusedConvs with an activation cuBLASLt's epilogue lacks on that graph with the
     * epilogue inside (conv.c, gemm_graph_decide), and grouped convolutions or FusedConvs with
     * such an activation that cuDNN's legacy API would run (conv_graph_decide):
     * KILN_CUDA_CONV_GRAPH=0 never, 1 wherever it has a plan, unset (-1) timed against
     * cuBLASLt / the legacy API + the activation's pass */
    int conv_graph;
    /* kiln.FusedGemm's residual (matmul.c, residual_choice): KILN_CUDA_GEMM_RES=fused as
     * cuBLASLt's C always, =split the product then a pass adding it wherever that applies;
     * unset (0): timed with autotune */
    int gemm_res;
    /* while one is timed: 1 cuBLASLt or the legacy API, 2 the graph with the epilogue, 3 the
     * plain graph then kiln's epilogue (0: the choice) */
    int gemm_graph_force;
    /* while conv_pointwise.cu's kernel is timed against the usual path of a Conv / FusedConv
     * forward (conv.c, pw_decide): 1 the usual path, 2 the kernel (0: the choice) */
    int pw_force;
    char algo_path[1024];
    char algo_prefix[320];
    kiln_algo_entry *algos;
    int n_algos, cap_algos;
    kiln_cuda_stats stats;

    struct kiln_fused_cache *fused; /* generated kernels (fused_elementwise.c), or NULL */
};

/* Record a failed call (see the macros) and return the status it maps to. */
kiln_status kiln_cuda_rt_error(kiln_context *ctx, cudaError_t e, const char *call,
                               const char *file, int line);
kiln_status kiln_cuda_dnn_error(kiln_context *ctx, cudnnStatus_t e, const char *call,
                                const char *file, int line);
kiln_status kiln_cuda_lt_error(kiln_context *ctx, cublasStatus_t e, const char *call,
                               const char *file, int line);
kiln_status kiln_cuda_rtc_error(kiln_context *ctx, nvrtcResult e, const char *call,
                                const char *file, int line);

#define KILN_CUDA_CHECK(ctx, call)                                                        \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) return kiln_cuda_rt_error((ctx), e_, #call, __FILE__, __LINE__); \
    } while (0)
#define KILN_CUDNN_CHECK(ctx, call)                                                       \
    do {                                                                                  \
        cudnnStatus_t e_ = (call);                                                        \
        if (e_ != CUDNN_STATUS_SUCCESS)                                                   \
            return kiln_cuda_dnn_error((ctx), e_, #call, __FILE__, __LINE__);             \
    } while (0)
#define KILN_CUBLASLT_CHECK(ctx, call)                                                    \
    do {                                                                                  \
        cublasStatus_t e_ = (call);                                                       \
        if (e_ != CUBLAS_STATUS_SUCCESS)                                                  \
            return kiln_cuda_lt_error((ctx), e_, #call, __FILE__, __LINE__);              \
    } while (0)
#define KILN_NVRTC_CHECK(ctx, call)                                                       \
    do {                                                                                  \
        nvrtcResult e_ = (call);                                                          \
        if (e_ != NVRTC_SUCCESS) return kiln_cuda_rtc_error((ctx), e_, #call, __FILE__, __LINE__); \
    } while (0)
/* After a <<<...>>> launch: configuration errors show up here, not at the launch. */
#define KILN_CUDA_LAUNCHED(ctx, name)                                                     \
    do {                                                                                  \
        cudaError_t e_ = cudaGetLastError();                                              \
        if (e_ != cudaSuccess)                                                            \
            return kiln_cuda_rt_error((ctx), e_, "launch of kernel " name, __FILE__, __LINE__); \
    } while (0)

/* Status-variable forms: run call only while st is KILN_OK. */
#define KILN_CUDA_TRY(st, ctx, call)                                                      \
    do {                                                                                  \
        if ((st) == KILN_OK) {                                                            \
            cudaError_t e_ = (call);                                                      \
            if (e_ != cudaSuccess) (st) = kiln_cuda_rt_error((ctx), e_, #call, __FILE__, __LINE__); \
        }                                                                                 \
    } while (0)
#define KILN_NVRTC_TRY(st, ctx, call)                                                     \
    do {                                                                                  \
        if ((st) == KILN_OK) {                                                            \
            nvrtcResult e_ = (call);                                                      \
            if (e_ != NVRTC_SUCCESS)                                                      \
                (st) = kiln_cuda_rtc_error((ctx), e_, #call, __FILE__, __LINE__);         \
        }                                                                                 \
    } while (0)

/* The cuDNN / cuBLASLt handles, created on first use and bound to cu's stream. ctx
 * receives the message on failure (the op's context inside kernels). */
kiln_status kiln_cuda_dnn(kiln_cuda *cu, kiln_context *ctx, cudnnHandle_t *out);
kiln_status kiln_cuda_lt(kiln_cuda *cu, kiln_context *ctx, cublasLtHandle_t *out);

/* Blocks for a grid-stride loop over n items with `threads` threads a block: enough to
 * fill the device several times over, at least 1. */
unsigned kiln_cuda_blocks(const kiln_cuda *cu, int64_t n, int threads);

/* Whether a dtype is one the float kernels take (f32, f16, bf16). */
bool kiln_cuda_float_dtype(kiln_dtype t);

/* Output dims after merging: numpy broadcasting of up to 3 inputs against an output shape,
 * with size-1 dims dropped and neighbouring dims merged wherever every input walks them as
 * one run (as src/ops/binary.c does). st[k][d]: element stride of input k along merged dim
 * d, 0 where it is broadcast. nd >= 1. */
typedef struct kiln_cuda_bcast {
    int nin, nd;
    int64_t dims[KILN_MAX_DIMS];
    int64_t st[3][KILN_MAX_DIMS];
    int64_t numel;
} kiln_cuda_bcast;
void kiln_cuda_bcast_init(kiln_cuda_bcast *b, int ndim, const int64_t *dims, int nin,
                          const kiln_tensor *const *in);

/* Pads of a sliding window (Conv, pools) for spatial dim i of x (N, C, spatial...), by the
 * same rules as the CPU reference (src/ops/conv_common.c): explicit pads, or computed by
 * auto_pad SAME_UPPER / SAME_LOWER; VALID: none. kernel: the window's kernel dims. */
typedef struct kiln_cuda_window {
    int nd;                     /* spatial dims, 1..3 */
    int64_t in[3], out[3];      /* input and output spatial sizes */
    int64_t k[3], s[3], d[3];   /* kernel, strides, dilations */
    int64_t pb[3], pe[3];       /* pads at the beginning and the end */
} kiln_cuda_window;
/* Fill w from the node's attributes (kernel_shape, strides, dilations, pads, auto_pad),
 * x's spatial dims and y's (the output shape infer chose). kernel: W's kernel dims, or NULL
 * to read kernel_shape. Returns false (with a reason in why) on what it cannot handle. */
bool kiln_cuda_window_get(const kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *y,
                          const int64_t *kernel, kiln_cuda_window *w, char *why, size_t n);

/* ----------------------------------------------------------------------- kernels
 * Entry points of the kernel files, listed in table.c. Each takes the contract of
 * cuda_backend.h. */
#define KILN_CUDA_KERNELS(X)                                                              \
    X(unary)       /* elementwise.cu: the unary family and Clip */                        \
    X(binary)      /* elementwise.cu: Add Sub Mul Div Pow, Max Min (variadic) */          \
    X(conv)        /* conv.c: Conv through cuDNN */                                       \
    X(fused_conv)  /* conv.c: kiln.FusedConv, act(conv + B + Z) */                        \
    X(layout)      /* movement.cu: kiln.ToNHWC, kiln.ToNCHW */                            \
    X(gemm)        /* matmul.c: Gemm through cuBLASLt */                                  \
    X(matmul)      /* matmul.c: MatMul through cuBLASLt */                                \
    X(maxpool)     /* pool.cu */                                                          \
    X(avgpool)     /* pool.cu */                                                          \
    X(gap)         /* pool.cu: GlobalAveragePool */                                       \
    X(batchnorm)   /* norm.cu: BatchNormalization, inference */                           \
    X(softmax)     /* norm.cu: Softmax */                                                 \
    X(logsoftmax)  /* norm.cu: LogSoftmax */                                              \
    X(copy)        /* movement.cu: Flatten Reshape Identity Squeeze Unsqueeze */          \
    X(concat)      /* movement.cu */                                                      \
    X(concat_affine) /* concat_affine.cu: kiln.ConcatAffine (Concat + per-channel affine [+ Relu]) */ \
    X(transpose)   /* movement.cu */                                                      \
    X(gather)      /* movement.cu */                                                      \
    X(channel_shuffle) /* movement.cu: kiln.ChannelShuffle, NCHW or NHWC */               \
    X(channel_gather) /* movement.cu: kiln.ChannelGather, NCHW or NHWC */                \
    X(roll)        /* movement.cu: kiln.Roll (torch.roll), NCHW or NHWC */                \
    X(row_gather)  /* movement.cu: kiln.RowGather (Swin's window moves), logical layout */ \
    X(dropout)     /* dropout.cu: Dropout (inference and training, mask output) */        \
    X(dropout_grad) /* dropout.cu: kiln.DropoutGrad */                                    \
    X(random)      /* random.cu: RandomUniform(Like) RandomNormal(Like) Bernoulli */     \
    X(unary_grad)  /* elementwise.cu: kiln.UnaryGrad for the unary family */              \
    X(conv_grad_input)  /* conv.c: kiln.ConvGradInput through cuDNN */                    \
    X(conv_grad_weight) /* conv.c: kiln.ConvGradWeight through cuDNN */                   \
    X(conv_grad_bias)   /* reduce_sum.cu: kiln.ConvGradBias */                            \
    X(reduce_sum_to)    /* reduce_sum.cu: kiln.ReduceSumTo */                             \
    X(gemm_grad_c)      /* reduce_sum.cu: kiln.GemmGradC */                               \
    X(maxpool_grad)     /* pool.cu: kiln.MaxPoolGrad */                                   \
    X(softmax_grad)     /* norm.cu: kiln.SoftmaxGrad and kiln.LogSoftmaxGrad */           \
    X(nll)              /* loss.cu: NegativeLogLikelihoodLoss */                          \
    X(nll_grad)         /* loss.cu: kiln.NegativeLogLikelihoodLossGrad */                 \
    X(logsoftmax_nll)   /* loss.cu: kiln.LogSoftmaxNLL (the fused loss) */                \
    X(logsoftmax_nll_grad) /* loss.cu: kiln.LogSoftmaxNLLGrad */                          \
    X(maxpool_dropout)  /* dropout.cu: kiln.MaxPoolDropout (the fused pool) */            \
    X(maxpool_dropout_grad) /* dropout.cu: kiln.MaxPoolDropoutGrad */                     \
    X(bn_relu_max_pool) /* pool.cu: kiln.BnReluMaxPool (the stem's BN, Relu and pool) */  \
    X(fused_elementwise) /* fused_elementwise.c: kiln.FusedElementwise, NVRTC-generated */ \
    X(fused_gemm)       /* matmul.c: kiln.FusedGemm through cuBLASLt epilogues */         \
    X(cast)        /* convert.cu: Cast between any two dtypes */                          \
    X(compare)     /* compare.cu: Equal Less Greater (bool outputs) */                    \
    X(where)       /* compare.cu */                                                       \
    X(slice)       /* slicing.cu */                                                       \
    X(expand)      /* slicing.cu */                                                       \
    X(tile)        /* slicing.cu */                                                       \
    X(pad)         /* slicing.cu: constant, reflect, edge, wrap */                        \
    X(split)       /* slicing.cu */                                                       \
    X(shape)       /* generate.cu: Shape */                                               \
    X(constant)    /* generate.cu: Constant */                                            \
    X(constant_of_shape) /* generate.cu */                                                \
    X(range)       /* generate.cu */                                                      \
    X(resize)      /* resize.cu: nearest, linear, cubic */                                \
    X(grid_sample) /* grid_sample.cu: GridSample */                                       \
    X(roi_align)   /* grid_sample.cu: RoiAlign */                                         \
    X(reduce)      /* reduce.cu: ReduceSum ReduceMean ReduceMax ReduceMin */              \
    X(layernorm)   /* layernorm.cu: LayerNormalization */                                 \
    X(optimizer_step)    /* optim.cu: kiln.OptimizerStep (the fused multi-tensor update) */ \
    X(non_finite_check)  /* optim.cu: kiln.NonFiniteCheck (GradScaler's inf/NaN check) */   \
    X(loss_scale_update) /* optim.cu: kiln.LossScaleUpdate (GradScaler.update) */    \
    X(grad_accumulate)   /* optim.cu: kiln.GradAccumulate (gradient accumulation) */ \
    X(size)              /* generate.cu: Size */                                     \
    X(bit_shift)         /* compare.cu: BitShift */                                  \
    X(predicate)         /* rearrange.cu: Not IsNaN IsInf */                         \
    X(trilu)             /* rearrange.cu: Trilu */                                   \
    X(gather_elements)   /* rearrange.cu: GatherElements */                          \
    X(depth_to_space)    /* rearrange.cu: DepthToSpace SpaceToDepth */               \
    X(rows)              /* rearrange.cu: ArgMax ArgMin Hardmax CumSum */           \
    X(eye_like)          /* rearrange.cu: EyeLike */                                 \
    X(one_hot)           /* rearrange.cu: OneHot */                                  \
    X(scatter_elements)  /* rearrange.cu: ScatterElements Scatter */                \
    X(gather_nd)         /* rearrange.cu: GatherND */                                \
    X(scatter_nd)        /* rearrange.cu: ScatterND */                               \
    X(top_k)             /* rearrange.cu: TopK */                                    \
    X(lrn)               /* rearrange.cu: LRN */                                     \
    X(reverse_sequence)  /* rearrange.cu: ReverseSequence */                         \
    X(einsum)            /* rearrange.cu: Einsum */                                  \
    X(compress)          /* rearrange.cu: Compress */                                \
    X(non_zero)          /* generate.cu: NonZero */                                  \
    X(window)            /* rearrange.cu: HannWindow HammingWindow BlackmanWindow */ \
    X(quantize)          /* rearrange.cu: QuantizeLinear DequantizeLinear */         \
    X(dynamic_quantize)  /* rearrange.cu: DynamicQuantizeLinear */                   \
    X(max_unpool)        /* rearrange.cu: MaxUnpool */

#define KILN_CUDA_DECLARE(name) kiln_status kiln_cuda_k_##name(kiln_cuda *cu, kiln_op_ctx *c);
KILN_CUDA_KERNELS(KILN_CUDA_DECLARE)
#undef KILN_CUDA_DECLARE
/* What the training step's kernels (optim.cu) take, for table.c. */
bool kiln_cuda_sup_optimizer_step(const kiln_op_ctx *c, char *why, size_t n);
/* kiln.OptimizerStep's workspace: LARS's, LAMB's and clipping's sums of squares. */
kiln_status kiln_cuda_ws_optimizer_step(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
bool kiln_cuda_sup_non_finite_check(const kiln_op_ctx *c, char *why, size_t n);
/* kiln.AllReduce: NCCL (nccl.c) */
kiln_status kiln_cuda_k_all_reduce(kiln_cuda *cu, kiln_op_ctx *c);
bool kiln_cuda_sup_all_reduce(const kiln_op_ctx *c, char *why, size_t n);
bool kiln_cuda_sup_loss_scale_update(const kiln_op_ctx *c, char *why, size_t n);
bool kiln_cuda_sup_grad_accumulate(const kiln_op_ctx *c, char *why, size_t n);
/* kiln.Attention (attention.cu): its kernel and what it supports */
kiln_status kiln_cuda_k_attention(kiln_cuda *cu, kiln_op_ctx *c);
/* attention_sdpa.c: cuDNN's fused attention for the Attention nodes it can express (f16 /
 * bf16, no bias, norm or tensor scale, 16-byte aligned rows, one (batch, head) split that all
 * four operands share). _ws: the plan made at plan time (when cu->sdpa and, for 1, autotune),
 * its workspace. _run: *done when it ran the node (timed against attention_flash.cu on the
 * node's first eager run, the faster kept for later runs and processes). */
struct kiln_attn_geom;
kiln_status kiln_cuda_ws_attention(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
kiln_status kiln_cuda_attention_sdpa(kiln_cuda *cu, kiln_op_ctx *c, const struct kiln_attn_geom *g, bool *done);
kiln_status kiln_cuda_prep_attention(kiln_cuda *cu, kiln_op_ctx *c);
bool kiln_cuda_sup_attention(const kiln_op_ctx *c, char *why, size_t n);
/* attention_flash.cu (behind kiln_cuda's flash_attention): the
 * FlashAttention-2 form for f16 / bf16, D = Dv in {32, 64, 128}, Q / K / V rows of 16-byte
 * aligned runs. _ok: whether it takes geometry g (dtype, the operands' device pointers),
 * with the reason in why when not. _prepare: its shared-memory limits raised (before any
 * graph capture). The launch: biases[s] and bias_dt[s] read where g->has_bias[s]. */
struct kiln_attn_geom;
bool kiln_cuda_flash_attention_ok(const struct kiln_attn_geom *g, int dtype, const void *q, const void *k,
                                  const void *v, char *why, size_t n);
kiln_status kiln_cuda_flash_attention_prepare(kiln_context *ctx);
kiln_status kiln_cuda_flash_attention(kiln_cuda *cu, kiln_context *ctx, const struct kiln_attn_geom *g, int dtype,
                                      const void *q, const void *k, const void *v, const void *const bias[2],
                                      const int bias_dt[2], void *o);

/* Values known when the plan is built (kiln_op_ctx.host_in, see cuda_backend.h). */
/* The host tensors of c's inputs, for kiln_cuda_supports: c->host_in on a device context,
 * c->in on the planner's host context (host_in NULL). Kernels read c->host_in only. */
kiln_tensor *const *kiln_cuda_host_inputs(const kiln_op_ctx *c);
/* KILN_ERR_INTERNAL with a message when a kernel that needs host values has no
 * c->host_in. */
kiln_status kiln_cuda_need_host(kiln_op_ctx *c);
/* Concat, Split and their gradients (movement.cu): the blocks of `whole` along `axis`, of
 * sizes[k] (or like[k]'s size on the axis), copied to parts[k] (to_parts; NULL skipped) or
 * from them (NULL zeroes its block). */
kiln_status kiln_cuda_axis_blocks(kiln_cuda *cu, kiln_context *kctx, kiln_tensor *whole, int64_t axis, int n,
                                  const int64_t *sizes, const kiln_tensor *const *like, kiln_tensor *const *parts,
                                  bool to_parts);
/* The values of host tensor t (int32 or int64, rank 0 or 1, data known, at most max) into
 * vals[0..*n). t NULL: no values. false, with a reason in why, when they cannot be read. */
bool kiln_cuda_host_ints(const kiln_tensor *t, const char *what, int64_t *vals, int max, int *n,
                         char *why, size_t wn);

/* Host-side plans of kernels that read values, shared by the kernels and the supports
 * checks (hin: the host tensors, see kiln_cuda_host_inputs). Each returns false with a
 * reason in why when it cannot plan c. */
/* Slice: first index and step per axis of data. */
bool kiln_cuda_slice_plan(const kiln_op_ctx *c, kiln_tensor *const *hin, int64_t *start, int64_t *step,
                          char *why, size_t wn);
/* Pad: elements added before each axis of data (negative: cropped), and the mode. */
bool kiln_cuda_pad_plan(const kiln_op_ctx *c, kiln_tensor *const *hin, int64_t *begin, int *mode, char *why,
                        size_t wn);
/* Resize: whether its modes, scales / sizes (and roi) can be planned. */
bool kiln_cuda_resize_check(const kiln_op_ctx *c, kiln_tensor *const *hin, char *why, size_t wn);
/* Resize's workspace: the forward's per-axis tap tables (resize.cu). */
kiln_status kiln_cuda_ws_resize(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
/* GlobalAveragePool's workspace: the f32 partial sums of its row splits (pool.cu). */
kiln_status kiln_cuda_ws_gap(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
/* Reduce* and their gradients: the dims reduced, or noop (noop_with_empty_axes with empty
 * axes); the axes input is input axes_index (host values hin). */
bool kiln_cuda_reduce_axes(const kiln_op_ctx *c, kiln_tensor *const *hin, int axes_index, bool *reduced, bool *noop,
                           char *why, size_t wn);

/* kiln.FusedElementwise (fused_elementwise.c): what it supports, its prepare hook (compile
 * and cache the generated kernel) and the release of the cache (kiln_cuda_free). */
bool kiln_cuda_sup_fused_elementwise(const kiln_op_ctx *c, char *why, size_t n);
kiln_status kiln_cuda_prep_fused_elementwise(kiln_cuda *cu, kiln_op_ctx *c);
void kiln_cuda_fused_cache_free(kiln_cuda *cu);
/* concat_affine.cu: kiln.ConcatAffine's supports check (dtypes, layouts) */
bool kiln_cuda_sup_concat_affine(const kiln_op_ctx *c, char *why, size_t n);
/* Benchmark knobs for kernels generated afterwards on cu (bench/gelu_fusion --sweep):
 * loads in flight per thread (grid-stride steps, 0: the default 2) and the grid's cap in
 * blocks per SM (0: the default 32, i.e. one pass over the data for most sizes). */
kiln_status kiln_cuda_fused_tune(kiln_cuda *cu, int unroll, int blocks_per_sm);
/* The host side of a kiln.FusedElementwise launch for c's shapes and data pointers, for
 * tools that run the generated source elsewhere (an emulator on the host): the kernel
 * argument struct (args, at least size bytes: 1,296 today), whether k_v (else k_s) runs,
 * and the grid for sm_count SMs. unroll and blocks_per_sm as kiln_cuda_fused_tune. */
kiln_status kiln_cuda_fused_launch_args(kiln_op_ctx *c, int unroll, int sm_count, int blocks_per_sm, void *args,
                                        size_t size, bool *vec, unsigned *blocks, unsigned *threads);

/* Activations of the fused ops (kiln.FusedGemm, kiln.FusedConv; FUSED.md). */
typedef enum kiln_cuda_act_kind {
    KILN_ACT_NONE = 0,
    KILN_ACT_RELU,
    KILN_ACT_LEAKYRELU,   /* a: alpha */
    KILN_ACT_CLIP,        /* a, b: min, max */
    KILN_ACT_SIGMOID,
    KILN_ACT_HARDSWISH,
    KILN_ACT_HARDSIGMOID, /* a, b: alpha, beta */
    KILN_ACT_TANH,
    /* x * sigmoid(x), Gelu (erf), Gelu (tanh): not yet run on a GPU (fuse-conv makes them
     * unless KILN_PASS_FUSE_SILU_GELU is disabled) */
    KILN_ACT_SILU,
    KILN_ACT_GELU,
    KILN_ACT_GELU_TANH
} kiln_cuda_act_kind;
typedef struct kiln_cuda_act {
    kiln_cuda_act_kind kind;
    float a, b;
} kiln_cuda_act;
/* A fused node's `activation` and its parameters: LeakyRelu's alpha and HardSigmoid's
 * alpha and beta from attributes `alpha`/`beta`, or — for kiln.FusedGemm, whose alpha and
 * beta are Gemm's — from `act_alpha`/`act_beta`; Clip's bounds from `act_min`/`act_max`;
 * ONNX's defaults where absent. false (with a reason) for an unknown activation. */
bool kiln_cuda_act_get(const kiln_node *n, bool gemm, kiln_cuda_act *act, char *why, size_t wn);
/* y (n elements of float dtype dt) = act(y), in place (elementwise.cu). */
kiln_status kiln_cuda_act_inplace(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *y, int64_t n,
                                  const kiln_cuda_act *act);

/* Keep the stream busy for us microseconds (delay.cu; the per-node profile). */
kiln_status kiln_cuda_delay(kiln_cuda *cu, double us);

/* Workspace functions (kernels not listed need none). */
kiln_status kiln_cuda_ws_conv(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
kiln_status kiln_cuda_ws_batchnorm(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
kiln_status kiln_cuda_ws_matmul(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
/* Y (rows, n) = act(X (rows, k) W^T + bias + Z), row-major, W stored (n, k): one cuBLASLt
 * call, the bias (n, 16-byte aligned, or NULL) and Relu in its epilogue and Z (rows, n, or
 * NULL) read as its C with beta = 1 (the epilogue applies after the sum, so
 * relu(XW^T + bias + Z)). KILN_ERR_UNSUPPORTED when cuBLASLt has no algorithm for it. */
kiln_status kiln_cuda_gemm_nt(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, int64_t rows, int64_t n, int64_t k,
                              const void *x, const void *w, const void *bias, const void *z, bool relu, void *y,
                              void *ws, size_t ws_bytes);
#define KILN_CUDA_GEMM_WS ((size_t)32 << 20)
enum { KILN_CUDA_LT_WS_OWN, KILN_CUDA_LT_WS_SHARED, KILN_CUDA_LT_WS_NONE };
/* cuBLASLt's workspaces made now (plan time; nothing when they exist or the mode is not
 * KILN_CUDA_LT_WS_OWN), so that no run allocates. */
kiln_status kiln_cuda_lt_reserve(kiln_cuda *cu, kiln_context *ctx);
/* Einsum that is one GEMM (src/ops/einsum.h's kiln_einsum_as_gemm) through cuBLASLt
 * (matmul.c; workspace: kiln_cuda_ws_matmul). KILN_ERR_UNSUPPORTED: no algorithm. */
struct kiln_einsum_gemm;
kiln_status kiln_cuda_einsum_gemm(kiln_cuda *cu, kiln_op_ctx *c, const struct kiln_einsum_gemm *g);
kiln_status kiln_cuda_ws_conv_grad_input(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
kiln_status kiln_cuda_ws_conv_grad_weight(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
kiln_status kiln_cuda_ws_channel_sum(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes); /* ConvGradBias, ReduceSumTo, GemmGradC */
kiln_status kiln_cuda_ws_maxpool_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes); /* pool.cu: the picks */
kiln_status kiln_cuda_ws_bn_relu_max_pool(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes); /* pool.cu */
/* pool.cu: whether the pick kernels index pool c's X and Y (32 bits: up to 2^30 elements) */
bool kiln_cuda_picks_fit(kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *y);
kiln_status kiln_cuda_ws_nll_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
kiln_status kiln_cuda_ws_logsoftmax_nll_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);

/* Direct kernels for convolutions with one input channel and one group (conv_direct.cu),
 * which cuDNN runs badly (mnist-net's Conv(1->32, 3x3): ~21 us forward, ~35 us weight
 * gradient on an H200, for a few MB of data). X (N, 1, H, W), W (M, 1, kh, kw) and dW
 * have the same bytes in both layouts; Y and dY (N, M, OH, OW) are NCHW or NHWC. Pads
 * at the beginning of each dim (pt, pl) place the window; taps outside X read zero, so
 * asymmetric pads need no padded copy (the end pads only shape OH and OW). 1-D
 * convolutions are 2-D ones with H = kh = 1. */
typedef struct kiln_cuda_direct_geo {
    int64_t N, H, W, M, OH, OW;
    int64_t kh, kw, sh, sw, dh, dw, pt, pl;
    bool nhwc; /* Y / dY laid out NHWC */
} kiln_cuda_direct_geo;
/* Whether the kernels take g (kh*kw <= 49, weights in shared memory, indices in range);
 * false with a reason. */
bool kiln_cuda_conv_direct_fits(const kiln_cuda_direct_geo *g, char *why, size_t n);
/* y = act(conv(x, w) + b): b (M) may be NULL; relu: Relu, else no activation. */
kiln_status kiln_cuda_conv_direct_forward(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt,
                                          const kiln_cuda_direct_geo *g, const void *x, const void *w,
                                          const void *b, bool relu, void *y);
/* Workspace of the weight gradient: per-chunk partial sums (f32), 0 when one chunk. */
size_t kiln_cuda_conv_direct_wgrad_ws(const kiln_cuda_direct_geo *g);
/* dW (M, 1, kh, kw) = sum over n, oh, ow of dY[n, m, oh, ow] * X[n, 0, ih, iw]: per-chunk
 * partial sums in the workspace (kiln_cuda_conv_direct_wgrad_ws bytes) added in a fixed
 * order by a second kernel — no atomics, the same bits on every run. */
kiln_status kiln_cuda_conv_direct_wgrad(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt,
                                        const kiln_cuda_direct_geo *g, const void *x, const void *dy, void *dw,
                                        void *ws, size_t ws_bytes);

/* Depthwise convolutions (group == C == M, one filter per channel) by kiln's own kernels
 * (conv_depthwise.cu), which cuDNN runs far from the memory bound (convnext_tiny's 7x7
 * depthwise f16 NHWC at batch 256: 9.8 ms on an H200 for ~0.3 GB). X (N, C, H, W), Y and
 * Z (N, C, OH, OW) all NCHW or all NHWC; W (C, 1, kh, kw) has the same bytes in both.
 * Pads at the beginning of each dim (pt, pl) place the window; taps outside X read zero.
 * 1-D convolutions are 2-D ones with H = kh = 1. */
/* Whether the kernels take g (kh, kw <= 9, indices in range); false with a reason. */
bool kiln_cuda_conv_depthwise_fits(const kiln_cuda_dw_geo *g, char *why, size_t n);
/* The forward kernels: KILN_CUDA_DW_TILED, the tiled NHWC kernel (stride 1 or 2, dilation 1,
 * C % 8 == 0: an input patch in shared memory per block) where it takes g, else the
 * per-tile one; KILN_CUDA_DW_PER_TILE, the per-tile NHWC kernel (each thread reads its
 * taps through L1) or the scalar one. */
enum { KILN_CUDA_DW_TILED = 0, KILN_CUDA_DW_PER_TILE = 1, KILN_CUDA_DW_PIPE = 2 };
/* Whether KILN_CUDA_DW_PIPE runs the pipelined kernel on g in dtype dt with these outputs
 * (kw 3, 5 or 7, and what the tiled kernel needs; else it is the tiled kernel). */
bool kiln_cuda_conv_depthwise_pipe(const kiln_cuda *cu, const kiln_cuda_dw_geo *g, kiln_dtype dt, const void *y,
                                   const void *z);
/* Whether KILN_CUDA_DW_TILED runs the tiled kernel on g in dtype dt (else it is the
 * per-tile one, and timing it again is pointless). */
bool kiln_cuda_conv_depthwise_tiled(const kiln_cuda_dw_geo *g, kiln_dtype dt);
/* y = act(conv(x, w) + b + z): b (C) and z (like y) may be NULL, act NULL for none;
 * variant: KILN_CUDA_DW_TILED, KILN_CUDA_DW_PER_TILE or KILN_CUDA_DW_PIPE. No workspace. */
kiln_status kiln_cuda_conv_depthwise_forward(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt,
                                             const kiln_cuda_dw_geo *g, const void *x, const void *w,
                                             const void *b, const void *z, const kiln_cuda_act *act, int variant,
                                             void *y);

/* Convolutions with K = kh * kw * u <= 64 (1x1 products of few channels, few-channel
 * windows such as RGB stems) on the tensor cores (conv_pointwise.cu): one group, X (N, H, W, C)
 * NHWC whose channels from u on have zero weights (the pad-channels pass's used_channels:
 * they are read where the kernel copies whole pixels, as cuDNN's padded path reads them),
 * W KRSC (M, kh, kw, C), Y (N, OH, OW, M) NHWC, pads pt / pl before the first row / column. */
typedef struct kiln_cuda_pw_geo {
    int64_t N, H, W, C, u, M, OH, OW;
    int64_t kh, kw, sh, sw, dh, dw, pt, pl;
} kiln_cuda_pw_geo;
/* Whether the kernel takes the problem (f16 / bf16, K <= 64, M a multiple of 8, y and z
 * 16-byte aligned; why not in why, which may be NULL). */
bool kiln_cuda_conv_pointwise_fits(kiln_dtype dt, const kiln_cuda_pw_geo *p, const void *z, const void *y, char *why,
                                   size_t wn);
/* y = act(conv(x, w) + b + z): b (M) and z (like y) may be NULL, act NULL for none. No
 * workspace. */
kiln_status kiln_cuda_conv_pointwise(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, const kiln_cuda_pw_geo *p,
                                     const void *x, const void *w, const void *b, const void *z,
                                     const kiln_cuda_act *act, void *y);
/* dX (like X, in g's layout) = the gradient of the depthwise convolution g for dY, W. No
 * workspace. */
kiln_status kiln_cuda_conv_depthwise_grad_input(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt,
                                                const kiln_cuda_dw_geo *g, const void *dy, const void *w,
                                                void *dx);
/* kiln.FusedConv's statistics outputs (issue 12, the conv-bn-stats pass; behind
 * kiln_cuda's conv_bn_stats). conv_stats.c: the node's kernel, workspace and supports check
 * (the table's kiln.FusedConv entry; a node without outputs 1, 2 goes to conv.c as before).
 * cudnn_graph.c: cuDNN's ConvolutionFwd -> GenStats graph for one problem (plan time: graph,
 * heuristics, plan, kept on cu; run: on the node's buffers, the sums zeroed first). conv.c:
 * the problem of a node when that graph can express it (2-D, NHWC, f16 / bf16, one group,
 * symmetric pads, no bias, residual or activation), else why not. */
typedef struct kiln_genstats_geo {
    int64_t N, C, H, W, K, R, S, P, Q, sh, sw, dh, dw, ph, pw;
    bool bf16;
    /* the graph: KILN_GRAPH_GENSTATS ConvFwd -> GenStats (the zero default); _PRO_FWD the
     * prologue X * a + k [-> ReLU] (virtual f32, a and k (C) in X's dtype where cuDNN has an
     * engine for that, else f32: kiln_cuda_prologue_graph_sb16) -> ConvFwd [-> GenStats
     * when stats]; _PRO_WGRAD the prologue -> ConvBwdFilter (W: dW, Y: dY) */
    int kind;
    bool stats, relu;
    /* _CONV_FWD: ConvFwd alone (groups G, 0 or 1: none), or with epi its epilogue in the
     * graph: + bias (K) of X's dtype, then act_mode (a cudnnPointwiseMode_t, -1: none; RELU_FWD
     * with clip_lo / clip_hi, SWISH_FWD with beta 1), intermediates virtual f32 */
    int64_t G;
    bool epi;
    int act_mode;
    double clip_lo, clip_hi;
    /* _CONV_DGRAD: ConvBwdData (X: dX, Y: dY), _CONV_WGRAD: ConvBwdFilter (W: dW, Y: dY), any
     * groups G, timed like _CONV_FWD's plans (conv.c, the gradients of grouped and depthwise
     * convolutions) */
} kiln_genstats_geo;
enum {
    KILN_GRAPH_GENSTATS = 0,
    KILN_GRAPH_PRO_FWD = 1,
    KILN_GRAPH_PRO_WGRAD = 2,
    KILN_GRAPH_CONV_FWD = 3,
    KILN_GRAPH_CONV_DGRAD = 4,
    KILN_GRAPH_CONV_WGRAD = 5,
    KILN_GRAPH_SDPA = 6 /* kiln_cuda_sdpa_plan's */
};
struct kiln_genstats_problem;
/* Scaled-dot-product attention as cuDNN's SDPA operation (cuDNN 9.13.1; cudnn_graph.c):
 * O = softmax(scale Q K^T) V over b x h heads, Q (b, h, lq, d), K (b, h, lk, d), V (b, h, lk,
 * dv), O (b, h, lq, dv) at the strides s*[b, h, row] (the column stride 1), f16 / bf16 in and
 * out, f32 scores, no bias or mask: what attention_sdpa.c hands it. */
typedef struct kiln_sdpa_geo {
    int64_t b, h, lq, lk, d, dv;
    int64_t sq[3], sk[3], sv[3], so[3];
    float scale;
    bool bf16;
} kiln_sdpa_geo;
/* The plan of g (built the first time with build: plan time; else only looked up), kept on cu
 * with the other graph problems; *out NULL when there is no room. kiln_cuda_genstats_ok says
 * whether cuDNN had an engine, and the workspace. */
kiln_status kiln_cuda_sdpa_plan(kiln_cuda *cu, kiln_context *ctx, const kiln_sdpa_geo *g, bool build,
                                struct kiln_genstats_problem **out);
/* The plan on q, k, v (read) and o (written), on cu->stream. */
kiln_status kiln_cuda_sdpa_run(kiln_cuda *cu, kiln_context *ctx, const struct kiln_genstats_problem *p, const void *q,
                               const void *k, const void *v, void *o, void *ws, size_t ws_size);
/* Its key (the algorithm cache's, with a prefix, for the kept choice), from the plan or from
 * the problem (kiln_cuda_sdpa_key_of: KILN_SDPA_KEY bytes hold it; no plan made). */
const char *kiln_cuda_sdpa_key(const struct kiln_genstats_problem *p);
#define KILN_SDPA_KEY 200
void kiln_cuda_sdpa_key_of(const kiln_sdpa_geo *g, char *key, size_t n);
/* The _CONV_FWD / _DGRAD / _WGRAD graph's plans timed on these buffers the first time (outside
 * graph capture, with autotune): the fastest kept for every later run. x, w, y as for
 * kiln_cuda_conv_graph_run. */
kiln_status kiln_cuda_conv_graph_tune(kiln_cuda *cu, kiln_context *ctx, struct kiln_genstats_problem *p, const void *x,
                                      const void *w, void *y, const void *bias, void *ws, size_t ws_size);
/* The _CONV_FWD graph's run: x, w, y, bias (with epi), on cu->stream; _CONV_DGRAD's: x dX
 * (written), w, y dY; _CONV_WGRAD's: x, w dW (written), y dY. */
kiln_status kiln_cuda_conv_graph_run(kiln_cuda *cu, kiln_context *ctx, const struct kiln_genstats_problem *p,
                                     const void *x, const void *w, void *y, const void *bias, void *ws, size_t ws_size);
/* The prologue graphs' run: x, w (dW for _PRO_WGRAD), y (dY), a and k ((C) each, of X's
 * dtype when kiln_cuda_prologue_graph_sb16, else f32), the sums (with stats; zeroed first),
 * on cu->stream. */
kiln_status kiln_cuda_prologue_graph_run(kiln_cuda *cu, kiln_context *ctx, const struct kiln_genstats_problem *p,
                                         const void *x, void *w, void *y, const void *a, const void *k, float *sum,
                                         float *sq, int64_t K, void *ws, size_t ws_size);
bool kiln_cuda_prologue_graph_sb16(const struct kiln_genstats_problem *p);
bool kiln_cuda_conv_genstats_geo(const kiln_op_ctx *c, kiln_genstats_geo *g, char *why, size_t n);
/* build: make the plan when the problem is new (plan time); else only look it up (*out NULL) */
kiln_status kiln_cuda_genstats_plan(kiln_cuda *cu, kiln_context *ctx, const kiln_genstats_geo *g, bool build,
                                    struct kiln_genstats_problem **out);
/* the plan's workspace when it has one; why not otherwise */
bool kiln_cuda_genstats_ok(const struct kiln_genstats_problem *p, size_t *ws, const char **why);
/* the problem's choice (KILN_GENSTATS_*) and its two timings (ms[0] graph, ms[1] fallback) */
enum { KILN_GENSTATS_UNTIMED = 0, KILN_GENSTATS_GRAPH = 1, KILN_GENSTATS_FALLBACK = 2 };
int *kiln_cuda_genstats_choice(struct kiln_genstats_problem *p, double **ms);
kiln_status kiln_cuda_genstats_run(kiln_cuda *cu, kiln_context *ctx, const struct kiln_genstats_problem *p,
                                   const void *x, const void *w, void *y, float *sum, float *sq, int64_t K, void *ws,
                                   size_t ws_size);
void kiln_cuda_genstats_free(kiln_cuda *cu);
/* a line of the choice: the context's log at INFO, and stderr with KILN_CUDA_CONV_STATS_LOG=1 */
void kiln_cuda_conv_stats_note(kiln_context *ctx, const char *fmt, ...) KILN_PRINTF(2, 3);
bool kiln_cuda_sup_fused_conv_stats(const kiln_op_ctx *c, char *why, size_t n);
kiln_status kiln_cuda_k_fused_conv_stats(kiln_cuda *cu, kiln_op_ctx *c);
kiln_status kiln_cuda_ws_fused_conv_stats(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
/* The convolution prologue (kiln.FusedConv's input 4, kiln.ConvGradWeight's input 3; the
 * conv-bn-prologue pass): the fallback (conv_prologue.cu) writes X' = act(a * X + k) in X's
 * dtype and layout at out, then the node runs on X' (conv_stats.c: the kernels and workspace
 * of both ops, P or not). kiln_cuda_sup_conv_prologue checks input k (absent: fine). */
kiln_status kiln_cuda_conv_prologue_apply(kiln_cuda *cu, kiln_context *ctx, const kiln_tensor *x, const float *p,
                                          bool relu, void *out);
/* P (f32 (2, C)) as a (C) at a16 and k (C) at k16, rounded to dt (f16 / bf16): the prologue
 * graphs' scale and bias */
kiln_status kiln_cuda_conv_prologue_p16(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, const float *p, int64_t C,
                                        void *a16, void *k16);
bool kiln_cuda_sup_conv_prologue(const kiln_op_ctx *c, int k, char *why, size_t n);
kiln_status kiln_cuda_ws_conv_grad_weight_prologue(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
kiln_status kiln_cuda_k_conv_grad_weight_prologue(kiln_cuda *cu, kiln_op_ctx *c);

/* conv_depthwise_grad.cu (behind kiln_cuda's conv_dw_grad): the weight
 * gradient dW (C, 1, kh, kw) = sum over n, oh, ow of dY * X, in W's dtype (= X's), per-block
 * partial sums in the workspace (kiln_cuda_conv_depthwise_wgrad_ws bytes: 0 where the
 * NHWC kernel does not take g, and then a slow any-layout kernel runs) added in a fixed
 * order by a second kernel: no atomics, the same bits every run. */
size_t kiln_cuda_conv_depthwise_wgrad_ws(const kiln_cuda_dw_geo *g, kiln_dtype dt);
kiln_status kiln_cuda_conv_depthwise_wgrad(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt,
                                           const kiln_cuda_dw_geo *g, const void *x, const void *dy, void *dw,
                                           void *ws, size_t ws_bytes);
/* The input gradient dX: strides 1, the forward kernels on dY with the filter flipped into
 * the workspace (kiln_cuda_conv_depthwise_dgrad_ws bytes; 0: none needed, other paths);
 * NHWC C % 8 == 0 other strides, a gather of 8 channels a thread; else
 * kiln_cuda_conv_depthwise_grad_input. */
size_t kiln_cuda_conv_depthwise_dgrad_ws(const kiln_cuda_dw_geo *g, kiln_dtype dt);
kiln_status kiln_cuda_conv_depthwise_dgrad(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt,
                                           const kiln_cuda_dw_geo *g, const void *dy, const void *w, void *dx,
                                           void *ws, size_t ws_bytes);

/* What conv.c supports (Conv, or kiln.FusedConv when fused): geometry, layouts (X, W, Y
 * and Z in one layout), the activation. false with a reason. */
bool kiln_cuda_conv_supported(const kiln_op_ctx *c, bool fused, char *why, size_t n);

/* Helpers that kernels in one file provide to others. */
/* y (rows, C, S) = act(y + bias[c] + z): bias (C) and z (like y) may be NULL. NCHW tensors
 * are (N, C, H*W); NHWC ones (N*H*W, C, 1). */
kiln_status kiln_cuda_conv_epilogue(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *y,
                                    const void *bias, const void *z, int64_t rows, int64_t C,
                                    int64_t S, const kiln_cuda_act *act);
/* dst (N, H+pt+pb, W+pl+pr, C) = src (N, H, W, C) surrounded by zeros. */
kiln_status kiln_cuda_pad_nhwc(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *dst,
                               const void *src, int64_t N, int64_t C, int64_t H, int64_t W,
                               int64_t pt, int64_t pb, int64_t pl, int64_t pr);
/* y (N, C, S) += bias[c] (bias: C elements of y's dtype). */
kiln_status kiln_cuda_add_channel_bias(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *y,
                                       const void *bias, int64_t N, int64_t C, int64_t S);
/* dst (N, C, H+pt+pb, W+pl+pr) = src (N, C, H, W) surrounded by zeros. */
kiln_status kiln_cuda_pad_nchw(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *dst,
                               const void *src, int64_t N, int64_t C, int64_t H, int64_t W,
                               int64_t pt, int64_t pb, int64_t pl, int64_t pr);
/* dst (N, C, H, W) = the interior of src (N, C, H+pt+pb, W+pl+pr) (ConvGradInput). */
kiln_status kiln_cuda_crop_nchw(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *dst,
                                const void *src, int64_t N, int64_t C, int64_t H, int64_t W,
                                int64_t pt, int64_t pb, int64_t pl, int64_t pr);
/* t is 4-D with the same bytes in NCHW and NHWC (C == 1 or H*W == 1): a convolution takes
 * it under either label (conv.c). */
bool kiln_cuda_layout_free(const kiln_tensor *t);
/* dst (N, H, W, C) = the interior of src (N, H+pt+pb, W+pl+pr, C) (NHWC ConvGradInput). */
kiln_status kiln_cuda_crop_nhwc(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *dst,
                                const void *src, int64_t N, int64_t C, int64_t H, int64_t W,
                                int64_t pt, int64_t pb, int64_t pl, int64_t pr);
/* y (M, N) = c broadcast to (M, N) from a tensor of rank <= 2 (Gemm's C): cdims gives
 * its shape right-aligned to (M, N) (1 on broadcast dims). */
kiln_status kiln_cuda_broadcast_2d(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *y,
                                   const void *c, int64_t M, int64_t N, int64_t cm, int64_t cn);

#ifdef __cplusplus
}
#endif
#endif /* KILN_CUDA_INTERNAL_H */
