/* fuse_conv.c — convolutions and Gemms with their epilogues as one op (FUSED.md):
 * (Add below also means a Sum of two inputs.)
 *   1. Conv + Add of a per-channel constant (a bias some exporters write as a separate
 *      Add: shape (M), (M,1,1), (1,M,1,1)... or one element) -> Conv with that bias added
 *      to its own;
 *   2. Conv [+ Add(residual)] [+ activation] -> kiln.FusedConv(X, W, B, Z), where the
 *      residual Z is the Add's other operand and must have exactly the conv output's
 *      shape: the shapes static inference stored, or, with a symbolic batch, the same
 *      shape under two probe values of the symbolic dims (kiln_pass_same_shape);
 *   3. Gemm + activation -> kiln.FusedGemm; also Gemm -> view (Reshape, Flatten...) ->
 *      activation (stage 0's Linear: the activation moves before the view, which then
 *      writes the activation's output). Unless KILN_PASS_GEMM_RESIDUAL is disabled, a Gemm
 *      with no activation after it, C absent or a constant row with beta 1, [-> view] ->
 *      Add of a Z of the Add's other operand's shape -> kiln.FusedGemm(A, B, C, Z) (behind
 *      a view Z as Flatten(Z), the product's rows; the view writes the Add's output): an
 *      attention's out-projection and the residual after it. Behind the view also a
 *      Transpose (ConvNeXt's permute back to NCHW, its layer scale folded by fold-scale):
 *      Z joins as Flatten(Transpose(Z, the inverse perm)) and the Transpose writes the sum.
 *   0. (first) MatMul(X (..., K), W (K, N) constant) + Add of a constant bias (N), a
 *      transformer's Linear -> Flatten(X) (rows, K) -> Gemm(., W, bias) -> Reshape back to
 *      (..., N): the bias rides on the product's epilogue (cuBLASLt's BIAS) instead of a
 *      pass over the product; Flatten and Reshape are views. Needs X's dims but the last
 *      known except at most one (the Reshape's -1: a symbolic batch). Where the device has
 *      kiln.FusedGemm and the Linear's result is read only by an Add of a Z of its shape (a
 *      transformer's residual): Flatten(Z) joins the product as its fourth input and the
 *      Reshape writes the Add's output (on CUDA, cuBLASLt's C with beta 1: the sum written
 *      once instead of the product, then the Add reading two and writing one).
 * Activations: Relu, LeakyRelu, Clip (constant bounds), Sigmoid, HardSwish, HardSigmoid,
 * Tanh; and, unless KILN_PASS_FUSE_SILU_GELU is disabled, "Silu" from x * Sigmoid(x)
 * (Sigmoid(x) -> Mul(x, s), either operand order: the value x is read by exactly those two
 * nodes, s by the Mul alone) and "Gelu" / "GeluTanh" from ONNX's Gelu (opset 20) or
 * Gelu's erf form as torch.onnx writes it (Div(x, sqrt 2) or Mul(x, 1/sqrt 2) -> Erf -> Add 1
 * -> Mul x -> Mul 0.5, the three factors x, 1 + erf, 0.5 multiplied in any order and
 * grouping; the constants one-element, sqrt 2 within 1e-6 relative in f32, 1e-3 in f16 /
 * bf16, 1e-12 in f64).
 * Every intermediate value must have a single reader and not be a graph output. The
 * fused node takes the place of the chain's last node, so the order stays topological
 * (a residual may be computed after the conv, but always before the Add). Fusions into
 * internal ops happen only on devices that have their kernels (kiln_pass_device_has). */
#include "passes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An activation node in the form the fused ops take it. */
typedef struct act_attrs {
    char name[16];
    double alpha, beta, lo, hi;
} act_attrs;

/* Whether node a is one of the activations with constant parameters; fills *out. */
static bool get_activation(const kiln_model *m, const int *prod, const kiln_node *a, act_attrs *out) {
    const kiln_op_def *d = kiln_pass_is(a, a->op_type) ? kiln_node_def(a) : NULL; /* ONNX ops */
    const kiln_eltwise *e = d ? d->eltwise : NULL;
    if (!e || !e->conv_epilogue || a->n_out != 1 || a->n_in < 1) return false;
    snprintf(out->name, sizeof out->name, "%s", a->op_type);
    out->alpha = e->n_params > 0 && !e->bounds_from_inputs ? kiln_attr_float(a, e->param_attr[0], e->param_default[0]) : 0.01f;
    out->beta = e->n_params > 1 && !e->bounds_from_inputs ? kiln_attr_float(a, e->param_attr[1], e->param_default[1]) : 0.5f;
    out->lo = -INFINITY;
    out->hi = INFINITY;
    if (!e->bounds_from_inputs) return a->n_in == 1;
    if (a->opset < 11) {
        out->lo = kiln_attr_float(a, "min", -INFINITY);
        out->hi = kiln_attr_float(a, "max", INFINITY);
        return a->n_in == 1;
    }
    for (int k = 1; k < a->n_in; k++) {
        if (a->in[k] < 0) continue;
        const kiln_tensor *t = kiln_pass_constant(m, prod, a->in[k]);
        if (!t || kiln_tensor_numel(t) != 1 || !kiln_dtype_is_float(t->dtype)) return false;
        *(k == 1 ? &out->lo : &out->hi) = kiln_get_f64(t, 0);
    }
    return true;
}

