/* session.c — sessions: a model bound to a device, with one cached plan per input shape. */
#include "internal.h"
#include "backend.h"
#include "plan.h"
#include "../passes/passes.h"

#include <pthread.h>
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
    /* One run at a time (kiln.h's threading rules): runs from several threads take turns.
     * Held by every run (kiln_session_run, _run_seeded, _run_into) and kiln_session_stats. */
    pthread_mutex_t mu;
};

static kiln_plan *host_plan(const kiln_session *s, const session_plan *sp) { return s->bi->plan_host(sp->p); }

static void free_plan(kiln_session *s, session_plan *sp) {
    if (sp->p) s->bi->plan_free(sp->p);
    memset(sp, 0, sizeof *sp);
}

/* The backend options a session's settings ask for. */
static kiln_backend_options backend_options(const kiln_session_options *o) {
    /* autotuning (timed cuDNN algorithms, cached on disk) unless switched off */
    kiln_backend_options bo = {.allow_tf32 = kiln_policy_tf32(o->strict_fp32),
                               .no_autotune = (o->disable_passes & KILN_PASS_AUTOTUNE) != 0,
                               .deterministic = o->deterministic != 0,
                               .no_conv_gemm = (o->disable_passes & KILN_PASS_CONV_GEMM) != 0,
                               .no_conv_direct = (o->disable_passes & KILN_PASS_CONV_DIRECT) != 0,
                               .no_conv_depthwise = (o->disable_passes & KILN_PASS_CONV_DEPTHWISE) != 0,
                               .no_flash_attention = (o->disable_passes & KILN_PASS_FLASH_ATTENTION) != 0,
                               .no_conv_dw_grad = (o->disable_passes & KILN_PASS_CONV_DW_GRAD) != 0,
                               .no_streams = (o->disable_passes & KILN_PASS_STREAMS) != 0,
                               .device_index = o->device_index,
                               .stream = o->stream};
    return bo;
}

kiln_status kiln_session_create(kiln_model *m, const kiln_session_options *opts, kiln_session **out) {
    if (!m || !out) return KILN_ERR_INVALID_ARGUMENT;
    kiln_session_options o;
    kiln_status st = kiln_options_take(m->ctx, "kiln_session_options", opts, &o, sizeof o);
    if (!st) st = kiln_session_create_ex(m, &o, true, out);
    return kiln_api_end(m->ctx, st);
}

