"""Gradient traffic of one training step of real models, bucketed the way DDP buckets it.

Models are built on PyTorch's ``meta`` device (shapes only: no memory, no download) from their
published configurations:

- ResNet-50 (He et al. 2016; torchvision ``resnet50``): 25,557,032 parameters.
- BERT-large, uncased (Devlin et al. 2019; 24 layers, hidden 1024, 16 heads, FFN 4096, vocab
  30,522, 512 positions, with pooler): 335,141,888 parameters.
- GPT-2 XL (Radford et al. 2019; 48 layers, hidden 1600, vocab 50,257, 1,024 positions, tied
  LM head): 1,557,611,200 parameters.
- Llama-2-7B (Touvron et al. 2023; 32 layers, hidden 4096, FFN 11,008, vocab 32,000, RMSNorm,
  untied LM head): 6,738,415,616 parameters.

Bucketing follows DDP's buckets after its first iteration (torch/nn/parallel/distributed.py
``BucketCapacityConfig``, reducer.cpp ``compute_bucket_assignment_by_size``): see
:func:`bucket_plan`; ``tests/torch_worker.py`` checks it against DDP's ``rebuilt_bucket_sizes``.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..gradients import plan_buckets

MIB = 1 << 20


def _bottleneck(cin, width, stride, down):
    layers = [
        nn.Conv2d(cin, width, 1, bias=False),
        nn.BatchNorm2d(width),
        nn.Conv2d(width, width, 3, stride, 1, bias=False),
        nn.BatchNorm2d(width),
        nn.Conv2d(width, width * 4, 1, bias=False),
        nn.BatchNorm2d(width * 4),
    ]
    if down:
        layers += [nn.Conv2d(cin, width * 4, 1, stride, bias=False), nn.BatchNorm2d(width * 4)]
    return nn.Sequential(*layers)


def resnet50() -> nn.Module:
    mods = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            mods.append(_bottleneck(cin, width, stride if i == 0 else 1, i == 0))
            cin = width * 4
    mods.append(nn.Linear(2048, 1000))
    return nn.Sequential(*mods)


def _encoder_layer(h, ffn, ln=nn.LayerNorm, bias=True, gated=False):
    attn = [nn.Linear(h, h, bias=bias) for _ in range(4)]  # q, k, v, out
    if gated:  # SwiGLU: gate, up, down
        mlp = [nn.Linear(h, ffn, bias=False), nn.Linear(h, ffn, bias=False), nn.Linear(ffn, h, bias=False)]
    else:
        mlp = [nn.Linear(h, ffn, bias=bias), nn.Linear(ffn, h, bias=bias)]
    return nn.Sequential(*attn, ln(h), *mlp, ln(h))


class RMSNorm(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(h))


def bert_large() -> nn.Module:
    h = 1024
    emb = [nn.Embedding(30522, h), nn.Embedding(512, h), nn.Embedding(2, h), nn.LayerNorm(h)]
    return nn.Sequential(*emb, *[_encoder_layer(h, 4096) for _ in range(24)], nn.Linear(h, h))


def gpt2_xl() -> nn.Module:
    h = 1600
    return nn.Sequential(
        nn.Embedding(50257, h),
        nn.Embedding(1024, h),
        *[_encoder_layer(h, 4 * h) for _ in range(48)],
        nn.LayerNorm(h),
    )


def llama2_7b() -> nn.Module:
    h = 4096
    return nn.Sequential(
        nn.Embedding(32000, h),
        *[_encoder_layer(h, 11008, ln=RMSNorm, bias=False, gated=True) for _ in range(32)],
        RMSNorm(h),
        nn.Linear(h, 32000, bias=False),
    )


#: name -> (builder, published parameter count)
WORKLOADS = {
    "resnet50": (resnet50, 25_557_032),
    "bert-large": (bert_large, 335_141_888),
    "gpt2-xl": (gpt2_xl, 1_557_611_200),
    "llama2-7b": (llama2_7b, 6_738_415_616),
}


def build(name: str) -> nn.Module:
    """The model on the meta device; ``ValueError`` listing the workloads."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; allowed: {', '.join(WORKLOADS)}")
    with torch.device("meta"):
        return WORKLOADS[name][0]()


def bucket_plan(params, bucket_cap_mb: float | None = None) -> list[int]:
    """Bucket sizes in bytes, in the order DDP allreduces them after its first iteration
    (:func:`seccomm.gradients.plan_buckets` over the trainable parameters' dtypes and bytes)."""
    trainable = [p for p in params if p.requires_grad]
    return plan_buckets([(p.dtype, p.numel() * p.element_size()) for p in trainable], bucket_cap_mb)


def workload(name: str, bucket_cap_mb: float | None = None) -> dict:
    """Parameter count (with the published one), gradient bytes (float32) and the DDP buckets."""
    m = build(name)
    params = list(m.parameters())
    n = sum(p.numel() for p in params)
    return {
        "name": name,
        "parameters": n,
        "published_parameters": WORKLOADS[name][1],
        "gradient_bytes": sum(p.numel() * p.element_size() for p in params),
        "buckets": bucket_plan(params, bucket_cap_mb),
    }
