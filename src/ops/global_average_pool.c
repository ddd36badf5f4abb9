/*
 * global_average_pool.c — GlobalAveragePool (opsets 11..21): the mean over all spatial
 * dims. X (N, C, D1..Dk), any k >= 1  ->  Y (N, C, 1, ..., 1) of X's rank.
 * Dtypes: f32 and f64 typed; f16 and bf16 through f32 scratch. Sums in double.
 * Parallel over the (n, c) planes with OpenMP.
 * Gradient: kiln.GlobalAveragePoolGrad(dY, X) = dY / (D1*...*Dk) over each plane.
 */
#include "../core/optest.h"
#include "conv_common.h"

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
        double sum = 0;
        if (dbl)
            for (int64_t i = 0; i < S; i++) sum += ((const double *)X)[nc * S + i];
        else
            for (int64_t i = 0; i < S; i++) sum += ((const float *)X)[nc * S + i];
        if (dbl) ((double *)Y)[nc] = sum / (double)S;
        else ((float *)Y)[nc] = (float)(sum / (double)S);
    }
    kiln_stage_finish(c->out[0], Y);
    return KILN_OK;
}

/* dL/dX = kiln.GlobalAveragePoolGrad(dY, X) = dY / S broadcast over each (n, c) plane of
 * S elements. Only X's shape is read. */
static kiln_status grad(kiln_grad_ctx *g) {
    g->dx[0] = kiln_grad_emit(g, "kiln", "GlobalAveragePoolGrad", 2,
                              (int[]){g->dy[0], KILN_GRAD_IN(g, 0)}, 1, NULL, false, NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

static kiln_status grad_infer(kiln_op_ctx *c) { return kiln_global_pool_grad_infer(c); }

static kiln_status grad_forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[1], *dy = c->in[0];
    kiln_tensor *dx = c->out[0];
    const int64_t NC = x->dims[0] * x->dims[1], S = NC ? kiln_tensor_numel(x) / NC : 0;
#pragma omp parallel for schedule(static) if (NC * S > 32768)
    for (int64_t nc = 0; nc < NC; nc++) {
        const double share = kiln_get_f64(dy, nc) / (double)S;
        if (dx->dtype == KILN_F32)
            for (int64_t i = 0; i < S; i++) ((float *)dx->data)[nc * S + i] = (float)share;
        else if (dx->dtype == KILN_F64)
            for (int64_t i = 0; i < S; i++) ((double *)dx->data)[nc * S + i] = share;
        else
            for (int64_t i = 0; i < S; i++) kiln_set_f64(dx, nc * S + i, share);
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* Expected values computed once with numpy (x.mean over the spatial axes). */
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), KT_VALS(8, 7, 6, 7, -8, 6, 8, -5, -6, -8, 6,
                8, 2, 2, 5, -9, 6, 8, -7, 9, 7, -4, 0, 6)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(2, 3, 1), KT_VALS(7, 0.25, 0, 0, 4, 2.25)),
        };
        fails += kiln_optest("GlobalAveragePool", "", 1, in, 1, want, 1e-6, 1e-6,
                             "globalaveragepool 1-D spatial");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F32, 5, KT_DIMS(1, 2, 3, 2, 2), KT_VALS(8, -8, 3, -1, -3, 6, 4, -2, 7,
                0, 7, -7, 8, 6, 1, 0, -4, -5, -4, 5, -2, 9, -2, 1)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 5, KT_DIMS(1, 2, 1, 1, 1), KT_VALS(1.16666667, 1.08333333)),
        };
        fails += kiln_optest("GlobalAveragePool", "", 1, in, 1, want, 1e-6, 1e-6,
                             "globalaveragepool 3-D spatial");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F64, 4, KT_DIMS(1, 2, 2, 3), KT_VALS(0.474, 0.986, -0.94, 0.198, 0.935,
                -0.765, -0.554, 0.1, 0.445, 0.106, 0.095, -0.897)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F64, 4, KT_DIMS(1, 2, 1, 1), KT_VALS(0.148, -0.1175)),
        };
        fails += kiln_optest("GlobalAveragePool", "", 1, in, 1, want, 1e-12, 0,
                             "globalaveragepool f64");
    }
    {
        kiln_tensor *in[1] = {
            kt_make(KILN_F16, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(-7, 5, 8, -3, -8, -8, -7, 9)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F16, 4, KT_DIMS(1, 2, 1, 1), KT_VALS(0.75, -3.5)),
        };
        fails += kiln_optest("GlobalAveragePool", "", 1, in, 1, want, 0, 0,
                             "globalaveragepool f16");
    }
    /* Gradient rule against finite differences, 1-D to 3-D spatial. */
    kiln_tensor *in[1];
    in[0] = kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 5), -1, 1, 1001);
    fails += kiln_gradcheck("GlobalAveragePool", "", 0, 1, in, NULL,
                            "globalaveragepool grad 1-D spatial");
    in[0] = kt_rand(KILN_F64, 4, KT_DIMS(2, 2, 3, 4), -1, 1, 1002);
    fails += kiln_gradcheck("GlobalAveragePool", "", 0, 1, in, NULL,
                            "globalaveragepool grad 2-D spatial");
    in[0] = kt_rand(KILN_F64, 5, KT_DIMS(1, 2, 2, 3, 2), -1, 1, 1003);
    fails += kiln_gradcheck("GlobalAveragePool", "", 0, 1, in, NULL,
                            "globalaveragepool grad 3-D spatial");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("GlobalAveragePool", "", 1, in, 1, KILN_ERR_SHAPE,
                               "globalaveragepool rank 2");
    in[0] = kt_make(KILN_I32, 3, KT_DIMS(1, 2, 3), NULL);
    fails += kiln_optest_fails("GlobalAveragePool", "", 1, in, 1, KILN_ERR_TYPE,
                               "globalaveragepool int32");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("GlobalAveragePool", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 7, 13, 11), -2, 2, 261)},
                               1, "global avgpool random 2x7x13x11");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("GlobalAveragePool", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 7, 9), -2, 2, 1276)},
                               1, "globalaveragepool 7x9");
    fails += kiln_optest_sweep("GlobalAveragePool", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 1, 1), -2, 2, 1277)},
                               1, "globalaveragepool 1x1");
    fails += kiln_optest_sweep("GlobalAveragePool", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 4, 33), -2, 2, 1278)},
                               1, "globalaveragepool 1-D");
    fails += kiln_optest_sweep("GlobalAveragePool", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 64, 64), -2, 2, 1279)},
                               1, "globalaveragepool 64x64");
    fails += kiln_optest_sweep("GlobalAveragePool", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 70, 5, 5), -2, 2, 5041)},
                               1, "globalaveragepool (NHWC) 70 channels");
    fails += kiln_optest_sweep("GlobalAveragePool", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 64, 64), -2, 2, 5042)},
                               1, "globalaveragepool (NHWC) 64x64");
    fails += kiln_optest_sweep("GlobalAveragePool", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 33, 1, 1), -2, 2, 5043)},
                               1, "globalaveragepool (NHWC) 1x1");
    /* channels in whole 16-byte groups (the CUDA NHWC vector kernel): groups narrower than a
     * warp, a row past 256 groups (two blocks across), and rows split across blocks (few
     * images, many rows; at batch 1 too) */
    fails += kiln_optest_sweep("GlobalAveragePool", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 48, 23, 19), -2, 2, 5044)},
                               1, "globalaveragepool (NHWC) 48 channels 23x19");
    fails += kiln_optest_sweep("GlobalAveragePool", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 2056, 3, 3), -2, 2, 5045)},
                               1, "globalaveragepool (NHWC) 2056 channels");
    fails += kiln_optest_sweep("GlobalAveragePool", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 150, 131), -2, 2, 5046)},
                               1, "globalaveragepool (NHWC) 8 channels 150x131");
    fails += kiln_optest_sweep("GlobalAveragePool", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(5, 144, 56, 56), -1, 1, 5047)},
                               1, "globalaveragepool (NHWC) 144 channels 56x56");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_global_average_pool = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_GAP,
    .name = "GlobalAveragePool", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
    .max_outputs = 1, .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace,
    .test = KILN_OP_TESTS(test), .grad = grad,
};

