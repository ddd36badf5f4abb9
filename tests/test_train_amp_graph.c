/*
 * test_train_amp_graph.c — the mixed-precision CUDA training graph of torchvision's ResNets
 * (kiln_model_resnet), built on the CPU (no device needed).
 *
 * The CPU trainer's graph (trainer amp off: forward, autograd's backward, the update) goes
 * through the passes the CUDA trainer runs (src/train/trainer.c, build_training_graph:
 * device CUDA, precision fp16 or bf16, NHWC, the fusions), as tests/test_layout.c does for
 * mnist-net. Between the first convolution and the GlobalAveragePool, and back from
 * kiln.GlobalAveragePoolGrad to conv1's weight gradient, the activations and their
 * gradients must stay low precision and NHWC:
 *   - no Cast, kiln.ToNCHW or kiln.ToNHWC there (the weights' Casts and layout changes,
 *     and the weight gradients' Casts back to f32 at the graph outputs, are outside it);
 *   - every BatchNormalization (training mode) reads X in L, its scale/B/mean/var and
 *     running statistics f32; every kiln.BatchNormGrad reads dY and X in L and writes
 *     dX in L and dScale, dB in f32 (the optimizer's f32 master gradients: no Cast);
 *   - every 4-D value computed there is L and NHWC.
 * Why: under amp each f32 BatchNormalization sat between a ToNCHW + Cast and a Cast +
 * ToNHWC, forward and backward, and the residual Add/ReLU and their gradients ran in f32
 * NCHW: on an H100, ResNet-50 at batch 256 spent 67 ms of its 186 ms step in Casts and
 * layout conversions alone. The node counts per op are printed (resnet18 and resnet50).
 * And the function: the CPU trainer's amp fp16 forward + backward graph of resnet18 (the same
 * precision rewrite, loss scaled by 65536) computes on the CPU what the fp32 graph does: the
 * loss within 1e-2 relative, every gradient (unscaled) and the running statistics each
 * within 0.3 of its norm. Why so loose: in a freshly initialized ResNet at batch 8, fp16
 * activations and gradients alone move each parameter gradient by 8% to 16% of its norm
 * (training-mode BN's backward subtracts the projections of dY on 1 and xhat, which nearly
 * cancel); the same graph with BatchNormalization and its gradient kept f32 measured the
 * same errors, so they are not BN's. A wrong dtype, layout or input gives errors of the
 * gradient's size or NaN. The share of the budget used is printed.
 * Exits non-zero on any failure.
 */
#include "core/internal.h"
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
#include "check.h"
#include "train_graph.h"

static kiln_context *ctx;

static bool is_op(const kiln_node *n, const char *op) { return strcmp(n->op_type, op) == 0; }

static bool is_conversion(const kiln_node *n) {
    return (strcmp(n->domain, "") == 0 && is_op(n, "Cast")) ||
           (strcmp(n->domain, "kiln") == 0 && (is_op(n, "ToNCHW") || is_op(n, "ToNHWC")));
}

/* The value v stands for: v, or what the conversions producing it convert. */
static int image_of(const kiln_model *m, const int *producer, int v) {
    while (v >= 0 && producer[v] >= 0 && is_conversion(&m->nodes[producer[v]])) v = m->nodes[producer[v]].in[0];
    return v;
}

/* Whether conversion c is kiln.ReduceSumTo's: it reads, through conversions, what a
 * ReduceSumTo writes, or a ReduceSumTo reads, through conversions, what it writes. */
static bool sum_to_conversion(const kiln_model *m, const int *producer, int c) {
    const int v = m->nodes[c].in[0], src = image_of(m, producer, v);
    if (src >= 0 && producer[src] >= 0 && is_op(&m->nodes[producer[src]], "ReduceSumTo")) return true;
    for (int j = 0; j < m->n_nodes; j++)
        for (int k = 0; k < m->nodes[j].n_in; k++) {
            if (m->nodes[j].in[k] != m->nodes[c].out[0]) continue;
            if (is_op(&m->nodes[j], "ReduceSumTo") || (is_conversion(&m->nodes[j]) && sum_to_conversion(m, producer, j)))
                return true;
        }
    return false;
}

/* reach[i] |= the node i is reachable from `from` along (forward) or against (!forward)
 * the edges; from itself included. */
