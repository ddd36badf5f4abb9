/*
 * recompute.c — activation checkpointing under a memory budget (recompute.h).
 *
 * The training graph keeps every forward value a backward node reads alive from its forward
 * production to that backward use. For values produced by cheap ops — BatchNormalization
 * and the elementwise ops (kiln_op_def.eltwise; never convolutions or products, never random
 * ops such as Dropout) — the pass instead adds a copy of the producing node placed just
 * before the first backward use, and points the backward readers at the copy; the forward
 * value then dies after its last forward reader and the planner reuses its bytes.
 *
 * A second tier (heavy; kiln_train_options.no_recompute 0, `kiln train --recompute on`):
 * ops that declare their FLOPs (kiln_op_def.flops: convolutions, products) are candidates
 * too, scored by those FLOPs and sorted after every cheap value: a convolution is
 * recomputed only when the cheap values alone do not fit: then the backward keeps little
 * more than every fourth block's output and recomputes the rest, as PyTorch's per-block
 * torch.utils.checkpoint does (at about one more forward pass of those blocks).
 *
 * A copy reads the producer's inputs where they are stored anyway (graph inputs, constants,
 * values some backward node reads, values of ops that are not cheap); an input that is
 * itself recomputed, or a cheap value that nothing else keeps (BatchNormalization's output
 * before its ReLU), is recomputed too, by copies private to that recomputation (placed with
 * it, dead right after), so a chain BN -> ReLU -> Add -> ReLU is recomputed from the
 * convolution outputs the BN gradients keep. Along a residual stream each block output is
 * recomputed from the one before: a chosen value whose recomputation would take more than
 * max_chain (4) chosen values in a row stays stored (checkpoints every few blocks), and a
 * copy computes its deepest input first, so few copies are alive at once.
 *
 * BatchNormalization in training mode is copied in training mode with its output Y only: kiln
 * keeps no batch statistics (its gradient recomputes them from X too), so the copy computes
 * the same statistics of the same X and so exactly the same Y, and without its running
 * statistics outputs it does not update them a second time.
 *
 * Choice: candidates (forward values with a backward reader, produced by a cheap op) in
 * order of bytes saved per element operation of their recomputation (BatchNormalization
 * counts 4 per element: two passes for the statistics and the affine; an elementwise op one
 * per input element, plus any unstored input it has to recompute too); the pass takes the
 * shortest prefix of that order whose plan fits the budget, found by binary search over
 * plans (the plan is the measure: it accounts for the greedy placement and for the values
 * whose life the copies extend).
 *
 * The copies are placed by hand before their backward readers; the model is marked
 * keep_order, so graph.c's topological sort (and that of the passes' copies) keeps it as it
 * is while it is in order. Each copy carries the attribute kiln_recompute = 1: a device plan
 * over side streams (src/core/plan.c, assign_streams) runs it there, on the main stream, and
 * joins a side-stream node that reads it at the main stream's next node, so that the copy
 * is not computed in the forward nor kept alive to the end of the step.
 */
#include "recompute.h"

#include "../core/plan.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rc_info {
    kiln_model *m;
    int nv, nn;
    const kiln_tensor *vt; /* shapes from the plan of m */
    const bool *known;     /* constants */
    bool *fwd;             /* (nn) node is an ancestor of the loss */
    bool *exec;            /* (nn) node runs (not folded) */
    bool *bwd_use;         /* (nv) some backward node reads it */
    int *cand;             /* candidates, best first: the cheap ones, then the heavy ones */
    int n_cand, n_cheap;
    double *cost;          /* (nv) element operations to recompute v alone */
    int max_chain;         /* chosen values in a row one recomputation may take */
    bool heavy;            /* convolutions and products may be recomputed too */
} rc_info;

static bool is_bn(const kiln_node *n) { return !n->domain[0] && strcmp(n->op_type, "BatchNormalization") == 0; }

