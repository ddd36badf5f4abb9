/* tensor.c — host tensors: creation, element access in any dtype, broadcasting and
 * multi-index iteration helpers for reference kernels. */
#include "internal.h"
#include "backend.h"

#include <dlpack/dlpack.h>
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
    if (*out) (*out)->public_handle = true;
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
    t->public_handle = true;
    *out = t;
    return KILN_OK;
}

void kiln_tensor_free(kiln_tensor *t) {
    if (!t) return;
    /* another holder (a DLPack export) still has it: the last one frees */
    if (__atomic_fetch_sub(&t->extra_refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    if (t->owns_data) free(t->data);
    if (t->owns_device) {
        const kiln_backend_i *bi = kiln_backend_for(t->device);
        if (bi && bi->mem_free) bi->mem_free(t->device_index, t->data);
    }
    if (t->dl && t->dl->deleter) t->dl->deleter(t->dl);
    free(t);
}

/* ------------------------------------------------------------------ devices */

static const char *device_name(kiln_device d) { return d == KILN_DEVICE_CUDA ? "cuda" : d == KILN_DEVICE_CPU ? "cpu" : "?"; }

/* The backend of a device kind that has device memory of its own, checked to have that
 * device. */
static kiln_status device_backend(kiln_context *ctx, kiln_device device, int index, const kiln_backend_i **out) {
    *out = NULL;
    if (device != KILN_DEVICE_CUDA)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "unknown device %d", (int)device);
    if (index < 0) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "device index %d is negative", index);
    kiln_status st = kiln_backend_get(ctx, device, out);
    if (st) return st;
    return (*out)->check_device(ctx, index);
}

