/* kiln_gradients.c — one batch's loss and parameter gradients of a classifier, for
 * comparison with PyTorch (tests/python/grad_vs_torch.py):
 *
 *   kiln_gradients MODEL.onnx X.npy LABELS.npy OUT_DIR [--device cpu|cuda] [--label-smoothing E]
 *                  [--step-lr LR]
 *
 * The ONNX model's output 0 is the logits; kiln appends the cross-entropy
 * (kiln_model_add_classifier_loss) and computes what one training step computes
 * (kiln_model_gradients: BatchNormalization in training mode). Writes OUT_DIR/<param>.npy
 * for every trained parameter (its initializer name) and OUT_DIR/loss.txt. With --step-lr,
 * also OUT_DIR/step_loss.txt: the batch's loss after one step of SGD (learning rate LR, no
 * momentum or weight decay) on it, by kiln_trainer_step. */
#include "kiln_models.h"
#include "kiln_tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: kiln_gradients MODEL.onnx X.npy LABELS.npy OUT_DIR [--device cpu|cuda] [--label-smoothing E]\n");
        return 2;
    }
    kiln_train_options o = KILN_TRAIN_OPTIONS_INIT;
    float eps = 0, step_lr = 0;
    for (int i = 5; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--device") == 0) o.device = strcmp(argv[i + 1], "cuda") == 0 ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU;
        else if (strcmp(argv[i], "--label-smoothing") == 0) eps = strtof(argv[i + 1], NULL);
        else if (strcmp(argv[i], "--step-lr") == 0) step_lr = strtof(argv[i + 1], NULL);
        else { fprintf(stderr, "kiln_gradients: unknown option %s\n", argv[i]); return 2; }
    }
    /* PyTorch computes fp32 convolutions in fp32 on the GPU when TF32 is off: compare with that */
    o.strict_fp32 = 1;
    kiln_context *ctx = NULL;
    kiln_model *fwd = NULL, *m = NULL;
    kiln_tensor *in[2] = {NULL, NULL};
    kiln_gradients g = {0};
    int rc = 1;
    if (kiln_context_create(&ctx)) return 1;
    if (kiln_model_load_onnx(ctx, argv[1], &fwd) ||
        kiln_model_add_classifier_loss(fwd, kiln_model_output_name(fwd, 0), eps, &m) ||
        kiln_tensor_load_npy(ctx, argv[2], &in[0]) || kiln_tensor_load_npy(ctx, argv[3], &in[1]) ||
        kiln_model_gradients(m, "loss", &o, 2, in, &g)) {
        fprintf(stderr, "kiln_gradients: %s\n", kiln_context_message(ctx));
        goto out;
    }
    mkdir(argv[4], 0755);
    char path[4096];
    for (int i = 0; i < g.n; i++) {
        snprintf(path, sizeof path, "%s/%s.npy", argv[4], g.names[i]);
        if (kiln_tensor_save_npy(ctx, g.values[i], path)) {
            fprintf(stderr, "kiln_gradients: %s\n", kiln_context_message(ctx));
            goto out;
        }
    }
    snprintf(path, sizeof path, "%s/loss.txt", argv[4]);
    FILE *f = fopen(path, "w");
    if (!f) goto out;
    fprintf(f, "%.9g\n", (double)g.loss);
    fclose(f);
    printf("kiln_gradients: %d parameters, loss %.7f\n", g.n, (double)g.loss);
    if (step_lr > 0) {
        kiln_train_options so = o;
        so.optimizer = KILN_OPTIM_SGD;
        so.lr = step_lr;
        kiln_trainer *t = NULL;
        float l0 = 0, l1 = 0;
        if (kiln_trainer_create(m, "loss", &so, &t) || kiln_trainer_step(t, 2, in, &l0) || kiln_trainer_step(t, 2, in, &l1)) {
            fprintf(stderr, "kiln_gradients: --step-lr: %s\n", kiln_context_message(ctx));
            kiln_trainer_free(t);
            goto out;
        }
        kiln_trainer_free(t);
        snprintf(path, sizeof path, "%s/step_loss.txt", argv[4]);
        if (!(f = fopen(path, "w"))) goto out;
        fprintf(f, "%.9g\n", (double)l1);
        fclose(f);
        printf("kiln_gradients: loss %.7f after one SGD step of lr %g\n", (double)l1, (double)step_lr);
    }
    rc = 0;
out:
    kiln_gradients_free(&g);
    kiln_tensor_free(in[0]);
    kiln_tensor_free(in[1]);
    kiln_model_free(m);
    kiln_model_free(fwd);
    kiln_context_free(ctx);
    return rc;
}
