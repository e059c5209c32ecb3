"""Small, deterministic PyTorch training models for the ONNX importer tests.

Every model's forward() returns the scalar training loss as its first output
(and the logits as its second), so the exported ONNX graph is a *training*
graph: the thing the compiler differentiates is the loss.

The modules are written so that torch.onnx.export (torch 1.13, opset 17)
emits only plain ONNX ops: RMSNorm's rsqrt is written as 1 / sqrt, SiLU as
x * sigmoid(x), masks as Where / Trilu over constants, and so on.

Each model has a config dataclass (sizes, example batch, seed) and a
`ZooModel` entry in `ZOO`, which knows how to build the module with fixed
weights and how to make its example inputs.
"""

import math
from dataclasses import dataclass
from typing import Callable, Dict, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

# Large finite negative for masked attention scores. A finite value keeps
# softmax and its gradient free of inf arithmetic (0 * inf = NaN) in lowerings
# that do not special-case -inf.
MASK_VALUE = -1e9

# Standard deviation of embedding tables. Small enough that the tied GPT-2
# head produces unsaturated logits (std ~ EMBED_STD * sqrt(d_model)).
EMBED_STD = 0.1


def _init_params(module: nn.Module) -> None:
    """Give every parameter a non-trivial deterministic value.

    nn.Linear keeps PyTorch's default init (non-zero weights *and* biases).
    Norm scales/shifts get values away from 1/0 so that a dropped bias or
    scale in a compiled graph changes the numbers.
    """
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.Embedding):
                m.weight.normal_(std=EMBED_STD)
            elif isinstance(m, (nn.LayerNorm, RMSNorm, nn.BatchNorm2d, nn.GroupNorm)):
                m.weight.copy_(1.0 + 0.1 * torch.randn_like(m.weight))
                if getattr(m, "bias", None) is not None:
                    m.bias.copy_(0.1 * torch.randn_like(m.bias))
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(0.1 * torch.randn_like(m.running_mean))
                m.running_var.copy_(1.0 + 0.5 * torch.rand_like(m.running_var))


def _split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[B, T, D] -> [B, H, T, D/H]."""
    b, t, d = x.shape
    return x.reshape(b, t, n_heads, d // n_heads).transpose(1, 2)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, T, D/H] -> [B, T, D]."""
    b, h, t, hd = x.shape
    return x.transpose(1, 2).reshape(b, t, h * hd)


