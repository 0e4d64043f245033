"""The fault-injection suite: the controller against an API server and metric sources that fail.

Each scenario is marked ``@pytest.mark.fault("<kind>")``; ``python -m tests.faults`` counts them by kind
(the figure the README reports). Scenarios run on virtual time (looptime) against the emulated API server
(``tests.kube.emulator``) and assert what the controller promises under faults: no scale-down on unknown
data, no double action, no stranded training, other policies keep being evaluated, health tells the truth.
"""
