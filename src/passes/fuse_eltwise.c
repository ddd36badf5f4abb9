/* fuse_eltwise.c — trees of elementwise ops as one kiln.FusedElementwise (FUSED.md).
 *
 * Ops: those whose kiln_op_def has an eltwise description (unary, Clip with constant
 * bounds; binary with two inputs, Sum of two as Add), on one float dtype
 * (operands and result alike; dtypes and ranks from kiln_pass_infer_types, which also
 * knows them under symbolic dims). Nodes are visited from the last: each one not yet
 * taken roots a tree, which grows into the producers of its operands while the value
 * between them has exactly one reader (and is no graph output) and the tree keeps at most
 * 8 distinct inputs. Trees of two ops or more become one node at the root's place (so the
 * order stays topological), with the postfix program of the tree: operands in order,
 * then the op. A constant operand of one element becomes a literal `c<value>` (%.9g, which
 * round-trips f32; %.17g for f64) when dropping its shape cannot change the output's:
 * rank 0, or another input of the tree has a known rank at least its own.
 *
 * An inference BatchNormalization that fold-bn left (its X not a Conv's / Gemm's output:
 * DenseNet's and pre-activation ResNets' BN after a Concat or an Add, a BN1d after a
 * Gemm read by others) is per channel y = x * s[c] + t[c], s = scale / sqrt(var + eps),
 * t = B - mean * s: with its four parameters constants of C elements, it joins a tree as
 * `X i<s> Mul i<t> Add`, s and t new initializers of X's dtype and shape (C, 1, ..., 1)
 * (rank X's - 1, so they broadcast along the channel axis), computed in double and
 * rounded once (as fold-bn rounds the weights it folds into). A BN counts as two ops: it
 * is rewritten even alone, where the fused kernel reads X once at the bandwidth floor.
 * BN -> Relu (and any elementwise op before or after) becomes one kernel.
 *
 * Then a fused node whose program is `i0 i1 Mul i2 Add [Relu]` with i1, i2 per-channel
 * constants (C,1,...,1) and i0 the output of a Concat along the channel axis (axis 1) that
 * nothing else reads (no graph output) becomes kiln.ConcatAffine(s, t, pieces...) relu=0/1
 * (src/ops/concat_affine.c), s and t new f32 (C) initializers: DenseNet's Concat of all
 * earlier features -> BN -> Relu reads the pieces once and writes the activation once,
 * with no Concat. Only on devices with kiln.ConcatAffine's kernel. */
#include "passes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUTS 8
#define MAX_DEPTH 32 /* the op's stack */

typedef struct ctx {
    kiln_model *m;
    int *prod;
    kiln_dtype *dt;
    int *rank;
    kiln_tensor *vt; /* indicative shapes (symbolic dims as 1) */
    int *uses;   /* readers per value (counted once; only ever too high after rewrites) */
    bool *taken; /* node is in some tree already */
    bool *in_tree;
    /* the tree being built */
    int *tree, n_tree;
    int leaves[64], n_leaves; /* distinct non-literal leaves, in program order */
    kiln_dtype tdt;
    /* the program */
    char *prog;
    size_t len, cap;
    int sp, depth;
    bool oom;
    /* inference BNs that may join a tree: C (0: not one), the s / t values once made */
    int64_t *bn_c;
    int *bn_s, *bn_t;
    int nv0; /* values before the pass (the per-value tables' size; BNs add s and t after) */
    int nn0; /* nodes before the pass (bn_c / bn_s / bn_t are indexed by them) */
    bool *bn_param; /* per value: a parameter of a BN made s and t (freed when unread) */
} ctx;

/* The node's elementwise description (kiln_op_def.eltwise), ONNX ops only; NULL if none. */
static const kiln_eltwise *elt(const kiln_node *n) {
    if (n->domain[0] && strcmp(n->domain, "ai.onnx") != 0) return NULL;
    const kiln_op_def *d = kiln_node_def(n);
    return d ? d->eltwise : NULL;
}

