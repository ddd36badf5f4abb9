/*
 * conv_stats.c — kiln.FusedConv with its statistics outputs 1 and 2 (the per-channel sum and
 * sum of squares of Y as written; f32 for an f16 / bf16 Y, f64 for an f32 one; src/ops/fused_conv.c), which the conv-bn-stats pass
 * (src/passes/conv_bn_stats.c) gives a convolution feeding a training BatchNormalization so
 * that the BN skips its statistics pass over Y (issue 12).
 *
 * Validated on an H100 (bench/NOTES.md "t7 / z6 results"). The CUDA trainer runs the pass
 * unless KILN_CUDA_CONV_STATS=0 or --disable conv-bn-stats; this kernel runs whatever node
 * has the outputs (the op sweep's cases), by one of two paths:
 *   fallback (always correct, no gain): the convolution as conv.c runs any kiln.FusedConv,
 *     then norm_train.cu's statistics kernel over Y (kiln_cuda_channel_sums): Y read once
 *     more, which is what the BN's own statistics pass read.
 *   graph (kiln_cuda's conv_bn_stats 1 or 2): cuDNN's ConvolutionFwd -> GenStats operation
 *     graph (cudnn_graph.c), where the node's problem is one it expresses (2-D NHWC f16 /
 *     bf16, one group, symmetric pads, nothing in the epilogue) and cuDNN has an engine for
 *     it: the sums come from the convolution's epilogue, Y is not read again. They sum the
 *     f32 accumulators before Y's rounding to f16 / bf16 (so differ from the fallback's by
 *     at most that rounding).
 * Which: at plan time (the workspace function) the graph is built and its plan chosen; with
 * conv_bn_stats 1 and autotune, both paths are timed on scratch buffers of the node's shapes
 * (allocated and freed there, never in a run) and the faster kept per problem; without
 * autotune, or with conv_bn_stats 2, the graph wherever it has a plan. The choice and why
 * are logged (the context's log at INFO, and on stderr with KILN_CUDA_CONV_STATS_LOG=1) and
 * counted in kiln_cuda_stats
 * (conv_stats_graph_calls, conv_stats_fallback_calls, conv_stats_why).
 * Workspace: the most of the convolution's (conv.c), the statistics kernel's partial sums
 * and the graph's plan; the paths run one after the other on the stream, so they share it.
 */
#include "cuda_internal.h"
#include "../ops/fused_conv.h"
#include "norm_train.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIME_ITERS 5

static kiln_status rt(kiln_context *ctx, cudaError_t e, const char *what) {
    return e == cudaSuccess ? KILN_OK : kiln_cuda_rt_error(ctx, e, what, __FILE__, __LINE__);
}

void kiln_cuda_conv_stats_note(kiln_context *ctx, const char *fmt, ...) {
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    kiln_log(ctx, KILN_LOG_INFO, "conv-bn-stats: %s", line);
    const char *e = getenv("KILN_CUDA_CONV_STATS_LOG");
    if (e && strcmp(e, "1") == 0) fprintf(stderr, "kiln conv-bn-stats: %s\n", line);
}

static bool has_stats(const kiln_op_ctx *c) { return c->n_out >= 3 && c->out[1] && c->out[2]; }

/* the node as conv.c runs it: Y only */
static kiln_op_ctx plain(const kiln_op_ctx *c) {
    kiln_op_ctx v = *c;
    if (v.n_out > 1) v.n_out = 1;
    return v;
}

