/*
 * dropout.h — Dropout's arithmetic for the ops that compute it (src/ops/dropout.c:
 * Dropout, kiln.DropoutGrad; src/ops/max_pool_dropout.c: the pool-and-dropout fusion),
 * so that a fused op draws the same masks and rounds the same way as the op it replaces.
 */
#ifndef KILN_OPS_DROPOUT_H
#define KILN_OPS_DROPOUT_H

#include "../core/internal.h"

/* Infer's checks of the optional inputs: ratio a float scalar, training_mode a bool
 * scalar (each NULL when absent). */
kiln_status kiln_dropout_check_args(kiln_op_ctx *c, const kiln_tensor *ratio, const kiln_tensor *training_mode);

/* The ratio (0.5 when absent) and whether the op trains (training_mode given and true). */
void kiln_dropout_mode(const kiln_tensor *ratio, const kiln_tensor *training_mode, double *r, bool *train);

/* y = Dropout(x): x * mask / (1 - ratio) when training with ratio > 0, x otherwise (mask
 * all true). The mask is drawn as node c->node draws it: keyed by the run's seed c->seed,
 * the node's `seed` attribute when given and the node's first output value, element i by
 * its flat index. y may be x (in place); mask (x's element count) may be NULL. Fails on a
 * training ratio outside [0, 1). */
kiln_status kiln_dropout_apply(kiln_op_ctx *c, const kiln_tensor *x, kiln_tensor *y, bool *mask, double ratio,
                               bool train);

/* dx = kiln.DropoutGrad(dy, mask): dy * mask / (1 - ratio) when training, dy otherwise, in
 * dy's dtype. dx may be dy. Fails on a training ratio outside [0, 1). */
kiln_status kiln_dropout_grad_apply(kiln_op_ctx *c, const kiln_tensor *dy, const bool *mask, kiln_tensor *dx,
                                    double ratio, bool train);

#endif
