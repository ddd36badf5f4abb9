/* thresholded_relu.c — ThresholdedRelu: y = x for x > alpha, 0 otherwise (alpha default
 * 1.0). Float dtypes; opsets 10 and 22. No gradient (inference only). */
#include "../core/optest.h"
#include "unary.h"

static double trelu(double x, const kiln_unary_args *a) { return x > a->alpha ? x : 0; }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) {
    /* alpha as the f32 attribute it is, so the threshold is the one the CUDA kernel uses */
    kiln_unary_args a = {.alpha = kiln_attr_float(c->node, "alpha", 1.0f)};
    return kiln_unary_forward_args(c, trelu, NULL, &a);
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(-1, 0, 1, 1.5, 2, 10));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(0, 0, 0, 1.5, 2, 10));
    fails += kiln_optest("ThresholdedRelu", "", 1, &x, 1, &y, 0, 0, "thresholded_relu default alpha 1");
    x = kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(-1, 0, 1, 1.5, 2, 10));
    y = kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(0, 0, 0, 0, 0, 10));
    fails += kiln_optest("ThresholdedRelu", "alpha=2.0", 1, &x, 1, &y, 0, 0, "thresholded_relu alpha 2");
    x = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(-3, -1, 0.5));
    y = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0, -1, 0.5));
    fails += kiln_optest("ThresholdedRelu", "alpha=-2.0", 1, &x, 1, &y, 0, 0, "thresholded_relu negative alpha f64");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, 1));
    fails += kiln_optest_fails("ThresholdedRelu", "", 1, &x, 1, KILN_ERR_TYPE, "thresholded_relu rejects i32");
    fails += kiln_optest_sweep("ThresholdedRelu", "alpha=0.5", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 5321)},
                               1, "thresholded_relu random 2x3x17x19");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_thresholded_relu = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY,
    .name = "ThresholdedRelu", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
