/*
 * bn_train.c — BatchNormalization in training mode and its gradient on the GPU, on
 * ResNet-50's BN shapes (batch 256, NHWC, f16 by default), fused with the ReLU and not:
 *
 *   bn fwd            BatchNormalization training_mode=1 (Y, running mean and var)
 *   bn+relu fused     the same with relu=1 (the fuse-bn pass's node)
 *   bn, relu          BatchNormalization, then Relu as its own kernel (without the pass)
 *   bngrad            kiln.BatchNormGrad training_mode=1 (dX, dScale, dB)
 *   bngrad+relu fused kiln.BatchNormGrad relu=1 reading the ReLU's Y (the pass's node)
 *   relugrad, bngrad  kiln.UnaryGrad op=Relu, then kiln.BatchNormGrad (without the pass)
 *   bngrad residual fused   kiln.BatchNormGrad relu=1 with a second gradient term (input 7)
 *                     and the masked gradient written for the shortcut (output 5): the
 *                     pass's node at a bottleneck's end (bench/NOTES.md "t4")
 *   sum, relugrad, bngrad   Sum, kiln.UnaryGrad op=Relu, kiln.BatchNormGrad: what it stands for
 *   bngrad+relu mask from X kiln.BatchNormGrad relu=1;relu_mask_from_x=1 reading the forward's
 *                     saved statistics S (BatchNormalization's output 3) instead of Y: the
 *                     pass's node under KILN_BN_MASK_FROM_X=1 (bench/NOTES.md "t7"; its CUDA
 *                     kernels unvalidated before this bench's first GPU run), X and dY twice +
 *                     dX (5 tensors) against the Y form's 7; checked bit for bit against
 *                     "bngrad+relu fused" on the same X, dY and forward (Y and S of one run)
 *   copy              a device-to-device copy of X (this GPU's read + write floor)
 *   channel sums      kiln_cuda_channel_sums over X: the pass the conv-bn-stats fallback
 *                     adds after a convolution (conv_stats.c; issue 12, "t7 prediction")
 *   bn+relu, sums given    BatchNormalization relu=1 with X's sums as inputs 6, 7 (the
 *                     conv-bn-stats pass's node: no statistics pass, X read once)
 *
 * Each is timed with a CUDA event pair around every launch after warm-up (a delay kernel
 * holds the GPU while the host enqueues, so the events time the kernels, not the
 * launches); prints the median and min in us and GB/s over the bytes the computation must
 * move at least: forward X twice + Y once (3 tensors; the bandwidth floor: the statistics
 * need a pass over X before any Y can be written); gradient X and dY twice + dX (5), with
 * the ReLU also Y twice (7); the unfused pairs add the ReLU's own read and write. And it
 * checks the fused nodes against the unfused pairs bit for bit (the same kernels, with the
 * mask inside). Exits non-zero when a kernel fails or a fused result differs.
 *
 *   bn_train [--batch 256] [--iters 50] [--warmup 5] [--dtype f16|bf16|f32] [--nchw]
 *
 * Built only with the CUDA backend and -DKILN_BENCH=ON (like gelu_fusion). Floors on an
 * H200 (4.8 TB/s; ~4.3 TB/s by copy) for the whole of ResNet-50's 53 BNs at batch 256
 * (2.85e9 elements, f16): forward 17 GB ~ 4 ms, gradient 28 GB ~ 7 ms (bench/NOTES.md).
 */
#include "core/optest.h"
#include "cuda/cuda_internal.h"
#include "cuda/norm_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kiln_context *ctx;
static kiln_cuda *cu;
static void *ws;
static size_t ws_bytes;

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A one-node op context over device tensors. */
typedef struct op {
    kiln_node node;
    kiln_tensor *in[8], *out[6];
    kiln_op_ctx c;
} op;

