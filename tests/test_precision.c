/* test_precision.c — the precision pass (fp16/bf16) and the channel-padding pass keep the
 * function, checked on the CPU backend on random inputs: fp16/bf16 sessions against the
 * fp32 session of the same model, and the rewritten graphs inspected (low-precision values
 * where compute happens, fp32 around Softmax and friends, Casts at the boundaries).
 * Usage: test_precision <source dir> (for examples/tiny_cnn.onnx). */
#include "core/internal.h"
#include "core/optest.h"
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

/* ------------------------------------------------------------- model building */

static void node(kiln_model *m, const char *op, const char *name, int n_in, const char *const *in, int n_out,
                 const char *const *out, kiln_node **nd) {
    kiln_status st = kiln_model_add_node(m, op, name, n_in, in, n_out, out, nd);
    CHECK(st == KILN_OK, "add %s: %s", name, kiln_context_message(m->ctx));
}
#define IN(...) (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)), (const char *[]){__VA_ARGS__}
#define OUT(...) IN(__VA_ARGS__)

static void init(kiln_model *m, const char *name, kiln_tensor *t) {
    CHECK(t && kiln_model_add_initializer(m, name, t) == KILN_OK, "initializer %s", name);
    kiln_tensor_free(t);
}

static kiln_model *finalize(kiln_model *m) {
    if (kiln_model_finalize(m) == KILN_OK) return m;
    printf("finalize: %s\n", kiln_context_message(m->ctx));
    fails++;
    kiln_model_free(m);
    return NULL;
}

/* Conv(3->8)-BN-Relu-MaxPool-Conv(8->8)+residual-Relu-GAP-Flatten-Gemm-Softmax, batch
 * symbolic; outputs: probs, logits. */
static kiln_model *cnn_model(kiln_context *ctx) {
    kiln_model *m = NULL;
    if (kiln_model_create(ctx, &m)) return NULL;
    kiln_model_add_input(m, "x", KILN_F32, 4, KT_DIMS(-1, 3, 16, 16));
    init(m, "w1", kt_rand(KILN_F32, 4, KT_DIMS(8, 3, 3, 3), -0.4, 0.4, 11));
    init(m, "scale", kt_rand(KILN_F32, 1, KT_DIMS(8), 0.5, 1.5, 12));
    init(m, "bias", kt_rand(KILN_F32, 1, KT_DIMS(8), -0.2, 0.2, 13));
    init(m, "mean", kt_rand(KILN_F32, 1, KT_DIMS(8), -0.3, 0.3, 14));
    init(m, "var", kt_rand(KILN_F32, 1, KT_DIMS(8), 0.5, 1.5, 15));
    init(m, "w2", kt_rand(KILN_F32, 4, KT_DIMS(8, 8, 3, 3), -0.2, 0.2, 16));
    init(m, "b2", kt_rand(KILN_F32, 1, KT_DIMS(8), -0.1, 0.1, 17));
    init(m, "wfc", kt_rand(KILN_F32, 2, KT_DIMS(10, 8), -1, 1, 18));
    init(m, "bfc", kt_rand(KILN_F32, 1, KT_DIMS(10), -0.5, 0.5, 19));
    kiln_node *n = NULL;
    node(m, "Conv", "conv1", IN("x", "w1"), OUT("c1"), &n);
    kiln_node_set_ints(n, "pads", 4, KT_DIMS(1, 1, 1, 1));
    node(m, "BatchNormalization", "bn1", IN("c1", "scale", "bias", "mean", "var"), OUT("bn1"), NULL);
    node(m, "Relu", "relu1", IN("bn1"), OUT("r1"), NULL);
    node(m, "MaxPool", "pool", IN("r1"), OUT("p1"), &n);
    kiln_node_set_ints(n, "kernel_shape", 2, KT_DIMS(2, 2));
    kiln_node_set_ints(n, "strides", 2, KT_DIMS(2, 2));
    node(m, "Conv", "conv2", IN("p1", "w2", "b2"), OUT("c2"), &n);
    kiln_node_set_ints(n, "pads", 4, KT_DIMS(1, 1, 1, 1));
    node(m, "Add", "residual", IN("c2", "p1"), OUT("a2"), NULL);
    node(m, "Relu", "relu2", IN("a2"), OUT("r2"), NULL);
    node(m, "GlobalAveragePool", "gap", IN("r2"), OUT("g"), NULL);
    node(m, "Flatten", "flatten", IN("g"), OUT("f"), NULL);
    node(m, "Gemm", "fc", IN("f", "wfc", "bfc"), OUT("logits"), &n);
    kiln_node_set_int(n, "transB", 1);
    node(m, "Softmax", "softmax", IN("logits"), OUT("probs"), &n);
    kiln_node_set_int(n, "axis", 1);
    kiln_model_add_output(m, "probs");
    kiln_model_add_output(m, "logits");
    return finalize(m);
}

/* Shape computations in float, Cast/ConstantOfShape/Constant feeding compute, an
 * initializer shared by a compute op and LayerNormalization (both low), an Exp feeding ReduceSum, an
 * integer output. Inputs: x (N,4,6,6) f32, mask (N,1,1,1) i64. */
