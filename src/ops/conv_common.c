/* conv_common.c — window geometry, im2col/col2im, BLAS dispatch and f32 staging shared by
 * the convolution, pooling and matrix-product ops; see conv_common.h. */
#include "conv_common.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ geometry */

/* The largest kernel dim, stride, dilation and pad a window takes. */
#define KILN_WIN_ATTR_MAX ((int64_t)1 << 30)

static kiln_status read_ints(kiln_op_ctx *c, const char *name, int want, int64_t minv,
                             int64_t *out, bool *present) {
    int n = 0;
    const int64_t *v = kiln_attr_ints(c->node, name, &n);
    if (present) *present = v != NULL;
    if (!v) return KILN_OK;
    if (n != want)
        return kiln_op_fail(c, KILN_ERR_SHAPE, "attribute %s has %d values, expected %d", name,
                            n, want);
    for (int i = 0; i < n; i++) {
        if (v[i] < minv)
            return kiln_op_fail(c, KILN_ERR_SHAPE, "attribute %s[%d] = %lld is below %lld", name,
                                i, (long long)v[i], (long long)minv);
        /* the window arithmetic ((k - 1) * d + 1, in + pads, ...) stays inside int64 */
        if (v[i] > KILN_WIN_ATTR_MAX)
            return kiln_op_fail(c, KILN_ERR_SHAPE, "attribute %s[%d] = %lld is above 2^30", name, i,
                                (long long)v[i]);
        out[i] = v[i];
    }
    return KILN_OK;
}

kiln_status kiln_window_attrs(kiln_op_ctx *c, int nd, const int64_t *kernel, kiln_window *w,
                              kiln_auto_pad *auto_pad) {
    if (nd < 1 || nd > KILN_WIN_MAX)
        return kiln_op_fail(c, KILN_ERR_UNSUPPORTED,
                            "%d spatial dims (1 to %d are supported)", nd, KILN_WIN_MAX);
    memset(w, 0, sizeof *w);
    w->nd = nd;
    for (int t = 0; t < KILN_WIN_MAX; t++) {
        w->img[t] = w->grid[t] = w->k[t] = w->s[t] = w->d[t] = 1;
    }
    int64_t ks[KILN_WIN_MAX], st[KILN_WIN_MAX], dl[KILN_WIN_MAX], pads[2 * KILN_WIN_MAX];
    for (int i = 0; i < nd; i++) {
        ks[i] = kernel ? kernel[i] : 0;
        st[i] = dl[i] = 1;
        pads[i] = pads[nd + i] = 0;
    }
    bool has_ks;
    kiln_status s;
    if ((s = read_ints(c, "kernel_shape", nd, 1, ks, &has_ks)) != KILN_OK) return s;
    if (!has_ks && !kernel)
        return kiln_op_fail(c, KILN_ERR_SHAPE, "attribute kernel_shape is required");
    for (int i = 0; kernel && has_ks && i < nd; i++)
        if (ks[i] != kernel[i])
            return kiln_op_fail(c, KILN_ERR_SHAPE,
                                "kernel_shape[%d] = %lld does not match W's kernel dim %lld", i,
                                (long long)ks[i], (long long)kernel[i]);
    for (int i = 0; i < nd; i++)
        if (ks[i] < 1 || ks[i] > KILN_WIN_ATTR_MAX)
            return kiln_op_fail(c, KILN_ERR_SHAPE, "kernel dim %d is %lld", i,
                                (long long)ks[i]);
    if ((s = read_ints(c, "strides", nd, 1, st, NULL)) != KILN_OK) return s;
    if ((s = read_ints(c, "dilations", nd, 1, dl, NULL)) != KILN_OK) return s;
    if ((s = read_ints(c, "pads", 2 * nd, 0, pads, NULL)) != KILN_OK) return s;

    const char *ap = kiln_attr_string(c->node, "auto_pad", "NOTSET");
    if (strcmp(ap, "NOTSET") == 0 || ap[0] == '\0') *auto_pad = KILN_PAD_NOTSET;
    else if (strcmp(ap, "SAME_UPPER") == 0) *auto_pad = KILN_PAD_SAME_UPPER;
    else if (strcmp(ap, "SAME_LOWER") == 0) *auto_pad = KILN_PAD_SAME_LOWER;
    else if (strcmp(ap, "VALID") == 0) *auto_pad = KILN_PAD_VALID;
    else return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "auto_pad '%s' is unknown", ap);

    for (int i = 0; i < nd; i++) {
        int t = KILN_WIN_SLOT(w, i);
        w->k[t] = ks[i];
        w->s[t] = st[i];
        w->d[t] = dl[i];
        /* auto_pad computes the pads; explicit ones are ignored then. */
        w->pb[t] = *auto_pad == KILN_PAD_NOTSET ? pads[i] : 0;
        w->pe[t] = *auto_pad == KILN_PAD_NOTSET ? pads[nd + i] : 0;
    }
    return KILN_OK;
}

