"""Build step that maps the repository's top-level data folders into the wheel (archsim/_data/...).

configs/, isa/ and traces/ stay at the top of the repository; a wheel or a plain `pip install .` carries a
copy as package data, which archsim.resources finds through importlib.resources. An editable install reads
them in place, so nothing is copied then.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

DATA_DIRS = ("configs", "isa", "traces")


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for name in DATA_DIRS:
            self.copy_tree(str(Path(__file__).parent / name), str(Path(self.build_lib) / "archsim" / "_data" / name))


setup(cmdclass={"build_py": BuildPyWithData})
