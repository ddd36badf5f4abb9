/* test_fuse_bn.c — the fuse-bn pass (src/passes/fuse_bn.c) on the CPU.
 *
 *   - resnet18's training graph (forward, autograd's backward, loss; the CPU trainer's,
 *     32x32 images, batch 2), in fp32 and after the CUDA trainer's layout and fp16
 *     precision passes (NHWC, f16 activations), then kiln_pass_fuse_bn for the CPU (which
 *     has every kernel): the 9 BatchNormalization -> Relu pairs (the stem's and each basic
 *     block's first) become 9 BatchNormalization nodes with relu = 1, and the 9 Relu
 *     gradients feeding their BatchNormGrad fold into it (relu = 1, Y as input 6); the 8
 *     BatchNormalization -> Add -> Relu chains ending the blocks become 8
 *     BatchNormalization nodes with relu = 1 and the residual as input 5, and their Relu
 *     gradients (read by the BN's gradient and the skip's) fold into that BatchNormGrad
 *     (relu = 1, the masked gradient as its output 5, which the skip reads: 8); the 7
 *     Sums at the blocks' inputs whose sum a block end's BatchNormGrad reads fold into it
 *     (input 7; the first block's, read by MaxPoolGrad, stays); 49 nodes fewer; the nodes
 *     in a topological order; and the loss, every gradient and the running
 *     statistics the same as without the pass: bit for bit with the residual form kept
 *     out (the graph cut before the first block's Add: the stem and one BN -> Relu), and
 *     whole within the rounding the fused sum saves (the residual sum rounded once, not
 *     twice): in fp32 every element within 1e-4 of its output's largest value (batch 2 at
 *     64x64; at 32x32 layer4's BNs normalize 2 elements a channel and amplify one rounding
 *     to 5% of a gradient); in fp16 each output within 0.3 of its 2-norm, the bound
 *     tests/test_train_amp_graph.c uses, since there one f16 rounding per block moves the
 *     first layers' gradients by ~12% of their norm (measured; training-mode BN's backward
 *     subtracts projections that nearly cancel), where a wrong mask or residual moves them
 *     by their whole size.
 *   - resnet50's training graph (NHWC fp16, as the CUDA trainer lays it out): the nodes
 *     fused away per step counted (49 Relus, their 49 gradients, 16 Adds, 15 Sums).
 *   - the mask from X (on unless KILN_PASS_BN_MASK_FROM_X is disabled or KILN_BN_MASK_FROM_X=0
 *     is set): resnet18's 9 non-residual BN -> Relu gradients read their BN's saved
 *     statistics (output 3) instead of Y (relu_mask_from_x = 1), the 8 block ends keep Y; the
 *     same node count; every output (loss, gradients, running statistics) bit for bit those
 *     of the graph fused without it, fp32 and NHWC fp16; resnet50's 33 (the stem and 2 a
 *     bottleneck); on through the pass table, off with its bit disabled or the variable 0.
 *   - the mask from X where a BN -> Relu's gradient is a Sum (a small CNN whose stem ReLU
 *     feeds a residual block's convolution and its shortcut): the Sum folds into that
 *     BatchNormGrad (input 7) and it keeps Y; the block's first BN -> Relu takes the mask
 *     from X; every output bit for bit that of the graph fused without the option.
 *   - the inference graph (BatchNormalization in inference mode): untouched.
 *   - disabled through the pass table (kiln_passes_apply with KILN_PASS_FUSE_BN off):
 *     nothing fused.
 * Exits non-zero on any failure. */
#include "check.h"
#include "core/optest.h"
#include "core/plan.h"
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

static int count(const kiln_model *m, const char *domain, const char *op, int relu) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++)
        n += strcmp(m->nodes[i].op_type, op) == 0 && strcmp(m->nodes[i].domain, domain) == 0 &&
             (relu < 0 || kiln_attr_int(&m->nodes[i], "relu", 0) == relu);
    return n;
}

static int count_relu_grads(const kiln_model *m) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++)
        n += strcmp(m->nodes[i].op_type, "UnaryGrad") == 0 && strcmp(kiln_attr_string(&m->nodes[i], "op", ""), "Relu") == 0;
    return n;
}


/* opt = a finalized copy of m with kiln_pass_fuse_bn applied for the CPU (with the mask from X
 * when mx). */
