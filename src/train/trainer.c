/*
 * trainer.c — training on any backend: the training graph, the one step path and epoch
 * loop, statistics, and export of the trained weights as an inference model.
 *
 * A trainer runs its training graph in a session on the device's backend; every step goes
 * through that backend's training engine (kiln_backend_train_i, src/core/backend.h:
 * src/cpu/train.c, src/cuda/train.c), which runs forward and backward, then the optimizer
 * update (the graph's own nodes; on CUDA lowered to the fused update captured with the step),
 * and draws an epoch's batches from its batch source (the host loader, or a data set
 * resident on the device). The learning-rate schedule is src/core/schedule.h.
 *
 * The optimizer update is nodes of the training graph (src/train/optim_graph.h: accumulation, loss scaling with its skip, the
 * schedule, the update), its state graph inputs this trainer owns and its next values graph
 * outputs, computed in place. The CPU engine runs the graph as it is; the CUDA engine
 * lowers the update's node group to its fused tail kernel (kiln_train_lower_update).
 *
 * The training graph is the forward graph with
 *   - every trained initializer turned into a graph input bound to trainer-owned memory
 *     (so the optimizer updates it in place between runs, and nothing is folded into it);
 *   - BatchNormalization in training mode, its running statistics also graph inputs, the
 *     updated ones extra graph outputs copied back after each step;
 *   - Dropout in training mode with its mask as an output, which its gradient reads;
 *   - the backward graph autograd derives from the loss.
 * One plan per input shape covers forward and backward with one arena.
 */
#include "../core/internal.h"
#include "../core/plan.h"
#include "../core/schedule.h"
#include "../data/data.h"
#include "../dist/dist.h"
#include "../passes/passes.h"
#include "autograd.h"
#include "optim_graph.h"
#include "recompute.h"
#include "trainer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Data parallelism (kiln_dist): the communicator must be this context's, for this device. */
static kiln_status dist_defaults(kiln_context *ctx, kiln_train_options *o) {
    const kiln_dist *d = o->dist;
    if (!d) return KILN_OK;
    if (d->ctx != ctx || ctx->dist != d)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "the trainer's communicator belongs to another context");
    if (d->device != o->device || (d->device == KILN_DEVICE_CUDA && d->device_index != o->device_index))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                         "rank %d: the communicator was made for %s device %d, the trainer runs on %s device %d", d->rank,
                         d->device == KILN_DEVICE_CUDA ? "CUDA" : "CPU", d->device_index,
                         o->device == KILN_DEVICE_CUDA ? "CUDA" : "CPU", o->device_index);
    if (o->bucket_bytes == 0) o->bucket_bytes = (size_t)25 << 20;
    return KILN_OK;
}

static kiln_status fill_defaults(kiln_context *ctx, kiln_train_options *o, bool plan_only) {
    if (o->optimizer < KILN_OPTIM_SGD || o->optimizer > KILN_OPTIM_LAMB)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "unknown optimizer %d", (int)o->optimizer);
    if (o->lr == 0)
        o->lr = o->optimizer == KILN_OPTIM_ADADELTA ? 1.0f
                : o->optimizer == KILN_OPTIM_SGD    ? 0.01f
                : o->optimizer == KILN_OPTIM_LARS   ? 0.1f
                                                    : 1e-3f;
    if (o->beta1 == 0) o->beta1 = 0.9f;
    if (o->beta2 == 0) o->beta2 = 0.999f;
    if (o->eps == 0) o->eps = o->optimizer == KILN_OPTIM_ADADELTA || o->optimizer == KILN_OPTIM_LAMB ? 1e-6f : 1e-8f;
    if (o->lars_eta == 0) o->lars_eta = 0.001f;
    if (!(o->lars_eta > 0) || !(o->clip_grad_norm >= 0))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "training options out of range (lars_eta %g, clip_grad_norm %g)",
                         o->lars_eta, o->clip_grad_norm);
    if (o->schedule < KILN_SCHEDULE_CONSTANT || o->schedule > KILN_SCHEDULE_POLY)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "unknown schedule %d", (int)o->schedule);
    if (o->schedule == KILN_SCHEDULE_POLY && o->total_steps <= o->warmup_steps)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "the poly schedule needs total_steps (%lld) > warmup_steps (%lld)",
                         (long long)o->total_steps, (long long)o->warmup_steps);
    if (o->rho == 0) o->rho = 0.9f;
    if (o->accumulate <= 0) o->accumulate = 1;
    if (o->gamma == 0) o->gamma = 0.1f;
    if (!(o->lr > 0) || o->momentum < 0 || o->weight_decay < 0 || o->rho >= 1 || o->beta1 >= 1 || o->beta2 >= 1)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "training options out of range (lr %g, momentum %g, weight decay %g)",
                         o->lr, o->momentum, o->weight_decay);
    if (o->schedule == KILN_SCHEDULE_STEP && o->step_size <= 0)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "the step schedule needs step_size > 0");
    if (o->schedule == KILN_SCHEDULE_COSINE && o->total_steps <= 0)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "the cosine schedule needs total_steps > 0");
    const kiln_backend_i *bi = NULL;
    kiln_status bst = plan_only ? KILN_OK : kiln_backend_get(ctx, o->device, &bi);
    if (bst) return bst;
    if (o->amp != KILN_AMP_OFF && o->amp != KILN_AMP_FP16 && o->amp != KILN_AMP_BF16)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "unknown amp mode %d", (int)o->amp);
    if (o->amp != KILN_AMP_OFF && o->accumulate > 1)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "mixed precision with gradient accumulation is not supported yet");
    return dist_defaults(ctx, o);
}

