/* softmax_common.c — shared infer/forward for Softmax and LogSoftmax; see softmax_common.h. */
#include "softmax_common.h"

#include <math.h>

/* The normalized view of the input: outer rows of n elements at stride inner. */
static bool layout(const kiln_op_ctx *c, int64_t *outer, int64_t *n, int64_t *inner,
                   int64_t *axis_out) {
    const kiln_tensor *x = c->in[0];
    bool coerce_2d = c->node->opset < 13;
    int64_t axis = kiln_attr_int(c->node, "axis", coerce_2d ? 1 : -1);
    *axis_out = axis;
    if (!kiln_norm_axis(&axis, x->ndim)) return false;
    *outer = *n = *inner = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d < axis) *outer *= x->dims[d];
        else if (d == axis || coerce_2d) *n *= x->dims[d];
        else *inner *= x->dims[d];
    }
    return true;
}

kiln_status kiln_softmax_infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    int64_t outer, n, inner, axis;
    KILN_OP_CHECK(c, layout(c, &outer, &n, &inner, &axis), KILN_ERR_SHAPE,
                  "axis=%lld is out of range for rank %d", (long long)axis, x->ndim);
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

kiln_status kiln_softmax_forward(kiln_op_ctx *c, bool log_out) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    int64_t outer, n, inner, axis;
    layout(c, &outer, &n, &inner, &axis);
    bool f32 = x->dtype == KILN_F32;
    const float *xf = x->data; // (outer, n, inner) when f32
    float *yf = y->data;

    #pragma omp parallel for if (outer * n * inner > (1 << 15)) schedule(static)
    for (int64_t oi = 0; oi < outer * inner; oi++) {
        int64_t base = (oi / inner) * n * inner + oi % inner;
        double mx = -INFINITY;
        for (int64_t k = 0; k < n; k++) {
            double v = f32 ? xf[base + k * inner] : kiln_get_f64(x, base + k * inner);
            if (v > mx || isnan(v)) mx = v;
        }
        double sum = 0;
        for (int64_t k = 0; k < n; k++) {
            double v = f32 ? xf[base + k * inner] : kiln_get_f64(x, base + k * inner);
            sum += exp(v - mx);
        }
        double log_sum = log(sum), inv = 1.0 / sum;
        for (int64_t k = 0; k < n; k++) {
            int64_t i = base + k * inner;
            double v = f32 ? xf[i] : kiln_get_f64(x, i);
            /* (v - mx) first: exact when mx is huge, as in test_logsoftmax_large_number */
            double r = log_out ? (v - mx) - log_sum : exp(v - mx) * inv;
            if (f32) yf[i] = (float)r;
            else kiln_set_f64(y, i, r);
        }
    }
    return KILN_OK;
}
