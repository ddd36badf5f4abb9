/* optim_graph.c — the optimizer update as nodes of the training graph (optim_graph.h). */
#include "optim_graph.h"

#include "../dist/dist.h"
#include "../ops/optim_math.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kiln_optim_graph_clear(kiln_optim_graph *g) {
    if (!g) return;
    free(g->state_in);
    free(g->state_out);
    free(g->param_out);
    free(g->param_in);
    free(g->acc_in);
    free(g->acc_out);
    memset(g, 0, sizeof *g);
}

int kiln_optim_graph_carried(const kiln_optim_graph *g, int *in_values, int *next_values) {
    int n = 0;
#define PAIR(a, b)                                  \
    do {                                            \
        if (in_values) in_values[n] = (a);          \
        if (next_values) next_values[n] = (b);      \
        n++;                                        \
    } while (0)
    PAIR(g->step, g->step_out);
    for (int k = 0; k < g->n_params; k++) PAIR(g->param_in[k], g->param_out[k]);
    for (int k = 0; k < g->n_params * g->n_states; k++) PAIR(g->state_in[k], g->state_out[k]);
    if (g->micro >= 0) {
        PAIR(g->micro, g->micro_out);
        for (int k = 0; k < g->n_params; k++) PAIR(g->acc_in[k], g->acc_out[k]);
    }
    if (g->loss_scale >= 0) {
        PAIR(g->loss_scale, g->loss_scale_out);
        PAIR(g->growth_tracker, g->growth_tracker_out);
        PAIR(g->skipped, g->skipped_out);
    }
#undef PAIR
    return n;
}

static bool put_attr(kiln_context *ctx, kiln_attr *a, const char *name, kiln_attr_type type, float f, int64_t i) {
    memset(a, 0, sizeof *a);
    a->name = kiln_strdup(ctx, name);
    a->type = type;
    a->f = f;
    a->i = i;
    return a->name != NULL;
}

#define MAX_ATTRS 20

/* attrs: MAX_ATTRS entries; returns the count, or -1 on OOM (the filled ones cleared). */
static int fill_attrs(kiln_context *ctx, kiln_attr *a, const kiln_train_options *o, int n_params,
                      const int64_t *no_decay) {
    int k = 0;
    bool ok = true;
#define I(name, v) ok = ok && put_attr(ctx, &a[k++], name, KILN_ATTR_INT, 0.f, (int64_t)(v))
#define F(name, v) ok = ok && put_attr(ctx, &a[k++], name, KILN_ATTR_FLOAT, (v), 0)
    I("n", n_params);
    I("optimizer", o->optimizer);
    F("lr", o->lr);
    F("momentum", o->momentum);
    I("nesterov", o->nesterov != 0);
    F("weight_decay", o->weight_decay);
    F("beta1", o->beta1);
    F("beta2", o->beta2);
    F("eps", o->eps);
    F("rho", o->rho);
    I("schedule", o->schedule);
    I("step_size", o->step_size);
    F("gamma", o->gamma);
    I("total_steps", o->total_steps);
    I("warmup_steps", o->warmup_steps);
    /* only where they matter (the op's defaults otherwise): graphs of the other options unchanged */
    if (o->optimizer == KILN_OPTIM_LARS) F("lars_eta", o->lars_eta > 0 ? o->lars_eta : 0.001f);
    if (o->clip_grad_norm > 0) F("clip_grad_norm", o->clip_grad_norm);
    if (ok && no_decay) { /* no_decay: n ints, 1 where parameter k takes no weight decay */
        ok = put_attr(ctx, &a[k], "no_decay", KILN_ATTR_INTS, 0.f, 0);
        a[k].ints = ok ? kiln_calloc(ctx, (size_t)n_params, sizeof(int64_t), "optimizer attributes") : NULL;
        if (a[k].ints) {
            a[k].n = n_params;
            memcpy(a[k].ints, no_decay, sizeof(int64_t) * (size_t)n_params);
        }
        ok = ok && a[k].ints != NULL;
        k++;
    }
#undef I
#undef F
    if (!ok) {
        for (int j = 0; j < k; j++) kiln_attr_clear(&a[j]);
        return -1;
    }
    return k;
}

