/*
 * test_backend_ops.c — every op swept on every backend against the CPU reference, from
 * the op's own test cases (ggml's test-backend-ops). ctest -L gpu runs it on a device;
 * ctest -L cpu runs it with --dry-run (no device).
 *
 * Where the cases come from: each op file's `test` function (kiln_op_def.test) calls the
 * helpers of src/core/optest.h. This program installs kiln_optest_set_hook, so every case
 * of kiln_optest / kiln_optest_opset whose CPU reference ran is handed here with its node
 * and inputs, and is swept:
 *
 *   - forward: the node itself;
 *   - gradient: when the op has a gradient rule and the case has float inputs it takes
 *     gradients for, the op alone is extended by autograd (a loss sum(Y_k * R_k) over its
 *     float outputs, as kiln_gradcheck builds it), the whole graph is evaluated on the
 *     CPU, and every node autograd emitted is swept with the inputs the CPU computed for
 *     it. (kiln_gradcheck itself checks those rules against finite differences.)
 *
 * Each swept node runs on the backend under test (today: cuda; CPU is the reference) in
 * every dtype the backend
 * accepts for it: the case's float inputs (f32 / f64; never value inputs such as Resize's
 * scales) are rounded to f32, f16 and bf16 (if the backend rejects all of them converted,
 * only input 0 is), and the CPU reference is run on the rounded values in the case's own
 * dtype, so both sides see the same inputs (ncnn's rule). Cases without float inputs run
 * once, in their own dtypes; f64 cases also in f64. Each dtype runs in NCHW where the backend takes it and,
 * where the node has a 4-D tensor, in every mix of NHWC the backend takes (4-D inputs one
 * by one, the outputs together: a binary op takes all NHWC or a channel vector NCHW,
 * kiln.ToNHWC an NCHW input and an NHWC output only). The output buffers are poisoned
 * with NaN first.
 *
 * Compare: |x - ref| <= atol + rtol*|ref| (NaN passes only against a NaN reference,
 * which the poison never is), the tolerance by the lower precision of the run's dtype and
 * the output's: f32 atol 2e-5 + 1e-5 max|ref|, rtol 1e-4; f16 1e-3 + 1e-3 max|ref|,
 * 4e-3; bf16 1e-2 + 8e-3 max|ref|, 3e-2 (the max|ref| term: products, convolutions and
 * reductions, whose error scales with the output's magnitude), never less than the case's
 * own atol / rtol (kiln_optest_sweep_tol: long reductions); an f16 / bf16 output is
 * compared with the reference rounded once to its dtype; integer and bool outputs
 * exactly. Failures print the first differing element, the max error and the tolerance;
 * the table gives each op and dtype the largest share of the error budget its passing
 * cases used; -v prints every passing line with its share. f32 cases of the
 * unary and binary elementwise kernels run again with every device pointer one element
 * off 16-byte alignment (their scalar paths).
 *
 * A case the backend's supports check rejects is counted as unsupported (with the
 * reason, under -v), not as a failure. At the end: a table of counts per op and dtype
 * (passed, /failed, ~unsupported), then the
 * check that every kernel of the backend's table (src/cuda/table.c) has at least one case
 * it accepted (FAIL naming the op otherwise), then "N passed, N failed". Exits non-zero
 * on any failure.
 *
 * Usage: test_backend_ops [--dry-run] [--dw-grad | --dw-grad-timed] [--dw-grad-bench] [--flash-attn]
 *                         [--flash-bench] [--sdpa-kept] [-v] [OP ...]
 *   --dry-run (also --record): no device. Every case's CPU reference runs in every dtype,
 *     the backend's supports check must accept it, and the CUDA C generated for each
 *     kiln.FusedElementwise case is compiled by NVRTC for sm_90; the table of counts
 *     then lists which ops got cases, and the coverage check runs (the CI check).
 *   OP: only the test cases of these ops' files (kiln_op_def names); no coverage check.
 *   --grad-coverage: no device; the audit of issue 12 (ctest grad_coverage, label cpu in
 *     CUDA builds). Only the gradient graphs are built: for every op of the registry with a
 *     gradient rule, its own test cases are extended by autograd as in the sweep, and every
 *     node autograd emits must have a kernel in the cuda table (kiln.UnaryGrad: one for the
 *     op it differentiates) that accepts at least one of the cases that reach it. FAIL
 *     names each emitted op without one, each op that refuses every case (with the
 *     reason), and each op with a gradient rule whose cases never built a gradient graph;
 *     exceptions are listed in grad_exceptions below, each with its reason.
 *   --dw-grad: depthwise kiln.ConvGradWeight / kiln.ConvGradInput on conv_depthwise_grad.cu's
 *     kernels (kiln_cuda_options.conv_dw_grad, on by default but off in the plain sweep;
 *     autotune off so that they
 *     run on every case); FAIL if they never ran. With -v each case's max abs error.
 *   --dw-grad-timed: the same with autotune on: each depthwise gradient problem is timed on
 *     those kernels and on cuDNN (conv.c's dw_faster) and the faster runs.
 *   --dw-grad-bench: times convnext_tiny's depthwise 7x7 gradients (f16 NHWC, batch 128)
 *     on conv_depthwise_grad.cu, cuDNN and (dX) conv_depthwise.cu's gather kernel, and
 *     compares the results with cuDNN's (dw_grad_bench below).
 *   --flash-attn: kiln.Attention on attention_flash.cu's kernel where it takes the node
 *     (kiln_cuda_options.flash_attention: on by default, off in the plain sweep). Each Attention case
 *     run prints whether the flash kernel ran it or attention.cu's did, with the reason;
 *     FAIL if the flash kernel never ran.
 *   --flash-bench: times attention_flash.cu against attention.cu's kernels on ViT-B/16,
 *     Swin-T stage 1 and a long sequence (f16), and compares their outputs (flash_bench).
 *   --sdpa-kept: the Attention path choice kept in the cache file and taken by the next
 *     process, with no cuDNN plan made where kiln's kernel won (sdpa_kept).
 *   -v: print every passing line, every unsupported case with its reason, and a table
 *     row per op and dtype with the first reason a case was unsupported (default:
 *     failures, one line per op file, and the table of one line per op).
 */
#include "core/optest.h"
#include "cuda/cuda_backend.h"
#include "gpu_util.h"
#include "train/autograd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_IN 16
#define MAX_OUT 16 /* kiln.ConcatGrad's 14 parts (two launches of the NHWC kernel) */
#define MAX_LAYOUTS 32

static kiln_context *ctx;
static kiln_cuda *cu; /* NULL: --dry-run */
static bool verbose;
static bool flash_attn; /* --flash-attn */
static bool sdpa_forced; /* KILN_CUDA_SDPA=1: cuDNN's fused attention wherever it has a plan */
static int passed, failed;
/* The current case's own tolerances (kiln_optest's atol / rtol): the least allowed in f32. */
static double case_atol, case_rtol;

/* ------------------------------------------------------------------ the gradient audit */

static bool grad_coverage; /* --grad-coverage */
static const char *audit_from; /* the forward op of the gradient graph being swept */

/* Ops a gradient rule emits that need no CUDA kernel, each with its reason. Only ops that
 * are not differentiated in practice belong here. */
static const struct {
    const char *key, *why;
} grad_exceptions[] = {
    /* the loss sum(Y * R) that kiln_gradcheck and this sweep append to every case: a test
     * harness op, never part of a model or a training graph */
    {"kiln.GradCheckLossGrad", "the gradient checker's own loss (test harness only)"},
    /* the same loss as a forward op: its rule differentiates Y only, never R, and no case
     * of its file takes a gradient through it (the harness does, above) */
    {"kiln.GradCheckLoss", "the gradient checker's own loss (test harness only)"},
};

typedef struct audit {
    char key[200]; /* table name; kiln.UnaryGrad with [op] */
    bool missing;  /* no kernel in the cuda table */
    int accepted;  /* cases (all dtypes counted once) the supports check took */
    int refused;   /* cases it refused in every dtype */
    char why[200]; /* the first refusal's reason */
    char from[64]; /* the first forward op whose rule emitted it */
} audit;

static audit *audits;
static int n_audits, cap_audits;
/* ops with a gradient rule whose cases built a gradient graph */
static bool *grad_built;

