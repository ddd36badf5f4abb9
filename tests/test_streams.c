/* test_streams.c — plans over side streams (kiln_plan_build_ex), on the CPU.
 *
 * For mnist-net's training graph as the CUDA trainer lowers it (fused, NHWC; f32 and fp16)
 * and its inference graph:
 *   - the nodes off the longest path go to side streams: weight and bias gradients, and
 *     none of the chain from the input through the loss's gradient back to conv2's input
 *     gradient; the inference graph, a chain, stays on the main stream;
 *   - no two nodes that may run at once touch the same arena bytes where one of them
 *     writes. "May run at once" is worked out here from the streams and the waits alone
 *     (a transitive closure over stream order and waits), not from the planner's own
 *     bookkeeping; the same check run with the waits ignored must find races, so it can
 *     fail;
 *   - the plan computes the same outputs, bit for bit, as the one-stream plan when its run
 *     list runs on the CPU (same order, another memory layout).
 * And a view off the longest path (a Flatten of a value that a chain of products later adds
 * to, as kiln.FusedGemm reads a transformer's residual) stays on the stream that computed
 * the value it views, while a real branch beside the chain (a Relu) goes aside.
 * Exits non-zero on any failure. */
#include "check.h"
#include "core/optest.h"
#include "core/plan.h"
#include "passes/passes.h"
#include "train/trainer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
static kiln_context *ctx;

#include "train_graph.h"

/* before[a * n + b]: node a finishes before node b starts (a != b). */
static bool *happens_before(const kiln_plan_view_t *v, bool use_waits) {
    const int n = v->n_exec;
    bool *hb = calloc((size_t)n * (size_t)n + 1, 1);
    if (!hb) return NULL;
    for (int b = 0; b < n; b++) {
        /* direct edges: the previous node of b's stream, and the nodes b waits for */
        for (int a = b - 1; a >= 0; a--)
            if (v->stream[a] == v->stream[b]) {
                hb[(size_t)a * n + b] = true;
                break;
            }
        for (int w = v->wait_at[b]; use_waits && w < v->wait_at[b + 1]; w++) hb[(size_t)v->waits[w] * n + b] = true;
        /* transitively: whatever precedes a direct predecessor (all earlier in the list) */
        for (int a = b - 1; a >= 0; a--)
            if (hb[(size_t)a * n + b])
                for (int c = 0; c < a; c++)
                    if (hb[(size_t)c * n + a]) hb[(size_t)c * n + b] = true;
    }
    return hb;
}

static bool overlaps(const kiln_plan_view_t *v, int x, int y) {
    if (v->offset[x] == SIZE_MAX || v->offset[y] == SIZE_MAX) return false;
    const size_t xa = v->offset[x], xb = xa + kiln_tensor_nbytes(&v->vt[x]);
    const size_t ya = v->offset[y], yb = ya + kiln_tensor_nbytes(&v->vt[y]);
    return xa < xb && ya < yb && xa < yb && ya < xb;
}

/* Races: a pair of nodes neither of which precedes the other, one writing bytes the other
 * reads or writes. */
static int count_races(const kiln_plan_view_t *v, const bool *hb, const char *label, bool report) {
    const int n = v->n_exec;
    int races = 0;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            if (hb[(size_t)a * n + b] || hb[(size_t)b * n + a]) continue;
            const kiln_node *na = kiln_plan_exec_op_ctx(v, a)->node, *nb = kiln_plan_exec_op_ctx(v, b)->node;
            for (int pass = 0; pass < 2; pass++) {
                const kiln_node *w = pass ? nb : na, *o = pass ? na : nb;
                for (int i = 0; i < w->n_out; i++)
                    for (int j = 0; j < o->n_in + o->n_out; j++) {
                        const int x = w->out[i], y = j < o->n_in ? o->in[j] : o->out[j - o->n_in];
                        if (y < 0 || !overlaps(v, x, y)) continue;
                        if (report && races < 5)
                            printf("  race in %s: %s writes %s, %s touches %s at once\n", label, w->name,
                                   v->m->values[x].name, o->name, v->m->values[y].name);
                        races++;
                    }
            }
        }
    return races;
}

static int side_count(const kiln_plan_view_t *v, const char *op) {
    int k = 0;
    for (int e = 0; e < v->n_exec; e++)
        if (v->stream[e] && strcmp(kiln_plan_exec_op_ctx(v, e)->node->op_type, op) == 0) k++;
    return k;
}

