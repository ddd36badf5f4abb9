/*
 * arg_common.c — ArgMax and ArgMin, written once (arg_common.h): the index of the largest
 * or smallest element along `axis`, NaN winning as in numpy, ties to the first index unless
 * select_last_index.
 */
#include "arg_common.h"

#include <math.h>

kiln_status kiln_arg_infer(kiln_op_ctx *c, bool largest) {
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
                  "axis=%lld has size 0: there is no %s element", (long long)orig,
                  largest ? "largest" : "smallest");
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

/* a beats the best so far b: larger (smaller), or NaN over a number */
static bool beats(bool largest, double a, double b) {
    return (largest ? a > b : a < b) || (isnan(a) && !isnan(b));
}

kiln_status kiln_arg_forward(kiln_op_ctx *c, bool largest) {
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
                if (beats(largest, v, bv) || (last && tie)) { bv = v; best = k; }
            }
        } else {
            int64_t bv = kiln_get_i64(x, base);
            for (int64_t k = 1; k < n; k++) {
                int64_t v = kiln_get_i64(x, base + k * inner);
                const bool gt = u64 ? (uint64_t)v > (uint64_t)bv : v > bv;
                const bool lt = u64 ? (uint64_t)v < (uint64_t)bv : v < bv;
                if ((largest ? gt : lt) || (last && v == bv)) { bv = v; best = k; }
            }
        }
        y[oi] = best;
    }
    return KILN_OK;
}