kiln_status kiln_optim_step_attrs(kiln_context *ctx, const kiln_train_options *o, int n_params, kiln_attr **attrs,
                                  int *n_attrs) {
    return kiln_optim_step_attrs_nd(ctx, o, n_params, NULL, attrs, n_attrs);
}

kiln_status kiln_optim_step_attrs_nd(kiln_context *ctx, const kiln_train_options *o, int n_params,
                                     const int64_t *no_decay, kiln_attr **attrs, int *n_attrs) {
    *attrs = NULL;
    *n_attrs = 0;
    kiln_attr *a = kiln_calloc(ctx, MAX_ATTRS, sizeof *a, "optimizer attributes");
    if (!a) return KILN_ERR_OUT_OF_MEMORY;
    const int k = fill_attrs(ctx, a, o, n_params, no_decay);
    if (k < 0) {
        free(a);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    *attrs = a;
    *n_attrs = k;
    return KILN_OK;
}

/* A new value named "<base><suffix>" (made unique); -1 on OOM. */
static int fresh_value(kiln_model *m, const char *base, const char *suffix) {
    char name[512];
    snprintf(name, sizeof name, "%s%s", base, suffix);
    for (int k = 1; kiln_model_find_value(m, name) >= 0; k++) snprintf(name, sizeof name, "%s%s.%d", base, suffix, k);
    return kiln_model_get_value(m, name);
}

/* A scalar graph input "kiln:<what>" of dtype dt; -1 with a message on failure. */
static int scalar_input(kiln_model *m, const char *what, kiln_dtype dt) {
    char name[256];
    snprintf(name, sizeof name, "kiln:%s", what);
    if (kiln_model_find_value(m, name) >= 0) {
        kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "the training graph already has a value '%s'", name);
        return -1;
    }
    if (kiln_model_add_input(m, name, dt, 0, NULL)) return -1;
    return kiln_model_find_value(m, name);
}

/* Append node op (domain kiln) with the given inputs and n_out fresh outputs named after
 * names[k]; attrs taken over. Returns KILN_OK. */
static kiln_status add_node(kiln_model *m, const char *op, int n_in, const int *in, int n_out, int *out,
                            const char *const *names, int n_attrs, kiln_attr *attrs) {
    for (int k = 0; k < n_out; k++)
        if ((out[k] = fresh_value(m, names[k], "")) < 0) {
            for (int a = 0; a < n_attrs; a++) kiln_attr_clear(&attrs[a]);
            free(attrs);
            return KILN_ERR_OUT_OF_MEMORY;
        }
    char name[64];
    snprintf(name, sizeof name, "kiln:%s", op);
    return kiln_model_add_node_raw(m, op, name, "kiln", n_in, in, n_out, out, n_attrs, attrs) < 0
               ? KILN_ERR_OUT_OF_MEMORY
               : KILN_OK;
}

