/* test_fuse_pool.c — the fuse-pool pass (src/passes/fuse_pool.c) on the CPU.
 *
 *   - mnist-net's training graph (forward, backward, loss; the CPU trainer's) through the
 *     layout pass for a CUDA plan, as tests/test_layout.c does, then kiln_pass_fuse_pool
 *     for the CPU (which has every kernel; the formats are the layout pass's): exactly one
 *     kiln.MaxPoolDropout and one kiln.MaxPoolDropoutGrad with relu=1 replace the MaxPool,
 *     its Dropout, the DropoutGrad, the MaxPoolGrad and relu2's UnaryGrad (the second
 *     Dropout, after fc1, stays); the nodes are in a topological order; and the loss and
 *     every gradient are the same bit for bit as without the pass, with Dropout on (the
 *     same run seed; another seed gives another loss, so the masks matter). In fp32 and
 *     after the fp16 precision pass, with a static and a symbolic batch. The second
 *     Dropout's gradient takes relu3's: one kiln.DropoutGrad with relu=1 reading fc1's
 *     Relu output and writing what relu3's UnaryGrad wrote, which is gone.
 *   - that fold on a DropoutGrad -> UnaryGrad op=Relu graph: folded, the same outputs bit
 *     for bit; not folded where g has a second reader, g is a graph output, or the
 *     UnaryGrad is another op's gradient.
 *   - a small Conv -> Relu -> MaxPool -> Dropout graph: fused (forward only: there is no
 *     backward) with the same outputs, Y and the mask, bit for bit; and not fused where the
 *     pool output has a second reader, the windows overlap (kernel 3, stride 2), the
 *     Dropout is in inference form, H is not divisible by the kernel, or the layout pass
 *     did not run (X NCHW).
 *   - the forward's picks on resnet18's training graph (its stem pool overlaps): the pool
 *     gets picks = 1 and a uint8 output its MaxPoolGrad reads; the same function bit for
 *     bit, NCHW and after the layout pass (NHWC picks); a second run changes nothing.
 *     The small graph's tiling pool (no backward) gets none.
 * Exits non-zero on any failure. */
#include "check.h"
#include "core/optest.h"
#include "core/backend.h"
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

static int count(const kiln_model *m, const char *domain, const char *op) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++)
        n += strcmp(m->nodes[i].op_type, op) == 0 && strcmp(m->nodes[i].domain, domain) == 0;
    return n;
}

static const kiln_node *find(const kiln_model *m, const char *op) {
    for (int i = 0; i < m->n_nodes; i++)
        if (strcmp(m->nodes[i].op_type, op) == 0) return &m->nodes[i];
    return NULL;
}

/* opt = a finalized copy of `laid` (a graph after the layout pass) with kiln_pass_fuse_pool
 * applied for the CPU; *changed says whether it changed anything. */
static kiln_status fuse(const kiln_model *laid, kiln_model **opt, bool *changed) {
    const kiln_pass_options cpu = {.device = KILN_DEVICE_CPU};
    *changed = false;
    kiln_status st = kiln_model_clone(laid, opt);
    if (!st) st = kiln_pass_fuse_pool(*opt, &cpu, changed);
    if (!st) st = kiln_model_finalize(*opt);
    return st;
}

/* ------------------------------------------------------------------ mnist-net */

