/* test_layout.c — the layout pass (src/passes/layout.c) on builder graphs, on the CPU.
 *
 * For a ResNet-like and a MobileNet-like network and a few boundary cases: the pass,
 * asked for a CUDA plan, inserts exactly the conversions expected (kiln.ToNHWC /
 * kiln.ToNCHW nodes), marks the values expected NHWC, keeps output names, and the
 * rewritten graph computes the same function — bit for bit on the CPU backend, where the
 * conversions are copies. Device-style plans (host_memory false) carry the formats into
 * their tensors; host plans stay NCHW. After the precision and pad-channels passes the
 * input's Cast and channel Pad are folded into its kiln.ToNHWC (to, zero_channels), and
 * stay where another node reads their output. mnist-net's training graph (forward and
 * backward): the convolution chain and its gradients NHWC with two conversions (conv2's
 * weight and its gradient; training Dropout reads the NHWC pool output, its gradient
 * writes NHWC), the same loss and gradients bit for bit; a kiln.DropoutGrad writes NHWC
 * only where a conversion is its output's only reader. Exits non-zero on any failure. */
#include "core/optest.h"
#include "core/backend.h"
#include "core/plan.h"
#include "passes/passes.h"
#include "train/trainer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
static kiln_context *ctx;
static kiln_model *M;
static uint64_t seed = 1;

#define CHECK(cond, ...)                                  \
    do {                                                  \
        if (!(cond)) {                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);   \
            printf(__VA_ARGS__);                          \
            printf("\n");                                 \
            fails++;                                      \
        }                                                 \
    } while (0)

#include "train_graph.h"

/* ------------------------------------------------------------ graph building */

static void begin(void) {
    M = NULL;
    CHECK(kiln_model_create(ctx, &M) == KILN_OK, "create");
}

static void input(const char *name, int64_t n, int64_t c, int64_t h, int64_t w) {
    CHECK(kiln_model_add_input(M, name, KILN_F32, 4, (int64_t[]){n, c, h, w}) == KILN_OK, "input %s", name);
}

static void init_rand(const char *name, int ndim, const int64_t *dims, double lo, double hi) {
    kiln_tensor *t = kt_rand(KILN_F32, ndim, dims, lo, hi, seed++);
    CHECK(t && kiln_model_add_initializer(M, name, t) == KILN_OK, "initializer %s: %s", name,
          kiln_context_message(ctx));
    kiln_tensor_free(t);
}

static void init_vals(const char *name, kiln_dtype dt, int ndim, const int64_t *dims, const double *v) {
    kiln_tensor *t = kt_make(dt, ndim, dims, v);
    CHECK(t && kiln_model_add_initializer(M, name, t) == KILN_OK, "initializer %s", name);
    kiln_tensor_free(t);
}

/* A node: inputs as "a,b,,c" (empty: missing), one output, attributes as optest text. */
static void add(const char *op, const char *ins, const char *out, const char *attrs) {
    char buf[256], *names[8];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", ins);
    for (char *p = buf; n < 8;) {
        names[n++] = p;
        char *comma = strchr(p, ',');
        if (!comma) break;
        *comma = '\0';
        p = comma + 1;
    }
    kiln_node *node = NULL;
    const char *outs[1] = {out};
    CHECK(kiln_model_add_node(M, op, out, n, (const char *const *)names, 1, outs, &node) == KILN_OK,
          "add %s: %s", op, kiln_context_message(ctx));
    kiln_attr *a = NULL;
    int na = 0;
    CHECK(kiln_attrs_parse(ctx, attrs, &a, &na) == KILN_OK, "attrs %s", attrs);
    for (int i = 0; node && i < na; i++) {
        switch (a[i].type) {
        case KILN_ATTR_INT: kiln_node_set_int(node, a[i].name, a[i].i); break;
        case KILN_ATTR_FLOAT: kiln_node_set_float(node, a[i].name, a[i].f); break;
        case KILN_ATTR_STRING: kiln_node_set_string(node, a[i].name, a[i].s); break;
        case KILN_ATTR_INTS: kiln_node_set_ints(node, a[i].name, a[i].n, a[i].ints); break;
        case KILN_ATTR_FLOATS: kiln_node_set_floats(node, a[i].name, a[i].n, a[i].floats); break;
        default: break;
        }
    }
    for (int i = 0; i < na; i++) kiln_attr_clear(&a[i]);
    free(a);
}

/* conv (+ BN) (+ activation) named after `out`: weights (m, c/group, k, k). */
static void conv(const char *x, const char *out, int64_t c, int64_t m, int64_t k, int64_t stride,
                 int64_t group, bool bn, const char *act) {
    char w[64], cv[64], bnv[64], ins[512], attrs[128];
    snprintf(w, sizeof w, "%s.w", out);
    init_rand(w, 4, (int64_t[]){m, c / group, k, k}, -0.5, 0.5);
    const bool last = !bn && !act;
    snprintf(cv, sizeof cv, last ? "%s" : "%s.conv", out);
    snprintf(ins, sizeof ins, "%s,%s", x, w);
    snprintf(attrs, sizeof attrs, "pads=[%lld,%lld,%lld,%lld];strides=[%lld,%lld];group=%lld", (long long)(k / 2),
             (long long)(k / 2), (long long)(k / 2), (long long)(k / 2), (long long)stride, (long long)stride,
             (long long)group);
    add("Conv", ins, cv, attrs);
    const char *cur = cv;
    if (bn) {
        const char *suffix[4] = {"s", "b", "m", "v"};
        char p[4][64];
        for (int i = 0; i < 4; i++) {
            snprintf(p[i], sizeof p[i], "%s.bn%s", out, suffix[i]);
            init_rand(p[i], 1, (int64_t[]){m}, i == 3 ? 0.5 : -1, i == 3 ? 2 : 1);
        }
        snprintf(bnv, sizeof bnv, act ? "%s.bn" : "%s", out);
        snprintf(ins, sizeof ins, "%s,%s,%s,%s,%s", cv, p[0], p[1], p[2], p[3]);
        add("BatchNormalization", ins, bnv, "");
        cur = bnv;
    }
    if (act && strcmp(act, "Relu") == 0) add("Relu", cur, out, "");
    if (act && strcmp(act, "Relu6") == 0) {
        snprintf(ins, sizeof ins, "%s,zero,six", cur);
        add("Clip", ins, out, "");
    }
}

static void finalize(const char *const *outputs, int n) {
    for (int i = 0; i < n; i++) CHECK(kiln_model_add_output(M, outputs[i]) == KILN_OK, "output %s", outputs[i]);
    CHECK(kiln_model_finalize(M) == KILN_OK, "finalize: %s", kiln_context_message(ctx));
}

/* ---------------------------------------------------------------- checking */

typedef struct expect {
    int to_nhwc, to_nchw;
    const char *nhwc[8];  /* values that must be NHWC (NULL-terminated) */
    const char *nchw[8];  /* values that must stay NCHW */
} expect;

static int count_op(const kiln_model *m, const char *op) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++)
        n += strcmp(m->nodes[i].op_type, op) == 0 && strcmp(m->nodes[i].domain, "kiln") == 0;
    return n;
}

static kiln_format format_of(const kiln_model *m, const char *name) {
    int v = kiln_model_find_value(m, name);
    return v >= 0 ? m->values[v].format : (kiln_format)-1;
}

/* Run m on the CPU with inputs of batch `batch`; outputs copied into out[]. */
/* m on the CPU with the switchable passes in `disable` off (~0u: the graph as it is), on
 * random inputs of first dim `batch`; outputs copied into out[0..n_out). */
static bool run_cpu_opts(kiln_model *m, int64_t batch, unsigned disable, kiln_tensor **out, int n_out) {
    kiln_session_options so = KILN_SESSION_OPTIONS_INIT;
    so.disable_passes = disable;
    kiln_session *s = NULL;
    kiln_tensor *in[4] = {0};
    bool ok = m->n_inputs <= 4 && kiln_session_create(m, &so, &s) == KILN_OK;
    CHECK(ok, "session: %s", kiln_context_message(ctx));
    for (int i = 0; ok && i < m->n_inputs; i++) {
        const kiln_value *v = &m->values[m->inputs[i]];
        int64_t dims[KILN_MAX_DIMS];
        for (int d = 0; d < v->ndim; d++) dims[d] = v->dims[d] < 0 ? batch : v->dims[d];
        in[i] = kt_rand(v->dtype, v->ndim, dims, -1, 1, 777 + (uint64_t)i);
    }
    const kiln_tensor *o[8] = {0};
    ok = ok && kiln_session_run(s, m->n_inputs, in, n_out, o) == KILN_OK;
    CHECK(ok, "run: %s", kiln_context_message(ctx));
    for (int j = 0; ok && j < n_out; j++) out[j] = kiln_tensor_clone(ctx, o[j]);
    for (int i = 0; i < 4; i++) kiln_tensor_free(in[i]);
    kiln_session_free(s);
    return ok;
}

static bool run_cpu(kiln_model *m, int64_t batch, kiln_tensor **out, int n_out) {
    return run_cpu_opts(m, batch, 0, out, n_out);
}

/* The pass (with `also` the only other switchable passes on, and the precision pass,
 * which always runs) on M for a CUDA plan: conversions, formats, output names, the same
 * function on the CPU as without the layout pass; then device- and host-style plans of
 * the result. */
static void check_graph_ex(const char *label, const expect *e, int64_t batch, kiln_precision prec, unsigned also) {
    kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = prec,
                            .disabled = ~(unsigned)(KILN_PASS_NHWC | also)};
    kiln_pass_options base = po;
    base.disabled |= KILN_PASS_NHWC;
    kiln_model *opt = NULL, *ref = NULL;
    printf("-- %s\n", label);
    if (kiln_passes_apply(M, &po, &opt) != KILN_OK || kiln_passes_apply(M, &base, &ref) != KILN_OK) {
        CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
        kiln_model_free(opt);
        return;
    }
    const int a = count_op(opt, "ToNHWC"), b = count_op(opt, "ToNCHW");
    CHECK(a == e->to_nhwc && b == e->to_nchw, "%s: %d ToNHWC and %d ToNCHW, expected %d and %d", label, a, b,
          e->to_nhwc, e->to_nchw);
    for (int i = 0; i < 8 && e->nhwc[i]; i++)
        CHECK(format_of(opt, e->nhwc[i]) == KILN_FORMAT_NHWC, "%s: %s is not NHWC", label, e->nhwc[i]);
    for (int i = 0; i < 8 && e->nchw[i]; i++)
        CHECK(format_of(opt, e->nchw[i]) == KILN_FORMAT_NCHW, "%s: %s is not NCHW", label, e->nchw[i]);
    CHECK(opt->n_outputs == M->n_outputs, "%s: output count", label);
    for (int i = 0; i < M->n_outputs && i < opt->n_outputs; i++) {
        CHECK(strcmp(kiln_model_output_name(opt, i), kiln_model_output_name(M, i)) == 0, "%s: output %d renamed to %s",
              label, i, kiln_model_output_name(opt, i));
        CHECK(opt->values[opt->outputs[i]].format == KILN_FORMAT_NCHW, "%s: output %d is not NCHW", label, i);
    }
    /* the same function: conversions are copies on the CPU, everything else unchanged */
    kiln_tensor *want[4] = {0}, *got[4] = {0};
    const int n_out = M->n_outputs;
    if (run_cpu(ref, batch, want, n_out) && run_cpu(opt, batch, got, n_out))
        for (int j = 0; j < n_out; j++) {
            char l[128];
            snprintf(l, sizeof l, "%s output %d unchanged", label, j);
            fails += kiln_tensor_compare(got[j], want[j], 0, 0, l);
        }
    /* formats reach device plans' tensors; host plans stay NCHW */
    kiln_tensor *in[4] = {0};
    for (int i = 0; i < opt->n_inputs; i++) {
        const kiln_value *v = &opt->values[opt->inputs[i]];
        int64_t dims[KILN_MAX_DIMS];
        for (int d = 0; d < v->ndim; d++) dims[d] = v->dims[d] < 0 ? batch : v->dims[d];
        in[i] = kt_rand(v->dtype, v->ndim, dims, -1, 1, 5);
    }
    for (int host = 0; host < 2; host++) {
        kiln_plan *p = NULL;
        if (kiln_plan_build(opt, in, true, host, &p) != KILN_OK) {
            CHECK(0, "%s: plan: %s", label, kiln_context_message(ctx));
            continue;
        }
        kiln_plan_view_t v;
        kiln_plan_view(p, &v);
        for (int i = 0; i < 8 && e->nhwc[i]; i++) {
            int x = kiln_model_find_value(opt, e->nhwc[i]);
            if (x < 0) continue;
            kiln_format want_fmt = host || v.vt[x].ndim != 4 ? KILN_FORMAT_NCHW : KILN_FORMAT_NHWC;
            CHECK(v.vt[x].format == want_fmt, "%s: %s plan tensor of %s has format %d", label,
                  host ? "host" : "device", e->nhwc[i], (int)v.vt[x].format);
        }
        kiln_plan_free(p);
    }
    for (int i = 0; i < 4; i++) {
        kiln_tensor_free(in[i]);
        kiln_tensor_free(want[i]);
        kiln_tensor_free(got[i]);
    }
    /* CPU sessions and a switched-off pass leave the graph alone */
    kiln_pass_options cpu = {.device = KILN_DEVICE_CPU, .disabled = ~(unsigned)KILN_PASS_NHWC};
    kiln_pass_options off = {.device = KILN_DEVICE_CUDA, .disabled = ~0u};
    for (int k = 0; k < 2; k++) {
        kiln_model *o2 = NULL;
        CHECK(kiln_passes_apply(M, k ? &off : &cpu, &o2) == KILN_OK, "passes");
        if (o2)
            CHECK(count_op(o2, "ToNHWC") + count_op(o2, "ToNCHW") == 0 && o2->n_nodes == M->n_nodes,
                  "%s: the pass ran %s", label, k ? "switched off" : "for a CPU plan");
        kiln_model_free(o2);
    }
    kiln_model_free(opt);
    kiln_model_free(ref);
}

