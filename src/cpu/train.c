/*
 * train.c — the CPU backend's training engine (kiln_backend_train_i, src/core/backend.h).
 *
 * A step runs the training graph (forward + backward) in the trainer's session, copies the
 * updated BatchNormalization statistics back, accumulates gradients over micro-batches and
 * then, as one isolated call, updates every parameter on the host: kiln_optimizer_update
 * (with PyTorch's GradScaler checks first under mixed precision). The batch source is the
 * host loader (src/data/loader.c, gathering on the caller's thread): the batches of an
 * epoch in the order kiln_loader_permutation gives, as the CUDA engine's device-resident
 * source gathers them.
 */
#include "../core/backend.h"
#include "../core/plan.h"
#include "../core/schedule.h"
#include "../data/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct cpu_trainer {
    const kiln_train_view *v;
    /* the batch source: a loader over the data set (made again when the data set, the
     * batch size or the seed change) and the batch the last step read */
    kiln_loader *loader;
    const kiln_tensor *images, *labels;
    int64_t n, numel, batch;
    uint64_t seed;
    const kiln_batch *held;
} cpu_trainer;

/* --------------------------------------------------------- the fused optimizer */

void kiln_optimizer_update(const kiln_train_options *o, int64_t step, float lr, int n, kiln_param *ps) {
    const float wd = o->weight_decay, mom = o->momentum;
    const double bc1 = 1 - pow(o->beta1, (double)(step + 1)), bc2 = 1 - pow(o->beta2, (double)(step + 1));
    for (int k = 0; k < n; k++) {
        kiln_param *p = &ps[k];
        float *w = p->value->data, *s0 = p->state[0], *s1 = p->state[1];
        const float *g = p->grad;
        const int64_t len = p->numel;
        switch (o->optimizer) {
        case KILN_OPTIM_SGD:
            for (int64_t i = 0; i < len; i++) {
                float d = g[i] + wd * w[i];
                if (mom != 0) {
                    s0[i] = step == 0 ? d : mom * s0[i] + d; /* PyTorch: the first step takes the gradient */
                    d = o->nesterov ? d + mom * s0[i] : s0[i];
                }
                w[i] -= lr * d;
            }
            break;
        case KILN_OPTIM_ADAM:
        case KILN_OPTIM_ADAMW: {
            const bool decoupled = o->optimizer == KILN_OPTIM_ADAMW;
            const float b1 = o->beta1, b2 = o->beta2, eps = o->eps;
            for (int64_t i = 0; i < len; i++) {
                float d = g[i];
                if (decoupled) w[i] *= 1 - lr * wd;
                else d += wd * w[i];
                s0[i] = b1 * s0[i] + (1 - b1) * d;
                s1[i] = b2 * s1[i] + (1 - b2) * d * d;
                float mhat = (float)(s0[i] / bc1), vhat = (float)(s1[i] / bc2);
                w[i] -= lr * mhat / (sqrtf(vhat) + eps);
            }
            break;
        }
        case KILN_OPTIM_ADADELTA: {
            const float rho = o->rho, eps = o->eps;
            for (int64_t i = 0; i < len; i++) {
                float d = g[i] + wd * w[i];
                s0[i] = rho * s0[i] + (1 - rho) * d * d;               /* square_avg */
                float delta = sqrtf(s1[i] + eps) / sqrtf(s0[i] + eps) * d;
                s1[i] = rho * s1[i] + (1 - rho) * delta * delta;       /* acc_delta */
                w[i] -= lr * delta;
            }
            break;
        }
        }
    }
}

/* ---------------------------------------------------------------- lifecycle */

static kiln_status cpu_create(const kiln_train_view *v, void **out) {
    cpu_trainer *ct = kiln_calloc(v->ctx, 1, sizeof *ct, "a trainer");
    if (!ct) return KILN_ERR_OUT_OF_MEMORY;
    ct->v = v;
    *out = ct;
    return KILN_OK;
}

static void cpu_free(void *tr) {
    cpu_trainer *ct = tr;
    if (!ct) return;
    kiln_loader_free(ct->loader); /* also gives back the batch held */
    free(ct);
}

