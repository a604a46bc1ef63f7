"""Fault-injection stress drivers: seeded scenarios run as MPI jobs through the operators and judged against
the diagnosis each injected fault must produce. A layer above `ops` (it calls them); `check/` holds the
observers only."""
