"""The small-dataset ViT of DFML Table 10: Shifted Patch Tokenization and Locality Self-Attention.

Built with vit-pytorch's ``vit_for_small_dataset.ViT`` (Lee et al., 2021): patch 4x4, depth 2, dropout 0.1,
embedding dropout 0.1, class-token pooling. The width list ``[dim, mlp_dim]`` is the token width and the hidden
width of the feed-forward blocks; ``[512, 512]`` is the largest model, the H1 rows halve both.

Heads: the paper fixes the head dimension at 64, so the number of heads scales with the width,
``heads = max(1, dim // 64)``, and the attention width ``heads * dim_head`` equals ``dim`` (8 heads at 512,
1 head at 64). Below 64 the single head has width ``dim`` (``dim_head = min(64, dim)``), so ``[32, 32]`` is
still an exact half of ``[64, 64]`` and every H1 row can be sliced out of ``[512, 512]`` (HeteroFL-style).
The classifier is vit-pytorch's ``mlp_head`` (LayerNorm + Linear).
"""

from __future__ import annotations

from torch import nn

DEPTH = 2
HEAD_DIM = 64
DROPOUT = 0.1
EMB_DROPOUT = 0.1


def attention_shape(dim: int) -> tuple[int, int]:
    """``(heads, dim_head)`` for token width ``dim``: heads of width 64, one narrower head below 64."""
    return max(1, dim // HEAD_DIM), min(HEAD_DIM, dim)


def vit(arch: str, dim: int, mlp_dim: int, input_shape: tuple[int, int, int], num_classes: int,
        patch_size: int) -> nn.Module:
    """Factory behind ``vit_<dim>_<mlp_dim>`` (``vit_512_512`` is the largest model of Table 10); ``patch_size`` is
    the family's declared :data:`~lit_fl.models.registry.VIT_PATCH_SIZE` (4), which the image sides are multiples
    of (``create_model`` checks)."""
    from vit_pytorch.vit_for_small_dataset import ViT  # lazy: keeps ``import lit_fl.models`` fast

    channels, height, width = input_shape
    heads, dim_head = attention_shape(dim)
    return ViT(
        image_size=(height, width),
        patch_size=patch_size,
        num_classes=num_classes,
        dim=dim,
        depth=DEPTH,
        heads=heads,
        mlp_dim=mlp_dim,
        channels=channels,
        dim_head=dim_head,
        dropout=DROPOUT,
        emb_dropout=EMB_DROPOUT,
    )
