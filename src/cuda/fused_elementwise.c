/*
 * fused_elementwise.c — kiln.FusedElementwise(x0, x1, ...) -> y0 on CUDA: CUDA C generated
 * from the node's postfix `program` (see FUSED.md), compiled by NVRTC and cached on the
 * kiln_cuda.
 *
 *   Program: space-separated tokens; `i<k>` pushes input k, `c<float>` a constant; unary
 *   ops (Relu Sigmoid Tanh Exp Log Sqrt Reciprocal Abs Neg Erf Floor Ceil Softplus
 *   Softsign HardSwish, and LeakyRelu@alpha Elu@alpha HardSigmoid@alpha@beta Clip@lo@hi
 *   with their parameters, all required, after `@`) pop one value and push one; binary ops (Add Sub Mul Div Pow Max Min) pop the right then the left operand.
 *   Exactly one value is left: y0. The program becomes one straight-line __device__
 *   function of the inputs' values (each input loaded once however often it is pushed).
 *
 *   Dtypes: every input and y0 share one of f32, f16, bf16. Values are computed in f32,
 *   each op in the same form as the unfused kernels of elementwise.cu (and the CPU
 *   reference), compiled with --fmad=false so that a*b+c rounds twice as on the CPU; the
 *   result is rounded once to the output dtype (nearest even). f16/bf16 are converted with
 *   PTX cvt instructions, so the source includes no headers and compiles in ~0.1 s.
 *
 *   NHWC: a 4-D NHWC output is walked in storage order, as (N, H, W, C); its 4-D inputs are
 *   NHWC too (any broadcast among them) or have the same bytes in both layouts (a
 *   per-channel (C,1,1), a scalar), read as (1, 1, 1, C) and so on (walk_dims).
 *
 *   Broadcasting (numpy, among all inputs): the output's dims are merged as in
 *   kiln_cuda_bcast_init (size-1 dims dropped, neighbours merged where every input walks
 *   them as one run), giving each input a kind: contiguous (the output's strides: indexed
 *   by the flat index), scalar (loaded once per thread), or general (an offset from the
 *   output coordinates and its strides; dims where its stride is 0 cost nothing). The
 *   coordinates come from divisions by the merged dims, done as multiply-high and shift
 *   with per-dim magic numbers (computed on the host) when the output has < 2^31 elements,
 *   plain 64-bit division otherwise.
 *
 *   One NVRTC module per (program, dtype, merged rank, each input's kind and zero-stride
 *   dims, 32/64-bit indexing, whether a vector path exists): dims and strides are kernel
 *   arguments, so one module serves every shape with that pattern. A module holds two
 *   kernels: k_s, one element per step, and — when the merged inner dim is a multiple of
 *   the vector width V = 16 bytes / element size (always, with a scalar tail, for one
 *   merged dim) — k_v, which loads and stores 16-byte vectors of V consecutive outputs
 *   (general inputs whose inner stride is 0 give one value per vector). k_v runs when
 *   every pointer it vector-accesses is 16-byte aligned. Each thread keeps UNROLL steps
 *   of loads in flight before computing, over a grid-stride loop.
 *
 *   NHWC (the output 4-D and laid out NHWC): the same kernels over the physical order. The
 *   output's dims (N, C, H, W) are taken as (N, H, W, C), and so are each input's, right-
 *   aligned to rank 4: an NHWC input's bytes are that, and any other input must have the
 *   same bytes in both layouts (C == 1 or H*W == 1: a per-channel (C,1,1) such as an
 *   inference BN's scale and shift, a scalar, an (N,C,1,1) gate), checked with the dtypes.
 *   A per-channel input then walks the inner (C) dim with stride 1: the vector kernel
 *   loads V consecutive channels of it per vector (C a multiple of V).
 *
 *   Compilation happens in kiln_cuda_prepare (the planner calls it when a plan is made)
 *   or, for callers that did not prepare, on the first run.
 */
#include "cuda_internal.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IN 16     /* inputs a generated kernel takes */
#define MAX_STACK 64  /* values live at once while the program runs */
#define MAX_TOKENS 4096
#define THREADS 256
#define UNROLL 2

/* ------------------------------------------------------------------ program */

typedef enum { T_INPUT, T_CONST, T_UNARY, T_BINARY } tok_kind;

/* The elementwise op (kiln_op_def.eltwise with a CUDA form) of this token and arity:
 * a registry index, or -1. */
static int find_op(const char *name, size_t len, int arity) {
    for (int o = 0; o < kiln_op_count(); o++) {
        const kiln_op_def *d = kiln_op_get(o);
        const char *tok = kiln_eltwise_token(d);
        if (tok && d->eltwise->cuda && d->eltwise->arity == arity && strlen(tok) == len && strncmp(tok, name, len) == 0)
            return o;
    }
    return -1;
}

static const char *op_token(int o) { return kiln_eltwise_token(kiln_op_get(o)); }
static int op_nparams(int o) { return kiln_op_get(o)->eltwise->n_params; }

typedef struct tok {
    tok_kind kind;
    int op;         /* input index, or the op's registry index */
    float v[2];     /* constant value; unary params */
} tok;

typedef struct program {
    int n;
    tok *t;          /* (n) */
    unsigned used;   /* bit k: input k is pushed */
} program;

