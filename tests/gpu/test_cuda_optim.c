/* test_cuda_optim.c — the training step's ops on the GPU against their CPU references, bit
 * for bit: kiln.OptimizerStep (every optimizer, schedules, unscaling, a skipped step, f32 /
 * f16 / bf16 gradients, in place and out of place, more parameters than one launch's table
 * holds; LARS, LAMB, gradient clipping and no weight decay on some tensors, whose norms are
 * sums in double in another order on each side: bit for bit but for a rare last-bit
 * rounding, within 1e-6 relative), kiln.NonFiniteCheck, kiln.LossScaleUpdate and
 * kiln.GradAccumulate. Several steps, each step's outputs feeding the next. The fused
 * tail's update (kiln_cuda_optimizer_step over a device table, what CUDA training runs)
 * against kiln.OptimizerStep's CPU reference for the same large-batch options, and whole
 * trainers (mnist-net, LARS / LAMB / SGD with those options) on CUDA against the CPU
 * trainer. Needs a CUDA device (label gpu); without one it fails. */
#include "core/internal.h"
#include "core/optest.h"
#include "cuda/cuda_backend.h"
#include "train/optim_graph.h"
#include "train/trainer_internal.h"
#include "kiln_models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
#include "../check.h"

static kiln_cuda *cu;
static kiln_context *ctx;

/* A device tensor with t's dtype, shape and bytes. */
static kiln_tensor *to_device(const kiln_tensor *t) {
    kiln_tensor *d = calloc(1, sizeof *d);
    *d = *t;
    d->owns_data = false;
    void *p = NULL;
    if (kiln_cuda_arena_alloc(cu, kiln_tensor_nbytes(t) + 16, &p) != KILN_OK) {
        free(d);
        return NULL;
    }
    d->data = p;
    kiln_cuda_upload(cu, p, t->data, kiln_tensor_nbytes(t));
    return d;
}

/* Bit for bit; with loose (Adam's bias corrections and the schedules' double pow / cos,
 * which the device computes within 1-2 ulp of double of the host's libm), f32 outputs
 * may differ by the rounding that leaves: 1e-6 relative. */
static bool same_as_device(const kiln_tensor *host, const kiln_tensor *dev, bool loose, const char *label) {
    const size_t nb = kiln_tensor_nbytes(host);
    kiln_tensor *got = kiln_tensor_new(ctx, host->dtype, host->ndim, host->dims);
    if (!got) return false;
    kiln_cuda_download(cu, got->data, dev->data, nb);
    bool same = memcmp(got->data, host->data, nb) == 0;
    if (!same && loose && host->dtype == KILN_F32) {
        same = kiln_tensor_compare(got, host, 0, 1e-6, label) == 0;
        if (same) printf("     %s: not bit for bit, within 1e-6 relative\n", label);
    }
    kiln_tensor_free(got);
    return same;
}

/* Run node on CPU (fresh outputs) and CUDA (outputs `inplace`: the inputs' device tensors
 * per map, else fresh device tensors) for `steps` steps; compare every output's bits. */