kiln_status kiln_optim_graph_append(kiln_model *m, const kiln_train_options *o, int n_params, const int *params,
                                    const int *grads, const int *states, int loss_scale, kiln_optim_graph *out) {
    if (!m || !o || !params || !grads || !out || n_params < 1) return KILN_ERR_INVALID_ARGUMENT;
    kiln_context *ctx = m->ctx;
    memset(out, 0, sizeof *out);
    if (m->finalized) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "the optimizer goes into an open (not finalized) graph");
    if (o->optimizer < KILN_OPTIM_SGD || o->optimizer > KILN_OPTIM_LAMB)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "unknown optimizer %d", (int)o->optimizer);
    const bool scaled = loss_scale >= 0 && o->amp != KILN_AMP_OFF;
    const int n = n_params, ns = kiln_om_states((int)o->optimizer, o->momentum);
    out->n_params = n;
    out->n_states = ns;
    out->loss_scale = scaled ? loss_scale : -1;
    out->growth_tracker = out->skipped = out->found_inf = -1;
    out->loss_scale_out = out->growth_tracker_out = out->skipped_out = -1;
    out->micro = out->micro_out = -1;
    const int K = o->accumulate > 1 ? o->accumulate : 1;
    if (K > 1 && scaled)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "mixed precision with gradient accumulation is not supported yet");
    out->state_in = kiln_calloc(ctx, (size_t)(n * ns) + 1, sizeof(int), "optimizer graph");
    out->state_out = kiln_calloc(ctx, (size_t)(n * ns) + 1, sizeof(int), "optimizer graph");
    out->param_out = kiln_calloc(ctx, (size_t)n, sizeof(int), "optimizer graph");
    out->param_in = kiln_calloc(ctx, (size_t)n, sizeof(int), "optimizer graph");
    const int n_in = 3 + n * (2 + ns), n_out = 1 + n * (1 + ns);
    int *in = kiln_calloc(ctx, (size_t)n_in, sizeof(int), "optimizer graph");
    int *outs = kiln_calloc(ctx, (size_t)n_out, sizeof(int), "optimizer graph");
    const char **names = kiln_calloc(ctx, (size_t)n_out, sizeof *names, "optimizer graph");
    char *name_buf = kiln_calloc(ctx, (size_t)n_out, 320, "optimizer graph");
    kiln_status st = out->state_in && out->state_out && out->param_out && out->param_in && in && outs && names && name_buf
                         ? KILN_OK
                         : KILN_ERR_OUT_OF_MEMORY;
    static const char *state_names[6][2] = {{"momentum_buffer", ""}, {"exp_avg", "exp_avg_sq"},
                                            {"exp_avg", "exp_avg_sq"}, {"square_avg", "acc_delta"},
                                            {"momentum_buffer", ""},   {"exp_avg", "exp_avg_sq"}};
    for (int k = 0; k < n && !st; k++) {
        const kiln_value *p = &m->values[params[k]];
        if (params[k] < 0 || params[k] >= m->n_values || grads[k] < 0 || grads[k] >= m->n_values)
            st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "parameter %d: value index out of range", k);
        else if (p->dtype != KILN_F32 || p->ndim < 0)
            st = kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "parameter '%s' must be f32 with a known shape", p->name);
        for (int j = 0; j < ns && !st; j++) {
            if (states) {
                out->state_in[k * ns + j] = states[k * ns + j];
                continue;
            }
            char nm[320];
            snprintf(nm, sizeof nm, "kiln:%s:%s", p->name, state_names[o->optimizer][j]);
            const int ndim = p->ndim;
            int64_t dims[KILN_MAX_DIMS];
            memcpy(dims, p->dims, sizeof dims);
            st = kiln_model_add_input(m, nm, KILN_F32, ndim, dims);
            out->state_in[k * ns + j] = st ? -1 : kiln_model_find_value(m, nm);
            /* kiln_model_add_input may move m->values: p is re-read next turn */
            p = &m->values[params[k]];
        }
    }
    if (!st && (out->step = scalar_input(m, "step", KILN_I64)) < 0) st = KILN_ERR_INVALID_ARGUMENT;
    int check[2] = {-1, -1};
    const int *step_grads = grads; /* what the update reads: the gradients, or their running mean */
    if (!st && K > 1) {
        /* kiln.GradAccumulate(micro, grads..., sums...) -> micro', skip, sums'...; the update
         * reads the sums and is skipped but on a step's last micro-batch */
        out->acc_in = kiln_calloc(ctx, (size_t)n, sizeof(int), "optimizer graph");
        out->acc_out = kiln_calloc(ctx, (size_t)n + 2, sizeof(int), "optimizer graph");
        int *ain = kiln_calloc(ctx, (size_t)(1 + 2 * n), sizeof(int), "optimizer graph");
        const char **an = kiln_calloc(ctx, (size_t)(2 + n), sizeof *an, "optimizer graph");
        char *abuf = kiln_calloc(ctx, (size_t)(2 + n), 320, "optimizer graph");
        kiln_attr *a = kiln_calloc(ctx, 2, sizeof *a, "accumulation attributes");
        if (!out->acc_in || !out->acc_out || !ain || !an || !abuf || !a) st = KILN_ERR_OUT_OF_MEMORY;
        if (!st && (out->micro = scalar_input(m, "micro_step", KILN_I64)) < 0) st = KILN_ERR_INVALID_ARGUMENT;
        for (int k = 0; k < n && !st; k++) {
            char nm[300];
            snprintf(nm, sizeof nm, "kiln:%s:grad_sum", m->values[params[k]].name);
            const kiln_value *p = &m->values[params[k]];
            int64_t dims[KILN_MAX_DIMS];
            memcpy(dims, p->dims, sizeof dims);
            st = kiln_model_add_input(m, nm, KILN_F32, p->ndim, dims);
            out->acc_in[k] = st ? -1 : kiln_model_find_value(m, nm);
            snprintf(abuf + (size_t)(2 + k) * 320, 320, "%s:next", nm);
            an[2 + k] = abuf + (size_t)(2 + k) * 320;
        }
        if (!st) {
            ain[0] = out->micro;
            memcpy(ain + 1, grads, sizeof(int) * (size_t)n);
            memcpy(ain + 1 + n, out->acc_in, sizeof(int) * (size_t)n);
            an[0] = "kiln:micro_step:next";
            an[1] = "kiln:accumulating";
            if (!put_attr(ctx, &a[0], "n", KILN_ATTR_INT, 0, n) ||
                !put_attr(ctx, &a[1], "accumulate", KILN_ATTR_INT, 0, K)) {
                kiln_attr_clear(&a[0]);
                st = KILN_ERR_OUT_OF_MEMORY;
            }
        }
        int *aout = out->acc_out;
        if (!st) {
            st = add_node(m, "GradAccumulate", 1 + 2 * n, ain, 2 + n, aout, an, 2, a);
            a = NULL;
        }
        if (!st) {
            out->micro_out = aout[0];
            check[0] = aout[1]; /* the update's skip */
            memmove(aout, aout + 2, sizeof(int) * (size_t)n);
            step_grads = aout;
        }
        free(a);
        free(ain);
        free(an);
        free(abuf);
    }
    /* data parallelism: the gradients the update reads averaged over the ranks (with
     * accumulation the step's mean, reduced on its last micro-batch only); so every rank
     * sees the same gradients, and the inf/NaN check below agrees across ranks */
    int *reduced = NULL;
    if (!st && o->dist) {
        reduced = kiln_calloc(ctx, (size_t)n, sizeof(int), "optimizer graph");
        if (!reduced) st = KILN_ERR_OUT_OF_MEMORY;
        else {
            memcpy(reduced, step_grads, sizeof(int) * (size_t)n);
            st = kiln_dist_insert_allreduce(m, o->dist, o->bucket_bytes, n, params, reduced, K > 1 ? check[0] : -1);
            step_grads = reduced;
        }
    }
    if (!st && scaled) {
        /* found_inf and inv_scale over every gradient */
        int *cin = kiln_calloc(ctx, (size_t)n + 1, sizeof(int), "optimizer graph");
        if (!cin) st = KILN_ERR_OUT_OF_MEMORY;
        else {
            cin[0] = loss_scale;
            memcpy(cin + 1, step_grads, sizeof(int) * (size_t)n);
            static const char *const cn[2] = {"kiln:found_inf", "kiln:inv_scale"};
            st = add_node(m, "NonFiniteCheck", n + 1, cin, 2, check, cn, 0, NULL);
            free(cin);
        }
        out->found_inf = check[0];
    }
    if (!st) {
        in[0] = out->step;
        in[1] = check[0];
        in[2] = check[1];
        names[0] = "kiln:step:next";
        for (int k = 0; k < n; k++) {
            in[3 + k] = params[k];
            in[3 + n + k] = step_grads[k];
            char *nm = name_buf + (size_t)(1 + k) * 320;
            snprintf(nm, 320, "%s:next", m->values[params[k]].name);
            names[1 + k] = nm;
            for (int j = 0; j < ns; j++) {
                in[3 + 2 * n + k * ns + j] = out->state_in[k * ns + j];
                nm = name_buf + (size_t)(1 + n + k * ns + j) * 320;
                snprintf(nm, 320, "%s:next", m->values[out->state_in[k * ns + j]].name);
                names[1 + n + k * ns + j] = nm;
            }
        }
        kiln_attr *attrs = NULL;
        int n_attrs = 0;
        /* no_decay_bn_bias: the parameters of at most one dimension (kiln_om_no_decay) */
        int64_t *no_decay = NULL;
        if (o->no_decay_bn_bias) {
            no_decay = kiln_calloc(ctx, (size_t)n, sizeof(int64_t), "optimizer graph");
            if (!no_decay) st = KILN_ERR_OUT_OF_MEMORY;
            for (int k = 0; k < n && no_decay; k++)
                no_decay[k] = kiln_om_no_decay(o->no_decay_bn_bias, m->values[params[k]].ndim);
        }
        if (!st) st = kiln_optim_step_attrs_nd(ctx, o, n, no_decay, &attrs, &n_attrs);
        free(no_decay);
        if (!st) st = add_node(m, "OptimizerStep", n_in, in, n_out, outs, names, n_attrs, attrs);
    }
    if (!st) {
        memcpy(out->param_in, params, sizeof(int) * (size_t)n);
        out->step_out = outs[0];
        memcpy(out->param_out, outs + 1, sizeof(int) * (size_t)n);
        memcpy(out->state_out, outs + 1 + n, sizeof(int) * (size_t)(n * ns));
    }
    if (!st && scaled) {
        /* GradScaler's update, the trainer's constants (dynamic under fp16 only) */
        if ((out->growth_tracker = scalar_input(m, "growth_tracker", KILN_I64)) < 0 ||
            (out->skipped = scalar_input(m, "skipped_steps", KILN_I64)) < 0)
            st = KILN_ERR_INVALID_ARGUMENT;
        kiln_attr *a = st ? NULL : kiln_calloc(ctx, 4, sizeof *a, "loss scaler attributes");
        if (!st && !a) st = KILN_ERR_OUT_OF_MEMORY;
        if (!st && (!put_attr(ctx, &a[0], "dynamic", KILN_ATTR_INT, 0, o->amp == KILN_AMP_FP16) ||
                    !put_attr(ctx, &a[1], "growth_factor", KILN_ATTR_FLOAT, 2.0f, 0) ||
                    !put_attr(ctx, &a[2], "backoff_factor", KILN_ATTR_FLOAT, 0.5f, 0) ||
                    !put_attr(ctx, &a[3], "growth_interval", KILN_ATTR_INT, 0, 2000))) {
            for (int j = 0; j < 4; j++) kiln_attr_clear(&a[j]);
            free(a);
            st = KILN_ERR_OUT_OF_MEMORY;
        }
        if (!st) {
            const int sin[4] = {loss_scale, check[0], out->growth_tracker, out->skipped};
            int sout[3];
            static const char *const sn[3] = {"kiln:loss_scale:next", "kiln:growth_tracker:next",
                                              "kiln:skipped_steps:next"};
            st = add_node(m, "LossScaleUpdate", 4, sin, 3, sout, sn, 4, a);
            if (!st) {
                out->loss_scale_out = sout[0];
                out->growth_tracker_out = sout[1];
                out->skipped_out = sout[2];
            }
        }
    }
    free(reduced);
    free(in);
    free(outs);
    free(names);
    free(name_buf);
    if (st) kiln_optim_graph_clear(out);
    return st;
}
