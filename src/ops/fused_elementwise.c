/*
 * fused_elementwise.c — kiln.FusedElementwise(x0, x1, ... x7) -> y0: a chain of elementwise
 * ops as one kernel, made by the fuse-eltwise pass (src/passes/fuse_eltwise.c).
 *   The inputs (1 to 8) share one float dtype and broadcast together numpy-style to y0's
 *   shape. Attribute `same_shape` (int, optional) is the fusion pass's note that every
 *   input has the output's shape (informational: the layout pass lays the node out NHWC
 *   as a binary op, broadcast operands included; kernels check shapes themselves). Attribute `program` is a postfix program, one instruction per space-separated
 *   token (FUSED.md):
 *     i<k>       push input k;             c<float>   push a constant (strtod syntax:
 *                                                     c0.5, c-1e-3, c-inf);
 *     Relu Sigmoid Tanh Exp Log Sqrt Reciprocal Abs Neg Erf Floor Ceil Softplus Softsign
 *     HardSwish, LeakyRelu@alpha, Elu@alpha, HardSigmoid@alpha@beta, Clip@lo@hi
 *                pop 1, push 1 (parameters required, as written by the pass);
 *     Add Sub Mul Div Pow Max Min
 *                pop 2 (the left operand was pushed first), push 1;
 *   and exactly one value must be left. Each op has the semantics of the ONNX op of its
 *   name (as kiln's own kernels: Relu maps NaN to 0, Max/Min propagate NaN, Clip with
 *   lo > hi gives hi). At most 32 values on the stack.
 *   Computation in f32 (f64 for f64 inputs), rounded once to the output dtype.
 * Method: the program is parsed once per call and interpreted over blocks of 256 output
 *   elements, one instruction at a time over the whole block (a register per stack slot),
 *   so the per-element cost is a tight loop, not a dispatch. Inputs that have the output's
 *   shape or a single element are read directly (f32: straight from memory); others
 *   through per-block offsets from broadcast strides. Large outputs split their blocks
 *   over threads.
 * No gradient: the op exists only in inference plans.
 */
#include "../core/optest.h"
#include "binary.h"
#include "fused.h"
#include "unary.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#define FE_MAX_IN 8
#define FE_MAX_DEPTH 32
#define FE_BLK 256

typedef enum fe_op {
    FE_IN, FE_CONST,
    /* unary */
    FE_RELU, FE_SIGMOID, FE_TANH, FE_EXP, FE_LOG, FE_SQRT, FE_RECIPROCAL, FE_ABS, FE_NEG,
    FE_ERF, FE_FLOOR, FE_CEIL, FE_SOFTPLUS, FE_SOFTSIGN, FE_HARDSWISH, FE_LEAKYRELU, FE_ELU,
    FE_HARDSIGMOID, FE_CLIP,
    /* binary */
    FE_ADD, FE_SUB, FE_MUL, FE_DIV, FE_POW, FE_MAX, FE_MIN
} fe_op;

static const struct {
    const char *name;
    fe_op op;
    int params; /* values after '@' */
    int pops;
} ops[] = {
    {"Relu", FE_RELU, 0, 1}, {"Sigmoid", FE_SIGMOID, 0, 1}, {"Tanh", FE_TANH, 0, 1},
    {"Exp", FE_EXP, 0, 1}, {"Log", FE_LOG, 0, 1}, {"Sqrt", FE_SQRT, 0, 1},
    {"Reciprocal", FE_RECIPROCAL, 0, 1}, {"Abs", FE_ABS, 0, 1}, {"Neg", FE_NEG, 0, 1},
    {"Erf", FE_ERF, 0, 1}, {"Floor", FE_FLOOR, 0, 1}, {"Ceil", FE_CEIL, 0, 1},
    {"Softplus", FE_SOFTPLUS, 0, 1}, {"Softsign", FE_SOFTSIGN, 0, 1},
    {"HardSwish", FE_HARDSWISH, 0, 1}, {"LeakyRelu", FE_LEAKYRELU, 1, 1}, {"Elu", FE_ELU, 1, 1},
    {"HardSigmoid", FE_HARDSIGMOID, 2, 1}, {"Clip", FE_CLIP, 2, 1},
    {"Add", FE_ADD, 0, 2}, {"Sub", FE_SUB, 0, 2}, {"Mul", FE_MUL, 0, 2}, {"Div", FE_DIV, 0, 2},
    {"Pow", FE_POW, 0, 2}, {"Max", FE_MAX, 0, 2}, {"Min", FE_MIN, 0, 2},
};

