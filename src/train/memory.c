/*
 * memory.c — a training step's memory by planning only: the peak (activation arena,
 * weights, optimizer state, batch, workspace), activation checkpointing under a limit
 * (src/train/recompute.c) and the largest batch that fits (kiln.h, kiln_trainer_plan_memory).
 */
#include "../core/plan.h"
#include "../passes/passes.h"
#include "recompute.h"
#include "trainer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


kiln_status kiln_device_memory(kiln_context *ctx, kiln_device device, int device_index, size_t *free_bytes,
                               size_t *total_bytes) {
    if (!ctx || !free_bytes || !total_bytes) return KILN_ERR_INVALID_ARGUMENT;
    *free_bytes = *total_bytes = 0;
    const kiln_backend_i *bi = NULL;
    kiln_status st = kiln_backend_get(ctx, device, &bi);
    if (st) return kiln_api_end(ctx, st);
    if (bi->mem_info) return kiln_api_end(ctx, bi->mem_info(ctx, device_index, free_bytes, total_bytes));
    /* Linux: MemAvailable (what can be taken without swapping, page cache included) */
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) *total_bytes = (size_t)kb * 1024;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) *free_bytes = (size_t)kb * 1024;
    }
    if (f) fclose(f);
    if (!*total_bytes || !*free_bytes)
        return kiln_api_end(ctx, kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "the host's memory size is unknown (no /proc/meminfo)"));
    return KILN_OK;
}

/* Side streams a CUDA step's plan takes (src/cuda/context.c: KILN_SIDE_STREAMS, default 2),
 * which keep some values alive longer; the CPU has none. */
static int step_side_streams(const kiln_trainer *t) {
    if (t->opts.device != KILN_DEVICE_CUDA ||
        (t->opts.disable_passes & ((unsigned)KILN_PASS_STREAMS | (unsigned)KILN_PASS_CUDA_GRAPH)))
        return 0;
    const char *e = getenv("KILN_SIDE_STREAMS");
    int n = 2;
    if (e && *e) {
        char *end = NULL;
        const long x = strtol(e, &end, 10);
        if (!*end && x >= 0) n = (int)x;
    }
    return n > KILN_PLAN_MAX_SIDE_STREAMS ? KILN_PLAN_MAX_SIDE_STREAMS : n;
}

/* A candidate training graph measured as the trainer's backend will plan it: on the CPU
 * after the session's passes (src/core/session.c), as a host plan (the update in place over
 * the weights); on CUDA without the update's node group (the fused tail kernel runs it,
 * src/backend/train.c kiln_train_lower_update) and with the step's side streams. */
typedef struct step_measure {
    const kiln_trainer *t;
    kiln_tensor *const *in;
} step_measure;

typedef struct backend_ws {
    const kiln_backend_i *bi;
    void *be;
} backend_ws;

static kiln_status device_workspace(void *user, kiln_op_ctx *c, size_t *bytes) {
    const backend_ws *bw = user;
    return bw->bi->workspace_size(bw->be, c, bytes);
}

