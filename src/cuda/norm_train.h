/*
 * norm_train.h — entry points of the training kernels for normalizations, pools,
 * reductions and losses (norm_train.cu, pool_grad.cu, reduce_grad.cu, norm_rows.cu,
 * table.c: sup_sce), listed in table.c's block
 * "training: normalization, pools, reductions, losses". Each kernel takes the contract of
 * cuda_backend.h; each supports check fills why (n bytes) when it returns false.
 */
#ifndef KILN_CUDA_NORM_TRAIN_H
#define KILN_CUDA_NORM_TRAIN_H

#include "cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* norm_train.cu: BatchNormalization in training mode (called by kiln_cuda_k_batchnorm and
 * kiln_cuda_ws_batchnorm for a node in training mode) and kiln.BatchNormGrad. */
bool kiln_cuda_bn_training(const kiln_op_ctx *c);
bool kiln_cuda_sup_bn_train(const kiln_op_ctx *c, char *why, size_t n);
kiln_status kiln_cuda_k_bn_train(kiln_cuda *cu, kiln_op_ctx *c);
kiln_status kiln_cuda_ws_bn_train(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
/* Per channel (dim 1; NHWC where y is) the sum and sum of squares of y (f32, f16, bf16) into
 * sum, sq (C), f64 where f64 is set and f32 otherwise, by the training forward's statistics kernels (partials in ws, at least
 * kiln_cuda_channel_sums_ws(y) bytes): kiln.FusedConv's statistics outputs when the
 * convolution runs without them (conv_stats.c). */
size_t kiln_cuda_channel_sums_ws(const kiln_tensor *y);
/* a[0..n) and b[0..n) set to zero by one kernel on cu->stream: the statistics outputs of a
 * cuDNN convolution graph (one graph node before the convolution, not two memsets);
 * KILN_CUDA_ZERO_PAIR=0 uses the two memsets. */
kiln_status kiln_cuda_zero_pair(kiln_cuda *cu, kiln_context *ctx, float *a, float *b, int64_t n);
/* n device-to-device copies on cu->stream, up to 64 in one kernel (a CUDA graph node each
 * cudaMemcpyAsync would be: ResNet-50's 106 running statistics cost ~1.5 us apiece at the
 * step's end); KILN_CUDA_COPY_BATCH=0 uses one cudaMemcpyAsync a copy. */
typedef struct kiln_cuda_copy_item {
    void *dst;
    const void *src;
    size_t bytes;
} kiln_cuda_copy_item;
kiln_status kiln_cuda_copy_batch(kiln_cuda *cu, kiln_context *ctx, const kiln_cuda_copy_item *items, int n);
kiln_status kiln_cuda_channel_sums(kiln_cuda *cu, kiln_context *ctx, const kiln_tensor *y, void *sum, void *sq,
                                   bool f64, void *ws, size_t ws_size);
/* The forward's coefficients (a, m, k) into mc (3, C) from its scale, B (dtypes sdt, bdt) and
 * saved statistics S (mean; var, (2, C), dtype Sdt), as its finalize computes them: the mask
 * from X's bn_mask_coef, for kiln.BnReluMaxPool (pool.cu). */
kiln_status kiln_cuda_bn_fwd_coef(kiln_cuda *cu, kiln_context *ctx, const void *scale, int sdt, const void *bias,
                                  int bdt, const void *S, int Sdt, double eps, float *mc, int64_t C);
bool kiln_cuda_sup_bn_grad(const kiln_op_ctx *c, char *why, size_t n);
kiln_status kiln_cuda_k_bn_grad(kiln_cuda *cu, kiln_op_ctx *c);
kiln_status kiln_cuda_ws_bn_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);

/* pool_grad.cu: kiln.GlobalAveragePoolGrad, kiln.GlobalMaxPoolGrad, kiln.AveragePoolGrad */
bool kiln_cuda_sup_gap_grad(const kiln_op_ctx *c, char *why, size_t n);
kiln_status kiln_cuda_k_gap_grad(kiln_cuda *cu, kiln_op_ctx *c);
bool kiln_cuda_sup_gmp_grad(const kiln_op_ctx *c, char *why, size_t n);
kiln_status kiln_cuda_k_gmp_grad(kiln_cuda *cu, kiln_op_ctx *c);
bool kiln_cuda_sup_avgpool_grad(const kiln_op_ctx *c, char *why, size_t n);
kiln_status kiln_cuda_k_avgpool_grad(kiln_cuda *cu, kiln_op_ctx *c);

/* reduce_grad.cu: kiln.ReduceSumGrad, kiln.ReduceMeanGrad, kiln.ReduceMaxGrad, kiln.ReduceMinGrad,
 * kiln.ReduceL2Grad */
bool kiln_cuda_sup_reduce_grad(const kiln_op_ctx *c, char *why, size_t n);
kiln_status kiln_cuda_k_reduce_grad(kiln_cuda *cu, kiln_op_ctx *c);
kiln_status kiln_cuda_ws_reduce_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);

/* norm_rows.cu: kiln.LayerNormGrad, InstanceNormalization, kiln.InstanceNormGrad */
bool kiln_cuda_sup_ln_grad(const kiln_op_ctx *c, char *why, size_t n);
kiln_status kiln_cuda_k_ln_grad(kiln_cuda *cu, kiln_op_ctx *c);
bool kiln_cuda_sup_instnorm(const kiln_op_ctx *c, char *why, size_t n);
kiln_status kiln_cuda_k_instnorm(kiln_cuda *cu, kiln_op_ctx *c);
bool kiln_cuda_sup_instnorm_grad(const kiln_op_ctx *c, char *why, size_t n);
kiln_status kiln_cuda_k_instnorm_grad(kiln_cuda *cu, kiln_op_ctx *c);
kiln_status kiln_cuda_ws_instnorm_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);

/* nccl.c: SyncBatchNorm's sums. n doubles of `in` summed over the ranks of the node's
 * sync_comm communicator into out (in place when equal), on cu->stream; *world: the ranks
 * (1, and in copied to out, when the node has no sync_comm). */
kiln_status kiln_cuda_sync_sums(kiln_cuda *cu, kiln_op_ctx *c, const double *in, double *out, int64_t n, int *world);

#ifdef __cplusplus
}
#endif

#endif /* KILN_CUDA_NORM_TRAIN_H */
