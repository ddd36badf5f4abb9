/* test_pass_decisions.c — the graph passes make the same rewrites as recorded: every node
 * (op, inputs and outputs with dtypes and layouts, attributes) after kiln_passes_apply, for
 * tiny_cnn.onnx, mnist-net's forward graph and its training graph (the trainer's
 * training-form rewrite and autograd), on the CPU (every fusion) and on CUDA with the
 * fusions that ask the backend switched off (precision, NHWC layout: the same in builds
 * with or without CUDA), in fp32, fp16 and bf16.
 *
 *   test_pass_decisions <source dir>          compare with tests/data/pass_decisions.txt
 *   test_pass_decisions <source dir> --dump   print the record (to regenerate it after a
 *                                             change meant to alter rewrites: say so in
 *                                             the commit)
 *
 * The record was made by the tree before op properties (commit bc8aa92): op properties
 * must not change a single rewrite.
 */
#include "core/internal.h"
#include "passes/passes.h"
#include "train/trainer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct buf {
    char *s;
    size_t len, cap;
} buf;

static void put(buf *b, const char *fmt, ...) KILN_PRINTF(2, 3);
static void put(buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 65536;
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) exit(2);
        b->s = s;
        b->cap = cap;
    }
}

static void put_value(buf *b, const kiln_model *m, int v) {
    if (v < 0) {
        put(b, " -");
        return;
    }
    const kiln_value *x = &m->values[v];
    put(b, " %s:%s%s%s", x->name, kiln_dtype_name(x->dtype), x->format == KILN_FORMAT_NHWC ? ":nhwc" : "",
        x->init ? ":init" : "");
}

static void dump_model(buf *b, const kiln_model *m) {
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *n = &m->nodes[i];
        put(b, "  %s%s%s '%s' in", n->domain[0] ? n->domain : "", n->domain[0] ? "." : "", n->op_type, n->name);
        for (int k = 0; k < n->n_in; k++) put_value(b, m, n->in[k]);
        put(b, " out");
        for (int k = 0; k < n->n_out; k++) put_value(b, m, n->out[k]);
        for (int a = 0; a < n->n_attrs; a++) {
            const kiln_attr *at = &n->attrs[a];
            put(b, " %s=", at->name);
            switch (at->type) {
            case KILN_ATTR_INT: put(b, "%lld", (long long)at->i); break;
            case KILN_ATTR_FLOAT: put(b, "%.9g", (double)at->f); break;
            case KILN_ATTR_STRING: put(b, "'%s'", at->s ? at->s : ""); break;
            case KILN_ATTR_INTS:
                for (int k = 0; k < at->n; k++) put(b, "%s%lld", k ? "," : "", (long long)at->ints[k]);
                break;
            case KILN_ATTR_FLOATS:
                for (int k = 0; k < at->n; k++) put(b, "%s%.9g", k ? "," : "", (double)at->floats[k]);
                break;
            case KILN_ATTR_TENSOR: put(b, "tensor:%s", at->t ? kiln_dtype_name(at->t->dtype) : "-"); break;
            default: put(b, "?"); break;
            }
        }
        put(b, "\n");
    }
    put(b, "  outputs");
    for (int j = 0; j < m->n_outputs; j++) put_value(b, m, m->outputs[j]);
    put(b, "\n");
}

static int apply_and_dump(buf *b, const char *label, const kiln_model *src) {
    static const kiln_precision precs[] = {KILN_PRECISION_FP32, KILN_PRECISION_FP16, KILN_PRECISION_BF16};
    static const char *const pname[] = {"fp32", "fp16", "bf16"};
    /* the fusions that ask the backend for their kernels: off for CUDA (build-independent) */
    const unsigned asks = KILN_PASS_FUSE_CONV | KILN_PASS_FUSE_ELTWISE | KILN_PASS_FUSE_LOSS | KILN_PASS_FUSE_POOL;
    int failed = 0;
    for (int dev = 0; dev < 2; dev++)
        for (int p = 0; p < 3; p++) {
            kiln_pass_options o = {.device = dev ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU, .precision = precs[p],
                                   .disabled = dev ? asks : 0};
            kiln_model *out = NULL;
            put(b, "== %s %s %s\n", label, dev ? "cuda" : "cpu", pname[p]);
            if (kiln_passes_apply(src, &o, &out) != KILN_OK) {
                put(b, "  failed: %s\n", kiln_context_message(src->ctx));
                failed++;
                continue;
            }
            dump_model(b, out);
            kiln_model_free(out);
        }
    return failed;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s <source dir> [--dump]\n", argv[0]);
        return 2;
    }
    const bool dump = argc > 2 && strcmp(argv[2], "--dump") == 0;
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx) != KILN_OK) return 2;
    buf b = {0};
    int fails = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/examples/tiny_cnn.onnx", argv[1]);
    kiln_model *m = NULL;
    if (kiln_model_load_onnx(ctx, path, &m) == KILN_OK) {
        fails += apply_and_dump(&b, "tiny_cnn", m);
        kiln_model_free(m);
    } else {
        printf("FAIL: cannot load %s: %s\n", path, kiln_context_message(ctx));
        fails++;
    }
    m = NULL;
    if (kiln_model_mnist_net(ctx, 4, 1, 1, &m) == KILN_OK) {
        fails += apply_and_dump(&b, "mnist_net", m);
        kiln_train_options to = {.device = KILN_DEVICE_CPU, .optimizer = KILN_OPTIM_ADADELTA};
        kiln_trainer *t = NULL;
        if (kiln_trainer_create(m, "loss", &to, &t) == KILN_OK) {
            fails += apply_and_dump(&b, "mnist_net_train", t->train);
            kiln_trainer_free(t);
        } else {
            printf("FAIL: trainer: %s\n", kiln_context_message(ctx));
            fails++;
        }
        kiln_model_free(m);
    } else {
        printf("FAIL: mnist-net: %s\n", kiln_context_message(ctx));
        fails++;
    }
    if (dump) {
        fwrite(b.s, 1, b.len, stdout);
    } else {
        snprintf(path, sizeof path, "%s/tests/data/pass_decisions.txt", argv[1]);
        char *want = read_file(path);
        if (!want) {
            printf("FAIL: cannot read %s\n", path);
            fails++;
        } else if (strcmp(want, b.s) != 0) {
            /* the first differing line */
            const char *p = want, *q = b.s;
            int line = 1;
            while (*p && *p == *q) line += *p == '\n', p++, q++;
            while (p > want && p[-1] != '\n') p--, q--;
            printf("FAIL: rewrites differ from %s at line %d:\n  want: %.300s\n  got:  %.300s\n", path, line, p, q);
            fails++;
        } else {
            printf("%zu bytes of rewrites as recorded\n", b.len);
        }
        free(want);
    }
    free(b.s);
    kiln_context_free(ctx);
    if (!dump) printf("%s: %d failed checks\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
