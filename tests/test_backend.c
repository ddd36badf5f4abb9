/* test_backend.c — the backend interface (src/core/backend.h): every backend this build
 * registers fills its whole table; a device not built in is a clean error; passes ask the
 * backend; a plan runs through the table with its hooks around the run list; the one
 * learning-rate schedule; and the layering rule that core, passes and training code never
 * tell the backends apart by #ifdef (argument: the source tree's root). */
#include "core/backend.h"
#include "core/schedule.h"
#include "passes/passes.h"
#include "train/trainer_internal.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
#include "check.h"

/* Every function a backend must have; plan_time and train->warmup are optional. */
static void check_table(const kiln_backend_i *b) {
    CHECK(b->name && b->name[0], "a backend without a name");
    CHECK(b->create && b->free && b->has_op && b->supports, "%s: instance or op functions missing", b->name);
    CHECK(b->plan_create && b->plan_free && b->plan_host && b->plan_value && b->plan_set_hooks && b->plan_run &&
              b->plan_enqueue && b->plan_profile,
          "%s: plan functions missing", b->name);
    CHECK(b->alloc && b->dealloc && b->upload && b->download && b->sync, "%s: memory functions missing", b->name);
    const kiln_backend_train_i *t = b->train;
    CHECK(t && t->create && t->free && t->upload && t->download && t->step && t->epoch_begin && t->epoch_batch &&
              t->profile,
          "%s: training functions missing", b->name);
    CHECK(kiln_backend_for(b->device) == b, "%s: registered under another device", b->name);
}

static void test_registry(kiln_context *ctx) {
    const kiln_backend_i *cpu = kiln_backend_for(KILN_DEVICE_CPU);
    CHECK(cpu != NULL, "no CPU backend");
    if (cpu) check_table(cpu);
    const kiln_backend_i *cu = kiln_backend_for(KILN_DEVICE_CUDA);
    const kiln_backend_i *got = NULL;
    kiln_status st = kiln_backend_get(ctx, KILN_DEVICE_CUDA, &got);
    if (cu) {
        check_table(cu);
        CHECK(st == KILN_OK && got == cu, "kiln_backend_get(cuda): %d", (int)st);
    } else {
        CHECK(st == KILN_ERR_UNSUPPORTED && !got && strstr(kiln_context_message(ctx), "without the CUDA backend"),
              "CUDA not built in: %d '%s'", (int)st, kiln_context_message(ctx));
    }
    CHECK(kiln_backend_get(ctx, (kiln_device)7, &got) == KILN_ERR_INVALID_ARGUMENT && !got &&
              strstr(kiln_context_message(ctx), "unknown device 7"),
          "unknown device: '%s'", kiln_context_message(ctx));
    /* the passes' question goes to the backend */
    const char *kiln_ops[] = {"FusedConv", "FusedElementwise", "DropoutGrad", "NoSuchOp"};
    for (int d = 0; d < 2; d++) {
        const kiln_backend_i *b = kiln_backend_for(d ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU);
        kiln_pass_options po = {.device = d ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU};
        for (size_t i = 0; i < sizeof kiln_ops / sizeof *kiln_ops; i++) {
            const bool want = b && b->has_op(kiln_op_index_domain("kiln", kiln_ops[i]));
            CHECK(kiln_pass_device_has(&po, kiln_ops[i]) == want, "device %d, kiln.%s: the pass and the backend disagree",
                  d, kiln_ops[i]);
        }
    }
}

static int hook_calls[2];
static kiln_status prologue(void *arg) {
    hook_calls[0] += *(int *)arg;
    return KILN_OK;
}
static kiln_status epilogue(void *arg) {
    /* the run list ran before: its output is there */
    hook_calls[1] += *(int *)arg;
    return KILN_OK;
}
static kiln_status failing(void *arg) {
    (void)arg;
    return KILN_ERR_INTERNAL;
}