static void reach(const kiln_model *m, const int *producer, int from, bool forward, bool *r) {
    int *stack = malloc(((size_t)m->n_nodes + 1) * sizeof *stack), sp = 0;
    if (!stack) return;
    r[from] = true;
    stack[sp++] = from;
    while (sp) {
        const int i = stack[--sp];
        const kiln_node *n = &m->nodes[i];
        if (forward) {
            for (int j = 0; j < m->n_nodes; j++) {
                if (r[j]) continue;
                bool reads = false;
                for (int k = 0; k < m->nodes[j].n_in && !reads; k++)
                    for (int q = 0; q < n->n_out && !reads; q++)
                        reads = n->out[q] >= 0 && m->nodes[j].in[k] == n->out[q];
                if (reads) r[j] = true, stack[sp++] = j;
            }
        } else {
            for (int k = 0; k < n->n_in; k++) {
                const int p = n->in[k] >= 0 ? producer[n->in[k]] : -1;
                if (p >= 0 && !r[p]) r[p] = true, stack[sp++] = p;
            }
        }
    }
    free(stack);
}

static int cmp_count(const void *a, const void *b) {
    const int *x = a, *y = b;
    return y[1] - x[1];
}

/* The op counts of m, most frequent first, on one line per op. */
static void print_counts(const kiln_model *m) {
    int(*c)[2] = calloc((size_t)m->n_nodes + 1, sizeof *c), n = 0; /* (first node of the op, count) */
    if (!c) return;
    for (int i = 0; i < m->n_nodes; i++) {
        int j = 0;
        while (j < n && strcmp(m->nodes[c[j][0]].op_type, m->nodes[i].op_type) != 0) j++;
        if (j == n) c[n][0] = i, c[n++][1] = 0;
        c[j][1]++;
    }
    qsort(c, (size_t)n, sizeof *c, cmp_count);
    printf("  %d nodes:", m->n_nodes);
    for (int j = 0; j < n; j++) printf(" %s %d%s", m->nodes[c[j][0]].op_type, c[j][1], j + 1 < n ? "," : "\n");
    free(c);
}

static const char *fmt_name(kiln_format f) { return f == KILN_FORMAT_NHWC ? "NHWC" : "NCHW"; }

