"""archsim.config.yaml_files.read_yaml: parsed once per file version (a sweep builds the same configs at every
point), each caller's tree its own, and the same trees and error lines from libyaml's parser as from PyYAML's."""

from __future__ import annotations

import os

import pytest
import yaml

from archsim.config import yaml_files
from archsim.config.yaml_files import read_yaml
from archsim.errors import ConfigError
from tests.conftest import REPO

pytestmark = pytest.mark.unit


@pytest.fixture
def parses(monkeypatch):
    count = []
    real = yaml_files._parse

    def counted(text, file):
        count.append(file)
        return real(text, file)

    monkeypatch.setattr(yaml_files, "_parse", counted)
    return count


def test_a_file_is_parsed_once_and_every_caller_gets_its_own_tree(tmp_path, parses):
    path = tmp_path / "a.yaml"
    path.write_text("system:\n  pool: {devices: 8, pnm: {sram: 96KiB}}\n  list: [1, 2]\n")
    first = read_yaml(path)
    first["system"]["pool"]["devices"] = 1  # what an override does to the tree it was given
    first["system"]["list"].append(3)
    assert read_yaml(path) == {"system": {"pool": {"devices": 8, "pnm": {"sram": "96KiB"}}, "list": [1, 2]}}
    assert read_yaml(str(path)) is not read_yaml(str(path))
    assert parses == [str(path)]  # the str and Path spellings name one file the same way


def test_an_edited_file_is_read_again(tmp_path, parses):
    path = tmp_path / "a.yaml"
    path.write_text("a: 1\n")
    assert read_yaml(path) == {"a": 1}
    stat = path.stat()
    path.write_text("a: 2\n")  # the same size, inode and (put back) mtime: only the text tells
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert read_yaml(path) == {"a": 2}
    assert len(parses) == 2


def test_the_cache_is_bounded(tmp_path, parses, monkeypatch):
    monkeypatch.setattr(yaml_files, "_PARSED", {})
    monkeypatch.setattr(yaml_files, "_PARSED_MAX", 3)
    monkeypatch.setattr(yaml_files, "_PARSED_MAX_CHARS", 20)
    for i in range(5):
        (tmp_path / f"{i}.yaml").write_text(f"a: {i}\n")
        assert read_yaml(tmp_path / f"{i}.yaml") == {"a": i}
    assert len(yaml_files._PARSED) == 3
    big = tmp_path / "big.yaml"
    big.write_text("b: " + "x" * 30 + "\n")
    assert read_yaml(big) == read_yaml(big) == {"b": "x" * 30}
    assert len(parses) == 7 and len(yaml_files._PARSED) == 3  # the big one parsed at each read, never kept


@pytest.mark.parametrize("relative", ["configs/systems/g25.yaml", "configs/memory/hbm3e.yaml",
                                      "configs/energy/default.yaml", "configs/gpus/h100.yaml",
                                      "configs/pnm/default.yaml", "configs/sweeps/dse-pnm.yaml"])
def test_shipped_configs_read_as_pyyaml_reads_them(relative):
    path = REPO / relative
    assert read_yaml(path) == yaml.safe_load(path.read_text())


@pytest.mark.parametrize(("text", "message"), [
    ("a: 1\nb:\n  c: 2\n  c: 3\n", "b.c (line 4): key 'c' given twice (first on line 3)"),
    ("a: [1, 2\nb: 3\n", "line 2: not valid YAML: expected ',' or ']', but got ':'"),
    ("a: 1\n  b: 2\n", "line 2: not valid YAML: mapping values are not allowed here"),
    ("a: 1\n---\nb: 2\n", "line 2: not valid YAML: but found another document"),
])
def test_bad_yaml_is_the_python_parsers_line(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_yaml(path)
    assert err.value.render().endswith(message), err.value.render()
    with pytest.raises(ConfigError):  # errors are not remembered as trees
        read_yaml(path)


def test_an_empty_file_is_none(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing\n")
    assert read_yaml(path) is None
