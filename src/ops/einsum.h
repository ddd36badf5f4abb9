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

/* A two-input plan that is a (batched) matrix product, as one strided-batched GEMM of
 * row-major matrices: Y[b] (M,N) = A[b] (M,K) @ B[b] (K,N), with input `a` as A and input
 * `b` as B (swapped when the output holds the product transposed). A is stored (M,K) with
 * row stride lda, or with ta (K,M) with row stride lda; B (K,N) or with tb (N,K), row
 * stride ldb; Y (M,N) with row stride ldy. Batch strides in elements. */
typedef struct kiln_einsum_gemm {
    int a, b;
    int64_t M, N, K, batch;
    bool ta, tb;
    int64_t lda, ldb, ldy;
    int64_t sa, sb, sy;
} kiln_einsum_gemm;

/* Whether plan e (output contiguous) is such a product: every label of size above 1 is a
 * batch label (in both inputs and the output), an M label (A and the output), an N label
 * (B and the output) or a K label (both inputs, summed), and each group collapses to one
 * stride per operand. False for anything else (one input, sums over a label of one
 * input, interleaved groups). */
bool kiln_einsum_as_gemm(const kiln_einsum *e, kiln_einsum_gemm *g);

#ifdef __cplusplus
}
#endif

#endif
