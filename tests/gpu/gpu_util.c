/* gpu_util.c — see gpu_util.h. */
#include "gpu_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kiln_status gpu_eval_ref(kiln_context *ctx, const kiln_node *node, int n_in, kiln_tensor **in, int n_out,
                         kiln_tensor **out, uint64_t seed, bool shapes_only) {
    if (n_out > GPU_MAX_OUT) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%d outputs", n_out);
    const kiln_op_def *d = kiln_op_get(node->op);
    kiln_tensor shapes[GPU_MAX_OUT];
    kiln_tensor *outs[GPU_MAX_OUT];
    memset(shapes, 0, sizeof shapes);
    for (int k = 0; k < n_out; k++) {
        outs[k] = &shapes[k];
        out[k] = NULL;
    }
    kiln_op_ctx c = {.kctx = ctx, .node = node, .n_in = n_in, .in = in, .n_out = n_out, .out = outs, .seed = seed};
    kiln_clear_error(ctx);
    kiln_status st = d ? d->infer(&c) : kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "op %s is not registered", node->op_type);
    for (int k = 0; k < n_out && !st; k++) {
        if (shapes_only) { /* no data */
            out[k] = calloc(1, sizeof *out[k]);
            if (out[k]) kiln_tensor_set_shape(out[k], shapes[k].dtype, shapes[k].ndim, shapes[k].dims);
        } else {
            out[k] = kiln_tensor_new(ctx, shapes[k].dtype, shapes[k].ndim, shapes[k].dims);
        }
        if (!out[k]) st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "output %d", k);
        outs[k] = out[k];
    }
    if (!st && !shapes_only) {
        const size_t ws = d->cpu_workspace ? d->cpu_workspace(&c) : 0;
        void *w = ws ? aligned_alloc(64, (ws + 63) & ~(size_t)63) : NULL;
        if (ws && !w) st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "workspace");
        c.workspace = w;
        c.workspace_size = ws;
        if (!st) st = d->cpu_forward(&c);
        free(w);
    }
    if (st)
        for (int k = 0; k < n_out; k++) {
            kiln_tensor_free(out[k]);
            out[k] = NULL;
        }
    return st;
}

int gpu_compare(const kiln_tensor *got, const kiln_tensor *want, double atol, double rtol, const char *label,
                bool nan_ref_ok, bool print_ok, double *budget_out) {
    const int64_t n = kiln_tensor_numel(want);
    const bool fl = kiln_dtype_is_float(want->dtype) || kiln_dtype_is_float(got->dtype);
    int64_t bad = 0, first = -1;
    double max_abs = 0, budget = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fl) {
            const double g = kiln_get_f64(got, i), w = kiln_get_f64(want, i);
            const double err = fabs(g - w), tol = atol + rtol * fabs(w);
            bool ok;
            if (!nan_ref_ok) ok = !isnan(g) && !isnan(w) && (err <= tol || (isinf(w) && g == w));
            else if (isnan(w)) ok = isnan(g);
            else if (isinf(w)) ok = g == w;
            else ok = !isnan(g) && err <= tol;
            if (!isinf(w) && !isnan(err)) {
                if (err > max_abs) max_abs = err;
                const double used = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0);
                if (used > budget) budget = used;
            }
            if (!ok && bad++ == 0) first = i;
        } else if (kiln_get_i64(got, i) != kiln_get_i64(want, i)) {
            if (bad++ == 0) first = i;
        }
    }
    char shape[160];
    kiln_shape_str(want, shape, sizeof shape);
    if (bad) {
        printf("FAIL %s: %s, %lld of %lld elements differ; first at %lld: got %.9g want %.9g "
               "(max abs err %.3g, atol %.2g rtol %.2g)\n",
               label, shape, (long long)bad, (long long)n, (long long)first, kiln_get_f64(got, first),
               kiln_get_f64(want, first), max_abs, atol, rtol);
        return 1;
    }
    if (print_ok)
        printf("ok   %s: %s, max abs err %.3g, %.0f%% of error budget\n", label, shape, max_abs, budget * 100);
    if (budget_out) *budget_out = budget;
    return 0;
}

kiln_status gpu_device_copy(kiln_cuda *cu, kiln_context *ctx, const kiln_tensor *h, size_t offset, bool upload,
                            kiln_format fmt, kiln_tensor *d) {
    *d = *h;
    d->owns_data = false;
    d->format = fmt;
    const size_t bytes = kiln_tensor_nbytes(h);
    void *p = NULL;
    kiln_status st = kiln_cuda_arena_alloc_at(cu, offset, bytes, &p);
    if (st) return st;
    d->data = p;
    if (!upload || !bytes) return st;
    if (fmt == KILN_FORMAT_NCHW) return kiln_cuda_upload(cu, d->data, h->data, bytes);
    void *tmp = malloc(bytes);
    if (!tmp) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "staging");
    kiln_layout_convert(h, tmp, KILN_FORMAT_NHWC);
    st = kiln_cuda_upload(cu, d->data, tmp, bytes);
    free(tmp);
    return st;
}

bool gpu_generated_compiles(kiln_context *ctx, kiln_op_ctx *c) {
    static uint64_t seen[1024];
    static int n_seen;
    char *src = NULL;
    int n_opts = 0;
    const char *const *opts = NULL;
    if (kiln_cuda_fused_source(c, &src, &n_opts, &opts)) return false;
    uint64_t h = 1469598103934665603ull;
    for (const char *q = src; *q; q++) h = (h ^ (unsigned char)*q) * 1099511628211ull;
    bool ok = true, known = false;
    for (int i = 0; i < n_seen && !known; i++) known = seen[i] == h;
    if (!known) {
        char *cubin = NULL;
        size_t size = 0;
        ok = kiln_cuda_rtc_compile(ctx, "fused.cu", src, 9, 0, n_opts, opts, &cubin, &size) == KILN_OK && size > 0;
        free(cubin);
        if (ok && n_seen < 1024) seen[n_seen++] = h;
    }
    free(src);
    return ok;
}