static audit *audit_for(const char *key, const char *from) {
    for (int i = 0; i < n_audits; i++)
        if (strcmp(audits[i].key, key) == 0) return &audits[i];
    if (n_audits == cap_audits) {
        int cap = cap_audits ? 2 * cap_audits : 64;
        audit *grown = realloc(audits, (size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        audits = grown;
        cap_audits = cap;
    }
    audit *a = &audits[n_audits++];
    memset(a, 0, sizeof *a);
    snprintf(a->key, sizeof a->key, "%s", key);
    snprintf(a->from, sizeof a->from, "%s", from);
    return a;
}

static const char *grad_exception(const char *key) {
    for (size_t i = 0; i < sizeof grad_exceptions / sizeof grad_exceptions[0]; i++)
        if (strcmp(grad_exceptions[i].key, key) == 0) return grad_exceptions[i].why;
    return NULL;
}

/* ------------------------------------------------------------------ counts */

enum { C_PASS, C_FAIL, C_UNSUP };

typedef struct row {
    char op[64];
    char dt[8];
    int n[3];
    int nhwc, grad; /* passes in NHWC; passes of nodes from gradient graphs */
    double budget;  /* the largest share of the error budget a passing case used */
    char why[160];  /* the first reason a case was unsupported */
} row;

static row *rows;
static int n_rows, cap_rows;

static row *row_for(const char *op, const char *dt) {
    for (int i = 0; i < n_rows; i++)
        if (strcmp(rows[i].op, op) == 0 && strcmp(rows[i].dt, dt) == 0) return &rows[i];
    if (n_rows == cap_rows) {
        int cap = cap_rows ? 2 * cap_rows : 256;
        row *grown = realloc(rows, (size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        rows = grown;
        cap_rows = cap;
    }
    row *r = &rows[n_rows++];
    memset(r, 0, sizeof *r);
    snprintf(r->op, sizeof r->op, "%s", op);
    snprintf(r->dt, sizeof r->dt, "%s", dt);
    return r;
}

/* The share of the error budget the last compare used (the worst of a node's outputs). */
static double case_budget;

static void tally(const char *op, const char *dt, int what, bool nhwc, bool grad, const char *why) {
    row *r = row_for(op, dt);
    if (!r) return;
    if (what == C_PASS && case_budget > r->budget) r->budget = case_budget;
    case_budget = 0;
    r->n[what]++;
    if (what == C_PASS && nhwc) r->nhwc++;
    if (what == C_PASS && grad) r->grad++;
    if (what == C_UNSUP && !r->why[0] && why) snprintf(r->why, sizeof r->why, "%s", why);
    if (what == C_PASS) passed++;
    if (what == C_FAIL) failed++;
}

/* "Conv", or "kiln.ConvGradInput" for kiln's internal ops: the names of the CUDA table. */
static void op_key(const kiln_node *n, char *buf, size_t size) {
    const bool internal = n->domain && strcmp(n->domain, "kiln") == 0;
    snprintf(buf, size, "%s%s", internal ? "kiln." : "", n->op_type);
}

/* ------------------------------------------------------------------ tensors */

static bool sweepable_float(kiln_dtype t) { return t == KILN_F32 || t == KILN_F64; }

/* A copy of t with dtype `to` (NULL on failure); values go through f64, so a float
 * rounds once to nearest even. */
static kiln_tensor *converted(const kiln_tensor *t, kiln_dtype to) {
    kiln_tensor *c = kiln_tensor_new(ctx, to, t->ndim, t->dims);
    if (!c) return NULL;
    const int64_t n = kiln_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        if (kiln_dtype_is_float(to)) kiln_set_f64(c, i, kiln_get_f64(t, i));
        else {
            const size_t es = kiln_dtype_size(t->dtype);
            memcpy((char *)c->data + (size_t)i * es, (const char *)t->data + (size_t)i * es, es);
        }
    }
    return c;
}

/* ------------------------------------------------------------------ the CPU reference */

/* ------------------------------------------------------------------ compare */

static void tolerances(kiln_dtype dt, const kiln_tensor *ref, double *a, double *r) {
    double max_ref = 0;
    for (int64_t i = 0; i < kiln_tensor_numel(ref); i++) {
        const double v = fabs(kiln_get_f64(ref, i));
        if (v > max_ref && !isinf(v) && !isnan(v)) max_ref = v;
    }
    switch (dt) {
    case KILN_F32: *a = 2e-5 + 1e-5 * max_ref; *r = 1e-4; break;
    case KILN_F16: *a = 1e-3 + 1e-3 * max_ref; *r = 4e-3; break;
    case KILN_BF16: *a = 1e-2 + 8e-3 * max_ref; *r = 3e-2; break;
    default: *a = *r = 0; return;
    }
    *a = fmax(*a, case_atol);
    *r = fmax(*r, case_rtol);
}

/* The lower precision of two dtypes (for the tolerance): bf16 < f16 < f32 < others. */
static kiln_dtype lower(kiln_dtype a, kiln_dtype b) {
    static const kiln_dtype order[] = {KILN_BF16, KILN_F16, KILN_F32};
    for (int i = 0; i < 3; i++)
        if (a == order[i] || b == order[i]) return order[i];
    return a;
}

/* 0 when got matches want within tolerance (gpu_compare); the share of the error budget
 * a passing compare used goes into case_budget. */
static int compare(const kiln_tensor *got, const kiln_tensor *want, double atol, double rtol, const char *label) {
    double used = 0;
    if (gpu_compare(got, want, atol, rtol, label, true, verbose, &used)) return 1;
    if (used > case_budget) case_budget = used;
    return 0;
}

/* ------------------------------------------------------------------ the cuda backend */

/* Layouts: bit i (i < MAX_IN) lays 4-D input i out NHWC, NHWC_OUT every 4-D output. */
#define NHWC_OUT (1u << 30)
static kiln_format fmt_in(unsigned layout, int i, const kiln_tensor *t) {
    return (layout & (1u << i)) && t->ndim == 4 ? KILN_FORMAT_NHWC : KILN_FORMAT_NCHW;
}
static kiln_format fmt_out(unsigned layout, const kiln_tensor *t) {
    return (layout & NHWC_OUT) && t->ndim == 4 ? KILN_FORMAT_NHWC : KILN_FORMAT_NCHW;
}

/* Does the backend take the node with inputs in[] (host tensors, values known) and
 * outputs shaped like out[], in layout? Its reason in why otherwise. */
static bool backend_supports(const kiln_node *node, int n_in, kiln_tensor **in, int n_out, kiln_tensor **out,
                             unsigned layout, char *why, size_t wn) {
    kiln_tensor shp[MAX_IN], shout[MAX_OUT];
    kiln_tensor *shpp[MAX_IN] = {0}, *shoutp[MAX_OUT] = {0};
    for (int i = 0; i < n_in; i++)
        if (in[i]) {
            shp[i] = *in[i];
            shp[i].data = NULL;
            shp[i].owns_data = false;
            shp[i].format = fmt_in(layout, i, in[i]);
            shpp[i] = &shp[i];
        }
    for (int k = 0; k < n_out; k++) {
        shout[k] = *out[k];
        shout[k].data = NULL;
        shout[k].owns_data = false;
        shout[k].format = fmt_out(layout, out[k]);
        shoutp[k] = &shout[k];
    }
    /* as on the device: values only through host_in */
    kiln_op_ctx c = {.kctx = ctx, .node = node, .n_in = n_in, .in = shpp, .n_out = n_out, .out = shoutp, .host_in = in};
    kiln_clear_error(ctx);
    if (kiln_cuda_supports(&c) != KILN_OK) {
        snprintf(why, wn, "%s", kiln_context_message(ctx));
        return false;
    }
    if (!cu && strcmp(node->op_type, "FusedElementwise") == 0 && !gpu_generated_compiles(ctx, &c)) {
        snprintf(why, wn, "generated source does not compile: %s", kiln_context_message(ctx));
        return false; /* reported as a failure by the caller: supports said yes */
    }
    return true;
}

/* Run the node on the device on in[] (host tensors) into outputs shaped like ref[];
 * compare with ref[] in tolerance dtype dt. 0: passed. */
static int device_run(const kiln_node *node, int n_in, kiln_tensor **in, int n_out, kiln_tensor **shape_out,
                      kiln_tensor **ref, unsigned layout, bool misalign, kiln_dtype dt, const char *label) {
    kiln_tensor din[MAX_IN], dout[MAX_OUT];
    kiln_tensor *dinp[MAX_IN] = {0}, *doutp[MAX_OUT] = {0};
    kiln_cuda_arena_reset(cu);
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) continue;
        if (gpu_device_copy(cu, ctx, in[i], misalign ? kiln_dtype_size(in[i]->dtype) : 0, true, fmt_in(layout, i, in[i]), &din[i])) {
            printf("FAIL %s: upload: %s\n", label, kiln_context_message(ctx));
            return 1;
        }
        dinp[i] = &din[i];
    }
    for (int k = 0; k < n_out; k++) {
        if (gpu_device_copy(cu, ctx, shape_out[k], misalign ? kiln_dtype_size(shape_out[k]->dtype) : 0, false,
                        fmt_out(layout, shape_out[k]), &dout[k]) ||
            kiln_cuda_fill_bytes(cu, dout[k].data, 0xFF, kiln_tensor_nbytes(shape_out[k]))) {
            printf("FAIL %s: output buffer: %s\n", label, kiln_context_message(ctx));
            return 1;
        }
        doutp[k] = &dout[k];
    }
    kiln_op_ctx c = {.kctx = ctx, .node = node, .n_in = n_in, .in = dinp, .n_out = n_out, .out = doutp, .host_in = in};
    size_t ws = 0;
    kiln_clear_error(ctx);
    if (kiln_cuda_supports(&c) || kiln_cuda_prepare(cu, &c) || kiln_cuda_workspace_size(cu, &c, &ws) ||
        kiln_cuda_workspace_reserve(cu, ws)) {
        printf("FAIL %s: %s\n", label, kiln_context_message(ctx));
        return 1;
    }
    c.workspace = ws ? kiln_cuda_workspace(cu, NULL) : NULL;
    c.workspace_size = ws;
    kiln_cuda_stats before;
    kiln_cuda_get_stats(cu, &before);
    if (kiln_cuda_rng_set(cu, 0) || kiln_cuda_run(cu, &c) || kiln_cuda_sync(cu)) {
        printf("FAIL %s: %s\n", label, kiln_context_message(ctx));
        return 1;
    }
    if (flash_attn && strcmp(node->op_type, "Attention") == 0) { /* which kernel ran it, and why */
        kiln_cuda_stats after;
        kiln_cuda_get_stats(cu, &after);
        if (after.attention_sdpa_calls > before.attention_sdpa_calls)
            printf("flash %s: cuDNN's fused attention ran it\n", label);
        else if (after.attention_flash_calls > before.attention_flash_calls)
            printf("flash %s: attention_flash.cu ran it\n", label);
        else
            printf("flash %s: fell back to attention.cu: %s\n", label,
                   after.attention_flash_fallbacks > before.attention_flash_fallbacks ? after.flash_refused
                                                                                    : "(flash path not reached)");
    }
    int bad = 0;
    for (int k = 0; k < n_out; k++) {
        kiln_tensor *got = kiln_tensor_new(ctx, shape_out[k]->dtype, shape_out[k]->ndim, shape_out[k]->dims);
        if (!got || kiln_cuda_download(cu, got->data, dout[k].data, kiln_tensor_nbytes(got))) {
            printf("FAIL %s: download: %s\n", label, kiln_context_message(ctx));
            kiln_tensor_free(got);
            return 1;
        }
        if (dout[k].format == KILN_FORMAT_NHWC) { /* back to NCHW to compare */
            kiln_tensor *nchw = kiln_tensor_clone(ctx, got);
            if (nchw) {
                got->format = KILN_FORMAT_NHWC;
                kiln_layout_convert(got, nchw->data, KILN_FORMAT_NCHW);
                nchw->format = KILN_FORMAT_NCHW;
            }
            kiln_tensor_free(got);
            got = nchw;
            if (!got) {
                printf("FAIL %s: out of memory\n", label);
                return 1;
            }
        }
        /* an f16 / bf16 output is the f32 result rounded once, an f32 output of an f64
         * case (run converted to f32) the f64 result rounded once: so is the reference
         * (values past the dtype's range become inf on both sides: exp(700) is 1e304 in
         * f64 and inf in f32) */
        const bool narrow = ((got->dtype == KILN_F16 || got->dtype == KILN_BF16) && sweepable_float(ref[k]->dtype)) ||
                            (got->dtype == KILN_F32 && ref[k]->dtype == KILN_F64);
        kiln_tensor *want = narrow ? converted(ref[k], got->dtype) : ref[k];
        if (!want) {
            printf("FAIL %s: out of memory\n", label);
            kiln_tensor_free(got);
            return 1;
        }
        double a, r;
        tolerances(lower(dt, ref[k]->dtype == KILN_F64 ? KILN_F32 : ref[k]->dtype), want, &a, &r);
        if (!kiln_dtype_is_float(got->dtype) && !kiln_dtype_is_float(ref[k]->dtype)) a = r = 0;
        char olab[800];
        if (n_out > 1) snprintf(olab, sizeof olab, "%s (output %d)", label, k);
        else snprintf(olab, sizeof olab, "%s", label);
        bad |= compare(got, want, a, r, olab);
        if (narrow) kiln_tensor_free(want);
        kiln_tensor_free(got);
    }
    return bad;
}

/* ------------------------------------------------------------------ one node swept */

static void free_all(kiln_tensor **t, int n) {
    for (int i = 0; i < n; i++) {
        kiln_tensor_free(t[i]);
        t[i] = NULL;
    }
}

/* The node in the dtype `dt`: dev[] (what the backend gets) and ref[] (the same values in
 * the case's dtypes, for the CPU reference). mode 0: convert every float input; 1: input 0
 * alone; 2: every one but the op's f32_inputs (kiln.FusedConv's prologue P, f32 only). False
 * when nothing would change. */
static bool make_variant(const kiln_node *node, int n_in, kiln_tensor *const *in, kiln_dtype dt, int mode,
                         kiln_tensor **dev, kiln_tensor **ref) {
    const kiln_op_def *d = kiln_op_get(node->op);
    bool ok = true;
    for (int i = 0; i < n_in; i++) {
        dev[i] = ref[i] = NULL;
        if (!in[i]) continue;
        const bool conv = dt != KILN_DTYPE_UNDEFINED && sweepable_float(in[i]->dtype) && !(d->value_inputs & (1u << i)) &&
                          (mode != 1 || i == 0) && (mode != 2 || !(d->f32_inputs & (1u << i)));
        if (conv) {
            dev[i] = converted(in[i], dt);
            ref[i] = dev[i] ? converted(dev[i], in[i]->dtype) : NULL;
        } else {
            dev[i] = kiln_tensor_clone(ctx, in[i]);
            ref[i] = kiln_tensor_clone(ctx, in[i]);
        }
        ok &= dev[i] && ref[i];
    }
    return ok;
}

/* The node runs on the kernel of the unary or the binary elementwise ops. */
static bool elementwise_kernel(const kiln_node *node) {
    const kiln_cuda_fn k = kiln_cuda_kernel_for(node->op);
    return k && (k == kiln_cuda_kernel_for(kiln_op_index("Relu")) || k == kiln_cuda_kernel_for(kiln_op_index("Add")));
}

static int popcount(unsigned v) {
    int n = 0;
    for (; v; v &= v - 1) n++;
    return n;
}

/* The layouts to run the node in (returns how many, up to MAX_LAYOUTS; 0: none the
 * backend takes, its reason in why): NCHW when the backend takes it, and, where the node
 * has a 4-D tensor, every mix of NHWC the backend takes (the 4-D inputs one by one, the
 * outputs together), the most NHWC first. */
static int pick_layouts(const kiln_node *node, int n_in, kiln_tensor **dev, int n_out, kiln_tensor **dshape,
                        unsigned *layouts, char *why, size_t wn) {
    int n = 0;
    if (backend_supports(node, n_in, dev, n_out, dshape, 0, why, wn)) layouts[n++] = 0;
    else if (strstr(why, "generated source")) return 0;
    int four[MAX_IN], n4 = 0;
    bool out4 = false;
    for (int i = 0; i < n_in; i++)
        if (dev[i] && dev[i]->ndim == 4 && n4 < 6) four[n4++] = i;
    for (int k = 0; k < n_out; k++) out4 |= dshape[k]->ndim == 4;
    const int bits = n4 + (out4 ? 1 : 0);
    char w2[512];
    for (int want = bits; want >= 1; want--)
        for (unsigned m = 1; m < (1u << bits); m++) {
            if (popcount(m) != want) continue;
            unsigned layout = 0;
            for (int b = 0; b < n4; b++)
                if (m & (1u << b)) layout |= 1u << four[b];
            if (out4 && (m & (1u << n4))) layout |= NHWC_OUT;
            if (n < MAX_LAYOUTS && backend_supports(node, n_in, dev, n_out, dshape, layout, w2, sizeof w2))
                layouts[n++] = layout;
        }
    return n;
}

static void sweep_node(const kiln_node *node, int n_in, kiln_tensor *const *in, int n_out, const char *label,
                       bool grad) {
    char key[96];
    op_key(node, key, sizeof key);
    audit *au = NULL; /* --grad-coverage: the audit's entry of this gradient node */
    if (grad_coverage && grad) {
        char akey[200];
        if (strcmp(key, "kiln.UnaryGrad") == 0)
            snprintf(akey, sizeof akey, "%s[%s]", key, kiln_attr_string(node, "op", "?"));
        else
            snprintf(akey, sizeof akey, "%s", key);
        au = audit_for(akey, audit_from);
    }
    if (node->op < 0 || !kiln_cuda_kernel_for(node->op)) { /* no kernel on this backend */
        if (au) au->missing = true;
        return;
    }
    if (n_in > MAX_IN || n_out > MAX_OUT || n_out < 1) return;
    bool any_dtype = false;     /* the backend took the node in some dtype */
    char first_why[200] = "";  /* else the reason it gave */
    const kiln_op_def *d = kiln_op_get(node->op);
    bool has_float = false, has_f64 = false;
    for (int i = 0; i < n_in; i++) {
        const bool eligible = in[i] && sweepable_float(in[i]->dtype) && !(d->value_inputs & (1u << i));
        has_float |= eligible;
        has_f64 |= eligible && in[i]->dtype == KILN_F64;
    }
    /* f32, f16, bf16; the case's own dtypes when it has no float input to convert, or
     * (as well) when it is f64 */
    static const kiln_dtype FLOATS[] = {KILN_F32, KILN_F16, KILN_BF16, KILN_DTYPE_UNDEFINED};
    const int n_dt = has_float ? 3 + has_f64 : 1;
    for (int t = 0; t < n_dt; t++) {
        const kiln_dtype dt = has_float ? FLOATS[t] : KILN_DTYPE_UNDEFINED;
        kiln_tensor *dev[MAX_IN], *ref[MAX_IN], *dshape[MAX_OUT] = {0}, *rout[MAX_OUT] = {0};
        char dtname[8], why[512] = "", why0[512] = "", lab[600];
        const kiln_tensor *data = NULL; /* as given: the first input that is not a bool condition */
        for (int i = 0; i < n_in; i++)
            if (in[i] && (!data || data->dtype == KILN_BOOL)) data = in[i];
        snprintf(dtname, sizeof dtname, "%s",
                 dt != KILN_DTYPE_UNDEFINED ? kiln_dtype_name(dt)
                 : has_f64                  ? "f64"
                 : data                     ? kiln_dtype_name(data->dtype)
                                            : "-");
        bool supported = false;
        unsigned layouts[MAX_LAYOUTS] = {0};
        int n_lay = 0;
        for (int mode = 0; mode < 3 && !supported; mode++) {
            if (mode == 1 && (dt == KILN_DTYPE_UNDEFINED || !in[0] || !sweepable_float(in[0]->dtype))) continue;
            if (mode == 2 && (dt == KILN_DTYPE_UNDEFINED || !kiln_op_get(node->op)->f32_inputs)) continue;
            if (!make_variant(node, n_in, in, dt, mode, dev, ref)) {
                snprintf(why, sizeof why, "out of memory");
                free_all(dev, n_in);
                free_all(ref, n_in);
                break;
            }
            if (gpu_eval_ref(ctx, node, n_in, dev, n_out, dshape, 0, true) != KILN_OK) {
                snprintf(why, sizeof why, "CPU infer rejects the inputs in %s: %s", dtname, kiln_context_message(ctx));
            } else {
                n_lay = pick_layouts(node, n_in, dev, n_out, dshape, layouts, why, sizeof why);
                supported = n_lay > 0;
                if (!supported && strstr(why, "generated source")) {
                    snprintf(lab, sizeof lab, "%s %s %s", key, label, dtname);
                    printf("FAIL %s: %s\n", lab, why);
                    tally(key, dtname, C_FAIL, false, grad, NULL);
                    free_all(dshape, n_out);
                    free_all(dev, n_in);
                    free_all(ref, n_in);
                    goto next_dtype;
                }
            }
            if (supported) break;
            if (mode == 0) snprintf(why0, sizeof why0, "%s", why);
            free_all(dshape, n_out);
            free_all(dev, n_in);
            free_all(ref, n_in);
        }
        if (!supported) {
            if (why0[0]) snprintf(why, sizeof why, "%s", why0); /* the reason with every input converted */
            if (!first_why[0]) snprintf(first_why, sizeof first_why, "%s", why);
            if (verbose) printf("skip %s %s %s: %s\n", key, label, dtname, why);
            tally(key, dtname, C_UNSUP, false, grad, why);
            continue;
        }
        any_dtype = true;
        /* the reference on the same (rounded) values */
        snprintf(lab, sizeof lab, "%s %s %s%s", key, label, dtname, grad ? " (gradient graph)" : "");
        if (gpu_eval_ref(ctx, node, n_in, ref, n_out, rout, 0, false) != KILN_OK) {
            printf("FAIL %s: the CPU reference failed: %s\n", lab, kiln_context_message(ctx));
            tally(key, dtname, C_FAIL, false, grad, NULL);
            goto done;
        }
        for (int l = 0; l < n_lay; l++) {
            char llab[700], tag[96] = "";
            if (layouts[l]) { /* which tensors are NHWC: " NHWC[in 0 2, out]" */
                size_t at = (size_t)snprintf(tag, sizeof tag, " NHWC[in");
                for (int i = 0; i < n_in && at < sizeof tag; i++)
                    if (dev[i] && fmt_in(layouts[l], i, dev[i]) == KILN_FORMAT_NHWC)
                        at += (size_t)snprintf(tag + at, sizeof tag - at, " %d", i);
                if (at < sizeof tag) snprintf(tag + at, sizeof tag - at, "%s]", layouts[l] & NHWC_OUT ? ", out" : "");
            }
            snprintf(llab, sizeof llab, "%s%s", lab, tag);
            if (!cu) {
                if (verbose) printf("ok   %s: CPU reference ran, cuda supports it (dry run)\n", llab);
                tally(key, dtname, C_PASS, layouts[l] != 0, grad, NULL);
                continue;
            }
            const int bad = device_run(node, n_in, dev, n_out, dshape, rout, layouts[l], false,
                                       dt != KILN_DTYPE_UNDEFINED ? dt : KILN_F32, llab);
            tally(key, dtname, bad ? C_FAIL : C_PASS, layouts[l] != 0, grad, NULL);
        }
        /* f32 elementwise kernels again with every pointer one element off 16-byte
         * alignment: their scalar paths */
        if (cu && dt == KILN_F32 && layouts[0] == 0 && elementwise_kernel(node)) {
            char mlab[700];
            snprintf(mlab, sizeof mlab, "%s misaligned", lab);
            const int bad = device_run(node, n_in, dev, n_out, dshape, rout, 0, true, dt, mlab);
            tally(key, dtname, bad ? C_FAIL : C_PASS, false, grad, NULL);
        }
    done:
        free_all(rout, n_out);
        free_all(dshape, n_out);
        free_all(dev, n_in);
        free_all(ref, n_in);
    next_dtype:;
    }
    if (au && any_dtype) au->accepted++;
    if (au && !any_dtype) {
        au->refused++;
        if (!au->why[0]) snprintf(au->why, sizeof au->why, "%s", first_why);
    }
}

/* ------------------------------------------------------------------ gradient graphs */

/* The op alone on in[] with a loss sum_k sum(Y_k * R_k), extended by autograd; every
 * node autograd emitted is swept with the inputs the CPU computes for it. */
static void sweep_gradients(const kiln_node *node, int n_in, kiln_tensor *const *in, int n_out, const char *label) {
    const kiln_op_def *d = kiln_op_get(node->op);
    if (!d || !d->grad || n_in > MAX_IN || n_out > MAX_OUT) return;
    bool wrt[MAX_IN] = {0}, any = false;
    for (int i = 0; i < n_in; i++) {
        const uint32_t bit = 1u << i;
        wrt[i] = in[i] && sweepable_float(in[i]->dtype) &&
                 !((d->nondiff_inputs | d->value_inputs | d->shape_only_inputs) & bit);
        any |= wrt[i];
    }
    if (!any) return;
    kiln_context *mctx = NULL;
    kiln_model *base = NULL, *m = NULL;
    kiln_tensor **vals = NULL, *rs[MAX_OUT] = {0};
    if (kiln_context_create(&mctx) || kiln_model_create(mctx, &base)) goto out;
    char names[MAX_IN][16], onames[MAX_OUT][16];
    const char *inp[MAX_IN], *outp[MAX_OUT];
    kiln_status st = KILN_OK;
    for (int i = 0; i < n_in && !st; i++) {
        snprintf(names[i], sizeof names[i], "x%d", i);
        inp[i] = in[i] ? names[i] : "";
        if (!in[i]) continue;
        if (wrt[i]) st = kiln_model_add_input(base, names[i], in[i]->dtype, in[i]->ndim, in[i]->dims);
        else st = kiln_model_add_initializer(base, names[i], in[i]);
    }
    for (int k = 0; k < n_out; k++) {
        snprintf(onames[k], sizeof onames[k], "y%d", k);
        outp[k] = onames[k];
    }
    kiln_node *fw = NULL;
    if (!st) st = kiln_model_add_node(base, node->op_type, "op", n_in, inp, n_out, outp, &fw);
    if (!st) {
        free(fw->domain);
        fw->domain = kiln_strdup(mctx, node->domain ? node->domain : "");
        fw->opset = node->opset;
        fw->attrs = node->n_attrs ? calloc((size_t)node->n_attrs, sizeof *fw->attrs) : NULL;
        for (int a = 0; a < node->n_attrs && !st; a++) {
            st = kiln_attr_copy(mctx, &fw->attrs[a], &node->attrs[a]);
            if (!st) fw->n_attrs = a + 1;
        }
    }
    for (int k = 0; k < n_out && !st; k++) st = kiln_model_add_output(base, onames[k]);
    if (st || kiln_model_finalize(base) || kiln_model_clone(base, &m)) goto out;
    /* loss = sum over float outputs of sum(Y_k * R_k) */
    m->n_outputs = 0;
    int loss = -1;
    kiln_dtype loss_dt = KILN_DTYPE_UNDEFINED;
    for (int k = 0; k < n_out; k++) {
        const kiln_value *y = &base->values[base->outputs[k]];
        if (!kiln_dtype_is_float(y->dtype) || y->ndim < 0) continue;
        if (loss_dt == KILN_DTYPE_UNDEFINED) loss_dt = y->dtype;
        if (y->dtype != loss_dt) continue; /* Sum takes one dtype (LayerNormalization's f32 statistics) */
        char rn[16], ln[16], sn[16];
        snprintf(rn, sizeof rn, "r%d", k);
        snprintf(ln, sizeof ln, "l%d", k);
        snprintf(sn, sizeof sn, "s%d", k);
        rs[k] = kt_rand(y->dtype, y->ndim, y->dims, -1, 1, 1000 + (uint64_t)k);
        const char *lin[2] = {onames[k], rn}, *lout[1] = {ln};
        kiln_node *ln_node = NULL;
        if (!rs[k] || kiln_model_add_initializer(m, rn, rs[k]) ||
            kiln_model_add_node(m, "GradCheckLoss", ln, 2, lin, 1, lout, &ln_node))
            goto out;
        free(ln_node->domain);
        ln_node->domain = kiln_strdup(mctx, "kiln");
        const int lv = kiln_model_find_value(m, ln);
        if (loss < 0) {
            loss = lv;
        } else {
            const char *sin[2] = {m->values[loss].name, ln}, *sout[1] = {sn};
            if (kiln_model_add_node(m, "Sum", sn, 2, sin, 1, sout, NULL)) goto out;
            loss = kiln_model_find_value(m, sn);
        }
    }
    if (loss < 0) goto out;
    int params[MAX_IN], grads[MAX_IN], np = 0;
    for (int i = 0; i < n_in; i++)
        if (wrt[i]) params[np++] = kiln_model_find_value(m, names[i]);
    const int first_bwd = m->n_nodes;
    if (kiln_autograd(m, loss, np, params, grads)) {
        if (verbose || grad_coverage) printf("note %s: no gradient graph: %s\n", label, kiln_context_message(mctx));
        goto out;
    }
    if (grad_built) grad_built[node->op] = true;
    audit_from = node->op_type;
    /* evaluate the graph in node order on the CPU */
    vals = calloc((size_t)m->n_values, sizeof *vals);
    if (!vals) goto out;
    for (int i = 0; i < n_in; i++)
        if (in[i] && wrt[i]) vals[kiln_model_find_value(m, names[i])] = kiln_tensor_clone(ctx, in[i]);
    for (int v = 0; v < m->n_values; v++)
        if (!vals[v] && m->values[v].init) vals[v] = kiln_tensor_clone(ctx, m->values[v].init);
    for (int j = 0; j < m->n_nodes; j++) {
        kiln_node *nd = &m->nodes[j];
        if (nd->op < 0) nd->op = kiln_op_index_domain(nd->domain, nd->op_type);
        kiln_tensor *nin[MAX_IN] = {0}, *nout[MAX_OUT] = {0};
        if (nd->op < 0 || nd->n_in > MAX_IN || nd->n_out > MAX_OUT) goto out;
        for (int i = 0; i < nd->n_in; i++) nin[i] = nd->in[i] >= 0 ? vals[nd->in[i]] : NULL;
        if (gpu_eval_ref(ctx, nd, nd->n_in, nin, nd->n_out, nout, 0, false) != KILN_OK) {
            printf("FAIL %s: the CPU gradient graph failed at %s: %s\n", label, nd->op_type,
                   kiln_context_message(ctx));
            failed++;
            goto out;
        }
        if (j >= first_bwd) {
            char lab[300];
            snprintf(lab, sizeof lab, "%s (d %s)", label, node->op_type);
            sweep_node(nd, nd->n_in, nin, nd->n_out, lab, true);
        }
        for (int k = 0; k < nd->n_out; k++) {
            if (nd->out[k] >= 0 && !vals[nd->out[k]]) vals[nd->out[k]] = nout[k];
            else kiln_tensor_free(nout[k]);
        }
    }
out:
    if (vals)
        for (int v = 0; m && v < m->n_values; v++) kiln_tensor_free(vals[v]);
    free(vals);
    for (int k = 0; k < MAX_OUT; k++) kiln_tensor_free(rs[k]);
    kiln_model_free(m);
    kiln_model_free(base);
    kiln_context_free(mctx);
}

/* ------------------------------------------------------------------ the hook */

static void on_case(const kiln_node *node, int n_in, kiln_tensor *const *in, int n_out, kiln_tensor *const *out,
                    double atol, double rtol, const char *label) {
    (void)out;
    case_atol = atol;
    case_rtol = rtol;
    kiln_node n = *node;
    if (n.op < 0) return;
    if (!n.domain) n.domain = (char *)"";
    if (!grad_coverage) sweep_node(&n, n_in, in, n_out, label, false);
    sweep_gradients(&n, n_in, in, n_out, label);
}

/* ------------------------------------------------------------------ canary */

/* --canary: Relu over 101 floats whose buffers hold 100, a planted out-of-bounds write one
 * element past a tensor into the arena's alignment padding. Run alone it passes; under
 * compute-sanitizer --tool memcheck --nvtx=yes it must be reported (bench/gpu.sh sanitize
 * checks that it is, or a clean sweep would prove nothing). */
static int canary(void) {
    kiln_node node = {.op_type = (char *)"Relu", .name = (char *)"canary", .domain = (char *)"",
                      .op = kiln_op_index("Relu"), .opset = 14, .n_in = 1, .n_out = 1};
    kiln_tensor x = {.dtype = KILN_F32, .ndim = 1, .dims = {101}}, y = x;
    kiln_cuda_arena_reset(cu);
    kiln_status st = kiln_cuda_arena_alloc(cu, 100 * sizeof(float), &x.data);
    if (!st) st = kiln_cuda_arena_alloc(cu, 100 * sizeof(float), &y.data);
    if (!st) st = kiln_cuda_fill_bytes(cu, x.data, 0, 100 * sizeof(float));
    kiln_tensor *in = &x, *out = &y;
    kiln_op_ctx c = {.kctx = ctx, .node = &node, .n_in = 1, .in = &in, .n_out = 1, .out = &out};
    if (!st) st = kiln_cuda_run(cu, &c);
    if (!st) st = kiln_cuda_sync(cu);
    printf("canary: Relu wrote 101 floats into a 100-float region: %s\n", st ? kiln_context_message(ctx) : "ran");
    return st != KILN_OK;
}

/* ------------------------------------------------------------ --dw-grad-bench */

/* --dw-grad-bench: convnext_tiny's depthwise 7x7 gradients (f16 NHWC, batch 128, its four
 * stages), kiln.ConvGradWeight and kiln.ConvGradInput each timed (mean of 20 runs after
 * one untimed, which lets autotune choose) on conv_depthwise_grad.cu's kernels
 * (conv_dw_grad on, autotune off: "kiln"), on cuDNN (conv_depthwise off, autotune on: its
 * fastest algorithm), on conv_depthwise.cu's older gather kernel (dX: "old") and as
 * autotune picks between kiln's kernel and cuDNN ("tuned": conv_dw_grad on, autotune on);
 * each result compared with cuDNN's (max abs err / max |cuDNN|), and kiln's run twice
 * must give the same bits ("bits"). Exits non-zero on a failed run, a relative error
 * above 1e-2 or different bits. */
static double bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* One op on one kiln_cuda, its tensors laid out as fmt on the device (inputs NULL where
 * absent): *ms per run, the output downloaded into got (host, like ref). */
static kiln_status bench_fmt(kiln_cuda *b, const kiln_node *node, int n_in, kiln_tensor **in, kiln_tensor *got,
                             kiln_format fmt, double *ms) {
    kiln_tensor din[MAX_IN], dout;
    kiln_tensor *dinp[MAX_IN] = {0}, *doutp = &dout;
    kiln_cuda_arena_reset(b);
    kiln_status st = n_in <= MAX_IN ? KILN_OK : kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "bench: %d inputs", n_in);
    for (int i = 0; i < n_in && !st; i++) {
        if (!in[i]) continue;
        st = gpu_device_copy(b, ctx, in[i], 0, true, fmt, &din[i]);
        dinp[i] = &din[i];
    }
    if (!st) st = gpu_device_copy(b, ctx, got, 0, false, fmt, &dout);
    kiln_op_ctx c = {.kctx = ctx, .node = node, .n_in = n_in, .in = dinp, .n_out = 1, .out = &doutp, .host_in = in};
    size_t ws = 0;
    if (!st) st = kiln_cuda_supports(&c);
    if (!st) st = kiln_cuda_workspace_size(b, &c, &ws);
    if (!st) st = kiln_cuda_workspace_reserve(b, ws);
    c.workspace = ws ? kiln_cuda_workspace(b, NULL) : NULL;
    c.workspace_size = ws;
    if (!st) st = kiln_cuda_run(b, &c); /* untimed: autotune's choice */
    if (!st) st = kiln_cuda_sync(b);
    const int reps = 20;
    const double t0 = bench_now();
    for (int r = 0; r < reps && !st; r++) st = kiln_cuda_run(b, &c);
    if (!st) st = kiln_cuda_sync(b);
    *ms = (bench_now() - t0) / reps;
    if (st) return st;
    const size_t bytes = kiln_tensor_nbytes(got);
    void *tmp = malloc(bytes);
    if (!tmp) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "download");
    st = kiln_cuda_download(b, tmp, dout.data, bytes);
    if (!st && dout.format != KILN_FORMAT_NHWC) {
        memcpy(got->data, tmp, bytes);
    } else if (!st) { /* NHWC bytes back into got's NCHW */
        kiln_tensor v = *got;
        v.data = tmp;
        v.owns_data = false;
        v.format = KILN_FORMAT_NHWC;
        kiln_layout_convert(&v, got->data, KILN_FORMAT_NCHW);
    }
    free(tmp);
    return st;
}

