/* fused_conv.h — what the passes and backends need to know of kiln.FusedConv
 * (src/ops/fused_conv.c) beyond the registry. */
#ifndef KILN_OPS_FUSED_CONV_H
#define KILN_OPS_FUSED_CONV_H

#include <kiln.h>

/* The dtype of the statistics outputs 1 and 2 for a Y of dtype y: f64 for an f32 or f64 Y
 * (var = sumsq / M - mean^2 from f32 sums loses what f32 training keeps), f32 for f16 / bf16
 * (what cuDNN's ConvolutionFwd -> GenStats graph writes). */
static inline kiln_dtype kiln_fused_conv_stats_dtype(kiln_dtype y) {
    return y == KILN_F32 || y == KILN_F64 ? KILN_F64 : KILN_F32;
}

#endif /* KILN_OPS_FUSED_CONV_H */
