/* test_threads.c — kiln.h's threading rules, exercised: 8 threads at once over one shared
 * model and context.
 *   - 5 threads each create their own session over the shared model (concurrently) and run
 *     it, with different CPU thread settings (1, 2 and 0: the context's setting);
 *   - 1 thread creates a trainer over the same model and takes SGD steps, whose losses
 *     must be a single-threaded trainer's;
 *   - 2 threads share one session and run it at the same time through
 *     kiln_session_run_into (outputs written into each thread's own tensors);
 *   - every thread now and then makes a call fail on the shared context with a message only
 *     it would get ("asked for 1<thread> outputs") and checks that it reads its own message.
 * Every output of every run is compared with a single-threaded reference computed first.
 * Two input shapes (batch 2 and 3) alternate, so sessions switch between cached plans.
 *
 * usage: test_threads [iterations per thread] [max CPU threads per session]
 * The ThreadSanitizer build (-DKILN_TSAN=ON, scripts/test.sh) runs it with 1 CPU thread per
 * session: libgomp is not instrumented, so its barriers would read as races. */
#include "kiln.h"
#include "kiln_models.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
#include "check.h"

#define N_THREADS 8
#define N_OWN 5 /* threads 0..4: a session each; thread 5: a trainer; threads 6, 7: one shared session */
#define TRAINER 5
#define STEPS 4
#define N_INPUTS 4
#define CLASSES 10

static kiln_context *ctx;
static kiln_model *model;
static kiln_session *shared;
static kiln_tensor *images[N_INPUTS], *labels[N_INPUTS];
static float *ref_logp[N_INPUTS];
static float ref_loss[N_INPUTS];
static float ref_train[STEPS]; /* losses of STEPS SGD steps over inputs 0, 1, 2, 3, 0... */
static int iters = 24, max_threads = 2;
static pthread_barrier_t start;

typedef struct worker {
    int id;
    int wrong;  /* runs with an output off the reference */
    int errors; /* failed runs, wrong statuses or messages */
    char first[512];
} worker;

static int64_t batch_of(int k) { return k % 2 ? 3 : 2; }

static void note(worker *w, const char *what) {
    if (!w->first[0]) snprintf(w->first, sizeof w->first, "%s", what);
}

/* logprobs and loss against input k's reference; returns 1 when they match */
static int matches(int k, const float *logp, float loss) {
    const int64_t n = batch_of(k) * CLASSES;
    for (int64_t i = 0; i < n; i++) {
        const float r = ref_logp[k][i];
        if (!(fabsf(logp[i] - r) <= 1e-5f * (1 + fabsf(r)))) return 0;
    }
    return fabsf(loss - ref_loss[k]) <= 1e-5f * (1 + fabsf(ref_loss[k]));
}

/* A call that fails with a message naming this thread, and the message read back. */
static void check_own_message(worker *w, kiln_session *s, kiln_tensor *const *in) {
    const kiln_tensor *outs[2];
    const int asked = 10 + w->id;
    kiln_status st = kiln_session_run(s, 2, in, asked, outs);
    char want[64];
    snprintf(want, sizeof want, "asked for %d outputs", asked);
    const char *msg = kiln_context_message(ctx);
    if (st != KILN_ERR_INVALID_ARGUMENT || !strstr(msg, want)) {
        char buf[512];
        snprintf(buf, sizeof buf, "thread %d: wanted an invalid-argument status with '%s', got %s: '%s'", w->id,
                 want, kiln_status_name(st), msg);
        w->errors++;
        note(w, buf);
    }
}

static void *own_session(void *arg) {
    worker *w = arg;
    pthread_barrier_wait(&start);
    kiln_session_options o = {0};
    o.threads = w->id % 3 == 2 ? 0 : 1 + w->id % (max_threads > 1 ? 2 : 1); /* 1, 2, 0, 1, 2, 0 */
    if (max_threads == 1 && o.threads > 1) o.threads = 1;
    kiln_session *s = NULL;
    if (kiln_session_create(model, &o, &s)) {
        w->errors++;
        note(w, "kiln_session_create failed");
        return NULL;
    }
    for (int it = 0; it < iters; it++) {
        const int k = (w->id + it) % N_INPUTS;
        kiln_tensor *in[2] = {images[k], labels[k]};
        const kiln_tensor *outs[2] = {NULL, NULL};
        kiln_status st = kiln_session_run(s, 2, in, 2, outs);
        if (st) {
            char buf[512];
            snprintf(buf, sizeof buf, "thread %d run %d: %s: %s", w->id, it, kiln_status_name(st),
                     kiln_context_message(ctx));
            w->errors++;
            note(w, buf);
            continue;
        }
        if (!matches(k, kiln_tensor_data(outs[0]), *(const float *)kiln_tensor_data(outs[1]))) {
            w->wrong++;
            note(w, "an output differs from the reference");
        }
        if (it % 4 == 3) check_own_message(w, s, in);
    }
    kiln_session_free(s);
    return NULL;
}

