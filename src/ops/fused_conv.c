/*
 * fused_conv.c — kiln.FusedConv(X, W, B?, Z?) -> Y = act(conv(X, W) + B + Z), an internal op
 * the fuse-conv pass (src/passes/fuse_conv.c) makes from Conv [+ Add] [+ activation].
 *   X, W, B and every Conv attribute (kernel_shape, strides, pads, auto_pad, dilations,
 *   group) as ONNX Conv (opsets 11..21); Z, the residual, has Y's shape and dtype and is
 *   added before the activation (ResNet's relu(bn(conv(x)) + identity), which is what
 *   cuDNN's cudnnConvolutionBiasActivationForward computes). `activation` and its
 *   parameters (alpha, beta, act_min, act_max) as fused.h lists them (Silu, Gelu and
 *   GeluTanh included: exporters' x * sigmoid(x) and Gelu chains).
 *   Dtypes: Conv's (f32, f64; f16 / bf16 computed in f32 by Conv, then the epilogue).
 * Method: Conv's own CPU kernel (conv.c, on conv_common's im2col + BLAS) computes
 *   conv(X, W) without the bias, then one pass over Y adds bias and residual and applies
 *   the activation while the output is in cache row by row.
 * Statistics outputs (issue 12; the conv-bn-stats pass, src/passes/conv_bn_stats.c, in CUDA
 *   training graphs): optional outputs 1 and 2, both or neither, (M): per output channel
 *   the sum and the sum of squares of Y over every dim but M, of Y as written (after the
 *   epilogue, and for f16 / bf16 outputs of the rounded values: what a BatchNormalization
 *   reading Y would sum; cuDNN's GenStats sums the values the convolution stores). Summed in
 *   double. Their dtype: f64 for an f32 or f64 Y, f32 for an f16 or bf16 Y (what cuDNN's
 *   GenStats writes). Not f32 for f32 training: the BatchNormalization computes
 *   var = sumsq / M - mean^2, and the sums' rounding to f32 (6e-8 of sumsq) grows by
 *   mean^2 / var there; on a channel of small variance beside its mean that was 1e-5 of
 *   the loss after one step of resnet18, and past the two-pass statistics' tolerance under
 *   SyncBatchNorm (bench/NOTES.md, the thirty-second session). For an f16 / bf16 Y the
 *   values themselves hold 1e-3. A training BatchNormalization of Y takes them as its
 *   inputs 6 and 7 instead of its own statistics pass over Y.
 * Prologue (issue 12; the conv-bn-prologue pass, src/passes/conv_bn_prologue.c, in CUDA
 *   training graphs): optional input 4, P, f32 (2, C): per input channel a (row 0) and k
 *   (row 1), with attribute prologue_relu (0 or 1): the convolution reads X' = act(a * X + k)
 *   instead of X, computed in f32 (f64 for f64 X) and not rounded to X's dtype (cuDNN's
 *   prologue is a virtual fp32 tensor), padded with zeros after it (as the unfused graph pads
 *   the BN's output). P is a training BatchNormalization's output 4 (its apply's
 *   coefficients), whose output 0 then need not exist.
 * No gradient: the op exists only in plans made after autograd (inference, and the passes
 *   the trainer applies to a differentiated graph).
 */
#include "../core/optest.h"
#include "conv_common.h"
#include "fused.h"
#include "fused_conv.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

extern const kiln_op_def kiln_op_conv;

/* The context Conv's kernel sees: X, W only (the bias is added by the epilogue), Y only. */
static kiln_op_ctx conv_view(const kiln_op_ctx *c) {
    kiln_op_ctx v = *c;
    if (v.n_in > 2) v.n_in = 2;
    if (v.n_out > 1) v.n_out = 1;
    return v;
}

static const kiln_tensor *bias_in(const kiln_op_ctx *c) { return c->n_in > 2 ? c->in[2] : NULL; }
static const kiln_tensor *z_in(const kiln_op_ctx *c) { return c->n_in > 3 ? c->in[3] : NULL; }

static bool has_out(const kiln_op_ctx *c, int i) { return c->n_out > i && c->out[i] != NULL; }

/* kiln's input 4: the prologue P (f32 (2, C)), X read as act(a * X + k) (conv_common.h) */
static const kiln_tensor *prologue_in(const kiln_op_ctx *c) { return c->n_in > 4 ? c->in[4] : NULL; }
static bool prologue_relu(const kiln_op_ctx *c) { return kiln_attr_int(c->node, "prologue_relu", 0) != 0; }

static kiln_status infer(kiln_op_ctx *c) {
    kiln_fused_act a;
    kiln_status st = kiln_fused_act_get(c, "alpha", "beta", &a);
    if (st) return st;
    /* Conv checks X, W, B and the attributes (B is checked with the view including it). */
    kiln_op_ctx v = *c;
    if (v.n_in > 3) v.n_in = 3;
    if (v.n_out > 1) v.n_out = 1;
    if ((st = kiln_op_conv.infer(&v))) return st;
    const kiln_tensor *y = c->out[0], *z = z_in(c);
    if (prologue_in(c) && (st = kiln_conv_prologue_check(c, c->in[0], prologue_in(c), 4))) return st;
    if (z) {
        char ys[128];
        KILN_OP_CHECK(c, z->dtype == y->dtype, KILN_ERR_TYPE, "residual Z must have X's dtype %s",
                      kiln_dtype_name(y->dtype));
        bool same = z->ndim == y->ndim;
        for (int i = 0; same && i < y->ndim; i++) same = z->dims[i] == y->dims[i];
        KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "residual Z must have the output's shape %s",
                      kiln_shape_str(y, ys, sizeof ys));
    }
    if (has_out(c, 1) || has_out(c, 2)) { /* the statistics outputs: both, (M), f64 or f32 by Y's dtype */
        KILN_OP_CHECK(c, has_out(c, 1) && has_out(c, 2), KILN_ERR_INVALID_ARGUMENT,
                      "outputs 1 and 2 (sum and sum of squares of Y per channel) are given together, got only output %d",
                      has_out(c, 1) ? 1 : 2);
        KILN_OP_CHECK(c, y->ndim >= 3, KILN_ERR_SHAPE, "statistics outputs need a Y of rank >= 3, got rank %d",
                      y->ndim);
        for (int k = 1; k <= 2; k++) kiln_tensor_set_shape(c->out[k], kiln_fused_conv_stats_dtype(y->dtype), 1, &y->dims[1]);
    }
    return KILN_OK;
}

