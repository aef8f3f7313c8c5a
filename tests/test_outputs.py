"""Every command that writes a file, held to archsim.outputs' rules: an input is never overwritten (also
through a symlink or hard link), an unwritable or wrong-kind output is one line and exit 2 before anything
runs, an interrupted command leaves nothing behind and an old output untouched, files are created 0644."""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from archsim import outputs as outputs_module
from archsim.cli import main
from archsim.errors import ArchsimError
from archsim.outputs import OutputPlan
from tests.conftest import DRAMSIM3_INI, REPO, tiered

pytestmark = pytest.mark.system

KERNELS = REPO / "isa" / "kernels"
OUTPUT_PARAMS = {"output", "json_path", "plot_path", "requests_path", "timeline_path"}  # file outputs' parameters
HAVE_TORCH = importlib.util.find_spec("torch") is not None


@dataclass(frozen=True)
class Command:
    """One command with a file output: `args(tmp, out)` its argument list; `input` the input file (in tmp)
    that may be given as the output, None when every input is a name (a preset)."""

    name: str
    args: object  # Callable[[Path, str], list[str]]
    input: str | None
    suffix: str = ".out"


def _inputs(tmp: Path) -> None:
    """Copies of the inputs in tmp: a test that failed to refuse must not overwrite a shipped file."""
    shutil.copy(KERNELS / "gqa_decode.s", tmp / "k.s")
    shutil.copy(KERNELS / "common.inc", tmp / "common.inc")
    shutil.copy(KERNELS / "contiguous.inc", tmp / "contiguous.inc")
    shutil.copy(REPO / "configs" / "memory" / "hbm2.yaml", tmp / "hbm2.yaml")
    shutil.copy(REPO / "traces" / "tiny-llama_chat.npz", tmp / "logical.npz")
    shutil.copy(DRAMSIM3_INI, tmp / "hbm2.ini")
    shutil.copy(REPO / "tests" / "data" / "report_stats.json", tmp / "stats.json")
    (tmp / "t.trace").write_text("".join(f"{64 * i:#x} READ {2 * i}\n" for i in range(50)))
    result = CliRunner().invoke(main, ["isa", "asm", str(tmp / "k.s"), "-o", str(tmp / "k.bin")])
    assert result.exit_code == 0, result.output


def _pnm(tmp: Path, out: str) -> list[str]:
    return ["pnm", "run", "--kernel", str(tmp / "k.s"), "--memory", str(REPO / "configs/memory/hbm3.yaml"),
            "--shape", "heads=8,kv_heads=2,head_dim=128,context=256,batch=1", "--units", "2", "--quiet",
            "--json", out]