/* The weights live in the host copies themselves. */
static kiln_status cpu_sync(void *tr) {
    (void)tr;
    return KILN_OK;
}

/* ---------------------------------------------------------------- stepping */

/* PyTorch's GradScaler on the CPU: gradients of the scaled loss are checked for inf/NaN;
 * a bad step is skipped and the scale halved; otherwise the gradients are unscaled (into
 * the accumulation-free grad pointers' own memory: they belong to this run) and, after
 * 2000 clean steps, the scale doubles. Returns whether the update should happen. */
static bool grad_scaler_unscale(const kiln_train_view *t) {
    const float inv = 1.0f / t->n->loss_scale;
    bool finite = true;
    for (int k = 0; k < t->n_params && finite; k++)
        for (int64_t i = 0; i < t->params[k].numel; i++)
            if (!isfinite(t->params[k].grad[i])) {
                finite = false;
                break;
            }
    if (!finite) {
        if (t->opts->amp == KILN_AMP_FP16) t->n->loss_scale *= 0.5f;
        t->n->clean_steps = 0;
        t->n->skipped_steps++;
        return false;
    }
    for (int k = 0; k < t->n_params; k++) {
        float *g = (float *)t->params[k].grad;
        for (int64_t i = 0; i < t->params[k].numel; i++) g[i] *= inv;
    }
    if (t->opts->amp == KILN_AMP_FP16 && ++t->n->clean_steps >= 2000) {
        float grown = t->n->loss_scale * 2.0f;
        if (isfinite(grown)) t->n->loss_scale = grown;
        t->n->clean_steps = 0;
    }
    return true;
}

/* The optimizer update after the last micro-batch, one isolated call (the place the fused
 * optimizer op of the training graph takes over): GradScaler's check, the schedule's
 * learning rate, kiln_optimizer_update over every parameter. */
static void optimizer_step(const kiln_train_view *t) {
    if (t->scale_input && !grad_scaler_unscale(t)) return; /* inf/NaN: step skipped */
    float lr = kiln_lr_schedule(t->opts, t->n->steps);
    kiln_optimizer_update(t->opts, t->n->steps, lr, t->n_params, t->params);
    t->n->steps++;
}

static kiln_status cpu_step(void *tr, bool resident, float *loss) {
    const kiln_train_view *t = ((cpu_trainer *)tr)->v;
    (void)resident; /* the CPU's batches are always in the feeds' host memory */
    int nf = t->n_data_inputs + t->n_params + t->n_states + (t->scale_input != NULL), no = 1 + t->n_params + t->n_states;
    if (t->scale_input) ((float *)t->scale_input->data)[0] = t->n->loss_scale;
    /* dropout masks depend only on (seed, micro-step): a resumed run draws the same ones */
    uint64_t seed = kiln_train_seed_base(t->opts) + (uint64_t)t->n->micro_steps;
    kiln_status st = kiln_session_run_seeded(t->sess, seed, nf, t->feeds, no, t->outs);
    if (st) return st;
    const int K = t->opts->accumulate;
    const int micro = (int)(t->n->micro_steps % K);
    for (int k = 0; k < t->n_params; k++) {
        kiln_param *p = &t->params[k];
        const float *g = t->outs[1 + k]->data;
        if (K == 1) {
            p->grad = g;
            continue;
        }
        /* the first micro-batch overwrites, later ones add: no zeroing pass */
        if (micro == 0) memcpy(p->acc, g, sizeof(float) * (size_t)p->numel);
        else for (int64_t i = 0; i < p->numel; i++) p->acc[i] += g[i];
        if (micro == K - 1)
            for (int64_t i = 0; i < p->numel; i++) p->acc[i] /= (float)K;
        p->grad = p->acc;
    }
    for (int k = 0; k < t->n_states; k++)
        memcpy(t->states[k].value->data, t->outs[1 + t->n_params + k]->data, kiln_tensor_nbytes(t->states[k].value));
    if (loss) *loss = (float)kiln_get_f64(t->outs[0], 0);
    t->n->micro_steps++;
    if (micro == K - 1) optimizer_step(t);
    return KILN_OK;
}


