/* test_fuse_conv_relu.c — the fuse-conv pass's fold of a Relu's gradient into the weight and
 * bias gradients of the conv before it (src/passes/fuse_conv.c, stage 4), on the CPU.
 *
 *   - mnist-net's training graph (the CPU trainer's: forward, backward, loss) through the
 *     CUDA trainer's passes: fuse-conv and fuse-loss, precision (fp32 or fp16), the layout
 *     pass for a CUDA plan, then fuse-pool (fusions for the CPU, which has every kernel, the
 *     layout as tests/test_layout.c and tests/test_fuse_pool.c run it). relu1's
 *     kiln.UnaryGrad is gone and conv1's ConvGradWeight and ConvGradBias read its dY and Y
 *     (conv1's output) with relu=1, Y in dY's dtype and layout; relu2's UnaryGrad stays
 *     after fuse-conv (conv2's ConvGradInput reads it too) and conv2's gradients keep
 *     relu=0. The reference is the same graph with relu1's gradient also a graph output,
 *     which keeps the UnaryGrad (a graph output is never folded) and changes nothing else:
 *     the loss and every gradient bit for bit, fp32 and fp16, static and symbolic batch.
 *   - hand-built gradient graphs (kiln.UnaryGrad op=Relu read by ConvGradWeight /
 *     ConvGradBias / ConvGradInput): folded when only weight and bias gradients read it,
 *     kept when a ConvGradInput reads it too, when it is a graph output, when it is a
 *     Sigmoid's gradient; the same function bit for bit either way (random dY and Y, half
 *     of Y negative).
 * Exits non-zero on any failure. */
#include "check.h"
#include "core/optest.h"
#include "core/plan.h"
#include "passes/passes.h"
#include "train/trainer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
static kiln_context *ctx;

static bool is_kiln(const kiln_node *n, const char *op) {
    return strcmp(n->domain, "kiln") == 0 && strcmp(n->op_type, op) == 0;
}

static int count(const kiln_model *m, const char *op, int relu) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++)
        n += is_kiln(&m->nodes[i], op) && (relu < 0 || kiln_attr_int(&m->nodes[i], "relu", 0) == relu);
    return n;
}

/* The node computing value v, or NULL. */
static const kiln_node *producer(const kiln_model *m, int v) {
    for (int i = 0; v >= 0 && i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_out; k++)
            if (m->nodes[i].out[k] == v) return &m->nodes[i];
    return NULL;
}

/* v, or what the Casts and layout conversions in front of it read. */
static int source(const kiln_model *m, int v) {
    for (int hops = 0; hops < 4; hops++) {
        const kiln_node *p = producer(m, v);
        if (!p || !(strcmp(p->op_type, "Cast") == 0 || is_kiln(p, "ToNHWC") || is_kiln(p, "ToNCHW"))) break;
        v = p->in[0];
    }
    return v;
}

/* The kiln.UnaryGrad op=Relu whose Y is value y (ignoring Casts / conversions), or NULL. */
static const kiln_node *relu_grad_of(const kiln_model *m, int y) {
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *n = &m->nodes[i];
        if (is_kiln(n, "UnaryGrad") && strcmp(kiln_attr_string(n, "op", ""), "Relu") == 0 && n->n_in == 3 &&
            n->in[2] >= 0 && source(m, n->in[2]) == y)
            return n;
    }
    return NULL;
}

/* Run both graphs on the CPU with the same feeds and run seed: every output of opt bit for
 * bit ref's output of the same name (ref may have more). */
