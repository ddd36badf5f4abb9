/*
 * precision.c — the fp16/bf16 rewrite (kiln_pass_options.precision != FP32): float32
 * arithmetic moves to the low dtype L (f16 or bf16) except where numerics need fp32.
 *
 * Every node gets a class, declared by its op (kiln_op_def.precision, .f32_inputs and
 * .prec_flags in the op's file; the ops named below are examples):
 *   low     compute ops (Conv, Gemm, MatMul, Einsum, pools, elementwise math, Resize,
 *           BatchNormalization, the fused kiln ops, training's ConvGradInput/Weight/Bias,
 *           MaxPoolGrad, GlobalAveragePoolGrad, UnaryGrad and BatchNormGrad): f32 inputs
 *           are read as L, f32 outputs become L, except the inputs and outputs the op
 *           keeps f32 (.f32_inputs, .f32_outputs). One that grows its input into graph
 *           outputs nothing reads (KILN_PREC_GROWS: a segmentation head's final Resize)
 *           computes in f32 instead, from its input cast up. BatchNormalization's scale/B/mean/var and running statistics
 *           stay f32 (the op takes mixed float dtypes, as opset 15 allows), in training
 *           mode too, and so do kiln.BatchNormGrad's scale/B/mean/var inputs and its
 *           dScale/dB outputs: X, Y, dY and dX are L, the statistics are summed in f32 or
 *           double from them (PyTorch's autocast: cuDNN's batch norm on fp16 data with fp32
 *           statistics and parameters), and the parameter gradients reach the optimizer
 *           as the f32 master gradients they are, with no Cast.
 *   follow  data movement and selection (Reshape, Concat, Slice, Gather, Pad, Where,
 *           kiln.DropoutGrad,
 *           comparisons...): L when any of their f32 inputs is L, or when every reader
 *           computes in L (then the Cast moves before them, except before Slice, Gather
 *           and Split, whose outputs are smaller), else f32. Moving or selecting is exact.
 *           LayerNormalization likewise: X, Scale, B and Y in L (ONNX's one type T), Mean
 *           and InvStdDev f32, its statistics in float inside every kernel.
 *   fp32    Softmax, LogSoftmax, InstanceNormalization, ReduceSum/ReduceMean (they sum
 *           many terms), the losses, and every op this file does not name: f32 in and out;
 *           Exp and Log (also within a kiln.FusedElementwise) feeding one of them stay f32
 *           too (exp overflows f16 past 11), and so does the arithmetic computing only such
 *           an Exp's argument (x - max(x) of a written-out softmax). An input read for its
 *           shape only (KILN_PREC_SHAPE_ANY: kiln.ReduceSumTo's Like) keeps its dtype, so no
 *           Cast (and no layout conversion before it) copies a forward activation for it.
 *   mixed   the fused loss kiln.LogSoftmaxNLL and its gradient kiln.LogSoftmaxNLLGrad
 *           (src/passes/fuse_loss.c): X (input 0) is read in whatever dtype it has, f32
 *           or L (their kernels compute in f32 either way), so the logits of a low Gemm
 *           reach the loss with no Cast; weight, dLoss and dLogProb are read as f32. The
 *           loss (and log_prob) stay f32; the gradient dX is L exactly when X is, so it
 *           reaches the low backward of the logits' producer with no Cast either; where an
 *           fp32 op reads dX too (the bias gradient's sum), the op's optional second
 *           output, dX in f32, serves it instead of a Cast. The gradient's optional
 *           third output, the loss, stays f32. Exp and Log feeding X stay
 *           f32, as they do before an fp32 op.
 *   any     Shape, Size, ArgMax/ArgMin, Cast, CastLike: read whatever dtype they get.
 *   keep    nodes that only compute plan-time constants (shape computations such as
 *           Shape -> Cast -> Mul -> Floor -> Resize's sizes, weights derived from weights):
 *           untouched, so sizes computed in float stay exact; a Cast to L where a low node
 *           reads one is folded by the planner.
 *   source  Cast to FLOAT, Constant and ConstantOfShape giving f32: retargeted to L (the
 *           `to` attribute, the value tensor converted) when every reader wants L.
 * Then, per input slot, a Cast is inserted where the reader wants another dtype than the
 * value has (one Cast per value and dtype, shared by its readers); initializers read as L
 * are converted into new initializers named <name>_f16/_bf16 (the f32 original is dropped
 * when nothing reads it any more). Graph inputs and outputs keep their dtypes: a low output
 * is computed under a new name and cast back to f32 under its own. Integer, bool, f64 and
 * original f16/bf16 values are never touched. The function is the fp32 graph's up to the
 * rounding of L (tests/test_precision.c measures it on the CPU).
 */