/* Operands of an elementwise node: input 0 for unary ops (Clip's bounds are parameters)
 * and for a BN (its s and t are leaves of their own: bn_leaves). */
static int n_operands(const kiln_node *n) {
    const kiln_eltwise *e = elt(n);
    return e && e->arity == 2 ? 2 : 1;
}

static bool is_bn(const ctx *c, int i) { return c->bn_c && c->bn_c[i] > 0; }

/* Leaves a BN node adds beyond X (its s and t): 2, or 0 for any other node. */
static int bn_leaves(const ctx *c, int i) { return i >= 0 && is_bn(c, i) ? 2 : 0; }

/* A BN parameter's constant value: an initializer or Constant, also behind Identity nodes
 * (PyTorch's exporter writes equal tensors once and the others as Identity of it: a fresh
 * densenet121's running means and variances); NULL if not constant. */
static const kiln_tensor *param_constant(const kiln_model *m, const int *prod, int v) {
    for (int hops = 0; v >= 0 && hops < 8; hops++) {
        const int p = prod[v];
        if (p < 0 || !kiln_pass_is(&m->nodes[p], "Identity") || m->nodes[p].n_in < 1) break;
        v = m->nodes[p].in[0];
    }
    return kiln_pass_constant(m, prod, v);
}

/* Whether node i is an inference BatchNormalization that may join a tree (file comment):
 * C, its channel count, or 0. vt: indicative shapes. */
static int64_t bn_channels(const kiln_model *m, const int *prod, const kiln_tensor *vt, int i) {
    const kiln_node *n = &m->nodes[i];
    if (!kiln_pass_is(n, "BatchNormalization") || n->n_in != 5 || n->n_out < 1 || n->out[0] < 0) return 0;
    if (kiln_attr_int(n, "training_mode", 0) != 0 || kiln_node_training_form(n) || kiln_attr_int(n, "relu", 0) != 0 ||
        (n->opset < 9 && kiln_attr_int(n, "spatial", 1) != 1))
        return 0;
    for (int k = 1; k < n->n_out; k++)
        if (n->out[k] >= 0) return 0;
    const kiln_tensor *x = &vt[n->in[0]], *y = &vt[n->out[0]];
    if (n->in[0] < 0 || x->ndim < 2 || !kiln_dtype_is_float(x->dtype) || y->dtype != x->dtype) return 0;
    const int64_t C = x->dims[1];
    if (C < 1) return 0;
    for (int k = 1; k < 5; k++) {
        const kiln_tensor *p = param_constant(m, prod, n->in[k]);
        if (!p || !kiln_dtype_is_float(p->dtype) || kiln_tensor_numel(p) != C) return 0;
    }
    return C;
}

/* BN node i's s and t as initializers (made on the first call); false on OOM. */
static bool bn_make(ctx *c, int i) {
    if (c->bn_s[i] >= 0) return true;
    kiln_model *m = c->m;
    const kiln_node *n = &m->nodes[i];
    const int64_t C = c->bn_c[i];
    const int rank = c->vt[n->in[0]].ndim;
    int64_t dims[KILN_MAX_DIMS];
    dims[0] = C;
    for (int d = 1; d < rank - 1; d++) dims[d] = 1;
    kiln_tensor *s = kiln_tensor_new(m->ctx, c->tdt, rank - 1, dims);
    kiln_tensor *t = kiln_tensor_new(m->ctx, c->tdt, rank - 1, dims);
    if (!s || !t) {
        kiln_tensor_free(s);
        kiln_tensor_free(t);
        return false;
    }
    const kiln_tensor *p[4];
    for (int k = 0; k < 4; k++) p[k] = param_constant(m, c->prod, n->in[1 + k]);
    const double eps = kiln_attr_float(n, "epsilon", 1e-5f);
    for (int64_t ch = 0; ch < C; ch++) {
        const double a = kiln_get_f64(p[0], ch) / sqrt(kiln_get_f64(p[3], ch) + eps);
        kiln_set_f64(s, ch, a);
        kiln_set_f64(t, ch, kiln_get_f64(p[1], ch) - kiln_get_f64(p[2], ch) * a);
    }
    char hint[200];
    snprintf(hint, sizeof hint, "%.180s.bn_s", n->name && n->name[0] ? n->name : "bn");
    const int vs = kiln_pass_add_initializer(m, hint, s);
    snprintf(hint, sizeof hint, "%.180s.bn_t", n->name && n->name[0] ? n->name : "bn");
    const int vt = vs >= 0 ? kiln_pass_add_initializer(m, hint, t) : (kiln_tensor_free(t), -1);
    if (vs < 0 || vt < 0) return false;
    c->bn_s[i] = vs;
    c->bn_t[i] = vt;
    for (int k = 1; k < 5; k++) c->bn_param[n->in[k]] = true;
    return true;
}

