/*
 * negative_log_likelihood_loss.c — NegativeLogLikelihoodLoss (opsets 12/13):
 * loss[n,d] = -weight[t] * input[n,t,d] with t = target[n,d], then reduction none / sum /
 * mean (weighted mean); ignore_index masks elements out. See loss_common.h.
 * Gradient (input only): kiln.NegativeLogLikelihoodLossGrad(X, target, weight, dLoss)
 * puts -weight[t] * dLoss (over the weight sum for mean) at each target class.
 */
#include "../core/optest.h"
#include "loss_common.h"

static kiln_status infer(kiln_op_ctx *c) { return kiln_nll_infer(c); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_nll_forward(c, c->in[0]); }
static kiln_status grad(kiln_grad_ctx *g) { return kiln_nll_grad_rule(g, "NegativeLogLikelihoodLossGrad"); }
static kiln_status infer_grad(kiln_op_ctx *c) { return kiln_nll_grad_infer(c, false); }
static kiln_status forward_grad(kiln_op_ctx *c) { return kiln_nll_grad_forward(c, false); }

#ifdef KILN_OPTESTS
/* (2,3,2) input shared by several cases: x[n,c,d] */
static kiln_tensor *input3(kiln_dtype dt) {
    return kt_make(dt, 3, KT_DIMS(2, 3, 2), KT_VALS(0.5, -1, 2, 0.25, -0.75, 1.5,
                                                    -2, 3, 0.1, -0.4, 1, -1.25));
}

