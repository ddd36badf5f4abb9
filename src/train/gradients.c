/*
 * gradients.c — the gradient of a model's loss for every trained parameter at its current
 * weights, for one batch (kiln_model_gradients, kiln_tools.h): what a training step of
 * kiln_trainer_step computes, read back for comparison with another framework.
 *
 * It runs one step of a private trainer with plain SGD (no momentum, no weight decay, a
 * constant learning rate lr = 2^20) and reads g = (w0 - w1) / lr in double. The update
 * w1 = fl(w0 - lr*g) rounds once in f32 (lr*g is exact, lr a power of two), so
 * |g_read - g| <= 2^-24 * (|g| + |w0| / lr): the gradient to f32 precision, through the
 * backend's own training path (the CPU graph, or on CUDA the captured step), without any
 * hook in the engines. BatchNormalization runs in training mode, Dropout with the
 * trainer's seed. The model is not changed (the trainer trains a copy).
 */
#include "trainer_internal.h"

#include <stdlib.h>
#include <string.h>

#define GRAD_LR 1048576.0 /* 2^20 */

void kiln_gradients_free(kiln_gradients *g) {
    if (!g) return;
    for (int i = 0; i < g->n; i++) {
        if (g->names) free(g->names[i]);
        if (g->values) kiln_tensor_free(g->values[i]);
    }
    free(g->names);
    free(g->values);
    memset(g, 0, sizeof *g);
}

kiln_status kiln_model_gradients(kiln_model *m, const char *loss, const kiln_train_options *opts, int n_inputs,
                                 kiln_tensor *const *inputs, kiln_gradients *out) {
    if (!m || !loss || !out) return KILN_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    kiln_context *ctx = m->ctx;
    kiln_train_options o = KILN_TRAIN_OPTIONS_INIT;
    if (opts) {
        o.device = opts->device;
        o.device_index = opts->device_index;
        o.seed = opts->seed;
        o.threads = opts->threads;
        o.strict_fp32 = opts->strict_fp32;
        o.deterministic = opts->deterministic;
        o.disable_passes = opts->disable_passes;
    }
    o.optimizer = KILN_OPTIM_SGD;
    o.lr = (float)GRAD_LR;
    kiln_trainer *t = NULL;
    kiln_status st = kiln_trainer_create(m, loss, &o, &t);
    if (st) return st;
    st = kiln_trainer_step(t, n_inputs, inputs, &out->loss);
    if (!st) st = kiln_trainer_sync_host(t);
    const int n = t->n_params;
    if (!st) {
        out->names = kiln_calloc(ctx, (size_t)n + 1, sizeof(char *), "gradients");
        out->values = kiln_calloc(ctx, (size_t)n + 1, sizeof(kiln_tensor *), "gradients");
        if (!out->names || !out->values) st = KILN_ERR_OUT_OF_MEMORY;
    }
    for (int k = 0; k < n && !st; k++) {
        const kiln_param *p = &t->params[k];
        const kiln_value *v = &m->values[p->fwd_value]; /* the trainer's copy keeps value indices */
        const kiln_tensor *w0 = v->init;
        if (!w0 || w0->dtype != KILN_F32 || kiln_tensor_numel(w0) != p->numel) {
            st = kiln_fail(ctx, KILN_ERR_INTERNAL, "gradients: parameter '%s' does not match the model's initializer",
                           t->fwd->values[p->fwd_value].name);
            break;
        }
        kiln_tensor *g = NULL;
        if ((st = kiln_tensor_create(ctx, KILN_F32, w0->ndim, w0->dims, &g))) break;
        const float *a = w0->data, *b = p->value->data;
        float *d = g->data;
        for (int64_t i = 0; i < p->numel; i++) d[i] = (float)(((double)a[i] - (double)b[i]) / GRAD_LR);
        out->values[out->n] = g;
        out->names[out->n] = kiln_strdup(ctx, v->name);
        out->n++;
        if (!out->names[out->n - 1]) st = KILN_ERR_OUT_OF_MEMORY;
    }
    kiln_trainer_free(t);
    if (st) kiln_gradients_free(out);
    return st;
}