/* Node i computes output 0 cheaply enough to be recomputed. */
static bool cheap_node(const rc_info *g, int i) {
    if (i < 0 || !g->fwd[i] || !g->exec[i]) return false;
    const kiln_node *n = &g->m->nodes[i];
    const kiln_op_def *d = kiln_op_get(n->op);
    if (!d || d->random) return false;
    if (is_bn(n)) return kiln_attr_int(n, "sync_comm", 0) == 0; /* SyncBN: no second all-reduce */
    return d->eltwise != NULL && n->n_out == 1;
}

/* Ops that declare their FLOPs (kiln_op_def.flops: convolutions, products) are the second
 * tier: deterministic, one output, or a kiln.FusedConv with its statistics outputs (the
 * conv-bn-stats pass's: the copy writes Y alone, the BN keeps reading the original's sums). */
static bool is_heavy(const kiln_node *n) {
    const kiln_op_def *d = kiln_op_get(n->op);
    /* op-pattern: FusedConv (statistics outputs) */
    const bool stats = n->n_out == 3 && strcmp(n->domain, "kiln") == 0 && strcmp(n->op_type, "FusedConv") == 0;
    return d && d->flops && !d->random && (n->n_out == 1 || stats);
}

/* Node i's output 0 may be recomputed: a cheap op, or (second tier, scored by its FLOPs so
 * that it comes after every cheap value) a convolution or product. */
static bool recomputable(const rc_info *g, int i) {
    if (cheap_node(g, i)) return true;
    if (!g->heavy || i < 0 || !g->fwd[i] || !g->exec[i]) return false;
    return is_heavy(&g->m->nodes[i]);
}

static double numel_of(const kiln_tensor *t) {
    double k = 1;
    for (int d = 0; d < t->ndim; d++) k *= (double)t->dims[d];
    return k;
}

static double node_cost(const rc_info *g, int i) {
    const kiln_node *n = &g->m->nodes[i];
    const double e = numel_of(&g->vt[n->out[0]]);
    if (is_bn(n)) return 4 * e;
    if (is_heavy(n)) { /* the op's own FLOPs for the plan's shapes */
        const kiln_tensor *ins[16];
        const kiln_tensor *outs[1] = {&g->vt[n->out[0]]};
        if (n->n_in > 16) return e;
        for (int k = 0; k < n->n_in; k++) ins[k] = n->in[k] >= 0 ? &g->vt[n->in[k]] : NULL;
        kiln_op_ctx c = {.kctx = g->m->ctx, .node = n, .n_in = n->n_in, .in = (kiln_tensor **)ins, .n_out = 1,
                         .out = (kiln_tensor **)outs};
        const double f = kiln_op_get(n->op)->flops(&c);
        return f > e ? f : e;
    }
    int k = 0;
    for (int j = 0; j < n->n_in; j++) k += n->in[j] >= 0;
    return e * (k > 0 ? k : 1);
}

/* Value x is available to a copy without recomputing it (given the chosen set inS). */
static bool available(const rc_info *g, const bool *inS, int x) {
    if (inS && inS[x]) return false;
    const int p = g->m->values[x].producer;
    if (p < 0 || g->known[x] || g->bwd_use[x]) return true;
    if (!recomputable(g, p) || g->m->nodes[p].out[0] != x) return true;
    return false;
}

static void rc_free(rc_info *g) {
    free(g->fwd);
    free(g->exec);
    free(g->bwd_use);
    free(g->cand);
    free(g->cost);
}

static const double *g_score; /* qsort's key */
static const bool *g_heavy;   /* its first key: cheap values first */
static int cmp_cand(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    if (g_heavy[x] != g_heavy[y]) return g_heavy[x] ? 1 : -1;
    if (g_score[x] != g_score[y]) return g_score[x] > g_score[y] ? -1 : 1;
    return x - y;
}