static kiln_status bench_one(kiln_cuda *b, const kiln_node *node, int n_in, kiln_tensor **in, kiln_tensor *got,
                             double *ms) {
    return bench_fmt(b, node, n_in, in, got, KILN_FORMAT_NHWC, ms);
}

static double bench_rel_err(const kiln_tensor *got, const kiln_tensor *ref) {
    double e = 0, m = 0;
    const int64_t n = kiln_tensor_numel(ref);
    for (int64_t i = 0; i < n; i++) {
        const double r = kiln_get_f64(ref, i), d = fabs(kiln_get_f64(got, i) - r);
        if (fabs(r) > m) m = fabs(r);
        if (!(d <= e)) e = d; /* NaN sticks */
    }
    return m > 0 ? e / m : e;
}

static int dw_grad_bench(void) {
    static const struct {
        const char *what;
        int64_t N, C, H, W;
    } shapes[] = {{"stage 1", 128, 96, 56, 56}, {"stage 2", 128, 192, 28, 28}, {"stage 3", 128, 384, 14, 14},
                  {"stage 4", 128, 768, 7, 7}};
    const size_t arena = (size_t)1 << 30;
    kiln_cuda_options on = {.device = 0, .arena_bytes = arena, .conv_dw_grad = 1, .no_autotune = 1};
    kiln_cuda_options dnn = {.device = 0, .arena_bytes = arena, .no_conv_depthwise = 1, .conv_dw_grad = -1};
    kiln_cuda_options old = {.device = 0, .arena_bytes = arena, .no_autotune = 1, .conv_dw_grad = -1};
    kiln_cuda_options tuned = {.device = 0, .arena_bytes = arena, .conv_dw_grad = 1};
    kiln_cuda *c_on = NULL, *c_dnn = NULL, *c_old = NULL, *c_tuned = NULL;
    if (kiln_cuda_create(ctx, &on, &c_on) || kiln_cuda_create(ctx, &dnn, &c_dnn) ||
        kiln_cuda_create(ctx, &old, &c_old) || kiln_cuda_create(ctx, &tuned, &c_tuned)) {
        printf("FAIL dw-grad-bench: create: %s\n", kiln_context_message(ctx));
        return 1;
    }
    kiln_attr *attrs = NULL;
    int n_attrs = 0;
    int bad = 0;
    printf("%-8s %-4s %-19s %9s %9s %9s %9s %9s %12s %12s %12s %5s\n", "stage", "grad", "shape (f16 NHWC)",
           "kiln ms", "cuDNN ms", "old dX ms", "tuned ms", "kiln GB/s", "rel err kiln", "rel err old",
           "rel err tuned", "bits");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t N = shapes[s].N, C = shapes[s].C, H = shapes[s].H, W = shapes[s].W;
        char text[96];
        snprintf(text, sizeof text, "group=%lld;pads=[3,3,3,3];kernel_shape=[7,7]", (long long)C);
        if (kiln_attrs_parse(ctx, text, &attrs, &n_attrs)) {
            printf("FAIL dw-grad-bench: attributes: %s\n", kiln_context_message(ctx));
            return 1;
        }
        kiln_tensor *x = kt_rand(KILN_F16, 4, KT_DIMS(N, C, H, W), -1, 1, 77 + s);
        kiln_tensor *dy = kt_rand(KILN_F16, 4, KT_DIMS(N, C, H, W), -1, 1, 88 + s);
        kiln_tensor *w = kt_rand(KILN_F16, 4, KT_DIMS(C, 1, 7, 7), -1, 1, 99 + s);
        for (int op = 0; op < 2 && x && dy && w; op++) {
            const char *name = op == 0 ? "ConvGradWeight" : "ConvGradInput";
            kiln_node node = {.op_type = (char *)name, .name = (char *)"dw-grad-bench", .domain = (char *)"kiln",
                              .op = kiln_op_index_domain("kiln", name), .opset = 1, .n_in = 3, .n_out = 1,
                              .n_attrs = n_attrs, .attrs = attrs};
            kiln_tensor *in[3] = {x, dy, w};
            if (op == 1) in[0] = dy, in[1] = w, in[2] = x;
            const kiln_tensor *like = op == 0 ? w : x;
            kiln_tensor *g_on = kiln_tensor_new(ctx, KILN_F16, like->ndim, like->dims);
            kiln_tensor *g_dnn = kiln_tensor_new(ctx, KILN_F16, like->ndim, like->dims);
            kiln_tensor *g_old = kiln_tensor_new(ctx, KILN_F16, like->ndim, like->dims);
            kiln_tensor *g_tuned = kiln_tensor_new(ctx, KILN_F16, like->ndim, like->dims);
            kiln_tensor *g_again = kiln_tensor_new(ctx, KILN_F16, like->ndim, like->dims);
            double t_on = NAN, t_dnn = NAN, t_old = NAN, t_tuned = NAN, t_again = NAN, e_on = NAN, e_old = NAN,
                   e_tuned = NAN;
            bool same = false;
            kiln_status st = g_on && g_dnn && g_old && g_tuned && g_again ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
            if (!st) st = bench_one(c_dnn, &node, 3, in, g_dnn, &t_dnn);
            if (!st) st = bench_one(c_on, &node, 3, in, g_on, &t_on);
            if (!st) st = bench_one(c_on, &node, 3, in, g_again, &t_again); /* deterministic: the same bits */
            if (!st && op == 1) st = bench_one(c_old, &node, 3, in, g_old, &t_old);
            if (!st) st = bench_one(c_tuned, &node, 3, in, g_tuned, &t_tuned);
            if (!st) {
                e_on = bench_rel_err(g_on, g_dnn);
                e_tuned = bench_rel_err(g_tuned, g_dnn);
                if (op == 1) e_old = bench_rel_err(g_old, g_dnn);
                same = memcmp(g_on->data, g_again->data, kiln_tensor_nbytes(g_on)) == 0;
            }
            char shape[64];
            snprintf(shape, sizeof shape, "[%lld,%lld,%lld,%lld]", (long long)N, (long long)C, (long long)H, (long long)W);
            const double gb = 2.0 * (double)N * C * H * W * 2 / (t_on * 1e-3) / 1e9; /* two of X / dY / dX */
            printf("%-8s %-4s %-19s %9.3f %9.3f %9.3f %9.3f %9.0f %12.2e %12.2e %12.2e %5s%s%s\n", shapes[s].what,
                   op ? "dX" : "dW", shape, t_on, t_dnn, t_old, t_tuned, gb, e_on, e_old, e_tuned,
                   same ? "same" : "DIFF", st ? "  FAIL: " : "", st ? kiln_context_message(ctx) : "");
            if (st || !(e_on <= 1e-2) || !(e_tuned <= 1e-2) || !same) bad++;
            kiln_tensor_free(g_tuned);
            kiln_tensor_free(g_again);
            kiln_tensor_free(g_on);
            kiln_tensor_free(g_dnn);
            kiln_tensor_free(g_old);
        }
        kiln_tensor_free(x);
        kiln_tensor_free(dy);
        kiln_tensor_free(w);
        for (int i = 0; i < n_attrs; i++) kiln_attr_clear(&attrs[i]);
        free(attrs);
        attrs = NULL;
    }
    kiln_cuda_stats st_on;
    kiln_cuda_get_stats(c_on, &st_on);
    printf("conv_depthwise_grad.cu ran %d gradients\n", st_on.conv_dw_grad_calls);
    if (!st_on.conv_dw_grad_calls) bad++;
    kiln_cuda_free(c_on);
    kiln_cuda_free(c_dnn);
    kiln_cuda_free(c_old);
    kiln_cuda_free(c_tuned);
    printf("dw-grad-bench: %s\n", bad ? "FAIL" : "ok");
    return bad != 0;
}

