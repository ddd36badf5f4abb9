/*
 * cudnn_graph.c — cuDNN's graph (backend) API for what the legacy API cannot express:
 * a convolution with the per-channel sum and sum of squares of its output computed in its
 * epilogue (ConvolutionFwd -> Y -> GenStats(SUM_SQSUM)), for kiln.FusedConv's statistics
 * outputs (conv_stats.c; issue 12, the conv-bn-stats pass).
 *
 * Validated on an H100 (bench/NOTES.md "t7 / z6 results": every one of ResNet-50's 23
 * distinct problems had an engine, and timed, the graph won 22; the stem, 3 input channels,
 * 3.42 ms against 0.74, kept the statistics kernel; bench/cudnn_fusion_probe.c asks the same
 * standalone).
 *
 *   kiln_cuda_genstats_plan: at plan time, for one problem (2-D, NHWC, f16 / bf16 X, W, Y,
 *   one group, symmetric pads; f32 statistics and compute), the operation graph, cuDNN's
 *   heuristics (mode A, then FALLBACK), and the first engine configuration whose execution
 *   plan finalizes; its workspace size. Kept per problem on the kiln_cuda (a problem met
 *   again reuses it); a problem cuDNN refuses is kept too, with why.
 *   kiln_cuda_genstats_run: the plan on the node's buffers, on cu->stream. The sums are
 *   zeroed first on the same stream (cuDNN's GenStats may accumulate into its outputs;
 *   the probe checks whether it does), so either behaviour gives the sums of this Y. The
 *   variant pack (the buffers' addresses) is made the first time a node's buffers are met
 *   and kept (a plan's buffers do not move: replays make none).
 *
 *   KILN_GRAPH_CONV_FWD (conv.c's depthwise forwards): ConvolutionFwd alone, any groups, or
 *   with its epilogue (+ bias, then an activation) in the graph. cuDNN runs depthwise
 *   convolutions without a bias 2-4x faster through this API (its sm90 depthwise engines)
 *   than through the legacy one or kiln's own kernels (bench/NOTES.md "z10").
 *   KILN_GRAPH_CONV_DGRAD / _WGRAD (conv.c's gradients of grouped and depthwise
 *   convolutions): ConvolutionBwdData / ConvolutionBwdFilter alone, any groups; their first
 *   few plans timed like _CONV_FWD's.
 *
 * Every descriptor a plan needs stays alive with it (cuDNN's frontend keeps its graph's
 * descriptors alive too) and is destroyed by kiln_cuda_genstats_free.
 */
#include "cuda_internal.h"
#include "norm_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { U_X = 1, U_W, U_Y, U_SUM, U_SQ, U_SCALE, U_BIAS, U_V1, U_V2, U_V3 };
/* KILN_GRAPH_SDPA's tensors: Q, K, V, O, the scale */
enum { U_Q = 32, U_K, U_VV, U_O, U_ATTN_SCALE };

#define GS_MAX_DESC 96 /* one problem: 10 tensors, conv, 5 ops and 3 pointwise, graph, 2 heuristics and their configs (twice where a kept engine has no plan), the plans */
#define GS_MAX_PROBLEMS 96
#define GS_MAX_PACKS 256
#define GS_MAX_CFGS 16
#define GS_MAX_PLANS 4
/* of which made by runtime compilation (NVRTC: ~0.3 s a plan on an H100; efficientnet_b0's
 * 1x1 + bias + SiLU graphs: 4 plans in 1.0-1.4 s, and the first or second always won:
 * bench/NOTES.md "z15") */
#define GS_MAX_RTC_PLANS 2
/* _CONV_FWD / _DGRAD / _WGRAD plans needing more workspace are skipped (regnet's grouped 3x3: 1.8 GB for engine 45) */
#define GS_WS_CAP ((int64_t)512 << 20)

typedef struct kiln_genstats_problem {
    char key[200];
    bool ok;                        /* a plan finalized */
    cudnnBackendDescriptor_t plan;  /* when ok */
    int64_t ws;                     /* its workspace bytes */
    int64_t engine;                 /* its engine's global index (-1: unknown) */
    char why[200];                  /* when not ok: what refused it */
    int choice;                     /* KILN_GENSTATS_* (conv_stats.c's, timed at plan time) */
    double ms_graph, ms_fallback;   /* what the timing measured (0: not timed) */
    int kind;                       /* KILN_GRAPH_* */
    bool stats;                     /* GenStats in the graph (every _GENSTATS one; _PRO_FWD with stats) */
    bool sb16;                      /* prologue: a and k in X's 16-bit dtype (else f32) */
    bool epi;                       /* _CONV_FWD: the bias and activation in the graph */
    float sdpa_scale;               /* _SDPA: the scores' scale (a by-value tensor: the variant
                                     * pack points here, so it lives as long as the problem) */
    /* _CONV_FWD: the first GS_MAX_PLANS configurations whose plans finalize (heuristics' order),
     * timed on the first run with autotune (kiln_cuda_conv_graph_tune) and the fastest kept in
     * plan / ws / engine: the first one is not always fast (cuDNN's engine 0 ran a 1x1
     * convolution with a clipped ReLU 20x slower than cuBLASLt plus a pass) */
    cudnnBackendDescriptor_t plans[GS_MAX_PLANS];
    int64_t plan_ws[GS_MAX_PLANS], plan_engine[GS_MAX_PLANS];
    int n_plans;
    bool tuned;
    cudnnBackendDescriptor_t desc[GS_MAX_DESC];
    int n_desc;
} gs_problem;

typedef struct gs_pack {
    const gs_problem *p;
    void *ptr[8]; /* x, w, y, sum, sq, a, k, workspace */
    cudnnBackendDescriptor_t vp;
} gs_pack;

struct kiln_genstats_cache {
    gs_problem prob[GS_MAX_PROBLEMS];
    int n_prob;
    gs_pack pack[GS_MAX_PACKS];
    int n_pack, next_pack;
};

static const char *dnn_str(cudnnStatus_t s) { return cudnnGetErrorString(s); }

