/*
 * conv.c — Conv, kiln.FusedConv and the convolution gradients through cuDNN 9's
 * convolution API.
 *   X (N, C, W) or (N, C, H, W), W (M, C/group, kW) or (M, C/group, kH, kW), optional
 *   B (M): 1-D and 2-D convolutions (1-D as 2-D with H = 1), groups (depthwise too),
 *   strides, dilations, explicit pads or auto_pad, f32 / f16 / bf16.
 *   kiln.ConvGradInput(dY, W, X) -> dX (cudnnConvolutionBackwardData) and
 *   kiln.ConvGradWeight(X, dY, W) -> dW (cudnnConvolutionBackwardFilter) carry Conv's
 *   attributes and read only the shape of their last input; ConvGradBias is a plain sum
 *   (reduce_sum.cu).
 *
 *   Layouts: 2-D convolutions and their gradients take X, W and Y (and Z) all NCHW or all
 *   NHWC (W then KRSC, what cuDNN's NHWC kernels read); a tensor whose bytes are the same
 *   in both layouts (one channel, or 1x1 spatial) may carry either label. 1-D ones NCHW.
 *   A gradient's output (dX, dW) is written in that layout too, so its label must agree.
 *
 *   kiln.FusedConv(X, W, B?, Z?) = act(conv(X, W) + B + Z) (FUSED.md). With activation
 *   Relu, or none with a B or Z to add, one call to cudnnConvolutionBiasActivationForward
 *   computes all of it (alpha2 = 0 and z = y when there is no Z; a zeroed bias in the
 *   workspace when there is no B). cuDNN's identity activation only runs with
 *   IMPLICIT_PRECOMP_GEMM, so without an activation that algorithm is weighed against the
 *   fastest one plus a separate epilogue kernel (its time estimated from the bytes it
 *   moves). Other activations, and any combination cuDNN refuses (it is asked once per
 *   choice, and the answer kept), run the convolution and then one epilogue kernel
 *   y = act(y + B + Z).
 *
 *   1x1 convolutions with stride 1, no padding and one group over NHWC tensors (the
 *   bottleneck convolutions of ResNets, MobileNets' pointwise ones) are matrix products:
 *   one cuBLASLt call each (kiln_cuda_gemm_nt) with bias, Relu and the residual in its
 *   epilogue, other activations in place after it; cuDNN takes them when cuBLASLt has no
 *   algorithm, and all of them with the kiln_cuda's conv_gemm off (--disable conv-gemm).
 *
 *   One-group NHWC f16 / bf16 forwards with at most 64 values a window (kh * kw * channels:
 *   1x1 products of 8-64 channels, RGB stems) are timed the first time they are met on
 *   conv_pointwise.cu's tensor-core kernel against the path below, the faster kept (pw_decide;
 *   KILN_CUDA_PW=0 never, 1 always).
 *
 *   Convolutions with one input channel and one group (a network's first layer on grey
 *   images) run on conv_direct.cu's kernels, forward (with the bias, and a FusedConv's Relu
 *   when it has no residual) and kiln.ConvGradWeight, with no workspace but the weight
 *   gradient's partial sums: cuDNN is slow at them. All of them go to cuDNN with the
 *   kiln_cuda's conv_direct off (--disable conv-direct).
 *
 *   Depthwise convolutions (group == C == M, kernels up to 9x9) run on conv_depthwise.cu's
 *   kernels, forward (with the bias, a FusedConv's activation and residual) and
 *   kiln.ConvGradInput, no workspace (ConvGradWeight stays on cuDNN): cuDNN runs them far
 *   from the memory bound (convnext_tiny's 7x7 depthwise f16 NHWC at batch 256: 9.8 ms on
 *   an H200, 31 GB/s). All of them go to cuDNN with the
 *   kiln_cuda's conv_depthwise off (--disable conv-depthwise). With kiln_cuda's conv_dw_grad
 *   on (the default; off with --disable conv-dw-grad or KILN_CUDA_DW_GRAD=0)
 *   kiln.ConvGradWeight and kiln.ConvGradInput of depthwise
 *   convolutions run on conv_depthwise_grad.cu's kernels instead (their workspace: partial
 *   sums, a flipped filter), with autotune only where timed faster than cuDNN (dw_faster).
 *
 *   Channel-padded convolutions (the pad-channels pass's used_channels = u: the weights of
 *   input channels u.. are zero): cuDNN runs some padded problems far slower than their own
 *   (mobilenet_v3's stem, 4 channels with 16 outputs: 2.6 ms against 0.29 at batch 256 on
 *   an H100), most faster. The narrow way copies X's and W's first u channels into the
 *   workspace (narrow.h) and runs cuDNN on those. Forward, with autotune, the op is timed
 *   both ways the first time the problem is met (narrow_decide) and runs narrow where that
 *   was clearly faster (below NARROW_WIN of the padded time; cuDNN's own search times did
 *   not predict it: convnext's 4x4 stride-4 stem searched faster narrow, ran slower), the
 *   choice kept with the algorithm choices. KILN_CUDA_NARROW_CHANNELS=0 keeps the padded
 *   problem, =1 takes the narrow one wherever it applies (the sweep runs both).
 *
 *   Pads are computed by the CPU reference's rules (kiln_cuda_window_get). cuDNN pads both
 *   sides of a dim by one amount; when begin and end pads differ (SAME_* with an odd
 *   total, or explicit asymmetric pads) X is first copied into the workspace with its
 *   zero border and convolved with no padding (the input gradient: computed for the
 *   padded X, cropped into dX afterwards).
 *
 *   Precision: f32 runs with CUDNN_FMA_MATH (CUDNN_DEFAULT_MATH would let Ampere and
 *   Hopper use TF32) unless the kiln_cuda allows TF32 (training's default), and then
 *   also without the FFT and non-fused Winograd algorithms, whose error on f32 data is of
 *   TF32's order; f16 / bf16 use tensor cores (CUDNN_TENSOR_OP_MATH) with f32
 *   accumulation (compute type CUDNN_DATA_FLOAT).
 *
 *   Algorithm: the first time a problem is met (direction, shapes, dtype, layout, group,
 *   pads, strides, dilations, math type, workspace cap, alignment, determinism) it is
 *   timed by cudnnFindConvolution{Forward,BackwardData,BackwardFilter}AlgorithmEx on the
 *   caller's buffers, or with autotuning off chosen by cuDNN's heuristic
 *   (cudnnGetConvolution*Algorithm_v7) without timing. Deterministic mode keeps only
 *   algorithms cuDNN reports deterministic (backward algorithms 0 and 3 add with atomics).
 *   The fused call of a kiln.FusedConv may run other kernels than the plain call of the
 *   same algorithm, so with autotuning its problem is its own entry: the fastest few
 *   candidates are timed as fused calls and the best is weighed against the fastest plain
 *   convolution plus an epilogue kernel; the entry says fused or split.
 *   Choices are kept on the kiln_cuda, and timed ones in the disk cache (algo_cache.c)
 *   for later processes. Workspace: the padded copy of X or dX, if any, a zero bias for a
 *   FusedConv without B, plus the most any algorithm of the direction needs for the shape,
 *   up to CONV_WS_CAP.
 */
#include "cuda_internal.h"
#include "narrow.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CONV_WS_CAP ((size_t)512 << 20)
/* Weighing a separate epilogue kernel against a slower fused algorithm: it reads and
 * writes Y and reads Z at about this rate (bytes per ms: 3 TB/s, what a simple
 * elementwise kernel reaches on an H100 / H200), after a launch of this many ms. */
#define EPILOGUE_BYTES_PER_MS 3.0e9
#define EPILOGUE_LAUNCH_MS 0.003
/* The narrow copy of a channel-padded convolution runs when its measured time (copies
 * included) is below this share of the padded problem's. */
#define NARROW_WIN 0.95

typedef struct conv_geo {
    int64_t N, C, H, W; /* X as cuDNN sees it: padded when `padded` */
    int64_t M, Cg, G;
    int64_t kh, kw, sh, sw, dh, dw;
    int64_t ph, pw;       /* symmetric pads given to cuDNN */
    int64_t OH, OW;
    bool padded;          /* X goes through a padded copy */
    int64_t pt, pb, pl, pr; /* that copy's border */
    int64_t H0, W0;       /* X's own spatial dims */
    kiln_format fmt;      /* of X, W, Y and Z */
} conv_geo;

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

static kiln_format fmt_of(const kiln_tensor *t) { return t->ndim == 4 ? t->format : KILN_FORMAT_NCHW; }

static const char *fmt_name(kiln_format f) { return f == KILN_FORMAT_NHWC ? "NHWC" : "NCHW"; }

bool kiln_cuda_layout_free(const kiln_tensor *t) {
    return t->ndim == 4 && (t->dims[1] == 1 || t->dims[2] * t->dims[3] == 1);
}

/* t is laid out f, or has the same bytes in both layouts. */
static bool fmt_fits(const kiln_tensor *t, kiln_format f) { return fmt_of(t) == f || kiln_cuda_layout_free(t); }

/* Geometry of the convolution of x by w giving y (c: the node, for its attributes), or
 * false with a reason. */
static bool conv_geo_get(const kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *w,
                         const kiln_tensor *y, conv_geo *g, char *why, size_t n) {
    memset(g, 0, sizeof *g);
    if (x->ndim != 3 && x->ndim != 4) {
        snprintf(why, n, "%d spatial dims (1-D and 2-D convolutions are supported)", x->ndim - 2);
        return false;
    }
    if (w->ndim != x->ndim) {
        snprintf(why, n, "W has rank %d, X %d", w->ndim, x->ndim);
        return false;
    }
    /* NHWC when any of them is; a tensor whose bytes are the same in both layouts (one
     * channel, or 1x1 spatial: the first layer's X on one-channel images) goes either way */
    g->fmt = fmt_of(x) == KILN_FORMAT_NHWC || fmt_of(w) == KILN_FORMAT_NHWC || fmt_of(y) == KILN_FORMAT_NHWC
                 ? KILN_FORMAT_NHWC
                 : KILN_FORMAT_NCHW;
    if (!fmt_fits(x, g->fmt) || !fmt_fits(w, g->fmt) || !fmt_fits(y, g->fmt)) {
        snprintf(why, n, "layouts X %s, W %s, Y %s (one layout for all three)", fmt_name(fmt_of(x)),
                 fmt_name(fmt_of(w)), fmt_name(fmt_of(y)));
        return false;
    }
    kiln_cuda_window win;
    if (!kiln_cuda_window_get(c, x, y, w->dims + 2, &win, why, n)) return false;
    const bool two_d = x->ndim == 4;
    /* slot 0 is H (1 for 1-D), slot 1 is W */
    g->N = x->dims[0];
    g->C = x->dims[1];
    g->M = w->dims[0];
    g->G = kiln_attr_int(c->node, "group", 1);
    g->Cg = w->dims[1];
    g->H0 = two_d ? win.in[0] : 1;
    g->W0 = win.in[two_d ? 1 : 0];
    g->kh = two_d ? win.k[0] : 1;
    g->kw = win.k[two_d ? 1 : 0];
    g->sh = two_d ? win.s[0] : 1;
    g->sw = win.s[two_d ? 1 : 0];
    g->dh = two_d ? win.d[0] : 1;
    g->dw = win.d[two_d ? 1 : 0];
    g->OH = two_d ? win.out[0] : 1;
    g->OW = win.out[two_d ? 1 : 0];
    g->pt = two_d ? win.pb[0] : 0;
    g->pb = two_d ? win.pe[0] : 0;
    g->pl = win.pb[two_d ? 1 : 0];
    g->pr = win.pe[two_d ? 1 : 0];
    g->padded = g->pt != g->pb || g->pl != g->pr;
    g->H = g->padded ? g->H0 + g->pt + g->pb : g->H0;
    g->W = g->padded ? g->W0 + g->pl + g->pr : g->W0;
    g->ph = g->padded ? 0 : g->pt;
    g->pw = g->padded ? 0 : g->pl;
    if (g->G < 1 || g->C != g->Cg * g->G || g->M % g->G != 0) {
        snprintf(why, n, "group %lld does not fit %lld input and %lld output channels",
                 (long long)g->G, (long long)g->C, (long long)g->M);
        return false;
    }
    const int64_t all[] = {g->N, g->C, g->H, g->W, g->M, g->Cg, g->G, g->kh, g->kw, g->sh,
                           g->sw, g->dh, g->dw, g->ph, g->pw, g->OH, g->OW};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!fits_int(all[i]) || all[i] > INT_MAX / 2) {
            snprintf(why, n, "a size does not fit cuDNN's int arguments");
            return false;
        }
    if (kiln_tensor_numel(x) == 0 || kiln_tensor_numel(w) == 0 || kiln_tensor_numel(y) == 0) {
        snprintf(why, n, "empty tensors");
        return false;
    }
    return true;
}

static const kiln_tensor *input(const kiln_op_ctx *c, int i) { return i < c->n_in ? c->in[i] : NULL; }

bool kiln_cuda_conv_supported(const kiln_op_ctx *c, bool fused, char *why, size_t n) {
    conv_geo g;
    if (c->n_in < 2 || !c->in[1]) {
        snprintf(why, n, "W is missing");
        return false;
    }
    if (!conv_geo_get(c, c->in[0], c->in[1], c->out[0], &g, why, n)) return false;
    const kiln_tensor *b = input(c, 2), *z = fused ? input(c, 3) : NULL, *y = c->out[0];
    if (b && (b->ndim != 1 || b->dims[0] != g.M)) {
        snprintf(why, n, "B must have M = %lld elements", (long long)g.M);
        return false;
    }
    if (!fused) return true;
    kiln_cuda_act act;
    if (!kiln_cuda_act_get(c->node, false, &act, why, n)) return false;
    if (z) {
        bool same = z->ndim == y->ndim && z->dtype == y->dtype && fmt_of(z) == fmt_of(y);
        for (int d = 0; same && d < y->ndim; d++) same = z->dims[d] == y->dims[d];
        if (!same) {
            snprintf(why, n, "Z must have Y's dtype, shape and layout");
            return false;
        }
    }
    return true;
}

