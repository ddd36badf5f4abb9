/*
 * global_max_pool.c — GlobalMaxPool (opsets 11..21): the maximum over all spatial dims.
 * X (N, C, D1..Dk), any k >= 1  ->  Y (N, C, 1, ..., 1) of X's rank. NaN wins, as in
 * numpy.max. Dtypes: f32 and f64 typed; f16 and bf16 through f32 scratch.
 * Parallel over the (n, c) planes with OpenMP.
 * Gradient: kiln.GlobalMaxPoolGrad(dY, X) puts dY on each plane's first maximum (or NaN).
 */
#include "../core/optest.h"
#include "conv_common.h"

#include <math.h>

static kiln_status infer(kiln_op_ctx *c) { return kiln_global_pool_infer(c); }

static size_t workspace(const kiln_op_ctx *c) {
    return kiln_stage_size(c->in[0]) + kiln_stage_size(c->out[0]);
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    char *ws = c->workspace;
    const void *X = kiln_stage_in(x, &ws);     // (N*C, S)
    void *Y = kiln_stage_out(c->out[0], &ws);  // (N*C)
    const int64_t NC = x->dims[0] * x->dims[1], S = NC ? kiln_tensor_numel(x) / NC : 0;
    const bool dbl = x->dtype == KILN_F64;
#pragma omp parallel for schedule(static) if (NC * S > 32768)
    for (int64_t nc = 0; nc < NC; nc++) {
        /* The max is exact, so double holds either dtype's values. */
        double best = -INFINITY;
        for (int64_t i = 0; i < S; i++) {
            double v = dbl ? ((const double *)X)[nc * S + i] : ((const float *)X)[nc * S + i];
            if (v > best || isnan(v)) best = v;
            if (isnan(v)) break;
        }
        if (dbl) ((double *)Y)[nc] = best;
        else ((float *)Y)[nc] = (float)best;
    }
    kiln_stage_finish(c->out[0], Y);
    return KILN_OK;
}

/* dL/dX = kiln.GlobalMaxPoolGrad(dY, X): each plane's dY goes to the element the forward
 * pass picked (the first maximum, or the first NaN), recomputed from X. */
static kiln_status grad(kiln_grad_ctx *g) {
    g->dx[0] = kiln_grad_emit(g, "kiln", "GlobalMaxPoolGrad", 2,
                              (int[]){g->dy[0], KILN_GRAD_IN(g, 0)}, 1, NULL, false, NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

static kiln_status grad_infer(kiln_op_ctx *c) { return kiln_global_pool_grad_infer(c); }

static size_t grad_workspace(const kiln_op_ctx *c) {
    return kiln_stage_size(c->in[0]) + kiln_stage_size(c->in[1]) + kiln_stage_size(c->out[0]);
}

static kiln_status grad_forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[1];
    char *ws = c->workspace;
    const void *dY = kiln_stage_in(c->in[0], &ws);  // (N*C)
    const void *X = kiln_stage_in(x, &ws);          // (N*C, S)
    void *dX = kiln_stage_out(c->out[0], &ws);      // (N*C, S)
    const int64_t NC = x->dims[0] * x->dims[1], S = NC ? kiln_tensor_numel(x) / NC : 0;
    const bool dbl = x->dtype == KILN_F64;
#pragma omp parallel for schedule(static) if (NC * S > 32768)
    for (int64_t nc = 0; nc < NC; nc++) {
        double best = -INFINITY;
        int64_t at = -1;
        for (int64_t i = 0; i < S; i++) {
            double v = dbl ? ((const double *)X)[nc * S + i] : ((const float *)X)[nc * S + i];
            if (at < 0 || v > best || isnan(v)) {
                best = v;
                at = i;
            }
            if (isnan(v)) break;
        }
        for (int64_t i = 0; i < S; i++) {
            const double v = i == at ? (dbl ? ((const double *)dY)[nc] : ((const float *)dY)[nc])
                                     : 0.0;
            if (dbl) ((double *)dX)[nc * S + i] = v;
            else ((float *)dX)[nc * S + i] = (float)v;
        }
    }
    kiln_stage_finish(c->out[0], dX);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* random, for the CUDA sweep: planes shorter and longer than a warp */
    fails += kiln_optest_sweep("GlobalMaxPool", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 9, 11), -1, 1, 1001)}, 1,
                               "globalmaxpool random 2-D planes");
    fails += kiln_optest_sweep("GlobalMaxPool", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 4, 7), -1, 1, 1002)}, 1,
                               "globalmaxpool random 1-D planes");
    /* Expected values computed once with numpy (x.max over the spatial axes). */
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), KT_VALS(8, 7, 6, 7, -8, 6, 8, -5, -6, -8, 6,
                8, 2, 2, 5, -9, 6, 8, -7, 9, 7, -4, 0, 6)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(2, 3, 1), KT_VALS(8, 8, 8, 5, 9, 7)),
        };
        fails += kiln_optest("GlobalMaxPool", "", 1, in, 1, want, 0, 0,
                             "globalmaxpool 1-D spatial");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 5, KT_DIMS(1, 2, 3, 2, 2), KT_VALS(8, -8, 3, -1, -3, 6, 4, -2, 7,
                0, 7, -7, 8, 6, 1, 0, -4, -5, -4, 5, -2, 9, -2, 1)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 5, KT_DIMS(1, 2, 1, 1, 1), KT_VALS(8, 9)),
        };
        fails += kiln_optest("GlobalMaxPool", "", 1, in, 1, want, 0, 0,
                             "globalmaxpool 3-D spatial");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F64, 4, KT_DIMS(1, 2, 2, 3), KT_VALS(0.474, 0.986, -0.94, 0.198, 0.935,
                -0.765, -0.554, 0.1, 0.445, 0.106, 0.095, -0.897)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F64, 4, KT_DIMS(1, 2, 1, 1), KT_VALS(0.986, 0.445)),
        };
        fails += kiln_optest("GlobalMaxPool", "", 1, in, 1, want, 0, 0, "globalmaxpool f64");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_BF16, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(-7, 5, 8, -3, -8, -8, -7, 9)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_BF16, 4, KT_DIMS(1, 2, 1, 1), KT_VALS(8, 9)),
        };
        fails += kiln_optest("GlobalMaxPool", "", 1, in, 1, want, 0, 0, "globalmaxpool bf16");
    }
    {
        /* NaN wins (hand-computed). */
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 2, 3), KT_VALS(1, NAN, 3, -1, -2, -3))};
        kiln_tensor *want[1] = {kt_make(KILN_F32, 3, KT_DIMS(1, 2, 1), KT_VALS(NAN, -1))};
        fails += kiln_optest("GlobalMaxPool", "", 1, in, 1, want, 0, 0, "globalmaxpool NaN");
    }
    /* Gradient rule against finite differences (random inputs: no ties). */
    kiln_tensor *in[1] = {kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 5), -1, 1, 1101)};
    fails += kiln_gradcheck("GlobalMaxPool", "", 0, 1, in, NULL, "globalmaxpool grad 1-D spatial");
    in[0] = kt_rand(KILN_F64, 4, KT_DIMS(2, 2, 3, 4), -1, 1, 1102);
    fails += kiln_gradcheck("GlobalMaxPool", "", 0, 1, in, NULL, "globalmaxpool grad 2-D spatial");
    in[0] = kt_rand(KILN_F64, 5, KT_DIMS(1, 2, 2, 3, 2), -1, 1, 1103);
    fails += kiln_gradcheck("GlobalMaxPool", "", 0, 1, in, NULL, "globalmaxpool grad 3-D spatial");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("GlobalMaxPool", "", 1, in, 1, KILN_ERR_SHAPE,
                               "globalmaxpool rank 2");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_global_max_pool = {
    .precision = KILN_PREC_LOW,
    .name = "GlobalMaxPool", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
    .max_outputs = 1, .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace,
    .test = KILN_OP_TESTS(test), .grad = grad,
};

