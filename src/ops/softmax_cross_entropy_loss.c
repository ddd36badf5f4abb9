/*
 * softmax_cross_entropy_loss.c — SoftmaxCrossEntropyLoss (opsets 12/13):
 * log_prob = LogSoftmax(scores) along the class dim C (max-shifted, in double), then the
 * NegativeLogLikelihoodLoss of log_prob with labels, weights, ignore_index and reduction
 * none / sum / mean (see loss_common.h). The optional second output is log_prob, shaped
 * like scores (N,C,d1..dk).
 * Gradient (scores only): kiln.SoftmaxCrossEntropyLossGrad(X, target, weight, dLoss,
 * dLogProb) recomputes softmax(X) and adds the log_prob output's gradient when it is used;
 * see loss_common.h.
 */
#include "../core/optest.h"
#include "loss_common.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static kiln_status infer(kiln_op_ctx *c) {
    kiln_status st = kiln_nll_infer(c);
    if (st != KILN_OK) return st;
    if (c->n_out > 1 && c->out[1])
        kiln_tensor_set_shape(c->out[1], c->in[0]->dtype, c->in[0]->ndim, c->in[0]->dims);
    return KILN_OK;
}

/* log_prob in double, for the loss and the optional output. */
static kiln_status grad(kiln_grad_ctx *g) { return kiln_nll_grad_rule(g, "SoftmaxCrossEntropyLossGrad"); }
static kiln_status infer_grad(kiln_op_ctx *c) { return kiln_nll_grad_infer(c, true); }
static kiln_status forward_grad(kiln_op_ctx *c) { return kiln_nll_grad_forward(c, true); }

static size_t workspace(const kiln_op_ctx *c) {
    return (size_t)kiln_tensor_numel(c->in[0]) * sizeof(double);
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0]; // (N,C,D)
    int64_t N = x->dims[0], C = x->dims[1], D = 1;
    for (int d = 2; d < x->ndim; d++) D *= x->dims[d];
    double *lp = c->workspace; // (N,C,D)

    #pragma omp parallel for if (N * C * D > (1 << 15)) schedule(static)
    for (int64_t nd = 0; nd < N * D; nd++) {
        int64_t base = (nd / D) * C * D + nd % D;
        double mx = -INFINITY, sum = 0;
        for (int64_t k = 0; k < C; k++) {
            double v = kiln_get_f64(x, base + k * D);
            if (v > mx || isnan(v)) mx = v;
        }
        for (int64_t k = 0; k < C; k++) sum += exp(kiln_get_f64(x, base + k * D) - mx);
        double log_sum = log(sum);
        for (int64_t k = 0; k < C; k++)
            lp[base + k * D] = (kiln_get_f64(x, base + k * D) - mx) - log_sum;
    }

    int64_t n = kiln_tensor_numel(x);
    if (c->n_out > 1 && c->out[1])
        for (int64_t i = 0; i < n; i++) kiln_set_f64(c->out[1], i, lp[i]);
    kiln_tensor view = {.dtype = KILN_F64, .ndim = x->ndim, .data = lp};
    memcpy(view.dims, x->dims, sizeof view.dims);
    return kiln_nll_forward(c, &view);
}

#ifdef KILN_OPTESTS
/* (2,3,2) scores shared by several cases: x[n,c,d] */
static kiln_tensor *input3(kiln_dtype dt) {
    return kt_make(dt, 3, KT_DIMS(2, 3, 2), KT_VALS(0.5, -1, 2, 0.25, -0.75, 1.5,
                                                    -2, 3, 0.1, -0.4, 1, -1.25));
}