kiln_status kiln_tensor_create_on(kiln_context *ctx, kiln_dtype dtype, int ndim, const int64_t *dims,
                                  kiln_device device, int device_index, kiln_tensor **out) {
    if (!ctx || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (device == KILN_DEVICE_CPU) return kiln_tensor_create(ctx, dtype, ndim, dims, out);
    kiln_status st = check_shape(ctx, dtype, ndim, dims);
    const kiln_backend_i *bi = NULL;
    if (!st) st = device_backend(ctx, device, device_index, &bi);
    if (st) return st;
    kiln_tensor *t = kiln_calloc(ctx, 1, sizeof *t, "a tensor");
    if (!t) return KILN_ERR_OUT_OF_MEMORY;
    kiln_tensor_set_shape(t, dtype, ndim, dims);
    t->ctx = ctx;
    t->device = device;
    t->device_index = device_index;
    t->public_handle = true;
    st = bi->mem_alloc(ctx, device_index, kiln_tensor_nbytes(t), &t->data);
    if (st) {
        kiln_msg_prefix(ctx, "a %s tensor on %s:%d: ", kiln_shape_str(t, (char[160]){0}, 160), device_name(device),
                        device_index);
        free(t);
        return st;
    }
    t->owns_device = true;
    *out = t;
    return KILN_OK;
}

kiln_status kiln_tensor_wrap_on(kiln_context *ctx, kiln_dtype dtype, int ndim, const int64_t *dims,
                                kiln_device device, int device_index, void *data, kiln_tensor **out) {
    if (!ctx || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (device == KILN_DEVICE_CPU) return kiln_tensor_wrap(ctx, dtype, ndim, dims, data, out);
    const kiln_backend_i *bi = NULL;
    kiln_status st = check_shape(ctx, dtype, ndim, dims);
    if (!st) st = device_backend(ctx, device, device_index, &bi);
    if (st) return st;
    st = kiln_tensor_wrap(ctx, dtype, ndim, dims, data, out);
    if (st) return st;
    (*out)->device = device;
    (*out)->device_index = device_index;
    return KILN_OK;
}

kiln_status kiln_require_host(kiln_context *ctx, const kiln_tensor *t, const char *what) {
    if (!t || t->device == KILN_DEVICE_CPU) return KILN_OK;
    return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s takes host tensors; this one is on %s:%d (copy it with kiln_tensor_copy)",
                     what, device_name(t->device), t->device_index);
}

kiln_device kiln_tensor_device(const kiln_tensor *t, int *device_index) {
    if (device_index) *device_index = t ? t->device_index : 0;
    return t ? t->device : KILN_DEVICE_CPU;
}

kiln_status kiln_tensor_copy(kiln_context *ctx, const kiln_tensor *src, kiln_tensor *dst) {
    if (!ctx || !src || !dst) return KILN_ERR_INVALID_ARGUMENT;
    char a[160], b[160];
    if (src->dtype != dst->dtype || src->ndim != dst->ndim ||
        memcmp(src->dims, dst->dims, (size_t)src->ndim * sizeof src->dims[0]))
        return kiln_fail(ctx, src->dtype != dst->dtype ? KILN_ERR_TYPE : KILN_ERR_SHAPE,
                         "kiln_tensor_copy: source %s and destination %s differ", kiln_shape_str(src, a, sizeof a),
                         kiln_shape_str(dst, b, sizeof b));
    const size_t nb = kiln_tensor_nbytes(src);
    if (!nb) return KILN_OK;
    if (!src->data || !dst->data) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_copy: a tensor has no data");
    const bool convert = src->ndim == 4 && src->format != dst->format;
    if (src->device == KILN_DEVICE_CPU && dst->device == KILN_DEVICE_CPU) {
        if (convert) kiln_layout_convert(src, dst->data, dst->format);
        else memmove(dst->data, src->data, nb);
        return KILN_OK;
    }
    if (src->device != KILN_DEVICE_CPU && dst->device != KILN_DEVICE_CPU && src->device != dst->device)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "kiln_tensor_copy from %s to %s", device_name(src->device),
                         device_name(dst->device));
    const kiln_device dev = src->device != KILN_DEVICE_CPU ? src->device : dst->device;
    const kiln_backend_i *bi = NULL;
    kiln_status st = kiln_backend_get(ctx, dev, &bi);
    if (st) return st;
    const int sd = src->device == KILN_DEVICE_CPU ? -1 : src->device_index;
    const int dd = dst->device == KILN_DEVICE_CPU ? -1 : dst->device_index;
    if (!convert) return bi->mem_copy(ctx, dst->data, dd, src->data, sd, nb);
    /* another layout: through host memory, converted there */
    void *tmp = kiln_malloc(ctx, nb, "a layout conversion");
    if (!tmp) return KILN_ERR_OUT_OF_MEMORY;
    kiln_tensor h = *src;
    h.data = tmp;
    h.device = KILN_DEVICE_CPU;
    st = bi->mem_copy(ctx, tmp, -1, src->data, sd, nb);
    if (!st && dd < 0) kiln_layout_convert(&h, dst->data, dst->format);
    if (!st && dd >= 0) {
        void *tmp2 = kiln_malloc(ctx, nb, "a layout conversion");
        if (!tmp2) st = KILN_ERR_OUT_OF_MEMORY;
        if (!st) {
            kiln_layout_convert(&h, tmp2, dst->format);
            st = bi->mem_copy(ctx, dst->data, dd, tmp2, -1, nb);
        }
        free(tmp2);
    }
    free(tmp);
    return st;
}

/* ------------------------------------------------------------------- DLPack */

#ifndef KILN_DL_BOOL
#define KILN_DL_BOOL 6 /* kDLBool of DLPack 0.8 and later (Debian's header is 0.6) */
#endif

static bool dl_dtype(DLDataType t, kiln_dtype *out) {
    if (t.lanes != 1) return false;
    switch (t.code) {
    case kDLFloat:
        *out = t.bits == 16 ? KILN_F16 : t.bits == 32 ? KILN_F32 : t.bits == 64 ? KILN_F64 : KILN_DTYPE_UNDEFINED;
        break;
    case kDLBfloat: *out = t.bits == 16 ? KILN_BF16 : KILN_DTYPE_UNDEFINED; break;
    case kDLInt:
        *out = t.bits == 8 ? KILN_I8 : t.bits == 16 ? KILN_I16 : t.bits == 32 ? KILN_I32 : t.bits == 64 ? KILN_I64
                                                                                                      : KILN_DTYPE_UNDEFINED;
        break;
    case kDLUInt:
        *out = t.bits == 8 ? KILN_U8 : t.bits == 16 ? KILN_U16 : t.bits == 32 ? KILN_U32 : t.bits == 64 ? KILN_U64
                                                                                                       : KILN_DTYPE_UNDEFINED;
        break;
    case KILN_DL_BOOL: *out = t.bits == 8 ? KILN_BOOL : KILN_DTYPE_UNDEFINED; break;
    default: return false;
    }
    return *out != KILN_DTYPE_UNDEFINED;
}

