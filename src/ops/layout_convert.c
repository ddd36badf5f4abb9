/*
 * layout_convert.c — kiln.ToNHWC and kiln.ToNCHW (internal ops, domain "kiln"): change the
 * memory layout of a 4-D tensor, X (N, C, H, W) -> Y (N, C, H, W), any dtype.
 *
 * Dimensions are always logical NCHW; only the bytes move. The layout pass
 * (src/passes/layout.c) inserts these nodes where a chain of NHWC kernels meets NCHW
 * ones on a device backend, and each device kernel reads the format of its tensors. As
 * functions they are identities, and so is their CPU reference (a copy): the CPU backend
 * keeps every tensor NCHW, which lets tests check on the CPU that the layout pass leaves
 * the function unchanged. Not differentiable (inference graphs only).
 *
 * kiln.ToNHWC also takes two optional attributes, so that the chain at a network's input
 * (Cast to f16, Pad adding zero channels for the tensor cores, the conversion) is one pass
 * over the data (the layout pass folds such a Cast and Pad into the conversion):
 *   to             the output dtype (default: X's): elements are converted by Cast's
 *                  rules (src/ops/cast.c; floats round to nearest even);
 *   zero_channels  Z >= 0 channels appended to dim 1 (default 0), all bits zero (+0 for
 *                  floats), as Pad with a zero constant at the end of dim 1 gives. A count
 *                  rather than the padded total, like Pad's pads: folding a Pad needs no
 *                  static channel count.
 * So Y (N, C + Z, H, W) of dtype `to` = Pad(Cast(X, to), Z zero channels at the end of
 * dim 1). kiln.ToNCHW takes neither (rejected: nothing needs the inverse).
 */
#include "../core/optest.h"
#include "cast.h"
#include "movement.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool is_to_nhwc(const kiln_node *n) { return strcmp(n->op_type, "ToNHWC") == 0; }

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE, "input dtype %s is not supported",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim == 4, KILN_ERR_SHAPE, "input has rank %d; layouts are defined for 4-D tensors",
                  x->ndim);
    const kiln_attr *to = kiln_node_attr(c->node, "to"), *zc = kiln_node_attr(c->node, "zero_channels");
    KILN_OP_CHECK(c, is_to_nhwc(c->node) || (!to && !zc), KILN_ERR_INVALID_ARGUMENT,
                  "attributes 'to' and 'zero_channels' belong to kiln.ToNHWC");
    kiln_dtype dt = x->dtype;
    if (to) {
        KILN_OP_CHECK(c, to->type == KILN_ATTR_INT, KILN_ERR_INVALID_ARGUMENT, "attribute 'to' must be an integer");
        KILN_OP_CHECK(c, to->i > 0 && to->i <= 64 && kiln_dtype_valid((kiln_dtype)to->i), KILN_ERR_UNSUPPORTED,
                      "attribute 'to' = %lld is not a dtype kiln supports", (long long)to->i);
        dt = (kiln_dtype)to->i;
    }
    int64_t dims[4] = {x->dims[0], x->dims[1], x->dims[2], x->dims[3]};
    if (zc) {
        KILN_OP_CHECK(c, zc->type == KILN_ATTR_INT && zc->i >= 0 && zc->i <= INT32_MAX, KILN_ERR_INVALID_ARGUMENT,
                      "attribute 'zero_channels' must be an integer in [0, 2^31)");
        dims[1] += zc->i;
    }
    kiln_tensor_set_shape(c->out[0], dt, 4, dims);
    return KILN_OK;
}

