/*
 * row_gather.h — kiln.RowGather's geometry (src/ops/row_gather.c), shared by its CPU
 * reference, the CUDA kernel (src/cuda/movement.cu) and the ONNX saver, so all read the
 * node's attributes by one rule.
 */
#ifndef KILN_OPS_ROW_GATHER_H
#define KILN_OPS_ROW_GATHER_H

#include "../core/internal.h"

/* The stages of one kiln.RowGather on an input X' of shape x (rank rx): X' is X, or with
 * attribute in_nhwc = 1 the 4-D X (N, C, H, W) transposed to (N, H, W, C) (what an NHWC
 * tensor's bytes hold, so that a chain starting at a layout conversion is a row move too);
 *   S = X' padded at the end of each axis by pad[a] (zeros), shape s;
 *   rolled by shift[a] on each axis (torch.roll: S'[i] = S[(i - shift) mod s]);
 *   viewed as V (shape v, rank rv) and permuted: T = transpose(V, perm), shape v[perm[k]];
 *   viewed as W (shape w, rank rw), rolled by oshift[a], cropped to its first y[a] on each
 *   axis: Y', shape y; the output Y is Y', or with out_nhwc = 1 the 4-D Y' (N, H, W, C)
 *   transposed to (N, C, H, W).
 * The innermost dim (row elements) is the same in x, s, v, w and y and never moves: perm
 * keeps the last axis last, and pads, shifts and crops leave it whole. */
typedef struct kiln_row_gather {
    bool in_nhwc, out_nhwc;      /* X read as its (N, H, W, C) order; Y written as (N, H, W, C) */
    int rx, rv, rw;
    int64_t row;                 /* elements of a row: the innermost dim */
    int64_t x[KILN_MAX_DIMS], pad[KILN_MAX_DIMS], s[KILN_MAX_DIMS], shift[KILN_MAX_DIMS];
    int64_t v[KILN_MAX_DIMS];
    int perm[KILN_MAX_DIMS];
    int64_t w[KILN_MAX_DIMS], oshift[KILN_MAX_DIMS], y[KILN_MAX_DIMS];
} kiln_row_gather;

/* The geometry of node c->node on input x, checked: fails naming the node when an attribute
 * is malformed or does not fit x (a view whose size is not S's, a permutation that moves
 * the last axis, a pad, shift or crop of the row axis). view and out_view may hold one -1,
 * the dim that makes the sizes agree (the batch, where the graph's is symbolic). */
kiln_status kiln_row_gather_geometry(kiln_op_ctx *c, const kiln_tensor *x, kiln_row_gather *g);

/* Y's dims (logical: Y' transposed back where out_nhwc). */
void kiln_row_gather_out_dims(const kiln_row_gather *g, int64_t *dims);

/* The row of X' that row r of Y' (0 <= r < rows of Y') reads, or -1 where it reads the
 * padding (a row of zeros). */
int64_t kiln_row_gather_source(const kiln_row_gather *g, int64_t r);

#endif
