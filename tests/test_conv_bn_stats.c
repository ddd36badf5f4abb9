/* test_conv_bn_stats.c — the conv-bn-stats pass (src/passes/conv_bn_stats.c) on the CPU.
 *
 *   - resnet18's training graph (forward, autograd's backward, loss; batch 2 at 64x64),
 *     fp32, fuse-bn applied as the CUDA trainer does (so the BNs carry relu = 1 and the
 *     residual), then conv-bn-stats: each of the 20 training BatchNormalizations reads its
 *     statistics (inputs 6, 7) from the kiln.FusedConv that writes its X (the 20 Convs turned
 *     into FusedConvs with outputs 1, 2), no node added or removed, the nodes in a
 *     topological order; the loss, every gradient and the running statistics within 1e-6
 *     of each output's largest value of the graph without the pass (the statistics from
 *     f64 sums as E[x^2] - mean^2 instead of the reference's two passes in double; the sums
 *     f64 values in this fp32 graph, f32 in the fp16 one below); and the
 *     same compare with the first BN reading wrong sums (its sum of squares as its sum)
 *     must fail (its FAIL lines are expected), so the compare can fail.
 *   - activation checkpointing keeps working: the pass's FusedConvs (three outputs) are
 *     recomputation candidates of the second tier (src/train/recompute.c), their copies
 *     write Y alone, and the graph with every candidate recomputed computes the same as
 *     without recomputation, bit for bit.
 *   - resnet50's training graph as the CUDA trainer lays it out (NHWC fp16, fuse-bn): 53
 *     BatchNormalizations take their sums from 53 FusedConvs; node count unchanged.
 *   - kiln_passes_apply without conv_bn_stats changes nothing; kiln_pass_conv_bn_stats_env()
 *     is false only with KILN_CUDA_CONV_STATS=0.
 *   - SyncBatchNorm with the sums (the CPU reference, src/ops/batch_normalization.c): over a
 *     communicator whose all-reduce doubles every value (two ranks holding the same batch),
 *     a training BN given X's sums computes what the plain BN computes on one process (Y and
 *     the running statistics within 1e-5 of their largest value), with relu = 1 too; and
 *     with sums of another tensor it does not (the compare can fail). And a channel of small
 *     variance beside its mean: f64 sums give the two-pass statistics, f32 ones do not.
 *   - the trainer (kiln_trainer_create_plan, resnet18 AMP fp16): its CUDA training graph has
 *     the 20 BNs reading sums by default in a build with the CUDA backend (none in a CPU-only
 *     build: no kiln.FusedConv kernel to run them), none with KILN_CUDA_CONV_STATS=0 or
 *     KILN_PASS_CONV_BN_STATS disabled, and the CPU trainer's never.
 * Exits non-zero on any failure. */
#include "check.h"
#include "core/backend.h"
#include "core/optest.h"
#include "core/plan.h"
#include "dist/dist.h"
#include "train/recompute.h"
#include "passes/passes.h"
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

/* training BNs reading sums (inputs 6, 7) written as outputs 1, 2 of the FusedConv writing X */
static int bns_with_sums(const kiln_model *m) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *b = &m->nodes[i];
        if (strcmp(b->op_type, "BatchNormalization") != 0 || b->n_in < 8 || b->in[6] < 0 || b->in[7] < 0) continue;
        const int p = m->values[b->in[0]].producer;
        const kiln_node *c = p >= 0 ? &m->nodes[p] : NULL;
        n += c && strcmp(c->op_type, "FusedConv") == 0 && c->n_out >= 3 && c->out[1] == b->in[6] && c->out[2] == b->in[7];
    }
    return n;
}

/* opt = a finalized copy of m with the pass (for the CPU, conv_bn_stats on or off) */
static kiln_status apply(const kiln_model *m, bool on, kiln_model **opt, bool *changed) {
    const kiln_pass_options cpu = {.device = KILN_DEVICE_CPU, .conv_bn_stats = on};
    *changed = false;
    kiln_status st = kiln_model_clone(m, opt);
    if (!st) st = kiln_pass_conv_bn_stats(*opt, &cpu, changed);
    if (!st) st = kiln_model_finalize(*opt);
    return st;
}

