/* dynamic_quantize_linear.c — DynamicQuantizeLinear(x) -> (y, y_scale, y_zero_point)
 * (opset 11): uint8 quantization with the scale and zero point taken from x's range,
 * which always includes 0:
 *   x_min = min(0, min x), x_max = max(0, max x), y_scale = (x_max - x_min) / 255,
 *   y_zero_point = saturate(round(-x_min / y_scale)), y = saturate(round(x / y_scale) + zp),
 * in float as ONNX's reference, rounding halves to even, saturating to [0, 255]. An x of
 * zeros (scale 0) gives zeros. x: f32; y_scale: f32 scalar; the rest uint8. */
#include "../core/optest.h"

#include <math.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, x->dtype == KILN_F32, KILN_ERR_TYPE, "x must be f32, got %s", kiln_dtype_name(x->dtype));
    kiln_tensor_set_shape(c->out[0], KILN_U8, x->ndim, x->dims);
    if (c->n_out > 1 && c->out[1]) kiln_tensor_set_shape(c->out[1], KILN_F32, 0, NULL);
    if (c->n_out > 2 && c->out[2]) kiln_tensor_set_shape(c->out[2], KILN_U8, 0, NULL);
    return KILN_OK;
}

static float sat_u8(float v) { return isnan(v) ? 0.f : v < 0.f ? 0.f : v > 255.f ? 255.f : v; }

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    const float *xp = x->data;
    const int64_t n = kiln_tensor_numel(x);
    float lo = 0.f, hi = 0.f;
    for (int64_t i = 0; i < n; i++) {
        lo = xp[i] < lo ? xp[i] : lo;
        hi = xp[i] > hi ? xp[i] : hi;
    }
    const float scale = (hi - lo) / 255.f;
    const float zp = scale > 0.f ? sat_u8(nearbyintf(-lo / scale)) : 0.f;
    uint8_t *y = c->out[0]->data;
    for (int64_t i = 0; i < n; i++) y[i] = scale > 0.f ? (uint8_t)sat_u8(nearbyintf(xp[i] / scale) + zp) : 0;
    if (c->n_out > 1 && c->out[1]) *(float *)c->out[1]->data = scale;
    if (c->n_out > 2 && c->out[2]) *(uint8_t *)c->out[2]->data = (uint8_t)zp;
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* the ONNX spec's examples */
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(0, 2, -3, -2.5, 1.34, 0.5));
    kiln_tensor *y[3] = {kt_make(KILN_U8, 1, KT_DIMS(6), KT_VALS(153, 255, 0, 26, 221, 179)),
                         kt_scalar(KILN_F32, 0.0196078438), kt_scalar(KILN_U8, 153)};
    fails += kiln_optest("DynamicQuantizeLinear", "", 1, &x, 3, y, 1e-9, 1e-6, "dynamic_quantize example");
    x = kt_make(KILN_F32, 2, KT_DIMS(3, 4), KT_VALS(-1, -2.1, -1.3, -2.5, -3.34, -4, -1, -2.1, -1.3, -2.5, -3.34, -4));
    y[0] = kt_make(KILN_U8, 2, KT_DIMS(3, 4), KT_VALS(191, 121, 172, 96, 42, 0, 191, 121, 172, 96, 42, 0));
    y[1] = kt_scalar(KILN_F32, 0.0156862754);
    y[2] = kt_scalar(KILN_U8, 255);
    fails += kiln_optest("DynamicQuantizeLinear", "", 1, &x, 3, y, 1e-9, 1e-6, "dynamic_quantize max adjusted to 0");
    x = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    y[0] = kt_make(KILN_U8, 1, KT_DIMS(3), NULL);
    y[1] = kt_scalar(KILN_F32, 0);
    y[2] = kt_scalar(KILN_U8, 0);
    fails += kiln_optest("DynamicQuantizeLinear", "", 1, &x, 3, y, 0, 0, "dynamic_quantize zeros");
    x = kt_make(KILN_F64, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("DynamicQuantizeLinear", "", 1, &x, 3, KILN_ERR_TYPE, "dynamic_quantize rejects f64");
    fails += kiln_optest_sweep("DynamicQuantizeLinear", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 17, 19), -2, 5, 7101)}, 3,
                               "dynamic_quantize random");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_dynamic_quantize_linear = {
    .precision = KILN_PREC_FP32, .out_dtype = {KILN_DT_U8, KILN_DT_F32, KILN_DT_U8},
    .name = "DynamicQuantizeLinear", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 3,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
