/* apply.c — kiln_model_apply_passes (kiln_tools.h): the session's rewrite of a model, as
 * a model of its own. */
#include "passes.h"

kiln_status kiln_model_apply_passes(const kiln_model *m, const kiln_session_options *opts, kiln_model **out) {
    if (!m || !out) return m ? kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_model_apply_passes: NULL argument")
                             : KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!m->finalized)
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT,
                         "kiln_model_apply_passes: the model is not finalized (call kiln_model_finalize first)");
    const kiln_session_options o = opts ? *opts : (kiln_session_options){0};
    /* what kiln_session_create asks of the passes */
    kiln_pass_options po = {.device = o.device, .precision = o.precision, .disabled = o.disable_passes};
    if (!kiln_policy_nhwc(o.device, o.precision, o.strict_fp32, o.disable_passes)) po.disabled |= KILN_PASS_NHWC;
    return kiln_passes_apply(m, &po, out);
}
