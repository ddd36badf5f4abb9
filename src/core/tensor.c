/* tensor.c — host tensors: creation, element access in any dtype, broadcasting and
 * multi-index iteration helpers for reference kernels. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t kiln_numel(int ndim, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= dims[i];
    return n;
}

int64_t kiln_tensor_numel(const kiln_tensor *t) { return t ? kiln_numel(t->ndim, t->dims) : 0; }

size_t kiln_tensor_nbytes(const kiln_tensor *t) {
    return t ? (size_t)kiln_tensor_numel(t) * kiln_dtype_size(t->dtype) : 0;
}

void kiln_tensor_set_shape(kiln_tensor *t, kiln_dtype dtype, int ndim, const int64_t *dims) {
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->dims[i] = dims[i];
    for (int i = ndim; i < KILN_MAX_DIMS; i++) t->dims[i] = 0;
}

char *kiln_shape_str(const kiln_tensor *t, char *buf, size_t n) {
    if (!t) {
        snprintf(buf, n, "(none)");
        return buf;
    }
    size_t k = (size_t)snprintf(buf, n, "%s[", kiln_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)t->dims[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

static kiln_status check_shape(kiln_context *ctx, kiln_dtype dtype, int ndim, const int64_t *dims) {
    if (!kiln_dtype_valid(dtype))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "unsupported dtype %d", (int)dtype);
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "rank %d is outside 0..%d", ndim, KILN_MAX_DIMS);
    if (ndim > 0 && !dims) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "dims is NULL");
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0)
            return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "dim %d is negative (%lld)", i,
                             (long long)dims[i]);
        if (dims[i] && n > ((int64_t)1 << 50) / dims[i])
            return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "tensor of %d dims is too large", ndim);
        n *= dims[i];
    }
    return KILN_OK;
}

kiln_tensor *kiln_tensor_new(kiln_context *ctx, kiln_dtype dtype, int ndim, const int64_t *dims) {
    if (check_shape(ctx, dtype, ndim, dims) != KILN_OK) return NULL;
    kiln_tensor *t = kiln_calloc(ctx, 1, sizeof *t, "a tensor");
    if (!t) return NULL;
    kiln_tensor_set_shape(t, dtype, ndim, dims);
    t->data = kiln_calloc(ctx, 1, kiln_tensor_nbytes(t), "tensor data");
    if (!t->data) {
        free(t);
        return NULL;
    }
    t->owns_data = true;
    t->ctx = ctx;
    return t;
}

kiln_tensor *kiln_tensor_clone(kiln_context *ctx, const kiln_tensor *src) {
    kiln_tensor *t = kiln_tensor_new(ctx, src->dtype, src->ndim, src->dims);
    if (!t) return NULL;
    t->format = src->format;
    if (src->data) memcpy(t->data, src->data, kiln_tensor_nbytes(t));
    return t;
}

kiln_status kiln_tensor_create(kiln_context *ctx, kiln_dtype dtype, int ndim, const int64_t *dims,
                               kiln_tensor **out) {
    if (!ctx || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    kiln_status st = check_shape(ctx, dtype, ndim, dims);
    if (st) return st;
    *out = kiln_tensor_new(ctx, dtype, ndim, dims);
    return *out ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
}

kiln_status kiln_tensor_wrap(kiln_context *ctx, kiln_dtype dtype, int ndim, const int64_t *dims,
                             void *data, kiln_tensor **out) {
    if (!ctx || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    kiln_status st = check_shape(ctx, dtype, ndim, dims);
    if (st) return st;
    if (!data && kiln_numel(ndim, dims) > 0)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_wrap: data is NULL");
    kiln_tensor *t = kiln_calloc(ctx, 1, sizeof *t, "a tensor");
    if (!t) return KILN_ERR_OUT_OF_MEMORY;
    kiln_tensor_set_shape(t, dtype, ndim, dims);
    t->data = data;
    t->ctx = ctx;
    *out = t;
    return KILN_OK;
}

void kiln_tensor_free(kiln_tensor *t) {
    if (!t) return;
    if (t->owns_data) free(t->data);
    free(t);
}

kiln_dtype kiln_tensor_dtype(const kiln_tensor *t) { return t ? t->dtype : KILN_DTYPE_UNDEFINED; }
int kiln_tensor_ndim(const kiln_tensor *t) { return t ? t->ndim : 0; }
int64_t kiln_tensor_dim(const kiln_tensor *t, int i) {
    return (t && i >= 0 && i < t->ndim) ? t->dims[i] : -1;
}
kiln_format kiln_tensor_format(const kiln_tensor *t) { return t ? t->format : KILN_FORMAT_NCHW; }
void *kiln_tensor_data(const kiln_tensor *t) { return t ? t->data : NULL; }

/* ------------------------------------------------------------ element access */

