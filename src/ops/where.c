/*
 * where.c — Where: output = condition ? X : Y elementwise, with numpy (multidirectional)
 * broadcasting of all three inputs, opsets 9..16. condition is bool (any nonzero byte
 * counts as true); X and Y have one dtype, any kiln dtype (elements are copied as bytes).
 * Gradient: dX = condition ? dY : 0 and dY_Y = condition ? 0 : dY (Where with a zero
 * constant), each summed back to its input's shape; the condition has none.
 */
#include "../core/optest.h"
#include "binary.h"

#include <string.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *cond = c->in[0], *x = c->in[1], *y = c->in[2];
    KILN_OP_CHECK(c, cond && x && y, KILN_ERR_INVALID_ARGUMENT, "needs three inputs");
    KILN_OP_CHECK(c, cond->dtype == KILN_BOOL, KILN_ERR_TYPE,
                  "condition dtype is %s, not bool", kiln_dtype_name(cond->dtype));
    KILN_OP_CHECK(c, x->dtype == y->dtype, KILN_ERR_TYPE,
                  "input dtypes differ: X is %s, Y is %s", kiln_dtype_name(x->dtype),
                  kiln_dtype_name(y->dtype));
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE, "X dtype %s is not supported",
                  kiln_dtype_name(x->dtype));
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    KILN_OP_CHECK(c, kiln_bcast_shape_n(3, (const kiln_tensor *const *)c->in, &nd, dims),
                  KILN_ERR_SHAPE, "input shapes do not broadcast");
    kiln_tensor_set_shape(c->out[0], x->dtype, nd, dims);
    return KILN_OK;
}

typedef struct job {
    const kiln_tensor *cond, *x, *y;
    kiln_tensor *out;
} job;

/* One loop per element width, so each chunk is a plain typed select. */
#define SELECT(T)                                                                       \
    do {                                                                                \
        const T *xp = (const T *)j->x->data + ch->off[1];                               \
        const T *yp = (const T *)j->y->data + ch->off[2];                               \
        T *op = (T *)j->out->data + ch->y;                                              \
        for (int64_t i = 0; i < ch->n; i++)                                             \
            op[i] = cp[i * ch->inc[0]] ? xp[i * ch->inc[1]] : yp[i * ch->inc[2]];       \
    } while (0)

static void chunk(const kiln_bcast_chunk *ch, void *arg) {
    const job *j = arg;
    const uint8_t *cp = (const uint8_t *)j->cond->data + ch->off[0];
    switch (kiln_dtype_size(j->out->dtype)) {
    case 1: SELECT(uint8_t); break;
    case 2: SELECT(uint16_t); break;
    case 4: SELECT(uint32_t); break;
    default: SELECT(uint64_t); break; /* infer admits sizes 1, 2, 4 and 8 only */
    }
}

static kiln_status forward(kiln_op_ctx *c) {
    kiln_bcast p;
    kiln_bcast_init(&p, c->out[0]->ndim, c->out[0]->dims, 3, (const kiln_tensor *const *)c->in);
    job j = {c->in[0], c->in[1], c->in[2], c->out[0]};
    kiln_bcast_run(&p, chunk, &j);
    return KILN_OK;
}

static kiln_status grad(kiln_grad_ctx *g) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    if (g->need[0])
        return kiln_fail(g->m->ctx, KILN_ERR_UNSUPPORTED, "Where node '%s': the condition ('%s') is bool and has no gradient",
                         n->name, g->m->values[n->in[0]].name);
    kiln_status st = kiln_binary_grad_check(g);
    if (st) return st;
    int zero = kiln_binary_grad_scalar(g, 0, g->dy[0]);
    for (int k = 1; k < 3 && !st; k++) {
        if (!g->need[k]) continue;
        int in[3] = {KILN_GRAD_IN(g, 0), k == 1 ? g->dy[0] : zero, k == 1 ? zero : g->dy[0]};
        st = kiln_binary_grad_input(g, k, zero < 0 ? -1 : kiln_grad_emit(g, NULL, "Where", 3, in, 1, NULL, false, NULL));
    }
    return st;
}