def _lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy; labels equal to -100 are ignored."""
    vocab = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1), ignore_index=-100)


# --------------------------------------------------------------------------
# GPT-2
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class GPT2Config:
    vocab_size: int = 256
    max_positions: int = 16
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    eps: float = 1e-5
    batch: int = 2
    seq: int = 16
    seed: int = 0
    # F.gelu's approximate: "none" (exact erf) or "tanh" (GPT-2's own).
    gelu: str = "none"


class GPT2Attention(nn.Module):
    """Causal self-attention with a fused qkv projection."""

    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.d_model = cfg.d_model
        self.scale = 1.0 / math.sqrt(cfg.d_model // cfg.n_heads)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        p = cfg.max_positions
        # True strictly above the diagonal (future positions); masked_fill
        # over it exports as Where.
        future = torch.ones(p, p, dtype=torch.bool).triu(1).view(1, 1, p, p)
        self.register_buffer("future_mask", future, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        q, k, v = self.qkv(x).split(self.d_model, dim=2)
        q, k, v = (_split_heads(z, self.n_heads) for z in (q, k, v))
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        scores = scores.masked_fill(self.future_mask[:, :, :t, :t], MASK_VALUE)
        probs = torch.softmax(scores, dim=-1)
        return self.proj(_merge_heads(torch.matmul(probs, v)))


class GPT2Block(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=cfg.eps)
        self.attn = GPT2Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=cfg.eps)
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.fc_out = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.gelu = cfg.gelu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        # Exact (erf) GELU: exports as Div, Erf, Add, Mul, Mul; the tanh
        # form as Mul, Mul, Mul, Add, Mul, Tanh, Add, Mul, Mul (opset 17).
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x)), approximate=self.gelu))


class GPT2(nn.Module):
    """GPT-2 language model; the LM head is tied to the token embedding.

    `labels` are the next-token targets for each position (already shifted by
    the caller), -100 marks positions without a target.
    """

    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.max_positions, cfg.d_model)
        self.blocks = nn.ModuleList(GPT2Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=cfg.eps)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor):
        t = input_ids.shape[1]
        positions = torch.arange(t, dtype=torch.int64, device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        # Tied head, the same Parameter as the token embedding. Computed as
        # (wte @ x^T)^T rather than x @ wte^T: a Transpose of the parameter
        # would be constant-folded by the exporter into a second, untied copy
        # of the embedding; transposing the activations keeps one initializer.
        logits = torch.matmul(self.wte.weight, x.transpose(1, 2)).transpose(1, 2)
        return _lm_loss(logits, labels), logits


# --------------------------------------------------------------------------
# LLaMA
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 256
    max_positions: int = 16
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    ffn_dim: int = 176  # LLaMA's 2/3 * 4d rounded up to a multiple of 16
    eps: float = 1e-6
    rope_theta: float = 10000.0
    batch: int = 2
    seq: int = 16
    seed: int = 1
    # The rotary angles computed in the graph from the positions (Pow, Mul,
    # Cos, Sin), as Hugging Face's LLaMA exports them, instead of cos/sin
    # tables held as buffers.
    rope_in_graph: bool = False


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # 1 / sqrt(...) exports as Reciprocal(Sqrt(...)); torch.rsqrt would
        # export as Div(1, Sqrt(...)).
        inv_rms = 1.0 / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * inv_rms * self.weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaAttention(nn.Module):
    """Causal self-attention with rotary position embedding (no biases)."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        d = cfg.d_model
        head_dim = d // cfg.n_heads
        self.scale = 1.0 / math.sqrt(head_dim)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.head_dim, self.rope_theta, self.rope_in_graph = head_dim, cfg.rope_theta, cfg.rope_in_graph
        if not cfg.rope_in_graph:
            angles = self._angles(torch.arange(cfg.max_positions))
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)

    def _angles(self, positions: torch.Tensor) -> torch.Tensor:
        """[T, head_dim]: position * theta^(-2i / head_dim), both halves."""
        inv_freq = 1.0 / (self.rope_theta ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        angles = positions.float()[:, None] * inv_freq[None, :]
        return torch.cat((angles, angles), dim=-1)

    def _rope(self, x: torch.Tensor, t: int) -> torch.Tensor:
        if self.rope_in_graph:
            angles = self._angles(torch.arange(t, device=x.device))
            cos, sin = angles.cos(), angles.sin()
        else:
            cos, sin = self.cos[:t], self.sin[:t]
        return x * cos + _rotate_half(x) * sin

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        q = self._rope(_split_heads(self.q(x), self.n_heads), t)
        k = self._rope(_split_heads(self.k(x), self.n_heads), t)
        v = _split_heads(self.v(x), self.n_heads)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale + mask
        probs = torch.softmax(scores, dim=-1)
        return self.o(_merge_heads(torch.matmul(probs, v)))


class LlamaBlock(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.eps)
        self.attn = LlamaAttention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.eps)
        self.gate = nn.Linear(cfg.d_model, cfg.ffn_dim, bias=False)
        self.up = nn.Linear(cfg.d_model, cfg.ffn_dim, bias=False)
        self.down = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), mask)
        h = self.ffn_norm(x)
        gate = self.gate(h)
        # SiLU written out so the graph has Sigmoid and Mul.
        return x + self.down(gate * torch.sigmoid(gate) * self.up(h))