static kiln_model *shapes_model(kiln_context *ctx) {
    kiln_model *m = NULL;
    if (kiln_model_create(ctx, &m)) return NULL;
    kiln_model_add_input(m, "x", KILN_F32, 4, KT_DIMS(-1, 4, 6, 6));
    kiln_model_add_input(m, "mask", KILN_I64, 4, KT_DIMS(-1, 1, 1, 1));
    init(m, "i0", kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0)));
    init(m, "i2", kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(2)));
    init(m, "i4", kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(4)));
    init(m, "cw", kt_rand(KILN_F32, 4, KT_DIMS(4, 4, 1, 1), -0.8, 0.8, 21));
    init(m, "flat", kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, -1)));
    init(m, "g", kt_rand(KILN_F32, 1, KT_DIMS(576), 0.5, 1.5, 22));
    init(m, "bb", kt_rand(KILN_F32, 1, KT_DIMS(576), -0.5, 0.5, 23));
    init(m, "tenth", kt_scalar(KILN_F32, 0.1));
    init(m, "axis1", kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1)));
    kiln_node *n = NULL;
    /* sizes = [N, C, 2H, 2W], computed through float */
    node(m, "Shape", "shape", IN("x"), OUT("s"), NULL);
    node(m, "Slice", "slice_hw", IN("s", "i2", "i4"), OUT("hw"), NULL);
    node(m, "Cast", "hw_float", IN("hw"), OUT("hwf"), &n);
    kiln_node_set_int(n, "to", KILN_F32);
    node(m, "Constant", "two", IN(), OUT("two"), &n);
    kiln_node_set_float(n, "value_float", 2.0f);
    node(m, "Mul", "hw_times_two", IN("hwf", "two"), OUT("hw2f"), NULL);
    node(m, "Cast", "hw_int", IN("hw2f"), OUT("hw2"), &n);
    kiln_node_set_int(n, "to", KILN_I64);
    node(m, "Slice", "slice_nc", IN("s", "i0", "i2"), OUT("nc"), NULL);
    node(m, "Concat", "sizes", IN("nc", "hw2"), OUT("sizes"), &n);
    kiln_node_set_int(n, "axis", 0);
    node(m, "Resize", "up", IN("x", "", "", "sizes"), OUT("up"), &n);
    kiln_node_set_string(n, "mode", "nearest");
    node(m, "Conv", "conv", IN("up", "cw"), OUT("cv"), NULL);
    /* ConstantOfShape and Cast to FLOAT feeding compute */
    node(m, "Shape", "shape_cv", IN("cv"), OUT("scv"), NULL);
    node(m, "ConstantOfShape", "quarter", IN("scv"), OUT("cos"), &n);
    {
        kiln_tensor *q = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(0.25));
        n->attrs = realloc(n->attrs, (size_t)(n->n_attrs + 1) * sizeof *n->attrs);
        char *nm = malloc(6);
        memcpy(nm, "value", 6);
        n->attrs[n->n_attrs++] = (kiln_attr){.name = nm, .type = KILN_ATTR_TENSOR, .t = q};
    }
    node(m, "Add", "add_quarter", IN("cv", "cos"), OUT("a"), NULL);
    node(m, "Cast", "mask_float", IN("mask"), OUT("mf"), &n);
    kiln_node_set_int(n, "to", KILN_F32);
    node(m, "Mul", "masked", IN("a", "mf"), OUT("b"), NULL);
    node(m, "Constant", "k", IN(), OUT("k"), &n);
    kiln_node_set_floats(n, "value_floats", 1, (const float[]){1.5f});
    node(m, "Mul", "times_k", IN("b", "k"), OUT("c"), NULL);
    /* a Constant read by compute and by a constant-only ReduceSum: stays f32 */
    node(m, "Constant", "kk", IN(), OUT("kk"), &n);
    kiln_node_set_floats(n, "value_floats", 2, (const float[]){0.25f, 0.5f});
    node(m, "ReduceSum", "sum_kk", IN("kk"), OUT("skk"), &n);
    kiln_node_set_int(n, "keepdims", 0);
    node(m, "Slice", "kk0", IN("kk", "i0", "axis1"), OUT("kk0"), NULL);
    node(m, "Add", "plus_skk", IN("c", "skk"), OUT("c2"), NULL);
    node(m, "Sub", "minus_kk0", IN("c2", "kk0"), OUT("c3"), NULL);
    node(m, "Reshape", "flatten", IN("c3", "flat"), OUT("d"), NULL);
    /* LayerNormalization shares g with a compute Mul */
    node(m, "LayerNormalization", "ln", IN("d", "g", "bb"), OUT("ln"), &n);
    kiln_node_set_int(n, "axis", -1);
    node(m, "Mul", "times_g", IN("d", "g"), OUT("q"), NULL);
    node(m, "Add", "out1", IN("ln", "q"), OUT("out1"), NULL);
    /* softmax written out: Exp feeding ReduceSum stays f32 */
    node(m, "Mul", "scaled", IN("d", "tenth"), OUT("ds"), NULL);
    node(m, "Exp", "exp", IN("ds"), OUT("ex"), NULL);
    node(m, "ReduceSum", "sum", IN("ex", "axis1"), OUT("rs"), NULL);
    node(m, "Div", "normalize", IN("ex", "rs"), OUT("out2"), NULL);
    node(m, "ArgMax", "argmax", IN("out1"), OUT("out3"), &n);
    kiln_node_set_int(n, "axis", 1);
    kiln_model_add_output(m, "out1");
    kiln_model_add_output(m, "out2");
    kiln_model_add_output(m, "out3");
    return finalize(m);
}

/* Convs reading a 3-channel input (two of them: one Pad shared), a 5-channel one inside,
 * a depthwise one (group 4: left alone) and an 8-channel one (already aligned). */
static kiln_model *pad_model(kiln_context *ctx) {
    kiln_model *m = NULL;
    if (kiln_model_create(ctx, &m)) return NULL;
    kiln_model_add_input(m, "x", KILN_F32, 4, KT_DIMS(-1, 3, 10, 10));
    init(m, "w1", kt_rand(KILN_F32, 4, KT_DIMS(5, 3, 3, 3), -0.5, 0.5, 31));
    init(m, "b1", kt_rand(KILN_F32, 1, KT_DIMS(5), -0.1, 0.1, 32));
    init(m, "w1b", kt_rand(KILN_F32, 4, KT_DIMS(8, 3, 1, 1), -0.5, 0.5, 33));
    init(m, "w2", kt_rand(KILN_F32, 4, KT_DIMS(8, 5, 3, 3), -0.4, 0.4, 34));
    init(m, "w3", kt_rand(KILN_F32, 4, KT_DIMS(8, 2, 3, 3), -0.4, 0.4, 35));
    init(m, "w4", kt_rand(KILN_F32, 4, KT_DIMS(4, 8, 1, 1), -0.4, 0.4, 36));
    kiln_node *n = NULL;
    node(m, "Conv", "stem", IN("x", "w1", "b1"), OUT("c1"), &n);
    kiln_node_set_ints(n, "pads", 4, KT_DIMS(1, 1, 1, 1));
    node(m, "Conv", "stem_b", IN("x", "w1b"), OUT("c1b"), NULL);
    node(m, "Relu", "relu", IN("c1"), OUT("r1"), NULL);
    node(m, "Conv", "conv2", IN("r1", "w2"), OUT("c2"), &n);
    kiln_node_set_ints(n, "pads", 4, KT_DIMS(1, 1, 1, 1));
    node(m, "Add", "add", IN("c2", "c1b"), OUT("a"), NULL);
    node(m, "Conv", "depthwise", IN("a", "w3"), OUT("c3"), &n);
    kiln_node_set_int(n, "group", 4);
    kiln_node_set_ints(n, "pads", 4, KT_DIMS(1, 1, 1, 1));
    node(m, "Conv", "aligned", IN("c3", "w4"), OUT("y"), NULL);
    kiln_model_add_output(m, "y");
    return finalize(m);
}

