"""Paleo's four networks as torch modules, through a reader of Paleo's JSON network format (lesson 09).

Paleo describes a network as JSON (``nets/README.md`` of github.com/TalwalkarLab/paleo): ``{"name",
"layers": {name: {"type", "parents", ...}}}`` with TensorFlow's conventions -- NHWC tensors, filters
``[h, w, c_in, c_out]``, ``"SAME"``/``"VALID"`` padding, strides ``[1, s_h, s_w, 1]`` -- and ``"Block"``
layers that namespace their inner layers (an inner layer without parents takes the block's).
:func:`from_spec` reads that format into a ``torch.nn.Module`` (NCHW), so any of Paleo's files (or
a learner's own) can be counted by lesson 09's step model.

Why a reader and not torchvision: torchvision is not a dependency of the course, and its models
differ from Paleo's in places that change the counts (its AlexNet's conv4 has 256 channels and a
6x6 adaptive pool before the classifier; its Inception v3 has the auxiliary classifier).

The four networks of Paleo's case studies are written here as functions that produce that format
(:data:`NETS`), layer shapes from Paleo's ``nets/alex_v2.json`` (AlexNet v2, the one-tower "one weird
trick" variant of TF-slim), ``nets/vgg16.json`` (VGG-16 from TF-slim), ``nets/nin.json`` (Network in
Network, from its Caffe model) and ``nets/inception_v3.json`` (TF-slim's Inception v3, no auxiliary
head), read 2026-12-01 at commit 984bbf5. Convolutions with batch norm have no bias (TF-slim's
convention); batch norm has a scale and a shift here (TF-slim's default has no scale).
"""

from __future__ import annotations

import math

import torch
from torch import nn

# --------------------------------------------------------------------------- the reader