static int test(void) {
    int fails = 0;
    kiln_tensor *in[3], *y;
    /* expected values: onnx.reference (ONNX 1.17) on the same inputs, checked by hand */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), KT_VALS(-1.2, -0.3, -2.5, -0.9, -0.1, -3.0,
                                                       -1.5, -2.2, -0.7, -0.6, -4.0, -0.05));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(1, 0, 3));
    y = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0.3, 0.1, 0.05));
    fails += kiln_optest("NegativeLogLikelihoodLoss", "reduction=none", 2, in, 1, &y, 1e-7, 1e-6,
                         "nll (N,C) none");

    /* weighted mean: (0.7*0.75 + 0.2*1 - 0.1 + 0.7*1.25) / (0.7+0.2+1+0.7) */
    in[0] = input3(KILN_F32);
    in[1] = kt_make(KILN_I32, 2, KT_DIMS(2, 2), KT_VALS(2, 0, 1, 2));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0.2, 1.0, 0.7));
    y = kt_scalar(KILN_F32, 0.576923076923077);
    fails += kiln_optest("NegativeLogLikelihoodLoss", "", 3, in, 1, &y, 1e-7, 1e-6,
                         "nll (N,C,d1) weighted mean");

    in[0] = input3(KILN_F64);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(2, -1, 1, -1));
    y = kt_scalar(KILN_F64, 0.65);
    fails += kiln_optest("NegativeLogLikelihoodLoss", "reduction=sum;ignore_index=-1", 2, in, 1,
                         &y, 1e-15, 1e-14, "nll sum ignore_index -1");

    in[0] = input3(KILN_F16);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(2, -1, 1, -1));
    in[2] = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(0.2, 1.0, 0.7));
    y = kt_scalar(KILN_F16, 0.25);
    fails += kiln_optest("NegativeLogLikelihoodLoss", "ignore_index=-1", 3, in, 1, &y, 1e-3,
                         1e-3, "nll f16 weighted mean ignore_index");

    in[0] = input3(KILN_F32);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("NegativeLogLikelihoodLoss", "", 2, in, 1, KILN_ERR_SHAPE,
                               "nll target shape mismatch");
    in[0] = input3(KILN_F32);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(0, 3, 1, 1));
    fails += kiln_optest_fails("NegativeLogLikelihoodLoss", "", 2, in, 1,
                               KILN_ERR_INVALID_ARGUMENT, "nll target out of range");
    in[0] = input3(KILN_F32);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 2), NULL);
    fails += kiln_optest_fails("NegativeLogLikelihoodLoss", "reduction=max", 2, in, 1,
                               KILN_ERR_UNSUPPORTED, "nll unknown reduction");

    /* gradients with respect to the input: every reduction, weights, ignore_index */
    static const bool x_only[3] = {true, false, false};
    fails += kiln_gradcheck("NegativeLogLikelihoodLoss", "", 13, 2,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -3, 0, 1),
                                              kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(1, 0, 3))},
                            x_only, "nll grad (N,C) mean");
    fails += kiln_gradcheck("NegativeLogLikelihoodLoss", "reduction=sum", 12, 3,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 2), -3, 0, 2),
                                              kt_make(KILN_I32, 2, KT_DIMS(2, 2), KT_VALS(2, 0, 1, 2)),
                                              kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.2, 1.0, 0.7))},
                            x_only, "nll grad (N,C,d1) weighted sum");
    fails += kiln_gradcheck("NegativeLogLikelihoodLoss", "reduction=none;ignore_index=-1", 13, 2,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 2), -3, 0, 3),
                                              kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(2, -1, 1, 0))},
                            x_only, "nll grad none ignore_index");
    fails += kiln_gradcheck("NegativeLogLikelihoodLoss", "ignore_index=1", 13, 3,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 4, KT_DIMS(2, 3, 2, 2), -3, 0, 4),
                                              kt_make(KILN_I64, 3, KT_DIMS(2, 2, 2), KT_VALS(2, 1, 1, 0, 0, 2, 1, 2)),
                                              kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.2, 1.0, 0.7))},
                            x_only, "nll grad (N,C,d1,d2) weighted mean ignore_index");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("NegativeLogLikelihoodLoss", "reduction=mean", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(13, 7), -3, 0, 441),
                                                kt_rand(KILN_I64, 1, KT_DIMS(13), 0, 7, 442)},
                               1, "nll random mean");
    fails += kiln_optest_sweep("NegativeLogLikelihoodLoss", "reduction=none", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 7, 9), -3, 0, 443),
                                                kt_rand(KILN_I64, 3, KT_DIMS(2, 7, 9), 0, 5, 444)},
                               1, "nll random 4-D none");
    fails += kiln_optest_sweep("NegativeLogLikelihoodLoss", "reduction=mean", 13, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(64, 10), -5, 0, 3124),
                                                kt_rand(KILN_I64, 1, KT_DIMS(64), 0, 10, 3125)},
                               1, "negativeloglikelihoodloss mnist nll");
    fails += kiln_optest_sweep("NegativeLogLikelihoodLoss", "reduction=sum", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(6, 4), -5, 0, 3126),
                                                kt_rand(KILN_I32, 1, KT_DIMS(6), 0, 4, 3127),
                                                kt_rand(KILN_F32, 1, KT_DIMS(4), 0.2, 2, 3128)},
                               1, "negativeloglikelihoodloss i32 targets, weights");
    fails += kiln_optest_sweep("NegativeLogLikelihoodLoss", "reduction=none", 13, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 4, 5), -5, 0, 3129),
                                                kt_rand(KILN_I64, 2, KT_DIMS(3, 5), 0, 4, 3130)},
                               1, "negativeloglikelihoodloss none (N,C,d)");
    fails += kiln_optest_sweep("NegativeLogLikelihoodLoss", "ignore_index=3", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 3, 4), -5, 0, 3131),
                                                kt_rand(KILN_I64, 3, KT_DIMS(2, 3, 4), 0, 5, 3132),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), 0.2, 2, 3133)},
                               1, "negativeloglikelihoodloss weighted mean, ignore_index, (N,C,d1,d2)");
    fails += kiln_optest_sweep("NegativeLogLikelihoodLossGrad", "reduction=mean", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(64, 10), -2, 2, 3134),
                                                kt_rand(KILN_I64, 1, KT_DIMS(64), 0, 10, 3135),
                                                NULL,
                                                kt_rand(KILN_F32, 0, NULL, 0.5, 2, 3136)},
                               1, "negativeloglikelihoodlossgrad mnist nll");
    fails += kiln_optest_sweep("NegativeLogLikelihoodLossGrad", "ignore_index=3", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 3, 4), -2, 2, 3137),
                                                kt_rand(KILN_I64, 3, KT_DIMS(2, 3, 4), 0, 5, 3138),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), 0.2, 2, 3139),
                                                kt_rand(KILN_F32, 0, NULL, 0.5, 2, 3140)},
                               1, "negativeloglikelihoodlossgrad weighted mean, ignore_index");
    fails += kiln_optest_sweep("NegativeLogLikelihoodLossGrad", "reduction=sum", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(6, 4), -2, 2, 3141),
                                                kt_rand(KILN_I32, 1, KT_DIMS(6), 0, 4, 3142),
                                                kt_rand(KILN_F32, 1, KT_DIMS(4), 0.2, 2, 3143),
                                                kt_rand(KILN_F32, 0, NULL, 0.5, 2, 3144)},
                               1, "negativeloglikelihoodlossgrad sum, i32 targets");
    fails += kiln_optest_sweep("NegativeLogLikelihoodLossGrad", "reduction=none", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 6, 5), -2, 2, 3145),
                                                kt_rand(KILN_I32, 2, KT_DIMS(4, 5), 0, 6, 3146),
                                                NULL,
                                                kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 3147)},
                               1, "negativeloglikelihoodlossgrad none");
    fails += kiln_optest_sweep("NegativeLogLikelihoodLossGrad", "", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(64, 10, 30), -2, 2, 3148),
                                                kt_rand(KILN_I64, 2, KT_DIMS(64, 30), 0, 10, 3149),
                                                NULL,
                                                kt_rand(KILN_F32, 0, NULL, 0.5, 2, 3150)},
                               1, "negativeloglikelihoodlossgrad large mean (two kernels)");
    return fails;
}