static DLDataType dl_of(kiln_dtype t) {
    DLDataType d = {.lanes = 1, .bits = (uint8_t)(kiln_dtype_size(t) * 8)};
    switch (t) {
    case KILN_F16: case KILN_F32: case KILN_F64: d.code = kDLFloat; break;
    case KILN_BF16: d.code = kDLBfloat; break;
    case KILN_I8: case KILN_I16: case KILN_I32: case KILN_I64: d.code = kDLInt; break;
    case KILN_BOOL: d.code = KILN_DL_BOOL; break;
    default: d.code = kDLUInt; break;
    }
    return d;
}

static const char *dl_device_name(int t) {
    switch (t) {
    case kDLCPU: return "kDLCPU";
    case kDLCUDA: return "kDLCUDA";
    case kDLCUDAHost: return "kDLCUDAHost";
    case kDLOpenCL: return "kDLOpenCL";
    case kDLVulkan: return "kDLVulkan";
    case kDLMetal: return "kDLMetal";
    case kDLROCM: return "kDLROCM";
    case kDLCUDAManaged: return "kDLCUDAManaged";
    default: return "another device";
    }
}

kiln_status kiln_tensor_from_dlpack(kiln_context *ctx, struct DLManagedTensor *src, kiln_tensor **out) {
    if (!ctx || !src || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    const DLTensor *x = &src->dl_tensor;
    kiln_dtype dt = KILN_DTYPE_UNDEFINED;
    if (!dl_dtype(x->dtype, &dt))
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "DLPack tensor of dtype code %u, %u bits, %u lanes: kiln has no such dtype",
                         (unsigned)x->dtype.code, (unsigned)x->dtype.bits, (unsigned)x->dtype.lanes);
    if (x->ndim < 0 || x->ndim > KILN_MAX_DIMS)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "DLPack tensor of %d dims: kiln takes 0 to %d", x->ndim,
                         KILN_MAX_DIMS);
    if (x->ndim > 0 && !x->shape) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "DLPack tensor without a shape");
    kiln_device dev;
    switch ((int)x->device.device_type) {
    case kDLCPU: case kDLCUDAHost: dev = KILN_DEVICE_CPU; break;
    case kDLCUDA: case kDLCUDAManaged: dev = KILN_DEVICE_CUDA; break;
    default:
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "DLPack tensor on %s (device type %d): kiln reads host and CUDA memory",
                         dl_device_name((int)x->device.device_type), (int)x->device.device_type);
    }
    int64_t dims[KILN_MAX_DIMS] = {0};
    for (int d = 0; d < x->ndim; d++) dims[d] = x->shape[d];
    kiln_status st = check_shape(ctx, dt, x->ndim, dims);
    if (st) return st;
    /* strides: row-major compact, or channels_last for 4-D; size-1 dims may carry any */
    kiln_format fmt = KILN_FORMAT_NCHW;
    if (x->strides) {
        int64_t rm[KILN_MAX_DIMS];
        kiln_strides(x->ndim, dims, rm);
        bool row_major = true, nhwc = x->ndim == 4;
        for (int d = 0; d < x->ndim; d++)
            if (dims[d] > 1 && x->strides[d] != rm[d]) row_major = false;
        if (nhwc) {
            const int64_t C = dims[1], W = dims[3], H = dims[2];
            const int64_t want[4] = {H * W * C, 1, W * C, C};
            for (int d = 0; d < 4; d++)
                if (dims[d] > 1 && x->strides[d] != want[d]) nhwc = false;
        }
        if (!row_major && !nhwc) {
            char sh[200];
            size_t k = 0;
            for (int d = 0; d < x->ndim && k < sizeof sh; d++)
                k += (size_t)snprintf(sh + k, sizeof sh - k, "%s%lld/%lld", d ? "," : "", (long long)dims[d],
                                      (long long)x->strides[d]);
            return kiln_fail(ctx, KILN_ERR_UNSUPPORTED,
                             "DLPack tensor with dims/strides %s: kiln takes compact row-major (or 4-D channels_last) "
                             "tensors; make it contiguous first",
                             sh);
        }
        if (!row_major && nhwc) fmt = KILN_FORMAT_NHWC;
    }
    if (kiln_numel(x->ndim, dims) > 0 && !x->data)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "DLPack tensor with no data");
    if (dev == KILN_DEVICE_CUDA) {
        const kiln_backend_i *bi = NULL;
        if ((st = device_backend(ctx, dev, (int)x->device.device_id, &bi))) return st;
    }
    kiln_tensor *t = kiln_calloc(ctx, 1, sizeof *t, "a tensor");
    if (!t) return KILN_ERR_OUT_OF_MEMORY;
    kiln_tensor_set_shape(t, dt, x->ndim, dims);
    t->format = fmt;
    t->data = x->data ? (char *)x->data + x->byte_offset : NULL;
    t->ctx = ctx;
    t->device = dev;
    t->device_index = dev == KILN_DEVICE_CPU ? 0 : (int)x->device.device_id;
    t->dl = src;
    t->public_handle = true;
    *out = t;
    return KILN_OK;
}