static kiln_status measure_step(void *user, kiln_model *m, size_t *arena, size_t *ws) {
    const step_measure *sm = user;
    const kiln_trainer *t = sm->t;
    const kiln_train_options *o = &t->opts;
    kiln_model *low = NULL;
    kiln_status st = KILN_OK;
    if (o->device == KILN_DEVICE_CPU) {
        kiln_pass_options po = {.device = o->device, .precision = KILN_PRECISION_FP32, .disabled = o->disable_passes};
        if (!kiln_policy_nhwc(o->device, KILN_PRECISION_FP32, o->strict_fp32, o->disable_passes))
            po.disabled |= KILN_PASS_NHWC;
        st = kiln_passes_apply(m, &po, &low);
        if (!st) st = kiln_plan_measure(low, sm->in, true, 0, arena, ws);
        kiln_model_free(low);
        return st;
    }
    /* the update's node: kiln.OptimizerStep (inputs step, found_inf, inv_scale, parameters,
     * gradients, states); the plan keeps the loss, the gradients and the statistics */
    const int np = t->n_params;
    int u = -1;
    for (int i = 0; i < m->n_nodes && u < 0; i++)
        if (strcmp(m->nodes[i].op_type, "OptimizerStep") == 0 && m->nodes[i].n_in >= 3 + 2 * np) u = i;
    if (u >= 0 && m->n_outputs == 1 + t->n_carried + t->n_states) {
        st = kiln_model_clone(m, &low);
        for (int x = 0; !st && x < low->n_values; x++) low->values[x].is_output = false;
        if (!st) low->n_outputs = 0;
        if (!st) st = kiln_model_add_output(low, m->values[m->outputs[0]].name);
        for (int k = 0; !st && k < np; k++) st = kiln_model_add_output(low, m->values[m->nodes[u].in[3 + np + k]].name);
        for (int k = 0; !st && k < t->n_states; k++)
            st = kiln_model_add_output(low, m->values[m->outputs[1 + t->n_carried + k]].name);
        bool changed = false;
        if (!st) st = kiln_pass_dead_nodes(low, NULL, &changed);
        if (!st) st = kiln_model_finalize(low);
    }
    /* with the device's backend at hand, its kernels' scratch too: one workspace per stream
     * (src/cuda/cuda_plan.c); a plan-only trainer (no device) counts none */
    void *be = NULL;
    const kiln_backend_i *bi = t->sess ? kiln_session_backend(t->sess, &be) : NULL;
    const backend_ws bw = {.bi = bi, .be = be};
    if (!st)
        st = kiln_plan_measure_device(low ? low : m, sm->in, step_side_streams(t),
                                      bi && bi->workspace_size ? device_workspace : NULL, (void *)&bw, arena, ws);
    kiln_model_free(low);
    return st;
}

/* The tensor training graph input i is fed (shapes only for the data inputs, at `batch`). */
static const kiln_tensor *feed_of(const kiln_trainer *t, const kiln_model *m, int i) {
    const char *name = m->values[m->inputs[i]].name;
    for (int j = 0; j < t->n_carried; j++)
        if (strcmp(t->carried_names[j], name) == 0) return t->carried[j];
    for (int k = 0; k < t->n_states; k++)
        if (strcmp(t->fwd->values[t->states[k].fwd_value].name, name) == 0) return t->states[k].value;
    return NULL;
}

static kiln_status step_inputs(const kiln_trainer *t, const kiln_model *m, int64_t batch, kiln_tensor *data,
                               kiln_tensor **in, size_t *input_bytes) {
    *input_bytes = 0;
    for (int i = 0; i < m->n_inputs; i++) {
        const kiln_value *v = &m->values[m->inputs[i]];
        if (i >= t->n_data_inputs) {
            const kiln_tensor *f = feed_of(t, m, i);
            if (!f)
                return kiln_fail(t->ctx, KILN_ERR_INTERNAL, "training graph input '%s': no tensor of the trainer's",
                                 v->name);
            in[i] = (kiln_tensor *)f;
            continue;
        }
        if (kiln_plan_input_sets_shapes(m, i))
            return kiln_fail(t->ctx, KILN_ERR_UNSUPPORTED,
                             "input '%s' sets shapes by its values: its memory cannot be planned without data", v->name);
        kiln_tensor *d = &data[i];
        memset(d, 0, sizeof *d);
        int64_t dims[KILN_MAX_DIMS];
        for (int k = 0; k < v->ndim; k++) {
            dims[k] = v->dims[k] < 0 && k == 0 ? batch : v->dims[k];
            if (dims[k] < 0)
                return kiln_fail(t->ctx, KILN_ERR_UNSUPPORTED,
                                 "input '%s': dim %d is symbolic; only the first (the batch) may be to plan memory",
                                 v->name, k);
        }
        kiln_tensor_set_shape(d, v->dtype, v->ndim < 0 ? 0 : v->ndim, dims);
        in[i] = d;
        *input_bytes += kiln_tensor_nbytes(d);
    }
    return KILN_OK;
}

