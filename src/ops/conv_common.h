/*
 * conv_common.h — shared machinery for Conv, ConvTranspose, the pools, Gemm and MatMul:
 *   - window geometry (kernel, strides, dilations, pads, auto_pad, ceil_mode) for 1 to 3
 *     spatial dims, with the ONNX output-size formulas;
 *   - im2col / col2im over that geometry;
 *   - BLAS dispatch (cblas_sgemm / cblas_dgemm, OpenBLAS single-threaded, big products
 *     split over OpenMP threads) and the rule that decides whether independent products
 *     run side by side or one by one;
 *   - staging of f16 / bf16 (and for pools, int8 / uint8) tensors through f32 scratch.
 *
 * Compute precision: f64 tensors are computed in f64, every other float dtype in f32.
 * "dbl" arguments select f64 (double) buffers, otherwise buffers hold float.
 */
#ifndef KILN_OPS_CONV_COMMON_H
#define KILN_OPS_CONV_COMMON_H

#include "../core/internal.h"

#define KILN_WIN_MAX 3 /* spatial dims handled by the window kernels */

typedef enum kiln_auto_pad {
    KILN_PAD_NOTSET = 0,
    KILN_PAD_SAME_UPPER,
    KILN_PAD_SAME_LOWER,
    KILN_PAD_VALID
} kiln_auto_pad;

/*
 * A sliding window over an image. "img" is the tensor the window reads (Conv, pools) or
 * writes (ConvTranspose), "grid" the positions the window takes (Conv's output, or
 * ConvTranspose's input). Position g of dim i covers img coordinates
 *     g*s[i] - pb[i] + j*d[i],  j = 0 .. k[i]-1.
 * The nd spatial dims are right-aligned into KILN_WIN_MAX slots; leading slots are unit
 * dims (size 1, kernel 1, stride 1, dilation 1, no pads) so kernels loop over 3 dims.
 */
typedef struct kiln_window {
    int nd;
    int64_t img[KILN_WIN_MAX], grid[KILN_WIN_MAX];
    int64_t k[KILN_WIN_MAX], s[KILN_WIN_MAX], d[KILN_WIN_MAX];
    int64_t pb[KILN_WIN_MAX], pe[KILN_WIN_MAX]; /* pads at the beginning / end */
} kiln_window;

/* Slot of spatial dim i (0-based) of a window with nd spatial dims. */
#define KILN_WIN_SLOT(w, i) (KILN_WIN_MAX - (w)->nd + (i))

/* The taps j in [*lo, *hi) of slot t's window at grid position g that land inside img
 * (0 <= g*s - pb + j*d < img): pooling loops run over these without bounds checks. Inline
 * and division-free without dilation, since pools call it once per output. */
static inline void kiln_window_taps(const kiln_window *w, int t, int64_t g, int64_t *lo,
                                    int64_t *hi) {
    const int64_t start = g * w->s[t] - w->pb[t], d = w->d[t];
    int64_t a = -start, b = w->img[t] - start; /* the bounds for d == 1 */
    if (d != 1) {
        a = a <= 0 ? a / d : (a + d - 1) / d;  /* ceil(a / d); a <= 0 rounds toward 0 */
        b = b <= 0 ? b / d : (b + d - 1) / d;
    }
    if (a < 0) a = 0;
    if (b > w->k[t]) b = w->k[t];
    *lo = a;
    *hi = b > a ? b : a;
}

/* Read kernel_shape (or take kernel, the kernel dims of W, when non-NULL and the attribute
 * is absent; both must agree when both are given), strides, dilations, pads and auto_pad
 * for nd spatial dims and fill w's kernel, strides, dilations and explicit pads (grid and
 * img are left to the caller). Fails on counts that do not match nd, non-positive
 * kernels/strides/dilations, negative pads or an unknown auto_pad. */
kiln_status kiln_window_attrs(kiln_op_ctx *c, int nd, const int64_t *kernel, kiln_window *w,
                              kiln_auto_pad *auto_pad);

/* Forward windows (Conv, pools): sets img to the spatial dims of x (N,C,spatial...) and
 * computes grid (the output's spatial dims) and, for auto_pad, the pads:
 *   NOTSET: floor((in + pb + pe - ek) / s) + 1, or with ceil_mode ceil(...) + 1 dropping
 *           a last window that would start past the input and its left padding;
 *   SAME_UPPER / SAME_LOWER: ceil(in / s), total pad max(0, (out-1)*s + ek - in) split
 *           with the odd one at the end (UPPER) or at the beginning (LOWER);
 *   VALID:  floor((in - ek) / s) + 1, no pads;
 * where ek = (k-1)*d + 1. Fails (KILN_ERR_SHAPE) when a window does not fit. */
