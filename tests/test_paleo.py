"""Paleo's networks against their specifications, each of Paleo's communication formulas, im2col, and the
what-if widget (lesson 09's case studies themselves: tests/lessons/test_l09_performance_model.py)."""

import math

import pytest
import torch

from course_lib.lessons import l09_paleo as S
from course_lib.perf import im2col, paleo as P, paleo_nets as N

NET20 = P.paleo_network("ethernet20", 1.0)  # 2.5e9 bytes/s


# --------------------------------------------------------------------------- the networks


def test_alexnet_parameters_and_forward_flops_by_hand():
    a, _ = S.net_counts("alexnet")
    # weights of AlexNet v2 (Paleo's alex_v2.json), [h, w, c_in, c_out] each:
    weights = (11 * 11 * 3 * 64 + 5 * 5 * 64 * 192 + 3 * 3 * 192 * 384 + 3 * 3 * 384 * 384 + 3 * 3 * 384 * 256
               + 5 * 5 * 256 * 4096 + 4096 * 4096 + 4096 * 1000)
    assert weights == 50_293_440 == N.spec_weight_count(N.alexnet_v2())
    biases = 64 + 192 + 384 + 384 + 256 + 4096 + 4096 + 1000
    assert a.param_bytes == 4 * (weights + biases)
    assert a.grad_bytes == a.param_bytes
    # output maps (TensorFlow's VALID: ceil((in - k + 1) / s); SAME: ceil(in / s)): conv1 (224-11+1)/4 -> 54,
    # pool1 -> 26, conv2 26, pool2 -> 12, conv3-5 12, pool5 -> 5, fc6 1x1
    macs = (11 * 11 * 3 * 64 * 54 * 54 + 5 * 5 * 64 * 192 * 26 * 26 + 3 * 3 * 192 * 384 * 12 * 12
            + 3 * 3 * 384 * 384 * 12 * 12 + 3 * 3 * 384 * 256 * 12 * 12 + 5 * 5 * 256 * 4096 + 4096 * 4096
            + 4096 * 1000)
    conv_flops = sum(o.flops for o in a.phase_ops("forward") if o.op == "convolution")
    assert conv_flops == 2 * macs == 1_473_111_552  # per image
    # backward: a gradient for the weights of every layer, for the data of all but the first
    bwd = sum(o.flops for o in a.phase_ops("backward") if o.op == "convolution_backward")
    assert bwd == 2 * (2 * macs) - 2 * 11 * 11 * 3 * 64 * 54 * 54


@pytest.mark.parametrize("name,weights,fwd_gflops", [
    ("vgg16", 138_344_128, 30.94), ("nin", 7_589_920, 1.94), ("inception_v3", 23_716_192, 11.27)])
def test_nets_against_their_specifications(name, weights, fwd_gflops):
    spec = N.NETS[name]()
    assert N.spec_weight_count(spec) == weights
    a, b = S.net_counts(name)
    with torch.device("meta"):
        net = N.build(name)
    conv_w = sum(p.numel() for n, p in net.named_parameters() if n.endswith("conv.weight"))
    assert conv_w == weights
    # the forward's convolution FLOPs: 2 x multiply-adds of each conv, from the spec's own shapes
    macs = 0
    for mod in net.layers.values():
        if isinstance(mod, N._Conv):
            _, h, w = mod.out_shape
            macs += math.prod(mod.conv.weight.shape) * h * w
    fwd = sum(o.flops for o in a.phase_ops("forward") if o.op == "convolution")
    assert fwd == 2 * macs
    assert fwd / 1e9 == pytest.approx(fwd_gflops, rel=1e-3)
    assert sum(o.flops for o in b.ops) == pytest.approx(2 * sum(o.flops for o in a.ops) - sum(
        o.flops for o in a.phase_ops("optimizer")), rel=1e-9)  # linear in the batch; the update is not


def test_reader_matches_torch_on_real_values_and_refuses_unknown_layers():
    spec = {"name": "tiny", "layers": {
        "data": {"type": "Input", "parents": [], "tensor": [2, 9, 9, 3]},
        "c": {"type": "Convolution", "parents": ["data"], "filter": [1, 7, 3, 4], "padding": "SAME",
              "strides": [1, 2, 2, 1], "activation_fn": None},
        "softmax": {"type": "Softmax", "parents": ["c"], "num_classes": 4 * 5 * 5}}}
    torch.manual_seed(0)
    net = N.from_spec(spec)
    x = torch.randn(2, 3, 9, 9)
    conv = net.layers["c"]
    # TensorFlow's SAME for width 9, kernel 7, stride 2: 5 outputs, 6 padding, 3 before and 3 after; height: 0
    ref = torch.nn.functional.conv2d(torch.nn.functional.pad(x, (3, 3, 0, 0)), conv.conv.weight, conv.conv.bias,
                                     stride=2)
    assert torch.allclose(net(x), ref.flatten(1))
    bad = {"name": "bad", "layers": {"data": {"type": "Input", "parents": [], "tensor": [1, 4, 4, 1]},
                                     "x": {"type": "LRN", "parents": ["data"]}}}
    with pytest.raises(ValueError, match="LRN"):
        N.from_spec(bad)
    with pytest.raises(ValueError, match="choose one of"):
        N.build("resnet")


# --------------------------------------------------------------------------- Paleo's formulas, one test each