static void compare(const char *op, kiln_attr *attrs, int n_attrs, int n_in, kiln_tensor **in, int n_out,
                    const int *out_of_in, bool inplace, int steps, bool loose, const char *label) {
    kiln_node node = {.op_type = (char *)op, .name = (char *)label, .domain = "kiln", .opset = 1,
                      .op = kiln_op_index_domain("kiln", op), .n_in = n_in, .n_out = n_out, .n_attrs = n_attrs,
                      .attrs = attrs};
    kiln_tensor **dev = calloc((size_t)n_in, sizeof *dev), **dout = calloc((size_t)n_out, sizeof *dout);
    kiln_tensor **hout = calloc((size_t)n_out, sizeof *hout);
    bool same = true;
    kiln_cuda_arena_reset(cu);
    for (int i = 0; i < n_in; i++) dev[i] = in[i] ? to_device(in[i]) : NULL;
    for (int s = 0; s < steps && same; s++) {
        kiln_status st = kiln_op_eval(ctx, &node, n_in, in, n_out, hout);
        CHECK(st == KILN_OK, "%s: CPU: %s", label, kiln_context_message(ctx));
        if (st) {
            same = false; /* no "ok" line for a case that did not run */
            break;
        }
        for (int k = 0; k < n_out; k++) {
            if (inplace && out_of_in && out_of_in[k] >= 0) {
                dout[k] = dev[out_of_in[k]];
                continue;
            }
            dout[k] = to_device(hout[k]); /* its shape, then NaN bytes: the kernel must write it all */
            if (dout[k]) kiln_cuda_fill_bytes(cu, dout[k]->data, 0xFF, kiln_tensor_nbytes(hout[k]));
        }
        kiln_op_ctx c = {.kctx = ctx, .node = &node, .n_in = n_in, .in = dev, .n_out = n_out, .out = dout,
                         .host_in = in};
        st = kiln_cuda_supports(&c);
        CHECK(st == KILN_OK, "%s: supports: %s", label, kiln_context_message(ctx));
        size_t ws = 0; /* the op's workspace (OptimizerStep's norms) */
        if (!st) st = kiln_cuda_workspace_size(cu, &c, &ws);
        if (!st && ws) st = kiln_cuda_arena_alloc(cu, ws, &c.workspace);
        c.workspace_size = ws;
        CHECK(st == KILN_OK, "%s: workspace: %s", label, kiln_context_message(ctx));
        if (!st) st = kiln_cuda_run(cu, &c);
        if (!st) st = kiln_cuda_sync(cu);
        CHECK(st == KILN_OK, "%s: CUDA: %s", label, kiln_context_message(ctx));
        for (int k = 0; k < n_out && !st; k++) {
            const bool ok = same_as_device(hout[k], dout[k], loose, label);
            CHECK(ok, "%s: step %d output %d differs from the CPU reference's bits", label, s, k);
            same &= ok;
        }
        /* the next step reads this one's outputs */
        for (int k = 0; k < n_out; k++) {
            const int i = out_of_in ? out_of_in[k] : -1;
            if (i >= 0) {
                kiln_tensor_free(in[i]);
                in[i] = hout[k];
                hout[k] = NULL;
                if (dev[i] != dout[k]) {
                    free(dev[i]);
                    dev[i] = dout[k];
                }
            } else {
                kiln_tensor_free(hout[k]);
                hout[k] = NULL;
                if (!(inplace && out_of_in && out_of_in[k] >= 0)) free(dout[k]);
            }
            dout[k] = NULL;
        }
        if (st) {
            same = false;
            break;
        }
    }
    if (same) printf("ok   %s: %d steps bit for bit%s\n", label, steps, inplace ? " (in place)" : "");
    for (int i = 0; i < n_in; i++) {
        free(dev[i]);
        kiln_tensor_free(in[i]);
    }
    free(dev);
    free(dout);
    free(hout);
}

/* Parameter k of a case takes no weight decay (with no_decay_bn_bias set in the options). */
static bool case_no_decay(const kiln_train_options *o, int k) { return o->no_decay_bn_bias && k % 3 == 1; }

