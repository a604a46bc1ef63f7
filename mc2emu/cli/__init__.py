"""The command line of mc2emu (`python -m mc2emu.run`): options, the scenario registry, the case runner,
statistics from the event stream, the report table, and dump / replay files. See docs/cli.md."""
