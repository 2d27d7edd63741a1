"""benchmarks/gpu_check.py's plan of a lent machine's minutes (the steps themselves run in CI's dry mode:
``GPU_CHECK_DRY=1 make gpu-check``)."""

import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_check  # noqa: E402


def test_the_measurements_run_first_and_the_tests_get_what_is_left():
    plan = gpu_check.plan(gpu_check.PARTS, 540)
    assert list(plan) == ["speed", "large", "copies", "tests"] and plan["tests"] is None
    assert plan["speed"] == pytest.approx(300) and plan["large"] == pytest.approx(75)
    assert plan["copies"] == pytest.approx(25)


def test_some_parts_share_the_whole_budget_in_the_fixed_order():
    plan = gpu_check.plan(["tests", "copies", "large"], 200)  # a second command, given out of order
    assert list(plan) == ["large", "copies", "tests"] and plan["tests"] is None
    assert plan["large"] == pytest.approx(200 * 75 / 240) and plan["copies"] == pytest.approx(200 * 25 / 240)
    assert gpu_check.plan(["tests"], 330) == {"tests": None}


def test_an_unknown_part_is_one_line(capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--only", "tests,profile"])
    assert "--only 'tests,profile': a comma-separated choice of speed, large, copies, tests" in capsys.readouterr().err


def test_the_gpu_commands_name_only_known_variants():
    """The GPU run's encoder-speed variants exist (the dry run takes other ones)."""
    import encoder_speed

    variants = gpu_check.GPU_SPEED[gpu_check.GPU_SPEED.index("--variants") + 1]
    assert encoder_speed.choose_variants(variants, "bio_roberta_base") == variants.split(",")
    assert "bio+adamw+wholecomp+fused" in variants
