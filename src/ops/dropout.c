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
 */
#include "../core/optest.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define GOLDEN 0x9E3779B97F4A7C15ull

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static bool has_in(const kiln_op_ctx *c, int i) { return c->n_in > i && c->in[i] != NULL; }
static bool has_out(const kiln_op_ctx *c, int i) { return c->n_out > i && c->out[i] != NULL; }

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "input data dtype %s is not supported", kiln_dtype_name(x->dtype));
    if (c->node->opset < 12) {
        KILN_OP_CHECK(c, !has_in(c, 1) && !has_in(c, 2), KILN_ERR_UNSUPPORTED,
                      "Dropout-%d takes one input (ratio is an attribute before opset 12)",
                      c->node->opset);
    }
    if (has_in(c, 1)) {
        const kiln_tensor *r = c->in[1];
        KILN_OP_CHECK(c, kiln_dtype_is_float(r->dtype), KILN_ERR_TYPE,
                      "input ratio dtype %s is not a float type", kiln_dtype_name(r->dtype));
        KILN_OP_CHECK(c, kiln_tensor_numel(r) == 1, KILN_ERR_SHAPE, "input ratio must be a scalar");
    }
    if (has_in(c, 2)) {
        const kiln_tensor *t = c->in[2];
        KILN_OP_CHECK(c, t->dtype == KILN_BOOL, KILN_ERR_TYPE,
                      "input training_mode dtype %s is not bool", kiln_dtype_name(t->dtype));
        KILN_OP_CHECK(c, kiln_tensor_numel(t) == 1, KILN_ERR_SHAPE,
                      "input training_mode must be a scalar");
    }
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    if (has_out(c, 1)) kiln_tensor_set_shape(c->out[1], KILN_BOOL, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    bool *mask = has_out(c, 1) ? c->out[1]->data : NULL; // like x
    int64_t n = kiln_tensor_numel(x);
    bool train = c->node->opset >= 12 && has_in(c, 2) && *(const bool *)c->in[2]->data;
    double ratio = has_in(c, 1) ? kiln_get_f64(c->in[1], 0) : 0.5;

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

/* Training-mode run outside the optest harness, so that the seed can be chosen. Returns
 * the outputs (y, mask) or false on failure. */
static bool run_training(uint64_t seed, double ratio, const kiln_tensor *x, kiln_tensor **y,
                         kiln_tensor **mask) {
    kiln_context ctx = {0};
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
        if (!ok) printf("     dropout training: %s\n", ctx.msg);
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
    return fails;
}

const kiln_op_def kiln_op_dropout = {
    .name = "Dropout", .min_inputs = 1, .max_inputs = 3, .min_outputs = 1, .max_outputs = 2,
    .infer = infer, .cpu_forward = forward, .test = test,
};
