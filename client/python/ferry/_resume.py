"""The loader's state for checkpoints (Loader's state_dict/load_state_dict): where a
rank's iteration stands, and resuming from it, exactly, also on another world size
(elastic: the rest of the epoch the old ranks stopped in, spread over the new ones)."""
import hashlib
import json

from . import _ferry
from ._options import _check_state


class Resumable:
    """Loader's checkpoint methods (a mixin: they read and set the loader's iteration
    fields)."""

    _STATE_VERSION = 2

    def state_dict(self):
        """Where this rank's iteration stands, to resume exactly: save it with the
        checkpoint (every rank its own)."""
        sd = {"version": self._STATE_VERSION, "mode": self.mode, "rank": self.rank, "world_size": self.world_size,
              "ranked": self.ranked, "epoch": self._epoch, "batches_done": self._batches_done, "seed": self.seed,
              "batch_size": self.batch_size, "data": self.data, "pipeline": self.pipeline,
              "last_batch": self._last_batch(), "bad_samples": self.bad_samples}
        if self._mixture is not None:
            sd["mixture"] = self.mixture
        sd["job_name"] = self.job_name
        # The job being read, as elastic resume needs it to work out what was yielded.
        sd["job"] = {"name": self._segment_name, "first_epoch": self._job_first_epoch,
                     "taken": [list(t) for t in self._taken], "batches_per_split": self.batches_per_split,
                     "num_samples": self._samples_listed() if self.mode != "workers" else -1}
        if self.mode == "dispatcher":
            # A closed loader kept its state when it closed (or was given one): no
            # reconnecting to the job to say where it stands.
            sd["iterator_state"] = (self._it.state(self._unyield()) if self._it is not None
                                    else self._resume_state)
        return sd

    def load_state_dict(self, sd):
        """Continues from a state_dict(): the next batch is the one after the saved point.

        `sd` is this rank's own state, or the list of every rank's states (as gathered
        with torch.distributed.all_gather_object, or read one file per rank). Given the
        list of a different world size (elastic resume), the rest of the epoch the old
        ranks stopped in, and only the rest, is spread over this world's ranks with
        equal steps (its last batches padded, or fewer than world_size x batch_size
        samples dropped), then the run goes on from the next epoch."""
        if isinstance(sd, (list, tuple)):
            states = list(sd)
            if not states:
                raise ValueError("an empty list of states")
            worlds = {int(x["world_size"]) if isinstance(x, dict) and "world_size" in x else -1 for x in states}
            old_world = worlds.pop() if len(worlds) == 1 else -1
            if old_world < 1 or sorted(int(x["rank"]) for x in states) != list(range(old_world)):
                raise ValueError("the list must hold every rank's state once, all of one world size")
            for x in states:
                self._check_state(x, same_world=old_world == self.world_size)
            if old_world != self.world_size:
                self._load_elastic(sorted(states, key=lambda x: int(x["rank"])))
                return
            sd = states[self.rank]
        self._check_state(sd, same_world=True)
        if int(sd["world_size"]) != self.world_size or int(sd["rank"]) != self.rank:
            raise ValueError("this is the state of rank %s of %s, and this loader is rank %d of %d; to resume with "
                             "another world size give the list of every rank's states"
                             % (sd["rank"], sd["world_size"], self.rank, self.world_size))
        self.close()
        self._stash = None
        self._epoch = int(sd["epoch"])
        self._batches_done = int(sd["batches_done"])
        job = sd["job"]
        self._segment_name = job["name"]
        self._job_first_epoch = int(job["first_epoch"])
        self._taken = [tuple(t) for t in job["taken"]]
        self._num_samples = int(job["num_samples"])
        self._len = None
        if self.mode == "dispatcher":
            self._resume_state = sd["iterator_state"]
        elif self.mode == "workers" and self._batches_done:
            raise ValueError("point-to-point loaders resume at epoch boundaries only; use a dispatcher job")

    def _load_elastic(self, states):
        """Elastic resume from the old ranks' states (sorted by rank)."""
        epochs = {int(x["epoch"]) for x in states}
        if len(epochs) != 1:
            raise ValueError("the old ranks' states are at different epochs %s (not saved at the same step?)"
                             % sorted(epochs))
        epoch = epochs.pop()
        old = states[0]
        job = old["job"]
        if any(x["job"] != job for x in states):
            raise ValueError("the old ranks' states are of different jobs")
        mid_epoch = any(int(x["batches_done"]) > 0 for x in states)
        if mid_epoch and any(x.get("bad_samples", "skip") == "refill" for x in states):
            # Under refill a yielded batch holds the split's next good samples, not the
            # positions its plan names, so the old ranks' positions are not known.
            raise ValueError("a state saved mid-epoch under bad_samples='refill' resumes with the same world size "
                             "only (or save at an epoch boundary)")
        if self.mode == "workers" and mid_epoch:
            raise ValueError("point-to-point loaders resume at epoch boundaries only; use a dispatcher job")
        taken = [tuple(t) for t in job["taken"]]  # the old world's own remainder of this epoch
        n = int(job["num_samples"])
        if mid_epoch:
            old_job = {"data": self.data, "pipeline": self._wire_pipeline, "batch_size": int(old["batch_size"]),
                       "seed": self.seed, "shuffle": self.shuffle, "last_batch": old["last_batch"],
                       "batches_per_split": int(job["batches_per_split"]), "world_size": int(old["world_size"]),
                       "num_samples": n, "taken": taken}
            if self._mixture is not None:
                old_job.update(self._mixture.options())
            yielded = []
            for r, x in enumerate(states):
                if int(x["batches_done"]) == 0:
                    yielded.append([])
                elif self.mode == "local":
                    yielded.append(list(range(int(x["batches_done"]))))
                else:
                    yielded.append(_ferry.yielded_batches(old_job, x["iterator_state"], r, epoch))
            taken = [tuple(t) for t in _ferry.taken_positions(old_job, yielded)]
        rest = n - sum(hi - lo for lo, hi in taken)
        if taken and self.drop_last and rest < self.world_size * self.batch_size:
            taken, epoch = [], epoch + 1  # what is left of the epoch makes no batch for every rank: dropped
        self.close()
        self._stash = None
        self._epoch = epoch
        self._batches_done = 0
        self._taken = taken
        self._num_samples = n
        self._resume_state = ""
        self._len = None
        if self.mode == "dispatcher":
            # A job of this world for the rest of the epoch (named after what it holds,
            # so that every new rank names the same), then one from the next epoch.
            self._job_first_epoch = epoch
            self._segment_name = "%s.w%d.e%d" % (self.job_name, self.world_size, epoch)
            if taken:
                digest = hashlib.sha1(json.dumps(taken).encode()).hexdigest()[:12]
                self._segment_name += ".rest-" + digest

    def _check_state(self, sd, same_world):
        _check_state(self, sd, same_world)