static bool on_main(const kiln_plan_view_t *v, const char *op) {
    for (int e = 0; e < v->n_exec; e++)
        if (strcmp(kiln_plan_exec_op_ctx(v, e)->node->op_type, op) == 0 && v->stream[e] == 0) return true;
    return false;
}

/* kiln_plan_measure_device's workspace callback for the test: ConvGradWeight nodes ask
 * 1000 bytes per input, the rest nothing; with fail set, the first node asked fails. */
typedef struct fake_ws {
    int calls;
    bool fail;
} fake_ws;

static kiln_status fake_workspace(void *user, kiln_op_ctx *c, size_t *bytes) {
    fake_ws *f = user;
    f->calls++;
    *bytes = strcmp(c->node->op_type, "ConvGradWeight") == 0 ? 1000 * (size_t)c->node->n_in : 0;
    if (f->fail && f->calls == 1)
        return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "%s: no kernel here (test)", c->node->name);
    return KILN_OK;
}

/* A device plan's measure with its backend's workspace: the arena as kiln_plan_measure
 * gives it, one workspace per stream of the largest scratch a node asks (rounded up to
 * 256), and a failing node's status passed on. */
static void check_measure_device(const char *label, kiln_model *g, kiln_tensor *const *feeds, int side, int n_exec,
                                 bool training) {
    size_t arena = 0, ws = 1, arena_dev = 0, ws_dev = 0;
    fake_ws f = {0};
    kiln_status st = kiln_plan_measure(g, feeds, false, side, &arena, &ws);
    if (!st) st = kiln_plan_measure_device(g, feeds, side, fake_workspace, &f, &arena_dev, &ws_dev);
    CHECK(!st, "%s: device measure: %s", label, kiln_context_message(ctx));
    if (st) return;
    /* mnist-net's ConvGradWeight has 3 inputs (X, dY, W): 3000 bytes, 3072 rounded */
    const size_t want = training ? 3072 * (size_t)(side + 1) : 0;
    printf("  device measure: arena %zu (measure: %zu), workspace %zu over %d streams (want %zu), %d nodes asked\n",
           arena_dev, arena, ws_dev, side + 1, want, f.calls);
    CHECK(arena_dev == arena, "%s: device measure's arena %zu, measure's %zu", label, arena_dev, arena);
    CHECK(ws == 0, "%s: a device plan's measure without its backend has workspace %zu", label, ws);
    CHECK(ws_dev == want, "%s: workspace %zu, want %zu", label, ws_dev, want);
    CHECK(f.calls == n_exec, "%s: %d nodes asked for their workspace, the plan runs %d", label, f.calls, n_exec);
    fake_ws bad = {.fail = true};
    st = kiln_plan_measure_device(g, feeds, side, fake_workspace, &bad, &arena_dev, &ws_dev);
    CHECK(st == KILN_ERR_UNSUPPORTED && strstr(kiln_context_message(ctx), "no kernel here"),
          "%s: a failing workspace query gives status %d (%s)", label, (int)st, kiln_context_message(ctx));
}

/* Plans of g with 0 and `side` side streams: the checks above. training: expect weight
 * gradients off the main stream and the convolutions' input gradient on it; else (a
 * chain) every node on the main stream. */