#include "passes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum cls { C_KEEP, C_LOW, C_FOLLOW, C_FP32, C_ANY, C_SOURCE, C_MIXED } cls;
typedef enum want { W_ANY, W_LOW, W_F32 } want;

/* Float inputs that keep their dtype whatever the node computes in (the op's f32_inputs:
 * BN's statistics and affine parameters, Resize's roi and scales, Dropout's ratio). */
static bool exempt(const kiln_node *n, int k) {
    const kiln_op_def *d = kiln_node_def(n);
    return d && kiln_input_in_mask(d->f32_inputs, k);
}

/* Float outputs that stay f32 when the node computes in L (the op's f32_outputs: BN's
 * running statistics, its gradient's dScale and dB). */
static bool exempt_out(const kiln_node *n, int k) {
    const kiln_op_def *d = kiln_node_def(n);
    return d && k < 32 && (d->f32_outputs & (1u << k));
}

static uint32_t prec_flags(const kiln_node *n) {
    const kiln_op_def *d = kiln_node_def(n);
    return d ? d->prec_flags : 0;
}

/* An exp/log op (KILN_PREC_EXP_LOG), also inside a fused elementwise program
 * ("... Exp ..."): a node with a `program` reads its tokens' ops' flags. */
static bool exp_or_log(const kiln_node *n) {
    if (!(prec_flags(n) & KILN_PREC_EXP_LOG)) return false;
    const char *p = kiln_attr_string(n, "program", NULL);
    if (!p) return true;
    while (*p) {
        size_t len = strcspn(p, " @");
        for (int o = 0; o < kiln_op_count(); o++) {
            const kiln_op_def *d = kiln_op_get(o);
            const char *tok = kiln_eltwise_token(d);
            if (tok && strlen(tok) == len && strncmp(p, tok, len) == 0 && (d->prec_flags & KILN_PREC_EXP_LOG))
                return true;
        }
        p += strcspn(p, " ");
        p += strspn(p, " ");
    }
    return false;
}

typedef struct state {
    kiln_model *m;
    kiln_dtype low;
    const kiln_tensor *vt; /* (nv0) inferred dtypes and shapes */
    int nv0, n0;
    bool *f32v;            /* (cap values) the value is float32 in the input graph */
    bool *is_low;          /* (cap values) the value is L after the rewrite */
    int *low_of, *f32_of;  /* (cap values) its L / f32 twin, or -1 */
    int *key;              /* (cap nodes) position of each node in the final order */
    cls *c;                /* (n0) */
    bool *node_low;        /* (n0) follow nodes that compute in L */
    int casts;
} state;

static want want_of(const state *s, int i, int k) {
    const kiln_node *n = &s->m->nodes[i];
    switch (s->c[i]) {
    case C_LOW: return exempt(n, k) ? W_F32 : W_LOW;
    case C_FOLLOW: return exempt(n, k) || !s->node_low[i] ? W_F32 : W_LOW;
    case C_FP32: { /* kiln.ReduceSumTo(dY, Like) reads Like's shape only */
        const kiln_op_def *d = kiln_node_def(n);
        return d && (d->prec_flags & KILN_PREC_SHAPE_ANY) && kiln_input_in_mask(d->shape_only_inputs, k) ? W_ANY
                                                                                                        : W_F32;
    }
    case C_KEEP: { /* Shape(x) and friends read x's shape only */
        const kiln_op_def *d = n->op >= 0 ? kiln_op_get(n->op) : NULL;
        return d && kiln_input_in_mask(d->shape_only_inputs, k) ? W_ANY : W_F32;
    }
    case C_ANY: return exempt(n, k) ? W_F32 : W_ANY;
    case C_SOURCE: return W_ANY;
    case C_MIXED: return k == 0 ? W_ANY : W_F32;
    }
    return W_ANY;
}

