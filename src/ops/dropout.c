/*
 * dropout.c — Dropout: output = data * mask / (1 - ratio) in training, data otherwise;
 * the optional mask output (bool) says which elements were kept.
 *
 * Opset 12+: inputs data, optional ratio (float scalar, default 0.5) and optional
 * training_mode (bool scalar, default false). Without training_mode, or with ratio 0,
 * output = data and mask is all true. Opsets 7-11: ratio is an attribute and the op is
 * always in inference form (kiln runs those graphs for inference only).
 *
 * Randomness is counter-based, so a run is reproducible from its seed and elements are
 * independent of thread scheduling: element i is kept when u_i >= ratio, where u_i is
 * the top 53 bits of splitmix64(key + (i + 1) * golden) and key mixes the run's seed
 * (kiln_op_ctx.seed), the node's `seed` attribute when given and the node's first output
 * (so two Dropout nodes of one graph draw different masks). These masks cannot equal
 * numpy's, which the ONNX reference uses for its random cases.
 *
 * Gradient: in inference form (no training_mode input, or a constant false one, or opset
 * < 12) dX = dY, the same value. Otherwise kiln.DropoutGrad(dY, mask, ratio,
 * training_mode) computes dX = dY * mask / (1 - ratio) when training_mode is true at run
 * time and dY otherwise, from the forward's mask output (the trainer adds that output;
 * without it the rule refuses). ratio has no gradient.
 *
 * kiln.DropoutGrad(dY, mask, ratio?, training_mode?, Y?), attribute relu (0/1, default 0):
 * with relu = 1 the op also applies the gradient of a Relu in front of the Dropout, whose
 * output Y (input 4, dY's shape and dtype) it reads: dX = kiln.UnaryGrad(g, -, Y) op=Relu
 * = Y > 0 ? g : 0 (also where g is NaN or inf), g the relu = 0 result in dY's dtype, bit
 * for bit the two ops in sequence (the fuse-pool pass, src/passes/fuse_pool.c, folds such
 * a UnaryGrad into the DropoutGrad before it). The gradient rule above emits relu = 0.
 */
#include "dropout.h"

#include "../core/optest.h"
#include "unary.h"
#ifdef KILN_OPTESTS
#include "../train/autograd.h" /* the tests build training graphs */
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN 0x9E3779B97F4A7C15ull

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static bool has_in(const kiln_op_ctx *c, int i) { return c->n_in > i && c->in[i] != NULL; }
static bool has_out(const kiln_op_ctx *c, int i) { return c->n_out > i && c->out[i] != NULL; }

kiln_status kiln_dropout_check_args(kiln_op_ctx *c, const kiln_tensor *ratio, const kiln_tensor *training_mode) {
    if (ratio) {
        KILN_OP_CHECK(c, kiln_dtype_is_float(ratio->dtype), KILN_ERR_TYPE, "input ratio dtype %s is not a float type",
                      kiln_dtype_name(ratio->dtype));
        KILN_OP_CHECK(c, kiln_tensor_numel(ratio) == 1, KILN_ERR_SHAPE, "input ratio must be a scalar");
    }
    if (training_mode) {
        KILN_OP_CHECK(c, training_mode->dtype == KILN_BOOL, KILN_ERR_TYPE, "input training_mode dtype %s is not bool",
                      kiln_dtype_name(training_mode->dtype));
        KILN_OP_CHECK(c, kiln_tensor_numel(training_mode) == 1, KILN_ERR_SHAPE, "input training_mode must be a scalar");
    }
    return KILN_OK;
}

void kiln_dropout_mode(const kiln_tensor *ratio, const kiln_tensor *training_mode, double *r, bool *train) {
    *r = ratio ? kiln_get_f64(ratio, 0) : 0.5;
    *train = training_mode && *(const bool *)training_mode->data;
}