/* Scratch for X converted to Y's dtype, when they differ. */
static size_t workspace(const kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *y = c->out[0];
    if (x->dtype == y->dtype) return 0;
    return (size_t)kiln_tensor_numel(x) * kiln_dtype_size(y->dtype);
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    if (x->dtype == y->dtype && x->dims[1] == y->dims[1]) return kiln_copy_input0(c);
    const kiln_tensor *src = x;
    kiln_tensor cast;
    if (x->dtype != y->dtype) { /* Cast's rules, into the workspace */
        cast = *x;
        cast.dtype = y->dtype;
        cast.data = c->workspace;
        cast.owns_data = false;
        kiln_cast_convert(x, &cast);
        src = &cast;
    }
    /* each image: its C planes, then Cy - C zero planes (the CPU backend keeps NCHW) */
    const size_t plane = (size_t)(x->dims[2] * x->dims[3]) * kiln_dtype_size(y->dtype);
    const size_t in_img = plane * (size_t)x->dims[1], out_img = plane * (size_t)y->dims[1];
    for (int64_t n = 0; n < x->dims[0]; n++) {
        char *dst = (char *)y->data + (size_t)n * out_img;
        if (in_img) memcpy(dst, (const char *)src->data + (size_t)n * in_img, in_img);
        if (out_img > in_img) memset(dst + in_img, 0, out_img - in_img);
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
/* One op, both directions: the values must come through unchanged in every dtype. */
static int test_op(const char *op) {
    int fails = 0;
    char label[64];
    const double v[] = {-1, 0.5, 2, -3, 4.5, -0.25, 7, 8, 9, -10, 11, 12};
    for (int k = 0; k < 4; k++) {
        const kiln_dtype dt[] = {KILN_F32, KILN_F16, KILN_I64, KILN_BOOL};
        const double *vals = dt[k] == KILN_BOOL ? KT_VALS(1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0) : v;
        kiln_tensor *x = kt_make(dt[k], 4, KT_DIMS(1, 2, 3, 2), vals);
        kiln_tensor *y = kt_make(dt[k], 4, KT_DIMS(1, 2, 3, 2), vals);
        snprintf(label, sizeof label, "%s %s identity", op, kiln_dtype_name(dt[k]));
        fails += kiln_optest_opset(op, "", 0, 1, &x, 1, &y, 0, 0, label);
    }
    kiln_tensor *e = kt_make(KILN_F32, 4, KT_DIMS(2, 0, 3, 3), NULL);
    kiln_tensor *ey = kt_make(KILN_F32, 4, KT_DIMS(2, 0, 3, 3), NULL);
    snprintf(label, sizeof label, "%s empty", op);
    fails += kiln_optest_opset(op, "", 0, 1, &e, 1, &ey, 0, 0, label);
    kiln_tensor *r3 = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), NULL);
    snprintf(label, sizeof label, "%s rejects rank 3", op);
    fails += kiln_optest_fails(op, "", 1, &r3, 1, KILN_ERR_SHAPE, label);
    return fails;
}

/* ToNHWC's `to` and `zero_channels`: expected values worked out by hand (round to nearest even
 * in the target format), every one exactly representable there. */
