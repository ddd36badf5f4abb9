/* quantize_linear.c — QuantizeLinear and DequantizeLinear (opsets 10, 13, 19, 21), the
 * per-tensor and per-axis forms (block_size other than 0 is refused):
 *   QuantizeLinear(x, y_scale, y_zero_point?): y = saturate(round(x / scale) + zero_point),
 *     the quotient in float (double when x or the scale is f64), rounding halves to even,
 *     saturating to the output's range. The output dtype is
 *     the zero point's: uint8 (the default without one), int8, uint16, int16. x: float
 *     dtypes or int32.
 *   DequantizeLinear(x, x_scale, x_zero_point?): y = (x - zero_point) * scale in the
 *     scale's dtype (a float). x: uint8, int8, uint16, int16, int32.
 * scale (a float dtype) and zero_point are scalars (per tensor) or 1-D of x's dim `axis`
 * (default 1; per axis), zero_point of the scale's shape. */
#include "../core/optest.h"
#include "quantize_linear.h"

#include <inttypes.h>
#include <math.h>

bool kiln_quant_range(kiln_dtype t, double *lo, double *hi) {
    switch (t) {
    case KILN_U8: *lo = 0; *hi = 255; return true;
    case KILN_I8: *lo = -128; *hi = 127; return true;
    case KILN_U16: *lo = 0; *hi = 65535; return true;
    case KILN_I16: *lo = -32768; *hi = 32767; return true;
    case KILN_I32: *lo = -2147483648.0; *hi = 2147483647.0; return true;
    default: return false;
    }
}

/* The per-axis layout: (outer, C, inner) around axis for a per-axis scale, C = 1 else. */
static kiln_status check_params(kiln_op_ctx *c, bool quantize, int64_t *c_out, int64_t *inner) {
    const kiln_tensor *x = c->in[0], *s = c->in[1], *z = c->n_in > 2 ? c->in[2] : NULL;
    KILN_OP_CHECK(c, kiln_attr_int(c->node, "block_size", 0) == 0, KILN_ERR_UNSUPPORTED,
                  "blocked quantization (block_size=%" PRId64 ") is not supported", kiln_attr_int(c->node, "block_size", 0));
    KILN_OP_CHECK(c, kiln_dtype_is_float(s->dtype), KILN_ERR_TYPE, "the scale must be a float tensor, got %s",
                  kiln_dtype_name(s->dtype));
    KILN_OP_CHECK(c, s->ndim <= 1, KILN_ERR_SHAPE, "the scale must be a scalar or 1-D, got rank %d", s->ndim);
    *c_out = 1;
    *inner = 1;
    if (s->ndim == 1 && s->dims[0] != 1) {
        int64_t axis = kiln_attr_int(c->node, "axis", 1);
        KILN_OP_CHECK(c, kiln_norm_axis(&axis, x->ndim), KILN_ERR_SHAPE, "axis=%" PRId64 " is out of range for rank %d",
                      kiln_attr_int(c->node, "axis", 1), x->ndim);
        KILN_OP_CHECK(c, s->dims[0] == x->dims[axis], KILN_ERR_SHAPE,
                      "the scale has %" PRId64 " values for axis %" PRId64 " of size %" PRId64, s->dims[0], axis,
                      x->dims[axis]);
        *c_out = s->dims[0];
        for (int d = (int)axis + 1; d < x->ndim; d++) *inner *= x->dims[d];
    }
    if (z) {
        KILN_OP_CHECK(c, kiln_tensor_numel(z) == kiln_tensor_numel(s) && z->ndim <= 1, KILN_ERR_SHAPE,
                      "the zero point must have the scale's shape");
        double lo, hi;
        KILN_OP_CHECK(c, kiln_quant_range(z->dtype, &lo, &hi) && (z->dtype != KILN_I32 || !quantize), KILN_ERR_TYPE,
                      "zero point dtype %s is not supported", kiln_dtype_name(z->dtype));
        KILN_OP_CHECK(c, quantize || z->dtype == x->dtype, KILN_ERR_TYPE, "the zero point has dtype %s, x %s",
                      kiln_dtype_name(z->dtype), kiln_dtype_name(x->dtype));
    }
    return KILN_OK;
}

