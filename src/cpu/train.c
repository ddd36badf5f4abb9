/*
 * train.c — the CPU backend's training engine (kiln_backend_train_i, src/core/backend.h).
 *
 * A step runs the training graph in the trainer's session: forward, backward and the
 * optimizer update, which are nodes of the graph (src/train/optim_graph.h;
 * gradient accumulation, GradScaler's check, skip and scale update, the schedule, every
 * optimizer), the parameters, optimizer states and counters updated in place (the planner
 * computes each next value in its input's buffer: kiln_op_def.inplace_input). The step
 * copies the updated BatchNormalization statistics back and reads the counters. The batch
 * source is the
 * host loader (src/data/loader.c, gathering on the caller's thread): the batches of an
 * epoch in the order kiln_loader_permutation gives, as the CUDA engine's device-resident
 * source gathers them.
 */
#include "../core/backend.h"
#include "../core/plan.h"
#include "../data/data.h"

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

/* The carried state's next values into the fed tensors: nothing to do where the planner
 * computed them in place (every one, unless an output aliases another). */
static void carry(const kiln_train_view *t) {
    for (int j = 0; j < t->n_carried; j++) {
        kiln_tensor *dst = t->feeds[t->carried_feed[j]];
        const kiln_tensor *src = t->outs[1 + j];
        if (src->data != dst->data) memcpy(dst->data, src->data, kiln_tensor_nbytes(dst));
    }
}

/* The trainer's counters from the graph's carried scalars. */
static void counters_from_graph(const kiln_train_view *t) {
    kiln_train_counters *n = t->n;
    if (t->step_count) n->steps = ((const int64_t *)t->step_count->data)[0];
    if (t->skipped_count) n->skipped_steps = ((const int64_t *)t->skipped_count->data)[0];
    if (t->growth_count) n->clean_steps = ((const int64_t *)t->growth_count->data)[0];
    if (t->scale_input) n->loss_scale = ((const float *)t->scale_input->data)[0];
}

static kiln_status cpu_step(void *tr, bool resident, float *loss) {
    const kiln_train_view *t = ((cpu_trainer *)tr)->v;
    (void)resident; /* the CPU's batches are always in the feeds' host memory */
    /* dropout masks depend only on (seed, micro-step): a resumed run draws the same ones */
    uint64_t seed = kiln_train_seed_base(t->opts) + (uint64_t)t->n->micro_steps;
    kiln_status st = kiln_session_run_seeded(t->sess, seed, t->n_feeds, t->feeds, t->n_outs, t->outs);
    if (st) return st;
    carry(t);
    for (int k = 0; k < t->n_states; k++)
        memcpy(t->states[k].value->data, t->outs[1 + t->n_carried + k]->data, kiln_tensor_nbytes(t->states[k].value));
    if (loss) *loss = (float)kiln_get_f64(t->outs[0], 0);
    t->n->micro_steps++;
    counters_from_graph(t);
    return KILN_OK;
}


/* ------------------------------------------------------- the batch source */

static kiln_status cpu_epoch_begin(void *tr, const kiln_tensor *images, const kiln_tensor *labels, int64_t batch,
                                   uint64_t seed, int64_t epoch, int64_t offset, int64_t start) {
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
        if (ct->v->opts->dist) { /* data parallelism: this rank's shard of each epoch */
            lo.shard_rank = kiln_dist_rank(ct->v->opts->dist);
            lo.shard_count = kiln_dist_size(ct->v->opts->dist);
            lo.shard_drop = ct->v->opts->drop_last != 0;
        }
        st = kiln_loader_create(ct->v->ctx, images, labels, &lo, &ct->loader);
        if (st) return st;
        ct->images = images;
        ct->labels = labels;
        ct->n = images->dims[0];
        ct->numel = kiln_tensor_numel(images);
        ct->batch = batch;
        ct->seed = seed;
    }
    if (offset > 0) {
        /* the rest of the epoch from position offset of its order, sharded over the ranks;
         * its step `start` (counted from the rest's first) */
        st = kiln_loader_seek_sample(ct->loader, epoch, offset);
        for (int64_t s = 0; s < start && !st; s++) {
            const kiln_batch *b = NULL;
            st = kiln_loader_next(ct->loader, &b);
            if (!st) st = kiln_loader_release(ct->loader, b);
        }
        return st;
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

/* The CPU side of kiln_trainer_profile: the run list through the session's profile (the
 * optimizer update is its nodes, kiln.OptimizerStep ...), whole steps on the host clock.
 * Each run updates the carried state (weights, optimizer states, counters, loss scale):
 * it is copied aside first and back afterwards. */
static kiln_status cpu_profile(void *tr, const kiln_tensor *images, const kiln_tensor *labels, int64_t batch, int iters,
                               int replays, kiln_profile *out, double *step_ms) {
    const kiln_train_view *t = ((cpu_trainer *)tr)->v;
    kiln_context *ctx = t->ctx;
    const int64_t n = images->dims[0], b = batch < n ? batch : n;
    int64_t xd[KILN_MAX_DIMS] = {0};
    memcpy(xd, images->dims, sizeof xd);
    xd[0] = b;
    size_t carried_bytes = 1;
    for (int j = 0; j < t->n_carried; j++) carried_bytes += kiln_tensor_nbytes(t->feeds[t->carried_feed[j]]);
    kiln_tensor *x = kiln_tensor_new(ctx, images->dtype, images->ndim, xd);
    kiln_tensor *y = kiln_tensor_new(ctx, labels->dtype, 1, &b);
    char *saved = kiln_malloc(ctx, carried_bytes, "the profile's saved state");
    double *whole = kiln_calloc(ctx, (size_t)replays, sizeof *whole, "profile times");
    kiln_tensor *feeds0[2] = {t->feeds[0], t->feeds[1]};
    kiln_status st = x && y && saved && whole ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (!st) {
        /* the first b samples, in the data set's order */
        memcpy(x->data, images->data, kiln_tensor_nbytes(x));
        memcpy(y->data, labels->data, kiln_tensor_nbytes(y));
        t->feeds[0] = x;
        t->feeds[1] = y;
        char *p = saved;
        for (int j = 0; j < t->n_carried; j++) {
            const kiln_tensor *c = t->feeds[t->carried_feed[j]];
            memcpy(p, c->data, kiln_tensor_nbytes(c));
            p += kiln_tensor_nbytes(c);
        }
        st = kiln_session_profile(t->sess, t->n_feeds, t->feeds, 1, iters, out);
        const uint64_t seed = kiln_train_seed_base(t->opts) + (uint64_t)t->n->micro_steps;
        for (int i = 0; i < replays && !st; i++) {
            const double t0 = host_ms();
            st = kiln_session_run_seeded(t->sess, seed, t->n_feeds, t->feeds, t->n_outs, t->outs);
            if (!st) carry(t);
            whole[i] = host_ms() - t0;
        }
        p = saved;
        for (int j = 0; j < t->n_carried; j++) {
            kiln_tensor *c = t->feeds[t->carried_feed[j]];
            memcpy(c->data, p, kiln_tensor_nbytes(c));
            p += kiln_tensor_nbytes(c);
        }
    }
    if (!st) *step_ms = kiln_median(whole, replays);
    t->feeds[0] = feeds0[0];
    t->feeds[1] = feeds0[1];
    kiln_tensor_free(x);
    kiln_tensor_free(y);
    free(saved);
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
