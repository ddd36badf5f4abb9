/* non_finite_check.c — kiln.NonFiniteCheck: PyTorch GradScaler's check of a step's
 * gradients (torch._amp_foreach_non_finite_check_and_unscale_ without the in-place unscale,
 * which kiln.OptimizerStep does as it reads each gradient):
 *
 *   inputs   0 (optional)  loss_scale  f32 scalar (missing: 1)
 *            1 ..          the gradients, f32, f16 or bf16 (one dtype)
 *   outputs  0             found_inf   f32 scalar: 1 if any gradient element is inf or NaN,
 *                                      else 0
 *            1 (optional)  inv_scale   f32 scalar: 1 / loss_scale, rounded to float
 *
 * kiln.OptimizerStep skips its update when found_inf is set and multiplies each gradient
 * by inv_scale; kiln.LossScaleUpdate moves the scale. */
#include "../core/optest.h"

#include <math.h>

static kiln_status infer(kiln_op_ctx *c) {
    KILN_OP_CHECK(c, c->n_in >= 2, KILN_ERR_INVALID_ARGUMENT, "takes loss_scale (or nothing) and at least one gradient");
    KILN_OP_CHECK(c, !c->in[0] || (c->in[0]->dtype == KILN_F32 && kiln_tensor_numel(c->in[0]) == 1), KILN_ERR_TYPE,
                  "loss_scale must be an f32 scalar");
    const kiln_dtype dt = c->in[1] ? c->in[1]->dtype : KILN_DTYPE_UNDEFINED;
    KILN_OP_CHECK(c, dt == KILN_F32 || dt == KILN_F16 || dt == KILN_BF16, KILN_ERR_TYPE,
                  "gradients must be f32, f16 or bf16");
    for (int i = 2; i < c->n_in; i++)
        KILN_OP_CHECK(c, c->in[i] && c->in[i]->dtype == dt, KILN_ERR_TYPE, "gradient %d must be %s as gradient 0", i - 1,
                      kiln_dtype_name(dt));
    kiln_tensor_set_shape(c->out[0], KILN_F32, 0, NULL);
    if (c->n_out > 1 && c->out[1]) kiln_tensor_set_shape(c->out[1], KILN_F32, 0, NULL);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    bool found = false;
    for (int i = 1; i < c->n_in && !found; i++) {
        const kiln_tensor *g = c->in[i];
        const int64_t n = kiln_tensor_numel(g);
        if (g->dtype == KILN_F32) {
            const float *p = g->data;
            for (int64_t j = 0; j < n; j++)
                if (!isfinite(p[j])) {
                    found = true;
                    break;
                }
        } else {
            /* f16 / bf16: all exponent bits set is inf or NaN */
            const uint16_t *p = g->data, mask = g->dtype == KILN_F16 ? 0x7c00 : 0x7f80;
            for (int64_t j = 0; j < n; j++)
                if ((p[j] & mask) == mask) {
                    found = true;
                    break;
                }
        }
    }
    ((float *)c->out[0]->data)[0] = found ? 1.f : 0.f;
    if (c->n_out > 1 && c->out[1]) ((float *)c->out[1]->data)[0] = c->in[0] ? 1.f / ((const float *)c->in[0]->data)[0] : 1.f;
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    fails += kiln_optest("NonFiniteCheck", "", 3,
                         (kiln_tensor *[]){kt_scalar(KILN_F32, 65536), kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, -2e30, 3)),
                                           kt_make(KILN_F32, 2, KT_DIMS(1, 2), KT_VALS(0, -0.5))},
                         2, (kiln_tensor *[]){kt_scalar(KILN_F32, 0), kt_scalar(KILN_F32, 1.0 / 65536)}, 0, 0,
                         "finite gradients");
    fails += kiln_optest("NonFiniteCheck", "", 3,
                         (kiln_tensor *[]){kt_scalar(KILN_F32, 3), kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, 2)),
                                           kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0, INFINITY))},
                         2, (kiln_tensor *[]){kt_scalar(KILN_F32, 1), kt_scalar(KILN_F32, (double)(1.0f / 3.0f))}, 0, 0,
                         "an inf in the last gradient");
    fails += kiln_optest("NonFiniteCheck", "", 2,
                         (kiln_tensor *[]){NULL, kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(NAN, 2))}, 2,
                         (kiln_tensor *[]){kt_scalar(KILN_F32, 1), kt_scalar(KILN_F32, 1)}, 0, 0, "a NaN, no scale");
    fails += kiln_optest("NonFiniteCheck", "", 2,
                         (kiln_tensor *[]){NULL, kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(65504, -65504, 1))}, 1,
                         (kiln_tensor *[]){kt_scalar(KILN_F32, 0)}, 0, 0, "f16 at its largest is finite");
    fails += kiln_optest("NonFiniteCheck", "", 2,
                         (kiln_tensor *[]){NULL, kt_make(KILN_BF16, 1, KT_DIMS(2), KT_VALS(1, -INFINITY))}, 1,
                         (kiln_tensor *[]){kt_scalar(KILN_F32, 1)}, 0, 0, "bf16 -inf");
    fails += kiln_optest_fails("NonFiniteCheck", "", 3,
                               (kiln_tensor *[]){NULL, kt_make(KILN_F32, 1, KT_DIMS(2), NULL),
                                                 kt_make(KILN_F16, 1, KT_DIMS(2), NULL)},
                               1, KILN_ERR_TYPE, "gradients of two dtypes");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_non_finite_check = {
    .precision = KILN_PREC_FP32, /* f32 parameters, states and counters; low-precision gradients are cast up */
    .name = "NonFiniteCheck", .domain = "kiln", .min_inputs = 0, .max_inputs = -1, .min_outputs = 1,
    .max_outputs = 2, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
