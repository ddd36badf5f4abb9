/* loss_scale_update.c — kiln.LossScaleUpdate: PyTorch GradScaler.update, the dynamic loss
 * scale of fp16 training, after a step:
 *
 *   inputs   0  loss_scale      f32 scalar
 *            1  found_inf       f32 scalar (kiln.NonFiniteCheck): non-zero, the step was
 *                               skipped
 *            2  growth_tracker  i64 scalar: clean steps since the scale last changed
 *            3  skipped         i64 scalar: steps skipped so far
 *   outputs  0  loss_scale'  1  growth_tracker'  2  skipped'
 *   attributes  dynamic (1: the scale moves; 0: it stays, as bf16 training's 1),
 *            growth_factor (2.0), backoff_factor (0.5), growth_interval (2000)
 *
 * found: skipped + 1 and, when dynamic, the scale times backoff_factor and the tracker 0;
 * otherwise, when dynamic, the tracker + 1, and at growth_interval the scale times
 * growth_factor (unless that is inf) and the tracker 0. The arithmetic is optim_math.h's,
 * shared with the CUDA kernel. Outputs may share their inputs' storage. */
#include "../core/optest.h"
#include "optim_math.h"

typedef struct scaler {
    bool dynamic;
    float growth, backoff;
    int64_t interval;
} scaler;

static kiln_status read_scaler(kiln_op_ctx *c, scaler *s) {
    s->dynamic = kiln_attr_int(c->node, "dynamic", 1) != 0;
    s->growth = kiln_attr_float(c->node, "growth_factor", 2.0f);
    s->backoff = kiln_attr_float(c->node, "backoff_factor", 0.5f);
    s->interval = kiln_attr_int(c->node, "growth_interval", 2000);
    KILN_OP_CHECK(c, s->growth > 1.f && s->backoff > 0.f && s->backoff < 1.f && s->interval >= 1,
                  KILN_ERR_INVALID_ARGUMENT, "growth_factor %g, backoff_factor %g, growth_interval %lld (want > 1, in (0, 1), >= 1)",
                  s->growth, s->backoff, (long long)s->interval);
    return KILN_OK;
}

int kiln_loss_scale_update_config(struct kiln_op_ctx *c, bool *dynamic, float *growth, float *backoff,
                                  int64_t *interval) {
    scaler s;
    kiln_status st = read_scaler(c, &s);
    if (st) return st;
    *dynamic = s.dynamic;
    *growth = s.growth;
    *backoff = s.backoff;
    *interval = s.interval;
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    scaler s;
    kiln_status st = read_scaler(c, &s);
    if (st) return st;
    static const kiln_dtype want[4] = {KILN_F32, KILN_F32, KILN_I64, KILN_I64};
    static const char *names[4] = {"loss_scale", "found_inf", "growth_tracker", "skipped"};
    for (int i = 0; i < 4; i++)
        KILN_OP_CHECK(c, c->in[i] && c->in[i]->dtype == want[i] && kiln_tensor_numel(c->in[i]) == 1, KILN_ERR_TYPE,
                      "%s must be a %s scalar", names[i], kiln_dtype_name(want[i]));
    for (int k = 0; k < 3; k++) {
        const kiln_tensor *src = c->in[k == 0 ? 0 : k + 1];
        kiln_tensor_set_shape(c->out[k], src->dtype, src->ndim, src->dims);
    }
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    scaler s;
    kiln_status st = read_scaler(c, &s);
    if (st) return st;
    float scale = ((const float *)c->in[0]->data)[0];
    const bool found = ((const float *)c->in[1]->data)[0] != 0.f;
    int64_t tracker = ((const int64_t *)c->in[2]->data)[0], skipped = ((const int64_t *)c->in[3]->data)[0];
    kiln_om_scaler_update(found, s.dynamic, s.growth, s.backoff, s.interval, &scale, &tracker, &skipped);
    ((float *)c->out[0]->data)[0] = scale;
    ((int64_t *)c->out[1]->data)[0] = tracker;
    ((int64_t *)c->out[2]->data)[0] = skipped;
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int one(const char *attrs, double scale, double found, double tracker, double skipped, double w_scale,
               double w_tracker, double w_skipped, const char *label) {
    kiln_tensor *in[4] = {kt_scalar(KILN_F32, scale), kt_scalar(KILN_F32, found), kt_scalar(KILN_I64, tracker),
                          kt_scalar(KILN_I64, skipped)};
    kiln_tensor *want[3] = {kt_scalar(KILN_F32, w_scale), kt_scalar(KILN_I64, w_tracker), kt_scalar(KILN_I64, w_skipped)};
    return kiln_optest("LossScaleUpdate", attrs, 4, in, 3, want, 0, 0, label);
}

static int test(void) {
    int fails = 0;
    /* GradScaler(init_scale=65536, growth_factor=2, backoff_factor=0.5, growth_interval=2000) */
    fails += one("", 65536, 1, 1500, 3, 32768, 0, 4, "inf: backoff, tracker reset");
    fails += one("", 65536, 0, 17, 3, 65536, 18, 3, "clean step counted");
    fails += one("", 65536, 0, 1999, 0, 131072, 0, 0, "2000th clean step: growth");
    fails += one("growth_interval=3;growth_factor=4.0;backoff_factor=0.25", 8, 0, 2, 0, 32, 0, 0, "interval 3, x4");
    fails += one("growth_interval=3;growth_factor=4.0;backoff_factor=0.25", 8, 1, 2, 0, 2, 0, 1, "backoff 0.25");
    fails += one("growth_interval=1", 3e38, 0, 0, 0, 3e38, 0, 0, "growth to inf: the scale stays");
    fails += one("dynamic=0", 1, 1, 0, 5, 1, 0, 6, "fixed scale: only the skip is counted");
    fails += one("dynamic=0", 1, 0, 0, 5, 1, 0, 5, "fixed scale, clean step");
    fails += kiln_optest_fails("LossScaleUpdate", "backoff_factor=1.5", 4,
                               (kiln_tensor *[]){kt_scalar(KILN_F32, 1), kt_scalar(KILN_F32, 0), kt_scalar(KILN_I64, 0),
                                                 kt_scalar(KILN_I64, 0)},
                               3, KILN_ERR_INVALID_ARGUMENT, "backoff out of range");
    fails += kiln_optest_fails("LossScaleUpdate", "", 4,
                               (kiln_tensor *[]){kt_scalar(KILN_F32, 1), kt_scalar(KILN_F32, 0), kt_scalar(KILN_F32, 0),
                                                 kt_scalar(KILN_I64, 0)},
                               3, KILN_ERR_TYPE, "an f32 growth tracker");
    return fails;
}
#endif /* KILN_OPTESTS */

/* loss_scale' over loss_scale, growth_tracker' and skipped' over theirs */
static int inplace_input(const kiln_node *n, int out) {
    (void)n;
    return out == 0 ? 0 : out == 1 ? 2 : out == 2 ? 3 : -1;
}

const kiln_op_def kiln_op_loss_scale_update = {
    .precision = KILN_PREC_FP32, /* f32 parameters, states and counters; low-precision gradients are cast up */
    .name = "LossScaleUpdate", .domain = "kiln", .min_inputs = 4, .max_inputs = 4, .min_outputs = 3,
    .max_outputs = 3, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .inplace_input = inplace_input,
};
