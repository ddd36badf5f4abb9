/* test_passes.c — the graph passes compute the same function. Every case builds a model
 * with the C builder, runs it on the CPU with all passes off and with some on, on the same
 * random inputs, compares the outputs, and checks that the passes did change the plan
 * (its node count, and where it matters the optimized graph itself), so that no case can
 * pass by the pass doing nothing.
 * Usage: test_passes SOURCE_DIR (for examples/tiny_cnn.onnx). */
#include "core/optest.h"
#include "core/plan.h"
#include "ops/fused.h"
#include "passes/passes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
#define CHECK(cond, ...)                                  \
    do {                                                  \
        if (!(cond)) {                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);   \
            printf(__VA_ARGS__);                          \
            printf("\n");                                 \
            fails++;                                      \
        }                                                 \
    } while (0)

#define NONE 0xffffffffu /* disable_passes: every pass off */
#define ALL_OFF_BUT(bits) (NONE & ~(unsigned)(bits))
#define ALL (KILN_PASS_DEAD_NODES | KILN_PASS_FOLD_BN | KILN_PASS_FUSE_CONV | KILN_PASS_FUSE_ELTWISE)

static kiln_context *ctx;

/* ------------------------------------------------------------ model building */

static kiln_model *new_model(void) {
    kiln_model *m = NULL;
    CHECK(kiln_model_create(ctx, &m) == KILN_OK, "create");
    return m;
}

static void input(kiln_model *m, const char *name, kiln_dtype dt, int nd, const int64_t *dims) {
    CHECK(kiln_model_add_input(m, name, dt, nd, dims) == KILN_OK, "input %s: %s", name, kiln_context_message(ctx));
}

/* An initializer of uniform random values in [lo, hi). */
static void init(kiln_model *m, const char *name, kiln_dtype dt, int nd, const int64_t *dims, double lo, double hi,
                 uint64_t seed) {
    kiln_tensor *t = kt_rand(dt, nd, dims, lo, hi, seed);
    CHECK(t && kiln_model_add_initializer(m, name, t) == KILN_OK, "initializer %s", name);
    kiln_tensor_free(t);
}

static void init_scalar(kiln_model *m, const char *name, kiln_dtype dt, double v) {
    kiln_tensor *t = kt_scalar(dt, v);
    CHECK(t && kiln_model_add_initializer(m, name, t) == KILN_OK, "initializer %s", name);
    kiln_tensor_free(t);
}

/* A node with inputs given as "a,b,,c" (empty: missing) and one output. */
static kiln_node *node(kiln_model *m, const char *op, const char *ins, const char *out) {
    char buf[256], *save = NULL;
    const char *in[8];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", ins);
    /* strtok would skip empty fields: split by hand */
    char *p = buf;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        in[n++] = p;
        if (!comma || n == 8) break;
        p = comma + 1;
    }
    (void)save;
    kiln_node *nd = NULL;
    CHECK(kiln_model_add_node(m, op, out, n, in, 1, &out, &nd) == KILN_OK, "node %s: %s", op,
          kiln_context_message(ctx));
    return nd;
}

/* A Constant node holding t (taken over). */
static void constant(kiln_model *m, const char *out, kiln_tensor *t) {
    kiln_node *nd = NULL;
    CHECK(kiln_model_add_node(m, "Constant", out, 0, NULL, 1, &out, &nd) == KILN_OK, "constant");
    kiln_attr *a = realloc(nd->attrs, sizeof *a * (size_t)(nd->n_attrs + 1));
    if (!a || !t) {
        kiln_tensor_free(t);
        fails++;
        return;
    }
    nd->attrs = a;
    memset(&a[nd->n_attrs], 0, sizeof *a);
    a[nd->n_attrs].name = strdup("value");
    a[nd->n_attrs].type = KILN_ATTR_TENSOR;
    a[nd->n_attrs].t = t;
    nd->n_attrs++;
}

static void output(kiln_model *m, const char *name) {
    CHECK(kiln_model_add_output(m, name) == KILN_OK, "output %s", name);
}

static bool finalize(kiln_model *m) {
    kiln_status st = kiln_model_finalize(m);
    CHECK(st == KILN_OK, "finalize: %s", kiln_context_message(ctx));
    return st == KILN_OK;
}

/* ------------------------------------------------------------------ running */

/* Run m with disable_passes = off on inputs; copies of the outputs into outs, the plan's
 * executed node count into *nodes. false on failure. */
static bool run(kiln_model *m, unsigned off, int n_in, kiln_tensor **in, kiln_tensor **outs, int *nodes) {
    kiln_session_options o = {0};
    o.disable_passes = off;
    kiln_session *s = NULL;
    const int n_out = kiln_model_num_outputs(m);
    const kiln_tensor *y[8] = {0};
    kiln_plan_stats stats = {0};
    bool ok = kiln_session_create(m, &o, &s) == KILN_OK && kiln_session_run(s, n_in, in, n_out, y) == KILN_OK &&
              kiln_session_stats(s, &stats) == KILN_OK;
    if (!ok) printf("FAIL run (disable_passes %#x): %s\n", off, kiln_context_message(ctx));
    for (int k = 0; k < n_out; k++) outs[k] = ok ? kiln_tensor_clone(ctx, y[k]) : NULL;
    *nodes = stats.nodes;
    kiln_session_free(s);
    return ok;
}

/* Random inputs for m's graph inputs (shapes as declared; -1 dims become batch), at
 * most 16. */
static int make_inputs(kiln_model *m, int64_t batch, kiln_tensor **in, uint64_t seed) {
    const int n = kiln_model_num_inputs(m) < 16 ? kiln_model_num_inputs(m) : 16;
    for (int i = 0; i < n; i++) {
        kiln_dtype dt;
        int nd;
        int64_t dims[KILN_MAX_DIMS];
        kiln_model_input_info(m, i, &dt, &nd, dims);
        for (int d = 0; d < nd; d++)
            if (dims[d] < 0) dims[d] = batch;
        in[i] = kt_rand(dt, nd, dims, -2, 2, seed + (uint64_t)i);
    }
    return n;
}

/* Run m with every pass off and with `on` on (others off), compare all outputs within
 * (atol, rtol), and check the executed node counts: ref_nodes without passes, want_nodes
 * with them. Frees m. */
static void check(const char *label, kiln_model *m, unsigned on, int64_t batch, double atol, double rtol,
                  int ref_nodes, int want_nodes) {
    kiln_tensor *in[16] = {0}, *ref[8] = {0}, *got[8] = {0};
    const int n_in = make_inputs(m, batch, in, 1234);
    const int n_out = kiln_model_num_outputs(m);
    int n_ref = -1, n_got = -1;
    bool ok = run(m, NONE, n_in, in, ref, &n_ref) && run(m, ALL_OFF_BUT(on), n_in, in, got, &n_got);
    if (!ok) fails++;
    for (int k = 0; ok && k < n_out; k++) {
        char lab[200];
        snprintf(lab, sizeof lab, "%s: output %d with passes %#x vs none", label, k, on);
        fails += kiln_tensor_compare(got[k], ref[k], atol, rtol, lab);
    }
    CHECK(!ok || n_ref == ref_nodes, "%s: %d nodes without passes, expected %d", label, n_ref, ref_nodes);
    CHECK(!ok || n_got == want_nodes, "%s: %d nodes with passes %#x, expected %d", label, n_got, on, want_nodes);
    for (int k = 0; k < 16; k++) kiln_tensor_free(in[k]);
    for (int k = 0; k < 8; k++) {
        kiln_tensor_free(ref[k]);
        kiln_tensor_free(got[k]);
    }
    kiln_model_free(m);
}

/* The optimized graph of m with passes `on`, for looking at it (caller frees). */
static kiln_model *optimized(const kiln_model *m, unsigned on) {
    kiln_pass_options o = {.device = KILN_DEVICE_CPU, .precision = KILN_PRECISION_FP32, .disabled = ALL_OFF_BUT(on)};
    kiln_model *out = NULL;
    CHECK(kiln_passes_apply(m, &o, &out) == KILN_OK, "passes: %s", kiln_context_message(ctx));
    return out;
}

/* The first node of op_type in m, or NULL. */
static const kiln_node *find(const kiln_model *m, const char *op_type) {
    for (int i = 0; m && i < m->n_nodes; i++)
        if (!strcmp(m->nodes[i].op_type, op_type)) return &m->nodes[i];
    return NULL;
}

static int count(const kiln_model *m, const char *op_type) {
    int n = 0;
    for (int i = 0; m && i < m->n_nodes; i++) n += !strcmp(m->nodes[i].op_type, op_type);
    return n;
}

/* ---------------------------------------------------------------- fold-bn */

/* BN over channel count C reading x, output y: scale, B, mean, var initializers (var > 0,
 * so the fold has real work to do). */
static void bn(kiln_model *m, const char *pre, kiln_dtype dt, int64_t C, const char *x, const char *y,
               uint64_t seed) {
    char s[4][64], ins[300];
    static const char *const names[4] = {"scale", "bias", "mean", "var"};
    for (int k = 0; k < 4; k++) {
        snprintf(s[k], sizeof s[k], "%s_%s", pre, names[k]);
        init(m, s[k], dt, 1, &C, k == 3 ? 0.5 : -1.5, k == 3 ? 2.0 : 1.5, seed + (uint64_t)k);
    }
    snprintf(ins, sizeof ins, "%s,%s,%s,%s,%s", x, s[0], s[1], s[2], s[3]);
    kiln_node *n = node(m, "BatchNormalization", ins, y);
    if (n) kiln_node_set_float(n, "epsilon", 1e-3f);
}

/* x (2,3,8,8) -> Conv 3->4 (3x3, pads 1, bias?) -> BN [-> Relu] */
static kiln_model *conv_bn(kiln_dtype dt, bool bias, bool relu) {
    kiln_model *m = new_model();
    input(m, "x", dt, 4, KT_DIMS(2, 3, 8, 8));
    init(m, "w", dt, 4, KT_DIMS(4, 3, 3, 3), -1, 1, 10);
    if (bias) init(m, "b", dt, 1, KT_DIMS(4), -1, 1, 11);
    kiln_node *c = node(m, "Conv", bias ? "x,w,b" : "x,w", "c");
    if (c) kiln_node_set_ints(c, "pads", 4, KT_DIMS(1, 1, 1, 1));
    bn(m, "bn", dt, 4, "c", relu ? "n" : "y", 20);
    if (relu) node(m, "Relu", "n", "y");
    output(m, "y");
    finalize(m);
    return m;
}

static void test_fold_bn(void) {
    check("Conv-BN", conv_bn(KILN_F32, true, false), KILN_PASS_FOLD_BN, 2, 1e-5, 1e-5, 2, 1);
    check("Conv without bias-BN", conv_bn(KILN_F32, false, false), KILN_PASS_FOLD_BN, 2, 1e-5, 1e-5, 2, 1);
    check("Conv-BN-Relu, fold only", conv_bn(KILN_F32, true, true), KILN_PASS_FOLD_BN, 2, 1e-5, 1e-5, 3, 2);
    check("Conv-BN-Relu, all passes", conv_bn(KILN_F32, true, true), ALL, 2, 1e-5, 1e-5, 3, 1);
    check("Conv-BN f64", conv_bn(KILN_F64, true, false), KILN_PASS_FOLD_BN, 2, 1e-12, 1e-12, 2, 1);
    /* f16 weights: folded in double, rounded once; the unfused graph rounds twice */
    check("Conv-BN f16", conv_bn(KILN_F16, true, false), KILN_PASS_FOLD_BN, 2, 2e-2, 1e-2, 2, 1);

    /* the fold really is in the weights: one Conv left, reading new initializers */
    kiln_model *m = conv_bn(KILN_F32, false, false);
    kiln_model *o = optimized(m, KILN_PASS_FOLD_BN);
    const kiln_node *c = find(o, "Conv");
    CHECK(o && o->n_nodes == 1 && c && c->n_in == 3 && o->values[c->in[1]].init && o->values[c->in[2]].init &&
              strcmp(o->values[c->in[1]].name, "w") != 0,
          "fold-bn: one Conv with a new W and a bias");
    kiln_model_free(o);
    kiln_model_free(m);

    /* ConvTranspose (grouped) - BN */
    m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(2, 4, 5, 5));
    init(m, "w", KILN_F32, 4, KT_DIMS(4, 3, 3, 3), -1, 1, 30); /* C=4, M/g=3, group 2: M=6 */
    init(m, "b", KILN_F32, 1, KT_DIMS(6), -1, 1, 31);
    kiln_node *n = node(m, "ConvTranspose", "x,w,b", "c");
    if (n) {
        kiln_node_set_int(n, "group", 2);
        kiln_node_set_ints(n, "strides", 2, KT_DIMS(2, 2));
    }
    bn(m, "bn", KILN_F32, 6, "c", "y", 32);
    output(m, "y");
    finalize(m);
    check("ConvTranspose (group 2)-BN", m, KILN_PASS_FOLD_BN, 2, 1e-5, 1e-5, 2, 1);

    /* Gemm (transB, C (N), alpha, beta) - BN over (N, C) */
    for (int tb = 0; tb < 2; tb++) {
        m = new_model();
        input(m, "x", KILN_F32, 2, KT_DIMS(5, 6));
        init(m, "w", KILN_F32, 2, tb ? KT_DIMS(4, 6) : KT_DIMS(6, 4), -1, 1, 40);
        if (tb) init(m, "c", KILN_F32, 1, KT_DIMS(4), -1, 1, 41);
        else init(m, "c", KILN_F32, 2, KT_DIMS(5, 1), -1, 1, 41);
        n = node(m, "Gemm", "x,w,c", "g");
        if (n) {
            kiln_node_set_int(n, "transB", tb);
            kiln_node_set_float(n, "alpha", 0.75f);
            kiln_node_set_float(n, "beta", 1.5f);
        }
        bn(m, "bn", KILN_F32, 4, "g", "y", 42);
        output(m, "y");
        finalize(m);
        check(tb ? "Gemm transB, C (N) - BN" : "Gemm, C (M,1) - BN", m, KILN_PASS_FOLD_BN, 2, 1e-5, 1e-5, 2, 1);
    }

    /* Shared weights: Conv1 (then BN) and Conv2 (no BN) read the same W and B. Folding
     * must leave them alone for Conv2, in the session's copy and in the user's model. */
    m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(1, 3, 6, 6));
    init(m, "w", KILN_F32, 4, KT_DIMS(4, 3, 3, 3), -1, 1, 50);
    init(m, "b", KILN_F32, 1, KT_DIMS(4), -1, 1, 51);
    node(m, "Conv", "x,w,b", "c1");
    node(m, "Conv", "x,w,b", "y2");
    bn(m, "bn", KILN_F32, 4, "c1", "y1", 52);
    output(m, "y1");
    output(m, "y2");
    finalize(m);
    const kiln_tensor *w0 = m->values[kiln_model_find_value(m, "w")].init;
    kiln_tensor *w_copy = kiln_tensor_clone(ctx, w0);
    kiln_tensor *in[1] = {kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 6, 6), -1, 1, 53)};
    kiln_tensor *y[2] = {0};
    int nodes = 0;
    if (run(m, ALL_OFF_BUT(KILN_PASS_FOLD_BN), 1, in, y, &nodes)) {
        /* y2 against Conv with the original weights, computed here */
        kiln_tensor *want = kiln_fused_test_eval(
            "Conv", "", 3, (kiln_tensor *[]){in[0], w_copy, m->values[kiln_model_find_value(m, "b")].init});
        fails += kiln_tensor_compare(y[1], want, 1e-6, 1e-6, "shared weights: the other Conv still sees W");
        kiln_tensor_free(want);
    }
    fails += kiln_tensor_compare(w0, w_copy, 0, 0, "shared weights: the user's W is unchanged");
    kiln_tensor_free(y[0]);
    kiln_tensor_free(y[1]);
    kiln_tensor_free(in[0]);
    kiln_tensor_free(w_copy);
    check("shared weights Conv-BN + Conv", m, KILN_PASS_FOLD_BN, 1, 1e-5, 1e-5, 3, 2);

    /* Not folded: the Conv's output has another reader. */
    m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(2, 3, 5, 5));
    init(m, "w", KILN_F32, 4, KT_DIMS(3, 3, 1, 1), -1, 1, 60);
    node(m, "Conv", "x,w", "c");
    bn(m, "bn", KILN_F32, 3, "c", "y", 61);
    node(m, "Relu", "c", "r");
    output(m, "y");
    output(m, "r");
    finalize(m);
    /* (fuse-eltwise would make the BN a fused per-channel x * s + t) */
    o = optimized(m, ALL & ~(unsigned)KILN_PASS_FUSE_ELTWISE);
    CHECK(o && count(o, "BatchNormalization") == 1, "fold-bn: a conv output with two readers is not folded");
    kiln_model_free(o);
    kiln_model_free(m);
}