/* ------------------------------------------------------- the batch source */

static kiln_status cpu_epoch_begin(void *tr, const kiln_tensor *images, const kiln_tensor *labels, int64_t batch,
                                   uint64_t seed, int64_t epoch, int64_t start) {
    cpu_trainer *ct = tr;
    kiln_status st = KILN_OK;
    if (ct->held) st = kiln_loader_release(ct->loader, ct->held);
    ct->held = NULL;
    if (st) return st;
    if (!ct->loader || ct->images != images || ct->labels != labels || ct->n != images->dims[0] ||
        ct->numel != kiln_tensor_numel(images) || ct->batch != batch || ct->seed != seed) {
        kiln_loader_free(ct->loader);
        ct->loader = NULL;
        kiln_loader_options lo = kiln_loader_options_default();
        lo.batch_size = batch;
        lo.shuffle = true;
        lo.seed = seed;
        lo.workers = 0; /* gathered on this thread, between steps */
        lo.slots = 1;
        st = kiln_loader_create(ct->v->ctx, images, labels, &lo, &ct->loader);
        if (st) return st;
        ct->images = images;
        ct->labels = labels;
        ct->n = images->dims[0];
        ct->numel = kiln_tensor_numel(images);
        ct->batch = batch;
        ct->seed = seed;
    }
    /* past the epoch's end no batch is drawn */
    return start < kiln_loader_steps_per_epoch(ct->loader) ? kiln_loader_seek(ct->loader, epoch, start) : KILN_OK;
}

static kiln_status cpu_epoch_batch(void *tr, int64_t s, int64_t b, bool *resident) {
    cpu_trainer *ct = tr;
    kiln_status st = ct->held ? kiln_loader_release(ct->loader, ct->held) : KILN_OK;
    ct->held = NULL;
    if (!st) st = kiln_loader_next(ct->loader, &ct->held);
    if (st) return st;
    if (ct->held->step != s || ct->held->size != b)
        return kiln_fail(ct->v->ctx, KILN_ERR_INTERNAL, "the loader gave step %lld (%lld samples) for step %lld (%lld)",
                         (long long)ct->held->step, (long long)ct->held->size, (long long)s, (long long)b);
    ct->v->feeds[0] = ct->held->x;
    ct->v->feeds[1] = ct->held->y;
    *resident = false;
    return KILN_OK;
}

/* ---------------------------------------------------------------- profiling */

static double host_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The CPU side of kiln_trainer_profile: the run list through the session's profile, the
 * update (and whole steps) on the host clock. The update changes weights and optimizer
 * state: both are copied aside first and back afterwards. It reads the gradients of the
 * profile's own run, never the accumulation buffers (mid-accumulation they hold the
 * running sum); the parameters' grad pointers are put back as they were. */