static void optimizer_case(const kiln_train_options *o, int n, kiln_dtype gdt, bool unscale, float found,
                           bool inplace, const char *label) {
    const int ns = kiln_optimizer_states(o);
    const int n_in = 3 + n * (2 + ns), n_out = 1 + n * (1 + ns);
    kiln_tensor **in = calloc((size_t)n_in, sizeof *in);
    int *map = calloc((size_t)n_out, sizeof(int));
    in[0] = kt_scalar(KILN_I64, 0);
    in[1] = found >= 0 ? kt_scalar(KILN_F32, found) : NULL;
    in[2] = unscale ? kt_scalar(KILN_F32, 1.0 / 512) : NULL;
    for (int k = 0; k < n; k++) {
        const int64_t len = 1 + (k * 997) % 9000; /* odd sizes, some over a chunk */
        in[3 + k] = kt_rand(KILN_F32, 1, &len, -1, 1, (uint64_t)(10 + k));
        in[3 + n + k] = kt_rand(gdt, 1, &len, unscale ? -500 : -1, unscale ? 500 : 1, (uint64_t)(1000 + k));
        /* signed states: SGD's momentum buffer and Adam's exp_avg; running means of squares
         * (Adam's exp_avg_sq, Adadelta's square_avg and acc_delta) are non-negative: a negative
         * square_avg would take Adadelta's sqrt to NaN, whose bits differ host to device */
        for (int j = 0; j < ns; j++)
            in[3 + 2 * n + k * ns + j] =
                o->optimizer == KILN_OPTIM_SGD || (j == 0 && o->optimizer != KILN_OPTIM_ADADELTA)
                    ? kt_rand(KILN_F32, 1, &len, -0.1, 0.1, (uint64_t)(2000 + k))
                    : kt_rand(KILN_F32, 1, &len, 0, 0.01, (uint64_t)((j == 0 ? 2000 : 3000) + k));
    }
    map[0] = 0;
    for (int k = 0; k < n * (1 + ns); k++) map[1 + k] = k < n ? 3 + k : 3 + n + k;
    kiln_attr *attrs = NULL;
    int n_attrs = 0;
    int64_t *nd = calloc((size_t)n, sizeof *nd);
    for (int k = 0; k < n; k++) nd[k] = case_no_decay(o, k);
    kiln_optim_step_attrs_nd(ctx, o, n, o->no_decay_bn_bias ? nd : NULL, &attrs, &n_attrs);
    free(nd);
    const bool loose = o->optimizer == KILN_OPTIM_ADAM || o->optimizer == KILN_OPTIM_ADAMW ||
                       o->optimizer == KILN_OPTIM_LARS || o->optimizer == KILN_OPTIM_LAMB || o->clip_grad_norm > 0 ||
                       o->schedule != KILN_SCHEDULE_CONSTANT;
    compare("OptimizerStep", attrs, n_attrs, n_in, in, n_out, map, inplace, 4, loose, label);
    for (int a = 0; a < n_attrs; a++) kiln_attr_clear(&attrs[a]);
    free(attrs);
    free(in);
    free(map);
}

/* The fused tail's update (kiln_cuda_optimizer_step over a device table with its norm
 * scratch, then kiln_cuda_train_step_end: what src/cuda/train.c captures) against
 * kiln.OptimizerStep's CPU reference, `steps` steps of the same gradients. */
