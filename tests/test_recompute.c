/* test_recompute.c — activation checkpointing under a memory limit (issue 12, part 5;
 * src/train/recompute.c, src/train/memory.c), on the CPU with a small ResNet-18 (BN, ReLU,
 * residual Adds) at 32x32:
 *   - recomputation keeps the function: one trainer recomputing every value it can and one
 *     recomputing none take the same steps from the same weights and batches, and their
 *     losses, momentum buffers (after the first SGD step: the gradients), weights and BN
 *     running statistics are bit for bit the same;
 *   - the arena really shrinks: the plan the trainer's session runs has a smaller arena, the
 *     one the pass measured, and the forward values it recomputes die early;
 *   - under a limit the planned peak is within it; below the least reachable a clear error
 *     names the limit and that least;
 *   - the largest batch: b fits and b + 1 does not, with recomputation at least as large and
 *     here larger.
 */
#include "kiln.h"
#include "kiln_models.h"
#include "check.h"
#include "core/internal.h"
#include "core/plan.h"
#include "passes/passes.h"
#include "train/recompute.h"
#include "train/trainer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
enum { S = 32 }; /* image size */

static uint64_t rng = 99;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / (float)0xffffff * 2.0f - 1.0f;
}

static kiln_status init_tensor(kiln_model *m, const char *name, int nd, const int64_t *dims, double scale, double base) {
    kiln_tensor *t = NULL;
    kiln_status st = kiln_tensor_create(m->ctx, KILN_F32, nd, dims, &t);
    if (st) return st;
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++) ((float *)t->data)[i] = (float)(base + scale * frand());
    st = kiln_model_add_initializer(m, name, t);
    kiln_tensor_free(t);
    return st;
}

/* Conv 3x3 -> BatchNormalization (-> Relu unless relu_out is NULL: then bn_out is the BN's) */
static kiln_status conv_bn(kiln_model *m, const char *in, const char *p, int64_t cin, int64_t cout, const char *bn_out,
                           const char *relu_out) {
    char w[64], g[64], b[64], rm[64], rv[64], c[64];
    snprintf(w, sizeof w, "%s.conv.weight", p);
    snprintf(g, sizeof g, "%s.bn.weight", p);
    snprintf(b, sizeof b, "%s.bn.bias", p);
    snprintf(rm, sizeof rm, "%s.bn.running_mean", p);
    snprintf(rv, sizeof rv, "%s.bn.running_var", p);
    snprintf(c, sizeof c, "%s:c", p);
    kiln_node *n = NULL;
    kiln_status st = init_tensor(m, w, 4, (int64_t[]){cout, cin, 3, 3}, sqrt(6.0 / (double)(cin * 9)), 0);
    if (!st) st = init_tensor(m, g, 1, (int64_t[]){cout}, 0.2, 1);
    if (!st) st = init_tensor(m, b, 1, (int64_t[]){cout}, 0.1, 0);
    if (!st) st = init_tensor(m, rm, 1, (int64_t[]){cout}, 0, 0);
    if (!st) st = init_tensor(m, rv, 1, (int64_t[]){cout}, 0, 1);
    if (!st) st = kiln_model_add_node(m, "Conv", c, 2, (const char *[]){in, w}, 1, (const char *[]){c}, &n);
    if (!st) st = kiln_node_set_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
    if (!st) st = kiln_node_set_ints(n, "kernel_shape", 2, (int64_t[]){3, 3});
    if (!st) st = kiln_model_add_node(m, "BatchNormalization", bn_out, 5, (const char *[]){c, g, b, rm, rv}, 1,
                                      (const char *[]){bn_out}, NULL);
    if (!st && relu_out)
        st = kiln_model_add_node(m, "Relu", relu_out, 1, (const char *[]){bn_out}, 1, (const char *[]){relu_out}, NULL);
    return st;
}

