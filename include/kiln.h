/*
 * kiln.h — the one public header of kiln, a deep-learning engine in C.
 *
 * This header is the documentation. Everything a program needs to load an ONNX
 * model (or build one in C), run it, and read its outputs is declared here.
 *
 * Conventions (SQLite / ONNX Runtime style):
 *   - Objects are opaque handles. Every kiln_X_create / kiln_X_load has a kiln_X_free;
 *     kiln_X_free(NULL) does nothing.
 *   - Every call that can fail returns a kiln_status. On failure the context keeps a
 *     readable message (kiln_context_message) naming the op, the node and the shapes.
 *   - The library never calls exit() or abort() on bad input: malformed files, wrong
 *     shapes and failed allocations come back as statuses.
 *   - Objects created from a context must be freed before the context.
 *
 * Threads (tested by tests/test_threads.c, also under ThreadSanitizer):
 *   - A context may be shared by any number of threads. Its messages are kept per thread:
 *     kiln_context_message returns the message of the calling thread's last failed call
 *     on that context, never another thread's.
 *   - A finalized model may be shared: any number of threads may create sessions and
 *     trainers over it and run them at the same time. Building a model (kiln_model_add_*,
 *     kiln_model_finalize) and freeing it are not thread-safe: finish them first, free it
 *     after its sessions.
 *   - A session may be used by several threads: its runs take turns (a mutex), so each
 *     run computes exactly what it would alone. The outputs kiln_session_run returns
 *     belong to the session and the next run, from any thread, overwrites them: threads
 *     sharing a session use kiln_session_run_into, which writes a run's outputs into the
 *     caller's own tensors before the next run starts.
 *   - A trainer, and a tensor being written, must be used by one thread at a time.
 *   - CPU threads are a setting of each session and trainer (options.threads; 0: the
 *     context's kiln_context_set_threads, read at every run; 0 there too: all cores), never
 *     of the process: sessions in different threads each run on their own count.
 *
 * Busy machines: OpenMP's idle threads spin for a while before they sleep; when other
 * processes keep every core busy, that spinning makes multi-threaded runs many times
 * slower than one thread. libgomp reads its wait policy from the environment only when
 * it is loaded, before a library can set it: run programs that use kiln with
 * OMP_WAIT_POLICY=passive (the kiln command line sets it for itself, and
 * scripts/test.sh for the tests).
 *
 * In outline (tests/example_readme.c is a complete program, compiled and run by the tests):
 *
 *     kiln_context *ctx = NULL;
 *     kiln_model *model = NULL;
 *     kiln_session *sess = NULL;
 *     kiln_tensor *x = NULL;
 *     const kiln_tensor *y = NULL;
 *     if (kiln_context_create(&ctx) != KILN_OK) return 1;
 *     if (kiln_model_load_onnx(ctx, "model.onnx", &model) != KILN_OK ||
 *         kiln_session_create(model, NULL, &sess) != KILN_OK ||
 *         kiln_tensor_load_npy(ctx, "x.npy", &x) != KILN_OK ||
 *         kiln_session_run(sess, 1, &x, 1, &y) != KILN_OK) {
 *         fprintf(stderr, "kiln: %s\n", kiln_context_message(ctx));
 *     } else {
 *         kiln_tensor_save_npy(ctx, y, "y.npy");   // y belongs to the session
 *     }
 *     kiln_tensor_free(x);
 *     kiln_session_free(sess);
 *     kiln_model_free(model);
 *     kiln_context_free(ctx);
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of kiln.h; kiln_version() gives the library's, for a program to check that
 * the two agree. */
#define KILN_VERSION "0.1.0"
#define KILN_MAX_DIMS 8

/* ---------------------------------------------------------------- statuses */

typedef enum kiln_status {
    KILN_OK = 0,
    KILN_ERR_INVALID_ARGUMENT = 1, /* a NULL handle, a bad name, an out-of-range value */
    KILN_ERR_OUT_OF_MEMORY = 2,    /* host or device allocation failed */
    KILN_ERR_IO = 3,               /* a file could not be opened, read or written */
    KILN_ERR_PARSE = 4,            /* a malformed, truncated or hostile file */
    KILN_ERR_SHAPE = 5,            /* shapes that do not fit an op */
    KILN_ERR_TYPE = 6,             /* dtypes that do not fit an op */
    KILN_ERR_UNSUPPORTED = 7,      /* an op, attribute, dtype or backend kiln lacks */
    KILN_ERR_GRAPH = 8,            /* a graph that is not well formed (cycles, undefined names) */
    KILN_ERR_DEVICE = 9,           /* CUDA, cuDNN, cuBLAS or NCCL reported an error */
    KILN_ERR_INTERNAL = 10         /* a kiln bug: please report it */
} kiln_status;

/* A short fixed name for a status ("shape error", ...). Never NULL. */
const char *kiln_status_name(kiln_status s);

/* The version of the library linked in (KILN_VERSION when it was built). */
const char *kiln_version(void);

/* ------------------------------------------------------------------- dtypes */

/* Element types. The values are ONNX's TensorProto.DataType numbers. */
typedef enum kiln_dtype {
    KILN_DTYPE_UNDEFINED = 0,
    KILN_F32 = 1,
    KILN_U8 = 2,
    KILN_I8 = 3,
    KILN_U16 = 4,
    KILN_I16 = 5,
    KILN_I32 = 6,
    KILN_I64 = 7,
    KILN_BOOL = 9,
    KILN_F16 = 10,
    KILN_F64 = 11,
    KILN_U32 = 12,
    KILN_U64 = 13,
    KILN_BF16 = 16
} kiln_dtype;

/* Bytes per element (0 for an unknown dtype) and a short name ("f32", ...). */
size_t kiln_dtype_size(kiln_dtype t);
const char *kiln_dtype_name(kiln_dtype t);

/* Physical layout of a 4-D tensor. Dimensions are always given in NCHW order;
 * the format says how elements are laid out in memory. */
typedef enum kiln_format {
    KILN_FORMAT_NCHW = 0, /* contiguous, row-major in the order of the dimensions */
    KILN_FORMAT_NHWC = 1  /* channels_last: (N,H,W,C) in memory */
} kiln_format;

/* ------------------------------------------------------------------ context */

typedef struct kiln_context kiln_context;

/* Create a context: the owner of error messages and settings (threads). */
kiln_status kiln_context_create(kiln_context **out);
void kiln_context_free(kiln_context *ctx);

/* The message of the calling thread's last failed call on this context ("" if none).
 * The pointer stays valid until the thread's next call into kiln. */
const char *kiln_context_message(const kiln_context *ctx);

/* Threads used by CPU kernels of the sessions and trainers whose own setting is 0 (0:
 * all cores, the default). Read at each of their runs. */
kiln_status kiln_context_set_threads(kiln_context *ctx, int threads);

