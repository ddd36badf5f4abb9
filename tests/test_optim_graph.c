/* test_optim_graph.c — the optimizer update as graph nodes (src/train/optim_graph.c and
 * the ops kiln.OptimizerStep / NonFiniteCheck / LossScaleUpdate) against the trainer's CPU
 * loop, bit for bit:
 *   1. kiln.OptimizerStep on random data, out of place and in place, against
 *      kiln_optimizer_update (tests/optim_reference.h) for every optimizer, schedules and unscaling;
 *   2. a small model trained for several steps: the trainer (kiln_trainer_step) and a
 *      training graph built with autograd + kiln_optim_graph_append run through a session
 *      end with the same weights, optimizer states and losses, with fp32 and with fp16
 *      loss scaling (steps skipped on overflow, the scale backing off) and with gradient
 *      accumulation;
 *   3. the update lowered (kiln_train_lower_update: the graph the CUDA engine plans, its
 *      fused tail doing the update): its gradients through GradScaler's unscaling and the
 *      frozen kiln_optimizer_update give the trainer's step bit for bit, fp32 / fp16 / bf16,
 *      and an overflowing fp16 step is skipped. */
#include "core/internal.h"
#include "core/optest.h"
#include "passes/passes.h"
#include "train/autograd.h"
#include "train/optim_graph.h"
#include "train/trainer_internal.h"
#include "optim_reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
#include "check.h"

static uint64_t rng = 0x243F6A8885A308D3ull;
static float frand(float lo, float hi) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((rng >> 40) / 16777216.0);
}

static const char *opt_label(const kiln_train_options *o) {
    static char buf[160];
    snprintf(buf, sizeof buf, "%s mom %g nesterov %d wd %g schedule %d warmup %lld", kiln_optimizer_name(o->optimizer),
             o->momentum, o->nesterov, o->weight_decay, (int)o->schedule, (long long)o->warmup_steps);
    return buf;
}

/* ------------------------------------------------------------ 1. the op alone */

#define NP 3
static void op_vs_loop(const kiln_train_options *o, bool unscale) {
    kiln_context *ctx = NULL;
    kiln_context_create(&ctx);
    const int64_t sizes[NP] = {37, 64, 5};
    const int ns = o->optimizer == KILN_OPTIM_SGD ? (o->momentum != 0) : 2;
    kiln_param ps[NP];
    memset(ps, 0, sizeof ps);
    /* the op's tensors: [step, found, inv, params, grads, states] and a second set updated in place */
    const int n_in = 3 + NP * (2 + ns), n_out = 1 + NP * (1 + ns);
    kiln_tensor *in[3 + NP * 4] = {0}, *inplace[3 + NP * 4] = {0};
    float *g_ref[NP];
    in[0] = kt_scalar(KILN_I64, 0);
    inplace[0] = kt_scalar(KILN_I64, 0);
    if (unscale) {
        in[2] = kt_scalar(KILN_F32, 1.0 / 1024);
        inplace[2] = kt_scalar(KILN_F32, 1.0 / 1024);
    }
    for (int k = 0; k < NP; k++) {
        ps[k].value = kiln_tensor_new(ctx, KILN_F32, 1, &sizes[k]);
        ps[k].numel = sizes[k];
        g_ref[k] = calloc((size_t)sizes[k], sizeof(float));
        for (int j = 0; j < ns; j++) ps[k].state[j] = calloc((size_t)sizes[k], sizeof(float));
        in[3 + k] = kiln_tensor_new(ctx, KILN_F32, 1, &sizes[k]);
        in[3 + NP + k] = kiln_tensor_new(ctx, KILN_F32, 1, &sizes[k]);
        for (int j = 0; j < ns; j++) in[3 + 2 * NP + k * ns + j] = kiln_tensor_new(ctx, KILN_F32, 1, &sizes[k]);
        for (int64_t i = 0; i < sizes[k]; i++) ((float *)ps[k].value->data)[i] = frand(-1, 1);
        memcpy(in[3 + k]->data, ps[k].value->data, kiln_tensor_nbytes(ps[k].value));
    }
    for (int i = 1; i < n_in; i++)
        if (in[i] && !inplace[i]) inplace[i] = kiln_tensor_clone(ctx, in[i]);
    kiln_attr *attrs = NULL;
    int n_attrs = 0;
    CHECK(kiln_optim_step_attrs(ctx, o, NP, &attrs, &n_attrs) == KILN_OK, "attributes");
    kiln_node node = {.op_type = "OptimizerStep", .name = "step", .domain = "kiln", .opset = 1,
                      .op = kiln_op_index_domain("kiln", "OptimizerStep"), .n_in = n_in, .n_out = n_out,
                      .n_attrs = n_attrs, .attrs = attrs};
    const kiln_op_def *def = kiln_op_get(node.op);
    bool same = true;
    for (int64_t step = 0; step < 6 && def; step++) {
        for (int k = 0; k < NP; k++)
            for (int64_t i = 0; i < sizes[k]; i++) {
                /* gradients of all magnitudes, a few exactly 0 */
                float g = (i % 11 == 3) ? 0.f : frand(-1, 1) * (i % 3 == 0 ? 1e-3f : 1.f);
                if (unscale) g *= 1024; /* scaled by the loss scale */
                ((float *)in[3 + NP + k]->data)[i] = g;
                ((float *)inplace[3 + NP + k]->data)[i] = g;
                g_ref[k][i] = unscale ? g * (1.0f / 1024.0f) : g; /* as grad_scaler_unscale */
            }
        for (int k = 0; k < NP; k++) ps[k].grad = g_ref[k];
        kiln_optimizer_update(o, step, kiln_trainer_lr_at(o, step), NP, ps);
        /* out of place through kiln_op_eval */
        kiln_tensor *out[1 + NP * 3] = {0};
        kiln_status st = kiln_op_eval(ctx, &node, n_in, in, n_out, out);
        CHECK(st == KILN_OK, "OptimizerStep (%s): %s", opt_label(o), kiln_context_message(ctx));
        if (st) break;
        /* in place: outputs are the inputs' tensors */
        kiln_tensor *io[1 + NP * 3];
        io[0] = inplace[0];
        for (int k = 0; k < NP * (1 + ns); k++) io[1 + k] = inplace[3 + (k < NP ? k : NP + k)];
        kiln_op_ctx c = {.kctx = ctx, .node = &node, .n_in = n_in, .in = inplace, .n_out = n_out, .out = io};
        CHECK(def->cpu_forward(&c) == KILN_OK, "in place: %s", kiln_context_message(ctx));
        CHECK(((int64_t *)out[0]->data)[0] == step + 1 && ((int64_t *)inplace[0]->data)[0] == step + 1,
              "the step count moves");
        for (int k = 0; k < NP; k++) {
            const size_t nb = kiln_tensor_nbytes(ps[k].value);
            same &= memcmp(out[1 + k]->data, ps[k].value->data, nb) == 0;
            same &= memcmp(inplace[3 + k]->data, ps[k].value->data, nb) == 0;
            for (int j = 0; j < ns; j++) {
                same &= memcmp(out[1 + NP + k * ns + j]->data, ps[k].state[j], nb) == 0;
                same &= memcmp(inplace[3 + 2 * NP + k * ns + j]->data, ps[k].state[j], nb) == 0;
            }
        }
        /* the next step reads this one's outputs */
        kiln_tensor_free(in[0]);
        in[0] = out[0];
        out[0] = NULL;
        for (int k = 0; k < NP * (1 + ns); k++) {
            const int i = 3 + (k < NP ? k : NP + k);
            kiln_tensor_free(in[i]);
            in[i] = out[1 + k];
            out[1 + k] = NULL;
        }
    }
    CHECK(same && def, "OptimizerStep (%s%s): weights and states differ from kiln_optimizer_update's bits",
          opt_label(o), unscale ? ", unscaled" : "");
    if (same) printf("ok   OptimizerStep = kiln_optimizer_update bit for bit, 6 steps: %s%s\n", opt_label(o),
                     unscale ? ", unscaled" : "");
    for (int a = 0; a < n_attrs; a++) kiln_attr_clear(&attrs[a]);
    free(attrs);
    for (int i = 0; i < n_in; i++) {
        kiln_tensor_free(in[i]);
        kiln_tensor_free(inplace[i]);
    }
    for (int k = 0; k < NP; k++) {
        kiln_tensor_free(ps[k].value);
        free(ps[k].state[0]);
        free(ps[k].state[1]);
        free(g_ref[k]);
    }
    kiln_context_free(ctx);
}