typedef struct fe_insn {
    fe_op op;
    int k;          /* FE_IN: input index */
    double c;       /* FE_CONST */
    double a, b;    /* parameters (alpha, beta / lo, hi) */
} fe_insn;

typedef struct fe_prog {
    int n;
    fe_insn *code; /* (n), owned */
} fe_prog;

/* Parse c's `program` into p (p->code must be freed by the caller, also on failure). */
static kiln_status parse(kiln_op_ctx *c, fe_prog *p) {
    const char *text = kiln_attr_string(c->node, "program", NULL);
    p->n = 0;
    p->code = NULL;
    KILN_OP_CHECK(c, text != NULL, KILN_ERR_UNSUPPORTED, "attribute program is required");
    size_t cap = 1;
    for (const char *q = text; *q; q++) cap += isspace((unsigned char)*q) != 0;
    p->code = malloc(cap * sizeof *p->code);
    if (!p->code) return kiln_fail(c->kctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a program");
    int sp = 0;
    const char *q = text;
    for (;;) {
        while (isspace((unsigned char)*q)) q++;
        if (!*q) break;
        const char *end = q;
        while (*end && !isspace((unsigned char)*end)) end++;
        char tok[128];
        const size_t len = (size_t)(end - q);
        KILN_OP_CHECK(c, len < sizeof tok, KILN_ERR_UNSUPPORTED, "program token '%.40s...' is too long", q);
        memcpy(tok, q, len);
        tok[len] = 0;
        q = end;
        fe_insn in = {0};
        char *stop = NULL;
        if (tok[0] == 'i' && isdigit((unsigned char)tok[1])) {
            long k = strtol(tok + 1, &stop, 10);
            KILN_OP_CHECK(c, *stop == 0 && k < c->n_in, KILN_ERR_UNSUPPORTED,
                          "program token '%s': the node has %d inputs", tok, c->n_in);
            in.op = FE_IN;
            in.k = (int)k;
            sp++;
        } else if (tok[0] == 'c' && tok[1]) {
            in.op = FE_CONST;
            in.c = strtod(tok + 1, &stop);
            KILN_OP_CHECK(c, *stop == 0, KILN_ERR_UNSUPPORTED, "program token '%s' is not a constant", tok);
            sp++;
        } else {
            char *at = strchr(tok, '@');
            if (at) *at = 0;
            size_t o = 0;
            while (o < sizeof ops / sizeof ops[0] && strcmp(ops[o].name, tok) != 0) o++;
            KILN_OP_CHECK(c, o < sizeof ops / sizeof ops[0], KILN_ERR_UNSUPPORTED,
                          "program token '%s' is not an input, a constant or a known op", tok);
            double par[2] = {0, 0};
            int np = 0;
            while (at && np < 2) {
                par[np++] = strtod(at + 1, &stop);
                KILN_OP_CHECK(c, stop != at + 1 && (*stop == 0 || *stop == '@'), KILN_ERR_UNSUPPORTED,
                              "program op %s: parameter %d is not a number", tok, np);
                at = *stop == '@' ? stop : NULL;
            }
            KILN_OP_CHECK(c, np == ops[o].params && !at, KILN_ERR_UNSUPPORTED,
                          "program op %s takes %d parameters after '@'", tok, ops[o].params);
            KILN_OP_CHECK(c, sp >= ops[o].pops, KILN_ERR_UNSUPPORTED,
                          "program op %s needs %d values on the stack, it has %d", tok, ops[o].pops, sp);
            in.op = ops[o].op;
            in.a = par[0];
            in.b = par[1];
            sp -= ops[o].pops - 1;
        }
        KILN_OP_CHECK(c, sp <= FE_MAX_DEPTH, KILN_ERR_UNSUPPORTED,
                      "program needs more than %d stack slots", FE_MAX_DEPTH);
        p->code[p->n++] = in;
    }
    KILN_OP_CHECK(c, sp == 1, KILN_ERR_UNSUPPORTED,
                  "program must leave exactly one value on the stack, it leaves %d", sp);
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    for (int i = 0; i < c->n_in; i++) {
        KILN_OP_CHECK(c, c->in[i] != NULL, KILN_ERR_SHAPE, "input %d is missing", i);
        KILN_OP_CHECK(c, kiln_dtype_is_float(c->in[i]->dtype) && c->in[i]->dtype == c->in[0]->dtype,
                      KILN_ERR_TYPE, "inputs must share one float dtype (input %d is %s, input 0 %s)",
                      i, kiln_dtype_name(c->in[i]->dtype), kiln_dtype_name(c->in[0]->dtype));
    }
    fe_prog p;
    kiln_status st = parse(c, &p);
    free(p.code);
    if (st) return st;
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    KILN_OP_CHECK(c, kiln_bcast_shape_n(c->n_in, (const kiln_tensor *const *)c->in, &nd, dims),
                  KILN_ERR_SHAPE, "the inputs' shapes do not broadcast together");
    kiln_tensor_set_shape(c->out[0], c->in[0]->dtype, nd, dims);
    return KILN_OK;
}

/* ---------------------------------------------------------------- evaluation */

/* How block evaluation reads input k: directly at flat index (start + i) * inc (inc 1: the
 * output's shape, 0: one element), or at off[k][i] when gathering. */
typedef struct fe_src {
    const void *data;
    kiln_dtype dt;
    int64_t inc;
} fe_src;

static inline float load1_f32(const fe_src *s, int64_t j) {
    switch (s->dt) {
    case KILN_F16: return kiln_f16_to_f32(((const uint16_t *)s->data)[j]);
    case KILN_BF16: return kiln_bf16_to_f32(((const uint16_t *)s->data)[j]);
    default: return ((const float *)s->data)[j];
    }
}

static inline double load1_f64(const fe_src *s, int64_t j) { return ((const double *)s->data)[j]; }

/* r[0..len) = input s over the block starting at output index start. */
#define DEFINE_LOAD(SFX, T, NATIVE)                                                      \
    static void load_##SFX(const fe_src *s, int64_t start, int len, const int64_t *off,  \
                           T *r) {                                                       \
        if (off) {                                                                       \
            for (int i = 0; i < len; i++) r[i] = load1_##SFX(s, off[i]);                 \
        } else if (!s->inc) {                                                            \
            const T v = load1_##SFX(s, 0);                                               \
            for (int i = 0; i < len; i++) r[i] = v;                                      \
        } else if (s->dt == NATIVE) {                                                    \
            memcpy(r, (const T *)s->data + start, (size_t)len * sizeof(T));              \
        } else {                                                                         \
            for (int i = 0; i < len; i++) r[i] = load1_##SFX(s, start + i);              \
        }                                                                                \
    }
