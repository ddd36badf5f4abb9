# ln_short_sim.py — src/cuda/layernorm.cu's layernorm_short (short_rows' choice of lanes
# per row and vectors per lane, the grid-stride loop over row groups, the xor shuffles
# within a group, the live-row masking) transcribed into numpy, every lane of every block
# emulated, against a direct layer norm (Y, Mean, InvStdDev). Written without a GPU to
# check the kernel's logic; keep it in step with the kernel. `python3 dev/ln_short_sim.py`.
import numpy as np
THREADS=256
def short_rows(D, VN):
    if D < VN or D % VN or D//VN > 128: return None
    Q=D//VN; l=1
    while l < 32 and l*4 < Q: l*=2
    nv=(Q+l-1)//l
    return (l,nv) if 1<=nv<=4 else None
def run(x, sc, bi, eps, VN, sm_count=2):
    rows, D = x.shape
    lpr, NV = short_rows(D, VN)
    n = rows*lpr; blocks=min((n+THREADS-1)//THREADS, sm_count*32); blocks=max(blocks,1)
    y=np.full_like(x, np.nan); mean_o=np.full(rows,np.nan); inv_o=np.full(rows,np.nan)
    Q=D//VN; groups=THREADS//lpr
    for b in range(blocks):
        base=b*groups
        while base < rows:
            # per thread state
            vals={}; s=np.zeros(THREADS)
            for t in range(THREADS):
                lane=t%lpr; group=t//lpr; r=base+group; live=r<rows
                v=np.zeros((NV,VN))
                for k in range(NV):
                    q=lane+k*lpr
                    if live and q<Q: v[k]=x[r, q*VN:(q+1)*VN]
                vals[t]=v; s[t]=v.sum()
            o=lpr//2
            while o>0:
                s=np.array([s[t]+s[t^o] for t in range(THREADS)]); o//=2
            q2=np.zeros(THREADS); mean=s/D
            for t in range(THREADS):
                lane=t%lpr; r=base+t//lpr; live=r<rows
                for k in range(NV):
                    if not (live and lane+k*lpr<Q): continue
                    q2[t]+=((vals[t][k]-mean[t])**2).sum()
            o=lpr//2
            while o>0:
                q2=np.array([q2[t]+q2[t^o] for t in range(THREADS)]); o//=2
            inv=1/np.sqrt(q2/D+eps)
            for t in range(THREADS):
                lane=t%lpr; r=base+t//lpr
                if r>=rows: continue
                for k in range(NV):
                    q=lane+k*lpr
                    if q>=Q: continue
                    j=np.arange(q*VN,(q+1)*VN)
                    y[r,j]=(vals[t][k]-mean[t])*inv[t]*sc[j]+bi[j]
                if lane==0: mean_o[r]=mean[t]; inv_o[r]=inv[t]
            base+=blocks*groups
    return y, mean_o, inv_o
rng=np.random.default_rng(1)
for rows,D,VN in [(35,96,8),(35,96,4),(15,192,8),(70,384,8),(70,384,4),(5,768,8),(600,8,8),(600,8,4),(3,1000,8),(300,64,8)]:
    if not short_rows(D,VN): print(rows,D,VN,'not short'); continue
    x=rng.standard_normal((rows,D))+2; sc=rng.standard_normal(D); bi=rng.standard_normal(D)
    y,m,i=run(x,sc,bi,1e-5,VN)
    mu=x.mean(1,keepdims=True); var=((x-mu)**2).mean(1,keepdims=True)
    ref=(x-mu)/np.sqrt(var+1e-5)*sc+bi
    err=max(np.abs(y-ref).max(), np.abs(m-mu[:,0]).max(), np.abs(i-1/np.sqrt(var[:,0]+1e-5)).max())
    print(rows,D,VN,short_rows(D,VN),'err',err,'OK' if err<1e-9 and not np.isnan(y).any() else 'BAD')
