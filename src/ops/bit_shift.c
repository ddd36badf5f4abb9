/*
 * bit_shift.c — BitShift: C = A << B (direction="LEFT") or A >> B (direction="RIGHT"),
 * elementwise with numpy (multidirectional) broadcasting; opset 11. A and B have one
 * unsigned integer dtype (uint8, uint16, uint32, uint64). Bits shifted past the width
 * are lost; a shift by the width or more gives 0 (never undefined behaviour).
 */
#include "../core/optest.h"
#include "binary.h"

#include <string.h>

/* uint64 values arrive as their bit pattern; the result is stored modulo the width */
static int64_t shl(int64_t a, int64_t b, bool uns) {
    return (uint64_t)b >= 64 ? 0 : (int64_t)((uint64_t)a << (uint64_t)b);
}
static int64_t shr(int64_t a, int64_t b, bool uns) {
    return (uint64_t)b >= 64 ? 0 : (int64_t)((uint64_t)a >> (uint64_t)b);
}
static const kiln_binary_kernels left = {NULL, NULL, shl}, right = {NULL, NULL, shr};

static kiln_status infer(kiln_op_ctx *c) {
    const char *dir = kiln_attr_string(c->node, "direction", "");
    KILN_OP_CHECK(c, strcmp(dir, "LEFT") == 0 || strcmp(dir, "RIGHT") == 0, KILN_ERR_INVALID_ARGUMENT,
                  "attribute direction='%s' must be \"LEFT\" or \"RIGHT\"", dir);
    const kiln_dtype t = c->in[0]->dtype;
    KILN_OP_CHECK(c, t == KILN_U8 || t == KILN_U16 || t == KILN_U32 || t == KILN_U64, KILN_ERR_TYPE,
                  "input dtype %s is not an unsigned integer type", kiln_dtype_name(t));
    return kiln_binary_infer(c, KILN_BIN_INT);
}

static kiln_status forward(kiln_op_ctx *c) {
    const bool is_left = strcmp(kiln_attr_string(c->node, "direction", ""), "LEFT") == 0;
    return kiln_binary_forward(c, is_left ? &left : &right);
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *in[2], *y;
    /* the ONNX spec's examples */
    in[0] = kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(16, 4, 1));
    in[1] = kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(1, 2, 3));
    y = kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(8, 1, 0));
    fails += kiln_optest("BitShift", "direction=RIGHT", 2, in, 1, &y, 0, 0, "bit_shift right u8");
    in[0] = kt_make(KILN_U32, 1, KT_DIMS(3), KT_VALS(16, 4, 1));
    in[1] = kt_make(KILN_U32, 1, KT_DIMS(3), KT_VALS(1, 2, 3));
    y = kt_make(KILN_U32, 1, KT_DIMS(3), KT_VALS(32, 16, 8));
    fails += kiln_optest("BitShift", "direction=LEFT", 2, in, 1, &y, 0, 0, "bit_shift left u32");
    /* bits past the width are lost; shifts of the width or more give 0 */
    in[0] = kt_make(KILN_U8, 1, KT_DIMS(4), KT_VALS(255, 129, 1, 255));
    in[1] = kt_make(KILN_U8, 1, KT_DIMS(4), KT_VALS(1, 7, 8, 200));
    y = kt_make(KILN_U8, 1, KT_DIMS(4), KT_VALS(254, 128, 0, 0));
    fails += kiln_optest("BitShift", "direction=LEFT", 2, in, 1, &y, 0, 0, "bit_shift left u8 overflow");
    in[0] = kt_make(KILN_U64, 1, KT_DIMS(2), KT_VALS(18446744073709551615.0, 18446744073709551615.0));
    in[1] = kt_scalar(KILN_U64, 63);
    y = kt_make(KILN_U64, 1, KT_DIMS(2), KT_VALS(1, 1));
    fails += kiln_optest("BitShift", "direction=RIGHT", 2, in, 1, &y, 0, 0, "bit_shift right u64 broadcast");
    in[0] = kt_make(KILN_U16, 2, KT_DIMS(2, 1), KT_VALS(1, 3));
    in[1] = kt_make(KILN_U16, 1, KT_DIMS(2), KT_VALS(0, 15));
    y = kt_make(KILN_U16, 2, KT_DIMS(2, 2), KT_VALS(1, 32768, 3, 32768));
    fails += kiln_optest("BitShift", "direction=LEFT", 2, in, 1, &y, 0, 0, "bit_shift left u16 (2,1),(2)");
    in[0] = kt_make(KILN_I32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("BitShift", "direction=LEFT", 2, in, 1, KILN_ERR_TYPE, "bit_shift rejects i32");
    in[0] = kt_make(KILN_U8, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_U8, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("BitShift", "direction=UP", 2, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "bit_shift rejects direction=UP");
    in[0] = kt_make(KILN_U8, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_U8, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("BitShift", "", 2, in, 1, KILN_ERR_INVALID_ARGUMENT, "bit_shift needs direction");
    fails += kiln_optest_sweep("BitShift", "direction=LEFT", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U32, 3, KT_DIMS(3, 17, 19), 0, 100000, 5801),
                                                 kt_rand(KILN_U32, 1, KT_DIMS(19), 0, 40, 5802)},
                               1, "bit_shift random u32, shifts up to 39");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_bit_shift = {
    .precision = KILN_PREC_ANY,
    .name = "BitShift", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