/* Clip's bounds, when constants (or attributes before opset 11). */
static bool clip_bounds(const ctx *c, const kiln_node *n, double *lo, double *hi) {
    *lo = -INFINITY;
    *hi = INFINITY;
    if (n->opset < 11) {
        *lo = kiln_attr_float(n, "min", -INFINITY);
        *hi = kiln_attr_float(n, "max", INFINITY);
        return n->n_in == 1;
    }
    for (int k = 1; k < n->n_in; k++) {
        if (n->in[k] < 0) continue;
        const kiln_tensor *t = kiln_pass_constant(c->m, c->prod, n->in[k]);
        if (!t || kiln_tensor_numel(t) != 1 || !kiln_dtype_is_float(t->dtype)) return false;
        *(k == 1 ? lo : hi) = kiln_get_f64(t, 0);
    }
    return true;
}

static bool eligible(const ctx *c, int i) {
    const kiln_node *n = &c->m->nodes[i];
    if (is_bn(c, i)) return true; /* dtypes checked by bn_channels */
    const kiln_eltwise *e = elt(n);
    if (!e || n->n_out != 1 || n->out[0] < 0) return false;
    if ((e->arity == 2 && n->n_in != 2) || (e->arity == 1 && !e->bounds_from_inputs && n->n_in != 1)) return false;
    const kiln_dtype dt = c->dt[n->out[0]];
    if (!kiln_dtype_is_float(dt)) return false;
    for (int k = 0; k < n_operands(n); k++)
        if (n->in[k] < 0 || c->dt[n->in[k]] != dt) return false;
    double lo, hi;
    return !e->bounds_from_inputs || clip_bounds(c, n, &lo, &hi);
}

/* A one-element constant of the tree's dtype, for a literal. */
static const kiln_tensor *scalar_const(const ctx *c, int v) {
    const kiln_tensor *t = kiln_pass_constant(c->m, c->prod, v);
    return t && t->dtype == c->tdt && kiln_tensor_numel(t) == 1 ? t : NULL;
}

static bool internal(const ctx *c, int v) { return c->prod[v] >= 0 && c->in_tree[c->prod[v]]; }

/* Leaves of the tree (plus node extra, -1: none), literal candidates counted apart. */
static int count_inputs(ctx *c, int extra) {
    int seen[64], n = 0, extra_leaves = 0;
    for (int t = 0; t <= c->n_tree; t++) {
        const int i = t < c->n_tree ? c->tree[t] : extra;
        if (i < 0) continue;
        const kiln_node *nd = &c->m->nodes[i];
        for (int k = 0; k < n_operands(nd); k++) {
            const int v = nd->in[k];
            if ((c->prod[v] >= 0 && (c->in_tree[c->prod[v]] || c->prod[v] == extra)) || scalar_const(c, v)) continue;
            bool dup = false;
            for (int j = 0; j < n; j++) dup |= seen[j] == v;
            if (!dup && n < 64) seen[n++] = v;
        }
        extra_leaves += bn_leaves(c, i); /* s and t: the BN's own, never shared */
    }
    return n + extra_leaves;
}