/* A Reshape to a fixed shape that only a batch of 4 fits: type inference with the batch
 * taken as 1 fails there and falls back to its table of dtypes. */
static kiln_model *fixed_reshape_model(kiln_context *ctx) {
    kiln_model *m = NULL;
    if (kiln_model_create(ctx, &m)) return NULL;
    kiln_model_add_input(m, "x", KILN_F32, 3, KT_DIMS(-1, 2, 2));
    init(m, "shape", kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(4, 4)));
    init(m, "w", kt_rand(KILN_F32, 2, KT_DIMS(4, 3), -1, 1, 41));
    node(m, "Reshape", "reshape", IN("x", "shape"), OUT("r"), NULL);
    node(m, "MatMul", "matmul", IN("r", "w"), OUT("mm"), NULL);
    node(m, "Relu", "relu", IN("mm"), OUT("h"), NULL);
    node(m, "Softmax", "softmax", IN("h"), OUT("y"), NULL);
    kiln_model_add_output(m, "y");
    return finalize(m);
}

/* softmax written out: exp(x - max(x)) / sum(...), for inputs around 1000 where f16's
 * spacing (0.5) would make exp's argument off by up to 0.25. */
static kiln_model *written_softmax_model(kiln_context *ctx) {
    kiln_model *m = NULL;
    if (kiln_model_create(ctx, &m)) return NULL;
    kiln_model_add_input(m, "x", KILN_F32, 2, KT_DIMS(-1, 8));
    init(m, "axis1", kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1)));
    node(m, "ReduceMax", "max", IN("x", "axis1"), OUT("mx"), NULL);
    node(m, "Sub", "shift", IN("x", "mx"), OUT("d"), NULL);
    node(m, "Exp", "exp", IN("d"), OUT("e"), NULL);
    node(m, "ReduceSum", "sum", IN("e", "axis1"), OUT("s"), NULL);
    node(m, "Div", "normalize", IN("e", "s"), OUT("y"), NULL);
    kiln_model_add_output(m, "y");
    return finalize(m);
}

/* F.normalize as torch.onnx exports it: x / Expand(Clip(ReduceL2(x), min = 1e-12)). 1e-12
 * is 0 in f16: an all-zero row (swin_v2's zero keys in its padded windows) gave 0 / 0. */
static kiln_model *normalize_model(kiln_context *ctx) {
    kiln_model *m = NULL;
    if (kiln_model_create(ctx, &m)) return NULL;
    kiln_model_add_input(m, "x", KILN_F32, 2, KT_DIMS(-1, 8));
    init(m, "axis1", kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1)));
    init(m, "eps", kt_make(KILN_F32, 0, KT_DIMS(), KT_VALS(1e-12)));
    node(m, "ReduceL2", "norm", IN("x", "axis1"), OUT("n"), NULL);
    node(m, "Clip", "clamp_min", IN("n", "eps"), OUT("c"), NULL);
    node(m, "Div", "normalize", IN("x", "c"), OUT("y"), NULL);
    kiln_model_add_output(m, "y");
    return finalize(m);
}

/* ------------------------------------------------------------------- running */

/* Run m with these options; outputs are copies (n_out of them). */
static kiln_status run(kiln_model *m, kiln_precision prec, kiln_device dev, int n_in, kiln_tensor **in, int n_out,
                       kiln_tensor **out) {
    kiln_session_options o = {.device = dev, .precision = prec};
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create(m, &o, &s);
    const kiln_tensor *res[8] = {0};
    if (!st) st = kiln_session_run(s, n_in, in, n_out, res);
    for (int k = 0; k < n_out; k++) out[k] = st ? NULL : kiln_tensor_clone(m->ctx, res[k]);
    if (st) printf("run: %s\n", kiln_context_message(m->ctx));
    kiln_session_free(s);
    return st;
}

/* |got - ref| <= atol + rtol |ref| with atol = rtol * rms(ref) (outputs of any magnitude
 * compare on their own scale); prints the errors and the share of the budget used. */
static void compare(const char *label, const kiln_tensor *got, const kiln_tensor *ref, double rtol) {
    CHECK(got && ref && got->dtype == ref->dtype && kiln_tensor_numel(got) == kiln_tensor_numel(ref),
          "%s: outputs differ in dtype or size", label);
    if (!got || !ref || kiln_tensor_numel(got) != kiln_tensor_numel(ref)) return;
    int64_t n = kiln_tensor_numel(ref);
    double ss = 0, maxref = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = kiln_get_f64(ref, i);
        ss += r * r;
        maxref = fmax(maxref, fabs(r));
    }
    double atol = rtol * sqrt(ss / (double)(n ? n : 1)), worst = 0, maxabs = 0, maxrel = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = kiln_get_f64(ref, i), g = kiln_get_f64(got, i), e = fabs(g - r);
        if (isnan(g) || isnan(r)) e = INFINITY;
        maxabs = fmax(maxabs, e);
        maxrel = fmax(maxrel, e / fmax(fabs(r), atol / rtol));
        worst = fmax(worst, e / (atol + rtol * fabs(r)));
    }
    printf("  %-28s max |err| %.3g (max |ref| %.3g), max rel err %.3g, %.0f%% of the budget (rtol %g)\n", label,
           maxabs, maxref, maxrel, 100 * worst, rtol);
    CHECK(worst <= 1, "%s: error over budget", label);
}

static void compare_exact_int(const char *label, const kiln_tensor *got, const kiln_tensor *ref, int64_t allowed) {
    int64_t n = kiln_tensor_numel(ref), diff = 0;
    for (int64_t i = 0; i < n; i++) diff += kiln_get_i64(got, i) != kiln_get_i64(ref, i);
    printf("  %-28s %lld of %lld differ\n", label, (long long)diff, (long long)n);
    CHECK(diff <= allowed, "%s: %lld differ", label, (long long)diff);
}