static bool parse_float(const char *s, size_t len, float *out) {
    char buf[64];
    if (len == 0 || len >= sizeof buf) return false;
    memcpy(buf, s, len);
    buf[len] = 0;
    char *end = NULL;
    /* through double, as the CPU reference reads it (strtod, then the compute type) */
    *out = (float)strtod(buf, &end);
    return end == buf + len;
}

/* Parse and check c's program against its inputs: false with a reason in why. */
static bool parse(const kiln_op_ctx *c, program *p, char *why, size_t wn) {
    memset(p, 0, sizeof *p);
    const char *src = kiln_attr_string(c->node, "program", NULL);
    if (!src) {
        snprintf(why, wn, "attribute program is missing");
        return false;
    }
    size_t cap = 1; /* tokens: at most one more than the separators */
    for (const char *s = src; *s; s++) cap += *s == ' ' || *s == '\t' || *s == '\n';
    if (cap > MAX_TOKENS) {
        snprintf(why, wn, "program has more than %d tokens", MAX_TOKENS);
        return false;
    }
    p->t = calloc(cap, sizeof *p->t);
    if (!p->t) {
        snprintf(why, wn, "out of memory parsing the program");
        return false;
    }
    int depth = 0, maxdepth = 0;
    const char *s = src;
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == '\n') s++;
        if (!*s) break;
        const char *e = s;
        while (*e && *e != ' ' && *e != '\t' && *e != '\n') e++;
        const size_t len = (size_t)(e - s);
        tok t;
        memset(&t, 0, sizeof t);
        if (s[0] == 'i' && len > 1 && len < 6 && strspn(s + 1, "0123456789") >= len - 1) {
            t.kind = T_INPUT;
            t.op = atoi(s + 1);
            if (t.op >= c->n_in || t.op >= MAX_IN) {
                snprintf(why, wn, "program token '%.*s': the node has %d inputs", (int)len, s, c->n_in);
                goto bad;
            }
            p->used |= 1u << t.op;
            depth++;
        } else if (s[0] == 'c' && len > 1) {
            t.kind = T_CONST;
            if (!parse_float(s + 1, len - 1, &t.v[0])) {
                snprintf(why, wn, "program token '%.*s' is not a constant", (int)len, s);
                goto bad;
            }
            depth++;
        } else {
            const char *at = memchr(s, '@', len);
            const size_t nlen = at ? (size_t)(at - s) : len;
            const int u = find_op(s, nlen, 1), b = at ? -1 : find_op(s, nlen, 2);
            if (u >= 0) {
                t.kind = T_UNARY;
                t.op = u;
                int np = 0;
                bool ok = true;
                for (const char *q = at; q && q < e && ok; np++) {
                    const char *qe = memchr(q + 1, '@', (size_t)(e - q - 1));
                    if (!qe) qe = e;
                    ok = np < op_nparams(u) && parse_float(q + 1, (size_t)(qe - q - 1), &t.v[np]);
                    q = qe < e ? qe : NULL;
                }
                if (!ok || np != op_nparams(u)) {
                    snprintf(why, wn, "program token '%.*s': %s takes %d numeric parameter(s) after '@'", (int)len,
                             s, op_token(u), op_nparams(u));
                    goto bad;
                }
                if (depth < 1) {
                    snprintf(why, wn, "program token '%.*s' pops an empty stack", (int)len, s);
                    goto bad;
                }
            } else if (b >= 0) {
                t.kind = T_BINARY;
                t.op = b;
                if (depth < 2) {
                    snprintf(why, wn, "program token '%.*s' needs two values on the stack", (int)len, s);
                    goto bad;
                }
                depth--;
            } else {
                snprintf(why, wn, "program token '%.*s' is not an input, constant or known op", (int)len, s);
                goto bad;
            }
        }
        if (depth > maxdepth) maxdepth = depth;
        if (maxdepth > MAX_STACK) {
            snprintf(why, wn, "program keeps more than %d values on the stack", MAX_STACK);
            goto bad;
        }
        p->t[p->n++] = t;
        s = e;
    }
    if (depth != 1) {
        snprintf(why, wn, "program leaves %d values on the stack (exactly 1 expected)", depth);
        goto bad;
    }
    return true;
bad:
    free(p->t);
    p->t = NULL;
    return false;
}

/* ------------------------------------------------------------- broadcast */

/* A 4-D tensor laid out NHWC (the file comment's NHWC case). */
static bool nhwc(const kiln_tensor *t) { return t->ndim == 4 && t->format == KILN_FORMAT_NHWC; }

typedef enum { K_CONTIG, K_SCALAR, K_GENERAL } in_kind;

typedef struct pattern {
    kiln_dtype dt;
    int nin, nd;
    int64_t dims[KILN_MAX_DIMS];          /* merged output dims */
    int64_t st[MAX_IN][KILN_MAX_DIMS];    /* element strides per input, 0: broadcast */
    in_kind kind[MAX_IN];
    int64_t n;
    bool idx32;  /* n < 2^31: 32-bit index arithmetic */
    int vw;      /* elements per 16-byte vector */
    bool vec;    /* a vector kernel exists */
    int unroll;  /* grid-stride steps whose loads each thread issues together */
} pattern;

