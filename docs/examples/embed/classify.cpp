// classify_cpp MODEL.onnx IMAGES.npy: the C API from C++, each handle owned by a unique_ptr
// and each failure turned into an exception carrying kiln's message.
#include <kiln.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

template <class T, void (*Free)(T *)> struct Deleter {
    void operator()(T *p) const { Free(p); }
};
using Context = std::unique_ptr<kiln_context, Deleter<kiln_context, kiln_context_free>>;
using Model = std::unique_ptr<kiln_model, Deleter<kiln_model, kiln_model_free>>;
using Session = std::unique_ptr<kiln_session, Deleter<kiln_session, kiln_session_free>>;
using Tensor = std::unique_ptr<kiln_tensor, Deleter<kiln_tensor, kiln_tensor_free>>;

static void check(kiln_context *ctx, kiln_status st) {
    if (st != KILN_OK) throw std::runtime_error(kiln_context_message(ctx));
}

int main(int argc, char **argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s MODEL.onnx IMAGES.npy\n", argv[0]);
        return 2;
    }
    kiln_context *c = nullptr;
    if (kiln_context_create(&c) != KILN_OK) return 1;
    Context ctx(c);
    try {
        kiln_model *m = nullptr;
        check(c, kiln_model_load_onnx(c, argv[1], &m));
        Model model(m);
        kiln_session *s = nullptr;
        check(c, kiln_session_create(model.get(), nullptr, &s));
        Session sess(s);
        kiln_tensor *x = nullptr;
        check(c, kiln_tensor_load_npy(c, argv[2], &x));
        Tensor input(x);
        const kiln_tensor *y = nullptr; // owned by the session
        check(c, kiln_session_run(sess.get(), 1, &x, 1, &y));
        const int64_t batch = kiln_tensor_dim(y, 0), classes = kiln_tensor_dim(y, 1);
        const float *p = static_cast<const float *>(kiln_tensor_data(y));
        for (int64_t i = 0; i < batch; i++) {
            int64_t best = 0;
            for (int64_t k = 1; k < classes; k++)
                if (p[i * classes + k] > p[i * classes + best]) best = k;
            std::printf("image %lld: class %lld (p = %.3f)\n", (long long)i, (long long)best,
                        p[i * classes + best]);
        }
    } catch (const std::exception &e) {
        std::fprintf(stderr, "kiln: %s\n", e.what());
        return 1;
    }
    return 0;
}