def _same_pads(size: int, k: int, s: int) -> tuple[int, int]:
    """TensorFlow's SAME: ``ceil(size / s)`` outputs, the padding split with the extra one after."""
    out = math.ceil(size / s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def _out_size(size: int, k: int, s: int, padding: str) -> int:
    if padding == "SAME":
        return math.ceil(size / s)
    if padding == "VALID":
        return math.ceil((size - k + 1) / s)
    raise ValueError(f"padding {padding!r}; Paleo's format has 'SAME' or 'VALID'")


class _Conv(nn.Module):
    def __init__(self, spec: dict, shape: tuple[int, int, int]):
        super().__init__()
        kh, kw, cin, cout = spec["filter"]
        _, sh, sw, _ = spec.get("strides", [1, 1, 1, 1])
        c, h, w = shape
        if cin != c:
            raise ValueError(f"a filter for {cin} input channels on a tensor of {c}")
        padding = spec.get("padding", "SAME")
        ph, pw = (_same_pads(h, kh, sh), _same_pads(w, kw, sw)) if padding == "SAME" else ((0, 0), (0, 0))
        symmetric = ph[0] == ph[1] and pw[0] == pw[1]
        self.pad = None if symmetric else nn.ZeroPad2d((pw[0], pw[1], ph[0], ph[1]))
        bn = spec.get("normalizer_fn") == "batch_norm"
        self.conv = nn.Conv2d(cin, cout, (kh, kw), (sh, sw), padding=(ph[0], pw[0]) if symmetric else 0, bias=not bn)
        self.bn = nn.BatchNorm2d(cout) if bn else None
        act = spec.get("activation_fn")
        if act not in (None, "relu"):
            raise ValueError(f"activation_fn {act!r}: this reader knows 'relu' and none")
        self.relu = nn.ReLU() if act == "relu" else None
        self.out_shape = (cout, _out_size(h, kh, sh, padding), _out_size(w, kw, sw, padding))

    def forward(self, x):
        if self.pad is not None:
            x = self.pad(x)
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        return self.relu(x) if self.relu is not None else x


def _pool(spec: dict, shape: tuple[int, int, int]) -> tuple[nn.Module, tuple[int, int, int]]:
    _, kh, kw, _ = spec["ksize"]
    _, sh, sw, _ = spec.get("strides", [1, 1, 1, 1])
    c, h, w = shape
    padding = spec.get("padding", "VALID")
    pads = (0, 0)
    if padding == "SAME":
        (a, b), (d, e) = _same_pads(h, kh, sh), _same_pads(w, kw, sw)
        if a != b or d != e:
            raise ValueError(f"pooling {spec}: asymmetric SAME padding is not supported by this reader")
        pads = (a, d)
    out = (c, _out_size(h, kh, sh, padding), _out_size(w, kw, sw, padding))
    if spec["type"] == "AvgPool":  # TensorFlow averages over the window's real inputs only
        return nn.AvgPool2d((kh, kw), (sh, sw), pads, ceil_mode=False, count_include_pad=False), out
    return nn.MaxPool2d((kh, kw), (sh, sw), pads), out


class _Concat(nn.Module):
    def forward(self, *xs):
        return torch.cat(xs, dim=1)  # NHWC dim 3 is NCHW dim 1


class _Logits(nn.Module):
    def forward(self, x):
        return x.flatten(1)  # (N, classes, 1, 1) -> (N, classes); the softmax is in the loss


class _Linear(nn.Module):
    def __init__(self, spec: dict, shape):
        super().__init__()
        self.fc = nn.Linear(math.prod(shape), spec["num_outputs"])
        self.relu = nn.ReLU() if spec.get("activation_fn") == "relu" else None
        self.out_shape = (spec["num_outputs"],)

    def forward(self, x):
        x = self.fc(x.flatten(1))
        return self.relu(x) if self.relu is not None else x


def _flatten_layers(layers: dict, prefix: str = "", inherited=()) -> list[tuple[str, dict, list[str]]]:
    """``[(full name, spec, full parent names)]`` in file order; blocks opened, names made absolute."""
    out = []
    local = set(layers)
    for name, spec in layers.items():
        parents = [prefix + p if p in local else p for p in spec.get("parents", [])] or list(inherited)
        if spec["type"] == "Block":
            inner = _flatten_layers(spec["layers"], prefix + name + "/", parents)
            out.extend(inner)
            out.append((prefix + name, {"type": "_Alias"}, [prefix + name + "/" + spec["endpoint"]]))
        else:
            out.append((prefix + name, spec, parents))
    return out


class PaleoNet(nn.Module):
    """A network read from Paleo's JSON format (:func:`from_spec`); ``input_shape`` is ``(C, H, W)``."""

    def __init__(self, spec: dict):
        super().__init__()
        self.name = spec.get("name", "net")
        nodes = _flatten_layers(spec["layers"])
        self.order: list[tuple[str, str, list[str]]] = []  # (name, module key or kind, parents)
        self.layers = nn.ModuleDict()
        shapes: dict[str, tuple] = {}
        self.input_shape = None
        for name, s, parents in nodes:
            kind = s["type"]
            key = name.replace("/", "__").replace("-", "_").replace(".", "_")
            for p in parents:
                if p not in shapes:
                    raise ValueError(f"layer {name!r}: parent {p!r} is not defined before it")
            if kind == "Input":
                n, h, w, c = s["tensor"]
                if self.input_shape is not None:
                    raise ValueError("this reader takes one Input layer")
                self.input_shape = (c, h, w)
                shapes[name] = (c, h, w)
                self.order.append((name, "input", []))
                continue
            if kind == "_Alias":
                shapes[name] = shapes[parents[0]]
                self.order.append((name, "alias", parents))
                continue
            if kind != "Concatenate" and len(parents) != 1:
                raise ValueError(f"layer {name!r} ({kind}) needs one parent, has {parents}")
            shape = shapes[parents[0]]
            if kind == "Convolution":
                mod = _Conv(s, shape)
                out = mod.out_shape
            elif kind in ("Pooling", "AvgPool"):
                mod, out = _pool(s, shape)
            elif kind == "Dropout":
                mod, out = nn.Dropout(1 - s.get("dropout_keep_prob", 0.5)), shape
            elif kind == "Concatenate":
                if s.get("dim", 3) != 3:
                    raise ValueError(f"layer {name!r}: this reader concatenates channels (dim 3) only")
                hw = {shapes[p][1:] for p in parents}
                if len(hw) != 1:
                    raise ValueError(f"layer {name!r}: concatenating maps of sizes {hw}")
                mod, out = _Concat(), (sum(shapes[p][0] for p in parents), *hw.pop())
            elif kind == "Softmax":
                if math.prod(shape) != s.get("num_classes", shape[0]):
                    raise ValueError(f"layer {name!r}: softmax over {shape}, expected {s.get('num_classes')} classes")
                mod, out = _Logits(), (math.prod(shape),)
            elif kind == "InnerProduct":
                mod = _Linear(s, shape)
                out = mod.out_shape
            else:
                raise ValueError(f"layer {name!r}: type {kind!r} is not one this reader builds (Input, Convolution, "
                                 "Pooling, AvgPool, Dropout, Concatenate, Softmax, InnerProduct, Block)")
            self.layers[key] = mod
            shapes[name] = out
            self.order.append((name, key, parents))
        if self.input_shape is None:
            raise ValueError("the spec has no Input layer")
        self.output_name = self.order[-1][0]
        self.shapes = shapes

    def forward(self, x):
        outs: dict[str, torch.Tensor] = {}
        for name, key, parents in self.order:
            if key == "input":
                outs[name] = x
            elif key == "alias":
                outs[name] = outs[parents[0]]
            else:
                outs[name] = self.layers[key](*(outs[p] for p in parents))
        return outs[self.output_name]


def from_spec(spec: dict) -> PaleoNet:
    """A torch module from a network in Paleo's JSON format (a dict, e.g. ``json.load`` of one of its files)."""
    return PaleoNet(spec)


def spec_weight_count(spec: dict) -> int:
    """The weights the spec declares, as Paleo counts them: filter and inner-product weights, no biases."""
    total = 0
    for _, s, _ in _flatten_layers(spec["layers"]):
        if s["type"] == "Convolution":
            total += math.prod(s["filter"])
    return total


# --------------------------------------------------------------------------- the four networks, in that format


def _conv(parents, f, stride=1, padding="SAME", relu=True, bn=False):
    s = {"type": "Convolution", "parents": parents, "filter": list(f), "padding": padding,
         "strides": [1, stride, stride, 1], "activation_fn": "relu" if relu else None}
    if bn:
        s["normalizer_fn"] = "batch_norm"
    return s


def _pool_spec(parents, k, stride, padding="VALID", kind="Pooling"):
    return {"type": kind, "parents": parents, "ksize": [1, k, k, 1], "strides": [1, stride, stride, 1],
            "padding": padding}


def _chain(layers: dict, items, start: str) -> str:
    """Add ``[(name, builder(parents))]`` one after the other from ``start``; return the last name."""
    prev = start
    for name, make in items:
        layers[name] = make([prev])
        prev = name
    return prev


def alexnet_v2(batch: int = 128) -> dict:
    """AlexNet v2, one tower (Krizhevsky 2014, "One weird trick"), as Paleo's ``nets/alex_v2.json``."""
    L = {"data": {"type": "Input", "parents": [], "tensor": [batch, 224, 224, 3]}}
    _chain(L, [
        ("conv1", lambda p: _conv(p, (11, 11, 3, 64), 4, "VALID")),
        ("pool1", lambda p: _pool_spec(p, 3, 2)),
        ("conv2", lambda p: _conv(p, (5, 5, 64, 192))),
        ("pool2", lambda p: _pool_spec(p, 3, 2)),
        ("conv3", lambda p: _conv(p, (3, 3, 192, 384))),
        ("conv4", lambda p: _conv(p, (3, 3, 384, 384))),
        ("conv5", lambda p: _conv(p, (3, 3, 384, 256))),
        ("pool5", lambda p: _pool_spec(p, 3, 2)),
        ("fc6", lambda p: _conv(p, (5, 5, 256, 4096), 1, "VALID")),  # fully connected, written as a convolution
        ("dropout6", lambda p: {"type": "Dropout", "parents": p, "dropout_keep_prob": 0.5}),
        ("fc7", lambda p: _conv(p, (1, 1, 4096, 4096))),
        ("dropout7", lambda p: {"type": "Dropout", "parents": p, "dropout_keep_prob": 0.5}),
        ("fc8", lambda p: _conv(p, (1, 1, 4096, 1000), relu=False)),
        ("softmax", lambda p: {"type": "Softmax", "parents": p, "num_classes": 1000}),
    ], "data")
    return {"name": "AlexNet v2 (one weird trick)", "layers": L}


def vgg16(batch: int = 64) -> dict:
    """VGG-16 (configuration D), as Paleo's ``nets/vgg16.json``."""
    L = {"data": {"type": "Input", "parents": [], "tensor": [batch, 224, 224, 3]}}
    items, cin = [], 3
    for stage, (cout, n) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)], start=1):
        for i in range(1, n + 1):
            items.append((f"conv{stage}-{i}", lambda p, f=(3, 3, cin, cout): _conv(p, f)))
            cin = cout
        items.append((f"pool{stage}", lambda p: _pool_spec(p, 2, 2)))
    items += [("fc6", lambda p: _conv(p, (7, 7, 512, 4096), 1, "VALID")),
              ("dropout6", lambda p: {"type": "Dropout", "parents": p, "dropout_keep_prob": 0.5}),
              ("fc7", lambda p: _conv(p, (1, 1, 4096, 4096))),
              ("dropout7", lambda p: {"type": "Dropout", "parents": p, "dropout_keep_prob": 0.5}),
              ("fc8", lambda p: _conv(p, (1, 1, 4096, 1000), relu=False)),
              ("softmax", lambda p: {"type": "Softmax", "parents": p, "num_classes": 1000})]
    _chain(L, items, "data")
    return {"name": "VGG-16", "layers": L}


