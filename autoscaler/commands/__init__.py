"""The command line's sub-commands that sit above more than one engine: each module registers its arguments
and, when run, hands them to its engine. Imports nothing heavy at module level: ``autoscaler <cmd> --help``
loads no source, client or policy model (tests/test_startup.py).
"""