/* Closure cost of recomputing v with nothing else chosen (depth-limited). */
static double closure_cost(const rc_info *g, int v, int depth) {
    const int p = g->m->values[v].producer;
    double c = g->cost[v];
    if (depth > 16) return c;
    const kiln_node *n = &g->m->nodes[p];
    for (int k = 0; k < n->n_in; k++) {
        const int x = n->in[k];
        if (x >= 0 && !available(g, NULL, x)) c += closure_cost(g, x, depth + 1);
    }
    return c;
}

static kiln_status rc_analyze(kiln_model *m, const kiln_plan *p, bool heavy, rc_info *g) {
    memset(g, 0, sizeof *g);
    g->heavy = heavy;
    kiln_context *ctx = m->ctx;
    kiln_plan_view_t v;
    kiln_plan_view(p, &v);
    g->m = m;
    g->nv = m->n_values;
    g->nn = m->n_nodes;
    g->vt = v.vt;
    g->known = v.known;
    g->max_chain = 4;
    const char *mc = getenv("KILN_RECOMPUTE_CHAIN"); /* tuning */
    if (mc && atoi(mc) > 0) g->max_chain = atoi(mc);
    g->fwd = kiln_calloc(ctx, (size_t)g->nn + 1, sizeof(bool), "recomputation");
    g->exec = kiln_calloc(ctx, (size_t)g->nn + 1, sizeof(bool), "recomputation");
    g->bwd_use = kiln_calloc(ctx, (size_t)g->nv + 1, sizeof(bool), "recomputation");
    g->cand = kiln_calloc(ctx, (size_t)g->nv + 1, sizeof(int), "recomputation");
    g->cost = kiln_calloc(ctx, (size_t)g->nv + 1, sizeof(double), "recomputation");
    bool *need = kiln_calloc(ctx, (size_t)g->nv + 1, sizeof(bool), "recomputation");
    double *score = kiln_calloc(ctx, (size_t)g->nv + 1, sizeof(double), "recomputation");
    bool *hv = kiln_calloc(ctx, (size_t)g->nv + 1, sizeof(bool), "recomputation");
    if (!g->fwd || !g->exec || !g->bwd_use || !g->cand || !g->cost || !need || !score || !hv) {
        free(need);
        free(hv);
        free(score);
        rc_free(g);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int e = 0; e < v.n_exec; e++) {
        const kiln_op_ctx *c = kiln_plan_exec_op_ctx(&v, e);
        g->exec[c->node - m->nodes] = true;
    }
    /* the forward: ancestors of the loss (graph output 0) */
    if (m->n_outputs > 0) need[m->outputs[0]] = true;
    for (int i = g->nn - 1; i >= 0; i--) {
        const kiln_node *n = &m->nodes[i];
        bool any = false;
        for (int k = 0; k < n->n_out; k++) any |= n->out[k] >= 0 && need[n->out[k]];
        if (!any) continue;
        g->fwd[i] = true;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0) need[n->in[k]] = true;
    }
    for (int i = 0; i < g->nn; i++) {
        const kiln_node *n = &m->nodes[i];
        if (g->fwd[i] || !g->exec[i]) continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0) g->bwd_use[n->in[k]] = true;
    }
    for (int i = 0; i < g->nn; i++)
        if (recomputable(g, i)) g->cost[m->nodes[i].out[0]] = node_cost(g, i);
    for (int i = 0; i < g->nn; i++) {
        if (!recomputable(g, i)) continue;
        const int x = m->nodes[i].out[0];
        if (!g->bwd_use[x] || m->values[x].is_output || g->known[x] || !v.offset || v.offset[x] == SIZE_MAX) continue;
        const double bytes = (double)kiln_tensor_nbytes(&g->vt[x]);
        if (bytes <= 0) continue;
        score[x] = bytes / (closure_cost(g, x, 0) + 1);
        hv[x] = !cheap_node(g, i);
        g->n_cheap += !hv[x];
        g->cand[g->n_cand++] = x;
    }
    g_score = score;
    g_heavy = hv;
    qsort(g->cand, (size_t)g->n_cand, sizeof(int), cmp_cand);
    g_score = NULL;
    g_heavy = NULL;
    free(need);
    free(hv);
    free(score);
    return KILN_OK;
}

