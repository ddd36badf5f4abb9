/*
 * plan.c — a model lowered for one set of input shapes.
 *
 * Building a plan walks the nodes in topological order:
 *   1. infer each node's output dtypes and shapes (ops' infer functions);
 *   2. fold nodes whose inputs are all constants by running their CPU reference once;
 *   3. the remaining nodes form the run list; every value they produce gets a slot in
 *      one arena, placed greedily by size so that values whose lifetimes do not overlap
 *      share bytes (views such as Reshape share their input's slot).
 * A run then only binds the inputs and calls each kernel: it allocates nothing.
 */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ARENA_ALIGN 64

typedef struct exec_node {
    int node;          /* index into model nodes */
    kiln_op_ctx c;     /* in/out point into plan->vt */
} exec_node;

struct kiln_plan {
    kiln_model *m;
    int n_values;
    kiln_tensor *vt;    /* (n_values) shape, dtype and data pointer of every value */
    bool *known;        /* (n_values) value is a constant (initializer or folded) */
    bool *inferred;     /* (n_values) shape/dtype known */
    kiln_tensor **folded; /* (n_values) owned data of folded values, or NULL */
    kiln_tensor **ptrs; /* storage for the exec nodes' in/out pointer arrays */
    int n_exec;
    exec_node *exec;
    void *arena;        /* host arena (NULL for a plan whose memory lives on a device) */
    size_t *offset;     /* (n_values) byte offset of each arena value, SIZE_MAX otherwise */
    bool host_memory;
    bool measure_only; /* kiln_plan_measure: a host plan's layout, nothing allocated */
    size_t arena_bytes, naive_bytes, constant_bytes, workspace_bytes;
    void *workspace;
    int folded_nodes;
    /* key */
    kiln_tensor *key;   /* (n_inputs) shapes of the inputs */
    void **key_values;  /* (n_inputs) copied data of inputs whose values shape the graph */
    void **staging;     /* (n_inputs) NCHW copies of inputs given in NHWC, or NULL */
    /* Side streams (kiln_plan_build_ex): stream[e] of run-list node e (0: the main one),
     * waits[wait_at[e] .. wait_at[e + 1]) the nodes on other streams e waits for. */
    int n_streams;
    int *stream, *wait_at, *waits;
    /* (n_values) the graph input whose caller-bound buffer value v is computed in place
     * over (kiln_op_def.inplace_input; host plans), or -1 */
    int *inplace_of;
};

kiln_status (*kiln_plan_node_hook)(kiln_op_ctx *c) = NULL;

static kiln_context *mctx(const kiln_model *m) { return m->ctx; }

static const char *val_name(const kiln_model *m, int v) { return m->values[v].name; }

kiln_status kiln_op_fail(kiln_op_ctx *c, kiln_status st, const char *fmt, ...) {
    char head[1024], body[1024];
    const kiln_node *n = c->node;
    size_t k = (size_t)snprintf(head, sizeof head, "%s node '%s' [", n->op_type, n->name);
    for (int i = 0; i < c->n_in && k < sizeof head; i++) {
        char sh[160];
        const char *nm = (n->model && i < n->n_in && n->in[i] >= 0) ? n->model->values[n->in[i]].name : "";
        if (c->in[i])
            kiln_shape_str(c->in[i], sh, sizeof sh);
        else
            snprintf(sh, sizeof sh, "(missing)");
        k += (size_t)snprintf(head + k, sizeof head - k, "%s%s: %s", i ? ", " : "", nm, sh);
    }
    if (k < sizeof head) snprintf(head + k, sizeof head - k, "]");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    return kiln_fail(c->kctx, st, "%s: %s", head, body);
}

/* ------------------------------------------------------------------ helpers */

static bool is_graph_input(const kiln_model *m, int v) { return m->values[v].is_input; }

/* Inputs of this node that must have known values at plan time but do not. */
static int missing_value_input(const kiln_plan *p, const kiln_node *n, const kiln_op_def *d) {
    for (int k = 0; k < n->n_in && k < 32; k++) {
        if (!kiln_input_in_mask(d->value_inputs, k) || n->in[k] < 0) continue;
        int v = n->in[k];
        if (!p->known[v] && !(is_graph_input(p->m, v) && p->vt[v].data)) return k;
    }
    return -1;
}

static bool foldable(const kiln_plan *p, const kiln_node *n, const kiln_op_def *d) {
    if (d->random) return false; /* a new draw every run (Dropout in training mode) */
    for (int k = 0; k < n->n_in; k++) {
        bool shape_only = kiln_input_in_mask(d->shape_only_inputs, k);
        if (n->in[k] >= 0 && !p->known[n->in[k]] && !shape_only) return false;
    }
    return true;
}

static kiln_status alloc_tables(kiln_plan *p) {
    kiln_context *ctx = mctx(p->m);
    int nv = p->m->n_values;
    p->n_values = nv;
    p->vt = kiln_calloc(ctx, (size_t)nv, sizeof *p->vt, "plan values");
    p->known = kiln_calloc(ctx, (size_t)nv, sizeof *p->known, "plan values");
    p->inferred = kiln_calloc(ctx, (size_t)nv, sizeof *p->inferred, "plan values");
    p->folded = kiln_calloc(ctx, (size_t)nv, sizeof *p->folded, "plan values");
    p->exec = kiln_calloc(ctx, (size_t)p->m->n_nodes + 1, sizeof *p->exec, "plan nodes");
    size_t nptr = 0;
    for (int i = 0; i < p->m->n_nodes; i++) nptr += (size_t)(p->m->nodes[i].n_in + p->m->nodes[i].n_out);
    p->ptrs = kiln_calloc(ctx, nptr + 1, sizeof *p->ptrs, "plan node operands");
    if (!p->vt || !p->known || !p->inferred || !p->folded || !p->exec || !p->ptrs)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int v = 0; v < nv; v++) {
        const kiln_value *val = &p->m->values[v];
        if (val->init) {
            p->vt[v] = *val->init;
            p->vt[v].owns_data = false;
            /* the bytes are NCHW; a device plan uploads them in the value's layout */
            p->vt[v].format = !p->host_memory && val->init->ndim == 4 ? val->format : KILN_FORMAT_NCHW;
            p->known[v] = true;
            p->inferred[v] = true;
        }
    }
    return KILN_OK;
}

