/*
 * test_cuda_ops.c — the CUDA backend's checks beyond one op's cases (ctest -L gpu; needs a
 * CUDA device). The op cases themselves live in each op file and are swept on the device
 * by tests/gpu/test_backend_ops.c (every kernel of the table, every dtype and layout it
 * takes); what stays here are the cases that need more than an op file's case: exact
 * casts between every dtype pair, TENSOR attributes,
 * run seeds and masks, the fused ops against the composition of the ops they stand for,
 * the paths a group of cases must take, and everything that is not one node.
 *
 * Each case builds one node, draws random inputs (never zeros; fixed seeds), runs the CPU
 * reference (kiln_op_eval) on the host tensors and the CUDA kernel on device copies of
 * the very same tensors (so f16 / bf16 references see the same rounded inputs), with the
 * output buffer poisoned with NaN first, and compares as |x - ref| <= atol + rtol*|ref|,
 * printing the max error and the share of the error budget used. NaN never passes. Float
 * cases run in f32, f16 and bf16 (tolerances widen with the dtype); data movement cases in
 * f32, f16, i64 and u8. f32 unary and binary cases also run with every device pointer one
 * element off 16-byte alignment, to cover the scalar paths.
 *
 * Layouts: cases marked NHWC give the device some 4-D inputs and the outputs laid out NHWC
 * (converted on the host on the way in and out); the CPU reference, which reads NCHW
 * only, runs on the same logical values.
 *
 * Ops whose CPU reference is not registered in this build are reported as skipped.
 *
 * kiln's fused ops (kiln.FusedElementwise, kiln.FusedGemm, kiln.FusedConv: Conv, Add(Z),
 * activation) are checked against the
 * composition of the ONNX ops they stand for, each run by its CPU reference in f32 on the
 * same (rounded) inputs and the result rounded once to the case's dtype — the fused
 * contract of FUSED.md — and, where this build registers the fused op's own CPU reference,
 * that reference is checked against the composition too. In --dry-run mode the source
 * generated for every kiln.FusedElementwise case is also compiled by NVRTC for sm_90
 * (NVRTC needs no device). A small CNN lowered onto CUDA is profiled node by node.
 *
 * Convolutions with one input channel (conv_direct.cu: Conv, kiln.FusedConv with Relu,
 * kiln.ConvGradWeight): each group of cases must have gone through the direct kernels
 * (stats.conv_direct_calls against the cases run), and the same cases match again on a
 * kiln_cuda with conv_direct off (cuDNN); the weight gradient gives the same bits twice.
 * Depthwise convolutions (conv_depthwise.cu: Conv and kiln.FusedConv, group == C == M):
 * the same counting through stats.conv_depthwise_calls without autotune (the kernel), again
 * with conv_depthwise off (cuDNN), and with autotune (either, timed).
 *
 * Inference ops of fp16 / bf16 plans and exported CNNs: every Cast pair compared exactly
 * (rounding ties, NaN, inf, saturation), Shape / Constant / ConstantOfShape / Range;
 * kernels that read value inputs get the host tensors through kiln_op_ctx.host_in, as the
 * CUDA plan gives them. A small graph of these ops with folding off runs through CPU and CUDA sessions in fp32 and fp16
 * (eager, captured, replayed).
 *
 * Training: the kernels of kiln's gradient ops (cases may have several outputs and a run
 * seed), the fused optimizer against the frozen kiln_optimizer_update (optim_reference.h), fp16 loss
 * scaling, the device run seed inside a captured graph, and mnist-net's whole training
 * graph (every node supported; on a device, run as a CUDA plan against the CPU plan), and
 * the training step's profile (kiln train --profile: rows, times, the state left as it was).
 * Usage: test_cuda_ops [--dry-run] [FILTER] (FILTER: a substring of case labels). Besides
 * the op cases: device errors (a Gather index out of range), kiln_cuda_supports (layouts
 * included), staged copies larger than the staging buffer, NVRTC, the convolution
 * algorithm cache on disk (autotuned, heuristic, deterministic, corrupt files), and whole
 * models through sessions (the layout pass and NHWC weights uploaded by a plan). Exits
 * non-zero on any failure; the last line is "N passed, N failed". With --dry-run it needs
 * no device: each case's CPU reference runs and kiln_cuda_supports must accept it.
 */
#include "core/optest.h"
#include "core/plan.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_plan.h"
#include "gpu_util.h"
#include "passes/passes.h"
#include "ops/unary.h"
#include "train/trainer_internal.h"
#include "../optim_reference.h"
#include "../train_graph.h"

#include <cuda_runtime_api.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int passed, failed, skipped;
/* Products and convolutions: atol grows by this share of max|ref| (times the dtype's
 * factor) — cuDNN may pick Winograd or FFT algorithms, whose error scales with the
 * output's magnitude rather than each element's. 0 elsewhere. */
static double atol_scale;
static kiln_cuda *cu;
static kiln_context *ctx;

/* For kiln's fused ops, the reference: the composition of ONNX ops the node stands for,
 * computed in f32 and rounded once to dt (NULL: the op's own CPU reference). */
typedef kiln_status (*compose_fn)(const kiln_node *node, int n_in, kiln_tensor **in, kiln_dtype dt,
                                  kiln_tensor **out);
static compose_fn case_compose;

static void check(bool ok, const char *label, const char *detail);

/* Layout of the current cases: bit i (NHWC_IN(i)) lays 4-D input i out NHWC on the
 * device, NHWC_OUT the outputs. 0 elsewhere. */
#define NHWC_IN(i) (1u << (i))
#define NHWC_OUT (1u << 8)
#define NHWC_X_Y (NHWC_IN(0) | NHWC_OUT)
static unsigned layout;

/* Only the cases and checks whose op or name contains this (NULL: all). */
static const char *only;
static bool wanted(const char *name) { return !only || strstr(name, only) != NULL; }

static void fail(const char *label, const char *fmt, const char *detail) {
    printf("FAIL %s: ", label);
    printf(fmt, detail);
    printf("\n");
    failed++;
}

/* ------------------------------------------------------------------ inputs */

/* One input: dims ended by -1 (rank 0: {-1}); values uniform in [lo, hi) (lo == hi: the
 * default [-2, 2)); dt 0: the case's dtype; vals: fixed values instead; missing: NULL. */
typedef struct inp {
    int64_t dims[KILN_MAX_DIMS + 1];
    kiln_dtype dt;
    double lo, hi;
    const double *vals;
    bool missing;
} inp;

#define X(...) {.dims = {__VA_ARGS__, -1}}
#define XR(lo_, hi_, ...) {.dims = {__VA_ARGS__, -1}, .lo = (lo_), .hi = (hi_)}
#define XT(dt_, lo_, hi_, ...) {.dims = {__VA_ARGS__, -1}, .dt = (dt_), .lo = (lo_), .hi = (hi_)}
#define XV(dt_, vals_, ...) {.dims = {__VA_ARGS__, -1}, .dt = (dt_), .vals = (vals_)}
#define SCALAR(lo_, hi_) {.dims = {-1}, .lo = (lo_), .hi = (hi_)}
#define SCALART(dt_, lo_, hi_) {.dims = {-1}, .dt = (dt_), .lo = (lo_), .hi = (hi_)}
#define SCALARV(dt_, vals_) {.dims = {-1}, .dt = (dt_), .vals = (vals_)}
#define NONE {.missing = true}
#define INPUTS(...) ((const inp[]){__VA_ARGS__}), (int)(sizeof((const inp[]){__VA_ARGS__}) / sizeof(inp))

static int rank_of(const inp *s) {
    int r = 0;
    while (r < KILN_MAX_DIMS && s->dims[r] >= 0) r++;
    return r;
}

static kiln_tensor *make_input(const inp *s, kiln_dtype case_dt, uint64_t seed) {
    if (s->missing) return NULL;
    const kiln_dtype dt = s->dt ? s->dt : case_dt;
    const int r = rank_of(s);
    if (s->vals) return kt_make(dt, r, s->dims, s->vals);
    double lo = s->lo, hi = s->hi;
    if (lo == hi) {
        lo = -2;
        hi = 2;
    }
    return kt_rand(dt, r, s->dims, lo, hi, seed);
}

/* ------------------------------------------------------------------ compare */

/* 0 when got matches want within tolerance (printing one line either way). */
static int compare(const kiln_tensor *got, const kiln_tensor *want, double atol, double rtol,
                   const char *label) {
    return gpu_compare(got, want, atol, rtol, label, false, true, NULL);
}

/* ------------------------------------------------------------------ one case */

/* Tolerances for a dtype from the f32 ones: f16 and bf16 are compared one rounding of
 * their own (and a little accumulated error) away. */
static void tolerances(kiln_dtype dt, double atol, double rtol, const kiln_tensor *ref, double *a,
                       double *r) {
    double max_ref = 0, factor = 1;
    for (int64_t i = 0; atol_scale > 0 && i < kiln_tensor_numel(ref); i++) {
        const double v = fabs(kiln_get_f64(ref, i));
        if (v > max_ref && !isinf(v)) max_ref = v;
    }
    *a = atol;
    *r = rtol;
    if (dt == KILN_F16) {
        *a = fmax(atol, 1e-3);
        *r = fmax(rtol, 4e-3);
        factor = 100;
    } else if (dt == KILN_BF16) {
        *a = fmax(atol, 1e-2);
        *r = fmax(rtol, 3e-2);
        factor = 800;
    } else if (!kiln_dtype_is_float(dt)) {
        *a = *r = 0;
        factor = 0;
    }
    *a += atol_scale * factor * max_ref;
}

static kiln_format fmt_for(unsigned bit, int ndim) {
    return (layout & bit) && ndim == 4 ? KILN_FORMAT_NHWC : KILN_FORMAT_NCHW;
}

/* Case knobs besides the arguments (set by a case, reset after it): outputs of the node
 * (Dropout's mask: 2), the run seed of random ops (the CPU reference's kiln_op_ctx.seed and
 * the device seed), and whether the node has output value indices (which Dropout mixes
 * into its stream). */
static int n_outputs = 1;
static uint64_t run_seed;
static bool with_out_values;
/* More knobs: exact, compare with no tolerance whatever the dtype (Cast); tensor_attr, a
 * TENSOR attribute named tensor_attr_name added to the parsed ones (ConstantOfShape). */
static bool exact;
static const kiln_tensor *tensor_attr;
static const char *tensor_attr_name;
/* Cases whose kernel ran on the device (kiln_cuda_run returned KILN_OK), for checks of
 * which path a group of cases took; keep_out, when set, receives a case's output
 * keep_index (0 unless set) as downloaded (NCHW) instead of it being freed (the caller
 * frees it). */
static int device_runs;
static kiln_tensor **keep_out;
static int keep_index;
/* device runs of each case after the checked one, back to back with no synchronization in
 * between (the output must come out the same; kernels that fail only when launched behind
 * one another show then) */
static int repeat_runs;

/* One case on ready host tensors (freed here): the node op (ONNX, or "kiln.<name>" for
 * kiln's internal ops) with n_in inputs (NULL: missing) and n_outputs outputs, the CPU
 * reference against the kernel. dt picks the tolerances. */
static void run_tensors(const char *op, const char *attrs, int opset, kiln_dtype dt, bool misalign, double atol,
                        double rtol, const char *label, kiln_tensor **in, int n_in) {
    char lab[256];
    snprintf(lab, sizeof lab, "%s %s %s%s%s", op, label, kiln_dtype_name(dt), misalign ? " misaligned" : "",
             layout ? " NHWC" : "");
    if (!wanted(lab)) {
        for (int i = 0; i < n_in; i++) kiln_tensor_free(in[i]);
        return;
    }
    const bool internal = strncmp(op, "kiln.", 5) == 0;
    const int n_out = n_outputs;
    int out_values[4] = {7, 8, 9, 10};
    kiln_node node;
    memset(&node, 0, sizeof node);
    node.op_type = (char *)(internal ? op + 5 : op);
    node.name = lab;
    node.domain = (char *)(internal ? "kiln" : "");
    node.op = internal ? kiln_op_index_domain("kiln", op + 5) : kiln_op_index(op);
    node.opset = opset ? opset : 21;
    node.n_in = n_in;
    node.n_out = n_out;
    if (with_out_values) node.out = out_values;
    kiln_tensor *ref[4] = {0}, *got = NULL;
    kiln_tensor din[8], dout[4];
    kiln_tensor *dinp[8] = {0}, *doutp[4] = {0};
    if (node.op < 0 && !case_compose) {
        printf("SKIP %s: no CPU reference for %s in this build\n", lab, op);
        skipped++;
        goto done;
    }
    if (cu) kiln_cuda_arena_reset(cu);
    if (kiln_attrs_parse(ctx, attrs, &node.attrs, &node.n_attrs)) {
        fail(lab, "attributes: %s", kiln_context_message(ctx));
        goto done;
    }
    if (tensor_attr) {
        kiln_attr *grown = realloc(node.attrs, (size_t)(node.n_attrs + 1) * sizeof *grown);
        kiln_attr a = {.name = (char *)tensor_attr_name, .type = KILN_ATTR_TENSOR, .t = (kiln_tensor *)tensor_attr};
        if (grown) node.attrs = grown;
        if (!grown || kiln_attr_copy(ctx, &grown[node.n_attrs], &a)) {
            fail(lab, "%s", "could not add the tensor attribute");
            goto done;
        }
        node.n_attrs++;
    }
    /* the reference */
    if (case_compose ? case_compose(&node, n_in, in, dt, &ref[0]) != KILN_OK
                     : gpu_eval_ref(ctx, &node, n_in, in, n_out, ref, run_seed, false) != KILN_OK) {
        fail(lab, "the CPU reference failed: %s", kiln_context_message(ctx));
        goto done;
    }
    if (case_compose && node.op >= 0) { /* the fused op's own CPU reference, when registered */
        kiln_tensor *own = NULL;
        char lab2[400];
        snprintf(lab2, sizeof lab2, "%s: CPU %s vs the composition", lab, op);
        double a, r;
        tolerances(dt, atol, rtol, ref[0], &a, &r);
        if (gpu_eval_ref(ctx, &node, n_in, in, 1, &own, run_seed, false) != KILN_OK) fail(lab2, "%s", kiln_context_message(ctx));
        else if (compare(own, ref[0], a, r, lab2)) failed++;
        else passed++;
        kiln_tensor_free(own);
    }
    if (!cu) { /* --dry-run: the CPU reference ran; does the CUDA table take the case? */
        kiln_tensor shp[8], shout[4];
        kiln_tensor *shpp[8] = {0}, *shoutp[4] = {0};
        for (int i = 0; i < n_in; i++)
            if (in[i]) {
                shp[i] = *in[i];
                shp[i].data = NULL;
                shp[i].format = fmt_for(NHWC_IN(i), in[i]->ndim);
                shpp[i] = &shp[i];
            }
        for (int k = 0; k < n_out; k++) {
            shout[k] = *ref[k];
            shout[k].data = NULL;
            shout[k].format = fmt_for(NHWC_OUT, ref[k]->ndim);
            shoutp[k] = &shout[k];
        }
        /* as on the device: values only through host_in */
        kiln_op_ctx c = {.kctx = ctx, .node = &node, .n_in = n_in, .in = shpp, .n_out = n_out, .out = shoutp,
                         .host_in = in};
        if (kiln_cuda_supports(&c) != KILN_OK) {
            fail(lab, "%s", kiln_context_message(ctx));
        } else if (strcmp(op, "kiln.FusedElementwise") == 0 && !gpu_generated_compiles(ctx, &c)) {
            fail(lab, "generated source: %s", kiln_context_message(ctx));
        } else {
            printf("ok   %s: CPU reference and CUDA supports agree (dry run)\n", lab);
            passed++;
        }
        goto done;
    }
    /* the same on the device */
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) continue;
        const size_t off = misalign ? kiln_dtype_size(in[i]->dtype) : 0;
        if (gpu_device_copy(cu, ctx, in[i], off, true, fmt_for(NHWC_IN(i), in[i]->ndim), &din[i])) {
            fail(lab, "upload: %s", kiln_context_message(ctx));
            goto done;
        }
        dinp[i] = &din[i];
    }
    for (int k = 0; k < n_out; k++) {
        if (gpu_device_copy(cu, ctx, ref[k], misalign ? kiln_dtype_size(ref[k]->dtype) : 0, false,
                        fmt_for(NHWC_OUT, ref[k]->ndim), &dout[k]) ||
            kiln_cuda_fill_bytes(cu, dout[k].data, 0xFF, kiln_tensor_nbytes(ref[k]))) {
            fail(lab, "output buffer: %s", kiln_context_message(ctx));
            goto done;
        }
        doutp[k] = &dout[k];
    }
    kiln_op_ctx c;
    memset(&c, 0, sizeof c);
    c.kctx = ctx;
    c.node = &node;
    c.n_in = n_in;
    c.in = dinp;
    c.n_out = n_out;
    c.out = doutp;
    c.host_in = in; /* what the CUDA plan passes: the host tensors, values known */
    if (kiln_cuda_supports(&c) != KILN_OK) {
        fail(lab, "%s", kiln_context_message(ctx));
        goto done;
    }
    if (kiln_cuda_prepare(cu, &c)) {
        fail(lab, "prepare: %s", kiln_context_message(ctx));
        goto done;
    }
    size_t ws = 0;
    if (kiln_cuda_workspace_size(cu, &c, &ws) || kiln_cuda_workspace_reserve(cu, ws)) {
        fail(lab, "workspace: %s", kiln_context_message(ctx));
        goto done;
    }
    c.workspace = ws ? kiln_cuda_workspace(cu, NULL) : NULL;
    c.workspace_size = ws;
    if (kiln_cuda_rng_set(cu, run_seed) || kiln_cuda_run(cu, &c) || kiln_cuda_sync(cu)) {
        fail(lab, "%s", kiln_context_message(ctx));
        goto done;
    }
    device_runs++;
    /* back to back: the first run's outputs, to compare bit for bit with the last run's */
    void *first_bytes[4] = {0};
    for (int k = 0; k < n_out && repeat_runs > 0; k++) {
        first_bytes[k] = malloc(kiln_tensor_nbytes(ref[k]) + 1);
        if (!first_bytes[k] || kiln_cuda_download(cu, first_bytes[k], dout[k].data, kiln_tensor_nbytes(ref[k]))) {
            fail(lab, "%s", "download of the first run's output failed");
            for (int j = 0; j <= k; j++) free(first_bytes[j]);
            goto done;
        }
    }
    for (int r = 0; r < repeat_runs; r++)
        if (kiln_cuda_run(cu, &c)) {
            fail(lab, "a run back to back: %s", kiln_context_message(ctx));
            for (int k = 0; k < n_out; k++) free(first_bytes[k]);
            goto done;
        }
    if (repeat_runs > 0 && kiln_cuda_sync(cu)) {
        char detail[300];
        snprintf(detail, sizeof detail, "%d runs back to back, then: %s", repeat_runs, kiln_context_message(ctx));
        fail(lab, "%s", detail);
        for (int k = 0; k < n_out; k++) free(first_bytes[k]);
        goto done;
    }
    for (int k = 0; k < n_out && repeat_runs > 0; k++) {
        const size_t nb = kiln_tensor_nbytes(ref[k]);
        unsigned char *last = malloc(nb + 1);
        size_t changed = 0;
        if (last && !kiln_cuda_download(cu, last, dout[k].data, nb))
            for (size_t i = 0; i < nb; i++) changed += last[i] != ((unsigned char *)first_bytes[k])[i];
        char detail[200];
        snprintf(detail, sizeof detail, "%zu of %zu bytes of output %d differ between the first run and the last of %d",
                 changed, nb, k, repeat_runs + 1);
        char blab[300];
        snprintf(blab, sizeof blab, "%s: the same bits after %d runs back to back", lab, repeat_runs);
        check(last && changed == 0, blab, detail);
        free(last);
        free(first_bytes[k]);
    }
    bool bad = false;
    for (int k = 0; k < n_out; k++) {
        got = kiln_tensor_new(ctx, ref[k]->dtype, ref[k]->ndim, ref[k]->dims);
        if (!got || kiln_cuda_download(cu, got->data, dout[k].data, kiln_tensor_nbytes(ref[k]))) {
            fail(lab, "download: %s", kiln_context_message(ctx));
            goto done;
        }
        if (dout[k].format == KILN_FORMAT_NHWC) { /* back to NCHW to compare */
            kiln_tensor *nchw = kiln_tensor_new(ctx, ref[k]->dtype, ref[k]->ndim, ref[k]->dims);
            if (!nchw) {
                fail(lab, "%s", "out of memory");
                goto done;
            }
            kiln_layout_convert(got, nchw->data, KILN_FORMAT_NCHW);
            kiln_tensor_free(got);
            got = nchw;
        }
        double a = 0, r = 0;
        if (!exact) tolerances(ref[k]->dtype, atol, rtol, ref[k], &a, &r);
        char olab[300];
        if (n_out > 1) snprintf(olab, sizeof olab, "%s (output %d)", lab, k);
        else snprintf(olab, sizeof olab, "%s", lab);
        bad |= compare(got, ref[k], a, r, olab) != 0;
        if (k == keep_index && keep_out) *keep_out = got;
        else kiln_tensor_free(got);
        got = NULL;
    }
    if (bad) failed++;
    else passed++;
done:
    for (int i = 0; i < node.n_attrs; i++) kiln_attr_clear(&node.attrs[i]);
    free(node.attrs);
    for (int i = 0; i < n_in; i++) kiln_tensor_free(in[i]);
    for (int k = 0; k < 4; k++) kiln_tensor_free(ref[k]);
    kiln_tensor_free(got);
}

static void run_case(const char *op, const char *attrs, int opset, kiln_dtype dt, bool misalign,
                     double atol, double rtol, const char *label, const inp *specs, int n_in) {
    kiln_tensor *in[8] = {0};
    for (int i = 0; i < n_in; i++) {
        in[i] = make_input(&specs[i], dt, 1000u * (uint64_t)n_in + 17u * (uint64_t)i + (uint64_t)dt);
        if (!in[i] && !specs[i].missing) {
            char lab[256];
            snprintf(lab, sizeof lab, "%s %s %s", op, label, kiln_dtype_name(dt));
            fail(lab, "%s", "could not create an input");
            for (int j = 0; j < i; j++) kiln_tensor_free(in[j]);
            return;
        }
    }
    run_tensors(op, attrs, opset, dt, misalign, atol, rtol, label, in, n_in);
}

static const kiln_dtype FLOATS[] = {KILN_F32, KILN_F16, KILN_BF16};
static const kiln_dtype ANY[] = {KILN_F32, KILN_F16, KILN_I64, KILN_U8};

/* Run a float case in f32, f16 and bf16 (and f32 misaligned when `misalign`). */
static void floats(const char *op, const char *attrs, int opset, bool misalign, double atol,
                   double rtol, const char *label, const inp *specs, int n_in) {
    for (int k = 0; k < 3; k++) run_case(op, attrs, opset, FLOATS[k], false, atol, rtol, label, specs, n_in);
    if (misalign) run_case(op, attrs, opset, KILN_F32, true, atol, rtol, label, specs, n_in);
}

static void any_dtype(const char *op, const char *attrs, int opset, const char *label,
                      const inp *specs, int n_in) {
    for (int k = 0; k < 4; k++) run_case(op, attrs, opset, ANY[k], false, 0, 0, label, specs, n_in);
}

/* ------------------------------------------------------------------ cases */

/* ------------------------------------------- ops of fp16 / bf16 plans and exported CNNs */

#define XVS(vals_) {.dims = {-1}, .vals = (vals_)} /* a scalar of the case's dtype */

static const kiln_dtype CAST_TYPES[] = {KILN_F32, KILN_F16, KILN_BF16, KILN_F64, KILN_I64,
                                        KILN_I32, KILN_I8,  KILN_U8,   KILN_BOOL};
#define N_CAST_TYPES ((int)(sizeof CAST_TYPES / sizeof CAST_TYPES[0]))

/* Values where casts differ if done wrong: halfway cases of f16 (1 + 2^-11, 1 + 3*2^-11)
 * and bf16 (1 + 2^-8, 1 + 3*2^-8) rounding, a double just above an f16 halfway case
 * that a double -> float -> f16 cast would round down (1 + 2^-11 + 2^-40), -0, ±inf,
 * beyond f16's range, beyond int8/uint8/int32 limits, fractions to truncate. */
static const double CAST_SPECIAL[] = {
    1.00048828125, 1.00146484375, 1.00390625, 1.01171875, 1.0004882812509095, -1.00048828125,
    -0.0, 0.0, INFINITY, -INFINITY, 70000.0, -70000.0, 127.9, -128.9, 128.0, -129.0,
    255.5, 256.0, -0.5, 0.5, 2.5, -2.5, 3e9, -3e9, 1e19, -1e19, 65519.0, 65520.0};
/* ... and NaN, for targets that are integers or bool (a float NaN never compares equal) */
static const double CAST_NAN[] = {NAN, -NAN, 1.5, -7.25, 0.0, 300.0};

static void cast_cases(void) {
    exact = true;
    for (int a = 0; a < N_CAST_TYPES; a++)
        for (int b = 0; b < N_CAST_TYPES; b++) {
            const kiln_dtype from = CAST_TYPES[a], to = CAST_TYPES[b];
            char attrs[32], label[64];
            snprintf(attrs, sizeof attrs, "to=%d", (int)to);
            snprintf(label, sizeof label, "to %s", kiln_dtype_name(to));
            run_case("Cast", attrs, 0, from, false, 0, 0, label, INPUTS(XR(-300, 300, 3, 37)));
            snprintf(label, sizeof label, "to %s, wide range", kiln_dtype_name(to));
            run_case("Cast", attrs, 0, from, false, 0, 0, label, INPUTS(XR(-6e9, 6e9, 65)));
            snprintf(label, sizeof label, "to %s, special values", kiln_dtype_name(to));
            run_case("Cast", attrs, 0, from, false, 0, 0, label,
                     INPUTS(XV(0, CAST_SPECIAL, (int64_t)(sizeof CAST_SPECIAL / sizeof(double)))));
            if (!kiln_dtype_is_float(to)) {
                snprintf(label, sizeof label, "to %s, NaN", kiln_dtype_name(to));
                run_case("Cast", attrs, 0, from, false, 0, 0, label,
                         INPUTS(XV(0, CAST_NAN, (int64_t)(sizeof CAST_NAN / sizeof(double)))));
            }
        }
    exact = false;
}

/* value inputs (shapes, pads, axes...) */
#define I64S(...) ((const double[]){__VA_ARGS__})
#define IV(n_, ...) XV(KILN_I64, I64S(__VA_ARGS__), n_)
#define IV32(n_, ...) XV(KILN_I32, I64S(__VA_ARGS__), n_)

static void generate_cases(void) {
    exact = true; /* computed the same way on both sides */
    any_dtype("Shape", "", 0, "", INPUTS(X(2, 3, 4, 5)));
    any_dtype("Shape", "start=1;end=-1", 0, "start and end", INPUTS(X(2, 3, 4, 5)));
    run_case("Constant", "value_floats=[1.5,-2.25,3.0]", 0, KILN_F32, false, 0, 0, "value_floats", NULL, 0);
    run_case("Constant", "value_ints=[5,-6,7000000000]", 0, KILN_I64, false, 0, 0, "value_ints", NULL, 0);
    run_case("Constant", "value_float=2.5", 0, KILN_F32, false, 0, 0, "value_float", NULL, 0);
    run_case("Constant", "value_int=-9", 0, KILN_I64, false, 0, 0, "value_int", NULL, 0);
    /* more than one kernel-parameter chunk */
    char big[16384];
    size_t at = (size_t)snprintf(big, sizeof big, "value_ints=[");
    for (int i = 0; i < 1500; i++) at += (size_t)snprintf(big + at, sizeof big - at, i ? ",%d" : "%d", 7 * i - 3000);
    snprintf(big + at, sizeof big - at, "]");
    run_case("Constant", big, 0, KILN_I64, false, 0, 0, "1500 value_ints", NULL, 0);
    at = (size_t)snprintf(big, sizeof big, "value_floats=[");
    for (int i = 0; i < 1100; i++)
        at += (size_t)snprintf(big + at, sizeof big - at, i ? ",%.2f" : "%.2f", 0.25 * i - 100.5);
    snprintf(big + at, sizeof big - at, "]");
    run_case("Constant", big, 0, KILN_F32, false, 0, 0, "1100 value_floats", NULL, 0);
    kiln_tensor *v = kt_rand(KILN_F16, 2, KT_DIMS(3, 5), -2, 2, 5);
    tensor_attr = v;
    tensor_attr_name = "value";
    run_case("Constant", "", 0, KILN_F16, false, 0, 0, "value tensor", NULL, 0);
    kiln_tensor_free(v);
    static const kiln_dtype fills[] = {KILN_F32, KILN_F16, KILN_I64, KILN_BOOL, KILN_U8};
    for (size_t k = 0; k < sizeof fills / sizeof fills[0]; k++) {
        v = kt_make(fills[k], 1, KT_DIMS(1), KT_VALS(-5000000000.0));
        if (fills[k] != KILN_I64) kiln_set_f64(v, 0, 1.5);
        tensor_attr = v;
        run_case("ConstantOfShape", "", 0, fills[k], false, 0, 0, "value", INPUTS(IV(3, 2, 3, 4)));
        kiln_tensor_free(v);
    }
    tensor_attr = NULL;
    tensor_attr_name = NULL;
    run_case("ConstantOfShape", "", 0, KILN_F32, false, 0, 0, "default 0", INPUTS(IV(2, 5, 7)));
    static const double f_start[] = {1.5}, f_limit[] = {40}, f_delta[] = {0.7};
    static const double d_start[] = {10}, d_limit[] = {-50}, d_delta[] = {-3};
    static const kiln_dtype ranges[] = {KILN_F32, KILN_F16, KILN_BF16, KILN_F64, KILN_I64, KILN_I32, KILN_I16};
    for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++) {
        if (kiln_dtype_is_float(ranges[k]))
            run_case("Range", "", 0, ranges[k], false, 0, 0, "1.5 to 40 by 0.7",
                     INPUTS(XVS(f_start), XVS(f_limit), XVS(f_delta)));
        run_case("Range", "", 0, ranges[k], false, 0, 0, "10 down to -50 by 3",
                 INPUTS(XVS(d_start), XVS(d_limit), XVS(d_delta)));
    }
    exact = false;
}

