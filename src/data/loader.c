/*
 * loader.c — the prefetching batch loader (see data.h for the contract).
 *
 * The stream of batches is numbered q = 0, 1, 2, ... with q = epoch * steps + step; batch q
 * lives in ring slot q % K. A slot moves FREE -> FILLING (claimed by a worker, or by next()
 * itself without workers) -> READY -> HELD (returned by next) -> FREE (release). Workers
 * claim in stream order, so slot q % K is free only once batch q - K was released, and
 * the consumer takes batches in stream order.
 *
 * Epoch e's permutation lives in perm[e & 1] and is computed, under the lock, by whoever
 * claims the first batch of e that needs it. Claims never run more than one epoch ahead
 * of the consumer: when a batch of epoch e+1 is claimed every batch of epoch e-1 has been
 * consumed, hence gathered, so no one still reads the buffer being overwritten.
 *
 * One mutex guards the slot states and counters; gathering runs outside it.
 *
 * A source (kiln_loader_source) instead of tensors: gather calls its fill per sample with
 * the gathering thread's own context; a failure is kept in the slot (status and message)
 * and next() reports it, for that batch and every later call, instead of the batch.
 */
#include "data.h"
#include "../core/backend.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD };

typedef struct slot {
    int state;
    int64_t seq;     /* the batch it holds or is filling */
    kiln_batch b;    /* what next() hands out; b.x and b.y point at x and y below */
    kiln_tensor x, y;/* views of the slot memory; dims[0] set per batch */
    int64_t *idx;    /* (B) */
    kiln_status st;  /* a source's failure filling it (its message in msg) */
    char msg[KILN_MSG_SIZE];
} slot;

struct kiln_loader {
    kiln_context *ctx;
    const kiln_tensor *images; /* (N, ...) f32 or u8 */
    const kiln_tensor *labels; /* (N) i64 or u8 */
    kiln_loader_source src;    /* samples made on demand (src.fill), when images is NULL */
    kiln_loader_options o;
    int64_t n, steps, sample; /* samples (this shard's), batches per epoch, elements per sample */
    int64_t n_all;            /* the data set's samples */
    float lut[256];           /* u8 -> normalized f32 */
    int64_t *perm[2];         /* (N) each; NULL without shuffle and sharding */
    int64_t perm_epoch[2];    /* the epoch whose permutation perm[i] holds, -1: none */
    /* kiln_loader_seek_sample: epoch from_epoch starts at position `from` of its global
     * order; its shard (from_n samples, from_steps batches) takes that epoch's last
     * from_steps step numbers. from_epoch -1: none. */
    int64_t from_epoch, from, from_n, from_steps;
    int k;                    /* ring slots */
    slot *slots;
    float *own_images;        /* ring memory when the caller gives none */
    int64_t *own_labels;
    int64_t *own_idx;

    pthread_mutex_t mu;
    pthread_cond_t claimable; /* a slot was released or the consumer entered a new epoch */
    pthread_cond_t ready;     /* a batch was gathered */
    int64_t next_claim, next_consume;
    int held;
    bool stop;
    int n_threads;            /* running workers (may be fewer than o.workers after a failed start) */
    pthread_t *threads;
    kiln_context gather_ctx;  /* next()'s own gathering without workers (a source's messages) */
    /* kiln_loader_stats, under mu */
    double wait_s, busy_s;
    int64_t gathered, batches;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

kiln_loader_options kiln_loader_options_default(void) {
    kiln_loader_options o;
    memset(&o, 0, sizeof o);
    o.batch_size = 64;
    o.shuffle = true;
    o.workers = 2;
    o.mean = 0.0f;
    o.std = 1.0f;
    return o;
}

/* ---------------------------------------------------------- order of samples */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) without modulo bias: reject the top partial range. */
static uint64_t below(uint64_t *s, uint64_t n) {
    uint64_t threshold = (0 - n) % n;
    for (;;) {
        uint64_t r = splitmix64(s);
        if (r >= threshold) return r % n;
    }
}

