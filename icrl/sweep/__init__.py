"""Sweeps: many run_experiment.py runs in one process (run_sweep.py).

grid.py expands presets, TOML files and --grid options into argument lists; presets.py holds
the published command lists; lockstep.py runs experiments together on one loaded backend;
runner.py is the command line.
"""