static void mnist(kiln_precision prec, int64_t batch) {
    char label[120];
    snprintf(label, sizeof label, "mnist-net training graph%s%s", prec == KILN_PRECISION_FP32 ? "" : ", fp16",
             batch < 0 ? ", symbolic batch" : "");
    printf("-- %s\n", label);
    kiln_model *m = NULL, *laid = NULL, *opt = NULL;
    kiln_trainer *t = NULL;
    kiln_tensor *image = NULL, *lab = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_ADADELTA};
    if (kiln_model_mnist_net(ctx, batch, 1, 1, &m) || kiln_trainer_create(m, "loss", &o, &t)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    /* the layout pass for a CUDA plan (only it), as tests/test_layout.c runs it */
    const kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = prec, .disabled = ~(unsigned)KILN_PASS_NHWC};
    bool changed = false;
    if (kiln_passes_apply(t->train, &po, &laid) || fuse(laid, &opt, &changed)) {
        CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
        goto out;
    }
    CHECK(changed, "%s: the pass reports no change", label);
    CHECK(count(laid, "", "MaxPool") == 1 && count(laid, "", "Dropout") == 2 && count(laid, "kiln", "DropoutGrad") == 2 &&
              count(laid, "kiln", "MaxPoolGrad") == 1 && count(laid, "kiln", "UnaryGrad") == 3,
          "%s: the unfused chain is not in the laid-out graph", label);
    CHECK(count(opt, "kiln", "MaxPoolDropout") == 1 && count(opt, "kiln", "MaxPoolDropoutGrad") == 1,
          "%s: %d MaxPoolDropout and %d MaxPoolDropoutGrad, expected 1 and 1", label,
          count(opt, "kiln", "MaxPoolDropout"), count(opt, "kiln", "MaxPoolDropoutGrad"));
    /* left: fc1's Dropout and its gradient (with relu3's), relu1's gradient */
    CHECK(count(opt, "", "MaxPool") == 0 && count(opt, "kiln", "MaxPoolGrad") == 0 && count(opt, "", "Dropout") == 1 &&
              count(opt, "kiln", "DropoutGrad") == 1 && count(opt, "kiln", "UnaryGrad") == 1,
          "%s: parts of the unfused chains are left (%d DropoutGrad, %d UnaryGrad; 1 and 1 expected)", label,
          count(opt, "kiln", "DropoutGrad"), count(opt, "kiln", "UnaryGrad"));
    CHECK(opt->n_nodes == laid->n_nodes - 4, "%s: %d nodes, %d without the pass (4 fewer expected)", label,
          opt->n_nodes, laid->n_nodes);
    /* relu3's gradient in the laid-out graph: the UnaryGrad op=Relu reading a DropoutGrad's
     * output; in the optimized graph the DropoutGrad reads its Y and writes its dX */
    const char *y3 = NULL, *dx3 = NULL;
    for (int i = 0; i < laid->n_nodes; i++) {
        const kiln_node *u = &laid->nodes[i];
        if (strcmp(u->op_type, "UnaryGrad") != 0 || u->n_in != 3 || u->in[0] < 0 || u->in[2] < 0) continue;
        const int p = laid->values[u->in[0]].producer;
        if (p >= 0 && strcmp(laid->nodes[p].op_type, "DropoutGrad") == 0 &&
            strcmp(kiln_attr_string(u, "op", ""), "Relu") == 0) {
            CHECK(!y3, "%s: two UnaryGrad op=Relu read a DropoutGrad in the laid-out graph", label);
            y3 = laid->values[u->in[2]].name;
            dx3 = laid->values[u->out[0]].name;
        }
    }
    const kiln_node *dg = find(opt, "DropoutGrad");
    CHECK(y3 && dg && kiln_attr_int(dg, "relu", 0) == 1 && dg->n_in == 5 && dg->in[4] >= 0 &&
              strcmp(opt->values[dg->in[4]].name, y3) == 0 && strcmp(opt->values[dg->out[0]].name, dx3) == 0,
          "%s: the DropoutGrad left does not take relu3's gradient (relu=1, Y %s, dX %s)", label, y3 ? y3 : "?",
          dx3 ? dx3 : "?");
    if (dg && prec != KILN_PRECISION_FP32)
        CHECK(opt->values[dg->in[0]].dtype == KILN_F16 && dg->n_in == 5 && opt->values[dg->in[4]].dtype == KILN_F16,
              "%s: the folded DropoutGrad is not on the fp16 chain", label);
    CHECK(topological_order(opt), "%s: the nodes are not in a topological order", label);
    const kiln_node *f = find(opt, "MaxPoolDropout"), *g = find(opt, "MaxPoolDropoutGrad");
    const kiln_node *d = find(opt, "Dropout");
    if (f && g && d) {
        const int x = f->in[0];
        CHECK(f->n_out == 2 && f->out[0] == kiln_model_find_value(opt, "d1") && f->out[0] == kiln_model_find_value(laid, "d1"),
              "%s: the fused op does not write the Dropout's outputs", label);
        CHECK(opt->values[x].format == KILN_FORMAT_NHWC && opt->values[f->out[0]].format == KILN_FORMAT_NCHW &&
                  opt->values[f->out[1]].format == KILN_FORMAT_NCHW,
              "%s: formats of X / Y / mask", label);
        CHECK(f->n_in == 3 && f->in[2] >= 0 && kiln_attr_int(f, "dropout_opset", 0) >= 12,
              "%s: the fused forward lost the training_mode input or the Dropout's opset", label);
        int nk = 0;
        const int64_t *ks = kiln_attr_ints(f, "kernel_shape", &nk);
        CHECK(nk == 2 && ks[0] == 2 && ks[1] == 2, "%s: the pool's kernel_shape is not carried over", label);
        CHECK(g->n_in >= 3 && g->in[1] == x && g->in[2] == f->out[1] && kiln_attr_int(g, "relu", 0) == 1,
              "%s: the fused gradient reads another X or mask, or relu is not 1", label);
        CHECK(opt->values[g->in[0]].format == KILN_FORMAT_NCHW && opt->values[g->out[0]].format == KILN_FORMAT_NHWC,
              "%s: the fused gradient's dY / dX formats", label);
        CHECK(d->in[0] != x, "%s: the Dropout left is the pool's", label);
        for (int i = 0; i < opt->n_nodes; i++)
            if (strcmp(opt->nodes[i].op_type, "UnaryGrad") == 0)
                CHECK(opt->nodes[i].n_in < 3 || opt->nodes[i].in[2] != x, "%s: relu2's UnaryGrad is left", label);
        if (prec != KILN_PRECISION_FP32)
            CHECK(opt->values[x].dtype == KILN_F16 && opt->values[g->in[0]].dtype == KILN_F16,
                  "%s: the fused ops are not on the fp16 chain", label);
    }
    /* the same function on the CPU: loss, every gradient, statistics */
    image = kt_rand(KILN_F32, 4, (int64_t[]){64, 1, 28, 28}, 0, 1, 11);
    lab = kt_rand(KILN_I64, 1, (int64_t[]){64}, 0, 10, 12);
    t->feeds[0] = image;
    t->feeds[1] = lab;
    double loss[2] = {NAN, NAN};
    same_function(label, laid, opt, t->feeds, 0, 0, loss);
    /* output 0 is the loss; Dropout on: another seed draws other masks */
    CHECK(strcmp(kiln_model_output_name(opt, 0), "loss") == 0, "%s: output 0 is %s, not the loss", label,
          kiln_model_output_name(opt, 0));
    CHECK(isfinite(loss[0]) && isfinite(loss[1]) && loss[0] != loss[1],
          "%s: the loss does not depend on the Dropout seed (%g, %g)", label, loss[0], loss[1]);
    t->feeds[0] = t->feeds[1] = NULL;
