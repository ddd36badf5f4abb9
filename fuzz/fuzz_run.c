/*
 * fuzz_run.c — libFuzzer target that loads an ONNX model from the bytes AND RUNS it on
 * the CPU backend (one thread), so shape inference, the passes, planning, the arena and
 * every op's reference kernel are fuzzed, not only the importer (fuzz_onnx.c).
 *
 * Inputs: every graph input gets a tensor of its declared dtype and shape; symbolic dims
 * are 1..3, chosen from a hash of the bytes, which also picks the session's options
 * (precision FP32 / FP16 / BF16, constant folding, the graph passes on or off). Values
 * are small and pseudo-random, seeded by the same hash (floats in [-2, 2] with 0, 1 and -1
 * common; integers in [-2, 3]; booleans), so a failing input reproduces exactly.
 *
 * Bounds: a model whose run would be legitimately big is skipped, not run, so libFuzzer's
 * rss / malloc limits and timeouts flag real bugs. Refused are: more than 64K input
 * elements; during any plan walk (kiln_plan_node_hook, before a node is folded or
 * planned): a node output or workspace over 16 MiB, more than 64 MiB of node outputs in
 * all, or more than 1e7 units of work (the op's FLOPs, from kiln_op_def.flops, plus the
 * elements it reads and writes).
 *
 * Contract checks (a trap when broken): a failure leaves a message and is never
 * KILN_ERR_INTERNAL; a successful run gives every output with a valid dtype and shape and
 * readable data (ASan checks every byte); a second run with fresh copies of the same
 * inputs and the same seed succeeds and gives outputs of the same shapes and bytes (a
 * kernel that reads memory it did not write or changes a constant shows up here); a third
 * through kiln_session_run_into, into tensors of the shapes the first run reported,
 * succeeds with the same bytes (unless a node draws random numbers).
 *
 * Build and run (see fuzz/README.md):
 *   CC=clang cmake -S . -B build-fuzz -DKILN_FUZZ=ON -DKILN_CUDA=OFF -DKILN_SANITIZE=ON
 *   cmake --build build-fuzz --target fuzz_run -j2
 *   build-fuzz/fuzz/fuzz_run -dict=fuzz/run.dict -jobs=1 -max_total_time=600 NEW fuzz/corpus_run
 */
#include "core/internal.h"
#include "core/plan.h"
#include "kiln.h"
#include "kiln_tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUT_ELEMS (64 * 1024)
#define MAX_TENSOR_BYTES ((size_t)16 << 20)
#define MAX_TOTAL_BYTES ((double)(64 << 20))
#define MAX_WORK 1e7

static kiln_context *ctx;

/* per plan walk (reset before each call that may walk a plan) */
static double total_bytes, total_work;
static int refused;

/* KILN_FUZZ_STATS=1: at exit, how many inputs loaded, were skipped by the bounds, ran, and
 * failed to run (a cleanly reported error), to see how deep the fuzzing goes. */
static struct {
    long inputs, loaded, skipped, failed, ran;
} stats;

static void print_stats(void) {
    fprintf(stderr, "fuzz_run: %ld inputs, %ld loaded, %ld skipped by the bounds, %ld failed cleanly, %ld ran\n",
            stats.inputs, stats.loaded, stats.skipped, stats.failed, stats.ran);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kiln_status refuse(kiln_op_ctx *c, const char *what, double v) {
    refused = 1;
    return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "fuzz_run bound: %s %.3g", what, v);
}

static kiln_status node_hook(kiln_op_ctx *c) {
    double out_bytes = 0;
    for (int k = 0; k < c->n_out; k++) {
        if (!c->out[k]) continue;
        double b = (double)kiln_tensor_numel(c->out[k]) * (double)kiln_dtype_size(c->out[k]->dtype);
        if (b > (double)MAX_TENSOR_BYTES) return refuse(c, "output bytes", b);
        out_bytes += b;
    }
    total_bytes += out_bytes;
    if (total_bytes > MAX_TOTAL_BYTES) return refuse(c, "total output bytes", total_bytes);
    const kiln_op_def *d = kiln_node_def(c->node);
    if (d && d->cpu_workspace) {
        size_t ws = d->cpu_workspace(c);
        if (ws > MAX_TENSOR_BYTES) return refuse(c, "workspace bytes", (double)ws);
    }
    double flops = 0, bytes = 0;
    kiln_op_cost(c, &flops, &bytes);
    total_work += flops + bytes / 4;
    if (total_work > MAX_WORK) return refuse(c, "work", total_work);
    return KILN_OK;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (kiln_context_create(&ctx) != KILN_OK) abort();
    kiln_context_set_threads(ctx, 1);
    kiln_plan_node_hook = node_hook;
    const char *e = getenv("KILN_FUZZ_STATS");
    if (e && *e && *e != '0') atexit(print_stats);
    return 0;
}