#define F32V(n_, ...) XV(KILN_F32, I64S(__VA_ARGS__), n_)

/* ------------------------------------------------------------ whole plans */

static kiln_status add_init(kiln_model *m, const char *name, kiln_dtype dt, int ndim, const int64_t *dims,
                            const double *vals) {
    kiln_tensor *t = kt_make(dt, ndim, dims, vals);
    kiln_status st = t ? kiln_model_add_initializer(m, name, t) : KILN_ERR_OUT_OF_MEMORY;
    kiln_tensor_free(t);
    return st;
}

static kiln_status add_node(kiln_model *m, const char *op, int n_in, const char *const *in, const char *out,
                            kiln_node **node) {
    return kiln_model_add_node(m, op, out, n_in, in, 1, &out, node);
}

#define NODE(op, out, ...)                                                                                \
    do {                                                                                                  \
        const char *in_[] = {__VA_ARGS__};                                                                \
        if (!st) st = add_node(m, op, (int)(sizeof in_ / sizeof in_[0]), in_, out, &n);                   \
    } while (0)

/* X (1,2,5,6) and P (8 pads) -> Y0 (1,2,9,10), Y1 (1,2,8,9) through the ops above, with
 * every value input but P an initializer. */
static kiln_model *plan_model(void) {
    kiln_model *m = NULL;
    kiln_node *n = NULL;
    kiln_status st = kiln_model_create(ctx, &m);
    const int64_t xd[4] = {1, 2, 5, 6}, pd[1] = {8};
    if (!st) st = kiln_model_add_input(m, "X", KILN_F32, 4, xd);
    if (!st) st = kiln_model_add_input(m, "P", KILN_I64, 1, pd);
    double consts[144];
    float constf[144];
    for (int i = 0; i < 144; i++) constf[i] = (float)(consts[i] = sin(0.37 * i));
    if (!st) st = add_init(m, "starts", KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 0));
    if (!st) st = add_init(m, "ends", KILN_I64, 1, KT_DIMS(2), KT_VALS(7, 9));
    if (!st) st = add_init(m, "axes", KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 3));
    if (!st) st = add_init(m, "steps", KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 2));
    if (!st) st = add_init(m, "scales", KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 1.5, 2));
    if (!st) st = add_init(m, "raxes", KILN_I64, 1, KT_DIMS(1), KT_VALS(3));
    if (!st) st = add_init(m, "lns", KILN_F32, 1, KT_DIMS(10), consts);
    if (!st) st = add_init(m, "lnb", KILN_F32, 1, KT_DIMS(10), consts + 10);
    if (!st) st = add_init(m, "r0", KILN_F32, 0, NULL, KT_VALS(0));
    if (!st) st = add_init(m, "r1", KILN_F32, 0, NULL, KT_VALS(144));
    if (!st) st = add_init(m, "r2", KILN_F32, 0, NULL, KT_VALS(1));
    if (!st) st = add_init(m, "thr", KILN_F32, 0, NULL, KT_VALS(70.5));
    NODE("Pad", "xp", "X", "P");
    if (!st) st = kiln_node_set_string(n, "mode", "reflect");
    NODE("Slice", "sl", "xp", "starts", "ends", "axes", "steps");
    NODE("Resize", "rs", "sl", "", "scales");
    if (!st) st = kiln_node_set_string(n, "mode", "linear");
    NODE("ReduceMean", "rm", "rs", "raxes");
    NODE("Sub", "cen", "rs", "rm");
    NODE("LayerNormalization", "ln", "cen", "lns", "lnb");
    NODE("Cast", "h", "ln");
    if (!st) st = kiln_node_set_int(n, "to", KILN_F16);
    NODE("Cast", "Y0", "h");
    if (!st) st = kiln_node_set_int(n, "to", KILN_F32);
    NODE("Shape", "shp", "xp");
    NODE("ConstantOfShape", "zeros", "shp");
    NODE("Range", "rg", "r0", "r1", "r2");
    NODE("Reshape", "rgr", "rg", "shp");
    if (!st) st = kiln_model_add_node(m, "Constant", "cst", 0, NULL, 1, (const char *[]){"cst"}, &n);
    if (!st) st = kiln_node_set_floats(n, "value_floats", 144, constf);
    NODE("Reshape", "cstr", "cst", "shp");
    NODE("Add", "a1", "xp", "zeros");
    NODE("Add", "a2", "a1", "rgr");
    NODE("Add", "a3", "a2", "cstr");
    NODE("Greater", "g", "rgr", "thr");
    NODE("Where", "Y1", "g", "a3", "xp");
    if (!st) st = kiln_model_add_output(m, "Y0");
    if (!st) st = kiln_model_add_output(m, "Y1");
    if (!st) st = kiln_model_finalize(m);
    if (st) {
        fail("plan model", "%s", kiln_context_message(ctx));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

/* The model through sessions on the CPU and on CUDA, fp32 and fp16, with folding off (so
 * ConstantOfShape, Range and Constant of 144 elements stay in the run list): three runs
 * with new data (the first launches kernels one by one, the second is captured into a
 * CUDA graph, the third replays it) must match the CPU. Pad's pads is a graph input, whose
 * value the plan keeps: each run passes a new tensor and frees the last one. --dry-run:
 * every node of the planned run list must be supported on CUDA. */
static void plan_checks(void) {
    kiln_model *m = plan_model();
    if (!m) return;
    static const double pads[8] = {0, 0, 1, 2, 0, 0, 2, 1};
    for (int prec = 0; prec < 2; prec++) {
        char label[96];
        snprintf(label, sizeof label, "plan with folding off, %s", prec ? "fp16" : "fp32");
        kiln_session_options o = {.device = KILN_DEVICE_CPU, .no_fold = 1,
                                  .precision = prec ? KILN_PRECISION_FP16 : KILN_PRECISION_FP32};
        kiln_tensor *in[2] = {kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 5, 6), -2, 2, 77),
                              kt_make(KILN_I64, 1, KT_DIMS(8), pads)};
        if (!cu) {
            kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = o.precision};
            kiln_model *opt = NULL;
            kiln_plan *p = NULL;
            kiln_status st = kiln_passes_apply(m, &po, &opt);
            if (!st) st = kiln_plan_build(opt, in, false, false, &p);
            kiln_plan_view_t v;
            if (!st) kiln_plan_view(p, &v);
            char ops[512] = "";
            size_t at = 0;
            for (int e = 0; !st && e < v.n_exec; e++) {
                kiln_op_ctx hc = *kiln_plan_exec_op_ctx(&v, e);
                st = kiln_cuda_supports(&hc);
                if (at < sizeof ops) at += (size_t)snprintf(ops + at, sizeof ops - at, " %s", hc.node->op_type);
            }
            if (st) fail(label, "%s", kiln_context_message(ctx));
            else {
                printf("ok   %s: run list%s, all supported on cuda (dry run)\n", label, ops);
                passed++;
            }
            kiln_plan_free(p);
            kiln_model_free(opt);
            for (int i = 0; i < 2; i++) kiln_tensor_free(in[i]);
            continue;
        }
        kiln_session *scpu = NULL, *sgpu = NULL;
        kiln_status st = kiln_session_create(m, &o, &scpu);
        o.device = KILN_DEVICE_CUDA;
        if (!st) st = kiln_session_create(m, &o, &sgpu);
        for (int r = 0; r < 3 && !st; r++) {
            if (r > 0) { /* new tensors, the old ones freed */
                for (int i = 0; i < 2; i++) kiln_tensor_free(in[i]);
                in[0] = kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 5, 6), -2, 2, 77 + (uint64_t)r);
                in[1] = kt_make(KILN_I64, 1, KT_DIMS(8), pads);
            }
            const kiln_tensor *want[2], *got[2];
            st = kiln_session_run(scpu, 2, in, 2, want);
            kiln_tensor *keep[2] = {NULL, NULL};
            for (int k = 0; !st && k < 2; k++)
                if (!(keep[k] = kiln_tensor_clone(ctx, want[k]))) st = KILN_ERR_OUT_OF_MEMORY;
            if (!st) st = kiln_session_run(sgpu, 2, in, 2, got);
            for (int k = 0; !st && k < 2; k++) {
                char olab[160];
                snprintf(olab, sizeof olab, "%s, run %d, output %d", label, r + 1, k);
                /* Y0 goes through f16; fp16 plans compute in f16 */
                const double tol = prec ? 2e-2 : k == 0 ? 4e-3 : 1e-5;
                if (compare(got[k], keep[k], tol, tol, olab)) failed++;
                else passed++;
            }
            for (int k = 0; k < 2; k++) kiln_tensor_free(keep[k]);
        }
        if (st) fail(label, "%s", kiln_context_message(ctx));
        kiln_session_free(scpu);
        kiln_session_free(sgpu);
        for (int i = 0; i < 2; i++) kiln_tensor_free(in[i]);
    }
    kiln_model_free(m);
}

/* ------------------------------------------------------------ training ops */

static const double ONE[] = {1}, ZERO[] = {0}, LOSS_SCALE[] = {65536};
static const double RATIO_25[] = {0.25}, RATIO_50[] = {0.5}, RATIO_0[] = {0};

static void dropout_cases(void) {
    /* Dropout's mask and output match the CPU's bit for bit */
    n_outputs = 2;
    floats("Dropout", "", 0, false, 0, 0, "training, ratio 0.25, mask",
           INPUTS(X(3, 5, 7), SCALARV(KILN_F32, RATIO_25), SCALARV(KILN_BOOL, ONE)));
    /* 4 elements a thread; misaligned (f32): one element a thread */
    floats("Dropout", "", 0, true, 0, 0, "mnist dropout1",
           INPUTS(X(64, 64, 12, 12), SCALARV(KILN_F32, RATIO_25), SCALARV(KILN_BOOL, ONE)));
    run_seed = 123456789;
    with_out_values = true;
    floats("Dropout", "seed=7", 0, false, 0, 0, "training, run seed, seed attribute, output values",
           INPUTS(X(64, 128), SCALARV(KILN_F32, RATIO_50), SCALARV(KILN_BOOL, ONE)));
    floats("Dropout", "", 0, true, 0, 0, "training, f64 ratio, run seed",
           INPUTS(X(1001), SCALARV(KILN_F64, RATIO_25), SCALARV(KILN_BOOL, ONE)));
    with_out_values = false;
    run_seed = 0;
    floats("Dropout", "", 0, false, 0, 0, "training false: identity, mask all true",
           INPUTS(X(4, 9), SCALARV(KILN_F32, RATIO_50), SCALARV(KILN_BOOL, ZERO)));
    floats("Dropout", "", 0, false, 0, 0, "no training input", INPUTS(X(4, 9), SCALARV(KILN_F32, RATIO_50)));
    floats("Dropout", "", 0, false, 0, 0, "ratio 0 in training", INPUTS(X(4, 9), SCALARV(KILN_F32, RATIO_0),
                                                                       SCALARV(KILN_BOOL, ONE)));
    n_outputs = 1;
    floats("Dropout", "", 0, false, 0, 0, "training, no mask output",
           INPUTS(X(5, 77), NONE, SCALARV(KILN_BOOL, ONE)));

    floats("kiln.DropoutGrad", "", 0, true, 0, 0, "training, ratio 0.25",
           INPUTS(X(64, 128), XT(KILN_BOOL, 0, 2, 64, 128), SCALARV(KILN_F32, RATIO_25), SCALARV(KILN_BOOL, ONE)));
    floats("kiln.DropoutGrad", "", 0, false, 0, 0, "training false",
           INPUTS(X(3, 50), XT(KILN_BOOL, 0, 2, 3, 50), SCALARV(KILN_F32, RATIO_25), SCALARV(KILN_BOOL, ZERO)));
    floats("kiln.DropoutGrad", "", 0, false, 0, 0, "default ratio",
           INPUTS(X(3, 50), XT(KILN_BOOL, 0, 2, 3, 50), NONE, SCALARV(KILN_BOOL, ONE)));
    floats("kiln.DropoutGrad", "", 0, true, 0, 0, "ratio f64",
           INPUTS(X(1001), XT(KILN_BOOL, 0, 2, 1001), SCALARV(KILN_F64, RATIO_50), SCALARV(KILN_BOOL, ONE)));
    /* relu = 1 (the fuse-pool pass's fold of a Relu's gradient): dX = Y > 0 ? g : 0 with Y
     * input 4, against the op's CPU reference (DropoutGrad then UnaryGrad op=Relu, bit for
     * bit, in its optests); 4 elements a thread (Y's vector load), and misaligned (f32: every
     * input one element off, one element a thread) */
    floats("kiln.DropoutGrad", "relu=1", 0, true, 0, 0, "relu, training, ratio 0.25, mnist dropout2",
           INPUTS(X(64, 128), XT(KILN_BOOL, 0, 2, 64, 128), SCALARV(KILN_F32, RATIO_25), SCALARV(KILN_BOOL, ONE),
                  X(64, 128)));
    floats("kiln.DropoutGrad", "relu=1", 0, true, 0, 0, "relu, training false",
           INPUTS(X(3, 50), XT(KILN_BOOL, 0, 2, 3, 50), SCALARV(KILN_F32, RATIO_25), SCALARV(KILN_BOOL, ZERO),
                  X(3, 50)));
    floats("kiln.DropoutGrad", "relu=1", 0, true, 0, 0, "relu, ratio f64, odd size",
           INPUTS(X(1001), XT(KILN_BOOL, 0, 2, 1001), SCALARV(KILN_F64, RATIO_50), SCALARV(KILN_BOOL, ONE),
                  X(1001)));
    floats("kiln.DropoutGrad", "relu=1", 0, false, 0, 0, "relu, ratio 0 in training",
           INPUTS(X(4, 9), XT(KILN_BOOL, 0, 2, 4, 9), SCALARV(KILN_F32, RATIO_0), SCALARV(KILN_BOOL, ONE), X(4, 9)));
    floats("kiln.DropoutGrad", "relu=1", 0, false, 0, 0, "relu, default ratio",
           INPUTS(X(3, 50), XT(KILN_BOOL, 0, 2, 3, 50), NONE, SCALARV(KILN_BOOL, ONE), X(3, 50)));
    floats("kiln.DropoutGrad", "relu=1", 0, false, 0, 0, "relu, no ratio, no training_mode",
           INPUTS(X(7), XT(KILN_BOOL, 0, 2, 7), NONE, NONE, X(7)));

    /* across layouts (the layout pass's folds of a conversion): an NHWC X into an NCHW Y
     * and mask, the mask the CPU's bit for bit (drawn by NCHW index); NCHW dY and mask into
     * an NHWC dX. Tiles cut off on both sides: 144 and 63 pixels, 13 and 40 channels. */
    layout = NHWC_IN(0);
    n_outputs = 2;
    floats("Dropout", "", 0, true, 0, 0, "training, NHWC X, mnist dropout1",
           INPUTS(X(64, 64, 12, 12), SCALARV(KILN_F32, RATIO_25), SCALARV(KILN_BOOL, ONE)));
    floats("Dropout", "", 0, false, 0, 0, "training, NHWC X, 13 channels, 7x9",
           INPUTS(X(3, 13, 7, 9), SCALARV(KILN_F32, RATIO_50), SCALARV(KILN_BOOL, ONE)));
    run_seed = 987654321;
    with_out_values = true;
    floats("Dropout", "seed=11", 0, false, 0, 0, "training, NHWC X, run seed, seed attribute, output values",
           INPUTS(X(2, 40, 5, 5), SCALARV(KILN_F64, RATIO_25), SCALARV(KILN_BOOL, ONE)));
    with_out_values = false;
    run_seed = 0;
    floats("Dropout", "", 0, false, 0, 0, "training false, NHWC X: a layout change, mask all true",
           INPUTS(X(3, 13, 7, 9), SCALARV(KILN_F32, RATIO_50), SCALARV(KILN_BOOL, ZERO)));
    floats("Dropout", "", 0, false, 0, 0, "ratio 0 in training, NHWC X",
           INPUTS(X(2, 40, 5, 5), SCALARV(KILN_F32, RATIO_0), SCALARV(KILN_BOOL, ONE)));
    n_outputs = 1;
    floats("Dropout", "", 0, false, 0, 0, "training, NHWC X, no mask output",
           INPUTS(X(2, 37, 3, 11), NONE, SCALARV(KILN_BOOL, ONE)));
    layout = NHWC_OUT;
    floats("kiln.DropoutGrad", "", 0, true, 0, 0, "training, NHWC dX, mnist dropout1",
           INPUTS(X(64, 64, 12, 12), XT(KILN_BOOL, 0, 2, 64, 64, 12, 12), SCALARV(KILN_F32, RATIO_25),
                  SCALARV(KILN_BOOL, ONE)));
    floats("kiln.DropoutGrad", "", 0, false, 0, 0, "training, NHWC dX, 13 channels, 7x9",
           INPUTS(X(3, 13, 7, 9), XT(KILN_BOOL, 0, 2, 3, 13, 7, 9), SCALARV(KILN_F64, RATIO_50),
                  SCALARV(KILN_BOOL, ONE)));
    floats("kiln.DropoutGrad", "", 0, false, 0, 0, "training false, NHWC dX: a layout change",
           INPUTS(X(2, 40, 5, 5), XT(KILN_BOOL, 0, 2, 2, 40, 5, 5), SCALARV(KILN_F32, RATIO_25),
                  SCALARV(KILN_BOOL, ZERO)));
    floats("kiln.DropoutGrad", "", 0, false, 0, 0, "default ratio, NHWC dX",
           INPUTS(X(2, 37, 3, 11), XT(KILN_BOOL, 0, 2, 2, 37, 3, 11), NONE, SCALARV(KILN_BOOL, ONE)));

    /* the fuse-pool pass's ops: MaxPool on an NHWC X into Dropout's NCHW Y and mask (the
     * mask the CPU's bit for bit), and back from NCHW dY and mask through the pool (and the
     * Relu whose output X is) into an NHWC dX; tiles cut off as above */
    layout = NHWC_IN(0);
    n_outputs = 2;
    floats("kiln.MaxPoolDropout", "kernel_shape=[2,2];strides=[2,2];dropout_opset=13", 0, false, 0, 0, "training, mnist pool + dropout1",
           INPUTS(X(64, 64, 24, 24), SCALARV(KILN_F32, RATIO_25), SCALARV(KILN_BOOL, ONE)));
    run_seed = 55555;
    with_out_values = true;
    floats("kiln.MaxPoolDropout", "kernel_shape=[3,2];strides=[3,2];seed=3;dropout_opset=13", 0, false, 0, 0,
           "training, 3x2 windows, 13 channels, run seed, seed attribute, output values",
           INPUTS(X(3, 13, 9, 8), SCALARV(KILN_F64, RATIO_50), SCALARV(KILN_BOOL, ONE)));
    with_out_values = false;
    run_seed = 0;
    floats("kiln.MaxPoolDropout", "kernel_shape=[2,2];strides=[2,2];dropout_opset=13", 0, false, 0, 0, "training false: the pool alone",
           INPUTS(X(2, 40, 6, 10), SCALARV(KILN_F32, RATIO_50), SCALARV(KILN_BOOL, ZERO)));
    n_outputs = 1;
    floats("kiln.MaxPoolDropout", "kernel_shape=[2,2];strides=[2,2];dropout_opset=13", 0, false, 0, 0, "training, no mask output",
           INPUTS(X(2, 37, 4, 22), NONE, SCALARV(KILN_BOOL, ONE)));
    layout = NHWC_IN(1) | NHWC_OUT;
    floats("kiln.MaxPoolDropoutGrad", "kernel_shape=[2,2];strides=[2,2];relu=1", 0, false, 0, 0,
           "training, mnist dropout1 -> pool -> relu2",
           INPUTS(X(64, 64, 12, 12), XR(-1, 1, 64, 64, 24, 24), XT(KILN_BOOL, 0, 2, 64, 64, 12, 12),
                  SCALARV(KILN_F32, RATIO_25), SCALARV(KILN_BOOL, ONE)));
    floats("kiln.MaxPoolDropoutGrad", "kernel_shape=[3,2];strides=[3,2]", 0, false, 0, 0,
           "training, 3x2 windows, no relu, 13 channels",
           INPUTS(X(3, 13, 3, 4), XR(-1, 1, 3, 13, 9, 8), XT(KILN_BOOL, 0, 2, 3, 13, 3, 4), SCALARV(KILN_F64, RATIO_50),
                  SCALARV(KILN_BOOL, ONE)));
    floats("kiln.MaxPoolDropoutGrad", "kernel_shape=[2,2];strides=[2,2];relu=1", 0, false, 0, 0,
           "training false, default ratio",
           INPUTS(X(2, 40, 3, 5), XR(-1, 1, 2, 40, 6, 10), XT(KILN_BOOL, 0, 2, 2, 40, 3, 5), NONE,
                  SCALARV(KILN_BOOL, ZERO)));
    layout = 0;
}

/* kiln.LogSoftmaxNLLGrad's loss output (X, target, weight?, dLoss) against
 * kiln.LogSoftmaxNLL's loss, both run on the device on the very same inputs, in f32, f16
 * and bf16: equal to the last bit (the fuse-loss pass swaps one for the other). Each run
 * is also a case against the CPU reference. */
static void loss_output_bits(const char *attrs, const char *label, const inp *specs, int n_in) {
    for (int d = 0; d < 3; d++) {
        const kiln_dtype dt = FLOATS[d];
        kiln_tensor *in[2][4] = {{0}}, *fwd = NULL, *from_grad = NULL;
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < n_in && i < 4; i++) in[r][i] = make_input(&specs[i], dt, 4000u + 17u * (uint64_t)i + (uint64_t)dt);
        char lab[256];
        snprintf(lab, sizeof lab, "%s (the forward's loss)", label);
        const int saved = n_outputs;
        keep_out = &fwd;
        n_outputs = 1;
        run_tensors("kiln.LogSoftmaxNLL", attrs, 0, dt, false, 2e-6, 1e-5, lab, in[0], 3);
        kiln_tensor_free(in[0][3]); /* dLoss: not the forward's */
        snprintf(lab, sizeof lab, "%s (the gradient's loss)", label);
        keep_out = &from_grad;
        keep_index = 2;
        n_outputs = 3;
        run_tensors("kiln.LogSoftmaxNLLGrad", attrs, 0, dt, false, 1e-7, 1e-5, lab, in[1], n_in);
        keep_out = NULL;
        keep_index = 0;
        n_outputs = saved;
        if (fwd && from_grad) { /* both ran on the device (not filtered out, no dry run) */
            snprintf(lab, sizeof lab, "kiln.LogSoftmaxNLLGrad %s %s: loss output bit for bit the forward's", label,
                     kiln_dtype_name(dt));
            if (compare(from_grad, fwd, 0, 0, lab)) failed++;
            else passed++;
        }
        kiln_tensor_free(fwd);
        kiln_tensor_free(from_grad);
    }
}

/* kiln.LogSoftmaxNLL (the fused loss, f32 outputs from an X of the case's dtype) and its
 * gradient (f32 dLoss and dLogProb, dX in X's dtype): rows fewer and more than the warps
 * of a block, N not a multiple of anything, rows longer than a warp, weights and
 * ignore_index, both reductions, and the gradient's one-block and grid paths; the
 * gradient's loss output (fuse-loss's merged form) in both paths, against the CPU and bit
 * for bit against the forward's kernel. */
static void fused_loss_cases(void) {
    const double at = 2e-6, rt = 1e-5;
    const char *op = "kiln.LogSoftmaxNLL";
    floats(op, "", 0, false, at, rt, "mnist", INPUTS(XR(-6, 6, 64, 10), XT(KILN_I64, 0, 10, 64)));
    n_outputs = 2;
    floats(op, "reduction=mean", 0, false, at, rt, "mnist with log_prob", INPUTS(XR(-6, 6, 64, 10), XT(KILN_I64, 0, 10, 64)));
    floats(op, "reduction=sum;ignore_index=3", 0, false, at, rt, "37 rows, weights, ignore_index, log_prob",
           INPUTS(XR(-6, 6, 37, 10), XT(KILN_I32, 0, 10, 37), XT(KILN_F32, 0.2, 2, 10)));
    n_outputs = 1;
    floats(op, "ignore_index=0", 0, false, at, rt, "long rows, f16 weights",
           INPUTS(XR(-8, 8, 5, 1000), XT(KILN_I64, 0, 1000, 5), XT(KILN_F16, 0.2, 2, 1000)));
    floats(op, "", 0, false, at, rt, "1000 rows (more than a block's warps)",
           INPUTS(XR(-6, 6, 1000, 3), XT(KILN_I64, 0, 3, 1000)));
    floats(op, "", 0, false, at, rt, "one row", INPUTS(XR(-6, 6, 1, 10), XT(KILN_I64, 0, 10, 1)));

    op = "kiln.LogSoftmaxNLLGrad";
    const double gat = 1e-7, grt = 1e-5;
    /* p - 1 at the target cancels: an absolute error of p's rounding, times the coefficient */
    atol_scale = 1e-6;
    floats(op, "", 0, false, gat, grt, "mnist",
           INPUTS(XR(-6, 6, 64, 10), XT(KILN_I64, 0, 10, 64), NONE, SCALART(KILN_F32, 0.5, 2)));
    floats(op, "", 0, false, gat, grt, "mnist, a loss scale of 65536",
           INPUTS(XR(-6, 6, 64, 10), XT(KILN_I64, 0, 10, 64), NONE, SCALARV(KILN_F32, LOSS_SCALE)));
    n_outputs = 2; /* dX and its f32 copy */
    floats(op, "", 0, false, gat, grt, "mnist with dX_f32",
           INPUTS(XR(-6, 6, 64, 10), XT(KILN_I64, 0, 10, 64), NONE, SCALART(KILN_F32, 0.5, 2)));
    floats(op, "reduction=sum", 0, false, gat, grt, "large sum with dX_f32 (a grid)",
           INPUTS(XR(-6, 6, 3001, 7), XT(KILN_I32, 0, 7, 3001), NONE, SCALART(KILN_F32, 0.5, 2)));
    n_outputs = 1;
    floats(op, "reduction=sum;ignore_index=3", 0, false, gat, grt, "37 rows, weights, ignore_index",
           INPUTS(XR(-6, 6, 37, 10), XT(KILN_I32, 0, 10, 37), XT(KILN_F32, 0.2, 2, 10), SCALART(KILN_F32, 0.5, 2)));
    floats(op, "", 0, false, gat, grt, "long rows, weighted mean, dLogProb",
           INPUTS(XR(-8, 8, 5, 1000), XT(KILN_I64, 0, 1000, 5), XT(KILN_F32, 0.2, 2, 1000), SCALART(KILN_F32, 0.5, 2),
                  XT(KILN_F32, -1, 1, 5, 1000)));
    floats(op, "", 0, false, gat, grt, "dLogProb only",
           INPUTS(XR(-6, 6, 37, 10), XT(KILN_I64, 0, 10, 37), NONE, NONE, XT(KILN_F32, -1, 1, 37, 10)));
    floats(op, "ignore_index=1", 0, false, gat, grt, "large mean (scale kernel, then a grid)",
           INPUTS(XR(-6, 6, 2001, 10), XT(KILN_I64, 0, 10, 2001), XT(KILN_F32, 0.2, 2, 10), SCALART(KILN_F32, 0.5, 2)));
    floats(op, "reduction=sum", 0, false, gat, grt, "large sum (a grid)",
           INPUTS(XR(-6, 6, 3001, 7), XT(KILN_I32, 0, 7, 3001), NONE, SCALART(KILN_F32, 0.5, 2)));
    /* dX, dX_f32 and the loss (output 2): the one-block kernel computes the loss itself;
     * the grid path launches the forward's kernel first */
    n_outputs = 3;
    floats(op, "", 0, false, gat, grt, "mnist with the loss",
           INPUTS(XR(-6, 6, 64, 10), XT(KILN_I64, 0, 10, 64), NONE, SCALART(KILN_F32, 0.5, 2)));
    floats(op, "reduction=sum;ignore_index=3", 0, false, gat, grt, "37 rows, weights, ignore_index, with the loss",
           INPUTS(XR(-6, 6, 37, 10), XT(KILN_I32, 0, 10, 37), XT(KILN_F32, 0.2, 2, 10), SCALART(KILN_F32, 0.5, 2)));
    floats(op, "ignore_index=1", 0, false, gat, grt, "large weighted mean with the loss (forward, scale, grid)",
           INPUTS(XR(-6, 6, 2001, 10), XT(KILN_I64, 0, 10, 2001), XT(KILN_F32, 0.2, 2, 10), SCALART(KILN_F32, 0.5, 2)));
    floats(op, "reduction=sum", 0, false, gat, grt, "large sum with the loss (forward, grid)",
           INPUTS(XR(-6, 6, 3001, 7), XT(KILN_I32, 0, 7, 3001), NONE, SCALART(KILN_F32, 0.5, 2)));
    n_outputs = 1;
    loss_output_bits("", "mnist", INPUTS(XR(-6, 6, 64, 10), XT(KILN_I64, 0, 10, 64), NONE, SCALARV(KILN_F32, LOSS_SCALE)));
    loss_output_bits("reduction=sum;ignore_index=3", "37 rows, weights, ignore_index",
                     INPUTS(XR(-6, 6, 37, 10), XT(KILN_I32, 0, 10, 37), XT(KILN_F32, 0.2, 2, 10), SCALART(KILN_F32, 0.5, 2)));
    loss_output_bits("ignore_index=0", "long rows, weighted mean, ignore_index",
                     INPUTS(XR(-8, 8, 5, 1000), XT(KILN_I64, 0, 1000, 5), XT(KILN_F32, 0.2, 2, 1000), SCALART(KILN_F32, 0.5, 2)));
    loss_output_bits("", "1000 rows (more than a block's warps)",
                     INPUTS(XR(-6, 6, 1000, 3), XT(KILN_I64, 0, 3, 1000), NONE, SCALART(KILN_F32, 0.5, 2)));
    loss_output_bits("ignore_index=1", "large weighted mean (a grid)",
                     INPUTS(XR(-6, 6, 2001, 10), XT(KILN_I64, 0, 10, 2001), XT(KILN_F32, 0.2, 2, 10), SCALART(KILN_F32, 0.5, 2)));
    atol_scale = 0;
}

