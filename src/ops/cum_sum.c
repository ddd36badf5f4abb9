/* cum_sum.c — CumSum: running sums of X along the axis given by input 1 (an int32 or
 * int64 scalar or 1-element tensor, read when the plan is built); opsets 11 and 14.
 * exclusive=1 leaves out the element itself (the first sum is 0), reverse=1 sums from
 * the end. Float and integer dtypes; floats accumulate in double, integers wrap. */
#include "../core/optest.h"

#include <inttypes.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *a = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype) || kiln_dtype_is_int(x->dtype), KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, (a->dtype == KILN_I32 || a->dtype == KILN_I64) && a->ndim <= 1 && kiln_tensor_numel(a) == 1,
                  KILN_ERR_TYPE, "input 'axis' must be an int32 or int64 scalar, got %s with %lld elements",
                  kiln_dtype_name(a->dtype), (long long)kiln_tensor_numel(a));
    KILN_OP_CHECK(c, a->data != NULL, KILN_ERR_UNSUPPORTED, "input 'axis' must be known when the plan is built");
    KILN_OP_CHECK(c, x->ndim >= 1, KILN_ERR_SHAPE, "input must have rank >= 1");
    int64_t axis = kiln_get_i64(a, 0);
    KILN_OP_CHECK(c, kiln_norm_axis(&axis, x->ndim), KILN_ERR_SHAPE, "axis=%" PRId64 " is out of range for rank %d",
                  kiln_get_i64(a, 0), x->ndim);
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    int64_t axis = kiln_get_i64(c->in[1], 0);
    kiln_norm_axis(&axis, x->ndim);
    const bool exclusive = kiln_attr_int(c->node, "exclusive", 0) != 0;
    const bool reverse = kiln_attr_int(c->node, "reverse", 0) != 0;
    int64_t outer = 1, inner = 1, n = x->dims[axis];
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = (int)axis + 1; d < x->ndim; d++) inner *= x->dims[d];
    const bool is_float = kiln_dtype_is_float(x->dtype);
    for (int64_t oi = 0; oi < outer * inner; oi++) {
        const int64_t base = (oi / inner) * n * inner + oi % inner;
        double sf = 0;
        uint64_t si = 0;
        for (int64_t j = 0; j < n; j++) {
            const int64_t at = base + (reverse ? n - 1 - j : j) * inner;
            if (is_float) {
                const double v = kiln_get_f64(x, at);
                if (!exclusive) sf += v;
                kiln_set_f64(y, at, sf);
                if (exclusive) sf += v;
            } else {
                const uint64_t v = (uint64_t)kiln_get_i64(x, at);
                if (!exclusive) si += v;
                kiln_set_i64(y, at, (int64_t)si);
                if (exclusive) si += v;
            }
        }
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *in[2], *y;
    /* the ONNX spec's examples */
    in[0] = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(1, 2, 3, 4, 5));
    in[1] = kt_scalar(KILN_I32, 0);
    y = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(1, 3, 6, 10, 15));
    fails += kiln_optest("CumSum", "", 2, in, 1, &y, 0, 0, "cum_sum 1-D");
    in[0] = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(1, 2, 3, 4, 5));
    in[1] = kt_scalar(KILN_I32, 0);
    y = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(0, 1, 3, 6, 10));
    fails += kiln_optest("CumSum", "exclusive=1", 2, in, 1, &y, 0, 0, "cum_sum exclusive");
    in[0] = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(1, 2, 3, 4, 5));
    in[1] = kt_scalar(KILN_I32, 0);
    y = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(15, 14, 12, 9, 5));
    fails += kiln_optest("CumSum", "reverse=1", 2, in, 1, &y, 0, 0, "cum_sum reverse");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(1, 2, 3, 4, 5));
    in[1] = kt_scalar(KILN_I64, 0);
    y = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(14, 12, 9, 5, 0));
    fails += kiln_optest("CumSum", "reverse=1;exclusive=1", 2, in, 1, &y, 0, 0, "cum_sum reverse exclusive");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6));
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 3, 6, 4, 9, 15));
    fails += kiln_optest("CumSum", "", 2, in, 1, &y, 0, 0, "cum_sum 2-D axis 1");
    in[0] = kt_make(KILN_I32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6));
    in[1] = kt_scalar(KILN_I64, -2);
    y = kt_make(KILN_I32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 5, 7, 9));
    fails += kiln_optest("CumSum", "", 2, in, 1, &y, 0, 0, "cum_sum i32 axis -2");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_scalar(KILN_I64, 2);
    fails += kiln_optest_fails("CumSum", "", 2, in, 1, KILN_ERR_SHAPE, "cum_sum axis out of range");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("CumSum", "", 2, in, 1, KILN_ERR_TYPE, "cum_sum axis of 2 elements");
    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL);
    in[1] = kt_scalar(KILN_I64, 0);
    fails += kiln_optest_fails("CumSum", "", 2, in, 1, KILN_ERR_TYPE, "cum_sum rejects bool");
    fails += kiln_optest_sweep_tol("CumSum", "", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 5911),
                                                     kt_scalar(KILN_I64, 2)},
                                   1, 1e-4, 1e-4, "cum_sum random axis 2");
    fails += kiln_optest_sweep_tol("CumSum", "reverse=1;exclusive=1", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 300), -3, 3, 5912),
                                                     kt_scalar(KILN_I64, -1)},
                                   1, 1e-4, 1e-4, "cum_sum random reverse exclusive");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_cum_sum = {
    .precision = KILN_PREC_FP32,
    .name = "CumSum", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
