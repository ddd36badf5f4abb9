/*
 * sum.c — Sum: elementwise sum of 1..N inputs with numpy (multidirectional)
 * broadcasting, opsets 8..13. One dtype for all inputs: floats (the spec's types) and,
 * as an extension, integers (wrapping like Add). Inputs are added left to right with the
 * result rounded to the dtype at each step, as the ONNX reference (numpy) does.
 * Gradient: dY summed back to each input's shape.
 */
#include "../core/optest.h"
#include "binary.h"

KILN_ROW_F32(add_f32, float, a + b)
static double add_f64(double a, double b) { return a + b; }
static int64_t add_i64(int64_t a, int64_t b, bool uns) {
    return (int64_t)((uint64_t)a + (uint64_t)b);
}
static const kiln_binary_kernels kernels = {add_f32, add_f64, add_i64};

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_variadic_infer(c, KILN_BIN_FLOAT | KILN_BIN_INT);
}
static kiln_status forward(kiln_op_ctx *c) { return kiln_variadic_forward(c, &kernels); }

static kiln_status grad(kiln_grad_ctx *g) {
    kiln_status st = kiln_binary_grad_check(g);
    return st ? st : kiln_binary_grad_all(g, g->dy[0]);
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *in[3], *want;
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(10, 20, 30));
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(100, 200));
    want = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(111, 122, 133, 214, 225, 236));
    fails += kiln_optest("Sum", "", 3, in, 1, &want, 0, 0, "sum f32 (2,3)+(3)+(2,1)");

    /* the broadcast output is bigger than the first input */
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, 2));
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(10, 20, 30, 40));
    want = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(11, 22, 31, 42));
    fails += kiln_optest("Sum", "", 2, in, 1, &want, 0, 0, "sum f32 (2)+(2,2)");

    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(3, 0, -2));
    want = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(3, 0, -2));
    fails += kiln_optest("Sum", "", 1, in, 1, &want, 0, 0, "sum one input");

    /* f16 rounds after each addition: 2048 + 1 = 2049 is a tie and rounds to 2048 (even),
     * twice; the exact sum 2050 would be representable. */
    in[0] = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(2048, 1));
    in[1] = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(1, 0.5));
    in[2] = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(1, 0.25));
    want = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(2048, 1.75));
    fails += kiln_optest("Sum", "", 3, in, 1, &want, 0, 0, "sum f16 step rounding");

    in[0] = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(2147483647, -5));
    in[1] = kt_scalar(KILN_I32, 1);
    in[2] = kt_make(KILN_I32, 2, KT_DIMS(2, 1), KT_VALS(0, 10));
    want = kt_make(KILN_I32, 2, KT_DIMS(2, 2), KT_VALS(-2147483648.0, -4, -2147483638.0, 6));
    fails += kiln_optest("Sum", "", 3, in, 1, &want, 0, 0, "sum i32 broadcast, wraps");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    fails += kiln_optest_fails("Sum", "", 3, in, 1, KILN_ERR_SHAPE, "sum (2,3)+(3)+(2,2) rejected");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    in[1] = kt_make(KILN_F64, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("Sum", "", 2, in, 1, KILN_ERR_TYPE, "sum f32+f64 rejected");

    fails += kiln_gradcheck("Sum", "", 0, 3, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 1),
                            kt_rand(KILN_F64, 1, KT_DIMS(3), -1, 1, 2), kt_rand(KILN_F64, 2, KT_DIMS(2, 1), -1, 1, 3)},
                            NULL, "sum grad (2,3)+(3)+(2,1)");
    fails += kiln_gradcheck("Sum", "", 0, 2, (kiln_tensor *[]){kt_scalar(KILN_F64, 0.5),
                            kt_rand(KILN_F64, 3, KT_DIMS(2, 1, 3), -1, 1, 4)}, NULL, "sum grad ()+(2,1,3)");
    fails += kiln_gradcheck("Sum", "", 0, 1, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 2), -1, 1, 5)},
                            NULL, "sum grad one input");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Sum", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 181),
                                                kt_rand(KILN_F32, 1, KT_DIMS(19), -2, 2, 182),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 17, 1), -2, 2, 183)},
                               1, "sum random of three, broadcast");
    fails += kiln_optest_sweep("Sum", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 4), -2, 2, 3151),
                                                kt_rand(KILN_F32, 2, KT_DIMS(3, 1), -2, 2, 3152),
                                                kt_rand(KILN_F32, 1, KT_DIMS(4), -2, 2, 3153)},
                               1, "sum three inputs");
    fails += kiln_optest_sweep("Sum", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(64, 128), -2, 2, 3154),
                                                kt_rand(KILN_F32, 2, KT_DIMS(64, 128), -2, 2, 3155)},
                               1, "sum two inputs");
    fails += kiln_optest_sweep("Sum", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 5), -2, 2, 3156)},
                               1, "sum one input");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32; Sum of two inputs is written as Add). */
static const kiln_eltwise eltwise = {
    .arity = 2, .token = "Add",
};

/* NHWC like the binary ops (the layout pass): the gradient contributions a residual
 * network's backward adds up stay in the convolutions' layout. */
const kiln_op_def kiln_op_sum = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_BINARY, .eltwise = &eltwise,
    .name = "Sum", .min_inputs = 1, .max_inputs = -1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};
