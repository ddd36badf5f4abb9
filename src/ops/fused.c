/* fused.c — activation attribute and epilogue shared by kiln.FusedConv and kiln.FusedGemm;
 * see fused.h. */
#include "fused.h"

#include "../core/optest.h"
#include "unary.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    kiln_act_kind kind;
} acts[] = {
    {"", KILN_ACT_NONE},
    {"Relu", KILN_ACT_RELU},
    {"LeakyRelu", KILN_ACT_LEAKY_RELU},
    {"Clip", KILN_ACT_CLIP},
    {"Sigmoid", KILN_ACT_SIGMOID},
    {"HardSwish", KILN_ACT_HARD_SWISH},
    {"HardSigmoid", KILN_ACT_HARD_SIGMOID},
    {"Tanh", KILN_ACT_TANH},
    {"Silu", KILN_ACT_SILU},
    {"Gelu", KILN_ACT_GELU},
    {"GeluTanh", KILN_ACT_GELU_TANH},
};

bool kiln_fused_act_kind(const char *name, kiln_act_kind *kind) {
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        if (strcmp(acts[i].name, name) == 0) {
            *kind = acts[i].kind;
            return true;
        }
    return false;
}

kiln_status kiln_fused_act_get(kiln_op_ctx *c, const char *alpha_attr, const char *beta_attr,
                               kiln_fused_act *a) {
    const char *name = kiln_attr_string(c->node, "activation", "");
    memset(a, 0, sizeof *a);
    KILN_OP_CHECK(c, kiln_fused_act_kind(name, &a->kind), KILN_ERR_UNSUPPORTED,
                  "attribute activation = '%s' is not one of Relu, LeakyRelu, Clip, Sigmoid, "
                  "HardSwish, HardSigmoid, Tanh, Silu, Gelu, GeluTanh (or empty)", name);
    const bool hs = a->kind == KILN_ACT_HARD_SIGMOID;
    a->alpha = kiln_attr_float(c->node, alpha_attr, hs ? 0.2f : 0.01f);
    a->beta = kiln_attr_float(c->node, beta_attr, 0.5f);
    a->lo = kiln_attr_float(c->node, "act_min", -INFINITY);
    a->hi = kiln_attr_float(c->node, "act_max", INFINITY);
    return KILN_OK;
}

/* One row of the epilogue in T (float or double): v = y + b + z, then the activation.
 * One loop per activation, so that the simple ones vectorize; the comparisons are written
 * as in the ONNX ops' files (Clip's order makes min > max give max, NaN passes). */
#define ROW_LOOP(T, EXPR)                                \
    for (int64_t i = 0; i < n; i++) {                   \
        const T v = y[i] + b + (z ? z[i] : (T)0);       \
        y[i] = (EXPR);                                  \
    }

/* Silu and the Gelus as src/ops/sigmoid.c and gelu.c compute them: exp only of a
 * non-positive argument, 1 + erf(z) as erfc(-z), the infinities as their limits. */
#define DEFINE_SMOOTH(SFX, T, EXP, ERFC)                                                       \
    static T silu_##SFX(T v) { return v >= 0 ? v / ((T)1 + EXP(-v)) : v * EXP(v) / ((T)1 + EXP(v)); } \
    static T gelu_##SFX(T v) {                                                                 \
        if (isinf(v)) return v > 0 ? v : (T)0;                                                 \
        return (T)0.5 * v * ERFC(-v * (T)0.70710678118654752440);                             \
    }                                                                                          \
    static T gelu_tanh_##SFX(T v) {                                                            \
        if (isinf(v)) return v > 0 ? v : (T)0;                                                 \
        const T u2 = (T)(2 * 0.79788456080286535588) * (v + (T)0.044715 * v * v * v);         \
        return u2 >= 0 ? v / ((T)1 + EXP(-u2)) : v * EXP(u2) / ((T)1 + EXP(u2));              \
    }

DEFINE_SMOOTH(f32, float, expf, erfcf)
DEFINE_SMOOTH(f64, double, exp, erfc)