kiln_status kiln_window_forward(kiln_op_ctx *c, const kiln_tensor *x, const int64_t *kernel,
                                bool ceil_mode, kiln_window *w);

/* col (C*k0*k1*k2, g0*g1*g2) from img (C, i0, i1, i2), zeros where a window leaves img.
 * im2col and col2im run on the calling thread. */
void kiln_im2col(bool dbl, const kiln_window *w, int64_t C, const void *img, void *col);
/* img (C, i0, i1, i2) += col (C*k0*k1*k2, g0*g1*g2) scattered back; what falls outside
 * img is dropped. */
void kiln_col2im(bool dbl, const kiln_window *w, int64_t C, const void *col, void *img);

/* True when the window is 1x1 with unit strides and no pads over equal img and grid: then
 * im2col would copy img unchanged and callers use img as col directly. */
bool kiln_window_is_identity(const kiln_window *w);
/* y (rows, cols): row r set to vals[r] (bias fill before an accumulating gemm). */
void kiln_fill_rows(bool dbl, void *y, int64_t rows, int64_t cols, const void *vals);

/* Row-major C = alpha * op(A) op(B) + beta * C through cblas_sgemm / cblas_dgemm. op(A) is
 * (M,K), op(B) is (K,N). Empty products are handled here (K == 0 scales C by beta), so
 * callers need no special cases. Sizes must fit in int (see kiln_blas_fits).
 * Threading: OpenBLAS is kept single-threaded (one pool of threads, OpenMP's, for all of
 * kiln); called outside a parallel region, a product bigger than 65536*4 multiply-adds is
 * split over the kernel threads (blocks of rows or columns of C), inside one it runs on
 * the calling thread. */
void kiln_gemm(bool dbl, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
               double alpha, const void *A, int64_t lda, const void *B, int64_t ldb,
               double beta, void *C, int64_t ldc);
/* Whether v can be passed to the BLAS (32-bit int interface). */
bool kiln_blas_fits(int64_t v);

/* Threads for running `jobs` independent (M,N,K) products side by side with OpenMP (each
 * product then on one thread): up to the kernel threads when the products are too small
 * to split or the jobs share out evenly; 1 (one product after the other, each split by
 * kiln_gemm) for a few big products. */
int kiln_gemm_job_threads(int64_t jobs, int64_t M, int64_t N, int64_t K);

/*
 * Convolution over N images in G groups, shared by Conv, ConvTranspose and their
 * gradients. The window w reads "img" and slides over "grid"; per group, img has ci
 * channels and grid cg channels, both tensors are (N, G*channels, spatial...), and the
 * weights of group g are the (cg, ci*K) matrix at W + g*cg*ci*K:
 *   Conv:          img = X, grid = Y, ci = C/group, cg = M/group, W (M, C/group, k...);
 *   ConvTranspose: img = Y, grid = X, ci = M/group, cg = C/group, W (C, M/group, k...).
 * Three products cover both ops in both directions:
 *   img2grid:    grid[n,g] = W[g] @ im2col(img[n,g])          (Conv, dX of ConvTranspose)
 *   grid2img:    img[n,g]  = col2im(W[g]^T @ grid[n,g])       (ConvTranspose, dX of Conv)
 *   weight_grad: dW[g]     = sum_n grid[n,g] @ im2col(img[n,g])^T          (both dW)
 * Each runs its (n, g) products side by side with OpenMP as kiln_gemm_job_threads says
 * (with a batch, nearly always), with per-thread col buffers (and for weight_grad
 * per-thread partial sums of dW) in the workspace; otherwise one job after the other,
 * kiln_gemm splitting each product. 1x1 windows with unit strides and no pads skip
 * im2col / col2im.
 */
typedef struct kiln_conv_geom {
    kiln_window w;
    int64_t N, G, ci, cg;
    int64_t K;      /* kernel taps per channel */
    int64_t img_n;  /* img elements per channel */
    int64_t grid_n; /* grid elements per channel (no field is called I: cblas.h pulls in
                       <complex.h>, which defines it) */
} kiln_conv_geom;

typedef enum kiln_conv_kind {
    KILN_CONV_IMG2GRID,
    KILN_CONV_GRID2IMG,
    KILN_CONV_WGRAD
} kiln_conv_kind;

/* Fill K, img_n and grid_n from w. */
void kiln_conv_geom_finish(kiln_conv_geom *g);
/* Workspace bytes the kind of product needs (besides any staging). */
size_t kiln_conv_workspace(kiln_conv_kind kind, bool dbl, const kiln_conv_geom *g);
/* grid (N, G*cg, O) = W @ im2col(img) (+ bias (G*cg) per channel, NULL: none). false when
 * ws_size is below what kiln_conv_workspace asked for. */
