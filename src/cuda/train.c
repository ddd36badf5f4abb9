/*
 * train.c — the CUDA backend's training engine (kiln_backend_train_i, src/core/backend.h).
 *
 * The training graph is the trainer's (forward, backward and the optimizer update as its
 * nodes, src/train/trainer.c); here it is lowered onto CUDA, on the trainer's session's
 * kiln_cuda, with the weights, optimizer state, counters and BatchNormalization statistics
 * resident on the device (bound graph inputs, never uploaded). The update's node group
 * (kiln.OptimizerStep, with NonFiniteCheck and LossScaleUpdate under loss scaling) is
 * lowered to the fused tail kernel below: the engine plans the graph without those nodes
 * (kiln_train_lower_update: the gradients they read become the plan's outputs) and runs
 * the group as the captured epilogue, one launch (two with the check) where the nodes would
 * be five. Each step is ONE captured CUDA graph:
 *   the forward and backward kernels, the running statistics copied back, the fused
 *   optimizer over every parameter (learning rate and step count read from device memory)
 *   whose last block also sets the schedule's next learning rate and the next Dropout seed.
 * The host only uploads the batch (pinned staging, asynchronous) and launches the graph:
 * no synchronization inside a step. The loss is copied into a device ring and read only
 * when asked for.
 *
 * The batch source keeps the data set resident on the device: the batch is gathered there,
 * by the captured graph's prologue (kiln_cuda_gather_batch).
 *
 * cu_train_profile (kiln train --profile) times one step's parts: the nodes one
 * by one with the prologue and epilogue between events of their own, then replays of the
 * captured graph; all of the device state is copied aside first and back afterwards.
 */
#include "../core/backend.h"
#include "../core/plan.h"
#include "../core/schedule.h"
#include "../data/data.h"
#include "../ops/optim_math.h" /* kiln_om_no_decay: no_decay_bn_bias's rule */
#include "../dist/dist.h"
#include "cuda_plan.h"
#include "norm_train.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SHAPES 4
#define LOSS_RING 4096

typedef struct cuda_shape_plan {
    kiln_cuda_plan *cp;
    bool resident;                /* batches gathered on the device (prologue) */
    int64_t batch;
    kiln_cuda_optim_entry *table; /* device */
    int64_t chunks;
    const float *loss;            /* device address of this plan's loss */
    void **bn_out;                /* (n_states) device addresses of the updated statistics */
} cuda_shape_plan;

typedef struct cuda_trainer {
    const kiln_train_view *t;
    kiln_model *m;             /* the training graph as planned: its update lowered (above) */
    kiln_cuda *cu;             /* the session's */
    void *dev;                 /* one allocation: parameters, optimizer state, BN state, ... */
    size_t dev_bytes;          /* its size: all of the training state on the device */
    void **bound;              /* (n_inputs of the training graph) */
    float **param, **s0, **s1; /* (n_params) device */
    void **bn;                 /* (n_states) device */
    kiln_cuda_train_state *state;
    int64_t *counter;          /* Dropout seed counter */
    float *loss_ring;          /* (LOSS_RING) device: step k's loss at k % LOSS_RING */
    int64_t *ring_at;          /* device: the micro-step whose loss the next step end writes */
    cuda_shape_plan plans[MAX_SHAPES];
    int n_plans;
    /* a data set resident on the device (kiln_trainer_train_epoch) */
    const void *data_key;      /* host images pointer it was uploaded from */
    int64_t data_n, sample;
    float *images;             /* (n, sample) */
    int64_t *labels, *perm, *pos;
    kiln_tensor *shape_x[MAX_SHAPES], *shape_y[MAX_SHAPES];
    cuda_shape_plan *running;  /* the plan whose epilogue is being enqueued */
    bool host_stale;           /* device weights newer than the host copies */
    const kiln_tensor *ep_images; /* the epoch's data set (cu_epoch_begin): the batches' shapes */
} cuda_trainer;

static size_t up(size_t n) { return (n + 255) & ~(size_t)255; }

static kiln_status cuda_err(kiln_context *ctx, cudaError_t e, const char *what) {
    return kiln_fail(ctx, e == cudaErrorMemoryAllocation ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_DEVICE, "%s: %s", what,
                     cudaGetErrorString(e));
}