DEFINE_LOAD(f32, float, KILN_F32)
DEFINE_LOAD(f64, double, KILN_F64)

/* An op over the top of the stack x (unary) or the top two l, x (binary, into l). */
#define UNARY(E)                                  \
    for (int i = 0; i < len; i++) x[i] = (E);     \
    break;
#define BINARY(E)                                 \
    for (int i = 0; i < len; i++) l[i] = (E);     \
    sp--;                                         \
    break;

/* Run the program over output elements [start, start + len) into res. */
#define DEFINE_BLOCK(SFX, T)                                                                     \
    static void block_##SFX(const fe_prog *p, const fe_src *src, int64_t start, int len,         \
                            const int64_t (*off)[FE_BLK], T *res) {                              \
        T reg[FE_MAX_DEPTH][FE_BLK];                                                             \
        int sp = 0;                                                                              \
        for (int q = 0; q < p->n; q++) {                                                         \
            const fe_insn *in = &p->code[q];                                                     \
            const T a = (T)in->a, b = (T)in->b;                                                  \
            T *x = sp > 0 ? reg[sp - 1] : NULL, *l = sp > 1 ? reg[sp - 2] : NULL;                \
            switch (in->op) {                                                                    \
            case FE_IN:                                                                          \
                load_##SFX(&src[in->k], start, len, off ? off[in->k] : NULL, reg[sp++]);         \
                break;                                                                           \
            case FE_CONST:                                                                       \
                for (int i = 0; i < len; i++) reg[sp][i] = (T)in->c;                             \
                sp++;                                                                            \
                break;                                                                           \
            case FE_RELU: UNARY(x[i] > 0 ? x[i] : (T)0)                                          \
            case FE_SIGMOID:                                                                     \
                UNARY(x[i] >= 0 ? (T)1 / ((T)1 + exp(-x[i])) : exp(x[i]) / ((T)1 + exp(x[i])))   \
            case FE_TANH: UNARY(tanh(x[i]))                                                      \
            case FE_EXP: UNARY(exp(x[i]))                                                        \
            case FE_LOG: UNARY(log(x[i]))                                                        \
            case FE_SQRT: UNARY(sqrt(x[i]))                                                      \
            case FE_RECIPROCAL: UNARY((T)1 / x[i])                                               \
            case FE_ABS: UNARY(fabs(x[i]))                                                       \
            case FE_NEG: UNARY(-x[i])                                                            \
            case FE_ERF: UNARY(erf(x[i]))                                                        \
            case FE_FLOOR: UNARY(floor(x[i]))                                                    \
            case FE_CEIL: UNARY(ceil(x[i]))                                                      \
            case FE_SOFTPLUS:                                                                    \
                UNARY(x[i] > 0 ? x[i] + log1p(exp(-x[i])) : log1p(exp(x[i])))                    \
            case FE_SOFTSIGN:                                                                    \
                UNARY(isinf(x[i]) ? copysign((T)1, x[i]) : x[i] / ((T)1 + fabs(x[i])))           \
            case FE_HARDSWISH:                                                                   \
                UNARY(x[i] * ((x[i] / 6 + (T)0.5) < 0   ? (T)0                                   \
                              : (x[i] / 6 + (T)0.5) > 1 ? (T)1                                   \
                                                        : x[i] / 6 + (T)0.5))                    \
            case FE_LEAKYRELU: UNARY(x[i] < 0 ? a * x[i] : x[i])                                 \
            case FE_ELU: UNARY(x[i] < 0 ? a * expm1(x[i]) : x[i])                                \
            case FE_HARDSIGMOID:                                                                 \
                UNARY((a * x[i] + b) < 0 ? (T)0 : (a * x[i] + b) > 1 ? (T)1 : a * x[i] + b)      \
            case FE_CLIP: UNARY((x[i] < a ? a : x[i]) > b ? b : (x[i] < a ? a : x[i]))           \
            case FE_ADD: BINARY(l[i] + x[i])                                                     \
            case FE_SUB: BINARY(l[i] - x[i])                                                     \
            case FE_MUL: BINARY(l[i] * x[i])                                                     \
            case FE_DIV: BINARY(l[i] / x[i])                                                     \
            case FE_POW: BINARY(pow(l[i], x[i]))                                                 \
            case FE_MAX: BINARY((l[i] > x[i] || l[i] != l[i]) ? l[i] : x[i])                     \
            case FE_MIN: BINARY((l[i] < x[i] || l[i] != l[i]) ? l[i] : x[i])                     \
            }                                                                                    \
        }                                                                                        \
        memcpy(res, reg[0], (size_t)len * sizeof(T));                                            \
    }
