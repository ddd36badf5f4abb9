/*
 * checkpoint.c — trainer checkpoints in safetensors: every trained tensor ("param/NAME"),
 * its optimizer state ("state0/NAME", "state1/NAME"), BatchNormalization running
 * statistics ("bn/NAME"), and the counters as metadata. kiln_safetensors_save writes a
 * temporary file and renames it, so the previous checkpoint survives a crash mid-save.
 * Gradient-accumulation buffers are not saved: save at an optimizer-step boundary.
 *
 * Resuming on any number of ranks: the position in the data is also saved as samples of
 * the epoch's global order ("sample_in_epoch", with "world_size" and "batch_per_rank" of
 * the saving run), which kiln_loader_seek_sample continues from at any world size and
 * batch. Checkpoints without them (older ones, kiln_trainer_save's) still load: their
 * position is the step only. With data parallelism every rank reads the file and the
 * ranks check, between checking and restoring, that all of them read it and the same one.
 */
#include "../dist/dist.h"
#include "../io/safetensors.h"
#include "trainer_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META_N 12

static int n_opt_states(const kiln_train_options *o) {
    return o->optimizer == KILN_OPTIM_SGD ? (o->momentum != 0) : 2;
}

kiln_status kiln_trainer_save(kiln_trainer *t, const char *path, int64_t epoch, int64_t step_in_epoch) {
    const kiln_train_position pos = {.epoch = epoch, .sample = -1, .step_in_epoch = step_in_epoch};
    return kiln_trainer_save_position(t, path, &pos);
}

kiln_status kiln_trainer_save_position(kiln_trainer *t, const char *path, const kiln_train_position *pos) {
    if (!t || !path || !pos) return KILN_ERR_INVALID_ARGUMENT;
    kiln_context *ctx = t->ctx;
    const int64_t epoch = pos->epoch, step_in_epoch = pos->step_in_epoch;
    if (epoch < 0 || step_in_epoch < 0 || pos->sample < -1 || pos->world_size < 0 || pos->batch < 0)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                         "checkpoint '%s': position epoch %lld, step %lld, sample %lld, world size %lld, batch %lld is "
                         "out of range", path, (long long)epoch, (long long)step_in_epoch, (long long)pos->sample,
                         (long long)pos->world_size, (long long)pos->batch);
    if (t->n.micro_steps % t->opts.accumulate != 0)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                         "checkpoint between micro-batches of an accumulated step: save after step %" PRId64 " completes",
                         t->n.steps);
    kiln_status sst = kiln_trainer_sync_host(t);
    if (sst) return sst;
    const int ns = n_opt_states(&t->opts);
    const int n = t->n_params * (1 + ns) + t->n_states;
    char **names = kiln_calloc(ctx, (size_t)n + 1, sizeof(char *), "checkpoint");
    kiln_tensor **views = kiln_calloc(ctx, (size_t)n + 1, sizeof(kiln_tensor *), "checkpoint");
    kiln_status st = names && views ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    int k = 0;
    for (int i = 0; i < t->n_params && !st; i++) {
        const kiln_param *p = &t->params[i];
        const char *nm = t->fwd->values[p->fwd_value].name;
        for (int s = -1; s < ns && !st; s++) {
            size_t len = strlen(nm) + 16;
            names[k] = kiln_malloc(ctx, len, "checkpoint name");
            if (!names[k]) { st = KILN_ERR_OUT_OF_MEMORY; break; }
            if (s < 0) snprintf(names[k], len, "param/%s", nm);
            else snprintf(names[k], len, "state%d/%s", s, nm);
            st = kiln_tensor_wrap(ctx, KILN_F32, p->value->ndim, p->value->dims, s < 0 ? p->value->data : p->state[s], &views[k]);
            k++;
        }
    }
    for (int i = 0; i < t->n_states && !st; i++) {
        const kiln_state *s = &t->states[i];
        const char *nm = t->fwd->values[s->fwd_value].name;
        size_t len = strlen(nm) + 8;
        names[k] = kiln_malloc(ctx, len, "checkpoint name");
        if (!names[k]) { st = KILN_ERR_OUT_OF_MEMORY; break; }
        snprintf(names[k], len, "bn/%s", nm);
        st = kiln_tensor_wrap(ctx, s->value->dtype, s->value->ndim, s->value->dims, s->value->data, &views[k]);
        k++;
    }
    char vals[META_N][32];
    const char *keys[META_N] = {"kiln.format", "optimizer", "steps", "micro_steps", "skipped_steps",
                                "loss_scale", "epoch", "step_in_epoch", "seed", "world_size", "sample_in_epoch",
                                "batch_per_rank"};
    snprintf(vals[0], sizeof vals[0], "trainer-1");
    snprintf(vals[1], sizeof vals[1], "%d", (int)t->opts.optimizer);
    snprintf(vals[2], sizeof vals[2], "%" PRId64, t->n.steps);
    snprintf(vals[3], sizeof vals[3], "%" PRId64, t->n.micro_steps);
    snprintf(vals[4], sizeof vals[4], "%" PRId64, t->n.skipped_steps);
    snprintf(vals[5], sizeof vals[5], "%.9g", t->n.loss_scale);
    snprintf(vals[6], sizeof vals[6], "%" PRId64, epoch);
    snprintf(vals[7], sizeof vals[7], "%" PRId64, step_in_epoch);
    snprintf(vals[8], sizeof vals[8], "%" PRIu64, t->opts.seed);
    snprintf(vals[9], sizeof vals[9], "%" PRId64, pos->world_size ? pos->world_size : (int64_t)kiln_dist_size(t->opts.dist));
    snprintf(vals[10], sizeof vals[10], "%" PRId64, pos->sample);
    snprintf(vals[11], sizeof vals[11], "%" PRId64, pos->batch);
    /* the position in samples and the batch only when known */
    const int n_meta = pos->sample < 0 ? 10 : pos->batch > 0 ? 12 : 11;
    const char *vp[META_N];
    for (int i = 0; i < META_N; i++) vp[i] = vals[i];
    if (!st)
        st = kiln_safetensors_save(ctx, path, k, (const char *const *)names, (const kiln_tensor *const *)views, n_meta, keys, vp);
    for (int i = 0; i < k; i++) {
        free(names[i]);
        kiln_tensor_free(views[i]);
    }
    free(names);
    free(views);
    return st;
}