/* A log: kiln says what it does through fn, never on stdout or stderr.
 *   KILN_LOG_ERROR  the message of every failed public call (what kiln_context_message says)
 *   KILN_LOG_WARN   something that works but not as asked or not as well as it could
 *   KILN_LOG_INFO   a plan built (input shapes, nodes, memory, time taken), a cache read
 *   KILN_LOG_DEBUG  each graph pass: whether it rewrote the graph, nodes before and after
 * Messages up to max_level come to fn(user, level, message), on the thread of the call
 * that produced them; message is valid during the call only. fn NULL (the default): no
 * log. Set it before other threads use the context. */
typedef enum kiln_log_level {
    KILN_LOG_ERROR = 0,
    KILN_LOG_WARN = 1,
    KILN_LOG_INFO = 2,
    KILN_LOG_DEBUG = 3
} kiln_log_level;
typedef void (*kiln_log_fn)(void *user, kiln_log_level level, const char *message);
kiln_status kiln_context_set_log(kiln_context *ctx, kiln_log_level max_level, kiln_log_fn fn, void *user);

/* ------------------------------------------------------------------ devices */

/* Where a tensor's memory is and a session runs. A device is a kind and an index (the
 * CUDA device ordinal; 0 for the host). */
typedef enum kiln_device {
    KILN_DEVICE_CPU = 0,
    KILN_DEVICE_CUDA = 1
} kiln_device;

/* ------------------------------------------------------------------ tensors */

typedef struct kiln_tensor kiln_tensor;

/* A new host tensor with its own zeroed storage. dims may be NULL when ndim is 0. */
kiln_status kiln_tensor_create(kiln_context *ctx, kiln_dtype dtype, int ndim,
                               const int64_t *dims, kiln_tensor **out);
/* A tensor that views caller memory (not copied, not freed by kiln). */
kiln_status kiln_tensor_wrap(kiln_context *ctx, kiln_dtype dtype, int ndim,
                             const int64_t *dims, void *data, kiln_tensor **out);
void kiln_tensor_free(kiln_tensor *t);

kiln_dtype kiln_tensor_dtype(const kiln_tensor *t);
int kiln_tensor_ndim(const kiln_tensor *t);
/* Dimension i (0 <= i < ndim), or -1 when i is out of range. */
int64_t kiln_tensor_dim(const kiln_tensor *t, int i);
int64_t kiln_tensor_numel(const kiln_tensor *t);
size_t kiln_tensor_nbytes(const kiln_tensor *t);
kiln_format kiln_tensor_format(const kiln_tensor *t);
/* Declare the memory layout of a 4-D tensor's data (dims stay in NCHW order). Sessions
 * accept NHWC inputs and convert them as part of the run, into memory the plan owns. */
kiln_status kiln_tensor_set_format(kiln_tensor *t, kiln_format format);
/* A new tensor with t's values laid out in format (a copy, also when already in it). */
kiln_status kiln_tensor_to_format(kiln_context *ctx, const kiln_tensor *t, kiln_format format,
                                  kiln_tensor **out);
/* Pointer to the elements (NULL for a tensor with no storage): a host pointer, or a device
 * pointer for a tensor on a device. */
void *kiln_tensor_data(const kiln_tensor *t);

/* Tensors on a device. Sessions on that device read inputs from them and write outputs
 * into them without a host copy (kiln_session_run_into); element access
 * (kiln_tensor_data's pointer) is the device's.
 *   create_on: zeroed storage of the device's own (CUDA: cudaMalloc; freeing it waits for
 *              the device), freed by kiln_tensor_free; KILN_DEVICE_CPU is kiln_tensor_create.
 *   wrap_on:   caller memory on that device (not copied, not freed by kiln).
 * KILN_ERR_UNSUPPORTED when this build has no such backend, KILN_ERR_DEVICE when the
 * machine has no such device. */
kiln_status kiln_tensor_create_on(kiln_context *ctx, kiln_dtype dtype, int ndim, const int64_t *dims,
                                  kiln_device device, int device_index, kiln_tensor **out);
kiln_status kiln_tensor_wrap_on(kiln_context *ctx, kiln_dtype dtype, int ndim, const int64_t *dims,
                                kiln_device device, int device_index, void *data, kiln_tensor **out);
/* The device of t's memory; *device_index (may be NULL) receives its index. */
kiln_device kiln_tensor_device(const kiln_tensor *t, int *device_index);
/* Copy src's elements into dst: the same dtype and dims, any devices (host <-> CUDA,
 * CUDA <-> CUDA), each in its own layout (NCHW or NHWC, converted on the host). Returns
 * when the copy is done. */
kiln_status kiln_tensor_copy(kiln_context *ctx, const kiln_tensor *src, kiln_tensor *dst);

/* DLPack (https://dmlc.github.io/dlpack/, <dlpack/dlpack.h>): tensors shared with
 * PyTorch, NumPy, CuPy, JAX... without a copy.
 *   from_dlpack: a tensor viewing src's memory. On success kiln owns src: kiln_tensor_free
 *     calls src->deleter (from the freeing thread). On failure the caller still owns it.
 *     Accepted: row-major compact strides (or NULL strides), and for 4-D channels_last
 *     strides (the tensor's format is then KILN_FORMAT_NHWC); devices kDLCPU and
 *     kDLCUDAHost (a host tensor), kDLCUDA and kDLCUDAManaged (a CUDA tensor); the dtypes
 *     of kiln_dtype (bool as kDLBool or kDLUInt 8 / kDLInt 8 with lanes 1). Other strides,
 *     devices or dtypes: KILN_ERR_UNSUPPORTED naming them.
 *   to_dlpack: a DLManagedTensor viewing t's memory (NHWC tensors with channels_last
 *     strides) that holds a reference on t: the memory lives until both kiln_tensor_free(t)
 *     and the DLManagedTensor's deleter have run, in either order, from any threads.
 *     Tensors a session owns (kiln_session_run's outputs) are refused: export the tensors
 *     of kiln_session_run_into instead. */
struct DLManagedTensor;
kiln_status kiln_tensor_from_dlpack(kiln_context *ctx, struct DLManagedTensor *src, kiln_tensor **out);
kiln_status kiln_tensor_to_dlpack(kiln_context *ctx, kiln_tensor *t, struct DLManagedTensor **out);

/* NumPy .npy files (format 1.0-3.0, C order, little-endian numeric dtypes). Loading is
 * strict: the header must be the dict NumPy writes (descr, fortran_order and shape, a
 * tuple of ints, and nothing else) and the file must hold exactly the array's bytes, no
 * fewer and no more; anything else is KILN_ERR_PARSE naming the file and the problem
 * (KILN_ERR_UNSUPPORTED for valid files kiln cannot hold: Fortran order, other dtypes). */
kiln_status kiln_tensor_load_npy(kiln_context *ctx, const char *path, kiln_tensor **out);
kiln_status kiln_tensor_save_npy(kiln_context *ctx, const kiln_tensor *t, const char *path);
/* An ONNX TensorProto file (the .pb files of ONNX's test data). */
kiln_status kiln_tensor_load_onnx_pb(kiln_context *ctx, const char *path, kiln_tensor **out);

