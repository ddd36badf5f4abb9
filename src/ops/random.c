/*
 * random.c — RandomUniform, RandomNormal, RandomUniformLike, RandomNormalLike (opset 1+).
 *
 *   RandomUniform / RandomNormal: no inputs; attribute `shape` (ints, required) and
 *     `dtype` (an ONNX float type, default 1 = float).
 *   RandomUniformLike / RandomNormalLike(input): the input's shape; its data is never
 *     read; `dtype` as above, default the input's dtype (which must then be a float type).
 *   Uniform draws lie in [low, high) (defaults 0, 1), normal draws have mean `mean` and
 *   standard deviation `scale` (defaults 0, 1). `seed` (float) selects another stream.
 *
 * The numbers come from the counter-based stream of random.h (Dropout's): a run draws
 * from its run seed (kiln_op_ctx.seed; the trainer passes its seed + step, so every
 * training step draws new numbers and a resumed run the same ones), and the CUDA kernels
 * (src/cuda/random.cu) draw the same numbers for the same seed. torchvision's stochastic
 * depth exports as RandomUniformLike + Less + Cast + Div + Mul (EfficientNet, ConvNeXt).
 *
 * No gradient: the ops are not differentiable, and the Like forms read only the shape of
 * their input (shape_only_inputs, nondiff_inputs), so autograd treats what they write as a
 * constant of the step. `.random`: never constant-folded, never recomputed.
 */
#include "random.h"

#include "../core/optest.h"
#ifdef KILN_OPTESTS
#include "../train/autograd.h" /* the tests build a training graph */
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static bool is_like(const kiln_op_ctx *c) { return c->n_in > 0; }

/* The output dtype: attribute dtype, else (Like) the input's or f32. */
static kiln_status out_dtype(kiln_op_ctx *c, kiln_dtype *dt) {
    const kiln_attr *a = kiln_node_attr(c->node, "dtype");
    if (a) {
        KILN_OP_CHECK(c, a->type == KILN_ATTR_INT && a->i > 0 && a->i <= 64 && kiln_dtype_valid((kiln_dtype)a->i) &&
                             kiln_random_float_dtype((kiln_dtype)a->i),
                      KILN_ERR_UNSUPPORTED, "attribute dtype = %lld is not a float type (1, 10, 11, 16)",
                      a->type == KILN_ATTR_INT ? (long long)a->i : -1LL);
        *dt = (kiln_dtype)a->i;
        return KILN_OK;
    }
    *dt = is_like(c) ? c->in[0]->dtype : KILN_F32;
    KILN_OP_CHECK(c, kiln_random_float_dtype(*dt), KILN_ERR_TYPE,
                  "input dtype %s is not a float type: give attribute dtype", kiln_dtype_name(*dt));
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    kiln_dtype dt = KILN_F32;
    kiln_status st = out_dtype(c, &dt);
    if (st) return st;
    if (!strcmp(c->node->op_type, "RandomNormal") || !strcmp(c->node->op_type, "RandomNormalLike")) {
        const float scale = kiln_attr_float(c->node, "scale", 1.0f);
        KILN_OP_CHECK(c, isfinite(scale) && isfinite(kiln_attr_float(c->node, "mean", 0.0f)), KILN_ERR_INVALID_ARGUMENT,
                      "attributes mean and scale must be finite");
    } else {
        const float lo = kiln_attr_float(c->node, "low", 0.0f), hi = kiln_attr_float(c->node, "high", 1.0f);
        KILN_OP_CHECK(c, isfinite(lo) && isfinite(hi) && lo <= hi, KILN_ERR_INVALID_ARGUMENT,
                      "attributes low = %g and high = %g must be finite with low <= high", lo, hi);
    }
    if (is_like(c)) {
        kiln_tensor_set_shape(c->out[0], dt, c->in[0]->ndim, c->in[0]->dims);
        return KILN_OK;
    }
    int n = 0;
    const int64_t *shape = kiln_attr_ints(c->node, "shape", &n);
    KILN_OP_CHECK(c, kiln_node_attr(c->node, "shape") != NULL, KILN_ERR_INVALID_ARGUMENT,
                  "attribute shape is required");
    KILN_OP_CHECK(c, n <= KILN_MAX_DIMS, KILN_ERR_SHAPE, "attribute shape has %d dims (at most %d)", n, KILN_MAX_DIMS);
    for (int d = 0; d < n; d++)
        KILN_OP_CHECK(c, shape[d] >= 0, KILN_ERR_SHAPE, "shape[%d] = %lld is negative", d, (long long)shape[d]);
    kiln_tensor_set_shape(c->out[0], dt, n, shape);
    return KILN_OK;
}

