/* example_readme.c — the C example of README.md, kept identical to it (checked by the
 * readme_example_in_sync test) and run by the suite. */
#include <kiln.h>
#include <stdio.h>

int main(void) {
    kiln_context *ctx = NULL;
    kiln_model *model = NULL;
    kiln_session *sess = NULL;
    kiln_tensor *x = NULL;
    const kiln_tensor *y = NULL;
    int rc = 1;
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    if (kiln_model_load_onnx(ctx, "examples/tiny_cnn.onnx", &model) == KILN_OK &&
        kiln_session_create(model, NULL, &sess) == KILN_OK &&
        kiln_tensor_load_npy(ctx, "examples/tiny_cnn_x.npy", &x) == KILN_OK &&
        kiln_session_run(sess, 1, &x, 1, &y) == KILN_OK) {
        const float *p = kiln_tensor_data(y);          /* (batch, 10), owned by sess */
        printf("class probabilities of image 0: %.3f %.3f ...\n", p[0], p[1]);
        rc = 0;
    } else {
        fprintf(stderr, "kiln: %s\n", kiln_context_message(ctx));
    }
    kiln_tensor_free(x);
    kiln_session_free(sess);
    kiln_model_free(model);
    kiln_context_free(ctx);
    return rc;
}