/* ---------------------------------------------------------------- fuse-conv */

/* ResNet's basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + x), batch symbolic or not. */
static kiln_model *resnet_block(bool symbolic, const char *add) {
    kiln_model *m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(symbolic ? -1 : 2, 4, 6, 6));
    init(m, "w1", KILN_F32, 4, KT_DIMS(4, 4, 3, 3), -0.5, 0.5, 70);
    init(m, "w2", KILN_F32, 4, KT_DIMS(4, 4, 3, 3), -0.5, 0.5, 71);
    kiln_node *c = node(m, "Conv", "x,w1", "c1");
    if (c) kiln_node_set_ints(c, "pads", 4, KT_DIMS(1, 1, 1, 1));
    bn(m, "bn1", KILN_F32, 4, "c1", "n1", 72);
    node(m, "Relu", "n1", "r1");
    c = node(m, "Conv", "r1,w2", "c2");
    if (c) kiln_node_set_ints(c, "pads", 4, KT_DIMS(1, 1, 1, 1));
    bn(m, "bn2", KILN_F32, 4, "c2", "n2", 73);
    node(m, add, "n2,x", "s");
    node(m, "Relu", "s", "y");
    output(m, "y");
    finalize(m);
    return m;
}

static void init_i64s(kiln_model *m, const char *name, int n, const double *v);

static void test_fuse_conv(void) {
    /* residual block: two FusedConv, the second with Z = x */
    check("ResNet block, all passes", resnet_block(false, "Add"), ALL, 2, 1e-5, 1e-5, 7, 2);
    /* Caffe2-converted ResNets write the residual as a Sum of two */
    check("ResNet block with a Sum residual", resnet_block(false, "Sum"), ALL, 2, 1e-5, 1e-5, 7, 2);
    kiln_model *m = resnet_block(false, "Add");
    kiln_model *o = optimized(m, ALL);
    const kiln_node *last = o && o->n_nodes == 2 ? &o->nodes[1] : NULL;
    int npads = 0;
    if (last) kiln_attr_ints(last, "pads", &npads);
    CHECK(last && !strcmp(last->op_type, "FusedConv") && !strcmp(last->domain, "kiln") && last->n_in == 4 &&
              !strcmp(o->values[last->in[3]].name, "x") &&
              !strcmp(kiln_attr_string(last, "activation", ""), "Relu") &&
              !strcmp(kiln_attr_string(&o->nodes[0], "activation", ""), "Relu") &&
              npads == 4,
          "ResNet block: FusedConv(X, W, B, Z=x) with Relu and Conv's attributes");
    kiln_model_free(o);
    kiln_model_free(m);
    /* a symbolic batch: the residual's shape equals the conv output's under both probes
     * of the batch (1 and 3), so the Add and Relu still fuse into the conv */
    check("ResNet block, symbolic batch", resnet_block(true, "Add"), ALL, 3, 1e-5, 1e-5, 7, 2);
    m = resnet_block(true, "Add");
    o = optimized(m, ALL);
    CHECK(o && count(o, "FusedConv") == 2 && o->n_nodes == 2 && o->nodes[1].n_in == 4,
          "ResNet block, symbolic batch: two FusedConv, the second with the residual");
    kiln_model_free(o);
    kiln_model_free(m);
    /* ... but a residual of batch 1 broadcast over the symbolic batch is not the conv
     * output's shape (1 vs 3 under the second probe): the Add stays outside the conv */
    m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(-1, 4, 6, 6));
    input(m, "r", KILN_F32, 4, KT_DIMS(1, 4, 6, 6));
    init(m, "w1", KILN_F32, 4, KT_DIMS(4, 4, 3, 3), -0.5, 0.5, 74);
    kiln_node *cv = node(m, "Conv", "x,w1", "c1");
    if (cv) kiln_node_set_ints(cv, "pads", 4, KT_DIMS(1, 1, 1, 1));
    node(m, "Add", "c1,r", "s");
    node(m, "Relu", "s", "y");
    output(m, "y");
    finalize(m);
    o = optimized(m, KILN_PASS_FUSE_CONV);
    CHECK(o && count(o, "FusedConv") == 0 && count(o, "Add") == 1,
          "broadcast residual under a symbolic batch: not fused into the conv");
    kiln_model_free(o);
    kiln_model_free(m);

    /* Gemm + Relu, Gemm + LeakyRelu (FusedGemm's act_alpha next to Gemm's alpha) */
    static const char *const acts[] = {"Relu", "LeakyRelu", "HardSigmoid"};
    for (int a = 0; a < 3; a++) {
        m = new_model();
        input(m, "x", KILN_F32, 2, KT_DIMS(5, 6));
        init(m, "w", KILN_F32, 2, KT_DIMS(4, 6), -1, 1, 80);
        init(m, "c", KILN_F32, 1, KT_DIMS(4), -1, 1, 81);
        kiln_node *g = node(m, "Gemm", "x,w,c", "g");
        if (g) {
            kiln_node_set_int(g, "transB", 1);
            kiln_node_set_float(g, "alpha", 2.0f);
        }
        kiln_node *r = node(m, acts[a], "g", "y");
        if (r && a > 0) kiln_node_set_float(r, "alpha", 0.3f);
        output(m, "y");
        finalize(m);
        char label[64];
        snprintf(label, sizeof label, "Gemm-%s", acts[a]);
        check(label, m, KILN_PASS_FUSE_CONV, 1, 1e-5, 1e-5, 2, 1);
    }

    /* a Linear as exported: MatMul(X (B,T,K), W (K,N)) + Add(bias (N)), bias first or
     * second, a symbolic batch: Flatten -> Gemm (bias in the epilogue) -> Reshape */
    for (int order = 0; order < 2; order++) {
        m = new_model();
        input(m, "x", KILN_F32, 4, KT_DIMS(-1, 3, 5, 6));
        init(m, "w", KILN_F32, 2, KT_DIMS(6, 7), -1, 1, 84);
        init(m, "bias", KILN_F32, 1, KT_DIMS(7), -1, 1, 85);
        node(m, "MatMul", "x,w", "mm");
        node(m, "Identity", "bias", "bias_id"); /* an exporter's deduplicated initializer */
        node(m, "Add", order ? "bias_id,mm" : "mm,bias", "y");
        output(m, "y");
        finalize(m);
        o = optimized(m, KILN_PASS_FUSE_CONV);
        CHECK(o && count(o, "MatMul") == 0 && count(o, "Add") == 0 && count(o, "Gemm") == 1 &&
                  count(o, "Flatten") == 1 && count(o, "Reshape") == 1,
              "fuse-conv: MatMul + bias Add (order %d) -> Flatten, Gemm, Reshape", order);
        kiln_model_free(o);
        check(order ? "MatMul + Add(Identity(bias), .)" : "MatMul + Add(., bias)", m, KILN_PASS_FUSE_CONV, 3, 1e-5, 1e-5,
              2, 3);
    }
    /* a Linear whose result a residual Add reads (a transformer's second MLP product), the
     * residual either operand, a symbolic batch: Flatten(X), Flatten(Z) -> FusedGemm(X, W,
     * bias, Z) -> Reshape; the residual here is the Linear's own input (K == N), read twice */
    for (int order = 0; order < 2; order++) {
        m = new_model();
        input(m, "x", KILN_F32, 3, KT_DIMS(-1, 5, 6));
        init(m, "w", KILN_F32, 2, KT_DIMS(6, 6), -1, 1, 92);
        init(m, "bias", KILN_F32, 1, KT_DIMS(6), -1, 1, 93);
        input(m, "r", KILN_F32, 3, KT_DIMS(-1, 5, 6));
        node(m, "MatMul", "x,w", "mm");
        node(m, "Add", "mm,bias", "lin");
        node(m, "Add", order ? "lin,r" : "x,lin", "y");
        output(m, "y");
        finalize(m);
        o = optimized(m, KILN_PASS_FUSE_CONV | KILN_PASS_GEMM_RESIDUAL);
        CHECK(o && count(o, "MatMul") == 0 && count(o, "Add") == 0 && count(o, "Gemm") == 0 && count(o, "FusedGemm") == 1 &&
                  count(o, "Flatten") == 2 && count(o, "Reshape") == 1,
              "fuse-conv: MatMul + bias Add + residual Add (%s) -> Flatten x2, FusedGemm, Reshape",
              order ? "another input" : "the Linear's input");
        kiln_model_free(o);
        check(order ? "Linear + residual Add (another input)" : "Linear + residual Add (its input)", m,
              KILN_PASS_FUSE_CONV | KILN_PASS_GEMM_RESIDUAL, 3, 1e-5, 1e-5, 3, 4);
    }
    /* the residual an intermediate value (a transformer's running sum: its dtype known only
     * from inference), read by the residual Add and by another node */
    m = new_model();
    input(m, "x", KILN_F32, 3, KT_DIMS(-1, 5, 6));
    init(m, "w", KILN_F32, 2, KT_DIMS(6, 6), -1, 1, 88);
    init(m, "bias", KILN_F32, 1, KT_DIMS(6), -1, 1, 89);
    node(m, "Relu", "x", "h");
    node(m, "MatMul", "h,w", "mm");
    node(m, "Add", "mm,bias", "lin");
    node(m, "Add", "h,lin", "s");
    node(m, "Mul", "s,h", "y");
    output(m, "y");
    finalize(m);
    o = optimized(m, KILN_PASS_FUSE_CONV | KILN_PASS_GEMM_RESIDUAL);
    CHECK(o && count(o, "FusedGemm") == 1 && count(o, "Add") == 0 && count(o, "Gemm") == 0,
          "fuse-conv: an intermediate residual joins the Linear as FusedGemm's Z");
    kiln_model_free(o);
    check("Linear + residual Add (an intermediate residual)", m, KILN_PASS_FUSE_CONV | KILN_PASS_GEMM_RESIDUAL, 3, 1e-5,
          1e-5, 5, 6);
    /* a Gemm of rows (transB, bias row) and its residual Add: directly (Z 2-D), and behind
     * the Reshape back to (B, L, N) (an out-projection: Z 3-D, joined as Flatten(Z)) */
    for (int viewed = 0; viewed < 2; viewed++) {
        m = new_model();
        if (viewed) {
            input(m, "x", KILN_F32, 3, KT_DIMS(-1, 5, 6));
            init_i64s(m, "rows", 2, (double[]){-1, 6});
            init_i64s(m, "back", 3, (double[]){-1, 5, 6});
            node(m, "Reshape", "x,rows", "x2");
        } else {
            input(m, "x", KILN_F32, 2, KT_DIMS(-1, 6));
            node(m, "Identity", "x", "x2");
        }
        init(m, "w", KILN_F32, 2, KT_DIMS(6, 6), -1, 1, 86);
        init(m, "bias", KILN_F32, 1, KT_DIMS(6), -1, 1, 87);
        kiln_node *g = node(m, "Gemm", "x2,w,bias", "g");
        kiln_node_set_int(g, "transB", 1);
        if (viewed) node(m, "Reshape", "g,back", "gv");
        node(m, "Add", viewed ? "x,gv" : "g,x", "y");
        output(m, "y");
        finalize(m);
        o = optimized(m, KILN_PASS_FUSE_CONV | KILN_PASS_GEMM_RESIDUAL);
        CHECK(o && count(o, "FusedGemm") == 1 && count(o, "Gemm") == 0 && count(o, "Add") == 0 &&
                  count(o, "Flatten") == viewed,
              "fuse-conv: Gemm%s + residual Add -> FusedGemm with Z", viewed ? " -> Reshape" : "");
        kiln_model_free(o);
        o = optimized(m, KILN_PASS_FUSE_CONV);
        CHECK(o && count(o, "FusedGemm") == 0 && count(o, "Add") == 1, "fuse-conv, gemm-residual off: Gemm%s + Add stay",
              viewed ? " -> Reshape" : "");
        kiln_model_free(o);
        check(viewed ? "Gemm -> Reshape + residual Add" : "Gemm + residual Add", m,
              KILN_PASS_FUSE_CONV | KILN_PASS_GEMM_RESIDUAL, 3, 1e-5, 1e-5, viewed ? 4 : 3, viewed ? 4 : 2);
    }
    /* gemm-residual off (alone): the Gemm and the Add stay */
    m = new_model();
    input(m, "x", KILN_F32, 3, KT_DIMS(-1, 5, 6));
    init(m, "w", KILN_F32, 2, KT_DIMS(6, 6), -1, 1, 97);
    init(m, "bias", KILN_F32, 1, KT_DIMS(6), -1, 1, 98);
    node(m, "MatMul", "x,w", "mm");
    node(m, "Add", "mm,bias", "lin");
    node(m, "Add", "x,lin", "y");
    output(m, "y");
    finalize(m);
    o = optimized(m, KILN_PASS_FUSE_CONV);
    CHECK(o && count(o, "FusedGemm") == 0 && count(o, "Gemm") == 1 && count(o, "Add") == 1,
          "fuse-conv with gemm-residual off: Gemm and the residual Add");
    kiln_model_free(o);
    check("Linear + residual Add, gemm-residual off", m, KILN_PASS_FUSE_CONV, 3, 1e-5, 1e-5, 3, 4);
    /* not joined: a residual that broadcasts (1, 5, 6), and a Linear result read twice */
    m = new_model();
    input(m, "x", KILN_F32, 3, KT_DIMS(2, 5, 6));
    init(m, "w", KILN_F32, 2, KT_DIMS(6, 6), -1, 1, 94);
    init(m, "bias", KILN_F32, 1, KT_DIMS(6), -1, 1, 95);
    init(m, "r", KILN_F32, 3, KT_DIMS(1, 5, 6), -1, 1, 96);
    node(m, "MatMul", "x,w", "mm");
    node(m, "Add", "mm,bias", "lin");
    node(m, "Add", "lin,r", "y");
    node(m, "MatMul", "y,w", "mm2");
    node(m, "Add", "mm2,bias", "lin2");
    node(m, "Add", "lin2,lin2", "y2");
    output(m, "y2");
    finalize(m);
    o = optimized(m, KILN_PASS_FUSE_CONV | KILN_PASS_GEMM_RESIDUAL);
    CHECK(o && count(o, "FusedGemm") == 0 && count(o, "Gemm") == 2 && count(o, "Add") == 2,
          "fuse-conv: no residual for a broadcast Z or a result read twice");
    kiln_model_free(o);
    check("Linear + broadcast residual, Linear + Add(l, l)", m, KILN_PASS_FUSE_CONV | KILN_PASS_GEMM_RESIDUAL, 2, 1e-5,
          1e-5, 6, 8);

    /* not rewritten: a bias of another length than N (broadcast along another dim), and
     * a non-constant weight */
    m = new_model();
    input(m, "x", KILN_F32, 3, KT_DIMS(2, 7, 6));
    init(m, "w", KILN_F32, 2, KT_DIMS(6, 7), -1, 1, 86);
    init(m, "bias", KILN_F32, 3, KT_DIMS(1, 7, 1), -1, 1, 87);
    input(m, "w2", KILN_F32, 2, KT_DIMS(7, 7));
    init(m, "b2", KILN_F32, 1, KT_DIMS(7), -1, 1, 88);
    node(m, "MatMul", "x,w", "mm");
    node(m, "Add", "mm,bias", "a");
    node(m, "MatMul", "a,w2", "mm2");
    node(m, "Add", "mm2,b2", "y");
    output(m, "y");
    finalize(m);
    o = optimized(m, KILN_PASS_FUSE_CONV);
    CHECK(o && count(o, "MatMul") == 2 && count(o, "Gemm") == 0, "fuse-conv: no Gemm for a (1,N,1) bias or an input W");
    kiln_model_free(o);
    check("MatMul + (1,N,1) Add, MatMul(input W) + Add", m, KILN_PASS_FUSE_CONV, 2, 1e-5, 1e-5, 4, 4);

    /* Conv + bias as a separate Add of a (1,M,1,1) constant + Clip 0..6 from Constant nodes
     * (ReLU6): one FusedConv */
    m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(2, 3, 7, 7));
    init(m, "w", KILN_F32, 4, KT_DIMS(5, 3, 3, 3), -1, 1, 90);
    init(m, "bias", KILN_F32, 4, KT_DIMS(1, 5, 1, 1), -1, 1, 91);
    constant(m, "lo", kt_scalar(KILN_F32, 0));
    constant(m, "hi", kt_scalar(KILN_F32, 1.5));
    node(m, "Conv", "x,w", "c");
    node(m, "Add", "bias,c", "a");
    node(m, "Clip", "a,lo,hi", "y");
    output(m, "y");
    finalize(m);
    check("Conv + bias Add + Clip", m, KILN_PASS_FUSE_CONV, 2, 1e-5, 1e-5, 3, 1);

    /* a scalar Add also counts as a bias, and an existing bias is kept */
    m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(1, 2, 5, 5));
    init(m, "w", KILN_F32, 4, KT_DIMS(3, 2, 3, 3), -1, 1, 92);
    init(m, "b", KILN_F32, 1, KT_DIMS(3), -1, 1, 93);
    init_scalar(m, "k", KILN_F32, 0.625);
    node(m, "Conv", "x,w,b", "c");
    node(m, "Add", "c,k", "y");
    output(m, "y");
    finalize(m);
    check("Conv(bias) + scalar Add", m, KILN_PASS_FUSE_CONV, 1, 1e-5, 1e-5, 2, 1);

    /* Conv + residual Add, no activation; Conv + Sigmoid */
    m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(2, 3, 5, 5));
    input(m, "z", KILN_F32, 4, KT_DIMS(2, 4, 5, 5));
    init(m, "w", KILN_F32, 4, KT_DIMS(4, 3, 1, 1), -1, 1, 94);
    node(m, "Conv", "x,w", "c");
    node(m, "Add", "z,c", "s");
    node(m, "Sigmoid", "s", "y");
    output(m, "y");
    finalize(m);
    check("Conv + residual + Sigmoid", m, KILN_PASS_FUSE_CONV, 1, 1e-5, 1e-5, 3, 1);

    /* Not fused: the conv output is also a graph output */
    m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(1, 3, 5, 5));
    init(m, "w", KILN_F32, 4, KT_DIMS(4, 3, 3, 3), -1, 1, 95);
    node(m, "Conv", "x,w", "c");
    node(m, "Relu", "c", "y");
    output(m, "c");
    output(m, "y");
    finalize(m);
    o = optimized(m, ALL);
    CHECK(o && count(o, "Conv") == 1 && count(o, "Relu") == 1 && count(o, "FusedConv") == 0,
          "fuse-conv: a conv output that is a graph output is not fused");
    kiln_model_free(o);
    check("Conv (graph output) + Relu", m, ALL, 1, 0, 0, 2, 2);
}

