/* eye_like.c — EyeLike: a 2-D tensor of input 0's shape with ones on the diagonal k
 * (attribute k, default 0: main; > 0 above, < 0 below) and zeros elsewhere; opsets 9 and
 * 22. Its dtype is attribute `dtype` (an ONNX TensorProto type) or input 0's; the input's
 * data is never read. */
#include "../core/optest.h"

#include <string.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, x->ndim == 2, KILN_ERR_SHAPE, "input must be 2-D, got rank %d", x->ndim);
    kiln_dtype dt = x->dtype;
    const kiln_attr *a = kiln_node_attr(c->node, "dtype");
    if (a) {
        KILN_OP_CHECK(c, a->type == KILN_ATTR_INT && a->i > 0 && a->i <= 64 && kiln_dtype_valid((kiln_dtype)a->i),
                      KILN_ERR_UNSUPPORTED, "attribute dtype = %lld is not a dtype kiln supports", (long long)a->i);
        dt = (kiln_dtype)a->i;
    }
    KILN_OP_CHECK(c, kiln_dtype_size(dt) > 0, KILN_ERR_TYPE, "dtype %s is not supported", kiln_dtype_name(dt));
    kiln_tensor_set_shape(c->out[0], dt, 2, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0];
    memset(y->data, 0, kiln_tensor_nbytes(y));
    const int64_t k = kiln_attr_int(c->node, "k", 0), rows = y->dims[0], cols = y->dims[1];
    for (int64_t i = 0; i < rows; i++) {
        const int64_t j = i + k;
        if (j >= 0 && j < cols) kiln_set_f64(y, i * cols + j, 1.0);
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_I32, 2, KT_DIMS(3, 4), NULL);
    kiln_tensor *y = kt_make(KILN_I32, 2, KT_DIMS(3, 4), KT_VALS(1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0));
    fails += kiln_optest("EyeLike", "", 1, &x, 1, &y, 0, 0, "eye_like default");
    x = kt_make(KILN_F32, 2, KT_DIMS(3, 4), NULL);
    y = kt_make(KILN_F64, 2, KT_DIMS(3, 4), KT_VALS(0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1));
    fails += kiln_optest("EyeLike", "k=1;dtype=11", 1, &x, 1, &y, 0, 0, "eye_like k=1 dtype f64");
    x = kt_make(KILN_F32, 2, KT_DIMS(4, 2), NULL);
    y = kt_make(KILN_BOOL, 2, KT_DIMS(4, 2), KT_VALS(0, 0, 0, 0, 1, 0, 0, 1));
    fails += kiln_optest("EyeLike", "k=-2;dtype=9", 1, &x, 1, &y, 0, 0, "eye_like k=-2 bool");
    x = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    fails += kiln_optest("EyeLike", "k=5", 1, &x, 1, &y, 0, 0, "eye_like k past the matrix");
    x = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("EyeLike", "", 1, &x, 1, KILN_ERR_SHAPE, "eye_like rejects 1-D");
    x = kt_make(KILN_F32, 2, KT_DIMS(3, 3), NULL);
    fails += kiln_optest_fails("EyeLike", "dtype=8", 1, &x, 1, KILN_ERR_UNSUPPORTED, "eye_like rejects STRING");
    fails += kiln_optest_sweep("EyeLike", "k=3", 0, 1, (kiln_tensor *[]){kt_make(KILN_F32, 2, KT_DIMS(33, 17), NULL)},
                               1, "eye_like 33x17 k=3");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_eye_like = {
    .precision = KILN_PREC_ANY,
    .name = "EyeLike", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .shape_only_inputs = 1u << 0, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