static void fused_case(const kiln_train_options *o, int n, bool unscale, const char *label) {
    const int ns = kiln_optimizer_states(o), steps = 4;
    const int n_in = 3 + n * (2 + ns), n_out = 1 + n * (1 + ns);
    kiln_tensor **in = calloc((size_t)n_in, sizeof *in), **dev = calloc((size_t)n_in, sizeof *dev);
    kiln_cuda_optim_entry *host = calloc((size_t)n, sizeof *host);
    int64_t *nd = calloc((size_t)n, sizeof *nd);
    const float scale = unscale ? 512.f : 1.f;
    kiln_cuda_arena_reset(cu);
    in[0] = kt_scalar(KILN_I64, 0);
    in[2] = unscale ? kt_scalar(KILN_F32, 1.0 / 512) : NULL;
    bool ok = true;
    for (int k = 0; k < n; k++) {
        const int64_t len = 1 + (k * 1777) % 9000;
        in[3 + k] = kt_rand(KILN_F32, 1, &len, -1, 1, (uint64_t)(40 + k));
        in[3 + n + k] = kt_rand(KILN_F32, 1, &len, -scale, scale, (uint64_t)(4000 + k));
        for (int j = 0; j < ns; j++)
            in[3 + 2 * n + k * ns + j] = j == 0 ? kt_rand(KILN_F32, 1, &len, -0.1, 0.1, (uint64_t)(5000 + k))
                                                : kt_rand(KILN_F32, 1, &len, 0, 0.01, (uint64_t)(6000 + k));
        nd[k] = case_no_decay(o, k);
    }
    for (int i = 3; i < n_in; i++) {
        dev[i] = to_device(in[i]);
        ok &= dev[i] != NULL;
    }
    for (int k = 0; k < n && ok; k++) {
        host[k].param = dev[3 + k]->data;
        host[k].grad = dev[3 + n + k]->data;
        host[k].state0 = ns > 0 ? dev[3 + 2 * n + k * ns]->data : NULL;
        host[k].state1 = ns > 1 ? dev[3 + 2 * n + k * ns + 1]->data : NULL;
        host[k].n = kiln_tensor_numel(in[3 + k]);
        host[k].flags = nd[k] ? KILN_CUDA_OPTIM_NO_DECAY : 0;
        host[k].slot = k;
    }
    const int64_t chunks = kiln_cuda_optim_table_prepare(host, n);
    void *table = NULL, *state = NULL;
    kiln_status st = ok ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_cuda_arena_alloc(cu, kiln_cuda_optim_table_bytes(n, chunks), &table);
    if (!st) st = kiln_cuda_upload(cu, table, host, sizeof *host * (size_t)n);
    if (!st) st = kiln_cuda_arena_alloc(cu, sizeof(kiln_cuda_train_state), &state);
    if (!st) st = kiln_cuda_train_state_init(cu, o, scale, state);
    kiln_attr *attrs = NULL;
    int n_attrs = 0;
    if (!st) st = kiln_optim_step_attrs_nd(ctx, o, n, o->no_decay_bn_bias ? nd : NULL, &attrs, &n_attrs);
    kiln_node node = {.op_type = "OptimizerStep", .name = (char *)label, .domain = "kiln", .opset = 1,
                      .op = kiln_op_index_domain("kiln", "OptimizerStep"), .n_in = n_in, .n_out = n_out,
                      .n_attrs = n_attrs, .attrs = attrs};
    bool same = !st;
    for (int s = 0; s < steps && !st && same; s++) {
        kiln_tensor **out = calloc((size_t)n_out, sizeof *out);
        st = kiln_op_eval(ctx, &node, n_in, in, n_out, out);
        if (!st) st = kiln_cuda_optimizer_step(cu, o, table, n, chunks, KILN_F32, KILN_DTYPE_UNDEFINED, unscale, state, NULL);
        if (!st) st = kiln_cuda_train_step_end(cu, NULL, o, state);
        if (!st) st = kiln_cuda_sync(cu);
        for (int k = 0; k < n * (1 + ns) && !st; k++) {
            const int i = k < n ? 3 + k : 3 + n + k;
            const bool eq = same_as_device(out[1 + k], dev[i], true, label);
            CHECK(eq, "%s: step %d output %d differs from the CPU reference", label, s, 1 + k);
            same &= eq;
        }
        for (int k = 0; k < n_out; k++) { /* the CPU's next inputs */
            const int i = k == 0 ? 0 : k <= n ? 2 + k : 2 + n + k;
            if (!st && out[k]) {
                kiln_tensor_free(in[i]);
                in[i] = out[k];
            } else {
                kiln_tensor_free(out[k]);
            }
        }
        free(out);
    }
    CHECK(st == KILN_OK, "%s: %s", label, kiln_context_message(ctx));
    if (!st && same) printf("ok   %s: %d fused steps match the CPU reference\n", label, steps);
    for (int a = 0; a < n_attrs; a++) kiln_attr_clear(&attrs[a]);
    free(attrs);
    for (int i = 0; i < n_in; i++) {
        free(dev[i]);
        kiln_tensor_free(in[i]);
    }
    free(in);
    free(dev);
    free(host);
    free(nd);
}

/* A whole trainer on CUDA (the update lowered into the captured step's fused tail, src/cuda/
 * train.c) against the CPU trainer: mnist-net, 2 epochs of 4 steps over 200 random images,
 * dropout on (the same seeds), TF32 off; weights within 1e-4, losses within 1e-4 relative. */