/* ---------------------------------------- Silu and Gelu: activations of several nodes */

/* Whether node n is a default-domain op_type with n_in inputs and one output. */
static bool is_op(const kiln_node *n, const char *op_type, int n_in) {
    return kiln_pass_is(n, op_type) && n->n_in == n_in && n->n_out == 1;
}

/* When v has exactly two reads (graph outputs count; a node reading v twice counts twice)
 * by two different nodes: those nodes in r[0], r[1] and true. */
static bool two_readers(const kiln_model *m, int v, int *r) {
    if (v < 0 || kiln_pass_uses(m, v) != 2) return false;
    int n = 0;
    for (int i = 0; i < m->n_nodes && n < 2; i++)
        for (int k = 0; k < m->nodes[i].n_in; k++)
            if (m->nodes[i].in[k] == v) {
                if (n == 1 && r[0] == i) return false;
                r[n++] = i;
                break;
            }
    return n == 2;
}

/* Whether v is a one-element float constant equal to want (relative tolerance 1e-6 in f32,
 * 1e-3 in f16 / bf16: the exporter rounded it to the dtype; 1e-12 in f64). */
static bool const_near(const kiln_model *m, const int *prod, int v, double want) {
    const kiln_tensor *t = kiln_pass_constant(m, prod, v);
    if (!t || kiln_tensor_numel(t) != 1 || !kiln_dtype_is_float(t->dtype)) return false;
    const double tol = t->dtype == KILN_F16 || t->dtype == KILN_BF16 ? 1e-3 : t->dtype == KILN_F64 ? 1e-12 : 1e-6;
    return fabs(kiln_get_f64(t, 0) - want) <= tol * fabs(want);
}

/* For a two-input node n reading v: its other input (-1 when v is not an input, or both are). */
static int other_input(const kiln_node *n, int v) {
    if (n->n_in != 2 || n->in[0] == n->in[1]) return -1;
    return n->in[0] == v ? n->in[1] : n->in[1] == v ? n->in[0] : -1;
}

/* Silu or Gelu applied to x (read only by the nodes of the pattern; dead: nodes already
 * taken): the pattern's last node, its other nodes in chain[] (*n_chain of them, up to 4)
 * and the activation's name in out; -1 when x does not start one. */
static int match_smooth(const kiln_model *m, const int *prod, const bool *dead, int x, act_attrs *out, int *chain,
                        int *n_chain) {
    *n_chain = 0;
    memset(out, 0, sizeof *out);
    out->lo = -INFINITY;
    out->hi = INFINITY;
    /* Gelu (opset 20), the single reader */
    const int g = kiln_pass_single_consumer(m, x);
    if (g >= 0 && !dead[g] && is_op(&m->nodes[g], "Gelu", 1)) { /* op-pattern: Gelu */
        const char *ap = kiln_attr_string(&m->nodes[g], "approximate", "none");
        if (strcmp(ap, "none") && strcmp(ap, "tanh")) return -1;
        snprintf(out->name, sizeof out->name, "%s", strcmp(ap, "tanh") ? "Gelu" : "GeluTanh");
        return g;
    }
    /* two readers of x */
    int rd[2];
    if (!two_readers(m, x, rd) || dead[rd[0]] || dead[rd[1]]) return -1;
    const int r0 = rd[0], r1 = rd[1];
    /* Silu: Sigmoid(x) -> s; Mul(x, s) or Mul(s, x) */
    for (int k = 0; k < 2; k++) { /* op-pattern: Sigmoid + Mul */
        const int si = k ? r1 : r0, mu = k ? r0 : r1;
        const kiln_node *sn = &m->nodes[si], *mn = &m->nodes[mu];
        if (!is_op(sn, "Sigmoid", 1) || !is_op(mn, "Mul", 2)) /* op-pattern */
            continue;
        const int sv = sn->out[0];
        if (other_input(mn, x) != sv || kiln_pass_uses(m, sv) != 1) return -1;
        snprintf(out->name, sizeof out->name, "Silu");
        chain[(*n_chain)++] = si;
        return mu;
    }
    /* Gelu's erf form: d = x / sqrt2 (or x * (1/sqrt2)); e = Erf(d); a = e + 1 */
    for (int k = 0; k < 2; k++) { /* op-pattern: Div + Erf + Add + Mul + Mul */
        const int di = k ? r1 : r0, pi = k ? r0 : r1;
        const kiln_node *dn = &m->nodes[di];
        const bool div = is_op(dn, "Div", 2) && dn->in[0] == x && dn->in[1] != x;
        const bool mul = is_op(dn, "Mul", 2) && other_input(dn, x) >= 0;
        if (!(div && const_near(m, prod, dn->in[1], sqrt(2.0))) &&
            !(mul && const_near(m, prod, other_input(dn, x), sqrt(0.5))))
            continue;
        const int ei = kiln_pass_single_consumer(m, dn->out[0]);
        if (ei < 0 || dead[ei] || !is_op(&m->nodes[ei], "Erf", 1)) return -1;
        const int ai = kiln_pass_single_consumer(m, m->nodes[ei].out[0]);
        if (ai < 0 || dead[ai] || !is_op(&m->nodes[ai], "Add", 2) ||
            !const_near(m, prod, other_input(&m->nodes[ai], m->nodes[ei].out[0]), 1.0))
            return -1;
        const int a = m->nodes[ai].out[0];
        /* the factors x, a and 0.5 in two Muls: pi is the other reader of x */
        const kiln_node *pn = &m->nodes[pi];
        const int ri = kiln_pass_single_consumer(m, a); /* the Mul reading a */
        if (!is_op(pn, "Mul", 2) || ri < 0 || dead[ri] || !is_op(&m->nodes[ri], "Mul", 2)) /* op-pattern */
            return -1;
        const int pv = pn->out[0], rv = m->nodes[ri].out[0];
        int last = -1, mid = -1;
        if (ri == pi) { /* (x * a) * 0.5 */
            const int f = kiln_pass_single_consumer(m, pv);
            if (f >= 0 && !dead[f] && is_op(&m->nodes[f], "Mul", 2) && const_near(m, prod, other_input(&m->nodes[f], pv), 0.5))
                last = f, mid = pi;
        } else if (const_near(m, prod, other_input(pn, x), 0.5)) { /* (x * 0.5) * a */
            if (other_input(&m->nodes[ri], a) == pv && kiln_pass_uses(m, pv) == 1) last = ri, mid = pi;
        } else if (other_input(pn, x) == rv && const_near(m, prod, other_input(&m->nodes[ri], a), 0.5) &&
                   kiln_pass_uses(m, rv) == 1) { /* x * (a * 0.5) */
            last = pi, mid = ri;
        }
        if (last < 0 || dead[last]) return -1;
        chain[(*n_chain)++] = di;
        chain[(*n_chain)++] = ei;
        chain[(*n_chain)++] = ai;
        chain[(*n_chain)++] = mid;
        snprintf(out->name, sizeof out->name, "Gelu");
        return last;
    }
    return -1;
}