DEFINE_BLOCK(f32, float)
DEFINE_BLOCK(f64, double)

/* Everything one call needs, shared by the threads. */
typedef struct fe_run {
    const fe_prog *p;
    fe_src src[FE_MAX_IN];
    int nin;
    bool gather;
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    int64_t st[FE_MAX_IN][KILN_MAX_DIMS]; /* broadcast strides (gather) */
    kiln_tensor *y;
} fe_run;

/* off[k][i]: flat index into input k of output element start + i. */
static void block_offsets(const fe_run *r, int64_t start, int len, int64_t (*off)[FE_BLK]) {
    int64_t idx[KILN_MAX_DIMS], o[FE_MAX_IN] = {0};
    int64_t rest = start;
    for (int d = r->nd - 1; d >= 0; d--) {
        idx[d] = rest % r->dims[d];
        rest /= r->dims[d];
    }
    for (int k = 0; k < r->nin; k++)
        for (int d = 0; d < r->nd; d++) o[k] += idx[d] * r->st[k][d];
    for (int i = 0; i < len; i++) {
        for (int k = 0; k < r->nin; k++) off[k][i] = o[k];
        for (int d = r->nd - 1; d >= 0; d--) {
            for (int k = 0; k < r->nin; k++) o[k] += r->st[k][d];
            if (++idx[d] < r->dims[d]) break;
            for (int k = 0; k < r->nin; k++) o[k] -= r->st[k][d] * r->dims[d];
            idx[d] = 0;
        }
    }
}