kiln_status kiln_session_create_ex(kiln_model *m, const kiln_session_options *opts, bool apply_passes,
                                   kiln_session **out) {
    if (!m || !out || !opts) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!m->finalized)
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "the model must be finalized before a session runs it");
    const kiln_session_options o = *opts;
    const kiln_backend_i *bi = NULL;
    kiln_status bst = kiln_backend_get(m->ctx, o.device, &bi);
    if (bst) return bst;
    if (o.threads < 0) return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "threads must be >= 0");
    if (o.device_index < 0 || (o.device == KILN_DEVICE_CPU && o.device_index != 0))
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "device_index %d: %s", o.device_index,
                         o.device == KILN_DEVICE_CPU ? "the CPU has one device, 0" : "it must be >= 0");
    if (o.stream && o.device == KILN_DEVICE_CPU)
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "a stream was given for a session on the CPU");
    if (o.precision != KILN_PRECISION_FP32 && o.precision != KILN_PRECISION_FP16 && o.precision != KILN_PRECISION_BF16)
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "unknown precision %d", (int)o.precision);
    kiln_session *s = kiln_calloc(m->ctx, 1, sizeof *s, "a session");
    if (!s) return KILN_ERR_OUT_OF_MEMORY;
    if (pthread_mutex_init(&s->mu, NULL)) {
        free(s);
        return kiln_fail(m->ctx, KILN_ERR_INTERNAL, "cannot create the session's mutex");
    }
    s->m = m;
    s->opts = o;
    s->bi = bi;
    if (apply_passes) {
        kiln_pass_options po = {.device = o.device, .precision = o.precision, .disabled = o.disable_passes};
        /* NHWC where tensor cores run the convolutions: the trainers' policy too */
        if (!kiln_policy_nhwc(o.device, o.precision, o.strict_fp32, o.disable_passes)) po.disabled |= KILN_PASS_NHWC;
        /* no_fold: nothing but shape computations is computed ahead of the runs */
        if (o.no_fold) po.disabled |= KILN_PASS_FOLD_CONSTANTS;
        kiln_status pst = kiln_passes_apply(m, &po, &s->optimized);
        if (pst) {
            pthread_mutex_destroy(&s->mu);
            free(s);
            return pst;
        }
        s->m = s->optimized;
    }
    const kiln_backend_options bo = backend_options(&o);
    kiln_status st = bi->create(m->ctx, &bo, &s->be);
    if (st) {
        kiln_model_free(s->optimized);
        pthread_mutex_destroy(&s->mu);
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
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static double now_ms(void);

static void log_plan(kiln_session *s, kiln_tensor *const *inputs, void *plan, double ms) {
    char shapes[512], sh[160];
    size_t k = 0;
    shapes[0] = 0;
    for (int i = 0; i < s->m->n_inputs && k < sizeof shapes; i++)
        k += (size_t)snprintf(shapes + k, sizeof shapes - k, "%s%s %s", i ? ", " : "", kiln_model_input_name(s->m, i),
                              kiln_shape_str(inputs[i], sh, sizeof sh));
    kiln_plan_stats ps;
    kiln_plan_get_stats(s->bi->plan_host(plan), &ps);
    kiln_log(s->m->ctx, KILN_LOG_INFO,
             "plan on %s for %s: %d nodes (%d folded), activations %.1f MiB, constants %.1f MiB, workspace "
             "%.1f MiB; built in %.1f ms",
             s->bi->name, shapes, ps.nodes, ps.folded, ps.arena_bytes / 1048576.0, ps.constant_bytes / 1048576.0,
             ps.workspace_bytes / 1048576.0, ms);
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
    const double t0 = kiln_log_on(s->m->ctx, KILN_LOG_INFO) ? now_ms() : 0;
    kiln_status st = s->bi->plan_create(s->be, s->m, inputs, &po, &p.p);
    if (st) return st;
    if (kiln_log_on(s->m->ctx, KILN_LOG_INFO)) log_plan(s, inputs, p.p, now_ms() - t0);
    if (s->n_plans == MAX_PLANS) free_plan(s, &s->plans[--s->n_plans]);
    memmove(&s->plans[1], &s->plans[0], (size_t)s->n_plans * sizeof(session_plan));
    s->plans[0] = p;
    s->n_plans++;
    *out = &s->plans[0];
    return KILN_OK;
}

static kiln_status run_locked(kiln_session *s, uint64_t seed, kiln_tensor *const *inputs, int n_outputs,
                              const kiln_tensor **outputs);

static const char *device_str(kiln_device d) { return d == KILN_DEVICE_CUDA ? "cuda" : "cpu"; }

/* A tensor given to a run is on the host or on the session's own device. */
static kiln_status check_device(kiln_session *s, const kiln_tensor *t, const char *what, int i, const char *name) {
    if (t->device == KILN_DEVICE_CPU) return KILN_OK;
    if (t->device == s->opts.device && t->device_index == s->opts.device_index) return KILN_OK;
    if (s->opts.device == KILN_DEVICE_CPU)
        return kiln_fail(s->m->ctx, KILN_ERR_INVALID_ARGUMENT,
                         "%s %d ('%s') is on %s:%d; this session runs on the CPU (copy it to the host, or run the "
                         "session on %s)",
                         what, i, name, device_str(t->device), t->device_index, device_str(t->device));
    return kiln_fail(s->m->ctx, KILN_ERR_INVALID_ARGUMENT, "%s %d ('%s') is on %s:%d; this session runs on %s:%d", what,
                     i, name, device_str(t->device), t->device_index, device_str(s->opts.device),
                     s->opts.device_index);
}
static kiln_status check_run(kiln_session *s, int n_inputs, kiln_tensor *const *inputs, int n_outputs,
                             const kiln_tensor **outputs);

kiln_status kiln_session_run(kiln_session *s, int n_inputs, kiln_tensor *const *inputs,
                             int n_outputs, const kiln_tensor **outputs) {
    if (!s) return KILN_ERR_INVALID_ARGUMENT;
    kiln_status st = check_run(s, n_inputs, inputs, n_outputs, outputs);
    if (st) return st;
    pthread_mutex_lock(&s->mu);
    st = run_locked(s, s->runs, inputs, n_outputs, outputs); /* the seed: this session's run count */
    pthread_mutex_unlock(&s->mu);
    return kiln_api_end(s->m->ctx, st);
}

kiln_status kiln_session_run_seeded(kiln_session *s, uint64_t seed, int n_inputs, kiln_tensor *const *inputs,
                                    int n_outputs, const kiln_tensor **outputs) {
    if (!s) return KILN_ERR_INVALID_ARGUMENT;
    kiln_status st = check_run(s, n_inputs, inputs, n_outputs, outputs);
    if (st) return st;
    pthread_mutex_lock(&s->mu);
    st = run_locked(s, seed, inputs, n_outputs, outputs);
    pthread_mutex_unlock(&s->mu);
    return st;
}

static kiln_status check_run(kiln_session *s, int n_inputs, kiln_tensor *const *inputs, int n_outputs,
                             const kiln_tensor **outputs) {
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
    for (int i = 0; i < n_inputs; i++) {
        kiln_status st = check_device(s, inputs[i], "input", i, kiln_model_input_name(m, i));
        if (st) return st;
        if (inputs[i]->device != KILN_DEVICE_CPU && kiln_plan_input_sets_shapes(m, i))
            return kiln_fail(m->ctx, KILN_ERR_UNSUPPORTED,
                             "input %d ('%s') sets shapes in the graph (its values are read when the plan is "
                             "built): pass it as a host tensor, not one on %s:%d",
                             i, kiln_model_input_name(m, i), device_str(inputs[i]->device), inputs[i]->device_index);
    }
    return KILN_OK;
}

/* The CPU threads of this session's runs: its own setting, else the context's (read at
 * every run), else all cores. Set for the calling thread only (src/cpu/threads.c). */
static int session_threads(const kiln_session *s) {
    return s->opts.threads ? s->opts.threads : kiln_context_threads(s->m->ctx);
}

static kiln_status run_locked(kiln_session *s, uint64_t seed, kiln_tensor *const *inputs, int n_outputs,
                              const kiln_tensor **outputs) {
    const kiln_cpu_threads_saved old_threads = kiln_cpu_threads_enter(session_threads(s));
    session_plan *p = NULL;
    kiln_status st = find_plan(s, inputs, &p);
    if (!st) {
        s->runs++;
        st = s->bi->plan_run(p->p, inputs, seed, n_outputs, outputs);
    }
    kiln_cpu_threads_leave(old_threads);
    return st;
}

/* Output j's shape as plan p computes it. */
static const kiln_tensor *plan_output(kiln_session *s, session_plan *p, int j) {
    kiln_plan_view_t v;
    kiln_plan_view(host_plan(s, p), &v);
    return &v.vt[s->m->outputs[j]];
}

/* Whether tensor o can take output r: dtype and dims (KILN_ERR_TYPE / _SHAPE naming both),
 * and NCHW where o is on a device. */
static kiln_status check_output(kiln_session *s, int j, const kiln_tensor *r, const kiln_tensor *o) {
    kiln_model *m = s->m;
    char want[160], got[160];
    if (r->dtype != o->dtype)
        return kiln_fail(m->ctx, KILN_ERR_TYPE, "output %d ('%s') is %s; the tensor given for it is %s", j,
                         kiln_model_output_name(m, j), kiln_shape_str(r, want, sizeof want),
                         kiln_shape_str(o, got, sizeof got));
    if (r->ndim != o->ndim || memcmp(r->dims, o->dims, (size_t)r->ndim * sizeof r->dims[0]))
        return kiln_fail(m->ctx, KILN_ERR_SHAPE, "output %d ('%s') is %s; the tensor given for it is %s", j,
                         kiln_model_output_name(m, j), kiln_shape_str(r, want, sizeof want),
                         kiln_shape_str(o, got, sizeof got));
    if (o->device != KILN_DEVICE_CPU && o->ndim == 4 && o->format != KILN_FORMAT_NCHW)
        return kiln_fail(m->ctx, KILN_ERR_UNSUPPORTED,
                         "output %d ('%s'): a tensor on the device must be NCHW (convert NHWC on the host, or with "
                         "kiln_tensor_copy)",
                         j, kiln_model_output_name(m, j));
    return KILN_OK;
}

/* run_into with outputs[j] NULL where output j is not wanted. Through the backend's
 * plan_run_into (the plan writes straight into the caller's tensors) when a tensor is on
 * the device or the caller gave a stream; else a host run and copies. */
static kiln_status run_into_sparse(kiln_session *s, int n_inputs, kiln_tensor *const *inputs, int n_outputs,
                                   kiln_tensor *const *outputs) {
    kiln_model *m = s->m;
    kiln_status st = KILN_OK;
    bool device_io = s->opts.stream != NULL;
    for (int j = 0; j < n_outputs && !st; j++) {
        if (!outputs[j]) continue;
        if (!outputs[j]->data && kiln_tensor_numel(outputs[j]) > 0)
            st = kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "output %d ('%s') has no tensor to write into", j,
                           kiln_model_output_name(m, j));
        else
            st = check_device(s, outputs[j], "output", j, kiln_model_output_name(m, j));
        device_io |= outputs[j]->device != KILN_DEVICE_CPU;
    }
    for (int i = 0; inputs && i < n_inputs; i++) device_io |= inputs[i] && inputs[i]->device != KILN_DEVICE_CPU;
    const kiln_tensor *res[64];
    if (!st) st = check_run(s, n_inputs, inputs, n_outputs, res);
    if (st) return st;
    pthread_mutex_lock(&s->mu);
    if (device_io && s->bi->plan_run_into) {
        const kiln_cpu_threads_saved old_threads = kiln_cpu_threads_enter(session_threads(s));
        session_plan *p = NULL;
        st = find_plan(s, inputs, &p);
        for (int j = 0; j < n_outputs && !st; j++)
            if (outputs[j]) st = check_output(s, j, plan_output(s, p, j), outputs[j]);
        if (!st) st = s->bi->plan_run_into(p->p, inputs, s->runs++, n_outputs, outputs);
        kiln_cpu_threads_leave(old_threads);
    } else {
        st = run_locked(s, s->runs, inputs, n_outputs, res);
        for (int j = 0; j < n_outputs && !st; j++) {
            const kiln_tensor *r = res[j];
            kiln_tensor *o = outputs[j];
            if (!o) continue;
            st = check_output(s, j, r, o);
            if (st) break;
            if (r->ndim == 4 && r->format != o->format) kiln_layout_convert(r, o->data, o->format);
            else if (kiln_tensor_nbytes(r)) memcpy(o->data, r->data, kiln_tensor_nbytes(r));
        }
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

kiln_status kiln_session_run_into(kiln_session *s, int n_inputs, kiln_tensor *const *inputs, int n_outputs,
                                  kiln_tensor *const *outputs) {
    if (!s) return KILN_ERR_INVALID_ARGUMENT;
    kiln_model *m = s->m;
    kiln_status st = KILN_OK;
    if (n_outputs < 0 || n_outputs > m->n_outputs || (n_outputs && !outputs))
        st = kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "asked for %d outputs; the model has %d", n_outputs,
                       m->n_outputs);
    else if (n_outputs > 64)
        st = kiln_fail(m->ctx, KILN_ERR_UNSUPPORTED, "kiln_session_run_into takes at most 64 outputs, asked for %d",
                       n_outputs);
    for (int j = 0; j < n_outputs && !st; j++) /* (run_into_sparse checks the tensors given) */
        if (!outputs[j])
            st = kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "output %d ('%s') has no tensor to write into", j,
                           kiln_model_output_name(m, j));
    if (!st) st = run_into_sparse(s, n_inputs, inputs, n_outputs, outputs);
    return kiln_api_end(m->ctx, st);
}

