/* test_conv_bn_prologue.c — the conv-bn-prologue pass (src/passes/conv_bn_prologue.c) on the CPU.
 *
 *   - resnet18's training graph (forward, autograd's backward, loss; batch 2 at 64x64), fp32,
 *     fuse-bn and conv-bn-stats applied as the CUDA trainer does, then the pass: the 8 BNs
 *     inside the basic blocks (bn1, read by conv2 and its gradients only) lose Y (output 0
 *     absent, output 4 P added), their readers read the BN's X with the prologue (8 forward
 *     FusedConvs with input 4, 8 ConvGradWeights with input 3, 8 ConvGradInputs reading X for
 *     its shape); no node added or removed; topological order. The loss, every gradient and the
 *     running statistics within 1e-4 of each output's largest value of the graph without the
 *     pass: the prologue computes act(a x + k) with a, k rounded to f32 where the BN computed
 *     x a + k in double and rounded Y to f32, so each conv input moves by an f32 ulp or two;
 *     summed over the network that stays far below 1e-4 (conv-bn-stats' own bound). A graph
 *     whose first prologue reads a wrong P (row 0 and 1 read from another BN) must fail the
 *     compare (FAIL lines expected), so the compare can fail.
 *   - the same in fp16 (the CUDA trainer's precision and NHWC layout): the unfused graph
 *     rounds each a1 to f16, the prologue does not; outputs within 0.3 of their 2-norm (the
 *     bound test_fuse_bn.c uses for fp16 graphs, where single ReLUs and maxima flip), and the
 *     loss within 1e-2. Measured: 0.122 (the gradients of the first layers, ~0.09-0.12 each),
 *     where fuse-bn's own fp16 rounding change (a residual sum rounded once) gives 0.119 on
 *     the same graph: batch 2's BN gradients amplify any rounding change to that level.
 *   - the memory plan: the arena of the fp32 graph with the pass is smaller than without
 *     (the 8 a1 tensors are gone); activation checkpointing (kiln_recompute_fit) still runs
 *     and computes the same function.
 *   - resnet50 (NHWC fp16, fuse-bn, conv-bn-stats): the bottlenecks' BNs not at a block end
 *     (bn1, bn2 of 16 blocks: 32) take the prologue; the stem BN (read by MaxPool), block
 *     ends and shortcut BNs keep Y.
 *   - off without the option, and kiln_pass_conv_bn_prologue_env() only with
 *     KILN_CUDA_BN_PROLOGUE=1; the trainer (kiln_trainer_create_plan, resnet18 AMP fp16): its
 *     CUDA training graph has the 8 prologue BNs only with KILN_CUDA_BN_PROLOGUE=1 and in a
 *     build with the CUDA backend (none in a CPU-only build: no kernels), the CPU trainer's never.
 * Exits non-zero on any failure. */
#include "check.h"
#include "core/backend.h"
#include "core/optest.h"
#include "core/plan.h"
#include "passes/passes.h"
#include "train/recompute.h"
#include "train/trainer_internal.h"

#include "kiln_models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
static kiln_context *ctx;

#include "same_function.h"
#include "train_graph.h"

static int count_op(const kiln_model *m, const char *op) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++) n += strcmp(m->nodes[i].op_type, op) == 0;
    return n;
}

typedef struct counts {
    int bns, fwd, gw, gi; /* BNs without Y with P; FusedConv with input 4; ConvGradWeight with input 3; ConvGradInput reading a prologue BN's X */
} counts;

static counts count_prologue(const kiln_model *m) {
    counts k = {0};
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *n = &m->nodes[i];
        if (strcmp(n->op_type, "BatchNormalization") == 0 && kiln_attr_int(n, "write_y", 1) == 0 && n->n_out > 4 &&
            n->out[4] >= 0) {
            k.bns++;
            for (int j = 0; j < m->n_nodes; j++) {
                const kiln_node *r = &m->nodes[j];
                k.gi += strcmp(r->op_type, "ConvGradInput") == 0 && r->in[2] == n->in[0];
            }
        }
        k.fwd += strcmp(n->op_type, "FusedConv") == 0 && n->n_in > 4 && n->in[4] >= 0;
        k.gw += strcmp(n->op_type, "ConvGradWeight") == 0 && n->n_in > 3 && n->in[3] >= 0;
    }
    return k;
}