static cudnnDataType_t dnn_type(kiln_dtype t) {
    return t == KILN_F16 ? CUDNN_DATA_HALF : t == KILN_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

static cudnnTensorFormat_t dnn_format(kiln_format f) {
    return f == KILN_FORMAT_NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

/* Describe the convolution on cu's reusable descriptors (dims in NCHW order, whatever
 * the layout). */
static kiln_status set_descriptors(kiln_cuda *cu, kiln_context *ctx, const conv_geo *g,
                                   kiln_dtype dt) {
    const cudnnDataType_t t = dnn_type(dt);
    const cudnnTensorFormat_t f = dnn_format(g->fmt);
    KILN_CUDNN_CHECK(ctx, cudnnSetTensor4dDescriptor(cu->dnn_x, f, t, (int)g->N, (int)g->C, (int)g->H,
                                                     (int)g->W));
    KILN_CUDNN_CHECK(ctx, cudnnSetFilter4dDescriptor(cu->dnn_w, t, f, (int)g->M, (int)g->Cg, (int)g->kh,
                                                     (int)g->kw));
    KILN_CUDNN_CHECK(ctx, cudnnSetConvolution2dDescriptor(cu->dnn_conv, (int)g->ph, (int)g->pw,
                                                          (int)g->sh, (int)g->sw, (int)g->dh,
                                                          (int)g->dw, CUDNN_CROSS_CORRELATION,
                                                          CUDNN_DATA_FLOAT));
    KILN_CUDNN_CHECK(ctx, cudnnSetConvolutionGroupCount(cu->dnn_conv, (int)g->G));
    KILN_CUDNN_CHECK(ctx, cudnnSetConvolutionMathType(
                              cu->dnn_conv, dt == KILN_F32 && !cu->allow_tf32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
    KILN_CUDNN_CHECK(ctx, cudnnSetTensor4dDescriptor(cu->dnn_y, f, t, (int)g->N, (int)g->M, (int)g->OH,
                                                     (int)g->OW));
    int od[4] = {0, 0, 0, 0};
    KILN_CUDNN_CHECK(ctx, cudnnGetConvolution2dForwardOutputDim(cu->dnn_conv, cu->dnn_x, cu->dnn_w,
                                                                &od[0], &od[1], &od[2], &od[3]));
    if (od[0] != g->N || od[1] != g->M || od[2] != g->OH || od[3] != g->OW)
        return kiln_fail(ctx, KILN_ERR_INTERNAL,
                         "cuDNN computes output (%d,%d,%d,%d), infer chose (%lld,%lld,%lld,%lld)",
                         od[0], od[1], od[2], od[3], (long long)g->N, (long long)g->M,
                         (long long)g->OH, (long long)g->OW);
    return KILN_OK;
}

static size_t pad_bytes(const conv_geo *g, kiln_dtype dt) {
    return g->padded ? align256((size_t)(g->N * g->C * g->H * g->W) * kiln_dtype_size(dt)) : 0;
}

/* A zeroed bias for cuDNN's fused call when kiln.FusedConv has no B. */
static size_t zero_bias_bytes(const kiln_op_ctx *c, bool fused, const conv_geo *g, kiln_dtype dt) {
    return fused && !input(c, 2) ? align256((size_t)g->M * kiln_dtype_size(dt)) : 0;
}

static bool is_fused(const kiln_op_ctx *c) { return strcmp(c->node->op_type, "FusedConv") == 0; }

/* The narrow problem of a channel-padded forward convolution (used_channels u below C, one
 * group, no padded copy of X): g with C = u. false when it does not apply. */
static bool narrow_geo(const kiln_op_ctx *c, const conv_geo *g, conv_geo *gn) {
    const int64_t u = kiln_attr_int(c->node, "used_channels", 0);
    if (u < 1 || u >= g->C || g->G != 1 || g->padded) return false;
    *gn = *g;
    gn->C = gn->Cg = u;
    return true;
}

/* Workspace of the narrow copies: X (N, u, H, W) then W (M, u, kh, kw). */
static size_t narrow_x_bytes(const conv_geo *gn, kiln_dtype dt) {
    return align256((size_t)(gn->N * gn->C * gn->H * gn->W) * kiln_dtype_size(dt));
}

static size_t narrow_bytes(const conv_geo *gn, kiln_dtype dt) {
    return narrow_x_bytes(gn, dt) + align256((size_t)(gn->M * gn->C * gn->kh * gn->kw) * kiln_dtype_size(dt));
}

/* Copy the first gn->C channels of X (g->C channels) and of W into nx and nw. */
static kiln_status narrow_copy(kiln_cuda *cu, kiln_context *ctx, const conv_geo *g, const conv_geo *gn,
                               kiln_dtype dt, const void *x, const void *w, void *nx, void *nw) {
    const size_t es = kiln_dtype_size(dt);
    const bool nhwc = g->fmt == KILN_FORMAT_NHWC;
    const int64_t hw = g->H * g->W, k = g->kh * g->kw;
    kiln_status st = nhwc ? kiln_cuda_narrow_rows(cu, ctx, es, nx, x, g->N * hw, g->C, gn->C)
                          : kiln_cuda_narrow_rows(cu, ctx, es, nx, x, g->N, g->C * hw, gn->C * hw);
    if (!st)
        st = nhwc ? kiln_cuda_narrow_rows(cu, ctx, es, nw, w, g->M * k, g->C, gn->C)
                  : kiln_cuda_narrow_rows(cu, ctx, es, nw, w, g->M, g->C * k, gn->C * k);
    return st;
}

/* How channel-padded convolutions run: NARROW_NEVER (KILN_CUDA_NARROW_CHANNELS=0, or no
 * autotune to time them), NARROW_ALWAYS (=1) or NARROW_TIMED (narrow_decide). Their narrow
 * copies' workspace is planned unless NARROW_NEVER. */
enum { NARROW_NEVER, NARROW_ALWAYS, NARROW_TIMED };

static int narrow_mode(const kiln_cuda *cu) {
    const char *env = getenv("KILN_CUDA_NARROW_CHANNELS");
    if (env && strcmp(env, "1") == 0) return NARROW_ALWAYS;
    return cu->autotune && !(env && strcmp(env, "0") == 0) ? NARROW_TIMED : NARROW_NEVER;
}

/* The directions of a convolution, each with its own algorithms. */
enum { DIR_FWD = 0, DIR_BWD_DATA = 1, DIR_BWD_FILTER = 2 };

static int algo_count(int dir) {
    return dir == DIR_FWD        ? CUDNN_CONVOLUTION_FWD_ALGO_COUNT
           : dir == DIR_BWD_DATA ? CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
                                 : CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
}

/* The most workspace any algorithm of direction dir needs (descriptors set), up to the cap. */
static size_t most_workspace(kiln_cuda *cu, cudnnHandle_t h, int dir) {
    size_t most = 0;
    for (int a = 0; a < algo_count(dir); a++) {
        size_t sz = 0;
        /* an algorithm that cannot run this convolution says so here; it is skipped */
        cudnnStatus_t e;
        if (dir == DIR_FWD)
            e = cudnnGetConvolutionForwardWorkspaceSize(h, cu->dnn_x, cu->dnn_w, cu->dnn_conv, cu->dnn_y,
                                                        (cudnnConvolutionFwdAlgo_t)a, &sz);
        else if (dir == DIR_BWD_DATA)
            e = cudnnGetConvolutionBackwardDataWorkspaceSize(h, cu->dnn_w, cu->dnn_y, cu->dnn_conv, cu->dnn_x,
                                                             (cudnnConvolutionBwdDataAlgo_t)a, &sz);
        else
            e = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, cu->dnn_x, cu->dnn_y, cu->dnn_conv, cu->dnn_w,
                                                               (cudnnConvolutionBwdFilterAlgo_t)a, &sz);
        if (e == CUDNN_STATUS_SUCCESS && sz <= CONV_WS_CAP && sz > most) most = sz;
    }
    return most;
}

/* A 1x1 convolution with stride 1, no padding and one group over NHWC tensors is the
 * product Y (N*H*W, M) = X (N*H*W, C) W^T with W stored (M, C) (KRSC with R = S = 1):
 * cuBLASLt runs it with the bias, Relu and the residual in its epilogue. */
static bool gemm_shaped(const kiln_cuda *cu, const conv_geo *g) {
    return cu->conv_gemm && g->fmt == KILN_FORMAT_NHWC && g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 &&
           g->ph == 0 && g->pw == 0 && !g->padded && g->G == 1 && g->OH == g->H0 && g->OW == g->W0;
}

/* One input channel and one group: conv_direct.cu's kernels (d: their geometry), unless
 * the kiln_cuda's conv_direct is off (--disable conv-direct) or they cannot take the shape. */
static bool direct_shaped(const kiln_cuda *cu, const conv_geo *g, kiln_cuda_direct_geo *d) {
    if (!cu->conv_direct || g->G != 1 || g->C != 1) return false;
    *d = (kiln_cuda_direct_geo){.N = g->N, .H = g->H0, .W = g->W0, .M = g->M, .OH = g->OH, .OW = g->OW,
                                .kh = g->kh, .kw = g->kw, .sh = g->sh, .sw = g->sw, .dh = g->dh, .dw = g->dw,
                                .pt = g->pt, .pl = g->pl, .nhwc = g->fmt == KILN_FORMAT_NHWC};
    char why[160];
    return kiln_cuda_conv_direct_fits(d, why, sizeof why);
}

/* The forward of c on the direct kernels: its shape qualifies and a kiln.FusedConv adds
 * no residual and applies no activation but Relu. */
static bool direct_forward(const kiln_cuda *cu, const kiln_op_ctx *c, const conv_geo *g, bool fused,
                           const kiln_cuda_act *act, kiln_cuda_direct_geo *d) {
    if (fused && (input(c, 3) || (act->kind != KILN_ACT_NONE && act->kind != KILN_ACT_RELU))) return false;
    return direct_shaped(cu, g, d);
}

/* Depthwise (group == C == M): conv_depthwise.cu's kernels (d: their geometry), forward
 * with the bias, any FusedConv activation and the residual, unless the kiln_cuda's
 * conv_depthwise is off (--disable conv-depthwise) or they cannot take the shape. */
static bool depthwise_shaped(const kiln_cuda *cu, const conv_geo *g, kiln_cuda_dw_geo *d) {
    if (!cu->conv_depthwise || g->G != g->C || g->Cg != 1 || g->M != g->C) return false;
    *d = (kiln_cuda_dw_geo){.N = g->N, .C = g->C, .H = g->H0, .W = g->W0, .OH = g->OH, .OW = g->OW,
                            .kh = g->kh, .kw = g->kw, .sh = g->sh, .sw = g->sw, .dh = g->dh, .dw = g->dw,
                            .pt = g->pt, .pl = g->pl, .nhwc = g->fmt == KILN_FORMAT_NHWC};
    char why[160];
    return kiln_cuda_conv_depthwise_fits(d, why, sizeof why);
}

static void graph_fwd_key(const kiln_cuda *cu, const kiln_op_ctx *c, const conv_geo *g, kiln_dtype dt, bool fused,
                          const kiln_cuda_act *act, char *key, size_t n);
static void graph_epi_key(const kiln_cuda *cu, const kiln_op_ctx *c, const conv_geo *g, kiln_dtype dt,
                          const kiln_cuda_act *act, char *key, size_t n);
static void graph_grad_key(const kiln_cuda *cu, const kiln_op_ctx *c, const conv_geo *g, kiln_dtype dt, int dir,
                           char *key, size_t n);
static const kiln_algo_entry *kept_choice(kiln_cuda *cu, const char *key);
/* dw_faster's choice as kept with the algorithm choices (on the disk too): kiln's tiled kernel
 * (it falls back to the per-tile one where the tile does not fit), the per-tile kernel,
 * cuDNN's legacy path, cuDNN's ConvFwd graph + kiln's epilogue, the graph with the epilogue
 * inside, kiln's pipelined kernel (the tiled one where it does not take the problem); under
 * dw_key's key, shared with the workspace query (kiln_cuda_ws_conv). */
enum { DW_KEPT_TILED, DW_KEPT_PER_TILE, DW_KEPT_CUDNN, DW_KEPT_GRAPH, DW_KEPT_GRAPH_EPI, DW_KEPT_PIPE };
/* Whether a kept choice is one of the graphs (they need a plan and workspace). */
static bool dw_kept_graph(int algo) { return algo == DW_KEPT_GRAPH || algo == DW_KEPT_GRAPH_EPI; }
static void dw_key(const kiln_cuda *cu, const kiln_op_ctx *c, const conv_geo *g, kiln_dtype dt, int dir, bool fused,
                   char *key, size_t n);

/* g as cudnn_graph.c's problem of graph kind (KILN_GRAPH_CONV_*), without an epilogue. */
static kiln_genstats_geo graph_geo(const conv_geo *g, kiln_dtype dt, int kind) {
    return (kiln_genstats_geo){.N = g->N, .C = g->C, .H = g->H, .W = g->W, .K = g->M, .R = g->kh, .S = g->kw,
                               .P = g->OH, .Q = g->OW, .sh = g->sh, .sw = g->sw, .dh = g->dh, .dw = g->dw,
                               .ph = g->ph, .pw = g->pw, .bf16 = dt == KILN_BF16, .kind = kind, .G = g->G,
                               .act_mode = -1};
}

/* gg's plan (built the first time: kept per problem on cu) in *out, or NULL where cuDNN has
 * none; the most workspace its kept plans need in *ws. */
static kiln_status graph_plan_of(kiln_cuda *cu, kiln_op_ctx *c, const kiln_genstats_geo *gg,
                                 struct kiln_genstats_problem **out, size_t *ws) {
    struct kiln_genstats_problem *p = NULL;
    kiln_status st = kiln_cuda_genstats_plan(cu, c->kctx, gg, true, &p);
    if (st) return st;
    if (kiln_cuda_genstats_ok(p, ws, NULL)) *out = p;
    return KILN_OK;
}

/* A depthwise forward as cuDNN's graph API's ConvFwd (cudnn_graph.c, KILN_GRAPH_CONV_FWD):
 * 2-D NHWC f16 / bf16 with symmetric pads, unless KILN_CUDA_DW_GRAPH=0. cuDNN's sm90
 * depthwise engines, which PyTorch reaches through this API, run these 2-4x faster than the
 * legacy API's algorithms or kiln's kernels, but only without a bias (bench/NOTES.md "z10"):
 * the plain graph is followed by kiln's epilogue kernel. With epi the bias and the activation
 * are in the graph too: a kiln.FusedConv or Conv with a bias, no residual, and an activation
 * that cuDNN's pointwise modes have (Relu, Clip as RELU_FWD with clips, SiLU as SWISH_FWD,
 * Sigmoid, Tanh, both Gelus). The same graph with its epilogue serves the 1x1 products whose
 * activation cuBLASLt's epilogue lacks (gemm_graph_decide; KILN_CUDA_CONV_GRAPH). */
static bool dw_graph_geo(const kiln_cuda *cu, const kiln_op_ctx *c, const conv_geo *g, kiln_dtype dt, bool fused,
                         bool epi, kiln_genstats_geo *gg) {
    const int mode = g->G == g->C && g->Cg == 1 && g->M == g->C ? cu->dw_graph : cu->conv_graph;
    if (mode == 0 || c->in[0]->ndim != 4 || g->fmt != KILN_FORMAT_NHWC || g->padded ||
        (dt != KILN_F16 && dt != KILN_BF16))
        return false;
    *gg = graph_geo(g, dt, KILN_GRAPH_CONV_FWD);
    if (!epi) return true;
    kiln_cuda_act act = {KILN_ACT_NONE, 0.f, 0.f};
    char why[160];
    if (!input(c, 2) || (fused && input(c, 3)) || (fused && !kiln_cuda_act_get(c->node, false, &act, why, sizeof why)))
        return false;
    gg->epi = true;
    switch (act.kind) {
    case KILN_ACT_NONE: break;
    case KILN_ACT_RELU: gg->act_mode = CUDNN_POINTWISE_RELU_FWD, gg->clip_lo = 0.0, gg->clip_hi = 3.0e38; break;
    case KILN_ACT_CLIP: gg->act_mode = CUDNN_POINTWISE_RELU_FWD, gg->clip_lo = act.a, gg->clip_hi = act.b; break;
    case KILN_ACT_SILU: gg->act_mode = CUDNN_POINTWISE_SWISH_FWD; break;
    case KILN_ACT_SIGMOID: gg->act_mode = CUDNN_POINTWISE_SIGMOID_FWD; break;
    case KILN_ACT_TANH: gg->act_mode = CUDNN_POINTWISE_TANH_FWD; break;
    case KILN_ACT_GELU: gg->act_mode = CUDNN_POINTWISE_GELU_FWD; break;
    case KILN_ACT_GELU_TANH: gg->act_mode = CUDNN_POINTWISE_GELU_APPROX_TANH_FWD; break;
    default: return false;
    }
    return true;
}

/* Whether the graph with the activation inside may gain enough over the product + the
 * activation's own pass to be worth planning: that pass moves 2 x Y's bytes, a few us below
 * GRAPH_MIN_Y elements (squeeze-excitation's 1x1s at 1x1 spatial: 61K at batch 256), while the
 * graph's runtime-compiled plans cost seconds each to make (bench/NOTES.md "z11").
 * KILN_CUDA_CONV_GRAPH=1 takes the graph at any size. */
#define GRAPH_MIN_Y ((int64_t)1 << 20)
static bool epilogue_worth(const kiln_cuda *cu, const conv_geo *g) {
    return cu->conv_graph == 1 || g->N * g->OH * g->OW * g->M >= GRAPH_MIN_Y; /* forced: any size */
}

/* Whether conv_graph_decide asks cuDNN's graph for the forward problem g (see there). */
static bool graph_asked(const kiln_cuda *cu, const conv_geo *g, bool fused, const kiln_cuda_act *act) {
    const bool depthwise = g->G == g->C && g->Cg == 1 && g->M == g->C;
    return !depthwise && (g->G > 1 || (fused && act->kind != KILN_ACT_NONE && act->kind != KILN_ACT_RELU &&
                                       epilogue_worth(cu, g)));
}

/* The graph's plan for c (built the first time: kept per problem on cu), or NULL where the
 * graph cannot take c or cuDNN has no plan for it; its workspace in *ws. */
static kiln_status dw_graph_plan(kiln_cuda *cu, kiln_op_ctx *c, const conv_geo *g, kiln_dtype dt, bool fused, bool epi,
                                 struct kiln_genstats_problem **out, size_t *ws) {
    *out = NULL;
    *ws = 0;
    kiln_genstats_geo gg;
    return dw_graph_geo(cu, c, g, dt, fused, epi, &gg) ? graph_plan_of(cu, c, &gg, out, ws) : KILN_OK;
}

/* A gradient (dir DIR_BWD_DATA or DIR_BWD_FILTER) of a grouped or depthwise convolution as
 * cuDNN's graph (cudnn_graph.c, KILN_GRAPH_CONV_DGRAD / _WGRAD): 2-D NHWC f16 / bf16 with
 * symmetric pads, unless KILN_CUDA_DW_GRAPH=0 (depthwise) or KILN_CUDA_CONV_GRAPH=0 (grouped),
 * and not under deterministic (a graph's gradient may add its partial sums in no fixed
 * order). Its plan in *out (NULL: none), the most workspace its kept plans need in *ws. */
static kiln_status grad_graph_plan(kiln_cuda *cu, kiln_op_ctx *c, const conv_geo *g, kiln_dtype dt, int dir,
                                   struct kiln_genstats_problem **out, size_t *ws) {
    *out = NULL;
    *ws = 0;
    const bool depthwise = g->G == g->C && g->Cg == 1 && g->M == g->C;
    const int mode = depthwise ? cu->dw_graph : cu->conv_graph;
    if (mode == 0 || g->G < 2 || cu->deterministic || c->in[0]->ndim != 4 || g->fmt != KILN_FORMAT_NHWC ||
        g->padded || (dt != KILN_F16 && dt != KILN_BF16))
        return KILN_OK;
    const kiln_genstats_geo gg = graph_geo(g, dt, dir == DIR_BWD_DATA ? KILN_GRAPH_CONV_DGRAD : KILN_GRAPH_CONV_WGRAD);
    return graph_plan_of(cu, c, &gg, out, ws);
}

/* grad_graph_plan's plan where the node's workspace holds it, else NULL. */
static kiln_status grad_graph_usable(kiln_cuda *cu, kiln_op_ctx *c, const conv_geo *g, kiln_dtype dt, int dir,
                                     struct kiln_genstats_problem **out) {
    size_t gws = 0;
    kiln_status st = grad_graph_plan(cu, c, g, dt, dir, out, &gws);
    if (!st && *out && (gws > c->workspace_size || (gws && !c->workspace))) *out = NULL;
    return st;
}

/* The graph's workspace for a gradient node (inputs x, w, y as conv_geo_get wants them) where
 * it may run: with autotune (timed) or forced. */
static kiln_status grad_graph_ws(kiln_cuda *cu, kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *w,
                                 const kiln_tensor *y, int dir, size_t *bytes) {
    conv_geo g;
    char why[256];
    if (!conv_geo_get(c, x, w, y, &g, why, sizeof why)) return KILN_OK;
    const bool depthwise = g.G == g.C && g.Cg == 1 && g.M == g.C;
    if (!cu->autotune && (depthwise ? cu->dw_graph : cu->conv_graph) <= 0) return KILN_OK;
    if (!depthwise) { /* grad_graph_decide's kept choice of the legacy path: no graph */
        char key[KILN_ALGO_KEY];
        graph_grad_key(cu, c, &g, x->dtype, dir, key, sizeof key);
        const kiln_algo_entry *a = kept_choice(cu, key);
        if (a && a->algo != 1) return KILN_OK;
    }
    struct kiln_genstats_problem *p;
    size_t gws = 0;
    kiln_status st = grad_graph_plan(cu, c, &g, x->dtype, dir, &p, &gws);
    if (!st && p && gws > *bytes) *bytes = gws;
    return st;
}

/* Workspace of direction dir for the convolution of x by w giving y, plus extra bytes. */
static kiln_status workspace_for(kiln_cuda *cu, kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *w,
                                 const kiln_tensor *y, int dir, bool fused, size_t *bytes) {
    kiln_context *ctx = c->kctx;
    *bytes = 0;
    conv_geo g;
    char why[256];
    if (!conv_geo_get(c, x, w, y, &g, why, sizeof why)) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s", why);
    cudnnHandle_t h;
    kiln_status st = kiln_cuda_dnn(cu, ctx, &h);
    if (st) return st;
    if ((st = set_descriptors(cu, ctx, &g, x->dtype)) != KILN_OK) return st;
    *bytes = pad_bytes(&g, x->dtype) + zero_bias_bytes(c, fused, &g, x->dtype) + align256(most_workspace(cu, h, dir));
    if (dir == DIR_FWD && gemm_shaped(cu, &g)) { /* cuBLASLt's: its own (kiln_cuda_lt_reserve), or the node's */
        if (cu->lt_ws_mode == KILN_CUDA_LT_WS_SHARED && *bytes < KILN_CUDA_GEMM_WS) *bytes = KILN_CUDA_GEMM_WS;
        if ((st = kiln_cuda_lt_reserve(cu, ctx)) != KILN_OK) return st;
    }
    conv_geo gn;
    if (dir == DIR_FWD && narrow_mode(cu) != NARROW_NEVER && narrow_geo(c, &g, &gn)) {
        /* the narrow problem: its copies, then its algorithms' workspace */
        if ((st = set_descriptors(cu, ctx, &gn, x->dtype)) != KILN_OK) return st;
        const size_t nb = zero_bias_bytes(c, fused, &gn, x->dtype) + narrow_bytes(&gn, x->dtype) +
                          align256(most_workspace(cu, h, dir));
        if (nb > *bytes) *bytes = nb;
    }
    return KILN_OK;
}

kiln_status kiln_cuda_ws_conv(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    conv_geo g;
    kiln_cuda_act act = {KILN_ACT_NONE, 0.f, 0.f};
    kiln_cuda_direct_geo d;
    char why[256];
    const bool fused = is_fused(c);
    if (conv_geo_get(c, c->in[0], c->in[1], c->out[0], &g, why, sizeof why) &&
        (!fused || kiln_cuda_act_get(c->node, false, &act, why, sizeof why)) &&
        direct_forward(cu, c, &g, fused, &act, &d)) {
        *bytes = 0; /* the direct kernel needs none */
        return KILN_OK;
    }
    kiln_cuda_dw_geo dg;
    const bool geo = conv_geo_get(c, c->in[0], c->in[1], c->out[0], &g, why, sizeof why);
    const bool dw = geo && depthwise_shaped(cu, &g, &dg);
    size_t gws = 0; /* cuDNN's graphs' (autotune or KILN_CUDA_DW_GRAPH) */
    if (dw && (cu->autotune || cu->dw_graph > 0)) {
        /* dw_faster's graphs: none where a kept choice took kiln's kernels or the legacy path,
         * only the kept one where it took a graph */
        char dkey[KILN_ALGO_KEY];
        dw_key(cu, c, &g, c->in[0]->dtype, DIR_FWD, fused, dkey, sizeof dkey);
        const kiln_algo_entry *kept = cu->dw_graph > 0 ? NULL : kept_choice(cu, dkey);
        const bool with_epi = cu->dw_graph == 2 || (kept && kept->algo == DW_KEPT_GRAPH_EPI);
        for (int epi = 0; epi < (with_epi ? 2 : 1) && !(kept && !dw_kept_graph(kept->algo)); epi++) {
            if (kept && epi != kept->algo - DW_KEPT_GRAPH) continue;
            struct kiln_genstats_problem *p;
            size_t w = 0;
            kiln_status st = dw_graph_plan(cu, c, &g, c->in[0]->dtype, fused, epi != 0, &p, &w);
            if (st) return st;
            if (p && w > gws) gws = w;
        }
    }
    if (dw && !cu->autotune) {
        *bytes = gws; /* the depthwise kernels need none (with autotune cuDNN's path is timed too) */
        return KILN_OK;
    }
    /* the graphs the decisions may run, their plans made here (plan time, before any run):
     * none where a kept choice took the other path, only the kept one where it took a graph */
    char key[KILN_ALGO_KEY];
    const kiln_dtype dt = c->in[0]->dtype;
    const kiln_algo_entry *a = NULL;
    const bool epi_graph = !dw && geo && fused && gemm_shaped(cu, &g) && act.kind != KILN_ACT_NONE &&
                           act.kind != KILN_ACT_RELU && epilogue_worth(cu, &g) && (cu->autotune || cu->conv_graph > 0);
    if (epi_graph) { /* gemm_graph_decide's */
        graph_epi_key(cu, c, &g, dt, &act, key, sizeof key);
        a = kept_choice(cu, key);
    }
    if (epi_graph && (!a || a->algo == 1)) {
        struct kiln_genstats_problem *p;
        kiln_status st = dw_graph_plan(cu, c, &g, dt, fused, true, &p, &gws);
        if (st) return st;
        if (!p) gws = 0;
    }
    const bool fwd_graph = !dw && geo && !gemm_shaped(cu, &g) && graph_asked(cu, &g, fused, &act) &&
                           (cu->autotune || cu->conv_graph > 0);
    a = NULL;
    if (fwd_graph) { /* conv_graph_decide's: [0] with the epilogue (mode 1), [1] plain (mode 2) */
        graph_fwd_key(cu, c, &g, dt, fused, &act, key, sizeof key);
        a = kept_choice(cu, key);
    }
    if (fwd_graph && (!a || a->algo == 1 || a->algo == 2))
        for (int e = 0; e < 2; e++) {
            if (a && e != a->algo - 1) continue;
            struct kiln_genstats_problem *p;
            size_t w = 0;
            kiln_status st = dw_graph_plan(cu, c, &g, dt, fused, e == 0, &p, &w);
            if (st) return st;
            if (p && w > gws) gws = w;
        }
    kiln_status st = workspace_for(cu, c, c->in[0], c->in[1], c->out[0], DIR_FWD, fused, bytes);
    if (!st && gws > *bytes) *bytes = gws;
    return st;
}

static kiln_status ws_conv_grad_input(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
static kiln_status ws_conv_grad_weight(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);

/* The legacy API's or kiln's kernels' workspace, or cuDNN's graph's where larger. */
kiln_status kiln_cuda_ws_conv_grad_input(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    kiln_status st = ws_conv_grad_input(cu, c, bytes);
    return st ? st : grad_graph_ws(cu, c, c->in[2], c->in[1], c->in[0], DIR_BWD_DATA, bytes);
}

kiln_status kiln_cuda_ws_conv_grad_weight(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    kiln_status st = ws_conv_grad_weight(cu, c, bytes);
    return st ? st : grad_graph_ws(cu, c, c->in[0], c->in[2], c->in[1], DIR_BWD_FILTER, bytes);
}

static kiln_status ws_conv_grad_input(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    conv_geo g;
    kiln_cuda_dw_geo dg;
    char why[256];
    if (conv_geo_get(c, c->in[2], c->in[1], c->in[0], &g, why, sizeof why) && depthwise_shaped(cu, &g, &dg)) {
        /* conv_depthwise_grad.cu's flipped filter, or nothing (conv_depthwise.cu's kernel) */
        const size_t kb = cu->conv_dw_grad ? kiln_cuda_conv_depthwise_dgrad_ws(&dg, c->in[0]->dtype) : 0;
        if (!cu->autotune) {
            *bytes = kb; /* with autotune cuDNN's path is timed too: its workspace, or kb */
            return KILN_OK;
        }
        const kiln_status st = workspace_for(cu, c, c->in[2], c->in[1], c->in[0], DIR_BWD_DATA, false, bytes);
        if (!st && *bytes < kb) *bytes = kb;
        return st;
    }
    return workspace_for(cu, c, c->in[2], c->in[1], c->in[0], DIR_BWD_DATA, false, bytes);
}

static kiln_status ws_conv_grad_weight(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    conv_geo g;
    kiln_cuda_direct_geo d;
    char why[256];
    if (conv_geo_get(c, c->in[0], c->in[2], c->in[1], &g, why, sizeof why) && direct_shaped(cu, &g, &d)) {
        *bytes = kiln_cuda_conv_direct_wgrad_ws(&d); /* the partial sums of its chunks */
        return KILN_OK;
    }
    kiln_cuda_dw_geo dg;
    if (cu->conv_dw_grad && conv_geo_get(c, c->in[0], c->in[2], c->in[1], &g, why, sizeof why) &&
        depthwise_shaped(cu, &g, &dg)) {
        /* conv_depthwise_grad.cu's partial sums; with autotune cuDNN's path is timed too */
        const size_t kb = kiln_cuda_conv_depthwise_wgrad_ws(&dg, c->in[0]->dtype);
        if (!cu->autotune) {
            *bytes = kb;
            return KILN_OK;
        }
        const kiln_status st = workspace_for(cu, c, c->in[0], c->in[2], c->in[1], DIR_BWD_FILTER, false, bytes);
        if (!st && *bytes < kb) *bytes = kb;
        return st;
    }
    return workspace_for(cu, c, c->in[0], c->in[2], c->in[1], DIR_BWD_FILTER, false, bytes);
}

/* The largest power of two up to 16 dividing every address (tensor-core algorithms
 * want 16-byte alignment; an algorithm found for aligned buffers may refuse others). */
static int align_class(const void *a, const void *b, const void *c) {
    uintptr_t v = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c;
    int k = 16;
    while (k > 1 && v % (uintptr_t)k) k >>= 1;
    return k;
}

/* The cache key: everything the choice depends on, readable in the disk cache. */
static void make_key(const kiln_cuda *cu, const conv_geo *g, kiln_dtype dt, int align, int dir, bool identity,
                     char *key, size_t n) {
    static const char *const dirs[] = {"fwd", "bwd-data", "bwd-filter"};
    const char *f = fmt_name(g->fmt);
    snprintf(key, n,
             "%s %s x=%s:%lldx%lldx%lldx%lld w=%s:%lldx%lldx%lldx%lld y=%s:%lldx%lldx%lldx%lld g=%lld "
             "pad=%lld,%lld stride=%lld,%lld dil=%lld,%lld math=%s ws<=%zu align=%d det=%d tune=%s%s",
             dirs[dir], kiln_dtype_name(dt), f, (long long)g->N, (long long)g->C, (long long)g->H, (long long)g->W, f,
             (long long)g->M, (long long)g->Cg, (long long)g->kh, (long long)g->kw, f, (long long)g->N,
             (long long)g->M, (long long)g->OH, (long long)g->OW, (long long)g->G, (long long)g->ph,
             (long long)g->pw, (long long)g->sh, (long long)g->sw, (long long)g->dh, (long long)g->dw,
             dt != KILN_F32 ? "tensor" : cu->allow_tf32 ? "tf32" : "fma", CONV_WS_CAP, align, cu->deterministic ? 1 : 0,
             cu->autotune ? "find" : "heuristic", identity ? " epilogue=identity" : "");
}

/* The cache keys of the graph decisions (conv_graph_decide: "graph-fwd", gemm_graph_decide:
 * "graph-epilogue", grad_graph_decide: "graph-grad"), shared with the workspace queries so
 * that both read the same kept choice. */
static void graph_fwd_key(const kiln_cuda *cu, const kiln_op_ctx *c, const conv_geo *g, kiln_dtype dt, bool fused,
                          const kiln_cuda_act *act, char *key, size_t n) {
    make_key(cu, g, dt, align_class(c->in[0]->data, c->in[1]->data, c->out[0]->data), DIR_FWD, false, key, n);
    const size_t at = strlen(key);
    snprintf(key + at, n - at, " graph-fwd op=%s act=%d,%g,%g bias=%d res=%d", c->node->op_type, (int)act->kind,
             act->a, act->b, input(c, 2) ? 1 : 0, fused && input(c, 3) ? 1 : 0);
}

static void graph_epi_key(const kiln_cuda *cu, const kiln_op_ctx *c, const conv_geo *g, kiln_dtype dt,
                          const kiln_cuda_act *act, char *key, size_t n) {
    make_key(cu, g, dt, align_class(c->in[0]->data, c->in[1]->data, c->out[0]->data), DIR_FWD, false, key, n);
    const size_t at = strlen(key);
    snprintf(key + at, n - at, " graph-epilogue act=%d,%g,%g", (int)act->kind, act->a, act->b);
}

static void graph_grad_key(const kiln_cuda *cu, const kiln_op_ctx *c, const conv_geo *g, kiln_dtype dt, int dir,
                           char *key, size_t n) {
    make_key(cu, g, dt, align_class(c->in[0]->data, c->in[1]->data, c->out[0]->data), dir, false, key, n);
    const size_t at = strlen(key);
    snprintf(key + at, n - at, " graph-grad");
}

/* The choice a timing kept under key (in this process, or read from the disk), where one
 * decides: with autotune and nothing forced (KILN_CUDA_CONV_GRAPH=1, a timing's force). */
static const kiln_algo_entry *kept_choice(kiln_cuda *cu, const char *key) {
    return cu->autotune && !cu->gemm_graph_force && cu->conv_graph != 1 ? kiln_algo_cache_find(cu->algos, cu->n_algos, key)
                                                                        : NULL;
}

/* One result of a Find or heuristic call, whatever the direction. */
typedef struct found_algo {
    int algo, math;
    cudnnStatus_t status;
    size_t memory;
    float ms;
    bool deterministic;
} found_algo;

/* The transform algorithms (FFT, FFT tiling, non-fused Winograd) round in their transformed
 * domain: on f32 data their results are ~1e-3 relative off, TF32's order (seen: a 5x5
 * weight gradient 1.7e-3 off, picked by the timing search on some runs and not others). */
static bool transform_algo(int dir, int algo) {
    if (dir == DIR_FWD)
        return algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT || algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
               algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    if (dir == DIR_BWD_DATA)
        return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
               algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
    return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
           algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

static bool usable(const kiln_cuda *cu, const found_algo *p, kiln_dtype dt, int dir, size_t ws_bytes) {
    if (p->status != CUDNN_STATUS_SUCCESS || p->memory > ws_bytes || p->memory > CONV_WS_CAP) return false;
    if (p->algo < 0 || p->algo >= algo_count(dir)) return false;
    /* strict f32 (TF32 not allowed): neither TF32 tensor-core algorithms nor the transform
     * ones, whose error is of the same order */
    if (dt == KILN_F32 && !cu->allow_tf32 &&
        (p->math == CUDNN_TENSOR_OP_MATH || p->math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ||
         transform_algo(dir, p->algo)))
        return false;
    return !cu->deterministic || p->deterministic;
}

static bool entry_valid(const kiln_algo_entry *a, int dir, size_t ws_bytes) {
    return a->algo >= 0 && a->algo < algo_count(dir) && a->bytes <= ws_bytes &&
           (a->math == CUDNN_DEFAULT_MATH || a->math == CUDNN_TENSOR_OP_MATH ||
            a->math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION || a->math == CUDNN_FMA_MATH);
}

#define FOUND(p) \
    (found_algo) { (int)(p).algo, (int)(p).mathType, (p).status, (p).memory, (p).time, (p).determinism == CUDNN_DETERMINISTIC }

/* cuDNN's candidates for direction dir (descriptors set), fastest first: timed on the
 * buffers (autotune; the direction's output, y / x / w, is overwritten) or its heuristic. */
static kiln_status candidates(kiln_cuda *cu, kiln_context *ctx, cudnnHandle_t h, int dir, const void *x,
                              const void *w, const void *y, void *ws, size_t ws_bytes, found_algo *found, int *got) {
    int n = 0;
    *got = 0;
    if (dir == DIR_FWD) {
        cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        if (cu->autotune)
            KILN_CUDNN_CHECK(ctx, cudnnFindConvolutionForwardAlgorithmEx(h, cu->dnn_x, x, cu->dnn_w, w, cu->dnn_conv,
                                                                         cu->dnn_y, (void *)y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                                         &n, p, ws, ws_bytes));
        else
            KILN_CUDNN_CHECK(ctx, cudnnGetConvolutionForwardAlgorithm_v7(h, cu->dnn_x, cu->dnn_w, cu->dnn_conv, cu->dnn_y,
                                                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, p));
        for (int i = 0; i < n && i < 16; i++) found[i] = FOUND(p[i]);
    } else if (dir == DIR_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        if (cu->autotune)
            KILN_CUDNN_CHECK(ctx, cudnnFindConvolutionBackwardDataAlgorithmEx(
                                      h, cu->dnn_w, w, cu->dnn_y, y, cu->dnn_conv, cu->dnn_x, (void *)x,
                                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, p, ws, ws_bytes));
        else
            KILN_CUDNN_CHECK(ctx, cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                      h, cu->dnn_w, cu->dnn_y, cu->dnn_conv, cu->dnn_x,
                                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, p));
        for (int i = 0; i < n && i < 16; i++) found[i] = FOUND(p[i]);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        if (cu->autotune)
            KILN_CUDNN_CHECK(ctx, cudnnFindConvolutionBackwardFilterAlgorithmEx(
                                      h, cu->dnn_x, x, cu->dnn_y, y, cu->dnn_conv, cu->dnn_w, (void *)w,
                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, p, ws, ws_bytes));
        else
            KILN_CUDNN_CHECK(ctx, cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                                      h, cu->dnn_x, cu->dnn_y, cu->dnn_conv, cu->dnn_w,
                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, p));
        for (int i = 0; i < n && i < 16; i++) found[i] = FOUND(p[i]);
    }
    *got = n < 16 ? n : 16;
    return KILN_OK;
}

/* cuDNN's answer when a fused call cannot run this combination: a refusal, not a fault. */
static bool refusal(cudnnStatus_t e) {
    const int category = (int)e / 1000; /* cuDNN 9: 2xxx bad parameter, 3xxx not supported */
    return category == 2 || category == 3;
}

/* Everything cudnnConvolutionBiasActivationForward needs besides the algorithm (the bias
 * and activation descriptors already set on cu): the fused call of a kiln.FusedConv. */
typedef struct fused_call {
    const void *x, *w, *bias, *z; /* z NULL: none (alpha2 = 0, y passed in its place) */
    void *y;
} fused_call;

static cudnnStatus_t run_fused(kiln_cuda *cu, cudnnHandle_t h, const fused_call *fc, int algo, void *ws, size_t bytes) {
    const float one = 1.f, zero = 0.f; /* f32 scaling for every data type */
    cudnnStatus_t e = cudnnConvolutionBiasActivationForward(
        h, &one, cu->dnn_x, fc->x, cu->dnn_w, fc->w, cu->dnn_conv, (cudnnConvolutionFwdAlgo_t)algo, bytes ? ws : NULL,
        bytes, fc->z ? &one : &zero, cu->dnn_y, fc->z ? fc->z : fc->y, cu->dnn_b, fc->bias, cu->dnn_act, cu->dnn_y, fc->y);
    (void)cudaGetLastError(); /* as after every cuDNN call: its probes are not our errors */
    return e;
}

/* Time the fused call with one candidate (its math type set on the descriptor): the best
 * of three calls after a warm-up, in ms; INFINITY when cuDNN refuses the combination. */
static kiln_status time_fused(kiln_cuda *cu, kiln_context *ctx, cudnnHandle_t h, const fused_call *fc,
                              const found_algo *f, void *ws, float *ms) {
    *ms = INFINITY;
    KILN_CUDNN_CHECK(ctx, cudnnSetConvolutionMathType(cu->dnn_conv, (cudnnMathType_t)f->math));
    cudnnStatus_t e = run_fused(cu, h, fc, f->algo, ws, f->memory);
    if (e != CUDNN_STATUS_SUCCESS) {
        if (refusal(e)) return KILN_OK;
        return kiln_cuda_dnn_error(ctx, e, "cudnnConvolutionBiasActivationForward(...)", __FILE__, __LINE__);
    }
    cudaEvent_t ev[2] = {NULL, NULL};
    KILN_CUDA_CHECK(ctx, cudaEventCreate(&ev[0]));
    kiln_status st = KILN_OK;
    if (cudaEventCreate(&ev[1]) != cudaSuccess) st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaEventCreate failed");
    for (int r = 0; r < 3 && !st; r++) {
        float t = 0.f;
        if (cudaEventRecord(ev[0], cu->stream) != cudaSuccess ||
            (e = run_fused(cu, h, fc, f->algo, ws, f->memory)) != CUDNN_STATUS_SUCCESS ||
            cudaEventRecord(ev[1], cu->stream) != cudaSuccess || cudaEventSynchronize(ev[1]) != cudaSuccess ||
            cudaEventElapsedTime(&t, ev[0], ev[1]) != cudaSuccess)
            st = kiln_fail(ctx, KILN_ERR_DEVICE, "timing cuDNN's fused convolution (algorithm %d) failed", f->algo);
        else if (t < *ms)
            *ms = t;
    }
    cudaEventDestroy(ev[0]);
    if (ev[1]) cudaEventDestroy(ev[1]);
    return st;
}

/* The algorithm for this problem in direction dir: cached, or timed (autotune) / cuDNN's
 * heuristic, then cached; the math type set on the descriptor. x, w, y: the data cuDNN
 * sees for dnn_x, dnn_w and dnn_y (the direction's output is overwritten by a search).
 * identity: the forward choice for a FusedConv without activation, which runs fused only
 * with IMPLICIT_PRECOMP_GEMM (else split into convolution and epilogue). */
static kiln_status pick_algo(kiln_cuda *cu, kiln_context *ctx, cudnnHandle_t h, const conv_geo *g, kiln_dtype dt,
                             int dir, const void *x, const void *w, const void *y, void *ws, size_t ws_bytes,
                             bool identity, const fused_call *fc, kiln_algo_entry **out) {
    char key[KILN_ALGO_KEY];
    make_key(cu, g, dt, align_class(x, w, y), dir, identity, key, sizeof key);
    /* choices timed on the fused call are their own entries (they also say fused or split) */
    if (fc && cu->autotune && strlen(key) + 11 < sizeof key) strcat(key, " call=fused");
    kiln_algo_entry *a = kiln_algo_cache_find(cu->algos, cu->n_algos, key);
    /* a strict-f32 choice cached before transform algorithms were refused is searched again */
    if (!a || !entry_valid(a, dir, ws_bytes) || (dt == KILN_F32 && !cu->allow_tf32 && transform_algo(dir, a->algo))) {
        found_algo found[16];
        int got = 0;
        kiln_status st = candidates(cu, ctx, h, dir, x, w, y, ws, ws_bytes, found, &got);
        if (st) return st;
        int best = -1, precomp = -1;
        for (int i = 0; i < got; i++) {
            if (!usable(cu, &found[i], dt, dir, ws_bytes)) continue;
            if (best < 0) best = i;
            if (precomp < 0 && found[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) precomp = i;
        }
        if (best < 0)
            return kiln_fail(ctx, KILN_ERR_DEVICE,
                             "cuDNN %s no convolution algorithm (%s) for this shape within %zu bytes of workspace%s "
                             "(%d candidates)", cu->autotune ? "found" : "suggests",
                             dir == DIR_FWD ? "forward" : dir == DIR_BWD_DATA ? "backward data" : "backward filter",
                             ws_bytes, cu->deterministic ? " that is deterministic" : "", got);
        int pick = best, fused = -1;
        const double es = (double)kiln_dtype_size(dt);
        const double epilogue_ms =
            EPILOGUE_LAUNCH_MS + 3.0 * (double)(g->N * g->M * g->OH * g->OW) * es / EPILOGUE_BYTES_PER_MS;
        if (fc && cu->autotune) {
            /* cuDNN timed the plain convolution; the fused call may run another kernel (or
             * split internally) for the same algorithm, so the fastest few are timed as fused
             * calls and weighed against the fastest plain one plus an epilogue kernel */
            float best_ms = INFINITY;
            int tried = 0;
            for (int i = 0; i < got && tried < 6; i++) {
                if (!usable(cu, &found[i], dt, dir, ws_bytes)) continue;
                if (identity && found[i].algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) continue;
                tried++;
                float t;
                kiln_status ts = time_fused(cu, ctx, h, fc, &found[i], ws, &t);
                if (ts) return ts;
                if (t < best_ms) {
                    best_ms = t;
                    pick = i;
                }
            }
            fused = best_ms <= found[best].ms + epilogue_ms ? 1 : 0;
            if (!fused) pick = best;
        } else if (identity && precomp >= 0 && precomp != best) {
            /* fused: one kernel; split: the fastest convolution, then Y read, written and Z
             * read once more. The heuristic gives no times: take the single kernel. */
            if (!cu->autotune || found[precomp].ms <= found[best].ms + epilogue_ms) pick = precomp;
        }
        kiln_algo_entry e;
        memset(&e, 0, sizeof e);
        memcpy(e.key, key, sizeof e.key);
        e.algo = found[pick].algo;
        e.math = dt == KILN_F32 && !cu->allow_tf32 ? (int)CUDNN_FMA_MATH : found[pick].math;
        e.bytes = found[pick].memory;
        e.ms = cu->autotune ? found[pick].ms : 0.f;
        e.fused = fused;
        a = kiln_algo_cache_put(&cu->algos, &cu->n_algos, &cu->cap_algos, &e);
        if (!a) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for the convolution algorithm cache");
        if (cu->autotune) {
            cu->stats.algos_timed++;
            /* a cache that cannot be written costs the next process a search, nothing more */
            if (cu->algo_path[0] && kiln_algo_cache_store(cu->algo_path, cu->algo_prefix, &e) == 0)
                cu->stats.algos_written++;
        } else {
            cu->stats.algos_heuristic++;
        }
    }
    KILN_CUDNN_CHECK(ctx, cudnnSetConvolutionMathType(cu->dnn_conv, (cudnnMathType_t)a->math));
    *out = a;
    return KILN_OK;
}

/* Conv, or kiln.FusedConv when fused; a channel-padded one narrow (narrow_force 1), padded
 * (0) or as narrow_decide says (-1). */
static kiln_status conv_run_as(kiln_cuda *cu, kiln_op_ctx *c, bool fused, int narrow_force);

static kiln_status conv_run(kiln_cuda *cu, kiln_op_ctx *c, bool fused) { return conv_run_as(cu, c, fused, -1); }

/* One run of direction dir's op (a forward Conv / FusedConv, ConvGradInput or
 * ConvGradWeight); narrow_force as conv_run_as's. */
static kiln_status run_op(kiln_cuda *cu, kiln_op_ctx *c, int dir, bool fused, int narrow_force) {
    return dir == DIR_FWD        ? conv_run_as(cu, c, fused, narrow_force)
           : dir == DIR_BWD_DATA ? kiln_cuda_k_conv_grad_input(cu, c)
                                 : kiln_cuda_k_conv_grad_weight(cu, c);
}

/* host milliseconds (CLOCK_MONOTONIC) */
static double host_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Whether cu's stream is being captured: the timed decisions wait for an eager run (a plan's
 * first run is one). */
static bool capturing(kiln_cuda *cu) {
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing((cudaStream_t)kiln_cuda_stream(cu), &cap);
    return cap != cudaStreamCaptureStatusNone;
}

/* The best of three runs of the op on depthwise path `force` (0: as chosen) and narrow
 * path narrow_force, after one untimed (cuDNN's first run searches its algorithms), in ms.
 * Each timed run is enqueued behind delay.cu's kernel, held 1.5x as long as the host took to
 * enqueue the run before it (at most 5 ms), so that the event pair measures the GPU's time
 * and not the host's launch work: without the hold, the legacy API's descriptor calls and
 * cache lookups counted, and resnext50's 512-channel grouped 3x3 timed 0.162-0.177 ms on the
 * legacy path against 0.073 in the plan's per-node profile (which holds the GPU the same
 * way), so the graph won where it loses (bench/NOTES.md "z11"). */
static kiln_status time_op(kiln_cuda *cu, kiln_op_ctx *c, int dir, bool fused, int force, int narrow_force,
                           float *ms) {
    kiln_context *ctx = c->kctx;
    cudaStream_t s = (cudaStream_t)kiln_cuda_stream(cu);
    *ms = INFINITY;
    cu->dw_force = force;
    double h0 = host_ms();
    kiln_status st = run_op(cu, c, dir, fused, narrow_force);
    double host = host_ms() - h0; /* the enqueue time of the run before */
    cudaEvent_t ev[2] = {NULL, NULL};
    if (!st && (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess))
        st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaEventCreate failed");
    for (int r = 0; r < 3 && !st; r++) {
        float t = 0;
        const double hold_us = 1.5 * host * 1e3 + 50.0;
        st = kiln_cuda_delay(cu, hold_us < 5000.0 ? hold_us : 5000.0);
        if (!st && cudaEventRecord(ev[0], s) != cudaSuccess)
            st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaEventRecord failed");
        h0 = host_ms();
        if (!st) st = run_op(cu, c, dir, fused, narrow_force);
        host = host_ms() - h0;
        if (!st && (cudaEventRecord(ev[1], s) != cudaSuccess || cudaEventSynchronize(ev[1]) != cudaSuccess ||
                    cudaEventElapsedTime(&t, ev[0], ev[1]) != cudaSuccess))
            st = kiln_fail(ctx, KILN_ERR_DEVICE, "timing %s failed", c->node->op_type);
        if (!st && t < *ms) *ms = t;
    }
    for (int k = 0; k < 2; k++)
        if (ev[k]) cudaEventDestroy(ev[k]);
    cu->dw_force = 0;
    return st;
}

/* The epilogue code of a depthwise problem (forward: the activation's kind * 4, + 1 with a
 * bias, + 2 with a residual; 0 for the gradients): part of the problem, since the graph with
 * the epilogue inside may have a plan for one activation and not for another. */
static int dw_epi_code(const kiln_op_ctx *c, int dir, bool fused) {
    if (dir != DIR_FWD) return 0;
    kiln_cuda_act a = {KILN_ACT_NONE, 0.f, 0.f};
    char why[160];
    if (fused && !kiln_cuda_act_get(c->node, false, &a, why, sizeof why)) a.kind = KILN_ACT_NONE;
    return (int)a.kind * 4 + (input(c, 2) ? 1 : 0) + (fused && input(c, 3) ? 2 : 0);
}

/* dw_faster's kept choice's key (the enum and its meaning at the declarations above). */
static void dw_key(const kiln_cuda *cu, const kiln_op_ctx *c, const conv_geo *g, kiln_dtype dt, int dir, bool fused,
                   char *key, size_t n) {
    make_key(cu, g, dt, align_class(c->in[0]->data, c->in[1]->data, c->out[0]->data), dir, false, key, n);
    const size_t at = strlen(key);
    snprintf(key + at, n - at, " depthwise epi=%d fused=%d", dw_epi_code(c, dir, fused), fused ? 1 : 0);
}

static bool dw_same(const kiln_cuda_dw_geo *a, const kiln_cuda_dw_geo *b) {
    return a->N == b->N && a->C == b->C && a->H == b->H && a->W == b->W && a->OH == b->OH && a->OW == b->OW &&
           a->kh == b->kh && a->kw == b->kw && a->sh == b->sh && a->sw == b->sw && a->dh == b->dh && a->dw == b->dw &&
           a->pt == b->pt && a->pl == b->pl && a->nhwc == b->nhwc;
}

static kiln_status keep_choice(kiln_cuda *cu, kiln_context *ctx, const char *key, int algo, float ms);

/* dw_graph_plan's plan where the node's workspace holds it, else *p NULL. */
static kiln_status dw_graph_fit(kiln_cuda *cu, kiln_op_ctx *c, const conv_geo *g, kiln_dtype dt, bool fused, bool epi,
                                struct kiln_genstats_problem **p) {
    size_t w = 0;
    kiln_status st = dw_graph_plan(cu, c, g, dt, fused, epi, p, &w);
    if (!st && *p && (w > c->workspace_size || (w && !c->workspace))) *p = NULL;
    return st;
}

/* Choice `kept` (DW_KEPT_*) of a depthwise problem into *kiln, *variant, *graph, and into
 * this process's list (while it has room), so the node's later runs find it there. */
static kiln_status dw_remember(kiln_cuda *cu, int dir, bool fused, kiln_dtype dt, const kiln_cuda_dw_geo *dg, int ek,
                               int kept, bool *kiln, int *variant, int *graph) {
    *kiln = kept == DW_KEPT_TILED || kept == DW_KEPT_PER_TILE || kept == DW_KEPT_PIPE;
    *variant = kept == DW_KEPT_PER_TILE ? KILN_CUDA_DW_PER_TILE
               : kept == DW_KEPT_PIPE   ? KILN_CUDA_DW_PIPE
                                        : KILN_CUDA_DW_TILED;
    *graph = kept == DW_KEPT_GRAPH ? 1 : kept == DW_KEPT_GRAPH_EPI ? 2 : 0;
    if (cu->n_dw_choice < (int)(sizeof cu->dw_choice / sizeof cu->dw_choice[0])) {
        struct kiln_cuda_dw_choice *e = &cu->dw_choice[cu->n_dw_choice++];
        e->g = *dg;
        e->dir = dir;
        e->dtype = (int)dt;
        e->fused = fused;
        e->epi = ek;
        e->kiln = *kiln;
        e->variant = *variant;
        e->graph = *graph;
    }
    return KILN_OK;
}

/* Whether depthwise problem dg of direction dir runs on conv_depthwise.cu's kernels (*kiln,
 * forward: *variant the KILN_CUDA_DW_* kernel) or on cuDNN's path. With autotune each is
 * timed the first time the problem is met (outside graph capture: a plan's first run is
 * eager) and the fastest kept: cuDNN runs convnext's 7x7 at 20-31 GB/s but MobileNet's 3x3
 * in f16 NHWC near 600 GB/s, faster than the per-tile kernel (H200); forward, the tiled
 * and the per-tile kernels are timed apart where the tiled one takes the problem, and the
 * pipelined one where it takes it (it wins on some shapes and loses on others:
 * bench/NOTES.md z20b / z20c). Without autotune: the kernel (tiled where it takes the problem;
 * pipelined with KILN_CUDA_DW_PIPE=1). */
static kiln_status dw_faster(kiln_cuda *cu, kiln_op_ctx *c, int dir, bool fused, kiln_dtype dt,
                             const kiln_cuda_dw_geo *dg, const conv_geo *g, const void *y, const void *z, bool *kiln,
                             int *variant, int *graph) {
    *kiln = true;
    *variant = cu->dw_pipe > 0 ? KILN_CUDA_DW_PIPE : KILN_CUDA_DW_TILED;
    *graph = 0;
    if (cu->dw_force) {
        *kiln = cu->dw_force == 1 || cu->dw_force == 3 || cu->dw_force == 6;
        *variant = cu->dw_force == 3   ? KILN_CUDA_DW_PER_TILE
                   : cu->dw_force == 6 ? KILN_CUDA_DW_PIPE
                                       : KILN_CUDA_DW_TILED;
        *graph = cu->dw_force == 4 ? 1 : cu->dw_force == 5 ? 2 : 0;
        return KILN_OK;
    }
    const int ek = dw_epi_code(c, dir, fused);
    for (int i = 0; i < cu->n_dw_choice; i++) { /* decided in this process */
        const struct kiln_cuda_dw_choice *e = &cu->dw_choice[i];
        if (e->dir == dir && e->dtype == (int)dt && e->fused == (int)fused && e->epi == ek && dw_same(&e->g, dg)) {
            *kiln = e->kiln;
            *variant = e->variant;
            *graph = e->graph;
            return KILN_OK;
        }
    }
    /* decided by an earlier process (the disk cache; not while KILN_CUDA_DW_GRAPH forces the
     * graphs): kiln's kernels and cuDNN's legacy path are taken at once, with no graph planned;
     * a graph where its plan is made below and fits the node's workspace */
    char key[KILN_ALGO_KEY];
    dw_key(cu, c, g, dt, dir, fused, key, sizeof key);
    const kiln_algo_entry *kept = cu->dw_graph > 0 ? NULL : kept_choice(cu, key);
    if (kept && !dw_kept_graph(kept->algo) && kept->algo >= DW_KEPT_TILED && kept->algo <= DW_KEPT_PIPE) {
        cu->stats.dw_kept++;
        return dw_remember(cu, dir, fused, dt, dg, ek, kept->algo, kiln, variant, graph);
    }
    /* the graphs where they can run: KILN_CUDA_DW_GRAPH=1 or 2 takes them without timing (a
     * residual read in place of Y would be overwritten by the graph's convolution) */
    struct kiln_genstats_problem *gp[2] = {NULL, NULL}; /* plain, with the epilogue */
    if (dir != DIR_FWD && cu->dw_graph != 0) { /* the gradient's graph (ConvBwdData / ConvBwdFilter) */
        kiln_status st = grad_graph_usable(cu, c, g, dt, dir, &gp[0]);
        if (st) return st;
        if (cu->dw_graph > 0 && gp[0]) {
            *kiln = false;
            *graph = 1;
            return KILN_OK;
        }
    }
    if (dir == DIR_FWD && cu->dw_graph != 0 && !(z && z == y)) {
        /* the graph with the epilogue inside only when forced (KILN_CUDA_DW_GRAPH=2) or kept: timed,
         * it was ~10x slower than the plain graph on every depthwise shape (no depthwise
         * engine fuses it), and its runtime-compiled plans cost seconds each to make */
        const bool with_epi = cu->dw_graph == 2 || (kept && kept->algo == DW_KEPT_GRAPH_EPI);
        for (int e = 0; e < (with_epi ? 2 : 1); e++) {
            if (kept && e != kept->algo - DW_KEPT_GRAPH) continue; /* only the kept one */
            kiln_status st = dw_graph_fit(cu, c, g, dt, fused, e != 0, &gp[e]);
            if (st) return st;
        }
        if (cu->dw_graph > 0 && (gp[0] || gp[1])) {
            *kiln = false;
            *graph = cu->dw_graph == 2 && gp[1] ? 2 : gp[0] ? 1 : 2;
            return KILN_OK;
        }
    }
    if (kept && (kept->algo == DW_KEPT_GRAPH || kept->algo == DW_KEPT_GRAPH_EPI) && gp[kept->algo - DW_KEPT_GRAPH]) {
        cu->stats.dw_kept++;
        return dw_remember(cu, dir, fused, dt, dg, ek, kept->algo, kiln, variant, graph);
    }
    if (kept && dir == DIR_FWD) { /* a kept graph with no plan here (another cuDNN, a smaller workspace): timed again */
        gp[1] = NULL;
        if (cu->dw_graph != 0 && !(z && z == y) && !gp[0]) {
            kiln_status st = dw_graph_fit(cu, c, g, dt, fused, false, &gp[0]);
            if (st) return st;
        }
    }
    if (!cu->autotune || capturing(cu) || (z && z == y) ||
        cu->n_dw_choice == (int)(sizeof cu->dw_choice / sizeof cu->dw_choice[0]))
        return KILN_OK;
    float tk = INFINITY, td = INFINITY, tp = INFINITY, tq = INFINITY, tg[2] = {INFINITY, INFINITY};
    kiln_status st = time_op(cu, c, dir, fused, 1, -1, &tk);
    if (!st) st = time_op(cu, c, dir, fused, 2, -1, &td);
    if (!st && dir == DIR_FWD && kiln_cuda_conv_depthwise_tiled(dg, dt)) st = time_op(cu, c, dir, fused, 3, -1, &tp);
    if (!st && dir == DIR_FWD && kiln_cuda_conv_depthwise_pipe(cu, dg, dt, y, z))
        st = time_op(cu, c, dir, fused, 6, -1, &tq);
    for (int e = 0; e < 2 && !st; e++)
        if (gp[e]) st = time_op(cu, c, dir, fused, 4 + e, -1, &tg[e]);
    if (st) return st;
    const float tkiln = fminf(fminf(tk, tp), tq), tgraph = tg[0] < tg[1] ? tg[0] : tg[1];
    const bool k = tkiln <= td && tkiln <= tgraph;
    const int choice = k ? (tq == tkiln && tq < tk ? DW_KEPT_PIPE : tp < tk ? DW_KEPT_PER_TILE : DW_KEPT_TILED)
                       : tgraph < td ? (tg[1] <= tg[0] ? DW_KEPT_GRAPH_EPI : DW_KEPT_GRAPH)
                                     : DW_KEPT_CUDNN;
    const float best = k ? tkiln : tgraph < td ? tgraph : td;
    if ((st = keep_choice(cu, c->kctx, key, choice, best)) != KILN_OK) return st;
    cu->stats.dw_timed++;
    dw_remember(cu, dir, fused, dt, dg, ek, choice, kiln, variant, graph);
    kiln_cuda_conv_stats_note(c->kctx,
             "conv depthwise %s %s N=%lld C=%lld %lldx%lld %lldx%lld s%lld: kiln %.3f / %.3f / pipelined %.3f ms, cuDNN "
             "%.3f ms, graph %.3f ms, graph with epilogue %.3f ms: %s",
             dir == DIR_FWD ? "forward" : dir == DIR_BWD_DATA ? "data gradient" : "weight gradient", kiln_dtype_name(dt),
             (long long)dg->N, (long long)dg->C, (long long)dg->H, (long long)dg->W, (long long)dg->kh,
             (long long)dg->kw, (long long)dg->sh, tk, tp, tq, td, tg[0], tg[1],
             *kiln ? "kiln" : *graph == 2 ? "graph with epilogue" : *graph ? "graph" : "cuDNN");
    return KILN_OK;
}

/* Times the n paths of direction dir's op that *force selects (1..n: cu->gemm_graph_force or
 * cu->pw_force; those with skip[k] set are left at INFINITY) in two rounds, the best of each
 * in t[k]. One round timed the path met first at up to 2.4x its later time (resnext50's
 * 512-channel grouped 3x3 on the legacy API: 0.177 ms, 0.073 in the run: bench/NOTES.md
 * "z11"). */
static kiln_status time_forced_by(kiln_cuda *cu, kiln_op_ctx *c, int dir, bool fused, int *force, int n,
                                  const bool *skip, float *t) {
    kiln_status st = KILN_OK;
    for (int k = 0; k < n; k++) t[k] = INFINITY;
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < n && !st; k++) {
            if (skip && skip[k]) continue;
            float tk = INFINITY;
            *force = k + 1;
            st = time_op(cu, c, dir, fused, 0, -1, &tk);
            if (tk < t[k]) t[k] = tk;
        }
    *force = 0;
    return st;
}

/* time_forced_by with the graph paths' force (cu->gemm_graph_force). */
static kiln_status time_forced(kiln_cuda *cu, kiln_op_ctx *c, int dir, bool fused, int n, const bool *skip, float *t) {
    return time_forced_by(cu, c, dir, fused, &cu->gemm_graph_force, n, skip, t);
}

/* A timed choice (algo: which path, ms: its time) kept under key with the algorithm choices,
 * and on the disk where the cache has a file. */
static kiln_status keep_choice(kiln_cuda *cu, kiln_context *ctx, const char *key, int algo, float ms) {
    kiln_algo_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.key, sizeof e.key, "%s", key);
    e.algo = algo;
    e.ms = ms;
    e.fused = -1;
    if (!kiln_algo_cache_put(&cu->algos, &cu->n_algos, &cu->cap_algos, &e))
        return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for the convolution algorithm cache");
    if (cu->algo_path[0] && kiln_algo_cache_store(cu->algo_path, cu->algo_prefix, &e) == 0) cu->stats.algos_written++;
    return KILN_OK;
}

/* Whether the channel-padded forward problem g of c runs narrow (gn) in NARROW_TIMED mode:
 * where the op timed narrow (copies included) runs clearly faster than padded: timed the first time the
 * problem is met (outside graph capture: a plan's first run is eager), the choice kept with
 * cuDNN's algorithm choices (on the disk too). */
static kiln_status narrow_decide(kiln_cuda *cu, kiln_op_ctx *c, bool fused, const conv_geo *g, const conv_geo *gn,
                                 kiln_dtype dt, bool *narrow) {
    kiln_context *ctx = c->kctx;
    *narrow = false;
    const kiln_tensor *z = fused ? input(c, 3) : NULL;
    char key[KILN_ALGO_KEY];
    make_key(cu, g, dt, align_class(c->in[0]->data, c->in[1]->data, c->out[0]->data), DIR_FWD, false, key,
             sizeof key);
    const size_t at = strlen(key);
    snprintf(key + at, sizeof key - at, " narrow=%lld op=%s res=%d", (long long)gn->C, c->node->op_type, z ? 1 : 0);
    const kiln_algo_entry *a = kiln_algo_cache_find(cu->algos, cu->n_algos, key);
    if (a) {
        *narrow = a->algo == 1;
        return KILN_OK;
    }
    /* a residual read in place of Y would be added again by every timed run */
    if (capturing(cu) || (z && z->data == c->out[0]->data)) return KILN_OK;
    float t[2];
    kiln_status st = time_op(cu, c, DIR_FWD, fused, 0, 0, &t[0]);
    if (!st) st = time_op(cu, c, DIR_FWD, fused, 0, 1, &t[1]);
    if (st) return st;
    *narrow = t[1] < NARROW_WIN * t[0];
    if ((st = keep_choice(cu, ctx, key, *narrow ? 1 : 0, *narrow ? t[1] : t[0])) != KILN_OK) return st;
    kiln_log(ctx, KILN_LOG_INFO, "conv narrow: %s %s N=%lld %lld -> %lld channels (%lld used) %lldx%lld: padded %.3f ms, "
             "narrow %.3f ms: %s", c->node->op_type, kiln_dtype_name(dt), (long long)g->N, (long long)g->C,
             (long long)g->M, (long long)gn->C, (long long)g->kh, (long long)g->kw, t[0], t[1],
             *narrow ? "narrow" : "padded");
    return KILN_OK;
}

/* Whether a 1x1 kiln.FusedConv that runs as a cuBLASLt product (gemm_shaped) runs instead as
 * cuDNN's ConvFwd -> bias -> activation graph (*p its plan): where its activation is not
 * Relu (cuBLASLt's epilogue has Relu only: the others are a pass of their own over Y, MobileNet's
 * Clip and EfficientNet's SiLU on their expansions' wide outputs), it has a bias and no
 * residual, and the graph has a plan. KILN_CUDA_CONV_GRAPH=1 takes it wherever it can, =0
 * never; else, with autotune, both are timed the first time the problem is met (outside graph
 * capture) and the choice is kept with the algorithm choices (on the disk too). */
static kiln_status gemm_graph_decide(kiln_cuda *cu, kiln_op_ctx *c, bool fused, const conv_geo *g, kiln_dtype dt,
                                     const kiln_cuda_act *act, struct kiln_genstats_problem **p) {
    kiln_context *ctx = c->kctx;
    *p = NULL;
    if (cu->gemm_graph_force == 1 || !fused || act->kind == KILN_ACT_NONE || act->kind == KILN_ACT_RELU ||
        !epilogue_worth(cu, g))
        return KILN_OK;
    char key[KILN_ALGO_KEY];
    graph_epi_key(cu, c, g, dt, act, key, sizeof key);
    /* a choice kept before (by an earlier process too): cuBLASLt's plans no graph */
    const kiln_algo_entry *a = kept_choice(cu, key);
    if (a && a->algo != 1) return KILN_OK;
    struct kiln_genstats_problem *gp;
    size_t gws;
    kiln_status st = dw_graph_plan(cu, c, g, dt, fused, true, &gp, &gws);
    if (st || !gp || gws > c->workspace_size || (gws && !c->workspace)) return st;
    if (a || cu->gemm_graph_force == 2 || cu->conv_graph == 1) {
        *p = gp;
        return KILN_OK;
    }
    if (!cu->autotune) return KILN_OK;
    if (capturing(cu)) return KILN_OK;
    float t[2]; /* cuBLASLt + the activation's pass, the graph */
    const int graph = (st = time_forced(cu, c, DIR_FWD, fused, 2, NULL, t)) == KILN_OK && t[1] < t[0];
    if (st || (st = keep_choice(cu, ctx, key, graph, t[graph])) != KILN_OK) return st;
    kiln_cuda_conv_stats_note(ctx, "conv 1x1 %s N*HW=%lld %lld -> %lld: cuBLASLt + activation %.3f ms, cuDNN graph %.3f ms",
             kiln_dtype_name(dt), (long long)(g->N * g->OH * g->OW), (long long)g->C, (long long)g->M, t[0], t[1]);
    if (graph) *p = gp;
    return KILN_OK;
}

/* A forward runs on conv_pointwise.cu's kernel when its timed run is below this share of the
 * usual path's. */
#define PW_WIN 0.95

/* X's windows as conv_pointwise.cu's problem (*p): one group, NHWC; the channels read are the
 * pad-channels pass's used_channels, else all of X's. */
static bool pw_geo(const kiln_op_ctx *c, const conv_geo *g, kiln_cuda_pw_geo *p) {
    if (g->G != 1 || g->fmt != KILN_FORMAT_NHWC) return false;
    int64_t u = kiln_attr_int(c->node, "used_channels", 0);
    if (u < 1 || u > g->C) u = g->C;
    *p = (kiln_cuda_pw_geo){.N = g->N, .H = g->H0, .W = g->W0, .C = g->C, .u = u, .M = g->M, .OH = g->OH,
                            .OW = g->OW, .kh = g->kh, .kw = g->kw, .sh = g->sh, .sw = g->sw, .dh = g->dh,
                            .dw = g->dw, .pt = g->pt, .pl = g->pl};
    return true;
}

/* Whether a forward runs on conv_pointwise.cu's kernel (*use): where the kernel takes it (one
 * group, NHWC f16 / bf16, at most 64 values a window: 1x1 products of few channels, RGB stems)
 * and, with autotune, it timed clearly faster than the usual path (cuBLASLt with its epilogue,
 * cuDNN's legacy API or graph, the narrow copy, and the activation's pass where none has it)
 * the first time the problem is met (outside graph capture), the choice kept with the
 * algorithm choices (on the disk too). KILN_CUDA_PW=1 takes the kernel wherever it applies,
 * =0 never. */
static kiln_status pw_decide(kiln_cuda *cu, kiln_op_ctx *c, bool fused, const conv_geo *g, kiln_dtype dt,
                             const kiln_cuda_act *act, kiln_cuda_pw_geo *p, bool *use) {
    kiln_context *ctx = c->kctx;
    *use = false;
    const kiln_tensor *b = input(c, 2), *z = fused ? input(c, 3) : NULL;
    if (cu->pw_force == 1 || !pw_geo(c, g, p) ||
        !kiln_cuda_conv_pointwise_fits(dt, p, z ? z->data : NULL, c->out[0]->data, NULL, 0))
        return KILN_OK;
    const char *env = getenv("KILN_CUDA_PW");
    if (cu->pw_force == 2 || (env && strcmp(env, "1") == 0)) {
        *use = true;
        return KILN_OK;
    }
    if ((env && strcmp(env, "0") == 0) || !cu->autotune) return KILN_OK;
    char key[KILN_ALGO_KEY];
    make_key(cu, g, dt, align_class(c->in[0]->data, c->in[1]->data, c->out[0]->data), DIR_FWD, false, key,
             sizeof key);
    const size_t at = strlen(key);
    snprintf(key + at, sizeof key - at, " pointwise u=%lld op=%s act=%d,%g,%g bias=%d res=%d", (long long)p->u,
             c->node->op_type, (int)act->kind, act->a, act->b, b ? 1 : 0, z ? 1 : 0);
    const kiln_algo_entry *a = kiln_algo_cache_find(cu->algos, cu->n_algos, key);
    if (a) {
        *use = a->algo == 1;
        return KILN_OK;
    }
    /* a residual read in place of Y would be added again by every timed run */
    if (capturing(cu) || (z && z->data == c->out[0]->data)) return KILN_OK;
    float t[2]; /* the usual path, the kernel */
    kiln_status st = time_forced_by(cu, c, DIR_FWD, fused, &cu->pw_force, 2, NULL, t);
    if (st) return st;
    *use = t[1] < PW_WIN * t[0];
    if ((st = keep_choice(cu, ctx, key, *use ? 1 : 0, t[*use ? 1 : 0])) != KILN_OK) return st;
    kiln_cuda_conv_stats_note(ctx, "conv pointwise %s %s N*OH*OW=%lld %lld (%lld read) -> %lld %lldx%lld/%lld act=%d "
                              "bias=%d res=%d: usual %.3f ms, pointwise kernel %.3f ms: %s", c->node->op_type,
                              kiln_dtype_name(dt), (long long)(g->N * g->OH * g->OW), (long long)g->C,
                              (long long)p->u, (long long)g->M, (long long)g->kh, (long long)g->kw, (long long)g->sh,
                              (int)act->kind, b ? 1 : 0, z ? 1 : 0, t[0], t[1], *use ? "kernel" : "usual");
    return KILN_OK;
}

/* Whether a forward convolution cuDNN's legacy API would run goes instead on the ConvFwd
 * graph (cudnn_graph.c): *mode 1 the graph with + bias -> activation inside, 2 the plain
 * graph then kiln's epilogue (*p the plan). Asked for the problems where the legacy API is
 * known to fall short (graph_asked): grouped convolutions that are not depthwise (dw_faster
 * decides those), whose 48- to 112-channel groups ran regnet_y_8gf slower than PyTorch eager
 * (bench/NOTES.md "z11"), and FusedConvs whose activation the legacy fused call lacks (SiLU,
 * Clip, GELU after a 3x3: a pass of its own over Y). KILN_CUDA_CONV_GRAPH=0 never, 1 wherever
 * a plan exists (with the epilogue inside where it has one); else, with autotune, the legacy
 * path and each graph are timed the first time the problem is met (outside graph capture)
 * and the choice is kept with the algorithm choices (on the disk too). */
static kiln_status conv_graph_decide(kiln_cuda *cu, kiln_op_ctx *c, bool fused, const conv_geo *g, kiln_dtype dt,
                                     const kiln_cuda_act *act, struct kiln_genstats_problem **p, int *mode) {
    kiln_context *ctx = c->kctx;
    *p = NULL;
    *mode = 0;
    const kiln_tensor *z = fused ? input(c, 3) : NULL;
    /* a residual read in place of Y would be overwritten by the graph's convolution */
    if (cu->gemm_graph_force == 1 || !graph_asked(cu, g, fused, act) || (z && z->data == c->out[0]->data)) return KILN_OK;
    char key[KILN_ALGO_KEY];
    graph_fwd_key(cu, c, g, dt, fused, act, key, sizeof key);
    /* a choice kept before (by an earlier process too): only its graph is planned, none for the legacy path */
    const kiln_algo_entry *a = kept_choice(cu, key);
    if (a && a->algo != 1 && a->algo != 2) return KILN_OK;
    struct kiln_genstats_problem *gp[2] = {NULL, NULL}; /* with the epilogue, plain */
    for (int e = 0; e < 2; e++) {
        if (a && e != a->algo - 1) continue;
        size_t gws = 0;
        kiln_status st = dw_graph_plan(cu, c, g, dt, fused, e == 0, &gp[e], &gws);
        if (st) return st;
        if (gp[e] && (gws > c->workspace_size || (gws && !c->workspace))) gp[e] = NULL;
    }
    if (cu->gemm_graph_force >= 2) { /* timing one of them */
        *mode = cu->gemm_graph_force - 1;
        *p = gp[*mode - 1];
        if (!*p) *mode = 0;
        return KILN_OK;
    }
    if (cu->conv_graph == 1) {
        *mode = gp[0] ? 1 : gp[1] ? 2 : 0;
        *p = *mode ? gp[*mode - 1] : NULL;
        return KILN_OK;
    }
    if (a) {
        if (gp[a->algo - 1]) {
            *mode = a->algo;
            *p = gp[a->algo - 1];
        }
        return KILN_OK;
    }
    if (!cu->autotune || (!gp[0] && !gp[1])) return KILN_OK;
    if (capturing(cu)) return KILN_OK;
    float t[3]; /* legacy, graph with the epilogue, plain graph */
    const bool skip[3] = {false, !gp[0], !gp[1]};
    kiln_status st = time_forced(cu, c, DIR_FWD, fused, 3, skip, t);
    if (st) return st;
    int best = 0;
    for (int k = 1; k < 3; k++)
        if (t[k] < t[best]) best = k;
    if ((st = keep_choice(cu, ctx, key, best, t[best])) != KILN_OK) return st;
    kiln_cuda_conv_stats_note(ctx,
             "conv %s %s N=%lld %lld -> %lld %lldx%lld s%lld g%lld act %d: legacy %.3f ms, graph with epilogue %.3f ms, "
             "graph %.3f ms: %s", c->node->op_type, kiln_dtype_name(dt), (long long)g->N, (long long)g->C,
             (long long)g->M, (long long)g->kh, (long long)g->kw, (long long)g->sh, (long long)g->G, (int)act->kind,
             t[0], t[1], t[2], best == 0 ? "legacy" : best == 1 ? "graph with epilogue" : "graph");
    if (best) {
        *mode = best;
        *p = gp[best - 1];
    }
    return KILN_OK;
}

/* Runs graph p (cuDNN's ConvFwd, its plans timed on the first eager run with autotune), then
 * kiln's epilogue unless the graph has it (with_epi). */
static kiln_status graph_forward(kiln_cuda *cu, kiln_op_ctx *c, bool fused, const conv_geo *g, kiln_dtype dt,
                                 const kiln_cuda_act *act, struct kiln_genstats_problem *p, bool with_epi) {
    kiln_context *ctx = c->kctx;
    const kiln_tensor *x = c->in[0], *w = c->in[1], *b = input(c, 2), *z = fused ? input(c, 3) : NULL;
    kiln_tensor *y = c->out[0];
    kiln_status gs = KILN_OK;
    if ((cu->autotune && (gs = kiln_cuda_conv_graph_tune(cu, ctx, p, x->data, w->data, y->data, b ? b->data : NULL,
                                                         c->workspace, c->workspace_size)) != KILN_OK) ||
        (gs = kiln_cuda_conv_graph_run(cu, ctx, p, x->data, w->data, y->data, b ? b->data : NULL, c->workspace,
                                       c->workspace_size)) != KILN_OK)
        return gs;
    cu->stats.conv_graph_calls++;
    if (with_epi) return KILN_OK;
    const int64_t rows = g->N * g->OH * g->OW; /* NHWC: (rows, M) */
    if (fused && (b || z || act->kind != KILN_ACT_NONE))
        return kiln_cuda_conv_epilogue(cu, ctx, dt, y->data, b ? b->data : NULL, z ? z->data : NULL, rows, g->M, 1, act);
    return b ? kiln_cuda_add_channel_bias(cu, ctx, dt, y->data, b->data, rows, g->M, 1) : KILN_OK;
}

static kiln_status conv_run_as(kiln_cuda *cu, kiln_op_ctx *c, bool fused, int narrow_force) {
    kiln_context *ctx = c->kctx;
    const kiln_tensor *x = c->in[0], *w = c->in[1]; // (N,C,[H,]W), (M,C/G,[kH,]kW)
    const kiln_tensor *b = input(c, 2);              // (M)
    const kiln_tensor *z = fused ? input(c, 3) : NULL; // like y
    kiln_tensor *y = c->out[0];                       // (N,M,[OH,]OW)
    const kiln_dtype dt = x->dtype;
    conv_geo g;
    kiln_cuda_act act = {KILN_ACT_NONE, 0.f, 0.f};
    char why[256];
    if (!conv_geo_get(c, x, w, y, &g, why, sizeof why) ||
        (fused && !kiln_cuda_act_get(c->node, false, &act, why, sizeof why)))
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s", why);
    kiln_cuda_direct_geo d;
    if (direct_forward(cu, c, &g, fused, &act, &d)) {
        const kiln_status ds = kiln_cuda_conv_direct_forward(cu, ctx, dt, &d, x->data, w->data, b ? b->data : NULL,
                                                             act.kind == KILN_ACT_RELU, y->data);
        if (!ds) cu->stats.conv_direct_calls++;
        return ds;
    }
    kiln_cuda_dw_geo dg;
    bool dw_kiln = false;
    int dw_variant = KILN_CUDA_DW_TILED, dw_graph = 0;
    const bool depthwise = depthwise_shaped(cu, &g, &dg);
    if (depthwise) {
        const kiln_status cs = dw_faster(cu, c, DIR_FWD, fused, dt, &dg, &g, y->data, z ? z->data : NULL, &dw_kiln,
                                         &dw_variant, &dw_graph);
        if (cs) return cs;
    }
    struct kiln_genstats_problem *p = NULL;
    const bool want_graph = dw_graph > 0;
    for (; dw_graph > 0; dw_graph--) { /* the chosen graph, else the plain one, else the kernel */
        size_t gws;
        const kiln_status gs = dw_graph_plan(cu, c, &g, dt, fused, dw_graph == 2, &p, &gws);
        if (gs) return gs;
        if (p && (gws > c->workspace_size || (gws && !c->workspace))) p = NULL;
        if (p) break;
    }
    if (want_graph && !p) dw_kiln = true;
    if (p) return graph_forward(cu, c, fused, &g, dt, &act, p, dw_graph == 2);
    if (dw_kiln) {
        const kiln_status ds = kiln_cuda_conv_depthwise_forward(cu, ctx, dt, &dg, x->data, w->data, b ? b->data : NULL,
                                                                z ? z->data : NULL, &act, dw_variant, y->data);
        if (!ds) cu->stats.conv_depthwise_calls++;
        return ds;
    }
    /* short windows (1x1 products of few channels, RGB stems) on the tensor cores where faster */
    kiln_cuda_pw_geo pg;
    bool pw = false;
    kiln_status pst = pw_decide(cu, c, fused, &g, dt, &act, &pg, &pw); /* one group only */
    if (pst) return pst;
    if (pw) {
        pst = kiln_cuda_conv_pointwise(cu, ctx, dt, &pg, x->data, w->data, b ? b->data : NULL, z ? z->data : NULL,
                                       &act, y->data);
        if (!pst) cu->stats.conv_pointwise_calls++;
        return pst;
    }
    if (gemm_shaped(cu, &g)) {
        struct kiln_genstats_problem *gp;
        kiln_status gs = gemm_graph_decide(cu, c, fused, &g, dt, &act, &gp);
        if (gs) return gs;
        if (gp) {
            if (cu->autotune && (gs = kiln_cuda_conv_graph_tune(cu, ctx, gp, x->data, w->data, y->data, b->data,
                                                                c->workspace, c->workspace_size)) != KILN_OK)
                return gs;
            if ((gs = kiln_cuda_conv_graph_run(cu, ctx, gp, x->data, w->data, y->data, b->data, c->workspace,
                                               c->workspace_size)) == KILN_OK)
                cu->stats.conv_graph_calls++;
            return gs;
        }
        /* Relu rides on the epilogue; other activations run in place after it */
        const bool relu = act.kind == KILN_ACT_RELU;
        gs = kiln_cuda_gemm_nt(cu, ctx, dt, g.N * g.OH * g.OW, g.M, g.C, x->data, w->data, b ? b->data : NULL,
                                           z ? z->data : NULL, relu, y->data, c->workspace, c->workspace_size);
        if (!gs && !relu && act.kind != KILN_ACT_NONE)
            gs = kiln_cuda_act_inplace(cu, ctx, dt, y->data, g.N * g.OH * g.OW * g.M, &act);
        if (gs != KILN_ERR_UNSUPPORTED) {
            if (!gs) cu->stats.conv_gemm_calls++;
            return gs;
        }
        /* cuBLASLt has no algorithm for it: cuDNN's convolution below */
    } else if (!depthwise) {
        int gmode;
        const kiln_status gs = conv_graph_decide(cu, c, fused, &g, dt, &act, &p, &gmode);
        if (gs) return gs;
        if (p) return graph_forward(cu, c, fused, &g, dt, &act, p, gmode == 1);
    }
    /* a channel-padded convolution may run narrow: X's and W's real channels copied to the
     * start of the algorithm's workspace, cuDNN on those */
    conv_geo gn;
    bool narrow = false;
    kiln_status st;
    const int mode = narrow_mode(cu);
    if (mode != NARROW_NEVER && narrow_geo(c, &g, &gn)) {
        if (narrow_force >= 0) narrow = narrow_force == 1;
        else if (mode == NARROW_ALWAYS) narrow = true;
        else if ((st = narrow_decide(cu, c, fused, &g, &gn, dt, &narrow)) != KILN_OK)
            return st;
    }
    cudnnHandle_t h;
    st = kiln_cuda_dnn(cu, ctx, &h);
    if (st) return st;
    if ((st = set_descriptors(cu, ctx, &g, dt)) != KILN_OK) return st;

    /* workspace: padded X | zero bias | the algorithm's (narrow: X's and W's copies first) */
    const size_t pbytes = pad_bytes(&g, dt), zbytes = zero_bias_bytes(c, fused, &g, dt);
    if (c->workspace_size < pbytes + zbytes || ((pbytes || zbytes) && !c->workspace))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "%s needs at least %zu bytes of workspace, got %zu",
                         c->node->op_type, pbytes + zbytes, c->workspace_size);
    const void *xin = x->data;
    if (g.padded) {
        st = g.fmt == KILN_FORMAT_NHWC
                 ? kiln_cuda_pad_nhwc(cu, ctx, dt, c->workspace, x->data, g.N, g.C, g.H0, g.W0, g.pt, g.pb, g.pl, g.pr)
                 : kiln_cuda_pad_nchw(cu, ctx, dt, c->workspace, x->data, g.N, g.C, g.H0, g.W0, g.pt, g.pb, g.pl, g.pr);
        if (st) return st;
        xin = c->workspace;
    }
    char *base = c->workspace; /* may be NULL when nothing needs workspace */
    void *zero_bias = base ? base + pbytes : NULL;
    size_t ws_bytes = base ? c->workspace_size - pbytes - zbytes : 0;
    void *ws = ws_bytes ? base + pbytes + zbytes : NULL;
    /* the epilogue's view of Y: (N, M, OH*OW) or, NHWC, (N*OH*OW, M, 1) */
    const bool nhwc = g.fmt == KILN_FORMAT_NHWC;
    const int64_t rows = nhwc ? g.N * g.OH * g.OW : g.N, inner = nhwc ? 1 : g.OH * g.OW;

    /* cuDNN's fused call: Relu, or nothing to apply but a bias or a residual (with neither,
     * a FusedConv is a plain convolution) */
    const bool cudnn_act = fused && (act.kind == KILN_ACT_RELU || (act.kind == KILN_ACT_NONE && (b || z)));
    fused_call fc = {xin, w->data, b ? b->data : zero_bias, z ? z->data : NULL, y->data};
    if (cudnn_act) {
        if (!b) KILN_CUDA_CHECK(ctx, cudaMemsetAsync(zero_bias, 0, zbytes, cu->stream));
        KILN_CUDNN_CHECK(ctx, cudnnSetTensor4dDescriptor(cu->dnn_b, dnn_format(g.fmt), dnn_type(dt), 1, (int)g.M, 1, 1));
        KILN_CUDNN_CHECK(ctx, cudnnSetActivationDescriptor(
                                  cu->dnn_act, act.kind == KILN_ACT_RELU ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                                  CUDNN_NOT_PROPAGATE_NAN, 0.0));
    }
    const bool identity = cudnn_act && act.kind == KILN_ACT_NONE;
    const void *win = w->data;
    if (narrow && ws && ws_bytes >= narrow_bytes(&gn, dt)) {
        const size_t nb = narrow_bytes(&gn, dt);
        void *nx = ws, *nw = (char *)ws + narrow_x_bytes(&gn, dt);
        if ((st = narrow_copy(cu, ctx, &g, &gn, dt, xin, win, nx, nw)) != KILN_OK ||
            (st = set_descriptors(cu, ctx, &gn, dt)) != KILN_OK)
            return st;
        g = gn;
        fc.x = xin = nx;
        fc.w = win = nw;
        ws_bytes -= nb;
        ws = ws_bytes ? (char *)ws + nb : NULL;
    }
    kiln_algo_entry *a = NULL;
    if ((st = pick_algo(cu, ctx, h, &g, dt, DIR_FWD, xin, win, y->data, ws, ws_bytes, identity,
                        cudnn_act ? &fc : NULL, &a)) != KILN_OK)
        return st;
    const float one = 1.f, zero = 0.f; /* f32 scaling for every data type */
    if (cudnn_act && a->fused != 0 &&
        (act.kind == KILN_ACT_RELU || a->algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)) {
        /* without Z, alpha2 = 0 and z is y itself (cuDNN does not read it then) */
        const cudnnStatus_t e = run_fused(cu, h, &fc, a->algo, ws, a->bytes);
        if (e == CUDNN_STATUS_SUCCESS) {
            a->fused = 1;
            cu->stats.fused_calls++;
            return KILN_OK;
        }
        if (a->fused == 1 || !refusal(e))
            return kiln_cuda_dnn_error(ctx, e, "cudnnConvolutionBiasActivationForward(...)", __FILE__, __LINE__);
        /* refused once for this choice: split it from now on */
        char detail[200];
        cudnnGetLastErrorString(detail, sizeof detail);
        snprintf(cu->stats.fused_refused, sizeof cu->stats.fused_refused, "%s %s: %s: %s", kiln_dtype_name(dt),
                 fmt_name(g.fmt), cudnnGetErrorString(e), detail);
        a->fused = 0;
    }
    KILN_CUDNN_CHECK(ctx, cudnnConvolutionForward(h, &one, cu->dnn_x, xin, cu->dnn_w, win,
                                                  cu->dnn_conv, (cudnnConvolutionFwdAlgo_t)a->algo,
                                                  a->bytes ? ws : NULL, a->bytes, &zero, cu->dnn_y,
                                                  y->data));
    /* cuDNN may leave a recoverable runtime error behind (it probes); the next launch's
     * check must only see its own. Faults of earlier kernels are sticky and still show. */
    (void)cudaGetLastError();
    if (fused) {
        cu->stats.fused_split++;
        if (!b && !z && act.kind == KILN_ACT_NONE) return KILN_OK;
        return kiln_cuda_conv_epilogue(cu, ctx, dt, y->data, b ? b->data : NULL, z ? z->data : NULL, rows, g.M,
                                       inner, &act);
    }
    if (b) return kiln_cuda_add_channel_bias(cu, ctx, dt, y->data, b->data, rows, g.M, inner);
    return KILN_OK;
}

