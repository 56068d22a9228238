"""Lesson 04's measurement (course_lib.lessons.l04_lars): an embedding row's gradient grows with its frequency;
layers' gradient scales differ by orders of magnitude at every batch size."""

from course_lib.lessons import l04_lars as layerwise
from course_lib.train import TrainConfig

CFG = TrainConfig(factors=8, layers=(16, 8))


def test_row_gradients_grow_with_frequency_and_layers_differ_by_orders_of_magnitude(data):
    m = layerwise.layer_gradient_norms(data, CFG, (256, 4096))
    slopes = layerwise.frequency_slope(m)  # measured 0.50 and 0.69 (per-sample gradients partly cancel)
    assert set(slopes) == {256, 4096} and all(0.3 < s < 1.2 for s in slopes.values()), slopes
    ratio = {(r["batch"], r["layer"]): r["grad_to_weight"] for r in m["layers"]}
    layers = {layer for _, layer in ratio}
    for b in (256, 4096):
        spread = max(ratio[(b, x)] for x in layers) / min(ratio[(b, x)] for x in layers)
        assert spread > 10, spread  # one global lr serves layers an order of magnitude apart or more
    # a mean over 16x the samples: at most the noise's 1/sqrt(16) = 4x fall (signal stays), never 16x
    assert all(ratio[(256, x)] / ratio[(4096, x)] < 8 for x in layers)
    assert {r["regime"] for r in layerwise.layer_scaling(m)} <= {"noise", "signal", "mixed"}
    t = layerwise.layer_norms_table(m)
    assert len(t.rows) == len(layers) and "B=4096" in str(t)
    reading = layerwise.reading(m)
    assert "||g||/||w|| differs between NeuMF's layers" in reading and "With 16x the batch" in reading
    assert "divides them all alike" not in reading
    layerwise.plot_row_gradients(m)


def _measured(changes, lo=256, hi=131072):
    """Constructed norms: each layer's ||g||/||w|| at ``lo`` and ``lo``'s over ``changes[layer]`` at ``hi``."""
    import torch

    base = {"gmf_user.weight": 1e-2, "gmf_item.weight": 2e-2, "mlp.2.weight": 1e-4, "out.weight": 5e-5}
    layers = [{"batch": b, "layer": name, "weight_norm": 1.0, "grad_norm": g / (changes[name] if b == hi else 1),
               "grad_to_weight": g / (changes[name] if b == hi else 1)} for b in (lo, hi) for name, g in base.items()]
    freq = torch.tensor([1e-3, 2e-3, 4e-3, 8e-3])
    return {"layers": layers, "rows": {lo: (freq, freq ** 0.73), hi: (freq, freq ** 0.09)}}


def test_the_reading_says_noise_falls_as_one_over_sqrt_b_and_signal_stays():
    """#37 (review 04 #9, #10): lesson 04's numbers: the embeddings fell 22.6-22.9x = sqrt(512), mlp.2 and out
    0.92x and 0.93x; the frequency slope 0.09 at the large batch does not "grow"."""
    m = _measured({"gmf_user.weight": 22.6, "gmf_item.weight": 22.9, "mlp.2.weight": 0.92, "out.weight": 0.93})
    text = layerwise.reading(m)
    assert "gmf_user.weight, gmf_item.weight fell 22.60-22.90x (sqrt(512) = 22.6): mostly noise" in text
    assert "mlp.2.weight, out.weight changed 0.92-0.93x: mostly signal, which a mean keeps" in text
    assert "does not divide every gradient alike" in text
    assert "it grows at B=256 only" in text and "rare items get small gradients" not in text
    # opposite results: every layer falls as 1/sqrt(B), and every slope grows: the text says so
    same = _measured({k: 22.6 for k in ("gmf_user.weight", "gmf_item.weight", "mlp.2.weight", "out.weight")})
    same["rows"] = {b: (f, f ** 0.8) for b, (f, _) in same["rows"].items()}
    other = layerwise.reading(same)
    assert "Every layer is in the same regime here" in other and "rare items get small gradients" in other
    assert "mostly signal" not in other


def test_dead_layers_are_read_from_a_trust_ratio_stuck_at_the_fallback():
    """#37 (review 04 #11): lesson 04's LARS run at lr 7: the MLP's ratios spike, then sit at exactly 1."""
    history = {"step": list(range(0, 40, 2)),
               "trust_ratio": {"mlp.0.weight": [14.2, 43.7, 394, 1490] + [1.0] * 16,
                               "gmf_user.weight": [394 - i for i in range(20)],
                               "out.weight": [0.14, 1.0] + [0.5] * 18}}  # a single 1 mid-run is not a dead layer
    assert layerwise.dead_layers(history) == {"mlp.0.weight": 8}
    text = layerwise.dead_layers_reading(history, lr=7.0)
    assert text.startswith("mlp.0.weight: trust ratio exactly 1 from step 8 to the end") and "at lr 7" in text
    alive = {"step": history["step"], "trust_ratio": {"mlp.0.weight": [14.2 + i for i in range(20)]}}
    assert layerwise.dead_layers(alive) == {} and "every adapted layer kept a gradient" in \
        layerwise.dead_layers_reading(alive)