static int count_onnx(const kiln_model *m, const char *op) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++) n += kiln_pass_is(&m->nodes[i], op);
    return n;
}

/* The conversion at the input after the pad-channels and precision passes: one kiln.ToNHWC
 * reading the graph input `x` itself (reads_x) or else the Cast of x, with the Cast and the
 * channel Pad folded into its `to` and `zero_channels` (0: no such attribute), and n_cast
 * Casts / no Pad left (the function is checked by check_graph_ex on the same options). */
static void check_input_chain(const char *label, kiln_precision prec, unsigned also, bool reads_x, kiln_dtype to,
                              int64_t zeros, int n_cast) {
    kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = prec,
                            .disabled = ~(unsigned)(KILN_PASS_NHWC | also)};
    kiln_model *opt = NULL;
    const int fails0 = fails;
    if (kiln_passes_apply(M, &po, &opt) != KILN_OK) {
        CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
        return;
    }
    const int x = kiln_model_find_value(opt, "x");
    int conv = -1;
    for (int i = 0; i < opt->n_nodes; i++)
        if (strcmp(opt->nodes[i].domain, "kiln") == 0 && strcmp(opt->nodes[i].op_type, "ToNHWC") == 0) conv = i;
    int src = conv >= 0 ? opt->nodes[conv].in[0] : -1;
    if (!reads_x) /* through the Cast of x */
        for (int i = 0; i < opt->n_nodes && src != x; i++)
            if (opt->nodes[i].out[0] == src && kiln_pass_is(&opt->nodes[i], "Cast")) src = opt->nodes[i].in[0];
    CHECK(src == x && x >= 0, "%s: the conversion does not read %s", label, reads_x ? "x" : "x's Cast");
    if (conv >= 0) {
        const kiln_node *n = &opt->nodes[conv];
        CHECK(kiln_attr_int(n, "to", 0) == (int64_t)to, "%s: to=%lld, expected %d", label,
              (long long)kiln_attr_int(n, "to", 0), (int)to);
        CHECK(kiln_attr_int(n, "zero_channels", 0) == zeros, "%s: zero_channels=%lld, expected %lld", label,
              (long long)kiln_attr_int(n, "zero_channels", 0), (long long)zeros);
    }
    CHECK(count_onnx(opt, "Pad") == 0, "%s: %d Pad nodes left", label, count_onnx(opt, "Pad"));
    CHECK(count_onnx(opt, "Cast") == n_cast, "%s: %d Cast nodes, expected %d", label, count_onnx(opt, "Cast"), n_cast);
    if (fails == fails0)
        printf("ok   %s: one conversion reads %s (to=%d, zero_channels=%lld)\n", label, reads_x ? "x" : "x's Cast",
               (int)to, (long long)zeros);
    kiln_model_free(opt);
}

static void check_graph(const char *label, const expect *e, int64_t batch) {
    check_graph_ex(label, e, batch, KILN_PRECISION_FP32, 0);
}

/* ------------------------------------------------------------------ graphs */

static void clip_bounds(void) {
    init_vals("zero", KILN_F32, 0, NULL, KT_VALS(0));
    init_vals("six", KILN_F32, 0, NULL, KT_VALS(6));
}

/* stem, a basic block, a downsampling block with a 1x1 shortcut, GAP, Flatten, Gemm */
static void resnet_like(int64_t batch, bool feature_output) {
    begin();
    input("x", batch, 3, 16, 16);
    conv("x", "stem", 3, 8, 3, 2, 1, true, "Relu");
    add("MaxPool", "stem", "pool", "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]");
    conv("pool", "b1a", 8, 8, 3, 1, 1, true, "Relu");
    conv("b1a", "b1b", 8, 8, 3, 1, 1, true, NULL);
    add("Add", "b1b,pool", "b1sum", "");
    add("Relu", "b1sum", "b1", "");
    conv("b1", "b2a", 8, 16, 3, 2, 1, true, "Relu");
    conv("b2a", "b2b", 16, 16, 3, 1, 1, true, NULL);
    conv("b1", "b2s", 8, 16, 1, 2, 1, true, NULL);
    add("Add", "b2b,b2s", "b2sum", "");
    add("Relu", "b2sum", "b2", "");
    add("GlobalAveragePool", "b2", "gap", "");
    add("Flatten", "gap", "flat", "");
    init_rand("fc.w", 2, (int64_t[]){10, 16}, -0.5, 0.5);
    init_rand("fc.b", 1, (int64_t[]){10}, -0.5, 0.5);
    add("Gemm", "flat,fc.w,fc.b", "logits", "transB=1");
    const char *outs[2] = {"logits", "b2"};
    finalize(outs, feature_output ? 2 : 1);
}

/* MobileNet-v2-like: ReLU6 (Clip with bound inputs), depthwise convolutions, an inverted
 * residual block with a linear bottleneck and a residual Add, GAP, Reshape, Gemm, Softmax */
static void mobilenet_like(int64_t batch) {
    begin();
    input("x", batch, 3, 16, 16);
    clip_bounds();
    conv("x", "stem", 3, 8, 3, 2, 1, true, "Relu6");
    conv("stem", "dw1", 8, 8, 3, 1, 8, true, "Relu6");
    conv("dw1", "pw1", 8, 16, 1, 1, 1, true, NULL);
    conv("pw1", "ex2", 16, 32, 1, 1, 1, true, "Relu6");
    conv("ex2", "dw2", 32, 32, 3, 1, 32, true, "Relu6");
    conv("dw2", "pw2", 32, 16, 1, 1, 1, true, NULL);
    add("Add", "pw2,pw1", "res2", "");
    conv("res2", "head", 16, 32, 1, 1, 1, true, "Relu6");
    add("GlobalAveragePool", "head", "gap", "");
    init_vals("shape", KILN_I64, 1, (int64_t[]){2}, KT_VALS(0, -1));
    add("Reshape", "gap,shape", "flat", "");
    init_rand("fc.w", 2, (int64_t[]){32, 10}, -0.5, 0.5);
    add("Gemm", "flat,fc.w", "fc", "");
    add("Softmax", "fc", "prob", "axis=1");
    const char *outs[1] = {"prob"};
    finalize(outs, 1);
}

/* A squeeze-and-excitation block: GAP -> 1x1 convs -> Sigmoid -> Mul back into the
 * features; the first GAP's (N,C,1,1) feeds a convolution and is labelled NHWC. */
static void se_like(void) {
    begin();
    input("x", 2, 3, 8, 8);
    conv("x", "c1", 3, 16, 3, 1, 1, false, "Relu");
    add("GlobalAveragePool", "c1", "squeeze", "");
    conv("squeeze", "se1", 16, 4, 1, 1, 1, false, "Relu");
    conv("se1", "se2", 4, 16, 1, 1, 1, false, NULL);
    add("Sigmoid", "se2", "gate", "");
    add("Mul", "c1,gate", "excited", "");
    add("GlobalAveragePool", "excited", "gap", "");
    add("Flatten", "gap", "flat", "");
    init_rand("fc.w", 2, (int64_t[]){16, 5}, -0.5, 0.5);
    add("Gemm", "flat,fc.w", "y", "");
    const char *outs[1] = {"y"};
    finalize(outs, 1);
}

/* BN -> Relu -> conv (a DenseNet layer's pre-activation order), named after out. */
static void pre_act_conv(const char *x, const char *out, int64_t c, int64_t m, int64_t k) {
    const char *suffix[4] = {"s", "b", "m", "v"};
    char p[4][64], ins[320], bn[64], r[64];
    for (int i = 0; i < 4; i++) {
        snprintf(p[i], sizeof p[i], "%s.pre%s", out, suffix[i]);
        init_rand(p[i], 1, (int64_t[]){c}, i == 3 ? 0.5 : -1, i == 3 ? 2 : 1);
    }
    snprintf(bn, sizeof bn, "%s.prebn", out);
    snprintf(r, sizeof r, "%s.prerelu", out);
    snprintf(ins, sizeof ins, "%s,%s,%s,%s,%s", x, p[0], p[1], p[2], p[3]);
    add("BatchNormalization", ins, bn, "");
    add("Relu", bn, r, "");
    conv(r, out, c, m, k, 1, 1, false, NULL);
}

/* ConvNeXt's downsampling as torchvision's convnext exports it for training: a LayerNorm2d
 * (permute to channels-last, LayerNorm, permute back), then a 2x2 stride-2 convolution
 * whose output feeds a block (a convolution and a residual Add: its gradient is a Sum), then
 * GAP -> Flatten -> Gemm -> loss. The backward's ConvGradInput of the downsampling reads the
 * permute's output as X. (This graph laid out consistently before the fix that
 * tests/data/convnext_mini_train.onnx checks: torchvision's own export, where this pass
 * inferred rank 3 for that X and dY.) */
static int conv_layout_mismatches(const char *label, const kiln_model *m);

static void convnext_training_like(int64_t batch) {
    begin();
    input("x", batch, 3, 8, 8);
    CHECK(kiln_model_add_input(M, "label", KILN_I64, 1, (int64_t[]){batch}) == KILN_OK, "label input");
    conv("x", "stem", 3, 8, 3, 1, 1, false, NULL);
    add("Transpose", "stem", "t1", "perm=[0,2,3,1]");
    init_rand("ln.s", 1, (int64_t[]){8}, 0.5, 1.5);
    init_rand("ln.b", 1, (int64_t[]){8}, -0.5, 0.5);
    add("LayerNormalization", "t1,ln.s,ln.b", "ln", "axis=-1");
    init_rand("fc1.w", 2, (int64_t[]){8, 16}, -0.5, 0.5);
    init_rand("fc1.b", 1, (int64_t[]){16}, -0.5, 0.5);
    add("MatMul", "ln,fc1.w", "h", "");
    add("Add", "h,fc1.b", "hb", "");
    add("Relu", "hb", "hr", "");
    init_rand("fc2.w", 2, (int64_t[]){16, 8}, -0.5, 0.5);
    add("MatMul", "hr,fc2.w", "h2", "");
    add("Transpose", "h2", "t2", "perm=[0,3,1,2]");
    conv("t2", "down", 8, 16, 2, 2, 1, false, NULL);
    conv("down", "blk", 16, 16, 3, 1, 1, false, NULL);
    add("Add", "blk,down", "res", "");
    add("GlobalAveragePool", "res", "gap", "");
    add("Flatten", "gap", "flat", "axis=1");
    init_rand("fc.w", 2, (int64_t[]){10, 16}, -0.5, 0.5);
    add("Gemm", "flat,fc.w", "logits", "transB=1");
    add("SoftmaxCrossEntropyLoss", "logits,label", "loss", "");
    const char *outs[1] = {"loss"};
    finalize(outs, 1);
}

