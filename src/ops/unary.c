/* unary.c — shared infer/forward for elementwise unary ops; see unary.h. */
#include "unary.h"

kiln_status kiln_unary_infer(kiln_op_ctx *c, bool allow_int) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype) || (allow_int && kiln_dtype_is_int(x->dtype)),
                  KILN_ERR_TYPE, "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

kiln_status kiln_unary_forward(kiln_op_ctx *c, kiln_unary_fn fn) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    int64_t n = kiln_tensor_numel(x);
    if (x->dtype == KILN_F32) {
        const float *xp = x->data;
        float *yp = y->data;
        for (int64_t i = 0; i < n; i++) yp[i] = (float)fn(xp[i], c->node);
    } else if (kiln_dtype_is_float(x->dtype)) {
        for (int64_t i = 0; i < n; i++) kiln_set_f64(y, i, fn(kiln_get_f64(x, i), c->node));
    } else {
        for (int64_t i = 0; i < n; i++)
            kiln_set_i64(y, i, (int64_t)fn((double)kiln_get_i64(x, i), c->node));
    }
    return KILN_OK;
}

kiln_status kiln_unary_forward_args(kiln_op_ctx *c, kiln_unary_argfn fn, kiln_unary_intfn ifn,
                                    const kiln_unary_args *a) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    int64_t n = kiln_tensor_numel(x);
    int nt = kiln_cpu_threads();
    if (x->dtype == KILN_F32) {
        const float *xp = x->data; // (n)
        float *yp = y->data;       // (n)
#pragma omp parallel for if (n >= KILN_UNARY_PAR_MIN) num_threads(nt)
        for (int64_t i = 0; i < n; i++) yp[i] = (float)fn(xp[i], a);
    } else if (x->dtype == KILN_F64) {
        const double *xp = x->data; // (n)
        double *yp = y->data;       // (n)
#pragma omp parallel for if (n >= KILN_UNARY_PAR_MIN) num_threads(nt)
        for (int64_t i = 0; i < n; i++) yp[i] = fn(xp[i], a);
    } else if (kiln_dtype_is_float(x->dtype)) {
#pragma omp parallel for if (n >= KILN_UNARY_PAR_MIN) num_threads(nt)
        for (int64_t i = 0; i < n; i++) kiln_set_f64(y, i, fn(kiln_get_f64(x, i), a));
    } else if (ifn) {
#pragma omp parallel for if (n >= KILN_UNARY_PAR_MIN) num_threads(nt)
        for (int64_t i = 0; i < n; i++) kiln_set_i64(y, i, ifn(kiln_get_i64(x, i)));
    } else {
#pragma omp parallel for if (n >= KILN_UNARY_PAR_MIN) num_threads(nt)
        for (int64_t i = 0; i < n; i++)
            kiln_set_i64(y, i, (int64_t)fn((double)kiln_get_i64(x, i), a));
    }
    return KILN_OK;
}