kiln_status kiln_window_forward(kiln_op_ctx *c, const kiln_tensor *x, const int64_t *kernel,
                                bool ceil_mode, kiln_window *w) {
    if (x->ndim < 3)
        return kiln_op_fail(c, KILN_ERR_SHAPE, "input must have rank >= 3 (N, C, spatial...)");
    int nd = x->ndim - 2;
    kiln_auto_pad ap;
    kiln_status s = kiln_window_attrs(c, nd, kernel, w, &ap);
    if (s != KILN_OK) return s;
    for (int i = 0; i < nd; i++) {
        int t = KILN_WIN_SLOT(w, i);
        int64_t in = x->dims[2 + i], st = w->s[t], ek = (w->k[t] - 1) * w->d[t] + 1, out;
        if (ap == KILN_PAD_SAME_UPPER || ap == KILN_PAD_SAME_LOWER) {
            out = (in + st - 1) / st;
            int64_t total = (out - 1) * st + ek - in;
            if (total < 0) total = 0;
            w->pb[t] = ap == KILN_PAD_SAME_UPPER ? total / 2 : total - total / 2;
            w->pe[t] = total - w->pb[t];
        } else {
            int64_t span = in + w->pb[t] + w->pe[t] - ek;
            if (span < 0)
                return kiln_op_fail(c, KILN_ERR_SHAPE,
                                    "spatial dim %d: input %lld with pads %lld+%lld is smaller "
                                    "than the kernel extent %lld",
                                    i, (long long)in, (long long)w->pb[t], (long long)w->pe[t],
                                    (long long)ek);
            if (ceil_mode && ap == KILN_PAD_NOTSET) {
                out = (span + st - 1) / st + 1;
                /* The last window must start inside the input or its left padding. */
                if ((out - 1) * st >= in + w->pb[t]) out--;
            } else {
                out = span / st + 1;
            }
        }
        w->img[t] = in;
        w->grid[t] = out;
    }
    return KILN_OK;
}

/* ------------------------------------------------------------ im2col / col2im */

/* Grid positions g in [0, G) with 0 <= g*s + off < size form [*lo, *hi). (No parameter is
 * called I: cblas.h pulls in <complex.h>, which defines it.) */
static void valid_range(int64_t G, int64_t s, int64_t off, int64_t size, int64_t *lo,
                        int64_t *hi) {
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = size - off <= 0 ? 0 : (size - off + s - 1) / s;
    if (a > G) a = G;
    if (b > G) b = G;
    if (b < a) b = a;
    *lo = a;
    *hi = b;
}

/* One template for float and double: the loops are identical, only the element type
 * changes. Rows of col are (c, j0, j1, j2); columns are grid positions (g0, g1, g2).
 * Both run on the calling thread: they are called inside the (n, g) jobs' parallel loop,
 * or between products that kiln_gemm splits over the threads, where many short OpenMP
 * regions would cost more than they save. */