/* Fisher-Yates over the identity with a stream seeded by (seed, epoch). */
void kiln_loader_permutation(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch) {
    uint64_t h = seed;
    uint64_t s = splitmix64(&h) + (uint64_t)epoch * 0xD6E8FEB86659FD93ull;
    splitmix64(&s);
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)below(&s, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

int64_t kiln_loader_shard(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch, bool shuffle, int rank, int count,
                          bool drop) {
    return kiln_loader_shard_from(perm, n, seed, epoch, shuffle, rank, count, drop, 0);
}

int64_t kiln_loader_shard_from(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch, bool shuffle, int rank,
                               int count, bool drop, int64_t offset) {
    if (shuffle) kiln_loader_permutation(perm, n, seed, epoch);
    else
        for (int64_t i = 0; i < n; i++) perm[i] = i;
    if (offset < 0) offset = 0;
    if (offset >= n) return 0;
    if (count < 1) count = 1;
    const int64_t rest = n - offset; /* the positions offset .. n-1 of the order are left */
    const int64_t per = drop ? rest / count : (rest + count - 1) / count;
    /* position offset + rank + count * i of the order padded with its first samples;
     * compacted in place (i <= offset + rank + count * i). Only this shard's last position
     * can fall in the padding (fewer than count entries): its source is read before it is
     * overwritten. */
    const int64_t last = offset + rank + count * (per - 1);
    const int64_t padded = per > 0 && last >= n ? perm[(last - n) % n] : -1;
    for (int64_t i = 0; i < per; i++) {
        const int64_t at = offset + rank + count * i;
        perm[i] = at < n ? perm[at] : padded;
    }
    return per;
}

/* Epoch e's first step number and this loader's samples in it (see from_epoch). */
static int64_t epoch_first(const kiln_loader *l, int64_t e) { return e == l->from_epoch ? l->steps - l->from_steps : 0; }
static int64_t epoch_n(const kiln_loader *l, int64_t e) { return e == l->from_epoch ? l->from_n : l->n; }

/* Called with the lock held, before anyone gathers a batch of epoch e. */
static void prepare_epoch(kiln_loader *l, int64_t e) {
    if (!l->perm[0] || l->perm_epoch[e & 1] == e) return;
    if (l->o.shard_count > 1 || e == l->from_epoch)
        kiln_loader_shard_from(l->perm[e & 1], l->n_all, l->o.seed, e, l->o.shuffle, l->o.shard_rank,
                               l->o.shard_count > 1 ? l->o.shard_count : 1, l->o.shard_drop,
                               e == l->from_epoch ? l->from : 0);
    else
        kiln_loader_permutation(l->perm[e & 1], l->n, l->o.seed, e);
    l->perm_epoch[e & 1] = e;
}

/* Gather batch q into s (its state is FILLING: no one else touches it). wctx: the
 * gathering thread's own context (a source's errors). */
static void gather(kiln_loader *l, slot *s, int64_t q, kiln_context *wctx) {
    int64_t e = q / l->steps, step = q % l->steps, B = l->o.batch_size, n = epoch_n(l, e);
    int64_t start = (step - epoch_first(l, e)) * B, size = n - start < B ? n - start : B, m = l->sample;
    const int64_t *perm = l->perm[0] ? l->perm[e & 1] + start : NULL;
    /* no permutation (no shuffle, no sharding): the identity, from the resumed position */
    const int64_t base = start + (e == l->from_epoch ? l->from : 0);
    float *dst = s->b.images;
    s->st = KILN_OK;
    for (int64_t i = 0; i < size; i++) {
        int64_t j = perm ? perm[i] : base + i;
        s->idx[i] = j;
        if (!l->images) {
            kiln_status st = l->src.fill_at ? l->src.fill_at(l->src.arg, wctx, s->b.slot, i, j, e, dst + i * m, &s->b.labels[i])
                                            : l->src.fill(l->src.arg, wctx, j, e, dst + i * m, &s->b.labels[i]);
            if (st) {
                s->st = st;
                snprintf(s->msg, sizeof s->msg, "%s", kiln_context_message(wctx));
                break;
            }
            continue;
        }
        if (l->images->dtype == KILN_U8) {
            const uint8_t *src = (const uint8_t *)l->images->data + j * m;
            for (int64_t k = 0; k < m; k++) dst[i * m + k] = l->lut[src[k]];
        } else {
            memcpy(dst + i * m, (const float *)l->images->data + j * m, (size_t)m * sizeof(float));
        }
        s->b.labels[i] = l->labels->dtype == KILN_U8 ? ((const uint8_t *)l->labels->data)[j]
                                                     : ((const int64_t *)l->labels->data)[j];
    }
    s->b.epoch = e;
    s->b.step = step;
    s->b.size = size;
    s->x.dims[0] = size;
    s->y.dims[0] = size;
}

static bool can_claim(const kiln_loader *l) {
    return l->slots[l->next_claim % l->k].state == SLOT_FREE &&
           l->next_claim / l->steps <= l->next_consume / l->steps + 1;
}

static void *worker(void *arg) {
    kiln_loader *l = arg;
    kiln_context own = {0};
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && !can_claim(l)) pthread_cond_wait(&l->claimable, &l->mu);
        if (l->stop) break;
        int64_t q = l->next_claim++;
        slot *s = &l->slots[q % l->k];
        s->state = SLOT_FILLING;
        s->seq = q;
        prepare_epoch(l, q / l->steps);
        pthread_mutex_unlock(&l->mu);
        const double t0 = now_s();
        gather(l, s, q, &own);
        const double t1 = now_s();
        pthread_mutex_lock(&l->mu);
        l->busy_s += t1 - t0;
        l->gathered += s->b.size;
        l->batches++;
        s->state = SLOT_READY;
        pthread_cond_broadcast(&l->ready);
    }
    pthread_mutex_unlock(&l->mu);
    kiln_clear_error(&own);
    return NULL;
}

