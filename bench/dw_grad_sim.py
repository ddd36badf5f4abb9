#!/usr/bin/env python3
"""dw_grad_sim.py — a Python port of conv_depthwise_grad.cu's weight-gradient kernel (dwg_nhwc:
its tiling wtile_for, the shared-memory staging, each thread's loops and the fixed-order
reductions), run block by block and thread by thread on small cases against a direct sum,
with unstaged shared memory poisoned (NaN). Written while no GPU was at hand, to check the
indexing before the first GPU run; keep it in step with the kernel. Usage:
python3 bench/dw_grad_sim.py (numpy; ~1 minute). Prints OK or BAD per case and dtype size."""
import sys

import numpy as np

THREADS=256; QD=4; TO=4; GMAX=1024; SMEM=48*1024; WS_CAP=8<<20
def cdiv(a,b): return -(-a//b)
def wtile_for(g, es):
    N,C,H,W,OH,OW,kh,kw,sh,sw,dh,dw,pt,pl = g
    if C%QD: return None
    t=dict(QB=min(C//QD,4), R=min(OH,8), OWt=min(OW,64))
    while True:
        P=THREADS//(t['QB']*kh); steps=cdiv(t['OWt'],TO); P=min(P,steps); P=max(P,1)
        L=cdiv(steps,P)*TO; P=cdiv(t['OWt'],L)
        t.update(P=P,L=L,xr=(t['R']-1)*sh+(kh-1)*dh+1, xc=(t['OWt']-1)*sw+(kw-1)*dw+1)
        cb=t['QB']*QD
        pix_bytes=cb*es; row_bytes=t['xc']*pix_bytes
        extra=((pix_bytes-row_bytes%128)%128+128)%128 if pix_bytes<128 else 0
        t['rp']=(row_bytes+extra)//es
        assert (row_bytes+extra)%es==0 and (row_bytes+extra)%(4*es)==0
        stage=t['xr']*t['rp']*es+t['R']*t['OWt']*cb*es; red=P*cb*kh*kw*4
        if max(stage,red)<=SMEM: break
        if t['R']>1: t['R']-=1
        elif t['OWt']>8: t['OWt']//=2
        elif t['QB']>1: t['QB']-=1
        else: return None
    t['rows_t']=cdiv(OH,t['R']); t['cols_t']=cdiv(OW,t['OWt'])
    t['slabs']=N*t['rows_t']*t['cols_t']; t['chunks']=cdiv(C//QD,t['QB'])
    row=C*kh*kw*4; G=max(1,WS_CAP//row); G=min(G,GMAX,t['slabs']); t['G']=G
    return t

def dwg_nhwc(x, dy, g, t, G=None):
    # x: (N,H,W,C) float32, dy (N,OH,OW,C)
    N,C,H,W,OH,OW,kh,kw,sh,sw,dh,dw,pt,pl = g
    UNIT = sw==1 and dw==1
    QB=t['QB']; cb=QB*QD; kk=kh*kw
    G = t['G'] if G is None else G
    part=np.full((G, C*kk), np.nan, np.float32)
    nthreads=QB*t['P']*kh
    for bx in range(G):
      for by in range(t['chunks']):
        c_base=by*cb
        acc=np.zeros((nthreads, kw, QD), np.float64)
        for s in range(bx, t['slabs'], G):
            r_=s; ct=r_%t['cols_t']; r_//=t['cols_t']; rt=r_%t['rows_t']; n=r_//t['rows_t']
            oh0=rt*t['R']; ow0=ct*t['OWt']; ih0=oh0*sh-pt; iw0=ow0*sw-pl
            sx=np.full((t['xr']*t['rp'],), np.nan, np.float32); sd=np.zeros((t['R']*t['OWt'], cb), np.float32)
            sx[:]=np.nan; sd[:]=np.nan
            for e in range(t['xr']*t['xc']*QB):
                qq=e%QB; pix=e//QB; pr=pix//t['xc']; pc=pix-pr*t['xc']; ih=ih0+pr; iw=iw0+pc; c=c_base+qq*QD
                v=np.zeros(QD,np.float32)
                if 0<=ih<H and 0<=iw<W and c<C: v=x[n,ih,iw,c:c+4]
                sx[pr*t['rp']+pc*cb+qq*QD:pr*t['rp']+pc*cb+qq*QD+4]=v
            for e in range(t['R']*t['OWt']*QB):
                qq=e%QB; pix=e//QB; r=pix//t['OWt']; oc=pix-r*t['OWt']; oh=oh0+r; ow=ow0+oc; c=c_base+qq*QD
                v=np.zeros(QD,np.float32)
                if oh<OH and ow<OW and c<C: v=dy[n,oh,ow,c:c+4]
                sd[pix, qq*QD:qq*QD+4]=v
            for tid in range(nthreads):
                q=tid%QB; rest=tid//QB; i=rest%kh; p=rest//kh
                oa=p*t['L']; ob=min(oa+t['L'], t['OWt'], OW-ow0)
                for r in range(t['R']):
                    if oh0+r>=OH: break
                    xrow=(r*sh+i*dh)*t['rp']+q*QD; drow=r*t['OWt']
                    if UNIT:
                        o=oa
                        while o<ob:
                            nv=ob-o
                            dv=[sd[drow+o+k, q*QD:q*QD+4] if k<nv else np.zeros(4) for k in range(TO)]
                            xv=[sx[xrow+(o+u)*cb:xrow+(o+u)*cb+4] if u<nv+kw-1 else np.zeros(4) for u in range(TO+kw-1)]
                            for k in range(TO):
                                for j in range(kw):
                                    if k<nv: acc[tid,j]+=dv[k]*xv[k+j]
                            o+=TO
                    else:
                        for o in range(oa,ob):
                            dv=sd[drow+o, q*QD:q*QD+4]
                            for j in range(kw):
                                acc[tid,j]+=dv*sx[xrow+(o*sw+j*dw)*cb:xrow+(o*sw+j*dw)*cb+4]
        red=np.full((t['P']*cb*kh*kw,), np.nan)
        for tid in range(nthreads):
            q=tid%QB; rest=tid//QB; i=rest%kh; p=rest//kh
            for j in range(kw):
                for ch in range(QD): red[((p*cb+q*QD+ch)*kh+i)*kw+j]=acc[tid,j,ch]
        for e in range(cb*kk):
            cl=e//kk; k=e-cl*kk
            if c_base+cl>=C: continue
            part[bx,(c_base+cl)*kk+k]=sum(red[(pp*cb+cl)*kk+k] for pp in range(t['P']))
    return part.sum(0).reshape(C,kh,kw)

def ref_dw(x,dy,g):
    N,C,H,W,OH,OW,kh,kw,sh,sw,dh,dw,pt,pl = g
    out=np.zeros((C,kh,kw))
    for i in range(kh):
        for j in range(kw):
            for oh in range(OH):
                ih=oh*sh+i*dh-pt
                if not 0<=ih<H: continue
                for ow in range(OW):
                    iw=ow*sw+j*dw-pl
                    if not 0<=iw<W: continue
                    out[:,i,j]+= (dy[:,oh,ow,:]*x[:,ih,iw,:]).sum(0)
    return out

def geo(N,C,H,W,kh,kw,sh=1,sw=1,dh=1,dw=1,pt=0,pl=0,pb=None,pr=None):
    pb=pt if pb is None else pb; pr=pl if pr is None else pr
    OH=(H+pt+pb-((kh-1)*dh+1))//sh+1; OW=(W+pl+pr-((kw-1)*dw+1))//sw+1
    return (N,C,H,W,OH,OW,kh,kw,sh,sw,dh,dw,pt,pl)

rng=np.random.default_rng(0)
cases=[geo(2,16,13,12,7,7,pt=3,pl=3), geo(3,32,20,19,7,7,pt=3,pl=3), geo(2,24,15,15,3,3,2,2,pt=1,pl=1),
       geo(1,12,10,9,3,3,dh=2,dw=2,pt=1,pl=2,pb=2,pr=0), geo(1,8,5,70,3,3,pt=1,pl=1), geo(1,8,12,12,9,9,pt=4,pl=4),
       geo(2,16,9,7,5,3,2,1,pt=2,pl=1), geo(1,8,8,15,7,7,dh=1,dw=2,pt=3,pl=3)]
bad = 0
for es in (2,4):
  for g in cases:
    t=wtile_for(g,es)
    N,C,H,W,OH,OW=g[:6]
    x=rng.uniform(-1,1,(N,H,W,C)).astype(np.float32); dy=rng.uniform(-1,1,(N,OH,OW,C)).astype(np.float32)
    ref=ref_dw(x,dy,g)
    for Gover in (None, 1, 2):
        got=dwg_nhwc(x,dy,g,t,Gover)
        err=np.abs(got-ref).max()
        print(es, g, {k:t[k] for k in ('QB','R','OWt','P','L','G','chunks')}, Gover, 'err', err, 'OK' if err<1e-4 else 'BAD')
        bad += not err < 1e-4
print('%d bad' % bad)
sys.exit(1 if bad else 0)