GPU_SHAPE = "hidden=4096,heads=32,kv_heads=8,ffn=14336"
SMALL_SYSTEM = ["gpu-hbm", "--workload", "llama3-8b-b1", "--contexts", "4K", "--quiet"]
SMALL_SERVE = ["gpu-hbm", "--scenario", "multiturn", "--requests", "5", "--quiet"]
COMMANDS = [
    Command("replay --json", lambda t, o: ["replay", str(t / "t.trace"), "--memory", str(t / "hbm2.yaml"),
                                           "--quiet", "--json", o], "t.trace", ".json"),
    Command("replay --timeline", lambda t, o: ["replay", str(t / "t.trace"), "--memory", str(t / "hbm2.yaml"),
                                               "--quiet", "--timeline", o], "t.trace", ".json"),
    Command("serve --timeline", lambda t, o: ["serve", *SMALL_SERVE, "--timeline", o], None, ".json"),
    Command("report -o", lambda t, o: ["report", str(t / "stats.json"), "-o", o], "stats.json", ".html"),
    Command("compare --json", lambda t, o: ["compare", *SMALL_SYSTEM, "--json", o], None, ".json"),
    Command("compare --plot", lambda t, o: ["compare", *SMALL_SYSTEM, "--plot", o], None, ".png"),
    Command("simulate --json", lambda t, o: ["simulate", *SMALL_SYSTEM, "--json", o], None, ".json"),
    Command("plan --json", lambda t, o: ["plan", *SMALL_SYSTEM[:3], "--contexts", "4K", "--quiet", "--json", o],
            None, ".json"),
    Command("plan --plot", lambda t, o: ["plan", *SMALL_SYSTEM[:3], "--contexts", "4K", "--quiet", "--plot", o],
            None, ".png"),
    Command("config import-dramsim3 -o", lambda t, o: ["config", "import-dramsim3", str(t / "hbm2.ini"), "-o", o],
            "hbm2.ini", ".yaml"),
    Command("trace convert -o", lambda t, o: ["trace", "convert", str(t / "logical.npz"), "--to", "native",
                                              "-o", o], "logical.npz", ".npz"),
    Command("trace merge -o", lambda t, o: ["trace", "merge", str(t / "t.trace"), str(t / "t.trace"), "-o", o],
            "t.trace", ".npz"),
    Command("trace generate -o", lambda t, o: ["trace", "generate", "--model", "tiny-llama", "--workload",
                                               "decode", "--context", "16", "-o", o], None, ".npz"),
    Command("trace from-scenario -o", lambda t, o: ["trace", "from-scenario", "multiturn", "--requests", "20",
                                                    "-o", o], None, ".jsonl"),
    Command("isa asm -o", lambda t, o: ["isa", "asm", str(t / "k.s"), "-o", o], "k.s", ".bin"),
    Command("isa disasm -o", lambda t, o: ["isa", "disasm", str(t / "k.bin"), "-o", o], "k.bin", ".s"),
    Command("pnm run --json", _pnm, "k.s", ".json"),
    Command("pnm run --timeline", lambda t, o: [*_pnm(t, o)[:-2], "--timeline", o], "k.s", ".json"),
    Command("compare --timeline", lambda t, o: ["compare", *SMALL_SYSTEM, "--timeline", o], None, ".json"),
    Command("simulate --timeline", lambda t, o: ["simulate", *SMALL_SYSTEM, "--timeline", o], None, ".json"),
    Command("gpu predict --json", lambda t, o: ["gpu", "predict", "--shape", GPU_SHAPE, "--tokens", "1,16", "--tp",
                                                "1,2", "--json", o], None, ".json"),
    Command("serve --json", lambda t, o: ["serve", *SMALL_SERVE, "--json", o], None, ".json"),
    Command("serve --plot", lambda t, o: ["serve", *SMALL_SERVE, "--plot", o], None, ".png"),
    Command("serve --requests-out", lambda t, o: ["serve", *SMALL_SERVE, "--requests-out", o], None, ".jsonl"),
]
if HAVE_TORCH:
    COMMANDS.append(Command("capture -o", lambda t, o: ["capture", "--model", "tiny-llama", "--prompt-tokens", "4",
                                                        "--decode-steps", "1", "-o", o], None, ".npz"))
IDS = [c.name for c in COMMANDS]


def _invoke(args: list[str]):  # noqa: ANN202 - click's Result
    return CliRunner().invoke(main, args)


def _one_error_line(result, *needles: str) -> str:  # noqa: ANN001
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("archsim: error: ") and "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _files(tmp: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in tmp.iterdir() if p.is_file() and not p.is_symlink()}


def _leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()):  # noqa: ANN202 - an iterator
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # the lazily loaded commands too
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from _leaf_commands(command, (*prefix, name))
        else:
            yield " ".join((*prefix, name)), command


def test_every_command_with_a_file_output_is_listed() -> None:
    """A new output option must join COMMANDS, and so the rules below: every command is scanned."""
    found = {f"{path} {param.opts[0]}" for path, command in _leaf_commands(main) for param in command.params
             if isinstance(param.type, click.Path) and param.name in OUTPUT_PARAMS}
    listed = {c.name for c in COMMANDS} | (set() if HAVE_TORCH else {"capture -o"})
    assert found == listed


@pytest.mark.parametrize("command", tiered(COMMANDS, 3), ids=IDS)
def test_success_writes_mode_0644_and_no_temp_files(tmp_path: Path, command: Command) -> None:
    _inputs(tmp_path)
    before = set(os.listdir(tmp_path))
    out = tmp_path / f"result{command.suffix}"
    old = os.umask(0o022)
    try:
        result = _invoke(command.args(tmp_path, str(out)))
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert out.stat().st_mode & 0o777 == 0o644
    assert set(os.listdir(tmp_path)) - before == {out.name}  # no temp or probe file left beside it


@pytest.mark.parametrize("command", tiered([c for c in COMMANDS if c.input], 3),
                         ids=[c.name for c in COMMANDS if c.input])
@pytest.mark.parametrize("link", ["same", "symlink", "hardlink", "dotted"])
def test_an_input_given_as_the_output_is_refused(tmp_path: Path, command: Command, link: str) -> None:
    _inputs(tmp_path)
    source = tmp_path / command.input
    out = {"same": source, "dotted": tmp_path / "." / command.input}.get(link, tmp_path / f"alias{source.suffix}")
    if link == "symlink":
        out.symlink_to(source)
    elif link == "hardlink":
        os.link(source, out)
    before = _files(tmp_path)
    _one_error_line(_invoke(command.args(tmp_path, str(out))), str(out), "input")
    assert _files(tmp_path) == before