kiln_status kiln_dropout_apply(kiln_op_ctx *c, const kiln_tensor *x, kiln_tensor *y, bool *mask, double ratio,
                               bool train) {
    int64_t n = kiln_tensor_numel(x);
    if (!train || ratio == 0) {
        if (y->data != x->data) memcpy(y->data, x->data, (size_t)n * kiln_dtype_size(x->dtype));
        if (mask) memset(mask, 1, (size_t)n);
        return KILN_OK;
    }
    if (!(ratio > 0 && ratio < 1))
        return kiln_op_fail(c, KILN_ERR_INVALID_ARGUMENT, "ratio=%g is outside [0, 1)", ratio);

    const kiln_attr *seed_attr = kiln_node_attr(c->node, "seed");
    uint64_t key = mix64(c->seed);
    if (seed_attr) key = mix64(key ^ mix64((uint64_t)seed_attr->i + GOLDEN));
    if (c->node->out) key = mix64(key ^ (uint64_t)c->node->out[0]);
    double scale = 1.0 / (1.0 - ratio);
    bool f32 = x->dtype == KILN_F32;
    const float *xf = x->data;
    float *yf = y->data;

    #pragma omp parallel for if (n > (1 << 16)) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(mix64(key + ((uint64_t)i + 1) * GOLDEN) >> 11) * 0x1.0p-53;
        bool keep = u >= ratio;
        if (mask) mask[i] = keep;
        if (f32) yf[i] = keep ? (float)(xf[i] * scale) : 0.0f;
        else kiln_set_f64(y, i, keep ? kiln_get_f64(x, i) * scale : 0.0);
    }
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "input data dtype %s is not supported", kiln_dtype_name(x->dtype));
    if (c->node->opset < 12) {
        KILN_OP_CHECK(c, !has_in(c, 1) && !has_in(c, 2), KILN_ERR_UNSUPPORTED,
                      "Dropout-%d takes one input (ratio is an attribute before opset 12)",
                      c->node->opset);
    }
    kiln_status st = kiln_dropout_check_args(c, has_in(c, 1) ? c->in[1] : NULL, has_in(c, 2) ? c->in[2] : NULL);
    if (st) return st;
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    if (has_out(c, 1)) kiln_tensor_set_shape(c->out[1], KILN_BOOL, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    double ratio;
    bool train;
    /* before opset 12 the op is always in inference form */
    kiln_dropout_mode(has_in(c, 1) ? c->in[1] : NULL, c->node->opset >= 12 && has_in(c, 2) ? c->in[2] : NULL, &ratio,
                      &train);
    return kiln_dropout_apply(c, c->in[0], c->out[0], has_out(c, 1) ? c->out[1]->data : NULL, ratio, train);
}

/* ----------------------------------------------------------------- gradient */

static kiln_status grad(kiln_grad_ctx *g) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    const kiln_model *m = g->m;
    if (n->n_in > 1 && g->need[1])
        return kiln_fail(m->ctx, KILN_ERR_UNSUPPORTED, "Dropout node '%s': ratio has no gradient", n->name);
    if (!g->need[0]) return KILN_OK;
    int train = n->opset >= 12 && n->n_in > 2 ? n->in[2] : -1;
    const kiln_tensor *t = train >= 0 ? m->values[train].init : NULL;
    if (t && t->dtype == KILN_BOOL && !*(const bool *)t->data) train = -1;
    if (train < 0) {
        g->dx[0] = g->dy[0];
        return KILN_OK;
    }
    if (n->n_out < 2 || n->out[1] < 0)
        return kiln_fail(m->ctx, KILN_ERR_UNSUPPORTED,
                         "Dropout node '%s' may run in training mode: its gradient needs the mask output", n->name);
    int in[4] = {g->dy[0], n->out[1], n->in[1], train};
    g->dx[0] = kiln_grad_emit(g, "kiln", "DropoutGrad", 4, in, 1, NULL, false, NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

static kiln_status infer_grad(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *mask = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_is_float(dy->dtype), KILN_ERR_TYPE, "dY dtype %s is not supported",
                  kiln_dtype_name(dy->dtype));
    KILN_OP_CHECK(c, mask->dtype == KILN_BOOL && kiln_tensor_numel(mask) == kiln_tensor_numel(dy), KILN_ERR_SHAPE,
                  "mask must be bool, shaped like dY");
    kiln_status st = kiln_dropout_check_args(c, has_in(c, 2) ? c->in[2] : NULL, has_in(c, 3) ? c->in[3] : NULL);
    if (st) return st;
    const int64_t relu = kiln_attr_int(c->node, "relu", 0);
    KILN_OP_CHECK(c, relu == 0 || relu == 1, KILN_ERR_INVALID_ARGUMENT, "attribute relu = %lld must be 0 or 1",
                  (long long)relu);
    KILN_OP_CHECK(c, relu || !has_in(c, 4), KILN_ERR_INVALID_ARGUMENT,
                  "input 4 (Y) is given but attribute relu is 0 (Y is read only with relu = 1)");
    if (relu) {
        KILN_OP_CHECK(c, has_in(c, 4), KILN_ERR_INVALID_ARGUMENT,
                      "attribute relu = 1 needs input 4, the Relu's output Y");
        const kiln_tensor *y = c->in[4];
        char ys[128], ds[128];
        KILN_OP_CHECK(c, y->dtype == dy->dtype, KILN_ERR_TYPE, "Y dtype %s is not dY's %s", kiln_dtype_name(y->dtype),
                      kiln_dtype_name(dy->dtype));
        KILN_OP_CHECK(c, y->ndim == dy->ndim && memcmp(y->dims, dy->dims, sizeof(int64_t) * (size_t)dy->ndim) == 0,
                      KILN_ERR_SHAPE, "Y %s must have dY's shape %s", kiln_shape_str(y, ys, sizeof ys),
                      kiln_shape_str(dy, ds, sizeof ds));
    }
    kiln_tensor_set_shape(c->out[0], dy->dtype, dy->ndim, dy->dims);
    return KILN_OK;
}

