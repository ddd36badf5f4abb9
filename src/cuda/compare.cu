/*
 * compare.cu — comparisons and selection with numpy broadcasting, any dtype.
 *
 *   Equal / Less / Greater: bool output (one byte, 0 or 1). Both inputs have one dtype:
 *     floats compare by value (f16 / bf16 widened to float, exact; NaN compares false,
 *     even with itself; -0 == 0), signed integers as int64, unsigned ones as uint64, bool
 *     as "nonzero", like the CPU reference (src/ops/equal.c, less.c, greater.c).
 *   GreaterOrEqual / LessOrEqual the same way; And / Or / Xor on bool inputs.
 *   BitShift(A, B) on one unsigned integer dtype: A << B or A >> B (direction), a shift by
 *     64 or more giving 0 and bits past the width dropped, as src/ops/bit_shift.c.
 *   Where(condition, X, Y): condition bool (any nonzero byte is true), X and Y of one
 *     dtype copied as opaque elements of 1, 2, 4 or 8 bytes.
 * The broadcast is planned on the host by kiln_cuda_bcast_init (size-1 dims dropped,
 * neighbouring dims merged) and walked with index arithmetic over the merged dims.
 */
#include "dtype.cuh"

#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

struct Bcast3 {
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    int64_t st[3][KILN_MAX_DIMS];
};

Bcast3 plan_of(const kiln_tensor *y, int nin, const kiln_tensor *const *in) {
    kiln_cuda_bcast p;
    kiln_cuda_bcast_init(&p, y->ndim, y->dims, nin, in);
    Bcast3 b;
    memset(&b, 0, sizeof b);
    b.nd = p.nd;
    for (int d = 0; d < p.nd; d++) {
        b.dims[d] = p.dims[d];
        for (int k = 0; k < nin; k++) b.st[k][d] = p.st[k][d];
    }
    return b;
}

/* Offsets into each of NIN inputs of output element i. */
template <int NIN> __device__ __forceinline__ void offsets(const Bcast3 &b, int64_t i, int64_t *off) {
#pragma unroll
    for (int k = 0; k < NIN; k++) off[k] = 0;
    for (int d = b.nd - 1; d >= 0; d--) {
        const int64_t j = i % b.dims[d];
        i /= b.dims[d];
#pragma unroll
        for (int k = 0; k < NIN; k++) off[k] += j * b.st[k][d];
    }
}

/* ---------------------------------------------------------------- comparisons */

enum CmpOp { C_EQUAL, C_LESS, C_GREATER, C_GREATER_EQUAL, C_LESS_EQUAL, C_AND, C_OR, C_XOR };

template <int OP, typename K> __device__ __forceinline__ bool cmp_op(K u, K v) {
    if constexpr (OP == C_EQUAL) return u == v;
    else if constexpr (OP == C_LESS) return u < v;
    else if constexpr (OP == C_GREATER) return u > v;
    else if constexpr (OP == C_GREATER_EQUAL) return u >= v;
    else if constexpr (OP == C_LESS_EQUAL) return u <= v;
    else if constexpr (OP == C_AND) return u != 0 && v != 0;
    else if constexpr (OP == C_OR) return u != 0 || v != 0;
    else return (u != 0) != (v != 0);
}

/* The value a comparison sees of an element of T. */
template <typename T> struct Key { using type = T; };
template <> struct Key<__half> { using type = float; };
template <> struct Key<__nv_bfloat16> { using type = float; };
template <typename T> __device__ __forceinline__ typename Key<T>::type key(T v) { return v; }
template <> __device__ __forceinline__ float key<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float key<__nv_bfloat16>(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

/* Bool bytes compare by truth value. */
struct BoolByte {
    uint8_t v;
};
template <> struct Key<BoolByte> { using type = int; };
template <> __device__ __forceinline__ int key<BoolByte>(BoolByte v) { return v.v != 0; }

template <typename T, int OP>
__global__ void compare_kernel(const T *a, const T *b, uint8_t *y, int64_t n, Bcast3 g) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        int64_t off[2];
        offsets<2>(g, i, off);
        const auto u = key(a[off[0]]), v = key(b[off[1]]);
        y[i] = cmp_op<OP>(u, v);
    }
}