class Llama(nn.Module):
    """LLaMA language model with an untied LM head (labels pre-shifted)."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(LlamaBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor):
        t = input_ids.shape[1]
        # Additive causal mask: MASK_VALUE strictly above the diagonal (Trilu).
        mask = torch.full((t, t), MASK_VALUE, device=input_ids.device).triu(1)
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x, mask)
        logits = self.lm_head(self.norm(x))
        return _lm_loss(logits, labels), logits


# --------------------------------------------------------------------------
# BERT
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 256
    max_positions: int = 16
    type_vocab_size: int = 2
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    ffn_dim: int = 256
    eps: float = 1e-12
    batch: int = 2
    seq: int = 16
    seed: int = 2


class BertLayer(nn.Module):
    """Post-LayerNorm encoder layer with bidirectional attention."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.scale = 1.0 / math.sqrt(d // cfg.n_heads)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.attn_out = nn.Linear(d, d)
        self.attn_norm = nn.LayerNorm(d, eps=cfg.eps)
        self.fc = nn.Linear(d, cfg.ffn_dim)
        self.fc_out = nn.Linear(cfg.ffn_dim, d)
        self.ffn_norm = nn.LayerNorm(d, eps=cfg.eps)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        q, k, v = (_split_heads(f(x), self.n_heads) for f in (self.q, self.k, self.v))
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale + additive_mask
        probs = torch.softmax(scores, dim=-1)
        x = self.attn_norm(x + self.attn_out(_merge_heads(torch.matmul(probs, v))))
        return self.ffn_norm(x + self.fc_out(F.gelu(self.fc(x))))


class Bert(nn.Module):
    """BERT encoder with a masked-LM head.

    attention_mask is int64 [B, T] with 1 for real tokens and 0 for padding;
    labels are -100 everywhere except at the masked positions.
    """

    def __init__(self, cfg: BertConfig):
        super().__init__()
        d = cfg.d_model
        self.word = nn.Embedding(cfg.vocab_size, d)
        self.position = nn.Embedding(cfg.max_positions, d)
        self.token_type = nn.Embedding(cfg.type_vocab_size, d)
        self.embed_norm = nn.LayerNorm(d, eps=cfg.eps)
        # There is no token_type_ids input: every token is segment 0.
        self.register_buffer("position_ids", torch.arange(cfg.max_positions).unsqueeze(0), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(1, cfg.max_positions, dtype=torch.int64), persistent=False)
        self.layers = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.n_layers))
        self.head_fc = nn.Linear(d, d)
        self.head_norm = nn.LayerNorm(d, eps=cfg.eps)
        self.decoder = nn.Linear(d, cfg.vocab_size)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor):
        t = input_ids.shape[1]
        x = (
            self.word(input_ids)
            + self.position(self.position_ids[:, :t])
            + self.token_type(self.token_type_ids[:, :t])
        )
        x = self.embed_norm(x)
        # [B, T] keep-mask -> [B, 1, 1, T] additive mask (0 keep, MASK_VALUE drop).
        keep = attention_mask[:, None, None, :].to(x.dtype)
        additive_mask = (1.0 - keep) * MASK_VALUE
        for layer in self.layers:
            x = layer(x, additive_mask)
        logits = self.decoder(self.head_norm(F.gelu(self.head_fc(x))))
        return _lm_loss(logits, labels), logits


# --------------------------------------------------------------------------
# MLP and CNN classifiers
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class MLPConfig:
    in_dim: int = 32
    hidden: int = 64
    n_classes: int = 10
    batch: int = 8
    seed: int = 3


class MLP(nn.Module):
    def __init__(self, cfg: MLPConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.in_dim, cfg.hidden)
        self.fc2 = nn.Linear(cfg.hidden, cfg.hidden)
        self.fc3 = nn.Linear(cfg.hidden, cfg.n_classes)

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        logits = self.fc3(torch.tanh(self.fc2(torch.relu(self.fc1(x)))))
        return F.cross_entropy(logits, y), logits


@dataclass(frozen=True)
class CNNConfig:
    in_channels: int = 3
    image_size: int = 16
    channels: Tuple[int, int, int] = (8, 16, 16)
    n_classes: int = 10
    batch: int = 4
    seed: int = 4


class CNN(nn.Module):
    def __init__(self, cfg: CNNConfig):
        super().__init__()
        c1, c2, c3 = cfg.channels
        self.features = nn.Sequential(
            nn.Conv2d(cfg.in_channels, c1, kernel_size=3, padding=1),
            nn.BatchNorm2d(c1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, kernel_size=3, padding=1),
            nn.BatchNorm2d(c2),
            nn.ReLU(),
            # count_include_pad=False: with the default, the exporter emits an
            # explicit Pad in front of AveragePool even though padding is 0.
            nn.AvgPool2d(2, count_include_pad=False),
            nn.Conv2d(c2, c3, kernel_size=3, padding=1),
            nn.AdaptiveAvgPool2d(1),  # exports as GlobalAveragePool
            nn.Flatten(),
        )
        self.classifier = nn.Linear(c3, cfg.n_classes)

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        logits = self.classifier(self.features(x))
        return F.cross_entropy(logits, y), logits


