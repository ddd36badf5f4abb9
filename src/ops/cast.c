/*
 * cast.c — Cast: Y = X converted to the dtype of attribute `to`, same shape. Opset 13+
 * semantics (also used for older opsets): every kiln dtype to every kiln dtype.
 *   - float -> narrower float (f64 -> f32/f16/bf16, f32 -> f16/bf16): round to nearest
 *     even, in one rounding (f64 -> f16 goes through a round-to-odd f32, which is exact
 *     where a plain double -> float -> f16 could round twice). Out of range gives ±inf.
 *   - float -> integer: truncation toward zero. Out-of-range values, undefined in ONNX,
 *     saturate at the target's limits; NaN gives 0.
 *   - integer -> integer: the low bits, i.e. modulo 2^bits (numpy's astype).
 *   - integer -> float: nearest (exact up to 2^53 for f16/bf16 targets).
 *   - to bool: nonzero (NaN included) is true; bool -> anything: 0 or 1.
 *   - `saturate` (opset 19) only affects float8 targets, which kiln lacks: accepted and
 *     ignored. STRING (8) and other dtypes kiln lacks are KILN_ERR_UNSUPPORTED.
 * Gradient: a float -> float cast passes dY back through a cast to X's dtype (CastLike:
 * X's dtype may be unknown while the backward graph is built). Casts to integers or bool
 * are steps, casts from them have no float input: neither has a gradient, and a rule
 * asked for one fails with KILN_ERR_UNSUPPORTED.
 */
#include "../core/optest.h"
#ifdef KILN_OPTESTS
#include "../train/autograd.h" /* the tests build training graphs */
#endif
#include "cast.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ONNX dtypes kiln has no storage for, named in the error. */
static const char *onnx_dtype_name(int64_t t) {
    switch (t) {
    case 8: return "STRING";
    case 14: return "COMPLEX64";
    case 15: return "COMPLEX128";
    case 17: return "FLOAT8E4M3FN";
    case 18: return "FLOAT8E4M3FNUZ";
    case 19: return "FLOAT8E5M2";
    case 20: return "FLOAT8E5M2FNUZ";
    case 21: return "UINT4";
    case 22: return "INT4";
    default: return "unknown";
    }
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    const kiln_attr *a = kiln_node_attr(c->node, "to");
    KILN_OP_CHECK(c, a && a->type == KILN_ATTR_INT, KILN_ERR_INVALID_ARGUMENT,
                  "integer attribute 'to' is missing");
    const int64_t to = a->i;
    KILN_OP_CHECK(c, to > 0 && to <= 64 && kiln_dtype_valid((kiln_dtype)to),
                  KILN_ERR_UNSUPPORTED, "attribute 'to' = %lld (%s) is not a dtype kiln supports",
                  (long long)to, onnx_dtype_name(to));
    KILN_OP_CHECK(c, kiln_dtype_valid(x->dtype), KILN_ERR_UNSUPPORTED,
                  "input dtype %d is not supported", (int)x->dtype);
    kiln_tensor_set_shape(c->out[0], (kiln_dtype)to, x->ndim, x->dims);
    return KILN_OK;
}

/* A source element: a float (any float dtype is exact in double) or an integer's bits,
 * sign-extended for signed dtypes. */
typedef struct scalar {
    bool is_float;
    bool is_signed;
    double f;
    uint64_t bits;
} scalar;

