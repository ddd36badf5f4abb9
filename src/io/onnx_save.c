/*
 * onnx_save.c — the ONNX writer: a finalized kiln graph into ModelProto bytes (protobuf-c,
 * the schema the importer src/io/onnx.c reads).
 *
 * Contract:
 *   - Any finalized model: imported, built in C, exported from a trainer, or rewritten by
 *     the passes (a session's optimized copy, kiln_model_apply_passes). What kiln saves,
 *     kiln's importer and onnxruntime load; a model imported by kiln and saved again
 *     computes bit for bit what it computed before.
 *   - Kept: the default-domain opset (one opset_import), the IR version of the file the
 *     model came from (else the lowest that opset needs), graph inputs with dtype and
 *     dims (dim_param for named symbolic dims, an empty dim for unnamed unknown ones),
 *     graph outputs with the dtype and dims kiln inferred, initializers as raw_data
 *     (little-endian), nodes with their names and attributes, in topological order.
 *   - kiln's internal ops (domain "kiln") that passes create are written as the ONNX ops
 *     they stand for: kiln.FusedConv as Conv [+ Add] [+ activation], kiln.FusedGemm as
 *     Gemm [+ activation], kiln.FusedElementwise as its program's ops (literals as scalar
 *     initializers), kiln.LogSoftmaxNLL as [Cast to f32] LogSoftmax +
 *     NegativeLogLikelihoodLoss, kiln.ToNHWC as [Cast] [Pad] or Identity, kiln.ToNCHW as
 *     Identity (layouts are memory only: dims and initializer bytes are always NCHW),
 *     kiln.ChannelShuffle as Reshape - Transpose - Shape + Reshape, kiln.Roll as
 *     Slice - Slice - Concat per axis (torch.roll's export), kiln.RowGather as the chain it
 *     stands for (Pad, rolls, Reshape, Transpose, Reshape, rolls, Slice), kiln.ConcatAffine as
 *     Concat - Mul - Add [- Relu] (S and T reshaped to (C,1,...) [and cast to Y's dtype]),
 *     kiln.Attention as its view programs' ops around MatMul - [Mul] - Softmax - MatMul
 *     (save_attention). The
 *     pieces of a decomposed node are named after it ("conv1", "conv1/Add", ...), their
 *     intermediate values "<output>__kiln<k>". Other internal ops (gradients, optimizer
 *     steps: training graphs) are KILN_ERR_UNSUPPORTED naming the node.
 *   - Weights past protobuf's 2 GiB: kiln_model_save_onnx moves initializers of 1 KiB
 *     or more into external data, PATH.data beside the .onnx (the importer reads it);
 *     kiln_model_save_onnx_buffer has nowhere to put them and fails.
 *   - Files are written to PATH.tmp.PID and renamed over PATH (the external data file
 *     first), so a failed save leaves what was there before.
 */
#define _POSIX_C_SOURCE 200809L

#include "ops/channel_gather.h"
#include "io/onnx_save.h"
#include "ops/attention.h"
#include "ops/fused.h"
#include "passes/passes.h"
#include "onnx.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The ops the internal ones are written as, and the internal ones (by definition, not by
 * name: the registry names them once) */
extern const kiln_op_def kiln_op_add, kiln_op_cast, kiln_op_conv, kiln_op_gemm, kiln_op_identity, kiln_op_log_softmax,
    kiln_op_negative_log_likelihood_loss, kiln_op_pad;
extern const kiln_op_def kiln_op_fused_conv, kiln_op_fused_gemm, kiln_op_fused_elementwise, kiln_op_log_softmax_nll,
    kiln_op_to_nhwc, kiln_op_to_nchw;
extern const kiln_op_def kiln_op_reshape, kiln_op_transpose, kiln_op_shape, kiln_op_channel_shuffle, kiln_op_roll,
    kiln_op_channel_gather, kiln_op_row_gather;
extern const kiln_op_def kiln_op_concat, kiln_op_mul, kiln_op_relu, kiln_op_concat_affine;
extern const kiln_op_def kiln_op_attention, kiln_op_matmul, kiln_op_softmax, kiln_op_div, kiln_op_gather,
    kiln_op_squeeze, kiln_op_unsqueeze, kiln_op_slice;

#define MAX_INLINE_BYTES (((size_t)1 << 31) - 1)
#define MIN_EXTERNAL_BYTES 1024
#define EXTERNAL_ALIGN 4096
#define PROBE_MAX_WEIGHTS ((size_t)256 << 20)

/* ------------------------------------------------------------ the builder */

typedef struct saver {
    kiln_context *ctx;
    const kiln_model *m;
    kiln_status st;
    /* every allocation of the protobuf tree, freed together */
    void **allocs;
    size_t n_allocs, cap_allocs;
    /* graph parts, grown as nodes are decomposed */
    Onnx__NodeProto **nodes;
    size_t n_nodes, cap_nodes;
    Onnx__TensorProto **inits;
    size_t n_inits, cap_inits;
    const char *ext_location; /* the external data file's name, relative to the model */
    int fresh;              /* counter of generated names */
    /* every value's dtype and shape with the graph inputs' symbolic dims as 1 and as 3
     * (kiln_pass_infer_shapes on a clone; NULL where inference failed): dtypes the
     * finalized model left undefined, and output dims that follow a symbolic input dim */
    kiln_tensor *one, *three;
} saver;

static kiln_dtype vdtype(const saver *s, int v) {
    kiln_dtype dt = s->m->values[v].dtype;
    if (dt == KILN_DTYPE_UNDEFINED && s->one) dt = s->one[v].dtype;
    if (dt == KILN_DTYPE_UNDEFINED && s->three) dt = s->three[v].dtype;
    return dt;
}

/* The dtype of a fused elementwise / conv / gemm node's output: its value's, else its
 * first input's (they share one float dtype). */
static kiln_dtype out_dtype(const saver *s, const kiln_node *n) {
    kiln_dtype dt = vdtype(s, n->out[0]);
    for (int k = 0; dt == KILN_DTYPE_UNDEFINED && k < n->n_in; k++)
        if (n->in[k] >= 0) dt = vdtype(s, n->in[k]);
    return dt;
}

static bool failed(saver *s) { return s->st != KILN_OK; }

static void *track(saver *s, void *p) {
    if (!p) {
        if (!s->st) s->st = kiln_fail(s->ctx, KILN_ERR_OUT_OF_MEMORY, "saving ONNX: out of memory");
        return NULL;
    }
    if (s->n_allocs == s->cap_allocs) {
        size_t cap = s->cap_allocs ? 2 * s->cap_allocs : 256;
        void **a = realloc(s->allocs, cap * sizeof *a);
        if (!a) {
            free(p);
            if (!s->st) s->st = kiln_fail(s->ctx, KILN_ERR_OUT_OF_MEMORY, "saving ONNX: out of memory");
            return NULL;
        }
        s->allocs = a;
        s->cap_allocs = cap;
    }
    s->allocs[s->n_allocs++] = p;
    return p;
}

static void *zalloc(saver *s, size_t n) { return failed(s) ? NULL : track(s, calloc(1, n ? n : 1)); }

static char *sdup(saver *s, const char *str) {
    if (failed(s)) return NULL;
    size_t n = strlen(str) + 1;
    char *p = track(s, malloc(n));
    if (p) memcpy(p, str, n);
    return p;
}

/* Grow a typed array of pointers by one (arrays of each pointer type, no void ** aliasing). */
#define DEFINE_PUSH(fn, T)                                                                      \
    static bool fn(saver *s, T ***arr, size_t *n, size_t *cap, T *item) {                       \
        if (failed(s) || !item) return false;                                                   \
        if (*n == *cap) {                                                                       \
            size_t c = *cap ? 2 * *cap : 64;                                                    \
            T **a = realloc(*arr, c * sizeof *a);                                               \
            if (!a) {                                                                           \
                s->st = kiln_fail(s->ctx, KILN_ERR_OUT_OF_MEMORY, "saving ONNX: out of memory"); \
                return false;                                                                   \
            }                                                                                   \
            *arr = a;                                                                           \
            *cap = c;                                                                           \
        }                                                                                       \
        (*arr)[(*n)++] = item;                                                                  \
        return true;                                                                            \
    }
DEFINE_PUSH(push_node, Onnx__NodeProto)
DEFINE_PUSH(push_init, Onnx__TensorProto)

static const char *vname(const saver *s, int v) { return v >= 0 ? s->m->values[v].name : ""; }

/* A name no value of the model has, after base. */
static const char *fresh_name(saver *s, const char *base) {
    char buf[512];
    do snprintf(buf, sizeof buf, "%.400s__kiln%d", base, s->fresh++);
    while (kiln_model_find_value(s->m, buf) >= 0);
    return sdup(s, buf);
}

/* "<name>/<what>" for the pieces of a decomposed node ("" stays ""). */
static const char *piece_name(saver *s, const char *name, const char *what) {
    if (!*name) return "";
    char buf[600];
    snprintf(buf, sizeof buf, "%.400s/%s", name, what);
    return sdup(s, buf);
}

static Onnx__NodeProto *emit(saver *s, const char *op, const char *name, int n_in, const char *const *in,
                             int n_out, const char *const *out) {
    Onnx__NodeProto *np = zalloc(s, sizeof *np);
    char **ins = zalloc(s, (size_t)(n_in + 1) * sizeof *ins);
    char **outs = zalloc(s, (size_t)(n_out + 1) * sizeof *outs);
    if (!np || !ins || !outs) return NULL;
    onnx__node_proto__init(np);
    for (int i = 0; i < n_in; i++) ins[i] = (char *)in[i];
    for (int i = 0; i < n_out; i++) outs[i] = (char *)out[i];
    np->n_input = (size_t)n_in;
    np->input = ins;
    np->n_output = (size_t)n_out;
    np->output = outs;
    np->op_type = sdup(s, op);
    np->name = sdup(s, name);
    if (!push_node(s, &s->nodes, &s->n_nodes, &s->cap_nodes, np)) return NULL;
    return np;
}

static Onnx__AttributeProto *new_attr(saver *s, Onnx__NodeProto *np, const char *name,
                                      Onnx__AttributeProto__AttributeType type) {
    if (failed(s) || !np) return NULL;
    Onnx__AttributeProto *a = zalloc(s, sizeof *a);
    Onnx__AttributeProto **arr = zalloc(s, (np->n_attribute + 1) * sizeof *arr);
    if (!a || !arr) return NULL;
    onnx__attribute_proto__init(a);
    a->name = sdup(s, name);
    a->has_type = 1;
    a->type = type;
    if (np->n_attribute) memcpy(arr, np->attribute, np->n_attribute * sizeof *arr);
    arr[np->n_attribute++] = a;
    np->attribute = arr;
    return a;
}

