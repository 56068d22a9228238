"""Readings fixed after read f12a of the twelfth full-profile run (runs/20261204-012210, lessons 00 and 01).
Each test feeds the reading the run's own numbers (which printed a statement its outputs contradict) and the
opposite."""

from test_reading_agreement import _pass_ratios, disagreements
from test_reading_r6a import _loader_comp
from test_reading_r10a import _throughput, loader_derived

from course_lib import hardware, tiers
from course_lib.hardware import EMULATED, Hardware
from course_lib.lessons import l01_baseline as L01

# --------------------------------------------------------------------------- lesson 00

# the run's machine: an AMD EPYC with AVX512-BF16 and no AVX512-FP16/AMX, 2 usable cores, no GPU
RUN_FLAGS = {"avx512f", "avx512_bf16", "avx2", "fma"}


def _detect(monkeypatch, flags):
    monkeypatch.setattr(hardware, "cpu_info", lambda: ("AMD EPYC", set(flags)))
    monkeypatch.setattr(hardware, "_gpus_from_nvidia_smi", lambda: None)
    monkeypatch.setattr(hardware.torch.cuda, "is_available", lambda: False)
    return hardware.detect()


def test_the_hardware_table_names_emulation_without_a_speed_nothing_measured(monkeypatch):
    """read f12a 00-H1: "fp16 autocast  emulated (slow): no fp16 instructions or tensor cores" two rows above "16-bit
    speed  not measured here: 'native' names instructions, not a speedup (lesson 05 measures it)": "(slow)" was a
    speed claim that nothing in the run measured. Opposite: a CPU with AVX512-FP16 is native for fp16."""
    hw = _detect(monkeypatch, RUN_FLAGS)
    assert (hw.bf16_autocast, hw.fp16_autocast) == ("native", EMULATED)
    text = str(hw)
    assert "fp16 autocast    emulated (converted in software): no fp16 instructions or tensor cores" in text, text
    assert "slow" not in text and "16-bit speed     not measured here" in text
    fp16 = _detect(monkeypatch, RUN_FLAGS | {"avx512_fp16"})
    assert fp16.fp16_autocast == "native" and "native: AVX512-FP16 arithmetic instructions" in str(fp16)
    none = _detect(monkeypatch, {"avx2"})
    assert (none.bf16_autocast, none.fp16_autocast) == (EMULATED, EMULATED)
    assert "bf16 autocast    emulated (converted in software): no bf16 instructions" in str(none)


def test_the_tier_plan_prints_its_table_in_text_too():
    """read f12a 00-S1: cell 5's text/plain output was "TierPlan(tier='cpu', profile='full', ...,
    compile_backend='inductor')" on one line, under the Hardware table that prints its table in both forms."""
    hw = Hardware(cpu_cores=2, cpu_model="AMD EPYC", gloo_available=True, cpu_isa16=("avx512_bf16",),
                  bf16_autocast="native", fp16_autocast=EMULATED)
    p = tiers.plan(hw, "full")
    assert repr(p) == str(p) == str(p.table())
    assert repr(p).startswith("The course's plan for this machine (cpu, full)") and "TierPlan(" not in repr(p)
    assert "loader_workers" in repr(p) and p._repr_html_().startswith("<")
    assert p == tiers.plan(hw, "full")  # still a value: the dataclass's equality is untouched


# --------------------------------------------------------------------------- lesson 01

# cell 17's table and cell 14's yardstick record of the twelfth full run
RUN_TPUT = ((256, 2343, 74427, 3.44), (1024, 585, 221310, 4.627), (4096, 146, 395581, 10.35),
            (16384, 36, 676073, 24.23), (65536, 9, 585220, 112.0))
RUN_PACE = {"before": 85433.0, "after": 73191.0, "rate": 79312.0, "run": 87070.3456891479}


