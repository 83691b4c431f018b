"""Build step that pyproject.toml cannot express: ship src/nexus-lm-eval.pth into site-packages.

setuptools has no option for a top-level .pth file (package data lands inside a package), and a
.pth file works only at the top of site-packages. The file makes lm-eval's own `lm_eval --model nexus`
find our model (see src/_nexus_lm_eval_hook.py). Two places, because the two install kinds differ:

- a regular wheel (`pip install .`): build_lib is the wheel's root, which pip unpacks into
  site-packages, so copying the file there is enough;
- an editable install (`pip install -e .`, what CI uses): setuptools' editable_wheel discards
  build_lib and puts only its own `__editable__.*.pth` path file into the wheel, but it runs this
  command with `editable_mode` set and points the `install` command's `install_lib` at the root of the
  editable wheel it is packing (where it also writes scripts and data), so the file goes there.

Everything else (metadata, dependencies, scripts) stays in pyproject.toml.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "nexus-lm-eval.pth"


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            dest = self.get_finalized_command("install").install_lib
        else:
            dest = self.build_lib
        self.copy_file(os.path.join("src", PTH), os.path.join(dest, PTH), preserve_mode=0)


setup(cmdclass={"build_py": build_py_with_pth})