static void cu_train_free(void *tr) {
    cuda_trainer *tc = tr;
    if (!tc) return;
    for (int i = 0; i < tc->n_plans; i++) {
        kiln_cuda_plan_free(tc->plans[i].cp);
        free(tc->plans[i].bn_out);
        if (tc->plans[i].table) cudaFree(tc->plans[i].table);
    }
    if (tc->dev) cudaFree(tc->dev);
    if (tc->images) cudaFree(tc->images);
    for (int i = 0; i < MAX_SHAPES; i++) {
        kiln_tensor_free(tc->shape_x[i]);
        kiln_tensor_free(tc->shape_y[i]);
    }
    free(tc->bound);
    free(tc->param);
    free(tc->s0);
    free(tc->s1);
    free(tc->bn);
    kiln_model_free(tc->m);
    free(tc);
}

/* Upload weights, optimizer state and statistics from the host copies; reset the device
 * counters to the host's (after create and after loading a checkpoint). */
static kiln_status cu_train_upload(void *tr) {
    cuda_trainer *tc = tr;
    const kiln_train_view *t = tc->t;
    kiln_status st = KILN_OK;
    const int ns = kiln_optimizer_states(t->opts);
    for (int k = 0; k < t->n_params && !st; k++) {
        kiln_param *p = &t->params[k];
        size_t nb = sizeof(float) * (size_t)p->numel;
        st = kiln_cuda_upload(tc->cu, tc->param[k], p->value->data, nb);
        if (!st && ns > 0) st = kiln_cuda_upload(tc->cu, tc->s0[k], p->state[0], nb);
        if (!st && ns > 1) st = kiln_cuda_upload(tc->cu, tc->s1[k], p->state[1], nb);
    }
    for (int k = 0; k < t->n_states && !st; k++)
        st = kiln_cuda_upload(tc->cu, tc->bn[k], t->states[k].value->data, kiln_tensor_nbytes(t->states[k].value));
    if (!st) st = kiln_cuda_train_state_init(tc->cu, t->opts, t->n->loss_scale, tc->state);
    if (!st) {
        /* the state's step and the seed counter continue from the host's counters */
        int64_t step = t->n->steps, counter = t->n->micro_steps;
        st = kiln_cuda_upload(tc->cu, &tc->state->step, &step, sizeof step);
        if (!st) {
            float lr = kiln_lr_schedule(t->opts, t->n->steps);
            st = kiln_cuda_upload(tc->cu, &tc->state->lr, &lr, sizeof lr);
        }
        if (!st) st = kiln_cuda_upload(tc->cu, tc->counter, &counter, sizeof counter);
        if (!st) st = kiln_cuda_upload(tc->cu, tc->ring_at, &counter, sizeof counter);
        if (!st) st = kiln_cuda_rng_next(tc->cu, kiln_train_seed_base(t->opts), tc->counter);
    }
    if (!st) st = kiln_cuda_sync(tc->cu);
    tc->host_stale = false;
    return st;
}

