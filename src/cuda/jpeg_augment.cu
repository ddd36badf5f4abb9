/*
 * jpeg_augment.cu — the GPU JPEG decoder's transform (nvjpeg.c): from each image nvJPEG
 * decoded (interleaved RGB u8 in device memory), its box (RandomResizedCrop's or the
 * evaluation centre crop's, drawn on the host: data.h kiln_rrc_box / kiln_center_box)
 * resampled to size x size, flipped, normalized, written as the batch f32 (N, 3, S, S).
 *
 * One thread per output pixel (all three channels). The resampling is the CPU path's
 * (src/data/images.c, resample + filter_taps): a triangle filter whose support grows with
 * the scale when shrinking (antialiased, PIL's bilinear), taps and normalized weights in
 * double then rounded to float exactly as there, each row's horizontal sum in float in
 * tap order, then the vertical sum of those in tap order, clamped and rounded to u8, and
 * the u8 normalized as store_to does. Products and sums use the _rn intrinsics (no fused
 * multiply-adds), so on the same decoded pixels the result equals the CPU's but for
 * float rounding of the different loop nesting (at most 1 unit of 255). The decoders
 * themselves (nvJPEG vs libjpeg-turbo: IDCT, chroma upsampling) differ by a few units.
 */
#include "jpeg_gpu.h"

#include <cuda_runtime.h>

namespace {

constexpr int THREADS = 256;
constexpr int MAX_TAPS = 64; /* taps kept in registers; a wider filter is summed in chunks */

/* filter_taps of images.c for output o: the first input *lo, the count, and weight k on
 * demand (weight(k) = (float)((double)(float)t_k / sum)). */
struct Taps {
    double center, r, sum;
    int lo, n;
};

__device__ Taps taps(double scale, int n, int o) {
    Taps t;
    t.r = scale > 1 ? scale : 1;
    t.center = __dmul_rn(o + 0.5, scale);
    int a = (int)(t.center - t.r + 0.5), b = (int)(t.center + t.r + 0.5);
    if (a < 0) a = 0;
    if (b > n) b = n;
    double sum = 0;
    for (int i = a; i < b; i++) {
        const double v = 1 - fabs((i + 0.5 - t.center) / t.r);
        sum += v > 0 ? (double)(float)v : 0.0;
    }
    t.sum = sum;
    t.lo = a;
    t.n = b > a ? b - a : 0;
    return t;
}

__device__ float weight(const Taps &t, int k) {
    const double v = 1 - fabs((t.lo + k + 0.5 - t.center) / t.r);
    const double w = v > 0 ? (double)(float)v : 0.0;
    return t.sum > 0 ? (float)(w / t.sum) : 0.f;
}

__global__ void augment(const kiln_jpeg_item *items, int size, float s0, float s1, float s2, float h0, float h1, float h2,
                        float *out) {
    const int b = blockIdx.y;
    const kiln_jpeg_item it = items[b];
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (!it.src || idx >= size * size) return;
    const int oy = idx / size, ox = idx % size;
    const int sx = it.flip ? size - 1 - ox : ox; /* store_to reads the resampled column sx */
    const Taps tx = taps((double)it.cw / size, it.cw, sx), ty = taps((double)it.ch / size, it.ch, oy);
    float wx[MAX_TAPS];
    const int nx = tx.n < MAX_TAPS ? tx.n : MAX_TAPS;
    for (int k = 0; k < nx; k++) wx[k] = weight(tx, k);
    const size_t pitch = (size_t)it.w * 3;
    float a0 = 0, a1 = 0, a2 = 0;
    for (int j = 0; j < ty.n; j++) {
        const float wy = weight(ty, j);
        const unsigned char *row = it.src + (size_t)(it.y0 + ty.lo + j) * pitch + (size_t)(it.x0 + tx.lo) * 3;
        float r0 = 0, r1 = 0, r2 = 0;
        for (int k = 0; k < tx.n; k++) {
            const float w = k < MAX_TAPS ? wx[k] : weight(tx, k);
            r0 = __fadd_rn(r0, __fmul_rn(w, (float)row[3 * k]));
            r1 = __fadd_rn(r1, __fmul_rn(w, (float)row[3 * k + 1]));
            r2 = __fadd_rn(r2, __fmul_rn(w, (float)row[3 * k + 2]));
        }
        a0 = __fadd_rn(a0, __fmul_rn(wy, r0));
        a1 = __fadd_rn(a1, __fmul_rn(wy, r1));
        a2 = __fadd_rn(a2, __fmul_rn(wy, r2));
    }
    const float acc[3] = {a0, a1, a2}, sc[3] = {s0, s1, s2}, sh[3] = {h0, h1, h2};
    const size_t plane = (size_t)size * size;
    float *o = out + (size_t)b * 3 * plane + (size_t)oy * size + ox;
    for (int c = 0; c < 3; c++) {
        const float v = acc[c] < 0 ? 0 : acc[c] > 255 ? 255 : acc[c];
        const unsigned char u = (unsigned char)__fadd_rn(v, 0.5f);
        o[c * plane] = __fsub_rn(__fmul_rn((float)u, sc[c]), sh[c]);
    }
}

} // namespace

extern "C" int kiln_cuda_jpeg_augment(void *stream, const kiln_jpeg_item *items, int n, int size, const float scale[3],
                                      const float shift[3], float *out) {
    if (n <= 0) return (int)cudaSuccess;
    const unsigned blocks = (unsigned)(((long long)size * size + THREADS - 1) / THREADS);
    augment<<<dim3(blocks, (unsigned)n), THREADS, 0, (cudaStream_t)stream>>>(items, size, scale[0], scale[1], scale[2],
                                                                            shift[0], shift[1], shift[2], out);
    return (int)cudaGetLastError();
}
