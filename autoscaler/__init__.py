"""autoscaler: event-driven autoscaling and preemption for LLM serving and training on shared accelerators.

Packages, from the pure centre outwards (the layering is enforced by import-linter, see pyproject.toml):

- ``autoscaler.core``: the pure decision core, ``decide(observation, state, now) -> (decisions, state)``.
- ``autoscaler.policyfile``: the YAML policy language: loading with file/line positions, validation, JSON Schema.
- ``autoscaler.sources``: metric sources (Prometheus/GMP, Cloud Monitoring, pod scraping).
- ``autoscaler.replay``, ``autoscaler.sim``, ``autoscaler.controller``: the three places the core runs.
- ``autoscaler.cli``: the ``autoscaler`` command.
"""

__version__ = "0.1.0"