static bool is_smooth(const char *name) {
    return !strcmp(name, "Silu") || !strcmp(name, "Gelu") || !strcmp(name, "GeluTanh");
}

static kiln_status set_activation(kiln_model *m, int i, const act_attrs *a, bool gemm) {
    kiln_status st = kiln_pass_set_string(m, i, "activation", a->name);
    if (is_smooth(a->name)) return st; /* no parameters */
    const kiln_op_def *d = kiln_op_find(a->name);
    const kiln_eltwise *e = d ? d->eltwise : NULL;
    const char *an = gemm ? "act_alpha" : "alpha", *bn = gemm ? "act_beta" : "beta";
    if (!e) return st ? st : kiln_fail(m->ctx, KILN_ERR_INTERNAL, "activation %s is not elementwise", a->name);
    if (!st && e->bounds_from_inputs) {
        st = kiln_pass_set_float(m, i, "act_min", (float)a->lo);
        if (!st) st = kiln_pass_set_float(m, i, "act_max", (float)a->hi);
        return st;
    }
    if (!st && e->n_params > 0) st = kiln_pass_set_float(m, i, an, (float)a->alpha);
    if (!st && e->n_params > 1) st = kiln_pass_set_float(m, i, bn, (float)a->beta);
    return st;
}
/* Add, or Sum of two inputs (Caffe2-converted ResNets write their residuals so). */
static bool is_add(const kiln_node *n) {
    const char *tok = kiln_pass_is(n, n->op_type) ? kiln_eltwise_token(kiln_node_def(n)) : NULL;
    return tok && strcmp(tok, "Add") == 0 && n->n_in == 2 && n->n_out == 1;
}

/* Stage 1: Conv ci followed by Add of a per-channel constant. */
static kiln_status absorb_bias(kiln_model *m, int *prod, int ci, bool *dead, bool *done) {
    *done = false;
    const kiln_node *cv = &m->nodes[ci];
    const int y = cv->out[0], r = kiln_pass_single_consumer(m, y);
    if (r < 0 || dead[r] || !is_add(&m->nodes[r])) return KILN_OK;
    const kiln_node *add = &m->nodes[r];
    const int other = add->in[0] == y ? add->in[1] : add->in[0];
    const kiln_tensor *c = kiln_pass_constant(m, prod, other);
    const int wv = cv->n_in > 1 ? cv->in[1] : -1;
    if (!c || other == y || wv < 0) return KILN_OK;
    /* M and the output rank from W: (M, C/group, k...) */
    const kiln_value *w = &m->values[wv];
    const kiln_tensor *wt = w->init;
    const int rank = wt ? wt->ndim : w->ndim;
    const int64_t M = rank > 0 ? (wt ? wt->dims[0] : w->dims[0]) : -1;
    const kiln_dtype dt = wt ? wt->dtype : w->dtype;
    if (M < 1 || rank < 3 || c->dtype != dt || c->ndim > rank) return KILN_OK;
    /* every dim of c is 1 but the one aligned with the channel dim (1), which is 1 or M */
    for (int j = 0; j < c->ndim; j++) {
        const bool channel = rank - c->ndim + j == 1;
        if (!(c->dims[j] == 1 || (channel && c->dims[j] == M))) return KILN_OK;
    }
    const int bias_v = cv->n_in > 2 ? cv->in[2] : -1;
    const kiln_tensor *b = kiln_pass_constant(m, prod, bias_v);
    if (bias_v >= 0 && (!b || kiln_tensor_numel(b) != M)) return KILN_OK;
    kiln_tensor *nb = kiln_tensor_new(m->ctx, dt, 1, &M);
    if (!nb) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a bias");
    const bool per_channel = kiln_tensor_numel(c) == M && M > 1;
    for (int64_t k = 0; k < M; k++)
        kiln_set_f64(nb, k, (b ? kiln_get_f64(b, k) : 0.0) + kiln_get_f64(c, per_channel ? k : 0));
    char hint[200];
    snprintf(hint, sizeof hint, "%s.bias", m->nodes[ci].name);
    const int nv = kiln_pass_add_initializer(m, hint, nb);
    if (nv < 0) return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = kiln_pass_set_input(m, ci, 2, nv);
    if (st) return st;
    const int out = m->nodes[r].out[0];
    m->nodes[ci].out[0] = out;
    prod[out] = ci;
    dead[r] = true;
    *done = true;
    return KILN_OK;
}