/* A counter from the metadata: a base-10 integer in 0..INT64_MAX, nothing else. */
static kiln_status meta_i64(kiln_context *ctx, const kiln_safetensors *s, const char *path, const char *key, int64_t *out) {
    const char *v = kiln_safetensors_meta(s, key);
    char *end = NULL;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !*v || *end || errno == ERANGE)
        return kiln_fail(ctx, KILN_ERR_PARSE, "'%s' is not a kiln trainer checkpoint: metadata '%s' is missing or not a number%s%s%s",
                         path, key, v ? " ('" : "", v ? v : "", v ? "')" : "");
    if (x < 0)
        return kiln_fail(ctx, KILN_ERR_PARSE, "checkpoint '%s': metadata '%s' is %lld; a counter cannot be negative", path, key, x);
    *out = x;
    return KILN_OK;
}

/* The saved tensor `name` must be there with dst's dtype and exact dims (and dst NCHW when
 * 4-D, as kiln_safetensors_copy_to needs): checked for every tensor before any is written. */
static kiln_status check_tensor(kiln_context *ctx, const kiln_safetensors *s, const char *path, const char *name,
                                const kiln_tensor *dst) {
    const kiln_tensor *src = kiln_safetensors_find(s, name);
    if (!src)
        return kiln_fail(ctx, KILN_ERR_PARSE, "checkpoint '%s' lacks tensor '%s' (was it saved from another model?)", path, name);
    bool same = src->dtype == dst->dtype && src->ndim == dst->ndim;
    for (int i = 0; same && i < src->ndim; i++) same = src->dims[i] == dst->dims[i];
    if (!same) {
        char a[96], b[96];
        return kiln_fail(ctx, KILN_ERR_SHAPE, "checkpoint '%s': tensor '%s' is %s, the trainer's is %s (was it saved from another model?)",
                         path, name, kiln_shape_str(src, a, sizeof a), kiln_shape_str(dst, b, sizeof b));
    }
    if (dst->ndim == 4 && dst->format != KILN_FORMAT_NCHW)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "checkpoint '%s': cannot restore '%s' into an NHWC tensor", path, name);
    if (kiln_tensor_nbytes(src) && !dst->data)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "checkpoint '%s': restoring '%s': the destination has no data", path, name);
    return KILN_OK;
}

/* Tensor `name` into dst (already checked by check_tensor). */
static kiln_status restore(kiln_context *ctx, const kiln_safetensors *s, const char *path, const char *name, kiln_tensor *dst) {
    kiln_status st = kiln_safetensors_copy_to(s, name, dst);
    if (st) kiln_msg_prefix(ctx, "checkpoint '%s': ", path);
    return st;
}

/* Every tensor the trainer restores, as (name, destination) — the check pass and the copy
 * pass walk the same list. The optimizer states get views over p->state[k] (freed by the
 * caller). */