kiln_status kiln_dropout_grad_apply(kiln_op_ctx *c, const kiln_tensor *dy, const bool *mask, kiln_tensor *dx,
                                    double ratio, bool train) {
    int64_t n = kiln_tensor_numel(dy);
    if (!train) {
        if (dx->data != dy->data) memcpy(dx->data, dy->data, (size_t)n * kiln_dtype_size(dy->dtype));
        return KILN_OK;
    }
    if (!(ratio >= 0 && ratio < 1))
        return kiln_op_fail(c, KILN_ERR_INVALID_ARGUMENT, "ratio=%g is outside [0, 1)", ratio);
    double scale = 1.0 / (1.0 - ratio);
    if (dy->dtype == KILN_F32) {
        const float *g = dy->data;
        float *d = dx->data, sf = (float)scale;
        #pragma omp parallel for if (n > (1 << 16)) schedule(static)
        for (int64_t i = 0; i < n; i++) d[i] = mask[i] ? g[i] * sf : 0.0f;
    } else {
        for (int64_t i = 0; i < n; i++) kiln_set_f64(dx, i, mask[i] ? kiln_get_f64(dy, i) * scale : 0.0);
    }
    return KILN_OK;
}

/* g into dX in dY's dtype (where the unfused DropoutGrad writes it, so rounded as there),
 * then, with relu, the Relu's gradient over dX in place. */
