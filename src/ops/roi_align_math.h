/*
 * roi_align_math.h — RoiAlign's arithmetic, written once for the CPU reference
 * (src/ops/roi_align.c) and the CUDA kernel (src/cuda/grid_sample.cu):
 *
 *   kiln_roi_box_of     a region's bins: its corner, bin size, samples per bin, their count
 *   kiln_roi_taps_at    one sample of a bin: whether it counts, its four taps' offsets in the
 *                       (H, W) plane and their weights
 *   kiln_roi_combine    the sample's value from its four taps (avg: their sum; max: the
 *                       largest weighted tap, as ONNX's reference and onnxruntime take it)
 *   kiln_roi_fold       a bin's running sum (avg) or maximum (max), and its result
 *
 * Positions, weights and sums in double (the reference: Python floats). Every double
 * operation is spelled out (KILN_RA_ADD ...): on the device they are the round-to-nearest
 * intrinsics, which the compiler never contracts into FMAs; the host builds do not contract
 * either (ISO C, no FMA target). So the two backends give the same bits for the same taps.
 *
 * C11 and CUDA C++: static inline functions, __host__ __device__ under nvcc.
 */
#ifndef KILN_ROI_ALIGN_MATH_H
#define KILN_ROI_ALIGN_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KILN_RA_FN static __host__ __device__ __forceinline__
#else
#define KILN_RA_FN static inline
#endif

#if defined(__CUDA_ARCH__)
#define KILN_RA_ADD(a, b) __dadd_rn((a), (b))
#define KILN_RA_SUB(a, b) __dsub_rn((a), (b))
#define KILN_RA_MUL(a, b) __dmul_rn((a), (b))
#define KILN_RA_DIV(a, b) __ddiv_rn((a), (b))
#else
#define KILN_RA_ADD(a, b) ((a) + (b))
#define KILN_RA_SUB(a, b) ((a) - (b))
#define KILN_RA_MUL(a, b) ((a) * (b))
#define KILN_RA_DIV(a, b) ((a) / (b))
#endif

/* A region's geometry: (x1, y1) its corner, (bw, bh) a bin's size, (gw, gh) samples a bin
 * per dim, count their number (at least 1). */
typedef struct kiln_roi_box {
    double x1, y1, bw, bh, count;
    int64_t gw, gh;
} kiln_roi_box;

/* rois[r] = (rx1, ry1, rx2, ry2) times spatial_scale, less 0.5 under half_pixel (hp); output
 * (PH, PW) bins; sampling_ratio sr (0: adaptive, ceil(region / bins)). Not half_pixel
 * (output_half_pixel): the region at least 1 x 1. */
KILN_RA_FN kiln_roi_box kiln_roi_box_of(double rx1, double ry1, double rx2, double ry2, double scale, bool hp,
                                        int64_t PH, int64_t PW, int64_t sr) {
    const double off = hp ? 0.5 : 0.0;
    kiln_roi_box b;
    b.x1 = KILN_RA_SUB(KILN_RA_MUL(rx1, scale), off);
    b.y1 = KILN_RA_SUB(KILN_RA_MUL(ry1, scale), off);
    double rw = KILN_RA_SUB(KILN_RA_SUB(KILN_RA_MUL(rx2, scale), off), b.x1);
    double rh = KILN_RA_SUB(KILN_RA_SUB(KILN_RA_MUL(ry2, scale), off), b.y1);
    if (!hp) {
        rw = fmax(rw, 1.0);
        rh = fmax(rh, 1.0);
    }
    b.bh = KILN_RA_DIV(rh, (double)PH);
    b.bw = KILN_RA_DIV(rw, (double)PW);
    b.gh = sr > 0 ? sr : (int64_t)ceil(b.bh);
    b.gw = sr > 0 ? sr : (int64_t)ceil(b.bw);
    b.count = (double)(b.gh * b.gw > 1 ? b.gh * b.gw : 1);
    return b;
}