/* ------------------------------------------------------------ fused ops */

/* A copy of t in dtype dt (values converted through double). */
static kiln_tensor *as_dtype(const kiln_tensor *t, kiln_dtype dt) {
    kiln_tensor *r = kiln_tensor_new(ctx, dt, t->ndim, t->dims);
    for (int64_t i = 0; r && i < kiln_tensor_numel(t); i++) kiln_set_f64(r, i, kiln_get_f64(t, i));
    return r;
}

/* One ONNX op by its CPU reference (opset 13: Clip's bounds are inputs). */
static kiln_status eval_op(const char *op, const char *attrs, int n_in, kiln_tensor **in, kiln_tensor **out) {
    kiln_node node;
    memset(&node, 0, sizeof node);
    node.op_type = (char *)op;
    node.name = (char *)"composition";
    node.domain = (char *)"";
    node.op = kiln_op_index(op);
    node.opset = 13;
    node.n_in = n_in;
    node.n_out = 1;
    *out = NULL;
    if (node.op < 0) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "no CPU %s in this build", op);
    kiln_status st = kiln_attrs_parse(ctx, attrs, &node.attrs, &node.n_attrs);
    if (!st) st = kiln_op_eval(ctx, &node, n_in, in, 1, out);
    for (int i = 0; i < node.n_attrs; i++) kiln_attr_clear(&node.attrs[i]);
    free(node.attrs);
    return st;
}

/* act(x) for an activation name and its two parameters, as ONNX ops; x is consumed. */
static kiln_status eval_act(const char *act, bool has_a, float a, bool has_b, float b, kiln_tensor *x,
                            kiln_tensor **out) {
    char attrs[128] = "";
    kiln_tensor *in[3] = {x, NULL, NULL};
    int n_in = 1;
    kiln_status st;
    *out = NULL;
    if (!act[0]) {
        *out = x;
        return KILN_OK;
    }
    if (strcmp(act, "Silu") == 0) { /* x * Sigmoid(x), as exporters write it */
        kiln_tensor *sg = NULL;
        st = eval_op("Sigmoid", "", 1, in, &sg);
        if (!st) {
            kiln_tensor *m[2] = {x, sg};
            st = eval_op("Mul", "", 2, m, out);
        }
        kiln_tensor_free(sg);
        kiln_tensor_free(x);
        return st;
    }
    if (strcmp(act, "Gelu") == 0 || strcmp(act, "GeluTanh") == 0) { /* ONNX's Gelu (opset 20) */
        st = eval_op("Gelu", act[4] ? "approximate=tanh" : "approximate=none", 1, in, out);
        kiln_tensor_free(x);
        return st;
    }
    if (strcmp(act, "Clip") == 0) {
        in[1] = has_a ? kt_scalar(KILN_F32, a) : NULL;
        in[2] = has_b ? kt_scalar(KILN_F32, b) : NULL;
        n_in = 3;
    } else if (strcmp(act, "LeakyRelu") == 0 || strcmp(act, "Elu") == 0) {
        if (has_a) snprintf(attrs, sizeof attrs, "alpha=%.9e", (double)a);
    } else if (strcmp(act, "HardSigmoid") == 0) {
        if (has_a && has_b) snprintf(attrs, sizeof attrs, "alpha=%.9e;beta=%.9e", (double)a, (double)b);
        else if (has_a) snprintf(attrs, sizeof attrs, "alpha=%.9e", (double)a);
    }
    st = eval_op(act, attrs, n_in, in, out);
    for (int i = 0; i < 3; i++) kiln_tensor_free(in[i]);
    return st;
}

/* kiln.FusedElementwise as the ONNX ops of its program, in f32, rounded once to dt. An
 * interpreter of its own (not the CUDA side's parser): stack of f32 tensors. */
static kiln_status compose_elementwise(const kiln_node *node, int n_in, kiln_tensor **in, kiln_dtype dt,
                                       kiln_tensor **out) {
    static const char *const binary[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"};
    const char *prog = kiln_attr_string(node, "program", "");
    char *buf = strdup(prog);
    kiln_tensor *stack[64] = {0};
    int sp = 0;
    kiln_status st = buf ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    *out = NULL;
    for (char *save = NULL, *t = buf ? strtok_r(buf, " ", &save) : NULL; t && !st; t = strtok_r(NULL, " ", &save)) {
        if (sp >= 63) st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "stack overflow");
        else if (t[0] == 'i' && t[1] >= '0' && t[1] <= '9') {
            const int k = atoi(t + 1);
            stack[sp] = k < n_in && in[k] ? as_dtype(in[k], KILN_F32) : NULL;
            if (!stack[sp++]) st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "bad input %s", t);
        } else if (t[0] == 'c') {
            stack[sp++] = kt_scalar(KILN_F32, (float)strtod(t + 1, NULL));
        } else {
            char *at = strchr(t, '@');
            float p[2] = {0, 0};
            int np = 0;
            for (char *q = at; q && np < 2; q = strchr(q + 1, '@')) p[np++] = (float)strtod(q + 1, NULL);
            if (at) *at = 0;
            bool bin = false;
            for (int b = 0; b < 7; b++) bin = bin || strcmp(t, binary[b]) == 0;
            kiln_tensor *r = NULL;
            if (bin) {
                if (sp < 2) st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "stack underflow at %s", t);
                else {
                    st = eval_op(t, "", 2, &stack[sp - 2], &r);
                    kiln_tensor_free(stack[--sp]);
                    kiln_tensor_free(stack[--sp]);
                }
            } else if (sp < 1) {
                st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "stack underflow at %s", t);
            } else {
                st = eval_act(t, np > 0, p[0], np > 1, p[1], stack[--sp], &r);
            }
            if (r) stack[sp++] = r;
        }
    }
    if (!st && sp != 1) st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "program leaves %d values", sp);
    if (!st) {
        /* the output has the inputs' broadcast shape even when the program ignores some */
        int nd = 0;
        int64_t dims[KILN_MAX_DIMS];
        nd = stack[0]->ndim;
        memcpy(dims, stack[0]->dims, sizeof dims);
        for (int k = 0; k < n_in; k++) {
            int64_t next[KILN_MAX_DIMS];
            if (!kiln_broadcast_shape(nd, dims, in[k]->ndim, in[k]->dims, &nd, next)) {
                st = kiln_fail(ctx, KILN_ERR_SHAPE, "inputs do not broadcast");
                break;
            }
            memcpy(dims, next, sizeof dims);
        }
        *out = st ? NULL : kiln_tensor_new(ctx, dt, nd, dims);
        int64_t idx[KILN_MAX_DIMS] = {0}, off[1] = {0};
        int64_t strides[1][KILN_MAX_DIMS];
        kiln_broadcast_strides(stack[0]->ndim, stack[0]->dims, nd, dims, strides[0]);
        for (int64_t i = 0; *out && i < kiln_tensor_numel(*out); i++) {
            kiln_set_f64(*out, i, kiln_get_f64(stack[0], off[0]));
            kiln_index_next(nd, dims, idx, 1, (const int64_t(*)[KILN_MAX_DIMS])strides, off);
        }
        if (!*out && !st) st = KILN_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < sp; i++) kiln_tensor_free(stack[i]);
    free(buf);
    return st;
}

/* kiln.FusedGemm as Gemm then its activation, in f32, rounded once to dt. */
static kiln_status compose_gemm(const kiln_node *node, int n_in, kiln_tensor **in, kiln_dtype dt,
                                kiln_tensor **out) {
    kiln_tensor *f[3] = {0}, *g = NULL, *y = NULL;
    kiln_status st = KILN_OK;
    *out = NULL;
    for (int i = 0; i < n_in && i < 3; i++)
        if (in[i] && !(f[i] = as_dtype(in[i], KILN_F32))) st = KILN_ERR_OUT_OF_MEMORY;
    char attrs[160];
    snprintf(attrs, sizeof attrs, "transA=%d;transB=%d;alpha=%.9e;beta=%.9e",
             (int)kiln_attr_int(node, "transA", 0), (int)kiln_attr_int(node, "transB", 0),
             (double)kiln_attr_float(node, "alpha", 1.0f), (double)kiln_attr_float(node, "beta", 1.0f));
    if (!st) st = eval_op("Gemm", attrs, n_in, f, &g);
    const char *act = kiln_attr_string(node, "activation", "");
    const bool clip = strcmp(act, "Clip") == 0;
    const char *an = clip ? "act_min" : "act_alpha", *bn = clip ? "act_max" : "act_beta";
    if (!st)
        st = eval_act(act, kiln_node_attr(node, an) != NULL, kiln_attr_float(node, an, 0),
                      kiln_node_attr(node, bn) != NULL, kiln_attr_float(node, bn, 0), g, &y);
    else
        kiln_tensor_free(g);
    if (!st && !(*out = as_dtype(y, dt))) st = KILN_ERR_OUT_OF_MEMORY;
    kiln_tensor_free(y);
    for (int i = 0; i < 3; i++) kiln_tensor_free(f[i]);
    return st;
}

/* Cases after this are checked against f (NULL: back to the ops' own references). */
static void fused_reference(compose_fn f) { case_compose = f; }

#define GELU5 "program=i0 c0.5 Mul c1 i0 c1.41421 Div Erf Add Mul"

static void fused_elementwise_cases(void) {
    const char *op = "kiln.FusedElementwise";
    const double at = 2e-6, rt = 1e-5;
    fused_reference(compose_elementwise);
    floats(op, GELU5, 0, true, at, rt, "gelu as 5 ops, odd size", INPUTS(XR(-5, 5, 37, 61)));
    floats(op, GELU5, 0, true, at, rt, "gelu as 5 ops, vectors", INPUTS(XR(-5, 5, 64, 96)));
    floats(op, GELU5, 0, false, at, rt, "gelu as 5 ops, 5 elements", INPUTS(XR(-5, 5, 5)));
    /* each op's generated code */
    static const struct {
        const char *prog;
        double lo, hi;
    } u[] = {
        {"i0 Relu", -2, 2}, {"i0 Sigmoid", -9, 9}, {"i0 Tanh", -3, 3}, {"i0 Exp", -6, 6},
        {"i0 Log", 0.05, 6}, {"i0 Sqrt", 0.05, 6}, {"i0 Reciprocal", 0.2, 3}, {"i0 Abs", -2, 2},
        {"i0 Neg", -2, 2}, {"i0 Erf", -3, 3}, {"i0 Floor", -5, 5}, {"i0 Ceil", -5, 5},
        {"i0 Softplus", -12, 12}, {"i0 Softsign", -5, 5}, {"i0 HardSwish", -5, 5},
        {"i0 LeakyRelu@0.2", -2, 2}, {"i0 Elu@0.5", -3, 3}, {"i0 HardSigmoid@0.3@0.6", -4, 4},
        {"i0 Clip@-0.5@0.7", -2, 2}, {"i0 Clip@0@6", -3, 9}, {"i0 Clip@-inf@0.5", -2, 2},
    };
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        char attrs[96];
        snprintf(attrs, sizeof attrs, "program=%s", u[i].prog);
        floats(op, attrs, 0, true, at, rt, u[i].prog, INPUTS(XR(u[i].lo, u[i].hi, 3, 33)));
    }
    static const struct {
        const char *op;
        double alo, ahi, blo, bhi, rt;
    } b[] = {
        {"Add", -2, 2, -2, 2, 1e-6}, {"Sub", -2, 2, -2, 2, 1e-6}, {"Mul", -2, 2, -2, 2, 1e-6},
        {"Div", -2, 2, 0.5, 2, 1e-6}, {"Pow", 0.5, 2, -2, 2, 3e-6}, {"Max", -2, 2, -2, 2, 0},
        {"Min", -2, 2, -2, 2, 0},
    };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        char attrs[64];
        snprintf(attrs, sizeof attrs, "program=i0 i1 %s", b[i].op);
        const double al = b[i].alo, ah = b[i].ahi, bl = b[i].blo, bh = b[i].bhi, r = b[i].rt;
        floats(op, attrs, 0, true, 1e-6, r, b[i].op, INPUTS(XR(al, ah, 2, 3, 5, 7), XR(bl, bh, 2, 3, 5, 7)));
        floats(op, attrs, 0, true, 1e-6, r, b[i].op, INPUTS(XR(al, ah, 3, 7), SCALAR(bl, bh)));
    }
    /* broadcast patterns: vector path with a row (inner stride 1) or channel (inner stride
     * 0) input, the step path where the inner dim is not a multiple of the vector */
    floats(op, "program=i0 i1 Add Relu", 0, true, at, rt, "bias + relu, row of 16", INPUTS(X(6, 16), X(16)));
    floats(op, "program=i0 i1 Add Relu", 0, false, at, rt, "bias + relu, row of 5", INPUTS(X(4, 5), X(5)));
    floats(op, "program=i0 i1 Add Clip@0@6", 0, true, at, rt, "channel bias + relu6, 4x4 planes",
           INPUTS(XR(-3, 9, 2, 16, 4, 4), X(16, 1, 1)));
    floats(op, "program=i0 i1 Add Clip@0@6", 0, true, at, rt, "channel bias + relu6, 5x7 planes",
           INPUTS(XR(-3, 9, 2, 3, 5, 7), X(3, 1, 1)));
    floats(op, "program=i1 i0 Sub", 0, false, at, rt, "channel first, swapped", INPUTS(X(3, 1, 1), X(2, 3, 5, 8)));
    floats(op, "program=i0 i1 Mul i2 Add Sigmoid", 0, true, at, rt, "three inputs, outer product and scalar",
           INPUTS(X(4, 1, 5), X(3, 1), SCALAR(-1, 1)));
    floats(op, "program=i0 i1 Mul i1 Add", 0, false, at, rt, "5-D general",
           INPUTS(X(2, 1, 3, 1, 8), X(1, 4, 3, 6, 1)));
    floats(op, "program=i0 i0 Mul c-1e-3 Mul i1 Add Tanh", 0, true, at, rt, "an input twice, a negative constant",
           INPUTS(X(5, 40), X(5, 40)));
    floats(op, "program=i0 HardSwish i1 Mul c2 Max", 0, false, at, rt, "hardswish gate", INPUTS(X(8, 24), X(8, 24)));
    floats(op, "program=i0", 0, false, 0, 0, "a copy", INPUTS(X(7, 9)));
    floats(op, "program=c2.5", 0, false, 0, 0, "a constant broadcast to the inputs' shape", INPUTS(X(3, 4)));
    floats(op, "program=i1 Neg", 0, false, 0, 0, "an unused input still shapes the output", INPUTS(X(3, 1), X(4)));
    floats(op, "program=i0 i1 Add", 0, false, at, rt, "scalars", INPUTS(SCALAR(-2, 2), SCALAR(-2, 2)));
    floats(op, "program=i0 Relu", 0, false, 0, 0, "empty", INPUTS(X(0, 5)));
    /* NHWC with broadcasting (the layout pass lays fused nodes out as the binary ops): an
     * inference BN -> Relu (x * s + t per channel, s and t (C,1,1) read as they are), vector
     * path (C a multiple of every dtype's vector) and step path; an SE gate (N,C,1,1); an
     * NHWC-labelled (N,1,H,W) map and (1,C,H,W) operand; a scalar */
    layout = NHWC_IN(0) | NHWC_OUT;
    floats(op, "program=i0 i1 Mul i2 Add Relu", 0, true, at, rt, "NHWC BN -> Relu, 32 channels",
           INPUTS(X(2, 32, 5, 7), X(32, 1, 1), X(32, 1, 1)));
    floats(op, "program=i0 i1 Mul i2 Add Relu", 0, true, at, rt, "NHWC BN -> Relu, 12 channels",
           INPUTS(X(3, 12, 3, 5), X(12, 1, 1), X(12, 1, 1)));
    floats(op, "program=i0 i1 Mul i2 Add Relu", 0, false, at, rt, "NHWC BN -> Relu, 5 channels, s and t 4-D",
           INPUTS(X(2, 5, 4, 3), X(1, 5, 1, 1), X(1, 5, 1, 1)));
    floats(op, "program=i0 i1 Sigmoid Mul", 0, true, at, rt, "NHWC SE gate (N,C,1,1)",
           INPUTS(X(2, 24, 4, 4), X(2, 24, 1, 1)));
    floats(op, "program=i0 i1 Add c0.5 Mul", 0, false, at, rt, "NHWC with a scalar", INPUTS(X(2, 8, 3, 3), SCALAR(-1, 1)));
    layout = NHWC_IN(0) | NHWC_IN(1) | NHWC_OUT;
    floats(op, "program=i0 i1 Mul", 0, true, at, rt, "NHWC (N,1,H,W) map", INPUTS(X(2, 16, 4, 4), X(2, 1, 4, 4)));
    floats(op, "program=i0 i1 Sub Abs", 0, true, at, rt, "NHWC (1,C,H,W) operand", INPUTS(X(3, 8, 3, 5), X(1, 8, 3, 5)));
    floats(op, "program=i0 i1 Add Relu", 0, true, at, rt, "NHWC same shapes", INPUTS(X(2, 16, 3, 5), X(2, 16, 3, 5)));
    layout = 0;
    fused_reference(NULL);
}

static void fused_gemm_cases(void) {
    const char *op = "kiln.FusedGemm";
    const double at = 2e-5, rt = 1e-4;
    fused_reference(compose_gemm);
    atol_scale = 1e-5;
    floats(op, "activation=", 0, false, at, rt, "bias epilogue", INPUTS(X(5, 7), X(7, 3), X(3)));
    floats(op, "activation=Relu", 0, false, at, rt, "relu+bias epilogue", INPUTS(X(33, 17), X(17, 45), X(45)));
    floats(op, "activation=Relu;transA=1;transB=1;alpha=0.5", 0, false, at, rt, "relu+bias, transposed, alpha",
           INPUTS(X(17, 33), X(45, 17), X(1, 45)));
    floats(op, "activation=Relu", 0, false, at, rt, "relu epilogue, no C", INPUTS(X(9, 16), X(16, 24)));
    floats(op, "activation=Relu;beta=0.0", 0, false, at, rt, "relu epilogue, beta 0", INPUTS(X(9, 16), X(16, 24), X(24)));
    floats(op, "activation=Relu", 0, false, at, rt, "relu after a full C", INPUTS(X(6, 8), X(8, 10), X(6, 10)));
    floats(op, "activation=Relu;beta=0.5", 0, false, at, rt, "relu, row C with beta 0.5",
           INPUTS(X(6, 8), X(8, 10), X(10)));
    floats(op, "activation=LeakyRelu;act_alpha=0.2", 0, false, at, rt, "leaky relu", INPUTS(X(12, 20), X(20, 16), X(16)));
    floats(op, "activation=Clip;act_min=0.0;act_max=6.0", 0, false, at, rt, "relu6",
           INPUTS(X(12, 20), XR(0, 2, 20, 16), X(16)));
    floats(op, "activation=Sigmoid", 0, false, at, rt, "sigmoid", INPUTS(X(12, 20), X(20, 16), X(16)));
    floats(op, "activation=HardSwish", 0, false, at, rt, "hardswish", INPUTS(X(12, 20), X(20, 16), X(16)));
    floats(op, "activation=HardSigmoid;act_alpha=0.25;act_beta=0.4", 0, false, at, rt, "hardsigmoid",
           INPUTS(X(12, 20), X(20, 16), X(16)));
    floats(op, "activation=Tanh;transB=1", 0, false, at, rt, "tanh", INPUTS(X(12, 20), X(16, 20), X(16)));
    /* first run on a GPU with this test: the bias epilogue, then Silu / Gelu in place */
    floats(op, "activation=Silu", 0, false, at, rt, "silu, bias epilogue", INPUTS(X(12, 20), X(20, 16), X(16)));
    floats(op, "activation=Silu;beta=0.5", 0, false, at, rt, "silu, row C with beta 0.5",
           INPUTS(X(6, 8), X(8, 10), X(10)));
    floats(op, "activation=Gelu;transB=1", 0, false, at, rt, "gelu, bias epilogue", INPUTS(X(12, 20), X(16, 20), X(16)));
    floats(op, "activation=GeluTanh", 0, false, at, rt, "gelu tanh, no C", INPUTS(X(9, 16), X(16, 24)));
    floats(op, "activation=Relu;transA=1", 0, false, 5e-5, rt, "larger", INPUTS(X(96, 64), X(96, 80), X(80)));
    atol_scale = 0;
    fused_reference(NULL);
}

static void fused_node(kiln_node *node, const char *program, int n_in) {
    memset(node, 0, sizeof *node);
    node->op_type = (char *)"FusedElementwise";
    node->name = (char *)"probe";
    node->domain = (char *)"kiln";
    node->op = kiln_op_index_domain("kiln", "FusedElementwise");
    node->opset = 1;
    node->n_in = n_in;
    node->n_out = 1;
    char attrs[96];
    snprintf(attrs, sizeof attrs, "program=%s", program);
    if (program[0] && kiln_attrs_parse(ctx, attrs, &node->attrs, &node->n_attrs)) node->n_attrs = 0;
}

static void free_node(kiln_node *node) {
    for (int k = 0; k < node->n_attrs; k++) kiln_attr_clear(&node->attrs[k]);
    free(node->attrs);
}

/* Programs the CUDA side must reject by name, before any compilation; and the 64-bit
 * index arithmetic of outputs of 2^31 elements or more, compiled (shapes only). */
static void fused_static_checks(void) {
    static const char *const bad[] = {
        "i0 Add", "i0 i0", "i2 Relu", "i0 Foo", "i0 Relu@1", "i0 LeakyRelu@1@2", "i0 LeakyRelu", "i0 Clip@0",
        "i0 Clip@0@", "i0 c", "i0 cx Mul", "",
    };
    const int64_t d[2] = {2, 3};
    kiln_tensor x = {.dtype = KILN_F32, .ndim = 2}, y = x;
    memcpy(x.dims, d, sizeof d);
    memcpy(y.dims, d, sizeof d);
    kiln_tensor *in[2] = {&x, &x}, *out[1] = {&y};
    kiln_node node;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char label[160];
        fused_node(&node, bad[i], 2);
        kiln_op_ctx c = {.kctx = ctx, .node = &node, .n_in = 2, .in = in, .n_out = 1, .out = out};
        const kiln_status st = kiln_cuda_supports(&c);
        snprintf(label, sizeof label, "kiln.FusedElementwise program '%s' is rejected", bad[i]);
        check(st == KILN_ERR_UNSUPPORTED && strstr(kiln_context_message(ctx), "program"), label,
              kiln_context_message(ctx));
        free_node(&node);
    }
    const int64_t big[3] = {3, (int64_t)1 << 30, 2}, col[3] = {3, 1, 1};
    kiln_tensor a = {.dtype = KILN_BF16, .ndim = 3}, b = a, z = a;
    memcpy(a.dims, big, sizeof big);
    memcpy(z.dims, big, sizeof big);
    memcpy(b.dims, col, sizeof col);
    kiln_tensor *in2[2] = {&a, &b}, *out2[1] = {&z};
    fused_node(&node, "i0 i1 Mul Sigmoid", 2);
    kiln_op_ctx c = {.kctx = ctx, .node = &node, .n_in = 2, .in = in2, .n_out = 1, .out = out2};
    char *src = NULL;
    bool ok = kiln_cuda_supports(&c) == KILN_OK && gpu_generated_compiles(ctx, &c);
    if (ok && kiln_cuda_fused_source(&c, &src, &(int){0}, &(const char *const *){NULL}) == KILN_OK)
        ok = strstr(src, "typedef long long IDX;") != NULL;
    check(ok, "kiln.FusedElementwise with 6.4e9 outputs generates 64-bit indexing that compiles",
          kiln_context_message(ctx));
    free(src);
    free_node(&node);
}

/* --------------------------------------------------------------- layouts */

/* kiln.ToNHWC with a dtype change, compared exactly (the op files' NHWC cases are swept by
 * test_backend_ops in every layout the kernels take). */
static void nhwc_cases(void) {
    /* ToNHWC with zero channels and a dtype change (a network's input: f32 NCHW with 3
     * channels -> f16 NHWC with 8), compared exactly: the conversion rounds once, as
     * Cast does. One thread per pixel with 16-, 8- and 4-byte vectors or elements (the
     * misaligned runs), and the tiles past 64 bytes a pixel. */
    exact = true;
    layout = NHWC_OUT;
    const struct {
        kiln_dtype from, to;
        int zeros;
        int64_t n, c, h, w;
        const char *label;
    } conv_cases[] = {
        {KILN_F32, KILN_F16, 5, 4, 3, 17, 19, "stem, 3 to 8 channels"},
        {KILN_F32, KILN_BF16, 5, 2, 3, 9, 10, "stem, 3 to 8 channels"},
        {KILN_F32, KILN_F16, 0, 2, 3, 5, 7, "3 channels"},
        {KILN_F16, KILN_F32, 0, 2, 3, 5, 7, "3 channels, 4-byte pixels"},
        {KILN_BF16, KILN_F16, 1, 2, 3, 6, 5, "3 to 4 channels, 8-byte pixels"},
        {KILN_F16, KILN_BF16, 13, 1, 3, 4, 9, "3 to 16 channels, two vectors"},
        {KILN_F32, KILN_F16, 8, 2, 40, 33, 35, "40 to 48 channels, tiles"},
        {KILN_BF16, KILN_F32, 3, 1, 29, 6, 40, "29 to 32 channels, tiles"},
    };
    for (size_t k = 0; k < sizeof conv_cases / sizeof conv_cases[0]; k++) {
        char attrs[64], label[96];
        snprintf(attrs, sizeof attrs, "to=%d;zero_channels=%d", (int)conv_cases[k].to, conv_cases[k].zeros);
        snprintf(label, sizeof label, "[%s] %s", attrs, conv_cases[k].label);
        for (int mis = 0; mis < 2; mis++)
            run_case("kiln.ToNHWC", attrs, 0, conv_cases[k].from, mis, 0, 0, label,
                     INPUTS(XR(-300, 300, conv_cases[k].n, conv_cases[k].c, conv_cases[k].h, conv_cases[k].w)));
    }
    /* the rounding cases of Cast (ties, overflow to inf, -0) through the conversion */
    run_case("kiln.ToNHWC", "to=10;zero_channels=7", 0, KILN_F32, false, 0, 0, "[to f16] Cast's special values",
             INPUTS(XV(0, CAST_SPECIAL, 1, 1, 1, (int64_t)(sizeof CAST_SPECIAL / sizeof(double)))));
    run_case("kiln.ToNHWC", "to=16;zero_channels=7", 0, KILN_F32, false, 0, 0, "[to bf16] Cast's special values",
             INPUTS(XV(0, CAST_SPECIAL, 1, 1, 1, (int64_t)(sizeof CAST_SPECIAL / sizeof(double)))));
    exact = false;
    layout = 0;
}

/* ---------------------------------------------------------------- FusedConv */

