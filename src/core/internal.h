/*
 * internal.h — what kiln's own files share: tensors, the graph, attributes, the op
 * contract and the helpers every op file uses. Not installed; the public API is
 * include/kiln.h.
 */
#ifndef KILN_INTERNAL_H
#define KILN_INTERNAL_H

#include "kiln.h"
#include "kiln_tools.h"
#include "kiln_models.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define KILN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KILN_PRINTF(a, b)
#endif

/* ------------------------------------------------------------------ context */

/* Messages are kept per thread (src/core/context.c): a context shared by threads never
 * has one thread's message written over another's. Read this thread's message with
 * kiln_context_message(ctx). A zeroed kiln_context (id 0) on the stack is a valid context
 * for single-threaded internal use. */
#define KILN_MSG_SIZE 2048
struct kiln_context {
    uint64_t id;  /* unique per kiln_context_create, the key of the per-thread messages */
    int threads;  /* kiln_context_set_threads; read and written atomically */
    kiln_log_fn log;       /* kiln_context_set_log (NULL: none) */
    void *log_user;
    kiln_log_level log_level;
    struct kiln_dist *dist; /* the context's communicator (kiln_dist_create), or NULL */
};

/* Log to the context's log (kiln_context_set_log) when level is within its setting. */
void kiln_log(kiln_context *ctx, kiln_log_level level, const char *fmt, ...) KILN_PRINTF(3, 4);
bool kiln_log_on(const kiln_context *ctx, kiln_log_level level);
/* A public call ends: a failure's message (the context's) goes to the log as an error.
 * Returns st. */
kiln_status kiln_api_end(kiln_context *ctx, kiln_status st);

/* Take a caller's options struct whose first field is its size_t struct_size (kiln.h,
 * kiln_session_options): into `ours` (zeroed first, ours_size bytes) the first
 * struct_size bytes (0: all of ours); KILN_ERR_INVALID_ARGUMENT naming `what` when the
 * caller's struct is larger and what kiln does not know of is not all zero, or when
 * struct_size is smaller than the size field itself. */
kiln_status kiln_options_take(kiln_context *ctx, const char *what, const void *theirs, void *ours,
                              size_t ours_size);

/* The name the graph inputs' symbolic dims all share (the batch), or NULL when they have
 * none, an unnamed one or several names (src/core/model_info.c). */
struct kiln_model;
const char *kiln_model_shared_dim_param(const struct kiln_model *m);

/* Record a message on ctx and return st. Use as `return kiln_fail(ctx, KILN_ERR_IO, ...)`. */
kiln_status kiln_fail(kiln_context *ctx, kiln_status st, const char *fmt, ...) KILN_PRINTF(3, 4);
kiln_status kiln_failv(kiln_context *ctx, kiln_status st, const char *fmt, va_list ap);
/* Prefix the message already on ctx with more context ("while loading x.onnx: "). */
void kiln_msg_prefix(kiln_context *ctx, const char *fmt, ...) KILN_PRINTF(2, 3);
void kiln_clear_error(kiln_context *ctx);
/* kiln_context_set_threads's setting (0: all cores). */
int kiln_context_threads(const kiln_context *ctx);

/* The one TF32 / NHWC policy of sessions and trainers (kiln.h, strict_fp32;
 * src/core/policy.c): f32 convolutions and products may use TF32 unless strict_fp32;
 * convolution chains run NHWC on CUDA where tensor cores run them (fp16/bf16, or f32 with
 * TF32) unless KILN_PASS_NHWC is disabled. */
bool kiln_policy_tf32(int strict_fp32);
bool kiln_policy_nhwc(kiln_device device, kiln_precision precision, int strict_fp32, unsigned disable_passes);

/* Allocation that records an out-of-memory message naming what was allocated. */
void *kiln_malloc(kiln_context *ctx, size_t n, const char *what);
void *kiln_calloc(kiln_context *ctx, size_t count, size_t size, const char *what);
char *kiln_strdup(kiln_context *ctx, const char *s);

/* -------------------------------------------------------------------- dtype */

