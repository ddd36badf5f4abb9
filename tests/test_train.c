/* test_train.c — training on the CPU: optimizer updates against hand-computed PyTorch
 * formulas, gradient accumulation equal to the large batch, BatchNormalization running
 * statistics, checkpoints (exact resume; a save killed midway leaves the previous
 * checkpoint loadable), and a short mnist-net run on Fashion-MNIST that must learn.
 * Usage: test_train TMPDIR [FASHION_MNIST_DIR] */
#include "core/internal.h"
#include "data/data.h"
#include "io/safetensors.h"
#include "train/trainer_internal.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int fails;
#include "check.h"

/* y = x·W ((B,2) x (2,1)), loss = ReduceSum((y - t)^2): small enough to compute every
 * update by hand. */
static kiln_model *linear_model(kiln_context *ctx, const float w0[2]) {
    kiln_model *m = NULL;
    kiln_model_create(ctx, &m);
    kiln_model_add_input(m, "x", KILN_F32, 2, (int64_t[]){-1, 2});
    kiln_model_add_input(m, "t", KILN_F32, 2, (int64_t[]){-1, 1});
    kiln_tensor *w = NULL;
    kiln_tensor_wrap(ctx, KILN_F32, 2, (int64_t[]){2, 1}, (void *)w0, &w);
    kiln_model_add_initializer(m, "w", w);
    kiln_tensor_free(w);
    kiln_model_add_node(m, "MatMul", "mm", 2, (const char *[]){"x", "w"}, 1, (const char *[]){"y"}, NULL);
    kiln_model_add_node(m, "Sub", "sub", 2, (const char *[]){"y", "t"}, 1, (const char *[]){"d"}, NULL);
    kiln_model_add_node(m, "Mul", "sq", 2, (const char *[]){"d", "d"}, 1, (const char *[]){"d2"}, NULL);
    kiln_node *n = NULL;
    kiln_model_add_node(m, "ReduceSum", "sum", 1, (const char *[]){"d2"}, 1, (const char *[]){"loss"}, &n);
    kiln_node_set_int(n, "keepdims", 0);
    kiln_model_add_output(m, "loss");
    if (kiln_model_finalize(m)) {
        printf("linear model: %s\n", kiln_context_message(ctx));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

/* One step from w = (0.5, -0.25) on x = (1, 2), t = 1: y = 0, d = -1, loss 1,
 * dL/dw = 2 d x = (-2, -4). */
static void test_optimizers(kiln_context *ctx) {
    const float w0[2] = {0.5f, -0.25f}, x[2] = {1, 2}, t[1] = {1};
    kiln_tensor *xt = NULL, *tt = NULL;
    kiln_tensor_wrap(ctx, KILN_F32, 2, (int64_t[]){1, 2}, (void *)x, &xt);
    kiln_tensor_wrap(ctx, KILN_F32, 2, (int64_t[]){1, 1}, (void *)t, &tt);
    kiln_tensor *in[2] = {xt, tt};
    const double g[2] = {-2, -4};
    struct {
        const char *name;
        kiln_train_options o;
        double want[2]; /* w after one step, from PyTorch's update formulas */
    } cases[] = {
        {"sgd", {.optimizer = KILN_OPTIM_SGD, .lr = 0.1f}, {0.5 + 0.2, -0.25 + 0.4}},
        {"sgd weight decay", {.optimizer = KILN_OPTIM_SGD, .lr = 0.1f, .weight_decay = 0.5f},
         {0.5 - 0.1 * (-2 + 0.25), -0.25 - 0.1 * (-4 - 0.125)}},
        /* Adam step 1: m = (1-b1) g, v = (1-b2) g^2, mhat = g, vhat = g^2: w -= lr * g/(|g|+eps) */
        {"adam", {.optimizer = KILN_OPTIM_ADAM, .lr = 0.01f}, {0.5 + 0.01, -0.25 + 0.01}},
        {"adamw", {.optimizer = KILN_OPTIM_ADAMW, .lr = 0.01f, .weight_decay = 0.1f},
         {0.5 * (1 - 0.001) + 0.01, -0.25 * (1 - 0.001) + 0.01}},
        /* Adadelta step 1 (rho 0.9, eps 1e-6): sq = 0.1 g^2; delta = sqrt(eps)/sqrt(sq+eps) g */
        {"adadelta", {.optimizer = KILN_OPTIM_ADADELTA, .lr = 1.0f},
         {0.5 - sqrt(1e-6) / sqrt(0.1 * 4 + 1e-6) * -2, -0.25 - sqrt(1e-6) / sqrt(0.1 * 16 + 1e-6) * -4}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kiln_model *m = linear_model(ctx, w0);
        kiln_trainer *tr = NULL;
        float loss = -1;
        CHECK(m && kiln_trainer_create(m, "loss", &cases[c].o, &tr) == KILN_OK, "%s: %s", cases[c].name,
              kiln_context_message(ctx));
        if (tr) {
            CHECK(kiln_trainer_step(tr, 2, in, &loss) == KILN_OK, "%s step: %s", cases[c].name, kiln_context_message(ctx));
            CHECK(fabsf(loss - 1.0f) < 1e-6f, "%s: loss %g, want 1", cases[c].name, loss);
            kiln_model *e = NULL;
            CHECK(kiln_trainer_export(tr, "loss", &e) == KILN_OK, "export");
            const kiln_tensor *w = NULL;
            for (int v = 0; e && v < e->n_values; v++)
                if (strcmp(e->values[v].name, "w") == 0) w = e->values[v].init;
            CHECK(w != NULL, "exported weights");
            for (int i = 0; w && i < 2; i++) {
                double got = ((const float *)w->data)[i];
                CHECK(fabs(got - cases[c].want[i]) <= 1e-6 + 1e-5 * fabs(cases[c].want[i]), "%s: w[%d] = %.9g, want %.9g (g %g)",
                      cases[c].name, i, got, cases[c].want[i], g[i]);
            }
            kiln_model_free(e);
        }
        kiln_trainer_free(tr);
        kiln_model_free(m);
    }
    kiln_tensor_free(xt);
    kiln_tensor_free(tt);
}

/* Two micro-batches with accumulate 2 take one SGD step with the mean of their
 * gradients (computed by hand here). */
static void test_accumulation(kiln_context *ctx) {
    const float w0[2] = {0.1f, 0.2f};
    const float xa[4] = {1, 0, 0, 1}, ta[2] = {1, 2}, xb[4] = {2, 1, 1, 3}, tb[2] = {0, -1};
    kiln_tensor *x1 = NULL, *t1 = NULL, *x2 = NULL, *t2 = NULL;
    kiln_tensor_wrap(ctx, KILN_F32, 2, (int64_t[]){2, 2}, (void *)xa, &x1);
    kiln_tensor_wrap(ctx, KILN_F32, 2, (int64_t[]){2, 1}, (void *)ta, &t1);
    kiln_tensor_wrap(ctx, KILN_F32, 2, (int64_t[]){2, 2}, (void *)xb, &x2);
    kiln_tensor_wrap(ctx, KILN_F32, 2, (int64_t[]){2, 1}, (void *)tb, &t2);
    /* gradient of sum((xw - t)^2) = 2 x^T (xw - t) per micro-batch, averaged over the two */
    double grad[2] = {0, 0};
    const float *xs[2] = {xa, xb}, *ts[2] = {ta, tb};
    for (int b = 0; b < 2; b++)
        for (int r = 0; r < 2; r++) {
            double d = xs[b][2 * r] * w0[0] + xs[b][2 * r + 1] * w0[1] - ts[b][r];
            grad[0] += 2 * d * xs[b][2 * r] / 2;
            grad[1] += 2 * d * xs[b][2 * r + 1] / 2;
        }
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD, .lr = 0.05f, .accumulate = 2};
    kiln_model *m = linear_model(ctx, w0);
    kiln_trainer *tr = NULL;
    CHECK(m && kiln_trainer_create(m, "loss", &o, &tr) == KILN_OK, "accumulate: %s", kiln_context_message(ctx));
    if (tr) {
        kiln_train_stats s;
        kiln_tensor *in1[2] = {x1, t1}, *in2[2] = {x2, t2};
        kiln_trainer_step(tr, 2, in1, NULL);
        kiln_trainer_stats(tr, &s);
        CHECK(s.steps == 0 && s.micro_steps == 1, "no update after the first micro-batch");
        kiln_trainer_step(tr, 2, in2, NULL);
        kiln_trainer_stats(tr, &s);
        CHECK(s.steps == 1, "one update after two micro-batches");
        kiln_model *e = NULL;
        kiln_trainer_export(tr, "loss", &e);
        for (int v = 0; e && v < e->n_values; v++)
            if (strcmp(e->values[v].name, "w") == 0)
                for (int i = 0; i < 2; i++) {
                    double got = ((const float *)e->values[v].init->data)[i], want = w0[i] - 0.05 * grad[i];
                    CHECK(fabs(got - want) < 1e-6, "accumulated step w[%d] = %.9g, want %.9g", i, got, want);
                }
        kiln_model_free(e);
        CHECK(kiln_trainer_save(tr, "/nonexistent-dir/x.safetensors", 0, 0) == KILN_ERR_IO, "unwritable path is an I/O error");
        kiln_trainer_step(tr, 2, in1, NULL);
        CHECK(kiln_trainer_save(tr, "/tmp/never.safetensors", 0, 0) == KILN_ERR_INVALID_ARGUMENT,
              "saving between micro-batches is refused: %s", kiln_context_message(ctx));
    }
    kiln_trainer_free(tr);
    kiln_model_free(m);
    kiln_tensor_free(x1);
    kiln_tensor_free(t1);
    kiln_tensor_free(x2);
    kiln_tensor_free(t2);
}

/* ------------------------------------------------------------------ profile */

/* kiln_trainer_profile on the CPU (kiln train --profile): one row per run-list node, the
 * update (kiln.OptimizerStep) among them, consistent sums, and the trainer's state untouched: a trainer profiled
 * between two steps ends bit for bit where an unprofiled twin does (weights, losses,
 * counters), with Adadelta, and with SGD momentum mid-accumulation (the update must leave
 * the accumulated gradient alone). */
static void test_profile(kiln_context *ctx) {
    const int64_t n = 12, batch = 4;
    kiln_tensor *images = NULL, *labels = NULL, *flabels = NULL;
    kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){n, 1, 28, 28}, &images);
    kiln_tensor_create(ctx, KILN_I64, 1, &n, &labels);
    kiln_tensor_create(ctx, KILN_F32, 1, &n, &flabels);
    if (!images || !labels || !flabels) {
        CHECK(0, "profile: tensors");
        return;
    }
    uint64_t r = 88172645463325252ull;
    float *px = kiln_tensor_data(images);
    for (int64_t i = 0; i < n * 28 * 28; i++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        px[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2 - 1);
    }
    for (int64_t i = 0; i < n; i++) ((int64_t *)kiln_tensor_data(labels))[i] = (i * 7) % 10;
    const struct {
        const char *name;
        kiln_train_options o;
        int states;
    } cases[] = {
        {"adadelta", {.optimizer = KILN_OPTIM_ADADELTA, .lr = 1.0f, .seed = 3}, 2},
        {"sgd momentum, accumulate 2", {.optimizer = KILN_OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f, .accumulate = 2, .seed = 3}, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kiln_model *ma = NULL, *mb = NULL;
        kiln_trainer *a = NULL, *b = NULL;
        kiln_profile p = {0};
        double step_ms = -1;
        kiln_model_mnist_net(ctx, -1, 1, 1, &ma);
        kiln_model_mnist_net(ctx, -1, 1, 1, &mb);
        CHECK(ma && mb && kiln_trainer_create(ma, "loss", &cases[c].o, &a) == KILN_OK &&
                  kiln_trainer_create(mb, "loss", &cases[c].o, &b) == KILN_OK,
              "%s: trainers: %s", cases[c].name, kiln_context_message(ctx));
        if (!a || !b) goto next;
        float la = 0, lb = 0;
        CHECK(kiln_trainer_train_epoch(a, images, labels, batch, 5, 0, 0, 1, &la) == KILN_OK &&
                  kiln_trainer_train_epoch(b, images, labels, batch, 5, 0, 0, 1, &lb) == KILN_OK,
              "%s: first step: %s", cases[c].name, kiln_context_message(ctx));
        kiln_status st = kiln_trainer_profile(a, images, labels, batch, 3, 2, &p, &step_ms);
        CHECK(st == KILN_OK, "%s: profile: %s", cases[c].name, kiln_context_message(ctx));
        if (!st) {
            kiln_plan_stats ps;
            kiln_session_stats(a->sess, &ps); /* the plan just profiled: the session's most recent */
            CHECK(p.n == ps.nodes && p.iters == 3, "%s: one row per run node (%d), the update's among them: %d rows",
                  cases[c].name, ps.nodes, p.n);
            double sum = 0;
            bool ok = true;
            for (int e = 0; e < p.n; e++) {
                sum += p.nodes[e].ms;
                ok = ok && p.nodes[e].ms >= 0 && p.nodes[e].op_type && p.nodes[e].name;
            }
            CHECK(ok, "%s: every row timed and named", cases[c].name);
            CHECK(fabs(sum - p.total_ms) <= 1e-9 * (1 + sum), "%s: total %g is the sum of the rows %g", cases[c].name,
                  p.total_ms, sum);
            const kiln_profile_node *u = NULL; /* the update: a node of the training graph */
            for (int e = 0; e < p.n && !u; e++)
                if (strcmp(p.nodes[e].op_type, "OptimizerStep") == 0) u = &p.nodes[e];
            kiln_train_stats ts;
            kiln_trainer_stats(a, &ts);
            /* weight, gradient and each state read; weight and states written; the step
             * count and the skip flag */
            const double want = 4.0 * (3 + 2 * cases[c].states) * (double)ts.param_count;
            CHECK(u && u->bytes >= want && u->bytes <= want + 64, "%s: update row %s, %g bytes (want %g + counters)",
                  cases[c].name, u ? u->name : "missing", u ? u->bytes : 0.0, want);
            CHECK(step_ms > 0, "%s: a whole step takes time (%g ms)", cases[c].name, step_ms);
        }
        kiln_profile_free(&p);
        CHECK(kiln_trainer_train_epoch(a, images, labels, batch, 5, 0, 1, 2, &la) == KILN_OK &&
                  kiln_trainer_train_epoch(b, images, labels, batch, 5, 0, 1, 2, &lb) == KILN_OK,
              "%s: second step: %s", cases[c].name, kiln_context_message(ctx));
        CHECK(la == lb, "%s: the profiled trainer's next loss %.9g, the twin's %.9g", cases[c].name, la, lb);
        for (int k = 0; k < a->n_params && k < b->n_params; k++) {
            const size_t nb = sizeof(float) * (size_t)a->params[k].numel;
            CHECK(memcmp(a->params[k].value->data, b->params[k].value->data, nb) == 0, "%s: parameter %d differs from the twin's",
                  cases[c].name, k);
            for (int j = 0; j < cases[c].states; j++)
                CHECK(memcmp(a->params[k].state[j], b->params[k].state[j], nb) == 0, "%s: parameter %d's state %d differs",
                      cases[c].name, k, j);
        }
        kiln_train_stats sa, sb;
        kiln_trainer_stats(a, &sa);
        kiln_trainer_stats(b, &sb);
        CHECK(sa.steps == sb.steps && sa.micro_steps == sb.micro_steps && sa.micro_steps == 2,
              "%s: counters %lld/%lld, twin %lld/%lld", cases[c].name, (long long)sa.steps, (long long)sa.micro_steps,
              (long long)sb.steps, (long long)sb.micro_steps);
        if (c == 0) {
            CHECK(kiln_trainer_profile(a, images, labels, batch, 0, 2, &p, &step_ms) == KILN_ERR_INVALID_ARGUMENT,
                  "no passes: refused");
            CHECK(kiln_trainer_profile(a, images, labels, 0, 3, 2, &p, &step_ms) == KILN_ERR_INVALID_ARGUMENT,
                  "batch 0: refused");
            /* a batch over the data set (12 images), refused naming both */
            CHECK(kiln_trainer_profile(a, images, labels, n + 1, 3, 2, &p, &step_ms) == KILN_ERR_INVALID_ARGUMENT &&
                      strstr(kiln_context_message(ctx), "batch of 13 exceeds the data set's 12 samples"),
                  "profile, batch over the data set: %s", kiln_context_message(ctx));
            CHECK(kiln_trainer_train_epoch(a, images, labels, 10000000, 5, 0, 0, 1, &la) == KILN_ERR_INVALID_ARGUMENT &&
                      strstr(kiln_context_message(ctx), "batch of 10000000 exceeds the data set's 12 samples"),
                  "train_epoch, batch over the data set: %s", kiln_context_message(ctx));
            CHECK(kiln_trainer_warmup(a, images, labels, 10000000) == KILN_ERR_INVALID_ARGUMENT &&
                      strstr(kiln_context_message(ctx), "batch of 10000000 exceeds"),
                  "warmup, batch over the data set: %s", kiln_context_message(ctx));
            CHECK(kiln_trainer_profile(a, images, flabels, batch, 3, 2, &p, &step_ms) == KILN_ERR_INVALID_ARGUMENT,
                  "float labels: refused");
            CHECK(kiln_trainer_profile(a, images, labels, batch, 3, 2, &p, NULL) == KILN_ERR_INVALID_ARGUMENT,
                  "no step time: refused");
            CHECK(p.n == 0 && p.nodes == NULL, "a refused profile is empty");
        }
    next:
        kiln_trainer_free(a);
        kiln_trainer_free(b);
        kiln_model_free(ma);
        kiln_model_free(mb);
    }
    kiln_tensor_free(images);
    kiln_tensor_free(labels);
    kiln_tensor_free(flabels);
}

/* ------------------------------------------------- all-or-nothing checkpoint loads */

static void add_init(kiln_model *m, const char *name, int nd, const int64_t *dims, float lo, float hi, uint64_t seed) {
    kiln_tensor *t = NULL;
    if (kiln_tensor_create(m->ctx, KILN_F32, nd, dims, &t)) return;
    float *p = kiln_tensor_data(t);
    uint64_t r = seed * 2654435761u + 1;
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        p[i] = lo + (hi - lo) * (float)((double)(r >> 11) / 9007199254740992.0);
    }
    kiln_model_add_initializer(m, name, t);
    kiln_tensor_free(t);
}

