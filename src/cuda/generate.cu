/*
 * generate.cu — ops whose outputs depend on shapes, attributes and values known when the
 * plan is built, never on device data: Shape, Size, Constant, ConstantOfShape, Range and
 * NonZero.
 *
 * The planner folds them whenever it can (Shape always; the others unless the session
 * turned folding off and the output has more than 64 elements), so these kernels run
 * only in unfolded plans. Their values are computed on the host when the kernel is
 * launched and reach the device as kernel parameters, passed by value: never as a copy
 * out of pageable host memory, which a CUDA graph could not capture and replay.
 *   Shape: dims[start:end] (opset 15 clamping, as src/ops/shape.c) as int64.
 *   Size: the input's element count as an int64 scalar.
 *   NonZero: the indices of the nonzero elements of its input's host value (a value
 *     input), written a chunk at a time.
 *   Constant: the attribute's bytes (value, value_float(s), value_int(s)), in chunks of
 *     up to PARAM_CHUNK bytes per launch.
 *   ConstantOfShape: the `value` attribute's one element (default f32 0) everywhere.
 *   Range: start + i * delta from the host values of start and delta (c->host_in): in
 *     double for floats (then rounded as kiln_set_f64 does: through float for f16 and
 *     bf16), in int64 for integers (stored modulo the output width).
 */
#include "dtype.cuh"

#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;
/* bytes of one by-value chunk: with the pointer and count, under the 4 KiB of kernel
 * parameters every CUDA version accepts */
constexpr int PARAM_CHUNK = 4000;

struct Chunk {
    unsigned char b[PARAM_CHUNK];
};

__global__ void write_chunk(unsigned char *dst, Chunk c, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = c.b[i];
}

/* dst (device) = bytes of host memory src, through kernel parameters. */
kiln_status write_bytes(kiln_cuda *cu, kiln_context *ctx, void *dst, const void *src, size_t bytes) {
    Chunk c;
    for (size_t at = 0; at < bytes; at += PARAM_CHUNK) {
        const int n = (int)(bytes - at < (size_t)PARAM_CHUNK ? bytes - at : (size_t)PARAM_CHUNK);
        memcpy(c.b, (const char *)src + at, (size_t)n);
        write_chunk<<<1, THREADS, 0, cu->stream>>>((unsigned char *)dst + at, c, n);
        KILN_CUDA_LAUNCHED(ctx, "write_chunk");
    }
    return KILN_OK;
}

template <typename E> __global__ void fill_kernel(E *y, E v, int64_t n) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) y[i] = v;
}

template <typename E>
kiln_status launch_fill(kiln_cuda *cu, kiln_context *ctx, void *y, const void *value, int64_t n) {
    E v;
    memcpy(&v, value, sizeof v);
    fill_kernel<E><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((E *)y, v, n);
    KILN_CUDA_LAUNCHED(ctx, "fill_kernel");
    return KILN_OK;
}

/* Range, floats: T from the double start + i * delta, as the CPU stores it. */
template <typename T> __device__ __forceinline__ T from_double(double v) {
    if constexpr (std::is_same<T, double>::value) return v;
    else return from_f<T>((float)v);
}

template <typename T> __global__ void range_float(T *y, double start, double delta, int64_t n) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) y[i] = from_double<T>(start + (double)i * delta);
}

/* Range, integers: the low bits of start + i * delta (wrapping in uint64). */
template <typename T> __global__ void range_int(T *y, int64_t start, int64_t delta, int64_t n) {
    for (int64_t i = thread_index(); i < n; i += grid_stride())
        y[i] = (T)((uint64_t)start + (uint64_t)i * (uint64_t)delta);
}

template <typename T>
kiln_status launch_range_float(kiln_cuda *cu, kiln_context *ctx, void *y, double start, double delta, int64_t n) {
    range_float<T><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((T *)y, start, delta, n);
    KILN_CUDA_LAUNCHED(ctx, "range_float");
    return KILN_OK;
}

template <typename T>
kiln_status launch_range_int(kiln_cuda *cu, kiln_context *ctx, void *y, int64_t start, int64_t delta, int64_t n) {
    range_int<T><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((T *)y, start, delta, n);
    KILN_CUDA_LAUNCHED(ctx, "range_int");
    return KILN_OK;
}

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" kiln_status kiln_cuda_k_shape(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    const int64_t r = x->ndim;
    int64_t start = 0, end = r;
    if (c->node->opset >= 15) {
        start = kiln_attr_int(c->node, "start", 0);
        end = kiln_attr_int(c->node, "end", r);
    }
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = start < 0 ? 0 : start > r ? r : start;
    end = end < 0 ? 0 : end > r ? r : end;
    if (end < start) end = start;
    if (end - start != kiln_tensor_numel(c->out[0]))
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "Shape's output has %lld elements, %lld expected",
                         (long long)kiln_tensor_numel(c->out[0]), (long long)(end - start));
    return write_bytes(cu, c->kctx, c->out[0]->data, x->dims + start, (size_t)(end - start) * sizeof(int64_t));
}

extern "C" kiln_status kiln_cuda_k_size(kiln_cuda *cu, kiln_op_ctx *c) {
    const int64_t n = kiln_tensor_numel(c->in[0]);
    if (kiln_tensor_numel(c->out[0]) != 1 || c->out[0]->dtype != KILN_I64)
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "Size's output is not an int64 scalar");
    return write_bytes(cu, c->kctx, c->out[0]->data, &n, sizeof n);
}