/* kiln.FusedConv as Conv, Add(Z) and its activation, in f32, rounded once to dt. */
static kiln_status compose_conv(const kiln_node *node, int n_in, kiln_tensor **in, kiln_dtype dt, kiln_tensor **out) {
    static const char *const conv_attrs[] = {"kernel_shape", "strides", "pads", "auto_pad", "dilations", "group"};
    kiln_tensor *f[4] = {0}, *y = NULL, *t = NULL;
    kiln_status st = KILN_OK;
    *out = NULL;
    for (int i = 0; i < n_in && i < 4; i++)
        if (in[i] && !(f[i] = as_dtype(in[i], KILN_F32))) st = KILN_ERR_OUT_OF_MEMORY;
    /* Conv's attributes as text, from the node's */
    char attrs[512] = "";
    size_t k = 0;
    for (size_t a = 0; a < sizeof conv_attrs / sizeof conv_attrs[0] && k < sizeof attrs; a++) {
        const kiln_attr *at = kiln_node_attr(node, conv_attrs[a]);
        if (!at) continue;
        k += (size_t)snprintf(attrs + k, sizeof attrs - k, "%s%s=", k ? ";" : "", at->name);
        if (at->type == KILN_ATTR_STRING) k += (size_t)snprintf(attrs + k, sizeof attrs - k, "%s", at->s);
        else if (at->type == KILN_ATTR_INT) k += (size_t)snprintf(attrs + k, sizeof attrs - k, "%lld", (long long)at->i);
        else
            for (int j = 0; j < at->n && k < sizeof attrs; j++)
                k += (size_t)snprintf(attrs + k, sizeof attrs - k, "%s%lld%s", j ? "," : "[", (long long)at->ints[j],
                                      j == at->n - 1 ? "]" : "");
    }
    if (!st) st = eval_op("Conv", attrs, f[2] ? 3 : 2, f, &y);
    if (!st && f[3]) {
        kiln_tensor *ain[2] = {y, f[3]};
        st = eval_op("Add", "", 2, ain, &t);
        kiln_tensor_free(y);
        y = t;
    }
    const char *act = kiln_attr_string(node, "activation", "");
    const bool clip = strcmp(act, "Clip") == 0;
    const char *an = clip ? "act_min" : "alpha", *bn = clip ? "act_max" : "beta";
    t = NULL;
    if (!st)
        st = eval_act(act, kiln_node_attr(node, an) != NULL, kiln_attr_float(node, an, 0),
                      kiln_node_attr(node, bn) != NULL, kiln_attr_float(node, bn, 0), y, &t);
    else
        kiln_tensor_free(y);
    if (!st && !(*out = as_dtype(t, dt))) st = KILN_ERR_OUT_OF_MEMORY;
    kiln_tensor_free(t);
    for (int i = 0; i < 4; i++) kiln_tensor_free(f[i]);
    return st;
}

/* Every activation, with and without B and Z, both layouts; then how many cases cuDNN ran
 * fused (a note: that is speed, not correctness). */
static void fused_conv_cases(void) {
    const double at = 2e-5, rt = 1e-4;
    static const struct {
        const char *attrs, *label;
        bool bias, z;
    } v[] = {
        {"pads=[1,1,1,1];activation=Relu", "relu, bias", true, false},
        {"pads=[1,1,1,1];activation=Relu", "relu, bias, residual", true, true},
        {"pads=[1,1,1,1]", "no activation, bias", true, false},
        {"pads=[1,1,1,1]", "no activation, bias, residual", true, true},
        {"pads=[1,1,1,1]", "no activation, residual, no bias", false, true},
        {"pads=[1,1,1,1];activation=Relu", "relu, no bias", false, false},
        {"pads=[1,1,1,1];activation=LeakyRelu;alpha=0.1", "leaky relu, bias, residual", true, true},
        {"pads=[1,1,1,1];activation=Clip;act_min=0.0;act_max=6.0", "relu6, bias", true, false},
        {"pads=[1,1,1,1];activation=Clip;act_min=-0.5;act_max=0.5", "clip, bias, residual", true, true},
        {"pads=[1,1,1,1];activation=Sigmoid", "sigmoid, bias", true, false},
        {"pads=[1,1,1,1];activation=HardSwish", "hardswish, bias, residual", true, true},
        {"pads=[1,1,1,1];activation=HardSigmoid;alpha=0.3;beta=0.4", "hardsigmoid, bias", true, false},
        {"pads=[1,1,1,1];activation=Tanh", "tanh, bias", true, false},
        /* first run on a GPU with this test: Silu / Gelu after cuDNN or cuBLASLt
         * (conv_epilogue_kernel, or unary_kernel in place) */
        {"pads=[1,1,1,1];activation=Silu", "silu, bias", true, false},
        {"pads=[1,1,1,1];activation=Silu", "silu, no bias, residual", false, true},
        {"pads=[1,1,1,1];activation=Gelu", "gelu, bias, residual", true, true},
        {"pads=[1,1,1,1];activation=GeluTanh", "gelu tanh, bias", true, false},
    };
    fused_reference(compose_conv);
    atol_scale = 1e-5;
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        layout = nhwc ? NHWC_IN(0) | NHWC_IN(1) | NHWC_IN(3) | NHWC_OUT : 0;
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
            const inp spec[4] = {X(2, 8, 9, 9), X(16, 8, 3, 3), X(16), X(2, 16, 9, 9)};
            inp use[4];
            memcpy(use, spec, sizeof use);
            if (!v[i].bias) use[2] = (inp)NONE;
            floats("kiln.FusedConv", v[i].attrs, 0, false, at, rt, v[i].label, use, v[i].z ? 4 : 3);
            if (!nhwc) continue;
            /* the same as a 1x1 stride-1 NHWC convolution: a cuBLASLt product with the
             * bias, Relu and residual in its epilogue (conv-gemm) */
            const char *rest = strstr(v[i].attrs, "pads=[1,1,1,1]") + strlen("pads=[1,1,1,1]");
            char attrs1[200], label1[160];
            snprintf(attrs1, sizeof attrs1, "%s", *rest == ';' ? rest + 1 : rest);
            snprintf(label1, sizeof label1, "1x1, %s", v[i].label);
            const inp spec1[4] = {X(2, 24, 7, 5), X(16, 24, 1, 1), X(16), X(2, 16, 7, 5)};
            memcpy(use, spec1, sizeof use);
            if (!v[i].bias) use[2] = (inp)NONE;
            floats("kiln.FusedConv", attrs1, 0, false, at, rt, label1, use, v[i].z ? 4 : 3);
        }
        floats("kiln.FusedConv", "strides=[2,2];activation=Relu", 0, false, at, rt, "1x1 stride 2 projection",
               INPUTS(X(2, 16, 8, 8), X(32, 16, 1, 1), X(32)));
        floats("kiln.FusedConv", "group=16;pads=[1,1,1,1];activation=Clip;act_min=0.0;act_max=6.0", 0, false, at, rt,
               "depthwise relu6", INPUTS(X(2, 16, 10, 10), X(16, 1, 3, 3), X(16)));
        floats("kiln.FusedConv", "pads=[0,1,2,1];activation=Relu", 0, false, at, rt, "asymmetric pads, residual",
               INPUTS(X(1, 4, 8, 8), X(8, 4, 3, 3), X(8), X(1, 8, 8, 8)));
        floats("kiln.FusedConv", "pads=[1,1,1,1]", 0, false, 5e-5, rt, "wider, no activation, residual",
               INPUTS(X(2, 32, 14, 14), X(64, 32, 3, 3), X(64), X(2, 64, 14, 14)));
        /* more 8-value vectors (1.15 M) than one sweep of the epilogue pass's grid (at most
         * 32 blocks of 256 threads a SM), so its threads step the NHWC channel of their
         * vectors across the wrap of 1000 channels */
        if (nhwc)
            floats("kiln.FusedConv", "pads=[1,1,1,1];activation=Silu", 0, false, 5e-5, rt,
                   "grid-stride epilogue, silu, bias, 16 -> 1000", INPUTS(X(1, 16, 96, 96), X(1000, 16, 3, 3), X(1000)));
    }
    layout = 0;
    floats("kiln.FusedConv", "pads=[2,2];activation=Relu", 0, false, at, rt, "1-D, residual",
           INPUTS(X(2, 3, 20), X(4, 3, 5), X(4), X(2, 4, 20)));
    atol_scale = 0;
    fused_reference(NULL);
    if (cu) {
        kiln_cuda_stats st;
        kiln_cuda_get_stats(cu, &st);
        printf("note FusedConv: %d cases ran fused in cuDNN (cudnnConvolutionBiasActivationForward), %d as "
               "convolution + epilogue, %d convolutions as cuBLASLt products%s%s\n",
               st.fused_calls, st.fused_split, st.conv_gemm_calls,
               st.fused_refused[0] ? "; cuDNN last refused a fused call: " : "", st.fused_refused);
    }
}

/* ------------------------------------------------------------ other checks */

static void check(bool ok, const char *label, const char *detail) {
    if (ok) {
        printf("ok   %s\n", label);
        passed++;
    } else {
        fail(label, "%s", detail);
    }
}

/* A Gather index out of range is found on the device and reported by the next sync. */
static void gather_bad_index(void) {
    const int op = kiln_op_index("Gather");
    if (op < 0) {
        printf("SKIP gather out of range: no CPU Gather in this build\n");
        skipped++;
        return;
    }
    kiln_cuda_arena_reset(cu);
    kiln_node node;
    memset(&node, 0, sizeof node);
    node.op_type = (char *)"Gather";
    node.name = (char *)"bad index";
    node.domain = (char *)"";
    node.op = op;
    node.opset = 13;
    node.n_in = 2;
    node.n_out = 1;
    const int64_t xd[2] = {4, 3}, id[1] = {2}, yd[2] = {2, 3};
    const int64_t idx[2] = {1, 7};
    kiln_tensor x = {.dtype = KILN_F32, .ndim = 2}, ix = {.dtype = KILN_I64, .ndim = 1},
                y = {.dtype = KILN_F32, .ndim = 2};
    memcpy(x.dims, xd, sizeof xd);
    memcpy(ix.dims, id, sizeof id);
    memcpy(y.dims, yd, sizeof yd);
    kiln_status st = kiln_cuda_arena_alloc(cu, 48, &x.data);
    if (!st) st = kiln_cuda_arena_alloc(cu, 16, &ix.data);
    if (!st) st = kiln_cuda_arena_alloc(cu, 24, &y.data);
    if (!st) st = kiln_cuda_upload(cu, ix.data, idx, sizeof idx);
    if (!st) st = kiln_cuda_fill_bytes(cu, x.data, 0, 48);
    kiln_tensor *in[2] = {&x, &ix}, *out = &y;
    kiln_op_ctx c = {.kctx = ctx, .node = &node, .n_in = 2, .in = in, .n_out = 1, .out = &out};
    if (!st) st = kiln_cuda_run(cu, &c);
    if (st) {
        fail("gather out of range", "setup: %s", kiln_context_message(ctx));
        return;
    }
    st = kiln_cuda_sync(cu);
    check(st == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_context_message(ctx), "7"),
          "gather out of range is reported by sync", kiln_context_message(ctx));
    check(kiln_cuda_sync(cu) == KILN_OK, "the error flag is cleared after it is reported",
          kiln_context_message(ctx));
}

/* A loss's class target out of range is found on the device and reported by sync. */
/* NegativeLogLikelihoodLoss, or the fused kiln.LogSoftmaxNLL (domain "kiln"), with a
 * target of 5 for 3 classes. */
static void nll_bad_target(const char *op, const char *domain) {
    kiln_cuda_arena_reset(cu);
    kiln_node node;
    memset(&node, 0, sizeof node);
    node.op_type = (char *)op;
    node.name = (char *)"bad target";
    node.domain = (char *)domain;
    node.op = kiln_op_index_domain(domain, op);
    node.opset = 13;
    node.n_in = 2;
    node.n_out = 1;
    if (node.op < 0) {
        printf("SKIP nll target out of range: no CPU %s in this build\n", op);
        skipped++;
        return;
    }
    const int64_t xd[2] = {2, 3}, td[1] = {2};
    const int64_t tv[2] = {1, 5};
    kiln_tensor x = {.dtype = KILN_F32, .ndim = 2}, t = {.dtype = KILN_I64, .ndim = 1}, y = {.dtype = KILN_F32};
    memcpy(x.dims, xd, sizeof xd);
    memcpy(t.dims, td, sizeof td);
    kiln_status st = kiln_cuda_arena_alloc(cu, 24, &x.data);
    if (!st) st = kiln_cuda_arena_alloc(cu, 16, &t.data);
    if (!st) st = kiln_cuda_arena_alloc(cu, 4, &y.data);
    if (!st) st = kiln_cuda_upload(cu, t.data, tv, sizeof tv);
    if (!st) st = kiln_cuda_fill_bytes(cu, x.data, 0, 24);
    kiln_tensor *in[2] = {&x, &t}, *out = &y;
    kiln_op_ctx c = {.kctx = ctx, .node = &node, .n_in = 2, .in = in, .n_out = 1, .out = &out};
    if (!st) st = kiln_cuda_run(cu, &c);
    if (st) {
        fail("nll target out of range", "setup: %s", kiln_context_message(ctx));
        return;
    }
    st = kiln_cuda_sync(cu);
    char lab[128];
    snprintf(lab, sizeof lab, "a%s NLL target out of range is reported by sync", domain[0] ? " fused" : "n");
    check(st == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_context_message(ctx), "5"), lab, kiln_context_message(ctx));
}

/* ------------------------------------------------------------ the optimizer */

/* Host and device copies of n random parameters for optimizer tests. */
typedef struct opt_fixture {
    int n;
    kiln_param ps[4];
    float *grads[4];           /* host f32 gradients (unscaled) */
    kiln_cuda_optim_entry e[4]; /* device pointers */
    kiln_cuda_optim_entry *table; /* device */
    int64_t chunks;
    kiln_cuda_train_state *state; /* device */
    kiln_dtype gdt;
} opt_fixture;

static void fixture_free(opt_fixture *f) {
    for (int k = 0; k < f->n; k++) {
        kiln_tensor_free(f->ps[k].value);
        free(f->ps[k].state[0]);
        free(f->ps[k].state[1]);
        free(f->grads[k]);
    }
    memset(f, 0, sizeof *f);
}

/* Random weights, gradients (times grad_scale, in dtype gdt on the device) and optimizer
 * state on both sides; the second tensor starts 4 bytes off 16-byte alignment (the scalar
 * path), the others are aligned; sizes leave partial chunks and groups of 4. */
static kiln_status fixture_make(opt_fixture *f, const kiln_train_options *o, kiln_dtype gdt, float grad_scale,
                                bool copies) {
    static const int64_t sizes[4] = {1, 4099, 10, 70001};
    memset(f, 0, sizeof *f);
    f->n = 4;
    f->gdt = gdt;
    kiln_cuda_arena_reset(cu);
    kiln_status st = KILN_OK;
    for (int k = 0; k < f->n && !st; k++) {
        kiln_param *p = &f->ps[k];
        const int64_t n = sizes[k];
        p->numel = n;
        p->value = kt_rand(KILN_F32, 1, &n, -1, 1, 300 + (uint64_t)k);
        kiln_tensor *g = kt_rand(gdt, 1, &n, -1, 1, 310 + (uint64_t)k);
        f->grads[k] = malloc(sizeof(float) * (size_t)n);
        p->state[0] = malloc(sizeof(float) * (size_t)n);
        p->state[1] = malloc(sizeof(float) * (size_t)n);
        if (!p->value || !g || !f->grads[k] || !p->state[0] || !p->state[1]) {
            kiln_tensor_free(g);
            return KILN_ERR_OUT_OF_MEMORY;
        }
        /* gradients as the device holds them (rounded to gdt, times the scale), and the
         * unscaled f32 values the CPU update sees */
        for (int64_t i = 0; i < n; i++) {
            const double v = kiln_get_f64(g, i);
            kiln_set_f64(g, i, v * grad_scale);
            f->grads[k][i] = (float)(kiln_get_f64(g, i) / grad_scale);
        }
        p->grad = f->grads[k];
        /* non-negative states (they are running means of squares for Adam / Adadelta) */
        for (int64_t i = 0; i < n; i++) {
            p->state[0][i] = o->optimizer == KILN_OPTIM_SGD ? (float)(0.1 * sin((double)i)) : (float)(0.01 * (1 + sin((double)i)));
            p->state[1][i] = (float)(0.02 * (1 + cos((double)i)));
        }
        const size_t fb = sizeof(float) * (size_t)n, gb = kiln_tensor_nbytes(g), off = k == 1 ? 4 : 0;
        void *pw = NULL, *pg = NULL, *p0 = NULL, *p1 = NULL, *pc = NULL;
        if (!st) st = kiln_cuda_arena_alloc(cu, fb + 16, &pw);
        if (!st) st = kiln_cuda_arena_alloc(cu, gb + 16, &pg);
        if (!st) st = kiln_cuda_arena_alloc(cu, fb + 16, &p0);
        if (!st) st = kiln_cuda_arena_alloc(cu, fb + 16, &p1);
        if (!st && copies) st = kiln_cuda_arena_alloc(cu, fb + 16, &pc);
        if (!st) {
            f->e[k].param = (float *)((char *)pw + off);
            f->e[k].grad = (char *)pg + (off ? kiln_dtype_size(gdt) : 0);
            f->e[k].state0 = (float *)((char *)p0 + off);
            f->e[k].state1 = (float *)((char *)p1 + off);
            f->e[k].copy = pc;
            f->e[k].n = n;
            st = kiln_cuda_upload(cu, f->e[k].param, p->value->data, fb);
        }
        if (!st) st = kiln_cuda_upload(cu, f->e[k].grad, g->data, gb);
        if (!st) st = kiln_cuda_upload(cu, f->e[k].state0, p->state[0], fb);
        if (!st) st = kiln_cuda_upload(cu, f->e[k].state1, p->state[1], fb);
        kiln_tensor_free(g);
        /* the optimizer keeps fewer states: the device must not need them */
        if (o->optimizer == KILN_OPTIM_SGD) {
            f->e[k].state1 = NULL;
            if (o->momentum == 0) f->e[k].state0 = NULL;
        }
    }
    f->chunks = kiln_cuda_optim_table_prepare(f->e, f->n);
    void *t = NULL, *s = NULL;
    if (!st) st = kiln_cuda_arena_alloc(cu, sizeof f->e, &t);
    if (!st) st = kiln_cuda_arena_alloc(cu, sizeof(kiln_cuda_train_state), &s);
    if (!st) st = kiln_cuda_upload(cu, t, f->e, sizeof f->e);
    f->table = t;
    f->state = s;
    if (!st) st = kiln_cuda_train_state_init(cu, o, grad_scale, f->state);
    return st;
}

/* Largest |gpu - cpu| / (1e-9 + |cpu|) over weights and states; sets *bad when over tol. */
static double fixture_compare(opt_fixture *f, const kiln_train_options *o, double tol, kiln_dtype copy_dt,
                              bool *bad, const char **what) {
    double worst = 0;
    *what = "";
    for (int k = 0; k < f->n; k++) {
        const kiln_param *p = &f->ps[k];
        const size_t fb = sizeof(float) * (size_t)p->numel;
        float *buf = malloc(fb);
        if (!buf) {
            *bad = true;
            return INFINITY;
        }
        const float *want[3] = {p->value->data, p->state[0], p->state[1]};
        const void *dev[3] = {f->e[k].param, f->e[k].state0, f->e[k].state1};
        static const char *names[3] = {"weights", "state0", "state1"};
        for (int a = 0; a < 3; a++) {
            if (!dev[a]) continue;
            if (kiln_cuda_download(cu, buf, dev[a], fb)) {
                *bad = true;
                *what = "download";
                break;
            }
            for (int64_t i = 0; i < p->numel; i++) {
                const double err = fabs((double)buf[i] - want[a][i]) / (1e-9 + fabs(want[a][i]));
                if (!(err <= worst)) {
                    worst = err;
                    if (!(err <= tol)) *what = names[a];
                }
            }
        }
        if (copy_dt == KILN_F16 && f->e[k].copy) {
            uint16_t *h = malloc(sizeof(uint16_t) * (size_t)p->numel);
            if (!h || kiln_cuda_download(cu, h, f->e[k].copy, sizeof(uint16_t) * (size_t)p->numel)) *bad = true;
            for (int64_t i = 0; h && i < p->numel; i++)
                if (h[i] != kiln_f32_to_f16(((const float *)p->value->data)[i])) {
                    *bad = true;
                    *what = "f16 weight copy";
                    break;
                }
            free(h);
        }
        free(buf);
    }
    (void)o;
    if (!(worst <= tol)) *bad = true;
    return worst;
}

static void optimizer_checks(void) {
    static const struct {
        const char *label;
        kiln_optimizer opt;
        float lr, momentum, wd;
        int nesterov;
        kiln_schedule schedule;
    } cfg[] = {
        {"SGD", KILN_OPTIM_SGD, 0.1f, 0, 0, 0, KILN_SCHEDULE_CONSTANT},
        {"SGD momentum, weight decay, step schedule", KILN_OPTIM_SGD, 0.1f, 0.9f, 0.01f, 0, KILN_SCHEDULE_STEP},
        {"SGD Nesterov", KILN_OPTIM_SGD, 0.05f, 0.9f, 0, 1, KILN_SCHEDULE_CONSTANT},
        {"Adam, weight decay", KILN_OPTIM_ADAM, 1e-3f, 0, 0.01f, 0, KILN_SCHEDULE_CONSTANT},
        {"AdamW, cosine schedule", KILN_OPTIM_ADAMW, 1e-3f, 0, 0.05f, 0, KILN_SCHEDULE_COSINE},
        {"Adadelta (mnist)", KILN_OPTIM_ADADELTA, 1.0f, 0, 0, 0, KILN_SCHEDULE_STEP},
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++)
        for (int variant = 0; variant < 4; variant++) {
            /* variant & 1: f16 gradients scaled by 1024, unscaled by the optimizer, f16 weight
             * copies; variant & 2: the step ended by the update's last block (a tail with the
             * schedule, the Dropout seed and a batch position) instead of kiln_cuda_train_step_end */
            const bool fused = (variant & 2) != 0;
            const int half = variant & 1;
            kiln_train_options o = {0};
            o.optimizer = cfg[c].opt;
            o.lr = cfg[c].lr;
            o.momentum = cfg[c].momentum;
            o.weight_decay = cfg[c].wd;
            o.nesterov = cfg[c].nesterov;
            o.beta1 = 0.9f;
            o.beta2 = 0.999f;
            o.eps = o.optimizer == KILN_OPTIM_ADADELTA ? 1e-6f : 1e-8f;
            o.rho = 0.9f;
            o.schedule = cfg[c].schedule;
            o.step_size = 2;
            o.gamma = 0.5f;
            o.total_steps = 5;
            o.warmup_steps = c == 0 ? 2 : 0;
            char label[240];
            snprintf(label, sizeof label, "optimizer %s%s%s: 3 steps match kiln_optimizer_update", cfg[c].label,
                     half ? " (f16 gradients x1024, unscaled in the update; f16 weight copies)" : "",
                     fused ? " (step ended by the update's last block)" : "");
            opt_fixture f;
            const kiln_dtype gdt = half ? KILN_F16 : KILN_F32;
            const float scale = half ? 1024.f : 1.f;
            kiln_status st = fixture_make(&f, &o, gdt, scale, half == 1);
            /* the tail's seed counter and batch position, from values of their own */
            const uint64_t base = 0x9E3779B97F4A7C15ull * (c + 5);
            const int64_t counter0 = 7, pos0 = 100, by = 64;
            int64_t *dev = NULL;
            if (!st) st = kiln_cuda_arena_alloc(cu, 2 * sizeof(int64_t), (void **)&dev);
            if (!st) st = kiln_cuda_upload(cu, &dev[0], &counter0, sizeof counter0);
            if (!st) st = kiln_cuda_upload(cu, &dev[1], &pos0, sizeof pos0);
            const kiln_cuda_step_tail tail = {.schedule = &o, .rng_counter = dev ? &dev[0] : NULL, .rng_base = base,
                                              .pos = dev ? &dev[1] : NULL, .pos_by = by};
            for (int64_t step = 0; step < 3 && !st; step++) {
                kiln_optimizer_update(&o, step, kiln_trainer_lr_at(&o, step), f.n, f.ps);
                st = kiln_cuda_optimizer_step(cu, &o, f.table, f.n, f.chunks, gdt, half ? KILN_F16 : KILN_DTYPE_UNDEFINED,
                                              half == 1, f.state, fused ? &tail : NULL);
                if (!st && !fused) st = kiln_cuda_train_step_end(cu, NULL, &o, f.state);
            }
            kiln_cuda_train_state s = {0};
            int64_t counter = 0, pos = 0;
            uint64_t seed = 0;
            if (!st) st = kiln_cuda_download(cu, &s, f.state, sizeof s);
            if (!st) st = kiln_cuda_download(cu, &counter, &dev[0], sizeof counter);
            if (!st) st = kiln_cuda_download(cu, &pos, &dev[1], sizeof pos);
            if (!st) st = kiln_cuda_download(cu, &seed, kiln_cuda_rng_seed(cu), sizeof seed);
            if (!st) st = kiln_cuda_sync(cu);
            if (st) {
                fail(label, "%s", kiln_context_message(ctx));
                fixture_free(&f);
                continue;
            }
            bool bad = false;
            const char *what = "";
            const double worst = fixture_compare(&f, &o, 1e-6, half ? KILN_F16 : KILN_DTYPE_UNDEFINED, &bad, &what);
            char detail[320];
            snprintf(detail, sizeof detail,
                     "max relative difference %.3g (%s); step %lld skipped %lld, lr %g (CPU lr %g), arrived %u; "
                     "seed base+%lld, counter %lld, pos %lld",
                     worst, what, (long long)s.step, (long long)s.skipped, s.lr, kiln_trainer_lr_at(&o, 3), s.arrived,
                     (long long)(seed - base), (long long)counter, (long long)pos);
            bad |= s.step != 3 || s.skipped != 0 || s.found_inf != 0 || s.arrived != 0 || s.lr != kiln_trainer_lr_at(&o, 3);
            /* the tail drew the seeds of counters 7, 8, 9 and moved 3 batches; without it
             * neither moves */
            if (fused) bad |= seed != base + 9 || counter != counter0 + 3 || pos != pos0 + 3 * by;
            else bad |= counter != counter0 || pos != pos0;
            char full[400];
            snprintf(full, sizeof full, "%s (max relative difference %.3g)", label, worst);
            check(!bad, full, detail);
            fixture_free(&f);
        }
}

/* A table of more than 32 entries: the entry of a chunk is looked up 32 entries at a time
 * (find_entry in optim.cu), so the later groups, an entry of no elements and chunks that
 * fall in the last entry of a group are all reached. SGD with momentum, 2 steps, with the
 * step ended by the update's last block, against kiln_optimizer_update. */