/* The dims a kernel walks for tensor t of a node whose output is y: t's own, or, when y is
 * 4-D NHWC, t's channels-last dims (N, H, W, C) — the order of its bytes. An NHWC input
 * takes them from its logical (N, C, H, W); any other input (the table's check: its bytes
 * are the same in both layouts, a per-channel (C,1,1) or a scalar) is right-aligned to 4-D
 * first, so a layer scale (C,1,1) becomes (1,1,1,C) and broadcasts along the channels. */
static int walk_dims(const kiln_tensor *t, const kiln_tensor *y, int64_t *dims) {
    if (!(y->ndim == 4 && y->format == KILN_FORMAT_NHWC) || t->ndim > 4) {
        for (int d = 0; d < t->ndim; d++) dims[d] = t->dims[d];
        return t->ndim;
    }
    int64_t a[4] = {1, 1, 1, 1};
    for (int d = 0; d < t->ndim; d++) a[4 - t->ndim + d] = t->dims[d];
    dims[0] = a[0], dims[1] = a[2], dims[2] = a[3], dims[3] = a[1];
    return 4;
}

/* Merge the output's dims for nin inputs (kiln_cuda_bcast_init's rule, any input count).
 * used: the inputs the program reads (the vector path depends on those only). Dims are
 * walk_dims': storage order, so NHWC tensors with broadcast operands work too. */
static void make_pattern(const kiln_op_ctx *c, unsigned used, pattern *p) {
    const kiln_tensor *y = c->out[0];
    int64_t st[MAX_IN][KILN_MAX_DIMS], ydims[KILN_MAX_DIMS];
    memset(p, 0, sizeof *p);
    p->dt = y->dtype;
    p->nin = c->n_in;
    p->n = kiln_tensor_numel(y);
    const int yn = walk_dims(y, y, ydims);
    for (int k = 0; k < p->nin; k++) {
        int64_t xd[KILN_MAX_DIMS];
        const int xn = walk_dims(c->in[k], y, xd);
        kiln_broadcast_strides(xn, xd, yn, ydims, st[k]);
    }
    int nd = 0;
    for (int d = 0; d < yn; d++) {
        if (ydims[d] == 1) continue;
        bool merge = nd > 0;
        for (int k = 0; k < p->nin && merge; k++) merge = p->st[k][nd - 1] == st[k][d] * ydims[d];
        if (merge) {
            p->dims[nd - 1] *= ydims[d];
            for (int k = 0; k < p->nin; k++) p->st[k][nd - 1] = st[k][d];
        } else {
            p->dims[nd] = ydims[d];
            for (int k = 0; k < p->nin; k++) p->st[k][nd] = st[k][d];
            nd++;
        }
    }
    if (nd == 0) {
        p->dims[0] = 1;
        for (int k = 0; k < p->nin; k++) p->st[k][0] = 0;
        nd = 1;
    }
    p->nd = nd;
    p->idx32 = p->n < ((int64_t)1 << 31);
    p->vw = 16 / (int)kiln_dtype_size(p->dt);
    p->vec = nd == 1 || p->dims[nd - 1] % p->vw == 0;
    for (int k = 0; k < p->nin; k++) {
        bool zero = true, contig = true;
        int64_t s = 1;
        for (int d = nd - 1; d >= 0; d--) {
            zero = zero && p->st[k][d] == 0;
            contig = contig && p->st[k][d] == s;
            s *= p->dims[d];
        }
        p->kind[k] = (zero || p->n <= 1) ? K_SCALAR : contig ? K_CONTIG : K_GENERAL;
        if (p->kind[k] != K_GENERAL || !(used & (1u << k))) continue;
        /* A vector of V outputs lies in one inner row; this input gives it one value
         * (inner stride 0) or V consecutive, 16-byte aligned ones (inner stride 1, every
         * other stride a multiple of V). Merged strides are always so; checked anyway. */
        const int64_t inner = p->st[k][nd - 1];
        if (inner != 0 && inner != 1) p->vec = false;
        for (int d = 0; d + 1 < nd && inner == 1; d++)
            if (p->st[k][d] % p->vw) p->vec = false;
    }
}

/* ---------------------------------------------------------------- source */

typedef struct sbuf {
    char *s;
    size_t len, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) KILN_PRINTF(2, 3);