bool kiln_dtype_valid(kiln_dtype t);
bool kiln_dtype_is_int(kiln_dtype t);     /* signed and unsigned integers (not bool) */
bool kiln_dtype_is_signed(kiln_dtype t);  /* floats and signed integers */

float kiln_f16_to_f32(uint16_t h);
uint16_t kiln_f32_to_f16(float f);   /* round to nearest even */
float kiln_bf16_to_f32(uint16_t h);
uint16_t kiln_f32_to_bf16(float f);  /* round to nearest even */

/* ------------------------------------------------------------------- tensor */

struct kiln_tensor {
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    kiln_format format; /* meaningful for ndim == 4 only */
    void *data;         /* NULL: shape only (e.g. during shape inference) */
    bool owns_data;     /* host memory freed with the tensor */
    kiln_context *ctx;  /* for tensors created through the public API */
    /* Where data is (zeroed: the host). Device memory the tensor owns (kiln_tensor_create_on)
     * goes back to the device's backend (owns_device); memory from DLPack goes back
     * through dl's deleter. */
    kiln_device device;
    int device_index;
    bool owns_device;
    struct DLManagedTensor *dl;
    /* References beyond the first (kiln_tensor_to_dlpack's exports), atomic: each holder's
     * kiln_tensor_free drops one and the one that finds none left frees the tensor. */
    int extra_refs;
    bool public_handle; /* made by a public constructor (exportable through DLPack) */
};

int64_t kiln_numel(int ndim, const int64_t *dims);
int64_t kiln_tensor_numel(const kiln_tensor *t);
/* Set dtype and shape of a (data-less) tensor. */
void kiln_tensor_set_shape(kiln_tensor *t, kiln_dtype dtype, int ndim, const int64_t *dims);
/* "f32[1,3,224,224]" into buf; returns buf. */
char *kiln_shape_str(const kiln_tensor *t, char *buf, size_t n);
/* KILN_ERR_UNSUPPORTED naming `what` when t's memory is on a device: calls that read or
 * write elements on the host. */
kiln_status kiln_require_host(kiln_context *ctx, const kiln_tensor *t, const char *what);
/* A new owning tensor with zeroed data (internal: ctx may be NULL). NULL on OOM. */
kiln_tensor *kiln_tensor_new(kiln_context *ctx, kiln_dtype dtype, int ndim, const int64_t *dims);
/* A deep copy (NULL on OOM). */
kiln_tensor *kiln_tensor_clone(kiln_context *ctx, const kiln_tensor *t);
/* Element access in any dtype (kiln_get_f64 / kiln_set_f64 / kiln_get_i64 / kiln_set_i64)
 * and kiln_dtype_is_float: include/kiln_tools.h. */

/* Copy a 4-D tensor's elements into dst laid out as `to` (src is in the other layout). */
void kiln_layout_convert(const kiln_tensor *src, void *dst, kiln_format to);
/* Row-major strides of dims, in elements. */
void kiln_strides(int ndim, const int64_t *dims, int64_t *strides);
/* Normalize an axis in [-r, r) to [0, r); returns false when out of range. */
bool kiln_norm_axis(int64_t *axis, int rank);

/* numpy broadcasting of two shapes. false when they do not broadcast. */
bool kiln_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                          int64_t *out);
/* Strides (elements) for reading a tensor of shape (nin, in) broadcast to (nout, out):
 * 0 on broadcast dims. Use with kiln_index_next. */
void kiln_broadcast_strides(int nin, const int64_t *in, int nout, const int64_t *out,
                            int64_t *strides);
/* Advance a multi-index over dims (row-major); adds strides of up to 3 operands to offs.
 * Returns false after the last element. Typical loop:
 *   int64_t idx[8] = {0}, off[3] = {0};
 *   for (int64_t i = 0; i < n; i++) { ...use off[0], off[1]...; kiln_index_next(nd, dims, idx, 2, st, off); } */
bool kiln_index_next(int ndim, const int64_t *dims, int64_t *idx, int nops,
                     const int64_t (*strides)[KILN_MAX_DIMS], int64_t *offs);