/* Outputs 1 and 2: per channel m of Y (N, M, inner), the sum and sum of squares of the
 * values Y holds, in double (rounded to f32 once where the outputs are f32). */
static void channel_stats(const kiln_tensor *y, int64_t M, int64_t inner, kiln_tensor *sum, kiln_tensor *sq) {
    const int64_t N = M > 0 && inner > 0 ? kiln_tensor_numel(y) / (M * inner) : 0;
    const bool f32 = y->dtype == KILN_F32;
    #pragma omp parallel for if (N * M * inner > (1 << 15)) schedule(static)
    for (int64_t m = 0; m < M; m++) {
        double s = 0, q = 0;
        for (int64_t n = 0; n < N; n++) {
            const int64_t base = (n * M + m) * inner;
            for (int64_t i = 0; i < inner; i++) {
                const double v = f32 ? ((const float *)y->data)[base + i] : kiln_get_f64(y, base + i);
                s += v;
                q += v * v;
            }
        }
        kiln_set_f64(sum, m, s);
        kiln_set_f64(sq, m, q);
    }
}

static size_t workspace(const kiln_op_ctx *c) {
    kiln_op_ctx v = conv_view(c);
    /* X' in its own scratch beside what Conv stages (a superset of its stage of X) */
    return kiln_op_conv.cpu_workspace(&v) + (prologue_in(c) ? kiln_conv_prologue_size(c->in[0]) : 0);
}

static kiln_status forward(kiln_op_ctx *c) {
    kiln_fused_act a;
    kiln_status st = kiln_fused_act_get(c, "alpha", "beta", &a);
    if (st) return st;
    kiln_op_ctx v = conv_view(c);
    if ((st = prologue_in(c) ? kiln_conv_forward_prologue(&v, prologue_in(c), prologue_relu(c)) : kiln_op_conv.cpu_forward(&v)))
        return st;
    kiln_tensor *y = c->out[0]; // (N, M, O...)
    const int64_t M = y->dims[1];
    const int64_t inner = y->dims[0] * M > 0 ? kiln_tensor_numel(y) / (y->dims[0] * M) : 0;
    kiln_fused_epilogue(&a, y, M, inner, bias_in(c), z_in(c));
    if (has_out(c, 1) && has_out(c, 2)) channel_stats(y, M, inner, c->out[1], c->out[2]);
    return KILN_OK;
}

/* ------------------------------------------------------------------- tests */

#ifdef KILN_OPTESTS
/* The unfused graph, op by op through the registry's reference kernels: Conv, Add of the
 * residual, then the activation as its ONNX op. */
static kiln_tensor *unfused(const char *conv_attrs, const char *act, const char *act_attrs,
                            double lo, double hi, kiln_tensor *x, kiln_tensor *w, kiln_tensor *b,
                            kiln_tensor *z) {
    kiln_tensor *y = kiln_fused_test_eval("Conv", conv_attrs, 3, (kiln_tensor *[]){x, w, b});
    if (y && z) {
        kiln_tensor *s = kiln_fused_test_eval("Add", "", 2, (kiln_tensor *[]){y, z});
        kiln_tensor_free(y);
        y = s;
    }
    if (y && strcmp(act, "Silu") == 0) { /* as exporters write it: Sigmoid, then Mul by x */
        kiln_tensor *sg = kiln_fused_test_eval("Sigmoid", "", 1, &y);
        kiln_tensor *r = sg ? kiln_fused_test_eval("Mul", "", 2, (kiln_tensor *[]){y, sg}) : NULL;
        kiln_tensor_free(sg);
        kiln_tensor_free(y);
        return r;
    }
    if (y && (strcmp(act, "Gelu") == 0 || strcmp(act, "GeluTanh") == 0)) { /* ONNX's Gelu (opset 20) */
        kiln_tensor *r = kiln_fused_test_eval("Gelu", act[4] ? "approximate=tanh" : "approximate=none", 1, &y);
        kiln_tensor_free(y);
        return r;
    }
    if (y && act[0]) {
        kiln_tensor *bounds[2] = {kt_scalar(y->dtype, lo), kt_scalar(y->dtype, hi)};
        const bool clip = strcmp(act, "Clip") == 0;
        kiln_tensor *r = kiln_fused_test_eval(act, act_attrs, clip ? 3 : 1,
                                              (kiln_tensor *[]){y, bounds[0], bounds[1]});
        kiln_tensor_free(bounds[0]);
        kiln_tensor_free(bounds[1]);
        kiln_tensor_free(y);
        y = r;
    }
    return y;
}

/* A random case against the unfused graph; with used > 0 channel-padded (the pad-channels
 * pass's used_channels: W's input channels from `used` on zero, the attribute set), which
 * CUDA may convolve on the real channels alone. */