void kiln_plan_free(kiln_plan *p) {
    if (!p) return;
    for (int v = 0; v < p->n_values && p->folded; v++) kiln_tensor_free(p->folded[v]);
    for (int i = 0; p->key_values && i < p->m->n_inputs; i++) free(p->key_values[i]);
    for (int i = 0; p->staging && i < p->m->n_inputs; i++) free(p->staging[i]);
    free(p->staging);
    free(p->key_values);
    free(p->key);
    free(p->folded);
    free(p->vt);
    free(p->known);
    free(p->inferred);
    free(p->exec);
    free(p->ptrs);
    free(p->arena);
    free(p->offset);
    free(p->workspace);
    free(p->stream);
    free(p->wait_at);
    free(p->waits);
    free(p->inplace_of);
    free(p);
}

/* ------------------------------------------------------------- inference */

/* Walk the graph: infer, fold, and collect the run list. validate: static inference at
 * finalize (no inputs bound; nodes needing run-time values are skipped). */
static kiln_status walk(kiln_plan *p, bool validate, bool fold) {
    kiln_model *m = p->m;
    kiln_context *ctx = mctx(m);
    size_t used_ptrs = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *n = &m->nodes[i];
        const kiln_op_def *d = kiln_op_get(n->op);
        bool ready = true;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0 && !p->inferred[n->in[k]]) ready = false;
        int missing = ready ? missing_value_input(p, n, d) : -1;
        if (!ready || missing >= 0) {
            if (validate) continue; /* decided when a plan binds the inputs */
            if (missing >= 0)
                return kiln_fail(ctx, KILN_ERR_UNSUPPORTED,
                                 "%s node '%s': input %d ('%s') is computed at run time, but kiln needs its "
                                 "value when the plan is built (it determines a shape)",
                                 n->op_type, n->name, missing, val_name(m, n->in[missing]));
            return kiln_fail(ctx, KILN_ERR_INTERNAL, "%s node '%s': inputs not ready", n->op_type, n->name);
        }
        exec_node *e = &p->exec[p->n_exec];
        e->node = i;
        e->c.kctx = ctx;
        e->c.node = n;
        e->c.n_in = n->n_in;
        e->c.n_out = n->n_out;
        e->c.in = p->ptrs + used_ptrs;
        e->c.out = p->ptrs + used_ptrs + n->n_in;
        for (int k = 0; k < n->n_in; k++) e->c.in[k] = n->in[k] >= 0 ? &p->vt[n->in[k]] : NULL;
        for (int k = 0; k < n->n_out; k++) {
            kiln_tensor *t = &p->vt[n->out[k]];
            memset(t, 0, sizeof *t);
            e->c.out[k] = t;
        }
        kiln_clear_error(ctx);
        kiln_status st = d->infer(&e->c);
        if (st) {
            if (!kiln_context_message(ctx)[0]) kiln_op_fail(&e->c, st, "shape inference failed");
            return st;
        }
        for (int k = 0; k < n->n_out; k++) {
            kiln_tensor *t = e->c.out[k];
            if (!kiln_dtype_valid(t->dtype) || t->ndim < 0 || t->ndim > KILN_MAX_DIMS)
                return kiln_op_fail(&e->c, KILN_ERR_INTERNAL, "inference left output %d without a dtype or shape", k);
            for (int q = 0; q < t->ndim; q++)
                if (t->dims[q] < 0)
                    return kiln_op_fail(&e->c, KILN_ERR_SHAPE, "output %d dim %d is negative (%lld)", k, q,
                                        (long long)t->dims[q]);
            /* the count without overflow: dims can each be near INT64_MAX. Zeros are left
             * out, so that an empty tensor's other dims are bounded too: element counts
             * and strides multiply them in any order (kiln_numel of [2^62, 2^62, 0]
             * overflowed before reaching the 0). */
            const int64_t max_numel = (int64_t)1 << 40;
            bool too_big = false;
            for (int64_t numel = 1, q = 0; q < t->ndim; q++) {
                if (t->dims[q] == 0) continue;
                if (t->dims[q] > max_numel / numel) {
                    too_big = true;
                    break;
                }
                numel *= t->dims[q];
            }
            if (too_big) {
                char shape[256];
                return kiln_op_fail(&e->c, KILN_ERR_SHAPE,
                                    "output %d has more than 2^40 elements, or dims beside a 0 that would "
                                    "hold more (shape %s)", k,
                                    kiln_shape_str(t, shape, sizeof shape));
            }
            p->inferred[n->out[k]] = true;
            /* Device plans lay values out as the layout pass decided; on the host every
             * tensor is NCHW (the CPU references read no other layout). */
            t->format = !p->host_memory && t->ndim == 4 ? m->values[n->out[k]].format : KILN_FORMAT_NCHW;
        }
        if (kiln_plan_node_hook) {
            kiln_clear_error(ctx);
            st = kiln_plan_node_hook(&e->c);
            if (st) return st;
        }
        /* Shape computations (small outputs) always fold: later nodes may need their values.
         * Larger constant subgraphs fold unless the session asked for no folding. */
        bool small = true;
        for (int k = 0; k < n->n_out; k++) small = small && kiln_tensor_numel(e->c.out[k]) <= 64;
        if ((fold || small) && foldable(p, n, d)) {
            /* Run the CPU reference once; its outputs become constants of the plan. */
            for (int k = 0; k < n->n_out; k++) {
                kiln_tensor *t = e->c.out[k];
                kiln_tensor *f = kiln_tensor_new(ctx, t->dtype, t->ndim, t->dims);
                if (!f) return KILN_ERR_OUT_OF_MEMORY;
                p->folded[n->out[k]] = f;
                t->data = f->data;
            }
            size_t ws = d->cpu_workspace ? d->cpu_workspace(&e->c) : 0;
            void *w = ws ? kiln_malloc(ctx, ws, "workspace") : NULL;
            if (ws && !w) return KILN_ERR_OUT_OF_MEMORY;
            e->c.workspace = w;
            e->c.workspace_size = ws;
            st = d->cpu_forward(&e->c);
            free(w);
            e->c.workspace = NULL;
            e->c.workspace_size = 0;
            if (st) {
                if (!kiln_context_message(ctx)[0]) kiln_op_fail(&e->c, st, "constant folding failed");
                return st;
            }
            for (int k = 0; k < n->n_out; k++) p->known[n->out[k]] = true;
            p->folded_nodes++;
            continue;
        }
        used_ptrs += (size_t)(n->n_in + n->n_out);
        p->n_exec++;
    }
    return KILN_OK;
}

/* Drop run-list nodes whose outputs nothing reads: no later run-list node, no graph output.
 * They fed only shape computations that folded (a Shape of a view chain whose other readers
 * a fusion took over: src/passes/fuse_attention.c), so they neither run nor hold memory. */
