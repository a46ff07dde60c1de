"""Environment fixes for using transformers next to fairseq in one virtualenv."""
from __future__ import annotations

import sys


def hide_broken_torchaudio() -> bool:
    """Make a torchaudio that cannot load count as absent; returns True if it was hidden.

    fairseq requires torchaudio, and the newest torchaudio wheel (2.11) fails to load its native
    library with torch 2.13 (``OSError: Could not load this library``). transformers imports it
    whenever it is installed (``from transformers import Trainer`` goes through audio_utils), so
    call this before importing Trainer. A ``None`` entry in ``sys.modules`` makes
    ``importlib.util.find_spec`` return None and ``import torchaudio`` raise ImportError.
    """
    if sys.modules.get("torchaudio", 0) is None:
        return True
    try:
        import torchaudio  # noqa: F401
    except (ImportError, OSError) as e:
        for name in [m for m in sys.modules if m == "torchaudio" or m.startswith("torchaudio.")]:
            del sys.modules[name]
        sys.modules["torchaudio"] = None
        utils = sys.modules.get("transformers.utils.import_utils")  # transformers already imported
        if utils is not None and hasattr(utils.is_torchaudio_available, "cache_clear"):
            utils.is_torchaudio_available.cache_clear()
        print(f"note: torchaudio cannot be loaded here ({type(e).__name__}); treating it as not installed",
              file=sys.stderr)
        return True
    return False