/* ------------------------------------------------------------ --sdpa-kept */

static kiln_tensor *bench_shape(int n, const int64_t *v);

/* kiln.Attention's views as fuse-attention writes them for torchvision's ViT: q, k and v
 * read from the packed in-projection (L, N, 3E) as (L, N, 3, H, D), the output written
 * through the head merge (L, N, H, D) -> (L * N, E); inputs 5 and 6 the shapes (5: L, N, 3,
 * H, D; 2: L * N, H * D). */
static void vit_attention_attrs(char *buf, size_t n, double scale) {
    snprintf(buf, n,
             "q_view=[1,5,0,3,2,0,2,4,1,2,0,3];k_view=[1,5,0,3,2,1,2,4,1,2,3,0];"
             "v_view=[1,5,0,3,2,2,2,4,1,2,0,3];o_view=[2,4,2,0,1,3,1,6,0];scale=%.8f",
             scale);
}

/* --sdpa-kept: attention_sdpa.c's choice kept across processes. ViT-B/32's attention at
 * batch 64 (L 50, 12 heads of 64, as --flash-bench builds it; kiln's kernel timed faster than
 * cuDNN's there on an H200), f16, autotune on, a scratch cache directory. A first kiln_cuda
 * times both kernels on the node's first run and writes the choice; a second one, made after
 * and reading that file, must take it: where kiln's kernel won, no cuDNN plan is made
 * (stats.sdpa_kept_kiln 1) and cuDNN never runs; where cuDNN's won, its plan is made and runs.
 * The two outputs agree within 5e-3 (f16). Fails where no choice was timed (no cuDNN plan:
 * cuDNN older than 9.13.1), since then nothing was checked. */
