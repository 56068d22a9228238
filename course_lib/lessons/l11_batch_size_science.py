"""Lesson 11, the science of the batch size: the noise scale against the bend, sharpness against the gap,
growing the batch instead of decaying the lr, the batch from the noise scale, predictable scaling, BatchNorm
with few samples per rank.

The notebook imports this module as ``study``; each section's code is a module of its own, and this one
gathers their names and the lesson's comparisons:

    l11_noise_scale.py      section 1: B_simple during training (NeuMF, BERT)
    l11_critical_batch.py   section 2: the tuned sweep, the critical batch, B_simple against it
    l11_sharpness.py        sections 3-4: sharpness against the gap, growing the batch
    l11_batchnorm.py        section 5: BatchNorm with few samples per rank
    l11_adaptive.py         the batch from the noise scale
    l11_scaling.py          predictable scaling, and the time those runs get

The estimators are :mod:`course_lib.batch_science`; the runs are the course's one NeuMF loop
(:func:`course_lib.train.train_to_target`) and lesson 07's BERT (:func:`course_lib.train.mlm.train_mlm`).
Every verdict is a :class:`course_lib.compare.Comparison`, shown with :func:`course_lib.compare.table`.
"""

from __future__ import annotations


from .l11_noise_scale import (
    ncf_loss, ncf_sampler, noise_probe, mlm_loss, mlm_sampler, probe_steps, mlm_noise_probe, bert_setting,
    lesson07_precision, mlm_b_simple_at_target, mlm_noise_table, plot_mlm_noise, sig, at_its_error,
    count, noise_table, b_simple_at_target, probe_cost_table, trend_comparison, b_simple_estimate)
from .l11_critical_batch import (
    steps_rows_from_lesson02, best_steps_rows, rule_runs_from_lesson02, tuned_sweep, unbracketed, sweep_cost,
    tuned_rows, tuned_table, critical_batch, fit_estimates, lesson02_fit, plot_noise_and_bend, samples_to_target,
    samples_resolution, bend_comparison, noise_comparison, NOISE_FACTOR, SWEEP_LR_FACTORS)
from .l11_sharpness import (
    sharpness, sharpness_rows, sharpness_table, landscape, plot_landscape, growth_table, batch_at, hr_se,
    sharpness_comparisons, growth_comparisons, EIGEN_TOL, SHARPNESS_EFFECT)
from .l11_batchnorm import (
    bn_spec, bn_table, plot_bn, bn_comparisons, ACC_EFFECT, PACE_DRIFT)
from .l11_adaptive import (
    adaptive_batch_policy, epoch_budget, adaptive_rows, adaptive_table, switch_comparisons, reference_comparison,
    adaptive_comparisons, milestones_before, grow_at, milestone_comparisons, STEPS_EFFECT, SAME_SETTING)
from .l11_scaling import (
    fit_power_law, power_law_error, size_for_error, subsample_train, scaling_runs, plateau, exponent_estimate,
    scaling_prediction, scaling_setting, law_text, scaling_table, scaling_comparisons, PREDICTION_GOAL, SCALING_NOISE)

__all__ = [
    "ncf_loss", "ncf_sampler", "noise_probe", "mlm_loss", "mlm_sampler", "probe_steps", "mlm_noise_probe",
    "bert_setting", "lesson07_precision", "mlm_b_simple_at_target", "mlm_noise_table",
    "plot_mlm_noise", "sig", "at_its_error", "count", "noise_table", "b_simple_at_target", "probe_cost_table",
    "trend_comparison", "b_simple_estimate", "steps_rows_from_lesson02", "best_steps_rows", "rule_runs_from_lesson02",
    "tuned_sweep", "unbracketed", "sweep_cost", "tuned_rows", "tuned_table", "critical_batch", "fit_estimates",
    "lesson02_fit", "plot_noise_and_bend", "samples_to_target", "samples_resolution", "bend_comparison",
    "noise_comparison", "NOISE_FACTOR", "SWEEP_LR_FACTORS", "sharpness", "sharpness_rows", "sharpness_table",
    "landscape", "plot_landscape", "growth_table", "batch_at", "hr_se", "sharpness_comparisons", "growth_comparisons",
    "EIGEN_TOL", "SHARPNESS_EFFECT", "bn_spec", "bn_table", "plot_bn", "bn_comparisons", "ACC_EFFECT", "PACE_DRIFT",
    "adaptive_batch_policy", "epoch_budget", "adaptive_rows", "adaptive_table", "switch_comparisons",
    "reference_comparison", "adaptive_comparisons", "milestones_before", "grow_at", "milestone_comparisons",
    "STEPS_EFFECT",
    "SAME_SETTING", "fit_power_law", "power_law_error", "size_for_error", "subsample_train", "scaling_runs",
    "plateau", "exponent_estimate", "scaling_prediction", "scaling_setting", "law_text", "scaling_table",
    "scaling_comparisons", "PREDICTION_GOAL", "SCALING_NOISE",
]