/* STEPS SGD steps of a new trainer over the shared model; losses into out. */
static kiln_status train_steps(float *out) {
    kiln_train_options o = {0};
    o.optimizer = KILN_OPTIM_SGD;
    o.lr = 0.05f;
    o.momentum = 0.9f;
    o.threads = 1;
    kiln_trainer *t = NULL;
    kiln_status st = kiln_trainer_create(model, "loss", &o, &t);
    for (int i = 0; i < STEPS && !st; i++) {
        kiln_tensor *in[2] = {images[i % N_INPUTS], labels[i % N_INPUTS]};
        st = kiln_trainer_step(t, 2, in, &out[i]);
    }
    kiln_trainer_free(t);
    return st;
}

static void *trainer_thread(void *arg) {
    worker *w = arg;
    pthread_barrier_wait(&start);
    for (int rep = 0; rep < (iters + 7) / 8; rep++) {
        float loss[STEPS];
        kiln_status st = train_steps(loss);
        if (st) {
            char buf[512];
            snprintf(buf, sizeof buf, "trainer: %s: %s", kiln_status_name(st), kiln_context_message(ctx));
            w->errors++;
            note(w, buf);
            break;
        }
        for (int i = 0; i < STEPS; i++)
            if (!(fabsf(loss[i] - ref_train[i]) <= 1e-5f * (1 + fabsf(ref_train[i])))) {
                w->wrong++;
                note(w, "a training loss differs from the single-threaded trainer's");
                break;
            }
    }
    return NULL;
}

static void *shared_session(void *arg) {
    worker *w = arg;
    kiln_tensor *logp[2] = {NULL, NULL}, *loss = NULL;
    for (int b = 0; b < 2; b++) {
        const int64_t dims[2] = {b ? 3 : 2, CLASSES};
        if (kiln_tensor_create(ctx, KILN_F32, 2, dims, &logp[b])) w->errors++;
    }
    if (kiln_tensor_create(ctx, KILN_F32, 0, NULL, &loss)) w->errors++;
    pthread_barrier_wait(&start);
    for (int it = 0; it < iters && !w->errors; it++) {
        const int k = (w->id + it) % N_INPUTS;
        kiln_tensor *in[2] = {images[k], labels[k]};
        kiln_tensor *outs[2] = {logp[batch_of(k) == 3], loss};
        kiln_status st = kiln_session_run_into(shared, 2, in, 2, outs);
        if (st) {
            char buf[512];
            snprintf(buf, sizeof buf, "thread %d run_into %d: %s: %s", w->id, it, kiln_status_name(st),
                     kiln_context_message(ctx));
            w->errors++;
            note(w, buf);
            continue;
        }
        if (!matches(k, kiln_tensor_data(outs[0]), *(const float *)kiln_tensor_data(loss))) {
            w->wrong++;
            note(w, "an output differs from the reference");
        }
        if (it % 4 == 1) check_own_message(w, shared, in);
    }
    for (int b = 0; b < 2; b++) kiln_tensor_free(logp[b]);
    kiln_tensor_free(loss);
    return NULL;
}

/* run_into's own contract, single-threaded: wrong output shapes and dtypes are refused. */
static void check_run_into_refusals(void) {
    kiln_tensor *in[2] = {images[0], labels[0]};
    kiln_tensor *bad = NULL, *loss = NULL;
    const int64_t dims[2] = {3, CLASSES}; /* input 0 has batch 2 */
    CHECK(!kiln_tensor_create(ctx, KILN_F32, 2, dims, &bad) && !kiln_tensor_create(ctx, KILN_F32, 0, NULL, &loss),
          "tensors");
    kiln_tensor *outs[2] = {bad, loss};
    kiln_status st = kiln_session_run_into(shared, 2, in, 2, outs);
    CHECK(st == KILN_ERR_SHAPE && strstr(kiln_context_message(ctx), "logprobs") &&
              strstr(kiln_context_message(ctx), "f32[2,10]") && strstr(kiln_context_message(ctx), "f32[3,10]"),
          "run_into with a (3,10) tensor for a (2,10) output: %s: %s", kiln_status_name(st),
          kiln_context_message(ctx));
    kiln_tensor *i64 = NULL;
    const int64_t d2[2] = {2, CLASSES};
    CHECK(!kiln_tensor_create(ctx, KILN_I64, 2, d2, &i64), "tensor");
    outs[0] = i64;
    st = kiln_session_run_into(shared, 2, in, 2, outs);
    CHECK(st == KILN_ERR_TYPE && strstr(kiln_context_message(ctx), "logprobs"),
          "run_into with an i64 tensor for an f32 output: %s: %s", kiln_status_name(st), kiln_context_message(ctx));
    kiln_tensor_free(i64);
    kiln_tensor_free(bad);
    kiln_tensor_free(loss);
}

