/*
 * argmin.c — ArgMin: int64 index of the smallest element along `axis` (default 0).
 * Opsets 11..21 (axis, keepdims default 1, select_last_index from opset 12: on ties the
 * last index instead of the first). Floats (NaN counts as the largest value, as numpy's
 * argmin does), integers and bool. The reduced dim must not be empty.
 */
#include "../core/optest.h"

#include <math.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype) || kiln_dtype_is_int(x->dtype) ||
                         x->dtype == KILN_BOOL,
                  KILN_ERR_TYPE, "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 1, KILN_ERR_SHAPE, "input must have rank >= 1");
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    int64_t orig = axis;
    KILN_OP_CHECK(c, kiln_norm_axis(&axis, x->ndim), KILN_ERR_SHAPE,
                  "axis=%lld is out of range for rank %d", (long long)orig, x->ndim);
    KILN_OP_CHECK(c, x->dims[axis] != 0, KILN_ERR_SHAPE,
                  "axis=%lld has size 0: there is no smallest element", (long long)orig);
    bool keepdims = kiln_attr_int(c->node, "keepdims", 1) != 0;
    int64_t dims[KILN_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d != axis) dims[nd++] = x->dims[d];
        else if (keepdims) dims[nd++] = 1;
    }
    kiln_tensor_set_shape(c->out[0], KILN_I64, nd, dims);
    return KILN_OK;
}

/* a beats the best so far b: smaller, or NaN over a number */
static bool beats(double a, double b) { return a < b || (isnan(a) && !isnan(b)); }

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    kiln_norm_axis(&axis, x->ndim);
    bool last = kiln_attr_int(c->node, "select_last_index", 0) != 0;
    int64_t outer = 1, inner = 1, n = x->dims[axis];
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = (int)axis + 1; d < x->ndim; d++) inner *= x->dims[d];
    int64_t *y = c->out[0]->data; // (outer, inner)
    bool is_float = kiln_dtype_is_float(x->dtype);
    bool u64 = x->dtype == KILN_U64;

    #pragma omp parallel for if (outer * inner * n > (1 << 16)) schedule(static)
    for (int64_t oi = 0; oi < outer * inner; oi++) {
        int64_t base = (oi / inner) * n * inner + oi % inner;
        int64_t best = 0;
        if (is_float) {
            const float *pf = x->dtype == KILN_F32 ? (const float *)x->data + base : NULL;
            double bv = pf ? pf[0] : kiln_get_f64(x, base);
            for (int64_t k = 1; k < n; k++) {
                double v = pf ? pf[k * inner] : kiln_get_f64(x, base + k * inner);
                /* a tie (equal, or NaN after NaN) moves only for select_last_index */
                bool tie = v == bv || (isnan(v) && isnan(bv));
                if (beats(v, bv) || (last && tie)) { bv = v; best = k; }
            }
        } else {
            int64_t bv = kiln_get_i64(x, base);
            for (int64_t k = 1; k < n; k++) {
                int64_t v = kiln_get_i64(x, base + k * inner);
                bool lt = u64 ? (uint64_t)v < (uint64_t)bv : v < bv;
                if (lt || (last && v == bv)) { bv = v; best = k; }
            }
        }
        y[oi] = best;
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x, *y;

    /* the ONNX spec's examples */
    x = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(2, 1, 3, 10));
    y = kt_make(KILN_I64, 2, KT_DIMS(1, 2), KT_VALS(0, 0));
    fails += kiln_optest("ArgMin", "", 1, &x, 1, &y, 0, 0, "argmin default axis");
    x = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(2, 1, 3, 10));
    y = kt_make(KILN_I64, 2, KT_DIMS(2, 1), KT_VALS(1, 0));
    fails += kiln_optest("ArgMin", "axis=1", 1, &x, 1, &y, 0, 0, "argmin axis 1");
    x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(2, 2, 1, 1, 3, 1));
    y = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 0));
    fails += kiln_optest("ArgMin", "axis=1;keepdims=0", 1, &x, 1, &y, 0, 0, "argmin first tie");
    x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(2, 2, 1, 1, 3, 1));
    y = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 2));
    fails += kiln_optest("ArgMin", "axis=-1;keepdims=0;select_last_index=1", 1, &x, 1, &y, 0, 0,
                         "argmin select_last_index");

    /* middle axis of (2,3,2) */
    x = kt_make(KILN_I32, 3, KT_DIMS(2, 3, 2), KT_VALS(0, 5, 4, 1, 2, 1, -1, -9, -3, -8, -2, -7));
    y = kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(0, 1, 1, 0));
    fails += kiln_optest("ArgMin", "axis=1;keepdims=0", 1, &x, 1, &y, 0, 0, "argmin middle i32");
    x = kt_make(KILN_U64, 1, KT_DIMS(3), KT_VALS(18446744073709549568.0, 5, 7));
    y = kt_scalar(KILN_I64, 1);
    fails += kiln_optest("ArgMin", "keepdims=0", 1, &x, 1, &y, 0, 0, "argmin u64 compares unsigned");
    x = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(-1, NAN, -5));
    y = kt_scalar(KILN_I64, 1);
    fails += kiln_optest("ArgMin", "keepdims=0", 1, &x, 1, &y, 0, 0, "argmin NaN wins");
    x = kt_make(KILN_F16, 2, KT_DIMS(2, 2), KT_VALS(0.5, -0.25, 3, 3));
    y = kt_make(KILN_I64, 2, KT_DIMS(2, 1), KT_VALS(1, 1));
    fails += kiln_optest("ArgMin", "axis=1;select_last_index=1", 1, &x, 1, &y, 0, 0, "argmin f16 last");

    x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("ArgMin", "axis=-3", 1, &x, 1, KILN_ERR_SHAPE, "argmin bad axis");
    x = kt_make(KILN_F32, 2, KT_DIMS(0, 3), NULL);
    fails += kiln_optest_fails("ArgMin", "axis=0", 1, &x, 1, KILN_ERR_SHAPE, "argmin empty axis");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_argmin = {
    .precision = KILN_PREC_ANY, .out_dtype = {KILN_DT_I64},
    .name = "ArgMin", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
