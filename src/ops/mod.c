/*
 * mod.c — Mod: C = A mod B with numpy (multidirectional) broadcasting, opsets 10 and 13.
 * A and B have one dtype: any float or integer dtype. Attribute fmod (0 or 1, default 0):
 *   - fmod = 1: C's sign is A's (C's fmod, truncated quotient): fmod(-7, 3) = -1.
 *   - fmod = 0: C's sign is B's (Python's and numpy's %, floored quotient): -7 mod 3 = 2.
 *     ONNX asks fmod = 1 for floats; kiln takes 0 too, with numpy's float semantics.
 *   - Integers: B = 0 is undefined in ONNX and traps in C; kiln defines A mod 0 as 0.
 *     Unsigned dtypes: both modes agree.
 *   - Floats: A mod 0 is NaN, as C's fmod.
 * Gradient (floats): C = A - B * q with q = trunc(A / B) (fmod = 1) or floor(A / B)
 * (fmod = 0), piecewise constant, so dA = dY and dB = -dY * q = dY * (C - A) / B, each
 * summed back to its input's shape.
 * Properties: fp32 under the fp16/bf16 pass (the result is a small difference of large
 * values: A's rounding to f16 would become C's error), broadcasting NHWC like Add; not in
 * kiln.FusedElementwise programs (no eltwise form).
 */
#include "../core/optest.h"
#include "binary.h"

#include <math.h>

/* fmod = 1 */
KILN_ROW_F32(fmod_f32, float, fmodf(a, b))
static double fmod_f64(double a, double b) { return fmod(a, b); }
static int64_t fmod_i64(int64_t a, int64_t b, bool uns) {
    if (b == 0) return 0;
    if (uns) return (int64_t)((uint64_t)a % (uint64_t)b);
    if (b == -1) return 0; /* INT64_MIN % -1 would trap */
    return a % b;          /* C99: the sign of a */
}
static const kiln_binary_kernels fmod_kernels = {fmod_f32, fmod_f64, fmod_i64};