static scalar load(const kiln_tensor *x, int64_t i) {
    const void *p = x->data;
    scalar s = {false, kiln_dtype_is_signed(x->dtype), 0, 0};
    switch (x->dtype) {
    case KILN_F32: s.is_float = true; s.f = ((const float *)p)[i]; break;
    case KILN_F64: s.is_float = true; s.f = ((const double *)p)[i]; break;
    case KILN_F16: s.is_float = true; s.f = kiln_f16_to_f32(((const uint16_t *)p)[i]); break;
    case KILN_BF16: s.is_float = true; s.f = kiln_bf16_to_f32(((const uint16_t *)p)[i]); break;
    case KILN_BOOL: s.bits = ((const uint8_t *)p)[i] != 0; break;
    case KILN_U8: s.bits = ((const uint8_t *)p)[i]; break;
    case KILN_U16: s.bits = ((const uint16_t *)p)[i]; break;
    case KILN_U32: s.bits = ((const uint32_t *)p)[i]; break;
    case KILN_U64: s.bits = ((const uint64_t *)p)[i]; break;
    case KILN_I8: s.bits = (uint64_t)(int64_t)((const int8_t *)p)[i]; break;
    case KILN_I16: s.bits = (uint64_t)(int64_t)((const int16_t *)p)[i]; break;
    case KILN_I32: s.bits = (uint64_t)(int64_t)((const int32_t *)p)[i]; break;
    case KILN_I64: s.bits = (uint64_t)((const int64_t *)p)[i]; break;
    default: break; /* infer admits kiln dtypes only */
    }
    return s;
}

static double as_double(const scalar *s) {
    if (s->is_float) return s->f;
    return s->is_signed ? (double)(int64_t)s->bits : (double)s->bits;
}

/* double -> float rounded toward zero with the lowest bit set when inexact ("round to
 * odd"). Rounding that float to a format with at least 2 fewer significant bits (f16:
 * 11, bf16: 8, versus 24) then equals rounding the double directly. */
static float f32_round_odd(double d) {
    float f = (float)d;
    if (d != d || (double)f == d || isinf(d)) return f;
    if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u |= 1;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Float -> integer bits of a dtype of `bits` width: truncate, saturate, NaN -> 0. The
 * limits are powers of two, exact in double. */
static uint64_t float_to_int_bits(double v, kiln_dtype t) {
    const int bits = 8 * (int)kiln_dtype_size(t);
    if (v != v) return 0;
    v = trunc(v);
    if (kiln_dtype_is_signed(t)) {
        const double lim = ldexp(1.0, bits - 1);
        const int64_t max = (int64_t)(UINT64_MAX >> (65 - bits));
        if (v >= lim) return (uint64_t)max;
        if (v < -lim) return (uint64_t)(-max - 1);
        return (uint64_t)(int64_t)v;
    }
    if (v >= ldexp(1.0, bits)) return UINT64_MAX >> (64 - bits);
    if (v < 0) return 0;
    return (uint64_t)v;
}

static void store(kiln_tensor *y, int64_t i, const scalar *s) {
    void *p = y->data;
    if (kiln_dtype_is_float(y->dtype)) {
        switch (y->dtype) {
        case KILN_F64: ((double *)p)[i] = as_double(s); break;
        case KILN_F32:
            /* int64 -> float directly: one rounding even above 2^53 */
            if (s->is_float)
                ((float *)p)[i] = (float)s->f;
            else
                ((float *)p)[i] = s->is_signed ? (float)(int64_t)s->bits : (float)s->bits;
            break;
        case KILN_F16: ((uint16_t *)p)[i] = kiln_f32_to_f16(f32_round_odd(as_double(s))); break;
        default: ((uint16_t *)p)[i] = kiln_f32_to_bf16(f32_round_odd(as_double(s))); break;
        }
        return;
    }
    if (y->dtype == KILN_BOOL) {
        ((uint8_t *)p)[i] = s->is_float ? s->f != 0 : s->bits != 0; /* NaN != 0 */
        return;
    }
    const uint64_t b = s->is_float ? float_to_int_bits(s->f, y->dtype) : s->bits;
    switch (y->dtype) {
    case KILN_U8: ((uint8_t *)p)[i] = (uint8_t)b; break;
    case KILN_U16: ((uint16_t *)p)[i] = (uint16_t)b; break;
    case KILN_U32: ((uint32_t *)p)[i] = (uint32_t)b; break;
    case KILN_U64: ((uint64_t *)p)[i] = b; break;
    /* narrowing to a signed type keeps the low bits (two's complement, as gcc and clang
     * define it) */
    case KILN_I8: ((int8_t *)p)[i] = (int8_t)(uint8_t)b; break;
    case KILN_I16: ((int16_t *)p)[i] = (int16_t)(uint16_t)b; break;
    case KILN_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)b; break;
    case KILN_I64: ((int64_t *)p)[i] = (int64_t)b; break;
    default: break;
    }
}