#define DEFINE_IM2COL(NAME, T)                                                               \
    static void NAME(const kiln_window *w, int64_t C, const T *img, T *col) {               \
        const int64_t I0 = w->img[0], I1 = w->img[1], I2 = w->img[2];                        \
        const int64_t G0 = w->grid[0], G1 = w->grid[1], G2 = w->grid[2];                     \
        const int64_t K1 = w->k[1], K2 = w->k[2], KK = w->k[0] * K1 * K2;                    \
        const int64_t rows = C * KK, G = G0 * G1 * G2;                                       \
        for (int64_t r = 0; r < rows; r++) {                                                 \
            const int64_t kk = r % KK, j0 = kk / (K1 * K2), j1 = kk / K2 % K1, j2 = kk % K2; \
            const T *src = img + r / KK * I0 * I1 * I2;                                      \
            T *dst = col + r * G;                                                            \
            const int64_t off2 = j2 * w->d[2] - w->pb[2];                                    \
            int64_t lo, hi;                                                                  \
            valid_range(G2, w->s[2], off2, I2, &lo, &hi);                                    \
            for (int64_t g0 = 0; g0 < G0; g0++) {                                            \
                const int64_t i0 = g0 * w->s[0] - w->pb[0] + j0 * w->d[0];                   \
                for (int64_t g1 = 0; g1 < G1; g1++, dst += G2) {                             \
                    const int64_t i1 = g1 * w->s[1] - w->pb[1] + j1 * w->d[1];               \
                    if (i0 < 0 || i0 >= I0 || i1 < 0 || i1 >= I1) {                          \
                        for (int64_t g2 = 0; g2 < G2; g2++) dst[g2] = 0;                     \
                        continue;                                                            \
                    }                                                                        \
                    const int64_t base = (i0 * I1 + i1) * I2 + off2, s2 = w->s[2];           \
                    for (int64_t g2 = 0; g2 < lo; g2++) dst[g2] = 0;                         \
                    for (int64_t g2 = lo; g2 < hi; g2++) dst[g2] = src[base + g2 * s2];      \
                    for (int64_t g2 = hi; g2 < G2; g2++) dst[g2] = 0;                        \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }

/* Scatter-add, channel by channel. */
#define DEFINE_COL2IM(NAME, T)                                                               \
    static void NAME(const kiln_window *w, int64_t C, const T *col, T *img) {               \
        const int64_t I0 = w->img[0], I1 = w->img[1], I2 = w->img[2];                        \
        const int64_t G0 = w->grid[0], G1 = w->grid[1], G2 = w->grid[2];                     \
        const int64_t K1 = w->k[1], K2 = w->k[2], KK = w->k[0] * K1 * K2;                    \
        const int64_t G = G0 * G1 * G2;                                                      \
        for (int64_t ch = 0; ch < C; ch++) {                                                 \
            T *dst = img + ch * I0 * I1 * I2;                                                \
            for (int64_t kk = 0; kk < KK; kk++) {                                            \
                const int64_t j0 = kk / (K1 * K2), j1 = kk / K2 % K1, j2 = kk % K2;          \
                const T *src = col + (ch * KK + kk) * G;                                     \
                const int64_t off2 = j2 * w->d[2] - w->pb[2];                                \
                int64_t lo, hi;                                                              \
                valid_range(G2, w->s[2], off2, I2, &lo, &hi);                                \
                for (int64_t g0 = 0; g0 < G0; g0++) {                                        \
                    const int64_t i0 = g0 * w->s[0] - w->pb[0] + j0 * w->d[0];               \
                    for (int64_t g1 = 0; g1 < G1; g1++, src += G2) {                         \
                        const int64_t i1 = g1 * w->s[1] - w->pb[1] + j1 * w->d[1];           \
                        if (i0 < 0 || i0 >= I0 || i1 < 0 || i1 >= I1) continue;              \
                        const int64_t base = (i0 * I1 + i1) * I2 + off2, s2 = w->s[2];       \
                        for (int64_t g2 = lo; g2 < hi; g2++) dst[base + g2 * s2] += src[g2]; \
                    }                                                                        \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }

DEFINE_IM2COL(im2col_f32, float)
DEFINE_IM2COL(im2col_f64, double)
DEFINE_COL2IM(col2im_f32, float)
DEFINE_COL2IM(col2im_f64, double)

void kiln_im2col(bool dbl, const kiln_window *w, int64_t C, const void *img, void *col) {
    if (dbl) im2col_f64(w, C, img, col);
    else im2col_f32(w, C, img, col);
}

void kiln_col2im(bool dbl, const kiln_window *w, int64_t C, const void *col, void *img) {
    if (dbl) col2im_f64(w, C, col, img);
    else col2im_f32(w, C, col, img);
}

bool kiln_window_is_identity(const kiln_window *w) {
    for (int t = 0; t < KILN_WIN_MAX; t++)
        if (w->k[t] != 1 || w->s[t] != 1 || w->pb[t] != 0 || w->img[t] != w->grid[t])
            return false;
    return true;
}

void kiln_fill_rows(bool dbl, void *y, int64_t rows, int64_t cols, const void *vals) {
    for (int64_t r = 0; r < rows; r++) {
        if (dbl) {
            double *p = (double *)y + r * cols, v = ((const double *)vals)[r];
            for (int64_t i = 0; i < cols; i++) p[i] = v;
        } else {
            float *p = (float *)y + r * cols, v = ((const float *)vals)[r];
            for (int64_t i = 0; i < cols; i++) p[i] = v;
        }
    }
}

/* ---------------------------------------------------------------------- BLAS */

bool kiln_blas_fits(int64_t v) { return v >= 0 && v <= 0x7fffffff; }

/* OpenBLAS runs single-threaded: kiln threads products itself with OpenMP. OpenBLAS's
 * pthread pool and OpenMP's threads would otherwise take turns on the same cores, each
 * spinning while the other works (measured on 2 idle cores, a mnist-net training step's
 * convolutions and products: 45-65 ms with OpenBLAS threading each product, 19-20 ms with
 * OpenMP only). */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single_threaded(void) { openblas_set_num_threads(1); }

/* Products up to this many multiply-adds run on one thread (OpenBLAS's own threshold,
 * 65536 * GEMM_MULTITHREAD_THRESHOLD in interface/gemm.c). */
#define GEMM_SPLIT_MNK (65536.0 * 4)

static void gemm1(bool dbl, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  double alpha, const void *A, int64_t lda, const void *B, int64_t ldb,
                  double beta, void *C, int64_t ldc) {
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    if (dbl)
        cblas_dgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, alpha, A, (int)lda, B,
                    (int)ldb, beta, C, (int)ldc);
    else
        cblas_sgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, (float)alpha, A, (int)lda,
                    B, (int)ldb, (float)beta, C, (int)ldc);
}

void kiln_gemm(bool dbl, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
               double alpha, const void *A, int64_t lda, const void *B, int64_t ldb,
               double beta, void *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        /* Nothing to multiply: C = beta*C; the BLAS would reject the zero leading dims. */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                if (dbl) {
                    double *p = (double *)C + i * ldc + j;
                    *p = beta == 0 ? 0 : beta * *p;
                } else {
                    float *p = (float *)C + i * ldc + j;
                    *p = beta == 0 ? 0 : (float)beta * *p;
                }
            }
        return;
    }
    pthread_once(&blas_once, blas_single_threaded);
    int nt = omp_in_parallel() ? 1 : kiln_cpu_threads();
    if (nt < 2 || (double)M * (double)N * (double)K <= GEMM_SPLIT_MNK) {
        gemm1(dbl, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* Split the larger of M and N into nt blocks, one product per thread. Row block
     * [a, b) of op(A) starts at row a of A, or column a when transposed; column block of
     * op(B) likewise. */
    const bool rows = M >= N;
    const int64_t D = rows ? M : N;
    const size_t esz = dbl ? sizeof(double) : sizeof(float);
    if (nt > D) nt = (int)D;
    const char *Ab = A, *Bb = B;
    char *Cb = C;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        const int64_t a = D * t / nt, b = D * (t + 1) / nt;
        if (rows)
            gemm1(dbl, trans_a, trans_b, b - a, N, K, alpha,
                  Ab + (size_t)(trans_a ? a : a * lda) * esz, lda, B, ldb, beta,
                  Cb + (size_t)(a * ldc) * esz, ldc);
        else
            gemm1(dbl, trans_a, trans_b, M, b - a, K, alpha, A, lda,
                  Bb + (size_t)(trans_b ? a * ldb : a) * esz, ldb, beta, Cb + (size_t)a * esz,
                  ldc);
    }
}

int kiln_gemm_job_threads(int64_t jobs, int64_t M, int64_t N, int64_t K) {
    int t = kiln_cpu_threads();
    if (jobs < 2 || t < 2) return 1;
    /* Small products cannot be split: run them side by side. Big ones too when the jobs
     * share out evenly over the threads; otherwise one after the other, each split by
     * kiln_gemm. */
    if ((double)M * (double)N * (double)K <= GEMM_SPLIT_MNK || jobs % t == 0 || jobs >= 4 * t)
        return jobs < t ? (int)jobs : t;
    return 1;
}

/* ------------------------------------------------------- convolution products */

void kiln_conv_geom_finish(kiln_conv_geom *g) {
    g->K = g->w.k[0] * g->w.k[1] * g->w.k[2];
    g->img_n = g->w.img[0] * g->w.img[1] * g->w.img[2];
    g->grid_n = g->w.grid[0] * g->w.grid[1] * g->w.grid[2];
}

/* Threads for the (n, g) products of a kind, each (rows, cols, inner). */
static int conv_threads(kiln_conv_kind kind, const kiln_conv_geom *g) {
    const int64_t jobs = g->N * g->G, ciK = g->ci * g->K;
    switch (kind) {
    case KILN_CONV_IMG2GRID: return kiln_gemm_job_threads(jobs, g->cg, g->grid_n, ciK);
    case KILN_CONV_GRID2IMG: return kiln_gemm_job_threads(jobs, ciK, g->grid_n, g->cg);
    default: return kiln_gemm_job_threads(jobs, g->cg, ciK, g->grid_n);
    }
}

/* Bytes of one col buffer (ci*K, O); 0 when the window is the identity. */
static size_t conv_col_bytes(const kiln_conv_geom *g, size_t esz) {
    if (kiln_window_is_identity(&g->w)) return 0;
    return kiln_align64((size_t)(g->ci * g->K * g->grid_n) * esz);
}

/* Bytes of one copy of dW (G*cg, ci*K). */
static size_t conv_weight_bytes(const kiln_conv_geom *g, size_t esz) {
    return kiln_align64((size_t)(g->G * g->cg * g->ci * g->K) * esz);
}

/* Bytes for nt threads of a kind. */
static size_t conv_ws_for(kiln_conv_kind kind, const kiln_conv_geom *g, size_t esz, int nt) {
    size_t b = (size_t)nt * conv_col_bytes(g, esz);
    if (kind == KILN_CONV_WGRAD && nt > 1) b += (size_t)(nt - 1) * conv_weight_bytes(g, esz);
    return b;
}

size_t kiln_conv_workspace(kiln_conv_kind kind, bool dbl, const kiln_conv_geom *g) {
    return conv_ws_for(kind, g, dbl ? sizeof(double) : sizeof(float), conv_threads(kind, g));
}

/* The threads the workspace allows (at least the asked-for count fits when the workspace
 * came from kiln_conv_workspace); 0 when not even one thread fits. */
static int conv_fit_threads(kiln_conv_kind kind, const kiln_conv_geom *g, size_t esz,
                            size_t ws_size) {
    int nt = conv_threads(kind, g);
    while (nt > 0 && conv_ws_for(kind, g, esz, nt) > ws_size) nt--;
    return nt;
}

bool kiln_conv_img2grid(bool dbl, const kiln_conv_geom *g, const void *W, const void *img,
                        const void *bias, void *grid, void *ws, size_t ws_size) {
    const size_t esz = dbl ? sizeof(double) : sizeof(float), cb = conv_col_bytes(g, esz);
    const int nt = conv_fit_threads(KILN_CONV_IMG2GRID, g, esz, ws_size);
    if (nt < 1) return false;
    const int64_t jobs = g->N * g->G, ciK = g->ci * g->K, gn = g->grid_n, imn = g->img_n;
    const char *Wb = W, *X = img, *B = bias;
    char *Y = grid, *col = ws;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t j = 0; j < jobs; j++) {
        const int64_t n = j / g->G, gr = j % g->G;
        const char *xg = X + (size_t)((n * g->G + gr) * g->ci * imn) * esz;  // (ci, I)
        char *yg = Y + (size_t)((n * g->G + gr) * g->cg * gn) * esz;        // (cg, O)
        const void *src = xg;
        if (cb) {
            char *mycol = col + (size_t)omp_get_thread_num() * cb;
            kiln_im2col(dbl, &g->w, g->ci, xg, mycol);
            src = mycol;
        }
        if (B) kiln_fill_rows(dbl, yg, g->cg, gn, B + (size_t)(gr * g->cg) * esz);
        kiln_gemm(dbl, false, false, g->cg, gn, ciK, 1.0, Wb + (size_t)(gr * g->cg * ciK) * esz,
                  ciK, src, gn, B ? 1.0 : 0.0, yg, gn);
    }
    return true;
}

bool kiln_conv_grid2img(bool dbl, const kiln_conv_geom *g, const void *W, const void *grid,
                        const void *bias, void *img, void *ws, size_t ws_size) {
    const size_t esz = dbl ? sizeof(double) : sizeof(float), cb = conv_col_bytes(g, esz);
    const int nt = conv_fit_threads(KILN_CONV_GRID2IMG, g, esz, ws_size);
    if (nt < 1) return false;
    const int64_t jobs = g->N * g->G, ciK = g->ci * g->K, gn = g->grid_n, imn = g->img_n;
    const char *Wb = W, *X = grid, *B = bias;
    char *Y = img, *col = ws;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t j = 0; j < jobs; j++) {
        const int64_t n = j / g->G, gr = j % g->G;
        const char *xg = X + (size_t)((n * g->G + gr) * g->cg * gn) * esz;  // (cg, O)
        const char *wg = Wb + (size_t)(gr * g->cg * ciK) * esz;              // (cg, ci*K)
        char *yg = Y + (size_t)((n * g->G + gr) * g->ci * imn) * esz;        // (ci, I)
        if (B) kiln_fill_rows(dbl, yg, g->ci, imn, B + (size_t)(gr * g->ci) * esz);
        else memset(yg, 0, (size_t)(g->ci * imn) * esz);
        if (!cb) {
            /* 1x1, unit strides, no pads: col is img[n, g] itself. */
            kiln_gemm(dbl, true, false, ciK, gn, g->cg, 1.0, wg, ciK, xg, gn, 1.0, yg, gn);
            continue;
        }
        char *mycol = col + (size_t)omp_get_thread_num() * cb;
        kiln_gemm(dbl, true, false, ciK, gn, g->cg, 1.0, wg, ciK, xg, gn, 0.0, mycol, gn);
        kiln_col2im(dbl, &g->w, g->ci, mycol, yg);
    }
    return true;
}

bool kiln_conv_weight_grad(bool dbl, const kiln_conv_geom *g, const void *grid,
                           const void *img, void *dW, void *ws, size_t ws_size) {
    const size_t esz = dbl ? sizeof(double) : sizeof(float), cb = conv_col_bytes(g, esz);
    const size_t wb = conv_weight_bytes(g, esz);
    const int nt = conv_fit_threads(KILN_CONV_WGRAD, g, esz, ws_size);
    if (nt < 1) return false;
    const int64_t jobs = g->N * g->G, ciK = g->ci * g->K, nw = g->G * g->cg * ciK;
    const int64_t gn = g->grid_n, imn = g->img_n;
    const char *X = img, *D = grid;
    char *col = ws, *part = col + (size_t)nt * cb; /* nt-1 partial sums of dW */
    memset(dW, 0, (size_t)nw * esz);
    if (nt > 1) memset(part, 0, (size_t)(nt - 1) * wb);
    /* Every product accumulates (beta = 1) into its thread's copy of dW: thread 0 into dW
     * itself, the others into their partial sums, added up at the end. */
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t j = 0; j < jobs; j++) {
        const int64_t n = j / g->G, gr = j % g->G;
        const int t = omp_get_thread_num();
        const char *xg = X + (size_t)((n * g->G + gr) * g->ci * imn) * esz;  // (ci, I)
        const char *dg = D + (size_t)((n * g->G + gr) * g->cg * gn) * esz;  // (cg, O)
        char *target = t == 0 ? dW : part + (size_t)(t - 1) * wb;
        const void *src = xg;
        if (cb) {
            char *mycol = col + (size_t)t * cb;
            kiln_im2col(dbl, &g->w, g->ci, xg, mycol);
            src = mycol;
        }
        kiln_gemm(dbl, false, true, g->cg, ciK, gn, 1.0, dg, gn, src, gn, 1.0,
                  target + (size_t)(gr * g->cg * ciK) * esz, ciK);
    }
    for (int t = 1; t < nt; t++) {
        const char *p = part + (size_t)(t - 1) * wb;
        if (dbl)
            for (int64_t i = 0; i < nw; i++) ((double *)dW)[i] += ((const double *)p)[i];
        else
            for (int64_t i = 0; i < nw; i++) ((float *)dW)[i] += ((const float *)p)[i];
    }
    return true;
}