kiln_status kiln_cuda_k_conv(kiln_cuda *cu, kiln_op_ctx *c) { return conv_run(cu, c, false); }

kiln_status kiln_cuda_k_fused_conv(kiln_cuda *cu, kiln_op_ctx *c) { return conv_run(cu, c, true); }

/* The problem cuDNN's ConvolutionFwd -> GenStats graph would run for a kiln.FusedConv with
 * statistics outputs (cudnn_graph.c): 2-D NHWC f16 / bf16, one group, symmetric pads, no
 * bias, residual or activation (the graph has the convolution alone before GenStats). */
bool kiln_cuda_conv_genstats_geo(const kiln_op_ctx *c, kiln_genstats_geo *gs, char *why, size_t n) {
    const kiln_tensor *x = c->in[0], *w = c->in[1], *y = c->out[0];
    conv_geo g;
    kiln_cuda_act act = {KILN_ACT_NONE, 0.f, 0.f};
    if (!conv_geo_get(c, x, w, y, &g, why, n)) return false;
    if (x->ndim != 4 || g.fmt != KILN_FORMAT_NHWC || (x->dtype != KILN_F16 && x->dtype != KILN_BF16)) {
        snprintf(why, n, "the graph is built for 2-D NHWC f16 / bf16 convolutions (rank %d, %s, %s)", x->ndim,
                 fmt_name(g.fmt), kiln_dtype_name(x->dtype));
        return false;
    }
    if (g.G != 1 || g.padded) {
        snprintf(why, n, "%s", g.G != 1 ? "grouped convolution" : "asymmetric pads");
        return false;
    }
    if (input(c, 2) || input(c, 3) || !kiln_cuda_act_get(c->node, false, &act, why, n) || act.kind != KILN_ACT_NONE) {
        snprintf(why, n, "bias, residual or activation in the epilogue (the graph has the convolution alone)");
        return false;
    }
    *gs = (kiln_genstats_geo){.N = g.N, .C = g.C, .H = g.H, .W = g.W, .K = g.M, .R = g.kh, .S = g.kw, .P = g.OH,
                              .Q = g.OW, .sh = g.sh, .sw = g.sw, .dh = g.dh, .dw = g.dw, .ph = g.ph, .pw = g.pw,
                              .bf16 = x->dtype == KILN_BF16};
    return true;
}

