#!/usr/bin/env python3
"""Run one ICRL experiment. With no arguments: the embedded demo. See README.md or --help."""

import signal
import sys

from icrl.infra import threads

threads.apply()  # torch's threads sleep while they wait (icrl/infra/threads.py): before torch loads

# A stop during the imports (numpy turns a Ctrl-C inside its C import into an ImportError) is
# held until they are done, then honoured in one line: nothing was written yet.
_stops = []
_held = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
for _s, _h in _held.items():
    if _h is not signal.SIG_IGN:
        signal.signal(_s, lambda signum, frame: _stops.append(signum))
try:
    from icrl.infra import plugins

    with plugins.start(sys.argv[1:]):  # first: what plugins register is in --help, choices and the run configuration
        from icrl.cli.run import main
except KeyboardInterrupt:
    _stops.append(signal.SIGINT)
if _stops:
    print("interrupted while starting; nothing was written", file=sys.stderr)
    sys.exit(128 + int(_stops[0]))
for _s, _h in _held.items():
    signal.signal(_s, _h)

if __name__ == "__main__":
    sys.exit(main())
