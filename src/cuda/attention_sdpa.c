/*
 * attention_sdpa.c — kiln.Attention through cuDNN's fused attention (cudnn_graph.c's
 * kiln_cuda_sdpa_plan: cuDNN 9.13.1's SDPA operation, softmax(scale Q K^T) V as one Hopper
 * kernel; older libraries have none and kiln's kernels run), beside attention_flash.cu.
 *
 * Why both: on an H200 (bench/NOTES.md, the twenty-eighth session's SDPA table) cuDNN's kernel
 * ran ViT-B/16's attention (3,072 heads of 197 rows, D 64) in 0.168 ms against kiln's 0.316
 * and a 1,024-row sequence in 0.235 against 0.436, while kiln's kernel won ViT-B/32's 50 rows
 * (0.042 against 0.057) and keeps Swin's windows with their biases (which cuDNN 9.19's
 * operation does not take: its Bias input is 9.21's). So the choice is made per problem by timing, as the convolutions' are: the plan
 * is made at plan time (kiln_cuda_ws_attention, which also gives the node its workspace), and
 * on the node's first run (eager, outside graph capture) both kernels run on the node's own
 * buffers, three times each, and the faster one (the better of the last two) is kept for
 * every later run, and in the algorithm cache for later processes.
 *
 * What it takes: f16 / bf16; no bias, no L2-normalized rows, no tensor-valued scale, a
 * positive scale (a negative one gave NaN rows on cuDNN 9.19: the sweep's case); D and Dv
 * multiples of 8 up to 128; every operand's columns contiguous, its row stride, batch strides
 * and offset multiples of 8 elements (16-byte aligned rows); and one split of the flat batch
 * into (b, h) that all four operands' batch strides agree on (their batch dims, size-1 dims
 * dropped and neighbours that step as one merged, give at most two strides each).
 *
 * KILN_CUDA_SDPA=0: never; =1: wherever cuDNN has a plan, untimed (the GPU op sweep's
 * backend_ops_sdpa runs the Attention cases so); unset: timed, with autotune only.
 */
#include "cuda_internal.h"

#include "../ops/attention.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* a's batch dims, size-1 dims dropped and neighbours that step as one merged, outermost first */
static int merged(const kiln_attn_addr *a, int64_t *dims, int64_t *str) {
    int n = 0;
    for (int i = 0; i < a->nb; i++) {
        if (a->bdims[i] == 1) continue;
        if (n > 0 && str[n - 1] == a->bstr[i] * a->bdims[i]) {
            dims[n - 1] *= a->bdims[i];
            str[n - 1] = a->bstr[i];
            continue;
        }
        dims[n] = a->bdims[i];
        str[n++] = a->bstr[i];
    }
    return n;
}

/* The batch strides (b, h) of a for nbatch = B * H flat batches; false when its batch dims do
 * not split so. */
static bool split_bh(const kiln_attn_addr *a, int64_t B, int64_t H, int64_t *sb, int64_t *sh) {
    int64_t dims[KILN_MAX_DIMS], str[KILN_MAX_DIMS];
    const int n = merged(a, dims, str);
    if (n == 0) { /* one batch */
        *sh = *sb = 0;
        return B * H == 1;
    }
    if (n == 1) { /* one stride over all: h the inner part */
        *sh = str[0];
        *sb = str[0] * H;
        return dims[0] == B * H;
    }
    if (n == 2 && dims[1] == H && dims[0] == B) {
        *sb = str[0];
        *sh = str[1];
        return true;
    }
    return false;
}

/* the (b, h) split to try: an operand's inner batch dim when it has two, else one head */
static int64_t heads_of(const kiln_attn_geom *g) {
    const kiln_attn_addr *ops[4] = {&g->q, &g->k, &g->v, &g->o};
    for (int i = 0; i < 4; i++) {
        int64_t dims[KILN_MAX_DIMS], str[KILN_MAX_DIMS];
        if (merged(ops[i], dims, str) == 2 && dims[1] > 0 && g->nbatch % dims[1] == 0) return dims[1];
    }
    return 1;
}