static kiln_status forward_grad(kiln_op_ctx *c) {
    double ratio;
    bool train;
    kiln_dropout_mode(has_in(c, 2) ? c->in[2] : NULL, has_in(c, 3) ? c->in[3] : NULL, &ratio, &train);
    kiln_status st = kiln_dropout_grad_apply(c, c->in[0], c->in[1]->data, c->out[0], ratio, train);
    if (st || !kiln_attr_int(c->node, "relu", 0)) return st;
    /* Relu's derivative reads its output Y */
    const kiln_op_def *relu = kiln_op_find("Relu");
    const kiln_unary_grad_def *gd = relu ? relu->family : NULL;
    if (!gd) return kiln_op_fail(c, KILN_ERR_INTERNAL, "Relu's derivative is not registered");
    const kiln_unary_args a = {0};
    kiln_unary_grad_apply(gd, &a, c->out[0], NULL, c->in[4], c->out[0]);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
/* Training mode through autograd and a seeded session, where finite differences see the
 * same mask on every run: Y = Dropout(X, 0.4, true), L = sum(Y * R). The gradient must be
 * R * mask / 0.6 with the mask of the same run, and match central differences. */
static int test_grad_training(void) {
    enum { N = 24 };
    const double ratio = 0.4;
    const uint64_t seed = 77;
    kiln_context *ctx = NULL;
    kiln_model *m = NULL, *train = NULL;
    kiln_session *s = NULL;
    kiln_tensor *x = kt_rand(KILN_F64, 2, KT_DIMS(4, 6), -1, 1, 21);
    kiln_tensor *r = kt_rand(KILN_F64, 2, KT_DIMS(4, 6), -1, 1, 22);
    kiln_tensor *rt = kt_scalar(KILN_F64, ratio), *tt = kt_scalar(KILN_BOOL, 1);
    int fails = 1;
    kiln_node *node = NULL;
    const char *why = "building the graph";
    if (!x || !r || !rt || !tt || kiln_context_create(&ctx) || kiln_model_create(ctx, &m)) goto out;
    if (kiln_model_add_input(m, "x", KILN_F64, 2, x->dims) || kiln_model_add_initializer(m, "r", r) ||
        kiln_model_add_initializer(m, "ratio", rt) || kiln_model_add_initializer(m, "train", tt) ||
        kiln_model_add_node(m, "Dropout", "drop", 3, (const char *[]){"x", "ratio", "train"}, 2,
                            (const char *[]){"y", "mask"}, &node) ||
        kiln_model_add_node(m, "GradCheckLoss", "loss", 2, (const char *[]){"y", "r"}, 1, (const char *[]){"l"}, &node))
        goto out;
    free(node->domain);
    node->domain = kiln_strdup(ctx, "kiln");
    /* finalized once for the values' dtypes, then extended in an open copy */
    if (kiln_model_add_output(m, "l") || kiln_model_add_output(m, "mask") || kiln_model_finalize(m) ||
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
    if (kiln_session_run_seeded(s, seed, 1, &x, 3, outs)) goto out;
    const bool *mask = outs[1]->data;
    const double *dx = outs[2]->data, *rp = r->data;
    double expect[N];
    int kept = 0;
    for (int i = 0; i < N; i++) {
        expect[i] = mask[i] ? rp[i] / (1 - ratio) : 0.0;
        kept += mask[i];
    }
    why = "dX != R * mask / (1 - ratio)";
    for (int i = 0; i < N; i++)
        if (fabs(dx[i] - expect[i]) > 1e-15) goto out;
    why = "finite differences";
    double *xp = x->data, worst = 0;
    for (int i = 0; i < N; i++) {
        const double eps = 1e-6, keep = xp[i];
        xp[i] = keep + eps;
        if (kiln_session_run_seeded(s, seed, 1, &x, 1, outs)) goto out;
        double lp = kiln_get_f64(outs[0], 0);
        xp[i] = keep - eps;
        if (kiln_session_run_seeded(s, seed, 1, &x, 1, outs)) goto out;
        double lm = kiln_get_f64(outs[0], 0);
        xp[i] = keep;
        double num = (lp - lm) / (2 * eps), err = fabs(num - expect[i]), tol = 1e-6 + 1e-5 * fabs(num);
        if (!(err <= tol)) goto out;
        if (err / tol > worst) worst = err / tol;
    }
    why = "a degenerate mask";
    if (kept == 0 || kept == N) goto out;
    printf("ok   dropout grad training: dX = dY * mask / (1 - ratio) with %d of %d kept, matches finite differences "
           "under a fixed seed, %.0f%% of error budget\n", kept, N, worst * 100);
    fails = 0;
out:
    if (fails)
        printf("FAIL dropout grad training: %s%s%s\n", why, ctx ? ": " : "", ctx ? kiln_context_message(ctx) : "");
    kiln_session_free(s);
    kiln_model_free(train);
    kiln_model_free(m);
    kiln_context_free(ctx);
    kiln_tensor_free(x);
    kiln_tensor_free(r);
    kiln_tensor_free(rt);
    kiln_tensor_free(tt);
    return fails;
}

/* relu = 1: dX = Y > 0 ? g : 0 with g the relu = 0 result, by hand. */
static int test_grad_relu_hand(void) {
    int fails = 0;
    kiln_tensor *in[5], *dx;
    /* ratio 0.75 (scale 4): g = 4 dY where kept; Y zero, -0, negative or NaN give 0 whatever
     * g is (NaN, inf), Y > 0 passes g (NaN, inf and a dropped 0 too) */
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(11), KT_VALS(1, 2, -3, 4, NAN, NAN, INFINITY, INFINITY, 5, -0.5, 7));
    in[1] = kt_make(KILN_BOOL, 1, KT_DIMS(11), KT_VALS(1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1));
    in[2] = kt_scalar(KILN_F32, 0.75);
    in[3] = kt_scalar(KILN_BOOL, 1);
    in[4] = kt_make(KILN_F32, 1, KT_DIMS(11), KT_VALS(0, -1, 2, 3, 1, 0, 0.5, -2, NAN, 1e-30, -0.0));
    dx = kt_make(KILN_F32, 1, KT_DIMS(11), KT_VALS(0, 0, -12, 0, NAN, 0, INFINITY, 0, 0, -2, 0));
    fails += kiln_optest("DropoutGrad", "relu=1", 5, in, 1, &dx, 0, 0,
                         "dropout grad relu: Y zero, negative, NaN; g NaN and inf");
    /* training_mode false: the mask is not read, dX = Y > 0 ? dY : 0 */
    in[0] = kt_make(KILN_F16, 2, KT_DIMS(2, 2), KT_VALS(1, -2, 3, 4));
    in[1] = kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(0, 0, 1, 1));
    in[2] = kt_scalar(KILN_F32, 0.5);
    in[3] = kt_scalar(KILN_BOOL, 0);
    in[4] = kt_make(KILN_F16, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 0, -1));
    dx = kt_make(KILN_F16, 2, KT_DIMS(2, 2), KT_VALS(1, -2, 0, 0));
    fails += kiln_optest("DropoutGrad", "relu=1", 5, in, 1, &dx, 0, 0, "dropout grad relu training_mode false f16");
    /* training with ratio 0: scale 1, the mask still applies */
    in[0] = kt_make(KILN_BF16, 1, KT_DIMS(4), KT_VALS(1.5, -2, 3, 4));
    in[1] = kt_make(KILN_BOOL, 1, KT_DIMS(4), KT_VALS(1, 0, 1, 1));
    in[2] = kt_scalar(KILN_F64, 0);
    in[3] = kt_scalar(KILN_BOOL, 1);
    in[4] = kt_make(KILN_BF16, 1, KT_DIMS(4), KT_VALS(1, 1, 1, -1));
    dx = kt_make(KILN_BF16, 1, KT_DIMS(4), KT_VALS(1.5, 0, 3, 0));
    fails += kiln_optest("DropoutGrad", "relu=1", 5, in, 1, &dx, 0, 0, "dropout grad relu training ratio 0 bf16");
    /* default ratio 0.5 (scale 2) */
    in[0] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(1, -2, 3));
    in[1] = kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(1, 1, 0));
    in[2] = NULL;
    in[3] = kt_scalar(KILN_BOOL, 1);
    in[4] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(2, 3, 4));
    dx = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(2, -4, 0));
    fails += kiln_optest("DropoutGrad", "relu=1", 5, in, 1, &dx, 0, 0, "dropout grad relu default ratio f64");
    /* neither ratio nor training_mode: inference form, the Relu alone */
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, -2));
    in[1] = kt_make(KILN_BOOL, 1, KT_DIMS(2), KT_VALS(0, 0));
    in[2] = in[3] = NULL;
    in[4] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(-1, 5));
    dx = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0, -2));
    fails += kiln_optest("DropoutGrad", "relu=1", 5, in, 1, &dx, 0, 0, "dropout grad relu inference form");

    /* rejected: relu without Y, Y of another shape (also of dY's size) or dtype, Y without
     * relu, relu = 2 */
    static const struct {
        const char *attrs, *label;
        int n_in;
        kiln_dtype ydt;
        int64_t ydims[2];
        int yndim;
        kiln_status want;
    } bad[] = {
        {"relu=1", "dropout grad relu=1 without Y", 4, KILN_F32, {2, 2}, 2, KILN_ERR_INVALID_ARGUMENT},
        {"relu=1", "dropout grad relu Y (3) for dY (2, 2)", 5, KILN_F32, {3}, 1, KILN_ERR_SHAPE},
        {"relu=1", "dropout grad relu Y (4) for dY (2, 2)", 5, KILN_F32, {4}, 1, KILN_ERR_SHAPE},
        {"relu=1", "dropout grad relu Y f16 for dY f32", 5, KILN_F16, {2, 2}, 2, KILN_ERR_TYPE},
        {"", "dropout grad Y without relu", 5, KILN_F32, {2, 2}, 2, KILN_ERR_INVALID_ARGUMENT},
        {"relu=2", "dropout grad relu=2", 5, KILN_F32, {2, 2}, 2, KILN_ERR_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
        in[1] = kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), NULL);
        in[2] = kt_scalar(KILN_F32, 0.5);
        in[3] = kt_scalar(KILN_BOOL, 1);
        in[4] = bad[i].n_in > 4 ? kt_make(bad[i].ydt, bad[i].yndim, bad[i].ydims, NULL) : NULL;
        fails += kiln_optest_fails("DropoutGrad", bad[i].attrs, bad[i].n_in, in, 1, bad[i].want, bad[i].label);
    }
    return fails;
}