static kiln_status cpu_profile(void *tr, const kiln_tensor *images, const kiln_tensor *labels, int64_t batch, int iters,
                               int replays, kiln_profile *out, double *step_ms) {
    const kiln_train_view *t = ((cpu_trainer *)tr)->v;
    kiln_context *ctx = t->ctx;
    const int64_t n = images->dims[0], b = batch < n ? batch : n;
    const int ns = kiln_optimizer_states(t->opts);
    const int nf = t->n_data_inputs + t->n_params + t->n_states + (t->scale_input != NULL),
              no = 1 + t->n_params + t->n_states;
    int64_t xd[KILN_MAX_DIMS] = {0};
    memcpy(xd, images->dims, sizeof xd);
    xd[0] = b;
    kiln_tensor *x = kiln_tensor_new(ctx, images->dtype, images->ndim, xd);
    kiln_tensor *y = kiln_tensor_new(ctx, labels->dtype, 1, &b);
    const float **grads = kiln_calloc(ctx, (size_t)t->n_params + 1, sizeof *grads, "the profile's saved state");
    float *saved = kiln_malloc(ctx, sizeof(float) * (size_t)(t->param_count * (1 + ns)) + 1, "the profile's saved state");
    double *upd = kiln_calloc(ctx, (size_t)iters, sizeof *upd, "profile times");
    double *whole = kiln_calloc(ctx, (size_t)replays, sizeof *whole, "profile times");
    kiln_tensor *feeds0[2] = {t->feeds[0], t->feeds[1]};
    kiln_status st = x && y && grads && saved && upd && whole ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (!st) {
        /* the first b samples, in the data set's order */
        memcpy(x->data, images->data, kiln_tensor_nbytes(x));
        memcpy(y->data, labels->data, kiln_tensor_nbytes(y));
        t->feeds[0] = x;
        t->feeds[1] = y;
        if (t->scale_input) ((float *)t->scale_input->data)[0] = t->n->loss_scale;
        st = kiln_session_profile(t->sess, nf, t->feeds, 1, iters, out);
    }
    if (!st) {
        float *p = saved;
        for (int k = 0; k < t->n_params; k++) {
            const kiln_param *pk = &t->params[k];
            const size_t nb = sizeof(float) * (size_t)pk->numel;
            memcpy(p, pk->value->data, nb);
            p += pk->numel;
            for (int j = 0; j < ns; j++, p += pk->numel) memcpy(p, pk->state[j], nb);
            grads[k] = pk->grad;
        }
        const float lr = kiln_lr_schedule(t->opts, t->n->steps);
        const uint64_t seed = kiln_train_seed_base(t->opts) + (uint64_t)t->n->micro_steps;
        st = kiln_session_run_seeded(t->sess, seed, nf, t->feeds, no, t->outs);
        for (int k = 0; k < t->n_params && !st; k++) t->params[k].grad = t->outs[1 + k]->data;
        for (int i = 0; i < iters && !st; i++) {
            const double t0 = host_ms();
            kiln_optimizer_update(t->opts, t->n->steps, lr, t->n_params, t->params);
            upd[i] = host_ms() - t0;
        }
        for (int i = 0; i < replays && !st; i++) {
            const double t0 = host_ms();
            st = kiln_session_run_seeded(t->sess, seed, nf, t->feeds, no, t->outs);
            for (int k = 0; k < t->n_params && !st; k++) t->params[k].grad = t->outs[1 + k]->data;
            if (!st) kiln_optimizer_update(t->opts, t->n->steps, lr, t->n_params, t->params);
            whole[i] = host_ms() - t0;
        }
        p = saved;
        for (int k = 0; k < t->n_params; k++) {
            kiln_param *pk = &t->params[k];
            const size_t nb = sizeof(float) * (size_t)pk->numel;
            memcpy(pk->value->data, p, nb);
            p += pk->numel;
            for (int j = 0; j < ns; j++, p += pk->numel) memcpy(pk->state[j], p, nb);
            pk->grad = grads[k];
        }
    }
    if (!st) {
        char shapes[160];
        snprintf(shapes, sizeof shapes, "%lld parameters in %d tensors, %s", (long long)t->param_count, t->n_params,
                 kiln_optimizer_name(t->opts->optimizer));
        st = kiln_profile_add_row(ctx, out, "optimizer", "update", shapes, upd, iters, 0, kiln_train_update_bytes(t));
    }
    if (!st) *step_ms = kiln_median(whole, replays);
    t->feeds[0] = feeds0[0];
    t->feeds[1] = feeds0[1];
    kiln_tensor_free(x);
    kiln_tensor_free(y);
    free(grads);
    free(saved);
    free(upd);
    free(whole);
    if (st) kiln_profile_free(out);
    return st;
}

const kiln_backend_train_i kiln_cpu_train_i = {
    .create = cpu_create,
    .free = cpu_free,
    .upload = cpu_sync,
    .download = cpu_sync,
    .step = cpu_step,
    .epoch_begin = cpu_epoch_begin,
    .epoch_batch = cpu_epoch_batch,
    .warmup = NULL,
    .profile = cpu_profile,
};