/* Each precision's outputs against fp32's. */
static void compare_precisions(kiln_model *m, const char *name, int n_in, kiln_tensor **in, int n_out,
                               const bool *is_int) {
    kiln_tensor *ref[8] = {0}, *got[8] = {0};
    printf("%s:\n", name);
    if (run(m, KILN_PRECISION_FP32, KILN_DEVICE_CPU, n_in, in, n_out, ref)) {
        fails++;
        return;
    }
    const kiln_precision precs[] = {KILN_PRECISION_FP16, KILN_PRECISION_BF16};
    for (int p = 0; p < 2; p++) {
        kiln_status st = run(m, precs[p], KILN_DEVICE_CPU, n_in, in, n_out, got);
        CHECK(st == KILN_OK, "%s %s session runs", name, p ? "bf16" : "fp16");
        for (int k = 0; k < n_out && !st; k++) {
            char label[64];
            snprintf(label, sizeof label, "%s output %d", p ? "bf16" : "fp16", k);
            CHECK(got[k]->dtype == ref[k]->dtype, "%s: output dtype %s, model's %s", label,
                  kiln_dtype_name(got[k]->dtype), kiln_dtype_name(ref[k]->dtype));
            if (is_int && is_int[k])
                compare_exact_int(label, got[k], ref[k], kiln_tensor_numel(ref[k]) / 10);
            else
                compare(label, got[k], ref[k], p ? 5e-2 : 1e-2);
            kiln_tensor_free(got[k]);
            got[k] = NULL;
        }
    }
    for (int k = 0; k < n_out; k++) kiln_tensor_free(ref[k]);
}

/* ------------------------------------------------------------ graph inspection */

typedef struct rewritten {
    kiln_model *m;
    kiln_tensor *vt; /* inferred dtypes of the rewritten graph */
} rewritten;

/* The graph checks that name nodes run without the passes that fuse or fold them away. */
#define NO_FUSION (KILN_PASS_FOLD_BN | KILN_PASS_FUSE_CONV | KILN_PASS_FUSE_ELTWISE)

static bool rewrite(kiln_model *src, kiln_device dev, kiln_precision prec, unsigned disabled, rewritten *r) {
    kiln_pass_options o = {.device = dev, .precision = prec, .disabled = disabled};
    r->m = NULL;
    r->vt = NULL;
    kiln_status st = kiln_passes_apply(src, &o, &r->m);
    CHECK(st == KILN_OK, "passes: %s", kiln_context_message(src->ctx));
    if (st) return false;
    st = kiln_pass_infer_types(r->m, &r->vt);
    CHECK(st == KILN_OK, "infer types: %s", kiln_context_message(src->ctx));
    return st == KILN_OK;
}

static void rewritten_free(rewritten *r) {
    free(r->vt);
    kiln_model_free(r->m);
}

static const kiln_node *find_node(const kiln_model *m, const char *name) {
    for (int i = 0; i < m->n_nodes; i++)
        if (strcmp(m->nodes[i].name, name) == 0) return &m->nodes[i];
    return NULL;
}

static int count_op(const kiln_model *m, const char *op) {
    int c = 0;
    for (int i = 0; i < m->n_nodes; i++) c += strcmp(m->nodes[i].op_type, op) == 0;
    return c;
}

/* dtype of input k / output k of the node named name (UNDEFINED if absent). */
static kiln_dtype in_dtype(const rewritten *r, const char *name, int k) {
    const kiln_node *n = find_node(r->m, name);
    return n && k < n->n_in && n->in[k] >= 0 ? r->vt[n->in[k]].dtype : KILN_DTYPE_UNDEFINED;
}
static kiln_dtype out_dtype(const rewritten *r, const char *name, int k) {
    const kiln_node *n = find_node(r->m, name);
    return n && k < n->n_out && n->out[k] >= 0 ? r->vt[n->out[k]].dtype : KILN_DTYPE_UNDEFINED;
}

static const kiln_node *producer(const rewritten *r, int v) {
    for (int i = 0; i < r->m->n_nodes; i++)
        for (int k = 0; k < r->m->nodes[i].n_out; k++)
            if (r->m->nodes[i].out[k] == v) return &r->m->nodes[i];
    return NULL;
}

#define CHECK_DT(got, want, what) \
    CHECK((got) == (want), "%s: %s, want %s", what, kiln_dtype_name(got), kiln_dtype_name(want))

/* Graph inputs and outputs keep their dtypes (the source's values carry none where the
 * batch is symbolic: its types are inferred the same way). */
static void check_boundaries(const rewritten *r, kiln_model *src) {
    kiln_tensor *svt = NULL;
    CHECK(kiln_pass_infer_types(src, &svt) == KILN_OK, "infer source types");
    if (!svt) return;
    for (int i = 0; i < src->n_inputs; i++)
        CHECK_DT(r->m->values[r->m->inputs[i]].dtype, src->values[src->inputs[i]].dtype, "graph input");
    for (int j = 0; j < src->n_outputs; j++) {
        CHECK(strcmp(r->m->values[r->m->outputs[j]].name, src->values[src->outputs[j]].name) == 0, "output name");
        CHECK_DT(r->vt[r->m->outputs[j]].dtype, svt[src->outputs[j]].dtype, "graph output");
    }
    free(svt);
}

/* With every pass on (fused ops or not): convolutions, matrix products and fused kernels
 * compute in low precision, Softmax in f32; at least min_low values are low. */
static void check_compute_low(const rewritten *r, kiln_dtype low, int min_low) {
    static const char *const compute[] = {"Conv", "Gemm", "MatMul", "FusedConv", "FusedGemm", "FusedElementwise"};
    int n_low = 0, n_compute = 0;
    for (int v = 0; v < r->m->n_values; v++) n_low += r->vt[v].dtype == low;
    CHECK(n_low >= min_low, "only %d %s values", n_low, kiln_dtype_name(low));
    for (int i = 0; i < r->m->n_nodes; i++) {
        const kiln_node *n = &r->m->nodes[i];
        for (size_t k = 0; k < sizeof compute / sizeof compute[0]; k++)
            if (strcmp(n->op_type, compute[k]) == 0) {
                n_compute++;
                CHECK_DT(r->vt[n->out[0]].dtype, low, n->op_type);
            }
        if (strcmp(n->op_type, "Softmax") == 0) CHECK_DT(r->vt[n->in[0]].dtype, KILN_F32, "Softmax input");
    }
    CHECK(n_compute > 0, "no compute nodes found");
}