/* ------------------------------------------------------------------- staging */

bool kiln_stage_needed(kiln_dtype t) { return t != KILN_F32 && t != KILN_F64; }

size_t kiln_align64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t kiln_stage_size(const kiln_tensor *t) {
    if (!t || !kiln_stage_needed(t->dtype)) return 0;
    return kiln_align64((size_t)kiln_tensor_numel(t) * sizeof(float));
}

const void *kiln_stage_in(const kiln_tensor *t, char **ws) {
    if (!t) return NULL;
    /* An empty tensor is not staged: it takes no workspace, which may then be NULL, and
     * kernels offset the pointer they get (NULL + 0 is undefined). */
    if (!kiln_stage_needed(t->dtype) || kiln_tensor_numel(t) == 0) return t->data;
    float *dst = (float *)*ws;
    int64_t n = kiln_tensor_numel(t);
    *ws += kiln_stage_size(t);
    switch (t->dtype) {
    case KILN_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = kiln_f16_to_f32(((const uint16_t *)t->data)[i]);
        break;
    case KILN_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = kiln_bf16_to_f32(((const uint16_t *)t->data)[i]);
        break;
    case KILN_I8:
        for (int64_t i = 0; i < n; i++) dst[i] = ((const int8_t *)t->data)[i];
        break;
    case KILN_U8:
        for (int64_t i = 0; i < n; i++) dst[i] = ((const uint8_t *)t->data)[i];
        break;
    default:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)kiln_get_f64(t, i);
        break;
    }
    return dst;
}