/* -------------------------------------------------------------------- model */

/* A model is an immutable static graph plus its weights once loaded or finalized.
 * Sessions share it; several sessions may run one model. */
typedef struct kiln_model kiln_model;

/* Load an ONNX model (opsets 11 to 21). External data files are read from the
 * directory of path. Local functions are inlined. */
kiln_status kiln_model_load_onnx(kiln_context *ctx, const char *path, kiln_model **out);
/* The same from memory; external data, if any, is looked up relative to base_dir
 * (NULL: external data is an error). */
kiln_status kiln_model_load_onnx_buffer(kiln_context *ctx, const void *data, size_t size,
                                        const char *base_dir, kiln_model **out);
/* Save a finalized model as ONNX: any model, whether loaded, built in C, exported from a
 * trainer (kiln_trainer_export) or rewritten by kiln's passes. kiln and onnxruntime load
 * what it writes, and a model kiln loaded computes the same bits once saved and reloaded.
 * Kept: the default-domain opset, the IR version of the file the model came from (else the
 * lowest its opset needs), graph inputs and outputs with dtypes and dims (named symbolic
 * dims as dim_param), initializers (raw_data), node names and attributes. kiln's internal
 * ops (fused convolutions and products, fused elementwise chains, the fused loss, layout
 * conversions) are written as the ONNX ops they stand for; training graphs (gradient ops)
 * are KILN_ERR_UNSUPPORTED. Weights past protobuf's 2 GiB limit go to external data:
 * initializers of 1 KiB or more in PATH.data (path's file name plus ".data", beside it),
 * which kiln_model_load_onnx reads; keep the two files together. The file (and the data
 * file) is written to a temporary and renamed over path, so a failed save leaves what was
 * there. Errors (an unfinalized model, a path that cannot be written, an op with no ONNX
 * form) are statuses with a message on the model's context naming the node or file. */
kiln_status kiln_model_save_onnx(const kiln_model *m, const char *path);
/* The same into memory: *data (free it with kiln_free) holds *size bytes. A model over
 * 2 GiB has nowhere to put external data here: KILN_ERR_UNSUPPORTED. */
kiln_status kiln_model_save_onnx_buffer(const kiln_model *m, void **data, size_t *size);
/* Free memory kiln allocated for the caller (kiln_model_save_onnx_buffer's bytes). */
void kiln_free(void *p);
void kiln_model_free(kiln_model *m);

/* Building a model in C: create, add inputs, initializers, nodes and outputs, then
 * finalize (validation and shape inference). A model cannot be changed after that. */
typedef struct kiln_node kiln_node;

kiln_status kiln_model_create(kiln_context *ctx, kiln_model **out);
/* A graph input. A dim of -1 is symbolic (e.g. the batch), fixed when a session runs. */
kiln_status kiln_model_add_input(kiln_model *m, const char *name, kiln_dtype dtype, int ndim,
                                 const int64_t *dims);
/* An initializer (weight); the tensor is copied. */
kiln_status kiln_model_add_initializer(kiln_model *m, const char *name, const kiln_tensor *t);
/* A node. Empty string ("") names a missing optional input or output. The node handle
 * stays valid until the next kiln_model_add_node; use it to set attributes. */
kiln_status kiln_model_add_node(kiln_model *m, const char *op_type, const char *name,
                                int n_inputs, const char *const *inputs, int n_outputs,
                                const char *const *outputs, kiln_node **out);
kiln_status kiln_node_set_int(kiln_node *n, const char *attr, int64_t v);
kiln_status kiln_node_set_float(kiln_node *n, const char *attr, float v);
kiln_status kiln_node_set_string(kiln_node *n, const char *attr, const char *v);
kiln_status kiln_node_set_ints(kiln_node *n, const char *attr, int count, const int64_t *v);
kiln_status kiln_node_set_floats(kiln_node *n, const char *attr, int count, const float *v);
kiln_status kiln_model_add_output(kiln_model *m, const char *name);
kiln_status kiln_model_finalize(kiln_model *m);

int kiln_model_num_inputs(const kiln_model *m);
int kiln_model_num_outputs(const kiln_model *m);
int kiln_model_num_nodes(const kiln_model *m);
/* The op type of node i ("Conv", as the file or kiln_model_add_node names it), or NULL when
 * i is out of range. Valid while the model lives. */
const char *kiln_model_node_op_type(const kiln_model *m, int i);
/* Name, dtype and dims of input/output i (dims: -1 where symbolic). NULL name if out of range. */
const char *kiln_model_input_name(const kiln_model *m, int i);
const char *kiln_model_output_name(const kiln_model *m, int i);
kiln_status kiln_model_input_info(const kiln_model *m, int i, kiln_dtype *dtype, int *ndim,
                                  int64_t dims[KILN_MAX_DIMS]);
kiln_status kiln_model_output_info(const kiln_model *m, int i, kiln_dtype *dtype, int *ndim,
                                   int64_t dims[KILN_MAX_DIMS]);
/* The index of the input / output with this name, or -1 when the model has none. */
int kiln_model_input_index(const kiln_model *m, const char *name);
int kiln_model_output_index(const kiln_model *m, const char *name);
/* The name of a symbolic dim d of input / output i ("batch", as the ONNX file's dim_param
 * says), or NULL when the dim is fixed, unnamed or out of range. */
const char *kiln_model_input_dim_name(const kiln_model *m, int i, int d);
const char *kiln_model_output_dim_name(const kiln_model *m, int i, int d);

/* ------------------------------------------------------------------ session */

/* Arithmetic precision of a session's plan. FP16 and BF16 keep fp32 accumulation in
 * matrix products and fp32 where numerics need it (softmax, normalization statistics,
 * losses); inputs and outputs keep the model's dtypes. */
typedef enum kiln_precision {
    KILN_PRECISION_FP32 = 0,
    KILN_PRECISION_FP16 = 1,
    KILN_PRECISION_BF16 = 2
} kiln_precision;

/* The graph rewrites a session applies before planning. All are on by default; each bit
 * in kiln_session_options.disable_passes turns one off, to measure what it is worth.
 * Every pass computes the same function (tested on the CPU backend). */