static void same_function(const char *label, kiln_model *ref, kiln_model *opt, kiln_tensor *const *feeds) {
    const int nr = ref->n_outputs, no = opt->n_outputs;
    const kiln_tensor **want = calloc((size_t)nr + 1, sizeof *want), **got = calloc((size_t)no + 1, sizeof *got);
    kiln_plan *pr = NULL, *po = NULL;
    kiln_status st = want && got ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_plan_build(ref, feeds, true, true, &pr);
    if (!st) st = kiln_plan_build(opt, feeds, true, true, &po);
    if (!st) st = kiln_plan_run_cpu(pr, feeds, 77, nr, want);
    if (!st) st = kiln_plan_run_cpu(po, feeds, 77, no, got);
    CHECK(!st, "%s: CPU runs: %s", label, kiln_context_message(ctx));
    for (int j = 0; !st && j < no; j++) {
        const char *name = kiln_model_output_name(opt, j);
        int r = -1;
        for (int q = 0; q < nr && r < 0; q++)
            if (strcmp(kiln_model_output_name(ref, q), name) == 0) r = q;
        CHECK(r >= 0, "%s: output %s is not the reference's", label, name);
        if (r < 0) continue;
        char l[200];
        snprintf(l, sizeof l, "%s: %s", label, name);
        /* never all zeros: a gradient that does not flow would compare equal */
        double mx = 0;
        for (int64_t i = 0; i < kiln_tensor_numel(want[r]); i++) mx = fmax(mx, fabs(kiln_get_f64(want[r], i)));
        CHECK(mx > 0, "%s: reference output is all zeros", l);
        const int bad = kiln_tensor_compare(got[j], want[r], 0, 0, l); /* (-0 equals +0 there) */
        fails += bad;
        const size_t bytes = (size_t)kiln_tensor_numel(want[r]) * kiln_dtype_size(want[r]->dtype);
        CHECK(bad || memcmp(got[j]->data, want[r]->data, bytes) == 0, "%s: equal values but different bits", l);
    }
    kiln_plan_free(pr);
    kiln_plan_free(po);
    free(want);
    free(got);
}

/* ------------------------------------------------------------------ mnist-net */

/* The CUDA trainer's passes (src/train/trainer.c) with the fusions done for the CPU:
 * fuse-conv, fuse-loss and precision (*mid), the layout pass for a CUDA plan, fuse-pool. */
static kiln_status cuda_passes(const kiln_model *src, kiln_precision prec, kiln_model **mid, kiln_model **out) {
    const kiln_pass_options fuse = {.device = KILN_DEVICE_CPU, .precision = prec,
                                    .disabled = ~(unsigned)(KILN_PASS_FUSE_CONV | KILN_PASS_FUSE_LOSS)};
    const kiln_pass_options lay = {.device = KILN_DEVICE_CUDA, .disabled = ~(unsigned)KILN_PASS_NHWC};
    const kiln_pass_options cpu = {.device = KILN_DEVICE_CPU};
    kiln_model *laid = NULL;
    bool changed = false;
    *mid = *out = NULL;
    kiln_status st = kiln_passes_apply(src, &fuse, mid);
    if (!st) st = kiln_passes_apply(*mid, &lay, &laid);
    if (!st) st = kiln_model_clone(laid, out);
    if (!st) st = kiln_pass_fuse_pool(*out, &cpu, &changed);
    if (!st) st = kiln_model_finalize(*out);
    kiln_model_free(laid);
    return st;
}

