/*
 * roll.c — kiln.Roll (internal op, domain "kiln"): torch.roll of a tensor X of any dtype
 * along some of its axes, Y of X's shape, attributes `axes` and `shifts` (INTS, one shift
 * per axis, distinct axes, negative axes counted from the end):
 *
 *     Y[..., i_a, ...] = X[..., (i_a - shift_a) mod n_a, ...]   for every rolled axis a
 *
 * torch.onnx writes torch.roll(x, s, a) as Concat(Slice(x, -s, end), Slice(x, 0, -s)) on
 * axis a (Swin's shifted windows roll twice per block, on H and on W): three copies of the
 * tensor per axis where one gather does. The layout pass (src/passes/roll.c, run by
 * src/passes/layout.c for device plans) puts it where it finds that pattern, and merges
 * rolls of one tensor on several axes into one node. |shift| must be below the axis's size
 * (or the axis empty), as the Slice-Concat form it stands for requires. Saved to ONNX as
 * that form (onnx_save.c). Follows its input's layout (the CUDA kernel reads NCHW or NHWC).
 * Not differentiable: the pass runs after autograd.
 */
#include "roll.h"

#include "../core/optest.h"

#include <inttypes.h>
#include <string.h>

kiln_status kiln_roll_shifts(kiln_op_ctx *c, const kiln_tensor *x, int64_t *shift) {
    int na = 0, ns = 0;
    const int64_t *axes = kiln_attr_ints(c->node, "axes", &na), *shifts = kiln_attr_ints(c->node, "shifts", &ns);
    KILN_OP_CHECK(c, axes && shifts && na == ns && na >= 1 && na <= x->ndim, KILN_ERR_INVALID_ARGUMENT,
                  "attributes axes and shifts (one shift per axis, at most the rank %d) are required", x->ndim);
    for (int d = 0; d < KILN_MAX_DIMS; d++) shift[d] = 0;
    bool seen[KILN_MAX_DIMS] = {false};
    for (int k = 0; k < na; k++) {
        int64_t a = axes[k];
        KILN_OP_CHECK(c, kiln_norm_axis(&a, x->ndim) && !seen[a], KILN_ERR_INVALID_ARGUMENT,
                      "axis %" PRId64 " is out of range for rank %d or repeated", axes[k], x->ndim);
        seen[a] = true;
        const int64_t n = x->dims[a];
        KILN_OP_CHECK(c, n == 0 || (shifts[k] > -n && shifts[k] < n), KILN_ERR_SHAPE,
                      "shift %" PRId64 " on axis %" PRId64 " of size %" PRId64 " (|shift| below the size is required)",
                      shifts[k], a, n);
        shift[a] = n ? (shifts[k] % n + n) % n : 0;
    }
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE, "input dtype %s is not supported",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 1, KILN_ERR_SHAPE, "input is a scalar (nothing to roll)");
    int64_t shift[KILN_MAX_DIMS];
    kiln_status st = kiln_roll_shifts(c, x, shift);
    if (st) return st;
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

/* Rows of the innermost dim are copied in at most two pieces; the outer index is decoded
 * per row. */