/* How many chosen values in a row recomputing x takes (its closure's longest chain). */
static int chain_depth(const rc_info *g, const bool *inS, const int *depth, int x, int guard) {
    const kiln_node *n = &g->m->nodes[g->m->values[x].producer];
    int d = 0;
    for (int k = 0; k < n->n_in && guard < 64; k++) {
        const int u = n->in[k];
        if (u < 0 || available(g, inS, u)) continue;
        const int du = inS[u] ? depth[u] : chain_depth(g, inS, depth, u, guard + 1);
        if (du > d) d = du;
    }
    return d + (inS[x] ? 1 : 0);
}

typedef struct rc_build {
    kiln_model *c;    /* the copy being rewritten */
    const rc_info *g;
    const bool *inS;
    int *clone_of;    /* (nv) chosen value -> its recomputed value (read by its backward readers), -1 */
    int *clone_node;  /* (nv) chosen value -> the copy's node index in c, -1 */
    int *local;       /* (nv) value -> its private copy in the closure being built, when local_gen matches */
    int *local_gen, gen;
    int *target;      /* (nodes of c) copies: the original node they go before */
    const int *depth; /* (nv) chain depths of chosen values (chain_depth) */
    int copies;       /* chosen values recomputed */
    double flops;
} rc_build;

/* A copy of x's producer reading available values or copies of its own. top: x is a chosen
 * value, whose copy its backward readers read; otherwise the copy is private to the
 * closure of the chosen value being built (a value that is itself chosen gets a second,
 * short-lived copy here, so that a chain of chosen values is not brought back all at
 * once at the start of the backward). */
static int recompute_value(rc_build *b, int x, bool top, int depth) {
    if (!top && b->local_gen[x] == b->gen) return b->local[x];
    if (depth > 64) return -1;
    const rc_info *g = b->g;
    const int p = g->m->values[x].producer;
    /* read the original node from m (c's arrays grow as copies are added) */
    const kiln_node *n = &g->m->nodes[p];
    int in[16], dep[16];
    if (n->n_in > 16) return -1;
    /* the inputs to recompute, the longest chain first (Sethi-Ullman: fewer copies alive) */
    for (int k = 0; k < n->n_in; k++) {
        const int u = n->in[k];
        in[k] = u;
        dep[k] = u < 0 || available(g, b->inS, u) ? -1
                 : b->inS[u]                      ? b->depth[u]
                                                  : chain_depth(g, b->inS, b->depth, u, 0);
    }
    for (;;) {
        int kk = -1;
        for (int k = 0; k < n->n_in; k++)
            if (dep[k] >= 0 && (kk < 0 || dep[k] > dep[kk])) kk = k;
        if (kk < 0) break;
        dep[kk] = -1;
        in[kk] = recompute_value(b, n->in[kk], false, depth + 1);
        if (in[kk] < 0) return -1;
    }
    char name[512];
    snprintf(name, sizeof name, "%s:recompute%s%d", g->m->values[x].name, top ? "" : ":for", top ? 0 : b->gen);
    const int out = kiln_model_get_value(b->c, name);
    if (out < 0) return -1;
    /* the copy computes x: x's layout (the trainer's graph is already laid out by the layout
     * pass, which does not run again: a BatchNormalization copy reading an NHWC convolution
     * output must write NHWC as the original does, or CUDA refuses the mix) */
    b->c->values[out].format = g->m->values[x].format;
    /* the original's attributes, and kiln_recompute = 1: a device with side streams runs the
     * copy where it is placed, on its main stream (src/core/plan.c, assign_streams) */
    kiln_attr *attrs = kiln_calloc(g->m->ctx, (size_t)n->n_attrs + 1, sizeof(kiln_attr), "recomputation");
    if (!attrs) return -1;
    for (int a = 0; a < n->n_attrs; a++)
        if (kiln_attr_copy(g->m->ctx, &attrs[a], &n->attrs[a])) {
            for (int j = 0; j < a; j++) kiln_attr_clear(&attrs[j]);
            free(attrs);
            return -1;
        }
    attrs[n->n_attrs] = (kiln_attr){.name = kiln_strdup(g->m->ctx, "kiln_recompute"), .type = KILN_ATTR_INT, .i = 1};
    if (!attrs[n->n_attrs].name) {
        for (int j = 0; j < n->n_attrs; j++) kiln_attr_clear(&attrs[j]);
        free(attrs);
        return -1;
    }
    char nname[512];
    if (top) snprintf(nname, sizeof nname, "%s:recompute", n->name[0] ? n->name : g->m->values[x].name);
    else snprintf(nname, sizeof nname, "%s:recompute:for%d", n->name[0] ? n->name : g->m->values[x].name, b->gen);
    const int opset = n->opset;
    const int idx = kiln_model_add_node_raw(b->c, n->op_type, nname, n->domain, n->n_in, in, 1, &out, n->n_attrs + 1, attrs);
    if (idx < 0) return -1;
    b->c->nodes[idx].opset = opset;
    if (top) {
        b->clone_of[x] = out;
        b->clone_node[x] = idx;
        b->copies++;
    } else {
        b->local[x] = out;
        b->local_gen[x] = b->gen;
    }
    b->flops += g->cost[x];
    return out;
}