/* m's fuse-bn form, as the CUDA trainer's graph has it when conv-bn-stats runs */
static kiln_status fuse_bn(const kiln_model *m, kiln_model **out) {
    const kiln_pass_options cpu = {.device = KILN_DEVICE_CPU};
    bool changed = false;
    kiln_status st = kiln_model_clone(m, out);
    if (!st) st = kiln_pass_fuse_bn(*out, &cpu, &changed);
    if (!st) st = kiln_model_finalize(*out);
    return st;
}

/* A measure for kiln_recompute_fit that only counts copies: the arena shrinks by 1 MB with
 * each recomputed value. */
#define COPY_ARENA(k) ((size_t)1 << 40) - ((size_t)(k) << 20)
static kiln_status by_copies(void *user, kiln_model *m, size_t *arena, size_t *ws) {
    (void)user;
    int copies = 0;
    for (int i = 0; i < m->n_nodes; i++)
        copies += kiln_attr_int(&m->nodes[i], "kiln_recompute", 0) == 1 && m->nodes[i].name &&
                  strstr(m->nodes[i].name, ":for") == NULL;
    if (arena) *arena = COPY_ARENA(copies);
    if (ws) *ws = 0;
    return KILN_OK;
}

static void resnet18(void) {
    const char *label = "resnet18 training graph, fp32, fuse-bn";
    printf("-- %s\n", label);
    kiln_model *fwd = NULL, *m = NULL, *bw = NULL, *ref = NULL, *opt = NULL, *off = NULL, *bad = NULL;
    kiln_trainer *t = NULL;
    kiln_tensor *image = NULL, *lab = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD, .momentum = 0.9f};
    bool changed = false;
    if (kiln_model_resnet(ctx, 18, 10, 64, 5, 0, &fwd) || kiln_model_add_classifier_loss(fwd, "logits", 0, &m) ||
        kiln_trainer_create(m, "loss", &o, &t) || !(bw = backward_graph(t)) || fuse_bn(bw, &ref) ||
        apply(ref, true, &opt, &changed)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    CHECK(changed, "%s: the pass reports no change", label);
    printf("  before: %d Conv, %d FusedConv, %d BatchNormalization, %d nodes\n", count_op(ref, "Conv"),
           count_op(ref, "FusedConv"), count_op(ref, "BatchNormalization"), ref->n_nodes);
    printf("  after:  %d Conv, %d FusedConv, %d BatchNormalization with sums, %d nodes\n", count_op(opt, "Conv"),
           count_op(opt, "FusedConv"), bns_with_sums(opt), opt->n_nodes);
    CHECK(count_op(ref, "BatchNormalization") == 20 && count_op(ref, "Conv") == 20,
          "%s: the graph is not resnet18's (20 Conv, 20 BN)", label);
    CHECK(bns_with_sums(opt) == 20 && count_op(opt, "Conv") == 0 && count_op(opt, "FusedConv") == 20 &&
              opt->n_nodes == ref->n_nodes,
          "%s: %d BNs with the convolution's sums, %d Conv / %d FusedConv left, %d nodes (want 20, 0 / 20, %d)", label,
          bns_with_sums(opt), count_op(opt, "Conv"), count_op(opt, "FusedConv"), opt->n_nodes, ref->n_nodes);
    CHECK(topological_order(opt), "%s: the nodes are not in a topological order", label);
    int f64_sums = 0; /* fp32 training: the sums f64 (an f32 rounding of sumsq grows by mean^2 / var) */
    for (int i = 0; i < opt->n_nodes; i++) {
        const kiln_node *c = &opt->nodes[i];
        if (strcmp(c->op_type, "FusedConv") == 0 && c->n_out >= 3)
            f64_sums += opt->values[c->out[1]].dtype == KILN_F64 && opt->values[c->out[2]].dtype == KILN_F64;
    }
    CHECK(f64_sums == 20, "%s: %d of the 20 convolutions' sums are f64", label, f64_sums);

    image = kt_rand(KILN_F32, 4, (int64_t[]){2, 3, 64, 64}, -2, 2, 31);
    lab = kt_rand(KILN_I64, 1, (int64_t[]){2}, 0, 10, 32);
    t->feeds[0] = image;
    t->feeds[1] = lab;
    same_function(label, ref, opt, t->feeds, 1e-6, 0, NULL); /* (f32 sums needed 1e-4) */

    /* the compare can fail: the first BN reads the sums of squares as its sums */
    if (kiln_model_clone(opt, &bad)) {
        CHECK(0, "%s: clone", label);
        goto out;
    }
    for (int i = 0; i < bad->n_nodes; i++)
        if (strcmp(bad->nodes[i].op_type, "BatchNormalization") == 0 && bad->nodes[i].n_in >= 8) {
            bad->nodes[i].in[6] = bad->nodes[i].in[7];
            break;
        }
    if (!kiln_model_finalize(bad)) {
        const int before = fails;
        printf("  (the next compare must fail: wrong sums)\n");
        same_function("resnet18 with wrong sums (must differ)", ref, bad, t->feeds, 1e-4, 0, NULL);
        CHECK(fails > before, "%s: wrong sums were not noticed", label);
        fails = before;
    } else {
        CHECK(0, "%s: finalize: %s", label, kiln_context_message(ctx));
    }

    /* activation checkpointing over the pass's graph: convolutions with statistics outputs
     * are candidates too, and with the most copies this measure reaches (it shrinks with each
     * copy; at least half the pass's convolutions among them) the function is the same bit
     * for bit */
    {
        kiln_recompute_result r0 = {0}, r1 = {0};
        kiln_model *rec = NULL;
        kiln_status rs = kiln_recompute_fit(opt, t->feeds, by_copies, NULL, 0, -1, true, &rec, &r0); /* measure only */
        kiln_model_free(rec);
        rec = NULL;
        int stats_convs = 0; /* candidates: the pass's FusedConvs are */
        for (int i = 0; i < opt->n_nodes; i++) stats_convs += strcmp(opt->nodes[i].op_type, "FusedConv") == 0;
        if (!rs && r0.candidates > 1) { /* the least this measure reaches (the most copies), then that budget */
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
            int conv_copies = 0;
            for (int i = 0; i < rec->n_nodes; i++)
                conv_copies += strcmp(rec->nodes[i].op_type, "FusedConv") == 0 &&
                               kiln_attr_int(&rec->nodes[i], "kiln_recompute", 0) == 1 && rec->nodes[i].n_out == 1;
            printf("  recomputation: %d of %d candidates recomputed, %d FusedConv copies (Y alone)\n", r1.recomputed,
                   r1.candidates, conv_copies);
            CHECK(conv_copies >= stats_convs / 2, "%s: %d of the %d convolutions with statistics outputs recomputed",
                  label, conv_copies, stats_convs);
            same_function("resnet18 with the pass, recomputed", opt, rec, t->feeds, 0, 0, NULL);
        }
        kiln_model_free(rec);
    }

    /* off: the option unset, and the pass table without it */
    changed = true;
    kiln_model_free(off);
    off = NULL;
    if (apply(ref, false, &off, &changed)) CHECK(0, "%s: off: %s", label, kiln_context_message(ctx));
    else CHECK(!changed && bns_with_sums(off) == 0 && count_op(off, "Conv") == 20, "%s: rewritten with the option off", label);
    kiln_model_free(off);
    off = NULL;
    const kiln_pass_options table = {.device = KILN_DEVICE_CPU, .disabled = ~0u};
    if (kiln_passes_apply(ref, &table, &off)) CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
    else CHECK(bns_with_sums(off) == 0, "%s: the pass table ran conv-bn-stats without the option", label);
    kiln_model_free(off);
    off = NULL;
    const kiln_pass_options on = {.device = KILN_DEVICE_CPU, .disabled = ~0u, .conv_bn_stats = true};
    if (kiln_passes_apply(ref, &on, &off)) CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
    else CHECK(bns_with_sums(off) == 20, "%s: the pass table did not run conv-bn-stats with the option", label);

    /* the inference graph: no training BatchNormalization */
    kiln_model_free(opt);
    opt = NULL;
    changed = true;
    if (apply(fwd, true, &opt, &changed)) CHECK(0, "%s: inference graph: %s", label, kiln_context_message(ctx));
    else CHECK(!changed && count_op(opt, "FusedConv") == 0, "%s: the inference graph was rewritten", label);
out:
    if (t) t->feeds[0] = t->feeds[1] = NULL;
    kiln_tensor_free(image);
    kiln_tensor_free(lab);
    kiln_trainer_free(t);
    kiln_model_free(fwd);
    kiln_model_free(m);
    kiln_model_free(bw);
    kiln_model_free(ref);
    kiln_model_free(opt);
    kiln_model_free(off);
    kiln_model_free(bad);
}