/* ------------------------------------------ fuse-conv: Silu and Gelu (several nodes) */

#define SMOOTH (KILN_PASS_FOLD_BN | KILN_PASS_FUSE_CONV | KILN_PASS_FUSE_SILU_GELU)

/* Gelu's erf form as torch.onnx writes it, x -> y (Div by sqrt2, Erf, Add 1, Mul x, Mul
 * 0.5; the constants a rank-0 initializer and Constant nodes). */
static void erf_gelu(kiln_model *m, kiln_dtype dt, double sqrt2, const char *x) {
    char div_in[64], mul_in[64];
    snprintf(div_in, sizeof div_in, "%s,sqrt2", x);
    snprintf(mul_in, sizeof mul_in, "%s,a", x);
    init_scalar(m, "sqrt2", dt, sqrt2);
    constant(m, "one", kt_scalar(dt, 1));
    constant(m, "half", kt_scalar(dt, 0.5));
    node(m, "Div", div_in, "d");
    node(m, "Erf", "d", "e");
    node(m, "Add", "e,one", "a");
    node(m, "Mul", mul_in, "p");
    node(m, "Mul", "p,half", "y");
}

/* A Linear as exported, x (nd dims, the last 6) -> MatMul(x, w (6, 8)) -> Add(bias (8)) -> c,
 * in a new model; w and b drawn with seeds seed and seed + 1. */
static kiln_model *linear_model(int nd, const int64_t *dims, uint64_t seed) {
    kiln_model *m = new_model();
    input(m, "x", KILN_F32, nd, dims);
    init(m, "w", KILN_F32, 2, KT_DIMS(6, 8), -1, 1, seed);
    init(m, "b", KILN_F32, 1, KT_DIMS(8), -1, 1, seed + 1);
    node(m, "MatMul", "x,w", "mm");
    node(m, "Add", "mm,b", "c");
    return m;
}

/* x (2,C,7,6) -> depthwise (group C) or full Conv 3x3 -> [BN] -> act, act one of:
 *   "silu_xs" Sigmoid(c) -> Mul(c, s); "silu_sx" Mul(s, c); "silu_shared" s also read by
 *   an Add (a second consumer: must not fuse); "silu_out" c a graph output too; "gelu" torch's (c / sqrt2 -> Erf -> + 1 ->
 *   c * . -> * 0.5); "gelu_half_first" (c * 0.5) * (1 + erf(c * 1/sqrt2)); "gelu_op" ONNX
 *   Gelu; "gelu_tanh" Gelu(approximate=tanh); "gelu_bad" the erf form with sqrt 3. */
static kiln_model *conv_act(bool depthwise, bool bn_on, const char *act, kiln_dtype dt) {
    const int64_t C = 8;
    kiln_model *m = new_model();
    input(m, "x", dt, 4, KT_DIMS(2, C, 7, 6));
    init(m, "w", dt, 4, depthwise ? KT_DIMS(C, 1, 3, 3) : KT_DIMS(C, C, 3, 3), -0.5, 0.5, 300);
    init(m, "b", dt, 1, KT_DIMS(C), -1, 1, 301);
    kiln_node *c = node(m, "Conv", "x,w,b", bn_on ? "c0" : "c");
    if (c) kiln_node_set_ints(c, "pads", 4, KT_DIMS(1, 1, 1, 1));
    if (c && depthwise) kiln_node_set_int(c, "group", C);
    if (bn_on) bn(m, "bn", dt, C, "c0", "c", 302);
    if (!strncmp(act, "silu", 4)) {
        node(m, "Sigmoid", "c", "s");
        node(m, "Mul", !strcmp(act, "silu_sx") ? "s,c" : "c,s", "y");
        if (!strcmp(act, "silu_shared")) {
            node(m, "Add", "s,y", "y2");
            output(m, "y2");
        } else {
            output(m, "y");
        }
        if (!strcmp(act, "silu_out")) output(m, "c");
    } else if (!strcmp(act, "gelu") || !strcmp(act, "gelu_bad")) {
        /* torch's f32 constant; f64 fuses only with sqrt 2 to double precision */
        erf_gelu(m, dt, strcmp(act, "gelu") ? 1.7320508 : dt == KILN_F64 ? sqrt(2.0) : 1.4142135381698608, "c");
        output(m, "y");
    } else if (!strcmp(act, "gelu_half_first")) {
        init_scalar(m, "rsqrt2", dt, 0.70710678118654752);
        init_scalar(m, "one", dt, 1);
        init_scalar(m, "half", dt, 0.5);
        node(m, "Mul", "half,c", "h");
        node(m, "Mul", "rsqrt2,c", "d");
        node(m, "Erf", "d", "e");
        node(m, "Add", "one,e", "a");
        node(m, "Mul", "a,h", "y");
        output(m, "y");
    } else {
        kiln_node *g = node(m, "Gelu", "c", "y");
        if (g && !strcmp(act, "gelu_tanh")) kiln_node_set_string(g, "approximate", "tanh");
        output(m, "y");
    }
    finalize(m);
    return m;
}

/* The activation of the only FusedConv / FusedGemm of m's optimized graph ("-" when none). */
static const char *fused_act(const kiln_model *m, unsigned on, char *buf, size_t n) {
    kiln_model *o = optimized(m, on);
    const kiln_node *f = o ? find(o, "FusedConv") : NULL;
    if (!f && o) f = find(o, "FusedGemm");
    snprintf(buf, n, "%s", f ? kiln_attr_string(f, "activation", "") : "-");
    kiln_model_free(o);
    return buf;
}

static void test_fuse_conv_smooth(void) {
    static const struct {
        const char *act, *want;
        bool dw, bn;
        int nodes; /* without passes */
        int fused; /* with them */
    } cases[] = {
        {"silu_xs", "Silu", true, true, 4, 1},
        {"silu_sx", "Silu", true, true, 4, 1},
        {"silu_xs", "Silu", false, false, 3, 1},
        {"gelu", "Gelu", false, false, 6, 1},
        {"gelu", "Gelu", true, true, 7, 1},
        {"gelu_half_first", "Gelu", true, false, 6, 1},
        {"gelu_op", "Gelu", true, true, 3, 1},
        {"gelu_tanh", "GeluTanh", false, false, 2, 1},
        /* not fused: the Sigmoid has a second reader; a Div by sqrt 3 is not Gelu's */
        {"silu_shared", "-", true, true, 5, 4},
        {"gelu_bad", "-", true, false, 6, 6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char label[160], buf[32];
        snprintf(label, sizeof label, "%s Conv%s + %s", cases[i].dw ? "depthwise" : "full", cases[i].bn ? " + BN" : "",
                 cases[i].act);
        kiln_model *m = conv_act(cases[i].dw, cases[i].bn, cases[i].act, KILN_F32);
        const char *got = fused_act(m, SMOOTH, buf, sizeof buf);
        CHECK(!strcmp(got, cases[i].want), "%s: fused activation '%s', expected '%s'", label, got, cases[i].want);
        check(label, m, SMOOTH, 2, 1e-5, 1e-5, cases[i].nodes, cases[i].fused);
    }
    /* f64 and f16 */
    check("depthwise Conv + BN + silu f64", conv_act(true, true, "silu_sx", KILN_F64), SMOOTH, 1, 1e-12, 1e-12, 4, 1);
    check("Conv + gelu f64", conv_act(false, false, "gelu", KILN_F64), SMOOTH, 1, 1e-12, 1e-12, 6, 1);
    check("depthwise Conv + gelu f16", conv_act(true, false, "gelu", KILN_F16), SMOOTH, 1, 1e-2, 1e-2, 6, 1);

    /* switched off alone: fuse-conv leaves the activation's nodes, and the BN still folds */
    char buf[32];
    kiln_model *m = conv_act(true, true, "silu_xs", KILN_F32);
    const unsigned conv_only = KILN_PASS_FOLD_BN | KILN_PASS_FUSE_CONV;
    CHECK(!strcmp(fused_act(m, conv_only, buf, sizeof buf), "-"), "fuse-silu-gelu off: activation '%s'", buf);
    check("depthwise Conv + BN + silu, fuse-silu-gelu off", m, conv_only, 2, 1e-5, 1e-5, 4, 3);
    m = conv_act(false, false, "gelu", KILN_F32);
    CHECK(!strcmp(fused_act(m, conv_only, buf, sizeof buf), "-"), "fuse-silu-gelu off: gelu activation '%s'", buf);
    kiln_model_free(m);

    /* then fuse-eltwise (all passes of a CPU session): the same function */
    check("depthwise Conv + BN + silu, all passes", conv_act(true, true, "silu_sx", KILN_F32), ALL | SMOOTH, 2, 1e-5,
          1e-5, 4, 1);
    check("Conv + Sigmoid shared, all passes", conv_act(true, true, "silu_shared", KILN_F32), ALL | SMOOTH, 2, 1e-5,
          1e-5, 5, 3);

    /* Gemm + silu: FusedGemm */
    m = new_model();
    input(m, "x", KILN_F32, 2, KT_DIMS(3, 5));
    init(m, "w", KILN_F32, 2, KT_DIMS(5, 4), -1, 1, 310);
    init(m, "b", KILN_F32, 1, KT_DIMS(4), -1, 1, 311);
    node(m, "Gemm", "x,w,b", "g");
    node(m, "Sigmoid", "g", "s");
    node(m, "Mul", "s,g", "y");
    output(m, "y");
    finalize(m);
    CHECK(!strcmp(fused_act(m, SMOOTH, buf, sizeof buf), "Silu"), "Gemm + silu: activation '%s'", buf);
    check("Gemm + silu", m, SMOOTH, 1, 1e-5, 1e-5, 3, 1);

    /* a Linear as exported (MatMul + bias Add on (B, H, W, K)), then Gelu (erf form as torch
     * writes it, or the opset-20 op): Flatten -> FusedGemm(Gelu) -> Reshape, the activation
     * moved before the view (convnext's MLPs) */
    for (int form = 0; form < 2; form++) {
        m = linear_model(4, KT_DIMS(-1, 3, 4, 6), 312);
        if (form == 0) erf_gelu(m, KILN_F32, 1.4142135381698608, "c");
        else node(m, "Gelu", "c", "y");
        output(m, "y");
        finalize(m);
        kiln_model *o = optimized(m, SMOOTH);
        const kiln_node *f = o ? find(o, "FusedGemm") : NULL;
        CHECK(f && !strcmp(kiln_attr_string(f, "activation", ""), "Gelu") && count(o, "Reshape") == 1 &&
                  count(o, "Flatten") == 1 && count(o, "Erf") == 0 && count(o, "Gelu") == 0,
              "Linear + %s: Flatten -> FusedGemm(Gelu) -> Reshape", form ? "Gelu op" : "erf Gelu");
        kiln_model_free(o);
        check(form ? "Linear + Gelu op through the Reshape" : "Linear + erf Gelu through the Reshape", m, SMOOTH, 2,
              1e-5, 1e-5, form ? 3 : 7, 3);
    }
    /* not through the view: the Reshape's output has a second reader */
    m = linear_model(3, KT_DIMS(-1, 4, 6), 314);
    node(m, "Relu", "c", "y");
    output(m, "y");
    output(m, "c");
    finalize(m);
    CHECK(!strcmp(fused_act(m, SMOOTH, buf, sizeof buf), "-"), "Linear read twice + Relu: activation '%s'", buf);
    check("Linear read twice + Relu", m, SMOOTH, 2, 1e-5, 1e-5, 3, 4);

    /* a residual Add between: Conv + Add(z) + silu is one FusedConv with Z */
    m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(2, 4, 5, 5));
    input(m, "z", KILN_F32, 4, KT_DIMS(2, 4, 5, 5));
    init(m, "w", KILN_F32, 4, KT_DIMS(4, 4, 1, 1), -1, 1, 312);
    node(m, "Conv", "x,w", "c");
    node(m, "Add", "c,z", "r");
    node(m, "Sigmoid", "r", "s");
    node(m, "Mul", "r,s", "y");
    output(m, "y");
    finalize(m);
    kiln_model *o = optimized(m, SMOOTH);
    const kiln_node *f = o ? find(o, "FusedConv") : NULL;
    CHECK(f && f->n_in == 4 && !strcmp(kiln_attr_string(f, "activation", ""), "Silu") && o->n_nodes == 1,
          "Conv + residual + silu: one FusedConv with Z and Silu");
    kiln_model_free(o);
    check("Conv + residual + silu", m, SMOOTH, 1, 1e-5, 1e-5, 4, 1);

    /* the conv output is a graph output too: not fused */
    m = conv_act(true, false, "silu_out", KILN_F32);
    check("depthwise Conv (graph output) + silu", m, SMOOTH, 1, 0, 0, 3, 3);
}