static void convnext_training(kiln_precision prec, int64_t batch) {
    char label[96];
    snprintf(label, sizeof label, "convnext-like training graph%s%s", prec == KILN_PRECISION_FP32 ? "" : ", fp16",
             batch < 0 ? ", symbolic batch" : "");
    printf("-- %s\n", label);
    convnext_training_like(batch);
    kiln_trainer *t = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD};
    CHECK(kiln_trainer_create(M, "loss", &o, &t) == KILN_OK, "%s: %s", label, kiln_context_message(ctx));
    /* every pass, as the CUDA engine applies them to the trainer's whole graph */
    const kiln_pass_options pa = {.device = KILN_DEVICE_CUDA, .precision = prec};
    kiln_model *full = NULL;
    if (t) {
        CHECK(kiln_passes_apply(t->train, &pa, &full) == KILN_OK, "%s: passes: %s", label, kiln_context_message(ctx));
        if (full) {
            const int bad = conv_layout_mismatches(label, full);
            fails += bad;
            if (!bad) printf("ok   %s: every convolution's operands share a layout\n", label);
        }
    }
    kiln_model_free(full);
    kiln_trainer_free(t);
    kiln_model_free(M);
}

/* A DenseNet block of two layers and a transition: every layer reads the Concat of the
 * stem and all earlier layers' features (channel axis), then GAP -> Flatten -> Gemm; with
 * `loss`, a label input and SoftmaxCrossEntropyLoss for the trainer. */
static void densenet_like(int64_t batch, bool loss) {
    begin();
    input("x", batch, 3, 8, 8);
    if (loss) CHECK(kiln_model_add_input(M, "label", KILN_I64, 1, (int64_t[]){batch}) == KILN_OK, "label input");
    conv("x", "stem", 3, 8, 3, 1, 1, true, "Relu");
    pre_act_conv("stem", "f1", 8, 4, 3);
    add("Concat", "stem,f1", "cat1", "axis=1");
    pre_act_conv("cat1", "f2", 12, 4, 3);
    add("Concat", "stem,f1,f2", "cat2", "axis=-3");
    pre_act_conv("cat2", "t", 16, 8, 1);
    add("AveragePool", "t", "tp", "kernel_shape=[2,2];strides=[2,2]");
    add("GlobalAveragePool", "tp", "gap", "");
    add("Flatten", "gap", "flat", "axis=1");
    init_rand("fc.w", 2, (int64_t[]){10, 8}, -0.5, 0.5);
    add("Gemm", "flat,fc.w", loss ? "logits" : "y", "transB=1");
    if (loss) add("SoftmaxCrossEntropyLoss", "logits,label", "loss", "");
    const char *outs[1] = {loss ? "loss" : "y"};
    finalize(outs, 1);
}

/* ShuffleNet's unit: the input split in two channel halves (Slice), one half through
 * 1x1 - depthwise 3x3 - 1x1, the halves concatenated and shuffled (Reshape to (N, 2, C/2,
 * H, W), Transpose (0, 2, 1, 3, 4), Reshape back), twice; with `dynamic`, the shapes of
 * the Reshapes computed from Shape as PyTorch's exporter writes them for a symbolic batch. */
static void shuffle_unit(const char *x, const char *out, int64_t c, int64_t hw, bool dynamic) {
    char a[64], b[64], b1[64], b2[64], b3[64], cat[64], r5[64], tr[64], ins[256], sh[64];
    snprintf(a, sizeof a, "%s.a", out);
    snprintf(b, sizeof b, "%s.b", out);
    snprintf(ins, sizeof ins, "%s,half.start0,half.mid,half.axis", x);
    add("Slice", ins, a, "");
    snprintf(ins, sizeof ins, "%s,half.mid,half.end,half.axis", x);
    add("Slice", ins, b, "");
    snprintf(b1, sizeof b1, "%s.b1", out);
    snprintf(b2, sizeof b2, "%s.b2", out);
    snprintf(b3, sizeof b3, "%s.b3", out);
    conv(b, b1, c / 2, c / 2, 1, 1, 1, false, "Relu");
    conv(b1, b2, c / 2, c / 2, 3, 1, c / 2, false, NULL);
    conv(b2, b3, c / 2, c / 2, 1, 1, 1, false, "Relu");
    snprintf(cat, sizeof cat, "%s.cat", out);
    snprintf(ins, sizeof ins, "%s,%s", a, b3);
    add("Concat", ins, cat, "axis=1");
    snprintf(r5, sizeof r5, "%s.r5", out);
    snprintf(tr, sizeof tr, "%s.tr", out);
    if (dynamic) {
        /* (N, 2, C/2, H, W) from Shape(cat)[0] and constants; back to Shape(cat) */
        char n0[64], n1[64], s5[64];
        snprintf(sh, sizeof sh, "%s.shape", out);
        snprintf(n0, sizeof n0, "%s.n", out);
        snprintf(n1, sizeof n1, "%s.n1", out);
        snprintf(s5, sizeof s5, "%s.s5", out);
        add("Shape", cat, sh, "");
        snprintf(ins, sizeof ins, "%s,idx0", sh);
        add("Gather", ins, n0, "axis=0");
        snprintf(ins, sizeof ins, "%s,ax0", n0);
        add("Unsqueeze", ins, n1, "");
        snprintf(ins, sizeof ins, "%s,rest5", n1);
        add("Concat", ins, s5, "axis=0");
        snprintf(ins, sizeof ins, "%s,%s", cat, s5);
    } else {
        snprintf(sh, sizeof sh, "shape4");
        snprintf(ins, sizeof ins, "%s,shape5", cat);
    }
    (void)hw;
    add("Reshape", ins, r5, "");
    add("Transpose", r5, tr, "perm=[0,2,1,3,4]");
    snprintf(ins, sizeof ins, "%s,%s", tr, sh);
    add("Reshape", ins, out, "");
}

static void shufflenet_like(int64_t batch, bool dynamic) {
    const int64_t c = 8, hw = 6;
    begin();
    input("x", batch, 3, hw, hw);
    init_vals("half.start0", KILN_I64, 1, (int64_t[]){1}, KT_VALS(0));
    init_vals("half.mid", KILN_I64, 1, (int64_t[]){1}, KT_VALS(4));
    init_vals("half.end", KILN_I64, 1, (int64_t[]){1}, KT_VALS(8));
    init_vals("half.axis", KILN_I64, 1, (int64_t[]){1}, KT_VALS(1));
    init_vals("shape5", KILN_I64, 1, (int64_t[]){5}, KT_VALS(batch, 2, 4, hw, hw));
    init_vals("shape4", KILN_I64, 1, (int64_t[]){4}, KT_VALS(batch, 8, hw, hw));
    init_vals("idx0", KILN_I64, 0, NULL, KT_VALS(0));
    init_vals("ax0", KILN_I64, 1, (int64_t[]){1}, KT_VALS(0));
    init_vals("rest5", KILN_I64, 1, (int64_t[]){4}, KT_VALS(2, 4, hw, hw));
    conv("x", "stem", 3, c, 3, 1, 1, false, "Relu");
    shuffle_unit("stem", "u1", c, hw, dynamic);
    shuffle_unit("u1", "u2", c, hw, dynamic);
    conv("u2", "head", c, 16, 1, 1, 1, false, "Relu");
    add("GlobalAveragePool", "head", "gap", "");
    add("Flatten", "gap", "flat", "axis=1");
    init_rand("fc.w", 2, (int64_t[]){10, 16}, -0.5, 0.5);
    add("Gemm", "flat,fc.w", "y", "transB=1");
    const char *outs[1] = {"y"};
    finalize(outs, 1);
}

/* A ConvNeXt block: conv -> permute(0,2,3,1) -> LayerNorm -> Linear -> Relu -> Linear ->
 * permute(0,3,1,2) -> layer scale (C,1,1) -> + residual -> conv. The first Transpose reads
 * the NHWC conv output as it is, the second writes NHWC: no conversion inside. */
static void convnext_like(void) {
    begin();
    input("x", 2, 3, 8, 8);
    conv("x", "stem", 3, 8, 3, 1, 1, false, NULL);
    add("Transpose", "stem", "t1", "perm=[0,2,3,1]");
    init_rand("ln.s", 1, (int64_t[]){8}, 0.5, 1.5);
    init_rand("ln.b", 1, (int64_t[]){8}, -0.5, 0.5);
    add("LayerNormalization", "t1,ln.s,ln.b", "ln", "axis=-1");
    init_rand("fc1.w", 2, (int64_t[]){8, 16}, -0.5, 0.5);
    add("MatMul", "ln,fc1.w", "h", "");
    add("Relu", "h", "hr", "");
    init_rand("fc2.w", 2, (int64_t[]){16, 8}, -0.5, 0.5);
    add("MatMul", "hr,fc2.w", "h2", "");
    add("Transpose", "h2", "t2", "perm=[0,3,1,2]");
    init_rand("gamma", 3, (int64_t[]){8, 1, 1}, -1, 1);
    add("Mul", "t2,gamma", "sc", "");
    add("Add", "sc,stem", "res", "");
    conv("res", "c2", 8, 8, 3, 1, 1, false, NULL);
    const char *outs[1] = {"c2"};
    finalize(outs, 1);
}

/* The convnext-like block's two Transposes move no byte in a device plan: their outputs
 * are views of their inputs (Transpose's alias_when: the same arena offset); in a host
 * plan (all NCHW) they are not. */
static void convnext_views(void) {
    kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .disabled = ~(unsigned)KILN_PASS_NHWC};
    kiln_model *opt = NULL;
    if (kiln_passes_apply(M, &po, &opt) != KILN_OK) {
        CHECK(0, "convnext views: passes: %s", kiln_context_message(ctx));
        return;
    }
    kiln_tensor *in = kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 8, 8), -1, 1, 9);
    static const char *const pairs[2][2] = {{"t1", "stem"}, {"t2", "h2"}};
    for (int host = 0; host < 2; host++) {
        kiln_plan *p = NULL;
        if (kiln_plan_build(opt, &in, true, host, &p) != KILN_OK) {
            CHECK(0, "convnext views: plan: %s", kiln_context_message(ctx));
            continue;
        }
        kiln_plan_view_t v;
        kiln_plan_view(p, &v);
        for (int k = 0; k < 2; k++) {
            const int a = kiln_model_find_value(opt, pairs[k][0]), b = kiln_model_find_value(opt, pairs[k][1]);
            const bool same = a >= 0 && b >= 0 && v.offset[a] != SIZE_MAX && v.offset[a] == v.offset[b];
            CHECK(same == !host, "convnext views: %s plan: %s %s a view of %s", host ? "host" : "device", pairs[k][0],
                  same ? "is" : "is not", pairs[k][1]);
        }
        kiln_plan_free(p);
    }
    kiln_tensor_free(in);
    kiln_model_free(opt);
}

/* ViT's patch embedding: conv -> Reshape (N, C, HW) (its target computed from Shape under a
 * symbolic batch, as torch exports x.reshape(n, C, h * w)) -> Transpose (0, 2, 1) ->
 * LayerNorm -> MatMul. The layout pass reads the NHWC conv output as tokens: a Transpose
 * (0, 2, 3, 1) that is a view of it and a Reshape, no kiln.ToNCHW. */
static void vit_patch(bool patchify) {
    begin();
    if (patchify) { /* kernel = stride = 8, no padding: conv-patch's (N, 8, 2, 2) */
        input("x", -1, 3, 16, 16);
        init_rand("pe.w", 4, (int64_t[]){8, 3, 8, 8}, -0.5, 0.5);
        init_rand("pe.b", 1, (int64_t[]){8}, -0.5, 0.5);
        add("Conv", "x,pe.w,pe.b", "pe", "kernel_shape=[8,8];strides=[8,8]");
    } else {
        input("x", -1, 3, 8, 8);
        conv("x", "pe", 3, 8, 4, 4, 1, false, NULL); /* (N, 8, 3, 3) */
    }
    add("Shape", "pe", "pe_shape", "");
    init_vals("i0", KILN_I64, 1, (int64_t[]){1}, KT_VALS(0));
    add("Gather", "pe_shape,i0", "n", "axis=0");
    init_vals("c_hw", KILN_I64, 1, (int64_t[]){2}, patchify ? KT_VALS(8, 4) : KT_VALS(8, 9));
    add("Concat", "n,c_hw", "target", "axis=0");
    add("Reshape", "pe,target", "flat", "");
    add("Transpose", "flat", "tokens", "perm=[0,2,1]");
    init_rand("ln.s", 1, (int64_t[]){8}, 0.5, 1.5);
    init_rand("ln.b", 1, (int64_t[]){8}, -0.5, 0.5);
    add("LayerNormalization", "tokens,ln.s,ln.b", "ln", "axis=-1");
    init_rand("fc.w", 2, (int64_t[]){8, 8}, -0.5, 0.5);
    add("MatMul", "ln,fc.w", "y", "");
    const char *outs[1] = {"y"};
    finalize(outs, 1);
}