/* relu = 1 against kiln.DropoutGrad then kiln.UnaryGrad op=Relu, bit for bit (a compare
 * by value would pass -0 for +0), on random dY, mask and Y of both signs, in every float
 * dtype, training on and off, sizes the 4-wide loops do and do not divide. */
static int test_grad_relu_random(void) {
    static const kiln_dtype dts[] = {KILN_F32, KILN_F16, KILN_BF16, KILN_F64};
    static const struct {
        int ndim;
        int64_t dims[3];
    } shapes[] = {{2, {64, 128}}, {3, {3, 5, 7}}};
    int fails = 0;
    uint64_t rs = 300;
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int train = 0; train < 2; train++) {
                const kiln_dtype dt = dts[d];
                char label[160];
                snprintf(label, sizeof label, "dropout grad relu %s %lld elements%s vs DropoutGrad, UnaryGrad",
                         kiln_dtype_name(dt), (long long)(shapes[s].dims[0] * shapes[s].dims[1] *
                                                          (shapes[s].ndim > 2 ? shapes[s].dims[2] : 1)),
                         train ? ", training" : ", training_mode false");
                kiln_tensor *dy = kt_rand(dt, shapes[s].ndim, shapes[s].dims, -3, 3, rs++);
                kiln_tensor *mask = kt_rand(KILN_BOOL, shapes[s].ndim, shapes[s].dims, 0, 2, rs++);
                kiln_tensor *y = kt_rand(dt, shapes[s].ndim, shapes[s].dims, -1, 1, rs++);
                kiln_tensor *r = kt_scalar(KILN_F32, 0.3), *t = kt_scalar(KILN_BOOL, train);
                kiln_tensor *g = NULL, *want = NULL, *got = NULL;
                bool ok = dy && mask && y && r && t &&
                          kiln_optest_eval("kiln", "DropoutGrad", "", 1, 4, (kiln_tensor *[]){dy, mask, r, t}, 1, &g,
                                           label) &&
                          kiln_optest_eval("kiln", "UnaryGrad", "op=Relu", 1, 3, (kiln_tensor *[]){g, NULL, y}, 1,
                                           &want, label) &&
                          kiln_optest_eval("kiln", "DropoutGrad", "relu=1", 1, 5, (kiln_tensor *[]){dy, mask, r, t, y},
                                           1, &got, label);
                if (ok && kiln_tensor_same_bits(got, want, label)) ok = false;
                if (ok) { /* the case can fail: the Relu zeroes some of g and passes others */
                    int64_t passed = 0, zeroed = 0;
                    for (int64_t i = 0; i < kiln_tensor_numel(g); i++) {
                        const double gi = kiln_get_f64(g, i), wi = kiln_get_f64(want, i);
                        passed += gi != 0 && wi == gi;
                        zeroed += gi != 0 && wi == 0;
                    }
                    if (!passed || !zeroed) {
                        printf("FAIL %s: degenerate case (%lld passed, %lld zeroed)\n", label, (long long)passed,
                               (long long)zeroed);
                        ok = false;
                    }
                }
                fails += !ok;
                kiln_tensor_free(dy);
                kiln_tensor_free(mask);
                kiln_tensor_free(y);
                kiln_tensor_free(r);
                kiln_tensor_free(t);
                kiln_tensor_free(g);
                kiln_tensor_free(want);
                kiln_tensor_free(got);
            }
    return fails;
}

