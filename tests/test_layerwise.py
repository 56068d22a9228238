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
    # every gradient is a mean over the batch, yet 16x the batch changes no layer's scale 16x
    assert all(ratio[(256, x)] / ratio[(4096, x)] < 8 for x in layers)
    t = layerwise.layer_norms_table(m)
    assert len(t.rows) == len(layers) and "B=4096" in str(t)
    reading = layerwise.reading(m)
    assert "orders of magnitude" in reading or "times" in reading
    layerwise.plot_row_gradients(m)