static void check_resnet(int depth, kiln_precision prec) {
    const kiln_dtype low = prec == KILN_PRECISION_FP16 ? KILN_F16 : KILN_BF16;
    char label[80];
    snprintf(label, sizeof label, "resnet%d %s training graph", depth, kiln_dtype_name(low));
    printf("-- %s\n", label);
    kiln_model *fwd = NULL, *m = NULL, *opt = NULL;
    kiln_trainer *t = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD, .momentum = 0.9f};
    kiln_tensor *vt = NULL;
    int *producer = NULL;
    bool *fr = NULL, *fa = NULL, *br = NULL, *ba = NULL;
    if (kiln_model_resnet(ctx, depth, 10, 64, 1, 0, &fwd) || kiln_model_add_classifier_loss(fwd, "logits", 0, &m) ||
        kiln_trainer_create(m, "loss", &o, &t)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    /* the CUDA trainer's passes (src/train/trainer.c, build_training_graph) */
    const kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = prec,
                                  .disabled = ~(unsigned)(KILN_PASS_NHWC | KILN_PASS_FUSE_CONV | KILN_PASS_FUSE_LOSS |
                                                          KILN_PASS_FUSE_POOL)};
    if (kiln_passes_apply(t->train, &po, &opt) || kiln_pass_infer_types(opt, &vt)) {
        CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
        goto out;
    }
    print_counts(opt);
    const int nn = opt->n_nodes;
    producer = malloc(((size_t)opt->n_values + 1) * sizeof *producer);
    fr = calloc((size_t)nn + 1, sizeof *fr);
    fa = calloc((size_t)nn + 1, sizeof *fa);
    br = calloc((size_t)nn + 1, sizeof *br);
    ba = calloc((size_t)nn + 1, sizeof *ba);
    if (!producer || !fr || !fa || !br || !ba) {
        CHECK(0, "%s: out of memory", label);
        goto out;
    }
    for (int v = 0; v < opt->n_values; v++) producer[v] = -1;
    for (int i = 0; i < nn; i++)
        for (int q = 0; q < opt->nodes[i].n_out; q++)
            if (opt->nodes[i].out[q] >= 0) producer[opt->nodes[i].out[q]] = i;
    /* conv1: the convolution reading the image (through its conversion); the pool and
     * its gradient; conv1's weight gradient (kiln.ConvGradWeight reading conv1's X, converted or not) */
    int conv1 = -1, gap = -1, gap_grad = -1, conv1_gw = -1;
    for (int i = 0; i < nn; i++) {
        const kiln_node *n = &opt->nodes[i];
        const kiln_op_def *d = kiln_node_def(n);
        if (conv1 < 0 && d && d->layout == KILN_LAYOUT_CONV && n->in[0] >= 0 && producer[n->in[0]] >= 0 &&
            is_conversion(&opt->nodes[producer[n->in[0]]]))
            conv1 = i;
        if (is_op(n, "GlobalAveragePool")) gap = gap < 0 ? i : -2;
        if (is_op(n, "GlobalAveragePoolGrad")) gap_grad = gap_grad < 0 ? i : -2;
    }
    for (int i = 0; conv1 >= 0 && i < nn; i++)
        if (is_op(&opt->nodes[i], "ConvGradWeight") &&
            image_of(opt, producer, opt->nodes[i].in[0]) == image_of(opt, producer, opt->nodes[conv1].in[0]))
            conv1_gw = i;
    CHECK(conv1 >= 0 && gap >= 0 && gap_grad >= 0 && conv1_gw >= 0,
          "%s: conv1 %d, one GlobalAveragePool %d, one GlobalAveragePoolGrad %d, conv1's weight gradient %d", label,
          conv1, gap, gap_grad, conv1_gw);
    if (conv1 < 0 || gap < 0 || gap_grad < 0 || conv1_gw < 0) goto out;
    reach(opt, producer, conv1, true, fr);
    reach(opt, producer, gap, false, fa);
    reach(opt, producer, gap_grad, true, br);
    reach(opt, producer, conv1_gw, false, ba);
    int region = 0, conversions = 0, sum_to = 0, bn = 0, bn_grad = 0, bad_bn = 0, not_low = 0, not_nhwc = 0;
    for (int i = 0; i < nn; i++) {
        const kiln_node *n = &opt->nodes[i];
        const bool in_fwd = fr[i] && fa[i], in_bwd = br[i] && ba[i];
        if (!in_fwd && !in_bwd) continue;
        region++;
        if (is_conversion(n) && sum_to_conversion(opt, producer, i)) {
            sum_to++;
            continue;
        }
        if (is_op(n, "ReduceSumTo")) continue;
        if (is_conversion(n)) {
            if (conversions++ < 8)
                printf("  %s in the %s: node '%s', %s -> %s\n", n->op_type, in_fwd ? "forward" : "backward", n->name,
                       opt->values[n->in[0]].name, opt->values[n->out[0]].name);
            continue;
        }
        for (int q = 0; q < n->n_out; q++) {
            const int v = n->out[q];
            if (v < 0 || vt[v].ndim != 4 || !kiln_dtype_is_float(vt[v].dtype)) continue;
            if (vt[v].dtype != low && not_low++ < 8)
                printf("  %s's output '%s' is %s\n", n->op_type, opt->values[v].name, kiln_dtype_name(vt[v].dtype));
            /* the pool's (N, C, 1, 1) output: the same bytes in both layouts, labelled NCHW */
            if (i != gap && opt->values[v].format != KILN_FORMAT_NHWC && not_nhwc++ < 8)
                printf("  %s's output '%s' is %s\n", n->op_type, opt->values[v].name, fmt_name(opt->values[v].format));
        }
    }
    for (int i = 0; i < nn; i++) {
        const kiln_node *n = &opt->nodes[i];
        if (is_op(n, "BatchNormalization")) {
            bn++;
            bool ok = vt[n->in[0]].dtype == low && vt[n->out[0]].dtype == low;
            for (int k = 1; k < 5; k++) ok = ok && vt[n->in[k]].dtype == KILN_F32;
            for (int q = 1; q < n->n_out; q++) ok = ok && (n->out[q] < 0 || vt[n->out[q]].dtype == KILN_F32);
            if (!ok) bad_bn++;
            CHECK(ok || bad_bn > 3, "%s: BatchNormalization '%s': X %s, Y %s, scale %s, running mean %s", label, n->name,
                  kiln_dtype_name(vt[n->in[0]].dtype), kiln_dtype_name(vt[n->out[0]].dtype),
                  kiln_dtype_name(vt[n->in[1]].dtype),
                  n->n_out > 1 && n->out[1] >= 0 ? kiln_dtype_name(vt[n->out[1]].dtype) : "-");
        } else if (is_op(n, "BatchNormGrad")) {
            bn_grad++;
            bool ok = vt[n->in[0]].dtype == low && vt[n->in[1]].dtype == low && vt[n->out[0]].dtype == low;
            for (int k = 2; k < 6; k++) ok = ok && vt[n->in[k]].dtype == KILN_F32;
            for (int q = 1; q < n->n_out; q++) ok = ok && (n->out[q] < 0 || vt[n->out[q]].dtype == KILN_F32);
            if (!ok) bad_bn++;
            CHECK(ok || bad_bn > 3, "%s: BatchNormGrad '%s': dY %s, X %s, dX %s, scale %s, dScale %s", label, n->name,
                  kiln_dtype_name(vt[n->in[0]].dtype), kiln_dtype_name(vt[n->in[1]].dtype),
                  kiln_dtype_name(vt[n->out[0]].dtype), kiln_dtype_name(vt[n->in[2]].dtype),
                  n->n_out > 1 && n->out[1] >= 0 ? kiln_dtype_name(vt[n->out[1]].dtype) : "-");
            /* dScale and dB reach the graph outputs (the update) with no Cast */
            for (int q = 1; q < n->n_out && q < 3; q++)
                for (int j = 0; n->out[q] >= 0 && j < nn; j++)
                    for (int k = 0; k < opt->nodes[j].n_in; k++)
                        CHECK(opt->nodes[j].in[k] != n->out[q] || !is_op(&opt->nodes[j], "Cast"),
                              "%s: BatchNormGrad '%s''s output %d is cast", label, n->name, q);
        }
    }
    CHECK(bad_bn == 0, "%s: %d BatchNormalization/BatchNormGrad nodes with the dtypes above (first 3 shown)", label,
          bad_bn);
    const int bns = depth < 50 ? 20 : 53;
    CHECK(bn == bns && bn_grad == bns, "%s: %d BatchNormalization and %d BatchNormGrad, want %d each", label, bn,
          bn_grad, bns);
    printf("  %d nodes from conv1 to the pool and back: %d conversions (and %d around kiln.ReduceSumTo), %d 4-D "
           "outputs not %s, %d not NHWC\n",
           region, conversions, sum_to, not_low, kiln_dtype_name(low), not_nhwc);
    CHECK(conversions == 0, "%s: %d Cast/ToNCHW/ToNHWC nodes between conv1 and the pool (forward and backward)", label,
          conversions);
    CHECK(sum_to == 0, "%s: %d conversions around kiln.ReduceSumTo in the region", label, sum_to);
    /* the residual Adds' gradients need no sum (autograd's shape probes): only fc's bias
     * gradient, a real sum over the batch, is a kiln.ReduceSumTo */
    int sum_to_nodes = 0;
    for (int i = 0; i < nn; i++) sum_to_nodes += is_op(&opt->nodes[i], "ReduceSumTo");
    CHECK(sum_to_nodes == 1, "%s: %d kiln.ReduceSumTo nodes, want 1 (fc's bias)", label, sum_to_nodes);
    CHECK(not_low == 0, "%s: %d 4-D activations or gradients not %s there", label, not_low, kiln_dtype_name(low));
    CHECK(not_nhwc == 0, "%s: %d 4-D activations or gradients not NHWC there", label, not_nhwc);
