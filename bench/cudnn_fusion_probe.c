/*
 * cudnn_fusion_probe.c — which of the MLPerf ResNet-50 convolution/BatchNorm fusions cuDNN 9's
 * graph (backend) API supports on this GPU for NHWC fp16 (fp32 compute and statistics), and
 * how fast they run, against the legacy API's convolutions kiln uses (src/cuda/conv.c).
 *
 * WRITTEN WITHOUT A GPU: it compiled (sm_90, -Werror) but has never run; only --selftest (the
 * CPU references) has. Every attribute name comes from cudnn_graph_v9.h; the graphs follow the
 * ones PaddlePaddle's fused ops build on sm_80+ (fused_scale_bias_relu_conv_bnstats,
 * fused_bn_finalize, fused_dgrad_drelu_bnbwdweight), tried first, other types after them.
 *
 * Run on the GPU machine (one call, a few minutes; bench/gpu.sh part `cudnnfuse` does this
 * from the pack):
 *   build-cuda/cudnn_fusion_probe                  # all patterns, all shapes, batch 256
 *   cudnn_fusion_probe --batch 32 --shapes 1,2 --patterns a,b,c --iters 20 --plans 3
 *   cudnn_fusion_probe --selftest                  # the CPU references only, no GPU needed
 * Options: --plans N plans timed per pattern and shape (3), --tries N engine configs tried
 * (8), --budget S seconds after which no new shape or pattern starts (420; the table still
 * prints), --warmup N (3), --iters N (20, at most 256).
 * Patterns:
 *   a   ConvFwd alone (graph API): the baseline, against the legacy API's best algorithm
 *   b   ConvFwd -> Y (written) -> GenStats: per-channel sum and sum of squares of Y (fp32)
 *   b2  ConvFwd -> Y -> Reduction(ADD) of Y and of Y*Y (the generic alternative to GenStats)
 *   c   X*scale+bias -> ReLU -> ConvFwd -> Y -> GenStats (MLPerf's "ConvBNfprop" forward)
 *   d   BN_FINALIZE_STATISTICS: sum, sumsq -> mean, inv-std, eq scale and bias, running stats
 *   e1  ConvBwdData -> ReLU_BWD with the forward input as the mask (dgrad + dReLU)
 *   e2  ConvBwdData -> ReLU_BWD(x = ((Z-mean)*invstd)*gamma+beta, or Z*scale+bias) -> written,
 *       and BN_BWD_WEIGHTS over it (dscale, dbias and the dBN apply's coefficients: MLPerf's
 *       "dgrad drelu dbn")
 *   f   X*scale+bias -> ReLU -> ConvBwdFilter (wgrad recomputing the activation)
 * For each pattern and shape: whether the operation graph finalizes (the cuDNN status and its
 * last error string if not), how many engine configs heuristics mode A and FALLBACK return,
 * which finalize into execution plans (engine global index, numerical and behaviour notes,
 * workspace; when heuristics give none, engines by global index), the best --plans plans timed (CUDA events per execution after --warmup,
 * median of --iters), each checked against a CPU reference (conv outputs at sampled points,
 * statistics over the whole GPU output, wgrad at sampled weights). Variants (intermediate and
 * scale/bias types fp32 or fp16) are tried in turn until one gives a plan. Then a table:
 * pattern, shape, supported, engines, best ms, the unfused equivalent (the legacy API's
 * best algorithm timed here + the separate pass's bytes at 3.0 TB/s) and the fused floor.
 * Exit 0 when patterns are unsupported (that is a result), 1 on a wrong result, 2 on a CUDA
 * error or a bad command line.
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <cudnn.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BW_TBS 3.0 /* H100 SXM's practical HBM bandwidth for the floors, TB/s */

/* ---------------------------------------------------------------- host fp16 */
static float h2f_tab[65536];

static float h2f_slow(uint16_t h) {
    const uint32_t s = (uint32_t)(h >> 15), e = (h >> 10) & 31u, m = h & 1023u;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m | 1024u), (int)e - 25);
    return s ? -v : v;
}

static void h2f_init(void) {
    for (uint32_t i = 0; i < 65536; i++) h2f_tab[i] = h2f_slow((uint16_t)i);
}

static inline float h2f(uint16_t h) { return h2f_tab[h]; }

static uint16_t f2h(float f) { /* round to nearest even; finite inputs in range only */
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const float a = fabsf(f);
    if (a >= 65520.0f) return sign | 0x7c00u;
    if (a < ldexpf(1.0f, -14)) { /* subnormal: units of 2^-24 */
        const float q = nearbyintf(a * 16777216.0f);
        return sign | (uint16_t)q;
    }
    int e;
    const float fr = frexpf(a, &e); /* a = fr * 2^e, fr in [0.5,1) */
    float mant = nearbyintf(fr * 2048.0f); /* 11 bits with the implicit one */
    if (mant >= 2048.0f) { mant = 1024.0f; e++; }
    const uint32_t he = (uint32_t)(e - 1 + 15);
    if (he >= 31) return sign | 0x7c00u;
    return sign | (uint16_t)(he << 10) | (uint16_t)((uint32_t)mant - 1024u);
}

static float rh(float f) { return h2f(f2h(f)); } /* rounded through fp16 */

/* ---------------------------------------------------------------- errors */
static char g_err[1024];
static int g_bad; /* correctness failures */