/* A small residual CNN whose memory is its activations: image (batch, 3, S, S) -> stem
 * Conv-BN-Relu (16 channels) -> 3 blocks relu(BN(conv(relu(BN(conv(x))))) + x) -> global
 * average pool -> Gemm (10 classes), with the classifier loss. */
static kiln_model *small_resnet(kiln_context *ctx) {
    kiln_model *m = NULL, *lm = NULL;
    kiln_node *n = NULL;
    if (kiln_model_create(ctx, &m)) return NULL;
    kiln_status st = kiln_model_add_input(m, "image", KILN_F32, 4, (int64_t[]){-1, 3, S, S});
    if (!st) st = conv_bn(m, "image", "stem", 3, 16, "stem:b", "x0");
    for (int k = 0; k < 3 && !st; k++) {
        char p[32], q[32], in[16], b1[48], r1[48], b2[48], a[32], out[16];
        snprintf(p, sizeof p, "block%d.1", k);
        snprintf(q, sizeof q, "block%d.2", k);
        snprintf(in, sizeof in, "x%d", k);
        snprintf(b1, sizeof b1, "%s:b", p);
        snprintf(r1, sizeof r1, "%s:r", p);
        snprintf(b2, sizeof b2, "%s:b", q);
        snprintf(a, sizeof a, "block%d:add", k);
        snprintf(out, sizeof out, "x%d", k + 1);
        st = conv_bn(m, in, p, 16, 16, b1, r1);
        if (!st) st = conv_bn(m, r1, q, 16, 16, b2, NULL);
        if (!st) st = kiln_model_add_node(m, "Add", a, 2, (const char *[]){b2, in}, 1, (const char *[]){a}, NULL);
        if (!st) st = kiln_model_add_node(m, "Relu", out, 1, (const char *[]){a}, 1, (const char *[]){out}, NULL);
    }
    if (!st) st = kiln_model_add_node(m, "GlobalAveragePool", "gap", 1, (const char *[]){"x3"}, 1, (const char *[]){"g"}, NULL);
    if (!st) st = kiln_model_add_node(m, "Flatten", "flatten", 1, (const char *[]){"g"}, 1, (const char *[]){"f"}, NULL);
    if (!st) st = init_tensor(m, "fc.weight", 2, (int64_t[]){10, 16}, 0.25, 0);
    if (!st) st = init_tensor(m, "fc.bias", 1, (int64_t[]){10}, 0.1, 0);
    if (!st) st = kiln_model_add_node(m, "Gemm", "fc", 3, (const char *[]){"f", "fc.weight", "fc.bias"}, 1,
                                      (const char *[]){"logits"}, &n);
    if (!st) st = kiln_node_set_int(n, "transB", 1);
    if (!st) st = kiln_model_add_output(m, "logits");
    if (!st) st = kiln_model_finalize(m);
    if (!st) st = kiln_model_add_classifier_loss(m, "logits", 0, &lm);
    kiln_model_free(m);
    return st ? NULL : lm;
}

static kiln_train_options opts(void) {
    kiln_train_options o = KILN_TRAIN_OPTIONS_INIT;
    o.optimizer = KILN_OPTIM_SGD;
    o.lr = 0.05f;
    o.momentum = 0.9f;
    o.threads = 2;
    return o;
}

static bool same_tensor(const kiln_tensor *a, const kiln_tensor *b) {
    return kiln_tensor_nbytes(a) == kiln_tensor_nbytes(b) && memcmp(a->data, b->data, kiln_tensor_nbytes(a)) == 0;
}

