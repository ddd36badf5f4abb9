/*
 * test_onnx_export.c — kiln_model_save_onnx: load -> save -> load -> run.
 *
 *   test_onnx_export SRC_DIR NODE_DIR TMP_DIR
 *     - every case of ONNX's node tests (NODE_DIR) that kiln loads and runs: saved to
 *       memory, reloaded, run on the same inputs: the outputs bit for bit the original's
 *       (at least 500 cases must round-trip, so a broken loader cannot pass by skipping);
 *     - examples/tiny_cnn.onnx through a file, and through a file with every initializer
 *       in external data; mnist-net built in C; a trained then exported mnist-net: bit for
 *       bit;
 *     - models rewritten by the CPU fp32 passes (kiln.FusedConv, FusedGemm,
 *       FusedElementwise, LogSoftmaxNLL), the fp16 precision pass and the CUDA layout
 *       pass (kiln.ToNHWC / ToNCHW) when this build can plan it: saved with no kiln-domain
 *       op left, reloaded, outputs within tolerance of the original model's;
 *     - save errors: an unfinalized model, an unwritable path, a training-only op, NULL.
 *   test_onnx_export --big TMP_DIR
 *     a model with 2.25 GiB of weights: external data (needs ~7 GiB of memory; not in ctest).
 *   test_onnx_export --corpus DIR
 *     every file of DIR that kiln loads must save and reload (the fuzz corpus); prints counts.
 */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "core/internal.h"
#include "io/onnx_save.h"
#include "kiln.h"
#include "kiln_models.h"
#include "kiln_tools.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int fails;

static bool is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Bit-identical outputs. */
static bool same_bits(const kiln_tensor *a, const kiln_tensor *b, char *why, size_t n) {
    if (a->dtype != b->dtype || a->ndim != b->ndim) {
        snprintf(why, n, "dtype/rank differ (%s/%d vs %s/%d)", kiln_dtype_name(a->dtype), a->ndim,
                 kiln_dtype_name(b->dtype), b->ndim);
        return false;
    }
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) {
            snprintf(why, n, "dim %d differs (%lld vs %lld)", i, (long long)a->dims[i], (long long)b->dims[i]);
            return false;
        }
    size_t bytes = kiln_tensor_nbytes(a);
    if (bytes && memcmp(a->data, b->data, bytes) != 0) {
        snprintf(why, n, "values differ");
        return false;
    }
    return true;
}

/* |a - b| <= atol + rtol |b| everywhere (same dtype and dims). */
static bool close_to(const kiln_tensor *a, const kiln_tensor *b, double rtol, double atol, char *why, size_t n) {
    if (a->dtype != b->dtype || a->ndim != b->ndim) {
        snprintf(why, n, "dtype/rank differ");
        return false;
    }
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) {
            snprintf(why, n, "dim %d differs", i);
            return false;
        }
    for (int64_t i = 0; i < kiln_tensor_numel(a); i++) {
        double x = kiln_get_f64(a, i), y = kiln_get_f64(b, i);
        if (!(fabs(x - y) <= atol + rtol * fabs(y))) {
            snprintf(why, n, "element %lld: %.9g vs %.9g", (long long)i, x, y);
            return false;
        }
    }
    return true;
}

/* Run m on in (CPU, default options) and keep copies of its n outputs. */
static kiln_status run_copy(kiln_model *m, const kiln_session_options *o, int n_in, kiln_tensor **in, int n_out,
                            kiln_tensor **out) {
    kiln_session *s = NULL;
    const kiln_tensor **got = calloc((size_t)n_out + 1, sizeof *got);
    kiln_status st = got ? kiln_session_create(m, o, &s) : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_session_run(s, n_in, in, n_out, got);
    for (int j = 0; j < n_out; j++) out[j] = NULL;
    for (int j = 0; !st && j < n_out; j++)
        if (!(out[j] = kiln_tensor_clone(NULL, got[j]))) st = KILN_ERR_OUT_OF_MEMORY;
    kiln_session_free(s);
    free(got);
    return st;
}

static void free_all(kiln_tensor **t, int n) {
    for (int i = 0; i < n; i++) kiln_tensor_free(t[i]);
}

static int count_kiln_ops(const kiln_model *m) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++) n += strcmp(m->nodes[i].domain, "kiln") == 0;
    return n;
}

static int count_op(const kiln_model *m, const char *domain, const char *op) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++)
        n += strcmp(m->nodes[i].domain, domain) == 0 && strcmp(m->nodes[i].op_type, op) == 0;
    return n;
}

/* Save m to memory and load it back (NULL after a CHECK failure). */
static kiln_model *reload_buffer(kiln_context *ctx, const kiln_model *m, const char *what) {
    void *data = NULL;
    size_t size = 0;
    kiln_model *r = NULL;
    kiln_status st = kiln_model_save_onnx_buffer(m, &data, &size);
    CHECK(st == KILN_OK, "%s: save: %s", what, kiln_context_message(ctx));
    if (!st) {
        st = kiln_model_load_onnx_buffer(ctx, data, size, NULL, &r);
        CHECK(st == KILN_OK, "%s: reload: %s", what, kiln_context_message(ctx));
    }
    kiln_free(data);
    return r;
}

/* ------------------------------------------------------------ node tests */

/* Load dir/<prefix>K.pb for K = 0.. while they exist. */
static int load_pbs(kiln_context *ctx, const char *dir, const char *prefix, kiln_tensor **t, int max) {
    int n = 0;
    for (; n < max; n++) {
        char path[4200];
        snprintf(path, sizeof path, "%.4000s/%s%d.pb", dir, prefix, n);
        if (!is_file(path)) break;
        if (kiln_tensor_load_onnx_pb(ctx, path, &t[n])) return -1;
    }
    return n;
}

#define MAX_IO 32

static int rewritten_cases; /* node tests whose passes' rewrite had kiln ops to write */