void *kiln_stage_out(kiln_tensor *t, char **ws) {
    if (!kiln_stage_needed(t->dtype) || kiln_tensor_numel(t) == 0) return t->data; /* as kiln_stage_in */
    void *p = *ws;
    *ws += kiln_stage_size(t);
    return p;
}

static double clamp(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

void kiln_stage_finish(kiln_tensor *t, const void *buf) {
    if (!kiln_stage_needed(t->dtype) || buf == t->data) return;
    const float *src = buf;
    int64_t n = kiln_tensor_numel(t);
    switch (t->dtype) {
    case KILN_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)t->data)[i] = kiln_f32_to_f16(src[i]);
        break;
    case KILN_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)t->data)[i] = kiln_f32_to_bf16(src[i]);
        break;
    case KILN_I8: /* clamped: an empty max-pool window yields -inf, the lowest value */
        for (int64_t i = 0; i < n; i++)
            ((int8_t *)t->data)[i] = (int8_t)lrint(clamp(src[i], INT8_MIN, INT8_MAX));
        break;
    case KILN_U8:
        for (int64_t i = 0; i < n; i++)
            ((uint8_t *)t->data)[i] = (uint8_t)lrint(clamp(src[i], 0, UINT8_MAX));
        break;
    default:
        for (int64_t i = 0; i < n; i++) kiln_set_f64(t, i, src[i]);
        break;
    }
}

