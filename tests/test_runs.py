"""fairseq_bio.runs: the command lines it builds, a real tiny training run through them read back
from its json log, fairseq's simple log format, and how a failed, late or early-ending run is
reported."""

import json
import logging
import sys
import time
from pathlib import Path

import pytest
from conftest import ENCODER_SIZE, build_once

import fairseq_bio
from fairseq_bio import runs

PLUGIN = Path(fairseq_bio.__file__).resolve().parent


def test_hydra_train_command_line():
    command = runs.hydra_train(
        "bio_roberta_tiny", "task.data=/d", "optimization.max_update=3", save_dir="/s", log="/s.log"
    )
    assert command == [
        str(Path(sys.executable).parent / "fairseq-hydra-train"),
        "--config-dir",
        str(runs.shipped_config_dir()),
        "--config-name",
        "bio_roberta_tiny",
        f"common.user_dir={PLUGIN}",
        "checkpoint.save_dir=/s",
        "common.log_file=/s.log",
        "common.log_format=json",
        "task.data=/d",
        "optimization.max_update=3",
    ]
    assert Path(command[0]).is_file() and (Path(command[2]) / "bio_roberta_tiny.yaml").is_file()
    # fairseq's default log format; another config dir; the user dir left to the overrides (the
    # BLURB runner's)
    assert runs.hydra_train("c", log="/l", log_format=None)[5:] == [
        f"common.user_dir={PLUGIN}",
        "common.log_file=/l",
    ]
    assert runs.hydra_train("c", "x=1", config_dir="/cfg", user_dir=None)[1:] == [
        "--config-dir",
        "/cfg",
        "--config-name",
        "c",
        "x=1",
    ]


def test_argparse_and_console_script_command_lines():
    assert runs.train("/data", "--task", "bio_masked_lm")[1:] == [
        "/data",
        "--user-dir",
        str(PLUGIN),
        "--task",
        "bio_masked_lm",
    ]
    assert runs.train("/data", "--task", "masked_lm", plugin=False)[1:] == [
        "/data",
        "--task",
        "masked_lm",
    ]
    validate = runs.validate(Path("/data"), "--path", Path("/m.pt"))
    assert Path(validate[0]).name == "fairseq-validate" and validate[1:] == [
        "/data",
        "--user-dir",
        str(PLUGIN),
        "--path",
        "/m.pt",
    ]
    predict = runs.command("fairseq-bio-predict", "--checkpoint", Path("/c.pt"))
    assert predict == [
        str(Path(sys.executable).parent / "fairseq-bio-predict"),
        "--checkpoint",
        "/c.pt",
    ]


@pytest.fixture(scope="module")
def tiny_run(data_bin, tmp_path_factory):
    """(save_dir, json log, output) of 3 updates of a small bio_roberta_tiny, validated at updates 2
    and 3."""

    def build(save_dir):
        log, out = save_dir / "train.log", save_dir / "train.out"
        runs.run(
            runs.hydra_train(
                "bio_roberta_tiny",
                f"task.data={data_bin('bytebpe')}",
                *ENCODER_SIZE,
                "optimization.max_update=3",
                "dataset.validate_interval_updates=2",
                "dataset.max_valid_steps=2",
                "common.log_interval=1",
                "common.tensorboard_logdir=null",
                "checkpoint.no_save=true",
                save_dir=save_dir,
                log=log,
            ),
            out,
            cwd=save_dir,
            env={"OMP_NUM_THREADS": "1"},
            timeout=600,
        )
        return save_dir, log, out

    return build_once(tmp_path_factory, "runs-tiny", build)


def test_a_real_json_log_is_read_by_kind(tiny_run):
    _, log, out = tiny_run
    inner, valid, train = (
        runs.logged(log, "train_inner"),
        runs.logged(log, "valid"),
        runs.logged(log, "train"),
    )
    assert sorted(inner) == [1, 2, 3] and sorted(valid) == [2, 3] and sorted(train) == [3]
    # the kind's prefix is gone and the values are numbers (fairseq writes "9.87")
    assert (
        inner[2]["num_updates"] == 2
        and isinstance(inner[2]["loss"], float)
        and 0 < inner[2]["update"] < 1
    )
    assert set(valid[3]) >= {"loss", "ppl", "num_updates"} and valid[3]["num_updates"] == 3
    assert not any(k.startswith("valid_") for k in valid[3]) and isinstance(train[3]["loss"], float)
    assert runs.last_validation(log) == valid[3]
    # the console's lines (time | level | name | {...}) read the same
    assert runs.entries(out.read_text().splitlines(), "valid") == valid
    assert (
        runs.logged(log.parent / "missing.log", "valid") == {}
        and runs.last_validation(log.parent / "x") is None
    )