/* vit_patch's plan: the permute's output is a view of the NHWC conv output in a device plan
 * (the same arena offset), and no Transpose (0, 2, 1) is left. */
static void vit_patch_views(void) {
    kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .disabled = ~(unsigned)KILN_PASS_NHWC};
    kiln_model *opt = NULL;
    if (kiln_passes_apply(M, &po, &opt) != KILN_OK) {
        CHECK(0, "vit patch: passes: %s", kiln_context_message(ctx));
        return;
    }
    int perm = -1, n_t = 0;
    for (int i = 0; i < opt->n_nodes; i++)
        if (strcmp(opt->nodes[i].op_type, "Transpose") == 0) {
            n_t++;
            int r = 0;
            const int64_t *p = kiln_attr_ints(&opt->nodes[i], "perm", &r);
            if (r == 4 && p[0] == 0 && p[1] == 2 && p[2] == 3 && p[3] == 1 && opt->nodes[i].in[0] == kiln_model_find_value(opt, "pe"))
                perm = opt->nodes[i].out[0];
        }
    CHECK(n_t == 1 && perm >= 0, "vit patch: %d Transposes, the conv output's permute %s", n_t, perm >= 0 ? "found" : "missing");
    kiln_tensor *in = kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 8, 8), -1, 1, 11);
    kiln_plan *p = NULL;
    if (perm >= 0 && kiln_plan_build(opt, &in, true, false, &p) == KILN_OK) {
        kiln_plan_view_t v;
        kiln_plan_view(p, &v);
        const int pe = kiln_model_find_value(opt, "pe");
        CHECK(pe >= 0 && v.offset[perm] != SIZE_MAX && v.offset[perm] == v.offset[pe],
              "vit patch: the permute is not a view of the NHWC conv output in a device plan");
        kiln_plan_free(p);
    } else if (perm >= 0) {
        CHECK(0, "vit patch: plan: %s", kiln_context_message(ctx));
    }
    kiln_tensor_free(in);
    kiln_model_free(opt);
}

/* conv-patch on vit_patch(true): no convolution left, one Gemm, one Transpose (the patches'
 * copy; the product's way back to NCHW and the tokens' permute cancel), no conversion. */
static void vit_patch_product(void) {
    kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .disabled = ~(unsigned)(KILN_PASS_NHWC | KILN_PASS_CONV_PATCH)};
    kiln_model *opt = NULL;
    if (kiln_passes_apply(M, &po, &opt) != KILN_OK) {
        CHECK(0, "conv-patch: passes: %s", kiln_context_message(ctx));
        return;
    }
    int conv = 0, gemm = 0, tr = 0;
    for (int i = 0; i < opt->n_nodes; i++) {
        const kiln_node *n = &opt->nodes[i];
        conv += strcmp(n->op_type, "Conv") == 0;
        gemm += strcmp(n->op_type, "Gemm") == 0;
        if (strcmp(n->op_type, "Transpose") != 0) continue;
        /* Transposes whose output some node but a Shape reads (the one back to NCHW stays
         * for the Shape of the export, which the planner folds) */
        bool data = false;
        for (int j = 0; j < opt->n_nodes; j++)
            for (int k = 0; k < opt->nodes[j].n_in; k++)
                data |= opt->nodes[j].in[k] == n->out[0] && strcmp(opt->nodes[j].op_type, "Shape") != 0;
        tr += data;
    }
    CHECK(conv == 0 && gemm == 1 && tr == 1, "conv-patch: %d Conv, %d Gemm, %d Transposes read; expected 0, 1, 1", conv,
          gemm, tr);
    kiln_model_free(opt);
}

/* ViT's qkv split: (1,L,N,3,D) -Transpose(3,1,2,0,4)-> -Squeeze(3)-> -Gather(0|1|2)->
 * (L,N,D) three times. The layout pass gathers from X first; the Transposes left move no
 * byte and are views in a device plan; the function is unchanged (check_graph). */
static void qkv_split(void) {
    begin();
    CHECK(kiln_model_add_input(M, "x", KILN_F32, 5, (int64_t[]){1, 4, 2, 3, 5}) == KILN_OK, "input x");
    add("Transpose", "x", "t", "perm=[3,1,2,0,4]");
    init_vals("ax", KILN_I64, 1, (int64_t[]){1}, KT_VALS(3));
    add("Squeeze", "t,ax", "s", "");
    static const char *const names[3][2] = {{"i0", "q"}, {"i1", "k"}, {"i2", "v"}};
    for (int k = 0; k < 3; k++) {
        init_vals(names[k][0], KILN_I64, 0, NULL, (double[]){k});
        char ins[32];
        snprintf(ins, sizeof ins, "s,%s", names[k][0]);
        add("Gather", ins, names[k][1], "axis=0");
    }
    add("Mul", "q,k", "qk", "");
    add("Sub", "qk,v", "y", "");
    const char *outs[1] = {"y"};
    finalize(outs, 1);
}

static void qkv_split_checks(void) {
    kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .disabled = ~(unsigned)KILN_PASS_NHWC};
    kiln_model *opt = NULL;
    if (kiln_passes_apply(M, &po, &opt) != KILN_OK) {
        CHECK(0, "qkv split: passes: %s", kiln_context_message(ctx));
        return;
    }
    int transposes = 0, gathers_of_x = 0, views = 0;
    const int x = kiln_model_find_value(opt, "x");
    for (int i = 0; i < opt->n_nodes; i++) {
        transposes += strcmp(opt->nodes[i].op_type, "Transpose") == 0;
        gathers_of_x += strcmp(opt->nodes[i].op_type, "Gather") == 0 && opt->nodes[i].in[0] == x;
    }
    CHECK(transposes == 3 && gathers_of_x == 3, "qkv split: %d Transposes and %d Gathers of x, expected 3 and 3",
          transposes, gathers_of_x);
    kiln_tensor *in = kt_rand(KILN_F32, 5, KT_DIMS(1, 4, 2, 3, 5), -1, 1, 11);
    kiln_plan *p = NULL;
    if (kiln_plan_build(opt, &in, true, false, &p) == KILN_OK) {
        kiln_plan_view_t v;
        kiln_plan_view(p, &v);
        for (int i = 0; i < opt->n_nodes; i++)
            if (strcmp(opt->nodes[i].op_type, "Transpose") == 0)
                views += v.offset[opt->nodes[i].in[0]] != SIZE_MAX &&
                         v.offset[opt->nodes[i].in[0]] == v.offset[opt->nodes[i].out[0]];
        kiln_plan_free(p);
    } else {
        CHECK(0, "qkv split: plan: %s", kiln_context_message(ctx));
    }
    CHECK(views == 3, "qkv split: %d of the 3 Transposes are views in a device plan", views);
    kiln_tensor_free(in);
    kiln_model_free(opt);
}

/* VGG-like head: pooled NHWC features flattened straight away need one ToNCHW */
static void vgg_like(void) {
    begin();
    input("x", 2, 3, 8, 8);
    conv("x", "c1", 3, 4, 3, 1, 1, false, "Relu");
    add("MaxPool", "c1", "p1", "kernel_shape=[2,2];strides=[2,2]");
    add("Flatten", "p1", "flat", "");
    init_rand("fc.w", 2, (int64_t[]){64, 5}, -0.5, 0.5);
    add("Gemm", "flat,fc.w", "y", "");
    const char *outs[1] = {"y"};
    finalize(outs, 1);
}

/* The input read by the stem convolution and by a GlobalAveragePool; both are outputs. */
static void shared_input(void) {
    begin();
    input("x", 2, 3, 8, 8);
    conv("x", "c1", 3, 8, 3, 1, 1, false, NULL);
    add("GlobalAveragePool", "x", "gx", "");
    const char *outs[2] = {"c1", "gx"};
    finalize(outs, 2);
}

/* Binary ops: a per-channel scale (free), a full 4-D NCHW operand (converted), Concat
 * and Softmax over channels (NCHW readers, one shared ToNCHW per value), Shape (none). */
static void mixed(void) {
    begin();
    input("x", 2, 3, 6, 6);
    input("skip", 2, 4, 6, 6);
    conv("x", "c1", 3, 4, 3, 1, 1, false, NULL);
    init_rand("scale", 3, (int64_t[]){4, 1, 1}, 0.5, 1.5);
    add("Mul", "c1,scale", "scaled", "");
    add("Add", "scaled,skip", "sum", "");
    add("Concat", "sum,c1", "cat", "axis=1");
    add("Softmax", "sum", "soft", "axis=1");
    add("Shape", "sum", "shape", "");
    const char *outs[3] = {"cat", "soft", "shape"};
    finalize(outs, 3);
}

/* Training Dropout between two convolutions, and a kiln.DropoutGrad of its output (with
 * the mask) feeding the second: Dropout reads c1 NHWC and writes NCHW; the DropoutGrad
 * writes NHWC for c2 unless its output `g` has another reader: a graph output (reader 1)
 * or a Flatten (reader 2). */
/* The gradient of a bias broadcast into an NHWC activation: kiln.ReduceSumTo(c1, like)
 * reads the NHWC c1 as it is when like's bytes are the same in both layouts (a per-channel
 * (8,1,1), an (N,1,H,W) map); a (1,8,8,8) like needs c1 in NCHW. */
static void sum_to_like(const int64_t *like, int rank) {
    begin();
    input("x", 2, 3, 8, 8);
    init_rand("like", rank, like, -1, 1);
    conv("x", "c1", 3, 8, 3, 1, 1, false, "Relu");
    kiln_node *n = NULL;
    CHECK(kiln_model_add_node(M, "ReduceSumTo", "db", 2, (const char *[]){"c1", "like"}, 1, (const char *[]){"db"},
                              &n) == KILN_OK,
          "ReduceSumTo: %s", kiln_context_message(ctx));
    if (n) {
        free(n->domain);
        n->domain = kiln_strdup(ctx, "kiln");
    }
    conv("c1", "c2", 8, 4, 3, 1, 1, false, NULL);
    add("GlobalAveragePool", "c2", "gap", "");
    finalize((const char *[]){"gap", "db"}, 2);
}

/* The gradient of a Max of two NHWC convolutions, kiln.MaxGrad(dY, Y, X0, X1), follows
 * its forward into NHWC (the binary rule): no conversion around it. */
static void max_grad_nhwc(void) {
    begin();
    input("x", 2, 3, 8, 8);
    conv("x", "c1", 3, 8, 3, 1, 1, false, NULL);
    conv("x", "c2", 3, 8, 3, 1, 1, false, NULL);
    add("Max", "c1,c2", "m", "");
    kiln_node *n = NULL;
    CHECK(kiln_model_add_node(M, "MaxGrad", "g", 4, (const char *[]){"c2", "m", "c1", "c2"}, 1, (const char *[]){"g"},
                              &n) == KILN_OK,
          "MaxGrad: %s", kiln_context_message(ctx));
    if (n) {
        free(n->domain);
        n->domain = kiln_strdup(ctx, "kiln");
        kiln_node_set_int(n, "index", 1);
    }
    conv("g", "c3", 8, 4, 3, 1, 1, false, NULL);
    add("GlobalAveragePool", "c3", "gap", "");
    finalize((const char *[]){"gap"}, 1);
}

static void dropout_grad_between(int other_reader) {
    begin();
    input("x", 2, 3, 8, 8);
    init_vals("ratio", KILN_F32, 0, NULL, KT_VALS(0.3));
    init_vals("train", KILN_BOOL, 0, NULL, KT_VALS(1));
    conv("x", "c1", 3, 8, 3, 1, 1, false, "Relu");
    kiln_node *n = NULL;
    CHECK(kiln_model_add_node(M, "Dropout", "drop", 3, (const char *[]){"c1", "ratio", "train"}, 2,
                              (const char *[]){"d", "mask"}, &n) == KILN_OK,
          "Dropout: %s", kiln_context_message(ctx));
    CHECK(kiln_model_add_node(M, "DropoutGrad", "dgrad", 4, (const char *[]){"d", "mask", "ratio", "train"}, 1,
                              (const char *[]){"g"}, &n) == KILN_OK,
          "DropoutGrad: %s", kiln_context_message(ctx));
    if (n) {
        free(n->domain);
        n->domain = kiln_strdup(ctx, "kiln");
    }
    conv("g", "c2", 8, 4, 3, 1, 1, false, NULL);
    if (other_reader == 2) add("Flatten", "g", "gf", "");
    const char *outs[2] = {"c2", other_reader == 1 ? "g" : "gf"};
    finalize(outs, other_reader ? 2 : 1);
}

