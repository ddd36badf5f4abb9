/*
 * instance_normalization.c — InstanceNormalization over input (N,C,D1..Dn): each (n,c)
 * slice is normalized by its own mean and population variance over D1..Dn,
 *   y = (x - mean) / sqrt(var + epsilon) * scale[c] + B[c]       (epsilon default 1e-5)
 * Opset 6 (unchanged through 21). Float dtypes; scale and B may have another float dtype
 * than the input. Statistics are computed in double, in two passes.
 *
 * Gradient: kiln.InstanceNormGrad(dY, X, scale, B) -> (dX, dScale, dB), recomputing each
 * slice's statistics from X. Per (n,c) slice of S elements, xhat = (x - mean) / std:
 *   dX = scale[c] / std * (dY - sum(dY) / S - xhat * sum(dY * xhat) / S),
 * and dScale[c], dB[c] sum dY * xhat and dY over n and the slice.
 */
#include "../core/optest.h"

#include <math.h>

static kiln_status infer(kiln_op_ctx *c) {
    static const char *const names[3] = {"input", "scale", "B"};
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 2, KILN_ERR_SHAPE, "input must be (N,C,...), got rank %d",
                  x->ndim);
    for (int i = 1; i < 3; i++) {
        const kiln_tensor *p = c->in[i];
        KILN_OP_CHECK(c, p != NULL, KILN_ERR_SHAPE, "input %s is required", names[i]);
        KILN_OP_CHECK(c, kiln_dtype_is_float(p->dtype), KILN_ERR_TYPE,
                      "input %s dtype %s is not supported", names[i], kiln_dtype_name(p->dtype));
        KILN_OP_CHECK(c, p->ndim == 1 && p->dims[0] == x->dims[1], KILN_ERR_SHAPE,
                      "input %s must have shape (C)=(%lld)", names[i], (long long)x->dims[1]);
    }
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0]; // (N,C,D1..Dn)
    const kiln_tensor *scale = c->in[1], *bias = c->in[2]; // (C)
    kiln_tensor *y = c->out[0];
    double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
    int64_t N = x->dims[0], C = x->dims[1], S = 1;
    for (int d = 2; d < x->ndim; d++) S *= x->dims[d];
    bool f32 = x->dtype == KILN_F32;

    #pragma omp parallel for if (N * C * S > (1 << 15)) schedule(static)
    for (int64_t nc = 0; nc < N * C; nc++) {
        int64_t ch = nc % C, base = nc * S;
        const float *xf = f32 ? (const float *)x->data + base : NULL; // (S)
        float *yf = f32 ? (float *)y->data + base : NULL;
        double sum = 0, sq = 0;
        for (int64_t s = 0; s < S; s++) sum += xf ? xf[s] : kiln_get_f64(x, base + s);
        double mean = S > 0 ? sum / (double)S : 0;
        for (int64_t s = 0; s < S; s++) {
            double d = (xf ? xf[s] : kiln_get_f64(x, base + s)) - mean;
            sq += d * d;
        }
        double var = S > 0 ? sq / (double)S : 0;
        double a = kiln_get_f64(scale, ch) / sqrt(var + eps);
        double b = kiln_get_f64(bias, ch) - mean * a;
        if (yf) for (int64_t s = 0; s < S; s++) yf[s] = (float)(xf[s] * a + b);
        else for (int64_t s = 0; s < S; s++) kiln_set_f64(y, base + s, kiln_get_f64(x, base + s) * a + b);
    }
    return KILN_OK;
}

/* ----------------------------------------------------------------- gradient */

static kiln_status grad(kiln_grad_ctx *g) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    int in[4] = {g->dy[0], n->in[0], n->in[1], n->in[2]};
    int outs[3];
    if (kiln_grad_emit(g, "kiln", "InstanceNormGrad", 4, in, 3, outs, true, NULL) < 0)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int k = 0; k < 3; k++)
        if (g->need[k]) g->dx[k] = outs[k];
    return KILN_OK;
}

static kiln_status infer_grad(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *x = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype) && dy->dtype == x->dtype, KILN_ERR_TYPE,
                  "X and dY must be the same float dtype");
    bool same = dy->ndim == x->ndim;
    for (int d = 0; same && d < x->ndim; d++) same = dy->dims[d] == x->dims[d];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dY must have X's shape");
    kiln_op_ctx fwd = *c;
    fwd.in = c->in + 1;
    fwd.n_in = 3;
    kiln_status st = infer(&fwd);
    if (st != KILN_OK) return st;
    for (int k = 1; k < 3; k++)
        kiln_tensor_set_shape(c->out[k], c->in[1 + k]->dtype, 1, &x->dims[1]);
    return KILN_OK;
}