static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    int64_t shift[KILN_MAX_DIMS];
    kiln_status st = kiln_roll_shifts(c, x, shift);
    if (st) return st;
    const int r = x->ndim;
    const size_t es = kiln_dtype_size(x->dtype);
    const int64_t inner = x->dims[r - 1], rows = inner ? kiln_tensor_numel(x) / inner : 0, si = shift[r - 1];
    int64_t str[KILN_MAX_DIMS];
    kiln_strides(r, x->dims, str);
    for (int64_t row = 0; row < rows; row++) {
        int64_t rem = row, src = 0;
        for (int d = r - 2; d >= 0; d--) {
            const int64_t i = rem % x->dims[d];
            rem /= x->dims[d];
            src += ((i - shift[d] + x->dims[d]) % x->dims[d]) * str[d];
        }
        const char *xs = (const char *)x->data + (size_t)src * es;
        char *yd = (char *)y->data + (size_t)(row * inner) * es;
        /* Y[j] = X[(j - si) mod inner]: Y[si..] = X[..inner - si], Y[..si] = X[inner - si..] */
        memcpy(yd + (size_t)si * es, xs, (size_t)(inner - si) * es);
        memcpy(yd, xs + (size_t)(inner - si) * es, (size_t)si * es);
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* numpy.roll(arange(6).reshape(2, 3), 1, axis=1) = [[2, 0, 1], [5, 3, 4]]; shift -1 on
     * axis 0 of the same: [[3, 4, 5], [0, 1, 2]]; both: [[5, 3, 4], [2, 0, 1]] */
    fails += kiln_optest("Roll", "axes=[1];shifts=[1]", 1,
                         (kiln_tensor *[]){kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, 1, 2, 3, 4, 5))}, 1,
                         (kiln_tensor *[]){kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(2, 0, 1, 5, 3, 4))}, 0, 0,
                         "roll by 1 on the last axis");
    fails += kiln_optest("Roll", "axes=[0];shifts=[-1]", 1,
                         (kiln_tensor *[]){kt_make(KILN_I64, 2, KT_DIMS(2, 3), KT_VALS(0, 1, 2, 3, 4, 5))}, 1,
                         (kiln_tensor *[]){kt_make(KILN_I64, 2, KT_DIMS(2, 3), KT_VALS(3, 4, 5, 0, 1, 2))}, 0, 0,
                         "roll by -1 on the first axis, i64");
    fails += kiln_optest("Roll", "axes=[-1,0];shifts=[1,1]", 1,
                         (kiln_tensor *[]){kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, 1, 2, 3, 4, 5))}, 1,
                         (kiln_tensor *[]){kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(5, 3, 4, 2, 0, 1))}, 0, 0,
                         "roll on two axes, a negative axis");
    fails += kiln_optest_fails("Roll", "axes=[1];shifts=[3]", 1,
                               (kiln_tensor *[]){kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL)}, 1, KILN_ERR_SHAPE,
                               "shift as large as the axis");
    fails += kiln_optest_fails("Roll", "axes=[1,1];shifts=[1,1]", 1,
                               (kiln_tensor *[]){kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL)}, 1,
                               KILN_ERR_INVALID_ARGUMENT, "a repeated axis");
    fails += kiln_optest_fails("Roll", "axes=[1]", 1, (kiln_tensor *[]){kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL)}, 1,
                               KILN_ERR_INVALID_ARGUMENT, "no shifts");
    /* for the backend sweep (NCHW and NHWC): Swin's shifted window (-4 on H and W of a
     * 4-D (N, C, H, W) view: the kernel's NHWC form rolls the middle axes with C innermost),
     * the roll back (+4), a roll of the channels, one of an odd-sized last axis, f16 */
    fails += kiln_optest_sweep("Roll", "axes=[2,3];shifts=[-4,-4]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 96, 14, 14), -2, 2, 7201)}, 1,
                               "Swin's shifted window: -4 on H and W");
    fails += kiln_optest_sweep("Roll", "axes=[2,3];shifts=[4,4]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 24, 9, 8), -2, 2, 7202)}, 1,
                               "the roll back: +4 on H and W");
    fails += kiln_optest_sweep("Roll", "axes=[1];shifts=[5]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 19, 3, 5), -2, 2, 7203)}, 1,
                               "a roll of the channels");
    fails += kiln_optest_sweep("Roll", "axes=[2];shifts=[-3]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 13), -2, 2, 7204)}, 1,
                               "rank 3, an odd last axis rolled");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_roll = {
    .precision = KILN_PREC_FOLLOW, .layout = KILN_LAYOUT_FOLLOW,
    .name = "Roll", .domain = "kiln", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
    .max_outputs = 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
