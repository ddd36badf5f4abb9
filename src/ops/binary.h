/*
 * binary.h — shared machinery for elementwise ops with numpy broadcasting: the two-input
 * ops (Add, Sub, Mul, Div, Pow, PRelu, Equal, Less, Greater), the variadic ones (Sum,
 * Mean, Min, Max) and Where.
 *
 * Two layers:
 *   - kiln_bcast: a broadcast plan. The output shape is walked in chunks of one
 *     innermost run; within a chunk every input is either contiguous (step 1) or one
 *     repeated element (step 0). Adjacent dims that are contiguous for every input are
 *     merged first, so same-shape ops become one flat run and "(N,C,H,W) op (C,1,1)"
 *     becomes runs of H*W against one scalar. Large outputs are split across threads.
 *   - kiln_binary_*: infer and forward for two-input and variadic ops, given the op's
 *     semantics as a kiln_binary_kernels table defined in the op's own file: an f32 row
 *     kernel (fast path, generated with KILN_ROW_F32), a double function for the other
 *     float dtypes and an integer function for integer and bool dtypes.
 *
 * And the pieces their gradient rules share: summing a broadcast gradient back to an
 * input, scalar constants in a dtype not yet known, and the selection gradient of Min
 * and Max (kiln.MinGrad / kiln.MaxGrad, defined in min.c and max.c).
 */
#ifndef KILN_OPS_BINARY_H
#define KILN_OPS_BINARY_H

#include "../core/internal.h"

/* ------------------------------------------------------------ broadcast plan */

#define KILN_BCAST_MAX_IN 3

typedef struct kiln_bcast {
    int nin;                                         /* inputs, 1..3 */
    int nd;                                          /* rank after merging dims, >= 1 */
    int64_t dims[KILN_MAX_DIMS];                     /* output dims after merging */
    int64_t st[KILN_BCAST_MAX_IN][KILN_MAX_DIMS];    /* input strides (elements), 0: broadcast */
    int64_t numel;                                   /* output elements */
} kiln_bcast;

/* One run of output elements: output flat indices y .. y+n-1 read input k at flat
 * indices off[k] + i*inc[k], with inc[k] 0 (broadcast) or 1 (contiguous). */
typedef struct kiln_bcast_chunk {
    int64_t y;
    int64_t off[KILN_BCAST_MAX_IN];
    int64_t inc[KILN_BCAST_MAX_IN];
    int64_t n;
} kiln_bcast_chunk;

typedef void (*kiln_bcast_fn)(const kiln_bcast_chunk *ch, void *arg);

/* Plan reading in[0..nin-1] broadcast to the output shape (ndim, dims). The inputs'
 * shapes must broadcast to it (infer has checked). */
void kiln_bcast_init(kiln_bcast *p, int ndim, const int64_t *dims, int nin,
                     const kiln_tensor *const *in);
/* Call fn on chunks covering the whole output, each exactly once; chunks run on several
 * threads when the output is large, so fn must only write its own output elements. */
void kiln_bcast_run(const kiln_bcast *p, kiln_bcast_fn fn, void *arg);

/* Output shape of broadcasting n tensors' shapes; false when they do not broadcast. */
bool kiln_bcast_shape_n(int n, const kiln_tensor *const *t, int *ndim, int64_t *dims);

/* ------------------------------------------------------------ binary ops */

/* f32 row kernel: y[i] = EXPR(a, b) for a = A[i*sa], b = B[i*sb], i < n, where sa and sb
 * are 0 or 1. The output element type is f32 or uint8_t (bool). */
typedef void (*kiln_row_f32_fn)(void *y, const void *A, const void *B, int64_t n, int64_t sa,
                                int64_t sb);

/* Define `static void name(...)` as a kiln_row_f32_fn computing EXPR from floats a and b
 * into OUT_T. The four stride cases get their own loops so that the compiler can
 * vectorize the contiguous and scalar-broadcast ones. */
#define KILN_ROW_F32(name, OUT_T, EXPR)                                                   \
    static void name(void *yv, const void *av, const void *bv, int64_t n, int64_t sa,    \
                     int64_t sb) {                                                        \
        OUT_T *yp = yv;                                                                   \
        const float *ap = av, *bp = bv;                                                   \
        if (sa && sb) {                                                                   \
            for (int64_t i = 0; i < n; i++) {                                             \
                const float a = ap[i], b = bp[i];                                         \
                yp[i] = (EXPR);                                                           \
            }                                                                             \
        } else if (sa) {                                                                  \
            const float b = bp[0];                                                        \
            for (int64_t i = 0; i < n; i++) {                                             \
                const float a = ap[i];                                                    \
                yp[i] = (EXPR);                                                           \
            }                                                                             \
        } else if (sb) {                                                                  \
            const float a = ap[0];                                                        \
            for (int64_t i = 0; i < n; i++) {                                             \
                const float b = bp[i];                                                    \
                yp[i] = (EXPR);                                                           \
            }                                                                             \
        } else {                                                                          \
            const float a = ap[0], b = bp[0];                                             \
            const OUT_T v = (EXPR);                                                       \
            for (int64_t i = 0; i < n; i++) yp[i] = v;                                    \
        }                                                                                 \
    }

