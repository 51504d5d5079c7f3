import numpy as np
# Fit e^r ~ 1 + r + r^2*(c2 + c3 r + ... + c_deg r^(deg-2)) on [-ln2/2, ln2/2], minimising max relative error (iterated weighted LSQ ~ Lawson)
a=np.log(2)/2
deg=6
x=np.cos(np.linspace(0,np.pi,4001))*a
f=np.exp(x)
# unknowns c2..c_deg ; residual (1+x+x^2 P(x) - e^x)/e^x
A=np.stack([x**k for k in range(2,deg+1)],1)/f[:,None]
y=(f-1-x)/f
w=np.ones_like(x)
for it in range(200):
    W=np.sqrt(w)
    c,*_=np.linalg.lstsq(A*W[:,None],y*W,rcond=None)
    r=np.abs(A@c-y)
    w=w*r; w/=w.sum()
print("maxrel",r.max())
# round to float32 and evaluate in float32 Horner with FMA emulation (double)
c32=c.astype(np.float32)
for k,v in zip(range(2,deg+1),c32): print(k, "%.9e" % float(v))