/* ------------------------------------ 1b. large-batch options against the reference
 * kiln.OptimizerStep with LARS, LAMB, no weight decay on 1-D parameters and gradient
 * clipping, 6 steps from random weights and gradients, against kiln_reference_update
 * (tests/optim_reference.h: the formulas written out independently, norms in double):
 * within 2e-6 relative of the weights and states (the two round differently). */
static kiln_model *mlp(kiln_context *ctx);

#define NQ 4
static void op_vs_reference(const kiln_train_options *o, bool unscale, bool no_decay_on) {
    kiln_context *ctx = NULL;
    kiln_context_create(&ctx);
    /* a 2-D weight, a bias, a 4-D conv weight, a BN scale */
    const int nds[NQ] = {2, 1, 4, 1};
    const int64_t dims[NQ][4] = {{6, 7}, {64}, {3, 2, 3, 3}, {5}};
    const int ns = kiln_optimizer_states(o);
    kiln_param ps[NQ];
    memset(ps, 0, sizeof ps);
    const int n_in = 3 + NQ * (2 + ns), n_out = 1 + NQ * (1 + ns);
    kiln_tensor *in[3 + NQ * 4] = {0};
    float *g_ref[NQ];
    bool nd[NQ];
    int64_t nd_flags[NQ];
    in[0] = kt_scalar(KILN_I64, 0);
    if (unscale) in[2] = kt_scalar(KILN_F32, 1.0 / 1024);
    for (int k = 0; k < NQ; k++) {
        ps[k].value = kiln_tensor_new(ctx, KILN_F32, nds[k], dims[k]);
        ps[k].numel = kiln_tensor_numel(ps[k].value);
        nd[k] = no_decay_on && nds[k] <= 1;
        nd_flags[k] = nd[k];
        g_ref[k] = calloc((size_t)ps[k].numel, sizeof(float));
        for (int j = 0; j < ns; j++) ps[k].state[j] = calloc((size_t)ps[k].numel, sizeof(float));
        in[3 + k] = kiln_tensor_new(ctx, KILN_F32, nds[k], dims[k]);
        in[3 + NQ + k] = kiln_tensor_new(ctx, KILN_F32, nds[k], dims[k]);
        for (int j = 0; j < ns; j++) in[3 + 2 * NQ + k * ns + j] = kiln_tensor_new(ctx, KILN_F32, nds[k], dims[k]);
        for (int64_t i = 0; i < ps[k].numel; i++) ((float *)ps[k].value->data)[i] = frand(-1, 1) * (k == 3 ? 1 : 0.2f);
        memcpy(in[3 + k]->data, ps[k].value->data, kiln_tensor_nbytes(ps[k].value));
    }
    kiln_attr *attrs = NULL;
    int n_attrs = 0;
    CHECK(kiln_optim_step_attrs_nd(ctx, o, NQ, no_decay_on ? nd_flags : NULL, &attrs, &n_attrs) == KILN_OK,
          "attributes");
    kiln_node node = {.op_type = "OptimizerStep", .name = "step", .domain = "kiln", .opset = 1,
                      .op = kiln_op_index_domain("kiln", "OptimizerStep"), .n_in = n_in, .n_out = n_out,
                      .n_attrs = n_attrs, .attrs = attrs};
    double worst = 0;
    bool ok = true;
    for (int64_t step = 0; step < 6 && ok; step++) {
        for (int k = 0; k < NQ; k++)
            for (int64_t i = 0; i < ps[k].numel; i++) {
                float g = (i % 11 == 3) ? 0.f : frand(-1, 1) * (i % 3 == 0 ? 1e-2f : 1.f);
                if (unscale) g *= 1024;
                ((float *)in[3 + NQ + k]->data)[i] = g;
                g_ref[k][i] = unscale ? g * (1.0f / 1024.0f) : g;
            }
        for (int k = 0; k < NQ; k++) ps[k].grad = g_ref[k];
        kiln_reference_update(o, step, kiln_trainer_lr_at(o, step), NQ, ps, nd);
        kiln_tensor *out[1 + NQ * 3] = {0};
        kiln_status st = kiln_op_eval(ctx, &node, n_in, in, n_out, out);
        CHECK(st == KILN_OK, "OptimizerStep (%s): %s", opt_label(o), kiln_context_message(ctx));
        if (st) {
            ok = false;
            break;
        }
        for (int k = 0; k < NQ; k++)
            for (int j = -1; j < ns; j++) {
                const float *got = out[j < 0 ? 1 + k : 1 + NQ + k * ns + j]->data;
                const float *want = j < 0 ? ps[k].value->data : ps[k].state[j];
                for (int64_t i = 0; i < ps[k].numel; i++) {
                    const double err = fabs((double)got[i] - want[i]), budget = 1e-7 + 2e-6 * fabs(want[i]);
                    if (!(err <= budget)) {
                        CHECK(false, "%s clip %g%s%s: step %lld tensor %d %s[%lld] = %.9g, reference %.9g",
                              opt_label(o), o->clip_grad_norm, unscale ? ", unscaled" : "",
                              no_decay_on ? ", no decay on 1-D" : "", (long long)step, k, j < 0 ? "w" : "state",
                              (long long)i, got[i], want[i]);
                        ok = false;
                        break;
                    }
                    if (err / budget > worst) worst = err / budget;
                }
            }
        kiln_tensor_free(in[0]);
        in[0] = out[0];
        out[0] = NULL;
        for (int k = 0; k < NQ * (1 + ns); k++) {
            const int i = 3 + (k < NQ ? k : NQ + k);
            kiln_tensor_free(in[i]);
            in[i] = out[1 + k];
            out[1 + k] = NULL;
        }
        for (int k = 0; k < 1 + NQ * 3; k++) kiln_tensor_free(out[k]);
    }
    if (ok)
        printf("ok   OptimizerStep = reference formulas, 6 steps: %s clip %g%s%s (%.0f%% of the budget)\n",
               opt_label(o), o->clip_grad_norm, unscale ? ", unscaled" : "", no_decay_on ? ", no decay on 1-D" : "",
               100 * worst);
    for (int a = 0; a < n_attrs; a++) kiln_attr_clear(&attrs[a]);
    free(attrs);
    for (int i = 0; i < n_in; i++) kiln_tensor_free(in[i]);
    for (int k = 0; k < NQ; k++) {
        kiln_tensor_free(ps[k].value);
        free(ps[k].state[0]);
        free(ps[k].state[1]);
        free(g_ref[k]);
    }
    kiln_context_free(ctx);
}

