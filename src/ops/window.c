/* window.c — HannWindow, HammingWindow, BlackmanWindow (opset 17): a 1-D window of `size`
 * points (input 0, an int32 or int64 scalar, read when the plan is built: it is the
 * output's size), in the dtype of attribute output_datatype (an ONNX TensorProto type,
 * default 1: float; float and integer types), periodic (default 1) or symmetric. See
 * window.h for the formula; coefficients: Hann a0 = a1 = 0.5; Hamming a0 = 25/46,
 * a1 = 21/46; Blackman a0 = 0.42, a1 = 0.5, a2 = 0.08. Computed in double. */
#include "../core/optest.h"
#include "window.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

bool kiln_window_coef_of(const kiln_node *n, int64_t size, kiln_window_coef *w) {
    memset(w, 0, sizeof *w);
    if (strcmp(n->op_type, "HannWindow") == 0) w->a0 = w->a1 = 0.5;
    else if (strcmp(n->op_type, "HammingWindow") == 0) w->a0 = 25.0 / 46, w->a1 = 21.0 / 46;
    else if (strcmp(n->op_type, "BlackmanWindow") == 0) w->a0 = 0.42, w->a1 = 0.5, w->a2 = 0.08;
    else return false;
    const bool periodic = kiln_attr_int(n, "periodic", 1) != 0;
    w->n = periodic ? (double)size : size > 1 ? (double)(size - 1) : 1.0;
    return true;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *s = c->in[0];
    KILN_OP_CHECK(c, (s->dtype == KILN_I32 || s->dtype == KILN_I64) && kiln_tensor_numel(s) == 1 && s->ndim <= 1,
                  KILN_ERR_TYPE, "size must be an int32 or int64 scalar");
    KILN_OP_CHECK(c, s->data != NULL, KILN_ERR_UNSUPPORTED, "size must be known when the plan is built");
    const int64_t size = kiln_get_i64(s, 0);
    KILN_OP_CHECK(c, size >= 0 && size <= ((int64_t)1 << 40), KILN_ERR_INVALID_ARGUMENT,
                  "size = %" PRId64 " must be >= 0", size);
    const int64_t dt = kiln_attr_int(c->node, "output_datatype", 1);
    KILN_OP_CHECK(c, dt > 0 && dt <= 64 && kiln_dtype_valid((kiln_dtype)dt) &&
                         (kiln_dtype_is_float((kiln_dtype)dt) || kiln_dtype_is_int((kiln_dtype)dt)),
                  KILN_ERR_UNSUPPORTED, "output_datatype = %" PRId64 " is not a float or integer dtype kiln supports",
                  dt);
    kiln_tensor_set_shape(c->out[0], (kiln_dtype)dt, 1, &size);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0];
    const int64_t size = y->dims[0];
    kiln_window_coef w;
    kiln_window_coef_of(c->node, size, &w);
    const double tau = 6.283185307179586476925286766559;
    for (int64_t i = 0; i < size; i++)
        kiln_set_f64(y, i, w.a0 - w.a1 * cos(tau * (double)i / w.n) + w.a2 * cos(2 * tau * (double)i / w.n));
    return KILN_OK;
}

#ifdef KILN_OPTESTS
/* numpy.hanning / hamming / blackman (symmetric), or periodic: the first `size` points of
 * the symmetric window of size + 1; expected values from numpy */
static int test_hann(void) {
    int fails = 0;
    kiln_tensor *s = kt_scalar(KILN_I32, 4);
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(0, 0.5, 1, 0.5));
    fails += kiln_optest("HannWindow", "", 1, &s, 1, &y, 1e-7, 1e-6, "hann periodic 4");
    s = kt_scalar(KILN_I64, 5);
    y = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(0, 0.5, 1, 0.5, 0));
    fails += kiln_optest("HannWindow", "periodic=0;output_datatype=11", 1, &s, 1, &y, 1e-12, 1e-12,
                         "hann symmetric 5 f64");
    s = kt_scalar(KILN_I64, 1);
    y = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(0));
    fails += kiln_optest("HannWindow", "periodic=0", 1, &s, 1, &y, 0, 0, "hann symmetric 1");
    s = kt_scalar(KILN_I64, -1);
    fails += kiln_optest_fails("HannWindow", "", 1, &s, 1, KILN_ERR_INVALID_ARGUMENT, "hann negative size");
    s = kt_scalar(KILN_F32, 4);
    fails += kiln_optest_fails("HannWindow", "", 1, &s, 1, KILN_ERR_TYPE, "hann float size");
    s = kt_scalar(KILN_I64, 4);
    fails += kiln_optest_fails("HannWindow", "output_datatype=8", 1, &s, 1, KILN_ERR_UNSUPPORTED, "hann STRING output");
    /* ONNX's node tests test_hannwindow[_symmetric] (int32 size 10, float output), with numpy's
     * exact-pi values (ONNX 1.12's data was computed with pi = 3.1415: the runner skips it) */
    s = kt_scalar(KILN_I32, 10);
    y = kt_make(KILN_F32, 1, KT_DIMS(10), KT_VALS(0.0, 0.09549150281252627, 0.3454915028125263, 0.6545084971874737, 0.9045084971874737, 1.0, 0.9045084971874737, 0.6545084971874737, 0.3454915028125264, 0.09549150281252633));
    fails += kiln_optest("HannWindow", "", 1, &s, 1, &y, 1e-7, 1e-6, "hann periodic 10 (onnx node test)");
    s = kt_scalar(KILN_I32, 10);
    y = kt_make(KILN_F32, 1, KT_DIMS(10), KT_VALS(0.0, 0.116977778440511, 0.4131759111665348, 0.7499999999999999, 0.9698463103929542, 0.9698463103929542, 0.7500000000000002, 0.413175911166535, 0.1169777784405111, 0.0));
    fails += kiln_optest("HannWindow", "periodic=0", 1, &s, 1, &y, 1e-7, 1e-6, "hann symmetric 10 (onnx node test)");
    fails += kiln_optest_sweep("HannWindow", "", 0, 1, (kiln_tensor *[]){kt_scalar(KILN_I64, 1001)}, 1,
                               "hann periodic 1001");
    return fails;
}

