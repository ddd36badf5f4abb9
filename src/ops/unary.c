/* unary.c — shared infer/forward for elementwise unary ops, their gradient rule, and
 * kiln.UnaryGrad(dY, X, Y) -> dX, which evaluates the derivative the forward op's file
 * hands over (see unary.h). X and Y are optional (the op's `uses` says which it reads);
 * attribute op names the forward op, whose attributes the node also carries. dX has dY's
 * dtype and shape. */
#include "unary.h"

#include "../core/optest.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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

/* ---------------------------------------------------------------- gradients */

kiln_status kiln_unary_grad(kiln_grad_ctx *g) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    kiln_context *ctx = g->m->ctx;
    for (int k = 1; k < n->n_in; k++)
        if (g->need[k])
            return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s node '%s': input %d ('%s') has no gradient in kiln",
                             n->op_type, n->name, k, g->m->values[n->in[k]].name);
    if (!g->need[0]) return KILN_OK;
    const kiln_value *x = &g->m->values[n->in[0]];
    if (x->dtype && !kiln_dtype_is_float(x->dtype))
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s node '%s': input '%s' is %s and has no gradient",
                         n->op_type, n->name, x->name, kiln_dtype_name(x->dtype));
    const kiln_op_def *d = kiln_op_get(kiln_op_index_domain(n->domain, n->op_type));
    const kiln_unary_grad_def *gd = d && d->grad == kiln_unary_grad ? d->family : NULL;
    if (!gd)
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "%s node '%s': the op gives no derivative (kiln_unary_grad_def)",
                         n->op_type, n->name);
    int in[3] = {g->dy[0], (gd->uses & KILN_UNARY_X) ? n->in[0] : -1, (gd->uses & KILN_UNARY_Y) ? n->out[0] : -1};
    char attr[96];
    snprintf(attr, sizeof attr, "op=%s", n->op_type);
    g->dx[0] = kiln_grad_emit(g, "kiln", "UnaryGrad", 3, in, 1, NULL, true, attr);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

#ifdef KILN_OPTESTS
int kiln_unary_gradcheck(const char *op, const char *attrs, int opset, int n, const double *vals,
                         const char *label) {
    kiln_tensor *x = kt_make(KILN_F64, 1, KT_DIMS(n), vals);
    return x ? kiln_gradcheck(op, attrs, opset, 1, &x, NULL, label) : 1;
}
#endif /* KILN_OPTESTS */

/* The forward op's derivative, or NULL when attribute op names no op of the family. */
static const kiln_unary_grad_def *grad_def(const kiln_node *n) {
    const kiln_op_def *d = kiln_op_find(kiln_attr_string(n, "op", ""));
    return d && d->grad == kiln_unary_grad ? d->family : NULL;
}

