/* test_cuda_attention.c — kiln.Attention in whole models on CUDA (label gpu).
 *
 *   test_cuda_attention DATA_DIR   (tests/data: attn_{vit,swin,maxvit,swinv2}_tiny.onnx, the
 *                                   torchvision exports of tests/test_fuse_attention.c;
 *                                   attn_{vit,swin,swinv2}_d32.onnx, below)
 *
 * The _d32 exports have head dim 32, which attention_flash.cu takes (the tiny ones have 16
 * and 8): with --flash (ctest cuda_attention_flash) this sets KILN_CUDA_FLASH_ATTN=1 (the
 * default), so their fp16 runs go through it; without, KILN_CUDA_FLASH_ATTN=0, so that
 * attention.cu's kernels run them. Made as the tiny ones (see
 * tests/test_fuse_attention.c's last comment) from
 *   VisionTransformer(image_size=32, patch_size=4, num_layers=1, num_heads=2, hidden_dim=64,
 *                     mlp_dim=64, num_classes=10)      (L = 65: two key tiles of 64)
 *   SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2], num_heads=[1],
 *                   window_size=[4, 4], num_classes=10)  (L = 16, the shifted-window mask)
 *   SwinTransformer(patch_size=[4, 4], embed_dim=64, depths=[2], num_heads=[2],
 *                   window_size=[4, 4], num_classes=10, mlp_ratio=1.0,
 *                   block=SwinTransformerBlockV2, downsample_layer=PatchMergingV2)
 *                   (Swin V2's cosine attention, head dim 32; torch.manual_seed(1), the
 *                   blocks' logit scales log([2, 3.5]), the classifier's weights N(0, 0.5))
 * (the ViT's classifier, which torchvision initializes to zeros, then given random weights:
 * an all-zero output checks nothing, and compare() fails on one)
 *
 * For each export: the passes for a CUDA session fuse every attention block (the CUDA
 * table's supports accepts each kiln.Attention, so none is left unfused or planned onto the
 * CPU); then at batch 2 and 5 the CUDA session's output, fp32 without TF32, matches the
 * CPU's unfused fp32 output within 1e-4 relative (of the largest |y|), the CUDA session
 * with --disable fuse-attention too, and the fp16 session within 3e-2. Prints the error
 * and the share of its budget each used. Exits non-zero on any failure. */
#include "../check.h"
#include "core/internal.h"
#include "core/optest.h"
#include "passes/passes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
static kiln_context *ctx;

static int count_attention(const kiln_model *m) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++) n += strcmp(m->nodes[i].op_type, "Attention") == 0;
    return n;
}

static int count_softmax(const kiln_model *m) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++) n += strcmp(m->nodes[i].op_type, "Softmax") == 0;
    return n;
}

/* y of m on x in a session with options o (copied out: NULL on failure). */
static kiln_tensor *run(kiln_model *m, const kiln_session_options *o, kiln_tensor *x, const char *what) {
    kiln_session *s = NULL;
    const kiln_tensor *y = NULL;
    kiln_tensor *out = NULL;
    if (kiln_session_create(m, o, &s) || kiln_session_run(s, 1, &x, 1, &y)) {
        printf("FAIL %s: %s\n", what, kiln_context_message(ctx));
        fails++;
    } else {
        out = kiln_tensor_clone(ctx, y);
    }
    kiln_session_free(s);
    return out;
}

static void compare(const kiln_tensor *got, const kiln_tensor *want, double rel, const char *what) {
    if (!got || !want) return;
    CHECK(kiln_tensor_numel(got) == kiln_tensor_numel(want), "%s: %lld elements, expected %lld", what,
          (long long)kiln_tensor_numel(got), (long long)kiln_tensor_numel(want));
    double mx = 0, err = 0;
    for (int64_t i = 0; i < kiln_tensor_numel(want); i++) mx = fmax(mx, fabs(kiln_get_f64(want, i)));
    bool nan = false;
    for (int64_t i = 0; i < kiln_tensor_numel(want) && i < kiln_tensor_numel(got); i++) {
        const double g = kiln_get_f64(got, i), w = kiln_get_f64(want, i);
        nan |= isnan(g);
        err = fmax(err, fabs(g - w));
    }
    const double budget = rel * mx;
    const bool bad = nan || err > budget || !(mx > 0); /* an all-zero reference checks nothing */
    printf("%s %s: max |err| %.3g of max |y| %.3g (%.0f%% of the %.0e budget)%s\n", bad ? "FAIL" : "ok  ", what, err,
           mx, budget > 0 ? 100 * err / budget : 0.0, rel, mx > 0 ? "" : ": the reference is all zero");
    fails += bad;
}