def test_one_to_all():  # 2 (p - 1) n / B: the server's link carries p-1 gradients in and p-1 models out
    assert P.one_to_all_time(1e9, 1, NET20) == 0
    assert P.one_to_all_time(1e9, 8, NET20) == pytest.approx(2 * 7 * 1e9 / 2.5e9)


def test_tree_all_reduce():  # 2 ceil(log2 p) n / B
    assert P.tree_allreduce_time(1e9, 8, NET20) == pytest.approx(2 * 3 * 0.4)
    assert P.tree_allreduce_time(1e9, 100, NET20) == pytest.approx(2 * 7 * 0.4)  # ceil(log2 100) = 7


def test_butterfly_all_reduce():  # ceil(log2 p) n / B
    assert P.butterfly_allreduce_time(1e9, 32, NET20) == pytest.approx(5 * 0.4)
    assert P.butterfly_allreduce_time(1e9, 33, NET20) == pytest.approx(6 * 0.4)


def test_butterfly_mixing():  # one message per step (none for a single worker)
    assert P.butterfly_mixing_time(1e9, 1, NET20) == 0
    assert P.butterfly_mixing_time(1e9, 128, NET20) == pytest.approx(0.4)


def test_ring_beside_them_costs_about_two_messages():
    assert P.ring_allreduce_time(1e9, 128, NET20) == pytest.approx(2 * 127 / 128 * 0.4)
    assert P.butterfly_allreduce_time(1e9, 128, NET20) / P.ring_allreduce_time(1e9, 128, NET20) > 3.5


def test_a_spec_device_prices_the_same_through_the_probe_curves():
    a, _ = S.net_counts("nin")
    dev = P.paleo_device("K40", 0.5)
    pred = P.M.predict_step(a, P.spec_curves(dev), step_overhead_s=0.0)
    ph = P.phase_seconds(a, dev)
    assert pred.forward_s == pytest.approx(ph["forward"]) and pred.backward_s == pytest.approx(ph["backward"])
    assert pred.optimizer_s == pytest.approx(ph["update"])


def test_ppp_and_names():
    slow = P.paleo_network("ethernet20", 0.5)
    assert P.butterfly_allreduce_time(1e9, 2, slow) == pytest.approx(0.8)
    assert P.paleo_device("K80", 0.62).flops == pytest.approx(5.6e12 * 0.62)
    assert P.PALEO_NETWORKS["pcie3"].bandwidth == 16e9 and P.PALEO_NETWORKS["ethernet"].bandwidth == 1.25e9
    for bad in (lambda: P.paleo_device("V100"), lambda: P.paleo_network("nvlink"),
                lambda: P.paleo_device("K80", 1.5), lambda: P.tree_height(0)):
        with pytest.raises(ValueError):
            bad()


# --------------------------------------------------------------------------- im2col


def test_im2col_equals_conv_and_costs_more_bytes():
    torch.manual_seed(0)
    x, wt, b = torch.randn(2, 3, 9, 8), torch.randn(5, 3, 3, 3), torch.randn(5)
    ref = torch.nn.functional.conv2d(x, wt, b, stride=2, padding=1)
    assert torch.allclose(im2col.conv2d_im2col(x, wt, b, stride=2, padding=1), ref, atol=1e-5)
    c = im2col.conv_costs(2, 3, 9, 8, 5, 3, 3, stride=1, padding=1)
    assert c["gemm_mkn"] == (5, 27, 2 * 9 * 8)
    assert c["flops"] == 2 * 5 * 27 * 144
    assert c["column_bytes"] == 27 * 144 * 4  # 9 copies of each input value (3x3, stride 1)
    assert c["im2col_intensity"] < c["direct_intensity"]
    assert im2col.roofline_bound(1.0, 1e12, 1e11) == ("memory", 1e11)
    assert im2col.roofline_bound(100.0, 1e12, 1e11)[0] == "compute"


def test_what_if_widget_takes_a_named_network():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib import widgets
    from course_lib.perf.probe import DeviceCurves

    a, b = S.net_counts("nin")
    curves = DeviceCurves("spec", [(1.0, 1e12), (1e15, 1e12)], [(1.0, 1e11), (1e12, 1e11)], 0.0, 1)
    links = S.named_links()
    assert "Paleo ethernet20 (2.5 GB/s)" in links and any("NVLink" in k for k in links)
    fig, table = widgets.step_explorer({"NiN": (a, b, curves, 0.0)}, p=8, global_batch=256, interactive=False,
                                       networks=links, network="Paleo ethernet20 (2.5 GB/s)")
    assert "2.5 GB/s links" in fig.axes[0].get_title()
    assert "steps to target (McCandlish model)" in str(table) and "illustrative" not in str(table)
    plt.close(fig)
    fig, table = widgets.step_explorer({"NiN": (a, b, curves, 0.0)}, p=8, global_batch=256, interactive=False,
                                       illustrative=True)  # the fourth read: made-up S_min, B_crit unlabelled
    assert "steps to target (McCandlish model, illustrative S_min and B_crit)" in str(table)
    assert "time to target (s, illustrative S_min and B_crit)" in str(table)
    plt.close(fig)
    with pytest.raises(ValueError, match="network='token ring'"):
        widgets.step_explorer({"NiN": (a, b, curves, 0.0)}, interactive=False, networks=links, network="token ring")
