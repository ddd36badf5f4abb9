/* test_pad_channels.c — the pad-channels pass on a training graph (src/passes/pad_channels.c,
 * pad_stem_train), on the CPU:
 *   - resnet18's training graph (forward, autograd's backward, loss; 64x64 images, batch 2,
 *     fp32), the pass alone for CUDA fp16: the stem convolution reads Pads of the image and
 *     of conv1.weight to 4 channels (used_channels = 3); its kiln.ConvGradWeight reads the
 *     same padded pair and writes 4 channels, which a Slice cuts back into the gradient the
 *     graph outputs; 2 Pads and 1 Slice added, no other node touched; and the loss, every
 *     gradient and running statistic equal those without the pass within 1e-5 of each
 *     output's largest value (the zero channels add +0 products; the convolutions' sums are
 *     otherwise the same).
 *   - the pass for the CPU, or for fp32: nothing changes.
 *   - output channels (widen), inference after fuse-conv: a ShuffleNetV2-like branch, 1x1
 *     (8 -> 10) + Relu -> 3x3 depthwise (10) -> 1x1 (10 -> 12) + Relu: the first writes 16
 *     channels, the depthwise runs as group 16, the last reads 16 with used_channels 10, no
 *     Pad; the same function. Not widened (Pads instead): the 10-channel value also read by
 *     an Add, or a graph output, or the depthwise with a Sigmoid (0 -> 0.5).
 * Exits non-zero on any failure. */
#include "check.h"
#include "core/optest.h"
#include "core/plan.h"
#include "passes/passes.h"
#include "train/trainer_internal.h"

#include "kiln_models.h"

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

/* the producer's op type of value v, "" for a graph input or initializer */
static const char *made_by(const kiln_model *m, int v) {
    const int p = v >= 0 ? m->values[v].producer : -1;
    return p >= 0 ? m->nodes[p].op_type : "";
}