/* out = m (finalized) with fuse-bn, conv-bn-stats and, when on, conv-bn-prologue, for the CPU */
static kiln_status passes(const kiln_model *m, bool on, kiln_model **out, bool *changed) {
    const kiln_pass_options o = {.device = KILN_DEVICE_CPU, .conv_bn_stats = true, .conv_bn_prologue = on};
    bool c0 = false, c1 = false;
    *changed = false;
    kiln_status st = kiln_model_clone(m, out);
    if (!st) st = kiln_pass_fuse_bn(*out, &o, &c0);
    if (!st) st = kiln_pass_conv_bn_stats(*out, &o, &c0);
    if (!st) st = kiln_pass_conv_bn_prologue(*out, &o, &c1);
    if (!st) st = kiln_model_finalize(*out);
    *changed = c1;
    return st;
}

/* A measure for kiln_recompute_fit that only counts copies: the arena shrinks by 1 MB with
 * each recomputed value (as test_conv_bn_stats.c's). */
static kiln_status by_copies(void *user, kiln_model *m, size_t *arena, size_t *ws) {
    (void)user;
    int copies = 0;
    for (int i = 0; i < m->n_nodes; i++)
        copies += kiln_attr_int(&m->nodes[i], "kiln_recompute", 0) == 1 && m->nodes[i].name &&
                  strstr(m->nodes[i].name, ":for") == NULL;
    if (arena) *arena = ((size_t)1 << 40) - ((size_t)copies << 20);
    if (ws) *ws = 0;
    return KILN_OK;
}


static size_t arena_of(kiln_model *m, kiln_tensor *const *feeds) {
    size_t a = 0, ws = 0;
    if (kiln_plan_measure(m, feeds, true, 0, &a, &ws)) CHECK(0, "plan: %s", kiln_context_message(ctx));
    return a;
}

