"""A built wheel works on its own: installed with --no-deps into a fresh venv (--system-site-packages for
numpy, numba and the rest), `compare`, `pnm run` and `replay` run from a directory outside the repository
and find configs/, isa/ and traces/ inside the package. Each runs twice: the second run is warm, so numba's
cache was written beside the installed modules and is read back (nothing compiles at install time and no
cache ships in the wheel)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.system, pytest.mark.slow]
# numba's in-tree cache lies beside the installed modules (site-packages is writable in a venv); a read-only
# install falls back to numba's user-wide cache directory by itself, so NUMBA_CACHE_DIR is not set here
TIMEOUT_S = 3600
SKIP = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache",
                              ".hypothesis", ".benchmarks", "out", "*.nbi", "*.nbc")


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(the venv's bin directory, an environment without this checkout on sys.path)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"  # a clean copy: building writes build/ and *.egg-info beside the sources
    shutil.copytree(REPO, source, ignore=SKIP, symlinks=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR")}
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"),
          str(source)], root, env)
    wheel = next((root / "dist").glob("archsim-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for shipped in ("archsim/_data/configs/systems/g25.yaml", "archsim/_data/isa/kernels/gqa_decode.s",
                    "archsim/_data/traces/kv_decode_hbm3.npz", "archsim/dram/standards/HBM3.yaml",
                    "archsim/_data/configs/scenarios/multiturn.yaml",
                    "archsim/_data/configs/scenarios/mooncake_output_lengths.csv",
                    "archsim/_data/traces/mooncake_sample.jsonl", "archsim/_data/traces/LICENSE-mooncake-APACHE"):
        assert shipped in names
    assert not [n for n in names if n.endswith((".nbi", ".nbc", ".pyc"))]  # no compiled code or cache ships
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(root / "venv")
    bin_dir = root / "venv" / "bin"
    _run([sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install", "--no-deps", "--no-index",
          str(wheel)], root, env)
    return bin_dir, env


def _cache_files(site: Path) -> set[str]:
    return {str(p.relative_to(site)) for p in site.rglob("*.nbi")}


def test_the_installed_wheel_runs_compare_pnm_and_replay_outside_the_repository(installed, tmp_path: Path) -> None:
    bin_dir, env = installed
    python = str(bin_dir / "python")
    where = _run([python, "-c", "import archsim, archsim.resources as r; print(archsim.__file__); "
                  "print(r.data_root())"], tmp_path, env).stdout.split()
    package = Path(where[0]).parent
    assert str(bin_dir.parent) in where[0] and Path(where[1]) == package / "_data"
    data = package / "_data"
    archsim = str(bin_dir / "archsim")
    commands = [
        [archsim, "compare", "g25", "gpu-hbm", "--workload", "llama3-8b-b1", "--contexts", "4K", "--quiet",
         "--json", "compare.json"],
        [archsim, "pnm", "run", "--kernel", str(data / "isa/kernels/gqa_decode.s"), "--shape",
         "heads=8,kv_heads=2,head_dim=128,context=512,batch=1", "--units", "4", "--quiet", "--json", "pnm.json"],
        [archsim, "replay", str(data / "traces/kv_decode_hbm3.npz"), "--memory", str(data / "configs/memory/hbm3.yaml"),
         "--quiet", "--json", "replay.json"],
        [archsim, "serve", "gpu-hbm", "--scenario", "multiturn", "--requests", "20", "--quiet", "--json", "serve.json"],
    ]
    runs = []
    for attempt in ("cold", "warm"):
        for command in commands:
            _run(command, tmp_path, env)
        runs.append({name: json.loads((tmp_path / name).read_text())
                     for name in ("compare.json", "pnm.json", "replay.json", "serve.json")})
        if attempt == "cold":
            cached = _cache_files(package)
            assert cached, "numba wrote no cache beside the installed package"
    assert _cache_files(package) == cached  # the warm runs compiled nothing new: every kernel came from the cache
    cold, warm = runs
    assert cold["compare.json"] == warm["compare.json"]
    assert cold["serve.json"] == warm["serve.json"] and cold["serve.json"]["results"][0]["status"] == "ok"
    assert cold["serve.json"]["scenario_file"] == "configs/scenarios/multiturn.yaml"
    # warm, the replay's kernel came from numba's cache (cold it may too, when pnm run compiled the same variant)
    assert warm["replay.json"]["sim"]["kernel_cache"] == "hit"
    assert cold["replay.json"]["memory"] == warm["replay.json"]["memory"]
    text = (tmp_path / "compare.json").read_text()
    assert '"configs/systems/g25.yaml"' in text and "site-packages" not in text