/* The engine of a trainer whose session runs on CUDA: its kiln_cuda is the session's. */
static kiln_status cu_train_create(const kiln_train_view *t, void **out) {
    kiln_context *ctx = t->ctx;
    *out = NULL;
    if (t->opts->accumulate > 1)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "gradient accumulation runs on the CPU only for now");
    cuda_trainer *tc = kiln_calloc(ctx, 1, sizeof *tc, "a CUDA trainer");
    if (!tc) return KILN_ERR_OUT_OF_MEMORY;
    tc->t = t;
    void *be = NULL;
    kiln_session_backend(t->sess, &be);
    tc->cu = be;
    kiln_status st = kiln_train_lower_update(t, &tc->m);
    const int np = t->n_params, nb = t->n_states, ns = kiln_optimizer_states(t->opts);
    const int n_in = t->train->n_inputs;
    if (!st) {
        tc->bound = kiln_calloc(ctx, (size_t)n_in + 1, sizeof *tc->bound, "a CUDA trainer");
        tc->param = kiln_calloc(ctx, (size_t)np + 1, sizeof *tc->param, "a CUDA trainer");
        tc->s0 = kiln_calloc(ctx, (size_t)np + 1, sizeof *tc->s0, "a CUDA trainer");
        tc->s1 = kiln_calloc(ctx, (size_t)np + 1, sizeof *tc->s1, "a CUDA trainer");
        tc->bn = kiln_calloc(ctx, (size_t)nb + 1, sizeof *tc->bn, "a CUDA trainer");
        if (!tc->bound || !tc->param || !tc->s0 || !tc->s1 || !tc->bn) st = KILN_ERR_OUT_OF_MEMORY;
    }
    /* layout: train state | counter | ring position | loss ring | params | state0 | state1 | bn */
    size_t total = up(sizeof(kiln_cuda_train_state)) + 2 * up(sizeof(int64_t)) + up(sizeof(float) * LOSS_RING);
    for (int k = 0; k < np; k++) total += (size_t)(1 + ns) * up(sizeof(float) * (size_t)t->params[k].numel);
    for (int k = 0; k < nb; k++) total += up(kiln_tensor_nbytes(t->states[k].value));
    if (!st) {
        cudaError_t ce = cudaMalloc(&tc->dev, total);
        if (ce != cudaSuccess) {
            tc->dev = NULL;
            st = cuda_err(ctx, ce, "cudaMalloc of the trainer's weights and state");
        }
        tc->dev_bytes = total;
    }
    if (!st) {
        char *p = tc->dev;
        tc->state = (kiln_cuda_train_state *)p;
        p += up(sizeof(kiln_cuda_train_state));
        tc->counter = (int64_t *)p;
        p += up(sizeof(int64_t));
        tc->ring_at = (int64_t *)p;
        p += up(sizeof(int64_t));
        tc->loss_ring = (float *)p;
        p += up(sizeof(float) * LOSS_RING);
        for (int k = 0; k < np; k++) {
            size_t b = up(sizeof(float) * (size_t)t->params[k].numel);
            tc->param[k] = (float *)p;
            p += b;
            if (ns > 0) { tc->s0[k] = (float *)p; p += b; }
            if (ns > 1) { tc->s1[k] = (float *)p; p += b; }
        }
        for (int k = 0; k < nb; k++) {
            tc->bn[k] = p;
            p += up(kiln_tensor_nbytes(t->states[k].value));
        }
        /* the training graph's inputs after the data, each bound to its device copy:
         * parameters, optimizer states, BN statistics; mixed precision: dL/dloss is the
         * device-side loss scale, so scaling costs nothing. The counters are the device
         * state's (the lowered graph reads none of them: bound so nothing is uploaded). */
        for (int i = t->n_data_inputs; i < n_in && !st; i++) {
            const kiln_tensor *f = t->feeds[i];
            void *d = NULL;
            for (int k = 0; k < np && !d; k++) {
                if (f == t->params[k].value) d = tc->param[k];
                else if (ns > 0 && f->data == t->params[k].state[0]) d = tc->s0[k];
                else if (ns > 1 && f->data == t->params[k].state[1]) d = tc->s1[k];
            }
            for (int k = 0; k < nb && !d; k++)
                if (f == t->states[k].value) d = tc->bn[k];
            if (!d && f == t->scale_input) d = &tc->state->loss_scale;
            if (!d && (f == t->step_count || f == t->growth_count || f == t->skipped_count)) d = &tc->state->step;
            if (!d)
                st = kiln_fail(ctx, KILN_ERR_INTERNAL, "training graph input '%s' has no device copy",
                               t->train->values[t->train->inputs[i]].name);
            tc->bound[i] = d;
        }
        if (!st) st = cu_train_upload(tc);
    }
    if (st) {
        cu_train_free(tc);
        return st;
    }
    *out = tc;
    return KILN_OK;
}

/* Captured after the run list: running statistics back into the state, then (fp16) the
 * gradient check and the optimizer, whose last block also ends the step: step counters and
 * loss scale, the next lr on the device, the next Dropout seed, the batch position
 * (kiln_cuda_step_tail). One launch (two with the check) where there were four (five):
 * each launch in the graph costs ~2-3 us of the step. */
static kiln_status epilogue(void *arg) {
    cuda_trainer *tc = arg;
    const kiln_train_view *t = tc->t;
    cuda_shape_plan *sp = tc->running;
    kiln_status st = KILN_OK;
    for (int k0 = 0; k0 < t->n_states && !st; k0 += 64) { /* one kernel for up to 64 of them */
        kiln_cuda_copy_item items[64];
        int m = 0;
        for (int k = k0; k < t->n_states && m < 64; k++, m++)
            items[m] = (kiln_cuda_copy_item){tc->bn[k], sp->bn_out[k], kiln_tensor_nbytes(t->states[k].value)};
        st = kiln_cuda_copy_batch(tc->cu, t->ctx, items, m);
    }
    const bool scaled = t->scale_input != NULL;
    /* fp16/bf16: gradients of the scaled loss are checked for inf/NaN (the step is then
     * skipped) and unscaled as the optimizer reads them */
    if (scaled && !st) st = kiln_cuda_grad_check(tc->cu, sp->table, t->n_params, sp->chunks, KILN_F32, false, tc->state);
    const kiln_cuda_scaler scaler = {.growth_factor = 2.0f, .backoff_factor = 0.5f, .growth_interval = 2000};
    const kiln_cuda_step_tail tail = {.scaler = t->opts->amp == KILN_AMP_FP16 ? &scaler : NULL,
                                      .schedule = t->opts,
                                      .rng_counter = tc->counter,
                                      .rng_base = kiln_train_seed_base(t->opts),
                                      .pos = sp->resident ? tc->pos : NULL,
                                      .pos_by = sp->batch,
                                      .loss = sp->loss,
                                      .loss_ring = tc->loss_ring,
                                      .ring_at = tc->ring_at,
                                      .ring_size = LOSS_RING};
    if (!st)
        st = kiln_cuda_optimizer_step(tc->cu, t->opts, sp->table, t->n_params, sp->chunks, KILN_F32,
                                      KILN_DTYPE_UNDEFINED, scaled, tc->state, &tail);
    return st;
}

