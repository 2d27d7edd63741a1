"""What the HF conversion modules share: the one error they raise, the import's checkpoint name, the
default tolerance of their exactness checks, and reading JSON files. No torch: the import and export
commands read their command lines with it."""

import json
from pathlib import Path

from ..errors import json_error
from ..files import InputError

CHECKPOINT_FILE = "model.pt"  # the checkpoint fairseq-bio-import-hf writes
DEFAULT_TOLERANCE = (
    1e-4  # the largest |difference| of outputs a check accepts, unless told otherwise
)


class HFConvertError(InputError):
    """The input cannot be converted exactly; the commands print it as one line and write
    nothing."""


def read_json(path: Path) -> dict:
    """A JSON object from ``path``, or a one-line error naming the file (and line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HFConvertError(f"{path}: not found") from None
    except UnicodeDecodeError:
        raise HFConvertError(f"{path}: not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise HFConvertError(json_error(path, e)) from None
    if not isinstance(data, dict):
        raise HFConvertError(f"{path}: line 1: expected a JSON object")
    return data
