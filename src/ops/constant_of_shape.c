/* constant_of_shape.c — ConstantOfShape: a tensor of the shape given by the int64 1-D
 * input (an empty shape gives a scalar; zero dims give an empty tensor), filled with the
 * one element of the `value` tensor attribute, whose dtype it takes (default: f32 0).
 * Opsets 11..21. */
#include "../core/optest.h"
#include "movement.h"

#include <inttypes.h>
#include <string.h>

static kiln_status value_of(kiln_op_ctx *c, const kiln_tensor **v) {
    const kiln_attr *a = kiln_node_attr(c->node, "value");
    *v = NULL;
    if (!a) return KILN_OK;
    KILN_OP_CHECK(c, a->type == KILN_ATTR_TENSOR && a->t, KILN_ERR_TYPE,
                  "attribute value is not a tensor");
    KILN_OP_CHECK(c, kiln_dtype_size(a->t->dtype) > 0, KILN_ERR_UNSUPPORTED,
                  "value has an unsupported dtype %s", kiln_dtype_name(a->t->dtype));
    KILN_OP_CHECK(c, kiln_tensor_numel(a->t) == 1, KILN_ERR_SHAPE,
                  "value must hold one element, not %" PRId64, kiln_tensor_numel(a->t));
    *v = a->t;
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *v;
    kiln_status st = value_of(c, &v);
    if (st != KILN_OK) return st;
    int64_t dims[KILN_MAX_DIMS];
    int n;
    st = kiln_read_ints(c, 0, "shape", dims, KILN_MAX_DIMS, &n);
    if (st != KILN_OK) return st;
    for (int d = 0; d < n; d++)
        KILN_OP_CHECK(c, dims[d] >= 0, KILN_ERR_SHAPE, "shape[%d] = %" PRId64 " is negative", d,
                      dims[d]);
    kiln_tensor_set_shape(c->out[0], v ? v->dtype : KILN_F32, n, dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *v;
    kiln_status st = value_of(c, &v);
    if (st != KILN_OK) return st;
    kiln_tensor *y = c->out[0];
    int64_t n = kiln_tensor_numel(y);
    size_t es = kiln_dtype_size(y->dtype);
    if (!v) {
        memset(y->data, 0, (size_t)n * es);
        return KILN_OK;
    }
    char *p = y->data;
    for (int64_t i = 0; i < n; i++) memcpy(p + i * (int64_t)es, v->data, es);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static kiln_tensor *shape_of(int n, const double *v) {
    return kt_make(KILN_I64, 1, KT_DIMS(n), v);
}

static int test(void) {
    int fails = 0;
    kiln_tensor *in, *y;
    in = shape_of(2, KT_VALS(2, 3));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, 0, 0, 0, 0, 0));
    fails += kiln_optest("ConstantOfShape", "", 1, &in, 1, &y, 0, 0, "constantofshape default");

    in = shape_of(3, KT_VALS(1, 2, 2));
    y = kt_make(KILN_F32, 3, KT_DIMS(1, 2, 2), KT_VALS(1.5, 1.5, 1.5, 1.5));
    fails += kiln_optest_tensor_attr("ConstantOfShape", "value",
                                     kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(1.5)), 1, &in, y,
                                     KILN_OK, "constantofshape f32 1.5");
    in = shape_of(1, KT_VALS(3));
    y = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(-5000000000.0, -5000000000.0, -5000000000.0));
    fails += kiln_optest_tensor_attr("ConstantOfShape", "value",
                                     kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-5000000000.0)), 1,
                                     &in, y, KILN_OK, "constantofshape i64");
    in = shape_of(0, NULL);
    y = kt_scalar(KILN_BOOL, 1);
    fails += kiln_optest_tensor_attr("ConstantOfShape", "value",
                                     kt_make(KILN_BOOL, 1, KT_DIMS(1), KT_VALS(1)), 1, &in, y,
                                     KILN_OK, "constantofshape scalar bool");
    in = shape_of(2, KT_VALS(0, 4));
    y = kt_make(KILN_I32, 2, KT_DIMS(0, 4), NULL);
    fails += kiln_optest_tensor_attr("ConstantOfShape", "value",
                                     kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(0)), 1, &in, y,
                                     KILN_OK, "constantofshape zero dim");

    in = shape_of(2, KT_VALS(2, -1));
    fails += kiln_optest_fails("ConstantOfShape", "", 1, &in, 1, KILN_ERR_SHAPE,
                               "constantofshape negative dim");
    in = shape_of(1, KT_VALS(2));
    fails += kiln_optest_tensor_attr("ConstantOfShape", "value",
                                     kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, 2)), 1, &in,
                                     NULL, KILN_ERR_SHAPE, "constantofshape 2-element value");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_constant_of_shape = {
    .precision = KILN_PREC_FP32, .prec_flags = KILN_PREC_SOURCE, .out_dtype = {KILN_DT_VALUE_OR_F32},
    .name = "ConstantOfShape", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
    .max_outputs = 1, .value_inputs = 1u << 0, .infer = infer, .cpu_forward = forward,
    .test = KILN_OP_TESTS(test),
};