enum {
    KILN_PASS_DEAD_NODES = 1 << 0,    /* drop nodes no graph output depends on */
    KILN_PASS_FOLD_BN = 1 << 1,       /* BatchNormalization folded into the Conv/Gemm before it */
    KILN_PASS_FUSE_CONV = 1 << 2,     /* conv/gemm + bias + activation (+ residual add) as one op */
    KILN_PASS_FUSE_ELTWISE = 1 << 3,  /* chains of elementwise ops as one generated kernel */
    KILN_PASS_NHWC = 1 << 4,          /* channels_last for convolutions (CUDA) */
    KILN_PASS_PAD_CHANNELS = 1 << 5,  /* channels padded to a multiple of 8 (CUDA, fp16/bf16) */
    KILN_PASS_CUDA_GRAPH = 1 << 6,    /* replay each plan as a captured CUDA graph (CUDA) */
    KILN_PASS_AUTOTUNE = 1 << 7,      /* time cuDNN's algorithms per shape (else its heuristic) */
    KILN_PASS_CONV_GEMM = 1 << 8,     /* 1x1 stride-1 NHWC convolutions as cuBLASLt products with
                                         bias, activation and residual in the epilogue (CUDA) */
    KILN_PASS_CONV_DIRECT = 1 << 9,   /* convolutions with one input channel (a network's first
                                         layer on grey images) and their weight gradients by
                                         kiln's own kernels instead of cuDNN (CUDA) */
    KILN_PASS_FUSE_LOSS = 1 << 10,    /* LogSoftmax -> NegativeLogLikelihoodLoss (mean/sum) on
                                         (N, C) and, in a training graph, its gradient pair as
                                         one op each, reading an fp16/bf16 X as it is */
    KILN_PASS_STREAMS = 1 << 11,      /* a captured graph runs the nodes off its longest path
                                         (weight gradients, independent branches) on side
                                         streams, as parallel branches (CUDA) */
    KILN_PASS_CONV_DEPTHWISE = 1 << 14, /* depthwise convolutions (group == C == M, kernels up to
                                         9x9) and their input gradients by kiln's own kernels
                                         instead of cuDNN, with bias, activation and residual (CUDA) */
    KILN_PASS_FUSE_POOL = 1 << 12,    /* MaxPool -> training Dropout over an NHWC image
                                         (non-overlapping 2-D windows) and, in a training
                                         graph, its gradient chain (with the Relu's before
                                         the pool) as one op each (CUDA, after nhwc); a
                                         Relu's gradient after any Dropout's gradient
                                         folded into it; and in a training graph a MaxPool
                                         of overlapping windows writes its picks for its
                                         MaxPoolGrad, which then does not read X again, and
                                         takes the training BN -> Relu before it into one
                                         kernel (kiln.BnReluMaxPool: the BN's Y unwritten) */
    KILN_PASS_FUSE_BN = 1 << 13,      /* a training BatchNormalization -> Relu as one node, and
                                         the Relu's gradient folded into BatchNormGrad (in a
                                         training graph; CUDA training) */
    KILN_PASS_FUSE_ATTENTION = 1 << 20, /* MatMul -> [scale] -> [bias] -> Softmax -> MatMul as one
                                         kiln.Attention node reading Q, K, V (and writing its
                                         output) through strided views: the head split and
                                         merge Transposes / Gathers vanish (inference) */
    KILN_PASS_FUSE_SILU_GELU = 1 << 21, /* fuse-conv's SiLU (x * sigmoid(x)) and Gelu after a
                                         Conv / Gemm as the fused op's activation (with
                                         fuse-conv; alone: those two stay separate) */
    KILN_PASS_FLASH_ATTENTION = 1 << 22, /* kiln.Attention in f16 / bf16 with head dims 32, 64
                                         or 128 by a FlashAttention-2 kernel (CUDA; else the
                                         scores are written out: attention.cu). Also off with
                                         the environment variable KILN_CUDA_FLASH_ATTN=0 */
    KILN_PASS_CONV_DW_GRAD = 1 << 23, /* depthwise convolutions' weight and input gradients by
                                         kiln's kernels where timed faster than cuDNN (CUDA
                                         training). Also off with KILN_CUDA_DW_GRAD=0 */
    KILN_PASS_CONV_BN_STATS = 1 << 24, /* a training BatchNormalization after a convolution
                                         takes its batch statistics from sums the convolution
                                         writes (CUDA training; below). Also off with
                                         KILN_CUDA_CONV_STATS=0 */
    KILN_PASS_BN_MASK_FROM_X = 1 << 25, /* fuse-bn's ReLU gradients recompute the mask from the
                                         BN's input and saved statistics instead of reading its
                                         output (CUDA training). Also off with
                                         KILN_BN_MASK_FROM_X=0 */
    KILN_PASS_FOLD_CONSTANTS = 1 << 26, /* nodes whose inputs are all constants computed once
                                          (CPU reference) into initializers before the fusions,
                                          which then see them as constants (inference; outputs
                                          up to 64 MiB each) */
    KILN_PASS_CROP_TAPS = 1 << 27, /* a convolution's kernel cropped to the taps that read the
                                     input for some output (dilated convolutions on maps smaller
                                     than their dilation: DeepLabV3's ASPP); the dropped
                                     products were all of zeros */
    KILN_PASS_GEMM_RESIDUAL = 1 << 29, /* fuse-conv's taking of a residual Add after a Linear
                                          (MatMul + bias) into the product (kiln.FusedGemm's Z:
                                          on CUDA, cuBLASLt's C), alone */
    KILN_PASS_MEAN_POOL = 1 << 16, /* a ReduceMean over every spatial axis (torch's x.mean([2, 3]))
                                     as GlobalAveragePool, which keeps the map's low precision and
                                     NHWC layout; and pool-conv: an AveragePool next to a 1x1
                                     convolution put on the side with fewer channels (Inception's
                                     stride-1 pool branches after it, DenseNet's stride-2
                                     transitions before it; KILN_POOL_CONV=0 turns that one off
                                     alone) */
    KILN_PASS_CONV_PATCH = 1 << 15, /* a convolution whose kernel is its stride (no padding, one
                                       group, at least 64 taps: a ViT's patch embedding) as
                                       the product of its patches with the weight (CUDA) */
    KILN_PASS_ATTENTION_ROWS = 1 << 30, /* fuse-attention's moving of the Transposes that keep
                                           the last axis across the projections around an
                                           attention (torch's nn.MultiheadAttention export),
                                           where the fused node's views take them, alone */
    KILN_PASS_SPACE_TO_DEPTH = 1 << 17, /* a Concat of strided Slices that tile one tensor (Swin's
                                          patch merging, YOLOv5's Focus) as one Transpose */
    KILN_PASS_FOLD_SCALE = 1 << 18, /* a constant per-channel Mul after a Linear / Gemm / Conv
                                       (ConvNeXt's and CaiT's layer scale) folded into its
                                       weights, through Transposes and the bias Add */
    KILN_PASS_ROW_GATHER = 1 << 19, /* a chain of whole-row moves around a Transpose (Swin's window
                                       partition: Pad, roll, the window permutation; its reverse:
                                       the permutation, roll back, crop) as one gather of rows */
    KILN_PASS_CHANNEL_GATHER = 1 << 28 /* a chain of channel moves (Concat along the channels,
                                          channel shuffle, Slices and zero Pads of channels:
                                          ShuffleNet's block boundaries) as one gather, each
                                          element moved once */
};
/* BatchNormalization statistics from the convolution (CUDA training; issue 12; on by
 * default, KILN_PASS_CONV_BN_STATS or KILN_CUDA_CONV_STATS=0 turn it off): the CUDA trainer
 * gives each convolution that feeds a training
 * BatchNormalization outputs with the per-channel sum and sum of squares of what it writes
 * (kiln.FusedConv) and the BN takes its batch statistics from them instead of reading its
 * input an extra time (the conv-bn-stats pass; the same function within f32 rounding of the
 * sums, tested on the CPU). The CUDA backend computes those sums in cuDNN's
 * ConvolutionFwd -> GenStats graph where cuDNN has an engine for it and it was timed faster,
 * else by the plain convolution and a statistics kernel (correct, no gain). The graph sums
 * the convolution's f32 accumulators, before their rounding to f16 / bf16: the statistics
 * differ from those of the rounded output by at most that rounding (2^-11 of the sum of
 * |y| in f16). KILN_CUDA_CONV_STATS_LOG=1 prints each convolution's choice on stderr. */
