/* relu.c — Relu: y = max(x, 0). Floats and signed integers (opset 14). */
#include "../core/optest.h"
#include "unary.h"

static double relu(double x, const kiln_node *n) {
    (void)n;
    return x > 0 ? x : 0;
}

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, true); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward(c, relu); }

static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(-1, 0, 2, -3, 4.5, -0.5));
    kiln_tensor *y = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, 0, 2, 0, 4.5, 0));
    fails += kiln_optest("Relu", "", 1, &x, 1, &y, 0, 0, "relu f32");
    x = kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(-7, 7, 0));
    y = kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(0, 7, 0));
    fails += kiln_optest("Relu", "", 1, &x, 1, &y, 0, 0, "relu i32");
    return fails;
}

const kiln_op_def kiln_op_relu = {
    .name = "Relu", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = test,
};