static kiln_status prune_unread(kiln_plan *p) {
    kiln_model *m = p->m;
    bool *read = kiln_calloc(mctx(m), (size_t)p->n_values + 1, sizeof *read, "plan values");
    if (!read) return KILN_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < m->n_outputs; i++) read[m->outputs[i]] = true;
    bool *keep = kiln_calloc(mctx(m), (size_t)p->n_exec + 1, sizeof *keep, "plan nodes");
    if (!keep) {
        free(read);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int e = p->n_exec - 1; e >= 0; e--) {
        const kiln_node *n = &m->nodes[p->exec[e].node];
        for (int k = 0; k < n->n_out && !keep[e]; k++) keep[e] = n->out[k] >= 0 && read[n->out[k]];
        if (n->n_out == 0) keep[e] = true;
        for (int k = 0; keep[e] && k < n->n_in; k++)
            if (n->in[k] >= 0) read[n->in[k]] = true;
    }
    int w = 0;
    for (int e = 0; e < p->n_exec; e++)
        if (keep[e]) p->exec[w++] = p->exec[e];
    p->n_exec = w;
    free(keep);
    free(read);
    return KILN_OK;
}

kiln_status kiln_infer_static(kiln_model *m) {
    for (int i = 0; i < m->n_inputs; i++) {
        const kiln_value *v = &m->values[m->inputs[i]];
        if (v->ndim < 0) return KILN_OK;
        for (int d = 0; d < v->ndim; d++)
            if (v->dims[d] < 0) return KILN_OK; /* symbolic: checked per plan */
    }
    kiln_plan *p = kiln_calloc(m->ctx, 1, sizeof *p, "a plan");
    if (!p) return KILN_ERR_OUT_OF_MEMORY;
    p->m = m;
    kiln_status st = alloc_tables(p);
    if (!st) {
        for (int i = 0; i < m->n_inputs; i++) {
            const kiln_value *v = &m->values[m->inputs[i]];
            kiln_tensor_set_shape(&p->vt[m->inputs[i]], v->dtype, v->ndim, v->dims);
            p->inferred[m->inputs[i]] = true;
        }
        st = walk(p, true, true);
    }
    if (!st)
        for (int v = 0; v < m->n_values; v++) {
            kiln_value *val = &m->values[v];
            if (!p->inferred[v] || val->is_input || val->init) continue;
            val->dtype = p->vt[v].dtype;
            val->ndim = p->vt[v].ndim;
            memcpy(val->dims, p->vt[v].dims, sizeof val->dims);
        }
    kiln_plan_free(p);
    return st;
}

/* Here rather than in graph.c: the graph (core) does not call the planner above it. */
kiln_status kiln_model_finalize(kiln_model *m) {
    kiln_status st = kiln_model_check_graph(m);
    if (st) return st;
    /* Shapes and dtypes are checked now where the inputs' shapes are static; symbolic dims
     * defer the rest to the first plan. */
    st = kiln_infer_static(m);
    if (st) m->finalized = false;
    return st;
}

/* ------------------------------------------------------------ memory plan */

typedef struct slot {
    int root;          /* value index owning the bytes */
    size_t size;
    int first, last;   /* exec indices */
    size_t offset;
} slot;

static int cmp_slot_size(const void *a, const void *b) {
    const slot *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->first - y->first;
}

static size_t align_up(size_t n) { return (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1); }

/* ------------------------------------------------------------ side streams */

/* A node's rough time on a GPU in µs: launch latency, bytes at 2 TB/s, FLOPs at 50
 * TFLOP/s. Only the ranking of paths matters (which chain is the longest). */
static double node_cost(const kiln_op_ctx *c) {
    double flops, bytes;
    kiln_op_cost(c, &flops, &bytes);
    return 3.0 + bytes / 2e6 + flops / 5e7;
}

/* A node goes to a side stream when the longest path through it is shorter than the run
 * list's by at least this much (µs of node_cost): of two siblings of about the same cost
 * that both end the run (a convolution's weight and bias gradients), one goes aside. */
#define SIDE_SLACK 0.1

/* Stream assignment for a device that replays the run list as a captured graph
 * (kiln_plan_build_ex with side streams): the longest path by node_cost stays on the main
 * stream (0); every other node goes to the side stream (1..side) where a list schedule
 * would start it first, but a view (node_is_view) stays where the value it views was made. Each node then waits only for the producers of its inputs on other
 * streams, less those a vector clock shows done already (p->waits). start[e] / join[e]:
 * the last main-stream node known finished before e starts (-1: none) and the first one
 * that waits for e, directly or through a later node (n_exec: none; the device joins every
 * stream at the end of the run). Only nodes of the main stream in (start, join) can run
 * alongside e: plan_memory keeps e's values alive over that range. */
static bool same_byte_order(const kiln_tensor *a, const kiln_tensor *b);
static bool alias_ok(kiln_plan *p, int e, const kiln_op_def *d);

/* Whether run-list node e only views a value an earlier node computes (producer prod: every
 * output one plan_memory gives its input's storage, by the op's alias_outputs or alias_when):
 * it launches nothing, so on a side stream it would cost two waits and do no work (ViT-B/32's
 * 24 Flattens of the residual that kiln.FusedGemm reads went aside and cost 0.2-0.4 ms a run
 * on an H200, bench/NOTES.md twenty-third session). */
static bool node_is_view(kiln_plan *p, int e, const int *prod) {
    const kiln_node *n = &p->m->nodes[p->exec[e].node];
    const kiln_op_def *d = kiln_op_get(n->op);
    if (!d || n->n_in < 1 || n->in[0] < 0 || prod[n->in[0]] < 0 || n->n_out < 1) return false;
    const kiln_tensor *src = &p->vt[n->in[0]];
    for (int k = 0; k < n->n_out; k++) {
        const int v = n->out[k];
        if (v < 0) continue;
        if (kiln_tensor_nbytes(&p->vt[v]) != kiln_tensor_nbytes(src) ||
            !((k < 32 && (d->alias_outputs & (1u << k)) && same_byte_order(&p->vt[v], src)) ||
              (k == 0 && d->alias_when && alias_ok(p, e, d))))
            return false;
    }
    return true;
}