/* The learning-rate schedules (kiln_trainer_lr_at: the formula the op and the CUDA step
 * end share) against sequences written out here: linear warm-up, then constant, step,
 * cosine or poly. */
static void schedules(void) {
    const double pi = 3.14159265358979323846;
    struct {
        kiln_train_options o;
        double want[12];
        const char *label;
    } cases[] = {
        /* warm-up 4 then constant 0.4: 0.1 0.2 0.3 0.4 0.4 ... */
        {{.lr = 0.4f, .warmup_steps = 4}, {0.1, 0.2, 0.3, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4},
         "warm-up 4, constant"},
        /* step: 1 * 0.5^floor(s / 3), warm-up 2 scaling steps 0 and 1 */
        {{.lr = 1.0f, .schedule = KILN_SCHEDULE_STEP, .step_size = 3, .gamma = 0.5f, .warmup_steps = 2},
         {0.5, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125, 0.125}, "warm-up 2, step 3 x 0.5"},
        /* poly (power 2) over the 8 steps after a warm-up of 2, 0 from step 10 on */
        {{.lr = 2.0f, .schedule = KILN_SCHEDULE_POLY, .total_steps = 10, .warmup_steps = 2},
         {1, 2, 2, 2 * 0.875 * 0.875, 2 * 0.75 * 0.75, 2 * 0.625 * 0.625, 2 * 0.25, 2 * 0.375 * 0.375,
          2 * 0.0625, 2 * 0.125 * 0.125, 0, 0},
         "warm-up 2, poly to 10"},
        {{.lr = 2.0f, .schedule = KILN_SCHEDULE_POLY, .total_steps = 4},
         {2, 2 * 0.5625, 2 * 0.25, 2 * 0.0625, 0, 0, 0, 0, 0, 0, 0, 0}, "poly to 4, no warm-up"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        bool ok = true;
        for (int s = 0; s < 12; s++) {
            const double got = kiln_trainer_lr_at(&cases[c].o, s), want = cases[c].want[s];
            if (!(fabs(got - want) <= 1e-6 * fabs(want) + 1e-9)) {
                CHECK(false, "schedule %s: step %d lr %.9g, want %.9g", cases[c].label, s, got, want);
                ok = false;
            }
        }
        if (ok) printf("ok   schedule %s: 12 steps as written out\n", cases[c].label);
    }
    /* cosine over 10 steps after... counting from 0, warm-up 3 scaling its first values */
    kiln_train_options o = {.lr = 0.5f, .schedule = KILN_SCHEDULE_COSINE, .total_steps = 10, .warmup_steps = 3};
    bool ok = true;
    for (int s = 0; s < 14; s++) {
        double want = 0.5 * 0.5 * (1 + cos(pi * (s < 10 ? s : 10) / 10.0));
        if (s < 3) want *= (s + 1) / 3.0;
        const double got = kiln_trainer_lr_at(&o, s);
        if (!(fabs(got - want) <= 1e-6 * fabs(want) + 1e-9)) {
            CHECK(false, "cosine: step %d lr %.9g, want %.9g", s, got, want);
            ok = false;
        }
    }
    if (ok) printf("ok   schedule warm-up 3, cosine over 10: 14 steps\n");
    /* the poly schedule with total_steps <= warmup_steps is refused */
    kiln_context *ctx = NULL;
    kiln_context_create(&ctx);
    kiln_model *fwd = mlp(ctx);
    kiln_trainer *t = NULL;
    kiln_train_options bad = {.device = KILN_DEVICE_CPU, .schedule = KILN_SCHEDULE_POLY, .total_steps = 3,
                              .warmup_steps = 3};
    const kiln_status st = fwd ? kiln_trainer_create(fwd, "loss", &bad, &t) : KILN_ERR_INTERNAL;
    CHECK(st == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_context_message(ctx), "poly"),
          "poly with total_steps <= warmup_steps: status %d, '%s'", (int)st, kiln_context_message(ctx));
    kiln_trainer_free(t);
    kiln_model_free(fwd);
    kiln_context_free(ctx);
}

