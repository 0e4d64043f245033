"""The pure decision core.

Every decision the project makes comes from here, through ``engine.decide(policy, observation, state, now)``:
a function of a snapshot of the world (``model.Observation``), explicit state from the previous evaluation
(``model.PolicyState``) and the current time passed in as a number. It returns the decisions and the new
state. Replay, simulation and the live controller call the very same function.

Deliberately absent: any I/O, any clock, randomness, logging, Kubernetes or HTTP clients. import-linter
enforces this (see ``pyproject.toml``).
"""