double kiln_get_f64(const kiln_tensor *t, int64_t i) {
    const void *p = t->data;
    switch (t->dtype) {
    case KILN_F32: return ((const float *)p)[i];
    case KILN_F64: return ((const double *)p)[i];
    case KILN_F16: return kiln_f16_to_f32(((const uint16_t *)p)[i]);
    case KILN_BF16: return kiln_bf16_to_f32(((const uint16_t *)p)[i]);
    case KILN_U8: return ((const uint8_t *)p)[i];
    case KILN_I8: return ((const int8_t *)p)[i];
    case KILN_U16: return ((const uint16_t *)p)[i];
    case KILN_I16: return ((const int16_t *)p)[i];
    case KILN_I32: return ((const int32_t *)p)[i];
    case KILN_U32: return ((const uint32_t *)p)[i];
    case KILN_I64: return (double)((const int64_t *)p)[i];
    case KILN_U64: return (double)((const uint64_t *)p)[i];
    case KILN_BOOL: return ((const uint8_t *)p)[i] ? 1.0 : 0.0;
    default: return 0;
    }
}

/* Float -> integer conversion that never invokes undefined behaviour: NaN -> 0,
 * out-of-range values saturate. */
static int64_t f2i(double v) {
    if (v != v) return 0;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}

static uint64_t f2u64(double v) {
    if (v != v || v <= 0) return v <= -1 ? (uint64_t)f2i(v) : 0;
    if (v >= 1.8446744073709552e19) return UINT64_MAX;
    return (uint64_t)v;
}

void kiln_set_f64(kiln_tensor *t, int64_t i, double v) {
    void *p = t->data;
    switch (t->dtype) {
    case KILN_F32: ((float *)p)[i] = (float)v; break;
    case KILN_F64: ((double *)p)[i] = v; break;
    case KILN_F16: ((uint16_t *)p)[i] = kiln_f32_to_f16((float)v); break;
    case KILN_BF16: ((uint16_t *)p)[i] = kiln_f32_to_bf16((float)v); break;
    case KILN_U8: ((uint8_t *)p)[i] = (uint8_t)f2i(v); break;
    case KILN_I8: ((int8_t *)p)[i] = (int8_t)f2i(v); break;
    case KILN_U16: ((uint16_t *)p)[i] = (uint16_t)f2i(v); break;
    case KILN_I16: ((int16_t *)p)[i] = (int16_t)f2i(v); break;
    case KILN_I32: ((int32_t *)p)[i] = (int32_t)f2i(v); break;
    case KILN_U32: ((uint32_t *)p)[i] = (uint32_t)f2i(v); break;
    case KILN_I64: ((int64_t *)p)[i] = f2i(v); break;
    case KILN_U64: ((uint64_t *)p)[i] = f2u64(v); break;
    case KILN_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

int64_t kiln_get_i64(const kiln_tensor *t, int64_t i) {
    const void *p = t->data;
    switch (t->dtype) {
    case KILN_U8: return ((const uint8_t *)p)[i];
    case KILN_I8: return ((const int8_t *)p)[i];
    case KILN_U16: return ((const uint16_t *)p)[i];
    case KILN_I16: return ((const int16_t *)p)[i];
    case KILN_I32: return ((const int32_t *)p)[i];
    case KILN_U32: return ((const uint32_t *)p)[i];
    case KILN_I64: return ((const int64_t *)p)[i];
    case KILN_U64: return (int64_t)((const uint64_t *)p)[i];
    case KILN_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return f2i(kiln_get_f64(t, i));
    }
}

void kiln_set_i64(kiln_tensor *t, int64_t i, int64_t v) {
    void *p = t->data;
    switch (t->dtype) {
    case KILN_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case KILN_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case KILN_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case KILN_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case KILN_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case KILN_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case KILN_I64: ((int64_t *)p)[i] = v; break;
    case KILN_U64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case KILN_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: kiln_set_f64(t, i, (double)v); break;
    }
}

/* ------------------------------------------------------ shapes and iteration */

void kiln_strides(int ndim, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
}

bool kiln_norm_axis(int64_t *axis, int rank) {
    if (*axis < -(int64_t)rank || *axis >= rank) return false;
    if (*axis < 0) *axis += rank;
    return true;
}

bool kiln_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                          int64_t *out) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - na ? 1 : a[i - (n - na)];
        int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da == db || db == 1) out[i] = da;
        else if (da == 1) out[i] = db;
        else return false;
    }
    *nout = n;
    return true;
}

