/* quantize_linear.h — what QuantizeLinear / DequantizeLinear (quantize_linear.c) share with
 * their CUDA kernel. */
#ifndef KILN_OPS_QUANTIZE_LINEAR_H
#define KILN_OPS_QUANTIZE_LINEAR_H

#include "../core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The value range of quantized dtype t (uint8, int8, uint16, int16, int32); false for
 * another dtype. */
bool kiln_quant_range(kiln_dtype t, double *lo, double *hi);

#ifdef __cplusplus
}
#endif

#endif