/* One node-test case: 1 round-tripped, 0 skipped (kiln does not load or run it). */
static int node_case(const char *dir) {
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return 0;
    kiln_context_set_threads(ctx, 1);
    kiln_model *m = NULL, *r = NULL;
    kiln_tensor *in[MAX_IO] = {0}, *exp[MAX_IO] = {0}, *a[MAX_IO] = {0}, *b[MAX_IO] = {0};
    int n_in = -1, n_out = -1, done = 0;
    char path[4200], data[4200], why[256];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    snprintf(data, sizeof data, "%s/test_data_set_0", dir);
    if (kiln_model_load_onnx(ctx, path, &m)) goto out;
    n_in = load_pbs(ctx, data, "input_", in, MAX_IO);
    n_out = load_pbs(ctx, data, "output_", exp, MAX_IO);
    if (n_in < 0 || n_out <= 0 || n_out > kiln_model_num_outputs(m)) goto out;
    for (int i = 0; i < n_in && i < kiln_model_num_inputs(m); i++) {
        kiln_dtype want = KILN_DTYPE_UNDEFINED;
        kiln_model_input_info(m, i, &want, NULL, NULL);
        if (want == KILN_BF16 && in[i]->dtype == KILN_U16) in[i]->dtype = KILN_BF16;
    }
    if (run_copy(m, NULL, n_in, in, n_out, a)) goto out;
    /* kiln runs it: from here on every failure is the writer's */
    r = reload_buffer(ctx, m, dir);
    if (!r) goto out;
    CHECK(kiln_model_num_nodes(r) == kiln_model_num_nodes(m) && kiln_model_num_inputs(r) == kiln_model_num_inputs(m) &&
              kiln_model_num_outputs(r) == kiln_model_num_outputs(m) && r->opset == m->opset,
          "%s: the reloaded graph differs (nodes %d vs %d, opset %d vs %d)", dir, kiln_model_num_nodes(r),
          kiln_model_num_nodes(m), r->opset, m->opset);
    kiln_status st = run_copy(r, NULL, n_in, in, n_out, b);
    CHECK(st == KILN_OK, "%s: run of the reloaded model: %s", dir, kiln_context_message(ctx));
    if (st) goto out;
    bool ok = true;
    for (int j = 0; j < n_out && ok; j++) {
        ok = same_bits(b[j], a[j], why, sizeof why);
        CHECK(ok, "%s: output %d: %s", dir, j, why);
    }
    done = ok;
    /* the passes' rewrite of it (CPU fp32, and the CUDA layout and fusions as far as this
     * build plans them), saved and reloaded, computes the same within tolerance */
    for (int dev = 0; dev < 2 && ok; dev++) {
        kiln_session_options o = {.device = dev ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU};
        kiln_model *opt = NULL, *r2 = NULL;
        if (kiln_model_apply_passes(m, &o, &opt)) {
            CHECK(dev, "%s: passes: %s", dir, kiln_context_message(ctx));
            continue;
        }
        if (count_kiln_ops(opt) && (r2 = reload_buffer(ctx, opt, dir))) {
            kiln_tensor *c[MAX_IO] = {0};
            kiln_session_options plain = {.disable_passes = ~0u};
            st = run_copy(r2, &plain, n_in, in, n_out, c);
            CHECK(st == KILN_OK, "%s (%s passes): run of the reloaded model: %s", dir, dev ? "cuda" : "cpu",
                  kiln_context_message(ctx));
            for (int j = 0; !st && j < n_out; j++)
                if (kiln_dtype_is_float(a[j]->dtype))
                    CHECK(close_to(c[j], a[j], 1e-5, 1e-6, why, sizeof why), "%s (%s passes): output %d: %s", dir,
                          dev ? "cuda" : "cpu", j, why);
                else
                    CHECK(same_bits(c[j], a[j], why, sizeof why), "%s (%s passes): output %d: %s", dir, dev ? "cuda" : "cpu", j, why);
            free_all(c, MAX_IO);
            rewritten_cases++;
        }
        kiln_model_free(r2);
        kiln_model_free(opt);
    }
out:
    free_all(in, n_in > 0 ? n_in : MAX_IO);
    free_all(exp, MAX_IO);
    free_all(a, MAX_IO);
    free_all(b, MAX_IO);
    kiln_model_free(m);
    kiln_model_free(r);
    kiln_context_free(ctx);
    return done;
}

static void node_tests(const char *node_dir) {
    char **cases = NULL;
    int n = 0, ok = 0;
    kiln_status st = kiln_onnx_test_list(node_dir, &cases, &n);
    CHECK(st == KILN_OK, "listing %s", node_dir);
    int before = fails;
    for (int i = 0; i < n; i++) {
        ok += node_case(cases[i]);
        free(cases[i]);
    }
    free(cases);
    printf("node tests: %d of %d cases round-trip bit for bit (%d failures); %d rewritten by the passes with kiln ops, "
           "saved, reloaded and run\n", ok, n, fails - before, rewritten_cases);
    CHECK(ok >= 500, "only %d node-test cases round-trip", ok);
}

/* ------------------------------------------------------------- models */

static kiln_tensor *random_tensor(kiln_context *ctx, kiln_dtype dt, int nd, const int64_t *dims, unsigned seed) {
    kiln_tensor *t = NULL;
    if (kiln_tensor_create(ctx, dt, nd, dims, &t)) return NULL;
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++) {
        seed = seed * 1664525u + 1013904223u;
        if (dt == KILN_I64) kiln_set_i64(t, i, (seed >> 8) % 10);
        else kiln_set_f64(t, i, ((seed >> 8) / 16777216.0) * 2 - 1);
    }
    return t;
}