static kiln_status forward_uniform(kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0];
    const uint64_t key = kiln_random_key(c->seed, kiln_random_parts(c->node));
    const double lo = kiln_attr_float(c->node, "low", 0.0f), hi = kiln_attr_float(c->node, "high", 1.0f);
    const int64_t n = kiln_tensor_numel(y);
    for (int64_t i = 0; i < n; i++) kiln_set_f64(y, i, lo + (hi - lo) * kiln_random_u(key, (uint64_t)i));
    return KILN_OK;
}

static kiln_status forward_normal(kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0];
    const uint64_t key = kiln_random_key(c->seed, kiln_random_parts(c->node));
    const double mean = kiln_attr_float(c->node, "mean", 0.0f), scale = kiln_attr_float(c->node, "scale", 1.0f);
    const double two_pi = 6.283185307179586476925286766559;
    const int64_t n = kiln_tensor_numel(y);
    for (int64_t i = 0; i < n; i++) {
        const double u1 = kiln_random_u(key, 2 * (uint64_t)i), u2 = kiln_random_u(key, 2 * (uint64_t)i + 1);
        kiln_set_f64(y, i, mean + scale * (sqrt(-2.0 * log(1.0 - u1)) * cos(two_pi * u2)));
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
/* The first n draws of a node without output indices (kiln_optest's), run seed 0,
 * by the formulas of random.h: the documented stream, which the CUDA kernels reproduce. */
static kiln_tensor *expected(kiln_dtype dt, int ndim, const int64_t *dims, bool normal, double a, double b,
                             double seed_attr, bool has_seed) {
    kiln_tensor *t = kt_make(dt, ndim, dims, NULL);
    if (!t) return NULL;
    kiln_random_keyparts p = {0, 0, 0, 0};
    if (has_seed) {
        float f = (float)seed_attr;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        p.has_attr = 1;
        p.attr_mix = kiln_random_mix64(bits + KILN_RANDOM_GOLDEN);
    }
    const uint64_t key = kiln_random_key(0, p);
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++) {
        double v;
        if (normal) {
            const double u1 = kiln_random_u(key, 2 * (uint64_t)i), u2 = kiln_random_u(key, 2 * (uint64_t)i + 1);
            v = a + b * (sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586476925286766559 * u2));
        } else {
            v = a + (b - a) * kiln_random_u(key, (uint64_t)i);
        }
        kiln_set_f64(t, i, v);
    }
    return t;
}

/* Mean, variance, min and max of a draw of n elements (op with attrs) by kiln_optest_eval.
 * Frees in[]. */
static bool moments(const char *op, const char *attrs, int n_in, kiln_tensor **in, double *mean, double *var,
                    double *lo, double *hi, int64_t *n) {
    kiln_tensor *out = NULL;
    const bool ok = kiln_optest_eval("", op, attrs, 0, n_in, in, 1, &out, op);
    for (int i = 0; i < n_in; i++) kiln_tensor_free(in[i]);
    if (!ok) return false;
    double s = 0, s2 = 0;
    *lo = INFINITY;
    *hi = -INFINITY;
    *n = kiln_tensor_numel(out);
    for (int64_t i = 0; i < *n; i++) {
        double v = kiln_get_f64(out, i);
        s += v;
        s2 += v * v;
        if (v < *lo) *lo = v;
        if (v > *hi) *hi = v;
    }
    *mean = s / (double)*n;
    *var = s2 / (double)*n - *mean * *mean;
    kiln_tensor_free(out);
    return true;
}

static int check_moments(const char *label, bool ok, double mean, double var, double want_mean, double want_var,
                         double sd_of_mean, double var_rtol) {
    const bool good = ok && fabs(mean - want_mean) <= 5 * sd_of_mean && fabs(var - want_var) <= var_rtol * want_var;
    printf("%s %s: mean %.4f (want %.4f +- %.4f), variance %.4f (want %.4f +- %.0f%%)\n", good ? "ok  " : "FAIL", label,
           mean, want_mean, 5 * sd_of_mean, var, want_var, var_rtol * 100);
    return !good;
}