/* t (f32) in dtype low. A scalar keeps its sign, and stays non-zero and finite: an epsilon
 * that rounds to 0 in f16 (F.normalize's clamp_min(1e-12): swin_v2's cosine attention
 * divided 0 by 0 on the zero keys of its padded windows, NaN where fp32 gives 0) becomes the
 * smallest non-zero value of low, a bound that rounds to infinity the largest finite one.
 * Tensors of several elements (weights) are rounded as they are. */
static kiln_tensor *convert(kiln_context *ctx, const kiln_tensor *t, kiln_dtype low) {
    kiln_tensor *r = kiln_tensor_new(ctx, low, t->ndim, t->dims);
    if (!r) return NULL;
    const float *src = t->data;   // (numel)
    uint16_t *dst = r->data;      // (numel)
    int64_t n = kiln_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) dst[i] = low == KILN_F16 ? kiln_f32_to_f16(src[i]) : kiln_f32_to_bf16(src[i]);
    if (n == 1 && isfinite(src[0]) && src[0] != 0.0f) {
        const uint16_t sign = src[0] < 0 ? 0x8000u : 0u, mag = dst[0] & 0x7fffu;
        const uint16_t inf = low == KILN_F16 ? 0x7c00u : 0x7f80u;
        if (mag == 0) dst[0] = sign | 1u; /* the smallest subnormal */
        else if (mag == inf) dst[0] = sign | (uint16_t)(inf - 1u); /* the largest finite */
    }
    return r;
}

/* A new value for a copy of v in dtype dt, named after v. */
static int twin_value(state *s, int v, kiln_dtype dt) {
    char hint[200];
    snprintf(hint, sizeof hint, "%.150s_%s", s->m->values[v].name, kiln_dtype_name(dt));
    int t = kiln_pass_new_value(s->m, hint);
    if (t < 0) return -1;
    kiln_value *tv = &s->m->values[t];
    const kiln_value *src = &s->m->values[v];
    tv->dtype = dt;
    tv->ndim = src->ndim;
    memcpy(tv->dims, src->dims, sizeof tv->dims);
    return t;
}

/* Cast v to dt into a new value; the Cast gets order key `key`. -1 on OOM. */
static int add_cast(state *s, int v, kiln_dtype dt, int key) {
    int t = twin_value(s, v, dt);
    if (t < 0) return -1;
    kiln_attr *a = calloc(1, sizeof *a);
    if (!a) return -1;
    a->name = kiln_strdup(s->m->ctx, "to");
    a->type = KILN_ATTR_INT;
    a->i = dt;
    if (!a->name) {
        free(a);
        return -1;
    }
    char name[64];
    snprintf(name, sizeof name, "precision_cast_%d", s->casts++);
    int idx = kiln_model_add_node_raw(s->m, "Cast", name, "", 1, &v, 1, &t, 1, a);
    if (idx < 0) return -1;
    s->key[idx] = key;
    return t;
}

/* v as the reader at order key `key` wants it; -1 on OOM. */
static int as_low(state *s, int v, int key) {
    if (s->low_of[v] >= 0) return s->low_of[v];
    kiln_value *val = &s->m->values[v];
    int t;
    if (val->init) {
        t = twin_value(s, v, s->low);
        if (t < 0) return -1;
        kiln_tensor *c = convert(s->m->ctx, s->m->values[v].init, s->low);
        if (!c) return -1;
        s->m->values[t].init = c;
    } else {
        t = add_cast(s, v, s->low, key);
        if (t < 0) return -1;
    }
    s->is_low[t] = true;
    s->low_of[v] = t;
    s->f32_of[t] = v;
    return t;
}

static int as_f32(state *s, int v, int key) {
    if (s->f32_of[v] >= 0) return s->f32_of[v];
    int t = add_cast(s, v, KILN_F32, key);
    if (t < 0) return -1;
    s->f32_of[v] = t;
    s->low_of[t] = v;
    return t;
}