/* Captured before the run list of a resident plan: this step's batch from the device copy. */
static kiln_status prologue(void *arg) {
    cuda_trainer *tc = arg;
    cuda_shape_plan *sp = tc->running;
    float *x = kiln_cuda_plan_value_ptr(sp->cp, tc->m->inputs[0]);
    int64_t *y = kiln_cuda_plan_value_ptr(sp->cp, tc->m->inputs[1]);
    return kiln_cuda_gather_batch(tc->cu, tc->images, tc->labels, tc->perm, tc->pos, tc->data_n, sp->batch, tc->sample, x,
                                  y);
}

static kiln_status find_plan(cuda_trainer *tc, kiln_tensor *const *feeds, bool resident, cuda_shape_plan **out) {
    const kiln_train_view *t = tc->t;
    for (int i = 0; i < tc->n_plans; i++)
        if (tc->plans[i].resident == resident && kiln_cuda_plan_matches(tc->plans[i].cp, feeds)) {
            *out = &tc->plans[i];
            return KILN_OK;
        }
    if (tc->n_plans == MAX_SHAPES)
        return kiln_fail(t->ctx, KILN_ERR_UNSUPPORTED, "more than %d batch shapes in one CUDA training run", MAX_SHAPES);
    cuda_shape_plan *sp = &tc->plans[tc->n_plans];
    memset(sp, 0, sizeof *sp);
    kiln_status st = kiln_cuda_plan_create_bound(tc->cu, tc->m, feeds, true, tc->bound, true, &sp->cp);
    if (st) return st;
    tc->n_plans++;
    sp->resident = resident;
    sp->batch = feeds[0]->ndim > 0 ? feeds[0]->dims[0] : 1;
    /* the lowered graph's outputs: loss, the gradients, the updated statistics */
    sp->loss = kiln_cuda_plan_value_ptr(sp->cp, tc->m->outputs[0]);
    sp->bn_out = kiln_calloc(t->ctx, (size_t)t->n_states + 1, sizeof *sp->bn_out, "a CUDA trainer");
    kiln_cuda_optim_entry *host = kiln_calloc(t->ctx, (size_t)t->n_params + 1, sizeof *host, "the optimizer table");
    if (!sp->bn_out || !host) {
        free(host);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int k = 0; k < t->n_states; k++)
        sp->bn_out[k] = kiln_cuda_plan_value_ptr(sp->cp, tc->m->outputs[1 + t->n_params + k]);
    for (int k = 0; k < t->n_params; k++) {
        host[k].param = tc->param[k];
        host[k].grad = kiln_cuda_plan_value_ptr(sp->cp, tc->m->outputs[1 + k]);
        host[k].state0 = tc->s0[k];
        host[k].state1 = tc->s1[k];
        host[k].n = t->params[k].numel;
        host[k].slot = k;
        if (kiln_om_no_decay(t->opts->no_decay_bn_bias, t->params[k].value->ndim))
            host[k].flags = KILN_CUDA_OPTIM_NO_DECAY;
        if (!host[k].grad) st = kiln_fail(t->ctx, KILN_ERR_INTERNAL, "parameter %d has no gradient on the device", k);
    }
    sp->chunks = kiln_cuda_optim_table_prepare(host, t->n_params);
    size_t tb = sizeof *host * (size_t)(t->n_params ? t->n_params : 1);
    /* the entries, then the scratch of LARS's / LAMB's / clipping's norms */
    cudaError_t ce = st ? cudaSuccess : cudaMalloc((void **)&sp->table, kiln_cuda_optim_table_bytes(t->n_params, sp->chunks));
    if (ce != cudaSuccess) {
        sp->table = NULL;
        st = cuda_err(t->ctx, ce, "cudaMalloc of the optimizer table");
    }
    if (!st) st = kiln_cuda_upload(tc->cu, sp->table, host, tb);
    free(host);
    if (st) return st;
    kiln_cuda_plan_set_epilogue(sp->cp, epilogue, tc);
    if (resident) kiln_cuda_plan_set_prologue(sp->cp, prologue, tc);
    *out = sp;
    return KILN_OK;
}

