/* einsum.c — Einsum(inputs...): Einstein summation by an equation such as "bij,bjk->bik"
 * (opset 12). Labels are letters; "..." stands for the same leading dims in every term
 * that has it (broadcast where one of them is 1). With "->" the output is the given
 * labels; without it, the labels seen once, in alphabetical order, after the ellipsis
 * dims. A label repeated within a term takes the diagonal. Every label not in the output
 * is summed over. Up to 8 inputs and 16 distinct labels. Float and integer dtypes (one for
 * all inputs); floats accumulate in double, integers in int64. The plan (einsum.h) is
 * shared with the CUDA kernel, which runs a plan that is a batched matrix product
 * (kiln_einsum_as_gemm) as one cuBLASLt call. A low-precision op under fp16/bf16, as
 * MatMul (every kernel accumulates in float or double).
 *
 * Gradient, for one or two inputs with an explicit output ("->"), letters only (no "...")
 * and no letter twice in a term (no diagonals), where every letter of the input
 * differentiated is in the output or the other input (MaxViT's attention: "BGHID,BGHJD->
 * BGHIJ" and "BGHIJ,BGHJD->BGHID"): the Einsum of dY with the other input into that input's
 * letters, dA = Einsum(dY, B) "out,b->a", dB = Einsum(A, dY) "a,out->b" (one input:
 * "out->a"). Other equations are refused by name. */
#include "../core/optest.h"
#include "einsum.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_TERMS = KILN_EINSUM_MAX_IN, MAX_LABELS = 52 + KILN_MAX_DIMS };

/* The parsed equation: label ids per dim of each input and of the output; ids 0..51 for
 * letters, 52.. for the ellipsis dims (aligned right: id 52 + KILN_MAX_DIMS - k for the
 * k-th dim from the end). */
typedef struct plan {
    int n_in;
    int nd[MAX_TERMS];
    int lab[MAX_TERMS][KILN_MAX_DIMS];
    int out_nd;
    int out_lab[KILN_MAX_DIMS];
    int64_t size[MAX_LABELS];
    bool used[MAX_LABELS];
} plan;

static int letter_id(char ch) {
    if (ch >= 'a' && ch <= 'z') return ch - 'a';
    if (ch >= 'A' && ch <= 'Z') return 26 + ch - 'A';
    return -1;
}

/* One term's labels (text [s, e)) for an input of rank `rank` (-1: the output, whose
 * ellipsis rank is ell). */
static bool parse_term(const char *s, const char *e, int rank, int *ell, int *lab, int *nd, char *why, size_t wn) {
    int letters = 0;
    bool has_ell = false;
    for (const char *p = s; p < e; p++) {
        if (*p == ' ') continue;
        if (*p == '.') {
            if (has_ell || e - p < 3 || p[1] != '.' || p[2] != '.') {
                snprintf(why, wn, "a malformed ellipsis");
                return false;
            }
            has_ell = true;
            p += 2;
        } else if (letter_id(*p) < 0) {
            snprintf(why, wn, "character '%c' is not a label", *p);
            return false;
        } else {
            letters++;
        }
    }
    const int ell_rank = rank >= 0 ? rank - letters : *ell;
    if (rank >= 0 && (ell_rank < 0 || (!has_ell && ell_rank != 0))) {
        snprintf(why, wn, "a term has %d labels for an input of rank %d", letters, rank);
        return false;
    }
    if (rank >= 0 && has_ell) *ell = ell_rank > *ell ? ell_rank : *ell;
    int n = 0;
    for (const char *p = s; p < e; p++) {
        if (*p == ' ') continue;
        if (*p == '.') {
            for (int k = ell_rank; k >= 1; k--) lab[n++] = 52 + KILN_MAX_DIMS - k;
            p += 2;
        } else {
            lab[n++] = letter_id(*p);
        }
    }
    if (n > KILN_MAX_DIMS) {
        snprintf(why, wn, "a term of %d dims", n);
        return false;
    }
    *nd = n;
    return true;
}