void kiln_broadcast_strides(int nin, const int64_t *in, int nout, const int64_t *out,
                            int64_t *strides) {
    int64_t s[KILN_MAX_DIMS];
    kiln_strides(nin, in, s);
    for (int i = 0; i < nout; i++) {
        int j = i - (nout - nin);
        strides[i] = (j < 0 || in[j] == 1) ? 0 : s[j];
        (void)out;
    }
}

bool kiln_index_next(int ndim, const int64_t *dims, int64_t *idx, int nops,
                     const int64_t (*strides)[KILN_MAX_DIMS], int64_t *offs) {
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < dims[d]) {
            for (int k = 0; k < nops; k++) offs[k] += strides[k][d];
            return true;
        }
        idx[d] = 0;
        for (int k = 0; k < nops; k++) offs[k] -= strides[k][d] * (dims[d] - 1);
    }
    return false;
}

/* ------------------------------------------------------------------ layout */

kiln_status kiln_tensor_set_format(kiln_tensor *t, kiln_format format) {
    if (!t) return KILN_ERR_INVALID_ARGUMENT;
    if (format != KILN_FORMAT_NCHW && format != KILN_FORMAT_NHWC)
        return kiln_fail(t->ctx, KILN_ERR_INVALID_ARGUMENT, "unknown memory format %d", (int)format);
    if (format == KILN_FORMAT_NHWC && t->ndim != 4)
        return kiln_fail(t->ctx, KILN_ERR_INVALID_ARGUMENT, "NHWC needs a 4-D tensor, this one has %d dims", t->ndim);
    t->format = format;
    return KILN_OK;
}

void kiln_layout_convert(const kiln_tensor *src, void *dst, kiln_format to) {
    const int64_t N = src->dims[0], C = src->dims[1], H = src->dims[2], W = src->dims[3];
    const size_t es = kiln_dtype_size(src->dtype);
    const char *s = src->data;
    char *d = dst;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++) {
                    int64_t nchw = ((n * C + c) * H + h) * W + w, nhwc = ((n * H + h) * W + w) * C + c;
                    int64_t from = to == KILN_FORMAT_NCHW ? nhwc : nchw, dest = to == KILN_FORMAT_NCHW ? nchw : nhwc;
                    memcpy(d + (size_t)dest * es, s + (size_t)from * es, es);
                }
}

kiln_status kiln_tensor_to_format(kiln_context *ctx, const kiln_tensor *t, kiln_format format,
                                  kiln_tensor **out) {
    if (!ctx || !t || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (format != KILN_FORMAT_NCHW && format != KILN_FORMAT_NHWC)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "unknown memory format %d", (int)format);
    if (t->ndim != 4 && format == KILN_FORMAT_NHWC)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "NHWC needs a 4-D tensor, this one has %d dims", t->ndim);
    kiln_tensor *r = kiln_tensor_new(ctx, t->dtype, t->ndim, t->dims);
    if (!r) return KILN_ERR_OUT_OF_MEMORY;
    if (t->format == format || t->ndim != 4) memcpy(r->data, t->data, kiln_tensor_nbytes(t));
    else kiln_layout_convert(t, r->data, format);
    r->format = format;
    *out = r;
    return KILN_OK;
}