static kiln_status forward_grad(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *x = c->in[1]; // (N,C,D1..Dn)
    const kiln_tensor *scale = c->in[2]; // (C)
    kiln_tensor *dx = c->out[0], *dscale = c->out[1], *dbias = c->out[2];
    double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
    int64_t N = x->dims[0], C = x->dims[1], S = 1;
    for (int d = 2; d < x->ndim; d++) S *= x->dims[d];
    bool f32 = x->dtype == KILN_F32;

    /* by channel, so that the sums over n need no synchronization */
    #pragma omp parallel for if (N * C * S > (1 << 15)) schedule(static)
    for (int64_t ch = 0; ch < C; ch++) {
        double sc = kiln_get_f64(scale, ch), acc_scale = 0, acc_bias = 0;
        for (int64_t n = 0; n < N; n++) {
            int64_t base = (n * C + ch) * S;
            const float *xf = f32 ? (const float *)x->data + base : NULL; // (S)
            const float *dyf = f32 ? (const float *)dy->data + base : NULL;
            float *dxf = f32 ? (float *)dx->data + base : NULL;
            double sum = 0;
            for (int64_t s = 0; s < S; s++) sum += xf ? xf[s] : kiln_get_f64(x, base + s);
            double mean = S > 0 ? sum / (double)S : 0, sq = 0, sum_dy = 0, sum_dy_xc = 0;
            for (int64_t s = 0; s < S; s++) {
                double xc = (xf ? xf[s] : kiln_get_f64(x, base + s)) - mean;
                double g = dyf ? dyf[s] : kiln_get_f64(dy, base + s);
                sq += xc * xc;
                sum_dy += g;
                sum_dy_xc += g * xc;
            }
            double istd = 1.0 / sqrt((S > 0 ? sq / (double)S : 0) + eps);
            double sum_dy_xhat = sum_dy_xc * istd;
            /* dX = a * dY + b * x + k */
            double a = sc * istd, b = S > 0 ? -a * istd * sum_dy_xhat / (double)S : 0;
            double k = S > 0 ? -a * sum_dy / (double)S - b * mean : 0;
            if (dxf) for (int64_t s = 0; s < S; s++) dxf[s] = (float)(a * dyf[s] + b * xf[s] + k);
            else
                for (int64_t s = 0; s < S; s++)
                    kiln_set_f64(dx, base + s, a * kiln_get_f64(dy, base + s) + b * kiln_get_f64(x, base + s) + k);
            acc_scale += sum_dy_xhat;
            acc_bias += sum_dy;
        }
        kiln_set_f64(dscale, ch, acc_scale);
        kiln_set_f64(dbias, ch, acc_bias);
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *in[3], *y;
    /* expected values: numpy float64, (x - mean) / sqrt(var + eps) * s + b per (n,c) */
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 4),
                    KT_VALS(1, 2, 3, 4, 5, 6, 7, 8, -1, 0, 1, 2, 3, 3, 3, 3));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1.5, -0.5));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0.25, 2));
    y = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 4),
                KT_VALS(-1.76245312995339, -0.42081770998446344, 0.9208177099844634,
                        2.26245312995339, 2.6708177099844637, 2.2236059033281546,
                        1.7763940966718454, 1.3291822900155366, -1.76245312995339,
                        -0.42081770998446344, 0.9208177099844634, 2.26245312995339, 2, 2, 2, 2));
    fails += kiln_optest("InstanceNormalization", "", 3, in, 1, &y, 1e-6, 1e-6,
                         "instancenorm (N,C,L) f32, constant slice");

    in[0] = kt_make(KILN_F64, 4, KT_DIMS(1, 1, 2, 3), KT_VALS(0.5, -1, 2, 7, 1, 1));
    in[1] = kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(2));
    in[2] = kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(-1));
    y = kt_make(KILN_F64, 4, KT_DIMS(1, 1, 2, 3),
                KT_VALS(-1.9942499771198228, -3.18734994966361, -0.8011500045760355,
                        3.1758499039032557, -1.5965499862718935, -1.5965499862718935));
    fails += kiln_optest("InstanceNormalization", "epsilon=0.01", 3, in, 1, &y, 1e-7, 1e-7,
                         "instancenorm (N,C,H,W) f64 epsilon");

    in[0] = kt_make(KILN_BF16, 4, KT_DIMS(1, 1, 2, 3), KT_VALS(0.5, -1, 2, 7, 1, 1));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(2));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(-1));
    y = kt_make(KILN_BF16, 4, KT_DIMS(1, 1, 2, 3),
                KT_VALS(-1.9942499771198228, -3.18734994966361, -0.8011500045760355,
                        3.1758499039032557, -1.5965499862718935, -1.5965499862718935));
    fails += kiln_optest("InstanceNormalization", "epsilon=0.01", 3, in, 1, &y, 1e-2, 1e-2,
                         "instancenorm bf16");

    in[0] = kt_make(KILN_F32, 3, KT_DIMS(1, 2, 4), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("InstanceNormalization", "", 3, in, 1, KILN_ERR_SHAPE,
                               "instancenorm scale of the wrong length");

    /* gradients with respect to input, scale and B */
    fails += kiln_gradcheck("InstanceNormalization", "", 0, 3,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -2, 2, 1),
                                              kt_rand(KILN_F64, 1, KT_DIMS(3), -1, 1, 2),
                                              kt_rand(KILN_F64, 1, KT_DIMS(3), -1, 1, 3)},
                            NULL, "instancenorm grad (N,C,L)");
    fails += kiln_gradcheck("InstanceNormalization", "epsilon=0.05", 6, 3,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 4, KT_DIMS(2, 2, 2, 3), -2, 2, 4),
                                              kt_rand(KILN_F64, 1, KT_DIMS(2), -1, 1, 5),
                                              kt_rand(KILN_F64, 1, KT_DIMS(2), -1, 1, 6)},
                            NULL, "instancenorm grad (N,C,H,W) epsilon");
    /* random, for the backend sweep (tests/gpu/test_backend_ops.c; its gradient graph sweeps
     * kiln.InstanceNormGrad): planes longer than a block, rank 3 */
    fails += kiln_optest_sweep("InstanceNormalization", "epsilon=0.001", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 5, 17, 19), -2, 3, 7341),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), 0.5, 1.5, 7342),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), -1, 1, 7343)},
                               1, "instancenorm random 3x5x17x19");
    fails += kiln_optest_sweep("InstanceNormalization", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 6, 40), -2, 2, 7344),
                                                kt_rand(KILN_F32, 1, KT_DIMS(6), 0.5, 1.5, 7345),
                                                kt_rand(KILN_F32, 1, KT_DIMS(6), -1, 1, 7346)},
                               1, "instancenorm random 2x6x40");
    return fails;
}

