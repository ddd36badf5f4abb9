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

#endif