static void attr_int(saver *s, Onnx__NodeProto *np, const char *name, int64_t v) {
    Onnx__AttributeProto *a = new_attr(s, np, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (a) a->has_i = 1, a->i = v;
}

static void attr_float(saver *s, Onnx__NodeProto *np, const char *name, float v) {
    Onnx__AttributeProto *a = new_attr(s, np, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (a) a->has_f = 1, a->f = v;
}

static void attr_string(saver *s, Onnx__NodeProto *np, const char *name, const char *v) {
    Onnx__AttributeProto *a = new_attr(s, np, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    if (!a) return;
    a->has_s = 1;
    a->s.len = strlen(v);
    a->s.data = (uint8_t *)v;
}

static bool host_is_big_endian(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 0;
}

/* A TensorProto of t (raw_data pointing at t's bytes, or at a little-endian copy on a
 * big-endian host). */
static Onnx__TensorProto *tensor_proto(saver *s, const kiln_tensor *t, const char *name) {
    Onnx__TensorProto *tp = zalloc(s, sizeof *tp);
    int64_t *dims = zalloc(s, (size_t)(t->ndim + 1) * sizeof *dims);
    if (!tp || !dims) return NULL;
    onnx__tensor_proto__init(tp);
    for (int i = 0; i < t->ndim; i++) dims[i] = t->dims[i];
    tp->n_dims = (size_t)t->ndim;
    tp->dims = dims;
    tp->has_data_type = 1;
    tp->data_type = (int32_t)t->dtype;
    if (name) tp->name = (char *)name;
    size_t esize = kiln_dtype_size(t->dtype);
    size_t nbytes = (size_t)kiln_tensor_numel(t) * esize;
    const uint8_t *data = t->data;
    if (nbytes && !data) {
        s->st = kiln_fail(s->ctx, KILN_ERR_INTERNAL, "saving ONNX: tensor '%s' has no data", name ? name : "");
        return NULL;
    }
    if (nbytes && esize > 1 && host_is_big_endian()) {
        uint8_t *le = zalloc(s, nbytes);
        if (!le) return NULL;
        for (size_t i = 0; i < nbytes; i += esize)
            for (size_t k = 0; k < esize; k++) le[i + k] = data[i + esize - 1 - k];
        data = le;
    }
    tp->has_raw_data = 1;
    tp->raw_data.len = nbytes;
    tp->raw_data.data = (uint8_t *)(nbytes ? data : (const uint8_t *)"");
    return tp;
}

static kiln_status unsupported_dtype(saver *s, kiln_dtype dt, const char *what) {
    if (!s->st)
        s->st = kiln_fail(s->ctx, KILN_ERR_UNSUPPORTED, "saving ONNX: %s: a %s constant cannot be written (float dtypes only)",
                          what, kiln_dtype_name(dt));
    return s->st;
}

/* A new scalar initializer of dtype dt holding v; its name, or NULL on failure. */
static const char *scalar_init(saver *s, kiln_dtype dt, double v, const char *hint, const char *what) {
    kiln_tensor t = {.dtype = dt, .ndim = 0};
    uint8_t *data = zalloc(s, 8);
    if (!data) return NULL;
    switch (dt) {
    case KILN_F32: { float f = (float)v; memcpy(data, &f, 4); break; }
    case KILN_F64: memcpy(data, &v, 8); break;
    case KILN_F16: { uint16_t h = kiln_f32_to_f16((float)v); memcpy(data, &h, 2); break; }
    case KILN_BF16: { uint16_t h = kiln_f32_to_bf16((float)v); memcpy(data, &h, 2); break; }
    case KILN_I64: { int64_t i = (int64_t)v; memcpy(data, &i, 8); break; }
    default: unsupported_dtype(s, dt, what); return NULL;
    }
    t.data = data;
    const char *name = fresh_name(s, hint);
    Onnx__TensorProto *tp = name ? tensor_proto(s, &t, name) : NULL;
    if (!tp || !push_init(s, &s->inits, &s->n_inits, &s->cap_inits, tp)) return NULL;
    return name;
}

/* A new 1-D int64 initializer. */
static const char *ints_init(saver *s, int n, const int64_t *v, const char *hint) {
    kiln_tensor t = {.dtype = KILN_I64, .ndim = 1, .dims = {n}};
    int64_t *data = zalloc(s, (size_t)n * sizeof *data);
    if (!data) return NULL;
    memcpy(data, v, (size_t)n * sizeof *data);
    t.data = data;
    const char *name = fresh_name(s, hint);
    Onnx__TensorProto *tp = name ? tensor_proto(s, &t, name) : NULL;
    if (!tp || !push_init(s, &s->inits, &s->n_inits, &s->cap_inits, tp)) return NULL;
    return name;
}

/* Copy one kiln attribute onto np. */
static void copy_attr(saver *s, Onnx__NodeProto *np, const kiln_attr *a, const char *where) {
    Onnx__AttributeProto *p;
    switch (a->type) {
    case KILN_ATTR_FLOAT: attr_float(s, np, a->name, a->f); return;
    case KILN_ATTR_INT: attr_int(s, np, a->name, a->i); return;
    case KILN_ATTR_STRING: attr_string(s, np, a->name, a->s ? a->s : ""); return;
    case KILN_ATTR_TENSOR:
        if (!a->t) break;
        if ((p = new_attr(s, np, a->name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)))
            p->t = tensor_proto(s, a->t, NULL);
        return;
    case KILN_ATTR_FLOATS:
        if ((p = new_attr(s, np, a->name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS))) {
            p->n_floats = (size_t)a->n;
            p->floats = a->floats;
        }
        return;
    case KILN_ATTR_INTS:
        if ((p = new_attr(s, np, a->name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS))) {
            p->n_ints = (size_t)a->n;
            p->ints = a->ints;
        }
        return;
    case KILN_ATTR_STRINGS:
        if ((p = new_attr(s, np, a->name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS))) {
            ProtobufCBinaryData *b = zalloc(s, ((size_t)a->n + 1) * sizeof *b);
            if (!b) return;
            for (int i = 0; i < a->n; i++) {
                b[i].data = (uint8_t *)(a->strings[i] ? a->strings[i] : "");
                b[i].len = strlen((const char *)b[i].data);
            }
            p->n_strings = (size_t)a->n;
            p->strings = b;
        }
        return;
    default: break;
    }
    if (!s->st)
        s->st = kiln_fail(s->ctx, KILN_ERR_UNSUPPORTED, "saving ONNX: %s: attribute '%s' has a type kiln cannot write",
                          where, a->name);
}

/* Attributes kiln's passes put on ONNX ops for its backends, not ONNX's: left out
 * (pad_channels.c's used_channels on Conv). */
static const char *const kiln_private_attrs[] = {"used_channels", NULL};

/* Copy n's attributes except those named in skip (NULL-terminated). */
static void copy_attrs(saver *s, Onnx__NodeProto *np, const kiln_node *n, const char *const *skip, const char *where) {
    for (int i = 0; i < n->n_attrs && !failed(s); i++) {
        bool skipped = false;
        for (int k = 0; skip && skip[k]; k++) skipped |= strcmp(n->attrs[i].name, skip[k]) == 0;
        if (!skipped) copy_attr(s, np, &n->attrs[i], where);
    }
}

/* ------------------------------------------------------ decompositions */

/* One elementwise op d (an op with kiln_eltwise properties) on x (and b for binary ops)
 * into y. Its parameters (p[k] where has[k]) become the attributes its eltwise properties
 * name, or, for an op taking its bounds from inputs (Clip), scalar inputs of dtype dt
 * (attributes min / max before opset 11); absent ones keep the op's defaults. */
static Onnx__NodeProto *emit_eltwise(saver *s, const kiln_op_def *d, const char *name, const char *x, const char *b,
                                     const char *y, kiln_dtype dt, const double *p, const bool *has, const char *where) {
    const kiln_eltwise *e = d->eltwise;
    const char *in[3] = {x, b ? b : "", ""};
    int n_in = e->arity;
    if (e->bounds_from_inputs && s->m->opset >= 11) {
        static const char *const hint[2] = {"min", "max"};
        for (int k = 0; k < 2; k++)
            if (has[k]) {
                in[1 + k] = scalar_init(s, dt, p[k], hint[k], where);
                n_in = 2 + k;
            }
        return failed(s) ? NULL : emit(s, d->name, name, n_in, in, 1, &y);
    }
    Onnx__NodeProto *np = emit(s, d->name, name, n_in, in, 1, &y);
    for (int k = 0; np && k < e->n_params; k++) {
        if (!has[k]) continue;
        const char *attr = e->bounds_from_inputs ? (k ? "max" : "min") : e->param_attr[k];
        if (attr) attr_float(s, np, attr, (float)p[k]);
    }
    return np;
}

/* The default-domain op an activation or program token names, when it is an elementwise
 * op of that token (NULL otherwise). */
static const kiln_op_def *eltwise_op(const char *token) {
    const kiln_op_def *d = kiln_op_find(token);
    if (!d || !d->eltwise) return NULL;
    const char *t = kiln_eltwise_token(d);
    return t && strcmp(t, token) == 0 ? d : NULL;
}

/* act(x) -> y, the activation of a fused conv / gemm as its ONNX op; its parameters are the
 * node's attributes named as the op's (FusedConv: alpha, beta) or with a prefix (FusedGemm:
 * act_alpha, act_beta), its bounds act_min / act_max. */
static void emit_activation(saver *s, const kiln_node *n, const kiln_op_def *d, const char *prefix, kiln_dtype dt,
                            const char *x, const char *y, const char *where) {
    const kiln_eltwise *e = d->eltwise;
    double p[2] = {0, 0};
    bool has[2] = {false, false};
    for (int k = 0; k < e->n_params && k < 2; k++) {
        char attr[64];
        if (e->bounds_from_inputs) snprintf(attr, sizeof attr, "act_%s", k ? "max" : "min");
        else snprintf(attr, sizeof attr, "%s%s", prefix, e->param_attr[k] ? e->param_attr[k] : "");
        const kiln_attr *a = kiln_node_attr(n, attr);
        if (!a) continue;
        has[k] = true;
        p[k] = a->type == KILN_ATTR_INT ? (double)a->i : (double)a->f;
    }
    emit_eltwise(s, d, piece_name(s, n->name, d->name), x, NULL, y, dt, p, has, where);
}

/* One piece of emit_smooth: op(a [, b]) into out (NULL: a fresh value named after y); the
 * output's name, NULL on failure. */
static const char *smooth_op(saver *s, const kiln_node *n, int *step, const char *op, const char *a, const char *b,
                             const char *out, const char *y) {
    char piece[32];
    snprintf(piece, sizeof piece, "%s_%d", op, (*step)++);
    const char *in[2] = {a, b};
    if (!out) out = fresh_name(s, y);
    if (failed(s) || !a || !out || !emit(s, op, piece_name(s, n->name, piece), b ? 2 : 1, in, 1, &out)) return NULL;
    return out;
}

/* The activations with no ONNX op of their name (fused.h) as the ops exporters write:
 * Silu as Sigmoid + Mul, Gelu as Div(x, sqrt 2) - Erf - Add 1 - Mul x - Mul 0.5, GeluTanh as
 * ONNX's Gelu(approximate = "tanh") from opset 20, else its formula
 * x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) op by op. x -> y; constants of dtype dt. */
static void emit_smooth(saver *s, const kiln_node *n, kiln_act_kind kind, kiln_dtype dt, const char *x, const char *y,
                        const char *where) {
    int k = 0;
    const char *v;
    if (kind == KILN_ACT_SILU) {
        v = smooth_op(s, n, &k, "Sigmoid", x, NULL, NULL, y);
        if (v) smooth_op(s, n, &k, "Mul", x, v, y, y);
    } else if (kind == KILN_ACT_GELU) {
        const char *c = scalar_init(s, dt, 1.41421356237309504880, "sqrt2", where);
        v = c ? smooth_op(s, n, &k, "Div", x, c, NULL, y) : NULL;
        if (v) v = smooth_op(s, n, &k, "Erf", v, NULL, NULL, y);
        if (v && (c = scalar_init(s, dt, 1.0, "one", where))) v = smooth_op(s, n, &k, "Add", v, c, NULL, y);
        if (v) v = smooth_op(s, n, &k, "Mul", x, v, NULL, y);
        if (v && (c = scalar_init(s, dt, 0.5, "half", where))) smooth_op(s, n, &k, "Mul", v, c, y, y);
    } else if (s->m->opset >= 20) {
        const char *in[1] = {x};
        /* op-pattern: Gelu(approximate = "tanh") */
        Onnx__NodeProto *np = emit(s, "Gelu", piece_name(s, n->name, "Gelu"), 1, in, 1, &y);
        if (np) attr_string(s, np, "approximate", "tanh");
    } else {
        static const struct {
            const char *op;
            int a, b;  /* operands: 0 x, 1 the running value, 2 the constant */
            double c;
        } steps[] = {/* op-pattern: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
                     {"Mul", 0, 0, 0},        {"Mul", 1, 0, 0}, {"Mul", 1, 2, 0.044715}, {"Add", 0, 1, 0},
                     {"Mul", 1, 2, 0.79788456080286535588}, {"Tanh", 1, -1, 0}, {"Add", 1, 2, 1.0},
                     {"Mul", 0, 1, 0},        {"Mul", 1, 2, 0.5}};
        const int ns = (int)(sizeof steps / sizeof steps[0]);
        v = x;
        for (int i = 0; i < ns && v; i++) {
            const char *c = steps[i].b == 2 ? scalar_init(s, dt, steps[i].c, "gelu_c", where) : NULL;
            const char *opd[3] = {x, v, c};
            if (steps[i].b == 2 && !c) return;
            v = smooth_op(s, n, &k, steps[i].op, opd[steps[i].a], steps[i].b >= 0 ? opd[steps[i].b] : NULL,
                          i == ns - 1 ? y : NULL, y);
        }
    }
}

/* kiln.FusedConv(X, W, B?, Z?) -> act(Conv(X, W, B) + Z); kiln.FusedGemm(A, B, C?, Z?) ->
 * act(Gemm(A, B, C) + Z): the op the fused one extends (`base`), then the residual's Add,
 * then the activation. */
static void save_fused_conv_gemm(saver *s, const kiln_node *n, const char *base, bool conv, const char *where) {
    const char *act = kiln_attr_string(n, "activation", "");
    kiln_act_kind kind;
    const kiln_op_def *act_def = *act ? eltwise_op(act) : NULL;
    const bool smooth = kiln_fused_act_kind(act, &kind) &&
                        (kind == KILN_ACT_SILU || kind == KILN_ACT_GELU || kind == KILN_ACT_GELU_TANH);
    if (*act && (!kiln_fused_act_kind(act, &kind) || (!act_def && !smooth))) {
        s->st = kiln_fail(s->ctx, KILN_ERR_UNSUPPORTED, "saving ONNX: %s: unknown activation '%s'", where, act);
        return;
    }
    const int y = n->out[0];
    const kiln_dtype dt = out_dtype(s, n);
    const int z = n->n_in > 3 ? n->in[3] : -1;
    const char *in[3];
    int n_in = n->n_in > 3 ? 3 : n->n_in;
    for (int k = 0; k < n_in; k++) in[k] = vname(s, n->in[k]);
    while (n_in > 2 && n->in[n_in - 1] < 0) n_in--;
    const char *final = vname(s, y);
    const char *prod = z >= 0 || *act ? fresh_name(s, final) : final;
    static const char *const conv_skip[] = {"activation", "alpha", "beta", "act_min", "act_max", "used_channels", NULL};
    static const char *const gemm_skip[] = {"activation", "act_alpha", "act_beta", "act_min", "act_max", NULL};
    Onnx__NodeProto *np = emit(s, base, n->name, n_in, in, 1, &prod);
    if (!np) return;
    copy_attrs(s, np, n, conv ? conv_skip : gemm_skip, where);
    if (z >= 0) {
        const char *sum = *act ? fresh_name(s, final) : final;
        const bool none[2] = {false, false};
        emit_eltwise(s, &kiln_op_add, piece_name(s, n->name, kiln_op_add.name), prod, vname(s, z), sum, dt, NULL, none,
                     where);
        prod = sum;
    }
    if (act_def && !failed(s)) emit_activation(s, n, act_def, conv ? "" : "act_", dt, prod, final, where);
    if (smooth && !failed(s)) emit_smooth(s, n, kind, dt, prod, final, where);
}

#define FE_STACK 32

static void save_fused_elementwise(saver *s, const kiln_node *n, const char *where) {
    const char *prog = kiln_attr_string(n, "program", NULL);
    const int y = n->out[0];
    const kiln_dtype dt = out_dtype(s, n);
    if (!prog) {
        s->st = kiln_fail(s->ctx, KILN_ERR_GRAPH, "saving ONNX: %s has no program", where);
        return;
    }
    const char *stack[FE_STACK];
    int sp = 0, step = 0;
    /* the program's tokens, counted first so the last op writes y */
    int n_ops = 0;
    for (const char *p = prog; *p;) {
        while (*p == ' ') p++;
        if (!*p) break;
        if (*p != 'i' && *p != 'c') n_ops++;
        while (*p && *p != ' ') p++;
    }
    for (const char *p = prog; *p && !failed(s);) {
        while (*p == ' ') p++;
        if (!*p) break;
        const char *end = p;
        while (*end && *end != ' ') end++;
        char tok[128];
        snprintf(tok, sizeof tok, "%.*s", (int)(end - p) < 127 ? (int)(end - p) : 127, p);
        p = end;
        if (tok[0] == 'i' || tok[0] == 'c') {
            if (sp >= FE_STACK) break;
            if (tok[0] == 'i') {
                int k = atoi(tok + 1);
                if (k < 0 || k >= n->n_in || n->in[k] < 0) break;
                stack[sp++] = vname(s, n->in[k]);
            } else {
                stack[sp++] = scalar_init(s, dt, strtod(tok + 1, NULL), vname(s, y), where);
            }
            continue;
        }
        char *at = strchr(tok, '@');
        double params[2] = {0, 0};
        int n_params = 0;
        if (at) {
            *at = 0;
            for (char *q = at + 1; q && n_params < 2; n_params++) {
                params[n_params] = strtod(q, NULL);
                q = strchr(q, '@');
                if (q) q++;
            }
        }
        const kiln_op_def *d = eltwise_op(tok);
        if (!d || n_params != d->eltwise->n_params || sp < d->eltwise->arity) {
            s->st = kiln_fail(s->ctx, KILN_ERR_GRAPH, "saving ONNX: %s: bad program token '%s' in '%.200s'", where, tok, prog);
            return;
        }
        step++;
        const char *out = step == n_ops ? vname(s, y) : fresh_name(s, vname(s, y));
        char what[160];
        snprintf(what, sizeof what, "%s_%d", d->name, step);
        const int pops = d->eltwise->arity;
        const bool has[2] = {n_params > 0, n_params > 1};
        Onnx__NodeProto *np = emit_eltwise(s, d, piece_name(s, n->name, what), stack[sp - pops],
                                           pops > 1 ? stack[sp - 1] : NULL, out, dt, params, has, where);
        sp -= pops;
        if (!np) return;
        stack[sp++] = out;
    }
    if (failed(s)) return;
    if (sp != 1 || step != n_ops || n_ops == 0)
        s->st = kiln_fail(s->ctx, KILN_ERR_GRAPH, "saving ONNX: %s: program '%.200s' does not leave one value computed by an op",
                          where, prog);
}

/* kiln.LogSoftmaxNLL(X, target, weight?) -> loss, log_prob? */
static void save_log_softmax_nll(saver *s, const kiln_node *n, const char *where) {
    const char *x = vname(s, n->in[0]);
    const kiln_dtype xt = vdtype(s, n->in[0]);
    if (xt == KILN_F16 || xt == KILN_BF16) {
        const char *x32 = fresh_name(s, x);
        Onnx__NodeProto *np = emit(s, kiln_op_cast.name, piece_name(s, n->name, kiln_op_cast.name), 1, &x, 1, &x32);
        attr_int(s, np, "to", KILN_F32);
        x = x32;
    }
    const char *lp = n->n_out > 1 && n->out[1] >= 0 ? vname(s, n->out[1]) : fresh_name(s, vname(s, n->out[0]));
    Onnx__NodeProto *np = emit(s, kiln_op_log_softmax.name, piece_name(s, n->name, kiln_op_log_softmax.name), 1, &x, 1, &lp);
    attr_int(s, np, "axis", 1);
    const char *in[3] = {lp, vname(s, n->in[1]), n->n_in > 2 ? vname(s, n->in[2]) : ""};
    int n_in = n->n_in > 2 && n->in[2] >= 0 ? 3 : 2;
    const char *loss = vname(s, n->out[0]);
    np = emit(s, kiln_op_negative_log_likelihood_loss.name, n->name, n_in, in, 1, &loss);
    copy_attrs(s, np, n, NULL, where);
}

/* kiln.ToNHWC(X; to, zero_channels) = Pad(Cast(X, to)); kiln.ToNCHW = Identity. */
static void save_layout_convert(saver *s, const kiln_node *n, bool to_nhwc, const char *where) {
    const kiln_model *m = s->m;
    const char *x = vname(s, n->in[0]), *y = vname(s, n->out[0]);
    const kiln_dtype xt = vdtype(s, n->in[0]);
    const int64_t to = to_nhwc ? kiln_attr_int(n, "to", xt) : xt;
    const int64_t zc = to_nhwc ? kiln_attr_int(n, "zero_channels", 0) : 0;
    if (to == xt && zc == 0) {
        emit(s, kiln_op_identity.name, n->name, 1, &x, 1, &y);
        return;
    }
    if (to != xt) {
        const char *c = zc ? fresh_name(s, y) : y;
        Onnx__NodeProto *np = emit(s, kiln_op_cast.name, zc ? piece_name(s, n->name, kiln_op_cast.name) : n->name, 1, &x, 1, &c);
        attr_int(s, np, "to", to);
        x = c;
    }
    if (zc) {
        const int64_t pads[8] = {0, 0, 0, 0, 0, zc, 0, 0};
        if (m->opset < 11) {
            Onnx__NodeProto *np = emit(s, kiln_op_pad.name, n->name, 1, &x, 1, &y);
            Onnx__AttributeProto *a = new_attr(s, np, "pads", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
            int64_t *v = zalloc(s, sizeof pads);
            if (!a || !v) return;
            memcpy(v, pads, sizeof pads);
            a->n_ints = 8;
            a->ints = v;
            return;
        }
        const char *in[2] = {x, ints_init(s, 8, pads, "pads")};
        if (!failed(s)) emit(s, kiln_op_pad.name, n->name, 2, in, 1, &y);
    }
    (void)where;
}

/* kiln.ChannelShuffle(X; groups g) = Reshape(Transpose(Reshape(X, (0, g, C/g, -1)),
 * (0, 2, 1, 3)), Shape(X)): valid for any batch, height and width. */
static void save_channel_shuffle(saver *s, const kiln_node *n, const char *where) {
    const int x = n->in[0];
    const int64_t g = kiln_attr_int(n, "groups", 1);
    const int64_t c = s->one && s->one[x].ndim == 4 ? s->one[x].dims[1] : -1;
    if (c <= 0 || g < 1 || c % g || s->m->opset < 5) {
        s->st = kiln_fail(s->ctx, KILN_ERR_UNSUPPORTED,
                          "saving ONNX: %s: the channel count is not known (or opset %d is below 5, which Reshape's "
                          "shape input needs)", where, s->m->opset);
        return;
    }
    const int64_t shape4[4] = {0, g, c / g, -1};
    const char *xn = vname(s, x), *y = vname(s, n->out[0]);
    const char *r1 = fresh_name(s, y), *t = fresh_name(s, y), *sh = fresh_name(s, y);
    const char *in1[2] = {xn, ints_init(s, 4, shape4, "shuffle_shape")};
    if (failed(s)) return;
    emit(s, kiln_op_reshape.name, piece_name(s, n->name, "Reshape"), 2, in1, 1, &r1);
    Onnx__NodeProto *tp = emit(s, kiln_op_transpose.name, piece_name(s, n->name, kiln_op_transpose.name), 1, &r1, 1, &t);
    Onnx__AttributeProto *a = new_attr(s, tp, "perm", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *v = zalloc(s, 4 * sizeof *v);
    if (!a || !v) return;
    v[0] = 0, v[1] = 2, v[2] = 1, v[3] = 3;
    a->n_ints = 4;
    a->ints = v;
    emit(s, kiln_op_shape.name, piece_name(s, n->name, kiln_op_shape.name), 1, &xn, 1, &sh);
    const char *in2[2] = {t, sh};
    emit(s, kiln_op_reshape.name, n->name, 2, in2, 1, &y);
}

static void attr_ints(saver *s, Onnx__NodeProto *np, const char *name, int n, const int64_t *v);
/* kiln.ChannelGather(X...; sizes, map): the inputs concatenated along the channels (a
 * zero channel padded at the end where the map has one), then one Gather (axis 1) of
 * constant channel indices per output. */
static void save_channel_gather(saver *s, const kiln_node *n, const char *where) {
    int ns = 0, nm = 0;
    const int64_t *sizes = kiln_attr_ints(n, "sizes", &ns), *map = kiln_attr_ints(n, "map", &nm);
    int64_t off[KILN_CHANNEL_GATHER_MAX_IO + 1] = {0};
    bool ok = sizes && map && ns == n->n_out && n->n_in <= KILN_CHANNEL_GATHER_MAX_IO && s->m->opset >= 11;
    for (int i = 0; i < n->n_in && ok; i++) {
        const int x = n->in[i];
        ok = x >= 0 && s->one && s->one[x].ndim == 4 && s->one[x].dims[1] >= 0;
        if (ok) off[i + 1] = off[i] + s->one[x].dims[1];
    }
    if (!ok) {
        s->st = kiln_fail(s->ctx, KILN_ERR_UNSUPPORTED,
                          "saving ONNX: %s: the inputs' channel counts are not known (or opset %d is below 11, "
                          "which Pad's pads input needs)", where, s->m->opset);
        return;
    }
    const char *y0 = vname(s, n->out[0]);
    const char *all = vname(s, n->in[0]);
    if (n->n_in > 1) {
        const char *in[KILN_CHANNEL_GATHER_MAX_IO];
        for (int i = 0; i < n->n_in; i++) in[i] = vname(s, n->in[i]);
        all = fresh_name(s, y0);
        Onnx__NodeProto *np = emit(s, kiln_op_concat.name, piece_name(s, n->name, kiln_op_concat.name), n->n_in, in, 1, &all);
        if (!np) return;
        attr_int(s, np, "axis", 1);
    }
    bool zero = false;
    for (int e = 0; e < nm; e++) zero |= map[e] < 0;
    if (zero) { /* channel off[n_in]: zeros */
        const int64_t pads[8] = {0, 0, 0, 0, 0, 1, 0, 0};
        const char *in[2] = {all, ints_init(s, 8, pads, "gather_zero_pad")}, *padded = fresh_name(s, y0);
        if (failed(s)) return;
        emit(s, kiln_op_pad.name, piece_name(s, n->name, kiln_op_pad.name), 2, in, 1, &padded);
        all = padded;
    }
    int64_t idx[KILN_CHANNEL_GATHER_MAX_MAP];
    for (int j = 0, e = 0; j < n->n_out && !failed(s); j++) {
        if (sizes[j] < 0 || e + sizes[j] > nm) {
            s->st = kiln_fail(s->ctx, KILN_ERR_GRAPH, "saving ONNX: %s: bad sizes / map", where);
            return;
        }
        for (int64_t c = 0; c < sizes[j]; c++, e++) {
            const int64_t v = map[e];
            idx[c] = v < 0 ? off[n->n_in] : off[v / KILN_CHANNEL_GATHER_SHIFT] + v % KILN_CHANNEL_GATHER_SHIFT;
        }
        const char *in[2] = {all, ints_init(s, (int)sizes[j], idx, "gather_channels")}, *y = vname(s, n->out[j]);
        if (failed(s)) return;
        char what[32];
        snprintf(what, sizeof what, "Gather%d", j);
        Onnx__NodeProto *np = emit(s, kiln_op_gather.name, n->n_out == 1 ? n->name : piece_name(s, n->name, what), 2, in,
                                   1, &y);
        if (!np) return;
        attr_int(s, np, "axis", 1);
    }
}


/* torch.roll of x by shifts[k] along axes[k] (na of them) as its export: per axis a with
 * shift t, Concat(Slice(x, -t, INT64_MAX, a), Slice(x, 0, -t, a); axis a). The last Concat
 * writes yname and is named last_name; the pieces are named after node n. The name of the
 * result (yname), or NULL on failure. */
static const char *emit_rolls(saver *s, const kiln_node *n, const char *x, int na, const int64_t *axes,
                              const int64_t *shifts, const char *yname, const char *last_name, const char *tag) {
    for (int k = 0; k < na && !failed(s); k++) {
        const int64_t b = -shifts[k], big = INT64_MAX, zero = 0, one = 1;
        const char *part[2] = {fresh_name(s, yname), fresh_name(s, yname)};
        const int64_t starts[2] = {b, zero}, ends[2] = {big, b};
        for (int p = 0; p < 2 && !failed(s); p++) {
            char what[48];
            snprintf(what, sizeof what, "%sSlice%d_%d", tag, k, p);
            if (s->m->opset < 10) {
                Onnx__NodeProto *np = emit(s, kiln_op_slice.name, piece_name(s, n->name, what), 1, &x, 1, &part[p]);
                if (!np) return NULL;
                attr_ints(s, np, "starts", 1, &starts[p]);
                attr_ints(s, np, "ends", 1, &ends[p]);
                attr_ints(s, np, "axes", 1, &axes[k]);
            } else {
                const char *in[5] = {x, ints_init(s, 1, &starts[p], "roll_start"), ints_init(s, 1, &ends[p], "roll_end"),
                                     ints_init(s, 1, &axes[k], "roll_axis"), ints_init(s, 1, &one, "roll_step")};
                if (failed(s)) return NULL;
                emit(s, kiln_op_slice.name, piece_name(s, n->name, what), 5, in, 1, &part[p]);
            }
        }
        if (failed(s)) return NULL;
        const char *out = k == na - 1 ? yname : fresh_name(s, yname);
        char what[48];
        snprintf(what, sizeof what, "%sConcat%d", tag, k);
        Onnx__NodeProto *np = emit(s, kiln_op_concat.name, k == na - 1 ? last_name : piece_name(s, n->name, what), 2,
                                   part, 1, &out);
        if (!np) return NULL;
        attr_int(s, np, "axis", axes[k]);
        x = out;
    }
    return failed(s) ? NULL : x;
}

/* kiln.Roll(X; axes, shifts): torch.roll's export (|t| below the axis's size, which the op
 * requires). */
static void save_roll(saver *s, const kiln_node *n, const char *where) {
    int na = 0, ns = 0;
    const int64_t *axes = kiln_attr_ints(n, "axes", &na), *shifts = kiln_attr_ints(n, "shifts", &ns);
    if (!axes || !shifts || na != ns || na < 1) {
        s->st = kiln_fail(s->ctx, KILN_ERR_GRAPH, "saving ONNX: %s: bad axes / shifts", where);
        return;
    }
    emit_rolls(s, n, vname(s, n->in[0]), na, axes, shifts, vname(s, n->out[0]), n->name, "");
}

/* kiln.RowGather(X): the chain it stands for (src/ops/row_gather.h), each stage that is
 * there: [Transpose to (N, H, W, C): in_nhwc] -> Pad (zeros at the ends) -> rolls ->
 * Reshape (view) -> Transpose (perm) -> Reshape (out_view) -> rolls -> Slice (the crop from
 * 0) -> [Transpose back to (N, C, H, W): out_nhwc]. The last stage writes Y under the node's
 * name. */
static void save_row_gather(saver *s, const kiln_node *n, const char *where) {
    int npad = 0, nsh = 0, nview = 0, nperm = 0, noview = 0, nosh = 0, nsize = 0;
    const int64_t *pads = kiln_attr_ints(n, "pads", &npad), *shifts = kiln_attr_ints(n, "shifts", &nsh),
                  *view = kiln_attr_ints(n, "view", &nview), *perm = kiln_attr_ints(n, "perm", &nperm),
                  *oview = kiln_attr_ints(n, "out_view", &noview), *oshifts = kiln_attr_ints(n, "out_shifts", &nosh),
                  *sizes = kiln_attr_ints(n, "out_sizes", &nsize);
    bool pad = false, crop = false;
    for (int d = 0; d < npad; d++) pad |= pads[d] != 0;
    for (int d = 0; d < nsize; d++) crop |= sizes[d] >= 0;
    int64_t ax[KILN_MAX_DIMS], sh[KILN_MAX_DIMS], oax[KILN_MAX_DIMS], osh[KILN_MAX_DIMS];
    int na = 0, noa = 0;
    for (int d = 0; d < nsh && d < KILN_MAX_DIMS; d++)
        if (shifts[d]) {
            ax[na] = d;
            sh[na++] = shifts[d];
        }
    for (int d = 0; d < nosh && d < KILN_MAX_DIMS; d++)
        if (oshifts[d]) {
            oax[noa] = d;
            osh[noa++] = oshifts[d];
        }
    if (!perm || nperm < 1 || nperm > KILN_MAX_DIMS || npad > KILN_MAX_DIMS || nsize > KILN_MAX_DIMS ||
        (pad && s->m->opset < 11) || ((view || oview) && s->m->opset < 5)) {
        s->st = kiln_fail(s->ctx, KILN_ERR_UNSUPPORTED,
                          "saving ONNX: %s: bad attributes (or opset %d is below 11, which Pad's pads input needs)",
                          where, s->m->opset);
        return;
    }
    /* the stages present, in order (X read as NHWC, the pad, ... the crop, Y back from
     * NHWC); the last writes Y */
    const bool in_nhwc = kiln_attr_int(n, "in_nhwc", 0) != 0, out_nhwc = kiln_attr_int(n, "out_nhwc", 0) != 0;
    const bool has[9] = {in_nhwc, pad, na > 0, view != NULL, true, oview != NULL, noa > 0, crop, out_nhwc};
    int last = 0;
    for (int k = 0; k < 9; k++)
        if (has[k]) last = k;
    const char *yname = vname(s, n->out[0]), *x = vname(s, n->in[0]);
#define STAGE_OUT(k) ((k) == last ? yname : fresh_name(s, yname))
#define STAGE_NAME(k, what) ((k) == last ? n->name : piece_name(s, n->name, what))
    static const int64_t to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
    if (in_nhwc) {
        const char *y = STAGE_OUT(0);
        Onnx__NodeProto *np = emit(s, kiln_op_transpose.name, STAGE_NAME(0, "ToNHWCOrder"), 1, &x, 1, &y);
        if (!np) return;
        attr_ints(s, np, "perm", 4, to_nhwc);
        x = y;
    }
    if (pad) {
        int64_t p2[2 * KILN_MAX_DIMS];
        for (int d = 0; d < npad; d++) {
            p2[d] = 0;
            p2[npad + d] = pads[d];
        }
        const char *in[2] = {x, ints_init(s, 2 * npad, p2, "row_gather_pads")}, *y = STAGE_OUT(1);
        if (failed(s) || !emit(s, kiln_op_pad.name, STAGE_NAME(1, "Pad"), 2, in, 1, &y)) return;
        x = y;
    }
    if (na > 0 && !(x = emit_rolls(s, n, x, na, ax, sh, STAGE_OUT(2), STAGE_NAME(2, "Roll"), "In"))) return;
    for (int k = 3; k <= 5; k++) {
        if (!has[k]) continue;
        const char *y = STAGE_OUT(k);
        Onnx__NodeProto *np;
        if (k == 4) {
            np = emit(s, kiln_op_transpose.name, STAGE_NAME(4, "Transpose"), 1, &x, 1, &y);
            if (np) attr_ints(s, np, "perm", nperm, perm);
        } else {
            const char *in[2] = {x, ints_init(s, k == 3 ? nview : noview, k == 3 ? view : oview, "row_gather_view")};
            np = failed(s) ? NULL : emit(s, kiln_op_reshape.name, STAGE_NAME(k, k == 3 ? "Reshape" : "ReshapeOut"), 2, in, 1, &y);
        }
        if (!np || failed(s)) return;
        x = y;
    }
    if (noa > 0 && !(x = emit_rolls(s, n, x, noa, oax, osh, STAGE_OUT(6), STAGE_NAME(6, "RollOut"), "Out"))) return;
    if (crop) {
        int64_t st[KILN_MAX_DIMS], en[KILN_MAX_DIMS], axs[KILN_MAX_DIMS], one[KILN_MAX_DIMS];
        int k = 0;
        for (int d = 0; d < nsize; d++)
            if (sizes[d] >= 0) {
                st[k] = 0;
                en[k] = sizes[d];
                axs[k] = d;
                one[k++] = 1;
            }
        const char *y = STAGE_OUT(7);
        if (s->m->opset < 10) {
            Onnx__NodeProto *np = emit(s, kiln_op_slice.name, STAGE_NAME(7, "Crop"), 1, &x, 1, &y);
            if (!np) return;
            attr_ints(s, np, "starts", k, st);
            attr_ints(s, np, "ends", k, en);
            attr_ints(s, np, "axes", k, axs);
        } else {
            const char *in[5] = {x, ints_init(s, k, st, "crop_start"), ints_init(s, k, en, "crop_end"),
                                 ints_init(s, k, axs, "crop_axis"), ints_init(s, k, one, "crop_step")};
            if (failed(s)) return;
            if (!emit(s, kiln_op_slice.name, STAGE_NAME(7, "Crop"), 5, in, 1, &y)) return;
        }
        x = y;
    }
    if (out_nhwc) {
        const char *y = STAGE_OUT(8);
        Onnx__NodeProto *np = emit(s, kiln_op_transpose.name, STAGE_NAME(8, "ToNCHWOrder"), 1, &x, 1, &y);
        if (np) attr_ints(s, np, "perm", 4, to_nchw);
    }
#undef STAGE_OUT
#undef STAGE_NAME
}

/* kiln.ConcatAffine(S, T, X...) relu = Relu?(Concat(X...; axis 1) * S' + T'), S' and T' = S
 * and T reshaped to (C, 1, ...) (Y's rank - 1) [and cast to Y's dtype]. */
static void save_concat_affine(saver *s, const kiln_node *n, const char *where) {
    const int y = n->out[0], x0 = n->n_in > 2 ? n->in[2] : -1;
    const int rank = x0 < 0 ? -1 : s->one && s->one[x0].ndim >= 0 ? s->one[x0].ndim : s->m->values[x0].ndim;
    if (rank < 2 || rank > KILN_MAX_DIMS || s->m->opset < 5) {
        s->st = kiln_fail(s->ctx, KILN_ERR_UNSUPPORTED,
                          "saving ONNX: %s: the rank of X is not known (or opset %d is below 5, which Reshape's "
                          "shape input needs)", where, s->m->opset);
        return;
    }
    const kiln_dtype dt = out_dtype(s, n);
    const char *yn = vname(s, y);
    int64_t shape[KILN_MAX_DIMS];
    shape[0] = -1;
    for (int d = 1; d < rank - 1; d++) shape[d] = 1;
    const char *shape_name = ints_init(s, rank - 1, shape, "channel_shape");
    const char *par[2];
    for (int k = 0; k < 2 && !failed(s); k++) {
        const char *in[2] = {vname(s, n->in[k]), shape_name};
        const char *r = fresh_name(s, yn);
        emit(s, kiln_op_reshape.name, piece_name(s, n->name, k ? "ReshapeT" : "ReshapeS"), 2, in, 1, &r);
        par[k] = r;
        if (vdtype(s, n->in[k]) != dt && !failed(s)) {
            const char *cst = fresh_name(s, yn);
            Onnx__NodeProto *np = emit(s, kiln_op_cast.name, piece_name(s, n->name, k ? "CastT" : "CastS"), 1, &r, 1, &cst);
            if (np) attr_int(s, np, "to", (int64_t)dt);
            par[k] = cst;
        }
    }
    if (failed(s)) return;
    const int n_x = n->n_in - 2;
    const char **xs = zalloc(s, (size_t)n_x * sizeof *xs);
    if (!xs) return;
    for (int k = 0; k < n_x; k++) xs[k] = vname(s, n->in[2 + k]);
    const bool relu = kiln_attr_int(n, "relu", 0) != 0;
    const char *cat = fresh_name(s, yn), *mul = fresh_name(s, yn), *add = relu ? fresh_name(s, yn) : yn;
    Onnx__NodeProto *np = emit(s, kiln_op_concat.name, piece_name(s, n->name, kiln_op_concat.name), n_x, xs, 1, &cat);
    if (np) attr_int(s, np, "axis", 1);
    const char *in_m[2] = {cat, par[0]}, *in_a[2] = {mul, par[1]};
    emit(s, kiln_op_mul.name, piece_name(s, n->name, kiln_op_mul.name), 2, in_m, 1, &mul);
    emit(s, kiln_op_add.name, relu ? piece_name(s, n->name, kiln_op_add.name) : n->name, 2, in_a, 1, &add);
    if (relu) emit(s, kiln_op_relu.name, n->name, 1, &add, 1, &yn);
}

/* An INTS attribute holding v[0..n). */
static void attr_ints(saver *s, Onnx__NodeProto *np, const char *name, int n, const int64_t *v) {
    Onnx__AttributeProto *a = new_attr(s, np, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *c = zalloc(s, ((size_t)n + 1) * sizeof *c);
    if (!a || !c) return;
    memcpy(c, v, (size_t)n * sizeof *c);
    a->n_ints = (size_t)n;
    a->ints = c;
}

/* kiln.Attention's pieces: a value of the node as an operand of dtype dt (Cast when it has
 * another: a scale factor or a bias kept in f32 by the precision pass). */
static const char *attn_as(saver *s, const kiln_node *n, int input, kiln_dtype dt, const char *what) {
    const char *v = vname(s, n->in[input]);
    if (vdtype(s, n->in[input]) == dt || failed(s)) return v;
    const char *c = fresh_name(s, v);
    Onnx__NodeProto *np = emit(s, kiln_op_cast.name, piece_name(s, n->name, what), 1, &v, 1, &c);
    attr_int(s, np, "to", (int64_t)dt);
    return c;
}

/* One step of a view program (attention.h) on x, as the ONNX op it stands for (the op that
 * gives the step's result is the last one emitted); the result's name, *at moved past the
 * step. */
static const char *attn_step(saver *s, const kiln_node *n, const char *prog, const int64_t *ops, int nops, int *at,
                             const char *x, kiln_dtype dt) {
    if (failed(s)) return NULL;
    const int i = *at;
    const int64_t op = ops[i];
    char what[64];
    snprintf(what, sizeof what, "%s%d", prog, i);
    const char *y = fresh_name(s, vname(s, n->out[0]));
    const int opset = s->m->opset;
    Onnx__NodeProto *np = NULL;
#define ATTN_NEED(k)                                                                                               \
    if (i + (k) >= nops) {                                                                                        \
        s->st = kiln_fail(s->ctx, KILN_ERR_INVALID_ARGUMENT, "saving ONNX: node '%s': %s is cut short at %d", n->name, \
                          prog, i);                                                                               \
        return NULL;                                                                                              \
    }
#define ATTN_INPUT(p)                                                                                              \
    if ((p) < KILN_ATTN_FIRST_PARAM || (p) >= n->n_in || n->in[p] < 0) {                                          \
        s->st = kiln_fail(s->ctx, KILN_ERR_INVALID_ARGUMENT, "saving ONNX: node '%s': %s names input %" PRId64      \
                          " at %d, which is not a value input of the node", n->name, prog, (int64_t)(p), i);      \
        return NULL;                                                                                              \
    }
    if (op == KILN_ATTN_RESHAPE) {
        ATTN_NEED(2);
        ATTN_INPUT(ops[i + 1]);
        const char *in[2] = {x, vname(s, n->in[ops[i + 1]])};
        np = emit(s, kiln_op_reshape.name, piece_name(s, n->name, what), 2, in, 1, &y);
        if (ops[i + 2]) attr_int(s, np, "allowzero", 1);
        *at = i + 3;
    } else if (op == KILN_ATTN_TRANSPOSE) {
        ATTN_NEED(1);
        ATTN_NEED(1 + (ops[i + 1] < 0 ? nops : ops[i + 1]));
        np = emit(s, kiln_op_transpose.name, piece_name(s, n->name, what), 1, &x, 1, &y);
        attr_ints(s, np, "perm", (int)ops[i + 1], ops + i + 2);
        *at = i + 2 + (int)ops[i + 1];
    } else if (op == KILN_ATTN_GATHER) {
        ATTN_NEED(2);
        const char *in[2] = {x, scalar_init(s, KILN_I64, (double)ops[i + 2], "index", prog)};
        np = emit(s, kiln_op_gather.name, piece_name(s, n->name, what), 2, in, 1, &y);
        attr_int(s, np, "axis", ops[i + 1]);
        *at = i + 3;
    } else if (op == KILN_ATTN_SQUEEZE || op == KILN_ATTN_UNSQUEEZE) {
        ATTN_NEED(1);
        ATTN_NEED(1 + (ops[i + 1] < 0 ? nops : ops[i + 1]));
        const kiln_op_def *d = op == KILN_ATTN_SQUEEZE ? &kiln_op_squeeze : &kiln_op_unsqueeze;
        const int k = (int)ops[i + 1];
        if (opset >= 13) {
            const char *in[2] = {x, ints_init(s, k, ops + i + 2, "axes")};
            np = emit(s, d->name, piece_name(s, n->name, what), 2, in, 1, &y);
        } else {
            np = emit(s, d->name, piece_name(s, n->name, what), 1, &x, 1, &y);
            attr_ints(s, np, "axes", k, ops + i + 2);
        }
        *at = i + 2 + k;
    } else if (op == KILN_ATTN_SLICE || op == KILN_ATTN_SLICE_P) {
        ATTN_NEED(3);
        const int64_t axis = ops[i + 1];
        if (op == KILN_ATTN_SLICE && opset < 10) {
            np = emit(s, kiln_op_slice.name, piece_name(s, n->name, what), 1, &x, 1, &y);
            attr_ints(s, np, "axes", 1, &axis);
            attr_ints(s, np, "starts", 1, ops + i + 2);
            attr_ints(s, np, "ends", 1, ops + i + 3);
        } else if (op == KILN_ATTN_SLICE) {
            const char *in[4] = {x, ints_init(s, 1, ops + i + 2, "starts"), ints_init(s, 1, ops + i + 3, "ends"),
                                 ints_init(s, 1, &axis, "axes")};
            np = emit(s, kiln_op_slice.name, piece_name(s, n->name, what), 4, in, 1, &y);
        } else {
            /* start and end are values (one integer each, of any rank): as 1-D for Slice */
            ATTN_INPUT(ops[i + 2]);
            ATTN_INPUT(ops[i + 3]);
            const int64_t one = 1;
            const char *shape1 = ints_init(s, 1, &one, "shape1"), *se[2];
            for (int k = 0; k < 2 && !failed(s); k++) {
                const char *in[2] = {vname(s, n->in[ops[i + 2 + k]]), shape1};
                se[k] = fresh_name(s, in[0]);
                emit(s, kiln_op_reshape.name, piece_name(s, n->name, k ? "end" : "start"), 2, in, 1, &se[k]);
            }
            if (failed(s)) return NULL;
            const char *in[4] = {x, se[0], se[1], ints_init(s, 1, &axis, "axes")};
            np = emit(s, kiln_op_slice.name, piece_name(s, n->name, what), 4, in, 1, &y);
        }
        *at = i + 4;
    } else if (op == KILN_ATTN_SCALE || op == KILN_ATTN_RSCALE) {
        /* on an operand (q_view, k_view) the factor scales it, and so the scores */
        ATTN_NEED(1);
        ATTN_INPUT(ops[i + 1]);
        const char *in[2] = {x, attn_as(s, n, (int)ops[i + 1], dt, "CastScale")};
        np = emit(s, op == KILN_ATTN_SCALE ? kiln_op_mul.name : kiln_op_div.name, piece_name(s, n->name, what), 2, in, 1,
                  &y);
        *at = i + 2;
    } else if (op == KILN_ATTN_BIAS) {
        ATTN_NEED(1);
        const int input = 3 + (int)ops[i + 1];
        if (input >= n->n_in || n->in[input] < 0) {
            s->st = kiln_fail(s->ctx, KILN_ERR_INVALID_ARGUMENT, "saving ONNX: node '%s': bias input %d is missing",
                              n->name, input);
            return NULL;
        }
        const char *in[2] = {x, attn_as(s, n, input, dt, "CastBias")};
        np = emit(s, kiln_op_add.name, piece_name(s, n->name, what), 2, in, 1, &y);
        *at = i + 2;
    } else {
        s->st = kiln_fail(s->ctx, KILN_ERR_INVALID_ARGUMENT, "saving ONNX: node '%s': %s has an unknown step %" PRId64
                          " at %d", n->name, prog, op, i);
        return NULL;
    }
#undef ATTN_NEED
#undef ATTN_INPUT
    return failed(s) ? NULL : y;
}

/* A whole view program (attribute prog) on x: its last result, named out when out is not
 * NULL (x itself, copied by an Identity into out, for an empty program). */
static const char *attn_prog(saver *s, const kiln_node *n, const char *prog, const char *x, kiln_dtype dt,
                             const char *out) {
    int nops = 0;
    const int64_t *ops = kiln_attr_ints(n, prog, &nops);
    if (!nops && out && !failed(s)) {
        emit(s, kiln_op_identity.name, piece_name(s, n->name, prog), 1, &x, 1, &out);
        return failed(s) ? NULL : out;
    }
    for (int at = 0; at < nops && x;) x = attn_step(s, n, prog, ops, nops, &at, x, dt);
    if (out && x && !failed(s)) s->nodes[s->n_nodes - 1]->output[0] = (char *)out; /* the last step's op */
    return failed(s) ? NULL : out ? out : x;
}

/* kiln.Attention (attention.h) as the ops it was fused from: each of Q, K^T and V through
 * its view program (Reshape, Transpose, Gather, Squeeze, Unsqueeze, Slice; scale factors
 * as Mul / Div of the operand), S = MatMul(Q, K^T) [* scale], s_view (Mul / Div, Reshape,
 * Add of a bias), Softmax on the last axis, MatMul with V, o_view into the output. */
static void save_attention(saver *s, const kiln_node *n, const char *where) {
    if (n->n_in < 3 || s->m->opset < 5) {
        s->st = kiln_fail(s->ctx, KILN_ERR_UNSUPPORTED, "saving ONNX: %s: needs Q, K and V and opset 5 or later "
                          "(Reshape's shape input; the model's is %d)", where, s->m->opset);
        return;
    }
    kiln_node named = *n; /* pieces named after the node, or its output when it has no name */
    if (!*named.name) named.name = (char *)vname(s, n->out[0]);
    n = &named;
    const kiln_dtype dt = vdtype(s, n->in[0]);
    const char *q = attn_prog(s, n, "q_view", vname(s, n->in[0]), dt, NULL);
    const char *kt = q ? attn_prog(s, n, "k_view", vname(s, n->in[1]), dt, NULL) : NULL;
    const char *v = kt ? attn_prog(s, n, "v_view", vname(s, n->in[2]), dt, NULL) : NULL;
    if (!v || failed(s)) return;
    const char *yn = vname(s, n->out[0]);
    const char *sc = fresh_name(s, yn);
    const char *in[2] = {q, kt};
    emit(s, kiln_op_matmul.name, piece_name(s, n->name, "MatMulQK"), 2, in, 1, &sc);
    const float scale = kiln_attr_float(n, "scale", 1.0f);
    if (scale != 1.0f && !failed(s)) {
        const char *scaled = fresh_name(s, yn);
        const char *in2[2] = {sc, scalar_init(s, dt, scale, "scale", where)};
        emit(s, kiln_op_mul.name, piece_name(s, n->name, "Scale"), 2, in2, 1, &scaled);
        sc = scaled;
    }
    sc = failed(s) ? NULL : attn_prog(s, n, "s_view", sc, dt, NULL);
    if (!sc) return;
    const char *p = fresh_name(s, yn);
    Onnx__NodeProto *np = emit(s, kiln_op_softmax.name, piece_name(s, n->name, kiln_op_softmax.name), 1, &sc, 1, &p);
    attr_int(s, np, "axis", -1);
    int n_o = 0;
    kiln_attr_ints(n, "o_view", &n_o);
    const char *o = n_o ? fresh_name(s, yn) : yn;
    const char *in3[2] = {p, v};
    emit(s, kiln_op_matmul.name, n_o ? piece_name(s, n->name, "MatMulPV") : n->name, 2, in3, 1, &o);
    if (n_o && !failed(s)) attn_prog(s, n, "o_view", o, dt, yn);
}

static void save_node(saver *s, const kiln_node *n, int index) {
    char where[600];
    if (*n->name) snprintf(where, sizeof where, "node '%.300s' (%s%s%.100s)", n->name, n->domain, *n->domain ? "." : "", n->op_type);
    else snprintf(where, sizeof where, "node #%d (%s%s%.100s)", index, n->domain, *n->domain ? "." : "", n->op_type);
    if (!*n->domain || strcmp(n->domain, "ai.onnx") == 0) {
        const char **in = zalloc(s, ((size_t)n->n_in + 1) * sizeof *in);
        const char **out = zalloc(s, ((size_t)n->n_out + 1) * sizeof *out);
        if (!in || !out) return;
        for (int k = 0; k < n->n_in; k++) in[k] = vname(s, n->in[k]);
        for (int k = 0; k < n->n_out; k++) out[k] = vname(s, n->out[k]);
        Onnx__NodeProto *np = emit(s, n->op_type, n->name, n->n_in, in, n->n_out, out);
        copy_attrs(s, np, n, kiln_private_attrs, where);
        return;
    }
    if (strcmp(n->domain, "kiln") == 0) {
        const kiln_op_def *d = kiln_node_def(n);
        if (d == &kiln_op_fused_conv) return save_fused_conv_gemm(s, n, kiln_op_conv.name, true, where);
        if (d == &kiln_op_fused_gemm) return save_fused_conv_gemm(s, n, kiln_op_gemm.name, false, where);
        if (d == &kiln_op_fused_elementwise) return save_fused_elementwise(s, n, where);
        if (d == &kiln_op_log_softmax_nll) return save_log_softmax_nll(s, n, where);
        if (d == &kiln_op_to_nhwc) return save_layout_convert(s, n, true, where);
        if (d == &kiln_op_to_nchw) return save_layout_convert(s, n, false, where);
        if (d == &kiln_op_channel_shuffle) return save_channel_shuffle(s, n, where);
        if (d == &kiln_op_roll) return save_roll(s, n, where);
        if (d == &kiln_op_row_gather) return save_row_gather(s, n, where);
        if (d == &kiln_op_channel_gather) return save_channel_gather(s, n, where);
        if (d == &kiln_op_concat_affine) return save_concat_affine(s, n, where);
        if (d == &kiln_op_attention) return save_attention(s, n, where);
    }
    s->st = kiln_fail(s->ctx, KILN_ERR_UNSUPPORTED,
                      "saving ONNX: %s is an internal op of kiln with no ONNX equivalent (training graphs "
                      "cannot be saved: export the inference model first, kiln_trainer_export)", where);
}

/* ------------------------------------------------------------ the model */

/* ONNX's table (onnx.helper.VERSION_TABLE): the lowest IR version that knows the opset. */
static int64_t ir_for_opset(int opset) {
    if (opset <= 8) return 3;
    if (opset == 9) return 4;
    if (opset == 10) return 5;
    if (opset == 11) return 6;
    if (opset <= 14) return 7;
    if (opset <= 18) return 8;
    if (opset <= 20) return 9;
    return 10;
}

/* A graph input's or output's ValueInfoProto. Inputs: dtype and dims as the model has them
 * (dim_param where named). Outputs: the dtype and dims kiln inferred; a dim that is the
 * graph inputs' one symbolic dim (1 and 3 in the two probes) gets its name. */
static Onnx__ValueInfoProto *value_info(saver *s, int v, bool input) {
    const kiln_value *val = &s->m->values[v];
    Onnx__ValueInfoProto *vi = zalloc(s, sizeof *vi);
    Onnx__TypeProto *tp = zalloc(s, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = zalloc(s, sizeof *tt);
    if (!vi || !tp || !tt) return NULL;
    onnx__value_info_proto__init(vi);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    vi->name = val->name;
    vi->type = tp;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    const kiln_dtype dt = input ? val->dtype : vdtype(s, v);
    if (dt != KILN_DTYPE_UNDEFINED) {
        tt->has_elem_type = 1;
        tt->elem_type = (int32_t)dt;
    }
    int ndim = val->ndim;
    int64_t dims[KILN_MAX_DIMS];
    const char *params[KILN_MAX_DIMS] = {0};
    for (int k = 0; k < ndim; k++) {
        dims[k] = val->dims[k];
        if (input) params[k] = val->dim_param[k];
    }
    if (!input && s->one && s->three && s->one[v].ndim >= 0 && s->one[v].ndim == s->three[v].ndim &&
        (ndim < 0 || ndim == s->one[v].ndim)) {
        const char *batch = kiln_model_shared_dim_param(s->m);
        ndim = s->one[v].ndim;
        for (int k = 0; k < ndim; k++) {
            const int64_t a = s->one[v].dims[k], b = s->three[v].dims[k];
            if (val->ndim == ndim && val->dims[k] >= 0) continue; /* static: as the model says */
            dims[k] = a == b ? a : -1;
            if (a == 1 && b == 3) params[k] = batch;
        }
    }
    if (ndim >= 0) {
        Onnx__TensorShapeProto *sh = zalloc(s, sizeof *sh);
        Onnx__TensorShapeProto__Dimension **dv = zalloc(s, ((size_t)ndim + 1) * sizeof *dv);
        if (!sh || !dv) return NULL;
        onnx__tensor_shape_proto__init(sh);
        for (int k = 0; k < ndim; k++) {
            Onnx__TensorShapeProto__Dimension *d = zalloc(s, sizeof *d);
            if (!d) return NULL;
            onnx__tensor_shape_proto__dimension__init(d);
            if (dims[k] >= 0) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
                d->dim_value = dims[k];
            } else if (params[k]) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
                d->dim_param = (char *)params[k];
            }
            dv[k] = d;
        }
        sh->n_dim = (size_t)ndim;
        sh->dim = dv;
        tt->shape = sh;
    }
    return vi;
}

typedef struct file_buffer {
    ProtobufCBuffer base;
    FILE *f;
    int err;
} file_buffer;

static void fb_append(ProtobufCBuffer *b, size_t len, const uint8_t *data) {
    file_buffer *fb = (file_buffer *)b;
    if (!fb->err && len && fwrite(data, 1, len, fb->f) != len) fb->err = errno ? errno : EIO;
}

static void saver_free(saver *s) {
    for (size_t i = 0; i < s->n_allocs; i++) free(s->allocs[i]);
    free(s->allocs);
    free(s->nodes);
    free(s->inits);
    free(s->one);
    free(s->three);
}

/* Build the ModelProto of m in *mp (its parts owned by s). */
/* onnxruntime refuses two nodes of one (non-empty) name; passes name their nodes after the
 * ones they replace, so a file whose nodes had no names ("" + "_rows" for each fused
 * MatMul's Flatten) gave duplicates. Every later node of a name already taken gets
 * "<name>__kiln<k>", a name no node has. */
typedef struct named_node {
    const char *name;
    size_t index;
} named_node;

static int by_name(const void *a, const void *b) {
    const named_node *x = a, *y = b;
    const int c = strcmp(x->name, y->name);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

static bool node_name_taken(const named_node *sorted, size_t n, const char *name) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const int c = strcmp(sorted[mid].name, name);
        if (!c) return true;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return false;
}

static void unique_node_names(saver *s) {
    const size_t n = s->n_nodes;
    if (failed(s) || n < 2) return;
    named_node *sorted = zalloc(s, n * sizeof *sorted);
    if (!sorted) return;
    for (size_t i = 0; i < n; i++) sorted[i] = (named_node){s->nodes[i]->name, i};
    qsort(sorted, n, sizeof *sorted, by_name);
    for (size_t k = 1; k < n && !failed(s); k++) {
        if (!*sorted[k].name || strcmp(sorted[k].name, sorted[k - 1].name) != 0) continue;
        char buf[600];
        do snprintf(buf, sizeof buf, "%.400s__kiln%d", sorted[k].name, s->fresh++);
        while (node_name_taken(sorted, n, buf));
        s->nodes[sorted[k].index]->name = sdup(s, buf); /* sorted[k].name still holds the old one */
    }
}

static kiln_status build(saver *s, Onnx__ModelProto *mp, Onnx__GraphProto *g) {
    const kiln_model *m = s->m;
    onnx__model_proto__init(mp);
    onnx__graph_proto__init(g);
    /* the probes run on a clone, which copies the weights: not for models over 256 MiB,
     * whose probes run on m itself (inference only reads a finalized model: the way
     * kiln_model_output_info uses it from many threads). Without them a value's dtype is
     * whatever finalize could infer, undefined behind a symbolic batch (vit_b_16's fused
     * elementwise scale had none: its constant could not be written). */
    size_t weights = 0;
    for (int v = 0; v < m->n_values; v++)
        if (m->values[v].init) weights += kiln_tensor_nbytes(m->values[v].init);
    kiln_model *probe = NULL;
    size_t probe_max = PROBE_MAX_WEIGHTS;
    const char *pm = getenv("KILN_SAVE_PROBE_MAX_BYTES"); /* tests: the large models' path on a small one */
    if (pm && *pm) probe_max = (size_t)strtoull(pm, NULL, 10);
    if (weights <= probe_max && kiln_model_clone(m, &probe) == KILN_OK) {
        if (kiln_pass_infer_shapes(probe, 1, &s->one) != KILN_OK) s->one = NULL;
        if (probe->n_values != m->n_values || kiln_pass_infer_shapes(probe, 3, &s->three) != KILN_OK) s->three = NULL;
        if (probe->n_values != m->n_values) {
            free(s->one);
            free(s->three);
            s->one = s->three = NULL;
        }
    }
    if (!probe) {
        kiln_model *mm = (kiln_model *)m;
        if (kiln_pass_infer_shapes(mm, 1, &s->one) != KILN_OK) s->one = NULL;
        if (kiln_pass_infer_shapes(mm, 3, &s->three) != KILN_OK) s->three = NULL;
    }
    kiln_model_free(probe);
    kiln_clear_error(s->ctx);
    for (int v = 0; v < m->n_values && !failed(s); v++)
        if (m->values[v].init) {
            Onnx__TensorProto *tp = tensor_proto(s, m->values[v].init, m->values[v].name);
            push_init(s, &s->inits, &s->n_inits, &s->cap_inits, tp);
        }
    for (int i = 0; i < m->n_nodes && !failed(s); i++) save_node(s, &m->nodes[i], i);
    unique_node_names(s);
    Onnx__ValueInfoProto **ins = zalloc(s, ((size_t)m->n_inputs + 1) * sizeof *ins);
    Onnx__ValueInfoProto **outs = zalloc(s, ((size_t)m->n_outputs + 1) * sizeof *outs);
    Onnx__OperatorSetIdProto *os = zalloc(s, sizeof *os);
    Onnx__OperatorSetIdProto **osv = zalloc(s, sizeof *osv);
    if (failed(s)) return s->st;
    for (int i = 0; i < m->n_inputs && !failed(s); i++) ins[i] = value_info(s, m->inputs[i], true);
    for (int i = 0; i < m->n_outputs && !failed(s); i++) outs[i] = value_info(s, m->outputs[i], false);
    if (failed(s)) return s->st;
    onnx__operator_set_id_proto__init(os);
    os->domain = "";
    os->has_version = 1;
    os->version = m->opset;
    osv[0] = os;
    g->name = "kiln";
    g->n_node = s->n_nodes;
    g->node = s->nodes;
    g->n_initializer = s->n_inits;
    g->initializer = s->inits;
    g->n_input = (size_t)m->n_inputs;
    g->input = ins;
    g->n_output = (size_t)m->n_outputs;
    g->output = outs;
    mp->has_ir_version = 1;
    mp->ir_version = m->ir_version > 0 ? m->ir_version : ir_for_opset(m->opset);
    if (mp->ir_version < ir_for_opset(m->opset)) mp->ir_version = ir_for_opset(m->opset);
    mp->n_opset_import = 1;
    mp->opset_import = osv;
    mp->producer_name = "kiln";
    mp->producer_version = KILN_VERSION;
    mp->graph = g;
    return KILN_OK;
}

static kiln_status check_model(const kiln_model *m, const char *fn) {
    if (!m) return KILN_ERR_INVALID_ARGUMENT;
    if (!m->finalized)
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT,
                         "%s: the model is not finalized (call kiln_model_finalize before saving it)", fn);
    return KILN_OK;
}

/* The file name part of path. */
static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Write a temporary beside path and rename it over path. write(f, arg) returns 0 or an
 * errno. */
static kiln_status write_renamed(kiln_context *ctx, const char *path, const char *what,
                                 int (*write)(FILE *f, void *arg), void *arg, char **tmp_out) {
    char *tmp = kiln_malloc(ctx, strlen(path) + 32, "a path");
    if (!tmp) return KILN_ERR_OUT_OF_MEMORY;
    snprintf(tmp, strlen(path) + 32, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        kiln_status st = kiln_fail(ctx, KILN_ERR_IO, "saving %s '%s': cannot create '%s': %s", what, path, tmp, strerror(errno));
        free(tmp);
        return st;
    }
    errno = 0;
    int err = write(f, arg);
    if (!err && (fflush(f) != 0 || fsync(fileno(f)) != 0)) err = errno ? errno : EIO;
    if (fclose(f) != 0 && !err) err = errno ? errno : EIO;
    if (err) {
        remove(tmp);
        free(tmp);
        return kiln_fail(ctx, KILN_ERR_IO, "saving %s '%s': writing failed: %s", what, path, strerror(err));
    }
    if (tmp_out) {
        *tmp_out = tmp; /* the caller renames it */
        return KILN_OK;
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        remove(tmp);
        free(tmp);
        return kiln_fail(ctx, KILN_ERR_IO, "saving %s '%s': cannot rename the temporary over it: %s", what, path, strerror(err));
    }
    free(tmp);
    return KILN_OK;
}

static int write_model(FILE *f, void *arg) {
    file_buffer fb = {.base = {.append = fb_append}, .f = f};
    protobuf_c_message_pack_to_buffer((const ProtobufCMessage *)arg, &fb.base);
    return fb.err;
}

typedef struct external_job {
    saver *s;
    size_t min_external;
} external_job;

/* Move the initializers of at least min_external bytes into the data file (its name in
 * s's tree) and write their bytes. */
static int write_external(FILE *f, void *arg) {
    external_job *job = arg;
    saver *s = job->s;
    uint64_t offset = 0;
    static const uint8_t zeros[EXTERNAL_ALIGN];
    for (size_t i = 0; i < s->n_inits; i++) {
        Onnx__TensorProto *tp = s->inits[i];
        if (!tp->has_raw_data || tp->raw_data.len < job->min_external || tp->n_external_data) continue;
        const size_t len = tp->raw_data.len;
        if (offset % EXTERNAL_ALIGN) {
            size_t pad = EXTERNAL_ALIGN - (size_t)(offset % EXTERNAL_ALIGN);
            if (fwrite(zeros, 1, pad, f) != pad) return errno ? errno : EIO;
            offset += pad;
        }
        if (len && fwrite(tp->raw_data.data, 1, len, f) != len) return errno ? errno : EIO;
        Onnx__StringStringEntryProto **kv = zalloc(s, 3 * sizeof *kv);
        char *off = zalloc(s, 32), *lens = zalloc(s, 32);
        for (int k = 0; kv && k < 3; k++) {
            kv[k] = zalloc(s, sizeof **kv);
            if (kv[k]) onnx__string_string_entry_proto__init(kv[k]);
        }
        if (failed(s) || !kv[0] || !kv[1] || !kv[2]) return ENOMEM;
        snprintf(off, 32, "%" PRIu64, offset);
        snprintf(lens, 32, "%zu", len);
        kv[0]->key = "location";
        kv[0]->value = (char *)s->ext_location;
        kv[1]->key = "offset";
        kv[1]->value = off;
        kv[2]->key = "length";
        kv[2]->value = lens;
        tp->n_external_data = 3;
        tp->external_data = kv;
        tp->has_data_location = 1;
        tp->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
        tp->has_raw_data = 0;
        tp->raw_data.len = 0;
        tp->raw_data.data = NULL;
        offset += len;
    }
    return 0;
}

kiln_status kiln_onnx_save_with(const kiln_model *m, const char *path, size_t max_inline, size_t min_external) {
    kiln_status st = check_model(m, "kiln_model_save_onnx");
    if (st) return st;
    if (!path || !*path) return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_model_save_onnx: no path");
    saver s = {.ctx = m->ctx, .m = m};
    Onnx__ModelProto mp;
    Onnx__GraphProto g;
    char *data_path = NULL, *data_tmp = NULL;
    if ((st = build(&s, &mp, &g))) goto done;
    if (protobuf_c_message_get_packed_size(&mp.base) > max_inline) {
        /* external data: PATH.data beside the model, named relative to it */
        size_t n = strlen(path) + 8;
        data_path = kiln_malloc(m->ctx, n, "a path");
        char *location = data_path ? zalloc(&s, strlen(base_name(path)) + 8) : NULL;
        if (!data_path || !location) {
            st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "saving ONNX: out of memory");
            goto done;
        }
        snprintf(data_path, n, "%s.data", path);
        sprintf(location, "%s.data", base_name(path));
        s.ext_location = location;
        external_job job = {.s = &s, .min_external = min_external};
        st = write_renamed(m->ctx, data_path, "ONNX external data", write_external, &job, &data_tmp);
        if (st) goto done;
        if (protobuf_c_message_get_packed_size(&mp.base) > MAX_INLINE_BYTES) {
            st = kiln_fail(m->ctx, KILN_ERR_UNSUPPORTED,
                           "saving '%s': the graph is over protobuf's 2 GiB even with its initializers in "
                           "external data (large Constant nodes?)", path);
            goto done;
        }
    }
    char *model_tmp = NULL;
    if ((st = write_renamed(m->ctx, path, "ONNX model", write_model, &mp, &model_tmp))) goto done;
    if (data_tmp) {
        if (rename(data_tmp, data_path) != 0) {
            st = kiln_fail(m->ctx, KILN_ERR_IO, "saving ONNX external data '%s': cannot rename the temporary over it: %s",
                           data_path, strerror(errno));
            remove(model_tmp);
            free(model_tmp);
            goto done;
        }
        free(data_tmp);
        data_tmp = NULL;
    }
    if (rename(model_tmp, path) != 0) {
        st = kiln_fail(m->ctx, KILN_ERR_IO, "saving ONNX model '%s': cannot rename the temporary over it: %s", path,
                       strerror(errno));
        remove(model_tmp);
    }
    free(model_tmp);
done:
    if (data_tmp) {
        remove(data_tmp);
        free(data_tmp);
    }
    free(data_path);
    if (!st) st = s.st;
    saver_free(&s);
    return st;
}

kiln_status kiln_model_save_onnx(const kiln_model *m, const char *path) {
    return kiln_onnx_save_with(m, path, MAX_INLINE_BYTES, MIN_EXTERNAL_BYTES);
}

kiln_status kiln_model_save_onnx_buffer(const kiln_model *m, void **data, size_t *size) {
    kiln_status st = check_model(m, "kiln_model_save_onnx_buffer");
    if (st) return st;
    if (!data || !size) return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_model_save_onnx_buffer: NULL argument");
    *data = NULL;
    *size = 0;
    saver s = {.ctx = m->ctx, .m = m};
    Onnx__ModelProto mp;
    Onnx__GraphProto g;
    if (!(st = build(&s, &mp, &g))) {
        size_t n = protobuf_c_message_get_packed_size(&mp.base);
        uint8_t *buf = NULL;
        if (n > MAX_INLINE_BYTES)
            st = kiln_fail(m->ctx, KILN_ERR_UNSUPPORTED,
                           "kiln_model_save_onnx_buffer: the model is %zu bytes, over protobuf's 2 GiB limit; save it "
                           "to a file (kiln_model_save_onnx writes its weights as external data)", n);
        else if (!(buf = kiln_malloc(m->ctx, n ? n : 1, "the ONNX bytes")))
            st = KILN_ERR_OUT_OF_MEMORY;
        else if (protobuf_c_message_pack(&mp.base, buf) != n) {
            free(buf);
            st = kiln_fail(m->ctx, KILN_ERR_INTERNAL, "kiln_model_save_onnx_buffer: protobuf-c packed a different size");
        } else {
            *data = buf;
            *size = n;
        }
    }
    saver_free(&s);
    return st;
}

void kiln_free(void *p) { free(p); }