/* The format of the output of the kiln.DropoutGrad in M after the layout pass, and of the
 * input and outputs of its Dropout (-1: not found). */
static void dropout_formats(int *grad_out, int *drop_in, int *drop_out) {
    kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .disabled = ~(unsigned)KILN_PASS_NHWC};
    kiln_model *opt = NULL;
    *grad_out = *drop_in = *drop_out = -1;
    CHECK(kiln_passes_apply(M, &po, &opt) == KILN_OK, "passes: %s", kiln_context_message(ctx));
    for (int i = 0; opt && i < opt->n_nodes; i++) {
        const kiln_node *n = &opt->nodes[i];
        if (strcmp(n->op_type, "DropoutGrad") == 0) *grad_out = (int)opt->values[n->out[0]].format;
        if (strcmp(n->op_type, "Dropout") == 0) {
            *drop_in = (int)opt->values[n->in[0]].format;
            *drop_out = (int)(opt->values[n->out[0]].format | opt->values[n->out[1]].format);
        }
    }
    kiln_model_free(opt);
}

static void dropout_grad_checks(void) {
    static const char *const what[3] = {"c2 its only reader", "also a graph output", "also read by Flatten"};
    for (int r = 0; r < 3; r++) {
        char label[128];
        snprintf(label, sizeof label, "DropoutGrad output %s", what[r]);
        dropout_grad_between(r);
        /* x's conversion and c2's back at the output; the DropoutGrad's when not folded */
        check_graph(label, &(expect){r ? 2 : 1, 1, {"c1"}, {"d", "mask", "x"}}, 2);
        int g, din, dout;
        dropout_formats(&g, &din, &dout);
        CHECK(din == KILN_FORMAT_NHWC && dout == KILN_FORMAT_NCHW, "%s: Dropout reads %d and writes %d", label, din,
              dout);
        CHECK(g == (r ? KILN_FORMAT_NCHW : KILN_FORMAT_NHWC), "%s: DropoutGrad writes format %d", label, g);
        kiln_model_free(M);
    }
}

/* The node of m producing value `name` (-1 none). */
static const kiln_node *producer(const kiln_model *m, const char *name) {
    const int v = kiln_model_find_value(m, name);
    for (int i = 0; v >= 0 && i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_out; k++)
            if (m->nodes[i].out[k] == v) return &m->nodes[i];
    return NULL;
}

/* Whether every node of type op in m with a 4-D output writes it in format f; *count:
 * how many there are. */
static bool outputs_are(const kiln_model *m, const char *op, kiln_format f, int *count) {
    bool all = true;
    *count = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *n = &m->nodes[i];
        if (strcmp(n->op_type, op) != 0 || n->out[0] < 0 || m->values[n->out[0]].ndim != 4) continue;
        (*count)++;
        all &= m->values[n->out[0]].format == f;
    }
    return all;
}

/* The same function on the CPU: the trainer's batch (image, lab; taken and freed) through
 * ref (the graph before the layout pass) and opt (after it), every output bit for bit. */
static void same_on_cpu(const char *label, kiln_trainer *t, kiln_model *ref, kiln_model *opt,
                        kiln_tensor *image, kiln_tensor *lab) {
    t->feeds[0] = image;
    t->feeds[1] = lab;
    const int no = opt->n_outputs;
    const kiln_tensor **want = calloc((size_t)no, sizeof *want), **got = calloc((size_t)no, sizeof *got);
    kiln_plan *pr = NULL, *po2 = NULL;
    kiln_status st = want && got && image && lab ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_plan_build(ref, t->feeds, true, true, &pr);
    if (!st) st = kiln_plan_build(opt, t->feeds, true, true, &po2);
    if (!st) st = kiln_plan_run_cpu(pr, t->feeds, 77, no, want);
    if (!st) st = kiln_plan_run_cpu(po2, t->feeds, 77, no, got);
    CHECK(!st, "%s: CPU runs: %s", label, kiln_context_message(ctx));
    for (int j = 0; !st && j < no; j++) {
        char l[200];
        snprintf(l, sizeof l, "%s: %s unchanged", label, kiln_model_output_name(opt, j));
        fails += kiln_tensor_compare(got[j], want[j], 0, 0, l);
    }
    kiln_plan_free(pr);
    kiln_plan_free(po2);
    free(want);
    free(got);
    t->feeds[0] = t->feeds[1] = NULL;
    kiln_tensor_free(image);
    kiln_tensor_free(lab);
}

/* mnist-net's training graph (the CPU trainer's: forward, backward, loss) through the
 * layout pass for a CUDA plan: conv2's weight converted once for its three readers,
 * training Dropout reading the pool's NHWC output into NCHW, its gradient writing NHWC for
 * MaxPoolGrad (no conversion either way), conv2's weight gradient converted at the graph
 * output; the one-channel input and conv1's weight and weight gradient read as they are
 * (also with a symbolic batch, as the trainer builds it). On the CPU the rewritten graph
 * gives the same loss and gradients, bit for bit, with the same Dropout seed. */
static void mnist_training(kiln_precision prec, int64_t batch) {
    kiln_model *m = NULL;
    kiln_trainer *t = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_ADADELTA};
    char label[120];
    snprintf(label, sizeof label, "mnist-net training graph%s%s", prec == KILN_PRECISION_FP32 ? "" : ", fp16",
             batch < 0 ? ", symbolic batch" : "");
    printf("-- %s\n", label);
    if (kiln_model_mnist_net(ctx, batch, 1, 1, &m) || kiln_trainer_create(m, "loss", &o, &t)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        kiln_model_free(m);
        return;
    }
    kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = prec, .disabled = ~(unsigned)KILN_PASS_NHWC};
    kiln_pass_options base = po;
    base.disabled = ~0u;
    kiln_model *opt = NULL, *ref = NULL, *bg = backward_graph(t);
    if (!bg || kiln_passes_apply(bg, &po, &opt) || kiln_passes_apply(bg, &base, &ref)) {
        CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
        goto out;
    }
    const int a = count_op(opt, "ToNHWC"), b = count_op(opt, "ToNCHW");
    CHECK(a == 1 && b == 1, "%s: %d ToNHWC and %d ToNCHW, expected 1 and 1", label, a, b);
    {
        /* as the CUDA engine has it: the pass over the whole training graph (the update's
         * nodes in it), then the update lowered (kiln_train_lower_update): the same graph as
         * the pass over the lowered one, node for node, with the same outputs */
        for (int all = 0; all < 2; all++) { /* the layout pass; every pass a CUDA trainer runs */
            const kiln_pass_options pa = {.device = KILN_DEVICE_CUDA, .precision = prec,
                                          .disabled = ~(unsigned)(KILN_PASS_NHWC | KILN_PASS_FUSE_CONV | KILN_PASS_FUSE_LOSS |
                                                                  KILN_PASS_FUSE_POOL)};
            kiln_model *full = NULL, *low = NULL, *want = opt;
            kiln_status lst = kiln_passes_apply(t->train, all ? &pa : &po, &full);
            if (!lst) {
                kiln_train_view v = t->view;
                v.train = full;
                lst = kiln_train_lower_update(&v, &low);
            }
            if (!lst && all) lst = kiln_passes_apply(bg, &pa, &want);
            CHECK(!lst, "%s: the update lowered after the pass: %s", label, kiln_context_message(ctx));
            if (!lst) {
                bool same = low->n_nodes == want->n_nodes && low->n_outputs == want->n_outputs;
                for (int i = 0; same && i < low->n_nodes; i++)
                    same = strcmp(low->nodes[i].op_type, want->nodes[i].op_type) == 0;
                for (int j = 0; same && j < low->n_outputs; j++)
                    same = low->values[low->outputs[j]].format == want->values[want->outputs[j]].format &&
                           (low->values[low->outputs[j]].dtype == want->values[want->outputs[j]].dtype ||
                            batch < 0); /* a symbolic batch: some dtypes known only when planned */
                CHECK(same, "%s: lowered after the %s: %d nodes, %d outputs; the same over the lowered graph: %d, %d",
                      label, all ? "CUDA trainer's passes" : "pass", low->n_nodes, low->n_outputs, want->n_nodes,
                      want->n_outputs);
            }
            if (want != opt) kiln_model_free(want);
            kiln_model_free(low);
            kiln_model_free(full);
        }
    }
    if (batch < 0) {
        /* no static shapes to check labels against: the conversions must be conv2's */
        for (int i = 0; i < opt->n_nodes; i++) {
            const kiln_node *n = &opt->nodes[i];
            if (strcmp(n->domain, "kiln") == 0 && strncmp(n->op_type, "ToN", 3) == 0)
                CHECK(strstr(opt->values[n->in[0]].name, "conv2") != NULL, "%s: kiln.%s of %s, not conv2's", label,
                      n->op_type, opt->values[n->in[0]].name);
        }
    } else {
        /* the conversions left: conv2's weight to KRSC and its weight gradient back */
        for (int i = 0; i < opt->n_nodes; i++) {
            const kiln_node *n = &opt->nodes[i];
            if (strcmp(n->domain, "kiln") != 0 || (strcmp(n->op_type, "ToNHWC") != 0 && strcmp(n->op_type, "ToNCHW") != 0))
                continue;
            const kiln_value *v = &opt->values[n->in[0]];
            CHECK(v->ndim == 4 && v->dims[0] == 64 && v->dims[1] == 32 && v->dims[2] == 3 && v->dims[3] == 3,
                  "%s: kiln.%s of %s, not of conv2's weight or its gradient", label, n->op_type, v->name);
        }
        int k = 0;
        CHECK(outputs_are(opt, "ConvGradInput", KILN_FORMAT_NHWC, &k) && k == 1, "%s: ConvGradInput NHWC (%d)", label, k);
        CHECK(outputs_are(opt, "MaxPoolGrad", KILN_FORMAT_NHWC, &k) && k == 1, "%s: MaxPoolGrad NHWC (%d)", label, k);
        CHECK(outputs_are(opt, "UnaryGrad", KILN_FORMAT_NHWC, &k) && k == 2, "%s: conv UnaryGrads NHWC (%d)", label, k);
        CHECK(outputs_are(opt, "Conv", KILN_FORMAT_NHWC, &k) && k == 2, "%s: Convs NHWC", label);
        /* ConvGradWeight: conv2's dW NHWC (KRSC), conv1's (32,1,3,3) labelled NCHW */
        int nhwc_w = 0, nchw_w = 0;
        for (int i = 0; i < opt->n_nodes; i++)
            if (strcmp(opt->nodes[i].op_type, "ConvGradWeight") == 0) {
                const kiln_value *v = &opt->values[opt->nodes[i].out[0]];
                if (v->format == KILN_FORMAT_NHWC) nhwc_w += v->dims[1] == 32;
                else nchw_w += v->dims[1] == 1;
            }
        CHECK(nhwc_w == 1 && nchw_w == 1, "%s: weight gradients' layouts (%d NHWC of conv2, %d NCHW of conv1)", label,
              nhwc_w, nchw_w);
        /* training Dropout reads the pool's NHWC output as it is and writes Y and the mask
         * NCHW; its gradient reads NCHW and writes NHWC for MaxPoolGrad */
        const kiln_node *d = producer(opt, "d1");
        CHECK(d && d->n_out == 2 && d->in[0] == kiln_model_find_value(opt, "p1") &&
                  opt->values[d->in[0]].format == KILN_FORMAT_NHWC && opt->values[d->out[0]].format == KILN_FORMAT_NCHW &&
                  opt->values[d->out[1]].format == KILN_FORMAT_NCHW,
              "%s: training Dropout reads MaxPool's NHWC output and writes NCHW", label);
        int n_dg = 0;
        for (int i = 0; i < opt->n_nodes; i++) {
            const kiln_node *n = &opt->nodes[i];
            if (strcmp(n->op_type, "DropoutGrad") != 0) continue;
            n_dg++;
            const bool four = opt->values[n->out[0]].ndim == 4;
            bool read_by_pool_grad = false;
            for (int j = 0; j < opt->n_nodes; j++)
                read_by_pool_grad |= strcmp(opt->nodes[j].op_type, "MaxPoolGrad") == 0 && opt->nodes[j].in[0] == n->out[0];
            CHECK(opt->values[n->in[0]].format == KILN_FORMAT_NCHW && opt->values[n->in[1]].format == KILN_FORMAT_NCHW &&
                      opt->values[n->out[0]].format == (four ? KILN_FORMAT_NHWC : KILN_FORMAT_NCHW) &&
                      (!four || read_by_pool_grad),
                  "%s: DropoutGrad %s reads NCHW and writes %s%s", label, n->name, four ? "NHWC" : "NCHW",
                  four ? " for MaxPoolGrad" : "");
        }
        CHECK(n_dg == 2, "%s: %d DropoutGrads, expected 2", label, n_dg);
    }
    CHECK(opt->n_outputs == bg->n_outputs, "%s: output count", label);
    for (int i = 0; i < opt->n_outputs; i++)
        CHECK(opt->values[opt->outputs[i]].format == KILN_FORMAT_NCHW &&
                  strcmp(kiln_model_output_name(opt, i), kiln_model_output_name(bg, i)) == 0,
              "%s: output %d (%s) renamed or not NCHW", label, i, kiln_model_output_name(opt, i));
    /* the same function on the CPU: loss, gradients and statistics */
    same_on_cpu(label, t, ref, opt, kt_rand(KILN_F32, 4, (int64_t[]){64, 1, 28, 28}, 0, 1, 11),
                kt_rand(KILN_I64, 1, (int64_t[]){64}, 0, 10, 12));
