/* session.c — sessions: a model bound to a device, with one cached plan per input shape. */
#include "internal.h"
#include "backend.h"
#include "plan.h"
#include "../passes/passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_PLANS 8

/* A plan for one input shape, the backend's (which owns its host plan). */
typedef struct session_plan {
    void *p;
} session_plan;

struct kiln_session {
    kiln_model *m;          /* what plans are built from: the optimized copy */
    kiln_model *optimized;  /* owned: the user's model after the passes */
    kiln_session_options opts;
    session_plan plans[MAX_PLANS]; /* most recently used first */
    int n_plans;
    uint64_t runs;
    const kiln_backend_i *bi; /* the device's backend */
    void *be;                 /* its instance */
};

static kiln_plan *host_plan(const kiln_session *s, const session_plan *sp) { return s->bi->plan_host(sp->p); }

static void free_plan(kiln_session *s, session_plan *sp) {
    if (sp->p) s->bi->plan_free(sp->p);
    memset(sp, 0, sizeof *sp);
}

/* The backend options a session's settings ask for. */
static kiln_backend_options backend_options(const kiln_session_options *o) {
    /* autotuning (timed cuDNN algorithms, cached on disk) unless switched off */
    kiln_backend_options bo = {.no_autotune = (o->disable_passes & KILN_PASS_AUTOTUNE) != 0,
                               .deterministic = o->deterministic != 0,
                               .no_conv_gemm = (o->disable_passes & KILN_PASS_CONV_GEMM) != 0,
                               .no_conv_direct = (o->disable_passes & KILN_PASS_CONV_DIRECT) != 0,
                               .no_streams = (o->disable_passes & KILN_PASS_STREAMS) != 0};
    return bo;
}

kiln_status kiln_session_create(kiln_model *m, const kiln_session_options *opts, kiln_session **out) {
    kiln_session_options o = {0};
    if (opts) o = *opts;
    kiln_backend_options bo = backend_options(&o);
    return kiln_session_create_ex(m, &o, &bo, true, out);
}

kiln_status kiln_session_create_ex(kiln_model *m, const kiln_session_options *opts, const kiln_backend_options *bo,
                                   bool apply_passes, kiln_session **out) {
    if (!m || !out || !opts || !bo) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!m->finalized)
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "the model must be finalized before a session runs it");
    const kiln_session_options o = *opts;
    const kiln_backend_i *bi = NULL;
    kiln_status bst = kiln_backend_get(m->ctx, o.device, &bi);
    if (bst) return bst;
    if (o.threads < 0) return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "threads must be >= 0");
    if (o.precision != KILN_PRECISION_FP32 && o.precision != KILN_PRECISION_FP16 && o.precision != KILN_PRECISION_BF16)
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "unknown precision %d", (int)o.precision);
    kiln_session *s = kiln_calloc(m->ctx, 1, sizeof *s, "a session");
    if (!s) return KILN_ERR_OUT_OF_MEMORY;
    s->m = m;
    s->opts = o;
    s->bi = bi;
    if (apply_passes) {
        kiln_pass_options po = {.device = o.device, .precision = o.precision, .disabled = o.disable_passes};
        /* NHWC pays off with tensor cores (fp16/bf16): on the H200 fp32 NHWC made ResNet-50 at
         * batch 256 1.5x slower than NCHW (bench/NOTES.md) */
        if (o.precision == KILN_PRECISION_FP32) po.disabled |= KILN_PASS_NHWC;
        kiln_status pst = kiln_passes_apply(m, &po, &s->optimized);
        if (pst) {
            free(s);
            return pst;
        }
        s->m = s->optimized;
    }
    kiln_status st = bi->create(m->ctx, bo, &s->be);
    if (st) {
        kiln_model_free(s->optimized);
        free(s);
        return st;
    }
    *out = s;
    return KILN_OK;
}

void kiln_session_free(kiln_session *s) {
    if (!s) return;
    for (int i = 0; i < s->n_plans; i++) free_plan(s, &s->plans[i]);
    s->bi->free(s->be);
    kiln_model_free(s->optimized);
    free(s);
}

