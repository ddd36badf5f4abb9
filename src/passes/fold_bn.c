/* fold_bn.c — BatchNormalization folded into the Conv, ConvTranspose or Gemm before it.
 *
 * An inference BatchNormalization (training_mode absent or 0, only Y read) is, per
 * channel c, y = x * s[c] + t[c] with s = scale / sqrt(var + eps), t = B - mean * s. When
 * its X is the output of a Conv / ConvTranspose / Gemm that nothing else reads, whose
 * weights (and bias, if any) are constants, as are the BN's four parameters, the map moves
 * into the weights:
 *   Conv          W (M, C/g, k...):  W'[m] = W[m] * s[m],            B' = B * s + t;
 *   ConvTranspose W (C, M/g, k...):  W'[c, j] = W[c, j] * s[o(c,j)]  (o = group(c)*M/g + j);
 *   Gemm          B (K, N), or (N, K) with transB: column (row) n times s[n];
 *                 C' = beta * C * s + t broadcast to (N) or (rows, N), and beta = 1.
 * A missing bias is taken as 0. The folded tensors are new initializers with fresh names
 * (the originals may be shared with other nodes, which must keep seeing them); originals
 * nothing reads any more are freed. Arithmetic in double, rounded once to the weights'
 * dtype (f32, f64, f16, bf16). */
#include "passes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum kind { CONV, CONV_T, GEMM } kind;

/* s and t (C each) of BN node bn, when its parameters are constants of C elements. */
static bool bn_affine(const kiln_model *m, const int *prod, const kiln_node *bn, int64_t C,
                      double *s, double *t) {
    const kiln_tensor *p[4];
    for (int k = 0; k < 4; k++) {
        p[k] = kiln_pass_constant(m, prod, bn->in[1 + k]);
        if (!p[k] || !kiln_dtype_is_float(p[k]->dtype) || kiln_tensor_numel(p[k]) != C) return false;
    }
    const double eps = kiln_attr_float(bn, "epsilon", 1e-5f);
    for (int64_t c = 0; c < C; c++) {
        s[c] = kiln_get_f64(p[0], c) / sqrt(kiln_get_f64(p[3], c) + eps);
        t[c] = kiln_get_f64(p[1], c) - kiln_get_f64(p[2], c) * s[c];
    }
    return true;
}

/* W' from W for the node kind (see the file comment); NULL on OOM. */
static kiln_tensor *fold_weights(kiln_context *ctx, kind k, const kiln_tensor *w, int64_t G,
                                 bool tb, const double *s) {
    kiln_tensor *o = kiln_tensor_clone(ctx, w);
    if (!o) return NULL;
    const int64_t n = kiln_tensor_numel(w);
    if (k == CONV) {
        const int64_t M = w->dims[0], per = M ? n / M : 0;
        for (int64_t i = 0; i < n; i++) kiln_set_f64(o, i, kiln_get_f64(w, i) * s[i / per]);
    } else if (k == CONV_T) {
        const int64_t Cin = w->dims[0], Mg = w->dims[1];
        const int64_t K = Cin > 0 && Mg > 0 ? n / (Cin * Mg) : 0, Cg = Cin / G;
        for (int64_t i = 0; i < n; i++) {
            const int64_t c = i / (Mg * K), j = i / K % Mg;
            kiln_set_f64(o, i, kiln_get_f64(w, i) * s[c / Cg * Mg + j]);
        }
    } else {
        const int64_t cols = w->dims[1];
        for (int64_t i = 0; i < n; i++)
            kiln_set_f64(o, i, kiln_get_f64(w, i) * s[tb ? i / cols : i % cols]);
    }
    return o;
}

/* Gemm's C' (see the file comment); NULL when C's shape is not one Gemm allows or on OOM. */
static kiln_tensor *fold_gemm_c(kiln_context *ctx, const kiln_tensor *c, double beta, kiln_dtype dt,
                                int64_t N, const double *s, const double *t) {
    int64_t rows = 1, rs = 0, cs = 0;
    if (c) {
        if (c->ndim > 2) return NULL;
        const int64_t last = c->ndim ? c->dims[c->ndim - 1] : 1;
        if (last != 1 && last != N) return NULL;
        cs = last == N && N > 1 ? 1 : 0;
        if (c->ndim == 2 && c->dims[0] > 1) {
            rows = c->dims[0];
            rs = last;
        }
    }
    const bool use_c = c && beta != 0; /* Gemm reads no C at all when beta is 0 */
    kiln_tensor *o = rows > 1 ? kiln_tensor_new(ctx, dt, 2, (int64_t[]){rows, N})
                              : kiln_tensor_new(ctx, dt, 1, &N);
    if (!o) return NULL;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < N; j++) {
            const double cv = use_c ? beta * kiln_get_f64(c, r * rs + j * cs) : 0.0;
            kiln_set_f64(o, r * N + j, cv * s[j] + t[j]);
        }
    return o;
}

