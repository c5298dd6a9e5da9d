"""The packages (setup.cfg holds everything else): the framework ``xruntime/`` and the
shipped services, the folder ``services/`` installed as the package ``xruntime_services``
(a folder of the charter's layout, under a name no other distribution takes;
docs/architecture.md says why)."""

from setuptools import find_packages, setup

SERVICES = "xruntime_services"

setup(
    packages=find_packages(include=["xruntime", "xruntime.*"])
    + [SERVICES]
    + [f"{SERVICES}.{name}" for name in find_packages("services")],
    package_dir={SERVICES: "services"},
)
