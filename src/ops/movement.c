/* movement.c — shared helpers of the data-movement ops; see movement.h. */
#include "movement.h"

#include "../core/optest.h"
#ifdef KILN_OPTESTS
#include "../train/autograd.h" /* the tests build training graphs */
#endif

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kiln_status kiln_read_ints(kiln_op_ctx *c, int i, const char *what, int64_t *vals, int max,
                           int *n) {
    const kiln_tensor *t = c->in[i];
    *n = 0;
    KILN_OP_CHECK(c, t != NULL, KILN_ERR_SHAPE, "input %s is missing", what);
    KILN_OP_CHECK(c, t->dtype == KILN_I64 || t->dtype == KILN_I32, KILN_ERR_TYPE,
                  "%s must be int32 or int64, not %s", what, kiln_dtype_name(t->dtype));
    KILN_OP_CHECK(c, t->ndim <= 1, KILN_ERR_SHAPE, "%s must be 1-D, not of rank %d", what,
                  t->ndim);
    int64_t count = kiln_tensor_numel(t);
    KILN_OP_CHECK(c, count <= max, KILN_ERR_SHAPE, "%s has %" PRId64 " values, at most %d fit",
                  what, count, max);
    KILN_OP_CHECK(c, count == 0 || t->data != NULL, KILN_ERR_UNSUPPORTED,
                  "the values of %s must be known when the plan is built", what);
    for (int64_t k = 0; k < count; k++) vals[k] = kiln_get_i64(t, k);
    *n = (int)count;
    return KILN_OK;
}

kiln_status kiln_copy_input0(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    size_t bytes = (size_t)kiln_tensor_numel(x) * kiln_dtype_size(x->dtype);
    if (y->data != x->data && bytes > 0) memcpy(y->data, x->data, bytes);
    return KILN_OK;
}

char *kiln_dims_str(int ndim, const int64_t *dims, char *buf, size_t n) {
    size_t at = 0;
    if (n == 0) return buf;
    buf[0] = '\0';
    at += (size_t)snprintf(buf + at, n - at, "[");
    for (int d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, d ? ",%" PRId64 : "%" PRId64, dims[d]);
    if (at < n) snprintf(buf + at, n - at, "]");
    return buf;
}

size_t kiln_axis_maps_bytes(int ndim, const int64_t *dims) {
    size_t total = 0;
    for (int d = 0; d < ndim; d++) total += (size_t)dims[d];
    return total * sizeof(int64_t);
}

void kiln_axis_maps_carve(int64_t **maps, void *ws, int ndim, const int64_t *dims) {
    int64_t *p = ws;
    for (int d = 0; d < ndim; d++) {
        maps[d] = p;
        p += dims[d];
    }
}

/* One output row (the last axis): a memcpy when the source run is contiguous, else one
 * element at a time through a typed pointer of the element's size. */
#define GATHER_ROW(T)                                                              \
    do {                                                                           \
        const T *s = (const T *)src;                                               \
        T *o = (T *)dst;                                                           \
        T fv = 0;                                                                  \
        if (fill) memcpy(&fv, fill, sizeof fv);                                    \
        for (int64_t j = 0; j < inner; j++) o[j] = last[j] < 0 ? fv : s[last[j]]; \
    } while (0)

static void gather_row(char *dst, const char *src, size_t es, int64_t inner,
                       const int64_t *last, bool contiguous, const void *fill) {
    if (contiguous) {
        memcpy(dst, src + last[0] * (int64_t)es, (size_t)inner * es);
        return;
    }
    switch (es) {
    case 1: GATHER_ROW(uint8_t); break;
    case 2: GATHER_ROW(uint16_t); break;
    case 4: GATHER_ROW(uint32_t); break;
    case 8: GATHER_ROW(uint64_t); break;
    default:
        for (int64_t j = 0; j < inner; j++)
            memcpy(dst + j * (int64_t)es, last[j] < 0 ? fill : src + last[j] * (int64_t)es, es);
    }
}

static void fill_row(char *dst, size_t es, int64_t inner, const void *fill) {
    for (int64_t j = 0; j < inner; j++) memcpy(dst + j * (int64_t)es, fill, es);
}