/* m saved (to path, or to memory with path NULL) and reloaded computes the same bits. */
static void round_trip(kiln_context *ctx, kiln_model *m, const char *what, const char *path, int n_in, kiln_tensor **in,
                       int n_out) {
    kiln_tensor *a[MAX_IO] = {0}, *b[MAX_IO] = {0};
    kiln_model *r = NULL;
    char why[256];
    kiln_status st = run_copy(m, NULL, n_in, in, n_out, a);
    CHECK(st == KILN_OK, "%s: run: %s", what, kiln_context_message(ctx));
    if (st) goto out;
    if (path) {
        st = kiln_model_save_onnx(m, path);
        CHECK(st == KILN_OK, "%s: save %s: %s", what, path, kiln_context_message(ctx));
        if (!st) CHECK((st = kiln_model_load_onnx(ctx, path, &r)) == KILN_OK, "%s: reload: %s", what, kiln_context_message(ctx));
    } else {
        r = reload_buffer(ctx, m, what);
    }
    if (!r) goto out;
    st = run_copy(r, NULL, n_in, in, n_out, b);
    CHECK(st == KILN_OK, "%s: run of the reloaded model: %s", what, kiln_context_message(ctx));
    for (int j = 0; !st && j < n_out; j++) CHECK(same_bits(b[j], a[j], why, sizeof why), "%s: output %d: %s", what, j, why);
    for (int i = 0; i < kiln_model_num_inputs(m); i++) {
        kiln_dtype d1, d2;
        int n1, n2;
        int64_t x1[KILN_MAX_DIMS], x2[KILN_MAX_DIMS];
        kiln_model_input_info(m, i, &d1, &n1, x1);
        kiln_model_input_info(r, i, &d2, &n2, x2);
        CHECK(d1 == d2 && n1 == n2 && !memcmp(x1, x2, (size_t)(n1 > 0 ? n1 : 0) * sizeof *x1) &&
                  !strcmp(kiln_model_input_name(m, i), kiln_model_input_name(r, i)),
              "%s: input %d differs after the round trip", what, i);
    }
out:
    free_all(a, MAX_IO);
    free_all(b, MAX_IO);
    kiln_model_free(r);
}

/* The passes' rewrite of m (opts) keeps its kiln ops until saved; saved and reloaded it
 * has none and computes what m computes within rtol. Returns the kiln ops it had (-1:
 * the passes could not run with these options in this build). */
static int rewritten(kiln_context *ctx, kiln_model *m, const kiln_session_options *o, const char *what, int n_in,
                     kiln_tensor **in, int n_out, double rtol, double atol) {
    kiln_model *opt = NULL, *r = NULL;
    kiln_tensor *a[MAX_IO] = {0}, *b[MAX_IO] = {0};
    char why[256];
    int kops = -1;
    if (kiln_model_apply_passes(m, o, &opt)) {
        if (o->device == KILN_DEVICE_CPU) CHECK(0, "%s: passes: %s", what, kiln_context_message(ctx));
        return -1;
    }
    kops = count_kiln_ops(opt);
    kiln_status st = run_copy(m, NULL, n_in, in, n_out, a);
    CHECK(st == KILN_OK, "%s: run: %s", what, kiln_context_message(ctx));
    if (!st && (r = reload_buffer(ctx, opt, what))) {
        CHECK(count_kiln_ops(r) == 0, "%s: kiln ops left in the saved model", what);
        kiln_session_options plain = {.disable_passes = ~0u};
        st = run_copy(r, &plain, n_in, in, n_out, b);
        CHECK(st == KILN_OK, "%s: run of the reloaded model: %s", what, kiln_context_message(ctx));
        for (int j = 0; !st && j < n_out; j++)
            CHECK(close_to(b[j], a[j], rtol, atol, why, sizeof why), "%s: output %d: %s", what, j, why);
    }
    free_all(a, MAX_IO);
    free_all(b, MAX_IO);
    kiln_model_free(r);
    kiln_model_free(opt);
    return kops;
}

