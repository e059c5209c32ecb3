#!/usr/bin/python3
"""PyTorch eager timings of the work dsrt_bench times, on the same shapes.

usage: torch_bench.py [threads] [repeats]   (compare with dsrt_bench threads repeats)
"""

import math
import sys
import time

import torch
import torch.nn.functional as F


def median_ms(repeats, f):
    f()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        f()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    B, T, D, H, Dh, Fd = 4, 256, 768, 12, 64, 3072
    BT = B * T
    with torch.no_grad():
        a, w = torch.randn(1024, 768), torch.randn(768, 3072) * 0.02
        print("matmul [1024,768]x[768,3072]     %8.3f ms" % median_ms(repeats, lambda: torch.matmul(a, w)))
        att = torch.randn(B, H, T, T)
        print("softmax [4,12,256,256]           %8.3f ms" % median_ms(repeats, lambda: torch.softmax(att, 3)))
        x, g, b = torch.randn(BT, D), torch.ones(D), torch.zeros(D)
        print("layer_norm [1024,768]            %8.3f ms" % median_ms(repeats, lambda: F.layer_norm(x, (D,), g, b, 1e-5)))
        h = torch.randn(BT, Fd)
        print("gelu_tanh [1024,3072]            %8.3f ms" % median_ms(repeats, lambda: F.gelu(h, approximate="tanh")))
        print("gelu (erf) [1024,3072]           %8.3f ms" % median_ms(repeats, lambda: F.gelu(h)))
        fb = torch.randn(Fd)
        print("add bias [1024,3072]+[3072]      %8.3f ms" % median_ms(repeats, lambda: h + fb))
        q4 = torch.randn(B, T, H, Dh)
        print("transpose [4,256,12,64]->0213    %8.3f ms" % median_ms(repeats, lambda: q4.permute(0, 2, 1, 3).contiguous()))
        qt, k4 = torch.randn(B, H, T, Dh), torch.randn(B, H, T, Dh)
        print("matmul q k^T [4,12,256,64]       %8.3f ms" % median_ms(repeats, lambda: torch.matmul(qt, k4.transpose(-1, -2))))

        V = 50257
        logits = torch.randn(BT, V)
        labels = (torch.arange(BT) * 7919) % V
        # F.cross_entropy materializes the log-softmax too (log_softmax + nll_loss).
        print("cross_entropy [1024,50257]       %8.3f ms" % median_ms(
            max(3, repeats // 4), lambda: F.cross_entropy(logits, labels)))
        del logits

        def p(*shape, scale=0.02):
            return torch.randn(*shape) * scale

        w_attn, b_attn, w_proj, b_proj = p(D, 3 * D), p(3 * D), p(D, D), p(D)
        w_fc, b_fc, w_fc2, b_fc2 = p(D, Fd), p(Fd), p(Fd, D), p(D)
        g1, be1, g2, be2 = torch.ones(D), torch.zeros(D), torch.ones(D), torch.zeros(D)
        resid = torch.randn(BT, D)
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
        neg_inf = torch.tensor(float("-inf"))
        scale = 1.0 / math.sqrt(Dh)

        # The same GPT-2 block (HF Conv1D: x @ W + b), eager.
        def block():
            h1 = F.layer_norm(resid, (D,), g1, be1, 1e-5)
            qkv = torch.addmm(b_attn, h1, w_attn).view(B, T, 3 * D)
            q, k, v = qkv.split(D, dim=2)
            q = q.reshape(B, T, H, Dh).permute(0, 2, 1, 3)
            k = k.reshape(B, T, H, Dh).permute(0, 2, 1, 3)
            v = v.reshape(B, T, H, Dh).permute(0, 2, 1, 3)
            s = torch.matmul(q, k.transpose(-1, -2)) * scale
            s = torch.where(causal, s, neg_inf)
            pr = torch.softmax(s, 3)
            ctx = torch.matmul(pr, v).permute(0, 2, 1, 3).reshape(BT, D)
            resid2 = resid + torch.addmm(b_proj, ctx, w_proj)
            h2 = F.layer_norm(resid2, (D,), g2, be2, 1e-5)
            act = F.gelu(torch.addmm(b_fc, h2, w_fc), approximate="tanh")
            return resid2 + torch.addmm(b_fc2, act, w_fc2)

        ms = median_ms(repeats, block)
        print("gpt2 block forward (B=4, T=256)  %8.3f ms  (x12 layers: %.1f ms)" % (ms, 12 * ms))

        # Backward kernels (the ATen kernels autograd calls) and optimizer
        # steps on the same shapes.
        aten = torch.ops.aten
        _, ln_mean, ln_rstd = aten.native_layer_norm(x, [D], g, b, 1e-5)
        dy_ln = torch.randn(BT, D)
        print("layer_norm_grad [1024,768]       %8.3f ms" % median_ms(repeats, lambda: aten.native_layer_norm_backward(
            dy_ln, x, [D], ln_mean, ln_rstd, g, b, [True, True, True])))
        probs, dprobs = torch.softmax(att, 3), torch.randn(B, H, T, T)
        print("softmax_grad [4,12,256,256]      %8.3f ms" % median_ms(
            repeats, lambda: torch._softmax_backward_data(dprobs, probs, 3, torch.float32)))
        logits = torch.randn(BT, V)
        logp = torch.log_softmax(logits, 1)
        del logits
        one, total_weight = torch.tensor(1.0), torch.tensor(float(BT))

        def ce_grad():  # what cross_entropy's backward runs: nll, then log-softmax
            dlogp = aten.nll_loss_backward(one, logp, labels, None, 1, -100, total_weight)
            return torch._log_softmax_backward_data(dlogp, logp, 1, torch.float32)

        print("cross_entropy_grad [1024,50257]  %8.3f ms" % median_ms(max(3, repeats // 4), ce_grad))
        del logp
        dtok = torch.randn(BT, D)
        print("gather_grad [1024] -> [50257,768]%8.3f ms" % median_ms(
            max(3, repeats // 4), lambda: aten.embedding_dense_backward(dtok, labels, V, -1, False)))
        cx, cw, cdy = torch.randn(B, D, T), p(3 * D, D, 1), torch.randn(B, 3 * D, T)
        conv_bwd = lambda dy_, x_, w_, st, pad, mask: aten.convolution_backward(
            dy_, x_, w_, None, st, pad, [1] * len(st), False, [0] * len(st), 1, mask)
        print("conv_grad_weight 1x1 c_attn      %8.3f ms" % median_ms(
            repeats, lambda: conv_bwd(cdy, cx, cw, [1], [0], [False, True, False])))
        print("conv_grad_input 1x1 c_attn       %8.3f ms" % median_ms(
            repeats, lambda: conv_bwd(cdy, cx, cw, [1], [0], [True, False, False])))
        cx, cw, cdy = torch.randn(8, 64, 56, 56), p(64, 64, 3, 3), torch.randn(8, 64, 56, 56)
        print("conv_grad_weight 3x3 [8,64,56,56]%8.3f ms" % median_ms(
            max(3, repeats // 4), lambda: conv_bwd(cdy, cx, cw, [1, 1], [1, 1], [False, True, False])))
        print("conv_grad_input 3x3 [8,64,56,56] %8.3f ms" % median_ms(
            max(3, repeats // 4), lambda: conv_bwd(cdy, cx, cw, [1, 1], [1, 1], [True, False, False])))
        del cx, cw, cdy

    param = torch.nn.Parameter(p(D, Fd))
    param.grad = p(D, Fd)
    opt = torch.optim.AdamW([param], lr=1e-4, weight_decay=0.01, foreach=False)
    opt.step()
    print("adamw [768,3072] in place        %8.3f ms" % median_ms(repeats, opt.step))
    grad = param.grad
    print("sum_of_squares [768,3072]        %8.3f ms" % median_ms(
        repeats, lambda: torch.linalg.vector_norm(grad)))


if __name__ == "__main__":
    main()
