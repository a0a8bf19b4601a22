"""Only what pyproject.toml cannot say: the adapters kept at the repository's top (flows/, tasks/,
tracking/, annotation/) are installed under the project's own name (``judgebias.flows`` ...), so an
environment that has judgebias never gains a top-level ``flows`` or ``tasks``."""

from setuptools import find_packages, setup

ADAPTERS = ("flows", "tasks", "tracking", "annotation")

packages = find_packages(include=["judgebias", "judgebias.*"])
for top in ADAPTERS:
    packages += [f"judgebias.{name}" for name in find_packages(include=[top, f"{top}.*"])]

setup(packages=packages, package_dir={f"judgebias.{top}": top for top in ADAPTERS})