def nin(batch: int = 128) -> dict:
    """Network in Network (Lin, Chen & Yan 2014, its ImageNet Caffe model), as Paleo's ``nets/nin.json``."""
    L = {"data": {"type": "Input", "parents": [], "tensor": [batch, 224, 224, 3]}}
    items = []
    # (first conv filter, stride, padding, channels); each followed by two 1x1 "cccp" convolutions
    stages = [((11, 11, 3, 96), 4, "VALID", 96), ((5, 5, 96, 256), 1, "SAME", 256),
              ((3, 3, 256, 384), 1, "SAME", 384), ((3, 3, 384, 1024), 1, "SAME", 1024)]
    pools = ["pool0", "pool2", "pool3"]
    for i, (f, s, pad, c) in enumerate(stages):
        items.append((f"conv{i + 1}", lambda p, f=f, s=s, pad=pad: _conv(p, f, s, pad)))
        last = 1000 if i == 3 else c
        items.append((f"cccp{2 * i + 1}", lambda p, c=c: _conv(p, (1, 1, c, c), 1, "VALID")))
        items.append((f"cccp{2 * i + 2}", lambda p, c=c, last=last: _conv(p, (1, 1, c, last), 1, "VALID")))
        if i < 3:
            items.append((pools[i], lambda p: _pool_spec(p, 3, 2)))
        if i == 2:
            items.append(("drop", lambda p: {"type": "Dropout", "parents": p, "dropout_keep_prob": 0.5}))
    items += [("pool4", lambda p: _pool_spec(p, 5, 1, kind="AvgPool")),
              ("softmax", lambda p: {"type": "Softmax", "parents": p, "num_classes": 1000})]
    _chain(L, items, "data")
    return {"name": "Network in Network", "layers": L}


