/* optest.c — helpers for op self-tests; see optest.h. */
#include "optest.h"

#include "plan.h"
#include "../ops/fused_conv.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kiln_tensor *kt_make(kiln_dtype dt, int ndim, const int64_t *dims, const double *vals) {
    kiln_tensor *t = kiln_tensor_new(NULL, dt, ndim, dims);
    if (!t) return NULL;
    if (vals)
        for (int64_t i = 0; i < kiln_tensor_numel(t); i++) {
            if (kiln_dtype_is_float(dt))
                kiln_set_f64(t, i, vals[i]);
            else
                kiln_set_i64(t, i, (int64_t)vals[i]);
        }
    return t;
}

kiln_tensor *kt_scalar(kiln_dtype dt, double v) { return kt_make(dt, 0, NULL, &v); }

void kt_channel_sums(const kiln_tensor *x, double scale, kiln_tensor **sum, kiln_tensor **sq) {
    const int64_t C = x->dims[1], S = kiln_tensor_numel(x) / (x->dims[0] * C);
    const kiln_dtype dt = kiln_fused_conv_stats_dtype(x->dtype);
    *sum = kt_make(dt, 1, &x->dims[1], NULL);
    *sq = kt_make(dt, 1, &x->dims[1], NULL);
    for (int64_t ch = 0; ch < C && *sum && *sq; ch++) {
        double a = 0, q = 0;
        for (int64_t n = 0; n < x->dims[0]; n++)
            for (int64_t k = 0; k < S; k++) {
                const double v = kiln_get_f64(x, (n * C + ch) * S + k);
                a += v;
                q += v * v;
            }
        kiln_set_f64(*sum, ch, a * scale);
        kiln_set_f64(*sq, ch, q);
    }
}

kiln_tensor *kt_rand(kiln_dtype dt, int ndim, const int64_t *dims, double lo, double hi,
                     uint64_t seed) {
    kiln_tensor *t = kiln_tensor_new(NULL, dt, ndim, dims);
    if (!t) return NULL;
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17; /* xorshift64 */
        double u = (double)(s >> 11) * (1.0 / 9007199254740992.0);
        double v = lo + (hi - lo) * u;
        if (kiln_dtype_is_float(dt)) kiln_set_f64(t, i, v);
        else kiln_set_i64(t, i, (int64_t)floor(v));
    }
    return t;
}

kiln_tensor *kt_zero_from(kiln_tensor *t, int64_t c) {
    if (!t || t->ndim < 2 || kiln_tensor_numel(t) == 0) return t;
    const int64_t C = t->dims[1], inner = kiln_tensor_numel(t) / (t->dims[0] * C);
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++)
        if (i / inner % C >= c) kiln_set_f64(t, i, 0.0);
    return t;
}

/* ------------------------------------------------------------ compare */

int kiln_tensor_compare(const kiln_tensor *got, const kiln_tensor *want, double atol, double rtol,
                        const char *label) {
    char gs[200], ws[200];
    kiln_shape_str(got, gs, sizeof gs);
    kiln_shape_str(want, ws, sizeof ws);
    if (!got || got->dtype != want->dtype || got->ndim != want->ndim ||
        memcmp(got->dims, want->dims, sizeof(int64_t) * (size_t)want->ndim) != 0) {
        printf("FAIL %s: got %s, want %s\n", label, gs, ws);
        return 1;
    }
    int64_t n = kiln_tensor_numel(want), bad = 0, worst = -1;
    double max_abs = 0, budget = 0;
    bool fl = kiln_dtype_is_float(want->dtype);
    for (int64_t i = 0; i < n; i++) {
        if (fl) {
            double g = kiln_get_f64(got, i), w = kiln_get_f64(want, i);
            if (isnan(w) || isnan(g)) {
                if (!(isnan(w) && isnan(g))) { bad++; if (worst < 0) worst = i; }
                continue;
            }
            if (isinf(w) || isinf(g)) {
                if (g != w) { bad++; if (worst < 0) worst = i; }
                continue;
            }
            double err = fabs(g - w), tol = atol + rtol * fabs(w);
            if (err > max_abs) max_abs = err;
            double used = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0);
            if (used > budget) budget = used;
            if (err > tol) { bad++; if (worst < 0) worst = i; }
        } else if (kiln_get_i64(got, i) != kiln_get_i64(want, i)) {
            bad++;
            if (worst < 0) worst = i;
        }
    }
    if (bad) {
        printf("FAIL %s: %lld of %lld elements differ; first at %lld: got %.9g want %.9g (max abs err %.3g)\n",
               label, (long long)bad, (long long)n, (long long)worst, kiln_get_f64(got, worst),
               kiln_get_f64(want, worst), max_abs);
        return 1;
    }
    printf("ok   %s: %s, max abs err %.3g, %.0f%% of error budget\n", label, gs, max_abs, budget * 100);
    return 0;
}

