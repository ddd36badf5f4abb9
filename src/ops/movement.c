/* movement.c — shared helpers of the data-movement ops; see movement.h. */
#include "movement.h"

#include "../core/optest.h"

#include <inttypes.h>
#include <stdio.h>
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