/* Timed algorithm choices are kept for later processes in $KILN_CACHE_DIR/cudnn-algos.txt
 * (else $XDG_CACHE_HOME/kiln/, else ~/.cache/kiln/; KILN_CACHE_DIR set empty: not kept),
 * one line per problem, scoped to the GPU model and cuDNN version; safe to delete. */

/* Options of sessions and trainers share one convention: zeroed fields are the defaults,
 * and a 1 (a set bit of disable_passes) turns a speed-up off or a restriction on.
 *
 * TF32 and NHWC, one policy for sessions and trainers (CUDA; the CPU computes f32 in f32
 * and NCHW): f32 convolutions and matrix products may use TF32 tensor cores (10-bit
 * mantissa inputs, f32 accumulation; PyTorch's default for convolutions) unless
 * strict_fp32 is 1; convolution chains are laid out NHWC where tensor cores run them
 * (fp16/bf16, or f32 with TF32: cuDNN's NHWC kernels are tensor-core ones) unless
 * KILN_PASS_NHWC is disabled. */
typedef struct kiln_session_options {
    /* sizeof(kiln_session_options) as the caller was compiled (KILN_SESSION_OPTIONS_INIT
     * sets it), so that fields added after this release leave older callers working: kiln
     * reads the first struct_size bytes and takes the defaults for the rest, and refuses
     * non-zero fields it does not know of (a caller built against a newer kiln.h). 0: this
     * release's layout, the whole struct below. */
    size_t struct_size;
    kiln_device device;        /* KILN_DEVICE_CPU (default) */
    int device_index;          /* the CUDA device ordinal (0: the first) */
    /* A cudaStream_t (NULL: none). Runs are ordered after the work already on it, and work
     * put on it later runs after them. kiln runs on a stream of its own (captured CUDA
     * graphs), joined to this one by events. With a stream and every input and output of
     * kiln_session_run_into / _run_named on the device, those calls return without waiting
     * for the GPU, and an error that kernels find on the device (a Gather index out of
     * range) is reported by the next call that waits. */
    void *stream;
    int threads;               /* CPU threads of this session's runs; 0: the context's setting */
    int no_fold;               /* 1: fold only shape computations (outputs of <= 64 elements);
                                  fold-constants (KILN_PASS_FOLD_CONSTANTS) off too */
    kiln_precision precision;  /* KILN_PRECISION_FP32 (default) */
    unsigned disable_passes;   /* KILN_PASS_* bits to turn off */
    int deterministic;         /* 1: only deterministic algorithms (CUDA) */
    int strict_fp32;           /* 1: f32 convolutions and products off TF32, and so NCHW (CUDA;
                                  the policy above) */
} kiln_session_options;
#define KILN_SESSION_OPTIONS_INIT {.struct_size = sizeof(kiln_session_options)}

/* A session runs a model on one device. It builds one plan per input shape (shape
 * inference, constant folding, memory planning into one arena) on the first run with
 * that shape and reuses it; nothing is allocated by a run that reuses a plan.
 * opts may be NULL for the defaults. */
typedef struct kiln_session kiln_session;

kiln_status kiln_session_create(kiln_model *m, const kiln_session_options *opts,
                                kiln_session **out);
void kiln_session_free(kiln_session *s);

/* Run the model. inputs[i] binds graph input i (in kiln_model_input_name order).
 * outputs[j] receives graph output j: a tensor owned by the session, valid until the
 * next run (from any thread) or the session's free. n_outputs may be smaller than the
 * model's count. */
kiln_status kiln_session_run(kiln_session *s, int n_inputs, kiln_tensor *const *inputs,
                             int n_outputs, const kiln_tensor **outputs);

/* Run the model and copy output j into outputs[j], a tensor of the caller's with the
 * output's dtype and dims (KILN_ERR_TYPE / KILN_ERR_SHAPE naming the output and both
 * shapes otherwise; its layout may be NCHW or NHWC). The copy is made before another run
 * of the session can start, so threads sharing a session each get their own run's
 * outputs.
 *
 * Device IO binding: inputs and outputs may be tensors on the session's device
 * (kiln_tensor_create_on, _wrap_on, _from_dlpack): the run reads and writes them there,
 * one device-to-device copy each and no host copy (device outputs must be NCHW). Inputs
 * whose values set shapes in the graph (a Reshape's shape fed by a graph input) must be
 * host tensors. A session on the CPU refuses device tensors. */
kiln_status kiln_session_run_into(kiln_session *s, int n_inputs, kiln_tensor *const *inputs,
                                  int n_outputs, kiln_tensor *const *outputs);

/* kiln_session_run_into with inputs and outputs bound by name: every model input once,
 * in any order; any of the outputs. Unknown or repeated names are KILN_ERR_INVALID_ARGUMENT
 * naming them and the model's. */
kiln_status kiln_session_run_named(kiln_session *s, int n_inputs, const char *const *input_names,
                                   kiln_tensor *const *inputs, int n_outputs,
                                   const char *const *output_names, kiln_tensor *const *outputs);

/* Output j's dtype and dims for inputs of these dtypes and shapes, before a run: the
 * session builds (or finds) its plan for them and runs nothing; the inputs' data is read
 * only where values set shapes. */
kiln_status kiln_session_output_info(kiln_session *s, int n_inputs, kiln_tensor *const *inputs, int j,
                                     kiln_dtype *dtype, int *ndim, int64_t dims[KILN_MAX_DIMS]);

/* The cudaStream_t a CUDA session's runs are ordered on (options.stream when set, else
 * kiln's own), for a DLPack producer to order its work before kiln reads
 * (__dlpack__(stream=...)); NULL for a session on the CPU. */
void *kiln_session_stream(const kiln_session *s);

/* Statistics of the plan used by the last run. */
typedef struct kiln_plan_stats {
    size_t arena_bytes;    /* peak activation memory: the one arena of the plan */
    size_t naive_bytes;    /* what one buffer per value would have taken */
    size_t constant_bytes; /* weights and folded constants */
    size_t workspace_bytes;/* scratch memory shared by kernels */
    int nodes;             /* nodes executed per run (after folding) */
    int folded;            /* nodes computed once at plan time */
} kiln_plan_stats;
kiln_status kiln_session_stats(const kiln_session *s, kiln_plan_stats *out);

/* ----------------------------------------------------------------- training */