template <typename T>
kiln_status launch_compare(kiln_cuda *cu, kiln_context *ctx, int op, const void *a, const void *b,
                           void *y, int64_t n, const Bcast3 &g) {
    const unsigned blocks = kiln_cuda_blocks(cu, n, THREADS);
    const T *ap = (const T *)a, *bp = (const T *)b;
    uint8_t *yp = (uint8_t *)y;
    switch (op) {
    case C_EQUAL: compare_kernel<T, C_EQUAL><<<blocks, THREADS, 0, cu->stream>>>(ap, bp, yp, n, g); break;
    case C_LESS: compare_kernel<T, C_LESS><<<blocks, THREADS, 0, cu->stream>>>(ap, bp, yp, n, g); break;
    case C_GREATER: compare_kernel<T, C_GREATER><<<blocks, THREADS, 0, cu->stream>>>(ap, bp, yp, n, g); break;
    case C_GREATER_EQUAL:
        compare_kernel<T, C_GREATER_EQUAL><<<blocks, THREADS, 0, cu->stream>>>(ap, bp, yp, n, g);
        break;
    case C_LESS_EQUAL: compare_kernel<T, C_LESS_EQUAL><<<blocks, THREADS, 0, cu->stream>>>(ap, bp, yp, n, g); break;
    case C_AND: compare_kernel<T, C_AND><<<blocks, THREADS, 0, cu->stream>>>(ap, bp, yp, n, g); break;
    case C_OR: compare_kernel<T, C_OR><<<blocks, THREADS, 0, cu->stream>>>(ap, bp, yp, n, g); break;
    default: compare_kernel<T, C_XOR><<<blocks, THREADS, 0, cu->stream>>>(ap, bp, yp, n, g); break;
    }
    KILN_CUDA_LAUNCHED(ctx, "compare_kernel");
    return KILN_OK;
}

/* ------------------------------------------------------------------ bit shift */

template <typename U, bool LEFT>
__global__ void shift_kernel(const U *a, const U *b, U *y, int64_t n, Bcast3 g) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        int64_t off[2];
        offsets<2>(g, i, off);
        const uint64_t u = a[off[0]], s = b[off[1]];
        y[i] = s >= 64 ? (U)0 : (U)(LEFT ? u << s : u >> s);
    }
}

template <typename U>
kiln_status launch_shift(kiln_cuda *cu, kiln_context *ctx, bool left, const void *a, const void *b, void *y,
                         int64_t n, const Bcast3 &g) {
    const unsigned blocks = kiln_cuda_blocks(cu, n, THREADS);
    if (left) shift_kernel<U, true><<<blocks, THREADS, 0, cu->stream>>>((const U *)a, (const U *)b, (U *)y, n, g);
    else shift_kernel<U, false><<<blocks, THREADS, 0, cu->stream>>>((const U *)a, (const U *)b, (U *)y, n, g);
    KILN_CUDA_LAUNCHED(ctx, "shift_kernel");
    return KILN_OK;
}

/* --------------------------------------------------------------------- where */

template <typename E>
__global__ void where_kernel(const uint8_t *cond, const E *x, const E *yv, E *out, int64_t n, Bcast3 g) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        int64_t off[3];
        offsets<3>(g, i, off);
        out[i] = cond[off[0]] ? x[off[1]] : yv[off[2]];
    }
}