def _branchy_block(cin: int, branches: list, parents: list[str]) -> dict:
    """One Inception block: ``branches`` is a list of branches, each a list of steps
    ``(name, kh, kw, cout, stride, padding)`` or ``(name, "avg"|"max", k, stride, padding)``, or a
    ``("split", [step], [step])`` tail whose two outputs are concatenated (Mixed_7b/7c)."""
    layers, ends = {}, []
    for b, steps in enumerate(branches):
        prev, c = None, cin
        for st in steps:
            if st[0] == "split":
                outs = []
                for sub in st[1:]:
                    n, kh, kw, co, s, pad = sub
                    layers[f"Branch_{b}/{n}"] = _conv([prev], (kh, kw, c, co), s, pad, bn=True)
                    outs.append(f"Branch_{b}/{n}")
                layers[f"Branch_{b}/concat"] = {"type": "Concatenate", "parents": outs, "dim": 3}
                prev, c = f"Branch_{b}/concat", sum(sub[3] for sub in st[1:])
                continue
            name = f"Branch_{b}/{st[0]}"
            par = [prev] if prev else []
            if st[1] in ("avg", "max"):
                _, kind, k, s, pad = st
                layers[name] = _pool_spec(par, k, s, pad, "AvgPool" if kind == "avg" else "Pooling")
            else:
                _, kh, kw, co, s, pad = st
                layers[name] = _conv(par, (kh, kw, c, co), s, pad, bn=True)
                c = co
            prev = name
        ends.append(prev)
    layers["concat"] = {"type": "Concatenate", "parents": ends, "dim": 3}
    return {"type": "Block", "parents": parents, "endpoint": "concat", "layers": layers}