/* Stop and join every worker. No lock held by the caller. */
static void stop_workers(kiln_loader *l) {
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->claimable);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->n_threads; i++) pthread_join(l->threads[i], NULL);
    l->n_threads = 0;
    l->stop = false;
}

static kiln_status start_workers(kiln_loader *l) {
    for (int i = 0; i < l->o.workers; i++) {
        int err = pthread_create(&l->threads[i], NULL, worker, l);
        if (err)
            return kiln_fail(l->ctx, KILN_ERR_INTERNAL, "loader: cannot start worker %d of %d: %s", i + 1,
                             l->o.workers, strerror(err));
        l->n_threads++;
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------- public */

static kiln_status check_options(kiln_context *ctx, const kiln_tensor *images, const kiln_tensor *labels,
                                 const kiln_loader_options *o) {
    char s1[96], s2[96];
    if (images->dtype != KILN_F32 && images->dtype != KILN_U8)
        return kiln_fail(ctx, KILN_ERR_TYPE, "loader: images must be f32 or u8, got %s",
                         kiln_shape_str(images, s1, sizeof s1));
    if (labels->dtype != KILN_I64 && labels->dtype != KILN_U8)
        return kiln_fail(ctx, KILN_ERR_TYPE, "loader: labels must be i64 or u8, got %s",
                         kiln_shape_str(labels, s1, sizeof s1));
    if (images->ndim < 1 || labels->ndim != 1 || images->dims[0] != labels->dims[0])
        return kiln_fail(ctx, KILN_ERR_SHAPE, "loader: images %s and labels %s must be (N, ...) and (N)",
                         kiln_shape_str(images, s1, sizeof s1), kiln_shape_str(labels, s2, sizeof s2));
    if (images->format != KILN_FORMAT_NCHW)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "loader: images must be laid out NCHW");
    if ((kiln_tensor_numel(images) && !images->data) || (labels->dims[0] && !labels->data))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "loader: images and labels need data");
    if (images->dtype == KILN_U8 && !(o->std > 0.0f))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "loader: std must be > 0 to normalize u8 images, got %g",
                         (double)o->std);
    return KILN_OK;
}