static void check_cnn_graph(kiln_model *m, kiln_precision prec) {
    kiln_dtype low = prec == KILN_PRECISION_FP16 ? KILN_F16 : KILN_BF16;
    rewritten r;
    if (!rewrite(m, KILN_DEVICE_CPU, prec, NO_FUSION, &r)) return;
    check_boundaries(&r, m);
    CHECK_DT(in_dtype(&r, "conv1", 0), low, "conv1 X");
    CHECK_DT(in_dtype(&r, "conv1", 1), low, "conv1 W");
    CHECK_DT(in_dtype(&r, "conv2", 2), low, "conv2 B");
    CHECK_DT(in_dtype(&r, "bn1", 0), low, "bn X");
    CHECK_DT(in_dtype(&r, "bn1", 1), KILN_F32, "bn scale stays f32");
    CHECK_DT(in_dtype(&r, "bn1", 4), KILN_F32, "bn var stays f32");
    CHECK_DT(out_dtype(&r, "residual", 0), low, "residual add");
    CHECK_DT(out_dtype(&r, "flatten", 0), low, "flatten follows its input");
    CHECK_DT(out_dtype(&r, "fc", 0), low, "gemm");
    CHECK_DT(in_dtype(&r, "softmax", 0), KILN_F32, "softmax reads f32");
    CHECK_DT(out_dtype(&r, "softmax", 0), KILN_F32, "softmax computes f32");
    const kiln_node *sm = find_node(r.m, "softmax");
    const kiln_node *pc = sm ? producer(&r, sm->in[0]) : NULL;
    CHECK(pc && strcmp(pc->op_type, "Cast") == 0, "softmax's input comes from a Cast");
    /* x -> Cast; logits -> Cast to f32 (graph output) shared by softmax and the output */
    CHECK(count_op(r.m, "Cast") == 2, "%d Casts, want 2 (x in, logits out)", count_op(r.m, "Cast"));
    /* w1 has no f32 reader left: only its converted copy remains */
    int w1 = kiln_model_find_value(r.m, "w1");
    CHECK(w1 >= 0 && !r.m->values[w1].init, "the f32 w1 is dropped");
    rewritten_free(&r);
}

static void check_shapes_graph(kiln_model *m, kiln_precision prec) {
    kiln_dtype low = prec == KILN_PRECISION_FP16 ? KILN_F16 : KILN_BF16;
    rewritten r;
    if (!rewrite(m, KILN_DEVICE_CPU, prec, NO_FUSION, &r)) return;
    check_boundaries(&r, m);
    /* the shape computation is untouched */
    const kiln_node *n = find_node(r.m, "hw_float");
    CHECK(n && kiln_attr_int(n, "to", 0) == KILN_F32, "the shape Cast stays FLOAT");
    CHECK_DT(out_dtype(&r, "hw_times_two", 0), KILN_F32, "shape Mul");
    n = find_node(r.m, "two");
    CHECK(n && kiln_node_attr(n, "value_float"), "constant of the shape computation untouched");
    /* sources feeding compute are retargeted */
    n = find_node(r.m, "mask_float");
    CHECK(n && kiln_attr_int(n, "to", 0) == low, "mask Cast retargeted");
    n = find_node(r.m, "quarter");
    const kiln_attr *a = n ? kiln_node_attr(n, "value") : NULL;
    CHECK(a && a->t && a->t->dtype == low, "ConstantOfShape value converted");
    n = find_node(r.m, "k");
    a = n ? kiln_node_attr(n, "value") : NULL;
    CHECK(a && a->t && a->t->dtype == low && a->t->ndim == 1 && a->t->dims[0] == 1, "Constant k converted");
    n = find_node(r.m, "kk");
    CHECK(n && kiln_node_attr(n, "value_floats"), "Constant kk (read by a constant ReduceSum) untouched");
    CHECK_DT(out_dtype(&r, "sum_kk", 0), KILN_F32, "constant ReduceSum");
    CHECK_DT(in_dtype(&r, "plus_skk", 1), low, "compute reads the constant cast");
    CHECK_DT(in_dtype(&r, "minus_kk0", 1), low, "compute reads the constant slice cast");
    CHECK_DT(in_dtype(&r, "up", 0), low, "Resize (compute) reads the graph input cast");
    CHECK_DT(out_dtype(&r, "up", 0), low, "Resize computes low");
    CHECK_DT(out_dtype(&r, "conv", 0), low, "conv");
    CHECK_DT(in_dtype(&r, "shape_cv", 0), low, "Shape reads the low value (no Cast for it)");
    CHECK_DT(out_dtype(&r, "masked", 0), low, "masked");
    CHECK_DT(out_dtype(&r, "flatten", 0), low, "reshape follows");
    /* fp32 islands */
    /* LayerNormalization computes low (statistics in f32 inside every kernel); Scale and B
     * are low too, as ONNX's one type T for X, Scale and B asks */
    CHECK_DT(in_dtype(&r, "ln", 0), low, "LayerNormalization X");
    CHECK_DT(out_dtype(&r, "ln", 0), low, "LayerNormalization Y");
    CHECK_DT(in_dtype(&r, "ln", 1), low, "LayerNormalization scale");
    CHECK_DT(in_dtype(&r, "times_g", 1), low, "g read low by the Mul");
    const kiln_node *lnn = find_node(r.m, "ln"), *mul = find_node(r.m, "times_g");
    CHECK(lnn && mul && lnn->in[1] == mul->in[1], "the Mul and LayerNormalization share g's one low copy");
    CHECK_DT(in_dtype(&r, "exp", 0), KILN_F32, "Exp feeding ReduceSum reads f32");
    CHECK_DT(out_dtype(&r, "exp", 0), KILN_F32, "Exp feeding ReduceSum stays f32");
    CHECK_DT(out_dtype(&r, "scaled", 0), KILN_F32, "the Mul computing only Exp's argument stays f32");
    CHECK_DT(in_dtype(&r, "scaled", 0), KILN_F32, "... reading d through a Cast");
    CHECK_DT(out_dtype(&r, "sum", 0), KILN_F32, "ReduceSum");
    CHECK_DT(out_dtype(&r, "normalize", 0), low, "Div");
    CHECK_DT(in_dtype(&r, "argmax", 0), low, "ArgMax reads what it gets");
    CHECK_DT(out_dtype(&r, "argmax", 0), KILN_I64, "ArgMax");
    rewritten_free(&r);
}

/* ------------------------------------------------------------------- tests */

