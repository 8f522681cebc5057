#!/usr/bin/env python3
"""PyTorch's numbers for core/src/model/conv/tests.rs (`conv2d_matches_pytorch`,
`pools_match_pytorch`): F.conv2d (batch 2, 2 channels of 5 x 4, 3 filters of
3 x 3, stride 2, padding 1), F.max_pool2d(x, 2, 2) on ties and
F.avg_pool2d(x, 2, 1), forward and backward, on dyadic values (every sum exact
in float32, so the numbers do not depend on either side's order). Prints the
Rust constants the test holds.

Run:  .venv/bin/python scripts/conv_reference.py
"""
import torch, torch.nn.functional as F
torch.set_default_dtype(torch.float32)
def v(n, a, m, off, d): return torch.tensor([((i*a) % m - off)/d for i in range(n)], dtype=torch.float32)
B,C,H,W,Fo,K,S,P = 2,2,5,4,3,3,2,1
x = v(B*C*H*W,7,13,6,4).view(B,C,H,W).requires_grad_()
w = v(Fo*C*K*K,5,11,5,8).view(Fo,C,K,K).requires_grad_()
b = torch.tensor([(i-1)/2 for i in range(Fo)], dtype=torch.float32).requires_grad_()
z = F.conv2d(x,w,b,stride=S,padding=P)
dz = v(z.numel(),3,7,3,2).view_as(z)
z.backward(dz)
def rs(name,t): print(f"const {name}: [f32; {t.numel()}] = [{', '.join(repr(float(u)) for u in t.detach().flatten())}];")
print("// z", list(z.shape))
rs("Z", z); rs("DW", w.grad); rs("DB", b.grad); rs("DX", x.grad)
# pools: 1 image, 2 channels, 5x5, kernel 2 stride 2 (max, with ties) and kernel 3 stride 1
x2 = torch.tensor([float(((i*5) % 4)) for i in range(2*5*5)]).view(1,2,5,5).requires_grad_()
mo = F.max_pool2d(x2, 2, 2); d = v(mo.numel(),3,7,3,2).view_as(mo); mo.backward(d)
rs("MAX", mo); rs("DMAX", x2.grad)
x3 = v(2*5*5,7,13,6,4).view(1,2,5,5).requires_grad_()
ao = F.avg_pool2d(x3, 2, 1); d = v(ao.numel(),3,7,3,2).view_as(ao); ao.backward(d)
rs("AVG", ao); rs("DAVG", x3.grad)