/* A copy of m with candidates [0, k) recomputed, finalized. */
static kiln_status rc_rewrite(const rc_info *g, int k, kiln_model **out, double *flops, int *copies) {
    kiln_model *m = g->m;
    kiln_context *ctx = m->ctx;
    *out = NULL;
    kiln_model *c = NULL;
    kiln_status st = kiln_model_clone(m, &c);
    if (st) return st;
    rc_build b = {.c = c, .g = g};
    bool *inS = kiln_calloc(ctx, (size_t)g->nv + 1, sizeof(bool), "recomputation");
    int *depth = kiln_calloc(ctx, (size_t)g->nv + 1, sizeof(int), "recomputation");
    b.clone_of = kiln_calloc(ctx, (size_t)g->nv + 1, sizeof(int), "recomputation");
    b.clone_node = kiln_calloc(ctx, (size_t)g->nv + 1, sizeof(int), "recomputation");
    b.local = kiln_calloc(ctx, (size_t)g->nv + 1, sizeof(int), "recomputation");
    b.local_gen = kiln_calloc(ctx, (size_t)g->nv + 1, sizeof(int), "recomputation");
    int *order = NULL;
    kiln_node *nodes = NULL;
    if (!inS || !depth || !b.clone_of || !b.clone_node || !b.local || !b.local_gen) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto done;
    }
    b.inS = inS;
    b.depth = depth;
    for (int v = 0; v < g->nv; v++) b.clone_of[v] = b.clone_node[v] = -1;
    for (int j = 0; j < k && j < g->n_cand; j++) inS[g->cand[j]] = true;
    /* Chains of chosen values (a residual network's block outputs, each recomputed from the
     * one before) are cut: in forward order, a value whose recomputation would take more
     * than max_chain chosen values in a row stays stored (the classic checkpoint every
     * few blocks). */
    for (int i = 0; i < g->nn; i++) {
        const int x = recomputable(g, i) ? m->nodes[i].out[0] : -1;
        if (x < 0 || !inS[x]) continue;
        depth[x] = chain_depth(g, inS, depth, x, 0);
        if (depth[x] > g->max_chain) {
            inS[x] = false;
            depth[x] = 0;
        }
    }
    const int n0 = g->nn;
    for (int j = 0; j < k && j < g->n_cand; j++) {
        if (!inS[g->cand[j]]) continue;
        b.gen++;
        if (recompute_value(&b, g->cand[j], true, 0) < 0) {
            st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "recomputing '%s': out of memory", m->values[g->cand[j]].name);
            goto done;
        }
    }
    const int n1 = c->n_nodes;
    b.target = kiln_calloc(ctx, (size_t)n1 + 1, sizeof(int), "recomputation");
    order = kiln_calloc(ctx, (size_t)n1 + 1, sizeof(int), "recomputation");
    if (!b.target || !order) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto done;
    }
    for (int i = 0; i < n1; i++) b.target[i] = INT_MAX;
    /* backward readers of a chosen value read its copy; the copy goes before the first */
    for (int i = 0; i < n0; i++) {
        if (g->fwd[i]) continue;
        kiln_node *n = &c->nodes[i];
        for (int q = 0; q < n->n_in; q++) {
            const int x = n->in[q];
            if (x < 0 || !inS[x]) continue;
            n->in[q] = b.clone_of[x];
            if (b.target[b.clone_node[x]] > i) b.target[b.clone_node[x]] = i;
        }
    }
    /* a copy's inputs that are copies go before it (copies were added inputs first) */
    for (int i = n1 - 1; i >= n0; i--) {
        const kiln_node *n = &c->nodes[i];
        for (int q = 0; q < n->n_in; q++) {
            const int x = n->in[q];
            if (x < g->nv) continue; /* copies' values are the ones added to c */
            for (int j = n0; j < i; j++)
                if (c->nodes[j].out[0] == x) {
                    if (b.target[j] > b.target[i]) b.target[j] = b.target[i];
                    break;
                }
        }
    }
    int no = 0;
    for (int i = 0; i < n0; i++) {
        for (int j = n0; j < n1; j++)
            if (b.target[j] == i) order[no++] = j;
        order[no++] = i;
    }
    for (int j = n0; j < n1; j++)
        if (b.target[j] == INT_MAX) order[no++] = j; /* unused (cannot happen): left at the end */
    nodes = kiln_calloc(ctx, (size_t)n1 + 1, sizeof(kiln_node), "recomputation");
    if (!nodes) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto done;
    }
    for (int i = 0; i < n1; i++) nodes[i] = c->nodes[order[i]];
    memcpy(c->nodes, nodes, sizeof(kiln_node) * (size_t)n1);
    c->keep_order = true; /* finalization (and the passes' copies) keep the copies where they are */
    st = kiln_model_finalize(c);
