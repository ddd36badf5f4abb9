/* recompute_plan.c — the largest batch a ResNet's training step fits under a memory limit,
 * planned for a device on this host (kiln_trainer_create_plan: no session, no device needed):
 * without recomputation, with cheap values only, and with convolutions too (issue 12,
 * memory; src/train/recompute.c). A build with the CUDA backend lays the graph out as the
 * CUDA trainer does (NHWC, BN+ReLU fusions, fp16) without a GPU.
 *   recompute_plan DEPTH IMAGE_SIZE CLASSES cpu|cuda fp32|fp16|bf16 LIMIT_MIB [MAX_BATCH]
 * prints "max batch: W without recomputation, C cheap values only, B both tiers". */
#include "kiln.h"
#include "kiln_models.h"
#include "train/trainer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: recompute_plan DEPTH IMAGE_SIZE CLASSES cpu|cuda fp32|fp16|bf16 LIMIT_MIB [MAX_BATCH]\n");
        return 2;
    }
    const int depth = atoi(argv[1]);
    const int64_t size = atoll(argv[2]), classes = atoll(argv[3]);
    const size_t limit = (size_t)(atof(argv[6]) * 1048576.0);
    const int64_t cap = argc > 7 ? atoll(argv[7]) : 0;
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return 1;
    kiln_model *fwd = NULL, *m = NULL;
    kiln_trainer *t = NULL;
    kiln_train_options o = KILN_TRAIN_OPTIONS_INIT;
    o.optimizer = KILN_OPTIM_SGD;
    o.lr = 0.1f;
    o.momentum = 0.9f;
    o.device = strcmp(argv[4], "cuda") == 0 ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU;
    o.amp = strcmp(argv[5], "fp16") == 0 ? KILN_AMP_FP16 : strcmp(argv[5], "bf16") == 0 ? KILN_AMP_BF16 : KILN_AMP_OFF;
    int rc = 1;
    if (kiln_model_resnet(ctx, depth, classes, size, 1, 0, &fwd) ||
        kiln_model_add_classifier_loss(fwd, kiln_model_output_name(fwd, 0), 0, &m) ||
        kiln_trainer_create_plan(m, "loss", &o, &t)) {
        fprintf(stderr, "recompute_plan: %s\n", kiln_context_message(ctx));
        goto out;
    }
    int fused = 0, bn = 0, nhwc = 0;
    for (int i = 0; i < t->train->n_nodes; i++) {
        const kiln_node *n = &t->train->nodes[i];
        if (!strcmp(n->op_type, "BatchNormalization")) {
            bn++;
            for (int a = 0; a < n->n_attrs; a++) fused += !strcmp(n->attrs[a].name, "relu") && n->attrs[a].i;
        }
        nhwc += n->n_out > 0 && n->out[0] >= 0 && t->train->values[n->out[0]].format == KILN_FORMAT_NHWC;
    }
    printf("resnet%d %lldx%lld on %s (%s), limit %.0f MiB: training graph %d nodes, %d with NHWC outputs, %d "
           "BatchNormalizations (%d with their ReLU fused)\n",
           depth, (long long)size, (long long)size, argv[4], argv[5], (double)limit / 1048576.0, t->train->n_nodes, nhwc,
           bn, fused);
    int64_t best[3] = {0, 0, 0};
    static const int tiers[3] = {0, 2, 1};
    static const char *names[3] = {"without recomputation", "cheap values only", "both tiers"};
    for (int k = 0; k < 3; k++) {
        kiln_train_memory at;
        if (kiln_trainer_max_batch(t, limit, tiers[k], cap, &best[k], &at)) {
            fprintf(stderr, "recompute_plan (%s): %s\n", names[k], kiln_context_message(ctx));
            goto out;
        }
        printf("  %-22s batch %lld: peak %.1f MiB = activations %.1f (%.1f without recomputation) + weights %.1f + "
               "state %.1f + batch %.1f + workspace %.1f; %d of %d candidates recomputed\n",
               names[k], (long long)best[k], at.peak_bytes / 1048576.0, at.arena_bytes / 1048576.0,
               at.arena_bytes_without / 1048576.0, at.param_bytes / 1048576.0, at.state_bytes / 1048576.0,
               at.input_bytes / 1048576.0, at.workspace_bytes / 1048576.0, at.recomputed, at.candidates);
        fflush(stdout);
    }
    printf("max batch: %lld without recomputation, %lld cheap values only (%.2fx), %lld both tiers (%.2fx)\n",
           (long long)best[0], (long long)best[1], best[0] ? (double)best[1] / (double)best[0] : 0.0,
           (long long)best[2], best[0] ? (double)best[2] / (double)best[0] : 0.0);
    rc = 0;
out:
    kiln_trainer_free(t);
    kiln_model_free(m);
    kiln_model_free(fwd);
    kiln_context_free(ctx);
    return rc;
}