static void mnist(kiln_precision prec, int64_t batch) {
    char label[120];
    snprintf(label, sizeof label, "mnist-net training graph%s%s", prec == KILN_PRECISION_FP32 ? "" : ", fp16",
             batch < 0 ? ", symbolic batch" : "");
    printf("-- %s\n", label);
    kiln_model *m = NULL, *ref_src = NULL, *mid = NULL, *opt = NULL, *rmid = NULL, *ref = NULL;
    kiln_trainer *t = NULL;
    kiln_tensor *image = NULL, *lab = NULL, *vt = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_ADADELTA};
    if (kiln_model_mnist_net(ctx, batch, 1, 1, &m) || kiln_trainer_create(m, "loss", &o, &t)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    /* the reference: relu1's gradient also a graph output */
    const int r1 = kiln_model_find_value(t->train, "r1"), r2 = kiln_model_find_value(t->train, "r2");
    const kiln_node *u1 = relu_grad_of(t->train, r1);
    CHECK(r1 >= 0 && r2 >= 0 && u1 && relu_grad_of(t->train, r2), "%s: no Relu gradients in the training graph",
          label);
    if (!u1) goto out;
    const char *d1 = t->train->values[u1->out[0]].name;
    if (kiln_model_clone(t->train, &ref_src) || kiln_model_add_output(ref_src, d1) || kiln_model_finalize(ref_src) ||
        cuda_passes(ref_src, prec, &rmid, &ref) || cuda_passes(t->train, prec, &mid, &opt)) {
        CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
        goto out;
    }
    /* after fuse-conv: relu1's gradient folded, relu2's kept (conv2's input gradient reads it) */
    const int c1 = kiln_model_find_value(mid, "r1"), c2 = kiln_model_find_value(mid, "r2");
    CHECK(c1 >= 0 && c2 >= 0 && producer(mid, c1) && is_kiln(producer(mid, c1), "FusedConv"),
          "%s: conv1 + relu1 is not one kiln.FusedConv writing r1", label);
    CHECK(!relu_grad_of(mid, c1) && relu_grad_of(mid, c2) && relu_grad_of(rmid, kiln_model_find_value(rmid, "r1")),
          "%s: after fuse-conv relu1's UnaryGrad should be gone (kept in the reference), relu2's kept", label);
    CHECK(count(mid, "UnaryGrad", -1) == count(rmid, "UnaryGrad", -1) - 1, "%s: %d UnaryGrad, the reference %d",
          label, count(mid, "UnaryGrad", -1), count(rmid, "UnaryGrad", -1));
    CHECK(count(rmid, "ConvGradWeight", 1) == 0 && count(rmid, "ConvGradBias", 1) == 0,
          "%s: the reference folded a Relu gradient (relu1's is a graph output there)", label);
    /* after every pass */
    const int f1 = kiln_model_find_value(opt, "r1");
    CHECK(count(opt, "ConvGradWeight", 1) == 1 && count(opt, "ConvGradBias", 1) == 1 &&
              count(opt, "ConvGradWeight", 0) == 1 && count(opt, "ConvGradBias", 0) == 1 &&
              count(opt, "ConvGradInput", -1) == 1,
          "%s: %d / %d ConvGradWeight and %d / %d ConvGradBias with relu=1 / 0, expected 1 / 1 each", label,
          count(opt, "ConvGradWeight", 1), count(opt, "ConvGradWeight", 0), count(opt, "ConvGradBias", 1),
          count(opt, "ConvGradBias", 0));
    CHECK(f1 >= 0 && !relu_grad_of(opt, f1) && count(opt, "UnaryGrad", -1) == count(ref, "UnaryGrad", -1) - 1,
          "%s: relu1's UnaryGrad is back after the later passes", label);
    CHECK(!kiln_pass_infer_types(opt, &vt), "%s: inference: %s", label, kiln_context_message(ctx));
    const kiln_node *gi = NULL;
    for (int i = 0; i < opt->n_nodes; i++)
        if (is_kiln(&opt->nodes[i], "ConvGradInput")) gi = &opt->nodes[i];
    for (int i = 0; i < opt->n_nodes; i++) {
        const kiln_node *n = &opt->nodes[i];
        const bool w = is_kiln(n, "ConvGradWeight"), b = is_kiln(n, "ConvGradBias");
        if (!(w || b) || kiln_attr_int(n, "relu", 0) != 1) continue;
        const int dy = n->in[w ? 1 : 0], y = n->n_in > (w ? 3 : 1) ? n->in[w ? 3 : 1] : -1;
        CHECK(y >= 0 && source(opt, y) == f1, "%s: %s's Y is not conv1's output", label, n->op_type);
        CHECK(gi && source(opt, dy) == gi->out[0], "%s: %s's dY is not conv2's input gradient", label, n->op_type);
        if (y < 0) continue;
        const kiln_value *vy = &opt->values[y], *vd = &opt->values[dy];
        CHECK(vy->format == vd->format && (prec == KILN_PRECISION_FP32 || vd->format == KILN_FORMAT_NHWC),
              "%s: %s's Y is %s and dY %s (one layout; NHWC under fp16)", label, n->op_type,
              vy->format == KILN_FORMAT_NHWC ? "NHWC" : "NCHW", vd->format == KILN_FORMAT_NHWC ? "NHWC" : "NCHW");
        /* dtypes as inference finds them (a symbolic batch leaves the values' unset) */
        const kiln_dtype want = prec == KILN_PRECISION_FP32 ? KILN_F32 : KILN_F16;
        const kiln_dtype ty = vt ? vt[y].dtype : KILN_DTYPE_UNDEFINED, td = vt ? vt[dy].dtype : KILN_DTYPE_UNDEFINED;
        CHECK(ty == want && td == want, "%s: %s's Y is %s and dY %s, expected %s", label, n->op_type,
              kiln_dtype_name(ty), kiln_dtype_name(td), kiln_dtype_name(want));
    }
    /* the same function on the CPU: loss and every gradient */
    image = kt_rand(KILN_F32, 4, (int64_t[]){64, 1, 28, 28}, 0, 1, 11);
    lab = kt_rand(KILN_I64, 1, (int64_t[]){64}, 0, 10, 12);
    t->feeds[0] = image;
    t->feeds[1] = lab;
    same_function(label, ref, opt, t->feeds);
    t->feeds[0] = t->feeds[1] = NULL;
out:
    free(vt);
    kiln_tensor_free(image);
    kiln_tensor_free(lab);
    kiln_model_free(opt);
    kiln_model_free(mid);
    kiln_model_free(ref);
    kiln_model_free(rmid);
    kiln_model_free(ref_src);
    kiln_trainer_free(t);
    kiln_model_free(m);
}