static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[4], *dx;
    /* weighted mean: weight sum 2 + 0.5, dLoss 5 -> 2 per unit weight */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 0));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0.5, 1, 2));
    in[3] = kt_scalar(KILN_F32, 5);
    dx = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, 0, -4, -1, 0, 0));
    fails += kiln_optest("NegativeLogLikelihoodLossGrad", "", 4, in, 1, &dx, 0, 0, "nll grad weighted mean");
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(1, -1));
    in[2] = NULL;
    in[3] = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(3, 7));
    dx = kt_make(KILN_F64, 2, KT_DIMS(2, 3), KT_VALS(0, -3, 0, 0, 0, 0));
    fails += kiln_optest("NegativeLogLikelihoodLossGrad", "reduction=none;ignore_index=-1", 4, in, 1, &dx, 0, 0,
                         "nll grad none ignore_index");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 1));
    in[2] = NULL;
    in[3] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("NegativeLogLikelihoodLossGrad", "", 4, in, 1, KILN_ERR_SHAPE,
                               "nll grad dLoss of the wrong shape");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_negative_log_likelihood_loss = {
    .precision = KILN_PREC_FP32,
    .name = "NegativeLogLikelihoodLoss", .min_inputs = 2, .max_inputs = 3,
    .min_outputs = 1, .max_outputs = 1, .nondiff_inputs = (1u << 1) | (1u << 2),
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};

const kiln_op_def kiln_op_negative_log_likelihood_loss_grad = {
    .precision = KILN_PREC_FP32,
    .name = "NegativeLogLikelihoodLossGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 4,
    .min_outputs = 1, .max_outputs = 1, .shape_only_inputs = 1u << 0,
    .infer = infer_grad, .cpu_forward = forward_grad, .test = KILN_OP_TESTS(test_grad),
};
