/*
 * conv_depthwise.cuh — what the depthwise kernels share (conv_depthwise.cu: forward and
 * the gather input gradient; conv_depthwise_grad.cu: the weight and input gradients): the
 * geometry of kiln_cuda_dw_geo as 32-bit ints, which kiln_cuda_conv_depthwise_fits checks
 * the problem's indices fit.
 */
#ifndef KILN_CUDA_CONV_DEPTHWISE_CUH
#define KILN_CUDA_CONV_DEPTHWISE_CUH

#include "dtype.cuh"

namespace kiln_dw {

struct Geo {
    int N, C, H, W, OH, OW, kh, kw, sh, sw, dh, dw, pt, pl;
};

inline Geo geo32(const kiln_cuda_dw_geo *g) {
    Geo r;
    r.N = (int)g->N;
    r.C = (int)g->C;
    r.H = (int)g->H;
    r.W = (int)g->W;
    r.OH = (int)g->OH;
    r.OW = (int)g->OW;
    r.kh = (int)g->kh;
    r.kw = (int)g->kw;
    r.sh = (int)g->sh;
    r.sw = (int)g->sw;
    r.dh = (int)g->dh;
    r.dw = (int)g->dw;
    r.pt = (int)g->pt;
    r.pl = (int)g->pl;
    return r;
}

} // namespace kiln_dw

#endif