/* "'x', 'mask'": the names of the model's inputs (or outputs), for a message. */
static const char *io_names(const kiln_model *m, bool inputs, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    const int count = inputs ? m->n_inputs : m->n_outputs;
    for (int i = 0; i < count && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s'%s'", i ? ", " : "",
                              inputs ? kiln_model_input_name(m, i) : kiln_model_output_name(m, i));
    return buf;
}

kiln_status kiln_session_run_named(kiln_session *s, int n_inputs, const char *const *input_names,
                                   kiln_tensor *const *inputs, int n_outputs, const char *const *output_names,
                                   kiln_tensor *const *outputs) {
    if (!s) return KILN_ERR_INVALID_ARGUMENT;
    kiln_model *m = s->m;
    kiln_context *ctx = m->ctx;
    if (n_inputs != m->n_inputs)
        return kiln_api_end(ctx, kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "the model takes %d inputs, %d were given",
                                           m->n_inputs, n_inputs));
    if (n_outputs < 0 || n_outputs > m->n_outputs)
        return kiln_api_end(ctx, kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "asked for %d outputs; the model has %d",
                                           n_outputs, m->n_outputs));
    if ((n_inputs && (!input_names || !inputs)) || (n_outputs && (!output_names || !outputs)))
        return kiln_api_end(ctx, kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "names or tensors are NULL"));
    /* bound in place, nothing allocated: as run_into, at most 64 of each */
    if (m->n_inputs > 64 || m->n_outputs > 64)
        return kiln_api_end(ctx, kiln_fail(ctx, KILN_ERR_UNSUPPORTED,
                                           "run_named takes models of at most 64 inputs and 64 outputs (%d, %d)",
                                           m->n_inputs, m->n_outputs));
    kiln_tensor *in[64] = {0}, *out[64] = {0};
    kiln_status st = KILN_OK;
    char names[512];
    for (int i = 0; i < n_inputs && !st; i++) {
        const int ix = input_names[i] ? kiln_model_input_index(m, input_names[i]) : -1;
        if (ix < 0)
            st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "the model has no input '%s' (its inputs: %s)",
                           input_names[i] ? input_names[i] : "(null)", io_names(m, true, names, sizeof names));
        else if (in[ix])
            st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "input '%s' is given twice", input_names[i]);
        else
            in[ix] = inputs[i];
    }
    /* outputs: the model's first `hi` in order, those not asked for left NULL (skipped) */
    int hi = 0;
    for (int j = 0; j < n_outputs && !st; j++) {
        const int ix = output_names[j] ? kiln_model_output_index(m, output_names[j]) : -1;
        if (ix < 0) {
            st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "the model has no output '%s' (its outputs: %s)",
                           output_names[j] ? output_names[j] : "(null)", io_names(m, false, names, sizeof names));
        } else if (out[ix]) {
            st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "output '%s' is given twice", output_names[j]);
        } else {
            out[ix] = outputs[j];
            if (ix + 1 > hi) hi = ix + 1;
        }
    }
    if (!st) st = run_into_sparse(s, n_inputs, in, hi, out);
    return kiln_api_end(ctx, st);
}