static void resnet18(bool fp16) {
    const char *label = fp16 ? "resnet18 training graph, fp16 NHWC" : "resnet18 training graph, fp32";
    printf("-- %s\n", label);
    kiln_model *fwd = NULL, *m = NULL, *bw = NULL, *laid = NULL, *ref = NULL, *opt = NULL, *bad = NULL, *off = NULL;
    kiln_trainer *t = NULL;
    kiln_tensor *image = NULL, *lab = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD, .momentum = 0.9f};
    bool changed = false;
    if (kiln_model_resnet(ctx, 18, 10, 64, 5, 0, &fwd) || kiln_model_add_classifier_loss(fwd, "logits", 0, &m) ||
        kiln_trainer_create(m, "loss", &o, &t) || !(bw = backward_graph(t))) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    if (fp16) { /* the CUDA trainer's layout and precision (src/train/trainer.c), only them */
        const kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP16,
                                      .disabled = ~(unsigned)KILN_PASS_NHWC};
        if (kiln_passes_apply(bw, &po, &laid)) {
            CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
            goto out;
        }
    }
    if (passes(fp16 ? laid : bw, false, &ref, &changed) || passes(fp16 ? laid : bw, true, &opt, &changed)) {
        CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
        goto out;
    }
    CHECK(changed, "%s: the pass reports no change", label);
    const counts k = count_prologue(opt);
    printf("  %d BNs without Y (output 4 P), %d FusedConv with a prologue, %d ConvGradWeight with one, %d ConvGradInput "
           "reading the BN's X; %d nodes (%d before)\n",
           k.bns, k.fwd, k.gw, k.gi, opt->n_nodes, ref->n_nodes);
    CHECK(k.bns == 8 && k.fwd == 8 && k.gw == 8 && k.gi == 8 && opt->n_nodes == ref->n_nodes &&
              count_op(opt, "Conv") == 0 && count_op(opt, "BatchNormalization") == 20,
          "%s: want 8 BNs, 8 FusedConv, 8 ConvGradWeight, 8 ConvGradInput, node count unchanged", label);
    CHECK(topological_order(opt), "%s: the nodes are not in a topological order", label);

    image = kt_rand(KILN_F32, 4, (int64_t[]){2, 3, 64, 64}, -2, 2, 31);
    lab = kt_rand(KILN_I64, 1, (int64_t[]){2}, 0, 10, 32);
    t->feeds[0] = image;
    t->feeds[1] = lab;
    if (fp16) {
        same_norm(label, ref, opt, t->feeds, 0.3, 1e-2);
        goto out;
    }
    same_function(label, ref, opt, t->feeds, 1e-4, 0, NULL);

    /* the compare can fail: the first prologue convolution reads another BN's P */
    if (kiln_model_clone(opt, &bad)) {
        CHECK(0, "%s: clone", label);
        goto out;
    }
    {
        int first = -1, second = -1;
        for (int i = 0; i < bad->n_nodes; i++) {
            const kiln_node *n = &bad->nodes[i];
            if (strcmp(n->op_type, "FusedConv") == 0 && n->n_in > 4 && n->in[4] >= 0) {
                if (first < 0) first = i;
                else if (bad->values[n->in[4]].dims[1] == bad->values[bad->nodes[first].in[4]].dims[1] &&
                         n->in[4] != bad->nodes[first].in[4]) {
                    second = i;
                    break;
                }
            }
        }
        if (first >= 0 && second >= 0) {
            bad->nodes[second].in[4] = bad->nodes[first].in[4]; /* the earlier one's: no cycle */
            if (!kiln_model_finalize(bad)) {
                const int before = fails;
                printf("  (the next compare must fail: a wrong prologue)\n");
                same_function("resnet18 with a wrong prologue (must differ)", ref, bad, t->feeds, 1e-4, 0, NULL);
                CHECK(fails > before, "%s: a wrong prologue went unnoticed", label);
                fails = before;
            } else {
                CHECK(0, "%s: finalize: %s", label, kiln_context_message(ctx));
            }
        } else {
            CHECK(0, "%s: no two prologues of one width to swap", label);
        }
    }

    /* the memory plan: the a1 tensors are gone */
    {
        const size_t a0 = arena_of(ref, t->feeds), a1 = arena_of(opt, t->feeds);
        printf("  arena: %zu bytes without the pass, %zu with it\n", a0, a1);
        CHECK(a1 < a0, "%s: the arena did not shrink (%zu -> %zu)", label, a0, a1);
    }
    /* activation checkpointing over the pass's graph computes the same, bit for bit */
    {
        kiln_recompute_result r0 = {0}, r1 = {0};
        kiln_model *rec = NULL;
        kiln_status rs = kiln_recompute_fit(opt, t->feeds, by_copies, NULL, 0, -1, true, &rec, &r0);
        kiln_model_free(rec);
        rec = NULL;
        if (!rs && r0.candidates > 1) {
            rs = kiln_recompute_fit(opt, t->feeds, by_copies, NULL, 1, -1, true, &rec, &r1);
            kiln_model_free(rec);
            rec = NULL;
            if (rs == KILN_ERR_OUT_OF_MEMORY)
                rs = kiln_recompute_fit(opt, t->feeds, by_copies, NULL, r1.arena_after, -1, true, &rec, &r1);
        }
        if (rs || !rec) {
            CHECK(0, "%s: recomputation: %s (status %d; %d candidates)", label,
                  rs ? kiln_context_message(ctx) : "nothing rewritten", (int)rs, r0.candidates);
        } else {
            printf("  recomputation: %d of %d candidates recomputed\n", r1.recomputed, r1.candidates);
            CHECK(r1.recomputed > 0, "%s: nothing recomputed", label);
            same_function("resnet18 with the pass, recomputed", opt, rec, t->feeds, 0, 0, NULL);
        }
        kiln_model_free(rec);
    }

    /* off: the option unset, and the pass table without it */
    if (passes(bw, false, &off, &changed)) CHECK(0, "%s: off: %s", label, kiln_context_message(ctx));
    else CHECK(!changed && count_prologue(off).bns == 0, "%s: rewritten with the option off", label);
    kiln_model_free(off);
    off = NULL;
    const kiln_pass_options table = {.device = KILN_DEVICE_CPU, .disabled = ~0u, .conv_bn_stats = true};
    if (kiln_passes_apply(bw, &table, &off)) CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
    else CHECK(count_prologue(off).bns == 0, "%s: the pass table ran conv-bn-prologue without the option", label);
    kiln_model_free(off);
    off = NULL;
    const kiln_pass_options on = {.device = KILN_DEVICE_CPU, .disabled = ~(unsigned)(KILN_PASS_FUSE_BN | KILN_PASS_BN_MASK_FROM_X),
                                  .conv_bn_stats = true, .conv_bn_prologue = true};
    if (kiln_passes_apply(bw, &on, &off)) CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
    else CHECK(count_prologue(off).bns == 8, "%s: the pass table did not run conv-bn-prologue with the option (%d)",
               label, count_prologue(off).bns);