bool kiln_conv_img2grid(bool dbl, const kiln_conv_geom *g, const void *W, const void *img,
                        const void *bias, void *grid, void *ws, size_t ws_size);
/* img (N, G*ci, I) = col2im(W^T @ grid) (+ bias (G*ci), NULL: none). */
bool kiln_conv_grid2img(bool dbl, const kiln_conv_geom *g, const void *W, const void *grid,
                        const void *bias, void *img, void *ws, size_t ws_size);
/* dW (G*cg, ci*K) = sum over n of grid[n] @ im2col(img[n])^T. */
bool kiln_conv_weight_grad(bool dbl, const kiln_conv_geom *g, const void *grid,
                           const void *img, void *dW, void *ws, size_t ws_size);

/* Staging through f32 scratch. f32 and f64 tensors are used in place; other dtypes
 * (f16, bf16; for the pools also int8 / uint8) are converted. Sizes are rounded up to 64
 * bytes so consecutive stages stay aligned. */
bool kiln_stage_needed(kiln_dtype t);
size_t kiln_stage_size(const kiln_tensor *t);     /* 0 when not staged */
size_t kiln_align64(size_t n);
/* t's elements as f32 (or f64 for f64 tensors): t->data, or a converted copy at *ws, which
 * advances past it. NULL for a NULL tensor. */
const void *kiln_stage_in(const kiln_tensor *t, char **ws);
/* Where to compute output t: t->data, or f32 scratch at *ws (advanced). */
void *kiln_stage_out(kiln_tensor *t, char **ws);
/* Round scratch buf back into t when it was staged (nothing otherwise). Values are
 * rounded to nearest even for f16/bf16; integer dtypes receive exact values. */
void kiln_stage_finish(kiln_tensor *t, const void *buf);

/* The convolution prologue (issue 12; kiln.FusedConv's input 4, kiln.ConvGradWeight's
 * input 3, made by the conv-bn-prologue pass from a training BatchNormalization's output 4):
 * P, f32 (2, C), row 0 a and row 1 k per input channel of X (N, C, spatial...), and the
 * convolution reads X' = act(a * X + k), act Relu (NaN to 0) when relu else the identity,
 * computed in f32 (f64 for f64 X) and not rounded to X's dtype; the zero padding applies to
 * X'. kiln_conv_prologue_check validates P against X (message naming the node and input k);
 * kiln_conv_prologue_size is the scratch X' takes (64-byte aligned); kiln_conv_prologue_in
 * writes X' at *ws (advanced) and returns it, as kiln_stage_in would return X. */
kiln_status kiln_conv_prologue_check(kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *p, int k);
size_t kiln_conv_prologue_size(const kiln_tensor *x);
const void *kiln_conv_prologue_in(const kiln_tensor *x, const kiln_tensor *p, bool relu, char **ws);
/* Conv's CPU forward (X, W, B? of c) reading X through prologue P (NULL: none). */
kiln_status kiln_conv_forward_prologue(kiln_op_ctx *c, const kiln_tensor *p, bool relu);
/* Test cases only (KILN_OPTESTS, conv.c): X' as a new f32 (f64 for f64 X) tensor, element by
 * element in double, rounded to f32 once. */
kiln_tensor *kt_conv_prologue_ref(const kiln_tensor *x, const kiln_tensor *p, bool relu);

/* Shared infer for MaxPool / AveragePool: x (N,C,spatial 1..3) with a float dtype (and
 * int8 / uint8 when allow_int8), kernel_shape required; sets out[0] to (N,C,grid...). */
kiln_status kiln_pool_infer(kiln_op_ctx *c, bool allow_int8, bool ceil_mode, kiln_window *w);
/* Shared infer for GlobalAveragePool / GlobalMaxPool: x (N,C,d...) rank >= 3, float;
 * out[0] is (N,C,1,...,1). */
kiln_status kiln_global_pool_infer(kiln_op_ctx *c);

/* Shared infer for the pools' gradient ops, inputs (dY, X) with the pool's attributes:
 * X float, dY of X's dtype and of the pool's output shape; sets w from X and out[0] to
 * X's shape. */
kiln_status kiln_pool_grad_infer(kiln_op_ctx *c, bool ceil_mode, kiln_window *w);
/* The same for the global pools' gradient ops: dY must be (N, C, 1, ..., 1). */
kiln_status kiln_global_pool_grad_infer(kiln_op_ctx *c);

/* For self-tests: append ";name=[v0,...]" to the attribute text in buf, with the n values of
 * a followed by the n values of b when b is non-NULL (pads); zeros print as dflt. */
void kiln_attr_text_ints(char *buf, size_t size, const char *name, int n, const int64_t *a,
                         const int64_t *b, int64_t dflt);

#endif
