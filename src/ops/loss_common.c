/* loss_common.c — shared infer/forward of the NLL-style losses; see loss_common.h. */
#include "loss_common.h"

#include <math.h>
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

/* ---------------------------------------------------------------- gradients */

static const kiln_tensor *opt_in(const kiln_op_ctx *c, int i) { return c->n_in > i ? c->in[i] : NULL; }

kiln_status kiln_nll_grad_infer(kiln_op_ctx *c, bool softmax) {
    /* the forward's checks on (X, target, weight), with the loss's shape into scratch */
    kiln_tensor loss = {0}, *loss_p = &loss;
    kiln_op_ctx fwd = *c;
    fwd.n_in = c->n_in < 3 ? c->n_in : 3;
    fwd.n_out = 1;
    fwd.out = &loss_p;
    kiln_status st = kiln_nll_infer(&fwd);
    if (st != KILN_OK) return st;
    const kiln_tensor *x = c->in[0], *dl = opt_in(c, 3), *dlp = opt_in(c, 4);
    KILN_OP_CHECK(c, softmax || dl, KILN_ERR_SHAPE, "input dLoss is required");
    KILN_OP_CHECK(c, !dlp || softmax, KILN_ERR_SHAPE, "dLogProb is only an input of the SCE gradient");
    if (dl) {
        bool same = dl->dtype == x->dtype && dl->ndim == loss.ndim;
        for (int d = 0; same && d < loss.ndim; d++) same = dl->dims[d] == loss.dims[d];
        KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dLoss must have the loss's dtype and shape");
    }
    if (dlp) {
        bool same = dlp->dtype == x->dtype && dlp->ndim == x->ndim;
        for (int d = 0; same && d < x->ndim; d++) same = dlp->dims[d] == x->dims[d];
        KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dLogProb must have the scores' dtype and shape");
    }
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

kiln_status kiln_nll_grad_forward(kiln_op_ctx *c, bool softmax) {
    const kiln_tensor *x = c->in[0], *t = c->in[1]; // (N,C,D), (N,D)
    const kiln_tensor *w = opt_in(c, 2), *dl = opt_in(c, 3); // (C), loss-shaped
    const kiln_tensor *dlp = opt_in(c, 4); // (N,C,D)
    kiln_tensor *dx = c->out[0]; // (N,C,D)
    reduction red = get_reduction(c->node);
    bool has_ii = kiln_node_attr(c->node, "ignore_index") != NULL;
    int64_t ii = kiln_attr_int(c->node, "ignore_index", 0);
    int64_t N = x->dims[0], C = x->dims[1], D = 1;
    for (int d = 2; d < x->ndim; d++) D *= x->dims[d];

    /* the mean's denominator, and the targets checked once */
    double weight_sum = 0;
    for (int64_t i = 0; i < N * D; i++) {
        int64_t cls = kiln_get_i64(t, i);
        if (has_ii && cls == ii) continue;
        if (cls < 0 || cls >= C)
            return kiln_op_fail(c, KILN_ERR_INVALID_ARGUMENT, "target[%lld]=%lld is outside [0, C=%lld)",
                                (long long)i, (long long)cls, (long long)C);
        weight_sum += w ? kiln_get_f64(w, cls) : 1.0;
    }
    double g_all = dl && red != RED_NONE ? kiln_get_f64(dl, 0) : 0;
    if (red == RED_MEAN) g_all /= weight_sum;

    #pragma omp parallel for if (N * C * D > (1 << 15)) schedule(static)
    for (int64_t nd = 0; nd < N * D; nd++) {
        int64_t base = (nd / D) * C * D + nd % D, cls = kiln_get_i64(t, nd);
        double coef = 0;
        if (dl && !(has_ii && cls == ii))
            coef = (w ? kiln_get_f64(w, cls) : 1.0) * (red == RED_NONE ? kiln_get_f64(dl, nd) : g_all);
        if (!softmax) {
            for (int64_t k = 0; k < C; k++) kiln_set_f64(dx, base + k * D, k == cls ? -coef : 0.0);
            continue;
        }
        double mx = -INFINITY, sum = 0, sum_dlp = 0;
        for (int64_t k = 0; k < C; k++) {
            double v = kiln_get_f64(x, base + k * D);
            if (v > mx || isnan(v)) mx = v;
            if (dlp) sum_dlp += kiln_get_f64(dlp, base + k * D);
        }
        for (int64_t k = 0; k < C; k++) sum += exp(kiln_get_f64(x, base + k * D) - mx);
        for (int64_t k = 0; k < C; k++) {
            int64_t i = base + k * D;
            double p = exp(kiln_get_f64(x, i) - mx) / sum;
            double r = coef * (p - (k == cls ? 1.0 : 0.0));
            if (dlp) r += kiln_get_f64(dlp, i) - p * sum_dlp;
            kiln_set_f64(dx, i, r);
        }
    }
    return KILN_OK;
}

kiln_status kiln_nll_grad_rule(kiln_grad_ctx *g, const char *grad_op) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    static const char *const names[3] = {"scores", "target", "weight"};
    for (int k = 1; k < n->n_in; k++)
        if (g->need[k])
            return kiln_fail(g->m->ctx, KILN_ERR_UNSUPPORTED,
                             "%s node '%s': the gradient with respect to %s is not supported", n->op_type,
                             n->name, names[k]);
    if (!g->need[0]) return KILN_OK;
    int in[5] = {n->in[0], n->in[1], n->n_in > 2 ? n->in[2] : -1, g->dy[0], n->n_out > 1 ? g->dy[1] : -1};
    int n_in = 5;
    while (in[n_in - 1] < 0) n_in--;
    g->dx[0] = kiln_grad_emit(g, "kiln", grad_op, n_in, in, 1, NULL, true, NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}
