"""`make gpu-check`'s entry point: the GPU check itself is tests/gpu/check.py, beside the tests it
runs.

This path stays because the shared GPU runner (../shared/gpu/run.sh) and the Makefile call
``python3 benchmarks/gpu_check.py``; it takes the same arguments and environment (--dry, --only,
--budget, GPU_CHECK_DRY=1) and exits with the check's status.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "gpu"))
from check import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