static kiln_status find_plan(kiln_session *s, kiln_tensor *const *inputs, session_plan **out) {
    for (int i = 0; i < s->n_plans; i++) {
        if (!kiln_plan_matches(host_plan(s, &s->plans[i]), inputs)) continue;
        session_plan p = s->plans[i];
        memmove(&s->plans[1], &s->plans[0], (size_t)i * sizeof(session_plan));
        s->plans[0] = p;
        *out = &s->plans[0];
        return KILN_OK;
    }
    session_plan p = {0};
    const kiln_backend_plan_options po = {.fold = !s->opts.no_fold,
                                          .use_graph = !(s->opts.disable_passes & KILN_PASS_CUDA_GRAPH)};
    kiln_status st = s->bi->plan_create(s->be, s->m, inputs, &po, &p.p);
    if (st) return st;
    if (s->n_plans == MAX_PLANS) free_plan(s, &s->plans[--s->n_plans]);
    memmove(&s->plans[1], &s->plans[0], (size_t)s->n_plans * sizeof(session_plan));
    s->plans[0] = p;
    s->n_plans++;
    *out = &s->plans[0];
    return KILN_OK;
}

kiln_status kiln_session_run(kiln_session *s, int n_inputs, kiln_tensor *const *inputs,
                             int n_outputs, const kiln_tensor **outputs) {
    if (!s) return KILN_ERR_INVALID_ARGUMENT;
    return kiln_session_run_seeded(s, s->runs, n_inputs, inputs, n_outputs, outputs);
}

kiln_status kiln_session_run_seeded(kiln_session *s, uint64_t seed, int n_inputs, kiln_tensor *const *inputs,
                                    int n_outputs, const kiln_tensor **outputs) {
    if (!s) return KILN_ERR_INVALID_ARGUMENT;
    kiln_model *m = s->m;
    if (n_inputs != m->n_inputs)
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "the model takes %d inputs, %d were given",
                         m->n_inputs, n_inputs);
    if (n_inputs && !inputs) return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "inputs is NULL");
    if (n_outputs < 0 || n_outputs > m->n_outputs || (n_outputs && !outputs))
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "asked for %d outputs; the model has %d",
                         n_outputs, m->n_outputs);
    for (int i = 0; i < n_inputs; i++)
        if (!inputs[i] || (!inputs[i]->data && kiln_tensor_numel(inputs[i]) > 0))
            return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "input %d ('%s') has no data", i,
                             kiln_model_input_name(m, i));
    if (s->opts.threads) kiln_cpu_set_threads(s->opts.threads);
    session_plan *p = NULL;
    kiln_status st = find_plan(s, inputs, &p);
    if (st) return st;
    s->runs++;
    return s->bi->plan_run(p->p, inputs, seed, n_outputs, outputs);
}

kiln_status kiln_session_stats(const kiln_session *s, kiln_plan_stats *out) {
    if (!s || !out) return KILN_ERR_INVALID_ARGUMENT;
    if (!s->n_plans) return kiln_fail(s->m->ctx, KILN_ERR_INVALID_ARGUMENT, "the session has not run yet");
    kiln_plan_get_stats(host_plan(s, &s->plans[0]), out);
    return KILN_OK;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

kiln_status kiln_session_bench(kiln_session *s, int n_inputs, kiln_tensor *const *inputs, int warmup, int iters,
                               kiln_bench_times *t) {
    if (!s || !t || iters < 1 || warmup < 0) return KILN_ERR_INVALID_ARGUMENT;
    const kiln_tensor *outs[64];
    int n_out = s->m->n_outputs < 64 ? s->m->n_outputs : 64;
    double t0 = now_ms();
    kiln_status st = kiln_session_run(s, n_inputs, inputs, n_out, outs);
    t->first_ms = now_ms() - t0;
    for (int i = 0; i < warmup && !st; i++) st = kiln_session_run(s, n_inputs, inputs, n_out, outs);
    for (int i = 0; i < iters && !st; i++) {
        t0 = now_ms();
        st = kiln_session_run(s, n_inputs, inputs, n_out, outs);
        t->run_ms[i] = now_ms() - t0;
        t->compute_ms[i] = t->run_ms[i];
    }
    t->h2d_ms = t->d2h_ms = 0;
    if (!st && s->bi->plan_time)
        st = s->bi->plan_time(s->plans[0].p, inputs, iters, t->compute_ms, &t->h2d_ms, &t->d2h_ms);
    return st;
}

static int cmp_ms(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double kiln_median(double *v, int n) {
    if (n < 1) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_ms);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void kiln_profile_free(kiln_profile *p) {
    if (!p) return;
    free(p->nodes);
    memset(p, 0, sizeof *p);
}

static void shapes_str(const kiln_op_ctx *c, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < c->n_in + c->n_out && k + 1 < n; i++) {
        const kiln_tensor *t = i < c->n_in ? c->in[i] : c->out[i - c->n_in];
        char sh[160];
        if (t) kiln_shape_str(t, sh, sizeof sh);
        else snprintf(sh, sizeof sh, "-");
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i == c->n_in ? " -> " : i ? " " : "", sh);
    }
}