static bool same_known_shape(const kiln_value *a, const kiln_value *b) {
    if (a->ndim < 0 || a->ndim != b->ndim || !a->dtype || a->dtype != b->dtype) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] < 0 || a->dims[d] != b->dims[d]) return false;
    return true;
}

/* An ONNX op whose one output is its input 0's elements in the same order (a view that
 * may share its storage: Reshape, Flatten, Squeeze...): an elementwise op commutes with it. */
static bool is_view(const kiln_node *n) {
    const kiln_op_def *d = kiln_pass_is(n, n->op_type) ? kiln_node_def(n) : NULL; /* ONNX ops */
    return d && (d->alias_outputs & 1u) && n->n_in >= 1 && n->n_out == 1;
}

/* Stage 3's residual: Gemm ci (2-D, C absent or a constant row with beta 1) -> [a view] ->
 * Add(., Z) with Z of the Add's other operand's shape -> FusedGemm(A, B, C, Z') where Z' is
 * Z, or Flatten(Z) to the product's (rows, N) behind a view (a projection's Reshape back to
 * (..., N), after attention-rows the out-projection's); the view then writes the Add's
 * output. *appended: a Flatten was added (the caller sorts). */
static kiln_status gemm_residual(kiln_model *m, const int *prod, const kiln_shape_probes *probes, int ci, bool *dead,
                                 bool *done, bool *appended) {
    const kiln_node *g = &m->nodes[ci];
    const int y = g->out[0];
    if (g->n_in < 2 || g->in[0] < 0 || g->in[1] < 0 || y < 0) return KILN_OK;
    const kiln_tensor *w = kiln_pass_constant_through(m, prod, g->in[1]);
    const int cvi = kiln_pass_opt_in(g, 2);
    const kiln_tensor *c = cvi >= 0 ? kiln_pass_constant_through(m, prod, cvi) : NULL;
    if (!w || w->ndim != 2 || (cvi >= 0 && !c) || kiln_attr_int(g, "transA", 0) != 0) return KILN_OK;
    const int64_t n = kiln_attr_int(g, "transB", 0) ? w->dims[0] : w->dims[1];
    if (c && !((c->ndim == 1 && c->dims[0] == n) || (c->ndim == 2 && c->dims[0] == 1 && c->dims[1] == n))) return KILN_OK;
    if (c && kiln_attr_float(g, "beta", 1.0f) != 1.0f) return KILN_OK;
    int r = kiln_pass_single_consumer(m, y), view = -1, yv = y;
    if (r >= 0 && !dead[r] && is_view(&m->nodes[r]) && m->nodes[r].in[0] == y) {
        view = r;
        yv = m->nodes[r].out[0];
        r = kiln_pass_single_consumer(m, yv);
    }
    /* after the view, a Transpose (ConvNeXt's permute back to NCHW before its residual): Z
     * moves back through it (a Transpose of Z by the inverse perm, a view where the layout
     * pass stores both alike) and the Transpose writes the Add's output */
    int tr = -1, ya = yv, np = 0;
    const int64_t *perm = NULL;
    if (view >= 0 && r >= 0 && !dead[r] && kiln_pass_is(&m->nodes[r], "Transpose") && m->nodes[r].n_in == 1 &&
        m->nodes[r].n_out == 1 && m->nodes[r].in[0] == yv && probes && yv < probes->n &&
        (perm = kiln_attr_ints(&m->nodes[r], "perm", &np)) != NULL && np == probes->one[yv].ndim && np <= KILN_MAX_DIMS) {
        tr = r;
        ya = m->nodes[r].out[0];
        r = kiln_pass_single_consumer(m, ya);
    }
    if (r < 0 || dead[r] || !is_add(&m->nodes[r])) return KILN_OK;
    const kiln_node *a = &m->nodes[r];
    const int z = a->in[0] == ya ? a->in[1] : a->in[0];
    if (z < 0 || z == ya || !(same_known_shape(&m->values[z], &m->values[ya]) || (probes && kiln_pass_same_shape(probes, z, ya))))
        return KILN_OK;
    const int out = a->out[0];
    int zin = z;
    if (tr >= 0) {
        /* Z' = Transpose(Z, perm^-1): Z' dim i is Z's dim inv[i]; its last must be N */
        int64_t inv[KILN_MAX_DIMS];
        for (int i = 0; i < np; i++) inv[i] = -1;
        for (int i = 0; i < np; i++) {
            if (perm[i] < 0 || perm[i] >= np || inv[perm[i]] >= 0) return KILN_OK;
            inv[perm[i]] = i;
        }
        if (z >= probes->n || probes->one[z].ndim != np || probes->one[z].dims[inv[np - 1]] != n) return KILN_OK;
        char hint[220], at[200];
        int len = snprintf(at, sizeof at, "perm=[");
        for (int i = 0; i < np; i++) len += snprintf(at + len, sizeof at - (size_t)len, "%s%lld", i ? "," : "", (long long)inv[i]);
        snprintf(at + len, sizeof at - (size_t)len, "]");
        snprintf(hint, sizeof hint, "%.150s_back", m->values[z].name);
        zin = kiln_pass_new_value(m, hint);
        if (zin < 0) return KILN_ERR_OUT_OF_MEMORY;
        m->values[zin].dtype = m->values[y].dtype;
        snprintf(hint, sizeof hint, "%.150s_back", m->nodes[r].name);
        /* op-pattern: the residual moved back through the Transpose */
        if (kiln_pass_append_node(m, "Transpose", hint, 1, &z, zin, at, 13) < 0)
            return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a node");
        *appended = true;
    }
    if (view >= 0) {
        /* Flatten(Z) to (rows, N): Z's last dim must be N (checked above through a Transpose) */
        if (tr < 0 &&
            (!probes || z >= probes->n || probes->one[z].ndim < 1 || probes->one[z].dims[probes->one[z].ndim - 1] != n))
            return KILN_OK;
        const int rz = probes->one[z].ndim, zsrc = zin; /* Z, or Z moved back through the Transpose */
        char hint[220], at[32];
        snprintf(hint, sizeof hint, "%.150s_rows", m->values[z].name);
        zin = kiln_pass_new_value(m, hint);
        if (zin < 0) return KILN_ERR_OUT_OF_MEMORY;
        m->values[zin].dtype = m->values[y].dtype;
        kiln_attr *fa = NULL;
        int nfa = 0;
        snprintf(at, sizeof at, "axis=%d", rz - 1);
        kiln_status st = kiln_attrs_parse(m->ctx, at, &fa, &nfa);
        if (st) return st;
        snprintf(hint, sizeof hint, "%.150s_rows", m->nodes[r].name);
        /* op-pattern: the residual's rows */
        const int f = kiln_model_add_node_raw(m, "Flatten", hint, "", 1, &zsrc, 1, &zin, nfa, fa);
        if (f < 0) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a node");
        m->nodes[f].opset = 13;
        *appended = true;
    }
    g = &m->nodes[ci];
    const int in4[4] = {g->in[0], g->in[1], cvi, zin};
    /* op-pattern: Gemm [-> view] -> Add -> FusedGemm(A, B, C, Z) [-> view] */
    kiln_status st = kiln_pass_rewrite(m, ci, "kiln", "FusedGemm", 4, in4, g);
    if (st) return st;
    if (tr >= 0) st = kiln_pass_set_output(m, tr, 0, out);
    else if (view >= 0) st = kiln_pass_set_output(m, view, 0, out);
    else st = kiln_pass_set_output(m, ci, 0, out);
    dead[r] = true;
    *done = !st;
    return st;
}