/* gelu written out, a Clip and a LeakyRelu after a Gemm: fuse-eltwise and fuse-conv food. */
static kiln_model *eltwise_net(kiln_context *ctx) {
    kiln_model *m = NULL;
    const int64_t xd[2] = {-1, 6}, wd[2] = {6, 5}, bd[1] = {5}, one = 1;
    kiln_tensor *w = random_tensor(ctx, KILN_F32, 2, wd, 7), *b = random_tensor(ctx, KILN_F32, 1, bd, 8);
    kiln_tensor *h = NULL, *c1 = NULL, *c2 = NULL, *lo = NULL, *hi = NULL;
    kiln_tensor_create(ctx, KILN_F32, 0, &one, &h);
    kiln_tensor_create(ctx, KILN_F32, 0, &one, &c1);
    kiln_tensor_create(ctx, KILN_F32, 0, &one, &c2);
    kiln_tensor_create(ctx, KILN_F32, 0, &one, &lo);
    kiln_tensor_create(ctx, KILN_F32, 0, &one, &hi);
    bool ok = w && b && h && c1 && c2 && lo && hi;
    if (ok) {
        *(float *)kiln_tensor_data(h) = 0.5f;
        *(float *)kiln_tensor_data(c1) = 1.0f;
        *(float *)kiln_tensor_data(c2) = 1.41421f;
        *(float *)kiln_tensor_data(lo) = -0.25f;
        *(float *)kiln_tensor_data(hi) = 0.75f;
    }
    kiln_node *n = NULL;
#define IN(...) (const char *const[]){__VA_ARGS__}
    ok = ok && !kiln_model_create(ctx, &m) && !kiln_model_add_input(m, "x", KILN_F32, 2, xd) &&
         !kiln_model_add_initializer(m, "w", w) && !kiln_model_add_initializer(m, "b", b) &&
         !kiln_model_add_initializer(m, "half", h) && !kiln_model_add_initializer(m, "one", c1) &&
         !kiln_model_add_initializer(m, "sqrt2", c2) && !kiln_model_add_initializer(m, "lo", lo) &&
         !kiln_model_add_initializer(m, "hi", hi) &&
         !kiln_model_add_node(m, "Gemm", "fc", 3, IN("x", "w", "b"), 1, IN("g"), NULL) &&
         !kiln_model_add_node(m, "LeakyRelu", "act", 1, IN("g"), 1, IN("a"), &n) && !kiln_node_set_float(n, "alpha", 0.2f) &&
         !kiln_model_add_node(m, "Div", "d", 2, IN("a", "sqrt2"), 1, IN("t1"), NULL) &&
         !kiln_model_add_node(m, "Erf", "e", 1, IN("t1"), 1, IN("t2"), NULL) &&
         !kiln_model_add_node(m, "Add", "p", 2, IN("t2", "one"), 1, IN("t3"), NULL) &&
         !kiln_model_add_node(m, "Mul", "m1", 2, IN("a", "half"), 1, IN("t4"), NULL) &&
         !kiln_model_add_node(m, "Mul", "m2", 2, IN("t4", "t3"), 1, IN("t5"), NULL) &&
         !kiln_model_add_node(m, "Clip", "clip", 3, IN("t5", "lo", "hi"), 1, IN("t6"), NULL) &&
         !kiln_model_add_node(m, "Sigmoid", "sig", 1, IN("t6"), 1, IN("y"), NULL) && !kiln_model_add_output(m, "y") &&
         !kiln_model_finalize(m);
#undef IN
    kiln_tensor_free(w);
    kiln_tensor_free(b);
    kiln_tensor_free(h);
    kiln_tensor_free(c1);
    kiln_tensor_free(c2);
    kiln_tensor_free(lo);
    kiln_tensor_free(hi);
    CHECK(ok, "building the elementwise net: %s", kiln_context_message(ctx));
    if (!ok) {
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

static void models(const char *src, const char *tmp) {
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return;
    kiln_context_set_threads(ctx, 1);
    char path[4200], file[4200];
    const kiln_session_options cpu = {0};

    /* examples/tiny_cnn: a file, then all its initializers in external data */
    kiln_model *cnn = NULL;
    snprintf(path, sizeof path, "%s/examples/tiny_cnn.onnx", src);
    CHECK(kiln_model_load_onnx(ctx, path, &cnn) == KILN_OK, "tiny_cnn: %s", kiln_context_message(ctx));
    if (cnn) {
        kiln_dtype dt;
        int nd;
        int64_t dims[KILN_MAX_DIMS];
        kiln_model_input_info(cnn, 0, &dt, &nd, dims);
        for (int i = 0; i < nd; i++)
            if (dims[i] < 0) dims[i] = 2;
        kiln_tensor *x = random_tensor(ctx, dt, nd, dims, 1);
        snprintf(file, sizeof file, "%s/export_tiny_cnn.onnx", tmp);
        round_trip(ctx, cnn, "tiny_cnn", file, 1, &x, kiln_model_num_outputs(cnn));
        /* the 2 GiB rule at 0 bytes: tensors of 1 KiB and more external, the rest inline (then
         * of 64 bytes and more: every weight but the Reshape's shape, which onnxruntime needs
         * inline for its shape inference) */
        snprintf(file, sizeof file, "%s/export_tiny_cnn_ext1k.onnx", tmp);
        CHECK(kiln_onnx_save_with(cnn, file, 0, 1024) == KILN_OK, "tiny_cnn external 1k: %s", kiln_context_message(ctx));
        {
            kiln_model *e1 = NULL;
            CHECK(kiln_model_load_onnx(ctx, file, &e1) == KILN_OK, "tiny_cnn external 1k: reload: %s", kiln_context_message(ctx));
            if (e1) round_trip(ctx, e1, "tiny_cnn external 1k", NULL, 1, &x, 1);
            kiln_model_free(e1);
        }
        snprintf(file, sizeof file, "%s/export_tiny_cnn_ext.onnx", tmp);
        CHECK(kiln_onnx_save_with(cnn, file, 0, 64) == KILN_OK, "tiny_cnn external: %s", kiln_context_message(ctx));
        snprintf(path, sizeof path, "%.4000s.data", file);
        CHECK(is_file(path), "tiny_cnn external: no %s", path);
        kiln_model *ext = NULL;
        CHECK(kiln_model_load_onnx(ctx, file, &ext) == KILN_OK, "tiny_cnn external: reload: %s", kiln_context_message(ctx));
        if (ext) {
            kiln_tensor *a = NULL, *b = NULL;
            char why[256];
            if (!run_copy(cnn, NULL, 1, &x, 1, &a) && !run_copy(ext, NULL, 1, &x, 1, &b))
                CHECK(same_bits(b, a, why, sizeof why), "tiny_cnn external: %s", why);
            else
                CHECK(0, "tiny_cnn external: run: %s", kiln_context_message(ctx));
            kiln_tensor_free(a);
            kiln_tensor_free(b);
            /* in memory, external data has nowhere to go: but this model fits, so it works */
            kiln_model_free(ext);
        }
        int k = rewritten(ctx, cnn, &cpu, "tiny_cnn passes", 1, &x, 1, 1e-5, 1e-6);
        CHECK(k > 0, "tiny_cnn: the CPU passes made no kiln op (%d)", k);
        kiln_session_options cuda = {.device = KILN_DEVICE_CUDA};
        k = rewritten(ctx, cnn, &cuda, "tiny_cnn CUDA passes", 1, &x, 1, 1e-5, 1e-6);
        printf("tiny_cnn with the CUDA passes: %d kiln ops written as ONNX\n", k);
        kiln_session_options fp16 = {.precision = KILN_PRECISION_FP16};
        rewritten(ctx, cnn, &fp16, "tiny_cnn fp16 passes", 1, &x, 1, 2e-2, 2e-2);
        kiln_tensor_free(x);
        kiln_model_free(cnn);
    }

    /* mnist-net built in C (symbolic batch), its passes (FusedConv, FusedGemm,
     * LogSoftmaxNLL), then trained two steps and exported */
    kiln_model *mn = NULL;
    CHECK(kiln_model_mnist_net(ctx, -1, 3, 1, &mn) == KILN_OK, "mnist-net: %s", kiln_context_message(ctx));
    if (mn) {
        const int64_t xd[4] = {4, 1, 28, 28}, yd[1] = {4};
        kiln_tensor *in[2] = {random_tensor(ctx, KILN_F32, 4, xd, 2), random_tensor(ctx, KILN_I64, 1, yd, 3)};
        round_trip(ctx, mn, "mnist-net", NULL, 2, in, 2);
        kiln_model *opt = NULL;
        if (!kiln_model_apply_passes(mn, &cpu, &opt)) {
            CHECK(count_op(opt, "kiln", "FusedConv") > 0 && count_op(opt, "kiln", "FusedGemm") > 0 &&
                      count_op(opt, "kiln", "LogSoftmaxNLL") > 0,
                  "mnist-net: the CPU passes did not fuse conv, gemm and loss");
            kiln_model_free(opt);
        }
        rewritten(ctx, mn, &cpu, "mnist-net passes", 2, in, 2, 1e-5, 1e-6);
        kiln_trainer *t = NULL;
        kiln_train_options to = {.optimizer = KILN_OPTIM_SGD, .lr = 0.05f};
        CHECK(kiln_trainer_create(mn, "loss", &to, &t) == KILN_OK, "trainer: %s", kiln_context_message(ctx));
        for (int i = 0; t && i < 2; i++) CHECK(kiln_trainer_step(t, 2, in, NULL) == KILN_OK, "step: %s", kiln_context_message(ctx));
        kiln_model *ex = NULL;
        if (t) CHECK(kiln_trainer_export(t, "logprobs", &ex) == KILN_OK, "export: %s", kiln_context_message(ctx));
        if (ex) {
            snprintf(file, sizeof file, "%s/export_mnist_trained.onnx", tmp);
            round_trip(ctx, ex, "trained mnist-net", file, 1, in, 1);
            rewritten(ctx, ex, &cpu, "trained mnist-net passes", 1, in, 1, 1e-5, 1e-6);
        }
        kiln_model_free(ex);
        kiln_trainer_free(t);
        free_all(in, 2);
        kiln_model_free(mn);
    }

    /* fuse-eltwise and fuse-conv on a Gemm with a LeakyRelu and a written-out gelu */
    kiln_model *el = eltwise_net(ctx);
    if (el) {
        const int64_t xd[2] = {3, 6};
        kiln_tensor *x = random_tensor(ctx, KILN_F32, 2, xd, 4);
        kiln_model *opt = NULL;
        if (!kiln_model_apply_passes(el, &cpu, &opt)) {
            CHECK(count_op(opt, "kiln", "FusedElementwise") > 0 && count_op(opt, "kiln", "FusedGemm") > 0,
                  "eltwise net: no FusedElementwise / FusedGemm");
            kiln_model_free(opt);
        }
        round_trip(ctx, el, "eltwise net", NULL, 1, &x, 1);
        rewritten(ctx, el, &cpu, "eltwise net passes", 1, &x, 1, 1e-5, 1e-6);
        kiln_tensor_free(x);
        kiln_model_free(el);
    }
    kiln_context_free(ctx);
}

/* ------------------------------------------------------------ kiln ops */

/* One internal op (domain "kiln") on random inputs: the model holding it, saved and
 * reloaded, has no kiln op left and computes what the op's CPU reference computes (bit
 * for bit where the ONNX ops compute exactly the same: exact != 0). */
typedef struct kop_case {
    const char *op, *attrs;
    int n_in;
    kiln_dtype dt[4];
    int nd[4];
    int64_t dims[4][4];
    int n_out;
    const char *expect; /* an ONNX op the saved model must hold */
    int exact;
} kop_case;

static void kiln_op_case(kiln_context *ctx, const kop_case *c, const char *save_as) {
    kiln_model *m = NULL, *r = NULL;
    kiln_tensor *in[4] = {0}, *a[MAX_IO] = {0}, *b[MAX_IO] = {0};
    kiln_attr *attrs = NULL;
    int n_attrs = 0;
    char why[256];
    kiln_status st = kiln_model_create(ctx, &m);
    int vin[4], vout[4];
    for (int i = 0; !st && i < c->n_in; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        st = kiln_model_add_input(m, name, c->dt[i], c->nd[i], c->dims[i]);
        vin[i] = kiln_model_find_value(m, name);
        if (!(in[i] = random_tensor(ctx, c->dt[i], c->nd[i], c->dims[i], 11u + (unsigned)i))) st = KILN_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; !st && i < c->n_out; i++) {
        char name[16];
        snprintf(name, sizeof name, "y%d", i);
        vout[i] = kiln_model_get_value(m, name);
    }
    if (!st) st = kiln_attrs_parse(ctx, c->attrs, &attrs, &n_attrs);
    if (!st && kiln_model_add_node_raw(m, c->op, "fused", "kiln", c->n_in, vin, c->n_out, vout, n_attrs, attrs) < 0)
        st = KILN_ERR_OUT_OF_MEMORY;
    for (int i = 0; !st && i < c->n_out; i++) {
        char name[16];
        snprintf(name, sizeof name, "y%d", i);
        st = kiln_model_add_output(m, name);
    }
    if (!st) st = kiln_model_finalize(m);
    CHECK(st == KILN_OK, "kiln.%s: building: %s", c->op, kiln_context_message(ctx));
    kiln_session_options plain = {.disable_passes = ~0u};
    if (!st) {
        st = run_copy(m, &plain, c->n_in, in, c->n_out, a);
        CHECK(st == KILN_OK, "kiln.%s: run: %s", c->op, kiln_context_message(ctx));
    }
    if (!st && save_as) CHECK(kiln_model_save_onnx(m, save_as) == KILN_OK, "kiln.%s: save: %s", c->op, kiln_context_message(ctx));
    if (!st && (r = reload_buffer(ctx, m, c->op))) {
        CHECK(count_kiln_ops(r) == 0 && count_op(r, "", c->expect) > 0, "kiln.%s: saved without a kiln op, with %s", c->op,
              c->expect);
        st = run_copy(r, &plain, c->n_in, in, c->n_out, b);
        CHECK(st == KILN_OK, "kiln.%s: run of the reloaded model: %s", c->op, kiln_context_message(ctx));
        for (int j = 0; !st && j < c->n_out; j++) {
            bool ok = c->exact ? same_bits(b[j], a[j], why, sizeof why) : close_to(b[j], a[j], 1e-5, 1e-6, why, sizeof why);
            CHECK(ok, "kiln.%s: output %d: %s", c->op, j, why);
        }
    }
    free_all(in, 4);
    free_all(a, MAX_IO);
    free_all(b, MAX_IO);
    kiln_model_free(r);
    kiln_model_free(m);
}

/* The files go to TMP/export_kop_<i>.onnx for tests/python/test_onnx_export_ort.py. */
static void kiln_ops(const char *tmp) {
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return;
    kiln_context_set_threads(ctx, 1);
    static const kop_case cases[] = {
        {"ToNHWC", "to=10;zero_channels=2", 1, {KILN_F32}, {4}, {{2, 3, 4, 5}}, 1, "Pad", 1},
        {"ToNHWC", "to=10", 1, {KILN_F32}, {4}, {{2, 3, 4, 5}}, 1, "Cast", 1},
        {"ToNHWC", "zero_channels=5", 1, {KILN_F32}, {4}, {{1, 3, 2, 2}}, 1, "Pad", 1},
        {"ToNHWC", "", 1, {KILN_F16}, {4}, {{1, 3, 2, 2}}, 1, "Identity", 1},
        {"ToNCHW", "", 1, {KILN_F32}, {4}, {{2, 3, 4, 5}}, 1, "Identity", 1},
        {"FusedConv", "activation=Clip;act_min=-0.5;act_max=0.25", 4, {KILN_F32, KILN_F32, KILN_F32, KILN_F32},
         {4, 4, 1, 4}, {{1, 3, 5, 5}, {4, 3, 3, 3}, {4}, {1, 4, 3, 3}}, 1, "Clip", 0},
        {"FusedConv", "activation=LeakyRelu;alpha=0.3;pads=[1,1,1,1];strides=[2,2]", 3, {KILN_F32, KILN_F32, KILN_F32},
         {4, 4, 1}, {{2, 3, 6, 6}, {4, 3, 3, 3}, {4}}, 1, "LeakyRelu", 0},
        {"FusedConv", "activation=HardSigmoid;alpha=0.3;beta=0.6;group=2", 2, {KILN_F32, KILN_F32}, {4, 4},
         {{1, 4, 5, 5}, {6, 2, 3, 3}}, 1, "HardSigmoid", 0},
        {"FusedConv", "", 4, {KILN_F32, KILN_F32, KILN_F32, KILN_F32}, {4, 4, 1, 4},
         {{1, 3, 5, 5}, {4, 3, 3, 3}, {4}, {1, 4, 3, 3}}, 1, "Add", 0},
        {"FusedGemm", "activation=HardSigmoid;act_alpha=0.3;act_beta=0.4;alpha=0.7;beta=1.3;transB=1", 3,
         {KILN_F32, KILN_F32, KILN_F32}, {2, 2, 1}, {{3, 4}, {5, 4}, {5}}, 1, "HardSigmoid", 0},
        {"FusedGemm", "activation=Relu", 2, {KILN_F32, KILN_F32}, {2, 2}, {{3, 4}, {4, 5}}, 1, "Relu", 0},
        {"FusedGemm", "activation=Clip;act_max=0.5", 2, {KILN_F64, KILN_F64}, {2, 2}, {{3, 4}, {4, 5}}, 1, "Clip", 0},
        {"FusedElementwise",
         "program=i0 i1 Mul c0.5 Add Clip@-0.2@0.3 i0 Max Elu@0.5 HardSigmoid@0.1@0.6 LeakyRelu@0.2 Tanh i1 Sub Softplus",
         2, {KILN_F32, KILN_F32}, {2, 1}, {{2, 3}, {3}}, 1, "Softplus", 0},
        {"FusedElementwise", "program=i0 Abs Sqrt i0 Exp Log Add Neg Reciprocal Sigmoid Softsign HardSwish Floor c1 Pow i0 Ceil Min Erf Relu i1 Div",
         2, {KILN_F32, KILN_F32}, {3, 3}, {{2, 1, 3}, {1, 4, 1}}, 1, "Div", 0},
        {"FusedElementwise", "program=i0 i1 Mul c0.5 Add i0 Sub", 2, {KILN_F64, KILN_F64}, {3, 3}, {{2, 1, 3}, {1, 4, 1}}, 1,
         "Sub", 0},
        {"LogSoftmaxNLL", "reduction=sum;ignore_index=2", 2, {KILN_F32, KILN_I64}, {2, 1}, {{4, 10}, {4}}, 2,
         "NegativeLogLikelihoodLoss", 0},
        {"LogSoftmaxNLL", "", 3, {KILN_F16, KILN_I64, KILN_F32}, {2, 1, 1}, {{4, 10}, {4}, {10}}, 1, "LogSoftmax", 0},
        {"ChannelShuffle", "groups=2", 1, {KILN_F32}, {4}, {{2, 6, 3, 4}}, 1, "Transpose", 1},
        {"ChannelShuffle", "groups=3", 1, {KILN_I64}, {4}, {{1, 12, 2, 1}}, 1, "Transpose", 1},
        {"Roll", "axes=[1,2];shifts=[-1,2]", 1, {KILN_F32}, {4}, {{2, 6, 3, 4}}, 1, "Slice", 1},
        {"ChannelGather", "sizes=[3,2];map=[65536,-1,1,2,0]", 2, {KILN_F32, KILN_F32}, {4, 4}, {{2, 3, 3, 4}, {2, 1, 3, 4}},
         2, "Gather", 1},
        {"ChannelGather", "sizes=[2];map=[1,0]", 1, {KILN_I64}, {4}, {{1, 2, 2, 1}}, 1, "Gather", 1},
        {"Roll", "axes=[-1];shifts=[3]", 1, {KILN_I64}, {3}, {{2, 3, 5}}, 1, "Concat", 1},
        {"ConcatAffine", "relu=1", 4, {KILN_F32, KILN_F32, KILN_F32, KILN_F32}, {1, 1, 4, 4},
         {{7}, {7}, {2, 3, 4, 5}, {2, 4, 4, 5}}, 1, "Concat", 0},
        {"ConcatAffine", "", 3, {KILN_F32, KILN_F32, KILN_F64}, {1, 1, 2}, {{3}, {3}, {4, 3}}, 1, "Cast", 0},
        /* the activations with no ONNX op of their name, as the patterns the exporters write */
        {"FusedConv", "activation=Silu;group=4;pads=[1,1,1,1]", 3, {KILN_F32, KILN_F32, KILN_F32}, {4, 4, 1},
         {{2, 4, 5, 5}, {4, 1, 3, 3}, {4}}, 1, "Sigmoid", 0},
        {"FusedConv", "activation=Gelu", 4, {KILN_F32, KILN_F32, KILN_F32, KILN_F32}, {4, 4, 1, 4},
         {{1, 3, 5, 5}, {4, 3, 3, 3}, {4}, {1, 4, 3, 3}}, 1, "Erf", 0},
        {"FusedConv", "activation=GeluTanh", 2, {KILN_F32, KILN_F32}, {4, 4}, {{1, 3, 5, 5}, {4, 3, 1, 1}}, 1, "Gelu",
         0},
        {"FusedGemm", "activation=Silu;transB=1", 3, {KILN_F32, KILN_F32, KILN_F32}, {2, 2, 1}, {{3, 4}, {5, 4}, {5}}, 1,
         "Mul", 0},
        {"FusedGemm", "activation=Gelu", 2, {KILN_F32, KILN_F32}, {2, 2}, {{3, 4}, {4, 5}}, 1, "Erf", 0},
        /* the residual Z (a Linear and the Add after it): Gemm, then Add [, then the activation] */
        {"FusedGemm", "transB=1", 4, {KILN_F32, KILN_F32, KILN_F32, KILN_F32}, {2, 2, 1, 2},
         {{3, 4}, {5, 4}, {5}, {3, 5}}, 1, "Add", 0},
        {"FusedGemm", "activation=Relu", 4, {KILN_F32, KILN_F32, KILN_F32, KILN_F32}, {2, 2, 1, 2},
         {{3, 4}, {4, 5}, {5}, {3, 5}}, 1, "Relu", 0},
        /* Swin's window partition (Pad, roll, views around the permutation) and its reverse
         * (the permutation, roll back, crop) */
        {"RowGather", "pads=[0,1,1,0];shifts=[0,-1,-1,0];view=[-1,2,2,2,2,2];perm=[0,1,3,2,4,5];out_view=[-1,4,2]", 1,
         {KILN_F32}, {4}, {{2, 3, 3, 2}}, 1, "Pad", 1},
        {"RowGather", "view=[-1,2,2,2,2,3];perm=[0,1,3,2,4,5];out_view=[-1,4,4,3];out_shifts=[0,1,1,0];out_sizes=[-1,3,3,-1]",
         1, {KILN_I64}, {3}, {{8, 4, 3}}, 1, "Slice", 1},
        /* MaxViT's partition from NHWC bytes, and a departition into them */
        {"RowGather", "in_nhwc=1;view=[-1,2,2,2,2,2];perm=[0,1,3,2,4,5];out_view=[-1,4,4,2]", 1, {KILN_F32}, {4},
         {{2, 2, 4, 4}}, 1, "Transpose", 1},
        {"RowGather", "out_nhwc=1;view=[-1,2,2,2,2,2];perm=[0,1,3,2,4,5];out_view=[-1,4,4,2]", 1, {KILN_F32}, {4},
         {{2, 4, 4, 2}}, 1, "Transpose", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char file[4200];
        snprintf(file, sizeof file, "%.4000s/export_kop_%02zu.onnx", tmp, i);
        kiln_op_case(ctx, &cases[i], file);
    }
    kiln_context_free(ctx);
}

/* ------------------------------------------------------------- errors */

static void errors(const char *tmp) {
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return;
    kiln_model *m = NULL;
    const int64_t d[2] = {2, 3};
    void *data = (void *)1;
    size_t size = 7;
    /* not finalized */
    if (!kiln_model_create(ctx, &m) && !kiln_model_add_input(m, "x", KILN_F32, 2, d) &&
        !kiln_model_add_node(m, "Relu", "r", 1, (const char *const[]){"x"}, 1, (const char *const[]){"y"}, NULL) &&
        !kiln_model_add_output(m, "y")) {
        char file[4200];
        snprintf(file, sizeof file, "%s/export_unfinalized.onnx", tmp);
        remove(file);
        CHECK(kiln_model_save_onnx(m, file) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_context_message(ctx), "not finalized"),
              "unfinalized: %s", kiln_context_message(ctx));
        CHECK(!is_file(file), "unfinalized: a file was written");
        CHECK(kiln_model_save_onnx_buffer(m, &data, &size) == KILN_ERR_INVALID_ARGUMENT, "unfinalized buffer");
        CHECK(kiln_model_finalize(m) == KILN_OK, "finalize: %s", kiln_context_message(ctx));
        /* unwritable: a directory that does not exist; then a good save stays when a later one fails */
        CHECK(kiln_model_save_onnx(m, "/nonexistent-kiln-dir/m.onnx") == KILN_ERR_IO &&
                  strstr(kiln_context_message(ctx), "/nonexistent-kiln-dir/m.onnx"),
              "unwritable: %s", kiln_context_message(ctx));
        CHECK(kiln_model_save_onnx(m, file) == KILN_OK, "save: %s", kiln_context_message(ctx));
        CHECK(kiln_model_save_onnx(m, tmp) == KILN_ERR_IO, "a directory as the path: %s", kiln_context_message(ctx));
        kiln_model *r = NULL;
        CHECK(kiln_model_load_onnx(ctx, file, &r) == KILN_OK, "reload: %s", kiln_context_message(ctx));
        kiln_model_free(r);
        CHECK(kiln_model_save_onnx(NULL, file) == KILN_ERR_INVALID_ARGUMENT, "NULL model");
        CHECK(kiln_model_save_onnx(m, NULL) == KILN_ERR_INVALID_ARGUMENT, "NULL path");
        CHECK(kiln_model_save_onnx_buffer(m, NULL, &size) == KILN_ERR_INVALID_ARGUMENT, "NULL data");
        kiln_free(NULL);
    } else {
        CHECK(0, "building: %s", kiln_context_message(ctx));
    }
    kiln_model_free(m);
    /* a training graph's internal op has no ONNX form: the message names node and op */
    m = NULL;
    const int64_t sd[2] = {1, 3};
    kiln_tensor *like = NULL;
    kiln_tensor_create(ctx, KILN_F32, 2, sd, &like);
    if (like && !kiln_model_create(ctx, &m) && !kiln_model_add_input(m, "g", KILN_F32, 2, d) &&
        !kiln_model_add_initializer(m, "like", like)) {
        int in[2] = {kiln_model_get_value(m, "g"), kiln_model_get_value(m, "like")}, out = kiln_model_get_value(m, "s");
        kiln_model_add_node_raw(m, "ReduceSumTo", "sum_to", "kiln", 2, in, 1, &out, 0, NULL);
        kiln_model_add_output(m, "s");
        kiln_status st = kiln_model_finalize(m);
        CHECK(st == KILN_OK, "finalize (ReduceSumTo): %s", kiln_context_message(ctx));
        if (!st) {
            st = kiln_model_save_onnx_buffer(m, &data, &size);
            CHECK(st == KILN_ERR_UNSUPPORTED && strstr(kiln_context_message(ctx), "sum_to") &&
                      strstr(kiln_context_message(ctx), "ReduceSumTo"),
                  "ReduceSumTo: %d %s", st, kiln_context_message(ctx));
            /* a failed save over an earlier one leaves it as it was */
            char file[4200];
            snprintf(file, sizeof file, "%s/export_unfinalized.onnx", tmp);
            CHECK(kiln_model_save_onnx(m, file) == KILN_ERR_UNSUPPORTED, "ReduceSumTo to a file");
            kiln_model *r = NULL;
            CHECK(kiln_model_load_onnx(ctx, file, &r) == KILN_OK && kiln_model_num_nodes(r) == 1 &&
                      !strcmp(r->nodes[0].op_type, "Relu"),
                  "the earlier save is gone: %s", kiln_context_message(ctx));
            kiln_model_free(r);
        }
    }
    kiln_tensor_free(like);
    kiln_model_free(m);
    kiln_context_free(ctx);
}

/* ------------------------------------------------------------- corpus */

static int corpus(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        printf("cannot list %s\n", dir);
        return 1;
    }
    int files = 0, loaded = 0, saved = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!is_file(path)) continue;
        files++;
        kiln_context *ctx = NULL;
        kiln_model *m = NULL, *r = NULL;
        if (kiln_context_create(&ctx)) continue;
        if (!kiln_model_load_onnx(ctx, path, &m)) {
            loaded++;
            void *data = NULL;
            size_t size = 0;
            kiln_status st = kiln_model_save_onnx_buffer(m, &data, &size);
            if (!st) st = kiln_model_load_onnx_buffer(ctx, data, size, NULL, &r);
            if (st) printf("%s: %s\n", path, kiln_context_message(ctx));
            CHECK(st == KILN_OK, "%s: round trip", path);
            if (!st)
                CHECK(kiln_model_num_nodes(r) == kiln_model_num_nodes(m) && kiln_model_num_inputs(r) == kiln_model_num_inputs(m) &&
                          kiln_model_num_outputs(r) == kiln_model_num_outputs(m),
                      "%s: the reloaded graph differs", path);
            saved += !st;
            kiln_free(data);
        }
        kiln_model_free(r);
        kiln_model_free(m);
        kiln_context_free(ctx);
    }
    closedir(d);
    printf("corpus %s: %d files, %d load, %d of them save and reload\n", dir, files, loaded, saved);
    return fails != 0;
}