static void put(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 8192;
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* A float as an exact expression. */
static void put_float(sbuf *b, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    put(b, "__int_as_float(0x%08x)", (unsigned)u);
}

/* The device-side float forms of the ops, k_<token>, come from their kiln_op_def.eltwise
 * (put_ops): those of elementwise.cu's unary_op / binary_op, so a fused chain computes what
 * the unfused kernels compute (save the f16/bf16 roundings in between). NaN: Relu gives 0
 * (x > 0 is false), Max/Min propagate it, Clip keeps it. */
static const char *PRELUDE =
    "#define KINF __int_as_float(0x7f800000)\n"
    "__device__ __forceinline__ unsigned k_div(unsigned n, unsigned magic, unsigned shift) {\n"
    "    return (__umulhi(n, magic) + n) >> shift;\n"
    "}\n";

static const char *dtype_prelude(kiln_dtype dt) {
    switch (dt) {
    case KILN_F16:
        return "typedef unsigned short T;\n"
               "__device__ __forceinline__ float to_f(T h) {\n"
               "    float f;\n"
               "    asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));\n"
               "    return f;\n"
               "}\n"
               "__device__ __forceinline__ T from_f(float f) {\n"
               "    T h;\n"
               "    asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f));\n"
               "    return h;\n"
               "}\n";
    case KILN_BF16:
        return "typedef unsigned short T;\n"
               "__device__ __forceinline__ float to_f(T h) { return __uint_as_float((unsigned)h << 16); }\n"
               "__device__ __forceinline__ T from_f(float f) {\n"
               "    T h;\n"
               "    asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f));\n"
               "    return h;\n"
               "}\n";
    default:
        return "typedef float T;\n"
               "__device__ __forceinline__ float to_f(T v) { return v; }\n"
               "__device__ __forceinline__ T from_f(float v) { return v; }\n";
    }
}

/* The kernel arguments: the host struct below and the device struct the source declares
 * must agree field for field (both LP64). */
typedef struct fused_args {
    const void *x[MAX_IN];
    void *y;
    long long n;
    long long dims[KILN_MAX_DIMS];
    long long st[MAX_IN][KILN_MAX_DIMS];
    unsigned magic[KILN_MAX_DIMS];
    unsigned shift[KILN_MAX_DIMS];
} fused_args;

/* The program as `float fused(float x<k>, ...)`: one SSA temporary per op. */
static void put_function(sbuf *b, const program *pr) {
    put(b, "__device__ __forceinline__ float fused(");
    bool first = true;
    for (int k = 0; k < MAX_IN; k++)
        if (pr->used & (1u << k)) {
            put(b, "%sfloat x%d", first ? "" : ", ", k);
            first = false;
        }
    put(b, ") {\n");
    /* stack entries: >= 0 a temporary t<k>, -1 - k input k, or a constant index
       (CONST_BASE + token) */
    enum { CONST_BASE = 1 << 20 };
    int stack[MAX_STACK + 1], sp = 0, temps = 0;
    for (int i = 0; i < pr->n; i++) {
        const tok *t = &pr->t[i];
        if (t->kind == T_INPUT) {
            stack[sp++] = -1 - t->op;
            continue;
        }
        if (t->kind == T_CONST) {
            stack[sp++] = CONST_BASE + i;
            continue;
        }
        const int nargs = t->kind == T_UNARY ? 1 : 2;
        const int *args = &stack[sp - nargs];
        put(b, "    const float t%d = k_%s(", temps, op_token(t->op));
        for (int a = 0; a < nargs; a++) {
            if (a) put(b, ", ");
            if (args[a] >= CONST_BASE) put_float(b, pr->t[args[a] - CONST_BASE].v[0]);
            else if (args[a] < 0) put(b, "x%d", -1 - args[a]);
            else put(b, "t%d", args[a]);
        }
        if (t->kind == T_UNARY) {
            put(b, ", ");
            put_float(b, t->v[0]);
            put(b, ", ");
            put_float(b, t->v[1]);
        }
        put(b, ");\n");
        sp -= nargs;
        stack[sp++] = temps++;
    }
    const int r = stack[0];
    put(b, "    return ");
    if (r >= CONST_BASE) put_float(b, pr->t[r - CONST_BASE].v[0]);
    else if (r < 0) put(b, "x%d", -1 - r);
    else put(b, "t%d", r);
    put(b, ";\n}\n");
}

/* Offsets of the general inputs for output index `i` (a vector's first element): the
 * output coordinates they read (and the divisions leading to them), then the sums. */
static void put_offsets(sbuf *b, const pattern *p, unsigned used, const char *ind) {
    bool need[KILN_MAX_DIMS] = {false};
    int lo = p->nd; /* the lowest merged dim some general input reads */
    for (int k = 0; k < p->nin; k++) {
        if (!(used & (1u << k)) || p->kind[k] != K_GENERAL) continue;
        for (int d = 0; d < p->nd; d++)
            if (p->st[k][d] != 0) {
                need[d] = true;
                if (d < lo) lo = d;
            }
    }
    if (lo == p->nd) return;
    put(b, "%sIDX r = i;\n", ind);
    for (int d = p->nd - 1; d >= 0 && d >= lo; d--) {
        if (d == 0) {
            put(b, "%sconst IDX c0 = r;\n", ind);
            break;
        }
        if (p->idx32)
            put(b, "%sconst IDX q%d = k_div(r, a.magic[%d], a.shift[%d]);\n", ind, d, d, d);
        else
            put(b, "%sconst IDX q%d = r / (IDX)a.dims[%d];\n", ind, d, d);
        if (need[d]) put(b, "%sconst IDX c%d = r - q%d * (IDX)a.dims[%d];\n", ind, d, d, d);
        if (d > lo) put(b, "%sr = q%d;\n", ind, d);
    }
    for (int k = 0; k < p->nin; k++) {
        if (!(used & (1u << k)) || p->kind[k] != K_GENERAL) continue;
        put(b, "%sconst IDX o%d = 0", ind, k);
        for (int d = 0; d < p->nd; d++)
            if (p->st[k][d] != 0) put(b, " + c%d * (IDX)a.st[%d][%d]", d, k, d);
        put(b, ";\n");
    }
}

/* How the generated kernels name an input's value in the call of fused(). */
typedef enum { CALL_STEP, CALL_VECTOR, CALL_TAIL } call_mode;

static void put_call(sbuf *b, const pattern *p, unsigned used, call_mode mode) {
    put(b, "fused(");
    bool first = true;
    for (int k = 0; k < p->nin; k++) {
        if (!(used & (1u << k))) continue;
        put(b, first ? "" : ", ");
        first = false;
        if (p->kind[k] == K_SCALAR) put(b, "s%d", k);
        else if (mode == CALL_TAIL) put(b, "to_f(X%d[i])", k);
        else if (mode == CALL_VECTOR && (p->kind[k] == K_CONTIG || p->st[k][p->nd - 1] != 0))
            put(b, "to_f(w%d[u].v[e])", k);
        else put(b, "v%d[u]", k);
    }
    put(b, ")");
}

static void put_kernel_head(sbuf *b, const pattern *p, unsigned used, const char *name) {
    put(b, "extern \"C\" __global__ void __launch_bounds__(%d) %s(const Args a) {\n", THREADS, name);
    put(b, "    const IDX n = (IDX)a.n;\n");
    put(b, "    const IDX step = (IDX)gridDim.x * blockDim.x;\n");
    put(b, "    const IDX tid = (IDX)blockIdx.x * blockDim.x + threadIdx.x;\n");
    put(b, "    T *Y = (T *)a.y;\n");
    for (int k = 0; k < p->nin; k++) {
        if (!(used & (1u << k))) continue;
        put(b, "    const T *X%d = (const T *)a.x[%d];\n", k, k);
        if (p->kind[k] == K_SCALAR) put(b, "    const float s%d = to_f(X%d[0]);\n", k, k);
    }
}

/* k_s: one output per step. */
static void put_scalar_kernel(sbuf *b, const pattern *p, unsigned used) {
    put_kernel_head(b, p, used, "k_s");
    put(b, "    for (IDX base = tid; base < n; base += step * U) {\n");
    for (int k = 0; k < p->nin; k++)
        if ((used & (1u << k)) && p->kind[k] != K_SCALAR) put(b, "        float v%d[U] = {};\n", k);
    put(b, "#pragma unroll\n");
    put(b, "        for (int u = 0; u < U; u++) {\n");
    put(b, "            const IDX i = base + (IDX)u * step;\n");
    put(b, "            if (i < n) {\n");
    put_offsets(b, p, used, "                ");
    for (int k = 0; k < p->nin; k++) {
        if (!(used & (1u << k)) || p->kind[k] == K_SCALAR) continue;
        if (p->kind[k] == K_CONTIG) put(b, "                v%d[u] = to_f(X%d[i]);\n", k, k);
        else put(b, "                v%d[u] = to_f(X%d[o%d]);\n", k, k, k);
    }
    put(b, "            }\n        }\n");
    put(b, "#pragma unroll\n");
    put(b, "        for (int u = 0; u < U; u++) {\n");
    put(b, "            const IDX i = base + (IDX)u * step;\n");
    put(b, "            if (i < n) Y[i] = from_f(");
    put_call(b, p, used, CALL_STEP);
    put(b, ");\n        }\n    }\n}\n");
}

/* k_v: V consecutive outputs per step through 16-byte vectors; for one merged dim, the
 * last n % V outputs one by one. */
static void put_vector_kernel(sbuf *b, const pattern *p, unsigned used) {
    put_kernel_head(b, p, used, "k_v");
    put(b, "    const IDX ng = n / V;\n");
    put(b, "    for (IDX base = tid; base < ng; base += step * U) {\n");
    for (int k = 0; k < p->nin; k++) {
        if (!(used & (1u << k)) || p->kind[k] == K_SCALAR) continue;
        if (p->kind[k] == K_CONTIG || p->st[k][p->nd - 1] != 0) put(b, "        VT w%d[U] = {};\n", k);
        else put(b, "        float v%d[U] = {};\n", k);
    }
    put(b, "#pragma unroll\n");
    put(b, "        for (int u = 0; u < U; u++) {\n");
    put(b, "            const IDX g = base + (IDX)u * step;\n");
    put(b, "            if (g < ng) {\n");
    put(b, "                const IDX i = g * V;\n");
    put_offsets(b, p, used, "                ");
    for (int k = 0; k < p->nin; k++) {
        if (!(used & (1u << k)) || p->kind[k] == K_SCALAR) continue;
        if (p->kind[k] == K_CONTIG) put(b, "                w%d[u] = *(const VT *)(X%d + i);\n", k, k);
        else if (p->st[k][p->nd - 1] != 0) put(b, "                w%d[u] = *(const VT *)(X%d + o%d);\n", k, k, k);
        else put(b, "                v%d[u] = to_f(X%d[o%d]);\n", k, k, k);
    }
    put(b, "            }\n        }\n");
    put(b, "#pragma unroll\n");
    put(b, "        for (int u = 0; u < U; u++) {\n");
    put(b, "            const IDX g = base + (IDX)u * step;\n");
    put(b, "            if (g < ng) {\n");
    put(b, "                VT r;\n");
    put(b, "#pragma unroll\n");
    put(b, "                for (int e = 0; e < V; e++) r.v[e] = from_f(");
    put_call(b, p, used, CALL_VECTOR);
    put(b, ");\n");
    put(b, "                *(VT *)(Y + g * V) = r;\n");
    put(b, "            }\n        }\n    }\n");
    if (p->nd == 1) {
        put(b, "    for (IDX i = ng * V + tid; i < n; i += step) Y[i] = from_f(");
        put_call(b, p, used, CALL_TAIL);
        put(b, ");\n");
    }
    put(b, "}\n");
}

/* The cache key: everything the source depends on. */
static void put_key(sbuf *b, const pattern *p, const program *pr) {
    put(b, "%s nd%d %s%s u%d", kiln_dtype_name(p->dt), p->nd, p->idx32 ? "i32" : "i64", p->vec ? " vec" : "",
        p->unroll);
    for (int k = 0; k < p->nin; k++) {
        if (!(pr->used & (1u << k))) {
            put(b, " -");
            continue;
        }
        put(b, " %c", "csg"[p->kind[k]]);
        if (p->kind[k] == K_GENERAL)
            for (int d = 0; d < p->nd; d++) put(b, "%c", p->st[k][d] ? '1' : '0');
    }
    put(b, " |");
    for (int i = 0; i < pr->n; i++) {
        const tok *t = &pr->t[i];
        if (t->kind == T_INPUT) put(b, " i%d", t->op);
        else if (t->kind == T_CONST) put(b, " c%a", (double)t->v[0]);
        else if (t->kind == T_BINARY || op_nparams(t->op) == 0) put(b, " %s", op_token(t->op));
        else put(b, " %s@%a@%a", op_token(t->op), (double)t->v[0], (double)t->v[1]);
    }
}

/* k_<token> of every elementwise op with a CUDA form. */
static void put_ops(sbuf *b) {
    for (int o = 0; o < kiln_op_count(); o++) {
        const kiln_op_def *d = kiln_op_get(o);
        const kiln_eltwise *e = d->eltwise;
        if (!e || !e->cuda || find_op(op_token(o), strlen(op_token(o)), e->arity) != o) continue;
        if (e->arity == 1) put(b, "__device__ __forceinline__ float k_%s(float x, float p0, float p1) {\n", op_token(o));
        else put(b, "__device__ __forceinline__ float k_%s(float a, float b) {\n", op_token(o));
        put(b, "    %s\n}\n", e->cuda);
    }
}

static void put_source(sbuf *b, const pattern *p, const program *pr, const char *key) {
    put(b, "// kiln.FusedElementwise, generated by src/cuda/fused_elementwise.c\n// %s\n", key);
    put(b, "%s", dtype_prelude(p->dt));
    put(b, "typedef %s IDX;\n", p->idx32 ? "unsigned" : "long long");
    put(b, "#define V %d\n#define U %d\n", p->vw, p->unroll);
    put(b, "struct alignas(16) VT { T v[V]; };\n");
    put(b, "struct Args {\n    const void *x[%d];\n    void *y;\n    long long n;\n    long long dims[%d];\n"
           "    long long st[%d][%d];\n    unsigned magic[%d];\n    unsigned shift[%d];\n};\n",
        MAX_IN, KILN_MAX_DIMS, MAX_IN, KILN_MAX_DIMS, KILN_MAX_DIMS, KILN_MAX_DIMS);
    put(b, "%s", PRELUDE);
    put_ops(b);
    put_function(b, pr);
    put_scalar_kernel(b, p, pr->used);
    if (p->vec) put_vector_kernel(b, p, pr->used);
}

/* --------------------------------------------------------------- checks */


static bool check(const kiln_op_ctx *c, program *pr, char *why, size_t wn) {
    if (c->n_in > MAX_IN) {
        snprintf(why, wn, "%d inputs (at most %d)", c->n_in, MAX_IN);
        return false;
    }
    const kiln_dtype dt = c->out[0]->dtype;
    if (!kiln_cuda_float_dtype(dt)) {
        snprintf(why, wn, "dtype %s (f32, f16 and bf16 are supported)", kiln_dtype_name(dt));
        return false;
    }
    for (int k = 0; k < c->n_in; k++) {
        if (!c->in[k]) {
            snprintf(why, wn, "input %d is missing", k);
            return false;
        }
        if (c->in[k]->dtype != dt) {
            snprintf(why, wn, "input %d has dtype %s, the output %s", k, kiln_dtype_name(c->in[k]->dtype),
                     kiln_dtype_name(dt));
            return false;
        }
        const kiln_tensor *x = c->in[k], *y = c->out[0];
        if (x->ndim > y->ndim) {
            snprintf(why, wn, "input %d has more dims than the output", k);
            return false;
        }
        if (nhwc(x) && !nhwc(y)) {
            snprintf(why, wn, "input %d is laid out NHWC and the output NCHW", k);
            return false;
        }
        if (nhwc(y) && !nhwc(x)) { /* read as it is: its bytes must be the same in NHWC */
            int64_t a[4] = {1, 1, 1, 1};
            for (int d = 0; d < x->ndim; d++) a[4 - x->ndim + d] = x->dims[d];
            if (a[1] != 1 && a[2] * a[3] != 1) {
                snprintf(why, wn, "input %d is laid out NCHW and broadcast into an NHWC output", k);
                return false;
            }
        }
        for (int d = 0; d < x->ndim; d++) {
            const int64_t xd = x->dims[d], yd = y->dims[y->ndim - x->ndim + d];
            if (xd != 1 && xd != yd) {
                snprintf(why, wn, "input %d does not broadcast to the output's shape", k);
                return false;
            }
        }
    }
    return parse(c, pr, why, wn);
}

bool kiln_cuda_sup_fused_elementwise(const kiln_op_ctx *c, char *why, size_t n) {
    program pr;
    if (!check(c, &pr, why, n)) return false;
    free(pr.t);
    return true;
}

/* Check c, then its pattern and cache key (malloc'd). pr->t is freed by the caller.
 * unroll: 0 for UNROLL. */
static kiln_status describe(kiln_op_ctx *c, int unroll, program *pr, pattern *p, char **key) {
    *key = NULL;
    char why[256] = "";
    if (!check(c, pr, why, sizeof why))
        return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "not supported on cuda: %s", why);
    make_pattern(c, pr->used, p);
    p->unroll = unroll > 0 ? unroll : UNROLL;
    sbuf kb = {0};
    put_key(&kb, p, pr);
    if (kb.oom) {
        free(kb.s);
        free(pr->t);
        return kiln_fail(c->kctx, KILN_ERR_OUT_OF_MEMORY, "out of memory generating a fused kernel");
    }
    *key = kb.s;
    return KILN_OK;
}