/* The options against a data set of n samples. */
static kiln_status check_common(kiln_context *ctx, int64_t n, const kiln_loader_options *o) {
    if (o->batch_size < 1 || o->batch_size > ((int64_t)1 << 31))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "loader: batch_size must be in 1..2^31, got %lld",
                         (long long)o->batch_size);
    if (o->workers < 0 || o->workers > 256)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "loader: workers must be in 0..256, got %d", o->workers);
    if (o->slots < 0 || o->slots > 1024)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "loader: slots must be in 0..1024, got %d", o->slots);
    if ((o->slot_images != NULL) != (o->slot_labels != NULL) || (o->slot_images && o->slots == 0))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                         "loader: slot_images and slot_labels come together, with slots > 0");
    if (o->shard_count < 0 || o->shard_count > (1 << 20) || o->shard_rank < 0 ||
        (o->shard_count > 1 && o->shard_rank >= o->shard_count) || (o->shard_count <= 1 && o->shard_rank != 0))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "loader: shard %d of %d is out of range", o->shard_rank,
                         o->shard_count);
    if (o->shard_count > 1) n = o->shard_drop ? n / o->shard_count : (n + o->shard_count - 1) / o->shard_count;
    if ((o->drop_last ? n / o->batch_size : n) == 0)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "loader: %lld samples make no batch of %lld%s",
                         (long long)n, (long long)o->batch_size, o->drop_last ? " with drop_last" : "");
    /* before anything is sized by it: a batch of 10^7 would ask for gigabytes of slots */
    if (o->batch_size > n)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "loader: a batch of %lld exceeds the data set's %lld samples",
                         (long long)o->batch_size, (long long)n);
    return KILN_OK;
}

/* Tensors (images non-NULL) or a source: the loader. src->arg is freed on failure. */
static kiln_status create(kiln_context *ctx, const kiln_tensor *images, const kiln_tensor *labels,
                          const kiln_loader_source *src, const kiln_loader_options *opts, kiln_loader **out) {
    *out = NULL;
    kiln_loader_options o = opts ? *opts : kiln_loader_options_default();
    kiln_status st = images ? check_options(ctx, images, labels, &o) : KILN_OK;
    if (!st) st = check_common(ctx, images ? images->dims[0] : src->n, &o);
    if (st) {
        if (src && src->free_arg) src->free_arg(src->arg);
        return st;
    }
    if (o.slots == 0) o.slots = o.workers * 2 + 2;

    kiln_loader *l = kiln_calloc(ctx, 1, sizeof *l, "a loader");
    if (!l) {
        if (src && src->free_arg) src->free_arg(src->arg);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    if (src) l->src = *src;
    int err = pthread_mutex_init(&l->mu, NULL);
    if (!err) {
        err = pthread_cond_init(&l->claimable, NULL);
        if (!err) {
            err = pthread_cond_init(&l->ready, NULL);
            if (err) pthread_cond_destroy(&l->claimable);
        }
        if (err) pthread_mutex_destroy(&l->mu);
    }
    if (err) {
        if (src && src->free_arg) src->free_arg(src->arg);
        free(l);
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "loader: cannot create its lock: %s", strerror(err));
    }
    l->ctx = ctx;
    l->images = images;
    l->labels = labels;
    l->o = o;
    l->n_all = l->n = images ? images->dims[0] : src->n;
    if (o.shard_count > 1) l->n = o.shard_drop ? l->n / o.shard_count : (l->n + o.shard_count - 1) / o.shard_count;
    /* the batch's dims: (B, sample dims...) */
    int ndim = images ? images->ndim : src->ndim + 1;
    int64_t dims[8] = {0};
    for (int i = 1; i < ndim; i++) dims[i] = images ? images->dims[i] : src->dims[i - 1];
    l->sample = kiln_numel(ndim - 1, dims + 1);
    int64_t B = o.batch_size;
    l->steps = o.drop_last ? l->n / B : (l->n + B - 1) / B;
    l->k = o.slots;
    l->perm_epoch[0] = l->perm_epoch[1] = -1;
    l->from_epoch = -1;
    if (images && images->dtype == KILN_U8) kiln_u8_normalize_lut(o.mean, o.std, l->lut);

    /* Each slot's images start on a 64-byte boundary (16 floats). */
    if (l->sample && B > ((int64_t)1 << 40) / l->sample) {
        kiln_loader_free(l);
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "loader: a batch of %lld samples of %lld elements is too large",
                         (long long)B, (long long)l->sample);
    }
    size_t stride = ((size_t)(B * l->sample) + 15) / 16 * 16;
    bool ok = (l->slots = kiln_calloc(ctx, (size_t)l->k, sizeof *l->slots, "loader slots")) &&
              (l->own_idx = kiln_malloc(ctx, (size_t)l->k * (size_t)B * sizeof(int64_t), "loader indices")) &&
              (l->threads = kiln_calloc(ctx, (size_t)(o.workers ? o.workers : 1), sizeof(pthread_t), "loader threads"));
    if (ok && (o.shuffle || o.shard_count > 1))
        ok = (l->perm[0] = kiln_malloc(ctx, (size_t)l->n_all * sizeof(int64_t), "loader permutation")) &&
             (l->perm[1] = kiln_malloc(ctx, (size_t)l->n_all * sizeof(int64_t), "loader permutation"));
    if (ok && !o.slot_images) {
        size_t bytes = (size_t)l->k * stride * sizeof(float);
        l->own_images = aligned_alloc(64, bytes ? bytes : 64);
        if (!l->own_images)
            kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory allocating %zu bytes for loader batches", bytes);
        ok = l->own_images && (l->own_labels = kiln_malloc(ctx, (size_t)l->k * (size_t)B * sizeof(int64_t),
                                                           "loader labels"));
    }
    if (!ok) {
        kiln_loader_free(l);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < l->k; i++) {
        slot *s = &l->slots[i];
        s->idx = l->own_idx + (size_t)i * (size_t)B;
        s->b.slot = i;
        s->b.images = o.slot_images ? o.slot_images[i] : l->own_images + (size_t)i * stride;
        s->b.labels = o.slot_labels ? o.slot_labels[i] : l->own_labels + (size_t)i * (size_t)B;
        s->b.indices = s->idx;
        if (!s->b.images || !s->b.labels) {
            kiln_loader_free(l);
            return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "loader: slot_images[%d] or slot_labels[%d] is NULL", i, i);
        }
        kiln_tensor_set_shape(&s->x, KILN_F32, ndim, dims);
        s->x.data = s->b.images;
        s->x.ctx = ctx;
        kiln_tensor_set_shape(&s->y, KILN_I64, 1, &B);
        s->y.data = s->b.labels;
        s->y.ctx = ctx;
        s->b.x = &s->x;
        s->b.y = &s->y;
    }
    st = l->src.attach ? l->src.attach(l->src.arg, ctx, l->k, B) : KILN_OK;
    if (!st) st = start_workers(l);
    if (st) {
        kiln_loader_free(l);
        return st;
    }
    *out = l;
    return KILN_OK;
}