/* y = Relu(x) planned, run and hooked through the CPU backend's table. */
static void test_cpu_plan(kiln_context *ctx) {
    const kiln_backend_i *b = kiln_backend_for(KILN_DEVICE_CPU);
    kiln_model *m = NULL;
    const char *x[] = {"x"}, *y[] = {"y"};
    kiln_model_create(ctx, &m);
    kiln_model_add_input(m, "x", KILN_F32, 2, (int64_t[]){2, 3});
    kiln_model_add_node(m, "Relu", "r", 1, x, 1, y, NULL);
    kiln_model_add_output(m, "y");
    CHECK(kiln_model_finalize(m) == KILN_OK, "finalize: %s", kiln_context_message(ctx));
    kiln_tensor *in = kiln_tensor_new(ctx, KILN_F32, 2, (int64_t[]){2, 3});
    for (int i = 0; i < 6; i++) ((float *)in->data)[i] = (float)(i - 3);
    void *be = NULL, *p = NULL;
    kiln_backend_options bo = {0};
    kiln_backend_plan_options po = {.fold = true, .use_graph = true};
    CHECK(b->create(ctx, &bo, &be) == KILN_OK, "create: %s", kiln_context_message(ctx));
    CHECK(b->plan_create(be, m, &in, &po, &p) == KILN_OK && p, "plan: %s", kiln_context_message(ctx));
    if (p) {
        int one = 1;
        b->plan_set_hooks(p, prologue, epilogue, &one);
        const kiln_tensor *out = NULL;
        hook_calls[0] = hook_calls[1] = 0;
        CHECK(b->plan_run(p, &in, 0, 1, &out) == KILN_OK && out, "run: %s", kiln_context_message(ctx));
        CHECK(hook_calls[0] == 1 && hook_calls[1] == 1, "hooks ran %d, %d times", hook_calls[0], hook_calls[1]);
        int bad = 0;
        for (int i = 0; out && i < 6; i++) bad += ((const float *)out->data)[i] != (i > 3 ? (float)(i - 3) : 0.f);
        CHECK(out && bad == 0, "%d wrong outputs", bad);
        const int yv = kiln_model_find_value(m, "y");
        CHECK(out && b->plan_value(p, yv) == out->data, "plan_value is not where the output is");
        CHECK(b->plan_host(p) != NULL, "no host plan");
        CHECK(b->plan_enqueue(p, &in, 0) == KILN_OK && hook_calls[0] == 2 && b->sync(be) == KILN_OK, "enqueue");
        /* a hook's failure is the run's */
        b->plan_set_hooks(p, NULL, failing, &one);
        CHECK(b->plan_run(p, &in, 0, 1, &out) == KILN_ERR_INTERNAL, "a failing epilogue was not reported");
        b->plan_free(p);
    }
    float host[4] = {1, 2, 3, 4}, back[4] = {0};
    void *dev = NULL;
    CHECK(b->alloc(be, sizeof host, &dev) == KILN_OK && b->upload(be, dev, host, sizeof host) == KILN_OK &&
              b->download(be, back, dev, sizeof back) == KILN_OK && memcmp(host, back, sizeof host) == 0,
          "memory round trip");
    b->dealloc(be, dev);
    b->free(be);
    kiln_tensor_free(in);
    kiln_model_free(m);
}

static void test_schedule(void) {
    kiln_train_options o = {.lr = 0.5f, .schedule = KILN_SCHEDULE_STEP, .gamma = 0.1f, .step_size = 10};
    CHECK(kiln_lr_schedule(&o, 9) == 0.5f, "step schedule before the first step: %g", kiln_lr_schedule(&o, 9));
    CHECK(fabsf(kiln_lr_schedule(&o, 25) - 0.005f) < 1e-9f, "step schedule at 25: %g", kiln_lr_schedule(&o, 25));
    o = (kiln_train_options){.lr = 1.0f, .schedule = KILN_SCHEDULE_COSINE, .total_steps = 100};
    CHECK(fabsf(kiln_lr_schedule(&o, 50) - 0.5f) < 1e-6f && kiln_lr_schedule(&o, 100) < 1e-6f &&
              kiln_lr_schedule(&o, 200) == kiln_lr_schedule(&o, 100),
          "cosine: %g %g %g", kiln_lr_schedule(&o, 50), kiln_lr_schedule(&o, 100), kiln_lr_schedule(&o, 200));
    o = (kiln_train_options){.lr = 1.0f, .warmup_steps = 4};
    CHECK(kiln_lr_schedule(&o, 0) == 0.25f && kiln_lr_schedule(&o, 3) == 1.0f && kiln_lr_schedule(&o, 9) == 1.0f,
          "warm-up: %g %g", kiln_lr_schedule(&o, 0), kiln_lr_schedule(&o, 3));
    CHECK(kiln_trainer_lr_at(&o, 1) == kiln_lr_schedule(&o, 1), "the trainer's schedule is not the one schedule");
}

/* No file of dir (recursively) names the CUDA build flag or includes the CUDA backend. */
static void scan(const char *root, const char *dir) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", root, dir);
    DIR *d = opendir(path);
    CHECK(d != NULL, "cannot open %s", path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sub[768];
        if (snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name) >= (int)sizeof sub) continue;
        snprintf(path, sizeof path, "%s/%s", root, sub);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        char line[4096];
        int n = 0;
        bool is_dir = false;
        while (fgets(line, sizeof line, f)) {
            n++;
            CHECK(!strstr(line, "KILN_HAVE_CUDA"), "%s:%d tells the backends apart by #ifdef (ask the backend interface)",
                  sub, n);
            CHECK(!(strstr(line, "#include") && strstr(line, "cuda/")), "%s:%d includes the CUDA backend", sub, n);
        }
        is_dir = ferror(f) != 0; /* reading a directory fails */
        fclose(f);
        if (is_dir) scan(root, sub);
    }
    closedir(d);
}

int main(int argc, char **argv) {
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return 1;
    test_registry(ctx);
    test_cpu_plan(ctx);
    test_schedule();
    if (argc > 1) {
        scan(argv[1], "src/core");
        scan(argv[1], "src/passes");
        scan(argv[1], "src/train");
    }
    kiln_context_free(ctx);
    if (fails) {
        printf("%d check(s) failed\n", fails);
        return 1;
    }
    printf("backend: all checks passed\n");
    return 0;
}
