/* window.h — the generalized cosine windows HannWindow, HammingWindow and BlackmanWindow
 * (opset 17), shared by the three op files (window.c) and their CUDA kernel:
 *   w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N),  n = 0 .. size - 1,
 * N = size when periodic (the default), size - 1 otherwise (N = 1 for size 1). */
#ifndef KILN_OPS_WINDOW_H
#define KILN_OPS_WINDOW_H

#include "../core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_window_coef {
    double a0, a1, a2, n; /* n: the period N */
} kiln_window_coef;

/* The coefficients of window op node n (HannWindow, HammingWindow, BlackmanWindow) for
 * `size` points; false for another op. */
bool kiln_window_coef_of(const kiln_node *n, int64_t size, kiln_window_coef *w);

#ifdef __cplusplus
}
#endif

#endif