typedef enum kiln_optimizer {
    KILN_OPTIM_SGD = 0,      /* momentum, Nesterov, weight decay (PyTorch's torch.optim.SGD) */
    KILN_OPTIM_ADAM = 1,
    KILN_OPTIM_ADAMW = 2,    /* decoupled weight decay */
    KILN_OPTIM_ADADELTA = 3, /* what pytorch/examples mnist uses */
    KILN_OPTIM_LARS = 4,     /* layer-wise adaptive rate scaling, as MLPerf's ResNet-50 (see lars_eta) */
    KILN_OPTIM_LAMB = 5      /* Adam moments scaled per tensor by ||w|| / ||update|| (see below) */
} kiln_optimizer;

typedef enum kiln_schedule {
    KILN_SCHEDULE_CONSTANT = 0,
    KILN_SCHEDULE_STEP = 1,  /* lr * gamma^floor(step / step_size) (PyTorch's StepLR) */
    KILN_SCHEDULE_COSINE = 2, /* lr * (1 + cos(pi * step / total_steps)) / 2 */
    KILN_SCHEDULE_POLY = 3    /* lr * (1 - (step - warmup_steps) / (total_steps - warmup_steps))^2 after
                                 the warm-up (MLPerf's LARS schedule; 0 from total_steps on) */
} kiln_schedule;

typedef enum kiln_amp {
    KILN_AMP_OFF = 0,  /* fp32 */
    KILN_AMP_FP16 = 1, /* fp16 compute, fp32 master weights, dynamic loss scaling */
    KILN_AMP_BF16 = 2  /* bf16 compute, fp32 master weights, no scaling */
} kiln_amp;

/* Data parallelism: one process per device, each holding a whole model. A communicator
 * joins this process to the others (its rank among world_size); a trainer given one
 * (kiln_train_options.dist) starts from rank 0's weights, checks that every rank holds
 * the same model, and averages the gradients of every step over the ranks before the
 * update (kiln.AllReduce nodes in the training graph, in buckets of bucket_bytes, the
 * last layers' first, each as soon as backward has written it). The collectives are
 * NCCL's (CUDA trainers) and MPI's (CPU trainers, and NCCL's bootstrap under mpirun);
 * kiln has no transport of its own. README "Data-parallel training" shows launches. */
typedef enum kiln_dist_kind {
    KILN_DIST_AUTO = 0, /* MPI when the process was started by mpirun (OMPI_COMM_WORLD_SIZE,
                           PMI_SIZE) and this build has MPI, else torchrun's variables */
    KILN_DIST_MPI = 1,  /* rank and size from MPI_COMM_WORLD; CPU collectives by MPI, and
                           under CUDA the NCCL id sent with MPI_Bcast */
    KILN_DIST_ENV = 2   /* torchrun's variables RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
                           MASTER_PORT: rank 0 listens on MASTER_PORT and sends the NCCL
                           unique id to the others (CUDA only: the CPU's collectives are MPI's) */
} kiln_dist_kind;

typedef struct kiln_dist_options {
    size_t struct_size; /* as kiln_session_options.struct_size (KILN_DIST_OPTIONS_INIT) */
    kiln_dist_kind kind;
    kiln_device device; /* the trainers' device: CUDA joins an NCCL communicator */
    int device_index;   /* CUDA: -1 (default through KILN_DIST_OPTIONS_INIT) takes LOCAL_RANK */
    double timeout_s;   /* a collective (or the rendezvous) waiting longer fails, naming the
                           step; 0: 300 s. A rank that died or hangs so stops the others. */
} kiln_dist_options;
#define KILN_DIST_OPTIONS_INIT {.struct_size = sizeof(kiln_dist_options), .device_index = -1}

typedef struct kiln_dist kiln_dist;
/* Join the other ranks (collective: every rank calls it). A context has at most one
 * communicator at a time (its trainers' kiln.AllReduce nodes reduce through it). Fails
 * with KILN_ERR_INVALID_ARGUMENT naming a missing or malformed variable, KILN_ERR_IO
 * naming the address that could not be reached (or the timeout), KILN_ERR_UNSUPPORTED
 * when this build lacks MPI or NCCL for what is asked. */
kiln_status kiln_dist_create(kiln_context *ctx, const kiln_dist_options *opts, kiln_dist **out);
int kiln_dist_rank(const kiln_dist *d);
int kiln_dist_size(const kiln_dist *d);
int kiln_dist_local_rank(const kiln_dist *d);
/* The mean over the ranks of n floats of host memory, in place (collective; for logs:
 * the ranks' losses). */
kiln_status kiln_dist_mean_f32(kiln_dist *d, float *data, int64_t n);
/* Wait until every rank gets here (collective). */
kiln_status kiln_dist_barrier(kiln_dist *d);
/* After the trainers that use it, before its context. NULL: nothing. */
void kiln_dist_free(kiln_dist *d);

/* Whether this process was started by a launcher as a rank (torchrun's WORLD_SIZE or
 * mpirun's variables are set, whatever the count: `kiln launch --nproc 1` makes a world of
 * one rank, through NCCL on CUDA). */
int kiln_dist_launched(void);

/* Options of a trainer. Zeroed fields take the defaults named here. Schedules count
 * optimizer steps; warm-up (linear from 0: lr * (step + 1) / warmup_steps while step <
 * warmup_steps) multiplies any schedule. STEP and COSINE count from step 0 (so the warm-up
 * scales their first values); POLY decays over the steps after the warm-up.
 *
 * LARS (MLPerf ResNet-50's, NVIDIA's): per parameter tensor, trust = lars_eta * ||w|| /
 * (||g|| + weight_decay * ||w||) (1 when either norm is 0), then v = momentum * v + lr *
 * trust * (g + weight_decay * w), w -= v. LAMB (You et al., NVIDIA's FusedLAMB): Adam's
 * moments with bias correction, u = m^ / (sqrt(v^) + eps) + weight_decay * w, trust =
 * ||w|| / ||u|| (1 when either is 0), w -= lr * trust * u. With no_decay_bn_bias, the
 * excluded tensors take neither weight decay nor the trust ratio (LARS: plain momentum
 * SGD v = momentum * v + lr * g; LAMB: Adam). */
