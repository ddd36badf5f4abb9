/*
 * reduce_mean.c — ReduceMean: mean of the elements along `axes`.
 * Opsets 11/13: axes attribute, keepdims. Opset 18+: axes is an optional int64 input (a
 * value input) and noop_with_empty_axes applies. Floats are averaged in double (an
 * empty reduction gives NaN); integers are summed in 64 bits and divided with
 * truncation toward zero, as numpy's mean followed by a cast does. See reduce_common.h.
 * Gradient: kiln.ReduceMeanGrad(X, dY, axes): dX = dY broadcast back over the reduced dims / count.
 */
#include "../core/optest.h"
#ifdef KILN_OPTESTS
#include "../train/autograd.h" /* the tests build training graphs */
#endif
#include "reduce_common.h"

#include <math.h>
#include <stdio.h>

enum { AXES_INPUT_OPSET = 18 };

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_reduce_infer(c, AXES_INPUT_OPSET, true, false);
}
static kiln_status forward(kiln_op_ctx *c) {
    return kiln_reduce_forward(c, AXES_INPUT_OPSET, KILN_REDUCE_MEAN);
}
static kiln_status grad(kiln_grad_ctx *g) {
    return kiln_reduce_grad_rule(g, "ReduceMeanGrad", KILN_REDUCE_MEAN);
}
static kiln_status infer_grad(kiln_op_ctx *c) {
    return kiln_reduce_grad_infer(c, AXES_INPUT_OPSET, KILN_REDUCE_MEAN);
}
static kiln_status forward_grad(kiln_op_ctx *c) {
    return kiln_reduce_grad_forward(c, AXES_INPUT_OPSET, KILN_REDUCE_MEAN);
}

#ifdef KILN_OPTESTS
/* 0, 1, 2, ... in shape dims: expected values below follow from the index by hand. */
static kiln_tensor *arange(kiln_dtype dt, int ndim, const int64_t *dims) {
    kiln_tensor *t = kt_make(dt, ndim, dims, NULL);
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++) kiln_set_f64(t, i, (double)i);
    return t;
}

/* MSE as users write it: L = ReduceMean(Sub(P, T) squared by Mul or by Pow(., 2)),
 * differentiated end to end through autograd: dL/dP must be 2 (P - T) / n and match
 * central differences. Needs the elementwise ops' gradient rules; skipped without them. */
static int test_mse(bool use_pow) {
    const char *label = use_pow ? "mse Sub -> Pow -> ReduceMean" : "mse Sub -> Mul -> ReduceMean";
    const kiln_op_def *sub = kiln_op_find("Sub"), *sq = kiln_op_find(use_pow ? "Pow" : "Mul");
    if (!sub || !sub->grad || !sq || !sq->grad) {
        printf("skip %s: %s has no gradient rule yet\n", label, sub && sub->grad ? (use_pow ? "Pow" : "Mul") : "Sub");
        return 0;
    }
    enum { N = 12 };
    kiln_context *ctx = NULL;
    kiln_model *m = NULL, *train = NULL;
    kiln_session *s = NULL;
    kiln_tensor *p = kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 41);
    kiln_tensor *t = kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 42);
    kiln_tensor *two = kt_scalar(KILN_F64, 2);
    int fails = 1;
    const char *why = "building the graph";
    if (!p || !t || !two || kiln_context_create(&ctx) || kiln_model_create(ctx, &m)) goto out;
    if (kiln_model_add_input(m, "p", KILN_F64, 2, p->dims) || kiln_model_add_initializer(m, "t", t) ||
        kiln_model_add_initializer(m, "two", two) ||
        kiln_model_add_node(m, "Sub", "sub", 2, (const char *[]){"p", "t"}, 1, (const char *[]){"d"}, NULL) ||
        kiln_model_add_node(m, use_pow ? "Pow" : "Mul", "square", 2, (const char *[]){"d", use_pow ? "two" : "d"}, 1,
                            (const char *[]){"d2"}, NULL) ||
        kiln_model_add_node(m, "ReduceMean", "mean", 1, (const char *[]){"d2"}, 1, (const char *[]){"l"}, NULL) ||
        kiln_model_add_output(m, "l") || kiln_model_finalize(m) || kiln_model_clone(m, &train))
        goto out;
    int pv = kiln_model_find_value(train, "p"), dpv = -1;
    why = "autograd";
    if (kiln_autograd(train, kiln_model_find_value(train, "l"), 1, &pv, &dpv)) goto out;
    why = "the training graph";
    if (kiln_model_add_output(train, train->values[dpv].name) || kiln_model_finalize(train) ||
        kiln_session_create(train, NULL, &s))
        goto out;
    const kiln_tensor *outs[2];
    why = "run";
    if (kiln_session_run(s, 1, &p, 2, outs) || kiln_tensor_numel(outs[1]) != N) goto out;
    double *pp = p->data, grad[N], worst = 0;
    const double *tp = t->data;
    for (int i = 0; i < N; i++) grad[i] = kiln_get_f64(outs[1], i);
    why = "dL/dP != 2 (P - T) / n";
    for (int i = 0; i < N; i++)
        if (fabs(grad[i] - 2 * (pp[i] - tp[i]) / N) > 1e-15) goto out;
    why = "finite differences";
    for (int i = 0; i < N; i++) {
        const double eps = 1e-6, keep = pp[i];
        pp[i] = keep + eps;
        if (kiln_session_run(s, 1, &p, 1, outs)) goto out;
        double lp = kiln_get_f64(outs[0], 0);
        pp[i] = keep - eps;
        if (kiln_session_run(s, 1, &p, 1, outs)) goto out;
        double lm = kiln_get_f64(outs[0], 0);
        pp[i] = keep;
        double num = (lp - lm) / (2 * eps), err = fabs(num - grad[i]), tol = 1e-6 + 1e-5 * fabs(num);
        if (!(err <= tol)) goto out;
        if (err / tol > worst) worst = err / tol;
    }
    printf("ok   %s: dL/dP = 2 (P - T) / n, matches finite differences, %.0f%% of error budget\n", label, worst * 100);
    fails = 0;