static kiln_status infer_q(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *z = c->n_in > 2 ? c->in[2] : NULL;
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype) || x->dtype == KILN_I32, KILN_ERR_TYPE,
                  "x dtype %s is not supported (floats, int32)", kiln_dtype_name(x->dtype));
    int64_t ch, inner;
    kiln_status st = check_params(c, true, &ch, &inner);
    if (st) return st;
    kiln_tensor_set_shape(c->out[0], z ? z->dtype : KILN_U8, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status infer_dq(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    double lo, hi;
    KILN_OP_CHECK(c, kiln_quant_range(x->dtype, &lo, &hi), KILN_ERR_TYPE, "x dtype %s is not a quantized dtype",
                  kiln_dtype_name(x->dtype));
    int64_t ch, inner;
    kiln_status st = check_params(c, false, &ch, &inner);
    if (st) return st;
    kiln_tensor_set_shape(c->out[0], c->in[1]->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward_q(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *s = c->in[1], *z = c->n_in > 2 ? c->in[2] : NULL;
    kiln_tensor *y = c->out[0];
    int64_t ch, inner;
    kiln_status st = check_params(c, true, &ch, &inner);
    if (st) return st;
    double lo, hi;
    kiln_quant_range(y->dtype, &lo, &hi);
    const bool f64 = x->dtype == KILN_F64 || s->dtype == KILN_F64;
    const int64_t n = kiln_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        const int64_t k = ch > 1 ? (i / inner) % ch : 0;
        const double zp = z ? (double)kiln_get_i64(z, k) : 0;
        /* the quotient in float unless x or the scale is f64, as ONNX's reference and
         * onnxruntime divide: a double quotient can round the other way at a half */
        const double q = f64 ? kiln_get_f64(x, i) / kiln_get_f64(s, k)
                             : (double)((float)kiln_get_f64(x, i) / (float)kiln_get_f64(s, k));
        double v = nearbyint(q) + zp;
        v = isnan(v) ? 0 : v < lo ? lo : v > hi ? hi : v;
        kiln_set_i64(y, i, (int64_t)v);
    }
    return KILN_OK;
}

static kiln_status forward_dq(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *s = c->in[1], *z = c->n_in > 2 ? c->in[2] : NULL;
    kiln_tensor *y = c->out[0];
    int64_t ch, inner;
    kiln_status st = check_params(c, false, &ch, &inner);
    if (st) return st;
    const int64_t n = kiln_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        const int64_t k = ch > 1 ? (i / inner) % ch : 0;
        const double zp = z ? (double)kiln_get_i64(z, k) : 0;
        kiln_set_f64(y, i, ((double)kiln_get_i64(x, i) - zp) * kiln_get_f64(s, k));
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test_q(void) {
    int fails = 0;
    kiln_tensor *in[3], *y;
    /* the ONNX spec's examples */
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(0, 2, 3, 1000, -254, -1000));
    in[1] = kt_scalar(KILN_F32, 2);
    in[2] = kt_scalar(KILN_U8, 128);
    y = kt_make(KILN_U8, 1, KT_DIMS(6), KT_VALS(128, 129, 130, 255, 1, 0));
    fails += kiln_optest("QuantizeLinear", "", 3, in, 1, &y, 0, 0, "quantize u8, halves to even, saturation");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 1, 2), KT_VALS(-162, 10, -100, 232, -76, 44));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(2, 4, 5));
    in[2] = kt_make(KILN_I8, 1, KT_DIMS(3), KT_VALS(-10, 0, 3));
    y = kt_make(KILN_I8, 4, KT_DIMS(1, 3, 1, 2), KT_VALS(-91, -5, -25, 58, -12, 12));
    fails += kiln_optest("QuantizeLinear", "", 3, in, 1, &y, 0, 0, "quantize i8 per axis 1");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(-1.5, 2.5, 300));
    in[1] = kt_scalar(KILN_F32, 1);
    y = kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(0, 2, 255));
    fails += kiln_optest("QuantizeLinear", "", 2, in, 1, &y, 0, 0, "quantize without zero point: u8");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, 2));
    fails += kiln_optest_fails("QuantizeLinear", "", 2, in, 1, KILN_ERR_SHAPE, "quantize scale of the wrong axis");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_scalar(KILN_F32, 1);
    fails += kiln_optest_fails("QuantizeLinear", "block_size=2", 2, in, 1, KILN_ERR_UNSUPPORTED, "quantize blocked");
    fails += kiln_optest_sweep("QuantizeLinear", "axis=1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 7), -300, 300, 7001),
                                                 kt_rand(KILN_F32, 1, KT_DIMS(5), 0.5, 3, 7002),
                                                 kt_rand(KILN_I8, 1, KT_DIMS(5), -20, 20, 7003)},
                               1, "quantize random per axis");
    return fails;
}