/* no_decay_bn_bias reaches the update node: exactly the 1-D parameters (the biases) carry
 * no_decay = 1, and without the option the node has no such attribute. */
static void no_decay_selection(void) {
    for (int on = 0; on < 2; on++) {
        kiln_context *ctx = NULL;
        kiln_context_create(&ctx);
        kiln_model *fwd = mlp(ctx);
        kiln_trainer *t = NULL;
        kiln_train_options o = {.device = KILN_DEVICE_CPU, .optimizer = KILN_OPTIM_LARS, .momentum = 0.9f,
                                .weight_decay = 1e-4f, .no_decay_bn_bias = on};
        kiln_status st = fwd ? kiln_trainer_create(fwd, "loss", &o, &t) : KILN_ERR_INTERNAL;
        CHECK(st == KILN_OK, "LARS trainer: %s", kiln_context_message(ctx));
        const kiln_node *upd = NULL;
        for (int i = 0; t && i < t->train->n_nodes; i++)
            if (strcmp(t->train->nodes[i].op_type, "OptimizerStep") == 0) upd = &t->train->nodes[i];
        CHECK(upd != NULL, "no OptimizerStep node in the training graph");
        if (upd) {
            int count = 0;
            const int64_t *f = kiln_attr_ints(upd, "no_decay", &count);
            const int n = (int)kiln_attr_int(upd, "n", 0);
            bool ok = on ? f && count == n : f == NULL;
            for (int k = 0; ok && on && k < n; k++) {
                const kiln_value *p = &t->train->values[upd->in[3 + k]];
                ok = f[k] == (p->ndim <= 1);
            }
            CHECK(ok, "no_decay_bn_bias=%d: the update's no_decay attribute does not mark exactly the 1-D parameters",
                  on);
            if (ok) printf("ok   no_decay_bn_bias=%d: the update's no_decay marks exactly the 1-D parameters\n", on);
        }
        kiln_trainer_free(t);
        kiln_model_free(fwd);
        kiln_context_free(ctx);
    }
}

/* ------------------------------------------------- 2. a model, trainer vs graph */

