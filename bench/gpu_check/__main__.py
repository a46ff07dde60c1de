"""``python bench/gpu_check``: the GPU check's command (``driver.main``)."""
import sys
from pathlib import Path

# Run as a folder, Python puts the folder itself first on sys.path; bench/ instead makes this package importable as
# gpu_check, and the bench scripts it measures with (bench_attention, bench_train_step, sync_count) beside it.
sys.path[0] = str(Path(__file__).resolve().parents[1])

from gpu_check.driver import main  # noqa: E402

sys.exit(main())