/* ------------------------------------------------------------- pool helpers */

kiln_status kiln_pool_infer(kiln_op_ctx *c, bool allow_int8, bool ceil_mode, kiln_window *w) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c,
                  kiln_dtype_is_float(x->dtype) ||
                      (allow_int8 && (x->dtype == KILN_I8 || x->dtype == KILN_U8)),
                  KILN_ERR_TYPE, "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 3, KILN_ERR_SHAPE,
                  "X must have rank >= 3 (N, C, spatial...), got rank %d", x->ndim);
    kiln_status s = kiln_window_forward(c, x, NULL, ceil_mode, w);
    if (s != KILN_OK) return s;
    int64_t dims[KILN_MAX_DIMS] = {x->dims[0], x->dims[1]};
    for (int i = 0; i < w->nd; i++) dims[2 + i] = w->grid[KILN_WIN_SLOT(w, i)];
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, dims);
    return KILN_OK;
}

kiln_status kiln_global_pool_infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 3, KILN_ERR_SHAPE,
                  "X must have rank >= 3 (N, C, spatial...), got rank %d", x->ndim);
    int64_t dims[KILN_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) dims[i] = i < 2 ? x->dims[i] : 1;
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, dims);
    return KILN_OK;
}

/* dY's dtype and shape against the output y the forward pool gives for X. */
static kiln_status check_dy(kiln_op_ctx *c, const kiln_tensor *dy, const kiln_tensor *y) {
    char ys[128];
    KILN_OP_CHECK(c, dy->dtype == y->dtype, KILN_ERR_TYPE, "dY must have X's dtype %s",
                  kiln_dtype_name(y->dtype));
    bool same = dy->ndim == y->ndim;
    for (int i = 0; same && i < dy->ndim; i++) same = dy->dims[i] == y->dims[i];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dY must have the pool's output shape %s",
                  kiln_shape_str(y, ys, sizeof ys));
    return KILN_OK;
}

