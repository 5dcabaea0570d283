"""Net1 is the article's network: structure and shapes."""

import pytest
import torch
from torch import nn

from gpulab.models import Net1


def test_net1_has_three_sequential_linear_layers():
    net = Net1(13, 16, 32, 1)
    layers = [net.layer1, net.layer2, net.layer3]
    assert [type(l) for l in layers] == [nn.Sequential] * 3
    linears = [l[0] for l in layers]
    assert all(len(l) == 1 and isinstance(l[0], nn.Linear) for l in layers)
    assert [(m.in_features, m.out_features) for m in linears] == [(13, 16), (16, 32), (32, 1)]
    assert sum(p.numel() for p in net.parameters()) == 13 * 16 + 16 + 16 * 32 + 32 + 32 * 1 + 1


@pytest.mark.parametrize("dims", [(13, 16, 32, 1), (12, 4, 8, 3)])
def test_net1_output_shape(dims):
    net = Net1(*dims)
    assert net(torch.zeros(7, dims[0])).shape == (7, dims[3])


def test_relu_between_layers_but_not_after_last():
    torch.manual_seed(0)
    net = Net1(3, 4, 5, 2)
    x = torch.randn(10, 3)
    h1 = torch.relu(net.layer1(x))
    h2 = torch.relu(net.layer2(h1))
    expected = net.layer3(h2)
    assert torch.equal(net(x), expected)
    # the output is not clamped at zero: a negative output is possible
    with torch.no_grad():
        net.layer3[0].bias.fill_(-100.0)
    assert (net(x) < 0).all()


def test_state_dict_keys_match_article():
    keys = list(Net1(13, 16, 32, 1).state_dict())
    assert keys == [f"layer{i}.0.{w}" for i in (1, 2, 3) for w in ("weight", "bias")]