def test_later_lines_win_and_a_restart_is_read_after_its_marker(tiny_run):
    _, log, _ = tiny_run
    lines = log.read_text().splitlines()
    first = json.loads(
        next(line for line in lines if line.startswith('{"epoch"') and '"num_updates": "2"' in line)
    )
    resumed = lines + ["Start iterating over samples", json.dumps({**first, "loss": "123.5"})]
    assert (
        runs.entries(resumed, "train_inner")[2]["loss"] == 123.5
    )  # a resumed run's line replaces the first
    after = "\n".join(resumed).split("Start iterating over samples")[-1].splitlines()
    assert list(runs.entries(after, "train_inner")) == [2]
    with pytest.raises(ValueError, match="kind 'validation': one of train_inner, train, valid"):
        runs.entries(lines, "validation")


def simple_format(log, *validations, epoch=1, formatter=None):
    """``validations`` ({stat: value}) written to ``log`` by fairseq's own simple progress bar, as
    the default (tqdm) format writes them without a tty: to common.log_file bare, to the console
    after the logger's ``formatter``.
    """
    from fairseq.logging.progress_bar import SimpleProgressBar

    handler = logging.FileHandler(log)
    handler.setFormatter(logging.Formatter(formatter))
    logger = logging.getLogger("fairseq.logging.progress_bar")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        for stats in validations:
            SimpleProgressBar([], epoch=epoch, prefix="valid on 'valid' subset").print(
                stats, tag="valid"
            )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        handler.close()


def test_the_simple_format_validation_line_is_read(tmp_path):
    log = tmp_path / "simple.log"
    simple_format(
        log,
        *(
            {"loss": loss, "ppl": 2**loss, "wps": 1000.0, "num_updates": updates}
            for updates, loss in ((10, 9.5), (20, 8.25))
        ),
    )
    assert "epoch 001 | valid on 'valid' subset | loss 9.5 | ppl " in log.read_text()
    valid = runs.logged(log, "valid")
    assert (
        sorted(valid) == [10, 20]
        and valid[20]["loss"] == 8.25
        and valid[20]["ppl"] == pytest.approx(2**8.25, 1e-3)
    )
    assert runs.last_validation(log) == valid[20] and runs.logged(log, "train_inner") == {}
    # fairseq-validate's output: no epoch, no num_updates (not a training run's), after the
    # console's logger prefix
    output = tmp_path / "validate.out"
    simple_format(
        output,
        {"loss": 7.5, "ppl": 2**7.5},
        epoch=None,
        formatter="%(asctime)s | %(levelname)s | " "%(name)s | %(message)s",
    )
    assert " | INFO | valid | valid on 'valid' subset | loss 7.5 | ppl " in output.read_text()
    assert runs.last_validation(output)["loss"] == 7.5 and runs.logged(output, "valid") == {}


def test_a_failed_run_shows_the_tail_of_its_output(tmp_path):
    out = tmp_path / "out.txt"
    script = "import sys\nfor i in range(3000): print('line', i)\nsys.exit('the reason it failed')"
    with pytest.raises(runs.RunError) as failed:
        runs.run([sys.executable, "-c", script], out)
    message = str(failed.value)
    assert failed.value.code == 1 and message.startswith(
        f"{Path(sys.executable).name} exited 1; the end of its " f"output ({out}):\n"
    )
    assert message.endswith("line 2999\nthe reason it failed\n") and "line 0\n" not in message
    assert (
        runs.run([sys.executable, "-c", "print('fine')"], out).output().endswith("fine\n")
    )  # appended