/* Two trainers from the same model: their states bit for bit. */
static int compare_trainers(const kiln_trainer *a, const kiln_trainer *b, const char *when) {
    int diff = 0;
    CHECK(a->n_params == b->n_params && a->n_carried == b->n_carried && a->n_states == b->n_states, "%s: layouts", when);
    for (int k = 0; k < a->n_params && k < b->n_params; k++)
        if (!same_tensor(a->params[k].value, b->params[k].value)) diff++;
    CHECK(!diff, "%s: %d weight tensors differ with recomputation", when, diff);
    diff = 0;
    for (int j = 0; j < a->n_carried && j < b->n_carried; j++)
        if (a->carried_owned[j] && !same_tensor(a->carried[j], b->carried[j])) diff++;
    CHECK(!diff, "%s: %d optimizer state tensors (momentum buffers: the gradients) differ", when, diff);
    diff = 0;
    for (int k = 0; k < a->n_states && k < b->n_states; k++)
        if (!same_tensor(a->states[k].value, b->states[k].value)) diff++;
    CHECK(!diff, "%s: %d BatchNormalization running statistics differ (updated twice?)", when, diff);
    return 0;
}

/* The CUDA trainer lays its graph out (NHWC convolutions, the layout pass) before the
 * memory limit's recomputation rewrites it, and the layout pass does not run again: a copy
 * must carry its original's layout. (On the H100 `kiln train resnet18 --memory-limit ...`
 * failed at warm-up: "BatchNormalization node 'bn1:recompute' ...: input 0 is NHWC and
 * output 0 NCHW".) Here the graph is laid out for CUDA on the CPU, then fitted. */
static void laid_out_copies(kiln_context *ctx, kiln_model *m, int64_t B) {
    kiln_train_options o = opts();
    kiln_trainer *t = NULL;
    CHECK(!kiln_trainer_create(m, "loss", &o, &t), "trainer: %s", kiln_context_message(ctx));
    if (!t) return;
    const kiln_pass_options pa = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP32,
                                  .disabled = ~(unsigned)KILN_PASS_NHWC};
    kiln_model *low = NULL;
    CHECK(!kiln_passes_apply(t->train, &pa, &low), "layout: %s", kiln_context_message(ctx));
    if (!low) {
        kiln_trainer_free(t);
        return;
    }
    kiln_model_free(t->train);
    t->train = low;
    kiln_train_memory least;
    kiln_trainer_plan_memory(t, B, 1, 1, &least); /* the least reachable: every candidate */
    t->opts.memory_limit = least.peak_bytes;
    t->opts.memory_batch = B;
    CHECK(!kiln_trainer_fit_memory(t), "fit under %zu bytes: %s", least.peak_bytes, kiln_context_message(ctx));
    int copies = 0, nhwc = 0, bad = 0;
    for (int i = 0; i < t->train->n_nodes; i++) {
        const kiln_node *n = &t->train->nodes[i];
        const char *r = strstr(n->name, ":recompute");
        if (!r) continue;
        copies++;
        /* the copy's output against the value it recomputes (its name without the suffix) */
        const kiln_value *y = &t->train->values[n->out[0]];
        char orig[512];
        snprintf(orig, sizeof orig, "%.*s", (int)(strstr(y->name, ":recompute") - y->name), y->name);
        const int v = kiln_model_find_value(t->train, orig);
        nhwc += y->format == KILN_FORMAT_NHWC;
        if (v < 0 || t->train->values[v].format != y->format) {
            printf("FAIL copy %s: %s is %s, the original %s\n", n->name, y->name,
                   y->format == KILN_FORMAT_NHWC ? "NHWC" : "NCHW", v < 0 ? "(not found)" : "another layout");
            bad++;
        }
    }
    fails += bad;
    CHECK(copies > 0 && nhwc > 0, "%d copies, %d NHWC: nothing laid out was recomputed", copies, nhwc);
    printf("laid out for CUDA, then fitted: %d copies (%d NHWC), each in its original's layout\n", copies, nhwc);
    kiln_trainer_free(t);
}