out:
    if (t) t->feeds[0] = t->feeds[1] = NULL;
    kiln_tensor_free(image);
    kiln_tensor_free(lab);
    kiln_trainer_free(t);
    kiln_model_free(fwd);
    kiln_model_free(m);
    kiln_model_free(bw);
    kiln_model_free(laid);
    kiln_model_free(ref);
    kiln_model_free(opt);
    kiln_model_free(bad);
    kiln_model_free(off);
}

static void resnet50_counts(void) {
    const char *label = "resnet50 training graph, NHWC fp16";
    printf("-- %s\n", label);
    kiln_model *fwd = NULL, *m = NULL, *bw = NULL, *laid = NULL, *ref = NULL, *opt = NULL;
    kiln_trainer *t = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD, .momentum = 0.9f};
    const kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP16,
                                  .disabled = ~(unsigned)KILN_PASS_NHWC};
    bool changed = false;
    if (kiln_model_resnet(ctx, 50, 10, 64, 5, 0, &fwd) || kiln_model_add_classifier_loss(fwd, "logits", 0, &m) ||
        kiln_trainer_create(m, "loss", &o, &t) || !(bw = backward_graph(t)) || kiln_passes_apply(bw, &po, &laid) ||
        passes(laid, false, &ref, &changed) || passes(laid, true, &opt, &changed)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    const counts k = count_prologue(opt);
    int f16 = 0; /* the prologue convolutions read an f16 NHWC X and an f32 P */
    for (int i = 0; i < opt->n_nodes; i++) {
        const kiln_node *c = &opt->nodes[i];
        if (strcmp(c->op_type, "FusedConv") != 0 || c->n_in < 5 || c->in[4] < 0) continue;
        f16 += opt->values[c->in[0]].dtype == KILN_F16 && opt->values[c->in[0]].format == KILN_FORMAT_NHWC &&
               opt->values[c->in[4]].dtype == KILN_F32;
    }
    printf("  %d of %d BNs without Y; %d FusedConv (%d f16 NHWC) / %d ConvGradWeight with a prologue, %d ConvGradInput; "
           "%d nodes (%d before)\n",
           k.bns, count_op(opt, "BatchNormalization"), k.fwd, f16, k.gw, k.gi, opt->n_nodes, ref->n_nodes);
    CHECK(k.bns == 32 && k.fwd == 32 && f16 == 32 && k.gw == 32 && k.gi == 32 && opt->n_nodes == ref->n_nodes,
          "%s: want 32 BNs without Y, 32 prologue convolutions each way, node count unchanged", label);
    CHECK(topological_order(opt), "%s: the nodes are not in a topological order", label);
out:
    kiln_trainer_free(t);
    kiln_model_free(fwd);
    kiln_model_free(m);
    kiln_model_free(bw);
    kiln_model_free(laid);
    kiln_model_free(ref);
    kiln_model_free(opt);
}