static kiln_status make_plan(kiln_op_ctx *c, plan *p) {
    memset(p, 0, sizeof *p);
    const char *eq = kiln_attr_string(c->node, "equation", NULL);
    KILN_OP_CHECK(c, eq != NULL, KILN_ERR_INVALID_ARGUMENT, "attribute 'equation' is required");
    KILN_OP_CHECK(c, c->n_in >= 1 && c->n_in <= MAX_TERMS, KILN_ERR_UNSUPPORTED, "%d inputs (1 to %d)", c->n_in,
                  MAX_TERMS);
    p->n_in = c->n_in;
    const char *arrow = strstr(eq, "->"), *end = arrow ? arrow : eq + strlen(eq);
    char why[160] = "";
    int ell = 0, term = 0;
    const char *s = eq;
    for (;;) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        const char *te = comma ? comma : end;
        KILN_OP_CHECK(c, term < c->n_in, KILN_ERR_INVALID_ARGUMENT, "equation '%s' has more terms than the %d inputs",
                      eq, c->n_in);
        KILN_OP_CHECK(c, c->in[term] != NULL, KILN_ERR_INVALID_ARGUMENT, "input %d is missing", term);
        KILN_OP_CHECK(c, parse_term(s, te, c->in[term]->ndim, &ell, p->lab[term], &p->nd[term], why, sizeof why),
                      KILN_ERR_INVALID_ARGUMENT, "equation '%s', term %d: %s", eq, term, why);
        term++;
        if (!comma) break;
        s = comma + 1;
    }
    KILN_OP_CHECK(c, term == c->n_in, KILN_ERR_INVALID_ARGUMENT, "equation '%s' has %d terms for %d inputs", eq, term,
                  c->n_in);
    /* sizes: a label's dims agree, or are 1 for ellipsis dims (broadcast) */
    for (int t = 0; t < p->n_in; t++)
        for (int d = 0; d < p->nd[t]; d++) {
            const int l = p->lab[t][d];
            const int64_t sz = c->in[t]->dims[d];
            if (!p->used[l] || p->size[l] == 1) p->size[l] = sz;
            else KILN_OP_CHECK(c, sz == p->size[l] || (l >= 52 && sz == 1), KILN_ERR_SHAPE,
                               "equation '%s': a label has sizes %lld and %lld", eq, (long long)p->size[l],
                               (long long)sz);
            p->used[l] = true;
        }
    if (arrow) {
        const char *os = arrow + 2;
        KILN_OP_CHECK(c, parse_term(os, os + strlen(os), -1, &ell, p->out_lab, &p->out_nd, why, sizeof why),
                      KILN_ERR_INVALID_ARGUMENT, "equation '%s', output: %s", eq, why);
        for (int d = 0; d < p->out_nd; d++) {
            KILN_OP_CHECK(c, p->used[p->out_lab[d]], KILN_ERR_INVALID_ARGUMENT,
                          "equation '%s': an output label is in no input", eq);
            for (int e = 0; e < d; e++)
                KILN_OP_CHECK(c, p->out_lab[e] != p->out_lab[d], KILN_ERR_INVALID_ARGUMENT,
                              "equation '%s': an output label repeats", eq);
        }
    } else {
        for (int k = ell; k >= 1; k--) p->out_lab[p->out_nd++] = 52 + KILN_MAX_DIMS - k;
        for (int l = 0; l < 52; l++) {
            int count = 0;
            for (int t = 0; t < p->n_in; t++)
                for (int d = 0; d < p->nd[t]; d++) count += p->lab[t][d] == l;
            if (count == 1) {
                KILN_OP_CHECK(c, p->out_nd < KILN_MAX_DIMS, KILN_ERR_SHAPE, "output rank above %d", KILN_MAX_DIMS);
                p->out_lab[p->out_nd++] = l;
            }
        }
    }
    return KILN_OK;
}