static kiln_status assign_streams(kiln_plan *p, int side, int *start, int *join) {
    kiln_model *m = p->m;
    kiln_context *ctx = mctx(m);
    const int n = p->n_exec, S = side + 1;
    int *prod = kiln_calloc(ctx, (size_t)p->n_values + 1, sizeof(int), "stream plan");
    double *cost = kiln_calloc(ctx, (size_t)n + 1, sizeof(double), "stream plan");
    double *head = kiln_calloc(ctx, (size_t)n + 1, sizeof(double), "stream plan");
    double *tail = kiln_calloc(ctx, (size_t)n + 1, sizeof(double), "stream plan");
    double *finish = kiln_calloc(ctx, (size_t)n + 1, sizeof(double), "stream plan");
    double *clock = kiln_calloc(ctx, (size_t)S, sizeof(double), "stream plan");
    int *vc = kiln_calloc(ctx, (size_t)S * (size_t)S, sizeof(int), "stream plan");     /* per stream */
    int *vcn = kiln_calloc(ctx, (size_t)n * (size_t)S + 1, sizeof(int), "stream plan"); /* after node */
    int nw = n; /* (one more wait per node at most: the joins of readers of recomputations below) */
    for (int e = 0; e < n; e++) nw += m->nodes[p->exec[e].node].n_in;
    p->stream = kiln_calloc(ctx, (size_t)n + 1, sizeof(int), "stream plan");
    p->wait_at = kiln_calloc(ctx, (size_t)n + 2, sizeof(int), "stream plan");
    p->waits = kiln_calloc(ctx, (size_t)nw + 1, sizeof(int), "stream plan");
    kiln_status st = KILN_OK;
    if (!prod || !cost || !head || !tail || !finish || !clock || !vc || !vcn || !p->stream || !p->wait_at || !p->waits) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    p->n_streams = S;
    for (int v = 0; v < p->n_values; v++) prod[v] = -1;
    for (int e = 0; e < n; e++) {
        const kiln_node *nd = &m->nodes[p->exec[e].node];
        cost[e] = node_is_view(p, e, prod) ? 0.0 : node_cost(&p->exec[e].c);
        for (int k = 0; k < nd->n_out; k++) prod[nd->out[k]] = e;
    }
    /* longest paths into (head) and out of (tail) every node, each counting the node */
    double longest = 0;
    for (int e = 0; e < n; e++) {
        const kiln_node *nd = &m->nodes[p->exec[e].node];
        double h = 0;
        for (int k = 0; k < nd->n_in; k++)
            if (nd->in[k] >= 0 && prod[nd->in[k]] >= 0 && head[prod[nd->in[k]]] > h) h = head[prod[nd->in[k]]];
        head[e] = h + cost[e];
        tail[e] = cost[e];
        if (head[e] > longest) longest = head[e];
    }
    for (int e = n - 1; e >= 0; e--) {
        const kiln_node *nd = &m->nodes[p->exec[e].node];
        for (int k = 0; k < nd->n_in; k++) {
            const int q = nd->in[k] >= 0 ? prod[nd->in[k]] : -1;
            if (q >= 0 && cost[q] + tail[e] > tail[q]) tail[q] = cost[q] + tail[e];
        }
    }
    /* list schedule: off the longest path, the side stream that would start the node first */
    for (int e = 0; e < n; e++) {
        const kiln_node *nd = &m->nodes[p->exec[e].node];
        double ready = 0;
        for (int k = 0; k < nd->n_in; k++) {
            const int q = nd->in[k] >= 0 ? prod[nd->in[k]] : -1;
            if (q >= 0 && finish[q] > ready) ready = finish[q];
        }
        int s = 0;
        /* A recomputation (attribute kiln_recompute, src/train/recompute.c) was placed just
         * before its backward use on purpose: on a side stream it would start as soon as its
         * inputs are ready, in the forward, and keep its output alive through the backward
         * (ResNet-50's step planned larger with every recomputation than with none). */
        const bool placed = kiln_attr_int(nd, "kiln_recompute", 0) != 0;
        if (cost[e] == 0.0) { /* a view (node_is_view): where the value it views was computed */
            s = p->stream[prod[nd->in[0]]];
        } else if (side > 0 && !placed && longest - (head[e] + tail[e] - cost[e]) >= SIDE_SLACK) {
            s = 1;
            for (int c = 2; c <= side; c++)
                if ((clock[c] > ready ? clock[c] : ready) < (clock[s] > ready ? clock[s] : ready)) s = c;
        }
        p->stream[e] = s;
        finish[e] = (clock[s] > ready ? clock[s] : ready) + cost[e];
        clock[s] = finish[e];
    }
    /* waits, pruned by vector clocks: vc[s * S + t] is the last node of stream t known
     * finished at this point of stream s (-1: none) */
    for (int i = 0; i < S * S; i++) vc[i] = -1;
    /* A side-stream node reading a recomputation keeps it alive until the main stream joins
     * it, at the end of the run when nothing waits for it (a weight gradient): every
     * recomputed value would stay alive to the end, as if stored. So the main stream's next
     * node waits for it (rc_reader[t]: the last such node of side stream t). */
    int rc_reader[KILN_PLAN_MAX_SIDE_STREAMS + 1];
    for (int t = 0; t < S; t++) rc_reader[t] = -1;
    nw = 0;
    for (int e = 0; e < n; e++) {
        const kiln_node *nd = &m->nodes[p->exec[e].node];
        const int s = p->stream[e];
        int *mine = vc + (size_t)s * S;
        p->wait_at[e] = nw;
        for (int k = 0; k < nd->n_in; k++) {
            const int q = nd->in[k] >= 0 ? prod[nd->in[k]] : -1;
            if (q < 0 || p->stream[q] == s || mine[p->stream[q]] >= q) continue;
            p->waits[nw++] = q;
            for (int t = 0; t < S; t++)
                if (vcn[(size_t)q * S + t] > mine[t]) mine[t] = vcn[(size_t)q * S + t];
        }
        for (int t = 1; s == 0 && t < S; t++) {
            const int q = rc_reader[t];
            if (q < 0 || mine[t] >= q) continue;
            p->waits[nw++] = q;
            for (int u = 0; u < S; u++)
                if (vcn[(size_t)q * S + u] > mine[u]) mine[u] = vcn[(size_t)q * S + u];
        }
        for (int k = 0; s != 0 && k < nd->n_in; k++) {
            const int q = nd->in[k] >= 0 ? prod[nd->in[k]] : -1;
            if (q >= 0 && kiln_attr_int(&m->nodes[p->exec[q].node], "kiln_recompute", 0)) rc_reader[s] = e;
        }
        start[e] = mine[0];
        join[e] = n;
        if (s == 0) /* the side nodes this main node now knows finished join here */
            for (int k = 0; k < e; k++)
                if (p->stream[k] != 0 && join[k] == n && k <= mine[p->stream[k]]) join[k] = e;
        mine[s] = e;
        memcpy(vcn + (size_t)e * S, mine, (size_t)S * sizeof(int));
    }
    p->wait_at[n] = nw;
out:
    free(prod);
    free(cost);
    free(head);
    free(tail);
    free(finish);
    free(clock);
    free(vc);
    free(vcn);
    return st;
}

/* The graph input output k of run-list node e may be computed in place over (its op's
 * inplace_input), or -1: only in a host plan, for an input the caller binds (not a
 * constant, not a graph output, not converted into a staging copy, not a value input),
 * of the same dtype and size, that no other input of the node and no later node reads,
 * and that no other output took already. */