static void test_tiny_cnn(kiln_context *ctx, const char *srcdir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/tiny_cnn.onnx", srcdir);
    kiln_model *m = NULL;
    kiln_status st = kiln_model_load_onnx(ctx, path, &m);
    CHECK(st == KILN_OK, "load %s: %s", path, kiln_context_message(ctx));
    if (st) return;
    kiln_tensor *x = kt_rand(KILN_F32, 4, KT_DIMS(4, 3, 32, 32), -1, 1, 1);
    compare_precisions(m, "tiny_cnn.onnx (probabilities)", 1, &x, 1, NULL);
    rewritten r;
    if (rewrite(m, KILN_DEVICE_CPU, KILN_PRECISION_FP16, 0, &r)) {
        check_boundaries(&r, m);
        check_compute_low(&r, KILN_F16, 7);
        /* the rewritten model runs as it is (an fp32 session of it) */
        kiln_tensor *ref = NULL, *got = NULL;
        if (!run(m, KILN_PRECISION_FP16, KILN_DEVICE_CPU, 1, &x, 1, &ref) &&
            !run(r.m, KILN_PRECISION_FP32, KILN_DEVICE_CPU, 1, &x, 1, &got))
            compare("rewritten model, run as is", got, ref, 1e-6);
        kiln_tensor_free(ref);
        kiln_tensor_free(got);
        rewritten_free(&r);
    }
    kiln_tensor_free(x);
    kiln_model_free(m);
}

static void test_cnn(kiln_context *ctx) {
    kiln_model *m = cnn_model(ctx);
    if (!m) return;
    kiln_tensor *x = kt_rand(KILN_F32, 4, KT_DIMS(3, 3, 16, 16), -2, 2, 2);
    compare_precisions(m, "conv-bn-relu-pool-conv+residual-gap-gemm-softmax", 1, &x, 2, NULL);
    check_cnn_graph(m, KILN_PRECISION_FP16);
    check_cnn_graph(m, KILN_PRECISION_BF16);
    rewritten r;
    if (rewrite(m, KILN_DEVICE_CPU, KILN_PRECISION_BF16, 0, &r)) {
        check_boundaries(&r, m);
        check_compute_low(&r, KILN_BF16, 6);
        rewritten_free(&r);
    }
    kiln_tensor_free(x);
    kiln_model_free(m);
}

static void test_shapes(kiln_context *ctx) {
    kiln_model *m = shapes_model(ctx);
    if (!m) return;
    kiln_tensor *in[2] = {kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 6, 6), -1, 1, 3),
                          kt_make(KILN_I64, 4, KT_DIMS(2, 1, 1, 1), KT_VALS(1, 3))};
    const bool is_int[3] = {false, false, true};
    compare_precisions(m, "shape computations, Cast, ConstantOfShape", 2, in, 3, is_int);
    check_shapes_graph(m, KILN_PRECISION_FP16);
    check_shapes_graph(m, KILN_PRECISION_BF16);
    kiln_tensor_free(in[0]);
    kiln_tensor_free(in[1]);
    kiln_model_free(m);
}

static void test_fixed_reshape(kiln_context *ctx) {
    kiln_model *m = fixed_reshape_model(ctx);
    if (!m) return;
    kiln_tensor *x = kt_rand(KILN_F32, 3, KT_DIMS(4, 2, 2), -2, 2, 5);
    compare_precisions(m, "reshape to a fixed batch", 1, &x, 1, NULL);
    rewritten r;
    if (rewrite(m, KILN_DEVICE_CPU, KILN_PRECISION_FP16, NO_FUSION, &r)) {
        check_boundaries(&r, m);
        CHECK_DT(r.vt[kiln_model_find_value(r.m, "r")].dtype, KILN_F16, "the Reshape's output (inferred by the table)");
        CHECK_DT(in_dtype(&r, "reshape", 0), KILN_F16, "x is cast before the Reshape (its reader computes low)");
        CHECK_DT(in_dtype(&r, "softmax", 0), KILN_F32, "softmax input");
        rewritten_free(&r);
    }
    kiln_tensor_free(x);
    kiln_model_free(m);
}

static void test_written_softmax(kiln_context *ctx) {
    kiln_model *m = written_softmax_model(ctx);
    if (!m) return;
    kiln_tensor *x = kt_rand(KILN_F32, 2, KT_DIMS(16, 8), 1000, 1004, 6);
    compare_precisions(m, "softmax written out, x ~ 1000", 1, &x, 1, NULL);
    rewritten r;
    if (rewrite(m, KILN_DEVICE_CPU, KILN_PRECISION_FP16, NO_FUSION, &r)) {
        CHECK_DT(in_dtype(&r, "shift", 0), KILN_F32, "x - max reads x in f32");
        CHECK_DT(out_dtype(&r, "exp", 0), KILN_F32, "exp");
        rewritten_free(&r);
    }
    /* the same with fusion on: whatever computes Exp's argument reads x in f32 */
    if (rewrite(m, KILN_DEVICE_CPU, KILN_PRECISION_FP16, 0, &r)) {
        int x_low = 0;
        for (int i = 0; i < r.m->n_nodes; i++) {
            const kiln_node *n = &r.m->nodes[i];
            if (strcmp(n->op_type, "Cast") == 0 && n->in[0] == r.m->inputs[0]) {
                for (int j = 0; j < r.m->n_nodes; j++)
                    for (int k = 0; k < r.m->nodes[j].n_in; k++)
                        x_low += r.m->nodes[j].in[k] == n->out[0] && strcmp(r.m->nodes[j].op_type, "ReduceMax") != 0;
            }
        }
        CHECK(x_low == 0, "%d nodes other than ReduceMax read x cast to f16", x_low);
        rewritten_free(&r);
    }
    kiln_tensor_free(x);
    kiln_model_free(m);
}

/* Conv(4 -> 3, 1x1) then a bilinear Resize by `scale` on H and W into the output y; with
 * `read`, a Relu reads the Resize's output too (into a second output z). */
static kiln_model *resize_head_model(kiln_context *ctx, float scale, bool read) {
    kiln_model *m = NULL;
    if (kiln_model_create(ctx, &m)) return NULL;
    kiln_model_add_input(m, "x", KILN_F32, 4, KT_DIMS(-1, 4, 8, 8));
    init(m, "w", kt_rand(KILN_F32, 4, KT_DIMS(3, 4, 1, 1), -0.5, 0.5, 51));
    init(m, "scales", kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, scale, scale)));
    kiln_node *nd = NULL;
    node(m, "Conv", "conv", IN("x", "w"), OUT("c"), NULL);
    node(m, "Resize", "resize", IN("c", "", "scales"), OUT("y"), &nd);
    if (nd) kiln_node_set_string(nd, "mode", "linear");
    kiln_model_add_output(m, "y");
    if (read) {
        node(m, "Relu", "relu", IN("y"), OUT("z"), NULL);
        kiln_model_add_output(m, "z");
    }
    return finalize(m);
}

