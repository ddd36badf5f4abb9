/*
 * grad_movegrad.h — entry points and host-side plans of the CUDA gradient kernels of the
 * data-movement ops, products, transposed convolutions and elementwise ops (issue 12), for
 * table.c. Each kernel takes the contract of cuda_backend.h, as those of cuda_internal.h.
 */
#ifndef KILN_CUDA_GRAD_MOVEGRAD_H
#define KILN_CUDA_GRAD_MOVEGRAD_H

#include "cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* grad_movement.cu */
kiln_status kiln_cuda_k_concat_grad(kiln_cuda *cu, kiln_op_ctx *c); /* kiln.ConcatGrad */
kiln_status kiln_cuda_k_split_grad(kiln_cuda *cu, kiln_op_ctx *c);  /* kiln.SplitGrad */
kiln_status kiln_cuda_k_slice_grad(kiln_cuda *cu, kiln_op_ctx *c);  /* kiln.SliceGrad */
kiln_status kiln_cuda_k_pad_grad(kiln_cuda *cu, kiln_op_ctx *c);    /* kiln.PadGrad */
kiln_status kiln_cuda_k_tile_grad(kiln_cuda *cu, kiln_op_ctx *c);   /* kiln.TileGrad */
kiln_status kiln_cuda_k_gather_grad(kiln_cuda *cu, kiln_op_ctx *c); /* kiln.GatherGrad */
kiln_status kiln_cuda_ws_gather_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
/* kiln.ReduceSumTo: reduce_sum.cu's kernel, also on an NHWC dY whose sum has the same bytes
 * in both layouts (a per-channel bias's gradient in an NHWC graph) */
kiln_status kiln_cuda_k_sum_to(kiln_cuda *cu, kiln_op_ctx *c);
kiln_status kiln_cuda_ws_sum_to(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
/* The forward's plans on a gradient node (dY, X, the forward's other inputs...): Slice's
 * first index and step per axis of X, Pad's begin pads and mode; SplitGrad's axis and
 * part sizes (at most 16). hin: the host tensors (kiln_cuda_host_inputs). false with a
 * reason in why when they cannot be planned. */
bool kiln_cuda_slice_grad_plan(const kiln_op_ctx *c, kiln_tensor *const *hin, int64_t *start, int64_t *step,
                               char *why, size_t wn);
bool kiln_cuda_pad_grad_plan(const kiln_op_ctx *c, kiln_tensor *const *hin, int64_t *begin, int *mode, char *why,
                             size_t wn);
bool kiln_cuda_split_grad_parts(const kiln_op_ctx *c, kiln_tensor *const *hin, int64_t *axis, int64_t *sizes,
                                char *why, size_t wn);

/* matmul.c: kiln.MatMulGradA, kiln.MatMulGradB through cuBLASLt (workspace: kiln_cuda_ws_matmul) */
kiln_status kiln_cuda_k_matmul_grad_a(kiln_cuda *cu, kiln_op_ctx *c);
kiln_status kiln_cuda_k_matmul_grad_b(kiln_cuda *cu, kiln_op_ctx *c);

/* grad_elementwise.cu: kiln.PowGrad, kiln.PReluGrad, kiln.MinGrad and kiln.MaxGrad, */
kiln_status kiln_cuda_k_pow_grad(kiln_cuda *cu, kiln_op_ctx *c);
kiln_status kiln_cuda_k_prelu_grad(kiln_cuda *cu, kiln_op_ctx *c);
kiln_status kiln_cuda_k_select_grad(kiln_cuda *cu, kiln_op_ctx *c);
/* and the forward ops PRelu and Mean, which had no CUDA kernel (NCHW, any broadcast) */
kiln_status kiln_cuda_k_prelu(kiln_cuda *cu, kiln_op_ctx *c);
kiln_status kiln_cuda_k_mean(kiln_cuda *cu, kiln_op_ctx *c);
/* global_max_pool.cu: GlobalMaxPool (kiln.GlobalMaxPoolGrad's forward), NCHW */
kiln_status kiln_cuda_k_global_max_pool(kiln_cuda *cu, kiln_op_ctx *c);

/* resize.cu: kiln.ResizeGrad (nearest, linear, cubic; atomic f32 accumulation) */
kiln_status kiln_cuda_k_resize_grad(kiln_cuda *cu, kiln_op_ctx *c);
kiln_status kiln_cuda_ws_resize_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
/* Resize's plan on ResizeGrad's (X, roi, scales, sizes) with dY as the output. */
bool kiln_cuda_resize_grad_check(const kiln_op_ctx *c, kiln_tensor *const *hin, char *why, size_t wn);

/* y (N, C, HW), or (N, HW, C) with nhwc, += b (C) per channel; float dtype dt. */
kiln_status kiln_cuda_channel_bias_add(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *y, const void *b,
                                       int64_t N, int64_t C, int64_t HW, bool nhwc);

/* conv_transpose.c: ConvTranspose, kiln.ConvTransposeGradInput and kiln.ConvTransposeGradWeight
 * as the convolutions they transpose, each with its workspace function. The view: c (a
 * node of kind `which`) seen as that convolution node's context (kiln.ConvGradInput's
 * inputs for ConvTranspose, Conv's for GradInput, kiln.ConvGradWeight's for GradWeight),
 * built in storage (at least kiln_cuda_conv_transpose_view_size() bytes, which live as
 * long as the view). */
enum { KILN_CONVT_FORWARD, KILN_CONVT_GRAD_INPUT, KILN_CONVT_GRAD_WEIGHT };
kiln_status kiln_cuda_k_conv_transpose(kiln_cuda *cu, kiln_op_ctx *c);
kiln_status kiln_cuda_k_conv_transpose_grad_input(kiln_cuda *cu, kiln_op_ctx *c);
kiln_status kiln_cuda_k_conv_transpose_grad_weight(kiln_cuda *cu, kiln_op_ctx *c);
kiln_status kiln_cuda_ws_conv_transpose(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
kiln_status kiln_cuda_ws_conv_transpose_grad_input(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
kiln_status kiln_cuda_ws_conv_transpose_grad_weight(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
kiln_op_ctx *kiln_cuda_conv_transpose_view(kiln_op_ctx *c, int which, void *storage, size_t size);
size_t kiln_cuda_conv_transpose_view_size(void);

#ifdef __cplusplus
}
#endif

#endif /* KILN_CUDA_GRAD_MOVEGRAD_H */