static void trainer_case(kiln_train_options o, const char *label) {
    const int64_t n = 200, batch = 64;
    kiln_model *ma = NULL, *mb = NULL;
    kiln_trainer *a = NULL, *b = NULL;
    kiln_tensor *images = kt_rand(KILN_F32, 4, KT_DIMS(n, 1, 28, 28), 0, 1, 31);
    kiln_tensor *labels = kt_rand(KILN_I64, 1, KT_DIMS(n), 0, 10, 32);
    o.seed = 7;
    o.strict_fp32 = 1;
    o.device = KILN_DEVICE_CPU;
    kiln_status st = images && labels ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_model_mnist_net(ctx, -1, 1, 1, &ma);
    if (!st) st = kiln_model_mnist_net(ctx, -1, 1, 1, &mb);
    if (!st) st = kiln_trainer_create(ma, "loss", &o, &a);
    o.device = KILN_DEVICE_CUDA;
    if (!st) st = kiln_trainer_create(mb, "loss", &o, &b);
    float la[2] = {0}, lb[2] = {0};
    for (int e = 0; e < 2 && !st; e++) {
        st = kiln_trainer_train_epoch(a, images, labels, batch, 5, e, 0, -1, &la[e]);
        if (!st) st = kiln_trainer_train_epoch(b, images, labels, batch, 5, e, 0, -1, &lb[e]);
    }
    if (!st) st = kiln_trainer_sync_host(b);
    CHECK(st == KILN_OK, "%s: %s", label, kiln_context_message(ctx));
    if (!st) {
        double worst = 0, moved = 0;
        for (int k = 0; k < a->n_params; k++)
            for (int64_t i = 0; i < a->params[k].numel; i++) {
                const double d = fabs((double)((const float *)a->params[k].value->data)[i] -
                                      (double)((const float *)b->params[k].value->data)[i]);
                if (!(d <= worst)) worst = d;
            }
        /* the update did something: the weights moved from the fresh model's */
        for (int k = 0; k < a->n_params; k++) {
            const int v = a->params[k].fwd_value;
            const kiln_tensor *w0 = v >= 0 && v < ma->n_values ? ma->values[v].init : NULL;
            if (w0 && kiln_tensor_numel(w0) != a->params[k].numel) w0 = NULL;
            for (int64_t i = 0; w0 && i < a->params[k].numel; i++)
                moved = fmax(moved, fabs((double)((const float *)w0->data)[i] -
                                         (double)((const float *)a->params[k].value->data)[i]));
        }
        const bool ok = fabs(la[0] - lb[0]) <= 1e-4 * fabs(la[0]) && fabs(la[1] - lb[1]) <= 1e-4 * fabs(la[1]) &&
                        worst <= 1e-4 && isfinite(la[1]) && moved > 1e-4;
        CHECK(ok, "%s: losses %.9g, %.9g vs the CPU's %.9g, %.9g; weights differ by up to %.3g, moved up to %.3g",
              label, lb[0], lb[1], la[0], la[1], worst, moved);
        if (ok)
            printf("ok   %s: 8 steps on CUDA = the CPU trainer (weights within %.2g, moved up to %.3g)\n", label,
                   worst, moved);
    }
    kiln_trainer_free(a);
    kiln_trainer_free(b);
    kiln_model_free(ma);
    kiln_model_free(mb);
    kiln_tensor_free(images);
    kiln_tensor_free(labels);
}