static kiln_status fuse_mx(const kiln_model *m, kiln_model **opt, bool *changed, bool mx) {
    const kiln_pass_options cpu = {.device = KILN_DEVICE_CPU, .disabled = mx ? 0u : (unsigned)KILN_PASS_BN_MASK_FROM_X};
    *changed = false;
    kiln_status st = kiln_model_clone(m, opt);
    if (!st) st = kiln_pass_fuse_bn(*opt, &cpu, changed);
    if (!st) st = kiln_model_finalize(*opt);
    return st;
}

static kiln_status fuse(const kiln_model *m, kiln_model **opt, bool *changed) { return fuse_mx(m, opt, changed, false); }

/* kiln.BatchNormGrad nodes with relu_mask_from_x = 1; each checked to read, as input 6, output 3
 * of the fused training BatchNormalization (relu = 1, no residual) of its X, scale and B */
static int count_mask_from_x(const kiln_model *m, const char *label) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *d = &m->nodes[i];
        if (strcmp(d->op_type, "BatchNormGrad") != 0 || kiln_attr_int(d, "relu_mask_from_x", 0) == 0) continue;
        n++;
        const int s = d->n_in == 7 ? d->in[6] : -1, p = s >= 0 ? m->values[s].producer : -1;
        const kiln_node *b = p >= 0 ? &m->nodes[p] : NULL;
        CHECK(kiln_attr_int(d, "relu", 0) == 1 && b && strcmp(b->op_type, "BatchNormalization") == 0 &&
                  kiln_attr_int(b, "relu", 0) == 1 && b->n_in == 5 && b->n_out == 4 && b->out[3] == s &&
                  b->in[0] == d->in[1] && b->in[1] == d->in[2] && b->in[2] == d->in[3] && d->n_out <= 5,
              "%s: BatchNormGrad '%s' with relu_mask_from_x does not read its own fused BatchNormalization's output 3",
              label, d->name);
    }
    return n;
}

/* The mask from X on top of `fused` (m fused without it): want_mx gradients take it, the node
 * count stays, and the graph computes what `fused` does bit for bit (on the CPU each mask is
 * its forward's Y > 0 exactly). */
static void mask_from_x_checks(const char *label, const kiln_model *m, kiln_model *fused, kiln_tensor *const *feeds,
                               int want_mx) {
    kiln_model *on = NULL;
    bool changed = false;
    char lab[200];
    snprintf(lab, sizeof lab, "%s, mask from X", label);
    if (fuse_mx(m, &on, &changed, true)) {
        CHECK(0, "%s: fuse-bn: %s", lab, kiln_context_message(ctx));
        return;
    }
    const int mx = count_mask_from_x(on, lab), with_y = count(on, "kiln", "BatchNormGrad", 1) - mx;
    printf("  mask from X: %d BatchNormGrad read S (relu_mask_from_x), %d with relu=1 read Y, %d nodes\n", mx, with_y,
           on->n_nodes);
    CHECK(mx == want_mx && on->n_nodes == fused->n_nodes && count_mask_from_x(fused, label) == 0 &&
              count(on, "kiln", "BatchNormGrad", 1) == count(fused, "kiln", "BatchNormGrad", 1),
          "%s: %d gradients with the mask from X (want %d), %d nodes (want %d)", lab, mx, want_mx, on->n_nodes,
          fused->n_nodes);
    CHECK(topological_order(on), "%s: the nodes are not in a topological order", lab);
    if (feeds) same_function(lab, fused, on, (kiln_tensor **)feeds, 0, 0, NULL);
    kiln_model_free(on);
}

