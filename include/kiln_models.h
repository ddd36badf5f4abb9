/*
 * kiln_models.h — models kiln builds in C (for training from scratch, tests and demos).
 * Each returns a finalized kiln_model (free it with kiln_model_free); see kiln.h.
 */
#ifndef KILN_MODELS_H
#define KILN_MODELS_H

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* pytorch/examples mnist/main.py's network: Conv(1->32,3) ReLU Conv(32->64,3) ReLU
 * MaxPool(2) Dropout(0.25) Flatten Linear(9216->128) ReLU Dropout(0.5) Linear(128->10)
 * LogSoftmax. Inputs "image" f32 (batch,1,28,28) and "label" i64 (batch); outputs
 * "logprobs" (batch,10) and "loss" (NLL, mean). batch -1: symbolic. Weights are
 * initialized as PyTorch does (kaiming-uniform with a=sqrt(5), bias uniform 1/sqrt(fan_in))
 * from seed. dropout 0 builds no Dropout nodes. */
kiln_status kiln_model_mnist_net(kiln_context *ctx, int64_t batch, uint64_t seed, int dropout,
                                 kiln_model **out);

/* torchvision's ResNets (resnet18/34/50/101/152; BasicBlock below 50, Bottleneck with the
 * stride on its 3x3 convolution, "v1.5", from 50): input "image" f32 (batch, 3, S, S)
 * (image_size S, or -1: symbolic), output "logits" (batch, n_classes). Parameter names are
 * torchvision's state_dict names (conv1.weight, bn1.weight, bn1.bias, bn1.running_mean,
 * bn1.running_var, layer1.0.conv1.weight, ..., layerL.B.downsample.0.weight / .1.*,
 * fc.weight, fc.bias); BatchNormalization's num_batches_tracked is not held (add it when
 * loading into PyTorch with strict=True). Convolutions have no bias. Initialized as
 * torchvision does: convolutions kaiming_normal_(mode="fan_out", relu), BN weight 1 and
 * bias 0 (running mean 0, var 1), fc PyTorch's Linear default; zero_init_residual sets the
 * last BN weight of each block to 0. BN epsilon 1e-5, momentum as PyTorch's 0.1. Train it
 * with kiln_model_add_classifier_loss. */
kiln_status kiln_model_resnet(kiln_context *ctx, int depth, int64_t n_classes, int64_t image_size, uint64_t seed,
                              int zero_init_residual, kiln_model **out);

/* A training model from a classifier: a copy of the finalized model m with an i64 graph
 * input "label" (batch) appended and the output "loss" = PyTorch's
 * CrossEntropyLoss(label_smoothing=eps) of the f32 output `logits` (batch, K) (mean over
 * the batch; eps in [0, 1): (1 - eps) * NLL + eps * the mean over classes of -log_softmax).
 * It is computed as LogSoftmax (the value "logprobs") then NegativeLogLikelihoodLoss
 * (SoftmaxCrossEntropyLoss's own definition; the pair kiln fuses on CUDA), plus ReduceMean,
 * Mul and Sub of Constants for the smoothing. The first dim of every graph input becomes
 * symbolic (the trainer's batch). An Identity node reading an initializer becomes an
 * initializer of its own, a copy (torch.onnx.export's eval-mode form names equal
 * BatchNormalization statistics that way; each BN needs its own to train). A label outside
 * [0, K) makes the step fail naming it. m's values may not already use the names "label",
 * "loss", "logprobs" or "kiln:*". The result is finalized; free it with kiln_model_free. */
kiln_status kiln_model_add_classifier_loss(const kiln_model *m, const char *logits, float label_smoothing,
                                           kiln_model **out);

#ifdef __cplusplus
}
#endif
#endif /* KILN_MODELS_H */
