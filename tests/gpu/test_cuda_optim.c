/* test_cuda_optim.c — the training step's ops on the GPU against their CPU references, bit
 * for bit: kiln.OptimizerStep (every optimizer, schedules, unscaling, a skipped step, f32 /
 * f16 / bf16 gradients, in place and out of place, more parameters than one launch's table
 * holds), kiln.NonFiniteCheck, kiln.LossScaleUpdate and kiln.GradAccumulate. Several steps, each step's outputs
 * feeding the next. Needs a CUDA device (label gpu); without one it fails. */
#include "core/internal.h"
#include "core/optest.h"
#include "cuda/cuda_backend.h"
#include "train/optim_graph.h"
#include "train/trainer_internal.h"

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

static void optimizer_case(const kiln_train_options *o, int n, kiln_dtype gdt, bool unscale, float found,
                           bool inplace, const char *label) {
    const int ns = o->optimizer == KILN_OPTIM_SGD ? (o->momentum != 0) : 2;
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
    kiln_optim_step_attrs(ctx, o, n, &attrs, &n_attrs);
    const bool loose = o->optimizer == KILN_OPTIM_ADAM || o->optimizer == KILN_OPTIM_ADAMW ||
                       o->schedule != KILN_SCHEDULE_CONSTANT;
    compare("OptimizerStep", attrs, n_attrs, n_in, in, n_out, map, inplace, 4, loose, label);
    for (int a = 0; a < n_attrs; a++) kiln_attr_clear(&attrs[a]);
    free(attrs);
    free(in);
    free(map);
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