#define CUDA_OK(call)                                                                                   \
    do {                                                                                                \
        cudaError_t e_ = (call);                                                                        \
        if (e_ != cudaSuccess) {                                                                        \
            fprintf(stderr, "cudnn_fusion_probe: CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), \
                    __FILE__, __LINE__, #call);                                                         \
            exit(2);                                                                                    \
        }                                                                                               \
    } while (0)

#define DNN_OK(call)                                                                                    \
    do {                                                                                                \
        cudnnStatus_t s_ = (call);                                                                      \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                               \
            fprintf(stderr, "cudnn_fusion_probe: cuDNN error %s at %s:%d: %s\n", cudnnGetErrorString(s_), \
                    __FILE__, __LINE__, #call);                                                         \
            exit(2);                                                                                    \
        }                                                                                               \
    } while (0)

/* a cuDNN backend call that may fail as a result (unsupported): records the status, the
 * call and cuDNN's last error string in g_err, returns 1 */
static int dnn_try(cudnnStatus_t s, const char *what, int line) {
    if (s == CUDNN_STATUS_SUCCESS) return 0;
    char last[600] = "";
    cudnnGetLastErrorString(last, sizeof last);
    for (char *p = last; *p; p++)
        if (*p == '\n' || *p == '|') *p = ' ';
    snprintf(g_err, sizeof g_err, "%s (line %d: %s)%s%s", cudnnGetErrorString(s), line, what, last[0] ? ": " : "",
             last);
    return 1;
}
#define TRY(call) \
    if (dnn_try((call), #call, __LINE__)) return 1

/* ---------------------------------------------------------------- descriptor pool */
#define POOL_MAX 512
static cudnnBackendDescriptor_t pool[POOL_MAX];
static int npool;

static cudnnBackendDescriptor_t mk(cudnnBackendDescriptorType_t t) {
    cudnnBackendDescriptor_t d = NULL;
    if (npool >= POOL_MAX) {
        fprintf(stderr, "cudnn_fusion_probe: descriptor pool full\n");
        exit(2);
    }
    cudnnStatus_t s = cudnnBackendCreateDescriptor(t, &d);
    if (s != CUDNN_STATUS_SUCCESS) {
        fprintf(stderr, "cudnn_fusion_probe: cudnnBackendCreateDescriptor(%d): %s\n", (int)t, cudnnGetErrorString(s));
        exit(2);
    }
    pool[npool++] = d;
    return d;
}

static void pool_free(void) {
    while (npool > 0) cudnnBackendDestroyDescriptor(pool[--npool]);
}

static cudnnStatus_t set1(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                          int64_t n, const void *v) {
    return cudnnBackendSetAttribute(d, a, t, n, v);
}

/* ---------------------------------------------------------------- shapes */
typedef struct shape {
    const char *name;
    int c, h, w, k, r, s, stride, pad;
} shape;

static const shape SHAPES[] = {
    {"1x1 256->64 56x56", 256, 56, 56, 64, 1, 1, 1, 0},  {"3x3 64->64 56x56", 64, 56, 56, 64, 3, 3, 1, 1},
    {"1x1 64->256 56x56", 64, 56, 56, 256, 1, 1, 1, 0},  {"3x3 128->128 28x28", 128, 28, 28, 128, 3, 3, 1, 1},
    {"1x1 1024->256 14x14", 1024, 14, 14, 256, 1, 1, 1, 0}, {"3x3 512->512 7x7", 512, 7, 7, 512, 3, 3, 1, 1},
    {"3x3 128->128 s2 56->28", 128, 56, 56, 128, 3, 3, 2, 1},
};
#define NSHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

/* ---------------------------------------------------------------- uids */
enum {
    U_X = 1, U_W, U_Y, U_SUM, U_SQ, U_SCALE, U_BIAS, U_DY, U_DX, U_DW, U_RIN, U_MEAN, U_INVSTD,
    U_DSCALE, U_DBIAS, U_EQDY, U_EQX, U_EQB, U_PRM, U_PRV, U_URM, U_URV, U_EQS, U_EQBIAS, U_EPS, U_EXPF, U_CNT,
    U_V1 = 101, U_V2, U_V3, U_V4
};

/* ---------------------------------------------------------------- state per shape */
typedef struct bufs {
    int n, c, h, w, k, r, s, st, pad, p, q;
    size_t nx, ny, nw;
    /* device */
    void *x, *wt, *y, *dy, *dx, *dw, *sum, *sq, *scale, *bias, *scale16, *bias16, *mean, *invstd;
    void *dscale, *dbias, *eqdy, *eqx, *eqb, *prm, *prv, *urm, *urv, *eqs, *eqbias, *eqs16, *eqbias16;
    void *ws;
    size_t ws_bytes;
    /* host (fp16 bits and fp32 per-channel values) */
    uint16_t *hx, *hw, *hdy;
    float *hscale, *hbias, *hmean, *hinvstd; /* per input channel C */
    float *hsum, *hsq, *hprm, *hprv;         /* finalize inputs, per C */
} bufs;

static cudnnHandle_t handle;
/* evs[k] is recorded before timed execution k and evs[it] after the last: the executions are
 * enqueued back to back with no host sync between them (the host's enqueue overlaps the GPU's
 * work, as in a training step), t[k] = evs[k+1] - evs[k] */
#define MAX_ITERS 256
static cudaEvent_t evs[MAX_ITERS + 1];
static int g_iters = 20, g_warmup = 3, g_plans = 3, g_tries = 8;
static double g_budget = 420; /* seconds: no new shape or pattern after it (the table still prints) */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform [0,1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f;
}

static void *dmalloc(size_t bytes) {
    void *p = NULL;
    CUDA_OK(cudaMalloc(&p, bytes ? bytes : 16));
    return p;
}

static void *up_h(const uint16_t *h, size_t n) {
    void *d = dmalloc(n * 2);
    CUDA_OK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    return d;
}

static void *up_f(const float *h, size_t n) {
    void *d = dmalloc(n * 4);
    CUDA_OK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    return d;
}

static void *up_f_as_h(const float *h, size_t n) {
    uint16_t *t = malloc(n * 2);
    if (!t) exit(2);
    for (size_t i = 0; i < n; i++) t[i] = f2h(h[i]);
    void *d = up_h(t, n);
    free(t);
    return d;
}

static uint16_t *rand_h(size_t n, float lo, float hi) {
    uint16_t *p = malloc(n * 2);
    if (!p) {
        fprintf(stderr, "cudnn_fusion_probe: out of host memory\n");
        exit(2);
    }
    for (size_t i = 0; i < n; i++) p[i] = f2h(lo + (hi - lo) * frand());
    return p;
}

static float *rand_f(size_t n, float lo, float hi) { /* values exact in fp16 */
    float *p = malloc(n * 4);
    if (!p) exit(2);
    for (size_t i = 0; i < n; i++) p[i] = rh(lo + (hi - lo) * frand());
    return p;
}

static void bufs_host(bufs *b, const shape *sh, int n) {
    memset(b, 0, sizeof *b);
    b->n = n, b->c = sh->c, b->h = sh->h, b->w = sh->w, b->k = sh->k, b->r = sh->r, b->s = sh->s;
    b->st = sh->stride, b->pad = sh->pad;
    b->p = (b->h + 2 * b->pad - b->r) / b->st + 1;
    b->q = (b->w + 2 * b->pad - b->s) / b->st + 1;
    b->nx = (size_t)n * b->h * b->w * b->c;
    b->ny = (size_t)n * b->p * b->q * b->k;
    b->nw = (size_t)b->k * b->r * b->s * b->c;
    const float ws = 1.0f / sqrtf((float)(b->c * b->r * b->s));
    b->hx = rand_h(b->nx, -1.0f, 1.0f);
    b->hw = rand_h(b->nw, -2.0f * ws, 2.0f * ws);
    b->hdy = rand_h(b->ny, -1.0f, 1.0f);
    const int C = b->c, K = b->k;
    b->hscale = rand_f((size_t)C, 0.5f, 1.5f);
    b->hbias = rand_f((size_t)C, -0.3f, 0.3f);
    b->hmean = rand_f((size_t)C, -0.2f, 0.2f);
    b->hinvstd = rand_f((size_t)C, 0.5f, 2.0f);
    /* finalize inputs over K channels from a mean and variance per channel */
    const double m = (double)n * b->p * b->q;
    b->hsum = malloc((size_t)K * 4), b->hsq = malloc((size_t)K * 4);
    b->hprm = rand_f((size_t)K, -0.1f, 0.1f), b->hprv = rand_f((size_t)K, 0.5f, 1.5f);
    if (!b->hsum || !b->hsq) exit(2);
    for (int i = 0; i < K; i++) {
        const double mu = -0.5 + frand(), var = 0.2 + frand();
        b->hsum[i] = (float)(m * mu);
        b->hsq[i] = (float)(m * (var + mu * mu));
    }
}

static void bufs_init(bufs *b, const shape *sh, int n) {
    bufs_host(b, sh, n);
    const int C = b->c, K = b->k;
    b->x = up_h(b->hx, b->nx), b->wt = up_h(b->hw, b->nw), b->dy = up_h(b->hdy, b->ny);
    b->y = dmalloc(b->ny * 2), b->dx = dmalloc(b->nx * 2), b->dw = dmalloc(b->nw * 2);
    b->scale = up_f(b->hscale, (size_t)C), b->bias = up_f(b->hbias, (size_t)C);
    b->scale16 = up_f_as_h(b->hscale, (size_t)C), b->bias16 = up_f_as_h(b->hbias, (size_t)C);
    const size_t mx = (size_t)(C > K ? C : K);
    /* mean/invstd: C channels for e2, K written by finalize (d) */
    b->mean = dmalloc(mx * 4), b->invstd = dmalloc(mx * 4);
    CUDA_OK(cudaMemcpy(b->mean, b->hmean, (size_t)C * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(b->invstd, b->hinvstd, (size_t)C * 4, cudaMemcpyHostToDevice));
    b->sum = dmalloc(mx * 4), b->sq = dmalloc(mx * 4);
    b->dscale = dmalloc(mx * 4), b->dbias = dmalloc(mx * 4);
    b->eqdy = dmalloc(mx * 4), b->eqx = dmalloc(mx * 4), b->eqb = dmalloc(mx * 4);
    b->prm = up_f(b->hprm, (size_t)K), b->prv = up_f(b->hprv, (size_t)K);
    b->urm = dmalloc(mx * 4), b->urv = dmalloc(mx * 4), b->eqs = dmalloc(mx * 4), b->eqbias = dmalloc(mx * 4);
    b->eqs16 = dmalloc(mx * 2), b->eqbias16 = dmalloc(mx * 2);
    b->ws_bytes = (size_t)1 << 30;
    b->ws = dmalloc(b->ws_bytes);
}

static void bufs_free(bufs *b) {
    void *d[] = {b->x, b->wt, b->y, b->dy, b->dx, b->dw, b->sum, b->sq, b->scale, b->bias, b->scale16, b->bias16,
                 b->mean, b->invstd, b->dscale, b->dbias, b->eqdy, b->eqx, b->eqb, b->prm, b->prv, b->urm, b->urv,
                 b->eqs, b->eqbias, b->eqs16, b->eqbias16, b->ws};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) cudaFree(d[i]);
    free(b->hx), free(b->hw), free(b->hdy), free(b->hscale), free(b->hbias), free(b->hmean), free(b->hinvstd);
    free(b->hsum), free(b->hsq), free(b->hprm), free(b->hprv);
}

/* ---------------------------------------------------------------- backend builders */
/* a tensor [d0,d1,d2,d3] (N,C,H,W order as cuDNN wants) laid out NHWC; byval: a host scalar */
static int tens(cudnnBackendDescriptor_t *out, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c, int64_t h,
                int64_t w, int virt, int byval) {
    cudnnBackendDescriptor_t t = mk(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t dims[4] = {n, c, h, w}, str[4] = {c * h * w, 1, w * c, c};
    const int64_t align = 16;
    const bool v = virt != 0, bv = byval != 0;
    TRY(set1(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    TRY(set1(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    TRY(set1(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
    TRY(set1(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    TRY(set1(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    if (v) TRY(set1(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v));
    if (bv) TRY(set1(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &bv));
    TRY(cudnnBackendFinalize(t));
    *out = t;
    return 0;
}

static int conv_desc(cudnnBackendDescriptor_t *out, const bufs *b) {
    cudnnBackendDescriptor_t c = mk(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t nd = 2, dil[2] = {1, 1}, st[2] = {b->st, b->st}, pad[2] = {b->pad, b->pad};
    TRY(set1(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct));
    TRY(set1(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    TRY(set1(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nd));
    TRY(set1(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
    TRY(set1(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, st));
    TRY(set1(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    TRY(set1(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    TRY(cudnnBackendFinalize(c));
    *out = c;
    return 0;
}

/* kind: 0 forward (a=X, b=W, c=Y), 1 backward data (a=dX, b=W, c=dY), 2 backward filter (a=X, b=dW, c=dY) */
static int conv_op(cudnnBackendDescriptor_t *out, int kind, cudnnBackendDescriptor_t cd, cudnnBackendDescriptor_t a,
                   cudnnBackendDescriptor_t bw, cudnnBackendDescriptor_t c) {
    static const cudnnBackendDescriptorType_t T[3] = {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                                                      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                                                      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    static const cudnnBackendAttributeName_t A[3][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY}};
    cudnnBackendDescriptor_t o = mk(T[kind]);
    const float alpha = 1.0f, beta = 0.0f;
    TRY(set1(o, A[kind][0], CUDNN_TYPE_FLOAT, 1, &alpha));
    TRY(set1(o, A[kind][1], CUDNN_TYPE_FLOAT, 1, &beta));
    TRY(set1(o, A[kind][2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd));
    TRY(set1(o, A[kind][3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a));
    TRY(set1(o, A[kind][4], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bw));
    TRY(set1(o, A[kind][5], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c));
    TRY(cudnnBackendFinalize(o));
    *out = o;
    return 0;
}

/* y = mode(x [, alpha2 * b]); for RELU_BWD: dx = relu_bwd(dy = x, x = b) */
static int pw_op2(cudnnBackendDescriptor_t *out, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                  cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y, float alpha2) {
    cudnnBackendDescriptor_t pd = mk(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    TRY(set1(pd, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    TRY(set1(pd, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
    TRY(cudnnBackendFinalize(pd));
    cudnnBackendDescriptor_t o = mk(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    TRY(set1(o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pd));
    if (mode == CUDNN_POINTWISE_RELU_BWD) {
        TRY(set1(o, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
        TRY(set1(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
        TRY(set1(o, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    } else {
        TRY(set1(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
        if (b) TRY(set1(o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
        if (alpha2 != 1.0f) TRY(set1(o, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alpha2));
        TRY(set1(o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    }
    TRY(cudnnBackendFinalize(o));
    *out = o;
    return 0;
}

static int pw_op(cudnnBackendDescriptor_t *out, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y) {
    return pw_op2(out, mode, x, b, y, 1.0f);
}

static int genstats_op(cudnnBackendDescriptor_t *out, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t sum,
                       cudnnBackendDescriptor_t sq) {
    cudnnBackendDescriptor_t o = mk(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
    const cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    TRY(set1(o, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode));
    TRY(set1(o, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
    TRY(set1(o, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    TRY(set1(o, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum));
    TRY(set1(o, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sq));
    TRY(cudnnBackendFinalize(o));
    *out = o;
    return 0;
}

static int reduce_op(cudnnBackendDescriptor_t *out, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t rd = mk(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnReduceTensorOp_t op = CUDNN_REDUCE_TENSOR_ADD;
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    TRY(set1(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &op));
    TRY(set1(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec));
    TRY(cudnnBackendFinalize(rd));
    cudnnBackendDescriptor_t o = mk(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    TRY(set1(o, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    TRY(set1(o, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    TRY(set1(o, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd));
    TRY(cudnnBackendFinalize(o));
    *out = o;
    return 0;
}

/* ---------------------------------------------------------------- patterns */
typedef struct graph {
    cudnnBackendDescriptor_t ops[16];
    int nops;
    int64_t uids[32];
    void *ptrs[32];
    int nio;
    char variant[96];
} graph;

static void io(graph *g, int64_t uid, void *p) {
    g->uids[g->nio] = uid;
    g->ptrs[g->nio++] = p;
}

typedef struct pattern {
    const char *id, *what;
    int nvariants;
    int (*build)(graph *g, bufs *b, int variant);
    double (*check)(bufs *b, int variant, int *bad); /* max error; *bad set when out of tolerance */
    void (*zero)(bufs *b);                            /* clear the outputs before the checked run */
    double (*unfused_ms)(bufs *b, double *floor_ms);  /* legacy + separate pass; fused floor */
} pattern;

/* variant v of the prologue patterns: 0 = virtual fp32, scale/bias fp16 (the types of
 * PaddlePaddle's fused_scale_bias_relu_conv_bnstats, which runs on sm_80+); 1 = virtual fp32,
 * scale/bias fp32; 2 = virtual fp16, scale/bias fp16 */
static cudnnDataType_t vtype(int v) { return v == 2 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT; }
static cudnnDataType_t sbtype(int v) { return v == 1 ? CUDNN_DATA_FLOAT : CUDNN_DATA_HALF; }
static void *sbptr(bufs *b, int v, int bias) {
    return v == 1 ? (bias ? b->bias : b->scale) : (bias ? b->bias16 : b->scale16);
}
static const char *vname(int v) {
    return v == 0 ? "virtual fp32, scale/bias fp16" : v == 1 ? "virtual fp32, scale/bias fp32" : "virtual fp16, scale/bias fp16";
}

/* X*scale+bias -> relu into a virtual tensor of the input's shape: *xr */
static int prologue(graph *g, bufs *b, int v, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t *xr) {
    cudnnBackendDescriptor_t sc, bi, t1, t2, t3;
    const cudnnDataType_t vt = vtype(v), st = sbtype(v);
    TRY(tens(&sc, U_SCALE, st, 1, b->c, 1, 1, 0, 0));
    TRY(tens(&bi, U_BIAS, st, 1, b->c, 1, 1, 0, 0));
    TRY(tens(&t1, U_V1, vt, b->n, b->c, b->h, b->w, 1, 0));
    TRY(tens(&t2, U_V2, vt, b->n, b->c, b->h, b->w, 1, 0));
    TRY(tens(&t3, U_V3, vt, b->n, b->c, b->h, b->w, 1, 0));
    if (pw_op(&g->ops[g->nops++], CUDNN_POINTWISE_MUL, x, sc, t1)) return 1;
    if (pw_op(&g->ops[g->nops++], CUDNN_POINTWISE_ADD, t1, bi, t2)) return 1;
    if (pw_op(&g->ops[g->nops++], CUDNN_POINTWISE_RELU_FWD, t2, NULL, t3)) return 1;
    io(g, U_SCALE, sbptr(b, v, 0));
    io(g, U_BIAS, sbptr(b, v, 1));
    snprintf(g->variant, sizeof g->variant, "%s", vname(v));
    *xr = t3;
    return 0;
}

static int build_a(graph *g, bufs *b, int v) {
    cudnnBackendDescriptor_t x, w, y, cd;
    TRY(tens(&x, U_X, CUDNN_DATA_HALF, b->n, b->c, b->h, b->w, 0, 0));
    TRY(tens(&w, U_W, CUDNN_DATA_HALF, b->k, b->c, b->r, b->s, 0, 0));
    TRY(tens(&y, U_Y, CUDNN_DATA_HALF, b->n, b->k, b->p, b->q, 0, 0));
    if (conv_desc(&cd, b) || conv_op(&g->ops[g->nops++], 0, cd, x, w, y)) return 1;
    io(g, U_X, b->x), io(g, U_W, b->wt), io(g, U_Y, b->y);
    return 0;
}

static int build_b(graph *g, bufs *b, int v) {
    cudnnBackendDescriptor_t x, w, y, cd, sum, sq;
    TRY(tens(&x, U_X, CUDNN_DATA_HALF, b->n, b->c, b->h, b->w, 0, 0));
    TRY(tens(&w, U_W, CUDNN_DATA_HALF, b->k, b->c, b->r, b->s, 0, 0));
    TRY(tens(&y, U_Y, CUDNN_DATA_HALF, b->n, b->k, b->p, b->q, 0, 0));
    TRY(tens(&sum, U_SUM, CUDNN_DATA_FLOAT, 1, b->k, 1, 1, 0, 0));
    TRY(tens(&sq, U_SQ, CUDNN_DATA_FLOAT, 1, b->k, 1, 1, 0, 0));
    if (conv_desc(&cd, b) || conv_op(&g->ops[g->nops++], 0, cd, x, w, y)) return 1;
    if (genstats_op(&g->ops[g->nops++], y, sum, sq)) return 1;
    io(g, U_X, b->x), io(g, U_W, b->wt), io(g, U_Y, b->y), io(g, U_SUM, b->sum), io(g, U_SQ, b->sq);
    return 0;
}

static int build_b2(graph *g, bufs *b, int v) {
    cudnnBackendDescriptor_t x, w, y, cd, sum, sq, yy;
    TRY(tens(&x, U_X, CUDNN_DATA_HALF, b->n, b->c, b->h, b->w, 0, 0));
    TRY(tens(&w, U_W, CUDNN_DATA_HALF, b->k, b->c, b->r, b->s, 0, 0));
    TRY(tens(&y, U_Y, CUDNN_DATA_HALF, b->n, b->k, b->p, b->q, 0, 0));
    TRY(tens(&yy, U_V1, CUDNN_DATA_FLOAT, b->n, b->k, b->p, b->q, 1, 0));
    TRY(tens(&sum, U_SUM, CUDNN_DATA_FLOAT, 1, b->k, 1, 1, 0, 0));
    TRY(tens(&sq, U_SQ, CUDNN_DATA_FLOAT, 1, b->k, 1, 1, 0, 0));
    if (conv_desc(&cd, b) || conv_op(&g->ops[g->nops++], 0, cd, x, w, y)) return 1;
    if (reduce_op(&g->ops[g->nops++], y, sum)) return 1;
    if (v == 0) { /* the sum of squares too */
        if (pw_op(&g->ops[g->nops++], CUDNN_POINTWISE_MUL, y, y, yy)) return 1;
        if (reduce_op(&g->ops[g->nops++], yy, sq)) return 1;
        io(g, U_SQ, b->sq);
        snprintf(g->variant, sizeof g->variant, "sum and sum of squares");
    } else {
        snprintf(g->variant, sizeof g->variant, "sum only");
    }
    io(g, U_X, b->x), io(g, U_W, b->wt), io(g, U_Y, b->y), io(g, U_SUM, b->sum);
    return 0;
}

static int build_c(graph *g, bufs *b, int v) {
    cudnnBackendDescriptor_t x, xr, w, y, cd, sum, sq;
    TRY(tens(&x, U_X, CUDNN_DATA_HALF, b->n, b->c, b->h, b->w, 0, 0));
    if (prologue(g, b, v, x, &xr)) return 1;
    TRY(tens(&w, U_W, CUDNN_DATA_HALF, b->k, b->c, b->r, b->s, 0, 0));
    TRY(tens(&y, U_Y, CUDNN_DATA_HALF, b->n, b->k, b->p, b->q, 0, 0));
    TRY(tens(&sum, U_SUM, CUDNN_DATA_FLOAT, 1, b->k, 1, 1, 0, 0));
    TRY(tens(&sq, U_SQ, CUDNN_DATA_FLOAT, 1, b->k, 1, 1, 0, 0));
    if (conv_desc(&cd, b) || conv_op(&g->ops[g->nops++], 0, cd, xr, w, y)) return 1;
    if (genstats_op(&g->ops[g->nops++], y, sum, sq)) return 1;
    io(g, U_X, b->x), io(g, U_W, b->wt), io(g, U_Y, b->y), io(g, U_SUM, b->sum), io(g, U_SQ, b->sq);
    return 0;
}

static const double EPS = 1e-5, EXPF = 0.1;
static int64_t g_count;

/* finalize over the K output channels; variant 0: eq scale/bias fp16, epsilon and factor
 * fp32 by value (PaddlePaddle's fused_bn_finalize); 1: eq scale/bias fp32; 2: eq fp16, the
 * scalars fp64 */
static int d_eq16(int v) { return v != 1; }
static int build_d(graph *g, bufs *b, int v) {
    cudnnBackendDescriptor_t t[15];
    const int64_t K = b->k;
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, eqt = d_eq16(v) ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT,
                          sct = v == 2 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    const int64_t u[12] = {U_SUM, U_SQ, U_SCALE, U_BIAS, U_PRM, U_PRV, U_URM, U_URV, U_MEAN, U_INVSTD, U_EQS, U_EQBIAS};
    for (int i = 0; i < 12; i++) TRY(tens(&t[i], u[i], i >= 10 ? eqt : F, 1, K, 1, 1, 0, 0));
    TRY(tens(&t[12], U_EPS, sct, 1, 1, 1, 1, 0, 1));
    TRY(tens(&t[13], U_EXPF, sct, 1, 1, 1, 1, 0, 1));
    TRY(tens(&t[14], U_CNT, CUDNN_DATA_INT64, 1, 1, 1, 1, 0, 1));
    cudnnBackendDescriptor_t o = mk(CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR);
    const cudnnBnFinalizeStatsMode_t mode = CUDNN_BN_FINALIZE_STATISTICS_TRAINING;
    TRY(set1(o, CUDNN_ATTR_OPERATION_BN_FINALIZE_STATS_MODE, CUDNN_TYPE_BN_FINALIZE_STATS_MODE, 1, &mode));
    TRY(set1(o, CUDNN_ATTR_OPERATION_BN_FINALIZE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &F));
    const cudnnBackendAttributeName_t an[15] = {
        CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SUM_DESC, CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SQ_SUM_DESC,
        CUDNN_ATTR_OPERATION_BN_FINALIZE_SCALE_DESC, CUDNN_ATTR_OPERATION_BN_FINALIZE_BIAS_DESC,
        CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_MEAN_DESC, CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_VAR_DESC,
        CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_MEAN_DESC,
        CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_VAR_DESC, CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_MEAN_DESC,
        CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_INV_STD_DESC, CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_BIAS_DESC, CUDNN_ATTR_OPERATION_BN_FINALIZE_EPSILON_DESC,
        CUDNN_ATTR_OPERATION_BN_FINALIZE_EXP_AVERATE_FACTOR_DESC, CUDNN_ATTR_OPERATION_BN_FINALIZE_ACCUM_COUNT_DESC};
    for (int i = 0; i < 15; i++) TRY(set1(o, an[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[i]));
    TRY(cudnnBackendFinalize(o));
    g->ops[g->nops++] = o;
    /* the inputs: sum/sq and the BN's scale/bias of the K output channels (dscale/dbias
     * buffers hold the scale and bias here: fp32 copies of hscale/hbias repeated) */
    g_count = (int64_t)b->n * b->p * b->q;
    static double eps, expf_;
    static float eps_f, expf_f;
    eps = EPS, expf_ = EXPF, eps_f = (float)EPS, expf_f = (float)EXPF;
    io(g, U_SUM, b->sum), io(g, U_SQ, b->sq), io(g, U_SCALE, b->dscale), io(g, U_BIAS, b->dbias);
    io(g, U_PRM, b->prm), io(g, U_PRV, b->prv), io(g, U_URM, b->urm), io(g, U_URV, b->urv);
    io(g, U_MEAN, b->mean), io(g, U_INVSTD, b->invstd);
    io(g, U_EQS, d_eq16(v) ? b->eqs16 : b->eqs), io(g, U_EQBIAS, d_eq16(v) ? b->eqbias16 : b->eqbias);
    if (v == 2)
        io(g, U_EPS, &eps), io(g, U_EXPF, &expf_);
    else
        io(g, U_EPS, &eps_f), io(g, U_EXPF, &expf_f);
    io(g, U_CNT, &g_count);
    snprintf(g->variant, sizeof g->variant, "eq scale/bias %s, epsilon and factor %s", d_eq16(v) ? "fp16" : "fp32",
             v == 2 ? "fp64" : "fp32");
    return 0;
}

static int build_e1(graph *g, bufs *b, int v) {
    cudnnBackendDescriptor_t dx, dg, w, dy, rin, cd;
    TRY(tens(&dy, U_DY, CUDNN_DATA_HALF, b->n, b->k, b->p, b->q, 0, 0));
    TRY(tens(&w, U_W, CUDNN_DATA_HALF, b->k, b->c, b->r, b->s, 0, 0));
    TRY(tens(&dg, U_V1, v ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT, b->n, b->c, b->h, b->w, 1, 0));
    TRY(tens(&rin, U_RIN, CUDNN_DATA_HALF, b->n, b->c, b->h, b->w, 0, 0));
    TRY(tens(&dx, U_DX, CUDNN_DATA_HALF, b->n, b->c, b->h, b->w, 0, 0));
    if (conv_desc(&cd, b) || conv_op(&g->ops[g->nops++], 1, cd, dg, w, dy)) return 1;
    if (pw_op(&g->ops[g->nops++], CUDNN_POINTWISE_RELU_BWD, dg, rin, dx)) return 1;
    io(g, U_DY, b->dy), io(g, U_W, b->wt), io(g, U_RIN, b->x), io(g, U_DX, b->dx);
    snprintf(g->variant, sizeof g->variant, "dgrad virtual %s", v ? "fp16" : "fp32");
    return 0;
}

/* e2 variants: 0 = PaddlePaddle's fused_dgrad_drelu_bnbwdweight graph (the ReLU's input
 * recomputed as ((Z - mean) * invstd) * gamma + beta, all fp32, virtual fp32); 1 = the
 * folded Z * scale + bias with scale/bias fp32, virtual fp32; 2 = folded, fp16 */
static int build_e2(graph *g, bufs *b, int v) {
    cudnnBackendDescriptor_t dx, dg, w, dy, z, sc, bi, t1, t2, t3, t4, cd, mean, inv, ds, db, eqdy, eqx, eqb;
    const cudnnDataType_t vt = v == 2 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT,
                          st = v == 2 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT, F = CUDNN_DATA_FLOAT;
    const int64_t C = b->c;
    TRY(tens(&dy, U_DY, CUDNN_DATA_HALF, b->n, b->k, b->p, b->q, 0, 0));
    TRY(tens(&w, U_W, CUDNN_DATA_HALF, b->k, b->c, b->r, b->s, 0, 0));
    TRY(tens(&dg, U_V1, vt, b->n, b->c, b->h, b->w, 1, 0));
    TRY(tens(&z, U_RIN, CUDNN_DATA_HALF, b->n, b->c, b->h, b->w, 0, 0)); /* the BN's input */
    TRY(tens(&sc, U_SCALE, st, 1, C, 1, 1, 0, 0));
    TRY(tens(&bi, U_BIAS, st, 1, C, 1, 1, 0, 0));
    TRY(tens(&t1, U_V2, vt, b->n, b->c, b->h, b->w, 1, 0));
    TRY(tens(&t2, U_V3, vt, b->n, b->c, b->h, b->w, 1, 0));
    TRY(tens(&t3, U_V4, vt, b->n, b->c, b->h, b->w, 1, 0));
    TRY(tens(&t4, U_V4 + 1, vt, b->n, b->c, b->h, b->w, 1, 0));
    TRY(tens(&dx, U_DX, CUDNN_DATA_HALF, b->n, b->c, b->h, b->w, 0, 0)); /* drelu'd gradient, written */
    TRY(tens(&mean, U_MEAN, F, 1, C, 1, 1, 0, 0));
    TRY(tens(&inv, U_INVSTD, F, 1, C, 1, 1, 0, 0));
    TRY(tens(&ds, U_DSCALE, F, 1, C, 1, 1, 0, 0));
    TRY(tens(&db, U_DBIAS, F, 1, C, 1, 1, 0, 0));
    TRY(tens(&eqdy, U_EQDY, F, 1, C, 1, 1, 0, 0));
    TRY(tens(&eqx, U_EQX, F, 1, C, 1, 1, 0, 0));
    TRY(tens(&eqb, U_EQB, F, 1, C, 1, 1, 0, 0));
    if (conv_desc(&cd, b) || conv_op(&g->ops[g->nops++], 1, cd, dg, w, dy)) return 1;
    if (v == 0) {
        if (pw_op2(&g->ops[g->nops++], CUDNN_POINTWISE_ADD, z, mean, t1, -1.0f)) return 1;
        if (pw_op(&g->ops[g->nops++], CUDNN_POINTWISE_MUL, t1, inv, t3)) return 1;
        if (pw_op(&g->ops[g->nops++], CUDNN_POINTWISE_MUL, t3, sc, t4)) return 1;
        if (pw_op(&g->ops[g->nops++], CUDNN_POINTWISE_ADD, t4, bi, t2)) return 1;
    } else {
        if (pw_op(&g->ops[g->nops++], CUDNN_POINTWISE_MUL, z, sc, t1)) return 1;
        if (pw_op(&g->ops[g->nops++], CUDNN_POINTWISE_ADD, t1, bi, t2)) return 1;
    }
    if (pw_op(&g->ops[g->nops++], CUDNN_POINTWISE_RELU_BWD, dg, t2, dx)) return 1;
    cudnnBackendDescriptor_t o = mk(CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR);
    TRY(set1(o, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &F));
    const cudnnBackendAttributeName_t an[10] = {
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC,      CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC,  CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC,        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC,  CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS};
    /* the BN's own scale (gamma) is the prologue's scale buffer: any values do for the check */
    const cudnnBackendDescriptor_t td[10] = {mean, inv, sc, z, dx, ds, db, eqdy, eqx, eqb};
    for (int i = 0; i < 10; i++) TRY(set1(o, an[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &td[i]));
    TRY(cudnnBackendFinalize(o));
    g->ops[g->nops++] = o;
    io(g, U_DY, b->dy), io(g, U_W, b->wt), io(g, U_RIN, b->x), io(g, U_SCALE, v == 2 ? b->scale16 : b->scale);
    io(g, U_BIAS, v == 2 ? b->bias16 : b->bias), io(g, U_DX, b->dx), io(g, U_MEAN, b->mean), io(g, U_INVSTD, b->invstd);
    io(g, U_DSCALE, b->dscale), io(g, U_DBIAS, b->dbias), io(g, U_EQDY, b->eqdy), io(g, U_EQX, b->eqx);
    io(g, U_EQB, b->eqb);
    snprintf(g->variant, sizeof g->variant, "%s",
             v == 0 ? "((Z-mean)*invstd)*gamma+beta, fp32" : v == 1 ? "Z*scale+bias, fp32" : "Z*scale+bias, fp16");
    return 0;
}

static int build_f(graph *g, bufs *b, int v) {
    cudnnBackendDescriptor_t x, xr, dw, dy, cd;
    TRY(tens(&x, U_X, CUDNN_DATA_HALF, b->n, b->c, b->h, b->w, 0, 0));
    if (prologue(g, b, v, x, &xr)) return 1;
    TRY(tens(&dy, U_DY, CUDNN_DATA_HALF, b->n, b->k, b->p, b->q, 0, 0));
    TRY(tens(&dw, U_DW, CUDNN_DATA_HALF, b->k, b->c, b->r, b->s, 0, 0));
    if (conv_desc(&cd, b) || conv_op(&g->ops[g->nops++], 2, cd, xr, dw, dy)) return 1;
    io(g, U_X, b->x), io(g, U_DY, b->dy), io(g, U_DW, b->dw);
    return 0;
}

/* ---------------------------------------------------------------- CPU references */
static inline float xin(const bufs *b, int prolog, int n, int hh, int ww, int c) {
    if (hh < 0 || ww < 0 || hh >= b->h || ww >= b->w) return 0.0f;
    const float x = h2f(b->hx[(((size_t)n * b->h + hh) * b->w + ww) * b->c + c]);
    if (!prolog) return x;
    const float t = x * b->hscale[c] + b->hbias[c];
    return t > 0.0f ? t : 0.0f;
}

/* A convolution's output against its reference: fp16 output rounding (5e-4 relative) and
 * fp32 accumulation are well inside 4e-3 relative; inputs rounded to fp16 inside the kernel
 * (a prologue's output) add random per-term errors, ~5e-4 * sqrt(sum of squared terms),
 * inside the 2e-2 * sqrt(ss) term. A missing or doubled term is not. */
static double conv_tol(double ref, double ss) { return 4e-3 * fabs(ref) + 2e-2 * sqrt(ss) + 1e-3; }

/* |got - ref| / tol, infinite when got is NaN or infinite (an output left unwritten: the
 * outputs are filled with NaN before the checked run), so it fails every "> 1" test */
static double ratio(double got, double ref, double tol) {
    const double r = fabs(got - ref) / tol;
    return r == r && r <= 1e300 ? r : INFINITY;
}

/* the forward conv at output point (n,p,q,k): the value and the sum of squared terms */
static double conv_ref(const bufs *b, int prolog, int n, int p, int q, int k, double *mag) {
    double acc = 0, m = 0;
    for (int r = 0; r < b->r; r++)
        for (int s = 0; s < b->s; s++) {
            const int hh = p * b->st - b->pad + r, ww = q * b->st - b->pad + s;
            if (hh < 0 || ww < 0 || hh >= b->h || ww >= b->w) continue;
            const uint16_t *wp = b->hw + (((size_t)k * b->r + r) * b->s + s) * b->c;
            for (int c = 0; c < b->c; c++) {
                const double t = (double)xin(b, prolog, n, hh, ww, c) * h2f(wp[c]);
                acc += t, m += t * t;
            }
        }
    *mag = m;
    return acc;
}

static uint16_t *fetch_h(const void *d, size_t n) {
    uint16_t *h = malloc(n * 2);
    if (!h) exit(2);
    CUDA_OK(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost));
    return h;
}

static float *fetch_f(const void *d, size_t n) {
    float *h = malloc(n * 4);
    if (!h) exit(2);
    CUDA_OK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
    return h;
}

#define NSAMP 768

/* Y at sampled points against the CPU; returns the max |error| (relative to the terms' magnitude) */
static double check_y(bufs *b, int prolog, const uint16_t *y, int *bad) {
    double worst = 0;
    for (int i = 0; i < NSAMP; i++) {
        const int n = (int)(frand() * b->n), p = (int)(frand() * b->p), q = (int)(frand() * b->q),
                  k = (int)(frand() * b->k);
        double mag;
        const double ref = conv_ref(b, prolog, n, p, q, k, &mag);
        const double got = h2f(y[(((size_t)n * b->p + p) * b->q + q) * b->k + k]);
        const double tol = conv_tol(ref, mag), rr = ratio(got, ref, tol);
        if (rr > worst) worst = rr;
        if (rr > 1 && *bad < 5) {
            printf("      MISMATCH y[n=%d p=%d q=%d k=%d] = %g, reference %g (tol %g)\n", n, p, q, k, got, ref, tol);
            (*bad)++;
        }
    }
    return worst;
}

/* per-channel sum and sum of squares of the GPU's Y in double against the GPU's statistics */
static double check_stats(bufs *b, const uint16_t *y, int want_sq, int *bad) {
    const int K = b->k;
    double *s = calloc((size_t)K, 8), *s2 = calloc((size_t)K, 8), *a = calloc((size_t)K, 8);
    float *gs = fetch_f(b->sum, (size_t)K), *gq = want_sq ? fetch_f(b->sq, (size_t)K) : NULL;
    if (!s || !s2 || !a) exit(2);
    for (size_t i = 0; i < b->ny; i++) {
        const double v = h2f(y[i]);
        const int k = (int)(i % (size_t)K);
        s[k] += v, s2[k] += v * v, a[k] += fabs(v);
    }
    double worst = 0;
    for (int k = 0; k < K; k++) {
        const double t1 = 5e-5 * a[k] + 1e-2, r1 = ratio(gs[k], s[k], t1);
        double r = r1;
        if (gq) {
            const double t2 = 5e-5 * s2[k] + 1e-2, r2 = ratio(gq[k], s2[k], t2);
            if (r2 > r) r = r2;
            if (r2 > 1 && *bad < 5) {
                printf("      MISMATCH sumsq[%d] = %g, reference %g\n", k, gq[k], s2[k]);
                (*bad)++;
            }
        }
        if (r1 > 1 && *bad < 5) {
            printf("      MISMATCH sum[%d] = %g, reference %g\n", k, gs[k], s[k]);
            (*bad)++;
        }
        if (r > worst) worst = r;
    }
    free(s), free(s2), free(a), free(gs), free(gq);
    return worst;
}

static double check_a(bufs *b, int v, int *bad) {
    uint16_t *y = fetch_h(b->y, b->ny);
    const double e = check_y(b, 0, y, bad);
    free(y);
    return e;
}

static double check_b(bufs *b, int v, int *bad) {
    uint16_t *y = fetch_h(b->y, b->ny);
    double e = check_y(b, 0, y, bad);
    const double e2 = check_stats(b, y, 1, bad);
    free(y);
    return e > e2 ? e : e2;
}

static double check_b2(bufs *b, int v, int *bad) {
    uint16_t *y = fetch_h(b->y, b->ny);
    double e = check_y(b, 0, y, bad);
    const double e2 = check_stats(b, y, v == 0, bad);
    free(y);
    return e > e2 ? e : e2;
}

static double check_c(bufs *b, int v, int *bad) {
    uint16_t *y = fetch_h(b->y, b->ny);
    double e = check_y(b, 1, y, bad);
    const double e2 = check_stats(b, y, 1, bad);
    free(y);
    return e > e2 ? e : e2;
}

/* finalize: running variance unbiased (M/(M-1)) as the legacy API does; a biased one is
 * reported, not failed */
static double check_d(bufs *b, int v, int *bad) {
    const int K = b->k;
    const double M = (double)b->n * b->p * b->q;
    float *rm = fetch_f(b->urm, (size_t)K), *rv = fetch_f(b->urv, (size_t)K), *mu = fetch_f(b->mean, (size_t)K),
          *is = fetch_f(b->invstd, (size_t)K), *es = NULL, *eb = NULL;
    if (d_eq16(v)) {
        uint16_t *h1 = fetch_h(b->eqs16, (size_t)K), *h2 = fetch_h(b->eqbias16, (size_t)K);
        es = malloc((size_t)K * 4), eb = malloc((size_t)K * 4);
        if (!es || !eb) exit(2);
        for (int k = 0; k < K; k++) es[k] = h2f(h1[k]), eb[k] = h2f(h2[k]);
        free(h1), free(h2);
    } else {
        es = fetch_f(b->eqs, (size_t)K), eb = fetch_f(b->eqbias, (size_t)K);
    }
    double worst = 0;
    int biased = 0, flipped = 0;
    const double eqtol = d_eq16(v) ? 2e-3 : 1e-4;
    for (int k = 0; k < K; k++) {
        const double mean = b->hsum[k] / M, var = b->hsq[k] / M - mean * mean, inv = 1.0 / sqrt(var + EPS);
        const double sc = b->hscale[k % b->c], bi = b->hbias[k % b->c];
        const double ref[6] = {mean, inv, sc * inv, bi - mean * sc * inv, (1 - EXPF) * b->hprm[k] + EXPF * mean,
                               (1 - EXPF) * b->hprv[k] + EXPF * var * M / (M - 1)};
        const double got[6] = {mu[k], is[k], es[k], eb[k], rm[k], rv[k]};
        const double tol[6] = {1e-4, 1e-4, eqtol, eqtol, 1e-4, 1e-4};
        static const char *nm[6] = {"saved mean", "saved inv-std", "eq scale", "eq bias", "running mean",
                                    "running var"};
        for (int j = 0; j < 6; j++) {
            const double e = ratio(got[j], ref[j], tol[j] * (1 + fabs(ref[j])));
            if (j == 5 && e > 1) {
                const double alt = (1 - EXPF) * b->hprv[k] + EXPF * var;
                if (fabs(got[j] - alt) <= tol[j] * (1 + fabs(alt))) {
                    biased++;
                    continue;
                }
            }
            if (j >= 4 && e > 1) { /* the factor weighting the old running value instead */
                const double stat = j == 4 ? mean : var * M / (M - 1), old = j == 4 ? b->hprm[k] : b->hprv[k];
                const double alt = EXPF * old + (1 - EXPF) * stat, alt2 = EXPF * old + (1 - EXPF) * (j == 4 ? mean : var);
                if (fabs(got[j] - alt) <= tol[j] * (1 + fabs(alt)) || fabs(got[j] - alt2) <= tol[j] * (1 + fabs(alt2))) {
                    flipped++;
                    continue;
                }
            }
            if (e > worst) worst = e;
            if (e > 1 && *bad < 5) {
                printf("      MISMATCH %s[%d] = %g, reference %g\n", nm[j], k, got[j], ref[j]);
                (*bad)++;
            }
        }
    }
    if (biased) printf("      note: running var updated with the biased variance (%d channels)\n", biased);
    if (flipped)
        printf("      note: running stats = factor * old + (1 - factor) * batch (%d values): the factor weights the old "
               "value, not the batch's\n", flipped);
    free(rm), free(rv), free(mu), free(is), free(es), free(eb);
    return worst;
}

/* dgrad at input point (n,h,w,c) */
static double dgrad_ref(const bufs *b, int n, int hh, int ww, int c, double *mag) {
    double acc = 0, m = 0;
    for (int r = 0; r < b->r; r++)
        for (int s = 0; s < b->s; s++) {
            const int ph = hh + b->pad - r, qw = ww + b->pad - s;
            if (ph < 0 || qw < 0 || ph % b->st || qw % b->st) continue;
            const int p = ph / b->st, q = qw / b->st;
            if (p >= b->p || q >= b->q) continue;
            const uint16_t *dyp = b->hdy + (((size_t)n * b->p + p) * b->q + q) * b->k;
            for (int k = 0; k < b->k; k++) {
                const double t = (double)h2f(dyp[k]) * h2f(b->hw[(((size_t)k * b->r + r) * b->s + s) * b->c + c]);
                acc += t, m += t * t;
            }
        }
    *mag = m;
    return acc;
}

/* e1 (mask: X > 0) and e2 (mask: X*scale+bias > 0) at sampled points of dX */
static double check_dx(bufs *b, int mode, const uint16_t *dx, int *bad) {
    double worst = 0;
    for (int i = 0; i < NSAMP; i++) {
        const int n = (int)(frand() * b->n), hh = (int)(frand() * b->h), ww = (int)(frand() * b->w),
                  c = (int)(frand() * b->c);
        const float x = h2f(b->hx[(((size_t)n * b->h + hh) * b->w + ww) * b->c + c]);
        const float pre = mode == 3   ? (x - b->hmean[c]) * b->hinvstd[c] * b->hscale[c] + b->hbias[c]
                          : mode == 2 ? x * b->hscale[c] + b->hbias[c]
                                      : x;
        double mag;
        double ref = dgrad_ref(b, n, hh, ww, c, &mag);
        if (mode >= 2 && fabsf(pre) < 2e-3f * (fabsf(x * b->hscale[c] * (mode == 3 ? b->hinvstd[c] : 1.0f)) +
                                               fabsf(b->hbias[c]) + 1.0f)) {
            i--; /* on the ReLU's edge: fp16 intermediates may round either way; another sample */
            continue;
        }
        if (mode && !(pre > 0.0f)) ref = 0, mag = 0;
        const double got = h2f(dx[(((size_t)n * b->h + hh) * b->w + ww) * b->c + c]);
        const double tol = conv_tol(ref, mag), rr = ratio(got, ref, tol);
        if (rr > worst) worst = rr;
        if (rr > 1 && *bad < 5) {
            printf("      MISMATCH dx[n=%d h=%d w=%d c=%d] = %g, reference %g (tol %g)\n", n, hh, ww, c, got, ref, tol);
            (*bad)++;
        }
    }
    return worst;
}

static double check_e1(bufs *b, int v, int *bad) {
    uint16_t *dx = fetch_h(b->dx, b->nx);
    const double e = check_dx(b, 1, dx, bad);
    free(dx);
    return e;
}

/* dX_bn = r[0]*dA + r[1]*Z + r[2] for BN's gradient dX = g*inv*(dA - mean(dA) - xhat*mean(dA*xhat)),
 * xhat = (Z - mu)*inv, from the sums sd = sum(dA), sdx = sum(dA*xhat) over M elements */
static void dbn_coef(double g, double inv, double mu, double sd, double sdx, double M, double r[3]) {
    r[0] = g * inv;
    r[1] = -r[0] * inv * sdx / M;
    r[2] = -r[0] * sd / M - r[1] * mu;
}

/* e2: dX at samples, then dscale = sum(dA*xhat), dbias = sum(dA) over the GPU's dA, and the
 * dBN coefficients of dX_bn = eq_dy*dA + eq_x*Z + eq_b, as derived from
 * dX = g*inv*(dA - mean(dA) - xhat*mean(dA*xhat)); a coefficient mismatch is printed with
 * the convention assumed (cuDNN documents no formula), dscale/dbias mismatches fail */
static double check_e2(bufs *b, int v, int *bad) {
    uint16_t *dx = fetch_h(b->dx, b->nx);
    double worst = check_dx(b, v == 0 ? 3 : 2, dx, bad);
    const int C = b->c;
    const double M = (double)b->n * b->h * b->w;
    double *sd = calloc((size_t)C, 8), *sdx = calloc((size_t)C, 8), *ad = calloc((size_t)C, 8);
    if (!sd || !sdx || !ad) exit(2);
    for (size_t i = 0; i < b->nx; i++) {
        const int c = (int)(i % (size_t)C);
        const double d = h2f(dx[i]), xh = (h2f(b->hx[i]) - b->hmean[c]) * b->hinvstd[c];
        sd[c] += d, sdx[c] += d * xh, ad[c] += fabs(d) * (1 + fabs(xh));
    }
    float *ds = fetch_f(b->dscale, (size_t)C), *db = fetch_f(b->dbias, (size_t)C), *ey = fetch_f(b->eqdy, (size_t)C),
          *ex = fetch_f(b->eqx, (size_t)C), *eb = fetch_f(b->eqb, (size_t)C);
    int coef_off = 0, swapped = 0;
    double coef_worst = 0;
    for (int c = 0; c < C; c++) {
        const double t = 5e-5 * ad[c] + 1e-2;
        double e1 = ratio(ds[c], sdx[c], t), e2 = ratio(db[c], sd[c], t);
        if ((e1 > 1 || e2 > 1) && fabs(ds[c] - sd[c]) <= t && fabs(db[c] - sdx[c]) <= t) {
            if (!swapped++) printf("      note: DBN_SCALE holds sum(dy) and DBN_BIAS sum(dy*xhat): swapped against their names\n");
            e1 = e2 = 0;
        }
        if ((e1 > 1 || e2 > 1) && *bad < 5) {
            printf("      MISMATCH dscale[%d] = %g (ref %g), dbias[%d] = %g (ref %g)\n", c, ds[c], sdx[c], c, db[c], sd[c]);
            (*bad)++;
        }
        if (e1 > worst) worst = e1;
        if (e2 > worst) worst = e2;
        double r[3];
        dbn_coef(b->hscale[c], b->hinvstd[c], b->hmean[c], sd[c], sdx[c], M, r);
        const double got[3] = {ey[c], ex[c], eb[c]};
        for (int j = 0; j < 3; j++) {
            const double e = ratio(got[j], r[j], 1e-3 * (fabs(r[j]) + 1e-3));
            if (e > coef_worst) coef_worst = e;
            if (e > 1 && coef_off++ < 3)
                printf("      note: dBN coefficient %d of channel %d = %g, assumed formula gives %g\n", j, c, got[j], r[j]);
        }
    }
    printf("      dBN apply coefficients (eq_dy, eq_x, eq_bias) vs the assumed formula: max err/tol %.3g%s\n", coef_worst,
           coef_off ? " (NOT failed: convention unverified)" : "");
    free(dx), free(sd), free(sdx), free(ad), free(ds), free(db), free(ey), free(ex), free(eb);
    return worst;
}

/* the weight gradient at (k,r,s,c), the input through the prologue when prolog */
static double wgrad_ref(const bufs *b, int prolog, int k, int r, int s, int c, double *mag) {
    double acc = 0, m = 0;
    for (int n = 0; n < b->n; n++)
        for (int p = 0; p < b->p; p++)
            for (int q = 0; q < b->q; q++) {
                const float x = xin(b, prolog, n, p * b->st - b->pad + r, q * b->st - b->pad + s, c);
                if (x == 0.0f) continue;
                const double t = (double)x * h2f(b->hdy[(((size_t)n * b->p + p) * b->q + q) * b->k + k]);
                acc += t, m += t * t;
            }
    *mag = m;
    return acc;
}

static double check_dw(bufs *b, int prolog, int *bad) {
    uint16_t *dw = fetch_h(b->dw, b->nw);
    double worst = 0;
    for (int i = 0; i < 48; i++) {
        const int k = (int)(frand() * b->k), r = (int)(frand() * b->r), s = (int)(frand() * b->s),
                  c = (int)(frand() * b->c);
        double mag;
        const double acc = wgrad_ref(b, prolog, k, r, s, c, &mag);
        const double got = h2f(dw[(((size_t)k * b->r + r) * b->s + s) * b->c + c]);
        const double tol = conv_tol(acc, mag), rr = ratio(got, acc, tol);
        if (rr > worst) worst = rr;
        if (rr > 1 && *bad < 5) {
            printf("      MISMATCH dw[k=%d r=%d s=%d c=%d] = %g, reference %g (tol %g)\n", k, r, s, c, got, acc, tol);
            (*bad)++;
        }
    }
    free(dw);
    return worst;
}

static double check_f(bufs *b, int v, int *bad) { return check_dw(b, 1, bad); }

static void zero_y(bufs *b) {
    CUDA_OK(cudaMemset(b->y, 0xff, b->ny * 2)); /* NaN fp16: an unwritten element fails */
    CUDA_OK(cudaMemset(b->sum, 0, (size_t)b->k * 4));
    CUDA_OK(cudaMemset(b->sq, 0, (size_t)b->k * 4));
}

static void zero_d(bufs *b) {
    /* the BN scale/bias of the K channels for finalize: hscale/hbias repeated */
    float *t = malloc((size_t)b->k * 4), *u = malloc((size_t)b->k * 4);
    if (!t || !u) exit(2);
    for (int k = 0; k < b->k; k++) t[k] = b->hscale[k % b->c], u[k] = b->hbias[k % b->c];
    CUDA_OK(cudaMemcpy(b->dscale, t, (size_t)b->k * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(b->dbias, u, (size_t)b->k * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(b->sum, b->hsum, (size_t)b->k * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(b->sq, b->hsq, (size_t)b->k * 4, cudaMemcpyHostToDevice));
    void *outs[] = {b->mean, b->invstd, b->urm, b->urv, b->eqs, b->eqbias}; /* NaN until written */
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) CUDA_OK(cudaMemset(outs[i], 0xff, (size_t)b->k * 4));
    CUDA_OK(cudaMemset(b->eqs16, 0xff, (size_t)b->k * 2));
    CUDA_OK(cudaMemset(b->eqbias16, 0xff, (size_t)b->k * 2));
    free(t), free(u);
}

static void restore_mean(bufs *b) { /* d overwrote mean/invstd, which e2 reads */
    CUDA_OK(cudaMemcpy(b->mean, b->hmean, (size_t)b->c * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(b->invstd, b->hinvstd, (size_t)b->c * 4, cudaMemcpyHostToDevice));
}

static void zero_dx(bufs *b) {
    restore_mean(b);
    CUDA_OK(cudaMemset(b->dx, 0xff, b->nx * 2));
    CUDA_OK(cudaMemset(b->dscale, 0, (size_t)b->c * 4));
    CUDA_OK(cudaMemset(b->dbias, 0, (size_t)b->c * 4));
    CUDA_OK(cudaMemset(b->eqdy, 0xff, (size_t)b->c * 4)); /* NaN: coefficients not written show */
    CUDA_OK(cudaMemset(b->eqx, 0xff, (size_t)b->c * 4));
    CUDA_OK(cudaMemset(b->eqb, 0xff, (size_t)b->c * 4));
}

static void zero_dw(bufs *b) { CUDA_OK(cudaMemset(b->dw, 0xff, b->nw * 2)); }

/* ---------------------------------------------------------------- legacy API baselines */
typedef struct legacy {
    double fwd, bwd_data, bwd_filter; /* ms, best algorithm, median */
    int afwd, adata, afilter;
} legacy;

static double ms_bytes(double bytes) { return bytes / (BW_TBS * 1e12) * 1e3; }

static legacy g_leg;

static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            const double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return n ? v[n / 2] : 0;
}

static void legacy_time(bufs *b) {
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    DNN_OK(cudnnCreateTensorDescriptor(&xd));
    DNN_OK(cudnnCreateTensorDescriptor(&yd));
    DNN_OK(cudnnCreateFilterDescriptor(&wd));
    DNN_OK(cudnnCreateConvolutionDescriptor(&cd));
    DNN_OK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, b->n, b->c, b->h, b->w));
    DNN_OK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, b->n, b->k, b->p, b->q));
    DNN_OK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, b->k, b->c, b->r, b->s));
    DNN_OK(cudnnSetConvolution2dDescriptor(cd, b->pad, b->pad, b->st, b->st, 1, 1, CUDNN_CROSS_CORRELATION,
                                           CUDNN_DATA_FLOAT));
    DNN_OK(cudnnSetConvolutionMathType(cd, CUDNN_TENSOR_OP_MATH));
    const float one = 1.0f, zero = 0.0f;
    int got = 0;
    double t[MAX_ITERS];
    const int it = g_iters > MAX_ITERS ? MAX_ITERS : g_iters;
    cudnnConvolutionFwdAlgoPerf_t pf[8];
    DNN_OK(cudnnFindConvolutionForwardAlgorithmEx(handle, xd, b->x, wd, b->wt, cd, yd, b->y, 8, &got, pf, b->ws,
                                                  b->ws_bytes));
    g_leg.afwd = got > 0 && pf[0].status == CUDNN_STATUS_SUCCESS ? (int)pf[0].algo : -1;
    cudnnConvolutionBwdDataAlgoPerf_t pd[8];
    DNN_OK(cudnnFindConvolutionBackwardDataAlgorithmEx(handle, wd, b->wt, yd, b->dy, cd, xd, b->dx, 8, &got, pd, b->ws,
                                                       b->ws_bytes));
    g_leg.adata = got > 0 && pd[0].status == CUDNN_STATUS_SUCCESS ? (int)pd[0].algo : -1;
    cudnnConvolutionBwdFilterAlgoPerf_t pw[8];
    DNN_OK(cudnnFindConvolutionBackwardFilterAlgorithmEx(handle, xd, b->x, yd, b->dy, cd, wd, b->dw, 8, &got, pw,
                                                         b->ws, b->ws_bytes));
    g_leg.afilter = got > 0 && pw[0].status == CUDNN_STATUS_SUCCESS ? (int)pw[0].algo : -1;
    for (int which = 0; which < 3; which++) {
        const int algo = which == 0 ? g_leg.afwd : which == 1 ? g_leg.adata : g_leg.afilter;
        double *dst = which == 0 ? &g_leg.fwd : which == 1 ? &g_leg.bwd_data : &g_leg.bwd_filter;
        *dst = -1;
        if (algo < 0) continue;
        for (int i = 0; i < g_warmup + it; i++) {
            if (i >= g_warmup) CUDA_OK(cudaEventRecord(evs[i - g_warmup], 0));
            if (which == 0)
                DNN_OK(cudnnConvolutionForward(handle, &one, xd, b->x, wd, b->wt, cd, (cudnnConvolutionFwdAlgo_t)algo,
                                               b->ws, b->ws_bytes, &zero, yd, b->y));
            else if (which == 1)
                DNN_OK(cudnnConvolutionBackwardData(handle, &one, wd, b->wt, yd, b->dy, cd,
                                                    (cudnnConvolutionBwdDataAlgo_t)algo, b->ws, b->ws_bytes, &zero, xd,
                                                    b->dx));
            else
                DNN_OK(cudnnConvolutionBackwardFilter(handle, &one, xd, b->x, yd, b->dy, cd,
                                                      (cudnnConvolutionBwdFilterAlgo_t)algo, b->ws, b->ws_bytes, &zero,
                                                      wd, b->dw));
        }
        CUDA_OK(cudaEventRecord(evs[it], 0));
        CUDA_OK(cudaEventSynchronize(evs[it]));
        for (int i = 0; i < it; i++) {
            float ms;
            CUDA_OK(cudaEventElapsedTime(&ms, evs[i], evs[i + 1]));
            t[i] = ms;
        }
        *dst = median(t, it);
    }
    /* the legacy results must be right too: the baseline is only worth its speed if so */
    int bad = 0;
    CUDA_OK(cudaDeviceSynchronize());
    const double ef = g_leg.afwd >= 0 ? check_a(b, 0, &bad) : -1;
    double ed = -1, ew = -1;
    if (g_leg.adata >= 0) {
        uint16_t *dx = fetch_h(b->dx, b->nx);
        ed = check_dx(b, 0, dx, &bad);
        free(dx);
    }
    if (g_leg.afilter >= 0) ew = check_dw(b, 0, &bad);
    printf("  legacy API: fwd algo %d %.3f ms (err/tol %.3g), bwd data algo %d %.3f ms (%.3g), bwd filter algo %d "
           "%.3f ms (%.3g)\n",
           g_leg.afwd, g_leg.fwd, ef, g_leg.adata, g_leg.bwd_data, ed, g_leg.afilter, g_leg.bwd_filter, ew);
    if (bad) {
        printf("  LEGACY RESULT WRONG (the reference or the data is at fault: see the mismatches above)\n");
        g_bad++;
    }
    cudnnDestroyTensorDescriptor(xd), cudnnDestroyTensorDescriptor(yd), cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyConvolutionDescriptor(cd);
}

/* unfused equivalents: the legacy conv + the separate pass's bytes at BW_TBS; *floor: the
 * fused kernel's own bytes at BW_TBS (its memory floor; a conv may be compute-bound above it) */
static double unf_a(bufs *b, double *fl) {
    *fl = ms_bytes(2.0 * (b->nx + b->ny + b->nw));
    return g_leg.fwd;
}
static double unf_b(bufs *b, double *fl) { /* + a pass reading Y for the statistics */
    *fl = ms_bytes(2.0 * (b->nx + b->ny + b->nw));
    return g_leg.fwd + ms_bytes(2.0 * b->ny);
}
static double unf_c(bufs *b, double *fl) { /* + the BN apply (read X, write X') + statistics */
    *fl = ms_bytes(2.0 * (b->nx + b->ny + b->nw));
    return g_leg.fwd + ms_bytes(4.0 * b->nx + 2.0 * b->ny);
}
static double unf_d(bufs *b, double *fl) {
    *fl = ms_bytes(4.0 * 14 * b->k);
    return -1; /* kiln folds this into its BN kernels */
}
static double unf_e1(bufs *b, double *fl) { /* + ReLU grad: read dX and the mask, write dX */
    *fl = ms_bytes(2.0 * (2 * b->nx + b->ny + b->nw));
    return g_leg.bwd_data + ms_bytes(6.0 * b->nx);
}
static double unf_e2(bufs *b, double *fl) { /* + ReLU grad and the dBN reductions: read dX, Z; write dA; read dA, Z */
    *fl = ms_bytes(2.0 * (3 * b->nx + b->ny + b->nw));
    return g_leg.bwd_data + ms_bytes(10.0 * b->nx);
}
static double unf_f(bufs *b, double *fl) { /* the activation read from memory instead: + its write and read */
    *fl = ms_bytes(2.0 * (b->nx + b->ny + b->nw));
    return g_leg.bwd_filter + ms_bytes(4.0 * b->nx);
}

static const pattern PATTERNS[] = {
    {"a", "ConvFwd (graph API)", 1, build_a, check_a, zero_y, unf_a},
    {"b", "ConvFwd + GenStats", 1, build_b, check_b, zero_y, unf_b},
    {"b2", "ConvFwd + Reduction(Y, Y*Y)", 2, build_b2, check_b2, zero_y, unf_b},
    {"c", "scale+bias+ReLU -> ConvFwd + GenStats", 3, build_c, check_c, zero_y, unf_c},
    {"d", "BN finalize statistics", 3, build_d, check_d, zero_d, unf_d},
    {"e1", "ConvBwdData + ReLU_BWD", 2, build_e1, check_e1, zero_dx, unf_e1},
    {"e2", "ConvBwdData + dReLU(scale,bias) + BN_BWD_WEIGHTS", 3, build_e2, check_e2, zero_dx, unf_e2},
    {"f", "scale+bias+ReLU -> ConvBwdFilter", 3, build_f, check_f, zero_dw, unf_f},
};
#define NPATTERNS ((int)(sizeof PATTERNS / sizeof PATTERNS[0]))

/* ---------------------------------------------------------------- engines, plans, runs */
typedef struct row {
    const char *pat, *shape;
    char status[200], variant[96], engine[64];
    int supported, n_a, n_fb, n_plans, n_tried, n_idx;
    double best_ms, unfused_ms, floor_ms, err;
} row;

static row rows[NPATTERNS * NSHAPES];
static int nrows;

static const char *num_note(int n) {
    static const char *s[] = {"tensor_core", "down_convert", "reduced_prec_reduction", "fft", "nondeterministic",
                              "winograd", "winograd4x4", "winograd6x6", "winograd13x13", "strict_nan"};
    return n >= 0 && n < 10 ? s[n] : "?";
}

static const char *beh_note(int n) {
    static const char *s[] = {"runtime_compilation", "filter_int8x32", "bias_int8x32", "cuda_graph_native",
                              "cublaslt"};
    return n >= 0 && n < 5 ? s[n] : "?";
}

/* engine configs from heuristics mode; *n the count (-1 when the heuristics did not finalize) */
static int heur(cudnnBackendDescriptor_t opg, cudnnBackendHeurMode_t mode, cudnnBackendDescriptor_t *cfgs, int max,
                int *n, char *why, size_t why_n) {
    *n = -1;
    cudnnBackendDescriptor_t h = mk(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    int64_t cnt = 0;
    if (dnn_try(set1(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &opg), "heur graph",
                __LINE__) ||
        dnn_try(set1(h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode), "heur mode", __LINE__) ||
        dnn_try(cudnnBackendFinalize(h), "heuristics finalize", __LINE__) ||
        dnn_try(cudnnBackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &cnt, NULL),
                "heuristics count", __LINE__)) {
        snprintf(why, why_n, "%.290s", g_err);
        return 0;
    }
    if (cnt > max) cnt = max;
    for (int64_t i = 0; i < cnt; i++) cfgs[i] = mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t got = 0;
    if (cnt > 0 && dnn_try(cudnnBackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                    cnt, &got, cfgs),
                           "heuristics results", __LINE__)) {
        snprintf(why, why_n, "%.290s", g_err);
        return 0;
    }
    *n = (int)got;
    return (int)got;
}

static void describe_engine(cudnnBackendDescriptor_t cfg, int64_t *gidx, char *out, size_t n) {
    cudnnBackendDescriptor_t e = mk(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t cnt = 0;
    *gidx = -1;
    out[0] = 0;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &e) !=
        CUDNN_STATUS_SUCCESS)
        return;
    cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, gidx);
    cudnnBackendNumericalNote_t nn[16];
    cudnnBackendBehaviorNote_t bn[16];
    int64_t nnn = 0, nbn = 0;
    if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 16, &nnn, nn) !=
        CUDNN_STATUS_SUCCESS)
        nnn = 0;
    if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 16, &nbn, bn) !=
        CUDNN_STATUS_SUCCESS)
        nbn = 0;
    size_t len = 0;
    for (int64_t i = 0; i < nnn && i < 16 && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s%s", len ? "," : "", num_note((int)nn[i]));
    for (int64_t i = 0; i < nbn && i < 16 && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s%s", len ? "," : "", beh_note((int)bn[i]));
}

static int execute(cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t vp) {
    return dnn_try(cudnnBackendExecute(handle, plan, vp), "execute", __LINE__);
}

static void sync_or_die(const char *what) {
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        fprintf(stderr, "cudnn_fusion_probe: CUDA error after %s: %s\n", what, cudaGetErrorString(e));
        exit(2);
    }
}

/* one engine config: plan, variant pack, a checked run, the timing; 1 when timed */
static int try_cfg(const pattern *pt, bufs *b, int v, graph *g, row *rw, cudnnBackendDescriptor_t cfg,
                   const char *src, int i, char *first_fail) {
    int timed = 0;
    int64_t cnt = 0;
    int64_t gidx;
    char notes[160];
    describe_engine(cfg, &gidx, notes, sizeof notes);
    rw->n_tried++;
    printf("      cfg %2d (%s) engine %3lld [%s]: ", i, src, (long long)gidx, notes);
    cudnnBackendDescriptor_t plan = mk(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    int64_t wsz = 0;
    if (dnn_try(set1(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle), "plan handle",
                __LINE__) ||
        dnn_try(set1(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg),
                "plan cfg", __LINE__) ||
        dnn_try(cudnnBackendFinalize(plan), "plan finalize", __LINE__) ||
        dnn_try(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                         &cnt, &wsz),
                "plan workspace", __LINE__)) {
        printf("no plan: %s\n", g_err);
        if (!first_fail[0]) snprintf(first_fail, 200, "plan: %.180s", g_err);
        return 0;
    }
    rw->n_plans++;
    printf("plan ok, workspace %lld B", (long long)wsz);
    if ((size_t)wsz > b->ws_bytes) {
        printf(" (over the %zu B allocated: not run)\n", b->ws_bytes);
        return 0;
    }
    cudnnBackendDescriptor_t vp = mk(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    if (dnn_try(set1(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, g->nio, g->uids), "vp uids",
                __LINE__) ||
        dnn_try(set1(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, g->nio, g->ptrs), "vp ptrs",
                __LINE__) ||
        dnn_try(set1(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &b->ws), "vp ws",
                __LINE__) ||
        dnn_try(cudnnBackendFinalize(vp), "variant pack finalize", __LINE__)) {
        printf("; variant pack: %s\n", g_err);
        return 0;
    }
    pt->zero(b);
    sync_or_die("zeroing");
    if (execute(plan, vp)) {
        printf("; execute failed: %s\n", g_err);
        if (!first_fail[0]) snprintf(first_fail, 200, "execute: %.180s", g_err);
        sync_or_die("a failed execute");
        return 0;
    }
    sync_or_die("execute");
    int bad = 0;
    const double err = pt->check(b, v, &bad);
    double t[MAX_ITERS];
    const int it = g_iters > MAX_ITERS ? MAX_ITERS : g_iters;
    int ok = 1;
    for (int k = 0; k < g_warmup + it && ok; k++) {
        if (k >= g_warmup) CUDA_OK(cudaEventRecord(evs[k - g_warmup], 0));
        ok = !execute(plan, vp);
    }
    CUDA_OK(cudaEventRecord(evs[it], 0));
    sync_or_die("timing");
    for (int k = 0; k < it && ok; k++) {
        float ms;
        CUDA_OK(cudaEventElapsedTime(&ms, evs[k], evs[k + 1]));
        t[k] = ms;
    }
    if (!ok) {
        printf("; a timed execute failed: %s\n", g_err);
        return 0;
    }
    const double med = median(t, it);
    printf("; %.3f ms (median of %d, min %.3f); max err/tol %.3g%s\n", med, it, t[0], err,
           bad ? "  WRONG" : "");
    if (bad) {
        g_bad++;
        snprintf(rw->status, sizeof rw->status, "WRONG RESULT (engine %lld)", (long long)gidx);
        return 0;
    }
    /* run again without clearing: do the outputs accumulate across executions? */
    int bad2 = 0;
    printf("        re-check after the timed runs, outputs not cleared:\n");
    const double err2 = pt->check(b, v, &bad2);
    if (!bad2) printf("        still right (the outputs do not accumulate across executions)\n");
    if (bad2) printf("        after %d more executions without clearing the outputs they no longer match "
                     "(err/tol %.3g): this engine ACCUMULATES into its outputs (clear them per step)\n",
                     g_warmup + it, err2);
    timed = 1;
    if (rw->best_ms < 0 || med < rw->best_ms) {
        rw->best_ms = med, rw->err = err;
        snprintf(rw->engine, sizeof rw->engine, "%lld%s", (long long)gidx, strstr(notes, "runtime") ? " rt" : "");
    }
    return timed;
}

static void run_pattern(const pattern *pt, bufs *b, const shape *sh) {
    row *rw = &rows[nrows++];
    memset(rw, 0, sizeof *rw);
    rw->pat = pt->id, rw->shape = sh->name, rw->best_ms = -1;
    rw->unfused_ms = pt->unfused_ms(b, &rw->floor_ms);
    snprintf(rw->status, sizeof rw->status, "not tried");
    printf("  [%s] %s\n", pt->id, pt->what);
    for (int v = 0; v < pt->nvariants && !rw->supported; v++) {
        pool_free();
        graph g;
        memset(&g, 0, sizeof g);
        g_err[0] = 0;
        const int built = pt->build(&g, b, v) == 0;
        printf("    variant %d (%s): ", v, g.variant[0] ? g.variant : "-");
        snprintf(rw->variant, sizeof rw->variant, "%s", g.variant);
        if (!built) {
            printf("operation not built: %s\n", g_err);
            snprintf(rw->status, sizeof rw->status, "op: %.190s", g_err);
            continue;
        }
        cudnnBackendDescriptor_t opg = mk(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
        if (dnn_try(set1(opg, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g.nops, g.ops), "graph ops",
                    __LINE__) ||
            dnn_try(set1(opg, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle), "graph handle",
                    __LINE__) ||
            dnn_try(cudnnBackendFinalize(opg), "graph finalize", __LINE__)) {
            printf("graph does not finalize: %s\n", g_err);
            snprintf(rw->status, sizeof rw->status, "graph: %.190s", g_err);
            continue;
        }
        int64_t global = 0, cnt = 0;
        cudnnBackendGetAttribute(opg, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &cnt, &global);
        cudnnBackendDescriptor_t cfgs[64];
        char why_a[300] = "", why_f[300] = "";
        int na = 0, nf = 0;
        heur(opg, CUDNN_HEUR_MODE_A, cfgs, 32, &na, why_a, sizeof why_a);
        heur(opg, CUDNN_HEUR_MODE_FALLBACK, cfgs + (na > 0 ? na : 0), 32, &nf, why_f, sizeof why_f);
        rw->n_a = na, rw->n_fb = nf;
        printf("graph ok (%lld engines in all); heuristics A: %d%s%s, FALLBACK: %d%s%s\n", (long long)global, na,
               why_a[0] ? " " : "", why_a, nf, why_f[0] ? " " : "", why_f);
        const int ncfg = (na > 0 ? na : 0) + (nf > 0 ? nf : 0);
        if (ncfg == 0) {
            snprintf(rw->status, sizeof rw->status, "no engine: %.180s", why_a[0] ? why_a : "heuristics returned none");
            continue;
        }
        int timed = 0;
        char first_fail[200] = "";
        for (int i = 0; i < ncfg && rw->n_tried < g_tries && timed < g_plans; i++)
            timed += try_cfg(pt, b, v, &g, rw, cfgs[i], i < na ? "A" : "FB", i, first_fail);
        /* engines by global index, as PaddlePaddle's fused_dgrad_drelu_bnbwdweight makes its
         * plan (engine 0, no heuristics): specialized engines heuristics may not list */
        if (!timed && global > 0) {
            int tried = 0, unsupported = 0;
            for (int64_t e = 0; e < global && e < 64 && tried < g_tries && timed < g_plans; e++) {
                cudnnBackendDescriptor_t eng = mk(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
                if (set1(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &opg) ||
                    set1(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &e) || cudnnBackendFinalize(eng)) {
                    unsupported++;
                    continue;
                }
                cudnnBackendDescriptor_t cfg = mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
                if (dnn_try(set1(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &eng), "cfg engine",
                            __LINE__) ||
                    dnn_try(cudnnBackendFinalize(cfg), "engine config finalize", __LINE__)) {
                    printf("      engine %lld: no config: %s\n", (long long)e, g_err);
                    continue;
                }
                tried++;
                rw->n_tried--; /* try_cfg counts heuristics' tries; these are counted apart */
                timed += try_cfg(pt, b, v, &g, rw, cfg, "IDX", (int)e, first_fail);
                rw->n_idx++;
            }
            printf("      engines by global index: %d of %lld do not finalize for this graph, %d tried\n", unsupported,
                   (long long)(global < 64 ? global : 64), tried);
        }
        if (timed) {
            rw->supported = 1;
            snprintf(rw->status, sizeof rw->status, "ok");
        } else if (first_fail[0] && strncmp(rw->status, "WRONG", 5)) {
            snprintf(rw->status, sizeof rw->status, "%s", first_fail);
        } else if (strncmp(rw->status, "WRONG", 5)) {
            snprintf(rw->status, sizeof rw->status, "no plan ran (%d finalized)", rw->n_plans);
        }
    }
    pool_free();
}

static int listed(const char *list, const char *id) {
    if (!list) return 1;
    const size_t n = strlen(id);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, id, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* --selftest (no GPU): the host fp16 conversion, the three convolution references against
 * each other through the adjoint identities <conv(X;W), dY> = <X, dgrad(dY;W)> =
 * <W, wgrad(X;dY)> (with and without the prologue) on each shape's geometry with few
 * channels, and the dBN coefficients against BN's gradient written out. Exit 1 on a failure. */
static int selftest(void) {
    int fails = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if (((h >> 10) & 31u) == 31u) continue;
        if (f2h(h2f((uint16_t)h)) != h) {
            if (fails++ < 5) printf("selftest: fp16 %04x -> %g -> %04x\n", h, h2f((uint16_t)h), f2h(h2f((uint16_t)h)));
        }
    }
    const struct { float f; uint16_t h; } hv[] = {{1.0f, 0x3c00}, {-2.0f, 0xc000}, {65504.0f, 0x7bff},
                                                 {1.0f + 1.0f / 2048, 0x3c00}, {1.0f + 3.0f / 2048, 0x3c02},
                                                 {5.9604645e-8f, 0x0001}, {0.0f, 0x0000}, {1e6f, 0x7c00}};
    /* an unwritten output (NaN, as the outputs are filled before a checked run) must fail */
    const uint16_t nan16 = 0xffff;
    if (!(ratio(h2f(nan16), 0.0, 1.0) > 1) || !(ratio(INFINITY, 0.0, 1.0) > 1) || ratio(1.5, 1.0, 1.0) != 0.5) {
        printf("selftest: ratio() lets NaN/inf through or is wrong\n");
        fails++;
    }
    for (size_t i = 0; i < sizeof hv / sizeof hv[0]; i++)
        if (f2h(hv[i].f) != hv[i].h) {
            printf("selftest: f2h(%g) = %04x, want %04x\n", hv[i].f, f2h(hv[i].f), hv[i].h);
            fails++;
        }
    for (int si = 0; si < NSHAPES; si++) {
        shape sh = SHAPES[si];
        sh.c = 5, sh.k = 3, sh.h = sh.h < 9 ? sh.h : 9, sh.w = sh.w < 8 ? sh.w : 8;
        bufs b;
        bufs_host(&b, &sh, 2);
        for (int prolog = 0; prolog < 2; prolog++) {
            double yy = 0, xd = 0, ww = 0, mag;
            for (int n = 0; n < b.n; n++)
                for (int p = 0; p < b.p; p++)
                    for (int q = 0; q < b.q; q++)
                        for (int k = 0; k < b.k; k++)
                            yy += conv_ref(&b, prolog, n, p, q, k, &mag) *
                                  h2f(b.hdy[(((size_t)n * b.p + p) * b.q + q) * b.k + k]);
            if (!prolog)
                for (int n = 0; n < b.n; n++)
                    for (int hh = 0; hh < b.h; hh++)
                        for (int w = 0; w < b.w; w++)
                            for (int c = 0; c < b.c; c++)
                                xd += (double)xin(&b, 0, n, hh, w, c) * dgrad_ref(&b, n, hh, w, c, &mag);
            for (int k = 0; k < b.k; k++)
                for (int r = 0; r < b.r; r++)
                    for (int s = 0; s < b.s; s++)
                        for (int c = 0; c < b.c; c++)
                            ww += (double)h2f(b.hw[(((size_t)k * b.r + r) * b.s + s) * b.c + c]) *
                                  wgrad_ref(&b, prolog, k, r, s, c, &mag);
            const double tol = 1e-9 * (fabs(yy) + 1);
            if ((!prolog && fabs(yy - xd) > tol) || fabs(yy - ww) > tol) {
                printf("selftest: %s (prologue %d): <Y,dY> %.12g, <X,dgrad> %.12g, <W,wgrad> %.12g\n", sh.name, prolog,
                       yy, prolog ? yy : xd, ww);
                fails++;
            }
        }
        /* dBN: the coefficients against the gradient written out, on one channel of a batch
         * whose own statistics mu, inv are (so the gradient sums to zero) */
        const int M = 97;
        double dA[97], Z[97], sd = 0, sdx = 0, sdd = 0, mu = 0, var = 0;
        for (int i = 0; i < M; i++) dA[i] = frand() - 0.5, Z[i] = 2 * frand() - 1, mu += Z[i] / M;
        for (int i = 0; i < M; i++) var += (Z[i] - mu) * (Z[i] - mu) / M;
        const double g = 1.3, inv = 1.0 / sqrt(var + EPS);
        for (int i = 0; i < M; i++) sd += dA[i], sdx += dA[i] * (Z[i] - mu) * inv;
        double r[3], worst = 0;
        dbn_coef(g, inv, mu, sd, sdx, M, r);
        for (int i = 0; i < M; i++) {
            const double xh = (Z[i] - mu) * inv, direct = g * inv * (dA[i] - sd / M - xh * sdx / M);
            const double e = fabs(direct - (r[0] * dA[i] + r[1] * Z[i] + r[2]));
            if (e > worst) worst = e;
            sdd += direct;
        }
        if (worst > 1e-12 || fabs(sdd) > 1e-9) {
            printf("selftest: dBN coefficients off by %g (sum of dX %g, want 0)\n", worst, sdd);
            fails++;
        }
        free(b.hx), free(b.hw), free(b.hdy), free(b.hscale), free(b.hbias), free(b.hmean), free(b.hinvstd);
        free(b.hsum), free(b.hsq), free(b.hprm), free(b.hprv);
    }
    printf("cudnn_fusion_probe --selftest: %s (%d failure(s))\n", fails ? "FAILED" : "ok", fails);
    return fails ? 1 : 0;
}

static void usage(void) {
    fprintf(stderr, "usage: cudnn_fusion_probe [--selftest] [--batch N] [--shapes 1,2,..] [--patterns a,b,b2,c,d,e1,e2,f] "
                    "[--iters N] [--warmup N] [--plans N] [--tries N] [--budget SECONDS]\nshapes:\n");
    for (int i = 0; i < NSHAPES; i++) fprintf(stderr, "  %d  %s\n", i + 1, SHAPES[i].name);
}

int main(int argc, char **argv) {
    int batch = 256;
    const char *shapes = NULL, *pats = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--selftest")) {
            h2f_init();
            return selftest();
        } else if (!strcmp(a, "--batch") && v) batch = atoi(v), i++;
        else if (!strcmp(a, "--shapes") && v) shapes = v, i++;
        else if (!strcmp(a, "--patterns") && v) pats = v, i++;
        else if (!strcmp(a, "--iters") && v) g_iters = atoi(v), i++;
        else if (!strcmp(a, "--warmup") && v) g_warmup = atoi(v), i++;
        else if (!strcmp(a, "--plans") && v) g_plans = atoi(v), i++;
        else if (!strcmp(a, "--tries") && v) g_tries = atoi(v), i++;
        else if (!strcmp(a, "--budget") && v) g_budget = atof(v), i++;
        else {
            usage();
            return 2;
        }
    }
    if (batch < 1 || g_iters < 1 || g_warmup < 0 || g_plans < 1 || g_tries < 1) {
        usage();
        return 2;
    }
    h2f_init();
    int dev = 0, rt = 0;
    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaGetDeviceProperties(&prop, dev));
    CUDA_OK(cudaRuntimeGetVersion(&rt));
    printf("cudnn_fusion_probe: %s (sm_%d%d, %d SMs), CUDA runtime %d, cuDNN %zu (headers %d.%d.%d), batch %d, "
           "median of %d after %d warm-up, up to %d plans timed of %d tried; floors at %.1f TB/s\n",
           prop.name, prop.major, prop.minor, prop.multiProcessorCount, rt, cudnnGetVersion(), CUDNN_MAJOR,
           CUDNN_MINOR, CUDNN_PATCHLEVEL, batch, g_iters, g_warmup, g_plans, g_tries, BW_TBS);
    DNN_OK(cudnnCreate(&handle));
    for (int i = 0; i <= MAX_ITERS; i++) CUDA_OK(cudaEventCreate(&evs[i]));
    const double t0 = now_s();
    int skipped = 0;
    for (int si = 0; si < NSHAPES; si++) {
        char id[16];
        snprintf(id, sizeof id, "%d", si + 1);
        if (!listed(shapes, id)) continue;
        if (now_s() - t0 > g_budget) {
            printf("== shape %d: %s: skipped (over the --budget of %.0f s)\n", si + 1, SHAPES[si].name, g_budget);
            skipped++;
            continue;
        }
        const shape *sh = &SHAPES[si];
        bufs b;
        bufs_init(&b, sh, batch);
        printf("== shape %d: %s, batch %d (X %zu, Y %zu elements)\n", si + 1, sh->name, batch, b.nx, b.ny);
        legacy_time(&b);
        for (int pi = 0; pi < NPATTERNS; pi++) {
            if (!listed(pats, PATTERNS[pi].id)) continue;
            if (now_s() - t0 > g_budget) {
                printf("  [%s] skipped (over the --budget of %.0f s)\n", PATTERNS[pi].id, g_budget);
                skipped++;
                continue;
            }
            run_pattern(&PATTERNS[pi], &b, sh);
        }
        printf("  (%.0f s so far)\n", now_s() - t0);
        bufs_free(&b);
    }
    printf("\n%-3s %-24s %-4s %5s %5s %6s %3s %9s %-10s %10s %9s %8s  %s\n", "pat", "shape", "ok", "heurA", "fallb",
           "plans", "idx", "best ms", "engine", "unfused ms", "floor ms", "err/tol", "status / variant");
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        char best[16] = "-", unf[16] = "-";
        if (r->best_ms >= 0) snprintf(best, sizeof best, "%.3f", r->best_ms);
        if (r->unfused_ms >= 0) snprintf(unf, sizeof unf, "%.3f", r->unfused_ms);
        printf("%-3s %-24s %-4s %5d %5d %3d/%-2d %3d %9s %-10s %10s %9.3f %8.3g  %s%s%s\n", r->pat, r->shape,
               r->supported ? "yes" : "no", r->n_a, r->n_fb, r->n_plans, r->n_tried + r->n_idx, r->n_idx, best,
               r->engine[0] ? r->engine : "-", unf, r->floor_ms, r->supported ? r->err : 0.0, r->status,
               r->supported ? "; " : "", r->supported ? r->variant : "");
    }
    printf("(unfused: the legacy API's best algorithm timed here + the separate pass's bytes at %.1f TB/s; floor: the "
           "fused kernel's own bytes at %.1f TB/s; heurA/fallb -1: the heuristics did not finalize; plans: finalized/tried; "
           "idx: of those tried, engines taken by global index, not from heuristics; engine: its global index, rt: runtime "
           "compiled)\n",
           BW_TBS, BW_TBS);
    for (int i = 0; i <= MAX_ITERS; i++) cudaEventDestroy(evs[i]);
    cudnnDestroy(handle);
    if (skipped) printf("cudnn_fusion_probe: %d shape(s)/pattern(s) skipped over the time budget (--budget)\n", skipped);
    if (g_bad) printf("cudnn_fusion_probe: %d WRONG RESULT(S)\n", g_bad);
    return g_bad ? 1 : 0;
}