/* Stages 2 and 3 from Conv / Gemm node ci. */
static kiln_status fuse_chain(kiln_model *m, const int *prod, const kiln_shape_probes *probes, int ci, bool gemm,
                              bool smooth, bool *dead, bool *done) {
    *done = false;
    const kiln_node *cv = &m->nodes[ci];
    int y = cv->out[0], last = ci, add = -1, resid = -1;
    act_attrs act = {{0}, 0, 0, 0, 0};
    int r = kiln_pass_single_consumer(m, y);
    if (!gemm && r >= 0 && !dead[r] && is_add(&m->nodes[r])) {
        const kiln_node *a = &m->nodes[r];
        const int z = a->in[0] == y ? a->in[1] : a->in[0];
        if (z >= 0 && z != y &&
            (same_known_shape(&m->values[z], &m->values[y]) || (probes && kiln_pass_same_shape(probes, z, y)))) {
            resid = z;
            add = last = r;
            y = a->out[0];
            r = kiln_pass_single_consumer(m, y);
        }
    }
    int chain[4], n_chain = 0;
    const int reader = r;
    if (r >= 0 && !dead[r] && get_activation(m, prod, &m->nodes[r], &act)) last = r;
    else if (smooth && kiln_pass_uses(m, y) > 0 && (r = match_smooth(m, prod, dead, y, &act, chain, &n_chain)) >= 0)
        last = r;
    /* a Gemm read through a view (stage 0's Reshape back to (..., N), a Flatten...) whose
     * result alone the activation reads: the activation moves before the view (elementwise,
     * it commutes with it), the view then writes the activation's output */
    int view = -1;
    if (gemm && last == ci && reader >= 0 && !dead[reader] && is_view(&m->nodes[reader]) &&
        m->nodes[reader].in[0] == y) {
        const int y2 = m->nodes[reader].out[0];
        int r2 = kiln_pass_single_consumer(m, y2);
        if (r2 >= 0 && !dead[r2] && get_activation(m, prod, &m->nodes[r2], &act)) last = r2;
        else if (smooth && kiln_pass_uses(m, y2) > 0 &&
                 (r2 = match_smooth(m, prod, dead, y2, &act, chain, &n_chain)) >= 0)
            last = r2;
        if (last != ci) view = reader;
    }
    if (last == ci) return KILN_OK;
    if (view >= 0) {
        /* the product becomes the fused op where it is; the view takes the chain's output */
        const int in3[3] = {cv->in[0], cv->n_in > 1 ? cv->in[1] : -1, cv->n_in > 2 ? cv->in[2] : -1};
        kiln_status st = kiln_pass_rewrite(m, ci, "kiln", "FusedGemm", cv->n_in < 3 ? cv->n_in : 3, in3, cv);
        if (!st) st = set_activation(m, ci, &act, true);
        if (!st) st = kiln_pass_set_output(m, view, 0, m->nodes[last].out[0]);
        if (st) return st;
        dead[last] = true;
        for (int k = 0; k < n_chain; k++) dead[chain[k]] = true;
        *done = true;
        return KILN_OK;
    }
    /* inputs: Conv's X, W, B (-1 when absent), then Z; Gemm's A, B, C */
    int in[4] = {-1, -1, -1, resid};
    for (int k = 0; k < cv->n_in && k < 3; k++) in[k] = cv->in[k];
    const int n_in = resid >= 0 ? 4 : cv->n_in < 3 ? cv->n_in : 3;
    char *name = kiln_strdup(m->ctx, cv->name);
    if (!name) return KILN_ERR_OUT_OF_MEMORY;
    /* the fused node sits where the chain's last node was and keeps its output */
    /* op-pattern: Conv -> FusedConv, Gemm -> FusedGemm */
    kiln_status st = kiln_pass_rewrite(m, last, "kiln", gemm ? "FusedGemm" : "FusedConv", n_in, in, cv);
    if (!st && act.name[0]) st = set_activation(m, last, &act, gemm);
    if (st) {
        free(name);
        return st;
    }
    free(m->nodes[last].name);
    m->nodes[last].name = name;
    m->nodes[last].opset = m->nodes[ci].opset;
    dead[ci] = true;
    if (add >= 0 && add != last) dead[add] = true;
    for (int k = 0; k < n_chain; k++) dead[chain[k]] = true;
    *done = true;
    return KILN_OK;
}