/* Recomputed values of each kind in t's training graph (copies carry kiln_recompute). */
static int copies_of(const kiln_trainer *t, bool conv) {
    int k = 0;
    for (int i = 0; i < t->train->n_nodes; i++) {
        const kiln_node *n = &t->train->nodes[i];
        const kiln_op_def *d = kiln_op_get(n->op);
        if (kiln_attr_int(n, "kiln_recompute", 0) && strstr(n->name, ":recompute") && (d && d->flops) == conv) k++;
    }
    return k;
}

/* The fitted CUDA graph over CUDA's 2 side streams (src/core/plan.c, assign_streams): every
 * recomputation on the main stream, at its place (a side stream would start it in the
 * forward), and every side-stream node reading one joined into the main stream by a later
 * main node (else the copy stays alive to the end of the step). */
static void copies_on_streams(kiln_context *ctx, kiln_trainer *t, int64_t B) {
    kiln_model *m = t->train;
    kiln_tensor *data = calloc((size_t)m->n_inputs + 1, sizeof *data);
    kiln_tensor **in = calloc((size_t)m->n_inputs + 1, sizeof *in);
    if (!data || !in) {
        free(data);
        free(in);
        return;
    }
    for (int i = 0; i < m->n_inputs; i++) {
        const kiln_value *v = &m->values[m->inputs[i]];
        for (int j = 0; j < t->n_carried && !in[i]; j++)
            if (!strcmp(t->carried_names[j], v->name)) in[i] = t->carried[j];
        for (int k = 0; k < t->n_states && !in[i]; k++)
            if (!strcmp(t->fwd->values[t->states[k].fwd_value].name, v->name)) in[i] = t->states[k].value;
        if (in[i]) continue;
        int64_t dims[KILN_MAX_DIMS];
        for (int d = 0; d < v->ndim; d++) dims[d] = v->dims[d] < 0 ? B : v->dims[d];
        kiln_tensor_set_shape(&data[i], v->dtype, v->ndim, dims);
        in[i] = &data[i];
    }
    kiln_plan *p = NULL;
    CHECK(!kiln_plan_build_ex(m, in, true, false, 2, &p), "CUDA's plan over 2 side streams: %s",
          kiln_context_message(ctx));
    if (p) {
        kiln_plan_view_t v;
        kiln_plan_view(p, &v);
        int copies = 0, aside = 0, readers = 0, unjoined = 0, side_nodes = 0;
        for (int e = 0; e < v.n_exec; e++) {
            const kiln_node *n = kiln_plan_exec_op_ctx(&v, e)->node;
            side_nodes += v.stream[e] != 0;
            if (kiln_attr_int(n, "kiln_recompute", 0)) {
                copies++;
                aside += v.stream[e] != 0;
                continue;
            }
            if (!v.stream[e]) continue;
            bool reads = false;
            for (int k = 0; k < n->n_in; k++) {
                const int q = n->in[k] >= 0 ? m->values[n->in[k]].producer : -1;
                reads |= q >= 0 && kiln_attr_int(&m->nodes[q], "kiln_recompute", 0);
            }
            if (!reads) continue;
            readers++;
            bool joined = false; /* a later main node waits for it or a later node of its stream */
            for (int e2 = e + 1; e2 < v.n_exec && !joined; e2++)
                for (int w = v.wait_at[e2]; !v.stream[e2] && w < v.wait_at[e2 + 1] && !joined; w++)
                    joined = v.waits[w] >= e && v.stream[v.waits[w]] == v.stream[e];
            unjoined += !joined;
        }
        printf("CUDA's fitted plan over 2 side streams: %d of %d nodes aside; %d recomputations (%d aside), %d side "
               "readers of them (%d never joined)\n",
               side_nodes, v.n_exec, copies, aside, readers, unjoined);
        CHECK(side_nodes > 0 && copies > 0, "no side-stream node (%d) or no recomputation (%d) to check", side_nodes,
              copies);
        CHECK(aside == 0, "%d of %d recomputations on a side stream (they would run in the forward)", aside, copies);
        CHECK(unjoined == 0, "%d of %d side-stream readers of recomputations joined only at the end of the step",
              unjoined, readers);
        kiln_plan_free(p);
    }
    free(data);
    free(in);
}

