/*
 * checkpoint.c — trainer checkpoints in safetensors: every trained tensor ("param/NAME"),
 * its optimizer state ("state0/NAME", "state1/NAME"), BatchNormalization running
 * statistics ("bn/NAME"), and the counters as metadata. kiln_safetensors_save writes a
 * temporary file and renames it, so the previous checkpoint survives a crash mid-save.
 * Gradient-accumulation buffers are not saved: save at an optimizer-step boundary.
 */
#include "../io/safetensors.h"
#include "trainer_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META_N 9

static int n_opt_states(const kiln_train_options *o) {
    return o->optimizer == KILN_OPTIM_SGD ? (o->momentum != 0) : 2;
}

kiln_status kiln_trainer_save(kiln_trainer *t, const char *path, int64_t epoch, int64_t step_in_epoch) {
    if (!t || !path) return KILN_ERR_INVALID_ARGUMENT;
    kiln_context *ctx = t->ctx;
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
                                "loss_scale", "epoch", "step_in_epoch", "seed"};
    snprintf(vals[0], sizeof vals[0], "trainer-1");
    snprintf(vals[1], sizeof vals[1], "%d", (int)t->opts.optimizer);
    snprintf(vals[2], sizeof vals[2], "%" PRId64, t->n.steps);
    snprintf(vals[3], sizeof vals[3], "%" PRId64, t->n.micro_steps);
    snprintf(vals[4], sizeof vals[4], "%" PRId64, t->n.skipped_steps);
    snprintf(vals[5], sizeof vals[5], "%.9g", t->n.loss_scale);
    snprintf(vals[6], sizeof vals[6], "%" PRId64, epoch);
    snprintf(vals[7], sizeof vals[7], "%" PRId64, step_in_epoch);
    snprintf(vals[8], sizeof vals[8], "%" PRIu64, t->opts.seed);
    const char *vp[META_N];
    for (int i = 0; i < META_N; i++) vp[i] = vals[i];
    if (!st)
        st = kiln_safetensors_save(ctx, path, k, (const char *const *)names, (const kiln_tensor *const *)views, META_N, keys, vp);
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

kiln_status kiln_trainer_load(kiln_trainer *t, const char *path, int64_t *epoch, int64_t *step_in_epoch) {
    if (!t || !path) return KILN_ERR_INVALID_ARGUMENT;
    kiln_context *ctx = t->ctx;
    kiln_safetensors *s = NULL;
    kiln_status st = kiln_safetensors_load(ctx, path, &s);
    if (st) return st;
    const char *fmt = kiln_safetensors_meta(s, "kiln.format");
    int64_t opt = -1, steps = 0, micro = 0, skipped = 0, ep = 0, sie = 0;
    float scale = 1.0f;
    if (!fmt || strcmp(fmt, "trainer-1") != 0)
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
    if (!st) {
        const char *ls = kiln_safetensors_meta(s, "loss_scale");
        char *end = NULL;
        errno = 0;
        scale = ls ? strtof(ls, &end) : 0;
        if (!ls || !*ls || *end || errno == ERANGE || !isfinite(scale) || !(scale > 0))
            st = kiln_fail(ctx, KILN_ERR_PARSE, "checkpoint '%s': metadata 'loss_scale' is %s%s%s; it must be a finite number > 0",
                           path, ls ? "'" : "missing", ls ? ls : "", ls ? "'" : "");
    }
    /* Check everything before changing anything: a bad checkpoint leaves the trainer as it was. */
    if (!st) st = visit(t, s, path, false);
    if (!st) st = visit(t, s, path, true);
    if (!st) {
        t->n.steps = steps;
        t->n.micro_steps = micro;
        t->n.skipped_steps = skipped;
        t->n.loss_scale = scale;
        if (epoch) *epoch = ep;
        if (step_in_epoch) *step_in_epoch = sie;
        st = kiln_trainer_sync_device(t);
    }
    kiln_safetensors_free(s);
    return st;
}