static void optimizer_many_checks(void) {
    enum { N = 70 };
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD, .lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
    kiln_param ps[N];
    kiln_cuda_optim_entry e[N];
    float *grads[N];
    memset(ps, 0, sizeof ps);
    memset(e, 0, sizeof e);
    memset(grads, 0, sizeof grads);
    kiln_cuda_arena_reset(cu);
    kiln_status st = KILN_OK;
    for (int k = 0; k < N && !st; k++) {
        /* entry 33 is empty; 31 and 63 (the last of their groups) span several chunks */
        const int64_t n = k == 33 ? 0 : k == 31 || k == 63 ? 9000 : 1 + (k * 997) % 5000;
        const int64_t dn = n ? n : 1;
        ps[k].numel = n;
        ps[k].value = kt_rand(KILN_F32, 1, &dn, -1, 1, 400 + (uint64_t)k);
        kiln_tensor *g = kt_rand(KILN_F32, 1, &dn, -1, 1, 500 + (uint64_t)k);
        ps[k].state[0] = calloc((size_t)dn, sizeof(float));
        grads[k] = g ? malloc(sizeof(float) * (size_t)dn) : NULL;
        if (!ps[k].value || !g || !ps[k].state[0] || !grads[k]) {
            kiln_tensor_free(g);
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        memcpy(grads[k], g->data, sizeof(float) * (size_t)dn);
        kiln_tensor_free(g);
        ps[k].grad = grads[k];
        const size_t fb = sizeof(float) * (size_t)dn;
        void *pw = NULL, *pg = NULL, *p0 = NULL;
        st = kiln_cuda_arena_alloc(cu, fb, &pw);
        if (!st) st = kiln_cuda_arena_alloc(cu, fb, &pg);
        if (!st) st = kiln_cuda_arena_alloc(cu, fb, &p0);
        if (!st) st = kiln_cuda_upload(cu, pw, ps[k].value->data, fb);
        if (!st) st = kiln_cuda_upload(cu, pg, grads[k], fb);
        if (!st) st = kiln_cuda_upload(cu, p0, ps[k].state[0], fb);
        e[k] = (kiln_cuda_optim_entry){.param = pw, .grad = pg, .state0 = p0, .n = n};
    }
    const int64_t chunks = kiln_cuda_optim_table_prepare(e, N);
    void *table = NULL, *state = NULL;
    if (!st) st = kiln_cuda_arena_alloc(cu, sizeof e, &table);
    if (!st) st = kiln_cuda_arena_alloc(cu, sizeof(kiln_cuda_train_state), &state);
    if (!st) st = kiln_cuda_upload(cu, table, e, sizeof e);
    if (!st) st = kiln_cuda_train_state_init(cu, &o, 1.f, state);
    const kiln_cuda_step_tail tail = {.schedule = &o};
    for (int64_t step = 0; step < 2 && !st; step++) {
        kiln_optimizer_update(&o, step, kiln_trainer_lr_at(&o, step), N, ps);
        st = kiln_cuda_optimizer_step(cu, &o, table, N, chunks, KILN_F32, KILN_DTYPE_UNDEFINED, false, state, &tail);
    }
    kiln_cuda_train_state s = {0};
    if (!st) st = kiln_cuda_download(cu, &s, state, sizeof s);
    double worst = 0;
    int where = -1;
    for (int k = 0; k < N && !st; k++) {
        if (!ps[k].numel) continue;
        const size_t fb = sizeof(float) * (size_t)ps[k].numel;
        float *w = malloc(fb), *m = malloc(fb);
        if (!w || !m) st = KILN_ERR_OUT_OF_MEMORY;
        if (!st) st = kiln_cuda_download(cu, w, e[k].param, fb);
        if (!st) st = kiln_cuda_download(cu, m, e[k].state0, fb);
        for (int64_t i = 0; !st && i < ps[k].numel; i++) {
            const float want[2] = {((const float *)ps[k].value->data)[i], ps[k].state[0][i]}, got[2] = {w[i], m[i]};
            for (int a = 0; a < 2; a++) {
                const double err = fabs((double)got[a] - want[a]) / (1e-9 + fabs(want[a]));
                if (!(err <= worst)) {
                    worst = err;
                    where = k;
                }
            }
        }
        free(w);
        free(m);
    }
    char detail[200];
    snprintf(detail, sizeof detail, "%s; %lld chunks; max relative difference %.3g (entry %d); step %lld arrived %u",
             st ? kiln_context_message(ctx) : "", (long long)chunks, worst, where, (long long)s.step, s.arrived);
    check(!st && worst <= 1e-6 && s.step == 2 && s.arrived == 0,
          "optimizer over 70 entries (later groups of 32, an empty entry): 2 steps match kiln_optimizer_update", detail);
    for (int k = 0; k < N; k++) {
        kiln_tensor_free(ps[k].value);
        free(ps[k].state[0]);
        free(grads[k]);
    }
}

/* fp16 steps as the trainer enqueues them: the gradient check, then the update; the step
 * ended by kiln_cuda_train_step_end or (fused) by the update's last block, which also draws
 * the next Dropout seed and moves the batch position. Clean steps of the fused path are one
 * captured CUDA graph replayed, as in training (the finished-block count must return to 0
 * for the next replay). */
static kiln_status scaled_step(opt_fixture *f, const kiln_train_options *o, const kiln_cuda_scaler *sc,
                               const kiln_cuda_step_tail *tail) {
    kiln_status st = kiln_cuda_grad_check(cu, f->table, f->n, f->chunks, KILN_F16, false, f->state);
    if (!st)
        st = kiln_cuda_optimizer_step(cu, o, f->table, f->n, f->chunks, KILN_F16, KILN_DTYPE_UNDEFINED, true, f->state,
                                      tail);
    if (!st && !tail) st = kiln_cuda_train_step_end(cu, sc, o, f->state);
    return st;
}

/* Dynamic loss scaling: an inf or NaN gradient skips the update, halves the scale and
 * counts a skipped step (the schedule's lr stays); growth_interval clean steps double it. */
static void loss_scaling_checks(void) {
    kiln_train_options o = {0};
    o.optimizer = KILN_OPTIM_ADADELTA;
    o.lr = 1.0f;
    o.eps = 1e-6f;
    o.rho = 0.9f;
    o.schedule = KILN_SCHEDULE_STEP; /* lr 1, 1, 0.5, 0.5: the skipped step must not advance it */
    o.step_size = 2;
    o.gamma = 0.5f;
    const kiln_cuda_scaler sc = {2.f, 0.5f, 3};
    for (int fused = 0; fused < 2; fused++)
        for (int kind = 0; kind < 2; kind++) {
            const char *bad_name = kind ? "NaN" : "inf";
            const char *how = fused ? " (fused step end, clean steps as graph replays)" : "";
            opt_fixture f;
            kiln_status st = fixture_make(&f, &o, KILN_F16, 1024.f, false);
            const uint64_t base = 0x9E3779B97F4A7C15ull * 11;
            const int64_t zero = 0, by = 32;
            int64_t *dev = NULL;
            if (!st) st = kiln_cuda_arena_alloc(cu, 2 * sizeof(int64_t), (void **)&dev);
            if (!st) st = kiln_cuda_upload(cu, &dev[0], &zero, sizeof zero);
            if (!st) st = kiln_cuda_upload(cu, &dev[1], &zero, sizeof zero);
            const kiln_cuda_step_tail tail = {.scaler = &sc, .schedule = &o, .rng_counter = dev ? &dev[0] : NULL,
                                              .rng_base = base, .pos = dev ? &dev[1] : NULL, .pos_by = by};
            const kiln_cuda_step_tail *tp = fused ? &tail : NULL;
            /* one bad gradient element: inf in a full chunk of tensor 3 (the check's vector
             * path), NaN in tensor 1 (misaligned: element by element) */
            const uint16_t badv = kind ? 0x7E00 : 0x7C00;
            void *at = kind ? (char *)f.e[1].grad + 2 * 4000 : (char *)f.e[3].grad + 2 * 12345;
            uint16_t keep = 0;
            if (!st) st = kiln_cuda_download(cu, &keep, at, 2);
            if (!st) st = kiln_cuda_upload(cu, at, &badv, 2);
            /* step 1: skipped */
            if (!st) st = scaled_step(&f, &o, &sc, tp);
            kiln_cuda_train_state s = {0};
            if (!st) st = kiln_cuda_download(cu, &s, f.state, sizeof s);
            bool bad = false;
            const char *what = "";
            if (!st) fixture_compare(&f, &o, 0, KILN_DTYPE_UNDEFINED, &bad, &what);
            char label[200], detail[320];
            snprintf(label, sizeof label, "loss scaling: an %s gradient skips the step, halves the scale%s", bad_name, how);
            snprintf(detail, sizeof detail,
                     "%s; weights changed: %d (%s); step %lld skipped %lld scale %g found_inf %d lr %g arrived %u",
                     st ? kiln_context_message(ctx) : "", bad, what, (long long)s.step, (long long)s.skipped,
                     s.loss_scale, s.found_inf, s.lr, s.arrived);
            check(!st && !bad && s.step == 0 && s.skipped == 1 && s.loss_scale == 512.f && s.found_inf == 0 &&
                      s.lr == kiln_trainer_lr_at(&o, 0) && s.arrived == 0,
                  label, detail);
            /* steps 2..4: clean (the gradients are now scaled by 1024 but the scale is 512:
             * rescale them on the host copy so the CPU sees what the device unscales) */
            if (!st) st = kiln_cuda_upload(cu, at, &keep, 2);
            for (int k = 0; k < f.n && !st; k++)
                for (int64_t i = 0; i < f.ps[k].numel; i++) f.grads[k][i] *= 2.f;
            cudaStream_t sm = (cudaStream_t)kiln_cuda_stream(cu);
            cudaGraph_t graph = NULL;
            cudaGraphExec_t exec = NULL;
            if (!st && fused) {
                st = kiln_cuda_sync(cu);
                if (!st && cudaStreamBeginCapture(sm, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
                    st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaStreamBeginCapture failed");
                else if (!st) {
                    kiln_status s1 = scaled_step(&f, &o, &sc, tp);
                    cudaError_t ce = cudaStreamEndCapture(sm, &graph);
                    st = s1 ? s1
                         : ce != cudaSuccess
                             ? kiln_fail(ctx, KILN_ERR_DEVICE, "cudaStreamEndCapture: %s", cudaGetErrorString(ce))
                             : KILN_OK;
                    if (!st && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
                        st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaGraphInstantiate failed");
                }
            }
            for (int64_t step = 0; step < 3 && !st; step++) {
                kiln_optimizer_update(&o, step, kiln_trainer_lr_at(&o, step), f.n, f.ps);
                if (fused && cudaGraphLaunch(exec, sm) != cudaSuccess)
                    st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaGraphLaunch failed");
                else if (!fused)
                    st = scaled_step(&f, &o, &sc, tp);
            }
            int64_t counter = 0, pos = 0;
            uint64_t seed = 0;
            if (!st) st = kiln_cuda_download(cu, &s, f.state, sizeof s);
            if (!st) st = kiln_cuda_download(cu, &counter, &dev[0], sizeof counter);
            if (!st) st = kiln_cuda_download(cu, &pos, &dev[1], sizeof pos);
            if (!st) st = kiln_cuda_download(cu, &seed, kiln_cuda_rng_seed(cu), sizeof seed);
            if (!st) st = kiln_cuda_sync(cu);
            if (exec) cudaGraphExecDestroy(exec);
            if (graph) cudaGraphDestroy(graph);
            bad = false;
            double worst = INFINITY;
            if (!st) worst = fixture_compare(&f, &o, 1e-6, KILN_DTYPE_UNDEFINED, &bad, &what);
            snprintf(label, sizeof label, "loss scaling: after the %s, 3 clean steps update and double the scale%s",
                     bad_name, how);
            snprintf(detail, sizeof detail,
                     "%s; max relative difference %.3g (%s); step %lld skipped %lld scale %g clean %d lr %g (CPU %g) "
                     "arrived %u; seed base+%lld counter %lld pos %lld",
                     st ? kiln_context_message(ctx) : "", worst, what, (long long)s.step, (long long)s.skipped,
                     s.loss_scale, s.clean_steps, s.lr, kiln_trainer_lr_at(&o, 3), s.arrived, (long long)(seed - base),
                     (long long)counter, (long long)pos);
            bool ok = !st && !bad && s.step == 3 && s.skipped == 1 && s.loss_scale == 1024.f && s.clean_steps == 0 &&
                      s.found_inf == 0 && s.lr == kiln_trainer_lr_at(&o, 3) && s.arrived == 0;
            /* fused: 4 steps (the skipped one too) drew seeds base+0..3 and moved 4 batches */
            if (fused) ok = ok && seed == base + 3 && counter == 4 && pos == 4 * by;
            else ok = ok && counter == 0 && pos == 0;
            check(ok, label, detail);
            fixture_free(&f);
        }
    /* in-place unscaling of f32 and f16 gradients (x 1/256: exact), every tensor: full
     * chunks on the vector path, misaligned and partial ones element by element */
    for (int half = 0; half < 2; half++) {
        opt_fixture f;
        const kiln_dtype gdt = half ? KILN_F16 : KILN_F32;
        kiln_status st = fixture_make(&f, &o, gdt, 256.f, false);
        if (!st) st = kiln_cuda_grad_check(cu, f.table, f.n, f.chunks, gdt, true, f.state);
        kiln_cuda_train_state s = {0};
        if (!st) st = kiln_cuda_download(cu, &s, f.state, sizeof s);
        bool same = !st;
        for (int k = 0; k < f.n && same; k++) {
            const int64_t n = f.ps[k].numel;
            void *g = malloc(kiln_dtype_size(gdt) * (size_t)n);
            same = g && !kiln_cuda_download(cu, g, f.e[k].grad, kiln_dtype_size(gdt) * (size_t)n);
            for (int64_t i = 0; same && i < n; i++)
                same = half ? ((const uint16_t *)g)[i] == kiln_f32_to_f16(f.grads[k][i])
                            : ((const float *)g)[i] == f.grads[k][i];
            free(g);
        }
        char label[120];
        snprintf(label, sizeof label, "grad check unscales %s gradients in place (x 1/256, exact)", half ? "f16" : "f32");
        check(same && s.found_inf == 0, label, st ? kiln_context_message(ctx) : "unscaled values differ or found_inf set");
        fixture_free(&f);
    }
}

/* The device seed: rng_next, and a captured graph that draws new Dropout masks on each
 * replay, equal to the CPU's for seeds base + k. */
static void rng_checks(void) {
    kiln_cuda_arena_reset(cu);
    const uint64_t base = 0x9E3779B97F4A7C15ull * 42;
    int64_t *counter = NULL;
    kiln_status st = kiln_cuda_arena_alloc(cu, 8, (void **)&counter);
    const int64_t five = 5;
    if (!st) st = kiln_cuda_upload(cu, counter, &five, 8);
    if (!st) st = kiln_cuda_rng_next(cu, base, counter);
    uint64_t seed = 0;
    int64_t after = 0;
    if (!st) st = kiln_cuda_download(cu, &seed, kiln_cuda_rng_seed(cu), 8);
    if (!st) st = kiln_cuda_download(cu, &after, counter, 8);
    check(!st && seed == base + 5 && after == 6, "rng_next: seed = base + counter, counter + 1",
          st ? kiln_context_message(ctx) : "wrong seed or counter");

    /* Dropout (2000 elements, ratio 0.5, training) captured with rng_next */
    const int op = kiln_op_index("Dropout");
    if (op < 0 || st) return;
    kiln_node node;
    memset(&node, 0, sizeof node);
    node.op_type = (char *)"Dropout";
    node.name = (char *)"captured";
    node.domain = (char *)"";
    node.op = op;
    node.opset = 13;
    node.n_in = 3;
    node.n_out = 2;
    kiln_tensor *hin[3] = {kt_rand(KILN_F32, 1, KT_DIMS(2000), -2, 2, 5), kt_scalar(KILN_F32, 0.5),
                           kt_scalar(KILN_BOOL, 1)};
    kiln_tensor din[3], dy, dm;
    kiln_tensor *dinp[3] = {&din[0], &din[1], &din[2]}, *doutp[2] = {&dy, &dm};
    for (int i = 0; i < 3 && !st; i++) st = gpu_device_copy(cu, ctx, hin[i], 0, true, KILN_FORMAT_NCHW, &din[i]);
    kiln_tensor *ref[2] = {0};
    if (!st) st = gpu_eval_ref(ctx, &node, 3, hin, 2, ref, base, false);
    if (!st) st = gpu_device_copy(cu, ctx, ref[0], 0, false, KILN_FORMAT_NCHW, &dy);
    if (!st) st = gpu_device_copy(cu, ctx, ref[1], 0, false, KILN_FORMAT_NCHW, &dm);
    kiln_tensor_free(ref[0]);
    kiln_tensor_free(ref[1]);
    const int64_t zero = 0;
    if (!st) st = kiln_cuda_upload(cu, counter, &zero, 8);
    if (!st) st = kiln_cuda_sync(cu);
    kiln_op_ctx c = {.kctx = ctx, .node = &node, .n_in = 3, .in = dinp, .n_out = 2, .out = doutp};
    cudaStream_t sm = (cudaStream_t)kiln_cuda_stream(cu);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (!st && cudaStreamBeginCapture(sm, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaStreamBeginCapture failed");
    else if (!st) {
        kiln_status s1 = kiln_cuda_rng_next(cu, base, counter);
        if (!s1) s1 = kiln_cuda_run(cu, &c);
        cudaError_t ce = cudaStreamEndCapture(sm, &graph);
        st = s1 ? s1 : ce != cudaSuccess ? kiln_fail(ctx, KILN_ERR_DEVICE, "cudaStreamEndCapture: %s", cudaGetErrorString(ce)) : KILN_OK;
        if (!st && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
            st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaGraphInstantiate failed");
    }
    bool all = !st;
    kiln_tensor *gy = kiln_tensor_new(ctx, KILN_F32, 1, KT_DIMS(2000)), *gm = kiln_tensor_new(ctx, KILN_BOOL, 1, KT_DIMS(2000));
    for (int64_t k = 0; k < 3 && all; k++) {
        kiln_tensor *want[2] = {0};
        all = cudaGraphLaunch(exec, sm) == cudaSuccess && gy && gm &&
              !kiln_cuda_download(cu, gy->data, dy.data, 8000) && !kiln_cuda_download(cu, gm->data, dm.data, 2000) &&
              !gpu_eval_ref(ctx, &node, 3, hin, 2, want, base + (uint64_t)k, false);
        all = all && memcmp(gy->data, want[0]->data, 8000) == 0 && memcmp(gm->data, want[1]->data, 2000) == 0;
        kiln_tensor_free(want[0]);
        kiln_tensor_free(want[1]);
    }
    check(all, "a captured graph with rng_next draws the CPU's Dropout masks for seeds base+0, +1, +2",
          st ? kiln_context_message(ctx) : "masks or outputs differ");
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    kiln_tensor_free(gy);
    kiln_tensor_free(gm);
    for (int i = 0; i < 3; i++) kiln_tensor_free(hin[i]);
}

/* ---------------------------------------------------- mnist-net's training graph */

/* pytorch/examples mnist's network as kiln trains it (Adadelta, dropout, batch 64): every
 * node of the training graph's run list must have a CUDA kernel; with a device, the whole
 * graph (forward and backward) runs as a CUDA plan, twice (the second a graph replay), and
 * the loss and every gradient match the CPU plan with the same Dropout seed. */
static void mnist_training_graph(kiln_precision prec, bool nhwc) {
    kiln_model *m = NULL, *g = NULL;
    kiln_trainer *t = NULL;
    kiln_train_options o = {0};
    o.optimizer = KILN_OPTIM_ADADELTA;
    char what[120];
    snprintf(what, sizeof what, "mnist-net training graph%s%s", nhwc ? ", NHWC" : "",
             prec == KILN_PRECISION_FP16 ? ", fp16" : prec == KILN_PRECISION_BF16 ? ", bf16" : "");
    if (kiln_model_mnist_net(ctx, 64, 1, 1, &m) || kiln_trainer_create(m, "loss", &o, &t)) {
        printf("SKIP %s: %s\n", what, kiln_context_message(ctx));
        skipped++;
        kiln_model_free(m);
        return;
    }
    /* the CPU trainer's forward + backward graph (its update lowered, as the CUDA engine
     * plans it) through the passes a CUDA trainer applies (fusion, the fused loss, layout,
     * precision, the fused pool and dropout gradients) */
    kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = prec,
                            .disabled = ~(unsigned)(KILN_PASS_FUSE_CONV | KILN_PASS_FUSE_LOSS | KILN_PASS_FUSE_POOL |
                                                    (nhwc ? KILN_PASS_NHWC : 0))};
    kiln_model *bg = backward_graph(t);
    if (!bg || kiln_passes_apply(bg, &po, &g)) {
        fail(what, "passes: %s", kiln_context_message(ctx));
        kiln_model_free(bg);
        kiln_trainer_free(t);
        kiln_model_free(m);
        return;
    }
    kiln_model_free(bg);
    kiln_tensor *image = kt_rand(KILN_F32, 4, KT_DIMS(64, 1, 28, 28), 0, 1, 11);
    kiln_tensor *label = kt_rand(KILN_I64, 1, KT_DIMS(64), 0, 10, 12);
    t->feeds[0] = image;
    t->feeds[1] = label;
    kiln_plan *p = NULL;
    kiln_status st = kiln_plan_build(g, t->feeds, true, true, &p);
    if (st) {
        fail(what, "plan: %s", kiln_context_message(ctx));
        goto out;
    }
    /* the kernels are asked about a device-style plan's tensors, which carry the layouts
     * (a host plan's are all NCHW) */
    kiln_plan *dp = NULL;
    if ((st = kiln_plan_build(g, t->feeds, true, false, &dp)) != KILN_OK) {
        fail(what, "device-style plan: %s", kiln_context_message(ctx));
        goto out;
    }
    kiln_plan_view_t v;
    kiln_plan_view(dp, &v);
    printf("%s: run list (%d nodes):", what, v.n_exec);
    bool all = true;
    for (int e = 0; e < v.n_exec; e++) {
        kiln_op_ctx hc = *kiln_plan_exec_op_ctx(&v, e);
        printf(" %s%s", hc.node->domain[0] ? "kiln." : "", hc.node->op_type);
        if (kiln_cuda_supports(&hc) != KILN_OK) {
            printf("\n");
            fail(what, "%s", kiln_context_message(ctx));
            all = false;
        }
    }
    printf("\n");
    kiln_plan_free(dp);
    char lab0[200];
    snprintf(lab0, sizeof lab0, "every node of the %s has a CUDA kernel", what);
    check(all, lab0, "see above");
    if (!cu || !all) goto out;

    const int no = g->n_outputs;
    const uint64_t seed = 0x9E3779B97F4A7C15ull * 3 + 1;
    const kiln_tensor **want = calloc((size_t)no, sizeof *want), **got = calloc((size_t)no, sizeof *got);
    kiln_cuda_plan *cp = NULL;
    kiln_cuda_stats s0;
    kiln_cuda_get_stats(cu, &s0);
    st = want && got ? kiln_plan_run_cpu(p, t->feeds, seed, no, want) : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_cuda_plan_create(cu, g, t->feeds, true, &cp);
    /* run 1 eager, run 2 captures (side streams: parallel branches) and replays, run 3
     * replays */
    for (int run = 0; run < 3 && !st; run++) {
        st = kiln_cuda_rng_set(cu, seed);
        if (!st) st = kiln_cuda_plan_run(cp, t->feeds, no, got);
        if (st) break;
        atol_scale = 1e-5;
        int bad = 0;
        for (int j = 0; j < no; j++) {
            char lab[200];
            snprintf(lab, sizeof lab, "%s on cuda (run %d%s): %s", what, run + 1, run ? ", graph replay" : "",
                     g->values[g->outputs[j]].name);
            double a, r;
            /* low precision: f16 / bf16 activations and gradients, rounded in another order */
            tolerances(prec == KILN_PRECISION_FP16 ? KILN_F16 : prec == KILN_PRECISION_BF16 ? KILN_BF16 : KILN_F32,
                       1e-6, 1e-4, want[j], &a, &r);
            bad += compare(got[j], want[j], a, r, lab);
        }
        atol_scale = 0;
        if (bad) failed++;
        else passed++;
    }
    if (st) fail(what, "on cuda: %s", kiln_context_message(ctx));
    if (!st) {
        /* conv1 (one input channel): its forward and its weight gradient, on the host at
         * least once each whether the plan ran them eagerly or captured them */
        kiln_cuda_stats s1;
        kiln_cuda_get_stats(cu, &s1);
        char lab1[240], detail[120];
        snprintf(lab1, sizeof lab1, "%s: conv1 and its weight gradient ran on the direct kernels", what);
        snprintf(detail, sizeof detail, "stats.conv_direct_calls rose by %d", s1.conv_direct_calls - s0.conv_direct_calls);
        check(s1.conv_direct_calls - s0.conv_direct_calls >= 2, lab1, detail);
        snprintf(lab1, sizeof lab1, "%s: the capture put nodes off the longest path on side streams", what);
        snprintf(detail, sizeof detail, "stats.side_captured rose by %d (side streams: %d)",
                 s1.side_captured - s0.side_captured, kiln_cuda_side_streams(cu));
        check(kiln_cuda_side_streams(cu) == 0 || s1.side_captured - s0.side_captured >= 4, lab1, detail);
    }
    kiln_cuda_plan_free(cp);
    free(want);
    free(got);
out:
    kiln_plan_free(p);
    t->feeds[0] = t->feeds[1] = NULL;
    kiln_tensor_free(image);
    kiln_tensor_free(label);
    kiln_trainer_free(t);
    kiln_model_free(g);
    kiln_model_free(m);
}

static kiln_op_ctx shape_ctx(kiln_node *node, const char *op, kiln_tensor **in, int n_in, kiln_tensor **out) {
    memset(node, 0, sizeof *node);
    node->op_type = (char *)op;
    node->name = (char *)"probe";
    node->domain = (char *)"";
    node->op = kiln_op_index(op);
    node->opset = 21;
    node->n_in = n_in;
    node->n_out = 1;
    kiln_op_ctx c = {.kctx = ctx, .node = node, .n_in = n_in, .in = in, .n_out = 1, .out = out};
    return c;
}

/* What the planner relies on: explicit "not supported on cuda" errors. */
/* kiln_trainer_profile on CUDA (kiln train --profile): one row per run-list node plus the
 * prologue (batch gather) and the epilogue (optimizer), GPU times, a whole-step replay time;
 * and the trainer's state untouched: a trainer profiled between steps goes on as an
 * unprofiled twin does (the profile runs ~75 optimizer steps, restored afterwards). */
static void train_profile_checks(void) {
    const int64_t n = 256, batch = 64;
    kiln_model *ma = NULL, *mb = NULL;
    kiln_trainer *a = NULL, *b = NULL;
    kiln_plan *hp = NULL;
    kiln_model *low = NULL;
    kiln_profile p = {0};
    kiln_tensor *images = kt_rand(KILN_F32, 4, KT_DIMS(n, 1, 28, 28), -1, 1, 21);
    kiln_tensor *labels = kt_rand(KILN_I64, 1, KT_DIMS(n), 0, 10, 22);
    kiln_train_options o = {.optimizer = KILN_OPTIM_ADADELTA, .lr = 1.0f, .seed = 3, .device = KILN_DEVICE_CUDA,
                            .strict_fp32 = 1};
    kiln_status st = images && labels ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_model_mnist_net(ctx, -1, 1, 1, &ma);
    if (!st) st = kiln_model_mnist_net(ctx, -1, 1, 1, &mb);
    if (!st) st = kiln_trainer_create(ma, "loss", &o, &a);
    if (!st) st = kiln_trainer_create(mb, "loss", &o, &b);
    float la = 0, lb = 0;
    if (!st) st = kiln_trainer_train_epoch(a, images, labels, batch, 5, 0, 0, 2, &la);
    if (!st) st = kiln_trainer_train_epoch(b, images, labels, batch, 5, 0, 0, 2, &lb);
    double step_ms = 0;
    if (!st) st = kiln_trainer_profile(a, images, labels, batch, 5, 20, &p, &step_ms);
    check(!st, "train profile: a CUDA training step profiles", kiln_context_message(ctx));
    if (st) goto out;
    /* the run list of b's step (the same graph and batch shape) counted from a host plan of
     * the graph the CUDA engine plans: the update lowered (backward_graph), its nodes run by
     * the epilogue, not rows of their own */
    low = backward_graph(b);
    st = low ? kiln_plan_build(low, b->feeds, true, false, &hp) : KILN_ERR_INTERNAL;
    if (!st) {
        kiln_plan_view_t v;
        kiln_plan_view(hp, &v);
        int pro = -1, epi = -1;
        bool times = true;
        double sum = 0;
        for (int e = 0; e < p.n; e++) {
            if (strcmp(p.nodes[e].op_type, "prologue") == 0) pro = e;
            if (strcmp(p.nodes[e].op_type, "epilogue") == 0) epi = e;
            times = times && p.nodes[e].ms >= 0;
            sum += p.nodes[e].ms;
        }
        char detail[200];
        snprintf(detail, sizeof detail, "%d rows for %d nodes; prologue row %d, epilogue row %d", p.n, v.n_exec, pro, epi);
        check(p.n == v.n_exec + 2 && pro == v.n_exec && epi == v.n_exec + 1 && times,
              "train profile: a row per node, then the prologue and the epilogue", detail);
        snprintf(detail, sizeof detail, "prologue %g ms, epilogue %g ms, step %g ms, sum %g / total %g", pro >= 0 ? p.nodes[pro].ms : -1,
                 epi >= 0 ? p.nodes[epi].ms : -1, step_ms, sum, p.total_ms);
        check(pro >= 0 && epi >= 0 && p.nodes[pro].ms > 0 && p.nodes[epi].ms > 0 && step_ms > 0 &&
                  fabs(sum - p.total_ms) <= 1e-9 * (1 + sum),
              "train profile: GPU times for the gather, the optimizer and the whole step", detail);
        printf("     train profile: %d nodes, gather %.1f us, epilogue %.1f us, sum %.1f us, replay %.1f us\n",
               v.n_exec, pro >= 0 ? p.nodes[pro].ms * 1e3 : -1, epi >= 0 ? p.nodes[epi].ms * 1e3 : -1,
               p.total_ms * 1e3, step_ms * 1e3);
    }
    if (!st) st = kiln_trainer_train_epoch(a, images, labels, batch, 5, 0, 2, 4, &la);
    if (!st) st = kiln_trainer_train_epoch(b, images, labels, batch, 5, 0, 2, 4, &lb);
    if (!st) st = kiln_trainer_sync_host(a);
    if (!st) st = kiln_trainer_sync_host(b);
    if (!st) {
        /* cuDNN may sum in a different order run to run: equal within rounding, while a
         * state left behind by the profile's steps would be far off */
        double worst = 0;
        for (int k = 0; k < a->n_params; k++)
            for (int64_t i = 0; i < a->params[k].numel; i++) {
                const double d = fabs((double)((const float *)a->params[k].value->data)[i] -
                                      (double)((const float *)b->params[k].value->data)[i]);
                if (d > worst) worst = d;
            }
        kiln_train_stats sa, sb;
        kiln_trainer_stats(a, &sa);
        kiln_trainer_stats(b, &sb);
        char detail[200];
        snprintf(detail, sizeof detail, "loss %.9g vs the twin's %.9g, weights differ by up to %.3g, steps %lld vs %lld", la,
                 lb, worst, (long long)sa.steps, (long long)sb.steps);
        check(fabs(la - lb) <= 1e-5 * fabs(lb) && worst <= 1e-5 && sa.steps == 4 && sb.steps == 4 &&
                  sa.micro_steps == sb.micro_steps,
              "train profile: the trainer goes on as its unprofiled twin", detail);
    }
out:
    if (st) fail("train profile", "%s", kiln_context_message(ctx));
    kiln_profile_free(&p);
    kiln_plan_free(hp);
    kiln_model_free(low);
    kiln_trainer_free(a);
    kiln_trainer_free(b);
    kiln_model_free(ma);
    kiln_model_free(mb);
    kiln_tensor_free(images);
    kiln_tensor_free(labels);
}

/* A CUDA trainer whose captured step runs over side streams against a twin on one stream
 * (--disable streams), from the same weights and seed, f32 (TF32 off) and fp16 AMP: the
 * same losses and weights within rounding after 12 steps (the step is captured from its
 * second run on), and the side streams actually used. */
static void train_streams_checks(kiln_amp amp) {
    const int64_t n = 768, batch = 64;
    const char *what = amp == KILN_AMP_FP16 ? "train streams, fp16" : "train streams, f32";
    kiln_model *ma = NULL, *mb = NULL;
    kiln_trainer *a = NULL, *b = NULL;
    kiln_tensor *images = kt_rand(KILN_F32, 4, KT_DIMS(n, 1, 28, 28), 0, 1, 31);
    kiln_tensor *labels = kt_rand(KILN_I64, 1, KT_DIMS(n), 0, 10, 32);
    /* The two trainers must run the same kernels for the weights to agree: a timing search
     * (per trainer, or read from the disk cache under keys the two may not share) can give
     * each its own cuDNN algorithms, and algorithms that sum with atomics round differently
     * run to run; 12 Adadelta steps amplify either to ~1e-2 in the weights (seen on the
     * H200: 3e-3 in f32, 1e-2 in fp16, on some runs and not others). cuDNN's heuristic
     * among deterministic algorithms picks the same for both: then the side streams may
     * change nothing but the timing. */
    kiln_train_options o = {.optimizer = KILN_OPTIM_ADADELTA, .lr = 1.0f, .seed = 5, .device = KILN_DEVICE_CUDA,
                            .amp = amp, .strict_fp32 = amp == KILN_AMP_OFF, .deterministic = 1,
                            .disable_passes = KILN_PASS_AUTOTUNE};
    kiln_train_options ob = o;
    ob.disable_passes |= KILN_PASS_STREAMS;
    kiln_status st = images && labels ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_model_mnist_net(ctx, -1, 1, 1, &ma);
    if (!st) st = kiln_model_mnist_net(ctx, -1, 1, 1, &mb);
    if (!st) st = kiln_trainer_create(ma, "loss", &o, &a);
    if (!st) st = kiln_trainer_create(mb, "loss", &ob, &b);
    float la = 0, lb = 0;
    if (!st) st = kiln_trainer_train_epoch(a, images, labels, batch, 7, 0, 0, -1, &la);
    if (!st) st = kiln_trainer_train_epoch(b, images, labels, batch, 7, 0, 0, -1, &lb);
    if (!st) st = kiln_trainer_sync_host(a);
    if (!st) st = kiln_trainer_sync_host(b);
    if (st) {
        fail(what, "%s", kiln_context_message(ctx));
        goto out;
    }
    double worst = 0, scale = 0;
    for (int k = 0; k < a->n_params; k++)
        for (int64_t i = 0; i < a->params[k].numel; i++) {
            const double x = (double)((const float *)a->params[k].value->data)[i];
            const double d = fabs(x - (double)((const float *)b->params[k].value->data)[i]);
            if (d > worst) worst = d;
            if (fabs(x) > scale) scale = fabs(x);
        }
    kiln_train_stats sa, sb;
    kiln_trainer_stats(a, &sa);
    kiln_trainer_stats(b, &sb);
    char detail[240];
    snprintf(detail, sizeof detail, "loss %.9g vs %.9g on one stream, weights differ by up to %.3g (largest %.3g), steps %lld/%lld",
             la, lb, worst, scale, (long long)sa.steps, (long long)sb.steps);
    /* deterministic algorithms on both: the kernels are the same and sum in the same order,
     * so the weights may differ only by what a race would write */
    const double tol = amp == KILN_AMP_FP16 ? 2e-3 : 1e-5;
    check(fabs(la - lb) <= tol * (1 + fabs(lb)) && worst <= tol * (1 + scale) && sa.steps == 12 && sb.steps == 12,
          what, detail);
out:
    kiln_trainer_free(a);
    kiln_trainer_free(b);
    kiln_model_free(ma);
    kiln_model_free(mb);
    kiln_tensor_free(images);
    kiln_tensor_free(labels);
}

/* CUDA training against the CPU trainer, whole steps: mnist-net with Dropout, Adadelta on a
 * step schedule that halves lr every step, data resident on the device with a last
 * partial batch (a second plan), then a second epoch. The step's end (counters and lr),
 * the next Dropout seed and the batch position come from the update's last block: a wrong
 * lr, mask or batch moves weights by ~1e-3 (Adadelta's first steps are ~3e-3 whatever the
 * gradient's size), while cuDNN against the CPU rounds to ~1e-7. */
static void train_vs_cpu_checks(bool warmup) {
    const int64_t n = 200, batch = 64; /* steps of 64, 64, 64, 8 */
    kiln_model *ma = NULL, *mb = NULL;
    kiln_trainer *a = NULL, *b = NULL;
    kiln_tensor *images = kt_rand(KILN_F32, 4, KT_DIMS(n, 1, 28, 28), 0, 1, 31);
    kiln_tensor *labels = kt_rand(KILN_I64, 1, KT_DIMS(n), 0, 10, 32);
    kiln_train_options o = {.optimizer = KILN_OPTIM_ADADELTA, .lr = 1.0f, .seed = 7, .schedule = KILN_SCHEDULE_STEP,
                            .step_size = 1, .gamma = 0.5f, .strict_fp32 = 1};
    kiln_status st = images && labels ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_model_mnist_net(ctx, -1, 1, 1, &ma);
    if (!st) st = kiln_model_mnist_net(ctx, -1, 1, 1, &mb);
    if (!st) st = kiln_trainer_create(ma, "loss", &o, &a);
    o.device = KILN_DEVICE_CUDA;
    if (!st) st = kiln_trainer_create(mb, "loss", &o, &b);
    /* kiln_trainer_warmup takes two steps of each batch shape (64 and 8) and must put every
     * bit of state back: a step left in would move the weights by ~1e-3 */
    if (!st && warmup) st = kiln_trainer_warmup(b, images, labels, batch);
    float la[2] = {0}, lb[2] = {0};
    for (int e = 0; e < 2 && !st; e++) {
        const int64_t end = e ? 2 : -1;
        st = kiln_trainer_train_epoch(a, images, labels, batch, 5, e, 0, end, &la[e]);
        if (!st) st = kiln_trainer_train_epoch(b, images, labels, batch, 5, e, 0, end, &lb[e]);
    }
    if (!st) st = kiln_trainer_sync_host(b);
    if (st) {
        fail("cuda training against the CPU trainer", "%s", kiln_context_message(ctx));
    } else {
        double worst = 0;
        for (int k = 0; k < a->n_params; k++)
            for (int64_t i = 0; i < a->params[k].numel; i++) {
                const double d = fabs((double)((const float *)a->params[k].value->data)[i] -
                                      (double)((const float *)b->params[k].value->data)[i]);
                if (!(d <= worst)) worst = d;
            }
        kiln_train_stats sa, sb;
        kiln_trainer_stats(a, &sa);
        kiln_trainer_stats(b, &sb);
        char detail[320];
        snprintf(detail, sizeof detail,
                 "losses %.9g, %.9g vs the CPU's %.9g, %.9g; weights differ by up to %.3g; steps %lld vs %lld, "
                 "micro-steps %lld vs %lld, lr %g vs %g",
                 lb[0], lb[1], la[0], la[1], worst, (long long)sb.steps, (long long)sa.steps, (long long)sb.micro_steps,
                 (long long)sa.micro_steps, sb.lr, sa.lr);
        check(fabs(la[0] - lb[0]) <= 1e-4 * fabs(la[0]) && fabs(la[1] - lb[1]) <= 1e-4 * fabs(la[1]) &&
                  worst <= 1e-4 && sa.steps == 6 && sb.steps == 6 && sb.micro_steps == sa.micro_steps &&
                  sb.lr == sa.lr,
              warmup ? "cuda training after kiln_trainer_warmup matches the CPU trainer: 6 steps over 2 epochs"
                     : "cuda training matches the CPU trainer: 6 steps over 2 epochs (seeds, lr schedule, batch positions)",
              detail);
    }
    kiln_trainer_free(a);
    kiln_trainer_free(b);
    kiln_model_free(ma);
    kiln_model_free(mb);
    kiln_tensor_free(images);
    kiln_tensor_free(labels);
}

static void supports_checks(void) {
    const int64_t d[2] = {2, 3};
    kiln_tensor xi = {.dtype = KILN_I32, .ndim = 2}, yi = xi;
    memcpy(xi.dims, d, sizeof d);
    memcpy(yi.dims, d, sizeof d);
    kiln_tensor *in[1] = {&xi}, *out[1] = {&yi};
    kiln_node node;
    kiln_op_ctx c = shape_ctx(&node, "Relu", in, 1, out);
    kiln_status st = kiln_cuda_supports(&c);
    check(st == KILN_ERR_UNSUPPORTED && strstr(kiln_context_message(ctx), "not supported on cuda"),
          "Relu on i32 is not supported on cuda", kiln_context_message(ctx));
    /* a registered op without a CUDA kernel */
    for (int op = 0; op < kiln_op_count(); op++) {
        if (kiln_cuda_kernel_for(op)) continue;
        c = shape_ctx(&node, kiln_op_name(op), in, 1, out);
        st = kiln_cuda_supports(&c);
        check(st == KILN_ERR_UNSUPPORTED && strstr(kiln_context_message(ctx), kiln_op_name(op)),
              "an op without a CUDA kernel is rejected by name", kiln_context_message(ctx));
        break;
    }
}

static kiln_tensor shape4(kiln_dtype dt, int ndim, const int64_t *dims, kiln_format f) {
    kiln_tensor t;
    memset(&t, 0, sizeof t);
    kiln_tensor_set_shape(&t, dt, ndim, dims);
    t.format = f;
    return t;
}

/* Kernels that read NCHW only reject NHWC tensors; layout-aware ones reject combinations
 * they do not handle, and take the ones the layout pass produces. */
static void layout_supports_checks(void) {
    const kiln_format C = KILN_FORMAT_NCHW, H = KILN_FORMAT_NHWC;
    static const struct {
        const char *domain, *op, *what;
        int n_in;
        int64_t in_dims[3][5]; /* rank, dims... */
        kiln_format in_fmt[3];
        int64_t out_dims[5];
        kiln_format out_fmt;
        bool ok;
    } t[] = {
        {"", "Flatten", "Flatten of an NHWC tensor", 1, {{4, 2, 3, 4, 5}}, {H}, {2, 2, 60}, C, false},
        {"", "Softmax", "Softmax over NHWC", 1, {{4, 2, 3, 4, 5}}, {H}, {4, 2, 3, 4, 5}, H, false},
        {"", "Conv", "Conv with an NCHW weight and NHWC data", 2, {{4, 1, 3, 8, 8}, {4, 4, 3, 3, 3}}, {H, C},
         {4, 1, 4, 6, 6}, H, false},
        {"", "Conv", "Conv with NHWC data and weight", 2, {{4, 1, 3, 8, 8}, {4, 4, 3, 3, 3}}, {H, H},
         {4, 1, 4, 6, 6}, H, true},
        {"", "Conv", "Conv of one channel with X and W labelled NCHW into NHWC", 2,
         {{4, 2, 1, 8, 8}, {4, 4, 1, 3, 3}}, {C, C}, {4, 2, 4, 6, 6}, H, true},
        {"", "Conv", "Conv of three channels with NCHW X into NHWC", 2, {{4, 2, 3, 8, 8}, {4, 4, 3, 3, 3}}, {C, H},
         {4, 2, 4, 6, 6}, H, false},
        {"", "Add", "Add of a full NCHW operand into NHWC", 2, {{4, 2, 3, 4, 5}, {4, 2, 3, 4, 5}}, {H, C},
         {4, 2, 3, 4, 5}, H, false},
        {"", "Add", "Add of a per-channel NCHW operand into NHWC", 2, {{4, 2, 3, 4, 5}, {3, 3, 1, 1}}, {H, C},
         {4, 2, 3, 4, 5}, H, true},
        {"", "Add", "Add of an NHWC operand into NCHW", 2, {{4, 2, 3, 4, 5}, {4, 2, 3, 4, 5}}, {H, C},
         {4, 2, 3, 4, 5}, C, false},
        {"", "Relu", "Relu from NHWC to NCHW", 1, {{4, 2, 3, 4, 5}}, {H}, {4, 2, 3, 4, 5}, C, false},
        {"", "MaxPool", "MaxPool from NCHW to NHWC", 1, {{4, 2, 3, 4, 5}}, {C}, {4, 2, 3, 4, 5}, H, false},
        {"kiln", "ToNHWC", "ToNHWC of an NHWC tensor", 1, {{4, 2, 3, 4, 5}}, {H}, {4, 2, 3, 4, 5}, H, false},
        {"kiln", "ToNCHW", "ToNCHW into NHWC", 1, {{4, 2, 3, 4, 5}}, {H}, {4, 2, 3, 4, 5}, H, false},
        {"kiln", "ToNCHW", "ToNCHW", 1, {{4, 2, 3, 4, 5}}, {H}, {4, 2, 3, 4, 5}, C, true},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        kiln_tensor in[3], out, *inps[3], *outp = &out;
        for (int k = 0; k < t[i].n_in; k++) {
            in[k] = shape4(KILN_F32, (int)t[i].in_dims[k][0], t[i].in_dims[k] + 1, t[i].in_fmt[k]);
            inps[k] = &in[k];
        }
        out = shape4(KILN_F32, (int)t[i].out_dims[0], t[i].out_dims + 1, t[i].out_fmt);
        kiln_node node;
        memset(&node, 0, sizeof node);
        node.op_type = (char *)t[i].op;
        node.name = (char *)"probe";
        node.domain = (char *)t[i].domain;
        node.op = kiln_op_index_domain(t[i].domain, t[i].op);
        node.opset = 21;
        node.n_in = t[i].n_in;
        node.n_out = 1;
        kiln_op_ctx c = {.kctx = ctx, .node = &node, .n_in = t[i].n_in, .in = inps, .n_out = 1, .out = &outp};
        kiln_clear_error(ctx);
        const kiln_status st = kiln_cuda_supports(&c);
        char label[160];
        snprintf(label, sizeof label, "%s is %s on cuda", t[i].what, t[i].ok ? "supported" : "rejected");
        if (t[i].ok) check(st == KILN_OK, label, kiln_context_message(ctx));
        else check(st == KILN_ERR_UNSUPPORTED && strstr(kiln_context_message(ctx), "not supported on cuda"), label,
                   st == KILN_OK ? "accepted" : kiln_context_message(ctx));
    }
}

/* Dropout and kiln.DropoutGrad across layouts: Dropout takes an NHWC X into an NCHW Y and
 * mask in any mode, or into an NHWC Y at inference; DropoutGrad takes NCHW dY and mask
 * into an NCHW or NHWC dX, and with relu = 1 only an NCHW Y into an NCHW dX; nothing else. */
static void dropout_layout_supports_checks(void) {
    const int C = KILN_FORMAT_NCHW, H = KILN_FORMAT_NHWC, NO = -1;
    static const struct {
        const char *op, *what;
        int x, y, mask; /* formats of X (dY), Y (dX) and the mask (NO: none) */
        bool training;  /* a training_mode input */
        bool ok;
        bool relu;      /* DropoutGrad relu = 1, with input Y of format y_fmt */
        int y_fmt;
    } t[] = {
        {"Dropout", "Dropout from NHWC into NCHW Y and mask, training", H, C, C, true, true, false, C},
        {"Dropout", "Dropout from NHWC into NCHW, no mask, no training_mode", H, C, NO, false, true, false, C},
        {"Dropout", "Dropout from NHWC into NCHW, training, no mask", H, C, NO, true, true, false, C},
        {"Dropout", "Dropout NHWC to NHWC at inference", H, H, NO, false, true, false, C},
        {"Dropout", "Dropout NCHW, training", C, C, C, true, true, false, C},
        {"Dropout", "Dropout NHWC to NHWC with a mask", H, H, C, true, false, false, C},
        {"Dropout", "Dropout NHWC to NHWC with training_mode", H, H, NO, true, false, false, C},
        {"Dropout", "Dropout with an NHWC mask", H, C, H, true, false, false, C},
        {"Dropout", "Dropout with an NHWC mask and NCHW X", C, C, H, true, false, false, C},
        {"Dropout", "Dropout from NCHW into NHWC", C, H, NO, false, false, false, C},
        {"DropoutGrad", "DropoutGrad from NCHW into NHWC dX", C, H, C, true, true, false, C},
        {"DropoutGrad", "DropoutGrad NCHW", C, C, C, true, true, false, C},
        {"DropoutGrad", "DropoutGrad from NHWC dY", H, H, C, true, false, false, C},
        {"DropoutGrad", "DropoutGrad with an NHWC mask", C, H, H, true, false, false, C},
        {"DropoutGrad", "DropoutGrad NHWC throughout", H, H, H, true, false, false, C},
        {"DropoutGrad", "DropoutGrad from NHWC dY into NCHW", H, C, C, true, false, false, C},
        {"DropoutGrad", "DropoutGrad relu=1 NCHW throughout", C, C, C, true, true, true, C},
        {"DropoutGrad", "DropoutGrad relu=1 into NHWC dX", C, H, C, true, false, true, C},
        {"DropoutGrad", "DropoutGrad relu=1 with an NHWC Y", C, C, C, true, false, true, H},
    };
    const int64_t dims[4] = {2, 3, 4, 5}, one[1] = {1};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        const bool grad = strcmp(t[i].op, "DropoutGrad") == 0;
        kiln_tensor x = shape4(KILN_F32, 4, dims, (kiln_format)t[i].x);
        kiln_tensor y = shape4(KILN_F32, 4, dims, (kiln_format)t[i].y);
        kiln_tensor mask = shape4(KILN_BOOL, 4, dims, t[i].mask == H ? KILN_FORMAT_NHWC : KILN_FORMAT_NCHW);
        kiln_tensor ratio = shape4(KILN_F32, 0, one, KILN_FORMAT_NCHW);
        kiln_tensor train = shape4(KILN_BOOL, 0, one, KILN_FORMAT_NCHW);
        kiln_tensor relu_y = shape4(KILN_F32, 4, dims, (kiln_format)t[i].y_fmt);
        /* Dropout(X, ratio, training_mode?) -> Y, mask?; DropoutGrad(dY, mask, ratio, training_mode, Y?) -> dX */
        kiln_tensor *in[5] = {&x, NULL, NULL, NULL, NULL}, *out[2] = {&y, NULL};
        int n_in = 2, n_out = 1;
        if (grad) {
            in[1] = &mask;
            in[2] = &ratio;
            in[3] = &train;
            in[4] = &relu_y;
            n_in = t[i].relu ? 5 : 4;
        } else {
            in[1] = &ratio;
            if (t[i].training) {
                in[2] = &train;
                n_in = 3;
            }
            if (t[i].mask != NO) {
                out[1] = &mask;
                n_out = 2;
            }
        }
        kiln_node node;
        memset(&node, 0, sizeof node);
        node.op_type = (char *)t[i].op;
        node.name = (char *)"probe";
        node.domain = (char *)(grad ? "kiln" : "");
        node.op = kiln_op_index_domain(node.domain, t[i].op);
        node.opset = 21;
        node.n_in = n_in;
        node.n_out = n_out;
        if (t[i].relu && kiln_attrs_parse(ctx, "relu=1", &node.attrs, &node.n_attrs)) {
            fail(t[i].what, "attributes: %s", kiln_context_message(ctx));
            continue;
        }
        kiln_op_ctx c = {.kctx = ctx, .node = &node, .n_in = n_in, .in = in, .n_out = n_out, .out = out};
        kiln_clear_error(ctx);
        const kiln_status st = kiln_cuda_supports(&c);
        for (int a = 0; a < node.n_attrs; a++) kiln_attr_clear(&node.attrs[a]);
        free(node.attrs);
        char label[200];
        snprintf(label, sizeof label, "%s is %s on cuda", t[i].what, t[i].ok ? "supported" : "rejected");
        if (t[i].ok) check(st == KILN_OK, label, kiln_context_message(ctx));
        else check(st == KILN_ERR_UNSUPPORTED && strstr(kiln_context_message(ctx), "not supported on cuda"), label,
                   st == KILN_OK ? "accepted" : kiln_context_message(ctx));
    }
}

/* Copies larger than a small staging buffer round-trip exactly. */
static void staging_checks(void) {
    kiln_cuda *small = NULL;
    kiln_cuda_options o = {.device = 0, .arena_bytes = (size_t)4 << 20, .staging_bytes = (size_t)64 << 10};
    if (kiln_cuda_create(ctx, &o, &small)) {
        fail("staged copies", "create: %s", kiln_context_message(ctx));
        return;
    }
    const size_t n = 1000003;
    unsigned char *src = malloc(n), *dst = malloc(n);
    void *dev = NULL;
    kiln_status st = src && dst ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; src && i < n; i++) src[i] = (unsigned char)(i * 2654435761u >> 13);
    if (!st) st = kiln_cuda_arena_alloc(small, n, &dev);
    if (!st) st = kiln_cuda_upload(small, dev, src, n);
    if (!st && dst) memset(dst, 0, n);
    if (!st) st = kiln_cuda_download(small, dst, dev, n);
    check(!st && memcmp(src, dst, n) == 0, "1 MB through a 64 KiB staging buffer", kiln_context_message(ctx));
    void *big = NULL;
    st = kiln_cuda_arena_alloc(small, (size_t)8 << 20, &big);
    check(st == KILN_ERR_OUT_OF_MEMORY, "arena overflow is out of memory", kiln_context_message(ctx));
    free(src);
    free(dst);
    kiln_cuda_free(small);
}

/* A small CNN lowered onto CUDA, profiled node by node: one entry per run node, GPU times
 * > 0 in run order within the traced pass, FLOPs from shapes. */
static void profile_checks(void) {
    kiln_model *m = NULL;
    kiln_session *s = NULL;
    kiln_tensor *x = NULL, *w = NULL, *fw = NULL, *fb = NULL;
    kiln_profile p = {0};
    kiln_status st = kiln_model_create(ctx, &m);
    w = kt_rand(KILN_F32, 4, KT_DIMS(16, 3, 3, 3), -1, 1, 5);
    fw = kt_rand(KILN_F32, 2, KT_DIMS(10, 16), -1, 1, 6);
    fb = kt_rand(KILN_F32, 1, KT_DIMS(10), -1, 1, 7);
    x = kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 32, 32), -1, 1, 8);
    if (!st && (!w || !fw || !fb || !x)) st = KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_model_add_input(m, "x", KILN_F32, 4, KT_DIMS(2, 3, 32, 32));
    if (!st) st = kiln_model_add_initializer(m, "w", w);
    if (!st) st = kiln_model_add_initializer(m, "fw", fw);
    if (!st) st = kiln_model_add_initializer(m, "fb", fb);
    kiln_node *n = NULL;
    const char *conv_in[] = {"x", "w"}, *gemm_in[] = {"f", "fw", "fb"};
    if (!st) st = kiln_model_add_node(m, "Conv", "conv", 2, conv_in, 1, (const char *[]){"c"}, &n);
    if (!st) st = kiln_node_set_ints(n, "pads", 4, KT_DIMS(1, 1, 1, 1));
    if (!st) st = kiln_model_add_node(m, "Relu", "relu", 1, (const char *[]){"c"}, 1, (const char *[]){"r"}, NULL);
    if (!st)
        st = kiln_model_add_node(m, "GlobalAveragePool", "gap", 1, (const char *[]){"r"}, 1, (const char *[]){"g"},
                                 NULL);
    if (!st) st = kiln_model_add_node(m, "Flatten", "flat", 1, (const char *[]){"g"}, 1, (const char *[]){"f"}, NULL);
    if (!st) st = kiln_model_add_node(m, "Gemm", "fc", 3, gemm_in, 1, (const char *[]){"y"}, &n);
    if (!st) st = kiln_node_set_int(n, "transB", 1);
    if (!st) st = kiln_model_add_output(m, "y");
    if (!st) st = kiln_model_finalize(m);
    kiln_session_options o = {.device = KILN_DEVICE_CUDA, .disable_passes = ~0u};
    if (!st) st = kiln_session_create(m, &o, &s);
    if (!st) st = kiln_session_profile(s, 1, &x, 2, 9, &p);
    check(!st, "a CUDA plan profiles", kiln_context_message(ctx));
    if (!st) {
        bool ok = p.n == 5 && p.iters == 9;
        for (int e = 0; ok && e < p.n; e++) {
            const kiln_profile_node *pn = &p.nodes[e];
            /* Flatten is a view: nothing runs between its events */
            ok = pn->ms >= 0 && pn->dur_ms >= 0 && (e == 0 || pn->start_ms >= p.nodes[e - 1].start_ms);
        }
        ok = ok && p.nodes[0].ms > 0 && p.nodes[4].ms > 0;
        check(ok, "one GPU time per node, in run order", "times or order wrong");
        check(p.n == 5 && strcmp(p.nodes[0].op_type, "Conv") == 0 &&
                  p.nodes[0].flops == 2.0 * (2 * 16 * 32 * 32) * (3 * 3 * 3) &&
                  strcmp(p.nodes[4].op_type, "Gemm") == 0 && p.nodes[4].flops == 2.0 * 2 * 10 * 16,
              "FLOPs of the convolution and the product", "wrong FLOPs");
        printf("     profile: conv %.4f ms, relu %.4f, gap %.4f, flatten %.4f, fc %.4f (sum %.4f)\n",
               p.nodes[0].ms, p.n > 1 ? p.nodes[1].ms : 0, p.n > 2 ? p.nodes[2].ms : 0,
               p.n > 3 ? p.nodes[3].ms : 0, p.n > 4 ? p.nodes[4].ms : 0, p.total_ms);
    }
    kiln_profile_free(&p);
    kiln_session_free(s);
    kiln_model_free(m);
    kiln_tensor_free(x);
    kiln_tensor_free(w);
    kiln_tensor_free(fw);
    kiln_tensor_free(fb);
}

static const char *RTC_SRC =
    "extern \"C\" __global__ void axpb(float *x, float a, float b, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) x[i] = a * x[i] + b;\n"
    "}\n";

static void rtc_checks(void) {
    kiln_cuda_module *m = NULL;
    void *fn = NULL;
    float h[100];
    void *d = NULL;
    for (int i = 0; i < 100; i++) h[i] = (float)i;
    kiln_cuda_arena_reset(cu);
    kiln_status st = kiln_cuda_module_compile(cu, "axpb.cu", RTC_SRC, &m);
    if (!st) st = kiln_cuda_module_kernel(cu, m, "axpb", &fn);
    if (!st) st = kiln_cuda_arena_alloc(cu, sizeof h, &d);
    if (!st) st = kiln_cuda_upload(cu, d, h, sizeof h);
    float a = 2.f, b = 0.5f;
    int n = 100;
    void *args[] = {&d, &a, &b, &n};
    if (!st) st = kiln_cuda_module_launch(cu, fn, 1, 128, 0, args);
    if (!st) st = kiln_cuda_download(cu, h, d, sizeof h);
    bool ok = !st;
    for (int i = 0; ok && i < 100; i++) ok = h[i] == 2.f * (float)i + 0.5f;
    check(ok, "NVRTC kernel compiled, loaded and run", kiln_context_message(ctx));
    kiln_cuda_module_free(m);
    m = NULL;
    st = kiln_cuda_module_compile(cu, "broken.cu", "__global__ void f( {", &m);
    check(st == KILN_ERR_DEVICE && m == NULL && strstr(kiln_context_message(ctx), "broken.cu"),
          "an NVRTC compile error comes back with its log", kiln_context_message(ctx));
}

/* ------------------------------------------------ algorithm cache on disk */

/* One f16 Conv case run on kiln_cuda k. */
static void conv_on(kiln_cuda *k, const char *label) {
    kiln_cuda *saved = cu;
    cu = k;
    atol_scale = 1e-5;
    run_case("Conv", "pads=[1,1,1,1]", 0, KILN_F16, false, 2e-5, 1e-4, label,
             INPUTS(X(2, 16, 9, 9), X(32, 16, 3, 3), X(32)));
    atol_scale = 0;
    cu = saved;
}

static kiln_cuda_stats stats_of(const kiln_cuda *k) {
    kiln_cuda_stats st;
    kiln_cuda_get_stats(k, &st);
    return st;
}

static bool file_exists(const char *path) { return access(path, F_OK) == 0; }

/* Timed choices are written to the cache file and read back by the next kiln_cuda, which
 * then times nothing; a corrupt file costs nothing but its bad lines; the heuristic times
 * and writes nothing; deterministic mode runs. */
static void algo_cache_checks(const char *dir) {
    char path[1024], path2[1024];
    snprintf(path, sizeof path, "%s/algos/cudnn-algos.txt", dir);
    snprintf(path2, sizeof path2, "%s/heuristic.txt", dir);
    kiln_cuda_options o = {.device = 0, .arena_bytes = (size_t)64 << 20, .algo_cache = path};
    kiln_cuda *k = NULL;
    if (kiln_cuda_create(ctx, &o, &k)) {
        fail("algo cache", "create: %s", kiln_context_message(ctx));
        return;
    }
    conv_on(k, "algo cache: timed");
    kiln_cuda_stats st = stats_of(k);
    check(st.algos_timed >= 1 && st.algos_written >= 1 && file_exists(path),
          "a timed convolution algorithm is written to the cache file (directories created)", path);
    kiln_cuda_free(k);
    k = NULL;
    if (kiln_cuda_create(ctx, &o, &k)) {
        fail("algo cache", "create: %s", kiln_context_message(ctx));
        return;
    }
    conv_on(k, "algo cache: reused");
    st = stats_of(k);
    const int loaded = st.algos_loaded;
    check(loaded >= 1 && st.algos_timed == 0, "the next kiln_cuda reads it and times nothing", path);
    kiln_cuda_free(k);
    k = NULL;
    FILE *f = fopen(path, "a");
    if (f) {
        fputs("garbage\n\x01\x02|||\nNVIDIA|x|fwd|algo=1 math=0 bytes=0 ms=0\n", f);
        fputs("NVIDIA H200|91900|fwd f16 truncated|algo=1 math=1 byt", f);
        fclose(f);
    }
    if (kiln_cuda_create(ctx, &o, &k)) {
        fail("algo cache", "create with a corrupt file: %s", kiln_context_message(ctx));
        return;
    }
    conv_on(k, "algo cache: corrupt file");
    st = stats_of(k);
    check(st.algos_loaded == loaded && st.algos_timed == 0, "bad lines in the cache file are ignored", path);
    kiln_cuda_free(k);
    k = NULL;
    remove(path2);
    kiln_cuda_options h = {.device = 0, .arena_bytes = (size_t)64 << 20, .algo_cache = path2, .no_autotune = 1};
    if (!kiln_cuda_create(ctx, &h, &k)) {
        conv_on(k, "heuristic algorithm");
        st = stats_of(k);
        check(st.algos_heuristic >= 1 && st.algos_timed == 0 && st.algos_loaded == 0 && !file_exists(path2),
              "without autotuning cuDNN's heuristic chooses, nothing is timed or written", path2);
        kiln_cuda_free(k);
        k = NULL;
    }
    kiln_cuda_options d = {.device = 0, .arena_bytes = (size_t)64 << 20, .algo_cache = "", .deterministic = 1};
    if (!kiln_cuda_create(ctx, &d, &k)) {
        conv_on(k, "deterministic algorithm");
        st = stats_of(k);
        check(st.algos_timed >= 1 && st.algos_written == 0, "deterministic choices are timed; \"\" writes no cache",
              "");
        kiln_cuda_free(k);
    }
}

/* ------------------------------------------------- direct convolutions */

/* Convolutions with one input channel and one group, which conv_direct.cu runs instead of
 * cuDNN: 1, 3x3, 5x5, 1x7 and 7x7 kernels, strides, dilations, symmetric and asymmetric
 * pads (SAME_UPPER too), with and without bias, 1-D, channel counts that are and are not
 * a multiple of 8 (NHWC's vector stores), mnist-net's conv1 at batch 64. */
typedef struct direct_shape {
    const char *attrs, *label;
    int64_t x[5], w[5], y[5]; /* dims ended by -1 */
    bool bias;
} direct_shape;

static const direct_shape DIRECT[] = {
    {"pads=[1,1,1,1]", "3x3 pad 1 bias", {2, 1, 9, 11, -1}, {4, 1, 3, 3, -1}, {2, 4, 9, 11, -1}, true},
    {"", "5x5 no pad, no bias", {2, 1, 12, 10, -1}, {6, 1, 5, 5, -1}, {2, 6, 8, 6, -1}, false},
    {"pads=[0,3,0,3]", "1x7 pad 3", {2, 1, 6, 15, -1}, {8, 1, 1, 7, -1}, {2, 8, 6, 15, -1}, true},
    {"kernel_shape=[3,3];strides=[2,2]", "stride 2", {3, 1, 13, 10, -1}, {16, 1, 3, 3, -1}, {3, 16, 6, 4, -1}, true},
    {"dilations=[2,2];pads=[2,2,2,2]", "dilation 2, no bias", {2, 1, 12, 10, -1}, {8, 1, 3, 3, -1},
     {2, 8, 12, 10, -1}, false},
    {"pads=[0,1,2,1]", "asymmetric pads", {2, 1, 8, 8, -1}, {5, 1, 3, 3, -1}, {2, 5, 8, 8, -1}, true},
    {"auto_pad=SAME_UPPER;strides=[2,2]", "SAME_UPPER stride 2, 4x4", {1, 1, 9, 9, -1}, {8, 1, 4, 4, -1},
     {1, 8, 5, 5, -1}, true},
    {"strides=[2,1];pads=[3,3,3,3]", "7x7 strides (2,1) pad 3", {2, 1, 11, 9, -1}, {12, 1, 7, 7, -1},
     {2, 12, 6, 9, -1}, true},
    {"", "1x1", {2, 1, 5, 7, -1}, {3, 1, 1, 1, -1}, {2, 3, 5, 7, -1}, true},
    {"kernel_shape=[3,3]", "mnist conv1 (batch 64)", {64, 1, 28, 28, -1}, {32, 1, 3, 3, -1}, {64, 32, 26, 26, -1},
     true},
    {"pads=[1,1,1,1]", "odd: 5 channels, 17x13", {3, 1, 17, 13, -1}, {5, 1, 3, 3, -1}, {3, 5, 17, 13, -1}, true},
    {"pads=[2,2]", "1-D", {2, 1, 20, -1}, {4, 1, 5, -1}, {2, 4, 20, -1}, true},
    /* the weight gradient in several chunks of 1,024 positions, the last one partial */
    {"pads=[2,2,2,2]", "5x5, 11 chunks", {7, 1, 40, 37, -1}, {3, 1, 5, 5, -1}, {7, 3, 40, 37, -1}, true},
    {"pads=[3,3,3,3]", "7x7, 4 chunks", {4, 1, 30, 30, -1}, {6, 1, 7, 7, -1}, {4, 6, 30, 30, -1}, false},
};
#define N_DIRECT ((int)(sizeof DIRECT / sizeof DIRECT[0]))

static inp dims_of(const int64_t *d) {
    inp r = {.missing = false};
    memcpy(r.dims, d, 5 * sizeof *d);
    return r;
}

/* Conv on every shape: all NCHW, all NHWC, and X and W labelled NCHW with Y NHWC (the
 * same bytes for one channel); f32 also with every pointer off 16-byte alignment (NHWC's
 * scalar stores). tag: a word for the labels. */
static void direct_forward_cases(const char *tag) {
    const unsigned layouts[] = {0, NHWC_IN(0) | NHWC_IN(1) | NHWC_OUT, NHWC_OUT};
    atol_scale = 1e-5;
    for (int l = 0; l < 3; l++) {
        layout = layouts[l];
        for (int i = 0; i < N_DIRECT; i++) {
            char label[160];
            snprintf(label, sizeof label, "%s C=1 %s%s", tag, DIRECT[i].label, l == 2 ? ", X NCHW, Y NHWC" : "");
            const inp spec[3] = {dims_of(DIRECT[i].x), dims_of(DIRECT[i].w), XR(-1, 1, DIRECT[i].w[0])};
            floats("Conv", DIRECT[i].attrs, 0, true, 2e-5, 1e-4, label, spec, DIRECT[i].bias ? 3 : 2);
        }
    }
    layout = 0;
    atol_scale = 0;
}

/* kiln.ConvGradWeight on every shape, f32 also misaligned: all NCHW, all NHWC, and X
 * and W labelled NCHW with dY and dW NHWC (the first layer of a training graph the
 * layout pass made NHWC). */
static void direct_wgrad_cases(const char *tag) {
    const unsigned layouts[] = {0, NHWC_IN(0) | NHWC_IN(1) | NHWC_IN(2) | NHWC_OUT, NHWC_IN(1) | NHWC_OUT};
    atol_scale = 1e-5;
    for (int l = 0; l < 3; l++) {
        layout = layouts[l];
        for (int i = 0; i < N_DIRECT; i++) {
            char label[160];
            snprintf(label, sizeof label, "%s C=1 %s%s", tag, DIRECT[i].label, l == 2 ? ", X NCHW, dY NHWC" : "");
            const inp gw[3] = {dims_of(DIRECT[i].x), dims_of(DIRECT[i].y), dims_of(DIRECT[i].w)};
            floats("kiln.ConvGradWeight", DIRECT[i].attrs, 0, true, 2e-5, 1e-4, label, gw, 3);
        }
    }
    layout = 0;
    atol_scale = 0;
}

/* kiln.FusedConv that the direct kernels take: Relu or no activation, with or without
 * bias, no residual; both layouts. */
static void direct_fused_cases(const char *tag) {
    char label[160];
    fused_reference(compose_conv);
    atol_scale = 1e-5;
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        layout = nhwc ? NHWC_IN(0) | NHWC_IN(1) | NHWC_OUT : 0;
        snprintf(label, sizeof label, "%s C=1 relu, bias", tag);
        floats("kiln.FusedConv", "pads=[1,1,1,1];activation=Relu", 0, false, 2e-5, 1e-4, label,
               INPUTS(X(2, 1, 9, 9), X(16, 1, 3, 3), X(16)));
        snprintf(label, sizeof label, "%s C=1 relu, no bias, asymmetric pads", tag);
        floats("kiln.FusedConv", "pads=[1,0,0,2];activation=Relu", 0, false, 2e-5, 1e-4, label,
               INPUTS(X(2, 1, 9, 9), X(5, 1, 3, 3)));
        snprintf(label, sizeof label, "%s C=1 no activation, bias", tag);
        floats("kiln.FusedConv", "pads=[2,2,2,2]", 0, false, 2e-5, 1e-4, label,
               INPUTS(X(2, 1, 8, 10), X(8, 1, 5, 5), X(8)));
        snprintf(label, sizeof label, "%s C=1 mnist conv1 relu (batch 64)", tag);
        floats("kiln.FusedConv", "kernel_shape=[3,3];activation=Relu", 0, false, 2e-5, 1e-4, label,
               INPUTS(X(64, 1, 28, 28), X(32, 1, 3, 3), X(32)));
    }
    layout = 0;
    atol_scale = 0;
    fused_reference(NULL);
}

/* One-channel kiln.FusedConv the direct kernels leave to cuDNN: another activation, or a
 * residual. */
static void direct_fallback_cases(const char *tag) {
    char label[160];
    fused_reference(compose_conv);
    atol_scale = 1e-5;
    snprintf(label, sizeof label, "%s C=1 sigmoid (cuDNN)", tag);
    floats("kiln.FusedConv", "pads=[1,1,1,1];activation=Sigmoid", 0, false, 2e-5, 1e-4, label,
           INPUTS(X(2, 1, 9, 9), X(8, 1, 3, 3), X(8)));
    snprintf(label, sizeof label, "%s C=1 relu, residual (cuDNN)", tag);
    floats("kiln.FusedConv", "pads=[1,1,1,1];activation=Relu", 0, false, 2e-5, 1e-4, label,
           INPUTS(X(2, 1, 9, 9), X(8, 1, 3, 3), X(8), X(2, 8, 9, 9)));
    atol_scale = 0;
    fused_reference(NULL);
}

/* Run a group of cases on the current kiln_cuda and check from its counter that all of
 * its device runs (want_direct) or none of them went through the direct kernels. */
static void direct_counted(void (*group)(const char *), const char *tag, const char *what, bool want_direct) {
    const int runs0 = device_runs, calls0 = cu ? stats_of(cu).conv_direct_calls : 0;
    group(tag);
    if (!cu || device_runs == runs0) return; /* dry run, or filtered out */
    const int runs = device_runs - runs0, calls = stats_of(cu).conv_direct_calls - calls0;
    char label[200], detail[120];
    snprintf(label, sizeof label, "%s %s: %d of %d device runs went through the direct kernels (want %s)", tag, what,
             calls, runs, want_direct ? "all" : "none");
    snprintf(detail, sizeof detail, "stats.conv_direct_calls rose by %d", calls);
    check(calls == (want_direct ? runs : 0), label, detail);
}

/* The weight gradient twice on the same inputs: the same bits (no atomics; the chunks
 * are added in a fixed order), in every dtype, for mnist-net's conv1, the odd shape and
 * the shapes of several chunks. */
static void direct_determinism(void) {
    for (int i = 0; cu && i < N_DIRECT; i++) {
        const char *l = DIRECT[i].label;
        if (!strstr(l, "mnist") && !strstr(l, "odd") && !strstr(l, "chunks")) continue;
        for (int k = 0; k < 3; k++) {
            kiln_tensor *got[2] = {NULL, NULL};
            const inp gw[3] = {dims_of(DIRECT[i].x), dims_of(DIRECT[i].y), dims_of(DIRECT[i].w)};
            atol_scale = 1e-5;
            for (int r = 0; r < 2; r++) {
                char label[160];
                snprintf(label, sizeof label, "[direct] C=1 %s, determinism run %d", DIRECT[i].label, r + 1);
                keep_out = &got[r];
                run_case("kiln.ConvGradWeight", DIRECT[i].attrs, 0, FLOATS[k], false, 2e-5, 1e-4, label, gw, 3);
                keep_out = NULL;
            }
            atol_scale = 0;
            char label[200];
            snprintf(label, sizeof label, "kiln.ConvGradWeight [direct] C=1 %s %s: bit-identical dW in two runs",
                     DIRECT[i].label, kiln_dtype_name(FLOATS[k]));
            if (got[0] || got[1]) /* else filtered out */
                check(got[0] && got[1] && memcmp(got[0]->data, got[1]->data, kiln_tensor_nbytes(got[0])) == 0, label,
                      "the two runs differ");
            kiln_tensor_free(got[0]);
            kiln_tensor_free(got[1]);
        }
    }
}

/* Every one-channel case through the direct kernels (cu has conv_direct on), then on a
 * kiln_cuda with it off (kiln_cuda_options.no_conv_direct, --disable conv-direct): cuDNN,
 * the same references. */
static void direct_cases(void) {
    direct_counted(direct_forward_cases, "[direct]", "Conv", true);
    direct_counted(direct_wgrad_cases, "[direct]", "kiln.ConvGradWeight", true);
    direct_counted(direct_fused_cases, "[direct]", "kiln.FusedConv", true);
    direct_counted(direct_fallback_cases, "[direct]", "kiln.FusedConv", false);
    direct_determinism();
    if (!cu) return;
    kiln_cuda_options o = {.device = 0, .arena_bytes = (size_t)256 << 20, .no_conv_direct = 1};
    kiln_cuda *off = NULL, *saved = cu;
    if (kiln_cuda_create(ctx, &o, &off)) {
        fail("conv-direct off", "create: %s", kiln_context_message(ctx));
        return;
    }
    cu = off;
    direct_counted(direct_forward_cases, "[cuDNN]", "Conv", false);
    direct_counted(direct_wgrad_cases, "[cuDNN]", "kiln.ConvGradWeight", false);
    direct_counted(direct_fused_cases, "[cuDNN]", "kiln.FusedConv", false);
    cu = saved;
    kiln_cuda_free(off);
}

/* NHWC FusedConvs of at most 64 values a window, which conv_pointwise.cu takes in f16 / bf16:
 * 1x1 products (X's rows copied as they are) over several 128-row tiles and a partial one,
 * partial 64-channel tiles, K padded to 16, 32, 48 and 64, every activation, with and
 * without bias and residual; and windows (strided, padded, dilated), copied a pixel at a time
 * or gathered a value at a time. */
static void pointwise_group(const char *tag) {
    static const struct {
        const char *attrs, *label;
        int64_t c, m;
        bool bias, z;
    } v[] = {
        {"activation=Silu", "24 -> 144 silu, bias", 24, 144, true, false},
        {"activation=Relu", "64 -> 200 relu, bias, residual", 64, 200, true, true},
        {"activation=Clip;act_min=0.0;act_max=6.0", "16 -> 96 relu6, bias", 16, 96, true, false},
        {"activation=HardSwish", "40 -> 120 hardswish, bias, residual", 40, 120, true, true},
        {"", "8 -> 16 no activation, no bias", 8, 16, false, false},
        {"", "32 -> 64 no activation, residual, no bias", 32, 64, false, true},
        {"activation=LeakyRelu;alpha=0.1", "56 -> 24 leaky relu, bias", 56, 24, true, false},
        {"activation=Sigmoid", "48 -> 72 sigmoid, bias", 48, 72, true, false},
        {"activation=HardSigmoid;alpha=0.3;beta=0.4", "16 -> 32 hardsigmoid, bias", 16, 32, true, false},
        {"activation=Tanh", "24 -> 40 tanh, bias", 24, 40, true, false},
        {"activation=Gelu", "64 -> 256 gelu, bias, residual", 64, 256, true, true},
        {"activation=GeluTanh", "32 -> 128 gelu tanh, bias", 32, 128, true, false},
    };
    char label[160];
    fused_reference(compose_conv);
    atol_scale = 1e-5;
    layout = NHWC_IN(0) | NHWC_IN(1) | NHWC_IN(3) | NHWC_OUT;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        const inp spec[4] = {X(2, v[i].c, 13, 11), X(v[i].m, v[i].c, 1, 1), X(v[i].m), X(2, v[i].m, 13, 11)};
        inp use[4];
        memcpy(use, spec, sizeof use);
        if (!v[i].bias) use[2] = (inp)NONE;
        snprintf(label, sizeof label, "%s 1x1 %s", tag, v[i].label);
        floats("kiln.FusedConv", v[i].attrs, 0, false, 2e-5, 1e-4, label, use, v[i].z ? 4 : 3);
    }
    /* windows: RGB stems (3x3 stride 2 over 3 or 4 channels, asymmetric pads, 4x4 stride 4
     * over 3 or 4), a dilated 3x3 over 7 channels, 5x5 over 2, a 1x1 of stride 2; copied in 8-
     * or 16-byte pieces where C is a multiple of 4 or 8, else gathered a value at a time */
    static const struct {
        const char *attrs, *label;
        int64_t c, m, k, h, w;
    } win[] = {
        {"strides=[2,2];pads=[1,1,1,1];activation=Relu", "3x3 stride 2, 3 -> 32 relu, bias", 3, 32, 3, 17, 15},
        {"strides=[2,2];pads=[0,0,1,1];activation=Silu", "3x3 stride 2 asymmetric pads, 4 -> 48 silu, bias", 4, 48, 3,
         16, 16},
        {"strides=[4,4]", "4x4 stride 4, 3 -> 96, bias", 3, 96, 4, 16, 20},
        {"dilations=[2,2];pads=[2,2,2,2];activation=HardSwish", "3x3 dilated, 7 -> 16 hardswish, bias", 7, 16, 3, 9,
         9},
        {"pads=[2,2,2,2];activation=Gelu", "5x5, 2 -> 8 gelu, bias", 2, 8, 5, 8, 8},
        {"strides=[4,4];activation=Relu", "4x4 stride 4, 4 -> 40 relu, bias", 4, 40, 4, 17, 21},
        {"strides=[2,2];activation=Relu", "1x1 stride 2, 32 -> 48 relu, bias", 32, 48, 1, 15, 14},
        {"pads=[1,1,1,1];activation=Tanh", "3x3, 4 -> 8 tanh, bias (one 128-row tile)", 4, 8, 3, 5, 6},
    };
    for (size_t i = 0; i < sizeof win / sizeof win[0]; i++) {
        snprintf(label, sizeof label, "%s %s", tag, win[i].label);
        floats("kiln.FusedConv", win[i].attrs, 0, false, 2e-5, 1e-4, label,
               INPUTS(X(2, win[i].c, win[i].h, win[i].w), X(win[i].m, win[i].c, win[i].k, win[i].k), X(win[i].m)));
    }
    layout = 0;
    atol_scale = 0;
    fused_reference(NULL);
}