float kiln_trainer_lr_at(const kiln_train_options *o, int64_t step) { return kiln_lr_schedule(o, step); }

/* ---------------------------------------------------------- graph rewriting */

static bool push_int(int **arr, int *n, int v) {
    int *p = realloc(*arr, sizeof(int) * (size_t)(*n + 1));
    if (!p) return false;
    p[(*n)++] = v;
    *arr = p;
    return true;
}

/* Append a fresh output value to node i; returns the value index or -1. */
static int add_node_output(kiln_model *m, int i, const char *suffix) {
    char name[256];
    snprintf(name, sizeof name, "%s:%s", m->nodes[i].name[0] ? m->nodes[i].name : m->nodes[i].op_type, suffix);
    int v = kiln_model_get_value(m, name);
    if (v < 0) return -1;
    kiln_node *n = &m->nodes[i];
    int *o = realloc(n->out, sizeof(int) * (size_t)(n->n_out + 1));
    if (!o) return -1;
    n->out = o;
    o[n->n_out++] = v;
    return v;
}

static kiln_status set_int_attr(kiln_model *m, int i, const char *name, int64_t v) {
    return kiln_node_set_int(&m->nodes[i], name, v);
}

/* Turn initializer value v into a graph input; its tensor moves to *owned. */
static kiln_status lift_initializer(kiln_model *m, int v, kiln_tensor **owned) {
    kiln_value *val = &m->values[v];
    *owned = val->init;
    val->init = NULL;
    val->is_input = true;
    return push_int(&m->inputs, &m->n_inputs, v) ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
}

/* Running statistics (the op's training.state_inputs, BatchNormalization's mean and
 * variance) are state the trainer updates from the node's outputs, not parameters. */
static bool is_state_use(const kiln_node *n, int k) {
    const kiln_op_def *d = kiln_node_def(n);
    return d && d->training && k < 32 && (d->training->state_inputs & (1u << k));
}

/* Is value v consumed by some node at an input the op trains (not nondiff_inputs)? */
static bool trainable_use(const kiln_model *m, int v) {
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *n = &m->nodes[i];
        const kiln_op_def *d = kiln_op_get(kiln_op_index_domain(n->domain, n->op_type));
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] == v && !(d && kiln_input_in_mask(d->nondiff_inputs, k)) && !is_state_use(n, k))
                return true;
    }
    return false;
}

/* Which values reach the loss (backward reachability over the forward nodes). */
static bool *reaching(kiln_model *m, int loss) {
    bool *r = kiln_calloc(m->ctx, (size_t)m->n_values + 1, sizeof(bool), "reachability");
    if (!r) return NULL;
    r[loss] = true;
    for (int i = m->n_nodes - 1; i >= 0; i--) {
        const kiln_node *n = &m->nodes[i];
        bool any = false;
        for (int k = 0; k < n->n_out; k++) any |= r[n->out[k]];
        for (int k = 0; any && k < n->n_in; k++)
            if (n->in[k] >= 0) r[n->in[k]] = true;
    }
    return r;
}

/* The optimizer's carried state (og, in m before the passes): what each carried graph input
 * is fed, by name (the passes keep input names). Parameters and the loss scale are the
 * trainer's; the rest are new zero tensors owned here (the optimizer states PyTorch starts
 * from, step and skip counters 0), the states' data the parameters' state[] (checkpoints
 * read and write them there). */