/* Enqueue one step (resident: the batch comes from the device copy; the step's end copies
 * its loss into the ring), and read the loss when asked. */
static kiln_status step(cuda_trainer *tc, bool resident, float *loss) {
    const kiln_train_view *t = tc->t;
    cuda_shape_plan *sp = NULL;
    kiln_status st = find_plan(tc, t->feeds, resident, &sp);
    if (st) return st;
    tc->running = sp;
    st = kiln_cuda_plan_enqueue(sp->cp, resident ? NULL : t->feeds, true);
    if (st) return st;
    float *slot = tc->loss_ring + t->n->micro_steps % LOSS_RING;
    tc->host_stale = true;
    t->n->micro_steps++;
    t->n->steps++;
    if (loss) {
        /* data parallelism: a rank that died or hangs fails this wait (dist.h), not hangs it */
        if (t->opts->dist) st = kiln_nccl_wait_stream(t->opts->dist, kiln_cuda_stream(tc->cu), "a training step");
        if (!st) st = kiln_cuda_download(tc->cu, loss, slot, sizeof(float));
        if (!st) st = kiln_cuda_sync(tc->cu);
    }
    return st;
}

static kiln_status cu_train_step(void *tr, bool resident, float *loss) { return step(tr, resident, loss); }

/* The batch source: the data set copied to the device once (again only when another one
 * comes), the epoch's order uploaded, the position set to step `start`'s batch. */
static kiln_status cu_epoch_begin(void *tr, const kiln_tensor *images, const kiln_tensor *labels, int64_t batch,
                                  uint64_t seed, int64_t epoch, int64_t offset, int64_t start) {
    cuda_trainer *tc = tr;
    const kiln_train_view *t = tc->t;
    kiln_context *ctx = t->ctx;
    const int64_t n = images->dims[0], sample = kiln_tensor_numel(images) / (n ? n : 1);
    kiln_status st = KILN_OK;
    if (tc->data_key != images->data || tc->data_n != n || tc->sample != sample) {
        /* one allocation: images, labels, the permutation, the position. The steps' captured
         * graphs gather from these addresses (the prologue): a data set of the same size (the
         * next epoch's transformed images) is copied into the same memory; another size
         * moves it, and the graphs are captured again. */
        if (!tc->images || tc->data_n != n || tc->sample != sample) {
            if (tc->images) {
                for (int i = 0; i < tc->n_plans; i++)
                    if (tc->plans[i].resident) kiln_cuda_plan_drop_graph(tc->plans[i].cp);
                cudaFree(tc->images);
            }
            tc->images = NULL;
            size_t bytes = up(sizeof(float) * (size_t)(n * sample)) + 2 * up(sizeof(int64_t) * (size_t)n) + up(sizeof(int64_t));
            cudaError_t ce = cudaMalloc((void **)&tc->images, bytes);
            if (ce != cudaSuccess) {
                tc->images = NULL;
                tc->data_key = NULL;
                return cuda_err(ctx, ce, "cudaMalloc of the resident data set");
            }
        }
        char *p = (char *)tc->images + up(sizeof(float) * (size_t)(n * sample));
        tc->labels = (int64_t *)p;
        p += up(sizeof(int64_t) * (size_t)n);
        tc->perm = (int64_t *)p;
        p += up(sizeof(int64_t) * (size_t)n);
        tc->pos = (int64_t *)p;
        st = kiln_cuda_upload(tc->cu, tc->images, images->data, sizeof(float) * (size_t)(n * sample));
        if (!st) st = kiln_cuda_upload(tc->cu, tc->labels, labels->data, sizeof(int64_t) * (size_t)n);
        if (st) return st;
        tc->data_key = images->data;
        tc->data_n = n;
        tc->sample = sample;
    }
    int64_t *perm = kiln_malloc(ctx, sizeof(int64_t) * (size_t)(n ? n : 1), "the epoch's order");
    if (!perm) return KILN_ERR_OUT_OF_MEMORY;
    /* data parallelism: this rank's shard of the epoch's order (kiln_loader_shard) */
    const kiln_dist *dd = t->opts->dist;
    kiln_loader_shard_from(perm, n, seed, epoch, true, dd ? dd->rank : 0, dd ? dd->size : 1, t->opts->drop_last != 0,
                           offset);
    int64_t pos = start * batch;
    st = kiln_cuda_upload(tc->cu, tc->perm, perm, sizeof(int64_t) * (size_t)n);
    if (!st) st = kiln_cuda_upload(tc->cu, tc->pos, &pos, sizeof pos);
    free(perm);
    tc->ep_images = images;
    return st;
}