static int test(void) {
    int fails = 0;
    kiln_tensor *in[3], *out[2];
    /* expected values: onnx.reference (ONNX 1.17) on the same inputs */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 5), KT_VALS(1.0, 2, 0.5, -1, 0, 0.3, -0.2, 2.2, 1.1,
                                                       -3, 0, 0, 0, 0, 1));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(1, 2, 4));
    out[0] = kt_scalar(KILN_F32, 0.6452852583708008);
    fails += kiln_optest("SoftmaxCrossEntropyLoss", "", 2, in, 1, out, 1e-6, 1e-6,
                         "sce (N,C) mean");

    in[0] = input3(KILN_F32);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(2, -1, 1, -1));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0.2, 1.0, 0.7));
    out[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(2.1016513071650755, 0, 1.2759379253345307, 0));
    out[1] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 2),
                     KT_VALS(-1.7523590102358224, -2.813780863337258, -0.2523590102358225,
                             -1.563780863337258, -3.0023590102358226, -0.313780863337258,
                             -3.3759379253345307, -0.04653763280952022, -1.2759379253345307,
                             -3.4465376328095205, -0.37593792533453063, -4.29653763280952));
    fails += kiln_optest("SoftmaxCrossEntropyLoss", "reduction=none;ignore_index=-1", 3, in, 2,
                         out, 1e-6, 1e-6, "sce (N,C,d1) none weights ignore_index log_prob");

    in[0] = input3(KILN_F64);
    in[1] = kt_make(KILN_I32, 2, KT_DIMS(2, 2), KT_VALS(2, 0, 1, 2));
    out[0] = kt_scalar(KILN_F64, 11.388615431717131);
    fails += kiln_optest("SoftmaxCrossEntropyLoss", "reduction=sum", 2, in, 1, out, 1e-13, 1e-13,
                         "sce sum f64 i32 labels");

    in[0] = input3(KILN_BF16);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(2, 0, 1, 2));
    in[2] = kt_make(KILN_BF16, 1, KT_DIMS(3), KT_VALS(0.2, 1.0, 0.7));
    out[0] = kt_scalar(KILN_BF16, 2.672277595436047);
    fails += kiln_optest("SoftmaxCrossEntropyLoss", "reduction=mean", 3, in, 1, out, 2e-2, 2e-2,
                         "sce bf16 weighted mean");

    in[0] = input3(KILN_F32);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    fails += kiln_optest_fails("SoftmaxCrossEntropyLoss", "", 2, in, 1, KILN_ERR_TYPE,
                               "sce float labels");
    in[0] = input3(KILN_F32);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 2), NULL);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("SoftmaxCrossEntropyLoss", "", 3, in, 1, KILN_ERR_SHAPE,
                               "sce weights of the wrong length");

    /* gradients with respect to the scores: every reduction, weights, ignore_index */
    static const bool x_only[3] = {true, false, false};
    fails += kiln_gradcheck("SoftmaxCrossEntropyLoss", "", 13, 2,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 5), -2, 2, 1),
                                              kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(1, 2, 4))},
                            x_only, "sce grad (N,C) mean");
    fails += kiln_gradcheck("SoftmaxCrossEntropyLoss", "reduction=sum", 12, 3,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 2), -2, 2, 2),
                                              kt_make(KILN_I32, 2, KT_DIMS(2, 2), KT_VALS(2, 0, 1, 2)),
                                              kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.2, 1.0, 0.7))},
                            x_only, "sce grad (N,C,d1) weighted sum");
    fails += kiln_gradcheck("SoftmaxCrossEntropyLoss", "reduction=none;ignore_index=0", 13, 2,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 2), -2, 2, 3),
                                              kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(2, 0, 1, 0))},
                            x_only, "sce grad none ignore_index");
    fails += kiln_gradcheck("SoftmaxCrossEntropyLoss", "ignore_index=-1", 13, 3,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 4, KT_DIMS(2, 3, 2, 2), -2, 2, 4),
                                              kt_make(KILN_I64, 3, KT_DIMS(2, 2, 2), KT_VALS(2, -1, 1, 0, 0, 2, -1, 2)),
                                              kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.2, 1.0, 0.7))},
                            x_only, "sce grad (N,C,d1,d2) weighted mean ignore_index");
    /* with the log_prob output in the loss too (the checker adds the losses with Sum) */
    const kiln_op_def *sum = kiln_op_find("Sum");
    if (sum && sum->grad)
        fails += kiln_gradcheck_ex("SoftmaxCrossEntropyLoss", "reduction=mean", 13, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 4, 3), -2, 2, 5),
                                                     kt_make(KILN_I64, 2, KT_DIMS(2, 3), KT_VALS(3, 0, 1, 2, 2, 0))},
                                   x_only, 2, 1.0, "sce grad with log_prob");
    else
        printf("skip sce grad with log_prob: Sum has no gradient rule yet\n");
    return fails;
}

static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[5], *dx;
    /* x = (0, ln 3): p = (0.25, 0.75); target 0, weight 2, sum: dX = 2 (p - (1, 0)) */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(1, 2), KT_VALS(0, 1.0986122886681098));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(2, 1));
    in[3] = kt_scalar(KILN_F32, 1);
    dx = kt_make(KILN_F32, 2, KT_DIMS(1, 2), KT_VALS(-1.5, 1.5));
    fails += kiln_optest("SoftmaxCrossEntropyLossGrad", "reduction=sum", 4, in, 1, &dx, 1e-6, 1e-6,
                         "sce grad weighted sum");
    /* x = (0, 0): p = (0.5, 0.5); target 1, mean, dLoss 2: 2 (p - (0, 1)) = (1, -1);
     * dLogProb (1, 2) adds dLogProb - p * 3 = (-0.5, 0.5) */
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(1, 2), KT_VALS(0, 0));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    in[2] = NULL;
    in[3] = kt_scalar(KILN_F64, 2);
    in[4] = kt_make(KILN_F64, 2, KT_DIMS(1, 2), KT_VALS(1, 2));
    dx = kt_make(KILN_F64, 2, KT_DIMS(1, 2), KT_VALS(0.5, -0.5));
    fails += kiln_optest("SoftmaxCrossEntropyLossGrad", "", 5, in, 1, &dx, 1e-15, 1e-15, "sce grad mean with dLogProb");
    /* only dLogProb: the log-softmax gradient alone */
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(1, 2), KT_VALS(0, 0));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    in[2] = NULL;
    in[3] = NULL;
    in[4] = kt_make(KILN_F64, 2, KT_DIMS(1, 2), KT_VALS(1, 2));
    dx = kt_make(KILN_F64, 2, KT_DIMS(1, 2), KT_VALS(-0.5, 0.5));
    fails += kiln_optest("SoftmaxCrossEntropyLossGrad", "", 5, in, 1, &dx, 1e-15, 1e-15, "sce grad dLogProb only");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_softmax_cross_entropy_loss = {
    .precision = KILN_PREC_FP32,
    .name = "SoftmaxCrossEntropyLoss", .min_inputs = 2, .max_inputs = 3,
    .min_outputs = 1, .max_outputs = 2, .nondiff_inputs = (1u << 1) | (1u << 2),
    .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace, .test = KILN_OP_TESTS(test),
    .grad = grad,
};

const kiln_op_def kiln_op_softmax_cross_entropy_loss_grad = {
    .precision = KILN_PREC_FP32,
    .name = "SoftmaxCrossEntropyLossGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 5,
    .min_outputs = 1, .max_outputs = 1,
    .infer = infer_grad, .cpu_forward = forward_grad, .test = KILN_OP_TESTS(test_grad),
};
