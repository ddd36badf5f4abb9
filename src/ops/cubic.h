/* cubic.h — Keys' cubic convolution weights (R. Keys, 1981), shared by the CPU references of
 * Resize (cubic_coeff_a, default -0.75) and GridSample (a = -0.75): the four taps at
 * floor(x) - 1 .. floor(x) + 2 of a point at fraction f = x - floor(x) in [0, 1). */
#ifndef KILN_OPS_CUBIC_H
#define KILN_OPS_CUBIC_H

/* the kernel on its two pieces: |s| <= 1 and 1 <= |s| <= 2 (both 0 at |s| = 1) */
static inline double kiln_cubic_near(double a, double s) { return ((a + 2) * s - (a + 3)) * s * s + 1; }
static inline double kiln_cubic_far(double a, double s) { return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a; }

static inline void kiln_cubic_weights(double a, double f, double w[4]) {
    w[0] = kiln_cubic_far(a, f + 1);
    w[1] = kiln_cubic_near(a, f);
    w[2] = kiln_cubic_near(a, 1 - f);
    w[3] = kiln_cubic_far(a, 2 - f);
}

#endif