static int op_init(op *o, const char *domain, const char *type, const char *attrs, int n_in, kiln_tensor **in,
                   int n_out, kiln_tensor **out) {
    memset(o, 0, sizeof *o);
    o->node.op_type = (char *)type;
    o->node.name = (char *)type;
    o->node.domain = (char *)domain;
    o->node.op = kiln_op_index_domain(domain, type);
    o->node.opset = 15;
    o->node.n_in = n_in;
    o->node.n_out = n_out;
    if (kiln_attrs_parse(ctx, attrs, &o->node.attrs, &o->node.n_attrs)) return 1;
    for (int i = 0; i < n_in; i++) o->in[i] = in[i];
    for (int i = 0; i < n_out; i++) o->out[i] = out[i];
    o->c = (kiln_op_ctx){.kctx = ctx, .node = &o->node, .n_in = n_in, .in = o->in, .n_out = n_out, .out = o->out};
    size_t need = 0;
    if (kiln_cuda_supports(&o->c) || kiln_cuda_prepare(cu, &o->c) || kiln_cuda_workspace_size(cu, &o->c, &need) ||
        kiln_cuda_workspace_reserve(cu, need)) {
        fprintf(stderr, "bn_train: %s %s: %s\n", type, attrs, kiln_context_message(ctx));
        return 1;
    }
    return 0;
}

static void op_free(op *o) {
    for (int i = 0; i < o->node.n_attrs; i++) kiln_attr_clear(&o->node.attrs[i]);
    free(o->node.attrs);
}

typedef struct chain {
    op *ops[3];
    int n;
    const void *src; /* a copy instead when set */
    bool sums;       /* kiln_cuda_channel_sums(X) into sum, sq instead when set */
    const kiln_tensor *x;
    float *sum, *sq;
    void *dst;
    size_t bytes;
} chain;

static kiln_status run_chain(const chain *ch) {
    if (ch->src) return kiln_cuda_copy_d2d(cu, ch->dst, ch->src, ch->bytes);
    if (ch->sums) return kiln_cuda_channel_sums(cu, ctx, ch->x, ch->sum, ch->sq, false, ws, ws_bytes);
    for (int i = 0; i < ch->n; i++) {
        op *o = ch->ops[i];
        o->c.workspace = ws;
        o->c.workspace_size = ws_bytes;
        kiln_status st = kiln_cuda_run(cu, &o->c);
        if (st) return st;
    }
    return KILN_OK;
}

