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

#ifdef __cplusplus
}
#endif
#endif /* KILN_MODELS_H */