out:
    kiln_model_free(opt);
    kiln_model_free(ref);
    kiln_model_free(bg);
    kiln_trainer_free(t);
    kiln_model_free(m);
}

/* A conv-BN-ReLU training graph (the CPU trainer's, BatchNormalization in training mode
 * with its running statistics) through the CUDA trainer's passes in fp32: the training BN
 * and kiln.BatchNormGrad follow the convolution chain NHWC (their CUDA kernels take it;
 * the running statistics and parameter gradients are per-channel vectors, unlabelled), so
 * no conversion stands between the convolutions and the BNs, forward or backward. */
static void bn_training(void) {
    const char *label = "conv-BN-ReLU training graph";
    begin();
    input("x", 4, 3, 8, 8);
    CHECK(kiln_model_add_input(M, "label", KILN_I64, 1, (int64_t[]){4}) == KILN_OK, "label input");
    conv("x", "c1", 3, 8, 3, 1, 1, true, "Relu");
    conv("c1", "c2", 8, 8, 3, 1, 1, true, "Relu");
    add("GlobalAveragePool", "c2", "gap", "");
    add("Flatten", "gap", "flat", "axis=1");
    init_rand("fc.w", 2, (int64_t[]){10, 8}, -0.5, 0.5);
    add("Gemm", "flat,fc.w", "logits", "transB=1");
    add("SoftmaxCrossEntropyLoss", "logits,label", "loss", "");
    finalize((const char *[]){"loss"}, 1);
    kiln_trainer *t = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD};
    CHECK(kiln_trainer_create(M, "loss", &o, &t) == KILN_OK, "%s: %s", label, kiln_context_message(ctx));
    const kiln_pass_options pa = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP32,
                                  .disabled = ~(unsigned)(KILN_PASS_NHWC | KILN_PASS_FUSE_CONV | KILN_PASS_FUSE_LOSS |
                                                          KILN_PASS_FUSE_POOL)};
    kiln_model *opt = NULL;
    if (t && kiln_passes_apply(t->train, &pa, &opt) == KILN_OK) {
        int k = 0, bn = 0;
        for (int i = 0; i < opt->n_nodes; i++)
            bn += strcmp(opt->nodes[i].op_type, "BatchNormalization") == 0 &&
                  kiln_attr_int(&opt->nodes[i], "training_mode", 0) == 1;
        CHECK(bn == 2, "%s: %d BatchNormalization nodes in training mode, want 2", label, bn);
        CHECK(outputs_are(opt, "BatchNormalization", KILN_FORMAT_NHWC, &k) && k == 2, "%s: training BNs NHWC (%d)",
              label, k);
        CHECK(outputs_are(opt, "BatchNormGrad", KILN_FORMAT_NHWC, &k) && k == 2, "%s: BatchNormGrads NHWC (%d)", label,
              k);
        CHECK(outputs_are(opt, "GlobalAveragePoolGrad", KILN_FORMAT_NHWC, &k) && k == 1,
              "%s: GlobalAveragePoolGrad NHWC (%d)", label, k);
        /* no conversion reads a convolution's, a BN's or a BN gradient's output */
        for (int i = 0; i < opt->n_nodes; i++) {
            const kiln_node *n = &opt->nodes[i];
            if (strcmp(n->domain, "kiln") != 0 || strcmp(n->op_type, "ToNCHW") != 0) continue;
            const int v = n->in[0];
            for (int j = 0; j < opt->n_nodes; j++)
                for (int q = 0; q < opt->nodes[j].n_out; q++)
                    if (opt->nodes[j].out[q] == v)
                        CHECK(strcmp(opt->nodes[j].op_type, "Conv") != 0 &&
                                  strcmp(opt->nodes[j].op_type, "BatchNormalization") != 0 &&
                                  strcmp(opt->nodes[j].op_type, "BatchNormGrad") != 0,
                              "%s: kiln.ToNCHW of %s's output", label, opt->nodes[j].op_type);
        }
        for (int i = 0; i < opt->n_nodes; i++) {
            const kiln_node *n = &opt->nodes[i];
            if (strcmp(n->op_type, "BatchNormGrad") != 0) continue;
            for (int q = 1; q < n->n_out; q++)
                CHECK(n->out[q] < 0 || opt->values[n->out[q]].format != KILN_FORMAT_NHWC,
                      "%s: a parameter gradient of %s labelled NHWC", label, n->name);
        }
    } else {
        CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
    }
    kiln_model_free(opt);
    kiln_trainer_free(t);
    kiln_model_free(M);
}

/* The layout pass on M for a CUDA plan: `want` kiln.ChannelShuffle nodes (groups 2, NHWC
 * output), no Transpose left. */
static void check_shuffles(const char *label, int want) {
    kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP32,
                            .disabled = ~(unsigned)KILN_PASS_NHWC};
    kiln_model *opt = NULL;
    if (kiln_passes_apply(M, &po, &opt) != KILN_OK) {
        CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
        return;
    }
    int n = 0;
    for (int i = 0; i < opt->n_nodes; i++) {
        const kiln_node *nd = &opt->nodes[i];
        if (strcmp(nd->op_type, "ChannelShuffle") == 0 && strcmp(nd->domain, "kiln") == 0) {
            n++;
            CHECK(kiln_attr_int(nd, "groups", 0) == 2 && opt->values[nd->out[0]].format == KILN_FORMAT_NHWC &&
                      opt->values[nd->in[0]].format == KILN_FORMAT_NHWC,
                  "%s: %s: groups %lld, NHWC in and out", label, nd->name, (long long)kiln_attr_int(nd, "groups", 0));
        }
    }
    CHECK(n == want && count_onnx(opt, "Transpose") == 0, "%s: %d ChannelShuffle (want %d), %d Transpose", label, n,
          want, count_onnx(opt, "Transpose"));
    kiln_model_free(opt);
}

/* layout_free for a value of an optimized model (static shape of rank <= 4, C == 1 or
 * H*W == 1 right-aligned to (N, C, H, W)); false when its shape is not known. */
static bool bytes_free(const kiln_model *m, int v) {
    const kiln_value *val = &m->values[v];
    if (val->ndim < 0 || val->ndim > 4) return false;
    int64_t a[4] = {1, 1, 1, 1};
    for (int d = 0; d < val->ndim; d++) a[4 - val->ndim + d] = val->dims[d];
    if (a[1] < 0 || a[2] < 0 || a[3] < 0) return false;
    return a[1] == 1 || a[2] * a[3] == 1;
}

/* The CUDA convolutions' rule (src/cuda/table.c, conv_check) on every Conv,
 * kiln.ConvGradInput and kiln.ConvGradWeight of m: X, W and Y (dY) in one layout, tensors
 * with the same bytes in both excepted, and the output in it. Returns the mismatches. */
static int conv_layout_mismatches(const char *label, const kiln_model *m) {
    int bad = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *n = &m->nodes[i];
        int x, w, y;
        if (strcmp(n->op_type, "Conv") == 0 && n->n_in >= 2) x = n->in[0], w = n->in[1], y = n->out[0];
        else if (strcmp(n->op_type, "ConvGradInput") == 0 && n->n_in >= 3) y = n->in[0], w = n->in[1], x = n->in[2];
        else if (strcmp(n->op_type, "ConvGradWeight") == 0 && n->n_in >= 3) x = n->in[0], y = n->in[1], w = n->in[2];
        else continue;
        const int t3[4] = {x, w, y, n->out[0]};
        bool nhwc = false;
        for (int k = 0; k < 3; k++) nhwc |= m->values[t3[k]].format == KILN_FORMAT_NHWC && m->values[t3[k]].ndim != 3;
        for (int k = 0; k < 4; k++) {
            const kiln_value *v = &m->values[t3[k]];
            /* (dW has W's shape, which static inference may not have given it) */
            const bool free_bytes =
                bytes_free(m, t3[k]) || (k == 3 && strcmp(n->op_type, "ConvGradWeight") == 0 && bytes_free(m, w));
            if ((v->format == KILN_FORMAT_NHWC) != nhwc && !free_bytes) {
                printf("FAIL %s: %s '%s': %s is %s, the convolution %s\n", label, n->op_type, n->name, v->name,
                       v->format == KILN_FORMAT_NHWC ? "NHWC" : "NCHW", nhwc ? "NHWC" : "NCHW");
                bad++;
            }
        }
    }
    return bad;
}

/* densenet_like's training graph through the CUDA trainer's passes (fp32 and fp16): every
 * convolution and gradient in one layout with its operands (the CUDA kernels refuse a mix:
 * `kiln train` of torchvision's densenet121 on CUDA failed there, at a ConvGradInput fed
 * by a kiln.ConcatGrad), the Concats and their gradients NHWC with no conversion of their
 * inputs or outputs, and the same loss and gradients on the CPU, bit for bit. */
static void densenet_training(kiln_precision prec) {
    char label[96];
    snprintf(label, sizeof label, "densenet-like training graph%s", prec == KILN_PRECISION_FP32 ? "" : ", fp16");
    printf("-- %s\n", label);
    densenet_like(4, true);
    kiln_trainer *t = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD};
    CHECK(kiln_trainer_create(M, "loss", &o, &t) == KILN_OK, "%s: %s", label, kiln_context_message(ctx));
    const kiln_pass_options pa = {.device = KILN_DEVICE_CUDA, .precision = prec,
                                  .disabled = ~(unsigned)(KILN_PASS_NHWC | KILN_PASS_FUSE_CONV | KILN_PASS_FUSE_LOSS |
                                                          KILN_PASS_FUSE_POOL | KILN_PASS_FUSE_BN)};
    kiln_pass_options base = pa;
    base.disabled |= KILN_PASS_NHWC;
    kiln_model *opt = NULL, *ref = NULL, *bg = t ? backward_graph(t) : NULL;
    if (!bg || kiln_passes_apply(bg, &pa, &opt) != KILN_OK || kiln_passes_apply(bg, &base, &ref) != KILN_OK) {
        CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
        goto out;
    }
    {
        /* the trainer's whole graph too (the update's nodes in it), as the CUDA engine runs it */
        kiln_model *full = NULL;
        CHECK(kiln_passes_apply(t->train, &pa, &full) == KILN_OK, "%s: passes over the whole graph: %s", label,
              kiln_context_message(ctx));
        if (full) fails += conv_layout_mismatches(label, full);
        kiln_model_free(full);
    }
    fails += conv_layout_mismatches(label, opt);
    int k = 0;
    CHECK(outputs_are(opt, "Concat", KILN_FORMAT_NHWC, &k) && k == 2, "%s: Concats NHWC (%d)", label, k);
    int grads = 0;
    for (int i = 0; i < opt->n_nodes; i++) {
        const kiln_node *n = &opt->nodes[i];
        if (strcmp(n->op_type, "ConcatGrad") == 0) {
            grads++;
            for (int q = 0; q < n->n_out; q++)
                CHECK(n->out[q] < 0 || opt->values[n->out[q]].format == KILN_FORMAT_NHWC, "%s: %s output %d is NCHW",
                      label, n->name, q);
        }
        /* no conversion reads a Concat's or a ConcatGrad's output or feeds a Concat */
        if (strcmp(n->domain, "kiln") == 0 && strncmp(n->op_type, "ToN", 3) == 0) {
            const kiln_node *p = NULL;
            for (int j = 0; j < opt->n_nodes && !p; j++)
                for (int q = 0; q < opt->nodes[j].n_out; q++)
                    if (opt->nodes[j].out[q] == n->in[0]) p = &opt->nodes[j];
            CHECK(!p || (strcmp(p->op_type, "Concat") != 0 && strcmp(p->op_type, "ConcatGrad") != 0),
                  "%s: kiln.%s of %s's output", label, n->op_type, p->op_type);
            for (int j = 0; j < opt->n_nodes; j++)
                for (int q = 0; q < opt->nodes[j].n_in; q++)
                    CHECK(!(opt->nodes[j].in[q] == n->out[0] && strcmp(opt->nodes[j].op_type, "Concat") == 0),
                          "%s: kiln.%s feeds %s", label, n->op_type, opt->nodes[j].name);
        }
    }
    CHECK(grads == 2, "%s: %d ConcatGrads, expected 2", label, grads);
    printf("%s: %d ToNHWC, %d ToNCHW\n", label, count_op(opt, "ToNHWC"), count_op(opt, "ToNCHW"));
    same_on_cpu(label, t, ref, opt, kt_rand(KILN_F32, 4, (int64_t[]){4, 3, 8, 8}, -1, 1, 21),
                kt_rand(KILN_I64, 1, (int64_t[]){4}, 0, 10, 22));