@dataclass(frozen=True)
class BNMixerConfig:
    in_channels: int = 3
    image_size: int = 4  # 16 pixels, the MLP's tokens
    width: int = 16
    hidden: int = 64
    n_classes: int = 5
    # Training-mode BatchNorm: 8 x 16 values per channel.
    batch: int = 8
    seed: int = 23


class BNMixer(nn.Module):
    """Training-mode BatchNorm around a transformer-like MLP: a convolution
    and BatchNorm, the pixels as tokens through a residual MLP (Linear,
    ReLU, Linear: Megatron's column- then row-parallel pair under tensor
    parallelism), a second BatchNorm on its output, and a classifier."""

    def __init__(self, cfg: BNMixerConfig):
        super().__init__()
        # No bias in front of a BatchNorm (its gradient is zero but for
        # rounding, which Adam turns into steps of up to lr), as in ResNet.
        self.stem = nn.Conv2d(cfg.in_channels, cfg.width, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cfg.width)
        self.fc = nn.Linear(cfg.width, cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.width, bias=False)
        self.bn2 = nn.BatchNorm2d(cfg.width)
        self.head = nn.Linear(cfg.width, cfg.n_classes)
        self.size = cfg.image_size
        self.width = cfg.width

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        h = F.relu(self.bn1(self.stem(x)))
        t = h.flatten(2).transpose(1, 2)  # [B, pixels, width]
        t = t + self.proj(F.relu(self.fc(t)))
        h = self.bn2(t.transpose(1, 2).reshape(-1, self.width, self.size, self.size))
        logits = self.head(h.mean(dim=(2, 3)))
        return F.cross_entropy(logits, y), logits