static kiln_status bind_carried(kiln_trainer *t, kiln_model *m, const kiln_optim_graph *og, int loss_scale) {
    kiln_context *ctx = t->ctx;
    const int n = kiln_optim_graph_carried(og, NULL, NULL);
    int *in = kiln_calloc(ctx, (size_t)n, sizeof(int), "optimizer state");
    t->carried_names = kiln_calloc(ctx, (size_t)n, sizeof(char *), "optimizer state");
    t->carried = kiln_calloc(ctx, (size_t)n, sizeof(kiln_tensor *), "optimizer state");
    t->carried_owned = kiln_calloc(ctx, (size_t)n, sizeof(bool), "optimizer state");
    t->carried_feed = kiln_calloc(ctx, (size_t)n, sizeof(int), "optimizer state");
    kiln_status st = in && t->carried_names && t->carried && t->carried_owned && t->carried_feed ? KILN_OK
                                                                                                 : KILN_ERR_OUT_OF_MEMORY;
    if (!st) {
        kiln_optim_graph_carried(og, in, NULL);
        t->n_carried = n;
    }
    for (int j = 0; j < n && !st; j++) {
        const kiln_value *val = &m->values[in[j]];
        if (!(t->carried_names[j] = kiln_strdup(ctx, val->name))) {
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        for (int k = 0; k < t->n_params && !t->carried[j]; k++)
            if (og->param_in[k] == in[j]) t->carried[j] = t->params[k].value;
        if (t->carried[j]) continue;
        if (in[j] == loss_scale) {
            if (!t->scale_input && !(t->scale_input = kiln_tensor_new(ctx, KILN_F32, 0, NULL))) st = KILN_ERR_OUT_OF_MEMORY;
            t->carried[j] = t->scale_input;
            continue;
        }
        if (!(t->carried[j] = kiln_tensor_new(ctx, val->dtype, val->ndim, val->dims))) {
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        t->carried_owned[j] = true;
        if (in[j] == og->step) t->step_count = t->carried[j];
        else if (in[j] == og->micro) t->micro_count = t->carried[j];
        else if (in[j] == og->growth_tracker) t->growth_count = t->carried[j];
        else if (in[j] == og->skipped) t->skipped_count = t->carried[j];
        for (int k = 0; k < og->n_params * og->n_states; k++)
            if (og->state_in[k] == in[j]) t->params[k / og->n_states].state[k % og->n_states] = t->carried[j]->data;
    }
    free(in);
    return st;
}

static kiln_status build_training_graph(kiln_trainer *t, int loss_fwd) {
    kiln_context *ctx = t->ctx;
    kiln_model *m = NULL;
    kiln_status st = kiln_model_clone(t->fwd, &m);
    if (st) return st;
    t->train = m;
    t->n_data_inputs = m->n_inputs;
    bool *reach = reaching(m, loss_fwd);
    if (!reach) return KILN_ERR_OUT_OF_MEMORY;
    int n0 = m->n_values;
    int *params = kiln_calloc(ctx, (size_t)n0 + 1, sizeof(int), "parameters");
    t->params = kiln_calloc(ctx, (size_t)n0 + 1, sizeof(kiln_param), "parameters");
    t->states = kiln_calloc(ctx, (size_t)n0 + 1, sizeof(kiln_state), "BatchNormalization state");
    if (!params || !t->params || !t->states) {
        free(reach);
        free(params);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    /* Parameters: float initializers on the loss's path used where the op trains them. */
    for (int v = 0; v < n0 && !st; v++) {
        kiln_value *val = &m->values[v];
        if (!val->init || !kiln_dtype_is_float(val->dtype) || !reach[v] || !trainable_use(m, v)) continue;
        if (val->dtype != KILN_F32) {
            st = kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "trained initializer '%s' is %s; kiln trains f32 weights",
                           val->name, kiln_dtype_name(val->dtype));
            break;
        }
        kiln_param *p = &t->params[t->n_params];
        p->fwd_value = v; /* the clone keeps value indices */
        st = lift_initializer(m, v, &p->value);
        p->numel = kiln_tensor_numel(p->value);
        params[t->n_params++] = v;
    }
    free(reach);
    /* Training forms (kiln_op_def.training): BatchNormalization's training_mode with its
     * running statistics in and out, Dropout's training_mode input and mask output. */
    for (int i = 0; i < m->n_nodes && !st; i++) {
        kiln_node *n = &m->nodes[i];
        const kiln_op_def *d = kiln_node_def(n);
        const kiln_op_training *tf = d ? d->training : NULL;
        if (!tf) continue;
        for (int k = 0; k < 32 && !st; k++)
            if ((tf->state_inputs & (1u << k)) && (n->n_in <= k || n->in[k] < 0 || !m->values[n->in[k]].init))
                st = kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s node '%s': running statistics must be initializers",
                               n->op_type, n->name);
        if (st) break;
        if (n->opset < tf->min_opset) n->opset = tf->min_opset;
        if (tf->mode_attr && (st = set_int_attr(m, i, tf->mode_attr, 1))) break;
        /* SyncBatchNorm: batch statistics over every rank (src/ops/batch_normalization.c) */
        if (tf->state_inputs && t->opts.sync_bn && t->opts.dist &&
            (st = set_int_attr(m, i, "sync_comm", (int64_t)t->opts.dist->id)))
            break;
        if (tf->mode_input > 0) {
            /* a constant true */
            if (t->true_value < 0) {
                kiln_tensor *tr = kiln_tensor_new(ctx, KILN_BOOL, 0, NULL);
                if (!tr) { st = KILN_ERR_OUT_OF_MEMORY; break; }
                ((uint8_t *)tr->data)[0] = 1;
                t->true_value = kiln_model_get_value(m, "kiln:training_mode");
                if (t->true_value < 0) { kiln_tensor_free(tr); st = KILN_ERR_OUT_OF_MEMORY; break; }
                m->values[t->true_value].init = tr;
                m->values[t->true_value].dtype = KILN_BOOL;
                m->values[t->true_value].ndim = 0;
            }
            n = &m->nodes[i];
            const int n_in = n->n_in > tf->mode_input + 1 ? n->n_in : tf->mode_input + 1;
            int *in = realloc(n->in, sizeof(int) * (size_t)n_in);
            if (!in) { st = KILN_ERR_OUT_OF_MEMORY; break; }
            n->in = in;
            for (int k = n->n_in; k < tf->mode_input; k++) in[k] = -1;
            in[tf->mode_input] = t->true_value;
            n->n_in = n_in;
        }
        while (m->nodes[i].n_out < tf->n_outputs && !st) {
            const char *nm = tf->output_names[m->nodes[i].n_out < 4 ? m->nodes[i].n_out : 0];
            if (add_node_output(m, i, nm ? nm : "out") < 0) st = KILN_ERR_OUT_OF_MEMORY;
        }
        for (int k = 0, j = 0; k < 32 && !st; k++) {
            if (!(tf->state_inputs & (1u << k))) continue;
            kiln_state *s = &t->states[t->n_states++];
            s->fwd_value = m->nodes[i].in[k];
            s->out_value = m->nodes[i].out[tf->state_output + j++];
            st = lift_initializer(m, s->fwd_value, &s->value);
        }
    }
    int *grads = st ? NULL : kiln_calloc(ctx, (size_t)t->n_params + 1, sizeof(int), "gradients");
    if (!st && !grads) st = KILN_ERR_OUT_OF_MEMORY;
    if (!st && t->n_params == 0) st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "the model has no float initializer that reaches the loss");
    /* Mixed precision: dL/dloss is a graph input, the loss scale (the last input). */
    int seed = -1;
    if (!st && t->opts.amp != KILN_AMP_OFF) {
        static const int64_t none[1] = {0};
        st = kiln_model_add_input(m, "kiln:loss_scale", KILN_F32, 0, none);
        seed = st ? -1 : kiln_model_find_value(m, "kiln:loss_scale");
    }
    if (!st) st = kiln_autograd_seeded(m, loss_fwd, seed, t->n_params, params, grads);
    /* the update as graph nodes after the backward graph */
    kiln_optim_graph og;
    memset(&og, 0, sizeof og);
    if (!st) st = kiln_optim_graph_append(m, &t->opts, t->n_params, params, grads, NULL, seed, &og);
    if (!st) st = bind_carried(t, m, &og, seed);
    /* outputs: loss, the carried state's next values, updated running statistics */
    if (!st) {
        m->n_outputs = 0;
        for (int v = 0; v < m->n_values; v++) m->values[v].is_output = false;
        st = kiln_model_add_output(m, m->values[loss_fwd].name);
        for (int k = 0; k < t->n_params; k++) t->params[k].grad_value = grads[k];
        int *next = kiln_calloc(ctx, (size_t)t->n_carried + 1, sizeof(int), "optimizer state");
        if (!next && !st) st = KILN_ERR_OUT_OF_MEMORY;
        if (next) kiln_optim_graph_carried(&og, NULL, next);
        for (int j = 0; j < t->n_carried && !st; j++) st = kiln_model_add_output(m, m->values[next[j]].name);
        free(next);
        for (int k = 0; k < t->n_states && !st; k++) st = kiln_model_add_output(m, m->values[t->states[k].out_value].name);
    }
    kiln_optim_graph_clear(&og);
    if (!st) st = kiln_model_finalize(m);
    /* CUDA: convolution chains NHWC (forward and backward) by the sessions' policy */
    const bool nhwc = kiln_policy_nhwc(t->opts.device,
                                       t->opts.amp == KILN_AMP_OFF ? KILN_PRECISION_FP32 : KILN_PRECISION_FP16,
                                       t->opts.strict_fp32, t->opts.disable_passes);
    /* CUDA: convolutions and products with their activations as one kernel (the
     * activation's gradient reads its output, which the fused op still writes).
     * LogSoftmax -> NegativeLogLikelihoodLoss and its gradient pair as one op each, before
     * the precision pass, so under AMP the logits and their gradient stay fp16/bf16 with no
     * Casts (src/passes/fuse_loss.c). CUDA only: the CPU keeps PyTorch's op sequence, whose
     * rounding its fp32 loss is compared with (bench/loss_vs_torch.py; fused, the first
     * steps differ by 6e-6 instead of 7e-8, and Adadelta amplifies that). The pool and
     * training Dropout with their gradient chain as one op each way, where the layout
     * pass made the pool's input NHWC; a MaxPool of overlapping windows writing its picks
     * for its gradient, and with the BN -> Relu before it as one op (kiln.BnReluMaxPool)
     * (src/passes/fuse_pool.c; bit for bit the same). A
     * training BatchNormalization and the Relu after it, and their gradients, as one node
     * each way (src/passes/fuse_bn.c). The stem's 3-channel image and weight read through
     * Pads to 4 channels, its weight gradient sliced back (src/passes/pad_channels.c) */
    const unsigned fuse =
        t->opts.device == KILN_DEVICE_CUDA
            ? (unsigned)(KILN_PASS_FUSE_CONV | KILN_PASS_FUSE_LOSS | KILN_PASS_FUSE_POOL | KILN_PASS_FUSE_BN |
                         KILN_PASS_BN_MASK_FROM_X | KILN_PASS_PAD_CHANNELS)
            : 0u;
    const unsigned wanted = (fuse | (nhwc ? (unsigned)KILN_PASS_NHWC : 0u)) & ~t->opts.disable_passes;
    if (!st && (t->opts.amp != KILN_AMP_OFF || wanted)) {
        /* Forward and backward in fp16/bf16 where the precision pass allows; the weights
         * (graph inputs), the loss and the gradients (graph outputs) stay f32. */
        kiln_pass_options po = {.device = t->opts.device,
                                .precision = t->opts.amp == KILN_AMP_FP16   ? KILN_PRECISION_FP16
                                             : t->opts.amp == KILN_AMP_BF16 ? KILN_PRECISION_BF16
                                                                            : KILN_PRECISION_FP32,
                                .disabled = ~wanted,
                                /* BN statistics from the convolutions */
                                .conv_bn_stats = t->opts.device == KILN_DEVICE_CUDA &&
                                                 !(t->opts.disable_passes & KILN_PASS_CONV_BN_STATS) &&
                                                 kiln_pass_conv_bn_stats_env(),
                                /* BN apply in the convolutions' prologue: opt-in (KILN_CUDA_BN_PROLOGUE=1) */
                                .conv_bn_prologue = t->opts.device == KILN_DEVICE_CUDA &&
                                                    kiln_pass_conv_bn_prologue_env()};
        kiln_model *low = NULL;
        st = kiln_passes_apply(m, &po, &low);
        if (!st) {
            kiln_model_free(t->train);
            t->train = low;
        }
    }
    free(params);
    free(grads);
    return st;
}