/* --------------------------------------------------------------- attributes */

typedef enum kiln_attr_type {
    KILN_ATTR_NONE = 0,
    KILN_ATTR_FLOAT,
    KILN_ATTR_INT,
    KILN_ATTR_STRING,
    KILN_ATTR_TENSOR,
    KILN_ATTR_FLOATS,
    KILN_ATTR_INTS,
    KILN_ATTR_STRINGS,
    KILN_ATTR_GRAPH /* subgraphs are not supported: the importer rejects nodes carrying them */
} kiln_attr_type;

typedef struct kiln_attr {
    char *name;
    kiln_attr_type type;
    float f;
    int64_t i;
    char *s;           /* STRING */
    int n;             /* count for FLOATS / INTS / STRINGS */
    float *floats;
    int64_t *ints;
    char **strings;
    kiln_tensor *t;    /* TENSOR (owned) */
} kiln_attr;

/* ---------------------------------------------------------------------- graph */

/* A value: an edge of the graph. Shapes use -1 for an unknown / symbolic dim until a
 * plan fixes them. */
typedef struct kiln_value {
    char *name;
    kiln_dtype dtype;
    int ndim;          /* -1: rank unknown */
    int64_t dims[KILN_MAX_DIMS];
    char *dim_param[KILN_MAX_DIMS]; /* symbolic names of graph inputs' dims (or NULL) */
    kiln_tensor *init; /* initializer data (owned), or NULL */
    int producer;      /* node index, or -1 (graph input / initializer) */
    bool is_input;
    bool is_output;
    /* Memory layout of a 4-D value on a device backend, set by the layout pass
     * (src/passes/layout.c); device plans copy it into their tensors. The CPU backend
     * keeps every tensor NCHW whatever this says: host data, initializers and folded
     * constants included, are always NCHW bytes (a device converts them on upload). */
    kiln_format format;
} kiln_value;

struct kiln_node {
    char *op_type;
    char *name;     /* never NULL; "" if the file gave none */
    char *domain;   /* "" for the default ONNX domain */
    int op;         /* index into the op registry, -1 if unknown */
    int opset;      /* opset version of the node's domain */
    int n_in;
    int *in;        /* value indices, -1 for a missing optional input */
    int n_out;
    int *out;       /* value indices, -1 for a missing optional output */
    int n_attrs;
    kiln_attr *attrs;
    kiln_model *model; /* back pointer, for the builder API */
};

struct kiln_model {
    kiln_context *ctx;
    int n_values, cap_values;
    kiln_value *values;
    int n_nodes, cap_nodes;
    kiln_node *nodes;   /* in topological order once finalized */
    int n_inputs, *inputs;   /* graph inputs (not initializers) */
    int n_outputs, *outputs;
    int opset;          /* default-domain opset */
    bool finalized;
    bool keep_order;    /* finalization keeps the nodes' order when it is topological (the
                           recomputations placed by src/train/recompute.c); copied by clones */
    int64_t ir_version; /* the ONNX file's IR version (0: built in C); kept by kiln_model_save_onnx */
    char *producer;     /* e.g. "pytorch 2.11" */
    /* Open-addressing hash of value indices by name (-1: empty slot), kept by graph.c;
     * NULL (after an allocation failure) means lookups scan. */
    int *name_index, name_index_cap;
};

/* Value lookup / creation by name (-1 if absent / on OOM). */
int kiln_model_find_value(const kiln_model *m, const char *name);
int kiln_model_get_value(kiln_model *m, const char *name);
/* Add a node with already-resolved value indices; returns the node index or -1 (OOM). The
 * attrs array is taken over (may be NULL). */
int kiln_model_add_node_raw(kiln_model *m, const char *op_type, const char *name,
                            const char *domain, int n_in, const int *in, int n_out,
                            const int *out, int n_attrs, kiln_attr *attrs);
void kiln_attr_clear(kiln_attr *a);
/* Parse attribute text ("axis=1;alpha=0.5;pads=[1,2];mode=reflect", see optest.h) into a
 * freshly allocated array (NULL + *n=0 for ""); src/core/attrs.c. */
