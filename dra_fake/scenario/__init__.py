"""`dra-fake scenario FILE`: a timed scenario replayed against a cluster (pods with GPU claims, faults,
drains, attach failures, load changes), and a report of what the scheduler and the controllers did
(docs/scenarios.md).

`model` (the file, pure), `report` (observations to the report, pure), `run` (the API calls and
the pod watch), `cli` (flags, without the kubernetes client).
"""