static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[4], *dx;
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 4));
    in[1] = kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(1, 0, 1, 0));
    in[2] = kt_scalar(KILN_F32, 0.75);
    in[3] = kt_scalar(KILN_BOOL, 1);
    dx = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(4, 0, 12, 0));
    fails += kiln_optest("DropoutGrad", "", 4, in, 1, &dx, 0, 0, "dropout grad training");
    in[0] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(1, -2, 3));
    in[1] = kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(0, 1, 1));
    in[2] = NULL;
    in[3] = kt_scalar(KILN_BOOL, 1);
    dx = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0, -4, 6));
    fails += kiln_optest("DropoutGrad", "", 4, in, 1, &dx, 0, 0, "dropout grad default ratio 0.5");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, -2, 3));
    in[1] = kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(0, 1, 1));
    in[2] = kt_scalar(KILN_F32, 0.5);
    in[3] = kt_scalar(KILN_BOOL, 0);
    dx = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, -2, 3));
    fails += kiln_optest("DropoutGrad", "", 4, in, 1, &dx, 0, 0, "dropout grad training_mode false");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("DropoutGrad", "", 2, in, 1, KILN_ERR_SHAPE, "dropout grad float mask");
    return fails + test_grad_relu_hand() + test_grad_relu_random();
}

/* Training-mode run outside the optest harness, so that the seed can be chosen. Returns
 * the outputs (y, mask) or false on failure. */
