/* same_function.h — the check the pass tests share: two graphs, before and after a rewrite,
 * run on the CPU with the same feeds and run seed (77, which keys Dropout's masks), compute
 * the same outputs under the same names. Include it after check.h in a test program that
 * defines `static int fails;` and `static kiln_context *ctx;`. */
#ifndef KILN_TEST_SAME_FUNCTION_H
#define KILN_TEST_SAME_FUNCTION_H

#include "check.h"
#include "core/optest.h"
#include "core/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every output within atol * max|reference| + rtol * |reference|; with atol and rtol both 0,
 * bit for bit (a compare by value would pass -0 for +0). No reference output may be all
 * zeros (a gradient that does not flow would compare equal), bool ones (masks) aside.
 * out0 (when non-NULL) receives output 0 of opt's runs with seeds 77 and 78, for tests
 * that check the seed reaches the graph. Graphs that update an input in place (the
 * trainer's optimizer nodes) see the same feeds each run: they are restored in between,
 * and the reference outputs copied before opt runs. */
static void same_function(const char *label, kiln_model *ref, kiln_model *opt, kiln_tensor *const *feeds, double atol,
                          double rtol, double out0[2]) {
    const int no = ref->n_outputs;
    CHECK(opt->n_outputs == no, "%s: %d outputs, expected %d", label, opt->n_outputs, no);
    const kiln_tensor **want = calloc((size_t)no + 1, sizeof *want), **got = calloc((size_t)no + 1, sizeof *got);
    const int ni = ref->n_inputs;
    kiln_tensor **saved = calloc((size_t)ni + 1, sizeof *saved), **kept = calloc((size_t)no + 1, sizeof *kept);
    kiln_plan *pr = NULL, *po = NULL;
    kiln_status st = want && got && saved && kept ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < ni && !st; i++)
        if (feeds[i] && !(saved[i] = kiln_tensor_clone(ctx, feeds[i]))) st = KILN_ERR_OUT_OF_MEMORY;
#define SF_RESTORE()                                                                                   \
    for (int i = 0; i < ni; i++)                                                                       \
        if (saved && saved[i]) memcpy(feeds[i]->data, saved[i]->data, kiln_tensor_nbytes(saved[i]))
    if (!st) st = kiln_plan_build(ref, feeds, true, true, &pr);
    if (!st) st = kiln_plan_build(opt, feeds, true, true, &po);
    if (!st) st = kiln_plan_run_cpu(pr, feeds, 77, no, want);
    for (int j = 0; j < no && !st; j++)
        if (!(kept[j] = kiln_tensor_clone(ctx, want[j]))) st = KILN_ERR_OUT_OF_MEMORY;
        else want[j] = kept[j];
    SF_RESTORE();
    if (!st) st = kiln_plan_run_cpu(po, feeds, 77, no, got);
    CHECK(!st, "%s: CPU runs: %s", label, kiln_context_message(ctx));
    for (int j = 0; !st && j < no; j++) {
        char l[200];
        snprintf(l, sizeof l, "%s: %s", label, kiln_model_output_name(ref, j));
        CHECK(strcmp(kiln_model_output_name(ref, j), kiln_model_output_name(opt, j)) == 0, "%s: output %d renamed", label,
              j);
        double mx = 0;
        for (int64_t i = 0; i < kiln_tensor_numel(want[j]); i++) mx = fmax(mx, fabs(kiln_get_f64(want[j], i)));
        CHECK(mx > 0 || want[j]->dtype == KILN_BOOL, "%s: reference output is all zeros", l);
        fails += atol == 0 && rtol == 0 ? kiln_tensor_same_bits(got[j], want[j], l)
                                        : kiln_tensor_compare(got[j], want[j], atol * mx, rtol, l);
    }
    if (!st && out0) {
        out0[0] = kiln_get_f64(got[0], 0);
        SF_RESTORE();
        st = kiln_plan_run_cpu(po, feeds, 78, 1, got);
        CHECK(!st, "%s: run with another seed: %s", label, kiln_context_message(ctx));
        if (!st) out0[1] = kiln_get_f64(got[0], 0);
    }
    SF_RESTORE();
#undef SF_RESTORE
    for (int i = 0; i < ni && saved; i++) kiln_tensor_free(saved[i]);
    for (int j = 0; j < no && kept; j++) kiln_tensor_free(kept[j]);
    kiln_plan_free(pr);
    kiln_plan_free(po);
    free(saved);
    free(kept);
    free(want);
    free(got);
}