/* Replace (or add) a node's tensor attribute `value` by t (taken over). */
static kiln_status set_value_attr(kiln_model *m, int i, kiln_tensor *t) {
    kiln_node *n = &m->nodes[i];
    for (int a = 0; a < n->n_attrs; a++)
        if (strcmp(n->attrs[a].name, "value") == 0 || strncmp(n->attrs[a].name, "value_float", 11) == 0) {
            kiln_attr_clear(&n->attrs[a]);
            n->attrs[a].name = kiln_strdup(m->ctx, "value");
            n->attrs[a].type = KILN_ATTR_TENSOR;
            n->attrs[a].t = t;
            return n->attrs[a].name ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
        }
    kiln_attr *p = realloc(n->attrs, (size_t)(n->n_attrs + 1) * sizeof *p);
    if (!p) {
        kiln_tensor_free(t);
        return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    n->attrs = p;
    memset(&p[n->n_attrs], 0, sizeof *p);
    p[n->n_attrs].name = kiln_strdup(m->ctx, "value");
    p[n->n_attrs].type = KILN_ATTR_TENSOR;
    p[n->n_attrs].t = t;
    n->n_attrs++;
    return p[n->n_attrs - 1].name ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
}

/* Make a Cast-to-FLOAT, Constant or ConstantOfShape node produce L. */
static kiln_status retarget(state *s, int i) {
    kiln_model *m = s->m;
    kiln_node *n = &m->nodes[i];
    if (kiln_node_attr(n, "to")) return kiln_node_set_int(n, "to", s->low); /* Cast */
    const kiln_attr *a = NULL;
    for (int k = 0; k < n->n_attrs && !a; k++)
        if (strcmp(n->attrs[k].name, "value") == 0 || strncmp(n->attrs[k].name, "value_float", 11) == 0)
            a = &n->attrs[k];
    kiln_tensor *t = NULL;
    if (!a) { /* ConstantOfShape's default value: f32 zero */
        t = kiln_tensor_new(m->ctx, s->low, 1, (int64_t[]){1});
    } else if (a->type == KILN_ATTR_TENSOR) {
        t = a->t ? convert(m->ctx, a->t, s->low) : NULL;
    } else if (a->type == KILN_ATTR_FLOAT) {
        kiln_tensor f = {.dtype = KILN_F32, .ndim = 0, .data = (void *)&a->f};
        t = convert(m->ctx, &f, s->low);
    } else if (a->type == KILN_ATTR_FLOATS) {
        kiln_tensor f = {.dtype = KILN_F32, .ndim = 1, .dims = {a->n}, .data = a->floats};
        t = convert(m->ctx, &f, s->low);
    }
    if (!t) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return set_value_attr(m, i, t);
}

static cls classify(const kiln_node *n, const kiln_tensor *vt, const bool *cst) {
    const kiln_op_def *d = kiln_node_def(n);
    if (d && (d->prec_flags & KILN_PREC_SOURCE)) {
        int o = n->n_out > 0 ? n->out[0] : -1;
        if (o >= 0 && vt[o].dtype == KILN_F32) return C_SOURCE;
    }
    bool all_const = n->n_out > 0;
    for (int k = 0; k < n->n_out; k++) all_const = all_const && n->out[k] >= 0 && cst[n->out[k]];
    if (all_const) return C_KEEP;
    if (!d) return C_FP32;
    switch (d->precision) {
    case KILN_PREC_LOW: return C_LOW;
    case KILN_PREC_FOLLOW: return C_FOLLOW;
    case KILN_PREC_ANY: return C_ANY;
    case KILN_PREC_MIXED: return C_MIXED;
    case KILN_PREC_FP32: case KILN_PREC_UNDECLARED: break;
    }
    return C_FP32;
}

typedef struct keyed {
    int key, idx;
} keyed;

static int cmp_keyed(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->idx - y->idx;
}

static kiln_status rewrite(state *s, const int *order, const int *cstart, const int *cons, bool *changed) {
    kiln_model *m = s->m;
    kiln_status st = KILN_OK;
    int *pos = calloc((size_t)s->n0 + 1, sizeof *pos);
    if (!pos) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int oi = 0; oi < s->n0; oi++) {
        pos[order[oi]] = oi;
        s->key[order[oi]] = 3 * oi + 1;
    }
    /* Sources every reader wants in L. */
    for (int i = 0; i < s->n0 && !st; i++) {
        if (s->c[i] != C_SOURCE) continue;
        int v = m->nodes[i].out[0];
        if (v < 0 || !s->f32v[v] || m->values[v].is_output) continue;
        bool low = false, f32 = false;
        for (int c = cstart[v]; c < cstart[v + 1]; c++) {
            const kiln_node *r = &m->nodes[cons[c]];
            for (int k = 0; k < r->n_in; k++)
                if (r->in[k] == v) {
                    want w = want_of(s, cons[c], k);
                    low |= w == W_LOW;
                    f32 |= w == W_F32;
                }
        }
        if (!low || f32) continue;
        st = retarget(s, i);
        s->is_low[v] = true;
        *changed = true;
    }
    /* Graph outputs computed in L: computed under a new name, cast back under their own. */
    for (int j = 0; j < m->n_outputs && !st; j++) {
        int v = m->outputs[j];
        if (!s->is_low[v] || s->f32_of[v] >= 0) continue; /* f32_of set: v listed twice */
        int p = -1, pk = -1;
        for (int i = 0; i < s->n0 && p < 0; i++)
            for (int k = 0; k < m->nodes[i].n_out; k++)
                if (m->nodes[i].out[k] == v) p = i, pk = k;
        if (p < 0) continue;
        int t = twin_value(s, v, s->low);
        if (t < 0) {
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        m->nodes[p].out[pk] = t;
        for (int i = 0; i < s->n0; i++)
            for (int k = 0; k < m->nodes[i].n_in; k++)
                if (m->nodes[i].in[k] == v) m->nodes[i].in[k] = t;
        s->f32v[t] = true;
        s->is_low[t] = true;
        s->is_low[v] = false;
        s->f32_of[t] = v;
        s->low_of[v] = t;
        kiln_attr *a = calloc(1, sizeof *a);
        if (!a || !(a->name = kiln_strdup(m->ctx, "to"))) {
            free(a);
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        a->type = KILN_ATTR_INT;
        a->i = KILN_F32;
        char name[64];
        snprintf(name, sizeof name, "precision_cast_%d", s->casts++);
        int idx = kiln_model_add_node_raw(m, "Cast", name, "", 1, &t, 1, &v, 1, a);
        if (idx < 0) {
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        s->key[idx] = 3 * pos[p] + 2;
        *changed = true;
    }
    /* The fused loss's gradient in L also read by an fp32 op (the bias gradient's sum):
     * the op writes an f32 copy as its second output, which takes the place of the Cast. */
    for (int i = 0; i < s->n0 && !st; i++) {
        kiln_node *n = &m->nodes[i];
        /* dX alone, or with the loss as output 2 (fuse-loss merged the forward) */
        const bool free_slot = n->n_out == 1 || (n->n_out == 3 && n->out[1] < 0);
        const int v = free_slot ? n->out[0] : -1;
        if (s->c[i] != C_MIXED || !(prec_flags(n) & KILN_PREC_LIKE_X) || v < 0 || v >= s->nv0 ||
            !s->is_low[v] || s->f32_of[v] >= 0)
            continue;
        bool f32 = false;
        for (int c = cstart[v]; c < cstart[v + 1]; c++)
            for (int k = 0; k < m->nodes[cons[c]].n_in; k++)
                f32 |= m->nodes[cons[c]].in[k] == v && want_of(s, cons[c], k) == W_F32;
        if (!f32) continue;
        int t = twin_value(s, v, KILN_F32);
        int *out = t >= 0 ? realloc(n->out, (n->n_out < 2 ? 2 : (size_t)n->n_out) * sizeof *out) : NULL;
        if (!out) {
            st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
            break;
        }
        out[1] = t;
        n->out = out;
        if (n->n_out < 2) n->n_out = 2;
        s->f32_of[v] = t;
        s->low_of[t] = v;
        *changed = true;
    }
    /* Every input slot gets the dtype its reader wants. */
    for (int i = 0; i < s->n0 && !st; i++) {
        for (int k = 0; k < m->nodes[i].n_in && !st; k++) {
            int v = m->nodes[i].in[k];
            if (v < 0 || !s->f32v[v]) continue;
            want w = want_of(s, i, k);
            if (w == W_ANY || (w == W_LOW) == s->is_low[v]) continue;
            int t = w == W_LOW ? as_low(s, v, 3 * pos[i]) : as_f32(s, v, 3 * pos[i]);
            if (t < 0) {
                st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
                break;
            }
            m->nodes[i].in[k] = t;
            *changed = true;
        }
    }
    for (int v = 0; v < s->nv0; v++)
        if (s->is_low[v]) m->values[v].dtype = s->low;
    free(pos);
    return st;
}

/* Nodes in their final order: each inserted Cast right before its first reader (or right
 * after the producer of the output it restores), so lifetimes stay short. */
static kiln_status reorder(state *s) {
    kiln_model *m = s->m;
    keyed *kd = malloc(((size_t)m->n_nodes + 1) * sizeof *kd);
    kiln_node *tmp = malloc(((size_t)m->n_nodes + 1) * sizeof *tmp);
    if (!kd || !tmp) {
        free(kd);
        free(tmp);
        return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int i = 0; i < m->n_nodes; i++) kd[i] = (keyed){s->key[i], i};
    qsort(kd, (size_t)m->n_nodes, sizeof *kd, cmp_keyed);
    for (int i = 0; i < m->n_nodes; i++) tmp[i] = m->nodes[kd[i].idx];
    if (m->n_nodes) memcpy(m->nodes, tmp, (size_t)m->n_nodes * sizeof *tmp); /* no nodes: NULL */
    free(kd);
    free(tmp);
    return KILN_OK;
}

/* Initializers whose every reader now reads the converted copy are dropped. */
static void drop_unread_initializers(state *s) {
    kiln_model *m = s->m;
    int *uses = calloc((size_t)m->n_values + 1, sizeof *uses);
    if (!uses) return; /* keeping them is only wasteful */
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_in; k++)
            if (m->nodes[i].in[k] >= 0) uses[m->nodes[i].in[k]]++;
    for (int j = 0; j < m->n_outputs; j++) uses[m->outputs[j]]++;
    for (int v = 0; v < s->nv0; v++) {
        kiln_value *val = &m->values[v];
        if (val->init && s->low_of[v] >= 0 && !uses[v] && !val->is_input) {
            kiln_tensor_free(val->init);
            val->init = NULL;
        }
    }
    free(uses);
}

kiln_status kiln_pass_precision(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    if (o->precision == KILN_PRECISION_FP32) return KILN_OK;
    if (o->precision != KILN_PRECISION_FP16 && o->precision != KILN_PRECISION_BF16)
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "unknown precision %d", (int)o->precision);
    kiln_tensor *vt = NULL;
    kiln_status st = kiln_pass_infer_types(m, &vt);
    if (st) return st;
    state s = {.m = m, .low = o->precision == KILN_PRECISION_FP16 ? KILN_F16 : KILN_BF16, .vt = vt,
               .nv0 = m->n_values, .n0 = m->n_nodes};
    size_t slots = 0;
    for (int i = 0; i < m->n_nodes; i++) slots += (size_t)m->nodes[i].n_in;
    /* Each input slot adds at most one value and one Cast, each graph output one of each. */
    size_t capv = (size_t)s.nv0 + slots + (size_t)m->n_outputs + 1;
    size_t capn = (size_t)s.n0 + slots + (size_t)m->n_outputs + 1;
    s.f32v = calloc(capv, sizeof *s.f32v);
    s.is_low = calloc(capv, sizeof *s.is_low);
    s.low_of = malloc(capv * sizeof *s.low_of);
    s.f32_of = malloc(capv * sizeof *s.f32_of);
    s.key = calloc(capn, sizeof *s.key);
    s.c = calloc((size_t)s.n0 + 1, sizeof *s.c);
    s.node_low = calloc((size_t)s.n0 + 1, sizeof *s.node_low);
    bool *cst = calloc((size_t)s.nv0 + 1, sizeof *cst);
    int *order = malloc(((size_t)s.n0 + 1) * sizeof *order);
    int *cstart = calloc((size_t)s.nv0 + 2, sizeof *cstart);
    int *cons = malloc((slots + 1) * sizeof *cons);
    int *fill = calloc((size_t)s.nv0 + 1, sizeof *fill);
    if (!s.f32v || !s.is_low || !s.low_of || !s.f32_of || !s.key || !s.c || !s.node_low || !cst || !order ||
        !cstart || !cons || !fill) {
        st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    for (size_t v = 0; v < capv; v++) s.low_of[v] = s.f32_of[v] = -1;
    for (int v = 0; v < s.nv0; v++) s.f32v[v] = vt[v].dtype == KILN_F32;
    if ((st = kiln_pass_topo_order(m, order))) goto out;
    /* readers of each value (CSR), counted once per node */
    for (int i = 0; i < s.n0; i++)
        for (int k = 0; k < m->nodes[i].n_in; k++) {
            int v = m->nodes[i].in[k];
            bool first = v >= 0;
            for (int q = 0; q < k && first; q++) first = m->nodes[i].in[q] != v;
            if (first) cstart[v + 1]++;
        }
    for (int v = 0; v < s.nv0; v++) cstart[v + 1] += cstart[v];
    for (int i = 0; i < s.n0; i++)
        for (int k = 0; k < m->nodes[i].n_in; k++) {
            int v = m->nodes[i].in[k];
            bool first = v >= 0;
            for (int q = 0; q < k && first; q++) first = m->nodes[i].in[q] != v;
            if (first) cons[cstart[v] + fill[v]++] = i;
        }
    /* plan-time constants: initializers and what only they (and shapes) determine */
    for (int v = 0; v < s.nv0; v++) cst[v] = m->values[v].init != NULL;
    for (int oi = 0; oi < s.n0; oi++) {
        const kiln_node *n = &m->nodes[order[oi]];
        const kiln_op_def *d = n->op >= 0 ? kiln_op_get(n->op) : NULL;
        bool c = d && !d->random;
        for (int k = 0; k < n->n_in && c; k++) {
            bool shape_only = kiln_input_in_mask(d->shape_only_inputs, k);
            c = n->in[k] < 0 || cst[n->in[k]] || shape_only;
        }
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0) cst[n->out[k]] = c;
    }
    for (int i = 0; i < s.n0; i++) s.c[i] = classify(&m->nodes[i], vt, cst);
    /* Exp/Log chains feeding fp32 ops stay fp32 (readers come later in the order), and so
     * does arithmetic that only computes an fp32 Exp's argument: exp turns an absolute
     * error in x into a relative one in exp(x) (x - max(x) in a written-out softmax). */
    bool *exp_arg = calloc((size_t)s.n0 + 1, sizeof *exp_arg);
    if (!exp_arg) {
        st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    for (int oi = s.n0 - 1; oi >= 0; oi--) {
        int i = order[oi];
        const kiln_node *n = &m->nodes[i];
        if (s.c[i] != C_LOW || n->out[0] < 0) continue;
        int v = n->out[0];
        if (exp_or_log(n)) {
            for (int c = cstart[v]; c < cstart[v + 1]; c++)
                if (s.c[cons[c]] == C_FP32 || s.c[cons[c]] == C_MIXED) s.c[i] = C_FP32;
        } else if ((prec_flags(n) & KILN_PREC_EXP_ARG) && cstart[v] < cstart[v + 1] &&
                   !m->values[v].is_output) {
            bool all = true;
            for (int c = cstart[v]; c < cstart[v + 1]; c++)
                all = all && s.c[cons[c]] == C_FP32 && (exp_arg[cons[c]] || exp_or_log(&m->nodes[cons[c]]));
            if (all) s.c[i] = C_FP32, exp_arg[i] = true;
        }
    }
    free(exp_arg);
    /* A low op that grows its input 0 (KILN_PREC_GROWS: Resize) into graph outputs that no
     * node reads computes in f32 from that input cast up, instead of in L with its output
     * cast back: the Cast then touches the smaller tensor (fcn's final (N, 21, 28, 28) ->
     * 224 x 224 upsample: the [N, 21, 224, 224] f16 -> f32 Cast, 0.63 ms of 26 at batch 256
     * on an H200, becomes one of a 64th of the bytes), and the output is the f32 Resize of
     * the rounded input. Sizes from the indicative shapes (symbolic dims as 1); unknown: kept. */
    for (int i = 0; i < s.n0; i++) {
        const kiln_node *n = &m->nodes[i];
        if (s.c[i] != C_LOW || !(prec_flags(n) & KILN_PREC_GROWS) || n->n_in < 1 || n->in[0] < 0) continue;
        const kiln_tensor *x = &vt[n->in[0]];
        bool grows = x->ndim >= 0 && n->n_out > 0, any = false;
        for (int k = 0; k < n->n_out && grows; k++) {
            const int v = n->out[k];
            if (v < 0) continue;
            any = true;
            grows = m->values[v].is_output && s.f32v[v] && cstart[v] == cstart[v + 1] && vt[v].ndim >= 0 &&
                    kiln_tensor_numel(&vt[v]) > kiln_tensor_numel(x);
        }
        if (grows && any) s.c[i] = C_FP32;
    }
    /* Which values become L, in order. */
    for (int oi = 0; oi < s.n0; oi++) {
        int i = order[oi];
        const kiln_node *n = &m->nodes[i];
        bool low = s.c[i] == C_LOW;
        /* the fused loss's gradient: dX in X's dtype; the forward's outputs, and the loss
         * the gradient writes as its output 2, stay f32 */
        if (s.c[i] == C_MIXED)
            low = (prec_flags(n) & KILN_PREC_LIKE_X) && n->n_in > 0 && n->in[0] >= 0 && s.is_low[n->in[0]];
        if (s.c[i] == C_FOLLOW) {
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k] >= 0 && !exempt(n, k) && s.is_low[n->in[k]]) low = true;
            s.node_low[i] = low;
        }
        for (int k = 0; k < (s.c[i] == C_MIXED ? 1 : n->n_out); k++)
            if (n->out[k] >= 0 && s.f32v[n->out[k]]) s.is_low[n->out[k]] = low && !exempt_out(n, k);
    }
    /* Data movement whose every reader computes in L moves to L too, so the Cast happens
     * before it: before a Pad, Expand or Concat it touches fewer bytes, and sources behind
     * it can be retargeted. Not for ops whose output is smaller than their input. */
    for (int oi = s.n0 - 1; oi >= 0; oi--) {
        int i = order[oi];
        const kiln_node *n = &m->nodes[i];
        if (s.c[i] != C_FOLLOW || s.node_low[i] || (prec_flags(n) & KILN_PREC_SHRINKS)) continue;
        bool low = false, f32 = false;
        for (int k = 0; k < n->n_out; k++) {
            int v = n->out[k];
            if (v < 0 || !s.f32v[v]) continue;
            f32 |= m->values[v].is_output;
            for (int c = cstart[v]; c < cstart[v + 1]; c++)
                for (int q = 0; q < m->nodes[cons[c]].n_in; q++)
                    if (m->nodes[cons[c]].in[q] == v) {
                        want w = want_of(&s, cons[c], q);
                        low |= w == W_LOW;
                        f32 |= w == W_F32;
                    }
        }
        if (!low || f32) continue;
        s.node_low[i] = true;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0 && s.f32v[n->out[k]] && !exempt_out(n, k)) s.is_low[n->out[k]] = true;
    }
    if ((st = rewrite(&s, order, cstart, cons, changed))) goto out;
    if ((st = reorder(&s))) goto out;
    drop_unread_initializers(&s);
out:
    free(vt);
    free(s.f32v);
    free(s.is_low);
    free(s.low_of);
    free(s.f32_of);
    free(s.key);
    free(s.c);
    free(s.node_low);
    free(cst);
    free(order);
    free(cstart);
    free(cons);
    free(fill);
    return st;
}