kiln_status kiln_attrs_parse(kiln_context *ctx, const char *text, kiln_attr **out, int *n);
/* Deep copy of an attribute (KILN_ERR_OUT_OF_MEMORY leaves dst cleared). */
kiln_status kiln_attr_copy(kiln_context *ctx, kiln_attr *dst, const kiln_attr *src);
/* A deep, open (not finalized) copy of a model, e.g. to extend it with a backward graph. */
kiln_status kiln_model_clone(const kiln_model *src, kiln_model **out);
/* The graph half of kiln_model_finalize (graph.c): names, references, topological order
 * and each node's op and arity checked, the model marked finalized. kiln_model_finalize
 * (plan.c, a layer above) adds the static shape and dtype inference. */
kiln_status kiln_model_check_graph(kiln_model *m);

/* Attribute lookup for ops. The typed getters return dflt when absent. */
const kiln_attr *kiln_node_attr(const kiln_node *n, const char *name);
int64_t kiln_attr_int(const kiln_node *n, const char *name, int64_t dflt);
float kiln_attr_float(const kiln_node *n, const char *name, float dflt);
const char *kiln_attr_string(const kiln_node *n, const char *name, const char *dflt);
/* INTS: count in *count (0 and NULL when absent). */
const int64_t *kiln_attr_ints(const kiln_node *n, const char *name, int *count);

/* --------------------------------------------------------------------- ops */

typedef struct kiln_op_ctx {
    kiln_context *kctx;
    const kiln_node *node;
    int n_in;
    kiln_tensor **in;  /* in[i] NULL for a missing optional input. During infer, data is
                          non-NULL only where the value is known (constant) */
    int n_out;
    kiln_tensor **out; /* infer sets dtype/shape; forward writes data (already allocated) */
    void *workspace;   /* forward: cpu_workspace() bytes of scratch, 64-byte aligned */
    size_t workspace_size;
    uint64_t seed;     /* random ops (Dropout in training): seed for this run */
    /* Device backends only (NULL elsewhere): there in[] are device tensors, and
     * host_in[i] is input i's host tensor in the plan (dtype, shape, and data where the
     * value is known when the plan is built: constants, value inputs), for kernels that
     * need such values on the host (Pad's pads). See src/cuda/cuda_backend.h. */
    kiln_tensor *const *host_in;
} kiln_op_ctx;

/* Fail with a message that names the op, the node and the input shapes:
 *   Conv node 'conv1' [X: f32[1,3,224,224], W: f32[64,4,7,7]]: <your message> */
kiln_status kiln_op_fail(kiln_op_ctx *c, kiln_status st, const char *fmt, ...) KILN_PRINTF(3, 4);

/* Shorthand used inside infer: check an input's presence / dtype. */
#define KILN_OP_CHECK(c, cond, st, ...) \
    do { if (!(cond)) return kiln_op_fail((c), (st), __VA_ARGS__); } while (0)

typedef struct kiln_grad_ctx kiln_grad_ctx;

/* ------------------------------------------------------- op properties
 * What passes, the planner, the trainer and the profiler know about an op: declared in
 * the op's own kiln_op_def (HACKING.md), never in lists elsewhere. */

/* How the fp16/bf16 pass (src/passes/precision.c) treats the op. Every op declares one
 * (tests/test_op_props.c fails on KILN_PREC_UNDECLARED). */
typedef enum kiln_prec_class {
    KILN_PREC_UNDECLARED = 0,
    KILN_PREC_LOW,    /* computes in L: f32 inputs read as L, f32 outputs become L */
    KILN_PREC_FOLLOW, /* moves or selects data: L when an input is L or every reader wants L */
    KILN_PREC_ANY,    /* reads whatever dtype it gets (Shape, ArgMax, Cast) */
    KILN_PREC_FP32,   /* f32 in and out (sums of many terms, losses, normalizations) */
    KILN_PREC_MIXED   /* input 0 in any float dtype, the others f32; outputs f32 (fused loss) */
} kiln_prec_class;