static kiln_status source(kiln_context *ctx, const pattern *p, const program *pr, const char *key, char **src) {
    sbuf sb = {0};
    put_source(&sb, p, pr, key);
    *src = sb.s;
    if (!sb.oom) return KILN_OK;
    free(sb.s);
    *src = NULL;
    return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory generating a fused kernel");
}

/* NVRTC options: --fmad=false keeps a*b+c two roundings, as on the CPU. */
static const char *const RTC_OPTS[] = {"--fmad=false"};
#define N_RTC_OPTS 1

kiln_status kiln_cuda_fused_source(kiln_op_ctx *c, char **src, int *n_opts, const char *const **opts) {
    program pr;
    pattern p;
    char *key = NULL;
    *src = NULL;
    *n_opts = N_RTC_OPTS;
    *opts = RTC_OPTS;
    kiln_status st = describe(c, 0, &pr, &p, &key);
    if (st) return st;
    st = source(c->kctx, &p, &pr, key, src);
    free(pr.t);
    free(key);
    return st;
}

/* ----------------------------------------------------------------- cache */

typedef struct fused_kernel {
    char *key;            /* NULL: empty slot */
    uint64_t hash;
    kiln_cuda_module *mod;
    void *fn_s, *fn_v;    /* fn_v NULL: no vector kernel */
} fused_kernel;

