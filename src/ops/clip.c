/*
 * clip.c — Clip: y = min(max(x, min), max), elementwise.
 * Opset 11+: min and max are optional inputs 1 and 2 holding one element of x's dtype
 * (the spec asks for rank 0; exporters also write shape [1]); a missing bound does not
 * clip. Opsets 6-10: float attributes min and max instead (absent: no bound). When
 * min > max every element becomes max, as numpy.clip and the opset-13 spec do.
 * Float dtypes and (opset 12+) all integer dtypes, compared exactly in their own domain:
 * signed as int64, unsigned as uint64. NaN elements stay NaN.
 * Gradient: dY where min <= X <= max, i.e. where Y = X (NaN passes), else 0;
 * the bounds get none (asking fails with KILN_ERR_UNSUPPORTED) and are never trained.
 */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype) || kiln_dtype_is_int(x->dtype), KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    for (int i = 1; i < c->n_in; i++) {
        const kiln_tensor *b = c->in[i];
        const char *name = i == 1 ? "min" : "max";
        if (!b) continue;
        KILN_OP_CHECK(c, c->node->opset >= 11, KILN_ERR_UNSUPPORTED,
                      "opset %d Clip takes %s as an attribute, not an input", c->node->opset,
                      name);
        KILN_OP_CHECK(c, b->dtype == x->dtype, KILN_ERR_TYPE, "%s has dtype %s, input has %s",
                      name, kiln_dtype_name(b->dtype), kiln_dtype_name(x->dtype));
        KILN_OP_CHECK(c, kiln_tensor_numel(b) == 1, KILN_ERR_SHAPE,
                      "%s must hold one element, it has %lld", name,
                      (long long)kiln_tensor_numel(b));
    }
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

/* Bound i (1: min, 2: max) when given as an input. */
static const kiln_tensor *bound(const kiln_op_ctx *c, int i) {
    return i < c->n_in ? c->in[i] : NULL;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    const kiln_tensor *lo_t = bound(c, 1), *hi_t = bound(c, 2);
    kiln_tensor *y = c->out[0];
    int64_t n = kiln_tensor_numel(x);
    int nt = kiln_cpu_threads();
    if (kiln_dtype_is_float(x->dtype)) {
        double lo = -INFINITY, hi = INFINITY;
        if (c->node->opset < 11) {
            lo = kiln_attr_float(c->node, "min", -INFINITY);
            hi = kiln_attr_float(c->node, "max", INFINITY);
        }
        if (lo_t) lo = kiln_get_f64(lo_t, 0);
        if (hi_t) hi = kiln_get_f64(hi_t, 0);
        if (x->dtype == KILN_F32) {
            /* bounds of x's dtype, or infinities: exact as floats */
            const float *xp = x->data; // (n)
            float *yp = y->data;       // (n)
            float flo = (float)lo, fhi = (float)hi;
#pragma omp parallel for if (n >= KILN_UNARY_PAR_MIN) num_threads(nt)
            for (int64_t i = 0; i < n; i++) {
                float v = xp[i];
                v = v < flo ? flo : v; /* in this order, so min > max yields max */
                yp[i] = v > fhi ? fhi : v;
            }
        } else {
#pragma omp parallel for if (n >= KILN_UNARY_PAR_MIN) num_threads(nt)
            for (int64_t i = 0; i < n; i++) {
                double v = kiln_get_f64(x, i);
                v = v < lo ? lo : v;
                kiln_set_f64(y, i, v > hi ? hi : v);
            }
        }
    } else if (kiln_dtype_is_signed(x->dtype)) {
        int64_t lo = lo_t ? kiln_get_i64(lo_t, 0) : INT64_MIN;
        int64_t hi = hi_t ? kiln_get_i64(hi_t, 0) : INT64_MAX;
#pragma omp parallel for if (n >= KILN_UNARY_PAR_MIN) num_threads(nt)
        for (int64_t i = 0; i < n; i++) {
            int64_t v = kiln_get_i64(x, i);
            v = v < lo ? lo : v;
            kiln_set_i64(y, i, v > hi ? hi : v);
        }
    } else {
        /* unsigned: u64 values above INT64_MAX travel through int64 as their bit pattern */
        uint64_t lo = lo_t ? (uint64_t)kiln_get_i64(lo_t, 0) : 0;
        uint64_t hi = hi_t ? (uint64_t)kiln_get_i64(hi_t, 0) : UINT64_MAX;
#pragma omp parallel for if (n >= KILN_UNARY_PAR_MIN) num_threads(nt)
        for (int64_t i = 0; i < n; i++) {
            uint64_t v = (uint64_t)kiln_get_i64(x, i);
            v = v < lo ? lo : v;
            kiln_set_i64(y, i, (int64_t)(v > hi ? hi : v));
        }
    }
    return KILN_OK;
}