/* ------------------------------------------------------------- fuse-eltwise */

/* gelu as PyTorch exports it: x * 0.5 * (1 + erf(x / sqrt(2))), with the constants as a
 * rank-0 initializer and Constant nodes */
static kiln_model *gelu(kiln_dtype dt, bool out_intermediate) {
    kiln_model *m = new_model();
    input(m, "x", dt, 2, KT_DIMS(3, 7));
    erf_gelu(m, dt, 1.41421, "x");
    output(m, "y");
    if (out_intermediate) output(m, "e");
    finalize(m);
    return m;
}

static void test_fuse_eltwise(void) {
    check("gelu (5 ops)", gelu(KILN_F32, false), KILN_PASS_FUSE_ELTWISE, 1, 1e-6, 1e-5, 5, 1);
    check("gelu f64", gelu(KILN_F64, false), KILN_PASS_FUSE_ELTWISE, 1, 1e-14, 1e-13, 5, 1);
    check("gelu f16", gelu(KILN_F16, false), KILN_PASS_FUSE_ELTWISE, 1, 2e-3, 2e-3, 5, 1);
    kiln_model *m = gelu(KILN_F32, false);
    kiln_model *o = optimized(m, KILN_PASS_FUSE_ELTWISE);
    const kiln_node *f = find(o, "FusedElementwise");
    char want[200];
    snprintf(want, sizeof want, "i0 i0 c%.9g Div Erf c1 Add Mul c0.5 Mul", (double)1.41421f);
    CHECK(f && o->n_nodes == 1 && f->n_in == 1 && !strcmp(kiln_attr_string(f, "program", ""), want),
          "gelu program '%s', expected '%s'", f ? kiln_attr_string(f, "program", "") : "(none)", want);
    kiln_model_free(o);
    kiln_model_free(m);

    /* the Erf output is a graph output: Div + Erf fuse, Add + Mul + Mul fuse, apart */
    check("gelu with an intermediate graph output", gelu(KILN_F32, true), KILN_PASS_FUSE_ELTWISE, 1, 1e-6, 1e-5,
          5, 2);
    m = gelu(KILN_F32, true);
    o = optimized(m, KILN_PASS_FUSE_ELTWISE);
    bool e_by_fused = false;
    snprintf(want, sizeof want, "i0 c%.9g Div Erf", (double)1.41421f);
    for (int i = 0; o && i < o->n_nodes; i++)
        e_by_fused |= !strcmp(o->values[o->nodes[i].out[0]].name, "e") &&
                      !strcmp(o->nodes[i].op_type, "FusedElementwise") &&
                      !strcmp(kiln_attr_string(&o->nodes[i], "program", ""), want);
    CHECK(o && o->n_nodes == 2 && e_by_fused, "intermediate graph output: the Erf output is still computed");
    kiln_model_free(o);
    kiln_model_free(m);

    /* a chain of 3 ops whose middle value is a graph output does not fuse across it */
    m = new_model();
    input(m, "x", KILN_F32, 2, KT_DIMS(4, 5));
    input(m, "z", KILN_F32, 1, KT_DIMS(5));
    node(m, "Exp", "x", "t");
    node(m, "Mul", "t,z", "u");
    node(m, "Tanh", "u", "y");
    output(m, "y");
    output(m, "t");
    finalize(m);
    check("chain with an intermediate graph output", m, KILN_PASS_FUSE_ELTWISE, 1, 1e-6, 1e-5, 3, 2);

    /* a sum of 10 inputs (broadcasting) splits into trees of at most 8 inputs */
    m = new_model();
    char name[16], ins[64], prev[16] = "x0";
    for (int k = 0; k < 10; k++) {
        snprintf(name, sizeof name, "x%d", k);
        input(m, name, KILN_F32, 2, k % 2 ? KT_DIMS(3, 4) : KT_DIMS(1, 4));
    }
    for (int k = 1; k < 10; k++) {
        char out[16];
        snprintf(out, sizeof out, k == 9 ? "y" : "s%d", k);
        snprintf(ins, sizeof ins, "%s,x%d", prev, k);
        node(m, k % 3 ? "Add" : "Max", ins, out);
        snprintf(prev, sizeof prev, "%s", out);
    }
    output(m, "y");
    finalize(m);
    o = optimized(m, KILN_PASS_FUSE_ELTWISE);
    bool small = o != NULL;
    for (int i = 0; o && i < o->n_nodes; i++) small &= o->nodes[i].n_in <= 8;
    CHECK(o && o->n_nodes == 2 && count(o, "FusedElementwise") == 2 && small,
          "10-input chain: two fused nodes of at most 8 inputs (got %d nodes)", o ? o->n_nodes : -1);
    kiln_model_free(o);
    check("10-input chain", m, KILN_PASS_FUSE_ELTWISE, 1, 1e-6, 1e-5, 9, 2);

    /* tree with a shared leaf, unary ops with attributes, Clip from Constant bounds, and a
     * per-channel constant as a regular input */
    m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(2, 3, 4, 4));
    init(m, "s", KILN_F32, 4, KT_DIMS(1, 3, 1, 1), 0.5, 1.5, 100);
    constant(m, "lo", kt_scalar(KILN_F32, -0.5));
    constant(m, "hi", kt_scalar(KILN_F32, 0.75));
    kiln_node *n = node(m, "LeakyRelu", "x", "l");
    if (n) kiln_node_set_float(n, "alpha", 0.2f);
    node(m, "Mul", "l,s", "p");
    n = node(m, "HardSigmoid", "x", "h");
    if (n) {
        kiln_node_set_float(n, "alpha", 0.3f);
        kiln_node_set_float(n, "beta", 0.4f);
    }
    node(m, "Sub", "p,h", "d");
    node(m, "Clip", "d,lo,hi", "y");
    output(m, "y");
    finalize(m);
    check("tree: shared leaf, LeakyRelu, HardSigmoid, Clip, per-channel input", m, KILN_PASS_FUSE_ELTWISE, 2,
          1e-6, 1e-5, 5, 1);

    /* not fused: integer ops; a single op */
    m = new_model();
    input(m, "x", KILN_I32, 1, KT_DIMS(6));
    input(m, "z", KILN_F32, 1, KT_DIMS(6));
    node(m, "Add", "x,x", "a");
    node(m, "Mul", "a,x", "yi");
    node(m, "Relu", "z", "yf");
    output(m, "yi");
    output(m, "yf");
    finalize(m);
    o = optimized(m, KILN_PASS_FUSE_ELTWISE);
    CHECK(o && o->n_nodes == 3 && count(o, "FusedElementwise") == 0, "fuse-eltwise: no integer trees, no single ops");
    kiln_model_free(o);
    kiln_model_free(m);
}

/* x (in_dt, dims) -> [Add z ->] BatchNormalization (parameters of par_dt, epsilon 1e-3;
 * as inputs instead of constants with params_in) [-> Relu] -> y */
static kiln_model *bn_chain(kiln_dtype in_dt, kiln_dtype par_dt, int nd, const int64_t *dims, bool add, bool relu,
                            bool params_in) {
    kiln_model *m = new_model();
    input(m, "x", in_dt, nd, dims);
    if (add) input(m, "z", in_dt, nd, dims);
    if (add) node(m, "Add", "x,z", "a");
    if (params_in) {
        static const char *const names[4] = {"p_scale", "p_bias", "p_mean", "p_var"};
        for (int k = 0; k < 4; k++) input(m, names[k], par_dt, 1, &dims[1]);
        kiln_node *n = node(m, "BatchNormalization", add ? "a,p_scale,p_bias,p_mean,p_var" : "x,p_scale,p_bias,p_mean,p_var",
                            relu ? "b" : "y");
        if (n) kiln_node_set_float(n, "epsilon", 1e-3f);
    } else {
        bn(m, "p", par_dt, dims[1], add ? "a" : "x", relu ? "b" : "y", 40);
    }
    if (relu) node(m, "Relu", "b", "y");
    output(m, "y");
    finalize(m);
    return m;
}

/* An inference BatchNormalization fold-bn leaves (after a Concat, an Add, a BN1d) is a
 * per-channel x * s + t: it joins the fused elementwise trees (DenseNet's BN -> Relu). */
static void test_fuse_eltwise_bn(void) {
    check("BN alone", bn_chain(KILN_F32, KILN_F32, 4, KT_DIMS(2, 5, 3, 4), false, false, false),
          KILN_PASS_FUSE_ELTWISE, 1, 1e-6, 1e-5, 1, 1);
    check("BN -> Relu", bn_chain(KILN_F32, KILN_F32, 4, KT_DIMS(2, 5, 3, 4), false, true, false),
          KILN_PASS_FUSE_ELTWISE, 1, 1e-6, 1e-5, 2, 1);
    check("Add -> BN -> Relu (pre-activation)", bn_chain(KILN_F32, KILN_F32, 4, KT_DIMS(2, 5, 3, 4), true, true, false),
          KILN_PASS_FUSE_ELTWISE, 1, 1e-6, 1e-5, 3, 1);
    check("BN1d -> Relu", bn_chain(KILN_F32, KILN_F32, 2, KT_DIMS(4, 6), false, true, false), KILN_PASS_FUSE_ELTWISE, 1,
          1e-6, 1e-5, 2, 1);
    check("BN f64 -> Relu", bn_chain(KILN_F64, KILN_F64, 3, KT_DIMS(2, 5, 7), false, true, false),
          KILN_PASS_FUSE_ELTWISE, 1, 1e-13, 1e-12, 2, 1);
    check("BN f16 (f32 parameters) -> Relu", bn_chain(KILN_F16, KILN_F32, 4, KT_DIMS(2, 5, 3, 4), false, true, false),
          KILN_PASS_FUSE_ELTWISE, 1, 2e-3, 2e-3, 2, 1);
    check("BN with symbolic batch -> Relu", bn_chain(KILN_F32, KILN_F32, 4, KT_DIMS(-1, 5, 3, 4), false, true, false),
          KILN_PASS_FUSE_ELTWISE, 3, 1e-6, 1e-5, 2, 1);
    /* parameters that are not constants: the BN stays, the Relu alone is no tree */
    /* parameters behind Identity nodes (PyTorch's exporter writes equal tensors once: a fresh
     * densenet121's running means and variances are Identity of one initializer each) */
    kiln_model *m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(2, 5, 3, 4));
    init(m, "sc", KILN_F32, 1, KT_DIMS(5), 0.5, 1.5, 60);
    init(m, "bi", KILN_F32, 1, KT_DIMS(5), -1, 1, 61);
    init(m, "mu", KILN_F32, 1, KT_DIMS(5), -1, 1, 62);
    init(m, "va", KILN_F32, 1, KT_DIMS(5), 0.5, 2, 63);
    node(m, "Identity", "mu", "mu1");
    node(m, "Identity", "va", "va1");
    node(m, "Identity", "va1", "va2");
    node(m, "BatchNormalization", "x,sc,bi,mu1,va2", "b");
    node(m, "Relu", "b", "y");
    output(m, "y");
    finalize(m);
    kiln_model *o = optimized(m, KILN_PASS_FUSE_ELTWISE);
    CHECK(o && o->n_nodes == 1 && count(o, "FusedElementwise") == 1,
          "BN with parameters behind Identity: %d nodes, expected one kiln.FusedElementwise", o ? o->n_nodes : -1);
    kiln_model_free(o);
    check("BN with parameters behind Identity -> Relu", m, KILN_PASS_FUSE_ELTWISE, 1, 1e-6, 1e-5, 2, 1);

    m = bn_chain(KILN_F32, KILN_F32, 4, KT_DIMS(2, 5, 3, 4), false, true, true);
    o = optimized(m, KILN_PASS_FUSE_ELTWISE);
    CHECK(o && o->n_nodes == 2 && count(o, "BatchNormalization") == 1 && count(o, "Relu") == 1,
          "BN with parameter inputs: left as BN and Relu");
    kiln_model_free(o);
    kiln_model_free(m);

    m = bn_chain(KILN_F32, KILN_F32, 4, KT_DIMS(2, 5, 3, 4), true, true, false);
    o = optimized(m, KILN_PASS_FUSE_ELTWISE);
    const kiln_node *f = find(o, "FusedElementwise");
    const char *prog = f ? kiln_attr_string(f, "program", "") : "(none)";
    bool shapes = f && f->n_in == 4;
    for (int k = 2; shapes && k < 4; k++) {
        const kiln_value *v = &o->values[f->in[k]];
        shapes = v->init && v->init->ndim == 3 && v->init->dims[0] == 5 && v->init->dims[1] == 1 && v->init->dims[2] == 1;
    }
    CHECK(o && o->n_nodes == 1 && !strcmp(prog, "i0 i1 Add i2 Mul i3 Add Relu") && shapes,
          "Add -> BN -> Relu: program '%s' (expected 'i0 i1 Add i2 Mul i3 Add Relu', s and t of shape (5,1,1))", prog);
    /* the BN's own parameters are no longer read: not held */
    const int ps = o ? kiln_model_find_value(o, "p_scale") : -1;
    CHECK(o && (ps < 0 || o->values[ps].init == NULL), "Add -> BN -> Relu: the BN's scale is still held");
    kiln_model_free(o);
    kiln_model_free(m);

    /* DenseNet's layer: Concat of the features along the channels -> BN -> Relu is one
     * kiln.ConcatAffine (the Concat is never written); not when the Concat's output has
     * another reader, nor along another axis */
    for (int v = 0; v < 4; v++) {
        const bool shared = v == 1, axis2 = v == 2, negative = v == 3;
        m = new_model();
        input(m, "f0", KILN_F32, 4, KT_DIMS(2, 4, 3, 5));
        input(m, "f1", KILN_F32, 4, KT_DIMS(2, axis2 ? 4 : 3, axis2 ? 2 : 3, 5));
        input(m, "f2", KILN_F32, 4, KT_DIMS(2, axis2 ? 4 : 2, 3, 5));
        kiln_node *cat = node(m, "Concat", axis2 ? "f0,f1" : "f0,f1,f2", "cat");
        if (cat) kiln_node_set_int(cat, "axis", axis2 ? 2 : negative ? -3 : 1);
        bn(m, "p", KILN_F32, axis2 ? 4 : 9, "cat", "b", 50);
        node(m, "Relu", "b", "y");
        output(m, "y");
        if (shared) {
            node(m, "Sigmoid", "cat", "y2");
            output(m, "y2");
        }
        finalize(m);
        o = optimized(m, KILN_PASS_FUSE_ELTWISE);
        const kiln_node *ca = find(o, "ConcatAffine");
        const bool want = !shared && !axis2;
        const char *what = shared ? "Concat also read by another node" : axis2 ? "Concat along H" :
                           negative ? "Concat axis -3" : "Concat -> BN -> Relu";
        CHECK(o && (want ? ca && o->n_nodes == 1 && ca->n_in == (axis2 ? 4 : 5) && kiln_attr_int(ca, "relu", 0) == 1 &&
                               count(o, "Concat") == 0
                         : !ca && count(o, "Concat") == 1),
              "%s: %s kiln.ConcatAffine (%d nodes)", what, want ? "expected one" : "expected no", o ? o->n_nodes : -1);
        kiln_model_free(o);
        check(what, m, KILN_PASS_FUSE_ELTWISE, 1, 1e-6, 1e-5, shared ? 4 : 3, want ? 1 : shared ? 3 : 2);
    }
}