def _c(name, kh, kw, cout, stride=1, pad="SAME"):
    return (name, kh, kw, cout, stride, pad)


def inception_v3(batch: int = 64) -> dict:
    """Inception v3 (Szegedy et al. 2016, TF-slim's, no auxiliary head), as Paleo's ``nets/inception_v3.json``."""
    L = {"data": {"type": "Input", "parents": [], "tensor": [batch, 299, 299, 3]}}
    last = _chain(L, [
        ("Conv2d_1a_3x3", lambda p: _conv(p, (3, 3, 3, 32), 2, "VALID", bn=True)),
        ("Conv2d_2a_3x3", lambda p: _conv(p, (3, 3, 32, 32), 1, "VALID", bn=True)),
        ("Conv2d_2b_3x3", lambda p: _conv(p, (3, 3, 32, 64), 1, "SAME", bn=True)),
        ("MaxPool_3a_3x3", lambda p: _pool_spec(p, 3, 2)),
        ("Conv2d_3b_1x1", lambda p: _conv(p, (1, 1, 64, 80), 1, "VALID", bn=True)),
        ("Conv2d_4a_3x3", lambda p: _conv(p, (3, 3, 80, 192), 1, "VALID", bn=True)),
        ("MaxPool_5a_3x3", lambda p: _pool_spec(p, 3, 2)),
    ], "data")
    blocks = []
    for name, cin, pool_c in (("Mixed_5b", 192, 32), ("Mixed_5c", 256, 64), ("Mixed_5d", 288, 64)):
        blocks.append((name, cin, [[_c("Conv2d_0a_1x1", 1, 1, 64)],
                                   [_c("Conv2d_0a_1x1", 1, 1, 48), _c("Conv2d_0b_5x5", 5, 5, 64)],
                                   [_c("Conv2d_0a_1x1", 1, 1, 64), _c("Conv2d_0b_3x3", 3, 3, 96),
                                    _c("Conv2d_0c_3x3", 3, 3, 96)],
                                   [("AvgPool_0a_3x3", "avg", 3, 1, "SAME"), _c("Conv2d_0b_1x1", 1, 1, pool_c)]]))
    blocks.append(("Mixed_6a", 288, [[_c("Conv2d_1a_3x3", 3, 3, 384, 2, "VALID")],
                                     # as Paleo's file: a 1x1 then one strided 3x3 (TF-slim has a 3x3 between)
                                     [_c("Conv2d_0a_1x1", 1, 1, 64), _c("Conv2d_0b_3x3", 3, 3, 96, 2, "VALID")],
                                     [("MaxPool_1a_3x3", "max", 3, 2, "VALID")]]))
    for name, m in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        blocks.append((name, 768, [[_c("Conv2d_0a_1x1", 1, 1, 192)],
                                   [_c("Conv2d_0a_1x1", 1, 1, m), _c("Conv2d_0b_1x7", 1, 7, m),
                                    _c("Conv2d_0b_7x1", 7, 1, 192)],
                                   [_c("Conv2d_0a_1x1", 1, 1, m), _c("Conv2d_0b_7x1", 7, 1, m),
                                    _c("Conv2d_0c_1x7", 1, 7, m), _c("Conv2d_0d_7x1", 7, 1, m),
                                    _c("Conv2d_0e_1x7", 1, 7, 192)],
                                   [("AvgPool_0a_3x3", "avg", 3, 1, "SAME"), _c("Conv2d_0b_1x1", 1, 1, 192)]]))
    blocks.append(("Mixed_7a", 768, [[_c("Conv2d_0a_1x1", 1, 1, 192), _c("Conv2d_1a_3x3", 3, 3, 320, 2, "VALID")],
                                     [_c("Conv2d_0a_1x1", 1, 1, 192), _c("Conv2d_0b_1x7", 1, 7, 192),
                                      _c("Conv2d_0b_7x1", 7, 1, 192), _c("Conv2d_1a_3x3", 3, 3, 192, 2, "VALID")],
                                     [("MaxPool_1a_3x3", "max", 3, 2, "VALID")]]))
    for name, cin in (("Mixed_7b", 1280), ("Mixed_7c", 2048)):
        blocks.append((name, cin, [[_c("Conv2d_0a_1x1", 1, 1, 320)],
                                   [_c("Conv2d_0a_1x1", 1, 1, 384),
                                    ("split", _c("Conv2d_0b_1x3", 1, 3, 384), _c("Conv2d_0b_3x1", 3, 1, 384))],
                                   [_c("Conv2d_0a_1x1", 1, 1, 448), _c("Conv2d_0b_3x3", 3, 3, 384),
                                    ("split", _c("Conv2d_0c_1x3", 1, 3, 384), _c("Conv2d_0d_3x1", 3, 1, 384))],
                                   [("AvgPool_0a_3x3", "avg", 3, 1, "SAME"), _c("Conv2d_0b_1x1", 1, 1, 192)]]))
    prev = last
    for name, cin, branches in blocks:
        L[name] = _branchy_block(cin, branches, [prev])
        prev = f"{name}/concat"
    L["Logits"] = {"type": "Block", "parents": [prev], "endpoint": "Conv2d_1c_1x1", "layers": {
        "AvgPool_1a_8x8": _pool_spec([], 8, 2, "VALID", "AvgPool"),
        "Dropout_1b": {"type": "Dropout", "parents": ["AvgPool_1a_8x8"], "dropout_keep_prob": 0.5},
        "Conv2d_1c_1x1": _conv(["Dropout_1b"], (1, 1, 2048, 1000), relu=False)}}
    L["softmax"] = {"type": "Softmax", "parents": ["Logits/Conv2d_1c_1x1"], "num_classes": 1000}
    return {"name": "Inception v3", "layers": L}


NETS = {"alexnet": alexnet_v2, "vgg16": vgg16, "nin": nin, "inception_v3": inception_v3}


def build(name: str) -> PaleoNet:
    """One of :data:`NETS` as a torch module (on the current default device)."""
    if name not in NETS:
        raise ValueError(f"net {name!r}; choose one of {sorted(NETS)} (or from_spec(json.load(f)) for a Paleo file)")
    return from_spec(NETS[name]())