static void resnet18(bool fp16) {
    const char *label = fp16 ? "resnet18 training graph, NHWC fp16" : "resnet18 training graph, fp32";
    printf("-- %s\n", label);
    kiln_model *fwd = NULL, *m = NULL, *ref = NULL, *laid = NULL, *opt = NULL, *off = NULL;
    kiln_trainer *t = NULL;
    kiln_tensor *image = NULL, *lab = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD, .momentum = 0.9f};
    if (kiln_model_resnet(ctx, 18, 10, 64, 5, 0, &fwd) || kiln_model_add_classifier_loss(fwd, "logits", 0, &m) ||
        kiln_trainer_create(m, "loss", &o, &t) || !(ref = backward_graph(t))) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    bool changed = false;
    if (fp16) { /* the CUDA trainer's layout and precision (src/train/trainer.c), only them */
        const kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP16,
                                      .disabled = ~(unsigned)KILN_PASS_NHWC};
        if (kiln_passes_apply(ref, &po, &laid)) {
            CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
            goto out;
        }
        kiln_model_free(ref);
        ref = laid;
        laid = NULL;
    }
    if (fuse(ref, &opt, &changed)) {
        CHECK(0, "%s: fuse-bn: %s", label, kiln_context_message(ctx));
        goto out;
    }
    CHECK(changed, "%s: the pass reports no change", label);
    printf("  before: %d BatchNormalization, %d Relu, %d BatchNormGrad, %d Relu gradients, %d nodes\n",
           count(ref, "", "BatchNormalization", -1), count(ref, "", "Relu", -1), count(ref, "kiln", "BatchNormGrad", -1),
           count_relu_grads(ref), ref->n_nodes);
    printf("  after:  %d BatchNormalization (%d relu=1), %d Relu, %d BatchNormGrad (%d relu=1), %d Relu gradients, "
           "%d nodes\n",
           count(opt, "", "BatchNormalization", -1), count(opt, "", "BatchNormalization", 1), count(opt, "", "Relu", -1),
           count(opt, "kiln", "BatchNormGrad", -1), count(opt, "kiln", "BatchNormGrad", 1), count_relu_grads(opt),
           opt->n_nodes);
    CHECK(count(ref, "", "BatchNormalization", -1) == 20 && count(ref, "", "Relu", -1) == 17 &&
              count(ref, "kiln", "BatchNormGrad", -1) == 20 && count_relu_grads(ref) == 17,
          "%s: the unfused graph is not resnet18's (20 BN, 17 Relu and their gradients)", label);
    int with_z = 0;
    for (int i = 0; i < opt->n_nodes; i++)
        with_z += strcmp(opt->nodes[i].op_type, "BatchNormalization") == 0 && opt->nodes[i].n_in == 6;
    CHECK(count(opt, "", "BatchNormalization", 1) == 17 && count(opt, "", "BatchNormalization", -1) == 20 &&
              count(opt, "", "Relu", -1) == 0 && with_z == 8 && count(opt, "", "Add", -1) == count(ref, "", "Add", -1) - 8,
          "%s: %d BatchNormalization with relu=1 (%d with a residual), %d Relu and %d Add left, want 17 (8), 0 and %d",
          label, count(opt, "", "BatchNormalization", 1), with_z, count(opt, "", "Relu", -1), count(opt, "", "Add", -1),
          count(ref, "", "Add", -1) - 8);
    CHECK(count(opt, "kiln", "BatchNormGrad", 1) == 17 && count(opt, "kiln", "BatchNormGrad", -1) == 20 &&
              count_relu_grads(opt) == 0,
          "%s: %d BatchNormGrad with relu=1 and %d Relu gradients left, want 17 and 0", label,
          count(opt, "kiln", "BatchNormGrad", 1), count_relu_grads(opt));
    int with_g = 0, with_dy2 = 0; /* output 5 (the skip's gradient), input 7 (a Sum folded) */
    for (int i = 0; i < opt->n_nodes; i++) {
        const kiln_node *d = &opt->nodes[i];
        if (strcmp(d->op_type, "BatchNormGrad") != 0) continue;
        with_g += d->n_out > 5 && d->out[5] >= 0 && kiln_pass_uses(opt, d->out[5]) > 0;
        with_dy2 += d->n_in > 7 && d->in[7] >= 0;
    }
    CHECK(with_g == 8 && with_dy2 == 7 && count(opt, "", "Sum", -1) == count(ref, "", "Sum", -1) - 7,
          "%s: %d BatchNormGrad writing the skip's gradient, %d reading a second term, %d Sum left (of %d); want 8, "
          "7, 7 fewer",
          label, with_g, with_dy2, count(opt, "", "Sum", -1), count(ref, "", "Sum", -1));
    CHECK(opt->n_nodes == ref->n_nodes - 49, "%s: %d nodes, %d without the pass (49 fewer expected)", label,
          opt->n_nodes, ref->n_nodes);
    for (int i = 0; i < opt->n_nodes; i++) { /* each folded gradient reads a fused BN's output */
        const kiln_node *d = &opt->nodes[i];
        if (strcmp(d->op_type, "BatchNormGrad") != 0 || kiln_attr_int(d, "relu", 0) != 1) continue;
        const int y = d->n_in >= 7 ? d->in[6] : -1, p = y >= 0 ? opt->values[y].producer : -1;
        CHECK(p >= 0 && strcmp(opt->nodes[p].op_type, "BatchNormalization") == 0 &&
                  kiln_attr_int(&opt->nodes[p], "relu", 0) == 1 && opt->nodes[p].in[0] == d->in[1],
              "%s: BatchNormGrad '%s' with relu=1 does not read its own fused BatchNormalization's Y", label, d->name);
        if (fp16 && y >= 0)
            CHECK(opt->values[y].dtype == KILN_F16 && opt->values[d->in[0]].dtype == KILN_F16 &&
                      opt->values[y].format == KILN_FORMAT_NHWC,
                  "%s: BatchNormGrad '%s': Y or dY not f16 NHWC", label, d->name);
    }
    CHECK(topological_order(opt), "%s: the nodes are not in a topological order", label);

    image = kt_rand(KILN_F32, 4, (int64_t[]){2, 3, 64, 64}, -2, 2, 31);
    lab = kt_rand(KILN_I64, 1, (int64_t[]){2}, 0, 10, 32);
    t->feeds[0] = image;
    t->feeds[1] = lab;
    if (fp16) same_norm(label, ref, opt, t->feeds, 0.3, 0.3);
    else same_function(label, ref, opt, t->feeds, 1e-4, 0, NULL);
    /* the mask from X: the stem's and the 8 blocks' first BN -> Relu gradients */
    mask_from_x_checks(label, ref, opt, t->feeds, 9);

    /* switched off in the pass table: nothing fused */
    const kiln_pass_options none = {.device = KILN_DEVICE_CPU, .disabled = ~0u};
    if (kiln_passes_apply(ref, &none, &off)) CHECK(0, "%s: passes off: %s", label, kiln_context_message(ctx));
    else
        CHECK(count(off, "", "BatchNormalization", 1) == 0 && count(off, "kiln", "BatchNormGrad", 1) == 0 &&
                  off->n_nodes == ref->n_nodes,
              "%s: fused with fuse-bn disabled", label);
    const kiln_pass_options only = {.device = KILN_DEVICE_CPU, .disabled = ~(unsigned)KILN_PASS_FUSE_BN};
    kiln_model_free(off);
    off = NULL;
    if (kiln_passes_apply(ref, &only, &off)) CHECK(0, "%s: fuse-bn alone: %s", label, kiln_context_message(ctx));
    else
        CHECK(count(off, "", "BatchNormalization", 1) == 17 && count(off, "kiln", "BatchNormGrad", 1) == 17 &&
                  count_relu_grads(off) == 0 && count_mask_from_x(off, label) == 0,
              "%s: the pass table's fuse-bn did not fuse (or took the mask from X with its bit disabled)", label);
    /* the mask from X through the pass table: on by default, off by KILN_BN_MASK_FROM_X=0 */
    const kiln_pass_options with_mx = {.device = KILN_DEVICE_CPU,
                                       .disabled = ~(unsigned)(KILN_PASS_FUSE_BN | KILN_PASS_BN_MASK_FROM_X)};
    for (int env = 0; env < 2; env++) {
        kiln_model_free(off);
        off = NULL;
        if (env) setenv("KILN_BN_MASK_FROM_X", "0", 1);
        const int want = env ? 0 : 9;
        if (kiln_passes_apply(ref, &with_mx, &off))
            CHECK(0, "%s: fuse-bn with the mask from X%s: %s", label, env ? ", KILN_BN_MASK_FROM_X=0" : "",
                  kiln_context_message(ctx));
        else
            CHECK(count_mask_from_x(off, label) == want, "%s: fuse-bn%s: %d gradients with the mask from X, want %d",
                  label, env ? ", KILN_BN_MASK_FROM_X=0" : "", count_mask_from_x(off, label), want);
        unsetenv("KILN_BN_MASK_FROM_X");
    }

    /* the inference graph: no training BatchNormalization, nothing to fuse */
    kiln_model_free(opt);
    opt = NULL;
    if (!fp16) {
        changed = true;
        if (fuse(fwd, &opt, &changed)) CHECK(0, "%s: inference graph: %s", label, kiln_context_message(ctx));
        else
            CHECK(!changed && count(opt, "", "BatchNormalization", 1) == 0 && count(opt, "", "Relu", -1) == 17,
                  "%s: the inference graph was rewritten", label);
    }