static int inplace_source(const kiln_plan *p, int e, int k) {
    const kiln_model *m = p->m;
    const kiln_node *n = &m->nodes[p->exec[e].node];
    const kiln_op_def *d = kiln_op_get(n->op);
    if (!p->host_memory || !p->inplace_of || !d->inplace_input || n->out[k] < 0) return -1;
    const int i = d->inplace_input(n, k);
    if (i < 0 || i >= n->n_in || n->in[i] < 0) return -1;
    const int sv = n->in[i], v = n->out[k];
    if (!is_graph_input(m, sv) || p->known[sv] || m->values[sv].is_output || p->vt[v].dtype != p->vt[sv].dtype ||
        kiln_tensor_nbytes(&p->vt[v]) != kiln_tensor_nbytes(&p->vt[sv]))
        return -1;
    for (int j = 0; j < m->n_inputs; j++)
        if (m->inputs[j] == sv && (p->staging[j] || p->key_values[j])) return -1;
    for (int j = 0; j < n->n_in; j++)
        if (j != i && n->in[j] == sv) return -1;
    for (int e2 = e + 1; e2 < p->n_exec; e2++) {
        const kiln_node *n2 = &m->nodes[p->exec[e2].node];
        for (int j = 0; j < n2->n_in; j++)
            if (n2->in[j] == sv) return -1;
    }
    for (int w = 0; w < p->n_values; w++)
        if (p->inplace_of[w] == sv) return -1;
    return sv;
}

/* Whether a and b, of equal sizes, hold their elements in the same byte order: the same
 * layout, or a 4-D tensor whose bytes are the same in NCHW and NHWC (C == 1 or H*W == 1).
 * A view may share its input's storage only then. */
static bool same_byte_order(const kiln_tensor *a, const kiln_tensor *b) {
    const bool nhwc_a = a->ndim == 4 && a->format == KILN_FORMAT_NHWC;
    const bool nhwc_b = b->ndim == 4 && b->format == KILN_FORMAT_NHWC;
    if (nhwc_a == nhwc_b) return true;
    const kiln_tensor *t = nhwc_a ? a : b;
    return t->dims[1] == 1 || t->dims[2] * t->dims[3] == 1;
}

/* Node e's output 0 may be its input 0's storage (the op's alias_when on the plan's tensors;
 * its messages, if any, kept out of the context). */
static bool alias_ok(kiln_plan *p, int e, const kiln_op_def *d) {
    kiln_op_ctx c = p->exec[e].c;
    kiln_context quiet = {0};
    c.kctx = &quiet;
    return c.n_in > 0 && c.n_out > 0 && c.in[0] && c.out[0] && d->alias_when(&c);
}

static kiln_status plan_memory(kiln_plan *p, const int *start, const int *join) {
    kiln_model *m = p->m;
    kiln_context *ctx = mctx(m);
    int nv = p->n_values;
    int *root = kiln_calloc(ctx, (size_t)nv, sizeof(int), "memory plan");
    int *first = kiln_calloc(ctx, (size_t)nv, sizeof(int), "memory plan");
    int *last = kiln_calloc(ctx, (size_t)nv, sizeof(int), "memory plan");
    int *slot_of = kiln_calloc(ctx, (size_t)nv, sizeof(int), "memory plan");
    slot *slots = kiln_calloc(ctx, (size_t)nv + 1, sizeof(slot), "memory plan");
    kiln_status st = KILN_OK;
    if (!root || !first || !last || !slot_of || !slots) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    for (int v = 0; v < nv; v++) {
        root[v] = -1;
        first[v] = last[v] = -1;
        slot_of[v] = -1;
    }
    if (p->host_memory) {
        p->inplace_of = kiln_calloc(ctx, (size_t)nv + 1, sizeof(int), "memory plan");
        if (!p->inplace_of) {
            st = KILN_ERR_OUT_OF_MEMORY;
            goto out;
        }
        for (int v = 0; v < nv; v++) p->inplace_of[v] = -1;
    }
    /* Values produced by run-list nodes live in the arena; views share their input's root. */
    for (int e = 0; e < p->n_exec; e++) {
        const kiln_node *n = &m->nodes[p->exec[e].node];
        const kiln_op_def *d = kiln_op_get(n->op);
        for (int k = 0; k < n->n_out; k++) {
            int v = n->out[k];
            const int over = inplace_source(p, e, k);
            if (over >= 0) { /* the caller's buffer: no slot in the arena */
                p->inplace_of[v] = over;
                p->vt[v].data = p->vt[over].data;
                continue;
            }
            int src = n->n_in > 0 ? n->in[0] : -1;
            bool alias = k < 32 && src >= 0 && root[src] >= 0 &&
                         kiln_tensor_nbytes(&p->vt[v]) == kiln_tensor_nbytes(&p->vt[src]) &&
                         (((d->alias_outputs & (1u << k)) && same_byte_order(&p->vt[v], &p->vt[src])) ||
                          (k == 0 && d->alias_when && alias_ok(p, e, d)));
            root[v] = alias ? root[src] : v;
            if (first[root[v]] < 0) first[root[v]] = e;
            if (last[root[v]] < e) last[root[v]] = e;
        }
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            if (v >= 0 && root[v] >= 0 && last[root[v]] < e) last[root[v]] = e;
        }
    }
    for (int i = 0; i < m->n_outputs; i++) {
        int v = m->outputs[i];
        if (root[v] >= 0) last[root[v]] = p->n_exec;
    }
    /* A side-stream node may run alongside the main stream's nodes in (start, join): the
     * values it reads and writes stay alive over all of [start, join]. */
    for (int e = 0; start && e < p->n_exec; e++) {
        if (!p->stream[e]) continue;
        const kiln_node *n = &m->nodes[p->exec[e].node];
        const int lo = start[e] > 0 ? start[e] : 0;
        for (int k = 0; k < n->n_in + n->n_out; k++) {
            const int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
            if (v < 0 || root[v] < 0) continue;
            if (first[root[v]] > lo) first[root[v]] = lo;
            if (last[root[v]] < join[e]) last[root[v]] = join[e];
        }
    }
    int ns = 0;
    for (int v = 0; v < nv; v++) {
        if (root[v] != v) continue;
        size_t sz = align_up(kiln_tensor_nbytes(&p->vt[v]));
        slots[ns] = (slot){.root = v, .size = sz, .first = first[v], .last = last[v]};
        p->naive_bytes += sz;
        ns++;
    }
    qsort(slots, (size_t)ns, sizeof *slots, cmp_slot_size);
    /* Greedy by size: place each slot at the lowest offset that does not overlap any
     * already-placed slot alive at the same time. */
    size_t peak = 0;
    for (int i = 0; i < ns; i++) {
        size_t off = 0;
        bool moved = true;
        while (moved) {
            moved = false;
            for (int j = 0; j < i; j++) {
                if (slots[j].last < slots[i].first || slots[i].last < slots[j].first) continue;
                if (off < slots[j].offset + slots[j].size && slots[j].offset < off + slots[i].size) {
                    off = slots[j].offset + slots[j].size;
                    moved = true;
                }
            }
        }
        slots[i].offset = off;
        if (off + slots[i].size > peak) peak = off + slots[i].size;
        slot_of[slots[i].root] = i;
    }
    p->arena_bytes = peak;
    p->offset = kiln_calloc(ctx, (size_t)nv + 1, sizeof(size_t), "memory plan");
    if (!p->offset) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    for (int v = 0; v < nv; v++) p->offset[v] = root[v] >= 0 ? slots[slot_of[root[v]]].offset : SIZE_MAX;
    if (!p->host_memory) goto out; /* a device backend allocates and binds its own arena */
    if (p->measure_only) {
        for (int e = 0; e < p->n_exec; e++) {
            const kiln_op_def *d = kiln_op_get(m->nodes[p->exec[e].node].op);
            const size_t w = d->cpu_workspace ? d->cpu_workspace(&p->exec[e].c) : 0;
            if (align_up(w) > p->workspace_bytes) p->workspace_bytes = align_up(w);
        }
        goto out;
    }
    /* At least one line even when every value is empty, so that each value's data points
     * into the arena (NULL + offset is undefined, and kernels pass data to memcpy). */
    p->arena = aligned_alloc(ARENA_ALIGN, peak ? align_up(peak) : ARENA_ALIGN);
    if (!p->arena) {
        st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory allocating the %zu-byte activation arena", peak);
        goto out;
    }
    for (int v = 0; v < nv; v++)
        if (root[v] >= 0) p->vt[v].data = (char *)p->arena + p->offset[v];
    /* One workspace shared by all kernels: they run one at a time. */
    size_t ws = 0;
    for (int e = 0; e < p->n_exec; e++) {
        const kiln_op_def *d = kiln_op_get(m->nodes[p->exec[e].node].op);
        size_t w = d->cpu_workspace ? d->cpu_workspace(&p->exec[e].c) : 0;
        if (w > ws) ws = w;
    }
    p->workspace_bytes = align_up(ws);
    if (ws) {
        p->workspace = aligned_alloc(ARENA_ALIGN, p->workspace_bytes);
        if (!p->workspace) {
            st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory allocating a %zu-byte workspace", ws);
            goto out;
        }
    }
    for (int e = 0; e < p->n_exec; e++) {
        p->exec[e].c.workspace = p->workspace;
        p->exec[e].c.workspace_size = p->workspace_bytes;
    }