/* A graph y = x * RandomUniformLike(x), L = sum(y * r), through autograd and seeded runs:
 * two runs with one seed draw the same numbers, another seed others; dL/dx = r * u with u
 * the same run's draw (the random op is a constant to autograd: no gradient flows into
 * its input). */
static int test_session(void) {
    enum { N = 64 };
    kiln_context *ctx = NULL;
    kiln_model *m = NULL, *train = NULL;
    kiln_session *s = NULL;
    kiln_tensor *x = kt_rand(KILN_F64, 2, KT_DIMS(8, 8), -1, 1, 31);
    kiln_tensor *r = kt_rand(KILN_F64, 2, KT_DIMS(8, 8), -1, 1, 32);
    kiln_tensor *keep = NULL;
    int fails = 1;
    kiln_node *node = NULL;
    const char *why = "building the graph";
    if (!x || !r || kiln_context_create(&ctx) || kiln_model_create(ctx, &m)) goto out;
    if (kiln_model_add_input(m, "x", KILN_F64, 2, x->dims) || kiln_model_add_initializer(m, "r", r) ||
        kiln_model_add_node(m, "RandomUniformLike", "u", 1, (const char *[]){"x"}, 1, (const char *[]){"u"}, &node) ||
        kiln_model_add_node(m, "Mul", "mul", 2, (const char *[]){"x", "u"}, 1, (const char *[]){"y"}, &node) ||
        kiln_model_add_node(m, "GradCheckLoss", "loss", 2, (const char *[]){"y", "r"}, 1, (const char *[]){"l"}, &node))
        goto out;
    free(node->domain);
    node->domain = kiln_strdup(ctx, "kiln");
    if (kiln_model_add_output(m, "l") || kiln_model_add_output(m, "u") || kiln_model_finalize(m) ||
        kiln_model_clone(m, &train))
        goto out;
    int xv = kiln_model_find_value(train, "x"), dxv = -1;
    why = "autograd";
    if (kiln_autograd(train, kiln_model_find_value(train, "l"), 1, &xv, &dxv)) goto out;
    why = "the training graph";
    if (kiln_model_add_output(train, train->values[dxv].name) || kiln_model_finalize(train) ||
        kiln_session_create(train, NULL, &s))
        goto out;
    const kiln_tensor *outs[3];
    why = "run";
    if (kiln_session_run_seeded(s, 5, 1, &x, 3, outs)) goto out;
    const double *u = outs[1]->data, *dx = outs[2]->data, *rp = r->data;
    why = "dX != r * u (a gradient flowed through the random op, or it drew apart)";
    for (int i = 0; i < N; i++)
        if (fabs(dx[i] - rp[i] * u[i]) > 1e-15) goto out;
    why = "draws outside [0, 1)";
    for (int i = 0; i < N; i++)
        if (!(u[i] >= 0 && u[i] < 1)) goto out;
    keep = kiln_tensor_clone(ctx, outs[1]);
    why = "rerun";
    if (!keep || kiln_session_run_seeded(s, 5, 1, &x, 3, outs)) goto out;
    why = "the same seed drew other numbers";
    if (memcmp(keep->data, outs[1]->data, N * sizeof(double))) goto out;
    why = "run with seed 6";
    if (kiln_session_run_seeded(s, 6, 1, &x, 3, outs)) goto out;
    int same = 0;
    for (int i = 0; i < N; i++) same += ((const double *)keep->data)[i] == ((const double *)outs[1]->data)[i];
    why = "another seed drew the same numbers";
    if (same > 2) goto out;
    printf("ok   random_uniform_like session: dX = r * u (no gradient through the draw), seed 5 twice the same, "
           "seed 6 other numbers\n");
    fails = 0;
out:
    if (fails) printf("FAIL random_uniform_like session: %s%s%s\n", why, ctx ? ": " : "", ctx ? kiln_context_message(ctx) : "");
    kiln_session_free(s);
    kiln_model_free(train);
    kiln_model_free(m);
    kiln_context_free(ctx);
    kiln_tensor_free(x);
    kiln_tensor_free(r);
    kiln_tensor_free(keep);
    return fails;
}