/* ------------------------------------------------ hand-built gradient graphs */

typedef struct variant {
    const char *label;
    bool weight, bias, input; /* which gradients read d1 */
    bool d1_output;           /* d1 is a graph output too */
    const char *op;           /* the UnaryGrad's op */
    bool folds;
} variant;

/* x (2, 3, 8, 8), d and y (2, 4, 6, 6), w (4, 3, 3, 3):
 * d1 = kiln.UnaryGrad(d, -, y) op=<op>, read by the chosen gradients (outputs dw, db, dx). */
static kiln_status hand_graph(const variant *v, kiln_model **out) {
    kiln_model *m = NULL;
    kiln_status st = kiln_model_create(ctx, &m);
    const int64_t yd[4] = {2, 4, 6, 6};
    if (!st) st = kiln_model_add_input(m, "x", KILN_F32, 4, (int64_t[]){2, 3, 8, 8});
    if (!st) st = kiln_model_add_input(m, "d", KILN_F32, 4, yd);
    if (!st) st = kiln_model_add_input(m, "y", KILN_F32, 4, yd);
    kiln_tensor *w = kt_rand(KILN_F32, 4, (int64_t[]){4, 3, 3, 3}, -1, 1, 5);
    if (!st) st = w ? kiln_model_add_initializer(m, "w", w) : KILN_ERR_OUT_OF_MEMORY;
    kiln_tensor_free(w);
    const int x = kiln_model_find_value(m, "x"), d = kiln_model_find_value(m, "d"), y = kiln_model_find_value(m, "y"),
              wv = kiln_model_find_value(m, "w");
    const int d1 = st ? -1 : kiln_model_get_value(m, "d1"), dw = st ? -1 : kiln_model_get_value(m, "dw"),
              db = st ? -1 : kiln_model_get_value(m, "db"), dx = st ? -1 : kiln_model_get_value(m, "dx");
    if (!st && (d1 < 0 || dw < 0 || db < 0 || dx < 0)) st = KILN_ERR_OUT_OF_MEMORY;
    int u = -1, gw = -1, gi = -1;
    if (!st) u = kiln_model_add_node_raw(m, "UnaryGrad", "ug", "kiln", 3, (int[]){d, -1, y}, 1, &d1, 0, NULL);
    if (!st && u >= 0) st = kiln_pass_set_string(m, u, "op", v->op);
    if (!st && v->weight) {
        gw = kiln_model_add_node_raw(m, "ConvGradWeight", "gw", "kiln", 3, (int[]){x, d1, wv}, 1, &dw, 0, NULL);
    }
    if (!st && v->bias && kiln_model_add_node_raw(m, "ConvGradBias", "gb", "kiln", 1, &d1, 1, &db, 0, NULL) < 0)
        st = KILN_ERR_OUT_OF_MEMORY;
    if (!st && v->input) {
        gi = kiln_model_add_node_raw(m, "ConvGradInput", "gi", "kiln", 3, (int[]){d1, wv, x}, 1, &dx, 0, NULL);
    }
    if (!st && (u < 0 || (v->weight && gw < 0) || (v->input && gi < 0))) st = KILN_ERR_OUT_OF_MEMORY;
    if (!st && v->weight) st = kiln_model_add_output(m, "dw");
    if (!st && v->bias) st = kiln_model_add_output(m, "db");
    if (!st && v->input) st = kiln_model_add_output(m, "dx");
    if (!st && v->d1_output) st = kiln_model_add_output(m, "d1");
    if (!st) st = kiln_model_finalize(m);
    if (st) {
        kiln_model_free(m);
        m = NULL;
    }
    *out = m;
    return st;
}

