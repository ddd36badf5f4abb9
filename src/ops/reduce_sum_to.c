/* reduce_sum_to.c — kiln.ReduceSumTo(X, Like): the sum of X over the dimensions along
 * which Like's shape was broadcast to X's, giving Like's shape. The gradient of every
 * broadcasting op ends here. Only Like's shape is read. Float dtypes.
 * Autograd emits it for every operand of a broadcasting op while shapes are still
 * symbolic, so most (a residual Add's two operands) turn out to sum nothing: the output
 * may share X's storage (alias_outputs; the planner takes it when the sizes agree, which
 * for a sum to a broadcast shape means nothing is summed), and then nothing runs. */
#include "../core/optest.h"

#include <stdio.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *like = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE, "X must be a float tensor");
    KILN_OP_CHECK(c, like->ndim <= x->ndim, KILN_ERR_SHAPE, "Like has more dims than X");
    for (int i = 0; i < like->ndim; i++) {
        int64_t a = x->dims[x->ndim - like->ndim + i], b = like->dims[i];
        KILN_OP_CHECK(c, a == b || b == 1, KILN_ERR_SHAPE, "Like dim %d (%lld) does not broadcast to X's %lld", i,
                      (long long)b, (long long)a);
    }
    kiln_tensor_set_shape(c->out[0], x->dtype, like->ndim, like->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    if (y->data == x->data) return KILN_OK; /* the planner's alias: Y is X */
    int64_t ny = kiln_tensor_numel(y), nx = kiln_tensor_numel(x);
    int64_t st[1][KILN_MAX_DIMS];
    kiln_broadcast_strides(y->ndim, y->dims, x->ndim, x->dims, st[0]);
    if (x->dtype == KILN_F32) {
        float *yp = y->data;
        const float *xp = x->data;
        for (int64_t i = 0; i < ny; i++) yp[i] = 0;
        if (ny == nx) {
            for (int64_t i = 0; i < nx; i++) yp[i] = xp[i];
            return KILN_OK;
        }
        int64_t idx[KILN_MAX_DIMS] = {0}, off[1] = {0};
        for (int64_t i = 0; i < nx; i++) {
            yp[off[0]] += xp[i];
            kiln_index_next(x->ndim, x->dims, idx, 1, (const int64_t(*)[KILN_MAX_DIMS])st, off);
        }
        return KILN_OK;
    }
    /* other floats: accumulate in double in the workspace, round once at the end (summing
     * into an f16/bf16 output would round every partial sum) */
    double *acc = c->workspace;
    for (int64_t i = 0; i < ny; i++) acc[i] = 0;
    int64_t idx[KILN_MAX_DIMS] = {0}, off[1] = {0};
    for (int64_t i = 0; i < nx; i++) {
        acc[off[0]] += kiln_get_f64(x, i);
        kiln_index_next(x->ndim, x->dims, idx, 1, (const int64_t(*)[KILN_MAX_DIMS])st, off);
    }
    for (int64_t i = 0; i < ny; i++) kiln_set_f64(y, i, acc[i]);
    return KILN_OK;
}