kiln_status kiln_einsum_plan(kiln_op_ctx *c, kiln_einsum *e) {
    plan p;
    kiln_status st = make_plan(c, &p);
    if (st) return st;
    memset(e, 0, sizeof *e);
    int id[MAX_LABELS];
    for (int l = 0; l < MAX_LABELS; l++) id[l] = -1;
    for (int l = 0; l < MAX_LABELS; l++) {
        if (!p.used[l]) continue;
        KILN_OP_CHECK(c, e->nl < KILN_EINSUM_MAX_LABELS, KILN_ERR_UNSUPPORTED, "more than %d distinct labels",
                      KILN_EINSUM_MAX_LABELS);
        id[l] = e->nl;
        e->size[e->nl++] = p.size[l];
    }
    e->n_in = p.n_in;
    e->out_nd = p.out_nd;
    bool in_out[MAX_LABELS] = {false};
    for (int d = 0; d < p.out_nd; d++) {
        e->out_lab[d] = id[p.out_lab[d]];
        in_out[p.out_lab[d]] = true;
    }
    e->sum_count = 1;
    for (int l = 0; l < MAX_LABELS; l++)
        if (p.used[l] && !in_out[l]) {
            e->sum_lab[e->ns++] = id[l];
            e->sum_count *= p.size[l];
        }
    for (int t = 0; t < p.n_in; t++) {
        int64_t st_[KILN_MAX_DIMS];
        kiln_strides(c->in[t]->ndim, c->in[t]->dims, st_);
        for (int d = 0; d < p.nd[t]; d++)
            if (c->in[t]->dims[d] != 1 || p.size[p.lab[t][d]] == 1) e->stride[t][id[p.lab[t][d]]] += st_[d];
    }
    return KILN_OK;
}

/* One group of labels (batch, M, N or K) ordered outer to inner: its size, and per
 * operand (A, B, Y) the stride of its innermost label, or false when an operand's labels
 * of the group are not one collapsible run. */
typedef struct group {
    int n, lab[KILN_EINSUM_MAX_LABELS];
    int64_t size, stride[3];
} group;

static bool collapse(group *gr, const int64_t *const st[3], const bool in[3], const int64_t *size) {
    gr->size = 1;
    for (int i = 0; i < gr->n; i++) gr->size *= size[gr->lab[i]];
    for (int o = 0; o < 3; o++) {
        gr->stride[o] = 0;
        if (!in[o] || gr->n == 0) continue;
        for (int i = 0; i + 1 < gr->n; i++)
            if (st[o][gr->lab[i]] != st[o][gr->lab[i + 1]] * size[gr->lab[i + 1]]) return false;
        gr->stride[o] = st[o][gr->lab[gr->n - 1]];
    }
    return true;
}