static int test_dq(void) {
    int fails = 0;
    kiln_tensor *in[3], *y;
    /* the ONNX spec's examples */
    in[0] = kt_make(KILN_U8, 1, KT_DIMS(4), KT_VALS(0, 3, 128, 255));
    in[1] = kt_scalar(KILN_F32, 2);
    in[2] = kt_scalar(KILN_U8, 128);
    y = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(-256, -250, 0, 254));
    fails += kiln_optest("DequantizeLinear", "", 3, in, 1, &y, 0, 0, "dequantize u8");
    in[0] = kt_make(KILN_I8, 4, KT_DIMS(1, 3, 1, 2), KT_VALS(-3, 5, 0, -128, 127, 3));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(2, 4, 0.5));
    in[2] = kt_make(KILN_I8, 1, KT_DIMS(3), KT_VALS(1, 0, -2));
    y = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 1, 2), KT_VALS(-8, 8, 0, -512, 64.5, 2.5));
    fails += kiln_optest("DequantizeLinear", "", 3, in, 1, &y, 0, 0, "dequantize i8 per axis");
    in[0] = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(-7, 100000));
    in[1] = kt_scalar(KILN_F64, 0.5);
    y = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(-3.5, 50000));
    fails += kiln_optest("DequantizeLinear", "", 2, in, 1, &y, 0, 0, "dequantize i32 to f64");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_scalar(KILN_F32, 1);
    fails += kiln_optest_fails("DequantizeLinear", "", 2, in, 1, KILN_ERR_TYPE, "dequantize f32 x");
    in[0] = kt_make(KILN_U8, 1, KT_DIMS(2), NULL);
    in[1] = kt_scalar(KILN_F32, 1);
    in[2] = kt_scalar(KILN_I8, 1);
    fails += kiln_optest_fails("DequantizeLinear", "", 3, in, 1, KILN_ERR_TYPE, "dequantize zero point of another dtype");
    fails += kiln_optest_sweep("DequantizeLinear", "axis=-1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(3, 5, 7), 0, 256, 7011),
                                                 kt_rand(KILN_F32, 1, KT_DIMS(7), 0.5, 3, 7012),
                                                 kt_rand(KILN_U8, 1, KT_DIMS(7), 100, 150, 7013)},
                               1, "dequantize random per axis");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_quantize_linear = {
    .precision = KILN_PREC_FP32,
    .name = "QuantizeLinear", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .infer = infer_q, .cpu_forward = forward_q, .test = KILN_OP_TESTS(test_q),
};

const kiln_op_def kiln_op_dequantize_linear = {
    .precision = KILN_PREC_FP32,
    .name = "DequantizeLinear", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .infer = infer_dq, .cpu_forward = forward_dq, .test = KILN_OP_TESTS(test_dq),
};
