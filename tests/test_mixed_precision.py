"""What does 16-bit math on hardware we do not have (course_lib.hardware), and fp16's number lines
(course_lib.diagrams, course_lib.widgets). Lesson 05's own measurements: tests/lessons/test_l05_mixed_precision.py."""

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from course_lib import diagrams, widgets  # noqa: E402
from course_lib.hardware import EMULATED, GPU, Hardware, sixteen_bit_units  # noqa: E402


def _close(fig):
    import matplotlib.pyplot as plt

    fig.canvas.draw()
    plt.close(fig)


# --------------------------------------------------------------------------- hardware we do not have


def _cpu(flags=()):
    return Hardware(cpu_cores=8, cpu_model="test CPU", gloo_available=True, cpu_isa16=tuple(flags),
                    bf16_autocast="native" if {"avx512_bf16", "amx_bf16"} & set(flags) else EMULATED,
                    fp16_autocast="native" if {"avx512_fp16", "amx_fp16"} & set(flags) else EMULATED)


def _gpu(name, cc):
    major = int(cc.split(".")[0])
    return Hardware(
        cpu_cores=8,
        cpu_model="test CPU",
        gpus=(GPU(0, name, 32.0, cc),),
        cuda_available=True,
        gloo_available=True,
        nccl_available=True,
        bf16_autocast="native" if major >= 8 else EMULATED,
        fp16_autocast="native" if major >= 7 else "yes",
    )


AVX2_LAPTOP = _cpu(())
AMX_SERVER = _cpu(("amx_bf16", "avx512_bf16", "avx512_fp16"))
V100, T4, A100, H100 = (_gpu("Tesla V100-SXM2-32GB", "7.0"), _gpu("Tesla T4", "7.5"),
                        _gpu("NVIDIA A100-SXM4-80GB", "8.0"), _gpu("NVIDIA H100 80GB HBM3", "9.0"))


def test_what_does_16_bit_math_in_hardware():
    assert sixteen_bit_units(AVX2_LAPTOP) == {"bf16": None, "fp16": None}
    amx = sixteen_bit_units(AMX_SERVER)
    assert "AMX-BF16" in amx["bf16"] and "AVX512-BF16" in amx["bf16"] and "AVX512-FP16" in amx["fp16"]
    for gpu in (V100, T4):
        units = sixteen_bit_units(gpu)
        assert units["bf16"] is None and "fp16 tensor cores" in units["fp16"]
    for gpu in (A100, H100):
        units = sixteen_bit_units(gpu)
        assert "bf16 tensor cores" in units["bf16"] and gpu.gpus[0].compute_capability in units["bf16"]
    assert sixteen_bit_units(_gpu("Tesla P100", "6.0")) == {"bf16": None, "fp16": None}
    assert sixteen_bit_units(H100, "cpu") == {"bf16": None, "fp16": None}  # the host CPU of a GPU node, no flags


def test_the_hardware_table_says_native_names_instructions_not_speed():
    text = str(AMX_SERVER)
    assert "native: AMX-BF16" in text and "not a speedup" in text and "lesson 05 measures it" in text
    assert f"{EMULATED}: no bf16 instructions" in str(AVX2_LAPTOP) and "slow" not in str(AVX2_LAPTOP)


# --------------------------------------------------------------------------- fp16's number lines


def test_the_number_lines_of_parameter_and_activation_gradients_render():
    panels = {"parameter gradients": np.random.default_rng(0).normal(-17, 4, 2000),
              "activation gradients": np.random.default_rng(1).normal(-20, 3, 2000)}
    fig, fr = diagrams.fp16_number_lines(panels, 2.0 ** 16)
    assert set(fr) == set(panels) and len(fig.axes) == 2 and fig.axes[1].get_title().startswith("activation gradients")
    assert fr["activation gradients"] == diagrams.fp16_fractions(panels["activation gradients"], 2.0 ** 16)
    _close(fig)
    fig, fr2 = widgets.loss_scaling_explorer(panels, scale=2.0 ** 16, interactive=False)
    assert fr2 == fr
    _close(fig)
    with pytest.raises(ValueError, match="at least one"):
        diagrams.fp16_number_lines({})