static void check(kiln_status st, const char *where) {
    if (st == KILN_OK || refused) return;
    if (st == KILN_ERR_INTERNAL || !kiln_context_message(ctx)[0]) {
        fprintf(stderr, "broken contract in %s: status %s, message '%s'\n", where, kiln_status_name(st),
                kiln_context_message(ctx));
        __builtin_trap();
    }
}

static void broken(const char *what, int j) {
    fprintf(stderr, "broken contract: output %d: %s\n", j, what);
    __builtin_trap();
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fill(kiln_tensor *t, uint64_t seed) {
    uint64_t s = seed;
    const int64_t n = kiln_tensor_numel(t);
    const bool is_float = kiln_dtype_is_float(t->dtype);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix(&s);
        double v;
        if (t->dtype == KILN_BOOL) v = (double)(r & 1);
        else if (!is_float) v = (double)((int)(r % 6) - 2);
        else if ((r & 7) < 3) v = (double)((int)(r & 7) - 1); /* -1, 0, 1 */
        else v = (double)((r >> 11) & 0xffff) / 16384.0 - 2.0;
        if (!is_float && t->dtype != KILN_BOOL && (t->dtype == KILN_U8 || t->dtype == KILN_U16 ||
                                                   t->dtype == KILN_U32 || t->dtype == KILN_U64) && v < 0)
            v = -v;
        kiln_set_f64(t, i, v);
    }
}

/* Make the inputs; false (and nothing to free beyond what was made) when the model is
 * skipped. */