/* kiln_op_def.prec_flags */
enum {
    KILN_PREC_EXP_LOG = 1u << 0,  /* exp/log: stays f32 when it feeds an fp32 op */
    KILN_PREC_EXP_ARG = 1u << 1,  /* arithmetic that stays f32 when it only computes such an
                                     exp's argument (x - max(x) of a written-out softmax) */
    KILN_PREC_SHRINKS = 1u << 2,  /* output smaller than its input: a Cast is not moved before it */
    KILN_PREC_SOURCE = 1u << 3,   /* an f32 output may be retargeted to L (Cast to f32, Constant) */
    KILN_PREC_LIKE_X = 1u << 5,   /* mixed: output 0 in input 0's dtype, and its optional output 1
                                     an f32 copy for f32 readers (the fused loss's gradient) */
    KILN_PREC_SHAPE_ANY = 1u << 6, /* its shape_only_inputs are read in any dtype (no output's dtype
                                     follows them): an L value is not cast to f32 for its shape */
    KILN_PREC_GROWS = 1u << 7     /* low, and its output may be larger than its input 0 (Resize):
                                     where it grows it into graph outputs nothing else reads, it
                                     computes in f32 from a Cast of that smaller input */
};

/* Which NHWC rule of the layout pass (src/passes/layout.c) the op follows. */
typedef enum kiln_layout_kind {
    KILN_LAYOUT_NONE = 0,
    KILN_LAYOUT_CONV,       /* X, W (and FusedConv's Z) */
    KILN_LAYOUT_POOL,       /* input 0 */
    KILN_LAYOUT_BN,         /* input 0 and output 0 (its other outputs are per-channel) */
    KILN_LAYOUT_GAP,        /* input 0, output (N, C, 1, 1) */
    KILN_LAYOUT_UNARY,      /* input 0, position by position */
    KILN_LAYOUT_BINARY,     /* every input, broadcasting */
    KILN_LAYOUT_SAME_SHAPE, /* kiln.FusedElementwise: every input, as BINARY (broadcasts too) */
    KILN_LAYOUT_CONV_GRAD_INPUT,
    KILN_LAYOUT_CONV_GRAD_WEIGHT,
    KILN_LAYOUT_CONV_GRAD_BIAS,
    KILN_LAYOUT_POOL_GRAD,
    KILN_LAYOUT_SUM_TO,     /* kiln.ReduceSumTo: input 0 as it is, to an output whose bytes are the same in both */
    KILN_LAYOUT_UNARY_GRAD,
    KILN_LAYOUT_BN_GRAD,    /* dY and X (inputs 0, 1) and dX; the per-channel rest has none */
    /* data movement whose CUDA kernels read the format (any axis of a 4-D tensor): */
    KILN_LAYOUT_JOIN,       /* Concat: every input, joined along the axis (as BINARY: operands
                               with the same bytes in both layouts read as they are) */
    KILN_LAYOUT_PARTS,      /* Split, kiln.ConcatGrad: input 0 cut into outputs of its layout */
    KILN_LAYOUT_FOLLOW      /* Slice, kiln.ChannelShuffle: input 0 and output 0 in one layout */
} kiln_layout_kind;

/* Output dtypes when shape inference cannot run (src/passes/infer.c). */
typedef enum kiln_dtype_rule {
    KILN_DT_IN0 = 0,       /* input 0's */
    KILN_DT_IN1,           /* input 1's (CastLike, Where) */
    KILN_DT_I64,
    KILN_DT_BOOL,
    KILN_DT_ATTR_TO,       /* the `to` attribute (Cast) */
    KILN_DT_VALUE,         /* the value attribute's (Constant) */
    KILN_DT_VALUE_OR_F32,  /* the value attribute's, f32 without one (ConstantOfShape) */
    KILN_DT_F32,           /* f32 (f64 when input 0 is f64): the fused loss's f32 outputs */
    KILN_DT_IN2,           /* input 2's (OneHot's values) */
    KILN_DT_ATTR_OUTPUT_DATATYPE, /* the output_datatype attribute, f32 without one (the windows) */
    KILN_DT_U8             /* u8 (DynamicQuantizeLinear's quantized outputs) */
} kiln_dtype_rule;