kiln_status kiln_loader_create(kiln_context *ctx, const kiln_tensor *images, const kiln_tensor *labels,
                               const kiln_loader_options *opts, kiln_loader **out) {
    if (!ctx || !images || !labels || !out) return KILN_ERR_INVALID_ARGUMENT;
    return create(ctx, images, labels, NULL, opts, out);
}

kiln_status kiln_loader_create_source(kiln_context *ctx, const kiln_loader_source *src, const kiln_loader_options *opts,
                                      kiln_loader **out) {
    if (!ctx || !src || !out || !src->fill || src->ndim < 0 || src->ndim > 7 || src->n < 0) {
        if (src && src->free_arg) src->free_arg(src->arg);
        return KILN_ERR_INVALID_ARGUMENT;
    }
    return create(ctx, NULL, NULL, src, opts, out);
}

void kiln_loader_stats(kiln_loader *l, kiln_load_stats *out, bool reset) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    out->wait_s = l->wait_s;
    out->busy_s = l->busy_s;
    out->samples = l->gathered;
    out->batches = l->batches;
    out->workers = l->o.workers;
    if (reset) l->wait_s = l->busy_s = 0, l->gathered = l->batches = 0;
    pthread_mutex_unlock(&l->mu);
    if (l->src.stats) l->src.stats(l->src.arg, out, reset);
}

void kiln_loader_set_stream(kiln_loader *l, void *stream) {
    if (l && l->src.set_stream) l->src.set_stream(l->src.arg, stream);
}