/* pointwise_group with KILN_CUDA_PW=mode (1: the kernel wherever it applies, 0: never),
 * checking from the counter that its f16 / bf16 runs (two of each case's three) all went
 * through the kernel, or none did. */
static void pointwise_with(const char *tag, const char *mode) {
    const int runs0 = device_runs, calls0 = cu ? stats_of(cu).conv_pointwise_calls : 0;
    setenv("KILN_CUDA_PW", mode, 1);
    pointwise_group(tag);
    unsetenv("KILN_CUDA_PW");
    if (!cu || device_runs == runs0) return; /* dry run, or filtered out */
    const int runs = device_runs - runs0, calls = stats_of(cu).conv_pointwise_calls - calls0;
    const bool on = strcmp(mode, "1") == 0;
    char label[200], detail[120];
    snprintf(label, sizeof label, "%s: %d of %d device runs went through the pointwise kernel (want %s)", tag, calls,
             runs, on ? "the f16 and bf16 ones" : "none");
    snprintf(detail, sizeof detail, "stats.conv_pointwise_calls rose by %d", calls);
    check(calls == (on ? runs / 3 * 2 : 0), label, detail);
}

static void pointwise_cases(void) {
    pointwise_with("[pointwise kernel]", "1");
    pointwise_with("[pointwise off]", "0");
    pointwise_group("[pointwise timed]");
}