/* ---------------------------------------------------------------- tiny_cnn */

static void test_tiny_cnn(const char *src) {
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/tiny_cnn.onnx", src);
    kiln_model *m = NULL;
    kiln_tensor *x = NULL;
    if (kiln_model_load_onnx(ctx, path, &m) != KILN_OK) {
        CHECK(0, "load %s: %s", path, kiln_context_message(ctx));
        return;
    }
    snprintf(path, sizeof path, "%s/examples/tiny_cnn_x.npy", src);
    CHECK(kiln_tensor_load_npy(ctx, path, &x) == KILN_OK, "load x: %s", kiln_context_message(ctx));
    kiln_tensor *ref[1] = {0}, *got[1] = {0};
    int n_ref = 0, n_got = 0;
    if (x && run(m, NONE, 1, &x, ref, &n_ref) && run(m, 0, 1, &x, got, &n_got)) {
        fails += kiln_tensor_compare(got[0], ref[0], 1e-6, 1e-5, "tiny_cnn: all passes vs none");
        /* Conv+BN+Relu and Conv+Relu each become one FusedConv (symbolic batch: shapes
         * are unknown to the passes, dtypes are propagated) */
        CHECK(n_ref == 10 && n_got == 7, "tiny_cnn: %d nodes without passes, %d with (expected 10, 7)", n_ref, n_got);
    } else {
        fails++;
    }
    kiln_model *o = optimized(m, ALL);
    CHECK(o && count(o, "FusedConv") == 2 && count(o, "BatchNormalization") == 0, "tiny_cnn: two FusedConv, no BN");
    kiln_model_free(o);
    kiln_tensor_free(ref[0]);
    kiln_tensor_free(got[0]);
    kiln_tensor_free(x);
    kiln_model_free(m);
}

/* ---------------------------------------------------------------- fold-constants */

/* Swin V2's qkv bias: y = ScatterND(b0, [[2],[3]], zeros) + x @ W; a constant graph
 * output z = c1 * c2; x's shape, sx. fold-constants makes the
 * bias an initializer, so fuse-conv then takes MatMul + Add as a Gemm; the Shape of the graph
 * input and the graph output's Mul stay nodes; the outputs are the same. */
static void test_fold_constants(void) {
    kiln_model *m = new_model();
    input(m, "x", KILN_F32, 2, KT_DIMS(-1, 4));
    init(m, "w", KILN_F32, 2, KT_DIMS(4, 6), -1, 1, 31);
    init(m, "b0", KILN_F32, 1, KT_DIMS(6), -1, 1, 32);
    init(m, "c1", KILN_F32, 1, KT_DIMS(3), -1, 1, 33);
    init(m, "c2", KILN_F32, 1, KT_DIMS(3), -1, 1, 34);
    constant(m, "idx", kt_make(KILN_I64, 2, KT_DIMS(2, 1), KT_VALS(2, 3)));
    constant(m, "zeros", kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0, 0)));
    node(m, "ScatterND", "b0,idx,zeros", "b");
    node(m, "MatMul", "x,w", "xw");
    node(m, "Add", "b,xw", "y");
    node(m, "Shape", "x", "sx");
    node(m, "Mul", "c1,c2", "z");
    output(m, "y");
    output(m, "z");
    output(m, "sx");
    if (!finalize(m)) {
        kiln_model_free(m);
        return;
    }
    kiln_model *on = optimized(m, KILN_PASS_FOLD_CONSTANTS | KILN_PASS_FUSE_CONV);
    kiln_model *off = optimized(m, KILN_PASS_FUSE_CONV);
    CHECK(on && count(on, "ScatterND") == 0 && count(on, "Add") == 0 && count(on, "Gemm") == 1,
          "fold-constants: the computed bias folds and rides on the Gemm (ScatterND %d, Add %d, Gemm %d)",
          count(on, "ScatterND"), count(on, "Add"), count(on, "Gemm"));
    CHECK(on && count(on, "Shape") == 1 && count(on, "Mul") == 1,
          "fold-constants: a graph input's Shape and a graph output stay nodes (Shape %d, Mul %d)", count(on, "Shape"),
          count(on, "Mul"));
    CHECK(off && count(off, "ScatterND") == 1 && count(off, "Gemm") == 0,
          "without fold-constants the bias stays computed (ScatterND %d, Gemm %d)", count(off, "ScatterND"),
          count(off, "Gemm"));
    kiln_model_free(on);
    kiln_model_free(off);
    kiln_tensor *in[16] = {0}, *ref[8] = {0}, *got[8] = {0};
    const int n_in = make_inputs(m, 5, in, 77);
    int n_ref = 0, n_got = 0;
    if (run(m, NONE, n_in, in, ref, &n_ref) &&
        run(m, ALL_OFF_BUT(KILN_PASS_FOLD_CONSTANTS | KILN_PASS_FUSE_CONV), n_in, in, got, &n_got))
        for (int k = 0; k < 3; k++) {
            char lab[120];
            snprintf(lab, sizeof lab, "fold-constants: output %d with fold-constants + fuse-conv vs no passes", k);
            fails += kiln_tensor_compare(got[k], ref[k], 1e-6, 1e-5, lab);
        }
    else
        fails++;
    for (int k = 0; k < 16; k++) kiln_tensor_free(in[k]);
    for (int k = 0; k < 8; k++) {
        kiln_tensor_free(ref[k]);
        kiln_tensor_free(got[k]);
    }
    kiln_model_free(m);
}

/* ---------------------------------------------------------------- crop-taps */

/* x (2, C, H, W) -> Conv (kernel k x k, dilation d, pads p, stride s, groups g, bias) -> y */
static kiln_model *dilated_conv(int64_t C, int64_t H, int64_t W, int64_t k, int64_t d, const int64_t *pads, int64_t s,
                                int64_t g, uint64_t seed) {
    kiln_model *m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(-1, C, H, W));
    init(m, "w", KILN_F32, 4, KT_DIMS(6, C / g, k, k), -1, 1, seed);
    init(m, "b", KILN_F32, 1, KT_DIMS(6), -1, 1, seed + 1);
    kiln_node *c = node(m, "Conv", "x,w,b", "y");
    if (c) {
        kiln_node_set_ints(c, "pads", 4, pads);
        kiln_node_set_ints(c, "dilations", 2, KT_DIMS(d, d));
        kiln_node_set_ints(c, "strides", 2, KT_DIMS(s, s));
        kiln_node_set_ints(c, "kernel_shape", 2, KT_DIMS(k, k));
        kiln_node_set_int(c, "group", g);
    }
    output(m, "y");
    finalize(m);
    return m;
}

/* The kernel's spatial dims of the first Conv of m's optimized graph with crop-taps on. */
static void cropped_kernel(const kiln_model *m, int64_t *kh, int64_t *kw) {
    kiln_model *o = optimized(m, KILN_PASS_CROP_TAPS);
    const kiln_node *c = find(o, "Conv");
    *kh = *kw = -1;
    if (c && c->n_in > 1 && o->values[c->in[1]].init) {
        *kh = o->values[c->in[1]].init->dims[2];
        *kw = o->values[c->in[1]].init->dims[3];
    }
    kiln_model_free(o);
}

/* x (?, 4, H, W) (-1: symbolic) -> Conv 4 -> 6, 3x3, dilation 8, pads 8, no bias; the
 * weights an initializer or a Constant node's value. inner: a Conv 3x3 (pads 1) and a Relu
 * before it, so that the dilated Conv's input dims are not the graph input's but known only
 * by inference (with a symbolic batch, kiln_pass_known_dims'). */
static kiln_model *rate8_conv_after(int64_t H, int64_t W, bool constant_w, bool inner, uint64_t seed) {
    kiln_model *m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(-1, 4, H, W));
    if (constant_w) constant(m, "w", kt_rand(KILN_F32, 4, KT_DIMS(6, 4, 3, 3), -1, 1, seed));
    else init(m, "w", KILN_F32, 4, KT_DIMS(6, 4, 3, 3), -1, 1, seed);
    if (inner) {
        init(m, "w0", KILN_F32, 4, KT_DIMS(4, 4, 3, 3), -1, 1, seed + 1);
        kiln_node *c0 = node(m, "Conv", "x,w0", "h");
        if (c0) kiln_node_set_ints(c0, "pads", 4, KT_DIMS(1, 1, 1, 1));
        node(m, "Relu", "h", "r");
    }
    kiln_node *c = node(m, "Conv", inner ? "r,w" : "x,w", "y");
    if (c) {
        kiln_node_set_ints(c, "pads", 4, KT_DIMS(8, 8, 8, 8));
        kiln_node_set_ints(c, "dilations", 2, KT_DIMS(8, 8));
    }
    output(m, "y");
    finalize(m);
    return m;
}

static kiln_model *rate8_conv(int64_t H, int64_t W, bool constant_w, uint64_t seed) {
    return rate8_conv_after(H, W, constant_w, false, seed);
}

/* The kernel's spatial dims of the Conv reading value `input` in m's optimized graph with
 * crop-taps on (-1: none found). */
static void cropped_kernel_of(const kiln_model *m, const char *input, int64_t *kh, int64_t *kw) {
    kiln_model *o = optimized(m, KILN_PASS_CROP_TAPS);
    *kh = *kw = -1;
    for (int i = 0; o && i < o->n_nodes; i++) {
        const kiln_node *c = &o->nodes[i];
        if (strcmp(c->op_type, "Conv") || c->n_in < 2 || strcmp(o->values[c->in[0]].name, input)) continue;
        if (o->values[c->in[1]].init) {
            *kh = o->values[c->in[1]].init->dims[2];
            *kw = o->values[c->in[1]].init->dims[3];
        }
    }
    kiln_model_free(o);
}

/* ---------------------------------------------------------------- channel-gather */

/* A 1-D i64 initializer. */
static void init_i64s(kiln_model *m, const char *name, int n, const double *v) {
    kiln_tensor *t = kt_make(KILN_I64, 1, KT_DIMS(n), v);
    CHECK(t && kiln_model_add_initializer(m, name, t) == KILN_OK, "initializer %s", name);
    kiln_tensor_free(t);
}

/* ShuffleNet V2's block boundary on x (?, 2h, 5, 6): halves by Slices whose bounds come from
 * Shape(x)[1] / 2 (as torch.onnx writes chunk), the second half through a 1x1 Conv + Relu,
 * Concat, kiln.ChannelShuffle (2 groups), then the next block's halves (Shape-computed
 * again) with the second padded by `pad` zero channels into a 1x1 Conv; the batch of the
 * Concat's Shape, read by no one (what the channel-shuffle pass leaves of the Reshapes it
 * removes). Outputs: the next
 * block's first half and the last Conv (and with read_shuffle, a Relu of the shuffle). */
static kiln_model *shuffle_block(int64_t h, int64_t pad, bool read_shuffle, uint64_t seed) {
    kiln_model *m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(-1, 2 * h, 5, 6));
    init_i64s(m, "one", 1, KT_VALS(1));
    init_i64s(m, "two", 1, KT_VALS(2));
    init_i64s(m, "zero", 1, KT_VALS(0));
    init(m, "w1", KILN_F32, 4, KT_DIMS(h, h, 1, 1), -1, 1, seed);
    init(m, "w2", KILN_F32, 4, KT_DIMS(3, h + pad, 1, 1), -1, 1, seed + 1);
    init_i64s(m, "pads", 8, KT_VALS(0, 0, 0, 0, 0, (double)pad, 0, 0));
    const char *halves[2][6] = {{"x", "s0", "g0", "h0", "e0", "a"}, {"sh", "s1", "g1", "h1", "e1", "c"}};
    for (int k = 0; k < 2; k++) {
        const char **n = halves[k];
        char lo[16], hi[16];
        snprintf(lo, sizeof lo, "%s_lo", n[5]);
        snprintf(hi, sizeof hi, "%s_hi", n[5]);
        char ins[96];
        node(m, "Shape", n[0], n[1]);
        kiln_node *g = node(m, "Gather", (snprintf(ins, sizeof ins, "%s,one", n[1]), ins), n[2]);
        if (g) kiln_node_set_int(g, "axis", 0);
        node(m, "Div", (snprintf(ins, sizeof ins, "%s,two", n[2]), ins), n[3]);
        node(m, "Mul", (snprintf(ins, sizeof ins, "%s,two", n[3]), ins), n[4]);
        node(m, "Slice", (snprintf(ins, sizeof ins, "%s,zero,%s,one", n[0], n[3]), ins), lo);
        node(m, "Slice", (snprintf(ins, sizeof ins, "%s,%s,%s,one", n[0], n[3], n[4]), ins), hi);
        if (k == 0) {
            node(m, "Conv", "a_hi,w1", "b0");
            node(m, "Relu", "b0", "b");
            kiln_node *c = node(m, "Concat", "a_lo,b", "cat");
            if (c) kiln_node_set_int(c, "axis", 1);
            node(m, "Shape", "cat", "cat_shape"); /* the batch of it, read by no one */
            kiln_node *gb = node(m, "Gather", "cat_shape,zero", "cat_n");
            if (gb) kiln_node_set_int(gb, "axis", 0);
            kiln_node *s = node(m, "ChannelShuffle", "cat", "sh");
            if (s) {
                free(s->domain);
                s->domain = kiln_strdup(ctx, "kiln");
                kiln_node_set_int(s, "groups", 2);
            }
        }
    }
    node(m, "Pad", "c_hi,pads", "c_pad");
    node(m, "Conv", "c_pad,w2", "y");
    output(m, "c_lo");
    output(m, "y");
    if (read_shuffle) {
        node(m, "Relu", "sh", "r");
        output(m, "r");
    }
    finalize(m);
    return m;
}