/* Rows [r0, r1) of the output: the multi-index of the outer axes is decomposed once and
 * then advanced like an odometer, updating the source base offset incrementally. */
static void gather_rows(char *dst, const char *src, size_t es, int ndim, const int64_t *dims,
                        const int64_t *const *maps, const void *fill, bool contiguous,
                        int64_t r0, int64_t r1) {
    int64_t idx[KILN_MAX_DIMS] = {0};
    int64_t inner = dims[ndim - 1], base = 0, rem = r0;
    int outside = 0; /* outer axes whose offset is negative: the whole row is fill */
    for (int d = ndim - 2; d >= 0; d--) {
        idx[d] = rem % dims[d];
        rem /= dims[d];
    }
    for (int d = 0; d < ndim - 1; d++) {
        int64_t o = maps[d][idx[d]];
        if (o < 0) outside++;
        else base += o;
    }
    for (int64_t r = r0; r < r1; r++) {
        char *drow = dst + r * inner * (int64_t)es;
        if (outside) fill_row(drow, es, inner, fill);
        else gather_row(drow, src + base * (int64_t)es, es, inner, maps[ndim - 1], contiguous,
                        fill);
        for (int d = ndim - 2; d >= 0; d--) {
            int64_t o = maps[d][idx[d]];
            if (o < 0) outside--;
            else base -= o;
            bool carry = ++idx[d] == dims[d];
            if (carry) idx[d] = 0;
            o = maps[d][idx[d]];
            if (o < 0) outside++;
            else base += o;
            if (!carry) break;
        }
    }
}

void kiln_gather_axes(void *dst, const void *src, size_t es, int ndim, const int64_t *dims,
                      const int64_t *const *maps, const void *fill) {
    int64_t n = kiln_numel(ndim, dims);
    if (n <= 0) return;
    if (ndim == 0) {
        memcpy(dst, src, es);
        return;
    }
    int64_t inner = dims[ndim - 1], rows = n / inner;
    const int64_t *last = maps[ndim - 1];
    bool contiguous = last[0] >= 0;
    for (int64_t j = 1; j < inner && contiguous; j++) contiguous = last[j] == last[0] + j;
    /* Threads split the rows into contiguous chunks; small copies stay on one thread. */
    int64_t nt = n >= (1 << 16) ? kiln_cpu_threads() : 1;
    if (nt > rows) nt = rows;
    if (nt < 1) nt = 1;
#pragma omp parallel for num_threads((int)nt) schedule(static, 1) if (nt > 1)
    for (int64_t t = 0; t < nt; t++)
        gather_rows(dst, src, es, ndim, dims, maps, fill, contiguous, rows * t / nt,
                    rows * (t + 1) / nt);
}

#ifdef KILN_OPTESTS
int kiln_optest_tensor_attr(const char *op, const char *attr, kiln_tensor *value, int n_in,
                            kiln_tensor **in, kiln_tensor *expect, kiln_status want,
                            const char *label) {
    kiln_context *ctx = NULL;
    kiln_tensor *got = NULL;
    int fails = 1;
    kiln_attr a = {.name = (char *)attr, .type = KILN_ATTR_TENSOR, .t = value};
    kiln_node node = {.op_type = (char *)op, .name = (char *)label, .domain = (char *)"",
                      .op = kiln_op_index(op), .opset = 21, .n_in = n_in, .n_out = 1,
                      .n_attrs = 1, .attrs = &a};
    if (kiln_context_create(&ctx) != KILN_OK) goto done;
    kiln_status st = kiln_op_eval(ctx, &node, n_in, in, 1, &got);
    if (want != KILN_OK) {
        fails = st != want || kiln_context_message(ctx)[0] == '\0';
        printf("%s %s: %s (%s)\n", fails ? "FAIL" : "ok  ", label, kiln_status_name(st),
               kiln_context_message(ctx));
    } else if (st != KILN_OK) {
        printf("FAIL %s: %s\n", label, kiln_context_message(ctx));
    } else {
        fails = kiln_tensor_compare(got, expect, 0, 0, label) != 0;
    }
done:
    kiln_tensor_free(got);
    kiln_tensor_free(value);
    kiln_tensor_free(expect);
    for (int i = 0; i < n_in; i++) kiln_tensor_free(in[i]);
    kiln_context_free(ctx);
    return fails;
}
#endif /* KILN_OPTESTS */

