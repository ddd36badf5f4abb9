/* test_fuse_bn.c — the fuse-bn pass (src/passes/fuse_bn.c) on the CPU.
 *
 *   - resnet18's training graph (forward, autograd's backward, loss; the CPU trainer's,
 *     32x32 images, batch 2), in fp32 and after the CUDA trainer's layout and fp16
 *     precision passes (NHWC, f16 activations), then kiln_pass_fuse_bn for the CPU (which
 *     has every kernel): the 9 BatchNormalization -> Relu pairs (the stem's and each basic
 *     block's first) become 9 BatchNormalization nodes with relu = 1, and the 9 Relu
 *     gradients feeding their BatchNormGrad fold into it (relu = 1, Y as input 6); the 8
 *     Relus after the residual Adds and their gradients stay; 18 nodes fewer; the nodes
 *     in a topological order; and the loss, every gradient and the running statistics the
 *     same bit for bit as without the pass.
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

/* Every node input is a graph input, an initializer or an earlier node's output. */
static bool topological(const kiln_model *m) {
    bool *ready = calloc((size_t)m->n_values + 1, sizeof *ready);
    bool ok = ready != NULL;
    for (int v = 0; ok && v < m->n_values; v++) ready[v] = m->values[v].is_input || m->values[v].init;
    for (int i = 0; ok && i < m->n_nodes; i++) {
        const kiln_node *n = &m->nodes[i];
        for (int k = 0; k < n->n_in; k++) ok &= n->in[k] < 0 || ready[n->in[k]];
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0) ready[n->out[k]] = true;
    }
    free(ready);
    return ok;
}

/* opt = a finalized copy of m with kiln_pass_fuse_bn applied for the CPU. */
static kiln_status fuse(const kiln_model *m, kiln_model **opt, bool *changed) {
    const kiln_pass_options cpu = {.device = KILN_DEVICE_CPU};
    *changed = false;
    kiln_status st = kiln_model_clone(m, opt);
    if (!st) st = kiln_pass_fuse_bn(*opt, &cpu, changed);
    if (!st) st = kiln_model_finalize(*opt);
    return st;
}

static void resnet18(bool fp16) {
    const char *label = fp16 ? "resnet18 training graph, NHWC fp16" : "resnet18 training graph, fp32";
    printf("-- %s\n", label);
    kiln_model *fwd = NULL, *m = NULL, *ref = NULL, *laid = NULL, *opt = NULL, *off = NULL;
    kiln_trainer *t = NULL;
    kiln_tensor *image = NULL, *lab = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD, .momentum = 0.9f};
    if (kiln_model_resnet(ctx, 18, 10, 32, 5, 0, &fwd) || kiln_model_add_classifier_loss(fwd, "logits", 0, &m) ||
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
    CHECK(count(opt, "", "BatchNormalization", 1) == 9 && count(opt, "", "BatchNormalization", -1) == 20 &&
              count(opt, "", "Relu", -1) == 8,
          "%s: %d BatchNormalization with relu=1 and %d Relu left, want 9 and 8", label,
          count(opt, "", "BatchNormalization", 1), count(opt, "", "Relu", -1));
    CHECK(count(opt, "kiln", "BatchNormGrad", 1) == 9 && count(opt, "kiln", "BatchNormGrad", -1) == 20 &&
              count_relu_grads(opt) == 8,
          "%s: %d BatchNormGrad with relu=1 and %d Relu gradients left, want 9 and 8", label,
          count(opt, "kiln", "BatchNormGrad", 1), count_relu_grads(opt));
    CHECK(opt->n_nodes == ref->n_nodes - 18, "%s: %d nodes, %d without the pass (18 fewer expected)", label,
          opt->n_nodes, ref->n_nodes);
    for (int i = 0; i < opt->n_nodes; i++) { /* each folded gradient reads a fused BN's output */
        const kiln_node *d = &opt->nodes[i];
        if (strcmp(d->op_type, "BatchNormGrad") != 0 || kiln_attr_int(d, "relu", 0) != 1) continue;
        const int y = d->n_in == 7 ? d->in[6] : -1, p = y >= 0 ? opt->values[y].producer : -1;
        CHECK(p >= 0 && strcmp(opt->nodes[p].op_type, "BatchNormalization") == 0 &&
                  kiln_attr_int(&opt->nodes[p], "relu", 0) == 1 && opt->nodes[p].in[0] == d->in[1],
              "%s: BatchNormGrad '%s' with relu=1 does not read its own fused BatchNormalization's Y", label, d->name);
        if (fp16 && y >= 0)
            CHECK(opt->values[y].dtype == KILN_F16 && opt->values[d->in[0]].dtype == KILN_F16 &&
                      opt->values[y].format == KILN_FORMAT_NHWC,
                  "%s: BatchNormGrad '%s': Y or dY not f16 NHWC", label, d->name);
    }
    CHECK(topological(opt), "%s: the nodes are not in a topological order", label);

    image = kt_rand(KILN_F32, 4, (int64_t[]){2, 3, 32, 32}, -2, 2, 31);
    lab = kt_rand(KILN_I64, 1, (int64_t[]){2}, 0, 10, 32);
    t->feeds[0] = image;
    t->feeds[1] = lab;
    same_function(label, ref, opt, t->feeds, 0, 0, NULL);

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
        CHECK(count(off, "", "BatchNormalization", 1) == 9 && count(off, "kiln", "BatchNormGrad", 1) == 9,
              "%s: the pass table's fuse-bn did not fuse", label);

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

int main(void) {
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    resnet18(false);
    resnet18(true);
    kiln_context_free(ctx);
    printf("%s\n", fails ? "FAILED" : "all fuse-bn checks passed");
    return fails != 0;
}