/* Step s's batch of b samples: gathered on the device by the step's prologue; the feeds
 * only carry its shapes (one pair of tensors per batch size). */
static kiln_status cu_epoch_batch(void *tr, int64_t s, int64_t b, bool *resident) {
    cuda_trainer *tc = tr;
    const kiln_train_view *t = tc->t;
    kiln_context *ctx = t->ctx;
    const kiln_tensor *images = tc->ep_images;
    (void)s; /* the device's position advances with every step's end */
    {
        int slot = -1;
        for (int i = 0; i < MAX_SHAPES && slot < 0; i++)
            if (tc->shape_x[i] && tc->shape_x[i]->dims[0] == b) slot = i;
        for (int i = 0; i < MAX_SHAPES && slot < 0; i++)
            if (!tc->shape_x[i]) {
                int64_t xd[KILN_MAX_DIMS] = {0};
                xd[0] = b;
                for (int d = 1; d < images->ndim; d++) xd[d] = images->dims[d];
                tc->shape_x[i] = kiln_tensor_new(ctx, KILN_F32, images->ndim, xd);
                tc->shape_y[i] = kiln_tensor_new(ctx, KILN_I64, 1, &b);
                if (!tc->shape_x[i] || !tc->shape_y[i]) return KILN_ERR_OUT_OF_MEMORY;
                slot = i;
            }
        if (slot < 0) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "too many batch shapes");
        t->feeds[0] = tc->shape_x[slot];
        t->feeds[1] = tc->shape_y[slot];
    }
    *resident = true;
    return KILN_OK;
}

/* Steps [start, end) of an epoch (as kiln_trainer_train_epoch runs them): for warm-up and
 * profiles. */
static kiln_status run_epoch(cuda_trainer *tc, const kiln_tensor *images, const kiln_tensor *labels, int64_t batch,
                             uint64_t seed, int64_t epoch, int64_t start, int64_t end, float *last_loss) {
    const int64_t n = kiln_dist_shard_n(tc->t->opts, images->dims[0]), steps = (n + batch - 1) / batch;
    if (end < 0 || end > steps) end = steps;
    kiln_status st = cu_epoch_begin(tc, images, labels, batch, seed, epoch, 0, start);
    for (int64_t s = start; s < end && !st; s++) {
        const int64_t b = s == steps - 1 ? n - s * batch : batch; /* PyTorch keeps the last partial batch */
        bool resident = false;
        st = cu_epoch_batch(tc, s, b, &resident);
        if (!st) st = step(tc, resident, s + 1 == end ? last_loss : NULL);
    }
    return st;
}

/* Every bit of training state a step changes, set aside by state_save and put back by
 * state_restore: the device state (tc->dev: weights, optimizer and BN state, the train
 * state with step, lr and loss scale, the Dropout counter, the loss ring), the seed the
 * next step's Dropout reads (on the kiln_cuda), the host's counters and the feeds. The
 * epoch's permutation and position are uploaded by every cu_epoch_begin. */
typedef struct saved_state {
    void *dev;
    uint64_t seed;
    int64_t steps, micro, skipped;
    bool stale;
    kiln_tensor *feeds[2];
} saved_state;

static kiln_status state_save(cuda_trainer *tc, saved_state *sv) {
    const kiln_train_view *t = tc->t;
    cudaStream_t s = (cudaStream_t)kiln_cuda_stream(tc->cu);
    memset(sv, 0, sizeof *sv);
    sv->steps = t->n->steps;
    sv->micro = t->n->micro_steps;
    sv->skipped = t->n->skipped_steps;
    sv->stale = tc->host_stale;
    sv->feeds[0] = t->feeds[0];
    sv->feeds[1] = t->feeds[1];
    cudaError_t ce = cudaMalloc(&sv->dev, tc->dev_bytes);
    if (ce != cudaSuccess) {
        sv->dev = NULL;
        return cuda_err(t->ctx, ce, "cudaMalloc of a copy of the training state");
    }
    ce = cudaMemcpyAsync(sv->dev, tc->dev, tc->dev_bytes, cudaMemcpyDeviceToDevice, s);
    if (ce == cudaSuccess) ce = cudaMemcpyAsync(&sv->seed, kiln_cuda_rng_seed(tc->cu), sizeof sv->seed, cudaMemcpyDeviceToHost, s);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(s);
    if (ce != cudaSuccess) {
        cudaFree(sv->dev);
        sv->dev = NULL;
        return cuda_err(t->ctx, ce, "copying the training state aside");
    }
    return KILN_OK;
}