/* ---------------------------------------------------------------- lifecycle */

/* The loss must be one float whatever the graph inputs' symbolic dims (the batch) are:
 * its shape is inferred with them as 1 and as 3 (a batch of losses shows up as 1 vs 3).
 * The message names the value and its shape, with '?' for a dim that follows them. */
static kiln_status check_scalar_loss(kiln_model *m, int lv) {
    kiln_shape_probes pr;
    kiln_status st = kiln_pass_shape_probes(m, &pr);
    if (st) return st;
    const kiln_tensor *a = &pr.one[lv], *b = &pr.three[lv];
    bool one = a->ndim >= 0 && a->ndim == b->ndim && kiln_dtype_is_float(a->dtype);
    for (int d = 0; one && d < a->ndim; d++) one = a->dims[d] == 1 && b->dims[d] == 1;
    if (!one) {
        char shape[200];
        size_t k = (size_t)snprintf(shape, sizeof shape, "%s", a->dtype ? kiln_dtype_name(a->dtype) : "?");
        if (a->ndim < 0 || a->ndim != b->ndim) snprintf(shape + k, sizeof shape - k, " of a shape unknown before a run");
        else
            for (int d = 0; d < a->ndim && k < sizeof shape; d++) {
                char dim[24];
                if (a->dims[d] != b->dims[d]) snprintf(dim, sizeof dim, "?");
                else snprintf(dim, sizeof dim, "%lld", (long long)a->dims[d]);
                k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%s%s", d ? "," : "[", dim,
                                      d + 1 == a->ndim ? "]" : "");
            }
        /* unknown: name the first node whose shape the probed batch leaves unknown (a batch
         * fixed in the graph, e.g. a Constant shaped by the export's batch) */
        char where[400] = "";
        for (int i = 0; i < m->n_nodes && !where[0] && (a->ndim < 0 || a->ndim != b->ndim); i++) {
            const kiln_node *n = &m->nodes[i];
            bool in_known = true, out_unknown = false;
            for (int j = 0; j < n->n_in; j++)
                if (n->in[j] >= 0) in_known &= pr.one[n->in[j]].ndim >= 0 && pr.three[n->in[j]].ndim >= 0;
            for (int j = 0; j < n->n_out; j++)
                if (n->out[j] >= 0) out_unknown |= pr.one[n->out[j]].ndim < 0 || pr.three[n->out[j]].ndim < 0;
            if (in_known && out_unknown)
                snprintf(where, sizeof where,
                         " (shapes are first lost at %s node '%s' when the batch is not the export's: a batch fixed "
                         "in the graph? export with a dynamic batch, torch.onnx.export(..., dynamic_axes={input: "
                         "{0: 'batch'}}))",
                         n->op_type, n->name);
        }
        st = kiln_fail(m->ctx, KILN_ERR_SHAPE, "the loss '%s' must be a float scalar; it is %s%s", m->values[lv].name,
                       shape, where);
    }
    kiln_pass_shape_probes_free(&pr);
    return st;
}