bool kiln_einsum_as_gemm(const kiln_einsum *e, kiln_einsum_gemm *g) {
    enum { G_B, G_M, G_N, G_K };
    if (e->n_in != 2) return false;
    int64_t ys[KILN_EINSUM_MAX_LABELS] = {0};
    bool iny[KILN_EINSUM_MAX_LABELS] = {false};
    int64_t s = 1;
    for (int d = e->out_nd - 1; d >= 0; d--) {
        ys[e->out_lab[d]] = s;
        iny[e->out_lab[d]] = true;
        s *= e->size[e->out_lab[d]];
    }
    group gr[4];
    memset(gr, 0, sizeof gr);
    for (int l = 0; l < e->nl; l++) {
        if (e->size[l] == 0) return false;
        if (e->size[l] == 1) continue;
        const bool a = e->stride[0][l] != 0, b = e->stride[1][l] != 0;
        const int k = a && b && iny[l] ? G_B : a && iny[l] ? G_M : b && iny[l] ? G_N : a && b ? G_K : -1;
        if (k < 0) return false;
        /* insertion by descending stride: Y's for the output's groups, A's for K */
        const int64_t *key = k == G_K ? e->stride[0] : ys;
        int i = gr[k].n++;
        while (i > 0 && key[gr[k].lab[i - 1]] < key[l]) {
            gr[k].lab[i] = gr[k].lab[i - 1];
            i--;
        }
        gr[k].lab[i] = l;
    }
    const int64_t *const st[3] = {e->stride[0], e->stride[1], ys};
    const bool in[4][3] = {{true, true, true}, {true, false, true}, {false, true, true}, {true, true, false}};
    for (int k = 0; k < 4; k++)
        if (!collapse(&gr[k], st, in[k], e->size)) return false;
    /* Y (M,N) row-major, or (N,M): then Y^T = B^T A^T, the inputs' roles swapped */
    int gm = G_M, gn = G_N, ia = 0, ib = 1;
    if (gr[G_N].size > 1 && gr[G_N].stride[2] != 1) {
        gm = G_N;
        gn = G_M;
        ia = 1;
        ib = 0;
    }
    const int64_t M = gr[gm].size, N = gr[gn].size, K = gr[G_K].size;
    const int64_t am = gr[gm].stride[ia], ak = gr[G_K].stride[ia], bk = gr[G_K].stride[ib], bn = gr[gn].stride[ib];
    const int64_t yn = gr[gn].stride[2], ym = gr[gm].stride[2];
    memset(g, 0, sizeof *g);
    g->a = ia;
    g->b = ib;
    g->M = M;
    g->N = N;
    g->K = K;
    if ((K == 1 || ak == 1) && (M == 1 || am >= K)) {
        g->lda = M == 1 ? K : am;
    } else if ((M == 1 || am == 1) && (K == 1 || ak >= M)) {
        g->ta = true;
        g->lda = K == 1 ? M : ak;
    } else {
        return false;
    }
    if ((N == 1 || bn == 1) && (K == 1 || bk >= N)) {
        g->ldb = K == 1 ? N : bk;
    } else if ((K == 1 || bk == 1) && (N == 1 || bn >= K)) {
        g->tb = true;
        g->ldb = N == 1 ? K : bn;
    } else {
        return false;
    }
    if (!(N == 1 || yn == 1) || !(M == 1 || ym >= N)) return false;
    g->ldy = M == 1 ? N : ym;
    g->batch = gr[G_B].size;
    if (g->batch > INT32_MAX) return false;
    g->sa = gr[G_B].stride[ia];
    g->sb = gr[G_B].stride[ib];
    g->sy = gr[G_B].stride[2];
    return true;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype) || kiln_dtype_is_int(x->dtype), KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    for (int i = 1; i < c->n_in; i++)
        KILN_OP_CHECK(c, c->in[i] && c->in[i]->dtype == x->dtype, KILN_ERR_TYPE, "input %d has another dtype than input 0",
                      i);
    kiln_einsum e;
    kiln_status st = kiln_einsum_plan(c, &e);
    if (st) return st;
    int64_t dims[KILN_MAX_DIMS];
    for (int d = 0; d < e.out_nd; d++) dims[d] = e.size[e.out_lab[d]];
    kiln_tensor_set_shape(c->out[0], x->dtype, e.out_nd, dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    kiln_einsum e;
    kiln_status st = kiln_einsum_plan(c, &e);
    if (st) return st;
    kiln_tensor *y = c->out[0];
    const bool fl = kiln_dtype_is_float(y->dtype);
    const int64_t n_out = kiln_tensor_numel(y);
    int64_t val[KILN_EINSUM_MAX_LABELS] = {0};
    for (int64_t o = 0; o < n_out; o++) {
        int64_t rem = o;
        for (int d = e.out_nd - 1; d >= 0; d--) {
            val[e.out_lab[d]] = rem % e.size[e.out_lab[d]];
            rem /= e.size[e.out_lab[d]];
        }
        double accf = 0;
        int64_t acci = 0;
        for (int64_t s = 0; s < e.sum_count; s++) {
            int64_t r = s;
            for (int k = e.ns - 1; k >= 0; k--) {
                val[e.sum_lab[k]] = r % e.size[e.sum_lab[k]];
                r /= e.size[e.sum_lab[k]];
            }
            double pf = 1;
            int64_t pi = 1;
            for (int t = 0; t < e.n_in; t++) {
                int64_t off = 0;
                for (int l = 0; l < e.nl; l++) off += val[l] * e.stride[t][l];
                if (fl) pf *= kiln_get_f64(c->in[t], off);
                else pi = (int64_t)((uint64_t)pi * (uint64_t)kiln_get_i64(c->in[t], off));
            }
            if (fl) accf += pf;
            else acci = (int64_t)((uint64_t)acci + (uint64_t)pi);
        }
        if (fl) kiln_set_f64(y, o, accf);
        else kiln_set_i64(y, o, acci);
    }
    return KILN_OK;
}