static void check(const char *label, kiln_model *g, kiln_tensor *const *feeds, int side, bool training) {
    printf("-- %s, %d side streams\n", label, side);
    kiln_plan *one = NULL, *many = NULL;
    kiln_status st = kiln_plan_build_ex(g, feeds, true, true, 0, &one);
    if (!st) st = kiln_plan_build_ex(g, feeds, true, true, side, &many);
    CHECK(!st, "%s: plans: %s", label, kiln_context_message(ctx));
    if (st) goto out;
    kiln_plan_view_t v;
    kiln_plan_view(many, &v);
    CHECK(v.n_streams == side + 1 && v.stream, "%s: %d streams", label, v.n_streams);
    int n_side = 0;
    for (int e = 0; e < v.n_exec; e++) {
        n_side += v.stream[e] != 0;
        CHECK(v.stream[e] >= 0 && v.stream[e] <= side, "%s: node %d on stream %d", label, e, v.stream[e]);
        for (int w = v.wait_at[e]; w < v.wait_at[e + 1]; w++)
            CHECK(v.waits[w] < e && v.stream[v.waits[w]] != v.stream[e], "%s: node %d waits for %d", label, e,
                  v.waits[w]);
    }
    kiln_plan_view_t v1;
    kiln_plan_view(one, &v1);
    printf("  %d of %d nodes on side streams, arena %zu bytes (one stream: %zu):", n_side, v.n_exec, v.arena_bytes,
           v1.arena_bytes);
    for (int e = 0; e < v.n_exec; e++)
        if (v.stream[e]) printf(" %s@%d", kiln_plan_exec_op_ctx(&v, e)->node->name, v.stream[e]);
    printf("\n");
    CHECK(training ? n_side > 0 : n_side == 0, "%s: %d nodes on side streams", label, n_side);
    if (training) {
        CHECK(side_count(&v, "ConvGradWeight") >= 1, "%s: no weight gradient on a side stream", label);
        CHECK(side_count(&v, "ConvGradBias") >= 1, "%s: no bias gradient on a side stream", label);
        CHECK(on_main(&v, "ConvGradInput") && side_count(&v, "ConvGradInput") == 0, "%s: ConvGradInput off main",
              label);
        /* fused where the device has the fused ops' kernels (a CUDA build), else as
         * autograd emitted it */
        CHECK((on_main(&v, "LogSoftmaxNLLGrad") || on_main(&v, "LogSoftmaxGrad")) &&
                  side_count(&v, "LogSoftmaxNLLGrad") + side_count(&v, "LogSoftmaxGrad") == 0,
              "%s: the loss's gradient off the main stream", label);
    }
    bool *hb = happens_before(&v, true), *loose = happens_before(&v, false);
    CHECK(hb && loose, "out of memory");
    if (hb && loose) {
        const int races = count_races(&v, hb, label, true);
        CHECK(races == 0, "%s: %d races", label, races);
        const int unsafe = count_races(&v, loose, label, false);
        printf("  %d races with the waits left out (the check must find some)\n", unsafe);
        CHECK(unsafe > 0 || !n_side, "%s: the race check finds nothing without the waits", label);
    }
    free(hb);
    free(loose);
    check_measure_device(label, g, feeds, side, v.n_exec, training);
    /* the same function on the CPU, bit for bit */
    const int no = g->n_outputs;
    const kiln_tensor **want = calloc((size_t)no, sizeof *want), **got = calloc((size_t)no, sizeof *got);
    st = want && got ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = kiln_plan_run_cpu(one, feeds, 5, no, want);
    if (!st) st = kiln_plan_run_cpu(many, feeds, 5, no, got);
    CHECK(!st, "%s: CPU runs: %s", label, kiln_context_message(ctx));
    for (int j = 0; !st && j < no; j++) {
        char l[200];
        snprintf(l, sizeof l, "%s: %s unchanged", label, kiln_model_output_name(g, j));
        fails += kiln_tensor_compare(got[j], want[j], 0, 0, l);
    }
    free(want);
    free(got);
out:
    kiln_plan_free(one);
    kiln_plan_free(many);
}

/* mnist-net's training graph lowered as the CUDA trainer lowers it. */
static void mnist(kiln_precision prec, bool training) {
    kiln_model *m = NULL, *opt = NULL, *bg = NULL;
    kiln_trainer *t = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_ADADELTA};
    const char *label = training ? (prec == KILN_PRECISION_FP32 ? "mnist-net training graph, f32"
                                                                : "mnist-net training graph, fp16")
                                 : "mnist-net inference";
    kiln_tensor *image = kt_rand(KILN_F32, 4, (int64_t[]){16, 1, 28, 28}, 0, 1, 11);
    kiln_tensor *lab = kt_rand(KILN_I64, 1, (int64_t[]){16}, 0, 10, 12);
    if (kiln_model_mnist_net(ctx, 16, 1, 1, &m) || (training && kiln_trainer_create(m, "loss", &o, &t))) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    kiln_pass_options po = {.device = KILN_DEVICE_CUDA,
                            .precision = prec,
                            .disabled = ~(unsigned)(KILN_PASS_NHWC | KILN_PASS_FUSE_CONV | KILN_PASS_FUSE_LOSS)};
    if (training && !(bg = backward_graph(t))) {
        CHECK(0, "%s: the trainer's forward + backward graph: %s", label, kiln_context_message(ctx));
        goto out;
    }
    if (kiln_passes_apply(training ? bg : m, &po, &opt)) {
        CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
        goto out;
    }
    kiln_tensor *own[2] = {image, lab};
    kiln_tensor **feeds = own;
    if (training) { /* the trainer's feeds: the batch, then the weights and state it binds */
        t->feeds[0] = image;
        t->feeds[1] = lab;
        feeds = t->feeds;
    }
    check(label, opt, feeds, 2, training);
    if (training) check(label, opt, feeds, 1, training);
    if (training) t->feeds[0] = t->feeds[1] = NULL;