/* The feeds after the data inputs, by input name: the carried state, then
 * the running statistics. */
static kiln_status bind_feeds(kiln_trainer *t) {
    const kiln_model *m = t->train;
    for (int j = 0; j < t->n_carried; j++) t->carried_feed[j] = -1;
    for (int i = t->n_data_inputs; i < m->n_inputs; i++) {
        const char *name = m->values[m->inputs[i]].name;
        for (int j = 0; j < t->n_carried && !t->feeds[i]; j++)
            if (strcmp(t->carried_names[j], name) == 0) {
                t->feeds[i] = t->carried[j];
                t->carried_feed[j] = i;
            }
        for (int k = 0; k < t->n_states && !t->feeds[i]; k++)
            if (strcmp(t->fwd->values[t->states[k].fwd_value].name, name) == 0) t->feeds[i] = t->states[k].value;
        if (!t->feeds[i])
            return kiln_fail(t->ctx, KILN_ERR_INTERNAL, "training graph input '%s': no tensor of the trainer's", name);
    }
    for (int j = 0; j < t->n_carried; j++)
        if (t->carried_feed[j] < 0)
            return kiln_fail(t->ctx, KILN_ERR_INTERNAL, "optimizer state '%s' is not a training graph input",
                             t->carried_names[j]);
    return KILN_OK;
}

/* The counters into the graph's carried scalars (at create, and after a
 * checkpoint load); the engine reads them back after each step. */
static void counters_to_graph(kiln_trainer *t) {
    if (t->step_count) ((int64_t *)t->step_count->data)[0] = t->n.steps;
    if (t->micro_count) ((int64_t *)t->micro_count->data)[0] = t->n.micro_steps;
    if (t->growth_count) ((int64_t *)t->growth_count->data)[0] = t->n.clean_steps;
    if (t->skipped_count) ((int64_t *)t->skipped_count->data)[0] = t->n.skipped_steps;
    if (t->scale_input) ((float *)t->scale_input->data)[0] = t->n.loss_scale;
}

