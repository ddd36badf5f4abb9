/* backend.c — the CPU backend behind the backend interface (src/core/backend.h): plans are
 * the host plans of src/core/plan.c run by the ops' reference kernels, memory is the host's,
 * copies are memcpy and nothing is asynchronous. */
#include "../core/backend.h"
#include "../core/plan.h"

#include <stdlib.h>
#include <string.h>

extern const kiln_backend_train_i kiln_cpu_train_i; /* train.c */

typedef struct cpu_plan {
    kiln_plan *p;
    kiln_backend_hook prologue, epilogue;
    void *arg;
} cpu_plan;

static kiln_status cpu_create(kiln_context *ctx, const kiln_backend_options *o, void **out) {
    (void)ctx;
    (void)o;
    *out = NULL; /* no state: everything lives in the plans */
    return KILN_OK;
}

static void cpu_free(void *be) { (void)be; }

static bool cpu_has_op(int op) {
    (void)op;
    return true; /* every op has its CPU reference */
}

static kiln_status cpu_supports(kiln_op_ctx *c) {
    (void)c;
    return KILN_OK;
}

static kiln_status cpu_plan_create(void *be, kiln_model *m, kiln_tensor *const *inputs,
                                   const kiln_backend_plan_options *o, void **out) {
    (void)be;
    cpu_plan *cp = kiln_calloc(m->ctx, 1, sizeof *cp, "a plan");
    if (!cp) return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = kiln_plan_build(m, inputs, o->fold, true, &cp->p);
    if (st) {
        free(cp);
        return st;
    }
    *out = cp;
    return KILN_OK;
}

static void cpu_plan_free(void *plan) {
    cpu_plan *cp = plan;
    if (!cp) return;
    kiln_plan_free(cp->p);
    free(cp);
}

static kiln_plan *cpu_plan_host(void *plan) { return ((cpu_plan *)plan)->p; }

static void *cpu_plan_value(void *plan, int v) {
    kiln_plan_view_t view;
    kiln_plan_view(((cpu_plan *)plan)->p, &view);
    return v >= 0 && v < view.n_values ? view.vt[v].data : NULL;
}

static void cpu_plan_set_hooks(void *plan, kiln_backend_hook prologue, kiln_backend_hook epilogue, void *arg) {
    cpu_plan *cp = plan;
    cp->prologue = prologue;
    cp->epilogue = epilogue;
    cp->arg = arg;
}

static kiln_status cpu_plan_run(void *plan, kiln_tensor *const *inputs, uint64_t seed, int n_outputs,
                                const kiln_tensor **outputs) {
    cpu_plan *cp = plan;
    kiln_status st = cp->prologue ? cp->prologue(cp->arg) : KILN_OK;
    if (!st) st = kiln_plan_run_cpu(cp->p, inputs, seed, n_outputs, outputs);
    if (!st && cp->epilogue) st = cp->epilogue(cp->arg);
    return st;
}

static kiln_status cpu_plan_enqueue(void *plan, kiln_tensor *const *inputs, uint64_t seed) {
    return cpu_plan_run(plan, inputs, seed, 0, NULL);
}

static kiln_status cpu_plan_profile(void *plan, kiln_tensor *const *inputs, uint64_t seed, int iters, double *ms,
                                    double *start_ms, double *pro_ms, double *epi_ms) {
    if (pro_ms) memset(pro_ms, 0, sizeof *pro_ms * (size_t)iters);
    if (epi_ms) memset(epi_ms, 0, sizeof *epi_ms * (size_t)iters);
    return kiln_plan_profile_cpu(((cpu_plan *)plan)->p, inputs, seed, iters, ms, start_ms);
}

static kiln_status cpu_alloc(void *be, size_t bytes, void **out) {
    (void)be;
    *out = malloc(bytes ? bytes : 1);
    return *out ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
}

static void cpu_dealloc(void *be, void *p) {
    (void)be;
    free(p);
}

static kiln_status cpu_copy(void *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memcpy(dst, src, bytes);
    return KILN_OK;
}

static kiln_status cpu_sync(void *be) {
    (void)be;
    return KILN_OK;
}

const kiln_backend_i kiln_cpu_backend_i = {
    .name = "cpu",
    .device = KILN_DEVICE_CPU,
    .create = cpu_create,
    .free = cpu_free,
    .has_op = cpu_has_op,
    .supports = cpu_supports,
    .plan_create = cpu_plan_create,
    .plan_free = cpu_plan_free,
    .plan_host = cpu_plan_host,
    .plan_value = cpu_plan_value,
    .plan_set_hooks = cpu_plan_set_hooks,
    .plan_run = cpu_plan_run,
    .plan_enqueue = cpu_plan_enqueue,
    .plan_time = NULL,
    .plan_profile = cpu_plan_profile,
    .alloc = cpu_alloc,
    .dealloc = cpu_dealloc,
    .upload = cpu_copy,
    .download = cpu_copy,
    .sync = cpu_sync,
    .train = &kiln_cpu_train_i,
    .train_session_passes = true,
};