def test_a_dip_inside_the_lessons_own_pace_movement_is_not_read_as_a_turn_down():
    """read f12a 01-H1: "samples/s stopped growing: it peaked at batch 16384 (676,073) and the largest batch ran at
    0.87x of that peak" in the lesson whose yardstick moved -14% across its baseline run: 676,073 / 585,220 = 1.16x,
    inside the 1 / (1 - 0.14) = 1.17x that movement puts on a ratio of single runs. The table has no inverted ms/step
    pair, so the reading's own spread was 1.0. Opposite: 0.5x of the peak under the same ±14% is a turn-down."""
    noise = L01.pace_noise(RUN_PACE)
    assert abs(noise - (1 - 73191 / 85433)) < 1e-12  # the movement, larger than the run's +9.8 % off the mean
    table = _throughput(RUN_TPUT)
    old = L01.throughput_reading(table)  # the old call (no noise) still reads the table alone
    assert "samples/s stopped growing: it peaked at batch 16384 (676,073)" in old and "±" not in old
    text = L01.throughput_reading(table, noise=noise)
    assert "stopped growing: it peaked" not in text, text
    assert ("samples/s peaked at batch 16384 (676,073) and the largest batch ran at 0.87x of that peak, less than the "
            "uncertainty below: these runs cannot tell whether it stopped growing") in text, text
    assert "put ±14% on a ratio of timings taken at different moments" in text
    assert "every ratio here is uncertain by at least 1.17x (the same work 14% slower)" in text, text
    assert disagreements(text, table, extra=[noise, 1 / (1 - noise)]) == [], text
    deep = list(RUN_TPUT)
    deep[-1] = (65536, 9, 338036, 193.9)  # 0.50x of the peak: beyond 1.17x
    read = L01.throughput_reading(_throughput(deep), noise=noise)
    assert "samples/s stopped growing: it peaked at batch 16384 (676,073) and the largest batch ran at 0.50x" in read
    assert "uncertain by at least 1.17x" in read
    # a still-growing curve: the last step up of 1.25x is inside 1 / (1 - 0.25) = 1.33x, but not inside 1.17x
    growing = [(256, 100, 40000, 6.4), (1024, 100, 100000, 10.2), (4096, 100, 125000, 32.8)]
    assert "cannot tell whether samples/s was still growing" in L01.throughput_reading(_throughput(growing),
                                                                                        noise=0.25)
    assert "samples/s was still growing at the largest batch measured" in L01.throughput_reading(
        _throughput(growing), noise=noise)
    # an inverted pair wider than the pace's movement keeps its own clause and figure, and no second one
    wide = L01.throughput_reading(_throughput(((256, 100, 34172, 7.492), (1024, 100, 166161, 6.163))), noise=0.05)
    assert "uncertain by at least 1.22x" in wide and "±5%" not in wide, wide
    assert L01.pace_noise({"before": 85433.0}) == 0.0  # timed once only: no movement measured
    huge = L01.throughput_reading(table, noise=1.2)  # a pace that more than doubled: no ratio resolves
    assert "cannot tell whether it stopped growing" in huge and "no ratio here can be told from no change" in huge


def _run_loader(train_persistent=27144.0, wait_before=0.3161, train_steps=100):
    """Cell 21's ladder of the twelfth full run, each rung's kept (better) pass the table's cells (the run's passes are
    not saved; the other pass 1 % worse: :func:`test_reading_r6a._loader_comp`)."""
    comp = _loader_comp({0: (0.2591, 410500, 45097), 1: (0.313, 103888, 36417), 3: (wait_before, 102569, 37233),
                         4: (0.3334, 107437, train_persistent), 5: (0.3475, 141033, 31458),
                         6: (0.2877, 1536392, 63917), 7: (0.0157, 20544031, 100009)})
    return comp if train_steps is None else {**comp, "train_steps": train_steps}


def test_the_persistent_workers_rungs_training_step_is_read_not_left_to_the_table():
    """read f12a 01-H2: the table's "+ prefetch_factor=4 ... 37233 0.83x" then "+ persistent_workers ... 27144 0.60x",
    0.73x from one rung to the next, printed and never read: persistent workers act only at an epoch's end, and the
    training was timed over 100 steps of an epoch of 19,337. Opposite: equal rates are no measurable difference, and
    a ladder timed over more than an epoch (or a saved one without its step count) does not attribute the step."""
    comp = _run_loader()
    text, table = L01.loader_reading(comp), L01.comparison_table(comp)
    assert ("the persistent-workers rung trained at 27,144: against the rung before it (37,233), 0.73x: keeping the "
            "workers alive changes only an epoch's end, and training was timed over 100 steps inside one epoch (of "
            "19,337), so that step is not the setting's") in text, text
    epoch_share = 0.3161 / (4_950_135 / 102569)
    assert disagreements(text, table, extra=(1, 2, 100, 19337, epoch_share, *_pass_ratios(comp),
                                             *loader_derived(comp))) == [], text
    level = L01.loader_reading(_run_loader(train_persistent=37233.0 * 1.01))
    assert "the persistent-workers rung trained at 37,605: against the rung before it (37,233), no measurable " \
           "difference (1.01x; pass by pass 1.01x and 1.01x: within 5%)" in level, level
    assert "not the setting's" not in level
    for comp in (_run_loader(train_steps=20_000), _run_loader(train_steps=None)):
        said = L01.loader_reading(comp)
        assert "the persistent-workers rung trained at 27,144: against the rung before it (37,233), 0.73x" in said
        assert "not the setting's" not in said and "inside one epoch" not in said


def test_the_first_batch_waits_share_of_an_epoch_names_the_wait_it_is_of():
    """read f12a 01-S4: "went from 316.1 to 333.4 ms (1.05x longer) ...; paid once per epoch, it is 0.65% of an epoch's
    loading here": 0.65% is the 316.1 ms wait (the rung without persistent workers) at that rung's rate; the 333.4 ms
    would be 0.72%. Opposite: a wait of ten times that is 6.55% of the same epoch, and named with its own ms."""
    text = L01.loader_reading(_run_loader())
    assert ("went from 316.1 to 333.4 ms (1.05x longer)" in text
            and "paid once per epoch, the wait without them (316.1 ms) is 0.65% of an epoch's loading at that rung's "
                "rate here" in text), text
    assert "it is 0.65%" not in text
    long = L01.loader_reading(_run_loader(wait_before=3.161))
    assert "paid once per epoch, the wait without them (3161.0 ms) is 6.55% of an epoch's loading" in long, long
