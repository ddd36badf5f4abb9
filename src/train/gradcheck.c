/* gradcheck.c — finite-difference checks of gradient rules, in float64 on the CPU; see
 * kiln_gradcheck in optest.h. The whole path is exercised: the op's rule emits nodes,
 * autograd wires them, the planner plans forward and backward together. */
#include "../core/optest.h"
#include "autograd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OPS 40

static int report(const char *label, const char *fmt, ...) KILN_PRINTF(2, 3);
static int report(const char *label, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", label);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    return 1;
}

/* The op alone, finalized, to learn its outputs' dtypes. */
static kiln_status build_op_model(kiln_context *ctx, const char *op, const char *attrs, int opset,
                                  int n_in, kiln_tensor **in, const bool *wrt, int n_out, kiln_model **out) {
    kiln_model *m = NULL;
    kiln_status st = kiln_model_create(ctx, &m);
    if (st) return st;
    char names[MAX_OPS][16], onames[MAX_OPS][16];
    const char *inp[MAX_OPS], *outp[MAX_OPS];
    for (int i = 0; i < n_in && !st; i++) {
        snprintf(names[i], sizeof names[i], "x%d", i);
        inp[i] = in[i] ? names[i] : "";
        if (!in[i]) continue;
        if (wrt[i]) st = kiln_model_add_input(m, names[i], in[i]->dtype, in[i]->ndim, in[i]->dims);
        else st = kiln_model_add_initializer(m, names[i], in[i]);
    }
    for (int k = 0; k < n_out; k++) {
        snprintf(onames[k], sizeof onames[k], "y%d", k);
        outp[k] = onames[k];
    }
    kiln_node *node = NULL;
    if (!st) st = kiln_model_add_node(m, op, "op", n_in, inp, n_out, outp, &node);
    if (!st) {
        if (kiln_op_index(op) < 0 && kiln_op_index_domain("kiln", op) >= 0) {
            free(node->domain);
            node->domain = kiln_strdup(ctx, "kiln");
        }
        node->opset = opset ? opset : 21;
        st = kiln_attrs_parse(ctx, attrs, &node->attrs, &node->n_attrs);
    }
    for (int k = 0; k < n_out && !st; k++) st = kiln_model_add_output(m, onames[k]);
    if (!st) st = kiln_model_finalize(m);
    if (st) {
        kiln_model_free(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}

int kiln_gradcheck_ex(const char *op, const char *attrs, int opset, int n_in, kiln_tensor **in,
                      const bool *wrt_in, int n_out, double tol_scale, const char *label) {
    kiln_context *ctx = NULL;
    kiln_model *base = NULL, *m = NULL;
    kiln_session *s = NULL;
    kiln_tensor *rs[MAX_OPS] = {0};
    kiln_tensor *feeds[MAX_OPS] = {0};
    bool wrt[MAX_OPS] = {0};
    int fails = 0;
    if (n_in > MAX_OPS || n_out > MAX_OPS || kiln_context_create(&ctx)) {
        fails = report(label, "too many operands");
        goto out;
    }
    int idx = kiln_op_index(op);
    if (idx < 0) idx = kiln_op_index_domain("kiln", op);
    const uint32_t nondiff = idx >= 0 ? kiln_op_get(idx)->nondiff_inputs : 0;
    if (n_out <= 0) n_out = idx >= 0 ? kiln_op_get(idx)->min_outputs : 1;
    for (int i = 0; i < n_in; i++) {
        wrt[i] = in[i] && (wrt_in ? wrt_in[i] : kiln_dtype_is_float(in[i]->dtype) && !kiln_input_in_mask(nondiff, i));
        if (wrt[i] && in[i]->dtype != KILN_F64) {
            fails = report(label, "input %d must be f64 to be checked", i);
            goto out;
        }
    }
    if (build_op_model(ctx, op, attrs, opset, n_in, in, wrt, n_out, &base)) {
        fails = report(label, "building the op: %s", kiln_context_message(ctx));
        goto out;
    }
    if (kiln_model_clone(base, &m)) {
        fails = report(label, "clone: %s", kiln_context_message(ctx));
        goto out;
    }
    /* loss = sum over float outputs of sum(Y_k * R_k) */
    m->n_outputs = 0;
    int loss = -1, n_loss = 0;
    for (int k = 0; k < n_out; k++) {
        const kiln_value *y = &base->values[base->outputs[k]];
        if (!kiln_dtype_is_float(y->dtype)) continue;
        char rn[16], ln[16], yn[16];
        snprintf(rn, sizeof rn, "r%d", k);
        snprintf(ln, sizeof ln, "l%d", k);
        snprintf(yn, sizeof yn, "y%d", k);
        rs[k] = kt_rand(y->dtype, y->ndim, y->dims, -1, 1, 1000 + (uint64_t)k);
        const char *lin[2] = {yn, rn}, *lout[1] = {ln};
        kiln_node *node = NULL;
        if (!rs[k] || kiln_model_add_initializer(m, rn, rs[k]) || kiln_model_add_node(m, "GradCheckLoss", ln, 2, lin, 1, lout, &node)) {
            fails = report(label, "loss: %s", kiln_context_message(ctx));
            goto out;
        }
        free(node->domain);
        node->domain = kiln_strdup(ctx, "kiln");
        int lv = kiln_model_find_value(m, ln);
        if (loss < 0) {
            loss = lv;
        } else {
            char sn[16];
            snprintf(sn, sizeof sn, "s%d", k);
            const char *sin[2] = {m->values[loss].name, ln}, *sout[1] = {sn};
            kiln_model_add_node(m, "Sum", sn, 2, sin, 1, sout, NULL);
            loss = kiln_model_find_value(m, sn);
        }
        n_loss++;
    }
    if (!n_loss) {
        fails = report(label, "the op has no float output");
        goto out;
    }
    int params[MAX_OPS], grads[MAX_OPS], np = 0;
    for (int i = 0; i < n_in; i++) {
        char xn[16];
        snprintf(xn, sizeof xn, "x%d", i);
        if (wrt[i]) params[np++] = kiln_model_find_value(m, xn);
    }
    if (kiln_autograd(m, loss, np, params, grads)) {
        fails = report(label, "autograd: %s", kiln_context_message(ctx));
        goto out;
    }
    if (kiln_model_add_output(m, m->values[loss].name)) goto out;
    for (int j = 0; j < np; j++)
        if (kiln_model_add_output(m, m->values[grads[j]].name)) goto out;
    if (kiln_model_finalize(m) || kiln_session_create(m, NULL, &s)) {
        fails = report(label, "training graph: %s", kiln_context_message(ctx));
        goto out;
    }
    int nf = 0;
    for (int i = 0; i < n_in; i++)
        if (wrt[i]) feeds[nf++] = in[i];
    const kiln_tensor *outs[MAX_OPS + 1];
    if (kiln_session_run(s, nf, feeds, np + 1, outs)) {
        fails = report(label, "run: %s", kiln_context_message(ctx));
        goto out;
    }
    kiln_tensor *analytic[MAX_OPS] = {0};
    for (int j = 0; j < np; j++) analytic[j] = kiln_tensor_clone(ctx, outs[1 + j]);
    double worst = 0;
    int checked = 0;
    for (int j = 0, i = 0; i < n_in; i++) {
        if (!wrt[i]) continue;
        kiln_tensor *x = in[i], *a = analytic[j++];
        if (!a || a->dtype != KILN_F64 || kiln_tensor_numel(a) != kiln_tensor_numel(x)) {
            fails += report(label, "gradient of input %d has the wrong dtype or shape", i);
            continue;
        }
        int64_t n = kiln_tensor_numel(x), step = n > 64 ? n / 64 : 1;
        double *xd = x->data;
        for (int64_t e = 0; e < n; e += step) {
            const double eps = 1e-6, keep = xd[e];
            xd[e] = keep + eps;
            kiln_session_run(s, nf, feeds, 1, outs);
            double lp = kiln_get_f64(outs[0], 0);
            xd[e] = keep - eps;
            kiln_session_run(s, nf, feeds, 1, outs);
            double lm = kiln_get_f64(outs[0], 0);
            xd[e] = keep;
            double num = (lp - lm) / (2 * eps), ana = kiln_get_f64(a, e);
            double tol = tol_scale * (1e-6 + 1e-5 * fabs(num)), err = fabs(ana - num);
            if (!(err <= tol)) {
                fails += report(label, "d/d(input %d)[%lld]: autograd %.10g, finite differences %.10g", i, (long long)e, ana, num);
                break;
            }
            if (err / tol > worst) worst = err / tol;
            checked++;
        }
    }
    for (int j = 0; j < np; j++) kiln_tensor_free(analytic[j]);
    if (!fails) printf("ok   %s: gradient of %d elements matches finite differences, %.0f%% of error budget\n", label, checked, worst * 100);
out:
    for (int k = 0; k < MAX_OPS; k++) kiln_tensor_free(rs[k]);
    for (int i = 0; i < n_in; i++) kiln_tensor_free(in[i]);
    kiln_session_free(s);
    kiln_model_free(m);
    kiln_model_free(base);
    kiln_context_free(ctx);
    return fails ? 1 : 0;
}

int kiln_gradcheck(const char *op, const char *attrs, int opset, int n_in, kiln_tensor **in,
                   const bool *wrt, const char *label) {
    return kiln_gradcheck_ex(op, attrs, opset, n_in, in, wrt, 0, 1.0, label);
}