/* Stage 0 on MatMul node i (see the top). New nodes are appended: the caller sorts. */
static kiln_status matmul_bias(kiln_model *m, const int *prod, const kiln_shape_probes *probes, int i, bool gemm_ok,
                               bool *dead, bool *done) {
    *done = false;
    const kiln_node *mm = &m->nodes[i];
    if (mm->n_in != 2 || mm->n_out != 1) return KILN_OK;
    const int x = mm->in[0], w = mm->in[1], y = mm->out[0];
    const kiln_tensor *wt = x >= 0 && w >= 0 ? kiln_pass_constant_through(m, prod, w) : NULL;
    if (!wt || wt->ndim != 2 || wt->dtype != KILN_F32) return KILN_OK;
    /* X's dims: those static inference stored, or where the graph's inputs have symbolic
     * dims, the two probes' (a dim they disagree on depends on a symbolic one: -1) */
    kiln_value xs = m->values[x];
    if (probes && x < probes->n && probes->one[x].ndim >= 0 && probes->one[x].ndim == probes->three[x].ndim) {
        xs.ndim = probes->one[x].ndim;
        xs.dtype = probes->one[x].dtype;
        for (int d = 0; d < xs.ndim; d++)
            xs.dims[d] = probes->one[x].dims[d] == probes->three[x].dims[d] ? probes->one[x].dims[d] : -1;
    }
    const kiln_value *xv = &xs;
    const int r = xv->ndim;
    const int64_t K = wt->dims[0], N = wt->dims[1];
    if (r < 2 || xv->dtype != KILN_F32 || xv->dims[r - 1] != K || K <= 0 || N <= 0) return KILN_OK;
    int unknown = 0;
    for (int d = 0; d < r - 1; d++) unknown += xv->dims[d] < 0;
    if (unknown > 1) return KILN_OK;
    const int a = kiln_pass_single_consumer(m, y);
    if (a < 0 || dead[a] || !kiln_pass_is(&m->nodes[a], "Add") || m->nodes[a].n_in != 2 || m->nodes[a].n_out != 1)
        return KILN_OK;
    const kiln_node *add = &m->nodes[a];
    if (add->in[0] == add->in[1]) return KILN_OK;
    const int bv = add->in[0] == y ? add->in[1] : add->in[0];
    const kiln_tensor *b = bv >= 0 ? kiln_pass_constant_through(m, prod, bv) : NULL;
    if (!b || b->dtype != KILN_F32 || b->ndim != 1 || b->dims[0] != N) return KILN_OK;
    /* a residual Add reading the Linear's result alone (a transformer's second MLP product):
     * Z, of the result's shape, rides on the product as kiln.FusedGemm's fourth input */
    int ra = -1, zv = -1;
    if (gemm_ok) {
        const int yb = m->nodes[a].out[0];
        const int r2 = kiln_pass_single_consumer(m, yb);
        if (r2 >= 0 && !dead[r2] && is_add(&m->nodes[r2])) {
            const kiln_node *ad = &m->nodes[r2];
            const int zz = ad->in[0] == yb ? ad->in[1] : ad->in[0];
            /* an intermediate Z's dtype: the probes' where inference stored none */
            kiln_dtype zdt = zz >= 0 ? m->values[zz].dtype : 0;
            if (!zdt && zz >= 0 && probes && zz < probes->n) zdt = probes->one[zz].dtype;
            if (zz >= 0 && zz != yb && zdt == KILN_F32 &&
                (same_known_shape(&m->values[zz], &m->values[yb]) || (probes && kiln_pass_same_shape(probes, zz, yb)))) {
                ra = r2;
                zv = zz;
            }
        }
    }
    /* the constants: Reshape's target shape (..., N) with -1 for the unknown dim */
    const int64_t rdim = r;
    kiln_tensor *shape = kiln_tensor_new(m->ctx, KILN_I64, 1, &rdim);
    if (!shape) return KILN_ERR_OUT_OF_MEMORY;
    int64_t rows = 1;
    for (int d = 0; d < r - 1; d++) {
        ((int64_t *)shape->data)[d] = xv->dims[d];
        if (xv->dims[d] >= 0) rows *= xv->dims[d];
    }
    ((int64_t *)shape->data)[r - 1] = N;
    if (unknown) rows = -1;
    const kiln_dtype dt = xv->dtype;
    char hint[220];
    snprintf(hint, sizeof hint, "%.150s_shape", m->nodes[a].name);
    const int sv = kiln_pass_add_initializer(m, hint, shape);
    snprintf(hint, sizeof hint, "%.150s_rows", m->values[x].name);
    const int xf = sv >= 0 ? kiln_pass_new_value(m, hint) : -1;
    snprintf(hint, sizeof hint, "%.150s_gemm", m->nodes[i].name);
    const int yg = xf >= 0 ? kiln_pass_new_value(m, hint) : -1;
    int zf = -1;
    if (yg >= 0 && zv >= 0) {
        snprintf(hint, sizeof hint, "%.150s_rows", m->values[zv].name);
        zf = kiln_pass_new_value(m, hint);
    }
    if (yg < 0 || (zv >= 0 && zf < 0)) return KILN_ERR_OUT_OF_MEMORY;
    m->values[xf].dtype = m->values[yg].dtype = dt;
    m->values[xf].ndim = m->values[yg].ndim = 2;
    m->values[xf].dims[0] = m->values[yg].dims[0] = rows;
    m->values[xf].dims[1] = K;
    m->values[yg].dims[1] = N;
    if (zf >= 0) {
        m->values[zf].dtype = dt;
        m->values[zf].ndim = 2;
        m->values[zf].dims[0] = rows;
        m->values[zf].dims[1] = N;
    }
    kiln_attr *fa = NULL;
    int nfa = 0;
    char at[32];
    snprintf(at, sizeof at, "axis=%d", r - 1);
    kiln_status st = kiln_attrs_parse(m->ctx, at, &fa, &nfa);
    if (st) return st;
    char name[220];
    snprintf(name, sizeof name, "%.150s_rows", m->nodes[i].name);
    /* op-pattern: MatMul + Add -> Flatten, Gemm, Reshape */
    int f = kiln_model_add_node_raw(m, "Flatten", name, "", 1, &x, 1, &xf, nfa, fa);
    snprintf(name, sizeof name, "%.150s", m->nodes[i].name);
    int g = f >= 0 ? kiln_model_add_node_raw(m, "Gemm", name, "", 3, (int[]){xf, w, bv}, 1, &yg, 0, NULL) : -1;
    if (g < 0) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a node");
    m->nodes[f].opset = m->nodes[g].opset = m->nodes[i].opset > 13 ? m->nodes[i].opset : 13;
    if (zf >= 0) {
        /* op-pattern: MatMul + Add + residual Add -> Flatten, Flatten, FusedGemm, Reshape */
        kiln_attr *za = NULL;
        int nza = 0;
        if ((st = kiln_attrs_parse(m->ctx, at, &za, &nza)) != KILN_OK) return st;
        snprintf(name, sizeof name, "%.150s_rows", m->nodes[ra].name);
        const int fz = kiln_model_add_node_raw(m, "Flatten", name, "", 1, &zv, 1, &zf, nza, za);
        if (fz < 0) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a node");
        m->nodes[fz].opset = m->nodes[g].opset;
        if ((st = kiln_pass_rewrite(m, g, "kiln", "FusedGemm", 4, (int[]){xf, w, bv, zf}, NULL)) != KILN_OK) return st;
        /* the residual Add becomes the Reshape back to (..., N); the bias Add goes */
        if ((st = kiln_pass_rewrite(m, ra, "", "Reshape", 2, (int[]){yg, sv}, NULL)) != KILN_OK) return st;
        if (m->nodes[ra].opset < 13) m->nodes[ra].opset = 13;
        dead[a] = true;
    } else {
        if ((st = kiln_pass_rewrite(m, a, "", "Reshape", 2, (int[]){yg, sv}, NULL)) != KILN_OK) return st;
        if (m->nodes[a].opset < 13) m->nodes[a].opset = 13;
    }
    dead[i] = true;
    *done = true;
    return KILN_OK;
}

