/*
 * mean.c — Mean: elementwise mean of 1..N inputs with numpy (multidirectional)
 * broadcasting, opsets 8..13. Float dtypes only (f16, bf16, f32, f64), one for all
 * inputs. As in the ONNX reference, the inputs are summed left to right in the dtype,
 * then divided by N.
 * Gradient: dY / N summed back to each input's shape.
 */
#include "../core/optest.h"
#include "binary.h"

KILN_ROW_F32(add_f32, float, a + b)
static double add_f64(double a, double b) { return a + b; }
static const kiln_binary_kernels kernels = {add_f32, add_f64, NULL};

static kiln_status infer(kiln_op_ctx *c) { return kiln_variadic_infer(c, KILN_BIN_FLOAT); }

static kiln_status grad(kiln_grad_ctx *g) {
    kiln_status st = kiln_binary_grad_check(g);
    if (st) return st;
    const int n = KILN_GRAD_NODE(g)->n_in;
    int d = g->dy[0];
    if (n > 1) {
        /* divided once, before the per-input sums */
        int in[2] = {d, kiln_binary_grad_scalar(g, n, d)};
        d = in[1] < 0 ? -1 : kiln_grad_emit(g, NULL, "Div", 2, in, 1, NULL, false, NULL);
    }
    return kiln_binary_grad_all(g, d);
}

static kiln_status forward(kiln_op_ctx *c) {
    kiln_status st = kiln_variadic_forward(c, &kernels);
    if (st != KILN_OK || c->n_in == 1) return st;
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (y->dtype == KILN_F32) {
        float *yp = y->data;
        const float d = (float)c->n_in;
#pragma omp parallel for if (n >= (1 << 16)) num_threads(kiln_cpu_threads())
        for (int64_t i = 0; i < n; i++) yp[i] /= d;
    } else {
        for (int64_t i = 0; i < n; i++) kiln_set_f64(y, i, kiln_get_f64(y, i) / c->n_in);
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* random, for the CUDA sweep: three inputs broadcast together, and one alone */
    fails += kiln_optest_sweep("Mean", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -1, 1, 991),
                                                 kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 5), -1, 1, 992),
                                                 kt_rand(KILN_F32, 1, KT_DIMS(5), -1, 1, 993)},
                               1, "mean random three inputs broadcast");
    fails += kiln_optest_sweep("Mean", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(7, 9), -1, 1, 994)}, 1,
                               "mean random one input");
    kiln_tensor *in[3], *want;
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(3, 0, 2));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 3, 4));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(2, 6, 6));
    want = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(2, 3, 4));
    fails += kiln_optest("Mean", "", 3, in, 1, &want, 0, 0, "mean f32 three inputs");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 4));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, -2));
    want = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 0, 2, 1));
    fails += kiln_optest("Mean", "", 2, in, 1, &want, 0, 0, "mean f32 (2,2),(2)");

    /* (1 + 2 + 4) / 3 in double */
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 1), KT_VALS(1, -1));
    in[1] = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(2, 0.5));
    in[2] = kt_scalar(KILN_F64, 4);
    want = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(7.0 / 3, 5.5 / 3, 5.0 / 3, 3.5 / 3));
    fails += kiln_optest("Mean", "", 3, in, 1, &want, 1e-15, 1e-15, "mean f64 broadcast");

    in[0] = kt_make(KILN_BF16, 1, KT_DIMS(2), KT_VALS(-1.5, 3));
    want = kt_make(KILN_BF16, 1, KT_DIMS(2), KT_VALS(-1.5, 3));
    fails += kiln_optest("Mean", "", 1, in, 1, &want, 0, 0, "mean bf16 one input");

    in[0] = kt_make(KILN_I32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Mean", "", 2, in, 1, KILN_ERR_TYPE, "mean i32 rejected");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("Mean", "", 2, in, 1, KILN_ERR_SHAPE, "mean (2),(3) rejected");

    fails += kiln_gradcheck("Mean", "", 0, 3, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 1),
                            kt_rand(KILN_F64, 1, KT_DIMS(3), -1, 1, 2), kt_rand(KILN_F64, 2, KT_DIMS(2, 1), -1, 1, 3)},
                            NULL, "mean grad (2,3),(3),(2,1)");
    fails += kiln_gradcheck("Mean", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 1, KT_DIMS(4), -1, 1, 4),
                            kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 5)}, NULL, "mean grad (4),(3,4)");
    fails += kiln_gradcheck("Mean", "", 0, 1, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 2), -1, 1, 6)},
                            NULL, "mean grad one input");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_mean = {
    .precision = KILN_PREC_LOW,
    .name = "Mean", .min_inputs = 1, .max_inputs = -1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};