static void emit(ctx *c, const char *fmt, ...) KILN_PRINTF(2, 3);
static void emit(ctx *c, const char *fmt, ...) {
    char tok[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tok, sizeof tok, fmt, ap);
    va_end(ap);
    if (k < 0 || c->oom) return;
    if (c->len + (size_t)k + 2 > c->cap) {
        size_t cap = (c->cap + (size_t)k + 2) * 2;
        char *p = realloc(c->prog, cap);
        if (!p) {
            c->oom = true;
            return;
        }
        c->prog = p;
        c->cap = cap;
    }
    if (c->len) c->prog[c->len++] = ' ';
    memcpy(c->prog + c->len, tok, (size_t)k + 1);
    c->len += (size_t)k;
}

static const char *num_fmt(const ctx *c) { return c->tdt == KILN_F64 ? "%.17g" : "%.9g"; }

static void push(ctx *c) {
    if (++c->sp > c->depth) c->depth = c->sp;
}

/* Whether a one-element constant may be a literal: see the file comment. */
static bool literal_ok(const ctx *c, const kiln_tensor *t) {
    if (t->ndim == 0) return true;
    for (int t2 = 0; t2 < c->n_tree; t2++) {
        const kiln_node *nd = &c->m->nodes[c->tree[t2]];
        for (int k = 0; k < n_operands(nd); k++) {
            const int v = nd->in[k];
            if (!internal(c, v) && !scalar_const(c, v) && c->rank[v] >= t->ndim) return true;
        }
    }
    return false;
}

/* Every leaf is a computed value (not a constant, which may broadcast) with y's indicative
 * shape: the fused node then works position by position, in any memory layout. Marked
 * `same_shape=1` for the layout pass; the CUDA kernel still checks the real shapes. */
static bool same_shape_leaves(const ctx *c, int y) {
    const kiln_tensor *ty = &c->vt[y];
    if (ty->ndim < 0) return false;
    for (int i = 0; i < c->n_leaves; i++) {
        if (c->leaves[i] >= c->nv0 || c->m->values[c->leaves[i]].init) return false; /* a BN's s, t */
        const kiln_tensor *t = &c->vt[c->leaves[i]];
        if (t->ndim != ty->ndim) return false;
        for (int d = 0; d < t->ndim; d++)
            if (t->dims[d] != ty->dims[d]) return false;
    }
    return true;
}

/* Push input value v (a leaf of the tree). */
static void gen_leaf(ctx *c, int v) {
    int k = 0;
    while (k < c->n_leaves && c->leaves[k] != v) k++;
    if (k == c->n_leaves && c->n_leaves < 64) c->leaves[c->n_leaves++] = v;
    emit(c, "i%d", k);
    push(c);
}

/* The postfix program of value v. */
static void gen(ctx *c, int v) {
    if (internal(c, v) && is_bn(c, c->prod[v])) { /* X s Mul t Add */
        const int i = c->prod[v];
        gen(c, c->m->nodes[i].in[0]);
        if (!bn_make(c, i)) {
            c->oom = true;
            return;
        }
        gen_leaf(c, c->bn_s[i]);
        emit(c, "Mul");
        c->sp--;
        gen_leaf(c, c->bn_t[i]);
        emit(c, "Add");
        c->sp--;
        return;
    }
    if (internal(c, v)) {
        const kiln_node *n = &c->m->nodes[c->prod[v]];
        const int ops = n_operands(n);
        for (int k = 0; k < ops; k++) gen(c, n->in[k]);
        char tok[160];
        const char *f = num_fmt(c);
        char a[40] = "", b[40] = "";
        const kiln_eltwise *e = elt(n);
        const char *name = kiln_eltwise_token(kiln_node_def(n));
        if (e->bounds_from_inputs) {
            double lo, hi;
            clip_bounds(c, n, &lo, &hi);
            snprintf(a, sizeof a, f, lo);
            snprintf(b, sizeof b, f, hi);
            snprintf(tok, sizeof tok, "%s@%s@%s", name, a, b);
        } else if (e->n_params > 0) {
            snprintf(a, sizeof a, f, (double)kiln_attr_float(n, e->param_attr[0], e->param_default[0]));
            if (e->n_params > 1) snprintf(b, sizeof b, f, (double)kiln_attr_float(n, e->param_attr[1], e->param_default[1]));
            if (e->n_params > 1) snprintf(tok, sizeof tok, "%s@%s@%s", name, a, b);
            else snprintf(tok, sizeof tok, "%s@%s", name, a);
        } else {
            snprintf(tok, sizeof tok, "%s", name);
        }
        emit(c, "%s", tok);
        c->sp -= ops - 1;
        return;
    }
    const kiln_tensor *t = scalar_const(c, v);
    if (t && literal_ok(c, t)) {
        char num[40];
        snprintf(num, sizeof num, num_fmt(c), kiln_get_f64(t, 0));
        emit(c, "c%s", num);
        push(c);
        return;
    }
    gen_leaf(c, v);
}

