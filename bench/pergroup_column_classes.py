"""Entropy estimate (bytes, incl. ~2 B per table entry and the class side information) of one synthetic int6 mlp.fc
group (3 x 2048 x 512, log-normal row and column scales) under: one histogram, pergroup mode 1, per-column scale
classes (8/16/32, by quantile of the column mean |q|), both; and lrzip -z -L 9 on its column-major bytes."""
import numpy as np, torch, subprocess, tempfile, os
torch.manual_seed(0); g = torch.Generator().manual_seed(0)
t = torch.distributions.StudentT(5.0)
L, R, C = 3, 2048, 512
mats = []
for _ in range(L):
    w = t.sample((R, C)) * 0.02 * torch.exp(0.3*torch.randn(R,1,generator=g)) * torch.exp(0.3*torch.randn(1,C,generator=g))
    s = (11.5 * w.std(dim=1) / 31).half().float()
    mats.append(torch.clamp(torch.round(w / s[:, None]), -31, 31).to(torch.int8).numpy())
X = np.stack(mats).astype(np.int32)
def H(vals, ctx):
    b = vals - vals.min(); K = b.max() + 1
    c = np.bincount((ctx * K + b).ravel()).reshape(-1, K)
    p = c / np.maximum(c.sum(1, keepdims=True), 1)
    return -(c * np.log2(np.where(c > 0, p, 1))).sum() / 8 + 2 * np.count_nonzero(c)
print("order0", H(X, np.zeros_like(X)))
prev = np.concatenate([np.zeros_like(X[:, :1]), X[:, :-1]], 1)
print("mode1 |above|", H(X, np.minimum(np.abs(prev), 3)))
for classes in (8, 16, 32):
    m = np.abs(X).mean(1)  # (L, C) column mean |q|
    edges = np.quantile(m, np.linspace(0, 1, classes + 1)[1:-1])
    cls = np.searchsorted(edges, m)  # (L, C)
    ctx = np.broadcast_to(cls[:, None, :], X.shape)
    print("colclass", classes, H(X, ctx) + L * C * np.log2(classes) / 8)
    ctx2 = ctx * 4 + np.minimum(np.abs(prev), 3)
    print("colclass+above", classes, H(X, ctx2) + L * C * np.log2(classes) / 8)
data = np.ascontiguousarray(X.astype(np.int8).transpose(0, 2, 1)).tobytes()
with tempfile.TemporaryDirectory() as d:
    open(d + "/in", "wb").write(data)
    subprocess.run(["lrzip", "-z", "-L", "9", "-q", "-f", "-o", d + "/out", d + "/in"], check=True, capture_output=True)
    print("lrzip", os.path.getsize(d + "/out"))