/* Stage 0 over the graph, before the other stages (it appends nodes). gemm_ok: the device
 * has kiln.FusedGemm and KILN_PASS_GEMM_RESIDUAL is on (a residual Add after the Linear
 * joins it). */
static kiln_status fuse_matmul_bias(kiln_model *m, bool gemm_ok, bool *changed) {
    int *prod = kiln_pass_producers(m);
    const int n0 = m->n_nodes;
    /* up to 3 nodes appended a MatMul */
    bool *dead = kiln_calloc(m->ctx, (size_t)(4 * n0) + 1, sizeof *dead, "a pass");
    kiln_status st = prod && dead ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    bool any = false, have = false;
    for (int i = 0; i < n0 && !st && !have; i++) have = kiln_pass_is(&m->nodes[i], "MatMul"); /* op-pattern */
    kiln_shape_probes probes;
    memset(&probes, 0, sizeof probes);
    bool have_probes = false;
    if (!st && have) {
        st = kiln_pass_shape_probes(m, &probes);
        have_probes = st == KILN_OK;
        if (st != KILN_ERR_OUT_OF_MEMORY) st = KILN_OK; /* uninferable: static shapes decide */
    }
    for (int i = 0; i < n0 && !st && have; i++) {
        /* op-pattern */
        if (dead[i] || !kiln_pass_is(&m->nodes[i], "MatMul")) continue;
        bool done = false;
        st = matmul_bias(m, prod, have_probes ? &probes : NULL, i, gemm_ok, dead, &done);
        any |= done;
    }
    kiln_pass_shape_probes_free(&probes);
    if (!st && any) {
        kiln_pass_remove_nodes(m, dead);
        st = kiln_pass_sort_nodes(m);
        *changed = true;
    }
    free(prod);
    free(dead);
    return st;
}