@pytest.mark.parametrize("command", tiered(COMMANDS, 3), ids=IDS)
@pytest.mark.parametrize("where", ["proc", "directory", "under-a-file", "device", "empty"])
def test_an_unwritable_output_is_one_line_and_exit_2(tmp_path: Path, command: Command, where: str) -> None:
    _inputs(tmp_path)
    out = {"proc": f"/proc/archsim-test{command.suffix}", "directory": str(tmp_path),
           "under-a-file": str(tmp_path / "k.s" / f"x{command.suffix}"), "device": "/dev/null", "empty": ""}[where]
    before = _files(tmp_path)
    _one_error_line(_invoke(command.args(tmp_path, out)))
    assert _files(tmp_path) == before


@pytest.mark.parametrize("command", tiered(COMMANDS, 3), ids=IDS)
def test_ctrl_c_while_writing_leaves_the_old_output_and_nothing_else(tmp_path: Path, command: Command,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _inputs(tmp_path)
    out = tmp_path / f"result{command.suffix}"
    out.write_bytes(b"old contents\n")
    before = _files(tmp_path)

    def interrupted() -> int:  # called once a temp file has been fully written
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs_module, "file_mode", interrupted)
    result = _invoke(command.args(tmp_path, str(out)))
    assert result.exit_code != 0 and isinstance(result.exception, (KeyboardInterrupt, SystemExit))
    assert _files(tmp_path) == before and sorted(os.listdir(tmp_path)) == sorted(before)


def test_compare_refuses_a_plot_suffix_matplotlib_cannot_write_before_running(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import archsim.system.report as report

    monkeypatch.setattr(report, "run_comparison", lambda *a: pytest.fail("ran before checking its outputs"))
    out = tmp_path / "x.txt"
    _one_error_line(_invoke(["compare", *SMALL_SYSTEM, "--json", str(tmp_path / "a.json"), "--plot", str(out)]),
                    str(out), "--plot", "matplotlib")
    assert list(tmp_path.iterdir()) == []


def test_compare_writes_both_outputs_or_neither(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import archsim.system.report as report

    def broken_plot(*_args: object) -> None:
        raise ArchsimError("the plot failed", file="x.png")

    monkeypatch.setattr(report, "plot", broken_plot)
    result = _invoke(["compare", *SMALL_SYSTEM, "--json", str(tmp_path / "a.json"), "--plot", str(tmp_path / "a.png")])
    _one_error_line(result, "the plot failed")
    assert list(tmp_path.iterdir()) == []


def test_the_same_path_for_two_outputs_is_refused(tmp_path: Path) -> None:
    out = str(tmp_path / "a.png")
    _one_error_line(_invoke(["compare", *SMALL_SYSTEM, "--json", out, "--plot", out]), out, "--json")


def test_a_failed_rename_restores_the_outputs_already_moved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text("old a\n")
    plan = OutputPlan()
    plan.add(first, "--a")
    plan.add(second, "--b")
    plan.write(first, lambda tmp: tmp.write_text("new a\n"))
    plan.write(second, lambda tmp: tmp.write_text("new b\n"))
    real_replace = os.replace
    calls = []

    def replace(src: object, dst: object) -> None:
        calls.append(dst)
        if Path(dst) == second:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(outputs_module.os, "replace", replace)
    with pytest.raises(OSError):
        plan.commit()
    assert first.read_text() == "old a\n" and not second.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_missing_directories_are_created_at_commit_and_removed_on_failure(tmp_path: Path) -> None:
    out = tmp_path / "new" / "deeper" / "a.json"
    plan = OutputPlan()
    plan.add(out, "--json")
    assert not (tmp_path / "new").exists()  # checking creates nothing

    def failing(_tmp: Path) -> None:
        raise RuntimeError("writer failed")

    plan.write(out, failing)
    with pytest.raises(RuntimeError):
        plan.commit()
    assert list(tmp_path.iterdir()) == []
    plan.write(out, lambda tmp: tmp.write_text("{}\n"))
    plan.commit()
    assert out.read_text() == "{}\n"


def test_json_outputs_name_shipped_files_by_repository_path(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    assert _invoke(["compare", *SMALL_SYSTEM, "--json", str(out)]).exit_code == 0
    text = out.read_text()
    assert '"configs/systems/gpu-hbm.yaml"' in text and '"configs/workloads/llama3-8b-b1.yaml"' in text
    assert str(REPO) not in text