out:
    kiln_tensor_free(image);
    kiln_tensor_free(lab);
    kiln_model_free(opt);
    kiln_model_free(laid);
    kiln_trainer_free(t);
    kiln_model_free(m);
}

/* ------------------------------------------------------ a small graph, variants */

typedef struct variant {
    const char *label;
    int64_t k, s, h;   /* pool kernel and stride (square), image height and width */
    bool training;     /* the Dropout has training_mode and a mask output */
    bool read_twice;   /* p also read by a Relu whose output is a graph output */
    bool layout;       /* the layout pass ran */
    bool fuses;
} variant;

static kiln_status add_init(kiln_model *m, const char *name, kiln_tensor *t) {
    kiln_status st = t ? kiln_model_add_initializer(m, name, t) : KILN_ERR_OUT_OF_MEMORY;
    kiln_tensor_free(t);
    return st;
}

/* x (2, 3, h, h) -> Conv 3x3 pad 1 (4 channels) -> Relu -> MaxPool -> Dropout: outputs y
 * (and the mask in training form). */
static kiln_status small_net(const variant *v, kiln_model **out) {
    kiln_model *m = NULL;
    kiln_node *n = NULL;
    kiln_status st = kiln_model_create(ctx, &m);
    if (!st) st = kiln_model_add_input(m, "x", KILN_F32, 4, (int64_t[]){2, 3, v->h, v->h});
    if (!st) st = add_init(m, "w", kt_rand(KILN_F32, 4, (int64_t[]){4, 3, 3, 3}, -0.5, 0.5, 31));
    if (!st) st = add_init(m, "ratio", kt_scalar(KILN_F32, 0.4));
    if (!st) st = add_init(m, "train", kt_scalar(KILN_BOOL, 1));
    if (!st) st = kiln_model_add_node(m, "Conv", "conv", 2, (const char *[]){"x", "w"}, 1, (const char *[]){"c"}, &n);
    if (!st) st = kiln_node_set_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
    if (!st) st = kiln_model_add_node(m, "Relu", "relu", 1, (const char *[]){"c"}, 1, (const char *[]){"r"}, NULL);
    if (!st) st = kiln_model_add_node(m, "MaxPool", "pool", 1, (const char *[]){"r"}, 1, (const char *[]){"p"}, &n);
    if (!st) st = kiln_node_set_ints(n, "kernel_shape", 2, (int64_t[]){v->k, v->k});
    if (!st) st = kiln_node_set_ints(n, "strides", 2, (int64_t[]){v->s, v->s});
    if (!st && v->training)
        st = kiln_model_add_node(m, "Dropout", "drop", 3, (const char *[]){"p", "ratio", "train"}, 2,
                                 (const char *[]){"y", "mask"}, &n);
    else if (!st)
        st = kiln_model_add_node(m, "Dropout", "drop", 2, (const char *[]){"p", "ratio"}, 1, (const char *[]){"y"}, &n);
    if (!st) st = kiln_node_set_int(n, "seed", 9);
    if (!st && v->read_twice)
        st = kiln_model_add_node(m, "Relu", "again", 1, (const char *[]){"p"}, 1, (const char *[]){"p2"}, NULL);
    if (!st) st = kiln_model_add_output(m, "y");
    if (!st && v->training) st = kiln_model_add_output(m, "mask");
    if (!st && v->read_twice) st = kiln_model_add_output(m, "p2");
    if (!st) st = kiln_model_finalize(m);
    if (st) {
        kiln_model_free(m);
        m = NULL;
    }
    *out = m;
    return st;
}