/* How the trainer (src/train/trainer.c) turns the op into its training form. */
typedef struct kiln_op_training {
    const char *mode_attr;  /* int attribute set to 1 (BatchNormalization's training_mode) */
    int min_opset;          /* the training form's opset (0: any) */
    int mode_input;         /* input set to a constant true (Dropout's training_mode); 0: none */
    int n_outputs;          /* outputs of the training form (added as needed) */
    const char *output_names[4]; /* names of added outputs, by index */
    uint32_t state_inputs;  /* running statistics: initializers the trainer updates, not trains */
    int state_output;       /* the output updating the first state input; the next ones follow */
} kiln_op_training;

/* An elementwise op that kiln.FusedElementwise programs (src/passes/fuse_eltwise.c, the
 * CPU interpreter src/ops/fused_elementwise.c, the CUDA generator
 * src/cuda/fused_elementwise.c) and the fused convolutions' epilogues can hold. */
typedef struct kiln_eltwise {
    int arity;              /* operands: 1 (x) or 2 (a, b) */
    const char *token;      /* the program's token; NULL: the op's name (Sum of two: "Add") */
    int n_params;           /* numbers after '@' in the token (p0, p1) */
    const char *param_attr[2];  /* attribute each parameter comes from ... */
    float param_default[2];     /* ... and its default */
    bool bounds_from_inputs; /* Clip: p0, p1 are inputs 1 and 2 (attributes min / max before opset 11) */
    bool conv_epilogue;     /* kiln.FusedConv / FusedGemm apply it as their activation */
    /* CUDA body of `float k_<token>(float x, float p0, float p1)` (unary) or
     * `float k_<token>(float a, float b)` (binary), computing in f32. */
    const char *cuda;
} kiln_eltwise;

/* The op's FLOPs for these shapes (the profile's column); NULL: 0. */
typedef double (*kiln_op_flops_fn)(const kiln_op_ctx *c);

/* An op's test cases (its `test` function and the helpers only they use) sit in its own file
 * inside #ifdef KILN_OPTESTS, and its def says `.test = KILN_OP_TESTS(test)`. The op files
 * are compiled twice: into libkiln without KILN_OPTESTS (no test code ships), and into
 * kiln_testing, which the test programs link, with it (HACKING.md, "Adding an op"). */
#ifdef KILN_OPTESTS
#define KILN_OP_TESTS(fn) (fn)
#else
#define KILN_OP_TESTS(fn) NULL
#endif