static double mib(size_t b) { return (double)b / 1048576.0; }

/* The step's memory at `batch`; under a limit with recompute, *rewritten (if not NULL)
 * receives the training graph with the recomputations (NULL: none needed). */
static kiln_status plan_step(kiln_trainer *t, int64_t batch, size_t limit, int recompute, kiln_train_memory *out,
                             kiln_model **rewritten) {
    kiln_context *ctx = t->ctx;
    kiln_model *m = t->train;
    if (rewritten) *rewritten = NULL;
    memset(out, 0, sizeof *out);
    out->batch = batch;
    if (batch < 1) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "the batch to plan must be >= 1, got %lld", (long long)batch);
    kiln_tensor *data = kiln_calloc(ctx, (size_t)m->n_inputs + 1, sizeof(kiln_tensor), "memory plan");
    kiln_tensor **in = kiln_calloc(ctx, (size_t)m->n_inputs + 1, sizeof(kiln_tensor *), "memory plan");
    kiln_status st = data && in ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = step_inputs(t, m, batch, data, in, &out->input_bytes);
    for (int k = 0; k < t->n_params; k++) out->param_bytes += kiln_tensor_nbytes(t->params[k].value);
    for (int j = 0; j < t->n_carried; j++)
        if (t->carried_owned[j] || t->carried[j] == t->scale_input) out->state_bytes += kiln_tensor_nbytes(t->carried[j]);
    for (int k = 0; k < t->n_states; k++) out->state_bytes += kiln_tensor_nbytes(t->states[k].value);
    kiln_recompute_result r;
    memset(&r, 0, sizeof r);
    kiln_model *rw = NULL;
    /* the plan as it is: its arena and workspace, and what fixed memory leaves the arena */
    step_measure sm = {.t = t, .in = in};
    if (!st) st = kiln_recompute_fit(m, in, measure_step, &sm, 0, -1, recompute != 2, &rw, &r);
    size_t fixed = out->param_bytes + out->state_bytes + out->input_bytes + r.workspace;
    out->workspace_bytes = r.workspace;
    out->arena_bytes = out->arena_bytes_without = r.arena_before;
    out->candidates = r.candidates;
    out->peak_bytes = fixed + r.arena_before;
    for (int i = 0; i < m->n_nodes; i++) { /* recomputations the trainer's graph already has */
        const char *nm = m->nodes[i].name;
        const size_t l = strlen(nm);
        out->recomputed += l > 10 && strcmp(nm + l - 10, ":recompute") == 0;
    }
    if (!st && limit && out->peak_bytes > limit) {
        if (recompute) {
            /* a budget of 1 byte when the rest alone is over: the least reachable, for the message */
            st = kiln_recompute_fit(m, in, measure_step, &sm, limit > fixed ? limit - fixed : 1, -1, recompute != 2, &rw,
                                    &r);
            out->arena_bytes = r.arena_after;
            out->recomputed = r.recomputed;
            out->recompute_ops = r.flops;
            out->peak_bytes = fixed + r.arena_after;
            if (st == KILN_ERR_OUT_OF_MEMORY)
                st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY,
                               "at batch %lld the training step needs at least %zu bytes (%.1f MiB: activations %.1f, "
                               "weights %.1f, optimizer state %.1f, batch %.1f, workspace %.1f) with recomputation (%d of "
                               "the %d recomputable forward values recomputed; %zu bytes, %.1f MiB, with none); the "
                               "memory limit is %zu bytes (%.1f MiB)",
                               (long long)batch, out->peak_bytes, mib(out->peak_bytes), mib(out->arena_bytes),
                               mib(out->param_bytes), mib(out->state_bytes), mib(out->input_bytes),
                               mib(out->workspace_bytes), r.recomputed, r.candidates, fixed + r.arena_before,
                               mib(fixed + r.arena_before), limit, mib(limit));
        } else {
            st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY,
                           "at batch %lld the training step needs %zu bytes (%.1f MiB: activations %.1f, weights %.1f, "
                           "optimizer state %.1f, batch %.1f, workspace %.1f) with recomputation off; the memory limit is "
                           "%zu bytes (%.1f MiB)",
                           (long long)batch, out->peak_bytes, mib(out->peak_bytes), mib(out->arena_bytes),
                           mib(out->param_bytes), mib(out->state_bytes), mib(out->input_bytes), mib(out->workspace_bytes),
                           limit, mib(limit));
        }
    }
    if (!st && rewritten) *rewritten = rw;
    else kiln_model_free(rw);
    free(data);
    free(in);
    return st;
}