static bool run_training(uint64_t seed, double ratio, const kiln_tensor *x, kiln_tensor **y,
                         kiln_tensor **mask) {
    kiln_context ctx = {0};
    kiln_clear_error(&ctx); /* messages are per thread, keyed by address: start empty */
    kiln_node node = {.op_type = (char *)"Dropout", .name = (char *)"t", .domain = (char *)"",
                      .opset = 21, .n_in = 3, .n_out = 2};
    node.op = kiln_op_index("Dropout");
    kiln_tensor *r = kt_scalar(KILN_F32, ratio), *t = kt_scalar(KILN_BOOL, 1);
    kiln_tensor *in[3] = {(kiln_tensor *)x, r, t}, shapes[2], *out[2] = {&shapes[0], &shapes[1]};
    memset(shapes, 0, sizeof shapes);
    kiln_op_ctx c = {.kctx = &ctx, .node = &node, .n_in = 3, .in = in, .n_out = 2, .out = out,
                     .seed = seed};
    bool ok = infer(&c) == KILN_OK;
    *y = ok ? kiln_tensor_new(NULL, shapes[0].dtype, shapes[0].ndim, shapes[0].dims) : NULL;
    *mask = ok ? kiln_tensor_new(NULL, shapes[1].dtype, shapes[1].ndim, shapes[1].dims) : NULL;
    ok = *y && *mask;
    if (ok) {
        out[0] = *y;
        out[1] = *mask;
        ok = forward(&c) == KILN_OK;
        if (!ok) printf("     dropout training: %s\n", kiln_context_message(&ctx));
    }
    kiln_tensor_free(r);
    kiln_tensor_free(t);
    return ok;
}

/* Statistical checks of training mode: kept share near 1 - ratio, kept values scaled,
 * dropped ones zero and matching the mask, same seed same mask, new seed new mask. */
static int test_training(void) {
    enum { N = 20000 };
    double ratio = 0.3;
    kiln_tensor *x = kt_rand(KILN_F32, 1, KT_DIMS(N), 0.5, 1.5, 7);
    kiln_tensor *y1 = NULL, *m1 = NULL, *y2 = NULL, *m2 = NULL, *y3 = NULL, *m3 = NULL;
    int fails = 0;
    if (!x || !run_training(11, ratio, x, &y1, &m1) || !run_training(11, ratio, x, &y2, &m2) ||
        !run_training(12, ratio, x, &y3, &m3)) {
        printf("FAIL dropout training: could not run\n");
        fails = 1;
    } else {
        const float *xp = x->data, *yp = y1->data;
        const bool *mp = m1->data;
        int64_t kept = 0, wrong = 0, differ = 0;
        for (int i = 0; i < N; i++) {
            kept += mp[i];
            double want = mp[i] ? xp[i] / (1 - ratio) : 0.0;
            if (!(fabs(yp[i] - want) <= 1e-6 * fabs(want))) wrong++;
            differ += mp[i] != ((const bool *)m3->data)[i];
        }
        /* binomial: sd = sqrt(N p (1-p)) ~ 65; allow 5 sd */
        double share = (double)kept / N;
        bool same = memcmp(m1->data, m2->data, N) == 0 && memcmp(y1->data, y2->data, N * 4) == 0;
        if (kept < N * (1 - ratio) - 325 || kept > N * (1 - ratio) + 325 || wrong || !same ||
            differ < N / 10) {
            printf("FAIL dropout training: kept share %.4f (want %.2f), %lld wrong values, "
                   "same seed %s, %lld of %d mask bits differ with a new seed\n",
                   share, 1 - ratio, (long long)wrong, same ? "reproduced" : "NOT reproduced",
                   (long long)differ, N);
            fails = 1;
        } else {
            printf("ok   dropout training: kept share %.4f (want %.2f), values scaled, "
                   "reproducible by seed, %lld mask bits differ with a new seed\n",
                   share, 1 - ratio, (long long)differ);
        }
    }
    kiln_tensor_free(x);
    kiln_tensor_free(y1); kiln_tensor_free(m1);
    kiln_tensor_free(y2); kiln_tensor_free(m2);
    kiln_tensor_free(y3); kiln_tensor_free(m3);
    return fails;
}