static int test_uniform(void) {
    int fails = 0;
    /* the stream of random.h, in each float dtype */
    fails += kiln_optest("RandomUniform", "shape=[3,5]", 0, NULL, 1,
                         (kiln_tensor *[]){expected(KILN_F32, 2, KT_DIMS(3, 5), false, 0, 1, 0, false)}, 0, 0,
                         "random_uniform default [0, 1)");
    fails += kiln_optest("RandomUniform", "shape=[2,2,7];low=-3.0;high=5.0;dtype=11;seed=7.0", 0, NULL, 1,
                         (kiln_tensor *[]){expected(KILN_F64, 3, KT_DIMS(2, 2, 7), false, -3, 5, 7, true)}, 0, 0,
                         "random_uniform f64 [-3, 5) seed 7");
    fails += kiln_optest("RandomUniform", "shape=[0,4]", 0, NULL, 1,
                         (kiln_tensor *[]){kt_make(KILN_F32, 2, KT_DIMS(0, 4), NULL)}, 0, 0, "random_uniform empty");
    /* statistics of 40000 draws */
    double mean = 0, var = 0, lo = 0, hi = 0;
    int64_t n = 0;
    bool ok = moments("RandomUniform", "shape=[200,200];low=-2.0;high=3.0", 0, NULL, &mean, &var, &lo, &hi, &n);
    fails += check_moments("random_uniform 40000 draws in [-2, 3)", ok && lo >= -2 && hi < 3 && hi > 2.99 && lo < -1.99,
                           mean, var, 0.5, 25.0 / 12, sqrt(25.0 / 12 / 40000), 0.03);
    /* rejected */
    fails += kiln_optest_fails("RandomUniform", "", 0, NULL, 1, KILN_ERR_INVALID_ARGUMENT,
                               "random_uniform rejects a missing shape");
    fails += kiln_optest_fails("RandomUniform", "shape=[2,-1]", 0, NULL, 1, KILN_ERR_SHAPE,
                               "random_uniform rejects a negative dim");
    fails += kiln_optest_fails("RandomUniform", "shape=[2];low=2.0;high=1.0", 0, NULL, 1, KILN_ERR_INVALID_ARGUMENT,
                               "random_uniform rejects low > high");
    /* for the backend sweep: several blocks, odd sizes */
    fails += kiln_optest_sweep("RandomUniform", "shape=[1031];dtype=1", 0, 0, NULL, 1, "random_uniform 1031");
    return fails;
}

static int test_normal(void) {
    int fails = 0;
    fails += kiln_optest("RandomNormal", "shape=[4,6];mean=1.0;scale=2.0", 0, NULL, 1,
                         (kiln_tensor *[]){expected(KILN_F32, 2, KT_DIMS(4, 6), true, 1, 2, 0, false)}, 0, 0,
                         "random_normal mean 1 scale 2");
    fails += kiln_optest("RandomNormal", "shape=[9];dtype=10", 0, NULL, 1,
                         (kiln_tensor *[]){expected(KILN_F16, 1, KT_DIMS(9), true, 0, 1, 0, false)}, 0, 0,
                         "random_normal f16");
    double mean = 0, var = 0, lo = 0, hi = 0;
    int64_t n = 0;
    bool ok = moments("RandomNormal", "shape=[200,200];mean=1.0;scale=2.0", 0, NULL, &mean, &var, &lo, &hi, &n);
    fails += check_moments("random_normal 40000 draws mean 1 sd 2", ok && lo < -5 && hi > 7, mean, var, 1, 4,
                           2 / sqrt(40000.0), 0.04);
    fails += kiln_optest_fails("RandomNormal", "shape=[2];dtype=7", 0, NULL, 1, KILN_ERR_UNSUPPORTED,
                               "random_normal rejects dtype int64");
    fails += kiln_optest_fails("RandomNormal", "shape=[2];scale=inf", 0, NULL, 1, KILN_ERR_INVALID_ARGUMENT,
                               "random_normal rejects an infinite scale");
    fails += kiln_optest_sweep("RandomNormal", "shape=[2,515];dtype=10", 0, 0, NULL, 1, "random_normal f16 2x515");
    return fails;
}