static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[4], *out[3];
    /* (2,1,3), eps 2, scale 2: slice 0 x = (-1,-1,2): mean 0, var 2 -> 1/std 0.5,
     * xhat = (-0.5,-0.5,1), dY = (1,0,2): dX = dY - 1 - 0.5 xhat = (0.25,-0.75,0.5);
     * slice 1 x constant (xhat 0), dY = (1,2,3): dX = 2 / sqrt(2) * (dY - 2).
     * dScale = 1.5 + 0, dB = 3 + 6 over both slices. */
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 1, 3), KT_VALS(1, 0, 2, 1, 2, 3));
    in[1] = kt_make(KILN_F32, 3, KT_DIMS(2, 1, 3), KT_VALS(-1, -1, 2, 1, 1, 1));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(2));
    in[3] = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(-4));
    out[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 1, 3),
                     KT_VALS(0.25, -0.75, 0.5, -1.4142135623730951, 0, 1.4142135623730951));
    out[1] = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(1.5));
    out[2] = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(9));
    fails += kiln_optest("InstanceNormGrad", "epsilon=2.0", 4, in, 3, out, 1e-6, 1e-6,
                         "instancenorm grad by hand, sums over n");
    /* the same slices as two channels of one sample, scale (2,-1), in f64 */
    in[0] = kt_make(KILN_F64, 3, KT_DIMS(1, 2, 3), KT_VALS(1, 0, 2, 1, 2, 3));
    in[1] = kt_make(KILN_F64, 3, KT_DIMS(1, 2, 3), KT_VALS(-1, -1, 2, 1, 1, 1));
    in[2] = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(2, -1));
    in[3] = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(0, 0));
    out[0] = kt_make(KILN_F64, 3, KT_DIMS(1, 2, 3),
                     KT_VALS(0.25, -0.75, 0.5, 0.7071067811865476, 0, -0.7071067811865476));
    out[1] = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(1.5, 0));
    out[2] = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(3, 6));
    fails += kiln_optest("InstanceNormGrad", "epsilon=2.0", 4, in, 3, out, 1e-14, 1e-14,
                         "instancenorm grad by hand, per channel");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_instance_normalization = {
    .precision = KILN_PREC_FP32,
    .name = "InstanceNormalization", .min_inputs = 3, .max_inputs = 3,
    .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};

const kiln_op_def kiln_op_instance_norm_grad = {
    .precision = KILN_PREC_FP32,
    .name = "InstanceNormGrad", .domain = "kiln", .min_inputs = 4, .max_inputs = 4,
    .min_outputs = 3, .max_outputs = 3,
    .infer = infer_grad, .cpu_forward = forward_grad, .test = KILN_OP_TESTS(test_grad),
};