static int test(void) {
    int fails = 0;
    kiln_tensor *in[3], *out[2];

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, -2, 3.5, 0));
    out[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, -2, 3.5, 0));
    out[1] = kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(1, 1, 1, 1));
    fails += kiln_optest("Dropout", "", 1, in, 2, out, 0, 0, "dropout inference identity");

    in[0] = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(1, -2, 3.5));
    in[1] = kt_scalar(KILN_F32, 0.75);
    out[0] = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(1, -2, 3.5));
    fails += kiln_optest("Dropout", "seed=3", 2, in, 1, out, 0, 0,
                         "dropout ratio without training_mode");

    in[0] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(1, -2, 3.5));
    in[1] = kt_scalar(KILN_F32, 0);
    in[2] = kt_scalar(KILN_BOOL, 1);
    out[0] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(1, -2, 3.5));
    out[1] = kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(1, 1, 1));
    fails += kiln_optest("Dropout", "", 3, in, 2, out, 0, 0, "dropout training ratio 0");

    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, -2, 3.5));
    out[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, -2, 3.5));
    fails += kiln_optest_opset("Dropout", "ratio=0.2", 11, 1, in, 1, out, 0, 0,
                               "dropout opset 11 attribute ratio");

    fails += test_training();

    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    in[1] = kt_scalar(KILN_F32, 1.0);
    in[2] = kt_scalar(KILN_BOOL, 1);
    fails += kiln_optest_fails("Dropout", "", 3, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "dropout training ratio 1");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    in[1] = kt_scalar(KILN_F32, 0.5);
    in[2] = kt_scalar(KILN_F32, 1);
    fails += kiln_optest_fails("Dropout", "", 3, in, 1, KILN_ERR_TYPE,
                               "dropout float training_mode");

    /* gradients: inference forms are the identity; training with ratio 0 keeps every
     * element; a real ratio is checked under a fixed seed in test_grad_training */
    static const bool x_only[3] = {true, false, false};
    fails += kiln_gradcheck("Dropout", "", 13, 1, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 1)},
                            NULL, "dropout grad inference");
    fails += kiln_gradcheck("Dropout", "", 12, 3,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 2), kt_scalar(KILN_F32, 0.5),
                                              kt_scalar(KILN_BOOL, 0)},
                            x_only, "dropout grad training_mode false");
    fails += kiln_gradcheck_ex("Dropout", "", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 3), kt_scalar(KILN_F64, 0),
                                                 kt_scalar(KILN_BOOL, 1)},
                               x_only, 2, 1.0, "dropout grad training ratio 0");
    fails += kiln_gradcheck("Dropout", "ratio=0.3", 11, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 1, KT_DIMS(5), -1, 1, 4)}, NULL,
                            "dropout grad opset 11");
    fails += test_grad_training();
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Dropout", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 341),
                                                kt_scalar(KILN_F32, 0.3),
                                                kt_scalar(KILN_BOOL, 1)},
                               2, "dropout random training, ratio 0.3");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Dropout", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 7), -2, 2, 1305)},
                               1, "dropout inference passes X through");
    fails += kiln_optest_sweep("Dropout", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 5007)},
                               1, "dropout (NHWC) inference");
    return fails;
}
#endif /* KILN_OPTESTS */

/* Training: training_mode (input 2) a constant true, the mask (output 1) for the gradient. */
static const kiln_op_training training_form = {.mode_input = 2, .n_outputs = 2, .output_names = {NULL, "mask"}};

const kiln_op_def kiln_op_dropout = {
    .precision = KILN_PREC_FOLLOW, .f32_inputs = 0x2u /* ratio */, .layout = KILN_LAYOUT_UNARY,
    .random = true, .training = &training_form, .out_dtype = {KILN_DT_IN0, KILN_DT_BOOL},
    .name = "Dropout", .min_inputs = 1, .max_inputs = 3, .min_outputs = 1, .max_outputs = 2,
    .nondiff_inputs = (1u << 1) | (1u << 2),
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};

const kiln_op_def kiln_op_dropout_grad = {
    .precision = KILN_PREC_FOLLOW, .f32_inputs = 0xCu /* ratio, training_mode */,
    .name = "DropoutGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 5, .min_outputs = 1, .max_outputs = 1,
    .infer = infer_grad, .cpu_forward = forward_grad, .test = KILN_OP_TESTS(test_grad),
};