static void small(const variant *v) {
    printf("-- %s\n", v->label);
    kiln_model *m = NULL, *laid = NULL, *opt = NULL;
    kiln_tensor *x = NULL;
    const kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .disabled = ~(unsigned)KILN_PASS_NHWC};
    const kiln_pass_options none = {.device = KILN_DEVICE_CUDA, .disabled = ~0u};
    bool changed = true;
    if (small_net(v, &m) || kiln_passes_apply(m, v->layout ? &po : &none, &laid) || fuse(laid, &opt, &changed)) {
        CHECK(0, "%s: %s", v->label, kiln_context_message(ctx));
        goto out;
    }
    const int p = kiln_model_find_value(laid, "r");
    CHECK(p >= 0 && laid->values[p].format == (v->layout ? KILN_FORMAT_NHWC : KILN_FORMAT_NCHW),
          "%s: the pool's input is not %s", v->label, v->layout ? "NHWC" : "NCHW");
    const int fused = count(opt, "kiln", "MaxPoolDropout");
    CHECK(fused == v->fuses && changed == v->fuses && count(opt, "", "MaxPool") == !v->fuses &&
              count(opt, "kiln", "MaxPoolDropoutGrad") == 0,
          "%s: %d fused ops (changed %d), expected %d", v->label, fused, changed, v->fuses);
    x = kt_rand(KILN_F32, 4, (int64_t[]){2, 3, v->h, v->h}, -1, 1, 32);
    same_function(v->label, laid, opt, &x, 0, 0, NULL);
out:
    kiln_tensor_free(x);
    kiln_model_free(opt);
    kiln_model_free(laid);
    kiln_model_free(m);
}

/* ------------------------------------------------ the forward's picks (resnet18) */

/* resnet18's training graph (64x64 images, batch 2): its stem pool (3x3 stride 2, pad 1,
 * overlapping) gets picks = 1 and a uint8 output of Y's shape, which its MaxPoolGrad
 * reads as input 2; the same function bit for bit (the picks are the ones the gradient
 * recomputed from X). On the CPU, fp32; with nhwc, after the layout pass for CUDA (the
 * picks take Y's layout). */