/* x (B,6) -> Gemm(W1 (8,6), b1) -> Relu -> Gemm(W2 (3,8), b2) -> LogSoftmax -> NLL(y) */
static kiln_model *mlp(kiln_context *ctx) {
    kiln_model *m = NULL;
    kiln_model_create(ctx, &m);
    kiln_model_add_input(m, "x", KILN_F32, 2, (int64_t[]){-1, 6});
    kiln_model_add_input(m, "y", KILN_I64, 1, (int64_t[]){-1});
    const char *names[4] = {"W1", "b1", "W2", "b2"};
    const int64_t dims[4][2] = {{8, 6}, {8, 0}, {3, 8}, {3, 0}};
    for (int k = 0; k < 4; k++) {
        const int nd = dims[k][1] ? 2 : 1;
        kiln_tensor *t = NULL;
        kiln_tensor_create(ctx, KILN_F32, nd, dims[k], &t);
        for (int64_t i = 0; i < kiln_tensor_numel(t); i++) ((float *)t->data)[i] = frand(-0.5f, 0.5f);
        kiln_model_add_initializer(m, names[k], t);
        kiln_tensor_free(t);
    }
    kiln_node *n = NULL;
    kiln_model_add_node(m, "Gemm", "fc1", 3, (const char *[]){"x", "W1", "b1"}, 1, (const char *[]){"h"}, &n);
    kiln_node_set_int(n, "transB", 1);
    kiln_model_add_node(m, "Relu", "relu", 1, (const char *[]){"h"}, 1, (const char *[]){"r"}, NULL);
    kiln_model_add_node(m, "Gemm", "fc2", 3, (const char *[]){"r", "W2", "b2"}, 1, (const char *[]){"z"}, &n);
    kiln_node_set_int(n, "transB", 1);
    kiln_model_add_node(m, "LogSoftmax", "lsm", 1, (const char *[]){"z"}, 1, (const char *[]){"logp"}, &n);
    kiln_node_set_int(n, "axis", 1);
    kiln_model_add_node(m, "NegativeLogLikelihoodLoss", "nll", 2, (const char *[]){"logp", "y"}, 1,
                        (const char *[]){"loss"}, NULL);
    kiln_model_add_output(m, "loss");
    if (kiln_model_finalize(m)) {
        printf("FAIL mlp: %s\n", kiln_context_message(ctx));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

/* The training graph the trainer's parameters describe, with the update as nodes. */
typedef struct graph_trainer {
    kiln_model *m;
    kiln_session *s;
    kiln_optim_graph g;
    int n_params;
    int *params;
    kiln_tensor **bound;  /* (n_values) the tensor fed to each graph input */
    kiln_tensor **feeds;  /* (n_inputs) */
    int *back;            /* (n_outputs) output j is copied into bound[back[j]] (-1: none) */
    int n_outputs;
    int n_next;           /* outputs 1 .. n_next are next values */
    int inplace;          /* of those, computed in the bound input's own buffer by the last run */
} graph_trainer;

static void graph_trainer_free(graph_trainer *gt) {
    for (int v = 0; gt->m && gt->bound && v < gt->m->n_values; v++) {
        bool data = false;
        for (int i = 0; i < 2; i++) data |= gt->m->inputs[i] == v;
        if (!data) kiln_tensor_free(gt->bound[v]);
    }
    kiln_session_free(gt->s);
    kiln_optim_graph_clear(&gt->g);
    kiln_model_free(gt->m);
    free(gt->params);
    free(gt->bound);
    free(gt->feeds);
    free(gt->back);
}

/* extra_output: also make the first parameter's input value a graph output (which keeps
 * the planner from updating that one in place). */
static kiln_status graph_trainer_init(graph_trainer *gt, const kiln_model *fwd, const kiln_trainer *t,
                                      const kiln_train_options *o, bool extra_output) {
    memset(gt, 0, sizeof *gt);
    kiln_context *ctx = fwd->ctx;
    kiln_status st = kiln_model_clone(fwd, &gt->m);
    if (st) return st;
    kiln_model *m = gt->m;
    const int loss = kiln_model_find_value(m, "loss");
    gt->n_params = t->n_params;
    gt->params = calloc((size_t)t->n_params, sizeof(int));
    int *grads = calloc((size_t)t->n_params, sizeof(int));
    kiln_tensor **inits = calloc((size_t)t->n_params, sizeof *inits);
    /* the trainer's parameters, lifted to graph inputs in its order */
    for (int k = 0; k < t->n_params && !st; k++) {
        const int v = t->params[k].fwd_value;
        gt->params[k] = v;
        inits[k] = m->values[v].init;
        m->values[v].init = NULL;
        m->values[v].is_input = true;
        int *in = realloc(m->inputs, sizeof(int) * (size_t)(m->n_inputs + 1));
        if (!in) st = KILN_ERR_OUT_OF_MEMORY;
        else {
            m->inputs = in;
            in[m->n_inputs++] = v;
        }
    }
    int seed = -1;
    if (!st && o->amp != KILN_AMP_OFF) {
        st = kiln_model_add_input(m, "kiln:loss_scale", KILN_F32, 0, NULL);
        seed = kiln_model_find_value(m, "kiln:loss_scale");
    }
    if (!st) st = kiln_autograd_seeded(m, loss, seed, t->n_params, gt->params, grads);
    if (!st) {
        m->n_outputs = 0;
        for (int v = 0; v < m->n_values; v++) m->values[v].is_output = false;
        st = kiln_model_add_output(m, "loss");
    }
    if (!st) st = kiln_optim_graph_append(m, o, t->n_params, gt->params, grads, NULL, seed, &gt->g);
    /* outputs: loss, then every next value (fed back) */
    const kiln_optim_graph *g = &gt->g;
    int pairs[2][64], np = 0;
    if (!st) {
        np = kiln_optim_graph_carried(g, NULL, NULL);
        CHECK(np <= 64, "%d carried values", np);
        if (np > 64) st = KILN_ERR_INTERNAL;
    }
    if (!st) {
        kiln_optim_graph_carried(g, pairs[0], pairs[1]);
        CHECK(np == 1 + g->n_params * (1 + g->n_states) + (g->micro >= 0 ? 1 + g->n_params : 0) +
                        (g->loss_scale >= 0 ? 3 : 0),
              "carried count %d", np);
        for (int j = 0; j < np && !st; j++) st = kiln_model_add_output(m, m->values[pairs[1][j]].name);
        gt->n_next = np;
        if (!st && extra_output) st = kiln_model_add_output(m, m->values[gt->params[0]].name);
    }
    if (!st) st = kiln_model_finalize(m);
    if (!st && o->amp != KILN_AMP_OFF) { /* as the trainer: the precision pass over the whole graph */
        kiln_pass_options po = {.device = KILN_DEVICE_CPU,
                                .precision = o->amp == KILN_AMP_FP16 ? KILN_PRECISION_FP16 : KILN_PRECISION_BF16,
                                .disabled = ~0u};
        kiln_model *low = NULL;
        st = kiln_passes_apply(m, &po, &low);
        if (!st) {
            kiln_model_free(gt->m);
            gt->m = m = low;
        }
    }
    kiln_session_options so = {.device = KILN_DEVICE_CPU, .threads = o->threads};
    if (!st) st = kiln_session_create(m, &so, &gt->s);
    /* bind: parameters (their initial values), zeros for the states and counters, the scale */
    if (!st) {
        gt->bound = calloc((size_t)m->n_values, sizeof *gt->bound);
        gt->feeds = calloc((size_t)m->n_inputs, sizeof *gt->feeds);
        gt->back = calloc((size_t)m->n_outputs, sizeof(int));
        gt->n_outputs = m->n_outputs;
        for (int k = 0; k < t->n_params; k++) gt->bound[gt->params[k]] = inits[k], inits[k] = NULL;
        for (int i = 2; i < m->n_inputs && !st; i++) {
            const int v = m->inputs[i];
            if (gt->bound[v]) continue;
            const kiln_value *val = &m->values[v];
            gt->bound[v] = kiln_tensor_new(ctx, val->dtype, val->ndim, val->dims);
            if (v == g->loss_scale) ((float *)gt->bound[v]->data)[0] = t->n.loss_scale;
        }
        gt->back[0] = -1;
        for (int j = 1; j < m->n_outputs; j++) gt->back[j] = j <= gt->n_next ? pairs[0][j - 1] : -1;
    }
    for (int k = 0; k < t->n_params; k++) kiln_tensor_free(inits[k]);
    free(inits);
    free(grads);
    return st;
}

static kiln_status graph_trainer_step(graph_trainer *gt, kiln_tensor *x, kiln_tensor *y, float *loss) {
    kiln_model *m = gt->m;
    gt->bound[m->inputs[0]] = x;
    gt->bound[m->inputs[1]] = y;
    for (int i = 0; i < m->n_inputs; i++) gt->feeds[i] = gt->bound[m->inputs[i]];
    const kiln_tensor *outs[64];
    kiln_status st = kiln_session_run(gt->s, m->n_inputs, gt->feeds, gt->n_outputs, outs);
    if (st) return st;
    *loss = (float)kiln_get_f64(outs[0], 0);
    gt->inplace = 0;
    for (int j = 1; j < gt->n_outputs; j++) {
        if (gt->back[j] < 0) continue;
        kiln_tensor *dst = gt->bound[gt->back[j]];
        if (outs[j]->data == dst->data) gt->inplace++; /* updated in place by the run */
        else memcpy(dst->data, outs[j]->data, kiln_tensor_nbytes(outs[j]));
    }
    return KILN_OK;
}

static void model_vs_trainer(kiln_train_options o, float x_scale, int steps, bool extra_output) {
    kiln_context *ctx = NULL;
    kiln_context_create(&ctx);
    kiln_model *fwd = mlp(ctx);
    kiln_trainer *t = NULL;
    o.device = KILN_DEVICE_CPU;
    o.threads = 1;
    kiln_status st = fwd ? kiln_trainer_create(fwd, "loss", &o, &t) : KILN_ERR_INTERNAL;
    CHECK(st == KILN_OK, "trainer: %s", kiln_context_message(ctx));
    graph_trainer gt;
    memset(&gt, 0, sizeof gt);
    if (!st) {
        st = graph_trainer_init(&gt, fwd, t, &t->opts, extra_output);
        CHECK(st == KILN_OK, "graph trainer (%s): %s", opt_label(&t->opts), kiln_context_message(ctx));
    }
    const int64_t B = 5;
    kiln_tensor *x = kiln_tensor_new(ctx, KILN_F32, 2, (int64_t[]){B, 6});
    kiln_tensor *y = kiln_tensor_new(ctx, KILN_I64, 1, (int64_t[]){B});
    bool same_loss = true;
    for (int s = 0; s < steps && !st; s++) {
        for (int64_t i = 0; i < B * 6; i++) ((float *)x->data)[i] = frand(-1, 1) * (s < 3 ? x_scale : 1.f);
        for (int64_t i = 0; i < B; i++) ((int64_t *)y->data)[i] = (int64_t)(frand(0, 2.999f));
        float l1 = 0, l2 = 0;
        st = kiln_trainer_step(t, 2, (kiln_tensor *[]){x, y}, &l1);
        CHECK(st == KILN_OK, "trainer step: %s", kiln_context_message(ctx));
        if (!st) st = graph_trainer_step(&gt, x, y, &l2);
        CHECK(st == KILN_OK, "graph step: %s", kiln_context_message(ctx));
        same_loss &= memcmp(&l1, &l2, sizeof l1) == 0;
    }
    if (!st) {
        const kiln_optim_graph *g = &gt.g;
        bool same = true;
        for (int k = 0; k < t->n_params; k++) {
            const size_t nb = kiln_tensor_nbytes(t->params[k].value);
            same &= memcmp(t->params[k].value->data, gt.bound[gt.params[k]]->data, nb) == 0;
            for (int j = 0; j < g->n_states; j++)
                same &= memcmp(t->params[k].state[j], gt.bound[g->state_in[k * g->n_states + j]]->data, nb) == 0;
        }
        const int64_t gsteps = ((int64_t *)gt.bound[g->step]->data)[0];
        CHECK(same, "%s: weights or states differ from the trainer's after %d steps", opt_label(&t->opts), steps);
        CHECK(same_loss, "%s: losses differ", opt_label(&t->opts));
        /* the planner updates every state input in place but the one read as an output */
        const int want_inplace = gt.n_next - (extra_output ? 1 : 0);
        CHECK(gt.inplace == want_inplace, "%d of %d next values computed in place, want %d", gt.inplace, gt.n_next,
              want_inplace);
        CHECK(gsteps == t->n.steps, "%s: %lld steps taken, the trainer %lld", opt_label(&t->opts), (long long)gsteps,
              (long long)t->n.steps);
        if (g->loss_scale >= 0) {
            const float scale = ((float *)gt.bound[g->loss_scale]->data)[0];
            const int64_t skipped = ((int64_t *)gt.bound[g->skipped]->data)[0];
            CHECK(scale == t->n.loss_scale && skipped == t->n.skipped_steps,
                  "loss scale %g / skipped %lld, the trainer %g / %lld", scale, (long long)skipped, t->n.loss_scale,
                  (long long)t->n.skipped_steps);
            CHECK(x_scale <= 1 || t->n.skipped_steps > 0, "the overflowing steps were not skipped (test too weak)");
            printf("     loss scale %g after %lld skipped steps\n", scale, (long long)skipped);
        }
        if (same && same_loss)
            printf("ok   trained %d steps, graph update = trainer's loop bit for bit: %s amp %d accumulate %d (%d of %d "
                   "in place)\n",
                   steps, opt_label(&t->opts), (int)t->opts.amp, t->opts.accumulate, gt.inplace, gt.n_next);
    }
    kiln_tensor_free(x);
    kiln_tensor_free(y);
    graph_trainer_free(&gt);
    kiln_trainer_free(t);
    kiln_model_free(fwd);
    kiln_context_free(ctx);
}

/* ----------------------------------------- 3. the update lowered, as CUDA plans it */

/* kiln_train_lower_update (the graph the CUDA engine plans, its fused tail kernel doing the
 * update) on the trainer's graph: the gradients it outputs, put through GradScaler's check
 * and unscaling and the frozen reference loop kiln_optimizer_update, give the trainer's first
 * step bit for bit (or, on overflow, a skipped step): the lowered outputs are exactly what
 * the update nodes read, under mixed precision too (after the precision pass's casts). */
static void lowered_vs_trainer(kiln_train_options o, float x_scale) {
    kiln_context *ctx = NULL;
    kiln_context_create(&ctx);
    kiln_model *fwd = mlp(ctx), *low = NULL;
    kiln_trainer *t = NULL;
    kiln_session *s = NULL;
    o.device = KILN_DEVICE_CPU;
    o.threads = 1;
    kiln_status st = fwd ? kiln_trainer_create(fwd, "loss", &o, &t) : KILN_ERR_INTERNAL;
    CHECK(st == KILN_OK, "trainer: %s", kiln_context_message(ctx));
    const int64_t B = 5;
    kiln_tensor *x = kiln_tensor_new(ctx, KILN_F32, 2, (int64_t[]){B, 6});
    kiln_tensor *y = kiln_tensor_new(ctx, KILN_I64, 1, (int64_t[]){B});
    for (int64_t i = 0; i < B * 6; i++) ((float *)x->data)[i] = frand(-1, 1) * x_scale;
    for (int64_t i = 0; i < B; i++) ((int64_t *)y->data)[i] = (int64_t)(frand(0, 2.999f));
    kiln_param ps[8];
    memset(ps, 0, sizeof ps);
    const int np = t ? t->n_params : 0, ns = kiln_optimizer_states(&o);
    if (!st) {
        t->feeds[0] = x;
        t->feeds[1] = y;
        st = kiln_train_lower_update(&t->view, &low);
        CHECK(st == KILN_OK, "lowering: %s", kiln_context_message(ctx));
    }
    if (!st) {
        CHECK(low->n_outputs == 1 + np + t->n_states && np <= 8, "lowered graph: %d outputs, want %d", low->n_outputs,
              1 + np + t->n_states);
        kiln_session_options so = {.device = KILN_DEVICE_CPU, .threads = 1};
        st = kiln_session_create(low, &so, &s);
    }
    const kiln_tensor *outs[16] = {0};
    if (!st) st = kiln_session_run(s, low->n_inputs, t->feeds, low->n_outputs, outs);
    CHECK(st == KILN_OK, "lowered run: %s", kiln_context_message(ctx));
    bool finite = true;
    for (int k = 0; k < np && !st; k++) {
        const kiln_param *p = &t->params[k];
        CHECK(outs[1 + k]->dtype == KILN_F32 && kiln_tensor_numel(outs[1 + k]) == p->numel,
              "lowered output %d is not parameter %d's f32 gradient", 1 + k, k);
        ps[k].value = kiln_tensor_clone(ctx, p->value);
        ps[k].numel = p->numel;
        float *g = malloc(sizeof(float) * (size_t)p->numel);
        memcpy(g, outs[1 + k]->data, sizeof(float) * (size_t)p->numel);
        for (int64_t i = 0; i < p->numel; i++) finite &= isfinite(g[i]) != 0;
        ps[k].grad = g;
        for (int j = 0; j < ns; j++) ps[k].state[j] = calloc((size_t)p->numel, sizeof(float));
    }
    if (!st) {
        /* the reference: GradScaler (unscale by 1 / scale) and the frozen loop */
        if (finite) {
            if (o.amp != KILN_AMP_OFF) {
                const float inv = 1.0f / t->n.loss_scale;
                for (int k = 0; k < np; k++)
                    for (int64_t i = 0; i < ps[k].numel; i++) ((float *)ps[k].grad)[i] *= inv;
            }
            kiln_optimizer_update(&t->opts, 0, kiln_trainer_lr_at(&t->opts, 0), np, ps);
        }
        float loss = 0;
        st = kiln_trainer_step(t, 2, (kiln_tensor *[]){x, y}, &loss);
        CHECK(st == KILN_OK, "trainer step: %s", kiln_context_message(ctx));
        bool same = true;
        for (int k = 0; k < np && !st; k++) {
            const size_t nb = sizeof(float) * (size_t)ps[k].numel;
            same &= memcmp(t->params[k].value->data, ps[k].value->data, nb) == 0;
            for (int j = 0; j < ns; j++) same &= memcmp(t->params[k].state[j], ps[k].state[j], nb) == 0;
        }
        CHECK(!st && same, "%s amp %d: the lowered graph's gradients through the reference loop differ from the "
              "trainer's step", opt_label(&t->opts), (int)o.amp);
        CHECK(!st && (t->n.skipped_steps == 0) == finite, "amp %d: %lld skipped steps, gradients %s", (int)o.amp,
              (long long)t->n.skipped_steps, finite ? "finite" : "not finite");
        if (!st && same)
            printf("ok   lowered update (CUDA's plan): gradients + reference loop = trainer's step bit for bit: %s amp "
                   "%d%s\n",
                   opt_label(&t->opts), (int)o.amp, finite ? "" : ", skipped for inf/NaN");
    }
    for (int k = 0; k < np; k++) {
        kiln_tensor_free(ps[k].value);
        free((float *)ps[k].grad);
        free(ps[k].state[0]);
        free(ps[k].state[1]);
    }
    if (t) t->feeds[0] = t->feeds[1] = NULL;
    kiln_session_free(s);
    kiln_model_free(low);
    kiln_tensor_free(x);
    kiln_tensor_free(y);
    kiln_trainer_free(t);
    kiln_model_free(fwd);
    kiln_context_free(ctx);
}

int main(void) {
    kiln_train_options cfg[] = {
        {.optimizer = KILN_OPTIM_SGD, .lr = 0.1f},
        {.optimizer = KILN_OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-2f,
         .schedule = KILN_SCHEDULE_STEP, .step_size = 2, .gamma = 0.5f},
        {.optimizer = KILN_OPTIM_SGD, .lr = 0.05f, .momentum = 0.8f, .nesterov = 1, .warmup_steps = 3},
        {.optimizer = KILN_OPTIM_ADAM, .lr = 1e-2f, .weight_decay = 1e-3f, .schedule = KILN_SCHEDULE_COSINE,
         .total_steps = 5, .warmup_steps = 2},
        {.optimizer = KILN_OPTIM_ADAMW, .lr = 1e-2f, .weight_decay = 0.05f},
        {.optimizer = KILN_OPTIM_ADADELTA, .lr = 1.0f, .weight_decay = 1e-3f},
    };
    const int n = (int)(sizeof cfg / sizeof cfg[0]);
    /* defaults filled in as kiln_trainer_create does */
    for (int i = 0; i < n; i++) {
        kiln_train_options *o = &cfg[i];
        o->beta1 = 0.9f;
        o->beta2 = 0.999f;
        o->eps = o->optimizer == KILN_OPTIM_ADADELTA ? 1e-6f : 1e-8f;
        o->rho = 0.9f;
        if (o->gamma == 0) o->gamma = 0.1f;
        o->accumulate = 1;
    }
    for (int i = 0; i < n; i++) {
        op_vs_loop(&cfg[i], false);
        op_vs_loop(&cfg[i], true);
    }
    for (int i = 0; i < n; i++) model_vs_trainer(cfg[i], 1.f, 7, false);
    model_vs_trainer(cfg[3], 1.f, 4, true);
    for (int i = 1; i < 6; i += 2) { /* gradient accumulation: 7 micro-batches of 3 per step */
        kiln_train_options acc = cfg[i];
        acc.accumulate = 3;
        model_vs_trainer(acc, 1.f, 7, false);
    }
    kiln_train_options amp = cfg[1];
    amp.amp = KILN_AMP_FP16;
    model_vs_trainer(amp, 3000.f, 8, false);
    amp = cfg[3];
    amp.amp = KILN_AMP_BF16;
    model_vs_trainer(amp, 1.f, 5, false);
    lowered_vs_trainer(cfg[1], 1.f);
    lowered_vs_trainer(cfg[3], 1.f);
    amp = cfg[3];
    amp.amp = KILN_AMP_FP16;
    lowered_vs_trainer(amp, 1.f);
    lowered_vs_trainer(amp, 3000.f);
    amp.amp = KILN_AMP_BF16;
    lowered_vs_trainer(amp, 1.f);
    /* large-batch options: LARS, LAMB, no weight decay on 1-D parameters, clipping */
    kiln_train_options lb[] = {
        {.optimizer = KILN_OPTIM_LARS, .lr = 0.5f, .momentum = 0.9f, .weight_decay = 5e-3f, .lars_eta = 0.02f},
        {.optimizer = KILN_OPTIM_LAMB, .lr = 1e-2f, .weight_decay = 0.01f, .schedule = KILN_SCHEDULE_POLY,
         .total_steps = 8, .warmup_steps = 2},
        {.optimizer = KILN_OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.05f},
        {.optimizer = KILN_OPTIM_ADAMW, .lr = 1e-2f, .weight_decay = 0.1f},
    };
    for (size_t i = 0; i < sizeof lb / sizeof lb[0]; i++) {
        kiln_train_options *o = &lb[i];
        o->beta1 = 0.9f;
        o->beta2 = 0.999f;
        o->eps = o->optimizer == KILN_OPTIM_LAMB ? 1e-6f : 1e-8f;
        o->rho = 0.9f;
        o->gamma = 0.1f;
        o->accumulate = 1;
        if (o->lars_eta == 0) o->lars_eta = 0.001f;
        for (int v = 0; v < 4; v++) {
            kiln_train_options c = *o;
            c.clip_grad_norm = v & 1 ? 0.5f : 0.f; /* the gradients' norm is ~5: clipped */
            op_vs_reference(&c, v == 3, v >= 2);
        }
    }
    /* clipping with a bound above the norm leaves the step as it was */
    lb[2].clip_grad_norm = 1e6f;
    op_vs_reference(&lb[2], false, false);
    schedules();
    no_decay_selection();
    for (size_t i = 0; i < 2; i++) { /* LARS and LAMB through the trainer = the graph in a session */
        kiln_train_options c = lb[i];
        c.no_decay_bn_bias = 1;
        c.clip_grad_norm = 1.0f;
        model_vs_trainer(c, 1.f, 5, false);
        c.accumulate = 3; /* clipping the averaged gradient of 3 micro-batches */
        model_vs_trainer(c, 1.f, 7, false);
    }
    kiln_train_options lamb16 = lb[1]; /* fp16 loss scaling: clipping after unscaling, overflows skipped */
    lamb16.amp = KILN_AMP_FP16;
    lamb16.clip_grad_norm = 0.5f;
    lamb16.no_decay_bn_bias = 1;
    model_vs_trainer(lamb16, 3000.f, 8, false);
    printf("%s (%d failed checks)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