typedef struct kiln_train_options {
    size_t struct_size;  /* as kiln_session_options.struct_size (KILN_TRAIN_OPTIONS_INIT) */
    kiln_device device;
    int device_index;    /* the CUDA device ordinal (0: the first) */
    kiln_optimizer optimizer;
    float lr;            /* learning rate (0: 1.0 for Adadelta, 1e-3 for Adam/AdamW/LAMB, 0.01 for SGD,
                            0.1 for LARS) */
    float momentum;      /* SGD, LARS */
    int nesterov;        /* SGD */
    float weight_decay;  /* SGD, Adam, Adadelta: added to the gradient; AdamW, LAMB: decoupled;
                            LARS: added to the gradient and in the trust ratio */
    float beta1, beta2;  /* Adam, AdamW, LAMB (0: 0.9 and 0.999) */
    float eps;           /* Adam, AdamW (0: 1e-8); Adadelta, LAMB (0: 1e-6) */
    float rho;           /* Adadelta (0: 0.9) */
    kiln_schedule schedule;
    int64_t step_size;   /* STEP */
    float gamma;         /* STEP */
    int64_t total_steps; /* COSINE, POLY (POLY: > warmup_steps) */
    int64_t warmup_steps;
    kiln_amp amp;
    int accumulate;      /* micro-batches per optimizer step (0 or 1: none); gradients are averaged */
    uint64_t seed;       /* dropout */
    int threads;         /* CPU threads of this trainer's steps (0: the context's setting) */
    int strict_fp32;     /* CUDA: 1 keeps f32 convolutions and products off TF32 tensor cores
                            (and so NCHW without amp); 0 (default) allows TF32, as PyTorch does
                            for convolutions: the sessions' policy (kiln_session_options) */
    int deterministic;   /* CUDA: 1 takes only the cuDNN algorithms cuDNN reports
                            deterministic (no atomic sums), so the same inputs give the same
                            bits on every run whatever the timing search picks (PyTorch's
                            use_deterministic_algorithms); 0 (default): the fastest */
    unsigned disable_passes; /* KILN_PASS_* bits to turn off; CUDA training honours
                                KILN_PASS_NHWC (convolution chains and their gradients
                                NHWC by the sessions' policy), KILN_PASS_AUTOTUNE,
                                KILN_PASS_CONV_GEMM, KILN_PASS_CONV_DIRECT,
                                KILN_PASS_FUSE_CONV (conv / product + activation as one
                                kernel), KILN_PASS_STREAMS, KILN_PASS_FUSE_LOSS and
                                KILN_PASS_FUSE_POOL (with NHWC), KILN_PASS_FUSE_BN;
                                CPU training passes them all to its session */
    /* Large-batch training (issue 12): */
    float lars_eta;       /* LARS trust coefficient (0: 0.001) */
    float clip_grad_norm; /* > 0: PyTorch's clip_grad_norm_: when the 2-norm of all gradients
                             together (after fp16 unscaling; with accumulation, of the averaged
                             gradient) exceeds it, every gradient is scaled by
                             clip_grad_norm / (norm + 1e-6); 0: no clipping */
    int no_decay_bn_bias; /* 1: parameters of at most one dimension (BatchNormalization's
                             scale and bias, every bias: PyTorch's "ndim <= 1" convention) take no
                             weight decay, in every optimizer, and are LARS's / LAMB's excluded
                             tensors (no trust ratio) */
    /* data parallelism (kiln_dist): NULL trains alone */
    kiln_dist *dist;
    size_t bucket_bytes; /* gradients per all-reduce (0: 25 MiB, PyTorch DDP's) */
    int sync_bn;         /* 1: SyncBatchNorm: BatchNormalization's batch statistics (forward
                            and backward) over every rank's batch, the numbers of one process
                            holding the whole batch (CPU ranks: MPI; CUDA: one rank only for
                            now, more is KILN_ERR_UNSUPPORTED) */
    int drop_last;       /* kiln_trainer_train_epoch's sharding: 1 drops the samples past the
                            last multiple of world size; 0 (default) pads with the first ones
                            (PyTorch's DistributedSampler) */
    /* Activation checkpointing (issue 12; kiln_trainer_plan_memory below): */
    size_t memory_limit;  /* > 0: the step's planned peak memory (kiln_train_memory.peak_bytes)
                             at batch memory_batch must fit these bytes. kiln_trainer_create then
                             recomputes forward values just before their backward use instead
                             of keeping them, as few as fit (most bytes saved per operation
                             first): cheap ones (BatchNormalization, elementwise ops) first,
                             then, only if those do not suffice, convolution and product
                             outputs; and fails with KILN_ERR_OUT_OF_MEMORY naming the limit and
                             the least the step needs when even all of them do not fit. 0: no
                             limit, nothing recomputed */
    int64_t memory_batch; /* the batch memory_limit is planned for (required with it) */
    int no_recompute;     /* 1: recompute nothing (a memory_limit is then only checked); 2:
                             cheap values only, never a convolution or product; 0: both */
} kiln_train_options;
#define KILN_TRAIN_OPTIONS_INIT {.struct_size = sizeof(kiln_train_options)}

/* A trainer holds the training graph (the forward graph, the backward graph autograd
 * derives from it, and the optimizer), the weights, and the optimizer state.
 *
 * The model's output named `loss` must be one float whatever the batch (else
 * kiln_trainer_create fails with KILN_ERR_SHAPE, naming the value and its shape). Every
 * float initializer that reaches the loss is trained, except BatchNormalization's running
 * statistics, which are updated with momentum as in PyTorch. Dropout and BatchNormalization run in training mode. */
typedef struct kiln_trainer kiln_trainer;

kiln_status kiln_trainer_create(kiln_model *m, const char *loss, const kiln_train_options *opts,
                                kiln_trainer **out);
void kiln_trainer_free(kiln_trainer *t);

/* One micro-batch: forward, backward, and every `accumulate` calls the optimizer update.
 * inputs bind the model's graph inputs in order (e.g. images and labels): host tensors, or
 * tensors on the trainer's own CUDA device (copied on the device, ordered on the trainer's
 * stream, kiln_trainer_stream). *loss (may be NULL) receives this micro-batch's loss. */
kiln_status kiln_trainer_step(kiln_trainer *t, int n_inputs, kiln_tensor *const *inputs,
                              float *loss);

/* Steps [start_step, end_step) (end_step -1: to the end) of epoch `epoch` over a whole
 * data set: images f32 (N, ...) and labels i64 (N) bind the model's first two inputs,
 * batches of `batch` (1..N; the last one partial) in the order the batch loader gives for
 * (seed, epoch) with shuffling. On CUDA the data set is copied to the device once and every
 * step gathers its batch there, inside the step's CUDA graph: the host only launches.
 * *last_loss (may be NULL) receives the last step's loss. */
kiln_status kiln_trainer_train_epoch(kiln_trainer *t, const kiln_tensor *images, const kiln_tensor *labels,
                                     int64_t batch, uint64_t seed, int64_t epoch, int64_t start_step,
                                     int64_t end_step, float *last_loss);

/* The one-time work of kiln_trainer_train_epoch over this data set and batch size, done
 * now rather than inside the first epoch: on CUDA the data set is copied to the device and,
 * for each batch shape an epoch takes (the full batch and the last partial one), the step's
 * plan is built, run once (cuDNN's and cuBLASLt's algorithm searches), captured into its
 * CUDA graph and replayed once; every bit of training state (weights, optimizer state,
 * statistics, counters, the Dropout seed) is then put back as it was, so training goes on
 * exactly as without the call. On the CPU there is nothing to do. */
kiln_status kiln_trainer_warmup(kiln_trainer *t, const kiln_tensor *images, const kiln_tensor *labels,
                                int64_t batch);