int main(int argc, char **argv) {
    if (argc > 1) iters = atoi(argv[1]);
    if (argc > 2) max_threads = atoi(argv[2]);
    if (iters < 1 || max_threads < 1) {
        fprintf(stderr, "usage: test_threads [iterations >= 1] [max CPU threads >= 1]\n");
        return 2;
    }
    if (kiln_context_create(&ctx) || kiln_model_mnist_net(ctx, -1, 7, 0, &model)) {
        fprintf(stderr, "setup: %s\n", ctx ? kiln_context_message(ctx) : "no context");
        return 1;
    }
    /* the context's setting, taken by the sessions created with threads 0 */
    CHECK(!kiln_context_set_threads(ctx, max_threads), "kiln_context_set_threads");
    srand(11);
    for (int k = 0; k < N_INPUTS; k++) {
        const int64_t b = batch_of(k), idims[4] = {b, 1, 28, 28};
        CHECK(!kiln_tensor_create(ctx, KILN_F32, 4, idims, &images[k]) &&
                  !kiln_tensor_create(ctx, KILN_I64, 1, &b, &labels[k]),
              "inputs");
        float *x = kiln_tensor_data(images[k]);
        for (int64_t i = 0; i < b * 28 * 28; i++) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        int64_t *y = kiln_tensor_data(labels[k]);
        for (int64_t i = 0; i < b; i++) y[i] = rand() % CLASSES;
    }
    /* the reference: one session, one thread, one CPU thread */
    {
        kiln_session_options o = {0};
        o.threads = 1;
        kiln_session *s = NULL;
        CHECK(!kiln_session_create(model, &o, &s), "reference session: %s", kiln_context_message(ctx));
        for (int k = 0; k < N_INPUTS && s; k++) {
            kiln_tensor *in[2] = {images[k], labels[k]};
            const kiln_tensor *outs[2];
            kiln_status st = kiln_session_run(s, 2, in, 2, outs);
            CHECK(!st, "reference run: %s", kiln_context_message(ctx));
            if (st) continue;
            const size_t n = (size_t)batch_of(k) * CLASSES;
            ref_logp[k] = malloc(n * sizeof(float));
            memcpy(ref_logp[k], kiln_tensor_data(outs[0]), n * sizeof(float));
            ref_loss[k] = *(const float *)kiln_tensor_data(outs[1]);
        }
        kiln_session_free(s);
    }
    CHECK(!train_steps(ref_train), "reference trainer: %s", kiln_context_message(ctx));
    if (fails) return 1;
    kiln_session_options so = {0};
    so.threads = max_threads;
    CHECK(!kiln_session_create(model, &so, &shared), "shared session: %s", kiln_context_message(ctx));
    if (fails) return 1;
    check_run_into_refusals();

    worker w[N_THREADS];
    pthread_t th[N_THREADS];
    memset(w, 0, sizeof w);
    pthread_barrier_init(&start, NULL, N_THREADS);
    for (int i = 0; i < N_THREADS; i++) {
        w[i].id = i;
        void *(*fn)(void *) = i < N_OWN ? own_session : i == TRAINER ? trainer_thread : shared_session;
        CHECK(!pthread_create(&th[i], NULL, fn, &w[i]), "pthread_create");
    }
    for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < N_THREADS; i++) {
        printf("thread %d (%s): %d wrong, %d errors%s%s\n", i,
               i < N_OWN ? "own session" : i == TRAINER ? "trainer" : "shared session", w[i].wrong, w[i].errors,
               w[i].first[0] ? ": first: " : "", w[i].first);
        CHECK(!w[i].wrong && !w[i].errors, "thread %d", i);
    }
    kiln_session_free(shared);
    for (int k = 0; k < N_INPUTS; k++) {
        kiln_tensor_free(images[k]);
        kiln_tensor_free(labels[k]);
        free(ref_logp[k]);
    }
    kiln_model_free(model);
    kiln_context_free(ctx);
    printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
    return fails ? 1 : 0;
}
