/* constant.c — Constant: a tensor given by exactly one attribute (opsets 11..21): `value`
 * (a tensor of any dtype), `value_float` / `value_int` (f32 / int64 scalars, opset 12+)
 * or `value_floats` / `value_ints` (f32 / int64 1-D). String values (`value_string(s)`)
 * and `sparse_value` are rejected with KILN_ERR_UNSUPPORTED. No inputs. */
#include "../core/optest.h"
#include "movement.h"

#include <string.h>

static const char *const kinds[] = {"value",      "value_float", "value_floats",  "value_int",
                                    "value_ints", "value_string", "value_strings",
                                    "sparse_value"};

/* The one attribute that carries the value. */
static kiln_status find(kiln_op_ctx *c, const kiln_attr **out) {
    const kiln_attr *found = NULL;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        const kiln_attr *a = kiln_node_attr(c->node, kinds[k]);
        if (!a) continue;
        KILN_OP_CHECK(c, !found, KILN_ERR_SHAPE, "attributes %s and %s are both given",
                      found ? found->name : "", a->name);
        found = a;
    }
    KILN_OP_CHECK(c, found, KILN_ERR_SHAPE, "no value attribute is given");
    KILN_OP_CHECK(c, strncmp(found->name, "value_string", 12) != 0 &&
                         strcmp(found->name, "sparse_value") != 0,
                  KILN_ERR_UNSUPPORTED, "attribute %s is not supported", found->name);
    *out = found;
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_attr *a;
    kiln_status st = find(c, &a);
    if (st != KILN_OK) return st;
    int64_t n = a->n;
    if (strcmp(a->name, "value") == 0) {
        KILN_OP_CHECK(c, a->type == KILN_ATTR_TENSOR && a->t, KILN_ERR_TYPE,
                      "attribute value is not a tensor");
        KILN_OP_CHECK(c, kiln_dtype_size(a->t->dtype) > 0, KILN_ERR_UNSUPPORTED,
                      "value has an unsupported dtype %s", kiln_dtype_name(a->t->dtype));
        kiln_tensor_set_shape(c->out[0], a->t->dtype, a->t->ndim, a->t->dims);
    } else if (strcmp(a->name, "value_float") == 0) {
        KILN_OP_CHECK(c, a->type == KILN_ATTR_FLOAT || a->type == KILN_ATTR_INT, KILN_ERR_TYPE,
                      "value_float is not a float");
        kiln_tensor_set_shape(c->out[0], KILN_F32, 0, NULL);
    } else if (strcmp(a->name, "value_int") == 0) {
        KILN_OP_CHECK(c, a->type == KILN_ATTR_INT, KILN_ERR_TYPE, "value_int is not an int");
        kiln_tensor_set_shape(c->out[0], KILN_I64, 0, NULL);
    } else if (strcmp(a->name, "value_floats") == 0) {
        /* "[1,2]" style lists of whole numbers may arrive as INTS from the test parser */
        KILN_OP_CHECK(c, a->type == KILN_ATTR_FLOATS || a->type == KILN_ATTR_INTS,
                      KILN_ERR_TYPE, "value_floats is not a list of floats");
        kiln_tensor_set_shape(c->out[0], KILN_F32, 1, &n);
    } else {
        KILN_OP_CHECK(c, a->type == KILN_ATTR_INTS, KILN_ERR_TYPE,
                      "value_ints is not a list of ints");
        kiln_tensor_set_shape(c->out[0], KILN_I64, 1, &n);
    }
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_attr *a;
    kiln_status st = find(c, &a);
    if (st != KILN_OK) return st;
    kiln_tensor *y = c->out[0];
    if (strcmp(a->name, "value") == 0) {
        size_t bytes = (size_t)kiln_tensor_numel(a->t) * kiln_dtype_size(a->t->dtype);
        if (bytes) memcpy(y->data, a->t->data, bytes);
    } else if (strcmp(a->name, "value_float") == 0) {
        *(float *)y->data = a->type == KILN_ATTR_INT ? (float)a->i : a->f;
    } else if (strcmp(a->name, "value_int") == 0) {
        *(int64_t *)y->data = a->i;
    } else if (strcmp(a->name, "value_floats") == 0) {
        float *p = y->data; // (n)
        for (int k = 0; k < a->n; k++)
            p[k] = a->type == KILN_ATTR_INTS ? (float)a->ints[k] : a->floats[k];
    } else {
        if (a->n) memcpy(y->data, a->ints, (size_t)a->n * sizeof(int64_t));
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *y;
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1.5, -2, 0, 3.25));
    fails += kiln_optest_tensor_attr("Constant", "value",
                                     kt_make(KILN_F32, 2, KT_DIMS(2, 2),
                                             KT_VALS(1.5, -2, 0, 3.25)),
                                     0, NULL, y, KILN_OK, "constant value f32");
    y = kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(1, 0, 1));
    fails += kiln_optest_tensor_attr("Constant", "value",
                                     kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(1, 0, 1)), 0,
                                     NULL, y, KILN_OK, "constant value bool");
    y = kt_scalar(KILN_F32, 2.5);
    fails += kiln_optest("Constant", "value_float=2.5", 0, NULL, 1, &y, 0, 0,
                         "constant value_float");
    y = kt_scalar(KILN_I64, -7);
    fails += kiln_optest("Constant", "value_int=-7", 0, NULL, 1, &y, 0, 0, "constant value_int");
    y = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0.5, -1.25, 4.0));
    fails += kiln_optest("Constant", "value_floats=[0.5,-1.25,4.0]", 0, NULL, 1, &y, 0, 0,
                         "constant value_floats");
    y = kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(3, 0, -1, 12));
    fails += kiln_optest("Constant", "value_ints=[3,0,-1,12]", 0, NULL, 1, &y, 0, 0,
                         "constant value_ints");

    fails += kiln_optest_fails("Constant", "value_string=hello", 0, NULL, 1,
                               KILN_ERR_UNSUPPORTED, "constant value_string");
    fails += kiln_optest_fails("Constant", "", 0, NULL, 1, KILN_ERR_SHAPE, "constant no value");
    fails += kiln_optest_fails("Constant", "value_int=1;value_float=2.0", 0, NULL, 1,
                               KILN_ERR_SHAPE, "constant two values");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_constant = {
    .precision = KILN_PREC_FP32, .prec_flags = KILN_PREC_SOURCE, .out_dtype = {KILN_DT_VALUE},
    .name = "Constant", .min_inputs = 0, .max_inputs = 0, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