/* m with the pad-channels pass run alone for (device, precision); NULL on failure */
static kiln_model *padded(const kiln_model *ref, kiln_device device, kiln_precision precision, bool *changed) {
    kiln_model *m = NULL;
    const kiln_pass_options po = {.device = device, .precision = precision};
    *changed = false;
    if (kiln_model_clone(ref, &m) || kiln_pass_pad_channels(m, &po, changed) || kiln_model_finalize(m)) {
        CHECK(0, "pad-channels: %s", kiln_context_message(ctx));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

/* x (2, 8, 7, 7) -> Conv 1x1 (8 -> 10) + Relu -> h1 -> Conv 3x3 depthwise (10, pads 1)
 * [+ Sigmoid when dw_act] -> h2 -> Conv 1x1 (10 -> 12) + Relu -> y; `extra`: 1 also outputs
 * h1, 2 also outputs Add(h1, h1). */
static kiln_model *branch(bool dw_act, int extra) {
    kiln_model *m = NULL;
    CHECK(kiln_model_create(ctx, &m) == KILN_OK, "create");
    if (!m) return NULL;
    kiln_model_add_input(m, "x", KILN_F32, 4, KT_DIMS(2, 8, 7, 7));
    static const struct {
        const char *name;
        int nd;
        int64_t dims[4];
    } inits[] = {{"w1", 4, {10, 8, 1, 1}}, {"b1", 1, {10}}, {"wd", 4, {10, 1, 3, 3}},
                 {"bd", 1, {10}},          {"w3", 4, {12, 10, 1, 1}}, {"b3", 1, {12}}};
    for (int k = 0; k < 6; k++) {
        kiln_tensor *t = kt_rand(KILN_F32, inits[k].nd, inits[k].dims, -1, 1, 40 + (uint64_t)k);
        CHECK(t && kiln_model_add_initializer(m, inits[k].name, t) == KILN_OK, "initializer %s", inits[k].name);
        kiln_tensor_free(t);
    }
    kiln_node *nd = NULL;
    const char *c1[] = {"x", "w1", "b1"}, *r1[] = {"c1"}, *cd[] = {"h1", "wd", "bd"}, *sg[] = {"d"}, *c3[] = {"h2", "w3", "b3"},
               *r3[] = {"c3"}, *ad[] = {"h1", "h1"};
    const char *o_c1 = "c1", *o_h1 = "h1", *o_d = dw_act ? "d" : "h2", *o_h2 = "h2", *o_c3 = "c3", *o_y = "y", *o_s = "s";
    kiln_model_add_node(m, "Conv", "c1", 3, c1, 1, &o_c1, NULL);
    kiln_model_add_node(m, "Relu", "r1", 1, r1, 1, &o_h1, NULL);
    kiln_model_add_node(m, "Conv", "dw", 3, cd, 1, &o_d, &nd);
    if (nd) {
        kiln_node_set_int(nd, "group", 10);
        kiln_node_set_ints(nd, "pads", 4, (const int64_t[]){1, 1, 1, 1});
    }
    if (dw_act) kiln_model_add_node(m, "Sigmoid", "sg", 1, sg, 1, &o_h2, NULL);
    kiln_model_add_node(m, "Conv", "c3", 3, c3, 1, &o_c3, NULL);
    kiln_model_add_node(m, "Relu", "r3", 1, r3, 1, &o_y, NULL);
    if (extra == 2) kiln_model_add_node(m, "Add", "add", 2, ad, 1, &o_s, NULL);
    kiln_model_add_output(m, "y");
    if (extra == 1) kiln_model_add_output(m, "h1");
    if (extra == 2) kiln_model_add_output(m, "s");
    if (kiln_model_finalize(m) != KILN_OK) {
        CHECK(0, "branch: %s", kiln_context_message(ctx));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

static void test_widen(void) {
    static const struct {
        const char *label;
        bool dw_act;
        int extra;
        bool wide;
    } cases[] = {
        {"branch widened", false, 0, true},
        {"branch, h1 an output too", false, 1, false},
        {"branch, h1 read by an Add", false, 2, false},
        {"branch, depthwise + Sigmoid", true, 0, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *label = cases[i].label;
        kiln_model *ref = branch(cases[i].dw_act, cases[i].extra), *m = NULL;
        if (!ref) continue;
        const kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP16};
        bool changed = false, fused = false;
        if (kiln_model_clone(ref, &m) || kiln_pass_fuse_conv(m, &po, &fused) || kiln_pass_pad_channels(m, &po, &changed) ||
            kiln_model_finalize(m)) {
            CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
            kiln_model_free(m);
            kiln_model_free(ref);
            continue;
        }
        int64_t group = 0, w1_rows = 0, used = -1;
        for (int j = 0; j < m->n_nodes; j++) {
            const kiln_node *n = &m->nodes[j];
            if (strcmp(n->op_type, "Conv") && strcmp(n->op_type, "FusedConv")) continue;
            const kiln_value *w = &m->values[n->in[1]];
            if (kiln_attr_int(n, "group", 1) != 1) group = kiln_attr_int(n, "group", 1);
            else if (w->init && w->init->dims[1] == 8) w1_rows = w->init->dims[0];
            else used = kiln_attr_int(n, "used_channels", -1);
        }
        const int pads = count_op(m, "Pad");
        printf("-- %s: group %lld, first conv %lld outputs, last used_channels %lld, %d Pad\n", label, (long long)group,
               (long long)w1_rows, (long long)used, pads);
        /* (fuse-conv makes the FusedConv + Relu the widening needs only where the device has
         * kiln.FusedConv: a build without CUDA pads the 10 channels instead) */
        if (cases[i].wide && kiln_pass_device_has(&po, "FusedConv"))
            CHECK(changed && group == 16 && w1_rows == 16 && used == 10 && pads == 0,
                  "%s: want group 16, 16 outputs, used_channels 10, no Pad", label);
        else
            CHECK(group == 10 && w1_rows == 10 && pads >= 1, "%s: want the 10 channels kept (group 10) and Pads", label);
        kiln_tensor *x = kt_rand(KILN_F32, 4, KT_DIMS(2, 8, 7, 7), -2, 2, 50);
        kiln_tensor *feeds[1] = {x};
        same_function(label, ref, m, feeds, 1e-5, 0, NULL);
        kiln_tensor_free(x);
        kiln_model_free(m);
        kiln_model_free(ref);
    }
}

int main(void) {
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    test_widen();
    const char *label = "resnet18 training graph";
    kiln_model *fwd = NULL, *m = NULL, *ref = NULL, *pad = NULL;
    kiln_trainer *t = NULL;
    kiln_tensor *image = NULL, *lab = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD, .momentum = 0.9f};
    if (kiln_model_resnet(ctx, 18, 10, 64, 5, 0, &fwd) || kiln_model_add_classifier_loss(fwd, "logits", 0, &m) ||
        kiln_trainer_create(m, "loss", &o, &t) || !(ref = backward_graph(t))) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    bool changed = false;
    if (!(pad = padded(ref, KILN_DEVICE_CUDA, KILN_PRECISION_FP16, &changed))) goto out;
    printf("-- %s: %d nodes -> %d, %d Pad (%d before), %d Slice (%d before)\n", label, ref->n_nodes, pad->n_nodes,
           count_op(pad, "Pad"), count_op(ref, "Pad"), count_op(pad, "Slice"), count_op(ref, "Slice"));
    CHECK(changed && pad->n_nodes == ref->n_nodes + 3 && count_op(pad, "Pad") == count_op(ref, "Pad") + 2 &&
              count_op(pad, "Slice") == count_op(ref, "Slice") + 1,
          "%s: want 2 Pads and 1 Slice added and the pass to say so", label);
    int convs = 0, grads = 0;
    kiln_tensor *sh = NULL; /* the values' shapes (the new ones have none stored) */
    if (kiln_pass_infer_shapes(pad, 2, &sh)) {
        CHECK(0, "%s: shapes: %s", label, kiln_context_message(ctx));
        goto out;
    }
    for (int i = 0; i < pad->n_nodes; i++) {
        const kiln_node *n = &pad->nodes[i];
        const bool conv = strcmp(n->op_type, "Conv") == 0, gw = strcmp(n->op_type, "ConvGradWeight") == 0;
        if (!conv && !gw) continue;
        const int x = n->in[0], w = n->in[gw ? 2 : 1];
        const bool px = strcmp(made_by(pad, x), "Pad") == 0, pw = strcmp(made_by(pad, w), "Pad") == 0;
        if (!px && !pw) continue;
        CHECK(px && pw && sh[x].dims[1] == 4 && sh[w].dims[1] == 4 &&
                  pad->values[pad->nodes[pad->values[x].producer].in[0]].is_input,
              "%s: node '%s' reads a padded X or W but not both at 4 channels of the image", label, n->name);
        if (conv) {
            convs++;
            CHECK(kiln_attr_int(n, "used_channels", 0) == 3, "%s: the stem lacks used_channels = 3", label);
        } else {
            grads++;
            const int dw = n->out[0], q = kiln_pass_single_consumer(pad, dw);
            CHECK(sh[dw].dims[1] == 4 && q >= 0 && strcmp(pad->nodes[q].op_type, "Slice") == 0 &&
                      sh[pad->nodes[q].out[0]].dims[1] == 3,
                  "%s: the stem's weight gradient is not 4 channels sliced back to 3", label);
        }
    }
    free(sh);
    CHECK(convs == 1 && grads == 1, "%s: %d convolutions and %d weight gradients read the padded pair (want 1, 1)",
          label, convs, grads);
    image = kt_rand(KILN_F32, 4, (int64_t[]){2, 3, 64, 64}, -2, 2, 31);
    lab = kt_rand(KILN_I64, 1, (int64_t[]){2}, 0, 10, 32);
    t->feeds[0] = image;
    t->feeds[1] = lab;
    same_function(label, ref, pad, t->feeds, 1e-5, 0, NULL);
    for (int k = 0; k < 2; k++) { /* the CPU, and fp32 on CUDA: untouched */
        kiln_model *same = padded(ref, k ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU,
                                  k ? KILN_PRECISION_FP32 : KILN_PRECISION_FP16, &changed);
        CHECK(same && !changed && same->n_nodes == ref->n_nodes, "%s: padded for %s", label, k ? "fp32" : "the CPU");
        kiln_model_free(same);
    }
out:
    if (t) t->feeds[0] = t->feeds[1] = NULL;
    kiln_tensor_free(image);
    kiln_tensor_free(lab);
    kiln_model_free(pad);
    kiln_model_free(ref);
    kiln_trainer_free(t);
    kiln_model_free(m);
    kiln_model_free(fwd);
    kiln_context_free(ctx);
    printf("%s\n", fails ? "FAILED" : "all pad-channels checks passed");
    return fails != 0;
}