static int sdpa_kept(void) {
    char dir[] = "/tmp/kiln-sdpa-XXXXXX";
    if (!mkdtemp(dir)) {
        printf("FAIL sdpa-kept: mkdtemp\n");
        return 1;
    }
    setenv("KILN_CACHE_DIR", dir, 1);
    unsetenv("KILN_CUDA_SDPA"); /* timed: the default */
    const kiln_cuda_options o = {.device = 0, .arena_bytes = (size_t)1 << 30, .flash_attention = 1};
    const int64_t L = 50, N = 64, H = 12, D = 64;
    const int64_t s5[5] = {L, N, 3, H, D}, s2[2] = {L * N, H * D};
    char attrs[400];
    vit_attention_attrs(attrs, sizeof attrs, 0.125);
    kiln_tensor *in[7] = {0};
    in[0] = kt_rand(KILN_F16, 3, KT_DIMS(L, N, 3 * H * D), -1, 1, 5111);
    in[1] = in[2] = in[0];
    in[5] = bench_shape(5, s5);
    in[6] = bench_shape(2, s2);
    kiln_tensor *y1 = kiln_tensor_new(ctx, KILN_F16, 2, KT_DIMS(L * N, H * D));
    kiln_tensor *y2 = y1 ? kiln_tensor_clone(ctx, y1) : NULL;
    kiln_attr *at = NULL;
    int n_at = 0, bad = 0;
    kiln_cuda *c1 = NULL, *c2 = NULL;
    kiln_cuda_stats s1 = {0}, s2s = {0};
    double t1 = 0, t2 = 0;
    kiln_status st = in[0] && y1 && y2 ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_attrs_parse(ctx, attrs, &at, &n_at);
    kiln_node node = {.op_type = (char *)"Attention", .name = (char *)"sdpa-kept", .domain = (char *)"kiln",
                      .op = kiln_op_index_domain("kiln", "Attention"), .opset = 1, .n_in = 7, .n_out = 1,
                      .n_attrs = n_at, .attrs = at};
    if (!st) st = kiln_cuda_create(ctx, &o, &c1);
    if (!st) st = bench_fmt(c1, &node, 7, in, y1, KILN_FORMAT_NCHW, &t1);
    if (!st) kiln_cuda_get_stats(c1, &s1);
    if (!st) st = kiln_cuda_create(ctx, &o, &c2); /* after c1 wrote its choice: reads it */
    if (!st) st = bench_fmt(c2, &node, 7, in, y2, KILN_FORMAT_NCHW, &t2);
    if (!st) kiln_cuda_get_stats(c2, &s2s);
    if (st) {
        printf("FAIL sdpa-kept: %s\n", kiln_context_message(ctx));
        bad++;
    } else {
        const bool kiln_won = s1.attention_sdpa_calls == 0;
        const double err = bench_rel_err(y2, y1);
        const bool ok = s1.algos_written > 0 && !(err > 5e-3) &&
                        (kiln_won ? s2s.sdpa_kept_kiln == 1 && s2s.attention_sdpa_calls == 0
                                  : s2s.sdpa_kept_kiln == 0 && s2s.attention_sdpa_calls > 0);
        printf("%s sdpa-kept: first process: %s kept (%d choices written, %.3f ms a run), second: plans spared %d, "
               "cuDNN runs %d (%.3f ms a run), outputs %.2e apart%s\n",
               ok ? "ok  " : "FAIL", kiln_won ? "kiln's kernel" : "cuDNN's", s1.algos_written, t1, s2s.sdpa_kept_kiln,
               s2s.attention_sdpa_calls, t2, err, s1.algos_written ? "" : " (nothing timed: no cuDNN plan?)");
        bad += !ok;
    }
    kiln_cuda_free(c1);
    kiln_cuda_free(c2);
    for (int i = 0; i < n_at; i++) kiln_attr_clear(&at[i]);
    free(at);
    kiln_tensor_free(in[0]);
    kiln_tensor_free(in[5]);
    kiln_tensor_free(in[6]);
    kiln_tensor_free(y1);
    kiln_tensor_free(y2);
    char path[sizeof dir + 32];
    snprintf(path, sizeof path, "%s/cudnn-algos.txt", dir);
    remove(path);
    rmdir(dir);
    return bad != 0;
}