static void run_block(const fe_run *r, int64_t start, int len) {
    int64_t off[FE_MAX_IN][FE_BLK];
    if (r->gather) block_offsets(r, start, len, off);
    const int64_t(*offp)[FE_BLK] = r->gather ? (const int64_t(*)[FE_BLK])off : NULL;
    kiln_tensor *y = r->y;
    if (y->dtype == KILN_F64) {
        block_f64(r->p, r->src, start, len, offp, (double *)y->data + start);
        return;
    }
    if (y->dtype == KILN_F32) {
        block_f32(r->p, r->src, start, len, offp, (float *)y->data + start);
        return;
    }
    float res[FE_BLK];
    block_f32(r->p, r->src, start, len, offp, res);
    uint16_t *yp = (uint16_t *)y->data + start;
    for (int i = 0; i < len; i++)
        yp[i] = y->dtype == KILN_F16 ? kiln_f32_to_f16(res[i]) : kiln_f32_to_bf16(res[i]);
}

static kiln_status forward(kiln_op_ctx *c) {
    fe_prog p;
    kiln_status st = parse(c, &p);
    if (st) {
        free(p.code);
        return st;
    }
    fe_run r = {.p = &p, .nin = c->n_in, .y = c->out[0], .nd = c->out[0]->ndim};
    const int64_t n = kiln_tensor_numel(r.y);
    memcpy(r.dims, r.y->dims, sizeof r.dims);
    for (int k = 0; k < c->n_in; k++) {
        const kiln_tensor *t = c->in[k];
        const int64_t nk = kiln_tensor_numel(t);
        r.src[k] = (fe_src){.data = t->data, .dt = t->dtype, .inc = nk == 1 ? 0 : 1};
        /* An input that broadcasts to the output with as many elements has its layout. */
        if (nk != 1 && nk != n) r.gather = true;
        kiln_broadcast_strides(t->ndim, t->dims, r.nd, r.dims, r.st[k]);
    }
    const int64_t nb = (n + FE_BLK - 1) / FE_BLK;
#pragma omp parallel for schedule(static) if (n >= KILN_UNARY_PAR_MIN) num_threads(kiln_cpu_threads())
    for (int64_t b = 0; b < nb; b++) {
        const int64_t start = b * FE_BLK;
        run_block(&r, start, (int)(n - start < FE_BLK ? n - start : FE_BLK));
    }
    free(p.code);
    return KILN_OK;
}

/* ------------------------------------------------------------------- tests */

#ifdef KILN_OPTESTS
/* The program against the unfused ops: ref_ops lists "Op:attrs:operands" steps where
 * operands name x<k> (input k), t<j> (step j's result) or a number (a scalar tensor). The
 * last step is the result. */
static kiln_tensor *reference(int n_in, kiln_tensor **in, int n_steps, const char *const *steps) {
    kiln_tensor *t[16] = {0};
    kiln_tensor *res = NULL;
    for (int s = 0; s < n_steps; s++) {
        char buf[256], *save = NULL;
        snprintf(buf, sizeof buf, "%s", steps[s]);
        char *op = strtok_r(buf, "|", &save);
        char *attrs = strtok_r(NULL, "|", &save);
        char *args = strtok_r(NULL, "|", &save);
        if (!op || !attrs || !args) break;
        kiln_tensor *argv[3] = {0}, *owned[3] = {0};
        int na = 0;
        for (char *a = strtok_r(args, ",", &save); a && na < 3; a = strtok_r(NULL, ",", &save), na++) {
            if (a[0] == 'x') argv[na] = in[atoi(a + 1)];
            else if (a[0] == 't') argv[na] = t[atoi(a + 1)];
            else if (a[0] == '-' && !a[1]) argv[na] = NULL;
            else argv[na] = owned[na] = kt_scalar(in[0]->dtype, strtod(a, NULL));
        }
        t[s] = kiln_fused_test_eval(op, strcmp(attrs, "-") ? attrs : "", na, argv);
        for (int k = 0; k < 3; k++) kiln_tensor_free(owned[k]);
        if (!t[s]) break;
        if (s == n_steps - 1) {
            res = t[s];
            t[s] = NULL;
        }
    }
    for (int s = 0; s < 16; s++) kiln_tensor_free(t[s]);
    return res;
}