#define DEFINE_ROW(SFX, T, EXP, TANH)                                                          \
    static void row_##SFX(const kiln_fused_act *a, T *y, const T *z, T b, int64_t n) {         \
        const T alpha = (T)a->alpha, beta = (T)a->beta, lo = (T)a->lo, hi = (T)a->hi;         \
        switch (a->kind) {                                                                     \
        case KILN_ACT_NONE: ROW_LOOP(T, v) break;                                                 \
        case KILN_ACT_RELU: ROW_LOOP(T, v > 0 ? v : (T)0) break;                                  \
        case KILN_ACT_LEAKY_RELU: ROW_LOOP(T, v < 0 ? alpha * v : v) break;                       \
        case KILN_ACT_CLIP: ROW_LOOP(T, (v < lo ? lo : v) > hi ? hi : (v < lo ? lo : v)) break;   \
        case KILN_ACT_SIGMOID:                                                                 \
            ROW_LOOP(T, v >= 0 ? (T)1 / ((T)1 + EXP(-v)) : EXP(v) / ((T)1 + EXP(v))) break;       \
        case KILN_ACT_HARD_SWISH:                                                              \
            ROW_LOOP(T, v * ((v / 6 + (T)0.5) < 0 ? (T)0 : (v / 6 + (T)0.5) > 1 ? (T)1            \
                                                                  : (v / 6 + (T)0.5)))         \
            break;                                                                             \
        case KILN_ACT_HARD_SIGMOID:                                                            \
            ROW_LOOP(T, (alpha * v + beta) < 0 ? (T)0 : (alpha * v + beta) > 1 ? (T)1             \
                                                                           : alpha * v + beta) \
            break;                                                                             \
        case KILN_ACT_TANH: ROW_LOOP(T, TANH(v)) break;                                           \
        case KILN_ACT_SILU: ROW_LOOP(T, silu_##SFX(v)) break;                                     \
        case KILN_ACT_GELU: ROW_LOOP(T, gelu_##SFX(v)) break;                                     \
        case KILN_ACT_GELU_TANH: ROW_LOOP(T, gelu_tanh_##SFX(v)) break;                           \
        }                                                                                      \
    }

DEFINE_ROW(f32, float, expf, tanhf)
DEFINE_ROW(f64, double, exp, tanh)

void kiln_fused_epilogue(const kiln_fused_act *a, kiln_tensor *y, int64_t channels, int64_t inner,
                         const kiln_tensor *bias, const kiln_tensor *z) {
    const int64_t total = kiln_tensor_numel(y);
    const int64_t rows = channels > 0 && inner > 0 ? total / (channels * inner) * channels : 0;
    if (a->kind == KILN_ACT_NONE && !bias && !z) return;
    const int nt = kiln_cpu_threads();
    if (y->dtype == KILN_F32) {
        float *yp = y->data;                        // (rows, inner)
        const float *zp = z ? z->data : NULL;       // (rows, inner) or NULL
        const float *bp = bias ? bias->data : NULL; // (channels) or NULL
#pragma omp parallel for schedule(static) if (total >= KILN_UNARY_PAR_MIN) num_threads(nt)
        for (int64_t r = 0; r < rows; r++)
            row_f32(a, yp + r * inner, zp ? zp + r * inner : NULL, bp ? bp[r % channels] : 0.0f,
                    inner);
        return;
    }
    if (y->dtype == KILN_F64) {
        double *yp = y->data;
        const double *zp = z ? z->data : NULL;
        const double *bp = bias ? bias->data : NULL;
#pragma omp parallel for schedule(static) if (total >= KILN_UNARY_PAR_MIN) num_threads(nt)
        for (int64_t r = 0; r < rows; r++)
            row_f64(a, yp + r * inner, zp ? zp + r * inner : NULL, bp ? bp[r % channels] : 0.0,
                    inner);
        return;
    }
    /* f16 / bf16: one element at a time through double (the reference, not a hot path) */
#pragma omp parallel for schedule(static) if (total >= KILN_UNARY_PAR_MIN) num_threads(nt)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t base = r * inner;
        const double b = bias ? kiln_get_f64(bias, r % channels) : 0.0;
        for (int64_t i = 0; i < inner; i++) {
            double v = kiln_get_f64(y, base + i);
            double zz = z ? kiln_get_f64(z, base + i) : 0.0;
            row_f64(a, &v, z ? &zz : NULL, b, 1);
            kiln_set_f64(y, base + i, v);
        }
    }
}

#ifdef KILN_OPTESTS
kiln_tensor *kiln_fused_test_eval(const char *op, const char *attrs, int n_in, kiln_tensor **in) {
    kiln_context ctx = {0};
    kiln_clear_error(&ctx); /* messages are per thread, keyed by address: start empty */
    kiln_node node = {0};
    kiln_tensor *out = NULL;
    node.op_type = (char *)op;
    node.name = (char *)"reference";
    node.domain = (char *)"";
    node.op = kiln_op_index(op);
    if (node.op < 0) {
        node.op = kiln_op_index_domain("kiln", op);
        node.domain = (char *)"kiln";
    }
    node.opset = 21;
    node.n_in = n_in;
    node.n_out = 1;
    if (node.op < 0 || kiln_attrs_parse(&ctx, attrs, &node.attrs, &node.n_attrs)) {
        printf("FAIL reference %s: op unknown or attributes '%s' bad\n", op, attrs);
        return NULL;
    }
    if (kiln_op_eval(&ctx, &node, n_in, in, 1, &out)) {
        printf("FAIL reference %s: %s\n", op, kiln_context_message(&ctx));
        out = NULL;
    }
    for (int i = 0; i < node.n_attrs; i++) kiln_attr_clear(&node.attrs[i]);
    free(node.attrs);
    return out;
}
#endif /* KILN_OPTESTS */
