"""``lit-fl fit`` once per argument list, all inside one process group: started by torchrun in
tests/test_multi_process.py (``python -m torch.distributed.run --nproc-per-node 2 tests/distributed_fit.py JSON``).
Every run's StepRunner joins the group torchrun set up instead of spawning processes of its own."""

from __future__ import annotations

import faulthandler
import json
import sys

from lit_fl.cli import main

if __name__ == "__main__":
    faulthandler.enable()  # a rank that aborts (SIGABRT, SIGSEGV) prints every thread's Python stack to stderr
    for argv in json.loads(sys.argv[1]):
        rc = main(argv)
        if rc != 0:
            sys.exit(rc)