out:
    kiln_model_free(opt);
    kiln_model_free(bg);
    kiln_trainer_free(t);
    kiln_model_free(m);
    kiln_tensor_free(image);
    kiln_tensor_free(lab);
}

/* x (4, 64) -> MatMul w0 -> h; h -> MatMul w1 -> Relu -> MatMul w2 -> c (the long path);
 * Flatten(h) (a view) and Sigmoid(h) (a kernel) off it; y = c + Flatten(h) + Sigmoid(h). */
static void view_off_path(void) {
    const char *label = "a view off the longest path";
    kiln_model *m = NULL;
    kiln_plan *p = NULL;
    kiln_tensor *x = kt_rand(KILN_F32, 2, KT_DIMS(4, 64), -1, 1, 21);
    CHECK(kiln_model_create(ctx, &m) == KILN_OK && x, "create");
    if (!m || !x) goto out;
    kiln_model_add_input(m, "x", KILN_F32, 2, KT_DIMS(-1, 64));
    for (int k = 0; k < 3; k++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", k);
        kiln_tensor *w = kt_rand(KILN_F32, 2, KT_DIMS(64, 64), -0.2, 0.2, 22 + (uint64_t)k);
        kiln_model_add_initializer(m, name, w);
        kiln_tensor_free(w);
    }
    static const struct {
        const char *op, *in[2], *out;
    } nodes[] = {{"MatMul", {"x", "w0"}, "h"},   {"MatMul", {"h", "w1"}, "a"},  {"Relu", {"a", NULL}, "r"},
                 {"MatMul", {"r", "w2"}, "c"},   {"Flatten", {"h", NULL}, "f"}, {"Sigmoid", {"h", NULL}, "g"},
                 {"Add", {"c", "f"}, "s"},       {"Add", {"s", "g"}, "y"}};
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++)
        CHECK(kiln_model_add_node(m, nodes[i].op, nodes[i].out, nodes[i].in[1] ? 2 : 1, nodes[i].in, 1, &nodes[i].out,
                                  NULL) == KILN_OK,
              "%s: node %s", label, nodes[i].out);
    kiln_model_add_output(m, "y");
    if (kiln_model_finalize(m) || kiln_plan_build_ex(m, &x, true, true, 2, &p)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    kiln_plan_view_t v;
    kiln_plan_view(p, &v);
    int flat = -1, sig = -1, h = -1;
    for (int e = 0; e < v.n_exec; e++) {
        const char *name = kiln_plan_exec_op_ctx(&v, e)->node->name;
        if (!strcmp(name, "f")) flat = e;
        if (!strcmp(name, "g")) sig = e;
        if (!strcmp(name, "h")) h = e;
    }
    CHECK(flat >= 0 && sig >= 0 && h >= 0, "%s: nodes not found", label);
    if (flat < 0 || sig < 0 || h < 0) goto out;
    printf("-- %s: h on stream %d, Flatten %d, Sigmoid %d\n", label, v.stream[h], v.stream[flat], v.stream[sig]);
    CHECK(v.stream[flat] == v.stream[h], "%s: the Flatten on stream %d, h on %d", label, v.stream[flat], v.stream[h]);
    CHECK(v.stream[sig] != 0, "%s: the Sigmoid beside the chain stayed on the main stream", label);
out:
    kiln_plan_free(p);
    kiln_model_free(m);
    kiln_tensor_free(x);
}

int main(void) {
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    view_off_path();
    mnist(KILN_PRECISION_FP32, true);
    mnist(KILN_PRECISION_FP16, true);
    mnist(KILN_PRECISION_FP32, false);
    /* bad input: a clear error, no plan */
    kiln_model *m = NULL;
    kiln_plan *p = NULL;
    kiln_tensor *image = kt_rand(KILN_F32, 4, (int64_t[]){2, 1, 28, 28}, 0, 1, 3);
    if (!kiln_model_mnist_net(ctx, 2, 1, 0, &m)) {
        kiln_status st = kiln_plan_build_ex(m, &image, true, true, KILN_PLAN_MAX_SIDE_STREAMS + 1, &p);
        CHECK(st == KILN_ERR_INVALID_ARGUMENT && !p && strstr(kiln_context_message(ctx), "side streams"),
              "too many side streams: status %d, '%s'", (int)st, kiln_context_message(ctx));
    }
    kiln_plan_free(p);
    kiln_model_free(m);
    kiln_tensor_free(image);
    kiln_context_free(ctx);
    if (fails) {
        printf("%d FAILED\n", fails);
        return 1;
    }
    printf("all passed\n");
    return 0;
}
