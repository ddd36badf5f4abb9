/*
 * max_pool.h — MaxPool's pooling and its gradient (src/ops/max_pool.c) for the ops that
 * compute them inside a fusion (src/ops/max_pool_dropout.c), so that the fused op picks
 * the same maxima, routes gradients to the same elements and rounds the same way.
 * Windows come from kiln_pool_infer / kiln_pool_grad_infer (conv_common.h).
 */
#ifndef KILN_OPS_MAX_POOL_H
#define KILN_OPS_MAX_POOL_H

#include "conv_common.h"

/* Scratch bytes kiln_max_pool_run needs: f16 / bf16 / int8 / uint8 X and Y staged in f32. */
size_t kiln_max_pool_workspace(const kiln_tensor *x, const kiln_tensor *y);
/* y (N, C, grid...) = the maximum of x (N, C, img...) over each window of w (NaN wins;
 * an empty window gives the lowest value); ind (y's shape) receives the flat index of
 * each maximum (column-major over the last two dims with colmajor), or is NULL. ws:
 * kiln_max_pool_workspace bytes, 64-byte aligned. */
void kiln_max_pool_run(const kiln_window *w, const kiln_tensor *x, kiln_tensor *y, int64_t *ind, bool colmajor,
                       char *ws);

/* Scratch bytes kiln_max_pool_grad_run needs. */
size_t kiln_max_pool_grad_workspace(const kiln_tensor *dy, const kiln_tensor *x, const kiln_tensor *dx);
/* dx (x's shape) = kiln.MaxPoolGrad(dy, x): each window's dy added at the element the
 * forward picks (the first maximum, or the first NaN), recomputed from x. */
void kiln_max_pool_grad_run(const kiln_window *w, const kiln_tensor *dy, const kiln_tensor *x, kiln_tensor *dx,
                            char *ws);

#endif