/* ------------------------------------------------------------- run one op */

static kiln_optest_hook_fn sweep_hook;

/* This process's thread count (Linux's /proc), -1 where it cannot be read. */
static int process_threads(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    fclose(f);
    return n;
}

/* The case again with EXTRA_WS more bytes of workspace than the op asks for: in a plan every
 * node gets the one shared workspace, sized for its largest user. The outputs must keep their
 * bits (a random op's may change), and the run start no more threads than the thread setting
 * allows (OpenMP's team and OpenBLAS's pool: kiln.Attention once took its thread count off the
 * workspace's size and started 50,000 threads on maxvit_t). */
#define EXTRA_WS ((size_t)8 << 20)

static int run_bigger_workspace(kiln_context *ctx, const kiln_node *node, int n_in, kiln_tensor **in, int n_out,
                                kiln_tensor *const *first, const char *label) {
    kiln_tensor **again = calloc((size_t)(n_out > 0 ? n_out : 0) + 1, sizeof *again);
    if (!again) {
        printf("FAIL %s: out of memory\n", label);
        return 1;
    }
    int fails = 0;
    const int before = process_threads();
    kiln_status st = kiln_op_eval_ws(ctx, node, n_in, in, n_out, again, EXTRA_WS);
    if (st) {
        printf("FAIL %s, with a larger workspace: %s: %s\n", label, kiln_status_name(st), kiln_context_message(ctx));
        fails = 1;
    }
    const bool random = kiln_op_get(node->op)->random;
    for (int k = 0; k < n_out && !st && !random; k++) {
        if (!first[k] || !again[k]) continue;
        if (kiln_tensor_nbytes(first[k]) != kiln_tensor_nbytes(again[k]) ||
            memcmp(first[k]->data, again[k]->data, kiln_tensor_nbytes(first[k])) != 0) {
            printf("FAIL %s: output %d differs when the workspace is larger than asked\n", label, k);
            fails = 1;
        }
    }
    /* the run's own threads: the process's before and after (a GPU test's process also holds
     * the CUDA driver's and cuDNN's threads, started outside this run) */
    const int threads = process_threads(), procs = omp_get_num_procs();
    const int allowed = 2 * (kiln_cpu_threads() > procs ? kiln_cpu_threads() : procs) + 8;
    if (before >= 0 && threads - before > allowed) {
        printf("FAIL %s: %d threads started by a run with a larger workspace (%d before, %d after; at most %d "
               "expected)\n",
               label, threads - before, before, threads, allowed);
        fails = 1;
    }
    for (int k = 0; k < n_out; k++) kiln_tensor_free(again[k]);
    free(again);
    return fails;
}

void kiln_optest_set_hook(kiln_optest_hook_fn fn) { sweep_hook = fn; }

static int run_case(const char *op, const char *attrs, int opset, int n_in, kiln_tensor **in,
                    int n_out, kiln_tensor **expect, double atol, double rtol, const char *label,
                    bool expect_fail, kiln_status want) {
    kiln_context ctx = {0};
    kiln_clear_error(&ctx); /* messages are per thread, keyed by address: start empty */
    kiln_node node = {0};
    kiln_tensor **out = calloc((size_t)(n_out > 0 ? n_out : 0) + 1, sizeof *out); /* any number of outputs */
    int fails = 0;
    if (!out) {
        printf("FAIL %s: out of memory for %d outputs\n", label, n_out);
        fails = 1;
        goto done;
    }
    node.op_type = (char *)op;
    node.name = (char *)label;
    node.domain = (char *)"";
    node.op = kiln_op_index(op);
    if (node.op < 0) {
        node.op = kiln_op_index_domain("kiln", op);
        node.domain = (char *)"kiln";
    }
    node.opset = opset ? opset : 21;
    node.n_in = n_in;
    node.n_out = n_out;
    if (node.op < 0) {
        printf("FAIL %s: op %s is not registered\n", label, op);
        fails = 1;
        goto done;
    }
    for (int i = 0; i < n_in; i++)
        if (!in[i] && i < kiln_op_get(node.op)->min_inputs) {
            printf("FAIL %s: test input %d could not be created\n", label, i);
            fails = 1;
            goto done;
        }
    if (kiln_attrs_parse(&ctx, attrs, &node.attrs, &node.n_attrs)) {
        printf("FAIL %s: %s\n", label, kiln_context_message(&ctx));
        fails = 1;
        goto done;
    }
    kiln_status st = kiln_op_eval(&ctx, &node, n_in, in, n_out, out);
    if (expect_fail) {
        if (st != want || !kiln_context_message(&ctx)[0]) {
            printf("FAIL %s: expected status '%s', got '%s' (%s)\n", label, kiln_status_name(want),
                   kiln_status_name(st), kiln_context_message(&ctx));
            fails = 1;
        } else {
            printf("ok   %s: rejected as expected: %s\n", label, kiln_context_message(&ctx));
        }
        goto done;
    }
    if (st) {
        printf("FAIL %s: %s: %s\n", label, kiln_status_name(st), kiln_context_message(&ctx));
        fails = 1;
        goto done;
    }
    if (sweep_hook) sweep_hook(&node, n_in, in, n_out, out, atol, rtol, label);
    if (!expect) printf("ok   %s: the CPU reference takes it (a case for the backend sweep)\n", label);
    for (int k = 0; k < n_out; k++) {
        if (!expect || !expect[k]) continue;
        char lab[256];
        snprintf(lab, sizeof lab, n_out > 1 ? "%s (output %d)" : "%s", label, k);
        fails += kiln_tensor_compare(out[k], expect[k], atol, rtol, lab);
    }
    if (!fails) fails += run_bigger_workspace(&ctx, &node, n_in, in, n_out, out, label);
done:
    for (int i = 0; i < node.n_attrs; i++) kiln_attr_clear(&node.attrs[i]);
    free(node.attrs);
    for (int i = 0; i < n_in; i++) kiln_tensor_free(in[i]);
    for (int k = 0; k < n_out; k++) {
        if (out) kiln_tensor_free(out[k]);
        if (expect) kiln_tensor_free(expect[k]);
    }
    free(out);
    return fails ? 1 : 0;
}

