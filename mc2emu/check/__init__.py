"""Checkers: observers of the emulated devices that turn hazards into diagnoses (deadlocks across ranks,
pairing, happens-before reads)."""