/* ------------------------------------------------------------ --flash-bench */

/* --flash-bench: kiln.Attention as the vision transformers meet it, on attention_flash.cu
 * (kiln_cuda_options.flash_attention on: "flash") and on attention.cu's kernels (off:
 * "old"), each timed (mean of 20 runs after one untimed) with its ms per node (one layer's
 * attention) and TFLOP/s (2 B Lq Lk (D + Dv), the op's flops), and the outputs compared
 * (max abs difference / max |old|: at most 5e-3 in f16, 3e-2 in bf16). Shapes: ViT-B/16 at
 * batch 256 (q, k, v views of the packed in-projection (L, N, 3E), the output through the
 * head merge, as the fuse-attention pass makes them; ViT-B/32's L 50 and ViT-H/14's L 257,
 * D 80 at batch 128 the same way), Swin-T stage 1 at batch 64 (4096 windows of 49, 3 heads
 * of 32, the relative-position bias and the shifted-window mask), and a long sequence (32 x
 * 12 heads, L 1024, D 64). Exits non-zero on a failed run, a
 * mismatch, or a shape the flash kernel did not run (the reason printed). */
static kiln_tensor *bench_shape(int n, const int64_t *v) {
    double d[KILN_MAX_DIMS];
    for (int i = 0; i < n; i++) d[i] = (double)v[i];
    return kt_make(KILN_I64, 1, KT_DIMS(n), d);
}

