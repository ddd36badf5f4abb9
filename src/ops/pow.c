/*
 * pow.c — Pow: Z = X ^ Y with numpy (multidirectional) broadcasting, opsets 7..15.
 * X (base) and Y (exponent) may have different dtypes (opset 12+; accepted at every
 * opset): floats or integers each. Z has X's dtype.
 *   - A float on either side: computed as pow() in double, then rounded to a float Z, or
 *     for an integer Z truncated toward zero (saturated; NaN gives 0): int 2 ^ 0.5 = 1.
 *   - Both integers: exact repeated squaring, wrapping modulo 2^bits like Mul. A negative
 *     exponent (numpy raises) is defined as the truncated real result: 1 for base 1,
 *     ±1 for base -1, 0 otherwise (including base 0).
 * Gradient (float inputs), through kiln.PowGrad(X, Y, dZ) — one pass instead of the
 * seven ONNX nodes and two constants the expression needs — then summed back:
 *   dX = dZ * Y * X^(Y-1), taken as 0 where Y = 0 (also at X = 0);
 *   dY = dZ * X^Y * log(X), valid for X > 0; taken as 0 where X = 0 and Y >= 0 (the
 *        limit from above), NaN for negative X, as in PyTorch.
 * kiln.PowGrad's attribute wrt (0: X, 1: Y) picks the output; its result has dZ's shape
 * and dtype. Its inputs may have any float or integer dtypes, like Pow's.
 */
#include "../core/optest.h"
#include "binary.h"

#include <math.h>
#include <string.h>

KILN_ROW_F32(pow_f32, float, (float)pow(a, b))
static double pow_f64(double a, double b) { return pow(a, b); }
static int64_t pow_i64(int64_t a, int64_t b, bool uns) {
    if (b < 0) {
        if (a == 1) return 1;
        if (a == -1 && !uns) return (b & 1) ? -1 : 1;
        return 0;
    }
    uint64_t r = 1, x = (uint64_t)a, e = (uint64_t)b; /* unsigned: wraps without UB */
    while (e) {
        if (e & 1) r *= x;
        x *= x;
        e >>= 1;
    }
    return (int64_t)r;
}
static const kiln_binary_kernels kernels = {pow_f32, pow_f64, pow_i64};

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_binary_infer(c, KILN_BIN_FLOAT | KILN_BIN_INT | KILN_BIN_MIXED);
}
static kiln_status forward(kiln_op_ctx *c) { return kiln_binary_forward(c, &kernels); }

static kiln_status grad(kiln_grad_ctx *g) {
    kiln_status st = kiln_binary_grad_check(g);
    int in[3] = {KILN_GRAD_IN(g, 0), KILN_GRAD_IN(g, 1), g->dy[0]};
    for (int k = 0; k < 2 && !st; k++)
        if (g->need[k])
            st = kiln_binary_grad_input(g, k, kiln_grad_emit(g, "kiln", "PowGrad", 3, in, 1, NULL, false,
                                                             k ? "wrt=1" : "wrt=0"));
    return st;
}

static kiln_status infer_grad(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *e = c->in[1], *dz = c->in[2];
    const int64_t wrt = kiln_attr_int(c->node, "wrt", 0);
    KILN_OP_CHECK(c, wrt == 0 || wrt == 1, KILN_ERR_INVALID_ARGUMENT,
                  "attribute 'wrt' = %lld is neither 0 (X) nor 1 (Y)", (long long)wrt);
    KILN_OP_CHECK(c, kiln_dtype_is_float(dz->dtype), KILN_ERR_TYPE, "dZ must be a float tensor");
    for (int i = 0; i < 2; i++) {
        const kiln_tensor *t = c->in[i];
        KILN_OP_CHECK(c, kiln_dtype_is_float(t->dtype) || kiln_dtype_is_int(t->dtype), KILN_ERR_TYPE,
                      "input %d dtype %s is not supported", i, kiln_dtype_name(t->dtype));
    }
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    bool ok = kiln_broadcast_shape(x->ndim, x->dims, e->ndim, e->dims, &nd, dims) && nd == dz->ndim &&
              memcmp(dims, dz->dims, sizeof(int64_t) * (size_t)nd) == 0;
    KILN_OP_CHECK(c, ok, KILN_ERR_SHAPE, "X and Y must broadcast to dZ's shape");
    kiln_tensor_set_shape(c->out[0], dz->dtype, dz->ndim, dz->dims);
    return KILN_OK;
}