/* ResNet-50's training graph as the CUDA trainer lays it out (NHWC fp16), fuse-bn, then the
 * pass: all 53 BNs (every one follows a convolution) read their convolution's sums. */
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
        fuse_bn(laid, &ref) || apply(ref, true, &opt, &changed)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    int f16_nhwc = 0; /* the sums f32 (C); the convolutions' Y f16 NHWC */
    for (int i = 0; i < opt->n_nodes; i++) {
        const kiln_node *c = &opt->nodes[i];
        if (strcmp(c->op_type, "FusedConv") != 0 || c->n_out < 3) continue;
        f16_nhwc += opt->values[c->out[0]].dtype == KILN_F16 && opt->values[c->out[0]].format == KILN_FORMAT_NHWC &&
                    opt->values[c->out[1]].dtype == KILN_F32 && opt->values[c->out[2]].dtype == KILN_F32;
    }
    printf("  %d BatchNormalization, %d with the convolution's sums; %d FusedConv (%d f16 NHWC with f32 sums); "
           "%d nodes (%d before)\n",
           count_op(opt, "BatchNormalization"), bns_with_sums(opt), count_op(opt, "FusedConv"), f16_nhwc, opt->n_nodes,
           ref->n_nodes);
    CHECK(count_op(ref, "BatchNormalization") == 53 && bns_with_sums(opt) == 53 && f16_nhwc == 53 &&
              opt->n_nodes == ref->n_nodes,
          "%s: want 53 BNs with sums from 53 f16 NHWC FusedConvs, node count unchanged", label);
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
    printf("-- KILN_CUDA_CONV_STATS\n");
    unsetenv("KILN_CUDA_CONV_STATS");
    CHECK(kiln_pass_conv_bn_stats_env(), "off without KILN_CUDA_CONV_STATS");
    setenv("KILN_CUDA_CONV_STATS", "0", 1);
    CHECK(!kiln_pass_conv_bn_stats_env(), "on with KILN_CUDA_CONV_STATS=0");
    setenv("KILN_CUDA_CONV_STATS", "1", 1);
    CHECK(kiln_pass_conv_bn_stats_env(), "off with KILN_CUDA_CONV_STATS=1");
    unsetenv("KILN_CUDA_CONV_STATS");
}