out:
    free(root);
    free(first);
    free(last);
    free(slot_of);
    free(slots);
    return st;
}

/* ------------------------------------------------------------ plan build */

/* Graph inputs whose values shape the graph: they become part of the plan's key. */
static bool feeds_value_input(const kiln_model *m, int v) {
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *n = &m->nodes[i];
        const kiln_op_def *d = kiln_op_get(n->op);
        for (int k = 0; k < n->n_in && k < 32; k++)
            if (n->in[k] == v && kiln_input_in_mask(d->value_inputs, k)) return true;
    }
    return false;
}

bool kiln_plan_input_sets_shapes(const kiln_model *m, int i) {
    return i >= 0 && i < m->n_inputs && feeds_value_input(m, m->inputs[i]);
}

static kiln_status bind_inputs(kiln_plan *p, kiln_tensor *const *inputs) {
    kiln_model *m = p->m;
    for (int i = 0; i < m->n_inputs; i++) {
        const kiln_value *v = &m->values[m->inputs[i]];
        const kiln_tensor *t = inputs[i];
        char got[200];
        if (!t) return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "input %d ('%s') is NULL", i, v->name);
        kiln_shape_str(t, got, sizeof got);
        if (t->dtype != v->dtype)
            return kiln_fail(m->ctx, KILN_ERR_TYPE, "input '%s' must be %s, got %s", v->name,
                             kiln_dtype_name(v->dtype), got);
        bool ok = v->ndim < 0 || t->ndim == v->ndim;
        for (int d = 0; ok && v->ndim >= 0 && d < v->ndim; d++)
            if (v->dims[d] >= 0 && v->dims[d] != t->dims[d]) ok = false;
        if (!ok) {
            char want[200];
            size_t k = (size_t)snprintf(want, sizeof want, "%s[", kiln_dtype_name(v->dtype));
            for (int d = 0; d < v->ndim && k < sizeof want; d++) {
                if (v->dims[d] >= 0)
                    k += (size_t)snprintf(want + k, sizeof want - k, d ? ",%lld" : "%lld", (long long)v->dims[d]);
                else
                    k += (size_t)snprintf(want + k, sizeof want - k, d ? ",%s" : "%s",
                                          v->dim_param[d] ? v->dim_param[d] : "?");
            }
            if (k < sizeof want) snprintf(want + k, sizeof want - k, "]");
            return kiln_fail(m->ctx, KILN_ERR_SHAPE, "input '%s' must have shape %s, got %s", v->name, want, got);
        }
        kiln_tensor *pt = &p->vt[m->inputs[i]];
        kiln_tensor_set_shape(pt, t->dtype, t->ndim, t->dims);
        pt->data = t->data;
        pt->format = t->format;
    }
    return KILN_OK;
}

kiln_status kiln_plan_build(kiln_model *m, kiln_tensor *const *inputs, bool fold, bool host_memory,
                            kiln_plan **out) {
    return kiln_plan_build_ex(m, inputs, fold, host_memory, 0, out);
}

static kiln_status plan_build(kiln_model *m, kiln_tensor *const *inputs, bool fold, bool host_memory, bool measure,
                              int side_streams, kiln_plan **out);

kiln_status kiln_plan_build_ex(kiln_model *m, kiln_tensor *const *inputs, bool fold, bool host_memory,
                               int side_streams, kiln_plan **out) {
    return plan_build(m, inputs, fold, host_memory, false, side_streams, out);
}

kiln_status kiln_plan_measure(kiln_model *m, kiln_tensor *const *inputs, bool host_layout, int side_streams,
                              size_t *arena_bytes, size_t *workspace_bytes) {
    if (!host_layout) /* a device plan's, with no backend to ask for scratch */
        return kiln_plan_measure_device(m, inputs, side_streams, NULL, NULL, arena_bytes, workspace_bytes);
    kiln_plan *p = NULL;
    kiln_status st = plan_build(m, inputs, true, true, true, side_streams, &p);
    if (st) return st;
    *arena_bytes = p->arena_bytes;
    if (workspace_bytes) *workspace_bytes = p->workspace_bytes;
    kiln_plan_free(p);
    return KILN_OK;
}