bool kiln_cuda_sup_fused_conv_stats(const kiln_op_ctx *c, char *why, size_t n) {
    if (!has_stats(c)) {
        if (c->n_out > 1 && (c->out[1] || (c->n_out > 2 && c->out[2]))) {
            snprintf(why, n, "outputs 1 and 2 (the statistics) come together");
            return false;
        }
        return true;
    }
    const kiln_tensor *y = c->out[0];
    const kiln_dtype sdt = kiln_fused_conv_stats_dtype(y->dtype);
    for (int k = 1; k <= 2; k++)
        if (c->out[k]->dtype != sdt || kiln_tensor_numel(c->out[k]) != (y->ndim >= 2 ? y->dims[1] : -1)) {
            snprintf(why, n, "statistics output %d must be %s of Y's %lld channels", k, kiln_dtype_name(sdt),
                     (long long)(y->ndim >= 2 ? y->dims[1] : 0));
            return false;
        }
    if (!kiln_cuda_float_dtype(y->dtype) || y->dims[1] > INT32_MAX / 64) {
        snprintf(why, n, "statistics of a %s Y with %lld channels", kiln_dtype_name(y->dtype), (long long)y->dims[1]);
        return false;
    }
    return true;
}

/* the fallback: the convolution, then the statistics kernel over Y */
static kiln_status run_fallback(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_op_ctx v = plain(c);
    kiln_status st = kiln_cuda_k_fused_conv(cu, &v);
    if (st) return st;
    return kiln_cuda_channel_sums(cu, c->kctx, c->out[0], c->out[1]->data, c->out[2]->data,
                                  c->out[1]->dtype == KILN_F64, c->workspace, c->workspace_size);
}

static kiln_status run_graph(kiln_cuda *cu, kiln_op_ctx *c, const struct kiln_genstats_problem *p) {
    return kiln_cuda_genstats_run(cu, c->kctx, p, c->in[0]->data, c->in[1]->data, c->out[0]->data,
                                  (float *)c->out[1]->data, (float *)c->out[2]->data, c->out[0]->dims[1],
                                  c->workspace, c->workspace_size);
}