/* A communicator of two ranks holding the same batch: every all-reduce doubles. */
static kiln_status twice_f64(kiln_dist *d, double *buf, int64_t n) {
    (void)d;
    for (int64_t i = 0; i < n; i++) buf[i] *= 2;
    return KILN_OK;
}
static const kiln_dist_impl twice = {.name = "twice", .allreduce_f64 = twice_f64};

/* One BatchNormalization node (opset 15, attrs) on in[] (n_in) into out[3]. */
static kiln_status bn_eval(const char *attrs, int n_in, kiln_tensor **in, kiln_tensor **out) {
    int outs[3] = {17, 18, 19};
    kiln_node node = {.op_type = "BatchNormalization", .name = "syncbn", .domain = "", .opset = 15, .n_in = n_in,
                      .n_out = 3, .out = outs};
    node.op = kiln_op_index_domain("", "BatchNormalization");
    kiln_status st = kiln_attrs_parse(ctx, attrs, &node.attrs, &node.n_attrs);
    if (!st) st = kiln_op_eval(ctx, &node, n_in, in, 3, out);
    for (int i = 0; i < node.n_attrs; i++) kiln_attr_clear(&node.attrs[i]);
    free(node.attrs);
    return st;
}

/* largest |a - b| over the three outputs, relative to each output's largest |b| */
static double worst_rel(kiln_tensor **a, kiln_tensor **b) {
    double worst = 0;
    for (int k = 0; k < 3; k++) {
        double d = 0, mx = 0;
        for (int64_t i = 0; i < kiln_tensor_numel(b[k]); i++) {
            d = fmax(d, fabs(kiln_get_f64(a[k], i) - kiln_get_f64(b[k], i)));
            mx = fmax(mx, fabs(kiln_get_f64(b[k], i)));
        }
        worst = fmax(worst, mx > 0 ? d / mx : d);
    }
    return worst;
}

