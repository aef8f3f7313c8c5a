"""Instructions the compiled kernel executes per request, counted by valgrind (callgrind): a speed figure that,
unlike wall time on a shared machine, is the same on every run, so two versions compare to the percent.

    python scripts/count_kernel_instructions.py [--stream random|sequential] [--requests 200000] [--preset HBM2]
                                                [--memory MEMORY.yaml] [--branches] [--cpu NAME]

Counts every instruction inside numba's compiled-function calls (numba's `call_cfunc`) of one replay of
`--requests` 64 B reads stamped cycle 0, the stream `bench_dram.py` times (`--memory`: on a config file instead of
a preset). The kernel is compiled first, outside valgrind, for a fixed CPU name and feature set into a fresh numba
cache directory, so that the run under valgrind (which reports a different CPU) loads it instead of compiling it
again. A fresh directory each time, because numba keys its cache to `kernel.py` alone and would load a stale kernel
after an edit to a helper it inlines. `--branches` also counts conditional branches and the mispredictions of
valgrind's model predictor (a simple one, so read it as a relative figure: time here follows it more closely than
the instruction count once the count stops falling). `--cpu` names the LLVM CPU to compile for, with that CPU's own
features. By default it is this machine's CPU with its features, unless they include AVX-512: valgrind 3.19 cannot
decode those instructions and stops the run with SIGILL, so such hosts compile for `x86-64-v3` (AVX2) instead.
Counts compare only between runs compiled for the same CPU, and the output line names it. Needs `valgrind` on PATH;
a run takes two to three minutes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import llvmlite.binding as llvm

# A target valgrind 3.19 can run: AVX2 and below, no AVX-512.
VALGRIND_SAFE_CPU = "x86-64-v3"

CHILD = """
import sys
import numpy as np
from archsim.config.memory import load_memory_config, memory_config_from_preset
from archsim.memory import Requests, replay, warm_up
stream, n, preset, memory = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
cfg = load_memory_config(memory) if memory else memory_config_from_preset(preset)
org = cfg.organization
access = org.access_bytes
rng = np.random.default_rng(1)
if stream == "random":
    address = (rng.integers(0, org.capacity_bytes // access, n) * access).astype(np.uint64)
else:
    address = np.arange(n, dtype=np.uint64) * access
warm_up(cfg)  # the variant the counted replay runs, compiled outside the count
replay(cfg, Requests.build(np.zeros(n, np.int64), address, np.zeros(n)))
"""


def compile_target(cpu_name: str | None) -> tuple[str, str]:
    """LLVM CPU name and feature string for numba; an empty feature string means the named CPU's own."""
    if cpu_name is not None:
        return cpu_name, ""
    features = llvm.get_host_cpu_features()
    if features.get("avx512f", False):
        return VALGRIND_SAFE_CPU, ""
    return llvm.get_host_cpu_name(), features.flatten()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stream", choices=("random", "sequential"), default="random")
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--preset", default="HBM2")
    parser.add_argument("--memory", default="", help="a memory config YAML to count instead of --preset")
    parser.add_argument("--branches", action="store_true", help="also simulate the branch predictor")
    parser.add_argument("--cpu", help=f"LLVM CPU name to compile for (default: this machine's, or "
                                      f"{VALGRIND_SAFE_CPU} when it has AVX-512)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("count_kernel_instructions.py: valgrind is not on PATH", file=sys.stderr)
        sys.exit(2)
    with tempfile.TemporaryDirectory() as work:
        cpu_name, cpu_features = compile_target(args.cpu)
        env = dict(os.environ, NUMBA_CPU_NAME=cpu_name, NUMBA_CPU_FEATURES=cpu_features, PYTHONHASHSEED="0",
                   NUMBA_CACHE_DIR=os.path.join(work, "numba"))
        memory = os.path.abspath(args.memory) if args.memory else ""
        child = [sys.executable, "-c", CHILD, args.stream, str(args.requests), args.preset, memory]
        subprocess.run([*child[:3], args.stream, "1000", args.preset, memory], env=env,
                       check=True)  # compile outside valgrind
        out = os.path.join(work, "callgrind.out")
        branch_sim = ["--branch-sim=yes"] if args.branches else []
        subprocess.run(["valgrind", "--tool=callgrind", *branch_sim, "--toggle-collect=call_cfunc*",
                        f"--callgrind-out-file={out}", *child],
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as fh:
            # events: Ir, then with --branches Bc Bcm Bi Bim (conditional and indirect branches, mispredicted)
            counts = [int(v) for v in re.search(r"^summary: (.+)$", fh.read(), re.MULTILINE).group(1).split()]
    per_request = [v / args.requests for v in counts]
    line = (f"{args.memory or args.preset} {args.stream}, compiled for {cpu_name}: "
            f"{per_request[0]:,.0f} kernel instructions per request")
    if args.branches:
        line += (f", {per_request[1]:,.0f} conditional branches, {per_request[2]:.1f} mispredicted "
                 f"(+{per_request[4]:.1f} indirect)")
    print(f"{line} ({args.requests:,} requests)")


if __name__ == "__main__":
    main()