done:
    free(inS);
    free(depth);
    free(b.local);
    free(b.local_gen);
    free(b.clone_of);
    free(b.clone_node);
    free(b.target);
    free(order);
    free(nodes);
    if (st) {
        kiln_model_free(c);
        return st;
    }
    if (flops) *flops = b.flops;
    if (copies) *copies = b.copies;
    *out = c;
    return KILN_OK;
}

typedef struct rc_measure {
    kiln_recompute_measure_fn fn;
    void *user;
    kiln_tensor *const *inputs;
} rc_measure;

static kiln_status arena_of(const rc_measure *ms, kiln_model *m, size_t *arena, size_t *ws) {
    if (ms->fn) return ms->fn(ms->user, m, arena, ws);
    return kiln_plan_measure(m, ms->inputs, false, 0, arena, ws);
}

/* One candidate: the graph with the first k candidates recomputed, and its measure. */
typedef struct rc_try {
    kiln_model *m;
    size_t arena;
    double flops;
    int copies;
} rc_try;

/* t = the first k candidates recomputed and measured (t->m NULL on failure). */
static kiln_status rc_try_prefix(const rc_info *g, const rc_measure *ms, int k, rc_try *t) {
    memset(t, 0, sizeof *t);
    kiln_status st = rc_rewrite(g, k, &t->m, &t->flops, &t->copies);
    if (!st) st = arena_of(ms, t->m, &t->arena, NULL);
    if (st) {
        kiln_model_free(t->m);
        t->m = NULL;
    }
    return st;
}

/* best = t, the old best freed. */
static void rc_adopt(rc_try *best, rc_try *t) {
    kiln_model_free(best->m);
    *best = *t;
    t->m = NULL;
}