static int test_to_nhwc(void) {
    int fails = test_op("ToNHWC");
    /* f32 -> f16, 2 channels padded to 4. 1/3 = 1.0101010101|0101..b x 2^-2 rounds down
     * to 1365/4096; 0.1f: mantissa 0.6 x 1024 = 614.4 -> 614, 1638/16384; 65519 lies below
     * the midpoint 65520 between 65504 (f16's largest) and 2^16: 65504; 70000 overflows to
     * inf; 1e-8 is under half the smallest subnormal (2^-24 / 2): 0. */
    kiln_tensor *in[1], *want[1];
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 1, 3), KT_VALS(1.0 / 3, -2.5, 65519, 1e-8, 0.1, 70000));
    want[0] = kt_make(KILN_F16, 4, KT_DIMS(1, 4, 1, 3),
                      KT_VALS(1365.0 / 4096, -2.5, 65504, 0, 1638.0 / 16384, INFINITY, 0, 0, 0, 0, 0, 0));
    fails += kiln_optest_opset("ToNHWC", "to=10;zero_channels=2", 0, 1, in, 1, want, 0, 0, "ToNHWC f32 to f16, 2 to 4 channels");
    /* f32 -> bf16: 1/3 keeps 7 bits 0101010, the rest 1010..b is above half: up, 171/512;
     * 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even, 1; 1 + 3 x 2^-8 is a tie: up
     * to the even 1 + 2^-6. Two images (the zero planes follow each). */
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(2, 1, 1, 3),
                    KT_VALS(1.0 / 3, 1 + 1.0 / 256, 1 + 3.0 / 256, -4, 0.5, -0.125));
    want[0] = kt_make(KILN_BF16, 4, KT_DIMS(2, 3, 1, 3),
                      KT_VALS(171.0 / 512, 1, 1 + 1.0 / 64, 0, 0, 0, 0, 0, 0, -4, 0.5, -0.125, 0, 0, 0, 0, 0, 0));
    fails += kiln_optest_opset("ToNHWC", "to=16;zero_channels=2", 0, 1, in, 1, want, 0, 0, "ToNHWC f32 to bf16, 1 to 3 channels");
    /* f16 -> f32 is exact; channels stay */
    in[0] = kt_make(KILN_F16, 4, KT_DIMS(1, 2, 2, 1), KT_VALS(1638.0 / 16384, -65504, 3.0 / 1024, 7));
    want[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 1), KT_VALS(1638.0 / 16384, -65504, 3.0 / 1024, 7));
    fails += kiln_optest_opset("ToNHWC", "to=1", 0, 1, in, 1, want, 0, 0, "ToNHWC f16 to f32");
    /* channels only, an integer dtype */
    in[0] = kt_make(KILN_I64, 4, KT_DIMS(2, 2, 1, 2), KT_VALS(1, -2, 3, 4, 5, 6, -7, 8));
    want[0] = kt_make(KILN_I64, 4, KT_DIMS(2, 3, 1, 2), KT_VALS(1, -2, 3, 4, 0, 0, 5, 6, -7, 8, 0, 0));
    fails += kiln_optest_opset("ToNHWC", "zero_channels=1", 0, 1, in, 1, want, 0, 0, "ToNHWC i64, 2 to 3 channels");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 2, 2), NULL);
    fails += kiln_optest_fails("ToNHWC", "zero_channels=-1", 1, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "ToNHWC rejects a negative count");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 2, 2), NULL);
    fails += kiln_optest_fails("ToNHWC", "to=8", 1, in, 1, KILN_ERR_UNSUPPORTED, "ToNHWC rejects to=STRING");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 5049)},
                               1, "tonhwc small f32");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 5050)},
                               1, "tonhwc small i64");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 5051)},
                               1, "tonhwc small u8");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 40, 33, 35), -2, 2, 5055)},
                               1, "tonhwc several tiles f32");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 40, 33, 35), -2, 2, 5056)},
                               1, "tonhwc several tiles i64");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 40, 33, 35), -2, 2, 5057)},
                               1, "tonhwc several tiles u8");
    /* wide pixels, the vectorized tiles' path (the plane a multiple of 8 elements): maxvit_t's
     * 64 channels, and back; an odd plane (single-element tiles) */
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 64, 14, 14), -2, 2, 5058)},
                               1, "tonhwc 64 channels, vector tiles");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 72, 6, 12), -2, 2, 5059)},
                               1, "tonchw 72 channels, vector tiles");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 40, 7, 9), -2, 2, 5060)},
                               1, "tonchw 40 channels, an odd plane, one image");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 1, 4, 4), -2, 2, 5061)},
                               1, "tonhwc C = 1 f32");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 1, 4, 4), -2, 2, 5062)},
                               1, "tonhwc C = 1 i64");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 1, 4, 4), -2, 2, 5063)},
                               1, "tonhwc C = 1 u8");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 8, 1, 1), -2, 2, 5067)},
                               1, "tonhwc H*W = 1 f32");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(3, 8, 1, 1), -2, 2, 5068)},
                               1, "tonhwc H*W = 1 i64");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(3, 8, 1, 1), -2, 2, 5069)},
                               1, "tonhwc H*W = 1 u8");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 8, 9, 13), -2, 2, 5073)},
                               1, "tonhwc C = 8 f32");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(3, 8, 9, 13), -2, 2, 5074)},
                               1, "tonhwc C = 8 i64");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(3, 8, 9, 13), -2, 2, 5075)},
                               1, "tonhwc C = 8 u8");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 7, 11), -2, 2, 5079)},
                               1, "tonhwc C = 16 f32");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 16, 7, 11), -2, 2, 5080)},
                               1, "tonhwc C = 16 i64");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 16, 7, 11), -2, 2, 5081)},
                               1, "tonhwc C = 16 u8");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 33, 3, 5), -2, 2, 5085)},
                               1, "tonhwc C = 33, one tile row f32");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 33, 3, 5), -2, 2, 5086)},
                               1, "tonhwc C = 33, one tile row i64");
    fails += kiln_optest_sweep("ToNHWC", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 33, 3, 5), -2, 2, 5087)},
                               1, "tonhwc C = 33, one tile row u8");
    fails += kiln_optest_sweep("ToNHWC", "zero_channels=5", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 6, 7), -2, 2, 5091)},
                               1, "tonhwc 3 to 8 channels f32");
    fails += kiln_optest_sweep("ToNHWC", "zero_channels=5", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 3, 6, 7), -2, 2, 5092)},
                               1, "tonhwc 3 to 8 channels i64");
    fails += kiln_optest_sweep("ToNHWC", "zero_channels=5", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 3, 6, 7), -2, 2, 5093)},
                               1, "tonhwc 3 to 8 channels u8");
    fails += kiln_optest_sweep("ToNHWC", "zero_channels=2", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 6, 7), -2, 2, 5094)},
                               1, "tonhwc 3 to 5 channels f32");
    fails += kiln_optest_sweep("ToNHWC", "zero_channels=2", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 3, 6, 7), -2, 2, 5095)},
                               1, "tonhwc 3 to 5 channels i64");
    fails += kiln_optest_sweep("ToNHWC", "zero_channels=2", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 3, 6, 7), -2, 2, 5096)},
                               1, "tonhwc 3 to 5 channels u8");
    fails += kiln_optest_sweep("ToNHWC", "zero_channels=30", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 10, 6, 7), -2, 2, 5097)},
                               1, "tonhwc 10 to 40 channels f32");
    fails += kiln_optest_sweep("ToNHWC", "zero_channels=30", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 10, 6, 7), -2, 2, 5098)},
                               1, "tonhwc 10 to 40 channels i64");
    fails += kiln_optest_sweep("ToNHWC", "zero_channels=30", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 10, 6, 7), -2, 2, 5099)},
                               1, "tonhwc 10 to 40 channels u8");
    return fails;
}