static void picks(bool nhwc) {
    const char *label = nhwc ? "resnet18 training graph, NHWC: the forward's picks" :
                               "resnet18 training graph: the forward's picks";
    printf("-- %s\n", label);
    kiln_model *fwd = NULL, *m = NULL, *ref = NULL, *laid = NULL, *opt = NULL;
    kiln_trainer *t = NULL;
    kiln_tensor *image = NULL, *lab = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD, .momentum = 0.9f};
    const kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .disabled = ~(unsigned)KILN_PASS_NHWC};
    bool changed = false;
    if (kiln_model_resnet(ctx, 18, 10, 64, 5, 0, &fwd) || kiln_model_add_classifier_loss(fwd, "logits", 0, &m) ||
        kiln_trainer_create(m, "loss", &o, &t) || !(ref = backward_graph(t))) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    if (nhwc ? kiln_passes_apply(ref, &po, &laid) : kiln_model_clone(ref, &laid) || kiln_model_finalize(laid)) {
        CHECK(0, "%s: layout: %s", label, kiln_context_message(ctx));
        goto out;
    }
    if (fuse(laid, &opt, &changed)) {
        CHECK(0, "%s: fuse-pool: %s", label, kiln_context_message(ctx));
        goto out;
    }
    const kiln_node *pool = find(opt, "MaxPool"), *grad = find(opt, "MaxPoolGrad");
    CHECK(changed && count(opt, "", "MaxPool") == 1 && count(opt, "kiln", "MaxPoolGrad") == 1 &&
              opt->n_nodes == laid->n_nodes,
          "%s: want the one pool and its gradient, no node added or removed", label);
    if (pool && grad) {
        const int pk = pool->n_out > 1 ? pool->out[1] : -1;
        CHECK(kiln_attr_int(pool, "picks", 0) == 1 && pk >= 0 && opt->values[pk].dtype == KILN_U8 &&
                  opt->values[pk].format == opt->values[pool->out[0]].format,
              "%s: the pool lacks picks = 1 and a uint8 output in Y's layout", label);
        CHECK(grad->n_in == 3 && grad->in[2] == pk && grad->in[1] == pool->in[0],
              "%s: the gradient does not read the pool's X and picks", label);
        if (nhwc)
            CHECK(opt->values[pk].format == KILN_FORMAT_NHWC, "%s: the picks are not NHWC", label);
    }
    CHECK(topological_order(opt), "%s: the nodes are not in a topological order", label);
    image = kt_rand(KILN_F32, 4, (int64_t[]){2, 3, 64, 64}, -2, 2, 41);
    lab = kt_rand(KILN_I64, 1, (int64_t[]){2}, 0, 10, 42);
    t->feeds[0] = image;
    t->feeds[1] = lab;
    same_function(label, laid, opt, t->feeds, 0, 0, NULL);
    /* for the CUDA backend where this build has it (the pass asks the device for
     * kiln.MaxPoolGrad's kernel): the same rewrite */
    if (kiln_backend_for(KILN_DEVICE_CUDA)) {
        const kiln_pass_options cu = {.device = KILN_DEVICE_CUDA};
        kiln_model *c = NULL;
        bool ch = false;
        if (kiln_model_clone(laid, &c) || kiln_pass_fuse_pool(c, &cu, &ch)) {
            CHECK(0, "%s: fuse-pool for CUDA: %s", label, kiln_context_message(ctx));
        } else {
            const kiln_node *cp = find(c, "MaxPool");
            CHECK(ch && cp && kiln_attr_int(cp, "picks", 0) == 1, "%s: no picks for the CUDA backend", label);
        }
        kiln_model_free(c);
    }
    /* run again: nothing left to do */
    kiln_model *again = NULL;
    changed = true;
    if (!fuse(opt, &again, &changed))
        CHECK(!changed && again->n_nodes == opt->n_nodes, "%s: a second run changes the graph again", label);
    kiln_model_free(again);
out:
    if (t) t->feeds[0] = t->feeds[1] = NULL;
    kiln_tensor_free(image);
    kiln_tensor_free(lab);
    kiln_model_free(opt);
    kiln_model_free(laid);
    kiln_model_free(ref);
    kiln_trainer_free(t);
    kiln_model_free(m);
    kiln_model_free(fwd);
}

/* resnet18's training graph through every pass for the CPU, against the same with fuse-pool
 * off: the stem's BN -> Relu -> MaxPool is one kiln.BnReluMaxPool reading the BN's input and
 * saved statistics, the BN writes no Y (write_y = 0) and the pool's gradient reads the BN's
 * input for its shape (and the picks); the loss, every gradient and statistic bit for bit. */