/* kiln.ConvGradInput(dY, W, X) -> dX, like X (whose values are not read). */
/* Whether a gradient (dir) of a grouped, not depthwise, convolution runs on cuDNN's graph (*p
 * its plan) rather than the legacy API, whose algorithms ran RegNet's grouped forwards 5-10x
 * slower than the graph's engines (bench/NOTES.md "z11"): KILN_CUDA_CONV_GRAPH=1 wherever it
 * has a plan, =0 never; else, with autotune, both timed in two rounds the first time the
 * problem is met (outside graph capture), the choice kept with the algorithm choices. */
static kiln_status grad_graph_decide(kiln_cuda *cu, kiln_op_ctx *c, int dir, const conv_geo *g, kiln_dtype dt,
                                     struct kiln_genstats_problem **p) {
    kiln_context *ctx = c->kctx;
    *p = NULL;
    if (cu->gemm_graph_force == 1 || (g->G == g->C && g->Cg == 1 && g->M == g->C)) return KILN_OK;
    char key[KILN_ALGO_KEY];
    graph_grad_key(cu, c, g, dt, dir, key, sizeof key);
    /* a choice kept before (by an earlier process too): the legacy path plans no graph */
    const kiln_algo_entry *a = kept_choice(cu, key);
    if (a && a->algo != 1) return KILN_OK;
    struct kiln_genstats_problem *gp;
    kiln_status st = grad_graph_usable(cu, c, g, dt, dir, &gp);
    if (st || !gp) return st;
    if (a || cu->gemm_graph_force == 2 || cu->conv_graph == 1) {
        *p = gp;
        return KILN_OK;
    }
    if (!cu->autotune) return KILN_OK;
    if (capturing(cu)) return KILN_OK;
    float t[2]; /* legacy, graph */
    const int graph = (st = time_forced(cu, c, dir, false, 2, NULL, t)) == KILN_OK && t[1] < t[0];
    if (st || (st = keep_choice(cu, ctx, key, graph, t[graph])) != KILN_OK) return st;
    kiln_cuda_conv_stats_note(ctx, "conv %s %s N=%lld %lld -> %lld %lldx%lld s%lld g%lld: legacy %.3f ms, graph %.3f ms",
                              dir == DIR_BWD_DATA ? "data gradient" : "weight gradient", kiln_dtype_name(dt),
                              (long long)g->N, (long long)g->C, (long long)g->M, (long long)g->kh, (long long)g->kw,
                              (long long)g->sh, (long long)g->G, t[0], t[1]);
    if (graph) *p = gp;
    return KILN_OK;
}

