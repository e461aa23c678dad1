"""A trainer's own code as a job carries it (ferry.Loader(dataset=...), and the steps
ferry.DataLoader runs in the workers' Python): cloudpickle of (dataset, transform,
collate_fn) and the trainer's versions."""
import json
import os
import sys

from . import _user_worker


def user_code_payload(dataset, transform=None, collate_fn=None):
    """(payload, versions): the user's code as the job carries it. cloudpickle pickles
    what the trainer's __main__ defines by value and what installed packages define by
    reference (the workers import those: the same image as the trainer's)."""
    if dataset is not None and not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise TypeError("dataset must be map-style (with __len__ and __getitem__), not %s" % type(dataset).__name__)
    try:
        import cloudpickle
    except ImportError:
        raise ImportError("a dataset of your own is shipped to the workers with cloudpickle: "
                          "apt-get install python3-cloudpickle (or pip install cloudpickle)") from None
    # The user's own modules (files of theirs, not installed packages) go by value
    # as __main__ does: a worker has the trainer's packages (the same image), not the
    # folder of its script.
    registered = []
    for mod in list(sys.modules.values()):
        if mod is not None and _own_module(mod):
            try:
                cloudpickle.register_pickle_by_value(mod)
                registered.append(mod)
            except (ValueError, TypeError):
                pass
    try:
        payload = cloudpickle.dumps((dataset, transform, collate_fn))
    finally:
        for mod in registered:
            cloudpickle.unregister_pickle_by_value(mod)
    return payload, json.dumps(_user_worker._versions(), sort_keys=True)


def _own_module(mod):
    """A module of the user's own files: not __main__ (cloudpickle sends it by value
    anyway), not built in, and not under the interpreter's library or site folders."""
    name = getattr(mod, "__name__", "")
    path = getattr(mod, "__file__", None)
    if name == "__main__" or not path or name.split(".")[0] in ("torch", "torchvision", "numpy", "ferry"):
        return False
    path = os.path.realpath(path)
    if any(part in ("site-packages", "dist-packages") for part in path.split(os.sep)):
        return False
    import sysconfig
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        root = sysconfig.get_paths().get(key)
        if root and path.startswith(os.path.realpath(root) + os.sep):
            return False
    return True
