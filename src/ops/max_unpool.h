/* max_unpool.h — MaxUnpool's index rule (max_unpool.c), which the CUDA kernel
 * (src/cuda/rearrange.cu, max_unpool_kernel) mirrors in device code. */
#ifndef KILN_OPS_MAX_UNPOOL_H
#define KILN_OPS_MAX_UNPOOL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The output offset of MaxPool index v (a flat position in the unpooled shape def, ndim
 * dims), in an output of dims out (output_shape: the unpooled result at its start); -1
 * when v falls outside either. */
int64_t kiln_unpool_offset(int ndim, const int64_t *def, const int64_t *out, int64_t v);

#ifdef __cplusplus
}
#endif

#endif