typedef struct kiln_op_def {
    const char *name;            /* ONNX op_type */
    /* NULL: ONNX's default domain. Internal ops (gradients, fused kernels) use "kiln" and
     * are not reachable from ONNX files. */
    const char *domain;
    /* Properties (see above): every op declares .precision; the rest default to none. */
    kiln_prec_class precision;
    uint32_t f32_inputs;         /* bit k: input k stays f32 whatever the op computes in */
    uint32_t f32_outputs;        /* bit k: output k stays f32 (BN's running statistics, its
                                    gradient's dScale and dB) */
    uint32_t prec_flags;         /* KILN_PREC_EXP_LOG ... */
    kiln_layout_kind layout;
    bool random;                 /* draws random numbers in its training form: never folded */
    const kiln_op_training *training; /* NULL: the same op trains */
    const kiln_eltwise *eltwise; /* NULL: not fusable */
    kiln_op_flops_fn flops;
    unsigned char out_dtype[4];  /* kiln_dtype_rule per output (0: input 0's) */
    int min_inputs, max_inputs;  /* max -1: variadic */
    int min_outputs, max_outputs;
    /* Bit i set: input i's data must be known when the plan is built (Reshape's shape,
     * Slice's starts...). The planner supplies constants and the values of graph inputs. */
    uint32_t value_inputs;
    /* Sets out[i] dtype and shape (via kiln_tensor_set_shape) from inputs and attributes,
     * returning KILN_ERR_SHAPE / KILN_ERR_TYPE / KILN_ERR_UNSUPPORTED with kiln_op_fail. */
    kiln_status (*infer)(kiln_op_ctx *c);
    /* The CPU reference: reads in[], writes out[] (allocated with the inferred shapes). */
    kiln_status (*cpu_forward)(kiln_op_ctx *c);
    /* Scratch bytes the CPU forward needs for these shapes (NULL: none). */
    size_t (*cpu_workspace)(const kiln_op_ctx *c);
    /* Self-test cases; returns the number of failed checks. NULL: none, and always NULL in
     * libkiln: set it as KILN_OP_TESTS(fn) (below). */
    int (*test)(void);
    /* Output i may share input 0's storage (views such as Reshape). Bit mask. */
    uint32_t alias_outputs;
    /* Output 0 may share input 0's storage in the plan c (c->in / c->out: the plan's
     * tensors, with dims, 4-D layouts and the data of the values known when it is built),
     * beyond alias_outputs: a Transpose that moves no byte (between an NHWC tensor and its
     * channels-last order), a Slice or Pad that keeps the whole tensor (a crop or pad to a
     * multiple that is already one). The node then runs no kernel: the executors skip a
     * node with alias_when whose output is its input 0's storage. NULL: never. */
    bool (*alias_when)(const kiln_op_ctx *c);
    /* Bit i set: only input i's shape and dtype are read, never its data (Shape). The
     * planner folds such a node once its shape is known, whatever the input's data. */
    uint32_t shape_only_inputs;
    /* Bit i set: input i is never trained and gets no gradient, even when it is a float
     * initializer on the loss's path (Dropout's ratio, a loss's class weights). */
    uint32_t nondiff_inputs;
    /* Autograd: emit the nodes computing dL/d(inputs) from dL/d(outputs); see
     * kiln_grad_ctx. NULL: the op is not differentiable. */
    kiln_status (*grad)(kiln_grad_ctx *g);
    /* Data the shared code of an op family reads through the registry, e.g. unary.h's
     * kiln_unary_grad_def (the derivative kiln.UnaryGrad evaluates). NULL: none. */
    const void *family;
    /* In-place updates: the input whose storage output `out` of node n may take over, or -1.
     * The op reads each element of that input before it writes the same element of the
     * output (and same-sized), so one buffer may serve both: the optimizer updating weights
     * held as graph inputs. The CPU planner does so where the input is a graph input bound
     * by the caller that no later node reads: the run then updates the caller's buffer and
     * the output points at it. NULL: none. */
    int (*inplace_input)(const kiln_node *n, int out);
} kiln_op_def;

/* Is input k in an op's input mask (shape_only_inputs, nondiff_inputs)? Bit 31 stands for
 * input 31 and every later one, so variadic ops (ConcatGrad: ~1u) cover all their inputs. */
static inline bool kiln_input_in_mask(uint32_t mask, int k) { return (mask >> (k < 31 ? k : 31)) & 1u; }

/* ------------------------------------------------------------------ autograd */

/* What a gradient rule sees. The forward node is m->nodes[node] (re-read it after emitting:
 * adding nodes may move the array). dy[k] is the value holding dL/d(output k), or -1 where
 * output k does not reach the loss. The rule sets dx[k] (a value index) for every input k
 * with need[k]; it leaves the others alone. */
struct kiln_grad_ctx {
    kiln_model *m;
    int node;
    const int *dy;   /* (n_out) */
    int *dx;         /* (n_in) */
    const bool *need;/* (n_in) */
    int counter;     /* for unique value names */
    /* the forward values' shapes at two probes of the symbolic dims (src/passes/passes.h),
     * or NULL: kiln_grad_unbroadcast emits nothing where they prove the shapes equal */
    const struct kiln_shape_probes *probes;
};

#define KILN_GRAD_NODE(g) (&(g)->m->nodes[(g)->node])
#define KILN_GRAD_IN(g, k) (KILN_GRAD_NODE(g)->in[k])
#define KILN_GRAD_OUT(g, k) (KILN_GRAD_NODE(g)->out[k])