static int test_hamming(void) {
    int fails = 0;
    kiln_tensor *s = kt_scalar(KILN_I64, 5);
    kiln_tensor *y = kt_make(KILN_F64, 1, KT_DIMS(5),
                             KT_VALS(0.08695652173913038, 0.5434782608695652, 1, 0.5434782608695652,
                                     0.08695652173913038));
    fails += kiln_optest("HammingWindow", "periodic=0;output_datatype=11", 1, &s, 1, &y, 1e-12, 1e-12,
                         "hamming symmetric 5");
    s = kt_scalar(KILN_I64, 4);
    y = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(0.08695652173913038, 0.5434782608695652, 1, 0.5434782608695652));
    fails += kiln_optest("HammingWindow", "", 1, &s, 1, &y, 1e-7, 1e-6, "hamming periodic 4");
    /* ONNX's node tests test_hammingwindow[_symmetric] (int32 size 10, float output), with numpy's
     * exact-pi values (ONNX 1.12's data was computed with pi = 3.1415: the runner skips it) */
    s = kt_scalar(KILN_I32, 10);
    y = kt_make(KILN_F32, 1, KT_DIMS(10), KT_VALS(0.08695652173913043, 0.174144415611437, 0.4024052851766544, 0.684551236562476, 0.9128121061276933, 1.0, 0.9128121061276935, 0.684551236562476, 0.4024052851766545, 0.17414441561143706));
    fails += kiln_optest("HammingWindow", "", 1, &s, 1, &y, 1e-7, 1e-6, "hamming periodic 10 (onnx node test)");
    s = kt_scalar(KILN_I32, 10);
    y = kt_make(KILN_F32, 1, KT_DIMS(10), KT_VALS(0.08695652173913043, 0.19376231944568395, 0.46420409280422736, 0.7717391304347825, 0.9724683703587842, 0.9724683703587842, 0.7717391304347827, 0.4642040928042276, 0.19376231944568406, 0.08695652173913043));
    fails += kiln_optest("HammingWindow", "periodic=0", 1, &s, 1, &y, 1e-7, 1e-6, "hamming symmetric 10 (onnx node test)");
    fails += kiln_optest_sweep("HammingWindow", "periodic=0", 0, 1, (kiln_tensor *[]){kt_scalar(KILN_I32, 77)}, 1,
                               "hamming symmetric 77");
    return fails;
}

static int test_blackman(void) {
    int fails = 0;
    kiln_tensor *s = kt_scalar(KILN_I64, 5);
    kiln_tensor *y = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(-1.3877787807814457e-17, 0.34, 1, 0.34, -1.3877787807814457e-17));
    fails += kiln_optest("BlackmanWindow", "periodic=0;output_datatype=11", 1, &s, 1, &y, 1e-12, 1e-12,
                         "blackman symmetric 5");
    s = kt_scalar(KILN_I64, 4);
    y = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(0, 0.34, 1, 0.34));
    fails += kiln_optest("BlackmanWindow", "", 1, &s, 1, &y, 1e-7, 1e-6, "blackman periodic 4");
    /* ONNX's node tests test_blackmanwindow[_symmetric] (int32 size 10, float output), with numpy's
     * exact-pi values (ONNX 1.12's data was computed with pi = 3.1415: the runner skips it) */
    s = kt_scalar(KILN_I32, 10);
    y = kt_make(KILN_F32, 1, KT_DIMS(10), KT_VALS(-1.3877787807814457e-17, 0.040212862362522056, 0.20077014326253045, 0.5097871376374778, 0.8492298567374694, 0.9999999999999999, 0.8492298567374695, 0.509787137637478, 0.20077014326253056, 0.04021286236252208));
    fails += kiln_optest("BlackmanWindow", "", 1, &s, 1, &y, 1e-7, 1e-6, "blackman periodic 10 (onnx node test)");
    s = kt_scalar(KILN_I32, 10);
    y = kt_make(KILN_F32, 1, KT_DIMS(10), KT_VALS(-1.3877787807814457e-17, 0.05086963265386541, 0.2580005015036621, 0.6299999999999999, 0.9511298658424724, 0.9511298658424724, 0.6300000000000002, 0.25800050150366227, 0.05086963265386547, -1.3877787807814457e-17));
    fails += kiln_optest("BlackmanWindow", "periodic=0", 1, &s, 1, &y, 1e-7, 1e-6, "blackman symmetric 10 (onnx node test)");
    fails += kiln_optest_sweep("BlackmanWindow", "", 0, 1, (kiln_tensor *[]){kt_scalar(KILN_I64, 300)}, 1,
                               "blackman periodic 300");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_hann_window = {
    .precision = KILN_PREC_FP32,
    .name = "HannWindow", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 0, .out_dtype = {KILN_DT_ATTR_OUTPUT_DATATYPE}, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test_hann),
};

const kiln_op_def kiln_op_hamming_window = {
    .precision = KILN_PREC_FP32,
    .name = "HammingWindow", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 0, .out_dtype = {KILN_DT_ATTR_OUTPUT_DATATYPE}, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test_hamming),
};

const kiln_op_def kiln_op_blackman_window = {
    .precision = KILN_PREC_FP32,
    .name = "BlackmanWindow", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 0, .out_dtype = {KILN_DT_ATTR_OUTPUT_DATATYPE}, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test_blackman),
};
