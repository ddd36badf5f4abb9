/*
 * instance_normalization.c — InstanceNormalization over input (N,C,D1..Dn): each (n,c)
 * slice is normalized by its own mean and population variance over D1..Dn,
 *   y = (x - mean) / sqrt(var + epsilon) * scale[c] + B[c]       (epsilon default 1e-5)
 * Opset 6 (unchanged through 21). Float dtypes; scale and B may have another float dtype
 * than the input. Statistics are computed in double, in two passes.
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
    return fails;
}

const kiln_op_def kiln_op_instance_normalization = {
    .name = "InstanceNormalization", .min_inputs = 3, .max_inputs = 3,
    .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = test,
};