static double deriv(double x, double y, const kiln_unary_args *a) { return x == y || x != x ? 1 : 0; }
static const kiln_unary_grad_def grad_def = {deriv, NULL, KILN_UNARY_X | KILN_UNARY_Y, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *in[3];
    kiln_tensor *y;

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(-3, -1, -0.25, 0.5, 1, 7));
    in[1] = kt_scalar(KILN_F32, -1);
    in[2] = kt_scalar(KILN_F32, 0.75);
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(-1, -1, -0.25, 0.5, 0.75, 0.75));
    fails += kiln_optest("Clip", "", 3, in, 1, &y, 0, 0, "clip f32 min max");

    in[0] = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(-5, 0, 2, 9));
    in[1] = NULL;
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(2.5)); /* shape [1] is accepted */
    y = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(-5, 0, 2, 2.5));
    fails += kiln_optest("Clip", "", 3, in, 1, &y, 0, 0, "clip f32 max only");

    in[0] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(-1e300, 0.125, 1e300));
    y = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(-1e300, 0.125, 1e300));
    fails += kiln_optest("Clip", "", 1, in, 1, &y, 0, 0, "clip f64 no bounds");

    /* min > max: everything becomes max (f32 fast path and the generic float path) */
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(-2, 0.5, 3));
    in[1] = kt_scalar(KILN_F32, 2);
    in[2] = kt_scalar(KILN_F32, 1);
    y = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 1, 1));
    fails += kiln_optest("Clip", "", 3, in, 1, &y, 0, 0, "clip f32 min > max");
    in[0] = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(-2, 0.5, 3));
    in[1] = kt_scalar(KILN_F16, 1);
    in[2] = kt_scalar(KILN_F16, -1);
    y = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(-1, -1, -1));
    fails += kiln_optest("Clip", "", 3, in, 1, &y, 0, 0, "clip f16 min > max");

    in[0] = kt_make(KILN_I32, 1, KT_DIMS(5), KT_VALS(-2000000000, -7, 0, 7, 2000000000));
    in[1] = kt_scalar(KILN_I32, -5);
    in[2] = kt_scalar(KILN_I32, 100);
    y = kt_make(KILN_I32, 1, KT_DIMS(5), KT_VALS(-5, -5, 0, 7, 100));
    fails += kiln_optest("Clip", "", 3, in, 1, &y, 0, 0, "clip i32");

    in[0] = kt_make(KILN_I8, 1, KT_DIMS(4), KT_VALS(-128, -3, 0, 127));
    in[1] = kt_scalar(KILN_I8, -3);
    y = kt_make(KILN_I8, 1, KT_DIMS(4), KT_VALS(-3, -3, 0, 127));
    fails += kiln_optest("Clip", "", 2, in, 1, &y, 0, 0, "clip i8 min only");

    in[0] = kt_make(KILN_U8, 1, KT_DIMS(4), KT_VALS(0, 10, 200, 255));
    in[1] = kt_scalar(KILN_U8, 20);
    in[2] = kt_scalar(KILN_U8, 250);
    y = kt_make(KILN_U8, 1, KT_DIMS(4), KT_VALS(20, 20, 200, 250));
    fails += kiln_optest("Clip", "", 3, in, 1, &y, 0, 0, "clip u8");

    in[0] = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(-3, -0.5, 0.5, 3));
    y = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(-1, -0.5, 0.5, 2));
    fails += kiln_optest_opset("Clip", "min=-1.0;max=2.0", 6, 1, in, 1, &y, 0, 0,
                               "clip opset 6 attributes");

    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(-1, 1));
    in[1] = kt_scalar(KILN_F64, 0);
    fails += kiln_optest_fails("Clip", "", 2, in, 1, KILN_ERR_TYPE, "clip rejects f64 min for f32");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(-1, 1));
    in[1] = NULL;
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0, 1));
    fails += kiln_optest_fails("Clip", "", 3, in, 1, KILN_ERR_SHAPE, "clip rejects 2-element max");
    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(2), KT_VALS(0, 1));
    fails += kiln_optest_fails("Clip", "", 1, in, 1, KILN_ERR_TYPE, "clip rejects bool");
    /* away from the bounds */
    fails += kiln_gradcheck("Clip", "", 0, 3,
                            (kiln_tensor *[]){kt_make(KILN_F64, 1, KT_DIMS(6),
                                                      KT_VALS(-1.7, -0.4, 0.3, 0.6, 1.5, 2.2)),
                                              kt_scalar(KILN_F64, -1),
                                              kt_scalar(KILN_F64, 1)},
                            (const bool[]){true, false, false}, "clip grad min -1 max 1");
    fails += kiln_gradcheck("Clip", "", 0, 3,
                            (kiln_tensor *[]){kt_make(KILN_F64, 1, KT_DIMS(6),
                                                      KT_VALS(-1.7, -0.4, 0.3, 0.6, 1.5, 2.2)),
                                              NULL,
                                              kt_scalar(KILN_F64, 0.5)},
                            (const bool[]){true, false, false}, "clip grad max 0.5 only");
    fails += kiln_unary_gradcheck("Clip", "min=-0.5;max=1.0", 6, 6, KT_VALS(-1.7, -0.4, 0.3, 0.6, 1.5, 2.2),
                                  "clip grad opset 6 attributes");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Clip", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 131),
                                                kt_scalar(KILN_F32, -0.5),
                                                kt_scalar(KILN_F32, 0.75)},
                               1, "clip random 2x3x17x19 [-0.5, 0.75]");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Clip", "min=-0.5;max=0.7", 6, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -2, 2, 1029)},
                               1, "clip [min=-0.5;max=0.7] odd size");
    fails += kiln_optest_sweep("Clip", "min=-0.5;max=0.7", 6, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -2, 2, 1030)},
                               1, "clip [min=-0.5;max=0.7] 7 elements");
    fails += kiln_optest_sweep("Clip", "", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 9, 31), -2, 2, 1051),
                                                kt_rand(KILN_F32, 0, NULL, -1, -0.5, 1052),
                                                kt_rand(KILN_F32, 0, NULL, 0.5, 1, 1053)},
                               1, "clip min and max inputs");
    fails += kiln_optest_sweep("Clip", "", 13, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 50), -2, 2, 1054),
                                                kt_rand(KILN_F32, 0, NULL, -1, -0.5, 1055)},
                               1, "clip min input only");
    fails += kiln_optest_sweep("Clip", "", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 50), -2, 2, 1056),
                                                NULL,
                                                kt_rand(KILN_F32, 0, NULL, 0.5, 1, 1057)},
                               1, "clip max input only");
    fails += kiln_optest_sweep("Clip", "", 13, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 50), -2, 2, 1058)},
                               1, "clip no bounds");
    fails += kiln_optest_sweep("Clip", "", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 6, 5, 3), -2, 2, 5003),
                                                kt_rand(KILN_F32, 0, NULL, -1, -0.5, 5004),
                                                kt_rand(KILN_F32, 0, NULL, 0.5, 1, 5005)},
                               1, "clip (NHWC) bounds as inputs");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1, .n_params = 2, .bounds_from_inputs = true, .conv_epilogue = true,
    .cuda = "const float v = x < p0 ? p0 : x;\n"
            "    return v > p1 ? p1 : v;",
};

const kiln_op_def kiln_op_clip = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY, .eltwise = &eltwise,
    .name = "Clip", .min_inputs = 1, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .nondiff_inputs = 6, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