static int test_to_nchw(void) {
    int fails = test_op("ToNCHW");
    kiln_tensor *x = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 2, 2), NULL);
    fails += kiln_optest_fails("ToNCHW", "zero_channels=5", 1, &x, 1, KILN_ERR_INVALID_ARGUMENT,
                               "ToNCHW rejects zero_channels");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 5052)},
                               1, "tonchw small f32");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 5053)},
                               1, "tonchw small i64");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 5054)},
                               1, "tonchw small u8");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 40, 33, 35), -2, 2, 5058)},
                               1, "tonchw several tiles f32");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 40, 33, 35), -2, 2, 5059)},
                               1, "tonchw several tiles i64");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 40, 33, 35), -2, 2, 5060)},
                               1, "tonchw several tiles u8");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 1, 4, 4), -2, 2, 5064)},
                               1, "tonchw C = 1 f32");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 1, 4, 4), -2, 2, 5065)},
                               1, "tonchw C = 1 i64");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 1, 4, 4), -2, 2, 5066)},
                               1, "tonchw C = 1 u8");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 8, 1, 1), -2, 2, 5070)},
                               1, "tonchw H*W = 1 f32");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(3, 8, 1, 1), -2, 2, 5071)},
                               1, "tonchw H*W = 1 i64");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(3, 8, 1, 1), -2, 2, 5072)},
                               1, "tonchw H*W = 1 u8");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 8, 9, 13), -2, 2, 5076)},
                               1, "tonchw C = 8 f32");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(3, 8, 9, 13), -2, 2, 5077)},
                               1, "tonchw C = 8 i64");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(3, 8, 9, 13), -2, 2, 5078)},
                               1, "tonchw C = 8 u8");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 7, 11), -2, 2, 5082)},
                               1, "tonchw C = 16 f32");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 16, 7, 11), -2, 2, 5083)},
                               1, "tonchw C = 16 i64");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 16, 7, 11), -2, 2, 5084)},
                               1, "tonchw C = 16 u8");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 33, 3, 5), -2, 2, 5088)},
                               1, "tonchw C = 33, one tile row f32");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 33, 3, 5), -2, 2, 5089)},
                               1, "tonchw C = 33, one tile row i64");
    fails += kiln_optest_sweep("ToNCHW", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 33, 3, 5), -2, 2, 5090)},
                               1, "tonchw C = 33, one tile row u8");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_to_nhwc = {
    .precision = KILN_PREC_FOLLOW,
    .name = "ToNHWC", .domain = "kiln", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
    .max_outputs = 1, .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace, .test = KILN_OP_TESTS(test_to_nhwc),
};

const kiln_op_def kiln_op_to_nchw = {
    .precision = KILN_PREC_FOLLOW,
    .name = "ToNCHW", .domain = "kiln", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
    .max_outputs = 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test_to_nchw),
};