static int flash_bench(void) {
    const size_t arena = (size_t)3 << 30;
    kiln_cuda_options fo = {.device = 0, .arena_bytes = arena, .flash_attention = 1};
    kiln_cuda_options oo = {.device = 0, .arena_bytes = arena, .flash_attention = -1};
    kiln_cuda *c_flash = NULL, *c_old = NULL, *c_dnn = NULL;
    /* kiln's two kernels alone (cuDNN's fused attention off), then cuDNN's wherever it has a
     * plan (KILN_CUDA_SDPA is read when a kiln_cuda is created) */
    const char *sdpa_env = getenv("KILN_CUDA_SDPA");
    char sdpa_was[16] = "";
    if (sdpa_env) snprintf(sdpa_was, sizeof sdpa_was, "%s", sdpa_env);
    setenv("KILN_CUDA_SDPA", "0", 1);
    kiln_status cst = kiln_cuda_create(ctx, &fo, &c_flash);
    if (!cst) cst = kiln_cuda_create(ctx, &oo, &c_old);
    setenv("KILN_CUDA_SDPA", "1", 1);
    if (!cst) cst = kiln_cuda_create(ctx, &fo, &c_dnn);
    if (sdpa_env) setenv("KILN_CUDA_SDPA", sdpa_was, 1);
    else unsetenv("KILN_CUDA_SDPA");
    if (cst) {
        printf("FAIL flash-bench: create: %s\n", kiln_context_message(ctx));
        kiln_cuda_free(c_flash);
        kiln_cuda_free(c_old);
        return 1;
    }
    const kiln_cuda_props *p = kiln_cuda_get_props(c_flash);
    printf("flash-bench on %s (attention_flash.cu is UNVALIDATED until this passes)\n", p->name);
    printf("%-34s %-5s %9s %9s %9s %9s %9s %7s %10s %10s  %s\n", "shape", "dtype", "flash ms", "old ms", "cuDNN ms",
           "flash TF", "cuDNN TF", "speedup", "rel diff", "cuDNN diff", "");
    int bad = 0;
    for (int sh = 0; sh < 6; sh++) {
        const kiln_dtype dt = sh == 1 ? KILN_BF16 : KILN_F16;
        kiln_tensor *in[7] = {0};
        int n_in = 0;
        char attrs[400], what[64];
        kiln_tensor *y = NULL;
        if (sh <= 1 || sh >= 4) { /* ViT-B/16 batch 256 (B/32, H/14 at 256, 128): (L, N, 3E) -> q, k, v; out (L * N, E) */
            const int64_t L = sh == 4 ? 50 : sh == 5 ? 257 : 197, N = sh == 5 ? 128 : 256, H = sh == 5 ? 16 : 12,
                          D = sh == 5 ? 80 : 64;
            const int64_t s5[5] = {L, N, 3, H, D}, s2[2] = {L * N, H * D};
            vit_attention_attrs(attrs, sizeof attrs, 1 / sqrt((double)D));
            in[0] = kt_rand(dt, 3, KT_DIMS(L, N, 3 * H * D), -1, 1, 5101);
            in[1] = in[0];
            in[2] = in[0];
            in[5] = bench_shape(5, s5);
            in[6] = bench_shape(2, s2);
            n_in = 7;
            y = kiln_tensor_new(ctx, dt, 2, KT_DIMS(L * N, H * D));
            snprintf(what, sizeof what, "%s bs%d (%d x %d, D %d)", sh == 4 ? "vit_b_32" : sh == 5 ? "vit_h_14" : "vit_b_16",
                     (int)N, (int)(N * H), (int)L, (int)D);
        } else if (sh == 2) { /* Swin-T stage 1 batch 64: 4096 windows, nW 64, 3 heads */
            const int64_t B = 4096, nW = 64, H = 3, Lw = 49, D = 32;
            const int64_t s5[5] = {B / nW, nW, H, Lw, Lw}, s4[4] = {-1, H, Lw, Lw};
            snprintf(attrs, sizeof attrs,
                     "q_view=[3,0,0];k_view=[3,0,1,2,4,0,1,3,2];v_view=[3,0,2];"
                     "s_view=[9,0,1,5,0,9,1,1,6,0];scale=0.17677669");
            in[0] = kt_rand(dt, 5, KT_DIMS(3, B, H, Lw, D), -1, 1, 5102);
            in[1] = in[0];
            in[2] = in[0];
            in[3] = kt_rand(KILN_F32, 3, KT_DIMS(H, Lw, Lw), -2, 2, 5103);
            in[4] = kt_rand(KILN_F32, 4, KT_DIMS(nW, 1, Lw, Lw), -3, 0, 5104);
            in[5] = bench_shape(5, s5);
            in[6] = bench_shape(4, s4);
            n_in = 7;
            y = kiln_tensor_new(ctx, dt, 4, KT_DIMS(B, H, Lw, D));
            snprintf(what, sizeof what, "swin_t s1 bs64 (12288 x 49, D 32, bias)");
        } else { /* a long sequence: (32, 12, 1024, 64) */
            snprintf(attrs, sizeof attrs, "k_view=[2,4,0,1,3,2];scale=0.125");
            in[0] = kt_rand(dt, 4, KT_DIMS(32, 12, 1024, 64), -1, 1, 5105);
            in[1] = kt_rand(dt, 4, KT_DIMS(32, 12, 1024, 64), -1, 1, 5106);
            in[2] = kt_rand(dt, 4, KT_DIMS(32, 12, 1024, 64), -1, 1, 5107);
            n_in = 3;
            y = kiln_tensor_new(ctx, dt, 4, KT_DIMS(32, 12, 1024, 64));
            snprintf(what, sizeof what, "long seq (384 x 1024, D 64)");
        }
        kiln_attr *at = NULL;
        int n_at = 0;
        kiln_tensor *y_old = y ? kiln_tensor_clone(ctx, y) : NULL;
        kiln_tensor *y_dnn = y ? kiln_tensor_clone(ctx, y) : NULL;
        kiln_status st = y && y_old && in[0] && in[1] && in[2] ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
        if (!st) st = kiln_attrs_parse(ctx, attrs, &at, &n_at);
        kiln_node node = {.op_type = (char *)"Attention", .name = (char *)"flash-bench", .domain = (char *)"kiln",
                          .op = kiln_op_index_domain("kiln", "Attention"), .opset = 1, .n_in = n_in, .n_out = 1,
                          .n_attrs = n_at, .attrs = at};
        double t_f = NAN, t_o = NAN, t_d = NAN, err = NAN, err_d = NAN;
        kiln_cuda_stats s0, s1, d0, d1;
        kiln_cuda_get_stats(c_flash, &s0);
        kiln_cuda_get_stats(c_dnn, &d0);
        if (!st && !y_dnn) st = KILN_ERR_OUT_OF_MEMORY;
        if (!st) st = bench_fmt(c_old, &node, n_in, in, y_old, KILN_FORMAT_NCHW, &t_o);
        if (!st) st = bench_fmt(c_flash, &node, n_in, in, y, KILN_FORMAT_NCHW, &t_f);
        /* cuDNN's fused attention: where it has no plan the flash kernel runs (not counted) */
        if (!st) st = bench_fmt(c_dnn, &node, n_in, in, y_dnn, KILN_FORMAT_NCHW, &t_d);
        kiln_cuda_get_stats(c_flash, &s1);
        kiln_cuda_get_stats(c_dnn, &d1);
        const bool ran = s1.attention_flash_calls > s0.attention_flash_calls;
        const bool dnn = d1.attention_sdpa_calls > d0.attention_sdpa_calls;
        if (!dnn) t_d = NAN;
        if (!st) err = bench_rel_err(y, y_old);
        if (!st && dnn) err_d = bench_rel_err(y_dnn, y_old);
        const double tol = dt == KILN_BF16 ? 3e-2 : 5e-3;
        double flop = 0;
        if (!st) {
            const kiln_op_def *d = kiln_op_get(node.op);
            kiln_op_ctx c = {.kctx = ctx, .node = &node, .n_in = n_in, .in = in, .n_out = 1, .out = &y};
            flop = d && d->flops ? d->flops(&c) : 0;
        }
        printf("%-34s %-5s %9.3f %9.3f %9.3f %9.1f %9.1f %6.2fx %10.2e %10.2e  %s%s%s\n", what, kiln_dtype_name(dt), t_f,
               t_o, t_d, flop / (t_f * 1e-3) / 1e12, flop / (t_d * 1e-3) / 1e12, t_o / t_f, err, err_d,
               st ? "FAIL: " : !ran ? "FAIL: flash did not run: " : !(err <= tol) ? "FAIL: outputs differ"
                   : dnn && !(err_d <= tol)                     ? "FAIL: cuDNN's outputs differ"
                                                                : "ok",
               st ? kiln_context_message(ctx) : !ran ? s1.flash_refused : "", dnn || st ? "" : " (cuDNN: no plan)");
        if (st || !ran || !(err <= tol) || (dnn && !(err_d <= tol))) bad++;
        for (int i = 0; i < n_at; i++) kiln_attr_clear(&at[i]);
        free(at);
        for (int i = 0; i < 7; i++)
            if (in[i] && (i < 1 || in[i] != in[0])) kiln_tensor_free(in[i]);
        kiln_tensor_free(y);
        kiln_tensor_free(y_old);
        kiln_tensor_free(y_dnn);
    }
    kiln_cuda_free(c_flash);
    kiln_cuda_free(c_old);
    kiln_cuda_free(c_dnn);
    printf("flash-bench: %s\n", bad ? "FAIL" : "ok");
    return bad != 0;
}

/* ------------------------------------------------------------------ main */

static int cmp_rows(const void *a, const void *b) {
    const row *x = a, *y = b;
    const int c = strcmp(x->op, y->op);
    return c ? c : strcmp(x->dt, y->dt);
}

/* --grad-coverage: the audit's verdict (0: every emitted gradient op has a CUDA kernel
 * that takes its cases, and every op with a gradient rule was reached). */
static int report_audit(int n_only) {
    int bad = 0;
    printf("\n%-44s %8s %8s  %s\n", "gradient op (cuda)", "accepted", "refused", "first emitted by / verdict");
    for (int i = 0; i < n_audits; i++) {
        const audit *a = &audits[i];
        const char *exc = grad_exception(a->key); /* kiln.UnaryGrad by its [op] */
        const char *verdict = exc ? "exception" : a->missing ? "FAIL: no kernel in src/cuda/table.c"
                                              : a->accepted == 0 ? "FAIL: the kernel refuses every case"
                                                                 : "ok";
        printf("%-44s %8d %8d  %s: %s%s%s\n", a->key, a->accepted, a->refused, a->from, verdict,
               exc ? " - " : a->refused && a->why[0] ? " - refused: " : "", exc ? exc : a->refused ? a->why : "");
        if (!exc && (a->missing || a->accepted == 0)) {
            printf("FAIL %s (emitted by the gradient of %s): %s\n", a->key, a->from,
                   a->missing ? "no CUDA kernel" : a->why);
            bad++;
        }
    }
    for (int i = 0; i < kiln_op_count() && n_only == 0; i++) {
        const kiln_op_def *d = kiln_op_get(i);
        char name[96];
        snprintf(name, sizeof name, "%s%s", d->domain ? "kiln." : "", d->name);
        if (!d->grad || grad_built[i] || grad_exception(name)) continue;
        printf("FAIL %s: has a gradient rule but none of its test cases builds a gradient graph (add a float "
               "case to its op file)\n",
               name);
        bad++;
    }
    /* the forward op too: a differentiable op must run on the device to be trained there */
    for (int i = 0; i < kiln_op_count() && n_only == 0; i++) {
        const kiln_op_def *d = kiln_op_get(i);
        char name[96];
        snprintf(name, sizeof name, "%s%s", d->domain ? "kiln." : "", d->name);
        if (!d->grad || kiln_cuda_kernel_for(i) || grad_exception(name)) continue;
        printf("FAIL %s: has a gradient rule but no CUDA kernel of its own (src/cuda/table.c)\n", name);
        bad++;
    }
    printf("%d gradient ops audited, %d failed\n", n_audits, bad);
    return bad ? 1 : 0;
}

