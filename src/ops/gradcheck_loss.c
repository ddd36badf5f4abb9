/* gradcheck_loss.c — kiln.GradCheckLoss(Y, R) = sum(Y * R), a scalar (Y's dtype), and its
 * gradient kiln.GradCheckLossGrad(R, dL) = R * dL. The finite-difference checker uses it so
 * that every element of an op's output matters to the loss with a different weight. */
#include "../core/optest.h"

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *y = c->in[0], *r = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_is_float(y->dtype) && r->dtype == y->dtype, KILN_ERR_TYPE, "Y and R must be the same float dtype");
    KILN_OP_CHECK(c, kiln_tensor_numel(y) == kiln_tensor_numel(r), KILN_ERR_SHAPE, "Y and R must have as many elements");
    kiln_tensor_set_shape(c->out[0], y->dtype, 0, NULL);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    double s = 0;
    for (int64_t i = 0; i < kiln_tensor_numel(c->in[0]); i++) s += kiln_get_f64(c->in[0], i) * kiln_get_f64(c->in[1], i);
    kiln_set_f64(c->out[0], 0, s);
    return KILN_OK;
}

static kiln_status grad(kiln_grad_ctx *g) {
    if (g->need[0]) {
        int in[2] = {KILN_GRAD_IN(g, 1), g->dy[0]};
        g->dx[0] = kiln_grad_emit(g, "kiln", "GradCheckLossGrad", 2, in, 1, NULL, false, NULL);
        if (g->dx[0] < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    if (g->need[1]) return KILN_ERR_UNSUPPORTED;
    return KILN_OK;
}

static kiln_status infer_grad(kiln_op_ctx *c) {
    kiln_tensor_set_shape(c->out[0], c->in[0]->dtype, c->in[0]->ndim, c->in[0]->dims);
    KILN_OP_CHECK(c, kiln_tensor_numel(c->in[1]) == 1, KILN_ERR_SHAPE, "dL must be a scalar");
    return KILN_OK;
}

static kiln_status forward_grad(kiln_op_ctx *c) {
    double dl = kiln_get_f64(c->in[1], 0);
    for (int64_t i = 0; i < kiln_tensor_numel(c->in[0]); i++) kiln_set_f64(c->out[0], i, kiln_get_f64(c->in[0], i) * dl);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    kiln_tensor *in[2] = {kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(1, 2, 3)), kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(4, -5, 6))};
    kiln_tensor *want = kt_scalar(KILN_F64, 4 - 10 + 18);
    int fails = kiln_optest("GradCheckLoss", "", 2, in, 1, &want, 0, 0, "weighted sum");
    fails += kiln_gradcheck("GradCheckLoss", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 1),
                            kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 2)}, (const bool[]){true, false}, "GradCheckLoss");
    return fails;
}

static int test_grad(void) {
    kiln_tensor *in[2] = {kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1.5, -2)), kt_scalar(KILN_F32, 2)};
    kiln_tensor *want = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(3, -4));
    return kiln_optest("GradCheckLossGrad", "", 2, in, 1, &want, 0, 0, "R * dL");
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_gradcheck_loss = {
    .precision = KILN_PREC_FP32,
    .name = "GradCheckLoss", .domain = "kiln", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1,
    .max_outputs = 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};

const kiln_op_def kiln_op_gradcheck_loss_grad = {
    .precision = KILN_PREC_FP32,
    .name = "GradCheckLossGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1,
    .max_outputs = 1, .infer = infer_grad, .cpu_forward = forward_grad, .test = KILN_OP_TESTS(test_grad),
};
