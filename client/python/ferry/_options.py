"""The Loader's option checks that stand by themselves: pipelines as the native side takes
them, io_cpus, and a dispatcher job's sharing, weight and priority (ferry/loader.py)."""
import json

from . import _ferry


def _pipeline_string(pipeline):
    if isinstance(pipeline, dict):
        return json.dumps(pipeline)
    return str(pipeline)


def _cpu_list(cpus):
    """io_cpus as the native client takes it: "0-3,8" (taskset -c's form), "" for none."""
    if cpus is None:
        return ""
    if isinstance(cpus, str):
        return _ferry.cpu_list(cpus)  # checked now: a ValueError naming the mistake
    if isinstance(cpus, int):
        cpus = [cpus]
    out = []
    for c in cpus:
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise ValueError("io_cpus: CPU numbers are integers >= 0, not %r" % (c,))
        out.append(str(c))
    if not out:
        raise ValueError("io_cpus: an empty list (give None to leave the threads where they start)")
    return _ferry.cpu_list(",".join(out))


def _sharing(sharing, trainer_id, weight, priority, dispatcher, local_threads):
    """(sharing, trainer_id, weight, priority), checked: a sweep (sharing="every") is a
    dispatcher job's, with a name for each trainer; weight in (0, 1000], priority in
    [-100, 100]."""
    if sharing not in ("splits", "every"):
        raise ValueError("sharing must be 'splits' or 'every', not %r" % (sharing,))
    trainer_id = trainer_id or ""
    if sharing == "every":
        if not dispatcher:
            raise ValueError("sharing='every' is a dispatcher job's: give dispatcher= and job_name=")
        if not trainer_id:
            raise ValueError("sharing='every' needs trainer_id=: this trainer's name, the same across restarts")
        if local_threads:
            raise ValueError("sharing='every' and local_threads do not go together yet: a trainer's own worker "
                             "serves one job, and a sweep's trainers read one lane each")
    elif trainer_id:
        raise ValueError("trainer_id names a trainer of a sweep: give sharing='every'")
    weight, priority = float(weight), int(priority)
    if not 0 < weight <= 1000:
        raise ValueError("weight must be in (0, 1000], not %r" % (weight,))
    if not -100 <= priority <= 100:
        raise ValueError("priority must be in [-100, 100], not %r" % (priority,))
    return sharing, trainer_id, weight, priority


def _mixture_data(data, trainer_normalize, user_code):
    """(mixture or None, the job's data, trainer_normalize) of a Loader given `data`:
    a ferry.Mixture's job names its dataset "mixture", its sources travel with it."""
    from .datasets import Mixture
    if not isinstance(data, Mixture):
        return None, data, trainer_normalize
    if user_code is not None:
        raise ValueError("a mixture draws from data Ferry reads: no dataset= or python steps")
    if data.own_pipelines:
        # The trainer's finish is the job pipeline's; a source's own pipeline may
        # normalize otherwise: its workers send what it makes.
        if trainer_normalize:
            raise ValueError("trainer_normalize: a mixture whose sources have pipelines of their own is normalized "
                             "where it is made")
        trainer_normalize = False
    return data, "mixture", trainer_normalize


def _check_state(loader, sd, same_world):
    """A state_dict() of `loader`'s job and settings, or a ValueError saying what differs."""
    if not isinstance(sd, dict) or sd.get("version") != loader._STATE_VERSION:
        raise ValueError("not a ferry.Loader state_dict of this version (version %r)"
                         % (sd.get("version") if isinstance(sd, dict) else type(sd).__name__))
    if sd.get("mode") != loader.mode:
        raise ValueError("state_dict of a %s loader given to a %s loader" % (sd.get("mode"), loader.mode))
    if bool(sd.get("ranked")) != loader.ranked:
        raise ValueError("state_dict of a %s given to a %s" % (
            "rank" if sd.get("ranked") else "shared job's consumer", "rank" if loader.ranked else
            "shared job's consumer"))
    # Another world may change the batch size (keeping the global batch, say).
    keys = ("seed", "data", "pipeline", "job_name") + (("batch_size",) if same_world else ())
    for key in keys:
        if sd.get(key) != getattr(loader, key):
            raise ValueError("state_dict was saved with %s=%r, this loader has %r" % (key, sd.get(key),
                                                                                    getattr(loader, key)))
    if sd.get("mixture", "") != loader.mixture:
        raise ValueError("state_dict was saved with another mixture (its sources, weights or epoch) than this "
                         "loader's")
    if sd.get("bad_samples", "skip") != loader.bad_samples:
        # Saved by a loader of the other policy: its positions name other batches.
        raise ValueError("state_dict was saved with bad_samples=%r, this loader has %r"
                         % (sd.get("bad_samples", "skip"), loader.bad_samples))