static void bn_pool(void) {
    const char *label = "resnet18 training graph, all passes: BN -> Relu -> MaxPool fused";
    printf("-- %s\n", label);
    kiln_model *fwd = NULL, *m = NULL, *ref = NULL, *off = NULL, *on = NULL;
    kiln_trainer *t = NULL;
    kiln_tensor *image = NULL, *lab = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD, .momentum = 0.9f};
    const kiln_pass_options po = {.device = KILN_DEVICE_CPU}, poff = {.device = KILN_DEVICE_CPU,
                                                                      .disabled = KILN_PASS_FUSE_POOL};
    if (kiln_model_resnet(ctx, 18, 10, 64, 5, 0, &fwd) || kiln_model_add_classifier_loss(fwd, "logits", 0, &m) ||
        kiln_trainer_create(m, "loss", &o, &t) || !(ref = backward_graph(t)) || kiln_passes_apply(ref, &po, &on) ||
        kiln_passes_apply(ref, &poff, &off)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    const kiln_node *f = find(on, "BnReluMaxPool"), *g = find(on, "MaxPoolGrad");
    CHECK(count(on, "kiln", "BnReluMaxPool") == 1 && count(on, "", "MaxPool") == 0 && count(off, "", "MaxPool") == 1,
          "%s: want the one pool fused (%d fused, %d MaxPool left)", label, count(on, "kiln", "BnReluMaxPool"),
          count(on, "", "MaxPool"));
    if (f && g) {
        const int bnv = f->in[0] >= 0 ? on->values[f->in[3]].producer : -1;
        const kiln_node *bn = bnv >= 0 ? &on->nodes[bnv] : NULL;
        CHECK(bn && strcmp(bn->op_type, "BatchNormalization") == 0 && kiln_attr_int(bn, "write_y", 1) == 0 &&
                  bn->in[0] == f->in[0] && bn->n_out > 3 && bn->out[3] == f->in[3],
              "%s: the fused pool does not read the BN's input and saved statistics, or the BN writes Y", label);
        CHECK(f->n_out == 2 && g->n_in == 3 && g->in[2] == f->out[1] && g->in[1] == f->in[0],
              "%s: the gradient does not read the fused pool's picks and the BN's input", label);
        CHECK(fabsf(kiln_attr_float(f, "epsilon", 0) - (bn ? kiln_attr_float(bn, "epsilon", 1e-5f) : -1)) == 0,
              "%s: epsilon not carried over", label);
    }
    CHECK(topological_order(on), "%s: the nodes are not in a topological order", label);
    image = kt_rand(KILN_F32, 4, (int64_t[]){2, 3, 64, 64}, -2, 2, 51);
    lab = kt_rand(KILN_I64, 1, (int64_t[]){2}, 0, 10, 52);
    t->feeds[0] = image;
    t->feeds[1] = lab;
    same_function(label, off, on, t->feeds, 0, 0, NULL);
out:
    if (t) t->feeds[0] = t->feeds[1] = NULL;
    kiln_tensor_free(image);
    kiln_tensor_free(lab);
    kiln_model_free(on);
    kiln_model_free(off);
    kiln_model_free(ref);
    kiln_trainer_free(t);
    kiln_model_free(m);
    kiln_model_free(fwd);
}

/* ------------------------------------------ DropoutGrad -> Relu's UnaryGrad */

typedef struct relu_variant {
    const char *label;
    const char *op;  /* the UnaryGrad's op */
    int g_reader;    /* 0: the UnaryGrad only; 1: also a Neg (a graph output); 2: g a graph output */
    bool fuses;
} relu_variant;

/* dy, mask, y (64, 128) -> g = kiln.DropoutGrad(dy, mask, 0.3, true) -> dx =
 * kiln.UnaryGrad(g, -, y) op=<op>: outputs dx (and the second reader's output or g). */
static kiln_status relu_net(const relu_variant *v, kiln_model **out) {
    kiln_model *m = NULL;
    kiln_node *n = NULL;
    const int64_t dims[2] = {64, 128};
    kiln_status st = kiln_model_create(ctx, &m);
    if (!st) st = kiln_model_add_input(m, "dy", KILN_F32, 2, dims);
    if (!st) st = kiln_model_add_input(m, "mask", KILN_BOOL, 2, dims);
    if (!st) st = kiln_model_add_input(m, "y", KILN_F32, 2, dims);
    if (!st) st = add_init(m, "ratio", kt_scalar(KILN_F32, 0.3));
    if (!st) st = add_init(m, "train", kt_scalar(KILN_BOOL, 1));
    if (!st)
        st = kiln_model_add_node(m, "DropoutGrad", "dgrad", 4, (const char *[]){"dy", "mask", "ratio", "train"}, 1,
                                 (const char *[]){"g"}, &n);
    if (!st) {
        free(n->domain);
        n->domain = kiln_strdup(ctx, "kiln");
        st = n->domain ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    }
    if (!st) st = kiln_model_add_node(m, "UnaryGrad", "ugrad", 3, (const char *[]){"g", "", "y"}, 1,
                                      (const char *[]){"dx"}, &n);
    if (!st) {
        free(n->domain);
        n->domain = kiln_strdup(ctx, "kiln");
        st = n->domain ? kiln_node_set_string(n, "op", v->op) : KILN_ERR_OUT_OF_MEMORY;
    }
    if (!st && v->g_reader == 1)
        st = kiln_model_add_node(m, "Neg", "again", 1, (const char *[]){"g"}, 1, (const char *[]){"ng"}, NULL);
    if (!st) st = kiln_model_add_output(m, "dx");
    if (!st && v->g_reader == 1) st = kiln_model_add_output(m, "ng");
    if (!st && v->g_reader == 2) st = kiln_model_add_output(m, "g");
    if (!st) st = kiln_model_finalize(m);
    if (st) {
        kiln_model_free(m);
        m = NULL;
    }
    *out = m;
    return st;
}