/* Put the state back whatever happened since (the device may be mid-step after a failure);
 * returns st, or the restore's own failure. */
static kiln_status state_restore(cuda_trainer *tc, saved_state *sv, kiln_status st) {
    const kiln_train_view *t = tc->t;
    cudaStream_t s = (cudaStream_t)kiln_cuda_stream(tc->cu);
    cudaStreamSynchronize(s);
    cudaError_t ce = cudaMemcpyAsync(tc->dev, sv->dev, tc->dev_bytes, cudaMemcpyDeviceToDevice, s);
    if (ce == cudaSuccess) ce = cudaMemcpyAsync(kiln_cuda_rng_seed(tc->cu), &sv->seed, sizeof sv->seed, cudaMemcpyHostToDevice, s);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(s);
    if (!st && ce != cudaSuccess) st = cuda_err(t->ctx, ce, "restoring the training state");
    cudaFree(sv->dev);
    sv->dev = NULL;
    t->n->steps = sv->steps;
    t->n->micro_steps = sv->micro;
    t->n->skipped_steps = sv->skipped;
    tc->host_stale = sv->stale;
    t->feeds[0] = sv->feeds[0];
    t->feeds[1] = sv->feeds[1];
    return st;
}

/* kiln_trainer_warmup on CUDA: the data set made resident, then for each batch shape an
 * epoch takes (the full batch from step 0, the last partial one) two steps, the first run
 * eagerly (cuDNN's and cuBLASLt's algorithm searches, lazy kernel loading) and the second
 * captured into the shape's CUDA graph and replayed, all inside state_save/state_restore:
 * the training state is left bit for bit as it was. */
static kiln_status cu_train_warmup(void *tr, const kiln_tensor *images, const kiln_tensor *labels, int64_t batch) {
    cuda_trainer *tc = tr;
    const kiln_train_view *t = tc->t;
    const int64_t n = kiln_dist_shard_n(t->opts, images->dims[0]), steps = (n + batch - 1) / batch;
    saved_state sv;
    kiln_status st = state_save(tc, &sv);
    if (st) return st;
    const int64_t at[2] = {0, steps - 1};
    const int shapes = steps > 1 && n % batch ? 2 : 1;
    for (int k = 0; k < shapes && !st; k++)
        for (int rep = 0; rep < 2 && !st; rep++)
            st = run_epoch(tc, images, labels, batch, t->opts->seed, 0, at[k], at[k] + 1, NULL);
    if (!st) st = kiln_cuda_sync(tc->cu);
    return state_restore(tc, &sv, st);
}

