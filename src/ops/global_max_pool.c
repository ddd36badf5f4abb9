/*
 * global_max_pool.c — GlobalMaxPool (opsets 11..21): the maximum over all spatial dims.
 * X (N, C, D1..Dk), any k >= 1  ->  Y (N, C, 1, ..., 1) of X's rank. NaN wins, as in
 * numpy.max. Dtypes: f32 and f64 typed; f16 and bf16 through f32 scratch.
 * Parallel over the (n, c) planes with OpenMP.
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

static int test(void) {
    int fails = 0;
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
    kiln_tensor *in[1] = {kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL)};
    fails += kiln_optest_fails("GlobalMaxPool", "", 1, in, 1, KILN_ERR_SHAPE,
                               "globalmaxpool rank 2");
    return fails;
}

const kiln_op_def kiln_op_global_max_pool = {
    .name = "GlobalMaxPool", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
    .max_outputs = 1, .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace,
    .test = test,
};