/* An inference model with the current weights computing `output` (a graph output of the
 * training model): nodes that do not lead to it (the loss) and inputs it does not need
 * (the labels) are dropped; BatchNormalization uses running statistics, Dropout passes
 * values through. No autograd state. Free it with kiln_model_free. */
kiln_status kiln_trainer_export(kiln_trainer *t, const char *output, kiln_model **out);

/* Memory of one training step, by planning only (nothing runs; issue 12). peak_bytes =
 * arena_bytes (the plan's one activation arena: forward values kept for the backward,
 * gradients, temporaries) + param_bytes (the trained weights) + state_bytes (optimizer
 * state, BatchNormalization running statistics, counters) + input_bytes (the batch) +
 * workspace_bytes (the kernels' scratch: on the CPU one buffer; on CUDA one per stream of
 * the step, each the most any node's kernel may ask — cuDNN's convolutions: the largest of
 * their algorithms' up to 512 MiB, since autotuning picks one at run time — counted only
 * with the device at hand, not for a plan-only trainer; a data set kept on the device is
 * not included). */
typedef struct kiln_train_memory {
    int64_t batch;
    size_t peak_bytes, arena_bytes, param_bytes, state_bytes, input_bytes, workspace_bytes;
    size_t arena_bytes_without; /* the arena with nothing recomputed */
    int recomputed;             /* forward values recomputed (of `candidates` the pass could) */
    int candidates;
    double recompute_ops;       /* element operations the recomputations add per step */
} kiln_train_memory;
/* Plan the trainer's step for data inputs of first dim `batch`. memory_limit > 0: with
 * recompute (1: every tier; 2: cheap values only; 0: none), the fewest recomputations that
 * fit (as kiln_train_options.memory_limit);
 * KILN_ERR_OUT_OF_MEMORY, with *out filled and a message naming the limit and the least the
 * step needs, when it does not fit. */
kiln_status kiln_trainer_plan_memory(kiln_trainer *t, int64_t batch, size_t memory_limit, int recompute,
                                     kiln_train_memory *out);
/* The largest batch whose step fits memory_limit (> 0), by planning only (a search over
 * batch sizes up to max_batch, 0: 1 << 20): *batch fits and *batch + 1 does not; *at is its
 * memory. KILN_ERR_OUT_OF_MEMORY when not even batch 1 fits. */
kiln_status kiln_trainer_max_batch(kiln_trainer *t, size_t memory_limit, int recompute, int64_t max_batch,
                                   int64_t *batch, kiln_train_memory *at);
/* A device's free and total memory in bytes (CUDA: cudaMemGetInfo; the CPU: available and
 * physical RAM). */
kiln_status kiln_device_memory(kiln_context *ctx, kiln_device device, int device_index, size_t *free_bytes,
                               size_t *total_bytes);

typedef struct kiln_train_stats {
    int64_t micro_steps;   /* kiln_trainer_step calls */
    int64_t steps;         /* optimizer steps taken */
    int64_t skipped_steps; /* steps skipped for inf/NaN gradients (fp16) */
    float lr;              /* learning rate of the next step */
    float loss_scale;      /* fp16 loss scale (1 otherwise) */
    int params;            /* trained tensors */
    int64_t param_count;   /* trained scalars */
} kiln_train_stats;
kiln_status kiln_trainer_stats(const kiln_trainer *t, kiln_train_stats *out);

/* Checkpoints in safetensors format: weights, optimizer state, counters and the loader
 * position given by the caller (epoch, step in epoch). Saving writes a temporary file and
 * renames it over path, so a crash mid-save leaves the previous checkpoint loadable (and
 * the next save removes the temporaries of saves killed midway). Loading checks every
 * tensor (presence, dtype, shape) and the counters before writing any: a checkpoint that
 * fails to load leaves the trainer as it was. */
kiln_status kiln_trainer_save(kiln_trainer *t, const char *path, int64_t epoch, int64_t step_in_epoch);
kiln_status kiln_trainer_load(kiln_trainer *t, const char *path, int64_t *epoch, int64_t *step_in_epoch);

/* Resuming on any number of ranks. Where a checkpoint is in the data, in units that no
 * world size or batch changes, for kiln_loader_seek_sample. */
typedef struct kiln_train_position {
    int64_t epoch;         /* the epoch under way (0-based); at an epoch's end the next one, sample 0 */
    int64_t sample;        /* samples of that epoch's global order consumed by all ranks together
                              (kiln_loader_epoch_sample); -1: not recorded (kiln_trainer_save, and
                              checkpoints older than this field: step_in_epoch only) */
    int64_t step_in_epoch; /* the saving run's step in the epoch (its world size's and batch's) */
    int64_t world_size;    /* the saving run's ranks (saving 0: the trainer's); 0 when not recorded */
    int64_t batch;         /* its per-rank batch; 0 when not recorded */
} kiln_train_position;
/* kiln_trainer_save / kiln_trainer_load with the whole position. With data parallelism
 * rank 0 alone saves; every rank loads the same file (a shared file system, or a copy on
 * every host) and must call the load: the ranks check, before any restores anything,
 * that each read a loadable checkpoint and the same one (its counters and position), else
 * every rank fails naming the rank. Weights, optimizer state, loss scale and running
 * statistics are then the same on every rank (rank 0's when it saved). */
kiln_status kiln_trainer_save_position(kiln_trainer *t, const char *path, const kiln_train_position *pos);
kiln_status kiln_trainer_load_position(kiln_trainer *t, const char *path, kiln_train_position *pos);
/* Where kiln_trainer_train_epoch takes up epoch `epoch`: at position `sample` of its global
 * order (a kiln_train_position's, saved by any world size and batch). That epoch then
 * covers the samples from there on, sharded over this run's ranks as kiln_loader_seek_sample
 * shards them, and its steps are numbered as that loader numbers them: of the epoch's
 * ceil(shard / batch) steps, the first `first` are behind (first = the full epoch's steps
 * minus the rest's; kiln_trainer_train_epoch's start_step must be >= first); a sample at or
 * past the data set's end leaves nothing of it to train. Other epochs are whole. sample 0
 * or a negative epoch clears it. */
kiln_status kiln_trainer_set_epoch_start(kiln_trainer *t, int64_t epoch, int64_t sample);
/* Set the step counters as a run's after `micro_steps` micro-batches (rounded down to a
 * whole optimizer step): the learning-rate schedule, counted in optimizer steps, goes on
 * from there. For a run resumed with another world size or batch, whose epochs have
 * another number of steps (see kiln train --resume in docs/train.md). */
kiln_status kiln_trainer_set_steps(kiln_trainer *t, int64_t micro_steps);

/* Model builders (kiln_model_mnist_net...) are declared in kiln_models.h. */

/* -------------------------------------------------------------- op registry */

/* The number of ops kiln knows and the name of op i (NULL when out of range). */
int kiln_op_count(void);
const char *kiln_op_name(int i);

#ifdef __cplusplus
}
#endif
#endif /* KILN_H */