kiln_status kiln_pass_fuse_conv(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    /* op-pattern */
    kiln_status st0 = fuse_matmul_bias(
        m, kiln_pass_device_has(o, "FusedGemm") && !(o->disabled & KILN_PASS_GEMM_RESIDUAL), changed);
    if (st0) return st0;
    int *prod = kiln_pass_producers(m);
    /* a Flatten appended per Gemm at most (gemm_residual) */
    bool *dead = kiln_calloc(m->ctx, (size_t)(2 * m->n_nodes) + 1, sizeof *dead, "a pass");
    kiln_status st = prod && dead ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    /* 1: bias Adds, repeatedly (an exporter may write several) */
    for (int i = 0; i < m->n_nodes && !st; i++) {
        if (dead[i] || !kiln_pass_is(&m->nodes[i], "Conv") || m->nodes[i].n_out != 1) continue;
        bool done = true;
        while (done && !st) {
            st = absorb_bias(m, prod, i, dead, &done);
            *changed |= done;
        }
    }
    /* 2, 3: into the fused ops; residual shapes under a symbolic batch from two probes */
    kiln_shape_probes probes;
    memset(&probes, 0, sizeof probes);
    bool have_probes = false;
    if (!st) {
        st = kiln_pass_shape_probes(m, &probes);
        have_probes = st == KILN_OK;
        if (st != KILN_ERR_OUT_OF_MEMORY) st = KILN_OK; /* uninferable: static shapes decide */
    }
    /* op-pattern */
    const bool conv_ok = kiln_pass_device_has(o, "FusedConv"), gemm_ok = kiln_pass_device_has(o, "FusedGemm");
    /* Silu / Gelu: on every device that has the fused ops. On CUDA a depthwise convolution
     * on kiln's own kernel applies them in its epilogue; any other convolution applies
     * bias and activation in one pass after cuDNN / cuBLASLt, as many bytes as the
     * FusedElementwise it replaces. The CUDA epilogues of these activations have not yet
     * run on a GPU: KILN_PASS_FUSE_SILU_GELU switches this fusion off alone. */
    const bool smooth = !(o->disabled & KILN_PASS_FUSE_SILU_GELU);
    const bool gres = !(o->disabled & KILN_PASS_GEMM_RESIDUAL);
    bool appended = false;
    const int n_before = m->n_nodes; /* the Flattens gemm_residual appends are no candidates */
    for (int i = 0; i < n_before && !st; i++) {
        const kiln_node *n = &m->nodes[i];
        if (dead[i] || n->n_out != 1) continue;
        /* op-pattern */
        const bool conv = conv_ok && kiln_pass_is(n, "Conv"), gemm = gemm_ok && kiln_pass_is(n, "Gemm");
        if (!conv && !gemm) continue;
        bool done = false;
        st = fuse_chain(m, prod, have_probes ? &probes : NULL, i, gemm, smooth, dead, &done);
        /* a Gemm without an activation after it: its residual (gemm-residual) */
        if (!st && !done && gemm && gres) st = gemm_residual(m, prod, have_probes ? &probes : NULL, i, dead, &done, &appended);
        *changed |= done;
    }
    kiln_pass_shape_probes_free(&probes);
    if (!st) kiln_pass_remove_nodes(m, dead);
    if (!st && appended) st = kiln_pass_sort_nodes(m);
    if (!st) st = kiln_pass_drop_unread_constants(m, changed);
    free(prod);
    free(dead);
    return st;
}
