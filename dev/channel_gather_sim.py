# channel_gather_sim.py — src/cuda/movement.cu's channel_gather_nhwc_kernel (kiln.ChannelGather
# on NHWC: P pixels of every input staged in shared memory, each output's P pixels written in
# 16-byte vectors or single elements) and gather_pixels, transcribed loop by loop: blocks
# striding over pixel tiles, threads striding over each output's run, the channel / pixel
# counters a vector's elements advance. Checked against the op's definition on ShuffleNet's
# boundaries (58 + 58 -> 58, 64 padded; 488 + 488; three outputs), three odd inputs, 1-, 2- and
# 4-byte elements, tail tiles, 1 to 7 blocks. Index math only (integers, no alignment faults):
# written because the GPU sweep of this kernel has not run yet (the nineteenth session's filter
# named kiln.ChannelGather where test_backend_ops takes ChannelGather). A wrong counter gives
# MISMATCH (tried). Keep it in step with the kernel. `python3 dev/channel_gather_sim.py`.
import numpy as np, itertools
SHIFT=65536
def gather_pixels(cin, es):
    ct=sum(cin); p = (32*1024)//(ct*es) if ct>0 else 0
    p = min(p,64); return (p//8*8) if p>=8 else p
def kernel(xs, cin, couts, mp, N, S, es, blocks, threads=256):
    P=gather_pixels(cin, es)
    assert P>0
    off=np.cumsum([0]+couts)[:-1]
    ys=[np.full(N*S*c, -999, dtype=np.int64) for c in couts]
    sbase=np.cumsum([0]+[P*c for c in cin])[:-1]
    stage=np.zeros(P*sum(cin), dtype=np.int64)
    pixels=N*S
    VE=16//es
    for b in range(blocks):
        p0=b*P
        while p0<pixels:
            np_=min(pixels-p0,P)
            for i,x in enumerate(xs):
                stage[sbase[i]:sbase[i]+np_*cin[i]] = x[p0*cin[i]:(p0+np_)*cin[i]]
            for j,C in enumerate(couts):
                L=np_*C
                ybyte=(p0*C)*es  # y base assumed 256-aligned
                vec = (ybyte | (L*es)) % 16 == 0
                step = VE if vec else 1
                for t in range(threads):
                    q=t*step
                    while q<L:
                        px=q//C; c=q-px*C
                        for k in range(step):
                            e=mp[off[j]+c]
                            v=0 if e<0 else stage[sbase[e//SHIFT]+px*cin[e//SHIFT]+e%SHIFT]
                            ys[j][p0*C+q+k]=v
                            c+=1
                            if c==C: c=0; px+=1
                        q+=threads*step
            p0+=blocks*P
    return ys
def ref(xs,cin,couts,mp,N,S):
    out=[];e0=0
    for C in couts:
        y=np.zeros((N*S,C),dtype=np.int64)
        for c in range(C):
            e=mp[e0+c]
            if e>=0: y[:,c]=xs[e//SHIFT].reshape(N*S,cin[e//SHIFT])[:,e%SHIFT]
        out.append(y.reshape(-1)); e0+=C
    return out
rng=np.random.default_rng(0)
cases=[]
m=[(k%2)*SHIFT+k//2 for k in range(116)]+[-1]*6
cases.append(([58,58],[58,64],m,3,35,2))
cases.append(([58,58],[58,64],m,2,9,1))
cases.append(([58,58],[58,64],m,3,35,4))
cases.append(([3,1,2],[5,3],[2,131072,-1,0,65536,131073,1,-1],2,24,4))
cases.append(([3,1,2],[5,3],[2,131072,-1,0,65536,131073,1,-1],2,24,2))
m2=[(k%2)*SHIFT+k//2 for k in range(976)]
cases.append(([488,488],[488,488],m2,2,49,2))
cases.append(([116,116],[232,116,120],[(k%2)*SHIFT+k//2 for k in range(232)]+[(k%2)*SHIFT+k//2 for k in range(116)]+[(k%2)*SHIFT+k//2 for k in range(116,232)]+[-1]*4,2,14*14,2))
for cin,couts,mp,N,S,es in cases:
    xs=[rng.integers(0,1000,N*S*c) for c in cin]
    r=ref(xs,cin,couts,mp,N,S)
    for blocks in (1,3,7):
        g=kernel(xs,cin,couts,mp,N,S,es,blocks)
        ok=all((a==b).all() for a,b in zip(g,r))
        print(cin,couts,N,S,es,blocks,'P=',gather_pixels(cin,es),'ok' if ok else 'MISMATCH')