int main(void) {
    kiln_context_create(&ctx);
    kiln_cuda_options co = {.device = 0, .arena_bytes = (size_t)256 << 20};
    if (kiln_cuda_create(ctx, &co, &cu) != KILN_OK) {
        printf("FAIL no CUDA device: %s\n", kiln_context_message(ctx));
        return 1;
    }
    kiln_train_options cfg[] = {
        {.optimizer = KILN_OPTIM_SGD, .lr = 0.1f, .weight_decay = 1e-3f},
        {.optimizer = KILN_OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f, .nesterov = 1, .schedule = KILN_SCHEDULE_STEP,
         .step_size = 2, .gamma = 0.5f},
        {.optimizer = KILN_OPTIM_ADAM, .lr = 1e-2f, .weight_decay = 1e-3f, .schedule = KILN_SCHEDULE_COSINE,
         .total_steps = 5, .warmup_steps = 2},
        {.optimizer = KILN_OPTIM_ADAMW, .lr = 1e-2f, .weight_decay = 0.05f},
        {.optimizer = KILN_OPTIM_ADADELTA, .lr = 1.0f, .weight_decay = 1e-3f},
    };
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        kiln_train_options *o = &cfg[i];
        o->beta1 = 0.9f;
        o->beta2 = 0.999f;
        o->eps = o->optimizer == KILN_OPTIM_ADADELTA ? 1e-6f : 1e-8f;
        o->rho = 0.9f;
        if (o->gamma == 0) o->gamma = 0.1f;
        char label[160];
        snprintf(label, sizeof label, "OptimizerStep %s, 5 f32 gradients", kiln_optimizer_name(o->optimizer));
        optimizer_case(o, 5, KILN_F32, false, -1, false, label);
        optimizer_case(o, 5, KILN_F32, false, -1, true, label);
        snprintf(label, sizeof label, "OptimizerStep %s, 70 f16 gradients unscaled", kiln_optimizer_name(o->optimizer));
        optimizer_case(o, 70, KILN_F16, true, 0, true, label);
        snprintf(label, sizeof label, "OptimizerStep %s, bf16 gradients, skipped", kiln_optimizer_name(o->optimizer));
        optimizer_case(o, 3, KILN_BF16, true, 1, true, label);
    }
    /* large-batch options: LARS, LAMB, clipping, no weight decay on every third tensor */
    kiln_train_options lb[] = {
        {.optimizer = KILN_OPTIM_LARS, .lr = 0.5f, .momentum = 0.9f, .weight_decay = 5e-3f, .lars_eta = 0.02f},
        {.optimizer = KILN_OPTIM_LARS, .lr = 0.5f, .momentum = 0.9f, .weight_decay = 5e-3f, .lars_eta = 0.02f,
         .no_decay_bn_bias = 1, .clip_grad_norm = 2.f, .schedule = KILN_SCHEDULE_POLY, .total_steps = 6,
         .warmup_steps = 2},
        {.optimizer = KILN_OPTIM_LAMB, .lr = 1e-2f, .weight_decay = 0.01f},
        {.optimizer = KILN_OPTIM_LAMB, .lr = 1e-2f, .weight_decay = 0.01f, .no_decay_bn_bias = 1, .clip_grad_norm = 1.f},
        {.optimizer = KILN_OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.05f, .no_decay_bn_bias = 1,
         .clip_grad_norm = 1.f},
        {.optimizer = KILN_OPTIM_ADAMW, .lr = 1e-2f, .weight_decay = 0.1f, .no_decay_bn_bias = 1, .clip_grad_norm = 3.f},
    };
    for (size_t i = 0; i < sizeof lb / sizeof lb[0]; i++) {
        kiln_train_options *o = &lb[i];
        o->beta1 = 0.9f;
        o->beta2 = 0.999f;
        o->eps = o->optimizer == KILN_OPTIM_LAMB ? 1e-6f : 1e-8f;
        o->rho = 0.9f;
        o->gamma = 0.1f;
        if (o->lars_eta == 0) o->lars_eta = 0.001f;
        char label[200];
        snprintf(label, sizeof label, "OptimizerStep %s clip %g no-decay %d, 5 f32 gradients",
                 kiln_optimizer_name(o->optimizer), o->clip_grad_norm, o->no_decay_bn_bias);
        optimizer_case(o, 5, KILN_F32, false, -1, false, label);
        optimizer_case(o, 5, KILN_F32, false, -1, true, label);
        snprintf(label, sizeof label, "OptimizerStep %s clip %g no-decay %d, 70 f16 gradients unscaled",
                 kiln_optimizer_name(o->optimizer), o->clip_grad_norm, o->no_decay_bn_bias);
        optimizer_case(o, 70, KILN_F16, true, 0, true, label);
        snprintf(label, sizeof label, "OptimizerStep %s clip %g no-decay %d, bf16 gradients, skipped",
                 kiln_optimizer_name(o->optimizer), o->clip_grad_norm, o->no_decay_bn_bias);
        optimizer_case(o, 3, KILN_BF16, true, 1, true, label);
        snprintf(label, sizeof label, "fused update %s clip %g no-decay %d, 9 tensors",
                 kiln_optimizer_name(o->optimizer), o->clip_grad_norm, o->no_decay_bn_bias);
        fused_case(o, 9, false, label);
        snprintf(label, sizeof label, "fused update %s clip %g no-decay %d, 9 tensors, unscaled",
                 kiln_optimizer_name(o->optimizer), o->clip_grad_norm, o->no_decay_bn_bias);
        fused_case(o, 9, true, label);
    }
    trainer_case((kiln_train_options){.optimizer = KILN_OPTIM_LARS, .lr = 0.5f, .momentum = 0.9f,
                                      .weight_decay = 5e-4f, .lars_eta = 0.02f, .no_decay_bn_bias = 1,
                                      .clip_grad_norm = 1.f, .schedule = KILN_SCHEDULE_POLY, .total_steps = 8,
                                      .warmup_steps = 2},
                 "trainer LARS, no decay on 1-D, clip 1, poly with warm-up");
    trainer_case((kiln_train_options){.optimizer = KILN_OPTIM_LAMB, .lr = 2e-3f, .weight_decay = 0.01f,
                                      .no_decay_bn_bias = 1, .clip_grad_norm = 0.5f,
                                      .schedule = KILN_SCHEDULE_COSINE, .total_steps = 8, .warmup_steps = 2},
                 "trainer LAMB, no decay on 1-D, clip 0.5, cosine with warm-up");
    trainer_case((kiln_train_options){.optimizer = KILN_OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f, .nesterov = 1,
                                      .weight_decay = 1e-3f, .no_decay_bn_bias = 1, .clip_grad_norm = 0.5f},
                 "trainer SGD Nesterov, no decay on 1-D, clip 0.5");
    /* NonFiniteCheck: finite, an inf in the 70th gradient, f16 */
    for (int bad = 0; bad < 2; bad++) {
        const int n = 70;
        kiln_tensor *in[71];
        in[0] = kt_scalar(KILN_F32, 3);
        for (int k = 0; k < n; k++) {
            const int64_t len = 1 + (k * 331) % 5000;
            in[1 + k] = kt_rand(KILN_F16, 1, &len, -100, 100, (uint64_t)k);
        }
        if (bad) ((uint16_t *)in[n]->data)[kiln_tensor_numel(in[n]) - 1] = 0x7c00;
        compare("NonFiniteCheck", NULL, 0, 1 + n, in, 2, NULL, false, 1, false, bad ? "NonFiniteCheck, an inf" : "NonFiniteCheck");
    }
    /* LossScaleUpdate, in place: growth at the interval, then a backoff */
    {
        kiln_attr a[1] = {{.name = "growth_interval", .type = KILN_ATTR_INT, .i = 2}};
        kiln_tensor *in[4] = {kt_scalar(KILN_F32, 1024), kt_scalar(KILN_F32, 0), kt_scalar(KILN_I64, 0),
                              kt_scalar(KILN_I64, 0)};
        const int map[3] = {0, 2, 3};
        compare("LossScaleUpdate", a, 1, 4, in, 3, map, true, 3, false, "LossScaleUpdate, clean steps");
        kiln_tensor *in2[4] = {kt_scalar(KILN_F32, 1024), kt_scalar(KILN_F32, 1), kt_scalar(KILN_I64, 1),
                               kt_scalar(KILN_I64, 0)};
        compare("LossScaleUpdate", a, 1, 4, in2, 3, map, true, 2, false, "LossScaleUpdate, inf steps");
    }
    /* GradAccumulate, K = 3, 70 gradients (two launches), in place and not: micro 2..6 */
    for (int inplace = 0; inplace < 2; inplace++) {
        const int n = 70;
        kiln_tensor *in[1 + 2 * 70];
        int map[2 + 70];
        in[0] = kt_scalar(KILN_I64, 2);
        for (int k = 0; k < n; k++) {
            const int64_t len = 1 + (k * 577) % 6000;
            in[1 + k] = kt_rand(KILN_F32, 1, &len, -1, 1, (uint64_t)(50 + k));
            in[1 + n + k] = kt_rand(KILN_F32, 1, &len, -1, 1, (uint64_t)(500 + k));
            map[2 + k] = 1 + n + k;
        }
        map[0] = 0;
        map[1] = -1;
        kiln_attr a[2] = {{.name = "n", .type = KILN_ATTR_INT, .i = n}, {.name = "accumulate", .type = KILN_ATTR_INT, .i = 3}};
        compare("GradAccumulate", a, 2, 1 + 2 * n, in, 2 + n, map, inplace, 5, false, "GradAccumulate, K = 3");
    }
    kiln_cuda_free(cu);
    kiln_context_free(ctx);
    printf("%s (%d failed checks)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