/* Depthwise convolutions (group == C == M), which conv_depthwise.cu runs instead of
 * cuDNN: Conv in both layouts (f32 also misaligned: NHWC's scalar path), C a multiple of 8
 * (NHWC's vector path) or not, 7x7 with stride 1 (the sliding window) and 3x3 with stride
 * 2; kiln.ConvGradInput with stride 2; kiln.FusedConv with HardSwish, bias and residual. */
static void depthwise_group(const char *tag) {
    char label[160];
    atol_scale = 1e-5;
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        layout = nhwc ? NHWC_IN(0) | NHWC_IN(1) | NHWC_OUT : 0;
        snprintf(label, sizeof label, "%s depthwise 7x7 pad 3, 32 channels%s", tag, nhwc ? ", NHWC" : "");
        floats("Conv", "group=32;pads=[3,3,3,3]", 0, true, 2e-5, 1e-4, label,
               INPUTS(X(2, 32, 14, 13), X(32, 1, 7, 7), X(32)));
        /* the tiled kernel (NHWC, stride 1): several row, column and channel tiles, the last
         * channel chunk part-filled (96 channels in chunks of 40), a last column tile of 3 */
        snprintf(label, sizeof label, "%s depthwise 7x7 pad 3, 96 channels, 20x19%s", tag, nhwc ? ", NHWC" : "");
        floats("Conv", "group=96;pads=[3,3,3,3]", 0, true, 2e-5, 1e-4, label,
               INPUTS(X(2, 96, 20, 19), X(96, 1, 7, 7), X(96)));
        snprintf(label, sizeof label, "%s depthwise 3x3 pad 1, 40 channels, 9x60%s", tag, nhwc ? ", NHWC" : "");
        floats("Conv", "group=40;pads=[1,1,1,1]", 0, true, 2e-5, 1e-4, label,
               INPUTS(X(1, 40, 9, 60), X(40, 1, 3, 3), X(40)));
        snprintf(label, sizeof label, "%s depthwise 5x5 stride 2, 48 channels, 17x18%s", tag, nhwc ? ", NHWC" : "");
        floats("Conv", "group=48;pads=[2,2,2,2];strides=[2,2]", 0, true, 2e-5, 1e-4, label,
               INPUTS(X(2, 48, 17, 18), X(48, 1, 5, 5), X(48)));
        snprintf(label, sizeof label, "%s depthwise 3x3 stride 2, 20 channels, no bias%s", tag, nhwc ? ", NHWC" : "");
        floats("Conv", "group=20;pads=[1,1,1,1];strides=[2,2]", 0, true, 2e-5, 1e-4, label,
               INPUTS(X(2, 20, 15, 15), X(20, 1, 3, 3)));
        layout = nhwc ? NHWC_IN(0) | NHWC_IN(1) | NHWC_IN(2) | NHWC_OUT : 0;
        snprintf(label, sizeof label, "%s depthwise input gradient 3x3 stride 2%s", tag, nhwc ? ", NHWC" : "");
        floats("kiln.ConvGradInput", "group=20;pads=[1,1,1,1];strides=[2,2]", 0, true, 2e-5, 1e-4, label,
               INPUTS(X(2, 20, 8, 8), X(20, 1, 3, 3), X(2, 20, 15, 15)));
    }
    fused_reference(compose_conv);
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        layout = nhwc ? NHWC_IN(0) | NHWC_IN(1) | NHWC_IN(3) | NHWC_OUT : 0;
        snprintf(label, sizeof label, "%s depthwise 5x5 HardSwish, bias, residual%s", tag, nhwc ? ", NHWC" : "");
        floats("kiln.FusedConv", "group=24;pads=[2,2,2,2];activation=HardSwish", 0, false, 2e-5, 1e-4, label,
               INPUTS(X(2, 24, 11, 9), X(24, 1, 5, 5), X(24), X(2, 24, 11, 9)));
        /* Silu / Gelu in the depthwise kernels' epilogue (first run on a GPU with this
         * test): EfficientNet's 3x3 and 5x5 with BN folded into the bias, the tiled NHWC
         * kernel (96 channels, stride 1), the per-tile one (stride 2), 12 channels (not a
         * multiple of 8: the scalar path) */
        snprintf(label, sizeof label, "%s depthwise 3x3 Silu, bias, 96 channels%s", tag, nhwc ? ", NHWC" : "");
        floats("kiln.FusedConv", "group=96;pads=[1,1,1,1];activation=Silu", 0, false, 2e-5, 1e-4, label,
               INPUTS(X(2, 96, 14, 13), X(96, 1, 3, 3), X(96)));
        snprintf(label, sizeof label, "%s depthwise 5x5 stride 2 Silu, bias, 48 channels%s", tag, nhwc ? ", NHWC" : "");
        floats("kiln.FusedConv", "group=48;pads=[2,2,2,2];strides=[2,2];activation=Silu", 0, false, 2e-5, 1e-4, label,
               INPUTS(X(2, 48, 17, 18), X(48, 1, 5, 5), X(48)));
        snprintf(label, sizeof label, "%s depthwise 3x3 Silu, residual, 12 channels%s", tag, nhwc ? ", NHWC" : "");
        floats("kiln.FusedConv", "group=12;pads=[1,1,1,1];activation=Silu", 0, false, 2e-5, 1e-4, label,
               INPUTS(X(1, 12, 9, 10), X(12, 1, 3, 3), X(12), X(1, 12, 9, 10)));
        snprintf(label, sizeof label, "%s depthwise 7x7 Gelu, bias, 32 channels%s", tag, nhwc ? ", NHWC" : "");
        floats("kiln.FusedConv", "group=32;pads=[3,3,3,3];activation=Gelu", 0, false, 2e-5, 1e-4, label,
               INPUTS(X(2, 32, 14, 13), X(32, 1, 7, 7), X(32)));
        snprintf(label, sizeof label, "%s depthwise 3x3 GeluTanh, bias, 16 channels%s", tag, nhwc ? ", NHWC" : "");
        floats("kiln.FusedConv", "group=16;pads=[1,1,1,1];activation=GeluTanh", 0, false, 2e-5, 1e-4, label,
               INPUTS(X(2, 16, 10, 10), X(16, 1, 3, 3), X(16)));
    }
    layout = 0;
    atol_scale = 0;
    fused_reference(NULL);
}

/* depthwise_group on cu, every device run counted through stats.conv_depthwise_calls
 * (want_dw: all of them, else none). */
static void depthwise_counted(const char *tag, bool want_dw) {
    const int runs0 = device_runs, calls0 = cu ? stats_of(cu).conv_depthwise_calls : 0;
    depthwise_group(tag);
    if (!cu || device_runs == runs0) return; /* dry run, or filtered out */
    const int runs = device_runs - runs0, calls = stats_of(cu).conv_depthwise_calls - calls0;
    char label[200], detail[120];
    snprintf(label, sizeof label, "%s depthwise: %d of %d device runs went through conv_depthwise.cu (want %s)", tag,
             calls, runs, want_dw ? "all" : "none");
    snprintf(detail, sizeof detail, "stats.conv_depthwise_calls rose by %d", calls);
    check(calls == (want_dw ? runs : 0), label, detail);
}

/* The depthwise cases on a kiln_cuda made with KILN_CUDA_DW_GRAPH=mode (1: cuDNN's graph +
 * kiln's epilogue, 2: the graph with the epilogue inside) and no autotune: each device run
 * goes through the graph where it has a plan (f16 / bf16 NHWC) and through conv_depthwise.cu
 * otherwise; some must take the graph. */