static int padded_case(const char *label, kiln_dtype dt, const int64_t *xd, const int64_t *wd, bool bias, bool resid,
                       const char *conv_attrs, const char *act, const char *act_attrs, const char *fused_act_attrs,
                       int64_t used, uint64_t seed) {
    kiln_tensor *x = kt_rand(dt, 4, xd, -1, 1, seed);
    kiln_tensor *w = kt_rand(dt, 4, wd, -1, 1, seed + 1);
    if (used > 0) kt_zero_from(w, used);
    kiln_tensor *b = bias ? kt_rand(dt, 1, wd, -1, 1, seed + 2) : NULL;
    kiln_tensor *probe = kiln_fused_test_eval("Conv", conv_attrs, 2, (kiln_tensor *[]){x, w});
    kiln_tensor *z = resid && probe ? kt_rand(dt, probe->ndim, probe->dims, -1, 1, seed + 3) : NULL;
    const double lo = -0.25, hi = 0.75;
    kiln_tensor *want = unfused(conv_attrs, act, act_attrs, lo, hi, x, w, b, z);
    kiln_tensor_free(probe);
    if (!want) {
        printf("FAIL %s: the reference could not be computed\n", label);
        kiln_tensor_free(x);
        kiln_tensor_free(w);
        kiln_tensor_free(b);
        kiln_tensor_free(z);
        return 1;
    }
    char attrs[512];
    snprintf(attrs, sizeof attrs, "%s%sactivation=%s%s%s%s", conv_attrs, conv_attrs[0] ? ";" : "",
             act, fused_act_attrs[0] ? ";" : "", fused_act_attrs,
             strcmp(act, "Clip") == 0 ? ";act_min=-0.25;act_max=0.75" : "");
    if (used > 0) {
        const size_t k = strlen(attrs);
        snprintf(attrs + k, sizeof attrs - k, ";used_channels=%lld", (long long)used);
    }
    const double tol = dt == KILN_F16 ? 2e-3 : dt == KILN_F64 ? 1e-12 : 1e-5;
    return kiln_optest("FusedConv", attrs, 4, (kiln_tensor *[]){x, w, b, z}, 1, &want, tol, tol,
                       label);
}

static int random_case(const char *label, kiln_dtype dt, const int64_t *xd, const int64_t *wd,
                       bool bias, bool resid, const char *conv_attrs, const char *act,
                       const char *act_attrs, const char *fused_act_attrs, uint64_t seed) {
    return padded_case(label, dt, xd, wd, bias, resid, conv_attrs, act, act_attrs, fused_act_attrs, 0, seed);
}

/* The statistics outputs against Y as the plain op computes it (outputs 1 and 2 absent):
 * Y the same bits, and the sums of those values; the case can fail (channels differ). */
static int stats_case(const char *label, kiln_dtype dt, const int64_t *xd, const int64_t *wd, bool bias,
                      const char *attrs, uint64_t seed) {
    kiln_tensor *x = kt_rand(dt, 4, xd, -1, 1.5, seed);
    kiln_tensor *w = kt_rand(dt, 4, wd, -1, 1, seed + 1);
    kiln_tensor *b = bias ? kt_rand(dt, 1, wd, -1, 1, seed + 2) : NULL;
    kiln_tensor *y = NULL;
    if (!kiln_optest_eval("kiln", "FusedConv", attrs, 1, 3, (kiln_tensor *[]){x, w, b}, 1, &y, label)) {
        kiln_tensor_free(x);
        kiln_tensor_free(w);
        kiln_tensor_free(b);
        return 1;
    }
    kiln_tensor *want[3] = {y, NULL, NULL};
    kt_channel_sums(y, 1.0, &want[1], &want[2]);
    double tol = dt == KILN_F64 ? 1e-6 : 1e-5; /* the sums are f32 */
    if (dt == KILN_F16) {
        /* sums of Y as written (the CPU's, kiln's statistics kernel's) or of Y before its
         * rounding to f16 (cuDNN's ConvFwd -> GenStats graph: from the accumulator), which
         * differ by at most 2^-11 of sum |y| and 2^-10 of sum y^2 a channel */
        const int64_t c = y->dims[1], per = kiln_tensor_numel(y) / (y->dims[0] * c), hw = per;
        double most = 0;
        for (int64_t k = 0; k < c; k++) {
            double a = 0, q = 0;
            for (int64_t n = 0; n < y->dims[0]; n++)
                for (int64_t i = 0; i < hw; i++) {
                    const double v = fabs(kiln_get_f64(y, (n * c + k) * hw + i));
                    a += v;
                    q += v * v;
                }
            most = fmax(most, fmax(a / 2048, q / 1024));
        }
        tol = fmax(tol, most);
    }
    return kiln_optest("FusedConv", attrs, 3, (kiln_tensor *[]){x, w, b}, 3, want, tol, tol, label);
}

/* t's values in a new tensor of dtype dt (rounded as kiln_set_f64 rounds) */
static kiln_tensor *as_dtype(const kiln_tensor *t, kiln_dtype dt) {
    if (!t) return NULL;
    kiln_tensor *r = kt_make(dt, t->ndim, t->dims, NULL);
    for (int64_t i = 0; r && i < kiln_tensor_numel(t); i++) kiln_set_f64(r, i, kiln_get_f64(t, i));
    return r;
}

/* The prologue (input 4, P f32 (2, C)): against the same FusedConv without it on X' =
 * act(a * X + k) computed in f32 by the test (kt_conv_prologue_ref), every other input in
 * f32 too, Y rounded to dt once: the op must not round X' to dt. pads with k > 0 in some
 * channels check that the padding is X''s zeros, not act(k). With stats, outputs 1 and 2
 * too (the sums of that Y). */