/* fmod = 0: a remainder with b's sign */
static inline float floor_mod_f32(float a, float b) {
    const float r = fmodf(a, b);
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
KILN_ROW_F32(mod_f32, float, floor_mod_f32(a, b))
static double mod_f64(double a, double b) {
    const double r = fmod(a, b);
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
static int64_t mod_i64(int64_t a, int64_t b, bool uns) {
    if (b == 0) return 0;
    if (uns) return (int64_t)((uint64_t)a % (uint64_t)b);
    if (b == -1) return 0;
    const int64_t r = a % b;
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
static const kiln_binary_kernels mod_kernels = {mod_f32, mod_f64, mod_i64};

static kiln_status infer(kiln_op_ctx *c) {
    const int64_t f = kiln_attr_int(c->node, "fmod", 0);
    KILN_OP_CHECK(c, f == 0 || f == 1, KILN_ERR_INVALID_ARGUMENT, "attribute fmod = %lld must be 0 or 1",
                  (long long)f);
    return kiln_binary_infer(c, KILN_BIN_FLOAT | KILN_BIN_INT);
}

static kiln_status forward(kiln_op_ctx *c) {
    return kiln_binary_forward(c, kiln_attr_int(c->node, "fmod", 0) ? &fmod_kernels : &mod_kernels);
}

static kiln_status grad(kiln_grad_ctx *g) {
    kiln_status st = kiln_binary_grad_check(g);
    if (st) return st;
    if (g->need[0]) st = kiln_binary_grad_input(g, 0, g->dy[0]);
    if (!st && g->need[1]) {
        int cma[2] = {KILN_GRAD_OUT(g, 0), KILN_GRAD_IN(g, 0)};
        const int d = kiln_grad_emit(g, NULL, "Sub", 2, cma, 1, NULL, false, NULL); /* C - A = -B q */
        int q[2] = {d, KILN_GRAD_IN(g, 1)};
        const int nq = d < 0 ? -1 : kiln_grad_emit(g, NULL, "Div", 2, q, 1, NULL, false, NULL); /* -q */
        int t[2] = {g->dy[0], nq};
        st = kiln_binary_grad_input(g, 1, nq < 0 ? -1 : kiln_grad_emit(g, NULL, "Mul", 2, t, 1, NULL, false, NULL));
        if (!st && g->dx[1] < 0) st = KILN_ERR_OUT_OF_MEMORY;
    }
    return st;
}

#ifdef KILN_OPTESTS
static int check(const char *attrs, kiln_tensor *a, kiln_tensor *b, kiln_tensor *want, double tol, const char *label) {
    kiln_tensor *in[2] = {a, b};
    return kiln_optest("Mod", attrs, 2, in, 1, &want, tol, tol, label);
}

static int test(void) {
    int fails = 0;
    /* ONNX's examples (onnx/backend/test/case/node/mod.py) */
    fails += check("fmod=1", kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(-4.3, 7.2, 5.0, 4.3, -7.2, 8.0)),
                   kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(2.1, -3.4, 8.0, -2.1, 3.4, 5.0)),
                   kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(-0.1, 0.4, 5, 0.1, -0.4, 3)), 2e-6,
                   "mod_mixed_sign_float32 (fmod=1)");
    fails += check("fmod=1", kt_make(KILN_F16, 1, KT_DIMS(6), KT_VALS(-4.3, 7.2, 5.0, 4.3, -7.2, 8.0)),
                   kt_make(KILN_F16, 1, KT_DIMS(6), KT_VALS(2.1, -3.4, 8.0, -2.1, 3.4, 5.0)),
                   kt_make(KILN_F16, 1, KT_DIMS(6), KT_VALS(-0.1, 0.4, 5, 0.1, -0.4, 3)), 5e-3,
                   "mod_mixed_sign_float16 (fmod=1)");
    fails += check("fmod=1", kt_make(KILN_F64, 1, KT_DIMS(6), KT_VALS(-4.3, 7.2, 5.0, 4.3, -7.2, 8.0)),
                   kt_make(KILN_F64, 1, KT_DIMS(6), KT_VALS(2.1, -3.4, 8.0, -2.1, 3.4, 5.0)),
                   kt_make(KILN_F64, 1, KT_DIMS(6), KT_VALS(fmod(-4.3, 2.1), fmod(7.2, -3.4), 5, fmod(4.3, -2.1),
                                                           fmod(-7.2, 3.4), 3)),
                   0, "mod_mixed_sign_float64 (fmod=1)");
    fails += check("", kt_make(KILN_I64, 1, KT_DIMS(6), KT_VALS(-4, 7, 5, 4, -7, 8)),
                   kt_make(KILN_I64, 1, KT_DIMS(6), KT_VALS(2, -3, 8, -2, 3, 5)),
                   kt_make(KILN_I64, 1, KT_DIMS(6), KT_VALS(0, -2, 5, 0, 2, 3)), 0, "mod_mixed_sign_int64");
    fails += check("fmod=1", kt_make(KILN_I64, 1, KT_DIMS(6), KT_VALS(-4, 7, 5, 4, -7, 8)),
                   kt_make(KILN_I64, 1, KT_DIMS(6), KT_VALS(2, -3, 8, -2, 3, 5)),
                   kt_make(KILN_I64, 1, KT_DIMS(6), KT_VALS(0, 1, 5, 0, -1, 3)), 0, "mod_int64_fmod");
    fails += check("", kt_make(KILN_I8, 1, KT_DIMS(6), KT_VALS(-4, 7, 5, 4, -7, 8)),
                   kt_make(KILN_I8, 1, KT_DIMS(6), KT_VALS(2, -3, 8, -2, 3, 5)),
                   kt_make(KILN_I8, 1, KT_DIMS(6), KT_VALS(0, -2, 5, 0, 2, 3)), 0, "mod_mixed_sign_int8");
    fails += check("", kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(4, 7, 5)), kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(2, 3, 8)),
                   kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(0, 1, 5)), 0, "mod_uint8");
    { /* mod_broadcast: arange(30) int32 (3,2,5) mod [7] */
        double x[30], z[30];
        for (int i = 0; i < 30; i++) x[i] = i, z[i] = i % 7;
        fails += check("", kt_make(KILN_I32, 3, KT_DIMS(3, 2, 5), x), kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(7)),
                       kt_make(KILN_I32, 3, KT_DIMS(3, 2, 5), z), 0, "mod_broadcast");
    }
    /* fmod = 0 on floats: numpy's (Python's) %, the sign of B */
    fails += check("", kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(-4.3, 7.2, 5.0, 4.3, -7.2, 8.0)),
                   kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(2.1, -3.4, 8.0, -2.1, 3.4, 5.0)),
                   kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(2.0, -3.0, 5, -2.0, 3.0, 3)), 2e-6, "mod f32 fmod=0");
    fails += check("", kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(-7, -6, -5, 5, 6, 7)), kt_scalar(KILN_F32, -3),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(-1, -0.0, -2, -1, 0, -2)), 0, "mod f32 (2,3) mod () fmod=0");
    /* integer division by zero: 0; INT64_MIN mod -1: 0 */
    fails += check("", kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(5, -5, -9223372036854775807.0 - 1)),
                   kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(0, 0, -1)), kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(0, 0, 0)),
                   0, "mod i64 by zero and INT64_MIN mod -1");
    fails += check("fmod=1", kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(5, -5)), kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, 0)),
                   kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, 0)), 0, "mod i32 fmod=1 by zero");

    kiln_tensor *in[2] = {kt_make(KILN_F32, 1, KT_DIMS(2), NULL), kt_make(KILN_F32, 1, KT_DIMS(2), NULL)};
    fails += kiln_optest_fails("Mod", "fmod=2", 2, in, 1, KILN_ERR_INVALID_ARGUMENT, "mod fmod=2 rejected");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(4), NULL);
    fails += kiln_optest_fails("Mod", "", 2, in, 1, KILN_ERR_SHAPE, "mod (2,3) mod (4) rejected");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Mod", "", 2, in, 1, KILN_ERR_TYPE, "mod f32 mod i32 rejected");

    /* Gradients, away from the jumps (A / B not near an integer). */
    for (int f = 0; f < 2; f++) {
        const char *attrs = f ? "fmod=1" : "";
        fails += kiln_gradcheck("Mod", attrs, 0, 2,
                                (kiln_tensor *[]){kt_make(KILN_F64, 2, KT_DIMS(2, 3), KT_VALS(-2.3, 0.7, 1.45, 3.1, -0.35, 2.6)),
                                                  kt_make(KILN_F64, 2, KT_DIMS(2, 3), KT_VALS(0.9, -1.3, 0.6, 1.7, 0.8, -0.55))},
                                NULL, f ? "mod grad (2,3) fmod=1" : "mod grad (2,3) fmod=0");
        fails += kiln_gradcheck("Mod", attrs, 0, 2,
                                (kiln_tensor *[]){kt_make(KILN_F64, 2, KT_DIMS(2, 3), KT_VALS(-2.3, 0.7, 1.45, 3.1, -0.35, 2.6)),
                                                  kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.9, -1.3, 0.6))},
                                NULL, f ? "mod grad (2,3) mod (3) fmod=1" : "mod grad (2,3) mod (3) fmod=0");
    }
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_mod = {
    .precision = KILN_PREC_FP32, .layout = KILN_LAYOUT_BINARY,
    .name = "Mod", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};