void kiln_cast_convert(const kiln_tensor *x, kiln_tensor *y) {
    const int64_t n = kiln_tensor_numel(x);
    if (x->dtype == y->dtype) {
        memcpy(y->data, x->data, kiln_tensor_nbytes(x));
        return;
    }
    /* Typed loops for the casts of mixed-precision graphs; the rest goes element by
     * element through scalar. */
    if (x->dtype == KILN_F32 && y->dtype == KILN_F16) {
        const float *xp = x->data;
        uint16_t *yp = y->data;
        for (int64_t i = 0; i < n; i++) yp[i] = kiln_f32_to_f16(xp[i]);
    } else if (x->dtype == KILN_F32 && y->dtype == KILN_BF16) {
        const float *xp = x->data;
        uint16_t *yp = y->data;
        for (int64_t i = 0; i < n; i++) yp[i] = kiln_f32_to_bf16(xp[i]);
    } else if (x->dtype == KILN_F16 && y->dtype == KILN_F32) {
        const uint16_t *xp = x->data;
        float *yp = y->data;
        for (int64_t i = 0; i < n; i++) yp[i] = kiln_f16_to_f32(xp[i]);
    } else if (x->dtype == KILN_BF16 && y->dtype == KILN_F32) {
        const uint16_t *xp = x->data;
        float *yp = y->data;
        for (int64_t i = 0; i < n; i++) yp[i] = kiln_bf16_to_f32(xp[i]);
    } else if (x->dtype == KILN_F32 && y->dtype == KILN_F64) {
        const float *xp = x->data;
        double *yp = y->data;
        for (int64_t i = 0; i < n; i++) yp[i] = xp[i];
    } else if (x->dtype == KILN_F64 && y->dtype == KILN_F32) {
        const double *xp = x->data;
        float *yp = y->data;
        for (int64_t i = 0; i < n; i++) yp[i] = (float)xp[i];
    } else {
        for (int64_t i = 0; i < n; i++) {
            scalar s = load(x, i);
            store(y, i, &s);
        }
    }
}

static kiln_status forward(kiln_op_ctx *c) {
    kiln_cast_convert(c->in[0], c->out[0]);
    return KILN_OK;
}