out:
    if (fails) printf("FAIL %s: %s%s%s\n", label, why, ctx ? ": " : "", ctx ? kiln_context_message(ctx) : "");
    kiln_session_free(s);
    kiln_model_free(train);
    kiln_model_free(m);
    kiln_context_free(ctx);
    kiln_tensor_free(p);
    kiln_tensor_free(t);
    kiln_tensor_free(two);
    return fails;
}

static int test(void) {
    int fails = 0;
    kiln_tensor *in[2], *y;

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(2, 5));
    fails += kiln_optest("ReduceMean", "", 2, in, 1, &y, 0, 0, "mean axis 1 keepdims");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6));
    y = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(2.5, 3.5, 4.5));
    fails += kiln_optest_opset("ReduceMean", "axes=[0];keepdims=0", 13, 1, in, 1, &y, 0, 0,
                               "mean opset 13 axes attribute");

    /* (2,3,4) over axes {0,2}: mean_{a,c} 12a + 4j + c = 7.5 + 4j */
    in[0] = arange(KILN_F32, 3, KT_DIMS(2, 3, 4));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-3, 2));
    y = kt_make(KILN_F32, 3, KT_DIMS(1, 3, 1), KT_VALS(7.5, 11.5, 15.5));
    fails += kiln_optest("ReduceMean", "", 2, in, 1, &y, 1e-6, 1e-6, "mean axes 0,2 f32");

    /* NCHW spatial mean, the global-average-pool pattern: (1,2,2,2) over {2,3} */
    in[0] = kt_make(KILN_BF16, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(1, 2, 3, 6, -1, -2, -3, -4));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 3));
    y = kt_make(KILN_BF16, 4, KT_DIMS(1, 2, 1, 1), KT_VALS(3, -2.5));
    fails += kiln_optest("ReduceMean", "", 2, in, 1, &y, 0, 0, "mean spatial bf16");

    in[0] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.1, 0.2, 0.4));
    y = kt_scalar(KILN_F64, 0.7 / 3);
    fails += kiln_optest("ReduceMean", "keepdims=0", 1, in, 1, &y, 1e-15, 1e-15, "mean all f64");

    in[0] = kt_make(KILN_I32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 4, -1, -2, -4));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(2, -2));
    fails += kiln_optest("ReduceMean", "keepdims=0", 2, in, 1, &y, 0, 0, "mean i32 truncates");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("ReduceMean", "axes=[1]", 1, in, 1, KILN_ERR_UNSUPPORTED,
                               "mean opset 21 rejects axes attribute");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-3));
    fails += kiln_optest_fails("ReduceMean", "", 2, in, 1, KILN_ERR_SHAPE, "mean axis out of range");

    /* gradients: axes as input (opset 18), as attribute (13, 11), all axes, keepdims */
    fails += kiln_reduce_gradcheck("ReduceMean", "keepdims=0", 18, -1, NULL, 11,
                                   "mean grad all axes");
    fails += kiln_reduce_gradcheck("ReduceMean", "", 18, 1, KT_DIMS(1), 12,
                                   "mean grad axis 1 input");
    fails += kiln_reduce_gradcheck("ReduceMean", "axes=[0,2]", 13, -1, NULL, 13,
                                   "mean grad opset 13 axes 0,2");
    fails += kiln_reduce_gradcheck("ReduceMean", "axes=[-1];keepdims=0", 11, -1, NULL, 14,
                                   "mean grad opset 11 axis -1");
    fails += test_mse(false);
    fails += test_mse(true);
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("ReduceMean", "keepdims=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 292),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "reducemean random axes 1,3 of 2x3x17x19");
    fails += kiln_optest_sweep("ReduceMean", "keepdims=0", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(1031), -2, 2, 296)},
                               1, "reducemean random all of 1031");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("ReduceMean", "", 18, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 7), -2, 2, 1509),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                               1, "reducemean middle axis input");
    fails += kiln_optest_sweep("ReduceMean", "keepdims=0", 18, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 7), -2, 2, 1510),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, -1))},
                               1, "reducemean outer and inner axes");
    fails += kiln_optest_sweep("ReduceMean", "", 18, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 6, 33), -2, 2, 1511),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-1))},
                               1, "reducemean last axis");
    fails += kiln_optest_sweep("ReduceMean", "", 18, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 6, 9), -2, 2, 1512)},
                               1, "reducemean all axes");
    fails += kiln_optest_sweep("ReduceMean", "noop_with_empty_axes=1", 18, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 6), -2, 2, 1513)},
                               1, "reducemean noop");
    fails += kiln_optest_sweep("ReduceMean", "axes=[2,3]", 16, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 6), -2, 2, 1514)},
                               1, "reducemean axes attribute, NCHW spatial");
    fails += kiln_optest_sweep_tol("ReduceMean", "keepdims=0", 18, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 3000), -2, 2, 1515),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                                   1, 0.0001, 0, "reducemean long rows");
    fails += kiln_optest_sweep_tol("ReduceMean", "", 18, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(2000, 5), -2, 2, 1516),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0))},
                                   1, 0.002, 0, "reducemean long columns");
    /* random, for the backend sweep (tests/gpu/test_backend_ops.c): their gradient graphs
     * sweep kiln.ReduceMeanGrad (axes as an input and as the attribute, keepdims both ways) */
    fails += kiln_optest_sweep("ReduceMean", "keepdims=1", 18, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 4, 5, 6), -2, 2, 7311),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "reducemean random axes 1,3 input");
    fails += kiln_optest_sweep("ReduceMean", "axes=[-1];keepdims=0", 13, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 7, 9), -2, 2, 7312)}, 1,
                               "reducemean random last axis attribute");
    return fails;
}

static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[3], *dx;
    /* mean over 3 elements: dY / 3 */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(3, 6));
    in[2] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    dx = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 1, 1, 2, 2, 2));
    fails += kiln_optest("ReduceMeanGrad", "", 3, in, 1, &dx, 0, 0, "mean grad axis 1");
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(2, 4, 6));
    in[2] = NULL;
    dx = kt_make(KILN_F64, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 1, 2, 3));
    fails += kiln_optest_opset("ReduceMeanGrad", "axes=[0];keepdims=0", 13, 3, in, 1, &dx, 0, 0,
                               "mean grad opset 13 axis 0");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_reduce_mean = {
    .precision = KILN_PREC_FP32,
    .name = "ReduceMean", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
    .grad = grad,
};

const kiln_op_def kiln_op_reduce_mean_grad = {
    .precision = KILN_PREC_FP32,
    .name = "ReduceMeanGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 3,
    .min_outputs = 1, .max_outputs = 1, .value_inputs = 1u << 2, .shape_only_inputs = 1u << 0,
    .infer = infer_grad, .cpu_forward = forward_grad, .test = KILN_OP_TESTS(test_grad),
};