static bool make_inputs(const kiln_model *m, uint64_t h, kiln_tensor **in) {
    int n = kiln_model_num_inputs(m);
    int64_t total = 0;
    int sym = 0;
    for (int i = 0; i < n; i++) {
        kiln_dtype dt;
        int nd;
        int64_t dims[KILN_MAX_DIMS];
        if (kiln_model_input_info(m, i, &dt, &nd, dims) != KILN_OK) abort();
        if (nd < 0 || nd > KILN_MAX_DIMS || !kiln_dtype_size(dt)) return false;
        int64_t numel = 1;
        for (int d = 0; d < nd; d++) {
            if (dims[d] < 0) dims[d] = 1 + (int64_t)((h >> (2 * (sym++ % 24))) % 3);
            if (dims[d] > MAX_INPUT_ELEMS) return false;
            numel *= dims[d];
            if (numel > MAX_INPUT_ELEMS) return false;
        }
        total += numel;
        if (total > MAX_INPUT_ELEMS) return false;
        if (kiln_tensor_create(ctx, dt, nd, dims, &in[i]) != KILN_OK) abort();
        fill(in[i], h + 0x1000u * (uint64_t)(i + 1));
    }
    return true;
}

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void run_model(kiln_model *m, uint64_t h) {
    const int n_in = kiln_model_num_inputs(m), n_out = kiln_model_num_outputs(m);
    kiln_tensor **in = calloc((size_t)n_in + 1, sizeof *in), **in2 = calloc((size_t)n_in + 1, sizeof *in2);
    const kiln_tensor **out = calloc((size_t)n_out + 1, sizeof *out);
    kiln_tensor **out2 = calloc((size_t)n_out + 1, sizeof *out2);
    void **first = calloc((size_t)n_out + 1, sizeof *first);
    kiln_session *s = NULL;
    if (!in || !in2 || !out || !out2 || !first) abort();
    if (!make_inputs(m, h, in) || !make_inputs(m, h, in2)) {
        stats.skipped++;
        goto done;
    }

    /* The session's options from the hash too: FP32 mostly, FP16 or BF16 plans (the
     * precision pass) a quarter of the time each; constant folding off, or every graph
     * pass off, one time in eight each. */
    static const kiln_precision precs[4] = {KILN_PRECISION_FP32, KILN_PRECISION_FP32, KILN_PRECISION_FP16,
                                            KILN_PRECISION_BF16};
    kiln_session_options o = {.threads = 1,
                              .precision = precs[(h >> 48) & 3],
                              .no_fold = ((h >> 50) & 7) == 0,
                              .disable_passes = ((h >> 53) & 7) == 0 ? ~0u : 0};
    refused = 0;
    total_bytes = total_work = 0;
    kiln_status st = kiln_session_create(m, &o, &s);
    check(st, "kiln_session_create");
    if (st) {
        stats.failed += !refused;
        stats.skipped += refused;
        goto done;
    }
    refused = 0;
    total_bytes = total_work = 0;
    const uint64_t seed = h ^ 0x5eedull;
    st = kiln_session_run_seeded(s, seed, n_in, in, n_out, out);
    check(st, "kiln_session_run");
    if (st) {
        stats.failed += !refused;
        stats.skipped += refused;
        goto done;
    }
    stats.ran++;
    for (int j = 0; j < n_out; j++) {
        const kiln_tensor *t = out[j];
        if (!t) broken("NULL", j);
        if (!kiln_dtype_size(t->dtype)) broken("no dtype", j);
        if (t->ndim < 0 || t->ndim > KILN_MAX_DIMS) broken("bad rank", j);
        for (int d = 0; d < t->ndim; d++)
            if (t->dims[d] < 0) broken("negative dim", j);
        size_t nb = kiln_tensor_nbytes(t);
        if (nb != (size_t)kiln_tensor_numel(t) * kiln_dtype_size(t->dtype)) broken("nbytes", j);
        if (nb && !t->data) broken("no data", j);
        first[j] = malloc(nb + 1);
        if (!first[j]) abort();
        if (nb) memcpy(first[j], t->data, nb); /* ASan: every byte must be readable */
        if (kiln_tensor_create(ctx, t->dtype, t->ndim, t->dims, &out2[j]) != KILN_OK) abort();
    }
    /* the same run again (fresh inputs, same seed): the same bytes */
    st = kiln_session_run_seeded(s, seed, n_in, in2, n_out, out);
    if (st) {
        fprintf(stderr, "second run failed: %s: %s\n", kiln_status_name(st), kiln_context_message(ctx));
        __builtin_trap();
    }
    for (int j = 0; j < n_out; j++) {
        const kiln_tensor *a = out[j], *b = out2[j]; /* b: the shape of the first run's */
        bool same = a && a->dtype == b->dtype && a->ndim == b->ndim;
        for (int d = 0; same && d < a->ndim; d++) same = a->dims[d] == b->dims[d];
        if (!same) broken("dtype or shape changed between two runs", j);
        size_t nb = kiln_tensor_nbytes(a);
        if (nb && memcmp(first[j], out[j]->data, nb) != 0) {
            fprintf(stderr, "output %d ('%s') differs between two runs of the same inputs\n", j,
                    kiln_model_output_name(m, j));
            __builtin_trap();
        }
    }
    /* Once more through kiln_session_run_into, into the caller's tensors of the shapes the
     * first run reported (inputs refilled: a run may compute in place over them). The same
     * bytes, unless a node draws random numbers (that run takes the session's next seed). */
    bool has_random = false;
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_op_def *d = kiln_node_def(&m->nodes[i]);
        has_random = has_random || (d && d->random);
    }
    for (int i = 0; i < n_in; i++) fill(in[i], h + 0x1000u * (uint64_t)(i + 1));
    st = kiln_session_run_into(s, n_in, in, n_out, out2);
    if (st) {
        fprintf(stderr, "run_into failed: %s: %s\n", kiln_status_name(st), kiln_context_message(ctx));
        __builtin_trap();
    }
    for (int j = 0; j < n_out && !has_random; j++) {
        size_t nb = kiln_tensor_nbytes(out2[j]);
        if (nb && memcmp(first[j], kiln_tensor_data(out2[j]), nb) != 0) {
            fprintf(stderr, "output %d ('%s') of kiln_session_run_into differs from kiln_session_run's\n", j,
                    kiln_model_output_name(m, j));
            __builtin_trap();
        }
    }
    kiln_plan_stats ps;
    if (kiln_session_stats(s, &ps) != KILN_OK || ps.nodes < 0) broken("kiln_session_stats", -1);
done:
    kiln_session_free(s);
    for (int i = 0; i < n_in; i++) {
        kiln_tensor_free(in[i]);
        kiln_tensor_free(in2[i]);
    }
    for (int j = 0; j < n_out; j++) {
        kiln_tensor_free(out2[j]);
        free(first[j]);
    }
    free(in);
    free(in2);
    free(out);
    free(out2);
    free(first);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_model *m = NULL;
    refused = 0;
    total_bytes = total_work = 0;
    stats.inputs++;
    kiln_status st = kiln_model_load_onnx_buffer(ctx, data, size, NULL, &m);
    check(st, "kiln_model_load_onnx_buffer");
    if (st == KILN_OK) {
        stats.loaded++;
        run_model(m, hash_bytes(data, size));
        kiln_model_free(m);
    }
    return 0;
}