static void test_channel_gather(void) {
    kiln_model *m = shuffle_block(4, 2, false, 380);
    kiln_model *o = optimized(m, KILN_PASS_CHANNEL_GATHER);
    const kiln_node *g = o ? find(o, "ChannelGather") : NULL;
    CHECK(o && count(o, "ChannelGather") == 1 && count(o, "Concat") == 0 && count(o, "ChannelShuffle") == 0 &&
              count(o, "Pad") == 0 && count(o, "Slice") == 2 && g && g->n_in == 2 && g->n_out == 2,
          "channel-gather: one gather (2 in, 2 out: the Concat's dead Shape reader does not make it a value to "
          "write) for Concat, shuffle, two Slices and a Pad; the first block's two Slices kept (%d gathers, %d Concat, %d shuffles, %d Pad, %d Slice)",
          o ? count(o, "ChannelGather") : -1, o ? count(o, "Concat") : -1, o ? count(o, "ChannelShuffle") : -1,
          o ? count(o, "Pad") : -1, o ? count(o, "Slice") : -1);
    kiln_model_free(o);
    check("channel-gather ShuffleNet block boundary", m, KILN_PASS_CHANNEL_GATHER, 3, 1e-6, 1e-6, 10, 6);
    /* the shuffle's output also read by a Relu: written too (a third output) */
    m = shuffle_block(3, 0, true, 381);
    o = optimized(m, KILN_PASS_CHANNEL_GATHER);
    g = o ? find(o, "ChannelGather") : NULL;
    CHECK(g && g->n_out == 3 && count(o, "Pad") == 0, "channel-gather: a value read outside written too (%d outputs)",
          g ? g->n_out : -1);
    kiln_model_free(o);
    check("channel-gather, shuffle output read outside", m, KILN_PASS_CHANNEL_GATHER, 2, 1e-6, 1e-6, 11, 7);
}

/* kiln_pass_known_dims: dims a dynamic batch does not change are known, the rest -1. */
static void test_known_dims(void) {
    kiln_model *m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(-1, 4, 6, 7));
    init(m, "w0", KILN_F32, 4, KT_DIMS(5, 4, 3, 3), -1, 1, 360);
    node(m, "Conv", "x,w0", "h");
    kiln_node *f = node(m, "Flatten", "h", "f");
    if (f) kiln_node_set_int(f, "axis", 0);
    node(m, "Relu", "h", "y");
    output(m, "f");
    output(m, "y");
    finalize(m);
    kiln_tensor *k = NULL;
    CHECK(kiln_pass_known_dims(m, &k) == KILN_OK && k, "known_dims: %s", kiln_context_message(ctx));
    for (int v = 0; k && v < m->n_values; v++) {
        const int64_t *d = k[v].dims;
        const char *name = m->values[v].name;
        if (!strcmp(name, "y"))
            CHECK(k[v].ndim == 4 && d[0] == -1 && d[1] == 5 && d[2] == 4 && d[3] == 5,
                  "known_dims: y [%d] %lld %lld %lld %lld, expected [4] -1 5 4 5", k[v].ndim, (long long)d[0],
                  (long long)d[1], (long long)d[2], (long long)d[3]);
        if (!strcmp(name, "f")) /* Flatten(axis 0): [1, N*100], the second dim the batch's */
            CHECK(k[v].ndim == 2 && d[0] == 1 && d[1] == -1, "known_dims: f [%d] %lld %lld, expected [2] 1 -1",
                  k[v].ndim, (long long)d[0], (long long)d[1]);
    }
    free(k);
    kiln_model_free(m);
    /* symbolic H and W: the rate-8 Conv's output H differs by probe (5 fails no rule here) */
    m = rate8_conv(-1, -1, false, 361);
    k = NULL;
    CHECK(kiln_pass_known_dims(m, &k) == KILN_OK && k, "known_dims, symbolic H and W: %s", kiln_context_message(ctx));
    for (int v = 0; k && v < m->n_values; v++)
        if (!strcmp(m->values[v].name, "y"))
            CHECK(k[v].ndim == 4 && k[v].dims[1] == 6 && k[v].dims[2] == -1,
                  "known_dims: y's C and H (symbolic H and W) %lld %lld, expected 6 -1", (long long)k[v].dims[1],
                  (long long)k[v].dims[2]);
    free(k);
    kiln_model_free(m);
}

static void test_crop_taps(void) {
    static const struct {
        int64_t C, H, W, k, d, pads[4], s, g, want_kh, want_kw;
        const char *label;
    } cases[] = {
        /* ASPP's rate 36 on a 28x28 map, small: only the centre tap reads the input */
        {4, 6, 7, 3, 8, {8, 8, 8, 8}, 1, 1, 1, 1, "3x3 dilation 8 on 6x7: the centre tap alone"},
        /* rate 4 on 6x6: the outer taps read rows 4.. and ..1 for some outputs: kept */
        {4, 6, 6, 3, 4, {4, 4, 4, 4}, 1, 1, 3, 3, "3x3 dilation 4 on 6x6: every tap live"},
        /* one side dead: tap 0 reads y - 4 < 0 for both outputs (y 0, 1) */
        {2, 6, 6, 3, 4, {4, 4, 0, 0}, 1, 1, 2, 2, "3x3 dilation 4, pads 4 before only: two taps"},
        /* asymmetric across the axes: H 3 (outer taps dead), W 12 (all live) */
        {4, 3, 12, 3, 4, {4, 4, 4, 4}, 1, 2, 1, 3, "grouped, dilation 4 on 3x12: 1x3"},
        /* strided: outputs y 0..1 at stride 5 read rows -6 + 5y + 6i */
        {3, 5, 5, 3, 6, {6, 6, 6, 6}, 5, 1, 1, 1, "stride 5, dilation 6 on 5x5"},
        /* 5x5 dilation 3 on 4x4 with pads 6: taps at -6, -3, 0, 3, 6 -> -3..3 live */
        {3, 4, 4, 5, 3, {6, 6, 6, 6}, 1, 1, 3, 3, "5x5 dilation 3 on 4x4: the middle 3x3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_model *m = dilated_conv(cases[i].C, cases[i].H, cases[i].W, cases[i].k, cases[i].d, cases[i].pads,
                                     cases[i].s, cases[i].g, 300 + i);
        int64_t kh, kw;
        cropped_kernel(m, &kh, &kw);
        CHECK(kh == cases[i].want_kh && kw == cases[i].want_kw, "crop-taps %s: kernel %lldx%lld, expected %lldx%lld",
              cases[i].label, (long long)kh, (long long)kw, (long long)cases[i].want_kh, (long long)cases[i].want_kw);
        char label[160];
        snprintf(label, sizeof label, "crop-taps %s", cases[i].label);
        check(label, m, KILN_PASS_CROP_TAPS, 2, 1e-6, 1e-6, 1, 1);
    }
    /* weights from a Constant node: cropped into an initializer, the Constant dropped */
    kiln_model *m = rate8_conv(6, 7, true, 340);
    int64_t kh, kw;
    cropped_kernel(m, &kh, &kw);
    kiln_model *o = optimized(m, KILN_PASS_CROP_TAPS);
    CHECK(kh == 1 && kw == 1 && count(o, "Constant") == 0,
          "crop-taps: a Constant node's weights cropped (kernel %lldx%lld) and the node dropped (%d left)",
          (long long)kh, (long long)kw, count(o, "Constant"));
    kiln_model_free(o);
    check("crop-taps Constant weights", m, KILN_PASS_CROP_TAPS, 2, 1e-6, 1e-6, 1, 1);
    /* symbolic spatial dims: nothing known, nothing cropped */
    m = rate8_conv(-1, -1, false, 350);
    cropped_kernel(m, &kh, &kw);
    CHECK(kh == 3 && kw == 3, "crop-taps: symbolic H and W left alone (kernel %lldx%lld)", (long long)kh, (long long)kw);
    kiln_model_free(m);
    /* a dynamic batch: the dilated Conv's 6x7 input known by the probes, cropped */
    m = rate8_conv_after(6, 7, false, true, 370);
    cropped_kernel_of(m, "r", &kh, &kw);
    CHECK(kh == 1 && kw == 1, "crop-taps: dynamic batch, inner Conv on 6x7 cropped to 1x1 (kernel %lldx%lld)",
          (long long)kh, (long long)kw);
    check("crop-taps dynamic batch", m, KILN_PASS_CROP_TAPS, 3, 1e-6, 1e-6, 3, 3);
    /* symbolic H and W behind a Conv: left alone */
    m = rate8_conv_after(-1, -1, false, true, 371);
    cropped_kernel_of(m, "r", &kh, &kw);
    CHECK(kh == 3 && kw == 3, "crop-taps: symbolic H and W behind a Conv left alone (kernel %lldx%lld)", (long long)kh,
          (long long)kw);
    kiln_model_free(m);
}

/* ---------------------------------------------------------------- mean-pool */

/* x (?, 4, 5, 6) [or rank 5: (?, 3, 4, 5, 2)] -> Relu -> ReduceMean(axes, keepdims) -> y,
 * axes as the attribute (opset 13) or the input (opset 21). */
static kiln_model *mean_model(int rank, int n_axes, const double *axes, int keepdims, bool attr) {
    kiln_model *m = new_model();
    if (rank == 5) input(m, "x", KILN_F32, 5, KT_DIMS(-1, 3, 4, 5, 2));
    else if (rank == 3) input(m, "x", KILN_F32, 3, KT_DIMS(-1, 4, 7));
    else input(m, "x", KILN_F32, 4, KT_DIMS(-1, 4, 5, 6));
    node(m, "Relu", "x", "h");
    kiln_node *r = NULL;
    if (attr || n_axes == 0) {
        r = node(m, "ReduceMean", "h", "y");
        if (r && attr) {
            int64_t a[8];
            for (int k = 0; k < n_axes; k++) a[k] = (int64_t)axes[k];
            r->opset = 13;
            kiln_node_set_ints(r, "axes", n_axes, a);
        }
    } else {
        init_i64s(m, "axes", n_axes, axes);
        r = node(m, "ReduceMean", "h,axes", "y");
    }
    if (r && keepdims >= 0) kiln_node_set_int(r, "keepdims", keepdims);
    output(m, "y");
    finalize(m);
    return m;
}

/* ---------------------------------------------------------------- pool-conv */

/* x (?, 8, 5, 6) -> Relu -> AveragePool (3x3 [or 2x2], strides s, pads p, count_include_pad
 * ci) -> Conv 1x1 (W (M, 8, 1, 1) [+ B (M)]) -> Relu -> y [, the pool's output a graph output
 * too]. */
static kiln_model *pool_conv_model(int64_t M, int stride, int pad, int ci, bool bias, bool pool_out, int k) {
    kiln_model *m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(-1, 8, 5, 6));
    init(m, "W", KILN_F32, 4, KT_DIMS(M, 8, 1, 1), -1, 1, 71);
    if (bias) init(m, "B", KILN_F32, 1, KT_DIMS(M), -1, 1, 72);
    node(m, "Relu", "x", "h");
    kiln_node *pn = node(m, "AveragePool", "h", "p");
    if (pn) {
        kiln_node_set_ints(pn, "kernel_shape", 2, (int64_t[]){k, k});
        kiln_node_set_ints(pn, "strides", 2, (int64_t[]){stride, stride});
        kiln_node_set_ints(pn, "pads", 4, (int64_t[]){pad, pad, pad, pad});
        if (ci >= 0) kiln_node_set_int(pn, "count_include_pad", ci);
    }
    node(m, "Conv", bias ? "p,W,B" : "p,W", "c");
    node(m, "Relu", "c", "y");
    output(m, "y");
    if (pool_out) output(m, "p");
    finalize(m);
    return m;
}