static void syncbn(void) {
    printf("-- SyncBatchNorm with the convolution's sums (CPU reference)\n");
    kiln_dist fake = {.ctx = ctx, .id = 7, .rank = 0, .size = 2, .local_rank = 0, .timeout_s = 10, .host = &twice};
    static const char *const forms[2][2] = {{"training_mode=1;momentum=0.8", "training_mode=1;momentum=0.8;sync_comm=7"},
                                            {"training_mode=1;relu=1", "training_mode=1;relu=1;sync_comm=7"}};
    for (int f = 0; f < 2; f++) {
        const int64_t xd[4] = {3, 8, 5, 4}, c = 8;
        kiln_tensor *in[8] = {kt_rand(KILN_F32, 4, xd, -2, 3, 900 + f), kt_rand(KILN_F32, 1, &c, 0.5, 1.5, 910),
                              kt_rand(KILN_F32, 1, &c, -1, 1, 911),         kt_rand(KILN_F32, 1, &c, -1, 1, 912),
                              kt_rand(KILN_F32, 1, &c, 0.5, 1.5, 913),      NULL};
        kiln_tensor *other = kt_rand(KILN_F32, 4, xd, -1, 1, 920 + f), *want[3] = {0}, *got[3] = {0}, *bad[3] = {0};
        kt_channel_sums(in[0], 1.0, &in[6], &in[7]);
        kiln_status st = bn_eval(forms[f][0], 5, in, want); /* one process, its own statistics */
        ctx->dist = &fake;
        if (!st) st = bn_eval(forms[f][1], 8, in, got);
        kiln_tensor_free(in[6]);
        kiln_tensor_free(in[7]);
        kt_channel_sums(other, 1.0, &in[6], &in[7]); /* sums of another tensor: must differ */
        if (!st) st = bn_eval(forms[f][1], 8, in, bad);
        ctx->dist = NULL;
        if (st) {
            CHECK(0, "syncbn %s: %s", forms[f][1], kiln_context_message(ctx));
        } else {
            const double e = worst_rel(got, want), eb = worst_rel(bad, want);
            printf("  %s: within %.3g of the one-process BN (wrong sums: %.3g)\n", forms[f][1], e, eb);
            CHECK(e <= 1e-5, "syncbn %s with sums differs by %.3g", forms[f][1], e);
            CHECK(eb > 1e-2, "syncbn %s: wrong sums went unnoticed (%.3g)", forms[f][1], eb);
        }
        for (int i = 0; i < 8; i++) kiln_tensor_free(in[i]);
        for (int k = 0; k < 3; k++) {
            kiln_tensor_free(want[k]);
            kiln_tensor_free(got[k]);
            kiln_tensor_free(bad[k]);
        }
        kiln_tensor_free(other);
    }
    /* A channel whose variance is small beside its mean (X = 40 + U(-0.05, 0.05): mean^2 / var
     * ~ 2e6): var = sumsq / M - mean^2 from the sums. With the sums in f64 (what the
     * convolution writes for an f32 Y) the BN matches the two-pass one to 1e-5, synced or not;
     * the same sums rounded to f32 do not (sumsq's rounding, 6e-8 of it, is then ~10% of var:
     * resnet18 drifted from the plain trainer under SyncBatchNorm that way). */
    {
        const int64_t xd[4] = {4, 3, 6, 6}, c = 3;
        kiln_tensor *x = kt_rand(KILN_F32, 4, xd, -0.05, 0.05, 930);
        for (int64_t i = 0; i < kiln_tensor_numel(x); i++) ((float *)x->data)[i] += 40.0f;
        kiln_tensor *in[8] = {x, kt_rand(KILN_F32, 1, &c, 0.5, 1.5, 931), kt_rand(KILN_F32, 1, &c, -1, 1, 932),
                              kt_rand(KILN_F32, 1, &c, -1, 1, 933), kt_rand(KILN_F32, 1, &c, 0.5, 1.5, 934), NULL};
        kiln_tensor *want[3] = {0}, *plain[3] = {0}, *got[3] = {0}, *rounded[3] = {0}, *s32[2] = {0};
        kt_channel_sums(x, 1.0, &in[6], &in[7]);
        const bool f64 = in[6] && in[6]->dtype == KILN_F64;
        kiln_status st = bn_eval("training_mode=1", 5, in, want);
        if (!st) st = bn_eval("training_mode=1", 8, in, plain);
        ctx->dist = &fake;
        if (!st) st = bn_eval("training_mode=1;sync_comm=7", 8, in, got);
        ctx->dist = NULL;
        for (int k = 0; k < 2; k++) { /* the same sums as f32 */
            s32[k] = kt_make(KILN_F32, 1, &c, NULL);
            for (int64_t i = 0; i < c && s32[k]; i++) kiln_set_f64(s32[k], i, kiln_get_f64(in[6 + k], i));
        }
        kiln_tensor *in32[8] = {in[0], in[1], in[2], in[3], in[4], NULL, s32[0], s32[1]};
        if (!st) st = bn_eval("training_mode=1", 8, in32, rounded);
        if (st) {
            CHECK(0, "syncbn, small variance: %s", kiln_context_message(ctx));
        } else {
            const double ep = worst_rel(plain, want), es = worst_rel(got, want), er = worst_rel(rounded, want);
            printf("  small variance beside the mean: f64 sums within %.3g (synced %.3g) of the two-pass BN; "
                   "f32 sums %.3g\n", ep, es, er);
            CHECK(f64, "kt_channel_sums of an f32 X: want f64 sums (the convolution's dtype)");
            CHECK(ep <= 1e-5 && es <= 1e-5, "small variance: f64 sums differ by %.3g (synced %.3g)", ep, es);
            CHECK(er > 1e-3, "small variance: f32 sums were as good (%.3g): the case is not ill-conditioned", er);
        }
        for (int i = 0; i < 8; i++) kiln_tensor_free(in[i]);
        for (int k = 0; k < 3; k++) {
            kiln_tensor_free(want[k]);
            kiln_tensor_free(plain[k]);
            kiln_tensor_free(got[k]);
            kiln_tensor_free(rounded[k]);
        }
        kiln_tensor_free(s32[0]);
        kiln_tensor_free(s32[1]);
    }
}