/* One op of the program against the registry's kernel of that op. */
static int op_case(const char *token, const char *op, const char *attrs, bool binary, bool clip,
                   double lo, double hi, uint64_t seed) {
    kiln_tensor *x = kt_rand(KILN_F32, 3, KT_DIMS(3, 4, 5), lo, hi, seed);
    kiln_tensor *y = binary ? kt_rand(KILN_F32, 2, KT_DIMS(4, 1), lo, hi, seed + 1) : NULL;
    char prog[128], label[160];
    snprintf(prog, sizeof prog, "program=i0%s %s", binary ? " i1" : "", token);
    snprintf(label, sizeof label, "fusedelementwise op %s%s", token, binary ? " (broadcast)" : "");
    kiln_tensor *b[2] = {kt_scalar(KILN_F32, -0.3), kt_scalar(KILN_F32, 0.6)};
    kiln_tensor *want = kiln_fused_test_eval(op, attrs, binary ? 2 : clip ? 3 : 1,
                                             binary ? (kiln_tensor *[]){x, y}
                                                    : (kiln_tensor *[]){x, b[0], b[1]});
    kiln_tensor_free(b[0]);
    kiln_tensor_free(b[1]);
    if (!want) {
        kiln_tensor_free(x);
        kiln_tensor_free(y);
        return 1;
    }
    return kiln_optest("FusedElementwise", prog, binary ? 2 : 1, (kiln_tensor *[]){x, y}, 1, &want,
                       1e-6, 1e-6, label);
}

/* A program against its ops run one by one (see reference()). */
static int chain_case(const char *label, const char *program, int n_in, kiln_tensor **in,
                      int n_steps, const char *const *steps, double tol) {
    kiln_tensor *want = reference(n_in, in, n_steps, steps);
    if (!want) {
        printf("FAIL %s: the reference could not be computed\n", label);
        for (int i = 0; i < n_in; i++) kiln_tensor_free(in[i]);
        return 1;
    }
    char attrs[512];
    snprintf(attrs, sizeof attrs, "program=%s", program);
    return kiln_optest("FusedElementwise", attrs, n_in, in, 1, &want, tol, tol, label);
}