/* A gradient on graph p: x, w, y as kiln_cuda_conv_graph_run takes them for p's kind (its
 * plans timed on the first eager run with autotune). */
static kiln_status grad_graph_run(kiln_cuda *cu, kiln_op_ctx *c, struct kiln_genstats_problem *p, const void *x,
                                  const void *w, void *y) {
    kiln_context *ctx = c->kctx;
    kiln_status st = KILN_OK;
    if ((cu->autotune &&
         (st = kiln_cuda_conv_graph_tune(cu, ctx, p, x, w, y, NULL, c->workspace, c->workspace_size)) != KILN_OK) ||
        (st = kiln_cuda_conv_graph_run(cu, ctx, p, x, w, y, NULL, c->workspace, c->workspace_size)) != KILN_OK)
        return st;
    cu->stats.conv_graph_calls++;
    return KILN_OK;
}

kiln_status kiln_cuda_k_conv_grad_input(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_context *ctx = c->kctx;
    const kiln_tensor *dy = c->in[0], *w = c->in[1], *x = c->in[2]; // (N,M,..), (M,C/G,..), (N,C,..)
    kiln_tensor *dx = c->out[0]; // like x
    const kiln_dtype dt = dy->dtype;
    conv_geo g;
    char why[256];
    if (!conv_geo_get(c, x, w, dy, &g, why, sizeof why)) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s", why);
    if (!fmt_fits(dx, g.fmt)) /* dX is written in the convolution's layout (table.c refuses this) */
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "ConvGradInput: dX is laid out %s, the convolution %s",
                         fmt_name(fmt_of(dx)), fmt_name(g.fmt));
    kiln_cuda_dw_geo dg;
    bool dw_kiln = false;
    struct kiln_genstats_problem *gp = NULL;
    if (depthwise_shaped(cu, &g, &dg)) {
        int dw_variant, dw_graph = 0;
        kiln_status cs =
            dw_faster(cu, c, DIR_BWD_DATA, false, dt, &dg, &g, dx->data, NULL, &dw_kiln, &dw_variant, &dw_graph);
        if (!cs && dw_graph) cs = grad_graph_usable(cu, c, &g, dt, DIR_BWD_DATA, &gp);
        if (cs) return cs;
    } else {
        const kiln_status cs = grad_graph_decide(cu, c, DIR_BWD_DATA, &g, dt, &gp);
        if (cs) return cs;
    }
    if (gp) return grad_graph_run(cu, c, gp, dx->data, w->data, dy->data);
    if (dw_kiln && cu->conv_dw_grad) {
        const kiln_status ds = kiln_cuda_conv_depthwise_dgrad(cu, ctx, dt, &dg, dy->data, w->data, dx->data,
                                                              c->workspace, c->workspace_size);
        if (!ds) {
            cu->stats.conv_depthwise_calls++;
            cu->stats.conv_dw_grad_calls++;
        }
        return ds;
    }
    if (dw_kiln) {
        const kiln_status ds = kiln_cuda_conv_depthwise_grad_input(cu, ctx, dt, &dg, dy->data, w->data, dx->data);
        if (!ds) cu->stats.conv_depthwise_calls++;
        return ds;
    }
    cudnnHandle_t h;
    kiln_status st = kiln_cuda_dnn(cu, ctx, &h);
    if (st) return st;
    if ((st = set_descriptors(cu, ctx, &g, dt)) != KILN_OK) return st;
    /* asymmetric pads: the gradient of the padded X, cropped afterwards */
    const size_t pbytes = pad_bytes(&g, dt);
    if (c->workspace_size < pbytes || (pbytes && !c->workspace))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "ConvGradInput needs at least %zu bytes of workspace, got %zu",
                         pbytes, c->workspace_size);
    char *base = c->workspace;
    void *dxout = g.padded ? c->workspace : dx->data;
    const size_t ws_bytes = base ? c->workspace_size - pbytes : 0;
    void *ws = ws_bytes ? base + pbytes : NULL;
    kiln_algo_entry *a = NULL;
    if ((st = pick_algo(cu, ctx, h, &g, dt, DIR_BWD_DATA, dxout, w->data, dy->data, ws, ws_bytes, false, NULL, &a)) !=
        KILN_OK)
        return st;
    const float one = 1.f, zero = 0.f;
    KILN_CUDNN_CHECK(ctx, cudnnConvolutionBackwardData(h, &one, cu->dnn_w, w->data, cu->dnn_y, dy->data,
                                                       cu->dnn_conv, (cudnnConvolutionBwdDataAlgo_t)a->algo,
                                                       a->bytes ? ws : NULL, a->bytes, &zero, cu->dnn_x, dxout));
    (void)cudaGetLastError();
    if (g.padded)
        return g.fmt == KILN_FORMAT_NHWC
                   ? kiln_cuda_crop_nhwc(cu, ctx, dt, dx->data, dxout, g.N, g.C, g.H0, g.W0, g.pt, g.pb, g.pl, g.pr)
                   : kiln_cuda_crop_nchw(cu, ctx, dt, dx->data, dxout, g.N, g.C, g.H0, g.W0, g.pt, g.pb, g.pl, g.pr);
    return KILN_OK;
}