@dataclass(frozen=True)
class MobileNetConfig:
    in_channels: int = 3
    image_size: int = 16
    stem: int = 8
    # (expansion, output channels, stride) of each inverted-residual block
    blocks: Tuple[Tuple[int, int, int], ...] = ((1, 8, 1), (4, 12, 2), (4, 12, 1))
    last: int = 24
    n_classes: int = 10
    batch: int = 4
    seed: int = 6


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expansion, 3x3 depthwise, 1x1 projection,
    with BatchNorm and ReLU6 (exported as Clip) and a residual where shapes
    allow."""

    def __init__(self, cin: int, cout: int, stride: int, expansion: int):
        super().__init__()
        hidden = cin * expansion
        layers = []
        if expansion != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return x + y if self.residual else y


class MobileNet(nn.Module):
    """A small MobileNetV2 (stem, inverted residuals) with MobileNetV3's
    HardSwish on the last 1x1 convolution."""

    def __init__(self, cfg: MobileNetConfig):
        super().__init__()
        layers = [
            nn.Conv2d(cfg.in_channels, cfg.stem, 3, 2, 1, bias=False),
            nn.BatchNorm2d(cfg.stem),
            nn.ReLU6(),
        ]
        cin = cfg.stem
        for expansion, cout, stride in cfg.blocks:
            layers.append(InvertedResidual(cin, cout, stride, expansion))
            cin = cout
        layers += [
            nn.Conv2d(cin, cfg.last, 1, bias=False),
            nn.BatchNorm2d(cfg.last),
            nn.Hardswish(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        ]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(cfg.last, cfg.n_classes)

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        logits = self.classifier(self.features(x))
        return F.cross_entropy(logits, y), logits


# --------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class UNetConfig:
    in_channels: int = 3
    image_size: int = 8
    channels: Tuple[int, int] = (8, 16)
    groups: int = 2
    n_classes: int = 3
    batch: int = 2
    seed: int = 7


class UNetBlock(nn.Module):
    """3x3 convolution, GroupNorm (exported below opset 18 as Reshape,
    InstanceNormalization, Reshape, Mul, Add), SiLU."""

    def __init__(self, cin: int, cout: int, groups: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm = nn.GroupNorm(groups, cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.norm(self.conv(x)))


class UNet(nn.Module):
    """A two-level U-Net as medical image segmentation uses it: max-pool
    down, ConvTranspose and bilinear Resize up, skip concatenation,
    per-pixel cross-entropy."""

    def __init__(self, cfg: UNetConfig):
        super().__init__()
        c1, c2 = cfg.channels
        self.down1 = UNetBlock(cfg.in_channels, c1, cfg.groups)
        self.down2 = UNetBlock(c1, c2, cfg.groups)
        self.up = nn.ConvTranspose2d(c2, c1, 2, stride=2)
        self.mix = nn.Conv2d(c2, c1, 1)
        self.up1 = UNetBlock(2 * c1, c1, cfg.groups)
        self.head = nn.Conv2d(c1, cfg.n_classes, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        a = self.down1(x)
        b = self.down2(F.max_pool2d(a, 2))
        upsampled = F.interpolate(self.mix(b), scale_factor=2, mode="bilinear", align_corners=False)
        u = self.up1(torch.cat([a, self.up(b) + upsampled], 1))
        logits = self.head(u)
        return F.cross_entropy(logits, y), logits


@dataclass(frozen=True)
class EinsumConfig:
    seq: int = 6
    d_model: int = 8
    n_heads: int = 2
    n_classes: int = 5
    batch: int = 3
    seed: int = 8


class EinsumAttention(nn.Module):
    """Self-attention written with torch.einsum (exported as Einsum): the
    projections, the scores, the weighted values; then mean pooling and a
    classifier."""

    def __init__(self, cfg: EinsumConfig):
        super().__init__()
        d, h = cfg.d_model, cfg.n_heads
        self.qkv = nn.Parameter(torch.randn(3, h, d, d // h) / d**0.5)
        self.proj = nn.Parameter(torch.randn(h, d // h, d) / d**0.5)
        self.norm = nn.LayerNorm(d)
        self.classifier = nn.Linear(d, cfg.n_classes)

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        q, k, v = torch.einsum("btd,nhde->nbhte", x, self.qkv)
        scores = torch.einsum("bhqe,bhke->bhqk", q, k) / q.shape[-1] ** 0.5
        attended = torch.einsum("bhqk,bhke->bhqe", scores.softmax(-1), v)
        h = self.norm(x + torch.einsum("bhte,hed->btd", attended, self.proj))
        # The loss alone: PyTorch 1.13 infers Einsum's batch axis only
        # symbolically, so a logits output would have no static shape.
        return (F.cross_entropy(self.classifier(h.mean(1)), y),)


def _segmentation_inputs(cfg) -> Dict[str, torch.Tensor]:
    """Images and a class per pixel (UNetConfig, VisionConfig)."""
    g = torch.Generator().manual_seed(cfg.seed)
    x = torch.randn(cfg.batch, cfg.in_channels, cfg.image_size, cfg.image_size, generator=g)
    y = torch.randint(0, cfg.n_classes, (cfg.batch, cfg.image_size, cfg.image_size), generator=g)
    return {"x": x, "y": y}


def _lm_inputs(vocab: int, batch: int, seq: int, seed: int) -> Dict[str, torch.Tensor]:
    """Random token stream; labels are the inputs shifted by one position."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    return {"input_ids": tokens[:, :-1].contiguous(), "labels": tokens[:, 1:].contiguous()}


def _bert_inputs(cfg: BertConfig) -> Dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(cfg.seed)
    input_ids = torch.randint(0, cfg.vocab_size, (cfg.batch, cfg.seq), generator=g)
    attention_mask = torch.ones(cfg.batch, cfg.seq, dtype=torch.int64)
    # Pad the tail of every sequence after the first one.
    for b in range(1, cfg.batch):
        attention_mask[b, cfg.seq - cfg.seq // 4 :] = 0
    # Predict ~25% of the real tokens; everything else is ignored (-100).
    chosen = (torch.rand(cfg.batch, cfg.seq, generator=g) < 0.25) & attention_mask.bool()
    chosen[:, 0] = True  # at least one target per sequence
    labels = torch.where(chosen, torch.randint(0, cfg.vocab_size, (cfg.batch, cfg.seq), generator=g), -100)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def _classifier_inputs(x_shape: Tuple[int, ...], n_classes: int, seed: int) -> Dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*x_shape, generator=g)
    y = torch.randint(0, n_classes, (x_shape[0],), generator=g)
    return {"x": x, "y": y}


