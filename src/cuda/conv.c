/*
 * conv.c — Conv and its gradients through cuDNN 9's convolution API, NCHW:
 *   Conv (cudnnConvolutionForward), kiln.ConvGradInput(dY, W, X) -> dX
 *   (cudnnConvolutionBackwardData) and kiln.ConvGradWeight(X, dY, W) -> dW
 *   (cudnnConvolutionBackwardFilter). The gradient ops carry Conv's attributes and read
 *   only the shape of their last input; ConvGradBias is a plain sum (reduce_sum.cu).
 *   X (N, C, W) or (N, C, H, W), W (M, C/group, kW) or (M, C/group, kH, kW), optional
 *   B (M): 1-D and 2-D convolutions (1-D as 2-D with H = 1), groups (depthwise too),
 *   strides, dilations, explicit pads or auto_pad, f32 / f16 / bf16.
 *
 *   Pads are computed by the CPU reference's rules (kiln_cuda_window_get). cuDNN pads both
 *   sides of a dim by one amount; when begin and end pads differ (SAME_* with an odd
 *   total, or explicit asymmetric pads) X is first copied into the workspace with its
 *   zero border and convolved with no padding.
 *
 *   Precision: f32 runs with CUDNN_FMA_MATH (CUDNN_DEFAULT_MATH would let Ampere and
 *   Hopper use TF32); f16 / bf16 use tensor cores with f32 accumulation (compute type
 *   CUDNN_DATA_FLOAT). The bias is added by a per-channel kernel afterwards.
 *
 *   Algorithm: chosen by cudnnFindConvolution{Forward,BackwardData,BackwardFilter}
 *   AlgorithmEx the first time a shape (and workspace size, and direction) is seen, with
 *   the caller's buffers and workspace, and cached on the kiln_cuda. Workspace
 *   (kiln_cuda_ws_conv and the gradients' own): the padded copy of X (forward, weight
 *   gradient) or of dX (input gradient, cropped into dX afterwards), if any, plus the most
 *   any algorithm of that direction needs for the shape, up to CONV_WS_CAP. The fastest
 *   algorithm is taken, deterministic or not (cuDNN's backward algorithms 0 and 3 add with
 *   atomics).
 */
#include "cuda_internal.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONV_WS_CAP ((size_t)512 << 20)

typedef struct conv_geo {
    int64_t N, C, H, W; /* X as cuDNN sees it: padded when `padded` */
    int64_t M, Cg, G;
    int64_t kh, kw, sh, sw, dh, dw;
    int64_t ph, pw;       /* symmetric pads given to cuDNN */
    int64_t OH, OW;
    bool padded;          /* X goes through a padded copy */
    int64_t pt, pb, pl, pr; /* that copy's border */
    int64_t H0, W0;       /* X's own spatial dims */
} conv_geo;

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

/* Geometry of the convolution of x by w giving y (c: the node, for its attributes), or
 * false with a reason. */