static bool same_shape(const kiln_tensor *a, const kiln_tensor *b) {
    return a->ndim == b->ndim && memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

static kiln_status grad_infer(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *x = c->in[1], *y = c->in[2];
    const kiln_unary_grad_def *gd = grad_def(c->node);
    KILN_OP_CHECK(c, gd, KILN_ERR_UNSUPPORTED, "attribute op='%s' names no elementwise unary op with a derivative",
                  kiln_attr_string(c->node, "op", ""));
    KILN_OP_CHECK(c, kiln_dtype_is_float(dy->dtype), KILN_ERR_TYPE, "dY must be a float tensor");
    KILN_OP_CHECK(c, x || !(gd->uses & KILN_UNARY_X), KILN_ERR_INVALID_ARGUMENT, "the derivative reads X, which is missing");
    KILN_OP_CHECK(c, y || !(gd->uses & KILN_UNARY_Y), KILN_ERR_INVALID_ARGUMENT, "the derivative reads Y, which is missing");
    for (int i = 1; i < c->n_in; i++) {
        const kiln_tensor *t = c->in[i];
        KILN_OP_CHECK(c, !t || (t->dtype == dy->dtype && same_shape(t, dy)), KILN_ERR_SHAPE,
                      "%s must have dY's dtype and shape", i == 1 ? "X" : "Y");
    }
    kiln_tensor_set_shape(c->out[0], dy->dtype, dy->ndim, dy->dims);
    return KILN_OK;
}

void kiln_unary_grad_apply(const kiln_unary_grad_def *gd, const kiln_unary_args *args, const kiln_tensor *dy,
                           const kiln_tensor *x, const kiln_tensor *y, kiln_tensor *dx) {
    const kiln_unary_args a = *args;
    const int64_t n = kiln_tensor_numel(dy);
    const int nt = n >= KILN_UNARY_PAR_MIN ? kiln_cpu_threads() : 1;
    if (dy->dtype == KILN_F32) {
        const float *xp = x ? x->data : NULL, *yp = y ? y->data : NULL; // (n)
        const float *dyp = dy->data;                                     // (n)
        float *dxp = dx->data;                                           // (n)
        if (gd->f32) {
            /* one contiguous slice per thread */
#pragma omp parallel for if (nt > 1) num_threads(nt)
            for (int t = 0; t < nt; t++) {
                const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
                gd->f32(xp ? xp + lo : NULL, yp ? yp + lo : NULL, dyp + lo, dxp + lo, hi - lo, &a);
            }
            return;
        }
#pragma omp parallel for if (nt > 1) num_threads(nt)
        for (int64_t i = 0; i < n; i++) {
            const double d = gd->deriv(xp ? xp[i] : 0, yp ? yp[i] : 0, &a);
            dxp[i] = d == 0 ? 0.0f : (float)(d * dyp[i]);
        }
    } else if (dy->dtype == KILN_F64) {
        const double *xp = x ? x->data : NULL, *yp = y ? y->data : NULL; // (n)
        const double *dyp = dy->data;                                     // (n)
        double *dxp = dx->data;                                           // (n)
#pragma omp parallel for if (nt > 1) num_threads(nt)
        for (int64_t i = 0; i < n; i++) {
            const double d = gd->deriv(xp ? xp[i] : 0, yp ? yp[i] : 0, &a);
            dxp[i] = d == 0 ? 0.0 : d * dyp[i];
        }
    } else {
#pragma omp parallel for if (nt > 1) num_threads(nt)
        for (int64_t i = 0; i < n; i++) {
            const double d = gd->deriv(x ? kiln_get_f64(x, i) : 0, y ? kiln_get_f64(y, i) : 0, &a);
            kiln_set_f64(dx, i, d == 0 ? 0.0 : d * kiln_get_f64(dy, i));
        }
    }
}

static kiln_status grad_forward(kiln_op_ctx *c) {
    const kiln_unary_grad_def *gd = grad_def(c->node);
    const kiln_unary_args a = gd->args ? gd->args(c->node) : (kiln_unary_args){0};
    kiln_unary_grad_apply(gd, &a, c->in[0], (gd->uses & KILN_UNARY_X) ? c->in[1] : NULL,
                          (gd->uses & KILN_UNARY_Y) ? c->in[2] : NULL, c->out[0]);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int grad_test(void) {
    int fails = 0;
    kiln_tensor *in[3];
    /* Relu reads Y: dX = Y > 0 ? dY : 0, also where dY is NaN or inf */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, -2, NAN, 4, INFINITY, 6));
    in[1] = NULL;
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, 2, 0, 4.5, 0, 0.25));
    kiln_tensor *want = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, -2, 0, 4, 0, 6));
    fails += kiln_optest("UnaryGrad", "op=Relu", 3, in, 1, &want, 0, 0, "unarygrad relu f32");
    /* Tanh reads Y: dX = dY * (1 - Y^2) = (2 * 1, 4 * 0.75, -1 * 0.96) */
    in[0] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(2, 4, -1));
    in[1] = NULL;
    in[2] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0, 0.5, -0.2));
    want = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(2, 3, -0.96));
    fails += kiln_optest("UnaryGrad", "op=Tanh", 3, in, 1, &want, 0, 1e-15, "unarygrad tanh f64");
    /* LeakyRelu reads X and the forward's alpha: X < 0 ? alpha * dY : dY, in f16 */
    in[0] = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(4, 3, -2));
    in[1] = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(-1, 2, -0.5));
    in[2] = NULL;
    want = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(1, 3, -0.5));
    fails += kiln_optest("UnaryGrad", "op=LeakyRelu;alpha=0.25", 3, in, 1, &want, 0, 0, "unarygrad leakyrelu f16 alpha");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("UnaryGrad", "op=Add", 3, in, 1, KILN_ERR_UNSUPPORTED, "unarygrad op=Add rejected");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = NULL;
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("UnaryGrad", "op=Relu", 3, in, 1, KILN_ERR_SHAPE, "unarygrad Y (3), dY (2) rejected");

    /* Relu's f32 fast path split over threads, against a plain loop */
    const int64_t n = 100003;
    in[0] = kt_rand(KILN_F32, 1, KT_DIMS(n), -1, 1, 32);
    in[1] = NULL;
    in[2] = kt_rand(KILN_F32, 1, KT_DIMS(n), -1, 1, 31);
    want = kt_make(KILN_F32, 1, KT_DIMS(n), NULL);
    if (!in[2] || !in[0] || !want) {
        kiln_tensor_free(in[2]);
        kiln_tensor_free(in[0]);
        kiln_tensor_free(want);
        return fails + 1;
    }
    float *yp = in[2]->data, *wp = want->data; // (n)
    const float *dp = in[0]->data;              // (n)
    for (int64_t i = 0; i < n; i++) {
        if (yp[i] < 0) yp[i] = 0; /* a Relu output */
        wp[i] = yp[i] > 0 ? dp[i] : 0;
    }
    fails += kiln_optest("UnaryGrad", "op=Relu", 3, in, 1, &want, 0, 0, "unarygrad relu f32 large, threaded");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_unary_grad = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY_GRAD,
    .name = "UnaryGrad", .domain = "kiln", .min_inputs = 1, .max_inputs = 3, .min_outputs = 1,
    .max_outputs = 1, .infer = grad_infer, .cpu_forward = grad_forward, .test = KILN_OP_TESTS(grad_test),
};