out:
    if (t) t->feeds[0] = t->feeds[1] = NULL;
    kiln_tensor_free(image);
    kiln_tensor_free(lab);
    kiln_trainer_free(t);
    kiln_model_free(fwd);
    kiln_model_free(m);
    kiln_model_free(ref);
    kiln_model_free(laid);
    kiln_model_free(opt);
    kiln_model_free(off);
}

/* conv (3x3, pad 1, no bias) -> BatchNormalization of c_out channels from `in` to `out` */
static kiln_status conv_bn(kiln_model *m, const char *name, const char *in, int64_t c_in, int64_t c_out, const char *out,
                           uint64_t seed) {
    char w[96], y[96], p[4][96];
    static const char *const pn[4] = {"weight", "bias", "running_mean", "running_var"};
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(y, sizeof y, "%s.out", name);
    kiln_tensor *t = kt_rand(KILN_F32, 4, (int64_t[]){c_out, c_in, 3, 3}, -0.5, 0.5, seed);
    kiln_status st = t ? kiln_model_add_initializer(m, w, t) : KILN_ERR_OUT_OF_MEMORY;
    kiln_tensor_free(t);
    kiln_node *n = NULL;
    if (!st) st = kiln_model_add_node(m, "Conv", name, 2, (const char *[]){in, w}, 1, (const char *[]){y}, &n);
    if (!st) st = kiln_node_set_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
    for (int k = 0; k < 4 && !st; k++) {
        snprintf(p[k], sizeof p[k], "%s.bn.%s", name, pn[k]);
        t = kt_rand(KILN_F32, 1, &c_out, k == 3 ? 0.5 : -0.5, k == 3 ? 1.5 : 0.5, seed * 10 + (uint64_t)k);
        st = t ? kiln_model_add_initializer(m, p[k], t) : KILN_ERR_OUT_OF_MEMORY;
        kiln_tensor_free(t);
    }
    if (!st)
        st = kiln_model_add_node(m, "BatchNormalization", name, 5, (const char *[]){y, p[0], p[1], p[2], p[3]}, 1,
                                 (const char *[]){out}, NULL);
    return st;
}