/* The plan of m, analysed, and its measure. */
static kiln_status rc_start(kiln_model *m, const rc_measure *ms, bool heavy, kiln_plan **p, rc_info *g,
                            kiln_recompute_result *r) {
    memset(r, 0, sizeof *r);
    kiln_status st = kiln_plan_build(m, ms->inputs, true, false, p);
    if (st) return st;
    st = arena_of(ms, m, &r->arena_before, &r->workspace);
    r->arena_after = r->arena_before;
    if (!st) st = rc_analyze(m, *p, heavy, g);
    if (st) {
        kiln_plan_free(*p);
        *p = NULL;
        return st;
    }
    r->candidates = g->n_cand;
    return KILN_OK;
}

kiln_status kiln_recompute_fit(kiln_model *m, kiln_tensor *const *inputs, kiln_recompute_measure_fn measure,
                               void *user, size_t arena_budget, int max_recompute, bool heavy, kiln_model **out,
                               kiln_recompute_result *r) {
    *out = NULL;
    kiln_plan *p = NULL;
    rc_info g;
    const rc_measure ms = {.fn = measure, .user = user, .inputs = inputs};
    kiln_status st = rc_start(m, &ms, heavy, &p, &g, r);
    if (st) return st;
    if (!arena_budget || r->arena_before <= arena_budget) {
        rc_free(&g);
        kiln_plan_free(p);
        return KILN_OK;
    }
    int hi = g.n_cand;
    if (max_recompute >= 0 && hi > max_recompute) hi = max_recompute;
    /* all of them (or the cap): the least this pass reaches */
    rc_try best;
    st = rc_try_prefix(&g, &ms, hi, &best);
    /* The arena is not monotonic in the prefix: the chains of chosen values are cut
     * differently as more are chosen, and copies alive at once add up (ResNet-50 224 AMP
     * planned for CUDA at batch 600: 6.7 GB with the first 73 candidates, 8.0 GB with all
     * 102). When all of them do not fit, the cheap values alone and every eighth of the
     * prefix are tried too: the smallest arena is the least reported, and the search for
     * the shortest prefix that fits runs below the first that does. */
    const int top = hi;
    for (int j = 0; !st && best.arena > arena_budget && j < 8; j++) {
        const int k = j == 0 ? g.n_cheap : top * j / 8;
        if (k <= 0 || k >= top || (j > 0 && k == g.n_cheap)) continue;
        rc_try t;
        st = rc_try_prefix(&g, &ms, k, &t);
        if (!st && t.arena < best.arena) {
            rc_adopt(&best, &t);
            hi = k;
        }
        kiln_model_free(t.m);
    }
    if (st || best.arena > arena_budget) {
        /* the least reached: with everything recomputed, or nothing (the placement may
         * come out larger with the copies) */
        const bool none = !best.m || best.arena >= r->arena_before;
        r->arena_after = none ? r->arena_before : best.arena;
        r->recomputed = none ? 0 : best.copies;
        r->flops = none ? 0 : best.flops;
        kiln_model_free(best.m);
        rc_free(&g);
        kiln_plan_free(p);
        return st ? st : KILN_ERR_OUT_OF_MEMORY;
    }
    int lo = 0, best_k = hi; /* lo does not fit, best_k does */
    while (best_k - lo > 1) {
        const int mid = lo + (best_k - lo) / 2;
        rc_try t;
        if ((st = rc_try_prefix(&g, &ms, mid, &t))) break;
        if (t.arena <= arena_budget) {
            rc_adopt(&best, &t);
            best_k = mid;
        } else {
            kiln_model_free(t.m);
            lo = mid;
        }
    }
    rc_free(&g);
    kiln_plan_free(p);
    if (st) {
        kiln_model_free(best.m);
        return st;
    }
    r->arena_after = best.arena;
    r->recomputed = best.copies;
    r->flops = best.flops;
    *out = best.m;
    return KILN_OK;
}