/* Emit a node into the training graph with n_out fresh output values (written to outs,
 * which may be NULL when n_out == 1). domain NULL: ONNX's; "kiln": internal ops.
 * copy_attrs starts from the forward node's attributes; attrs (text, as in optest.h: may be
 * NULL) adds or overrides. Returns output 0's value index, or -1 (message on the context). */
int kiln_grad_emit(kiln_grad_ctx *g, const char *domain, const char *op, int n_in, const int *in,
                   int n_out, int *outs, bool copy_attrs, const char *attrs);
/* The gradient of a value that was broadcast to grad's shape (the forward node's output 0's,
 * in every caller), summed back to like's shape: grad itself when the shape probes prove
 * output 0 and like the same shape whatever the batch, else a kiln.ReduceSumTo node.
 * Returns a value index or -1. */
int kiln_grad_unbroadcast(kiln_grad_ctx *g, int grad, int like);

/* The registry: ops.def is the one list. */
int kiln_op_count(void);
const kiln_op_def *kiln_op_get(int i);
const kiln_op_def *kiln_op_find(const char *name); /* NULL if unknown (default domain) */
int kiln_op_index(const char *name);                /* -1 if unknown (default domain) */
/* Lookup in a domain: "" or "ai.onnx" for ONNX's ops, "kiln" for internal ones. */
int kiln_op_index_domain(const char *domain, const char *name);
/* The node's op (n->op when set, else looked up by domain and name); NULL if unknown. */
const kiln_op_def *kiln_node_def(const kiln_node *n);
/* The node is in its op's training form (kiln_op_training: mode attribute non-zero or
 * mode input present). */
bool kiln_node_training_form(const kiln_node *n);
/* The program token of an elementwise op (eltwise->token or its name); NULL if none. */
const char *kiln_eltwise_token(const kiln_op_def *d);

/* Run one op's infer on shape-only tensors then its forward (used by tests, constant
 * folding). Outputs are new owning tensors. */
kiln_status kiln_op_eval(kiln_context *ctx, const kiln_node *node, int n_in,
                         kiln_tensor **in, int n_out, kiln_tensor **out);

/* kiln_session_run with an explicit seed for random ops (the trainer derives it from its
 * seed and step, so a resumed run draws the same dropout masks). */
kiln_status kiln_session_run_seeded(kiln_session *s, uint64_t seed, int n_inputs, kiln_tensor *const *inputs,
                                    int n_outputs, const kiln_tensor **outputs);

/* Benchmarks and profiles (kiln_session_bench, kiln_session_profile, kiln_profile,
 * kiln_trainer_profile) are declared in include/kiln_tools.h. */
/* Append a row timed outside the run list (a training step's prologue or epilogue):
 * op_type and name must outlive p (string literals); ms holds `count` times and is sorted
 * in place; the row's time is their median (start_ms 0, dur_ms the median), added to
 * total_ms. */
kiln_status kiln_profile_add_row(kiln_context *ctx, kiln_profile *p, const char *op_type, const char *name,
                                 const char *shapes, double *ms, int count, double flops, double bytes);
/* The median of v[0..n) (0 when n < 1); sorts v in place. */
double kiln_median(double *v, int n);

/* --------------------------------------------------------------- threading */

/* Number of threads CPU kernels should use: the setting of the session (or trainer)
 * running on this thread, else all cores. A run brackets its work with
 * old = kiln_cpu_threads_enter(n) (n 0: all cores) ... kiln_cpu_threads_leave(old), which
 * also sets and puts back the thread's OpenMP thread count; the setting is per calling
 * thread, never process-wide (src/cpu/threads.c). */
typedef struct kiln_cpu_threads_saved {
    int setting, icv;
} kiln_cpu_threads_saved;
int kiln_cpu_threads(void);
kiln_cpu_threads_saved kiln_cpu_threads_enter(int n);
void kiln_cpu_threads_leave(kiln_cpu_threads_saved old);

#endif /* KILN_INTERNAL_H */