/* The small CNN: image (2, 3, 8, 8) -> stem conv-BN-Relu -> x0; block conv-BN-Relu-conv-BN,
 * + x0, Relu; GlobalAveragePool, Flatten, Gemm -> logits. x0's gradient is a Sum (the block's
 * convolution and its shortcut) feeding the stem BN's gradient through its Relu's. */
static void small_cnn_sum(void) {
    const char *label = "small CNN, stem gradient a Sum, mask from X";
    printf("-- %s\n", label);
    kiln_model *fwd = NULL, *m = NULL, *ref = NULL, *opt = NULL, *on = NULL;
    kiln_trainer *t = NULL;
    kiln_tensor *image = NULL, *lab = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD, .momentum = 0.9f};
    kiln_node *n = NULL;
    kiln_status st = kiln_model_create(ctx, &fwd);
    if (!st) st = kiln_model_add_input(fwd, "image", KILN_F32, 4, (int64_t[]){2, 3, 8, 8});
    if (!st) st = conv_bn(fwd, "stem", "image", 3, 8, "stem.bn", 901);
    if (!st) st = kiln_model_add_node(fwd, "Relu", "stem.relu", 1, (const char *[]){"stem.bn"}, 1, (const char *[]){"x0"}, NULL);
    if (!st) st = conv_bn(fwd, "b1", "x0", 8, 8, "b1.bn", 902);
    if (!st) st = kiln_model_add_node(fwd, "Relu", "b1.relu", 1, (const char *[]){"b1.bn"}, 1, (const char *[]){"r1"}, NULL);
    if (!st) st = conv_bn(fwd, "b2", "r1", 8, 8, "b2.bn", 903);
    if (!st) st = kiln_model_add_node(fwd, "Add", "add", 2, (const char *[]){"b2.bn", "x0"}, 1, (const char *[]){"s"}, NULL);
    if (!st) st = kiln_model_add_node(fwd, "Relu", "out.relu", 1, (const char *[]){"s"}, 1, (const char *[]){"out"}, NULL);
    if (!st) st = kiln_model_add_node(fwd, "GlobalAveragePool", "gap", 1, (const char *[]){"out"}, 1, (const char *[]){"g"}, NULL);
    if (!st) st = kiln_model_add_node(fwd, "Flatten", "flat", 1, (const char *[]){"g"}, 1, (const char *[]){"f"}, &n);
    if (!st) {
        kiln_tensor *w = kt_rand(KILN_F32, 2, (int64_t[]){10, 8}, -0.5, 0.5, 904);
        st = w ? kiln_model_add_initializer(fwd, "fc.weight", w) : KILN_ERR_OUT_OF_MEMORY;
        kiln_tensor_free(w);
    }
    if (!st)
        st = kiln_model_add_node(fwd, "Gemm", "fc", 2, (const char *[]){"f", "fc.weight"}, 1, (const char *[]){"logits"}, &n);
    if (!st) st = kiln_node_set_int(n, "transB", 1);
    if (!st) st = kiln_model_add_output(fwd, "logits");
    if (!st) st = kiln_model_finalize(fwd);
    bool changed = false;
    if (st || kiln_model_add_classifier_loss(fwd, "logits", 0, &m) || kiln_trainer_create(m, "loss", &o, &t) ||
        !(ref = backward_graph(t)) || fuse_mx(ref, &opt, &changed, false) || fuse_mx(ref, &on, &changed, true)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    int stem_sum = -1, b1_mx = -1; /* the stem BN's gradient: input 7; block.bn1's: the mask from X */
    for (int i = 0; i < on->n_nodes; i++) {
        const kiln_node *d = &on->nodes[i];
        if (strcmp(d->op_type, "BatchNormGrad") != 0 || d->n_in < 2) continue;
        const char *x = on->values[d->in[1]].name;
        if (strcmp(x, "stem.out") == 0) stem_sum = d->n_in > 7 && d->in[7] >= 0 && kiln_attr_int(d, "relu_mask_from_x", 0) == 0;
        if (strcmp(x, "b1.out") == 0) b1_mx = kiln_attr_int(d, "relu_mask_from_x", 0) != 0;
    }
    printf("  stem's gradient: Sum folded, Y kept: %d; block.bn1's: mask from X: %d; %d mask from X in all\n", stem_sum,
           b1_mx, count_mask_from_x(on, label));
    CHECK(stem_sum == 1 && b1_mx == 1 && count_mask_from_x(on, label) == 1 && on->n_nodes == opt->n_nodes,
          "%s: the stem's gradient must fold the Sum and keep Y (%d), block.bn1's take the mask from X (%d)", label,
          stem_sum, b1_mx);
    image = kt_rand(KILN_F32, 4, (int64_t[]){2, 3, 8, 8}, -2, 2, 905);
    lab = kt_rand(KILN_I64, 1, (int64_t[]){2}, 0, 10, 906);
    t->feeds[0] = image;
    t->feeds[1] = lab;
    same_function(label, opt, on, t->feeds, 0, 0, NULL);
out:
    if (t) t->feeds[0] = t->feeds[1] = NULL;
    kiln_tensor_free(image);
    kiln_tensor_free(lab);
    kiln_trainer_free(t);
    kiln_model_free(fwd);
    kiln_model_free(m);
    kiln_model_free(ref);
    kiln_model_free(opt);
    kiln_model_free(on);
}

