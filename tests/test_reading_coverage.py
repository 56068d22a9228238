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
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMES = re.compile(r"(reading|takeaway|verdict)")

# fmt: off
COVERAGE = {
    # course_lib/ladder.py
    "course_lib.ladder.ladder_reading": (
        'tests/test_reading_agreement_i37i.py::test_the_ladder_reading_quotes_the_ladder_table',
        'tests/test_ladder.py::test_the_ladder_reading_is_true_for_what_each_tier_records'),

    # course_lib/lessons/l00_setup.py
    "course_lib.lessons.l00_setup.launch_reading": (
        ("no table: the launch's measured seconds and how the launcher started its workers "
         "(course_lib.dist.launcher.worker_start_method, fork_server_running), printed under the all-reduce"),
        'tests/test_setup_reading.py::test_the_launch_line_follows_how_the_workers_started'),

    # course_lib/lessons/l01_baseline.py
    "course_lib.lessons.l01_baseline.bottleneck_reading": (
        'tests/test_reading_agreement_i37i.py::test_the_bottleneck_reading_quotes_the_phase_table_and_the_profile',
        'tests/test_step_study.py::test_bottleneck_reading_from_the_run_and_the_profile'),
    "course_lib.lessons.l01_baseline.pace_drift_reading": (
        ("no table: the yardstick's two timings (Pace.finish(): before and after the baseline), printed alone under "
         "the run's summary in cell 13 (its numbers are checked against them in "
         'tests/test_reading_agreement_i37i.py::test_the_pace_readings_read_no_table)'),
        'tests/test_step_study.py::test_pace_drift_reading_states_the_drift_and_what_it_means_for_the_speedups'),
    "course_lib.lessons.l01_baseline.pace_reading": (
        ("no table: the baseline's curve (evaluation steps and training-clock times), plotted in the figure of cell "
         "14 (the phase table printed with it is phase_reading's; its numbers are checked against the curve's "
         'intervals in tests/test_reading_agreement_i37i.py::test_the_pace_readings_read_no_table)'),
        'tests/test_step_study.py::test_pace_reading_says_when_equal_steps_took_unequal_time'),
    "course_lib.lessons.l01_baseline.optimizer_reading": (
        'tests/test_reading_agreement.py::test_the_optimizer_reading_and_its_speedups_quote_the_ms_columns',
        'tests/test_step_study.py::test_optimizer_reading_says_what_each_variant_did_at_each_batch'),
    "course_lib.lessons.l01_baseline.accuracy_reading": (
        'tests/test_reading_agreement.py::test_the_accuracy_reading_quotes_the_accuracy_table',
        'tests/test_step_study.py::test_accuracy_reading_compares_the_difference_with_seeds_and_sampling_error'),
    "course_lib.lessons.l01_baseline.compile_reading": (
        'tests/test_reading_agreement.py::test_the_compile_reading_quotes_the_compile_table',
        'tests/test_step_study.py::test_compile_reading_pays_back_only_a_measurable_saving'),
    "course_lib.lessons.l01_baseline.loader_reading": (
        'tests/test_reading_agreement.py::test_the_loader_reading_quotes_the_loader_table',
        'tests/test_loader_ladder.py::test_loader_reading_is_read_from_the_rungs'),
    "course_lib.lessons.l01_baseline.sgd_reading": (
        'tests/test_reading_r8a.py::test_the_sgd_line_reads_the_sweeps_sgd_row_against_the_popularity_floor',
        'tests/test_reading_r8a.py::test_the_sgd_line_reads_the_sweeps_sgd_row_against_the_popularity_floor'),
    "course_lib.lessons.l01_baseline.throughput_reading": (
        'tests/test_reading_agreement.py::test_the_throughput_reading_quotes_its_table',
        'tests/test_bench.py::test_throughput_reading_is_read_from_the_rows'),

    # course_lib/lessons/l02_linear_scaling.py
    "course_lib.lessons.l02_linear_scaling.regime_reading": (
        'tests/test_reading_agreement.py::test_lesson_02s_regime_reading_quotes_the_regime_rows',
        'tests/test_train_tricks.py::test_an_end_of_perfect_scaling_known_only_as_a_tendency_is_said_as_one'),
    "course_lib.lessons.l02_linear_scaling.gap_reading": (
        'tests/test_reading_agreement_more.py::test_lesson_02s_gap_reading_quotes_the_gap_table',
        'tests/test_train_tricks.py::test_gap_reading_compares_the_change_with_twice_the_sampling_error'),

    # course_lib/lessons/l03_warmup.py
    "course_lib.lessons.l03_warmup.warmup_reading": (
        'tests/test_reading_agreement_more.py::test_lesson_03s_warmup_reading_quotes_the_sweep_table',
        'tests/test_optimizer_study.py::test_warmup_reading_compares_the_best_warmup_with_none'),
    "course_lib.lessons.l03_warmup.takeaway": (
        'tests/test_reading_agreement.py::test_lesson_03s_takeaway_quotes_the_deciding_table',
        'tests/test_train_tricks.py::test_lesson_03s_takeaway_follows_its_verdict'),

    # course_lib/lessons/l04_lars.py
    "course_lib.lessons.l04_lars.reading": (
        'tests/test_reading_agreement.py::test_lesson_04s_reading_quotes_its_layer_tables',
        'tests/test_layerwise.py::test_the_reading_says_noise_falls_as_one_over_sqrt_b_and_signal_stays'),
    "course_lib.lessons.l04_lars.dead_layers_reading": (
        'tests/test_reading_agreement_i37i.py::test_the_dead_layers_reading_quotes_the_trust_ratio_table',
        'tests/test_layerwise.py::test_dead_layers_are_read_from_a_trust_ratio_stuck_at_the_fallback'),
    "course_lib.lessons.l04_lars.race_reading": (
        'tests/test_reading_agreement_i37i.py::test_the_race_reading_quotes_the_race_table',
        'tests/test_ladder.py::test_race_reading_states_each_optimizers_best_from_the_records'),

    # course_lib/lessons/l05_mixed_precision.py
    "course_lib.lessons.l05_mixed_precision.activation_reading": (
        'tests/test_reading_agreement.py::test_lesson_05s_activation_reading_quotes_the_activation_table',
        'tests/test_mixed_precision.py::test_activation_reading_names_the_proxy'),
    "course_lib.lessons.l05_mixed_precision.loss_scaling_reading": (
        'tests/test_mixed_precision.py::test_the_loss_scaling_reading_quotes_its_table',
        'tests/test_mixed_precision.py::test_loss_scaling_reading_when_scaling_matters'),
    "course_lib.lessons.l05_mixed_precision.lars_unscale_reading": (
        'tests/test_reading_agreement_more.py::test_lesson_05s_lars_unscale_reading_quotes_its_table',
        'tests/test_reading_agreement_i37i.py::test_the_lars_unscale_reading_says_when_the_ratios_were_not_unscaled'),
    "course_lib.lessons.l05_mixed_precision.rung_verdict_reading": (
        'tests/test_reading_r3a.py::test_lesson_05s_rung_verdict_says_when_the_seconds_only_measure_the_pace',
        'tests/test_reading_r3a.py::test_lesson_05s_rung_verdict_says_when_the_seconds_only_measure_the_pace'),
    "course_lib.lessons.l05_mixed_precision.speedup_reading": (
        'tests/test_reading_agreement_more.py::test_lesson_05s_speedup_reading_quotes_the_speed_table',
        'tests/test_mixed_precision.py::test_the_two_throughput_measurements_are_compared_with_the_noise'),
    "course_lib.lessons.l05_mixed_precision.speed_verdict": (
        'tests/test_reading_r7b.py::test_the_speed_reading_reads_the_interleaved_rounds_where_the_repeats_spread_decides_nothing',
        'tests/test_reading_r7b.py::test_the_rung_is_decided_by_rounds_that_all_put_one_precision_ahead'),
    "course_lib.lessons.l05_mixed_precision.loss_scale_reading": (
        'tests/test_reading_agreement.py::test_lesson_05s_loss_scale_reading_quotes_its_figure',
        'tests/test_mixed_precision.py::test_loss_scale_reading_says_when_nothing_dynamic_happened'),

    # course_lib/lessons/l06_data_parallel.py
    "course_lib.lessons.l06_data_parallel.ring_reading": (
        'tests/test_reading_agreement.py::test_lesson_06s_ring_reading_quotes_the_schedule_it_draws',
        'tests/test_data_parallel_study.py::test_ring_reading_counts_the_schedule'),
    "course_lib.lessons.l06_data_parallel.allreduce_reading": (
        'tests/test_reading_agreement_more.py::test_lesson_06s_allreduce_reading_quotes_the_sweep_table',
        'tests/test_reading_agreement_i37i.py::test_the_allreduce_reading_follows_the_sweep'),
    "course_lib.lessons.l06_data_parallel.overlap_reading": (
        'tests/test_reading_agreement_more.py::test_lesson_06s_overlap_reading_quotes_the_bucket_table',
        'tests/test_reading_agreement_i37i.py::test_the_overlap_reading_follows_the_buckets'),
    "course_lib.lessons.l06_data_parallel.timeline_reading": (
        'tests/test_reading_agreement.py::test_lesson_06s_timeline_reading_quotes_the_timeline_table',
        'tests/test_data_parallel_study.py::test_timeline_reading_splits_pending_time_into_overlapped_and_waited'),
    "course_lib.lessons.l06_data_parallel.compression_reading": (
        'tests/test_reading_agreement_more.py::test_lesson_06s_compression_reading_quotes_the_compression_table',
        'tests/test_reading_agreement_i37i.py::test_the_compression_reading_follows_the_step_times'),
    "course_lib.lessons.l06_data_parallel.scaling_reading": (
        'tests/test_reading_agreement.py::test_lesson_06s_scaling_reading_quotes_the_scaling_table',
        'tests/test_scaling.py::test_the_reference_clause_follows_the_fit'),
    "course_lib.lessons.l06_data_parallel.optimization_reading": (
        'tests/test_reading_agreement_more.py::test_lesson_06s_optimization_reading_quotes_the_scaling_table',
        'tests/test_data_parallel_study.py::test_weak_scaling_is_read_at_the_evaluation_spacing_the_runs_had'),

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
        'tests/test_reading_agreement_i37h.py::test_lesson09s_verdict_quotes_the_comparison_table',
        'tests/test_reading_agreement_i37h.py::test_lesson09s_verdict_follows_the_errors'),
    "course_lib.lessons.l09_performance_model.alexnet_reading": (
        'tests/test_reading_agreement_i37h.py::test_lesson09s_alexnet_reading_quotes_the_scaling_table',
        'tests/test_paleo.py::test_readings_follow_the_rows'),
    "course_lib.lessons.l09_performance_model.weak_reading": (
        'no table: the last row of the weak-scaling case, printed alone under the speedup figure of cell 30',
        'tests/test_reading_agreement_i37h.py::test_lesson09s_weak_reading_follows_the_rows'),
    "course_lib.lessons.l09_performance_model.inception_reading": (
        'tests/test_reading_agreement_i37h.py::test_lesson09s_inception_reading_quotes_the_scaling_table',
        'tests/test_paleo.py::test_readings_follow_the_rows'),
    "course_lib.lessons.l09_performance_model.weird_trick_reading": (
        "no table: the hours and ms of one_weird_trick's two cases, printed alone in cell 34",
        'tests/test_paleo.py::test_weird_trick_hybrid_beats_data_parallel_and_reading_says_which'),

    # course_lib/lessons/l10_model_parallelism.py
    "course_lib.lessons.l10_model_parallelism.bubble_reading": (
        'tests/test_reading_agreement_i37h.py::test_lesson10s_bubble_reading_quotes_the_bubble_table',
        'tests/test_pipeline.py::test_the_bubble_reading_for_each_outcome'),
    "course_lib.lessons.l10_model_parallelism.fsdp_step_reading": (
        'tests/test_reading_agreement_i37h.py::test_lesson10s_fsdp_step_reading_quotes_the_memory_table',
        'tests/test_sharded.py::test_the_fsdp_step_reading_splits_the_gap_between_messages_and_the_rest'),
    "course_lib.lessons.l10_model_parallelism.node_reading": (
        'tests/test_reading_agreement_i37h.py::test_lesson10s_node_reading_quotes_the_node_table',
        'tests/test_sharded.py::test_the_node_reading_names_the_choice_what_tensor_parallelism_costs_and_what_does_not_fit'),
    "course_lib.lessons.l10_model_parallelism.model_reading": (
        'tests/test_reading_agreement_i37h.py::test_lesson10s_model_reading_quotes_the_memory_table',
        'tests/test_sharded.py::test_the_model_reading_says_exact_and_under'),
    "course_lib.lessons.l10_model_parallelism.verdict": (
        'tests/test_reading_agreement_i37h.py::test_lesson10s_verdict_quotes_the_tables_it_reads',
        'tests/test_reading_agreement_i37h.py::test_lesson10s_verdict_follows_the_runs'),
    "course_lib.lessons.l10_model_parallelism.async_bubble_reading": (
        'tests/test_reading_agreement_i37h.py::test_lesson10s_async_bubble_reading_quotes_the_async_table',
        'tests/test_async_pipeline.py::test_the_bubble_reading_follows_the_numbers'),
    "course_lib.lessons.l10_model_parallelism.staleness_reading": (
        "no table: the replays' held-out losses (cell 25's figure above it, in its legend) and cell 23's stash gaps",
        'tests/test_async_pipeline.py::test_readings_follow_the_numbers'),
    "course_lib.lessons.l10_model_parallelism.depth_reading": (
        'tests/test_pipeline.py::test_the_depth_reading_for_each_outcome',
        'tests/test_pipeline.py::test_the_depth_reading_for_each_outcome'),

    # course_lib/lessons/l11_batch_size_science.py
    "course_lib.lessons.l11_batch_size_science.bert_noise_verdict": (
        'tests/test_reading_agreement_i37h.py::test_lesson11s_bert_noise_verdict_quotes_the_bert_tables',
        'tests/test_batch_science_study.py::test_bert_noise_verdict_every_outcome'),
    "course_lib.lessons.l11_batch_size_science.bend_reading": (
        'tests/test_batch_science_study.py::test_lesson11s_readings_quote_their_tables',
        'tests/test_batch_science_study.py::test_the_fits_range_widens_with_the_points_error_and_decides_the_bend_both_ways'),
    "course_lib.lessons.l11_batch_size_science.noise_verdict": (
        'tests/test_batch_science_study.py::test_lesson11s_readings_quote_their_tables',
        'tests/test_batch_science_study.py::test_noise_verdict_both_ways'),
    "course_lib.lessons.l11_batch_size_science.sharpness_verdict": (
        'tests/test_reading_agreement_i37h.py::test_lesson11s_sharpness_verdict_quotes_the_sharpness_table',
        'tests/test_batch_science_study.py::test_sharpness_verdict_every_outcome'),
    "course_lib.lessons.l11_batch_size_science.growth_verdict": (
        'tests/test_reading_agreement_i37h.py::test_lesson11s_growth_verdict_quotes_the_growth_table',
        'tests/test_batch_science_study.py::test_growth_verdict_every_outcome'),
    "course_lib.lessons.l11_batch_size_science.bn_verdict": (
        'tests/test_reading_agreement_i37h.py::test_lesson11s_bn_verdict_quotes_the_bn_table',
        'tests/test_batch_science_study.py::test_bn_verdict_and_table_both_ways'),
    "course_lib.lessons.l11_batch_size_science.adaptive_verdict": (
        'tests/test_reading_agreement_i37h.py::test_lesson11s_adaptive_verdict_quotes_the_adaptive_table',
        'tests/test_adaptive_batch.py::test_the_verdict_follows_the_numbers'),
    "course_lib.lessons.l11_batch_size_science.scaling_verdict": (
        'tests/test_reading_agreement_i37h.py::test_lesson11s_scaling_verdict_quotes_the_scaling_table',
        'tests/test_scaling_law.py::test_the_verdict_follows_the_numbers'),

    # course_lib/lessons/l12_hyperparameter_search.py
    "course_lib.lessons.l12_hyperparameter_search.verdict": (
        'tests/test_reading_agreement_i37i.py::test_lesson_12s_strategy_verdict_quotes_the_strategy_table',
        'tests/test_search_study.py::test_verdict_reads_both_outcomes'),
    "course_lib.lessons.l12_hyperparameter_search.parallel_reading": (
        'tests/test_reading_agreement_i37i.py::test_lesson_12s_parallel_reading_quotes_the_parallel_table',
        'tests/test_search_study.py::test_parallel_reading_reads_the_wall_time_of_its_table'),
    "course_lib.lessons.l12_hyperparameter_search.pruning_reading": (
        'tests/test_reading_agreement_i37i.py::test_lesson_12s_pruning_reading_quotes_the_pruning_table',
        'tests/test_search_study.py::test_the_demo_limit_lies_between_the_predictions_and_the_reading_checks_the_prunes'),
    "course_lib.lessons.l12_hyperparameter_search.bert_verdict": (
        'tests/test_reading_agreement_i37i.py::test_lesson_12s_bert_verdict_quotes_the_bert_table',
        'tests/test_search_study.py::test_bert_verdict_reads_both_outcomes'),
    "course_lib.lessons.l12_hyperparameter_search.replay_verdict": (
        'tests/test_reading_agreement_i37i.py::test_lesson_12s_replay_verdict_and_confirm_reading_quote_their_tables',
        'tests/test_tabular_search.py::test_replay_verdict_quotes_its_table_and_reads_both_outcomes'),
    "course_lib.lessons.l12_hyperparameter_search.tpe_reading": (
        'tests/test_reading_r8s.py::test_lesson_12s_tpe_reading_quotes_the_strategy_table',
        'tests/test_reading_r8s.py::test_lesson_12_says_when_tpe_drew_only_its_random_startup_trials'),
    "course_lib.lessons.l12_hyperparameter_search.confirm_reading": (
        'tests/test_reading_agreement_i37i.py::test_lesson_12s_replay_verdict_and_confirm_reading_quote_their_tables',
        'tests/test_tabular_search.py::test_confirm_reading_both_ways'),

    # course_lib/lessons/l13_multi_node.py
    "course_lib.lessons.l13_multi_node.link_verdict": (
        'tests/test_reading_agreement_i37i.py::test_lesson_13s_link_verdict_quotes_the_link_table',
        'tests/test_l13_multi_node.py::test_the_fit_recovers_a_set_link_and_says_so_only_when_it_does'),
    "course_lib.lessons.l13_multi_node.layout_verdict": (
        'tests/test_reading_agreement_i37i.py::test_lesson_13s_layout_verdict_quotes_the_layout_table',
        'tests/test_l13_multi_node.py::test_layout_readings_from_each_path'),
    "course_lib.lessons.l13_multi_node.ttt_verdict": (
        'tests/test_reading_agreement_i37i.py::test_lesson_13s_ttt_verdict_quotes_the_time_to_target_table',
        'tests/test_l13_multi_node.py::test_time_to_target_reading_opposite_results'),
    "course_lib.lessons.l13_multi_node.hierarchy_verdict": (
        'tests/test_reading_agreement_i37i.py::test_lesson_13s_hierarchy_verdict_quotes_the_hierarchy_table',
        'tests/test_l13_multi_node.py::test_the_two_level_all_reduce_wins_on_a_slow_link_by_the_bytes_it_saves'),
    "course_lib.lessons.l13_multi_node.placement_verdict": (
        'tests/test_reading_agreement_i37i.py::test_lesson_13s_placement_verdict_quotes_the_placement_table',
        'tests/test_l13_multi_node.py::test_placement_reading_recorded_and_opposite'),
    "course_lib.lessons.l13_multi_node.node_loss_verdict": (
        ("no table: the staged node loss's record (the node killed, when the survivor noticed, the processes left, "
         "the uninterrupted and resumed runs' difference), printed alone in cell 18"),
        'tests/test_l13_multi_node.py::test_node_loss_reading_recorded_and_opposite'),

    # course_lib/metrics.py
    "course_lib.metrics.noise_verdict": (
        'tests/test_reading_agreement_i37i.py::test_the_noise_verdict_quotes_the_deciding_table',
        'tests/test_metrics.py::test_noise_verdict_names_a_winner_only_beyond_the_seed_to_seed_range'),

    # course_lib/parallel/staleness.py
    "course_lib.parallel.staleness.server_reading": (
        'tests/test_reading_agreement_i37h.py::test_the_server_reading_quotes_the_server_table',
        'tests/test_collectives.py::test_the_server_reading_weighs_the_final_loss_against_the_time_to_target'),

    # course_lib/perf/peaks.py
    "course_lib.perf.peaks.band_verdict": (
        'tests/test_reading_agreement_i37h.py::test_the_band_verdicts_quote_the_probe_table_row_they_sit_in',
        'tests/test_perf.py::test_band_verdicts'),

    # course_lib/train/ncf.py
    "course_lib.train.ncf.TrainResult.phase_reading": (
        'tests/test_reading_agreement.py::test_the_phase_reading_quotes_the_phase_table',
        'tests/test_reading_agreement_i37i.py::test_the_phase_reading_follows_the_phases'),

    # r10g
    "course_lib.lessons.l13_multi_node.compute_reading": (
        ("no table: each k's 1 node x W step (the layout table's step (ms) cells, unrounded) less the all-reduce the "
         "loopback fit gives NeuMF's gradient bytes, over k x the micro-batch, printed in cell 7 above both tables; "
         "checked in tests/test_reading_r10g.py::test_the_compute_line_shows_the_values_across_k_it_was_taken_from"),
        'tests/test_reading_r10g.py::test_the_compute_line_shows_the_values_across_k_it_was_taken_from'),
    # r10b
    "course_lib.lessons.l02_linear_scaling.rule_reading": (
        'tests/test_reading_r10b.py::test_lesson_02_says_up_to_which_batch_each_rule_reached_the_target',
        'tests/test_reading_r10b.py::test_lesson_02_says_up_to_which_batch_each_rule_reached_the_target'),
    # r10d
    "course_lib.lessons.l08_collectives.busbw_reading": (
        'tests/test_reading_r10d.py::test_the_busbw_reading_quotes_the_ring_tree_table',
        'tests/test_reading_r10d.py::test_the_busbw_reading_says_whether_busbw_stayed_the_same_across_p'),

    # r10f
    "course_lib.lessons.l12_hyperparameter_search.cut_best_reading": (
        ("no table: the live searches' trials (their states, budgets, HR@10 curves and parameters, as the journals "
         "hold them), printed under the equal-budget table whose best HR@10 column holds the best it names; checked "
         "in tests/test_reading_r10f.py::test_the_strategy_table_says_when_a_pruner_cut_the_best_configuration"),
        'tests/test_reading_r10f.py::test_the_strategy_table_says_when_a_pruner_cut_the_best_configuration'),

    # f12b
    "course_lib.lessons.l03_warmup.chosen_verdict": (
        'tests/test_reading_f12b.py::test_the_chosen_warmup_says_when_it_is_level_with_the_runner_up',
        'tests/test_reading_f12b.py::test_the_chosen_warmup_says_when_it_is_level_with_the_runner_up'),

    # f12j
    "course_lib.lessons.l12_hyperparameter_search.tpe_gap_reading": (
        'tests/test_reading_f12j.py::test_tpes_best_is_set_against_one_configurations_training_seed_spread',
        'tests/test_reading_f12j.py::test_tpes_best_is_set_against_one_configurations_training_seed_spread'),
    # f12k
    "course_lib.lessons.l13_multi_node.ttt_steps_reading": (
        'tests/test_reading_f12k.py::test_the_time_to_target_verdict_says_what_accumulation_cost_in_steps',
        'tests/test_reading_f12k.py::test_the_time_to_target_verdict_says_what_accumulation_cost_in_steps'),
    # f12f
    "course_lib.lessons.l08_collectives.compression_takeaway": (
        'tests/test_reading_f12f.py::test_the_error_feedback_takeaway_follows_the_held_out_runs',
        'tests/test_reading_f12f.py::test_the_error_feedback_takeaway_follows_the_held_out_runs'),
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


@functools.cache
def _tests_in(file: str) -> tuple[str, dict[str, str]]:
    """A test file's source and its test functions' sources by name, read and parsed once for all entries."""
    src = (ROOT / file).read_text()
    tests: dict[str, str] = {}
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef):
            tests.setdefault(node.name, ast.get_source_segment(src, node))  # the first of a name, as ast.walk finds
    return src, tests


def _test_source(node_id: str) -> str | None:
    """The source of the test ``tests/<file>.py::<name>`` (None if there is no such test)."""
    file, _, name = node_id.partition("::")
    if not (file.startswith("tests/") and (ROOT / file).is_file() and name):
        return None
    return _tests_in(file)[1].get(name)


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
            file_src = _tests_in(node_id.partition("::")[0])[0] if src is not None else ""
            if src is None:
                wrong.append(f"{name}: {kind} test {node_id!r} does not exist")
            elif short not in src and short not in file_src:
                wrong.append(f"{name}: {kind} test {node_id!r} never calls {short}")
            elif kind == "agreement" and "disagree" not in src:
                wrong.append(f"{name}: {node_id!r} does not check the reading against its table (disagreements)")
    assert not wrong, "\n".join(wrong)