static void env(void) {
    printf("-- KILN_CUDA_BN_PROLOGUE\n");
    unsetenv("KILN_CUDA_BN_PROLOGUE");
    CHECK(!kiln_pass_conv_bn_prologue_env(), "on without KILN_CUDA_BN_PROLOGUE");
    setenv("KILN_CUDA_BN_PROLOGUE", "0", 1);
    CHECK(!kiln_pass_conv_bn_prologue_env(), "on with KILN_CUDA_BN_PROLOGUE=0");
    setenv("KILN_CUDA_BN_PROLOGUE", "1", 1);
    CHECK(kiln_pass_conv_bn_prologue_env(), "off with KILN_CUDA_BN_PROLOGUE=1");
    unsetenv("KILN_CUDA_BN_PROLOGUE");
}

/* The trainer's training graph for device dev (fp16 AMP), with KILN_CUDA_BN_PROLOGUE=1 when
 * on: how many BNs give their apply to the convolutions' prologue. */
static int trainer_prologues(kiln_device dev, bool on) {
    if (on) setenv("KILN_CUDA_BN_PROLOGUE", "1", 1);
    else unsetenv("KILN_CUDA_BN_PROLOGUE");
    kiln_model *fwd = NULL, *m = NULL;
    kiln_trainer *t = NULL;
    kiln_train_options o = KILN_TRAIN_OPTIONS_INIT;
    o.optimizer = KILN_OPTIM_SGD;
    o.momentum = 0.9f;
    o.device = dev;
    o.amp = KILN_AMP_FP16;
    int n = -1;
    if (kiln_model_resnet(ctx, 18, 10, 64, 1, 0, &fwd) || kiln_model_add_classifier_loss(fwd, "logits", 0, &m) ||
        kiln_trainer_create_plan(m, "loss", &o, &t))
        CHECK(0, "trainer plan (%s): %s", dev == KILN_DEVICE_CUDA ? "cuda" : "cpu", kiln_context_message(ctx));
    else {
        n = count_prologue(t->train).bns;
        CHECK(topological_order(t->train), "trainer plan: not in a topological order");
    }
    unsetenv("KILN_CUDA_BN_PROLOGUE");
    kiln_trainer_free(t);
    kiln_model_free(fwd);
    kiln_model_free(m);
    return n;
}

static void trainer(void) {
    printf("-- the trainer's graphs (resnet18, AMP fp16)\n");
    const bool cuda = kiln_backend_for(KILN_DEVICE_CUDA) != NULL;
    const int def = trainer_prologues(KILN_DEVICE_CUDA, false), on = trainer_prologues(KILN_DEVICE_CUDA, true),
              cpu = trainer_prologues(KILN_DEVICE_CPU, true);
    printf("  CUDA graph: %d BNs in a prologue by default, %d with KILN_CUDA_BN_PROLOGUE=1; CPU graph with it: %d (%s "
           "build)\n",
           def, on, cpu, cuda ? "CUDA" : "CPU-only");
    CHECK(def == 0 && on == (cuda ? 8 : 0) && cpu == 0, "trainer: want 0, %d and 0", cuda ? 8 : 0);
}

int main(void) {
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    resnet18(false);
    resnet18(true);
    resnet50_counts();
    env();
    trainer();
    kiln_context_free(ctx);
    printf("%s\n", fails ? "FAILED" : "all conv-bn-prologue checks passed");
    return fails != 0;
}
