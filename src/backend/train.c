/* train.c — what every backend's training engine shares (see backend.h). */
#include "../core/backend.h"

const char *kiln_optimizer_name(kiln_optimizer o) {
    switch (o) {
    case KILN_OPTIM_SGD: return "sgd";
    case KILN_OPTIM_ADAM: return "adam";
    case KILN_OPTIM_ADAMW: return "adamw";
    case KILN_OPTIM_ADADELTA: return "adadelta";
    }
    return "?";
}

int kiln_optimizer_states(const kiln_train_options *o) {
    return o->optimizer == KILN_OPTIM_SGD ? (o->momentum != 0) : 2;
}

double kiln_train_update_bytes(const kiln_train_view *v) {
    const int ns = kiln_optimizer_states(v->opts);
    /* per element: the weight, the gradient and each state read; the weight and the states
     * written; with loss scaling the gradient is read once more (the inf/NaN check) */
    double per = 4.0 * (3 + 2 * ns) + (v->scale_input ? 4.0 : 0.0);
    double bytes = per * (double)v->param_count;
    for (int k = 0; k < v->n_states; k++) bytes += 2.0 * (double)kiln_tensor_nbytes(v->states[k].value);
    return bytes;
}