static int test(void) {
    int fails = 0;
    /* gelu written as five ops, FUSED.md's example; expected from Python's math.erf:
     * x * 0.5 * (1 + erf(x / 1.41421)). */
    kiln_tensor *in[3];
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(-1, 0, 1, 2));
    kiln_tensor *want = kt_make(KILN_F32, 1, KT_DIMS(4),
                                KT_VALS(-0.1586546444117159, 0, 0.8413453555882842, 1.954500280110536));
    fails += kiln_optest("FusedElementwise", "program=i0 c0.5 Mul c1 i0 c1.41421 Div Erf Add Mul", 1,
                         in, 1, &want, 1e-7, 1e-6, "fusedelementwise gelu by hand");
    /* (x - y) * y with x (2,1) = (1,-2), y (1,3) = (0,1,2): by hand. */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(1, -2));
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(1, 3), KT_VALS(0, 1, 2));
    want = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, 0, -2, 0, -3, -8));
    fails += kiln_optest("FusedElementwise", "program=i0 i1 Sub i1 Mul", 2, in, 1, &want, 0, 0,
                         "fusedelementwise broadcast by hand");
    /* Clip with an infinite bound, Max against a constant, f64: (-inf..1], then max 0.25:
     * x = (-3, 0.5, 2) -> (0.25, 0.5, 1). */
    in[0] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(-3, 0.5, 2));
    want = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.25, 0.5, 1));
    fails += kiln_optest("FusedElementwise", "program=i0 Clip@-inf@1 c0.25 Max", 1, in, 1, &want, 0,
                         0, "fusedelementwise Clip@-inf, Max by hand");

    /* Every op against its own kernel. */
    static const struct {
        const char *token, *op, *attrs;
        bool binary, clip, positive;
    } cases[] = {
        {"Relu", "Relu", "", false, false, false},
        {"Sigmoid", "Sigmoid", "", false, false, false},
        {"Tanh", "Tanh", "", false, false, false},
        {"Exp", "Exp", "", false, false, false},
        {"Log", "Log", "", false, false, true},
        {"Sqrt", "Sqrt", "", false, false, true},
        {"Reciprocal", "Reciprocal", "", false, false, true},
        {"Abs", "Abs", "", false, false, false},
        {"Neg", "Neg", "", false, false, false},
        {"Erf", "Erf", "", false, false, false},
        {"Floor", "Floor", "", false, false, false},
        {"Ceil", "Ceil", "", false, false, false},
        {"Softplus", "Softplus", "", false, false, false},
        {"Softsign", "Softsign", "", false, false, false},
        {"HardSwish", "HardSwish", "", false, false, false},
        {"LeakyRelu@0.3", "LeakyRelu", "alpha=0.3", false, false, false},
        {"Elu@0.7", "Elu", "alpha=0.7", false, false, false},
        {"HardSigmoid@0.25@0.4", "HardSigmoid", "alpha=0.25;beta=0.4", false, false, false},
        {"Clip@-0.3@0.6", "Clip", "", false, true, false},
        {"Add", "Add", "", true, false, false},
        {"Sub", "Sub", "", true, false, false},
        {"Mul", "Mul", "", true, false, false},
        {"Div", "Div", "", true, false, true},
        {"Pow", "Pow", "", true, false, true},
        {"Max", "Max", "", true, false, false},
        {"Min", "Min", "", true, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        fails += op_case(cases[i].token, cases[i].op, cases[i].attrs, cases[i].binary, cases[i].clip,
                         cases[i].positive ? 0.1 : -4, cases[i].positive ? 3 : 4, 300 + 2 * i);

    /* Chains against the ops one by one: three inputs broadcasting (gather path), f64 and
     * f16, large outputs on threads with and without gathering. */
    static const char *const steps[] = {"Mul|-|x0,x1", "Add|-|t0,0.5", "Tanh|-|t1", "Max|-|t2,x2",
                                        "Sub|-|t3,x0"};
    const char *prog = "i0 i1 Mul c0.5 Add Tanh i2 Max i0 Sub";
    in[0] = kt_rand(KILN_F32, 3, KT_DIMS(2, 1, 5), -2, 2, 401);
    in[1] = kt_rand(KILN_F32, 2, KT_DIMS(3, 1), -2, 2, 402);
    in[2] = kt_rand(KILN_F32, 1, KT_DIMS(5), -1, 1, 403);
    fails += chain_case("fusedelementwise chain, 3 inputs broadcast", prog, 3, in, 5, steps, 1e-6);
    in[0] = kt_rand(KILN_F64, 3, KT_DIMS(2, 1, 5), -2, 2, 404);
    in[1] = kt_rand(KILN_F64, 2, KT_DIMS(3, 1), -2, 2, 405);
    in[2] = kt_rand(KILN_F64, 1, KT_DIMS(5), -1, 1, 406);
    fails += chain_case("fusedelementwise chain f64", prog, 3, in, 5, steps, 1e-14);
    in[0] = kt_rand(KILN_F16, 3, KT_DIMS(2, 1, 5), -2, 2, 407);
    in[1] = kt_rand(KILN_F16, 2, KT_DIMS(3, 1), -2, 2, 408);
    in[2] = kt_rand(KILN_F16, 1, KT_DIMS(5), -1, 1, 409);
    fails += chain_case("fusedelementwise chain f16", prog, 3, in, 5, steps, 4e-3);
    in[0] = kt_rand(KILN_F32, 3, KT_DIMS(64, 1, 33), -2, 2, 410);
    in[1] = kt_rand(KILN_F32, 2, KT_DIMS(48, 1), -2, 2, 411);
    in[2] = kt_rand(KILN_F32, 1, KT_DIMS(33), -1, 1, 412);
    fails += chain_case("fusedelementwise chain large, gather on threads", prog, 3, in, 5, steps, 1e-6);
    in[0] = kt_rand(KILN_F32, 1, KT_DIMS(300001), -2, 2, 413);
    in[1] = kt_rand(KILN_F32, 1, KT_DIMS(300001), -2, 2, 414);
    in[2] = kt_rand(KILN_F32, 1, KT_DIMS(1), -1, 1, 415);
    fails += chain_case("fusedelementwise chain large, same shapes on threads", prog, 3, in, 5, steps,
                        1e-6);

    /* ConvNeXt's block end, layer scale (C,1,1) * x + residual, and other operands whose
     * bytes are the same in NCHW and NHWC (a (1,C,1,1) scale, an (N,C,1,1) gate, an
     * (N,1,H,W) map): the GPU sweep also runs these with x, the residual and the output
     * NHWC, where the kernel walks channels-last dims (C = 16: vectors; C = 6: scalars) */
    static const char *const scale_steps[] = {"Mul|-|x0,x1", "Add|-|t0,x2"};
    in[0] = kt_rand(KILN_F32, 3, KT_DIMS(16, 1, 1), 0.5, 1.5, 416);
    in[1] = kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 5, 7), -2, 2, 417);
    in[2] = kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 5, 7), -2, 2, 418);
    fails += chain_case("fusedelementwise layer scale (C,1,1) and residual", "i0 i1 Mul i2 Add", 3, in, 2, scale_steps,
                        1e-6);
    in[0] = kt_rand(KILN_F32, 4, KT_DIMS(1, 6, 1, 1), 0.5, 1.5, 419);
    in[1] = kt_rand(KILN_F32, 4, KT_DIMS(2, 6, 3, 5), -2, 2, 420);
    in[2] = kt_rand(KILN_F32, 4, KT_DIMS(2, 6, 3, 5), -2, 2, 421);
    fails += chain_case("fusedelementwise scale (1,C,1,1), C = 6", "i0 i1 Mul i2 Add", 3, in, 2, scale_steps, 1e-6);
    in[0] = kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 1, 1), 0.5, 1.5, 422);
    in[1] = kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 4, 3), -2, 2, 423);
    in[2] = kt_rand(KILN_F32, 4, KT_DIMS(2, 1, 4, 3), -2, 2, 424);
    fails += chain_case("fusedelementwise gate (N,C,1,1) and map (N,1,H,W)", "i0 i1 Mul i2 Add", 3, in, 2, scale_steps,
                        1e-6);

    /* errors */
    static const struct {
        const char *program, *label;
    } bad[] = {
        {"program=i0 Gelu", "unknown op"},
        {"program=i0 i1 Add", "input index out of range"},
        {"program=i0 Add", "stack underflow"},
        {"program=i0 i0", "two values left"},
        {"program=i0 LeakyRelu", "missing parameter"},
        {"program=i0 Relu@1", "parameter too many"},
        {"program=i0 cx Add", "bad constant"},
        {"", "no program"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char label[128];
        snprintf(label, sizeof label, "fusedelementwise rejects: %s", bad[i].label);
        in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
        fails += kiln_optest_fails("FusedElementwise", bad[i].program, 1, in, 1, KILN_ERR_UNSUPPORTED,
                                   label);
    }
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F64, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("FusedElementwise", "program=i0 i1 Add", 2, in, 1, KILN_ERR_TYPE,
                               "fusedelementwise rejects mixed dtypes");
    in[0] = kt_make(KILN_I32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("FusedElementwise", "program=i0 Relu", 1, in, 1, KILN_ERR_TYPE,
                               "fusedelementwise rejects integers");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("FusedElementwise", "program=i0 i1 Add", 2, in, 1, KILN_ERR_SHAPE,
                               "fusedelementwise rejects shapes that do not broadcast");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_fused_elementwise = {
    .precision = KILN_PREC_LOW, .prec_flags = KILN_PREC_EXP_LOG, .layout = KILN_LAYOUT_SAME_SHAPE,
    .name = "FusedElementwise", .domain = "kiln", .min_inputs = 1, .max_inputs = FE_MAX_IN,
    .min_outputs = 1, .max_outputs = 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
