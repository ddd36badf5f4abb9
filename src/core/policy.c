/* policy.c — the one TF32 / NHWC policy of sessions and trainers (kiln.h, strict_fp32). */
#include "internal.h"

bool kiln_policy_tf32(int strict_fp32) { return !strict_fp32; }

bool kiln_policy_nhwc(kiln_device device, kiln_precision precision, int strict_fp32, unsigned disable_passes) {
    /* cuDNN's NHWC convolutions are tensor-core kernels: NHWC pays where tensor cores run
     * (fp16/bf16, or f32 through TF32); fp32 without TF32 is faster NCHW (on the H200,
     * ResNet-50 at batch 256 fp32 NHWC without TF32 was 1.5x slower, bench/NOTES.md) */
    return device == KILN_DEVICE_CUDA && !(disable_passes & KILN_PASS_NHWC) &&
           (precision != KILN_PRECISION_FP32 || kiln_policy_tf32(strict_fp32));
}