/* Fold BN node bi into node ci when everything is in place; *done tells whether it was. */
static kiln_status fold_one(kiln_model *m, int *prod, int ci, int bi, int *dropped, int *n_dropped,
                            bool *done) {
    *done = false;
    kiln_context *ctx = m->ctx;
    const kiln_node *cv = &m->nodes[ci];
    /* op-pattern: Conv / ConvTranspose / Gemm -> BatchNormalization */
    const kind k = kiln_pass_is(cv, "Conv") ? CONV : kiln_pass_is(cv, "ConvTranspose") ? CONV_T : GEMM;
    if (cv->n_in < 2) return KILN_OK;
    const kiln_tensor *w = kiln_pass_constant(m, prod, cv->in[1]);
    const int bias_v = cv->n_in > 2 ? cv->in[2] : -1;
    const kiln_tensor *b = kiln_pass_constant(m, prod, bias_v);
    if (!w || !kiln_dtype_is_float(w->dtype) || (bias_v >= 0 && !b)) return KILN_OK;
    const int64_t G = k == CONV_T ? kiln_attr_int(cv, "group", 1) : 1;
    const bool tb = k == GEMM && kiln_attr_int(cv, "transB", 0) != 0;
    int64_t C;
    if (k == GEMM) {
        if (w->ndim != 2) return KILN_OK;
        C = w->dims[tb ? 0 : 1];
    } else {
        if (w->ndim < 3 || G < 1 || w->dims[0] % G) return KILN_OK;
        C = k == CONV ? w->dims[0] : w->dims[1] * G;
        if (b && (b->ndim != 1 || b->dims[0] != C)) return KILN_OK;
    }
    double *s = malloc(((size_t)C + 1) * sizeof *s), *t = malloc(((size_t)C + 1) * sizeof *t);
    if (!s || !t) {
        free(s);
        free(t);
        return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory folding a BatchNormalization");
    }
    kiln_status st = KILN_OK;
    if (!bn_affine(m, prod, &m->nodes[bi], C, s, t)) goto out;
    kiln_tensor *nb = NULL;
    if (k == GEMM) {
        nb = fold_gemm_c(ctx, b, kiln_attr_float(cv, "beta", 1.0f), w->dtype, C, s, t);
        if (!nb && b) goto out; /* a C Gemm would not take (it fails at planning anyway) */
    } else {
        nb = kiln_tensor_new(ctx, w->dtype, 1, &C);
        for (int64_t c = 0; nb && c < C; c++) kiln_set_f64(nb, c, (b ? kiln_get_f64(b, c) : 0.0) * s[c] + t[c]);
    }
    kiln_tensor *nw = nb ? fold_weights(ctx, k, w, G, tb, s) : NULL;
    if (!nw) {
        kiln_tensor_free(nb);
        st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory folding a BatchNormalization");
        goto out;
    }
    char hint[200];
    snprintf(hint, sizeof hint, "%s.bnfold", m->values[cv->in[1]].name);
    const int wv = kiln_pass_add_initializer(m, hint, nw);
    snprintf(hint, sizeof hint, "%s.bnfold_bias", m->nodes[bi].name);
    const int bv = wv >= 0 ? kiln_pass_add_initializer(m, hint, nb) : (kiln_tensor_free(nb), -1);
    if (wv < 0 || bv < 0) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    /* the originals may become unread: freed once the BN is gone */
    dropped[(*n_dropped)++] = m->nodes[ci].in[1];
    dropped[(*n_dropped)++] = bias_v;
    for (int q = 1; q < 5; q++) dropped[(*n_dropped)++] = m->nodes[bi].in[q];
    if ((st = kiln_pass_set_input(m, ci, 1, wv)) || (st = kiln_pass_set_input(m, ci, 2, bv))) goto out;
    if (k == GEMM && (st = kiln_pass_set_float(m, ci, "beta", 1.0f))) goto out;
    const int y = m->nodes[bi].out[0];
    m->nodes[ci].out[0] = y;
    prod[y] = ci;
    *done = true;
out:
    free(s);
    free(t);
    return st;
}

kiln_status kiln_pass_fold_bn(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    (void)o;
    int *prod = kiln_pass_producers(m);
    bool *dead = kiln_calloc(m->ctx, (size_t)m->n_nodes + 1, sizeof *dead, "a pass");
    int *dropped = kiln_malloc(m->ctx, ((size_t)m->n_nodes * 6 + 1) * sizeof *dropped, "a pass");
    int n_dropped = 0;
    kiln_status st = prod && dead && dropped ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < m->n_nodes && !st; i++) {
        const kiln_node *bn = &m->nodes[i];
        if (!kiln_pass_is(bn, "BatchNormalization") || bn->n_in != 5 || bn->n_out < 1) continue;
        if (bn->opset >= 14 && kiln_attr_int(bn, "training_mode", 0) != 0) continue;
        bool extra = false; /* running statistics or saved means someone reads */
        for (int k = 1; k < bn->n_out; k++) extra |= bn->out[k] >= 0 && kiln_pass_uses(m, bn->out[k]) > 0;
        const int x = bn->in[0], p = x >= 0 ? prod[x] : -1;
        if (extra || p < 0 || dead[p] || kiln_pass_single_consumer(m, x) != i) continue;
        const kiln_node *cv = &m->nodes[p];
        /* op-pattern */
        if (!(kiln_pass_is(cv, "Conv") || kiln_pass_is(cv, "ConvTranspose") || kiln_pass_is(cv, "Gemm")) ||
            cv->n_out != 1 || cv->out[0] != x)
            continue;
        bool done = false;
        st = fold_one(m, prod, p, i, dropped, &n_dropped, &done);
        dead[i] = done;
        *changed |= done;
    }
    if (!st) {
        kiln_pass_remove_nodes(m, dead);
        for (int k = 0; k < n_dropped; k++) kiln_pass_drop_if_unused(m, dropped[k]);
        st = kiln_pass_drop_unread_constants(m, changed);
    }
    free(prod);
    free(dead);
    free(dropped);
    return st;
}