/* x (B,1,4,4) -> Conv w1 (2,1,3,3) pads 1 -> BatchNormalization (running mean/var: trainer
 * states "bn/...") -> Conv w2 (3,2,1,1) -> loss = ReduceSum(y^2). */
static kiln_model *conv_bn_model(kiln_context *ctx) {
    kiln_model *m = NULL;
    kiln_model_create(ctx, &m);
    kiln_model_add_input(m, "x", KILN_F32, 4, (int64_t[]){-1, 1, 4, 4});
    add_init(m, "w1", 4, (int64_t[]){2, 1, 3, 3}, -1, 1, 1);
    add_init(m, "scale", 1, (int64_t[]){2}, 0.5f, 1.5f, 2);
    add_init(m, "bias", 1, (int64_t[]){2}, -0.5f, 0.5f, 3);
    add_init(m, "mean", 1, (int64_t[]){2}, -0.5f, 0.5f, 4);
    add_init(m, "var", 1, (int64_t[]){2}, 0.5f, 2, 5);
    add_init(m, "w2", 4, (int64_t[]){3, 2, 1, 1}, -1, 1, 6);
    kiln_node *n = NULL;
    kiln_model_add_node(m, "Conv", "conv1", 2, (const char *[]){"x", "w1"}, 1, (const char *[]){"c1"}, &n);
    kiln_node_set_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
    kiln_model_add_node(m, "BatchNormalization", "bn1", 5, (const char *[]){"c1", "scale", "bias", "mean", "var"}, 1,
                        (const char *[]){"n1"}, NULL);
    kiln_model_add_node(m, "Conv", "conv2", 2, (const char *[]){"n1", "w2"}, 1, (const char *[]){"y"}, NULL);
    kiln_model_add_node(m, "Mul", "sq", 2, (const char *[]){"y", "y"}, 1, (const char *[]){"y2"}, NULL);
    kiln_model_add_node(m, "ReduceSum", "sum", 1, (const char *[]){"y2"}, 1, (const char *[]){"loss"}, &n);
    kiln_node_set_int(n, "keepdims", 0);
    kiln_model_add_output(m, "loss");
    if (kiln_model_finalize(m)) {
        printf("conv-bn model: %s\n", kiln_context_message(ctx));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

/* Everything a checkpoint load may change, copied: the weights, the optimizer states, the
 * running statistics and the counters. */
typedef struct snapshot {
    int n;
    void *bytes[64];
    size_t nb[64];
    kiln_train_stats stats;
} snapshot;

static void snap(kiln_trainer *t, int ns, snapshot *s) {
    s->n = 0;
    for (int i = 0; i < t->n_params; i++)
        for (int k = -1; k < ns && s->n < 64; k++) {
            size_t nb = sizeof(float) * (size_t)t->params[i].numel;
            s->nb[s->n] = nb;
            s->bytes[s->n] = malloc(nb);
            memcpy(s->bytes[s->n++], k < 0 ? t->params[i].value->data : t->params[i].state[k], nb);
        }
    for (int i = 0; i < t->n_states && s->n < 64; i++) {
        size_t nb = kiln_tensor_nbytes(t->states[i].value);
        s->nb[s->n] = nb;
        s->bytes[s->n] = malloc(nb);
        memcpy(s->bytes[s->n++], t->states[i].value->data, nb);
    }
    kiln_trainer_stats(t, &s->stats);
}

/* 1 when t holds bit for bit what s copied. */
static int same_as(kiln_trainer *t, int ns, const snapshot *s) {
    snapshot now;
    snap(t, ns, &now);
    int same = now.n == s->n && now.stats.steps == s->stats.steps && now.stats.micro_steps == s->stats.micro_steps &&
               now.stats.skipped_steps == s->stats.skipped_steps && now.stats.loss_scale == s->stats.loss_scale &&
               now.stats.lr == s->stats.lr;
    for (int i = 0; i < now.n; i++) {
        same = same && i < s->n && now.nb[i] == s->nb[i] && memcmp(now.bytes[i], s->bytes[i], now.nb[i]) == 0;
        free(now.bytes[i]);
    }
    return same;
}

/* Rewrite checkpoint `from` as `to`: tensor `reshape` stored with other dims of the same
 * element count (or dtype i32 if `as_i32`), tensor `drop` left out, metadata `key` set to
 * `val`. */
static int craft(kiln_context *ctx, const char *from, const char *to, const char *reshape, int as_i32, const char *drop,
                 const char *key, const char *val) {
    kiln_safetensors *s = NULL;
    if (kiln_safetensors_load(ctx, from, &s)) return 1;
    int n = kiln_safetensors_count(s), nm = kiln_safetensors_meta_count(s), k = 0;
    const char *names[64], *keys[16], *vals[16];
    kiln_tensor *views[64] = {0};
    for (int i = 0; i < n && i < 64; i++) {
        const char *name = kiln_safetensors_name(s, i);
        const kiln_tensor *t = kiln_safetensors_tensor(s, i);
        if (drop && strcmp(name, drop) == 0) continue;
        int64_t flat[2] = {1, kiln_tensor_numel(t)};
        int nd = t->ndim;
        const int64_t *dims = t->dims;
        kiln_dtype dt = t->dtype;
        if (reshape && strcmp(name, reshape) == 0) {
            if (as_i32) dt = KILN_I32;
            else if (t->ndim > 1) {
                nd = 1;
                dims = flat + 1;
            } else {
                nd = 2;
                dims = flat;
            }
        }
        names[k] = name;
        kiln_tensor_wrap(ctx, dt, nd, dims, t->data, &views[k++]);
    }
    for (int i = 0; i < nm && i < 16; i++) {
        keys[i] = kiln_safetensors_meta_key(s, i);
        vals[i] = key && strcmp(keys[i], key) == 0 ? val : kiln_safetensors_meta(s, keys[i]);
    }
    kiln_status st = kiln_safetensors_save(ctx, to, k, names, (const kiln_tensor *const *)views, nm, keys, vals);
    for (int i = 0; i < k; i++) kiln_tensor_free(views[i]);
    kiln_safetensors_free(s);
    return st != KILN_OK;
}

/* Rewrite checkpoint `from` as `to` with one more tensor, `extra` (a copy of the first). */
static int craft_extra(kiln_context *ctx, const char *from, const char *to, const char *extra) {
    kiln_safetensors *s = NULL;
    if (kiln_safetensors_load(ctx, from, &s)) return 1;
    int n = kiln_safetensors_count(s), nm = kiln_safetensors_meta_count(s), k = 0;
    const char *names[65], *keys[16], *vals[16];
    kiln_tensor *views[65] = {0};
    for (int i = 0; i < n && i < 64; i++) {
        const kiln_tensor *t = kiln_safetensors_tensor(s, i);
        names[k] = kiln_safetensors_name(s, i);
        kiln_tensor_wrap(ctx, t->dtype, t->ndim, t->dims, t->data, &views[k++]);
    }
    names[k] = extra;
    kiln_tensor_wrap(ctx, views[0]->dtype, views[0]->ndim, views[0]->dims, views[0]->data, &views[k++]);
    for (int i = 0; i < nm && i < 16; i++) {
        keys[i] = kiln_safetensors_meta_key(s, i);
        vals[i] = kiln_safetensors_meta(s, keys[i]);
    }
    kiln_status st = kiln_safetensors_save(ctx, to, k, names, (const kiln_tensor *const *)views, nm < 16 ? nm : 16, keys, vals);
    for (int i = 0; i < k; i++) kiln_tensor_free(views[i]);
    kiln_safetensors_free(s);
    return st != KILN_OK;
}

/* Rewrite checkpoint `from` as `to` as checkpoints were before they recorded the world
 * size and the position in samples: the same tensors, the metadata without those keys. */
static int craft_old(kiln_context *ctx, const char *from, const char *to) {
    kiln_safetensors *s = NULL;
    if (kiln_safetensors_load(ctx, from, &s)) return 1;
    int n = kiln_safetensors_count(s), nm = kiln_safetensors_meta_count(s), k = 0, km = 0;
    const char *names[64], *keys[16], *vals[16];
    kiln_tensor *views[64] = {0};
    for (int i = 0; i < n && i < 64; i++) {
        const kiln_tensor *t = kiln_safetensors_tensor(s, i);
        names[k] = kiln_safetensors_name(s, i);
        kiln_tensor_wrap(ctx, t->dtype, t->ndim, t->dims, t->data, &views[k++]);
    }
    for (int i = 0; i < nm && km < 16; i++) {
        const char *key = kiln_safetensors_meta_key(s, i);
        if (!strcmp(key, "world_size") || !strcmp(key, "sample_in_epoch") || !strcmp(key, "batch_per_rank")) continue;
        keys[km] = key;
        vals[km++] = kiln_safetensors_meta(s, key);
    }
    kiln_status st = kiln_safetensors_save(ctx, to, k, names, (const kiln_tensor *const *)views, km, keys, vals);
    for (int i = 0; i < k; i++) kiln_tensor_free(views[i]);
    kiln_safetensors_free(s);
    return st != KILN_OK;
}

/* kiln_trainer_load of a bad checkpoint fails and leaves the trainer bit for bit as it
 * was: a tensor with the right element count but other dims, restored after others (the
 * last weight, its last optimizer state, a running statistic), another dtype, a missing
 * tensor, and bad metadata (loss scale, negative counters). */
static void test_checkpoint_all_or_nothing(kiln_context *ctx, const char *tmp) {
    kiln_model *m = conv_bn_model(ctx);
    kiln_trainer *t = NULL;
    const kiln_train_options o = {.optimizer = KILN_OPTIM_ADAM, .lr = 0.01f, .seed = 3};
    CHECK(m && kiln_trainer_create(m, "loss", &o, &t) == KILN_OK, "conv-bn trainer: %s", kiln_context_message(ctx));
    kiln_tensor *x = NULL;
    kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){3, 1, 4, 4}, &x);
    if (!t || !x) goto out;
    for (int i = 0; i < 48; i++) ((float *)kiln_tensor_data(x))[i] = (float)((i * 37) % 11) / 5.0f - 1;
    CHECK(t->n_states == 2 && t->n_params >= 4, "conv-bn: %d running statistics, %d weights", t->n_states, t->n_params);
    char good[1024], bad[1024];
    snprintf(good, sizeof good, "%s/aon_good.safetensors", tmp);
    snprintf(bad, sizeof bad, "%s/aon_bad.safetensors", tmp);
    for (int i = 0; i < 2; i++) kiln_trainer_step(t, 1, &x, NULL);
    CHECK(!kiln_trainer_save(t, good, 0, 2), "save: %s", kiln_context_message(ctx));
    kiln_trainer_step(t, 1, &x, NULL); /* the trainer moves on: every tensor now differs from the file's */
    const int ns = 2;
    snapshot before;
    snap(t, ns, &before);
    char last_param[300], last_state[300], last_bn[300], first_param[300];
    const kiln_param *lp = &t->params[t->n_params - 1];
    snprintf(first_param, sizeof first_param, "param/%s", t->fwd->values[t->params[0].fwd_value].name);
    snprintf(last_param, sizeof last_param, "param/%s", t->fwd->values[lp->fwd_value].name);
    snprintf(last_state, sizeof last_state, "state1/%s", t->fwd->values[lp->fwd_value].name);
    snprintf(last_bn, sizeof last_bn, "bn/%s", t->fwd->values[t->states[t->n_states - 1].fwd_value].name);
    const struct {
        const char *what, *reshape, *drop, *key, *val, *msg;
        int as_i32;
    } cases[] = {
        {"last weight reshaped", last_param, NULL, NULL, NULL, last_param, 0},
        {"last optimizer state reshaped", last_state, NULL, NULL, NULL, last_state, 0},
        {"running statistic reshaped", last_bn, NULL, NULL, NULL, last_bn, 0},
        {"running statistic as i32", last_bn, NULL, NULL, NULL, "i32", 1},
        {"running statistic missing", NULL, last_bn, NULL, NULL, last_bn, 0},
        {"first weight reshaped", first_param, NULL, NULL, NULL, first_param, 0},
        {"loss scale not a number", NULL, NULL, "loss_scale", "abc", "loss_scale", 0},
        {"loss scale nan", NULL, NULL, "loss_scale", "nan", "loss_scale", 0},
        {"loss scale inf", NULL, NULL, "loss_scale", "inf", "loss_scale", 0},
        {"loss scale negative", NULL, NULL, "loss_scale", "-2", "loss_scale", 0},
        {"loss scale zero", NULL, NULL, "loss_scale", "0", "loss_scale", 0},
        {"loss scale with trailing text", NULL, NULL, "loss_scale", "1x", "loss_scale", 0},
        {"negative steps", NULL, NULL, "steps", "-1", "steps", 0},
        {"negative micro_steps", NULL, NULL, "micro_steps", "-3", "micro_steps", 0},
        {"negative epoch", NULL, NULL, "epoch", "-1", "epoch", 0},
        {"negative step_in_epoch", NULL, NULL, "step_in_epoch", "-5", "step_in_epoch", 0},
        {"steps out of range", NULL, NULL, "steps", "99999999999999999999", "steps", 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (craft(ctx, good, bad, cases[c].reshape, cases[c].as_i32, cases[c].drop, cases[c].key, cases[c].val)) {
            CHECK(0, "%s: crafting the checkpoint: %s", cases[c].what, kiln_context_message(ctx));
            continue;
        }
        int64_t ep = -7, sie = -7;
        kiln_status st = kiln_trainer_load(t, bad, &ep, &sie);
        const char *msg = kiln_context_message(ctx);
        CHECK(st != KILN_OK && strstr(msg, bad) && strstr(msg, cases[c].msg), "%s: load refused naming the file and '%s': %s (%s)",
              cases[c].what, cases[c].msg, kiln_status_name(st), msg);
        CHECK(ep == -7 && sie == -7, "%s: epoch and step left alone", cases[c].what);
        CHECK(same_as(t, ns, &before), "%s: the trainer's weights, states, statistics and counters changed", cases[c].what);
    }
    /* another model's checkpoint holding every tensor of this one and more (a deeper
     * ResNet's holds a shallower one's): refused, naming the weight or statistic */
    for (int c = 0; c < 2; c++) {
        const char *extra = c ? "bn/layer9.bn.running_mean" : "param/layer9.conv.weight";
        if (craft_extra(ctx, good, bad, extra)) {
            CHECK(0, "crafting a checkpoint with %s: %s", extra, kiln_context_message(ctx));
            continue;
        }
        kiln_status st = kiln_trainer_load(t, bad, NULL, NULL);
        CHECK(st != KILN_OK && strstr(kiln_context_message(ctx), extra + (c ? 3 : 6)) &&
                  strstr(kiln_context_message(ctx), "another model"),
              "a checkpoint with %s: %s (%s)", extra, kiln_status_name(st), kiln_context_message(ctx));
        CHECK(same_as(t, ns, &before), "a checkpoint with %s: the trainer changed", extra);
    }
    /* the message of a reshaped tensor gives both shapes */
    if (!craft(ctx, good, bad, last_param, 0, NULL, NULL, NULL)) {
        CHECK(kiln_trainer_load(t, bad, NULL, NULL) == KILN_ERR_SHAPE, "reshaped: a shape error");
        char want[96];
        kiln_shape_str(lp->value, want, sizeof want);
        CHECK(strstr(kiln_context_message(ctx), want) != NULL, "reshaped: the message gives the trainer's shape %s: %s", want,
              kiln_context_message(ctx));
    }
    /* and the good file still loads, changing the trainer back to step 2 */
    int64_t ep = -1, sie = -1;
    CHECK(!kiln_trainer_load(t, good, &ep, &sie) && ep == 0 && sie == 2, "good checkpoint: %s", kiln_context_message(ctx));
    CHECK(!same_as(t, ns, &before), "the good checkpoint's load changed the trainer");
    /* the position: in samples when saved with it; a checkpoint from before those fields
     * loads with its step alone */
    {
        const kiln_train_position at = {.epoch = 1, .sample = 96, .step_in_epoch = 3, .world_size = 2, .batch = 16};
        kiln_train_position got = {0};
        CHECK(!kiln_trainer_save_position(t, bad, &at) && !kiln_trainer_load_position(t, bad, &got) && got.epoch == 1 &&
                  got.sample == 96 && got.step_in_epoch == 3 && got.world_size == 2 && got.batch == 16,
              "position saved and loaded: %s (epoch %lld sample %lld step %lld, %lld x %lld)", kiln_context_message(ctx),
              (long long)got.epoch, (long long)got.sample, (long long)got.step_in_epoch, (long long)got.world_size,
              (long long)got.batch);
        char old[1100];
        snprintf(old, sizeof old, "%s.old", bad);
        got = (kiln_train_position){0};
        CHECK(!craft_old(ctx, bad, old) && !kiln_trainer_load_position(t, old, &got) && got.epoch == 1 &&
                  got.sample == -1 && got.step_in_epoch == 3 && got.world_size == 0 && got.batch == 0,
              "an older checkpoint: %s (sample %lld, world size %lld)", kiln_context_message(ctx), (long long)got.sample,
              (long long)got.world_size);
        remove(old);
    }
    for (int i = 0; i < before.n; i++) free(before.bytes[i]);
    remove(good);
    remove(bad);
out:
    kiln_tensor_free(x);
    kiln_trainer_free(t);
    kiln_model_free(m);
}

/* ---------------------------------------------------------------- mnist-net */

static int train_steps(kiln_trainer *t, kiln_loader *l, int n, float *losses) {
    for (int i = 0; i < n; i++) {
        const kiln_batch *b = NULL;
        if (kiln_loader_next(l, &b)) return 1;
        kiln_tensor *in[2] = {b->x, b->y};
        kiln_status st = kiln_trainer_step(t, 2, in, losses ? &losses[i] : NULL);
        kiln_loader_release(l, b);
        if (st) return 1;
    }
    return 0;
}

static double accuracy(kiln_context *ctx, kiln_trainer *t, const kiln_mnist *d, int64_t n) {
    kiln_model *m = NULL;
    kiln_session *s = NULL;
    kiln_tensor *x = NULL;
    const kiln_tensor *y = NULL;
    double acc = -1;
    if (!kiln_trainer_export(t, "logprobs", &m) && !kiln_session_create(m, NULL, &s) &&
        !kiln_tensor_wrap(ctx, KILN_F32, 4, (int64_t[]){n, 1, 28, 28}, d->test_images->data, &x) &&
        !kiln_session_run(s, 1, &x, 1, &y)) {
        const float *p = y->data;
        const int64_t *lab = d->test_labels->data;
        int64_t ok = 0;
        for (int64_t i = 0; i < n; i++) {
            int best = 0;
            for (int c = 1; c < 10; c++)
                if (p[i * 10 + c] > p[i * 10 + best]) best = c;
            ok += best == lab[i];
        }
        acc = (double)ok / (double)n;
    }
    kiln_tensor_free(x);
    kiln_session_free(s);
    kiln_model_free(m);
    return acc;
}

static volatile int pause_now;
static int pause_fd = -1;
/* In the child: tell the parent the save is under way, then wait to be killed. */
static void slow_save_hook(size_t done, size_t total) {
    if (done * 2 < total || pause_now) return;
    pause_now = 1;
    if (write(pause_fd, "x", 1) != 1) _exit(3);
    for (;;) pause();
}

static void test_mnist(kiln_context *ctx, const char *tmp, const char *data) {
    kiln_mnist d = {0};
    if (kiln_mnist_load(ctx, data, KILN_F32, KILN_FASHION_MNIST_MEAN, KILN_FASHION_MNIST_STD, &d)) {
        printf("SKIP mnist-net: %s\n", kiln_context_message(ctx));
        return;
    }
    const int steps = 120;
    kiln_loader_options lo = kiln_loader_options_default();
    lo.seed = 5;
    kiln_loader *l = NULL;
    kiln_model *m = NULL;
    kiln_trainer *t = NULL, *t2 = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_ADADELTA, .lr = 1.0f, .seed = 7};
    float losses[120];
    char ck[1024];
    snprintf(ck, sizeof ck, "%s/mnist.safetensors", tmp);
    CHECK(!kiln_loader_create(ctx, d.train_images, d.train_labels, &lo, &l), "loader: %s", kiln_context_message(ctx));
    CHECK(!kiln_model_mnist_net(ctx, -1, 3, 1, &m) && !kiln_trainer_create(m, "loss", &o, &t), "mnist-net: %s",
          kiln_context_message(ctx));
    if (!l || !t) goto out;
    CHECK(!train_steps(t, l, 60, losses), "train: %s", kiln_context_message(ctx));
    CHECK(!kiln_trainer_save(t, ck, 0, 60), "save: %s", kiln_context_message(ctx));
    CHECK(!train_steps(t, l, steps - 60, losses + 60), "train: %s", kiln_context_message(ctx));
    double first = 0, last = 0;
    for (int i = 0; i < 20; i++) {
        first += losses[i] / 20;
        last += losses[steps - 20 + i] / 20;
    }
    CHECK(last < 0.6 * first, "mnist-net learns: mean loss of the first 20 steps %.3f, of the last 20 %.3f", first, last);
    double acc = accuracy(ctx, t, &d, 2000);
    printf("     mnist-net after %d steps: loss %.3f -> %.3f, test accuracy on 2000 images %.4f\n", steps, first, last, acc);
    CHECK(acc > 0.6, "test accuracy %.4f after %d steps", acc, steps);

    /* Resume from the step-60 checkpoint: the next 60 losses repeat exactly (same weights,
     * optimizer state, dropout seeds, batches). */
    int64_t ep = -1, st = -1;
    kiln_loader_free(l);
    l = NULL;
    CHECK(!kiln_loader_create(ctx, d.train_images, d.train_labels, &lo, &l), "loader");
    CHECK(!kiln_trainer_create(m, "loss", &o, &t2), "second trainer");
    CHECK(t2 && !kiln_trainer_load(t2, ck, &ep, &st) && ep == 0 && st == 60, "load: %s", kiln_context_message(ctx));
    if (t2 && l && !kiln_loader_seek(l, ep, st)) {
        float again[60];
        CHECK(!train_steps(t2, l, 60, again), "resumed training");
        double worst = 0;
        for (int i = 0; i < 60; i++) worst = fmax(worst, fabs(again[i] - losses[60 + i]));
        CHECK(worst <= 1e-5, "resumed losses differ from the uninterrupted run by up to %g", worst);
    }

    /* kiln_trainer_train_epoch gathers the same batches as the loader: from the step-60
     * checkpoint its next 10 steps end on the same loss as the loader-driven run. */
    kiln_trainer *t4 = NULL;
    float last4 = -1;
    CHECK(!kiln_trainer_create(m, "loss", &o, &t4) && !kiln_trainer_load(t4, ck, &ep, &st), "fourth trainer");
    CHECK(t4 && !kiln_trainer_train_epoch(t4, d.train_images, d.train_labels, 64, lo.seed, 0, 60, 70, &last4),
          "train_epoch: %s", kiln_context_message(ctx));
    CHECK(fabsf(last4 - losses[69]) <= 1e-5f, "train_epoch step 69 loss %.7g, loader-driven %.7g", last4, losses[69]);
    kiln_trainer_free(t4);

    /* Mixed precision: fp16 with dynamic loss scaling and bf16 train the same network. */
    for (int amp = KILN_AMP_FP16; amp <= KILN_AMP_BF16; amp++) {
        kiln_train_options oa = o;
        oa.amp = (kiln_amp)amp;
        kiln_trainer *ta = NULL;
        float la[40];
        CHECK(!kiln_trainer_create(m, "loss", &oa, &ta), "amp %d trainer: %s", amp, kiln_context_message(ctx));
        if (!ta) continue;
        CHECK(!kiln_loader_seek(l, 0, 0) && !train_steps(ta, l, 40, la), "amp %d training: %s", amp, kiln_context_message(ctx));
        double a0 = 0, a1 = 0;
        for (int i = 0; i < 10; i++) {
            a0 += la[i] / 10;
            a1 += la[30 + i] / 10;
        }
        kiln_train_stats ts;
        kiln_trainer_stats(ta, &ts);
        printf("     amp %s: loss %.3f -> %.3f, %lld steps taken, %lld skipped, loss scale %g\n", amp == KILN_AMP_FP16 ? "fp16" : "bf16",
               a0, a1, (long long)ts.steps, (long long)ts.skipped_steps, ts.loss_scale);
        CHECK(a1 < 0.8 * a0, "amp %d learns: %.3f -> %.3f", amp, a0, a1);
        CHECK(ts.steps + ts.skipped_steps == 40 && ts.skipped_steps < 10, "amp %d: %lld steps, %lld skipped", amp,
              (long long)ts.steps, (long long)ts.skipped_steps);
        CHECK(amp == KILN_AMP_BF16 ? ts.loss_scale == 1.0f : ts.loss_scale <= 65536.0f, "amp %d loss scale %g", amp, ts.loss_scale);
        kiln_trainer_free(ta);
    }

    /* A save killed halfway leaves the previous checkpoint loadable and unchanged. */
    int fd[2];
    CHECK(pipe(fd) == 0, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        pause_fd = fd[1];
        kiln_safetensors_write_hook = slow_save_hook;
        kiln_trainer_save(t, ck, 0, 120); /* t has moved on: different weights */
        _exit(4);                         /* not reached: killed inside the save */
    }
    close(fd[1]);
    char c;
    CHECK(pid > 0 && read(fd[0], &c, 1) == 1, "child reached the middle of its save");
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fd[0]);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child was killed mid-save");
    kiln_trainer *t3 = NULL;
    CHECK(!kiln_trainer_create(m, "loss", &o, &t3), "third trainer");
    CHECK(t3 && !kiln_trainer_load(t3, ck, &ep, &st) && st == 60,
          "the checkpoint saved before the killed save still loads, at step %lld: %s", (long long)st, kiln_context_message(ctx));
    kiln_trainer_free(t3);
out:
    kiln_trainer_free(t);
    kiln_trainer_free(t2);
    kiln_model_free(m);
    kiln_loader_free(l);
    kiln_mnist_free(&d);
}

int main(int argc, char **argv) {
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return 1;
    /* test_train TMP: the units; test_train TMP FASHION_MNIST_DIR: the mnist-net run alone
     * (its own ctest entry, train_mnist, so the sanitizer pass can leave it to the plain one). */
    const char *tmp = argc > 1 ? argv[1] : "/tmp";
    if (argc > 2) {
        test_mnist(ctx, tmp, argv[2]);
    } else {
        test_optimizers(ctx);
        test_accumulation(ctx);
        test_profile(ctx);
        test_checkpoint_all_or_nothing(ctx, tmp);
    }
    kiln_context_free(ctx);
    printf("%s: %d failed checks\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
