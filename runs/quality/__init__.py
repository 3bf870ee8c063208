"""The quality lab: audits of an environment version (hack probes, oracle, determinism, verifier
regression, difficulty) and version A/B comparisons. Figures live in `report.py`; state changes in
`services.py`; reads in `selectors.py`."""