kiln_status kiln_pool_grad_infer(kiln_op_ctx *c, bool ceil_mode, kiln_window *w) {
    kiln_tensor y = {0};
    kiln_tensor *xin[1] = {c->in[1]}, *yout[1] = {&y};
    kiln_op_ctx fwd = *c;
    fwd.n_in = fwd.n_out = 1;
    fwd.in = xin;
    fwd.out = yout;
    KILN_OP_CHECK(c, kiln_dtype_is_float(c->in[1]->dtype), KILN_ERR_TYPE,
                  "X dtype %s is not supported (float dtypes only)",
                  kiln_dtype_name(c->in[1]->dtype));
    kiln_status st = kiln_pool_infer(&fwd, false, ceil_mode, w);
    if (st == KILN_OK) st = check_dy(c, c->in[0], &y);
    if (st == KILN_OK)
        kiln_tensor_set_shape(c->out[0], c->in[1]->dtype, c->in[1]->ndim, c->in[1]->dims);
    return st;
}

kiln_status kiln_global_pool_grad_infer(kiln_op_ctx *c) {
    kiln_tensor y = {0};
    kiln_tensor *xin[1] = {c->in[1]}, *yout[1] = {&y};
    kiln_op_ctx fwd = *c;
    fwd.n_in = fwd.n_out = 1;
    fwd.in = xin;
    fwd.out = yout;
    kiln_status st = kiln_global_pool_infer(&fwd);
    if (st == KILN_OK) st = check_dy(c, c->in[0], &y);
    if (st == KILN_OK)
        kiln_tensor_set_shape(c->out[0], c->in[1]->dtype, c->in[1]->ndim, c->in[1]->dims);
    return st;
}

#ifdef KILN_OPTESTS
void kiln_attr_text_ints(char *buf, size_t size, const char *name, int n, const int64_t *a,
                         const int64_t *b, int64_t dflt) {
    size_t len = strlen(buf);
    len += (size_t)snprintf(buf + len, size - len, ";%s=[", name);
    for (int i = 0; i < (b ? 2 * n : n) && len < size; i++) {
        int64_t v = i < n ? a[i] : b[i - n];
        len += (size_t)snprintf(buf + len, size - len, "%s%lld", i ? "," : "",
                                (long long)(v ? v : dflt));
    }
    if (len < size) snprintf(buf + len, size - len, "]");
}
#endif /* KILN_OPTESTS */
