/* range.c — Range: start, start + delta, ... up to (not including) limit (opset 11+).
 * start, limit and delta are scalars (one-element tensors) of one numeric dtype, which
 * the output takes; the count is max(ceil((limit - start) / delta), 0), computed exactly
 * for integers and in double for floats. delta 0 is an error. Element i is
 * start + i * delta (in int64 for integers, double for floats, then stored). */
#include "../core/optest.h"
#include "movement.h"

#include <inttypes.h>
#include <math.h>

static kiln_status count_of(kiln_op_ctx *c, int64_t *count) {
    static const char *const names[] = {"start", "limit", "delta"};
    kiln_dtype dt = c->in[0]->dtype;
    KILN_OP_CHECK(c, kiln_dtype_is_float(dt) || kiln_dtype_is_int(dt), KILN_ERR_TYPE,
                  "dtype %s is not numeric", kiln_dtype_name(dt));
    for (int i = 0; i < 3; i++) {
        const kiln_tensor *t = c->in[i];
        KILN_OP_CHECK(c, t->dtype == dt, KILN_ERR_TYPE, "%s has dtype %s, start has %s",
                      names[i], kiln_dtype_name(t->dtype), kiln_dtype_name(dt));
        KILN_OP_CHECK(c, kiln_tensor_numel(t) == 1 && t->ndim <= 1, KILN_ERR_SHAPE,
                      "%s must be a scalar", names[i]);
        KILN_OP_CHECK(c, t->data != NULL, KILN_ERR_UNSUPPORTED,
                      "the value of %s must be known when the plan is built", names[i]);
    }
    if (kiln_dtype_is_float(dt)) {
        double start = kiln_get_f64(c->in[0], 0), limit = kiln_get_f64(c->in[1], 0),
               delta = kiln_get_f64(c->in[2], 0);
        KILN_OP_CHECK(c, delta != 0 && isfinite(delta) && isfinite(start) && isfinite(limit),
                      KILN_ERR_SHAPE, "start %g, limit %g, delta %g do not make a range", start,
                      limit, delta);
        double n = ceil((limit - start) / delta);
        KILN_OP_CHECK(c, n < 9007199254740992.0, KILN_ERR_SHAPE,
                      "the range would have %g elements", n);
        *count = n > 0 ? (int64_t)n : 0;
    } else {
        int64_t start = kiln_get_i64(c->in[0], 0), limit = kiln_get_i64(c->in[1], 0),
                delta = kiln_get_i64(c->in[2], 0);
        KILN_OP_CHECK(c, delta != 0, KILN_ERR_SHAPE, "delta is 0");
        /* ceil division without forming limit - start + delta, which could overflow */
        if (delta > 0) *count = limit > start ? (limit - start - 1) / delta + 1 : 0;
        else *count = limit < start ? (start - limit - 1) / -delta + 1 : 0;
    }
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    int64_t n;
    kiln_status st = count_of(c, &n);
    if (st != KILN_OK) return st;
    kiln_tensor_set_shape(c->out[0], c->in[0]->dtype, 1, &n);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0];
    int64_t n = y->dims[0];
    if (y->dtype == KILN_F32) {
        double start = kiln_get_f64(c->in[0], 0), delta = kiln_get_f64(c->in[2], 0);
        float *p = y->data; // (n)
        for (int64_t i = 0; i < n; i++) p[i] = (float)(start + (double)i * delta);
    } else if (kiln_dtype_is_float(y->dtype)) {
        double start = kiln_get_f64(c->in[0], 0), delta = kiln_get_f64(c->in[2], 0);
        for (int64_t i = 0; i < n; i++) kiln_set_f64(y, i, start + (double)i * delta);
    } else {
        int64_t start = kiln_get_i64(c->in[0], 0), delta = kiln_get_i64(c->in[2], 0);
        for (int64_t i = 0; i < n; i++) kiln_set_i64(y, i, start + i * delta);
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int range3(kiln_dtype dt, double start, double limit, double delta, kiln_tensor *y,
                  const char *label) {
    kiln_tensor *in[3] = {kt_scalar(dt, start), kt_scalar(dt, limit), kt_scalar(dt, delta)};
    return kiln_optest("Range", "", 3, in, 1, &y, 0, 0, label);
}

static int test(void) {
    int fails = 0;
    /* expected values from numpy.arange */
    fails += range3(KILN_F32, 1, 5, 2, kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, 3)),
                    "range f32 positive delta");
    fails += range3(KILN_I32, 10, 6, -3, kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(10, 7)),
                    "range i32 negative delta");
    fails += range3(KILN_F64, 0, 1, 0.25,
                    kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(0, 0.25, 0.5, 0.75)),
                    "range f64 fraction");
    fails += range3(KILN_I64, -3, 4, 2, kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(-3, -1, 1, 3)),
                    "range i64 crossing zero");
    fails += range3(KILN_I16, 5, 5, 1, kt_make(KILN_I16, 1, KT_DIMS(0), NULL), "range empty");
    fails += range3(KILN_I64, 0, 5, -1, kt_make(KILN_I64, 1, KT_DIMS(0), NULL),
                    "range wrong direction");
    fails += range3(KILN_F32, 0, 1, 0.1f,
                    kt_make(KILN_F32, 1, KT_DIMS(10),
                            KT_VALS(0.0, 0.10000000149011612, 0.20000000298023224,
                                    0.30000001192092896, 0.4000000059604645, 0.5,
                                    0.6000000238418579, 0.699999988079071, 0.800000011920929,
                                    0.9000000357627869)),
                    "range f32 0.1 steps");

    kiln_tensor *in[3] = {kt_scalar(KILN_I32, 0), kt_scalar(KILN_I32, 5), kt_scalar(KILN_I32, 0)};
    fails += kiln_optest_fails("Range", "", 3, in, 1, KILN_ERR_SHAPE, "range delta 0");
    in[0] = kt_scalar(KILN_I32, 0);
    in[1] = kt_scalar(KILN_I64, 5);
    in[2] = kt_scalar(KILN_I32, 1);
    fails += kiln_optest_fails("Range", "", 3, in, 1, KILN_ERR_TYPE, "range mixed dtypes");
    in[0] = kt_scalar(KILN_F32, 0);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(5, 6));
    in[2] = kt_scalar(KILN_F32, 1);
    fails += kiln_optest_fails("Range", "", 3, in, 1, KILN_ERR_SHAPE, "range vector limit");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_range = {
    .precision = KILN_PREC_FOLLOW,
    .name = "Range", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 7, .nondiff_inputs = 7, .infer = infer, .cpu_forward = forward,
    .test = KILN_OP_TESTS(test),
};