extern "C" kiln_status kiln_cuda_k_constant(kiln_cuda *cu, kiln_op_ctx *c) {
    static const char *const kinds[] = {"value", "value_float", "value_floats", "value_int", "value_ints"};
    const kiln_attr *a = NULL;
    for (int k = 0; k < 5 && !a; k++) a = kiln_node_attr(c->node, kinds[k]);
    kiln_tensor *y = c->out[0];
    const size_t bytes = kiln_tensor_nbytes(y);
    if (!a) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "Constant has no value attribute");
    if (strcmp(a->name, "value") == 0) {
        if (!a->t || kiln_tensor_nbytes(a->t) != bytes)
            return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "Constant's value does not match its output");
        return write_bytes(cu, c->kctx, y->data, a->t->data, bytes);
    }
    if (strcmp(a->name, "value_float") == 0) {
        const float v = a->type == KILN_ATTR_INT ? (float)a->i : a->f;
        return write_bytes(cu, c->kctx, y->data, &v, sizeof v);
    }
    if (strcmp(a->name, "value_int") == 0) return write_bytes(cu, c->kctx, y->data, &a->i, sizeof a->i);
    if (strcmp(a->name, "value_ints") == 0) {
        if ((size_t)a->n * sizeof(int64_t) != bytes)
            return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "Constant's value_ints does not match its output");
        return write_bytes(cu, c->kctx, y->data, a->ints, bytes);
    }
    /* value_floats, which the attribute parser may hand over as INTS */
    if ((size_t)a->n * sizeof(float) != bytes)
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "Constant's value_floats does not match its output");
    float buf[PARAM_CHUNK / sizeof(float)];
    const int per = (int)(sizeof buf / sizeof buf[0]);
    for (int at = 0; at < a->n; at += per) {
        const int n = a->n - at < per ? a->n - at : per;
        for (int k = 0; k < n; k++) buf[k] = a->type == KILN_ATTR_INTS ? (float)a->ints[at + k] : a->floats[at + k];
        kiln_status st = write_bytes(cu, c->kctx, (float *)y->data + at, buf, (size_t)n * sizeof(float));
        if (st) return st;
    }
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_constant_of_shape(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (n == 0) return KILN_OK;
    const kiln_attr *a = kiln_node_attr(c->node, "value");
    uint64_t zero = 0;
    const void *value = &zero;
    if (a) {
        if (a->type != KILN_ATTR_TENSOR || !a->t || a->t->dtype != y->dtype || kiln_tensor_numel(a->t) != 1)
            return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "ConstantOfShape's value does not match its output");
        value = a->t->data;
    }
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, c->kctx, kiln_dtype_size(y->dtype), launch_fill, cu, c->kctx, y->data, value, n);
    return st;
}

extern "C" kiln_status kiln_cuda_k_range(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (n == 0) return KILN_OK;
    kiln_status st = kiln_cuda_need_host(c);
    if (st) return st;
    const kiln_tensor *start = c->host_in[0], *delta = c->host_in[2];
    if (!start || !delta || !start->data || !delta->data)
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "Range needs the host values of start and delta");
    kiln_context *ctx = c->kctx;
    if (kiln_dtype_is_float(y->dtype)) {
        const double s = kiln_get_f64(start, 0), d = kiln_get_f64(delta, 0);
        switch (y->dtype) {
        case KILN_F32: return launch_range_float<float>(cu, ctx, y->data, s, d, n);
        case KILN_F64: return launch_range_float<double>(cu, ctx, y->data, s, d, n);
        case KILN_F16: return launch_range_float<__half>(cu, ctx, y->data, s, d, n);
        default: return launch_range_float<__nv_bfloat16>(cu, ctx, y->data, s, d, n);
        }
    }
    const int64_t s = kiln_get_i64(start, 0), d = kiln_get_i64(delta, 0);
    KILN_CU_SIZE_DISPATCH(st, ctx, kiln_dtype_size(y->dtype), launch_range_int, cu, ctx, y->data, s, d, n);
    return st;
}

/* NonZero: X is a value input, so its host value (c->host_in[0]) decides the output; the
 * indices are computed on the host a chunk at a time and written through kernel
 * parameters (no allocation, capturable in a CUDA graph). */
extern "C" kiln_status kiln_cuda_k_non_zero(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_status st = kiln_cuda_need_host(c);
    if (st) return st;
    const kiln_tensor *x = c->host_in[0];
    kiln_tensor *y = c->out[0];
    if (!x || (!x->data && kiln_tensor_numel(x) > 0))
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "NonZero's input is not known on the host");
    const int64_t n = kiln_tensor_numel(x), count = y->ndim == 2 ? y->dims[1] : 0;
    const bool fl = kiln_dtype_is_float(x->dtype);
    int64_t buf[PARAM_CHUNK / sizeof(int64_t)];
    const int per = (int)(sizeof buf / sizeof buf[0]);
    /* row d of the output: the d-th coordinate of every nonzero element */
    for (int d = 0; d < x->ndim && !st; d++) {
        int64_t k = 0, filled = 0, at = d * count;
        for (int64_t i = 0; i < n && k < count && !st; i++) {
            if (fl ? kiln_get_f64(x, i) == 0 : kiln_get_i64(x, i) == 0) continue;
            int64_t rem = i, coord = 0;
            for (int e = x->ndim - 1; e >= d; e--) {
                coord = rem % x->dims[e];
                rem /= x->dims[e];
            }
            buf[filled++] = coord;
            k++;
            if (filled == per || k == count) {
                st = write_bytes(cu, c->kctx, (int64_t *)y->data + at, buf, (size_t)filled * sizeof(int64_t));
                at += filled;
                filled = 0;
            }
        }
    }
    return st;
}