struct kiln_fused_cache {
    fused_kernel *slots;
    int cap, count;       /* cap: a power of two; at most half full */
    int unroll;           /* 0: UNROLL (kiln_cuda_fused_tune) */
    int blocks_per_sm;    /* grid cap per SM; 0: 32 */
};

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void kiln_cuda_fused_cache_free(kiln_cuda *cu) {
    struct kiln_fused_cache *fc = cu->fused;
    if (!fc) return;
    for (int i = 0; i < fc->cap; i++) {
        free(fc->slots[i].key);
        kiln_cuda_module_free(fc->slots[i].mod);
    }
    free(fc->slots);
    free(fc);
    cu->fused = NULL;
}

static fused_kernel *lookup(struct kiln_fused_cache *fc, const char *key, uint64_t h) {
    if (!fc || !fc->cap) return NULL;
    for (int i = (int)(h & (uint64_t)(fc->cap - 1));; i = (i + 1) & (fc->cap - 1)) {
        fused_kernel *e = &fc->slots[i];
        if (!e->key) return NULL;
        if (e->hash == h && strcmp(e->key, key) == 0) return e;
    }
}

static struct kiln_fused_cache *cache(kiln_cuda *cu) {
    if (!cu->fused) cu->fused = calloc(1, sizeof *cu->fused);
    return cu->fused;
}

