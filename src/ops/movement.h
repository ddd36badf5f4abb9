/*
 * movement.h — shared machinery for the data-movement ops (Reshape, Transpose, Slice,
 * Expand, Tile, Pad, Resize-nearest, Concat, Split, Gather...). These ops move whole
 * elements and never look at their values, so every dtype (bool included) is handled
 * as opaque elements of kiln_dtype_size(dtype) bytes.
 *
 * Most of them are one gather: output element (j0, ..., jn-1) is the input element at
 * offset maps[0][j0] + ... + maps[n-1][jn-1], one small offset table per output axis
 * (Transpose: j * stride of the permuted axis; Slice: (start + j*step) * stride; Expand:
 * 0 on broadcast axes; Tile: (j % dim) * stride; Pad edge/reflect: a clamped/reflected
 * index; Resize nearest: the nearest source index). The tables take sum(dims) int64s of
 * workspace instead of per-element index arithmetic.
 */
#ifndef KILN_OPS_MOVEMENT_H
#define KILN_OPS_MOVEMENT_H

#include "../core/internal.h"

/* Read integer input i (int32 or int64, rank 0 or 1, values known) into vals[0..*n).
 * `what` names the input in messages ("shape", "starts"...). Fails with KILN_ERR_TYPE on
 * another dtype and KILN_ERR_SHAPE on a higher rank or more than max values. */
kiln_status kiln_read_ints(kiln_op_ctx *c, int i, const char *what, int64_t *vals, int max,
                           int *n);

/* out[0] = in[0] byte for byte (Reshape, Flatten, Squeeze, Unsqueeze, Identity). Does
 * nothing when the planner made them share storage (alias_outputs). */
kiln_status kiln_copy_input0(kiln_op_ctx *c);

/* "[2,3,4]" into buf; returns buf. */
char *kiln_dims_str(int ndim, const int64_t *dims, char *buf, size_t n);

/* Bytes of workspace the offset tables of an output of shape (ndim, dims) take. */
size_t kiln_axis_maps_bytes(int ndim, const int64_t *dims);
/* Point maps[d] (d < ndim) at dims[d] int64s each, carved out of ws (which holds at
 * least kiln_axis_maps_bytes(ndim, dims) bytes). */
void kiln_axis_maps_carve(int64_t **maps, void *ws, int ndim, const int64_t *dims);

/* dst (dims, row-major, contiguous) element (j0..jn-1) = src element at offset
 * sum_d maps[d][jd] (in elements). An offset < 0 on any axis means "outside the source":
 * that element is *fill (es bytes), which may be NULL only when no offset is negative.
 * ndim 0 copies one element. es must be the dtype size. */
void kiln_gather_axes(void *dst, const void *src, size_t es, int ndim, const int64_t *dims,
                      const int64_t *const *maps, const void *fill);

/* Test helper for ops whose attribute is a tensor (Constant, ConstantOfShape), which the
 * attribute text of optest.h cannot express: runs op (newest opset) with the attribute
 * attr = value plus inputs in[0..n_in), compares output 0 with expect. Frees value, in[]
 * and expect. Returns 0 on success, 1 on failure; with want != KILN_OK (expect NULL) it
 * expects the op to be rejected with that status instead. */
int kiln_optest_tensor_attr(const char *op, const char *attr, kiln_tensor *value, int n_in,
                            kiln_tensor **in, kiln_tensor *expect, kiln_status want,
                            const char *label);

/* ---------------------------------------------------------------- gradients */

/* The gradient of an op that only reshapes `like` (Reshape, Flatten, Squeeze, Unsqueeze):
 * Reshape(grad, Shape(like)). Shape folds when the plan is built and Reshape is a view, so
 * no bytes move. Returns the value index, or -1 (message on the context). */
int kiln_grad_reshape_like(kiln_grad_ctx *g, int grad, int like);

/* KILN_ERR_UNSUPPORTED naming input k (`what`: "shape", "indices"...) when the rule is
 * asked for its gradient: such inputs are integers that pick elements or shapes. */
kiln_status kiln_grad_refuse(kiln_grad_ctx *g, int k, const char *what);

/* Bytes of workspace kiln_scatter_add_axes needs for dst: f16 and bf16 accumulate in
 * doubles (one per element of dst), f32 and f64 in place. */
size_t kiln_scatter_add_bytes(const kiln_tensor *dst);

/* The adjoint of kiln_gather_axes, for the gradients of ops that read an input element
 * several times (Tile, Pad reflect/edge/wrap): dst = 0, then every element (j0..jn-1) of
 * src (row-major, contiguous) with all maps[d][jd] >= 0 is added to dst at offset
 * sum_d maps[d][jd]. src and dst have the same float dtype; maps has one table per axis
 * of src. ws: kiln_scatter_add_bytes(dst) bytes. */
void kiln_scatter_add_axes(kiln_tensor *dst, const kiln_tensor *src, const int64_t *const *maps,
                           void *ws);

/* Test helper for gradient rules, through autograd and a session: op (newest opset when
 * opset is 0) runs on in[0] (a graph input, the one differentiated) and in[1..n_in)
 * (initializers; NULL: missing) with n_out outputs; only output `used` reaches the loss
 * sum(Y_used * R) (used = -1: every output, concatenated back along the node's `axis`
 * first). dL/d(in[0]) must equal want exactly; with `view` it must also share the bytes
 * of dL/dY (the rule made no copy). Frees in[], r and want. Returns 0 on success. */
int kiln_grad_route_check(const char *op, const char *attrs, int opset, int n_in,
                          kiln_tensor **in, int n_out, int used, kiln_tensor *r,
                          kiln_tensor *want, bool view, const char *label);

#endif