int main(int argc, char **argv) {
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    bool dry = false, want_canary = false, dw_grad = false, dw_timed = false, want_bench = false,
         want_flash_bench = false, want_sdpa_kept = false;
    int conv_stats = -1; /* --conv-stats-{fallback,graph,timed}: kiln_cuda's conv_bn_stats 3, 2, 1 */
    int prologue = -1;   /* --prologue-{fallback,graph}: the convolution prologue by conv_prologue.cu or cuDNN's graphs */
    int n_only = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dry-run") == 0 || strcmp(argv[i], "--record") == 0) dry = true;
        else if (strcmp(argv[i], "--grad-coverage") == 0) dry = grad_coverage = true;
        else if (strcmp(argv[i], "--canary") == 0) want_canary = true;
        else if (strcmp(argv[i], "-v") == 0) verbose = true;
        else if (strcmp(argv[i], "--dw-grad") == 0) dw_grad = true;
        else if (strcmp(argv[i], "--dw-grad-timed") == 0) dw_grad = dw_timed = true;
        else if (strcmp(argv[i], "--dw-grad-bench") == 0) want_bench = true;
        else if (strcmp(argv[i], "--flash-attn") == 0) flash_attn = true;
        else if (strcmp(argv[i], "--flash-bench") == 0) want_flash_bench = true;
        else if (strcmp(argv[i], "--sdpa-kept") == 0) want_sdpa_kept = true;
        else if (strcmp(argv[i], "--conv-stats-fallback") == 0) conv_stats = 3;
        else if (strcmp(argv[i], "--conv-stats-graph") == 0) conv_stats = 2;
        else if (strcmp(argv[i], "--conv-stats-timed") == 0) conv_stats = 1;
        else if (strcmp(argv[i], "--prologue-fallback") == 0) prologue = 0;
        else if (strcmp(argv[i], "--prologue-graph") == 0) prologue = 1;
        else n_only++;
    }
    kiln_cuda_options o = {.device = 0, .arena_bytes = (size_t)512 << 20};
    /* The plain sweep runs the kernels each switch below falls back to (cuDNN's depthwise
     * gradients, attention.cu, the convolution + statistics kernel); the flags, the ones it
     * turns on (on by default in sessions and trainers). --dw-grad: depthwise gradients on
     * conv_depthwise_grad.cu's kernels, without autotune so that they run on every depthwise
     * case (--dw-grad-timed: with it, as by default) */
    o.conv_dw_grad = dw_grad ? 1 : -1;
    if (dw_grad) o.no_autotune = !dw_timed;
    /* --flash-attn: kiln.Attention on attention_flash.cu */
    o.flash_attention = flash_attn ? 1 : -1;
    /* cuDNN's fused attention (attention_sdpa.c) only where KILN_CUDA_SDPA=1 asks for it on
     * every case it takes (ctest backend_ops_sdpa): otherwise the sweep checks kiln's kernels */
    const char *se = getenv("KILN_CUDA_SDPA");
    sdpa_forced = se && strcmp(se, "1") == 0;
    if (!sdpa_forced) setenv("KILN_CUDA_SDPA", "0", 1);
    /* --conv-stats-*: kiln.FusedConv's statistics outputs (conv_stats.c) by the convolution +
     * statistics kernel, cuDNN's GenStats graph wherever it has an engine, or the faster of
     * the two timed (KILN_LOG=info prints each problem's plan and timing) */
    o.conv_bn_stats = conv_stats >= 0 ? conv_stats : 3;
    /* --prologue-*: kiln.FusedConv's input 4 and kiln.ConvGradWeight's input 3 (the
     * conv-bn-prologue pass) by the fallback kernel only (KILN_CUDA_PROLOGUE_GRAPH=0), or by
     * cuDNN's prologue graphs wherever they have a plan (the default) */
    if (prologue == 0) setenv("KILN_CUDA_PROLOGUE_GRAPH", "0", 1);
    else if (prologue == 1) unsetenv("KILN_CUDA_PROLOGUE_GRAPH");
    if (prologue == 1) o.no_autotune = true; /* the graph wherever it has a plan, not only where it times faster */
    if (!dry && kiln_cuda_create(ctx, &o, &cu) != KILN_OK) {
        printf("FAIL: no usable CUDA device: %s\n", kiln_context_message(ctx));
        printf("0 passed, 1 failed\n");
        kiln_context_free(ctx);
        return 1;
    }
    if (want_bench) {
        const int r = cu ? dw_grad_bench() : 1;
        kiln_cuda_free(cu);
        kiln_context_free(ctx);
        return r;
    }
    if (want_sdpa_kept) {
        const int r = cu ? sdpa_kept() : 1;
        kiln_cuda_free(cu);
        kiln_context_free(ctx);
        return r;
    }
    if (want_flash_bench) {
        const int r = cu ? flash_bench() : 1;
        kiln_cuda_free(cu);
        kiln_context_free(ctx);
        return r;
    }
    if (want_canary) {
        const int r = cu ? canary() : 1;
        kiln_cuda_free(cu);
        kiln_context_free(ctx);
        return r;
    }
    if (cu) {
        const kiln_cuda_props *p = kiln_cuda_get_props(cu);
        printf("backend cuda: %s, %d SMs, compute capability %d.%d\n", p->name, p->sm_count, p->cc_major, p->cc_minor);
    } else {
        printf("backend cuda: dry run (no device): CPU references, supports checks, NVRTC\n");
    }
    /* choices timed here go to a scratch cache, not the user's */
    char dir[] = "/tmp/kiln-sweep-XXXXXX";
    const bool have_dir = cu && mkdtemp(dir) != NULL;
    if (have_dir && !getenv("KILN_CACHE_DIR")) setenv("KILN_CACHE_DIR", dir, 1);

    if (grad_coverage) {
        grad_built = calloc((size_t)kiln_op_count(), sizeof *grad_built);
        if (!grad_built) return 1;
    }
    kiln_optest_set_hook(on_case);
    for (int i = 0; i < kiln_op_count(); i++) {
        const kiln_op_def *d = kiln_op_get(i);
        bool selected = n_only == 0;
        for (int a = 1; a < argc; a++) selected |= strcmp(argv[a], d->name) == 0;
        if (!selected || !d->test) continue;
        const int p0 = passed, f0 = failed;
        const int own = d->test(); /* its CPU cases, swept through the hook */
        if (own) {
            printf("FAIL %s: %d of its own CPU test cases failed\n", d->name, own);
            failed++;
        }
        printf("op file %s%s: %d swept cases passed, %d failed\n", d->domain ? "kiln." : "", d->name, passed - p0,
               failed - f0);
    }
    kiln_optest_set_hook(NULL);
    if (conv_stats >= 0 && cu) { /* which path ran the statistics outputs, and why the fallback did */
        kiln_cuda_stats s;
        kiln_cuda_get_stats(cu, &s);
        const int ran = s.conv_stats_graph_calls + s.conv_stats_fallback_calls;
        printf("%s conv-stats (conv_bn_stats %d): cuDNN GenStats graph %d runs, convolution + statistics kernel %d "
               "runs%s%s\n",
               ran && (conv_stats != 0 || !s.conv_stats_graph_calls) ? "ok  " : "FAIL", conv_stats,
               s.conv_stats_graph_calls, s.conv_stats_fallback_calls, s.conv_stats_why[0] ? "; last fallback: " : "",
               s.conv_stats_why);
        if (!ran || (conv_stats == 0 && s.conv_stats_graph_calls)) failed++;
    }
    if (prologue >= 0 && cu) { /* which path ran the prologues: the graph mode must have run the graph */
        kiln_cuda_stats s;
        kiln_cuda_get_stats(cu, &s);
        const bool ok = prologue ? s.conv_prologue_graph_calls > 0
                                 : s.conv_prologue_fallback_calls > 0 && s.conv_prologue_graph_calls == 0;
        printf("%s prologue (%s): cuDNN prologue graphs %d runs, fallback kernel %d runs\n", ok ? "ok  " : "FAIL",
               prologue ? "graph" : "fallback", s.conv_prologue_graph_calls, s.conv_prologue_fallback_calls);
        if (!ok) failed++;
    }
    if (dw_grad && !dw_timed && cu) { /* the kernels must have run, or the sweep proved nothing about them */
        kiln_cuda_stats s;
        kiln_cuda_get_stats(cu, &s);
        printf("%s --dw-grad: conv_depthwise_grad.cu ran %d depthwise gradients\n", s.conv_dw_grad_calls ? "ok  " : "FAIL",
               s.conv_dw_grad_calls);
        if (!s.conv_dw_grad_calls) failed++;
    }

    if (flash_attn && cu) { /* the kernel must have run, or the sweep proved nothing about it */
        kiln_cuda_stats s;
        kiln_cuda_get_stats(cu, &s);
        printf("%s --flash-attn: attention_flash.cu ran %d Attention cases, attention.cu %d (last reason: %s)\n",
               s.attention_flash_calls ? "ok  " : "FAIL", s.attention_flash_calls, s.attention_flash_fallbacks,
               s.flash_refused[0] ? s.flash_refused : "-");
        if (!s.attention_flash_calls) failed++;
        if (sdpa_forced) { /* KILN_CUDA_SDPA=1 (ctest backend_ops_sdpa): cuDNN's path must have run */
            printf("%s KILN_CUDA_SDPA=1: cuDNN's fused attention ran %d Attention cases\n",
                   s.attention_sdpa_calls ? "ok  " : "FAIL", s.attention_sdpa_calls);
            if (!s.attention_sdpa_calls) failed++;
        }
    }

    if (grad_coverage) {
        const int r = report_audit(n_only);
        kiln_context_free(ctx);
        free(rows);
        free(audits);
        free(grad_built);
        return r;
    }
    qsort(rows, (size_t)n_rows, sizeof *rows, cmp_rows);
    if (verbose) { /* one row per op and dtype, with the first reason a case was unsupported */
        printf("\n%-36s %-5s %7s %7s %7s %6s %6s %7s  %s\n", "op (cuda)", "dtype", dry ? "checked" : "passed",
               "failed", "unsupp", "NHWC", "grad", "budget", "first reason unsupported");
        for (int i = 0; i < n_rows; i++) {
            const row *r = &rows[i];
            char budget[16] = "-";
            if (!dry && r->n[C_PASS]) snprintf(budget, sizeof budget, "%.0f%%", r->budget * 100);
            printf("%-36s %-5s %7d %7d %7d %6d %6d %7s  %.100s\n", r->op, r->dt, r->n[C_PASS], r->n[C_FAIL],
                   r->n[C_UNSUP], r->nhwc, r->grad, budget, r->why);
        }
    }
    /* one line per op: each dtype's cases passed (checked in a dry run), then "/N failed"
     * and "~N unsupported" where there are any; the NHWC and gradient-graph shares of the
     * passes; the largest share of the error budget a passing case used */
    printf("\n%-34s %-11s %-11s %-11s %6s %5s %6s  %s\n", "op (cuda)", "f32", "f16", "bf16", "NHWC", "grad", "budget",
           "other dtypes");
    for (int i = 0; i < n_rows;) {
        int j = i;
        char cell[3][32] = {"-", "-", "-"}, other[160] = "";
        int nhwc = 0, grad = 0;
        double budget = 0;
        bool any_pass = false;
        size_t at = 0;
        for (; j < n_rows && strcmp(rows[j].op, rows[i].op) == 0; j++) {
            const row *r = &rows[j];
            char c[32];
            int w = snprintf(c, sizeof c, "%d", r->n[C_PASS]);
            if (r->n[C_FAIL]) w += snprintf(c + w, sizeof c - (size_t)w, "/%d", r->n[C_FAIL]);
            if (r->n[C_UNSUP]) snprintf(c + w, sizeof c - (size_t)w, "~%d", r->n[C_UNSUP]);
            const int k = strcmp(r->dt, "f32") == 0 ? 0 : strcmp(r->dt, "f16") == 0 ? 1 : strcmp(r->dt, "bf16") == 0 ? 2 : -1;
            if (k >= 0) snprintf(cell[k], sizeof cell[k], "%s", c);
            else if (at < sizeof other) at += (size_t)snprintf(other + at, sizeof other - at, "%s%s %s", at ? ", " : "", r->dt, c);
            nhwc += r->nhwc;
            grad += r->grad;
            any_pass |= r->n[C_PASS] > 0;
            if (r->budget > budget) budget = r->budget;
        }
        char b[16] = "-";
        if (!dry && any_pass) snprintf(b, sizeof b, "%.0f%%", budget * 100);
        printf("%-34s %-11s %-11s %-11s %6d %5d %6s  %s\n", rows[i].op, cell[0], cell[1], cell[2], nhwc, grad, b, other);
        i = j;
    }
    /* every kernel of the table has at least one case it took */
    int uncovered = 0;
    for (int i = 0; i < kiln_cuda_kernel_count() && n_only == 0; i++) {
        const char *name = kiln_cuda_kernel_name(i);
        int took = 0;
        for (int k = 0; k < n_rows; k++)
            if (strcmp(rows[k].op, name) == 0) took += rows[k].n[C_PASS] + rows[k].n[C_FAIL];
        if (!took) {
            printf("FAIL %s: in the cuda table but no test case of its op file reaches it (add kiln_optest "
                   "cases to the op file's test function)\n",
                   name);
            uncovered++;
        }
    }
    failed += uncovered;
    kiln_cuda_free(cu);
    kiln_context_free(ctx);
    free(rows);
    if (have_dir) {
        const char *files[] = {"algos/cudnn-algos.txt", "algos", "heuristic.txt", "cudnn-algos.txt", ""};
        for (int i = 0; i < 5; i++) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, files[i]);
            remove(path);
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