kiln_status kiln_cuda_fused_tune(kiln_cuda *cu, int unroll, int blocks_per_sm) {
    struct kiln_fused_cache *fc = cache(cu);
    if (!fc) return kiln_fail(cu->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for the fused kernel cache");
    if (unroll < 0 || unroll > 16 || blocks_per_sm < 0)
        return kiln_fail(cu->ctx, KILN_ERR_INVALID_ARGUMENT, "unroll %d (0..16), blocks per SM %d", unroll,
                         blocks_per_sm);
    fc->unroll = unroll;
    fc->blocks_per_sm = blocks_per_sm;
    return KILN_OK;
}

/* Room for one more entry; false on OOM. */
static bool reserve(kiln_cuda *cu) {
    struct kiln_fused_cache *fc = cache(cu);
    if (!fc) return false;
    if ((fc->count + 1) * 2 <= fc->cap) return true;
    const int cap = fc->cap ? fc->cap * 2 : 32;
    fused_kernel *s = calloc((size_t)cap, sizeof *s);
    if (!s) return false;
    for (int i = 0; i < fc->cap; i++) {
        if (!fc->slots[i].key) continue;
        int j = (int)(fc->slots[i].hash & (uint64_t)(cap - 1));
        while (s[j].key) j = (j + 1) & (cap - 1);
        s[j] = fc->slots[i];
    }
    free(fc->slots);
    fc->slots = s;
    fc->cap = cap;
    return true;
}

/* The compiled kernels for c, compiling on a miss. */
static kiln_status get_kernel(kiln_cuda *cu, kiln_op_ctx *c, pattern *p, unsigned *used, fused_kernel **out) {
    program pr;
    char *key = NULL, *src = NULL;
    kiln_status st = describe(c, cu->fused ? cu->fused->unroll : 0, &pr, p, &key);
    if (st) return st;
    *used = pr.used;
    const uint64_t h = fnv1a(key);
    fused_kernel *e = lookup(cu->fused, key, h);
    if (e) {
        free(pr.t);
        free(key);
        *out = e;
        return KILN_OK;
    }
    fused_kernel k = {.key = key, .hash = h};
    char name[96];
    snprintf(name, sizeof name, "fused_%s_%016llx.cu", kiln_dtype_name(p->dt), (unsigned long long)h);
    st = source(c->kctx, p, &pr, key, &src);
    free(pr.t);
    if (!st) st = kiln_cuda_module_compile_opts(cu, name, src, N_RTC_OPTS, RTC_OPTS, &k.mod);
    if (!st) st = kiln_cuda_module_kernel(cu, k.mod, "k_s", &k.fn_s);
    if (!st && p->vec) st = kiln_cuda_module_kernel(cu, k.mod, "k_v", &k.fn_v);
    if (!st && !reserve(cu)) st = kiln_fail(c->kctx, KILN_ERR_OUT_OF_MEMORY, "out of memory caching a fused kernel");
    free(src);
    if (st) {
        kiln_cuda_module_free(k.mod);
        free(key);
        return st;
    }
    struct kiln_fused_cache *fc = cu->fused;
    int i = (int)(h & (uint64_t)(fc->cap - 1));
    while (fc->slots[i].key) i = (i + 1) & (fc->cap - 1);
    fc->slots[i] = k;
    fc->count++;
    *out = &fc->slots[i];
    return KILN_OK;
}

kiln_status kiln_cuda_prep_fused_elementwise(kiln_cuda *cu, kiln_op_ctx *c) {
    pattern p;
    unsigned used;
    fused_kernel *k;
    return get_kernel(cu, c, &p, &used, &k);
}

static bool aligned16(const void *q) { return (uintptr_t)q % 16 == 0; }

/* The host side of a launch: kernel arguments for c's pointers, whether the vector kernel
 * runs (it exists and every pointer it vector-accesses is 16-byte aligned), the grid. */
static void launch_args(const kiln_op_ctx *c, const pattern *p, unsigned used, int sm_count, int blocks_per_sm,
                        fused_args *a, bool *vec, unsigned *blocks) {
    memset(a, 0, sizeof *a);
    a->y = c->out[0]->data;
    a->n = p->n;
    *vec = p->vec && aligned16(a->y);
    for (int i = 0; i < p->nin; i++) {
        a->x[i] = c->in[i]->data;
        if ((used & (1u << i)) && p->kind[i] != K_SCALAR && !aligned16(a->x[i])) *vec = false;
        for (int d = 0; d < p->nd; d++) a->st[i][d] = p->st[i][d];
    }
    for (int d = 0; d < p->nd; d++) {
        const uint64_t dv = (uint64_t)p->dims[d];
        a->dims[d] = p->dims[d];
        if (!p->idx32 || dv == 0) continue;
        /* n / dv == (umulhi(n, magic) + n) >> shift for n, dv < 2^31 (as PyTorch's IntDivider) */
        unsigned sh = 0;
        while (sh < 32 && ((uint64_t)1 << sh) < dv) sh++;
        a->shift[d] = sh;
        a->magic[d] = (unsigned)((((uint64_t)1 << 32) * (((uint64_t)1 << sh) - dv)) / dv + 1);
    }
    const int64_t items = *vec ? p->n / p->vw : p->n;
    const int64_t per_block = (int64_t)THREADS * p->unroll;
    int64_t b = (items + per_block - 1) / per_block;
    const int64_t cap = (int64_t)sm_count * (blocks_per_sm > 0 ? blocks_per_sm : 32);
    if (b > cap) b = cap;
    *blocks = b < 1 ? 1u : (unsigned)b;
}

kiln_status kiln_cuda_fused_launch_args(kiln_op_ctx *c, int unroll, int sm_count, int blocks_per_sm, void *args,
                                        size_t size, bool *vec, unsigned *blocks, unsigned *threads) {
    program pr;
    pattern p;
    char *key = NULL;
    if (size < sizeof(fused_args))
        return kiln_fail(c->kctx, KILN_ERR_INVALID_ARGUMENT, "%zu bytes for the %zu-byte kernel arguments", size,
                         sizeof(fused_args));
    kiln_status st = describe(c, unroll, &pr, &p, &key);
    if (st) return st;
    launch_args(c, &p, pr.used, sm_count, blocks_per_sm, args, vec, blocks);
    *threads = THREADS;
    free(pr.t);
    free(key);
    return KILN_OK;
}

kiln_status kiln_cuda_k_fused_elementwise(kiln_cuda *cu, kiln_op_ctx *c) {
    pattern p;
    unsigned used;
    fused_kernel *k;
    kiln_status st = get_kernel(cu, c, &p, &used, &k);
    if (st) return st;
    if (p.n == 0) return KILN_OK;
    fused_args a;
    bool vec;
    unsigned blocks;
    launch_args(c, &p, used, cu->props.sm_count, cu->fused ? cu->fused->blocks_per_sm : 0, &a, &vec, &blocks);
    void *args[] = {&a};
    return kiln_cuda_module_launch(cu, vec ? k->fn_v : k->fn_s, blocks, THREADS, 0, args);
}