/* g as cuDNN's problem, or false with why */
static bool sdpa_geo(const kiln_attn_geom *g, kiln_dtype dt, kiln_sdpa_geo *s, char *why, size_t n) {
    if (dt != KILN_F16 && dt != KILN_BF16) {
        snprintf(why, n, "cuDNN's fused attention here takes f16 / bf16, not %s", kiln_dtype_name(dt));
        return false;
    }
    if (g->has_bias[0] || g->has_bias[1] || g->q_norm || g->k_norm || g->n_hs > 0) {
        snprintf(why, n, "biases, normalized rows and tensor scales are kiln's kernels' alone");
        return false;
    }
    if (g->d % 8 || g->dv % 8 || g->d < 8 || g->dv < 8 || g->d > 128 || g->dv > 128 || g->lq < 1 || g->lk < 1) {
        snprintf(why, n, "head dims %lld / %lld (multiples of 8 up to 128 are taken), %lld x %lld rows",
                 (long long)g->d, (long long)g->dv, (long long)g->lq, (long long)g->lk);
        return false;
    }
    /* cuDNN 9.19's operation returned NaN for every row with a negative scale (the op sweep's
     * "negative scale" case on an H200; why not looked into) */
    if (!(g->scale > 0.f) || g->scale > 3.0e38f) {
        snprintf(why, n, "scale %g: cuDNN's fused attention takes positive finite scales", (double)g->scale);
        return false;
    }
    const int64_t H = heads_of(g), B = g->nbatch / H;
    const kiln_attn_addr *ops[4] = {&g->q, &g->k, &g->v, &g->o};
    int64_t *st[4] = {s->sq, s->sk, s->sv, s->so};
    for (int i = 0; i < 4; i++) {
        const kiln_attn_addr *a = ops[i];
        if (a->cs != 1 || a->rs % 8 || a->off % 8 || !split_bh(a, B, H, &st[i][0], &st[i][1]) || st[i][0] % 8 ||
            st[i][1] % 8) {
            snprintf(why, n, "operand %d's layout (rows %lld apart, columns %lld, offset %lld; %d batch dims) is not "
                     "one (batch, head) split of 16-byte aligned rows", i, (long long)a->rs, (long long)a->cs,
                     (long long)a->off, a->nb);
            return false;
        }
        st[i][2] = a->rs;
        /* a size-1 dim's stride is never stepped: give cuDNN the packed value */
        if (H == 1) st[i][1] = a->rs * (i == 0 || i == 3 ? g->lq : g->lk);
        if (B == 1) st[i][0] = st[i][1] * H;
    }
    s->b = B;
    s->h = H;
    s->lq = g->lq;
    s->lk = g->lk;
    s->d = g->d;
    s->dv = g->dv;
    s->scale = g->scale;
    s->bf16 = dt == KILN_BF16;
    return true;
}

/* the node's geometry (its errors quiet: the kernel reports them) */
static bool node_geo(const kiln_op_ctx *c, kiln_tensor *const *hin, kiln_attn_geom *g) {
    kiln_context quiet = {0};
    kiln_op_ctx cc = *c;
    cc.kctx = &quiet;
    return kiln_attention_resolve(&cc, hin, g) == KILN_OK;
}

/* the kept choice's key in the algorithm cache, from the plan's key */
static void choice_key(const char *plan_key, char *key, size_t n) { snprintf(key, n, "sdpa-choice %s", plan_key); }

kiln_status kiln_cuda_ws_attention(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    *bytes = 0;
    if (!cu->sdpa || (cu->sdpa == 1 && !cu->autotune)) return KILN_OK;
    kiln_attn_geom g;
    kiln_sdpa_geo s;
    char why[256];
    if (!node_geo(c, kiln_cuda_host_inputs(c), &g) || !sdpa_geo(&g, c->in[0]->dtype, &s, why, sizeof why))
        return KILN_OK;
    struct kiln_genstats_problem *p = NULL;
    kiln_status st = kiln_cuda_sdpa_plan(cu, c->kctx, &s, false, &p);
    if (st) return st;
    if (!p) {
        /* an earlier process's choice: where kiln's kernel won, no plan is made (~50 ms of
         * cuDNN's time a problem) and the node runs kiln's kernel (no plan to look up then) */
        char pk[KILN_SDPA_KEY], key[KILN_ALGO_KEY];
        kiln_cuda_sdpa_key_of(&s, pk, sizeof pk);
        choice_key(pk, key, sizeof key);
        const kiln_algo_entry *kept = kiln_algo_cache_find(cu->algos, cu->n_algos, key);
        if (cu->sdpa == 1 && kept && kept->algo == KILN_GENSTATS_FALLBACK) {
            cu->stats.sdpa_kept_kiln++;
            return KILN_OK;
        }
        if ((st = kiln_cuda_sdpa_plan(cu, c->kctx, &s, true, &p)) != KILN_OK || !p) return st;
        double *ms;
        int *choice = kiln_cuda_genstats_choice(p, &ms);
        if (kept && (kept->algo == KILN_GENSTATS_GRAPH || kept->algo == KILN_GENSTATS_FALLBACK)) *choice = kept->algo;
    }
    size_t ws = 0;
    if (kiln_cuda_genstats_ok(p, &ws, NULL)) *bytes = ws;
    return KILN_OK;
}

/* the operand's first element */
static void *at(const kiln_tensor *t, const kiln_attn_addr *a) { return (char *)t->data + a->off * 2; }