bool kiln_optest_eval(const char *domain, const char *op, const char *attrs, int opset, int n_in, kiln_tensor **in,
                      int n_out, kiln_tensor **out, const char *label) {
    kiln_context ctx = {0};
    kiln_clear_error(&ctx); /* messages are per thread, keyed by address: start empty */
    int outs[4] = {17, 18, 19, 20};
    if (n_out > 4) {
        printf("FAIL %s: kiln_optest_eval takes up to 4 outputs\n", label);
        return false;
    }
    kiln_node node = {.op_type = (char *)op, .name = (char *)label, .domain = (char *)domain, .opset = opset,
                      .n_in = n_in, .n_out = n_out, .out = outs};
    node.op = kiln_op_index_domain(domain, op);
    bool ok = node.op >= 0 && kiln_attrs_parse(&ctx, attrs, &node.attrs, &node.n_attrs) == KILN_OK &&
              kiln_op_eval(&ctx, &node, n_in, in, n_out, out) == KILN_OK;
    if (!ok) printf("FAIL %s: %s%s%s: %s\n", label, domain, domain[0] ? "." : "", op, kiln_context_message(&ctx));
    for (int i = 0; i < node.n_attrs; i++) kiln_attr_clear(&node.attrs[i]);
    free(node.attrs);
    return ok;
}

int kiln_tensor_same_bits(const kiln_tensor *got, const kiln_tensor *want, const char *label) {
    if (kiln_tensor_compare(got, want, 0, 0, label)) return 1;
    if (memcmp(got->data, want->data, kiln_tensor_nbytes(want)) == 0) return 0;
    printf("FAIL %s: equal values but different bits\n", label);
    return 1;
}

int kiln_optest_opset(const char *op, const char *attrs, int opset, int n_in, kiln_tensor **in,
                      int n_out, kiln_tensor **expect, double atol, double rtol, const char *label) {
    return run_case(op, attrs, opset, n_in, in, n_out, expect, atol, rtol, label, false, KILN_OK);
}

int kiln_optest(const char *op, const char *attrs, int n_in, kiln_tensor **in, int n_out,
                kiln_tensor **expect, double atol, double rtol, const char *label) {
    return run_case(op, attrs, 0, n_in, in, n_out, expect, atol, rtol, label, false, KILN_OK);
}

int kiln_optest_sweep(const char *op, const char *attrs, int opset, int n_in, kiln_tensor **in, int n_out,
                      const char *label) {
    return run_case(op, attrs, opset, n_in, in, n_out, NULL, 0, 0, label, false, KILN_OK);
}

int kiln_optest_sweep_tol(const char *op, const char *attrs, int opset, int n_in, kiln_tensor **in, int n_out,
                          double atol, double rtol, const char *label) {
    return run_case(op, attrs, opset, n_in, in, n_out, NULL, atol, rtol, label, false, KILN_OK);
}

int kiln_optest_fails(const char *op, const char *attrs, int n_in, kiln_tensor **in, int n_out,
                      kiln_status want, const char *label) {
    return run_case(op, attrs, 0, n_in, in, n_out, NULL, 0, 0, label, true, want);
}