#ifdef KILN_OPTESTS
/* GlobalAveragePoolGrad, by hand: each plane gets its dY divided by the plane's size. */
static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[2] = {kt_make(KILN_F32, 4, KT_DIMS(1, 2, 1, 1), KT_VALS(4, -2)),
                          kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), NULL)};
    kiln_tensor *want = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2),
                                KT_VALS(1, 1, 1, 1, -0.5, -0.5, -0.5, -0.5));
    fails += kiln_optest("GlobalAveragePoolGrad", "", 2, in, 1, &want, 0, 0,
                         "globalaveragepool dX");
    in[0] = kt_make(KILN_F16, 3, KT_DIMS(2, 1, 1), KT_VALS(3, 1.5));
    in[1] = kt_make(KILN_F16, 3, KT_DIMS(2, 1, 3), NULL);
    want = kt_make(KILN_F16, 3, KT_DIMS(2, 1, 3), KT_VALS(1, 1, 1, 0.5, 0.5, 0.5));
    fails += kiln_optest("GlobalAveragePoolGrad", "", 2, in, 1, &want, 0, 0,
                         "globalaveragepool dX f16");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 1, 2), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), NULL);
    fails += kiln_optest_fails("GlobalAveragePoolGrad", "", 2, in, 1, KILN_ERR_SHAPE,
                               "globalaveragepool dX with dY of the wrong shape");
    /* random, for the backend sweep (tests/gpu/test_backend_ops.c; NHWC dX too) */
    fails += kiln_optest_sweep("GlobalAveragePoolGrad", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 5, 1, 1), -2, 2, 7111),
                                                kt_rand(KILN_F32, 4, KT_DIMS(3, 5, 7, 9), -2, 2, 7112)},
                               1, "globalaveragepool dX random 3x5x7x9");
    /* channels in whole 16-byte groups (the CUDA NHWC vector kernel) */
    fails += kiln_optest_sweep("GlobalAveragePoolGrad", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 24, 1, 1), -2, 2, 7113),
                                                kt_rand(KILN_F32, 4, KT_DIMS(3, 24, 5, 6), -2, 2, 7114)},
                               1, "globalaveragepool dX random 3x24x5x6");
    return fails;
}
#endif /* KILN_OPTESTS */

/* Low under fp16/bf16: dY / (H*W) spread over the plane, one rounding (no sum). */
const kiln_op_def kiln_op_global_average_pool_grad = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_POOL_GRAD,
    .name = "GlobalAveragePoolGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 2,
    .min_outputs = 1, .max_outputs = 1, .shape_only_inputs = 1u << 1, .infer = grad_infer,
    .cpu_forward = grad_forward, .test = KILN_OP_TESTS(test_grad),
};