#ifdef KILN_OPTESTS
static int check(const char *label, kiln_tensor *cond, kiln_tensor *x, kiln_tensor *y,
                 kiln_tensor *want) {
    kiln_tensor *in[3] = {cond, x, y};
    return kiln_optest("Where", "", 3, in, 1, &want, 0, 0, label);
}

/* cond (8,1,300), X (8,100,1), Y (100,300) -> (8,100,300): large enough for the
 * multi-threaded path, every input broadcast along a different dim. Checked against a
 * naive index computation. */
static int test_large(void) {
    kiln_tensor *cond = kt_rand(KILN_F32, 3, KT_DIMS(8, 1, 300), 0, 1, 11);
    kiln_tensor *x = kt_rand(KILN_F32, 3, KT_DIMS(8, 100, 1), -1, 1, 12);
    kiln_tensor *y = kt_rand(KILN_F32, 2, KT_DIMS(100, 300), -1, 1, 13);
    kiln_tensor *cb = kt_make(KILN_BOOL, 3, KT_DIMS(8, 1, 300), NULL);
    kiln_tensor *want = kt_make(KILN_F32, 3, KT_DIMS(8, 100, 300), NULL);
    if (!cond || !x || !y || !cb || !want) {
        kiln_tensor_free(cond);
        kiln_tensor_free(x);
        kiln_tensor_free(y);
        kiln_tensor_free(cb);
        kiln_tensor_free(want);
        return 1;
    }
    const float *cf = cond->data, *xp = x->data, *yp = y->data; // (8,300), (8,100), (100,300)
    uint8_t *cp = cb->data;                                       // (8,300)
    float *wp = want->data;                                       // (8,100,300)
    for (int64_t i = 0; i < 8 * 300; i++) cp[i] = cf[i] < 0.5f;
    for (int64_t a = 0; a < 8; a++)
        for (int64_t b = 0; b < 100; b++)
            for (int64_t k = 0; k < 300; k++)
                wp[(a * 100 + b) * 300 + k] = cp[a * 300 + k] ? xp[a * 100 + b] : yp[b * 300 + k];
    kiln_tensor_free(cond);
    return check("where f32 large (8,1,300),(8,100,1),(100,300)", cb, x, y, want);
}