/* The equation's terms without spaces: terms[0..n_in-1] the inputs', terms[n_in] the
 * output's; false when it is not of the form the gradient takes. */
static bool grad_terms(const char *eq, int n_in, char terms[3][KILN_MAX_DIMS + 1]) {
    int t = 0, len = 0;
    bool arrow = false;
    for (const char *p = eq; *p; p++) {
        if (*p == ' ') continue;
        if (*p == ',' || (*p == '-' && p[1] == '>')) {
            if (arrow || t >= n_in) return false;
            terms[t++][len] = '\0';
            len = 0;
            if (*p == '-') {
                arrow = true;
                p++;
            }
            continue;
        }
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) || len >= KILN_MAX_DIMS) return false;
        for (int k = 0; k < len; k++)
            if (terms[t][k] == *p) return false; /* a diagonal */
        terms[t][len++] = *p;
    }
    if (!arrow || t != n_in) return false;
    terms[t][len] = '\0';
    return true;
}

static kiln_status grad(kiln_grad_ctx *g) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    const char *eq = kiln_attr_string(n, "equation", "");
    char terms[3][KILN_MAX_DIMS + 1];
    if (n->n_in > 2 || !grad_terms(eq, n->n_in, terms))
        return kiln_fail(g->m->ctx, KILN_ERR_UNSUPPORTED,
                         "Einsum node '%s': no gradient for equation '%s' (one or two inputs, an explicit '->', "
                         "letters only, none twice in a term)", n->name, eq);
    const char *out = terms[n->n_in];
    for (int k = 0; k < n->n_in; k++) {
        if (!g->need[k]) continue;
        const char *other = n->n_in == 2 ? terms[1 - k] : "";
        for (const char *l = terms[k]; *l; l++)
            if (!strchr(out, *l) && !strchr(other, *l))
                return kiln_fail(g->m->ctx, KILN_ERR_UNSUPPORTED,
                                 "Einsum node '%s': no gradient for equation '%s' (label '%c' of input %d is summed "
                                 "within that input alone)", n->name, eq, *l, k);
        char attrs[4 * KILN_MAX_DIMS + 32];
        int in[2];
        if (n->n_in == 1) {
            snprintf(attrs, sizeof attrs, "equation=%s->%s", out, terms[0]);
            in[0] = g->dy[0];
        } else if (k == 0) {
            snprintf(attrs, sizeof attrs, "equation=%s,%s->%s", out, terms[1], terms[0]);
            in[0] = g->dy[0];
            in[1] = KILN_GRAD_IN(g, 1);
        } else {
            snprintf(attrs, sizeof attrs, "equation=%s,%s->%s", terms[0], out, terms[1]);
            in[0] = KILN_GRAD_IN(g, 0);
            in[1] = g->dy[0];
        }
        g->dx[k] = kiln_grad_emit(g, NULL, "Einsum", n->n_in, in, 1, NULL, false, attrs);
        if (g->dx[k] < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
/* Whether equation eq on inputs of shapes (na, da) and (nb, db) runs as one GEMM, and with
 * which M N K batch ta tb (want[6]; NULL: it must not). */
static int gemm_case(const char *eq, int na, const int64_t *da, int nb, const int64_t *db, const int64_t *want) {
    kiln_context ctx = {0};
    kiln_clear_error(&ctx);
    kiln_node node;
    memset(&node, 0, sizeof node);
    node.op_type = (char *)"Einsum";
    node.name = (char *)eq;
    node.domain = (char *)"";
    node.op = kiln_op_index("Einsum");
    node.n_in = 2;
    node.n_out = 1;
    char attrs[128];
    snprintf(attrs, sizeof attrs, "equation=%s", eq);
    int fails = 0;
    kiln_tensor *in[2] = {kt_make(KILN_F16, na, da, NULL), kt_make(KILN_F16, nb, db, NULL)};
    kiln_op_ctx c;
    memset(&c, 0, sizeof c);
    c.kctx = &ctx;
    c.node = &node;
    c.n_in = 2;
    c.in = in;
    kiln_einsum e;
    kiln_einsum_gemm g;
    if (!in[0] || !in[1] || kiln_attrs_parse(&ctx, attrs, &node.attrs, &node.n_attrs) ||
        kiln_einsum_plan(&c, &e)) {
        printf("FAIL einsum as gemm '%s': %s\n", eq, kiln_context_message(&ctx));
        fails = 1;
    } else {
        const bool is = kiln_einsum_as_gemm(&e, &g);
        if (is != (want != NULL) ||
            (is && (g.M != want[0] || g.N != want[1] || g.K != want[2] || g.batch != want[3] || g.ta != (want[4] != 0) ||
                    g.tb != (want[5] != 0)))) {
            printf("FAIL einsum as gemm '%s': got %s M=%lld N=%lld K=%lld batch=%lld ta=%d tb=%d\n", eq,
                   is ? "a GEMM" : "no GEMM", (long long)g.M, (long long)g.N, (long long)g.K, (long long)g.batch,
                   is && g.ta, is && g.tb);
            fails = 1;
        } else {
            printf("ok   einsum as gemm '%s': %s\n", eq, is ? "one strided-batched GEMM" : "not a GEMM");
        }
    }
    for (int i = 0; i < node.n_attrs; i++) kiln_attr_clear(&node.attrs[i]);
    free(node.attrs);
    kiln_tensor_free(in[0]);
    kiln_tensor_free(in[1]);
    return fails;
}

static int test(void) {
    int fails = 0;
    /* which plans run as one GEMM on CUDA (src/cuda/matmul.c): MaxViT's attention products */
    fails += gemm_case("bghid,bghjd->bghij", 5, KT_DIMS(2, 3, 2, 5, 4), 5, KT_DIMS(2, 3, 2, 6, 4),
                       KT_DIMS(5, 6, 4, 12, 0, 1));
    fails += gemm_case("bghij,bghjd->bghid", 5, KT_DIMS(2, 3, 2, 5, 6), 5, KT_DIMS(2, 3, 2, 6, 4),
                       KT_DIMS(5, 4, 6, 12, 0, 0));
    fails += gemm_case("ki,kj->ij", 2, KT_DIMS(3, 5), 2, KT_DIMS(3, 7), KT_DIMS(5, 7, 3, 1, 1, 0));
    /* the output transposed: Y^T = B^T A^T, the inputs swapped */
    fails += gemm_case("bij,bjk->bki", 3, KT_DIMS(2, 5, 3), 3, KT_DIMS(2, 3, 7), KT_DIMS(7, 5, 3, 2, 1, 1));
    fails += gemm_case("ij,j->i", 2, KT_DIMS(5, 3), 1, KT_DIMS(3), KT_DIMS(5, 1, 3, 1, 0, 0));
    /* not one GEMM: a sum over one input's label, one input, interleaved batch */
    fails += gemm_case("ij,jk->i", 2, KT_DIMS(5, 3), 2, KT_DIMS(3, 4), NULL);
    fails += gemm_case("bij,jbk->ikb", 3, KT_DIMS(2, 5, 3), 3, KT_DIMS(3, 2, 4), NULL);
    kiln_tensor *in[3], *y;
    const double a6[6] = {1, 2, 3, 4, 5, 6};
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), a6);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(1, 0, 0, 1, 1, 1));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(4, 5, 10, 11));
    fails += kiln_optest("Einsum", "equation=ij,jk->ik", 2, in, 1, &y, 0, 0, "einsum matmul");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), a6);
    y = kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(1, 4, 2, 5, 3, 6));
    fails += kiln_optest("Einsum", "equation=ij->ji", 1, in, 1, &y, 0, 0, "einsum transpose");
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 3), a6);
    y = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(6, 15));
    fails += kiln_optest("Einsum", "equation=ij->i", 1, in, 1, &y, 0, 0, "einsum row sums");
    in[0] = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(1, 2, 3));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(4, 5, 6));
    y = kt_scalar(KILN_I64, 32);
    fails += kiln_optest("Einsum", "equation=i,i", 2, in, 1, &y, 0, 0, "einsum inner product, implicit output");
    /* implicit output: labels seen once, alphabetical: "ba" -> "ab", a transpose */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), a6);
    y = kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(1, 4, 2, 5, 3, 6));
    fails += kiln_optest("Einsum", "equation=ba", 1, in, 1, &y, 0, 0, "einsum implicit alphabetical order");
    /* diagonal of a batch of 2x2: "...ii->...i" */
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 2), KT_VALS(1, 2, 3, 4, 5, 6, 7, 8));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 4, 5, 8));
    fails += kiln_optest("Einsum", "equation=...ii->...i", 1, in, 1, &y, 0, 0, "einsum batch diagonal");
    /* batch matmul with the ellipsis broadcast: (2,1,2) (1,2,1) */
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 1, 2), KT_VALS(1, 2, 3, 4));
    in[1] = kt_make(KILN_F32, 3, KT_DIMS(1, 2, 1), KT_VALS(10, 100));
    y = kt_make(KILN_F32, 3, KT_DIMS(2, 1, 1), KT_VALS(210, 430));
    fails += kiln_optest("Einsum", "equation=...ij,...jk->...ik", 2, in, 1, &y, 0, 0, "einsum ellipsis broadcast");
    /* three inputs */
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, 2));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(3, 4));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(5, 6));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(15, 24, 30, 48));
    fails += kiln_optest("Einsum", "equation=i,j,j->ij", 3, in, 1, &y, 0, 0, "einsum three inputs");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), a6);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    fails += kiln_optest_fails("Einsum", "equation=ij,jk->ik", 2, in, 1, KILN_ERR_SHAPE, "einsum size mismatch");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), a6);
    fails += kiln_optest_fails("Einsum", "equation=ijk->i", 1, in, 1, KILN_ERR_INVALID_ARGUMENT, "einsum rank mismatch");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), a6);
    fails += kiln_optest_fails("Einsum", "equation=ij->iz", 1, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "einsum output label in no input");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), a6);
    fails += kiln_optest_fails("Einsum", "", 1, in, 1, KILN_ERR_INVALID_ARGUMENT, "einsum needs an equation");
    fails += kiln_optest_sweep_tol("Einsum", "equation=bij,bjk->bik", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 17), -1, 1, 6801),
                                                     kt_rand(KILN_F32, 3, KT_DIMS(3, 17, 7), -1, 1, 6802)},
                                   1, 1e-5, 1e-5, "einsum random batch matmul");
    /* GEMM-shaped plans (one cuBLASLt call on CUDA): transposed operands, transposed
     * output, the ellipsis broadcast, MaxViT's shapes; f16/bf16 in the sweep */
    fails += kiln_optest_sweep_tol("Einsum", "equation=bghid,bghjd->bghij", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 5, KT_DIMS(2, 3, 2, 9, 8), -1, 1, 6803),
                                                     kt_rand(KILN_F32, 5, KT_DIMS(2, 3, 2, 7, 8), -1, 1, 6804)},
                                   1, 1e-5, 1e-5, "einsum attention scores (B^T)");
    fails += kiln_optest_sweep_tol("Einsum", "equation=bghij,bghjd->bghid", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 5, KT_DIMS(2, 3, 2, 9, 7), -1, 1, 6805),
                                                     kt_rand(KILN_F32, 5, KT_DIMS(2, 3, 2, 7, 8), -1, 1, 6806)},
                                   1, 1e-5, 1e-5, "einsum attention values");
    fails += kiln_optest_sweep_tol("Einsum", "equation=ki,kj->ij", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(11, 5), -1, 1, 6807),
                                                     kt_rand(KILN_F32, 2, KT_DIMS(11, 6), -1, 1, 6808)},
                                   1, 1e-5, 1e-5, "einsum A^T B");
    fails += kiln_optest_sweep_tol("Einsum", "equation=bij,bjk->bki", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 9), -1, 1, 6809),
                                                     kt_rand(KILN_F32, 3, KT_DIMS(3, 9, 6), -1, 1, 6810)},
                                   1, 1e-5, 1e-5, "einsum transposed output");
    fails += kiln_optest_sweep_tol("Einsum", "equation=...ij,...jk->...ik", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 1, 6), -1, 1, 6811),
                                                     kt_rand(KILN_F32, 3, KT_DIMS(1, 6, 3), -1, 1, 6812)},
                                   1, 1e-5, 1e-5, "einsum broadcast batch as one GEMM");
    fails += kiln_optest_sweep_tol("Einsum", "equation=bij,jk->bik", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 9), -1, 1, 6813),
                                                     kt_rand(KILN_F32, 2, KT_DIMS(9, 4), -1, 1, 6814)},
                                   1, 1e-5, 1e-5, "einsum shared right operand");
    /* gradients: MaxViT's two attention products (spaces as torch writes them), a sum over
     * a label of both inputs into an outer index, one input (a transpose) */
    fails += kiln_gradcheck("Einsum", "equation=B G H I D, B G H J D -> B G H I J", 0, 2,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 5, KT_DIMS(2, 1, 2, 3, 4), -1, 1, 6803),
                                              kt_rand(KILN_F64, 5, KT_DIMS(2, 1, 2, 5, 4), -1, 1, 6804)},
                            NULL, "einsum grad q k^T (MaxViT)");
    fails += kiln_gradcheck("Einsum", "equation=B G H I J, B G H J D -> B G H I D", 0, 2,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 5, KT_DIMS(2, 1, 2, 3, 5), -1, 1, 6805),
                                              kt_rand(KILN_F64, 5, KT_DIMS(2, 1, 2, 5, 4), -1, 1, 6806)},
                            NULL, "einsum grad attn v (MaxViT)");
    fails += kiln_gradcheck("Einsum", "equation=be,ed->bd", 0, 2,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 6807),
                                              kt_rand(KILN_F64, 2, KT_DIMS(4, 2), -1, 1, 6808)},
                            NULL, "einsum grad matmul be,ed->bd");
    fails += kiln_gradcheck("Einsum", "equation=ijk->kji", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -1, 1, 6809)}, NULL,
                            "einsum grad one input, a transpose");
    return fails;
}
#endif /* KILN_OPTESTS */

/* Profile FLOPs: a multiply and an add per output element and summed term. */
static double flops(const kiln_op_ctx *c) {
    kiln_einsum e;
    if (c->n_out < 1 || !c->out[0] || kiln_einsum_plan((kiln_op_ctx *)c, &e)) return 0;
    return 2.0 * (double)kiln_tensor_numel(c->out[0]) * (double)e.sum_count;
}

const kiln_op_def kiln_op_einsum = {
    .precision = KILN_PREC_LOW, .flops = flops,
    .name = "Einsum", .min_inputs = 1, .max_inputs = -1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};