kiln_status kiln_trainer_plan_memory(kiln_trainer *t, int64_t batch, size_t memory_limit, int recompute,
                                     kiln_train_memory *out) {
    if (!t || !out) return KILN_ERR_INVALID_ARGUMENT;
    return kiln_api_end(t->ctx, plan_step(t, batch, memory_limit, recompute, out, NULL));
}

kiln_status kiln_trainer_max_batch(kiln_trainer *t, size_t memory_limit, int recompute, int64_t max_batch,
                                   int64_t *batch, kiln_train_memory *at) {
    if (!t || !batch || !at) return KILN_ERR_INVALID_ARGUMENT;
    *batch = 0;
    if (!memory_limit) return kiln_fail(t->ctx, KILN_ERR_INVALID_ARGUMENT, "the largest batch needs a memory limit");
    if (max_batch <= 0) max_batch = (int64_t)1 << 20;
    kiln_train_memory mem;
    kiln_status st = plan_step(t, 1, memory_limit, recompute, at, NULL);
    if (st) return kiln_api_end(t->ctx, st); /* not even one sample (the message says why) */
    int64_t lo = 1, hi = 0; /* lo fits; hi (0: unknown yet) does not */
    while (!hi && lo < max_batch) {
        const int64_t b = lo * 2 < max_batch ? lo * 2 : max_batch;
        st = plan_step(t, b, memory_limit, recompute, &mem, NULL);
        if (st == KILN_ERR_OUT_OF_MEMORY) hi = b;
        else if (st) return kiln_api_end(t->ctx, st);
        else {
            lo = b;
            *at = mem;
        }
    }
    while (hi && hi - lo > 1) {
        const int64_t b = lo + (hi - lo) / 2;
        st = plan_step(t, b, memory_limit, recompute, &mem, NULL);
        if (st == KILN_ERR_OUT_OF_MEMORY) hi = b;
        else if (st) return kiln_api_end(t->ctx, st);
        else {
            lo = b;
            *at = mem;
        }
    }
    kiln_clear_error(t->ctx);
    *batch = lo;
    return KILN_OK;
}

/* kiln_trainer_create under kiln_train_options.memory_limit: the training graph with the
 * recomputations that fit (trainer.c calls it once the session is made, for its workspace). */
kiln_status kiln_trainer_fit_memory(kiln_trainer *t) {
    const kiln_train_options *o = &t->opts;
    if (!o->memory_limit) return KILN_OK;
    if (o->memory_batch < 1)
        return kiln_fail(t->ctx, KILN_ERR_INVALID_ARGUMENT,
                         "memory_limit needs memory_batch, the batch to plan for (got %lld)", (long long)o->memory_batch);
    kiln_train_memory mem;
    kiln_model *rw = NULL;
    /* no_recompute 0: every tier; 2: cheap values only; 1: nothing */
    const int rc = o->no_recompute == 1 ? 0 : o->no_recompute == 2 ? 2 : 1;
    kiln_status st = plan_step(t, o->memory_batch, o->memory_limit, rc, &mem, &rw);
    if (st) return st;
    if (rw) { /* the session runs the graph it was made over: the caller makes one anew */
        kiln_session_free(t->sess);
        t->sess = NULL;
        kiln_model_free(t->train);
        t->train = rw;
    }
    return KILN_OK;
}