/* kiln.ConvGradWeight(X, dY, W) -> dW, like W (whose values are not read). */
kiln_status kiln_cuda_k_conv_grad_weight(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_context *ctx = c->kctx;
    const kiln_tensor *x = c->in[0], *dy = c->in[1], *w = c->in[2]; // (N,C,..), (N,M,..), (M,C/G,..)
    kiln_tensor *dw = c->out[0]; // like w
    const kiln_dtype dt = x->dtype;
    conv_geo g;
    char why[256];
    if (!conv_geo_get(c, x, w, dy, &g, why, sizeof why)) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s", why);
    if (!fmt_fits(dw, g.fmt)) /* dW is written in the convolution's layout (table.c refuses this) */
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "ConvGradWeight: dW is laid out %s, the convolution %s",
                         fmt_name(fmt_of(dw)), fmt_name(g.fmt));
    kiln_cuda_direct_geo d;
    if (direct_shaped(cu, &g, &d)) {
        const kiln_status ds =
            kiln_cuda_conv_direct_wgrad(cu, ctx, dt, &d, x->data, dy->data, dw->data, c->workspace, c->workspace_size);
        if (!ds) cu->stats.conv_direct_calls++;
        return ds;
    }
    /* depthwise: conv_depthwise_grad.cu's kernels when conv_dw_grad is on (the default),
     * with autotune where timed faster than cuDNN */
    kiln_cuda_dw_geo dg;
    bool dw_kiln = false;
    struct kiln_genstats_problem *gp = NULL;
    if (depthwise_shaped(cu, &g, &dg)) {
        /* the kernels only with conv_dw_grad; the graph where KILN_CUDA_DW_GRAPH forces it too */
        if (cu->conv_dw_grad || cu->dw_graph > 0) {
            int dw_variant, dw_graph = 0;
            kiln_status cs = dw_faster(cu, c, DIR_BWD_FILTER, false, dt, &dg, &g, dw->data, NULL, &dw_kiln,
                                       &dw_variant, &dw_graph);
            if (!cs && dw_graph) cs = grad_graph_usable(cu, c, &g, dt, DIR_BWD_FILTER, &gp);
            if (cs) return cs;
            if (!cu->conv_dw_grad) dw_kiln = false;
        }
    } else {
        const kiln_status cs = grad_graph_decide(cu, c, DIR_BWD_FILTER, &g, dt, &gp);
        if (cs) return cs;
    }
    if (gp) return grad_graph_run(cu, c, gp, x->data, dw->data, dy->data);
    if (dw_kiln) {
        const kiln_status ds = kiln_cuda_conv_depthwise_wgrad(cu, ctx, dt, &dg, x->data, dy->data, dw->data,
                                                              c->workspace, c->workspace_size);
        if (!ds) cu->stats.conv_dw_grad_calls++;
        return ds;
    }
    cudnnHandle_t h;
    kiln_status st = kiln_cuda_dnn(cu, ctx, &h);
    if (st) return st;
    if ((st = set_descriptors(cu, ctx, &g, dt)) != KILN_OK) return st;
    const size_t pbytes = pad_bytes(&g, dt);
    if (c->workspace_size < pbytes || (pbytes && !c->workspace))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "ConvGradWeight needs at least %zu bytes of workspace, got %zu",
                         pbytes, c->workspace_size);
    const void *xin = x->data;
    if (g.padded) {
        st = g.fmt == KILN_FORMAT_NHWC
                 ? kiln_cuda_pad_nhwc(cu, ctx, dt, c->workspace, x->data, g.N, g.C, g.H0, g.W0, g.pt, g.pb, g.pl, g.pr)
                 : kiln_cuda_pad_nchw(cu, ctx, dt, c->workspace, x->data, g.N, g.C, g.H0, g.W0, g.pt, g.pb, g.pl, g.pr);
        if (st) return st;
        xin = c->workspace;
    }
    char *base = c->workspace;
    const size_t ws_bytes = base ? c->workspace_size - pbytes : 0;
    void *ws = ws_bytes ? base + pbytes : NULL;
    kiln_algo_entry *a = NULL;
    if ((st = pick_algo(cu, ctx, h, &g, dt, DIR_BWD_FILTER, xin, dw->data, dy->data, ws, ws_bytes, false, NULL, &a)) !=
        KILN_OK)
        return st;
    const float one = 1.f, zero = 0.f;
    KILN_CUDNN_CHECK(ctx, cudnnConvolutionBackwardFilter(h, &one, cu->dnn_x, xin, cu->dnn_y, dy->data,
                                                         cu->dnn_conv, (cudnnConvolutionBwdFilterAlgo_t)a->algo,
                                                         a->bytes ? ws : NULL, a->bytes, &zero, cu->dnn_w,
                                                         dw->data));
    (void)cudaGetLastError();
    return KILN_OK;
}