def test_a_run_past_its_time_is_killed_with_its_process_group(tmp_path):
    child = tmp_path / "child.pid"
    script = (
        f"import subprocess, sys, time\np = subprocess.Popen([sys.executable, '-c', 'import time; "
        f"time.sleep(60)'])\nopen({str(child)!r}, 'w').write(str(p.pid))\nprint('started', flush=True)\n"
        "time.sleep(60)"
    )
    run = runs.Run([sys.executable, "-c", script], tmp_path / "out.txt", session=True)
    deadline = time.time() + 60
    while not (child.exists() and child.read_text()) and time.time() < deadline:
        time.sleep(0.05)
    with pytest.raises(
        runs.RunTimeout, match=r"still running after 0.5 s, killed; the end .*:\nstarted"
    ):
        run.check(timeout=0.5)
    assert run.poll() == -9
    stat = Path(
        f"/proc/{int(child.read_text())}/stat"
    )  # the child it started: killed with it (its group's)

    def alive():
        try:
            return (
                stat.read_text().split()[2] != "Z"
            )  # a zombie is dead, waiting for its new parent to reap it
        except FileNotFoundError:
            return False

    deadline = time.time() + 10
    while alive() and time.time() < deadline:
        time.sleep(0.05)
    assert not alive()


def test_waiting_for_an_update_of_a_run_that_ends_first(tmp_path):
    log = tmp_path / "train.log"
    log.write_text('{"epoch": 1, "update": 0.1, "loss": "9", "num_updates": "1"}\n')
    run = runs.Run([sys.executable, "-c", "print('bye')"], tmp_path / "out.txt", log=log)
    assert run.wait_for_update(1) == 1
    with pytest.raises(runs.RunError, match=r"exited 0 before update 2; .*\nbye"):
        run.wait_for_update(2)


def test_a_captured_run_keeps_stdout_and_stderr_apart(tmp_path):
    script = (
        "import os, sys\nprint('out', os.environ['X'])\nprint('err', file=sys.stderr)\nsys.exit(2)"
    )
    done = runs.capture([sys.executable, "-c", script], cwd=tmp_path, env={"X": "1"})
    assert (done.returncode, done.stdout, done.stderr) == (2, "out 1\n", "err\n")
    with pytest.raises(
        runs.RunError, match=r"exited 2; the end of its output:\nout 1\nerr\n$"
    ) as failed:
        runs.capture([sys.executable, "-c", script], env={"X": "1"}, check=True)
    assert failed.value.code == 2
    assert runs.capture([sys.executable, "-c", "print('fine')"], check=True).stdout == "fine\n"
    with pytest.raises(ValueError, match="not both"):
        runs.Run([sys.executable, "-c", ""], tmp_path / "out.txt", capture=True)


def test_a_captured_run_past_its_time_is_killed_with_what_it_printed():
    script = "import time\nprint('started', flush=True)\ntime.sleep(60)"
    with pytest.raises(
        runs.RunTimeout, match=r"still running after 3 s, killed; the end of its output:\nstarted\n"
    ):
        runs.capture([sys.executable, "-c", script], timeout=3)


def test_progress_is_reported_while_a_run_goes_on(tmp_path):
    seen = []
    script = "import time\nfor i in range(4):\n    print(i, flush=True)\n    time.sleep(0.4)"
    run = runs.Run([sys.executable, "-c", script], tmp_path / "out.txt")
    assert run.check(progress=lambda r: seen.append(r.output()), every=0.25) is run
    assert len(seen) >= 3 and seen[-1].startswith("0\n") and run.output() == "0\n1\n2\n3\n"
    # past its time with progress reported: killed all the same
    run = runs.Run([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "slow.txt")
    with pytest.raises(runs.RunTimeout, match="still running after 0.5 s"):
        run.finish(0.5, progress=lambda r: None, every=0.2)
    assert run.poll() == -9

    def interrupted(run):
        raise KeyboardInterrupt

    # a progress report that raises (as Ctrl-C would) ends the wait, and the run is killed, not left
    # running
    run = runs.Run([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "stopped.txt")
    with pytest.raises(KeyboardInterrupt):
        run.finish(progress=interrupted, every=0.1)
    assert run.poll() == -9