/* Both tiers on CUDA's training graph, planned on the CPU as `kiln train --device cuda
 * --max-batch` plans it (kiln_trainer_create_plan: NHWC, fp16, and CUDA's fusions where the
 * CUDA backend is built in; measured with 2 side streams): the cheap values fit a smaller
 * arena than none, convolutions too a smaller one still, and the largest batch under one
 * limit grows tier by tier. (Before: a copy on a side stream started in the forward, and a
 * weight gradient reading one was joined only at the end of the run, so every copy stayed
 * alive as if stored; ResNet-50 224 planned 473 with recomputation as without.) */
static void cuda_tiers(kiln_context *ctx, kiln_model *m, int64_t B) {
    kiln_train_options o = opts();
    o.device = KILN_DEVICE_CUDA;
    o.amp = KILN_AMP_FP16;
    kiln_trainer *t = NULL;
    CHECK(!kiln_trainer_create_plan(m, "loss", &o, &t), "a CUDA trainer to plan: %s", kiln_context_message(ctx));
    if (!t) return;
    int nhwc = 0;
    for (int v = 0; v < t->train->n_values; v++) nhwc += t->train->values[v].format == KILN_FORMAT_NHWC;
    CHECK(nhwc > 0, "CUDA's training graph is not laid out (no NHWC value)");
    kiln_train_memory none, cheap, both;
    CHECK(!kiln_trainer_plan_memory(t, B, 0, 1, &none), "plan: %s", kiln_context_message(ctx));
    kiln_trainer_plan_memory(t, B, 1, 2, &cheap); /* the least each tier reaches (a 1-byte limit) */
    kiln_trainer_plan_memory(t, B, 1, 1, &both);
    printf("CUDA's graph (AMP fp16) at batch %lld: arena %zu without recomputation, %zu cheap values (%d recomputed), "
           "%zu both tiers (%d)\n",
           (long long)B, none.arena_bytes, cheap.arena_bytes, cheap.recomputed, both.arena_bytes, both.recomputed);
    CHECK(cheap.recomputed > 0 && cheap.arena_bytes < none.arena_bytes,
          "CUDA, cheap values: arena %zu with %d recomputed, not below %zu without", cheap.arena_bytes, cheap.recomputed,
          none.arena_bytes);
    CHECK(both.recomputed > cheap.recomputed && both.arena_bytes < cheap.arena_bytes,
          "CUDA, both tiers: arena %zu with %d recomputed, not below cheap values' %zu", both.arena_bytes,
          both.recomputed, cheap.arena_bytes);
    const size_t limit = none.peak_bytes * 2;
    int64_t b[3] = {0, 0, 0};
    kiln_train_memory at;
    for (int k = 0; k < 3; k++)
        CHECK(!kiln_trainer_max_batch(t, limit, k == 0 ? 0 : k == 1 ? 2 : 1, 256, &b[k], &at), "CUDA max batch: %s",
              kiln_context_message(ctx));
    printf("CUDA's graph under %zu bytes: batch %lld without recomputation, %lld cheap values, %lld both tiers\n", limit,
           (long long)b[0], (long long)b[1], (long long)b[2]);
    CHECK(b[0] >= 1 && b[1] > b[0] && b[2] > b[1] && b[2] < 256, "CUDA max batch %lld / %lld / %lld not increasing",
          (long long)b[0], (long long)b[1], (long long)b[2]);
    /* fitted to the least: convolutions among the copies */
    t->opts.memory_limit = both.peak_bytes;
    t->opts.memory_batch = B;
    CHECK(!kiln_trainer_fit_memory(t), "CUDA fit under %zu bytes: %s", both.peak_bytes, kiln_context_message(ctx));
    CHECK(copies_of(t, true) > 0 && copies_of(t, false) > 0, "CUDA's fitted graph: %d convolutions, %d cheap values recomputed",
          copies_of(t, true), copies_of(t, false));
    copies_on_streams(ctx, t, B);
    kiln_trainer_free(t);
}