static kiln_status trainer_create(kiln_model *fwd, const char *loss, const kiln_train_options *opts, bool plan_only,
                                  kiln_trainer **out) {
    if (!fwd || !loss || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    kiln_context *ctx = fwd->ctx;
    if (!fwd->finalized) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "the model must be finalized before training");
    kiln_train_options o;
    kiln_status st = kiln_options_take(ctx, "kiln_train_options", opts, &o, sizeof o);
    if (!st) st = fill_defaults(ctx, &o, plan_only);
    if (st) return st;
    int lv = kiln_model_find_value(fwd, loss);
    bool is_out = false;
    for (int i = 0; lv >= 0 && i < fwd->n_outputs; i++) is_out |= fwd->outputs[i] == lv;
    if (!is_out) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "'%s' is not an output of the model", loss);
    kiln_trainer *t = kiln_calloc(ctx, 1, sizeof *t, "a trainer");
    if (t) t->from_epoch = -1;
    if (!t) return KILN_ERR_OUT_OF_MEMORY;
    t->ctx = ctx;
    t->opts = o;
    t->true_value = -1;
    t->loss_name = kiln_strdup(ctx, loss);
    st = t->loss_name ? kiln_model_clone(fwd, &t->fwd) : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = check_scalar_loss(t->fwd, lv);
    if (!st) {
        t->fwd->finalized = true;
        st = build_training_graph(t, lv);
    }
    if (plan_only) { /* kiln_trainer_create_plan: the graph only (no limit fitted, no session) */
        if (st) kiln_trainer_free(t);
        else *out = t;
        return st;
    }
    /* The session the training graph runs in, on the device's backend, which says whether
     * the session's passes run over it (the CPU) or build_training_graph's rewrite for the
     * device stands (CUDA). Made before the memory limit is fitted: the plan then counts the
     * backend's kernel workspace, which only the backend knows. */
    kiln_session_options so = {.device = o.device, .device_index = o.device_index, .threads = o.threads,
                               .disable_passes = o.disable_passes, .deterministic = o.deterministic,
                               .strict_fp32 = o.strict_fp32};
    const bool session_passes = kiln_backend_for(o.device)->train_session_passes;
    if (!st) st = kiln_session_create_ex(t->train, &so, session_passes, &t->sess);
    /* activation checkpointing: recompute what the memory limit needs (src/train/memory.c);
     * a rewritten graph drops the session, made again over it below */
    if (!st && o.memory_limit) st = kiln_trainer_fit_memory(t);
    /* data parallelism: the same graph everywhere, rank 0's weights */
    if (!st && o.dist) st = kiln_dist_trainer_start(o.dist, t->train, t->n_params, t->params, t->n_states, t->states);
    if (!st && !t->sess) st = kiln_session_create_ex(t->train, &so, session_passes, &t->sess);
    /* (optimizer states and accumulation sums are carried tensors, made with the graph) */
    for (int k = 0; k < t->n_params; k++) t->param_count += t->params[k].numel;
    const int nf = st ? 0 : t->train->n_inputs, no = 1 + t->n_carried + t->n_states;
    t->n_feeds = nf;
    t->n_outs = no;
    if (!st) {
        t->feeds = kiln_calloc(ctx, (size_t)nf, sizeof *t->feeds, "trainer inputs");
        t->outs = kiln_calloc(ctx, (size_t)no, sizeof *t->outs, "trainer outputs");
        if (!t->feeds || !t->outs) st = KILN_ERR_OUT_OF_MEMORY;
    }
    if (st) {
        kiln_trainer_free(t);
        return st;
    }
    /* GradScaler's initial scale for fp16; bf16 has fp32's range and needs none */
    t->n.loss_scale = o.amp == KILN_AMP_FP16 ? 65536.0f : 1.0f;
    st = bind_feeds(t);
    if (st) {
        kiln_trainer_free(t);
        return st;
    }
    counters_to_graph(t);
    /* the training engine of the session's backend, and what it sees of this trainer */
    t->view = (kiln_train_view){.ctx = ctx,
                                .opts = &t->opts,
                                .train = t->train,
                                .sess = t->sess,
                                .n_data_inputs = t->n_data_inputs,
                                .n_params = t->n_params,
                                .n_states = t->n_states,
                                .params = t->params,
                                .states = t->states,
                                .feeds = t->feeds,
                                .outs = t->outs,
                                .scale_input = t->scale_input,
                                .param_count = t->param_count,
                                .n = &t->n,
                                .n_feeds = nf,
                                .n_outs = no,
                                .n_carried = t->n_carried,
                                .carried_feed = t->carried_feed,
                                .step_count = t->step_count,
                                .growth_count = t->growth_count,
                                .skipped_count = t->skipped_count};
    t->engine = kiln_session_backend(t->sess, NULL)->train;
    st = t->engine->create(&t->view, &t->tr);
    if (st) {
        kiln_trainer_free(t);
        return st;
    }
    *out = t;
    return KILN_OK;
}

kiln_status kiln_trainer_create(kiln_model *fwd, const char *loss, const kiln_train_options *opts,
                                kiln_trainer **out) {
    return trainer_create(fwd, loss, opts, false, out);
}

kiln_status kiln_trainer_create_plan(kiln_model *fwd, const char *loss, const kiln_train_options *opts,
                                     kiln_trainer **out) {
    return trainer_create(fwd, loss, opts, true, out);
}

void kiln_trainer_free(kiln_trainer *t) {
    if (!t) return;
    if (t->engine) t->engine->free(t->tr);
    for (int k = 0; k < t->n_params; k++) {
        kiln_tensor_free(t->params[k].value); /* its state[] are the carried tensors' data */
    }
    for (int j = 0; j < t->n_carried; j++) {
        if (t->carried_owned && t->carried_owned[j]) kiln_tensor_free(t->carried[j]);
        if (t->carried_names) free(t->carried_names[j]);
    }
    free(t->carried_names);
    free(t->carried);
    free(t->carried_owned);
    free(t->carried_feed);
    for (int k = 0; k < t->n_states; k++) kiln_tensor_free(t->states[k].value);
    kiln_session_free(t->sess);
    kiln_tensor_free(t->scale_input);
    kiln_model_free(t->train);
    kiln_model_free(t->fwd);
    free(t->params);
    free(t->states);
    free(t->feeds);
    free(t->outs);
    free(t->loss_name);
    free(t);
}

/* ---------------------------------------------------------------- stepping */

/* One step, whatever the backend: forward and backward, then the optimizer update, in the
 * engine of the session's backend. */