static void relu_fold(const relu_variant *v) {
    printf("-- %s\n", v->label);
    kiln_model *m = NULL, *opt = NULL;
    kiln_tensor *in[3] = {0};
    bool changed = !v->fuses;
    if (relu_net(v, &m) || fuse(m, &opt, &changed)) {
        CHECK(0, "%s: %s", v->label, kiln_context_message(ctx));
        goto out;
    }
    const kiln_node *d = find(opt, "DropoutGrad");
    const int folded = count(opt, "kiln", "UnaryGrad") == 0;
    CHECK(folded == v->fuses && changed == v->fuses && d && kiln_attr_int(d, "relu", 0) == v->fuses,
          "%s: folded %d (changed %d), expected %d", v->label, folded, changed, v->fuses);
    if (d && v->fuses)
        CHECK(d->n_in == 5 && d->in[4] == kiln_model_find_value(opt, "y") &&
                  d->out[0] == kiln_model_find_value(opt, "dx") && opt->n_nodes == 1,
              "%s: the DropoutGrad does not read y and write dx alone", v->label);
    CHECK(topological_order(opt), "%s: the nodes are not in a topological order", v->label);
    in[0] = kt_rand(KILN_F32, 2, (int64_t[]){64, 128}, -2, 2, 41);
    in[1] = kt_rand(KILN_BOOL, 2, (int64_t[]){64, 128}, 0, 2, 42);
    in[2] = kt_rand(KILN_F32, 2, (int64_t[]){64, 128}, -1, 1, 43);
    same_function(v->label, m, opt, in, 0, 0, NULL);
out:
    for (int i = 0; i < 3; i++) kiln_tensor_free(in[i]);
    kiln_model_free(opt);
    kiln_model_free(m);
}

int main(void) {
    if (kiln_context_create(&ctx) != KILN_OK) return 1;

    mnist(KILN_PRECISION_FP32, 64);
    mnist(KILN_PRECISION_FP16, 64);
    mnist(KILN_PRECISION_FP32, -1);
    mnist(KILN_PRECISION_FP16, -1);

    static const variant vs[] = {
        {"small graph: fused", 2, 2, 8, true, false, true, true},
        {"small graph, kernel 4: fused", 4, 4, 8, true, false, true, true},
        {"pool output read twice: not fused", 2, 2, 8, true, true, true, false},
        {"overlapping windows (kernel 3, stride 2): not fused", 3, 2, 9, true, false, true, false},
        {"Dropout in inference form: not fused", 2, 2, 8, false, false, true, false},
        {"H not divisible by the kernel: not fused", 2, 2, 7, true, false, true, false},
        {"X NCHW (no layout pass): not fused", 2, 2, 8, true, false, false, false},
    };
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) small(&vs[i]);

    static const relu_variant rv[] = {
        {"DropoutGrad -> Relu's UnaryGrad: folded", "Relu", 0, true},
        {"g read twice: not folded", "Relu", 1, false},
        {"g a graph output: not folded", "Relu", 2, false},
        {"Sigmoid's UnaryGrad: not folded", "Sigmoid", 0, false},
    };
    for (size_t i = 0; i < sizeof rv / sizeof rv[0]; i++) relu_fold(&rv[i]);

    picks(false);
    picks(true);
    bn_pool();

    kiln_context_free(ctx);
    printf("%s\n", fails ? "FAILED" : "all fuse-pool checks passed");
    return fails ? 1 : 0;
}
