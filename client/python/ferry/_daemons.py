"""The daemons an installed wheel carries in ferry/bin, behind its console scripts:
ferry-worker, ferry-dispatcher, ferry-local, ferry-ctl and ferry-dispatcher-load (a
dispatcher under simulated workers: README, "How big a dispatcher") run the programs of
the same name, which the wheel holds with the shared libraries they need (client/wheel/build.sh);
ferry-launch (SageMaker heterogeneous clusters) runs the script of that name there, in
this interpreter, and it starts the daemons beside it.

ferry-worker runs user code (--allow-user-code) in this interpreter unless --python
names another: the one the wheel was installed into has ferry, cloudpickle and the
trainer's packages."""
import os
import sys

BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def path(name):
    """The program `name` this installation carries, or None (a build from source keeps
    its programs in its build folder: build/server, build/client)."""
    p = os.path.join(BIN, name)
    return p if os.access(p, os.X_OK) else None


def _exec(name, extra=()):
    p = path(name)
    if p is None:
        sys.exit("%s: not part of this installation of ferry (%s): the wheel carries it; a source build has it in "
                 "its build folder" % (name, os.path.dirname(BIN)))
    os.execv(p, [name] + list(extra) + sys.argv[1:])


def worker():
    named = any(a == "--python" or a.startswith("--python=") for a in sys.argv[1:])
    _exec("ferry-worker", [] if named else ["--python", sys.executable])


def dispatcher():
    _exec("ferry-dispatcher")


def local():
    _exec("ferry-local")


def ctl():
    _exec("ferry-ctl")


def dispatcher_load():
    _exec("ferry-dispatcher-load")


def launch():
    p = path("ferry-launch")
    if p is None:
        _exec("ferry-launch")  # says it is not part of this installation
    os.execv(sys.executable, [sys.executable, p] + sys.argv[1:])
