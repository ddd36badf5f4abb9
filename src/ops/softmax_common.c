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

/* ---------------------------------------------------------------- gradients */

kiln_status kiln_softmax_grad_infer(kiln_op_ctx *c) {
    const kiln_tensor *y = c->in[0], *dy = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_is_float(y->dtype) && dy->dtype == y->dtype, KILN_ERR_TYPE,
                  "Y and dY must be the same float dtype");
    bool same = dy->ndim == y->ndim;
    for (int d = 0; same && d < y->ndim; d++) same = dy->dims[d] == y->dims[d];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "Y and dY must have the same shape");
    int64_t outer, n, inner, axis;
    KILN_OP_CHECK(c, layout(c, &outer, &n, &inner, &axis), KILN_ERR_SHAPE,
                  "axis=%lld is out of range for rank %d", (long long)axis, y->ndim);
    kiln_tensor_set_shape(c->out[0], y->dtype, y->ndim, y->dims);
    return KILN_OK;
}

kiln_status kiln_softmax_grad_forward(kiln_op_ctx *c, bool log_out) {
    const kiln_tensor *y = c->in[0], *dy = c->in[1];
    kiln_tensor *dx = c->out[0];
    int64_t outer, n, inner, axis;
    layout(c, &outer, &n, &inner, &axis);
    bool f32 = y->dtype == KILN_F32;
    const float *yf = y->data, *dyf = dy->data; // (outer, n, inner) when f32
    float *dxf = dx->data;

    #pragma omp parallel for if (outer * n * inner > (1 << 15)) schedule(static)
    for (int64_t oi = 0; oi < outer * inner; oi++) {
        int64_t base = (oi / inner) * n * inner + oi % inner;
        double s = 0;
        if (f32) {
            for (int64_t k = 0; k < n; k++) {
                int64_t i = base + k * inner;
                s += log_out ? (double)dyf[i] : (double)dyf[i] * yf[i];
            }
            for (int64_t k = 0; k < n; k++) {
                int64_t i = base + k * inner;
                double r = log_out ? dyf[i] - exp((double)yf[i]) * s : yf[i] * (dyf[i] - s);
                dxf[i] = (float)r;
            }
        } else {
            for (int64_t k = 0; k < n; k++) {
                int64_t i = base + k * inner;
                double g = kiln_get_f64(dy, i);
                s += log_out ? g : g * kiln_get_f64(y, i);
            }
            for (int64_t k = 0; k < n; k++) {
                int64_t i = base + k * inner;
                double v = kiln_get_f64(y, i), g = kiln_get_f64(dy, i);
                kiln_set_f64(dx, i, log_out ? g - exp(v) * s : v * (g - s));
            }
        }
    }
    return KILN_OK;
}

kiln_status kiln_softmax_grad_rule(kiln_grad_ctx *g, const char *grad_op) {
    if (!g->need[0]) return KILN_OK;
    int in[2] = {KILN_GRAD_OUT(g, 0), g->dy[0]};
    g->dx[0] = kiln_grad_emit(g, "kiln", grad_op, 2, in, 1, NULL, true, NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}