static int prologue_case(const char *label, kiln_dtype dt, const int64_t *xd, const int64_t *wd, bool bias, bool resid,
                         const char *conv_attrs, const char *act, bool relu, bool stats, uint64_t seed) {
    kiln_tensor *x = kt_rand(dt, 4, xd, -1, 2, seed);
    kiln_tensor *w = kt_rand(dt, 4, wd, -1, 1, seed + 1);
    kiln_tensor *b = bias ? kt_rand(dt, 1, wd, -1, 1, seed + 2) : NULL;
    kiln_tensor *pr = kt_rand(KILN_F32, 2, KT_DIMS(2, xd[1]), -1, 1.5, seed + 3);
    kiln_tensor *probe = kiln_fused_test_eval("Conv", conv_attrs, 2, (kiln_tensor *[]){x, w});
    kiln_tensor *z = resid && probe ? kt_rand(dt, probe->ndim, probe->dims, -1, 1, seed + 4) : NULL;
    kiln_tensor_free(probe);
    const kiln_dtype wide = dt == KILN_F64 ? KILN_F64 : KILN_F32;
    kiln_tensor *ref_in[4] = {kt_conv_prologue_ref(x, pr, relu), as_dtype(w, wide), as_dtype(b, wide), as_dtype(z, wide)};
    char attrs[512], fattrs[560];
    snprintf(attrs, sizeof attrs, "%s%sactivation=%s", conv_attrs, conv_attrs[0] ? ";" : "", act);
    snprintf(fattrs, sizeof fattrs, "%s;prologue_relu=%d", attrs, relu ? 1 : 0);
    kiln_tensor *wy = NULL, *want[3] = {NULL, NULL, NULL};
    const bool ok = kiln_optest_eval("kiln", "FusedConv", attrs, 1, 4, ref_in, 1, &wy, label);
    for (int i = 0; i < 4; i++) kiln_tensor_free(ref_in[i]);
    if (!ok) {
        kiln_tensor *all[5] = {x, w, b, z, pr};
        for (int i = 0; i < 5; i++) kiln_tensor_free(all[i]);
        return 1;
    }
    want[0] = as_dtype(wy, dt);
    kiln_tensor_free(wy);
    if (stats) kt_channel_sums(want[0], 1.0, &want[1], &want[2]);
    const double tol = dt == KILN_F16 ? 2e-3 : dt == KILN_F64 ? 1e-12 : 1e-5;
    /* the sums: f32, of up to N*H*W values of Y, which the f16 rounding of Y moves by 2^-11 each */
    const double stol = dt == KILN_F16 ? 0.05 : 1e-4;
    return kiln_optest("FusedConv", fattrs, 5, (kiln_tensor *[]){x, w, b, z, pr}, stats ? 3 : 1, want,
                       stats ? stol : tol, tol, label);
}