/* The trainer's training graph for device dev (fp16 AMP), by default or turned off (off 1:
 * KILN_CUDA_CONV_STATS=0, 2: KILN_PASS_CONV_BN_STATS disabled): how many BNs read the
 * convolution's sums. */
static int trainer_sums(kiln_device dev, int off) {
    if (off == 1) setenv("KILN_CUDA_CONV_STATS", "0", 1);
    else unsetenv("KILN_CUDA_CONV_STATS");
    kiln_model *fwd = NULL, *m = NULL;
    kiln_trainer *t = NULL;
    kiln_train_options o = KILN_TRAIN_OPTIONS_INIT;
    o.optimizer = KILN_OPTIM_SGD;
    o.momentum = 0.9f;
    o.device = dev;
    o.amp = KILN_AMP_FP16;
    if (off == 2) o.disable_passes = KILN_PASS_CONV_BN_STATS;
    int n = -1;
    if (kiln_model_resnet(ctx, 18, 10, 64, 1, 0, &fwd) || kiln_model_add_classifier_loss(fwd, "logits", 0, &m) ||
        kiln_trainer_create_plan(m, "loss", &o, &t))
        CHECK(0, "trainer plan (%s): %s", dev == KILN_DEVICE_CUDA ? "cuda" : "cpu", kiln_context_message(ctx));
    else {
        n = bns_with_sums(t->train);
        CHECK(topological_order(t->train), "trainer plan: not in a topological order");
    }
    unsetenv("KILN_CUDA_CONV_STATS");
    kiln_trainer_free(t);
    kiln_model_free(fwd);
    kiln_model_free(m);
    return n;
}

static void trainer(void) {
    printf("-- the trainer's graphs (resnet18, AMP fp16)\n");
    const bool cuda = kiln_backend_for(KILN_DEVICE_CUDA) != NULL;
    const int on = trainer_sums(KILN_DEVICE_CUDA, 0), off = trainer_sums(KILN_DEVICE_CUDA, 1),
              bit = trainer_sums(KILN_DEVICE_CUDA, 2), cpu = trainer_sums(KILN_DEVICE_CPU, 0);
    printf("  CUDA graph: %d BNs with sums by default, %d with KILN_CUDA_CONV_STATS=0, %d with conv-bn-stats "
           "disabled; CPU graph: %d (%s build)\n",
           on, off, bit, cpu, cuda ? "CUDA" : "CPU-only");
    CHECK(on == (cuda ? 20 : 0) && off == 0 && bit == 0 && cpu == 0, "trainer: want %d, 0, 0 and 0", cuda ? 20 : 0);
}

int main(void) {
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    resnet18();
    resnet50_counts();
    env();
    syncbn();
    trainer();
    kiln_context_free(ctx);
    printf("%s\n", fails ? "FAILED" : "all conv-bn-stats checks passed");
    return fails != 0;
}