/* An export: the DLManagedTensor, its shape and strides, and the reference it holds. */
typedef struct dl_export {
    DLManagedTensor m;
    int64_t shape[KILN_MAX_DIMS];
    int64_t strides[KILN_MAX_DIMS];
} dl_export;

static void dl_export_free(DLManagedTensor *m) {
    if (!m) return;
    kiln_tensor_free(m->manager_ctx);
    free(m);
}

kiln_status kiln_tensor_to_dlpack(kiln_context *ctx, kiln_tensor *t, struct DLManagedTensor **out) {
    if (!ctx || !t || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!t->public_handle)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                         "kiln_tensor_to_dlpack: this tensor belongs to a session (kiln_session_run's outputs are "
                         "overwritten by its next run); export the outputs of kiln_session_run_into instead");
    dl_export *e = kiln_calloc(ctx, 1, sizeof *e, "a DLPack export");
    if (!e) return KILN_ERR_OUT_OF_MEMORY;
    for (int d = 0; d < t->ndim; d++) e->shape[d] = t->dims[d];
    if (t->ndim == 4 && t->format == KILN_FORMAT_NHWC) {
        const int64_t C = t->dims[1], H = t->dims[2], W = t->dims[3];
        e->strides[0] = H * W * C;
        e->strides[1] = 1;
        e->strides[2] = W * C;
        e->strides[3] = C;
    } else {
        kiln_strides(t->ndim, t->dims, e->strides);
    }
    DLTensor *x = &e->m.dl_tensor;
    x->data = t->data;
    x->device.device_type = t->device == KILN_DEVICE_CUDA ? kDLCUDA : kDLCPU;
    x->device.device_id = t->device == KILN_DEVICE_CUDA ? t->device_index : 0;
    x->ndim = t->ndim;
    x->dtype = dl_of(t->dtype);
    x->shape = e->shape;
    x->strides = e->strides;
    x->byte_offset = 0;
    e->m.manager_ctx = t;
    e->m.deleter = dl_export_free;
    __atomic_add_fetch(&t->extra_refs, 1, __ATOMIC_ACQ_REL);
    *out = &e->m;
    return KILN_OK;
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
    kiln_status st = kiln_require_host(ctx, t, "kiln_tensor_to_format");
    if (st) return st;
    kiln_tensor *r = kiln_tensor_new(ctx, t->dtype, t->ndim, t->dims);
    if (!r) return KILN_ERR_OUT_OF_MEMORY;
    if (t->format == format || t->ndim != 4) memcpy(r->data, t->data, kiln_tensor_nbytes(t));
    else kiln_layout_convert(t, r->data, format);
    r->format = format;
    *out = r;
    return KILN_OK;
}