void kiln_loader_free(kiln_loader *l) {
    if (!l) return;
    stop_workers(l);
    if (l->src.free_arg) l->src.free_arg(l->src.arg);
    kiln_clear_error(&l->gather_ctx);
    pthread_cond_destroy(&l->ready);
    pthread_cond_destroy(&l->claimable);
    pthread_mutex_destroy(&l->mu);
    free(l->perm[0]);
    free(l->perm[1]);
    free(l->own_images);
    free(l->own_labels);
    free(l->own_idx);
    free(l->threads);
    free(l->slots);
    free(l);
}

int64_t kiln_loader_steps_per_epoch(const kiln_loader *l) { return l ? l->steps : 0; }

void kiln_loader_position(const kiln_loader *l, int64_t *epoch, int64_t *step) {
    /* next_consume changes only in the consumer's own calls: no lock needed. */
    if (epoch) *epoch = l ? l->next_consume / l->steps : 0;
    if (step) *step = l ? l->next_consume % l->steps : 0;
}

kiln_status kiln_loader_next(kiln_loader *l, const kiln_batch **out) {
    if (!l || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    pthread_mutex_lock(&l->mu);
    int64_t q = l->next_consume;
    slot *s = &l->slots[q % l->k];
    if (s->state == SLOT_HELD) {
        int held = l->held;
        pthread_mutex_unlock(&l->mu);
        return kiln_fail(l->ctx, KILN_ERR_INVALID_ARGUMENT,
                         "loader: the next batch needs slot %d, still held (the caller holds %d of %d slots); "
                         "release batches before asking for more", (int)(q % l->k), held, l->k);
    }
    const double t0 = now_s();
    if (l->n_threads == 0) {
        /* No workers: gather here. next_claim == next_consume. */
        l->next_claim = q + 1;
        s->state = SLOT_FILLING;
        s->seq = q;
        prepare_epoch(l, q / l->steps);
        pthread_mutex_unlock(&l->mu);
        gather(l, s, q, &l->gather_ctx);
        pthread_mutex_lock(&l->mu);
        l->busy_s += now_s() - t0;
        l->gathered += s->b.size;
        l->batches++;
        s->state = SLOT_READY;
    } else {
        while (!(s->state == SLOT_READY && s->seq == q)) pthread_cond_wait(&l->ready, &l->mu);
    }
    l->wait_s += now_s() - t0;
    if (s->st) {
        /* a sample could not be made: the stream stops here (the slot stays READY, so every
         * later next() reports the same) */
        const kiln_status st = s->st;
        pthread_mutex_unlock(&l->mu);
        return kiln_fail(l->ctx, st, "%s", s->msg);
    }
    if (l->src.finish) {
        /* the batch's last step on this thread (the GPU decoder): no lock held, the slot
         * READY so no worker touches it; counted as waiting for data */
        pthread_mutex_unlock(&l->mu);
        const double t1 = now_s();
        kiln_status fst = l->src.finish(l->src.arg, &l->gather_ctx, &s->b);
        pthread_mutex_lock(&l->mu);
        l->wait_s += now_s() - t1;
        if (fst) {
            s->st = fst;
            snprintf(s->msg, sizeof s->msg, "%s", kiln_context_message(&l->gather_ctx));
            pthread_mutex_unlock(&l->mu);
            return kiln_fail(l->ctx, fst, "%s", s->msg);
        }
    }
    s->state = SLOT_HELD;
    l->held++;
    l->next_consume = q + 1;
    if (l->next_consume % l->steps == 0) pthread_cond_broadcast(&l->claimable); /* one more epoch may start */
    pthread_mutex_unlock(&l->mu);
    *out = &s->b;
    return KILN_OK;
}

kiln_status kiln_loader_release(kiln_loader *l, const kiln_batch *b) {
    if (!l || !b) return KILN_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&l->mu);
    bool mine = b->slot >= 0 && b->slot < l->k && b == &l->slots[b->slot].b && l->slots[b->slot].state == SLOT_HELD;
    if (mine) {
        if (l->src.release) l->src.release(l->src.arg, b);
        l->slots[b->slot].state = SLOT_FREE;
        l->held--;
        pthread_cond_broadcast(&l->claimable);
    }
    pthread_mutex_unlock(&l->mu);
    if (!mine)
        return kiln_fail(l->ctx, KILN_ERR_INVALID_ARGUMENT,
                         "loader: release of a batch this loader does not hold (released twice?)");
    return KILN_OK;
}

