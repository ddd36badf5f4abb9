"""Which parts of mobilenet_v2 (random weights, BatchNorm statistics measured on random
inputs as bench/side_by_side.py does) decide fp16's top-1 agreement with fp32? PyTorch's own
fp16 gets 95.7% on 256 random inputs; this runs the network in fp16 with chosen parts kept
in fp32 and prints max relative error and top-1 agreement for each choice.

    python3 bench/mobilenet_precision.py
"""
import copy
import torch
import torchvision

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(0)
model = torchvision.models.mobilenet_v2()
for m in model.modules():
    if isinstance(m, torch.nn.BatchNorm2d):
        m.momentum = None
        m.reset_running_stats()
model.train().cuda()
with torch.no_grad():
    g = torch.Generator(device="cuda").manual_seed(3)
    for _ in range(8):
        model(torch.randn(32, 3, 224, 224, device="cuda", generator=g))
model.eval()

g = torch.Generator(device="cuda").manual_seed(7)
X = torch.randn(256, 3, 224, 224, device="cuda", generator=g)
with torch.inference_mode():
    ref = model(X).float()


class F32(torch.nn.Module):
    """runs the wrapped module in fp32 on an fp16 input and hands fp16 on (or fp32 when last)"""
    def __init__(self, m, out_half=True):
        super().__init__()
        self.m = copy.deepcopy(m).float()
        self.out_half = out_half

    def forward(self, x):
        y = self.m(x.float())
        return y.half() if self.out_half else y


def run(label, edit):
    h = copy.deepcopy(model).half()
    edit(h)
    with torch.inference_mode():
        y = h(X.half()).float()
    err = ((y - ref).abs().max(dim=1).values / ref.abs().max(dim=1).values).max().item()
    top = (y.argmax(1) == ref.argmax(1)).float().mean().item() * 100
    # the margin between fp32's top two logits, relative to the logits' spread
    s = ref.sort(dim=1, descending=True).values
    print(f"{label:48s} max rel err {err:8.2e}  top-1 {top:5.1f}%", flush=True)
    return s


def keep(idx_from, idx_to=None):
    def f(h):
        for i in range(idx_from, idx_to if idx_to is not None else len(h.features)):
            h.features[i] = F32(model.features[i])
    return f


def head_f32(h):
    h.classifier = F32(model.classifier, out_half=False)


def pool_head_f32(h):
    # conv 320->1280 + BN + ReLU6 computed from the fp16 input, its output, the pool and the
    # classifier fp32
    h.features[18] = F32(model.features[18], out_half=False)
    h.classifier = F32(model.classifier, out_half=False)


s = run("all fp16", lambda h: None)
margin = (s[:, 0] - s[:, 1]) / s.std(dim=1)
print("fp32 top-1 margin / logit std: median %.4f, 5th pct %.4f" % (
    margin.median().item(), margin.quantile(0.05).item()))
run("classifier fp32", head_f32)
run("last conv out, pool + classifier fp32", pool_head_f32)
run("features[14:] + classifier fp32", lambda h: (keep(14)(h), head_f32(h)))
run("features[7:] + classifier fp32", lambda h: (keep(7)(h), head_f32(h)))
run("stem features[0] fp32", keep(0, 1))
run("features[0:7] fp32", keep(0, 7))
run("everything but classifier fp32", keep(0))