/* Both paths timed on scratch buffers of c's shapes (plan time): ms[0] graph, ms[1] fallback. */
static kiln_status time_both(kiln_cuda *cu, kiln_op_ctx *c, const struct kiln_genstats_problem *p, size_t ws,
                             double ms[2]) {
    kiln_context *ctx = c->kctx;
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    KILN_CUDA_CHECK(ctx, cudaStreamIsCapturing(cu->stream, &cap));
    if (cap != cudaStreamCaptureStatusNone) return KILN_OK; /* not timed: ms stay 0 */
    kiln_tensor tx = *c->in[0], tw = *c->in[1], ty = *c->out[0], ts = *c->out[1], tq = *c->out[2];
    kiln_tensor *t[5] = {&tx, &tw, &ty, &ts, &tq};
    void *buf[6] = {0};
    cudaEvent_t ev[3] = {0};
    kiln_status st = KILN_OK;
    for (int i = 0; i < 5 && !st; i++) {
        const size_t b = kiln_tensor_nbytes(t[i]);
        st = rt(ctx, cudaMalloc(&buf[i], b ? b : 1), "cudaMalloc (conv-bn-stats timing)");
        /* f16 / bf16 0x3c3c: about 1.06 / 0.0114, finite in both */
        if (!st) st = rt(ctx, cudaMemset(buf[i], 0x3c, b), "cudaMemset");
        t[i]->data = buf[i];
    }
    if (!st && ws) st = rt(ctx, cudaMalloc(&buf[5], ws), "cudaMalloc (conv-bn-stats timing)");
    for (int i = 0; i < 3 && !st; i++) st = rt(ctx, cudaEventCreate(&ev[i]), "cudaEventCreate");
    kiln_tensor *in[2] = {&tx, &tw}, *out[3] = {&ty, &ts, &tq};
    kiln_op_ctx v = *c;
    v.n_in = 2;
    v.in = in;
    v.n_out = 3;
    v.out = out;
    v.workspace = buf[5];
    v.workspace_size = ws;
    /* one untimed run of each (the convolution's own algorithm search happens here), then
     * TIME_ITERS of the graph and TIME_ITERS of the fallback between three events */
    if (!st) st = run_graph(cu, &v, p);
    if (!st) st = run_fallback(cu, &v);
    if (!st) st = rt(ctx, cudaEventRecord(ev[0], cu->stream), "cudaEventRecord");
    for (int i = 0; i < TIME_ITERS && !st; i++) st = run_graph(cu, &v, p);
    if (!st) st = rt(ctx, cudaEventRecord(ev[1], cu->stream), "cudaEventRecord");
    for (int i = 0; i < TIME_ITERS && !st; i++) st = run_fallback(cu, &v);
    if (!st) st = rt(ctx, cudaEventRecord(ev[2], cu->stream), "cudaEventRecord");
    if (!st) st = rt(ctx, cudaStreamSynchronize(cu->stream), "cudaStreamSynchronize");
    float a = 0, b = 0;
    if (!st) st = rt(ctx, cudaEventElapsedTime(&a, ev[0], ev[1]), "cudaEventElapsedTime");
    if (!st) st = rt(ctx, cudaEventElapsedTime(&b, ev[1], ev[2]), "cudaEventElapsedTime");
    if (!st) {
        ms[0] = a / TIME_ITERS;
        ms[1] = b / TIME_ITERS;
    }
    cudaStreamSynchronize(cu->stream);
    for (int i = 0; i < 3; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    for (int i = 0; i < 6; i++)
        if (buf[i]) cudaFree(buf[i]);
    (void)cudaGetLastError();
    return st;
}

/* Geometry g's graph, planned (at plan time, build) and usable, or NULL with why. */
static struct kiln_genstats_problem *planned(kiln_cuda *cu, kiln_op_ctx *c, const kiln_genstats_geo *g, bool build,
                                             char *why, size_t n, kiln_status *st) {
    struct kiln_genstats_problem *p = NULL;
    if ((*st = kiln_cuda_genstats_plan(cu, c->kctx, g, build, &p))) return NULL;
    const char *no = NULL;
    if (!kiln_cuda_genstats_ok(p, NULL, &no)) {
        snprintf(why, n, "cuDNN: %s", p ? no : "the graph was not planned for this problem");
        return NULL;
    }
    return p;
}

/* The node's problem for the graph (NULL with why when none), built at plan time (build). */
static struct kiln_genstats_problem *problem_of(kiln_cuda *cu, kiln_op_ctx *c, bool build, char *why, size_t n,
                                                kiln_status *st) {
    *st = KILN_OK;
    if (!cu->conv_bn_stats) {
        snprintf(why, n, "kiln_cuda's conv_bn_stats is off (KILN_CUDA_CONV_STATS=0, deterministic, or the option)");
        return NULL;
    }
    if (c->out[1]->dtype != KILN_F32) { /* (an f32 Y: the graph takes f16 / bf16 only) */
        snprintf(why, n, "the statistics are %s (cuDNN's GenStats writes f32)", kiln_dtype_name(c->out[1]->dtype));
        return NULL;
    }
    kiln_genstats_geo g;
    if (!kiln_cuda_conv_genstats_geo(c, &g, why, n)) return NULL;
    return planned(cu, c, &g, build, why, n, st);
}

static kiln_status ws_stats(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    kiln_op_ctx v = plain(c);
    kiln_status st = kiln_cuda_ws_conv(cu, &v, bytes);
    if (st || !has_stats(c)) return st;
    const size_t sb = kiln_cuda_channel_sums_ws(c->out[0]);
    if (*bytes < sb) *bytes = sb;
    char why[256];
    struct kiln_genstats_problem *p = problem_of(cu, c, true, why, sizeof why, &st);
    if (st || !p) {
        if (!st) kiln_cuda_conv_stats_note(c->kctx, "node '%s': convolution + statistics kernel (%s)", c->node->name, why);
        return st;
    }
    size_t gw = 0;
    kiln_cuda_genstats_ok(p, &gw, NULL);
    if (*bytes < gw) *bytes = gw;
    double *ms = NULL;
    int *choice = kiln_cuda_genstats_choice(p, &ms);
    if (*choice == KILN_GENSTATS_UNTIMED) {
        if (cu->conv_bn_stats == 1 && cu->autotune && time_both(cu, c, p, *bytes, ms)) {
            /* the graph failed on scratch buffers: keep the fallback, say why */
            kiln_cuda_conv_stats_note(c->kctx, "node '%s': timing failed (%s): the convolution + statistics kernel kept",
                                      c->node->name, kiln_context_message(c->kctx));
            *choice = KILN_GENSTATS_FALLBACK;
            return KILN_OK;
        }
        *choice = ms[0] > 0 && ms[1] > 0 && ms[1] < ms[0] ? KILN_GENSTATS_FALLBACK : KILN_GENSTATS_GRAPH;
        kiln_cuda_conv_stats_note(c->kctx,
                 "node '%s' (%s): cuDNN ConvolutionFwd -> GenStats %.4f ms, convolution + statistics "
                 "kernel %.4f ms (0: not timed): %s",
                 c->node->name, kiln_dtype_name(c->out[0]->dtype), ms[0], ms[1],
                 *choice == KILN_GENSTATS_GRAPH ? "the graph" : "the convolution + statistics kernel");
    }
    return KILN_OK;
}

static kiln_status k_stats(kiln_cuda *cu, kiln_op_ctx *c) {
    if (!has_stats(c)) return kiln_cuda_k_fused_conv(cu, c);
    char why[256];
    kiln_status st;
    struct kiln_genstats_problem *p = problem_of(cu, c, false, why, sizeof why, &st);
    if (st) return st;
    double *ms = NULL;
    /* the graph's tensors are declared 16-byte aligned (the sweep also runs odd offsets) */
    const void *ptr[5] = {c->in[0]->data, c->in[1]->data, c->out[0]->data, c->out[1]->data, c->out[2]->data};
    bool aligned = true;
    for (int i = 0; i < 5; i++) aligned &= ((uintptr_t)ptr[i] & 15) == 0;
    if (p && !aligned) {
        snprintf(why, sizeof why, "a buffer not 16-byte aligned (the graph's tensors are declared so)");
        p = NULL;
    }
    if (p && (*kiln_cuda_genstats_choice(p, &ms) != KILN_GENSTATS_FALLBACK || cu->conv_bn_stats == 2)) {
        cu->stats.conv_stats_graph_calls++;
        return run_graph(cu, c, p);
    }
    if (p) snprintf(why, sizeof why, "timed slower than the convolution + statistics kernel (%.4f vs %.4f ms)", ms[0], ms[1]);
    cu->stats.conv_stats_fallback_calls++;
    snprintf(cu->stats.conv_stats_why, sizeof cu->stats.conv_stats_why, "%s", why);
    return run_fallback(cu, c);
}

/* ------------------------------------------------------------------ the prologue */

/* kiln.FusedConv's input 4, kiln.ConvGradWeight's input 3: P, f32 (2, C), X read as
 * act(a * X + k) (src/ops/fused_conv.c). Here by the fallback (conv_prologue.cu): X' written
 * in X's dtype and layout at the workspace's head, then the node runs as without P on X';
 * or, where cuDNN has a plan for the problem (2-D NHWC f16 / bf16, one group, symmetric pads,
 * no bias, residual or activation, 16-byte aligned buffers), its prologue graph: X * a + k
 * [-> ReLU] in virtual f32 -> ConvFwd [-> GenStats] (pattern c) or -> ConvBwdFilter
 * (pattern f), X' never written; a and k rounded to X's dtype first (a small kernel into the
 * workspace's head) where cuDNN's engines want them so (the H100's cuDNN 9 had none for f32
 * ones: bench/NOTES.md, the prologue on the H100), which is within one rounding of the op's
 * contract as the fallback's X' is. With autotune the two are timed at plan time on scratch
 * buffers (the probe: pattern f lost on 3x3 64->64 56x56, 0.238 ms against 0.205) and the
 * faster kept per problem, logged as conv-bn-stats' choices are; KILN_CUDA_PROLOGUE_GRAPH=0
 * forces the fallback. */
static const kiln_tensor *prologue_in(const kiln_op_ctx *c, int k) { return c->n_in > k ? c->in[k] : NULL; }
static size_t prologue_bytes(const kiln_tensor *x) { return (kiln_tensor_nbytes(x) + 255) & ~(size_t)255; }

bool kiln_cuda_sup_conv_prologue(const kiln_op_ctx *c, int k, char *why, size_t n) {
    const kiln_tensor *p = prologue_in(c, k), *x = c->in[0];
    if (!p) return true;
    if (p->dtype != KILN_F32 || x->ndim < 3 || kiln_tensor_numel(p) != 2 * x->dims[1] || !kiln_cuda_float_dtype(x->dtype)) {
        snprintf(why, n, "input %d (the prologue P) must be f32 (2, %lld) for a float X", k, (long long)x->dims[1]);
        return false;
    }
    return true;
}

/* v: c without input k (P), X' (tx, at the workspace's head) for X and the rest of the
 * workspace; ins holds v's inputs */
static void prologue_view(const kiln_op_ctx *c, int k, kiln_tensor *tx, kiln_tensor **ins, kiln_op_ctx *v) {
    *v = *c;
    for (int i = 0; i < k; i++) ins[i] = c->in[i];
    *tx = *c->in[0];
    tx->data = c->workspace;
    ins[0] = tx;
    v->in = ins;
    v->n_in = k;
    const size_t pb = prologue_bytes(c->in[0]);
    v->workspace = c->workspace ? (char *)c->workspace + pb : NULL;
    v->workspace_size = c->workspace_size > pb ? c->workspace_size - pb : 0;
}

/* cuDNN's prologue graphs (cudnn_graph.c; bench/cudnn_fusion_probe.c's patterns c and f): on
 * unless KILN_CUDA_PROLOGUE_GRAPH=0 */
static bool prologue_graph_on(void) {
    const char *e = getenv("KILN_CUDA_PROLOGUE_GRAPH");
    return !(e && strcmp(e, "0") == 0);
}

/* The node's problem for a prologue graph (k: P's input, 4 FusedConv, 3 ConvGradWeight), or
 * NULL with why; built at plan time (build). */
static struct kiln_genstats_problem *prologue_problem(kiln_cuda *cu, kiln_op_ctx *c, int k, bool build, char *why,
                                                      size_t n, kiln_status *st) {
    *st = KILN_OK;
    if (!prologue_graph_on() || cu->deterministic) {
        snprintf(why, n, "%s", cu->deterministic ? "deterministic (cuDNN's graph may sum in any order)"
                                                  : "KILN_CUDA_PROLOGUE_GRAPH=0");
        return NULL;
    }
    kiln_op_ctx v = *c;
    kiln_tensor *ins[2], *outs[1];
    if (k == 3) { /* ConvGradWeight(X, dY, W) -> dW: the geometry of conv(X, W) -> dY */
        ins[0] = c->in[0];
        ins[1] = c->in[2];
        outs[0] = c->in[1];
        v.in = ins;
        v.out = outs;
        v.n_in = 2;
    } else {
        v.n_in = c->n_in < 4 ? c->n_in : 4; /* bias or residual: the geometry refuses them */
    }
    v.n_out = 1;
    kiln_genstats_geo g;
    if (!kiln_cuda_conv_genstats_geo(&v, &g, why, n)) return NULL;
    g.kind = k == 3 ? KILN_GRAPH_PRO_WGRAD : KILN_GRAPH_PRO_FWD;
    g.stats = k == 4 && has_stats(c);
    g.relu = kiln_attr_int(c->node, "prologue_relu", 0) != 0;
    if (k == 3 && c->out[0]->dtype != c->in[0]->dtype) {
        snprintf(why, n, "dW of dtype %s for X of %s", kiln_dtype_name(c->out[0]->dtype), kiln_dtype_name(c->in[0]->dtype));
        return NULL;
    }
    return planned(cu, c, &g, build, why, n, st);
}

/* The workspace's head for a graph whose a and k are 16-bit (kiln_cuda_prologue_graph_sb16):
 * a at 0, k at half of it, each 256-byte aligned; the graph's own workspace after it. */
static size_t p16_bytes(const kiln_tensor *x) { return 2 * (((size_t)x->dims[1] * 2 + 255) & ~(size_t)255); }

/* the graph on c's buffers (gp planned, buffers aligned): a and k as P's f32 rows, or
 * rounded to X's dtype at the workspace's head first */
static kiln_status run_graph_p(kiln_cuda *cu, kiln_op_ctx *c, int k, const struct kiln_genstats_problem *gp) {
    const int64_t C = c->in[0]->dims[1];
    const void *pa = c->in[k]->data, *pk = (const float *)c->in[k]->data + C;
    void *ws = c->workspace;
    size_t ws_size = c->workspace_size;
    if (kiln_cuda_prologue_graph_sb16(gp)) {
        const size_t head = p16_bytes(c->in[0]);
        if (!ws || ws_size < head)
            return kiln_op_fail(c, KILN_ERR_INTERNAL, "workspace of %zu bytes is too small for the prologue's a and k (%zu)",
                                ws_size, head);
        kiln_status st = kiln_cuda_conv_prologue_p16(cu, c->kctx, c->in[0]->dtype, (const float *)c->in[k]->data, C, ws,
                                                     (char *)ws + head / 2);
        if (st) return st;
        pa = ws;
        pk = (char *)ws + head / 2;
        ws = (char *)ws + head;
        ws_size -= head;
    }
    void *w = k == 3 ? c->out[0]->data : c->in[1]->data, *y = k == 3 ? c->in[1]->data : c->out[0]->data;
    const bool stats = k == 4 && has_stats(c);
    return kiln_cuda_prologue_graph_run(cu, c->kctx, gp, c->in[0]->data, w, y, pa, pk,
                                        stats ? (float *)c->out[1]->data : NULL, stats ? (float *)c->out[2]->data : NULL,
                                        stats ? c->out[0]->dims[1] : 0, ws_size ? ws : NULL, ws_size);
}

/* the fallback: X' into the workspace's head, then the node without P on it */
static kiln_status run_fallback_p(kiln_cuda *cu, kiln_op_ctx *c, int k, kiln_status (*run)(kiln_cuda *, kiln_op_ctx *)) {
    if (c->workspace_size < prologue_bytes(c->in[0]))
        return kiln_op_fail(c, KILN_ERR_INTERNAL, "workspace of %zu bytes is too small for the prologue's X' (%zu)",
                            c->workspace_size, prologue_bytes(c->in[0]));
    kiln_tensor tx, *ins[4];
    kiln_op_ctx v;
    prologue_view(c, k, &tx, ins, &v);
    const bool relu = kiln_attr_int(c->node, "prologue_relu", 0) != 0;
    kiln_status st = kiln_cuda_conv_prologue_apply(cu, c->kctx, c->in[0], (const float *)c->in[k]->data, relu, tx.data);
    return st ? st : run(cu, &v);
}

static bool graph_aligned(const kiln_op_ctx *c, int k, const struct kiln_genstats_problem *gp) {
    const float *pa = (const float *)c->in[k]->data;
    const bool sb16 = kiln_cuda_prologue_graph_sb16(gp); /* a and k at the workspace's head */
    const void *ptr[5] = {c->in[0]->data, k == 3 ? c->out[0]->data : c->in[1]->data,
                          k == 3 ? c->in[1]->data : c->out[0]->data, sb16 ? c->workspace : pa,
                          sb16 ? c->workspace : pa + c->in[0]->dims[1]};
    bool aligned = true;
    for (int i = 0; i < 5; i++) aligned &= ((uintptr_t)ptr[i] & 15) == 0;
    return aligned;
}

static kiln_status run_prologue(kiln_cuda *cu, kiln_op_ctx *c, int k, kiln_status (*run)(kiln_cuda *, kiln_op_ctx *)) {
    char why[256];
    kiln_status st;
    struct kiln_genstats_problem *gp = prologue_problem(cu, c, k, false, why, sizeof why, &st);
    if (st) return st;
    double *ms = NULL;
    if (gp && graph_aligned(c, k, gp) && *kiln_cuda_genstats_choice(gp, &ms) != KILN_GENSTATS_FALLBACK) {
        cu->stats.conv_prologue_graph_calls++;
        return run_graph_p(cu, c, k, gp);
    }
    cu->stats.conv_prologue_fallback_calls++;
    return run_fallback_p(cu, c, k, run);
}

/* Both paths timed on scratch buffers of c's shapes (plan time, with autotune): ms[0] the
 * graph, ms[1] the fallback; ms stay 0 when not timed (a stream being captured). */
static kiln_status time_prologue(kiln_cuda *cu, kiln_op_ctx *c, int k, const struct kiln_genstats_problem *gp, size_t ws,
                                 kiln_status (*run)(kiln_cuda *, kiln_op_ctx *), double ms[2]) {
    kiln_context *ctx = c->kctx;
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    KILN_CUDA_CHECK(ctx, cudaStreamIsCapturing(cu->stream, &cap));
    if (cap != cudaStreamCaptureStatusNone) return KILN_OK;
    enum { MAXT = 8 };
    kiln_tensor t[MAXT], *in[5] = {0}, *out[3] = {0};
    void *buf[MAXT + 1] = {0};
    int nt = 0;
    kiln_status st = KILN_OK;
    for (int i = 0; i < c->n_in && i < 5 && !st; i++) {
        if (!c->in[i]) continue;
        t[nt] = *c->in[i];
        const size_t b = kiln_tensor_nbytes(&t[nt]);
        st = rt(ctx, cudaMalloc(&buf[nt], b ? b : 1), "cudaMalloc (prologue timing)");
        if (!st) st = rt(ctx, cudaMemset(buf[nt], 0x3c, b), "cudaMemset"); /* f16 / bf16 / f32: finite */
        t[nt].data = buf[nt];
        in[i] = &t[nt++];
    }
    for (int i = 0; i < c->n_out && i < 3 && !st; i++) {
        if (!c->out[i]) continue;
        t[nt] = *c->out[i];
        const size_t b = kiln_tensor_nbytes(&t[nt]);
        st = rt(ctx, cudaMalloc(&buf[nt], b ? b : 1), "cudaMalloc (prologue timing)");
        t[nt].data = buf[nt];
        out[i] = &t[nt++];
    }
    if (!st && ws) st = rt(ctx, cudaMalloc(&buf[MAXT], ws), "cudaMalloc (prologue timing)");
    cudaEvent_t ev[3] = {0};
    for (int i = 0; i < 3 && !st; i++) st = rt(ctx, cudaEventCreate(&ev[i]), "cudaEventCreate");
    kiln_op_ctx v = *c;
    v.in = in;
    v.out = out;
    v.n_in = c->n_in < 5 ? c->n_in : 5;
    v.n_out = c->n_out < 3 ? c->n_out : 3;
    v.workspace = buf[MAXT];
    v.workspace_size = ws;
    const bool aligned = !st && graph_aligned(&v, k, gp);
    if (!st && aligned) st = run_graph_p(cu, &v, k, gp);
    if (!st) st = run_fallback_p(cu, &v, k, run);
    if (!st) st = rt(ctx, cudaEventRecord(ev[0], cu->stream), "cudaEventRecord");
    for (int i = 0; i < TIME_ITERS && !st && aligned; i++) st = run_graph_p(cu, &v, k, gp);
    if (!st) st = rt(ctx, cudaEventRecord(ev[1], cu->stream), "cudaEventRecord");
    for (int i = 0; i < TIME_ITERS && !st; i++) st = run_fallback_p(cu, &v, k, run);
    if (!st) st = rt(ctx, cudaEventRecord(ev[2], cu->stream), "cudaEventRecord");
    if (!st) st = rt(ctx, cudaStreamSynchronize(cu->stream), "cudaStreamSynchronize");
    float a = 0, b = 0;
    if (!st) st = rt(ctx, cudaEventElapsedTime(&a, ev[0], ev[1]), "cudaEventElapsedTime");
    if (!st) st = rt(ctx, cudaEventElapsedTime(&b, ev[1], ev[2]), "cudaEventElapsedTime");
    if (!st && aligned) {
        ms[0] = a / TIME_ITERS;
        ms[1] = b / TIME_ITERS;
    }
    cudaStreamSynchronize(cu->stream);
    for (int i = 0; i < 3; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    for (int i = 0; i <= MAXT; i++)
        if (buf[i]) cudaFree(buf[i]);
    (void)cudaGetLastError();
    return st;
}

static kiln_status ws_prologue(kiln_cuda *cu, kiln_op_ctx *c, int k, size_t *bytes,
                               kiln_status (*ws)(kiln_cuda *, kiln_op_ctx *, size_t *),
                               kiln_status (*run)(kiln_cuda *, kiln_op_ctx *)) {
    kiln_tensor tx, *ins[4];
    kiln_op_ctx v;
    prologue_view(c, k, &tx, ins, &v);
    kiln_status st = ws(cu, &v, bytes);
    if (st) return st;
    *bytes += prologue_bytes(c->in[0]);
    char why[256];
    struct kiln_genstats_problem *gp = prologue_problem(cu, c, k, true, why, sizeof why, &st);
    if (st) return st;
    size_t gw = 0;
    if (gp && kiln_cuda_genstats_ok(gp, &gw, NULL)) {
        if (kiln_cuda_prologue_graph_sb16(gp)) gw += p16_bytes(c->in[0]);
        if (*bytes < gw) *bytes = gw;
    }
    if (!gp) {
        kiln_cuda_conv_stats_note(c->kctx, "node '%s': prologue by the fallback kernel (%s)", c->node->name, why);
        return KILN_OK;
    }
    double *ms = NULL;
    int *choice = kiln_cuda_genstats_choice(gp, &ms);
    if (*choice != KILN_GENSTATS_UNTIMED) return KILN_OK; /* a problem met before */
    if (cu->autotune && (st = time_prologue(cu, c, k, gp, *bytes, run, ms))) {
        kiln_cuda_conv_stats_note(c->kctx, "node '%s': prologue timing failed (%s): the fallback kernel kept",
                                  c->node->name, kiln_context_message(c->kctx));
        *choice = KILN_GENSTATS_FALLBACK;
        return KILN_OK;
    }
    *choice = ms[0] > 0 && ms[1] > 0 && ms[1] < ms[0] ? KILN_GENSTATS_FALLBACK : KILN_GENSTATS_GRAPH;
    kiln_cuda_conv_stats_note(c->kctx, "node '%s' (%s): cuDNN prologue graph %.4f ms, fallback kernel + convolution %.4f ms "
                              "(0: not timed): %s",
                              c->node->name, kiln_dtype_name(c->in[0]->dtype), ms[0], ms[1],
                              *choice == KILN_GENSTATS_GRAPH ? "the graph" : "the fallback");
    return KILN_OK;
}

kiln_status kiln_cuda_ws_fused_conv_stats(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    return prologue_in(c, 4) ? ws_prologue(cu, c, 4, bytes, ws_stats, k_stats) : ws_stats(cu, c, bytes);
}

kiln_status kiln_cuda_k_fused_conv_stats(kiln_cuda *cu, kiln_op_ctx *c) {
    return prologue_in(c, 4) ? run_prologue(cu, c, 4, k_stats) : k_stats(cu, c);
}

kiln_status kiln_cuda_ws_conv_grad_weight_prologue(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    return prologue_in(c, 3) ? ws_prologue(cu, c, 3, bytes, kiln_cuda_ws_conv_grad_weight, kiln_cuda_k_conv_grad_weight)
                             : kiln_cuda_ws_conv_grad_weight(cu, c, bytes);
}

kiln_status kiln_cuda_k_conv_grad_weight_prologue(kiln_cuda *cu, kiln_op_ctx *c) {
    return prologue_in(c, 3) ? run_prologue(cu, c, 3, kiln_cuda_k_conv_grad_weight) : kiln_cuda_k_conv_grad_weight(cu, c);
}