/* ---------------------------------------------------------------- gradients */

int kiln_grad_reshape_like(kiln_grad_ctx *g, int grad, int like) {
    int shape = kiln_grad_emit(g, NULL, "Shape", 1, &like, 1, NULL, false, NULL);
    if (shape < 0) return -1;
    int in[2] = {grad, shape};
    int y = kiln_grad_emit(g, NULL, "Reshape", 2, in, 1, NULL, false, "allowzero=1");
    if (y < 0) return -1;
    /* allowzero (opset 14) keeps a zero-size dim of `like` instead of copying grad's dim */
    kiln_node *n = &g->m->nodes[g->m->n_nodes - 1];
    if (n->opset < 14) n->opset = 14;
    return y;
}

kiln_status kiln_grad_refuse(kiln_grad_ctx *g, int k, const char *what) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    if (k >= n->n_in || !g->need[k]) return KILN_OK;
    return kiln_fail(g->m->ctx, KILN_ERR_UNSUPPORTED,
                     "%s node '%s': input %d (%s) has no gradient", n->op_type, n->name, k, what);
}

size_t kiln_scatter_add_bytes(const kiln_tensor *dst) {
    bool in_place = dst->dtype == KILN_F32 || dst->dtype == KILN_F64;
    return in_place ? 0 : (size_t)kiln_tensor_numel(dst) * sizeof(double);
}

/* Add one row of src (the last axis) into the accumulator at base + last[j]. */
static void add_row(float *accf, double *accd, const kiln_tensor *src, int64_t at, int64_t base,
                    int64_t inner, const int64_t *last) {
    if (accf) {
        const float *s = (const float *)src->data + at;
        for (int64_t j = 0; j < inner; j++)
            if (last[j] >= 0) accf[base + last[j]] += s[j];
    } else if (src->dtype == KILN_F64) {
        const double *s = (const double *)src->data + at;
        for (int64_t j = 0; j < inner; j++)
            if (last[j] >= 0) accd[base + last[j]] += s[j];
    } else {
        for (int64_t j = 0; j < inner; j++)
            if (last[j] >= 0) accd[base + last[j]] += kiln_get_f64(src, at + j);
    }
}

void kiln_scatter_add_axes(kiln_tensor *dst, const kiln_tensor *src, const int64_t *const *maps,
                           void *ws) {
    int64_t nd = kiln_tensor_numel(dst), ns = kiln_tensor_numel(src);
    float *accf = dst->dtype == KILN_F32 ? dst->data : NULL;
    double *accd = accf ? NULL : dst->dtype == KILN_F64 ? dst->data : ws;
    if (nd == 0) return;
    if (accf) memset(accf, 0, (size_t)nd * sizeof *accf);
    else memset(accd, 0, (size_t)nd * sizeof *accd);
    int ndim = src->ndim;
    if (ns > 0 && ndim == 0) {
        add_row(accf, accd, src, 0, 0, 1, (const int64_t[]){0});
    } else if (ns > 0) {
        /* rows of the last axis; the outer multi-index advances like an odometer, as in
         * gather_rows, keeping the base offset and the count of outer axes outside dst */
        int64_t idx[KILN_MAX_DIMS] = {0};
        int64_t inner = src->dims[ndim - 1], rows = ns / inner, base = 0;
        int outside = 0;
        for (int d = 0; d < ndim - 1; d++) {
            if (maps[d][0] < 0) outside++;
            else base += maps[d][0];
        }
        for (int64_t r = 0; r < rows; r++) {
            if (!outside) add_row(accf, accd, src, r * inner, base, inner, maps[ndim - 1]);
            for (int d = ndim - 2; d >= 0; d--) {
                int64_t o = maps[d][idx[d]];
                if (o < 0) outside--;
                else base -= o;
                bool carry = ++idx[d] == src->dims[d];
                if (carry) idx[d] = 0;
                o = maps[d][idx[d]];
                if (o < 0) outside++;
                else base += o;
                if (!carry) break;
            }
        }
    }
    if (accd && accd != dst->data)
        for (int64_t i = 0; i < nd; i++) kiln_set_f64(dst, i, accd[i]);
}

