/*
 * bn_affine.cuh — the training BatchNormalization's forward affine as the CUDA kernels
 * compute it (src/cuda/norm_train.cu's contract): the only places the forward's Y is
 * computed, for the forward's apply, the gradient's mask from X and kiln.BnReluMaxPool
 * (src/cuda/pool.cu), so that all three agree bit for bit.
 */
#ifndef KILN_CUDA_BN_AFFINE_CUH
#define KILN_CUDA_BN_AFFINE_CUH

#include "dtype.cuh"

namespace kiln_cu {

/* The forward's per-channel coefficients from its batch statistics (mean, var). */
__device__ __forceinline__ void fwd_coef(double scale, double bias, double mean, double var, double eps, float &a,
                                         float &m, float &k) {
    a = (float)(scale / sqrt(var + eps));
    m = (float)mean;
    k = (float)bias;
}

/* The forward's y before the ReLU (and the residual): a * (x - m) + k, one rounding for the
 * difference and one fused multiply-add, explicit so that no compiler contraction makes the
 * forward's apply and its recomputations differ. */
__device__ __forceinline__ float bn_affine(float x, float a, float m, float k) { return __fmaf_rn(a, __fsub_rn(x, m), k); }

} // namespace kiln_cu

#endif