static void hand(const variant *v) {
    printf("-- %s\n", v->label);
    kiln_model *m = NULL, *opt = NULL;
    kiln_tensor *feeds[3] = {0};
    const kiln_pass_options po = {.device = KILN_DEVICE_CPU, .disabled = ~(unsigned)KILN_PASS_FUSE_CONV};
    if (hand_graph(v, &m) || kiln_passes_apply(m, &po, &opt)) {
        CHECK(0, "%s: %s", v->label, kiln_context_message(ctx));
        goto out;
    }
    const int ug = count(opt, "UnaryGrad", -1);
    CHECK(ug == !v->folds, "%s: %d UnaryGrad left, expected %d", v->label, ug, !v->folds);
    CHECK(count(opt, "ConvGradWeight", 1) == (v->folds && v->weight) &&
              count(opt, "ConvGradBias", 1) == (v->folds && v->bias),
          "%s: %d ConvGradWeight and %d ConvGradBias with relu=1", v->label, count(opt, "ConvGradWeight", 1),
          count(opt, "ConvGradBias", 1));
    const int d = kiln_model_find_value(opt, "d"), y = kiln_model_find_value(opt, "y");
    for (int i = 0; v->folds && i < opt->n_nodes; i++) {
        const kiln_node *n = &opt->nodes[i];
        if (is_kiln(n, "ConvGradWeight"))
            CHECK(n->n_in == 4 && n->in[1] == d && n->in[3] == y, "%s: ConvGradWeight reads another dY or Y",
                  v->label);
        if (is_kiln(n, "ConvGradBias"))
            CHECK(n->n_in == 2 && n->in[0] == d && n->in[1] == y, "%s: ConvGradBias reads another dY or Y", v->label);
    }
    feeds[0] = kt_rand(KILN_F32, 4, (int64_t[]){2, 3, 8, 8}, -1, 1, 41);
    feeds[1] = kt_rand(KILN_F32, 4, (int64_t[]){2, 4, 6, 6}, -1, 1, 42);
    feeds[2] = kt_rand(KILN_F32, 4, (int64_t[]){2, 4, 6, 6}, -1, 1, 43);
    same_function(v->label, m, opt, feeds);
out:
    for (int i = 0; i < 3; i++) kiln_tensor_free(feeds[i]);
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
        {"weight and bias gradients: folded", true, true, false, false, "Relu", true},
        {"weight gradient only: folded", true, false, false, false, "Relu", true},
        {"bias gradient only: folded", false, true, false, false, "Relu", true},
        {"also read by a ConvGradInput: kept", true, true, true, false, "Relu", false},
        {"a graph output too: kept", true, true, false, true, "Relu", false},
        {"a Sigmoid's gradient: kept", true, true, false, false, "Sigmoid", false},
    };
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) hand(&vs[i]);

    kiln_context_free(ctx);
    printf("%s\n", fails ? "FAILED" : "all fuse-conv relu-gradient checks passed");
    return fails ? 1 : 0;
}
