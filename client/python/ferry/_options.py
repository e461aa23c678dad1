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
