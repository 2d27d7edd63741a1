"""benchmarks/gpu_check.py's plan of a lent machine's minutes (the steps themselves run in CI's dry mode:
``GPU_CHECK_DRY=1 make gpu-check``)."""

import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_check  # noqa: E402


def test_every_part_gets_its_share_and_the_encoder_speed_what_is_left():
    plan = gpu_check.plan(gpu_check.PARTS, 540)
    assert list(plan) == ["tests", "copies", "large", "speed"]  # the speed step last: it takes the rest
    assert plan["speed"] is None
    assert plan["tests"] == pytest.approx(250) and plan["copies"] == pytest.approx(30)
    assert plan["large"] == pytest.approx(75)
    assert 540 - sum(v for v in plan.values() if v) >= 180  # at least 3 minutes left for the encoder speed


def test_some_parts_share_the_whole_budget_in_the_fixed_order():
    plan = gpu_check.plan(["large", "copies"], 210)  # a second command: given out of order
    assert list(plan) == ["copies", "large"] and plan["large"] is None
    assert plan["copies"] == pytest.approx(210 * 30 / 105)


def test_an_unknown_part_is_one_line(capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--only", "tests,profile"])
    assert "--only 'tests,profile': a comma-separated choice of tests, copies, large, speed" in capsys.readouterr().err