/* Grow the tree rooted at node r; rewrite it when it has two ops or more. */
static kiln_status grow_and_fuse(ctx *c, int r, bool *dead, bool *changed) {
    kiln_model *m = c->m;
    c->n_tree = 0;
    c->tree[c->n_tree++] = r;
    c->in_tree[r] = true;
    c->tdt = c->dt[m->nodes[r].out[0]];
    for (int t = 0; t < c->n_tree; t++) {
        const kiln_node *n = &m->nodes[c->tree[t]];
        for (int k = 0; k < n_operands(n); k++) {
            const int v = n->in[k], p = c->prod[v];
            if (p < 0 || c->in_tree[p] || c->taken[p] || dead[p] || c->uses[v] != 1 || !eligible(c, p)) continue;
            if (count_inputs(c, p) > MAX_INPUTS) continue;
            c->tree[c->n_tree++] = p;
            c->in_tree[p] = true;
        }
    }
    for (int t = 0; t < c->n_tree; t++) c->taken[c->tree[t]] = true;
    kiln_status st = KILN_OK;
    if (c->n_tree >= 2 || is_bn(c, r)) {
        c->len = 0;
        c->sp = c->depth = 0;
        c->n_leaves = 0;
        gen(c, m->nodes[r].out[0]);
        if (c->oom) st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a program");
        /* an input count over the limit (a constant kept as an input) or too deep a
         * stack: left unfused */
        if (!st && c->n_leaves >= 1 && c->n_leaves <= MAX_INPUTS && c->depth <= MAX_DEPTH) {
            st = kiln_pass_rewrite(m, r, "kiln", "FusedElementwise", c->n_leaves, c->leaves, NULL);
            if (!st) st = kiln_pass_set_string(m, r, "program", c->prog);
            if (!st && same_shape_leaves(c, m->nodes[r].out[0])) st = kiln_node_set_int(&m->nodes[r], "same_shape", 1);
            if (!st) {
                for (int t = 1; t < c->n_tree; t++) dead[c->tree[t]] = true;
                *changed = true;
            }
        }
    }
    for (int t = 0; t < c->n_tree; t++) c->in_tree[c->tree[t]] = false;
    return st;
}


/* A per-channel constant for a tensor of rank `rank` with C channels: (C,1,...,1) of rank
 * rank - 1; its values as an f32 (C) tensor, or NULL. */
static kiln_tensor *channel_vector(const kiln_model *m, const int *prod, int v, int rank, int64_t C) {
    const kiln_tensor *t = kiln_pass_constant(m, prod, v);
    if (!t || !kiln_dtype_is_float(t->dtype) || t->ndim != rank - 1 || t->ndim < 1 || t->dims[0] != C) return NULL;
    for (int d = 1; d < t->ndim; d++)
        if (t->dims[d] != 1) return NULL;
    kiln_tensor *o = kiln_tensor_new(m->ctx, KILN_F32, 1, &C);
    for (int64_t c = 0; o && c < C; c++) kiln_set_f64(o, c, kiln_get_f64(t, c));
    return o;
}

/* Concat(axis 1) -> FusedElementwise "i0 i1 Mul i2 Add [Relu]" as one kiln.ConcatAffine
 * (file comment). vt: indicative shapes of the values before the pass (nv0 of them). */
