/* shape.c — Shape: the dims of the input as a 1-D int64 tensor (opsets 11..21). From
 * opset 15 the `start` and `end` attributes select dims[start:end]: negative values add
 * the rank and both are clamped to [0, rank]. Any input dtype; its data is not read. */
#include "../core/optest.h"

static void range_of(const kiln_op_ctx *c, int64_t *start, int64_t *end) {
    int64_t r = c->in[0]->ndim;
    *start = 0;
    *end = r;
    if (c->node->opset >= 15) {
        *start = kiln_attr_int(c->node, "start", 0);
        *end = kiln_attr_int(c->node, "end", r);
    }
    if (*start < 0) *start += r;
    if (*end < 0) *end += r;
    *start = *start < 0 ? 0 : *start > r ? r : *start;
    *end = *end < 0 ? 0 : *end > r ? r : *end;
    if (*end < *start) *end = *start;
}

static kiln_status infer(kiln_op_ctx *c) {
    int64_t start, end;
    range_of(c, &start, &end);
    int64_t n = end - start;
    kiln_tensor_set_shape(c->out[0], KILN_I64, 1, &n);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    int64_t start, end;
    range_of(c, &start, &end);
    int64_t *y = c->out[0]->data; // (end - start)
    for (int64_t d = start; d < end; d++) y[d - start] = c->in[0]->dims[d];
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x, *y;
    x = kt_make(KILN_F32, 3, KT_DIMS(3, 4, 5), NULL);
    y = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(3, 4, 5));
    fails += kiln_optest("Shape", "", 1, &x, 1, &y, 0, 0, "shape");
    x = kt_make(KILN_BOOL, 3, KT_DIMS(3, 4, 5), NULL);
    y = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(4, 5));
    fails += kiln_optest("Shape", "start=1", 1, &x, 1, &y, 0, 0, "shape start 1");
    x = kt_make(KILN_F32, 3, KT_DIMS(3, 4, 5), NULL);
    y = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(4));
    fails += kiln_optest("Shape", "start=-2;end=-1", 1, &x, 1, &y, 0, 0, "shape -2:-1");
    x = kt_make(KILN_F32, 3, KT_DIMS(3, 4, 5), NULL);
    y = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(3, 4, 5));
    fails += kiln_optest("Shape", "start=-10;end=10", 1, &x, 1, &y, 0, 0, "shape clipped");
    x = kt_make(KILN_F32, 3, KT_DIMS(3, 4, 5), NULL);
    y = kt_make(KILN_I64, 1, KT_DIMS(0), NULL);
    fails += kiln_optest("Shape", "start=2;end=1", 1, &x, 1, &y, 0, 0, "shape empty range");
    x = kt_make(KILN_F32, 3, KT_DIMS(3, 4, 5), NULL);
    y = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(3, 4, 5));
    fails += kiln_optest_opset("Shape", "start=1", 13, 1, &x, 1, &y, 0, 0,
                               "shape opset 13 ignores start");
    x = kt_scalar(KILN_F32, 1);
    y = kt_make(KILN_I64, 1, KT_DIMS(0), NULL);
    fails += kiln_optest("Shape", "", 1, &x, 1, &y, 0, 0, "shape of a scalar");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_shape = {
    .precision = KILN_PREC_ANY, .out_dtype = {KILN_DT_I64},
    .name = "Shape", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .shape_only_inputs = 1u << 0, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