/* ResNet-50's training graph as the CUDA trainer lays it out (NHWC, fp16; 64x64 images, the
 * node counts do not depend on the size), fused: the nodes the residual forms remove from
 * each step. 49 Relus and their 49 gradients (the stem's and 3 a block), 16 residual Adds:
 * every Relu gradient folds (16 of them as a BatchNormGrad's output 5, read by the
 * shortcut), and 15 of the 16 Sums at the blocks' inputs fold into the BatchNormGrad
 * ending the block before (the first block's input gradient goes to MaxPoolGrad). */
static void resnet50_counts(void) {
    const char *label = "resnet50 training graph, NHWC fp16";
    printf("-- %s\n", label);
    kiln_model *fwd = NULL, *m = NULL, *ref = NULL, *laid = NULL, *opt = NULL;
    kiln_trainer *t = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD, .momentum = 0.9f};
    const kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP16,
                                  .disabled = ~(unsigned)KILN_PASS_NHWC};
    bool changed = false;
    if (kiln_model_resnet(ctx, 50, 10, 64, 5, 0, &fwd) || kiln_model_add_classifier_loss(fwd, "logits", 0, &m) ||
        kiln_trainer_create(m, "loss", &o, &t) || !(ref = backward_graph(t)) || kiln_passes_apply(ref, &po, &laid) ||
        fuse(laid, &opt, &changed)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    int with_g = 0, with_dy2 = 0;
    for (int i = 0; i < opt->n_nodes; i++) {
        const kiln_node *d = &opt->nodes[i];
        if (strcmp(d->op_type, "BatchNormGrad") != 0) continue;
        with_g += d->n_out > 5 && d->out[5] >= 0 && kiln_pass_uses(opt, d->out[5]) > 0;
        with_dy2 += d->n_in > 7 && d->in[7] >= 0;
    }
    printf("  before: %d Relu, %d Relu gradients, %d Add, %d Sum, %d nodes\n", count(laid, "", "Relu", -1),
           count_relu_grads(laid), count(laid, "", "Add", -1), count(laid, "", "Sum", -1), laid->n_nodes);
    printf("  after:  %d Relu, %d Relu gradients, %d Add, %d Sum, %d nodes; %d BatchNormGrad write the shortcut's "
           "gradient, %d add a second term\n",
           count(opt, "", "Relu", -1), count_relu_grads(opt), count(opt, "", "Add", -1), count(opt, "", "Sum", -1),
           opt->n_nodes, with_g, with_dy2);
    CHECK(count(laid, "", "Relu", -1) == 49 && count_relu_grads(laid) == 49 && count(opt, "", "Relu", -1) == 0 &&
              count_relu_grads(opt) == 0 && with_g == 16 && with_dy2 == 15 &&
              count(opt, "", "Sum", -1) == count(laid, "", "Sum", -1) - 15 &&
              count(opt, "", "Add", -1) == count(laid, "", "Add", -1) - 16 && opt->n_nodes == laid->n_nodes - 129,
          "%s: want 49 Relus and their gradients folded, 16 shortcut gradients, 15 Sums and 16 Adds folded "
          "(129 nodes fewer), got %d nodes fewer",
          label, laid->n_nodes - opt->n_nodes);
    CHECK(topological_order(opt), "%s: the nodes are not in a topological order", label);
    /* the mask from X: the stem's and each bottleneck's first two BN -> Relu gradients (33) */
    mask_from_x_checks(label, laid, opt, NULL, 33);
    /* the residual forms' Relu gradients (read by two) and Sums gone, by name (the profile's
     * rows) */
    const char *gone[2] = {"UnaryGrad", "Sum"};
    for (int k = 0; k < 2; k++) {
        printf("  %s gone:", k ? gone[k] : "UnaryGrad (read by two)");
        for (int i = 0; i < laid->n_nodes; i++) {
            if (strcmp(laid->nodes[i].op_type, gone[k]) != 0 || (k == 0 && kiln_pass_uses(laid, laid->nodes[i].out[0]) < 2))
                continue;
            bool kept = false;
            for (int j = 0; j < opt->n_nodes && !kept; j++) kept = strcmp(opt->nodes[j].name, laid->nodes[i].name) == 0;
            if (!kept) printf(" %s", laid->nodes[i].name);
        }
        printf("\n");
    }
out:
    kiln_trainer_free(t);
    kiln_model_free(fwd);
    kiln_model_free(m);
    kiln_model_free(ref);
    kiln_model_free(laid);
    kiln_model_free(opt);
}

int main(void) {
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    resnet18(false);
    resnet18(true);
    resnet50_counts();
    small_cnn_sum();
    kiln_context_free(ctx);
    printf("%s\n", fails ? "FAILED" : "all fuse-bn checks passed");
    return fails != 0;
}
