/*
 * batch_normalization.h — the training BatchNormalization's affine as its CPU reference
 * computes it (src/ops/batch_normalization.c), for the ops that recompute the forward's Y
 * from X and the saved statistics S (the gradient's mask from X, kiln.BnReluMaxPool):
 *   a = scale / sqrt(var + epsilon), b = B - mean * a,  Y = round(x * a + b)
 * in double, round() to X's dtype as the forward stores Y, so that Y > 0 (and Y itself)
 * is the forward's bit for bit.
 */
#ifndef KILN_OPS_BATCH_NORMALIZATION_H
#define KILN_OPS_BATCH_NORMALIZATION_H

#include "../core/internal.h"

#include <math.h>

/* x * a + b: the forward's affine before rounding and ReLU */
static inline double kiln_bn_affine(double x, double a, double b) { return x * a + b; }

/* the coefficients a, b of a channel from its scale, bias and batch statistics */
static inline void kiln_bn_coef(double scale, double bias, double mean, double var, double eps, double *a,
                                double *b) {
    *a = scale / sqrt(var + eps);
    *b = bias - mean * *a;
}

/* v rounded to dtype dt as kiln_set_f64 stores it (f16/bf16 through float, as the forward's Y) */
static inline double kiln_bn_round_as(kiln_dtype dt, double v) {
    switch (dt) {
    case KILN_F32: return (float)v;
    case KILN_F16: return kiln_f16_to_f32(kiln_f32_to_f16((float)v));
    case KILN_BF16: return kiln_bf16_to_f32(kiln_f32_to_bf16((float)v));
    default: return v;
    }
}

#endif