kiln_status kiln_trainer_step(kiln_trainer *t, int n_inputs, kiln_tensor *const *inputs, float *loss) {
    if (!t) return KILN_ERR_INVALID_ARGUMENT;
    if (n_inputs != t->n_data_inputs || (n_inputs && !inputs))
        return kiln_fail(t->ctx, KILN_ERR_INVALID_ARGUMENT, "the model takes %d inputs, %d were given", t->n_data_inputs, n_inputs);
    for (int i = 0; i < n_inputs; i++) {
        /* a tensor on the trainer's own CUDA device is copied there (a batch decoded on the
         * GPU); any other device is refused */
        const kiln_tensor *x = inputs[i];
        if (x && x->device != KILN_DEVICE_CPU &&
            (x->device != t->opts.device || x->device_index != t->opts.device_index)) {
            kiln_status st = kiln_require_host(t->ctx, x, "kiln_trainer_step (on another device than the trainer's)");
            return kiln_api_end(t->ctx, st);
        }
    }
    for (int i = 0; i < n_inputs; i++) t->feeds[i] = inputs[i];
    return kiln_api_end(t->ctx, t->engine->step(t->tr, false, loss));
}

void *kiln_trainer_stream(const kiln_trainer *t) { return t ? kiln_session_stream(t->sess) : NULL; }

/* The checks kiln_trainer_warmup and kiln_trainer_train_epoch share, naming the caller. */
static kiln_status data_set_args(kiln_trainer *t, const kiln_tensor *images, const kiln_tensor *labels, int64_t batch,
                                 const char *who) {
    kiln_context *ctx = t->ctx;
    const int64_t n = images->ndim ? images->dims[0] : 0;
    if (t->n_data_inputs != 2)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "%s needs a model with two inputs (data, labels)", who);
    kiln_status hst = kiln_require_host(ctx, images, who);
    if (!hst) hst = kiln_require_host(ctx, labels, who);
    if (hst) return hst;
    if (images->dtype != KILN_F32 || labels->dtype != KILN_I64 || labels->ndim != 1 || labels->dims[0] != n || n < 1)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "%s: images must be f32 (N, ...) and labels i64 (N) with N >= 1",
                         who);
    if (batch < 1) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "%s: batch must be >= 1", who);
    if (batch > n)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "%s: a batch of %lld exceeds the data set's %lld samples", who,
                         (long long)batch, (long long)n);
    return KILN_OK;
}

kiln_status kiln_trainer_warmup(kiln_trainer *t, const kiln_tensor *images, const kiln_tensor *labels,
                                int64_t batch) {
    if (!t || !images || !labels) return KILN_ERR_INVALID_ARGUMENT;
    kiln_status st = data_set_args(t, images, labels, batch, "kiln_trainer_warmup");
    if (!st && t->engine->warmup) st = t->engine->warmup(t->tr, images, labels, batch);
    return st;
}

kiln_status kiln_trainer_set_epoch_start(kiln_trainer *t, int64_t epoch, int64_t sample) {
    if (!t) return KILN_ERR_INVALID_ARGUMENT;
    if (epoch >= 0 && sample < 0)
        return kiln_fail(t->ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_trainer_set_epoch_start: sample %lld is negative",
                         (long long)sample);
    t->from_epoch = epoch >= 0 && sample > 0 ? epoch : -1;
    t->from_sample = sample;
    return KILN_OK;
}

kiln_status kiln_trainer_train_epoch(kiln_trainer *t, const kiln_tensor *images, const kiln_tensor *labels,
                                     int64_t batch, uint64_t seed, int64_t epoch, int64_t start_step,
                                     int64_t end_step, float *last_loss) {
    if (!t || !images || !labels) return KILN_ERR_INVALID_ARGUMENT;
    kiln_context *ctx = t->ctx;
    const int64_t n = images->ndim ? images->dims[0] : 0;
    kiln_status ast = data_set_args(t, images, labels, batch, "kiln_trainer_train_epoch");
    if (ast) return ast;
    if (epoch < 0 || start_step < 0)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_trainer_train_epoch: epoch and start_step must be >= 0");
    /* data parallelism: every rank on the same data, each its shard (kiln_loader_shard) */
    if (t->opts.dist) {
        ast = kiln_dist_check_epoch(t->opts.dist, n, kiln_tensor_numel(images) / n, batch, seed, epoch,
                                    epoch == t->from_epoch ? t->from_sample : 0, start_step);
        if (ast) return ast;
    }
    const int64_t n_shard = kiln_dist_shard_n(&t->opts, n);
    if (batch > n_shard)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_trainer_train_epoch: a batch of %lld exceeds this rank's "
                         "%lld samples", (long long)batch, (long long)n_shard);
    /* the batch source: the engine's (gathered on the host, or on the device from a data
     * set resident there), step by step through the one step path */
    const int64_t steps = (n_shard + batch - 1) / batch;
    /* a resumed epoch (kiln_trainer_set_epoch_start): its rest from sample `offset` of the
     * order, this rank's rest_n of it in the last rest_steps of the epoch's steps */
    if (epoch == t->from_epoch && t->from_sample >= n) return KILN_OK; /* nothing of it left */
    const int64_t offset = epoch == t->from_epoch ? t->from_sample : 0;
    int64_t rest_n = n_shard, first = 0;
    if (offset > 0) {
        const int64_t W = t->opts.dist ? kiln_dist_size(t->opts.dist) : 1, rest = n - offset;
        rest_n = t->opts.drop_last ? rest / W : (rest + W - 1) / W;
        first = steps - (rest_n + batch - 1) / batch;
        if (start_step < first)
            return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                             "kiln_trainer_train_epoch: epoch %lld resumes at sample %lld, at step %lld of %lld; start "
                             "step %lld is behind it", (long long)epoch, (long long)offset, (long long)first,
                             (long long)steps, (long long)start_step);
    }
    if (end_step < 0 || end_step > steps) end_step = steps;
    kiln_status st = t->engine->epoch_begin(t->tr, images, labels, batch, seed, epoch, offset, start_step - first);
    for (int64_t s = start_step; s < end_step && !st; s++) {
        /* PyTorch keeps the last partial batch */
        const int64_t b = s == steps - 1 ? rest_n - (s - first) * batch : batch;
        bool resident = false;
        st = t->engine->epoch_batch(t->tr, s, b, &resident);
        if (!st) st = t->engine->step(t->tr, resident, s + 1 == end_step ? last_loss : NULL);
    }
    return st;
}