# torchvision's model families (torchvision_models.py), small: NAME is
# "tv_" + the family. torchvision is imported only when one is built.
CLASSIFICATION_FAMILIES = ("resnet", "resnext", "wide_resnet", "mobilenet_v2", "mobilenet_v3", "efficientnet",
                           "regnet", "convnext", "shufflenet_v2", "squeezenet", "densenet", "mnasnet", "swin", "vit")
SEGMENTATION_FAMILIES = ("fcn", "deeplabv3", "lraspp")
# The families with BatchNorm (torchvision_models.build checks the list
# against the modules).
BATCHNORM_FAMILIES = ("resnet", "resnext", "wide_resnet", "mobilenet_v2", "mobilenet_v3", "efficientnet", "regnet",
                      "shufflenet_v2", "densenet", "mnasnet", "fcn", "deeplabv3", "lraspp")
# Those that train and export in training mode (batch statistics, running
# statistics updated): all but MNASNet, whose small model in training mode
# is chaotic in float32 itself: PyTorch's float32 and float64 runs part
# within 3 steps at every setting tried, so no comparison with PyTorch
# decides anything there (docs/models.md). It trains in eval mode, like
# ConvNeXt or Swin.
TRAIN_MODE_FAMILIES = tuple(f for f in BATCHNORM_FAMILIES if f != "mnasnet")
# Rows of a family trained in training mode besides its eval-mode row
# (name -> family): MNASNet's running statistics are still updated and
# checked there, though its trajectory cannot tell a wrong optimizer
# parameter from float32 noise (its eval-mode row does).
TRAIN_MODE_VARIANTS = {"mnasnet_bn": "mnasnet"}


@dataclass(frozen=True)
class VisionConfig:
    """Sizes of one torchvision family's small model."""

    family: str
    image_size: int = 32
    in_channels: int = 3
    n_classes: int = 5
    batch: int = 2
    seed: int = 21
    # A class per pixel (FCN, DeepLabV3, LRASPP) instead of per image.
    segmentation: bool = False


def _vision_config(family: str, train_mode: bool) -> VisionConfig:
    # Training-mode BatchNorm over a batch of 2 normalises the last stages'
    # 1 x 1 maps over two values each, where float32 rounding alone (PyTorch
    # float32 against float64) moves the trajectory by percents: a batch of 8.
    batch = 8 if train_mode else 2
    if family in SEGMENTATION_FAMILIES:
        return VisionConfig(family, segmentation=True, batch=batch)
    # ViT's patches and Swin's windows on a 16-pixel image.
    return VisionConfig(family, image_size=16 if family in ("vit", "swin") else 32, batch=batch)


def _torchvision_build(cfg: VisionConfig) -> nn.Module:
    import torchvision_models

    return torchvision_models.build(cfg)


def _torchvision_inputs(cfg: VisionConfig) -> Dict[str, torch.Tensor]:
    if cfg.segmentation:
        return _segmentation_inputs(cfg)
    return _classifier_inputs((cfg.batch, cfg.in_channels, cfg.image_size, cfg.image_size), cfg.n_classes, cfg.seed)


@dataclass(frozen=True)
class ZooModel:
    """A model of the zoo: how to build it and what to feed it.

    `inputs()` returns the example inputs in forward() argument order, keyed
    by their ONNX input names; `output_names` are the ONNX output names.
    """

    name: str
    config: object
    module_cls: Callable[[object], nn.Module]
    make_inputs: Callable[[object], Dict[str, torch.Tensor]]
    output_names: Tuple[str, ...] = ("loss", "logits")
    exported_by_default: bool = True
    # Parameters used in more than one place (weight tying), by state_dict name.
    tied: Tuple[str, ...] = ()
    # Trained and exported in training mode (torch.onnx.TrainingMode.TRAINING):
    # BatchNorm normalises with the batch's statistics and updates its
    # running statistics, as model.train() does. Otherwise eval mode.
    train_mode: bool = False

    def build(self) -> nn.Module:
        """The module in eval mode (train mode with train_mode), with weights
        fixed by the config's seed."""
        torch.manual_seed(self.config.seed)
        module = self.module_cls(self.config)
        _init_params(module)
        return module.train() if self.train_mode else module.eval()

    def inputs(self) -> Dict[str, torch.Tensor]:
        return self.make_inputs(self.config)


