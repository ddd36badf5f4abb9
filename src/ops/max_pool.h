/*
 * max_pool.h — MaxPool's pooling and its gradient (src/ops/max_pool.c) for the ops that
 * compute them inside a fusion (src/ops/max_pool_dropout.c), so that the fused op picks
 * the same maxima, routes gradients to the same elements and rounds the same way.
 * Windows come from kiln_pool_infer / kiln_pool_grad_infer (conv_common.h).
 */
#ifndef KILN_OPS_MAX_POOL_H
#define KILN_OPS_MAX_POOL_H

#include "conv_common.h"

/* MaxPool's kiln attribute picks = 1 (the fuse-pool pass, training graphs): output 1 is
 * not Indices but the picks, uint8 of Y's shape: the tap (j0*k1 + j1)*k2 + j2 of each
 * window (slots right-aligned, unused ones of size 1) that the forward takes, the first
 * maximum in row-major tap order or the first NaN; KILN_MAXPOOL_NO_PICK for a window with
 * no tap inside X. kiln.MaxPoolGrad's optional input 2 takes them: dY then goes to each
 * window's pick and X's values are not read (its shape still gives dX's). The pair is
 * internal to a backend's plan: the CUDA kernels index in 32 bits, and past 2^30 elements
 * their forward writes NO_PICK everywhere and their gradient finds the picks in X. */
#define KILN_MAXPOOL_NO_PICK 255
static inline bool kiln_max_pool_picks(const kiln_node *n) { return kiln_attr_int(n, "picks", 0) != 0; }

/* Scratch bytes kiln_max_pool_run needs: f16 / bf16 / int8 / uint8 X and Y staged in f32. */
size_t kiln_max_pool_workspace(const kiln_tensor *x, const kiln_tensor *y);
/* y (N, C, grid...) = the maximum of x (N, C, img...) over each window of w (NaN wins;
 * an empty window gives the lowest value); ind (y's shape) receives the flat index of
 * each maximum (column-major over the last two dims with colmajor), or is NULL; picks
 * (y's shape) each window's picked tap (above), or is NULL. ws: kiln_max_pool_workspace
 * bytes, 64-byte aligned. */
void kiln_max_pool_run(const kiln_window *w, const kiln_tensor *x, kiln_tensor *y, int64_t *ind, bool colmajor,
                       uint8_t *picks, char *ws);

/* Scratch bytes kiln_max_pool_grad_run needs. */
size_t kiln_max_pool_grad_workspace(const kiln_tensor *dy, const kiln_tensor *x, const kiln_tensor *dx);
/* dx (x's shape) = kiln.MaxPoolGrad(dy, x): each window's dy added at the element the
 * forward picks (the first maximum, or the first NaN), recomputed from x; or, with picks
 * (dy's shape; NULL: none), at each window's tap picks names (a tap outside x: nowhere),
 * x's values unread. */
void kiln_max_pool_grad_run(const kiln_window *w, const kiln_tensor *dy, const kiln_tensor *x, const uint8_t *picks,
                            kiln_tensor *dx, char *ws);

#endif