/* A Resize that grows its input into a graph output nothing reads computes in f32 from its
 * input cast up (KILN_PREC_GROWS): no Cast of the large output; one that shrinks, or whose
 * output a node reads, stays low. */
static void test_resize_head(kiln_context *ctx) {
    static const struct {
        float scale;
        bool read, f32;
        const char *label;
    } cases[] = {{4, false, true, "Resize x4 into the output: f32 from its input cast up"},
                 {0.5f, false, false, "Resize x0.5 into the output: low, its output cast"},
                 {4, true, false, "Resize x4 read by a Relu too: low"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_model *m = resize_head_model(ctx, cases[i].scale, cases[i].read);
        if (!m) continue;
        kiln_tensor *x = kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 8, 8), -2, 2, 52);
        compare_precisions(m, cases[i].label, 1, &x, cases[i].read ? 2 : 1, NULL);
        rewritten r;
        if (rewrite(m, KILN_DEVICE_CPU, KILN_PRECISION_FP16, NO_FUSION, &r)) {
            check_boundaries(&r, m);
            const kiln_dtype want = cases[i].f32 ? KILN_F32 : KILN_F16;
            CHECK_DT(in_dtype(&r, "resize", 0), want, cases[i].label);
            CHECK_DT(out_dtype(&r, "resize", 0), want, cases[i].label);
            CHECK_DT(out_dtype(&r, "conv", 0), KILN_F16, "the Conv before it computes low");
            rewritten_free(&r);
        }
        kiln_tensor_free(x);
        kiln_model_free(m);
    }
}

static void test_normalize_eps(kiln_context *ctx) {
    kiln_model *m = normalize_model(ctx);
    if (!m) return;
    kiln_tensor *x = kt_rand(KILN_F32, 2, KT_DIMS(6, 8), -2, 2, 8);
    if (x)
        for (int k = 0; k < 8; k++) ((float *)x->data)[2 * 8 + k] = 0.0f; /* row 2: all zero */
    compare_precisions(m, "normalize, eps 1e-12 (0 in f16), a zero row", 1, &x, 1, NULL);
    kiln_tensor *y = NULL;
    if (x && run(m, KILN_PRECISION_FP16, KILN_DEVICE_CPU, 1, &x, 1, &y) == KILN_OK && y) {
        for (int k = 0; k < 8; k++)
            CHECK(kiln_get_f64(y, 2 * 8 + k) == 0.0, "fp16: the zero row's element %d is %g, not 0", k,
                  kiln_get_f64(y, 2 * 8 + k));
    }
    kiln_tensor_free(y);
    /* unfused (the CUDA pipeline's Clip reads its bound as an f16 initializer): the bound
     * converted to f16 is the smallest subnormal, not 0 */
    const kiln_precision precs[2] = {KILN_PRECISION_FP16, KILN_PRECISION_BF16};
    for (int p = 0; p < 2; p++) {
        rewritten r;
        if (!rewrite(m, KILN_DEVICE_CPU, precs[p], NO_FUSION, &r)) continue;
        const kiln_node *clip = find_node(r.m, "clamp_min");
        const kiln_tensor *eps = clip && clip->n_in > 1 && clip->in[1] >= 0 ? r.m->values[clip->in[1]].init : NULL;
        CHECK(eps && eps->dtype != KILN_F32 && kiln_get_f64(eps, 0) > 0,
              "%s: Clip's bound 1e-12 is %s %g, not a positive low-precision constant", p ? "bf16" : "fp16",
              eps ? kiln_dtype_name(eps->dtype) : "missing", eps ? kiln_get_f64(eps, 0) : 0.0);
        rewritten_free(&r);
    }
    kiln_tensor_free(x);
    kiln_model_free(m);
}