static inline double dpow_dx(double x, double e, double dz) { return e == 0 ? 0 : dz * e * pow(x, e - 1); }
static inline double dpow_de(double x, double e, double dz) {
    return (x == 0 && e >= 0) ? 0 : dz * pow(x, e) * log(x);
}

typedef struct grad_job {
    const kiln_tensor *x, *e, *dz;
    kiln_tensor *out;
    bool wrt_e;
} grad_job;

static void grad_chunk(const kiln_bcast_chunk *ch, void *arg) {
    const grad_job *j = arg;
    if (j->x->dtype == KILN_F32 && j->e->dtype == KILN_F32 && j->dz->dtype == KILN_F32) {
        const float *xp = (const float *)j->x->data + ch->off[0];
        const float *ep = (const float *)j->e->data + ch->off[1];
        const float *dp = (const float *)j->dz->data + ch->off[2];
        float *op = (float *)j->out->data + ch->y;
        for (int64_t i = 0; i < ch->n; i++) {
            const double x = xp[i * ch->inc[0]], e = ep[i * ch->inc[1]], dz = dp[i * ch->inc[2]];
            op[i] = (float)(j->wrt_e ? dpow_de(x, e, dz) : dpow_dx(x, e, dz));
        }
        return;
    }
    for (int64_t i = 0; i < ch->n; i++) {
        const double x = kiln_get_f64(j->x, ch->off[0] + i * ch->inc[0]);
        const double e = kiln_get_f64(j->e, ch->off[1] + i * ch->inc[1]);
        const double dz = kiln_get_f64(j->dz, ch->off[2] + i * ch->inc[2]);
        kiln_set_f64(j->out, ch->y + i, j->wrt_e ? dpow_de(x, e, dz) : dpow_dx(x, e, dz));
    }
}

static kiln_status forward_grad(kiln_op_ctx *c) {
    grad_job j = {c->in[0], c->in[1], c->in[2], c->out[0], kiln_attr_int(c->node, "wrt", 0) == 1};
    kiln_bcast p;
    kiln_bcast_init(&p, j.out->ndim, j.out->dims, 3, (const kiln_tensor *const *)c->in);
    kiln_bcast_run(&p, grad_chunk, &j);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test_grad(void) {
    int fails = 0;
    /* X = (2, 0, 4, 3), Y = (3, 2, 0.5, 0), dZ = (1, 2, 3, 4):
     * dX = dZ*Y*X^(Y-1) = (1*3*4, 2*2*0, 3*0.5/2, 0) = (12, 0, 0.75, 0)
     * dY = dZ*X^Y*ln X  = (8 ln 2, 0 (X = 0, Y >= 0), 3*2*ln 4, 4*1*ln 3) */
    kiln_tensor *in[3] = {kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(2, 0, 4, 3)),
                          kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(3, 2, 0.5, 0)),
                          kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 2, 3, 4))};
    kiln_tensor *want = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(12, 0, 0.75, 0));
    fails += kiln_optest("PowGrad", "wrt=0", 3, in, 1, &want, 0, 1e-7, "powgrad f32 wrt X");
    in[0] = kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(2, 0, 4, 3));
    in[1] = kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(3, 2, 0.5, 0));
    in[2] = kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(1, 2, 3, 4));
    want = kt_make(KILN_F64, 1, KT_DIMS(4),
                   KT_VALS(5.545177444479562, 0, 8.317766166719343, 4.394449154672439));
    fails += kiln_optest("PowGrad", "wrt=1", 3, in, 1, &want, 0, 1e-15, "powgrad f64 wrt Y");
    /* broadcast (2,1) ^ (2) with an integer exponent: dX = dZ * Y * X^(Y-1) */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(2, -3));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 3));
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 1, 1, 0.5));
    want = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(4, 12, -6, 13.5));
    fails += kiln_optest("PowGrad", "wrt=0", 3, in, 1, &want, 0, 0, "powgrad f32 ^ i64 broadcast");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("PowGrad", "wrt=0", 3, in, 1, KILN_ERR_SHAPE, "powgrad dZ shape mismatch");
    return fails;
}