static int test_prologue(void) {
    int fails = 0;
    /* by hand: X = (-1, 0; 1, 2), a = 2, k = 1: X' = relu(2x + 1) = (0, 1; 3, 5); W 2x2 of ones,
     * pads 1 (zeros around X', not relu(k) = 1): Y (3x3) = window sums of the padded X':
     * (0, 1, 1; 3, 9, 6; 3, 8, 5) */
    {
        kiln_tensor *in[5] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(-1, 0, 1, 2)),
                              kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 1, 1, 1)), NULL, NULL,
                              kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(2, 1))};
        kiln_tensor *want = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), KT_VALS(0, 1, 1, 3, 9, 6, 3, 8, 5));
        fails += kiln_optest("FusedConv", "pads=[1,1,1,1];prologue_relu=1", 5, in, 1, &want, 0, 0,
                             "fusedconv prologue relu(2x + 1) by hand, zero padding after it");
        /* without the ReLU: X' = (-1, 1; 3, 5): (-1, 0, 1; 2, 8, 6; 3, 8, 5) */
        kiln_tensor *in2[5] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(-1, 0, 1, 2)),
                               kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 1, 1, 1)), NULL, NULL,
                               kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(2, 1))};
        kiln_tensor *want2 = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), KT_VALS(-1, 0, 1, 2, 8, 6, 3, 8, 5));
        fails += kiln_optest("FusedConv", "pads=[1,1,1,1]", 5, in2, 1, &want2, 0, 0,
                             "fusedconv prologue 2x + 1 (no ReLU) by hand");
    }
    fails += prologue_case("fusedconv prologue relu f32 3x3 padded, bias, residual, Relu", KILN_F32, KT_DIMS(2, 5, 7, 6),
                           KT_DIMS(4, 5, 3, 3), true, true, "pads=[1,1,1,1]", "Relu", true, false, 200);
    fails += prologue_case("fusedconv prologue relu f32 with statistics outputs", KILN_F32, KT_DIMS(2, 6, 8, 8),
                           KT_DIMS(8, 6, 3, 3), false, false, "pads=[1,1,1,1];strides=[2,2]", "", true, true, 201);
    fails += prologue_case("fusedconv prologue relu f16 1x1 (X' not rounded to f16)", KILN_F16, KT_DIMS(2, 8, 5, 5),
                           KT_DIMS(16, 8, 1, 1), false, false, "", "", true, false, 202);
    fails += prologue_case("fusedconv prologue relu f16 3x3 with statistics outputs", KILN_F16, KT_DIMS(2, 8, 6, 6),
                           KT_DIMS(8, 8, 3, 3), false, false, "pads=[1,1,1,1]", "", true, true, 203);
    fails += prologue_case("fusedconv prologue f64 grouped, no ReLU", KILN_F64, KT_DIMS(1, 4, 6, 6), KT_DIMS(6, 2, 3, 3),
                           true, false, "group=2;pads=[0,1,1,0]", "Sigmoid", false, false, 204);
    /* X' is not rounded to f16: a = 1 + 2^-10, k = 2^-12 put X' between f16 values; a 1x1
     * convolution by 3 over one channel gives f16(3 X') exactly, which differs from
     * f16(3 f16(X')) in some elements (counted: the case can tell the two apart) */
    {
        kiln_tensor *x = kt_rand(KILN_F16, 4, KT_DIMS(1, 1, 16, 16), -2, 2, 240);
        kiln_tensor *pr = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(1.0009765625, 0.000244140625));
        kiln_tensor *xp = x && pr ? kt_conv_prologue_ref(x, pr, true) : NULL;
        kiln_tensor *want = xp ? kt_make(KILN_F16, 4, xp->dims, NULL) : NULL;
        int differ = 0;
        for (int64_t i = 0; want && i < kiln_tensor_numel(xp); i++) {
            const float v = ((const float *)xp->data)[i];
            kiln_set_f64(want, i, 3.0f * v);
            const float twice = kiln_f16_to_f32(kiln_f32_to_f16(3.0f * kiln_f16_to_f32(kiln_f32_to_f16(v))));
            differ += twice != (float)kiln_get_f64(want, i);
        }
        kiln_tensor_free(xp);
        if (differ == 0) {
            printf("FAIL fusedconv prologue f16 unrounded: the case cannot tell rounded X' apart\n");
            fails++;
        }
        kiln_tensor *in[5] = {x, kt_make(KILN_F16, 4, KT_DIMS(1, 1, 1, 1), KT_VALS(3)), NULL, NULL, pr};
        fails += kiln_optest("FusedConv", "prologue_relu=1", 5, in, 1, &want, 0, 0,
                             "fusedconv prologue f16: X' in f32, Y rounded once");
    }
    /* ResNet-50's convolutions that read a BN's output (batch 2) for the GPU sweep: the
     * prologue with and without the statistics outputs */
    {
        static const struct {
            int64_t x[4], w[4];
            const char *attrs, *label;
            int n_out;
        } rs[] = {{{2, 256, 56, 56}, {64, 256, 1, 1}, "prologue_relu=1", "fusedconv prologue resnet50 1x1 256->64 56x56", 3},
                  {{2, 64, 56, 56}, {64, 64, 3, 3}, "pads=[1,1,1,1];prologue_relu=1",
                   "fusedconv prologue resnet50 3x3 64 56x56", 3},
                  {{2, 64, 56, 56}, {256, 64, 1, 1}, "prologue_relu=1", "fusedconv prologue resnet50 1x1 64->256", 3},
                  {{2, 128, 56, 56}, {128, 128, 3, 3}, "pads=[1,1,1,1];strides=[2,2];prologue_relu=1",
                   "fusedconv prologue resnet50 3x3 stride 2", 3},
                  {{2, 64, 56, 56}, {64, 64, 1, 1}, "prologue_relu=1", "fusedconv prologue 1x1 64->64, Y only", 1}};
        for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++) {
            kiln_tensor *sw[5] = {kt_rand(KILN_F32, 4, rs[i].x, -1, 1.5, 210 + i),
                                  kt_rand(KILN_F32, 4, rs[i].w, -0.1, 0.1, 220 + i), NULL, NULL,
                                  kt_rand(KILN_F32, 2, KT_DIMS(2, rs[i].x[1]), -1, 1.5, 230 + i)};
            fails += kiln_optest_sweep_tol("FusedConv", rs[i].attrs, 1, 5, sw, rs[i].n_out, 1e-3, 1e-4, rs[i].label);
        }
    }
    /* errors: P of the wrong shape or dtype, prologue_relu out of range */
    kiln_tensor *in[5] = {kt_make(KILN_F32, 4, KT_DIMS(1, 2, 3, 3), NULL), kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), NULL),
                          NULL, NULL, kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL)};
    fails += kiln_optest_fails("FusedConv", "", 5, in, 1, KILN_ERR_SHAPE, "fusedconv prologue of 3 channels for X's 2");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 3, 3), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), NULL);
    in[4] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), NULL);
    fails += kiln_optest_fails("FusedConv", "", 5, in, 1, KILN_ERR_SHAPE, "fusedconv prologue f64 rejected (f32 only)");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 3, 3), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), NULL);
    in[4] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    fails += kiln_optest_fails("FusedConv", "prologue_relu=2", 5, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "fusedconv prologue_relu = 2 rejected");
    return fails;
}

