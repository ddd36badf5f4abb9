/* fold_scale.c — a constant per-channel (or one-element) Mul folded into the weights of the
 * product or convolution that computes its other operand.
 *
 * ConvNeXt's layer scale (gamma * block(x), gamma (C, 1, 1), after the block's last Linear
 * and its permute back to NCHW), CaiT's and DeiT III's LayerScale (gamma (C) after a
 * projection) and any "multiply by a constant" an exporter leaves after a Linear are, per
 * output channel j, y = s[j] * (x W[:, j] + b[j]): W's column j and b[j] times s[j], and the
 * Mul is gone. Without it the residual Add that follows meets the product directly and
 * fuse-conv's gemm-residual takes it into the product's epilogue (ConvNeXt's block tail:
 * FusedGemm writing the sum, instead of the product, then a pass reading it and the
 * residual and writing the sum).
 *
 * The chain from the Mul back to the product may hold Transposes (the scaled axis followed
 * through each perm), Reshapes that keep the scaled axis last with its length, and one Add
 * of a constant bias that varies only along the scaled axis (a MatMul's bias; its values
 * are scaled too). It ends at MatMul (constant 2-D W: the scaled axis must be the output's
 * last), Gemm (constant B; the output's axis 1; C, if any, a constant and beta 1) or Conv
 * (constant W, axis 1; its bias, if any, a constant). Every value on the chain is read by
 * the next node alone and is no graph output; the Mul's constant broadcasts into the other
 * operand (the Mul's output has that operand's shape) and varies along one axis at most.
 * The node before the Mul then writes the Mul's output. New weights are new initializers
 * (the originals may be shared); arithmetic in double, rounded once to the weights' dtype. */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_CHAIN = 8 };
/* the product the chain ends at: its weight's output-channel axis */
typedef enum product { P_MATMUL, P_GEMM, P_GEMM_TB, P_CONV } product;

/* Whether constant b (broadcast right-aligned into a value of rank `rank`) varies only along
 * `axis` with length C there (C 1: b has one element). */
static bool along(const kiln_tensor *b, int rank, int axis, int64_t C) {
    if (b->ndim > rank) return false;
    for (int d = 0; d < b->ndim; d++) {
        const int a = rank - b->ndim + d;
        if (b->dims[d] != 1 && (a != axis || b->dims[d] != C)) return false;
    }
    return C == 1 ? kiln_tensor_numel(b) == 1 : true;
}

/* a copy of t with element i times s[ch(i)], ch(i) = i / inner % C; NULL on OOM */
static kiln_tensor *scaled(kiln_context *ctx, const kiln_tensor *t, const double *s, int64_t inner, int64_t C) {
    kiln_tensor *o = kiln_tensor_clone(ctx, t);
    if (!o) return NULL;
    const int64_t n = kiln_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) kiln_set_f64(o, i, kiln_get_f64(t, i) * s[C > 1 ? i / inner % C : 0]);
    return o;
}

/* the stride (in elements) of a constant's varying axis; 1 where it has one element */
static int64_t inner_of(const kiln_tensor *b, int64_t C) {
    if (C <= 1) return 1;
    int64_t inner = 1;
    for (int d = b->ndim - 1; d >= 0; d--) {
        if (b->dims[d] == C) return inner;
        inner *= b->dims[d];
    }
    return 1;
}

/* Input k of node replaced by t, a new initializer (NULL: the copy that would have been t
 * ran out of memory); the old value dropped where nothing else reads it. */
static kiln_status replace_input(kiln_model *m, int node, int k, const char *what, kiln_tensor *t) {
    if (!t) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory folding a scale");
    char hint[220];
    snprintf(hint, sizeof hint, "%.150s.%s", m->values[m->nodes[node].in[k]].name, what);
    const int v = kiln_pass_add_initializer(m, hint, t);
    if (v < 0) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory folding a scale");
    const int old = m->nodes[node].in[k];
    kiln_status st = kiln_pass_set_input(m, node, k, v);
    if (!st) kiln_pass_drop_if_unused(m, old);
    return st;
}