kiln_status kiln_plan_measure_device(kiln_model *m, kiln_tensor *const *inputs, int side_streams,
                                     kiln_plan_workspace_fn ws, void *ws_user, size_t *arena_bytes,
                                     size_t *workspace_bytes) {
    kiln_plan *p = NULL;
    kiln_status st = plan_build(m, inputs, true, false, false, side_streams, &p);
    if (st) return st;
    size_t most = 0;
    for (int e = 0; e < p->n_exec && ws && !st; e++) {
        size_t b = 0;
        st = ws(ws_user, &p->exec[e].c, &b);
        if (b > most) most = b;
    }
    const size_t streams = p->stream ? (size_t)p->n_streams : 1;
    *arena_bytes = p->arena_bytes;
    if (workspace_bytes) *workspace_bytes = ((most + 255) & ~(size_t)255) * streams;
    kiln_plan_free(p);
    return st;
}

static kiln_status plan_build(kiln_model *m, kiln_tensor *const *inputs, bool fold, bool host_memory, bool measure,
                              int side_streams, kiln_plan **out) {
    *out = NULL;
    if (side_streams < 0 || side_streams > KILN_PLAN_MAX_SIDE_STREAMS)
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "side streams must be 0 to %d, got %d",
                         KILN_PLAN_MAX_SIDE_STREAMS, side_streams);
    if (!m->finalized)
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "the model is not finalized");
    kiln_plan *p = kiln_calloc(m->ctx, 1, sizeof *p, "a plan");
    if (!p) return KILN_ERR_OUT_OF_MEMORY;
    p->m = m;
    p->host_memory = host_memory;
    p->measure_only = measure;
    kiln_status st = alloc_tables(p);
    if (!st) {
        p->key = kiln_calloc(m->ctx, (size_t)m->n_inputs + 1, sizeof *p->key, "plan key");
        p->key_values = kiln_calloc(m->ctx, (size_t)m->n_inputs + 1, sizeof *p->key_values, "plan key");
        p->staging = kiln_calloc(m->ctx, (size_t)m->n_inputs + 1, sizeof *p->staging, "plan inputs");
        if (!p->key || !p->key_values || !p->staging) st = KILN_ERR_OUT_OF_MEMORY;
    }
    if (!st) st = bind_inputs(p, inputs);
    for (int i = 0; !st && i < m->n_inputs; i++) {
        int v = m->inputs[i];
        p->inferred[v] = true;
        p->key[i] = *inputs[i];
        p->key[i].data = NULL;
        if (inputs[i]->ndim == 4 && inputs[i]->format == KILN_FORMAT_NHWC) {
            /* Kernels read NCHW: NHWC inputs are converted into plan-owned memory each run. */
            p->staging[i] = kiln_malloc(m->ctx, kiln_tensor_nbytes(inputs[i]) + 1, "an NCHW copy of an NHWC input");
            if (!p->staging[i]) {
                st = KILN_ERR_OUT_OF_MEMORY;
                break;
            }
            kiln_layout_convert(inputs[i], p->staging[i], KILN_FORMAT_NCHW);
            p->vt[v].data = p->staging[i];
            p->vt[v].format = KILN_FORMAT_NCHW;
        }
        if (feeds_value_input(m, v)) {
            size_t nb = kiln_tensor_nbytes(inputs[i]);
            p->key_values[i] = kiln_malloc(m->ctx, nb + 1, "plan key");
            if (!p->key_values[i]) st = KILN_ERR_OUT_OF_MEMORY;
            else memcpy(p->key_values[i], inputs[i]->data, nb);
            /* the plan's own copy: device backends read these values when they launch
             * kernels (kiln_op_ctx.host_in), after the caller's buffer may be gone */
            if (p->key_values[i] && !p->staging[i]) p->vt[v].data = p->key_values[i];
        }
    }
    if (!st) st = walk(p, false, fold);
    if (!st) st = prune_unread(p);
    int *start = NULL, *join = NULL;
    if (!st && side_streams > 0) {
        start = kiln_calloc(m->ctx, (size_t)p->n_exec + 1, sizeof(int), "stream plan");
        join = kiln_calloc(m->ctx, (size_t)p->n_exec + 1, sizeof(int), "stream plan");
        st = start && join ? assign_streams(p, side_streams, start, join) : KILN_ERR_OUT_OF_MEMORY;
    }
    if (!st) st = plan_memory(p, start, join);
    free(start);
    free(join);
    if (!st) {
        for (int v = 0; v < p->n_values; v++)
            if (p->known[v]) p->constant_bytes += kiln_tensor_nbytes(&p->vt[v]);
        for (int i = 0; i < m->n_outputs; i++)
            if (!p->inferred[m->outputs[i]]) {
                st = kiln_fail(m->ctx, KILN_ERR_INTERNAL, "output '%s' was not computed",
                               val_name(m, m->outputs[i]));
                break;
            }
    }
    if (st) {
        kiln_plan_free(p);
        return st;
    }
    *out = p;
    return KILN_OK;
}

bool kiln_plan_matches(const kiln_plan *p, kiln_tensor *const *inputs) {
    const kiln_model *m = p->m;
    for (int i = 0; i < m->n_inputs; i++) {
        const kiln_tensor *a = &p->key[i], *b = inputs[i];
        if (!b || a->dtype != b->dtype || a->ndim != b->ndim || a->format != b->format) return false;
        for (int d = 0; d < a->ndim; d++)
            if (a->dims[d] != b->dims[d]) return false;
        if (p->key_values[i] && memcmp(p->key_values[i], b->data, kiln_tensor_nbytes(b)) != 0)
            return false;
    }
    return true;
}

static void bind_run_inputs(kiln_plan *p, kiln_tensor *const *inputs) {
    kiln_model *m = p->m;
    for (int i = 0; i < m->n_inputs; i++) {
        if (p->staging[i]) kiln_layout_convert(inputs[i], p->staging[i], KILN_FORMAT_NCHW);
        p->vt[m->inputs[i]].data = p->staging[i] ? p->staging[i] : inputs[i]->data;
    }
    for (int v = 0; p->inplace_of && v < p->n_values; v++)
        if (p->inplace_of[v] >= 0) p->vt[v].data = p->vt[p->inplace_of[v]].data;
}