/* ------------------------------------------------------------- big */

/* A model past protobuf's 2 GiB (one 2.25 GiB initializer): kiln_model_save_onnx writes it
 * with external data, the buffer variant refuses it, and the reload computes the same.
 * Needs about 7 GiB of memory and 2.3 GiB of disk: not run by ctest. */
static int big(const char *tmp) {
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return 1;
    const int64_t n = (int64_t)9 << 26; /* 603979776 floats */
    kiln_tensor *w = NULL, *x = NULL, *a = NULL, *b = NULL;
    kiln_model *m = NULL, *r = NULL;
    char file[4200], data[4300];
    snprintf(file, sizeof file, "%s/export_big.onnx", tmp);
    snprintf(data, sizeof data, "%s.data", file);
    bool ok = !kiln_tensor_create(ctx, KILN_F32, 1, &n, &w) && !kiln_tensor_create(ctx, KILN_F32, 1, &n, &x);
    for (int64_t i = 0; ok && i < n; i += 4096) ((float *)kiln_tensor_data(w))[i] = (float)i;
    ok = ok && !kiln_model_create(ctx, &m) && !kiln_model_add_input(m, "x", KILN_F32, 1, &n) &&
         !kiln_model_add_initializer(m, "w", w) &&
         !kiln_model_add_node(m, "Add", "add", 2, (const char *const[]){"x", "w"}, 1, (const char *const[]){"y"}, NULL) &&
         !kiln_model_add_output(m, "y") && !kiln_model_finalize(m);
    kiln_tensor_free(w);
    CHECK(ok, "big: building: %s", kiln_context_message(ctx));
    if (ok) {
        void *buf = NULL;
        size_t size = 0;
        CHECK(kiln_model_save_onnx_buffer(m, &buf, &size) == KILN_ERR_UNSUPPORTED && !buf &&
                  strstr(kiln_context_message(ctx), "2 GiB"),
              "big: the buffer variant: %s", kiln_context_message(ctx));
        CHECK(kiln_model_save_onnx(m, file) == KILN_OK, "big: save: %s", kiln_context_message(ctx));
        struct stat st;
        CHECK(stat(file, &st) == 0 && st.st_size < 4096, "big: the .onnx holds the weights");
        CHECK(stat(data, &st) == 0 && st.st_size == n * 4, "big: no %s of %lld bytes", data, (long long)(n * 4));
        CHECK(kiln_model_load_onnx(ctx, file, &r) == KILN_OK, "big: reload: %s", kiln_context_message(ctx));
    }
    if (r) {
        char why[256];
        kiln_session_options o = {0};
        kiln_status st = run_copy(m, &o, 1, &x, 1, &a);
        if (!st) st = run_copy(r, &o, 1, &x, 1, &b);
        CHECK(st == KILN_OK, "big: run: %s", kiln_context_message(ctx));
        if (!st) CHECK(same_bits(b, a, why, sizeof why), "big: %s", why);
    }
    remove(file);
    remove(data);
    kiln_tensor_free(a);
    kiln_tensor_free(b);
    kiln_tensor_free(x);
    kiln_model_free(r);
    kiln_model_free(m);
    kiln_context_free(ctx);
    printf("big model (2.25 GiB of weights): %s\n", fails ? "FAILED" : "saved with external data, reloaded, same outputs");
    return fails != 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--big") == 0) return big(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--corpus") == 0) return corpus(argv[2]);
    if (argc != 4) {
        fprintf(stderr, "usage: test_onnx_export SRC_DIR NODE_DIR TMP_DIR | --corpus DIR\n");
        return 2;
    }
    errors(argv[3]);
    kiln_ops(argv[3]);
    models(argv[1], argv[3]);
    node_tests(argv[2]);
    if (fails) printf("%d failures\n", fails);
    else printf("all passed\n");
    return fails != 0;
}