static void model(const char *dir, const char *file) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    kiln_model *m = NULL, *opt = NULL;
    if (kiln_model_load_onnx(ctx, path, &m)) {
        printf("FAIL %s: %s\n", path, kiln_context_message(ctx));
        fails++;
        return;
    }
    const kiln_pass_options po = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP16};
    if (kiln_passes_apply(m, &po, &opt)) {
        printf("FAIL %s: passes: %s\n", file, kiln_context_message(ctx));
        fails++;
    } else {
        const int want = count_softmax(m), got = count_attention(opt);
        CHECK(want > 0 && got == want, "%s: %d of %d attention blocks fused for cuda", file, got, want);
        printf("%s: %d of %d attention blocks fused for cuda (fp16)\n", file, got, want);
    }
    kiln_model_free(opt);
    for (int b = 0; b < 2; b++) {
        const int64_t batch = b ? 5 : 2;
        kiln_tensor *x = kt_rand(KILN_F32, 4, KT_DIMS(batch, 3, 32, 32), -1, 1, 70 + (uint64_t)b);
        kiln_session_options cpu = {.device = KILN_DEVICE_CPU, .disable_passes = KILN_PASS_FUSE_ATTENTION};
        kiln_session_options f32 = {.device = KILN_DEVICE_CUDA, .strict_fp32 = 1};
        kiln_session_options f32_off = f32;
        f32_off.disable_passes = KILN_PASS_FUSE_ATTENTION;
        kiln_session_options f16 = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP16};
        char what[300];
        kiln_tensor *ref = run(m, &cpu, x, "cpu");
        kiln_tensor *y32 = run(m, &f32, x, "cuda fp32");
        kiln_tensor *y32off = run(m, &f32_off, x, "cuda fp32 unfused");
        kiln_tensor *y16 = run(m, &f16, x, "cuda fp16");
        snprintf(what, sizeof what, "%s batch %lld cuda fp32 (fused)", file, (long long)batch);
        compare(y32, ref, 1e-4, what);
        snprintf(what, sizeof what, "%s batch %lld cuda fp32 (--disable fuse-attention)", file, (long long)batch);
        compare(y32off, ref, 1e-4, what);
        snprintf(what, sizeof what, "%s batch %lld cuda fp16 (fused)", file, (long long)batch);
        compare(y16, ref, 3e-2, what);
        kiln_tensor_free(ref);
        kiln_tensor_free(y32);
        kiln_tensor_free(y32off);
        kiln_tensor_free(y16);
        kiln_tensor_free(x);
    }
    kiln_model_free(m);
}

int main(int argc, char **argv) {
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    const char *dir = "tests/data";
    bool flash_on = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--flash") == 0) flash_on = true;
        else dir = argv[i];
    }
    setenv("KILN_CUDA_FLASH_ATTN", flash_on ? "1" : "0", 1); /* read at kiln_cuda_create */
    const char *flash = getenv("KILN_CUDA_FLASH_ATTN");
    printf("KILN_CUDA_FLASH_ATTN=%s: %s\n", flash ? flash : "(unset)",
           flash && strcmp(flash, "1") == 0 ? "f16 / bf16 nodes with head dims 32 / 64 / 128 on attention_flash.cu"
                                            : "attention.cu's kernels only");
    model(dir, "attn_vit_tiny.onnx");
    model(dir, "attn_swin_tiny.onnx");
    model(dir, "attn_maxvit_tiny.onnx");
    model(dir, "attn_vit_d32.onnx");
    model(dir, "attn_swin_d32.onnx");
    model(dir, "attn_swinv2_tiny.onnx");
    model(dir, "attn_swinv2_d32.onnx");
    printf("%s\n", fails ? "FAILED" : "all cuda attention checks passed");
    kiln_context_free(ctx);
    return fails ? 1 : 0;
}