/* Both kernels on the node's buffers, three runs each; the faster one's choice. */
static kiln_status time_both(kiln_cuda *cu, kiln_op_ctx *c, const kiln_attn_geom *g,
                             struct kiln_genstats_problem *p, void *const ptr[4], int *choice, double ms[2]) {
    const void *nob[2] = {NULL, NULL};
    const int nodt[2] = {0, 0};
    cudaEvent_t ev[2] = {NULL, NULL};
    if (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess) {
        for (int k = 0; k < 2; k++)
            if (ev[k]) cudaEventDestroy(ev[k]);
        return kiln_fail(c->kctx, KILN_ERR_DEVICE, "cudaEventCreate failed");
    }
    kiln_status st = KILN_OK;
    for (int w = 0; w < 2 && !st; w++) { /* 0: cuDNN, 1: kiln's flash kernel */
        float best = 1e30f;
        for (int r = 0; r < 3 && !st; r++) {
            float e = 0.f;
            if (cudaEventRecord(ev[0], cu->stream) != cudaSuccess)
                st = kiln_fail(c->kctx, KILN_ERR_DEVICE, "cudaEventRecord failed");
            if (!st)
                st = w == 0 ? kiln_cuda_sdpa_run(cu, c->kctx, p, ptr[0], ptr[1], ptr[2], ptr[3], c->workspace,
                                                 c->workspace_size)
                            : kiln_cuda_flash_attention(cu, c->kctx, g, c->in[0]->dtype, c->in[0]->data, c->in[1]->data,
                                                        c->in[2]->data, nob, nodt, c->out[0]->data);
            if (!st && (cudaEventRecord(ev[1], cu->stream) != cudaSuccess || cudaEventSynchronize(ev[1]) != cudaSuccess ||
                        cudaEventElapsedTime(&e, ev[0], ev[1]) != cudaSuccess))
                st = kiln_fail(c->kctx, KILN_ERR_DEVICE, "timing an Attention kernel failed");
            if (!st && r > 0 && e < best) best = e;
        }
        ms[w] = best;
    }
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    if (st) return st;
    *choice = ms[0] < ms[1] ? KILN_GENSTATS_GRAPH : KILN_GENSTATS_FALLBACK;
    kiln_cuda_conv_stats_note(c->kctx, "Attention node '%s' (%s): cuDNN %.3f ms, kiln %.3f ms: %s", c->node->name,
                              kiln_cuda_sdpa_key(p), ms[0], ms[1], *choice == KILN_GENSTATS_GRAPH ? "cuDNN" : "kiln");
    kiln_algo_entry e;
    memset(&e, 0, sizeof e);
    choice_key(kiln_cuda_sdpa_key(p), e.key, sizeof e.key);
    e.algo = *choice;
    e.ms = (float)(ms[0] < ms[1] ? ms[0] : ms[1]);
    e.fused = -1;
    if (!kiln_algo_cache_put(&cu->algos, &cu->n_algos, &cu->cap_algos, &e))
        return kiln_fail(c->kctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for the algorithm cache");
    if (cu->algo_path[0] && kiln_algo_cache_store(cu->algo_path, cu->algo_prefix, &e) == 0) cu->stats.algos_written++;
    return KILN_OK;
}

kiln_status kiln_cuda_attention_sdpa(kiln_cuda *cu, kiln_op_ctx *c, const kiln_attn_geom *g, bool *done) {
    *done = false;
    if (!cu->sdpa || (cu->sdpa == 1 && !cu->autotune)) return KILN_OK;
    kiln_sdpa_geo s;
    char why[256];
    if (!sdpa_geo(g, c->in[0]->dtype, &s, why, sizeof why)) return KILN_OK;
    struct kiln_genstats_problem *p = NULL;
    kiln_status st = kiln_cuda_sdpa_plan(cu, c->kctx, &s, false, &p);
    if (st || !kiln_cuda_genstats_ok(p, NULL, NULL)) return st;
    void *const ptr[4] = {at(c->in[0], &g->q), at(c->in[1], &g->k), at(c->in[2], &g->v), at(c->out[0], &g->o)};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptr[i] % 16) return KILN_OK;
    double *ms;
    int *choice = kiln_cuda_genstats_choice(p, &ms);
    if (cu->sdpa == 1 && *choice == KILN_GENSTATS_UNTIMED) {
        char fwhy[160];
        if (!cu->flash_attention ||
            !kiln_cuda_flash_attention_ok(g, c->in[0]->dtype, c->in[0]->data, c->in[1]->data, c->in[2]->data, fwhy,
                                          sizeof fwhy))
            *choice = KILN_GENSTATS_GRAPH; /* against attention.cu's kernels cuDNN's always wins */
        else {
            enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
            cudaStreamIsCapturing(cu->stream, &cap);
            if (cap != cudaStreamCaptureStatusNone) return KILN_OK; /* untimed in a capture: kiln's kernel */
            if ((st = time_both(cu, c, g, p, ptr, choice, ms)) != KILN_OK) return st;
        }
    }
    if (cu->sdpa == 1 && *choice != KILN_GENSTATS_GRAPH) return KILN_OK;
    st = kiln_cuda_sdpa_run(cu, c->kctx, p, ptr[0], ptr[1], ptr[2], ptr[3], c->workspace, c->workspace_size);
    if (!st) {
        cu->stats.attention_sdpa_calls++;
        *done = true;
    }
    return st;
}