static kiln_status grad(kiln_grad_ctx *g) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    const kiln_value *x = &g->m->values[n->in[0]];
    const int64_t to = kiln_attr_int(n, "to", 0);
    const bool to_float = to > 0 && to <= 64 && kiln_dtype_valid((kiln_dtype)to) &&
                          kiln_dtype_is_float((kiln_dtype)to);
    if (!to_float || (x->dtype && !kiln_dtype_is_float(x->dtype)))
        return kiln_fail(g->m->ctx, KILN_ERR_UNSUPPORTED,
                         "Cast node '%s': only float to float casts have a gradient, this one "
                         "casts '%s' (%s) to %s", n->name, x->name,
                         x->dtype ? kiln_dtype_name(x->dtype) : "dtype not yet known",
                         to_float ? kiln_dtype_name((kiln_dtype)to) : "a non-float dtype");
    int in[2] = {g->dy[0], n->in[0]};
    g->dx[0] = kiln_grad_emit(g, NULL, "CastLike", 2, in, 1, NULL, false, NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

#ifdef KILN_OPTESTS
/* The gradient through a chain of casts x -> Cast(to[0]) -> ... -> Cast(to[n-1]), with
 * loss sum(Y * R): dL/dx must be R cast back through the chain's dtypes to x's, or, when
 * the chain passes through an integer dtype (no gradient flows), zeros; or autograd must
 * fail with want_fail.
 * Built by hand: kiln_gradcheck only perturbs f64 inputs of f64 graphs. */
static int grad_case(const char *label, kiln_dtype xdt, int n, const int64_t *to,
                     kiln_status want_fail) {
    kiln_context *ctx = NULL;
    kiln_model *m = NULL, *t = NULL;
    kiln_session *s = NULL;
    kiln_tensor *x = kt_rand(xdt, 1, KT_DIMS(5), -4, 4, 21);
    kiln_tensor *r = kt_rand((kiln_dtype)to[n - 1], 1, KT_DIMS(5), -4, 4, 22);
    kiln_tensor *want = NULL;
    int fails = 1;
    kiln_status st = x && r ? kiln_context_create(&ctx) : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_model_create(ctx, &m);
    if (!st) st = kiln_model_add_input(m, "x", xdt, 1, KT_DIMS(5));
    if (!st) st = kiln_model_add_initializer(m, "r", r);
    char names[8][16] = {"x"};
    for (int i = 0; i < n && !st; i++) {
        kiln_node *node = NULL;
        snprintf(names[i + 1], sizeof names[i + 1], "y%d", i);
        const char *in[1] = {names[i]}, *out[1] = {names[i + 1]};
        st = kiln_model_add_node(m, "Cast", names[i + 1], 1, in, 1, out, &node);
        if (!st) st = kiln_node_set_int(node, "to", to[i]);
    }
    kiln_node *loss = NULL;
    if (!st) st = kiln_model_add_node(m, "GradCheckLoss", "loss", 2, (const char *[]){names[n], "r"}, 1,
                                      (const char *[]){"loss"}, &loss);
    if (!st) {
        free(loss->domain);
        loss->domain = kiln_strdup(ctx, "kiln");
        st = loss->domain ? kiln_model_add_output(m, "loss") : KILN_ERR_OUT_OF_MEMORY;
    }
    if (!st) st = kiln_model_finalize(m);
    if (!st) st = kiln_model_clone(m, &t);
    int xv = t ? kiln_model_find_value(t, "x") : -1, gv = -1;
    if (!st) st = kiln_autograd(t, kiln_model_find_value(t, "loss"), 1, &xv, &gv);
    if (want_fail) {
        if (st == want_fail && kiln_context_message(ctx)[0]) {
            printf("ok   %s: autograd refused: %s\n", label, kiln_context_message(ctx));
            fails = 0;
        } else {
            printf("FAIL %s: autograd gave %s, want %s\n", label, kiln_status_name(st),
                   kiln_status_name(want_fail));
        }
        goto out;
    }
    if (!st) st = kiln_model_add_output(t, t->values[gv].name);
    if (!st) st = kiln_model_finalize(t);
    if (!st) st = kiln_session_create(t, NULL, &s);
    const kiln_tensor *outs[2] = {NULL, NULL};
    if (!st) st = kiln_session_run(s, 1, &x, 2, outs);
    if (st) {
        printf("FAIL %s: %s\n", label, ctx ? kiln_context_message(ctx) : "out of memory");
        goto out;
    }
    /* R converted back through each cast's input dtype, as the gradient travels */
    bool through_int = false;
    for (int i = 0; i < n; i++) through_int |= !kiln_dtype_is_float((kiln_dtype)to[i]);
    want = kiln_tensor_clone(NULL, r);
    if (through_int) {
        kiln_tensor_free(want);
        want = kiln_tensor_new(NULL, xdt, 1, KT_DIMS(5));
    }
    for (int i = n - 1; i >= 0 && want && !through_int; i--) {
        kiln_tensor *prev = kiln_tensor_new(NULL, i ? (kiln_dtype)to[i - 1] : xdt, 1, KT_DIMS(5));
        if (prev) kiln_cast_convert(want, prev);
        kiln_tensor_free(want);
        want = prev;
    }
    fails = want ? kiln_tensor_compare(outs[1], want, 0, 0, label) : 1;
out:
    kiln_session_free(s);
    kiln_model_free(t);
    kiln_model_free(m);
    kiln_context_free(ctx);
    kiln_tensor_free(x);
    kiln_tensor_free(r);
    kiln_tensor_free(want);
    return fails;
}

static int test_grad(void) {
    int fails = 0;
    fails += kiln_gradcheck("Cast", "to=11", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 1)}, NULL,
                            "cast f64->f64 gradient");
    fails += grad_case("cast f64->f32 gradient is R in f64", KILN_F64, 1, KT_DIMS(1), 0);
    fails += grad_case("cast f32->f16->f64 gradient is R in f32", KILN_F32, 2, KT_DIMS(10, 11), 0);
    fails += grad_case("cast bf16->f32 gradient is R in bf16", KILN_BF16, 1, KT_DIMS(1), 0);
    fails += grad_case("cast f64->i64->f64 passes no gradient (zeros)", KILN_F64, 2, KT_DIMS(7, 11), 0);
    return fails;
}