#ifdef KILN_OPTESTS
int kiln_grad_route_check(const char *op, const char *attrs, int opset, int n_in,
                          kiln_tensor **in, int n_out, int used, kiln_tensor *r,
                          kiln_tensor *want, bool view, const char *label) {
    kiln_context *ctx = NULL;
    kiln_model *base = NULL, *m = NULL;
    kiln_session *sess = NULL;
    kiln_node *node = NULL;
    int fails = 1;
    char in_names[8][16], out_names[8][16]; /* "x%d" of any int: -Wformat-truncation at -O1 */
    const char *ins[8], *outs[8];
    if (n_in > 8 || n_out > 8 || kiln_context_create(&ctx) || kiln_model_create(ctx, &base))
        goto out;
    kiln_tensor *x = in[0];
    for (int i = 0; i < n_in; i++) {
        snprintf(in_names[i], sizeof in_names[i], "x%d", i);
        ins[i] = in[i] ? in_names[i] : "";
    }
    for (int k = 0; k < n_out; k++) {
        snprintf(out_names[k], sizeof out_names[k], "y%d", k);
        outs[k] = out_names[k];
    }
    /* R is an input too: as a constant, dL/dY would fold when the plan is built */
    if (kiln_model_add_input(base, "x0", x->dtype, x->ndim, x->dims) ||
        kiln_model_add_input(base, "r", r->dtype, r->ndim, r->dims))
        goto out;
    for (int i = 1; i < n_in; i++)
        if (in[i] && kiln_model_add_initializer(base, ins[i], in[i])) goto out;
    if (kiln_model_add_node(base, op, "op", n_in, ins, n_out, outs, &node)) goto out;
    node->opset = opset ? opset : 21;
    if (kiln_attrs_parse(ctx, attrs, &node->attrs, &node->n_attrs)) goto out;
    int64_t axis = kiln_attr_int(node, "axis", 0);
    if (used < 0) {
        const char *cat[1] = {"cat"};
        if (kiln_model_add_node(base, "Concat", "concat", n_out, outs, 1, cat, &node) ||
            kiln_node_set_int(node, "axis", axis))
            goto out;
    }
    const char *lin[2] = {used >= 0 ? outs[used] : "cat", "r"}, *lout[1] = {"loss"};
    if (kiln_model_add_node(base, "GradCheckLoss", "loss", 2, lin, 1, lout, &node)) goto out;
    free(node->domain);
    node->domain = kiln_strdup(ctx, "kiln");
    if (kiln_model_add_output(base, "loss") || kiln_model_finalize(base) ||
        kiln_model_clone(base, &m))
        goto out;
    int xv = kiln_model_find_value(m, "x0"), gx, dy = -1;
    if (kiln_autograd(m, kiln_model_find_value(m, "loss"), 1, &xv, &gx)) goto out;
    for (int i = 0; i < m->n_nodes; i++)
        if (strcmp(m->nodes[i].op_type, "GradCheckLossGrad") == 0) dy = m->nodes[i].out[0];
    if (dy < 0 || kiln_model_add_output(m, m->values[gx].name) ||
        kiln_model_add_output(m, m->values[dy].name) || kiln_model_finalize(m) ||
        kiln_session_create(m, NULL, &sess))
        goto out;
    const kiln_tensor *got[3];
    kiln_tensor *feed[2] = {x, r};
    if (kiln_session_run(sess, 2, feed, 3, got)) goto out;
    fails = kiln_tensor_compare(got[1], want, 0, 0, label);
    if (!fails && view && got[1]->data != got[2]->data) {
        printf("FAIL %s: dX is a copy of dY, not a view\n", label);
        fails = 1;
    }
out:
    if (fails && ctx && kiln_context_message(ctx)[0])
        printf("FAIL %s: %s\n", label, kiln_context_message(ctx));
    kiln_session_free(sess);
    kiln_model_free(m);
    kiln_model_free(base);
    kiln_context_free(ctx);
    for (int i = 0; i < n_in; i++) kiln_tensor_free(in[i]);
    kiln_tensor_free(r);
    kiln_tensor_free(want);
    return fails ? 1 : 0;
}
#endif /* KILN_OPTESTS */