static int test(void) {
    int fails = 0;
    fails += check("where f32 (2,2)", kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(1, 0, 1, 1)),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 4)),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(9, 8, 7, 6)),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 8, 3, 4)));
    fails += check("where f32 cond (2,1), X (1,3), Y ()",
                   kt_make(KILN_BOOL, 2, KT_DIMS(2, 1), KT_VALS(1, 0)),
                   kt_make(KILN_F32, 2, KT_DIMS(1, 3), KT_VALS(1, 2, 3)), kt_scalar(KILN_F32, 9),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 9, 9, 9)));
    fails += check("where i64 cond (3), X (2,1), Y (2,3)",
                   kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(1, 0, 1)),
                   kt_make(KILN_I64, 2, KT_DIMS(2, 1), KT_VALS(10, -1e15)),
                   kt_make(KILN_I64, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6)),
                   kt_make(KILN_I64, 2, KT_DIMS(2, 3), KT_VALS(10, 2, 10, -1e15, 5, -1e15)));
    fails += check("where f16 cond ()", kt_scalar(KILN_BOOL, 0),
                   kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(1, 2)),
                   kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(-0.5, 65504)),
                   kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(-0.5, 65504)));
    fails += check("where bool", kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(1, 0, 0)),
                   kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(0, 0, 1)), kt_scalar(KILN_BOOL, 1),
                   kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(0, 1, 1)));
    fails += check("where u8 (2,2) cond (2)", kt_make(KILN_BOOL, 1, KT_DIMS(2), KT_VALS(0, 1)),
                   kt_make(KILN_U8, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 4)),
                   kt_make(KILN_U8, 2, KT_DIMS(2, 2), KT_VALS(255, 254, 253, 252)),
                   kt_make(KILN_U8, 2, KT_DIMS(2, 2), KT_VALS(255, 2, 253, 4)));
    fails += test_large();

    kiln_tensor *in[3] = {kt_make(KILN_BOOL, 1, KT_DIMS(3), NULL),
                          kt_make(KILN_F32, 1, KT_DIMS(2), NULL),
                          kt_make(KILN_F32, 1, KT_DIMS(3), NULL)};
    fails += kiln_optest_fails("Where", "", 3, in, 1, KILN_ERR_SHAPE, "where (3),(2),(3) rejected");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Where", "", 3, in, 1, KILN_ERR_TYPE, "where f32 condition rejected");
    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[2] = kt_make(KILN_I32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Where", "", 3, in, 1, KILN_ERR_TYPE, "where X f32, Y i32 rejected");

    kiln_tensor *cond = kt_make(KILN_BOOL, 2, KT_DIMS(2, 3), KT_VALS(1, 0, 0, 1, 1, 0));
    fails += kiln_gradcheck("Where", "", 0, 3, (kiln_tensor *[]){cond, kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 1),
                            kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 2)}, NULL, "where grad (2,3) all same shape");
    cond = kt_make(KILN_BOOL, 2, KT_DIMS(2, 3), KT_VALS(1, 0, 0, 1, 1, 0));
    fails += kiln_gradcheck("Where", "", 0, 3, (kiln_tensor *[]){cond, kt_rand(KILN_F64, 2, KT_DIMS(2, 1), -1, 1, 3),
                            kt_rand(KILN_F64, 1, KT_DIMS(3), -1, 1, 4)}, NULL, "where grad cond (2,3), X (2,1), Y (3)");
    cond = kt_make(KILN_BOOL, 3, KT_DIMS(2, 1, 3), KT_VALS(0, 1, 1, 1, 0, 1));
    fails += kiln_gradcheck("Where", "", 0, 3, (kiln_tensor *[]){cond, kt_scalar(KILN_F64, 0.5),
                            kt_rand(KILN_F64, 2, KT_DIMS(4, 1), -1, 1, 5)}, NULL, "where grad cond (2,1,3), X (), Y (4,1)");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Where", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_BOOL, 4, KT_DIMS(2, 3, 17, 19), 0, 2, 351),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 352),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 19), -2, 2, 353)},
                               1, "where random, broadcast");
    /* every dtype Where moves, for the backend sweep (f32 also runs in f16 and bf16) */
    {
        static const kiln_dtype types[] = {KILN_F32, KILN_I64, KILN_U8, KILN_BOOL};
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
            const kiln_dtype t = types[k];
            fails += kiln_optest_sweep("Where", "", 0, 3,
                                       (kiln_tensor *[]){kt_rand(KILN_BOOL, 3, KT_DIMS(2, 1, 4), -1, 1, 601),
                                                         kt_rand(t, 2, KT_DIMS(3, 1), -2, 2, 602),
                                                         kt_rand(t, 3, KT_DIMS(2, 3, 4), -2, 2, 603)},
                                       1, "where broadcast");
            fails += kiln_optest_sweep("Where", "", 0, 3,
                                       (kiln_tensor *[]){kt_rand(KILN_BOOL, 2, KT_DIMS(5, 7), -1, 1, 604),
                                                         kt_rand(t, 2, KT_DIMS(5, 7), -2, 2, 605),
                                                         kt_rand(t, 2, KT_DIMS(5, 7), -2, 2, 606)},
                                       1, "where same shape");
            fails += kiln_optest_sweep("Where", "", 0, 3,
                                       (kiln_tensor *[]){kt_rand(KILN_BOOL, 0, NULL, -1, 1, 607),
                                                         kt_rand(t, 2, KT_DIMS(3, 4), -2, 2, 608),
                                                         kt_rand(t, 1, KT_DIMS(4), -2, 2, 609)},
                                       1, "where scalar condition");
        }
    }
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_where = {
    .precision = KILN_PREC_FOLLOW, .out_dtype = {KILN_DT_IN1},
    .name = "Where", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};