out:
    kiln_model_free(opt);
    kiln_model_free(ref);
    kiln_model_free(bg);
    kiln_trainer_free(t);
    kiln_model_free(M);
}

/* test_layout MODEL.onnx: an exported classifier's training graph (kiln train's: the
 * cross-entropy loss appended) through the CUDA passes in fp16, on the CPU; every
 * convolution's operands must share a layout, as CUDA's kernels require. The ctest
 * layout_convnext_train runs it on a two-stage ConvNeXt torchvision exported for training
 * (tests/data/convnext_mini_train.onnx): kiln train on convnext_tiny failed on CUDA with
 * "ConvGradInput ...: X is NHWC, W NCHW and Y NCHW". */
static int probe(const char *path) {
    kiln_model *m = NULL, *tm = NULL, *full = NULL;
    kiln_trainer *t = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD};
    const kiln_pass_options pa = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP16};
    kiln_status st = kiln_model_load_onnx(ctx, path, &m);
    if (!st) st = kiln_model_add_classifier_loss(m, kiln_model_output_name(m, 0), 0, &tm);
    if (!st) st = kiln_trainer_create(tm, "loss", &o, &t);
    if (!st) st = kiln_passes_apply(t->train, &pa, &full);
    if (st) printf("probe: %s\n", kiln_context_message(ctx));
    const int bad = st ? 1 : conv_layout_mismatches(path, full);
    printf("%s: %s\n", path, bad ? "FAIL" : "every convolution's operands share a layout");
    kiln_model_free(full);
    kiln_trainer_free(t);
    kiln_model_free(tm);
    kiln_model_free(m);
    return bad ? 1 : 0;
}

/* test_layout --densenet MODEL.onnx: torchvision's DenseNet (tests/data/densenet_mini.onnx:
 * DenseNet(growth_rate=8, block_config=(2,2), num_init_features=16, num_classes=10), random
 * weights and BN statistics, eval, torch.onnx.export dynamo=False opset 17, batch dynamic)
 * through the CUDA passes, fp32 and fp16: every pre-activation BatchNormalization (after a
 * Concat: fold-bn cannot fold it), its Relu and the Concat it reads are one kiln.ConcatAffine
 * laid out NHWC (no Concat, BN or Relu left), with no conversion but the input's, and the
 * graph computes the same function on the CPU as the unoptimized one. */
static int densenet_export(const char *path) {
    kiln_model *m = NULL;
    if (kiln_model_load_onnx(ctx, path, &m) != KILN_OK) {
        printf("FAIL load %s: %s\n", path, kiln_context_message(ctx));
        return 1;
    }
    int n_bn = 0;
    for (int i = 0; i < m->n_nodes; i++) n_bn += kiln_pass_is(&m->nodes[i], "BatchNormalization");
    CHECK(n_bn > 0, "%s: no BatchNormalization to fuse", path);
    kiln_tensor *want = NULL;
    const bool have_ref = run_cpu_opts(m, 3, ~0u, &want, 1);
    for (int p = 0; p < 2; p++) {
        const kiln_precision prec = p ? KILN_PRECISION_FP16 : KILN_PRECISION_FP32;
        char label[128];
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        snprintf(label, sizeof label, "%.100s %s", base, p ? "fp16" : "fp32");
        const kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = prec};
        kiln_model *opt = NULL, *fused1 = NULL;
        kiln_status st;
        if (kiln_pass_device_has(&po, "FusedElementwise")) {
            st = kiln_passes_apply(m, &po, &opt);
        } else {
            /* a build without CUDA: the fusion passes as for the CPU (they run only for a
             * device with the fused ops' kernels), then precision and layout for CUDA */
            const kiln_pass_options fuse = {.device = KILN_DEVICE_CPU, .precision = KILN_PRECISION_FP32,
                                            .disabled = ~(unsigned)(KILN_PASS_DEAD_NODES | KILN_PASS_FOLD_BN |
                                                                    KILN_PASS_FUSE_CONV | KILN_PASS_FUSE_ELTWISE)};
            const kiln_pass_options rest = {.device = KILN_DEVICE_CUDA, .precision = prec,
                                            .disabled = ~(unsigned)KILN_PASS_NHWC};
            st = kiln_passes_apply(m, &fuse, &fused1);
            if (!st) st = kiln_passes_apply(fused1, &rest, &opt);
            kiln_model_free(fused1);
        }
        if (st) {
            CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
            continue;
        }
        const int f0 = fails;
        int bn = 0, relu = 0, cat = 0, fused = 0, fused_nhwc = 0, affine = 0;
        for (int i = 0; i < opt->n_nodes; i++) {
            const kiln_node *n = &opt->nodes[i];
            bn += kiln_pass_is(n, "BatchNormalization");
            relu += kiln_pass_is(n, "Relu");
            cat += kiln_pass_is(n, "Concat");
            /* every BN of this export reads a Concat: Concat -> BN -> Relu is one
             * kiln.ConcatAffine relu=1 (else a kiln.FusedElementwise BN -> Relu program) */
            const bool ca = kiln_pass_is_kiln(n, "ConcatAffine");
            if (!ca && !kiln_pass_is_kiln(n, "FusedElementwise")) continue;
            fused++;
            fused_nhwc += opt->values[n->out[0]].format == KILN_FORMAT_NHWC;
            affine += ca ? kiln_attr_int(n, "relu", 0) == 1 && n->n_in >= 3
                         : strstr(kiln_attr_string(n, "program", ""), "i0 i1 Mul i2 Add Relu") != NULL;
        }
        CHECK(bn == 0 && relu == 0 && cat == 0, "%s: %d BatchNormalization, %d Relu and %d Concat left", label, bn, relu,
              cat);
        CHECK(fused == n_bn && affine == n_bn && fused_nhwc == n_bn,
              "%s: %d fused nodes (%d Concat -> BN -> Relu, %d NHWC), expected %d each", label, fused, affine, fused_nhwc,
              n_bn);
        CHECK(count_op(opt, "ToNCHW") == 0 && count_op(opt, "ToNHWC") == 1, "%s: %d ToNHWC and %d ToNCHW, expected 1 and 0",
              label, count_op(opt, "ToNHWC"), count_op(opt, "ToNCHW"));
        kiln_tensor *got = NULL;
        if (have_ref && run_cpu_opts(opt, 3, ~0u, &got, 1)) {
            char l[200];
            snprintf(l, sizeof l, "%s: output vs the unoptimized graph", label);
            fails += kiln_tensor_compare(got, want, p ? 3e-2 : 1e-4, p ? 3e-2 : 1e-4, l);
        } else {
            fails++;
        }
        if (fails == f0) printf("ok   %s: %d Concat -> BN -> Relu as one NHWC fused kernel each, same function\n", label, n_bn);
        kiln_tensor_free(got);
        kiln_model_free(opt);
    }
    kiln_tensor_free(want);
    kiln_model_free(m);
    printf("%s\n", fails ? "FAILED" : "densenet checks passed");
    return fails ? 1 : 0;
}

/* test_layout --infer MODEL.onnx: an exported classifier's inference graph through every
 * CUDA pass (fp32 and fp16), on the CPU. A permute of an NHWC tensor to channels-last and
 * back (ConvNeXt's blocks and LayerNorm2d) must move no byte: every Transpose left must be
 * a view in a device plan, and no kiln.ToNHWC / kiln.ToNCHW may stand between the first
 * convolution and the head (one ToNHWC of the input at most, and none back). The function
 * is the same on the CPU as with the layout pass off. The ctest layout_convnext_infer runs
 * it on a two-stage ConvNeXt torchvision exported for inference
 * (tests/data/convnext_mini_infer.onnx): main's plans of convnext_tiny copied 46
 * Transposes and converted 19 values (8.5 ms of 34.5 at batch 256 on an H100). */