static int check(const char *label, kiln_tensor *a, kiln_tensor *b, kiln_tensor *want,
                 double rtol) {
    kiln_tensor *in[2] = {a, b};
    return kiln_optest("Pow", "", 2, in, 1, &want, 0, rtol, label);
}

/* 3^39 = 4052555153018976267 is above 2^53: only exact integer powers get it right. */
static int test_i64_exact(void) {
    kiln_tensor *w = kt_make(KILN_I64, 1, KT_DIMS(2), NULL);
    if (w) {
        const int64_t wv[2] = {INT64_C(4052555153018976267), INT64_C(-4052555153018976267)};
        memcpy(w->data, wv, sizeof wv);
    }
    return check("pow i64 3^39 exact", kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, -3)),
                 kt_scalar(KILN_I64, 39), w, 0);
}

static int test(void) {
    int fails = 0;
    fails += check("pow f32 (2,3)^(3)",
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 9, -2)),
                   kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(2, 0.5, -1)),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 1.4142135623730951,
                                                               1.0 / 3, 16, 3, -0.5)),
                   1e-6);
    fails += check("pow f32 (3)^()", kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 3)),
                   kt_scalar(KILN_F32, 2), kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 4, 9)),
                   0);
    fails += check("pow f32 ^ i32", kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 3)),
                   kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(4, 5, -2)),
                   kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 32, 1.0 / 9)), 1e-6);
    fails += check("pow f16 ^ u64", kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(1.5, -2)),
                   kt_make(KILN_U64, 1, KT_DIMS(2), KT_VALS(2, 3)),
                   kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(2.25, -8)), 0);
    fails += check("pow i32 ^ f32 truncates",
                   kt_make(KILN_I32, 1, KT_DIMS(4), KT_VALS(1, 2, 3, 2)),
                   kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(4, 5, 6, 0.5)),
                   kt_make(KILN_I32, 1, KT_DIMS(4), KT_VALS(1, 32, 729, 1)), 0);
    fails += check("pow i32 (2,1)^(3) negative exponents",
                   kt_make(KILN_I32, 2, KT_DIMS(2, 1), KT_VALS(-1, 2)),
                   kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(-3, -2, 0)),
                   kt_make(KILN_I32, 2, KT_DIMS(2, 3), KT_VALS(-1, 1, 1, 0, 0, 1)), 0);
    /* 2^40 wraps to 0 in i32; 3^21 = 10460353203 = 2 * 2^32 + 1870418611 */
    fails += check("pow i32 wraps", kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(2, 3)),
                   kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(40, 21)),
                   kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, 1870418611)), 0);
    fails += test_i64_exact();

    kiln_tensor *in[2] = {kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL),
                          kt_make(KILN_I64, 1, KT_DIMS(2), NULL)};
    fails += kiln_optest_fails("Pow", "", 2, in, 1, KILN_ERR_SHAPE, "pow (2,3)^(2) rejected");
    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Pow", "", 2, in, 1, KILN_ERR_TYPE, "pow bool base rejected");

    /* positive bases (the exponent's gradient needs log X) */
    fails += kiln_gradcheck("Pow", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), 0.5, 2, 1),
                            kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -2, 2, 2)}, NULL, "pow grad (2,3)^(2,3)");
    fails += kiln_gradcheck("Pow", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 1), 0.5, 2, 3),
                            kt_rand(KILN_F64, 3, KT_DIMS(2, 1, 4), -2, 2, 4)}, NULL, "pow grad (3,1)^(2,1,4)");
    fails += kiln_gradcheck("Pow", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), 0.5, 2, 5),
                            kt_scalar(KILN_F64, 2.5)}, NULL, "pow grad (2,3)^()");
    fails += kiln_gradcheck("Pow", "", 0, 2, (kiln_tensor *[]){kt_scalar(KILN_F64, 1.5),
                            kt_rand(KILN_F64, 1, KT_DIMS(5), -2, 2, 6)}, NULL, "pow grad ()^(5)");
    /* an integer exponent: the base alone, either sign (away from 0, where X^-1 blows up) */
    fails += kiln_gradcheck("Pow", "", 0, 2, (kiln_tensor *[]){kiln_binary_rand_signed(2, KT_DIMS(2, 3), 0.5, 2, 7),
                            kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 3, -1))}, NULL,
                            "pow grad (2,3)^i64(3) w.r.t. X");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Pow", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), 0.5, 2, 147),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 19), -2, 2, 157)},
                               1, "pow random (2,3,17,19) by (3,1,19)");
    fails += kiln_optest_sweep("Pow", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 7, 9), 0.5, 2, 167),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 5, 1, 1), -2, 2, 177)},
                               1, "pow random (2,5,7,9) by a channel vector");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Pow", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), 0.5, 2, 1131),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1132)},
                               1, "pow same shape");
    fails += kiln_optest_sweep("Pow", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(1001), 0.5, 2, 1133),
                                                kt_rand(KILN_F32, 1, KT_DIMS(1001), -2, 2, 1134)},
                               1, "pow same shape odd");
    fails += kiln_optest_sweep("Pow", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), 0.5, 2, 1135),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), -2, 2, 1136)},
                               1, "pow per channel");
    fails += kiln_optest_sweep("Pow", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), 0.5, 2, 1137),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1138)},
                               1, "pow per channel swapped");
    fails += kiln_optest_sweep("Pow", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), 0.5, 2, 1139),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), -2, 2, 1140)},
                               1, "pow row vector");
    fails += kiln_optest_sweep("Pow", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), 0.5, 2, 1141),
                                                kt_rand(KILN_F32, 2, KT_DIMS(4, 1), -2, 2, 1142)},
                               1, "pow column vector");
    fails += kiln_optest_sweep("Pow", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 7), 0.5, 2, 1143),
                                                kt_rand(KILN_F32, 0, NULL, -2, 2, 1144)},
                               1, "pow scalar");
    fails += kiln_optest_sweep("Pow", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 1, 4), 0.5, 2, 1145),
                                                kt_rand(KILN_F32, 2, KT_DIMS(3, 1), -2, 2, 1146)},
                               1, "pow general");
    fails += kiln_optest_sweep("Pow", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 5, KT_DIMS(2, 1, 3, 1, 5), 0.5, 2, 1147),
                                                kt_rand(KILN_F32, 5, KT_DIMS(1, 4, 3, 6, 1), -2, 2, 1148)},
                               1, "pow general 5-D");
    fails += kiln_optest_sweep("Pow", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 3, 3), 0.5, 2, 5025),
                                                kt_rand(KILN_F32, 3, KT_DIMS(4, 1, 1), -2, 2, 5026)},
                               1, "pow (NHWC) per channel");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_pow_grad = {
    .precision = KILN_PREC_FP32, .layout = KILN_LAYOUT_BINARY, /* follows its forward into NHWC */
    .name = "PowGrad", .domain = "kiln", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1,
    .max_outputs = 1, .infer = infer_grad, .cpu_forward = forward_grad, .test = KILN_OP_TESTS(test_grad),
};

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 2,
    .cuda = "return powf(a, b);",
};

const kiln_op_def kiln_op_pow = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_BINARY, .eltwise = &eltwise,
    .name = "Pow", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};