out:
    free(producer);
    free(fr);
    free(fa);
    free(br);
    free(ba);
    free(vt);
    kiln_model_free(opt);
    kiln_trainer_free(t);
    kiln_model_free(m);
    kiln_model_free(fwd);
}

/* resnet18 (64x64, batch 8) forward + backward: the amp fp16 trainer's graph against the
 * fp32 trainer's, on the CPU: ||got / scale - want|| <= 0.3 ||want|| per output (both
 * with the update lowered: outputs loss, gradients in parameter order, statistics). */
static void check_function(void) {
    const char *label = "resnet18 fp16 forward + backward on the CPU";
    printf("-- %s\n", label);
    kiln_model *fwd = NULL, *m = NULL, *opt = NULL, *ref = NULL;
    kiln_trainer *t = NULL, *ta = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD}, oa = o;
    oa.amp = KILN_AMP_FP16;
    if (kiln_model_resnet(ctx, 18, 10, 64, 3, 0, &fwd) || kiln_model_add_classifier_loss(fwd, "logits", 0, &m) ||
        kiln_trainer_create(m, "loss", &o, &t) || kiln_trainer_create(m, "loss", &oa, &ta) ||
        !(ref = backward_graph(t)) || kiln_train_lower_update(&ta->view, &opt)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    /* a loss scale under which no gradient of this batch overflows f16 (65536, the
     * trainer's first, overflows conv1's: the trainer would skip that step) */
    const float scale = 1024.0f;
    ((float *)ta->scale_input->data)[0] = scale;
    int bn_low = 0;
    for (int i = 0; i < opt->n_nodes; i++)
        bn_low += is_op(&opt->nodes[i], "BatchNormGrad") && opt->values[opt->nodes[i].in[1]].dtype == KILN_F16;
    CHECK(bn_low == 20, "%s: %d BatchNormGrad nodes read f16 X, want 20", label, bn_low);
    kiln_tensor *image = kt_rand(KILN_F32, 4, (int64_t[]){8, 3, 64, 64}, -2, 2, 21);
    kiln_tensor *lab = kt_rand(KILN_I64, 1, (int64_t[]){8}, 0, 10, 22);
    t->feeds[0] = ta->feeds[0] = image;
    t->feeds[1] = ta->feeds[1] = lab;
    const int no = opt->n_outputs;
    CHECK(no == ref->n_outputs && no == 1 + t->n_params + t->n_states, "%s: %d and %d outputs", label, no,
          ref->n_outputs);
    const kiln_tensor **want = calloc((size_t)no + 1, sizeof *want), **got = calloc((size_t)no + 1, sizeof *got);
    kiln_plan *pr = NULL, *pl = NULL;
    kiln_status st = want && got && image && lab ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_plan_build(ref, t->feeds, true, true, &pr);
    if (!st) st = kiln_plan_build(opt, ta->feeds, true, true, &pl);
    if (!st) st = kiln_plan_run_cpu(pr, t->feeds, 7, no, want);
    if (!st) st = kiln_plan_run_cpu(pl, ta->feeds, 7, no, got);
    CHECK(!st, "%s: CPU runs: %s", label, kiln_context_message(ctx));
    double worst = 0;
    const char *worst_name = "-";
    for (int j = 0; !st && j < no; j++) {
        const char *name = kiln_model_output_name(opt, j);
        CHECK(got[j]->dtype == KILN_F32 && want[j]->dtype == KILN_F32 &&
                  kiln_tensor_numel(got[j]) == kiln_tensor_numel(want[j]),
              "%s: output %s: %s of %lld, want f32 of %lld", label, name, kiln_dtype_name(got[j]->dtype),
              (long long)kiln_tensor_numel(got[j]), (long long)kiln_tensor_numel(want[j]));
        if (got[j]->dtype != KILN_F32 || kiln_tensor_numel(got[j]) != kiln_tensor_numel(want[j])) continue;
        const double unscale = j >= 1 && j <= t->n_params ? 1.0 / scale : 1.0; /* gradients are scaled */
        double d2 = 0, w2 = 0;
        const float *g = got[j]->data, *w = want[j]->data; // (numel) both
        for (int64_t i = 0; i < kiln_tensor_numel(want[j]); i++) {
            d2 += (g[i] * unscale - w[i]) * (g[i] * unscale - w[i]);
            w2 += (double)w[i] * w[i];
        }
        const double rel = w2 > 0 ? sqrt(d2 / w2) : sqrt(d2);
        const double tol = j == 0 ? 1e-2 : 0.3;
        CHECK(rel <= tol, "%s: output %s differs from fp32 by %.3g of its norm (budget %g)", label, name, rel, tol);
        if (j == 0) printf("  loss %.6g, fp32 %.6g\n", ((const float *)got[0]->data)[0], ((const float *)want[0]->data)[0]);
        if (j > 0 && rel > worst) worst = rel, worst_name = name;
    }
    printf("  %d outputs (loss, gradients, statistics); worst %s: %.3g of its norm, %.0f%% of the budget\n", no,
           worst_name, worst, 100 * worst / 0.3);
    kiln_plan_free(pr);
    kiln_plan_free(pl);
    free(want);
    free(got);
    t->feeds[0] = t->feeds[1] = ta->feeds[0] = ta->feeds[1] = NULL;
    kiln_tensor_free(image);
    kiln_tensor_free(lab);
out:
    kiln_model_free(opt);
    kiln_model_free(ref);
    kiln_trainer_free(t);
    kiln_trainer_free(ta);
    kiln_model_free(m);
    kiln_model_free(fwd);
}

int main(int argc, char **argv) {
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    /* resnet50 too with an argument ("50"): a larger graph, the same blocks */
    check_resnet(18, KILN_PRECISION_FP16);
    check_resnet(18, KILN_PRECISION_BF16);
    if (argc > 1 && strcmp(argv[1], "50") == 0) check_resnet(50, KILN_PRECISION_FP16);
    check_function();
    kiln_context_free(ctx);
    if (fails) printf("%d failure(s)\n", fails);
    else printf("ok\n");
    return fails ? 1 : 0;
}
