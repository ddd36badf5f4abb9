/* reverse_sequence.c — ReverseSequence(input, sequence_lens): for each batch entry b (dim
 * batch_axis, default 1) the first sequence_lens[b] elements along time_axis (default 0)
 * reversed, the rest copied; opset 10. batch_axis and time_axis are 0 and 1 in either
 * order; sequence_lens is int64 of the batch's size, each in [0, time steps] (checked at
 * run time, KILN_ERR_INVALID_ARGUMENT). Any dtype of input, rank >= 2. */
#include "../core/optest.h"

#include <inttypes.h>
#include <string.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *len = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE, "input dtype %s is not supported",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 2, KILN_ERR_SHAPE, "input must have rank >= 2, got %d", x->ndim);
    const int64_t ba = kiln_attr_int(c->node, "batch_axis", 1), ta = kiln_attr_int(c->node, "time_axis", 0);
    KILN_OP_CHECK(c, (ba == 0 && ta == 1) || (ba == 1 && ta == 0), KILN_ERR_INVALID_ARGUMENT,
                  "batch_axis=%" PRId64 " and time_axis=%" PRId64 " must be 0 and 1 in some order", ba, ta);
    KILN_OP_CHECK(c, len->dtype == KILN_I64 && len->ndim == 1 && len->dims[0] == x->dims[ba], KILN_ERR_SHAPE,
                  "sequence_lens must be int64 of shape (%" PRId64 ")", x->dims[ba]);
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *len = c->in[1];
    kiln_tensor *y = c->out[0];
    const int64_t ba = kiln_attr_int(c->node, "batch_axis", 1), ta = kiln_attr_int(c->node, "time_axis", 0);
    const int64_t B = x->dims[ba], T = x->dims[ta];
    for (int64_t b = 0; b < B; b++) {
        const int64_t l = ((const int64_t *)len->data)[b];
        KILN_OP_CHECK(c, l >= 0 && l <= T, KILN_ERR_INVALID_ARGUMENT,
                      "sequence_lens[%" PRId64 "] = %" PRId64 " is outside [0, %" PRId64 "]", b, l, T);
    }
    const int64_t inner = kiln_tensor_numel(x) / (B * T > 0 ? B * T : 1);
    const size_t row = (size_t)inner * kiln_dtype_size(x->dtype);
    for (int64_t b = 0; b < B; b++) {
        const int64_t l = ((const int64_t *)len->data)[b];
        for (int64_t t = 0; t < T; t++) {
            const int64_t src = t < l ? l - 1 - t : t;
            /* (t, b) or (b, t) in the first two dims */
            const int64_t yo = ta == 0 ? t * B + b : b * T + t, xo = ta == 0 ? src * B + b : b * T + src;
            memcpy((char *)y->data + (size_t)yo * row, (const char *)x->data + (size_t)xo * row, row);
        }
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *in[2], *y;
    /* the ONNX spec's examples */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(4, 4), KT_VALS(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(4, 3, 2, 1));
    y = kt_make(KILN_F32, 2, KT_DIMS(4, 4), KT_VALS(3, 6, 9, 12, 2, 5, 8, 13, 1, 4, 10, 14, 0, 7, 11, 15));
    fails += kiln_optest("ReverseSequence", "time_axis=0;batch_axis=1", 2, in, 1, &y, 0, 0,
                         "reverse_sequence time major");
    in[0] = kt_make(KILN_I32, 2, KT_DIMS(4, 4), KT_VALS(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 2, 3, 4));
    y = kt_make(KILN_I32, 2, KT_DIMS(4, 4), KT_VALS(0, 1, 2, 3, 5, 4, 6, 7, 10, 9, 8, 11, 15, 14, 13, 12));
    fails += kiln_optest("ReverseSequence", "time_axis=1;batch_axis=0", 2, in, 1, &y, 0, 0,
                         "reverse_sequence batch major");
    /* rows of 2 elements: (T=2, B=1, 2) */
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 1, 2), KT_VALS(1, 2, 3, 4));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(2));
    y = kt_make(KILN_F32, 3, KT_DIMS(2, 1, 2), KT_VALS(3, 4, 1, 2));
    fails += kiln_optest("ReverseSequence", "", 2, in, 1, &y, 0, 0, "reverse_sequence rows");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, 1));
    fails += kiln_optest_fails("ReverseSequence", "", 2, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "reverse_sequence length above T");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("ReverseSequence", "", 2, in, 1, KILN_ERR_SHAPE, "reverse_sequence lens shape");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("ReverseSequence", "batch_axis=0;time_axis=0", 2, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "reverse_sequence same axes");
    fails += kiln_optest_sweep("ReverseSequence", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(9, 5, 7), -3, 3, 6701),
                                                 kt_make(KILN_I64, 1, KT_DIMS(5), KT_VALS(0, 9, 4, 1, 7))},
                               1, "reverse_sequence random");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_reverse_sequence = {
    .precision = KILN_PREC_FOLLOW,
    .name = "ReverseSequence", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