/* The semantics of one op. Which function runs:
 *   - both inputs f32 and row_f32 set: row_f32;
 *   - otherwise, either input a float dtype: f64 on the inputs converted to double; the
 *     result is rounded to the output dtype, or for an integer output (Pow with an integer
 *     base, comparisons) stored by kiln_set_f64: truncated toward zero, saturated to
 *     int64 (NaN giving 0), then kept modulo the output width; bool is v != 0;
 *   - otherwise (integers, bool): i64 on the values converted to int64. uns says the
 *     inputs are unsigned: UINT64 values above INT64_MAX arrive as their bit pattern, so
 *     orderings and divisions must reinterpret them as uint64_t. The result is stored
 *     modulo the output width, so wrapping arithmetic can be done on uint64_t.
 * f64 or i64 may be NULL where infer rejects that domain. */
typedef struct kiln_binary_kernels {
    kiln_row_f32_fn row_f32;
    double (*f64)(double a, double b);
    int64_t (*i64)(int64_t a, int64_t b, bool uns);
} kiln_binary_kernels;

/* Dtype rules for infer. */
enum {
    KILN_BIN_FLOAT = 1 << 0,   /* f16, bf16, f32, f64 inputs */
    KILN_BIN_INT = 1 << 1,     /* integer inputs */
    KILN_BIN_BOOL = 1 << 2,    /* bool inputs */
    KILN_BIN_MIXED = 1 << 3,   /* the two inputs may have different dtypes (Pow) */
    KILN_BIN_OUT_BOOL = 1 << 4,/* the output is bool (comparisons); else input 0's dtype */
    KILN_BIN_UNIDIR = 1 << 5   /* input 1 broadcasts to input 0's shape (PRelu) */
};

/* Two inputs A, B: check dtypes against flags, broadcast the shapes, set the output. */
kiln_status kiln_binary_infer(kiln_op_ctx *c, unsigned flags);
/* out[0] = k(in[0], in[1]) elementwise with broadcasting. */
kiln_status kiln_binary_forward(kiln_op_ctx *c, const kiln_binary_kernels *k);

/* 1..N inputs of one dtype (flags: which dtypes), multidirectional broadcasting. */
kiln_status kiln_variadic_infer(kiln_op_ctx *c, unsigned flags);
/* out[0] = k(...k(k(in[0], in[1]), in[2])..., in[N-1]); a copy of in[0] for one input. */
kiln_status kiln_variadic_forward(kiln_op_ctx *c, const kiln_binary_kernels *k);

/* y = k(a, b) with a and b broadcast to y's shape (y may be a itself when a has y's
 * shape). y's dtype is the op's output dtype. */
void kiln_binary_apply(const kiln_binary_kernels *k, const kiln_tensor *a,
                       const kiln_tensor *b, kiln_tensor *y);

/* ------------------------------------------------------------ gradients */

/* dx[k] = grad (shaped like the op's output) summed back to input k's shape. */
kiln_status kiln_binary_grad_input(kiln_grad_ctx *g, int k, int grad);
/* dx[k] = grad summed back to input k's shape for every needed input k. */
kiln_status kiln_binary_grad_all(kiln_grad_ctx *g, int grad);
/* Fail with KILN_ERR_UNSUPPORTED, naming the input, when a needed input's dtype is known
 * and is not a float (integer inputs have no gradient). */
kiln_status kiln_binary_grad_check(kiln_grad_ctx *g);
/* The scalar constant v in like's dtype: CastLike of an f64 initializer, folded by the
 * planner (CastLike reads only like's dtype). Rules cannot name the dtype themselves: it
 * is unknown until a plan when the graph has symbolic dims. Returns a value or -1. */
int kiln_binary_grad_scalar(kiln_grad_ctx *g, double v, int like);

/* Min and Max: input k's gradient is dY where X_k is the selected input, i.e. equals Y
 * (both NaN counts as equal), and no earlier input does: ties go to the first input.
 * Emits grad_op ("MinGrad" or "MaxGrad") per needed input, then sums it back. */
kiln_status kiln_select_grad_rule(kiln_grad_ctx *g, const char *grad_op);
/* kiln.MinGrad / kiln.MaxGrad(dY, Y, X_0, ..., X_{n-1}), attribute index = k: the
 * gradient of X_k before it is summed back, with dY's shape and dtype. */
kiln_status kiln_select_grad_infer(kiln_op_ctx *c);
kiln_status kiln_select_grad_forward(kiln_op_ctx *c);

/* Test inputs for gradient checks: f64 with |v| in [lo, hi) and random signs, so that
 * kinks at 0 (PRelu) are avoided. */
kiln_tensor *kiln_binary_rand_signed(int ndim, const int64_t *dims, double lo, double hi,
                                     uint64_t seed);

#endif
