"""Model zoo: the CNN family of DFML Table 10, parameter counts, pools and their assignment over clients."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import nn

from lit_fl.models import POOLS, assign_evenly, create_model, is_known, num_parameters, resolve_pool


def _cnn_params(channels: list[int], in_channels: int, num_classes: int, size: int = 28) -> int:
    """conv 5x5 (weights + bias) + GroupNorm affine (2 per channel) per layer, then a linear classifier on the
    flattened map (each 2x2 ceil-mode pool halves the side, rounding up)."""
    total, previous = 0, in_channels
    for out in channels:
        total += 5 * 5 * previous * out + out + 2 * out
        previous = out
        size = -(-size // 2)
    return total + previous * size * size * num_classes + num_classes


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32), (1, 8, 8)])
def test_cnn_output_shape(shape):
    model = create_model("cnn_32_64", shape, 10)
    out = model(torch.randn(3, *shape))
    assert out.shape == (3, 10)
    assert torch.isfinite(out).all()


def test_cnn_layer_spec_table10():
    model = create_model("cnn_32_64", (1, 28, 28), 10)
    layers = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.ReLU, nn.MaxPool2d, nn.GroupNorm))]
    kinds = [type(m) for m in layers]
    assert kinds == [nn.Conv2d, nn.ReLU, nn.MaxPool2d, nn.GroupNorm] * 2
    convs = [m for m in layers if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels) for c in convs] == [(1, 32), (32, 64)]
    assert all(c.kernel_size == (5, 5) for c in convs)
    pools = [m for m in layers if isinstance(m, nn.MaxPool2d)]
    assert all(p.kernel_size in (2, (2, 2)) and p.stride in (2, (2, 2)) for p in pools)
    norms = [m for m in layers if isinstance(m, nn.GroupNorm)]
    assert [(g.num_groups, g.num_channels) for g in norms] == [(1, 32), (1, 64)]
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 1 and (linears[0].in_features, linears[0].out_features) == (64 * 7 * 7, 10)


def test_groupnorm_one_group_is_layer_norm_over_chw():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 5, 5)
    gn = nn.GroupNorm(1, 6)
    torch.testing.assert_close(gn(x), nn.functional.layer_norm(x, x.shape[1:]), rtol=1e-4, atol=1e-5)


def test_num_parameters_hand_formula():
    model = create_model("cnn_32_64", (1, 28, 28), 10)
    # conv1 5*5*1*32+32, gn1 2*32, conv2 5*5*32*64+64, gn2 2*64, linear (64*7*7)*10+10
    expected = 832 + 64 + 51264 + 128 + 31370
    assert expected == 83658
    assert num_parameters(model) == expected
    assert num_parameters(create_model("cnn_32_64", (3, 32, 32), 100)) == _cnn_params([32, 64], 3, 100, size=32)


def test_num_parameters_counts_only_trainable():
    model = create_model("cnn_8_16", (1, 28, 28), 10)
    total = num_parameters(model)
    assert total == _cnn_params([8, 16], 1, 10)
    model.classifier.requires_grad_(False)
    assert num_parameters(model) == total - (16 * 7 * 7 * 10 + 10)


@pytest.mark.parametrize("arch", POOLS["h2_cnn"])
def test_h2_pool_forward_backward(arch):
    torch.manual_seed(0)
    model = create_model(arch, (1, 28, 28), 10)
    channels = [int(c) for c in arch.split("_")[1:]]
    assert num_parameters(model) == _cnn_params(channels, 1, 10)
    x = torch.randn(4, 1, 28, 28)
    out = model(x)
    assert out.shape == (4, 10)
    nn.functional.cross_entropy(out, torch.tensor([0, 1, 2, 3])).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


def test_pools_match_table10():
    assert POOLS["h0_cnn"] == ["cnn_32_64"]
    assert POOLS["h1_cnn"] == ["cnn_128_256", "cnn_64_128", "cnn_32_64", "cnn_16_32", "cnn_8_16"]
    assert set(POOLS["h2_cnn"]) == {
        "cnn_32_64_128_256", "cnn_32_64_128", "cnn_32_64", "cnn_16_32_64", "cnn_8_16_32_64",
    }
    assert all(is_known(a) for pool in POOLS.values() for a in pool)


def test_resolve_pool():
    assert resolve_pool("h2_cnn") == POOLS["h2_cnn"]
    assert resolve_pool(["cnn_8_16", "cnn_16_32"]) == ["cnn_8_16", "cnn_16_32"]
    pool = resolve_pool("h0_cnn")
    pool.append("x")
    assert POOLS["h0_cnn"] == ["cnn_32_64"]  # a copy, not the registry's list
    with pytest.raises(ValueError, match="models.pool") as info:
        resolve_pool("h9_cnn")
    assert "h2_cnn" in str(info.value)
    with pytest.raises(ValueError, match="models.pool"):
        resolve_pool([])


def test_create_model_unknown_names_allowed():
    with pytest.raises(ValueError, match="resnet99") as info:
        create_model("resnet99", (3, 32, 32), 10)
    msg = str(info.value)
    assert "allowed" in msg and "cnn_" in msg
    with pytest.raises(ValueError):
        create_model("cnn_0_4", (1, 28, 28), 10)
    assert not is_known("resnet99")


def test_create_model_is_fresh():
    a = create_model("cnn_8_16", (1, 28, 28), 10)
    b = create_model("cnn_8_16", (1, 28, 28), 10)
    assert a is not b
    a.classifier.weight.data.zero_()
    assert b.classifier.weight.abs().sum() > 0


def test_assign_evenly():
    pool = POOLS["h2_cnn"]
    assigned = assign_evenly(pool, 10)
    assert len(assigned) == 10
    assert Counter(assigned) == {a: 2 for a in pool}
    assigned7 = assign_evenly(pool, 7)
    counts = Counter(assigned7)
    assert set(counts) == set(pool)
    assert max(counts.values()) - min(counts.values()) <= 1
    assert sum(counts.values()) == 7
    assert assign_evenly(["cnn_32_64"], 4) == ["cnn_32_64"] * 4
    big = Counter(assign_evenly(pool, 50))
    assert set(big.values()) == {10}


def test_the_registry_knows_every_family_by_name_and_builds_it_from_its_module() -> None:
    """Names are checked without importing the model modules; each lazy factory builds the registered family."""
    from lit_fl.models.codist_cnn import CODIST_CNNS
    from lit_fl.models.registry import CODIST_NAMES, allowed_names

    assert set(CODIST_NAMES) == set(CODIST_CNNS)
    assert {"codist_small", "codist_large", "efficientnet_b0", "resnet18"} <= set(allowed_names())
    assert type(create_model("codist_small", (3, 32, 32), 10)).__name__ == "CodistCNN"
    assert type(create_model("cnn_8_16", (1, 28, 28), 10)).__name__ == "CNN"
