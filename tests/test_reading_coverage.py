"""#37's goals: "every reading function has the table-agreement test of item 1 and the opposite-results test of
item 2". This is the list of them, checked against course_lib itself.

Every public function or method of course_lib whose name says it reads results (``*reading*``, ``*verdict*``,
``*takeaway*``) has an entry: ``(agreement, opposite)``.

- ``agreement``: the test (``tests/<file>.py::<test>``) that checks each number the reading quotes is a cell of the
  table printed above it, or derived from its cells by a rule the test names (see test_reading_agreement.py); or,
  for a reading that sits under no table, a sentence beginning "no table:" that says what it reads instead.
- ``opposite``: the test that feeds it opposite results (recorded or constructed) and checks the text follows.

A new reading function fails :func:`test_every_reading_is_listed` until it has both.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMES = re.compile(r"(reading|takeaway|verdict)")

# fmt: off
COVERAGE = {
    # course_lib/ladder.py
    "course_lib.ladder.ladder_reading": (
        None,
        None),

    # course_lib/lessons/l01_baseline.py
    "course_lib.lessons.l01_baseline.bottleneck_reading": (
        None,
        None),
    "course_lib.lessons.l01_baseline.pace_drift_reading": (
        None,
        None),
    "course_lib.lessons.l01_baseline.pace_reading": (
        None,
        None),
    "course_lib.lessons.l01_baseline.optimizer_reading": (
        'tests/test_reading_agreement.py::test_the_optimizer_reading_and_its_speedups_quote_the_ms_columns',
        None),
    "course_lib.lessons.l01_baseline.accuracy_reading": (
        'tests/test_reading_agreement.py::test_the_accuracy_reading_quotes_the_accuracy_table',
        None),
    "course_lib.lessons.l01_baseline.compile_reading": (
        'tests/test_reading_agreement.py::test_the_compile_reading_quotes_the_compile_table',
        None),
    "course_lib.lessons.l01_baseline.loader_reading": (
        'tests/test_reading_agreement.py::test_the_loader_reading_quotes_the_loader_table',
        None),
    "course_lib.lessons.l01_baseline.throughput_reading": (
        'tests/test_reading_agreement.py::test_the_throughput_reading_quotes_its_table',
        None),

    # course_lib/lessons/l02_linear_scaling.py
    "course_lib.lessons.l02_linear_scaling.regime_reading": (
        'tests/test_reading_agreement.py::test_lesson_02s_regime_reading_quotes_the_regime_rows',
        None),
    "course_lib.lessons.l02_linear_scaling.gap_reading": (
        'tests/test_reading_agreement_more.py::test_lesson_02s_gap_reading_quotes_the_gap_table',
        None),

    # course_lib/lessons/l03_warmup.py
    "course_lib.lessons.l03_warmup.warmup_reading": (
        'tests/test_reading_agreement_more.py::test_lesson_03s_warmup_reading_quotes_the_sweep_table',
        None),
    "course_lib.lessons.l03_warmup.takeaway": (
        None,
        None),

    # course_lib/lessons/l04_lars.py
    "course_lib.lessons.l04_lars.reading": (
        'tests/test_reading_agreement.py::test_lesson_04s_reading_quotes_its_layer_tables',
        None),
    "course_lib.lessons.l04_lars.dead_layers_reading": (
        None,
        None),
    "course_lib.lessons.l04_lars.race_reading": (
        None,
        None),

    # course_lib/lessons/l05_mixed_precision.py
    "course_lib.lessons.l05_mixed_precision.activation_reading": (
        None,
        None),
    "course_lib.lessons.l05_mixed_precision.loss_scaling_reading": (
        'tests/test_mixed_precision.py::test_the_loss_scaling_reading_quotes_its_table',
        None),
    "course_lib.lessons.l05_mixed_precision.lars_unscale_reading": (
        'tests/test_reading_agreement_more.py::test_lesson_05s_lars_unscale_reading_quotes_its_table',
        None),
    "course_lib.lessons.l05_mixed_precision.speedup_reading": (
        'tests/test_reading_agreement_more.py::test_lesson_05s_speedup_reading_quotes_the_speed_table',
        None),
    "course_lib.lessons.l05_mixed_precision.loss_scale_reading": (
        None,
        None),

    # course_lib/lessons/l06_data_parallel.py
    "course_lib.lessons.l06_data_parallel.ring_reading": (
        None,
        None),
    "course_lib.lessons.l06_data_parallel.allreduce_reading": (
        'tests/test_reading_agreement_more.py::test_lesson_06s_allreduce_reading_quotes_the_sweep_table',
        None),
    "course_lib.lessons.l06_data_parallel.overlap_reading": (
        'tests/test_reading_agreement_more.py::test_lesson_06s_overlap_reading_quotes_the_bucket_table',
        None),
    "course_lib.lessons.l06_data_parallel.timeline_reading": (
        None,
        None),
    "course_lib.lessons.l06_data_parallel.compression_reading": (
        'tests/test_reading_agreement_more.py::test_lesson_06s_compression_reading_quotes_the_compression_table',
        None),
    "course_lib.lessons.l06_data_parallel.scaling_reading": (
        'tests/test_reading_agreement.py::test_lesson_06s_scaling_reading_quotes_the_scaling_table',
        None),
    "course_lib.lessons.l06_data_parallel.optimization_reading": (
        None,
        None),

    # course_lib/lessons/l07_bert_lamb.py
    "course_lib.lessons.l07_bert_lamb.tuning_reading": (
        'tests/test_reading_agreement_i37g.py::test_lesson_07s_tuning_reading_quotes_the_sweep_tables',
        'tests/test_optimizer_study.py::test_tuning_reading_compares_each_batchs_tuned_lr_with_the_sqrt_rule'),
    "course_lib.lessons.l07_bert_lamb.seeds_verdict": (
        'tests/test_reading_agreement_i37g.py::test_lesson_07s_seeds_verdicts_quote_the_comparison_table',
        'tests/test_reading_agreement_i37g.py::test_lesson_07s_seeds_verdicts_quote_the_comparison_table'),
    "course_lib.lessons.l07_bert_lamb.large_batch_reading": (
        'tests/test_reading_agreement_i37g.py::test_lesson_07s_seeds_verdicts_quote_the_comparison_table',
        'tests/test_optimizer_study.py::test_seeds_verdict_needs_a_gap_beyond_the_seeds_and_the_evaluation_interval'),
    "course_lib.lessons.l07_bert_lamb.batch_reading": (
        'tests/test_reading_agreement_i37g.py::test_lesson_07s_batch_reading_quotes_the_comparison_table',
        'tests/test_optimizer_study.py::test_batch_reading_says_whether_throughput_paid_for_the_extra_sequences'),
    "course_lib.lessons.l07_bert_lamb.equal_sequences_reading": (
        'tests/test_reading_agreement_i37g.py::test_lesson_07s_equal_sequences_reading_quotes_the_equal_sequences_table',
        'tests/test_optimizer_study.py::test_equal_sequences_reading_compares_at_the_small_batchs_budget'),
    "course_lib.lessons.l07_bert_lamb.lr_choice_reading": (
        'tests/test_reading_agreement_i37g.py::test_lesson_07s_lr_choice_reading_quotes_the_best_loss_cells',
        'tests/test_optimizer_study.py::test_lr_and_ablation_readings_compare_with_the_seed_to_seed_noise'),
    "course_lib.lessons.l07_bert_lamb.ablation_reading": (
        'tests/test_reading_agreement_i37g.py::test_lesson_07s_ablation_reading_quotes_the_ablation_table',
        'tests/test_optimizer_study.py::test_lr_and_ablation_readings_compare_with_the_seed_to_seed_noise'),
    "course_lib.lessons.l07_bert_lamb.precision_reading": (
        'tests/test_reading_agreement_i37g.py::test_lesson_07s_precision_reading_quotes_the_throughput_table',
        'tests/test_optimizer_study.py::test_precision_reading_explains_a_gap_only_where_there_is_one'),

    # course_lib/lessons/l08_collectives.py
    "course_lib.lessons.l08_collectives.verdict": (
        'tests/test_reading_agreement_i37g.py::test_lesson_08s_verdict_quotes_the_tables_above_it',
        'tests/test_collectives.py::test_verdict_says_what_ran'),
    "course_lib.lessons.l08_collectives.ring_tree_reading": (
        'tests/test_reading_agreement_i37g.py::test_lesson_08s_ring_tree_reading_quotes_the_ring_tree_table',
        'tests/test_collectives.py::test_ring_tree_reading_tells_the_host_from_the_links_recorded_and_swapped'),
    "course_lib.lessons.l08_collectives.links_reading": (
        'tests/test_reading_agreement_i37g.py::test_lesson_08s_links_reading_quotes_the_links_tables',
        'tests/test_collectives.py::test_links_reading_on_both_paths'),
    "course_lib.lessons.l08_collectives.topk_reading": (
        'tests/test_reading_agreement_i37g.py::test_lesson_08s_compression_readings_quote_the_compression_table',
        'tests/test_compression.py::test_topk_reading_follows_the_results'),
    "course_lib.lessons.l08_collectives.powersgd_reading": (
        'tests/test_reading_agreement_i37g.py::test_lesson_08s_compression_readings_quote_the_compression_table',
        'tests/test_compression.py::test_powersgd_reading_meets_or_misses_the_goal'),
    "course_lib.lessons.l08_collectives.staleness_reading": (
        'tests/test_reading_agreement_i37g.py::test_lesson_08s_compression_readings_quote_the_compression_table',
        'tests/test_compression.py::test_staleness_reading_compares_with_the_simulated_study'),
    "course_lib.lessons.l08_collectives.compression_verdict_rows": (
        'tests/test_reading_agreement_i37g.py::test_lesson_08s_compression_verdict_rows_carry_the_compression_tables_cells',
        'tests/test_compression.py::test_the_verdict_says_compression_pays_on_a_slow_link_and_not_on_a_fast_one'),
    "course_lib.lessons.l08_collectives.compression_verdict": (
        'tests/test_reading_agreement_i37g.py::test_lesson_08s_compression_verdict_quotes_the_verdict_table',
        'tests/test_compression.py::test_the_verdict_says_compression_pays_on_a_slow_link_and_not_on_a_fast_one'),
    "course_lib.lessons.l08_collectives.compression_verdict_table": (
        'tests/test_reading_agreement_i37g.py::test_lesson_08s_compression_verdict_rows_carry_the_compression_tables_cells',
        'tests/test_reading_agreement_i37g.py::test_lesson_08s_compression_verdict_table_follows_the_links'),

    # course_lib/lessons/l09_performance_model.py
    "course_lib.lessons.l09_performance_model.verdict": (
        None,
        None),
    "course_lib.lessons.l09_performance_model.alexnet_reading": (
        None,
        None),
    "course_lib.lessons.l09_performance_model.weak_reading": (
        None,
        None),
    "course_lib.lessons.l09_performance_model.inception_reading": (
        None,
        None),
    "course_lib.lessons.l09_performance_model.weird_trick_reading": (
        None,
        None),

    # course_lib/lessons/l10_model_parallelism.py
    "course_lib.lessons.l10_model_parallelism.bubble_reading": (
        None,
        None),
    "course_lib.lessons.l10_model_parallelism.fsdp_step_reading": (
        None,
        None),
    "course_lib.lessons.l10_model_parallelism.node_reading": (
        None,
        None),
    "course_lib.lessons.l10_model_parallelism.model_reading": (
        None,
        None),
    "course_lib.lessons.l10_model_parallelism.verdict": (
        None,
        None),
    "course_lib.lessons.l10_model_parallelism.async_bubble_reading": (
        None,
        None),
    "course_lib.lessons.l10_model_parallelism.staleness_reading": (
        None,
        None),
    "course_lib.lessons.l10_model_parallelism.depth_reading": (
        'tests/test_pipeline.py::test_the_depth_reading_for_each_outcome',
        None),

    # course_lib/lessons/l11_batch_size_science.py
    "course_lib.lessons.l11_batch_size_science.bert_noise_verdict": (
        None,
        None),
    "course_lib.lessons.l11_batch_size_science.bend_reading": (
        None,
        None),
    "course_lib.lessons.l11_batch_size_science.noise_verdict": (
        None,
        None),
    "course_lib.lessons.l11_batch_size_science.sharpness_verdict": (
        None,
        None),
    "course_lib.lessons.l11_batch_size_science.growth_verdict": (
        None,
        None),
    "course_lib.lessons.l11_batch_size_science.bn_verdict": (
        None,
        None),
    "course_lib.lessons.l11_batch_size_science.adaptive_verdict": (
        None,
        None),
    "course_lib.lessons.l11_batch_size_science.scaling_verdict": (
        None,
        None),

    # course_lib/lessons/l12_hyperparameter_search.py
    "course_lib.lessons.l12_hyperparameter_search.verdict": (
        None,
        None),
    "course_lib.lessons.l12_hyperparameter_search.parallel_reading": (
        None,
        None),
    "course_lib.lessons.l12_hyperparameter_search.pruning_reading": (
        None,
        None),
    "course_lib.lessons.l12_hyperparameter_search.bert_verdict": (
        None,
        None),
    "course_lib.lessons.l12_hyperparameter_search.replay_verdict": (
        None,
        None),
    "course_lib.lessons.l12_hyperparameter_search.confirm_reading": (
        None,
        None),

    # course_lib/lessons/l13_multi_node.py
    "course_lib.lessons.l13_multi_node.link_verdict": (
        None,
        None),
    "course_lib.lessons.l13_multi_node.layout_verdict": (
        None,
        None),
    "course_lib.lessons.l13_multi_node.ttt_verdict": (
        None,
        None),
    "course_lib.lessons.l13_multi_node.hierarchy_verdict": (
        None,
        None),
    "course_lib.lessons.l13_multi_node.placement_verdict": (
        None,
        None),
    "course_lib.lessons.l13_multi_node.node_loss_verdict": (
        None,
        None),

    # course_lib/metrics.py
    "course_lib.metrics.noise_verdict": (
        None,
        None),

    # course_lib/parallel/staleness.py
    "course_lib.parallel.staleness.server_reading": (
        None,
        None),

    # course_lib/perf/peaks.py
    "course_lib.perf.peaks.band_verdict": (
        None,
        None),

    # course_lib/train/ncf.py
    "course_lib.train.ncf.TrainResult.phase_reading": (
        'tests/test_reading_agreement.py::test_the_phase_reading_quotes_the_phase_table',
        None),
}
# fmt: on


def _readings() -> list[str]:
    """Every public reading function (and method) in course_lib, by dotted name."""
    found = []
    for path in sorted((ROOT / "course_lib").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.parse(path.read_text()).body:
            members = [(node.name, node)] if isinstance(node, ast.FunctionDef) else []
            if isinstance(node, ast.ClassDef):
                members = [(f"{node.name}.{n.name}", n) for n in node.body if isinstance(n, ast.FunctionDef)]
            found += [f"{module}.{name}" for name, n in members
                      if NAMES.search(n.name) and not n.name.startswith("_")]
    return found


def _test_source(node_id: str) -> str | None:
    """The source of the test ``tests/<file>.py::<name>`` (None if there is no such test)."""
    file, _, name = node_id.partition("::")
    path = ROOT / file
    if not (file.startswith("tests/") and path.is_file() and name):
        return None
    src = path.read_text()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(src, node)
    return None


def test_every_reading_is_listed():
    found = set(_readings())
    unlisted = sorted(found - set(COVERAGE))
    gone = sorted(set(COVERAGE) - found)
    assert not unlisted, f"reading functions with no entry in COVERAGE (add their two tests): {unlisted}"
    assert not gone, f"COVERAGE lists functions course_lib no longer has (remove them): {gone}"


def test_every_reading_has_both_tests():
    missing = [f"{name}: {'agreement' if a is None else 'opposite'} test missing"
               for name, (a, o) in COVERAGE.items() if a is None or o is None]
    assert not missing, "\n".join(missing)


def test_each_listed_test_exists_and_calls_its_reading():
    wrong = []
    for name, (agreement, opposite) in COVERAGE.items():
        short = name.rsplit(".", 1)[-1]
        for kind, node_id in (("agreement", agreement), ("opposite", opposite)):
            if node_id is None or (kind == "agreement" and node_id.startswith("no table: ")):
                continue
            src = _test_source(node_id)
            file_src = (ROOT / node_id.partition("::")[0]).read_text() if src is not None else ""
            if src is None:
                wrong.append(f"{name}: {kind} test {node_id!r} does not exist")
            elif short not in src and short not in file_src:
                wrong.append(f"{name}: {kind} test {node_id!r} never calls {short}")
            elif kind == "agreement" and "disagree" not in src:
                wrong.append(f"{name}: {node_id!r} does not check the reading against its table (disagreements)")
    assert not wrong, "\n".join(wrong)