#ifdef KILN_OPTESTS
/* GlobalMaxPoolGrad, by hand: dY lands on each plane's first maximum (or first NaN). */
static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[2] = {kt_make(KILN_F32, 3, KT_DIMS(1, 3, 1), KT_VALS(5, -1, 2)),
                          kt_make(KILN_F32, 3, KT_DIMS(1, 3, 4),
                                  KT_VALS(1, 7, 3, 7, -2, -1, -3, -1, 0, NAN, 4, NAN))};
    kiln_tensor *want = kt_make(KILN_F32, 3, KT_DIMS(1, 3, 4),
                                KT_VALS(0, 5, 0, 0, 0, -1, 0, 0, 0, 2, 0, 0));
    fails += kiln_optest("GlobalMaxPoolGrad", "", 2, in, 1, &want, 0, 0,
                         "globalmaxpool dX first maximum, first NaN");
    in[0] = kt_make(KILN_BF16, 4, KT_DIMS(1, 1, 1, 1), KT_VALS(0.5));
    in[1] = kt_make(KILN_BF16, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(-4, -3, -8, -5));
    want = kt_make(KILN_BF16, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(0, 0.5, 0, 0));
    fails += kiln_optest("GlobalMaxPoolGrad", "", 2, in, 1, &want, 0, 0, "globalmaxpool dX bf16");
    in[0] = kt_make(KILN_F64, 3, KT_DIMS(1, 3, 1), NULL);
    in[1] = kt_make(KILN_F32, 3, KT_DIMS(1, 3, 4), NULL);
    fails += kiln_optest_fails("GlobalMaxPoolGrad", "", 2, in, 1, KILN_ERR_TYPE,
                               "globalmaxpool dX with dY of another dtype");
    /* random, for the backend sweep (tests/gpu/test_backend_ops.c): planes longer than a
     * warp, NHWC too */
    fails += kiln_optest_sweep("GlobalMaxPoolGrad", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 6, 1, 1), -2, 2, 7121),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 6, 5, 7), -2, 2, 7122)},
                               1, "globalmaxpool dX random 2x6x5x7");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_global_max_pool_grad = {
    .precision = KILN_PREC_FP32,
    .name = "GlobalMaxPoolGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 2,
    .min_outputs = 1, .max_outputs = 1, .infer = grad_infer, .cpu_forward = grad_forward,
    .cpu_workspace = grad_workspace, .test = KILN_OP_TESTS(test_grad),
};