static void depthwise_graph(const char *tag, const char *mode) {
    kiln_cuda *other = NULL, *saved = cu;
    setenv("KILN_CUDA_DW_GRAPH", mode, 1);
    const kiln_cuda_options o = {.device = 0, .arena_bytes = (size_t)256 << 20, .no_autotune = 1};
    const kiln_status st = kiln_cuda_create(ctx, &o, &other);
    unsetenv("KILN_CUDA_DW_GRAPH");
    if (st) {
        fail(tag, "create: %s", kiln_context_message(ctx));
        return;
    }
    cu = other;
    const int runs0 = device_runs;
    depthwise_group(tag);
    const int runs = device_runs - runs0, graph = stats_of(cu).conv_graph_calls,
              kernel = stats_of(cu).conv_depthwise_calls;
    char label[200], detail[120];
    snprintf(label, sizeof label, "%s depthwise: %d of %d device runs on cuDNN's graph, %d on conv_depthwise.cu", tag,
             graph, runs, kernel);
    snprintf(detail, sizeof detail, "want some on the graph and the two adding up to the runs");
    if (runs > 0) check(graph > 0 && graph + kernel == runs, label, detail);
    cu = saved;
    kiln_cuda_free(other);
}

/* The depthwise cases on a kiln_cuda made with options o (the rest as the test's), counted. */
static void depthwise_with(const char *tag, kiln_cuda_options o, bool want_dw) {
    kiln_cuda *other = NULL, *saved = cu;
    if (kiln_cuda_create(ctx, &o, &other)) {
        fail(tag, "create: %s", kiln_context_message(ctx));
        return;
    }
    cu = other;
    depthwise_counted(tag, want_dw);
    cu = saved;
    kiln_cuda_free(other);
}

/* Products run back to back, as a graph replays them. efficientnet_b7's 1x1 projection at
 * batch 128 (f16 NHWC, 288 -> 48 channels at 56x56, bias and residual: cuBLASLt's M=401408
 * N=48 K=288 with the bias epilogue and C): cuBLASLt 13.1 faulted on one of its candidates
 * (a 1x4x1 cluster) when launched back to back, and autotune picked it on most runs; matmul.c's
 * lt_algo_safe turns such candidates down. Here the node is timed (autotune), run 300 times
 * more with no synchronization, and its output checked after them. */
static void back_to_back_cases(void) {
    const char *label = "1x1 288 -> 48, bias, residual, batch 128 at 56x56, 300 runs back to back";
    char full[200];
    snprintf(full, sizeof full, "kiln.FusedConv %s f16 NHWC", label); /* run_tensors' label */
    if (!wanted(full)) return;
    /* its inputs and outputs take ~330 MB: a kiln_cuda with an arena to hold them */
    kiln_cuda *big = NULL, *saved = cu;
    const kiln_cuda_options o = {.device = 0, .arena_bytes = (size_t)1 << 30};
    if (kiln_cuda_create(ctx, &o, &big)) {
        fail("[back to back]", "create: %s", kiln_context_message(ctx));
        return;
    }
    cu = big;
    layout = NHWC_IN(0) | NHWC_IN(1) | NHWC_IN(3) | NHWC_OUT;
    repeat_runs = 300;
    /* the reference: Conv, Add in f32, rounded once (as cuBLASLt's epilogue); the op's own CPU
     * reference rounds the convolution to f16 before the epilogue, so over 288 channels the two
     * differ by a few f16 steps of the sums' size: the tolerance grows with the outputs' largest */
    fused_reference(compose_conv);
    atol_scale = 2e-5;
    run_case("kiln.FusedConv", "", 0, KILN_F16, false, 2e-5, 1e-4, label,
             INPUTS(X(128, 288, 56, 56), X(48, 288, 1, 1), X(48), X(128, 48, 56, 56)));
    atol_scale = 0;
    fused_reference(NULL);
    repeat_runs = 0;
    layout = 0;
    cu = saved;
    kiln_cuda_free(big);
}

/* Two kiln_cuda made in turn on one new cache file (with autotune; environment variable env set
 * to "1" while each is made, where env is not NULL), each running group(tags[pass]) and its
 * stats kept in st[pass]. False where there is nothing to check: the test's filter left every
 * case out, or a kiln_cuda could not be made (a failure then). */
static bool two_on_one_cache(const char *tag, const char *env, void (*group)(const char *), const char *const tags[2],
                             kiln_cuda_stats st[2]) {
    char dir[] = "/tmp/kiln-kept-XXXXXX", path[128];
    if (!mkdtemp(dir)) {
        fail(tag, "%s", "mkdtemp failed");
        return false;
    }
    snprintf(path, sizeof path, "%s/algos.txt", dir);
    kiln_cuda *saved = cu;
    const int runs0 = device_runs;
    bool made = true;
    for (int pass = 0; pass < 2 && made; pass++) {
        kiln_cuda *k = NULL;
        if (env) setenv(env, "1", 1);
        const kiln_cuda_options o = {.device = 0, .arena_bytes = (size_t)256 << 20, .algo_cache = path};
        const kiln_status cs = kiln_cuda_create(ctx, &o, &k);
        if (env) unsetenv(env);
        if (cs) {
            fail(tag, "create: %s", kiln_context_message(ctx));
            made = false;
            break;
        }
        cu = k;
        group(tags[pass]);
        st[pass] = stats_of(k);
        cu = saved;
        kiln_cuda_free(k);
    }
    remove(path);
    rmdir(dir);
    return made && device_runs != runs0;
}

/* Depthwise choices are kept in the cache file with the algorithms: a kiln_cuda with autotune
 * times each depthwise problem's paths and writes its choice; a second on the same file takes
 * every choice from there, timing none, and gives the same answers (the references). */
static void depthwise_kept(const char *tag) {
    static const char *const tags[2] = {"[dw kept first]", "[dw kept second]"};
    kiln_cuda_stats st[2];
    if (!two_on_one_cache(tag, NULL, depthwise_group, tags, st)) return;
    char label[200];
    snprintf(label, sizeof label, "%s first kiln_cuda: %d depthwise problems timed, %d kept; second: %d timed, %d kept",
             tag, st[0].dw_timed, st[0].dw_kept, st[1].dw_timed, st[1].dw_kept);
    check(st[0].dw_timed > 0 && st[0].dw_kept == 0 && st[1].dw_timed == 0 && st[1].dw_kept == st[0].dw_timed, label,
          "want the second to time none and take every choice the first wrote");
}

/* The depthwise cases on conv_depthwise.cu (without autotune, the kernel always), on a
 * kiln_cuda with it off (kiln_cuda_options.no_conv_depthwise, --disable conv-depthwise:
 * cuDNN), and with autotune, which times both on each problem and keeps the faster: the
 * same references every time. */
static void depthwise_cases(void) {
    if (!cu) { /* dry run */
        depthwise_counted("[dw]", true);
        return;
    }
    depthwise_with("[dw kernel]", (kiln_cuda_options){.device = 0, .arena_bytes = (size_t)256 << 20, .no_autotune = 1},
                   true);
    depthwise_with("[dw cuDNN]",
                   (kiln_cuda_options){.device = 0, .arena_bytes = (size_t)256 << 20, .no_conv_depthwise = 1}, false);
    depthwise_group("[dw timed]");
    depthwise_graph("[dw graph]", "1");
    depthwise_graph("[dw graph epilogue]", "2");
    depthwise_kept("[dw kept]");
}

/* The forwards conv.c's conv_graph_decide asks cuDNN's ConvFwd graph for: grouped (not
 * depthwise) convolutions, RegNet's and ResNeXt's, and FusedConvs whose activation the
 * legacy fused call lacks; in f32 NCHW (the legacy API) and NHWC (f16 / bf16 there: the
 * graph where it has a plan). */
static void grouped_group(const char *tag) {
    char label[160];
    atol_scale = 1e-5;
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        layout = nhwc ? NHWC_IN(0) | NHWC_IN(1) | NHWC_OUT : 0;
        snprintf(label, sizeof label, "%s grouped 3x3, 4 groups of 8, bias%s", tag, nhwc ? ", NHWC" : "");
        floats("Conv", "group=4;pads=[1,1,1,1]", 0, true, 2e-5, 1e-4, label,
               INPUTS(X(2, 32, 11, 9), X(32, 8, 3, 3), X(32)));
        snprintf(label, sizeof label, "%s grouped 3x3 stride 2, 3 groups of 16 -> 24, no bias%s", tag,
                 nhwc ? ", NHWC" : "");
        floats("Conv", "group=3;pads=[1,1,1,1];strides=[2,2]", 0, true, 2e-5, 1e-4, label,
               INPUTS(X(2, 48, 13, 12), X(24, 16, 3, 3)));
        /* the gradients (ConvBwdData / ConvBwdFilter graphs, or the legacy API) */
        layout = nhwc ? NHWC_IN(0) | NHWC_IN(1) | NHWC_IN(2) | NHWC_OUT : 0;
        snprintf(label, sizeof label, "%s grouped input gradient 3x3 stride 2, 4 groups of 8%s", tag,
                 nhwc ? ", NHWC" : "");
        floats("kiln.ConvGradInput", "group=4;pads=[1,1,1,1];strides=[2,2]", 0, true, 2e-5, 1e-4, label,
               INPUTS(X(2, 32, 6, 5), X(32, 8, 3, 3), X(2, 32, 11, 9)));
        snprintf(label, sizeof label, "%s grouped weight gradient 3x3, 2 groups of 16%s", tag, nhwc ? ", NHWC" : "");
        floats("kiln.ConvGradWeight", "group=2;pads=[1,1,1,1]", 0, true, 2e-5, 1e-4, label,
               INPUTS(X(2, 32, 9, 10), X(2, 24, 9, 10), X(24, 16, 3, 3)));
        snprintf(label, sizeof label, "%s depthwise weight gradient 3x3, 32 channels%s", tag, nhwc ? ", NHWC" : "");
        floats("kiln.ConvGradWeight", "group=32;pads=[1,1,1,1]", 0, true, 2e-5, 1e-4, label,
               INPUTS(X(2, 32, 9, 10), X(2, 32, 9, 10), X(32, 1, 3, 3)));
    }
    fused_reference(compose_conv);
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        layout = nhwc ? NHWC_IN(0) | NHWC_IN(1) | NHWC_OUT : 0;
        snprintf(label, sizeof label, "%s grouped 3x3 Relu, bias, 2 groups of 24%s", tag, nhwc ? ", NHWC" : "");
        floats("kiln.FusedConv", "group=2;pads=[1,1,1,1];activation=Relu", 0, false, 2e-5, 1e-4, label,
               INPUTS(X(2, 48, 10, 9), X(48, 24, 3, 3), X(48)));
        snprintf(label, sizeof label, "%s 3x3 Silu, bias, 16 -> 32%s", tag, nhwc ? ", NHWC" : "");
        floats("kiln.FusedConv", "pads=[1,1,1,1];activation=Silu", 0, false, 2e-5, 1e-4, label,
               INPUTS(X(2, 16, 12, 11), X(32, 16, 3, 3), X(32)));
        snprintf(label, sizeof label, "%s 3x3 stride 2 Clip 0..6, bias, 24 -> 16%s", tag, nhwc ? ", NHWC" : "");
        floats("kiln.FusedConv", "pads=[1,1,1,1];strides=[2,2];activation=Clip;act_min=0.0;act_max=6.0", 0, false,
               2e-5, 1e-4, label, INPUTS(X(2, 24, 13, 13), X(16, 24, 3, 3), X(16)));
        layout = nhwc ? NHWC_IN(0) | NHWC_IN(1) | NHWC_IN(3) | NHWC_OUT : 0;
        snprintf(label, sizeof label, "%s grouped 3x3 HardSwish, bias, residual, 4 groups of 8%s", tag,
                 nhwc ? ", NHWC" : "");
        floats("kiln.FusedConv", "group=4;pads=[1,1,1,1];activation=HardSwish", 0, false, 2e-5, 1e-4, label,
               INPUTS(X(2, 32, 9, 10), X(32, 8, 3, 3), X(32), X(2, 32, 9, 10)));
    }
    layout = 0;
    atol_scale = 0;
    fused_reference(NULL);
}

/* The graphs' engines timed fastest are kept in the cache file: a second kiln_cuda on the same
 * file (with autotune and KILN_CUDA_CONV_GRAPH=1, so the graphs run and their plans are
 * timed) makes the kept engine's plan alone, and gives the same answers. */
static void graph_plans_kept_cases(void) {
    static const char *const tags[2] = {"[graph plans timed]", "[graph plans kept]"};
    kiln_cuda_stats st[2];
    if (!two_on_one_cache("[graph plans]", "KILN_CUDA_CONV_GRAPH", grouped_group, tags, st)) return;
    char label[200];
    snprintf(label, sizeof label, "[graph plans] first kiln_cuda: %d choices written, %d plans made alone; second: %d made alone",
             st[0].algos_written, st[0].graph_plans_kept, st[1].graph_plans_kept);
    check(st[0].algos_written > 0 && st[0].graph_plans_kept == 0 && st[1].graph_plans_kept > 0, label,
          "want the second to make the kept engines' plans alone");
}

/* The grouped cases as chosen (autotune: the legacy API and the graphs timed) and on a
 * kiln_cuda made with KILN_CUDA_CONV_GRAPH=1 and no autotune: there some device runs must
 * go through the graph (f16 / bf16 NHWC), the same references every time. */
static void grouped_cases(void) {
    grouped_group("[grouped timed]");
    if (!cu) return; /* dry run */
    kiln_cuda *other = NULL, *saved = cu;
    setenv("KILN_CUDA_CONV_GRAPH", "1", 1);
    const kiln_cuda_options o = {.device = 0, .arena_bytes = (size_t)256 << 20, .no_autotune = 1};
    const kiln_status st = kiln_cuda_create(ctx, &o, &other);
    unsetenv("KILN_CUDA_CONV_GRAPH");
    if (st) {
        fail("[grouped graph]", "create: %s", kiln_context_message(ctx));
        return;
    }
    cu = other;
    const int runs0 = device_runs;
    grouped_group("[grouped graph]");
    const int runs = device_runs - runs0, graph = stats_of(cu).conv_graph_calls;
    char label[200];
    snprintf(label, sizeof label, "[grouped graph] %d of %d device runs on cuDNN's graph", graph, runs);
    if (runs > 0) check(graph > 0 && graph < runs, label, "want some (f16 / bf16 NHWC), not all (f32 NCHW)");
    cu = saved;
    kiln_cuda_free(other);
    graph_plans_kept_cases();
}

/* ----------------------------------------------------------- whole models */

static kiln_model *SM;

static void s_init(const char *name, int ndim, const int64_t *dims, double lo, double hi) {
    kiln_tensor *t = kt_rand(KILN_F32, ndim, dims, lo, hi, 4242 + (uint64_t)SM->n_values);
    if (!t || kiln_model_add_initializer(SM, name, t)) fail("model", "initializer %s", name);
    kiln_tensor_free(t);
}

static void s_node(const char *op, int n_in, const char *const *in, const char *out, const char *attrs) {
    kiln_node *node = NULL;
    if (kiln_model_add_node(SM, op, out, n_in, in, 1, &out, &node)) {
        fail("model", "node: %s", kiln_context_message(ctx));
        return;
    }
    kiln_attr *a = NULL;
    int na = 0;
    kiln_attrs_parse(ctx, attrs, &a, &na);
    for (int i = 0; i < na; i++) {
        if (a[i].type == KILN_ATTR_INTS) kiln_node_set_ints(node, a[i].name, a[i].n, a[i].ints);
        if (a[i].type == KILN_ATTR_INT) kiln_node_set_int(node, a[i].name, a[i].i);
        kiln_attr_clear(&a[i]);
    }
    free(a);
}

/* stem conv + BN + Relu, MaxPool, a residual block, GAP, Flatten, Gemm; the block's
 * output is a second graph output (NHWC inside, converted back under its own name). */
static kiln_model *small_resnet(void) {
    if (kiln_model_create(ctx, &SM)) return NULL;
    kiln_model_add_input(SM, "x", KILN_F32, 4, (int64_t[]){-1, 3, 16, 16});
    s_init("w1", 4, (int64_t[]){16, 3, 3, 3}, -0.5, 0.5);
    s_init("b1", 1, (int64_t[]){16}, -0.5, 0.5);
    s_init("s", 1, (int64_t[]){16}, 0.5, 1.5);
    s_init("o", 1, (int64_t[]){16}, -0.5, 0.5);
    s_init("m", 1, (int64_t[]){16}, -0.5, 0.5);
    s_init("v", 1, (int64_t[]){16}, 0.5, 2);
    s_init("w2", 4, (int64_t[]){16, 16, 3, 3}, -0.2, 0.2);
    s_init("fc", 2, (int64_t[]){16, 10}, -0.5, 0.5);
    s_node("Conv", 3, (const char *[]){"x", "w1", "b1"}, "c1", "pads=[1,1,1,1];strides=[2,2]");
    s_node("BatchNormalization", 5, (const char *[]){"c1", "s", "o", "m", "v"}, "bn1", "");
    s_node("Relu", 1, (const char *[]){"bn1"}, "r1", "");
    s_node("MaxPool", 1, (const char *[]){"r1"}, "p1", "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]");
    s_node("Conv", 2, (const char *[]){"p1", "w2"}, "c2", "pads=[1,1,1,1]");
    s_node("Add", 2, (const char *[]){"c2", "p1"}, "sum", "");
    s_node("Relu", 1, (const char *[]){"sum"}, "feat", "");
    s_node("GlobalAveragePool", 1, (const char *[]){"feat"}, "gap", "");
    s_node("Flatten", 1, (const char *[]){"gap"}, "flat", "");
    s_node("MatMul", 2, (const char *[]){"flat", "fc"}, "logits", "");
    kiln_model_add_output(SM, "logits");
    kiln_model_add_output(SM, "feat");
    if (kiln_model_finalize(SM)) {
        fail("model", "finalize: %s", kiln_context_message(ctx));
        kiln_model_free(SM);
        return NULL;
    }
    return SM;
}

/* The model through CUDA sessions (layout pass on and off, autotuned or heuristic,
 * deterministic, fp32 / fp16 / bf16) against CPU sessions of the same precision (the CPU
 * runs the graph the precision pass makes, with its roundings). A low-precision variant
 * whose graph needs an op this build has no CUDA kernel for is reported as skipped. */
static void session_checks(void) {
    kiln_model *m = small_resnet();
    if (!m) return;
    kiln_tensor *x = kt_rand(KILN_F32, 4, (int64_t[]){3, 3, 16, 16}, -1, 1, 99);
    static const struct {
        const char *label;
        kiln_precision prec;
        unsigned off;
        int det;
        double tol;
    } v[] = {{"NHWC, autotuned", KILN_PRECISION_FP32, 0, 0, 1e-4},
             {"NCHW (layout pass off)", KILN_PRECISION_FP32, KILN_PASS_NHWC, 0, 1e-4},
             {"NHWC, heuristic algorithms", KILN_PRECISION_FP32, KILN_PASS_AUTOTUNE, 0, 1e-4},
             {"NHWC, deterministic", KILN_PRECISION_FP32, 0, 1, 1e-4},
             {"NHWC, fp16", KILN_PRECISION_FP16, 0, 0, 2e-2},
             {"NHWC, bf16", KILN_PRECISION_BF16, 0, 0, 1e-1}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        kiln_session_options co = {.precision = v[i].prec};
        /* fp32 against the CPU's f32 at 1e-4: no TF32 (kiln.h's policy allows it by default) */
        kiln_session_options o = {.device = KILN_DEVICE_CUDA, .precision = v[i].prec, .disable_passes = v[i].off,
                                  .deterministic = v[i].det, .strict_fp32 = v[i].prec == KILN_PRECISION_FP32};
        kiln_session *cpu = NULL, *s = NULL;
        const kiln_tensor *want[2] = {0}, *got[2] = {0};
        char label[160];
        snprintf(label, sizeof label, "small ResNet on cuda, %s", v[i].label);
        if (kiln_session_create(m, &co, &cpu) || kiln_session_run(cpu, 1, &x, 2, want)) {
            fail(label, "CPU: %s", kiln_context_message(ctx));
            kiln_session_free(cpu);
            continue;
        }
        for (int run = 0; run < 2; run++) { /* the second run replays the captured graph */
            snprintf(label, sizeof label, "small ResNet on cuda, %s, run %d", v[i].label, run + 1);
            if ((!s && kiln_session_create(m, &o, &s)) || kiln_session_run(s, 1, &x, 2, got)) {
                const char *msg = kiln_context_message(ctx);
                if (v[i].prec != KILN_PRECISION_FP32 && strstr(msg, "not supported on cuda")) {
                    printf("SKIP %s: %s\n", label, msg);
                    skipped++;
                } else {
                    fail(label, "%s", msg);
                }
                break;
            }
            for (int j = 0; j < 2; j++) {
                char l2[200];
                snprintf(l2, sizeof l2, "%s, output %d", label, j);
                if (compare(got[j], want[j], v[i].tol, v[i].tol, l2)) failed++;
                else passed++;
            }
        }
        kiln_session_free(s);
        kiln_session_free(cpu);
    }
    kiln_tensor_free(x);
    kiln_model_free(m);
}

/* torchvision's DenseNet, small (tests/data/densenet_mini.onnx; tests/test_layout.c's
 * --densenet check says how it was made): on CUDA, fp32 (no TF32) and fp16, against the CPU
 * session, with fuse-eltwise (each pre-activation BN -> Relu one NHWC fused kernel) and
 * without it (BN and Relu kernels); two runs each (the second replays the captured graph),
 * batch 3. --dry-run: the CUDA passes' graph (every Concat -> BN -> Relu one
 * kiln.ConcatAffine) planned, and every node of the run list supported on CUDA. */
static void densenet_checks(void) {
    kiln_model *m = NULL;
    const char *path = KILN_TEST_DATA "/densenet_mini.onnx";
    if (kiln_model_load_onnx(ctx, path, &m)) {
        fail("densenet_mini", "load: %s", kiln_context_message(ctx));
        return;
    }
    kiln_tensor *x = kt_rand(KILN_F32, 4, (int64_t[]){3, 3, 32, 32}, -1, 1, 41);
    for (int prec = 0; !cu && prec < 2; prec++) {
        char label[96];
        snprintf(label, sizeof label, "densenet_mini, %s", prec ? "fp16" : "fp32");
        kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = prec ? KILN_PRECISION_FP16 : KILN_PRECISION_FP32};
        kiln_model *opt = NULL;
        kiln_plan *p = NULL;
        kiln_status st = kiln_passes_apply(m, &po, &opt);
        if (!st) st = kiln_plan_build(opt, &x, false, false, &p);
        kiln_plan_view_t v;
        if (!st) kiln_plan_view(p, &v);
        int n_ca = 0;
        for (int e = 0; !st && e < v.n_exec; e++) {
            kiln_op_ctx hc = *kiln_plan_exec_op_ctx(&v, e);
            st = kiln_cuda_supports(&hc);
            n_ca += strcmp(hc.node->op_type, "ConcatAffine") == 0;
        }
        if (st) fail(label, "%s", kiln_context_message(ctx));
        else if (n_ca != 6) fail(label, "%s", "expected 6 kiln.ConcatAffine nodes in the run list");
        else {
            printf("ok   %s: 6 kiln.ConcatAffine, every node supported on cuda (dry run)\n", label);
            passed++;
        }
        kiln_plan_free(p);
        kiln_model_free(opt);
    }
    if (!cu) {
        kiln_tensor_free(x);
        kiln_model_free(m);
        return;
    }
    kiln_session *cpu = NULL;
    const kiln_tensor *want = NULL;
    kiln_tensor *ref = NULL;
    if (kiln_session_create(m, NULL, &cpu) || kiln_session_run(cpu, 1, &x, 1, &want) ||
        !(ref = kiln_tensor_clone(ctx, want))) {
        fail("densenet_mini", "CPU: %s", kiln_context_message(ctx));
        goto out;
    }
    for (int v = 0; v < 4; v++) {
        const bool fp16 = v >= 2, unfused = v % 2;
        kiln_session_options o = {.device = KILN_DEVICE_CUDA,
                                  .precision = fp16 ? KILN_PRECISION_FP16 : KILN_PRECISION_FP32,
                                  .disable_passes = unfused ? KILN_PASS_FUSE_ELTWISE : 0, .strict_fp32 = !fp16};
        kiln_session *s = NULL;
        for (int run = 0; run < 2; run++) {
            char label[160];
            snprintf(label, sizeof label, "densenet_mini on cuda, %s, %s, run %d", fp16 ? "fp16" : "fp32",
                     unfused ? "fuse-eltwise off" : "BN -> Relu fused", run + 1);
            const kiln_tensor *got = NULL;
            if ((!s && kiln_session_create(m, &o, &s)) || kiln_session_run(s, 1, &x, 1, &got)) {
                fail(label, "%s", kiln_context_message(ctx));
                break;
            }
            const double tol = fp16 ? 3e-2 : 1e-4;
            if (compare(got, ref, tol, tol, label)) failed++;
            else passed++;
        }
        kiln_session_free(s);
    }
out:
    kiln_tensor_free(ref);
    kiln_session_free(cpu);
    kiln_tensor_free(x);
    kiln_model_free(m);
}

int main(int argc, char **argv) {
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    /* --dry-run: no device needed; checks that every case's CPU reference runs and that
     * kiln_cuda_supports accepts it, before GPU time is spent. Any other argument: run
     * only the cases and checks whose op or name contains it (e.g. kiln.Conv, optimizer,
     * mnist). */
    bool dry = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dry-run") == 0) dry = true;
        else only = argv[i];
    }
    kiln_cuda_options o = {.device = 0, .arena_bytes = (size_t)256 << 20};
    if (!dry && kiln_cuda_create(ctx, &o, &cu) != KILN_OK) {
        printf("FAIL: no usable CUDA device: %s\n", kiln_context_message(ctx));
        printf("0 passed, 1 failed\n");
        kiln_context_free(ctx);
        return 1;
    }
    if (cu) {
        const kiln_cuda_props *p = kiln_cuda_get_props(cu);
        printf("device: %s, %d SMs, compute capability %d.%d\n", p->name, p->sm_count, p->cc_major,
               p->cc_minor);
    }

    /* choices timed here go to a scratch cache, not the user's */
    char dir[] = "/tmp/kiln-cuda-test-XXXXXX";
    const bool have_dir = cu && mkdtemp(dir) != NULL;
    if (have_dir && !getenv("KILN_CACHE_DIR")) setenv("KILN_CACHE_DIR", dir, 1);

    cast_cases();
    generate_cases();
    if (wanted("plan with folding off")) plan_checks();
    if (wanted("densenet")) densenet_checks();
    nhwc_cases();
    fused_conv_cases();
    dropout_cases();
    direct_cases();
    pointwise_cases();
    depthwise_cases();
    grouped_cases();
    fused_loss_cases();
    fused_elementwise_cases();
    fused_gemm_cases();
    if (wanted("kiln.FusedElementwise")) fused_static_checks();
    if (wanted("supports")) supports_checks();
    if (wanted("supports") || wanted("layout")) layout_supports_checks();
    if (wanted("supports") || wanted("layout") || wanted("Dropout")) dropout_layout_supports_checks();
    if (wanted("mnist")) {
        mnist_training_graph(KILN_PRECISION_FP32, false);
        mnist_training_graph(KILN_PRECISION_FP32, true);
        mnist_training_graph(KILN_PRECISION_FP16, true);
        mnist_training_graph(KILN_PRECISION_BF16, true);
    }
    if (cu) {
        if (wanted("gather")) gather_bad_index();
        if (wanted("nll")) {
            nll_bad_target("NegativeLogLikelihoodLoss", "");
            nll_bad_target("LogSoftmaxNLL", "kiln");
        }
        if (wanted("staging")) staging_checks();
        if (wanted("rtc")) rtc_checks();
        if (wanted("optimizer")) optimizer_checks();
        if (wanted("optimizer")) optimizer_many_checks();
        if (wanted("loss scaling")) loss_scaling_checks();
        if (wanted("rng")) rng_checks();
        if (have_dir && wanted("algo cache")) algo_cache_checks(dir);
        if (wanted("small ResNet")) session_checks();
        if (wanted("profile")) profile_checks();
        if (wanted("train profile")) train_profile_checks();
        if (wanted("train streams")) {
            train_streams_checks(KILN_AMP_OFF);
            train_streams_checks(KILN_AMP_FP16);
        }
        if (wanted("train vs cpu")) {
            train_vs_cpu_checks(false);
            train_vs_cpu_checks(true);
        }
        back_to_back_cases(); /* last: a fault there loses the context */
    }

    kiln_cuda_free(cu);
    kiln_context_free(ctx);
    if (have_dir) {
        const char *files[] = {"algos/cudnn-algos.txt", "algos", "heuristic.txt", "cudnn-algos.txt", ""};
        for (int i = 0; i < 5; i++) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, files[i]);
            remove(path);
        }
    }
    printf("%d skipped\n", skipped);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