static kiln_status visit(kiln_trainer *t, const kiln_safetensors *s, const char *path, bool copy) {
    kiln_context *ctx = t->ctx;
    const int ns = n_opt_states(&t->opts);
    char name[1024];
    kiln_status st = KILN_OK;
    for (int i = 0; i < t->n_params && !st; i++) {
        kiln_param *p = &t->params[i];
        const char *nm = t->fwd->values[p->fwd_value].name;
        for (int k = -1; k < ns && !st; k++) {
            kiln_tensor *view = NULL, *dst = p->value;
            if (k < 0) snprintf(name, sizeof name, "param/%s", nm);
            else {
                snprintf(name, sizeof name, "state%d/%s", k, nm);
                st = kiln_tensor_wrap(ctx, KILN_F32, p->value->ndim, p->value->dims, p->state[k], &view);
                dst = view;
            }
            if (!st) st = copy ? restore(ctx, s, path, name, dst) : check_tensor(ctx, s, path, name, dst);
            kiln_tensor_free(view);
        }
    }
    for (int i = 0; i < t->n_states && !st; i++) {
        snprintf(name, sizeof name, "bn/%s", t->fwd->values[t->states[i].fwd_value].name);
        st = copy ? restore(ctx, s, path, name, t->states[i].value) : check_tensor(ctx, s, path, name, t->states[i].value);
    }
    return st;
}

/* A checkpoint of another model can hold every tensor this trainer restores and more (a
 * deeper ResNet holds a shallower one's names and shapes): a weight or running statistic
 * the trainer does not have is refused, naming it. (Optimizer states of a trainer
 * without them, e.g. SGD momentum dropped, are left out on purpose.) */
static kiln_status extra_tensors(kiln_trainer *t, const kiln_safetensors *s, const char *path) {
    for (int i = 0; i < kiln_safetensors_count(s); i++) {
        const char *name = kiln_safetensors_name(s, i);
        const bool param = strncmp(name, "param/", 6) == 0, bn = strncmp(name, "bn/", 3) == 0;
        if (!param && !bn) continue;
        const char *nm = name + (param ? 6 : 3);
        bool found = false;
        for (int k = 0; param && !found && k < t->n_params; k++)
            found = strcmp(t->fwd->values[t->params[k].fwd_value].name, nm) == 0;
        for (int k = 0; bn && !found && k < t->n_states; k++)
            found = strcmp(t->fwd->values[t->states[k].fwd_value].name, nm) == 0;
        if (!found)
            return kiln_fail(t->ctx, KILN_ERR_INVALID_ARGUMENT, "checkpoint '%s' holds %s '%s', which this model does "
                             "not train (was it saved from another model?)", path,
                             param ? "weight" : "running statistic", nm);
    }
    return KILN_OK;
}

/* Data parallelism: did every rank check the checkpoint it read, and the same one (its
 * metadata: counters, position, seed)? Every rank calls this, whatever its own status
 * `st`, so none waits for one that failed. */
