"""Ranks and CPUs: which rank of which world this process is (torch.distributed, else
torchrun's environment), the seed every rank agrees on, and how many decode threads a
rank gets of its host."""
import os


def resolve_rank(rank, world_size):
    """(rank, world_size): as given; else from an initialized torch.distributed process
    group; else from RANK and WORLD_SIZE in the environment (as torchrun sets them);
    else (0, 1)."""
    if (rank is None) != (world_size is None):
        raise ValueError("give both rank and world_size, or neither (they then come from torch.distributed or "
                         "RANK/WORLD_SIZE)")
    if rank is None:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            rank, world_size = dist.get_rank(), dist.get_world_size()
        elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        else:
            rank, world_size = 0, 1
    rank, world_size = int(rank), int(world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError("rank must be in [0, world_size) and world_size >= 1, not rank=%d world_size=%d"
                         % (rank, world_size))
    return rank, world_size


def broadcast_seed(seed, world_size):
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        box = [int(seed)]
        dist.broadcast_object_list(box, src=0)
        return box[0]
    if world_size > 1:
        raise ValueError("seed=None with world_size > 1 and no torch.distributed group: the ranks would shuffle "
                         "differently; give seed=")
    return seed


def available_cpus():
    """CPUs this process may use: its CPU affinity, capped by the cgroup's CPU quota
    (a container's limit), at least 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:  # cgroup v2: "max 100000" or "<quota> <period>"
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        try:  # cgroup v1
            with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as f:
                quota = int(f.read())
            with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as f:
                period = int(f.read())
            if quota > 0 and period > 0:
                n = min(n, max(1, quota // period))
        except (OSError, ValueError):
            pass
    return max(1, n)


def default_threads(num_workers=0):
    """Decode threads for one rank: this host's CPUs (affinity and cgroup limit) split
    across its local ranks (LOCAL_WORLD_SIZE, as torchrun sets it), capped by
    num_workers when that is given (> 0)."""
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    share = max(1, available_cpus() // local)
    return min(int(num_workers), share) if num_workers and num_workers > 0 else share


