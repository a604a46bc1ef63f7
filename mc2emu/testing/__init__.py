"""The pytest kit for users' own kernel tests (a pytest plugin: `mc2emu.testing.plugin`, entry point
`pytest11`), above the operators in the layers: it only uses them.

Helpers (`mc2emu.testing.asserts`): `assert_no_hazards`, `expect_hazard(name)` (collective: the hazard must be
reported on some rank, or on the given ranks), `hazard_names`, `assert_golden` (the project's ULP rule,
`mc2emu.numerics.compare`), `perturb_seeds` (a parametrizer: unperturbed plus seeded `PerturbPolicy` runs).
Fixtures (`mc2emu.testing.plugin`): `mc2_comm` (a communicator per test, freed at teardown), `mc2_device`,
`mc2_make_world` (Device + CommWorld per call, closed at teardown), `mc2_run_kernel` (`run_kernel` on the
test's communicator and deadline); under mpirun a test failing on one rank aborts every rank.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mc2emu.testing.asserts import (
        HazardCapture,
        assert_golden,
        assert_no_hazards,
        expect_hazard,
        hazard_names,
        perturb_seeds,
    )

__all__ = ["HazardCapture", "assert_golden", "assert_no_hazards", "expect_hazard", "hazard_names", "perturb_seeds"]


def __getattr__(name: str) -> Any:
    """The helpers load on first use: the plugin (auto-loaded by every pytest run) starts no MPI by itself."""
    if name in __all__:
        from mc2emu.testing import asserts

        return getattr(asserts, name)
    raise AttributeError(f"module 'mc2emu.testing' has no attribute {name!r}")
