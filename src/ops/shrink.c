/* shrink.c — Shrink: y = x + bias for x < -lambd, x - bias for x > lambd, 0 otherwise
 * (lambd default 0.5, bias 0). Float dtypes; opset 9 lists integers too, which kiln
 * rejects (no exporter emits them). No gradient (inference only). */
#include "../core/optest.h"
#include "unary.h"

static double shrink(double x, const kiln_unary_args *a) {
    return x < -a->alpha ? x + a->beta : x > a->alpha ? x - a->beta : 0;
}

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) {
    kiln_unary_args a = {.alpha = kiln_attr_float(c->node, "lambd", 0.5f),
                         .beta = kiln_attr_float(c->node, "bias", 0.0f)};
    return kiln_unary_forward_args(c, shrink, NULL, &a);
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* the ONNX spec's examples */
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(-2, -1, 0, 1, 2));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(-2, 0, 0, 0, 2));
    fails += kiln_optest("Shrink", "lambd=1.5", 1, &x, 1, &y, 0, 0, "shrink hard");
    x = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(-2, -1, 0, 1, 2));
    y = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(-0.5, 0, 0, 0, 0.5));
    fails += kiln_optest("Shrink", "lambd=1.5;bias=1.5", 1, &x, 1, &y, 0, 0, "shrink soft");
    x = kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(-0.75, -0.5, 0.5, 0.75));
    y = kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(-0.75, 0, 0, 0.75));
    fails += kiln_optest("Shrink", "", 1, &x, 1, &y, 0, 0, "shrink defaults f64");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, 1));
    fails += kiln_optest_fails("Shrink", "", 1, &x, 1, KILN_ERR_TYPE, "shrink rejects i32");
    fails += kiln_optest_sweep("Shrink", "lambd=0.75;bias=0.25", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 5331)},
                               1, "shrink random 2x3x17x19");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_shrink = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY,
    .name = "Shrink", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
