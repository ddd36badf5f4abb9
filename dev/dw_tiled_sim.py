# dw_tiled_sim.py — src/cuda/conv_depthwise.cu's tiled depthwise kernel (tile_for and
# dw_nhwc_tiled) transcribed line by line into numpy, run against a direct convolution
# on the shapes of the GPU tests, for f16 (es 2) and f32 (es 4) tiles. Written without a
# GPU to check the kernel's index math (tile decode, patch fill, row pitch, sliding
# window); keep it in step with the kernel. `python3 dev/dw_tiled_sim.py` (~1 minute).
import numpy as np, itertools, sys
THREADS=256; TCH=4; TT=8
def tile_for(g, es):
    S=g['sh']
    if S not in (1,2) or g['sw']!=S or g['dh']!=1 or g['dw']!=1 or g['C']%8: return None
    need=(g['OW']+TT-1)//TT; parts=(need+7)//8
    t={}; t['nct']=(need+parts-1)//parts; t['th']=g['OH'] if g['OH']<8 else 8
    Q4=g['C']//TCH; qb=THREADS//(t['nct']*t['th'])
    qb = 2 if qb<2 else qb & ~1
    if qb>Q4: qb=Q4
    while True:
        t['qb']=qb; t['ph']=(t['th']-1)*S+g['kh']; t['pw']=(t['nct']*TT-1)*S+g['kw']
        gb=qb*TCH*es; rb=t['pw']*qb*TCH*es
        # C semantics of % with negatives
        def cmod(a,b): return int(np.fmod(a,b))
        # S rows apart in the patch: S * row pitch = gb (mod 128); row pitch stays a multiple of 16 bytes
        win=128//S
        extra = cmod(cmod(gb//S - cmod(rb,win),win)+win,win) if gb<128 else 0
        assert extra % 8 == 0 and (rb+extra) % 8 == 0
        t['rp']=(rb+extra)//es
        smem=g['kh']*g['kw']*qb*TCH*4 + t['ph']*t['rp']*es
        if smem<=48*1024: break
        if qb>2: qb-=2
        elif t['th']>1: t['th']-=1
        else: return None
    t['rows_t']=(g['OH']+t['th']-1)//t['th']; t['cols_t']=(g['OW']+t['nct']*TT-1)//(t['nct']*TT)
    t['chunks']=(Q4+t['qb']-1)//t['qb']
    return t
def run(g, x, w, b, es):
    t=tile_for(g, es); assert t, g
    N,C,H,W,OH,OW,kh,kw,pt,pl=[g[k] for k in 'N C H W OH OW kh kw pt pl'.split()]
    y=np.full((N,OH,OW,C), np.nan)
    items=t['qb']*t['th']*t['nct']; threads=min(256,(items+31)//32*32)
    cb=t['qb']*TCH
    nblocks=N*t['rows_t']*t['cols_t']*t['chunks']
    for bi0 in range(nblocks):
        bi=bi0; chunk=bi%t['chunks']; bi//=t['chunks']; ctile=bi%t['cols_t']; bi//=t['cols_t']; rtile=bi%t['rows_t']; n=bi//t['rows_t']
        S=g['sh']
        c_base=chunk*cb; oh0=rtile*t['th']; ow0=ctile*t['nct']*TT; ih0=oh0*S-pt; iw0=ow0*S-pl
        sw=np.zeros(kh*kw*cb)
        for i in range(kh*kw*cb):
            k=i//cb; c=c_base+(i-k*cb); sw[i]= w[c,k//kw,k%kw] if c<C else 0
        sp=np.full(t['ph']*t['rp'], np.nan)
        for i in range(t['ph']*t['pw']*t['qb']):
            q=i%t['qb']; pix=i//t['qb']; pr=pix//t['pw']; pc=pix-pr*t['pw']
            ih=ih0+pr; iw=iw0+pc; c=c_base+q*TCH
            v = x[n,ih,iw,c:c+4] if (0<=ih<H and 0<=iw<W and c<C) else np.zeros(4)
            base=pr*t['rp']+pc*cb+q*TCH
            assert base+4 <= len(sp)
            sp[base:base+4]=v
        for it in range(items):
            q=it%t['qb']; rest=it//t['qb']; r0=rest%t['th']; ct=rest//t['th']
            oh=oh0+r0; owa=ow0+ct*TT; c0=c_base+q*TCH
            if oh>=OH or owa>=OW or c0>=C: continue
            acc=np.tile(b[c0:c0+4],(TT,1)).astype(float)
            span=(TT-1)*S+kw
            for r in range(kh):
                wr=[sw[(r*kw+s2)*cb+q*TCH:(r*kw+s2)*cb+q*TCH+4] for s2 in range(kw)]
                prow=(r0*S+r)*t['rp']+(ct*TT*S)*cb+q*TCH
                for u in range(span):
                    v=sp[prow+u*cb:prow+u*cb+4]
                    assert not np.isnan(v).any()
                    for j in range(TT):
                        s2=u-j*S
                        if 0<=s2<kw: acc[j]+=v*wr[s2]
            for j in range(TT):
                if owa+j>=OW: break
                y[n,oh,owa+j,c0:c0+4]=acc[j]
    return y, t
def ref(g,x,w,b):
    N,C,H,W,OH,OW,kh,kw,pt,pl=[g[k] for k in 'N C H W OH OW kh kw pt pl'.split()]
    S=g['sh']
    y=np.zeros((N,OH,OW,C))+b
    for oh,ow,r,s in itertools.product(range(OH),range(OW),range(kh),range(kw)):
        ih=oh*S-pt+r; iw=ow*S-pl+s
        if 0<=ih<H and 0<=iw<W: y[:,oh,ow,:]+=x[:,ih,iw,:]*w[:,r,s]
    return y
rng=np.random.default_rng(0)
cases=[(2,96,20,19,7,3,3,3,3),(1,40,9,60,3,1,1,1,1),(1,768,7,7,7,3,3,3,3),(1,16,7,13,7,3,3,3,3),(1,96,9,19,7,3,3,3,3),(1,144,10,13,3,1,1,1,1),(1,40,6,66,5,2,2,2,2),(2,24,11,9,5,2,2,2,2),(1,16,1,21,5,0,2,0,2),(1,32,14,13,7,3,3,3,3),(1,8,10,12,9,4,4,4,4),(1,96,56,56,7,3,3,3,3),(1,384,14,14,7,3,3,3,3)]
cases=[c+(1,) for c in cases]+[(2,96,20,19,3,1,1,1,1,2),(1,144,15,15,5,2,2,2,2,2),(1,8,10,11,3,0,1,2,1,2),(1,96,112,112,3,1,1,1,1,2),(1,40,6,66,5,2,2,2,2,2),(2,48,17,18,5,2,2,2,2,2),(1,96,11,20,3,1,1,1,1,2),(1,144,9,9,5,2,2,2,2,2)]
for (N,C,H,W,k,pt,pl,pb,pr_,S) in cases:
    kh = 1 if H==1 else k
    if H==1: pt=pb=0
    OH=(H+pt+pb-kh)//S+1; OW=(W+pl+pr_-k)//S+1
    g=dict(N=N,C=C,H=H,W=W,OH=OH,OW=OW,kh=kh,kw=k,sh=S,sw=S,dh=1,dw=1,pt=pt,pl=pl)
    x=rng.standard_normal((N,H,W,C)); w=rng.standard_normal((C,kh,k)); b=rng.standard_normal(C)
    for es in (2,4):
        y,t=run(g,x,w,b,es); r=ref(g,x,w,b)
        err=np.abs(y-r).max()
        print(N,C,H,W,k,'stride',S,'es',es,t['th'],t['nct'],t['qb'],t['rp'],'err',err, 'OK' if err<1e-9 and not np.isnan(y).any() else 'BAD'); sys.stdout.flush()
