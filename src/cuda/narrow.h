/*
 * narrow.h — the first `keep` elements of every row of `row` elements, copied into a packed
 * (rows, keep) buffer (movement.cu). conv.c convolves the real channels of a channel-padded
 * convolution this way (the pad-channels pass's used_channels): X (N*H*W, C) and its KRSC
 * weights (M*kh*kw, C) in NHWC, (N, C*H*W) and (M, C*kh*kw) in NCHW.
 */
#ifndef KILN_CUDA_NARROW_H
#define KILN_CUDA_NARROW_H

#include "cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst (rows, keep) = src (rows, row)[:, :keep], elements of es bytes, on cu's stream. */
kiln_status kiln_cuda_narrow_rows(kiln_cuda *cu, kiln_context *ctx, size_t es, void *dst, const void *src,
                                  int64_t rows, int64_t row, int64_t keep);

#ifdef __cplusplus
}
#endif

#endif