static int probe_infer(const char *path, bool dump) {
    kiln_model *m = NULL;
    const int bad0 = fails;
    if (kiln_model_load_onnx(ctx, path, &m) != KILN_OK) {
        printf("probe: %s\n", kiln_context_message(ctx));
        return 1;
    }
    for (int pr = 0; pr < 2; pr++) {
        const kiln_precision prec = pr ? KILN_PRECISION_FP16 : KILN_PRECISION_FP32;
        const char *label = pr ? "fp16" : "fp32";
        kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = prec};
        kiln_pass_options base = po;
        base.disabled |= KILN_PASS_NHWC;
        kiln_model *opt = NULL, *ref = NULL;
        if (kiln_passes_apply(m, &po, &opt) != KILN_OK || kiln_passes_apply(m, &base, &ref) != KILN_OK) {
            CHECK(0, "%s %s: passes: %s", path, label, kiln_context_message(ctx));
            kiln_model_free(opt);
            continue;
        }
        const int batch = 2;
        kiln_tensor *in = NULL;
        {
            const kiln_value *v = &opt->values[opt->inputs[0]];
            int64_t dims[KILN_MAX_DIMS];
            for (int d = 0; d < v->ndim; d++) dims[d] = v->dims[d] < 0 ? batch : v->dims[d];
            in = kt_rand(v->dtype, v->ndim, dims, -1, 1, 5);
        }
        kiln_plan *p = NULL;
        int copies = 0, transposes = 0;
        if (kiln_plan_build(opt, &in, true, false, &p) == KILN_OK) {
            kiln_plan_view_t v;
            kiln_plan_view(p, &v);
            /* in CUDA builds: every node of the device-style plan (its tensors carry the
             * layouts) has a CUDA kernel for its dtypes, shapes and layouts */
            const kiln_backend_i *cuda = kiln_backend_for(KILN_DEVICE_CUDA);
            int refused = 0;
            for (int e = 0; cuda && e < v.n_exec; e++) {
                kiln_op_ctx hc = *kiln_plan_exec_op_ctx(&v, e);
                if (cuda->supports(&hc) != KILN_OK) {
                    refused++;
                    printf("  %s: cuda refuses %s: %s\n", label, hc.node->name, kiln_context_message(ctx));
                }
            }
            if (cuda) {
                CHECK(refused == 0, "%s %s: %d nodes have no CUDA kernel", path, label, refused);
                printf("%s %s: %d of %d nodes have a CUDA kernel\n", path, label, v.n_exec - refused, v.n_exec);
            }
            for (int i = 0; i < opt->n_nodes; i++) {
                const kiln_node *n = &opt->nodes[i];
                if (dump) {
                    printf("  %-18s %-40.40s", n->op_type, n->name);
                    for (int k = 0; k < n->n_in + n->n_out; k++) {
                        const int x = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
                        if (x >= 0)
                            printf(" %s%s%s", k == n->n_in ? "-> " : "", opt->values[x].name,
                                   v.vt[x].format == KILN_FORMAT_NHWC ? "(nhwc)" : "");
                    }
                    printf("\n");
                }
                if (strcmp(n->op_type, "Transpose") != 0 || n->domain[0]) continue;
                transposes++;
                if (!(v.offset[n->in[0]] != SIZE_MAX && v.offset[n->in[0]] == v.offset[n->out[0]])) {
                    copies++;
                    printf("  %s: Transpose %s moves bytes\n", label, n->name);
                }
            }
            kiln_plan_free(p);
        } else {
            CHECK(0, "%s %s: plan: %s", path, label, kiln_context_message(ctx));
        }
        kiln_tensor_free(in);
        const int a = count_op(opt, "ToNHWC"), b = count_op(opt, "ToNCHW");
        printf("%s %s: %d Transposes (%d copies), %d ToNHWC, %d ToNCHW\n", path, label, transposes, copies, a, b);
        CHECK(transposes > 0 && copies == 0, "%s %s: %d of %d Transposes copy", path, label, copies, transposes);
        CHECK(a <= 1 && b == 0, "%s %s: %d ToNHWC and %d ToNCHW, expected at most 1 and 0", path, label, a, b);
        kiln_tensor *want[1] = {0}, *got[1] = {0};
        if (run_cpu(ref, batch, want, 1) && run_cpu(opt, batch, got, 1)) {
            char l[160];
            snprintf(l, sizeof l, "%s %s: the same function with the layout pass", path, label);
            fails += kiln_tensor_compare(got[0], want[0], 0, 0, l);
        }
        kiln_tensor_free(want[0]);
        kiln_tensor_free(got[0]);
        kiln_model_free(opt);
        kiln_model_free(ref);
    }
    kiln_model_free(m);
    printf("%s: %s\n", path, fails == bad0 ? "every permute a view, no conversions" : "FAIL");
    return fails == bad0 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    if (argc > 2 && strcmp(argv[1], "--densenet") == 0) return densenet_export(argv[2]);
    if (argc > 2 && (strcmp(argv[1], "--infer") == 0 || strcmp(argv[1], "--dump") == 0))
        return probe_infer(argv[2], strcmp(argv[1], "--dump") == 0);
    if (argc > 1) return probe(argv[1]);

    bn_training();
    densenet_training(KILN_PRECISION_FP32);
    densenet_training(KILN_PRECISION_FP16);
    convnext_training(KILN_PRECISION_FP32, 4);
    convnext_training(KILN_PRECISION_FP16, 4);
    convnext_training(KILN_PRECISION_FP16, -1);

    mnist_training(KILN_PRECISION_FP32, 64);
    mnist_training(KILN_PRECISION_FP16, 64);
    /* the trainer's own graph has a symbolic batch: conv1's weight gradient (one input
     * channel) must still need no conversion, though static inference knows no shapes */
    mnist_training(KILN_PRECISION_FP32, -1);
    mnist_training(KILN_PRECISION_FP16, -1);

    vit_patch(false);
    check_graph("vit patch embedding: tokens read from the NHWC conv output", &(expect){1, 0, {"pe"}, {"ln", "y"}}, 2);
    vit_patch_views();
    kiln_model_free(M);
    vit_patch(true);
    check_graph("vit patch embedding 8x8 stride 8, conv-patch off", &(expect){1, 0, {"pe"}, {"ln", "y"}}, 2);
    check_graph_ex("vit patch embedding 8x8 stride 8 as a product (conv-patch)", &(expect){0, 0, {NULL}, {"ln", "y"}}, 2,
                   KILN_PRECISION_FP32, KILN_PASS_CONV_PATCH);
    vit_patch_product();
    kiln_model_free(M);

    qkv_split();
    check_graph("qkv split: gathered before the transpose", &(expect){0, 0, {NULL}, {NULL}}, 1);
    qkv_split_checks();
    kiln_model_free(M);

    convnext_like();
    check_graph("convnext-like: permutes to and from channels-last, no conversions inside",
                &(expect){1, 1, {"stem", "t2", "sc", "res"}, {"t1", "ln", "h2"}}, 2);
    convnext_views();
    kiln_model_free(M);

    resnet_like(2, false);
    check_graph("resnet-like", &(expect){1, 0, {"stem", "pool", "b1sum", "b2", "stem.w", "b2s.w"}, {"gap", "flat", "x"}},
                2);
    kiln_model_free(M);
    /* symbolic batch: ranks come from the ops, not from static inference */
    resnet_like(-1, false);
    printf("symbolic batch: rank of b1 known to static inference: %d\n", M->values[kiln_model_find_value(M, "b1")].ndim);
    check_graph("resnet-like, symbolic batch", &(expect){1, 0, {"stem", "b1", "b2", "b2a.w"}, {"gap"}}, 3);
    kiln_model_free(M);
    /* an NHWC feature map as a second output: converted into its own name */
    resnet_like(2, true);
    check_graph("resnet-like with a feature output", &(expect){1, 1, {"stem", "b1"}, {"b2", "gap"}}, 2);
    kiln_model_free(M);

    /* after the precision pass: the input is cast to f16 first, then converted once; the
     * f16 weights the precision pass made are the ones marked NHWC */
    resnet_like(2, false);
    check_graph_ex("resnet-like, fp16", &(expect){1, 0, {"stem", "b2"}, {"gap"}}, 2, KILN_PRECISION_FP16, 0);
    /* after the fusion passes: kiln.FusedConv chains, one conversion still */
    const unsigned fusion = KILN_PASS_FOLD_BN | KILN_PASS_FUSE_CONV | KILN_PASS_FUSE_ELTWISE;
    check_graph_ex("resnet-like, fused", &(expect){1, 0, {"stem", "pool", "b1", "b2"}, {"gap"}}, 2,
                   KILN_PRECISION_FP32, fusion);
    check_graph_ex("resnet-like, fused, fp16", &(expect){1, 0, {"stem", "b2"}, {"gap"}}, 2, KILN_PRECISION_FP16,
                   fusion | KILN_PASS_PAD_CHANNELS);
    /* with the stem's 3 channels padded to 4 (a Pad before the stem, NCHW) */
    check_graph_ex("resnet-like, bf16, channels padded", &(expect){1, 0, {"stem", "b2"}, {"gap"}}, 2,
                   KILN_PRECISION_BF16, KILN_PASS_PAD_CHANNELS);
    /* the Cast (and the Pad) in front of the conversion are folded into it; the Cast back
     * to f32 of the logits stays */
    check_input_chain("resnet-like, fp16: input chain", KILN_PRECISION_FP16, 0, true, KILN_F16, 0, 1);
    check_input_chain("resnet-like, bf16, channels padded: input chain", KILN_PRECISION_BF16, KILN_PASS_PAD_CHANNELS,
                      true, KILN_BF16, 1, 1);
    check_input_chain("resnet-like, fused, fp16, channels padded: input chain", KILN_PRECISION_FP16,
                      fusion | KILN_PASS_PAD_CHANNELS, true, KILN_F16, 1, 1);
    check_input_chain("resnet-like, fp32: input chain", KILN_PRECISION_FP32, 0, true, KILN_DTYPE_UNDEFINED, 0, 0);
    kiln_model_free(M);

    /* symbolic batch: the channel count comes from the Pad, not from static shapes */
    resnet_like(-1, false);
    check_graph_ex("resnet-like, symbolic batch, fused, fp16, channels padded", &(expect){1, 0, {"stem", "b2"}, {"gap"}},
                   3, KILN_PRECISION_FP16, fusion | KILN_PASS_PAD_CHANNELS);
    check_input_chain("resnet-like, symbolic batch, fused, fp16, channels padded: input chain", KILN_PRECISION_FP16,
                      fusion | KILN_PASS_PAD_CHANNELS, true, KILN_F16, 1, 1);
    kiln_model_free(M);

    /* x's Cast has a second reader (GlobalAveragePool of x): it stays, the Pad is folded */
    shared_input();
    check_graph_ex("input read twice, fp16, channels padded", &(expect){1, 1, {NULL}, {"gx", "c1"}}, 2,
                   KILN_PRECISION_FP16, KILN_PASS_PAD_CHANNELS);
    check_input_chain("input read twice, fp16, channels padded: input chain", KILN_PRECISION_FP16,
                      KILN_PASS_PAD_CHANNELS, false, KILN_DTYPE_UNDEFINED, 1, 3);
    kiln_model_free(M);

    /* symbolic batch + fusion: the residual Add + Relu cannot join the FusedConv (its
     * shape is not static) and becomes a same-shape kiln.FusedElementwise, which stays
     * NHWC: still one conversion (on the H200 the conversions around each such block cost
     * ResNet-50 fp16 38% of its throughput) */
    resnet_like(-1, false);
    check_graph_ex("resnet-like, symbolic batch, fused, fp16", &(expect){1, 0, {"stem", "b2"}, {"gap"}}, 3,
                   KILN_PRECISION_FP16, fusion);
    kiln_model_free(M);

    mobilenet_like(2);
    check_graph("mobilenet-like", &(expect){1, 0, {"stem", "dw1", "res2", "head", "dw2.w"}, {"gap", "flat", "zero"}}, 2);
    kiln_model_free(M);
    mobilenet_like(2);
    check_graph_ex("mobilenet-like, fused", &(expect){1, 0, {"stem", "dw1", "res2", "head"}, {"gap", "flat"}}, 2,
                   KILN_PRECISION_FP32, KILN_PASS_FOLD_BN | KILN_PASS_FUSE_CONV | KILN_PASS_FUSE_ELTWISE);
    kiln_model_free(M);
    mobilenet_like(-1);
    check_graph("mobilenet-like, symbolic batch", &(expect){1, 0, {"dw2", "res2"}, {"gap"}}, 4);
    kiln_model_free(M);

    se_like();
    check_graph("squeeze-and-excitation", &(expect){1, 0, {"c1", "squeeze", "gate", "excited"}, {"gap", "flat"}}, 2);
    kiln_model_free(M);

    vgg_like();
    check_graph("vgg-like", &(expect){1, 1, {"c1", "p1"}, {"flat"}}, 2);
    kiln_model_free(M);

    sum_to_like((const int64_t[]){8, 1, 1}, 3);
    check_graph("bias gradient in NHWC (ReduceSumTo to (8,1,1))", &(expect){1, 0, {"c1", "c2"}, {"gap", "db"}}, 2);
    kiln_model_free(M);
    sum_to_like((const int64_t[]){2, 1, 8, 8}, 4);
    check_graph("ReduceSumTo to (2,1,8,8)", &(expect){1, 0, {"c1", "c2"}, {"gap", "db"}}, 2);
    kiln_model_free(M);
    sum_to_like((const int64_t[]){1, 8, 8, 8}, 4);
    check_graph("ReduceSumTo to (1,8,8,8): c1 converted", &(expect){1, 1, {"c1", "c2"}, {"gap", "db"}}, 2);
    kiln_model_free(M);

    max_grad_nhwc();
    check_graph("MaxGrad of NHWC convolutions", &(expect){1, 0, {"c1", "m", "g", "c3"}, {"gap"}}, 2);
    kiln_model_free(M);

    dropout_grad_checks();

    /* ShuffleNet: the channel halves (Slice), the Concat and the channel shuffle (as one
     * kiln.ChannelShuffle) stay NHWC: the input's conversion only */
    for (int dyn = 0; dyn < 2; dyn++) {
        shufflenet_like(2, dyn);
        check_graph(dyn ? "shufflenet-like, shapes from Shape" : "shufflenet-like",
                    &(expect){1, 0, {"u1.a", "u1.b", "u1.cat", "u1", "u2", "head"}, {"gap"}}, 2);
        check_shuffles(dyn ? "shufflenet-like, shapes from Shape" : "shufflenet-like", 2);
        kiln_model_free(M);
    }
    shufflenet_like(-1, true);
    check_graph("shufflenet-like, symbolic batch", &(expect){1, 0, {"u1.cat", "u1", "u2"}, {"gap"}}, 3);
    check_shuffles("shufflenet-like, symbolic batch", 2);
    kiln_model_free(M);

    /* DenseNet: the Concats of NHWC features stay NHWC (no conversion before or after) */
    densenet_like(2, false);
    check_graph("densenet-like", &(expect){1, 0, {"stem", "f1", "cat1", "cat2", "f2", "tp"}, {"gap", "flat"}}, 2);
    check_graph_ex("densenet-like, fp16", &(expect){1, 0, {"cat1", "cat2"}, {"gap"}}, 2, KILN_PRECISION_FP16, 0);
    kiln_model_free(M);
    densenet_like(-1, false);
    check_graph("densenet-like, symbolic batch", &(expect){1, 0, {"cat1", "cat2", "f2"}, {"gap"}}, 3);
    kiln_model_free(M);

    mixed();
    check_graph("mixed", &(expect){2, 2, {"c1", "scaled", "sum"}, {"scale", "cat", "soft"}}, 2);
    kiln_model_free(M);

    kiln_context_free(ctx);
    printf("%s\n", fails ? "FAILED" : "all layout checks passed");
    return fails ? 1 : 0;
}
