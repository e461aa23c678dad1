"""One rank under the real torchrun (test_ddp.py with FERRY_TEST_TORCHRUN=1): torchrun
starts this file once per rank with the same arguments; it runs the rank script named
first, with '{rank}' in the rest replaced by this rank's RANK (each rank writes its own
report), as that script's __main__."""
import os
import runpy
import sys

if __name__ == "__main__":
    rank = os.environ["RANK"]
    script = sys.argv[1]
    sys.argv = [script] + [a.replace("{rank}", rank) for a in sys.argv[2:]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