static void test_pool_conv(void) {
    static const struct {
        const char *label;
        int64_t M;
        int stride, pad, ci, k;
        bool bias, pool_out, swapped;
        int nodes; /* executed with the pass (without: 4, 5 with the pool an output too) */
    } cases[] = {
        {"3x3 pads 1, count_include_pad 1, bias: the bias after the pool", 3, 1, 1, 1, 3, true, false, true, 5},
        {"3x3 pads 1, count_include_pad 0, bias: the bias kept", 3, 1, 1, 0, 3, true, false, true, 4},
        {"3x3 pads 1, count_include_pad absent (0)", 3, 1, 1, -1, 3, true, false, true, 4},
        {"2x2 no pads, count_include_pad 1, bias: the bias kept", 5, 1, 0, 1, 2, true, false, true, 4},
        {"3x3 pads 1, count_include_pad 1, no bias", 3, 1, 1, 1, 3, false, false, true, 4},
        {"M = C: not narrowing", 8, 1, 1, 1, 3, true, false, false, 4},
        {"stride 2: the convolution would see 4x the positions", 3, 2, 1, 1, 3, true, false, false, 4},
        {"the pool's output read by a graph output too", 3, 1, 1, 1, 3, true, true, false, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char label[200];
        snprintf(label, sizeof label, "pool-conv %s", cases[i].label);
        kiln_model *m = pool_conv_model(cases[i].M, cases[i].stride, cases[i].pad, cases[i].ci, cases[i].bias,
                                        cases[i].pool_out, cases[i].k);
        kiln_model *o = optimized(m, KILN_PASS_MEAN_POOL);
        /* swapped: the Conv reads x's Relu directly, the pool reads the Conv */
        const kiln_node *cv = find(o, "Conv"), *pl = find(o, "AveragePool");
        const bool swapped = cv && pl && pl->in[0] == cv->out[0];
        const bool moved = swapped && cases[i].nodes == 5;
        CHECK(o && swapped == cases[i].swapped && count(o, "Add") == moved && (!swapped || cv->n_in == (cases[i].bias && !moved ? 3 : 2)),
              "%s: swapped %d (expected %d), %d Add, Conv inputs %d", label, swapped, cases[i].swapped,
              count(o, "Add"), cv ? cv->n_in : -1);
        kiln_model_free(o);
        /* the function: outputs equal with the pass and without */
        const int plain = 4;
        check(label, m, KILN_PASS_MEAN_POOL, 3, 1e-5, 1e-5, plain, cases[i].swapped ? cases[i].nodes : plain);
    }
    /* the other way: x (?, C, 5, 6) -> Relu -> Conv 1x1 (M) -> AveragePool -> Relu, pool first
     * where C < M x strides and a bias commutes with the pool */
    static const struct {
        const char *label;
        int64_t C, M;
        int k, stride, pad, ci, ceil;
        bool bias, swapped;
    } back[] = {
        {"8 -> 4, 2x2 stride 2, bias (DenseNet's transition)", 8, 4, 2, 2, 0, 0, 0, true, true},
        {"8 -> 4, 3x3 stride 2 pads 1 count_include_pad 1, no bias", 8, 4, 3, 2, 1, 1, 0, false, true},
        {"8 -> 4, 3x3 stride 2 pads 1 count_include_pad 1, bias: not commuting", 8, 4, 3, 2, 1, 1, 0, true, false},
        {"8 -> 4, 2x2 stride 2 ceil_mode on 5x6, count_include_pad 0, bias", 8, 4, 2, 2, 0, 0, 1, true, true},
        {"8 -> 4, 2x2 stride 2 ceil_mode, count_include_pad 1, bias: not commuting", 8, 4, 2, 2, 0, 1, 1, true, false},
        {"3 -> 8, 3x3 stride 1 pads 1, count_include_pad 0, bias (widening)", 3, 8, 3, 1, 1, 0, 0, true, true},
        {"8 -> 1, 2x2 stride 2: C >= M x 4", 8, 1, 2, 2, 0, 0, 0, false, false},
    };
    for (size_t i = 0; i < sizeof back / sizeof back[0]; i++) {
        char label[200];
        snprintf(label, sizeof label, "pool-conv back %s", back[i].label);
        kiln_model *b = new_model();
        input(b, "x", KILN_F32, 4, KT_DIMS(-1, back[i].C, 5, 6));
        init(b, "W", KILN_F32, 4, KT_DIMS(back[i].M, back[i].C, 1, 1), -1, 1, 73);
        if (back[i].bias) init(b, "B", KILN_F32, 1, KT_DIMS(back[i].M), -1, 1, 74);
        node(b, "Relu", "x", "h");
        node(b, "Conv", back[i].bias ? "h,W,B" : "h,W", "c");
        kiln_node *pn = node(b, "AveragePool", "c", "p");
        if (pn) {
            const int k = back[i].k, st = back[i].stride, pd = back[i].pad;
            kiln_node_set_ints(pn, "kernel_shape", 2, (int64_t[]){k, k});
            kiln_node_set_ints(pn, "strides", 2, (int64_t[]){st, st});
            kiln_node_set_ints(pn, "pads", 4, (int64_t[]){pd, pd, pd, pd});
            kiln_node_set_int(pn, "count_include_pad", back[i].ci);
            kiln_node_set_int(pn, "ceil_mode", back[i].ceil);
        }
        node(b, "Relu", "p", "y");
        output(b, "y");
        finalize(b);
        kiln_model *o = optimized(b, KILN_PASS_MEAN_POOL);
        const kiln_node *cv = find(o, "Conv"), *pl = find(o, "AveragePool");
        const bool swapped = cv && pl && cv->in[0] == pl->out[0];
        CHECK(o && swapped == back[i].swapped && count(o, "Add") == 0, "%s: pool first %d (expected %d), %d Add", label,
              swapped, back[i].swapped, count(o, "Add"));
        kiln_model_free(o);
        check(label, b, KILN_PASS_MEAN_POOL, 3, 1e-5, 1e-5, 4, 4);
    }
    /* KILN_POOL_CONV=0 leaves the pool where it is (mean-pool's switch stays on) */
    setenv("KILN_POOL_CONV", "0", 1);
    kiln_model *m = pool_conv_model(3, 1, 1, 1, true, false, 3);
    kiln_model *o = optimized(m, KILN_PASS_MEAN_POOL);
    const kiln_node *pl = find(o, "AveragePool"), *cv = find(o, "Conv");
    CHECK(o && pl && cv && cv->in[0] == pl->out[0], "pool-conv: KILN_POOL_CONV=0 swapped the pool");
    kiln_model_free(o);
    kiln_model_free(m);
    unsetenv("KILN_POOL_CONV");
}

static void test_mean_pool(void) {
    static const struct {
        const char *label;
        int rank, n_axes;
        double axes[4];
        int keepdims; /* -1: the default (1) */
        bool attr, pooled;
    } cases[] = {
        {"axes [2, 3] keepdims (attribute)", 4, 2, {2, 3}, -1, true, true},
        {"axes [3, 2] keepdims 0 (input)", 4, 2, {3, 2}, 0, false, true},
        {"axes [-1, -2] keepdims 1 (input)", 4, 2, {-1, -2}, 1, false, true},
        {"axes [2, -1] keepdims 0 (attribute)", 4, 2, {2, -1}, 0, true, true},
        {"rank 5 axes [2, 3, 4] keepdims 0", 5, 3, {2, 3, 4}, 0, false, true},
        {"rank 3 axes [2]", 3, 1, {2}, 1, false, true},
        {"axes [1, 2, 3]: the channels too", 4, 3, {1, 2, 3}, 1, false, false},
        {"axes [2]: one spatial axis of two", 4, 1, {2}, 0, false, false},
        {"no axes: every axis", 4, 0, {0}, 1, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char label[160];
        snprintf(label, sizeof label, "mean-pool %s", cases[i].label);
        kiln_model *m = mean_model(cases[i].rank, cases[i].n_axes, cases[i].axes, cases[i].keepdims, cases[i].attr);
        kiln_model *o = optimized(m, KILN_PASS_MEAN_POOL);
        const bool flat = cases[i].pooled && cases[i].keepdims == 0;
        CHECK(o && count(o, "ReduceMean") == !cases[i].pooled && count(o, "GlobalAveragePool") == cases[i].pooled &&
                  count(o, "Flatten") == flat,
              "%s: %d ReduceMean, %d GlobalAveragePool, %d Flatten; expected %d, %d, %d", label,
              count(o, "ReduceMean"), count(o, "GlobalAveragePool"), count(o, "Flatten"), !cases[i].pooled,
              cases[i].pooled, flat);
        kiln_model_free(o);
        /* the function: outputs equal with the pass and without, shapes included */
        check(label, m, KILN_PASS_MEAN_POOL, 3, 1e-6, 1e-6, 2, 2 + flat);
    }
}


/* ----------------------------------------------------------- space-to-depth */

/* h = Relu(x), then P strided takes of h concatenated along `axis`: take k is the Slices
 * of spec[k] ("a:b:s,..." per Slice, ';' between chained Slices: axis a from b in steps of
 * s to the end), Slices with the same text shared. extra: h's first Slice is also read by a
 * Relu that is a second output. */
static kiln_model *s2d_model(int nd, const int64_t *dims, int axis, int P, const char *const *spec, bool extra) {
    kiln_model *m = new_model();
    input(m, "x", KILN_F32, nd, dims);
    node(m, "Relu", "x", "h");
    static const double big[1] = {9e15};
    init_i64s(m, "end", 1, big);
    char made[16][96];
    int n_made = 0;
    char cat[512] = "";
    for (int k = 0; k < P; k++) {
        char chain[96], prev[96] = "h", sofar[96] = "";
        snprintf(chain, sizeof chain, "%s", spec[k]);
        for (char *part = strtok(chain, ";"); part; part = strtok(NULL, ";")) {
            int a = 0, b = 0, st = 0;
            sscanf(part, "%d:%d:%d", &a, &b, &st);
            char out[96];
            snprintf(out, sizeof out, "%.40s_%d_%d_%d", prev, a, b, st);
            snprintf(sofar, sizeof sofar, "%s", out);
            bool have = false;
            for (int j = 0; j < n_made; j++) have = have || !strcmp(made[j], out);
            if (!have) {
                char nm[128], ins[512];
                const double av[1] = {a}, bv[1] = {b}, sv[1] = {st};
                snprintf(nm, sizeof nm, "%s_a", out);
                init_i64s(m, nm, 1, av);
                snprintf(nm, sizeof nm, "%s_b", out);
                init_i64s(m, nm, 1, bv);
                snprintf(nm, sizeof nm, "%s_s", out);
                init_i64s(m, nm, 1, sv);
                snprintf(ins, sizeof ins, "%s,%s_b,end,%s_a,%s_s", prev, out, out, out);
                node(m, "Slice", ins, out);
                if (n_made < 16) snprintf(made[n_made++], sizeof made[0], "%s", out);
            }
            snprintf(prev, sizeof prev, "%s", out);
        }
        snprintf(cat + strlen(cat), sizeof cat - strlen(cat), "%s%s", k ? "," : "", sofar);
    }
    kiln_node *c = node(m, "Concat", cat, "y");
    if (c) kiln_node_set_int(c, "axis", axis);
    output(m, "y");
    if (extra && n_made) {
        node(m, "Relu", made[0], "y2");
        output(m, "y2");
    }
    finalize(m);
    return m;
}

static void test_space_to_depth(void) {
    /* Swin's patch merging (NHWC, concatenated on the channels): x0 = [0::2, 0::2],
     * x1 = [1::2, 0::2], x2 = [0::2, 1::2], x3 = [1::2, 1::2], rows sliced first */
    static const char *swin[] = {"1:0:2;2:0:2", "1:1:2;2:0:2", "1:0:2;2:1:2", "1:1:2;2:1:2"};
    /* YOLOv5's Focus: NCHW, concatenated on axis 1, the same order on axes 2 and 3 */
    static const char *focus[] = {"2:0:2;3:0:2", "2:1:2;3:0:2", "2:0:2;3:1:2", "2:1:2;3:1:2"};
    /* row-major order (the row offset slowest), columns sliced first, a negative axis */
    static const char *rowmajor[] = {"-2:0:2;1:0:2", "-2:1:2;1:0:2", "-2:0:2;1:1:2", "-2:1:2;1:1:2"};
    /* three offsets along one axis, concatenated before it */
    static const char *three[] = {"2:0:3", "2:1:3", "2:2:3"};
    /* not a radix order of the offsets */
    static const char *mixed[] = {"1:0:2;2:0:2", "1:1:2;2:1:2", "1:1:2;2:0:2", "1:0:2;2:1:2"};
    /* offsets missing: 2 of the 3 a step of 3 makes */
    static const char *missing[] = {"2:0:3", "2:1:3"};
    static const struct {
        const char *label;
        int nd;
        int64_t dims[5];
        int axis, P;
        const char *const *spec;
        bool extra, merged;
        int ref_nodes, want_nodes;
    } cases[] = {
        {"swin patch merging", 4, {-1, 8, 6, 4}, -1, 4, swin, false, true, 8, 4},
        {"yolov5 focus (NCHW, axis 1)", 4, {-1, 3, 8, 6}, 1, 4, focus, false, true, 8, 4},
        {"row-major offsets, columns first", 4, {-1, 4, 6, 2}, 3, 4, rowmajor, false, true, 8, 4},
        {"three offsets of one axis, concatenated before it", 3, {-1, 5, 9}, 1, 3, three, false, true, 5, 4},
        {"offsets in no radix order", 4, {-1, 8, 6, 4}, -1, 4, mixed, false, false, 8, 8},
        {"two of three offsets", 3, {-1, 5, 9}, 1, 2, missing, false, false, 4, 4},
        {"a shared Slice read outside the merge", 4, {-1, 8, 6, 4}, -1, 4, swin, true, false, 9, 9},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char label[160];
        snprintf(label, sizeof label, "space-to-depth %s", cases[i].label);
        kiln_model *m = s2d_model(cases[i].nd, cases[i].dims, cases[i].axis, cases[i].P, cases[i].spec, cases[i].extra);
        kiln_model *o = optimized(m, KILN_PASS_SPACE_TO_DEPTH);
        const bool merged = cases[i].merged;
        CHECK(o && count(o, "Concat") == !merged && count(o, "Transpose") == merged && (merged ? count(o, "Slice") == 0 : 1),
              "%s: %d Concat, %d Transpose, %d Slice; expected %d, %d, %s", label, count(o, "Concat"),
              count(o, "Transpose"), count(o, "Slice"), !merged, merged, merged ? "0" : "as before");
        kiln_model_free(o);
        /* the function: outputs equal with the pass and without */
        check(label, m, KILN_PASS_SPACE_TO_DEPTH, 2, 0, 0, cases[i].ref_nodes, cases[i].want_nodes);
    }
}

/* ----------------------------------------------------------- row-gather */

/* A kiln-domain node (kiln.Roll) in a test model. */
static kiln_node *kiln_node_of(kiln_model *m, const char *op, const char *ins, const char *out) {
    kiln_node *n = node(m, op, ins, out);
    if (n) {
        free(n->domain);
        n->domain = kiln_strdup(ctx, "kiln");
    }
    return n;
}

/* Swin's shifted window block on x (?, 7, 7, 4), windows of 4: Pad to 8 x 8 (pads a
 * constant), kiln.Roll by -2, Reshape to (B, 2, 4, 2, 4, 4) with B from Shape(x) (as the
 * export computes it), Transpose (0, 1, 3, 2, 4, 5), Reshape (-1, 16, 4); a Relu on the
 * windows; then the reverse: Reshape (-1, 2, 2, 4, 4, 4), Transpose, Reshape (-1, 8, 8, 4),
 * kiln.Roll by +2, Slices of H and W back to 7. shared_roll: the first roll's output is a
 * graph output too (the chain must stop before it); begin_pad: the Pad pads H at its start
 * (not a crop's inverse: not taken). */
static kiln_model *window_block(bool shared_roll, bool begin_pad) {
    kiln_model *m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(-1, 7, 7, 4));
    init_i64s(m, "pads", 8, begin_pad ? KT_VALS(0, 1, 0, 0, 0, 0, 1, 0) : KT_VALS(0, 0, 0, 0, 0, 1, 1, 0));
    init_i64s(m, "zero", 1, KT_VALS(0));
    init_i64s(m, "one", 1, KT_VALS(1));
    init_i64s(m, "seven", 1, KT_VALS(7));
    init_i64s(m, "ax1", 1, KT_VALS(1));
    init_i64s(m, "ax2", 1, KT_VALS(2));
    init_i64s(m, "win", 5, KT_VALS(2, 4, 2, 4, 4));
    init_i64s(m, "tokens", 3, KT_VALS(-1, 16, 4));
    init_i64s(m, "wins", 6, KT_VALS(-1, 2, 2, 4, 4, 4));
    init_i64s(m, "map", 4, KT_VALS(-1, 8, 8, 4));
    node(m, "Pad", "x,pads", "xp");
    kiln_node *r = kiln_node_of(m, "Roll", "xp", "xr");
    if (r) {
        kiln_node_set_ints(r, "axes", 2, KT_DIMS(1, 2));
        kiln_node_set_ints(r, "shifts", 2, KT_DIMS(-2, -2));
    }
    node(m, "Shape", "x", "xs");
    node(m, "Slice", "xs,zero,one", "b");
    kiln_node *c = node(m, "Concat", "b,win", "vshape");
    if (c) kiln_node_set_int(c, "axis", 0);
    node(m, "Reshape", "xr,vshape", "v");
    kiln_node *t = node(m, "Transpose", "v", "vt");
    if (t) kiln_node_set_ints(t, "perm", 6, KT_DIMS(0, 1, 3, 2, 4, 5));
    node(m, "Reshape", "vt,tokens", "w");
    node(m, "Relu", "w", "a");
    node(m, "Reshape", "a,wins", "u");
    t = node(m, "Transpose", "u", "ut");
    if (t) kiln_node_set_ints(t, "perm", 6, KT_DIMS(0, 1, 3, 2, 4, 5));
    node(m, "Reshape", "ut,map", "z");
    r = kiln_node_of(m, "Roll", "z", "zr");
    if (r) {
        kiln_node_set_ints(r, "axes", 2, KT_DIMS(1, 2));
        kiln_node_set_ints(r, "shifts", 2, KT_DIMS(2, 2));
    }
    node(m, "Slice", "zr,zero,seven,ax1", "zh");
    node(m, "Slice", "zh,zero,seven,ax2", "y");
    output(m, "y");
    if (shared_roll) output(m, "xr");
    finalize(m);
    return m;
}

/* MaxViT's window partition and departition at layout conversions (what the layout pass
 * leaves around them: a convolution's NHWC output read through kiln.ToNCHW, the block's
 * result written through kiln.ToNHWC for the next convolution). x (?, 4, 6, 6) NHWC ->
 * ToNCHW -> Reshape (B, 4, 2, 3, 2, 3) with B from Shape(ToNCHW's output), as torch writes
 * x.shape -> Transpose (0, 2, 4, 3, 5, 1) -> Reshape (-1, 4, 9, 4) -> Relu -> Reshape (-1, 2,
 * 2, 3, 3, 4) -> Transpose (0, 5, 1, 3, 2, 4) -> Reshape (-1, 4, 6, 6) -> ToNHWC -> y (NHWC).
 * The formats are set by hand (the layout pass runs only for CUDA plans); the CPU runs them
 * as NCHW bytes, where the conversions are copies and the gather's in_nhwc / out_nhwc
 * transposes. */
static kiln_model *maxvit_partition(void) {
    kiln_model *m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(-1, 4, 6, 6));
    init_i64s(m, "zero", 1, KT_VALS(0));
    init_i64s(m, "split", 5, KT_VALS(4, 2, 3, 2, 3));
    init_i64s(m, "tokens", 4, KT_VALS(-1, 4, 9, 4));
    init_i64s(m, "wins", 6, KT_VALS(-1, 2, 2, 3, 3, 4));
    init_i64s(m, "map", 4, KT_VALS(-1, 4, 6, 6));
    kiln_node_of(m, "ToNCHW", "x", "xc");
    node(m, "Shape", "xc", "xs");
    kiln_node *g = node(m, "Gather", "xs,zero", "b");
    if (g) kiln_node_set_int(g, "axis", 0);
    kiln_node *c = node(m, "Concat", "b,split", "vshape");
    if (c) kiln_node_set_int(c, "axis", 0);
    node(m, "Reshape", "xc,vshape", "v");
    kiln_node *t = node(m, "Transpose", "v", "vt");
    if (t) kiln_node_set_ints(t, "perm", 6, KT_DIMS(0, 2, 4, 3, 5, 1));
    node(m, "Reshape", "vt,tokens", "w");
    node(m, "Relu", "w", "a");
    node(m, "Reshape", "a,wins", "u");
    t = node(m, "Transpose", "u", "ut");
    if (t) kiln_node_set_ints(t, "perm", 6, KT_DIMS(0, 5, 1, 3, 2, 4));
    node(m, "Reshape", "ut,map", "z");
    kiln_node_of(m, "ToNHWC", "z", "y");
    output(m, "y");
    finalize(m);
    m->values[kiln_model_find_value(m, "x")].format = KILN_FORMAT_NHWC;
    m->values[kiln_model_find_value(m, "y")].format = KILN_FORMAT_NHWC;
    return m;
}