static void test_pad_channels(kiln_context *ctx) {
    kiln_model *m = pad_model(ctx);
    if (!m) return;
    kiln_tensor *x = kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 10, 10), -1, 1, 4);
    kiln_tensor *ref = NULL, *got = NULL;
    printf("pad channels:\n");
    CHECK(run(m, KILN_PRECISION_FP32, KILN_DEVICE_CPU, 1, &x, 1, &ref) == KILN_OK, "fp32 run");
    /* the pass alone (as a CUDA fp16 session would run it), on a clone: exact function */
    kiln_model *c = NULL;
    kiln_pass_options o = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP16};
    bool changed = false;
    CHECK(kiln_model_clone(m, &c) == KILN_OK, "clone");
    CHECK(c && kiln_pass_pad_channels(c, &o, &changed) == KILN_OK && changed, "pad pass: %s", kiln_context_message(ctx));
    CHECK(c && kiln_model_finalize(c) == KILN_OK, "finalize: %s", kiln_context_message(ctx));
    if (c && c->finalized) {
        CHECK(count_op(c, "Pad") == 2, "%d Pads: want one for x (shared by both stems), one for conv2's input",
              count_op(c, "Pad"));
        const char *names[] = {"stem", "stem_b", "conv2", "depthwise", "aligned"};
        const int64_t want_c[] = {4, 4, 8, 2, 8}; /* 3 -> 4 (the stems), 5 -> 8 */
        for (int i = 0; i < 5; i++) {
            const kiln_node *n = NULL;
            for (int j = 0; j < c->n_nodes; j++)
                if (strcmp(c->nodes[j].name, names[i]) == 0) n = &c->nodes[j];
            const kiln_tensor *w = n ? c->values[n->in[1]].init : NULL;
            CHECK(w && w->dims[1] == want_c[i], "%s: W has %lld input channels, want %lld", names[i],
                  w ? (long long)w->dims[1] : -1LL, (long long)want_c[i]);
            /* the promise that lets a backend convolve the real channels alone */
            const int64_t used = n ? kiln_attr_int(n, "used_channels", 0) : -1, want_used = i < 2 ? 3 : i == 2 ? 5 : 0;
            CHECK(used == want_used, "%s: used_channels %lld, want %lld", names[i], (long long)used,
                  (long long)want_used);
        }
        CHECK(kiln_model_find_value(c, "w1") >= 0 && !c->values[kiln_model_find_value(c, "w1")].init,
              "the unpadded w1 is dropped");
        if (ref && !run(c, KILN_PRECISION_FP32, KILN_DEVICE_CPU, 1, &x, 1, &got)) compare("padded, fp32", got, ref, 1e-6);
        kiln_tensor_free(got);
        got = NULL;
    }
    kiln_model_free(c);
    /* every pass a CUDA fp16/bf16 session applies, run on the CPU: without the layout pass
     * (the Pads and the Cast before them), then with it, which folds x's channel Pad (and
     * Cast) into the kiln.ToNHWC reading it; conv2's input Pad (of relu's NHWC output)
     * runs NHWC itself, with no conversion on either side */
    /* (with the stem's output widened, KILN_PAD_WIDEN=0 off: conv2 reads 8 channels and no
     * Pad is left to check; that case is checked after the loop) */
    setenv("KILN_PAD_WIDEN", "0", 1);
    const kiln_precision precs[] = {KILN_PRECISION_FP16, KILN_PRECISION_BF16};
    for (int p = 0; p < 2; p++)
        for (int layout = 0; layout < 2; layout++) {
            rewritten r;
            if (!rewrite(m, KILN_DEVICE_CUDA, precs[p], layout ? 0 : KILN_PASS_NHWC, &r)) continue;
            const kiln_dtype low = p ? KILN_BF16 : KILN_F16;
            char label[64];
            snprintf(label, sizeof label, "padded, %s%s", p ? "bf16" : "fp16", layout ? ", NHWC" : "");
            CHECK(count_op(r.m, "Pad") == (layout ? 1 : 2), "%s: %d Pads", label, count_op(r.m, "Pad"));
            if (layout) {
                const kiln_node *c2 = find_node(r.m, "conv2");
                const kiln_node *pd = c2 ? producer(&r, c2->in[0]) : NULL;
                CHECK(pd && strcmp(pd->op_type, "Pad") == 0 && r.m->values[pd->out[0]].format == KILN_FORMAT_NHWC &&
                          r.m->values[pd->in[0]].format == KILN_FORMAT_NHWC,
                      "%s: conv2 reads an NHWC Pad of an NHWC input", label);
            }
            CHECK_DT(in_dtype(&r, "stem", 0), low, "padded stem input");
            if (!layout) {
                CHECK_DT(in_dtype(&r, "pad_channels_x", 0), low, "x is cast before the Pad");
            } else {
                const kiln_node *stem = find_node(r.m, "stem");
                const kiln_node *cv = stem ? producer(&r, stem->in[0]) : NULL;
                CHECK(cv && strcmp(cv->op_type, "ToNHWC") == 0 && cv->in[0] == kiln_model_find_value(r.m, "x") &&
                          kiln_attr_int(cv, "to", 0) == (int64_t)low && kiln_attr_int(cv, "zero_channels", 0) == 1,
                      "%s: the stem reads x through one ToNHWC (to=%d, zero_channels=1)", label, (int)low);
            }
            if (ref && !run(r.m, KILN_PRECISION_FP32, KILN_DEVICE_CPU, 1, &x, 1, &got))
                compare(label, got, ref, p ? 5e-2 : 1e-2);
            kiln_tensor_free(got);
            got = NULL;
            rewritten_free(&r);
        }
    unsetenv("KILN_PAD_WIDEN");
    /* widened (the default): the fused stem + Relu writes 8 channels (zero rows), conv2 reads
     * them with 8 weight channels (used_channels 5) and no Pad; x's Pad folds into ToNHWC.
     * Only where the device has kiln.FusedConv (a CUDA build): elsewhere nothing is fused */
    const kiln_pass_options cuda = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP16};
    for (int layout = 0; layout < 2 && kiln_pass_device_has(&cuda, "FusedConv"); layout++) {
        rewritten r;
        if (!rewrite(m, KILN_DEVICE_CUDA, KILN_PRECISION_FP16, layout ? 0 : KILN_PASS_NHWC, &r)) continue;
        char label[64];
        snprintf(label, sizeof label, "widened, fp16%s", layout ? ", NHWC" : "");
        const kiln_node *c2 = find_node(r.m, "conv2");
        const kiln_tensor *w2 = c2 ? r.m->values[c2->in[1]].init : NULL;
        const kiln_node *pd = c2 ? producer(&r, c2->in[0]) : NULL;
        CHECK(count_op(r.m, "Pad") == (layout ? 0 : 1) && w2 && w2->dims[1] == 8 &&
                  kiln_attr_int(c2, "used_channels", 0) == 5 && pd && strcmp(pd->op_type, "Pad") != 0,
              "%s: %d Pads, conv2 W %lld channels, used_channels %lld, reads a %s", label, count_op(r.m, "Pad"),
              w2 ? (long long)w2->dims[1] : -1LL, c2 ? (long long)kiln_attr_int(c2, "used_channels", 0) : -1LL,
              pd ? pd->op_type : "graph input");
        if (ref && !run(r.m, KILN_PRECISION_FP32, KILN_DEVICE_CPU, 1, &x, 1, &got)) compare(label, got, ref, 1e-2);
        kiln_tensor_free(got);
        got = NULL;
        rewritten_free(&r);
    }
    /* the CPU and fp32 CUDA plans do not pad */
    kiln_pass_options cpu = {.device = KILN_DEVICE_CPU, .precision = KILN_PRECISION_FP16};
    kiln_pass_options f32 = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP32};
    kiln_pass_options off = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP16,
                             .disabled = KILN_PASS_PAD_CHANNELS};
    const kiln_pass_options *none[] = {&cpu, &f32, &off};
    for (int i = 0; i < 3; i++) {
        kiln_model *q = NULL;
        CHECK(kiln_passes_apply(m, none[i], &q) == KILN_OK && count_op(q, "Pad") == 0, "no padding (case %d)", i);
        kiln_model_free(q);
    }
    kiln_tensor_free(ref);
    kiln_tensor_free(x);
    kiln_model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_precision <source dir>\n");
        return 2;
    }
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return 1;
    test_tiny_cnn(ctx, argv[1]);
    test_cnn(ctx);
    test_shapes(ctx);
    test_fixed_reshape(ctx);
    test_written_softmax(ctx);
    test_normalize_eps(ctx);
    test_resize_head(ctx);
    test_pad_channels(ctx);
    kiln_context_free(ctx);
    if (fails) printf("%d check(s) failed\n", fails);
    else printf("all precision checks passed\n");
    return fails ? 1 : 0;
}