static bool conv_geo_get(const kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *w,
                         const kiln_tensor *y, conv_geo *g, char *why, size_t n) {
    memset(g, 0, sizeof *g);
    if (x->ndim != 3 && x->ndim != 4) {
        snprintf(why, n, "%d spatial dims (1-D and 2-D convolutions are supported)", x->ndim - 2);
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
        if (!fits_int(all[i])) {
            snprintf(why, n, "a size does not fit cuDNN's int arguments");
            return false;
        }
    if (kiln_tensor_numel(x) == 0 || kiln_tensor_numel(w) == 0 || kiln_tensor_numel(y) == 0) {
        snprintf(why, n, "empty tensors");
        return false;
    }
    return true;
}

static cudnnDataType_t dnn_type(kiln_dtype t) {
    return t == KILN_F16 ? CUDNN_DATA_HALF : t == KILN_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* Describe the convolution on cu's reusable descriptors. */
static kiln_status set_descriptors(kiln_cuda *cu, kiln_context *ctx, const conv_geo *g,
                                   kiln_dtype dt) {
    const cudnnDataType_t t = dnn_type(dt);
    KILN_CUDNN_CHECK(ctx, cudnnSetTensor4dDescriptor(cu->dnn_x, CUDNN_TENSOR_NCHW, t, (int)g->N,
                                                     (int)g->C, (int)g->H, (int)g->W));
    KILN_CUDNN_CHECK(ctx, cudnnSetFilter4dDescriptor(cu->dnn_w, t, CUDNN_TENSOR_NCHW, (int)g->M,
                                                     (int)g->Cg, (int)g->kh, (int)g->kw));
    KILN_CUDNN_CHECK(ctx, cudnnSetConvolution2dDescriptor(cu->dnn_conv, (int)g->ph, (int)g->pw,
                                                          (int)g->sh, (int)g->sw, (int)g->dh,
                                                          (int)g->dw, CUDNN_CROSS_CORRELATION,
                                                          CUDNN_DATA_FLOAT));
    KILN_CUDNN_CHECK(ctx, cudnnSetConvolutionGroupCount(cu->dnn_conv, (int)g->G));
    KILN_CUDNN_CHECK(ctx, cudnnSetConvolutionMathType(
                              cu->dnn_conv, dt == KILN_F32 && !cu->allow_tf32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
    KILN_CUDNN_CHECK(ctx, cudnnSetTensor4dDescriptor(cu->dnn_y, CUDNN_TENSOR_NCHW, t, (int)g->N,
                                                     (int)g->M, (int)g->OH, (int)g->OW));
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

/* The directions of a convolution, each with its own algorithms (key[23] of the cache). */
enum { DIR_FWD = 0, DIR_BWD_DATA = 1, DIR_BWD_FILTER = 2 };

/* The most workspace any algorithm of direction dir needs (descriptors set), up to the cap. */
static size_t most_workspace(kiln_cuda *cu, cudnnHandle_t h, int dir) {
    size_t most = 0;
    const int count = dir == DIR_FWD        ? CUDNN_CONVOLUTION_FWD_ALGO_COUNT
                      : dir == DIR_BWD_DATA ? CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
                                            : CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
    for (int a = 0; a < count; a++) {
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

/* Workspace of direction dir for the convolution of x by w giving y. */
static kiln_status workspace_for(kiln_cuda *cu, kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *w,
                                 const kiln_tensor *y, int dir, size_t *bytes) {
    kiln_context *ctx = c->kctx;
    *bytes = 0;
    conv_geo g;
    char why[256];
    if (!conv_geo_get(c, x, w, y, &g, why, sizeof why)) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s", why);
    cudnnHandle_t h;
    kiln_status st = kiln_cuda_dnn(cu, ctx, &h);
    if (st) return st;
    if ((st = set_descriptors(cu, ctx, &g, x->dtype)) != KILN_OK) return st;
    *bytes = pad_bytes(&g, x->dtype) + align256(most_workspace(cu, h, dir));
    return KILN_OK;
}

kiln_status kiln_cuda_ws_conv(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    return workspace_for(cu, c, c->in[0], c->in[1], c->out[0], DIR_FWD, bytes);
}

kiln_status kiln_cuda_ws_conv_grad_input(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    return workspace_for(cu, c, c->in[2], c->in[1], c->in[0], DIR_BWD_DATA, bytes);
}

kiln_status kiln_cuda_ws_conv_grad_weight(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    return workspace_for(cu, c, c->in[0], c->in[2], c->in[1], DIR_BWD_FILTER, bytes);
}

/* The largest power of two up to 16 dividing every address (tensor-core algorithms
 * want 16-byte alignment; an algorithm found for aligned buffers may refuse others). */
static int align_class(const void *a, const void *b, const void *c) {
    uintptr_t v = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c;
    int k = 16;
    while (k > 1 && v % (uintptr_t)k) k >>= 1;
    return k;
}

/* The cache key of a convolution: everything Find depends on. */
static void make_key(const conv_geo *g, kiln_dtype dt, size_t ws, int align, int dir, int key[24]) {
    memset(key, 0, 24 * sizeof(int));
    const int64_t v[] = {dt, g->N, g->C, g->H, g->W, g->M, g->Cg, g->G, g->kh, g->kw, g->sh,
                         g->sw, g->dh, g->dw, g->ph, g->pw, g->OH, g->OW};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) key[i] = (int)v[i];
    key[20] = (int)(ws & 0x7fffffff);
    key[21] = (int)((ws >> 31) & 0x7fffffff);
    key[22] = align;
    key[23] = dir;
}

static const kiln_conv_algo *find_cached(const kiln_cuda *cu, const int key[24]) {
    for (int i = 0; i < cu->n_conv_algos; i++)
        if (memcmp(cu->conv_algos[i].key, key, 24 * sizeof(int)) == 0) return &cu->conv_algos[i];
    return NULL;
}

/* One result of a Find call, whatever the direction. */
typedef struct found_algo {
    int algo, math;
    cudnnStatus_t status;
    size_t memory;
} found_algo;

/* Keep the fastest of the results (cuDNN sorts them by time) that ran, fits and respects
 * the precision rules, in the cache. */
static kiln_status store_pick(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, const found_algo *perf, int got,
                              size_t ws_bytes, const int key[24], const kiln_conv_algo **out) {
    int pick = -1;
    for (int i = 0; i < got && pick < 0; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > ws_bytes) continue;
        /* f32: no TF32 tensor-core algorithms unless allowed */
        if (dt == KILN_F32 && !cu->allow_tf32 && (perf[i].math == CUDNN_TENSOR_OP_MATH ||
                               perf[i].math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
            continue;
        pick = i;
    }
    if (pick < 0)
        return kiln_fail(ctx, KILN_ERR_DEVICE,
                         "cuDNN found no convolution algorithm (direction %d) for this shape within %zu bytes "
                         "of workspace (%d candidates)", key[23], ws_bytes, got);
    if (cu->n_conv_algos == cu->cap_conv_algos) {
        int cap = cu->cap_conv_algos ? 2 * cu->cap_conv_algos : 16;
        kiln_conv_algo *grown = realloc(cu->conv_algos, (size_t)cap * sizeof *grown);
        if (!grown) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for the conv algorithm cache");
        cu->conv_algos = grown;
        cu->cap_conv_algos = cap;
    }
    kiln_conv_algo *a = &cu->conv_algos[cu->n_conv_algos++];
    memcpy(a->key, key, sizeof a->key);
    a->algo = perf[pick].algo;
    a->math = dt == KILN_F32 && !cu->allow_tf32 ? (int)CUDNN_FMA_MATH : perf[pick].math;
    a->bytes = perf[pick].memory;
    *out = a;
    return KILN_OK;
}

/* Time the algorithms of direction dir on the real buffers (descriptors set) and cache
 * the choice. x, w, y: the data of dnn_x, dnn_w and dnn_y (the output of the direction
 * is overwritten). */
static kiln_status search(kiln_cuda *cu, kiln_context *ctx, cudnnHandle_t h, kiln_dtype dt, int dir,
                          void *x, void *w, void *y, void *ws, size_t ws_bytes, const int key[24],
                          const kiln_conv_algo **out) {
    found_algo found[16];
    int got = 0;
    if (dir == DIR_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        KILN_CUDNN_CHECK(ctx, cudnnFindConvolutionForwardAlgorithmEx(
                                  h, cu->dnn_x, x, cu->dnn_w, w, cu->dnn_conv, cu->dnn_y, y,
                                  CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf, ws, ws_bytes));
        for (int i = 0; i < got && i < 16; i++)
            found[i] = (found_algo){(int)perf[i].algo, (int)perf[i].mathType, perf[i].status, perf[i].memory};
    } else if (dir == DIR_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        KILN_CUDNN_CHECK(ctx, cudnnFindConvolutionBackwardDataAlgorithmEx(
                                  h, cu->dnn_w, w, cu->dnn_y, y, cu->dnn_conv, cu->dnn_x, x,
                                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf, ws, ws_bytes));
        for (int i = 0; i < got && i < 16; i++)
            found[i] = (found_algo){(int)perf[i].algo, (int)perf[i].mathType, perf[i].status, perf[i].memory};
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        KILN_CUDNN_CHECK(ctx, cudnnFindConvolutionBackwardFilterAlgorithmEx(
                                  h, cu->dnn_x, x, cu->dnn_y, y, cu->dnn_conv, cu->dnn_w, w,
                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf, ws, ws_bytes));
        for (int i = 0; i < got && i < 16; i++)
            found[i] = (found_algo){(int)perf[i].algo, (int)perf[i].mathType, perf[i].status, perf[i].memory};
    }
    return store_pick(cu, ctx, dt, found, got < 16 ? got : 16, ws_bytes, key, out);
}

/* Descriptors, handle and the cached (or found) algorithm of direction dir for the
 * convolution of x by w giving y; the data pointers are those cuDNN will see (x padded
 * when g->padded). */
static kiln_status prepare(kiln_cuda *cu, kiln_context *ctx, const conv_geo *g, kiln_dtype dt, int dir,
                           void *x, void *w, void *y, void *ws, size_t ws_bytes, cudnnHandle_t h,
                           const kiln_conv_algo **a) {
    int key[24];
    make_key(g, dt, ws_bytes, align_class(x, w, y), dir, key);
    *a = find_cached(cu, key);
    if (!*a) {
        kiln_status st = search(cu, ctx, h, dt, dir, x, w, y, ws_bytes ? ws : NULL, ws_bytes, key, a);
        if (st) return st;
    }
    KILN_CUDNN_CHECK(ctx, cudnnSetConvolutionMathType(cu->dnn_conv, (cudnnMathType_t)(*a)->math));
    return KILN_OK;
}

kiln_status kiln_cuda_k_conv(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_context *ctx = c->kctx;
    const kiln_tensor *x = c->in[0], *w = c->in[1]; // (N,C,[H,]W), (M,C/G,[kH,]kW)
    const kiln_tensor *b = c->n_in > 2 ? c->in[2] : NULL; // (M)
    kiln_tensor *y = c->out[0]; // (N,M,[OH,]OW)
    const kiln_dtype dt = x->dtype;
    conv_geo g;
    char why[256];
    if (!conv_geo_get(c, x, w, y, &g, why, sizeof why)) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s", why);
    cudnnHandle_t h;
    kiln_status st = kiln_cuda_dnn(cu, ctx, &h);
    if (st) return st;
    if ((st = set_descriptors(cu, ctx, &g, dt)) != KILN_OK) return st;

    const size_t pbytes = pad_bytes(&g, dt);
    if (c->workspace_size < pbytes || (pbytes && !c->workspace))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "Conv needs at least %zu bytes of workspace, got %zu",
                         pbytes, c->workspace_size);
    void *xin = x->data;
    if (g.padded) {
        st = kiln_cuda_pad_nchw(cu, ctx, dt, c->workspace, x->data, g.N, g.C, g.H0, g.W0, g.pt,
                                g.pb, g.pl, g.pr);
        if (st) return st;
        xin = c->workspace;
    }
    void *ws = (char *)c->workspace + pbytes;
    const size_t ws_bytes = c->workspace_size - pbytes;
    const kiln_conv_algo *a = NULL;
    if ((st = prepare(cu, ctx, &g, dt, DIR_FWD, xin, w->data, y->data, ws, ws_bytes, h, &a)) != KILN_OK)
        return st;
    const float one = 1.f, zero = 0.f; /* f32 scaling for every data type */
    KILN_CUDNN_CHECK(ctx, cudnnConvolutionForward(h, &one, cu->dnn_x, xin, cu->dnn_w, w->data,
                                                  cu->dnn_conv, (cudnnConvolutionFwdAlgo_t)a->algo,
                                                  a->bytes ? ws : NULL, a->bytes, &zero, cu->dnn_y,
                                                  y->data));
    /* cuDNN may leave a recoverable runtime error behind (it probes); the bias launch's
     * check must only see its own. Faults of earlier kernels are sticky and still show. */
    (void)cudaGetLastError();
    if (b) return kiln_cuda_add_channel_bias(cu, ctx, dt, y->data, b->data, g.N, g.M, g.OH * g.OW);
    return KILN_OK;
}

/* kiln.ConvGradInput(dY, W, X) -> dX, like X (whose values are not read). */
kiln_status kiln_cuda_k_conv_grad_input(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_context *ctx = c->kctx;
    const kiln_tensor *dy = c->in[0], *w = c->in[1], *x = c->in[2]; // (N,M,..), (M,C/G,..), (N,C,..)
    kiln_tensor *dx = c->out[0]; // like x
    const kiln_dtype dt = dy->dtype;
    conv_geo g;
    char why[256];
    if (!conv_geo_get(c, x, w, dy, &g, why, sizeof why)) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s", why);
    cudnnHandle_t h;
    kiln_status st = kiln_cuda_dnn(cu, ctx, &h);
    if (st) return st;
    if ((st = set_descriptors(cu, ctx, &g, dt)) != KILN_OK) return st;
    /* asymmetric pads: the gradient of the padded X, cropped afterwards */
    const size_t pbytes = pad_bytes(&g, dt);
    if (c->workspace_size < pbytes || (pbytes && !c->workspace))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "ConvGradInput needs at least %zu bytes of workspace, got %zu",
                         pbytes, c->workspace_size);
    void *dxout = g.padded ? c->workspace : dx->data;
    void *ws = (char *)c->workspace + pbytes;
    const size_t ws_bytes = c->workspace_size - pbytes;
    const kiln_conv_algo *a = NULL;
    if ((st = prepare(cu, ctx, &g, dt, DIR_BWD_DATA, dxout, w->data, dy->data, ws, ws_bytes, h, &a)) != KILN_OK)
        return st;
    const float one = 1.f, zero = 0.f;
    KILN_CUDNN_CHECK(ctx, cudnnConvolutionBackwardData(h, &one, cu->dnn_w, w->data, cu->dnn_y, dy->data,
                                                       cu->dnn_conv, (cudnnConvolutionBwdDataAlgo_t)a->algo,
                                                       a->bytes ? ws : NULL, a->bytes, &zero, cu->dnn_x, dxout));
    (void)cudaGetLastError();
    if (g.padded)
        return kiln_cuda_crop_nchw(cu, ctx, dt, dx->data, dxout, g.N, g.C, g.H0, g.W0, g.pt, g.pb, g.pl, g.pr);
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
    cudnnHandle_t h;
    kiln_status st = kiln_cuda_dnn(cu, ctx, &h);
    if (st) return st;
    if ((st = set_descriptors(cu, ctx, &g, dt)) != KILN_OK) return st;
    const size_t pbytes = pad_bytes(&g, dt);
    if (c->workspace_size < pbytes || (pbytes && !c->workspace))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "ConvGradWeight needs at least %zu bytes of workspace, got %zu",
                         pbytes, c->workspace_size);
    void *xin = x->data;
    if (g.padded) {
        st = kiln_cuda_pad_nchw(cu, ctx, dt, c->workspace, x->data, g.N, g.C, g.H0, g.W0, g.pt, g.pb, g.pl, g.pr);
        if (st) return st;
        xin = c->workspace;
    }
    void *ws = (char *)c->workspace + pbytes;
    const size_t ws_bytes = c->workspace_size - pbytes;
    const kiln_conv_algo *a = NULL;
    if ((st = prepare(cu, ctx, &g, dt, DIR_BWD_FILTER, xin, dw->data, dy->data, ws, ws_bytes, h, &a)) != KILN_OK)
        return st;
    const float one = 1.f, zero = 0.f;
    KILN_CUDNN_CHECK(ctx, cudnnConvolutionBackwardFilter(h, &one, cu->dnn_x, xin, cu->dnn_y, dy->data,
                                                         cu->dnn_conv, (cudnnConvolutionBwdFilterAlgo_t)a->algo,
                                                         a->bytes ? ws : NULL, a->bytes, &zero, cu->dnn_w,
                                                         dw->data));
    (void)cudaGetLastError();
    return KILN_OK;
}