static kiln_status concat_affine(kiln_model *m, const kiln_tensor *vt, int nv0, bool *changed) {
    int *prod = kiln_pass_producers(m);
    bool *dead = kiln_calloc(m->ctx, (size_t)m->n_nodes + 1, sizeof *dead, "a pass");
    kiln_status st = prod && dead ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < m->n_nodes && !st; i++) {
        const kiln_node *f = &m->nodes[i];
        if (!kiln_pass_is_kiln(f, "FusedElementwise") || f->n_in != 3 || f->n_out != 1) continue;
        const char *prog = kiln_attr_string(f, "program", "");
        const bool relu = strcmp(prog, "i0 i1 Mul i2 Add Relu") == 0;
        if (!relu && strcmp(prog, "i0 i1 Mul i2 Add") != 0) continue;
        const int x = f->in[0], ci = x >= 0 ? prod[x] : -1;
        /* op-pattern: Concat -> per-channel affine */
        if (ci < 0 || dead[ci] || !kiln_pass_is(&m->nodes[ci], "Concat") || x >= nv0 || vt[x].ndim < 2 ||
            kiln_pass_single_consumer(m, x) != i || kiln_pass_uses(m, x) != 1)
            continue;
        const kiln_node *cat = &m->nodes[ci];
        int64_t axis = kiln_attr_int(cat, "axis", 0);
        const int rank = vt[x].ndim;
        if (axis < 0) axis += rank;
        const int64_t C = vt[x].dims[1];
        bool ok = axis == 1 && cat->n_in >= 1 && cat->n_in <= 256 && C > 0 && cat->n_out == 1;
        for (int k = 0; ok && k < cat->n_in; k++) ok = cat->in[k] >= 0;
        if (!ok) continue;
        kiln_tensor *s = channel_vector(m, prod, f->in[1], rank, C), *t = channel_vector(m, prod, f->in[2], rank, C);
        if (!s || !t) {
            kiln_tensor_free(s);
            kiln_tensor_free(t);
            continue;
        }
        char hint[200];
        snprintf(hint, sizeof hint, "%.180s.s", f->name && f->name[0] ? f->name : "concat_affine");
        const int vs = kiln_pass_add_initializer(m, hint, s);
        snprintf(hint, sizeof hint, "%.180s.t", f->name && f->name[0] ? f->name : "concat_affine");
        const int vtt = vs >= 0 ? kiln_pass_add_initializer(m, hint, t) : (kiln_tensor_free(t), -1);
        const int n_in = 2 + m->nodes[ci].n_in;
        int *ins = kiln_calloc(m->ctx, (size_t)n_in, sizeof *ins, "a pass");
        if (vs < 0 || vtt < 0 || !ins) {
            free(ins);
            st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory fusing a Concat");
            break;
        }
        const int old_s = m->nodes[i].in[1], old_t = m->nodes[i].in[2];
        ins[0] = vs;
        ins[1] = vtt;
        memcpy(ins + 2, m->nodes[ci].in, (size_t)m->nodes[ci].n_in * sizeof *ins);
        st = kiln_pass_rewrite(m, i, "kiln", "ConcatAffine", n_in, ins, NULL);
        free(ins);
        if (!st) st = kiln_pass_set_int(m, i, "relu", relu ? 1 : 0);
        if (st) break;
        dead[ci] = true;
        *changed = true;
        kiln_pass_drop_if_unused(m, old_s);
        kiln_pass_drop_if_unused(m, old_t);
    }
    if (!st) kiln_pass_remove_nodes(m, dead);
    free(prod);
    free(dead);
    return st;
}

