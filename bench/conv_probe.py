"""What cuDNN (through PyTorch, cudnn.benchmark on) can do for mnist-net's convolutions at
batch 64, per layout and precision: forward, backward-data and backward-filter, each timed
as 50 calls captured in one CUDA graph (no launch overhead), median of 15 replays. Also one
whole mnist-net training step (forward, backward, Adadelta) captured as a CUDA graph, so
kiln's step can be set against the best a graph-captured PyTorch step gets from cuDNN.

    python3 bench/conv_probe.py
"""
import torch
import torch.nn.functional as F

torch.backends.cudnn.benchmark = True
dev = "cuda"


def graph_time(fn, n=50, reps=15):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    ts = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000 / n)
    ts.sort()
    return ts[len(ts) // 2]


def conv_case(name, x_shape, w_shape, dgrad=True):
    for label, dt, tf32, cl in [("f32 NCHW tf32", torch.float32, True, False),
                                ("f32 NCHW strict", torch.float32, False, False),
                                ("f32 NHWC tf32", torch.float32, True, True),
                                ("f16 NCHW", torch.float16, True, False),
                                ("f16 NHWC", torch.float16, True, True),
                                ("bf16 NHWC", torch.bfloat16, True, True)]:
        torch.backends.cudnn.allow_tf32 = tf32
        mf = torch.channels_last if cl else torch.contiguous_format
        x = torch.randn(x_shape, device=dev, dtype=dt).to(memory_format=mf)
        w = (torch.randn(w_shape, device=dev, dtype=dt) * 0.1).to(memory_format=mf)
        y = F.conv2d(x, w)
        gy = torch.randn_like(y).to(memory_format=mf)
        fl = 2 * y.numel() * w_shape[1] * w_shape[2] * w_shape[3]
        out = {}
        out["fwd"] = graph_time(lambda: F.conv2d(x, w))
        if dgrad:
            out["dgrad"] = graph_time(lambda: torch.ops.aten.convolution_backward(
                gy, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, False, False]))
        out["wgrad"] = graph_time(lambda: torch.ops.aten.convolution_backward(
            gy, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [False, True, False]))
        print(f"{name:6s} {label:16s} " + "  ".join(
            f"{k} {v:6.1f} us ({fl / v / 1e6:5.1f} TFLOP/s)" for k, v in out.items()), flush=True)
    torch.backends.cudnn.allow_tf32 = True


from mnist_net import Net  # noqa: E402 (bench/, the script's own folder, is on sys.path)


def step_case(label, amp, cl):
    torch.manual_seed(0)
    net = Net().to(dev)
    if cl:
        net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.Adadelta(net.parameters(), lr=1.0, capturable=True)
    x = torch.randn(64, 1, 28, 28, device=dev)
    t = torch.randint(0, 10, (64,), device=dev)

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = F.nll_loss(net(x), t)
        loss.backward()
        opt.step()
    print(f"torch graph step {label:24s} {graph_time(step, n=20, reps=15):7.1f} us", flush=True)


if __name__ == "__main__":  # bench/conv_train_probe.py imports graph_time
    conv_case("conv1", (64, 1, 28, 28), (32, 1, 3, 3), dgrad=False)
    conv_case("conv2", (64, 32, 26, 26), (64, 32, 3, 3))
    step_case("f32 tf32 NCHW", False, False)
    step_case("amp f16 NCHW", True, False)
    step_case("amp f16 channels_last", True, True)