kiln_status kiln_session_output_info(kiln_session *s, int n_inputs, kiln_tensor *const *inputs, int j,
                                     kiln_dtype *dtype, int *ndim, int64_t dims[KILN_MAX_DIMS]) {
    if (!s) return KILN_ERR_INVALID_ARGUMENT;
    kiln_model *m = s->m;
    if (j < 0 || j >= m->n_outputs)
        return kiln_api_end(m->ctx, kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "output %d: the model has %d", j,
                                              m->n_outputs));
    const kiln_tensor *res[1];
    kiln_status st = check_run(s, n_inputs, inputs, 0, res);
    if (st) return kiln_api_end(m->ctx, st);
    pthread_mutex_lock(&s->mu);
    const kiln_cpu_threads_saved old_threads = kiln_cpu_threads_enter(session_threads(s));
    session_plan *p = NULL;
    st = find_plan(s, inputs, &p);
    kiln_cpu_threads_leave(old_threads);
    if (!st) {
        const kiln_tensor *r = plan_output(s, p, j);
        if (dtype) *dtype = r->dtype;
        if (ndim) *ndim = r->ndim;
        if (dims)
            for (int d = 0; d < KILN_MAX_DIMS; d++) dims[d] = d < r->ndim ? r->dims[d] : 0;
    }
    pthread_mutex_unlock(&s->mu);
    return kiln_api_end(m->ctx, st);
}