static void test_row_gather(void) {
    const unsigned rg = KILN_PASS_ROW_GATHER;
    /* both chains taken: Pad, roll, the window permutation; the permutation back, the roll
     * back, two crops */
    kiln_model *m = window_block(false, false);
    kiln_model *o = optimized(m, rg);
    const kiln_node *g = o ? find(o, "RowGather") : NULL;
    int64_t view[KILN_MAX_DIMS] = {0};
    int nv = 0;
    const int64_t *vw = g ? kiln_attr_ints(g, "view", &nv) : NULL;
    for (int d = 0; vw && d < nv && d < KILN_MAX_DIMS; d++) view[d] = vw[d];
    CHECK(o && count(o, "RowGather") == 2 && count(o, "Transpose") == 0 && count(o, "Pad") == 0 &&
              count(o, "Roll") == 0 && count(o, "Reshape") == 0 && nv == 5 && view[0] == -1 && view[1] == 4,
          "row-gather: the partition and its reverse as two gathers (%d gathers, %d Transpose, %d Pad, %d Roll, %d "
          "Reshape; the partition's view (B H/4 with the batch, 4, W/4, 4, C) of %d dims, the first %lld)",
          count(o, "RowGather"), count(o, "Transpose"), count(o, "Pad"), count(o, "Roll"), count(o, "Reshape"), nv,
          (long long)view[0]);
    kiln_model_free(o);
    check("row-gather: Swin's shifted window block", m, rg, 3, 0, 0, 12, 3);
    /* the roll's output read outside: the partition starts after it (the Transpose and the
     * Reshapes, one copy: left as it was); the reverse is still taken */
    m = window_block(true, false);
    o = optimized(m, rg);
    CHECK(o && count(o, "RowGather") == 1 && count(o, "Transpose") == 1 && count(o, "Roll") == 1,
          "row-gather: a shared roll ends the partition's chain (%d gathers, %d Transpose, %d Roll)",
          count(o, "RowGather"), count(o, "Transpose"), count(o, "Roll"));
    kiln_model_free(o);
    check("row-gather: shared roll", m, rg, 2, 0, 0, 12, 7);
    /* a pad at the start of H: not taken; the roll and permutation still are */
    m = window_block(false, true);
    o = optimized(m, rg);
    CHECK(o && count(o, "RowGather") == 2 && count(o, "Pad") == 1,
          "row-gather: a start pad stays a Pad (%d gathers, %d Pad)", count(o, "RowGather"), count(o, "Pad"));
    kiln_model_free(o);
    check("row-gather: a start pad", m, rg, 2, 0, 0, 12, 4);
    /* MaxViT's partition from NHWC bytes (ToNCHW and the Transpose: one gather, in_nhwc; the
     * Shape of ToNCHW's output computed from x's) and the departition into them (the
     * Transpose and ToNHWC: one gather, out_nhwc) */
    m = maxvit_partition();
    o = optimized(m, rg);
    const kiln_node *g0 = NULL, *g1 = NULL;
    for (int i = 0; o && i < o->n_nodes; i++)
        if (!strcmp(o->nodes[i].op_type, "RowGather")) *(g0 ? &g1 : &g0) = &o->nodes[i];
    CHECK(o && count(o, "RowGather") == 2 && count(o, "Transpose") == 0 && count(o, "ToNCHW") == 0 &&
              count(o, "ToNHWC") == 0 && g0 && g1 && kiln_attr_int(g0, "in_nhwc", 0) == 1 &&
              kiln_attr_int(g0, "out_nhwc", 0) == 0 && kiln_attr_int(g1, "out_nhwc", 0) == 1 &&
              kiln_attr_int(g1, "in_nhwc", 0) == 0,
          "row-gather: MaxViT's partition and departition as two gathers across the layout conversions (%d gathers, "
          "%d Transpose, %d ToNCHW, %d ToNHWC)",
          count(o, "RowGather"), count(o, "Transpose"), count(o, "ToNCHW"), count(o, "ToNHWC"));
    kiln_model_free(o);
    check("row-gather: MaxViT's partition at layout conversions", m, rg, 3, 0, 0, 9, 3);
    /* tokens of an NHWC map: ToNCHW -> Reshape (B, C, H W) -> Transpose (0, 2, 1) composes to
     * no move at all: one gather (in_nhwc) that a device plan makes a view of x (formats in
     * its tensors), a host plan runs (NCHW bytes); the same function. x and y between Relus
     * (values of the plan's arena) */
    m = new_model();
    input(m, "x0", KILN_F32, 4, KT_DIMS(-1, 4, 3, 5));
    init_i64s(m, "flat", 3, KT_VALS(-1, 4, 15));
    node(m, "Relu", "x0", "x");
    kiln_node_of(m, "ToNCHW", "x", "xc");
    node(m, "Reshape", "xc,flat", "fl");
    kiln_node *t = node(m, "Transpose", "fl", "y");
    if (t) kiln_node_set_ints(t, "perm", 3, KT_DIMS(0, 2, 1));
    node(m, "Relu", "y", "out");
    output(m, "out");
    finalize(m);
    m->values[kiln_model_find_value(m, "x")].format = KILN_FORMAT_NHWC;
    o = optimized(m, rg);
    g0 = o ? find(o, "RowGather") : NULL;
    CHECK(o && count(o, "RowGather") == 1 && count(o, "Transpose") == 0 && count(o, "ToNCHW") == 0 && g0 &&
              kiln_attr_int(g0, "in_nhwc", 0) == 1,
          "row-gather: NHWC tokens as one gather (%d gathers, %d Transpose)", count(o, "RowGather"),
          count(o, "Transpose"));
    kiln_tensor *in = kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 3, 5), -1, 1, 77);
    for (int host = 0; o && host < 2; host++) {
        kiln_plan *pl = NULL;
        if (kiln_plan_build(o, &in, true, host, &pl) != KILN_OK) {
            CHECK(0, "row-gather tokens: plan: %s", kiln_context_message(ctx));
            continue;
        }
        kiln_plan_view_t v;
        kiln_plan_view(pl, &v);
        const int a = kiln_model_find_value(o, "y"), b = kiln_model_find_value(o, "x");
        const bool same = a >= 0 && b >= 0 && v.offset[a] != SIZE_MAX && v.offset[a] == v.offset[b];
        CHECK(same == !host, "row-gather tokens: %s plan: y %s a view of x", host ? "host" : "device",
              same ? "is" : "is not");
        kiln_plan_free(pl);
    }
    kiln_tensor_free(in);
    kiln_model_free(o);
    check("row-gather: NHWC tokens", m, rg, 2, 0, 0, 5, 3);
}

/* ----------------------------------------------------------- fold-scale */

/* ConvNeXt's block tail: x (N, C, H, W) -> Transpose to (N, H, W, C) -> MatMul W (C, C) ->
 * Add bias (C) -> Transpose back -> Mul gamma -> Add x. scale: "ch" gamma (C, 1, 1), "w" a
 * scale along W (1, 1, Wd: not the product's channels), "in" gamma a graph input (not a
 * constant), "none" no Mul; shared: the product's result is also a graph output. */
static kiln_model *ls_model(const char *scale, bool shared) {
    kiln_model *m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(-1, 6, 4, 5));
    init(m, "w", KILN_F32, 2, KT_DIMS(6, 6), -1, 1, 301);
    init(m, "bias", KILN_F32, 1, KT_DIMS(6), -1, 1, 302);
    if (!strcmp(scale, "ch")) init(m, "gamma", KILN_F32, 3, KT_DIMS(6, 1, 1), 0.1, 2, 303);
    if (!strcmp(scale, "w")) init(m, "gamma", KILN_F32, 3, KT_DIMS(1, 1, 5), 0.1, 2, 304);
    if (!strcmp(scale, "in")) input(m, "gamma", KILN_F32, 3, KT_DIMS(6, 1, 1));
    kiln_node *t = node(m, "Transpose", "x", "h");
    if (t) kiln_node_set_ints(t, "perm", 4, (int64_t[]){0, 2, 3, 1});
    node(m, "MatMul", "h,w", "mm");
    node(m, "Add", "mm,bias", "lin");
    t = node(m, "Transpose", "lin", "back");
    if (t) kiln_node_set_ints(t, "perm", 4, (int64_t[]){0, 3, 1, 2});
    const bool mul = strcmp(scale, "none") != 0;
    if (mul) node(m, "Mul", "gamma,back", "scaled");
    node(m, "Add", mul ? "scaled,x" : "back,x", "y");
    output(m, "y");
    if (shared) output(m, "lin");
    finalize(m);
    return m;
}

static void test_fold_scale(void) {
    const unsigned fs = KILN_PASS_FOLD_SCALE, all = KILN_PASS_FOLD_SCALE | KILN_PASS_FUSE_CONV | KILN_PASS_GEMM_RESIDUAL;
    /* folded: the Mul gone, the function kept */
    kiln_model *m = ls_model("ch", false);
    kiln_model *o = optimized(m, fs);
    CHECK(o && count(o, "Mul") == 0 && count(o, "MatMul") == 1 && count(o, "Add") == 2,
          "fold-scale: layer scale folded into the MatMul and its bias (%d Mul left)", count(o, "Mul"));
    kiln_model_free(o);
    check("fold-scale: ConvNeXt layer scale", m, fs, 2, 1e-5, 1e-5, 6, 5);
    /* with fuse-conv and gemm-residual: the residual Add through the Transpose into the product */
    m = ls_model("ch", false);
    o = optimized(m, all);
    CHECK(o && count(o, "Mul") == 0 && count(o, "Add") == 0 && count(o, "FusedGemm") == 1 && count(o, "Transpose") == 3,
          "fold-scale + gemm-residual: one FusedGemm, no Add or Mul, the residual moved back (%d FusedGemm, %d Add, %d "
          "Mul, %d Transpose)", count(o, "FusedGemm"), count(o, "Add"), count(o, "Mul"), count(o, "Transpose"));
    kiln_model_free(o);
    check("fold-scale + gemm-residual: ConvNeXt block tail", m, all, 2, 1e-5, 1e-5, 6, 7);
    /* gemm-residual through the Transpose alone (no scale) */
    m = ls_model("none", false);
    o = optimized(m, KILN_PASS_FUSE_CONV | KILN_PASS_GEMM_RESIDUAL);
    CHECK(o && count(o, "Add") == 0 && count(o, "FusedGemm") == 1,
          "gemm-residual: a residual Add behind the product's Transpose joins it (%d Add left)", count(o, "Add"));
    kiln_model_free(o);
    check("gemm-residual: through a Transpose", m, KILN_PASS_FUSE_CONV | KILN_PASS_GEMM_RESIDUAL, 2, 1e-5, 1e-5, 5, 7);
    /* refused: a scale along W, a scale that is an input, the product read elsewhere */
    static const struct {
        const char *scale;
        bool shared;
        const char *label;
        int nodes;
    } no[] = {{"w", false, "a scale along a spatial axis", 6},
              {"in", false, "a scale that is not a constant", 6},
              {"ch", true, "the product also a graph output", 6}};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        char label[160];
        snprintf(label, sizeof label, "fold-scale refuses %s", no[i].label);
        m = ls_model(no[i].scale, no[i].shared);
        o = optimized(m, fs);
        CHECK(o && count(o, "Mul") == 1, "%s: %d Mul (expected 1)", label, count(o, "Mul"));
        kiln_model_free(o);
        check(label, m, fs, 2, 1e-5, 1e-5, no[i].nodes, no[i].nodes);
    }
    /* a Conv with a bias and a per-channel Mul (1, M, 1, 1); a Gemm (transB, bias) times one
     * element */
    m = new_model();
    input(m, "x", KILN_F32, 4, KT_DIMS(-1, 3, 6, 6));
    init(m, "cw", KILN_F32, 4, KT_DIMS(4, 3, 3, 3), -1, 1, 311);
    init(m, "cb", KILN_F32, 1, KT_DIMS(4), -1, 1, 312);
    init(m, "s", KILN_F32, 4, KT_DIMS(1, 4, 1, 1), -2, 2, 313);
    node(m, "Conv", "x,cw,cb", "c");
    node(m, "Mul", "c,s", "y");
    output(m, "y");
    finalize(m);
    o = optimized(m, fs);
    CHECK(o && count(o, "Mul") == 0 && count(o, "Conv") == 1, "fold-scale: a per-channel Mul folded into a Conv");
    kiln_model_free(o);
    check("fold-scale: Conv + per-channel Mul", m, fs, 2, 1e-5, 1e-5, 2, 1);
    m = new_model();
    input(m, "x", KILN_F32, 2, KT_DIMS(-1, 5));
    init(m, "gw", KILN_F32, 2, KT_DIMS(7, 5), -1, 1, 321);
    init(m, "gb", KILN_F32, 1, KT_DIMS(7), -1, 1, 322);
    init_scalar(m, "k", KILN_F32, 0.37);
    kiln_node *g = node(m, "Gemm", "x,gw,gb", "p");
    if (g) kiln_node_set_int(g, "transB", 1);
    node(m, "Mul", "k,p", "y");
    output(m, "y");
    finalize(m);
    o = optimized(m, fs);
    CHECK(o && count(o, "Mul") == 0, "fold-scale: a one-element Mul folded into a Gemm (transB)");
    kiln_model_free(o);
    check("fold-scale: Gemm (transB) times a scalar", m, fs, 3, 1e-5, 1e-5, 2, 1);
}

int main(int argc, char **argv) {
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    test_fold_bn();
    test_fold_constants();
    test_crop_taps();
    test_mean_pool();
    test_pool_conv();
    test_space_to_depth();
    test_fold_scale();
    test_known_dims();
    test_channel_gather();
    test_row_gather();
    test_fuse_conv();
    test_fuse_conv_smooth();
    test_fuse_eltwise();
    test_fuse_eltwise_bn();
    test_tiny_cnn(argc > 1 ? argv[1] : ".");
    kiln_context_free(ctx);
    printf("%s: %d failed checks\n", fails ? "FAIL" : "PASS", fails);
    return fails != 0;
}