def _lm_entry(name: str, cfg, cls, **kwargs) -> ZooModel:
    return ZooModel(name, cfg, cls, lambda c: _lm_inputs(c.vocab_size, c.batch, c.seq, c.seed), **kwargs)


ZOO: Dict[str, ZooModel] = {
    m.name: m
    for m in (
        _lm_entry("gpt2", GPT2Config(), GPT2, tied=("wte.weight",)),
        _lm_entry(
            "gpt2_small",
            GPT2Config(vocab_size=50257, max_positions=1024, d_model=768, n_layers=12, n_heads=12, batch=4, seq=256),
            GPT2,
            exported_by_default=False,
            tied=("wte.weight",),
        ),
        # A vocabulary no tp size of 2..4 divides (tensor parallelism pads
        # it), with heads that 2, 3 and 4 all divide.
        _lm_entry(
            "gpt2_v101",
            GPT2Config(vocab_size=101, d_model=48, n_heads=12, n_layers=1),
            GPT2,
            exported_by_default=False,
            tied=("wte.weight",),
        ),
        # GPT-2's own activation, the tanh GELU (ds-recognize-gelu; the
        # matmuls' GELU epilogues).
        _lm_entry("gpt2_tanh", GPT2Config(gelu="tanh"), GPT2, exported_by_default=False,
                  tied=("wte.weight",)),
        _lm_entry("llama", LlamaConfig(), Llama),
        _lm_entry("llama_rope", LlamaConfig(rope_in_graph=True), Llama, exported_by_default=False),
        ZooModel("bert", BertConfig(), Bert, _bert_inputs),
        ZooModel(
            "mlp",
            MLPConfig(),
            MLP,
            lambda c: _classifier_inputs((c.batch, c.in_dim), c.n_classes, c.seed),
        ),
        ZooModel(
            "mobilenet",
            MobileNetConfig(),
            MobileNet,
            lambda c: _classifier_inputs(
                (c.batch, c.in_channels, c.image_size, c.image_size), c.n_classes, c.seed
            ),
            exported_by_default=False,
        ),
        ZooModel("unet", UNetConfig(), UNet, _segmentation_inputs, exported_by_default=False),
        ZooModel(
            "bn_mixer",
            BNMixerConfig(),
            BNMixer,
            lambda c: _classifier_inputs(
                (c.batch, c.in_channels, c.image_size, c.image_size), c.n_classes, c.seed
            ),
            exported_by_default=False,
            train_mode=True,
        ),
        ZooModel(
            "einsum",
            EinsumConfig(),
            EinsumAttention,
            lambda c: _classifier_inputs((c.batch, c.seq, c.d_model), c.n_classes, c.seed),
            output_names=("loss",),
            exported_by_default=False,
        ),
        *(ZooModel("tv_" + family, _vision_config(family, family in TRAIN_MODE_FAMILIES), _torchvision_build,
                   _torchvision_inputs, exported_by_default=False, train_mode=family in TRAIN_MODE_FAMILIES)
          for family in CLASSIFICATION_FAMILIES + SEGMENTATION_FAMILIES),
        *(ZooModel("tv_" + name, _vision_config(family, True), _torchvision_build, _torchvision_inputs,
                   exported_by_default=False, train_mode=True)
          for name, family in TRAIN_MODE_VARIANTS.items()),
        ZooModel(
            "cnn",
            CNNConfig(),
            CNN,
            lambda c: _classifier_inputs(
                (c.batch, c.in_channels, c.image_size, c.image_size), c.n_classes, c.seed
            ),
        ),
    )
}
