/*
 * roll.h — kiln.Roll's shifts (src/ops/roll.c), shared by its CPU reference and the CUDA
 * kernel (src/cuda/movement.cu), so both read the node's attributes by one rule.
 */
#ifndef KILN_OPS_ROLL_H
#define KILN_OPS_ROLL_H

#include "../core/internal.h"

/* The shift of every axis of x into shift[KILN_MAX_DIMS]: 0 where the axis is not rolled,
 * else in [0, n) (torch.roll's, negative shifts and axes normalized). Fails naming the node
 * when the attributes are missing or malformed: axes and shifts of different lengths, an axis
 * out of range or repeated, |shift| not below its axis's size. */
kiln_status kiln_roll_shifts(kiln_op_ctx *c, const kiln_tensor *x, int64_t *shift);

#endif
