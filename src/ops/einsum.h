/* einsum.h — Einsum's plan, shared by the CPU reference (einsum.c) and the CUDA kernel
 * (src/cuda/rearrange.cu): the equation reduced to labels 0..nl-1 with their sizes, the
 * output's labels, the summed labels, and per input the element stride of each label
 * (a label repeated within a term adds its strides: the diagonal; a broadcast ellipsis
 * dim of size 1 has stride 0). Input t's element for label values v is at
 * sum_l v[l] * stride[t][l]. */
#ifndef KILN_OPS_EINSUM_H
#define KILN_OPS_EINSUM_H

#include "../core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { KILN_EINSUM_MAX_IN = 8, KILN_EINSUM_MAX_LABELS = 16 };

typedef struct kiln_einsum {
    int n_in, nl, out_nd, ns;
    int64_t size[KILN_EINSUM_MAX_LABELS];
    int out_lab[KILN_MAX_DIMS];
    int sum_lab[KILN_EINSUM_MAX_LABELS];
    int64_t sum_count; /* product of the summed labels' sizes */
    int64_t stride[KILN_EINSUM_MAX_IN][KILN_EINSUM_MAX_LABELS];
} kiln_einsum;

/* The plan of Einsum node c (attribute equation, c->in's shapes), or an error naming what
 * is wrong with the equation. */
kiln_status kiln_einsum_plan(kiln_op_ctx *c, kiln_einsum *e);

#ifdef __cplusplus
}
#endif

#endif