static size_t workspace(const kiln_op_ctx *c) {
    return c->in[0]->dtype == KILN_F32 ? 0 : sizeof(double) * (size_t)kiln_tensor_numel(c->out[0]);
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* random 4-D dY for the CUDA sweep (which also lays dY out NHWC where the result's
     * bytes are the same in both layouts): a per-channel bias (C,1,1) and (1,C,1,1), an
     * (N,1,H,W) map, a scalar, and (1,C,H,W) (NCHW only) */
    {
        static const struct {
            int n;
            int64_t d[4];
        } likes[] = {{3, {5, 1, 1}}, {4, {1, 5, 1, 1}}, {4, {2, 1, 3, 4}}, {0, {0}}, {4, {1, 5, 3, 4}}};
        for (int i = 0; i < 5; i++) {
            char label[64];
            snprintf(label, sizeof label, "reduce_sum_to random 4-D to like %d", i);
            fails += kiln_optest_sweep("ReduceSumTo", "", 0, 2,
                                       (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 3, 4), -1, 1, 970 + i),
                                                         kt_make(KILN_F32, likes[i].n, likes[i].d, NULL)},
                                       1, label);
        }
    }
    kiln_tensor *in[2] = {kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6)),
                          kt_make(KILN_F32, 1, KT_DIMS(3), NULL)};
    kiln_tensor *want = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(5, 7, 9));
    fails += kiln_optest("ReduceSumTo", "", 2, in, 1, &want, 0, 0, "sum over the leading dim");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 2), KT_VALS(1, 2, 3, 4, 5, 6, 7, 8));
    in[1] = kt_make(KILN_F32, 3, KT_DIMS(2, 1, 2), NULL);
    want = kt_make(KILN_F32, 3, KT_DIMS(2, 1, 2), KT_VALS(4, 6, 12, 14));
    fails += kiln_optest("ReduceSumTo", "", 2, in, 1, &want, 0, 0, "sum over a middle dim kept as 1");
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 4));
    in[1] = kt_make(KILN_F64, 0, NULL, NULL);
    want = kt_make(KILN_F64, 0, NULL, KT_VALS(10));
    fails += kiln_optest("ReduceSumTo", "", 2, in, 1, &want, 0, 0, "sum to a scalar (f64)");
    /* 3000 terms of 1/3 in f16: a running sum kept in f16 stops growing near 512 (its ulp
     * there exceeds the term); accumulating in double and rounding once gives 1000 */
    in[0] = kt_make(KILN_F16, 2, KT_DIMS(3000, 1), NULL);
    for (int64_t i = 0; i < 3000; i++) kiln_set_f64(in[0], i, 1.0 / 3.0);
    in[1] = kt_make(KILN_F16, 1, KT_DIMS(1), NULL);
    want = kt_make(KILN_F16, 1, KT_DIMS(1), KT_VALS(3000 * (double)kiln_f16_to_f32(kiln_f32_to_f16(1.0f / 3.0f))));
    fails += kiln_optest("ReduceSumTo", "", 2, in, 1, &want, 0, 1e-3, "f16 sum of 3000 terms rounds once");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("ReduceSumTo", "", 2, in, 1, KILN_ERR_SHAPE, "shapes that do not broadcast");
    fails += kiln_optest_sweep_tol("ReduceSumTo", "", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(64, 10), -2, 2, 3072),
                                                kt_rand(KILN_F32, 1, KT_DIMS(10), -2, 2, 3073)},
                                   1, 0.0001, 0, "reducesumto mnist fc2 bias");
    fails += kiln_optest_sweep_tol("ReduceSumTo", "", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(64, 128), -2, 2, 3074),
                                                kt_rand(KILN_F32, 1, KT_DIMS(128), -2, 2, 3075)},
                                   1, 0.0001, 0, "reducesumto mnist fc1 bias");
    fails += kiln_optest_sweep_tol("ReduceSumTo", "", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(16384, 40), -2, 2, 3076),
                                                kt_rand(KILN_F32, 1, KT_DIMS(40), -2, 2, 3077)},
                                   1, 0.002, 0, "reducesumto tall columns, partial sums");
    fails += kiln_optest_sweep_tol("ReduceSumTo", "", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 3078),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 5), -2, 2, 3079)},
                                   1, 0.0001, 0, "reducesumto kept, summed, kept");
    fails += kiln_optest_sweep_tol("ReduceSumTo", "", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 3080),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 1, 1), -2, 2, 3081)},
                                   1, 0.0001, 0, "reducesumto per channel");
    fails += kiln_optest_sweep_tol("ReduceSumTo", "", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(6, 7), -2, 2, 3082),
                                                kt_rand(KILN_F32, 2, KT_DIMS(6, 1), -2, 2, 3083)},
                                   1, 0.0001, 0, "reducesumto row sums");
    fails += kiln_optest_sweep_tol("ReduceSumTo", "", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 70), -2, 2, 3084),
                                                kt_rand(KILN_F32, 0, NULL, 0, 1, 3085)},
                                   1, 0.0001, 0, "reducesumto to a scalar");
    fails += kiln_optest_sweep("ReduceSumTo", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(1, 4, 5), -2, 2, 3086),
                                                kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 3087)},
                               1, "reducesumto nothing summed");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_reduce_sum_to = {
    .precision = KILN_PREC_FP32, .prec_flags = KILN_PREC_SHAPE_ANY, .layout = KILN_LAYOUT_SUM_TO,
    .name = "ReduceSumTo", .domain = "kiln", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1,
    .max_outputs = 1, .shape_only_inputs = 2, .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace,
    .test = KILN_OP_TESTS(test), .alias_outputs = 1,
};