kiln_status kiln_profile_from_passes(kiln_context *ctx, kiln_plan *hp, int iters, const double *ms,
                                     const double *start_ms, kiln_profile *out) {
    memset(out, 0, sizeof *out);
    kiln_plan_view_t v;
    kiln_plan_view(hp, &v);
    const int n = v.n_exec;
    double *col = kiln_calloc(ctx, (size_t)iters + 1, sizeof *col, "profile times");
    double *tot = kiln_calloc(ctx, (size_t)iters + 1, sizeof *tot, "profile times");
    out->nodes = kiln_calloc(ctx, (size_t)n + 1, sizeof *out->nodes, "profile nodes");
    if (!col || !tot || !out->nodes) {
        free(col);
        free(tot);
        kiln_profile_free(out);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    /* the traced pass: the one whose total is the median */
    int traced = 0;
    for (int i = 0; i < iters; i++) {
        tot[i] = 0;
        for (int e = 0; e < n; e++) tot[i] += ms[(size_t)i * n + e];
        col[i] = tot[i];
    }
    qsort(col, (size_t)iters, sizeof *col, cmp_ms);
    for (int i = 0; i < iters; i++)
        if (tot[i] == col[iters / 2]) traced = i;
    out->n = n;
    out->iters = iters;
    for (int e = 0; e < n; e++) {
        kiln_profile_node *pn = &out->nodes[e];
        const kiln_op_ctx *c = kiln_plan_exec_op_ctx(&v, e);
        pn->op_type = c->node->op_type;
        pn->name = c->node->name;
        shapes_str(c, pn->shapes, sizeof pn->shapes);
        kiln_op_cost(c, &pn->flops, &pn->bytes);
        for (int i = 0; i < iters; i++) col[i] = ms[(size_t)i * n + e];
        pn->ms = kiln_median(col, iters);
        pn->start_ms = start_ms[(size_t)traced * n + e];
        pn->dur_ms = ms[(size_t)traced * n + e];
        out->total_ms += pn->ms;
    }
    free(col);
    free(tot);
    return KILN_OK;
}

kiln_status kiln_profile_add_row(kiln_context *ctx, kiln_profile *p, const char *op_type, const char *name,
                                 const char *shapes, double *ms, int count, double flops, double bytes) {
    kiln_profile_node *grown = realloc(p->nodes, ((size_t)p->n + 1) * sizeof *grown);
    if (!grown) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a profile row");
    p->nodes = grown;
    kiln_profile_node *pn = &p->nodes[p->n++];
    memset(pn, 0, sizeof *pn);
    pn->op_type = op_type;
    pn->name = name;
    snprintf(pn->shapes, sizeof pn->shapes, "%s", shapes);
    pn->ms = kiln_median(ms, count);
    pn->dur_ms = pn->ms;
    pn->flops = flops;
    pn->bytes = bytes;
    p->total_ms += pn->ms;
    return KILN_OK;
}

kiln_status kiln_session_profile(kiln_session *s, int n_inputs, kiln_tensor *const *inputs, int warmup, int iters,
                                 kiln_profile *out) {
    if (!s || !out || iters < 1 || warmup < 0) return KILN_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    kiln_context *ctx = s->m->ctx;
    const kiln_tensor *outs[64];
    const int n_out = s->m->n_outputs < 64 ? s->m->n_outputs : 64;
    kiln_status st = KILN_OK;
    for (int i = 0; i < warmup + 1 && !st; i++) st = kiln_session_run(s, n_inputs, inputs, n_out, outs);
    if (st) return st;
    session_plan *sp = &s->plans[0]; /* the run just now moved its plan to the front */
    kiln_plan *hp = host_plan(s, sp);
    kiln_plan_view_t v;
    kiln_plan_view(hp, &v);
    const int n = v.n_exec;
    double *ms = kiln_calloc(ctx, (size_t)iters * n + 1, sizeof *ms, "profile times");
    double *start = kiln_calloc(ctx, (size_t)iters * n + 1, sizeof *start, "profile times");
    if (!ms || !start) st = KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = s->bi->plan_profile(sp->p, inputs, s->runs, iters, ms, start, NULL, NULL);
    if (!st) st = kiln_profile_from_passes(ctx, hp, iters, ms, start, out);
    free(ms);
    free(start);
    return st;
}

const kiln_backend_i *kiln_session_backend(kiln_session *s, void **instance) {
    if (instance) *instance = s->be;
    return s->bi;
}