/* ref and opt compute each output within tol of its 2-norm (|opt - ref| <= tol |ref|; the
 * output named "loss" within loss_tol), on the CPU with the same feeds and run seed; no
 * reference output zero. For fp16 graphs, where an elementwise compare trips over single
 * elements (a ReLU or a max flipped by one rounding). */
static inline void same_norm(const char *label, kiln_model *ref, kiln_model *opt, kiln_tensor *const *feeds, double tol,
                             double loss_tol) {
    const int no = ref->n_outputs;
    const kiln_tensor **want = calloc((size_t)no + 1, sizeof *want), **got = calloc((size_t)no + 1, sizeof *got);
    kiln_tensor **kept = calloc((size_t)no + 1, sizeof *kept);
    kiln_plan *pr = NULL, *po = NULL;
    kiln_status st = want && got && kept && opt->n_outputs == no ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_plan_build(ref, feeds, true, true, &pr);
    if (!st) st = kiln_plan_build(opt, feeds, true, true, &po);
    if (!st) st = kiln_plan_run_cpu(pr, feeds, 77, no, want);
    for (int j = 0; j < no && !st; j++)
        if (!(kept[j] = kiln_tensor_clone(ctx, want[j]))) st = KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_plan_run_cpu(po, feeds, 77, no, got);
    CHECK(!st, "%s: CPU runs: %s", label, kiln_context_message(ctx));
    double worst = 0;
    for (int j = 0; !st && j < no; j++) {
        const kiln_tensor *w = kept[j], *g = got[j];
        const char *name = kiln_model_output_name(ref, j);
        if (kiln_tensor_numel(w) != kiln_tensor_numel(g)) {
            CHECK(0, "%s: output %s: %lld elements, want %lld", label, name, (long long)kiln_tensor_numel(g),
                  (long long)kiln_tensor_numel(w));
            continue;
        }
        double d2 = 0, w2 = 0;
        for (int64_t i = 0; i < kiln_tensor_numel(w); i++) {
            const double a = kiln_get_f64(g, i), b = kiln_get_f64(w, i);
            d2 += (a - b) * (a - b);
            w2 += b * b;
        }
        const double rel = w2 > 0 ? sqrt(d2 / w2) : INFINITY;
        const double t = strcmp(name, "loss") == 0 ? loss_tol : tol;
        CHECK(rel <= t, "%s: output %s differs by %.3g of its norm (tolerance %g)", label, name, rel, t);
        if (rel > worst) worst = rel;
    }
    printf("  %d outputs within %.3g of their norms (tolerance %g, loss %g)\n", no, worst, tol, loss_tol);
    for (int j = 0; j < no && kept; j++) kiln_tensor_free(kept[j]);
    kiln_plan_free(pr);
    kiln_plan_free(po);
    free(kept);
    free(want);
    free(got);
}

/* Every node input is a graph input, an initializer or an earlier node's output: the nodes
 * of a rewritten graph are in an order they can run in. */
static inline bool topological_order(const kiln_model *m) {
    bool *ready = calloc((size_t)m->n_values + 1, sizeof *ready);
    bool ok = ready != NULL;
    for (int v = 0; ok && v < m->n_values; v++) ready[v] = m->values[v].is_input || m->values[v].init;
    for (int i = 0; ok && i < m->n_nodes; i++) {
        const kiln_node *n = &m->nodes[i];
        for (int k = 0; k < n->n_in; k++) ok &= n->in[k] < 0 || ready[n->in[k]];
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0) ready[n->out[k]] = true;
    }
    free(ready);
    return ok;
}

#endif