/* Sample (iy, ix) of bin (ph, pw) in an (H, W) plane: in == false for one more than a pixel
 * outside the plane (it counts as 0); else the offsets of its four taps (top-left, top-right,
 * bottom-left, bottom-right; clamped to the last row / column) and their weights. */
typedef struct kiln_roi_taps {
    bool in;
    int64_t off[4];
    double w[4];
} kiln_roi_taps;

KILN_RA_FN kiln_roi_taps kiln_roi_taps_at(const kiln_roi_box *b, int64_t ph, int64_t pw, int64_t iy, int64_t ix,
                                          int64_t H, int64_t W) {
    kiln_roi_taps t;
    const double yy = KILN_RA_ADD(KILN_RA_ADD(b->y1, KILN_RA_MUL((double)ph, b->bh)),
                                  KILN_RA_DIV(KILN_RA_MUL(KILN_RA_ADD((double)iy, 0.5), b->bh), (double)b->gh));
    const double xx = KILN_RA_ADD(KILN_RA_ADD(b->x1, KILN_RA_MUL((double)pw, b->bw)),
                                  KILN_RA_DIV(KILN_RA_MUL(KILN_RA_ADD((double)ix, 0.5), b->bw), (double)b->gw));
    t.in = !(yy < -1.0 || yy > (double)H || xx < -1.0 || xx > (double)W);
    if (!t.in) {
        for (int k = 0; k < 4; k++) {
            t.off[k] = 0;
            t.w[k] = 0;
        }
        return t;
    }
    double ys = fmax(yy, 0.0), xs = fmax(xx, 0.0);
    int64_t yl = (int64_t)ys, xl = (int64_t)xs, yh, xh;
    if (yl >= H - 1) {
        yh = yl = H - 1;
        ys = (double)yl;
    } else {
        yh = yl + 1;
    }
    if (xl >= W - 1) {
        xh = xl = W - 1;
        xs = (double)xl;
    } else {
        xh = xl + 1;
    }
    const double ly = KILN_RA_SUB(ys, (double)yl), lx = KILN_RA_SUB(xs, (double)xl);
    const double hy = KILN_RA_SUB(1.0, ly), hx = KILN_RA_SUB(1.0, lx);
    t.off[0] = yl * W + xl;
    t.off[1] = yl * W + xh;
    t.off[2] = yh * W + xl;
    t.off[3] = yh * W + xh;
    t.w[0] = KILN_RA_MUL(hy, hx);
    t.w[1] = KILN_RA_MUL(hy, lx);
    t.w[2] = KILN_RA_MUL(ly, hx);
    t.w[3] = KILN_RA_MUL(ly, lx);
    return t;
}

/* The sample's value from X at its four taps (v[k] = X[off[k]]); 0 when it is outside. */
KILN_RA_FN double kiln_roi_combine(const kiln_roi_taps *t, const double v[4], bool is_max) {
    if (!t->in) return 0.0;
    const double t1 = KILN_RA_MUL(t->w[0], v[0]), t2 = KILN_RA_MUL(t->w[1], v[1]);
    const double t3 = KILN_RA_MUL(t->w[2], v[2]), t4 = KILN_RA_MUL(t->w[3], v[3]);
    return is_max ? fmax(fmax(t1, t2), fmax(t3, t4)) : KILN_RA_ADD(KILN_RA_ADD(KILN_RA_ADD(t1, t2), t3), t4);
}

/* A bin's running value over its samples in order, from 0 (first: the bin's first sample),
 * and its result: the sum over the count (avg) or the maximum. */
KILN_RA_FN double kiln_roi_fold(double acc, double v, bool first, bool is_max) {
    if (!is_max) return KILN_RA_ADD(acc, v);
    return first || v > acc ? v : acc;
}

KILN_RA_FN double kiln_roi_result(double acc, const kiln_roi_box *b, bool is_max) {
    return is_max ? acc : KILN_RA_DIV(acc, b->count);
}

#endif