kiln_status kiln_pass_fuse_eltwise(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    if (!kiln_pass_device_has(o, "FusedElementwise")) return KILN_OK;
    const size_t nv = (size_t)m->n_values + 1, nn = (size_t)m->n_nodes + 1;
    ctx c = {.m = m, .nv0 = m->n_values, .nn0 = m->n_nodes};
    c.prod = kiln_pass_producers(m);
    c.dt = kiln_calloc(m->ctx, nv, sizeof *c.dt, "a pass");
    c.rank = kiln_calloc(m->ctx, nv, sizeof *c.rank, "a pass");
    c.uses = kiln_calloc(m->ctx, nv, sizeof *c.uses, "a pass");
    c.taken = kiln_calloc(m->ctx, nn, sizeof *c.taken, "a pass");
    c.in_tree = kiln_calloc(m->ctx, nn, sizeof *c.in_tree, "a pass");
    c.tree = kiln_calloc(m->ctx, nn, sizeof *c.tree, "a pass");
    c.bn_c = kiln_calloc(m->ctx, nn, sizeof *c.bn_c, "a pass");
    c.bn_s = kiln_calloc(m->ctx, nn, sizeof *c.bn_s, "a pass");
    c.bn_t = kiln_calloc(m->ctx, nn, sizeof *c.bn_t, "a pass");
    c.bn_param = kiln_calloc(m->ctx, nv, sizeof *c.bn_param, "a pass");
    bool *dead = kiln_calloc(m->ctx, nn, sizeof *dead, "a pass");
    kiln_status st = KILN_OK;
    if (!c.bn_c || !c.bn_s || !c.bn_t || !c.bn_param || !c.prod || !c.dt || !c.rank || !c.uses || !c.taken || !c.in_tree || !c.tree || !dead) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    if ((st = kiln_pass_infer_types(m, &c.vt))) goto out;
    for (int v = 0; v < m->n_values; v++) {
        c.dt[v] = c.vt[v].dtype;
        c.rank[v] = c.vt[v].ndim;
    }
    for (int i = 0; i < m->n_nodes; i++) {
        c.bn_c[i] = bn_channels(m, c.prod, c.vt, i);
        c.bn_s[i] = c.bn_t[i] = -1;
    }
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_in; k++)
            if (m->nodes[i].in[k] >= 0) c.uses[m->nodes[i].in[k]]++;
    for (int i = 0; i < m->n_outputs; i++) c.uses[m->outputs[i]]++;
    for (int r = m->n_nodes - 1; r >= 0 && !st; r--)
        if (!c.taken[r] && eligible(&c, r)) st = grow_and_fuse(&c, r, dead, changed);
    if (!st) kiln_pass_remove_nodes(m, dead);
    /* Identity nodes that only gave fused BNs their parameters (param_constant) */
    for (bool again = !st; again;) { /* (chains of them: one link a round) */
        again = false;
        memset(dead, 0, nn * sizeof *dead);
        for (int i = 0; i < m->n_nodes; i++) {
            const kiln_node *n = &m->nodes[i];
            const int v = n->n_out == 1 ? n->out[0] : -1;
            if (v < 0 || v >= c.nv0 || !c.bn_param[v] || !kiln_pass_is(n, "Identity") || n->n_in < 1 || kiln_pass_uses(m, v))
                continue;
            dead[i] = again = true;
            if (n->in[0] >= 0 && n->in[0] < c.nv0) c.bn_param[n->in[0]] = true;
        }
        kiln_pass_remove_nodes(m, dead);
    }
    /* the fused BNs' parameters, and any s, t left unread (a tree over the input limit) */
    for (int i = 0; !st && i < c.nn0; i++) {
        if (c.bn_s[i] < 0) continue;
        kiln_pass_drop_if_unused(m, c.bn_s[i]);
        kiln_pass_drop_if_unused(m, c.bn_t[i]);
    }
    for (int v = 0; !st && v < c.nv0; v++)
        if (c.bn_param[v]) kiln_pass_drop_if_unused(m, v);
    if (!st) st = kiln_pass_drop_unread_constants(m, changed);
    if (!st && kiln_pass_device_has(o, "ConcatAffine")) st = concat_affine(m, c.vt, c.nv0, changed);
out:
    free(c.prod);
    free(c.dt);
    free(c.rank);
    free(c.vt);
    free(c.uses);
    free(c.taken);
    free(c.in_tree);
    free(c.tree);
    free(c.bn_c);
    free(c.bn_s);
    free(c.bn_t);
    free(c.bn_param);
    free(c.prog);
    free(dead);
    return st;
}