/* Median and min of `iters` event-timed launches (after `warmup`), in microseconds. */
static int time_it(const char *what, const chain *ch, int warmup, int iters, double *med, double *mn) {
    cudaEvent_t *ev = calloc((size_t)2 * iters, sizeof *ev);
    double *us = calloc((size_t)iters, sizeof *us);
    int made = 0, rc = 0;
    ws = kiln_cuda_workspace(cu, &ws_bytes);
    kiln_status st = ev && us ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    for (; !st && made < 2 * iters; made++) KILN_CUDA_TRY(st, ctx, cudaEventCreate(&ev[made]));
    if (!st) st = kiln_cuda_delay(cu, 2000.0 + 40.0 * ch->n * (warmup + iters));
    for (int i = 0; i < warmup && !st; i++) st = run_chain(ch);
    for (int i = 0; i < iters && !st; i++) {
        KILN_CUDA_TRY(st, ctx, cudaEventRecord(ev[2 * i], cu->stream));
        if (!st) st = run_chain(ch);
        KILN_CUDA_TRY(st, ctx, cudaEventRecord(ev[2 * i + 1], cu->stream));
    }
    if (!st) st = kiln_cuda_sync(cu);
    for (int i = 0; i < iters && !st; i++) {
        float ms = 0;
        KILN_CUDA_TRY(st, ctx, cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        us[i] = ms * 1e3;
    }
    if (st) {
        fprintf(stderr, "bn_train: %s: %s\n", what, kiln_context_message(ctx));
        rc = 1;
    } else {
        qsort(us, (size_t)iters, sizeof *us, cmp_double);
        *med = iters % 2 ? us[iters / 2] : 0.5 * (us[iters / 2 - 1] + us[iters / 2]);
        *mn = us[0];
    }
    for (int i = 0; i < made; i++) cudaEventDestroy(ev[i]);
    free(ev);
    free(us);
    return rc;
}

/* Device tensors a and b hold the same bytes. */
static int same_bytes(const char *what, const kiln_tensor *a, const kiln_tensor *b) {
    const size_t n = kiln_tensor_nbytes(a);
    unsigned char *ha = malloc(n), *hb = malloc(n);
    int rc = !ha || !hb || kiln_cuda_download(cu, ha, a->data, n) || kiln_cuda_download(cu, hb, b->data, n);
    size_t diff = 0;
    for (size_t i = 0; !rc && i < n; i++) diff += ha[i] != hb[i];
    printf("    check %-34s %s\n", what, rc ? "download failed" : diff ? "DIFFERENT" : "same bytes as the unfused pair");
    free(ha);
    free(hb);
    return rc || diff != 0;
}

/* Device tensors a and b (of dtype dt) within 1% of b's largest magnitude: the BN with X's
 * sums (E[x^2] - mean^2 from f32 sums) against the one with its own statistics. */
static int close_to(const char *what, const kiln_tensor *a, const kiln_tensor *b) {
    kiln_tensor *ha = kt_make(a->dtype, a->ndim, a->dims, NULL), *hb = kt_make(b->dtype, b->ndim, b->dims, NULL);
    const size_t n = kiln_tensor_nbytes(a);
    int rc = !ha || !hb || kiln_cuda_download(cu, ha->data, a->data, n) || kiln_cuda_download(cu, hb->data, b->data, n);
    double worst = 0, mx = 0;
    for (int64_t i = 0; !rc && i < kiln_tensor_numel(hb); i++) {
        worst = fmax(worst, fabs(kiln_get_f64(ha, i) - kiln_get_f64(hb, i)));
        mx = fmax(mx, fabs(kiln_get_f64(hb, i)));
    }
    const bool bad = rc || !(worst <= 0.01 * mx);
    printf("    check %-34s %s (max |diff| %.3g of max %.3g)\n", what, rc ? "download failed" : bad ? "DIFFERENT" : "close",
           worst, mx);
    kiln_tensor_free(ha);
    kiln_tensor_free(hb);
    return bad;
}

enum { NROWS = 12, NBIG = 13 };

typedef struct totals {
    double us[NROWS]; /* per row, summed over the shapes (each shape counted `mult` times; the
                         residual rows `res` times; the mask from X's the 33 pairs not at a
                         block end) */
    double y33;       /* "bngrad+relu fused" over those 33 */
} totals;

static const char *const rows[NROWS] = {"copy X (floor)",       "bn fwd",      "bn+relu fused", "bn, relu (2 kernels)",
                                        "bngrad",               "bngrad+relu fused", "relugrad, bngrad (2)",
                                        "bngrad residual fused", "sum, relugrad, bngrad (3)",
                                        "bngrad+relu mask from X", "channel sums (conv-stats fallback)",
                                        "bn+relu, sums given"};

static int bench_shape(kiln_dtype dt, bool nhwc, int64_t N, int64_t C, int64_t H, int mult, int res, int warmup,
                       int iters, totals *tot) {
    const int64_t dims[4] = {N, C, H, H}, n = N * C * H * H;
    const size_t es = kiln_dtype_size(dt), bytes = (size_t)n * es;
    kiln_cuda_arena_reset(cu);
    /* X, Y (BN), Y2 (relu fused), Y3 (relu of Y), dY, dX, dX2, G (masked dY), dY2 (a second
     * gradient term), S (dY + dY2), G2 (the residual node's masked sum), dX3 (the mask from X's),
     * Y4 (BN with X's sums); params (scale, B, mean, var, running mean, running var, dScale, dB,
     * dB2, X's sum and sum of squares (conv-bn-stats), dScale3, dB3), SS: the forward's saved
     * statistics (f64 (2, C)) */
    kiln_tensor big[NBIG], par[13], SS;
    kiln_status st = KILN_OK;
    kiln_tensor *hx = kt_rand(dt, 4, dims, -2, 3, 11), *hg = kt_rand(dt, 4, dims, -1, 1, 12);
    for (int i = 0; i < NBIG && !st; i++) {
        memset(&big[i], 0, sizeof big[i]);
        big[i].dtype = dt;
        big[i].ndim = 4;
        memcpy(big[i].dims, dims, sizeof dims);
        big[i].format = nhwc ? KILN_FORMAT_NHWC : KILN_FORMAT_NCHW;
        st = kiln_cuda_arena_alloc(cu, bytes, &big[i].data);
    }
    const double pv[4][1] = {{1.0}, {0.1}, {0.2}, {1.0}}; /* scale, B, mean, var */
    memset(&SS, 0, sizeof SS);
    SS.dtype = KILN_F64;
    SS.ndim = 2;
    SS.dims[0] = 2;
    SS.dims[1] = C;
    st = kiln_cuda_arena_alloc(cu, (size_t)C * 16, &SS.data);
    for (int i = 0; i < 13 && !st; i++) {
        memset(&par[i], 0, sizeof par[i]);
        par[i].dtype = KILN_F32;
        par[i].ndim = 1;
        par[i].dims[0] = C;
        st = kiln_cuda_arena_alloc(cu, (size_t)C * 4, &par[i].data);
        if (!st && i < 4) {
            kiln_tensor *h = kt_rand(KILN_F32, 1, &C, pv[i][0] * 0.5, pv[i][0] * 1.5, 20 + (uint64_t)i);
            st = h ? kiln_cuda_upload(cu, par[i].data, h->data, (size_t)C * 4) : KILN_ERR_OUT_OF_MEMORY;
            kiln_tensor_free(h);
        }
    }
    if (!hx || !hg) st = KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_cuda_upload(cu, big[0].data, hx->data, bytes);
    if (!st) st = kiln_cuda_upload(cu, big[4].data, hg->data, bytes);
    if (!st) st = kiln_cuda_copy_d2d(cu, big[7].data, big[4].data, bytes); /* G before relugrad runs */
    if (!st) st = kiln_cuda_copy_d2d(cu, big[8].data, big[0].data, bytes); /* dY2: any values */
    kiln_tensor_free(hx);
    kiln_tensor_free(hg);
    if (st) {
        fprintf(stderr, "bn_train: buffers: %s\n", kiln_context_message(ctx));
        return 1;
    }
    kiln_tensor *X = &big[0], *Y = &big[1], *Y2 = &big[2], *Y3 = &big[3], *dY = &big[4], *dX = &big[5],
                *dX2 = &big[6], *G = &big[7], *dY2 = &big[8], *S = &big[9], *G2 = &big[10], *dX3 = &big[11],
                *Y4 = &big[12];
    kiln_tensor *p4[4] = {&par[0], &par[1], &par[2], &par[3]};
    op bn, bnr, relu, bg, bgr, rg, bgres, sum, rgs, bns, bgx, bnsum;
    int rc = 0;
    rc |= op_init(&bn, "", "BatchNormalization", "training_mode=1", 5, (kiln_tensor *[]){X, p4[0], p4[1], p4[2], p4[3]},
                  3, (kiln_tensor *[]){Y, &par[4], &par[5]});
    rc |= op_init(&bnr, "", "BatchNormalization", "training_mode=1;relu=1", 5,
                  (kiln_tensor *[]){X, p4[0], p4[1], p4[2], p4[3]}, 3, (kiln_tensor *[]){Y2, &par[4], &par[5]});
    rc |= op_init(&relu, "", "Relu", "", 1, (kiln_tensor *[]){Y}, 1, (kiln_tensor *[]){Y3});
    rc |= op_init(&bg, "kiln", "BatchNormGrad", "training_mode=1", 6,
                  (kiln_tensor *[]){G, X, p4[0], p4[1], p4[2], p4[3]}, 3, (kiln_tensor *[]){dX, &par[6], &par[7]});
    rc |= op_init(&bgr, "kiln", "BatchNormGrad", "training_mode=1;relu=1", 7,
                  (kiln_tensor *[]){dY, X, p4[0], p4[1], p4[2], p4[3], Y2}, 3,
                  (kiln_tensor *[]){dX2, &par[6], &par[8]});
    rc |= op_init(&rg, "kiln", "UnaryGrad", "op=Relu", 3, (kiln_tensor *[]){dY, NULL, Y2}, 1, (kiln_tensor *[]){G});
    rc |= op_init(&bgres, "kiln", "BatchNormGrad", "training_mode=1;relu=1", 8,
                  (kiln_tensor *[]){dY, X, p4[0], p4[1], p4[2], p4[3], Y2, dY2}, 6,
                  (kiln_tensor *[]){dX2, &par[6], &par[8], NULL, NULL, G2});
    rc |= op_init(&sum, "", "Sum", "", 2, (kiln_tensor *[]){dY, dY2}, 1, (kiln_tensor *[]){S});
    rc |= op_init(&rgs, "kiln", "UnaryGrad", "op=Relu", 3, (kiln_tensor *[]){S, NULL, Y2}, 1, (kiln_tensor *[]){G});
    /* the forward writing Y2 and S (the saved statistics), and the gradient reading S, not Y2 */
    rc |= op_init(&bns, "", "BatchNormalization", "training_mode=1;relu=1", 5,
                  (kiln_tensor *[]){X, p4[0], p4[1], p4[2], p4[3]}, 4, (kiln_tensor *[]){Y2, &par[4], &par[5], &SS});
    rc |= op_init(&bgx, "kiln", "BatchNormGrad", "training_mode=1;relu=1;relu_mask_from_x=1", 7,
                  (kiln_tensor *[]){dY, X, p4[0], p4[1], p4[2], p4[3], &SS}, 3,
                  (kiln_tensor *[]){dX3, &par[11], &par[12]});
    /* the forward given X's sums (conv-bn-stats) */
    rc |= op_init(&bnsum, "", "BatchNormalization", "training_mode=1;relu=1", 8,
                  (kiln_tensor *[]){X, p4[0], p4[1], p4[2], p4[3], NULL, &par[9], &par[10]}, 3,
                  (kiln_tensor *[]){Y4, &par[4], &par[5]});
    const chain ch[NROWS] = {{.src = X->data, .dst = Y3->data, .bytes = bytes},
                         {.ops = {&bn}, .n = 1},
                         {.ops = {&bnr}, .n = 1},
                         {.ops = {&bn, &relu}, .n = 2},
                         {.ops = {&bg}, .n = 1},
                         {.ops = {&bgr}, .n = 1},
                         {.ops = {&rg, &bg}, .n = 2},
                         {.ops = {&bgres}, .n = 1},
                         {.ops = {&sum, &rgs, &bg}, .n = 3},
                         {.ops = {&bgx}, .n = 1},
                         {.sums = true, .x = X, .sum = par[9].data, .sq = par[10].data},
                         {.ops = {&bnsum}, .n = 1}};
    /* tensors of `bytes` read or written at least (the residual node: X, dY, dY2, Y, G2 in
     * its first pass, G2, X, dX in its second) */
    const double moved[NROWS] = {2, 3, 3, 5, 5, 7, 8, 8, 11, 5, 1, 2};
    printf("\n%s %s, %lld x %lld x %lld x %lld (%.1f MB a tensor), x%d in ResNet-50\n", kiln_dtype_name(dt),
           nhwc ? "NHWC" : "NCHW", (long long)N, (long long)C, (long long)H, (long long)H, bytes / 1e6, mult);
    printf("  %-26s %10s %10s %8s\n", "kernel(s)", "median us", "min us", "GB/s");
    for (int r = 0; r < NROWS && !rc; r++) {
        double med = 0, mn = 0;
        if ((r == 7 || r == 8) && res == 0) continue; /* no bottleneck ends at this shape */
        if (r == 9) { /* S from the forward first (what the mask from X reads) */
            const chain fw = {.ops = {&bns}, .n = 1};
            if ((rc = run_chain(&fw) != KILN_OK)) {
                fprintf(stderr, "bn_train: bn+relu with S: %s\n", kiln_context_message(ctx));
                break;
            }
        }
        if ((rc = time_it(rows[r], &ch[r], warmup, iters, &med, &mn))) break;
        printf("  %-26s %10.1f %10.1f %8.0f\n", rows[r], med, mn, moved[r] * (double)bytes / (med * 1e-6) / 1e9);
        /* the mask from X: the BN -> ReLU pairs not at a block end, every BN of the shapes
         * without a block end (the others are block ends and downsample BNs, no ReLU) */
        tot->us[r] += med * (r == 7 || r == 8 ? res : r == 9 ? (res == 0 ? mult : 0) : mult);
        if (r == 5 && res == 0) tot->y33 += med * mult;
    }
    /* fused vs unfused: the last runs left Y2 (fused), Y3 = Relu(Y); dX2 (fused) and dX
     * from G = UnaryGrad(dY, Y2) */
    if (!rc) rc |= same_bytes("bn+relu fused vs bn, relu", Y2, Y3);
    if (!rc) rc |= close_to("bn+relu sums given vs fused", Y4, Y2);
    if (!rc && res == 0) rc |= same_bytes("bngrad+relu fused vs relugrad, bngrad", dX2, dX);
    /* the residual rows ran last: dX2 and G2 (fused), dX and G from Sum, UnaryGrad, BatchNormGrad */
    if (!rc && res > 0) rc |= same_bytes("bngrad residual vs sum, relugrad, bngrad", dX2, dX);
    if (!rc && res > 0) rc |= same_bytes("its output 5 vs sum, relugrad", G2, G);
    /* the mask from X against the Y form on one forward's Y2 and S (UNVALIDATED kernels:
     * this is their first check on a GPU); test_backend_ops sweeps them against the CPU */
    if (!rc) {
        const chain fw = {.ops = {&bns, &bgr, &bgx}, .n = 3};
        if (run_chain(&fw) || kiln_cuda_sync(cu)) {
            fprintf(stderr, "bn_train: the mask from X: %s\n", kiln_context_message(ctx));
            rc = 1;
        } else {
            kiln_tensor d6 = par[6], d8 = par[8];
            rc |= same_bytes("mask from X dX vs relu=1 with Y", dX3, dX2);
            rc |= same_bytes("mask from X dScale vs relu=1 with Y", &par[11], &d6);
            rc |= same_bytes("mask from X dB vs relu=1 with Y", &par[12], &d8);
        }
    }
    op_free(&bn);
    op_free(&bnr);
    op_free(&relu);
    op_free(&bg);
    op_free(&bgr);
    op_free(&rg);
    op_free(&bgres);
    op_free(&sum);
    op_free(&rgs);
    op_free(&bns);
    op_free(&bgx);
    op_free(&bnsum);
    return rc;
}

/* kiln.MaxPool and kiln.MaxPoolGrad on ResNet-50's stem pool (3x3 stride 2 pad 1, C 64,
 * 112x112 -> 56x56), against a copy of dX (the bytes' floor: the gradient reads X and dY
 * and writes dX, ~2.25 copies of dY more than the copy). */
static int bench_maxpool(kiln_dtype dt, int64_t N, int warmup, int iters) {
    const int64_t dx_dims[4] = {N, 64, 112, 112}, dy_dims[4] = {N, 64, 56, 56};
    const size_t es = kiln_dtype_size(dt), bx = (size_t)(N * 64 * 112 * 112) * es, by = bx / 4;
    kiln_cuda_arena_reset(cu);
    kiln_tensor t[4]; /* X, dY, dX, Y */
    const int64_t *dims[4] = {dx_dims, dy_dims, dx_dims, dy_dims};
    kiln_status st = KILN_OK;
    for (int i = 0; i < 4 && !st; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].dtype = dt;
        t[i].ndim = 4;
        memcpy(t[i].dims, dims[i], sizeof dx_dims);
        t[i].format = KILN_FORMAT_NHWC;
        st = kiln_cuda_arena_alloc(cu, dims[i] == dx_dims ? bx : by, &t[i].data);
    }
    kiln_tensor *hx = kt_rand(dt, 4, dx_dims, -2, 3, 31), *hg = kt_rand(dt, 4, dy_dims, -1, 1, 32);
    if (!hx || !hg) st = KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_cuda_upload(cu, t[0].data, hx->data, bx);
    if (!st) st = kiln_cuda_upload(cu, t[1].data, hg->data, by);
    kiln_tensor_free(hx);
    kiln_tensor_free(hg);
    if (st) {
        fprintf(stderr, "bn_train: maxpool buffers: %s\n", kiln_context_message(ctx));
        return 1;
    }
    const char *attrs = "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]";
    op grad, fwd;
    int rc = 0;
    rc |= op_init(&grad, "kiln", "MaxPoolGrad", attrs, 2, (kiln_tensor *[]){&t[1], &t[0]}, 1, (kiln_tensor *[]){&t[2]});
    rc |= op_init(&fwd, "", "MaxPool", attrs, 1, (kiln_tensor *[]){&t[0]}, 1, (kiln_tensor *[]){&t[3]});
    printf("\n%s NHWC maxpool 3x3 s2 p1, %lld x 64 x 112 x 112 (X %.1f MB, dY %.1f MB)\n", kiln_dtype_name(dt),
           (long long)N, bx / 1e6, by / 1e6);
    printf("  %-26s %10s %10s %8s\n", "kernel(s)", "median us", "min us", "GB/s");
    const struct {
        const char *what;
        chain ch;
        double bytes; /* read and written at least */
    } rows_mp[] = {{"copy dX (floor)", {.src = t[0].data, .dst = t[2].data, .bytes = bx}, 2.0 * bx},
                   {"maxpool fwd", {.ops = {&fwd}, .n = 1}, (double)(bx + by)},
                   {"maxpool grad", {.ops = {&grad}, .n = 1}, (double)(2 * bx + by)}};
    for (size_t r = 0; r < sizeof rows_mp / sizeof rows_mp[0] && !rc; r++) {
        double med = 0, mn = 0;
        rc = time_it(rows_mp[r].what, &rows_mp[r].ch, warmup, iters, &med, &mn);
        if (!rc) printf("  %-26s %10.1f %10.1f %8.0f\n", rows_mp[r].what, med, mn, rows_mp[r].bytes / (med * 1e-6) / 1e9);
    }
    op_free(&grad);
    op_free(&fwd);
    return rc;
}