static int test_uniform_like(void) {
    int fails = 0;
    fails += kiln_optest("RandomUniformLike", "dtype=1;low=0.0;high=1.0", 1,
                         (kiln_tensor *[]){kt_make(KILN_F16, 4, KT_DIMS(2, 1, 1, 1), NULL)}, 1,
                         (kiln_tensor *[]){expected(KILN_F32, 4, KT_DIMS(2, 1, 1, 1), false, 0, 1, 0, false)}, 0, 0,
                         "random_uniform_like stochastic depth's (N,1,1,1), dtype f32 from f16");
    fails += kiln_optest("RandomUniformLike", "", 1, (kiln_tensor *[]){kt_make(KILN_BF16, 2, KT_DIMS(3, 3), NULL)}, 1,
                         (kiln_tensor *[]){expected(KILN_BF16, 2, KT_DIMS(3, 3), false, 0, 1, 0, false)}, 0, 0,
                         "random_uniform_like bf16 from the input");
    fails += kiln_optest_fails("RandomUniformLike", "", 1, (kiln_tensor *[]){kt_make(KILN_I64, 1, KT_DIMS(3), NULL)},
                               1, KILN_ERR_TYPE, "random_uniform_like rejects an int64 input without dtype");
    fails += kiln_optest_sweep("RandomUniformLike", "low=-1.0;high=2.0", 0, 1,
                               (kiln_tensor *[]){kt_make(KILN_F32, 4, KT_DIMS(3, 5, 17, 19), NULL)}, 1,
                               "random_uniform_like 3x5x17x19");
    fails += test_session();
    return fails;
}

static int test_normal_like(void) {
    int fails = 0;
    fails += kiln_optest("RandomNormalLike", "scale=0.5;seed=3.0", 1,
                         (kiln_tensor *[]){kt_make(KILN_F64, 1, KT_DIMS(11), NULL)}, 1,
                         (kiln_tensor *[]){expected(KILN_F64, 1, KT_DIMS(11), true, 0, 0.5, 3, true)}, 0, 0,
                         "random_normal_like f64 scale 0.5 seed 3");
    double mean = 0, var = 0, lo = 0, hi = 0;
    int64_t n = 0;
    bool ok = moments("RandomNormalLike", "dtype=1", 1, (kiln_tensor *[]){kt_make(KILN_F32, 2, KT_DIMS(100, 400), NULL)},
                      &mean, &var, &lo, &hi, &n);
    fails += check_moments("random_normal_like 40000 draws", ok, mean, var, 0, 1, 1 / sqrt(40000.0), 0.04);
    fails += kiln_optest_sweep("RandomNormalLike", "mean=0.5;scale=3.0;seed=11.0", 0, 1,
                               (kiln_tensor *[]){kt_make(KILN_F32, 2, KT_DIMS(37, 129), NULL)}, 1,
                               "random_normal_like 37x129");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_random_uniform = {
    .precision = KILN_PREC_FP32, .random = true, .out_dtype = {KILN_DT_F32},
    .name = "RandomUniform", .min_inputs = 0, .max_inputs = 0, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward_uniform, .test = KILN_OP_TESTS(test_uniform),
};

const kiln_op_def kiln_op_random_normal = {
    .precision = KILN_PREC_FP32, .random = true, .out_dtype = {KILN_DT_F32},
    .name = "RandomNormal", .min_inputs = 0, .max_inputs = 0, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward_normal, .test = KILN_OP_TESTS(test_normal),
};

const kiln_op_def kiln_op_random_uniform_like = {
    .precision = KILN_PREC_FP32, .random = true,
    .name = "RandomUniformLike", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .shape_only_inputs = 1u << 0, .nondiff_inputs = 1u << 0, .infer = infer, .cpu_forward = forward_uniform,
    .test = KILN_OP_TESTS(test_uniform_like),
};

const kiln_op_def kiln_op_random_normal_like = {
    .precision = KILN_PREC_FP32, .random = true,
    .name = "RandomNormalLike", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .shape_only_inputs = 1u << 0, .nondiff_inputs = 1u << 0, .infer = infer, .cpu_forward = forward_normal,
    .test = KILN_OP_TESTS(test_normal_like),
};