void *kiln_session_stream(const kiln_session *s) { return s && s->bi->stream ? s->bi->stream(s->be) : NULL; }

kiln_status kiln_session_stats(const kiln_session *s, kiln_plan_stats *out) {
    if (!s || !out) return KILN_ERR_INVALID_ARGUMENT;
    kiln_session *ms = (kiln_session *)s; /* the lock only */
    pthread_mutex_lock(&ms->mu);
    const int n = s->n_plans;
    if (n) kiln_plan_get_stats(host_plan(s, &ms->plans[0]), out);
    pthread_mutex_unlock(&ms->mu);
    if (!n) return kiln_fail(s->m->ctx, KILN_ERR_INVALID_ARGUMENT, "the session has not run yet");
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
    if (!st) {
        const kiln_cpu_threads_saved old_threads = kiln_cpu_threads_enter(session_threads(s));
        st = s->bi->plan_profile(sp->p, inputs, s->runs, iters, ms, start, NULL, NULL);
        kiln_cpu_threads_leave(old_threads);
    }
    if (!st) st = kiln_profile_from_passes(ctx, hp, iters, ms, start, out);
    free(ms);
    free(start);
    return st;
}

const kiln_backend_i *kiln_session_backend(kiln_session *s, void **instance) {
    if (instance) *instance = s->be;
    return s->bi;
}
