/* jpeg_gpu_stub.c — the GPU JPEG decoder's entries of data.h in builds without CUDA
 * (src/cuda/nvjpeg.c has the real ones): GPU decoding is then unavailable, and a
 * streamed image folder asking for it gets KILN_ERR_UNSUPPORTED (auto: the CPU). */
#include "data.h"

#include <stdio.h>
#include <string.h>

#ifndef KILN_HAVE_CUDA
bool kiln_nvjpeg_load(char *why, size_t n) {
    if (why && n) snprintf(why, n, "this build of kiln has no CUDA");
    return false;
}

kiln_status kiln_jpeg_gpu_create(kiln_context *ctx, int device_index, int64_t batch, int size, const float mean[3],
                                 const float std[3], kiln_jpeg_gpu **out) {
    (void)device_index, (void)batch, (void)size, (void)mean, (void)std;
    *out = NULL;
    return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "GPU JPEG decoding: this build of kiln has no CUDA");
}

void kiln_jpeg_gpu_free(kiln_jpeg_gpu *g) { (void)g; }

kiln_status kiln_jpeg_gpu_run(kiln_jpeg_gpu *g, kiln_context *ctx, const unsigned char *bytes, const kiln_jpeg_job *jobs,
                              int64_t n, float *host,
                              kiln_status (*cpu_fallback)(void *arg, kiln_context *ctx, int64_t i, float *dst),
                              void *arg, float **out) {
    (void)g, (void)bytes, (void)jobs, (void)n, (void)host, (void)cpu_fallback, (void)arg;
    *out = NULL;
    return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "GPU JPEG decoding: this build of kiln has no CUDA");
}

void kiln_jpeg_gpu_done(kiln_jpeg_gpu *g, const float *out) { (void)g, (void)out; }
void kiln_jpeg_gpu_set_stream(kiln_jpeg_gpu *g, void *stream) { (void)g, (void)stream; }

void kiln_jpeg_gpu_stats_get(kiln_jpeg_gpu *g, kiln_jpeg_gpu_stats *out, bool reset) {
    (void)g, (void)reset;
    memset(out, 0, sizeof *out);
}
#endif
