/* jpeg_gpu.h — the transform kernel of the GPU JPEG decoder (jpeg_augment.cu), called by
 * nvjpeg.c (C and CUDA). */
#ifndef KILN_CUDA_JPEG_GPU_H
#define KILN_CUDA_JPEG_GPU_H

#include <stddef.h>

/* One image of a batch: its decoded pixels (interleaved RGB, w x h, rows of w * 3 bytes,
 * device memory; NULL: decoded on the host, its place left alone) and the box
 * (x0, y0, cw, ch) resampled to the output, flipped when flip is 1. */
typedef struct kiln_jpeg_item {
    const unsigned char *src;
    int w, h, x0, y0, cw, ch, flip, pad;
} kiln_jpeg_item;

#ifdef __cplusplus
extern "C" {
#endif
/* out (n, 3, size, size) f32 on the device: image i's box resampled by the CPU path's
 * triangle filter (images.c resample: taps and weights in double as there, sums in float in
 * its order, rounded to u8), then u8 * scale[c] - shift[c]. items: n entries in device
 * memory. Returns the cudaError_t of the launch. */
int kiln_cuda_jpeg_augment(void *stream, const kiln_jpeg_item *items, int n, int size, const float scale[3],
                           const float shift[3], float *out);
#ifdef __cplusplus
}
#endif

#endif /* KILN_CUDA_JPEG_GPU_H */