/* ---------------------------------------------------------------- profiling */

kiln_status kiln_trainer_profile(kiln_trainer *t, const kiln_tensor *images, const kiln_tensor *labels, int64_t batch,
                                 int iters, int replays, kiln_profile *out, double *step_ms) {
    if (!t || !images || !labels || !out || !step_ms) return KILN_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    *step_ms = 0;
    kiln_context *ctx = t->ctx;
    kiln_status ast = data_set_args(t, images, labels, batch, "kiln_trainer_profile");
    if (ast) return ast;
    if (!images->data || !labels->data)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_trainer_profile: images and labels must hold data");
    if (iters < 1 || replays < 1)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "profile: batch, passes and replays must be >= 1 (%lld, %d, %d)",
                         (long long)batch, iters, replays);
    return t->engine->profile(t->tr, images, labels, batch, iters, replays, out, step_ms);
}

/* On a device the weights live there: bring the host copies up to date, and back. */
kiln_status kiln_trainer_sync_host(kiln_trainer *t) { return t->engine->download(t->tr); }

kiln_status kiln_trainer_sync_device(kiln_trainer *t) {
    counters_to_graph(t);
    return t->engine->upload(t->tr);
}

kiln_status kiln_trainer_stats(const kiln_trainer *t, kiln_train_stats *out) {
    if (!t || !out) return KILN_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    out->micro_steps = t->n.micro_steps;
    out->steps = t->n.steps;
    out->skipped_steps = t->n.skipped_steps;
    out->lr = kiln_trainer_lr_at(&t->opts, t->n.steps);
    out->loss_scale = t->n.loss_scale;
    out->params = t->n_params;
    out->param_count = t->param_count;
    return KILN_OK;
}

/* ------------------------------------------------------------------ export */

kiln_status kiln_trainer_export(kiln_trainer *t, const char *output, kiln_model **out) {
    if (!t || !output || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    kiln_context *ctx = t->ctx;
    kiln_status sst = kiln_trainer_sync_host(t);
    if (sst) return sst;
    const kiln_model *f = t->fwd;
    int ov = kiln_model_find_value(f, output);
    bool is_out = false;
    for (int i = 0; ov >= 0 && i < f->n_outputs; i++) is_out |= f->outputs[i] == ov;
    if (!is_out) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "'%s' is not an output of the model", output);
    bool *need = reaching((kiln_model *)f, ov);
    if (!need) return KILN_ERR_OUT_OF_MEMORY;
    kiln_model *m = NULL;
    kiln_status st = kiln_model_create(ctx, &m);
    m = st ? NULL : m;
    if (m) m->opset = f->opset;
    for (int i = 0; i < f->n_inputs && !st; i++) {
        const kiln_value *v = &f->values[f->inputs[i]];
        if (need[f->inputs[i]]) st = kiln_model_add_input(m, v->name, v->dtype, v->ndim, v->dims);
    }
    for (int v = 0; v < f->n_values && !st; v++) {
        if (!need[v] || !f->values[v].init) continue;
        const kiln_tensor *cur = f->values[v].init;
        for (int k = 0; k < t->n_params; k++)
            if (t->params[k].fwd_value == v) cur = t->params[k].value;
        for (int k = 0; k < t->n_states; k++)
            if (t->states[k].fwd_value == v) cur = t->states[k].value;
        st = kiln_model_add_initializer(m, f->values[v].name, cur);
    }
    for (int i = 0; i < f->n_nodes && !st; i++) {
        const kiln_node *n = &f->nodes[i];
        bool used = false;
        for (int k = 0; k < n->n_out; k++) used |= need[n->out[k]];
        if (!used) continue;
        kiln_attr *attrs = n->n_attrs ? kiln_calloc(ctx, (size_t)n->n_attrs, sizeof *attrs, "attributes") : NULL;
        if (n->n_attrs && !attrs) st = KILN_ERR_OUT_OF_MEMORY;
        int copied = 0;
        for (; copied < n->n_attrs && !st; copied++) st = kiln_attr_copy(ctx, &attrs[copied], &n->attrs[copied]);
        int *in = st ? NULL : kiln_calloc(ctx, (size_t)(n->n_in + n->n_out + 1), sizeof *in, "a node's operands");
        int *o = in ? in + n->n_in : NULL;
        if (!st && !in) st = KILN_ERR_OUT_OF_MEMORY;
        for (int k = 0; in && k < n->n_in; k++) in[k] = n->in[k] >= 0 ? kiln_model_get_value(m, f->values[n->in[k]].name) : -1;
        for (int k = 0; in && k < n->n_out; k++) o[k] = kiln_model_get_value(m, f->values[n->out[k]].name);
        if (st) {
            for (int a = 0; a < copied; a++) kiln_attr_clear(&attrs[a]);
            free(attrs);
            free(in);
            break;
        }
        int idx = kiln_model_add_node_raw(m, n->op_type, n->name, n->domain, n->n_in, in, n->n_out, o, n->n_attrs, attrs);
        free(in);
        if (idx < 0) st = KILN_ERR_OUT_OF_MEMORY;
        else m->nodes[idx].opset = n->opset;
    }
    if (!st) st = kiln_model_add_output(m, output);
    if (!st) st = kiln_model_finalize(m);
    free(need);
    if (st) {
        kiln_model_free(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}