static int check(const char *label, const char *attrs, kiln_tensor *x, kiln_tensor *want) {
    return kiln_optest("Cast", attrs, 1, &x, 1, &want, 0, 0, label);
}

/* A tensor of dtype with raw element bytes (values doubles cannot carry exactly). */
static kiln_tensor *raw(kiln_dtype dt, int64_t n, const void *bytes) {
    kiln_tensor *t = kt_make(dt, 1, KT_DIMS(n), NULL);
    if (t) memcpy(t->data, bytes, (size_t)n * kiln_dtype_size(dt));
    return t;
}

static int test(void) {
    int fails = 0;
    /* ties go to even: 2049 -> 2048, 2051 -> 2052 (f16 spacing is 2 there) */
    fails += check("cast f32->f16", "to=10",
                   kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(0.5, 1.0009765625, 2049, 2051)),
                   kt_make(KILN_F16, 2, KT_DIMS(2, 2), KT_VALS(0.5, 1.0009765625, 2048, 2052)));
    /* bf16 keeps 8 significant bits: 1+2^-8 is a tie (-> 1), 1+3*2^-8 a tie (-> 1+2^-6),
     * 1+2^-8+2^-20 above the tie (-> 1+2^-7); truncation would give 1, 1+2^-7, 1. */
    fails += check("cast f32->bf16 round to nearest even", "to=16",
                   kt_make(KILN_F32, 1, KT_DIMS(5),
                           KT_VALS(1.00390625, 1.01171875, 1.00390625 + 0x1p-20, -2.5,
                                   0.48033667)),
                   kt_make(KILN_BF16, 1, KT_DIMS(5),
                           KT_VALS(1, 1.015625, 1.0078125, -2.5, 0.48046875)));
    /* 1+2^-11+2^-40 is just above the f16 tie between 1 and 1+2^-10; through a plain
     * float it would become the tie itself and round to 1. */
    fails += check("cast f64->f16 single rounding", "to=10",
                   kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(1 + 0x1p-11 + 0x1p-40, 0.1, -65504)),
                   kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(1.0009765625, 0.0999755859375, -65504)));
    fails += check("cast f64->bf16 single rounding", "to=16",
                   kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(1 + 0x1p-8 + 0x1p-40, -0x1p-130)),
                   kt_make(KILN_BF16, 1, KT_DIMS(2), KT_VALS(1.0078125, -0x1p-130)));
    fails += check("cast f16->f32", "to=1",
                   kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(65504, 0x1p-24, -1.5)),
                   kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(65504, 0x1p-24, -1.5)));
    fails += check("cast bf16->f64", "to=11",
                   kt_make(KILN_BF16, 1, KT_DIMS(2), KT_VALS(0.48046875, -0x1.fep127)),
                   kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(0.48046875, -0x1.fep127)));
    fails += check("cast f32->i32 truncates and saturates", "to=6",
                   kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(-2.7, 2.7, -0.5, 1e10, -1e10, NAN)),
                   kt_make(KILN_I32, 1, KT_DIMS(6),
                           KT_VALS(-2, 2, 0, 2147483647, -2147483648.0, 0)));
    fails += check("cast f32->u8 saturates", "to=2",
                   kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(300, -1, 254.9, NAN)),
                   kt_make(KILN_U8, 1, KT_DIMS(4), KT_VALS(255, 0, 254, 0)));
    {
        const int64_t want[3] = {INT64_MAX, INT64_MIN, 1000000000000000};
        fails += check("cast f64->i64 saturates", "to=7",
                       kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(9.3e18, -9.3e18, 1e15 + 0.5)),
                       raw(KILN_I64, 3, want));
    }
    fails += check("cast f32->bool", "to=9",
                   kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(0, -0.5, NAN, -0.0)),
                   kt_make(KILN_BOOL, 1, KT_DIMS(4), KT_VALS(0, 1, 1, 0)));
    fails += check("cast bool->f32", "to=1", kt_make(KILN_BOOL, 1, KT_DIMS(2), KT_VALS(1, 0)),
                   kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, 0)));
    fails += check("cast bool->i64", "to=7", kt_make(KILN_BOOL, 1, KT_DIMS(2), KT_VALS(0, 1)),
                   kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 1)));
    fails += check("cast i64->i8 wraps", "to=3",
                   kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(200, -129, 127, -1)),
                   kt_make(KILN_I8, 1, KT_DIMS(4), KT_VALS(-56, 127, 127, -1)));
    fails += check("cast u8->i8", "to=3", kt_make(KILN_U8, 1, KT_DIMS(2), KT_VALS(255, 128)),
                   kt_make(KILN_I8, 1, KT_DIMS(2), KT_VALS(-1, -128)));
    fails += check("cast i32->u16", "to=4", kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(-1, 65536)),
                   kt_make(KILN_U16, 1, KT_DIMS(2), KT_VALS(65535, 0)));
    fails += check("cast i32->bool", "to=9", kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(0, -7, 256)),
                   kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(0, 1, 1)));
    /* 2^24 + 1 is a tie between 2^24 and 2^24 + 2: even is 2^24 */
    fails += check("cast i64->f32", "to=1",
                   kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(16777217, -3)),
                   kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(16777216, -3)));
    fails += check("cast i32->f16", "to=10",
                   kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(65504, 2049, -7)),
                   kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(65504, 2048, -7)));
    {
        const uint64_t x[2] = {UINT64_MAX, (uint64_t)1 << 63};
        fails += check("cast u64->f64", "to=11", raw(KILN_U64, 2, x),
                       kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(0x1p64, 0x1p63)));
    }
    fails += check("cast f32->f32 copy", "to=1",
                   kt_make(KILN_F32, 2, KT_DIMS(1, 2), KT_VALS(0.1, -7)),
                   kt_make(KILN_F32, 2, KT_DIMS(1, 2), KT_VALS(0.1, -7)));
    kiln_tensor *x = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(1.5, -0.25));
    kiln_tensor *want = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1.5, -0.25));
    fails += kiln_optest_opset("Cast", "to=1;saturate=0", 19, 1, &x, 1, &want, 0, 0,
                               "cast opset 19 saturate ignored");

    x = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Cast", "to=8", 1, &x, 1, KILN_ERR_UNSUPPORTED,
                               "cast to STRING rejected");
    x = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Cast", "to=17", 1, &x, 1, KILN_ERR_UNSUPPORTED,
                               "cast to FLOAT8E4M3FN rejected");
    x = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Cast", "", 1, &x, 1, KILN_ERR_INVALID_ARGUMENT,
                               "cast without 'to' rejected");
    fails += test_grad();
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Cast", "to=10", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -70000, 70000, 451)},
                               1, "cast random f32 to f16, past its range");
    fails += kiln_optest_sweep("Cast", "to=7", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -100, 100, 452)},
                               1, "cast random f32 to i64");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_cast = {
    .precision = KILN_PREC_ANY, .prec_flags = KILN_PREC_SOURCE, .out_dtype = {KILN_DT_ATTR_TO},
    .name = "Cast", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};
