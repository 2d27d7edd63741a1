"""fairseq-bio-init-student: the student holds exactly the expected teacher tensors (embeddings, the
chosen layers renumbered, final norms, MLM head) and nothing else, loads as a plain bio_roberta with
weights_only=True, and shapes that cannot be copied are refused in one line."""

import json
import re

import pytest
import torch
from conftest import run_cli
from helpers.distillation import TEACHER, save_teacher

from fairseq_bio.cli.init_student import init_student
from fairseq_bio.checkpoints import load_checkpoint
from fairseq_bio.errors import BioError
from fairseq_bio.files import InputError

FOUR = {**TEACHER, "encoder_layers": 4}
LAYER = re.compile(r"^encoder\.sentence_encoder\.layers\.(\d+)\.(.*)$")


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A 4-layer bio_roberta teacher with a sentence head, its dict.txt and bpe.json beside it."""
    directory = tmp_path_factory.mktemp("teacher4")
    path = save_teacher(directory, sizes=FOUR, head=True)
    (directory / "bpe.json").write_text(json.dumps({"_name": "characters"}), encoding="utf-8")
    return path


@pytest.mark.parametrize("spec, chosen", [("every-other", [0, 2]), ("3,1,0", [3, 1, 0])])
def test_exactly_the_expected_teacher_tensors_are_copied(teacher, tmp_path, spec, chosen):
    info = init_student(teacher, tmp_path / "student" / "init.pt", layers=spec)
    assert info["layers"] == chosen and info["options"]["encoder_layers"] == len(chosen)
    source = load_checkpoint(teacher)["model"]
    student = load_checkpoint(tmp_path / "student" / "init.pt")[
        "model"
    ]  # weights_only=True through fairseq_bio.checkpoints
    expected = {}
    for key in source:
        match = LAYER.match(key)
        if match is None:
            if not key.startswith(
                "classification_heads."
            ):  # the teacher's sentence head is not the student's
                expected[key] = key
        elif int(match.group(1)) in chosen:
            expected[
                f"encoder.sentence_encoder.layers.{chosen.index(int(match.group(1)))}.{match.group(2)}"
            ] = key
    assert set(student) == set(expected)  # nothing else
    for key, teacher_key in expected.items():
        assert torch.equal(student[key], source[teacher_key]), key
    assert any(k.startswith("classification_heads.") for k in source)
    assert (tmp_path / "student" / "dict.txt").read_bytes() == (
        teacher.parent / "dict.txt"
    ).read_bytes()
    assert (tmp_path / "student" / "bpe.json").is_file()


def test_the_student_is_an_ordinary_bio_roberta_checkpoint(teacher, tmp_path):
    from fairseq import checkpoint_utils

    out = tmp_path / "init.pt"
    init_student(teacher, out)
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(out)], arg_overrides={"data": str(tmp_path)}
    )
    student = models[0].eval()
    assert (
        type(student).__name__ == "BioRobertaModel"
        and len(student.encoder.sentence_encoder.layers) == 2
    )
    assert cfg.model.encoder_layers == 2 and cfg.task._name == "bio_masked_lm"
    assert not student.classification_heads
    state = load_checkpoint(out)
    assert state["criterion"] is None and state["extra_state"]["init_student"][
        "teacher_layers"
    ] == [0, 2]


def test_shapes_that_cannot_be_copied_are_refused(teacher, tmp_path):
    for kwargs, message in (
        (dict(embed_dim=16), "--embed-dim 16: the teacher's is 32"),
        (dict(ffn_dim=128), "--ffn-dim 128: the teacher's is 64"),
        (dict(heads=2), "--heads 2: the teacher's is 4"),
        (dict(layers="0,4"), "teacher layer 4 is not in 0..3"),
        (dict(layers="0,0"), "named twice"),
        (dict(layers="even"), "every-other"),
    ):
        with pytest.raises(BioError, match=re.escape(message)):
            init_student(teacher, tmp_path / "s.pt", **kwargs)
    assert not (tmp_path / "s.pt").exists()
    init_student(
        teacher, tmp_path / "s.pt", embed_dim=32, ffn_dim=64, heads=4
    )  # the teacher's own sizes are fine
    with pytest.raises(InputError, match="s.pt: already exists; pass --overwrite to replace it"):
        init_student(teacher, tmp_path / "s.pt")


def test_console_script_refuses_in_one_line(teacher, tmp_path):
    result = run_cli(
        [
            "fairseq-bio-init-student",
            "--checkpoint",
            teacher,
            "--out",
            tmp_path / "s.pt",
            "--embed-dim",
            "16",
        ],
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("fairseq-bio-init-student: --embed-dim 16")
    )
    assert not (tmp_path / "s.pt").exists()
