"""icrl.sweep.worker: a Ray worker process imports it before it loads the driver's plugins."""

import subprocess
import sys


def test_importing_the_worker_builds_no_run_configuration():
    # a plugin's flags join the run configuration only when it loads first (infra.plugins refuses
    # one that comes after icrl.config): the worker's module must leave icrl.config unimported
    code = "import sys, icrl.sweep.worker; print('icrl.config' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