/* a new descriptor of type t, kept with p; NULL (and why set) on failure */
static cudnnBackendDescriptor_t mk(gs_problem *p, cudnnBackendDescriptorType_t t) {
    if (p->n_desc >= GS_MAX_DESC) {
        snprintf(p->why, sizeof p->why, "descriptor list full");
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    const cudnnStatus_t s = cudnnBackendCreateDescriptor(t, &d);
    if (s != CUDNN_STATUS_SUCCESS) {
        snprintf(p->why, sizeof p->why, "cudnnBackendCreateDescriptor(%d): %s", (int)t, dnn_str(s));
        return NULL;
    }
    p->desc[p->n_desc++] = d;
    return d;
}

/* set an attribute; false (and why) on failure */
static bool set(gs_problem *p, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                cudnnBackendAttributeType_t t, int64_t n, const void *v, const char *what) {
    const cudnnStatus_t s = cudnnBackendSetAttribute(d, a, t, n, v);
    if (s != CUDNN_STATUS_SUCCESS) snprintf(p->why, sizeof p->why, "%s: %s", what, dnn_str(s));
    return s == CUDNN_STATUS_SUCCESS;
}

static bool fin(gs_problem *p, cudnnBackendDescriptor_t d, const char *what) {
    const cudnnStatus_t s = cudnnBackendFinalize(d);
    if (s != CUDNN_STATUS_SUCCESS) snprintf(p->why, sizeof p->why, "%s does not finalize: %s", what, dnn_str(s));
    return s == CUDNN_STATUS_SUCCESS;
}

/* a tensor (d0, d1, d2, d3) in cuDNN's N,C,H,W order laid out channels-last (virtual: an
 * intermediate of the graph, never in memory) */
static cudnnBackendDescriptor_t tensor_v(gs_problem *p, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c, int64_t h,
                                         int64_t w, bool virt) {
    cudnnBackendDescriptor_t t = mk(p, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t dims[4] = {n, c, h, w}, str[4] = {c * h * w, 1, w * c, c}, align = 16;
    if (t && virt && !set(p, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual")) return NULL;
    if (!t || !set(p, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor dtype") ||
        !set(p, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims") ||
        !set(p, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str, "tensor strides") ||
        !set(p, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid") ||
        !set(p, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment") ||
        !fin(p, t, "a tensor descriptor"))
        return NULL;
    return t;
}

static cudnnBackendDescriptor_t tensor(gs_problem *p, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c, int64_t h,
                                       int64_t w) {
    return tensor_v(p, uid, dt, n, c, h, w, false);
}

/* y = mode(x [, b]) in f32 (a pointwise operation of the prologue); NULL on failure */
static cudnnBackendDescriptor_t pointwise(gs_problem *p, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y) {
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t pd = mk(p, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    if (!pd || !set(p, pd, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode") ||
        !set(p, pd, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f32, "pointwise precision") ||
        !fin(p, pd, "a pointwise descriptor"))
        return NULL;
    cudnnBackendDescriptor_t o = mk(p, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    if (!o || !set(p, o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pd, "pointwise op") ||
        !set(p, o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pointwise X") ||
        (b && !set(p, o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "pointwise B")) ||
        !set(p, o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pointwise Y") ||
        !fin(p, o, "a pointwise operation"))
        return NULL;
    return o;
}

/* y = act(x) for the _CONV_FWD epilogue: mode with RELU_FWD's clips or SWISH_FWD's beta 1 */
static cudnnBackendDescriptor_t pointwise_act(gs_problem *p, const kiln_genstats_geo *g, cudnnBackendDescriptor_t x,
                                              cudnnBackendDescriptor_t y) {
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    const cudnnPointwiseMode_t mode = (cudnnPointwiseMode_t)g->act_mode;
    const double beta = 1.0;
    cudnnBackendDescriptor_t pd = mk(p, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    if (!pd || !set(p, pd, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode") ||
        !set(p, pd, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f32, "pointwise precision") ||
        (mode == CUDNN_POINTWISE_RELU_FWD &&
         (!set(p, pd, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, 1, &g->clip_lo, "relu lower clip") ||
          !set(p, pd, CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_DOUBLE, 1, &g->clip_hi, "relu upper clip"))) ||
        (mode == CUDNN_POINTWISE_SWISH_FWD &&
         !set(p, pd, CUDNN_ATTR_POINTWISE_SWISH_BETA, CUDNN_TYPE_DOUBLE, 1, &beta, "swish beta")) ||
        !fin(p, pd, "an activation's pointwise descriptor"))
        return NULL;
    cudnnBackendDescriptor_t o = mk(p, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    if (!o || !set(p, o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pd, "pointwise op") ||
        !set(p, o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pointwise X") ||
        !set(p, o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pointwise Y") ||
        !fin(p, o, "the activation"))
        return NULL;
    return o;
}

/* host milliseconds (CLOCK_MONOTONIC): what planning a problem costs, for the stats notes */
static double host_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The kinds with any groups whose first GS_MAX_PLANS plans are kept and timed. */
static bool grouped_kind(int kind) {
    return kind == KILN_GRAPH_CONV_FWD || kind == KILN_GRAPH_CONV_DGRAD || kind == KILN_GRAPH_CONV_WGRAD;
}

/* The operation graph of g: X * W -> Y -> GenStats(Y) -> sum, sq (KILN_GRAPH_GENSTATS); with
 * the prologue X -> MUL a -> ADD k [-> RELU_FWD] (f32 virtual tensors, bench/cudnn_fusion_probe.c's
 * pattern c) into ConvFwd [-> GenStats] or (pattern f) ConvBwdFilter(X', dY) -> dW; a and k
 * in X's dtype when p->sb16 (the probe's variant 0, the one cuDNN 9 has engines for on
 * sm_90: the H100 found none for f32 a and k), else f32. */
static bool build_graph(gs_problem *p, cudnnHandle_t h, const kiln_genstats_geo *g, cudnnBackendDescriptor_t *opg) {
    const cudnnDataType_t dt = g->bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF, f32 = CUDNN_DATA_FLOAT;
    const bool pro = g->kind == KILN_GRAPH_PRO_FWD || g->kind == KILN_GRAPH_PRO_WGRAD;
    const bool wgrad = g->kind == KILN_GRAPH_PRO_WGRAD || g->kind == KILN_GRAPH_CONV_WGRAD;
    const bool dgrad = g->kind == KILN_GRAPH_CONV_DGRAD, epi = g->kind == KILN_GRAPH_CONV_FWD && g->epi;
    const bool stats = g->kind == KILN_GRAPH_GENSTATS || (g->kind == KILN_GRAPH_PRO_FWD && g->stats);
    const int64_t G = grouped_kind(g->kind) && g->G > 1 ? g->G : 1;
    cudnnBackendDescriptor_t ops[6];
    int n_ops = 0;
    cudnnBackendDescriptor_t x = tensor(p, U_X, dt, g->N, g->C, g->H, g->W);
    cudnnBackendDescriptor_t w = x ? tensor(p, U_W, dt, g->K, g->C / G, g->R, g->S) : NULL;
    cudnnBackendDescriptor_t y = w ? tensor(p, U_Y, dt, g->N, g->K, g->P, g->Q) : NULL;
    cudnnBackendDescriptor_t sum = y && stats ? tensor(p, U_SUM, f32, 1, g->K, 1, 1) : NULL;
    cudnnBackendDescriptor_t sq = sum ? tensor(p, U_SQ, f32, 1, g->K, 1, 1) : NULL;
    if (!y || (stats && !sq)) return false;
    /* with the epilogue: the convolution into f32 virtual tensors, + bias, then act into Y */
    cudnnBackendDescriptor_t yconv = y, ybias = NULL, bias = NULL;
    if (epi) {
        const bool act = g->act_mode >= 0;
        if (!(yconv = tensor_v(p, U_V1, f32, g->N, g->K, g->P, g->Q, true)) ||
            !(bias = tensor(p, U_BIAS, dt, 1, g->K, 1, 1)) ||
            !(ybias = act ? tensor_v(p, U_V2, f32, g->N, g->K, g->P, g->Q, true) : y))
            return false;
    }
    cudnnBackendDescriptor_t xin = x; /* what the convolution reads */
    if (pro) {
        const cudnnDataType_t sbt = p->sb16 ? dt : f32;
        cudnnBackendDescriptor_t a = tensor(p, U_SCALE, sbt, 1, g->C, 1, 1);
        cudnnBackendDescriptor_t k = a ? tensor(p, U_BIAS, sbt, 1, g->C, 1, 1) : NULL;
        cudnnBackendDescriptor_t t1 = k ? tensor_v(p, U_V1, f32, g->N, g->C, g->H, g->W, true) : NULL;
        cudnnBackendDescriptor_t t2 = t1 ? tensor_v(p, U_V2, f32, g->N, g->C, g->H, g->W, true) : NULL;
        cudnnBackendDescriptor_t t3 = t2 && g->relu ? tensor_v(p, U_V3, f32, g->N, g->C, g->H, g->W, true) : t2;
        if (!t3 || !(ops[n_ops++] = pointwise(p, CUDNN_POINTWISE_MUL, x, a, t1)) ||
            !(ops[n_ops++] = pointwise(p, CUDNN_POINTWISE_ADD, t1, k, t2)) ||
            (g->relu && !(ops[n_ops++] = pointwise(p, CUDNN_POINTWISE_RELU_FWD, t2, NULL, t3))))
            return false;
        xin = t3;
    }
    cudnnBackendDescriptor_t cd = mk(p, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t nd = 2, dil[2] = {g->dh, g->dw}, str[2] = {g->sh, g->sw}, pad[2] = {g->ph, g->pw};
    if (!cd || !set(p, cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "conv compute type") ||
        !set(p, cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "conv mode") ||
        !set(p, cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nd, "conv dims") ||
        !set(p, cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil, "conv dilations") ||
        !set(p, cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str, "conv strides") ||
        !set(p, cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad, "conv pads") ||
        !set(p, cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad, "conv pads") ||
        !fin(p, cd, "the convolution descriptor"))
        return false;
    /* the operation: alpha, beta, the convolution, then its three tensors */
    static const struct {
        cudnnBackendDescriptorType_t type;
        cudnnBackendAttributeName_t at[6];
        const char *what, *names[3];
    } kinds[3] = {
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
         {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
         "the convolution operation", {"conv X", "conv W", "conv Y"}},
        /* dX = ConvBwdData(W, dY): X's tensor is dX, Y's dY */
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
         {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
         "the data-gradient operation", {"dgrad W", "dgrad dX", "dgrad dY"}},
        /* pattern f and _WGRAD: dW = ConvBwdFilter(X', dY) */
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
         {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY},
         "the weight-gradient operation", {"wgrad X", "wgrad dW", "wgrad dY"}},
    };
    const int k = dgrad ? 1 : wgrad ? 2 : 0;
    const cudnnBackendDescriptor_t t[3][3] = {{xin, w, yconv}, {w, x, y}, {xin, w, y}};
    const float alpha = 1.f, beta = 0.f;
    cudnnBackendDescriptor_t cv = mk(p, kinds[k].type);
    if (!cv || !set(p, cv, kinds[k].at[0], CUDNN_TYPE_FLOAT, 1, &alpha, kinds[k].what) ||
        !set(p, cv, kinds[k].at[1], CUDNN_TYPE_FLOAT, 1, &beta, kinds[k].what) ||
        !set(p, cv, kinds[k].at[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd, kinds[k].what) ||
        !set(p, cv, kinds[k].at[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[k][0], kinds[k].names[0]) ||
        !set(p, cv, kinds[k].at[4], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[k][1], kinds[k].names[1]) ||
        !set(p, cv, kinds[k].at[5], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[k][2], kinds[k].names[2]) ||
        !fin(p, cv, kinds[k].what))
        return false;
    ops[n_ops++] = cv;
    if (epi) {
        if (!(ops[n_ops++] = pointwise(p, CUDNN_POINTWISE_ADD, yconv, bias, ybias))) return false;
        if (g->act_mode >= 0 && !(ops[n_ops++] = pointwise_act(p, g, ybias, y))) return false;
    }
    if (stats) {
        cudnnBackendDescriptor_t gs = mk(p, CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
        const cudnnGenStatsMode_t gm = CUDNN_GENSTATS_SUM_SQSUM;
        if (!gs || !set(p, gs, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &gm, "genstats mode") ||
            !set(p, gs, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f32, "genstats precision") ||
            !set(p, gs, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "genstats X") ||
            !set(p, gs, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum, "genstats sum") ||
            !set(p, gs, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sq, "genstats sq") ||
            !fin(p, gs, "the GenStats operation"))
            return false;
        ops[n_ops++] = gs;
    }
    *opg = mk(p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    return *opg && set(p, *opg, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, ops, "graph ops") &&
           set(p, *opg, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle") &&
           fin(p, *opg, "the operation graph");
}

/* Engine configurations by heuristics mode; the number found (0 with why set when none). */
static int heuristics(gs_problem *p, cudnnBackendDescriptor_t opg, cudnnBackendHeurMode_t mode,
                      cudnnBackendDescriptor_t *cfgs, int max) {
    cudnnBackendDescriptor_t hd = mk(p, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    int64_t cnt = 0, got = 0;
    if (!hd || !set(p, hd, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &opg, "heuristics graph") ||
        !set(p, hd, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode") ||
        !fin(p, hd, "the heuristics"))
        return 0;
    cudnnStatus_t s = cudnnBackendGetAttribute(hd, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &cnt, NULL);
    if (s != CUDNN_STATUS_SUCCESS) {
        snprintf(p->why, sizeof p->why, "heuristics results: %s", dnn_str(s));
        return 0;
    }
    if (cnt > max) cnt = max;
    for (int64_t i = 0; i < cnt; i++)
        if (!(cfgs[i] = mk(p, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))) return 0;
    if (cnt > 0 && (s = cudnnBackendGetAttribute(hd, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, cnt,
                                                 &got, cfgs)) != CUDNN_STATUS_SUCCESS) {
        snprintf(p->why, sizeof p->why, "heuristics results: %s", dnn_str(s));
        return 0;
    }
    if (got == 0) snprintf(p->why, sizeof p->why, "cuDNN's heuristics (mode %d) found no engine for the graph", (int)mode);
    return (int)got;
}

static int64_t engine_index(cudnnBackendDescriptor_t cfg) {
    cudnnBackendDescriptor_t e = NULL;
    int64_t cnt = 0, idx = -1;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e) != CUDNN_STATUS_SUCCESS) return -1;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &e) ==
        CUDNN_STATUS_SUCCESS)
        cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &idx);
    cudnnBackendDestroyDescriptor(e);
    return idx;
}

/* Whether cfg's engine compiles its kernel at run time (NVRTC) when its plan finalizes. */
static bool runtime_compiled(cudnnBackendDescriptor_t cfg) {
    cudnnBackendDescriptor_t e = NULL;
    cudnnBackendBehaviorNote_t notes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    int64_t cnt = 0;
    bool rtc = false;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e) != CUDNN_STATUS_SUCCESS) return false;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &e) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &cnt, notes) == CUDNN_STATUS_SUCCESS)
        for (int64_t k = 0; k < cnt && k < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; k++)
            rtc |= notes[k] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    cudnnBackendDestroyDescriptor(e);
    return rtc;
}

/* The first configuration (of mode A's, then FALLBACK's) whose plan finalizes; _CONV_FWD,
 * _DGRAD and _WGRAD keep up to GS_MAX_PLANS of them (GS_MAX_RTC_PLANS runtime-compiled) to
 * time, or only engine `only`'s first (>= 0: the one timed fastest by an earlier process). */
static void choose_plan(gs_problem *p, cudnnHandle_t h, cudnnBackendDescriptor_t opg, int64_t only) {
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    char first[200] = "";
    const int want = grouped_kind(p->kind) && only < 0 ? GS_MAX_PLANS : 1;
    int rtc = 0;
    for (int m = 0; m < 2 && p->n_plans < want; m++) {
        cudnnBackendDescriptor_t cfgs[GS_MAX_CFGS / 2];
        const int n = heuristics(p, opg, modes[m], cfgs, GS_MAX_CFGS / 2);
        if (!n && !first[0]) snprintf(first, sizeof first, "%s", p->why);
        for (int i = 0; i < n && p->n_plans < want; i++) {
            if (only >= 0 && engine_index(cfgs[i]) != only) continue;
            const bool compiled = want > 1 && runtime_compiled(cfgs[i]);
            if (compiled && rtc >= GS_MAX_RTC_PLANS) continue;
            /* plans that do not finalize are destroyed at once (the list stays short) */
            cudnnBackendDescriptor_t plan = NULL;
            cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
            int64_t cnt = 0, ws = 0;
            if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
            if (s == CUDNN_STATUS_SUCCESS)
                s = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                             &cfgs[i]);
            if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(plan);
            if (s == CUDNN_STATUS_SUCCESS)
                s = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, &ws);
            if (s != CUDNN_STATUS_SUCCESS) {
                if (!first[0])
                    snprintf(first, sizeof first, "engine %lld's plan does not finalize: %s", (long long)engine_index(cfgs[i]),
                             dnn_str(s));
                if (plan) cudnnBackendDestroyDescriptor(plan);
                continue;
            }
            /* as the legacy API's algorithms (conv.c's CONV_WS_CAP); the statistics and prologue
             * graphs, validated on ResNet-50 with the plan they first finalize, keep it */
            if (grouped_kind(p->kind) && ws > GS_WS_CAP) {
                if (!first[0])
                    snprintf(first, sizeof first, "engine %lld's plan needs %lld bytes of workspace",
                             (long long)engine_index(cfgs[i]), (long long)ws);
                cudnnBackendDestroyDescriptor(plan);
                continue;
            }
            if (p->n_desc >= GS_MAX_DESC) {
                cudnnBackendDestroyDescriptor(plan);
                snprintf(first, sizeof first, "descriptor list full");
                break;
            }
            const int64_t eng = engine_index(cfgs[i]);
            bool seen = false; /* the fallback list repeats engines of mode A's */
            for (int k = 0; k < p->n_plans; k++) seen |= p->plan_engine[k] == eng && eng >= 0;
            if (seen) {
                cudnnBackendDestroyDescriptor(plan);
                continue;
            }
            rtc += compiled;
            p->desc[p->n_desc++] = plan;
            p->plans[p->n_plans] = plan;
            p->plan_ws[p->n_plans] = ws;
            p->plan_engine[p->n_plans++] = eng;
            if (!p->ok) {
                p->plan = plan;
                p->ws = ws;
                p->engine = eng;
                p->ok = true;
            }
        }
    }
    if (!p->ok) snprintf(p->why, sizeof p->why, "%s", first[0] ? first : "no engine configuration");
}

static void problem_clear(gs_problem *p) {
    while (p->n_desc > 0) cudnnBackendDestroyDescriptor(p->desc[--p->n_desc]);
    p->ok = false;
    p->plan = NULL;
    p->n_plans = 0;
}

/* The algorithm cache's key of p's fastest plan. */
static void plan_key(const gs_problem *p, char *key, size_t n) { snprintf(key, n, "graph-plan %s", p->key); }

static void geo_key(const kiln_genstats_geo *g, char *key, size_t n) {
    static const char *const kinds[6] = {"", "prologue conv ", "prologue wgrad ", "conv ", "dgrad ", "wgrad "};
    char extra[96] = "";
    if (grouped_kind(g->kind))
        snprintf(extra, sizeof extra, "G%lld %s%d,%g,%g ", (long long)(g->G > 1 ? g->G : 1), g->epi ? "epi " : "",
                 g->epi ? g->act_mode : -1, g->epi ? g->clip_lo : 0.0, g->epi ? g->clip_hi : 0.0);
    snprintf(key, n, "%s%s%s%s%s N%lld C%lld H%lld W%lld K%lld R%lld S%lld P%lld Q%lld s%lld,%lld d%lld,%lld p%lld,%lld",
             kinds[g->kind >= 0 && g->kind < 6 ? g->kind : 0], extra, g->kind == KILN_GRAPH_PRO_FWD && g->stats ? "stats " : "",
             (g->kind == KILN_GRAPH_PRO_FWD || g->kind == KILN_GRAPH_PRO_WGRAD) && g->relu ? "relu " : "", g->bf16 ? "bf16" : "f16", (long long)g->N, (long long)g->C, (long long)g->H, (long long)g->W,
             (long long)g->K, (long long)g->R, (long long)g->S, (long long)g->P, (long long)g->Q, (long long)g->sh,
             (long long)g->sw, (long long)g->dh, (long long)g->dw, (long long)g->ph, (long long)g->pw);
}

/* The problem of key kept on cu (*found), or with build a new one (*fresh: zeroed, its key
 * set, engine unknown) where there is room; neither: *found and *fresh NULL. */
static kiln_status problem_slot(kiln_cuda *cu, kiln_context *ctx, const char *key, bool build, gs_problem **found,
                                gs_problem **fresh) {
    *found = *fresh = NULL;
    if (!cu->genstats) {
        cu->genstats = calloc(1, sizeof *cu->genstats);
        if (!cu->genstats) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for cuDNN graph plans");
    }
    struct kiln_genstats_cache *gc = cu->genstats;
    for (int i = 0; i < gc->n_prob; i++)
        if (strcmp(gc->prob[i].key, key) == 0) {
            *found = &gc->prob[i];
            return KILN_OK;
        }
    if (!build || gc->n_prob >= GS_MAX_PROBLEMS) return KILN_OK; /* none: the fallback runs it */
    gs_problem *p = &gc->prob[gc->n_prob++];
    memset(p, 0, sizeof *p);
    snprintf(p->key, sizeof p->key, "%s", key);
    p->engine = -1;
    *fresh = p;
    return KILN_OK;
}

/* A problem cuDNN refused keeps the answer, not the descriptors. */
static void keep_refusal(gs_problem *p) {
    if (p->ok) return;
    char why[200];
    snprintf(why, sizeof why, "%s", p->why);
    problem_clear(p);
    snprintf(p->why, sizeof p->why, "%s", why);
}

kiln_status kiln_cuda_genstats_plan(kiln_cuda *cu, kiln_context *ctx, const kiln_genstats_geo *g, bool build,
                                    struct kiln_genstats_problem **out) {
    char key[200];
    geo_key(g, key, sizeof key);
    gs_problem *p = NULL;
    kiln_status st = problem_slot(cu, ctx, key, build, out, &p);
    if (st || !p) return st;
    p->kind = g->kind;
    p->stats = g->kind == KILN_GRAPH_GENSTATS || (g->kind == KILN_GRAPH_PRO_FWD && g->stats);
    p->epi = g->kind == KILN_GRAPH_CONV_FWD && g->epi;
    cudnnHandle_t h;
    st = kiln_cuda_dnn(cu, ctx, &h);
    if (st) return st;
    cudnnBackendDescriptor_t opg = NULL;
    const double t0 = host_ms();
    /* a prologue: a and k in X's dtype first, then f32 (the descriptors of a refused try go) */
    p->sb16 = g->kind == KILN_GRAPH_PRO_FWD || g->kind == KILN_GRAPH_PRO_WGRAD;
    /* the engine an earlier process timed fastest (kiln_cuda_conv_graph_tune), alone */
    char pk[KILN_ALGO_KEY];
    plan_key(p, pk, sizeof pk);
    const kiln_algo_entry *kept = grouped_kind(p->kind) ? kiln_algo_cache_find(cu->algos, cu->n_algos, pk) : NULL;
    const bool built = build_graph(p, h, g, &opg);
    if (built && kept) {
        choose_plan(p, h, opg, kept->algo);
        p->tuned = p->ok;
        if (p->ok) cu->stats.graph_plans_kept++;
    }
    if (built && !p->ok) choose_plan(p, h, opg, -1);
    if (!p->ok && p->sb16) {
        char why16[200];
        snprintf(why16, sizeof why16, "%s", p->why);
        problem_clear(p);
        p->sb16 = false;
        opg = NULL;
        if (build_graph(p, h, g, &opg)) choose_plan(p, h, opg, -1);
        if (!p->ok) {
            char why32[200];
            snprintf(why32, sizeof why32, "%s", p->why);
            snprintf(p->why, sizeof p->why, "a, k %s: %.80s; f32: %.80s", g->bf16 ? "bf16" : "f16", why16, why32);
        }
    }
    kiln_cuda_conv_stats_note(ctx, "cuDNN %s for %s: %s%s (engine %lld, workspace %lld B%s; %d plans in %.0f ms%s)",
                              g->kind == KILN_GRAPH_GENSTATS    ? "ConvolutionFwd -> GenStats"
                              : g->kind == KILN_GRAPH_PRO_FWD   ? "prologue -> ConvolutionFwd"
                              : g->kind == KILN_GRAPH_CONV_FWD ? (g->epi ? "ConvolutionFwd -> bias -> activation"
                                                                         : "ConvolutionFwd")
                              : g->kind == KILN_GRAPH_CONV_DGRAD ? "ConvolutionBwdData"
                              : g->kind == KILN_GRAPH_CONV_WGRAD ? "ConvolutionBwdFilter"
                                                                 : "prologue -> ConvolutionBwdFilter",
                              key,
                              p->ok ? "plan ok" : "no plan: ", p->ok ? "" : p->why, (long long)p->engine,
                              (long long)p->ws,
                              !p->ok || g->kind == KILN_GRAPH_GENSTATS || grouped_kind(g->kind) ? "" : p->sb16 ? ", a and k 16-bit" : ", a and k f32",
                              p->n_plans, host_ms() - t0, p->tuned ? ", the engine timed fastest before" : "");
    keep_refusal(p);
    *out = p;
    return KILN_OK;
}

bool kiln_cuda_prologue_graph_sb16(const struct kiln_genstats_problem *p) { return p && p->ok && p->sb16; }

bool kiln_cuda_genstats_ok(const struct kiln_genstats_problem *p, size_t *ws, const char **why) {
    if (ws) { /* before the timing: the most any kept plan needs */
        int64_t most = p && p->ok ? p->ws : 0;
        for (int k = 0; p && p->ok && !p->tuned && k < p->n_plans; k++)
            if (p->plan_ws[k] > most) most = p->plan_ws[k];
        *ws = (size_t)most;
    }
    if (why) *why = !p ? "no room for another cuDNN graph plan" : p->ok ? "" : p->why;
    return p && p->ok;
}

/* The variant pack of p on the buffers ptr (8 slots: the last the workspace; n of them bound
 * to uids as dp), made the first time these buffers are met and kept (a plan's buffers do not
 * move: replays find it). */
static kiln_status variant_pack(kiln_cuda *cu, kiln_context *ctx, const gs_problem *p, void *const ptr[8], int n,
                                const int64_t *uids, void *const *dp, cudnnBackendDescriptor_t *out) {
    struct kiln_genstats_cache *gc = cu->genstats;
    for (int i = 0; i < gc->n_pack; i++)
        if (gc->pack[i].p == p && memcmp(gc->pack[i].ptr, ptr, sizeof gc->pack[i].ptr) == 0) {
            *out = gc->pack[i].vp;
            return KILN_OK;
        }
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, dp);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ptr[7]);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(vp);
    if (s != CUDNN_STATUS_SUCCESS) {
        if (vp) cudnnBackendDestroyDescriptor(vp);
        return kiln_fail(ctx, KILN_ERR_DEVICE, "cuDNN graph: the variant pack: %s", dnn_str(s));
    }
    gs_pack *slot = &gc->pack[gc->n_pack < GS_MAX_PACKS ? gc->n_pack++ : gc->next_pack++ % GS_MAX_PACKS];
    if (slot->vp) cudnnBackendDestroyDescriptor(slot->vp);
    slot->p = p;
    memcpy(slot->ptr, ptr, sizeof slot->ptr);
    slot->vp = vp;
    *out = vp;
    return KILN_OK;
}

/* The plan of p on x, w, y, [sum, sq,] [a, k]: the variant pack of these buffers (made once)
 * and cudnnBackendExecute on cu->stream; the sums zeroed first. */
static kiln_status graph_run(kiln_cuda *cu, kiln_context *ctx, const struct kiln_genstats_problem *p, const void *x,
                             void *w, void *y, float *sum, float *sq, const void *a, const void *k, int64_t K, void *ws,
                             size_t ws_size) {
    if (!p || !p->ok) return kiln_fail(ctx, KILN_ERR_INTERNAL, "cuDNN graph: no plan for this convolution");
    if ((size_t)p->ws > ws_size || (p->ws > 0 && !ws))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "cuDNN graph: the plan needs %lld bytes of workspace, got %zu",
                         (long long)p->ws, ws_size);
    void *ptr[8] = {(void *)x, w, y, sum, sq, (void *)a, (void *)k, p->ws > 0 ? ws : NULL};
    int64_t uids[7] = {U_X, U_W, U_Y};
    void *dp[7] = {ptr[0], ptr[1], ptr[2]};
    int n = 3;
    if (p->stats) {
        uids[n] = U_SUM, dp[n++] = ptr[3];
        uids[n] = U_SQ, dp[n++] = ptr[4];
    }
    if (p->kind == KILN_GRAPH_PRO_FWD || p->kind == KILN_GRAPH_PRO_WGRAD) {
        uids[n] = U_SCALE, dp[n++] = ptr[5];
        uids[n] = U_BIAS, dp[n++] = ptr[6];
    } else if (p->epi) {
        uids[n] = U_BIAS, dp[n++] = ptr[6];
    }
    cudnnBackendDescriptor_t vp = NULL;
    kiln_status vs = variant_pack(cu, ctx, p, ptr, n, uids, dp, &vp);
    if (vs) return vs;
    cudnnHandle_t h;
    kiln_status st = kiln_cuda_dnn(cu, ctx, &h);
    if (st) return st;
    if (p->stats) { /* GenStats may add into its outputs: start them at zero, in stream order */
        st = kiln_cuda_zero_pair(cu, ctx, sum, sq, K);
        if (st) return st;
    }
    KILN_CUDNN_CHECK(ctx, cudnnBackendExecute(h, p->plan, vp));
    return KILN_OK;
}

/* ------------------------------------------------------------------ scaled-dot-product attention */

/* a 4-D tensor of dims / strides as given (virtual: never in memory; by_value: a host scalar
 * the variant pack points at) */
static cudnnBackendDescriptor_t tensor4(gs_problem *p, int64_t uid, cudnnDataType_t dt, const int64_t dims[4],
                                        const int64_t str[4], bool virt, bool by_value) {
    cudnnBackendDescriptor_t t = mk(p, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t align = by_value ? 4 : 16;
    if (t && virt && !set(p, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual")) return NULL;
    if (t && by_value && !set(p, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by value"))
        return NULL;
    if (!t || !set(p, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor dtype") ||
        !set(p, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims") ||
        !set(p, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str, "tensor strides") ||
        !set(p, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid") ||
        !set(p, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment") ||
        !fin(p, t, "a tensor descriptor"))
        return NULL;
    return t;
}

/* cuDNN 9.13.1's SDPA operation (what cuDNN's frontend makes of its SDPA node where the
 * library has it: the "unified" implementation): Q (b, h, lq, d), K (b, h, lk, d), V, O and
 * the scale as a by-value scalar; no statistics output (inference). */
static bool build_sdpa_unified(gs_problem *p, cudnnHandle_t h, const kiln_sdpa_geo *g, cudnnBackendDescriptor_t *opg) {
#if CUDNN_VERSION >= 91301
    const cudnnDataType_t dt = g->bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF, f32 = CUDNN_DATA_FLOAT;
    const int64_t dq[4] = {g->b, g->h, g->lq, g->d}, sq[4] = {g->sq[0], g->sq[1], g->sq[2], 1};
    const int64_t dk[4] = {g->b, g->h, g->lk, g->d}, sk[4] = {g->sk[0], g->sk[1], g->sk[2], 1};
    const int64_t dv[4] = {g->b, g->h, g->lk, g->dv}, sv[4] = {g->sv[0], g->sv[1], g->sv[2], 1};
    const int64_t dO[4] = {g->b, g->h, g->lq, g->dv}, sO[4] = {g->so[0], g->so[1], g->so[2], 1};
    const int64_t d1[4] = {1, 1, 1, 1};
    p->sdpa_scale = g->scale;
    cudnnBackendDescriptor_t q = tensor4(p, U_Q, dt, dq, sq, false, false);
    cudnnBackendDescriptor_t k = q ? tensor4(p, U_K, dt, dk, sk, false, false) : NULL;
    cudnnBackendDescriptor_t v = k ? tensor4(p, U_VV, dt, dv, sv, false, false) : NULL;
    cudnnBackendDescriptor_t o = v ? tensor4(p, U_O, dt, dO, sO, false, false) : NULL;
    cudnnBackendDescriptor_t sc = o ? tensor4(p, U_ATTN_SCALE, f32, d1, d1, false, true) : NULL;
    cudnnBackendDescriptor_t op = sc ? mk(p, CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR) : NULL;
    if (!op || !set(p, op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &q, "SDPA Q") ||
        !set(p, op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k, "SDPA K") ||
        !set(p, op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, "SDPA V") ||
        !set(p, op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o, "SDPA O") ||
        !set(p, op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sc, "SDPA scale") ||
        !fin(p, op, "the SDPA operation"))
        return false;
    *opg = mk(p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    return *opg && set(p, *opg, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op, "graph ops") &&
           set(p, *opg, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle") &&
           fin(p, *opg, "the attention graph");
#else
    (void)h, (void)g, (void)opg;
    snprintf(p->why, sizeof p->why, "built against cuDNN headers older than 9.13.1 (no SDPA operation)");
    return false;
#endif
}

void kiln_cuda_sdpa_key_of(const kiln_sdpa_geo *g, char *key, size_t n) {
    snprintf(key, n,
             "sdpa %s b%lld h%lld lq%lld lk%lld d%lld dv%lld q%lld,%lld,%lld k%lld,%lld,%lld v%lld,%lld,%lld "
             "o%lld,%lld,%lld s%.9g",
             g->bf16 ? "bf16" : "f16", (long long)g->b, (long long)g->h, (long long)g->lq, (long long)g->lk,
             (long long)g->d, (long long)g->dv, (long long)g->sq[0], (long long)g->sq[1], (long long)g->sq[2],
             (long long)g->sk[0], (long long)g->sk[1], (long long)g->sk[2], (long long)g->sv[0], (long long)g->sv[1],
             (long long)g->sv[2], (long long)g->so[0], (long long)g->so[1], (long long)g->so[2], (double)g->scale);
}

kiln_status kiln_cuda_sdpa_plan(kiln_cuda *cu, kiln_context *ctx, const kiln_sdpa_geo *g, bool build,
                                struct kiln_genstats_problem **out) {
    char key[KILN_SDPA_KEY];
    kiln_cuda_sdpa_key_of(g, key, sizeof key);
    gs_problem *p = NULL;
    kiln_status st = problem_slot(cu, ctx, key, build, out, &p);
    if (st || !p) return st;
    p->kind = KILN_GRAPH_SDPA;
    cudnnHandle_t h;
    st = kiln_cuda_dnn(cu, ctx, &h);
    if (st) return st;
    cudnnBackendDescriptor_t opg = NULL;
    const double t0 = host_ms();
    /* cuDNN's SDPA operation (cuDNN 9.13.1 and later). The graph of single operations that
     * cuDNN's frontend builds for older libraries (matmul, scale, max / sub / exp / sum / div,
     * matmul) was tried first: cuDNN 9.19 found no engine for it on an H200, for any shape of
     * the op sweep (bench/NOTES.md z39), so it is not kept; older libraries run kiln's kernels. */
    if (cudnnGetVersion() < 91301)
        snprintf(p->why, sizeof p->why, "cuDNN %zu has no SDPA operation (9.13.1 and later)", cudnnGetVersion());
    else if (build_sdpa_unified(p, h, g, &opg))
        choose_plan(p, h, opg, -1);
    kiln_cuda_conv_stats_note(ctx, "cuDNN fused attention (cuDNN %zu) for %s: %s%s (engine %lld, workspace %lld B; %.0f ms)",
                              cudnnGetVersion(), key, p->ok ? "plan ok" : "no plan: ", p->ok ? "" : p->why,
                              (long long)p->engine, (long long)p->ws, host_ms() - t0);
    keep_refusal(p);
    *out = p;
    return KILN_OK;
}

const char *kiln_cuda_sdpa_key(const struct kiln_genstats_problem *p) { return p->key; }

kiln_status kiln_cuda_sdpa_run(kiln_cuda *cu, kiln_context *ctx, const struct kiln_genstats_problem *p, const void *q,
                               const void *k, const void *v, void *o, void *ws, size_t ws_size) {
    if (!p || !p->ok || p->kind != KILN_GRAPH_SDPA)
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "cuDNN fused attention: no plan for this problem");
    if ((size_t)p->ws > ws_size || (p->ws > 0 && !ws))
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "cuDNN fused attention: the plan needs %lld bytes of workspace, got %zu",
                         (long long)p->ws, ws_size);
    void *ptr[8] = {(void *)q, (void *)k, (void *)v, o, NULL, NULL, NULL, p->ws > 0 ? ws : NULL};
    const int64_t uids[5] = {U_Q, U_K, U_VV, U_O, U_ATTN_SCALE};
    void *const dp[5] = {ptr[0], ptr[1], ptr[2], ptr[3], (void *)&p->sdpa_scale};
    cudnnBackendDescriptor_t vp = NULL;
    kiln_status vs = variant_pack(cu, ctx, p, ptr, 5, uids, dp, &vp);
    if (vs) return vs;
    cudnnHandle_t h;
    kiln_status st = kiln_cuda_dnn(cu, ctx, &h);
    if (st) return st;
    KILN_CUDNN_CHECK(ctx, cudnnBackendExecute(h, p->plan, vp));
    return KILN_OK;
}

kiln_status kiln_cuda_genstats_run(kiln_cuda *cu, kiln_context *ctx, const struct kiln_genstats_problem *p, const void *x,
                                   const void *w, void *y, float *sum, float *sq, int64_t K, void *ws, size_t ws_size) {
    return graph_run(cu, ctx, p, x, (void *)w, y, sum, sq, NULL, NULL, K, ws, ws_size);
}

kiln_status kiln_cuda_prologue_graph_run(kiln_cuda *cu, kiln_context *ctx, const struct kiln_genstats_problem *p,
                                         const void *x, void *w, void *y, const void *a, const void *k, float *sum,
                                         float *sq, int64_t K, void *ws, size_t ws_size) {
    return graph_run(cu, ctx, p, x, w, y, sum, sq, a, k, K, ws, ws_size);
}

kiln_status kiln_cuda_conv_graph_run(kiln_cuda *cu, kiln_context *ctx, const struct kiln_genstats_problem *p,
                                     const void *x, const void *w, void *y, const void *bias, void *ws, size_t ws_size) {
    return graph_run(cu, ctx, p, x, (void *)w, y, NULL, NULL, NULL, bias, 0, ws, ws_size);
}

kiln_status kiln_cuda_conv_graph_tune(kiln_cuda *cu, kiln_context *ctx, struct kiln_genstats_problem *p, const void *x,
                                      const void *w, void *y, const void *bias, void *ws, size_t ws_size) {
    if (!p || !p->ok || p->tuned) return KILN_OK;
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(cu->stream, &cap);
    if (cap != cudaStreamCaptureStatusNone) return KILN_OK; /* a plan's first run is eager: it tunes there */
    p->tuned = true;
    if (p->n_plans < 2) return KILN_OK;
    cudaEvent_t ev[2] = {NULL, NULL};
    if (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess) {
        for (int k = 0; k < 2; k++)
            if (ev[k]) cudaEventDestroy(ev[k]);
        return kiln_fail(ctx, KILN_ERR_DEVICE, "cudaEventCreate failed");
    }
    float best = INFINITY;
    int pick = 0;
    kiln_status st = KILN_OK;
    char times[160] = "";
    const double t0 = host_ms();
    for (int k = 0; k < p->n_plans && !st; k++) {
        if ((size_t)p->plan_ws[k] > ws_size || (p->plan_ws[k] && !ws)) continue;
        p->plan = p->plans[k];
        p->ws = p->plan_ws[k];
        float t = INFINITY;
        for (int r = 0; r < 3 && !st; r++) { /* one warm-up, then the best of two */
            float e = 0.f;
            if (cudaEventRecord(ev[0], cu->stream) != cudaSuccess)
                st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaEventRecord failed");
            if (!st) st = graph_run(cu, ctx, p, x, (void *)w, y, NULL, NULL, NULL, bias, 0, ws, ws_size);
            if (!st && (cudaEventRecord(ev[1], cu->stream) != cudaSuccess || cudaEventSynchronize(ev[1]) != cudaSuccess ||
                        cudaEventElapsedTime(&e, ev[0], ev[1]) != cudaSuccess))
                st = kiln_fail(ctx, KILN_ERR_DEVICE, "timing a cuDNN graph plan failed");
            if (!st && r > 0 && e < t) t = e;
            /* an engine far slower than the best so far (regnet's epilogue graph on engine 0:
             * 383 ms against 1.7) is not run again */
            if (!st && r == 0 && e > 4.f * best) {
                t = e;
                break;
            }
        }
        const size_t at = strlen(times);
        snprintf(times + at, sizeof times - at, "%s%lld %.3f", k ? ", " : "", (long long)p->plan_engine[k], t);
        if (t < best) {
            best = t;
            pick = k;
        }
    }
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    p->plan = p->plans[pick];
    p->ws = p->plan_ws[pick];
    p->engine = p->plan_engine[pick];
    if (st) return st;
    kiln_cuda_conv_stats_note(ctx, "%s: engines timed (ms) %s: engine %lld (%.0f ms in all)", p->key, times,
                              (long long)p->engine, host_ms() - t0);
    if (p->engine < 0 || !isfinite(best)) return KILN_OK;
    /* kept with the algorithm choices (on the disk too): the next process makes this plan alone */
    kiln_algo_entry e;
    memset(&e, 0, sizeof e);
    plan_key(p, e.key, sizeof e.key);
    e.algo = (int)p->engine;
    e.ms = best;
    e.bytes = (size_t)p->ws;
    e.fused = -1;
    if (!kiln_algo_cache_put(&cu->algos, &cu->n_algos, &cu->cap_algos, &e))
        return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for the convolution algorithm cache");
    if (cu->algo_path[0] && kiln_algo_cache_store(cu->algo_path, cu->algo_prefix, &e) == 0) cu->stats.algos_written++;
    return KILN_OK;
}

int *kiln_cuda_genstats_choice(struct kiln_genstats_problem *p, double **ms) {
    *ms = &p->ms_graph; /* ms_graph, ms_fallback */
    return &p->choice;
}

void kiln_cuda_genstats_free(kiln_cuda *cu) {
    struct kiln_genstats_cache *gc = cu->genstats;
    if (!gc) return;
    for (int i = 0; i < gc->n_pack; i++)
        if (gc->pack[i].vp) cudnnBackendDestroyDescriptor(gc->pack[i].vp);
    for (int i = 0; i < gc->n_prob; i++) problem_clear(&gc->prob[i]);
    free(gc);
    cu->genstats = NULL;
}