/* kiln_trainer_profile on CUDA (see backend.h), between state_save and state_restore. */
static kiln_status cu_train_profile(void *tr, const kiln_tensor *images, const kiln_tensor *labels, int64_t batch,
                                    int iters, int replays, kiln_profile *out, double *step_ms) {
    cuda_trainer *tc = tr;
    const kiln_train_view *t = tc->t;
    kiln_context *ctx = t->ctx;
    const int64_t n = images->dims[0];
    if (batch > n) batch = n;
    double *ms = NULL, *start = NULL, *pro = NULL, *epi = NULL, *rep = NULL;
    cuda_shape_plan *sp = NULL;
    int n_exec = 0;
    saved_state sv;
    kiln_status st = state_save(tc, &sv);
    if (st) return st;
    /* one untimed step: the data set resident, this batch's plan built and run once */
    st = run_epoch(tc, images, labels, batch, t->opts->seed, 0, 0, 1, NULL);
    if (!st) st = find_plan(tc, t->feeds, true, &sp);
    kiln_tensor *const bx = t->feeds[0], *const by = t->feeds[1]; /* the batch's shapes */
    if (!st) {
        kiln_plan_view_t v;
        kiln_plan_view(kiln_cuda_plan_host(sp->cp), &v);
        n_exec = v.n_exec;
        ms = kiln_calloc(ctx, (size_t)iters * n_exec + 1, sizeof *ms, "profile times");
        start = kiln_calloc(ctx, (size_t)iters * n_exec + 1, sizeof *start, "profile times");
        pro = kiln_calloc(ctx, (size_t)iters, sizeof *pro, "profile times");
        epi = kiln_calloc(ctx, (size_t)iters, sizeof *epi, "profile times");
        rep = kiln_calloc(ctx, (size_t)replays, sizeof *rep, "profile times");
        if (!ms || !start || !pro || !epi || !rep) st = KILN_ERR_OUT_OF_MEMORY;
    }
    /* the batches of the first steps of epoch 0, whatever the position the step left */
    const int64_t zero = 0;
    if (!st) {
        tc->running = sp;
        st = kiln_cuda_upload(tc->cu, tc->pos, &zero, sizeof zero);
    }
    if (!st) st = kiln_cuda_plan_profile(sp->cp, NULL, iters, ms, start, pro, epi);
    if (!st) st = kiln_cuda_upload(tc->cu, tc->pos, &zero, sizeof zero);
    double h2d = 0, d2h = 0;
    if (!st) st = kiln_cuda_plan_time(sp->cp, NULL, replays, rep, &h2d, &d2h);
    st = state_restore(tc, &sv, st);
    if (!st) st = kiln_profile_from_passes(ctx, kiln_cuda_plan_host(sp->cp), iters, ms, start, out);
    if (!st) {
        /* the gather reads the samples, labels and indices and writes the batch */
        char a[96], b[96], c[96], d[96], shapes[400];
        snprintf(shapes, sizeof shapes, "%s %s -> %s %s", kiln_shape_str(images, a, sizeof a),
                 kiln_shape_str(labels, b, sizeof b), kiln_shape_str(bx, c, sizeof c), kiln_shape_str(by, d, sizeof d));
        const double gather = 2.0 * (double)kiln_tensor_nbytes(bx) + 3.0 * (double)kiln_tensor_nbytes(by);
        st = kiln_profile_add_row(ctx, out, "prologue", "batch gather", shapes, pro, iters, 0, gather);
    }
    if (!st) {
        char shapes[160];
        snprintf(shapes, sizeof shapes, "%lld parameters in %d tensors, %s%s", (long long)t->param_count, t->n_params,
                 kiln_optimizer_name(t->opts->optimizer), t->scale_input ? ", loss scaling" : "");
        st = kiln_profile_add_row(ctx, out, "epilogue", "optimizer + step end", shapes, epi, iters, 0,
                                  kiln_train_update_bytes(t));
    }
    if (!st) *step_ms = kiln_median(rep, replays);
    free(ms);
    free(start);
    free(pro);
    free(epi);
    free(rep);
    if (st) kiln_profile_free(out);
    return st;
}

/* Bring the host copies (weights, optimizer state, statistics, counters) up to date. */
static kiln_status cu_train_download(void *tr) {
    cuda_trainer *tc = tr;
    const kiln_train_view *t = tc->t;
    if (!tc->host_stale) return KILN_OK;
    kiln_status st = KILN_OK;
    const int ns = kiln_optimizer_states(t->opts);
    for (int k = 0; k < t->n_params && !st; k++) {
        kiln_param *p = &t->params[k];
        size_t nb = sizeof(float) * (size_t)p->numel;
        st = kiln_cuda_download(tc->cu, p->value->data, tc->param[k], nb);
        if (!st && ns > 0) st = kiln_cuda_download(tc->cu, p->state[0], tc->s0[k], nb);
        if (!st && ns > 1) st = kiln_cuda_download(tc->cu, p->state[1], tc->s1[k], nb);
    }
    for (int k = 0; k < t->n_states && !st; k++)
        st = kiln_cuda_download(tc->cu, t->states[k].value->data, tc->bn[k], kiln_tensor_nbytes(t->states[k].value));
    kiln_cuda_train_state ds;
    if (!st) st = kiln_cuda_download(tc->cu, &ds, tc->state, sizeof ds);
    if (!st) st = kiln_cuda_sync(tc->cu);
    if (!st) {
        t->n->steps = ds.step;
        t->n->skipped_steps = ds.skipped;
        t->n->loss_scale = ds.loss_scale;
        tc->host_stale = false;
    }
    return st;
}

const kiln_backend_train_i kiln_cuda_train_i = {
    .create = cu_train_create,
    .free = cu_train_free,
    .upload = cu_train_upload,
    .download = cu_train_download,
    .step = cu_train_step,
    .epoch_begin = cu_epoch_begin,
    .epoch_batch = cu_epoch_batch,
    .warmup = cu_train_warmup,
    .profile = cu_train_profile,
};
