"""Package layout that pyproject.toml alone cannot express.

examples/ ships as the ``stave_examples`` package, so ``stave demo`` and ``stave bench`` run the same
plain scripts a user reads in the repository, whether stave is installed from a clone or a wheel.
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages("src") + ["stave_examples"],
    package_dir={"": "src", "stave_examples": "examples"},
)