static kiln_status fold(kiln_model *m, const kiln_shape_probes *pr, int i, bool *dead, bool *done) {
    *done = false;
    const kiln_node *mul = &m->nodes[i];
    if (mul->n_in != 2 || mul->n_out != 1 || mul->in[0] < 0 || mul->in[1] < 0 || mul->out[0] < 0 ||
        mul->in[0] == mul->in[1])
        return KILN_OK;
    int *prod = kiln_pass_producers(m);
    if (!prod) return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = KILN_OK;
    double *s = NULL;
    const int ci = kiln_pass_constant(m, prod, mul->in[1]) ? 1 : kiln_pass_constant(m, prod, mul->in[0]) ? 0 : -1;
    const int t = ci >= 0 ? mul->in[1 - ci] : -1;
    const kiln_tensor *c = ci >= 0 ? kiln_pass_constant(m, prod, mul->in[ci]) : NULL;
    const int y = mul->out[0], c_v = ci >= 0 ? mul->in[ci] : -1;
    if (!c || !kiln_dtype_is_float(c->dtype) || kiln_pass_constant(m, prod, t) || t >= pr->n || y >= pr->n ||
        !kiln_pass_same_shape(pr, t, y) || !kiln_dtype_is_float(pr->one[t].dtype))
        goto out;
    const int rank = pr->one[t].ndim;
    int axis = -1;
    int64_t C = 1;
    if (rank < 1 || c->ndim > rank) goto out;
    for (int d = 0; d < c->ndim; d++) {
        if (c->dims[d] == 1) continue;
        if (axis >= 0) goto out; /* along two axes */
        axis = rank - c->ndim + d;
        C = c->dims[d];
    }
    /* back from t to the product */
    int v = t, reader = i, bias_add = -1, target = -1, n_chain = 0;
    product kind = P_MATMUL;
    int64_t target_n = 0;
    while (n_chain <= MAX_CHAIN) {
        if (v >= pr->n || kiln_pass_single_consumer(m, v) != reader) goto out;
        const int p = prod[v];
        if (p < 0 || dead[p]) goto out;
        const kiln_node *n = &m->nodes[p];
        if (n->n_out != 1 || n->out[0] != v || n->n_in < 1 || n->in[0] < 0) goto out;
        const int r = pr->one[v].ndim;
        /* op-pattern: the chain back to the product (Transpose, Reshape, bias Add) */
        if (kiln_pass_is(n, "Transpose")) {
            int np = 0;
            const int64_t *perm = kiln_attr_ints(n, "perm", &np);
            if (!perm || np != r) goto out;
            if (axis >= 0) axis = (int)perm[axis];
        } else if (/* op-pattern */ kiln_pass_is(n, "Reshape")) {
            const int xi = n->in[0];
            const int ri = xi < pr->n ? pr->one[xi].ndim : 0;
            if (ri < 1) goto out;
            if (axis >= 0) { /* the scaled axis last on both sides, of one length */
                if (axis != r - 1 || pr->one[xi].dims[ri - 1] != pr->one[v].dims[r - 1]) goto out;
                axis = ri - 1;
            }
        } else if (/* op-pattern */ kiln_pass_is(n, "Add") && n->n_in == 2 && bias_add < 0) {
            const int k = kiln_pass_constant(m, prod, n->in[1]) ? 1 : kiln_pass_constant(m, prod, n->in[0]) ? 0 : -1;
            const kiln_tensor *b = k >= 0 ? kiln_pass_constant(m, prod, n->in[k]) : NULL;
            /* a one-element scale takes any bias; a per-channel one a bias along its axis */
            if (!b || !kiln_dtype_is_float(b->dtype) || n->in[1 - k] < 0 || !kiln_pass_same_shape(pr, n->in[1 - k], v) ||
                (C > 1 && (!along(b, r, axis, C) || kiln_tensor_numel(b) == 1)))
                goto out;
            bias_add = p;
            reader = p;
            v = n->in[1 - k];
            n_chain++;
            continue;
        } else {
            /* the product: MatMul (axis last), Gemm (axis 1 of 2), Conv (axis 1) */
            const kiln_tensor *w = n->n_in >= 2 ? kiln_pass_constant(m, prod, n->in[1]) : NULL;
            if (!w || !kiln_dtype_is_float(w->dtype)) goto out;
            int64_t N = 0;
            /* op-pattern: the product (MatMul, Gemm, Conv) */
            if (kiln_pass_is(n, "MatMul")) {
                if (w->ndim != 2 || (axis >= 0 && axis != r - 1)) goto out;
                N = w->dims[1];
                kind = P_MATMUL;
            } else if (/* op-pattern */ kiln_pass_is(n, "Gemm")) {
                const int cv = kiln_pass_opt_in(n, 2);
                if (w->ndim != 2 || r != 2 || (axis >= 0 && axis != 1) ||
                    (cv >= 0 && (!kiln_pass_constant(m, prod, cv) || kiln_attr_float(n, "beta", 1.0f) != 1.0f)))
                    goto out;
                kind = kiln_attr_int(n, "transB", 0) ? P_GEMM_TB : P_GEMM;
                N = kind == P_GEMM_TB ? w->dims[0] : w->dims[1];
                /* C of (N), (1, N) or one element (a C of several rows is left alone) */
                if (cv >= 0 && kiln_tensor_numel(kiln_pass_constant(m, prod, cv)) != N &&
                    kiln_tensor_numel(kiln_pass_constant(m, prod, cv)) != 1)
                    goto out;
            } else if (/* op-pattern */ kiln_pass_is(n, "Conv")) {
                const int bv = kiln_pass_opt_in(n, 2);
                if (w->ndim < 3 || (axis >= 0 && axis != 1) ||
                    (bv >= 0 && (!kiln_pass_constant(m, prod, bv) || kiln_tensor_numel(kiln_pass_constant(m, prod, bv)) != w->dims[0])))
                    goto out;
                N = w->dims[0];
                kind = P_CONV;
            } else
                goto out;
            if (N < 1) goto out;
            if (C > 1 && C != N) goto out;
            target = p;
            target_n = N;
            break;
        }
        reader = p;
        v = n->in[0];
        n_chain++;
    }
    if (target < 0) goto out;
    /* s per output channel */
    const int64_t N = target_n;
    s = malloc(((size_t)N + 1) * sizeof *s);
    if (!s) {
        st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory folding a scale");
        goto out;
    }
    for (int64_t j = 0; j < N; j++) s[j] = kiln_get_f64(c, C > 1 ? j : 0);
    kiln_context *ctx = m->ctx;
    const kiln_tensor *w = kiln_pass_constant(m, prod, m->nodes[target].in[1]);
    kiln_tensor *nw = kind == P_CONV      ? scaled(ctx, w, s, kiln_tensor_numel(w) / N, N) /* W (M, C/g, k...) */
                      : kind == P_GEMM_TB ? scaled(ctx, w, s, w->dims[1], N)               /* (N, K) */
                                          : scaled(ctx, w, s, 1, N);                       /* (K, N) */
    if ((st = replace_input(m, target, 1, "scaled", nw)) != KILN_OK) goto out;
    const int bv = kind == P_MATMUL ? -1 : kiln_pass_opt_in(&m->nodes[target], 2);
    if (bv >= 0) { /* Conv's B (M), Gemm's C ((N), (1, N), or one element: scaled to (N)) */
        const kiln_tensor *b = kiln_pass_constant(m, prod, bv);
        kiln_tensor *nb = NULL;
        if (kiln_tensor_numel(b) == N) nb = scaled(ctx, b, s, 1, N);
        else if (kiln_tensor_numel(b) == 1 && N >= 1) {
            nb = kiln_tensor_new(ctx, b->dtype, 1, &N);
            for (int64_t j = 0; nb && j < N; j++) kiln_set_f64(nb, j, kiln_get_f64(b, 0) * s[j]);
        } else
            goto out; /* not reached: the shapes were checked before anything changed */
        if ((st = replace_input(m, target, 2, "scaled", nb)) != KILN_OK) goto out;
    }
    if (bias_add >= 0) {
        const kiln_node *a = &m->nodes[bias_add];
        const int k = kiln_pass_constant(m, prod, a->in[1]) ? 1 : 0;
        const kiln_tensor *b = kiln_pass_constant(m, prod, a->in[k]);
        kiln_tensor *nb = scaled(ctx, b, s, inner_of(b, C), C > 1 ? C : 1);
        if ((st = replace_input(m, bias_add, k, "scaled", nb)) != KILN_OK) goto out;
    }
    /* the node before the Mul writes its output */
    if ((st = kiln_pass_set_output(m, prod[t], 0, y)) != KILN_OK) goto out;
    dead[i] = true;
    kiln_pass_drop_if_unused(m, c_v);
    *done = true;
out:
    free(s);
    free(prod);
    return st;
}

kiln_status kiln_pass_fold_scale(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    (void)o;
    return kiln_pass_each_node(m, "Mul", fold, changed); /* op-pattern */
}
