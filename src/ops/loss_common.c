/* loss_common.c — shared infer/forward of the NLL-style losses; see loss_common.h. */
#include "loss_common.h"

#include <string.h>

typedef enum reduction { RED_NONE, RED_SUM, RED_MEAN, RED_BAD } reduction;

static reduction get_reduction(const kiln_node *n) {
    const char *r = kiln_attr_string(n, "reduction", "mean");
    return strcmp(r, "none") == 0 ? RED_NONE
           : strcmp(r, "sum") == 0 ? RED_SUM
           : strcmp(r, "mean") == 0 ? RED_MEAN
                                    : RED_BAD;
}

kiln_status kiln_nll_infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *t = c->in[1];
    const kiln_tensor *w = c->n_in > 2 ? c->in[2] : NULL;
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "input 0 dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 2, KILN_ERR_SHAPE, "input 0 must be (N,C,...), got rank %d",
                  x->ndim);
    KILN_OP_CHECK(c, t != NULL, KILN_ERR_SHAPE, "input 1 (target) is required");
    KILN_OP_CHECK(c, kiln_dtype_is_int(t->dtype), KILN_ERR_TYPE,
                  "target dtype %s must be an integer type", kiln_dtype_name(t->dtype));
    bool ok = t->ndim == x->ndim - 1 && t->dims[0] == x->dims[0];
    for (int d = 1; ok && d < t->ndim; d++) ok = t->dims[d] == x->dims[d + 1];
    KILN_OP_CHECK(c, ok, KILN_ERR_SHAPE, "target must have shape (N,d1..dk) of input (N,C,d1..dk)");
    if (w) {
        KILN_OP_CHECK(c, kiln_dtype_is_float(w->dtype), KILN_ERR_TYPE,
                      "weight dtype %s is not supported", kiln_dtype_name(w->dtype));
        KILN_OP_CHECK(c, w->ndim == 1 && w->dims[0] == x->dims[1], KILN_ERR_SHAPE,
                      "weight must have shape (C)=(%lld)", (long long)x->dims[1]);
    }
    reduction red = get_reduction(c->node);
    KILN_OP_CHECK(c, red != RED_BAD, KILN_ERR_UNSUPPORTED,
                  "reduction='%s' is not one of none, sum, mean",
                  kiln_attr_string(c->node, "reduction", "mean"));
    if (red == RED_NONE) kiln_tensor_set_shape(c->out[0], x->dtype, t->ndim, t->dims);
    else kiln_tensor_set_shape(c->out[0], x->dtype, 0, NULL);
    return KILN_OK;
}

kiln_status kiln_nll_forward(kiln_op_ctx *c, const kiln_tensor *logp) {
    const kiln_tensor *x = c->in[0], *t = c->in[1]; // (N,C,D), (N,D)
    const kiln_tensor *w = c->n_in > 2 ? c->in[2] : NULL; // (C)
    kiln_tensor *y = c->out[0];
    reduction red = get_reduction(c->node);
    bool has_ii = kiln_node_attr(c->node, "ignore_index") != NULL;
    int64_t ii = kiln_attr_int(c->node, "ignore_index", 0);
    int64_t N = x->dims[0], C = x->dims[1], D = 1;
    for (int d = 2; d < x->ndim; d++) D *= x->dims[d];

    double loss_sum = 0, weight_sum = 0;
    for (int64_t n = 0; n < N; n++) {
        for (int64_t d = 0; d < D; d++) {
            int64_t i = n * D + d, cls = kiln_get_i64(t, i);
            double loss = 0, wt = 0;
            if (!(has_ii && cls == ii)) {
                if (cls < 0 || cls >= C)
                    return kiln_op_fail(c, KILN_ERR_INVALID_ARGUMENT,
                                        "target[%lld]=%lld is outside [0, C=%lld)", (long long)i,
                                        (long long)cls, (long long)C);
                wt = w ? kiln_get_f64(w, cls) : 1.0;
                loss = -wt * kiln_get_f64(logp, (n * C + cls) * D + d);
            }
            if (red == RED_NONE) kiln_set_f64(y, i, loss);
            loss_sum += loss;
            weight_sum += wt;
        }
    }
    if (red == RED_SUM) kiln_set_f64(y, 0, loss_sum);
    else if (red == RED_MEAN) kiln_set_f64(y, 0, loss_sum / weight_sum);
    return KILN_OK;
}