int main(int argc, char **argv) {
    int64_t batch = 256;
    int iters = 50, warmup = 5;
    bool nhwc = true;
    kiln_dtype dt = KILN_F16;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(o, "--nchw") == 0) {
            nhwc = false;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bn_train: %s needs a value\n", o);
            return 2;
        }
        i++;
        if (strcmp(o, "--batch") == 0) batch = atoll(v);
        else if (strcmp(o, "--iters") == 0) iters = atoi(v);
        else if (strcmp(o, "--warmup") == 0) warmup = atoi(v);
        else if (strcmp(o, "--dtype") == 0) {
            dt = strcmp(v, "f32") == 0 ? KILN_F32 : strcmp(v, "bf16") == 0 ? KILN_BF16 : KILN_F16;
        } else {
            fprintf(stderr, "usage: bn_train [--batch 256] [--iters 50] [--warmup 5] [--dtype f16|bf16|f32] [--nchw]\n");
            return 2;
        }
    }
    if (batch < 1 || iters < 1 || warmup < 0) return 2;
    /* ResNet-50's BN shapes (C, H) and how many BNs of each a step runs (53 in all): the
     * stem's, then per stage the bottlenecks' width / output BNs (and the downsample's); res:
     * the bottleneck ends among them (16; 15 with a Sum to fold, the 16th, layer4.2's, has
     * none: counted with one, an upper bound of 1 of 16) */
    static const struct {
        int64_t C, H;
        int mult, res;
    } shapes[] = {{64, 112, 1, 0},  {64, 56, 6, 0},   {256, 56, 4, 3},   {128, 56, 1, 0},
                  {128, 28, 7, 0},  {512, 28, 5, 4},  {256, 28, 1, 0},   {256, 14, 11, 0},
                  {1024, 14, 7, 6}, {512, 14, 1, 0},  {512, 7, 5, 0},    {2048, 7, 4, 3}};
    const size_t es = kiln_dtype_size(dt);
    const size_t need = (size_t)batch * 64 * 112 * 112 * es * NBIG + ((size_t)64 << 20);
    if (kiln_context_create(&ctx)) return 1;
    kiln_cuda_options o = {.device = 0, .arena_bytes = need};
    if (kiln_cuda_create(ctx, &o, &cu)) {
        fprintf(stderr, "bn_train: %s\n", kiln_context_message(ctx));
        kiln_context_free(ctx);
        return 1;
    }
    const kiln_cuda_props *p = kiln_cuda_get_props(cu);
    printf("device: %s, %d SMs, compute capability %d.%d\n", p->name, p->sm_count, p->cc_major, p->cc_minor);
    totals tot = {{0}, 0};
    int rc = nhwc ? bench_maxpool(dt, batch, warmup, iters) : 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0] && !rc; s++)
        rc = bench_shape(dt, nhwc, batch, shapes[s].C, shapes[s].H, shapes[s].mult, shapes[s].res, warmup, iters, &tot);
    if (!rc) {
        printf("\nResNet-50's 53 BNs at batch %lld (each shape's median times its count), ms:\n", (long long)batch);
        for (int r = 0; r < NROWS; r++)
            printf("  %-26s %8.2f%s\n", rows[r], tot.us[r] / 1e3,
                   r == 9 ? " (the 33 pairs not at a block end)" : r >= 7 && r <= 8 ? " (the 16 block ends)" : "");
        printf("  forward:  unfused bn, relu %.2f ms -> fused %.2f ms; backward: relugrad, bngrad %.2f ms -> fused "
               "%.2f ms\n",
               tot.us[3] / 1e3, tot.us[2] / 1e3, tot.us[6] / 1e3, tot.us[5] / 1e3);
        printf("  block ends: sum, relugrad, bngrad %.2f ms -> residual fused %.2f ms\n", tot.us[8] / 1e3,
               tot.us[7] / 1e3);
        printf("  not block ends (33 BN -> ReLU pairs): bngrad+relu with Y %.2f ms -> mask from X %.2f ms\n",
               tot.y33 / 1e3, tot.us[9] / 1e3);
        /* conv-bn-stats (all 53 BNs counted as bn+relu: the relu=0 ones move the same bytes) */
        printf("  conv-bn-stats: bn+relu fused %.2f ms -> sums given %.2f ms (saved if GenStats is free: %.2f ms; the "
               "fallback's sums pass adds back %.2f ms)\n",
               tot.us[2] / 1e3, tot.us[11] / 1e3, (tot.us[2] - tot.us[11]) / 1e3, tot.us[10] / 1e3);
    }
    kiln_cuda_free(cu);
    kiln_context_free(ctx);
    return rc;
}
