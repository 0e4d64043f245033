"""Dry-run replay of a policy over recorded metric traces (Prometheus query_range JSON or CSV).

``traces`` reads the files, ``engine`` feeds them to ``autoscaler.core.engine.decide`` one evaluation period
at a time (``recorded`` or ``whatif``), ``report`` writes ``decisions.jsonl``/``summary.json`` and the table,
``plot`` the PNG, ``command`` is ``autoscaler replay``.

Deliberately not here: any decision logic (every decision is the core's), and any network access (nothing is
contacted; Prometheus dumps are files).
"""