template <typename E>
kiln_status launch_where(kiln_cuda *cu, kiln_context *ctx, const void *cond, const void *x, const void *yv,
                         void *out, int64_t n, const Bcast3 &g) {
    where_kernel<E><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(
        (const uint8_t *)cond, (const E *)x, (const E *)yv, (E *)out, n, g);
    KILN_CUDA_LAUNCHED(ctx, "where_kernel");
    return KILN_OK;
}

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" kiln_status kiln_cuda_k_compare(kiln_cuda *cu, kiln_op_ctx *c) {
    const char *name = c->node->op_type;
    const int op = strcmp(name, "Equal") == 0            ? C_EQUAL
                   : strcmp(name, "Less") == 0           ? C_LESS
                   : strcmp(name, "Greater") == 0        ? C_GREATER
                   : strcmp(name, "GreaterOrEqual") == 0 ? C_GREATER_EQUAL
                   : strcmp(name, "LessOrEqual") == 0    ? C_LESS_EQUAL
                   : strcmp(name, "And") == 0            ? C_AND
                   : strcmp(name, "Or") == 0             ? C_OR
                   : strcmp(name, "Xor") == 0            ? C_XOR
                                                         : -1;
    if (op < 0) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "op %s is not a comparison", name);
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (n == 0) return KILN_OK;
    const Bcast3 g = plan_of(y, 2, (const kiln_tensor *const *)c->in);
    const void *a = c->in[0]->data, *b = c->in[1]->data;
    kiln_context *ctx = c->kctx;
    switch (c->in[0]->dtype) {
    case KILN_F32: return launch_compare<float>(cu, ctx, op, a, b, y->data, n, g);
    case KILN_F64: return launch_compare<double>(cu, ctx, op, a, b, y->data, n, g);
    case KILN_F16: return launch_compare<__half>(cu, ctx, op, a, b, y->data, n, g);
    case KILN_BF16: return launch_compare<__nv_bfloat16>(cu, ctx, op, a, b, y->data, n, g);
    case KILN_BOOL: return launch_compare<BoolByte>(cu, ctx, op, a, b, y->data, n, g);
    case KILN_U8: return launch_compare<uint8_t>(cu, ctx, op, a, b, y->data, n, g);
    case KILN_U16: return launch_compare<uint16_t>(cu, ctx, op, a, b, y->data, n, g);
    case KILN_U32: return launch_compare<uint32_t>(cu, ctx, op, a, b, y->data, n, g);
    case KILN_U64: return launch_compare<uint64_t>(cu, ctx, op, a, b, y->data, n, g);
    case KILN_I8: return launch_compare<int8_t>(cu, ctx, op, a, b, y->data, n, g);
    case KILN_I16: return launch_compare<int16_t>(cu, ctx, op, a, b, y->data, n, g);
    case KILN_I32: return launch_compare<int32_t>(cu, ctx, op, a, b, y->data, n, g);
    case KILN_I64: return launch_compare<int64_t>(cu, ctx, op, a, b, y->data, n, g);
    default: break;
    }
    return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s of %s has no CUDA kernel", name,
                     kiln_dtype_name(c->in[0]->dtype));
}

extern "C" kiln_status kiln_cuda_k_where(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (n == 0) return KILN_OK;
    const Bcast3 g = plan_of(y, 3, (const kiln_tensor *const *)c->in);
    const void *cond = c->in[0]->data, *x = c->in[1]->data, *v = c->in[2]->data;
    kiln_context *ctx = c->kctx;
    switch (kiln_dtype_size(y->dtype)) {
    case 1: return launch_where<uint8_t>(cu, ctx, cond, x, v, y->data, n, g);
    case 2: return launch_where<uint16_t>(cu, ctx, cond, x, v, y->data, n, g);
    case 4: return launch_where<uint32_t>(cu, ctx, cond, x, v, y->data, n, g);
    case 8: return launch_where<uint64_t>(cu, ctx, cond, x, v, y->data, n, g);
    default: break;
    }
    return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "elements of %zu bytes", kiln_dtype_size(y->dtype));
}

extern "C" kiln_status kiln_cuda_k_bit_shift(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (n == 0) return KILN_OK;
    const bool left = strcmp(kiln_attr_string(c->node, "direction", ""), "LEFT") == 0;
    const Bcast3 g = plan_of(y, 2, (const kiln_tensor *const *)c->in);
    const void *a = c->in[0]->data, *b = c->in[1]->data;
    switch (y->dtype) {
    case KILN_U8: return launch_shift<uint8_t>(cu, c->kctx, left, a, b, y->data, n, g);
    case KILN_U16: return launch_shift<uint16_t>(cu, c->kctx, left, a, b, y->data, n, g);
    case KILN_U32: return launch_shift<uint32_t>(cu, c->kctx, left, a, b, y->data, n, g);
    case KILN_U64: return launch_shift<uint64_t>(cu, c->kctx, left, a, b, y->data, n, g);
    default:
        return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "BitShift of dtype %s", kiln_dtype_name(y->dtype));
    }
}