static kiln_status run_node(kiln_plan *p, int e, uint64_t seed) {
    kiln_context *ctx = mctx(p->m);
    exec_node *x = &p->exec[e];
    const kiln_op_def *d = kiln_op_get(x->c.node->op);
    x->c.seed = seed;
    kiln_clear_error(ctx);
    /* a view the memory plan made (alias_when): the output is the input's storage */
    if (d->alias_when && x->c.n_in > 0 && x->c.in[0] && x->c.out[0]->data == x->c.in[0]->data) return KILN_OK;
    kiln_status st = d->cpu_forward(&x->c);
    if (st && !kiln_context_message(ctx)[0]) kiln_op_fail(&x->c, st, "CPU kernel failed");
    return st;
}

kiln_status kiln_plan_run_cpu(kiln_plan *p, kiln_tensor *const *inputs, uint64_t seed,
                              int n_outputs, const kiln_tensor **outputs) {
    kiln_model *m = p->m;
    bind_run_inputs(p, inputs);
    for (int e = 0; e < p->n_exec; e++) {
        kiln_status st = run_node(p, e, seed);
        if (st) return st;
    }
    for (int j = 0; j < n_outputs && j < m->n_outputs; j++) outputs[j] = &p->vt[m->outputs[j]];
    return KILN_OK;
}

static double host_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

kiln_status kiln_plan_profile_cpu(kiln_plan *p, kiln_tensor *const *inputs, uint64_t seed, int iters,
                                  double *ms, double *start_ms) {
    const int n = p->n_exec;
    for (int it = 0; it < iters; it++) {
        bind_run_inputs(p, inputs);
        const double t0 = host_ms();
        for (int e = 0; e < n; e++) {
            const double t = host_ms();
            kiln_status st = run_node(p, e, seed);
            if (st) return st;
            start_ms[(size_t)it * n + e] = t - t0;
            ms[(size_t)it * n + e] = host_ms() - t;
        }
    }
    return KILN_OK;
}

void kiln_op_cost(const kiln_op_ctx *c, double *flops, double *bytes) {
    *flops = 0;
    *bytes = 0;
    for (int k = 0; k < c->n_in; k++)
        if (c->in[k]) *bytes += (double)kiln_tensor_nbytes(c->in[k]);
    for (int k = 0; k < c->n_out; k++)
        if (c->out[k]) *bytes += (double)kiln_tensor_nbytes(c->out[k]);
    /* the op's own count (products of convolutions and matrix products; 0 for others) */
    const kiln_op_def *d = kiln_node_def(c->node);
    if (d && d->flops) *flops = d->flops(c);
}

void kiln_plan_view(const kiln_plan *p, kiln_plan_view_t *v) {
    v->m = p->m;
    v->n_values = p->n_values;
    v->vt = p->vt;
    v->known = p->known;
    v->offset = p->offset;
    v->arena_bytes = p->arena_bytes;
    v->n_exec = p->n_exec;
    v->exec = p->exec;
    v->exec_stride = sizeof(exec_node);
    v->n_streams = p->stream ? p->n_streams : 1;
    v->stream = p->stream;
    v->wait_at = p->wait_at;
    v->waits = p->waits;
}

const kiln_op_ctx *kiln_plan_exec_op_ctx(const kiln_plan_view_t *v, int i) {
    return &((const exec_node *)((const char *)v->exec + (size_t)i * v->exec_stride))->c;
}

void kiln_plan_get_stats(const kiln_plan *p, kiln_plan_stats *out) {
    memset(out, 0, sizeof *out);
    out->arena_bytes = p->arena_bytes;
    out->naive_bytes = p->naive_bytes;
    out->constant_bytes = p->constant_bytes;
    out->workspace_bytes = p->workspace_bytes;
    out->nodes = p->n_exec;
    out->folded = p->folded_nodes;
}

/* Evaluate one node on owning tensors (tests, tools). */
kiln_status kiln_op_eval(kiln_context *ctx, const kiln_node *node, int n_in, kiln_tensor **in,
                         int n_out, kiln_tensor **out) {
    return kiln_op_eval_ws(ctx, node, n_in, in, n_out, out, 0);
}

kiln_status kiln_op_eval_ws(kiln_context *ctx, const kiln_node *node, int n_in, kiln_tensor **in, int n_out,
                            kiln_tensor **out, size_t extra_ws) {
    const kiln_op_def *d = kiln_op_get(node->op);
    if (!d) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "op '%s' is not supported by kiln", node->op_type);
    if (n_out < 0) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "%s: %d outputs", node->op_type, n_out);
    /* any number of outputs (an OptimizerStep over many parameters has hundreds) */
    kiln_tensor *shapes = calloc((size_t)n_out + 1, sizeof *shapes);
    kiln_tensor **outs = calloc((size_t)n_out + 1, sizeof *outs);
    if (!shapes || !outs) {
        free(shapes);
        free(outs);
        return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %d outputs", node->op_type, n_out);
    }
    for (int k = 0; k < n_out; k++) {
        outs[k] = &shapes[k];
        out[k] = NULL;
    }
    kiln_op_ctx c = {.kctx = ctx, .node = node, .n_in = n_in, .in = in, .n_out = n_out, .out = outs};
    kiln_clear_error(ctx);
    kiln_status st = d->infer(&c);
    if (st) {
        if (!kiln_context_message(ctx)[0]) kiln_op_fail(&c, st, "shape inference failed");
        free(shapes);
        free(outs);
        return st;
    }
    for (int k = 0; k < n_out; k++) {
        out[k] = kiln_tensor_new(ctx, shapes[k].dtype, shapes[k].ndim, shapes[k].dims);
        if (!out[k]) {
            for (int j = 0; j < k; j++) {
                kiln_tensor_free(out[j]);
                out[j] = NULL;
            }
            free(shapes);
            free(outs);
            return kiln_fail(ctx, KILN_ERR_INTERNAL, "%s: inference gave output %d an invalid dtype or shape",
                             node->op_type, k);
        }
        outs[k] = out[k];
    }
    free(shapes); /* c.out now points at out[] through outs */
    size_t ws = (d->cpu_workspace ? d->cpu_workspace(&c) : 0) + extra_ws;
    void *w = ws ? aligned_alloc(ARENA_ALIGN, align_up(ws)) : NULL;
    if (ws && !w) st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for workspace");
    c.workspace = w;
    c.workspace_size = ws;
    if (!st) st = d->cpu_forward(&c);
    free(w);
    if (st) {
        if (!kiln_context_message(ctx)[0]) kiln_op_fail(&c, st, "CPU kernel failed");
        for (int k = 0; k < n_out; k++) {
            kiln_tensor_free(out[k]);
            out[k] = NULL;
        }
    }
    free(outs);
    return st;
}
