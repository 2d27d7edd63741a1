"""The GPU check's plan of a lent machine's minutes (tests/gpu/check.py, run as
benchmarks/gpu_check.py; the steps themselves run in CI's dry mode:
``GPU_CHECK_DRY=1 make gpu-check``)."""

import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests" / "gpu"))
import check as gpu_check  # noqa: E402


class Clock:
    """A stand-in for ``time``: only the steps move it, by the seconds each says it ran."""

    def __init__(self):
        self.now = 1000.0

    def time(self):
        return self.now


def planned_run(monkeypatch, tmp_path, argv, ran=lambda timeout: timeout):
    """``gpu_check.main(argv)`` in the dry mode with every part stood in for by one that runs
    ``ran(timeout)`` seconds (by default its whole timeout: the worst case): [(part, timeout given,
    seconds ran)] in the order the parts ran, and the seconds the whole check took."""
    clock, done = Clock(), []

    def step(part, rows):
        def run(dry, env, timeout):
            seconds = ran(timeout)
            clock.now += seconds
            done.append((part, timeout, seconds))
            row = gpu_check.Step(part, "pass", seconds, "")
            return row if rows == 1 else [row] * rows

        return run

    monkeypatch.setattr(gpu_check, "time", clock)
    monkeypatch.setattr(
        gpu_check, "STEPS", {p: (n, step(p, 1)) for p, (n, _) in gpu_check.STEPS.items()}
    )
    monkeypatch.setattr(gpu_check, "pytest_steps", step("tests", 3))
    monkeypatch.setattr(gpu_check, "table", lambda steps, dry: "table\n")
    monkeypatch.setattr(gpu_check, "REPO", tmp_path)
    monkeypatch.setattr(
        gpu_check, "RESULTS", tmp_path / "results"
    )  # the table: not over the real one
    start = clock.now
    assert gpu_check.main(["--dry", *argv]) == 0
    return done, clock.now - start


@pytest.mark.parametrize("only", [None, "tests,copies,large", "speed,tests", "tests"])
def test_the_check_ends_within_its_budget_with_the_tests_last(monkeypatch, tmp_path, only):
    """Every part running to its timeout (the worst case), the parts taken run in their fixed order,
    each gets some time, the tests last, and the whole check ends within ``--budget``: the lent
    machine's command limit is kept.
    """
    argv = ["--budget", "540"] + ([] if only is None else ["--only", only])
    done, took = planned_run(monkeypatch, tmp_path, argv)
    taken = gpu_check.PARTS if only is None else only.split(",")
    assert [part for part, _, _ in done] == [
        p for p in gpu_check.PARTS if p in taken
    ]  # not the order given
    assert done[-1][0] == "tests" and all(timeout > 0 for _, timeout, _ in done)
    assert took == pytest.approx(540)


def test_the_tests_get_what_the_measurements_leave(monkeypatch, tmp_path):
    """Measurements that end early leave their time to the tests; with the default budget the worst
    case fits a lent machine's 10-minute command."""
    worst, took = planned_run(monkeypatch, tmp_path, [])
    early, _ = planned_run(monkeypatch, tmp_path, [], ran=lambda timeout: timeout / 2)
    measured = sum(seconds for part, _, seconds in early if part != "tests")
    (last, tests, _), (_, tests_at_worst, _) = early[-1], worst[-1]
    assert (
        last == "tests"
        and tests == pytest.approx(gpu_check.BUDGET_S - measured)
        and tests > tests_at_worst
    )
    assert took < 600


def test_an_unknown_part_is_one_line(capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--only", "tests,profile"])
    assert (
        "--only 'tests,profile': a comma-separated choice of speed, large, copies, tests"
        in capsys.readouterr().err
    )


def test_the_gpu_commands_name_only_known_variants():
    """The GPU run's encoder-speed variants exist (the dry run takes other ones)."""
    import encoder_speed

    variants = gpu_check.GPU_SPEED[gpu_check.GPU_SPEED.index("--variants") + 1]
    assert encoder_speed.choose_variants(variants, "bio_roberta_base") == variants.split(",")


def test_the_shared_runners_path_runs_the_check():
    """``benchmarks/gpu_check.py`` (the path the shared GPU runner and `make gpu-check` call) is the
    check's entry."""
    result = subprocess.run(
        [sys.executable, REPO / "benchmarks" / "gpu_check.py", "--only", "tests,profile"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 2 and "usage: gpu_check.py" in result.stderr
    assert "a comma-separated choice of speed, large, copies, tests" in result.stderr