static kiln_status ranks_agree(kiln_trainer *t, const char *path, const kiln_safetensors *s, kiln_status st) {
    kiln_dist *d = t->opts.dist;
    if (!d || d->size <= 1) return st;
    uint64_t mine[2] = {st == KILN_OK, 0xcbf29ce484222325ull};
    for (int i = 0; s && !st && i < kiln_safetensors_meta_count(s); i++) {
        const char *key = kiln_safetensors_meta_key(s, i);
        mine[1] = kiln_dist_hash_bytes(key, strlen(key) + 1, mine[1]);
        const char *v = kiln_safetensors_meta(s, key);
        mine[1] = kiln_dist_hash_bytes(v ? v : "", v ? strlen(v) + 1 : 1, mine[1]);
    }
    uint64_t *all = calloc((size_t)d->size * 2, sizeof *all);
    if (!all) return st ? st : kiln_fail(t->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory checking the ranks' checkpoints");
    kiln_status ast = d->host->allgather(d, mine, all, sizeof mine);
    for (int r = 0; r < d->size && !ast && !st; r++) {
        if (!all[2 * r])
            ast = kiln_fail(t->ctx, KILN_ERR_IO, "checkpoint '%s': rank %d of %d could not load it (its message says "
                            "why); no rank loaded it", path, r, d->size);
        else if (all[2 * r + 1] != all[1])
            ast = kiln_fail(t->ctx, KILN_ERR_INVALID_ARGUMENT, "checkpoint '%s': rank %d of %d read another checkpoint "
                            "than rank 0 (other counters or position): every rank must read the same file (a shared "
                            "file system, or the same copy on every host); no rank loaded it", path, r, d->size);
    }
    free(all);
    return st ? st : ast;
}

/* An optional counter: absent is -1 (older checkpoints). */
static kiln_status meta_opt_i64(kiln_context *ctx, const kiln_safetensors *s, const char *path, const char *key,
                                int64_t *out) {
    *out = -1;
    return kiln_safetensors_meta(s, key) ? meta_i64(ctx, s, path, key, out) : KILN_OK;
}

kiln_status kiln_trainer_load(kiln_trainer *t, const char *path, int64_t *epoch, int64_t *step_in_epoch) {
    kiln_train_position pos;
    kiln_status st = kiln_trainer_load_position(t, path, &pos);
    if (!st && epoch) *epoch = pos.epoch;
    if (!st && step_in_epoch) *step_in_epoch = pos.step_in_epoch;
    return st;
}

kiln_status kiln_trainer_load_position(kiln_trainer *t, const char *path, kiln_train_position *pos) {
    if (!t || !path) return KILN_ERR_INVALID_ARGUMENT;
    kiln_context *ctx = t->ctx;
    kiln_safetensors *s = NULL;
    kiln_status st = kiln_safetensors_load(ctx, path, &s);
    const char *fmt = st ? "" : kiln_safetensors_meta(s, "kiln.format");
    int64_t opt = -1, steps = 0, micro = 0, skipped = 0, ep = 0, sie = 0, world = -1, sample = -1, batch = -1;
    float scale = 1.0f;
    if (!st && (!fmt || strcmp(fmt, "trainer-1") != 0))
        st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s' is not a kiln trainer checkpoint", path);
    if (!st) st = meta_i64(ctx, s, path, "optimizer", &opt);
    if (!st && opt != (int64_t)t->opts.optimizer)
        st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "checkpoint '%s' was saved with optimizer %d, this trainer uses %d",
                       path, (int)opt, (int)t->opts.optimizer);
    if (!st) st = meta_i64(ctx, s, path, "steps", &steps);
    if (!st) st = meta_i64(ctx, s, path, "micro_steps", &micro);
    if (!st) st = meta_i64(ctx, s, path, "skipped_steps", &skipped);
    if (!st) st = meta_i64(ctx, s, path, "epoch", &ep);
    if (!st) st = meta_i64(ctx, s, path, "step_in_epoch", &sie);
    if (!st) st = meta_opt_i64(ctx, s, path, "world_size", &world);
    if (!st) st = meta_opt_i64(ctx, s, path, "sample_in_epoch", &sample);
    if (!st) st = meta_opt_i64(ctx, s, path, "batch_per_rank", &batch);
    if (!st) {
        const char *ls = kiln_safetensors_meta(s, "loss_scale");
        char *end = NULL;
        errno = 0;
        scale = ls ? strtof(ls, &end) : 0;
        if (!ls || !*ls || *end || errno == ERANGE || !isfinite(scale) || !(scale > 0))
            st = kiln_fail(ctx, KILN_ERR_PARSE, "checkpoint '%s': metadata 'loss_scale' is %s%s%s; it must be a finite number > 0",
                           path, ls ? "'" : "missing", ls ? ls : "", ls ? "'" : "");
    }
    /* Check everything before changing anything: a bad checkpoint leaves the trainer as it
     * was (on every rank: they agree first). */
    if (!st) st = visit(t, s, path, false);
    if (!st) st = extra_tensors(t, s, path);
    st = ranks_agree(t, path, s, st);
    if (!st) st = visit(t, s, path, true);
    if (!st) {
        t->n.steps = steps;
        t->n.micro_steps = micro;
        t->n.skipped_steps = skipped;
        t->n.loss_scale = scale;
        if (pos)
            *pos = (kiln_train_position){.epoch = ep, .sample = sample, .step_in_epoch = sie,
                                         .world_size = world > 0 ? world : 0, .batch = batch > 0 ? batch : 0};
        st = kiln_trainer_sync_device(t);
    }
    kiln_safetensors_free(s);
    return st;
}

kiln_status kiln_trainer_set_steps(kiln_trainer *t, int64_t micro_steps) {
    if (!t) return KILN_ERR_INVALID_ARGUMENT;
    if (micro_steps < 0)
        return kiln_fail(t->ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_trainer_set_steps: %lld micro-batches; must be >= 0",
                         (long long)micro_steps);
    const int64_t acc = t->opts.accumulate > 0 ? t->opts.accumulate : 1;
    kiln_status st = kiln_trainer_sync_host(t); /* the device's state, before the counters go back with it */
    if (st) return st;
    t->n.steps = micro_steps / acc;
    t->n.micro_steps = t->n.steps * acc;
    return kiln_trainer_sync_device(t);
}
