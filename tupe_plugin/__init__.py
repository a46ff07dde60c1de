"""TUPE for fairseq: ``--user-dir tupe_plugin`` registers the model, archs and LR scheduler."""
from . import quiet_warnings  # noqa: F401  (hides fairseq's known hydra/torch deprecation warnings)
from . import checkpoint_safety  # noqa: F401  (allowlists fairseq checkpoint classes for torch.load)
from . import clean_exit  # noqa: F401  (process groups destroyed at the end of a run: no abort at exit)
from . import full_disk, graceful_stop
from . import run_lock  # noqa: F401  (pretrain.sh's SAVE_DIR lock kept and released after its exec)
from . import criterions  # noqa: F401
from . import tasks  # noqa: F401  (electra)
from . import optim  # noqa: F401
from .models import TupeRobertaModel, VariantMismatchError  # noqa: F401

if graceful_stop.train_module() is not None:  # a training process only: an export or an analysis keeps fairseq's own
    full_disk.install()  # a full disk while saving: one line, the partial removed, checkpoint_last.pt kept
graceful_stop.install_if_training()  # SIGTERM / Ctrl-C: finish the update, save checkpoint_last.pt, exit 143 / 130
