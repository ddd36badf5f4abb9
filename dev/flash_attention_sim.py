# flash_attention_sim.py — one warp of src/cuda/attention_flash.cu (16 query rows) transcribed
# into numpy at the fragment level: ldmatrix (x4, with and without .trans) and
# mma.sync.m16n8k16 as the PTX ISA's fragment tables define them (per lane, g = lane / 4,
# t = lane % 4), the kernel's ldmatrix row addresses for Q, K and V (padded shared rows),
# the P -> A-fragment packing, the base-2 online softmax over two key tiles (Lk 70), the
# -inf masking of keys past Lk, and bias rows masked to -inf in whole (NaN out, as the CPU
# reference) or in the first tile only. Checked against plain attention in f64 (no f16
# rounding: this checks index math, not precision). Written without a GPU; a wrong address
# pattern gives errors of 0.1-0.9 (tried). Keep it in step with the kernel.
# run_mt2: a warp with two m-tiles (MT = 2, the FOLD form). `python3 dev/flash_attention_sim.py`
# (numpy; a few seconds).
import numpy as np, sys
rng = np.random.default_rng(0)
LK, BN, PAD = 70, 64, 8
lq = 16
scale = 0.125; LOG2E = 1.4426950408889634

def ldm_x4(smem, addrs, trans):
    # addrs[l] = element offset of the row lane l supplies; matrix i rows from lanes 8i..8i+7
    regs = np.zeros((32, 4, 2))
    for i in range(4):
        M = np.stack([smem[addrs[8*i + r]: addrs[8*i + r] + 8] for r in range(8)])  # 8x8
        if trans: M = M.T
        for l in range(32):
            regs[l, i] = M[l // 4, (l % 4) * 2:(l % 4) * 2 + 2]
    return regs

def mma(c, a, b0, b1):
    # c: (32,4) f32, a: (32,4,2), b0/b1: (32,2). PTX: g = l/4, t = l%4.
    A = np.zeros((16, 16)); B = np.zeros((16, 8))
    for l in range(32):
        g, t = l // 4, l % 4
        A[g, t*2:t*2+2] = a[l, 0]; A[g+8, t*2:t*2+2] = a[l, 1]
        A[g, t*2+8:t*2+10] = a[l, 2]; A[g+8, t*2+8:t*2+10] = a[l, 3]
        B[t*2:t*2+2, g] = b0[l]; B[t*2+8:t*2+10, g] = b1[l]
    C = A @ B
    out = c.copy()
    for l in range(32):
        g, t = l // 4, l % 4
        out[l, 0] += C[g, t*2]; out[l, 1] += C[g, t*2+1]; out[l, 2] += C[g+8, t*2]; out[l, 3] += C[g+8, t*2+1]
    return out

def run(D):
    LD = D + PAD
    Q = rng.uniform(-1, 1, (16, D)); K = rng.uniform(-1, 1, (LK, D)); V = rng.uniform(-1, 1, (LK, D))
    bias = rng.uniform(-2, 2, (16, LK)); bias[3, :] = -np.inf; bias[5, :64] = -np.inf
    sQ = np.zeros(16 * LD)
    for r in range(16): sQ[r*LD: r*LD + D] = Q[r]
    lanes = np.arange(32)
    qf = [ldm_x4(sQ, [((l % 8) + ((l // 8) % 2) * 8) * LD + kk*16 + (l // 16) * 8 for l in lanes], False) for kk in range(D // 16)]
    o = np.zeros((D // 8, 32, 4)); m = np.full((32, 2), -np.inf); lsum = np.zeros((32, 2))
    for jt in range((LK + BN - 1) // BN):
        j0 = jt * BN
        sK = np.zeros(BN * LD); sV = np.zeros(BN * LD)
        for r in range(BN):
            if j0 + r < LK: sK[r*LD: r*LD + D] = K[j0 + r]; sV[r*LD: r*LD + D] = V[j0 + r]
        s = np.zeros((BN // 8, 32, 4))
        for kk in range(D // 16):
            for np_ in range(BN // 16):
                b = ldm_x4(sK, [(np_*16 + (l % 8) + (l // 16) * 8) * LD + kk*16 + ((l // 8) % 2) * 8 for l in lanes], False)
                s[2*np_] = mma(s[2*np_], qf[kk], b[:, 0], b[:, 1])
                s[2*np_+1] = mma(s[2*np_+1], qf[kk], b[:, 2], b[:, 3])
        for nt in range(BN // 8):
            for l in lanes:
                g, t = l // 4, l % 4
                for e in range(4):
                    c = nt*8 + t*2 + (e & 1); col = j0 + c; r = g + 8 * (e // 2)
                    kvalid = LK - j0; tail = kvalid < BN  # the kernel masks on the last tile only
                    x = s[nt, l, e] * scale * LOG2E
                    x = x + (bias[r, col] * LOG2E if col < LK else 0)  # stage_bias zeroes past Lk
                    if tail and c >= kvalid: x = -np.inf
                    s[nt, l, e] = x
        with np.errstate(invalid='ignore'):
            for h in range(2):
                mx = np.max(np.maximum(s[:, :, 2*h], s[:, :, 2*h+1]), axis=0)  # per lane
                mx = np.maximum(mx, mx[lanes ^ 1]); mx = np.maximum(mx, mx[lanes ^ 2])
                mnew = np.maximum(m[:, h], mx); mu = np.where(mnew == -np.inf, 0, mnew)
                alpha = np.exp2(m[:, h] - mu)
                p = np.exp2(s[:, :, 2*h:2*h+2] - mu[None, :, None]); s[:, :, 2*h:2*h+2] = p
                lsum[:, h] = lsum[:, h] * alpha + p.sum(axis=(0, 2)); m[:, h] = mnew
                o[:, :, 2*h:2*h+2] *= alpha[None, :, None]
        for kk in range(BN // 16):
            pa = np.stack([s[2*kk][:, 0:2], s[2*kk][:, 2:4], s[2*kk+1][:, 0:2], s[2*kk+1][:, 2:4]], axis=1)
            for dp in range(D // 16):
                b = ldm_x4(sV, [(kk*16 + (l % 8) + ((l // 8) % 2) * 8) * LD + dp*16 + (l // 16) * 8 for l in lanes], True)
                o[2*dp] = mma(o[2*dp], pa, b[:, 0], b[:, 1])
                o[2*dp+1] = mma(o[2*dp+1], pa, b[:, 2], b[:, 3])
    O = np.full((16, D), 99.0)
    for h in range(2):
        tot = lsum[:, h] + lsum[lanes ^ 1, h]; tot = tot + tot[lanes ^ 2]
        with np.errstate(divide='ignore', invalid='ignore'):
            inv = np.where(tot > 0, 1 / tot, np.nan)
        for l in lanes:
            g, t = l // 4, l % 4
            for j in range(D // 8):
                O[g + 8*h, j*8 + t*2] = o[j, l, 2*h] * inv[l]; O[g + 8*h, j*8 + t*2 + 1] = o[j, l, 2*h+1] * inv[l]
    S = Q @ K.T * scale + bias
    mx = S.max(axis=1, keepdims=True)
    with np.errstate(invalid='ignore'):
        P = np.where(np.isfinite(mx), np.exp(S - np.where(np.isfinite(mx), mx, 0)), 0)
        ref = (P @ V) / P.sum(axis=1, keepdims=True)
    ok = np.allclose(O, ref, atol=1e-9, equal_nan=True)
    print("D", D, "max err", np.nanmax(np.abs(O - ref)), "row 3 NaN:", np.isnan(O[3]).all(), "row 5 finite:", np.isfinite(O[5]).all(), "OK" if ok else "MISMATCH")
    return ok

def run_mt2(D, w=1):
    # two m-tiles a warp (the kernel's MT = 2, FOLD form: no bias, scale in the exponential):
    # warp w owns rows mt*64 + 16w .. + 15 of a 128-row Q tile; each K / V fragment feeds both
    LD = D + PAD; BM = 64; wr = 16 * w; sc = scale * LOG2E
    Q = rng.uniform(-1, 1, (128, D)); K = rng.uniform(-1, 1, (LK, D)); V = rng.uniform(-1, 1, (LK, D))
    sQ = np.zeros(128 * LD)
    for r in range(128): sQ[r*LD: r*LD + D] = Q[r]
    lanes = np.arange(32)
    o = np.zeros((2, D // 8, 32, 4)); m = np.full((2, 32, 2), -np.inf); lsum = np.zeros((2, 32, 2))
    for jt in range((LK + BN - 1) // BN):
        j0 = jt * BN; kvalid = LK - j0
        sK = np.zeros(BN * LD); sV = np.zeros(BN * LD)
        for r in range(BN):
            if j0 + r < LK: sK[r*LD: r*LD + D] = K[j0 + r]; sV[r*LD: r*LD + D] = V[j0 + r]
        s = np.zeros((2, BN // 8, 32, 4))
        for kk in range(D // 16):  # q_frag read again at each k-step
            qk = [ldm_x4(sQ, [(mt*BM + wr + (l % 8) + ((l // 8) % 2) * 8) * LD + kk*16 + (l // 16) * 8 for l in lanes], False)
                  for mt in range(2)]
            for np_ in range(BN // 16):
                b = ldm_x4(sK, [(np_*16 + (l % 8) + (l // 16) * 8) * LD + kk*16 + ((l // 8) % 2) * 8 for l in lanes], False)
                for mt in range(2):
                    s[mt, 2*np_] = mma(s[mt, 2*np_], qk[mt], b[:, 0], b[:, 1])
                    s[mt, 2*np_+1] = mma(s[mt, 2*np_+1], qk[mt], b[:, 2], b[:, 3])
        if kvalid < BN:
            for nt in range(BN // 8):
                for l in lanes:
                    for e in range(4):
                        if nt*8 + (l % 4)*2 + (e & 1) >= kvalid: s[:, nt, l, e] = -np.inf
        for mt in range(2):
            for h in range(2):
                mx = np.max(np.maximum(s[mt, :, :, 2*h], s[mt, :, :, 2*h+1]), axis=0)
                mx = np.maximum(mx, mx[lanes ^ 1]); mx = np.maximum(mx, mx[lanes ^ 2])
                mnew = np.maximum(m[mt, :, h], mx * sc); mu = np.where(mnew == -np.inf, 0, mnew)
                alpha = np.exp2(m[mt, :, h] - mu)
                p = np.exp2(s[mt, :, :, 2*h:2*h+2] * sc - mu[None, :, None]); s[mt, :, :, 2*h:2*h+2] = p
                lsum[mt, :, h] = lsum[mt, :, h] * alpha + p.sum(axis=(0, 2)); m[mt, :, h] = mnew
                o[mt, :, :, 2*h:2*h+2] *= alpha[None, :, None]
        for kk in range(BN // 16):
            pa = [np.stack([s[mt, 2*kk][:, 0:2], s[mt, 2*kk][:, 2:4], s[mt, 2*kk+1][:, 0:2], s[mt, 2*kk+1][:, 2:4]], axis=1)
                  for mt in range(2)]
            for dp in range(D // 16):
                b = ldm_x4(sV, [(kk*16 + (l % 8) + ((l // 8) % 2) * 8) * LD + dp*16 + (l // 16) * 8 for l in lanes], True)
                for mt in range(2):
                    o[mt, 2*dp] = mma(o[mt, 2*dp], pa[mt], b[:, 0], b[:, 1])
                    o[mt, 2*dp+1] = mma(o[mt, 2*dp+1], pa[mt], b[:, 2], b[:, 3])
    rows = [mt*BM + wr + r for mt in range(2) for r in range(16)]
    O = np.full((128, D), 99.0)
    for mt in range(2):
        for h in range(2):
            tot = lsum[mt, :, h] + lsum[mt, lanes ^ 1, h]; tot = tot + tot[lanes ^ 2]
            for l in lanes:
                g, t = l // 4, l % 4
                for j in range(D // 8):
                    O[mt*BM + wr + g + 8*h, j*8 + t*2] = o[mt, j, l, 2*h] / tot[l]
                    O[mt*BM + wr + g + 8*h, j*8 + t*2 + 1] = o[mt, j, l, 2*h+1] / tot[l]
    S = Q[rows] @ K.T * scale
    P = np.exp(S - S.max(axis=1, keepdims=True)); ref = (P @ V) / P.sum(axis=1, keepdims=True)
    err = np.abs(O[rows] - ref).max(); ok = err < 1e-9
    print("MT 2 D", D, "warp", w, "max err", err, "OK" if ok else "MISMATCH")
    return ok

sys.exit(0 if all([run(D) for D in (32, 48, 64, 80, 96, 112, 128)] + [run_mt2(D, w) for D, w in ((32, 0), (48, 3), (64, 1))]) else 1)