int main(void) {
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return 1;
    kiln_model *m = small_resnet(ctx);
    CHECK(m, "the CNN: %s", kiln_context_message(ctx));
    if (!m) return 1;
    const int64_t B = 16;
    kiln_train_options o = opts();
    kiln_trainer *plain = NULL, *rc = NULL;
    CHECK(!kiln_trainer_create(m, "loss", &o, &plain), "trainer: %s", kiln_context_message(ctx));
    if (!plain) return 1;

    /* memory at batch B: as it is, and the least reachable (a 1-byte limit) */
    kiln_train_memory mem0, least;
    CHECK(!kiln_trainer_plan_memory(plain, B, 0, 1, &mem0), "plan: %s", kiln_context_message(ctx));
    CHECK(mem0.recomputed == 0 && mem0.arena_bytes == mem0.arena_bytes_without, "no limit: nothing recomputed");
    CHECK(mem0.peak_bytes == mem0.arena_bytes + mem0.param_bytes + mem0.state_bytes + mem0.input_bytes +
                                 mem0.workspace_bytes,
          "peak is the sum of its parts");
    CHECK(mem0.param_bytes == (size_t)plain->param_count * 4, "weights %zu bytes", mem0.param_bytes);
    CHECK(mem0.input_bytes == (size_t)(B * 3 * S * S * 4 + B * 8), "batch %zu bytes", mem0.input_bytes);
    kiln_status st = kiln_trainer_plan_memory(plain, B, 1, 1, &least);
    CHECK(st == KILN_ERR_OUT_OF_MEMORY, "a 1-byte limit must fail (%d)", (int)st);
    /* the stem's and each block's two ReLU outputs (the Adds' die with their ReLU), and the 7
     * convolution outputs (BatchNormGrad reads them) */
    CHECK(least.candidates == 14 && least.recomputed >= 10 && least.recomputed <= least.candidates,
          "recomputed %d of %d candidates", least.recomputed, least.candidates);
    printf("small residual CNN %dx%d batch %lld: peak %zu bytes (arena %zu); every candidate recomputed (%d): arena %zu, "
           "%.0f ops more\n",
           (int)S, (int)S, (long long)B, mem0.peak_bytes, mem0.arena_bytes, least.candidates, least.arena_bytes, least.recompute_ops);
    /* Without recomputation the backward keeps 7 convolution outputs (BatchNormGrad reads
     * them) and 7 ReLU outputs (the next convolution's weight gradient and ReluGrad read
     * them), each `act` bytes, plus the input and a few gradients; recomputing the ReLU
     * outputs from the convolution outputs frees them (the greedy placement keeps some
     * slack): the arena must lose at least 3 of them (it loses 4 less 1 KiB). */
    const size_t act = (size_t)B * 16 * S * S * 4;
    CHECK(mem0.arena_bytes >= 14 * act, "arena %zu: less than the 14 activations kept (%zu each)", mem0.arena_bytes, act);
    CHECK(least.arena_bytes + 3 * act <= mem0.arena_bytes, "arena %zu -> %zu: not 3 activations (%zu each) smaller",
          mem0.arena_bytes, least.arena_bytes, act);
    /* the message names the limit and the least needed */
    char want[160];
    snprintf(want, sizeof want, "needs at least %zu bytes", least.peak_bytes);
    CHECK(strstr(kiln_context_message(ctx), want), "message '%s' lacks '%s'", kiln_context_message(ctx), want);
    CHECK(strstr(kiln_context_message(ctx), "the memory limit is 1 bytes"), "message '%s' lacks the limit",
          kiln_context_message(ctx));
    /* cheap values only (kiln_train_options.no_recompute 2): the 7 ReLU outputs; the
     * convolutions' tier frees more */
    kiln_train_memory cheap;
    st = kiln_trainer_plan_memory(plain, B, 1, 2, &cheap);
    CHECK(st == KILN_ERR_OUT_OF_MEMORY, "a 1-byte limit must fail, cheap values only (%d)", (int)st);
    CHECK(cheap.candidates == 7 && cheap.recomputed >= 6 && cheap.recomputed <= cheap.candidates,
          "cheap only: recomputed %d of %d candidates", cheap.recomputed, cheap.candidates);
    CHECK(least.arena_bytes < cheap.arena_bytes, "recomputing convolutions too: arena %zu, not below cheap only's %zu",
          least.arena_bytes, cheap.arena_bytes);
    printf("every candidate recomputed: arena %zu (cheap values only: %zu, %.0f ops more)\n", least.arena_bytes,
           cheap.arena_bytes, cheap.recompute_ops);

    /* a limit between: fits, within it, with some recomputed */
    const size_t mid = (mem0.peak_bytes + least.peak_bytes) / 2;
    kiln_train_memory at_mid;
    CHECK(!kiln_trainer_plan_memory(plain, B, mid, 1, &at_mid), "limit %zu: %s", mid, kiln_context_message(ctx));
    CHECK(at_mid.peak_bytes <= mid && at_mid.recomputed > 0 && at_mid.recomputed <= least.recomputed,
          "limit %zu: peak %zu, %d recomputed", mid, at_mid.peak_bytes, at_mid.recomputed);
    st = kiln_trainer_plan_memory(plain, B, mid, 0, &at_mid);
    CHECK(st == KILN_ERR_OUT_OF_MEMORY && strstr(kiln_context_message(ctx), "recomputation off"),
          "without recomputation the same limit must fail: %s", kiln_context_message(ctx));

    /* a trainer under the least limit recomputes everything; same steps, same bits */
    kiln_train_options ol = o;
    ol.memory_limit = least.peak_bytes;
    ol.memory_batch = B;
    CHECK(!kiln_trainer_create(m, "loss", &ol, &rc), "trainer under %zu bytes: %s", ol.memory_limit,
          kiln_context_message(ctx));
    if (!rc) return 1;
    /* the least limit recomputes convolutions too (the second tier), not only cheap values */
    CHECK(copies_of(rc, true) > 0 && copies_of(rc, false) > 0, "under the least limit: %d convolutions, %d cheap values "
          "recomputed", copies_of(rc, true), copies_of(rc, false));
    kiln_train_memory memrc;
    CHECK(!kiln_trainer_plan_memory(rc, B, 0, 1, &memrc), "plan: %s", kiln_context_message(ctx));
    CHECK(memrc.recomputed >= 1 && memrc.peak_bytes <= ol.memory_limit,
          "the trainer under %zu bytes: %d values recomputed, peak %zu", ol.memory_limit, memrc.recomputed,
          memrc.peak_bytes);
    kiln_tensor *x = NULL, *y = NULL;
    const int64_t xd[4] = {B, 3, S, S}, yd[1] = {B};
    kiln_tensor_create(ctx, KILN_F32, 4, xd, &x);
    kiln_tensor_create(ctx, KILN_I64, 1, yd, &y);
    for (int s = 0; s < 3; s++) {
        for (int64_t i = 0; i < B * 3 * S * S; i++) ((float *)x->data)[i] = frand();
        for (int64_t i = 0; i < B; i++) ((int64_t *)y->data)[i] = (int64_t)((frand() + 1) * 4.99);
        kiln_tensor *in[2] = {x, y};
        float la = 0, lb = 0;
        CHECK(!kiln_trainer_step(plain, 2, in, &la), "step: %s", kiln_context_message(ctx));
        CHECK(!kiln_trainer_step(rc, 2, in, &lb), "step with recomputation: %s", kiln_context_message(ctx));
        CHECK(memcmp(&la, &lb, sizeof la) == 0, "step %d: loss %.9g vs %.9g with recomputation", s, la, lb);
        char when[32];
        snprintf(when, sizeof when, "after step %d", s + 1);
        compare_trainers(plain, rc, when);
    }
    /* the arena the session really runs with */
    kiln_plan_stats pa, pb;
    CHECK(!kiln_session_stats(plain->sess, &pa) && !kiln_session_stats(rc->sess, &pb), "stats");
    printf("session arenas: %zu without, %zu with recomputation (planned %zu, %zu)\n", pa.arena_bytes, pb.arena_bytes,
           mem0.arena_bytes, memrc.arena_bytes);
    CHECK(pa.arena_bytes == mem0.arena_bytes, "the plain session's arena %zu is not the planned %zu", pa.arena_bytes,
          mem0.arena_bytes);
    CHECK(pb.arena_bytes == memrc.arena_bytes && pb.arena_bytes < pa.arena_bytes,
          "the session's arena %zu is not the planned %zu (or not below %zu)", pb.arena_bytes, memrc.arena_bytes,
          pa.arena_bytes);

    /* the largest batch under a limit: consistent, and larger with recomputation */
    const size_t limit = mem0.peak_bytes * 2;
    int64_t b0 = 0, b1 = 0;
    kiln_train_memory a0, a1, t;
    int64_t b2 = 0;
    kiln_train_memory a2;
    CHECK(!kiln_trainer_max_batch(plain, limit, 0, 256, &b0, &a0), "max batch: %s", kiln_context_message(ctx));
    CHECK(!kiln_trainer_max_batch(plain, limit, 1, 256, &b1, &a1), "max batch: %s", kiln_context_message(ctx));
    CHECK(!kiln_trainer_max_batch(plain, limit, 2, 256, &b2, &a2), "max batch: %s", kiln_context_message(ctx));
    printf("under %zu bytes: batch %lld with cheap values only recomputed\n", limit, (long long)b2);
    CHECK(b2 > b0 && b2 < b1 && a2.peak_bytes <= limit, "cheap only: batch %lld (without %lld, every tier %lld)",
          (long long)b2, (long long)b0, (long long)b1);
    printf("under %zu bytes: batch %lld without recomputation, %lld with\n", limit, (long long)b0, (long long)b1);
    CHECK(b0 >= 1 && b0 < 256 && a0.peak_bytes <= limit, "without: batch %lld, peak %zu", (long long)b0, a0.peak_bytes);
    CHECK(!kiln_trainer_plan_memory(plain, b0, limit, 0, &t), "batch %lld must fit", (long long)b0);
    CHECK(kiln_trainer_plan_memory(plain, b0 + 1, limit, 0, &t) == KILN_ERR_OUT_OF_MEMORY, "batch %lld must not fit",
          (long long)b0 + 1);
    CHECK(b1 > b0 && b1 < 256 && a1.peak_bytes <= limit, "with: batch %lld (without %lld), peak %zu", (long long)b1,
          (long long)b0, a1.peak_bytes);
    CHECK(!kiln_trainer_plan_memory(plain, b1, limit, 1, &t), "batch %lld must fit", (long long)b1);
    CHECK(kiln_trainer_plan_memory(plain, b1 + 1, limit, 1, &t) == KILN_ERR_OUT_OF_MEMORY, "batch %lld must not fit",
          (long long)b1 + 1);

    kiln_tensor_free(x);
    kiln_tensor_free(y);
    kiln_trainer_free(rc);
    kiln_trainer_free(plain);
    laid_out_copies(ctx, m, B);
    cuda_tiers(ctx, m, B);
    kiln_model_free(m);
    kiln_context_free(ctx);
    if (fails) printf("%d checks failed\n", fails);
    else printf("ok\n");
    return fails != 0;
}