/* Continue the stream at batch q, epoch from_epoch (-1: none) starting at sample `from`
 * (see struct kiln_loader): no batch held, the prefetched ones dropped. */
static kiln_status reposition(kiln_loader *l, int64_t q, int64_t from_epoch, int64_t from, int64_t from_n,
                              int64_t from_steps) {
    pthread_mutex_lock(&l->mu);
    int held = l->held;
    pthread_mutex_unlock(&l->mu);
    if (held)
        return kiln_fail(l->ctx, KILN_ERR_INVALID_ARGUMENT, "loader: seek while %d batch(es) are held; release them first",
                         held);
    stop_workers(l);
    for (int i = 0; i < l->k; i++) l->slots[i].state = SLOT_FREE;
    l->perm_epoch[0] = l->perm_epoch[1] = -1; /* the resumed epoch's order may differ */
    l->from_epoch = from_epoch;
    l->from = from;
    l->from_n = from_n;
    l->from_steps = from_steps;
    l->next_claim = l->next_consume = q;
    return start_workers(l);
}

kiln_status kiln_loader_seek(kiln_loader *l, int64_t epoch, int64_t step) {
    if (!l) return KILN_ERR_INVALID_ARGUMENT;
    if (epoch < 0 || step < 0 || step >= l->steps || epoch > INT64_MAX / l->steps - 1)
        return kiln_fail(l->ctx, KILN_ERR_INVALID_ARGUMENT, "loader: cannot seek to epoch %lld step %lld (%lld steps "
                         "per epoch)", (long long)epoch, (long long)step, (long long)l->steps);
    return reposition(l, epoch * l->steps + step, -1, 0, 0, 0);
}

kiln_status kiln_loader_seek_sample(kiln_loader *l, int64_t epoch, int64_t sample) {
    if (!l) return KILN_ERR_INVALID_ARGUMENT;
    if (epoch < 0 || sample < 0 || epoch > INT64_MAX / l->steps - 2)
        return kiln_fail(l->ctx, KILN_ERR_INVALID_ARGUMENT, "loader: cannot seek to epoch %lld sample %lld",
                         (long long)epoch, (long long)sample);
    const int64_t W = l->o.shard_count > 1 ? l->o.shard_count : 1, B = l->o.batch_size;
    const int64_t rest = sample < l->n_all ? l->n_all - sample : 0;
    const int64_t n = l->o.shard_drop ? rest / W : (rest + W - 1) / W;
    const int64_t steps = l->o.drop_last ? n / B : (n + B - 1) / B;
    if (sample == 0 || steps == 0) /* the epoch's start, or nothing of it left: the next one's */
        return reposition(l, (sample == 0 ? epoch : epoch + 1) * l->steps, -1, 0, 0, 0);
    return reposition(l, epoch * l->steps + (l->steps - steps), epoch, sample, n, steps);
}

int64_t kiln_loader_epoch_sample(const kiln_loader *l, int64_t epoch, int64_t step) {
    if (!l || step < 0) return 0;
    const int64_t W = l->o.shard_count > 1 ? l->o.shard_count : 1, first = epoch_first(l, epoch);
    if (step >= l->steps) return l->n_all;
    const int64_t at = (epoch == l->from_epoch ? l->from : 0) + (step > first ? step - first : 0) * l->o.batch_size * W;
    return at < l->n_all ? at : l->n_all;
}

/* ------------------------------------------------------------ ring memory */

kiln_status kiln_host_alloc(kiln_context *ctx, kiln_device device, size_t bytes, void **out) {
    if (!out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    const kiln_backend_i *be = kiln_backend_for(device);
    if (be && be->host_alloc) return be->host_alloc(ctx, bytes, out);
    *out = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!*out) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory allocating %zu bytes of host memory", bytes);
    return KILN_OK;
}

void kiln_host_free(kiln_device device, void *p) {
    if (!p) return;
    const kiln_backend_i *be = kiln_backend_for(device);
    if (be && be->host_free) be->host_free(p);
    else free(p);
}