static int test(void) {
    int fails = test_prologue();
    /* By hand: X = 1..9 (3x3), W0 = [[1,0],[0,-1]] gives x[i,j] - x[i+1,j+1] = -4, W1 = 0.5
     * everywhere gives half of each 2x2 window's sum: 6, 8, 12, 14. B = (1, -10), Z =
     * (1,2,3,4 | -1,-2,-3,-4): pre-activation (-2,-1,0,1 | -5,-4,-1,0), LeakyRelu 0.1. */
    kiln_tensor *in[4];
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), KT_VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(2, 1, 2, 2), KT_VALS(1, 0, 0, -1, 0.5, 0.5, 0.5, 0.5));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, -10));
    in[3] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(1, 2, 3, 4, -1, -2, -3, -4));
    kiln_tensor *want = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2),
                                KT_VALS(-0.2, -0.1, 0, 1, -0.5, -0.4, -0.1, 0));
    fails += kiln_optest("FusedConv", "activation=LeakyRelu;alpha=0.1", 4, in, 1, &want, 1e-7, 0,
                         "fusedconv by hand: bias, residual, LeakyRelu");
    /* Same without Z, Clip -1..6 (ReLU6-like): (-3 x4 | -4,-2,2,4) -> (-1 x4 | -1,-1,2,4). */
    in[0] = kt_make(KILN_F64, 4, KT_DIMS(1, 1, 3, 3), KT_VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
    in[1] = kt_make(KILN_F64, 4, KT_DIMS(2, 1, 2, 2), KT_VALS(1, 0, 0, -1, 0.5, 0.5, 0.5, 0.5));
    in[2] = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(1, -10));
    want = kt_make(KILN_F64, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(-1, -1, -1, -1, -1, -1, 2, 4));
    fails += kiln_optest("FusedConv", "activation=Clip;act_min=-1.0;act_max=6.0", 3, in, 1, &want,
                         0, 0, "fusedconv by hand: bias, Clip, f64");
    /* Residual without bias (input 2 missing), no activation: (-3,-2,-1,0 | 5,6,9,10). */
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), KT_VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(2, 1, 2, 2), KT_VALS(1, 0, 0, -1, 0.5, 0.5, 0.5, 0.5));
    in[2] = NULL;
    in[3] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(1, 2, 3, 4, -1, -2, -3, -4));
    want = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(-3, -2, -1, 0, 5, 6, 9, 10));
    fails += kiln_optest("FusedConv", "", 4, in, 1, &want, 0, 0,
                         "fusedconv by hand: residual, no bias, no activation");

    /* Against the unfused ops, every activation, with Conv's geometry options. */
    static const struct {
        const char *act, *attrs, *fused;
    } acts[] = {
        {"", "", ""},
        {"Relu", "", ""},
        {"LeakyRelu", "alpha=0.2", "alpha=0.2"},
        {"Clip", "", ""},
        {"Sigmoid", "", ""},
        {"HardSwish", "", ""},
        {"HardSigmoid", "alpha=0.3;beta=0.4", "alpha=0.3;beta=0.4"},
        {"Tanh", "", ""},
        {"Silu", "", ""},
        {"Gelu", "", ""},
        {"GeluTanh", "", ""},
    };
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        char label[128];
        snprintf(label, sizeof label, "fusedconv random %s, residual, grouped, strided",
                 acts[i].act[0] ? acts[i].act : "no activation");
        fails += random_case(label, KILN_F32, KT_DIMS(2, 4, 9, 8), KT_DIMS(6, 2, 3, 3), true,
                             true, "group=2;strides=[2,1];pads=[1,1,0,1]", acts[i].act,
                             acts[i].attrs, acts[i].fused, 100 + i);
    }
    fails += random_case("fusedconv random Relu, bias only, large (threaded epilogue)", KILN_F32,
                         KT_DIMS(2, 8, 40, 40), KT_DIMS(16, 8, 3, 3), true, false, "pads=[1,1,1,1]",
                         "Relu", "", "", 120);
    /* 1x1 with a bias and no residual, every activation (CUDA NHWC f16 / bf16: a cuBLASLt
     * product, or cuDNN's ConvFwd -> bias -> activation graph where the activation is not
     * Relu: KILN_CUDA_CONV_GRAPH) */
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        char label[128];
        snprintf(label, sizeof label, "fusedconv random %s, bias, 1x1 16 -> 24",
                 acts[i].act[0] ? acts[i].act : "no activation");
        fails += random_case(label, KILN_F32, KT_DIMS(2, 16, 7, 6), KT_DIMS(24, 16, 1, 1), true, false, "", acts[i].act,
                             acts[i].attrs, acts[i].fused, 170 + i);
    }
    /* grouped (4 groups of 8) and 3x3 with a bias and no residual, every activation (CUDA
     * NHWC f16 / bf16: cuDNN's legacy API, or its ConvFwd graph with or without the epilogue
     * inside, as conv_graph_decide times them; KILN_CUDA_CONV_GRAPH) */
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        char label[128];
        snprintf(label, sizeof label, "fusedconv random %s, bias, grouped 32 -> 24 in 4 groups",
                 acts[i].act[0] ? acts[i].act : "no activation");
        fails += random_case(label, KILN_F32, KT_DIMS(2, 32, 7, 6), KT_DIMS(24, 8, 3, 3), true, false,
                             "group=4;pads=[1,1,1,1]", acts[i].act, acts[i].attrs, acts[i].fused, 185 + i);
        snprintf(label, sizeof label, "fusedconv random %s, bias, 3x3 stride 2 16 -> 24",
                 acts[i].act[0] ? acts[i].act : "no activation");
        fails += random_case(label, KILN_F32, KT_DIMS(2, 16, 9, 8), KT_DIMS(24, 16, 3, 3), true, false,
                             "pads=[1,1,1,1];strides=[2,2]", acts[i].act, acts[i].attrs, acts[i].fused, 200 + i);
    }
    /* 1x1 products of few input channels (CUDA NHWC f16 / bf16: conv_pointwise.cu's kernel
     * where it times faster, everywhere with KILN_CUDA_PW=1): several 128-row tiles and a
     * partial one, a partial 64-channel tile (200), K padded to 16 / 48 (8, 40) */
    fails += random_case("fusedconv random Silu, bias, 1x1 24 -> 144 (pointwise)", KILN_F32, KT_DIMS(2, 24, 13, 11),
                         KT_DIMS(144, 24, 1, 1), true, false, "", "Silu", "", "", 124);
    fails += random_case("fusedconv random Relu, bias, residual, 1x1 64 -> 200 (pointwise)", KILN_F32,
                         KT_DIMS(1, 64, 12, 12), KT_DIMS(200, 64, 1, 1), true, true, "", "Relu", "", "", 125);
    fails += random_case("fusedconv random HardSwish, bias, residual, 1x1 32 -> 64 (pointwise)", KILN_F32,
                         KT_DIMS(3, 32, 9, 10), KT_DIMS(64, 32, 1, 1), true, true, "", "HardSwish", "", "", 126);
    fails += random_case("fusedconv random no activation, no bias, 1x1 8 -> 16 (pointwise)", KILN_F32,
                         KT_DIMS(2, 8, 7, 7), KT_DIMS(16, 8, 1, 1), false, false, "", "", "", "", 127);
    fails += random_case("fusedconv random Sigmoid, bias, 1x1 40 -> 80 (pointwise)", KILN_F32, KT_DIMS(2, 40, 8, 9),
                         KT_DIMS(80, 40, 1, 1), true, false, "", "Sigmoid", "", "", 128);
    fails += random_case("fusedconv random HardSwish, residual, no bias, 1x1", KILN_F32,
                         KT_DIMS(1, 5, 6, 7), KT_DIMS(3, 5, 1, 1), false, true, "", "HardSwish",
                         "", "", 121);
    fails += random_case("fusedconv random f64 Sigmoid, residual, dilated", KILN_F64,
                         KT_DIMS(1, 3, 9, 9), KT_DIMS(4, 3, 3, 3), true, true,
                         "dilations=[2,2];auto_pad=SAME_UPPER", "Sigmoid", "", "", 122);
    fails += random_case("fusedconv random f16 Relu, residual", KILN_F16, KT_DIMS(1, 2, 5, 5),
                         KT_DIMS(3, 2, 3, 3), true, true, "", "Relu", "", "", 123);
    /* depthwise (group == C == M: CUDA's conv_depthwise.cu), every activation, with bias and
     * residual: 16 channels (NHWC: its vector path) and 12 (its scalar path) */
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        char label[128];
        snprintf(label, sizeof label, "fusedconv random depthwise %s, residual",
                 acts[i].act[0] ? acts[i].act : "no activation");
        fails += random_case(label, KILN_F32, KT_DIMS(2, 16, 9, 10), KT_DIMS(16, 1, 3, 3), true, true,
                             "group=16;pads=[1,1,1,1]", acts[i].act, acts[i].attrs, acts[i].fused, 130 + i);
    }
    fails += random_case("fusedconv random depthwise HardSwish, 7x7 stride 2, 12 channels", KILN_F32,
                         KT_DIMS(1, 12, 11, 9), KT_DIMS(12, 1, 7, 7), true, false,
                         "group=12;strides=[2,2];pads=[3,2,3,4]", "HardSwish", "", "", 140);
    fails += random_case("fusedconv random depthwise Silu, 5x5 stride 2, 12 channels", KILN_F32,
                         KT_DIMS(2, 12, 11, 9), KT_DIMS(12, 1, 5, 5), true, false,
                         "group=12;strides=[2,2];pads=[2,2,2,2]", "Silu", "", "", 142);
    fails += random_case("fusedconv random depthwise Gelu, 7x7, 32 channels", KILN_F32,
                         KT_DIMS(1, 32, 9, 9), KT_DIMS(32, 1, 7, 7), true, false,
                         "group=32;pads=[3,3,3,3]", "Gelu", "", "", 143);
    fails += random_case("fusedconv random f16 depthwise Silu, bias", KILN_F16, KT_DIMS(2, 16, 7, 6),
                         KT_DIMS(16, 1, 3, 3), true, false, "group=16;pads=[1,1,1,1]", "Silu", "", "", 144);
    /* mobilenet_v3's stem (3 -> 16 3x3 stride 2, Hardswish: the split epilogue) and a ResNet
     * stem with the residual and Relu (cuDNN's fused call), channel-padded 3 -> 4 */
    fails += padded_case("fusedconv channel-padded HardSwish 4 -> 16 3x3 stride 2 (used_channels 3)", KILN_F32,
                         KT_DIMS(2, 4, 15, 12), KT_DIMS(16, 4, 3, 3), true, false, "pads=[1,1,1,1];strides=[2,2]",
                         "HardSwish", "", "", 3, 150);
    fails += padded_case("fusedconv channel-padded Relu, residual, 4 -> 8 7x7 stride 2 (used_channels 3)", KILN_F32,
                         KT_DIMS(1, 4, 16, 14), KT_DIMS(8, 4, 7, 7), true, true, "pads=[3,3,3,3];strides=[2,2]", "Relu",
                         "", "", 3, 152);
    fails += random_case("fusedconv random f16 Gelu, 1x1", KILN_F16, KT_DIMS(2, 8, 5, 5),
                         KT_DIMS(16, 8, 1, 1), true, false, "", "Gelu", "", "", 145);
    fails += random_case("fusedconv random f64 Silu, residual", KILN_F64, KT_DIMS(1, 3, 6, 6),
                         KT_DIMS(4, 3, 3, 3), true, true, "pads=[1,1,1,1]", "Silu", "", "", 146);
    fails += random_case("fusedconv random f64 GeluTanh, depthwise", KILN_F64, KT_DIMS(1, 8, 6, 6),
                         KT_DIMS(8, 1, 3, 3), true, false, "group=8;pads=[1,1,1,1]", "GeluTanh", "", "", 147);
    fails += random_case("fusedconv random depthwise Relu, residual, no bias, 5x5", KILN_F32,
                         KT_DIMS(1, 24, 8, 9), KT_DIMS(24, 1, 5, 5), false, true,
                         "group=24;pads=[2,2,2,2]", "Relu", "", "", 141);

    /* the statistics outputs (sum, sum of squares per channel of Y as written): by hand on
     * the first case's Y (-0.2,-0.1,0,1 | -0.5,-0.4,-0.1,0), after the LeakyRelu */
    {
        kiln_tensor *si[4], *so[3];
        si[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), KT_VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
        si[1] = kt_make(KILN_F32, 4, KT_DIMS(2, 1, 2, 2), KT_VALS(1, 0, 0, -1, 0.5, 0.5, 0.5, 0.5));
        si[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, -10));
        si[3] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(1, 2, 3, 4, -1, -2, -3, -4));
        so[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(-0.2, -0.1, 0, 1, -0.5, -0.4, -0.1, 0));
        so[1] = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(0.7, -1.0)); /* f64 for an f32 Y */
        so[2] = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(1.05, 0.42));
        fails += kiln_optest("FusedConv", "activation=LeakyRelu;alpha=0.1", 4, si, 3, so, 1e-6, 1e-6,
                             "fusedconv statistics outputs by hand (after bias, residual, LeakyRelu)");
    }
    fails += stats_case("fusedconv statistics f32 3x3, bias", KILN_F32, KT_DIMS(2, 4, 9, 8), KT_DIMS(6, 4, 3, 3), true,
                        "pads=[1,1,1,1]", 160);
    fails += stats_case("fusedconv statistics f16 1x1 (sums of Y, rounded or not)", KILN_F16, KT_DIMS(3, 8, 5, 5),
                        KT_DIMS(16, 8, 1, 1), false, "", 161);
    fails += stats_case("fusedconv statistics f64 strided, grouped", KILN_F64, KT_DIMS(2, 4, 9, 9), KT_DIMS(6, 2, 3, 3),
                        false, "group=2;strides=[2,2]", 162);
    /* ResNet-50's convolutions (torchvision's, at batch 2: the channels and sizes of each
     * kind) for the GPU sweep, where f16 NHWC reaches cuDNN's GenStats graph
     * (backend_ops_conv_stats_*); the sums over N*H*W elements, hence the tolerance */
    {
        static const struct {
            int64_t x[4], w[4];
            const char *attrs, *label;
        } rs[] = {{{2, 64, 56, 56}, {64, 64, 1, 1}, "", "fusedconv statistics resnet50 layer1 conv1 1x1 64->64 56x56"},
                  {{2, 64, 56, 56}, {64, 64, 3, 3}, "pads=[1,1,1,1]", "fusedconv statistics resnet50 layer1 conv2 3x3 64"},
                  {{2, 64, 56, 56}, {256, 64, 1, 1}, "", "fusedconv statistics resnet50 layer1 conv3 1x1 64->256"},
                  {{2, 128, 56, 56}, {128, 128, 3, 3}, "pads=[1,1,1,1];strides=[2,2]",
                   "fusedconv statistics resnet50 layer2.0 conv2 3x3 stride 2"},
                  {{2, 256, 56, 56}, {512, 256, 1, 1}, "strides=[2,2]",
                   "fusedconv statistics resnet50 layer2.0 downsample 1x1 stride 2"},
                  {{2, 512, 7, 7}, {2048, 512, 1, 1}, "", "fusedconv statistics resnet50 layer4 conv3 1x1 512->2048 7x7"},
                  {{2, 3, 32, 32}, {64, 3, 7, 7}, "pads=[3,3,3,3];strides=[2,2]",
                   "fusedconv statistics resnet50 stem 7x7 stride 2 (3 channels)"}};
        for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++) {
            kiln_tensor *sw[2] = {kt_rand(KILN_F32, 4, rs[i].x, -1, 1.5, 170 + i),
                                  kt_rand(KILN_F32, 4, rs[i].w, -0.1, 0.1, 180 + i)};
            fails += kiln_optest_sweep_tol("FusedConv", rs[i].attrs, 1, 2, sw, 3, 1e-3, 1e-4, rs[i].label);
        }
    }
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(2, 1, 2, 2), NULL);
    fails += kiln_optest_fails("FusedConv", "", 2, in, 2, KILN_ERR_INVALID_ARGUMENT,
                               "fusedconv sum without the sum of squares rejected");

    /* errors */
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(2, 1, 2, 2), NULL);
    in[2] = NULL;
    in[3] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 3, 3), NULL);
    fails += kiln_optest_fails("FusedConv", "", 4, in, 1, KILN_ERR_SHAPE,
                               "fusedconv residual of the wrong shape");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(2, 1, 2, 2), NULL);
    in[2] = NULL;
    in[3] = kt_make(KILN_F64, 4, KT_DIMS(1, 2, 2, 2), NULL);
    fails += kiln_optest_fails("FusedConv", "", 4, in, 1, KILN_ERR_TYPE,
                               "fusedconv residual of another dtype");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(2, 1, 2, 2), NULL);
    fails += kiln_optest_fails("FusedConv", "activation=Mish", 2, in, 1, KILN_ERR_UNSUPPORTED,
                               "fusedconv unknown activation");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 3, 3), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(2, 1, 2, 2), NULL);
    fails += kiln_optest_fails("FusedConv", "activation=Relu", 2, in, 1, KILN_ERR_SHAPE,
                               "fusedconv channel mismatch (Conv's checks)");
    return fails;
}
#endif /* KILN_OPTESTS */

static double flops(const kiln_op_ctx *c) { return kiln_op_conv.flops(c); } /* Conv's */

const kiln_op_def kiln_op_fused_conv = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_CONV, .flops = flops,
    .f32_outputs = 0x6u /* the statistics outputs */, .f32_inputs = 1u << 4 /* the prologue */,
    .name = "FusedConv", .domain = "kiln", .min_inputs = 2, .max_inputs = 5 /* the prologue P */, .min_outputs = 1,
    .max_outputs = 3 /* Y, sum, sum of squares */, .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace,
    .test = KILN_OP_TESTS(test),
};
